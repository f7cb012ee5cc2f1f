#include "proto/net/rx.h"

#include "proto/net/arp.h"
#include "proto/net/ethernet.h"
#include "proto/net/icmp.h"
#include "proto/net/ipv4.h"
#include "proto/net/udp.h"

namespace snic::net {

namespace {

constexpr std::uint16_t kTcpMinHdrLen = 20;

RxFrame dropped(Drop why) {
    RxFrame f;
    f.drop = why;
    return f;
}

RxFrame classify_arp(std::span<const std::uint8_t> frame, const LocalIf& local) {
    if (frame.size() < kEthHdrLen + sizeof(ArpHdr)) return dropped(Drop::arp_malformed);
    const auto& arp = *reinterpret_cast<const ArpHdr*>(frame.data() + kEthHdrLen);
    if (!arp.is_ethernet_ipv4()) return dropped(Drop::arp_unsupported);
    if (arp.sha.is_multicast() || arp.sha.is_zero()) return dropped(Drop::arp_malformed);
    RxFrame f;
    f.l3_offset = kEthHdrLen;
    f.src_ip = Ipv4Addr{arp.spa.host()};
    const bool for_us = arp.tpa.host() == local.ip.value;
    switch (static_cast<ArpOp>(arp.op.host())) {
        case ArpOp::request:
            f.kind = for_us ? RxKind::arp_request : RxKind::arp_other;
            return f;
        case ArpOp::reply:
            f.kind = for_us ? RxKind::arp_reply : RxKind::arp_other;
            return f;
    }
    return dropped(Drop::arp_malformed);
}

RxFrame classify_icmp(std::span<const std::uint8_t> l4, RxFrame f) {
    if (l4.size() < sizeof(IcmpEchoHdr)) return dropped(Drop::icmp_truncated);
    if (!csum_ok(l4)) return dropped(Drop::icmp_bad_checksum);
    const auto& icmp = *reinterpret_cast<const IcmpEchoHdr*>(l4.data());
    if (icmp.type == static_cast<std::uint8_t>(IcmpType::dest_unreachable)) {
        // The quoted IPv4 header and the first 8 bytes of what it carried (RFC 792).
        if (l4.size() < sizeof(IcmpEchoHdr) + kIpv4MinHdrLen + 8)
            return dropped(Drop::icmp_truncated);
        f.kind = RxKind::icmp_unreachable;
        return f;
    }
    if (icmp.code != 0) return dropped(Drop::icmp_unsupported_type);
    switch (static_cast<IcmpType>(icmp.type)) {
        case IcmpType::echo_request:
            f.kind = RxKind::icmp_echo_request;
            return f;
        case IcmpType::echo_reply:
            f.kind = RxKind::icmp_echo_reply;
            return f;
        case IcmpType::dest_unreachable:  // handled above
            break;
    }
    return dropped(Drop::icmp_unsupported_type);
}

RxFrame classify_udp(std::span<const std::uint8_t> l4, Ipv4Addr dst, RxFrame f, bool verified) {
    if (l4.size() < kUdpHdrLen) return dropped(Drop::udp_truncated);
    const auto& udp = *reinterpret_cast<const UdpHdr*>(l4.data());
    const std::uint16_t length = udp.length.host();
    if (length < kUdpHdrLen || length > l4.size()) return dropped(Drop::udp_bad_length);
    if (!verified && !udp_checksum_ok(f.src_ip, dst, l4.first(length)))
        return dropped(Drop::udp_bad_checksum);
    f.kind = RxKind::udp;
    f.l4_length = length;
    f.dst_port = udp.dst_port.host();
    return f;
}

RxFrame classify_ipv4(std::span<const std::uint8_t> frame, const LocalIf& local,
                      RxVerified verified) {
    if (frame.size() < kEthHdrLen + kIpv4MinHdrLen) return dropped(Drop::ip_truncated);
    const auto& ip = *reinterpret_cast<const Ipv4Hdr*>(frame.data() + kEthHdrLen);
    const std::size_t available = frame.size() - kEthHdrLen;
    if (ip.version() != 4) return dropped(Drop::ip_bad_version);
    const std::uint16_t hlen = ip.header_length();
    if (hlen < kIpv4MinHdrLen || hlen > available) return dropped(Drop::ip_bad_header_length);
    const std::uint16_t total = ip.total_length.host();
    if (total < hlen || total > available) return dropped(Drop::ip_bad_total_length);
    if (!verified.ip && !csum_ok(ipv4_header_bytes(ip))) return dropped(Drop::ip_bad_checksum);
    if (ip.dst.host() != local.ip.value) return dropped(Drop::ip_not_for_us);
    if (ip.is_fragment()) return dropped(Drop::ip_fragment);

    RxFrame f;
    f.l3_offset = kEthHdrLen;
    f.l4_offset = static_cast<std::uint16_t>(kEthHdrLen + hlen);
    f.l4_length = static_cast<std::uint16_t>(total - hlen);
    f.src_ip = Ipv4Addr{ip.src.host()};
    const auto l4 = frame.subspan(f.l4_offset, f.l4_length);
    switch (static_cast<IpProto>(ip.proto)) {
        case IpProto::icmp:
            return classify_icmp(l4, f);
        case IpProto::udp:
            return classify_udp(l4, local.ip, f, verified.l4);
        case IpProto::tcp:
            if (l4.size() < kTcpMinHdrLen) return dropped(Drop::tcp_truncated);
            f.kind = RxKind::tcp;
            f.l4_verified = verified.l4;
            f.dst_port = static_cast<std::uint16_t>(l4[2] << 8 | l4[3]);
            return f;
    }
    return dropped(Drop::ip_proto_unsupported);
}

}  // namespace

RxFrame classify_split(std::span<const std::uint8_t> head, std::size_t frame_len,
                       const LocalIf& local) {
    if (head.size() < kEthHdrLen + kIpv4MinHdrLen + kUdpHdrLen || frame_len < head.size())
        return dropped(Drop::rx_scattered);
    const auto& eth = *reinterpret_cast<const EthHdr*>(head.data());
    if (eth.dst != local.mac && !eth.dst.is_broadcast()) return dropped(Drop::eth_not_for_us);
    if (static_cast<EtherType>(eth.type.host()) != EtherType::ipv4)
        return dropped(Drop::rx_scattered);
    const auto& ip = *reinterpret_cast<const Ipv4Hdr*>(head.data() + kEthHdrLen);
    if (ip.version() != 4) return dropped(Drop::ip_bad_version);
    const std::uint16_t hlen = ip.header_length();
    if (hlen < kIpv4MinHdrLen || std::size_t{kEthHdrLen} + hlen + kUdpHdrLen > head.size())
        return dropped(Drop::rx_scattered);
    if (ip.total_length.host() != frame_len - kEthHdrLen) return dropped(Drop::ip_bad_total_length);
    if (!csum_ok(ipv4_header_bytes(ip))) return dropped(Drop::ip_bad_checksum);
    if (ip.dst.host() != local.ip.value) return dropped(Drop::ip_not_for_us);
    if (ip.is_fragment()) return dropped(Drop::ip_fragment);
    if (static_cast<IpProto>(ip.proto) != IpProto::udp) return dropped(Drop::rx_scattered);
    const auto& udp = *reinterpret_cast<const UdpHdr*>(head.data() + kEthHdrLen + hlen);
    const std::size_t l4_length = frame_len - kEthHdrLen - hlen;
    if (udp.length.host() != l4_length) return dropped(Drop::udp_bad_length);
    if (udp.checksum.host() != 0) return dropped(Drop::rx_scattered);
    RxFrame f;
    f.kind = RxKind::udp;
    f.l3_offset = kEthHdrLen;
    f.l4_offset = static_cast<std::uint16_t>(kEthHdrLen + hlen);
    f.l4_length = static_cast<std::uint16_t>(l4_length);
    f.src_ip = Ipv4Addr{ip.src.host()};
    f.dst_port = udp.dst_port.host();
    return f;
}

RxFrame classify(std::span<const std::uint8_t> frame, const LocalIf& local, RxVerified verified) {
    if (frame.size() < kEthHdrLen) return dropped(Drop::eth_truncated);
    const auto& eth = *reinterpret_cast<const EthHdr*>(frame.data());
    if (eth.dst != local.mac && !eth.dst.is_broadcast()) return dropped(Drop::eth_not_for_us);
    switch (static_cast<EtherType>(eth.type.host())) {
        case EtherType::arp:
            return classify_arp(frame, local);
        case EtherType::ipv4:
            return classify_ipv4(frame, local, verified);
        default:
            return dropped(Drop::ethertype_unsupported);
    }
}

}  // namespace snic::net
