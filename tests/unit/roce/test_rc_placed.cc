// A payload sent from where it lies (RcWire::tx_send_placed) keeps its WR from completing until
// the wire lets it go (tx_settled): on success, in a flush, after a failure, in order; a QP
// destroyed with such WRs gives their holds up (tx_forget). The wire here is FakeWire with
// `placed`: it sends each packet as a copy would and holds the payload until the test lets
// it go.
#include <gtest/gtest.h>

#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

// One WRITE of `len` bytes from a to b (one SGE of registered memory: placed), wr_id `id`.
void post_write(RcPair& pair, std::uint64_t id, std::uint32_t len) {
    const std::uint32_t src = pair.a.mem.add(len);
    const std::uint32_t dst = pair.b.mem.add(len);
    fill_pattern(pair.a.mem.bytes(src, 0, len), static_cast<std::uint32_t>(id));
    SendWr wr = send_wr(id, WrOp::rdma_write, src, pair.a.mem.va(src), len);
    wr.remote_addr = pair.b.mem.va(dst);
    wr.rkey = dst;
    pair.a.q.sq.push_back(wr);
}

// An inline SEND (nothing placed) with a receive WR for it at b.
void post_inline_send(RcPair& pair, std::uint64_t id) {
    SendWr wr = send_wr(id, WrOp::send, 0, 0, 0);
    wr.inline_data = true;
    wr.inline_len = 16;
    pair.a.q.sq.push_back(wr);
    const std::uint32_t buf = pair.b.mem.add(64);
    pair.b.q.rq.push_back(recv_wr(1000 + id, buf, pair.b.mem.va(buf), 64));
}

void steps(RcPair& pair, int n) {
    for (int i = 0; i < n; ++i) pair.step();
}

TEST(RcPlaced, a_write_completes_only_once_the_wire_lets_its_payload_go) {
    RcPair pair = RcPair::standard(1024, 51);
    pair.a.wire.place();
    post_write(pair, 1, 3000);  // three packets, each placed
    // Acknowledged at b, but the wire still holds the payload: no completion.
    ASSERT_TRUE(
        pair.run_until([&] { return pair.a.qp->unacked_psn() == pair.a.qp->next_psn(); }, 10'000));
    steps(pair, 50);
    EXPECT_TRUE(pair.a.q.scq.empty());
    EXPECT_EQ(pair.a.wire.placed_count, 3u);
    EXPECT_EQ(pair.a.wire.placed_held(), 3u);
    EXPECT_GT(pair.a.qp->counters().tx_held_waits.get(), 0u);
    EXPECT_EQ(pair.a.qp->next_deadline(), 0u);  // polled again until it may complete
    // Two of three let go: still none.
    pair.a.wire.release_placed(2);
    steps(pair, 5);
    EXPECT_TRUE(pair.a.q.scq.empty());
    pair.a.wire.release_placed();
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 1; }, 100));
    EXPECT_EQ(pair.a.q.scq[0].wr_id, 1u);
    EXPECT_EQ(pair.a.q.scq[0].status, WcStatus::success);
    EXPECT_EQ(pair.a.wire.settled_count, 1u);
    EXPECT_EQ(pair.a.qp->send_wrs_held(), 0u);
    EXPECT_EQ(pair.a.qp->state(), RcState::ok);
}

TEST(RcPlaced, a_later_wr_with_nothing_placed_still_completes_after_the_held_one) {
    RcPair pair = RcPair::standard(1024, 52);
    pair.a.wire.place();
    post_write(pair, 1, 2048);
    post_inline_send(pair, 2);
    ASSERT_TRUE(pair.run_until([&] { return pair.b.q.rcq.size() == 1; }, 10'000));
    steps(pair, 50);
    EXPECT_TRUE(pair.a.q.scq.empty()) << "the SEND completed before the WRITE held ahead of it";
    pair.a.wire.release_placed();
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 2; }, 100));
    EXPECT_EQ(pair.a.q.scq[0].wr_id, 1u);
    EXPECT_EQ(pair.a.q.scq[1].wr_id, 2u);
}

