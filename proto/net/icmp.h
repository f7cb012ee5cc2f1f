// ICMP (RFC 792): echo, and reading a destination unreachable (with RFC 1191's next-hop MTU).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "proto/net/addr.h"
#include "proto/net/byteorder.h"
#include "proto/net/ethernet.h"
#include "proto/net/ipv4.h"

namespace snic::net {

enum class IcmpType : std::uint8_t { echo_reply = 0, dest_unreachable = 3, echo_request = 8 };

struct IcmpEchoHdr {
    std::uint8_t type;
    std::uint8_t code;
    Be16 checksum;
    Be16 id;
    Be16 seq;
};
static_assert(sizeof(IcmpEchoHdr) == 8 && alignof(IcmpEchoHdr) == 1);

// Turns a received echo request, in place, into its reply: addresses swapped, TTL
// reset, type changed; both checksums updated. `icmp` lies within the IP payload.
void icmp_echo_request_to_reply(EthHdr& eth, Ipv4Hdr& ip, IcmpEchoHdr& icmp);

struct EchoRequest {
    MacAddr src_mac, dst_mac;
    Ipv4Addr src_ip, dst_ip;
    std::uint16_t id = 0, seq = 0;
    std::uint16_t payload_length = 56;  // filled with a byte pattern
};

// Writes an echo request frame into `out` and returns its length, or 0 if `out` is too small.
std::size_t build_icmp_echo_request(std::span<std::uint8_t> out, const EchoRequest& req);

// What a destination unreachable says of the datagram that caused it: the quoted IPv4
// header and the first 8 bytes of its payload (RFC 792), read as a TCP or UDP header's
// ports and, for TCP, the sequence number.
struct IcmpUnreachable {
    std::uint8_t code = 0;       // 1 host, 2 protocol, 3 port, 4 fragmentation needed, ...
    std::uint16_t next_mtu = 0;  // code 4: the next hop's MTU (RFC 1191 §4); 0 from older routers
    Ipv4Addr src, dst;           // the quoted datagram's (src: ours)
    std::uint8_t protocol = 0;   // the quoted datagram's (IpProto)
    std::uint16_t quoted_length = 0;  // the quoted datagram's total length
    std::uint16_t src_port = 0, dst_port = 0;
    std::uint32_t seq = 0;  // TCP: the quoted segment's sequence number
};

// Reads an ICMP message `msg` (type byte to the end of the IP payload; classify() checked
// its checksum). False when it is not a destination unreachable quoting an IPv4 header
// and 8 bytes after it.
bool parse_icmp_unreachable(std::span<const std::uint8_t> msg, IcmpUnreachable& out);

// RFC 1191 §7's plateaus: the MTUs in common use, highest first. 68 is the least MTU
// IPv4 allows (RFC 791), below which no estimate may go (§3).
inline constexpr std::array<std::uint16_t, 11> kMtuPlateaus = {
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
};
inline constexpr std::uint16_t kMinIpv4Mtu = 68;

// The path MTU a fragmentation needed (code 4) tells: its next-hop MTU, or, from a router
// older than RFC 1191 that sends 0, the highest plateau below the quoted datagram's length
// (§5); never below 68. 0 when it tells nothing (not code 4, or a quoted length already at
// the floor).
std::uint16_t frag_needed_mtu(const IcmpUnreachable& u);

}  // namespace snic::net
