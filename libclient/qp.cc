// Queue pairs: create/modify/query/destroy through snicd, and the post path:
// ibv_post_send / ibv_post_recv, ibv_bind_mw and the ibv_wr_* API validate
// each work request and push SendWqe / RecvWqe into the QP's rings. The rings
// live in the QP's memfd (QpControl, then the SQ, then the RQ unless the QP
// uses an SRQ); one poster at a time per ring, under the ring's spinlock.
// After pushing send WQEs, a post rings the QP's doorbell if snicd said the QP
// sleeps (QpControl::sleeping); a busy QP's send queue is watched by snicd.
#include <malloc.h>

#include <algorithm>
#include <cstring>

#include "libclient/internal.h"
#include "proto/verbs/qp_state.h"

namespace snic::client {

namespace {

// Which opcodes each QP type may post (bit = ibv_wr_opcode).
constexpr std::uint32_t op_bit(ibv_wr_opcode op) {
    return 1u << op;
}
constexpr std::uint32_t kRcOps = op_bit(IBV_WR_RDMA_WRITE) | op_bit(IBV_WR_RDMA_WRITE_WITH_IMM) |
                                 op_bit(IBV_WR_SEND) | op_bit(IBV_WR_SEND_WITH_IMM) |
                                 op_bit(IBV_WR_RDMA_READ) | op_bit(IBV_WR_ATOMIC_CMP_AND_SWP) |
                                 op_bit(IBV_WR_ATOMIC_FETCH_AND_ADD) | op_bit(IBV_WR_LOCAL_INV) |
                                 op_bit(IBV_WR_BIND_MW) | op_bit(IBV_WR_SEND_WITH_INV);
// UC: no READ, atomics or Send with Invalidate (IBA has no UC opcode for them).
constexpr std::uint32_t kUcOps = op_bit(IBV_WR_RDMA_WRITE) | op_bit(IBV_WR_RDMA_WRITE_WITH_IMM) |
                                 op_bit(IBV_WR_SEND) | op_bit(IBV_WR_SEND_WITH_IMM) |
                                 op_bit(IBV_WR_LOCAL_INV) | op_bit(IBV_WR_BIND_MW);
constexpr std::uint32_t kUdOps = op_bit(IBV_WR_SEND) | op_bit(IBV_WR_SEND_WITH_IMM);
// Opcodes that may carry inline data.
constexpr std::uint32_t kInlineOps = op_bit(IBV_WR_RDMA_WRITE) |
                                     op_bit(IBV_WR_RDMA_WRITE_WITH_IMM) | op_bit(IBV_WR_SEND) |
                                     op_bit(IBV_WR_SEND_WITH_IMM) | op_bit(IBV_WR_SEND_WITH_INV);
// The ibv_wr_* operations snic supports (IBV_QP_EX_WITH_*).
constexpr std::uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
    IBV_QP_EX_WITH_SEND_WITH_INV;

std::uint64_t send_op_flag(ibv_wr_opcode op) {
    switch (op) {
        case IBV_WR_RDMA_WRITE:
            return IBV_QP_EX_WITH_RDMA_WRITE;
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            return IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
        case IBV_WR_SEND:
            return IBV_QP_EX_WITH_SEND;
        case IBV_WR_SEND_WITH_IMM:
            return IBV_QP_EX_WITH_SEND_WITH_IMM;
        case IBV_WR_RDMA_READ:
            return IBV_QP_EX_WITH_RDMA_READ;
        case IBV_WR_ATOMIC_CMP_AND_SWP:
            return IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP;
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            return IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
        case IBV_WR_LOCAL_INV:
            return IBV_QP_EX_WITH_LOCAL_INV;
        case IBV_WR_BIND_MW:
            return IBV_QP_EX_WITH_BIND_MW;
        case IBV_WR_SEND_WITH_INV:
            return IBV_QP_EX_WITH_SEND_WITH_INV;
        default:
            return 0;
    }
}

std::uint32_t allowed_ops(std::uint32_t qp_type) {
    switch (qp_type) {
        case IBV_QPT_RC:
            return kRcOps;
        case IBV_QPT_UC:
            return kUcOps;
        case IBV_QPT_UD:
            return kUdOps;
        default:
            return 0;
    }
}
std::uint32_t allowed_ops(const Qp* q) {
    return allowed_ops(q->qpx.qp_base.qp_type);
}
// The ibv_wr_* operations (IBV_QP_EX_WITH_*) a QP of `qp_type` may be created with.
std::uint64_t allowed_send_ops(std::uint32_t qp_type) {
    std::uint64_t flags = 0;
    for (std::uint32_t op = 0; op < 32; ++op)
        if ((allowed_ops(qp_type) & (1u << op)) != 0)
            flags |= send_op_flag(static_cast<ibv_wr_opcode>(op));
    return flags;
}

ibv_qp_state load_state(const Qp* q) {
    return std::atomic_ref<ibv_qp_state>(const_cast<Qp*>(q)->qpx.qp_base.state)
        .load(std::memory_order_acquire);
}
void store_state(Qp* q, std::uint32_t s) {
    std::atomic_ref<ibv_qp_state>(q->qpx.qp_base.state)
        .store(static_cast<ibv_qp_state>(s), std::memory_order_release);
}
bool in_error(const Qp* q) {
    return std::atomic_ref<std::uint32_t>(q->control->state).load(std::memory_order_relaxed) ==
           IBV_QPS_ERR;
}
// Verbs: sends may be posted in RTS, SQD, SQE and ERR; receives in every state but RESET.
bool send_state_ok(const Qp* q) {
    const ibv_qp_state s = load_state(q);
    return s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE || s == IBV_QPS_ERR ||
           (s != IBV_QPS_RESET && in_error(q));
}
bool recv_state_ok(const Qp* q) {
    return load_state(q) != IBV_QPS_RESET;
}

// After send WQEs were pushed (each one's seq stored): if snicd no longer watches the QP's send
// queue, ring its doorbell. The fence keeps the load of `sleeping` after the stores of the
// seqs, as snicd keeps its load of the next seq after its store of `sleeping`.
void send_posted(const Qp* q) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (std::atomic_ref<std::uint32_t>(q->control->sleeping).load(std::memory_order_relaxed) != 0 &&
        q->doorbells != nullptr)
        shm::ring_doorbell(*q->doorbells, q->doorbell);
}

void clear_header(shm::SendWqe* w) {
    std::memset(static_cast<void*>(w), 0, offsetof(shm::SendWqe, sge));
}

// The send flags snic implements; their bits equal the WQE's (shm::kWqe*).
constexpr unsigned kSendFlags =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
static_assert(IBV_SEND_FENCE == shm::kWqeFence && IBV_SEND_SIGNALED == shm::kWqeSignaled &&
              IBV_SEND_SOLICITED == shm::kWqeSolicited && IBV_SEND_INLINE == shm::kWqeInline);

std::uint8_t wqe_flags(const Qp* q, unsigned send_flags) {
    std::uint8_t f = static_cast<std::uint8_t>(send_flags & kSendFlags);
    if (q->sq_sig_all) f |= shm::kWqeSignaled;
    return f;
}

// Checks a memory window bind (both type 1 through ibv_bind_mw and type 2
// through a bind WR) and fills the WQE's bind part.
int fill_bind(const Qp* q, ibv_mw* mw, std::uint32_t new_rkey, const ibv_mw_bind_info& info,
              shm::SendWqe* w) {
    if (mw == nullptr || mw->context != q->qpx.qp_base.context || mw->pd != q->qpx.qp_base.pd)
        return EINVAL;
    if (info.length != 0) {
        if (info.mr == nullptr || info.mr->pd != mw->pd) return EINVAL;
        const Mr* mr = to_mr(info.mr);
        if ((mr->access & IBV_ACCESS_MW_BIND) == 0) return EINVAL;
        if (info.addr < mr->iova || info.length > mr->mr.length ||
            info.addr - mr->iova > mr->mr.length - info.length)
            return EINVAL;
        if ((info.mw_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
            (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0)
            return EINVAL;
    }
    w->opcode = static_cast<std::uint8_t>(shm::WrOpcode::bind_mw);
    w->bind.mw_handle = mw->handle;
    w->bind.new_rkey = new_rkey;
    w->bind.mr_lkey = info.mr != nullptr && info.length != 0 ? info.mr->lkey : 0;
    w->bind.access = info.mw_access_flags;
    w->bind.addr = info.addr;
    w->bind_length = info.length;
    return 0;
}

// Fills the WQE's UD part: the address handle's destination, the remote QP and Q_Key.
int fill_ud(const Qp* q, ibv_ah* ah, std::uint32_t remote_qpn, std::uint32_t remote_qkey,
            shm::SendWqe* w) {
    if (ah == nullptr || ah->context != q->qpx.qp_base.context || ah->pd != q->qpx.qp_base.pd ||
        remote_qpn > 0xffffff)
        return EINVAL;
    std::memcpy(w->ud.dgid, to_ah(ah)->attr.grh.dgid.raw, sizeof w->ud.dgid);
    w->ud.remote_qpn = remote_qpn;
    w->ud.remote_qkey = remote_qkey;
    return 0;
}

// Builds the SendWqe of one ibv_send_wr; 0 or EINVAL.
int build_send(const Qp* q, const ibv_send_wr* wr, shm::SendWqe* w) {
    clear_header(w);
    // Copied as a number: an application may pass any value in the enum field.
    std::uint32_t raw_op;
    std::memcpy(&raw_op, &wr->opcode, sizeof raw_op);
    if (raw_op > IBV_WR_SEND_WITH_INV) return EINVAL;
    const auto op = static_cast<ibv_wr_opcode>(raw_op);
    if ((allowed_ops(q) & op_bit(op)) == 0) return EINVAL;
    if ((wr->send_flags & ~kSendFlags) != 0) return EINVAL;
    w->wr_id = wr->wr_id;
    w->opcode = static_cast<std::uint8_t>(op);
    w->flags = wqe_flags(q, wr->send_flags);
    if (wr->num_sge < 0 || (wr->num_sge > 0 && wr->sg_list == nullptr)) return EINVAL;
    const auto nsge = static_cast<std::uint32_t>(wr->num_sge);

    switch (op) {
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            w->ex = wr->imm_data;
            break;
        case IBV_WR_SEND_WITH_INV:
        case IBV_WR_LOCAL_INV:
            w->ex = wr->invalidate_rkey;
            break;
        default:
            break;
    }
    if (q->qpx.qp_base.qp_type == IBV_QPT_UD) {
        if (const int err =
                fill_ud(q, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey, w);
            err != 0)
            return err;
    }
    switch (op) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
        case IBV_WR_RDMA_READ:
            w->rdma.remote_addr = wr->wr.rdma.remote_addr;
            w->rdma.rkey = wr->wr.rdma.rkey;
            break;
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            w->atomic.remote_addr = wr->wr.atomic.remote_addr;
            w->ex = wr->wr.atomic.rkey;
            w->atomic.compare_add = wr->wr.atomic.compare_add;
            w->atomic.swap = wr->wr.atomic.swap;
            if (nsge != 1 || wr->sg_list[0].length != 8) return EINVAL;
            break;
        case IBV_WR_BIND_MW: {
            if (wr->bind_mw.mw == nullptr || wr->bind_mw.mw->type != IBV_MW_TYPE_2) return EINVAL;
            if (((wr->bind_mw.rkey ^ wr->bind_mw.mw->rkey) & ~0xffu) != 0) return EINVAL;
            if (const int err =
                    fill_bind(q, wr->bind_mw.mw, wr->bind_mw.rkey, wr->bind_mw.bind_info, w);
                err != 0)
                return err;
            w->flags &= static_cast<std::uint8_t>(~shm::kWqeInline);
            return 0;
        }
        case IBV_WR_LOCAL_INV:
            w->flags &= static_cast<std::uint8_t>(~shm::kWqeInline);
            return 0;
        default:
            break;
    }

    if ((wr->send_flags & IBV_SEND_INLINE) != 0 && (kInlineOps & op_bit(op)) != 0) {
        std::size_t total = 0;
        for (std::uint32_t i = 0; i < nsge; ++i) total += wr->sg_list[i].length;
        if (total > q->cap.max_inline_data || total > shm::kMaxInline) return EINVAL;
        std::size_t off = 0;
        for (std::uint32_t i = 0; i < nsge; ++i) {
            const ibv_sge& s = wr->sg_list[i];
            if (s.length != 0)
                std::memcpy(w->inline_data + off, reinterpret_cast<const void*>(s.addr), s.length);
            off += s.length;
        }
        w->inline_length = static_cast<std::uint32_t>(total);
        return 0;
    }
    w->flags &= static_cast<std::uint8_t>(~shm::kWqeInline);
    const std::uint32_t max_sge =
        op == IBV_WR_RDMA_READ ? std::min(q->cap.max_send_sge, shm::kMaxSge) : q->cap.max_send_sge;
    if (nsge > max_sge || nsge > shm::kMaxSge) return EINVAL;
    w->num_sge = static_cast<std::uint8_t>(nsge);
    for (std::uint32_t i = 0; i < nsge; ++i)
        w->sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    return 0;
}

int build_recv(std::uint32_t max_sge, const ibv_recv_wr* wr, shm::RecvWqe* w) {
    if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > max_sge ||
        static_cast<std::uint32_t>(wr->num_sge) > shm::kMaxSge ||
        (wr->num_sge > 0 && wr->sg_list == nullptr))
        return EINVAL;
    w->wr_id = wr->wr_id;
    w->num_sge = static_cast<std::uint32_t>(wr->num_sge);
    for (int i = 0; i < wr->num_sge; ++i)
        w->sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    return 0;
}

// ---- the ibv_wr_* API -------------------------------------------------------------

// The WQE a wr_<op> call starts, or nullptr after recording why it cannot.
shm::SendWqe* stage(ibv_qp_ex* x, ibv_wr_opcode op) {
    Qp* q = to_qp(x);
    if (q->wr_error != 0) return nullptr;
    if ((allowed_ops(q) & op_bit(op)) == 0 || (q->send_ops & send_op_flag(op)) == 0) {
        q->wr_error = EINVAL;
        return nullptr;
    }
    if (q->nstaged >= q->sq->capacity()) {
        q->wr_error = ENOMEM;
        return nullptr;
    }
    if (q->nstaged == q->staged.size())
        q->staged.resize(std::min<std::size_t>(std::max<std::size_t>(8, q->staged.size() * 2),
                                               q->sq->capacity()));
    shm::SendWqe* w = &q->staged[q->nstaged++];
    clear_header(w);
    w->wr_id = x->wr_id;
    w->opcode = static_cast<std::uint8_t>(op);
    w->flags = static_cast<std::uint8_t>(wqe_flags(q, x->wr_flags) & ~shm::kWqeInline);
    if ((x->wr_flags & ~kSendFlags) != 0) q->wr_error = EINVAL;
    return w;
}

shm::SendWqe* last(ibv_qp_ex* x) {
    Qp* q = to_qp(x);
    if (q->wr_error != 0) return nullptr;
    if (q->nstaged == 0) {
        q->wr_error = EINVAL;
        return nullptr;
    }
    return &q->staged[q->nstaged - 1];
}

void wr_start(ibv_qp_ex* x) {
    Qp* q = to_qp(x);
    q->sq_lock.lock();
    q->nstaged = 0;
    q->wr_error = 0;
}

int wr_complete(ibv_qp_ex* x) {
    Qp* q = to_qp(x);
    int err = q->wr_error;
    if (err == 0 && daemon_dead(to_ctx(x->qp_base.context))) err = EIO;
    if (err == 0 && q->nstaged != 0 && !send_state_ok(q)) err = EINVAL;
    bool pushed = false;
    if (err == 0 && q->nstaged != 0) {
        if (q->sq->free_space() < q->nstaged) {
            err = ENOMEM;
        } else {
            q->sq->push_burst(std::span<const shm::SendWqe>(q->staged.data(), q->nstaged));
            pushed = true;
        }
    }
    q->nstaged = 0;
    q->wr_error = 0;
    q->sq_lock.unlock();
    if (pushed) send_posted(q);
    return err;
}

void wr_abort(ibv_qp_ex* x) {
    Qp* q = to_qp(x);
    q->nstaged = 0;
    q->wr_error = 0;
    q->sq_lock.unlock();
}

void wr_send(ibv_qp_ex* x) {
    stage(x, IBV_WR_SEND);
}

void wr_send_imm(ibv_qp_ex* x, __be32 imm) {
    if (shm::SendWqe* w = stage(x, IBV_WR_SEND_WITH_IMM)) w->ex = imm;
}

void wr_send_inv(ibv_qp_ex* x, std::uint32_t rkey) {
    if (shm::SendWqe* w = stage(x, IBV_WR_SEND_WITH_INV)) w->ex = rkey;
}

void wr_rdma(ibv_qp_ex* x, ibv_wr_opcode op, std::uint32_t rkey, std::uint64_t addr) {
    if (shm::SendWqe* w = stage(x, op)) {
        w->rdma.remote_addr = addr;
        w->rdma.rkey = rkey;
    }
}
void wr_rdma_write(ibv_qp_ex* x, std::uint32_t rkey, std::uint64_t addr) {
    wr_rdma(x, IBV_WR_RDMA_WRITE, rkey, addr);
}
void wr_rdma_write_imm(ibv_qp_ex* x, std::uint32_t rkey, std::uint64_t addr, __be32 imm) {
    wr_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
    if (shm::SendWqe* w = last(x)) w->ex = imm;
}
void wr_rdma_read(ibv_qp_ex* x, std::uint32_t rkey, std::uint64_t addr) {
    wr_rdma(x, IBV_WR_RDMA_READ, rkey, addr);
}

void wr_atomic(ibv_qp_ex* x, ibv_wr_opcode op, std::uint32_t rkey, std::uint64_t addr,
               std::uint64_t compare_add, std::uint64_t swap) {
    if (shm::SendWqe* w = stage(x, op)) {
        w->atomic.remote_addr = addr;
        w->ex = rkey;
        w->atomic.compare_add = compare_add;
        w->atomic.swap = swap;
    }
}
void wr_atomic_cmp_swp(ibv_qp_ex* x, std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                       std::uint64_t swap) {
    wr_atomic(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}
void wr_atomic_fetch_add(ibv_qp_ex* x, std::uint32_t rkey, std::uint64_t addr, std::uint64_t add) {
    wr_atomic(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

void wr_local_inv(ibv_qp_ex* x, std::uint32_t rkey) {
    if (shm::SendWqe* w = stage(x, IBV_WR_LOCAL_INV)) w->ex = rkey;
}

void wr_bind_mw(ibv_qp_ex* x, ibv_mw* mw, std::uint32_t rkey, const ibv_mw_bind_info* info) {
    Qp* q = to_qp(x);
    shm::SendWqe* w = stage(x, IBV_WR_BIND_MW);
    if (w == nullptr) return;
    if (mw == nullptr || info == nullptr || mw->type != IBV_MW_TYPE_2 ||
        ((rkey ^ mw->rkey) & ~0xffu) != 0) {
        q->wr_error = EINVAL;
        return;
    }
    if (const int err = fill_bind(q, mw, rkey, *info, w); err != 0) q->wr_error = err;
}

bool is_atomic(const shm::SendWqe* w) {
    return w->opcode == static_cast<std::uint8_t>(shm::WrOpcode::atomic_cmp_swp) ||
           w->opcode == static_cast<std::uint8_t>(shm::WrOpcode::atomic_fetch_add);
}
bool takes_data(const shm::SendWqe* w) {
    return w->opcode != static_cast<std::uint8_t>(shm::WrOpcode::bind_mw) &&
           w->opcode != static_cast<std::uint8_t>(shm::WrOpcode::local_inv);
}

void wr_set_sge(ibv_qp_ex* x, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) {
    const ibv_sge sge{addr, length, lkey};
    Qp* q = to_qp(x);
    shm::SendWqe* w = last(x);
    if (w == nullptr) return;
    if (!takes_data(w) || (is_atomic(w) && length != 8) || q->cap.max_send_sge < 1) {
        q->wr_error = EINVAL;
        return;
    }
    w->flags &= static_cast<std::uint8_t>(~shm::kWqeInline);
    w->inline_length = 0;
    w->num_sge = 1;
    w->sge[0] = {sge.addr, sge.length, sge.lkey};
}

void wr_set_sge_list(ibv_qp_ex* x, std::size_t n, const ibv_sge* list) {
    Qp* q = to_qp(x);
    shm::SendWqe* w = last(x);
    if (w == nullptr) return;
    if (!takes_data(w) || n > q->cap.max_send_sge || n > shm::kMaxSge ||
        (is_atomic(w) && (n != 1 || list[0].length != 8)) || (n > 0 && list == nullptr)) {
        q->wr_error = EINVAL;
        return;
    }
    w->flags &= static_cast<std::uint8_t>(~shm::kWqeInline);
    w->inline_length = 0;
    w->num_sge = static_cast<std::uint8_t>(n);
    for (std::size_t i = 0; i < n; ++i) w->sge[i] = {list[i].addr, list[i].length, list[i].lkey};
}

void wr_set_inline_data_list(ibv_qp_ex* x, std::size_t n, const ibv_data_buf* bufs) {
    Qp* q = to_qp(x);
    shm::SendWqe* w = last(x);
    if (w == nullptr) return;
    if ((kInlineOps & op_bit(static_cast<ibv_wr_opcode>(w->opcode))) == 0) {
        q->wr_error = EINVAL;
        return;
    }
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total += bufs[i].length;
    if (total > q->cap.max_inline_data || total > shm::kMaxInline) {
        q->wr_error = EINVAL;
        return;
    }
    std::size_t off = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (bufs[i].length != 0) std::memcpy(w->inline_data + off, bufs[i].addr, bufs[i].length);
        off += bufs[i].length;
    }
    w->num_sge = 0;
    w->inline_length = static_cast<std::uint32_t>(total);
    w->flags |= shm::kWqeInline;
}

void wr_set_inline_data(ibv_qp_ex* x, void* addr, std::size_t length) {
    const ibv_data_buf buf{addr, length};
    wr_set_inline_data_list(x, 1, &buf);
}

void wr_set_ud_addr(ibv_qp_ex* x, ibv_ah* ah, std::uint32_t remote_qpn, std::uint32_t remote_qkey) {
    Qp* q = to_qp(x);
    shm::SendWqe* w = last(x);
    if (w == nullptr) return;
    if (q->qpx.qp_base.qp_type != IBV_QPT_UD) {
        q->wr_error = EINVAL;
        return;
    }
    if (const int err = fill_ud(q, ah, remote_qpn, remote_qkey, w); err != 0) q->wr_error = err;
}
void wr_set_xrc_srqn(ibv_qp_ex* x, std::uint32_t) {
    Qp* q = to_qp(x);
    if (q->wr_error == 0) q->wr_error = EOPNOTSUPP;
}
void wr_send_tso(ibv_qp_ex* x, void*, std::uint16_t, std::uint16_t) {
    Qp* q = to_qp(x);
    if (q->wr_error == 0) q->wr_error = EOPNOTSUPP;
}
void wr_atomic_write(ibv_qp_ex* x, std::uint32_t, std::uint64_t, const void*) {
    Qp* q = to_qp(x);
    if (q->wr_error == 0) q->wr_error = EOPNOTSUPP;
}

void install_wr_api(ibv_qp_ex* x) {
    x->wr_start = wr_start;
    x->wr_complete = wr_complete;
    x->wr_abort = wr_abort;
    x->wr_send = wr_send;
    x->wr_send_imm = wr_send_imm;
    x->wr_send_inv = wr_send_inv;
    x->wr_rdma_write = wr_rdma_write;
    x->wr_rdma_write_imm = wr_rdma_write_imm;
    x->wr_rdma_read = wr_rdma_read;
    x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x->wr_atomic_fetch_add = wr_atomic_fetch_add;
    x->wr_local_inv = wr_local_inv;
    x->wr_bind_mw = wr_bind_mw;
    x->wr_set_sge = wr_set_sge;
    x->wr_set_sge_list = wr_set_sge_list;
    x->wr_set_inline_data = wr_set_inline_data;
    x->wr_set_inline_data_list = wr_set_inline_data_list;
    x->wr_set_ud_addr = wr_set_ud_addr;
    x->wr_set_xrc_srqn = wr_set_xrc_srqn;
    x->wr_send_tso = wr_send_tso;
    x->wr_atomic_write = wr_atomic_write;
}

// ---- attribute translation ----------------------------------------------------------

void to_shm(const ibv_ah_attr& a, shm::AhAttr* o) {
    std::memcpy(o->dgid, a.grh.dgid.raw, 16);
    o->flow_label = a.grh.flow_label;
    o->sgid_index = a.grh.sgid_index;
    o->hop_limit = a.grh.hop_limit;
    o->traffic_class = a.grh.traffic_class;
    o->is_global = a.is_global;
    o->dlid = a.dlid;
    o->sl = a.sl;
    o->src_path_bits = a.src_path_bits;
    o->static_rate = a.static_rate;
    o->port_num = a.port_num;
}

void from_shm(const shm::AhAttr& a, ibv_ah_attr* o) {
    std::memset(o, 0, sizeof *o);
    std::memcpy(o->grh.dgid.raw, a.dgid, 16);
    o->grh.flow_label = a.flow_label;
    o->grh.sgid_index = a.sgid_index;
    o->grh.hop_limit = a.hop_limit;
    o->grh.traffic_class = a.traffic_class;
    o->is_global = a.is_global;
    o->dlid = a.dlid;
    o->sl = a.sl;
    o->src_path_bits = a.src_path_bits;
    o->static_rate = a.static_rate;
    o->port_num = a.port_num;
}

// The bits of an enum field the caller may have left unwritten: ibv_modify_qp reads only the
// fields its mask names, and callers (librdmacm's rshutdown among them) pass an attribute whose
// other fields are whatever the stack held. Loading such a field as its enum type is undefined;
// copying its bytes is not, and the daemon ignores what the mask leaves out.
template <class Enum>
std::uint32_t enum_bits(const Enum& e) {
    static_assert(sizeof(Enum) == sizeof(std::uint32_t));
    std::uint32_t bits;
    std::memcpy(&bits, &e, sizeof bits);
    return bits;
}

void to_shm(const ibv_qp_attr& a, shm::QpAttr* o) {
    std::memset(o, 0, sizeof *o);
    o->qp_state = enum_bits(a.qp_state);
    o->cur_qp_state = enum_bits(a.cur_qp_state);
    o->path_mtu = enum_bits(a.path_mtu);
    o->path_mig_state = enum_bits(a.path_mig_state);
    o->qkey = a.qkey;
    o->rq_psn = a.rq_psn;
    o->sq_psn = a.sq_psn;
    o->dest_qp_num = a.dest_qp_num;
    o->qp_access_flags = static_cast<std::uint32_t>(a.qp_access_flags);
    o->rate_limit = a.rate_limit;
    o->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge,
              a.cap.max_inline_data};
    to_shm(a.ah_attr, &o->ah_attr);
    to_shm(a.alt_ah_attr, &o->alt_ah_attr);
    o->pkey_index = a.pkey_index;
    o->alt_pkey_index = a.alt_pkey_index;
    o->en_sqd_async_notify = a.en_sqd_async_notify;
    o->sq_draining = a.sq_draining;
    o->max_rd_atomic = a.max_rd_atomic;
    o->max_dest_rd_atomic = a.max_dest_rd_atomic;
    o->min_rnr_timer = a.min_rnr_timer;
    o->port_num = a.port_num;
    o->timeout = a.timeout;
    o->retry_cnt = a.retry_cnt;
    o->rnr_retry = a.rnr_retry;
    o->alt_port_num = a.alt_port_num;
    o->alt_timeout = a.alt_timeout;
}

void from_shm(const shm::QpAttr& a, ibv_qp_attr* o) {
    std::memset(o, 0, sizeof *o);
    o->qp_state = static_cast<ibv_qp_state>(a.qp_state);
    o->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
    o->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
    o->path_mig_state = static_cast<ibv_mig_state>(a.path_mig_state);
    o->qkey = a.qkey;
    o->rq_psn = a.rq_psn;
    o->sq_psn = a.sq_psn;
    o->dest_qp_num = a.dest_qp_num;
    o->qp_access_flags = static_cast<unsigned>(a.qp_access_flags);
    o->rate_limit = a.rate_limit;
    o->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge,
              a.cap.max_inline_data};
    from_shm(a.ah_attr, &o->ah_attr);
    from_shm(a.alt_ah_attr, &o->alt_ah_attr);
    o->pkey_index = a.pkey_index;
    o->alt_pkey_index = a.alt_pkey_index;
    o->en_sqd_async_notify = a.en_sqd_async_notify;
    o->sq_draining = a.sq_draining;
    o->max_rd_atomic = a.max_rd_atomic;
    o->max_dest_rd_atomic = a.max_dest_rd_atomic;
    o->min_rnr_timer = a.min_rnr_timer;
    o->port_num = a.port_num;
    o->timeout = a.timeout;
    o->retry_cnt = a.retry_cnt;
    o->rnr_retry = a.rnr_retry;
    o->alt_port_num = a.alt_port_num;
    o->alt_timeout = a.alt_timeout;
}

}  // namespace

