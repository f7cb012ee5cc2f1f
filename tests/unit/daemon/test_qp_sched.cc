// The lcore's QP scheduler (daemon/lcore/qp_sched.h): the ready list, the deadline heap, and the
// rules that decide when a QP's engine runs. The QPs are fakes whose engine does what the
// test says; the clock is a number.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "daemon/lcore/qp_sched.h"

namespace snic::daemon {
namespace {

// A QP whose engine has work when the test says so.
class FakeQp final : public Schedulable {
  public:
    bool sched_poll(std::uint64_t now) override {
        ++polls;
        last_poll = now;
        const bool did = work > 0;
        if (work > 0) --work;
        if (sq_waiting > 0) sq_waiting = 0;  // the engine took the WQEs
        return did;
    }
    std::uint64_t sched_deadline() const override { return work > 0 ? 0 : deadline; }
    bool sched_sleep() override {
        ++sleep_calls;
        client_told_asleep = true;
        // A post that raced the sleep: seen after the fence.
        if (sq_waiting > 0 || post_during_sleep) {
            post_during_sleep = false;
            client_told_asleep = false;
            return false;
        }
        return true;
    }
    void sched_awake() override { client_told_asleep = false; }

    std::uint32_t work = 0;        // polls that will do something
    std::uint32_t sq_waiting = 0;  // WQEs posted and not taken
    bool post_during_sleep = false;
    std::uint64_t deadline = kSchedNever;
    std::uint64_t polls = 0, last_poll = 0, sleep_calls = 0;
    bool client_told_asleep = false;
};

constexpr std::uint64_t kGrace = 1'000;

// --- ReadyList ---------------------------------------------------------------------------------

TEST(ReadyList, keeps_first_in_first_out_order) {
    std::vector<ReadyLink> links(3);
    ReadyList l;
    for (auto& k : links) l.push_back(k);
    for (auto& k : links) EXPECT_EQ(l.pop_front(), &k);
    EXPECT_EQ(l.pop_front(), nullptr);
    EXPECT_TRUE(l.empty());
}

TEST(ReadyList, pushing_a_listed_entry_does_nothing) {
    ReadyLink x, y;
    ReadyList l;
    l.push_back(x);
    l.push_back(y);
    l.push_back(x);
    EXPECT_EQ(l.pop_front(), &x);
    EXPECT_EQ(l.pop_front(), &y);
    EXPECT_TRUE(l.empty());
}

TEST(ReadyList, an_entry_removed_from_the_middle_leaves_the_rest_in_order) {
    ReadyLink x, y, z;
    ReadyList l;
    l.push_back(x);
    l.push_back(y);
    l.push_back(z);
    ReadyList::remove(y);
    EXPECT_FALSE(ReadyList::listed(y));
    ReadyList::remove(y);  // twice: nothing
    EXPECT_EQ(l.pop_front(), &x);
    EXPECT_EQ(l.pop_front(), &z);
    EXPECT_TRUE(l.empty());
}

TEST(ReadyList, walks_from_front_to_back) {
    ReadyLink a, b;
    ReadyList l;
    EXPECT_EQ(l.front(), nullptr);
    EXPECT_EQ(l.back(), nullptr);
    l.push_back(a);
    l.push_back(b);
    EXPECT_EQ(l.front(), &a);
    EXPECT_EQ(l.back(), &b);
    EXPECT_EQ(l.next(a), &b);
    EXPECT_EQ(l.next(b), nullptr);
}

// --- DeadlineHeap ------------------------------------------------------------------------------

TEST(DeadlineHeap, pops_deadlines_in_order_and_only_when_due) {
    std::vector<TimerNode> nodes(200);
    DeadlineHeap h(200);
    std::mt19937_64 rng(5);
    std::multiset<std::uint64_t> model;
    for (auto& n : nodes) {
        const std::uint64_t due = rng() % 10'000;
        ASSERT_TRUE(h.arm(n, due));
        model.insert(due);
    }
    const std::uint64_t first = *model.begin();
    EXPECT_EQ(h.earliest(), first);
    if (first > 0) {
        EXPECT_EQ(h.pop_due(first - 1), nullptr);
    }
    std::vector<std::uint64_t> popped;
    while (TimerNode* n = h.pop_due(10'000)) {
        EXPECT_FALSE(DeadlineHeap::armed(*n));
        popped.push_back(n->due);
    }
    EXPECT_EQ(popped, std::vector<std::uint64_t>(model.begin(), model.end()));
    EXPECT_EQ(h.size(), 0u);
    EXPECT_EQ(h.earliest(), kSchedNever);
}

TEST(DeadlineHeap, rearming_moves_an_entry_earlier_or_later) {
    TimerNode a, b, c;
    DeadlineHeap h(3);
    h.arm(a, 100);
    h.arm(b, 200);
    h.arm(c, 300);
    h.arm(c, 50);  // earlier
    EXPECT_EQ(h.earliest(), 50u);
    h.arm(c, 400);  // later
    EXPECT_EQ(h.size(), 3u);
    EXPECT_EQ(h.pop_due(1000), &a);
    EXPECT_EQ(h.pop_due(1000), &b);
    EXPECT_EQ(h.pop_due(1000), &c);
}

TEST(DeadlineHeap, cancel_removes_only_that_entry) {
    std::vector<TimerNode> n(50);
    DeadlineHeap h(50);
    for (std::size_t i = 0; i < n.size(); ++i) h.arm(n[i], (i * 37) % 50);
    for (std::size_t i = 0; i < n.size(); i += 3) h.cancel(n[i]);
    h.cancel(n[0]);  // twice: nothing
    std::vector<std::uint64_t> left;
    while (TimerNode* t = h.pop_due(100)) left.push_back(t->due);
    std::vector<std::uint64_t> want;
    for (std::size_t i = 0; i < n.size(); ++i)
        if (i % 3 != 0) want.push_back((i * 37) % 50);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(left, want);
}

TEST(DeadlineHeap, agrees_with_a_sorted_model_under_random_arms_moves_and_cancels) {
    constexpr std::size_t kNodes = 300;
    std::vector<TimerNode> n(kNodes);
    DeadlineHeap h(kNodes);
    std::mt19937_64 rng(17);
    std::uint64_t now = 0;
    for (int step = 0; step < 20'000; ++step) {
        TimerNode& t = n[rng() % kNodes];
        switch (rng() % 4) {
            case 0:
            case 1:
                ASSERT_TRUE(h.arm(t, now + rng() % 5'000));
                break;
            case 2:
                h.cancel(t);
                break;
            case 3: {
                now += rng() % 100;
                std::uint64_t prev = 0;
                while (TimerNode* d = h.pop_due(now)) {
                    ASSERT_LE(d->due, now);
                    ASSERT_GE(d->due, prev);
                    prev = d->due;
                }
                // Whatever is left is not due, and the earliest is the least armed.
                std::uint64_t least = kSchedNever;
                std::uint32_t armed = 0;
                for (const TimerNode& x : n)
                    if (DeadlineHeap::armed(x)) {
                        least = std::min(least, x.due);
                        ++armed;
                    }
                ASSERT_EQ(h.earliest(), least);
                ASSERT_EQ(h.size(), armed);
                ASSERT_TRUE(least == kSchedNever || least > now);
                break;
            }
        }
    }
}

TEST(DeadlineHeap, refuses_more_entries_than_its_capacity) {
    TimerNode a, b;
    DeadlineHeap h(1);
    EXPECT_TRUE(h.arm(a, 1));
    EXPECT_FALSE(h.arm(b, 2));
    EXPECT_FALSE(DeadlineHeap::armed(b));
    EXPECT_TRUE(h.arm(a, 3));  // moving an armed one needs no room
}

// --- QpScheduler -------------------------------------------------------------------------------

TEST(QpScheduler, an_idle_qp_is_not_polled) {
    QpScheduler s(2048, kGrace);
    std::vector<std::unique_ptr<FakeQp>> idle;
    for (int i = 0; i < 1000; ++i) {
        idle.push_back(std::make_unique<FakeQp>());
        s.add(*idle.back(), 0);
    }
    // Each is polled through its grace period after it started, then sleeps.
    std::uint64_t now = 0;
    for (; now <= 2 * kGrace; now += 100) s.run(now);
    for (const auto& q : idle) EXPECT_TRUE(q->asleep());
    const std::uint64_t polls = s.counters().engine_polls.get();
    for (int turn = 0; turn < 10'000; ++turn, now += 100) EXPECT_FALSE(s.run(now));
    EXPECT_EQ(s.counters().engine_polls.get(), polls);
    for (const auto& q : idle) EXPECT_TRUE(q->client_told_asleep);
}

TEST(QpScheduler, a_busy_qp_beside_idle_ones_is_the_only_one_polled) {
    QpScheduler s(2048, kGrace);
    std::vector<std::unique_ptr<FakeQp>> idle;
    for (int i = 0; i < 1000; ++i) {
        idle.push_back(std::make_unique<FakeQp>());
        s.add(*idle.back(), 0);
    }
    FakeQp busy;
    s.add(busy, 0);
    std::uint64_t now = 0;
    for (; now <= 2 * kGrace; now += 100) s.run(now);
    const std::uint64_t polls = s.counters().engine_polls.get();
    // A ping-pong: a packet (or a post) every turn keeps it awake; nothing else runs.
    for (int turn = 0; turn < 1000; ++turn, now += 100) {
        busy.work = 1;
        s.wake(busy);
        EXPECT_TRUE(s.run(now));
    }
    EXPECT_EQ(s.counters().engine_polls.get(), polls + 1000);
    EXPECT_FALSE(busy.client_told_asleep);
}

TEST(QpScheduler, a_qp_that_did_something_stays_ready_for_the_grace_period_then_sleeps) {
    QpScheduler s(8, kGrace);
    FakeQp q;
    q.work = 1;
    s.add(q, 0);
    EXPECT_TRUE(s.run(0));
    // Polled on every turn within the grace period: its send queue is watched by the lcore.
    for (std::uint64_t now = 100; now < kGrace; now += 100) {
        s.run(now);
        EXPECT_FALSE(q.asleep());
    }
    const std::uint64_t polls = q.polls;
    EXPECT_EQ(polls, kGrace / 100);
    s.run(kGrace);
    EXPECT_TRUE(q.asleep());
    EXPECT_TRUE(q.client_told_asleep);
    s.run(kGrace + 100);
    EXPECT_EQ(q.polls, polls + 1);
    EXPECT_EQ(s.counters().sleeps.get(), 1u);
}

TEST(QpScheduler, a_qp_with_output_left_is_polled_on_the_next_turn) {
    QpScheduler s(8, kGrace);
    FakeQp q;
    s.add(q, 0);
    for (std::uint64_t now = 0; now <= kGrace; now += 100) s.run(now);
    ASSERT_TRUE(q.asleep());
    q.work = 3;  // e.g. a burst cut short: the deadline says now
    s.wake(q);
    const std::uint64_t before = q.polls;
    s.run(10 * kGrace);
    s.run(10 * kGrace);
    s.run(10 * kGrace);
    EXPECT_EQ(q.polls, before + 3);
    EXPECT_FALSE(q.asleep());
}

TEST(QpScheduler, a_doorbell_wakes_a_sleeping_qp_and_its_client_stops_ringing) {
    QpScheduler s(8, kGrace);
    FakeQp q;
    s.add(q, 0);
    for (std::uint64_t now = 0; now <= kGrace; now += 100) s.run(now);
    ASSERT_TRUE(q.client_told_asleep);
    q.sq_waiting = 1;
    q.work = 1;
    s.wake(q);  // the transport found its doorbell
    EXPECT_FALSE(q.client_told_asleep);
    const std::uint64_t before = q.polls;
    EXPECT_TRUE(s.run(5 * kGrace));
    EXPECT_EQ(q.polls, before + 1);
    EXPECT_EQ(q.sq_waiting, 0u);
}

TEST(QpScheduler, a_post_racing_the_sleep_keeps_the_qp_awake) {
    QpScheduler s(8, kGrace);
    FakeQp q;
    s.add(q, 0);
    q.post_during_sleep = true;  // the client pushed a WQE before it could see `sleeping`
    s.run(2 * kGrace);
    EXPECT_FALSE(q.asleep());
    EXPECT_FALSE(q.client_told_asleep);
    EXPECT_EQ(s.counters().stayed_awake.get(), 1u);
    const std::uint64_t before = q.polls;
    s.run(2 * kGrace + 1);
    EXPECT_EQ(q.polls, before + 1);  // polled again: it takes the WQE
}

TEST(QpScheduler, a_sleeping_qp_runs_when_its_deadline_passes) {
    QpScheduler s(8, kGrace);
    FakeQp q;
    s.add(q, 0);
    q.deadline = 50'000;  // e.g. the local ACK timer
    for (std::uint64_t now = 0; now <= kGrace; now += 100) s.run(now);
    ASSERT_TRUE(q.asleep());
    EXPECT_EQ(s.armed_timers(), 1u);
    const std::uint64_t before = q.polls;
    s.run(49'999);
    EXPECT_EQ(q.polls, before);
    q.deadline = kSchedNever;  // the timer work is done once it runs
    s.run(50'000);
    EXPECT_EQ(q.polls, before + 1);
    EXPECT_EQ(q.last_poll, 50'000u);
    EXPECT_EQ(s.counters().timer_wakes.get(), 1u);
    EXPECT_EQ(s.armed_timers(), 0u);
}

TEST(QpScheduler, an_earlier_deadline_moves_the_timer_and_a_later_one_waits_for_it) {
    QpScheduler s(8, kGrace);
    FakeQp q;
    s.add(q, 0);
    q.deadline = 90'000;
    for (std::uint64_t now = 0; now <= kGrace; now += 100) s.run(now);
    ASSERT_TRUE(q.asleep());
    // A packet, and the engine's deadline is now earlier: the timer moves.
    q.deadline = 20'000;
    s.wake(q);
    for (std::uint64_t now = 2 * kGrace; now <= 4 * kGrace; now += 100) s.run(now);
    ASSERT_TRUE(q.asleep());
    std::uint64_t before = q.polls;
    s.run(20'000);
    EXPECT_EQ(q.polls, before + 1);
    // Now later than armed (none armed after firing): armed again at the new time.
    q.deadline = 60'000;
    for (std::uint64_t now = 20'100; now <= 20'000 + 2 * kGrace; now += 100) s.run(now);
    ASSERT_TRUE(q.asleep());
    before = q.polls;
    s.run(59'999);
    EXPECT_EQ(q.polls, before);
    s.run(60'000);
    EXPECT_EQ(q.polls, before + 1);
}

TEST(QpScheduler, a_removed_qp_is_never_polled_again) {
    QpScheduler s(8, kGrace);
    FakeQp a, b;
    s.add(a, 0);
    s.add(b, 0);
    a.deadline = 5'000;
    for (std::uint64_t now = 0; now <= kGrace; now += 100) s.run(now);
    s.remove(a);
    s.wake(b);
    s.remove(b);  // while on the ready list
    const std::uint64_t pa = a.polls, pb = b.polls;
    for (std::uint64_t now = 2 * kGrace; now < 20'000; now += 100) EXPECT_FALSE(s.run(now));
    EXPECT_EQ(a.polls, pa);
    EXPECT_EQ(b.polls, pb);
    EXPECT_EQ(s.armed_timers(), 0u);
}

TEST(QpScheduler, each_ready_qp_runs_once_a_turn) {
    QpScheduler s(8, kGrace);
    FakeQp q;
    q.work = 100;
    s.add(q, 0);
    s.wake(q);
    s.wake(q);
    s.run(0);
    EXPECT_EQ(q.polls, 1u);
}

}  // namespace
}  // namespace snic::daemon
