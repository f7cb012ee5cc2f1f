// libdaplsnic: connections. Service points listen through rdma_cm; a connection
// request becomes a CR; connect, accept, reject and disconnect drive the EP's QP (which
// the EP owns: rdma_init_qp_attr gives its RTR and RTS attributes). One thread per IA
// turns rdma_cm and asynchronous verbs events into DAT events.
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "dapl/provider.h"

namespace snic::dapl {

namespace {

constexpr std::uint8_t kRejConsumer = 28;  // IBA REJ reason: consumer reject

std::uint16_t port_of(DAT_CONN_QUAL q) {
    return static_cast<std::uint16_t>(q);  // as the OFED provider maps a qualifier
}

void post_connection_event(Ep* ep, DAT_EVENT_NUMBER n, const void* data = nullptr,
                           DAT_COUNT len = 0) {
    if (ep->connect_evd == nullptr) return;
    DAT_EVENT e{};
    e.event_number = n;
    e.event_data.connect_event_data.ep_handle = ep;
    if (data != nullptr && len > 0) {
        len = std::min<DAT_COUNT>(len, kPeerPrivateData);
        std::memcpy(ep->peer_data, data, static_cast<std::size_t>(len));
        ep->peer_data_len = len;
        e.event_data.connect_event_data.private_data = ep->peer_data;
        e.event_data.connect_event_data.private_data_size = len;
    }
    ep->connect_evd->post(e);
}

// QP to RTR then RTS from what rdma_cm agreed for `id`. On an iWARP device rdma_cm moves it
// itself, bound to the connection (rdma_accept, or the connect response), as the kernel's
// iWARP CM does: nothing to do here.
int move_qp(Ep* ep, rdma_cm_id* id) {
    if (id->verbs != nullptr && id->verbs->device->transport_type == IBV_TRANSPORT_IWARP) return 0;
    for (const ibv_qp_state s : {IBV_QPS_RTR, IBV_QPS_RTS}) {
        ibv_qp_attr a{};
        int mask = 0;
        a.qp_state = s;
        if (rdma_init_qp_attr(id, &a, &mask) != 0) return errno;
        if (s == IBV_QPS_RTR)
            a.max_dest_rd_atomic = static_cast<std::uint8_t>(ep->attr.max_rdma_read_in);
        else
            a.max_rd_atomic = static_cast<std::uint8_t>(
                std::min<int>(a.max_rd_atomic, ep->attr.max_rdma_read_out));
        if (const int e = ibv_modify_qp(ep->qp, &a, mask); e != 0) return e;
    }
    return 0;
}

// The connection ended or never came up: the QP flushes, the EP is Disconnected and
// its connect EVD hears `n` once.
void end_connection(Ep* ep, DAT_EVENT_NUMBER n) {
    flush_ep(ep);
    const DAT_EP_STATE was = ep->state;
    ep->state = DAT_EP_STATE_DISCONNECTED;
    if (ep->disconnect_posted) return;
    if (was == DAT_EP_STATE_DISCONNECTED) return;
    ep->disconnect_posted = true;
    post_connection_event(ep, n);
}

Pz* provider_pz(Ia* ia) {
    if (ia->provider_pz == nullptr) {
        auto pz = std::make_unique<Pz>(ia->provider, ia);
        pz->pd = ibv_alloc_pd(ia->ctx);
        if (pz->pd == nullptr) return nullptr;
        ia->provider_pz = pz.release();
    }
    return ia->provider_pz;
}

void handle_connect_request(Ia* ia, rdma_cm_event* e) {
    auto* sp = static_cast<Sp*>(e->listen_id->context);
    if (sp == nullptr || as<Sp>(sp) == nullptr) {
        rdma_reject(e->id, nullptr, 0);
        rdma_destroy_id(e->id);
        return;
    }
    auto cr = std::make_unique<Cr>(ia->provider, ia);
    cr->sp = sp;
    cr->id = e->id;
    e->id->context = nullptr;
    const sockaddr* peer = rdma_get_peer_addr(e->id);
    if (peer != nullptr && peer->sa_family == AF_INET)
        std::memcpy(&cr->remote, peer, sizeof cr->remote);
    cr->remote_qual = ntohs(cr->remote.sin_port);
    const rdma_conn_param& c = e->param.conn;
    cr->data_len = std::min<DAT_COUNT>(c.private_data_len, kMaxPrivateData);
    if (c.private_data != nullptr && cr->data_len > 0)
        std::memcpy(cr->data, c.private_data, static_cast<std::size_t>(cr->data_len));
    else
        cr->data_len = 0;
    // From this side: responder_resources is the requester's initiator depth.
    cr->peer_read_out = c.responder_resources;
    cr->peer_read_in = c.initiator_depth;
    if (sp->flags == DAT_PSP_PROVIDER_FLAG) {
        // The consumer gives it EVDs (and perhaps another PZ) with dat_ep_modify.
        DAT_EP_HANDLE h = nullptr;
        Pz* pz = provider_pz(ia);
        if (pz == nullptr || ep_create_common(ia, pz, nullptr, nullptr, nullptr, nullptr, nullptr,
                                              &h) != DAT_SUCCESS) {
            rdma_reject(e->id, nullptr, 0);
            rdma_destroy_id(e->id);
            return;
        }
        cr->ep = static_cast<Ep*>(h);
        cr->ep->state = DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING;
    }
    Cr* raw = cr.release();
    ia->crs.push_back(raw);
    ++ia->objects;
    if (sp->ep != nullptr) {  // an RSP's EP waits for the consumer's decision
        std::lock_guard lock(sp->ep->mu);
        sp->ep->state = DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING;
    }
    DAT_EVENT ev{};
    ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
    auto& d = ev.event_data.cr_arrival_event_data;
    d.sp_handle.psp_handle = sp;
    d.local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ia->addr);
    d.conn_qual = sp->qual;
    d.cr_handle = raw;
    d.truncate_flag = c.private_data_len > kMaxPrivateData ? DAT_TRUE : DAT_FALSE;
    sp->evd->post(ev);
}

void handle_ep_event(Ep* ep, rdma_cm_event* e) {
    std::lock_guard lock(ep->mu);
    switch (e->event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (rdma_resolve_route(e->id, 2000) != 0)
                end_connection(ep, DAT_CONNECTION_EVENT_UNREACHABLE);
            return;
        case RDMA_CM_EVENT_ROUTE_RESOLVED: {
            rdma_conn_param p{};
            p.qp_num = ep->qp->qp_num;
            p.responder_resources = static_cast<std::uint8_t>(ep->attr.max_rdma_read_in);
            p.initiator_depth = static_cast<std::uint8_t>(ep->attr.max_rdma_read_out);
            p.retry_count = 7;
            p.rnr_retry_count = 7;
            p.srq = ep->srq != nullptr ? 1 : 0;
            p.private_data = ep->connect_data_len > 0 ? ep->connect_data : nullptr;
            p.private_data_len = static_cast<std::uint8_t>(ep->connect_data_len);
            if (rdma_connect(e->id, &p) != 0) end_connection(ep, DAT_CONNECTION_EVENT_UNREACHABLE);
            return;
        }
        case RDMA_CM_EVENT_CONNECT_RESPONSE:
            if (move_qp(ep, e->id) != 0 || rdma_establish(e->id) != 0) {
                rdma_disconnect(e->id);
                end_connection(ep, DAT_CONNECTION_EVENT_BROKEN);
                return;
            }
            [[fallthrough]];
        case RDMA_CM_EVENT_ESTABLISHED:
            if (ep->state == DAT_EP_STATE_CONNECTED || ep->established_posted) return;
            ep->state = DAT_EP_STATE_CONNECTED;
            ep->established_posted = true;
            post_connection_event(ep, DAT_CONNECTION_EVENT_ESTABLISHED, e->param.conn.private_data,
                                  e->param.conn.private_data_len);
            return;
        case RDMA_CM_EVENT_REJECTED: {
            const bool passive = ep->state == DAT_EP_STATE_COMPLETION_PENDING;
            // The peer's consumer refused: IB CM's reason 28, or on iWARP an MPA reject
            // (-ECONNREFUSED; a connection nobody listened for is reset, -ECONNRESET).
            const bool iwarp = e->id->verbs != nullptr &&
                               e->id->verbs->device->transport_type == IBV_TRANSPORT_IWARP;
            const bool by_peer = e->status == kRejConsumer || (iwarp && e->status == -ECONNREFUSED);
            if (passive) {
                end_connection(ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
            } else {
                if (by_peer && e->param.conn.private_data_len > 0) {
                    post_connection_event(ep, DAT_CONNECTION_EVENT_PEER_REJECTED,
                                          e->param.conn.private_data,
                                          e->param.conn.private_data_len);
                    flush_ep(ep);
                    ep->state = DAT_EP_STATE_DISCONNECTED;
                    ep->disconnect_posted = true;
                    return;
                }
                end_connection(ep, by_peer ? DAT_CONNECTION_EVENT_PEER_REJECTED
                                           : DAT_CONNECTION_EVENT_NON_PEER_REJECTED);
            }
            return;
        }
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR: {
            if (ep->state == DAT_EP_STATE_COMPLETION_PENDING) {
                end_connection(ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
                return;
            }
            const bool timed_out = e->status == -ETIMEDOUT;
            end_connection(
                ep, timed_out ? DAT_CONNECTION_EVENT_TIMED_OUT : DAT_CONNECTION_EVENT_UNREACHABLE);
            return;
        }
        case RDMA_CM_EVENT_DISCONNECTED:
            if (ep->state == DAT_EP_STATE_CONNECTED) rdma_disconnect(e->id);  // the DREP
            end_connection(ep, DAT_CONNECTION_EVENT_DISCONNECTED);
            return;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            end_connection(ep, DAT_CONNECTION_EVENT_BROKEN);
            return;
        default:
            return;
    }
}

void handle_cm_event(Ia* ia, rdma_cm_event* e) {
    std::lock_guard lock(ia->mu);
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        handle_connect_request(ia, e);
        return;
    }
    auto* ep = static_cast<Ep*>(e->id->context);
    if (ep == nullptr || !ep->live(Kind::ep) || ep->cm != e->id) return;
    handle_ep_event(ep, e);
}

void post_async(Ia* ia, DAT_EVENT_NUMBER n, DAT_HANDLE h, DAT_COUNT reason) {
    if (ia->async_evd == nullptr) return;
    DAT_EVENT e{};
    e.event_number = n;
    e.event_data.asynch_error_event_data.dat_handle = h;
    e.event_data.asynch_error_event_data.reason = reason;
    ia->async_evd->post(e);
}

}  // namespace

// DAT has no event number of its own for it: an asynchronous error event on the SRQ with
// the reason DAT_SRQ_LOW_WATERMARK_EVENT.
void post_low_watermark(Srq* srq) {
    post_async(srq->ia, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, srq, DAT_SRQ_LOW_WATERMARK_EVENT);
}

namespace {

void handle_async_event(Ia* ia, const ibv_async_event& ae) {
    switch (ae.event_type) {
        case IBV_EVENT_SRQ_LIMIT_REACHED: {
            auto* srq = static_cast<Srq*>(ae.element.srq->srq_context);
            if (srq != nullptr && srq->live(Kind::srq)) post_low_watermark(srq);
            return;
        }
        case IBV_EVENT_SRQ_ERR: {
            auto* srq = static_cast<Srq*>(ae.element.srq->srq_context);
            if (srq != nullptr && srq->live(Kind::srq))
                post_async(ia, DAT_ASYNC_ERROR_PROVIDER_INTERNAL_ERROR, srq,
                           DAT_SRQ_TRANSFER_TO_ERROR);
            return;
        }
        case IBV_EVENT_QP_LAST_WQE_REACHED: {
            // An SRQ EP that left the connection will take no more from the SRQ.
            auto* ep = static_cast<Ep*>(ae.element.qp->qp_context);
            if (ep != nullptr && ep->live(Kind::ep))
                post_async(ia, DAT_ASYNC_ERROR_EP_BROKEN, ep, DAT_EP_OTHER_ERROR);
            return;
        }
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: {
            auto* ep = static_cast<Ep*>(ae.element.qp->qp_context);
            if (ep == nullptr || !ep->live(Kind::ep)) return;
            post_async(ia, DAT_ASYNC_ERROR_EP_BROKEN, ep, DAT_EP_TRANSFER_TO_ERROR);
            // A connected EP whose QP failed has lost its connection (DAT: the connection
            // EVD hears BROKEN); the peer hears the disconnect.
            std::lock_guard lock(ia->mu);
            std::lock_guard ep_lock(ep->mu);
            if (ep->state != DAT_EP_STATE_CONNECTED) return;
            if (ep->cm != nullptr) rdma_disconnect(ep->cm);
            end_connection(ep, DAT_CONNECTION_EVENT_BROKEN);
            return;
        }
        case IBV_EVENT_CQ_ERR: {
            auto* evd = static_cast<Evd*>(ae.element.cq->cq_context);
            if (evd != nullptr && evd->live(Kind::evd))
                post_async(ia, DAT_ASYNC_ERROR_EVD_OVERFLOW, evd, DAT_EVD_OVERFLOW_ERROR);
            return;
        }
        case IBV_EVENT_DEVICE_FATAL:
            post_async(ia, DAT_ASYNC_ERROR_IA_CATASTROPHIC, ia, DAT_IA_CATASTROPHIC_ERROR);
            return;
        default:
            return;
    }
}

// Ids are destroyed here, between events: an event this thread holds may name one.
void destroy_retired_ids(Ia* ia) {
    std::vector<rdma_cm_id*> ids;
    {
        std::lock_guard lock(ia->mu);
        ids.swap(ia->retired_ids);
    }
    for (rdma_cm_id* id : ids) rdma_destroy_id(id);
}

void events_loop(Ia* ia) {
    // A daemon that is gone hangs up both fds: each is polled no more once it has.
    bool channel_gone = false, device_gone = false;
    for (;;) {
        pollfd fds[3] = {{channel_gone ? -1 : ia->channel->fd, POLLIN, 0},
                         {device_gone ? -1 : ia->ctx->async_fd, POLLIN, 0},
                         {ia->wake_fd, POLLIN, 0}};
        if (::poll(fds, 3, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if ((fds[2].revents & POLLIN) != 0) {
            std::uint64_t v;
            [[maybe_unused]] const ssize_t n = ::read(ia->wake_fd, &v, sizeof v);
            if (ia->stopping.load()) return;
        }
        if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            rdma_cm_event* e = nullptr;
            while (rdma_get_cm_event(ia->channel, &e) == 0) {
                handle_cm_event(ia, e);
                rdma_ack_cm_event(e);
            }
            if (errno != EAGAIN) channel_gone = true;
        }
        destroy_retired_ids(ia);
        if ((fds[1].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
            ibv_async_event ae{};
            while (ibv_get_async_event(ia->ctx, &ae) == 0) {
                handle_async_event(ia, ae);
                ibv_ack_async_event(&ae);
            }
            if (errno != EAGAIN) device_gone = true;
        }
    }
}

// ---- service points ----

DAT_RETURN sp_create(Ia* ia, DAT_CONN_QUAL qual, Evd* evd, DAT_PSP_FLAGS flags, Ep* ep, Kind kind,
                     Sp** out) {
    auto sp = std::make_unique<Sp>(ia->provider, ia, kind);
    sp->evd = evd;
    sp->qual = qual;
    sp->flags = flags;
    sp->ep = ep;
    if (rdma_create_id(ia->channel, &sp->listen, sp.get(), RDMA_PS_TCP) != 0)
        return from_errno(errno);
    sockaddr_in a = ia->addr;
    a.sin_port = htons(port_of(qual));
    if (rdma_bind_addr(sp->listen, reinterpret_cast<sockaddr*>(&a)) != 0 ||
        rdma_listen(sp->listen, 1024) != 0) {
        const int e = errno;
        rdma_destroy_id(sp->listen);
        return e == EADDRINUSE ? err(DAT_CONN_QUAL_IN_USE) : from_errno(e);
    }
    ++evd->users;
    ++ia->objects;
    std::lock_guard lock(ia->mu);
    ia->sps.push_back(sp.get());
    *out = sp.release();
    return DAT_SUCCESS;
}

Evd* cr_evd(DAT_EVD_HANDLE h) {
    Evd* e = as<Evd>(h);
    return e != nullptr && (e->flags & DAT_EVD_CR_FLAG) != 0 ? e : nullptr;
}

DAT_RETURN psp_create(DAT_IA_HANDLE h, DAT_CONN_QUAL qual, DAT_EVD_HANDLE evdh, DAT_PSP_FLAGS flags,
                      DAT_PSP_HANDLE* out) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    Evd* evd = cr_evd(evdh);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    if (flags != DAT_PSP_CONSUMER_FLAG && flags != DAT_PSP_PROVIDER_FLAG)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
    Sp* sp = nullptr;
    const DAT_RETURN r = sp_create(ia, qual, evd, flags, nullptr, Kind::psp, &sp);
    if (r == DAT_SUCCESS) *out = sp;
    return r;
}

DAT_RETURN psp_create_any(DAT_IA_HANDLE h, DAT_CONN_QUAL* qual, DAT_EVD_HANDLE evdh,
                          DAT_PSP_FLAGS flags, DAT_PSP_HANDLE* out) {
    if (qual == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    // Dynamic qualifiers from the top of the port space, as the kernel picks them.
    for (DAT_CONN_QUAL q = 0xF000; q < 0xFFFF; ++q) {
        const DAT_RETURN r = psp_create(h, q, evdh, flags, out);
        if (DAT_GET_TYPE(r) != DAT_CONN_QUAL_IN_USE) {
            if (r == DAT_SUCCESS) *qual = q;
            return r;
        }
    }
    return err(DAT_CONN_QUAL_UNAVAILABLE);
}

DAT_RETURN sp_free(DAT_HANDLE h) {
    Sp* sp = as<Sp>(h);
    if (sp == nullptr) return err(DAT_INVALID_HANDLE);
    Ia* ia = sp->ia;
    {
        std::lock_guard lock(ia->mu);
        retire_id(ia, sp->listen);
        ia->sps.remove(sp);
        // CRs that arrived on it stay usable (DAT: freeing an SP does not affect them).
        if (sp->ep != nullptr) {
            std::lock_guard l2(sp->ep->mu);
            if (sp->ep->state == DAT_EP_STATE_RESERVED) sp->ep->state = DAT_EP_STATE_UNCONNECTED;
            sp->ep->from_rsp = false;
        }
    }
    --sp->evd->users;
    --ia->objects;
    retire(sp);
    return DAT_SUCCESS;
}

DAT_RETURN psp_query(DAT_PSP_HANDLE h, DAT_PSP_PARAM_MASK, DAT_PSP_PARAM* p) {
    Sp* sp = as<Sp>(h);
    if (sp == nullptr || sp->kind.load() != Kind::psp)
        return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    p->ia_handle = sp->ia;
    p->conn_qual = sp->qual;
    p->evd_handle = sp->evd;
    p->psp_flags = sp->flags;
    return DAT_SUCCESS;
}

DAT_RETURN psp_free(DAT_PSP_HANDLE h) {
    Sp* sp = as<Sp>(h);
    if (sp == nullptr || sp->kind.load() != Kind::psp)
        return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PSP);
    return sp_free(h);
}

DAT_RETURN rsp_create(DAT_IA_HANDLE h, DAT_CONN_QUAL qual, DAT_EP_HANDLE eph, DAT_EVD_HANDLE evdh,
                      DAT_RSP_HANDLE* out) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    Ep* ep = as<Ep>(eph);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    Evd* evd = cr_evd(evdh);
    if (evd == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_CR);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    {
        std::lock_guard lock(ep->mu);
        if (ep->state != DAT_EP_STATE_UNCONNECTED)
            return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
        ep->state = DAT_EP_STATE_RESERVED;
        ep->from_rsp = true;
    }
    Sp* sp = nullptr;
    const DAT_RETURN r = sp_create(ia, qual, evd, DAT_PSP_CONSUMER_FLAG, ep, Kind::rsp, &sp);
    if (r != DAT_SUCCESS) {
        std::lock_guard lock(ep->mu);
        ep->state = DAT_EP_STATE_UNCONNECTED;
        ep->from_rsp = false;
        return r;
    }
    *out = sp;
    return DAT_SUCCESS;
}

DAT_RETURN rsp_query(DAT_RSP_HANDLE h, DAT_RSP_PARAM_MASK, DAT_RSP_PARAM* p) {
    Sp* sp = as<Sp>(h);
    if (sp == nullptr || sp->kind.load() != Kind::rsp)
        return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    p->ia_handle = sp->ia;
    p->conn_qual = sp->qual;
    p->evd_handle = sp->evd;
    p->ep_handle = sp->ep;
    return DAT_SUCCESS;
}

DAT_RETURN rsp_free(DAT_RSP_HANDLE h) {
    Sp* sp = as<Sp>(h);
    if (sp == nullptr || sp->kind.load() != Kind::rsp)
        return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RSP);
    return sp_free(h);
}

// ---- connection requests ----

void destroy_cr(Cr* cr) {
    cr->ia->crs.remove(cr);
    --cr->ia->objects;
    retire(cr);
}

DAT_RETURN cr_query(DAT_CR_HANDLE h, DAT_CR_PARAM_MASK, DAT_CR_PARAM* p) {
    Cr* cr = as<Cr>(h);
    if (cr == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    p->remote_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&cr->remote);
    p->remote_port_qual = cr->remote_qual;
    p->private_data_size = cr->data_len;
    p->private_data = cr->data;
    p->local_ep_handle = cr->ep != nullptr ? cr->ep : (cr->sp != nullptr ? cr->sp->ep : nullptr);
    return DAT_SUCCESS;
}

// dat_cr_accept. Every check is made before anything changes, so that an EP that
// cannot take the connection leaves the EP, the CR, its private data and the remote
// EP as they were, and the CR can be accepted with another EP or rejected.
DAT_RETURN cr_accept(DAT_CR_HANDLE h, DAT_EP_HANDLE eph, DAT_COUNT len, const DAT_PVOID data) {
    Cr* cr = as<Cr>(h);
    if (cr == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
    Ia* ia = cr->ia;
    std::lock_guard ia_lock(ia->mu);
    if (!cr->live(Kind::cr)) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
    Ep* ep = nullptr;
    if (eph == DAT_HANDLE_NULL) {
        ep = cr->ep != nullptr ? cr->ep : (cr->sp != nullptr ? cr->sp->ep : nullptr);
        if (ep == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    } else {
        ep = as<Ep>(eph);
        if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    }
    if (len < 0 || len > kMaxPrivateData || (len > 0 && data == nullptr))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    if (ep->ia != ia) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    std::lock_guard lock(ep->mu);
    if (ep->qp == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    // The page lists no DAT_INVALID_STATE: an EP that is not Unconnected (or the CR's own
    // RSP or provider EP, Tentative Connection Pending), or has no PZ or connection EVD,
    // cannot take this request, as one with too few RDMA Reads cannot: the combination of
    // parameters is invalid.
    const bool rsp_ep = (cr->sp != nullptr && cr->sp->ep == ep) || cr->ep == ep;
    if (ep->state != DAT_EP_STATE_UNCONNECTED &&
        !(rsp_ep && ep->state == DAT_EP_STATE_TENTATIVE_CONNECTION_PENDING))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    if (ep->pz == nullptr || ep->connect_evd == nullptr)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    // The requester's outgoing RDMA Reads must fit the EP's incoming limit.
    if (ep->attr.max_rdma_read_in < cr->peer_read_out)
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);

    ep->cm = cr->id;
    cr->id->context = ep;
    ep->remote = cr->remote;
    ep->remote_qual = cr->remote_qual;
    ep->local_qual = cr->sp != nullptr ? cr->sp->qual : 0;
    ep->established_posted = ep->disconnect_posted = false;
    rdma_conn_param p{};
    p.qp_num = ep->qp->qp_num;
    p.responder_resources = static_cast<std::uint8_t>(ep->attr.max_rdma_read_in);
    p.initiator_depth =
        static_cast<std::uint8_t>(std::min<int>(ep->attr.max_rdma_read_out, cr->peer_read_in));
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    p.srq = ep->srq != nullptr ? 1 : 0;
    p.private_data = len > 0 ? data : nullptr;
    p.private_data_len = static_cast<std::uint8_t>(len);
    // The child id knows the requester's QP: RTR and RTS before the REP goes out.
    int e = move_qp(ep, cr->id);
    if (e == 0 && rdma_accept(cr->id, &p) != 0) e = errno;
    destroy_cr(cr);
    if (e != 0) {
        // The connection cannot be made: the EP's receives flush, and its connect EVD
        // hears why.
        rdma_reject(ep->cm, nullptr, 0);
        ep->state = DAT_EP_STATE_COMPLETION_PENDING;
        end_connection(ep, DAT_CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR);
        return DAT_SUCCESS;
    }
    ep->state = DAT_EP_STATE_COMPLETION_PENDING;
    return DAT_SUCCESS;
}

DAT_RETURN cr_reject(DAT_CR_HANDLE h, DAT_COUNT len, const DAT_PVOID data) {
    Cr* cr = as<Cr>(h);
    if (cr == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
    if (len < 0 || len > kMaxPrivateData || (len > 0 && data == nullptr))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    Ia* ia = cr->ia;
    std::lock_guard ia_lock(ia->mu);
    if (!cr->live(Kind::cr)) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
    rdma_reject(cr->id, len > 0 ? data : nullptr, static_cast<std::uint8_t>(len));
    retire_id(ia, cr->id);
    if (cr->ep != nullptr) ep_free_handle(cr->ep);  // the EP the provider made for it
    if (cr->sp != nullptr && cr->sp->ep != nullptr) {
        std::lock_guard lock(cr->sp->ep->mu);
        cr->sp->ep->state = DAT_EP_STATE_RESERVED;
    }
    destroy_cr(cr);
    return DAT_SUCCESS;
}

// Hands the request to this IA's service point on another qualifier.
DAT_RETURN cr_handoff(DAT_CR_HANDLE h, DAT_CONN_QUAL qual) {
    Cr* cr = as<Cr>(h);
    if (cr == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_CR);
    Ia* ia = cr->ia;
    std::lock_guard ia_lock(ia->mu);
    Sp* to = nullptr;
    for (Sp* sp : ia->sps)
        if (sp->qual == qual && sp->kind.load() == Kind::psp) to = sp;
    if (to == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    cr->sp = to;
    DAT_EVENT ev{};
    ev.event_number = DAT_CONNECTION_REQUEST_EVENT;
    auto& d = ev.event_data.cr_arrival_event_data;
    d.sp_handle.psp_handle = to;
    d.local_ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ia->addr);
    d.conn_qual = qual;
    d.cr_handle = cr;
    d.truncate_flag = DAT_FALSE;
    to->evd->post(ev);
    return DAT_SUCCESS;
}

// ---- the active side ----

DAT_RETURN ep_connect(DAT_EP_HANDLE h, DAT_IA_ADDRESS_PTR remote, DAT_CONN_QUAL qual,
                      DAT_TIMEOUT timeout, DAT_COUNT len, const DAT_PVOID data, DAT_QOS qos,
                      DAT_CONNECT_FLAGS flags) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    if (remote == nullptr || remote->sa_family != AF_INET)
        return err(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
    if (len < 0 || len > kMaxPrivateData || (len > 0 && data == nullptr))
        return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG5);
    if (qos != DAT_QOS_BEST_EFFORT) return err(DAT_MODEL_NOT_SUPPORTED);
    if ((flags & DAT_CONNECT_MULTIPATH_REQUIRED_FLAG) != 0) return err(DAT_MODEL_NOT_SUPPORTED);
    Ia* ia = ep->ia;
    std::lock_guard ia_lock(ia->mu);
    std::lock_guard lock(ep->mu);
    if (ep->state == DAT_EP_STATE_DISCONNECTED) {
        // As the OFED provider allows: a disconnected EP is reset and reused.
        if (ep->cm != nullptr) retire_id(ia, ep->cm);
        ep->cm = nullptr;
        if (reset_qp(ep) != 0) return err(DAT_INTERNAL_ERROR);
        ep->state = DAT_EP_STATE_UNCONNECTED;
    }
    if (ep->state != DAT_EP_STATE_UNCONNECTED)
        return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
    if (ep->connect_evd == nullptr)
        return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_UNCONFIGURED);
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ia->channel, &id, ep, RDMA_PS_TCP) != 0) return from_errno(errno);
    std::memcpy(&ep->remote, remote, sizeof ep->remote);
    ep->remote.sin_port = htons(port_of(qual));
    ep->remote_qual = qual;
    ep->connect_data_len = len;
    if (len > 0) std::memcpy(ep->connect_data, data, static_cast<std::size_t>(len));
    ep->established_posted = ep->disconnect_posted = false;
    sockaddr_in src = ia->addr;
    src.sin_port = 0;
    const int ms = timeout == DAT_TIMEOUT_INFINITE
                       ? 2000
                       : static_cast<int>(std::clamp<DAT_TIMEOUT>(timeout / 1000, 1, 60000));
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src),
                          reinterpret_cast<sockaddr*>(&ep->remote), ms) != 0) {
        const int e = errno;
        rdma_destroy_id(id);
        return e == ENETUNREACH ? err(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNREACHABLE)
                                : from_errno(e);
    }
    ep->cm = id;
    ep->state = DAT_EP_STATE_ACTIVE_CONNECTION_PENDING;
    return DAT_SUCCESS;
}

