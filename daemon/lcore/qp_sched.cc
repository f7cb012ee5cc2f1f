// The lcore's QP scheduler: the ready list, the deadline heap, and the rule that puts a QP to
// sleep. No allocation after construction, no syscalls, no locks, no logs.
#include "daemon/lcore/qp_sched.h"

namespace snic::daemon {

// ---- ReadyList ------------------------------------------------------------------------------

void ReadyList::push_back(ReadyLink& l) {
    if (listed(l)) return;
    l.prev = head_.prev;
    l.next = &head_;
    head_.prev->next = &l;
    head_.prev = &l;
}

void ReadyList::remove(ReadyLink& l) {
    if (!listed(l)) return;
    l.prev->next = l.next;
    l.next->prev = l.prev;
    l.prev = l.next = nullptr;
}

ReadyLink* ReadyList::pop_front() {
    if (empty()) return nullptr;
    ReadyLink* l = head_.next;
    remove(*l);
    return l;
}

// ---- DeadlineHeap ---------------------------------------------------------------------------

DeadlineHeap::DeadlineHeap(std::uint32_t capacity)
    : heap_(std::make_unique_for_overwrite<Entry[]>(capacity)),
      capacity_(capacity) {}  // untouched until used

void DeadlineHeap::put(std::uint32_t i, const Entry& e) {
    heap_[i] = e;
    e.node->at = i;
}

void DeadlineHeap::sift_up(std::uint32_t i, Entry e) {
    while (i > 0) {
        const std::uint32_t parent = (i - 1) / 2;
        if (heap_[parent].due <= e.due) break;
        put(i, heap_[parent]);
        i = parent;
    }
    put(i, e);
}

void DeadlineHeap::sift_down(std::uint32_t i, Entry e) {
    for (;;) {
        std::uint32_t child = 2 * i + 1;
        if (child >= size_) break;
        if (child + 1 < size_ && heap_[child + 1].due < heap_[child].due) ++child;
        if (e.due <= heap_[child].due) break;
        put(i, heap_[child]);
        i = child;
    }
    put(i, e);
}

bool DeadlineHeap::arm(TimerNode& n, std::uint64_t due) {
    n.due = due;
    if (armed(n)) {
        const std::uint32_t i = n.at;
        const Entry e{due, &n};
        if (i > 0 && heap_[(i - 1) / 2].due > due)
            sift_up(i, e);
        else
            sift_down(i, e);
        return true;
    }
    if (size_ == capacity_) return false;
    sift_up(size_++, Entry{due, &n});
    return true;
}

void DeadlineHeap::erase_at(std::uint32_t i) {
    heap_[i].node->at = TimerNode::kNotArmed;
    const Entry last = heap_[--size_];
    if (i == size_) return;
    // The last entry takes the hole and moves up or down from there.
    if (i > 0 && heap_[(i - 1) / 2].due > last.due)
        sift_up(i, last);
    else
        sift_down(i, last);
}

void DeadlineHeap::cancel(TimerNode& n) {
    if (armed(n)) erase_at(n.at);
}

TimerNode* DeadlineHeap::pop_due(std::uint64_t now) {
    if (size_ == 0 || heap_[0].due > now) return nullptr;
    TimerNode* n = heap_[0].node;
    erase_at(0);
    return n;
}

// ---- QpScheduler ------------------------------------------------------------------------------

QpScheduler::QpScheduler(std::uint32_t capacity, std::uint64_t grace_ns)
    : grace_(grace_ns), timers_(capacity) {}

void QpScheduler::add(Schedulable& q, std::uint64_t now) {
    q.asleep_ = false;
    q.busy_until_ = now + grace_;
    ready_.push_back(q.link_);
}

void QpScheduler::remove(Schedulable& q) {
    ReadyList::remove(q.link_);
    timers_.cancel(q.timer_);
    q.asleep_ = false;
}

void QpScheduler::wake(Schedulable& q) {
    if (q.asleep_) {
        q.asleep_ = false;
        q.sched_awake();
    }
    ready_.push_back(q.link_);
}

bool QpScheduler::run_ready(std::uint64_t now) {
    while (TimerNode* n = timers_.pop_due(now)) {
        counters_.timer_wakes.add();
        wake(*n->owner);
    }
    // The QPs on the list now, each once: nothing joins the list while they run, and one
    // that stays ready keeps its place (no list operation for a busy QP).
    bool did = false;
    ReadyLink* const last = ready_.back();
    for (ReadyLink* l = ready_.front(); l != nullptr;) {
        ReadyLink* const next = l == last ? nullptr : ready_.next(*l);
        Schedulable& q = *l->owner;
        counters_.engine_polls.add();
        if (q.sched_poll(now)) {
            did = true;
            q.busy_until_ = now + grace_;
        }
        if (!stays_ready(q, now)) ReadyList::remove(*l);
        l = next;
    }
    return did;
}

// After a poll: ready again on the next turn, or asleep until a packet, a doorbell or its
// deadline.
bool QpScheduler::stays_ready(Schedulable& q, std::uint64_t now) {
    if (now < q.busy_until_) return true;  // its send queue is watched here
    const std::uint64_t deadline = q.sched_deadline();
    if (deadline <= now) return true;
    // A deadline is armed before the QP sleeps. A later one than already armed waits for the
    // armed one, which then wakes the QP early (one poll for nothing, and it is re-armed).
    if (deadline != kSchedNever && (!DeadlineHeap::armed(q.timer_) || deadline < q.timer_.due) &&
        !timers_.arm(q.timer_, deadline)) {
        counters_.timers_full.add();
        return true;
    }
    if (!q.sched_sleep()) {
        counters_.stayed_awake.add();
        q.busy_until_ = now + grace_;
        return true;
    }
    q.asleep_ = true;
    counters_.sleeps.add();
    return false;
}

}  // namespace snic::daemon
