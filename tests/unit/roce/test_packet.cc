// Parse and build over the opcode table: every opcode built and parsed back with its ICRC;
// real rxe frames rebuilt byte for byte; each rejection rule of parse() and build().
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

#include "proto/net/checksum.h"
#include "proto/net/ethernet.h"
#include "proto/net/ipv4.h"
#include "proto/net/rx.h"
#include "proto/net/udp.h"
#include "proto/roce/icrc.h"
#include "proto/roce/opcode.h"
#include "proto/roce/packet.h"

namespace snic::roce {
namespace {

constexpr net::Ipv4Addr ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return net::Ipv4Addr{std::uint32_t{a} << 24 | std::uint32_t{b} << 16 | std::uint32_t{c} << 8 |
                         d};
}

const net::UdpFlow kFlow = {
    .src_mac = {{0x02, 0, 0, 0, 0, 0x01}},
    .dst_mac = {{0x02, 0, 0, 0, 0, 0x02}},
    .src_ip = ip(198, 18, 0, 1),
    .dst_ip = ip(198, 18, 0, 2),
    .src_port = 0xc0de,
    .dst_port = net::kRoceV2Port,
};

// A spec with every field set to something recognisable.
PacketSpec full_spec(Opcode op, std::span<const std::uint8_t> payload) {
    PacketSpec s;
    s.opcode = op;
    s.solicited = true;
    s.mig_req = true;
    s.fecn = false;
    s.becn = true;
    s.ack_req = true;
    s.pkey = 0x8001;
    s.dest_qp = 0xabcdef;
    s.psn = 0xfffffe;
    s.deth.qkey = 0x11223344;
    s.deth.src_qp = 0x000042;
    s.reth.va = 0x0123456789abcdefull;
    s.reth.rkey = 0xdeadbeef;
    s.reth.dma_len = static_cast<std::uint32_t>(payload.size());
    s.atomic_eth.va = 0x00007f0000001000ull;
    s.atomic_eth.rkey = 0xcafef00d;
    s.atomic_eth.swap_add = 0x1111222233334444ull;
    s.atomic_eth.compare = 0x5555666677778888ull;
    s.aeth.syndrome = aeth_syndrome(AckType::ack, kCreditsInvalid);
    s.aeth.msn = 0x00beef;
    s.atomic_ack_eth.orig = 0x99aabbccddeeff00ull;
    s.immdt.imm = 0x0badc0de;
    s.ieth.rkey = 0x76543210;
    s.payload = payload;
    return s;
}

std::vector<std::uint8_t> pattern(std::size_t n) {
    std::vector<std::uint8_t> v(n);
    std::iota(v.begin(), v.end(), std::uint8_t{0x30});
    return v;
}

template <typename H>
bool same_bytes(const H* got, const H& want) {
    return got != nullptr && std::memcmp(got, &want, sizeof(H)) == 0;
}

TEST(Packet, every_opcode_round_trips_through_build_and_parse) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        const std::vector<std::size_t> sizes =
            info.has(kHasPayload) ? std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 255, 1024}
                                  : std::vector<std::size_t>{0};
        for (std::size_t n : sizes) {
            SCOPED_TRACE(std::string(info.name) + " payload " + std::to_string(n));
            const auto payload = pattern(n);
            const PacketSpec spec = full_spec(op, payload);
            const std::size_t tlen = transport_length(op, n);
            // Exactly sized: a write past the frame would be a heap overflow.
            std::vector<std::uint8_t> frame(net::kUdpFrameOverhead + tlen);
            ASSERT_EQ(build_ipv4_frame(frame, kFlow, spec), frame.size());

            // The network layers are what net::classify accepts, with a good IPv4 checksum.
            const net::RxFrame rx = net::classify(frame, net::LocalIf{kFlow.dst_mac, kFlow.dst_ip});
            ASSERT_EQ(rx.kind, net::RxKind::udp) << net::drop_name(rx.drop);
            EXPECT_EQ(rx.dst_port, 4791);
            EXPECT_EQ(rx.l4_length, 8 + tlen);
            const auto l3 = std::span<const std::uint8_t>(frame).subspan(net::kEthHdrLen);
            EXPECT_TRUE(net::csum_ok(l3.first(20)));
            EXPECT_TRUE(icrc_verify(l3));

            const Packet p = parse(l3.subspan(28));
            ASSERT_TRUE(p.ok()) << drop_name(p.drop);
            EXPECT_EQ(p.info, &info);
            EXPECT_EQ(p.opcode(), static_cast<std::uint8_t>(op));
            const Bth& bth = p.bth();
            EXPECT_TRUE(bth.solicited());
            EXPECT_TRUE(bth.mig_req());
            EXPECT_FALSE(bth.fecn());
            EXPECT_TRUE(bth.becn());
            EXPECT_TRUE(bth.ack_req());
            EXPECT_EQ(bth.tver(), 0);
            EXPECT_EQ(bth.pad_count(), pad_for(n));
            EXPECT_EQ(p.pad, pad_for(n));
            EXPECT_EQ(bth.pkey.host(), 0x8001);
            EXPECT_EQ(bth.dest_qp.host(), 0xabcdefu);
            EXPECT_EQ(bth.psn.host(), 0xfffffeu);
            EXPECT_EQ(info.has(Ext::deth), same_bytes(p.deth(), spec.deth));
            EXPECT_EQ(info.has(Ext::reth), same_bytes(p.reth(), spec.reth));
            EXPECT_EQ(info.has(Ext::atomic_eth), same_bytes(p.atomic_eth(), spec.atomic_eth));
            EXPECT_EQ(info.has(Ext::aeth), same_bytes(p.aeth(), spec.aeth));
            EXPECT_EQ(info.has(Ext::atomic_ack_eth),
                      same_bytes(p.atomic_ack_eth(), spec.atomic_ack_eth));
            EXPECT_EQ(info.has(Ext::immdt), same_bytes(p.immdt(), spec.immdt));
            EXPECT_EQ(info.has(Ext::ieth), same_bytes(p.ieth(), spec.ieth));
            EXPECT_TRUE(
                std::equal(p.payload.begin(), p.payload.end(), payload.begin(), payload.end()));
            // Pad bytes are zero, and the ICRC parse reports is the one icrc_fill stored.
            for (std::size_t i = 0; i < p.pad; ++i) EXPECT_EQ(p.payload.data()[n + i], 0);
            EXPECT_EQ(p.icrc, icrc_compute(l3).value());
        }
    }
}

