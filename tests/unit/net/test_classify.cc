// classify(): one test per first-check rule (each Drop reason classify can return, named
// after the rule it enforces), the accepted kinds, a truncation sweep and a fixed-seed
// mutation fuzz that checks classify stays inside the frame.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <iterator>
#include <ostream>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "proto/net/arp.h"
#include "proto/net/checksum.h"
#include "proto/net/ethernet.h"
#include "proto/net/icmp.h"
#include "proto/net/ipv4.h"
#include "proto/net/rx.h"
#include "proto/net/udp.h"

namespace snic::net {
namespace {

using Frame = std::vector<std::uint8_t>;

constexpr Ipv4Addr ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return Ipv4Addr{std::uint32_t{a} << 24 | std::uint32_t{b} << 16 | std::uint32_t{c} << 8 | d};
}

constexpr MacAddr kPeerMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x01}};
constexpr MacAddr kLocalMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x02}};
constexpr MacAddr kOtherMac{{0x02, 0x00, 0x00, 0x00, 0x00, 0x03}};
constexpr Ipv4Addr kPeerIp = ip(10, 0, 0, 1);
constexpr Ipv4Addr kLocalIp = ip(10, 0, 0, 2);
constexpr Ipv4Addr kOtherIp = ip(10, 0, 0, 3);
const LocalIf kLocal{kLocalMac, kLocalIp};

// Offsets in an option-less IPv4 frame.
constexpr std::size_t kIp = kEthHdrLen;  // 14
constexpr std::size_t kL4 = kIp + 20;    // 34

void put16(Frame& f, std::size_t off, std::uint16_t v) {
    f[off] = static_cast<std::uint8_t>(v >> 8);
    f[off + 1] = static_cast<std::uint8_t>(v);
}

std::uint16_t get16(std::span<const std::uint8_t> f, std::size_t off) {
    return static_cast<std::uint16_t>(f[off] << 8 | f[off + 1]);
}

Ipv4Hdr& iph(Frame& f) {
    return *reinterpret_cast<Ipv4Hdr*>(f.data() + kIp);
}

void fix_ip_checksum(Frame& f) {
    ipv4_set_checksum(iph(f));
}

// Recomputes the ICMP checksum over the IP payload as bounded by the total length.
void fix_icmp_checksum(Frame& f) {
    const std::size_t hlen = iph(f).header_length();
    const std::size_t len = iph(f).total_length.host() - hlen;
    const std::size_t off = kIp + hlen;
    f[off + 2] = f[off + 3] = 0;
    put16(f, off + 2, csum_finish(csum_add(std::span(f).subspan(off, len))));
}

Frame echo_request(std::uint16_t payload = 56) {
    EchoRequest req;
    req.src_mac = kPeerMac;
    req.dst_mac = kLocalMac;
    req.src_ip = kPeerIp;
    req.dst_ip = kLocalIp;
    req.id = 0x77;
    req.seq = 1;
    req.payload_length = payload;
    Frame f(2048);
    f.resize(build_icmp_echo_request(f, req));
    return f;
}

// ICMP destination unreachable (port) quoting an IPv4 header and 8 bytes of a segment.
Frame unreachable() {
    Frame f = echo_request(28);
    f[kL4] = 3;
    f[kL4 + 1] = 3;
    fix_icmp_checksum(f);
    return f;
}

Frame echo_reply() {
    Frame f = echo_request();
    f[kL4] = static_cast<std::uint8_t>(IcmpType::echo_reply);
    fix_icmp_checksum(f);
    return f;
}

Frame udp(std::uint16_t payload = 64, bool checksum = true, std::uint16_t dst_port = 4791) {
    Frame f(kUdpFrameOverhead + payload);
    for (std::size_t i = 0; i < payload; ++i)
        f[kUdpFrameOverhead + i] = static_cast<std::uint8_t>(i * 13 + 5);
    const UdpFlow flow{kPeerMac, kLocalMac, kPeerIp, kLocalIp, 50000, dst_port};
    f.resize(build_udp_frame(f, flow, payload, checksum));
    return f;
}

// Recomputes the UDP checksum of a frame built by udp(); the UDP length must fit the frame.
void fix_udp_checksum(Frame& f) {
    const std::size_t hlen = iph(f).header_length();
    const std::size_t off = kIp + hlen;
    const std::uint16_t len = get16(f, off + 4);
    f[off + 6] = f[off + 7] = 0;
    const Ipv4Addr src{iph(f).src.host()}, dst{iph(f).dst.host()};
    put16(f, off + 6, udp_checksum(src, dst, std::span(f).subspan(off, len)));
}

Frame tcp(std::uint16_t dst_port = 8080, std::uint16_t payload = 0) {
    Frame f(kL4 + 20 + payload);
    write_eth(*reinterpret_cast<EthHdr*>(f.data()), kLocalMac, kPeerMac, EtherType::ipv4);
    write_ipv4(iph(f), kPeerIp, kLocalIp, IpProto::tcp, static_cast<std::uint16_t>(20 + payload));
    put16(f, kL4, 40000);
    put16(f, kL4 + 2, dst_port);
    f[kL4 + 12] = 0x50;  // data offset: 5 words
    f[kL4 + 13] = 0x02;  // SYN
    return f;
}

Frame arp(ArpOp op, Ipv4Addr target, MacAddr eth_dst = MacAddr::broadcast()) {
    Frame f(kEthMinFrame);
    build_arp_request(f, kPeerMac, kPeerIp, target);
    auto& eth = *reinterpret_cast<EthHdr*>(f.data());
    auto& a = *reinterpret_cast<ArpHdr*>(f.data() + kEthHdrLen);
    eth.dst = eth_dst;
    a.op = static_cast<std::uint16_t>(op);
    if (op == ArpOp::reply) a.tha = kLocalMac;
    return f;
}

