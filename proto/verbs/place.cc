// place() from 16 bytes on (under 16 it is all in place.h): ascending, non-overlapping stores,
// small ones up to a boundary of the widest vector the CPU has (for a long copy), then
// vectors of 64, 32 or 16 bytes, then 8, 4, 2, 1, each followed by the compiler barrier.
#include "proto/verbs/place.h"

#include <immintrin.h>

namespace snic::verbs {

namespace {

using place_detail::in_order;
using place_detail::put;
using place_detail::under_16;

// Under 16 bytes, smallest piece first: what brings an address to a multiple of 16.
inline void under_16_ascending(std::uint8_t*& d, const std::uint8_t*& s, std::size_t n) {
    if ((n & 1) != 0) put<std::uint8_t>(d, s);
    if ((n & 2) != 0) put<std::uint16_t>(d, s);
    if ((n & 4) != 0) put<std::uint32_t>(d, s);
    if ((n & 8) != 0) put<std::uint64_t>(d, s);
}

inline void put_16(std::uint8_t*& d, const std::uint8_t*& s) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
    d += 16;
    s += 16;
    in_order();
}

__attribute__((target("avx2"))) inline void put_32(std::uint8_t*& d, const std::uint8_t*& s) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    d += 32;
    s += 32;
    in_order();
}

__attribute__((target("avx512f"))) inline void put_64(std::uint8_t*& d, const std::uint8_t*& s) {
    _mm512_storeu_si512(d, _mm512_loadu_si512(s));
    d += 64;
    s += 64;
    in_order();
}

// The bytes before the next multiple of 16 in address, smallest piece first (n is at least
// that many); each vector path then stores its 16 and 32 up to its own boundary.
inline std::size_t align_16(std::uint8_t*& d, const std::uint8_t*& s, std::size_t& n) {
    const std::size_t mis = (0 - reinterpret_cast<std::uintptr_t>(d)) & 15;
    under_16_ascending(d, s, mis);
    n -= mis;
    return (0 - reinterpret_cast<std::uintptr_t>(d)) & 63;  // to a 64-byte boundary
}

void place_sse2(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
    if (n >= 64) align_16(d, s, n);
    for (; n >= 16; n -= 16) put_16(d, s);
    under_16(d, s, n);
}

__attribute__((target("avx2"))) void place_avx2(std::uint8_t* d, const std::uint8_t* s,
                                                std::size_t n) {
    if (n >= 128 && (align_16(d, s, n) & 16) != 0) {
        put_16(d, s);
        n -= 16;
    }
    for (; n >= 32; n -= 32) put_32(d, s);
    if (n >= 16) {
        put_16(d, s);
        n -= 16;
    }
    under_16(d, s, n);
}

__attribute__((target("avx512f"))) void place_avx512(std::uint8_t* d, const std::uint8_t* s,
                                                     std::size_t n) {
    if (n >= 256) {
        const std::size_t rest = align_16(d, s, n);
        if ((rest & 16) != 0) {
            put_16(d, s);
            n -= 16;
        }
        if ((rest & 32) != 0) {
            put_32(d, s);
            n -= 32;
        }
    }
    for (; n >= 64; n -= 64) put_64(d, s);
    if (n >= 32) {
        put_32(d, s);
        n -= 32;
    }
    if (n >= 16) {
        put_16(d, s);
        n -= 16;
    }
    under_16(d, s, n);
}

// Widest first.
std::span<const PlaceVariant> usable() {
    static constexpr PlaceVariant kAll[] = {
        {"avx512", place_avx512}, {"avx2", place_avx2}, {"sse2", place_sse2}};
    const std::size_t first = __builtin_cpu_supports("avx512f") ? 0
                              : __builtin_cpu_supports("avx2")  ? 1
                                                                : 2;
    return std::span<const PlaceVariant>(kAll).subspan(first);
}

const std::span<const PlaceVariant> kUsable = usable();
const auto kPlace = kUsable.front().fn;

}  // namespace

void place_detail::vectors(std::uint8_t* dst, const std::uint8_t* src, std::size_t n) noexcept {
    kPlace(dst, src, n);
}

std::span<const PlaceVariant> place_variants() noexcept {
    return kUsable;
}

}  // namespace snic::verbs
