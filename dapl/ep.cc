// libdaplsnic: endpoints and the data transfer operations posted on them, including
// the IB extensions (RDMA Write with immediate data, compare-and-swap, fetch-and-add).
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstring>

#include "dapl/provider.h"
#include "libclient/snic/snic_ext.h"

namespace snic::dapl {

void SlotRing::init(Ep* ep, std::uint32_t n) {
    slots_.assign(n, Slot{});
    for (Slot& s : slots_) s.ep = ep;
    head_ = tail_ = 0;
}

Slot* SlotRing::take() {
    const std::uint32_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) >= slots_.size()) return nullptr;
    Slot* s = &slots_[t % slots_.size()];
    s->seq = t;
    s->rmr = nullptr;
    tail_.store(t + 1, std::memory_order_release);
    return s;
}

void SlotRing::untake() {
    tail_.store(tail_.load(std::memory_order_relaxed) - 1, std::memory_order_release);
}

void SlotRing::retire_through(const Slot* s) {
    head_.store(s->seq + 1, std::memory_order_release);
}

Ep* ep_by_qpn(Ia* ia, std::uint32_t qpn) {
    return ia->eps_by_qpn.find(qpn);
}

int qp_to_init(Ep* ep) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    return ibv_modify_qp(ep->qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int reset_qp(Ep* ep) {
    srq_keep_taken(ep);
    std::lock_guard lock(ep->post_mu);  // dat_ep_recv_query sees both counts before or after
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    if (const int e = ibv_modify_qp(ep->qp, &a, IBV_QP_STATE); e != 0) return e;
    ep->recv_posted.store(0, std::memory_order_release);
    ep->recv_reaped.store(0, std::memory_order_release);
    ep->epoch.fetch_add(1, std::memory_order_acq_rel);
    return qp_to_init(ep);
}

void flush_ep(Ep* ep) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(ep->qp, &a, IBV_QP_STATE);
}

