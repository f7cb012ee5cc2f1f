// The ops of one client's CM connection (shm/cm.h): each checks what the client sent, then
// acts on the id through the service's tables and the id's wire (daemon/cm/wire.h).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/cm/ids.h"
#include "daemon/cm/service.h"

namespace snic::daemon {

namespace {

// Linux's default and largest listen backlog for rdma_cm (ucma's max_backlog).
constexpr std::uint32_t kMaxBacklog = 1024;
constexpr std::uint16_t kFirstUnprivilegedPort = 1024;

bool valid_ps(std::uint16_t ps) {
    return ps == shm::kCmPsTcp || ps == shm::kCmPsUdp || ps == shm::kCmPsIb ||
           ps == shm::kCmPsIpoib;
}

int too_long(const char* op, std::size_t len, std::size_t max) {
    return cm_refuse(EINVAL, op, fmt::format("{} bytes of private data, {} at most", len, max));
}

// The most private data a client may give for a message: what the wire carries, and never
// more than the buffer of the request it is copied from (a wire may carry more than the
// request holds: an MPA reject 255 bytes, from a 148-byte array).
template <std::size_t N>
std::size_t room(std::size_t wire_max, const std::uint8_t (&)[N]) {
    return std::min(wire_max, N);
}

int failed(const char* op, const Error& e) {
    return cm_refuse(e.code != 0 ? e.code : EINVAL, op, e.message);
}

}  // namespace

CmSession::~CmSession() {
    // Everything the connection owned goes: the peers hear a rejection or a disconnect.
    std::vector<shm::Handle> mine;
    service_.ids_.for_each([&](const CmService::Id& id) {
        if (id.owner == this) mine.push_back(id.handle);
    });
    for (const shm::Handle h : mine)
        if (CmService::Id* id = service_.ids_.find(h)) service_.destroy(*id);
    service_.drain_events();
    service_.sessions_.erase(cookie_);
}

int CmSession::open(FdList& fds, Resources& resources) {
    constexpr const char* op = "cm_open";
    if (ring_) return cm_refuse(EINVAL, op, "already open");
    if (fds.size() != 2) return cm_refuse(EINVAL, op, "takes 2 fds: notification socket, memfd");
    if (!is_notify_socket(fds.get(0)))
        return cm_refuse(EINVAL, op, "first fd is not a notification socket (AF_UNIX SOCK_STREAM)");
    auto notify = resources.keep_fd(fds.take(0), peer_.uid, fds_);
    if (!notify) {
        spdlog::warn("cm: connection of pid {} uid {}: {} refused ({}): {}", peer_.pid, peer_.uid,
                     op, std::strerror(notify.error().code), notify.error().message);
        return notify.error().code;
    }
    const shm::Layout layout = shm::cm_event_layout();
    auto map = map_object(fds.get(1), layout.bytes, nullptr);
    if (!map) return cm_refuse(map.error().code, op, map.error().message);
    auto ring = shm::RingProducer<shm::CmEvent>::attach(map->span(0, layout.bytes));
    if (!ring)
        return cm_refuse(EINVAL, op,
                         std::string("event ring: ") + shm::ring_strerror(ring.error()));
    if (ring->capacity() != shm::kCmEventCapacity)
        return cm_refuse(EINVAL, op,
                         fmt::format("event ring of {} entries, {} expected", ring->capacity(),
                                     shm::kCmEventCapacity));
    map_ = std::move(*map);
    ring_ = *ring;
    notify_ = std::move(*notify);
    return 0;
}

bool CmSession::push(const shm::CmEvent& e) {
    if (!ring_ || !ring_->try_push(e)) return false;
    notify(notify_.get());
    return true;
}

int CmSession::create_id(const shm::CmCreateIdReq& req, shm::CmIdReply& out) {
    constexpr const char* op = "cm_create_id";
    if (!valid_ps(req.ps)) return cm_refuse(EINVAL, op, fmt::format("port space {:#x}", req.ps));
    const bool ud = req.ps == shm::kCmPsUdp || req.ps == shm::kCmPsIpoib;
    if (ud ? req.qp_type != IBV_QPT_UD
           : req.qp_type != IBV_QPT_RC && req.qp_type != IBV_QPT_UC && req.qp_type != IBV_QPT_UD)
        return cm_refuse(EINVAL, op,
                         fmt::format("QP type {} in port space {:#x}", req.qp_type, req.ps));
    if (!service_.has_room(*this))
        return cm_refuse(
            ENOMEM, op,
            fmt::format("{} ids on this connection ({} at most), {} of uid {} ({} at "
                        "most)",
                        ids_, CmService::kMaxIdsPerSession, service_.ids_by_uid_[peer_.uid],
                        peer_.uid, CmService::kMaxIdsPerUid));
    auto id = std::make_unique<CmService::Id>();
    id->owner = this;
    id->token = req.token;
    id->ps = req.ps;
    id->qp_type = req.qp_type;
    const shm::Handle h = service_.ids_.insert(std::move(id));
    if (h == shm::kNoHandle) return cm_refuse(ENOMEM, op, "id table full");
    service_.count_id(*this, +1);

    out = {h, 0};
    return 0;
}

int CmSession::destroy_id(const shm::HandleReq& req) {
    CmService::Id* id = service_.find(*this, req.handle, "cm_destroy_id");
    if (id == nullptr) return EINVAL;
    service_.destroy(*id);
    service_.drain_events();
    return 0;
}

int CmSession::bind(const shm::CmBindReq& req, shm::CmBindReply& out) {
    constexpr const char* op = "cm_bind";
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->bound) return cm_refuse(EINVAL, op, "already bound");
    std::uint16_t index = shm::kCmNoPort;
    if (req.ip != 0) {
        const auto p = service_.port_for(req.ip);
        if (!p || service_.devices_[*p].ip.addr.value != req.ip)
            return cm_refuse(EADDRNOTAVAIL, op,
                             net::Ipv4Addr{req.ip}.to_string() + " is no port's address");
        index = *p;
    }
    std::uint16_t port = req.port;
    // As Linux's rdma_cm (cma_get_port): a port below 1024 is root's (a wire may carry it as
    // a real TCP port of the host's address, which a peer trusts as the host's).
    if (port != 0 && port < kFirstUnprivilegedPort && peer_.uid != 0)
        return cm_refuse(EACCES, op, fmt::format("port {} is privileged", port));
    if (port == 0) {
        port = service_.ephemeral_port(*id, req.ip);
        if (port == 0) return cm_refuse(EADDRINUSE, op, "no ephemeral port left");
    } else if (!service_.bindable(*id, req.ip, port, req.reuse_addr != 0)) {
        return cm_refuse(EADDRINUSE, op, fmt::format("port {} is in use", port));
    }
    id->bound = true;
    id->ephemeral = req.port == 0;
    id->reuse = req.reuse_addr != 0;
    id->ip = req.ip;
    id->port = port;
    id->port_index = index;
    out = {id->ip, id->port, index};
    return 0;
}

