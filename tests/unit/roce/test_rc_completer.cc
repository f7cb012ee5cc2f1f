// The completer's rules, one test each: coalesced ACKs retire several WRs, READ responses
// are placed into the local SGEs and acknowledge earlier WRs, the ATOMIC ACK's value lands
// in the local buffer, go-back-N on a sequence NAK (payload read again), RNR waits and
// rnr_retry, the local ACK timeout and retry_cnt, the fatal NAKs, duplicate and ghost
// ACKs, lost READ responses, flushing. The test plays the responder.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "proto/roce/rnr.h"
#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

struct Completer : Solo {
    explicit Completer(const RcConfig& c = solo_config()) : Solo(c) {
        key = mem.add(1 << 16);
        fill_pattern(mem.bytes(key, 0, 1 << 16), 3);
    }
    void post(WrOp op, std::uint64_t wr_id, std::uint64_t off, std::uint32_t len,
              bool signaled = true) {
        SendWr wr = send_wr(wr_id, op, key, mem.va(key, off), len, signaled);
        wr.remote_addr = 0x5000'0000;
        wr.rkey = 0xabcd;
        q.sq.push_back(wr);
    }
    std::vector<std::uint64_t> completed() const {
        std::vector<std::uint64_t> ids;
        for (const auto& c : q.scq) ids.push_back(c.wr_id);
        return ids;
    }
    std::uint32_t key = 0;
};

using Ids = std::vector<std::uint64_t>;

TEST(RcCompleter, one_coalesced_ack_retires_every_wr_it_covers_in_order) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::rdma_write, 2, 0, 600);  // 101..103
    c.post(WrOp::send, 3, 0, 10);         // 104
    ASSERT_EQ(c.run().size(), 5u);
    c.deliver(ack_packet(0x11, 104));
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1, 2, 3}));
    for (const auto& wc : c.q.scq) {
        EXPECT_EQ(wc.status, WcStatus::success);
        EXPECT_EQ(wc.qp_num, 0x11u);
        EXPECT_EQ(wc.src_qp, 0x22u);
    }
    EXPECT_EQ(c.q.scq[1].opcode, WcOpcode::rdma_write);
    EXPECT_EQ(c.q.scq[1].byte_len, 600u);
    EXPECT_EQ(c.qp.unacked_psn(), 105u);
}

TEST(RcCompleter, an_ack_in_the_middle_of_a_message_retires_only_what_ends_before_it) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::send, 2, 0, 600);  // 101..103
    c.run();
    c.deliver(ack_packet(0x11, 102));
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1}));
    EXPECT_EQ(c.qp.unacked_psn(), 103u);
}

TEST(RcCompleter, unsignaled_wrs_retire_silently) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::send, 2, 0, 10, false);
    c.post(WrOp::send, 3, 0, 10);
    c.run();
    c.deliver(ack_packet(0x11, 102));
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1, 3}));
    EXPECT_EQ(c.qp.send_wrs_held(), 0u);
}

TEST(RcCompleter, read_responses_are_placed_into_the_local_sges) {
    Completer c;
    SendWr rd;
    rd.wr_id = 9;
    rd.op = WrOp::rdma_read;
    rd.signaled = true;
    rd.remote_addr = 0x5000'0000;
    rd.rkey = 1;
    rd.num_sge = 3;
    rd.sge[0] = {c.mem.va(c.key, 1000), 200, c.key};
    rd.sge[1] = {c.mem.va(c.key, 5000), 300, c.key};
    rd.sge[2] = {c.mem.va(c.key, 9000), 100, c.key};
    c.q.sq.push_back(rd);
    ASSERT_EQ(c.run().size(), 1u);
    std::vector<std::uint8_t> src(600);
    fill_pattern(src, 99);
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_first, 100,
                            std::span(src).subspan(0, 256)));
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_middle, 101,
                            std::span(src).subspan(256, 256)));
    EXPECT_TRUE(c.q.scq.empty());
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_last, 102,
                            std::span(src).subspan(512, 88)));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 1u);
    EXPECT_EQ(c.q.scq[0].opcode, WcOpcode::rdma_read);
    EXPECT_EQ(c.q.scq[0].byte_len, 600u);
    EXPECT_EQ(std::memcmp(c.mem.host(c.key, 1000), src.data(), 200), 0);
    EXPECT_EQ(std::memcmp(c.mem.host(c.key, 5000), src.data() + 200, 300), 0);
    EXPECT_EQ(std::memcmp(c.mem.host(c.key, 9000), src.data() + 500, 100), 0);
}