namespace {

constexpr DAT_COUNT kDefaultDtos = 128;
constexpr DAT_COUNT kDefaultIov = 4;
constexpr DAT_COUNT kDefaultReads = 4;

DAT_EP_ATTR default_attr(const Ia* ia) {
    const ibv_device_attr& d = ia->dev_attr;
    DAT_EP_ATTR a{};
    a.service_type = DAT_SERVICE_TYPE_RC;
    a.max_message_size = ia->port_attr.max_msg_sz;
    a.max_rdma_size = ia->port_attr.max_msg_sz;
    a.qos = DAT_QOS_BEST_EFFORT;
    a.recv_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.request_completion_flags = DAT_COMPLETION_DEFAULT_FLAG;
    a.max_recv_dtos = std::min(kDefaultDtos, d.max_qp_wr);
    a.max_request_dtos = std::min(kDefaultDtos, d.max_qp_wr);
    a.max_recv_iov = std::min(kDefaultIov, d.max_sge);
    a.max_request_iov = std::min(kDefaultIov, d.max_sge);
    a.max_rdma_read_in = std::min(kDefaultReads, d.max_qp_rd_atom);
    a.max_rdma_read_out = std::min(kDefaultReads, d.max_qp_init_rd_atom);
    a.srq_soft_hw = DAT_HW_DEFAULT;
    a.max_rdma_read_iov = a.max_request_iov;
    a.max_rdma_write_iov = a.max_request_iov;
    return a;
}

DAT_RETURN check_attr(const Ia* ia, const DAT_EP_ATTR& a, bool srq) {
    const ibv_device_attr& d = ia->dev_attr;
    if (a.service_type != DAT_SERVICE_TYPE_RC) return err(DAT_MODEL_NOT_SUPPORTED);
    if (a.max_request_dtos < 0 || a.max_request_dtos > d.max_qp_wr || a.max_request_iov < 0 ||
        a.max_request_iov > d.max_sge || a.max_rdma_read_in < 0 ||
        a.max_rdma_read_in > d.max_qp_rd_atom || a.max_rdma_read_out < 0 ||
        a.max_rdma_read_out > d.max_qp_init_rd_atom || a.max_rdma_read_iov > d.max_sge ||
        a.max_rdma_write_iov > d.max_sge)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
    if (!srq && (a.max_recv_dtos < 0 || a.max_recv_dtos > d.max_qp_wr || a.max_recv_iov < 0 ||
                 a.max_recv_iov > d.max_sge))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
    return DAT_SUCCESS;
}

Evd* dto_evd(DAT_EVD_HANDLE h, DAT_RETURN* r, DAT_RETURN sub) {
    if (h == DAT_HANDLE_NULL) return nullptr;
    Evd* e = as<Evd>(h);
    if (e == nullptr || (e->flags & DAT_EVD_DTO_FLAG) == 0) *r = err(DAT_INVALID_HANDLE, sub);
    return e;
}

void release_ep(Ep* ep) {
    if (ep->qp != nullptr) {
        ep->ia->eps_by_qpn.put(ep->qp->qp_num, nullptr);
        ibv_destroy_qp(ep->qp);
        ep->qp = nullptr;
    }
    if (ep->own_send_cq != nullptr) ibv_destroy_cq(ep->own_send_cq);
    if (ep->own_recv_cq != nullptr) ibv_destroy_cq(ep->own_recv_cq);
    ep->own_send_cq = ep->own_recv_cq = nullptr;
}

// The EP's QP, made from its PZ, EVDs, SRQ and attributes, moved to INIT so that
// receives can be posted before a connection exists.
int make_qp(Ep* ep) {
    Ia* ia = ep->ia;
    const DAT_EP_ATTR& a = ep->attr;
    // A side with no EVD still needs a CQ; its completions are never reported.
    ibv_cq* scq = ep->request_evd != nullptr ? ep->request_evd->cq : nullptr;
    ibv_cq* rcq = ep->recv_evd != nullptr ? ep->recv_evd->cq : nullptr;
    if (scq == nullptr) scq = ep->own_send_cq = ibv_create_cq(ia->ctx, 1, nullptr, nullptr, 0);
    if (rcq == nullptr) rcq = ep->own_recv_cq = ibv_create_cq(ia->ctx, 1, nullptr, nullptr, 0);
    if (scq == nullptr || rcq == nullptr) {
        const int e = errno;
        release_ep(ep);
        return e;
    }
    ibv_qp_init_attr qa{};
    qa.qp_context = ep;
    qa.send_cq = scq;
    qa.recv_cq = rcq;
    qa.srq = ep->srq != nullptr ? ep->srq->srq : nullptr;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = static_cast<std::uint32_t>(std::max<DAT_COUNT>(a.max_request_dtos, 1));
    qa.cap.max_send_sge = static_cast<std::uint32_t>(
        std::max<DAT_COUNT>({a.max_request_iov, a.max_rdma_read_iov, a.max_rdma_write_iov, 1}));
    if (ep->srq == nullptr) {
        qa.cap.max_recv_wr = static_cast<std::uint32_t>(std::max<DAT_COUNT>(a.max_recv_dtos, 1));
        qa.cap.max_recv_sge = static_cast<std::uint32_t>(std::max<DAT_COUNT>(a.max_recv_iov, 1));
    }
    ep->qp = ibv_create_qp(ep->pz->pd, &qa);
    if (ep->qp == nullptr) {
        const int e = errno;
        release_ep(ep);
        return e;
    }
    if (const int e = qp_to_init(ep); e != 0) {
        release_ep(ep);
        return e;
    }
    ep->sq.init(ep, qa.cap.max_send_wr);
    ep->rq.init(ep, std::max<std::uint32_t>(qa.cap.max_recv_wr, 1));
    ep->recv_posted = ep->recv_reaped = 0;
    ep->epoch.fetch_add(1, std::memory_order_acq_rel);
    ia->eps_by_qpn.put(ep->qp->qp_num, ep);
    return 0;
}

void count_users(Ep* ep, int by) {
    if (ep->pz != nullptr) ep->pz->users += by;
    for (Evd* e : {ep->recv_evd, ep->request_evd, ep->connect_evd})
        if (e != nullptr) e->users += by;
}

Evd* connection_evd(DAT_EVD_HANDLE h, DAT_RETURN* r) {
    if (h == DAT_HANDLE_NULL) return nullptr;
    Evd* e = as<Evd>(h);
    if (e == nullptr || (e->flags & DAT_EVD_CONNECTION_FLAG) == 0)
        *r = err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CONN);
    return e;
}

}  // namespace