ArpHdr& arph(Frame& f) {
    return *reinterpret_cast<ArpHdr*>(f.data() + kEthHdrLen);
}

// Adds a 4-byte IP option (four NOPs) to a frame built above, keeping it valid.
Frame with_ip_options(Frame f) {
    const std::uint16_t total = iph(f).total_length.host();
    const std::array<std::uint8_t, 4> nops = {1, 1, 1, 1};
    f.insert(f.begin() + kL4, nops.begin(), nops.end());
    iph(f).version_ihl = 0x46;
    iph(f).total_length = static_cast<std::uint16_t>(total + 4);
    fix_ip_checksum(f);
    return f;
}

RxFrame run(const Frame& f, const LocalIf& local = kLocal) {
    // An exactly sized heap copy so that a read beyond the frame is an over-read that
    // AddressSanitizer or valgrind reports.
    const Frame exact(f.begin(), f.end());
    return classify(exact, local);
}

// ============================================================================================
// Every Drop classify can return, one case per rule. Each test checks that the valid frame
// is accepted and that the one change breaking the rule makes it dropped for that reason.

struct DropRule {
    std::string name;
    std::function<Frame()> make;
    Drop expected;
};

std::vector<DropRule> drop_rules() {
    std::vector<DropRule> r;
    auto add = [&](std::string name, Drop d, std::function<Frame()> make) {
        r.push_back({std::move(name), std::move(make), d});
    };

    // Ethernet
    add("drops_frame_shorter_than_ethernet_header", Drop::eth_truncated,
        [] { return Frame(kEthHdrLen - 1, 0xff); });
    add("drops_empty_frame", Drop::eth_truncated, [] { return Frame{}; });
    add("drops_unicast_frame_for_another_mac", Drop::eth_not_for_us, [] {
        Frame f = echo_request();
        std::copy(kOtherMac.bytes.begin(), kOtherMac.bytes.end(), f.begin());
        return f;
    });
    add("drops_multicast_mac_other_than_broadcast", Drop::eth_not_for_us, [] {
        Frame f = udp();
        const std::array<std::uint8_t, 6> mcast = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
        std::copy(mcast.begin(), mcast.end(), f.begin());
        return f;
    });
    add("drops_ipv6_ethertype", Drop::ethertype_unsupported, [] {
        Frame f = udp();
        put16(f, 12, 0x86dd);
        return f;
    });
    add("drops_vlan_tagged_frame", Drop::ethertype_unsupported, [] {
        Frame f = udp();
        put16(f, 12, 0x8100);
        return f;
    });
    add("drops_frame_with_only_ethernet_header_and_unknown_type", Drop::ethertype_unsupported, [] {
        Frame f = udp();
        f.resize(kEthHdrLen);
        put16(f, 12, 0x88cc);  // LLDP
        return f;
    });

    // ARP
    add("drops_arp_shorter_than_arp_header", Drop::arp_malformed, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        f.resize(kEthHdrLen + sizeof(ArpHdr) - 1);
        return f;
    });
    add("drops_arp_with_only_ethernet_header", Drop::arp_malformed, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        f.resize(kEthHdrLen);
        return f;
    });
    add("drops_arp_for_hardware_other_than_ethernet", Drop::arp_unsupported, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).htype = 6;  // IEEE 802
        return f;
    });
    add("drops_arp_for_protocol_other_than_ipv4", Drop::arp_unsupported, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).ptype = 0x86dd;
        return f;
    });
    add("drops_arp_with_hardware_length_other_than_6", Drop::arp_unsupported, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).hlen = 8;
        return f;
    });
    add("drops_arp_with_protocol_length_other_than_4", Drop::arp_unsupported, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).plen = 16;
        return f;
    });
    add("drops_arp_with_multicast_sender_mac", Drop::arp_malformed, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).sha = MacAddr{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}};
        return f;
    });
    add("drops_arp_with_broadcast_sender_mac", Drop::arp_malformed, [] {
        Frame f = arp(ArpOp::reply, kLocalIp, kLocalMac);
        arph(f).sha = MacAddr::broadcast();
        return f;
    });
    add("drops_arp_with_zero_sender_mac", Drop::arp_malformed, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).sha = MacAddr::zero();
        return f;
    });
    add("drops_arp_with_unknown_opcode", Drop::arp_malformed, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).op = 3;  // RARP request
        return f;
    });
    add("drops_arp_with_opcode_zero", Drop::arp_malformed, [] {
        Frame f = arp(ArpOp::request, kLocalIp);
        arph(f).op = 0;
        return f;
    });

    // IPv4
    add("drops_ipv4_shorter_than_ip_header", Drop::ip_truncated, [] {
        Frame f = udp();
        f.resize(kIp + kIpv4MinHdrLen - 1);
        return f;
    });
    add("drops_ipv4_with_only_ethernet_header", Drop::ip_truncated, [] {
        Frame f = udp();
        f.resize(kIp);
        return f;
    });
    add("drops_ip_version_other_than_4", Drop::ip_bad_version, [] {
        Frame f = udp();
        iph(f).version_ihl = 0x65;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_ip_header_length_below_20", Drop::ip_bad_header_length, [] {
        Frame f = udp();
        iph(f).version_ihl = 0x44;
        return f;
    });
    add("drops_ip_header_length_zero", Drop::ip_bad_header_length, [] {
        Frame f = udp();
        iph(f).version_ihl = 0x40;
        return f;
    });
    add("drops_ip_header_length_beyond_frame", Drop::ip_bad_header_length, [] {
        Frame f = udp(0);
        f.resize(kIp + 40);         // 40 bytes after the Ethernet header ...
        iph(f).version_ihl = 0x4f;  // ... but a 60-byte header
        return f;
    });
    add("drops_ip_total_length_below_header_length", Drop::ip_bad_total_length, [] {
        Frame f = udp();
        iph(f).total_length = 19;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_ip_total_length_zero", Drop::ip_bad_total_length, [] {
        Frame f = udp();
        iph(f).total_length = 0;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_ip_total_length_beyond_frame", Drop::ip_bad_total_length, [] {
        Frame f = udp();
        f.pop_back();  // the datagram lost its last byte on the way
        return f;
    });
    add("drops_ip_total_length_one_beyond_frame_with_valid_checksum", Drop::ip_bad_total_length,
        [] {
            Frame f = udp();
            iph(f).total_length = static_cast<std::uint16_t>(f.size() - kIp + 1);
            fix_ip_checksum(f);
            return f;
        });
    add("drops_ipv4_with_bad_header_checksum", Drop::ip_bad_checksum, [] {
        Frame f = udp();
        f[kIp + 10] ^= 0x01;
        return f;
    });
    add("drops_ipv4_with_corrupted_header_byte", Drop::ip_bad_checksum, [] {
        Frame f = echo_request();
        f[kIp + 8] ^= 0x80;  // TTL
        return f;
    });
    add("drops_ipv4_with_corrupted_option", Drop::ip_bad_checksum, [] {
        Frame f = with_ip_options(udp());
        f[kIp + 21] ^= 0x10;  // the checksum covers options too
        return f;
    });
    add("drops_ip_for_another_address", Drop::ip_not_for_us, [] {
        Frame f = udp();
        iph(f).dst = kOtherIp.value;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_ip_broadcast_address", Drop::ip_not_for_us, [] {
        Frame f = udp();
        iph(f).dst = 0xffffffffu;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_fragment", Drop::ip_fragment, [] {
        Frame f = udp();
        iph(f).frag = Ipv4Hdr::kMoreFragments;  // first fragment
        fix_ip_checksum(f);
        return f;
    });
    add("drops_fragment_with_nonzero_offset", Drop::ip_fragment, [] {
        Frame f = udp();
        iph(f).frag = 185;  // last fragment, offset 1480
        fix_ip_checksum(f);
        return f;
    });
    add("drops_fragment_with_df_and_offset", Drop::ip_fragment, [] {
        Frame f = echo_request();
        iph(f).frag = Ipv4Hdr::kDontFragment | 1;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_unsupported_ip_protocol", Drop::ip_proto_unsupported, [] {
        Frame f = udp();
        iph(f).proto = 47;  // GRE
        fix_ip_checksum(f);
        return f;
    });
    add("drops_igmp", Drop::ip_proto_unsupported, [] {
        Frame f = echo_request();
        iph(f).proto = 2;
        fix_ip_checksum(f);
        return f;
    });

    // ICMP
    add("drops_truncated_icmp", Drop::icmp_truncated, [] {
        Frame f = echo_request(0);  // 42 bytes padded to 60
        iph(f).total_length = 20 + 7;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_icmp_with_empty_payload", Drop::icmp_truncated, [] {
        Frame f = echo_request(0);
        iph(f).total_length = 20;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_icmp_with_bad_checksum", Drop::icmp_bad_checksum, [] {
        Frame f = echo_request();
        f.back() ^= 0x04;
        return f;
    });
    add("drops_icmp_with_checksum_of_padding_included", Drop::icmp_bad_checksum, [] {
        // A checksum computed over the Ethernet padding too is wrong: the message
        // ends where the IP total length says.
        Frame f = echo_request(0);
        f[50] = 0x12;
        f[51] = 0x34;
        f[kL4 + 2] = f[kL4 + 3] = 0;
        put16(f, kL4 + 2, csum_finish(csum_add(std::span(f).subspan(kL4))));
        return f;
    });
    add("drops_icmp_with_nonzero_code", Drop::icmp_unsupported_type, [] {
        Frame f = echo_request();
        f[kL4 + 1] = 1;
        fix_icmp_checksum(f);
        return f;
    });
    add("drops_icmp_destination_unreachable_without_a_quote", Drop::icmp_truncated, [] {
        Frame f = echo_request(8);  // 16 bytes: less than a header and an IPv4 header + 8
        f[kL4] = 3;
        fix_icmp_checksum(f);
        return f;
    });
    add("drops_icmp_timestamp_request", Drop::icmp_unsupported_type, [] {
        Frame f = echo_request();
        f[kL4] = 13;
        fix_icmp_checksum(f);
        return f;
    });

    // UDP
    add("drops_truncated_udp", Drop::udp_truncated, [] {
        Frame f = udp(0);
        iph(f).total_length = 20 + 7;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_udp_with_empty_ip_payload", Drop::udp_truncated, [] {
        Frame f = udp(0);
        iph(f).total_length = 20;
        fix_ip_checksum(f);
        return f;
    });
    add("drops_udp_length_below_header", Drop::udp_bad_length, [] {
        Frame f = udp(64, false);
        put16(f, kL4 + 4, 7);
        return f;
    });
    add("drops_udp_length_zero", Drop::udp_bad_length, [] {
        Frame f = udp(64, false);
        put16(f, kL4 + 4, 0);
        return f;
    });
    add("drops_udp_length_beyond_ip_payload", Drop::udp_bad_length, [] {
        Frame f = udp(64, false);
        put16(f, kL4 + 4, 8 + 64 + 1);
        return f;
    });
    add("drops_udp_length_reaching_into_ethernet_padding", Drop::udp_bad_length, [] {
        // 8 + 2 bytes of UDP in a frame padded to 60: the UDP length may not claim the padding.
        Frame f = udp(2, false);
        f.resize(kEthMinFrame, 0);
        put16(f, kL4 + 4, 8 + 2 + 4);
        return f;
    });
    add("drops_udp_with_bad_checksum", Drop::udp_bad_checksum, [] {
        Frame f = udp(64, true);
        f.back() ^= 0x20;
        return f;
    });
    add("drops_udp_checksummed_with_wrong_pseudo_header", Drop::udp_bad_checksum, [] {
        Frame f = udp(64, true);
        iph(f).src = kOtherIp.value;  // spoofed after the checksum was computed
        fix_ip_checksum(f);
        return f;
    });

    // TCP
    add("drops_truncated_tcp", Drop::tcp_truncated, [] {
        Frame f = tcp();
        iph(f).total_length = 20 + 19;
        fix_ip_checksum(f);
        f.pop_back();
        return f;
    });
    add("drops_tcp_with_empty_ip_payload", Drop::tcp_truncated, [] {
        Frame f = tcp();
        iph(f).total_length = 20;
        fix_ip_checksum(f);
        return f;
    });
    return r;
}

