// The requester's rules, one test each: segmentation by path MTU, the headers each packet
// carries (RETH, ImmDt, IETH, AtomicETH), PSN use (READ takes one PSN per response), the
// SE and AckReq bits, max_rd_atomic, fence, the window, local checks, the tx path being
// full, local operations in send queue order. The test plays the responder.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

std::vector<std::uint8_t> payload_of(const Packet& p) {
    return {p.payload.begin(), p.payload.end()};
}

struct Requester : Solo {
    explicit Requester(const RcConfig& c = solo_config()) : Solo(c) {
        key = mem.add(1 << 16);
        fill_pattern(mem.bytes(key, 0, 1 << 16), 7);
    }
    std::span<const std::uint8_t> data(std::uint64_t off, std::uint64_t len) {
        return mem.bytes(key, off, len);
    }
    void post(WrOp op, std::uint64_t wr_id, std::uint64_t off, std::uint32_t len) {
        SendWr wr = send_wr(wr_id, op, key, mem.va(key, off), len);
        wr.remote_addr = 0x5000'0000;
        wr.rkey = 0xabcd;
        q.sq.push_back(wr);
    }
    std::uint32_t key = 0;
};

TEST(RcRequester, send_is_segmented_into_first_middle_last_by_path_mtu) {
    Requester r;
    r.post(WrOp::send, 1, 0, 1001);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 4u);
    const Opcode want[] = {Opcode::rc_send_first, Opcode::rc_send_middle, Opcode::rc_send_middle,
                           Opcode::rc_send_last};
    for (std::size_t i = 0; i < 4; ++i) {
        ASSERT_TRUE(p[i].ok());
        EXPECT_EQ(op_of(p[i]), want[i]);
        EXPECT_EQ(psn_of(p[i]), 100 + i);
        EXPECT_EQ(p[i].bth().dest_qp.host(), 0x22u);
        EXPECT_EQ(p[i].bth().pkey.host(), kDefaultPkey);
        const std::size_t len = i < 3 ? 256 : 1001 - 768;
        ASSERT_EQ(p[i].payload.size(), len);
        EXPECT_EQ(payload_of(p[i]), std::vector<std::uint8_t>(r.data(i * 256, len).begin(),
                                                              r.data(i * 256, len).end()));
    }
    EXPECT_EQ(p[3].pad, 3);  // 233 bytes padded to 236
    EXPECT_EQ(r.qp.next_psn(), 104u);
}

TEST(RcRequester, payload_is_gathered_from_every_sge_in_order) {
    Requester r;
    const std::uint32_t other = r.mem.add(4096);
    fill_pattern(r.mem.bytes(other, 0, 4096), 9);
    SendWr wr = send_wr(1, WrOp::send, r.key, r.mem.va(r.key, 1000), 100);
    wr.num_sge = 4;
    wr.sge[1] = {r.mem.va(other, 8), 0, other};  // empty SGEs take no room
    wr.sge[2] = {r.mem.va(other, 16), 300, other};
    wr.sge[3] = {r.mem.va(r.key, 5000), 60, r.key};
    r.q.sq.push_back(wr);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    std::vector<std::uint8_t> got = payload_of(p[0]);
    const auto second = payload_of(p[1]);
    got.insert(got.end(), second.begin(), second.end());
    std::vector<std::uint8_t> want(r.data(1000, 100).begin(), r.data(1000, 100).end());
    const auto mid = r.mem.bytes(other, 16, 300);
    want.insert(want.end(), mid.begin(), mid.end());
    want.insert(want.end(), r.data(5000, 60).begin(), r.data(5000, 60).end());
    EXPECT_EQ(got, want);
}

TEST(RcRequester, message_of_exactly_n_mtus_ends_with_a_full_last_packet) {
    Requester r;
    r.post(WrOp::send, 1, 0, 512);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_send_first);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_send_last);
    EXPECT_EQ(p[1].payload.size(), 256u);
}

