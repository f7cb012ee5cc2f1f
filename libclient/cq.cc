// Completion queues and completion channels.
//
// A CQ is a ring of Cqe that snicd produces and the client consumes; its
// memfd starts with CqControl, whose arm word ibv_req_notify_cq sets. A
// completion channel is a notification socket and a ring of CQ handles: snicd
// pushes the handle of an armed CQ that got an entry, then writes one byte.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "libclient/internal.h"
#include "libclient/snic/snic_ext.h"
#include "proto/verbs/wr.h"

namespace snic::client {

namespace {

constexpr std::uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;

// The CQE's wc_flags as ibv_wc has them: verbs' flags, and SNIC_WC_SOLICITED where the CQ
// reports it.
unsigned int wc_flags_of(const Cq& cq, const shm::Cqe& e) {
    static_assert(SNIC_WC_SOLICITED == std::uint32_t{shm::kCqeSolicited} << 24);
    return (e.wc_flags & ~shm::kCqeSolicited) |
           static_cast<unsigned int>(e.wc_flags & cq.solicited_mask) << 24;
}

void to_wc(const Cq& cq, const shm::Cqe& e, ibv_wc* wc) {
    wc->wr_id = e.wr_id;
    wc->status = static_cast<ibv_wc_status>(e.status);
    wc->opcode = static_cast<ibv_wc_opcode>(e.opcode);
    wc->vendor_err = e.vendor_err;
    wc->byte_len = e.byte_len;
    wc->imm_data = e.ex;
    wc->qp_num = e.qp_num;
    wc->src_qp = e.src_qp;
    wc->wc_flags = wc_flags_of(cq, e);
    wc->pkey_index = e.pkey_index;
    wc->slid = e.slid;
    wc->sl = e.sl;
    wc->dlid_path_bits = e.dlid_path_bits;
}

// ---- after snicd died ----
//
// What an RNIC does on a fatal error: every WR it had not completed completes with
// IBV_WC_WR_FLUSH_ERR. snicd published how far it got with each queue (QpControl::sq_done and
// rq_done); what lies between that and our producer index is outstanding, and the WQEs are
// still in our rings. The CQEs snicd made are polled first; the flush completions follow, for
// the QPs whose send or receive queue completes to this CQ. An SRQ's WQEs stay with the SRQ,
// as verbs has it (ibv_destroy_srq gives them back).

// Flush completions for the WQEs of `ring` from index `done` on, oldest first. At most one
// capacity of them: an application that kept more outstanding than max_send_wr/max_recv_wr
// let us reuse the slots of the oldest ones, whose ids are gone.
template <class T, class Opcode>
void flush_ring(std::vector<shm::Cqe>& out, const shm::RingProducer<T>& ring, std::uint32_t done,
                std::uint32_t qp_num, Opcode opcode) {
    const std::uint32_t end = ring.produced();
    const std::uint32_t n = std::min(end - done, ring.capacity());
    for (std::uint32_t i = end - n; i != end; ++i) {
        const T w = ring.entry(i);
        shm::Cqe c{};
        c.wr_id = w.wr_id;
        c.status = IBV_WC_WR_FLUSH_ERR;
        c.opcode = opcode(w);
        c.qp_num = qp_num;
        out.push_back(c);
    }
}

std::uint32_t load_done(std::uint32_t& word) {
    return std::atomic_ref<std::uint32_t>(word).load(std::memory_order_acquire);
}

void build_flush(Cq* cq) {
    cq->flush_built = true;
    const ibv_cq* self = ibv_cq_ex_to_cq(&cq->cq);
    std::lock_guard lock(cq->ctx->objs_mu);
    for (const auto& [handle, qp] : cq->ctx->qps) {
        const ibv_qp& b = qp->qpx.qp_base;
        if (b.send_cq == self && qp->sq) {
            std::lock_guard sq(qp->sq_lock);
            flush_ring(cq->flushed, *qp->sq, load_done(qp->control->sq_done), b.qp_num,
                       [](const shm::SendWqe& w) {
                           return static_cast<std::uint8_t>(verbs::send_wc_opcode(w.opcode));
                       });
        }
        if (b.recv_cq == self && qp->rq) {
            std::lock_guard rq(qp->rq_lock);
            flush_ring(cq->flushed, *qp->rq, load_done(qp->control->rq_done), b.qp_num,
                       [](const shm::RecvWqe&) { return std::uint8_t{IBV_WC_RECV}; });
        }
    }
}

// The next flush completion, once snicd is known to be gone and its CQEs are polled; false
// when none is left. Under the CQ's lock.
bool pop_flushed(Cq* cq, shm::Cqe& out) {
    if (!cq->flush_built) build_flush(cq);
    if (cq->flushed_polled == cq->flushed.size()) return false;
    out = cq->flushed[cq->flushed_polled++];
    return true;
}

// Whether snicd is gone, asked after an empty poll: known already, or looked at once every
// kLivenessPolls empty polls (one poll(2), never blocking).
bool gone_after_empty_poll(Cq* cq) {
    return daemon_dead(cq->ctx) ||
           (++cq->empty_polls % kLivenessPolls == 0 && daemon_gone(cq->ctx));
}

// ---- the ibv_cq_ex polling interface ----

int start_poll(ibv_cq_ex* c, ibv_poll_cq_attr* attr) {
    Cq* cq = to_cq(c);
    if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
    if (!cq->single_threaded) cq->lock.lock();
    if (!cq->ring->try_pop(cq->cur) && !(gone_after_empty_poll(cq) && pop_flushed(cq, cq->cur))) {
        // Nothing more will come from a daemon that is gone: say so instead of "empty".
        const bool gone = daemon_dead(cq->ctx);
        if (!cq->single_threaded) cq->lock.unlock();
        return gone ? EIO : ENOENT;
    }
    c->wr_id = cq->cur.wr_id;
    c->status = static_cast<ibv_wc_status>(cq->cur.status);
    return 0;
}

int next_poll(ibv_cq_ex* c) {
    Cq* cq = to_cq(c);
    if (!cq->ring->try_pop(cq->cur) && !(daemon_dead(cq->ctx) && pop_flushed(cq, cq->cur)))
        return ENOENT;
    c->wr_id = cq->cur.wr_id;
    c->status = static_cast<ibv_wc_status>(cq->cur.status);
    return 0;
}

void end_poll(ibv_cq_ex* c) {
    Cq* cq = to_cq(c);
    if (!cq->single_threaded) cq->lock.unlock();
}

ibv_wc_opcode read_opcode(ibv_cq_ex* c) {
    return static_cast<ibv_wc_opcode>(to_cq(c)->cur.opcode);
}
std::uint32_t read_vendor_err(ibv_cq_ex* c) {
    return to_cq(c)->cur.vendor_err;
}
std::uint32_t read_byte_len(ibv_cq_ex* c) {
    return to_cq(c)->cur.byte_len;
}
__be32 read_imm_data(ibv_cq_ex* c) {
    return to_cq(c)->cur.ex;
}
std::uint32_t read_qp_num(ibv_cq_ex* c) {
    return to_cq(c)->cur.qp_num;
}
std::uint32_t read_src_qp(ibv_cq_ex* c) {
    return to_cq(c)->cur.src_qp;
}
unsigned int read_wc_flags(ibv_cq_ex* c) {
    const Cq* cq = to_cq(c);
    return wc_flags_of(*cq, cq->cur);
}
std::uint32_t read_slid(ibv_cq_ex* c) {
    return to_cq(c)->cur.slid;
}
std::uint8_t read_sl(ibv_cq_ex* c) {
    return to_cq(c)->cur.sl;
}
std::uint8_t read_dlid_path_bits(ibv_cq_ex* c) {
    return to_cq(c)->cur.dlid_path_bits;
}

ibv_cq_ex* create_cq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* channel,
                     int comp_vector, std::uint64_t wc_flags, std::uint32_t flags) {
    Context* ctx = to_ctx(c);
    if (cqe < 1 || static_cast<std::uint32_t>(cqe) > ctx->limits.max_cqe)
        return fail_null<ibv_cq_ex>(EINVAL);
    if (comp_vector < 0 || comp_vector >= c->num_comp_vectors) return fail_null<ibv_cq_ex>(EINVAL);
    if (channel != nullptr && channel->context != c) return fail_null<ibv_cq_ex>(EINVAL);
    const std::uint32_t capacity = shm::cq_capacity_for(static_cast<std::uint32_t>(cqe));
    if (capacity == 0) return fail_null<ibv_cq_ex>(EINVAL);

    auto cq = std::make_unique<Cq>();
    const shm::Layout lay = shm::cq_layout(capacity);
    Fd memfd;
    if (const int err = make_shared_area("libsnic-cq", lay.bytes, &memfd, &cq->map); err != 0)
        return fail_null<ibv_cq_ex>(err);
    cq->control = ::new (cq->map.data() + lay.control) shm::CqControl{};
    auto ring = shm::RingConsumer<shm::Cqe>::init(
        std::span(cq->map.data() + lay.ring0, lay.bytes - lay.ring0), capacity);
    if (!ring) return fail_null<ibv_cq_ex>(EINVAL);
    cq->ring = *ring;

    Channel* ch = channel != nullptr ? to_channel(channel) : nullptr;
    const shm::CreateCqReq req{static_cast<std::uint32_t>(cqe), capacity,
                               ch != nullptr ? ch->handle : shm::kNoHandle,
                               static_cast<std::uint32_t>(comp_vector)};
    shm::CreateCqReply rep{};
    const int fds[1] = {memfd.get()};
    if (const int err = ctx->conn.call(shm::CtrlOp::create_cq, req, &rep, fds); err != 0)
        return fail_null<ibv_cq_ex>(err);

    ibv_cq_ex& x = cq->cq;
    x.context = c;
    x.channel = channel;
    x.cq_context = cq_context;
    x.handle = rep.cq;
    x.cqe = static_cast<int>(rep.cqe);
    ::pthread_mutex_init(&x.mutex, nullptr);
    ::pthread_cond_init(&x.cond, nullptr);
    x.start_poll = start_poll;
    x.next_poll = next_poll;
    x.end_poll = end_poll;
    x.read_opcode = read_opcode;
    x.read_vendor_err = read_vendor_err;
    x.read_byte_len = read_byte_len;
    x.read_imm_data = read_imm_data;
    x.read_qp_num = read_qp_num;
    x.read_src_qp = read_src_qp;
    x.read_wc_flags = read_wc_flags;
    x.read_slid = read_slid;
    x.read_sl = read_sl;
    x.read_dlid_path_bits = read_dlid_path_bits;
    cq->ctx = ctx;
    cq->channel = ch;
    cq->single_threaded = (flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED) != 0;
    cq->wc_flags = wc_flags;

    std::lock_guard lock(ctx->objs_mu);
    if (ch != nullptr) ++ch->ch.refcnt;
    ctx->cqs.emplace(rep.cq, cq.get());
    return &cq.release()->cq;
}

}  // namespace