void PrintTo(const DropRule& rule, std::ostream* os) {
    *os << rule.name;
}

class ClassifyDropRule : public testing::TestWithParam<DropRule> {};

TEST_P(ClassifyDropRule, drops_with_reason) {
    const DropRule& rule = GetParam();
    const Frame f = rule.make();
    const RxFrame r = run(f);
    EXPECT_EQ(r.kind, RxKind::drop);
    EXPECT_EQ(drop_name(r.drop), drop_name(rule.expected));
}

INSTANTIATE_TEST_SUITE_P(Classify, ClassifyDropRule, testing::ValuesIn(drop_rules()),
                         [](const testing::TestParamInfo<DropRule>& info) {
                             return info.param.name;
                         });

TEST(Classify, every_drop_reason_of_the_first_checks_has_a_rule) {
    // udp_no_listener, tcp_no_listener and rx_scattered are the daemon's to count, and
    // arp_not_for_us is counted by the daemon for RxKind::arp_other.
    const std::set<Drop> daemon_only = {Drop::udp_no_listener, Drop::tcp_no_listener,
                                        Drop::rx_scattered, Drop::arp_not_for_us};
    std::set<Drop> covered;
    for (const auto& rule : drop_rules()) covered.insert(rule.expected);
    for (std::size_t i = 0; i < kDropReasons; ++i) {
        const auto d = static_cast<Drop>(i);
        if (daemon_only.contains(d)) continue;
        EXPECT_TRUE(covered.contains(d)) << "no rule for " << drop_name(d);
    }
}