DAT_RETURN ep_create_common(DAT_IA_HANDLE iah, DAT_PZ_HANDLE pzh, DAT_EVD_HANDLE rh,
                            DAT_EVD_HANDLE qh, DAT_EVD_HANDLE ch, DAT_SRQ_HANDLE srqh,
                            const DAT_EP_ATTR* attr, DAT_EP_HANDLE* out) {
    Ia* ia = as<Ia>(iah);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG7);
    Pz* pz = as<Pz>(pzh);
    if (pz == nullptr || pz->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    DAT_RETURN r = DAT_SUCCESS;
    Evd* recv = dto_evd(rh, &r, DAT_INVALID_HANDLE_EVD_RECV);
    Evd* req = dto_evd(qh, &r, DAT_INVALID_HANDLE_EVD_REQUEST);
    Evd* conn = connection_evd(ch, &r);
    if (r != DAT_SUCCESS) return r;
    Srq* srq = nullptr;
    if (srqh != DAT_HANDLE_NULL) {
        srq = as<Srq>(srqh);
        if (srq == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
        if (srq->pz != pz) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    }
    DAT_EP_ATTR a = attr != nullptr ? *attr : default_attr(ia);
    // A consumer that leaves the message size 0 (dtest does) gets the port's, as libdaplofa
    // lets it send any size the port carries.
    if (a.max_message_size == 0) a.max_message_size = ia->port_attr.max_msg_sz;
    if (r = check_attr(ia, a, srq != nullptr); r != DAT_SUCCESS) return r;

    auto ep = std::make_unique<Ep>(ia->provider, ia);
    ep->pz = pz;
    ep->recv_evd = recv;
    ep->request_evd = req;
    ep->connect_evd = conn;
    ep->srq = srq;
    ep->attr = a;
    if (const int e = make_qp(ep.get()); e != 0) return from_errno(e);
    if (srq != nullptr) {
        std::lock_guard lock(srq->mu);
        srq->eps.push_back(ep.get());
    }
    count_users(ep.get(), 1);
    ++ia->objects;
    *out = ep.release();
    return DAT_SUCCESS;
}

namespace {

DAT_RETURN ep_create(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv, DAT_EVD_HANDLE req,
                     DAT_EVD_HANDLE conn, const DAT_EP_ATTR* attr, DAT_EP_HANDLE* out) {
    return ep_create_common(ia, pz, recv, req, conn, DAT_HANDLE_NULL, attr, out);
}

DAT_RETURN ep_create_with_srq(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv,
                              DAT_EVD_HANDLE req, DAT_EVD_HANDLE conn, DAT_SRQ_HANDLE srq,
                              const DAT_EP_ATTR* attr, DAT_EP_HANDLE* out) {
    if (srq == DAT_HANDLE_NULL) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_SRQ);
    return ep_create_common(ia, pz, recv, req, conn, srq, attr, out);
}

DAT_RETURN ep_query(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK, DAT_EP_PARAM* p) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    std::lock_guard lock(ep->mu);
    *p = DAT_EP_PARAM{};
    p->ia_handle = ep->ia;
    p->ep_state = ep->state;
    p->local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep->ia->addr);
    p->local_port_qual = ep->local_qual;
    p->remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ep->remote);
    p->remote_port_qual = ep->remote_qual;
    p->pz_handle = ep->pz;
    p->recv_evd_handle = ep->recv_evd;
    p->request_evd_handle = ep->request_evd;
    p->connect_evd_handle = ep->connect_evd;
    p->srq_handle = ep->srq;
    p->ep_attr = ep->attr;
    return DAT_SUCCESS;
}