DAT_RETURN ep_common_connect(DAT_EP_HANDLE h, DAT_IA_ADDRESS_PTR remote, DAT_TIMEOUT timeout,
                             DAT_COUNT len, const DAT_PVOID data) {
    if (remote == nullptr || remote->sa_family != AF_INET)
        return err(DAT_INVALID_ADDRESS, DAT_INVALID_ADDRESS_UNSUPPORTED);
    const auto* sin = reinterpret_cast<const sockaddr_in*>(remote);
    return ep_connect(h, remote, ntohs(sin->sin_port), timeout, len, data, DAT_QOS_BEST_EFFORT,
                      DAT_CONNECT_DEFAULT_FLAG);
}

DAT_RETURN ep_dup_connect(DAT_EP_HANDLE h, DAT_EP_HANDLE dup, DAT_TIMEOUT timeout, DAT_COUNT len,
                          const DAT_PVOID data, DAT_QOS qos) {
    Ep* other = as<Ep>(dup);
    if (other == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    sockaddr_in to{};
    DAT_CONN_QUAL qual = 0;
    {
        std::lock_guard lock(other->mu);
        if (other->state != DAT_EP_STATE_CONNECTED)
            return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
        to = other->remote;
        qual = other->remote_qual;
    }
    return ep_connect(h, reinterpret_cast<DAT_IA_ADDRESS_PTR>(&to), qual, timeout, len, data, qos,
                      DAT_CONNECT_DEFAULT_FLAG);
}

DAT_RETURN ep_disconnect(DAT_EP_HANDLE h, DAT_CLOSE_FLAGS flags) {
    Ep* ep = as<Ep>(h);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    Ia* ia = ep->ia;
    std::lock_guard ia_lock(ia->mu);
    std::lock_guard lock(ep->mu);
    switch (ep->state) {
        case DAT_EP_STATE_CONNECTED:
            if (flags == DAT_CLOSE_ABRUPT_FLAG) flush_ep(ep);
            ep->state = DAT_EP_STATE_DISCONNECT_PENDING;
            if (rdma_disconnect(ep->cm) != 0) end_connection(ep, DAT_CONNECTION_EVENT_DISCONNECTED);
            return DAT_SUCCESS;
        case DAT_EP_STATE_ACTIVE_CONNECTION_PENDING:
        case DAT_EP_STATE_COMPLETION_PENDING:
            // Abandon the attempt: the id goes, and so does whatever it would report.
            if (ep->cm != nullptr) {
                rdma_disconnect(ep->cm);
                retire_id(ia, ep->cm);
                ep->cm = nullptr;
            }
            end_connection(ep, DAT_CONNECTION_EVENT_DISCONNECTED);
            return DAT_SUCCESS;
        case DAT_EP_STATE_DISCONNECT_PENDING:
            if (flags == DAT_CLOSE_ABRUPT_FLAG) flush_ep(ep);
            return DAT_SUCCESS;
        case DAT_EP_STATE_DISCONNECTED:
            return DAT_SUCCESS;
        default:
            return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
    }
}

}  // namespace

