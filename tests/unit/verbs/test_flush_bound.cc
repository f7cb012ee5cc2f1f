// The flush of a QP in the error state is bounded, on every engine (RC, UC, UD, iWARP): one
// call completes at most flush_budget WRs of each queue however fast the client posts, asks
// to be polled again while some may be left, and the polls that follow complete every WR
// with WR_FLUSH_ERR in posting order, none lost and none twice. A client that kept posting
// to a QP in ERR held the lcore for as long as it liked (Modify QP to ERR waited seconds).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "proto/iwarp/qp.h"
#include "proto/roce/rc_qp.h"
#include "proto/roce/ud_qp.h"
#include "tests/unit/iwarp/qp_harness.h"
#include "tests/unit/roce/rc_harness.h"

namespace snic::verbs::test {
namespace {

constexpr std::uint32_t kBudget = 8;
constexpr std::uint64_t kPosted = 100;  // twelve budgets and a half

// Queues a client keeps posting to, faster than the QP flushes: each has `left` WRs still to
// come, numbered on from 1, and a pop takes the next while any is left.
class PostingQueues final : public QpQueues {
  public:
    bool send_ready() override { return send_left != 0; }
    bool pop_send(SendWr& out) override {
        if (send_left == 0) return false;
        --send_left;
        out = SendWr{};
        out.wr_id = ++sends_posted;
        out.op = (out.wr_id % 2) != 0 ? WrOp::send : WrOp::rdma_write;
        out.signaled = (out.wr_id % 3) != 0;  // a flushed WR completes signaled or not
        return true;
    }
    bool pop_recv(RecvWr& out) override {
        if (recv_left == 0) return false;
        --recv_left;
        out = RecvWr{};
        out.wr_id = ++recvs_posted;
        return true;
    }
    void complete_send(const Completion& c) override { scq.push_back(c); }
    void complete_recv(const Completion& c) override { rcq.push_back(c); }

    std::uint64_t send_left = 0, recv_left = 0;
    std::uint64_t sends_posted = 0, recvs_posted = 0;
    std::vector<Completion> scq, rcq;
};

// Every completion in `cq` is WR_FLUSH_ERR, and their ids run 1..n in order.
void expect_flushed_in_order(const std::vector<Completion>& cq, std::uint64_t n) {
    ASSERT_EQ(cq.size(), n);
    for (std::uint64_t i = 0; i < n; ++i) {
        EXPECT_EQ(cq[i].wr_id, i + 1);
        EXPECT_EQ(cq[i].status, WcStatus::wr_flush_err);
    }
}

// Polls the QP while it says it has work now (what the lcore's scheduler does), each poll
// flushing at most the budget of each queue, then checks that everything posted is flushed.
template <class Poll, class Due>
void poll_until_flushed(PostingQueues& q, Poll&& poll, Due&& due_now, bool recvs = true) {
    for (int i = 0; i < 1000 && due_now(); ++i) {
        const std::size_t s = q.scq.size(), r = q.rcq.size();
        poll();
        EXPECT_LE(q.scq.size() - s, kBudget);
        EXPECT_LE(q.rcq.size() - r, kBudget);
    }
    EXPECT_FALSE(due_now());
    EXPECT_EQ(q.send_left, 0u);
    expect_flushed_in_order(q.scq, kPosted);
    if (recvs) {
        EXPECT_EQ(q.recv_left, 0u);
        expect_flushed_in_order(q.rcq, kPosted);
    }
}

// --- RC and UC (one engine) --------------------------------------------------------------------

struct RcFixture {
    explicit RcFixture(roce::Transport service, bool srq = false)
        : qp(config(service, srq), mem, q, wire) {}
    static roce::RcConfig config(roce::Transport service, bool srq) {
        roce::RcConfig c = roce::test::solo_config();
        c.service = service;
        c.flush_budget = kBudget;
        c.srq = srq;
        return c;
    }
    bool due_now() const { return qp.next_deadline() <= now; }

