// ARP for IPv4 over Ethernet (RFC 826).
#pragma once

#include <cstdint>
#include <span>

#include "proto/net/addr.h"
#include "proto/net/byteorder.h"
#include "proto/net/ethernet.h"

namespace snic::net {

enum class ArpOp : std::uint16_t { request = 1, reply = 2 };

struct ArpHdr {
    Be16 htype;  // 1: Ethernet
    Be16 ptype;  // 0x0800: IPv4
    std::uint8_t hlen;
    std::uint8_t plen;
    Be16 op;
    MacAddr sha;
    Be32 spa;
    MacAddr tha;
    Be32 tpa;

    constexpr bool is_ethernet_ipv4() const {
        return htype.host() == 1 && ptype.host() == static_cast<std::uint16_t>(EtherType::ipv4) &&
               hlen == 6 && plen == 4;
    }
};
static_assert(sizeof(ArpHdr) == 28 && alignof(ArpHdr) == 1);

// Writes a broadcast "who has target? tell local" frame into `out` (at least
// kEthMinFrame bytes) and returns its length.
std::size_t build_arp_request(std::span<std::uint8_t> out, MacAddr local_mac, Ipv4Addr local_ip,
                              Ipv4Addr target);

// Turns a received request frame, in place, into the reply "local_ip is at local_mac".
void arp_request_to_reply(EthHdr& eth, ArpHdr& arp, MacAddr local_mac);

}  // namespace snic::net
