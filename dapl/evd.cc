// libdaplsnic: event dispatchers and consumer notification objects. A DTO EVD owns a
// completion queue (and its channel, for waiting); every EVD also holds the software,
// connection and asynchronous events other threads queue on it.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include "dapl/provider.h"
#include "libclient/snic/snic_ext.h"

namespace snic::dapl {

namespace {

constexpr int kReapBurst = 16;

// Work completion status -> DTO completion status.
struct StatusRow {
    ibv_wc_status wc;
    DAT_DTO_COMPLETION_STATUS dat;
};
constexpr StatusRow kStatus[] = {
    {IBV_WC_SUCCESS, DAT_DTO_SUCCESS},
    {IBV_WC_LOC_LEN_ERR, DAT_DTO_ERR_LOCAL_LENGTH},
    {IBV_WC_LOC_QP_OP_ERR, DAT_DTO_ERR_LOCAL_EP},
    {IBV_WC_LOC_PROT_ERR, DAT_DTO_ERR_LOCAL_PROTECTION},
    {IBV_WC_WR_FLUSH_ERR, DAT_DTO_ERR_FLUSHED},
    {IBV_WC_MW_BIND_ERR, DAT_RMR_OPERATION_FAILED},
    {IBV_WC_BAD_RESP_ERR, DAT_DTO_ERR_BAD_RESPONSE},
    {IBV_WC_LOC_ACCESS_ERR, DAT_DTO_ERR_LOCAL_PROTECTION},
    {IBV_WC_REM_INV_REQ_ERR, DAT_DTO_ERR_REMOTE_RESPONDER},
    {IBV_WC_REM_ACCESS_ERR, DAT_DTO_ERR_REMOTE_ACCESS},
    {IBV_WC_REM_OP_ERR, DAT_DTO_ERR_REMOTE_RESPONDER},
    {IBV_WC_RETRY_EXC_ERR, DAT_DTO_ERR_TRANSPORT},
    {IBV_WC_RNR_RETRY_EXC_ERR, DAT_DTO_ERR_RECEIVER_NOT_READY},
    {IBV_WC_REM_ABORT_ERR, DAT_DTO_ERR_REMOTE_RESPONDER},
};

DAT_DTO_COMPLETION_STATUS dto_status(ibv_wc_status s) {
    for (const StatusRow& r : kStatus)
        if (r.wc == s) return r.dat;
    return DAT_DTO_ERR_TRANSPORT;
}

void wake(int fd) {
    if (fd < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
}

void drain(int fd) {
    std::uint64_t v;
    [[maybe_unused]] const ssize_t n = ::read(fd, &v, sizeof v);
}

// A completion as the DAT event it is: a DTO completion, an RMR bind completion, or an
// IB extension DTO event (immediate data, atomics).
bool to_event(Evd* evd, const ibv_wc& wc, Slot* s, Ep* ep, DAT_EVENT* e) {
    *e = DAT_EVENT{};
    e->evd_handle = evd;
    if (s->op == -1) {
        e->event_number = DAT_RMR_BIND_COMPLETION_EVENT;
        auto& b = e->event_data.rmr_completion_event_data;
        b.rmr_handle = s->rmr;
        b.user_cookie = s->rmr_cookie;
        b.status = wc.status == IBV_WC_SUCCESS ? DAT_RMR_BIND_SUCCESS : DAT_RMR_BIND_FAILURE;
        return true;
    }
    e->event_number = DAT_DTO_COMPLETION_EVENT;
    auto& d = e->event_data.dto_completion_event_data;
    d.ep_handle = ep;
    d.user_cookie = s->cookie;
    d.status = dto_status(wc.status);
    d.operation = static_cast<DAT_DTOS>(s->op);
    const bool recv = s->op == DAT_DTO_RECEIVE;
    d.transfered_length = recv ? wc.byte_len : s->length;
    auto* x = reinterpret_cast<DAT_IB_EXTENSION_EVENT_DATA*>(e->event_extension_data);
    x->status = wc.status == IBV_WC_SUCCESS ? DAT_OP_SUCCESS : DAT_IB_OP_ERR;
    if (recv && wc.status == IBV_WC_SUCCESS) {
        if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            e->event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_DTO_EVENT);
            d.operation = static_cast<DAT_DTOS>(DAT_IB_DTO_RECV_IMMED);
            x->type = DAT_IB_RDMA_WRITE_IMMED_DATA;
            x->val.immed.data = ntohl(wc.imm_data);
        } else if ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) {
            e->event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_DTO_EVENT);
            d.operation = static_cast<DAT_DTOS>(DAT_IB_DTO_RECV_MSG_IMMED);
            x->type = DAT_IB_RECV_IMMED_DATA;
            x->val.immed.data = ntohl(wc.imm_data);
        } else if ((wc.wc_flags & IBV_WC_WITH_INV) != 0) {
            d.operation = DAT_DTO_RECEIVE_WITH_INVALIDATE;
            d.rmr_context = wc.invalidated_rkey;
        }
        return true;
    }
    switch (s->op) {
        case DAT_IB_DTO_RDMA_WRITE_IMMED:
            e->event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_DTO_EVENT);
            x->type = DAT_IB_RDMA_WRITE_IMMED;
            break;
        case DAT_IB_DTO_FETCH_ADD:
            e->event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_DTO_EVENT);
            x->type = DAT_IB_FETCH_AND_ADD;
            break;
        case DAT_IB_DTO_CMP_SWAP:
            e->event_number = static_cast<DAT_EVENT_NUMBER>(DAT_IB_DTO_EVENT);
            x->type = DAT_IB_CMP_AND_SWAP;
            break;
        default:
            break;
    }
    return true;
}

}  // namespace

