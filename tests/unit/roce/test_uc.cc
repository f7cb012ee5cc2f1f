// UC on the RC engines (RcConfig::service = uc), one rule per test: the requester's packets
// (UC opcodes, segmentation, no AckReq) and its completions (once the last packet is on the
// wire, no ACK, no timer); the responder's placement, completions and its silence; what a
// lost, duplicated, old or bad packet does (the message dropped, the receive WR kept for the
// next one, the next FIRST/ONLY taken up); the WR opcode table of UC; and UC end to end over
// a lossy link, every message that arrives arriving whole. The tests play the peer.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

constexpr std::uint32_t kQpn = 0x11;  // the QP under test; its peer is 0x22
constexpr std::uint32_t kEpsn = 5000;
constexpr std::uint32_t kMtu = 256;

RcConfig uc_config() {
    RcConfig c = solo_config(kMtu);
    c.service = Transport::uc;
    c.remote_access = rc_access::remote_write;
    c.max_rd_atomic = 0;
    c.max_dest_rd_atomic = 0;
    return c;
}

std::vector<std::uint8_t> bytes(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> v(n);
    fill_pattern(v, seed);
    return v;
}

// One UC QP: a send buffer, a receive buffer and a WRITE target; the test is its peer.
struct Uc : Solo {
    explicit Uc(const RcConfig& c = uc_config()) : Solo(c) {
        src = mem.add(1 << 16);
        fill_pattern(mem.bytes(src, 0, 1 << 16), 7);
        buf = mem.add(1 << 16);
        target = mem.add(1 << 16);
    }
    void post_send(WrOp op, std::uint64_t wr_id, std::uint64_t off, std::uint32_t len,
                   bool signaled = true) {
        SendWr wr = send_wr(wr_id, op, src, mem.va(src, off), len, signaled);
        wr.remote_addr = 0x5000'0000;
        wr.rkey = 0xabcd;
        const std::uint8_t imm[4] = {0xde, 0xad, 0xbe, 0xef};
        std::memcpy(&wr.imm_or_rkey, imm, 4);
        q.sq.push_back(wr);
    }
    void post_recv(std::uint64_t wr_id, std::uint64_t off, std::uint32_t len) {
        q.rq.push_back(recv_wr(wr_id, buf, mem.va(buf, off), len));
    }
    // A request from the peer (UC opcodes carry no AckReq).
    void request(Opcode op, std::uint32_t psn, std::span<const std::uint8_t> payload = {},
                 PacketSpec* extra = nullptr) {
        PacketSpec s = extra != nullptr ? *extra : PacketSpec{};
        s.opcode = op;
        s.dest_qp = kQpn;
        s.psn = psn & kPsnMask;
        s.payload = payload;
        deliver(make_packet(s));
    }
    // SEND of `data` as UC packets from `psn` on; `skip`: the index of a packet not delivered.
    void send_message(std::uint32_t psn, std::span<const std::uint8_t> data, int skip = -1) {
        const std::size_t n = data.empty() ? 1 : (data.size() + kMtu - 1) / kMtu;
        for (std::size_t k = 0; k < n; ++k) {
            if (static_cast<int>(k) == skip) continue;
            const bool first = k == 0, last = k + 1 == n;
            const Opcode op = first && last ? Opcode::uc_send_only
                              : first       ? Opcode::uc_send_first
                              : last        ? Opcode::uc_send_last
                                            : Opcode::uc_send_middle;
            const std::size_t len = std::min<std::size_t>(kMtu, data.size() - k * kMtu);
            request(op, psn + static_cast<std::uint32_t>(k), data.subspan(k * kMtu, len));
        }
    }
    void write(Opcode op, std::uint32_t psn, std::uint32_t key, std::uint64_t va,
               std::uint32_t dma_len, std::span<const std::uint8_t> payload,
               const std::uint8_t* imm = nullptr) {
        PacketSpec s;
        s.reth.va = va;
        s.reth.rkey = key;
        s.reth.dma_len = dma_len;
        if (imm != nullptr) std::memcpy(&s.immdt, imm, 4);
        request(op, psn, payload, &s);
    }
    std::span<const std::uint8_t> sent_data(std::uint64_t off, std::uint64_t len) {
        return mem.bytes(src, off, len);
    }
    bool buf_holds(std::uint64_t off, std::span<const std::uint8_t> data) {
        return std::memcmp(mem.host(buf, off), data.data(), data.size()) == 0;
    }
    std::uint32_t src = 0, buf = 0, target = 0;
};

// --- the opcode table --------------------------------------------------------------------------