TEST(Classify, drop_names_are_the_enumerators) {
    EXPECT_EQ(kDropNames.size(), kDropReasons);
    EXPECT_EQ(drop_name(Drop::eth_truncated), "eth_truncated");
    EXPECT_EQ(drop_name(Drop::ip_fragment), "ip_fragment");
    EXPECT_EQ(drop_name(Drop::udp_bad_checksum), "udp_bad_checksum");
    EXPECT_EQ(drop_name(Drop::rx_scattered), "rx_scattered");
    std::set<std::string_view> unique(kDropNames.begin(), kDropNames.end());
    EXPECT_EQ(unique.size(), kDropReasons);
}

TEST(Classify, frames_the_drop_rules_start_from_are_accepted) {
    EXPECT_EQ(run(echo_request()).kind, RxKind::icmp_echo_request);
    EXPECT_EQ(run(echo_request(0)).kind, RxKind::icmp_echo_request);
    EXPECT_EQ(run(udp()).kind, RxKind::udp);
    EXPECT_EQ(run(udp(0)).kind, RxKind::udp);
    EXPECT_EQ(run(udp(64, false)).kind, RxKind::udp);
    EXPECT_EQ(run(udp(2, false)).kind, RxKind::udp);
    EXPECT_EQ(run(tcp()).kind, RxKind::tcp);
    EXPECT_EQ(run(unreachable()).kind, RxKind::icmp_unreachable);
    EXPECT_EQ(run(arp(ArpOp::request, kLocalIp)).kind, RxKind::arp_request);
    EXPECT_EQ(run(arp(ArpOp::reply, kLocalIp, kLocalMac)).kind, RxKind::arp_reply);
    EXPECT_EQ(run(with_ip_options(udp())).kind, RxKind::udp);
}

// Receive checksum offload: what the port's device found good is not checked again, and
// nothing else is taken on its word.
TEST(Classify, checksums_the_port_vouched_for_are_not_checked_again) {
    Frame bad_ip = udp();
    iph(bad_ip).checksum = iph(bad_ip).checksum.host() ^ 0x0100;
    EXPECT_EQ(run(bad_ip).drop, Drop::ip_bad_checksum);
    const Frame exact_ip(bad_ip.begin(), bad_ip.end());
    EXPECT_EQ(classify(exact_ip, kLocal, RxVerified{true, false}).kind, RxKind::udp);
    EXPECT_EQ(classify(exact_ip, kLocal, RxVerified{false, true}).drop, Drop::ip_bad_checksum)
        << "an L4 verdict says nothing of the IPv4 header";

    Frame bad_udp = udp();
    bad_udp[bad_udp.size() - 1] ^= 0x40;
    EXPECT_EQ(run(bad_udp).drop, Drop::udp_bad_checksum);
    const Frame exact_udp(bad_udp.begin(), bad_udp.end());
    EXPECT_EQ(classify(exact_udp, kLocal, RxVerified{false, true}).kind, RxKind::udp);

    const Frame t = tcp();
    EXPECT_FALSE(run(t).l4_verified) << "TCP's checksum is the stack's to check";
    EXPECT_TRUE(classify(t, kLocal, RxVerified{true, true}).l4_verified);
}

