// The iWARP transport on the port's lcore: its connections' TCP events, MPA, the stream into
// the QPs' engines and their FPDUs out. No syscalls, locks or logs but the eventfd signal of
// a connection's event to the CM; no allocation but a connection's own when it is made.
#include <algorithm>
#include <cerrno>

#include "daemon/iwarp/iwarp_transport.h"

namespace snic::daemon {

namespace {

constexpr std::uint32_t kIndexBits = 16;

std::span<const std::byte> bytes_of(std::span<const std::uint8_t> s) {
    return std::as_bytes(s);
}

}  // namespace

// ---- connections ---------------------------------------------------------------------------

IwConn::IwConn(IwarpTransport& t, IwConnId i, bool a)
    : transport(t),
      id(i),
      active(a),
      cm_released(!a),  // a passive one is the CM's once its request is told
      rx(new std::uint8_t[std::size_t{IwarpTransport::kRxBuffers} * t.rx_buffer_bytes()]) {}

void IwConn::on_tcp_event(const TcpStreamEvent& e) {
    transport.on_conn_event(*this, e);
}

IwConn* IwarpTransport::find(IwConnId id) const {
    const std::uint32_t i = id & ((1u << kIndexBits) - 1);
    if (i >= conns_.size()) return nullptr;
    IwConn* c = conns_[i].get();
    return c != nullptr && c->id == id ? c : nullptr;
}

// Connection setup, not the datapath: the one allocation of a connection (its receive
// buffers) happens here, as a kernel allocates a socket's.
IwConn* IwarpTransport::make_conn(bool active) {
    if (free_.empty()) {
        counters_.no_room.add();
        return nullptr;
    }
    const std::uint32_t i = free_.back();
    if (++gens_[i] == 0) gens_[i] = 1;
    const IwConnId id = std::uint32_t{gens_[i]} << kIndexBits | i;
    conns_[i] = std::make_unique<IwConn>(*this, id, active);
    free_.pop_back();
    return conns_[i].get();
}

void IwarpTransport::free_conn(IwConn& c) {
    const std::uint32_t i = c.id & ((1u << kIndexBits) - 1);
    conns_[i].reset();
    free_.push_back(i);
}

void IwarpTransport::maybe_free(IwConn& c) {
    if (c.ended && c.cm_released && c.qp == nullptr && !c.binding) free_conn(c);
}

void IwarpTransport::emit(IwConn& c, IwCmEvent::Kind kind, std::int32_t status,
                          std::span<const std::uint8_t> pd, std::uint16_t ird, std::uint16_t ord) {
    if (c.cm_released) return;
    IwCmEvent e;
    e.kind = kind;
    e.conn = c.id;
    e.status = status;
    e.local_ip = c.tuple.local_ip.value;
    e.remote_ip = c.tuple.remote_ip.value;
    e.local_port = c.tuple.local_port;
    e.remote_port = c.tuple.remote_port;
    e.ird = ird;
    e.ord = ord;
    e.pd_len = static_cast<std::uint16_t>(std::min(pd.size(), e.pd.size()));
    // Not memcpy: most events carry no private data, and an empty span's data() may be null.
    std::ranges::copy(pd.first(e.pd_len), e.pd.begin());
    if (!events_.push(e)) {
        counters_.events_lost.add();
        return;
    }
    wakeup_.signal();
}

void IwarpTransport::post_buffers(IwConn& c) {
    const std::uint32_t size = rx_buffer_bytes();
    for (std::uint32_t n = 0; n < kRxBuffers; ++n)
        stack().post_receive(c.tcp, {reinterpret_cast<std::byte*>(c.rx.get()) + n * size, size}, n);
}

// Buffers read to their end and returned by TCP go back as the next ones of their slot.
void IwarpTransport::repost(IwConn& c) {
    while (true) {
        const std::uint64_t n = c.next_repost;
        const std::uint32_t slot = static_cast<std::uint32_t>(n % kRxBuffers);
        const std::uint32_t size = rx_buffer_bytes();
        if ((c.returned & (1u << slot)) == 0 || c.consumed < (n + 1) * size) return;
        c.returned &= ~(1u << slot);
        ++c.next_repost;
        stack().post_receive(c.tcp, {reinterpret_cast<std::byte*>(c.rx.get()) + slot * size, size},
                             n + kRxBuffers);
    }
}

bool IwarpTransport::send_frame(IwConn& c, std::span<const std::uint8_t> frame) {
    return !frame.empty() && stack().send(c.tcp, bytes_of(frame));
}

void IwarpTransport::close_conn(IwConn& c) {
    if (c.ended || c.state == IwConn::State::closing) return;
    c.state = IwConn::State::closing;
    c.tx_open = false;
    stack().close(c.tcp);
}

// ---- the stream ----------------------------------------------------------------------------

void IwarpTransport::pump(IwConn& c) {
    using S = IwConn::State;
    bool fed = false;
    while (c.consumed < c.received) {
        const std::uint64_t n = c.consumed >> rx_shift_;
        const std::size_t off = c.consumed & (rx_buffer_bytes() - 1);
        const std::size_t len = static_cast<std::size_t>(
            std::min<std::uint64_t>(rx_buffer_bytes() - off, c.received - c.consumed));
        const std::span<const std::uint8_t> chunk(
            c.rx.get() + ((n % kRxBuffers) << rx_shift_) + off, len);
        if (c.state == S::awaiting_reply) {
            c.consumed += c.ini->on_bytes(chunk);
            if (!on_reply(c)) break;
        } else if (c.state == S::awaiting_request) {
            c.consumed += c.resp->on_bytes(chunk);
            if (!on_request(c)) break;
        } else if (c.state == S::connected || c.state == S::replied) {
            if (c.qp == nullptr) {  // the QP is not bound yet: the bytes wait for it
                counters_.held_bytes.add(len);
                break;
            }
            c.qp->engine_.on_bytes(chunk, now_ns());
            c.consumed += len;
            fed = true;
        } else {
            c.consumed = c.received;  // closing, or not yet asked for: nobody reads them
        }
    }
    repost(c);
    if (fed) {
        c.qp->note_state();
        runner_.wake(*c.qp);
    }
}

// The initiator after MPA bytes: true while more bytes may be read.
bool IwarpTransport::on_reply(IwConn& c) {
    using M = iwarp::MpaState;
    switch (c.ini->state()) {
        case M::awaiting_frame:
            return true;
        case M::established:
            c.mpa_deadline = 0;
            c.result = c.ini->result();
            c.state = IwConn::State::connected;
            c.made = true;
            c.tx_open = true;
            counters_.replies.add();
            emit(c, IwCmEvent::Kind::reply, 0, c.result.peer_private_data, c.result.ird,
                 c.result.ord);
            return true;  // the FPDUs after the reply wait for the QP
        case M::rejected:
            counters_.rejects_received.add();
            emit(c, IwCmEvent::Kind::rejected, -ECONNREFUSED, c.ini->result().peer_private_data);
            close_conn(c);
            return false;
        default:
            counters_.mpa_errors.add();
            emit(c, IwCmEvent::Kind::refused, -EPROTO);
            close_conn(c);
            return false;
    }
}

// The responder after MPA bytes: true while more bytes may be read.
bool IwarpTransport::on_request(IwConn& c) {
    using M = iwarp::MpaState;
    switch (c.resp->state()) {
        case M::awaiting_frame:
            return true;
        case M::request_received: {
            c.mpa_deadline = 0;
            const iwarp::MpaFrame& req = c.resp->request();
            c.state = IwConn::State::request_received;
            c.cm_released = false;
            counters_.requests.add();
            emit(c, IwCmEvent::Kind::request, 0, req.private_data, req.ird_ord.ird,
                 c.resp->ulp_ord());
            return false;  // nothing more until the CM answers
        }
        default:  // a request snic cannot serve: refused (siw's way: a reject, then close)
            counters_.mpa_errors.add();
            (void)send_frame(c, c.resp->reply());
            close_conn(c);
            return false;
    }
}

void IwarpTransport::on_conn_event(IwConn& c, const TcpStreamEvent& e) {
    using K = TcpStreamEventKind;
    switch (e.kind) {
        case K::connected:
            stack().four_tuple(c.tcp, c.tuple);
            c.state = IwConn::State::awaiting_reply;
            c.mpa_deadline = now_tsc_ + mpa_reply_tsc_;
            if (!send_frame(c, c.ini->request())) {
                emit(c, IwCmEvent::Kind::refused, -ENOBUFS);
                close_conn(c);
            }
            break;
        case K::readable:
            c.received = e.bytes;
            pump(c);
            break;
        case K::recv_done:
            c.returned |= 1u << (e.cookie % kRxBuffers);
            repost(c);
            break;
        case K::send_space:
            if (c.qp != nullptr) runner_.wake(*c.qp);
            break;
        case K::mss_changed:  // a smaller path MTU (ICMP): FPDUs shrink to stay aligned
            if (c.qp != nullptr) {
                c.qp->engine_.set_mss(static_cast<std::uint32_t>(e.bytes));
                runner_.wake(*c.qp);
            }
            break;
        case K::peer_closed:
            c.peer_closed = true;
            peer_gone(c, true, 0);
            close_conn(c);  // our FIN answers theirs
            break;
        default: {  // terminal
            c.ended = true;
            std::int32_t status = 0;
            // Reset (nobody listens, or the peer aborted) is told apart from an MPA reject
            // (-ECONNREFUSED): both are REJECTED to rdma_cm, only the reject is the peer's.
            if (e.kind == K::reset) status = -ECONNRESET;
            if (e.kind == K::timed_out) status = -ETIMEDOUT;
            if (e.kind == K::unreachable) status = -EHOSTUNREACH;
            peer_gone(c, e.kind == K::closed && c.peer_closed, status);
            emit(c, IwCmEvent::Kind::gone, status);
            maybe_free(c);
            break;
        }
    }
}

// The stream will carry no more from the peer: the QP's engine and the CM hear of it once.
void IwarpTransport::peer_gone(IwConn& c, bool graceful, std::int32_t status) {
    if (c.qp != nullptr) {
        // ERR is published before the flush completions, and the orderly close (FIN, after
        // rdma_disconnect) as such: they would read as the QP's own failure (QP_FATAL). A QP
        // that failed already was published then (note_failed is once only).
        c.qp->glue_.note_failed(graceful);
        c.qp->engine_.on_stream_end(graceful);
        c.qp->note_state();
        runner_.wake(*c.qp);
    }
    if (c.disconnect_told) return;
    c.disconnect_told = true;
    if (c.made) {
        counters_.disconnects.add();
        emit(c, IwCmEvent::Kind::disconnected, status);
    } else if (c.active) {
        counters_.refused.add();
        emit(c, IwCmEvent::Kind::refused, status != 0 ? status : -ECONNRESET);
    } else if (c.state == IwConn::State::request_received) {
        emit(c, IwCmEvent::Kind::disconnected, status);
    }
}

// The listeners' connections, once ESTABLISHED.
void IwarpTransport::on_tcp_event(const TcpStreamEvent& e) {
    if (e.kind != TcpStreamEventKind::incoming) return;
    IwConn* c = make_conn(false);
    if (c == nullptr) {
        stack().abort(e.conn);
        return;
    }
    c->tcp = e.conn;
    if (stack().accept(e.conn, *c) != 0) {
        free_conn(*c);
        return;
    }
    stack().four_tuple(c->tcp, c->tuple);
    c->resp.emplace(mpa_config(0, 0, true));  // IRD and ORD come with accept()
    c->state = IwConn::State::awaiting_request;
    c->mpa_deadline = now_tsc_ + mpa_request_tsc_;
    counters_.incoming.add();
    post_buffers(*c);
}

bool IwarpTransport::poll(std::uint64_t now_tsc) {
    now_tsc_ = now_tsc;
    if (now_tsc >= next_mpa_check_) {
        next_mpa_check_ = now_tsc + mpa_check_tsc_;
        expire_handshakes();
    }
    return runner_.poll(now_tsc);
}

void IwarpTransport::expire_handshakes() {
    for (auto& slot : conns_) {
        IwConn* c = slot.get();
        if (c == nullptr || c->mpa_deadline == 0 || c->ended || now_tsc_ < c->mpa_deadline)
            continue;
        c->mpa_deadline = 0;
        if (c->state == IwConn::State::closing) continue;
        counters_.mpa_timeouts.add();
        if (c->active) emit(*c, IwCmEvent::Kind::refused, -ETIMEDOUT);
        c->disconnect_told = true;  // the CM heard (or never knew of it)
        c->state = IwConn::State::closing;
        stack().abort(c->tcp);
        c->ended = true;
        emit(*c, IwCmEvent::Kind::gone, -ETIMEDOUT);
        maybe_free(*c);
    }
}

// ---- the QPs -------------------------------------------------------------------------------

bool IwarpQp::send(std::span<const std::uint8_t> fpdu) {
    if (conn_ == nullptr || !conn_->tx_open || conn_->ended) return false;
    return transport_.stack().send(conn_->tcp, bytes_of(fpdu));
}

bool IwarpQp::sched_poll(std::uint64_t now_ns) {
    // As RoCE's QP: a poll in the grace period that would find nothing is not made.
    if (engine_.idle() && !glue_.send_ready()) return false;
    const bool did = engine_.poll(now_ns);
    note_state();
    return did;
}

void IwarpQp::note_state() {
    // A stream the peer closed in order (its FIN, after rdma_disconnect) ends the QP as a
    // Modify QP to ERR would: flushed, no IBV_EVENT_QP_FATAL. Errors (a Terminate, a reset,
    // a broken rule) raise it.
    const iwarp::IwError why = engine_.error();
    if (engine_.state() == iwarp::IwState::error)
        glue_.note_failed(why == iwarp::IwError::requested || why == iwarp::IwError::stream_closed);
    glue_.note_held(engine_.send_wrs_held());
    // After a Terminate (sent, or received) the stream closes: FIN once it is out.
    if (engine_.wants_close() && !engine_.terminate_pending() && conn_ != nullptr)
        transport_.close_conn(*conn_);
}

}  // namespace snic::daemon