TEST(Packet, unset_flags_build_as_zero_bits) {
    PacketSpec s;
    s.opcode = Opcode::rc_send_only;
    std::array<std::uint8_t, 16> out{};
    out.fill(0xaa);
    ASSERT_EQ(build(out, s), 16u);
    const std::array<std::uint8_t, 16> want = {0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
                                               0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    EXPECT_EQ(out, want);
}

TEST(Packet, udp_checksum_when_asked_covers_the_icrc_and_both_verify) {
    const auto payload = pattern(13);
    std::vector<std::uint8_t> frame(200);
    const std::size_t len =
        build_ipv4_frame(frame, kFlow, full_spec(Opcode::rc_send_only, payload), true);
    ASSERT_GT(len, 0u);
    frame.resize(len);
    const auto l3 = std::span<const std::uint8_t>(frame).subspan(14);
    const auto dgram = l3.subspan(20);
    EXPECT_NE(dgram[6] << 8 | dgram[7], 0);
    EXPECT_TRUE(net::udp_checksum_ok(kFlow.src_ip, kFlow.dst_ip, dgram));
    EXPECT_TRUE(icrc_verify(l3));
}

// --- Real frames from tests/vectors/rxe_real.pcap (as in tests/unit/net), rebuilt --

// Frame 46: RC SEND Only, 100 bytes of 0x7b, 10.99.0.3 -> 10.99.0.2, IPv4 id 0x4d9c.
std::vector<std::uint8_t> real_send_only() {
    std::vector<std::uint8_t> f = {0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x52, 0x54, 0x00, 0x99, 0x00,
                                   0x03, 0x08, 0x00, 0x45, 0x00, 0x00, 0x90, 0x4d, 0x9c, 0x40, 0x00,
                                   0x40, 0x11, 0xd7, 0xf6, 0x0a, 0x63, 0x00, 0x03, 0x0a, 0x63, 0x00,
                                   0x02, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x7c, 0x00, 0x00, 0x04, 0x00,
                                   0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x96, 0x84, 0x40};
    f.insert(f.end(), 100, 0x7b);
    for (std::uint8_t b : {0x5b, 0xa5, 0xf1, 0xd8}) f.push_back(b);
    return f;
}

// Frame 47: RC Acknowledge of it, 10.99.0.2 -> 10.99.0.3, IPv4 id 0x2584.
const std::vector<std::uint8_t> kRealAck = {
    0x52, 0x54, 0x00, 0x99, 0x00, 0x03, 0x52, 0x54, 0x00, 0x99, 0x00, 0x02, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x30, 0x25, 0x84, 0x40, 0x00, 0x40, 0x11, 0x00, 0x6f, 0x0a, 0x63, 0x00, 0x02, 0x0a, 0x63,
    0x00, 0x03, 0xc1, 0x21, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x00, 0x11, 0x00, 0x96, 0x84, 0x40, 0x1f, 0x00, 0x00, 0x01, 0x82, 0x72, 0x2d, 0x25,
};

// Our builder writes IPv4 id 0; give the frame the capture's id, then redo what depends on it.
void set_ipv4_id(std::vector<std::uint8_t>& frame, std::uint16_t id) {
    auto& iph = *reinterpret_cast<net::Ipv4Hdr*>(frame.data() + 14);
    iph.id = id;
    net::ipv4_set_checksum(iph);
    ASSERT_TRUE(icrc_fill(std::span(frame).subspan(14)));
}

TEST(Packet, builder_reproduces_a_real_rxe_send_only_byte_for_byte) {
    const auto real = real_send_only();
    const std::vector<std::uint8_t> payload(100, 0x7b);
    PacketSpec s;
    s.opcode = Opcode::rc_send_only;
    s.dest_qp = 0x11;
    s.psn = 0x968440;
    s.ack_req = true;
    s.payload = payload;
    const net::UdpFlow flow = {{{0x52, 0x54, 0x00, 0x99, 0x00, 0x03}},
                               {{0x52, 0x54, 0x00, 0x99, 0x00, 0x02}},
                               ip(10, 99, 0, 3),
                               ip(10, 99, 0, 2),
                               0xc121,
                               4791};
    std::vector<std::uint8_t> frame(real.size());
    ASSERT_EQ(build_ipv4_frame(frame, flow, s), real.size());
    set_ipv4_id(frame, 0x4d9c);
    EXPECT_EQ(frame, real);
}

TEST(Packet, builder_reproduces_a_real_rxe_ack_byte_for_byte) {
    PacketSpec s;
    s.opcode = Opcode::rc_acknowledge;
    s.dest_qp = 0x11;
    s.psn = 0x968440;
    s.aeth.syndrome = aeth_syndrome(AckType::ack, kCreditsInvalid);
    s.aeth.msn = 1;
    const net::UdpFlow flow = {{{0x52, 0x54, 0x00, 0x99, 0x00, 0x02}},
                               {{0x52, 0x54, 0x00, 0x99, 0x00, 0x03}},
                               ip(10, 99, 0, 2),
                               ip(10, 99, 0, 3),
                               0xc121,
                               4791};
    std::vector<std::uint8_t> frame(kRealAck.size());
    ASSERT_EQ(build_ipv4_frame(frame, flow, s), kRealAck.size());
    set_ipv4_id(frame, 0x2584);
    EXPECT_EQ(frame, kRealAck);
}

TEST(Packet, real_ack_parses_to_its_fields) {
    const Packet p = parse(std::span(kRealAck).subspan(42));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.info->name, "RC_ACKNOWLEDGE");
    EXPECT_EQ(p.bth().dest_qp.host(), 0x11u);
    EXPECT_EQ(p.bth().psn.host(), 0x968440u);
    ASSERT_NE(p.aeth(), nullptr);
    EXPECT_EQ(p.aeth()->syndrome, 0x1f);
    EXPECT_EQ(p.aeth()->msn.host(), 1u);
    EXPECT_EQ(p.reth(), nullptr);
    EXPECT_TRUE(p.payload.empty());
    EXPECT_EQ(p.icrc, 0x252d7282u);
}