TEST(UcTables, uc_sends_and_writes_use_the_rc_opcodes_moved_to_ucs_range) {
    for (std::size_t i = 0; i < kWrOpCount; ++i) {
        const WrOpInfo& rc = kWrOpTable[i];
        const WrOpInfo& uc = kUcWrOpTable[i];
        EXPECT_EQ(uc.kind, rc.kind);
        EXPECT_EQ(uc.wc, rc.wc);
        if (!uc.has_payload() || !uc.offered) continue;
        for (auto [u, r] : {std::pair{uc.first, rc.first},
                            {uc.middle, rc.middle},
                            {uc.last, rc.last},
                            {uc.only, rc.only}}) {
            EXPECT_EQ(static_cast<int>(u), static_cast<int>(r) + 0x20) << rc.name;
            EXPECT_EQ(transport_of(static_cast<std::uint8_t>(u)), Transport::uc);
            EXPECT_FALSE(opcode_info(u).has(kNeedsAck)) << opcode_info(u).name;
        }
    }
    // IBA's UC opcodes, written out: SEND 0x20-0x25, RDMA WRITE 0x26-0x2B.
    const WrOpInfo& send = kUcWrOpTable[static_cast<std::size_t>(WrOp::send_imm)];
    EXPECT_EQ(static_cast<int>(send.first), 0x20);
    EXPECT_EQ(static_cast<int>(send.middle), 0x21);
    EXPECT_EQ(static_cast<int>(send.last), 0x23);
    EXPECT_EQ(static_cast<int>(send.only), 0x25);
    const WrOpInfo& write = kUcWrOpTable[static_cast<std::size_t>(WrOp::rdma_write)];
    EXPECT_EQ(static_cast<int>(write.first), 0x26);
    EXPECT_EQ(static_cast<int>(write.middle), 0x27);
    EXPECT_EQ(static_cast<int>(write.last), 0x28);
    EXPECT_EQ(static_cast<int>(write.only), 0x2a);
    const WrOpInfo& write_imm = kUcWrOpTable[static_cast<std::size_t>(WrOp::rdma_write_imm)];
    EXPECT_EQ(static_cast<int>(write_imm.last), 0x29);
    EXPECT_EQ(static_cast<int>(write_imm.only), 0x2b);
}

TEST(UcTables, uc_offers_no_read_atomics_or_send_with_invalidate) {
    for (WrOp op : {WrOp::rdma_read, WrOp::atomic_cmp_swp, WrOp::atomic_fetch_add, WrOp::send_inv})
        EXPECT_FALSE(kUcWrOpTable[static_cast<std::size_t>(op)].offered);
    for (WrOp op : {WrOp::send, WrOp::send_imm, WrOp::rdma_write, WrOp::rdma_write_imm,
                    WrOp::local_inv, WrOp::bind_mw})
        EXPECT_TRUE(kUcWrOpTable[static_cast<std::size_t>(op)].offered);
    for (const WrOpInfo& rc : kWrOpTable) EXPECT_TRUE(rc.offered);
    EXPECT_EQ(&wr_op_table(Transport::uc), &kUcWrOpTable);
    EXPECT_EQ(&wr_op_table(Transport::rc), &kWrOpTable);
}

TEST(UcTables, the_service_must_be_rc_or_uc) {
    RcConfig c = uc_config();
    EXPECT_EQ(rc_config_error(c), nullptr);
    c.service = Transport::ud;
    EXPECT_NE(rc_config_error(c), nullptr);
}

// --- the requester ---------------------------------------------------------------------------

TEST(UcRequester, a_send_is_segmented_into_uc_first_middle_last_without_ack_req) {
    Uc u;
    u.post_send(WrOp::send, 1, 0, 3 * kMtu + 10);
    const auto p = u.run();
    ASSERT_EQ(p.size(), 4u);
    const Opcode want[] = {Opcode::uc_send_first, Opcode::uc_send_middle, Opcode::uc_send_middle,
                           Opcode::uc_send_last};
    for (std::size_t i = 0; i < 4; ++i) {
        ASSERT_TRUE(p[i].ok());
        EXPECT_EQ(op_of(p[i]), want[i]);
        EXPECT_EQ(psn_of(p[i]), 100 + i);
        EXPECT_EQ(p[i].bth().dest_qp.host(), 0x22u);
        EXPECT_FALSE(p[i].bth().ack_req());
        const std::size_t len = i < 3 ? kMtu : 10;
        ASSERT_EQ(p[i].payload.size(), len);
        EXPECT_EQ(std::memcmp(p[i].payload.data(), u.sent_data(i * kMtu, len).data(), len), 0);
    }
}

TEST(UcRequester, a_send_completes_once_its_last_packet_is_on_the_wire_without_an_ack) {
    Uc u;
    u.post_send(WrOp::send, 7, 0, 2 * kMtu + 1);
    u.post_send(WrOp::send, 8, 0, 0, /*signaled=*/false);
    u.post_send(WrOp::send, 9, 0, 20);
    u.settle();
    EXPECT_EQ(u.wire.sent_count, 5u);
    ASSERT_EQ(u.q.scq.size(), 2u);  // the unsignaled one completes silently
    EXPECT_EQ(u.q.scq[0].wr_id, 7u);
    EXPECT_EQ(u.q.scq[0].status, WcStatus::success);
    EXPECT_EQ(u.q.scq[0].opcode, WcOpcode::send);
    EXPECT_EQ(u.q.scq[0].byte_len, 2 * kMtu + 1);
    EXPECT_EQ(u.q.scq[1].wr_id, 9u);
    EXPECT_EQ(u.qp.send_wrs_held(), 0u);
    EXPECT_EQ(u.qp.unacked_psn(), 105u);        // nothing waits for an acknowledgement
    EXPECT_EQ(u.qp.next_deadline(), kRcNever);  // no timer: nothing is ever sent again
    u.now += 10'000'000'000;
    EXPECT_FALSE(u.poll());
    EXPECT_EQ(u.wire.sent_count, 5u);
    EXPECT_EQ(u.qp.counters().tx_retransmits.get(), 0u);
}