void release_cq_local(Cq* cq) {
    ::pthread_mutex_destroy(&cq->cq.mutex);
    ::pthread_cond_destroy(&cq->cq.cond);
    delete cq;
}

void release_channel_local(Channel* ch) {
    ::close(ch->ch.fd);
    delete ch;
}

namespace ops {

ibv_cq_ex* create_cq_ex(ibv_context* c, ibv_cq_init_attr_ex* attr) {
    return guarded<ibv_cq_ex*>(nullptr, [&]() -> ibv_cq_ex* {
        if ((attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) != 0)
            return fail_null<ibv_cq_ex>(EINVAL);
        if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0 && attr->parent_domain != nullptr)
            return fail_null<ibv_cq_ex>(EOPNOTSUPP);  // no parent domains
        std::uint32_t flags = 0;
        if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0) {
            flags = attr->flags;
            if ((flags &
                 ~(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) != 0)
                return fail_null<ibv_cq_ex>(EOPNOTSUPP);
        }
        if ((attr->wc_flags & ~kSupportedWcFlags) != 0) return fail_null<ibv_cq_ex>(EOPNOTSUPP);
        if (attr->cqe > static_cast<std::uint32_t>(INT32_MAX)) return fail_null<ibv_cq_ex>(EINVAL);
        return create_cq(c, static_cast<int>(attr->cqe), attr->cq_context, attr->channel,
                         static_cast<int>(attr->comp_vector), attr->wc_flags, flags);
    });
}