TEST(RcRequester, short_and_zero_length_sends_are_one_only_packet) {
    Requester r;
    r.post(WrOp::send, 1, 0, 100);
    r.post(WrOp::send, 2, 0, 0);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_send_only);
    EXPECT_EQ(p[0].payload.size(), 100u);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_send_only);
    EXPECT_EQ(p[1].payload.size(), 0u);
    EXPECT_EQ(psn_of(p[1]), 101u);
}

TEST(RcRequester, immediate_data_rides_on_the_last_or_only_packet_as_posted) {
    Requester r;
    r.post(WrOp::send_imm, 1, 0, 600);
    r.post(WrOp::rdma_write_imm, 2, 0, 600);
    r.post(WrOp::send_imm, 3, 0, 10);
    r.post(WrOp::rdma_write_imm, 4, 0, 10);
    const std::uint8_t imm_bytes[4] = {0xde, 0xad, 0xbe, 0xef};
    for (auto& wr : r.q.sq) std::memcpy(&wr.imm_or_rkey, imm_bytes, 4);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 8u);
    const Opcode want[] = {
        Opcode::rc_send_first,
        Opcode::rc_send_middle,
        Opcode::rc_send_last_with_immediate,
        Opcode::rc_rdma_write_first,
        Opcode::rc_rdma_write_middle,
        Opcode::rc_rdma_write_last_with_immediate,
        Opcode::rc_send_only_with_immediate,
        Opcode::rc_rdma_write_only_with_immediate,
    };
    for (std::size_t i = 0; i < p.size(); ++i) {
        EXPECT_EQ(op_of(p[i]), want[i]) << i;
        if (p[i].immdt() != nullptr) {
            EXPECT_EQ(std::memcmp(p[i].immdt(), imm_bytes, 4), 0) << i;
        }
    }
    EXPECT_EQ(p[0].immdt(), nullptr);
    EXPECT_EQ(p[1].immdt(), nullptr);
}

TEST(RcRequester, send_with_invalidate_carries_the_rkey_in_ieth_on_its_last_packet) {
    Requester r;
    r.post(WrOp::send_inv, 1, 0, 300);
    r.post(WrOp::send_inv, 2, 0, 3);
    for (auto& wr : r.q.sq) wr.imm_or_rkey = 0x12345678;
    const auto p = r.run();
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_send_first);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_send_last_with_invalidate);
    EXPECT_EQ(op_of(p[2]), Opcode::rc_send_only_with_invalidate);
    EXPECT_EQ(p[1].ieth()->rkey.host(), 0x12345678u);
    EXPECT_EQ(p[2].ieth()->rkey.host(), 0x12345678u);
}

TEST(RcRequester, write_carries_reth_with_the_whole_length_on_its_first_packet_only) {
    Requester r;
    r.post(WrOp::rdma_write, 1, 8, 700);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_write_first);
    ASSERT_NE(p[0].reth(), nullptr);
    EXPECT_EQ(p[0].reth()->va.host(), 0x5000'0000u);
    EXPECT_EQ(p[0].reth()->rkey.host(), 0xabcdu);
    EXPECT_EQ(p[0].reth()->dma_len.host(), 700u);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_rdma_write_middle);
    EXPECT_EQ(p[1].reth(), nullptr);
    EXPECT_EQ(op_of(p[2]), Opcode::rc_rdma_write_last);
    EXPECT_EQ(p[2].payload.size(), 700u - 512u);
    EXPECT_EQ(payload_of(p[2]),
              std::vector<std::uint8_t>(r.data(8 + 512, 188).begin(), r.data(8 + 512, 188).end()));
    r.post(WrOp::rdma_write, 2, 0, 40);
    const auto q = r.run();
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(op_of(q[0]), Opcode::rc_rdma_write_only);
    EXPECT_EQ(q[0].reth()->dma_len.host(), 40u);
}

