// The UD engine (proto/roce/ud_qp) and its headers: DETH built and parsed, the GRH area of a
// UD receive buffer, the controlled Q_Key rule, and the engine's send and receive rules over
// the fakes of rc_harness.h (memory, queues) and a wire that records each packet's address.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "proto/net/ipv4.h"
#include "proto/roce/grh.h"
#include "proto/roce/ud_qp.h"
#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

constexpr std::uint32_t kQpn = 0x1234;
constexpr std::uint32_t kQkey = 0x11111111;
constexpr net::Ipv4Addr kPeer{0xc6122f02};  // 198.18.47.2

// Records what a UD QP sends and where to; `unresolved` makes tx_send fail that many times.
class FakeUdWire final : public UdWire {
  public:
    std::span<std::uint8_t> tx_alloc(std::size_t len) override {
        if (refuse > 0) {
            --refuse;
            return {};
        }
        buf_.assign(len, 0xee);
        return buf_;
    }
    bool tx_send(std::size_t len, net::Ipv4Addr dst, std::uint32_t dst_qpn) override {
        if (unresolved > 0) {
            --unresolved;
            return false;
        }
        std::vector<std::uint8_t> p(buf_.begin(), buf_.begin() + static_cast<long>(len));
        p.resize(len + kIcrcLen, 0);
        sent.push_back({std::move(p), dst, dst_qpn});
        return true;
    }
    struct Sent {
        std::vector<std::uint8_t> bytes;
        net::Ipv4Addr dst;
        std::uint32_t dst_qpn;
        Packet parsed() const { return parse(bytes); }
    };
    std::vector<Sent> sent;
    std::uint32_t refuse = 0, unresolved = 0;

  private:
    std::vector<std::uint8_t> buf_;
};

std::array<std::uint8_t, 16> mapped(net::Ipv4Addr a) {
    std::array<std::uint8_t, 16> g{};
    g[10] = g[11] = 0xff;
    g[12] = static_cast<std::uint8_t>(a.value >> 24);
    g[13] = static_cast<std::uint8_t>(a.value >> 16);
    g[14] = static_cast<std::uint8_t>(a.value >> 8);
    g[15] = static_cast<std::uint8_t>(a.value);
    return g;
}

// An IPv4 header as a packet from kPeer would carry it.
std::array<std::uint8_t, 20> ip_header() {
    net::Ipv4Hdr hdr{};
    net::write_ipv4(hdr, kPeer, net::Ipv4Addr{0xc6122f01}, net::IpProto::udp, 100);
    std::array<std::uint8_t, 20> h{};
    std::memcpy(h.data(), &hdr, h.size());
    return h;
}

struct UdFixture : ::testing::Test {
    UdConfig config() {
        UdConfig c;
        c.qpn = kQpn;
        c.qkey = kQkey;
        c.mtu = 1024;
        c.sq_psn = 0xfffffe;
        return c;
    }
    FakeMemory mem;
    FakeQueues q;
    FakeUdWire wire;
    UdQp qp{config(), mem, q, wire};

    SendWr ud_send(std::uint64_t id, std::uint32_t key, std::uint32_t len, std::uint32_t qkey,
                   WrOp op = WrOp::send) {
        SendWr wr = send_wr(id, op, key, mem.va(key), len);
        wr.ud.dgid = mapped(kPeer);
        wr.ud.remote_qpn = 0x5678;
        wr.ud.remote_qkey = qkey;
        return wr;
    }
    TestPacket datagram(std::span<const std::uint8_t> payload, std::uint32_t qkey,
                        Opcode op = Opcode::ud_send_only) {
        PacketSpec s = spec_for(op, kQpn, 7);
        s.deth.qkey = qkey;
        s.deth.src_qp = 0x5678;
        s.immdt.imm = 0xa1b2c3d4;
        s.payload = payload;
        return make_packet(s);
    }
};