TEST(UcRequester, a_wr_is_not_complete_while_the_wire_refuses_its_last_packet) {
    Uc u;
    u.post_send(WrOp::send, 1, 0, kMtu + 1);
    u.wire.capacity = 1;  // room for the first packet only
    u.settle();
    EXPECT_EQ(u.wire.sent_count, 1u);
    EXPECT_TRUE(u.q.scq.empty());
    EXPECT_EQ(u.qp.next_deadline(), 0u);  // more to send as soon as the wire takes it
    u.take();
    u.wire.capacity = 16;
    u.settle();
    EXPECT_EQ(u.wire.sent_count, 2u);
    ASSERT_EQ(u.q.scq.size(), 1u);
    EXPECT_EQ(u.q.scq[0].status, WcStatus::success);
}

TEST(UcRequester, write_carries_reth_on_its_first_packet_and_immediate_on_its_last) {
    Uc u;
    u.post_send(WrOp::rdma_write_imm, 1, 0, kMtu + 5);
    u.post_send(WrOp::rdma_write, 2, 0, 8);
    const auto p = u.run();
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(op_of(p[0]), Opcode::uc_rdma_write_first);
    ASSERT_NE(p[0].reth(), nullptr);
    EXPECT_EQ(p[0].reth()->va.host(), 0x5000'0000u);
    EXPECT_EQ(p[0].reth()->rkey.host(), 0xabcdu);
    EXPECT_EQ(p[0].reth()->dma_len.host(), kMtu + 5);
    EXPECT_EQ(op_of(p[1]), Opcode::uc_rdma_write_last_with_immediate);
    ASSERT_NE(p[1].immdt(), nullptr);
    const std::uint8_t imm[4] = {0xde, 0xad, 0xbe, 0xef};
    EXPECT_EQ(std::memcmp(p[1].immdt(), imm, 4), 0);
    EXPECT_EQ(p[1].reth(), nullptr);
    EXPECT_EQ(op_of(p[2]), Opcode::uc_rdma_write_only);
    EXPECT_EQ(p[2].reth()->dma_len.host(), 8u);
    ASSERT_EQ(u.q.scq.size(), 2u);
    EXPECT_EQ(u.q.scq[0].opcode, WcOpcode::rdma_write);
}

TEST(UcRequester, send_with_immediate_of_one_packet_is_uc_send_only_with_immediate) {
    Uc u;
    u.post_send(WrOp::send_imm, 1, 0, 30);
    const auto p = u.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(op_of(p[0]), Opcode::uc_send_only_with_immediate);
    EXPECT_NE(p[0].immdt(), nullptr);
}

TEST(UcRequester, read_atomics_and_send_with_invalidate_fail_locally_and_send_nothing) {
    for (WrOp op : {WrOp::rdma_read, WrOp::atomic_fetch_add, WrOp::send_inv}) {
        Uc u;
        u.post_send(WrOp::send, 1, 0, 10);
        u.post_send(op, 2, 0, 8);
        u.post_send(WrOp::send, 3, 0, 10);
        const auto p = u.run();
        ASSERT_EQ(p.size(), 1u) << static_cast<int>(op);  // the first SEND only
        ASSERT_EQ(u.q.scq.size(), 3u);
        EXPECT_EQ(u.q.scq[0].status, WcStatus::success);
        EXPECT_EQ(u.q.scq[1].status, WcStatus::loc_qp_op_err);
        EXPECT_EQ(u.q.scq[2].status, WcStatus::wr_flush_err);
        EXPECT_EQ(u.qp.state(), RcState::error);
        EXPECT_EQ(u.qp.error(), RcError::local_error);
    }
}

TEST(UcRequester, rc_packets_are_not_uc_and_are_dropped) {
    Uc u;
    u.post_send(WrOp::send, 1, 0, 10);
    u.run();
    u.deliver(ack_packet(kQpn, 100));
    u.post_recv(1, 0, 100);
    u.request(Opcode::rc_send_only, kEpsn, bytes(10, 1));
    EXPECT_EQ(u.qp.counters().drop_bad_opcode.get(), 2u);
    EXPECT_TRUE(u.q.rcq.empty());
    EXPECT_TRUE(u.run().empty());
    EXPECT_EQ(u.qp.state(), RcState::ok);
}

TEST(UcRequester, an_rc_qp_drops_uc_packets) {
    Solo s;
    const std::uint32_t k = s.mem.add(4096);
    s.q.rq.push_back(recv_wr(1, k, s.mem.va(k), 4096));
    PacketSpec spec = spec_for(Opcode::uc_send_only, 0x11, 5000);
    s.deliver(make_packet(spec));
    EXPECT_EQ(s.qp.counters().drop_bad_opcode.get(), 1u);
    EXPECT_TRUE(s.q.rcq.empty());
}

// --- the responder ---------------------------------------------------------------------------

TEST(UcResponder, a_multi_packet_send_in_order_is_placed_and_completed_and_nothing_answered) {
    Uc u;
    u.post_recv(77, 0, 4096);
    const auto data = bytes(3 * kMtu + 17, 1);
    u.send_message(kEpsn, data);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    const Completion& c = u.q.rcq[0];
    EXPECT_EQ(c.wr_id, 77u);
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(c.opcode, WcOpcode::recv);
    EXPECT_EQ(c.byte_len, data.size());
    EXPECT_EQ(c.qp_num, kQpn);
    EXPECT_EQ(c.src_qp, 0x22u);
    EXPECT_FALSE(c.with_imm);
    EXPECT_TRUE(u.buf_holds(0, data));
    EXPECT_TRUE(u.run().empty());  // UC acknowledges nothing
    EXPECT_EQ(u.qp.next_deadline(), kRcNever);
    EXPECT_EQ(u.qp.expected_psn(), kEpsn + 4);
    EXPECT_EQ(u.qp.counters().tx_acks.get(), 0u);
}

TEST(UcResponder, send_with_immediate_delivers_the_immediate_data_and_solicited_bit) {
    Uc u;
    u.post_recv(1, 0, 1000);
    PacketSpec s;
    const std::uint8_t imm[4] = {1, 2, 3, 4};
    std::memcpy(&s.immdt, imm, 4);
    s.solicited = true;
    const auto data = bytes(kMtu + 3, 2);
    const std::span<const std::uint8_t> d(data);
    u.request(Opcode::uc_send_first, kEpsn, d.subspan(0, kMtu));
    u.request(Opcode::uc_send_last_with_immediate, kEpsn + 1, d.subspan(kMtu), &s);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_TRUE(u.q.rcq[0].with_imm);
    EXPECT_TRUE(u.q.rcq[0].solicited);
    EXPECT_EQ(std::memcmp(&u.q.rcq[0].imm_or_rkey, imm, 4), 0);  // as on the wire
    EXPECT_EQ(u.q.rcq[0].byte_len, kMtu + 3);
    EXPECT_TRUE(u.buf_holds(0, data));
}

TEST(UcResponder, write_with_immediate_writes_the_target_and_completes_a_receive_wr) {
    Uc u;
    u.post_recv(5, 0, 0);
    const auto data = bytes(2 * kMtu + 9, 3);
    const std::span<const std::uint8_t> d(data);
    const std::uint8_t imm[4] = {9, 8, 7, 6};
    const std::uint64_t va = u.mem.va(u.target, 100);
    u.write(Opcode::uc_rdma_write_first, kEpsn, u.target, va, 2 * kMtu + 9, d.subspan(0, kMtu));
    u.request(Opcode::uc_rdma_write_middle, kEpsn + 1, d.subspan(kMtu, kMtu));
    EXPECT_TRUE(u.q.rcq.empty());
    EXPECT_EQ(u.q.rq.size(), 1u);  // taken only at the last packet
    PacketSpec s;
    std::memcpy(&s.immdt, imm, 4);
    u.request(Opcode::uc_rdma_write_last_with_immediate, kEpsn + 2, d.subspan(2 * kMtu), &s);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 5u);
    EXPECT_EQ(u.q.rcq[0].opcode, WcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(u.q.rcq[0].byte_len, data.size());
    EXPECT_EQ(std::memcmp(&u.q.rcq[0].imm_or_rkey, imm, 4), 0);
    EXPECT_EQ(std::memcmp(u.mem.host(u.target, 100), data.data(), data.size()), 0);
    // WRITE with immediate of one packet.
    u.post_recv(6, 0, 0);
    u.write(Opcode::uc_rdma_write_only_with_immediate, kEpsn + 3, u.target, va, 4, d.subspan(0, 4),
            imm);
    ASSERT_EQ(u.q.rcq.size(), 2u);
    EXPECT_EQ(u.q.rcq[1].wr_id, 6u);
    EXPECT_EQ(u.q.rcq[1].byte_len, 4u);
    EXPECT_TRUE(u.run().empty());
}

TEST(UcResponder, a_lost_middle_packet_drops_exactly_its_message_and_the_next_lands) {
    Uc u;
    u.post_recv(1, 0, 4096);
    u.post_recv(2, 4096, 4096);
    const auto lost = bytes(4 * kMtu, 4);
    const auto next = bytes(2 * kMtu + 50, 5);
    u.send_message(kEpsn, lost, /*skip=*/1);  // FIRST, (MIDDLE lost), MIDDLE, LAST
    EXPECT_TRUE(u.q.rcq.empty());
    EXPECT_EQ(u.qp.counters().uc_drop_messages.get(), 1u);
    EXPECT_EQ(u.qp.counters().uc_drop_packets.get(), 2u);  // the two after the gap
    EXPECT_EQ(u.qp.counters().out_of_sequence.get(), 2u);
    // The next message: its FIRST takes the message up again, in the receive WR the lost
    // message had taken (not completed, reused), placed from its start.
    u.send_message(kEpsn + 4, next);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 1u);
    EXPECT_EQ(u.q.rcq[0].status, WcStatus::success);
    EXPECT_EQ(u.q.rcq[0].byte_len, next.size());
    EXPECT_TRUE(u.buf_holds(0, next));
    EXPECT_EQ(u.q.rq.size(), 1u);  // WR 2 still posted
    EXPECT_EQ(u.qp.state(), RcState::ok);
    EXPECT_TRUE(u.run().empty());  // and nothing was ever answered
}

