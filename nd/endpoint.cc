// libndsnic: endpoints (an RC QP each) and the requests posted on them. A request's
// ND_RESULT is its identity: the slot it takes holds the pointer, and GetResults reports it.
// The post path takes no lock and allocates nothing; the checks come first, so that a
// request refused posts nothing and leaves the endpoint as it was.
#include <arpa/inet.h>
#include <endian.h>

#include <algorithm>
#include <cerrno>

#include "nd/provider.h"

namespace snic::nd {

namespace {

constexpr std::uint32_t kMaxSge = 32;  // the most an endpoint offers (stack arrays below)

unsigned send_flags(DWORD flags) {
    unsigned f = (flags & ND_OP_FLAG_SILENT_SUCCESS) != 0 ? 0 : IBV_SEND_SIGNALED;
    if ((flags & ND_OP_FLAG_READ_FENCE) != 0) f |= IBV_SEND_FENCE;
    if ((flags & ND_OP_FLAG_SEND_AND_SOLICIT_EVENT) != 0) f |= IBV_SEND_SOLICITED;
    return f;
}

// The SGEs as verbs has them, and their total; an ND result.
HRESULT to_sges(const ND_SGE* sgl, SIZE_T n, std::uint32_t max, std::uint64_t max_msg, ibv_sge* out,
                std::uint64_t* total) {
    if (n > max) return ND_DATA_OVERRUN;
    if (n > 0 && sgl == nullptr) return ND_INVALID_PARAMETER_2;
    std::uint64_t t = 0;
    for (SIZE_T i = 0; i < n; ++i) {
        if (sgl[i].hMr == nullptr) return ND_INVALID_PARAMETER_2;
        if (sgl[i].Length > UINT32_MAX) return ND_BUFFER_OVERFLOW;
        out[i].addr = reinterpret_cast<std::uintptr_t>(sgl[i].pAddr);
        out[i].length = static_cast<std::uint32_t>(sgl[i].Length);
        out[i].lkey = reinterpret_cast<const ibv_mr*>(sgl[i].hMr)->lkey;
        t += sgl[i].Length;
    }
    if (t > max_msg) return ND_BUFFER_OVERFLOW;
    *total = t;
    return ND_SUCCESS;
}

HRESULT post_error(int e) {
    return e == ENOMEM ? ND_NO_MORE_ENTRIES : e == EINVAL ? ND_INVALID_PARAMETER : ND_UNSUCCESSFUL;
}

// One work request on `ring` (a send's or a receive's): its SGEs checked, a slot taken, the
// request posted by `post`, or the slot given back when it is refused; an ND result.
template <class Wr, class Post>
HRESULT post_wr(SlotRing& ring, Wr& wr, ND_RESULT* r, const ND_SGE* sgl, SIZE_T n,
                std::uint32_t max_sge, std::uint64_t max_msg, Post post) {
    ibv_sge sge[kMaxSge];
    std::uint64_t total = 0;
    if (const HRESULT h = to_sges(sgl, n, max_sge, max_msg, sge, &total); h != ND_SUCCESS) return h;
    Slot* s = ring.take();
    if (s == nullptr) return ND_NO_MORE_ENTRIES;
    s->result = r;
    s->length = total;
    wr.wr_id = reinterpret_cast<std::uintptr_t>(s);
    wr.sg_list = n > 0 ? sge : nullptr;
    wr.num_sge = static_cast<int>(n);
    if (const int e = post(wr); e != 0) {
        ring.untake();
        return post_error(e);
    }
    return ND_SUCCESS;
}

}  // namespace

SlotRing::SlotRing(std::uint32_t n, bool recv) : slots_(std::max<std::uint32_t>(n, 1)) {
    for (Slot& s : slots_) {
        s.ring = this;
        s.recv = recv;
    }
}

Slot* SlotRing::take() {
    const std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) >= slots_.size()) return nullptr;
    Slot* s = &slots_[t % slots_.size()];
    s->seq = t;
    tail_.store(t + 1, std::memory_order_release);
    return s;
}

void SlotRing::untake() {
    tail_.store(tail_.load(std::memory_order_relaxed) - 1, std::memory_order_release);
}

Endpoint::Endpoint(Adapter* a, Connector* c) : adapter(a), connector(c) {
    adapter->AddRef();
}

Endpoint::~Endpoint() {
    if (qp != nullptr) ibv_destroy_qp(qp);
    if (in_cq != nullptr) {
        if (rq_ != nullptr) in_cq->keep(std::move(rq_));
        in_cq->Release();
    }
    if (out_cq != nullptr) {
        if (sq_ != nullptr) out_cq->keep(std::move(sq_));
        out_cq->Release();
    }
    adapter->Release();
}