TEST(RcRequester, read_is_one_request_and_takes_one_psn_per_response_packet) {
    Requester r;
    r.post(WrOp::rdma_read, 1, 0, 1000);  // 4 responses of 256
    r.post(WrOp::send, 2, 0, 10);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_request);
    EXPECT_EQ(psn_of(p[0]), 100u);
    EXPECT_EQ(p[0].reth()->dma_len.host(), 1000u);
    EXPECT_EQ(p[0].reth()->va.host(), 0x5000'0000u);
    EXPECT_TRUE(p[0].payload.empty());
    EXPECT_EQ(op_of(p[1]), Opcode::rc_send_only);
    EXPECT_EQ(psn_of(p[1]), 104u);
    EXPECT_EQ(r.qp.next_psn(), 105u);
}

TEST(RcRequester, atomics_carry_atomic_eth_with_swap_add_and_compare) {
    Requester r;
    SendWr cs = send_wr(1, WrOp::atomic_cmp_swp, r.key, r.mem.va(r.key), 8);
    cs.remote_addr = 0x6000'0008;
    cs.rkey = 0x77;
    cs.compare_add = 0x1111;
    cs.swap = 0x2222;
    SendWr fa = send_wr(2, WrOp::atomic_fetch_add, r.key, r.mem.va(r.key, 8), 8);
    fa.remote_addr = 0x6000'0010;
    fa.rkey = 0x78;
    fa.compare_add = 5;
    r.q.sq = {cs, fa};
    const auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_compare_swap);
    EXPECT_EQ(p[0].atomic_eth()->va.host(), 0x6000'0008u);
    EXPECT_EQ(p[0].atomic_eth()->rkey.host(), 0x77u);
    EXPECT_EQ(p[0].atomic_eth()->swap_add.host(), 0x2222u);
    EXPECT_EQ(p[0].atomic_eth()->compare.host(), 0x1111u);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_fetch_add);
    EXPECT_EQ(p[1].atomic_eth()->swap_add.host(), 5u);
    EXPECT_EQ(psn_of(p[1]), 101u);
}

TEST(RcRequester, misaligned_atomic_is_a_local_error_and_nothing_is_sent) {
    Requester r;
    SendWr fa = send_wr(1, WrOp::atomic_fetch_add, r.key, r.mem.va(r.key), 8);
    fa.remote_addr = 0x6000'0004;
    r.q.sq.push_back(fa);
    r.post(WrOp::send, 2, 0, 10);
    const auto p = r.run();
    EXPECT_TRUE(p.empty());
    ASSERT_EQ(r.q.scq.size(), 2u);
    EXPECT_EQ(r.q.scq[0].wr_id, 1u);
    EXPECT_EQ(r.q.scq[0].status, WcStatus::loc_qp_op_err);
    EXPECT_EQ(r.q.scq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(r.qp.state(), RcState::error);
    EXPECT_EQ(r.qp.error(), RcError::local_error);
}

TEST(RcRequester, solicited_event_bit_only_on_the_last_packet_when_asked) {
    Requester r;
    r.post(WrOp::send, 1, 0, 600);
    r.post(WrOp::send, 2, 0, 600);
    r.q.sq[0].solicited = true;
    const auto p = r.run();
    ASSERT_EQ(p.size(), 6u);
    EXPECT_FALSE(p[0].bth().solicited());
    EXPECT_FALSE(p[1].bth().solicited());
    EXPECT_TRUE(p[2].bth().solicited());
    for (std::size_t i = 3; i < 6; ++i) EXPECT_FALSE(p[i].bth().solicited());
}

TEST(RcRequester, ack_req_on_the_last_packet_and_periodically_within_long_messages) {
    RcConfig c = solo_config();
    c.ack_req_every = 4;
    Requester r(c);
    r.post(WrOp::rdma_write, 1, 0, 10 * 256);
    r.post(WrOp::send, 2, 0, 10);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 11u);
    for (std::size_t i = 0; i < 10; ++i)
        EXPECT_EQ(p[i].bth().ack_req(), i == 3 || i == 7 || i == 9) << i;
    EXPECT_TRUE(p[10].bth().ack_req());
}

