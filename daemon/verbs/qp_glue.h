// The glue between a QP's engine and the client, shared by every transport: send WQEs copied
// out of the client's send ring and checked, receive WQEs from its receive ring or SRQ, CQEs
// into its CQs, memory access through the key table (daemon/verbs/memory_keys.h), and the QP's
// asynchronous events. A transport's QP holds one QpGlue and adds only its wire.
//
// Runs on the lcore of the QP's port, the only producer of the QP's CQEs and of its session's
// async events, except failed(), read by the control thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "daemon/verbs/memory_keys.h"
#include "proto/verbs/qp_memory.h"
#include "shm/wqe.h"

namespace snic::daemon {

class Mapping;
class NameTable;
struct Cq;
struct Qp;

// A send WQE copied out of the client's ring, checked, as an engine takes it. A WQE that
// breaks the rules (opcode, SGE count, inline length against the QP's caps) becomes a local
// operation that fails (Local Invalidate of key 0), so the QP errors in order.
verbs::SendWr to_send_wr(const shm::SendWqe& w, const Qp& qp);
// The same, written over `out` in place (an engine's slot): every field but the SGEs, the
// inline bytes, the bind and the UD destination, of which only those the WR uses.
void to_send_wr(const shm::SendWqe& w, const Qp& qp, verbs::SendWr& out);
// A receive WQE copied out of the RQ or SRQ ring. One with more SGEs than the QP may have
// (or than any WQE may have) gets none: a message to it is too long.
verbs::RecvWr to_recv_wr(const shm::RecvWqe& w, std::uint32_t max_sge);
void to_recv_wr(const shm::RecvWqe& w, std::uint32_t max_sge, verbs::RecvWr& out);  // in place
shm::Cqe to_cqe(const verbs::Completion& c);

// A context's doorbells in its memfd (mapped and checked at least `l.bytes` long, so they lie
// within the mapping), or nullptr when the mapping is too short for them.
shm::Doorbells* doorbells_in(const Mapping& m, const shm::ContextLayout& l);

class QpGlue final : public verbs::QpMemory, public verbs::QpQueues {
  public:
    QpGlue(Qp& qp, const NameTable& keys);

    Qp& qp() const { return qp_; }

    // The engine is in the error state (see note_failed). Acquire; any thread.
    bool failed() const { return failed_.load(std::memory_order_acquire); }

    // From RTS on, the send queue is served (in RTR an engine only responds); in SQD it is
    // not: no new WR is taken while the ones held complete.
    void set_sending() { sending_ = true, draining_ = false; }
    void set_draining(bool notify) { sending_ = false, draining_ = true, drain_notify_ = notify; }
    // After each engine call with the WRs the engine still holds: a draining QP holding none
    // is drained, and says so once (IBV_EVENT_SQ_DRAINED, when asked for).
    // The held count also tells the client which send WQEs are done (QpControl::sq_done).
    void note_held(std::uint32_t held);

    // The QP goes to sleep: tells the client (QpControl::sleeping) that it must ring the QP's
    // doorbell after a post, then, after a full fence, looks at the send queue again. False
    // (the client told the QP is awake) when WQEs are waiting.
    bool try_sleep();
    // The QP is awake again: the client's posts need no doorbell.
    void awake();

    // The engine entered the error state. Publishes ERR (QpControl.state for libsnic, failed()
    // for the control thread) before any error completion can reach the client, once. When
    // the engine failed by itself (`requested` false: retries exhausted, a fatal NAK, a local
    // error), raises IBV_EVENT_QP_FATAL. For a QP on an SRQ, QP_LAST_WQE_REACHED (no WQE will
    // be taken from the SRQ for it any more), once per stay in ERR (note_last_wqe), also when
    // `requested`: Modify QP to ERR, or on iWARP the peer's orderly close.
    void note_failed(bool requested);

    // verbs::QpMemory
    std::uint8_t* local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len,
                        bool write) override;
    verbs::RemoteRegion remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                               verbs::RemoteNeed need) override;
    bool invalidate(std::uint32_t rkey) override;
    verbs::WcStatus local_invalidate(std::uint32_t key) override;
    verbs::WcStatus bind_mw(const verbs::MwBind& bind) override;

    // verbs::QpQueues
    // Whether the client posted send WQEs the engine has not taken (from RTS on).
    bool send_ready() override;
    bool pop_send(verbs::SendWr& out) override;
    bool pop_recv(verbs::RecvWr& out) override;
    void complete_send(const verbs::Completion& c) override;
    void complete_recv(const verbs::Completion& c) override;

  private:
    void drained();
    void complete(Cq& cq, std::uint32_t cq_handle, const verbs::Completion& c);

    void publish_sleeping(bool asleep);

    Qp& qp_;
    const KeyUser user_;  // the QP's PD and number, fixed for its life
    bool sending_ = false;
    bool draining_ = false;
    bool drain_notify_ = false;
    bool published_asleep_ = false;  // what QpControl::sleeping says (never read back)
    std::atomic<bool> failed_{false};
};

}  // namespace snic::daemon