// --- parse() rejections, one rule each ------------------------------------------------------

std::vector<std::uint8_t> transport(Opcode op, std::size_t payload) {
    const auto data = pattern(payload);
    std::vector<std::uint8_t> out(transport_length(op, payload));
    EXPECT_EQ(build(out, full_spec(op, data)), out.size());
    return out;
}

TEST(PacketParse, shorter_than_bth_and_icrc_is_truncated) {
    const auto t = transport(Opcode::rc_send_only, 0);
    for (std::size_t n = 0; n < kBthLen + kIcrcLen; ++n) {
        const std::vector<std::uint8_t> cut(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(n));
        EXPECT_EQ(parse(cut).drop, Drop::truncated) << n;
    }
    EXPECT_TRUE(parse(t).ok());
}

TEST(PacketParse, shorter_than_the_opcodes_headers_and_icrc_is_truncated) {
    for (Opcode op : all_opcodes()) {
        const auto t = transport(op, 0);
        const std::size_t need = opcode_info(op).length + kIcrcLen;
        for (std::size_t n = kBthLen + kIcrcLen; n < need; ++n) {
            const std::vector<std::uint8_t> cut(t.begin(),
                                                t.begin() + static_cast<std::ptrdiff_t>(n));
            EXPECT_EQ(parse(cut).drop, Drop::truncated) << opcode_info(op).name << " " << n;
        }
    }
}