TEST(UcResponder, a_lost_last_packet_is_noticed_at_the_next_first_which_starts_over) {
    Uc u;
    u.post_recv(1, 0, 4096);
    const auto lost = bytes(3 * kMtu, 6);
    const auto next = bytes(kMtu + 1, 7);
    u.send_message(kEpsn, lost, /*skip=*/2);  // FIRST, MIDDLE, (LAST lost)
    EXPECT_TRUE(u.q.rcq.empty());
    u.send_message(kEpsn + 3, next);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 1u);
    EXPECT_EQ(u.q.rcq[0].byte_len, next.size());
    EXPECT_TRUE(u.buf_holds(0, next));
    EXPECT_EQ(u.qp.counters().uc_drop_messages.get(), 1u);  // the one cut short
    EXPECT_EQ(u.qp.counters().uc_drop_packets.get(), 0u);
}

TEST(UcResponder, a_lost_first_packet_drops_the_rest_of_its_message) {
    Uc u;
    u.post_recv(1, 0, 4096);
    u.send_message(kEpsn, bytes(3 * kMtu, 8), /*skip=*/0);
    EXPECT_TRUE(u.q.rcq.empty());
    EXPECT_EQ(u.q.rq.size(), 1u);  // nothing took it
    EXPECT_EQ(u.qp.counters().uc_drop_packets.get(), 2u);
    EXPECT_EQ(u.qp.counters().uc_drop_messages.get(), 1u);
    const auto next = bytes(10, 9);
    u.send_message(kEpsn + 3, next);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_TRUE(u.buf_holds(0, next));
}