Evd::~Evd() {
    if (cq != nullptr) ibv_destroy_cq(cq);
    if (channel != nullptr) ibv_destroy_comp_channel(channel);
    if (wake_fd >= 0) ::close(wake_fd);
}

Cno::~Cno() {
    if (wake_fd >= 0) ::close(wake_fd);
}

void Evd::post(const DAT_EVENT& e) {
    Cno* c = nullptr;
    {
        std::lock_guard lock(mu);
        if (static_cast<DAT_COUNT>(events.size()) >= qlen) {
            // Overflow: the event is lost, and the IA's async EVD says so (once per
            // overflowing EVD until it drains).
            if (!overflowed && ia->async_evd != nullptr && ia->async_evd != this) {
                overflowed = true;
                DAT_EVENT o{};
                o.event_number = DAT_ASYNC_ERROR_EVD_OVERFLOW;
                o.event_data.asynch_error_event_data.dat_handle = this;
                o.event_data.asynch_error_event_data.reason = DAT_EVD_OVERFLOW_ERROR;
                Evd* async = ia->async_evd;
                mu.unlock();
                async->post(o);
                mu.lock();
            }
            return;
        }
        overflowed = false;
        events.push_back(Queued{e});
        events.back().event.evd_handle = this;
        quiet = 0;
        c = cno;
    }
    wake(wake_fd);
    if (c != nullptr) wake(c->wake_fd);
}