TEST(PacketParse, opcode_outside_the_table_is_unknown) {
    auto t = transport(Opcode::rc_send_only, 4);
    for (std::uint8_t op : {0x15, 0x18, 0x1f, 0x40, 0x44, 0x80, 0x81, 0xa4, 0xff}) {
        t[0] = op;
        EXPECT_EQ(parse(t).drop, Drop::unknown_opcode) << int(op);
    }
}

TEST(PacketParse, transport_version_other_than_zero_is_rejected) {
    auto t = transport(Opcode::rc_send_only, 4);
    for (std::uint8_t v = 1; v < 16; ++v) {
        t[1] = static_cast<std::uint8_t>((t[1] & 0xf0) | v);
        EXPECT_EQ(parse(t).drop, Drop::bad_version) << int(v);
    }
}

TEST(PacketParse, payload_on_an_opcode_without_one_is_rejected) {
    for (Opcode op : all_opcodes()) {
        if (opcode_info(op).has(kHasPayload)) continue;
        auto t = transport(op, 0);
        EXPECT_TRUE(parse(t).ok()) << opcode_info(op).name;
        t.insert(t.begin() + opcode_info(op).length, 4, 0);
        EXPECT_EQ(parse(t).drop, Drop::unexpected_payload) << opcode_info(op).name;
        auto padded = transport(op, 0);
        padded[1] |= 0x30;  // PadCnt 3 with nothing to pad
        EXPECT_EQ(parse(padded).drop, Drop::unexpected_payload) << opcode_info(op).name;
    }
}

TEST(PacketParse, pad_larger_than_the_payload_is_rejected) {
    auto t = transport(Opcode::rc_send_only, 0);
    t[1] = static_cast<std::uint8_t>(t[1] | 0x10);  // PadCnt 1, no payload bytes
    EXPECT_EQ(parse(t).drop, Drop::bad_pad);
    auto two = transport(Opcode::rc_send_only, 2);  // 2 bytes + 2 pad
    two[1] =
        static_cast<std::uint8_t>((two[1] & ~0x30) | 0x30);  // claims 3 pad of the 4 body bytes
    const Packet p = parse(two);
    ASSERT_TRUE(p.ok());  // well formed: 1 byte of payload, 3 of pad (the ICRC would tell)
    EXPECT_EQ(p.payload.size(), 1u);
}

TEST(PacketParse, length_not_a_multiple_of_four_is_rejected) {
    auto t = transport(Opcode::rc_send_only, 8);
    t.insert(t.begin() + 12, 0x00);  // 9 bytes of payload, PadCnt 0
    EXPECT_EQ(parse(t).drop, Drop::misaligned_length);
}

TEST(PacketParse, every_prefix_of_every_opcode_stays_in_bounds) {
    // Exactly sized copies: an out-of-bounds read is a heap over-read under sanitizers,
    // and the views must lie inside the buffer.
    for (Opcode op : all_opcodes()) {
        const auto t = transport(op, opcode_info(op).has(kHasPayload) ? 9 : 0);
        for (std::size_t n = 0; n <= t.size(); ++n) {
            const std::vector<std::uint8_t> cut(t.begin(),
                                                t.begin() + static_cast<std::ptrdiff_t>(n));
            const Packet p = parse(cut);
            if (!p.ok()) continue;
            EXPECT_GE(p.payload.data(), cut.data() + p.info->length);
            EXPECT_LE(p.payload.data() + p.payload.size() + p.pad + kIcrcLen, cut.data() + n);
        }
    }
}

// --- build() rejections ---------------------------------------------------------------------

TEST(PacketBuild, unknown_opcode_builds_nothing) {
    PacketSpec s;
    s.opcode = static_cast<Opcode>(0x15);
    std::array<std::uint8_t, 64> out{};
    EXPECT_EQ(build(out, s), 0u);
    EXPECT_EQ(write_headers(out, s, 0), 0u);
    EXPECT_EQ(build_ipv4_frame(out, kFlow, s), 0u);
}

