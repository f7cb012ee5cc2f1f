// TCP sequence numbers: 32-bit counters compared modulo 2^32 (RFC 9293 §3.4). b is
// "after" a when it lies in the half of the circle that follows a.
//
// Inside the engine, positions in each direction's sequence space are 64-bit offsets from
// the initial sequence number (the SYN is offset 0, the first data byte offset 1), which
// never wrap; seq_of()/offset_of() convert at the wire.
#pragma once

#include <cstdint>

namespace snic::tcp {

using Seq = std::uint32_t;

// The signed distance a - b: positive when a is after b.
constexpr std::int32_t seq_diff(Seq a, Seq b) {
    return static_cast<std::int32_t>(a - b);
}
constexpr bool seq_lt(Seq a, Seq b) {
    return seq_diff(a, b) < 0;
}
constexpr bool seq_le(Seq a, Seq b) {
    return seq_diff(a, b) <= 0;
}
constexpr bool seq_gt(Seq a, Seq b) {
    return seq_diff(a, b) > 0;
}
constexpr bool seq_ge(Seq a, Seq b) {
    return seq_diff(a, b) >= 0;
}
// lo <= s < hi, modulo 2^32.
constexpr bool seq_in(Seq s, Seq lo, Seq hi) {
    return seq_le(lo, s) && seq_lt(s, hi);
}

// The wire sequence number of offset `off` in a space that starts at `isn`.
constexpr Seq seq_of(Seq isn, std::uint64_t off) {
    return static_cast<Seq>(isn + static_cast<Seq>(off));
}
// The offset of wire number `s`, read relative to a known offset `ref` (whose wire number is
// seq_of(isn, ref)): the nearest one, up to 2^31 either way. Negative results clamp to 0.
constexpr std::uint64_t offset_of(Seq isn, std::uint64_t ref, Seq s) {
    const std::int64_t d = seq_diff(s, seq_of(isn, ref));
    return d < 0 && static_cast<std::uint64_t>(-d) > ref ? 0 : ref + static_cast<std::uint64_t>(d);
}

static_assert(seq_lt(0xffffffffu, 0));
static_assert(seq_gt(5, 0xfffffff0u));
static_assert(seq_diff(0x7fffffffu, 0) > 0 && seq_diff(0x80000000u, 0) < 0);
static_assert(offset_of(0xfffffff0u, 0x20, 0x5) == 0x15);

}  // namespace snic::tcp