    roce::test::FakeMemory mem{1};
    PostingQueues q;
    roce::test::FakeWire wire;
    roce::RcQp qp;
    roce::RcTime now = 1'000'000;
};

void rc_to_error_flushes_a_budget_then_the_rest_by_poll(roce::Transport service) {
    RcFixture f(service);
    f.q.send_left = kPosted;
    f.q.recv_left = kPosted;
    f.qp.to_error();
    EXPECT_EQ(f.q.scq.size(), kBudget);
    EXPECT_EQ(f.q.rcq.size(), kBudget);
    EXPECT_EQ(f.qp.next_deadline(), 0u);  // more to flush: poll me now
    poll_until_flushed(
        f.q, [&] { f.qp.poll(f.now); }, [&] { return f.due_now(); });
    EXPECT_EQ(f.qp.send_wrs_held(), 0u);

    // Posted once the queues ran dry: the next poll (the doorbell's) flushes them.
    f.q.send_left = 3;
    f.q.recv_left = 2;
    EXPECT_TRUE(f.qp.poll(f.now));
    ASSERT_EQ(f.q.scq.size(), kPosted + 3);
    ASSERT_EQ(f.q.rcq.size(), kPosted + 2);
    EXPECT_EQ(f.q.scq.back().wr_id, kPosted + 3);
    EXPECT_EQ(f.q.rcq.back().wr_id, kPosted + 2);
    EXPECT_FALSE(f.due_now());
}

TEST(FlushBound, rc_to_error_flushes_at_most_a_budget_of_each_queue_then_the_rest_in_order) {
    rc_to_error_flushes_a_budget_then_the_rest_by_poll(roce::Transport::rc);
}

TEST(FlushBound, uc_to_error_flushes_at_most_a_budget_of_each_queue_then_the_rest_in_order) {
    rc_to_error_flushes_a_budget_then_the_rest_by_poll(roce::Transport::uc);
}

TEST(FlushBound, rc_wrs_held_go_first_and_do_not_count_against_the_queue_budget) {
    RcFixture f(roce::Transport::rc);
    // Three sends taken and on the wire (held, unacknowledged), then the client keeps posting.
    f.q.send_left = 3;
    while (f.qp.poll(f.now)) {
    }
    ASSERT_EQ(f.qp.send_wrs_held(), 3u);
    f.q.send_left = kPosted - 3;
    f.qp.to_error();
    EXPECT_EQ(f.q.scq.size(), 3u + kBudget);
    poll_until_flushed(
        f.q, [&] { f.qp.poll(f.now); }, [&] { return f.due_now(); }, false);
}

TEST(FlushBound, rc_with_an_srq_flushes_its_sends_bounded_and_leaves_the_srq_alone) {
    RcFixture f(roce::Transport::rc, true);
    f.q.send_left = kPosted;
    f.q.recv_left = 5;
    f.qp.to_error();
    EXPECT_EQ(f.q.scq.size(), kBudget);
    poll_until_flushed(
        f.q, [&] { f.qp.poll(f.now); }, [&] { return f.due_now(); }, false);
    EXPECT_TRUE(f.q.rcq.empty());
    EXPECT_EQ(f.q.recv_left, 5u);
}

// A client that never stops posting: each call still returns after its budget.
TEST(FlushBound, rc_a_client_that_never_stops_posting_costs_one_budget_per_poll) {
    RcFixture f(roce::Transport::rc);
    f.q.send_left = ~std::uint64_t{0};
    f.q.recv_left = ~std::uint64_t{0};
    f.qp.to_error();
    for (int i = 0; i < 50; ++i) {
        EXPECT_EQ(f.qp.next_deadline(), 0u);
        f.qp.poll(f.now);
    }
    ASSERT_EQ(f.q.scq.size(), 51u * kBudget);
    ASSERT_EQ(f.q.rcq.size(), 51u * kBudget);
    for (std::uint64_t i = 0; i < f.q.scq.size(); ++i) EXPECT_EQ(f.q.scq[i].wr_id, i + 1);
    for (std::uint64_t i = 0; i < f.q.rcq.size(); ++i) EXPECT_EQ(f.q.rcq[i].wr_id, i + 1);
}

// --- UD --------------------------------------------------------------------------------------

class NullUdWire final : public roce::UdWire {
  public:
    std::span<std::uint8_t> tx_alloc(std::size_t) override { return {}; }
    bool tx_send(std::size_t, net::Ipv4Addr, std::uint32_t) override { return false; }
};

TEST(FlushBound, ud_poll_in_error_flushes_at_most_a_budget_of_each_queue_then_the_rest) {
    roce::UdConfig c;
    c.qpn = 0x1234;
    c.flush_budget = kBudget;
    roce::test::FakeMemory mem{1};
    PostingQueues q;
    NullUdWire wire;
    roce::UdQp qp(c, mem, q, wire);
    qp.to_error();
    q.send_left = kPosted;
    q.recv_left = kPosted;
    EXPECT_TRUE(qp.poll(1));
    EXPECT_EQ(q.scq.size(), kBudget);
    EXPECT_EQ(q.rcq.size(), kBudget);
    EXPECT_EQ(qp.next_deadline(), 0u);
    poll_until_flushed(
        q, [&] { qp.poll(1); }, [&] { return qp.next_deadline() == 0; });
}

// --- iWARP -----------------------------------------------------------------------------------

TEST(FlushBound, iwarp_to_error_flushes_at_most_a_budget_of_each_queue_then_the_rest_in_order) {
    iwarp::IwConfig c = iwarp::test::iw_config(0x11);
    c.flush_budget = kBudget;
    roce::test::FakeMemory mem{1};
    PostingQueues q;
    iwarp::test::FakeStream stream;
    iwarp::IwQp qp(c, mem, q, stream);
    q.send_left = kPosted;
    q.recv_left = kPosted;
    qp.to_error();
    EXPECT_EQ(q.scq.size(), kBudget);
    EXPECT_EQ(q.rcq.size(), kBudget);
    EXPECT_EQ(qp.next_deadline(), 0u);
    poll_until_flushed(
        q, [&] { qp.poll(0); }, [&] { return qp.next_deadline() == 0; });
    q.send_left = 2;
    EXPECT_TRUE(qp.poll(0));
    ASSERT_EQ(q.scq.size(), kPosted + 2);
    EXPECT_EQ(q.scq.back().wr_id, kPosted + 2);
}

}  // namespace
}  // namespace snic::verbs::test