// dat_ep_modify. The RDMA Read depths and completion flags apply from the next
// connection. The PZ, the EVDs and the queue sizes are the QP's own: while the EP is
// unconnected (or a provider-created EP awaits acceptance) and has no work posted, the
// QP is made again with them.
DAT_RETURN ep_modify(DAT_EP_HANDLE h, DAT_EP_PARAM_MASK mask, const DAT_EP_PARAM* p) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    constexpr DAT_EP_PARAM_MASK kAttrOnly =
        DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN | DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT |
        DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS | DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS |
        DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE | DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE |
        DAT_EP_FIELD_EP_ATTR_QOS;
    constexpr DAT_EP_PARAM_MASK kRebuild =
        DAT_EP_FIELD_PZ_HANDLE | DAT_EP_FIELD_RECV_EVD_HANDLE | DAT_EP_FIELD_REQUEST_EVD_HANDLE |
        DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS | DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS |
        DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV | DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV |
        DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV | DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV;
    if ((mask & ~(kAttrOnly | kRebuild | DAT_EP_FIELD_CONNECT_EVD_HANDLE)) != 0)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    std::lock_guard ia_lock(ep->ia->mu);
    std::lock_guard lock(ep->mu);
    const bool quiet = ep->state == DAT_EP_STATE_UNCONNECTED ||
                       ep->state == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING ||
                       ep->state == DAT_EP_STATE_RESERVED;
    if (!quiet) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
    DAT_EP_ATTR a = ep->attr;
    const DAT_EP_ATTR& n = p->ep_attr;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IN) a.max_rdma_read_in = n.max_rdma_read_in;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_OUT) a.max_rdma_read_out = n.max_rdma_read_out;
    if (mask & DAT_EP_FIELD_EP_ATTR_RECV_COMPLETION_FLAGS)
        a.recv_completion_flags = n.recv_completion_flags;
    if (mask & DAT_EP_FIELD_EP_ATTR_REQUEST_COMPLETION_FLAGS)
        a.request_completion_flags = n.request_completion_flags;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_MESSAGE_SIZE) a.max_message_size = n.max_message_size;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_SIZE) a.max_rdma_size = n.max_rdma_size;
    if (mask & DAT_EP_FIELD_EP_ATTR_QOS) a.qos = n.qos;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RECV_DTOS) a.max_recv_dtos = n.max_recv_dtos;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_DTOS) a.max_request_dtos = n.max_request_dtos;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RECV_IOV) a.max_recv_iov = n.max_recv_iov;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_REQUEST_IOV) a.max_request_iov = n.max_request_iov;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_READ_IOV) a.max_rdma_read_iov = n.max_rdma_read_iov;
    if (mask & DAT_EP_FIELD_EP_ATTR_MAX_RDMA_WRITE_IOV) a.max_rdma_write_iov = n.max_rdma_write_iov;
    if (a.qos != DAT_QOS_BEST_EFFORT) return err(DAT_MODEL_NOT_SUPPORTED);
    if (check_attr(ep->ia, a, ep->srq != nullptr) != DAT_SUCCESS)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    DAT_RETURN r = DAT_SUCCESS;
    Pz* pz = ep->pz;
    if (mask & DAT_EP_FIELD_PZ_HANDLE) {
        pz = as<Pz>(p->pz_handle);
        if (pz == nullptr || pz->ia != ep->ia)
            return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
        if (ep->srq != nullptr && ep->srq->pz != pz)
            return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    }
    Evd* recv = (mask & DAT_EP_FIELD_RECV_EVD_HANDLE)
                    ? dto_evd(p->recv_evd_handle, &r, DAT_INVALID_HANDLE_EVD_RECV)
                    : ep->recv_evd;
    Evd* req = (mask & DAT_EP_FIELD_REQUEST_EVD_HANDLE)
                   ? dto_evd(p->request_evd_handle, &r, DAT_INVALID_HANDLE_EVD_REQUEST)
                   : ep->request_evd;
    Evd* conn = (mask & DAT_EP_FIELD_CONNECT_EVD_HANDLE) ? connection_evd(p->connect_evd_handle, &r)
                                                         : ep->connect_evd;
    if (r != DAT_SUCCESS) return r;
    const bool rebuild = (mask & kRebuild) != 0;
    if (rebuild && (ep->sq.in_use() != 0 || ep->rq.in_use() != 0))
        return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);  // work is posted
    count_users(ep, -1);
    Pz* const old_pz = ep->pz;
    Evd* const old_recv = ep->recv_evd;
    Evd* const old_req = ep->request_evd;
    Evd* const old_conn = ep->connect_evd;
    const DAT_EP_ATTR old_attr = ep->attr;
    ep->pz = pz;
    ep->recv_evd = recv;
    ep->request_evd = req;
    ep->connect_evd = conn;
    ep->attr = a;
    if (rebuild) {
        release_ep(ep);
        if (old_recv != nullptr) old_recv->forget(ep);
        if (const int e = make_qp(ep); e != 0) {
            // Back to what it was: the old QP is made again.
            ep->pz = old_pz;
            ep->recv_evd = old_recv;
            ep->request_evd = old_req;
            ep->connect_evd = old_conn;
            ep->attr = old_attr;
            make_qp(ep);
            count_users(ep, 1);
            return from_errno(e);
        }
    }
    count_users(ep, 1);
    return DAT_SUCCESS;
}