int CmSession::listen(const shm::CmListenReq& req) {
    constexpr const char* op = "cm_listen";
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->state != CmService::Id::State::idle || id->conn != 0)
        return cm_refuse(EINVAL, op, "the id is not idle");
    if (!id->bound) {
        const std::uint16_t port = service_.ephemeral_port(*id, 0);
        if (port == 0) return cm_refuse(EADDRINUSE, op, "no ephemeral port left");
        id->bound = true, id->ephemeral = true, id->ip = 0, id->port = port,
        id->port_index = shm::kCmNoPort;
    }
    // REUSEADDR shares an address between ids that do not listen: a listen wants it alone
    // (Linux's rdma_listen checks the port as if no id reused it), and keeps it so.
    if (!service_.bindable(*id, id->ip, id->port, false))
        return cm_refuse(EADDRINUSE, op, fmt::format("port {} is in use", id->port));
    id->backlog = req.backlog > 0 && req.backlog < kMaxBacklog ? req.backlog : kMaxBacklog;
    if (const Status on = service_.listen_on_wires(*id); !on)
        return cm_refuse(on.error().code, op, on.error().message);
    id->reuse = false;
    id->state = CmService::Id::State::listening;
    spdlog::debug("cm: id {} listens on port {} (port space {:#x})", req.id, id->port,
                  static_cast<unsigned>(id->ps));
    return 0;
}

