// Our segment parser and builder against real Linux TCP: siw_real_crc.pcap (iWARP between
// two Linux hosts, tests/vectors/README.md). The capture was taken where the senders'
// checksum offload had not run yet (CHECKSUM_PARTIAL): each TCP checksum field holds the
// folded pseudo-header sum Linux computed, not the final checksum. So for every segment:
// the field must equal our pseudo-header sum (Linux's IPv4 pseudo-header against ours),
// the segment must parse, and rebuilding it from the parsed fields with write_segment()
// must give back the same bytes, option layout included, apart from the checksum, which
// must then verify; and for a few segments our checksum must equal the one Wireshark
// (tshark 4.0, tcp.checksum_calculated) computes.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "proto/net/checksum.h"
#include "proto/tcp/segment.h"
#include "tests/unit/pcap.h"

namespace snic::tcp {
namespace {

struct TcpFrame {
    IpAddr src, dst;
    std::span<const std::uint8_t> tcp;
};

// The TCP bytes of an IPv4 frame, or false.
bool tcp_of(std::span<const std::uint8_t> f, TcpFrame& out) {
    if (f.size() < 34 || f[12] != 0x08 || f[13] != 0x00) return false;
    const auto ip = f.subspan(14);
    if ((ip[0] >> 4) != 4 || ip[9] != 6) return false;
    const std::size_t ihl = (ip[0] & 0x0f) * 4u;
    const std::size_t total = static_cast<std::size_t>(ip[2] << 8 | ip[3]);
    if (total > ip.size() || total < ihl) return false;
    auto addr = [&](std::size_t at) {
        return IpAddr::v4(net::Ipv4Addr{std::uint32_t{ip[at]} << 24 |
                                        std::uint32_t{ip[at + 1]} << 16 |
                                        std::uint32_t{ip[at + 2]} << 8 | ip[at + 3]});
    };
    out.src = addr(12);
    out.dst = addr(16);
    out.tcp = ip.subspan(ihl, total - ihl);
    return true;
}

TEST(TcpVectors, linux_segments_verify_and_rebuild_byte_for_byte) {
    test::Pcap cap;
    ASSERT_TRUE(test::read_pcap(test::vector_path("siw_real_crc.pcap"), cap));
    // Frame number (1-based) -> Wireshark's calculated checksum.
    const std::map<std::size_t, std::uint16_t> wireshark = {
        {34, 0xcbe4},   // SYN
        {35, 0xb87e},   // SYN-ACK
        {37, 0x3610},   // 24 bytes (the MPA request)
        {66, 0xde1a},   // FIN
        {108, 0xe37d},  // 1444 bytes
        {112, 0x4212},  // 1268 bytes
    };
    std::size_t segments = 0, syns = 0, with_payload = 0, rebuilt = 0, checked = 0;
    for (std::size_t n = 0; n < cap.frames.size(); ++n) {
        TcpFrame t;
        if (!tcp_of(cap.frames[n], t)) continue;
        ++segments;
        const std::uint32_t ps = pseudo_sum(t.src, t.dst, static_cast<std::uint32_t>(t.tcp.size()));
        const std::uint16_t field = static_cast<std::uint16_t>(t.tcp[16] << 8 | t.tcp[17]);
        EXPECT_EQ(field, net::csum_fold(ps)) << "frame " << n + 1;
        Segment g;
        ASSERT_EQ(parse_segment(t.tcp, ps, g, false), ParseError::none) << "frame " << n + 1;
        if (g.has(flag::syn)) {
            ++syns;
            EXPECT_TRUE(g.opts.has_mss && g.opts.has_wscale && g.opts.sack_permitted &&
                        g.opts.has_timestamps);
        } else {
            EXPECT_TRUE(g.opts.has_timestamps);
        }
        if (!g.payload.empty()) ++with_payload;
        SegmentSpec s;
        s.src_port = g.src_port;
        s.dst_port = g.dst_port;
        s.seq = g.seq;
        s.ack = g.ack;
        s.flags = g.flags;
        s.window = g.window;
        s.urgent = g.urgent;
        s.opts = g.opts;
        ASSERT_EQ(header_length(s), g.header_length);
        std::vector<std::uint8_t> b(t.tcp.size());
        ASSERT_EQ(write_segment(b, s, g.payload, {}, ps), b.size());
        EXPECT_TRUE(net::csum_ok(b, ps));
        Segment again;
        EXPECT_EQ(parse_segment(b, ps, again), ParseError::none);
        const std::uint16_t ours = static_cast<std::uint16_t>(b[16] << 8 | b[17]);
        if (auto w = wireshark.find(n + 1); w != wireshark.end()) {
            EXPECT_EQ(ours, w->second) << "frame " << n + 1;
            ++checked;
        }
        b[16] = t.tcp[16];
        b[17] = t.tcp[17];
        EXPECT_EQ(b, std::vector<std::uint8_t>(t.tcp.begin(), t.tcp.end())) << "frame " << n + 1;
        if (b == std::vector<std::uint8_t>(t.tcp.begin(), t.tcp.end())) ++rebuilt;
    }
    EXPECT_EQ(checked, wireshark.size());
    EXPECT_EQ(segments, 605u);
    EXPECT_EQ(syns, 14u);  // 7 SYN and 7 SYN-ACK
    EXPECT_GT(with_payload, 300u);
    EXPECT_EQ(rebuilt, segments);
}

}  // namespace
}  // namespace snic::tcp
