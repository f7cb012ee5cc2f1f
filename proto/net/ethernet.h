// Ethernet II header.
#pragma once

#include <cstdint>

#include "proto/net/addr.h"
#include "proto/net/byteorder.h"

namespace snic::net {

enum class EtherType : std::uint16_t {
    ipv4 = 0x0800,
    arp = 0x0806,
    vlan = 0x8100,
    ipv6 = 0x86dd,
};

struct EthHdr {
    MacAddr dst;
    MacAddr src;
    Be16 type;
};
static_assert(sizeof(EthHdr) == 14 && alignof(EthHdr) == 1);

inline constexpr std::uint16_t kEthHdrLen = sizeof(EthHdr);
inline constexpr std::uint16_t kEthMinFrame = 60;  // without FCS; shorter frames are padded

inline void write_eth(EthHdr& h, MacAddr dst, MacAddr src, EtherType type) {
    h.dst = dst;
    h.src = src;
    h.type = static_cast<std::uint16_t>(type);
}

}  // namespace snic::net