TEST(RcRequester, at_most_max_rd_atomic_reads_outstanding) {
    RcConfig c = solo_config();
    c.max_rd_atomic = 2;
    Requester r(c);
    r.post(WrOp::rdma_read, 1, 0, 100);
    r.post(WrOp::rdma_read, 2, 100, 100);
    r.post(WrOp::rdma_read, 3, 200, 100);
    r.post(WrOp::send, 4, 0, 10);
    auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(psn_of(p[0]), 100u);
    EXPECT_EQ(psn_of(p[1]), 101u);
    std::vector<std::uint8_t> data(100, 0x5a);
    r.deliver(read_response(0x11, Opcode::rc_rdma_read_response_only, 100, data));
    p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_request);
    EXPECT_EQ(psn_of(p[0]), 102u);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_send_only);
    ASSERT_EQ(r.q.scq.size(), 1u);
    EXPECT_EQ(r.q.scq[0].wr_id, 1u);
}

TEST(RcRequester, fence_waits_for_every_outstanding_read_and_atomic) {
    Requester r;
    r.post(WrOp::rdma_write, 1, 0, 10);
    r.post(WrOp::send, 2, 0, 10);
    r.q.sq[1].fence = true;  // nothing to wait for: a WRITE is no READ
    r.post(WrOp::rdma_read, 3, 0, 10);
    r.post(WrOp::send, 4, 0, 10);
    r.q.sq[3].fence = true;
    r.post(WrOp::send, 5, 0, 10);
    auto p = r.run();
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(op_of(p[2]), Opcode::rc_rdma_read_request);
    std::vector<std::uint8_t> data(10, 1);
    r.deliver(read_response(0x11, Opcode::rc_rdma_read_response_only, 102, data));
    p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(psn_of(p[0]), 103u);
    EXPECT_EQ(psn_of(p[1]), 104u);
}

TEST(RcRequester, psns_wrap_modulo_2_24) {
    RcConfig c = solo_config();
    c.sq_psn = 0xfffffe;
    Requester r(c);
    r.post(WrOp::send, 1, 0, 1000);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 4u);
    EXPECT_EQ(psn_of(p[0]), 0xfffffeu);
    EXPECT_EQ(psn_of(p[1]), 0xffffffu);
    EXPECT_EQ(psn_of(p[2]), 0u);
    EXPECT_EQ(psn_of(p[3]), 1u);
    r.deliver(ack_packet(0x11, 1));
    r.settle();
    ASSERT_EQ(r.q.scq.size(), 1u);
    EXPECT_EQ(r.q.scq[0].status, WcStatus::success);
    EXPECT_EQ(r.qp.unacked_psn(), 2u);
}

TEST(RcRequester, inline_data_is_sent_from_the_wr_itself) {
    Requester r;
    SendWr wr;
    wr.wr_id = 1;
    wr.op = WrOp::send;
    wr.signaled = true;
    wr.inline_data = true;
    wr.inline_len = 200;
    for (std::uint32_t i = 0; i < 200; ++i) wr.inline_bytes[i] = static_cast<std::uint8_t>(i * 3);
    r.q.sq.push_back(wr);
    const auto calls = r.mem.local_calls;
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(payload_of(p[0]),
              std::vector<std::uint8_t>(wr.inline_bytes.begin(), wr.inline_bytes.begin() + 200));
    EXPECT_EQ(r.mem.local_calls, calls);
}