bool Evd::reap(int max) {
    if (cq == nullptr) return false;
    ibv_wc wcs[kReapBurst];
    bool any = false;
    while (max > 0) {
        const int n = ibv_poll_cq(cq, std::min(max, kReapBurst), wcs);
        if (n <= 0) break;
        max -= n;
        for (int i = 0; i < n; ++i) {
            const ibv_wc& wc = wcs[i];
            auto* s = reinterpret_cast<Slot*>(static_cast<std::uintptr_t>(wc.wr_id));
            Ep* ep = s->in_srq ? ep_by_qpn(ia, wc.qp_num) : s->ep;  // an SRQ's: none once freed
            const bool recv = s->op == DAT_DTO_RECEIVE;
            Srq* srq = s->in_srq ? s->srq : nullptr;
            bool wait_solicited = s->solicited_wait;
            if (srq != nullptr) {
                std::lock_guard lock(srq->mu);
                srq->free.push_back(s);  // the slot is done with; the buffer is reaped when taken
            } else if (recv) {
                ep->rq.retire_through(s);
            } else {
                ep->sq.retire_through(s);
            }
            if (ep == nullptr || !ep->live(Kind::ep)) {  // a freed EP's completions are dropped
                if (srq != nullptr) srq->reaped.fetch_add(1, std::memory_order_release);
                continue;
            }
            Queued q;
            to_event(this, wc, s, ep, &q.event);
            if (recv) {
                q.ep = ep;
                q.srq = srq;
                q.epoch = ep->epoch.load(std::memory_order_acquire);
                if (srq != nullptr)
                    wait_solicited =
                        (ep->attr.recv_completion_flags & DAT_COMPLETION_SOLICITED_WAIT_FLAG) != 0;
            }
            // An error always wakes; a successful receive that waits for a solicited event
            // wakes only when its message asked for one.
            const bool wakes = !recv || !wait_solicited || wc.status != IBV_WC_SUCCESS ||
                               (wc.wc_flags & SNIC_WC_SOLICITED) != 0;
            events.push_back(q);
            quiet = wakes ? 0 : quiet + 1;
            any = true;
        }
    }
    return any;
}

namespace {

// The consumer has the receive's event (or its EP is gone): its buffer counts as reaped.
void credit(const Queued& q) {
    if (q.ep != nullptr && q.epoch == q.ep->epoch.load(std::memory_order_acquire))
        q.ep->recv_reaped.fetch_add(1, std::memory_order_release);
    if (q.srq != nullptr) q.srq->reaped.fetch_add(1, std::memory_order_release);
}

}  // namespace

DAT_RETURN Evd::take(DAT_EVENT* out) {
    if (events.empty()) return DAT_QUEUE_EMPTY;  // bare, as consumers compare it
    *out = events.front().event;
    credit(events.front());
    events.pop_front();
    quiet = std::min(quiet, events.size());
    return DAT_SUCCESS;
}

void Evd::forget(Ep* ep) {
    std::lock_guard lock(mu);
    reap(std::numeric_limits<int>::max());  // the CQ holds no more of its completions
    for (Queued& q : events) {
        if (q.ep != ep) continue;
        credit(q);
        q.ep = nullptr;
        q.srq = nullptr;
    }
}

DAT_RETURN evd_create(DAT_IA_HANDLE h, DAT_COUNT qlen, DAT_CNO_HANDLE cnoh, DAT_EVD_FLAGS flags,
                      DAT_EVD_HANDLE* out) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    if (qlen <= 0 || qlen > ia->dev_attr.max_cqe)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    Cno* cno = nullptr;
    if (cnoh != DAT_HANDLE_NULL) {
        cno = as<Cno>(cnoh);
        if (cno == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    }
    auto evd = std::make_unique<Evd>(ia->provider, ia);
    evd->flags = flags;
    evd->qlen = qlen;
    evd->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (evd->wake_fd < 0) return from_errno(errno);
    if ((flags & (DAT_EVD_DTO_FLAG | DAT_EVD_RMR_BIND_FLAG)) != 0) {
        evd->channel = ibv_create_comp_channel(ia->ctx);
        if (evd->channel == nullptr) return from_errno(errno);
        evd->cq = ibv_create_cq(ia->ctx, qlen, evd.get(), evd->channel, 0);
        if (evd->cq == nullptr) return from_errno(errno);
        snic_cq_report_solicited(evd->cq, 1);  // for receives that wait for solicited events
    }
    if (cno != nullptr) {
        std::lock_guard lock(cno->mu);
        cno->evds.push_back(evd.get());
        evd->cno = cno;
    }
    ++ia->objects;
    *out = evd.release();
    return DAT_SUCCESS;
}