ibv_qp* create_qp_common(ibv_context* c, ibv_qp_init_attr_ex* attr) {
    Context* ctx = to_ctx(c);
    constexpr std::uint32_t kKnownMask =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if ((attr->comp_mask & ~kKnownMask) != 0) return fail_null<ibv_qp>(EINVAL);
    // What snic does not offer is refused as such before anything else is looked at (an XRC
    // receive QP comes with an XRC domain and no PD).
    if ((attr->comp_mask & (IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                            IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH)) != 0)
        return fail_null<ibv_qp>(EOPNOTSUPP);
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr->create_flags != 0)
        return fail_null<ibv_qp>(EOPNOTSUPP);
    // A type verbs names but snic runs no engine for (raw packet, XRC, driver): EOPNOTSUPP, as
    // the kernel's soft-RoCE refuses it (and rdma-core's tests skip on); no type at all: EINVAL.
    if (const int err = verbs::qp_type_refusal(attr->qp_type); err != 0)
        return fail_null<ibv_qp>(err);
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0) return fail_null<ibv_qp>(EINVAL);
    std::uint64_t send_ops = 0;
    const bool has_ex = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    if (has_ex) {
        send_ops = attr->send_ops_flags;
        // Operations snic has not, or the QP's type has not (UD: only sends; UC: no READ,
        // atomics or Send with Invalidate).
        if ((send_ops & ~(kSupportedSendOps & allowed_send_ops(attr->qp_type))) != 0)
            return fail_null<ibv_qp>(EOPNOTSUPP);
    }
    ibv_pd* pd = attr->pd;
    if (pd == nullptr || pd->context != c || attr->send_cq == nullptr || attr->recv_cq == nullptr ||
        attr->send_cq->context != c || attr->recv_cq->context != c ||
        (attr->srq != nullptr && attr->srq->context != c))
        return fail_null<ibv_qp>(EINVAL);
    const shm::DeviceLimits& l = ctx->limits;
    ibv_qp_cap& cap = attr->cap;
    if (cap.max_send_wr > l.max_qp_wr || cap.max_send_sge > l.max_sge ||
        cap.max_inline_data > l.max_inline_data ||
        (attr->srq == nullptr && (cap.max_recv_wr > l.max_qp_wr || cap.max_recv_sge > l.max_sge)))
        return fail_null<ibv_qp>(EINVAL);

    const std::uint32_t sq_cap = shm::wq_capacity_for(cap.max_send_wr);
    const std::uint32_t rq_cap = attr->srq != nullptr ? 0 : shm::wq_capacity_for(cap.max_recv_wr);
    auto qp = std::make_unique<Qp>();
    const shm::Layout lay = shm::qp_layout(sq_cap, rq_cap);
    Fd memfd;
    if (const int err = make_shared_area("libsnic-qp", lay.bytes, &memfd, &qp->map); err != 0)
        return fail_null<ibv_qp>(err);
    qp->control = ::new (qp->map.data() + lay.control) shm::QpControl{};
    {
        const std::size_t sq_end = lay.ring0 + shm::ring_bytes<shm::SendWqe>(sq_cap);
        auto sq = shm::RingProducer<shm::SendWqe>::init(
            std::span(qp->map.data() + lay.ring0, sq_end - lay.ring0), sq_cap);
        if (!sq) return fail_null<ibv_qp>(EINVAL);
        qp->sq = *sq;
    }
    if (rq_cap != 0) {
        auto rq = shm::RingProducer<shm::RecvWqe>::init(
            std::span(qp->map.data() + lay.ring1, lay.bytes - lay.ring1), rq_cap);
        if (!rq) return fail_null<ibv_qp>(EINVAL);
        qp->rq = *rq;
    }

    shm::CreateQpReq req{};
    req.pd = pd->handle;
    req.send_cq = attr->send_cq->handle;
    req.recv_cq = attr->recv_cq->handle;
    req.srq = attr->srq != nullptr ? attr->srq->handle : shm::kNoHandle;
    req.qp_type = attr->qp_type;
    req.sq_sig_all = attr->sq_sig_all != 0 ? 1 : 0;
    // Inline data as rxe sizes it: a send WQE's SGE space holds inline bytes too, so a QP
    // gets at least max_send_sge SGEs' worth (verbs lets a provider grant more than asked;
    // rdma_cm's examples post 16 inline bytes with max_inline_data 0).
    const std::uint32_t inline_bytes = std::max<std::uint32_t>(
        cap.max_inline_data,
        std::min<std::uint32_t>(cap.max_send_sge * sizeof(ibv_sge), l.max_inline_data));
    req.cap = {cap.max_send_wr, attr->srq != nullptr ? 0 : cap.max_recv_wr, cap.max_send_sge,
               attr->srq != nullptr ? 0 : cap.max_recv_sge, inline_bytes};
    req.sq_capacity = sq_cap;
    req.rq_capacity = rq_cap;
    shm::CreateQpReply rep{};
    const int fds[1] = {memfd.get()};
    if (const int err = ctx->conn.call(shm::CtrlOp::create_qp, req, &rep, fds); err != 0)
        return fail_null<ibv_qp>(err);

    cap = {rep.cap.max_send_wr, rep.cap.max_recv_wr, rep.cap.max_send_sge, rep.cap.max_recv_sge,
           rep.cap.max_inline_data};
    qp->cap = rep.cap;
    qp->doorbells = ctx->doorbells;
    qp->doorbell = rep.doorbell % shm::kDoorbellBits;
    qp->sq_sig_all = attr->sq_sig_all != 0;
    qp->has_ex = has_ex;
    qp->send_ops = send_ops;
    ibv_qp& b = qp->qpx.qp_base;
    b.context = c;
    b.qp_context = attr->qp_context;
    b.pd = pd;
    b.send_cq = attr->send_cq;
    b.recv_cq = attr->recv_cq;
    b.srq = attr->srq;
    b.handle = rep.qp;
    b.qp_num = rep.qp_num;
    b.state = IBV_QPS_RESET;
    b.qp_type = attr->qp_type;
    ::pthread_mutex_init(&b.mutex, nullptr);
    ::pthread_cond_init(&b.cond, nullptr);
    install_wr_api(&qp->qpx);

    std::lock_guard lock(ctx->objs_mu);
    ctx->qps.emplace(rep.qp, qp.get());
    ctx->qps_peak = std::max(ctx->qps_peak, ctx->qps.size());
    return &qp.release()->qpx.qp_base;
}