TEST(RcCompleter, a_read_response_acknowledges_the_wrs_before_the_read) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::rdma_write, 2, 0, 10);
    c.post(WrOp::rdma_read, 3, 100, 10);  // 102
    c.run();
    std::vector<std::uint8_t> data(10, 7);
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_only, 102, data));
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1, 2, 3}));
}

TEST(RcCompleter, atomic_ack_returns_the_original_value_into_the_local_sge) {
    Completer c;
    SendWr fa = send_wr(1, WrOp::atomic_fetch_add, c.key, c.mem.va(c.key, 64), 8);
    fa.remote_addr = 0x6000'0000;
    c.q.sq.push_back(fa);
    c.run();
    c.deliver(atomic_ack_packet(0x11, 100, 0x1122334455667788ull));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 1u);
    EXPECT_EQ(c.q.scq[0].opcode, WcOpcode::fetch_add);
    EXPECT_EQ(c.q.scq[0].byte_len, 8u);
    std::uint64_t got = 0;
    std::memcpy(&got, c.mem.host(c.key, 64), 8);
    EXPECT_EQ(got, 0x1122334455667788ull);
}

TEST(RcCompleter, sequence_nak_goes_back_n_and_reads_the_payload_again) {
    Completer c;
    c.post(WrOp::send, 1, 0, 512);    // 100, 101
    c.post(WrOp::send, 2, 512, 512);  // 102, 103
    ASSERT_EQ(c.run().size(), 4u);
    // The client's buffer changes under the in-flight WR: what goes out again is read again.
    std::memset(c.mem.host(c.key, 512), 0xee, 512);
    c.deliver(nak_packet(0x11, 102, NakCode::psn_sequence_error));
    const auto p = c.run();
    EXPECT_EQ(c.completed(), (Ids{1}));  // the NAK acknowledged what came before 102
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(psn_of(p[0]), 102u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_send_first);
    EXPECT_EQ(psn_of(p[1]), 103u);
    EXPECT_EQ(p[0].payload[0], 0xee);
    EXPECT_EQ(c.qp.counters().seq_naks_received.get(), 1u);
    EXPECT_EQ(c.qp.counters().tx_retransmits.get(), 2u);
    EXPECT_EQ(c.qp.counters().go_back.get(), 1u);
}

TEST(RcCompleter, a_repeated_sequence_nak_does_not_send_the_same_packets_again) {
    Completer c;
    c.post(WrOp::send, 1, 0, 1024);  // 100..103
    c.run();
    c.deliver(nak_packet(0x11, 101, NakCode::psn_sequence_error));
    EXPECT_EQ(c.run().size(), 3u);
    c.deliver(nak_packet(0x11, 101, NakCode::psn_sequence_error));  // a copy, or a late echo
    EXPECT_TRUE(c.run().empty());
    EXPECT_EQ(c.qp.counters().seq_naks_received.get(), 2u);
    EXPECT_EQ(c.qp.counters().go_back.get(), 1u);
}

TEST(RcCompleter, rnr_nak_waits_the_time_its_aeth_encodes_then_sends_again) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);  // 100
    c.post(WrOp::send, 2, 0, 10);  // 101
    c.run();
    c.deliver(ack_packet(0x11, 100));
    c.deliver(rnr_nak_packet(0x11, 101, 14));  // 1.28 ms
    const RcTime t0 = c.now;
    c.now = t0 + rnr_timer_ns(14) - 1;
    EXPECT_TRUE(c.run().empty());
    EXPECT_EQ(c.qp.next_deadline(), t0 + rnr_timer_ns(14));
    c.now = t0 + rnr_timer_ns(14);
    const auto p = c.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(psn_of(p[0]), 101u);
    EXPECT_EQ(c.qp.counters().rnr_naks_received.get(), 1u);
    c.deliver(ack_packet(0x11, 101));
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1, 2}));
}

TEST(RcCompleter, rnr_retry_exhausted_completes_with_rnr_retry_exc_err) {
    RcConfig cfg = solo_config();
    cfg.rnr_retry = 2;
    Completer c(cfg);
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::send, 2, 0, 10);
    c.run();
    for (int i = 0; i < 2; ++i) {
        c.deliver(rnr_nak_packet(0x11, 100, 1));
        c.now += rnr_timer_ns(1);
        ASSERT_EQ(c.run().size(), 2u) << i;  // both go again, after the wait
        EXPECT_EQ(c.qp.state(), RcState::ok);
    }
    c.deliver(rnr_nak_packet(0x11, 100, 1));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 2u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::rnr_retry_exc_err);
    EXPECT_EQ(c.q.scq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(c.qp.error(), RcError::rnr_retry_exceeded);
}

