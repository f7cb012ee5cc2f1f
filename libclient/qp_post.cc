// The post path of queue pairs: ibv_post_send / ibv_post_recv, ibv_bind_mw and the
// ibv_wr_* API validate each work request and push SendWqe / RecvWqe into the QP's rings.
// The rings live in the QP's memfd (QpControl, then the SQ, then the RQ unless the QP
// uses an SRQ); one poster at a time per ring, under the ring's spinlock.
// After pushing send WQEs, a post rings the QP's doorbell if snicd said the QP
// sleeps (QpControl::sleeping); a busy QP's send queue is watched by snicd.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "libclient/internal.h"
#include "libclient/qp_internal.h"

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

// Fills the WQE's data: the bytes themselves (IBV_SEND_INLINE, for an opcode that may
// carry inline data) or the scatter/gather list; 0 or EINVAL.
int fill_data(const Qp* q, const ibv_send_wr* wr, ibv_wr_opcode op, std::uint32_t nsge,
              shm::SendWqe* w) {
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
    return fill_data(q, wr, op, nsge, w);
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

}  // namespace

std::uint64_t allowed_send_ops(std::uint32_t qp_type) {
    std::uint64_t flags = 0;
    for (std::uint32_t op = 0; op < 32; ++op)
        if ((allowed_ops(qp_type) & (1u << op)) != 0)
            flags |= send_op_flag(static_cast<ibv_wr_opcode>(op));
    return flags;
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

namespace ops {

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