TEST(UcResponder, a_duplicate_middle_packet_drops_its_message) {
    Uc u;
    u.post_recv(1, 0, 4096);
    const auto data = bytes(3 * kMtu, 10);
    const std::span<const std::uint8_t> d(data);
    u.request(Opcode::uc_send_first, kEpsn, d.subspan(0, kMtu));
    u.request(Opcode::uc_send_middle, kEpsn + 1, d.subspan(kMtu, kMtu));
    u.request(Opcode::uc_send_middle, kEpsn + 1, d.subspan(kMtu, kMtu));  // again: an old PSN
    u.request(Opcode::uc_send_last, kEpsn + 2, d.subspan(2 * kMtu));
    EXPECT_TRUE(u.q.rcq.empty());
    EXPECT_EQ(u.qp.counters().out_of_sequence.get(), 1u);  // the LAST came at ePSN, too late
    EXPECT_EQ(u.qp.counters().uc_drop_messages.get(), 1u);
    EXPECT_EQ(u.qp.counters().uc_drop_packets.get(), 2u);
    // The sender's next message lands whole.
    u.send_message(kEpsn + 3, d.subspan(0, 2 * kMtu));
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].byte_len, 2 * kMtu);
}

TEST(UcResponder, a_first_or_only_packet_is_taken_at_any_psn_and_epsn_follows_it) {
    // The Linux soft-RoCE driver's rule for UC (rxe_resp.c, check_psn): a packet that starts
    // a message resynchronises; UC cannot tell an old one from a new one.
    Uc u;
    u.post_recv(1, 0, 100);
    u.post_recv(2, 100, 100);
    u.post_recv(3, 200, 100);
    u.send_message(kEpsn + 1000, bytes(20, 11));  // ahead
    EXPECT_EQ(u.qp.expected_psn(), kEpsn + 1001);
    u.send_message(kEpsn + 1000, bytes(20, 12));  // the same PSN again: a duplicate ONLY
    u.send_message(kEpsn - 3, bytes(20, 13));     // behind
    ASSERT_EQ(u.q.rcq.size(), 3u);
    EXPECT_EQ(u.qp.expected_psn(), kEpsn - 2);
    EXPECT_EQ(u.qp.counters().out_of_sequence.get(), 3u);
    EXPECT_EQ(u.qp.counters().uc_drop_packets.get(), 0u);
    EXPECT_TRUE(u.buf_holds(200, bytes(20, 13)));
}