TEST(RcCompleter, rnr_retry_7_retries_forever) {
    RcConfig cfg = solo_config();
    cfg.rnr_retry = 7;
    Completer c(cfg);
    c.post(WrOp::send, 1, 0, 10);
    c.run();
    for (int i = 0; i < 50; ++i) {
        c.deliver(rnr_nak_packet(0x11, 100, 1));
        c.now += rnr_timer_ns(1);
        ASSERT_EQ(c.run().size(), 1u) << i;
    }
    EXPECT_EQ(c.qp.state(), RcState::ok);
    c.deliver(ack_packet(0x11, 100));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 1u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::success);
}

TEST(RcCompleter, local_ack_timeout_sends_again_from_the_oldest_unacknowledged_psn) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);   // 100
    c.post(WrOp::send, 2, 0, 600);  // 101..103
    c.run();
    c.deliver(ack_packet(0x11, 101));  // WR 2 is partly acknowledged
    c.settle();
    const RcTime timeout = ack_timeout_ns(solo_config().timeout);
    EXPECT_EQ(c.qp.next_deadline(), c.now + timeout);
    c.now += timeout - 1;
    EXPECT_TRUE(c.run().empty());
    c.now += 1;
    const auto p = c.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(psn_of(p[0]), 102u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_send_middle);
    EXPECT_EQ(psn_of(p[1]), 103u);
    EXPECT_EQ(c.qp.counters().timeouts.get(), 1u);
}

TEST(RcCompleter, retry_cnt_exhausted_completes_the_oldest_with_retry_exc_err_then_flushes) {
    RcConfig cfg = solo_config();
    cfg.retry_cnt = 3;
    Completer c(cfg);
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::rdma_write, 2, 0, 10);
    c.post(WrOp::send, 3, 0, 10);
    ASSERT_EQ(c.run().size(), 3u);
    const RcTime timeout = ack_timeout_ns(cfg.timeout);
    for (int i = 0; i < 3; ++i) {
        c.now += timeout;
        EXPECT_EQ(c.run().size(), 3u) << i;
    }
    EXPECT_TRUE(c.q.scq.empty());
    c.now += timeout;
    c.settle();
    EXPECT_EQ(c.qp.counters().timeouts.get(), 4u);
    ASSERT_EQ(c.q.scq.size(), 3u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::retry_exc_err);
    EXPECT_EQ(c.q.scq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(c.q.scq[2].status, WcStatus::wr_flush_err);
    EXPECT_EQ(c.completed(), (Ids{1, 2, 3}));
    EXPECT_EQ(c.qp.error(), RcError::retry_exceeded);
}

TEST(RcCompleter, nak_invalid_request_completes_rem_inv_req_err_and_flushes_the_rest) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::send, 2, 0, 10);
    c.post(WrOp::send, 3, 0, 10);
    c.run();
    c.q.rq.push_back(recv_wr(50, c.key, c.mem.va(c.key), 100));
    c.deliver(nak_packet(0x11, 101, NakCode::invalid_request));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 3u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::success);
    EXPECT_EQ(c.q.scq[1].status, WcStatus::rem_inv_req_err);
    EXPECT_EQ(c.q.scq[2].status, WcStatus::wr_flush_err);
    ASSERT_EQ(c.q.rcq.size(), 1u);
    EXPECT_EQ(c.q.rcq[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(c.qp.state(), RcState::error);
    EXPECT_EQ(c.qp.error(), RcError::remote_nak);
    EXPECT_EQ(c.qp.counters().fatal_naks_received.get(), 1u);
}

TEST(RcCompleter, nak_remote_access_completes_rem_access_err) {
    Completer c;
    c.post(WrOp::rdma_write, 1, 0, 600);
    c.post(WrOp::send, 2, 0, 10);
    c.run();
    c.deliver(nak_packet(0x11, 100, NakCode::remote_access_error));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 2u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::rem_access_err);
    EXPECT_EQ(c.q.scq[0].opcode, WcOpcode::rdma_write);
    EXPECT_EQ(c.q.scq[1].status, WcStatus::wr_flush_err);
}

TEST(RcCompleter, nak_remote_operational_completes_rem_op_err) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);
    c.run();
    c.deliver(nak_packet(0x11, 100, NakCode::remote_operational_error));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 1u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::rem_op_err);
}

TEST(RcCompleter, duplicate_and_ghost_acks_are_ignored) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);  // 100
    c.post(WrOp::send, 2, 0, 10);  // 101
    c.run();
    c.deliver(ack_packet(0x11, 99));   // before anything outstanding
    c.deliver(ack_packet(0x11, 102));  // never sent
    c.deliver(ack_packet(0x11, 5000));
    c.settle();
    EXPECT_TRUE(c.q.scq.empty());
    c.deliver(ack_packet(0x11, 100));
    c.deliver(ack_packet(0x11, 100));  // a duplicate
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1}));
    EXPECT_EQ(c.qp.counters().duplicate_responses.get(), 4u);
    EXPECT_EQ(c.qp.state(), RcState::ok);
    c.deliver(atomic_ack_packet(0x11, 101, 1));  // no atomic there: ignored
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_only, 101, {}));
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1}));
    EXPECT_EQ(c.qp.state(), RcState::ok);
}

