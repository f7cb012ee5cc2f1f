#include "daemon/iwarp/iw_cm_wire.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "daemon/iwarp/iwarp_transport.h"

namespace snic::daemon {

namespace {

IwConnId id_of(WireConn conn) {
    return static_cast<IwConnId>(conn);
}

WireConn wire_conn(std::size_t lane, IwConnId id) {
    return WireConn{lane} << 32 | id;
}

}  // namespace

std::size_t IwCmWire::lane_for(const Peer& owner) const {
    return processes_ ? processes_->lane_of(owner.pid) : 0;
}

IwarpTransport& IwCmWire::lane_of(WireConn conn) const {
    const std::size_t lane = conn >> 32;
    return *lanes_[lane < lanes_.size() ? lane : 0];
}

Status IwCmWire::claim(std::size_t lane, std::uint16_t port) {
    if (lanes_.size() < 2) return Ok{};
    const std::uint16_t was = lanes_[lane]->tcp_port_lane(port);
    if (was != lane && was < lanes_.size() && lanes_[was]->uses_tcp_port(port))
        return make_error(EADDRINUSE,
                          fmt::format("TCP port {} is in use on lane {} of the port (this "
                                      "process's connections run on lane {})",
                                      port, was, lane));
    lanes_[lane]->claim_tcp_port(port);
    return Ok{};
}

std::size_t IwCmWire::private_max(CmMessage m, bool) const {
    switch (m) {
        case CmMessage::request:
            return shm::kCmReqPrivate;
        case CmMessage::reply:
            return iwarp::kMpaMaxPrivateData - iwarp::kMpaIrdOrdLen;
        case CmMessage::reject:
            return std::numeric_limits<std::uint8_t>::max();
    }
    return 0;
}

Result<bool> IwCmWire::listen(std::uint16_t port, std::uint32_t backlog, std::uint8_t qp_type,
                              const Peer& owner) {
    // rdma_cm's connected port spaces take MPA requests too, as Linux listens on every
    // device of an address; where the port's TCP cannot listen, the listen fails (as Linux's
    // rdma_listen does when a device's listen fails), so that no listener seems to serve
    // connects it never sees.
    if (qp_type == IBV_QPT_UD) return false;
    // The requests a listener takes become its owner's connections: on its owner's lane.
    const std::size_t lane = lane_for(owner);
    const auto it = listens_.find(port);
    if (it != listens_.end() && it->second.lane != lane)
        return make_error(EADDRINUSE, fmt::format("TCP port {} is listened on from lane {} of the "
                                                  "port (this process's QPs run on lane {})",
                                                  port, it->second.lane, lane));
    if (it == listens_.end()) {
        if (auto st = claim(lane, port); !st) return st.error();
    }
    // On a shared address the port must be free of the kernel's sockets first.
    if (auto st = take_port(port); !st) return st.error();
    if (const int err = lanes_[lane]->listen(port, backlog); err != 0) {
        give_port(port);
        return make_error(err, fmt::format("no TCP listener on port {}: {}", port,
                                           err == ENOBUFS ? "the port's listener table is full"
                                                          : std::strerror(err)));
    }
    Listening& l = listens_[port];
    l.lane = lane;
    ++l.refs;
    return true;
}

void IwCmWire::unlisten(std::uint16_t port) {
    const auto it = listens_.find(port);
    if (it == listens_.end()) return;
    lanes_[it->second.lane]->unlisten(port);
    if (--it->second.refs == 0) listens_.erase(it);
    give_port(port);
}

Status IwCmWire::take_port(std::uint16_t port) {
    if (ports_ == nullptr) return Ok{};
    if (const int err = ports_->hold(port); err != 0)
        return make_error(err,
                          fmt::format("TCP port {} is the kernel's: {}", port, std::strerror(err)));
    return Ok{};
}

void IwCmWire::give_port(std::uint16_t port) {
    if (ports_ != nullptr) ports_->release(port);
}

void IwCmWire::let_go(WireConn conn) {
    auto it = held_.find(conn);
    if (it == held_.end()) return;
    ports_->release(it->second);
    held_.erase(it);
}

Result<WireConn> IwCmWire::connect(const CmConnectSpec& s) {
    if (s.qp_type == IBV_QPT_UD) return make_error(EINVAL, "iWARP has no datagram service (SIDR)");
    const shm::CmConnParam& p = *s.param;
    const std::size_t lane = lane_for(*s.owner);
    if (auto st = claim(lane, s.local_port); !st) return st.error();
    if (auto st = take_port(s.local_port); !st) return st.error();
    auto conn = lanes_[lane]->connect(s.remote_ip, s.remote_port, s.local_port,
                                      {p.private_data, p.private_data_len}, p.responder_resources,
                                      p.initiator_depth, *s.owner);
    if (!conn) {
        give_port(s.local_port);
        return make_error(conn.error().code, conn.error().message);
    }
    const WireConn w = wire_conn(lane, *conn);
    if (ports_ != nullptr) held_[w] = s.local_port;
    return w;
}

void IwCmWire::owned_by(WireConn conn, const Peer& owner) {
    lane_of(conn).set_owner(id_of(conn), owner);
}

Status IwCmWire::accept(WireConn conn, const shm::CmConnParam& param, std::uint8_t) {
    if (const int err =
            lane_of(conn).accept(id_of(conn), {param.private_data, param.private_data_len},
                                 param.responder_resources, param.initiator_depth);
        err != 0)
        return make_error(err, "the MPA reply could not be sent");
    // The reply is out: the connection is made (an iWARP responder has no RTU to wait for).
    CmWireEvent e;
    e.kind = CmWireEvent::Kind::established;
    e.conn = conn;
    e.peer.qp_type = IBV_QPT_RC;
    e.peer.responder_resources = param.responder_resources;
    e.peer.initiator_depth = param.initiator_depth;
    queue(e);
    return Ok{};
}

Status IwCmWire::reject(WireConn conn, bool request, bool, std::span<const std::uint8_t> pd) {
    // A reply the active side does not want is answered by closing the connection, which
    // forget() does.
    if (!request) return Ok{};
    if (const int err = lane_of(conn).reject(id_of(conn), pd); err != 0)
        return make_error(err, "the MPA reject could not be sent");
    return Ok{};
}

void IwCmWire::refuse(WireConn conn, Refusal, bool) {
    IwarpTransport& iw = lane_of(conn);
    (void)iw.reject(id_of(conn), {});
    iw.release(id_of(conn));
}

Status IwCmWire::disconnect(WireConn conn) {
    lane_of(conn).disconnect(id_of(conn));
    return Ok{};
}

// Aborted unless a QP runs on it.
void IwCmWire::forget(WireConn conn) {
    lane_of(conn).release(id_of(conn));
    let_go(conn);
}

void IwCmWire::release(WireConn conn) {
    lane_of(conn).release(id_of(conn));
    let_go(conn);
}

// The connection on its lane's transport, where the owner's QP runs.
std::uint32_t IwCmWire::qp_binding(WireConn conn) const {
    return id_of(conn);
}

void IwCmWire::poll_fds(std::vector<int>& out) const {
    for (const IwarpTransport* iw : lanes_) out.push_back(iw->fd());
}

std::uint64_t IwCmWire::next_deadline() const {
    return std::numeric_limits<std::uint64_t>::max();
}

void IwCmWire::run(std::uint64_t) {
    for (std::size_t lane = 0; lane < lanes_.size(); ++lane) {
        IwarpTransport& iw = *lanes_[lane];
        iw.clear_wakeup();
        IwCmEvent e;
        while (iw.take(e)) {
            translate(lane, e);
            settle();
        }
    }
}

void IwCmWire::translate(std::size_t lane, const IwCmEvent& e) {
    using K = CmWireEvent::Kind;
    using I = IwCmEvent::Kind;
    CmWireEvent w;
    w.conn = wire_conn(lane, e.conn);
    w.status = e.status;
    // The peer's resources as the MPA frame shows them: in a request its ORD is the READs it
    // will send (its initiator depth), its IRD those it answers.
    w.peer.qp_type = IBV_QPT_RC;
    const auto pd = std::span<const std::uint8_t>(e.pd.data(), e.pd_len);
    auto with_pd = [&](std::size_t max) {
        w.peer.responder_resources = static_cast<std::uint8_t>(std::min<int>(e.ird, 255));
        w.peer.initiator_depth = static_cast<std::uint8_t>(std::min<int>(e.ord, 255));
        const std::size_t n = std::min({pd.size(), max, sizeof w.peer.private_data});
        std::ranges::copy(pd.first(n), w.peer.private_data);
        w.peer.private_data_len = static_cast<std::uint8_t>(n);
    };
    switch (e.kind) {
        case I::request:
            // A connection a listener took keeps its port, should the listener go first.
            if (ports_ != nullptr && ports_->hold(e.local_port) == 0) held_[w.conn] = e.local_port;
            w.kind = K::request;
            w.local_ip = e.local_ip;
            w.remote_ip = e.remote_ip;
            w.local_port = e.local_port;
            w.remote_port = e.remote_port;
            w.ps = shm::kCmPsTcp;
            w.ps_also = shm::kCmPsIb;
            with_pd(shm::kCmMaxPrivate);
            break;
        case I::reply:
            w.kind = K::reply;
            with_pd(shm::kCmRepPrivate);
            break;
        case I::rejected:
            w.kind = K::rejected;
            with_pd(shm::kCmRejPrivate);
            w.peer.responder_resources = w.peer.initiator_depth = 0;
            break;
        case I::refused:
            // As Linux's rdma_cm reads an iWARP connect's failure: reset or refused is a
            // rejection, a timeout unreachable, anything else a connect error.
            w.kind = e.status == -ECONNREFUSED || e.status == -ECONNRESET ? K::rejected
                     : e.status == -ETIMEDOUT                             ? K::unreachable
                                                                          : K::connect_error;
            break;
        case I::disconnected:
            w.kind = K::disconnected;
            w.status = 0;
            break;
        case I::gone:
            w.kind = K::gone;
            w.status = 0;
            break;
        default:
            return;
    }
    queue(w);
}

}  // namespace snic::daemon