DAT_RETURN evd_free(DAT_EVD_HANDLE h) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (evd->users.load() != 0) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_IN_USE);
    if (evd->cno != nullptr) {
        std::lock_guard lock(evd->cno->mu);
        auto& v = evd->cno->evds;
        v.erase(std::remove(v.begin(), v.end(), evd), v.end());
    }
    if (evd->cq != nullptr) {
        if (evd->armed) {
            ibv_cq* cq = nullptr;
            void* ctx = nullptr;
            pollfd p{evd->channel->fd, POLLIN, 0};
            if (::poll(&p, 1, 0) == 1 && ibv_get_cq_event(evd->channel, &cq, &ctx) == 0)
                ibv_ack_cq_events(cq, 1);
        }
        if (ibv_destroy_cq(evd->cq) != 0) return from_errno(errno);
        evd->cq = nullptr;
    }
    --evd->ia->objects;
    retire(evd);
    return DAT_SUCCESS;
}

namespace {

// Takes the CQ's pending notification, if any: the CQ must be armed again.
void collect_notification(Evd* evd) {
    if (evd->channel == nullptr) return;
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    pollfd p{evd->channel->fd, POLLIN, 0};
    while (::poll(&p, 1, 0) == 1 && ibv_get_cq_event(evd->channel, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        evd->armed = false;
    }
}

int remaining_ms(std::chrono::steady_clock::time_point deadline, bool infinite) {
    if (infinite) return -1;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30));
}

DAT_RETURN evd_wait(DAT_EVD_HANDLE h, DAT_TIMEOUT timeout, DAT_COUNT threshold, DAT_EVENT* out,
                    DAT_COUNT* nmore) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    if (threshold <= 0 || (threshold > 1 && threshold > evd->qlen))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    const bool infinite = timeout == DAT_TIMEOUT_INFINITE;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout);
    std::unique_lock lock(evd->mu);
    if (!evd->waitable) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
    for (;;) {
        evd->reap(evd->qlen);
        if (static_cast<DAT_COUNT>(evd->waking()) >= threshold) {
            evd->take(out);
            if (nmore != nullptr) *nmore = static_cast<DAT_COUNT>(evd->events.size());
            return DAT_SUCCESS;
        }
        if (evd->cq != nullptr && !evd->armed) {
            ibv_req_notify_cq(evd->cq, 0);
            evd->armed = true;
            continue;  // a completion may have arrived before the CQ was armed
        }
        const int ms = remaining_ms(deadline, infinite);
        if (ms == 0) {
            if (nmore != nullptr) *nmore = static_cast<DAT_COUNT>(evd->events.size());
            return DAT_TIMEOUT_EXPIRED;  // bare, as consumers compare it
        }
        pollfd fds[2] = {{evd->wake_fd, POLLIN, 0},
                         {evd->channel != nullptr ? evd->channel->fd : -1, POLLIN, 0}};
        lock.unlock();
        const int n = ::poll(fds, 2, ms);
        lock.lock();
        if (!evd->waitable) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EVD_UNWAITABLE);
        if (n < 0 && errno == EINTR) return err(DAT_INTERRUPTED_CALL);
        if ((fds[0].revents & POLLIN) != 0) drain(evd->wake_fd);
        if ((fds[1].revents & POLLIN) != 0) collect_notification(evd);
    }
}

DAT_RETURN evd_dequeue(DAT_EVD_HANDLE h, DAT_EVENT* out) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    std::lock_guard lock(evd->mu);
    if (evd->events.empty()) evd->reap(kReapBurst);
    return evd->take(out);
}

DAT_RETURN evd_query(DAT_EVD_HANDLE h, DAT_EVD_PARAM_MASK, DAT_EVD_PARAM* p) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    std::lock_guard lock(evd->mu);
    p->ia_handle = evd->ia;
    p->evd_qlen = evd->qlen;
    p->evd_state = static_cast<DAT_EVD_STATE>(
        (evd->enabled ? DAT_EVD_STATE_ENABLED : DAT_EVD_STATE_DISABLED) |
        (evd->waitable ? DAT_EVD_STATE_WAITABLE : DAT_EVD_STATE_UNWAITABLE));
    p->cno_handle = evd->cno;
    p->evd_flags = evd->flags;
    return DAT_SUCCESS;
}

