// The glue every transport's QP shares, on the lcore of the QP's port: no allocation, no
// syscalls (but a notification socket's signal), no locks, no logs.
#include "daemon/verbs/qp_glue.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/completion.h"
#include "daemon/verbs/session.h"

namespace snic::daemon {

// Engines speak libibverbs' numbers, as the shared-memory ABI does: one cast apart.
static_assert(static_cast<int>(verbs::WrOp::rdma_write) ==
              static_cast<int>(shm::WrOpcode::rdma_write));
static_assert(static_cast<int>(verbs::WrOp::rdma_write_imm) ==
              static_cast<int>(shm::WrOpcode::rdma_write_imm));
static_assert(static_cast<int>(verbs::WrOp::send) == static_cast<int>(shm::WrOpcode::send));
static_assert(static_cast<int>(verbs::WrOp::send_imm) == static_cast<int>(shm::WrOpcode::send_imm));
static_assert(static_cast<int>(verbs::WrOp::rdma_read) ==
              static_cast<int>(shm::WrOpcode::rdma_read));
static_assert(static_cast<int>(verbs::WrOp::atomic_cmp_swp) ==
              static_cast<int>(shm::WrOpcode::atomic_cmp_swp));
static_assert(static_cast<int>(verbs::WrOp::atomic_fetch_add) ==
              static_cast<int>(shm::WrOpcode::atomic_fetch_add));
static_assert(static_cast<int>(verbs::WrOp::local_inv) ==
              static_cast<int>(shm::WrOpcode::local_inv));
static_assert(static_cast<int>(verbs::WrOp::bind_mw) == static_cast<int>(shm::WrOpcode::bind_mw));
static_assert(static_cast<int>(verbs::WrOp::send_inv) == static_cast<int>(shm::WrOpcode::send_inv));
static_assert(static_cast<int>(verbs::WcStatus::wr_flush_err) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(verbs::WcStatus::rnr_retry_exc_err) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<int>(verbs::WcOpcode::recv_rdma_with_imm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(verbs::kWcWithImm == IBV_WC_WITH_IMM && verbs::kWcWithInv == IBV_WC_WITH_INV);
static_assert(verbs::kMaxSge == shm::kMaxSge && verbs::kMaxInline == shm::kMaxInline);

void to_send_wr(const shm::SendWqe& w, const Qp& qp, verbs::SendWr& wr) {
    // Every field but the two unions is written; of those, only what the WR uses (the slot
    // a WR lands in keeps its last WR's bytes elsewhere, and nothing reads them).
    wr.wr_id = w.wr_id;
    wr.signaled = (w.flags & shm::kWqeSignaled) != 0 || qp.sq_sig_all != 0;
    wr.fence = (w.flags & shm::kWqeFence) != 0;
    wr.solicited = (w.flags & shm::kWqeSolicited) != 0;
    wr.inline_data = false;
    wr.remote_addr = 0;
    wr.rkey = 0;
    wr.compare_add = 0;
    wr.swap = 0;
    wr.num_sge = 0;
    wr.inline_len = 0;
    const bool valid_op = w.opcode < verbs::kWrOpCount;
    const bool inline_ok = (w.flags & shm::kWqeInline) == 0 ||
                           w.inline_length <= std::min(shm::kMaxInline, qp.cap.max_inline_data);
    const bool sge_ok = (w.flags & shm::kWqeInline) != 0 ||
                        w.num_sge <= std::min(shm::kMaxSge, qp.cap.max_send_sge);
    if (!valid_op || !inline_ok || !sge_ok) {
        wr.op = verbs::WrOp::local_inv;  // key 0: never valid
        wr.imm_or_rkey = 0;
        wr.signaled = true;
        return;
    }
    wr.op = static_cast<verbs::WrOp>(w.opcode);
    wr.imm_or_rkey = w.ex;
    switch (verbs::wr_op_kind(wr.op).kind) {
        case verbs::WrKind::write:
        case verbs::WrKind::read:
            wr.remote_addr = w.rdma.remote_addr;
            wr.rkey = w.rdma.rkey;
            break;
        case verbs::WrKind::atomic:
            wr.remote_addr = w.atomic.remote_addr;
            wr.rkey = w.ex;
            wr.compare_add = w.atomic.compare_add;
            wr.swap = w.atomic.swap;
            break;
        case verbs::WrKind::local:
            if (wr.op == verbs::WrOp::bind_mw)
                wr.bind = {w.bind.mw_handle, w.bind.new_rkey, w.bind.mr_lkey,
                           w.bind.access,    w.bind.addr,     w.bind_length};
            break;
        case verbs::WrKind::send:
            if (qp.type == verbs::QpType::ud) {
                std::memcpy(wr.ud.dgid.data(), w.ud.dgid, sizeof w.ud.dgid);
                wr.ud.remote_qpn = w.ud.remote_qpn;
                wr.ud.remote_qkey = w.ud.remote_qkey;
            }
            break;
    }
    if ((w.flags & shm::kWqeInline) != 0) {
        wr.inline_data = true;
        wr.inline_len = w.inline_length;
        std::memcpy(wr.inline_bytes.data(), w.inline_data, w.inline_length);
    } else {
        wr.num_sge = w.num_sge;
        for (std::uint32_t i = 0; i < w.num_sge; ++i)
            wr.sge[i] = {w.sge[i].addr, w.sge[i].length, w.sge[i].lkey};
    }
}

verbs::SendWr to_send_wr(const shm::SendWqe& w, const Qp& qp) {
    verbs::SendWr wr;
    to_send_wr(w, qp, wr);
    return wr;
}

void to_recv_wr(const shm::RecvWqe& w, std::uint32_t max_sge, verbs::RecvWr& out) {
    out.wr_id = w.wr_id;
    out.num_sge = w.num_sge <= std::min(shm::kMaxSge, max_sge) ? w.num_sge : 0;
    for (std::uint32_t i = 0; i < out.num_sge; ++i)
        out.sge[i] = {w.sge[i].addr, w.sge[i].length, w.sge[i].lkey};
}

verbs::RecvWr to_recv_wr(const shm::RecvWqe& w, std::uint32_t max_sge) {
    verbs::RecvWr out;
    to_recv_wr(w, max_sge, out);
    return out;
}

shm::Cqe to_cqe(const verbs::Completion& c) {
    shm::Cqe e{};
    e.wr_id = c.wr_id;
    e.status = static_cast<std::uint8_t>(c.status);
    e.opcode = static_cast<std::uint8_t>(c.opcode);
    e.wc_flags = static_cast<std::uint8_t>(c.wc_flags() | (c.solicited ? shm::kCqeSolicited : 0));
    e.sl = c.sl;
    e.byte_len = c.byte_len;
    e.ex = c.imm_or_rkey;
    e.qp_num = c.qp_num;
    e.src_qp = c.src_qp;
    e.pkey_index = c.pkey_index;
    return e;
}

shm::Doorbells* doorbells_in(const Mapping& m, const shm::ContextLayout& l) {
    if (m.size() < l.doorbells + sizeof(shm::Doorbells) || l.doorbells % shm::kRingCacheLine != 0)
        return nullptr;
    // The client's memory holds this trivially copyable, implicit-lifetime structure; every
    // access to it is atomic.
    return std::launder(reinterpret_cast<shm::Doorbells*>(m.data() + l.doorbells));
}

QpGlue::QpGlue(Qp& qp, const NameTable& keys) : qp_(qp), user_{keys, qp.pd.get(), qp.qpn.get()} {
    publish_sleeping(false);  // whatever an earlier engine of the QP left there
}

// ---- memory -------------------------------------------------------------------------------

std::uint8_t* QpGlue::local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len, bool write) {
    return local_access(user_, lkey, addr, len, write);
}

verbs::RemoteRegion QpGlue::remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                                   verbs::RemoteNeed need) {
    return remote_access(user_, rkey, addr, len, need);
}

bool QpGlue::invalidate(std::uint32_t rkey) {
    return invalidate_remote(user_, rkey);
}

verbs::WcStatus QpGlue::local_invalidate(std::uint32_t key) {
    return invalidate_local(user_, key);
}

verbs::WcStatus QpGlue::bind_mw(const verbs::MwBind& bind) {
    return bind_window(user_, bind);
}

// ---- state --------------------------------------------------------------------------------

void QpGlue::note_failed(bool requested) {
    if (failed_.load(std::memory_order_relaxed)) return;
    failed_.store(true, std::memory_order_release);
    // The client's view (libsnic's in_error()): the QP is in ERR.
    std::atomic_ref<std::uint32_t>(qp_.control->state)
        .store(static_cast<std::uint32_t>(verbs::QpState::err), std::memory_order_release);
    if (!requested && qp_.events != nullptr) qp_.events->post(IBV_EVENT_QP_FATAL, qp_.handle);
    note_last_wqe(qp_);
}

void QpGlue::drained() {
    draining_ = false;
    if (drain_notify_ && qp_.events != nullptr) qp_.events->post(IBV_EVENT_SQ_DRAINED, qp_.handle);
}

// ---- sleeping and waking ------------------------------------------------------------------

void QpGlue::publish_sleeping(bool asleep) {
    published_asleep_ = asleep;
    std::atomic_ref<std::uint32_t>(qp_.control->sleeping)
        .store(asleep ? 1 : 0, std::memory_order_relaxed);
}

bool QpGlue::send_ready() {
    return sending_ && qp_.sq && qp_.sq->ready();
}

bool QpGlue::try_sleep() {
    if (send_ready()) return false;
    publish_sleeping(true);
    // Against the client's post: it stores the WQE's seq, fences and reads `sleeping`; we
    // store `sleeping`, fence and read the next slot's seq. One of us sees the other.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (!send_ready()) return true;
    publish_sleeping(false);
    return false;
}

void QpGlue::awake() {
    if (published_asleep_) publish_sleeping(false);
}

// ---- queues -------------------------------------------------------------------------------

void QpGlue::note_held(std::uint32_t held) {
    note_send_held(qp_, held);
    if (draining_ && held == 0) drained();
}

bool QpGlue::pop_send(verbs::SendWr& out) {
    shm::SendWqe w;
    if (!sending_ || !qp_.sq || !qp_.sq->try_pop(w)) return false;
    to_send_wr(w, qp_, out);
    return true;
}

bool QpGlue::pop_recv(verbs::RecvWr& out) {
    shm::RecvWqe w;
    if (Srq* srq = qp_.srq.get()) {
        if (!srq->ring->try_pop(w)) return false;
        to_recv_wr(w, srq->max_sge, out);
        note_recv_taken(qp_);
        srq->check_limit(qp_.events);
        return true;
    }
    if (!qp_.rq || !qp_.rq->try_pop(w)) return false;
    to_recv_wr(w, qp_.cap.max_recv_sge, out);
    note_recv_taken(qp_);
    return true;
}

// A QP completes a WR in error only on its way to ERR: that is published before the client
// can see the completion (and ask the QP's state).
void QpGlue::complete(Cq& cq, std::uint32_t cq_handle, const verbs::Completion& c) {
    if (c.status != verbs::WcStatus::success) note_failed(false);
    if (!post_cqe(cq, to_cqe(c), c.solicited) && qp_.events != nullptr)
        qp_.events->post(IBV_EVENT_CQ_ERR, cq_handle);
}

void QpGlue::complete_send(const verbs::Completion& c) {
    complete(*qp_.send_cq.get(), qp_.send_cq_handle, c);
}

void QpGlue::complete_recv(const verbs::Completion& c) {
    note_recv_completed(qp_);
    complete(*qp_.recv_cq.get(), qp_.recv_cq_handle, c);
}

}  // namespace snic::daemon
