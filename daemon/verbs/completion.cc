#include "daemon/verbs/completion.h"

#include <infiniband/verbs.h>

#include <atomic>

#include "daemon/verbs/client_memory.h"
#include "proto/verbs/wr.h"

namespace snic::daemon {

namespace {

// Takes the CQ's arm if this completion satisfies it (single producer: the check and
// the exchange cannot race with another CQE; the client only ever sets the word).
bool take_arm(shm::CqControl& control, bool solicited) {
    std::atomic_ref<std::uint32_t> arm(control.arm);
    const std::uint32_t a = arm.load(std::memory_order_acquire);
    if (a == shm::kArmNext || (a == shm::kArmSolicited && solicited))
        return arm.exchange(0, std::memory_order_acq_rel) != 0;
    return false;
}

}  // namespace

bool post_cqe(Cq& cq, const shm::Cqe& cqe, bool solicited) {
    if (!cq.ring->try_push(cqe)) {
        std::atomic_ref<std::uint32_t>(cq.control->overflow).store(1, std::memory_order_release);
        return false;
    }
    // The CQE's seq is stored; now load the arm. The client stores the arm, then loads the
    // next CQE's seq when it polls: a full fence on each side (libsnic has its own) makes
    // sure one of us sees the other, so that no CQE is left without an event (lost wakeup).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // An unsuccessful completion wakes a CQ armed for solicited completions too.
    if (!take_arm(*cq.control, solicited || cqe.status != IBV_WC_SUCCESS)) return true;
    if (Channel* ch = cq.channel.get()) {
        if (ch->ring->try_push(cq.handle)) notify(ch->notify.get());
    }
    return true;
}

bool AsyncEvents::post(std::uint32_t type, std::uint32_t handle) {
    if (!ring || !ring->try_push(shm::AsyncEvent{type, handle})) return false;
    daemon::notify(notify.get());
    return true;
}

void Srq::check_limit(AsyncEvents* to) {
    std::atomic_ref<std::uint32_t> armed(limit);
    std::uint32_t at = armed.load(std::memory_order_acquire);
    if (at == 0 || ring->size(at) >= at) return;  // reads at most `at` seqs
    // Disarmed whether or not the event fits (the client re-arms after reading it); a
    // modify_srq that re-armed meanwhile wins.
    if (armed.compare_exchange_strong(at, 0, std::memory_order_acq_rel) && to != nullptr)
        to->post(IBV_EVENT_SRQ_LIMIT_REACHED, handle);
}

namespace {

void publish_done(std::uint32_t& mine, std::uint32_t& shared, std::uint32_t done) {
    if (done == mine) return;
    mine = done;
    std::atomic_ref<std::uint32_t>(shared).store(done, std::memory_order_release);
}

void publish_recv(Qp& qp) {
    shm::publish_recv_counters(qp.control->recv, qp.recv_seq, qp.recv_taken, qp.recv_completed);
    if (qp.rq) {
        const auto held = static_cast<std::uint32_t>(qp.recv_taken - qp.recv_completed);
        publish_done(qp.rq_done, qp.control->rq_done, qp.rq->consumed() - held);
    }
}

}  // namespace

void note_send_held(Qp& qp, std::uint32_t held) {
    if (qp.sq) publish_done(qp.sq_done, qp.control->sq_done, qp.sq->consumed() - held);
}

void note_recv_taken(Qp& qp) {
    ++qp.recv_taken;
    publish_recv(qp);
}

void note_recv_completed(Qp& qp) {
    ++qp.recv_completed;
    publish_recv(qp);
}

void note_recv_flushed(Qp& qp) {
    ++qp.recv_taken;
    ++qp.recv_completed;
    publish_recv(qp);
}

void note_last_wqe(Qp& qp) {
    if (!qp.srq || qp.events == nullptr || qp.last_wqe_told.exchange(true)) return;
    qp.events->post(IBV_EVENT_QP_LAST_WQE_REACHED, qp.handle);
}

void reset_recv_counters(Qp& qp) {
    qp.recv_taken = qp.recv_completed = 0;
    publish_recv(qp);
}

std::uint32_t flush_budget(const Qp& qp) {
    std::uint32_t n = 1;
    if (qp.sq) n = std::max(n, qp.sq->capacity());
    if (qp.rq) n = std::max(n, qp.rq->capacity());
    return n;
}

FlushResult flush_qp(Qp& qp) {
    FlushResult r;
    if (qp.sq) {
        r.flushed += drain_bounded(*qp.sq, [&](const shm::SendWqe& w) {
            shm::Cqe c{};
            c.wr_id = w.wr_id;
            c.status = IBV_WC_WR_FLUSH_ERR;
            c.opcode = static_cast<std::uint8_t>(verbs::send_wc_opcode(w.opcode));
            c.qp_num = qp.qpn.get();
            if (!post_cqe(*qp.send_cq.get(), c, true)) r.send_cq_overflow = true;
        });
        note_send_held(qp, 0);
    }
    if (qp.rq) {
        r.flushed += drain_bounded(*qp.rq, [&](const shm::RecvWqe& w) {
            shm::Cqe c{};
            c.wr_id = w.wr_id;
            c.status = IBV_WC_WR_FLUSH_ERR;
            c.opcode = IBV_WC_RECV;
            c.qp_num = qp.qpn.get();
            note_recv_flushed(qp);
            if (!post_cqe(*qp.recv_cq.get(), c, true)) r.recv_cq_overflow = true;
        });
    }
    return r;
}

}  // namespace snic::daemon
