// libdaplsnic: shared receive queues, as the DAT 1.2 pages of dat_srq_post_recv and
// dat_srq_resize define them.
//
// The provider counts what it posted and what it reaped; snicd's per-QP receive
// counters (libsnic's snic_query_qp_recv) say what each EP took from the SRQ. So a
// buffer is on the SRQ (posted, not taken), held by an EP (taken, not completed),
// completed and not yet reaped, or back with the consumer.
#include <algorithm>
#include <cerrno>

#include "dapl/provider.h"
#include "libclient/snic/snic_ext.h"

namespace snic::dapl {

namespace {

// Adds slots so that `to` buffers can be outstanding; the free list's capacity is
// reserved here so that posting never allocates.
bool add_slots(Srq* srq, DAT_COUNT to) {
    const DAT_COUNT have = srq->total_slots;
    if (to <= have) return true;
    const auto more = static_cast<std::size_t>(to - have);
    auto chunk = std::make_unique<Slot[]>(more);
    srq->free.reserve(static_cast<std::size_t>(to));
    for (std::size_t i = 0; i < more; ++i) {
        chunk[i].in_srq = true;
        chunk[i].srq = srq;
        chunk[i].op = DAT_DTO_RECEIVE;
        srq->free.push_back(&chunk[i]);
    }
    srq->chunks.push_back(std::move(chunk));
    srq->total_slots = to;
    return true;
}

DAT_RETURN srq_create(DAT_IA_HANDLE h, DAT_PZ_HANDLE pzh, DAT_SRQ_ATTR* attr, DAT_SRQ_HANDLE* out) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    Pz* pz = as<Pz>(pzh);
    if (pz == nullptr || pz->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    if (attr == nullptr || out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (attr->max_recv_dtos <= 0 || attr->max_recv_dtos > ia->dev_attr.max_srq_wr ||
        attr->max_recv_iov <= 0 || attr->max_recv_iov > ia->dev_attr.max_srq_sge ||
        attr->low_watermark < 0 || attr->low_watermark > attr->max_recv_dtos)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    auto srq = std::make_unique<Srq>(ia->provider, ia);
    ibv_srq_init_attr sa{};
    sa.srq_context = srq.get();
    sa.attr.max_wr = static_cast<std::uint32_t>(attr->max_recv_dtos);
    sa.attr.max_sge = static_cast<std::uint32_t>(attr->max_recv_iov);
    sa.attr.srq_limit = static_cast<std::uint32_t>(attr->low_watermark);
    srq->srq = ibv_create_srq(pz->pd, &sa);
    if (srq->srq == nullptr) return from_errno(errno);
    srq->pz = pz;
    srq->max_recv_dtos = attr->max_recv_dtos;
    srq->max_recv_iov = attr->max_recv_iov;
    srq->low_watermark = attr->low_watermark;
    add_slots(srq.get(), attr->max_recv_dtos);
    ++pz->users;
    ++ia->objects;
    *out = srq.release();
    return DAT_SUCCESS;
}

DAT_RETURN srq_free(DAT_SRQ_HANDLE h) {
    Srq* srq = as<Srq>(h);
    if (srq == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
    {
        std::lock_guard lock(srq->mu);
        if (!srq->eps.empty()) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_SRQ_IN_USE);
    }
    if (const int e = ibv_destroy_srq(srq->srq); e != 0) return from_errno(e);
    --srq->pz->users;
    --srq->ia->objects;
    retire(srq);
    return DAT_SUCCESS;
}

// Buffers outstanding: posted and not yet reaped (on the SRQ, held by an EP, or
// completed and waiting in an EVD).
DAT_COUNT outstanding(const Srq* srq) {
    return static_cast<DAT_COUNT>(srq->posted - srq->reaped.load(std::memory_order_acquire));
}

}  // namespace

// WQEs taken from the SRQ so far: by its EPs' QPs now (snicd's counters), and by QPs that
// were reset or destroyed before (their counts kept when they went). srq->mu held.
std::uint64_t srq_taken(Srq* srq) {
    std::uint64_t total = srq->taken_before;
    for (Ep* ep : srq->eps) {
        snic_qp_recv_state s{};
        if (snic_query_qp_recv(ep->qp, &s) == 0) total += s.taken;
    }
    return total;
}

// An SRQ EP's QP is about to be reset or destroyed (which clears snicd's counters): what
// it took stays counted; `detach` takes the EP off the SRQ in the same step.
void srq_keep_taken(Ep* ep, bool detach) {
    if (ep->srq == nullptr || ep->qp == nullptr) return;
    std::lock_guard lock(ep->srq->mu);
    snic_qp_recv_state s{};
    if (snic_query_qp_recv(ep->qp, &s) == 0) ep->srq->taken_before += s.taken;
    if (detach) {
        auto& v = ep->srq->eps;
        v.erase(std::remove(v.begin(), v.end(), ep), v.end());
    }
}

namespace {

// Buffers on the SRQ itself: posted, not yet taken by an EP. srq->mu held.
DAT_COUNT available(Srq* srq) {
    const std::uint64_t t = srq_taken(srq);
    return static_cast<DAT_COUNT>(srq->posted > t ? srq->posted - t : 0);
}

// dat_srq_post_recv: nonblocking and allocation-free; valid in every SRQ state.
DAT_RETURN srq_post_recv(DAT_SRQ_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov,
                         DAT_DTO_COOKIE cookie) {
    Srq* srq = as<Srq>(h);
    if (srq == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
    if (n < 0 || n > srq->max_recv_iov || n > 32)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (n > 0 && iov == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    ibv_sge sge[32];
    if (const DAT_RETURN r = check_iov(srq->ia, srq->pz, n, iov, true, sge); r != DAT_SUCCESS)
        return r;
    std::lock_guard lock(srq->mu);
    if (outstanding(srq) >= srq->max_recv_dtos || srq->free.empty())
        return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
    Slot* s = srq->free.back();
    srq->free.pop_back();
    s->cookie = cookie;
    s->ep = nullptr;
    std::uint64_t len = 0;
    for (DAT_COUNT i = 0; i < n; ++i) len += sge[i].length;
    s->length = static_cast<std::uint32_t>(std::min<std::uint64_t>(len, UINT32_MAX));
    ibv_recv_wr wr{};
    wr.wr_id = reinterpret_cast<std::uintptr_t>(s);
    wr.sg_list = sge;
    wr.num_sge = n;
    ibv_recv_wr* bad = nullptr;
    if (const int e = ibv_post_srq_recv(srq->srq, &wr, &bad); e != 0) {
        srq->free.push_back(s);
        return from_errno(e);
    }
    ++srq->posted;
    return DAT_SUCCESS;
}

DAT_RETURN srq_query(DAT_SRQ_HANDLE h, DAT_SRQ_PARAM_MASK, DAT_SRQ_PARAM* p) {
    Srq* srq = as<Srq>(h);
    if (srq == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    std::lock_guard lock(srq->mu);
    p->ia_handle = srq->ia;
    p->srq_state = DAT_SRQ_STATE_OPERATIONAL;
    p->pz_handle = srq->pz;
    p->max_recv_dtos = srq->max_recv_dtos;
    p->max_recv_iov = srq->max_recv_iov;
    p->low_watermark = srq->low_watermark;
    // Available: on the SRQ. Outstanding: posted and not yet reaped (on the SRQ, held by
    // an EP, or completed and waiting in an EVD), the count dat_srq_resize is held to.
    p->available_dto_count = available(srq);
    p->outstanding_dto_count = outstanding(srq);
    return DAT_SUCCESS;
}

// dat_srq_resize: refused (DAT_INVALID_STATE) below the buffers outstanding or the low
// watermark; otherwise snicd resizes the queue in place, keeping every posted buffer.
DAT_RETURN srq_resize(DAT_SRQ_HANDLE h, DAT_COUNT size) {
    Srq* srq = as<Srq>(h);
    if (srq == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
    if (size <= 0 || size > srq->ia->dev_attr.max_srq_wr)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    std::lock_guard lock(srq->mu);
    if (size < outstanding(srq) || size < srq->low_watermark) return err(DAT_INVALID_STATE);
    if (size == srq->max_recv_dtos) return DAT_SUCCESS;
    ibv_srq_attr a{};
    a.max_wr = static_cast<std::uint32_t>(size);
    // The page lists one failure that blames neither the size nor the SRQ's state: snicd
    // out of memory, gone or not answering leaves the SRQ as it was, short of resources.
    if (const int e = ibv_modify_srq(srq->srq, &a, IBV_SRQ_MAX_WR); e != 0)
        return e == EINVAL ? err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2)
                           : err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_SRQ);
    add_slots(srq, size);
    srq->max_recv_dtos = size;
    return DAT_SUCCESS;
}

// dat_srq_set_lw: arms the SRQ limit; the event comes once per arming.
DAT_RETURN srq_set_lw(DAT_SRQ_HANDLE h, DAT_COUNT lw) {
    Srq* srq = as<Srq>(h);
    if (srq == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
    std::unique_lock lock(srq->mu);
    if (lw < 0 || lw > srq->max_recv_dtos) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    // Already below the new watermark: the event comes now, and spends the arming.
    const bool below = lw > 0 && available(srq) < lw;
    ibv_srq_attr a{};
    a.srq_limit = below ? 0 : static_cast<std::uint32_t>(lw);
    if (const int e = ibv_modify_srq(srq->srq, &a, IBV_SRQ_LIMIT); e != 0) return from_errno(e);
    srq->low_watermark = lw;
    lock.unlock();
    if (below) post_low_watermark(srq);
    return DAT_SUCCESS;
}

}  // namespace

void fill_provider_srq(DAT_PROVIDER& p) {
    p.srq_create_func = srq_create;
    p.srq_free_func = srq_free;
    p.srq_post_recv_func = srq_post_recv;
    p.srq_query_func = srq_query;
    p.srq_resize_func = srq_resize;
    p.srq_set_lw_func = srq_set_lw;
}

}  // namespace snic::dapl
