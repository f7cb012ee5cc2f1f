#include "daemon/roce/ib_cm_wire.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "daemon/roce/gsi.h"
#include "proto/cm/cma.h"

namespace snic::daemon {

namespace {

// IBA table 112's reasons snicd gives.
constexpr std::uint16_t kRejNoResources = 3;
constexpr std::uint16_t kRejInvalidServiceId = 8;
constexpr std::uint16_t kRejConsumer = 28;
// SIDR_REP statuses (IBA table 119).
constexpr std::uint8_t kSidrUnsupported = 1;  // no such service ID
constexpr std::uint8_t kSidrReject = 2;

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

// The peer's QP as an event shows it, with `pd` (at most `max` bytes of it).
shm::CmConnParam param_of(const cm::QpInfo& q, std::span<const std::uint8_t> pd, std::size_t max) {
    shm::CmConnParam p{};
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
    const std::size_t n = std::min({pd.size(), max, sizeof p.private_data});
    // Not memcpy: an empty span's data() may be null, which memcpy must never be given.
    std::ranges::copy(pd.first(n), p.private_data);
    p.private_data_len = static_cast<std::uint8_t>(n);
    return p;
}

// rdma_cm's reject and disconnect answer EINVAL for whatever the agent refused (a connection
// it no longer knows included), as the CM service always has.
Status invalid_if_failed(Status st) {
    if (st) return st;
    return make_error(EINVAL, st.error().message);
}

}  // namespace

IbCmWire::IbCmWire(GsiPort* gsi, std::uint32_t local_ip, const SipKey& id_key,
                   std::uint32_t max_half_open)
    : gsi_(gsi), agent_(*this, [&] {
          cm::AgentConfig c;
          c.local_ip = local_ip;
          c.max_half_open = max_half_open;
          c.id_key = id_key;
          return c;
      }()) {}

std::size_t IbCmWire::private_max(CmMessage m, bool datagram) const {
    switch (m) {
        case CmMessage::request:
            return datagram ? shm::kCmSidrReqPrivate : shm::kCmReqPrivate;
        case CmMessage::reply:
            return datagram ? shm::kCmSidrRepPrivate : shm::kCmRepPrivate;
        case CmMessage::reject:
            return shm::kCmRejPrivate;
    }
    return 0;
}

void IbCmWire::send_mad(std::uint32_t remote_ip, std::uint32_t remote_qpn, std::uint32_t qkey,
                        std::span<const std::uint8_t> mad) {
    if (gsi_ == nullptr) return;
    GsiMad m{};
    m.ip = remote_ip;
    m.qpn = remote_qpn;
    m.qkey = qkey;
    m.length = static_cast<std::uint16_t>(std::min(mad.size(), m.data.size()));
    std::memcpy(m.data.data(), mad.data(), m.length);
    gsi_->send(m);  // a full queue counts there; the agent retransmits
}

void IbCmWire::deliver(const cm::Event& e) {
    using T = cm::EventType;
    using K = CmWireEvent::Kind;
    CmWireEvent w;
    w.conn = e.id;
    const auto pd = e.private_data;
    switch (e.type) {
        case T::req_received:
        case T::sidr_req_received: {
            // The service ID names the port space and port; rdma_cm's header the addresses
            // and the active side's port, and the consumer's private data follows it.
            const bool sidr = e.type == T::sidr_req_received;
            const auto svc = cm::ip_service(e.service_id);
            const auto hdr = cm::decode_cma_header(pd);
            w.kind = K::request;
            w.local_ip = e.local_ip;
            w.remote_ip = e.remote_ip;
            w.ps = svc ? static_cast<std::uint16_t>(svc->ps) : 0;
            w.local_port = svc ? svc->port : 0;
            w.remote_port = hdr ? hdr->src_port : 0;
            w.readable = svc && hdr;
            w.peer = param_of(e.peer, pd.subspan(std::min(pd.size(), cm::kCmaHeaderSize)),
                              private_max(CmMessage::request, sidr));
            if (sidr) w.peer.qp_type = IBV_QPT_UD;
            break;
        }
        case T::rep_received:
            w.kind = K::reply;
            w.peer = param_of(e.peer, pd, shm::kCmRepPrivate);
            break;
        case T::established:
            w.kind = K::established;
            w.peer = param_of(e.peer, {}, 0);
            break;
        case T::rejected:
            w.kind = K::rejected;
            w.status = e.reject_reason;
            w.peer = param_of(e.peer, pd, shm::kCmRejPrivate);
            break;
        case T::unreachable:
            w.kind = K::unreachable;
            w.status = -ETIMEDOUT;
            w.peer = param_of(e.peer, {}, 0);
            break;
        case T::dreq_received:
        case T::disconnected:
            w.kind = K::disconnected;
            w.peer = param_of(e.peer, {}, 0);
            break;
        case T::sidr_rep_received:
            // The exchange is over either way: SIDR has no connection to keep.
            w.kind = e.sidr_status == 0 ? K::established : K::unreachable;
            w.status = e.sidr_status;
            w.peer = param_of(e.peer, pd, shm::kCmSidrRepPrivate);
            break;
        case T::timewait_exit:
            w.kind = K::timewait_exit;
            break;
        default:
            return;
    }
    queue(w);
}

Result<WireConn> IbCmWire::connect(const CmConnectSpec& s) {
    const shm::CmConnParam& param = *s.param;
    std::array<std::uint8_t, cm::kCmaHeaderSize + shm::kCmSidrReqPrivate> pd{};
    cm::CmaHeader hdr;
    hdr.src_ip = s.local_ip;
    hdr.dst_ip = s.remote_ip;
    hdr.src_port = s.local_port;
    cm::encode_cma_header(hdr, pd);
    const std::size_t len = std::min<std::size_t>(param.private_data_len, shm::kCmSidrReqPrivate);
    std::memcpy(pd.data() + cm::kCmaHeaderSize, param.private_data, len);

    cm::ConnectParams p;
    p.local_ip = s.local_ip;
    p.remote_ip = s.remote_ip;
    p.service_id = cm::service_id(static_cast<cm::PortSpace>(s.ps), s.remote_port);
    p.qp = qp_info(param);
    p.qp.qp_type = s.qp_type;
    p.cm_response_timeout = s.cm_response_timeout != 0 ? s.cm_response_timeout : 20;
    p.max_cm_retries = s.max_cm_retries != 0 ? std::min<std::uint8_t>(s.max_cm_retries, 15) : 15;
    p.flow_label = cm::roce_flow_label(s.local_port, s.remote_port);
    p.private_data = {pd.data(), cm::kCmaHeaderSize + len};
    auto conn = s.qp_type == IBV_QPT_UD
                    ? agent_.sidr_request(s.local_ip, s.remote_ip, p.service_id, p.private_data,
                                          p.cm_response_timeout, p.max_cm_retries, cm_now_ns())
                    : agent_.connect(p, cm_now_ns());
    if (!conn)
        return make_error(conn.error().code != 0 ? conn.error().code : EAGAIN,
                          conn.error().message);
    return WireConn{*conn};
}

Status IbCmWire::accept(WireConn conn, const shm::CmConnParam& param, std::uint8_t qp_type) {
    const auto id = static_cast<cm::ConnId>(conn);
    const std::span<const std::uint8_t> pd{param.private_data, param.private_data_len};
    if (qp_type == IBV_QPT_UD)
        return agent_.sidr_reply(id, 0, param.qpn & 0xffffff, param.qkey, pd, cm_now_ns());
    cm::QpInfo q = qp_info(param);
    q.qp_type = qp_type;
    return agent_.accept(id, q, pd, cm_now_ns());
}

Status IbCmWire::confirm(WireConn conn, std::span<const std::uint8_t> pd) {
    return agent_.confirm(static_cast<cm::ConnId>(conn), pd, cm_now_ns());
}

Status IbCmWire::reject(WireConn conn, bool, bool datagram, std::span<const std::uint8_t> pd) {
    const auto id = static_cast<cm::ConnId>(conn);
    if (datagram)
        return invalid_if_failed(
            agent_.sidr_reply(id, kSidrReject, 0, 0,
                              pd.first(std::min(pd.size(), shm::kCmSidrRepPrivate)), cm_now_ns()));
    return invalid_if_failed(agent_.reject(id, kRejConsumer, pd, cm_now_ns()));
}

void IbCmWire::refuse(WireConn conn, Refusal why, bool datagram) {
    const auto id = static_cast<cm::ConnId>(conn);
    const std::uint64_t now = cm_now_ns();
    // As Linux: nobody listens on the service ID at all, REJ 8 (cm.c cm_match_req) or SIDR
    // status 1; someone does, but rdma_cm finds no listener that takes this request, the
    // consumer's refusal: REJ 28 or SIDR status 2 (cma.c's handler fails, cm.c rejects).
    if (datagram) {
        (void)agent_.sidr_reply(id, why == Refusal::no_listener ? kSidrUnsupported : kSidrReject, 0,
                                0, {}, now);
        return;
    }
    switch (why) {
        case Refusal::no_listener:
            (void)agent_.reject(id, kRejInvalidServiceId, {}, now);
            break;
        case Refusal::not_taken:
            (void)agent_.reject(id, kRejConsumer, {}, now);
            break;
        case Refusal::backlog_full:
            // As Linux's ucma with a full backlog: the REQ is forgotten unanswered (its
            // sender tries again after its CM response timeout), not rejected.
            (void)agent_.discard(id, now);
            break;
        case Refusal::no_room:
            (void)agent_.reject(id, kRejNoResources, {}, now);
            break;
    }
}

Status IbCmWire::disconnect(WireConn conn) {
    return invalid_if_failed(agent_.disconnect(static_cast<cm::ConnId>(conn), {}, cm_now_ns()));
}

void IbCmWire::release(WireConn conn) {
    // The peer hears of it: REJ for what was pending, DREQ for what was connected.
    agent_.release(static_cast<cm::ConnId>(conn), cm_now_ns());
}

void IbCmWire::poll_fds(std::vector<int>& out) const {
    if (gsi_ != nullptr) out.push_back(gsi_->fd());
}

void IbCmWire::run(std::uint64_t now) {
    if (gsi_ != nullptr) {
        gsi_->clear_wakeup();
        GsiMad m;
        while (gsi_->take(m)) {
            if (m.qkey != cm::kGsiQkey) continue;  // counted bad by nobody: not CM's
            agent_.receive(m.ip, m.qpn, {m.data.data(), m.length}, now);
            settle();
        }
    }
    agent_.poll(now);
    settle();
}

bool IbCmWire::status(shm::CmPortStatus& out) const {
    const cm::AgentCounters& c = agent_.counters();
    std::uint64_t conns = 0;
    agent_.for_each_state([&](std::string_view name, std::size_t n) {
        if (name != "idle") conns += n;
    });
    out = {c.mads_rx,    c.mads_tx, c.mads_bad,          c.retransmits,
           c.duplicates, c.stale,   c.half_open_refused, conns};
    return true;
}

}  // namespace snic::daemon
