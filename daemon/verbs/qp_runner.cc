#include "daemon/verbs/qp_runner.h"

#include <malloc.h>
#include <rte_cycles.h>

#include <atomic>
#include <utility>
#include <vector>

#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"

namespace snic::daemon {

// A QP's doorbell is the slot of its number: unique among live QPs, and the index of by_slot_.
static_assert(shm::kDoorbellBits == 1u << kQpnFormat.gen_shift && kQpnFormat.index_shift == 0);
static_assert(QpRunner::kQpnSlots == shm::kDoorbellBits);

RunningQp::RunningQp(Qp& qp, const NameTable& keys, std::uint32_t qpn)
    : glue_(qp, keys), qpn_(qpn), doorbells_(qp.doorbells) {}

RunningQp::~RunningQp() = default;

QpRunner::QpRunner(LcoreTasks& tasks, std::uint64_t tsc_hz, std::uint64_t grace_ns)
    : tasks_(tasks),
      ns_per_tsc_(1e9 / static_cast<double>(tsc_hz)),
      by_slot_(std::make_unique<std::array<RunningQp*, kQpnSlots>>()),
      sched_(kQpnSlots, grace_ns) {
    by_slot_->fill(nullptr);
}

QpRunner::~QpRunner() = default;

void QpRunner::add(RunningQp& q, const Qp& qp, const std::function<void(std::uint64_t)>& also) {
    // The client's doorbells are watched while one of its QPs runs here.
    DoorbellWatch* fresh = nullptr;
    if (qp.doorbells != nullptr) {
        auto& w = watches_[qp.doorbells];
        if (!w) {
            w = std::make_unique<DoorbellWatch>();
            w->area = qp.doorbells;
            fresh = w.get();
        }
        ++w->qps;
    }
    tasks_.run([&] {
        if (fresh != nullptr) link(fresh);
        (*by_slot_)[q.qpn() & (kQpnSlots - 1)] = &q;
        const std::uint64_t now = rte_rdtsc();
        sched_.add(q, ns(now));
        if (also) also(now);
    });
    peak_ = std::max(peak_, ++running_);
}

void QpRunner::remove(std::span<RunningQp* const> qs, const std::function<void(RunningQp&)>& also) {
    std::vector<DoorbellWatch*> gone;
    for (RunningQp* q : qs)
        if (auto it = watches_.find(q->doorbells_); it != watches_.end() && --it->second->qps == 0)
            gone.push_back(it->second.get());
    tasks_.run([&] {
        for (RunningQp* q : qs) {
            if (also) also(*q);
            auto& slot = (*by_slot_)[q->qpn() & (kQpnSlots - 1)];
            if (slot == q) slot = nullptr;
            sched_.remove(*q);
        }
        for (DoorbellWatch* w : gone) unlink(w);
    });
    for (DoorbellWatch* w : gone) watches_.erase(w->area);
    // When many QPs went, the heap's free pages go back to the system (a QP is small, but tens
    // of thousands come and go with their clients): each time the QPs running here halved
    // from a peak of at least kTrimPeak. The engines stopped before this call are freed by now.
    constexpr std::uint32_t kTrimPeak = 256;
    running_ -= static_cast<std::uint32_t>(qs.size());
    if (running_ <= peak_ / 2 && peak_ >= kTrimPeak) {
        malloc_trim(0);
        peak_ = running_;
    }
}

// Wakes the QPs whose clients rang their doorbells. A bit that names no QP of the client that
// rang it (a stale one, or a hostile client's) is counted and ignored: a client can make the
// lcore read its doorbell area, never run another client's QP.
void QpRunner::ring_doorbells(DoorbellWatch& w) {
    shm::take_doorbells(*w.area, [&](std::uint32_t bit) {
        RunningQp* q = (*by_slot_)[bit];
        if (q == nullptr || q->doorbells_ != w.area) {
            counters_.doorbells_stray.add();
            return;
        }
        counters_.doorbells.add();
        sched_.wake(*q);
    });
}

bool QpRunner::poll(std::uint64_t now_tsc) {
    bool work = false;
    // The doorbells of its clients: one load each when none was rung.
    for (DoorbellWatch* w = watching_; w != nullptr; w = w->next) {
        if (std::atomic_ref<std::uint64_t>(w->area->summary).load(std::memory_order_relaxed) == 0)
            continue;
        ring_doorbells(*w);
        work = true;
    }
    work |= sched_.run(ns(now_tsc));
    return work;
}

void QpRunner::link(DoorbellWatch* w) {
    w->prev = nullptr;
    w->next = watching_;
    if (watching_ != nullptr) watching_->prev = w;
    watching_ = w;
}

void QpRunner::unlink(DoorbellWatch* w) {
    (w->prev != nullptr ? w->prev->next : watching_) = w->next;
    if (w->next != nullptr) w->next->prev = w->prev;
    w->prev = w->next = nullptr;
}

void QpRunner::for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const {
    fn(ctx, {"doorbells", counters_.doorbells.get()});
    fn(ctx, {"doorbells_stray", counters_.doorbells_stray.get()});
    const SchedCounters& s = sched_.counters();
    fn(ctx, {"engine_polls", s.engine_polls.get()});
    fn(ctx, {"timer_wakes", s.timer_wakes.get()});
    fn(ctx, {"sleeps", s.sleeps.get()});
    fn(ctx, {"stayed_awake", s.stayed_awake.get()});
    fn(ctx, {"timers_full", s.timers_full.get()});
}

}  // namespace snic::daemon