TEST(UcResponder, a_first_packet_while_a_message_is_in_progress_drops_that_message_and_starts) {
    Uc u;
    u.post_recv(1, 0, 4096);
    const auto old_msg = bytes(3 * kMtu, 14);
    u.request(Opcode::uc_send_first, kEpsn, std::span(old_msg).subspan(0, kMtu));
    const auto data = bytes(kMtu + 4, 15);
    u.send_message(kEpsn + 1, data);  // the old message's LAST and MIDDLE never come
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 1u);
    EXPECT_EQ(u.q.rcq[0].byte_len, data.size());
    EXPECT_TRUE(u.buf_holds(0, data));
    EXPECT_EQ(u.qp.counters().uc_drop_messages.get(), 1u);
}

TEST(UcResponder, a_send_without_a_receive_wr_is_dropped_without_an_rnr_nak) {
    Uc u;
    const auto data = bytes(2 * kMtu, 16);
    u.send_message(kEpsn, data);
    EXPECT_TRUE(u.q.rcq.empty());
    EXPECT_TRUE(u.run().empty());
    EXPECT_EQ(u.qp.counters().uc_drop_no_recv.get(), 1u);
    EXPECT_EQ(u.qp.counters().uc_drop_packets.get(), 2u);
    EXPECT_EQ(u.qp.counters().rnr_naks_sent.get(), 0u);
    u.post_recv(4, 0, 4096);
    u.send_message(kEpsn + 2, data);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 4u);
    EXPECT_TRUE(u.buf_holds(0, data));
}

TEST(UcResponder, a_write_with_a_bad_rkey_is_dropped_silently_and_writes_nothing) {
    Uc u;
    const std::uint32_t no_write = u.mem.add(4096, rc_access::local_write);
    const auto data = bytes(2 * kMtu, 17);
    const std::span<const std::uint8_t> d(data);
    struct Case {
        std::uint32_t key;
        std::uint64_t va;
    };
    const std::uint64_t va = u.mem.va(u.target);
    for (const Case& c : {Case{0xdead00, va}, Case{u.target, va + (1 << 16) - kMtu},
                          Case{no_write, u.mem.va(no_write)}}) {
        const std::uint64_t drops = u.qp.counters().uc_drop_bad_access.get();
        u.write(Opcode::uc_rdma_write_first, u.qp.expected_psn(), c.key, c.va, 2 * kMtu,
                d.subspan(0, kMtu));
        u.request(Opcode::uc_rdma_write_last, u.qp.expected_psn() + 1, d.subspan(kMtu));
        EXPECT_EQ(u.qp.counters().uc_drop_bad_access.get(), drops + 1);
    }
    for (std::size_t i = 0; i < (1 << 16); ++i) ASSERT_EQ(u.mem.host(u.target)[i], 0) << i;
    EXPECT_TRUE(u.run().empty());  // no NAK: UC has none
    EXPECT_EQ(u.qp.state(), RcState::ok);
    EXPECT_TRUE(u.q.rcq.empty());
    // A good WRITE after them lands.
    u.write(Opcode::uc_rdma_write_only, u.qp.expected_psn(), u.target, va, 64, d.subspan(0, 64));
    EXPECT_EQ(std::memcmp(u.mem.host(u.target), data.data(), 64), 0);
}

TEST(UcResponder, a_write_to_a_qp_without_remote_write_is_dropped) {
    RcConfig c = uc_config();
    c.remote_access = 0;
    Uc u(c);
    const auto data = bytes(64, 18);
    u.write(Opcode::uc_rdma_write_only, kEpsn, u.target, u.mem.va(u.target), 64, data);
    EXPECT_EQ(u.mem.host(u.target)[0], 0);
    EXPECT_EQ(u.qp.counters().uc_drop_bad_access.get(), 1u);
    EXPECT_EQ(u.qp.state(), RcState::ok);
    EXPECT_TRUE(u.run().empty());
}

TEST(UcResponder, a_write_with_immediate_without_a_receive_wr_is_dropped_and_the_next_lands) {
    Uc u;
    const std::uint8_t imm[4] = {1, 1, 1, 1};
    const auto data = bytes(16, 19);
    const std::uint64_t va = u.mem.va(u.target);
    u.write(Opcode::uc_rdma_write_only_with_immediate, kEpsn, u.target, va, 16, data, imm);
    EXPECT_EQ(u.mem.host(u.target)[0], 0);  // not written: nothing of it took effect
    EXPECT_EQ(u.qp.counters().uc_drop_no_recv.get(), 1u);
    u.post_recv(3, 0, 0);
    u.write(Opcode::uc_rdma_write_only_with_immediate, kEpsn + 1, u.target, va, 16, data, imm);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 3u);
    EXPECT_EQ(std::memcmp(u.mem.host(u.target), data.data(), 16), 0);
}