void release_qp_local(Qp* qp) {
    ::pthread_mutex_destroy(&qp->qpx.qp_base.mutex);
    ::pthread_cond_destroy(&qp->qpx.qp_base.cond);
    delete qp;
}

namespace ops {

ibv_qp* create_qp_ex(ibv_context* c, ibv_qp_init_attr_ex* attr) {
    return guarded<ibv_qp*>(nullptr, [&] { return create_qp_common(c, attr); });
}

int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
    Qp* q = to_qp(qp);
    if (daemon_dead(to_ctx(qp->context))) {
        *bad_wr = wr;
        errno = EIO;
        return EIO;
    }
    int err = 0;
    bool pushed = false;
    q->sq_lock.lock();
    if (!send_state_ok(q)) {
        err = EINVAL;
    } else {
        alignas(64) shm::SendWqe w;
        for (; wr != nullptr; wr = wr->next) {
            if ((err = build_send(q, wr, &w)) != 0) break;
            if (!q->sq->try_stage(w)) {
                err = ENOMEM;
                break;
            }
            pushed = true;
        }
        if (pushed) q->sq->publish();  // one index store per list; each WQE's seq publishes it
    }
    q->sq_lock.unlock();
    if (pushed) send_posted(q);
    if (err != 0) *bad_wr = wr, errno = err;
    return err;
}