HRESULT Endpoint::create(CompletionQueue* in, CompletionQueue* out, SIZE_T n_in, SIZE_T n_out,
                         SIZE_T sge_in, SIZE_T sge_out, SIZE_T rd_in, SIZE_T rd_out) {
    const ibv_device_attr& d = adapter->dev_attr;
    const auto max_wr = static_cast<SIZE_T>(d.max_qp_wr);
    const SIZE_T max_sge = std::min<SIZE_T>(static_cast<SIZE_T>(d.max_sge), kMaxSge);
    if (n_in > max_wr) return ND_INVALID_PARAMETER_3;
    if (n_out > max_wr) return ND_INVALID_PARAMETER_4;
    if (sge_in > max_sge) return ND_INVALID_PARAMETER_5;
    if (sge_out > max_sge) return ND_INVALID_PARAMETER_6;
    if (rd_in > static_cast<SIZE_T>(d.max_qp_rd_atom)) return ND_INVALID_PARAMETER_7;
    if (rd_out > static_cast<SIZE_T>(d.max_qp_init_rd_atom)) return ND_INVALID_PARAMETER_8;
    in_cq = in;
    out_cq = out;
    in->AddRef();
    out->AddRef();
    ibv_qp_init_attr qa{};
    qa.qp_context = this;
    qa.send_cq = out->cq;
    qa.recv_cq = in->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = static_cast<std::uint32_t>(std::max<SIZE_T>(n_out, 1));
    qa.cap.max_recv_wr = static_cast<std::uint32_t>(std::max<SIZE_T>(n_in, 1));
    qa.cap.max_send_sge = static_cast<std::uint32_t>(std::max<SIZE_T>(sge_out, 1));
    qa.cap.max_recv_sge = static_cast<std::uint32_t>(std::max<SIZE_T>(sge_in, 1));
    qp = ibv_create_qp(adapter->pd, &qa);
    if (qp == nullptr) return ND_INSUFFICIENT_RESOURCES;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
        return ND_UNSUCCESSFUL;
    max_sge_in = static_cast<std::uint32_t>(sge_in);
    max_sge_out = static_cast<std::uint32_t>(sge_out);
    read_in = static_cast<std::uint32_t>(rd_in);
    read_out = static_cast<std::uint32_t>(rd_out);
    // The depths the consumer asked for, not the QP's (perhaps larger) ones: the limits that
    // ND_NO_MORE_ENTRIES reports.
    sq_ = std::make_shared<SlotRing>(static_cast<std::uint32_t>(n_out), false);
    rq_ = std::make_shared<SlotRing>(static_cast<std::uint32_t>(n_in), true);
    return ND_SUCCESS;
}

int Endpoint::move_qp(rdma_cm_id* id) {
    if (adapter->iwarp) return 0;
    for (const ibv_qp_state s : {IBV_QPS_RTR, IBV_QPS_RTS}) {
        ibv_qp_attr a{};
        int mask = 0;
        a.qp_state = s;
        if (rdma_init_qp_attr(id, &a, &mask) != 0) return errno;
        if (s == IBV_QPS_RTR)
            a.max_dest_rd_atomic = static_cast<std::uint8_t>(read_in);
        else
            a.max_rd_atomic =
                static_cast<std::uint8_t>(std::min<std::uint32_t>(a.max_rd_atomic, read_out));
        if (const int e = ibv_modify_qp(qp, &a, mask); e != 0) return e;
    }
    return 0;
}