TEST(RcPlaced, a_flush_waits_for_held_payloads_and_keeps_the_order) {
    RcPair pair = RcPair::standard(1024, 53);
    pair.a.wire.place();
    pair.link.faults.loss = 1.0;  // nothing arrives: every WR stays outstanding
    post_write(pair, 1, 2048);
    post_inline_send(pair, 2);
    post_write(pair, 3, 2048);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.wire.placed_held() >= 4; }, 100));
    ASSERT_EQ(pair.a.wire.placed_held(), 4u);  // sent once each, no timeout yet
    pair.a.qp->to_error();
    steps(pair, 20);
    EXPECT_TRUE(pair.a.q.scq.empty());
    // The first WRITE's payload goes: it and the SEND behind it are flushed, not the last.
    pair.a.wire.release_placed(2);
    steps(pair, 5);
    ASSERT_EQ(pair.a.q.scq.size(), 2u);
    pair.a.wire.release_placed();
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 3; }, 100));
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(pair.a.q.scq[i].wr_id, i + 1);
        EXPECT_EQ(pair.a.q.scq[i].status, WcStatus::wr_flush_err);
    }
    // WRs posted after it are flushed behind them.
    post_inline_send(pair, 4);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 4; }, 100));
    EXPECT_EQ(pair.a.q.scq[3].status, WcStatus::wr_flush_err);
}

TEST(RcPlaced, a_retry_exceeded_error_completes_once_the_retransmissions_are_let_go) {
    RcPair pair = RcPair::standard(1024, 54);
    pair.a.wire.place();
    pair.link.faults.loss = 1.0;
    post_write(pair, 1, 2048);
    post_write(pair, 2, 1024);
    const RcConfig& cfg = pair.a.qp->config();
    ASSERT_TRUE(pair.run_until([&] { return pair.a.qp->state() == RcState::error; }));
    EXPECT_EQ(pair.a.qp->counters().timeouts.get(), cfg.retry_cnt + 1u);
    // Every transmission of both WRs is still held: no completion yet.
    EXPECT_EQ(pair.a.wire.placed_held(), 3u * (cfg.retry_cnt + 1u));
    steps(pair, 20);
    EXPECT_TRUE(pair.a.q.scq.empty());
    pair.a.wire.release_placed();
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 2; }, 100));
    EXPECT_EQ(pair.a.q.scq[0].status, WcStatus::retry_exc_err);
    EXPECT_EQ(pair.a.q.scq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(pair.a.qp->error(), RcError::retry_exceeded);
}

TEST(RcPlaced, a_qp_destroyed_with_held_payloads_gives_their_holds_up) {
    RcPair pair = RcPair::standard(1024, 55);
    pair.a.wire.place();
    pair.link.faults.loss = 1.0;
    post_write(pair, 1, 2048);
    post_inline_send(pair, 2);
    post_write(pair, 3, 1024);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.wire.placed_held() >= 3; }, 100));
    ASSERT_EQ(pair.a.wire.placed_held(), 3u);
    pair.a.qp.reset();
    // One hold per WR that placed a payload, none for the inline SEND.
    EXPECT_EQ(pair.a.wire.forgotten.size(), 2u);
}

TEST(RcPlaced, read_responses_are_placed_but_hold_no_wr) {
    RcPair pair = RcPair::standard(1024, 56);
    pair.b.wire.place();  // b answers the READ from its memory
    const std::uint32_t src = pair.b.mem.add(4096);
    const std::uint32_t dst = pair.a.mem.add(4096);
    fill_pattern(pair.b.mem.bytes(src, 0, 4096), 7);
    SendWr wr = send_wr(1, WrOp::rdma_read, dst, pair.a.mem.va(dst), 4096);
    wr.remote_addr = pair.b.mem.va(src);
    wr.rkey = src;
    pair.a.q.sq.push_back(wr);
    ASSERT_TRUE(pair.run_until([&] { return pair.a.q.scq.size() == 1; }, 10'000));
    EXPECT_EQ(pair.a.q.scq[0].status, WcStatus::success);
    EXPECT_EQ(std::memcmp(pair.a.mem.bytes(dst, 0, 4096).data(),
                          pair.b.mem.bytes(src, 0, 4096).data(), 4096),
              0);
    EXPECT_EQ(pair.b.wire.placed_count, 0u) << "a READ response has no WR to hold";
    EXPECT_EQ(pair.b.wire.unheld_count, 4u);  // its four responses, offered for placement
}

}  // namespace
}  // namespace snic::roce::test
