// The iWARP transport's setup side: the CM's calls and the QPs' binding to connections,
// reaching the lcore through LcoreTasks. Control thread only.
#include "daemon/iwarp/iwarp_transport.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "daemon/verbs/completion.h"
#include "daemon/verbs/limits.h"
#include "daemon/verbs/session.h"

namespace snic::daemon {

namespace {

bool same_client(const Peer& a, const Peer& b) {
    return a.pid == b.pid && a.uid == b.uid;
}

}  // namespace

iwarp::MpaConfig IwarpTransport::mpa_config(std::uint16_t ird, std::uint16_t ord, bool responder) {
    iwarp::MpaConfig m;
    m.revision = 2;
    m.crc = iwarp::CrcPolicy::require;
    m.ird = std::min<std::uint16_t>(ird, iwarp::kMpaIrdOrdMax);
    m.ord = std::min<std::uint16_t>(ord, iwarp::kMpaIrdOrdMax);
    // Either side's IRD may grow to the peer's ORD, up to the device's most, as siw's relaxed
    // IRD negotiation lets it (siw_proc_mpareply, siw_accept).
    m.max_ird = std::max<std::uint16_t>(m.ird, static_cast<std::uint16_t>(std::min<std::uint32_t>(
                                                   kLimits.max_qp_rd_atom, iwarp::kMpaIrdOrdMax)));
    // Peer-to-peer both ways (RFC 6581). As the initiator we offer a Read RTR alone: its
    // answer tells us the responder has read it, and our WRs wait for that answer (IwConfig).
    // As the responder we take whichever RTR kind the initiator offers (Write first).
    m.peer_to_peer = true;
    if (!responder) m.rtr = iwarp::kRtrRead;
    return m;
}

IwarpQp::IwarpQp(IwarpTransport& transport, Qp& qp, const NameTable& keys,
                 const iwarp::IwConfig& config)
    : RunningQp(qp, keys, config.qpn),
      transport_(transport),
      engine_(config, glue_, glue_, *this) {}

IwarpQp::~IwarpQp() = default;

QpEngineView IwarpQp::view() const {
    QpEngineView v;
    v.failed = failed();
    v.error = iwarp::iw_error_name(engine_.error());
    v.msn = engine_.expected_send_msn();
    v.send_wrs_held = engine_.send_wrs_held();
    return v;
}

void IwarpQp::for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const {
    for (const auto& f : iwarp::kIwCounterFields)
        fn(ctx, {f.name, (engine_.counters().*f.field).get()});
}

IwarpTransport::IwarpTransport(LcoreTasks& tasks, const NameTable& keys, TcpService& tcp,
                               std::uint64_t tsc_hz)
    : tasks_(tasks),
      keys_(keys),
      tcp_(tcp),
      rx_shift_(static_cast<std::uint32_t>(
          std::bit_width(std::max(tcp.stack().config().conn.recv_window / kRxBuffers, 1u)) - 1)),
      runner_(tasks, tsc_hz, kGraceNs),
      mpa_request_tsc_(
          static_cast<std::uint64_t>(kMpaRequestWaitSeconds * static_cast<double>(tsc_hz))),
      mpa_reply_tsc_(
          static_cast<std::uint64_t>(kMpaReplyWaitSeconds * static_cast<double>(tsc_hz))),
      mpa_check_tsc_(static_cast<std::uint64_t>(kMpaCheckSeconds * static_cast<double>(tsc_hz))),
      conns_(tcp.stack().config().max_connections),
      gens_(conns_.size(), 0) {
    free_.reserve(conns_.size());
    for (std::uint32_t i = static_cast<std::uint32_t>(conns_.size()); i-- > 0;) free_.push_back(i);
}

IwarpTransport::~IwarpTransport() = default;

// ---- the CM's calls ------------------------------------------------------------------------

int IwarpTransport::listen(std::uint16_t port, std::uint32_t backlog) {
    int err = 0;
    tasks_.run([&] {
        for (Listener& l : listeners_) {
            if (l.port != port) continue;
            ++l.refs;
            return;
        }
        TcpHandle h;
        err = stack().listen(port, std::max<std::uint32_t>(backlog, 1), *this, h);
        if (err == 0) listeners_.push_back({port, 1, h});
    });
    return err;
}

void IwarpTransport::unlisten(std::uint16_t port) {
    tasks_.run([&] {
        for (auto it = listeners_.begin(); it != listeners_.end(); ++it) {
            if (it->port != port || --it->refs > 0) continue;
            stack().close(it->handle);
            listeners_.erase(it);
            return;
        }
    });
}

bool IwarpTransport::uses_tcp_port(std::uint16_t port) {
    bool used = false;
    tasks_.run([&] { used = stack().uses_port(port); });
    return used;
}

Result<IwConnId> IwarpTransport::connect(std::uint32_t ip, std::uint16_t port,
                                         std::uint16_t local_port, std::span<const std::uint8_t> pd,
                                         std::uint16_t ird, std::uint16_t ord, const Peer& owner) {
    if (pd.size() + iwarp::kMpaIrdOrdLen > iwarp::kMpaMaxPrivateData)
        return make_error(EINVAL, "private data longer than MPA carries");
    int err = 0;
    IwConnId id = 0;
    TcpBound bound = TcpBound::connections;  // what ENOBUFS means
    tasks_.run([&] {
        IwConn* c = make_conn(true);
        if (c == nullptr) {
            err = ENOBUFS;
            return;
        }
        c->ini.emplace(mpa_config(ird, ord, false), pd);
        if (c->ini->state() == iwarp::MpaState::failed) {
            free_conn(*c);
            err = EINVAL;
            return;
        }
        err = stack().connect(net::Ipv4Addr{ip}, port, *c, c->tcp, local_port);
        if (err != 0) {
            if (err == ENOBUFS) bound = stack().bound_for(net::Ipv4Addr{ip});
            free_conn(*c);
            return;
        }
        c->owner = owner;
        c->has_owner = true;
        c->state = IwConn::State::connecting;
        c->mpa_deadline = now_tsc_ + mpa_request_tsc_;  // TCP's handshake, then the reply's
        counters_.connects.add();
        post_buffers(*c);
        id = c->id;
    });
    if (err == ENOBUFS) return make_error(err, connections_full(ip, bound));
    if (err != 0)
        return make_error(
            err, fmt::format("iWARP connect to {}:{} from port {}: {}",
                             net::Ipv4Addr{ip}.to_string(), port, local_port, std::strerror(err)));
    return id;
}

std::string IwarpTransport::connections_full(std::uint32_t ip, TcpBound bound) {
    const TcpStackConfig& c = tcp_.stack().config();
    const std::string why =
        bound == TcpBound::per_peer
            ? fmt::format(
                  "iWARP connect to {}: the port's TCP holds {} connections with that "
                  "address, snicd's --tcp-max-per-peer",
                  net::Ipv4Addr{ip}.to_string(), c.max_per_peer)
            : fmt::format(
                  "iWARP connect to {}: the port's TCP holds {} connections, snicd's "
                  "--tcp-max-conns",
                  net::Ipv4Addr{ip}.to_string(), c.max_connections);
    // A warning for the operator, once a second at most: a client that loops on connect
    // does not flood the log (each refusal is counted: iw_no_room, connect_refused).
    const auto now = std::chrono::steady_clock::now();
    if (now - last_full_warning_ >= std::chrono::seconds(1)) {
        last_full_warning_ = now;
        spdlog::warn("{} (ENOBUFS)", why);
    }
    return why;
}

void IwarpTransport::set_owner(IwConnId id, const Peer& owner) {
    tasks_.run([&] {
        if (IwConn* c = find(id)) c->owner = owner, c->has_owner = true;
    });
}

int IwarpTransport::accept(IwConnId id, std::span<const std::uint8_t> pd, std::uint16_t ird,
                           std::uint16_t ord) {
    int err = 0;
    tasks_.run([&] {
        IwConn* c = find(id);
        if (c == nullptr || c->state != IwConn::State::request_received) {
            err = EINVAL;
            return;
        }
        const auto m = mpa_config(ird, ord, true);
        if (c->resp->accept(pd, m.ird, m.ord) != iwarp::MpaError::none) {
            err = EINVAL;
            return;
        }
        if (!send_frame(*c, c->resp->reply())) {
            err = EIO;
            return;
        }
        c->result = c->resp->result();
        c->state = IwConn::State::replied;
        c->made = true;
        c->tx_open = true;
        counters_.replies.add();
        pump(*c);  // bytes that came early wait for the QP
    });
    return err;
}

int IwarpTransport::reject(IwConnId id, std::span<const std::uint8_t> pd) {
    int err = 0;
    tasks_.run([&] {
        IwConn* c = find(id);
        if (c == nullptr || c->state != IwConn::State::request_received) {
            err = EINVAL;
            return;
        }
        if (c->resp->reject(pd) != iwarp::MpaError::none) {
            err = EINVAL;
            return;
        }
        (void)send_frame(*c, c->resp->reply());
        counters_.rejects_sent.add();
        c->state = IwConn::State::closing;
        stack().close(c->tcp);
    });
    return err;
}

void IwarpTransport::disconnect(IwConnId id) {
    tasks_.run([&] {
        if (IwConn* c = find(id)) close_conn(*c);
    });
}

void IwarpTransport::release(IwConnId id) {
    tasks_.run([&] {
        IwConn* c = find(id);
        if (c == nullptr) return;
        c->cm_released = true;
        // A QP that still runs on it keeps it; without one the stream has no more use, unless
        // it is closing in order already (the peer then sees its FIN, not a reset).
        if (c->qp == nullptr && !c->ended && c->state != IwConn::State::closing) {
            c->state = IwConn::State::closing;
            stack().abort(c->tcp);
            c->ended = true;
        }
        maybe_free(*c);
    });
}

// ---- QPs -----------------------------------------------------------------------------------

// What an iWARP QP cannot be given (an address vector, a path) the device's rules refuse
// (daemon/iwarp/iwarp_rules.h); every value they let through runs.
const char* IwarpTransport::check_attr(std::uint32_t, const shm::QpAttr&) const {
    return nullptr;
}

Result<std::unique_ptr<QpEngine>> IwarpTransport::start(Qp& qp) {
    const IwConnId id = qp.attr.iw_conn;
    iwarp::IwConfig cfg;
    const char* why = nullptr;
    tasks_.run([&] {
        IwConn* c = find(id);
        if (c == nullptr) {
            why = "no such iWARP connection";
        } else if (!c->has_owner || !same_client(c->owner, qp.owner)) {
            why = "the iWARP connection is another client's";
        } else if (c->qp != nullptr || c->binding) {
            why = "the iWARP connection has a QP already";
        } else if (c->state != IwConn::State::connected && c->state != IwConn::State::replied) {
            why = "the iWARP connection has not finished its MPA exchange";
        } else {
            c->binding = true;
            cfg.mss = stack().mss(c->tcp);  // mss_changed events follow it
            cfg.crc = c->result.crc;
            cfg.ird = std::max<std::uint32_t>(c->result.ird, 1);
            cfg.ord = std::max<std::uint32_t>(c->result.ord, 1);
            if (c->active) {
                cfg.rtr_send = c->result.rtr;
            } else {
                cfg.rtr_expect = c->result.rtr;
            }
        }
    });
    if (why != nullptr) {
        counters_.bind_refused.add();
        return make_error(EINVAL, why);
    }
    const shm::QpAttr& a = qp.attr;
    cfg.qpn = qp.qpn.get();
    cfg.remote_access =
        a.qp_access_flags &
        (verbs::access::remote_write | verbs::access::remote_read | verbs::access::remote_atomic);
    cfg.sq_depth = std::max<std::uint32_t>(qp.cap.max_send_wr, 1);
    cfg.max_inline = qp.cap.max_inline_data;
    cfg.srq = static_cast<bool>(qp.srq);
    cfg.flush_budget = flush_budget(qp);
    auto q = std::make_unique<IwarpQp>(*this, qp, keys_, cfg);
    IwarpQp* p = q.get();
    tcp_.port().count_qp();  // the lane's QPs (port.h), until stop()
    runner_.add(*p, qp, [&](std::uint64_t now_tsc) {
        now_tsc_ = now_tsc;
        IwConn* c = find(id);
        if (c == nullptr) {  // it ended meanwhile: the QP fails at once
            p->engine_.on_stream_end(false);
            p->note_state();
            return;
        }
        c->binding = false;
        c->qp = p;
        p->conn_ = c;
        counters_.bound.add();
        pump(*c);  // what came before the QP did
        if (c->ended) {
            p->engine_.on_stream_end(c->peer_closed);
            p->note_state();
        }
    });
    return std::unique_ptr<QpEngine>(std::move(q));
}

void IwarpTransport::start_sending(Qp& qp) {
    IwarpQp& q = of(qp);
    tasks_.run([&] {
        q.glue_.set_sending();
        runner_.wake(q);
    });
}

void IwarpTransport::drain(Qp& qp) {
    IwarpQp& q = of(qp);
    const bool notify = qp.attr.en_sqd_async_notify != 0;
    tasks_.run([&] {
        q.glue_.set_draining(notify);
        q.glue_.note_held(q.engine_.send_wrs_held());
    });
}

// SQD -> RTS: as RTR -> RTS (the engine has nothing of its own to resume).
void IwarpTransport::resume(Qp& qp) {
    start_sending(qp);
}

// Modify QP to ERR on an iWARP QP: the WRs are flushed and the connection is closed (FIN
// after what was queued), as an RNIC's QP leaving RTS takes its stream down.
void IwarpTransport::to_error(Qp& qp) {
    IwarpQp& q = of(qp);
    tasks_.run([&] {
        q.glue_.note_failed(true);
        q.engine_.to_error();
        if (q.conn_ != nullptr) close_conn(*q.conn_);
        runner_.wake(q);
    });
}

void IwarpTransport::stop(std::span<Qp* const> qps) {
    std::vector<RunningQp*> running;
    running.reserve(qps.size());
    for (Qp* qp : qps) {
        running.push_back(&of(*qp));
        tcp_.port().release_qpn();
    }
    runner_.remove(running, [this](RunningQp& r) {
        auto& q = static_cast<IwarpQp&>(r);
        IwConn* c = std::exchange(q.conn_, nullptr);
        if (c == nullptr) return;
        c->qp = nullptr;
        // Its stream has no use without it: closed unless closing already. In order, as the
        // kernel's TCP closes the socket of a QP siw tears down (`tcp_close`): what the QP
        // handed the stream still goes, then the FIN. An abort would throw away the last
        // messages the peer has not acknowledged yet (perftest destroys its rdma_cm
        // exchange's QP right after the last one). The CM hears at once, as from siw.
        if (!c->ended && c->state != IwConn::State::closing) {
            close_conn(*c);
            if (!c->disconnect_told) {
                c->disconnect_told = true;
                emit(*c, IwCmEvent::Kind::disconnected, 0);
            }
        }
        maybe_free(*c);
    });
}

IwarpQp& IwarpTransport::of(Qp& qp) {
    return static_cast<IwarpQp&>(*qp.engine);
}

void IwarpTransport::for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const {
    const IwarpCounters& c = counters_;
    fn(ctx, {"iw_connects", c.connects.get()});
    fn(ctx, {"iw_incoming", c.incoming.get()});
    fn(ctx, {"iw_requests", c.requests.get()});
    fn(ctx, {"iw_replies", c.replies.get()});
    fn(ctx, {"iw_rejects_sent", c.rejects_sent.get()});
    fn(ctx, {"iw_rejects_received", c.rejects_received.get()});
    fn(ctx, {"iw_refused", c.refused.get()});
    fn(ctx, {"iw_mpa_errors", c.mpa_errors.get()});
    fn(ctx, {"iw_bound", c.bound.get()});
    fn(ctx, {"iw_bind_refused", c.bind_refused.get()});
    fn(ctx, {"iw_disconnects", c.disconnects.get()});
    fn(ctx, {"iw_no_room", c.no_room.get()});
    fn(ctx, {"iw_events_lost", c.events_lost.get()});
    fn(ctx, {"iw_held_bytes", c.held_bytes.get()});
    fn(ctx, {"iw_mpa_timeouts", c.mpa_timeouts.get()});
    // Not a count: the receive ring of each connection (the window its peer is offered).
    fn(ctx, {"iw_rx_ring_bytes", std::uint64_t{kRxBuffers} * rx_buffer_bytes()});
    runner_.for_each_counter(fn, ctx);
}

}  // namespace snic::daemon