int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    Qp* q = to_qp(qp);
    if (daemon_dead(to_ctx(qp->context))) {
        *bad_wr = wr;
        errno = EIO;
        return EIO;
    }
    int err = 0;
    if (!q->rq || !recv_state_ok(q)) {
        *bad_wr = wr;
        errno = EINVAL;
        return EINVAL;  // a QP with an SRQ has no receive queue of its own
    }
    q->rq_lock.lock();
    shm::RecvWqe w;
    for (; wr != nullptr; wr = wr->next) {
        if ((err = build_recv(q->cap.max_recv_sge, wr, &w)) != 0) break;
        if (!q->rq->try_stage(w)) {
            err = ENOMEM;
            break;
        }
    }
    q->rq->publish();
    q->rq_lock.unlock();
    if (err != 0) *bad_wr = wr, errno = err;
    return err;
}

int bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
    Qp* q = to_qp(qp);
    if (mw == nullptr || bind == nullptr || mw->type != IBV_MW_TYPE_1) return EINVAL;
    if (q->qpx.qp_base.qp_type == IBV_QPT_UD) return EOPNOTSUPP;  // IBA: no windows on UD
    if ((allowed_ops(q) & op_bit(IBV_WR_BIND_MW)) == 0) return EINVAL;
    if ((bind->send_flags & ~(kSendFlags & ~IBV_SEND_INLINE)) != 0) return EINVAL;
    const std::uint32_t new_rkey = ibv_inc_rkey(mw->rkey);
    alignas(64) shm::SendWqe w;
    clear_header(&w);
    w.wr_id = bind->wr_id;
    w.flags = wqe_flags(q, bind->send_flags);
    if (const int err = fill_bind(q, mw, new_rkey, bind->bind_info, &w); err != 0) return err;
    int err = 0;
    q->sq_lock.lock();
    if (!send_state_ok(q))
        err = EINVAL;
    else if (!q->sq->try_push(w))
        err = ENOMEM;
    q->sq_lock.unlock();
    if (err == 0) {
        send_posted(q);
        mw->rkey = new_rkey;
    }
    return err;
}

}  // namespace ops

}  // namespace snic::client