TEST(PacketBuild, payload_on_an_opcode_without_one_builds_nothing) {
    const auto data = pattern(4);
    std::array<std::uint8_t, 128> out{};
    for (Opcode op : {Opcode::rc_acknowledge, Opcode::rc_rdma_read_request, Opcode::rc_fetch_add}) {
        EXPECT_EQ(build(out, full_spec(op, data)), 0u) << opcode_info(op).name;
        EXPECT_EQ(build_ipv4_frame(out, kFlow, full_spec(op, data)), 0u) << opcode_info(op).name;
    }
}

TEST(PacketBuild, too_small_a_buffer_builds_nothing) {
    const auto data = pattern(10);
    for (Opcode op : all_opcodes()) {
        const auto spec =
            full_spec(op, opcode_info(op).has(kHasPayload) ? std::span(data)
                                                           : std::span<const std::uint8_t>());
        const std::size_t need = transport_length(op, spec.payload.size());
        std::vector<std::uint8_t> out(need - 1);
        EXPECT_EQ(build(out, spec), 0u) << opcode_info(op).name;
        std::vector<std::uint8_t> frame(net::kUdpFrameOverhead + need - 1);
        EXPECT_EQ(build_ipv4_frame(frame, kFlow, spec), 0u) << opcode_info(op).name;
        out.resize(need);
        EXPECT_EQ(build(out, spec), need) << opcode_info(op).name;
    }
}

TEST(PacketBuild, pad_brings_the_payload_to_a_multiple_of_four) {
    EXPECT_EQ(pad_for(0), 0);
    EXPECT_EQ(pad_for(1), 3);
    EXPECT_EQ(pad_for(2), 2);
    EXPECT_EQ(pad_for(3), 1);
    EXPECT_EQ(pad_for(4), 0);
    EXPECT_EQ(pad_for(1023), 1);
    EXPECT_EQ(transport_length(Opcode::rc_send_only, 5), 12u + 5 + 3 + 4);
    EXPECT_EQ(transport_length(Opcode::rc_rdma_write_only_with_immediate, 4096), 32u + 4096 + 4);
}

// ---- FlowFrame: the prepared headers write what frame_ipv4 writes -----------------------------

// Every opcode an RC QP sends, each payload length class, flags and PSNs varied: byte for byte
// the frame build_ipv4_frame writes, its ICRC included, and it verifies.
TEST(FlowFrame, frames_what_frame_ipv4_frames_for_every_rc_opcode) {
    const FlowFrame prepared(kFlow, 0x8001, 0xabcdef);
    const auto payload = pattern(4096);
    int compared = 0;
    for (std::uint8_t code = 0; code < 0x20; ++code) {
        const auto op = static_cast<Opcode>(code);
        if (!opcode_info(code).known()) continue;
        for (const std::size_t len : {0, 1, 2, 3, 4, 7, 8, 63, 64, 65, 1024, 4096}) {
            if (len != 0 && !opcode_info(code).has(kHasPayload)) continue;
            PacketSpec s = full_spec(op, std::span(payload).first(len));
            s.psn = static_cast<std::uint32_t>(len * 0x010203u + code) & 0xffffff;
            s.solicited = (len & 1) != 0;
            s.ack_req = (len & 2) != 0;
            s.mig_req = (code & 1) != 0;
            s.becn = false;
            std::vector<std::uint8_t> want(net::kUdpFrameOverhead + 64 + len + 8);
            const std::size_t n = build_ipv4_frame(want, kFlow, s);
            ASSERT_NE(n, 0u);
            want.resize(n);

            std::vector<std::uint8_t> got(want.size() + 16, 0xee);
            const std::size_t packet = build(std::span(got).subspan(net::kUdpFrameOverhead), s);
            ASSERT_EQ(prepared.frame(got, kFlow.dst_mac, packet), n);
            got.resize(n);
            EXPECT_EQ(got, want) << "opcode " << int{code} << ", " << len << " bytes";
            EXPECT_TRUE(icrc_verify(std::span(got).subspan(net::kEthHdrLen)));
            const auto& iph = *reinterpret_cast<const net::Ipv4Hdr*>(got.data() + 14);
            EXPECT_TRUE(net::csum_ok(net::ipv4_header_bytes(iph)));
            ++compared;
        }
    }
    EXPECT_GT(compared, 100);
}

