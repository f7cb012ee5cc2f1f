#include "proto/net/checksum.h"

#include <immintrin.h>

#include <bit>
#include <cstring>

namespace snic::net {

namespace {

// One's complement addition is byte-order independent (RFC 1071, 2.B): native 32-bit halves
// of 64-bit loads are summed in 64-bit accumulators, and the folded result is swapped once at
// the end. `Copy`: the bytes are also stored at `dst` as they are read.
template <bool Copy>
std::uint64_t sum_scalar(std::uint8_t* dst, const std::uint8_t* p, std::size_t n) noexcept {
    std::uint64_t acc = 0;
    for (; n >= 8; p += 8, n -= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        if constexpr (Copy) {
            std::memcpy(dst, &w, 8);
            dst += 8;
        }
        acc += w & 0xffffffffu;
        acc += w >> 32;
    }
    for (; n >= 2; p += 2, n -= 2) {
        std::uint16_t w;
        std::memcpy(&w, p, 2);
        if constexpr (Copy) {
            std::memcpy(dst, &w, 2);
            dst += 2;
        }
        acc += w;
    }
    if (n == 1) {
        if constexpr (Copy) *dst = p[0];
        const std::uint8_t tail[2] = {p[0], 0};
        std::uint16_t w;
        std::memcpy(&w, tail, 2);
        acc += w;
    }
    return acc;
}

// The same 32 bytes a step with AVX2: each 64-bit lane adds its low and high halves.
template <bool Copy>
__attribute__((target("avx2"))) std::uint64_t sum_avx2(std::uint8_t* dst, const std::uint8_t* p,
                                                       std::size_t n) noexcept {
    const __m256i low = _mm256_set1_epi64x(0xffffffff);
    __m256i a0 = _mm256_setzero_si256();
    __m256i a1 = _mm256_setzero_si256();
    for (; n >= 64; p += 64, n -= 64) {
        const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
        if constexpr (Copy) {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v0);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), v1);
            dst += 64;
        }
        a0 = _mm256_add_epi64(a0, _mm256_and_si256(v0, low));
        a1 = _mm256_add_epi64(a1, _mm256_srli_epi64(v0, 32));
        a0 = _mm256_add_epi64(a0, _mm256_and_si256(v1, low));
        a1 = _mm256_add_epi64(a1, _mm256_srli_epi64(v1, 32));
    }
    const __m256i a = _mm256_add_epi64(a0, a1);
    alignas(32) std::uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
    // The upper halves cleared before any SSE code runs (the scalar tail, the caller): left
    // dirty, each later SSE instruction pays for the mixed state (docs/CRC.md's vzeroupper).
    _mm256_zeroupper();
    // Each lane grows by under 2^33 per 64 bytes: their sum stays below 2^64 for any range
    // under 2^34 bytes.
    const std::uint64_t acc = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    return acc + sum_scalar<Copy>(dst, p, n);
}

// __builtin_cpu_init first: this may run before libgcc's own constructor has filled in what
// __builtin_cpu_supports reads.
const bool kAvx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
}();

std::uint32_t finish(std::uint64_t acc, std::uint32_t sum) noexcept {
    acc = (acc & 0xffffffffu) + (acc >> 32);
    acc = (acc & 0xffffffffu) + (acc >> 32);
    std::uint16_t folded = csum_fold(static_cast<std::uint32_t>(acc));
    if constexpr (std::endian::native == std::endian::little) {
        folded = static_cast<std::uint16_t>((folded << 8) | (folded >> 8));
    }
    const std::uint64_t total = std::uint64_t{sum} + folded;
    return static_cast<std::uint32_t>((total & 0xffffffffu) + (total >> 32));
}

template <bool Copy>
std::uint32_t run(std::uint8_t* dst, std::span<const std::uint8_t> src,
                  std::uint32_t sum) noexcept {
    // Short ranges (headers) stay scalar: the vector set-up costs more than it saves.
    const std::uint64_t acc = kAvx2 && src.size() >= 128
                                  ? sum_avx2<Copy>(dst, src.data(), src.size())
                                  : sum_scalar<Copy>(dst, src.data(), src.size());
    return finish(acc, sum);
}

}  // namespace

std::uint32_t csum_add(std::span<const std::uint8_t> bytes, std::uint32_t sum) noexcept {
    return run<false>(nullptr, bytes, sum);
}

std::uint32_t csum_copy(std::uint8_t* dst, std::span<const std::uint8_t> src,
                        std::uint32_t sum) noexcept {
    return run<true>(dst, src, sum);
}

}  // namespace snic::net