TEST(RcRequester, inline_data_beyond_max_inline_is_a_local_error) {
    RcConfig c = solo_config();
    c.max_inline = 64;
    Requester r(c);
    SendWr wr;
    wr.wr_id = 1;
    wr.inline_data = true;
    wr.inline_len = 65;
    r.q.sq.push_back(wr);
    EXPECT_TRUE(r.run().empty());
    ASSERT_EQ(r.q.scq.size(), 1u);
    EXPECT_EQ(r.q.scq[0].status, WcStatus::loc_qp_op_err);
}

TEST(RcRequester, bad_lkey_is_a_local_protection_error_even_when_unsignaled) {
    Requester r;
    r.post(WrOp::send, 1, 0, 10);
    SendWr bad = send_wr(2, WrOp::send, 0xbad, 0x1000, 10, false);
    r.q.sq.push_back(bad);
    r.post(WrOp::send, 3, 0, 10);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);       // the WR before it went out; nothing after it does
    EXPECT_TRUE(r.q.scq.empty());  // it waits for the one before it
    r.deliver(ack_packet(0x11, 100));
    r.settle();
    ASSERT_EQ(r.q.scq.size(), 3u);
    EXPECT_EQ(r.q.scq[0].status, WcStatus::success);
    EXPECT_EQ(r.q.scq[1].wr_id, 2u);
    EXPECT_EQ(r.q.scq[1].status, WcStatus::loc_prot_err);
    EXPECT_EQ(r.q.scq[2].status, WcStatus::wr_flush_err);
    EXPECT_EQ(r.qp.error(), RcError::local_error);
}

TEST(RcRequester, read_into_memory_without_local_write_is_a_local_protection_error) {
    Requester r;
    const std::uint32_t ro = r.mem.add(4096, rc_access::remote_read);
    r.q.sq.push_back(send_wr(1, WrOp::rdma_read, ro, r.mem.va(ro), 100));
    EXPECT_TRUE(r.run().empty());
    ASSERT_EQ(r.q.scq.size(), 1u);
    EXPECT_EQ(r.q.scq[0].status, WcStatus::loc_prot_err);
}

TEST(RcRequester, full_tx_path_stops_the_requester_and_it_resumes_where_it_stopped) {
    Requester r;
    r.post(WrOp::send, 1, 0, 1000);
    r.post(WrOp::send, 2, 0, 100);
    r.wire.refuse = 1;
    EXPECT_TRUE(r.take().empty());
    r.poll();  // refused at once: nothing sent, nothing lost
    EXPECT_TRUE(r.take().empty());
    EXPECT_EQ(r.qp.counters().tx_full.get(), 1u);
    r.wire.capacity = 2;  // room for two packets only
    r.poll();
    auto p = r.take();
    ASSERT_EQ(p.size(), 2u);
    r.wire.capacity = 1u << 20;
    const auto rest = r.run();
    p.insert(p.end(), rest.begin(), rest.end());
    ASSERT_EQ(p.size(), 5u);
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_EQ(psn_of(p[i]), 100 + i);
    EXPECT_EQ(r.qp.counters().tx_retransmits.get(), 0u);
}

TEST(RcRequester, window_limits_the_psns_sent_beyond_the_oldest_unacknowledged) {
    RcConfig c = solo_config();
    c.window = 8;
    Requester r(c);
    r.post(WrOp::send, 1, 0, 20 * 256);
    auto p = r.run();
    ASSERT_EQ(p.size(), 8u);
    r.deliver(ack_packet(0x11, 103));
    p = r.run();
    ASSERT_EQ(p.size(), 4u);
    EXPECT_EQ(psn_of(p[0]), 108u);
    EXPECT_EQ(psn_of(p[3]), 111u);
}

TEST(RcRequester, takes_no_more_wrs_from_the_queue_than_sq_depth) {
    RcConfig c = solo_config();
    c.sq_depth = 2;
    Requester r(c);
    for (std::uint64_t i = 1; i <= 5; ++i) r.post(WrOp::send, i, 0, 10);
    EXPECT_EQ(r.run().size(), 2u);
    EXPECT_EQ(r.q.sq.size(), 3u);
    EXPECT_EQ(r.qp.send_wrs_held(), 2u);
    r.deliver(ack_packet(0x11, 100));
    EXPECT_EQ(r.run().size(), 1u);
    EXPECT_EQ(r.q.sq.size(), 2u);
}