DAT_RETURN evd_resize(DAT_EVD_HANDLE h, DAT_COUNT qlen) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (qlen <= 0 || qlen > evd->ia->dev_attr.max_cqe)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    std::lock_guard lock(evd->mu);
    if (static_cast<DAT_COUNT>(evd->events.size()) > qlen) return err(DAT_INVALID_STATE);
    if (evd->cq != nullptr && qlen > evd->qlen) {
        if (const int e = ibv_resize_cq(evd->cq, qlen); e != 0) return from_errno(e);
    }
    evd->qlen = std::max(qlen, evd->qlen);
    return DAT_SUCCESS;
}

DAT_RETURN evd_post_se(DAT_EVD_HANDLE h, const DAT_EVENT* e) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    if (e == nullptr || e->event_number != DAT_SOFTWARE_EVENT)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if ((evd->flags & DAT_EVD_SOFTWARE_FLAG) == 0)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG1);
    evd->post(*e);
    return DAT_SUCCESS;
}

DAT_RETURN evd_modify_cno(DAT_EVD_HANDLE h, DAT_CNO_HANDLE ch) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    Cno* cno = nullptr;
    if (ch != DAT_HANDLE_NULL) {
        cno = as<Cno>(ch);
        if (cno == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    }
    std::lock_guard lock(evd->mu);
    if (evd->cno != nullptr) {
        std::lock_guard l2(evd->cno->mu);
        auto& v = evd->cno->evds;
        v.erase(std::remove(v.begin(), v.end(), evd), v.end());
    }
    evd->cno = cno;
    if (cno != nullptr) {
        std::lock_guard l2(cno->mu);
        cno->evds.push_back(evd);
    }
    return DAT_SUCCESS;
}

template <bool Enabled>
DAT_RETURN evd_set_enabled(DAT_EVD_HANDLE h) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    std::lock_guard lock(evd->mu);
    evd->enabled = Enabled;
    return DAT_SUCCESS;
}

template <bool Waitable>
DAT_RETURN evd_set_waitable(DAT_EVD_HANDLE h) {
    Evd* evd = as<Evd>(h);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_REQUEST);
    {
        std::lock_guard lock(evd->mu);
        evd->waitable = Waitable;
    }
    wake(evd->wake_fd);  // a waiter returns DAT_INVALID_STATE
    return DAT_SUCCESS;
}

// ---- CNO ----

DAT_RETURN cno_create(DAT_IA_HANDLE h, DAT_OS_WAIT_PROXY_AGENT agent, DAT_CNO_HANDLE* out) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    auto cno = std::make_unique<Cno>(ia->provider, ia);
    cno->agent = agent;
    cno->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cno->wake_fd < 0) return from_errno(errno);
    ++ia->objects;
    *out = cno.release();
    return DAT_SUCCESS;
}