DAT_RETURN ep_get_status(DAT_EP_HANDLE h, DAT_EP_STATE* state, DAT_BOOLEAN* recv_idle,
                         DAT_BOOLEAN* request_idle) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    {
        std::lock_guard lock(ep->mu);
        if (state != nullptr) *state = ep->state;
    }
    if (recv_idle != nullptr) {
        if (ep->srq != nullptr) {
            snic_qp_recv_state s{};
            *recv_idle = snic_query_qp_recv(ep->qp, &s) == 0 &&
                                 s.taken == ep->recv_reaped.load(std::memory_order_acquire)
                             ? DAT_TRUE
                             : DAT_FALSE;
        } else {
            *recv_idle = ep->rq.in_use() == 0 ? DAT_TRUE : DAT_FALSE;
        }
    }
    if (request_idle != nullptr) *request_idle = ep->sq.in_use() == 0 ? DAT_TRUE : DAT_FALSE;
    return DAT_SUCCESS;
}

// ---- posting ----

int send_flags(DAT_COMPLETION_FLAGS f) {
    int s = (f & DAT_COMPLETION_SUPPRESS_FLAG) != 0 ? 0 : IBV_SEND_SIGNALED;
    if ((f & DAT_COMPLETION_SOLICITED_WAIT_FLAG) != 0) s |= IBV_SEND_SOLICITED;
    if ((f & DAT_COMPLETION_BARRIER_FENCE_FLAG) != 0) s |= IBV_SEND_FENCE;
    return s;
}

bool can_send(const Ep* ep) {
    return ep->state == DAT_EP_STATE_CONNECTED;
}

std::uint32_t total(const ibv_sge* sge, DAT_COUNT n) {
    std::uint64_t t = 0;
    for (DAT_COUNT i = 0; i < n; ++i) t += sge[i].length;
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(t, UINT32_MAX));
}

// One send-queue work request: the slot taken, the WR posted, or the slot given back.
DAT_RETURN post_request(Ep* ep, ibv_send_wr& wr, ibv_sge* sge, DAT_COUNT n, DAT_DTO_COOKIE cookie,
                        int op) {
    std::lock_guard lock(ep->post_mu);
    if (!can_send(ep)) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED);
    Slot* s = ep->sq.take();
    if (s == nullptr) return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    s->cookie = cookie;
    s->op = op;
    s->length = total(sge, n);
    wr.wr_id = reinterpret_cast<std::uintptr_t>(s);
    wr.sg_list = sge;
    wr.num_sge = n;
    ibv_send_wr* bad = nullptr;
    if (const int e = ibv_post_send(ep->qp, &wr, &bad); e != 0) {
        ep->sq.untake();
        return from_errno(e);
    }
    return DAT_SUCCESS;
}

