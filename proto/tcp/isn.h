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

}  // namespace snic::tcp