int CmSession::connect(const shm::CmConnectReq& req) {
    constexpr const char* op = "cm_connect";
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->state != CmService::Id::State::idle || id->conn != 0)
        return cm_refuse(EINVAL, op, "the id is not idle");
    const bool sidr = id->qp_type == IBV_QPT_UD;
    if (req.dst_port == 0) return cm_refuse(EINVAL, op, "destination port 0");
    std::uint16_t index = id->port_index;
    if (index == shm::kCmNoPort) {
        const auto p = service_.port_for(req.dst_ip);
        if (!p)
            return cm_refuse(ENETUNREACH, op,
                             net::Ipv4Addr{req.dst_ip}.to_string() + " is on no port's subnet");
        index = *p;
    }
    const auto wire = service_.wire_for(index, static_cast<std::uint8_t>(req.transport));
    if (!wire)
        return cm_refuse(
            EINVAL, op, fmt::format("port {} has no device of transport {}", index, req.transport));
    CmWire& w = *service_.wires_[*wire]->wire;
    if (sidr && !w.datagrams())
        return cm_refuse(EINVAL, op, "the device has no datagram service (SIDR)");
    if (const std::size_t max =
            room(w.private_max(CmMessage::request, sidr), req.param.private_data);
        req.param.private_data_len > max)
        return too_long(op, req.param.private_data_len, max);
    if (peer_.uid != 0 && service_.connecting(peer_.uid) >= CmService::kMaxConnectingPerUid)
        return cm_refuse(EAGAIN, op,
                         fmt::format("uid {} has {} connects unanswered, its share", peer_.uid,
                                     CmService::kMaxConnectingPerUid));
    const std::uint32_t local = service_.devices_[index].ip.addr.value;
    if (!id->bound) {
        const std::uint16_t port = service_.ephemeral_port(*id, local);
        if (port == 0) return cm_refuse(EADDRINUSE, op, "no ephemeral port left");
        id->bound = true, id->ephemeral = true, id->port = port;
    }
    id->ip = local;
    id->port_index = index;

    CmConnectSpec spec;
    spec.local_ip = local;
    spec.local_port = id->port;
    spec.remote_ip = req.dst_ip;
    spec.remote_port = req.dst_port;
    spec.ps = id->ps;
    spec.qp_type = id->qp_type;
    spec.param = &req.param;
    spec.cm_response_timeout = req.cm_response_timeout;
    spec.max_cm_retries = req.max_cm_retries;
    spec.owner = &peer_;
    auto conn = w.connect(spec);
    // A port the service drew that the wire finds taken (by the kernel, on a shared address):
    // another draw, a few times, as the kernel's own connect moves on past a used port.
    for (int tries = 0; !conn && conn.error().code == EADDRINUSE && id->ephemeral && tries < 8;
         ++tries) {
        const std::uint16_t port = service_.ephemeral_port(*id, local);
        if (port == 0) break;
        id->port = spec.local_port = port;
        conn = w.connect(spec);
    }
    if (!conn) return failed(op, conn.error());
    id->wire = *wire;
    id->conn = *conn;
    id->remote_ip = req.dst_ip;
    id->remote_port = req.dst_port;
    id->disconnect_delivered = false;
    id->sidr = sidr;
    id->state = CmService::Id::State::connecting;
    service_.wires_[*wire]->conns[*conn] = id->handle;
    service_.drain_events();
    return 0;
}

