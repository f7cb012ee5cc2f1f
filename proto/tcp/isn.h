// Initial sequence numbers per RFC 6528: ISN = M + F(local, remote, key), where M is a
// clock ticking every 4 microseconds and F a keyed hash of the 4-tuple, here SipHash-2-4
// (Aumasson and Bernstein, 2012) with the owner's 128-bit secret. The same hash, with a
// different tag, gives the per-connection timestamp offset RFC 7323 §7.1 recommends.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "proto/crc/siphash.h"
#include "proto/tcp/segment.h"

namespace snic::tcp {

using IsnKey = SipKey;

// RFC 6528 §3: M (now_ns / 4 us) plus the hash of the 4-tuple.
Seq initial_sequence(const IsnKey& key, const Endpoint& local, const Endpoint& remote,
                     std::uint64_t now_ns);

// A fixed, secret offset for this 4-tuple's TSval clock (RFC 7323 §7.1).
std::uint32_t timestamp_offset(const IsnKey& key, const Endpoint& local, const Endpoint& remote);

// SYN cookies (RFC 4987 §3.6): the ISN of a SYN-ACK a listener sends without keeping state,
// which the final ACK hands back (as SEG.ACK - 1) so that the connection can be made then.
// Layout of the 32 bits:
//   31..4  the top 28 bits of SipHash-2-4 (tag 2) over the 4-tuple, the peer's ISN, the
//          time slot and the MSS index: what a forger must guess (1 in 2^28 per try)
//   3      the low bit of the time slot, so the checker knows which slot to hash
//   2..0   the index in kCookieMss of the MSS the peer announced, rounded down
// A cookie is good in the slot it was made in and the next one, never later.
// Nothing else of the SYN survives: window scaling, SACK and timestamps are not offered in a
// cookie's SYN-ACK, so the connection runs without them (Linux hides them in the timestamp
// option; snic does not).
inline constexpr std::array<std::uint16_t, 8> kCookieMss = {536,  1200, 1380, 1440,
                                                            1460, 4036, 8940, 8960};

// The index of the largest kCookieMss entry at most `mss` (0, for 536, when none is: the
// RFC 9293 default every IPv4 host must take).
std::uint8_t cookie_mss_index(std::uint32_t mss);

Seq make_syn_cookie(const IsnKey& key, const Endpoint& local, const Endpoint& remote, Seq peer_isn,
                    std::uint64_t slot, std::uint8_t mss_index);

// The peer MSS a cookie carries when it was made for this 4-tuple and peer ISN in `slot` or
// the slot before; 0 when it was not.
std::uint16_t check_syn_cookie(const IsnKey& key, const Endpoint& local, const Endpoint& remote,
                               Seq peer_isn, Seq cookie, std::uint64_t slot);

}  // namespace snic::tcp