// classify_split(): a frame in segments is taken as a UDP datagram without a checksum whose
// headers lie in its first segment, with what classify() says of the same frame whole.
TEST(ClassifySplit, takes_what_classify_takes_of_the_whole_frame_from_its_first_segment) {
    for (const Frame& f : {udp(64, false), udp(4096, false), with_ip_options(udp(200, false))}) {
        const RxFrame whole = run(f);
        ASSERT_EQ(whole.kind, RxKind::udp);
        const std::size_t head = whole.l4_offset + kUdpHdrLen;  // then the payload elsewhere
        const RxFrame r = classify_split(std::span(f).first(head), f.size(), kLocal);
        EXPECT_EQ(r.kind, RxKind::udp);
        EXPECT_EQ(r.l3_offset, whole.l3_offset);
        EXPECT_EQ(r.l4_offset, whole.l4_offset);
        EXPECT_EQ(r.l4_length, whole.l4_length);
        EXPECT_EQ(r.src_ip, whole.src_ip);
        EXPECT_EQ(r.dst_port, whole.dst_port);
    }
}

TEST(ClassifySplit, drops_what_it_cannot_check_or_what_is_not_for_it) {
    const auto split = [](const Frame& f, std::size_t head, std::size_t len = 0) {
        return classify_split(std::span(f).first(head), len != 0 ? len : f.size(), kLocal).drop;
    };
    const Frame good = udp(64, false);
    constexpr std::size_t kHead = kEthHdrLen + kIpv4MinHdrLen + kUdpHdrLen;
    ASSERT_EQ(split(good, kHead), Drop::count_);
    // A UDP checksum it would have to read the other segments for.
    EXPECT_EQ(split(udp(64, true), kHead), Drop::rx_scattered);
    // The headers not all in the first segment.
    EXPECT_EQ(split(good, kHead - 1), Drop::rx_scattered);
    // Not UDP, or not IPv4.
    EXPECT_EQ(split(tcp(8080, 64), kHead), Drop::rx_scattered);
    EXPECT_EQ(split(arp(ArpOp::request, kLocalIp), 42), Drop::rx_scattered);
    // Lengths that disagree with the frame's.
    EXPECT_EQ(split(good, kHead, good.size() + 4), Drop::ip_bad_total_length);
    EXPECT_EQ(classify_split(std::span(good).first(kHead), kHead - 1, kLocal).drop,
              Drop::rx_scattered);
    Frame f = good;
    auto& u = *reinterpret_cast<UdpHdr*>(f.data() + kEthHdrLen + kIpv4MinHdrLen);
    u.length = static_cast<std::uint16_t>(u.length.host() - 4);
    EXPECT_EQ(split(f, kHead), Drop::udp_bad_length);
    // The first checks classify() makes.
    f = good;
    f[kEthHdrLen + 10] ^= 1;  // IPv4 header checksum
    EXPECT_EQ(split(f, kHead), Drop::ip_bad_checksum);
    f = good;
    std::copy(kOtherMac.bytes.begin(), kOtherMac.bytes.end(), f.begin());
    EXPECT_EQ(split(f, kHead), Drop::eth_not_for_us);
    const LocalIf elsewhere{kLocalMac, kOtherIp};
    EXPECT_EQ(classify_split(std::span(good).first(kHead), good.size(), elsewhere).drop,
              Drop::ip_not_for_us);
}

TEST(Classify, drops_every_frame_shorter_than_ethernet_header) {
    for (std::size_t n = 0; n < kEthHdrLen; ++n) {
        const RxFrame r = run(Frame(n, 0xff));
        EXPECT_EQ(r.kind, RxKind::drop);
        EXPECT_EQ(r.drop, Drop::eth_truncated) << n;
    }
}

// ============================================================================================
// Accepted kinds

TEST(Classify, arp_request_for_us_is_arp_request) {
    const RxFrame r = run(arp(ArpOp::request, kLocalIp));
    EXPECT_EQ(r.kind, RxKind::arp_request);
    EXPECT_EQ(r.drop, Drop::count_);
    EXPECT_EQ(r.l3_offset, kEthHdrLen);
    EXPECT_EQ(r.src_ip, kPeerIp);
}

TEST(Classify, arp_reply_to_us_is_arp_reply) {
    const RxFrame r = run(arp(ArpOp::reply, kLocalIp, kLocalMac));
    EXPECT_EQ(r.kind, RxKind::arp_reply);
    EXPECT_EQ(r.l3_offset, kEthHdrLen);
    EXPECT_EQ(r.src_ip, kPeerIp);
}

TEST(Classify, arp_request_for_another_address_is_arp_other) {
    const RxFrame r = run(arp(ArpOp::request, kOtherIp));
    EXPECT_EQ(r.kind, RxKind::arp_other);
    EXPECT_EQ(r.src_ip, kPeerIp);  // the sender may still refresh a cache entry (RFC 826)
}

TEST(Classify, arp_reply_for_another_address_is_arp_other) {
    // A broadcast (gratuitous-style) reply about someone else.
    const RxFrame r = run(arp(ArpOp::reply, kOtherIp));
    EXPECT_EQ(r.kind, RxKind::arp_other);
    EXPECT_EQ(r.src_ip, kPeerIp);
}