TEST(UdHeaders, deth_is_built_and_parsed_with_the_ud_opcodes) {
    for (Opcode op : {Opcode::ud_send_only, Opcode::ud_send_only_with_immediate}) {
        const std::uint8_t payload[5] = {1, 2, 3, 4, 5};
        PacketSpec s = spec_for(op, 0xabcdef, 42);
        s.deth.qkey = 0x80010000;
        s.deth.src_qp = 1;
        s.payload = payload;
        const TestPacket t = make_packet(s);
        const Packet p = t.parsed();
        ASSERT_TRUE(p.ok());
        ASSERT_NE(p.deth(), nullptr);
        EXPECT_EQ(p.deth()->qkey.host(), 0x80010000u);
        EXPECT_EQ(p.deth()->src_qp.host(), 1u);
        EXPECT_EQ(p.deth()->reserved, 0);
        EXPECT_EQ(p.payload.size(), 5u);
        EXPECT_EQ(p.pad, 3);
        // BTH 12 + DETH 8 (+ ImmDt 4), DETH right after the BTH (IBA 9.2: DETH before ImmDt)
        EXPECT_EQ(opcode_info(op).length, op == Opcode::ud_send_only ? 20u : 24u);
        EXPECT_EQ(t.bytes[12], 0x80);
        EXPECT_EQ(t.bytes[19], 1);
    }
}

TEST(UdHeaders, grh_area_is_twenty_reserved_bytes_then_the_ipv4_header) {
    const auto h = ip_header();
    std::array<std::uint8_t, kGrhLen> grh;
    grh.fill(0x55);
    write_grh_ipv4(grh, h);
    for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(grh[i], 0) << i;
    EXPECT_EQ(std::memcmp(grh.data() + 20, h.data(), 20), 0);
    const auto parsed = parse_grh_ipv4(grh);
    ASSERT_TRUE(parsed);
    EXPECT_EQ(parsed->src, kPeer);
    EXPECT_EQ(parsed->dst, net::Ipv4Addr{0xc6122f01});
    grh[3] = 1;  // a reserved byte set: not an IPv4 GRH area
    EXPECT_FALSE(parse_grh_ipv4(grh));
}

TEST(UdHeaders, controlled_qkey_with_the_high_bit_means_the_qps_own) {
    EXPECT_EQ(effective_qkey(0x80000000, kQkey), kQkey);
    EXPECT_EQ(effective_qkey(0xffffffff, kQkey), kQkey);
    EXPECT_EQ(effective_qkey(0x7fffffff, kQkey), 0x7fffffffu);
    EXPECT_EQ(effective_qkey(0x22222222, kQkey), 0x22222222u);
}

TEST_F(UdFixture, send_is_one_ud_send_only_with_deth_to_the_wrs_address) {
    const std::uint32_t k = mem.add(4096);
    fill_pattern(mem.bytes(k, 0, 300), 1);
    q.sq.push_back(ud_send(1, k, 300, 0x22222222));
    EXPECT_TRUE(qp.poll(0));
    ASSERT_EQ(wire.sent.size(), 1u);
    const Packet p = wire.sent[0].parsed();
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.opcode(), static_cast<std::uint8_t>(Opcode::ud_send_only));
    EXPECT_EQ(p.bth().dest_qp.host(), 0x5678u);
    EXPECT_EQ(p.bth().psn.host(), 0xfffffeu);
    EXPECT_EQ(p.bth().pkey.host(), kDefaultPkey);
    EXPECT_EQ(p.deth()->qkey.host(), 0x22222222u);
    EXPECT_EQ(p.deth()->src_qp.host(), kQpn);
    EXPECT_EQ(wire.sent[0].dst, kPeer);
    ASSERT_EQ(p.payload.size(), 300u);
    EXPECT_EQ(std::memcmp(p.payload.data(), mem.host(k), 300), 0);
    ASSERT_EQ(q.scq.size(), 1u);
    EXPECT_EQ(q.scq[0].status, WcStatus::success);
    EXPECT_EQ(q.scq[0].opcode, verbs::WcOpcode::send);
    EXPECT_EQ(qp.next_psn(), 0xffffffu);
}

