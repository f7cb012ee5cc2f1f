// Which QPs an lcore runs on a turn of its loop, so that a QP with nothing to do costs
// nothing. A transport's QP is Schedulable; the transport's QpScheduler runs a QP's engine
// only when the QP is on its ready list, and a QP is put there by
//   - a packet for it (the transport calls wake()),
//   - a doorbell: its client posted send WQEs while it slept (wake()),
//   - its engine's own deadline (a local ACK timeout, an RNR wait, an ACK delay), kept in a
//     heap of deadlines, or
//   - its engine having output left after a poll (a burst cut short, the wire full).
// A QP that did something stays on the list for a grace period, during which the lcore
// watches its send queue itself (the client rings no doorbell); then it goes to sleep: it
// tells its client so (QpControl::sleeping), re-checks its send queue after a full fence, and
// leaves the list unless WQEs arrived meanwhile.
//
// Everything here belongs to one lcore; nothing allocates after construction.
#pragma once

#include <cstdint>
#include <memory>

#include "common/counter.h"

namespace snic::daemon {

inline constexpr std::uint64_t kSchedNever = ~std::uint64_t{0};

class Schedulable;

// A QP's place in a ReadyList (intrusive, doubly linked: O(1) to add, take and remove).
struct ReadyLink {
    ReadyLink* prev = nullptr;  // nullptr: on no list
    ReadyLink* next = nullptr;
    Schedulable* owner = nullptr;
};

// A FIFO of QPs. A QP is on at most one list at a time; pushing a listed QP does nothing.
class ReadyList {
  public:
    ReadyList() { head_.prev = head_.next = &head_; }
    ReadyList(const ReadyList&) = delete;
    ReadyList& operator=(const ReadyList&) = delete;

    bool empty() const { return head_.next == &head_; }
    static bool listed(const ReadyLink& l) { return l.prev != nullptr; }
    // The first and last entries (nullptr when empty), and the one after `l` (nullptr at the
    // end).
    ReadyLink* front() { return empty() ? nullptr : head_.next; }
    ReadyLink* back() { return empty() ? nullptr : head_.prev; }
    ReadyLink* next(const ReadyLink& l) { return l.next == &head_ ? nullptr : l.next; }
    void push_back(ReadyLink& l);
    // Unlinks `l` from whichever list holds it (nothing when none).
    static void remove(ReadyLink& l);
    ReadyLink* pop_front();

  private:
    ReadyLink head_;
};

// A QP's entry in a DeadlineHeap.
struct TimerNode {
    static constexpr std::uint32_t kNotArmed = ~0u;
    std::uint64_t due = kSchedNever;
    std::uint32_t at = kNotArmed;  // its index in the heap
    Schedulable* owner = nullptr;
};

// The armed deadlines of an lcore's QPs: a binary min-heap in an array sized once (one entry
// per QP at most). O(log n) to arm, move or cancel; O(1) to see the earliest.
class DeadlineHeap {
  public:
    explicit DeadlineHeap(std::uint32_t capacity);
    DeadlineHeap(const DeadlineHeap&) = delete;
    DeadlineHeap& operator=(const DeadlineHeap&) = delete;

    static bool armed(const TimerNode& n) { return n.at != TimerNode::kNotArmed; }
    // Arms `n` for `due`, or moves it there when armed. False when the heap is full.
    bool arm(TimerNode& n, std::uint64_t due);
    void cancel(TimerNode& n);
    // The earliest deadline, kSchedNever when none is armed.
    std::uint64_t earliest() const { return size_ == 0 ? kSchedNever : heap_[0].due; }
    // Disarms and returns the earliest node due at or before `now`; nullptr when none is.
    TimerNode* pop_due(std::uint64_t now);
    std::uint32_t size() const { return size_; }

  private:
    struct Entry {
        std::uint64_t due;
        TimerNode* node;
    };
    void put(std::uint32_t i, const Entry& e);
    void sift_up(std::uint32_t i, Entry e);
    void sift_down(std::uint32_t i, Entry e);
    void erase_at(std::uint32_t i);

    std::unique_ptr<Entry[]> heap_;
    std::uint32_t capacity_;
    std::uint32_t size_ = 0;
};

// A QP as the scheduler runs it. The transport's QP implements the four calls; the scheduler
// keeps the rest.
class Schedulable {
  public:
    Schedulable() {
        link_.owner = this;
        timer_.owner = this;
    }
    Schedulable(const Schedulable&) = delete;
    Schedulable& operator=(const Schedulable&) = delete;

    // One poll of the engine at `now_ns`; true when it did something.
    virtual bool sched_poll(std::uint64_t now_ns) = 0;
    // When the engine has work again without a packet or a post: 0 (or any time up to now)
    // for now, kSchedNever for none.
    virtual std::uint64_t sched_deadline() const = 0;
    // The QP is going to sleep: tell the client (QpControl::sleeping), full fence, re-check
    // the send queue. False, with the client told it is awake again, when WQEs are waiting.
    virtual bool sched_sleep() = 0;
    // The QP woke up: the client need not ring its doorbell any more.
    virtual void sched_awake() = 0;

    bool asleep() const { return asleep_; }

  protected:
    ~Schedulable() = default;

  private:
    friend class QpScheduler;
    ReadyLink link_;
    TimerNode timer_;
    std::uint64_t busy_until_ = 0;  // end of the grace period after it last did something
    bool asleep_ = false;           // off the ready list, and its client knows
};

struct SchedCounters {
    Counter engine_polls;  // engine polls, all reasons
    Counter timer_wakes;   // deadlines reached
    Counter sleeps;        // QPs that went to sleep
    Counter stayed_awake;  // send WQEs were waiting when it would have slept
    Counter timers_full;   // a deadline found the heap full: the QP stayed awake
};

class QpScheduler {
  public:
    // `capacity`: the most QPs at once; `grace_ns`: how long a QP stays on the ready list
    // after it last did something.
    QpScheduler(std::uint32_t capacity, std::uint64_t grace_ns);

    // The QP starts running (awake, on the ready list) / stops (off every structure).
    void add(Schedulable& q, std::uint64_t now);
    void remove(Schedulable& q);
    // Something for the QP (a packet, a doorbell, a change of state): it runs on this turn
    // or the next.
    void wake(Schedulable& q);
    // One turn: wakes the QPs whose deadline passed, then polls every QP on the ready list once,
    // in place: those with work left or within their grace period stay, the others sleep and
    // leave. True when an engine did something. A turn with nothing to run costs two loads.
    bool run(std::uint64_t now) {
        if (ready_.empty() && timers_.earliest() > now) return false;
        return run_ready(now);
    }

    std::uint32_t armed_timers() const { return timers_.size(); }
    const SchedCounters& counters() const { return counters_; }
    std::uint64_t grace_ns() const { return grace_; }

  private:
    bool run_ready(std::uint64_t now);
    // After a poll: true when the QP stays ready; else it went to sleep.
    bool stays_ready(Schedulable& q, std::uint64_t now);

    const std::uint64_t grace_;
    ReadyList ready_;
    DeadlineHeap timers_;
    SchedCounters counters_;
};

}  // namespace snic::daemon
