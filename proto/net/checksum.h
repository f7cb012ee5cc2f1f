// The Internet checksum (RFC 1071) with incremental update (RFC 1624), as used by
// IPv4, ICMP and UDP. Sums are kept unfolded in 32 bits between calls.
#pragma once

#include <cstdint>
#include <span>

namespace snic::net {

// Adds the 16-bit big-endian words of `bytes` to `sum`. Only the last chunk of a
// checksummed range may have an odd length (it is padded with a zero byte).
std::uint32_t csum_add(std::span<const std::uint8_t> bytes, std::uint32_t sum = 0) noexcept;

// csum_add() of `src` while copying it to `dst` (src.size() bytes, not overlapping): one pass
// over the bytes where a copy and a sum would make two.
std::uint32_t csum_copy(std::uint8_t* dst, std::span<const std::uint8_t> src,
                        std::uint32_t sum = 0) noexcept;

// Folds a partial sum to 16 bits (no complement).
constexpr std::uint16_t csum_fold(std::uint32_t sum) noexcept {
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<std::uint16_t>(sum);
}

// The value to store in a checksum field: the complement of the folded sum.
constexpr std::uint16_t csum_finish(std::uint32_t sum) noexcept {
    return static_cast<std::uint16_t>(~csum_fold(sum));
}

// True when a range that includes its checksum field sums to all ones.
inline bool csum_ok(std::span<const std::uint8_t> bytes, std::uint32_t sum = 0) noexcept {
    return csum_fold(csum_add(bytes, sum)) == 0xffff;
}

// RFC 1624 eqn. 3: the new checksum after one 16-bit word changed from old_word to new_word.
constexpr std::uint16_t csum_update(std::uint16_t checksum, std::uint16_t old_word,
                                    std::uint16_t new_word) noexcept {
    std::uint32_t sum = static_cast<std::uint16_t>(~checksum);
    sum += static_cast<std::uint16_t>(~old_word);
    sum += new_word;
    return static_cast<std::uint16_t>(~csum_fold(sum));
}

}  // namespace snic::net