DAT_RETURN start_events(Ia* ia) {
    ia->channel = rdma_create_event_channel();
    if (ia->channel == nullptr) return from_errno(errno);
    const int fl = ::fcntl(ia->channel->fd, F_GETFL);
    if (fl < 0 || ::fcntl(ia->channel->fd, F_SETFL, fl | O_NONBLOCK) != 0) return from_errno(errno);
    // The device's async fd too: poll may report it readable with nothing left to read
    // (a notification another reader took), and a blocking read would keep the thread
    // from ever seeing the stop request.
    const int afl = ::fcntl(ia->ctx->async_fd, F_GETFL);
    if (afl < 0 || ::fcntl(ia->ctx->async_fd, F_SETFL, afl | O_NONBLOCK) != 0)
        return from_errno(errno);
    ia->wake_fd = ::eventfd(0, EFD_CLOEXEC);
    if (ia->wake_fd < 0) return from_errno(errno);
    ia->events_thread = std::thread(events_loop, ia);
    return DAT_SUCCESS;
}

void retire_id(Ia* ia, rdma_cm_id* id) {
    id->context = nullptr;
    ia->retired_ids.push_back(id);
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(ia->wake_fd, &one, sizeof one);
}

void stop_events(Ia* ia) {
    ia->stopping = true;
    if (ia->events_thread.joinable()) {
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(ia->wake_fd, &one, sizeof one);
        ia->events_thread.join();
    }
    {
        std::lock_guard lock(ia->mu);
        for (Sp* sp : ia->sps) {
            sp->listen->context = nullptr;
            rdma_destroy_id(sp->listen);
        }
        ia->sps.clear();
        for (Cr* cr : ia->crs) {
            rdma_reject(cr->id, nullptr, 0);
            rdma_destroy_id(cr->id);
        }
        ia->crs.clear();
    }
    destroy_retired_ids(ia);
    if (ia->provider_pz != nullptr && ibv_dealloc_pd(ia->provider_pz->pd) == 0) {
        retire(ia->provider_pz);
        ia->provider_pz = nullptr;
    }
    if (ia->channel != nullptr) rdma_destroy_event_channel(ia->channel);
    ia->channel = nullptr;
    if (ia->wake_fd >= 0) ::close(ia->wake_fd);
    ia->wake_fd = -1;
}

void fill_provider_connect(DAT_PROVIDER& p) {
    p.psp_create_func = psp_create;
    p.psp_create_any_func = psp_create_any;
    p.psp_query_func = psp_query;
    p.psp_free_func = psp_free;
    p.rsp_create_func = rsp_create;
    p.rsp_query_func = rsp_query;
    p.rsp_free_func = rsp_free;
    p.cr_query_func = cr_query;
    p.cr_accept_func = cr_accept;
    p.cr_reject_func = cr_reject;
    p.cr_handoff_func = cr_handoff;
    p.ep_connect_func = ep_connect;
    p.ep_common_connect_func = ep_common_connect;
    p.ep_dup_connect_func = ep_dup_connect;
    p.ep_disconnect_func = ep_disconnect;
}

}  // namespace snic::dapl