void Endpoint::to_error() {
    connected.store(false, std::memory_order_release);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

HRESULT Endpoint::Flush() {
    to_error();
    return ND_SUCCESS;
}

HRESULT Endpoint::post_send(ibv_send_wr& wr, ND_RESULT* r, const ND_SGE* sgl, SIZE_T n,
                            DWORD flags) {
    if (r == nullptr) return ND_INVALID_PARAMETER_1;
    if (!connected.load(std::memory_order_acquire)) return ND_CONNECTION_INVALID;
    wr.send_flags = send_flags(flags);
    return post_wr(*sq_, wr, r, sgl, n, max_sge_out, adapter->port_attr.max_msg_sz,
                   [this](ibv_send_wr& w) {
                       ibv_send_wr* bad = nullptr;
                       return ibv_post_send(qp, &w, &bad);
                   });
}

HRESULT Endpoint::Send(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, DWORD flags) {
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    return post_send(wr, r, sgl, n, flags);
}

HRESULT Endpoint::SendAndInvalidate(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n,
                                    const ND_MW_DESCRIPTOR* mw, DWORD flags) {
    if (mw == nullptr) return ND_INVALID_PARAMETER_4;
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.invalidate_rkey = ntohl(mw->Token);
    return post_send(wr, r, sgl, n, flags);
}

HRESULT Endpoint::Receive(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n) {
    if (r == nullptr) return ND_INVALID_PARAMETER_1;
    ibv_recv_wr wr{};
    return post_wr(*rq_, wr, r, sgl, n, max_sge_in, adapter->port_attr.max_msg_sz,
                   [this](ibv_recv_wr& w) {
                       ibv_recv_wr* bad = nullptr;
                       return ibv_post_recv(qp, &w, &bad);
                   });
}

HRESULT Endpoint::Bind(ND_RESULT* r, ND_MR_HANDLE h, INDMemoryWindow* w, const void* buf,
                       SIZE_T len, DWORD flags, ND_MW_DESCRIPTOR* out) {
    if (r == nullptr) return ND_INVALID_PARAMETER_1;
    if (h == nullptr) return ND_INVALID_PARAMETER_2;
    if (w == nullptr) return ND_INVALID_PARAMETER_3;
    if (out == nullptr) return ND_INVALID_PARAMETER_7;
    if ((flags & (ND_OP_FLAG_ALLOW_READ | ND_OP_FLAG_ALLOW_WRITE)) == 0)
        return ND_INVALID_PARAMETER_6;
    if (!connected.load(std::memory_order_acquire)) return ND_CONNECTION_INVALID;
    auto* mr = reinterpret_cast<ibv_mr*>(h);
    auto* mw = static_cast<MemoryWindow*>(w);
    const auto at = reinterpret_cast<std::uintptr_t>(buf);
    const auto base = reinterpret_cast<std::uintptr_t>(mr->addr);
    if (at < base || at + len > base + mr->length) return ND_INVALID_PARAMETER_4;
    Slot* s = sq_->take();
    if (s == nullptr) return ND_NO_MORE_ENTRIES;
    s->result = r;
    s->length = 0;
    ibv_send_wr wr{};
    wr.wr_id = reinterpret_cast<std::uintptr_t>(s);
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = send_flags(flags & (ND_OP_FLAG_SILENT_SUCCESS | ND_OP_FLAG_READ_FENCE));
    wr.bind_mw.mw = mw->mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = at;
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags =
        ((flags & ND_OP_FLAG_ALLOW_READ) != 0 ? IBV_ACCESS_REMOTE_READ : 0) |
        ((flags & ND_OP_FLAG_ALLOW_WRITE) != 0 ? IBV_ACCESS_REMOTE_WRITE : 0);
    ibv_send_wr* bad = nullptr;
    if (const int e = ibv_post_send(qp, &wr, &bad); e != 0) {
        sq_->untake();
        return post_error(e);
    }
    mw->rkey = wr.bind_mw.rkey;
    out->Base = htobe64(at);
    out->Length = htobe64(len);
    out->Token = htonl(mw->rkey);
    return ND_SUCCESS;
}

HRESULT Endpoint::Invalidate(ND_RESULT* r, INDMemoryWindow* w, DWORD flags) {
    if (r == nullptr) return ND_INVALID_PARAMETER_1;
    if (w == nullptr) return ND_INVALID_PARAMETER_2;
    if (!connected.load(std::memory_order_acquire)) return ND_CONNECTION_INVALID;
    Slot* s = sq_->take();
    if (s == nullptr) return ND_NO_MORE_ENTRIES;
    s->result = r;
    s->length = 0;
    ibv_send_wr wr{};
    wr.wr_id = reinterpret_cast<std::uintptr_t>(s);
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = send_flags(flags & (ND_OP_FLAG_SILENT_SUCCESS | ND_OP_FLAG_READ_FENCE));
    wr.invalidate_rkey = static_cast<MemoryWindow*>(w)->rkey;
    ibv_send_wr* bad = nullptr;
    if (const int e = ibv_post_send(qp, &wr, &bad); e != 0) {
        sq_->untake();
        return post_error(e);
    }
    return ND_SUCCESS;
}

HRESULT Endpoint::Read(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, const ND_MW_DESCRIPTOR* mw,
                       ULONGLONG offset, DWORD flags) {
    if (mw == nullptr) return ND_INVALID_PARAMETER_4;
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_READ;
    wr.wr.rdma.remote_addr = be64toh(mw->Base) + offset;
    wr.wr.rdma.rkey = ntohl(mw->Token);
    return post_send(wr, r, sgl, n, flags & (ND_OP_FLAG_SILENT_SUCCESS | ND_OP_FLAG_READ_FENCE));
}

HRESULT Endpoint::Write(ND_RESULT* r, const ND_SGE* sgl, SIZE_T n, const ND_MW_DESCRIPTOR* mw,
                        ULONGLONG offset, DWORD flags) {
    if (mw == nullptr) return ND_INVALID_PARAMETER_4;
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = be64toh(mw->Base) + offset;
    wr.wr.rdma.rkey = ntohl(mw->Token);
    return post_send(wr, r, sgl, n, flags & (ND_OP_FLAG_SILENT_SUCCESS | ND_OP_FLAG_READ_FENCE));
}

}  // namespace snic::nd