// The payload gathered from pieces while the ICRC is folded over it (the RC QP's transmit):
// the same bytes as the packet built whole, for any split of the payload, pad included.
TEST(FlowFrame, gathers_the_payload_into_the_frame_frame_ipv4_frames) {
    const FlowFrame prepared(kFlow, 0x8001, 0xabcdef);
    const auto payload = pattern(4096);
    int compared = 0;
    for (const Opcode op : {Opcode::rc_send_only, Opcode::rc_rdma_write_first,
                            Opcode::rc_rdma_write_only_with_immediate,
                            Opcode::rc_send_last_with_invalidate, Opcode::rc_acknowledge}) {
        const bool carries = opcode_info(op).has(kHasPayload);
        for (const std::size_t len : {0, 1, 3, 8, 63, 64, 257, 1024, 4093, 4096}) {
            if (len != 0 && !carries) continue;
            PacketSpec s = full_spec(op, std::span(payload).first(len));
            s.psn = static_cast<std::uint32_t>(len * 7919) & 0xffffff;
            std::vector<std::uint8_t> want(net::kUdpFrameOverhead + 64 + len + 8);
            const std::size_t n = build_ipv4_frame(want, kFlow, s);
            ASSERT_NE(n, 0u);
            want.resize(n);
            const std::size_t packet = transport_length(op, len);
            // One piece, two, and three with an empty one between.
            const std::size_t cut = len / 3;
            const std::vector<std::vector<TxPiece>> splits = {
                {{payload.data(), static_cast<std::uint32_t>(len)}},
                {{payload.data(), static_cast<std::uint32_t>(cut)},
                 {payload.data() + cut, static_cast<std::uint32_t>(len - cut)}},
                {{payload.data(), static_cast<std::uint32_t>(len - cut)},
                 {nullptr, 0},
                 {payload.data() + len - cut, static_cast<std::uint32_t>(cut)}},
            };
            for (const auto& pieces : splits) {
                std::vector<std::uint8_t> got(want.size() + 16, 0xee);
                const std::size_t hdr =
                    write_headers(std::span(got).subspan(net::kUdpFrameOverhead), s, len);
                ASSERT_EQ(prepared.frame_gather(got, kFlow.dst_mac, packet, hdr, pieces), n);
                got.resize(n);
                EXPECT_EQ(got, want) << opcode_info(op).name << ", " << len << " bytes in "
                                     << pieces.size() << " pieces";
                ++compared;
            }
        }
    }
    EXPECT_GT(compared, 60);
}

// A payload left where it lies (the transmit from the client's memory): the head, the payload
// and the ICRC frame_head stores are, joined, what frame_gather writes; and parse_split of the
// three pieces is parse() of the joined packet.
TEST(FlowFrame, frames_a_placed_payload_as_frame_gather_does_and_parse_split_reads_it) {
    const FlowFrame prepared(kFlow, 0x8001, 0xabcdef);
    const auto payload = pattern(4096);
    int compared = 0;
    for (const Opcode op :
         {Opcode::rc_send_only, Opcode::rc_rdma_write_first,
          Opcode::rc_rdma_write_only_with_immediate, Opcode::rc_rdma_read_response_middle,
          Opcode::rc_send_last_with_invalidate}) {
        for (const std::size_t len : {4, 256, 1024, 2048, 4096}) {
            PacketSpec s = full_spec(op, std::span(payload).first(len));
            s.psn = static_cast<std::uint32_t>(len * 131) & 0xffffff;
            const std::size_t packet = transport_length(op, len);
            const TxPiece piece{payload.data(), static_cast<std::uint32_t>(len)};
            std::vector<std::uint8_t> want(net::kUdpFrameOverhead + packet, 0xee);
            const std::size_t hdr =
                write_headers(std::span(want).subspan(net::kUdpFrameOverhead), s, len);
            ASSERT_EQ(prepared.frame_gather(want, kFlow.dst_mac, packet, hdr, {&piece, 1}),
                      want.size());

            std::vector<std::uint8_t> head(net::kUdpFrameOverhead + hdr + 8, 0xee);
            ASSERT_EQ(write_headers(std::span(head).subspan(net::kUdpFrameOverhead), s, len), hdr);
            std::array<std::uint8_t, kIcrcLen> icrc{};
            const std::size_t n =
                prepared.frame_head(head, kFlow.dst_mac, packet, hdr, piece, icrc.data());
            ASSERT_EQ(n, net::kUdpFrameOverhead + hdr);
            std::vector<std::uint8_t> joined(head.begin(), head.begin() + static_cast<long>(n));
            joined.insert(joined.end(), payload.begin(), payload.begin() + static_cast<long>(len));
            joined.insert(joined.end(), icrc.begin(), icrc.end());
            EXPECT_EQ(joined, want) << opcode_info(op).name << ", " << len << " bytes";

            const auto udp = std::span(want).subspan(net::kUdpFrameOverhead);
            const Packet whole = parse(udp);
            const Packet split = parse_split(std::span(head).subspan(net::kUdpFrameOverhead, hdr),
                                             std::span(payload).first(len), icrc);
            ASSERT_TRUE(whole.ok());
            ASSERT_TRUE(split.ok()) << drop_name(split.drop);
            EXPECT_EQ(split.info, whole.info);
            EXPECT_EQ(split.payload.size(), whole.payload.size());
            EXPECT_EQ(split.payload.data(), payload.data());
            EXPECT_EQ(split.icrc, whole.icrc);
            EXPECT_EQ(split.pad, 0);
            EXPECT_EQ(split.bth().psn.host(), whole.bth().psn.host());
            ++compared;
        }
    }
    EXPECT_EQ(compared, 25);
}