TEST(RcRequester, start_requester_sets_the_rts_attributes_before_the_first_packet) {
    Requester r;  // built at RTR with whatever send attributes
    EXPECT_TRUE(r.qp.start_requester(0x123456, 12, 5, 3, 2));
    EXPECT_EQ(r.qp.config().timeout, 12);
    EXPECT_EQ(r.qp.config().retry_cnt, 5);
    EXPECT_EQ(r.qp.config().rnr_retry, 3);
    EXPECT_EQ(r.qp.config().max_rd_atomic, 2);
    r.post(WrOp::send, 1, 0, 10);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(psn_of(p[0]), 0x123456u);
    EXPECT_EQ(r.qp.next_deadline(), r.now + ack_timeout_ns(12));
    EXPECT_FALSE(r.qp.start_requester(7, 12, 5, 3, 2));  // too late: it has sent
    EXPECT_EQ(r.qp.next_psn(), 0x123457u);
}

TEST(RcRequester, poll_sends_at_most_max_burst_packets) {
    RcConfig c = solo_config();
    c.max_burst = 4;
    Requester r(c);
    r.post(WrOp::send, 1, 0, 10 * 256);
    r.poll();
    EXPECT_EQ(r.take().size(), 4u);
    r.poll();
    EXPECT_EQ(r.take().size(), 4u);
}

TEST(RcRequester, local_operations_wait_for_earlier_wrs_and_complete_in_sq_order) {
    Requester r;
    const std::uint32_t victim = r.mem.add(4096);
    r.post(WrOp::send, 1, 0, 10);
    SendWr inv;
    inv.wr_id = 2;
    inv.op = WrOp::local_inv;
    inv.signaled = true;
    inv.imm_or_rkey = victim;
    r.q.sq.push_back(inv);
    r.post(WrOp::send, 3, 0, 10);
    auto p = r.run();
    ASSERT_EQ(p.size(), 1u);  // the SEND after the invalidate waits for it
    EXPECT_TRUE(r.mem.region(victim).valid);
    r.deliver(ack_packet(0x11, 100));
    p = r.run();
    EXPECT_FALSE(r.mem.region(victim).valid);
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(psn_of(p[0]), 101u);
    r.deliver(ack_packet(0x11, 101));
    r.settle();
    ASSERT_EQ(r.q.scq.size(), 3u);
    EXPECT_EQ(r.q.scq[0].wr_id, 1u);
    EXPECT_EQ(r.q.scq[1].wr_id, 2u);
    EXPECT_EQ(r.q.scq[1].opcode, WcOpcode::local_inv);
    EXPECT_EQ(r.q.scq[2].wr_id, 3u);
}

TEST(RcRequester, failed_bind_mw_completes_with_its_status_and_errors_the_qp) {
    Requester r;
    SendWr bind;
    bind.wr_id = 1;
    bind.op = WrOp::bind_mw;
    bind.bind.mr_lkey = 0xdead;  // no such region
    bind.bind.new_rkey = 0x4242;
    r.q.sq.push_back(bind);
    r.post(WrOp::send, 2, 0, 10);
    EXPECT_TRUE(r.run().empty());
    ASSERT_EQ(r.q.scq.size(), 2u);
    EXPECT_EQ(r.q.scq[0].status, WcStatus::mw_bind_err);
    EXPECT_EQ(r.q.scq[0].opcode, WcOpcode::bind_mw);
    EXPECT_EQ(r.q.scq[1].status, WcStatus::wr_flush_err);
}

}  // namespace
}  // namespace snic::roce::test