TEST(Classify, unpadded_arp_of_exactly_42_bytes_is_accepted) {
    Frame f = arp(ArpOp::request, kLocalIp);
    f.resize(kEthHdrLen + sizeof(ArpHdr));
    EXPECT_EQ(run(f).kind, RxKind::arp_request);
}

TEST(Classify, broadcast_destination_mac_is_accepted) {
    Frame f = udp();
    std::fill_n(f.begin(), 6, 0xff);
    const RxFrame r = run(f);
    EXPECT_EQ(r.kind, RxKind::udp);
    EXPECT_EQ(run(arp(ArpOp::request, kLocalIp, MacAddr::broadcast())).kind, RxKind::arp_request);
}

TEST(Classify, unicast_arp_for_another_mac_is_dropped) {
    const RxFrame r = run(arp(ArpOp::request, kLocalIp, kOtherMac));
    EXPECT_EQ(r.kind, RxKind::drop);
    EXPECT_EQ(r.drop, Drop::eth_not_for_us);
}

TEST(Classify, icmp_echo_request_is_accepted_with_offsets) {
    const Frame f = echo_request(56);
    const RxFrame r = run(f);
    ASSERT_EQ(r.kind, RxKind::icmp_echo_request);
    EXPECT_EQ(r.drop, Drop::count_);
    EXPECT_EQ(r.l3_offset, 14);
    EXPECT_EQ(r.l4_offset, 34);
    EXPECT_EQ(r.l4_length, 64);
    EXPECT_EQ(r.src_ip, kPeerIp);
}

TEST(Classify, icmp_echo_reply_is_accepted) {
    const RxFrame r = run(echo_reply());
    EXPECT_EQ(r.kind, RxKind::icmp_echo_reply);
    EXPECT_EQ(r.l4_length, 64);
    EXPECT_EQ(r.src_ip, kPeerIp);
}

TEST(Classify, udp_is_accepted_with_port_offsets_and_length) {
    const Frame f = udp(100, true, 4791);
    const RxFrame r = run(f);
    ASSERT_EQ(r.kind, RxKind::udp);
    EXPECT_EQ(r.drop, Drop::count_);
    EXPECT_EQ(r.l3_offset, 14);
    EXPECT_EQ(r.l4_offset, 34);
    EXPECT_EQ(r.l4_length, 108);
    EXPECT_EQ(r.dst_port, 4791);
    EXPECT_EQ(r.src_ip, kPeerIp);
    EXPECT_EQ(run(udp(10, true, 53)).dst_port, 53);
}

TEST(Classify, udp_without_checksum_is_accepted) {
    const RxFrame r = run(udp(33, false));
    EXPECT_EQ(r.kind, RxKind::udp);
    EXPECT_EQ(r.l4_length, 41);
}

TEST(Classify, tcp_is_accepted_with_destination_port) {
    const RxFrame r = run(tcp(4420, 12));
    ASSERT_EQ(r.kind, RxKind::tcp);
    EXPECT_EQ(r.dst_port, 4420);
    EXPECT_EQ(r.l4_offset, 34);
    EXPECT_EQ(r.l4_length, 32);
    EXPECT_EQ(r.src_ip, kPeerIp);
}

TEST(Classify, dont_fragment_alone_is_not_a_fragment) {
    Frame f = udp();
    ASSERT_EQ(iph(f).frag.host(), Ipv4Hdr::kDontFragment);
    EXPECT_EQ(run(f).kind, RxKind::udp);
    iph(f).frag = 0;
    fix_ip_checksum(f);
    EXPECT_EQ(run(f).kind, RxKind::udp);
}

TEST(Classify, ip_options_move_the_transport_header) {
    const Frame f = with_ip_options(udp(20));
    const RxFrame r = run(f);
    ASSERT_EQ(r.kind, RxKind::udp) << drop_name(r.drop);
    EXPECT_EQ(r.l4_offset, 38);
    EXPECT_EQ(r.l4_length, 28);
    const Frame g = with_ip_options(echo_request(10));
    const RxFrame s = run(g);
    ASSERT_EQ(s.kind, RxKind::icmp_echo_request) << drop_name(s.drop);
    EXPECT_EQ(s.l4_offset, 38);
    EXPECT_EQ(s.l4_length, 18);
}

TEST(Classify, ip_total_length_excludes_ethernet_padding) {
    // An 8-byte echo request in a 60-byte frame, with junk in the padding: the ICMP
    // checksum covers the message only, and l4_length does not count the padding.
    Frame f = echo_request(0);
    ASSERT_EQ(f.size(), 60u);
    for (std::size_t i = 42; i < 60; ++i) f[i] = static_cast<std::uint8_t>(0xa0 + i);
    RxFrame r = run(f);
    ASSERT_EQ(r.kind, RxKind::icmp_echo_request) << drop_name(r.drop);
    EXPECT_EQ(r.l4_length, 8);

    Frame u = udp(4, true);
    u.resize(kEthMinFrame, 0x5a);
    r = run(u);
    ASSERT_EQ(r.kind, RxKind::udp) << drop_name(r.drop);
    EXPECT_EQ(r.l4_length, 12);
    EXPECT_LE(r.l4_offset + r.l4_length, 46);

    Frame t = tcp(80);
    t.resize(t.size() + 6, 0x33);
    r = run(t);
    ASSERT_EQ(r.kind, RxKind::tcp);
    EXPECT_EQ(r.l4_length, 20);
}

TEST(Classify, udp_length_shorter_than_ip_payload_bounds_the_datagram) {
    // IP carries 8 + 64 bytes, UDP says 8 + 60: the datagram (and its checksum) is 68 bytes.
    Frame f = udp(64, false);
    put16(f, kL4 + 4, 8 + 60);
    fix_udp_checksum(f);
    const RxFrame r = run(f);
    ASSERT_EQ(r.kind, RxKind::udp) << drop_name(r.drop);
    EXPECT_EQ(r.l4_length, 68);
}