TEST(FlowFrame, frame_head_and_parse_split_refuse_what_is_not_their_shape) {
    const FlowFrame prepared(kFlow, kDefaultPkey, 0x12);
    const auto payload = pattern(256);
    std::vector<std::uint8_t> out(net::kUdpFrameOverhead + 64);
    std::array<std::uint8_t, kIcrcLen> icrc{};
    const TxPiece p256{payload.data(), 256}, p255{payload.data(), 255};
    const std::size_t packet = kBthLen + 256 + kIcrcLen;
    EXPECT_NE(prepared.frame_head(out, kFlow.dst_mac, packet, kBthLen, p256, icrc.data()), 0u);
    EXPECT_EQ(prepared.frame_head(out, kFlow.dst_mac, packet + 4, kBthLen, p256, icrc.data()), 0u);
    EXPECT_EQ(prepared.frame_head(out, kFlow.dst_mac, packet - 1, kBthLen, p255, icrc.data()), 0u)
        << "a payload with a pad is not placed";
    EXPECT_EQ(prepared.frame_head(out, kFlow.dst_mac, packet, kBthLen - 4, p256, icrc.data()), 0u);
    EXPECT_EQ(prepared.frame_head(std::span(out).first(net::kUdpFrameOverhead + 4), kFlow.dst_mac,
                                  packet, kBthLen, p256, icrc.data()),
              0u);

    // parse_split: headers exactly, a payload of whole words, four ICRC bytes, no pad.
    PacketSpec s = full_spec(Opcode::rc_rdma_write_only, std::span(payload).first(256));
    std::vector<std::uint8_t> hdr(64);
    const std::size_t h = write_headers(hdr, s, 256);
    hdr.resize(h);
    const auto body = std::span(payload).first(256);
    EXPECT_TRUE(parse_split(hdr, body, icrc).ok());
    EXPECT_EQ(parse_split(std::span(hdr).first(h - 4), body, icrc).drop, Drop::bad_split);
    EXPECT_EQ(parse_split(hdr, body.first(255), icrc).drop, Drop::bad_split);
    EXPECT_EQ(parse_split(hdr, body, std::span(icrc).first(3)).drop, Drop::bad_split);
    EXPECT_EQ(parse_split(std::span(hdr).first(8), body, icrc).drop, Drop::truncated);
    auto bad = hdr;
    bad[0] = 0x1f;  // reserved RC opcode
    EXPECT_EQ(parse_split(bad, body, icrc).drop, Drop::unknown_opcode);
    bad = hdr;
    bad[1] |= 0x30;  // PadCnt 3
    EXPECT_EQ(parse_split(bad, body, icrc).drop, Drop::bad_split);
    PacketSpec ack;
    ack.opcode = Opcode::rc_acknowledge;
    std::vector<std::uint8_t> ack_hdr(64);
    ack_hdr.resize(write_headers(ack_hdr, ack, 0));
    EXPECT_EQ(parse_split(ack_hdr, body, icrc).drop, Drop::bad_split) << "an ACK has no payload";
}