DAT_RETURN post_send_common(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov,
                            DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags, bool invalidate,
                            DAT_RMR_CONTEXT rkey) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    if (n < 0 || n > ep->attr.max_request_iov || (n > 0 && iov == nullptr))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    ibv_sge sge[32];
    if (n > 32) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (const DAT_RETURN r = check_iov(ep->ia, ep->pz, n, iov, false, sge); r != DAT_SUCCESS)
        return r;
    if (total(sge, n) > ep->attr.max_message_size) return err(DAT_LENGTH_ERROR);
    ibv_send_wr wr{};
    wr.opcode = invalidate ? IBV_WR_SEND_WITH_INV : IBV_WR_SEND;
    wr.send_flags = send_flags(flags);
    if (invalidate) wr.invalidate_rkey = rkey;
    return post_request(ep, wr, sge, n, cookie, DAT_DTO_SEND);
}

DAT_RETURN ep_post_send(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE cookie,
                        DAT_COMPLETION_FLAGS flags) {
    return post_send_common(h, n, iov, cookie, flags, false, 0);
}

DAT_RETURN ep_post_send_with_invalidate(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov,
                                        DAT_DTO_COOKIE cookie, DAT_COMPLETION_FLAGS flags,
                                        DAT_BOOLEAN invalidate, DAT_RMR_CONTEXT rkey) {
    return post_send_common(h, n, iov, cookie, flags, invalidate == DAT_TRUE, rkey);
}

DAT_RETURN post_rdma(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE cookie,
                     const DAT_RMR_TRIPLET* remote, DAT_COMPLETION_FLAGS flags, ibv_wr_opcode op,
                     int dto, std::uint32_t imm) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    const bool read = op == IBV_WR_RDMA_READ;
    const DAT_COUNT max = read ? ep->attr.max_rdma_read_iov : ep->attr.max_rdma_write_iov;
    if (n < 0 || n > std::max(max, ep->attr.max_request_iov) || n > 32 || (n > 0 && iov == nullptr))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (remote == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    ibv_sge sge[32];
    if (const DAT_RETURN r = check_iov(ep->ia, ep->pz, n, iov, read, sge); r != DAT_SUCCESS)
        return r;
    if (total(sge, n) > remote->segment_length) return err(DAT_LENGTH_ERROR);
    ibv_send_wr wr{};
    wr.opcode = op;
    wr.send_flags = send_flags(flags);
    wr.wr.rdma.remote_addr = remote->virtual_address;
    wr.wr.rdma.rkey = remote->rmr_context;
    if (op == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(imm);
    return post_request(ep, wr, sge, n, cookie, dto);
}

DAT_RETURN ep_post_rdma_read(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov,
                             DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote,
                             DAT_COMPLETION_FLAGS flags) {
    return post_rdma(h, n, iov, cookie, remote, flags, IBV_WR_RDMA_READ, DAT_DTO_RDMA_READ, 0);
}

DAT_RETURN ep_post_rdma_write(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov,
                              DAT_DTO_COOKIE cookie, const DAT_RMR_TRIPLET* remote,
                              DAT_COMPLETION_FLAGS flags) {
    return post_rdma(h, n, iov, cookie, remote, flags, IBV_WR_RDMA_WRITE, DAT_DTO_RDMA_WRITE, 0);
}

DAT_RETURN ep_post_rdma_read_to_rmr(DAT_EP_HANDLE, const DAT_RMR_TRIPLET*, DAT_DTO_COOKIE,
                                    const DAT_RMR_TRIPLET*, DAT_COMPLETION_FLAGS) {
    return err(DAT_NOT_IMPLEMENTED);  // an iWARP read into a window: not on RoCE
}

DAT_RETURN ep_post_recv(DAT_EP_HANDLE h, DAT_COUNT n, DAT_LMR_TRIPLET* iov, DAT_DTO_COOKIE cookie,
                        DAT_COMPLETION_FLAGS flags) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    if (ep->srq != nullptr) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
    if (n < 0 || n > ep->attr.max_recv_iov || n > 32 || (n > 0 && iov == nullptr))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    ibv_sge sge[32];
    if (const DAT_RETURN r = check_iov(ep->ia, ep->pz, n, iov, true, sge); r != DAT_SUCCESS)
        return r;
    std::lock_guard lock(ep->post_mu);
    if (ep->state == DAT_EP_STATE_DISCONNECTED)
        return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_DISCONNECTED);
    Slot* s = ep->rq.take();
    if (s == nullptr) return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    s->cookie = cookie;
    s->op = DAT_DTO_RECEIVE;
    s->length = total(sge, n);
    // Asked of this receive, or of every receive of the EP (its recv_completion_flags).
    s->solicited_wait =
        ((flags | ep->attr.recv_completion_flags) & DAT_COMPLETION_SOLICITED_WAIT_FLAG) != 0;
    ibv_recv_wr wr{};
    wr.wr_id = reinterpret_cast<std::uintptr_t>(s);
    wr.sg_list = sge;
    wr.num_sge = n;
    ibv_recv_wr* bad = nullptr;
    if (const int e = ibv_post_recv(ep->qp, &wr, &bad); e != 0) {
        ep->rq.untake();
        return from_errno(e);
    }
    ep->recv_posted.fetch_add(1, std::memory_order_release);
    return DAT_SUCCESS;
}