TEST(Classify, udp_checksum_is_over_udp_length_not_frame) {
    // Junk after the UDP datagram (inside IP payload and in Ethernet padding) does not
    // disturb a valid checksum.
    Frame f = udp(4, true);
    const std::uint16_t udp_len = 12;
    f.resize(kEthMinFrame, 0xee);
    const RxFrame r = run(f);
    ASSERT_EQ(r.kind, RxKind::udp) << drop_name(r.drop);
    EXPECT_EQ(r.l4_length, udp_len);
}

TEST(Classify, broadcast_frame_to_another_ip_is_not_for_us) {
    Frame f = udp();
    std::fill_n(f.begin(), 6, 0xff);
    iph(f).dst = kOtherIp.value;
    fix_ip_checksum(f);
    const RxFrame r = run(f);
    EXPECT_EQ(r.kind, RxKind::drop);
    EXPECT_EQ(r.drop, Drop::ip_not_for_us);
}

// ============================================================================================
// Truncation sweep: every prefix of a valid frame that cuts into the headers or into the
// datagram the IP total length announces is dropped, for the right reason.

Drop expected_truncation_drop(std::size_t n) {
    if (n < kEthHdrLen) return Drop::eth_truncated;
    if (n < kL4) return Drop::ip_truncated;
    return Drop::ip_bad_total_length;
}

