// Packet sequence numbers: 24-bit counters that wrap (IBA vol 1 §9.7.1). Two PSNs are
// compared by their distance modulo 2^24, read as signed: b is "after" a when it lies in
// the half of the circle that follows a (IBA's valid/duplicate regions split at 2^23).
#pragma once

#include <cstdint>

namespace snic::roce {

inline constexpr std::uint32_t kPsnMask = 0x00ffffff;
inline constexpr std::uint32_t kPsnModulus = 0x01000000;  // 2^24
inline constexpr std::int32_t kPsnHalf = 0x00800000;      // 2^23

// psn + n modulo 2^24.
constexpr std::uint32_t psn_add(std::uint32_t psn, std::uint32_t n) {
    return (psn + n) & kPsnMask;
}

// psn - n modulo 2^24.
constexpr std::uint32_t psn_sub(std::uint32_t psn, std::uint32_t n) {
    return (psn - n) & kPsnMask;
}

// The signed distance a - b, in (-2^23, 2^23]: positive when a is after b.
// Exactly half the circle apart reads as +2^23 ("after"), so that the result is one-valued.
constexpr std::int32_t psn_diff(std::uint32_t a, std::uint32_t b) {
    const auto d = static_cast<std::int32_t>((a - b) & kPsnMask);
    return d > kPsnHalf ? d - static_cast<std::int32_t>(kPsnModulus) : d;
}

constexpr bool psn_lt(std::uint32_t a, std::uint32_t b) {
    return psn_diff(a, b) < 0;
}
constexpr bool psn_le(std::uint32_t a, std::uint32_t b) {
    return psn_diff(a, b) <= 0;
}
constexpr bool psn_gt(std::uint32_t a, std::uint32_t b) {
    return psn_diff(a, b) > 0;
}
constexpr bool psn_ge(std::uint32_t a, std::uint32_t b) {
    return psn_diff(a, b) >= 0;
}

// True when psn lies in the `count` PSNs starting at `first` (first, first+1, ..., wrapping).
constexpr bool psn_in_range(std::uint32_t psn, std::uint32_t first, std::uint32_t count) {
    return ((psn - first) & kPsnMask) < count;
}

static_assert(psn_add(kPsnMask, 1) == 0);
static_assert(psn_diff(0, kPsnMask) == 1);
static_assert(psn_diff(kPsnMask, 0) == -1);
static_assert(psn_diff(kPsnHalf, 0) == kPsnHalf);
static_assert(psn_diff(0, kPsnHalf) == kPsnHalf);

}  // namespace snic::roce