TEST_F(UdFixture, send_with_immediate_and_controlled_qkey) {
    const std::uint32_t k = mem.add(64);
    SendWr wr = ud_send(1, k, 8, 0x80000000, WrOp::send_imm);
    wr.imm_or_rkey = 0x01020304;
    q.sq.push_back(wr);
    qp.poll(0);
    ASSERT_EQ(wire.sent.size(), 1u);
    const Packet p = wire.sent[0].parsed();
    EXPECT_EQ(p.opcode(), static_cast<std::uint8_t>(Opcode::ud_send_only_with_immediate));
    EXPECT_EQ(p.deth()->qkey.host(), kQkey);
    std::uint32_t imm;
    std::memcpy(&imm, p.immdt(), 4);
    EXPECT_EQ(imm, 0x01020304u);  // as posted
}

TEST_F(UdFixture, message_over_the_mtu_sends_nothing_and_completes_c10_93_1_1) {
    const std::uint32_t k = mem.add(4096);
    q.sq.push_back(ud_send(1, k, 1025, kQkey));
    q.sq.push_back(ud_send(2, k, 1024, kQkey));
    qp.poll(0);
    ASSERT_EQ(wire.sent.size(), 1u);
    EXPECT_EQ(wire.sent[0].parsed().payload.size(), 1024u);
    ASSERT_EQ(q.scq.size(), 2u);
    EXPECT_EQ(q.scq[0].status, WcStatus::success);
    EXPECT_EQ(qp.counters().tx_too_long.get(), 1u);
}

TEST_F(UdFixture, send_waits_for_the_destinations_mac_then_goes) {
    const std::uint32_t k = mem.add(64);
    wire.unresolved = 2;
    q.sq.push_back(ud_send(1, k, 8, kQkey));
    qp.poll(0);
    EXPECT_TRUE(wire.sent.empty());
    EXPECT_EQ(qp.send_wrs_held(), 1u);
    EXPECT_EQ(qp.next_deadline(), UdQp::kResolveRetryNs);
    qp.poll(UdQp::kResolveRetryNs);
    qp.poll(2 * UdQp::kResolveRetryNs);
    ASSERT_EQ(wire.sent.size(), 1u);
    EXPECT_EQ(q.scq.size(), 1u);
    EXPECT_EQ(qp.send_wrs_held(), 0u);
}

TEST_F(UdFixture, receive_places_grh_area_then_payload_and_completes_with_grh) {
    const std::uint32_t k = mem.add(4096);
    q.rq.push_back(recv_wr(9, k, mem.va(k), 40 + 100));
    std::vector<std::uint8_t> payload(100);
    fill_pattern(payload, 3);
    const TestPacket t = datagram(payload, kQkey, Opcode::ud_send_only_with_immediate);
    const auto h = ip_header();
    qp.on_packet(t.parsed(), h);
    ASSERT_EQ(q.rcq.size(), 1u);
    const Completion& c = q.rcq[0];
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(c.byte_len, 140u);
    EXPECT_TRUE(c.with_grh);
    EXPECT_TRUE(c.with_imm);
    EXPECT_EQ(c.wc_flags() & verbs::kWcGrh, verbs::kWcGrh);
    EXPECT_EQ(c.src_qp, 0x5678u);
    EXPECT_EQ(c.qp_num, kQpn);
    EXPECT_EQ(c.pkey_index, 0);
    EXPECT_EQ(c.sl, 0xa) << "the packet type as mlx5 reports it: RoCEv2 (UDP) over IPv4";
    for (std::size_t i = 0; i < 20; ++i) EXPECT_EQ(mem.host(k)[i], 0) << i;
    EXPECT_EQ(std::memcmp(mem.host(k, 20), h.data(), 20), 0);
    EXPECT_EQ(std::memcmp(mem.host(k, 40), payload.data(), 100), 0);
}