DAT_RETURN cno_modify_agent(DAT_CNO_HANDLE h, DAT_OS_WAIT_PROXY_AGENT agent) {
    Cno* cno = as<Cno>(h);
    if (cno == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    std::lock_guard lock(cno->mu);
    cno->agent = agent;
    return DAT_SUCCESS;
}

DAT_RETURN cno_query(DAT_CNO_HANDLE h, DAT_CNO_PARAM_MASK, DAT_CNO_PARAM* p) {
    Cno* cno = as<Cno>(h);
    if (cno == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    std::lock_guard lock(cno->mu);
    p->ia_handle = cno->ia;
    p->proxy_type = DAT_PROXY_TYPE_AGENT;
    p->proxy.agent = cno->agent;
    return DAT_SUCCESS;
}

DAT_RETURN cno_free(DAT_CNO_HANDLE h) {
    Cno* cno = as<Cno>(h);
    if (cno == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    {
        std::lock_guard lock(cno->mu);
        if (!cno->evds.empty()) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_CNO_IN_USE);
    }
    --cno->ia->objects;
    retire(cno);
    return DAT_SUCCESS;
}

// Returns when one of the CNO's EVDs holds an event (naming it), or on timeout.
DAT_RETURN cno_wait(DAT_CNO_HANDLE h, DAT_TIMEOUT timeout, DAT_EVD_HANDLE* out) {
    Cno* cno = as<Cno>(h);
    if (cno == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    const bool infinite = timeout == DAT_TIMEOUT_INFINITE;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout);
    for (;;) {
        std::vector<pollfd> fds{{cno->wake_fd, POLLIN, 0}};
        std::vector<Evd*> evds;
        {
            std::lock_guard lock(cno->mu);
            evds = cno->evds;
        }
        for (Evd* evd : evds) {
            std::lock_guard lock(evd->mu);
            evd->reap(evd->qlen);
            if (evd->cq != nullptr && !evd->armed && evd->waking() == 0) {
                ibv_req_notify_cq(evd->cq, 0);
                evd->armed = true;
                evd->reap(evd->qlen);
            }
            if (evd->waking() > 0 && evd->enabled) {
                if (out != nullptr) *out = evd;
                return DAT_SUCCESS;
            }
            fds.push_back({evd->wake_fd, POLLIN, 0});
            if (evd->channel != nullptr) fds.push_back({evd->channel->fd, POLLIN, 0});
        }
        const int ms = remaining_ms(deadline, infinite);
        if (ms == 0) {
            if (out != nullptr) *out = DAT_HANDLE_NULL;
            return DAT_TIMEOUT_EXPIRED;
        }
        const int n = ::poll(fds.data(), fds.size(), ms);
        if (n < 0 && errno == EINTR) return err(DAT_INTERRUPTED_CALL);
        if ((fds[0].revents & POLLIN) != 0) {
            drain(cno->wake_fd);
            if (evds.empty()) {  // dat_cno_trigger
                if (out != nullptr) *out = DAT_HANDLE_NULL;
                return DAT_SUCCESS;
            }
        }
        for (Evd* evd : evds) {
            std::lock_guard lock(evd->mu);
            collect_notification(evd);
            drain(evd->wake_fd);
        }
    }
}

DAT_RETURN cno_fd_create(DAT_IA_HANDLE, DAT_FD*, DAT_CNO_HANDLE*) {
    return err(DAT_NOT_IMPLEMENTED);
}

DAT_RETURN cno_trigger(DAT_CNO_HANDLE h, DAT_EVD_HANDLE* evd) {
    Cno* cno = as<Cno>(h);
    if (cno == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CNO);
    if (evd != nullptr) *evd = DAT_HANDLE_NULL;
    wake(cno->wake_fd);
    return DAT_SUCCESS;
}

}  // namespace

void fill_provider_evd(DAT_PROVIDER& p) {
    p.evd_create_func = evd_create;
    p.evd_query_func = evd_query;
    p.evd_modify_cno_func = evd_modify_cno;
    p.evd_enable_func = evd_set_enabled<true>;
    p.evd_disable_func = evd_set_enabled<false>;
    p.evd_wait_func = evd_wait;
    p.evd_resize_func = evd_resize;
    p.evd_post_se_func = evd_post_se;
    p.evd_dequeue_func = evd_dequeue;
    p.evd_free_func = evd_free;
    p.evd_set_unwaitable_func = evd_set_waitable<false>;
    p.evd_clear_unwaitable_func = evd_set_waitable<true>;
    p.cno_create_func = cno_create;
    p.cno_modify_agent_func = cno_modify_agent;
    p.cno_query_func = cno_query;
    p.cno_free_func = cno_free;
    p.cno_wait_func = cno_wait;
    p.cno_fd_create_func = cno_fd_create;
    p.cno_trigger_func = cno_trigger;
}

}  // namespace snic::dapl