TEST(Classify, every_truncation_of_an_echo_request_is_dropped) {
    const Frame full = echo_request(56);
    ASSERT_EQ(run(full).kind, RxKind::icmp_echo_request);
    for (std::size_t n = 0; n < full.size(); ++n) {
        const RxFrame r = run(Frame(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
        EXPECT_NE(r.kind, RxKind::icmp_echo_request) << n;
        EXPECT_EQ(r.kind, RxKind::drop) << n;
        EXPECT_EQ(r.drop, expected_truncation_drop(n)) << n;
    }
}

TEST(Classify, every_truncation_of_a_udp_frame_is_dropped) {
    for (bool checksum : {true, false}) {
        const Frame full = udp(100, checksum);
        ASSERT_EQ(run(full).kind, RxKind::udp);
        for (std::size_t n = 0; n < full.size(); ++n) {
            const RxFrame r =
                run(Frame(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
            EXPECT_EQ(r.kind, RxKind::drop) << n;
            EXPECT_EQ(r.drop, expected_truncation_drop(n)) << n;
        }
    }
}

TEST(Classify, truncating_only_ethernet_padding_keeps_the_frame) {
    const Frame full = echo_request(0);  // 42 bytes of frame, 18 of padding
    for (std::size_t n = 0; n <= full.size(); ++n) {
        const RxFrame r = run(Frame(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
        if (n >= 42) {
            EXPECT_EQ(r.kind, RxKind::icmp_echo_request) << n;
            EXPECT_EQ(r.l4_length, 8) << n;
        } else {
            EXPECT_EQ(r.kind, RxKind::drop) << n;
        }
    }
}

TEST(Classify, every_truncation_of_an_arp_frame_is_handled) {
    const Frame full = arp(ArpOp::request, kLocalIp);
    for (std::size_t n = 0; n <= full.size(); ++n) {
        const RxFrame r = run(Frame(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
        if (n < kEthHdrLen) {
            EXPECT_EQ(r.drop, Drop::eth_truncated) << n;
        } else if (n < kEthHdrLen + sizeof(ArpHdr)) {
            EXPECT_EQ(r.drop, Drop::arp_malformed) << n;
        } else {
            EXPECT_EQ(r.kind, RxKind::arp_request) << n;
        }
    }
}

// ============================================================================================
// Fuzz: a fixed-seed stream of mutations of valid frames. classify must never read outside
// the frame (each input is an exactly sized heap buffer, so AddressSanitizer or valgrind
// reports any over-read), must return offsets and lengths inside the frame, and must only
// accept frames that pass the checks its kind promises.

void check_invariants(std::span<const std::uint8_t> f, const RxFrame& r) {
    const std::size_t size = f.size();
    if (r.kind == RxKind::drop) {
        ASSERT_LT(static_cast<std::size_t>(r.drop), kDropReasons);
        ASSERT_NE(r.drop, Drop::udp_no_listener);
        ASSERT_NE(r.drop, Drop::tcp_no_listener);
        ASSERT_NE(r.drop, Drop::rx_scattered);
        ASSERT_NE(r.drop, Drop::arp_not_for_us);
        return;
    }
    ASSERT_EQ(r.drop, Drop::count_);
    ASSERT_GE(size, kEthHdrLen);
    const MacAddr dst{{f[0], f[1], f[2], f[3], f[4], f[5]}};
    ASSERT_TRUE(dst == kLocalMac || dst.is_broadcast());
    ASSERT_EQ(r.l3_offset, kEthHdrLen);
    switch (r.kind) {
        case RxKind::arp_request:
        case RxKind::arp_reply:
        case RxKind::arp_other:
            ASSERT_LE(r.l3_offset + sizeof(ArpHdr), size);
            ASSERT_EQ(get16(f, 12), 0x0806);
            return;
        default:
            break;
    }
    ASSERT_EQ(get16(f, 12), 0x0800);
    ASSERT_GE(r.l4_offset, kL4);
    ASSERT_LE(std::size_t{r.l4_offset} + r.l4_length, size);
    const auto& h = *reinterpret_cast<const Ipv4Hdr*>(f.data() + kIp);
    ASSERT_EQ(r.l4_offset, kIp + h.header_length());
    ASSERT_LE(kIp + h.total_length.host(), size);
    ASSERT_TRUE(csum_ok(ipv4_header_bytes(h)));
    ASSERT_EQ(h.dst.host(), kLocalIp.value);
    ASSERT_FALSE(h.is_fragment());
    ASSERT_EQ(r.src_ip.value, h.src.host());
    const auto l4 = f.subspan(r.l4_offset, r.l4_length);
    switch (r.kind) {
        case RxKind::icmp_echo_request:
        case RxKind::icmp_echo_reply:
            ASSERT_EQ(h.proto, 1);
            ASSERT_GE(r.l4_length, 8);
            ASSERT_TRUE(csum_ok(l4));
            break;
        case RxKind::icmp_unreachable:
            ASSERT_EQ(h.proto, 1);
            ASSERT_EQ(l4[0], 3);
            ASSERT_GE(r.l4_length, 8 + 20 + 8);
            ASSERT_TRUE(csum_ok(l4));
            break;
        case RxKind::udp:
            ASSERT_EQ(h.proto, 17);
            ASSERT_GE(r.l4_length, 8);
            ASSERT_EQ(get16(l4, 4), r.l4_length);
            ASSERT_EQ(get16(l4, 2), r.dst_port);
            ASSERT_TRUE(udp_checksum_ok(r.src_ip, kLocalIp, l4));
            break;
        case RxKind::tcp:
            ASSERT_EQ(h.proto, 6);
            ASSERT_GE(r.l4_length, 20);
            ASSERT_EQ(get16(l4, 2), r.dst_port);
            break;
        default:
            FAIL() << "unexpected kind";
    }
}

TEST(Classify, fuzzed_frames_stay_in_bounds) {
    const std::vector<Frame> seeds = {
        echo_request(56),
        echo_request(0),
        echo_reply(),
        udp(64, true),
        udp(0, true),
        udp(3, false),
        udp(300, true),
        tcp(),
        tcp(22, 40),
        arp(ArpOp::request, kLocalIp),
        arp(ArpOp::reply, kLocalIp, kLocalMac),
        arp(ArpOp::request, kOtherIp),
        with_ip_options(udp(30)),
        with_ip_options(echo_request(9)),
        unreachable(),
    };
    std::mt19937 rng(0x5eed);
    std::array<std::size_t, 9> kinds{};
    constexpr int kIterations = 100'000;
    for (int it = 0; it < kIterations; ++it) {
        Frame f = seeds[rng() % seeds.size()];
        const int mutations = 1 + static_cast<int>(rng() % 4);
        for (int m = 0; m < mutations; ++m) {
            switch (rng() % 8) {
                case 0:  // flip a bit in the headers
                    if (!f.empty())
                        f[rng() % std::min<std::size_t>(f.size(), 64)] ^= 1u << (rng() % 8);
                    break;
                case 1:  // random byte anywhere
                    if (!f.empty()) f[rng() % f.size()] = static_cast<std::uint8_t>(rng());
                    break;
                case 2:  // truncate
                    f.resize(rng() % (f.size() + 1));
                    break;
                case 3:  // extend with junk (padding, or a longer frame than the headers say)
                    for (std::size_t n = rng() % 40; n > 0; --n)
                        f.push_back(static_cast<std::uint8_t>(rng()));
                    break;
                case 4:  // random IHL
                    if (f.size() > kIp) f[kIp] = static_cast<std::uint8_t>(0x40 | (rng() % 16));
                    break;
                case 5:  // random IP total length, near the real one or anywhere
                    if (f.size() > kIp + 3) {
                        const std::uint16_t v =
                            rng() % 2 ? static_cast<std::uint16_t>(rng())
                                      : static_cast<std::uint16_t>(f.size() - kIp - 8 + rng() % 16);
                        put16(f, kIp + 2, v);
                    }
                    break;
                case 6:  // random UDP length / ICMP or TCP bytes at the transport header
                    if (f.size() > kL4 + 5)
                        put16(f, kL4 + 4,
                              static_cast<std::uint16_t>(f.size() - kL4 - 8 + rng() % 16));
                    break;
                case 7:  // random ethertype or IP protocol
                    if (f.size() > kIp + 9 && rng() % 2) {
                        const std::uint8_t protos[] = {1, 6, 17, 2, 47, 0, 255};
                        f[kIp + 9] = protos[rng() % std::size(protos)];
                    } else if (f.size() > 13) {
                        const std::uint16_t types[] = {0x0800, 0x0806, 0x86dd, 0x8100, 0};
                        put16(f, 12, types[rng() % std::size(types)]);
                    }
                    break;
            }
        }
        // Usually repair the IPv4 header checksum so that the deeper checks are reached too.
        if (f.size() >= kL4 && rng() % 4 != 0) {
            auto& h = iph(f);
            const std::size_t hlen = h.header_length();
            if (hlen >= 20 && kIp + hlen <= f.size()) ipv4_set_checksum(h);
        }
        const Frame exact(f.begin(), f.end());
        const RxFrame r = classify(exact, kLocal);
        kinds[static_cast<std::size_t>(r.kind)]++;
        check_invariants(exact, r);
        if (testing::Test::HasFatalFailure()) {
            FAIL() << "iteration " << it << ", frame of " << exact.size() << " bytes";
        }
    }
    // The mutations keep a fair share of frames valid, so every kind was exercised.
    for (std::size_t k = 0; k < kinds.size(); ++k) EXPECT_GT(kinds[k], 0u) << "kind " << k;
}

}  // namespace
}  // namespace snic::net