// dat_ep_recv_query. snicd counts, per QP, the receive WQEs taken for arriving
// messages and the receive completions made; a QP takes WQEs in message order and
// completes them in message order (RC), so a buffer's MSN is its place in that count.
// Without an SRQ a buffer is allocated to the EP when posted, so the latest MSN of an
// allocated buffer is the number posted; with one, it is the number taken.
DAT_RETURN ep_recv_query(DAT_EP_HANDLE h, DAT_COUNT* nbufs, DAT_COUNT* span) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    std::lock_guard lock(ep->post_mu);  // no post between the two counts
    if (ep->qp == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    snic_qp_recv_state s{};
    if (snic_query_qp_recv(ep->qp, &s) != 0) {
        // snicd is gone: the counts cannot be had, which the page answers with
        // DAT_VALUE_UNKNOWN (it lists no error for it).
        if (nbufs != nullptr) *nbufs = DAT_VALUE_UNKNOWN;
        if (span != nullptr) *span = DAT_VALUE_UNKNOWN;
        return DAT_SUCCESS;
    }
    const std::uint64_t latest_allocated =
        ep->srq != nullptr ? s.taken : ep->recv_posted.load(std::memory_order_acquire);
    const std::uint64_t allocated = latest_allocated - s.completed;
    if (nbufs != nullptr) *nbufs = static_cast<DAT_COUNT>(allocated);
    if (span != nullptr) *span = static_cast<DAT_COUNT>(latest_allocated - s.completed);
    return DAT_SUCCESS;
}

DAT_RETURN ep_set_watermark(DAT_EP_HANDLE h, DAT_COUNT, DAT_COUNT) {
    if (as<Ep>(h) == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    return err(DAT_MODEL_NOT_SUPPORTED);  // EP high watermarks: not offered
}

DAT_RETURN ep_reset(DAT_EP_HANDLE h) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    std::lock_guard ia_lock(ep->ia->mu);
    std::lock_guard lock(ep->mu);
    if (ep->state != DAT_EP_STATE_UNCONNECTED && ep->state != DAT_EP_STATE_DISCONNECTED)
        return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_CONNECTED);
    if (ep->state == DAT_EP_STATE_UNCONNECTED) return DAT_SUCCESS;
    if (ep->cm != nullptr) {
        retire_id(ep->ia, ep->cm);
        ep->cm = nullptr;
    }
    if (const int e = reset_qp(ep); e != 0) return from_errno(e);
    ep->state = DAT_EP_STATE_UNCONNECTED;
    ep->established_posted = ep->disconnect_posted = false;
    return DAT_SUCCESS;
}

DAT_RETURN ep_free(DAT_EP_HANDLE h) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    {
        std::lock_guard ia_lock(ep->ia->mu);
        std::lock_guard lock(ep->mu);
        // Freeing a connected EP disconnects it abruptly, with no event.
        if (ep->cm != nullptr) {
            rdma_disconnect(ep->cm);
            retire_id(ep->ia, ep->cm);
            ep->cm = nullptr;
        }
        flush_ep(ep);
        ep->state = DAT_EP_STATE_DISCONNECTED;
    }
    srq_keep_taken(ep, true);
    release_ep(ep);
    // The QP is gone: its last completions are reaped now, while its slots and the EVD are
    // still there, and what its events credit is credited.
    if (ep->recv_evd != nullptr) ep->recv_evd->forget(ep);
    --ep->pz->users;
    for (Evd* e : {ep->recv_evd, ep->request_evd, ep->connect_evd})
        if (e != nullptr) --e->users;
    --ep->ia->objects;
    retire(ep);
    return DAT_SUCCESS;
}

}  // namespace

