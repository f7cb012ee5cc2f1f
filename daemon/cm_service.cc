#include "daemon/cm_service.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>

#include <spdlog/spdlog.h>

#include "daemon/gsi.h"
#include "daemon/iwarp_transport.h"
#include "proto/cm/cma.h"

namespace snic::daemon {

namespace {

// Linux's default and largest listen backlog for rdma_cm (ucma's max_backlog).
constexpr std::uint32_t kMaxBacklog = 1024;
// The ephemeral range of rdma_cm's ports (Linux's ip_local_port_range default).
constexpr std::uint16_t kEphemeralFirst = 32768;
constexpr std::uint16_t kEphemeralLast = 60999;

// IBA table 112's reasons snicd gives.
constexpr std::uint16_t kRejNoResources = 3;
constexpr std::uint16_t kRejInvalidServiceId = 8;
constexpr std::uint16_t kRejConsumer = 28;
// SIDR_REP statuses (IBA table 119).
constexpr std::uint8_t kSidrUnsupported = 1;  // no such service ID
constexpr std::uint8_t kSidrReject = 2;

int refuse(int err, const char* op, const std::string& why) {
    spdlog::debug("cm: {}: {}", op, why);
    return err;
}

bool valid_ps(std::uint16_t ps) {
    return ps == shm::kCmPsTcp || ps == shm::kCmPsUdp || ps == shm::kCmPsIb ||
           ps == shm::kCmPsIpoib;
}

// The IBV_QPT_* a port space connects: RC (or UC) over REQ, UD over SIDR.
constexpr std::uint8_t kQptRc = 2, kQptUc = 3, kQptUd = 4;

cm::QpInfo qp_info(const shm::CmConnParam& p) {
    cm::QpInfo q;
    q.qpn = p.qpn & 0xffffff;
    q.psn = p.psn & 0xffffff;
    q.responder_resources = p.responder_resources;
    q.initiator_depth = p.initiator_depth;
    q.flow_control = p.flow_control;
    q.retry_count = std::min<std::uint8_t>(p.retry_count, 7);
    q.rnr_retry_count = std::min<std::uint8_t>(p.rnr_retry_count, 7);
    q.srq = p.srq;
    q.path_mtu = p.path_mtu;
    q.local_ack_timeout = p.ack_timeout;
    q.qp_type = p.qp_type;
    q.traffic_class = p.tos;
    q.qkey = p.qkey;
    return q;
}

void fill_param(shm::CmConnParam& p, const cm::QpInfo& q) {
    p.qpn = q.qpn;
    p.psn = q.psn;
    p.responder_resources = q.responder_resources;
    p.initiator_depth = q.initiator_depth;
    p.flow_control = q.flow_control;
    p.retry_count = q.retry_count;
    p.rnr_retry_count = q.rnr_retry_count;
    p.srq = q.srq;
    p.path_mtu = q.path_mtu;
    p.ack_timeout = q.local_ack_timeout;
    p.tos = q.traffic_class;
    p.qp_type = q.qp_type;
    p.qkey = q.qkey;
}

std::span<const std::uint8_t> private_of(const std::uint8_t* data, std::size_t len,
                                         std::size_t max) {
    return {data, std::min(len, max)};
}

}  // namespace

// ---- the ids and the ports -------------------------------------------------------------------

struct CmService::Id {
    enum class State : std::uint8_t {
        idle,  // created, maybe bound
        listening,
        connecting,    // REQ sent
        req_received,  // a connect request not yet answered
        rep_received,  // active: REP in, RTU not yet sent
        accepted,      // passive: REP sent, RTU not yet in
        established,
        disconnecting,  // DREQ sent or received
    };

    shm::Handle handle = shm::kNoHandle;
    CmSession* owner = nullptr;
    std::uint64_t token = 0;
    std::uint16_t ps = 0;
    std::uint8_t qp_type = 0;
    State state = State::idle;
    bool bound = false;
    bool reuse = false;
    bool disconnect_delivered = false;
    bool sidr = false;     // a UD id's exchange (SIDR), not a connection
    std::uint32_t ip = 0;  // bound address (0: the wildcard)
    std::uint16_t port = 0;
    std::uint16_t port_index = shm::kCmNoPort;
    std::uint32_t backlog = 0;
    std::uint32_t pending = 0;            // a listener's unanswered connect requests
    shm::Handle parent = shm::kNoHandle;  // a connect request's listener, while it counts there
    cm::ConnId conn = 0;                  // on ports_[port_index]
    std::uint32_t remote_ip = 0;
    std::uint16_t remote_port = 0;
    // iWARP: the connection of ports_[port_index]'s transport (instead of `conn`), and the
    // ports a listener listens on for MPA (a bit each).
    bool iw = false;
    IwConnId iw_conn = 0;
    std::uint64_t iw_listening = 0;
};

// One port's agent and the way out to its QP1. Events are queued while the agent runs and
// handled after it returned, so that handling one may call the agent again.
struct CmService::PortCm final : cm::Sink {
    struct Queued {
        cm::Event event;
        std::array<std::uint8_t, shm::kCmMaxPrivate> data;
        std::size_t len;  // of data: the event's private data
    };

    PortCm(GsiPort* g, cm::AgentConfig config) : gsi(g), agent(*this, config) {}

