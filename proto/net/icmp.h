// ICMP echo (RFC 792).
#pragma once

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

}  // namespace snic::net
