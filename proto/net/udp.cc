#include "proto/net/udp.h"

namespace snic::net {

std::uint16_t udp_checksum(Ipv4Addr src, Ipv4Addr dst, std::span<const std::uint8_t> datagram) {
    const auto length = static_cast<std::uint16_t>(datagram.size());
    const std::uint16_t c =
        csum_finish(csum_add(datagram, ipv4_pseudo_sum(src, dst, IpProto::udp, length)));
    return c == 0 ? 0xffff : c;
}

bool udp_checksum_ok(Ipv4Addr src, Ipv4Addr dst, std::span<const std::uint8_t> datagram) {
    const auto& udp = *reinterpret_cast<const UdpHdr*>(datagram.data());
    if (udp.checksum.host() == 0) return true;
    const auto length = static_cast<std::uint16_t>(datagram.size());
    return csum_ok(datagram, ipv4_pseudo_sum(src, dst, IpProto::udp, length));
}

std::size_t build_udp_frame(std::span<std::uint8_t> out, const UdpFlow& flow,
                            std::uint16_t payload_length, bool checksum) {
    const std::size_t len = kUdpFrameOverhead + payload_length;
    if (out.size() < len || kIpv4MinHdrLen + kUdpHdrLen + payload_length > 0xffff) return 0;
    auto& eth = *reinterpret_cast<EthHdr*>(out.data());
    auto& ip = *reinterpret_cast<Ipv4Hdr*>(out.data() + kEthHdrLen);
    auto* dgram = out.data() + kEthHdrLen + kIpv4MinHdrLen;
    auto& udp = *reinterpret_cast<UdpHdr*>(dgram);
    const auto udp_len = static_cast<std::uint16_t>(kUdpHdrLen + payload_length);
    write_eth(eth, flow.dst_mac, flow.src_mac, EtherType::ipv4);
    write_ipv4(ip, flow.src_ip, flow.dst_ip, IpProto::udp, udp_len);
    udp.src_port = flow.src_port;
    udp.dst_port = flow.dst_port;
    udp.length = udp_len;
    udp.checksum = 0;
    if (checksum) udp.checksum = udp_checksum(flow.src_ip, flow.dst_ip, {dgram, udp_len});
    return len;
}

}  // namespace snic::net