    void send_mad(std::uint32_t remote_ip, std::uint32_t remote_qpn, std::uint32_t qkey,
                  std::span<const std::uint8_t> mad) override {
        if (gsi == nullptr) return;
        GsiMad m{};
        m.ip = remote_ip;
        m.qpn = remote_qpn;
        m.qkey = qkey;
        m.length = static_cast<std::uint16_t>(std::min(mad.size(), m.data.size()));
        std::memcpy(m.data.data(), mad.data(), m.length);
        gsi->send(m);  // a full queue counts there; the agent retransmits
    }
    void deliver(const cm::Event& e) override {
        Queued q{e, {}, std::min(e.private_data.size(), shm::kCmMaxPrivate)};
        std::ranges::copy(e.private_data.first(q.len), q.data.begin());
        q.event.private_data = {};
        queued.push_back(q);
    }

    GsiPort* gsi;
    cm::Agent agent;
    std::map<cm::ConnId, shm::Handle> conns;
    std::vector<Queued> queued;
    IwarpTransport* iw = nullptr;              // the port's iWARP transport, if any
    std::map<IwConnId, shm::Handle> iw_conns;  // its connections the ids hold
};

CmService::CmService(const std::vector<DevicePort>& devices, std::vector<GsiPort*> gsi,
                     std::uint64_t seed, std::vector<IwarpTransport*> iwarp)
    : devices_(devices), next_cookie_(seed | 1), rng_(seed ^ 0x9e3779b97f4a7c15ull) {
    for (std::size_t i = 0; i < devices.size(); ++i) {
        cm::AgentConfig c;
        c.local_ip = devices[i].ip.addr.value;
        // As many connections being set up at once as one CM connection may hold ids (cmtime
        // makes 1,000 at once); each costs the agent a few hundred bytes.
        c.max_half_open = kMaxIdsPerSession;
        c.seed = static_cast<std::uint32_t>(seed >> (i % 32)) ^ static_cast<std::uint32_t>(i);
        ports_.push_back(std::make_unique<PortCm>(i < gsi.size() ? gsi[i] : nullptr, c));
        ports_.back()->iw = i < iwarp.size() ? iwarp[i] : nullptr;
    }
}

CmService::~CmService() = default;

std::uint64_t CmService::now_ns() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
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
        refuse(EINVAL, op, fmt::format("no id {:#x} on this connection", h));
        return nullptr;
    }
    return id;
}

std::optional<std::uint16_t> CmService::port_for(std::uint32_t ip) const {
    for (std::size_t i = 0; i < devices_.size(); ++i)
        if (devices_[i].ip.addr.value == ip) return static_cast<std::uint16_t>(i);
    for (std::size_t i = 0; i < devices_.size(); ++i)
        if (devices_[i].ip.contains(net::Ipv4Addr{ip})) return static_cast<std::uint16_t>(i);
    return std::nullopt;
}

