#include "proto/net/icmp.h"

#include <utility>

namespace snic::net {

void icmp_echo_request_to_reply(EthHdr& eth, Ipv4Hdr& ip, IcmpEchoHdr& icmp) {
    std::swap(eth.dst, eth.src);
    std::swap(ip.dst, ip.src);
    ip.ttl = kDefaultTtl;
    ipv4_set_checksum(ip);
    // type and code form the first 16-bit word of the message
    const std::uint16_t old_word = static_cast<std::uint16_t>(icmp.type << 8 | icmp.code);
    icmp.type = static_cast<std::uint8_t>(IcmpType::echo_reply);
    const std::uint16_t new_word = static_cast<std::uint16_t>(icmp.type << 8 | icmp.code);
    icmp.checksum = csum_update(icmp.checksum.host(), old_word, new_word);
}

std::size_t build_icmp_echo_request(std::span<std::uint8_t> out, const EchoRequest& req) {
    const std::size_t icmp_len = sizeof(IcmpEchoHdr) + req.payload_length;
    const std::size_t len = kEthHdrLen + kIpv4MinHdrLen + icmp_len;
    const std::size_t frame_len = len < kEthMinFrame ? kEthMinFrame : len;  // padded
    if (out.size() < frame_len || len > 0xffff) return 0;
    auto& eth = *reinterpret_cast<EthHdr*>(out.data());
    auto& ip = *reinterpret_cast<Ipv4Hdr*>(out.data() + kEthHdrLen);
    auto* msg = out.data() + kEthHdrLen + kIpv4MinHdrLen;
    auto& icmp = *reinterpret_cast<IcmpEchoHdr*>(msg);
    write_eth(eth, req.dst_mac, req.src_mac, EtherType::ipv4);
    write_ipv4(ip, req.src_ip, req.dst_ip, IpProto::icmp, static_cast<std::uint16_t>(icmp_len),
               req.seq);
    icmp.type = static_cast<std::uint8_t>(IcmpType::echo_request);
    icmp.code = 0;
    icmp.checksum = 0;
    icmp.id = req.id;
    icmp.seq = req.seq;
    for (std::size_t i = 0; i < req.payload_length; ++i) {
        msg[sizeof(IcmpEchoHdr) + i] = static_cast<std::uint8_t>(i);
    }
    icmp.checksum = csum_finish(csum_add({msg, icmp_len}));
    for (std::size_t i = len; i < frame_len; ++i) out[i] = 0;
    return frame_len;
}

}  // namespace snic::net
