#include "proto/net/arp.h"

#include <algorithm>

namespace snic::net {

std::size_t build_arp_request(std::span<std::uint8_t> out, MacAddr local_mac, Ipv4Addr local_ip,
                              Ipv4Addr target) {
    if (out.size() < kEthMinFrame) return 0;
    std::fill_n(out.begin(), kEthMinFrame, std::uint8_t{0});
    auto& eth = *reinterpret_cast<EthHdr*>(out.data());
    auto& arp = *reinterpret_cast<ArpHdr*>(out.data() + kEthHdrLen);
    write_eth(eth, MacAddr::broadcast(), local_mac, EtherType::arp);
    arp.htype = 1;
    arp.ptype = static_cast<std::uint16_t>(EtherType::ipv4);
    arp.hlen = 6;
    arp.plen = 4;
    arp.op = static_cast<std::uint16_t>(ArpOp::request);
    arp.sha = local_mac;
    arp.spa = local_ip.value;
    arp.tha = MacAddr::zero();
    arp.tpa = target.value;
    return kEthMinFrame;
}

void arp_request_to_reply(EthHdr& eth, ArpHdr& arp, MacAddr local_mac) {
    const Be32 local_ip = arp.tpa;
    eth.dst = arp.sha;
    eth.src = local_mac;
    arp.op = static_cast<std::uint16_t>(ArpOp::reply);
    arp.tha = arp.sha;
    arp.tpa = arp.spa;
    arp.sha = local_mac;
    arp.spa = local_ip;
}

}  // namespace snic::net
