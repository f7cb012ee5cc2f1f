#include "daemon/cm/service.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "daemon/cm/ids.h"

namespace snic::daemon {

namespace {

// The ephemeral range of rdma_cm's ports (Linux's ip_local_port_range default).
constexpr std::uint16_t kEphemeralFirst = 32768;
constexpr std::uint16_t kEphemeralLast = 60999;
// A listener's wires, a bit each.
constexpr std::size_t kMaxWires = 64;

}  // namespace

CmService::CmService(const std::vector<DevicePort>& devices, std::vector<PortWire> wires,
                     std::uint64_t seed)
    : devices_(devices), next_cookie_(seed | 1) {
    const std::uint64_t halves[2] = {seed, seed * 0x9e3779b97f4a7c15ull ^ 0x736e6963u};
    std::memcpy(port_key_.data(), halves, sizeof halves);
    for (const PortWire& w : wires) {
        if (w.wire == nullptr || wires_.size() == kMaxWires) continue;
        w.wire->attach(*this, wires_.size());
        wires_.push_back(std::make_unique<WireCm>(WireCm{w.wire, w.port, {}}));
    }
}

CmService::~CmService() = default;

std::uint64_t CmService::now_ns() {
    return cm_now_ns();
}

std::unique_ptr<CmSession> CmService::new_session(const Peer& peer) {
    next_cookie_ = next_cookie_ * 6364136223846793005ull + 1442695040888963407ull;
    auto s = std::make_unique<CmSession>(*this, peer, next_cookie_);
    sessions_[s->cookie()] = s.get();
    return s;
}

CmSession* CmService::find_session(std::uint64_t cookie) const {
    const auto it = sessions_.find(cookie);
    return it == sessions_.end() ? nullptr : it->second;
}

CmService::Id* CmService::find(CmSession& owner, shm::Handle h, const char* op) {
    Id* id = ids_.find(h);
    if (id == nullptr || id->owner != &owner) {
        cm_refuse(EINVAL, op, fmt::format("no id {:#x} on this connection", h));
        return nullptr;
    }
    return id;
}

// ---- addresses, ports and listeners ----------------------------------------------------------

std::optional<std::uint16_t> CmService::port_for(std::uint32_t ip) const {
    for (std::size_t i = 0; i < devices_.size(); ++i)
        if (devices_[i].ip.addr.value == ip) return static_cast<std::uint16_t>(i);
    for (std::size_t i = 0; i < devices_.size(); ++i)
        if (devices_[i].ip.contains(net::Ipv4Addr{ip})) return static_cast<std::uint16_t>(i);
    return std::nullopt;
}

std::optional<std::size_t> CmService::wire_for(std::uint16_t port, std::uint8_t transport) const {
    for (std::size_t i = 0; i < wires_.size(); ++i)
        if (wires_[i]->port == port && wires_[i]->wire->transport() == transport) return i;
    return std::nullopt;
}

bool CmService::bindable(const Id& id, std::uint32_t ip, std::uint16_t port, bool reuse) const {
    bool ok = true;
    ids_.for_each([&](const Id& other) {
        if (&other == &id || !other.bound || other.parent != shm::kNoHandle) return;
        if (other.ps != id.ps || other.port != port) return;
        if (other.conn != 0 && other.state != Id::State::listening) return;  // connected ids
        const bool overlap = other.ip == 0 || ip == 0 || other.ip == ip;
        if (!overlap) return;
        // REUSEADDR lets ids share an address unless one of them listens on it.
        if (reuse && other.reuse && other.state != Id::State::listening) return;
        ok = false;
    });
    return ok;
}

std::uint16_t CmService::ephemeral_port(const Id& id, std::uint32_t ip) {
    constexpr std::uint32_t span = kEphemeralLast - kEphemeralFirst + 1;
    // Where the search starts: a keyed hash of a counter (RFC 6056's aim), so that the ports
    // a user sees do not tell the next one; a linear generator's outputs did.
    std::array<std::uint8_t, 8> n;
    const std::uint64_t draw = ++port_draws_;
    std::memcpy(n.data(), &draw, sizeof draw);
    const auto start = static_cast<std::uint32_t>(siphash24(port_key_, n) % span);
    for (std::uint32_t i = 0; i < span; ++i) {
        const auto port = static_cast<std::uint16_t>(kEphemeralFirst + (start + i) % span);
        if (bindable(id, ip, port, false)) return port;
    }
    return 0;
}

CmService::Id* CmService::listener_for(std::uint16_t ps, std::uint16_t port,
                                       std::uint32_t ip) const {
    Id* exact = nullptr;
    Id* wildcard = nullptr;
    const_cast<HandleTable<Id>&>(ids_).for_each([&](Id& id) {
        if (id.state != Id::State::listening || id.port != port) return;
        if (id.ps != ps) return;
        if (id.ip == ip)
            exact = &id;
        else if (id.ip == 0)
            wildcard = &id;
    });
    return exact != nullptr ? exact : wildcard;
}

bool CmService::listening_on(std::uint16_t ps, std::uint16_t port) const {
    bool any = false;
    ids_.for_each([&](const Id& id) {
        any = any || (id.state == Id::State::listening && id.ps == ps && id.port == port);
    });
    return any;
}

Status CmService::listen_on_wires(Id& id) {
    for (std::size_t i = 0; i < wires_.size(); ++i) {
        const WireCm& w = *wires_[i];
        if (id.ip != 0 && devices_[w.port].ip.addr.value != id.ip) continue;
        const Result<bool> on = w.wire->listen(id.port, id.backlog, id.qp_type, id.owner->peer());
        if (!on) {
            unlisten_wires(id);  // all or nothing
            return make_error(on.error().code, on.error().message);
        }
        if (*on) id.listening |= std::uint64_t{1} << i;
    }
    if (id.listening == 0) return Ok{};
    const std::uint32_t uid = id.owner->peer().uid;
    std::uint32_t& held = listeners_by_uid_[uid];
    if (uid != 0 && held >= kMaxListenersPerUid) {
        if (held == 0) listeners_by_uid_.erase(uid);
        unlisten_wires(id);
        return make_error(
            ENOBUFS, fmt::format("uid {} holds {} listeners, its share", uid, kMaxListenersPerUid));
    }
    ++held;
    return Ok{};
}

void CmService::unlisten(Id& id) {
    if (id.listening != 0 && id.owner != nullptr) {
        const auto it = listeners_by_uid_.find(id.owner->peer().uid);
        if (it != listeners_by_uid_.end() && --it->second == 0) listeners_by_uid_.erase(it);
    }
    unlisten_wires(id);
}

void CmService::unlisten_wires(Id& id) {
    for (std::size_t i = 0; i < wires_.size() && id.listening != 0; ++i) {
        if ((id.listening & std::uint64_t{1} << i) == 0) continue;
        id.listening &= ~(std::uint64_t{1} << i);
        wires_[i]->wire->unlisten(id.port);
    }
}

// ---- the ids' bookkeeping --------------------------------------------------------------------

bool CmService::has_room(const CmSession& owner) const {
    if (owner.ids_ >= kMaxIdsPerSession) return false;
    const auto it = ids_by_uid_.find(owner.peer().uid);
    return it == ids_by_uid_.end() || it->second < kMaxIdsPerUid;
}

std::uint32_t CmService::connecting(std::uint32_t uid) const {
    std::uint32_t n = 0;
    ids_.for_each([&](const Id& id) {
        n +=
            id.state == Id::State::connecting && id.owner != nullptr && id.owner->peer().uid == uid;
    });
    return n;
}

void CmService::count_id(CmSession& owner, int delta) {
    owner.ids_ = static_cast<std::uint32_t>(static_cast<int>(owner.ids_) + delta);
    std::uint32_t& n = ids_by_uid_[owner.peer().uid];
    n = static_cast<std::uint32_t>(static_cast<int>(n) + delta);
    if (n == 0) ids_by_uid_.erase(owner.peer().uid);
}

void CmService::unlink(Id& id, bool tell_wire) {
    if (id.conn != 0 && id.wire < wires_.size()) {
        WireCm& w = *wires_[id.wire];
        w.conns.erase(id.conn);
        if (tell_wire) w.wire->forget(id.conn);
    }
    id.conn = 0;
    if (id.parent != shm::kNoHandle) {
        if (Id* p = ids_.find(id.parent); p != nullptr && p->pending > 0) --p->pending;
        id.parent = shm::kNoHandle;
    }
}

void CmService::destroy(Id& id) {
    if (id.conn != 0 && id.wire < wires_.size()) {
        // The peer hears of it: a rejection for what was pending, a disconnect for what was
        // connected.
        const WireConn conn = id.conn;
        unlink(id, false);
        wires_[id.wire]->wire->release(conn);
    }
    unlink(id);
    unlisten(id);
    if (id.owner != nullptr) count_id(*id.owner, -1);

    ids_.take(id.handle);
}

bool CmService::deliver(Id& id, std::uint32_t type, std::int32_t status,
                        const shm::CmConnParam* peer) {
    shm::CmEvent ev{};
    ev.token = id.token;
    ev.id = id.handle;
    ev.event = type;
    ev.status = status;
    ev.src_ip = id.ip;
    ev.src_port = id.port;
    ev.dst_ip = id.remote_ip;
    ev.dst_port = id.remote_port;
    ev.port_index = id.port_index;
    if (id.wire < wires_.size()) {
        const CmWire& w = *wires_[id.wire]->wire;
        ev.transport = w.transport();
        if (id.conn != 0) ev.iw_conn = w.qp_binding(id.conn);
    }
    if (peer != nullptr) ev.param = *peer;
    if (id.sidr) ev.param.qp_type = IBV_QPT_UD;
    if (id.owner != nullptr && id.owner->push(ev)) {
        ++counters_.events;
        return true;
    }
    ++counters_.events_lost;
    return false;
}

// ---- the wires' events -----------------------------------------------------------------------

void CmService::queue(std::size_t wire, const CmWireEvent& e) {
    queued_.emplace_back(wire, e);
}

void CmService::drain_events() {
    // Handling an event may call a wire again (a rejection of a request nobody listens to),
    // which may queue more: loop until every wire is quiet.
    while (!queued_.empty()) {
        auto queued = std::move(queued_);
        queued_.clear();
        for (const auto& [wire, e] : queued) on_event(wire, e);
    }
}

CmService::Id* CmService::taker(const CmWireEvent& e, Refusal& why) const {
    Id* l = nullptr;
    if (e.readable) {
        l = listener_for(e.ps, e.local_port, e.local_ip);
        if (l == nullptr && e.ps_also != 0) l = listener_for(e.ps_also, e.local_port, e.local_ip);
    }
    // cma.c's cma_ib_check_req_qp_type: the listener's QP type is the request's.
    if (l != nullptr && l->qp_type != e.peer.qp_type) l = nullptr;
    if (l == nullptr) {
        // Nobody listens on the port at all, or someone does but no listener takes this
        // request (another address, another QP type, a header that cannot be read).
        const bool someone = listening_on(e.ps, e.local_port) ||
                             (e.ps_also != 0 && listening_on(e.ps_also, e.local_port));
        why = someone ? Refusal::not_taken : Refusal::no_listener;
        return nullptr;
    }
    if (l->pending >= l->backlog) {
        why = Refusal::backlog_full;
        return nullptr;
    }
    if (!has_room(*l->owner)) {
        why = Refusal::no_room;
        return nullptr;
    }
    return l;
}

std::unique_ptr<CmService::Id> CmService::child_of(const Id& l, std::size_t wire,
                                                   const CmWireEvent& e) const {
    auto child = std::make_unique<Id>();
    child->owner = l.owner;
    child->token = l.token;
    child->ps = l.ps;
    child->qp_type = l.qp_type;
    child->bound = true;
    child->ip = e.local_ip;
    child->port = e.local_port;
    child->port_index = wires_[wire]->port;
    child->remote_ip = e.remote_ip;
    child->remote_port = e.remote_port;
    child->state = Id::State::req_received;
    child->parent = l.handle;
    child->wire = wire;
    child->conn = e.conn;
    child->sidr = e.peer.qp_type == IBV_QPT_UD;
    return child;
}

void CmService::on_request(std::size_t wire, const CmWireEvent& e) {
    CmWire& w = *wires_[wire]->wire;
    const bool datagram = e.peer.qp_type == IBV_QPT_UD;
    Refusal why{};
    Id* l = taker(e, why);
    if (l == nullptr) {
        switch (why) {
            case Refusal::no_listener:
            case Refusal::not_taken:
                ++counters_.no_listener;
                spdlog::debug(
                    "cm: connect request for port {} (port space {:#x}): no listener "
                    "takes it",
                    e.local_port, e.ps);
                break;
            case Refusal::backlog_full:
                ++counters_.backlog_full;
                break;
            case Refusal::no_room:
                ++counters_.no_room;
                break;
        }
        return w.refuse(e.conn, why, datagram);
    }
    const shm::Handle h = ids_.insert(child_of(*l, wire, e));
    if (h == shm::kNoHandle) {
        ++counters_.no_room;
        return w.refuse(e.conn, Refusal::no_room, datagram);
    }
    Id& c = *ids_.find(h);
    count_id(*c.owner, +1);
    ++l->pending;
    wires_[wire]->conns[e.conn] = h;
    ++counters_.connect_requests;
    w.owned_by(e.conn, c.owner->peer());

    // The connect request, as the listener's (the new id carries the listener's token).
    if (deliver(c, shm::kCmConnectRequest, 0, &e.peer)) return;
    w.refuse(e.conn, Refusal::no_room, datagram);
    unlink(c, false);
    count_id(*c.owner, -1);
    ids_.take(h);
}

void CmService::on_event(std::size_t wire, const CmWireEvent& e) {
    using K = CmWireEvent::Kind;
    if (e.kind == K::request) return on_request(wire, e);
    WireCm& w = *wires_[wire];
    const auto it = w.conns.find(e.conn);
    if (it == w.conns.end()) return;  // released by its id: nobody listens
    Id* id = ids_.find(it->second);
    if (id == nullptr) {
        w.conns.erase(it);
        return;
    }
    switch (e.kind) {
        case K::reply:
            id->state = Id::State::rep_received;
            deliver(*id, shm::kCmConnectResponse, 0, &e.peer);
            break;
        case K::established:
            if (id->state == Id::State::established) break;  // our own confirmation
            // A datagram exchange is over once answered: it has no connection to keep.
            if (id->sidr) unlink(*id);
            id->state = Id::State::established;
            deliver(*id, shm::kCmEstablished, 0, &e.peer);
            break;
        case K::rejected:
        case K::unreachable:
        case K::connect_error:
            id->state = Id::State::idle;
            unlink(*id);
            deliver(*id,
                    e.kind == K::rejected      ? shm::kCmRejected
                    : e.kind == K::unreachable ? shm::kCmUnreachable
                                               : shm::kCmConnectError,
                    e.status, &e.peer);
            break;
        case K::disconnected:
            id->state = Id::State::disconnecting;
            if (!id->disconnect_delivered) {
                id->disconnect_delivered = true;
                deliver(*id, shm::kCmDisconnected, 0, &e.peer);
            }
            break;
        case K::timewait_exit:
            unlink(*id);
            deliver(*id, shm::kCmTimewaitExit, 0);
            break;
        case K::gone:
            if (id->state == Id::State::req_received && !id->disconnect_delivered) {
                // The peer went before the request was answered.
                id->disconnect_delivered = true;
                deliver(*id, shm::kCmDisconnected, 0, &e.peer);
            }
            unlink(*id);
            break;
        case K::request:
            break;
    }
}

// ---- the control thread's loop ---------------------------------------------------------------

void CmService::poll_fds(std::vector<int>& out) const {
    for (const auto& w : wires_) w->wire->poll_fds(out);
}

void CmService::run(std::uint64_t now) {
    for (const auto& w : wires_) {
        w->wire->run(now);
        drain_events();
    }
}

int CmService::timeout_ms(std::uint64_t now, int at_most) const {
    std::uint64_t next = std::numeric_limits<std::uint64_t>::max();
    for (const auto& w : wires_) next = std::min(next, w->wire->next_deadline());
    if (next <= now) return 0;
    const std::uint64_t ms = (next - now + 999'999) / 1'000'000;
    return ms < static_cast<std::uint64_t>(at_most) ? static_cast<int>(ms) : at_most;
}

void CmService::fill_status(shm::CmStatusReply& r, std::optional<std::uint32_t> uid) const {
    static_assert(static_cast<std::size_t>(Id::State::disconnecting) + 1 == shm::kCmIdStates);
    r = shm::CmStatusReply{};
    ids_.for_each([&](const Id& id) {
        if (uid && (id.owner == nullptr || id.owner->peer().uid != *uid)) return;
        ++r.ids;
        ++r.states[static_cast<std::size_t>(id.state)];
    });
    r.connect_requests = counters_.connect_requests;
    r.no_listener = counters_.no_listener;
    r.backlog_full = counters_.backlog_full;
    r.no_room = counters_.no_room;
    r.events = counters_.events;
    r.events_lost = counters_.events_lost;
    r.nports = static_cast<std::uint32_t>(std::min(devices_.size(), shm::kMaxPorts));
    for (const auto& w : wires_)
        if (w->port < r.nports) w->wire->status(r.ports[w->port]);
}

TcpRowOwner CmService::tcp_rows_of(std::uint32_t uid, std::uint32_t port_index) const {
    TcpRowOwner o;
    ids_.for_each([&](const Id& id) {
        if (id.owner == nullptr || id.owner->peer().uid != uid) return;
        if (id.state == Id::State::listening) o.listens_.emplace(id.ip, id.port);
        if (id.wire != Id::kNoWire && wires_[id.wire]->port == port_index)
            o.conns_.emplace(id.ip, id.port, id.remote_ip, id.remote_port);
    });
    return o;
}

bool TcpRowOwner::owns(const shm::TcpConnInfo& row) const {
    if (row.state == shm::kTcpListenState)
        return listens_.contains({0, row.local_port}) ||
               listens_.contains({row.local_ip, row.local_port});
    return conns_.contains({row.local_ip, row.local_port, row.remote_ip, row.remote_port});
}

}  // namespace snic::daemon
