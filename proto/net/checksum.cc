#include "proto/net/checksum.h"

#include <bit>
#include <cstring>

namespace snic::net {

// One's complement addition is byte-order independent (RFC 1071, 2.B): sum native
// 16-bit loads in a 64-bit accumulator and swap the folded result once at the end.
std::uint32_t csum_add(std::span<const std::uint8_t> bytes, std::uint32_t sum) noexcept {
    std::uint64_t acc = 0;
    const std::uint8_t* p = bytes.data();
    std::size_t n = bytes.size();
    for (; n >= 8; p += 8, n -= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        acc += w & 0xffffffffu;
        acc += w >> 32;
    }
    for (; n >= 2; p += 2, n -= 2) {
        std::uint16_t w;
        std::memcpy(&w, p, 2);
        acc += w;
    }
    if (n == 1) {
        const std::uint8_t tail[2] = {p[0], 0};
        std::uint16_t w;
        std::memcpy(&w, tail, 2);
        acc += w;
    }
    acc = (acc & 0xffffffffu) + (acc >> 32);
    acc = (acc & 0xffffffffu) + (acc >> 32);
    std::uint16_t folded = csum_fold(static_cast<std::uint32_t>(acc));
    if constexpr (std::endian::native == std::endian::little) {
        folded = static_cast<std::uint16_t>((folded << 8) | (folded >> 8));
    }
    std::uint64_t total = std::uint64_t{sum} + folded;
    return static_cast<std::uint32_t>((total & 0xffffffffu) + (total >> 32));
}

}  // namespace snic::net