// ---- IB extensions ----

DAT_RETURN ep_extension(Ep* ep, DAT_EXTENDED_OP op, va_list args) {
    switch (op) {
        case DAT_IB_RDMA_WRITE_IMMED_OP: {
            const DAT_COUNT n = va_arg(args, DAT_COUNT);
            auto* iov = va_arg(args, DAT_LMR_TRIPLET*);
            const DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
            auto* remote = va_arg(args, DAT_RMR_TRIPLET*);
            const std::uint32_t imm = va_arg(args, DAT_UINT32);
            const auto flags = static_cast<DAT_COMPLETION_FLAGS>(va_arg(args, int));
            return post_rdma(ep, n, iov, cookie, remote, flags, IBV_WR_RDMA_WRITE_WITH_IMM,
                             DAT_IB_DTO_RDMA_WRITE_IMMED, imm);
        }
        case DAT_IB_FETCH_AND_ADD_OP:
        case DAT_IB_CMP_AND_SWAP_OP: {
            const bool cas = op == DAT_IB_CMP_AND_SWAP_OP;
            const DAT_UINT64 first = va_arg(args, DAT_UINT64);
            const DAT_UINT64 swap = cas ? va_arg(args, DAT_UINT64) : 0;
            auto* local = va_arg(args, DAT_LMR_TRIPLET*);
            const DAT_DTO_COOKIE cookie = va_arg(args, DAT_DTO_COOKIE);
            auto* remote = va_arg(args, DAT_RMR_TRIPLET*);
            const auto flags = static_cast<DAT_COMPLETION_FLAGS>(va_arg(args, int));
            if (local == nullptr || remote == nullptr) return err(DAT_INVALID_PARAMETER);
            ibv_sge sge[1];
            if (const DAT_RETURN r = check_iov(ep->ia, ep->pz, 1, local, true, sge);
                r != DAT_SUCCESS)
                return r;
            if (sge[0].length < 8) return err(DAT_LENGTH_ERROR);
            sge[0].length = 8;
            ibv_send_wr wr{};
            wr.opcode = cas ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.send_flags = send_flags(flags);
            wr.wr.atomic.remote_addr = remote->virtual_address;
            wr.wr.atomic.rkey = remote->rmr_context;
            wr.wr.atomic.compare_add = first;
            wr.wr.atomic.swap = swap;
            return post_request(ep, wr, sge, 1, cookie,
                                cas ? DAT_IB_DTO_CMP_SWAP : DAT_IB_DTO_FETCH_ADD);
        }
        default:
            return err(DAT_NOT_IMPLEMENTED);
    }
}

DAT_RETURN ep_free_handle(DAT_EP_HANDLE h) {
    return ep_free(h);
}

void fill_provider_ep(DAT_PROVIDER& p) {
    p.ep_create_func = ep_create;
    p.ep_create_with_srq_func = ep_create_with_srq;
    p.ep_query_func = ep_query;
    p.ep_modify_func = ep_modify;
    p.ep_get_status_func = ep_get_status;
    p.ep_post_send_func = ep_post_send;
    p.ep_post_send_with_invalidate_func = ep_post_send_with_invalidate;
    p.ep_post_recv_func = ep_post_recv;
    p.ep_post_rdma_read_func = ep_post_rdma_read;
    p.ep_post_rdma_write_func = ep_post_rdma_write;
    p.ep_post_rdma_read_to_rmr_func = ep_post_rdma_read_to_rmr;
    p.ep_recv_query_func = ep_recv_query;
    p.ep_set_watermark_func = ep_set_watermark;
    p.ep_reset_func = ep_reset;
    p.ep_free_func = ep_free;
}

}  // namespace snic::dapl
