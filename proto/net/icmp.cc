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

bool parse_icmp_unreachable(std::span<const std::uint8_t> msg, IcmpUnreachable& out) {
    // RFC 792: type, code, checksum, 4 bytes (RFC 1191: unused, then the next-hop MTU), the
    // IPv4 header and at least 8 bytes of what it carried.
    if (msg.size() < sizeof(IcmpEchoHdr) + kIpv4MinHdrLen + 8 ||
        msg[0] != static_cast<std::uint8_t>(IcmpType::dest_unreachable)) {
        return false;
    }
    const std::span<const std::uint8_t> inner = msg.subspan(sizeof(IcmpEchoHdr));
    const std::size_t ihl = (inner[0] & 0x0fu) * 4u;
    if ((inner[0] >> 4) != 4 || ihl < kIpv4MinHdrLen || inner.size() < ihl + 8) return false;
    auto be16 = [](const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] << 8 | p[1]); };
    auto be32 = [](const std::uint8_t* p) {
        return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 |
               p[3];
    };
    const std::uint8_t* l4 = inner.data() + ihl;
    out = IcmpUnreachable{};
    out.code = msg[1];
    out.next_mtu = be16(msg.data() + 6);
    out.quoted_length = be16(inner.data() + 2);
    out.protocol = inner[9];
    out.src = Ipv4Addr{be32(inner.data() + 12)};
    out.dst = Ipv4Addr{be32(inner.data() + 16)};
    out.src_port = be16(l4);
    out.dst_port = be16(l4 + 2);
    out.seq = be32(l4 + 4);
    return true;
}

std::uint16_t frag_needed_mtu(const IcmpUnreachable& u) {
    if (u.code != 4) return 0;
    if (u.next_mtu != 0) return u.next_mtu < kMinIpv4Mtu ? kMinIpv4Mtu : u.next_mtu;
    for (std::uint16_t plateau : kMtuPlateaus)
        if (plateau < u.quoted_length) return plateau;
    return 0;
}

}  // namespace snic::net