int CmSession::accept(const shm::CmAcceptReq& req) {
    constexpr const char* op = "cm_accept";
    using S = CmService::Id::State;
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->conn == 0 || (id->state != S::req_received && id->state != S::rep_received))
        return cm_refuse(EINVAL, op, "no connect request or response to answer");
    CmWire& w = *service_.wires_[id->wire]->wire;
    const shm::CmConnParam& param = req.param;
    Status st = Ok{};
    if (param.private_data_len > sizeof param.private_data) {
        return too_long(op, param.private_data_len, sizeof param.private_data);
    } else if (id->state == S::rep_received) {
        // The active side's answer to the reply (IB CM's RTU; some wires send nothing).
        id->state = S::established;
        st = w.confirm(id->conn, {param.private_data, param.private_data_len});
        if (!st) id->state = S::rep_received;
    } else if (const std::size_t max =
                   room(w.private_max(CmMessage::reply, id->sidr), param.private_data);
               param.private_data_len > max) {
        return too_long(op, param.private_data_len, max);
    } else if (id->sidr) {
        const WireConn conn = id->conn;
        service_.unlink(*id);  // a datagram exchange is over once answered
        id->state = S::established;
        st = w.accept(conn, param, IBV_QPT_UD);
    } else {
        st = w.accept(id->conn, param, id->qp_type);
        if (st) {
            id->state = S::accepted;
            if (CmService::Id* l = service_.ids_.find(id->parent); l != nullptr && l->pending > 0)
                --l->pending;
            id->parent = shm::kNoHandle;
        }
    }
    service_.drain_events();
    if (!st) return failed(op, st.error());
    return 0;
}

int CmSession::reject(const shm::CmRejectReq& req) {
    constexpr const char* op = "cm_reject";
    using S = CmService::Id::State;
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->conn == 0 || (id->state != S::req_received && id->state != S::rep_received))
        return cm_refuse(EINVAL, op, "no connect request or response to reject");
    CmWire& w = *service_.wires_[id->wire]->wire;
    if (const std::size_t max = room(w.private_max(CmMessage::reject, id->sidr), req.private_data);
        req.private_data_len > max)
        return too_long(op, req.private_data_len, max);
    const Status st = w.reject(id->conn, id->state == S::req_received, id->sidr,
                               {req.private_data, req.private_data_len});
    id->state = S::idle;
    service_.unlink(*id);
    service_.drain_events();
    if (!st) return failed(op, st.error());
    return 0;
}

int CmSession::disconnect(const shm::HandleReq& req) {
    constexpr const char* op = "cm_disconnect";
    using S = CmService::Id::State;
    CmService::Id* id = service_.find(*this, req.handle, op);
    if (id == nullptr) return EINVAL;
    if (id->state == S::disconnecting) return 0;
    if (id->conn == 0 ||
        (id->state != S::established && id->state != S::accepted && id->state != S::rep_received))
        return cm_refuse(EINVAL, op, "the id is not connected");
    const Status st = service_.wires_[id->wire]->wire->disconnect(id->conn);
    if (st) id->state = S::disconnecting;
    service_.drain_events();
    if (!st) return failed(op, st.error());
    return 0;
}

int CmSession::migrate(const shm::CmMigrateReq& req, shm::CmIdReply& out) {
    constexpr const char* op = "cm_migrate";
    CmSession* from = service_.find_session(req.old_cookie);
    if (from == nullptr || from->peer_.pid != peer_.pid || from->peer_.uid != peer_.uid)
        return cm_refuse(EINVAL, op, "no such CM connection of this process");
    CmService::Id* id = service_.find(*from, req.id, op);
    if (id == nullptr) return EINVAL;
    if (from != this) {
        if (ids_ >= CmService::kMaxIdsPerSession)
            return cm_refuse(ENOMEM, op, fmt::format("{} ids on one connection", ids_));
        --from->ids_;
        ++ids_;
        id->owner = this;
    }
    out = {id->handle, 0};
    return 0;
}

}  // namespace snic::daemon
