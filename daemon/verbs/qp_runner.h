// What every transport does with the QPs it runs on its port's lcore, whatever its wire: a
// table from QP number to running QP, the doorbells of the clients whose QPs run here, and
// the scheduler that polls a QP only when it has work (daemon/lcore/qp_sched.h). RoCEv2 and iWARP
// each hold one QpRunner; their QPs are RunningQps that add the engine and the wire.
//
// add() and remove() run on the control thread and reach the lcore through LcoreTasks;
// everything else runs on the lcore only.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>

#include "daemon/lcore/lcore_tasks.h"
#include "daemon/lcore/qp_sched.h"
#include "daemon/verbs/qp_glue.h"
#include "daemon/verbs/transport.h"
#include "shm/wqe.h"

namespace snic::daemon {

class NameTable;
struct Qp;

// A QP as a transport runs it: the shared glue (the client's rings, CQs, keys, events), its
// number and where its doorbell rings. The transport's subclass adds its engine and wire.
class RunningQp : public QpEngine, public Schedulable {
  public:
    RunningQp(Qp& qp, const NameTable& keys, std::uint32_t qpn);
    ~RunningQp() override;

    QpGlue& glue() { return glue_; }
    std::uint32_t qpn() const { return qpn_; }

    // QpEngine
    bool failed() const override { return glue_.failed(); }

    // Schedulable
    bool sched_sleep() override { return glue_.try_sleep(); }
    void sched_awake() override { glue_.awake(); }

  protected:
    friend class QpRunner;
    QpGlue glue_;
    const std::uint32_t qpn_;
    shm::Doorbells* const doorbells_;  // its client's, where its bit rings
};

struct RunnerCounters {
    Counter doorbells;        // doorbells rung by clients for QPs that slept
    Counter doorbells_stray;  // doorbell bits naming no QP of that client: ignored
};

class QpRunner {
  public:
    // `grace_ns`: how long a QP that did something stays on the ready list (QpScheduler).
    QpRunner(LcoreTasks& tasks, std::uint64_t tsc_hz, std::uint64_t grace_ns);
    ~QpRunner();
    QpRunner(const QpRunner&) = delete;
    QpRunner& operator=(const QpRunner&) = delete;

    // --- control thread ---
    // `q` (the engine of `qp`) starts running: its client's doorbells are watched, its number
    // finds it, it is scheduled. `also` runs in the same lcore task, after, with the turn's TSC.
    void add(RunningQp& q, const Qp& qp, const std::function<void(std::uint64_t)>& also = {});
    // The QPs stop: off the table, the scheduler and (a client's last QP here) the doorbell
    // watch, all in one lcore task; `also` runs in it for each, before. Afterwards the lcore no
    // longer touches them. Gives the heap's free pages back when many QPs went.
    void remove(std::span<RunningQp* const> qs, const std::function<void(RunningQp&)>& also = {});

    // --- the lcore ---
    // The running QP with number `qpn`, or nullptr.
    RunningQp* find(std::uint32_t qpn) const {
        RunningQp* q = (*by_slot_)[qpn & (kQpnSlots - 1)];
        return q != nullptr && q->qpn() == qpn ? q : nullptr;
    }
    // Something for the QP: it runs on this turn or the next.
    void wake(RunningQp& q) { sched_.wake(q); }
    // The doorbells of its clients, then the QPs with work; true when any of it did something.
    bool poll(std::uint64_t now_tsc);
    std::uint64_t ns(std::uint64_t tsc) const {
        return static_cast<std::uint64_t>(static_cast<double>(tsc) * ns_per_tsc_);
    }

    const RunnerCounters& counters() const { return counters_; }
    const SchedCounters& sched_counters() const { return sched_.counters(); }
    // doorbells, doorbells_stray and the scheduler's counters, by name.
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const;

    static constexpr std::uint32_t kQpnSlots = 1u << 14;  // as many as QP number slots

  private:
    // The doorbells of one client with QPs running here: made and counted by the control
    // thread, read by the lcore through its list.
    struct DoorbellWatch {
        shm::Doorbells* area = nullptr;
        std::uint32_t qps = 0;  // control thread only
        DoorbellWatch* prev = nullptr;
        DoorbellWatch* next = nullptr;
    };
    void ring_doorbells(DoorbellWatch& w);
    void link(DoorbellWatch* w);
    void unlink(DoorbellWatch* w);

    LcoreTasks& tasks_;
    const double ns_per_tsc_;
    RunnerCounters counters_;
    std::unique_ptr<std::array<RunningQp*, kQpnSlots>> by_slot_;         // lcore only
    QpScheduler sched_;                                                  // lcore only
    DoorbellWatch* watching_ = nullptr;                                  // lcore: the watches' list
    std::map<shm::Doorbells*, std::unique_ptr<DoorbellWatch>> watches_;  // control thread
    // Control thread: QPs running here, and the most since memory was last given back.
    std::uint32_t running_ = 0, peak_ = 0;
};

}  // namespace snic::daemon
