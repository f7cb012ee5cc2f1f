// Shared receive queues: a ring of RecvWqe the client produces and snicd
// consumes; create/modify/query/destroy go through the daemon.
#include <cstring>
#include <mutex>
#include <utility>

#include "libclient/internal.h"

namespace snic::client {

namespace {

ibv_srq* create_srq(ibv_pd* pd, void* srq_context, ibv_srq_attr* attr) {
    Context* ctx = to_ctx(pd->context);
    const shm::DeviceLimits& l = ctx->limits;
    if (attr->max_wr < 1 || attr->max_wr > l.max_srq_wr || attr->max_sge > l.max_srq_sge ||
        attr->max_sge > shm::kMaxSge)
        return fail_null<ibv_srq>(EINVAL);
    const std::uint32_t capacity = shm::wq_capacity_for(attr->max_wr);
    if (capacity == 0) return fail_null<ibv_srq>(EINVAL);
    auto srq = std::make_unique<Srq>();
    const shm::Layout lay = shm::srq_layout(capacity);
    Fd memfd;
    if (const int err = make_shared_area("libsnic-srq", lay.bytes, &memfd, &srq->map); err != 0)
        return fail_null<ibv_srq>(err);
    auto ring = shm::RingProducer<shm::RecvWqe>::init(
        std::span(srq->map.data() + lay.ring0, lay.bytes - lay.ring0), capacity);
    if (!ring) return fail_null<ibv_srq>(EINVAL);
    srq->ring = *ring;

    const shm::CreateSrqReq req{pd->handle,      attr->max_wr, attr->max_sge,
                                attr->srq_limit, capacity,     0};
    shm::CreateSrqReply rep{};
    const int fds[1] = {memfd.get()};
    if (const int err = ctx->conn.call(shm::CtrlOp::create_srq, req, &rep, fds); err != 0)
        return fail_null<ibv_srq>(err);
    attr->max_wr = rep.max_wr;
    attr->max_sge = rep.max_sge;
    srq->max_wr = rep.max_wr;
    srq->max_sge = rep.max_sge;
    srq->srq_limit = attr->srq_limit;
    srq->srq_num = rep.srq_num;
    ibv_srq& s = srq->srq;
    s.context = pd->context;
    s.srq_context = srq_context;
    s.pd = pd;
    s.handle = rep.srq;
    ::pthread_mutex_init(&s.mutex, nullptr);
    ::pthread_cond_init(&s.cond, nullptr);
    std::lock_guard lock(ctx->objs_mu);
    ctx->srqs.emplace(rep.srq, srq.get());
    return &srq.release()->srq;
}

}  // namespace

void release_srq_local(Srq* srq) {
    ::pthread_mutex_destroy(&srq->srq.mutex);
    ::pthread_cond_destroy(&srq->srq.cond);
    delete srq;
}

namespace ops {

ibv_srq* create_srq_ex(ibv_context* c, ibv_srq_init_attr_ex* attr) {
    return guarded<ibv_srq*>(nullptr, [&]() -> ibv_srq* {
        constexpr std::uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                         IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                                         IBV_SRQ_INIT_ATTR_TM;
        if ((attr->comp_mask & ~kKnown) != 0 || (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 ||
            attr->pd == nullptr || attr->pd->context != c)
            return fail_null<ibv_srq>(EINVAL);
        if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 && attr->srq_type != IBV_SRQT_BASIC)
            return fail_null<ibv_srq>(EOPNOTSUPP);  // no XRC, no tag matching
        if ((attr->comp_mask & (IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_TM)) != 0)
            return fail_null<ibv_srq>(EOPNOTSUPP);
        return create_srq(attr->pd, attr->srq_context, &attr->attr);
    });
}

int get_srq_num(ibv_srq* srq, std::uint32_t* num) {
    *num = to_srq(srq)->srq_num;
    return 0;
}

int post_srq_recv(ibv_srq* s, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
    Srq* srq = to_srq(s);
    int err = 0;
    srq->lock.lock();
    shm::RecvWqe w;
    for (; wr != nullptr; wr = wr->next) {
        if (wr->num_sge < 0 || static_cast<std::uint32_t>(wr->num_sge) > srq->max_sge ||
            (wr->num_sge > 0 && wr->sg_list == nullptr)) {
            err = EINVAL;
            break;
        }
        w.wr_id = wr->wr_id;
        w.num_sge = static_cast<std::uint32_t>(wr->num_sge);
        for (int i = 0; i < wr->num_sge; ++i)
            w.sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
        if (!srq->ring->try_stage(w)) {
            err = ENOMEM;
            break;
        }
    }
    srq->ring->publish();
    srq->lock.unlock();
    if (err != 0) *bad_wr = wr, errno = err;
    return err;
}

}  // namespace ops

}  // namespace snic::client