TEST_F(UdFixture, receive_scatters_across_sges_that_split_the_grh_area) {
    const std::uint32_t k = mem.add(4096);
    RecvWr wr = recv_wr(9, k, mem.va(k), 30);
    wr.num_sge = 2;
    wr.sge[1] = {mem.va(k, 1000), 20, k};
    q.rq.push_back(wr);
    std::vector<std::uint8_t> payload(10, 0x7a);
    const auto h = ip_header();
    qp.on_packet(datagram(payload, kQkey).parsed(), h);
    ASSERT_EQ(q.rcq.size(), 1u);
    EXPECT_EQ(q.rcq[0].status, WcStatus::success);
    // The first SGE holds GRH bytes 0..29, the second 30..39 (IPv4 header bytes 10..19) and
    // then the payload.
    EXPECT_EQ(std::memcmp(mem.host(k, 1000), h.data() + 10, 10), 0);
    EXPECT_EQ(mem.host(k, 1000)[10], 0x7a);
    EXPECT_EQ(mem.host(k, 1000)[19], 0x7a);
}

TEST_F(UdFixture, wrong_qkey_is_dropped_and_counted) {
    const std::uint32_t k = mem.add(4096);
    q.rq.push_back(recv_wr(9, k, mem.va(k), 4096));
    const std::uint8_t payload[4] = {};
    qp.on_packet(datagram(payload, kQkey + 1).parsed(), ip_header());
    EXPECT_TRUE(q.rcq.empty());
    EXPECT_EQ(q.rq.size(), 1u);  // the receive WR is not consumed
    EXPECT_EQ(qp.counters().drop_bad_qkey.get(), 1u);
    qp.set_qkey(kQkey + 1);  // Modify QP
    qp.on_packet(datagram(payload, kQkey + 1).parsed(), ip_header());
    EXPECT_EQ(q.rcq.size(), 1u);
}

TEST_F(UdFixture, receive_buffer_without_room_for_grh_and_payload_is_loc_len_err) {
    const std::uint32_t k = mem.add(4096);
    q.rq.push_back(recv_wr(9, k, mem.va(k), 40 + 99));
    std::vector<std::uint8_t> payload(100);
    qp.on_packet(datagram(payload, kQkey).parsed(), ip_header());
    ASSERT_EQ(q.rcq.size(), 1u);
    EXPECT_EQ(q.rcq[0].status, WcStatus::loc_len_err);
    EXPECT_EQ(qp.counters().rx_too_long.get(), 1u);
}

TEST_F(UdFixture, no_receive_wr_drops_the_datagram_no_rnr) {
    const std::uint8_t payload[4] = {};
    qp.on_packet(datagram(payload, kQkey).parsed(), ip_header());
    EXPECT_TRUE(q.rcq.empty());
    EXPECT_TRUE(wire.sent.empty());  // nothing answers a datagram
    EXPECT_EQ(qp.counters().drop_no_recv.get(), 1u);
}

TEST_F(UdFixture, rc_opcode_to_a_ud_qp_is_dropped) {
    const std::uint32_t k = mem.add(4096);
    q.rq.push_back(recv_wr(9, k, mem.va(k), 4096));
    qp.on_packet(make_packet(spec_for(Opcode::rc_send_only, kQpn, 0)).parsed(), ip_header());
    EXPECT_TRUE(q.rcq.empty());
    EXPECT_EQ(qp.counters().drop_bad_opcode.get(), 1u);
}

TEST_F(UdFixture, error_flushes_posted_sends_and_receives_in_order) {
    const std::uint32_t k = mem.add(64);
    q.sq.push_back(ud_send(1, k, 8, kQkey));
    q.sq.push_back(ud_send(2, k, 8, kQkey, WrOp::send));
    q.rq.push_back(recv_wr(3, k, mem.va(k), 64));
    qp.to_error();
    qp.poll(0);
    ASSERT_EQ(q.scq.size(), 2u);
    EXPECT_EQ(q.scq[0].wr_id, 1u);
    EXPECT_EQ(q.scq[1].status, WcStatus::wr_flush_err);
    ASSERT_EQ(q.rcq.size(), 1u);
    EXPECT_EQ(q.rcq[0].status, WcStatus::wr_flush_err);
    EXPECT_TRUE(wire.sent.empty());
}

}  // namespace
}  // namespace snic::roce::test