int poll_cq(ibv_cq* c, int n, ibv_wc* wc) {
    Cq* cq = to_cq(c);
    if (n <= 0) return 0;
    shm::Cqe batch[16];
    int done = 0;
    if (!cq->single_threaded) cq->lock.lock();
    while (done < n) {
        const int want = n - done < 16 ? n - done : 16;
        const std::uint32_t got =
            cq->ring->pop_burst(std::span(batch, static_cast<std::size_t>(want)));
        for (std::uint32_t i = 0; i < got; ++i)
            to_wc(*cq, batch[i], &wc[done + static_cast<int>(i)]);
        done += static_cast<int>(got);
        if (got < static_cast<std::uint32_t>(want)) break;
    }
    bool gone = false;
    if (done < n && (done > 0 ? daemon_dead(cq->ctx) : gone_after_empty_poll(cq))) {
        gone = true;
        while (done < n && pop_flushed(cq, batch[0])) to_wc(*cq, batch[0], &wc[done++]);
    }
    if (!cq->single_threaded) cq->lock.unlock();
    // Nothing more will come from a daemon that is gone: an error, not "empty" forever (a
    // busy-polling program would spin on).
    if (done == 0 && gone) {
        errno = EIO;
        return -1;
    }
    return done;
}

int req_notify_cq(ibv_cq* c, int solicited_only) {
    Cq* cq = to_cq(c);
    std::atomic_ref<std::uint32_t> arm(cq->control->arm);
    if (solicited_only) {
        std::uint32_t expected = 0;  // an armed "next" stays armed for any entry
        arm.compare_exchange_strong(expected, shm::kArmSolicited, std::memory_order_release,
                                    std::memory_order_relaxed);
    } else {
        arm.store(shm::kArmNext, std::memory_order_release);
    }
    // Store the arm, then (in the caller's next poll) load the next CQE's seq; snicd stores
    // the CQE's seq, then loads the arm. Without a full fence on both sides each could
    // miss the other's store: a CQE nobody polls and no event for it (a lost wakeup).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return 0;
}

}  // namespace ops

}  // namespace snic::client

