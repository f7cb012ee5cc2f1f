// libndsnic: connections. A connector is one rdma_cm id on its adapter's event channel; the
// adapter's event thread drives it (handle) and completes the overlapped requests:
//   Connect          resolve address and route, rdma_connect; done on the peer's answer
//                    (RoCEv2: CONNECT_RESPONSE; iWARP: ESTABLISHED, its CM having moved the QP)
//   CompleteConnect  QP to RTR/RTS and rdma_establish (RoCEv2); done at once
//   Accept           QP to RTR/RTS (RoCEv2), rdma_accept; done on ESTABLISHED
//   NotifyDisconnect done when the connection ends, whoever ends it
//   Disconnect       rdma_disconnect and the QP flushed; done at once
// A listener keeps the connection requests it gets until GetConnectionRequest hands one to
// a connector.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "nd/provider.h"

namespace snic::nd {

namespace {

constexpr int kResolveMs = 2000;
constexpr int kRejConsumer = 28;  // IB CM's "consumer reject"

OVERLAPPED* take(OVERLAPPED*& slot) {
    OVERLAPPED* ov = slot;
    slot = nullptr;
    return ov;
}

void finish_if(OVERLAPPED*& slot, HRESULT status) {
    if (OVERLAPPED* ov = take(slot); ov != nullptr) finish(ov, status);
}

HRESULT copy_address(const sockaddr* from, sockaddr* to, SIZE_T* len) {
    if (len == nullptr) return ND_INVALID_PARAMETER_2;
    if (from == nullptr || from->sa_family != AF_INET) return ND_CONNECTION_INVALID;
    if (to == nullptr || *len < sizeof(sockaddr_in)) {
        *len = sizeof(sockaddr_in);
        return ND_BUFFER_OVERFLOW;
    }
    std::memcpy(to, from, sizeof(sockaddr_in));
    *len = sizeof(sockaddr_in);
    return ND_SUCCESS;
}

}  // namespace

Connector::~Connector() {
    Endpoint* e = nullptr;
    {
        std::lock_guard lock(adapter->mu);
        if (id_ != nullptr) {
            if (state_ == ConnState::requested) rdma_reject(id_, nullptr, 0);
            if (state_ == ConnState::connected) rdma_disconnect(id_);
            id_->context = nullptr;
            adapter->retire_id(id_);
            id_ = nullptr;
        }
        if (ep != nullptr) {
            ep->to_error();
            ep->connector = nullptr;
            e = std::exchange(ep, nullptr);
        }
    }
    // Released without the adapter's lock: destroying the QP waits until the event thread
    // acknowledged the QP's asynchronous events, and that thread takes the lock to handle one.
    if (e != nullptr) e->Release();
    adapter->Release();
}

HRESULT Connector::CancelOverlappedRequests() {
    std::lock_guard lock(adapter->mu);
    for (OVERLAPPED** slot : {&connect_ov_, &accept_ov_, &disconnect_ov_})
        finish_if(*slot, ND_CANCELED);
    return ND_SUCCESS;
}

HRESULT Connector::CreateEndpoint(INDCompletionQueue* in, INDCompletionQueue* out, SIZE_T n_in,
                                  SIZE_T n_out, SIZE_T sge_in, SIZE_T sge_out, SIZE_T read_in,
                                  SIZE_T read_out, SIZE_T* max_inline, INDEndpoint** out_ep) {
    if (in == nullptr) return ND_INVALID_PARAMETER_1;
    if (out == nullptr) return ND_INVALID_PARAMETER_2;
    if (out_ep == nullptr) return ND_INVALID_PARAMETER_10;
    std::lock_guard lock(adapter->mu);
    if (ep != nullptr) return ND_CONNECTION_ACTIVE;  // one endpoint per connector
    auto* e = new Endpoint(adapter, this);
    if (const HRESULT r =
            e->create(static_cast<CompletionQueue*>(in), static_cast<CompletionQueue*>(out), n_in,
                      n_out, sge_in, sge_out, read_in, read_out);
        r != ND_SUCCESS) {
        e->connector = nullptr;
        e->Release();
        return r;
    }
    if (max_inline != nullptr) *max_inline = 0;
    e->AddRef();  // the connector's reference
    ep = e;
    *out_ep = e;
    return ND_SUCCESS;
}

HRESULT Connector::Connect(INDEndpoint* endpoint, const sockaddr* addr, SIZE_T len, INT,
                           USHORT local_port, const void* data, SIZE_T data_len, OVERLAPPED* ov) {
    if (endpoint == nullptr) return ND_INVALID_PARAMETER_1;
    if (addr == nullptr || len < sizeof(sockaddr_in) || addr->sa_family != AF_INET)
        return ND_INVALID_ADDRESS;
    if (data_len > kMaxCallerData || (data_len > 0 && data == nullptr))
        return ND_INVALID_PARAMETER_7;
    if (ov == nullptr) return ND_INVALID_PARAMETER_8;
    std::lock_guard lock(adapter->mu);
    if (static_cast<Endpoint*>(endpoint) != ep) return ND_INVALID_PARAMETER_1;
    if (state_ != ConnState::idle) return ND_CONNECTION_ACTIVE;
    if (rdma_create_id(adapter->cm_channel, &id_, this, RDMA_PS_TCP) != 0)
        return ND_INSUFFICIENT_RESOURCES;
    sockaddr_in src = adapter->addr;
    src.sin_port = htons(local_port);
    if (rdma_resolve_addr(id_, reinterpret_cast<sockaddr*>(&src), const_cast<sockaddr*>(addr),
                          kResolveMs) != 0) {
        const int e = errno;
        adapter->retire_id(id_);
        id_ = nullptr;
        return e == EADDRINUSE ? ND_ADDRESS_ALREADY_EXISTS : ND_HOST_UNREACHABLE;
    }
    out_len_ = data_len;
    if (data_len > 0) std::memcpy(out_data_, data, data_len);
    state_ = ConnState::connecting;
    start(ov);
    connect_ov_ = ov;
    return ND_PENDING;
}

HRESULT Connector::CompleteConnect(OVERLAPPED* ov) {
    if (ov == nullptr) return ND_INVALID_PARAMETER_1;
    std::lock_guard lock(adapter->mu);
    if (state_ != ConnState::responded) return ND_CONNECTION_INVALID;
    if (!established_) {
        if (ep->move_qp(id_) != 0 || rdma_establish(id_) != 0) {
            rdma_disconnect(id_);
            ended(ND_CONNECTION_ABORTED);
            return ND_CONNECTION_ABORTED;
        }
        established_ = true;
    }
    state_ = ConnState::connected;
    ep->connected.store(true, std::memory_order_release);
    start(ov);
    finish(ov, ND_SUCCESS);
    return ND_SUCCESS;
}

void Connector::take_request(const Request& r) {
    id_ = r.id;
    id_->context = this;
    std::memcpy(peer_data_, r.data, r.len);
    peer_len_ = r.len;
    peer_read_in_ = r.read_in;
    peer_read_out_ = r.read_out;
    state_ = ConnState::requested;
}

HRESULT Connector::Accept(INDEndpoint* endpoint, const void* data, SIZE_T len, OVERLAPPED* ov) {
    if (endpoint == nullptr) return ND_INVALID_PARAMETER_1;
    if (len > kMaxCalleeData || (len > 0 && data == nullptr)) return ND_INVALID_PARAMETER_3;
    if (ov == nullptr) return ND_INVALID_PARAMETER_4;
    std::lock_guard lock(adapter->mu);
    if (static_cast<Endpoint*>(endpoint) != ep) return ND_INVALID_PARAMETER_1;
    if (state_ != ConnState::requested) return ND_CONNECTION_INVALID;
    rdma_conn_param p{};
    p.qp_num = ep->qp->qp_num;
    // Never more Reads than the requester can take, nor than it said it will have out.
    p.responder_resources =
        static_cast<std::uint8_t>(std::min<SIZE_T>(ep->read_in, peer_read_out_));
    p.initiator_depth = static_cast<std::uint8_t>(std::min<SIZE_T>(ep->read_out, peer_read_in_));
    p.rnr_retry_count = 7;
    p.private_data = len > 0 ? data : nullptr;
    p.private_data_len = static_cast<std::uint8_t>(len);
    start(ov);
    accept_ov_ = ov;
    state_ = ConnState::accepting;
    if (ep->move_qp(id_) != 0 || rdma_accept(id_, &p) != 0) {
        ended(ND_CONNECTION_ABORTED);
        return ND_PENDING;  // the overlapped request holds the failure
    }
    return ND_PENDING;
}

HRESULT Connector::Reject(const void* data, SIZE_T len) {
    if (len > kMaxCalleeData || (len > 0 && data == nullptr)) return ND_INVALID_PARAMETER_2;
    std::lock_guard lock(adapter->mu);
    if (state_ != ConnState::requested) return ND_CONNECTION_INVALID;
    rdma_reject(id_, data, static_cast<std::uint8_t>(len));
    id_->context = nullptr;
    adapter->retire_id(id_);
    id_ = nullptr;
    state_ = ConnState::closed;
    return ND_SUCCESS;
}

HRESULT Connector::GetConnectionData(SIZE_T* read_in, SIZE_T* read_out, void* data, SIZE_T* len) {
    if (len == nullptr) return ND_INVALID_PARAMETER_4;
    std::lock_guard lock(adapter->mu);
    if (state_ == ConnState::idle || state_ == ConnState::connecting) return ND_CONNECTION_INVALID;
    if (read_in != nullptr) *read_in = peer_read_in_;
    if (read_out != nullptr) *read_out = peer_read_out_;
    if (data == nullptr || *len < peer_len_) {
        *len = peer_len_;
        return ND_BUFFER_OVERFLOW;
    }
    std::memcpy(data, peer_data_, peer_len_);
    *len = peer_len_;
    return ND_SUCCESS;
}

HRESULT Connector::GetLocalAddress(sockaddr* addr, SIZE_T* len) {
    std::lock_guard lock(adapter->mu);
    if (id_ == nullptr) return ND_CONNECTION_INVALID;
    return copy_address(rdma_get_local_addr(id_), addr, len);
}

HRESULT Connector::GetPeerAddress(sockaddr* addr, SIZE_T* len) {
    std::lock_guard lock(adapter->mu);
    if (id_ == nullptr) return ND_CONNECTION_INVALID;
    return copy_address(rdma_get_peer_addr(id_), addr, len);
}

HRESULT Connector::NotifyDisconnect(OVERLAPPED* ov) {
    if (ov == nullptr) return ND_INVALID_PARAMETER_1;
    std::lock_guard lock(adapter->mu);
    if (disconnect_ov_ != nullptr) return ND_DEVICE_BUSY;
    start(ov);
    if (state_ == ConnState::closed) {
        finish(ov, ND_SUCCESS);
        return ND_SUCCESS;
    }
    disconnect_ov_ = ov;
    return ND_PENDING;
}

HRESULT Connector::Disconnect(OVERLAPPED* ov) {
    if (ov == nullptr) return ND_INVALID_PARAMETER_1;
    std::lock_guard lock(adapter->mu);
    if (state_ != ConnState::connected) return ND_CONNECTION_INVALID;
    rdma_disconnect(id_);
    ended(ND_SUCCESS);
    start(ov);
    finish(ov, ND_SUCCESS);
    return ND_SUCCESS;
}

void Connector::keep_peer_data(const rdma_conn_param& c) {
    peer_len_ =
        c.private_data != nullptr ? std::min<SIZE_T>(c.private_data_len, kMaxCalleeData) : 0;
    if (peer_len_ > 0) std::memcpy(peer_data_, c.private_data, peer_len_);
    // As the peer states them: the Reads it takes from us, and those it lets us send.
    peer_read_in_ = c.initiator_depth;
    peer_read_out_ = c.responder_resources;
}

// The connection ended or never came up: the QP flushes, every request of the connection
// completes (`why` for one still starting it), and NotifyDisconnect hears of it.
void Connector::ended(HRESULT why) {
    if (ep != nullptr) ep->to_error();
    state_ = ConnState::closed;
    finish_if(connect_ov_, why);
    finish_if(accept_ov_, why);
    finish_if(disconnect_ov_, ND_SUCCESS);
}

void Connector::qp_failed() {
    if (state_ != ConnState::connected) return;
    rdma_disconnect(id_);
    ended(ND_CONNECTION_ABORTED);
}

void Connector::handle(rdma_cm_event* e) {
    switch (e->event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (rdma_resolve_route(e->id, kResolveMs) != 0) ended(ND_HOST_UNREACHABLE);
            return;
        case RDMA_CM_EVENT_ROUTE_RESOLVED: {
            rdma_conn_param p{};
            p.qp_num = ep->qp->qp_num;
            p.responder_resources = static_cast<std::uint8_t>(ep->read_in);
            p.initiator_depth = static_cast<std::uint8_t>(ep->read_out);
            p.retry_count = 7;
            p.rnr_retry_count = 7;
            p.private_data = out_len_ > 0 ? out_data_ : nullptr;
            p.private_data_len = static_cast<std::uint8_t>(out_len_);
            if (rdma_connect(e->id, &p) != 0) ended(ND_HOST_UNREACHABLE);
            return;
        }
        case RDMA_CM_EVENT_CONNECT_RESPONSE:
            if (state_ != ConnState::connecting) return;
            keep_peer_data(e->param.conn);
            state_ = ConnState::responded;
            finish_if(connect_ov_, ND_SUCCESS);
            return;
        case RDMA_CM_EVENT_ESTABLISHED:
            if (state_ == ConnState::connecting) {  // iWARP: the CM moved the QP already
                keep_peer_data(e->param.conn);
                established_ = true;
                state_ = ConnState::responded;
                finish_if(connect_ov_, ND_SUCCESS);
            } else if (state_ == ConnState::accepting) {
                state_ = ConnState::connected;
                ep->connected.store(true, std::memory_order_release);
                finish_if(accept_ov_, ND_SUCCESS);
            }
            return;
        case RDMA_CM_EVENT_REJECTED: {
            if (state_ == ConnState::accepting) {
                ended(ND_CONNECTION_ABORTED);
                return;
            }
            // The peer's consumer refused (IB CM's reason 28, an MPA reject on iWARP); its
            // private data is the connector's connection data. Otherwise nobody listened.
            const bool by_peer =
                e->status == kRejConsumer || (adapter->iwarp && e->status == -ECONNREFUSED);
            if (by_peer) keep_peer_data(e->param.conn);
            ended(ND_CONNECTION_REFUSED);
            return;
        }
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
            if (state_ == ConnState::accepting) {
                ended(ND_CONNECTION_ABORTED);
                return;
            }
            ended(e->status == -ETIMEDOUT ? ND_TIMEOUT : ND_HOST_UNREACHABLE);
            return;
        case RDMA_CM_EVENT_DISCONNECTED:
            if (state_ == ConnState::connected || state_ == ConnState::responded)
                rdma_disconnect(e->id);  // the answer to the peer's
            ended(ND_CONNECTION_ABORTED);
            return;
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            ended(ND_DEVICE_REMOVED);
            return;
        default:
            return;
    }
}

// ---- listener ----

Listen::~Listen() {
    {
        std::lock_guard lock(adapter->mu);
        std::erase(adapter->listeners, this);
        if (id_ != nullptr) adapter->retire_id(id_);
        for (Request& r : requests_) {
            rdma_reject(r.id, nullptr, 0);
            adapter->retire_id(r.id);
        }
    }
    CancelOverlappedRequests();
    adapter->Release();
}

HRESULT Listen::open(SIZE_T backlog, USHORT port, USHORT* assigned) {
    if (rdma_create_id(adapter->cm_channel, &id_, nullptr, RDMA_PS_TCP) != 0)
        return ND_INSUFFICIENT_RESOURCES;
    sockaddr_in a = adapter->addr;
    a.sin_port = htons(port);
    if (rdma_bind_addr(id_, reinterpret_cast<sockaddr*>(&a)) != 0 ||
        rdma_listen(id_, static_cast<int>(std::clamp<SIZE_T>(backlog, 1, 1024))) != 0) {
        const int e = errno;
        std::lock_guard lock(adapter->mu);
        adapter->retire_id(id_);
        id_ = nullptr;
        return e == EADDRINUSE ? ND_ADDRESS_ALREADY_EXISTS : ND_INSUFFICIENT_RESOURCES;
    }
    if (assigned != nullptr) *assigned = ntohs(rdma_get_src_port(id_));
    std::lock_guard lock(adapter->mu);
    adapter->listeners.push_back(this);
    return ND_SUCCESS;
}

void Listen::request(rdma_cm_event* e) {
    Request r;
    r.id = e->id;
    e->id->context = nullptr;
    const rdma_conn_param& c = e->param.conn;
    r.len = c.private_data != nullptr ? std::min<SIZE_T>(c.private_data_len, kMaxCallerData) : 0;
    if (r.len > 0) std::memcpy(r.data, c.private_data, r.len);
    r.read_in = c.initiator_depth;
    r.read_out = c.responder_resources;
    if (waiters_.empty()) {
        requests_.push_back(r);
        return;
    }
    Waiter w = waiters_.front();
    waiters_.pop_front();
    auto* c_ = static_cast<Connector*>(w.connector);
    c_->take_request(r);
    finish(w.ov, ND_SUCCESS);
    // The event thread holds no asynchronous event here: a last reference may go.
    c_->Release();
}

HRESULT Listen::GetConnectionRequest(INDConnector* connector, OVERLAPPED* ov) {
    if (connector == nullptr) return ND_INVALID_PARAMETER_1;
    if (ov == nullptr) return ND_INVALID_PARAMETER_2;
    auto* c = static_cast<Connector*>(connector);
    std::lock_guard lock(adapter->mu);
    if (!c->idle()) return ND_CONNECTION_ACTIVE;
    if (std::any_of(waiters_.begin(), waiters_.end(),
                    [&](const Waiter& w) { return w.connector == c; }))
        return ND_CONNECTION_ACTIVE;
    start(ov);
    if (!requests_.empty()) {
        c->take_request(requests_.front());
        requests_.pop_front();
        finish(ov, ND_SUCCESS);
        return ND_SUCCESS;
    }
    c->AddRef();  // held until a request comes or the wait is canceled
    waiters_.push_back({c, ov});
    return ND_PENDING;
}

HRESULT Listen::CancelOverlappedRequests() {
    std::deque<Waiter> waiters;
    {
        std::lock_guard lock(adapter->mu);
        waiters.swap(waiters_);
    }
    // Their references go without the adapter's lock (see ~Connector).
    for (Waiter& w : waiters) {
        finish(w.ov, ND_CANCELED);
        w.connector->Release();
    }
    return ND_SUCCESS;
}

}  // namespace snic::nd