TEST(FlowFrame, refuses_pieces_that_do_not_fit) {
    const FlowFrame prepared(kFlow, kDefaultPkey, 0x12);
    const auto payload = pattern(64);
    std::vector<std::uint8_t> out(net::kUdpFrameOverhead + 128);
    const std::size_t packet = transport_length(Opcode::rc_send_only, 16);  // 12 + 16 + 4
    const TxPiece sixteen{payload.data(), 16}, seventeen{payload.data(), 17};
    EXPECT_NE(prepared.frame_gather(out, kFlow.dst_mac, packet, kBthLen, {&sixteen, 1}), 0u);
    EXPECT_EQ(prepared.frame_gather(out, kFlow.dst_mac, packet, kBthLen, {&seventeen, 1}), 0u);
    const TxPiece two[] = {{payload.data(), 8}, {payload.data(), 9}};
    EXPECT_EQ(prepared.frame_gather(out, kFlow.dst_mac, packet, kBthLen, two), 0u);
    EXPECT_EQ(prepared.frame_gather(out, kFlow.dst_mac, packet, kBthLen - 1, {}), 0u);  // no BTH
    EXPECT_EQ(prepared.frame_gather(out, kFlow.dst_mac, packet, packet, {}), 0u);  // over the ICRC

    std::vector<std::uint8_t> packet_bytes(packet - kIcrcLen, 0xee);  // what tx_alloc gives
    const TxPiece thirteen{payload.data(), 13};
    EXPECT_TRUE(gather_payload(packet_bytes, kBthLen, {&thirteen, 1}));
    EXPECT_TRUE(std::equal(payload.begin(), payload.begin() + 13, packet_bytes.begin() + kBthLen));
    EXPECT_EQ(packet_bytes[kBthLen - 1], 0xee);  // the headers are the caller's
    EXPECT_TRUE(std::all_of(packet_bytes.end() - 3, packet_bytes.end(),
                            [](std::uint8_t b) { return b == 0; }));  // the pad
    EXPECT_TRUE(gather_payload(packet_bytes, kBthLen, {&sixteen, 1}));
    EXPECT_FALSE(gather_payload(packet_bytes, kBthLen, {&seventeen, 1}));
    EXPECT_FALSE(gather_payload(packet_bytes, packet + 1, {}));
}

// An ACK to QP `dest_qp` framed by a FlowFrame prepared for QP 0x12, towards `next_hop`.
std::vector<std::uint8_t> framed_ack(std::uint32_t dest_qp, const net::MacAddr& next_hop) {
    const FlowFrame prepared(kFlow, kDefaultPkey, 0x12);
    PacketSpec s;
    s.opcode = Opcode::rc_acknowledge;
    s.dest_qp = dest_qp;
    std::vector<std::uint8_t> got(128);
    const std::size_t packet = build(std::span(got).subspan(net::kUdpFrameOverhead), s);
    got.resize(prepared.frame(got, next_hop, packet));
    return got;
}

// The next hop is the caller's: an ARP change needs no new preparation.
TEST(FlowFrame, writes_the_next_hop_it_is_given) {
    const net::MacAddr other = {{0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee}};
    const auto got = framed_ack(0x12, other);
    ASSERT_FALSE(got.empty());
    EXPECT_TRUE(std::equal(other.bytes.begin(), other.bytes.end(), got.begin()));
    EXPECT_TRUE(icrc_verify(std::span(got).subspan(net::kEthHdrLen)));
}

// The flow's P_Key and QP are folded in the seed: a BTH naming another QP gets an ICRC the
// receiver rejects, which is why the prepared frame belongs to one connected QP.
TEST(FlowFrame, seed_binds_the_destination_qp) {
    const auto got = framed_ack(0x13, kFlow.dst_mac);
    ASSERT_FALSE(got.empty());
    EXPECT_FALSE(icrc_verify(std::span(got).subspan(net::kEthHdrLen)));
}

TEST(FlowFrame, refuses_what_does_not_fit) {
    const FlowFrame prepared(kFlow, kDefaultPkey, 0x12);
    std::vector<std::uint8_t> out(net::kUdpFrameOverhead + 64);
    EXPECT_EQ(prepared.frame(out, kFlow.dst_mac, 65), 0u);                      // past the buffer
    EXPECT_EQ(prepared.frame(out, kFlow.dst_mac, kBthLen + kIcrcLen - 1), 0u);  // no BTH
    std::vector<std::uint8_t> huge(0x10000 + 64);
    EXPECT_EQ(prepared.frame(huge, kFlow.dst_mac, 0xffff - 28 + 1), 0u);  // longer than IPv4
    EXPECT_NE(prepared.frame(out, kFlow.dst_mac, 64), 0u);
}

}  // namespace
}  // namespace snic::roce