using namespace snic::client;
namespace shm = snic::shm;

SNIC_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* c) {
    return guarded<ibv_comp_channel*>(nullptr, [&]() -> ibv_comp_channel* {
        Context* ctx = to_ctx(c);
        auto ch = std::make_unique<Channel>();
        Fd ours, theirs;
        if (const int err = make_notify_pair(&ours, &theirs); err != 0)
            return fail_null<ibv_comp_channel>(err);
        const shm::Layout lay = shm::channel_layout(shm::kChannelCapacity);
        Fd memfd;
        if (const int err = make_shared_area("libsnic-channel", lay.bytes, &memfd, &ch->map);
            err != 0)
            return fail_null<ibv_comp_channel>(err);
        auto ring = shm::RingConsumer<std::uint32_t>::init(
            std::span(ch->map.data() + lay.ring0, lay.bytes - lay.ring0), shm::kChannelCapacity);
        if (!ring) return fail_null<ibv_comp_channel>(EINVAL);
        ch->ring = *ring;
        shm::HandleReply rep{};
        const int fds[2] = {theirs.get(), memfd.get()};
        if (const int err = ctx->conn.call(shm::CtrlOp::create_channel, shm::Empty{}, &rep, fds);
            err != 0)
            return fail_null<ibv_comp_channel>(err);
        ch->handle = rep.handle;
        ch->ch.context = c;
        ch->ch.fd = ours.release();
        ch->ch.refcnt = 0;
        std::lock_guard lock(ctx->objs_mu);
        ctx->channels.insert(ch.get());
        return &ch.release()->ch;
    });
}

SNIC_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    return errno_verb([&] {
        Context* ctx = to_ctx(channel->context);
        Channel* ch = to_channel(channel);
        {
            std::lock_guard lock(ctx->objs_mu);
            if (channel->refcnt != 0) return EBUSY;
        }
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::destroy_channel, ch->handle);
            err != 0)
            return err;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->channels.erase(ch);
        }
        release_channel_local(ch);
        return 0;
    });
}

SNIC_EXPORT ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void* cq_context,
                                  ibv_comp_channel* channel, int comp_vector) {
    return guarded<ibv_cq*>(nullptr, [&]() -> ibv_cq* {
        ibv_cq_ex* cq =
            create_cq(c, cqe, cq_context, channel, comp_vector, IBV_WC_STANDARD_FLAGS, 0);
        return cq != nullptr ? ibv_cq_ex_to_cq(cq) : nullptr;
    });
}

SNIC_EXPORT int ibv_resize_cq(ibv_cq*, int) {
    return fail_status(EOPNOTSUPP);  // the CQ ring is sized once, at creation
}

SNIC_EXPORT int ibv_destroy_cq(ibv_cq* c) {
    return errno_verb([&] {
        Cq* cq = to_cq(c);
        Context* ctx = cq->ctx;
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::destroy_cq, c->handle); err != 0)
            return err;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->cqs.erase(c->handle);
            if (cq->channel != nullptr) --cq->channel->ch.refcnt;
        }
        // Events handed out must be acknowledged before the CQ goes away.
        ::pthread_mutex_lock(&c->mutex);
        while (c->comp_events_completed != cq->comp_events_reported ||
               c->async_events_completed != cq->async_events_reported)
            ::pthread_cond_wait(&c->cond, &c->mutex);
        ::pthread_mutex_unlock(&c->mutex);
        release_cq_local(cq);
        return 0;
    });
}

SNIC_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq_out, void** cq_context) {
    return guarded(-1, [&] {
        Channel* ch = to_channel(channel);
        Context* ctx = to_ctx(channel->context);
        for (;;) {
            if (const int err = take_notify(channel->fd); err != 0) {
                errno = err;  // EAGAIN when the application made the channel non-blocking
                return -1;
            }
            std::uint32_t handle;
            {
                std::lock_guard lock(ch->mu);
                if (!ch->ring->try_pop(handle)) {
                    errno = EIO;
                    return -1;
                }
            }
            std::lock_guard lock(ctx->objs_mu);
            auto it = ctx->cqs.find(handle);
            if (it == ctx->cqs.end() || it->second->channel != ch) continue;  // destroyed since
            Cq* cq = it->second;
            ++cq->comp_events_reported;
            *cq_out = ibv_cq_ex_to_cq(&cq->cq);
            *cq_context = cq->cq.cq_context;
            return 0;
        }
    });
}

SNIC_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    ::pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    ::pthread_cond_signal(&cq->cond);
    ::pthread_mutex_unlock(&cq->mutex);
}