using namespace snic::client;
namespace shm = snic::shm;

SNIC_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
        ibv_qp_init_attr_ex ex{};
        ex.qp_context = attr->qp_context;
        ex.send_cq = attr->send_cq;
        ex.recv_cq = attr->recv_cq;
        ex.srq = attr->srq;
        ex.cap = attr->cap;
        ex.qp_type = attr->qp_type;
        ex.sq_sig_all = attr->sq_sig_all;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        ex.pd = pd;
        ibv_qp* qp = create_qp_common(pd->context, &ex);
        if (qp != nullptr) attr->cap = ex.cap;
        return qp;
    });
}

SNIC_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
    Qp* q = to_qp(qp);
    return q->has_ex ? &q->qpx : nullptr;
}

namespace snic::client {

namespace {

// One Modify QP through the daemon; the state it reports is the QP's from then on.
int modify_call(ibv_qp* qp, const shm::ModifyQpReq& req) {
    shm::ModifyQpReply rep{};
    if (const int err = to_ctx(qp->context)->conn.call(shm::CtrlOp::modify_qp, req, &rep); err != 0)
        return err;
    store_state(to_qp(qp), rep.state);
    return 0;
}

}  // namespace

ibv_qp* qp_by_num(ibv_context* c, std::uint32_t qpn) {
    const Device* dev = to_ctx(c)->device;
    std::lock_guard lock(open_contexts().mu);
    for (Context* ctx : open_contexts().all) {
        if (ctx->device != dev) continue;
        std::lock_guard objs(ctx->objs_mu);
        for (const auto& [handle, q] : ctx->qps)
            if (q->qpx.qp_base.qp_num == qpn) return &q->qpx.qp_base;
    }
    return nullptr;
}

int bind_iwarp_qp(ibv_qp* qp, std::uint32_t iw_conn) {
    // A new iWARP QP is reported in INIT (ibv_query_qp), as Linux's iWARP drivers report it,
    // while snicd keeps it in RESET: one the application never moved goes to INIT first, with
    // the attributes rdma_init_qp_attr gives for INIT (port 1, remote read and write).
    if (load_state(to_qp(qp)) == IBV_QPS_RESET) {
        shm::ModifyQpReq init{};
        init.qp = qp->handle;
        init.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        init.attr.qp_state = IBV_QPS_INIT;
        init.attr.port_num = 1;
        init.attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        if (const int err = modify_call(qp, init); err != 0) return err;
    }
    shm::ModifyQpReq req{};
    req.qp = qp->handle;
    req.mask = IBV_QP_STATE | shm::kQpAttrIwConn;
    req.attr.qp_state = IBV_QPS_RTR;
    req.attr.iw_conn = iw_conn;
    return modify_call(qp, req);
}

}  // namespace snic::client

