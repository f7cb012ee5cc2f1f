// The RNR NAK timer encoding (IBA vol 1 §9.7.5.2.8, the "RNR NAK Timer Field" table): the
// 5-bit code that an RNR NAK's AETH carries, and a QP's min_rnr_timer attribute holds, for
// how long the requester waits before it sends the refused request again.
#pragma once

#include <array>
#include <cstdint>

namespace snic::roce {

// Microseconds, by code. Code 0 is the longest (655.36 ms); from code 1 (10 us) the values
// grow in steps of x2 then x1.5 (x1.5 then x1.33 at the start), doubling every two codes
// from code 4 on.
inline constexpr std::array<std::uint32_t, 32> kRnrTimerUs = {
    655'360,                                                               // 0: 655.36 ms
    10,      20,     30,      40,      60,      80,      120,     160,     // 1-8
    240,     320,    480,     640,     960,     1'280,   1'920,   2'560,   // 9-16
    3'840,   5'120,  7'680,   10'240,  15'360,  20'480,  30'720,  40'960,  // 17-24
    61'440,  81'920, 122'880, 163'840, 245'760, 327'680, 491'520,          // 25-31
};

inline constexpr std::uint8_t kRnrCodeMask = 0x1f;

// The wait an RNR timer code asks for, in nanoseconds.
constexpr std::uint64_t rnr_timer_ns(std::uint8_t code) {
    return std::uint64_t{kRnrTimerUs[code & kRnrCodeMask]} * 1000;
}

static_assert(rnr_timer_ns(0) == 655'360'000);
static_assert(rnr_timer_ns(1) == 10'000);
static_assert(rnr_timer_ns(31) == 491'520'000);

}  // namespace snic::roce