TEST(UcResponder, a_send_too_long_for_its_receive_wr_is_dropped_and_the_wr_kept) {
    Uc u;
    u.post_recv(1, 0, kMtu + 10);
    u.send_message(kEpsn, bytes(2 * kMtu, 20));
    EXPECT_TRUE(u.q.rcq.empty());
    EXPECT_EQ(u.qp.counters().uc_drop_bad_request.get(), 1u);
    EXPECT_EQ(u.qp.state(), RcState::ok);
    const auto fits = bytes(kMtu + 10, 21);
    u.send_message(kEpsn + 2, fits);
    ASSERT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 1u);
    EXPECT_TRUE(u.buf_holds(0, fits));
}

TEST(UcResponder, packets_breaking_length_or_sequence_rules_drop_their_message) {
    Uc u;
    u.post_recv(1, 0, 4096);
    const auto data = bytes(2 * kMtu, 22);
    const std::span<const std::uint8_t> d(data);
    // A FIRST shorter than the MTU.
    u.request(Opcode::uc_send_first, kEpsn, d.subspan(0, 100));
    u.request(Opcode::uc_send_last, kEpsn + 1, d.subspan(0, 100));
    // A WRITE MIDDLE in a SEND.
    u.request(Opcode::uc_send_first, kEpsn + 2, d.subspan(0, kMtu));
    u.request(Opcode::uc_rdma_write_middle, kEpsn + 3, d.subspan(0, kMtu));
    u.request(Opcode::uc_send_last, kEpsn + 4, d.subspan(0, 10));
    // A LAST of no message, at ePSN.
    u.request(Opcode::uc_send_only, kEpsn + 5, d.subspan(0, 0));
    ASSERT_EQ(u.q.rcq.size(), 1u);  // the empty ONLY
    EXPECT_EQ(u.q.rcq[0].byte_len, 0u);
    u.post_recv(2, 0, 4096);
    u.request(Opcode::uc_send_last, kEpsn + 6, d.subspan(0, 10));
    EXPECT_EQ(u.q.rcq.size(), 1u);
    EXPECT_EQ(u.qp.counters().uc_drop_bad_request.get(), 3u);
    EXPECT_EQ(u.qp.counters().uc_drop_messages.get(), 3u);
    EXPECT_EQ(u.qp.state(), RcState::ok);
    EXPECT_TRUE(u.run().empty());
}