SNIC_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    return errno_verb([&] {
        // The binding of an iWARP QP to its connection is rdma_cm's (bind_iwarp_qp).
        if ((static_cast<std::uint32_t>(mask) & shm::kQpAttrIwConn) != 0) return EINVAL;
        shm::ModifyQpReq req{};
        req.qp = qp->handle;
        req.mask = static_cast<std::uint32_t>(mask);
        to_shm(*attr, &req.attr);
        return modify_call(qp, req);
    });
}

SNIC_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
    return errno_verb([&] {
        (void)mask;  // every attribute is returned
        Qp* q = to_qp(qp);
        shm::QueryQpReply rep{};
        if (const int err =
                to_ctx(qp->context)
                    ->conn.call(shm::CtrlOp::query_qp, shm::HandleReq{qp->handle, 0}, &rep);
            err != 0)
            return err;
        from_shm(rep.attr, attr);
        store_state(q, rep.attr.qp_state);
        // An iWARP QP waits for its connection in one state, which Linux's iWARP drivers
        // report as INIT (siw's IDLE, cxgb4's and irdma's alike), a new QP included: so does
        // libsnic. snicd keeps IBA's RESET for it until rdma_cm or the application moves it.
        if (attr->qp_state == IBV_QPS_RESET &&
            to_ctx(qp->context)->device->transport == shm::kTransportIwarp)
            attr->qp_state = attr->cur_qp_state = IBV_QPS_INIT;
        if (init != nullptr) {
            std::memset(init, 0, sizeof *init);
            init->qp_context = qp->qp_context;
            init->send_cq = qp->send_cq;
            init->recv_cq = qp->recv_cq;
            init->srq = qp->srq;
            init->cap = attr->cap;
            init->qp_type = qp->qp_type;
            init->sq_sig_all = rep.sq_sig_all != 0 ? 1 : 0;
        }
        return 0;
    });
}

SNIC_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
    return errno_verb([&] {
        Qp* q = to_qp(qp);
        Context* ctx = to_ctx(qp->context);
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::destroy_qp, qp->handle); err != 0)
            return err;
        bool trim = false;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->qps.erase(qp->handle);
            // When many QPs went, the heap's free pages go back to the system: each time the
            // context's QPs halved from a peak of at least 256.
            if (ctx->qps_peak >= 256 && ctx->qps.size() <= ctx->qps_peak / 2) {
                ctx->qps_peak = ctx->qps.size();
                trim = true;
            }
        }
        ::pthread_mutex_lock(&qp->mutex);
        while (qp->events_completed != q->events_reported)
            ::pthread_cond_wait(&qp->cond, &qp->mutex);
        ::pthread_mutex_unlock(&qp->mutex);
        release_qp_local(q);
        if (trim) ::malloc_trim(0);
        return 0;
    });
}