using namespace snic::client;
namespace shm = snic::shm;

SNIC_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
    return guarded<ibv_srq*>(nullptr,
                             [&] { return create_srq(pd, attr->srq_context, &attr->attr); });
}

namespace snic::client {
namespace {

// ibv_modify_srq with IBV_SRQ_MAX_WR: a new shared area of the new capacity goes to snicd,
// which moves the WQEs not yet taken into it, in order, and takes WQEs from there on; the
// reply says where the producer resumes. The post lock is held from before the request to
// the switch, so that no post lands in the old ring meanwhile (other posters wait, spinning).
int resize_srq(Srq* srq, const ibv_srq_attr* attr, int mask) {
    Context* ctx = to_ctx(srq->srq.context);
    if (attr->max_wr < 1 || attr->max_wr > ctx->limits.max_srq_wr) return EINVAL;
    const std::uint32_t capacity = shm::wq_capacity_for(attr->max_wr);
    if (capacity == 0) return EINVAL;
    const shm::Layout lay = shm::srq_layout(capacity);
    Fd memfd;
    Mapping map;
    if (const int err = make_shared_area("libsnic-srq", lay.bytes, &memfd, &map); err != 0)
        return err;
    const shm::ModifySrqReq req{srq->srq.handle, static_cast<std::uint32_t>(mask),
                                attr->max_wr,    attr->srq_limit,
                                capacity,        0};
    shm::ModifySrqReply rep{};
    const int fds[1] = {memfd.get()};
    Mapping old;  // unmapped once the lock is released
    std::lock_guard lock(srq->lock);
    if (const int err = ctx->conn.call(shm::CtrlOp::modify_srq, req, &rep, fds); err != 0)
        return err;
    // snicd formatted the ring and filled it: the producer takes its indices from there.
    auto ring = shm::RingProducer<shm::RecvWqe>::attach(
        std::span(map.data() + lay.ring0, lay.bytes - lay.ring0));
    if (!ring || ring->capacity() != capacity || rep.capacity != capacity ||
        ring->size() > rep.prod)
        return EIO;  // snicd broke the protocol
    srq->ring = *ring;
    old = std::exchange(srq->map, std::move(map));
    srq->max_wr = rep.max_wr;
    return 0;
}

}  // namespace
}  // namespace snic::client

SNIC_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask) {
    return errno_verb([&] {
        if ((mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) != 0) return EINVAL;
        Srq* s = to_srq(srq);
        if ((mask & IBV_SRQ_MAX_WR) != 0) {
            if (const int err = resize_srq(s, attr, mask); err != 0) return err;
        } else {
            const shm::ModifySrqReq req{
                srq->handle, static_cast<std::uint32_t>(mask), attr->max_wr, attr->srq_limit, 0, 0};
            shm::ModifySrqReply rep{};
            if (const int err = to_ctx(srq->context)->conn.call(shm::CtrlOp::modify_srq, req, &rep);
                err != 0)
                return err;
        }
        if ((mask & IBV_SRQ_LIMIT) != 0) s->srq_limit = attr->srq_limit;
        return 0;
    });
}

SNIC_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* attr) {
    return errno_verb([&] {
        shm::QuerySrqReply rep{};
        if (const int err =
                to_ctx(srq->context)
                    ->conn.call(shm::CtrlOp::query_srq, shm::HandleReq{srq->handle, 0}, &rep);
            err != 0)
            return err;
        attr->max_wr = rep.max_wr;
        attr->max_sge = rep.max_sge;
        attr->srq_limit = rep.srq_limit;
        return 0;
    });
}

SNIC_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
    return errno_verb([&] {
        Srq* s = to_srq(srq);
        Context* ctx = to_ctx(srq->context);
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::destroy_srq, srq->handle); err != 0)
            return err;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->srqs.erase(srq->handle);
        }
        ::pthread_mutex_lock(&srq->mutex);
        while (srq->events_completed != s->events_reported)
            ::pthread_cond_wait(&srq->cond, &srq->mutex);
        ::pthread_mutex_unlock(&srq->mutex);
        release_srq_local(s);
        return 0;
    });
}