bool CmService::bindable(const Id& id, std::uint32_t ip, std::uint16_t port, bool reuse) const {
    bool ok = true;
    ids_.for_each([&](const Id& other) {
        if (&other == &id || !other.bound || other.parent != shm::kNoHandle) return;
        if (other.ps != id.ps || other.port != port) return;
        const bool connected = other.conn != 0 || other.iw_conn != 0;
        if (connected && other.state != Id::State::listening) return;  // connected ids
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
    rng_ ^= rng_ << 13, rng_ ^= rng_ >> 7, rng_ ^= rng_ << 17;
    const std::uint32_t start = static_cast<std::uint32_t>(rng_ % span);
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
        // rdma_cm's TCP and IB port spaces share REQs; UDP is SIDR's.
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

bool CmService::has_room(const CmSession& owner) const {
    if (owner.ids_ >= kMaxIdsPerSession) return false;
    const auto it = ids_by_uid_.find(owner.peer().uid);
    return it == ids_by_uid_.end() || it->second < kMaxIdsPerUid;
}

void CmService::count_id(CmSession& owner, int delta) {
    owner.ids_ = static_cast<std::uint32_t>(static_cast<int>(owner.ids_) + delta);
    std::uint32_t& n = ids_by_uid_[owner.peer().uid];
    n = static_cast<std::uint32_t>(static_cast<int>(n) + delta);
    if (n == 0) ids_by_uid_.erase(owner.peer().uid);
}

void CmService::unlink(Id& id) {
    if (id.conn != 0 && id.port_index < ports_.size()) ports_[id.port_index]->conns.erase(id.conn);
    id.conn = 0;
    if (id.iw_conn != 0 && id.port_index < ports_.size()) {
        PortCm& p = *ports_[id.port_index];
        p.iw_conns.erase(id.iw_conn);
        if (p.iw != nullptr) p.iw->release(id.iw_conn);  // aborted unless a QP runs on it
    }
    id.iw_conn = 0;
    if (id.parent != shm::kNoHandle) {
        if (Id* p = ids_.find(id.parent); p != nullptr && p->pending > 0) --p->pending;
        id.parent = shm::kNoHandle;
    }
}

void CmService::destroy(Id& id) {
    if (id.conn != 0 && id.port_index < ports_.size()) {
        // The peer hears of it: REJ for what was pending, DREQ for what was connected.
        PortCm& p = *ports_[id.port_index];
        const cm::ConnId conn = id.conn;
        unlink(id);
        p.agent.release(conn, now_ns());
    }
    unlink(id);
    iw_unlisten(id);
    if (id.owner != nullptr) count_id(*id.owner, -1);

    ids_.take(id.handle);
}

bool CmService::deliver(Id& id, std::uint32_t type, std::int32_t status, const cm::Event* e,
                        std::span<const std::uint8_t> private_data) {
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
    ev.transport = static_cast<std::uint16_t>(id.iw ? shm::kTransportIwarp : shm::kTransportRoce);
    ev.iw_conn = id.iw_conn;
    if (e != nullptr) fill_param(ev.param, e->peer);
    if (id.sidr) ev.param.qp_type = kQptUd;
    const std::size_t n = std::min(private_data.size(), sizeof ev.param.private_data);
    // Not memcpy: an empty span's data() may be null, which memcpy must never be given.
    std::ranges::copy(private_data.first(n), ev.param.private_data);
    ev.param.private_data_len = static_cast<std::uint8_t>(n);
    if (id.owner != nullptr && id.owner->push(ev)) {
        ++counters_.events;
        return true;
    }
    ++counters_.events_lost;
    return false;
}

std::unique_ptr<CmService::Id> CmService::child_of(const Id& l, std::size_t port,
                                                   std::uint32_t local_ip, std::uint16_t local_port,
                                                   std::uint32_t remote_ip,
                                                   std::uint16_t remote_port) const {
    auto child = std::make_unique<Id>();
    child->owner = l.owner;
    child->token = l.token;
    child->ps = l.ps;
    child->qp_type = l.qp_type;
    child->bound = true;
    child->ip = local_ip;
    child->port = local_port;
    child->port_index = static_cast<std::uint16_t>(port);
    child->remote_ip = remote_ip;
    child->remote_port = remote_port;
    child->state = Id::State::req_received;
    child->parent = l.handle;
    return child;
}

void CmService::on_request(std::size_t port, const cm::Event& e, std::span<const std::uint8_t> pd) {
    PortCm& p = *ports_[port];
    const auto svc = cm::ip_service(e.service_id);
    const auto hdr = cm::decode_cma_header(pd);
    const std::uint16_t svc_port = svc ? svc->port : 0;
    Id* l = nullptr;
    if (svc && hdr) l = listener_for(static_cast<std::uint16_t>(svc->ps), svc_port, e.local_ip);
    const bool sidr = e.type == cm::EventType::sidr_req_received;
    // A refusal: REJ for a REQ, SIDR_REP with a status for a SIDR_REQ.
    auto refuse_req = [&](std::uint16_t reason, std::uint8_t sidr_status) {
        if (sidr)
            (void)p.agent.sidr_reply(e.id, sidr_status, 0, 0, {}, now_ns());
        else
            (void)p.agent.reject(e.id, reason, {}, now_ns());
    };
    // cma.c's cma_ib_check_req_qp_type: the listener's QP type is the request's.
    if (l != nullptr && (sidr ? l->qp_type != kQptUd : l->qp_type != e.peer.qp_type)) l = nullptr;
    if (l == nullptr) {
        // As Linux: nobody listens on the service ID at all, REJ 8 (cm.c cm_match_req) or
        // SIDR status 1; someone does, but rdma_cm finds no listener that takes this request
        // (another address, another QP type, a header cma.c cannot read), the consumer's
        // refusal: REJ 28 or SIDR status 2 (cma.c's handler fails, cm.c rejects).
        ++counters_.no_listener;
        spdlog::debug("cm: connect request for port {} (port space {:#x}): no listener takes it",
                      svc_port, svc ? static_cast<unsigned>(svc->ps) : 0U);
        if (svc && listening_on(static_cast<std::uint16_t>(svc->ps), svc_port))
            return refuse_req(kRejConsumer, kSidrReject);
        return refuse_req(kRejInvalidServiceId, kSidrUnsupported);
    }
    if (l->pending >= l->backlog) {
        // As Linux's ucma with a full backlog: the REQ is forgotten unanswered (its sender
        // tries again after its CM response timeout), not rejected. A SIDR_REQ is.
        ++counters_.backlog_full;
        if (!sidr) {
            (void)p.agent.discard(e.id, now_ns());
            return;
        }
        return refuse_req(kRejConsumer, kSidrReject);
    }
    if (!has_room(*l->owner)) {
        ++counters_.no_room;
        spdlog::debug("cm: connect request for a listener whose owner holds {} ids: REJ 3",
                      l->owner->ids_);
        return refuse_req(kRejNoResources, kSidrReject);
    }
    auto child = child_of(*l, port, e.local_ip, svc_port, e.remote_ip, hdr->src_port);
    child->conn = e.id;
    child->sidr = sidr;
    const shm::Handle h = ids_.insert(std::move(child));
    if (h == shm::kNoHandle) return refuse_req(kRejNoResources, kSidrReject);
    Id& c = *ids_.find(h);
    count_id(*c.owner, +1);
    ++l->pending;

    p.conns[e.id] = h;
    ++counters_.connect_requests;

    // The connect request, as the listener's (the new id carries the listener's token),
    // with the consumer's private data after rdma_cm's header.
    const auto user = pd.subspan(std::min(pd.size(), cm::kCmaHeaderSize));
    if (deliver(c, shm::kCmConnectRequest, 0, &e,
                private_of(user.data(), user.size(),
                           sidr ? shm::kCmSidrReqPrivate : shm::kCmReqPrivate)))
        return;
    refuse_req(kRejNoResources, kSidrReject);
    unlink(c);
    count_id(*c.owner, -1);
    ids_.take(h);
}

void CmService::on_event(std::size_t port, const cm::Event& e, std::span<const std::uint8_t> pd) {
    PortCm& p = *ports_[port];
    if (e.type == cm::EventType::req_received || e.type == cm::EventType::sidr_req_received)
        return on_request(port, e, pd);
    const auto it = p.conns.find(e.id);
    if (it == p.conns.end()) return;  // released by its id: nobody listens
    Id* id = ids_.find(it->second);
    if (id == nullptr) {
        p.conns.erase(it);
        return;
    }
    using T = cm::EventType;
    switch (e.type) {
        case T::rep_received:
            id->state = Id::State::rep_received;
            deliver(*id, shm::kCmConnectResponse, 0, &e,
                    private_of(pd.data(), pd.size(), shm::kCmRepPrivate));
            break;
        case T::established:
            if (id->state == Id::State::established) break;  // our own RTU
            id->state = Id::State::established;
            deliver(*id, shm::kCmEstablished, 0, &e, {});
            break;
        case T::rejected:
            id->state = Id::State::idle;
            unlink(*id);
            deliver(*id, shm::kCmRejected, e.reject_reason, &e,
                    private_of(pd.data(), pd.size(), shm::kCmRejPrivate));
            break;
        case T::unreachable:
            id->state = Id::State::idle;
            unlink(*id);
            deliver(*id, shm::kCmUnreachable, -ETIMEDOUT, &e, {});
            break;
        case T::dreq_received:
        case T::disconnected:
            id->state = Id::State::disconnecting;
            if (!id->disconnect_delivered) {
                id->disconnect_delivered = true;
                deliver(*id, shm::kCmDisconnected, 0, &e, {});
            }
            break;
        case T::sidr_rep_received:
            // The exchange is over either way: SIDR has no connection to keep.
            unlink(*id);
            if (e.sidr_status == 0) {
                id->state = Id::State::established;
                deliver(*id, shm::kCmEstablished, 0, &e,
                        private_of(pd.data(), pd.size(), shm::kCmSidrRepPrivate));
            } else {
                id->state = Id::State::idle;
                deliver(*id, shm::kCmUnreachable, e.sidr_status, &e,
                        private_of(pd.data(), pd.size(), shm::kCmSidrRepPrivate));
            }
            break;
        case T::timewait_exit:
            unlink(*id);
            deliver(*id, shm::kCmTimewaitExit, 0, &e, {});
            break;
        default:
            break;
    }
}

void CmService::drain_events() {
    // Handling an event may run an agent again (a REJ for a REQ nobody listens to), which may
    // queue more: loop until every port is quiet.
    for (bool more = true; more;) {
        more = false;
        for (std::size_t i = 0; i < ports_.size(); ++i) {
            PortCm& p = *ports_[i];
            if (p.queued.empty()) continue;
            more = true;
            auto queued = std::move(p.queued);
            p.queued.clear();
            for (const PortCm::Queued& q : queued) on_event(i, q.event, {q.data.data(), q.len});
        }
    }
}

void CmService::poll_fds(std::vector<int>& out) const {
    for (const auto& p : ports_) {
        if (p->gsi != nullptr) out.push_back(p->gsi->fd());
        if (p->iw != nullptr) out.push_back(p->iw->fd());
    }
}

void CmService::run(std::uint64_t now) {
    for (auto& p : ports_) {
        if (p->gsi != nullptr) {
            p->gsi->clear_wakeup();
            GsiMad m;
            while (p->gsi->take(m)) {
                if (m.qkey != cm::kGsiQkey) continue;  // counted bad by nobody: not CM's
                p->agent.receive(m.ip, m.qpn, {m.data.data(), m.length}, now);
                drain_events();
            }
        }
        p->agent.poll(now);
        drain_events();
    }
    for (std::size_t i = 0; i < ports_.size(); ++i) {
        IwarpTransport* iw = ports_[i]->iw;
        if (iw == nullptr) continue;
        iw->clear_wakeup();
        IwCmEvent e;
        while (iw->take(e)) on_iw_event(i, e);
    }
}

int CmService::timeout_ms(std::uint64_t now, int at_most) const {
    std::uint64_t next = std::numeric_limits<std::uint64_t>::max();
    for (const auto& p : ports_) next = std::min(next, p->agent.next_deadline());
    if (next <= now) return 0;
    const std::uint64_t ms = (next - now + 999'999) / 1'000'000;
    return ms < static_cast<std::uint64_t>(at_most) ? static_cast<int>(ms) : at_most;
}

void CmService::fill_status(shm::CmStatusReply& r) const {
    static_assert(static_cast<std::size_t>(Id::State::disconnecting) + 1 == shm::kCmIdStates);
    r = shm::CmStatusReply{};
    r.ids = static_cast<std::uint32_t>(ids_.size());
    ids_.for_each([&](const Id& id) { ++r.states[static_cast<std::size_t>(id.state)]; });
    r.connect_requests = counters_.connect_requests;
    r.no_listener = counters_.no_listener;
    r.backlog_full = counters_.backlog_full;
    r.no_room = counters_.no_room;
    r.events = counters_.events;
    r.events_lost = counters_.events_lost;
    r.nports = static_cast<std::uint32_t>(std::min(ports_.size(), shm::kMaxPorts));
    for (std::size_t i = 0; i < r.nports; ++i) {
        const cm::Agent& a = ports_[i]->agent;
        const cm::AgentCounters& c = a.counters();
        std::uint64_t conns = 0;
        a.for_each_state([&](std::string_view name, std::size_t n) {
            if (name != "idle") conns += n;
        });
        r.ports[i] = {c.mads_rx,    c.mads_tx, c.mads_bad,          c.retransmits,
                      c.duplicates, c.stale,   c.half_open_refused, conns};
    }
}

// ---- iWARP: MPA over the ports' TCP ----------------------------------------------------------

void CmService::iw_listen(Id& id) {
    // rdma_cm's connected port spaces take MPA requests too, as Linux listens on every
    // device of an address; a port whose TCP cannot listen there serves RoCE alone.
    if (id.qp_type == kQptUd) return;
    for (std::size_t i = 0; i < ports_.size() && i < 64; ++i) {
        IwarpTransport* iw = ports_[i]->iw;
        if (iw == nullptr || (id.ip != 0 && devices_[i].ip.addr.value != id.ip)) continue;
        if (const int err = iw->listen(id.port, id.backlog); err != 0) {
            spdlog::debug("cm: no iWARP listener on port {} TCP {}: {}", i, id.port,
                          std::strerror(err));
            continue;
        }
        id.iw_listening |= std::uint64_t{1} << i;
    }
}

void CmService::iw_unlisten(Id& id) {
    for (std::size_t i = 0; i < ports_.size() && id.iw_listening != 0; ++i) {
        if ((id.iw_listening & std::uint64_t{1} << i) == 0) continue;
        id.iw_listening &= ~(std::uint64_t{1} << i);
        if (ports_[i]->iw != nullptr) ports_[i]->iw->unlisten(id.port);
    }
}

bool CmService::deliver_iw(Id& id, std::uint32_t type, std::int32_t status, std::uint8_t rr,
                           std::uint8_t depth, std::span<const std::uint8_t> pd) {
    cm::Event e{};
    e.peer.qp_type = kQptRc;
    e.peer.responder_resources = rr;
    e.peer.initiator_depth = depth;
    return deliver(id, type, status, &e, pd);
}

void CmService::on_iw_request(std::size_t port, const IwCmEvent& e) {
    PortCm& p = *ports_[port];
    Id* l = listener_for(shm::kCmPsTcp, e.local_port, e.local_ip);
    if (l == nullptr) l = listener_for(shm::kCmPsIb, e.local_port, e.local_ip);
    if (l != nullptr && l->qp_type == kQptUd) l = nullptr;
    auto refuse_req = [&](std::uint64_t& counter) {
        ++counter;
        (void)p.iw->reject(e.conn, {});
        p.iw->release(e.conn);
    };
    if (l == nullptr) return refuse_req(counters_.no_listener);
    if (l->pending >= l->backlog) return refuse_req(counters_.backlog_full);
    if (!has_room(*l->owner)) return refuse_req(counters_.no_room);
    auto child = child_of(*l, port, e.local_ip, e.local_port, e.remote_ip, e.remote_port);
    child->iw = true;
    child->iw_conn = e.conn;
    const shm::Handle h = ids_.insert(std::move(child));
    if (h == shm::kNoHandle) return refuse_req(counters_.no_room);
    Id& c = *ids_.find(h);
    count_id(*c.owner, +1);
    ++l->pending;
    p.iw_conns[e.conn] = h;
    ++counters_.connect_requests;
    p.iw->set_owner(e.conn, c.owner->peer());
    // The peer's resources as the connect request shows them: its ORD is the READs it will
    // send (its initiator depth), its IRD those it answers.
    const auto pd = std::span<const std::uint8_t>(e.pd.data(), e.pd_len);
    if (deliver_iw(c, shm::kCmConnectRequest, 0,
                   static_cast<std::uint8_t>(std::min<int>(e.ird, 255)),
                   static_cast<std::uint8_t>(std::min<int>(e.ord, 255)),
                   pd.first(std::min(pd.size(), shm::kCmMaxPrivate))))
        return;
    (void)p.iw->reject(e.conn, {});
    unlink(c);
    count_id(*c.owner, -1);
    ids_.take(h);
}

void CmService::on_iw_event(std::size_t port, const IwCmEvent& e) {
    PortCm& p = *ports_[port];
    using K = IwCmEvent::Kind;
    if (e.kind == K::request) return on_iw_request(port, e);
    const auto it = p.iw_conns.find(e.conn);
    if (it == p.iw_conns.end()) return;  // released by its id
    Id* id = ids_.find(it->second);
    if (id == nullptr) {
        p.iw_conns.erase(it);
        return;
    }
    const auto pd = std::span<const std::uint8_t>(e.pd.data(), e.pd_len);
    const auto rr = static_cast<std::uint8_t>(std::min<int>(e.ird, 255));
    const auto depth = static_cast<std::uint8_t>(std::min<int>(e.ord, 255));
    switch (e.kind) {
        case K::reply:
            id->state = Id::State::rep_received;
            deliver_iw(*id, shm::kCmConnectResponse, 0, rr, depth,
                       pd.first(std::min(pd.size(), shm::kCmRepPrivate)));
            break;
        case K::rejected:
            id->state = Id::State::idle;
            unlink(*id);
            deliver_iw(*id, shm::kCmRejected, e.status, 0, 0,
                       pd.first(std::min(pd.size(), shm::kCmRejPrivate)));
            break;
        case K::refused: {
            // As Linux's rdma_cm reads an iWARP connect's failure: reset or refused is a
            // rejection, a timeout unreachable, anything else a connect error.
            id->state = Id::State::idle;
            unlink(*id);
            const std::uint32_t type = e.status == -ECONNREFUSED || e.status == -ECONNRESET
                                           ? shm::kCmRejected
                                       : e.status == -ETIMEDOUT ? shm::kCmUnreachable
                                                                : shm::kCmConnectError;
            deliver_iw(*id, type, e.status, 0, 0, {});
            break;
        }
        case K::disconnected:
            id->state = Id::State::disconnecting;
            if (!id->disconnect_delivered) {
                id->disconnect_delivered = true;
                deliver_iw(*id, shm::kCmDisconnected, 0, 0, 0, {});
            }
            break;
        case K::gone:
            if (id->state == Id::State::req_received && !id->disconnect_delivered) {
                // The peer went before the request was answered.
                id->disconnect_delivered = true;
                deliver_iw(*id, shm::kCmDisconnected, 0, 0, 0, {});
            }
            unlink(*id);
            break;
        default:
            break;
    }
}

int CmService::iw_accept(Id& id, const shm::CmConnParam& param) {
    constexpr const char* op = "cm_accept";
    PortCm& port = *ports_[id.port_index];
    if (id.state == Id::State::rep_received) {
        // The active side's QP runs: nothing more goes on the wire (no RTR asked for).
        id.state = Id::State::established;
        return 0;
    }
    if (id.state != Id::State::req_received || id.iw_conn == 0 || port.iw == nullptr)
        return refuse(EINVAL, op, "no connect request or response to answer");
    if (param.private_data_len + iwarp::kMpaIrdOrdLen > iwarp::kMpaMaxPrivateData)
        return refuse(EINVAL, op, "private data longer than MPA carries");
    if (const int err = port.iw->accept(id.iw_conn, {param.private_data, param.private_data_len},
                                        param.responder_resources, param.initiator_depth);
        err != 0)
        return refuse(err, op, "the MPA reply could not be sent");
    if (Id* l = ids_.find(id.parent); l != nullptr && l->pending > 0) --l->pending;
    id.parent = shm::kNoHandle;
    // The reply is out: the connection is made (an iWARP responder has no RTU to wait for).
    id.state = Id::State::established;
    deliver_iw(id, shm::kCmEstablished, 0, param.responder_resources, param.initiator_depth, {});
    return 0;
}

int CmService::iw_reject(Id& id, std::span<const std::uint8_t> pd) {
    constexpr const char* op = "cm_reject";
    PortCm& port = *ports_[id.port_index];
    if (id.iw_conn == 0 || port.iw == nullptr ||
        (id.state != Id::State::req_received && id.state != Id::State::rep_received))
        return refuse(EINVAL, op, "no connect request or response to reject");
    int err = 0;
    if (id.state == Id::State::req_received) err = port.iw->reject(id.iw_conn, pd);
    id.state = Id::State::idle;
    unlink(id);  // the active side's reply is answered by closing the connection
    if (err != 0) return refuse(err, op, "the MPA reject could not be sent");
    return 0;
}

int CmService::iw_disconnect(Id& id) {
    constexpr const char* op = "cm_disconnect";
    using S = Id::State;
    if (id.state == S::disconnecting) return 0;
    if (id.iw_conn == 0 ||
        (id.state != S::established && id.state != S::accepted && id.state != S::rep_received))
        return refuse(EINVAL, op, "the id is not connected");
    PortCm& port = *ports_[id.port_index];
    if (port.iw != nullptr) port.iw->disconnect(id.iw_conn);
    id.state = S::disconnecting;
    return 0;
}

// ---- the ops of one CM connection ------------------------------------------------------------

CmSession::~CmSession() {
    // Everything the connection owned goes: the peers hear REJ or DREQ.
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
    if (ring_) return refuse(EINVAL, op, "already open");
    if (fds.size() != 2) return refuse(EINVAL, op, "takes 2 fds: notification socket, memfd");
    if (!is_notify_socket(fds.get(0)))
        return refuse(EINVAL, op, "first fd is not a notification socket (AF_UNIX SOCK_STREAM)");
    auto notify = resources.keep_fd(fds.take(0), peer_.uid, fds_);
    if (!notify) {
        spdlog::warn("cm: connection of pid {} uid {}: {} refused ({}): {}", peer_.pid, peer_.uid,
                     op, std::strerror(notify.error().code), notify.error().message);
        return notify.error().code;
    }
    const shm::Layout layout = shm::cm_event_layout();
    auto map = map_object(fds.get(1), layout.bytes, nullptr);
    if (!map) return refuse(map.error().code, op, map.error().message);
    auto ring = shm::RingProducer<shm::CmEvent>::attach(map->span(0, layout.bytes));
    if (!ring)
        return refuse(EINVAL, op, std::string("event ring: ") + shm::ring_strerror(ring.error()));
    if (ring->capacity() != shm::kCmEventCapacity)
        return refuse(EINVAL, op,
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
    if (!valid_ps(req.ps)) return refuse(EINVAL, op, fmt::format("port space {:#x}", req.ps));
    const bool ud = req.ps == shm::kCmPsUdp || req.ps == shm::kCmPsIpoib;
    if (ud ? req.qp_type != kQptUd
           : req.qp_type != kQptRc && req.qp_type != kQptUc && req.qp_type != kQptUd)
        return refuse(EINVAL, op,
                      fmt::format("QP type {} in port space {:#x}", req.qp_type, req.ps));
    if (!service_.has_room(*this))
        return refuse(
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
    if (h == shm::kNoHandle) return refuse(ENOMEM, op, "id table full");
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
    if (id->bound) return refuse(EINVAL, op, "already bound");
    std::uint16_t index = shm::kCmNoPort;
    if (req.ip != 0) {
        const auto p = service_.port_for(req.ip);
        if (!p || service_.devices_[*p].ip.addr.value != req.ip)
            return refuse(EADDRNOTAVAIL, op,
                          net::Ipv4Addr{req.ip}.to_string() + " is no port's address");
        index = *p;
    }
    std::uint16_t port = req.port;
    if (port == 0) {
        port = service_.ephemeral_port(*id, req.ip);
        if (port == 0) return refuse(EADDRINUSE, op, "no ephemeral port left");
    } else if (!service_.bindable(*id, req.ip, port, req.reuse_addr != 0)) {
        return refuse(EADDRINUSE, op, fmt::format("port {} is in use", port));
    }
    id->bound = true;
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
        return refuse(EINVAL, op, "the id is not idle");
    if (!id->bound) {
        const std::uint16_t port = service_.ephemeral_port(*id, 0);
        if (port == 0) return refuse(EADDRINUSE, op, "no ephemeral port left");
        id->bound = true, id->ip = 0, id->port = port, id->port_index = shm::kCmNoPort;
    }
    if (!service_.bindable(*id, id->ip, id->port, false) && !id->reuse)
        return refuse(EADDRINUSE, op, fmt::format("port {} is in use", id->port));
    id->backlog = req.backlog > 0 && req.backlog < kMaxBacklog ? req.backlog : kMaxBacklog;
    id->state = CmService::Id::State::listening;
    spdlog::debug("cm: id {} listens on port {} (port space {:#x})", req.id, id->port,
                  static_cast<unsigned>(id->ps));
    service_.iw_listen(*id);
    return 0;
}

int CmSession::connect(const shm::CmConnectReq& req) {
    constexpr const char* op = "cm_connect";
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->state != CmService::Id::State::idle || id->conn != 0)
        return refuse(EINVAL, op, "the id is not idle");
    const bool sidr = id->qp_type == kQptUd;
    const std::size_t max = sidr ? shm::kCmSidrReqPrivate : shm::kCmReqPrivate;
    if (req.dst_port == 0) return refuse(EINVAL, op, "destination port 0");
    if (req.param.private_data_len > max)
        return refuse(
            EINVAL, op,
            fmt::format("{} bytes of private data, {} at most", req.param.private_data_len, max));
    std::uint16_t index = id->port_index;
    if (index == shm::kCmNoPort) {
        const auto p = service_.port_for(req.dst_ip);
        if (!p)
            return refuse(ENETUNREACH, op,
                          net::Ipv4Addr{req.dst_ip}.to_string() + " is on no port's subnet");
        index = *p;
    }
    const bool iw = req.transport == shm::kTransportIwarp;
    if (iw && (sidr || service_.ports_[index]->iw == nullptr))
        return refuse(
            EINVAL, op,
            sidr ? "iWARP has no datagram service (SIDR)" : "the port has no iWARP device");
    const std::uint32_t local = service_.devices_[index].ip.addr.value;
    if (!id->bound) {
        const std::uint16_t port = service_.ephemeral_port(*id, local);
        if (port == 0) return refuse(EADDRINUSE, op, "no ephemeral port left");
        id->bound = true, id->port = port;
    }
    id->ip = local;
    id->port_index = index;
    if (iw) {
        // MPA carries the consumer's private data alone (no rdma_cm header: the TCP
        // connection has the addresses), IRD and ORD in RFC 6581's header.
        CmService::PortCm& port = *service_.ports_[index];
        auto conn =
            port.iw->connect(req.dst_ip, req.dst_port, id->port,
                             {req.param.private_data, req.param.private_data_len},
                             req.param.responder_resources, req.param.initiator_depth, peer_);
        if (!conn) return refuse(conn.error().code, op, conn.error().message);
        id->iw = true;
        id->iw_conn = *conn;
        id->remote_ip = req.dst_ip;
        id->remote_port = req.dst_port;
        id->disconnect_delivered = false;
        id->state = CmService::Id::State::connecting;
        port.iw_conns[*conn] = id->handle;
        return 0;
    }

    std::array<std::uint8_t, cm::kCmaHeaderSize + shm::kCmSidrReqPrivate> pd{};
    cm::CmaHeader hdr;
    hdr.src_ip = local;
    hdr.dst_ip = req.dst_ip;
    hdr.src_port = id->port;
    cm::encode_cma_header(hdr, pd);
    std::memcpy(pd.data() + cm::kCmaHeaderSize, req.param.private_data, req.param.private_data_len);

    cm::ConnectParams p;
    p.local_ip = local;
    p.remote_ip = req.dst_ip;
    p.service_id = cm::service_id(static_cast<cm::PortSpace>(id->ps), req.dst_port);
    p.qp = qp_info(req.param);
    p.qp.qp_type = id->qp_type;
    p.cm_response_timeout = req.cm_response_timeout != 0 ? req.cm_response_timeout : 20;
    p.max_cm_retries =
        req.max_cm_retries != 0 ? std::min<std::uint8_t>(req.max_cm_retries, 15) : 15;
    p.flow_label = cm::roce_flow_label(id->port, req.dst_port);
    p.private_data = {pd.data(), cm::kCmaHeaderSize + req.param.private_data_len};
    CmService::PortCm& port = *service_.ports_[index];
    auto conn =
        sidr ? port.agent.sidr_request(local, req.dst_ip, p.service_id, p.private_data,
                                       p.cm_response_timeout, p.max_cm_retries, CmService::now_ns())
             : port.agent.connect(p, CmService::now_ns());
    if (!conn)
        return refuse(conn.error().code ? conn.error().code : EAGAIN, op, conn.error().message);
    id->conn = *conn;
    id->remote_ip = req.dst_ip;
    id->remote_port = req.dst_port;
    id->disconnect_delivered = false;
    id->sidr = sidr;
    id->state = CmService::Id::State::connecting;
    port.conns[*conn] = id->handle;
    service_.drain_events();
    return 0;
}

int CmSession::accept(const shm::CmAcceptReq& req) {
    constexpr const char* op = "cm_accept";
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->iw) return service_.iw_accept(*id, req.param);
    if (id->conn == 0) return refuse(EINVAL, op, "the id has no connection");
    CmService::PortCm& port = *service_.ports_[id->port_index];
    const std::uint64_t now = CmService::now_ns();
    Status st = Ok{};
    if (id->state == CmService::Id::State::req_received && id->sidr) {
        if (req.param.private_data_len > shm::kCmSidrRepPrivate)
            return refuse(EINVAL, op,
                          fmt::format("{} bytes of private data, {} at most",
                                      req.param.private_data_len, shm::kCmSidrRepPrivate));
        const cm::ConnId conn = id->conn;
        service_.unlink(*id);  // the agent forgets a SIDR exchange once it answered
        id->state = CmService::Id::State::established;
        st = port.agent.sidr_reply(conn, 0, req.param.qpn & 0xffffff, req.param.qkey,
                                   {req.param.private_data, req.param.private_data_len}, now);
    } else if (id->state == CmService::Id::State::req_received) {
        if (req.param.private_data_len > shm::kCmRepPrivate)
            return refuse(EINVAL, op,
                          fmt::format("{} bytes of private data, {} at most",
                                      req.param.private_data_len, shm::kCmRepPrivate));
        cm::QpInfo q = qp_info(req.param);
        q.qp_type = id->qp_type;
        st = port.agent.accept(id->conn, q, {req.param.private_data, req.param.private_data_len},
                               now);
        if (st) {
            id->state = CmService::Id::State::accepted;
            if (CmService::Id* l = service_.ids_.find(id->parent); l != nullptr && l->pending > 0)
                --l->pending;
            id->parent = shm::kNoHandle;
        }
    } else if (id->state == CmService::Id::State::rep_received) {
        id->state = CmService::Id::State::established;
        st =
            port.agent.confirm(id->conn, {req.param.private_data, req.param.private_data_len}, now);
        if (!st) id->state = CmService::Id::State::rep_received;
    } else {
        return refuse(EINVAL, op, "no connect request or response to answer");
    }
    service_.drain_events();
    if (!st) return refuse(st.error().code ? st.error().code : EINVAL, op, st.error().message);
    return 0;
}

int CmSession::reject(const shm::CmRejectReq& req) {
    constexpr const char* op = "cm_reject";
    CmService::Id* id = service_.find(*this, req.id, op);
    if (id == nullptr) return EINVAL;
    if (id->iw) return service_.iw_reject(*id, {req.private_data, req.private_data_len});
    if (id->conn == 0 || (id->state != CmService::Id::State::req_received &&
                          id->state != CmService::Id::State::rep_received))
        return refuse(EINVAL, op, "no connect request or response to reject");
    if (req.private_data_len > shm::kCmRejPrivate)
        return refuse(EINVAL, op,
                      fmt::format("{} bytes of private data, {} at most", req.private_data_len,
                                  shm::kCmRejPrivate));
    CmService::PortCm& port = *service_.ports_[id->port_index];
    const cm::ConnId conn = id->conn;
    service_.unlink(*id);
    id->state = CmService::Id::State::idle;
    const std::span<const std::uint8_t> pd{req.private_data, req.private_data_len};
    const Status st =
        id->sidr ? port.agent.sidr_reply(conn, kSidrReject, 0, 0,
                                         pd.first(std::min(pd.size(), shm::kCmSidrRepPrivate)),
                                         CmService::now_ns())
                 : port.agent.reject(conn, kRejConsumer, pd, CmService::now_ns());
    service_.drain_events();
    if (!st) return refuse(EINVAL, op, st.error().message);
    return 0;
}

int CmSession::disconnect(const shm::HandleReq& req) {
    constexpr const char* op = "cm_disconnect";
    CmService::Id* id = service_.find(*this, req.handle, op);
    if (id == nullptr) return EINVAL;
    if (id->iw) return service_.iw_disconnect(*id);
    if (id->conn == 0) return refuse(EINVAL, op, "the id is not connected");
    using S = CmService::Id::State;
    if (id->state == S::disconnecting) return 0;
    if (id->state != S::established && id->state != S::accepted && id->state != S::rep_received)
        return refuse(EINVAL, op, "the id is not connected");
    CmService::PortCm& port = *service_.ports_[id->port_index];
    const Status st = port.agent.disconnect(id->conn, {}, CmService::now_ns());
    if (st) id->state = S::disconnecting;
    service_.drain_events();
    if (!st) return refuse(EINVAL, op, st.error().message);
    return 0;
}

int CmSession::migrate(const shm::CmMigrateReq& req, shm::CmIdReply& out) {
    constexpr const char* op = "cm_migrate";
    CmSession* from = service_.find_session(req.old_cookie);
    if (from == nullptr || from->peer_.pid != peer_.pid || from->peer_.uid != peer_.uid)
        return refuse(EINVAL, op, "no such CM connection of this process");
    CmService::Id* id = service_.find(*from, req.id, op);
    if (id == nullptr) return EINVAL;
    if (from != this) {
        if (ids_ >= CmService::kMaxIdsPerSession)
            return refuse(ENOMEM, op, fmt::format("{} ids on one connection", ids_));
        --from->ids_;
        ++ids_;
        id->owner = this;
    }
    out = {id->handle, 0};
    return 0;
}

}  // namespace snic::daemon
