// Completions and events towards a client: CQEs into a CQ's ring (with its arming and its
// completion channel), async events (AsyncEvents::post, session.h), and the flush of a QP's
// queues when it enters the error state without an engine. All run on the lcore of the
// session's port (the control thread reaches it through Transport::run), or on the control
// thread for a port without a transport.
#pragma once

#include <cstdint>

#include "daemon/verbs/session.h"
#include "shm/wqe.h"

namespace snic::daemon {

// Posts `cqe` to `cq`. When the CQ is armed for it (any completion, or a solicited
// or unsuccessful one for IBV_CQ_SOLICITED), disarms it, queues its handle on the
// completion channel and signals the channel's socket. Returns false when the ring
// was full: the CQE is lost and the CQ marked overflowed (the caller raises CQ_ERR).
bool post_cqe(Cq& cq, const shm::Cqe& cqe, bool solicited);

// Pops the entries waiting in `ring`, at most one ring's capacity of them, calling fn(entry)
// on each (copied out: read once, trusted never); returns how many. The bound is what a
// client that keeps refilling its ring while the daemon drains it can cost the daemon.
template <class T, class Fn>
std::uint32_t drain_bounded(shm::RingConsumer<T>& ring, Fn&& fn) {
    T entry;
    std::uint32_t n = 0;
    while (n < ring.capacity() && ring.try_pop(entry)) {
        fn(entry);
        ++n;
    }
    return n;
}

// The most WRs the QP's engine flushes from each of its queues per call (its configs'
// flush_budget): the larger of its rings' capacities, the bound drain_bounded keeps.
std::uint32_t flush_budget(const Qp& qp);

// The QP's receive counters (shm::QpRecvCounters, what snic_query_qp_recv reads): a receive
// WQE taken for the QP, a receive completion made for it, both at once (a WQE flushed from the
// QP's own RQ), or both back to 0 (the QP reset). Each publishes the new pair at once.
void note_recv_taken(Qp& qp);
void note_recv_completed(Qp& qp);
void note_recv_flushed(Qp& qp);
void reset_recv_counters(Qp& qp);

// The QP's done indices (shm::QpControl::sq_done and rq_done), which tell libsnic what to
// flush if snicd dies. Send: every WQE taken from the SQ is done but the `held` ones its
// engine still holds (each engine completes its WRs in order). Receive: published with the
// receive counters above (a WQE taken from the QP's own RQ is done once its completion is
// counted). Stored only when they move.
void note_send_held(Qp& qp, std::uint32_t held);

// The QP entered ERR: for a QP on an SRQ, no WQE will be taken from the SRQ for it any more
// (IBA 11.6.3.2), and IBV_EVENT_QP_LAST_WQE_REACHED says so, once per stay in ERR. On the lcore.
void note_last_wqe(Qp& qp);

struct FlushResult {
    std::uint32_t flushed = 0;
    bool send_cq_overflow = false;
    bool recv_cq_overflow = false;
};

// Completes every WQE waiting in the QP's send queue and receive queue (not its
// SRQ's: those belong to the SRQ) with IBV_WC_WR_FLUSH_ERR, in posting order; at most one
// capacity of each ring (drain_bounded).
FlushResult flush_qp(Qp& qp);

}  // namespace snic::daemon