TEST(UcResponder, a_receive_wr_whose_own_memory_fails_completes_in_error_and_the_qp_fails) {
    Uc u;
    RecvWr wr = recv_wr(1, 0xbad000, 0x1000, 100);
    u.q.rq.push_back(wr);
    u.post_recv(2, 0, 100);
    u.send_message(kEpsn, bytes(10, 23));
    ASSERT_EQ(u.q.rcq.size(), 2u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 1u);
    EXPECT_EQ(u.q.rcq[0].status, WcStatus::loc_prot_err);
    EXPECT_EQ(u.q.rcq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(u.qp.state(), RcState::error);
    EXPECT_TRUE(u.run().empty());  // still no NAK
}

TEST(UcResponder, to_error_flushes_the_receive_wr_kept_from_a_dropped_message) {
    Uc u;
    u.post_recv(1, 0, 4096);
    u.post_recv(2, 0, 4096);
    u.send_message(kEpsn, bytes(3 * kMtu, 24), /*skip=*/1);
    EXPECT_TRUE(u.q.rcq.empty());
    u.qp.to_error();
    ASSERT_EQ(u.q.rcq.size(), 2u);
    EXPECT_EQ(u.q.rcq[0].wr_id, 1u);
    EXPECT_EQ(u.q.rcq[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(u.q.rcq[1].wr_id, 2u);
}

// --- end to end ----------------------------------------------------------------------------

RcPair uc_pair(std::uint64_t seed, std::uint32_t mtu = 256) {
    RcConfig a = pair_config(0x11, 0x22, 100, 5000, mtu);
    RcConfig b = pair_config(0x22, 0x11, 5000, 100, mtu);
    for (RcConfig* c : {&a, &b}) {
        c->service = Transport::uc;
        c->remote_access = rc_access::remote_write;
    }
    return RcPair(a, b, seed);
}

// Messages of 4..4000 bytes from A to B, each starting with its index; B posts one receive
// WR per message, each with its own buffer.
struct UcTraffic {
    static constexpr std::uint32_t kSlot = 4096;
    explicit UcTraffic(RcPair& p, std::uint32_t count) : pair(p), n(count) {
        src = p.a.mem.add(std::uint64_t{kSlot} * count);
        dst = p.b.mem.add(std::uint64_t{kSlot} * count);
        std::mt19937 rng(7);
        for (std::uint32_t i = 0; i < count; ++i) {
            const std::uint32_t len = 4 + rng() % 3997;
            lens.push_back(len);
            auto b = p.a.mem.bytes(src, std::uint64_t{kSlot} * i, len);
            fill_pattern(b, i);
            std::memcpy(b.data(), &i, 4);
            p.b.q.rq.push_back(recv_wr(i, dst, p.b.mem.va(dst, std::uint64_t{kSlot} * i), kSlot));
            p.a.q.sq.push_back(send_wr(i, i % 3 == 0 ? WrOp::send_imm : WrOp::send, src,
                                       p.a.mem.va(src, std::uint64_t{kSlot} * i), len));
        }
    }
    bool sent() const { return pair.a.q.scq.size() == n; }
    // Every completion at B is a whole message, byte for byte, at most once (and in order:
    // `ordered`); returns the number of messages received.
    std::size_t check_received(bool ordered) {
        std::int64_t last = -1;
        std::vector<bool> seen(n);
        for (const Completion& c : pair.b.q.rcq) {
            EXPECT_EQ(c.status, WcStatus::success);
            std::uint32_t idx = 0;
            std::memcpy(&idx, pair.b.mem.host(dst, std::uint64_t{kSlot} * c.wr_id), 4);
            if (idx >= n) {
                ADD_FAILURE() << "no such message " << idx;
                continue;
            }
            EXPECT_FALSE(seen[idx]) << "message " << idx << " twice";
            seen[idx] = true;
            if (ordered) {
                EXPECT_GT(static_cast<std::int64_t>(idx), last) << "out of order";
            }
            last = idx;
            EXPECT_EQ(c.byte_len, lens.at(idx));
            EXPECT_EQ(c.with_imm, idx % 3 == 0);
            const auto want = pair.a.mem.bytes(src, std::uint64_t{kSlot} * idx, lens[idx]);
            EXPECT_EQ(std::memcmp(pair.b.mem.host(dst, std::uint64_t{kSlot} * c.wr_id), want.data(),
                                  want.size()),
                      0)
                << "message " << idx;
        }
        return pair.b.q.rcq.size();
    }
    RcPair& pair;
    std::uint32_t n;
    std::uint32_t src = 0, dst = 0;
    std::vector<std::uint32_t> lens;
};

TEST(UcLink, every_message_arrives_whole_and_in_order_over_a_clean_link) {
    RcPair p = uc_pair(1);
    UcTraffic t(p, 300);
    ASSERT_TRUE(p.run_until([&] { return t.sent() && p.link.idle(); }));
    for (const Completion& c : p.a.q.scq) EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(t.check_received(true), 300u);
    EXPECT_EQ(p.b.qp->counters().uc_drop_messages.get(), 0u);
    EXPECT_EQ(p.a.qp->counters().rx_acks.get(), 0u);
    EXPECT_EQ(p.b.qp->counters().tx_acks.get(), 0u);
}

TEST(UcLink, over_a_lossy_link_each_message_arrives_whole_or_not_at_all_and_in_order) {
    RcPair p = uc_pair(42);
    p.link.faults.loss = 0.03;
    p.link.faults.corrupt = 0.005;
    UcTraffic t(p, 600);
    ASSERT_TRUE(p.run_until([&] { return t.sent() && p.link.idle(); }));
    for (const Completion& c : p.a.q.scq) EXPECT_EQ(c.status, WcStatus::success);
    const std::size_t received = t.check_received(true);
    EXPECT_LT(received, 600u);  // the link lost some: UC does not send them again
    EXPECT_GT(received, 300u);
    EXPECT_GT(p.b.qp->counters().uc_drop_messages.get(), 0u);
    EXPECT_EQ(p.a.qp->counters().tx_retransmits.get(), 0u);
    EXPECT_EQ(p.a.qp->state(), RcState::ok);
    EXPECT_EQ(p.b.qp->state(), RcState::ok);
    // After the losses, a message over a clean link lands (in a receive WR left over).
    p.link.faults = {};
    const std::size_t before = p.b.q.rcq.size();
    auto b = p.a.mem.bytes(t.src, 0, 1000);
    const std::uint32_t idx = 600;
    std::memcpy(b.data(), &idx, 4);
    p.a.q.sq.push_back(send_wr(600, WrOp::send, t.src, p.a.mem.va(t.src), 1000));
    ASSERT_TRUE(p.run_until([&] { return p.b.q.rcq.size() > before; }));
    const Completion& c = p.b.q.rcq.back();
    EXPECT_EQ(c.byte_len, 1000u);
    EXPECT_EQ(
        std::memcmp(p.b.mem.host(t.dst, std::uint64_t{UcTraffic::kSlot} * c.wr_id), b.data(), 1000),
        0);
}

// A packet overtaken by the next message's is an old PSN when it comes: a MIDDLE or LAST drops
// its message, a FIRST or ONLY starts one (UC cannot tell it is old). Either way what arrives
// arrives whole and once.
TEST(UcLink, over_a_reordering_link_each_message_arrives_whole_or_not_at_all) {
    RcPair p = uc_pair(43);
    p.link.faults.reorder = 0.02;
    UcTraffic t(p, 400);
    ASSERT_TRUE(p.run_until([&] { return t.sent() && p.link.idle(); }));
    const std::size_t received = t.check_received(false);
    EXPECT_LT(received, 400u);
    EXPECT_GT(received, 200u);
}

}  // namespace
}  // namespace snic::roce::test