TEST(RcCompleter, a_lost_read_response_is_asked_for_again_from_the_missing_psn) {
    Completer c;
    c.post(WrOp::rdma_read, 1, 0, 1000);  // responses 100..103
    c.run();
    std::vector<std::uint8_t> src(1000);
    fill_pattern(src, 5);
    const auto part = [&](std::size_t i) {
        return std::span<const std::uint8_t>(src).subspan(
            i * 256, std::min<std::size_t>(256, 1000 - i * 256));
    };
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_first, 100, part(0)));
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_middle, 101, part(1)));
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_last, 103, part(3)));  // 102 lost
    const auto p = c.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_request);
    EXPECT_EQ(psn_of(p[0]), 102u);
    EXPECT_EQ(p[0].reth()->va.host(), 0x5000'0000u + 512);
    EXPECT_EQ(p[0].reth()->dma_len.host(), 1000u - 512);
    // The responder answers the rest as a READ of its own: FIRST then LAST.
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_first, 102, part(2)));
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_last, 103, part(3)));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 1u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::success);
    EXPECT_EQ(std::memcmp(c.mem.host(c.key), src.data(), 1000), 0);
}

TEST(RcCompleter, an_ack_past_a_read_without_its_data_asks_for_the_read_again) {
    Completer c;
    c.post(WrOp::rdma_read, 1, 0, 10);  // 100
    c.post(WrOp::send, 2, 0, 10);       // 101
    c.run();
    c.deliver(ack_packet(0x11, 101));
    const auto p = c.run();
    ASSERT_GE(p.size(), 1u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_request);
    EXPECT_EQ(psn_of(p[0]), 100u);
    EXPECT_TRUE(c.q.scq.empty());
}

TEST(RcCompleter, a_read_response_of_the_wrong_length_is_a_bad_response) {
    Completer c;
    c.post(WrOp::rdma_read, 1, 0, 100);
    c.run();
    std::vector<std::uint8_t> data(99, 1);
    c.deliver(read_response(0x11, Opcode::rc_rdma_read_response_only, 100, data));
    c.settle();
    ASSERT_EQ(c.q.scq.size(), 1u);
    EXPECT_EQ(c.q.scq[0].status, WcStatus::bad_resp_err);
    EXPECT_EQ(c.qp.error(), RcError::bad_response);
}

TEST(RcCompleter, to_error_flushes_every_outstanding_wr_in_order_and_later_posts_too) {
    Completer c;
    c.post(WrOp::send, 1, 0, 10);
    c.post(WrOp::rdma_read, 2, 0, 10, false);
    c.post(WrOp::send, 3, 0, 10);
    c.q.rq.push_back(recv_wr(10, c.key, c.mem.va(c.key), 10));
    c.q.rq.push_back(recv_wr(11, c.key, c.mem.va(c.key), 10));
    c.run();
    c.post(WrOp::send, 4, 0, 10);
    c.qp.to_error();
    EXPECT_EQ(c.completed(), (Ids{1, 2, 3, 4}));
    for (const auto& wc : c.q.scq) EXPECT_EQ(wc.status, WcStatus::wr_flush_err);
    ASSERT_EQ(c.q.rcq.size(), 2u);
    EXPECT_EQ(c.q.rcq[0].wr_id, 10u);
    EXPECT_EQ(c.q.rcq[1].wr_id, 11u);
    c.post(WrOp::send, 5, 0, 10);
    c.q.rq.push_back(recv_wr(12, c.key, c.mem.va(c.key), 10));
    c.settle();
    EXPECT_EQ(c.completed(), (Ids{1, 2, 3, 4, 5}));
    EXPECT_EQ(c.q.rcq.size(), 3u);
    EXPECT_TRUE(c.take().empty());
    EXPECT_EQ(c.qp.error(), RcError::requested);
}

TEST(RcCompleter, with_an_srq_flushing_leaves_the_srq_alone) {
    RcConfig cfg = solo_config();
    cfg.srq = true;
    Completer c(cfg);
    c.q.rq.push_back(recv_wr(10, c.key, c.mem.va(c.key), 10));
    c.qp.to_error();
    c.settle();
    EXPECT_TRUE(c.q.rcq.empty());
    EXPECT_EQ(c.q.rq.size(), 1u);
}

}  // namespace
}  // namespace snic::roce::test
