#include "proto/cm/agent.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "proto/cm/mad.h"
#include "proto/cm/messages.h"

namespace snic::cm {

namespace {

constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();

// 4.096 us * 2^t, the unit of every CM timeout field.
constexpr std::uint64_t timeout_ns(std::uint8_t exponent) {
    return std::uint64_t{4096} << (exponent & 31u);
}

// The longest waits the agent keeps a connection half-open for, whatever a REQ (the peer's or
// the local client's) or an MRA asks: a response timeout of at most 2^20 units (4.3 s, what
// Linux's rdma_cm asks for its own REQs), so that with the 15 retries a field can name, a
// connection nobody answers is gone within about 70 s (not the 39 hours that 31 and 15 make);
// an MRA's service timeout of at most 2^24 units (69 s, the delay Linux's rdma_cm asks for
// in its own MRAs).
constexpr std::uint8_t kMaxResponseTimeout = 20;
constexpr std::uint8_t kMaxServiceTimeout = 24;

constexpr std::uint8_t response_timeout(std::uint8_t asked) {
    return std::min(asked, kMaxResponseTimeout);
}

constexpr std::array<std::string_view, kStates> kStateNames = {
    "idle",      "req_sent",     "mra_req_rcvd",  "req_rcvd",      "mra_req_sent",
    "rep_sent",  "mra_rep_rcvd", "rep_rcvd",      "mra_rep_sent",  "established",
    "dreq_sent", "timewait",     "sidr_req_sent", "sidr_req_rcvd",
};

constexpr std::array<std::string_view, kRxDrops> kDropNames = {
    "bad_mad", "bad_attribute", "bad_message", "unknown_conn", "wrong_state",
};

// The states that count against max_half_open: a REQ sent and not answered, a REQ received
// and the connection not yet established.
constexpr bool half_open_state(State s) {
    switch (s) {
        case State::req_sent:
        case State::mra_req_rcvd:
        case State::req_rcvd:
        case State::mra_req_sent:
        case State::rep_sent:
        case State::mra_rep_rcvd:
            return true;
        default:
            return false;
    }
}

std::uint8_t transport_of_qp_type(std::uint8_t qp_type) {
    return qp_type == 3 ? static_cast<std::uint8_t>(TransportType::uc)
                        : static_cast<std::uint8_t>(TransportType::rc);
}
std::uint8_t qp_type_of_transport(std::uint8_t t) {
    return t == static_cast<std::uint8_t>(TransportType::uc) ? 3 : 2;
}

}  // namespace

std::string_view state_name(State s) {
    auto i = static_cast<std::size_t>(s);
    return i < kStateNames.size() ? kStateNames[i] : "?";
}

std::string_view rx_drop_name(RxDrop d) {
    auto i = static_cast<std::size_t>(d);
    return i < kDropNames.size() ? kDropNames[i] : "?";
}

struct Agent::Conn {
    ConnId id = 0;
    State state = State::idle;
    State prev = State::idle;  // the state before the table's current row
    bool active = false;       // we sent the REQ / SIDR_REQ
    bool released = false;     // the consumer forgot it: no more events
    std::uint32_t local_ip = 0, remote_ip = 0;
    std::uint64_t service_id = 0;
    std::uint32_t remote_comm_id = 0;  // 0 until the peer's REQ / REP names it
    std::uint64_t tid = 0;             // the transaction of the current exchange
    QpInfo local;                      // what we sent in REQ / REP
    QpInfo peer;                       // what the peer sent
    std::uint8_t timeout_exp = 20;     // the retransmission interval's exponent
    std::uint8_t max_retries = 15;
    std::uint8_t retries = 0;  // retransmissions of the current request so far
    std::uint64_t deadline = kNever;
    Mad out{};  // the last MAD sent: resent on timers and to duplicates
    MsgType out_type = MsgType::req;
};

// The inputs of the transition table: received messages (after matching to a connection),
// the consumer's calls and the timer.
enum class Input : std::uint8_t {
    connect,
    rx_req,      // a new REQ (creates the connection)
    rx_req_dup,  // a REQ for a connection we already have
    rx_mra_req,
    rx_mra_rep,
    rx_rej,
    rx_rep,
    rx_rtu,
    rx_dreq,
    rx_drep,
    rx_lap,
    stale,  // a REQ from the same remote QP arrived: IBA §12.9.8.3.1
    accept,
    confirm,
    reject,
    disconnect,
    established,
    release,
    discard,
    timer_retry,    // the request's timer ran out and retries are left
    timer_expired,  // ... and none are left, or TimeWait is over
    sidr_request,
    rx_sidr_req,
    rx_sidr_rep,
    sidr_reply,
    count_,
};
constexpr std::size_t kInputs = static_cast<std::size_t>(Input::count_);

// What an action gets to work with: the time, the transaction, the message received (its
// decoded struct) or the consumer's arguments.
struct Ctx {
    std::uint64_t now = 0;
    std::uint64_t tid = 0;
    std::span<const std::uint8_t> priv{};  // private data, received or to send
    std::uint16_t reason = 0;              // REJ reason (received or to send)
    std::uint8_t service_timeout = 0;      // of a received MRA
    const ReqMsg* req = nullptr;
    const RepMsg* rep = nullptr;
    const QpInfo* qp = nullptr;             // accept()
    const ConnectParams* params = nullptr;  // connect()
    std::uint8_t sidr_status = 0;           // sidr_reply() / SIDR_REP
    const SidrRepMsg* sidr_rep = nullptr;
};

// A four-round Feistel network over the ID's 16-bit halves, each round's function SipHash-2-4
// of the round and the right half under `key`: a permutation of the 32-bit numbers that,
// without the key, cannot be run forward or backward from the IDs a peer saw (IBA §12.6.1
// leaves the choice of IDs to the CM; Linux draws them at random).
std::uint32_t permute_id(const SipKey& key, std::uint32_t x) {
    auto left = static_cast<std::uint16_t>(x >> 16);
    auto right = static_cast<std::uint16_t>(x);
    for (std::uint8_t round = 0; round < 4; ++round) {
        const std::array<std::uint8_t, 3> in{round, static_cast<std::uint8_t>(right >> 8),
                                             static_cast<std::uint8_t>(right)};
        const auto next = static_cast<std::uint16_t>(left ^ siphash24(key, in));
        left = right;
        right = next;
    }
    return (std::uint32_t{left} << 16) | right;
}

// Everything the table's rows do, and the helpers they share. A row's action runs after the
// state is set to the row's next state; an action that delivers an event does so last and
// does not touch the connection afterwards (the consumer may call back and change it).
struct Actions {
    using Conn = Agent::Conn;

    // --- helpers ---

    // A local communication ID: the keyed permutation of the next count, never 0, never in
    // use (distinct counts give distinct IDs until the count wraps).
    static ConnId new_id(Agent& a) {
        for (;;) {
            const ConnId id = permute_id(a.config_.id_key, ++a.id_seq_);
            if (id != 0 && !a.conns_.contains(id)) return id;
        }
    }
    static std::uint64_t new_tid(Agent& a, const Conn& c) {
        return (std::uint64_t{c.id} << 32) | ++a.tid_seq_;
    }
    static Conn& create(Agent& a, bool active) {
        auto c = std::make_unique<Conn>();
        c->id = new_id(a);
        c->active = active;
        Conn& ref = *c;
        a.conns_.emplace(ref.id, std::move(c));
        ++a.in_state_[static_cast<std::size_t>(State::idle)];
        return ref;
    }
    static void set_state(Agent& a, Conn& c, State s) {
        if (c.state == s) return;
        --a.in_state_[static_cast<std::size_t>(c.state)];
        ++a.in_state_[static_cast<std::size_t>(s)];
        if (half_open_state(c.state)) --a.half_open_;
        if (half_open_state(s)) ++a.half_open_;
        c.state = s;
    }
    static void arm(Agent& a, Conn& c, std::uint64_t deadline) {
        disarm(a, c);
        c.deadline = deadline;
        a.timers_.emplace(deadline, c.id);
    }
    static void disarm(Agent& a, Conn& c) {
        if (c.deadline != kNever) a.timers_.erase({c.deadline, c.id});
        c.deadline = kNever;
    }
    static void unindex(std::map<std::pair<std::uint32_t, std::uint32_t>, ConnId>& m,
                        std::pair<std::uint32_t, std::uint32_t> key, ConnId id) {
        auto it = m.find(key);
        if (it != m.end() && it->second == id) m.erase(it);
    }
    static void erase(Agent& a, Conn& c) {
        disarm(a, c);
        unindex(a.by_remote_, {c.remote_ip, c.remote_comm_id}, c.id);
        unindex(a.by_qpn_, {c.remote_ip, c.peer.qpn}, c.id);
        unindex(a.by_sidr_, {c.remote_ip, c.remote_comm_id}, c.id);
        set_state(a, c, State::idle);
        --a.in_state_[static_cast<std::size_t>(State::idle)];
        a.conns_.erase(c.id);
    }
    static void send_mad(Agent& a, std::uint32_t ip, MsgType t, std::span<const std::uint8_t> mad) {
        ++a.counters_.mads_tx;
        ++a.counters_.tx[static_cast<std::size_t>(t)];
        a.sink_.send_mad(ip, kGsiQpn, kGsiQkey, mad);
    }
    // Sends a message on a connection and keeps it for resending.
    template <typename M>
    static void send(Agent& a, Conn& c, MsgType t, std::uint64_t tid, const M& m) {
        c.out = build_mad(tid, m);
        c.out_type = t;
        send_mad(a, c.remote_ip, t, c.out);
    }
    static void resend(Agent& a, Conn& c) { send_mad(a, c.remote_ip, c.out_type, c.out); }
    static Event event(const Conn& c, EventType t) {
        Event e{};
        e.type = t;
        e.id = c.id;
        e.service_id = c.service_id;
        e.local_ip = c.local_ip;
        e.remote_ip = c.remote_ip;
        e.peer = c.peer;
        return e;
    }
    static void emit(Agent& a, const Conn& c, const Event& e) {
        if (!c.released) a.sink_.deliver(e);
    }
    static void enter_timewait(Agent& a, Conn& c, std::uint64_t now) {
        unindex(a.by_qpn_, {c.remote_ip, c.peer.qpn}, c.id);
        arm(a, c, now + a.config_.timewait_ns);
    }
    static std::uint64_t interval(const Conn& c) { return timeout_ns(c.timeout_exp); }

    static RejMsg make_rej(const Agent& a, const Conn& c, std::uint16_t reason,
                           std::span<const std::uint8_t> priv) {
        RejMsg m;
        m.local_comm_id = c.id;
        m.remote_comm_id = c.remote_comm_id;
        switch (c.prev) {
            case State::req_rcvd:
            case State::mra_req_sent:
                m.message_rejected = static_cast<std::uint8_t>(MsgCode::req);
                break;
            case State::rep_rcvd:
            case State::mra_rep_sent:
                m.message_rejected = static_cast<std::uint8_t>(MsgCode::rep);
                break;
            default:
                m.message_rejected = static_cast<std::uint8_t>(MsgCode::other);
        }
        m.reason = reason;
        if (reason == rej_reason::timeout) {  // ARI: the CA GUID of the side that timed out
            m.ari_length = 8;
            for (int i = 0; i < 8; ++i)
                m.ari[i] = static_cast<std::uint8_t>(a.ca_guid_ >> (56 - 8 * i));
        }
        set_private(m.private_data, priv);
        return m;
    }
    static void send_rej(Agent& a, Conn& c, std::uint16_t reason,
                         std::span<const std::uint8_t> priv, std::uint64_t tid) {
        send(a, c, MsgType::rej, tid, make_rej(a, c, reason, priv));
    }
    static void send_mra(Agent& a, Conn& c, MsgCode what) {
        MraMsg m;
        m.local_comm_id = c.id;
        m.remote_comm_id = c.remote_comm_id;
        m.message_mraed = static_cast<std::uint8_t>(what);
        m.service_timeout = a.config_.mra_service_timeout & 31u;
        send(a, c, MsgType::mra, c.tid, m);
    }
    static void send_dreq(Agent& a, Conn& c, std::span<const std::uint8_t> priv,
                          std::uint64_t now) {
        DreqMsg m;
        m.local_comm_id = c.id;
        m.remote_comm_id = c.remote_comm_id;
        m.remote_qpn = c.peer.qpn;
        set_private(m.private_data, priv);
        c.tid = new_tid(a, c);
        c.retries = 0;
        send(a, c, MsgType::dreq, c.tid, m);
        arm(a, c, now + interval(c));
    }
    static void send_drep(Agent& a, Conn& c, std::uint64_t tid) {
        DrepMsg m;
        m.local_comm_id = c.id;
        m.remote_comm_id = c.remote_comm_id;
        send(a, c, MsgType::drep, tid, m);
    }
    static QpInfo peer_of(const ReqMsg& r) {
        QpInfo q;
        q.qpn = r.local_qpn;
        q.psn = r.starting_psn;
        q.responder_resources = r.responder_resources;
        q.initiator_depth = r.initiator_depth;
        q.flow_control = r.end_to_end_flow_control;
        q.retry_count = r.retry_count;
        q.rnr_retry_count = r.rnr_retry_count;
        q.srq = r.srq;
        q.path_mtu = r.path_mtu;
        q.local_ack_timeout = r.primary.local_ack_timeout;
        q.qp_type = qp_type_of_transport(r.transport_service_type);
        q.traffic_class = r.primary.traffic_class;
        q.qkey = r.local_qkey;
        return q;
    }

    // --- the rows' actions ---

    static void none(Agent&, Conn&, const Ctx&) {}

    static void send_req(Agent& a, Conn& c, const Ctx& x) {
        const ConnectParams& p = *x.params;
        ReqMsg m;
        m.local_comm_id = c.id;
        m.service_id = p.service_id;
        m.local_ca_guid = a.ca_guid_;
        m.local_qkey = p.qp.qkey;
        m.local_qpn = p.qp.qpn;
        m.responder_resources = p.qp.responder_resources;
        m.initiator_depth = p.qp.initiator_depth;
        m.remote_cm_response_timeout = p.cm_response_timeout;
        m.transport_service_type = transport_of_qp_type(p.qp.qp_type);
        m.end_to_end_flow_control = p.qp.flow_control;
        m.starting_psn = p.qp.psn;
        m.local_cm_response_timeout = a.config_.local_cm_response_timeout;
        m.retry_count = p.qp.retry_count;
        m.path_mtu = p.qp.path_mtu;
        m.rnr_retry_count = p.qp.rnr_retry_count;
        m.max_cm_retries = p.max_cm_retries;
        m.srq = p.qp.srq;
        m.primary.local_gid = gid_from_ipv4(c.local_ip);
        m.primary.remote_gid = gid_from_ipv4(c.remote_ip);
        m.primary.flow_label = p.flow_label & 0xFFFFF;
        m.primary.traffic_class = p.qp.traffic_class;
        m.primary.hop_limit = 64;
        m.primary.local_ack_timeout = p.qp.local_ack_timeout;
        set_private(m.private_data, p.private_data);
        c.tid = new_tid(a, c);
        send(a, c, MsgType::req, c.tid, m);
        arm(a, c, x.now + interval(c));
    }

    // A new REQ: the connection was created for it; tell the consumer.
    static void deliver_req(Agent& a, Conn& c, const Ctx& x) {
        Event e = event(c, EventType::req_received);
        e.private_data = x.priv;
        emit(a, c, e);
    }

    static void send_mra_req(Agent& a, Conn& c, const Ctx&) {
        ++a.counters_.duplicates;
        send_mra(a, c, MsgCode::req);
    }
    static void send_mra_rep(Agent& a, Conn& c, const Ctx&) {
        ++a.counters_.duplicates;
        send_mra(a, c, MsgCode::rep);
    }
    static void resend_dup(Agent& a, Conn& c, const Ctx&) {
        ++a.counters_.duplicates;
        resend(a, c);
    }
    static void ignore_dup(Agent& a, Conn&, const Ctx&) { ++a.counters_.duplicates; }

    // A duplicate REQ for a connection in TimeWait: the peer's side is stale (Linux does the
    // same).
    static void rej_stale(Agent& a, Conn& c, const Ctx& x) {
        ++a.counters_.stale;
        RejMsg m = make_rej(a, c, rej_reason::stale_connection, {});
        m.message_rejected = static_cast<std::uint8_t>(MsgCode::req);
        send_mad(a, c.remote_ip, MsgType::rej, build_mad(x.tid, m));
    }

    // MRA received: the peer needs longer; wait its service timeout before resending.
    static void mra_wait(Agent& a, Conn& c, const Ctx& x) {
        arm(a, c, x.now + timeout_ns(std::min(x.service_timeout, kMaxServiceTimeout)));
    }

    static void send_rep(Agent& a, Conn& c, const Ctx& x) {
        const QpInfo& q = *x.qp;
        c.local = q;
        RepMsg m;
        m.local_comm_id = c.id;
        m.remote_comm_id = c.remote_comm_id;
        m.local_qkey = q.qkey;
        m.local_qpn = q.qpn;
        m.starting_psn = q.psn;
        m.responder_resources = q.responder_resources;
        m.initiator_depth = q.initiator_depth;
        m.target_ack_delay = q.local_ack_timeout;
        m.end_to_end_flow_control = q.flow_control;
        m.rnr_retry_count = q.rnr_retry_count;
        m.srq = q.srq;
        m.local_ca_guid = a.ca_guid_;
        set_private(m.private_data, x.priv);
        c.retries = 0;
        send(a, c, MsgType::rep, c.tid, m);
        arm(a, c, x.now + interval(c));
        oldest_unconfirmed(a);  // drops the entries of those no longer waiting
        a.unconfirmed_.push_back(c.id);
    }

    // The passive connection that sent its REP longest ago and still waits for the RTU, or
    // nullptr.
    static Conn* oldest_unconfirmed(Agent& a) {
        while (!a.unconfirmed_.empty()) {
            Conn* c = a.find(a.unconfirmed_.front());
            if (c != nullptr && c->state == State::rep_sent) return c;
            a.unconfirmed_.pop_front();
        }
        return nullptr;
    }

    // REP received for our REQ: learn the peer's id and QP, wait for confirm() or reject().
    static void deliver_rep(Agent& a, Conn& c, const Ctx& x) {
        const RepMsg& r = *x.rep;
        disarm(a, c);
        c.remote_comm_id = r.local_comm_id;
        a.by_remote_.emplace(std::pair{c.remote_ip, c.remote_comm_id}, c.id);
        c.peer = c.local;
        c.peer.qpn = r.local_qpn;
        c.peer.psn = r.starting_psn;
        c.peer.responder_resources = r.responder_resources;
        c.peer.initiator_depth = r.initiator_depth;
        c.peer.flow_control = r.end_to_end_flow_control;
        c.peer.rnr_retry_count = r.rnr_retry_count;
        c.peer.srq = r.srq;
        c.peer.local_ack_timeout = r.target_ack_delay;
        c.peer.qkey = r.local_qkey;
        a.by_qpn_.emplace(std::pair{c.remote_ip, c.peer.qpn}, c.id);
        c.tid = x.tid;
        Event e = event(c, EventType::rep_received);
        e.private_data = x.priv;
        emit(a, c, e);
    }

    static void send_rtu(Agent& a, Conn& c, const Ctx& x) {
        RtuMsg m;
        m.local_comm_id = c.id;
        m.remote_comm_id = c.remote_comm_id;
        set_private(m.private_data, x.priv);
        send(a, c, MsgType::rtu, new_tid(a, c), m);
    }

    static void deliver_established(Agent& a, Conn& c, const Ctx& x) {
        disarm(a, c);
        Event e = event(c, EventType::established);
        e.private_data = x.priv;
        emit(a, c, e);
    }
    static void stop_timer(Agent& a, Conn& c, const Ctx&) { disarm(a, c); }

    // The consumer's reject(): REJ with its reason, then TimeWait.
    static void consumer_rej(Agent& a, Conn& c, const Ctx& x) {
        send_rej(a, c, x.reason, x.priv, c.tid);
        enter_timewait(a, c, x.now);
    }

    static void deliver_rejected(Agent& a, Conn& c, const Ctx& x) {
        enter_timewait(a, c, x.now);
        Event e = event(c, EventType::rejected);
        e.reject_reason = x.reason;
        e.private_data = x.priv;
        emit(a, c, e);
    }
    // REJ while our DREQ is out: the peer has forgotten the connection; it is over.
    static void rejected_disconnected(Agent& a, Conn& c, const Ctx& x) {
        enter_timewait(a, c, x.now);
        emit(a, c, event(c, EventType::disconnected));
    }

    static void dreq(Agent& a, Conn& c, const Ctx& x) { send_dreq(a, c, x.priv, x.now); }

    // DREQ received while established: DREP at once, tell the consumer, TimeWait.
    static void answer_dreq(Agent& a, Conn& c, const Ctx& x) {
        send_drep(a, c, x.tid);
        enter_timewait(a, c, x.now);
        Event e = event(c, EventType::dreq_received);
        e.private_data = x.priv;
        emit(a, c, e);
    }
    // DREQ while our REP waits for its RTU: the peer is established (the RTU was lost).
    static void answer_dreq_before_rtu(Agent& a, Conn& c, const Ctx& x) {
        send_drep(a, c, x.tid);
        enter_timewait(a, c, x.now);
        const Event est = event(c, EventType::established);
        Event e = event(c, EventType::dreq_received);
        e.private_data = x.priv;
        emit(a, c, est);
        // The consumer may have released the id in its handler; look it up again.
        Conn* still = a.find(e.id);
        if (still != nullptr) emit(a, *still, e);
    }
    // Both sides sent DREQ: answer theirs, and ours is done too.
    static void answer_dreq_simultaneous(Agent& a, Conn& c, const Ctx& x) {
        send_drep(a, c, x.tid);
        enter_timewait(a, c, x.now);
        emit(a, c, event(c, EventType::disconnected));
    }
    static void resend_drep(Agent& a, Conn& c, const Ctx& x) {
        ++a.counters_.duplicates;
        send_drep(a, c, x.tid);
    }

    static void deliver_disconnected(Agent& a, Conn& c, const Ctx& x) {
        enter_timewait(a, c, x.now);
        Event e = event(c, EventType::disconnected);
        e.private_data = x.priv;
        emit(a, c, e);
    }

    // LAP: snic has no alternate paths; APR "unsupported" (status 2), state unchanged.
    static void apr_unsupported(Agent& a, Conn& c, const Ctx& x) {
        AprMsg m;
        m.local_comm_id = c.id;
        m.remote_comm_id = c.remote_comm_id;
        m.ap_status = apr_status::unsupported;
        send_mad(a, c.remote_ip, MsgType::apr, build_mad(x.tid, m));
    }

    static void retransmit(Agent& a, Conn& c, const Ctx& x) {
        ++a.counters_.retransmits;
        ++c.retries;
        resend(a, c);
        arm(a, c, x.now + interval(c));
    }
    // REQ or REP unanswered after every retry: REJ timeout to the peer, unreachable.
    static void give_up(Agent& a, Conn& c, const Ctx& x) {
        send_rej(a, c, rej_reason::timeout, {}, new_tid(a, c));
        enter_timewait(a, c, x.now);
        emit(a, c, event(c, EventType::unreachable));
    }
    static void give_up_dreq(Agent& a, Conn& c, const Ctx& x) {
        enter_timewait(a, c, x.now);
        emit(a, c, event(c, EventType::disconnected));
    }
    static void leave_timewait(Agent& a, Conn& c, const Ctx&) {
        const Event e = event(c, EventType::timewait_exit);
        const bool released = c.released;
        erase(a, c);
        if (!released) a.sink_.deliver(e);
    }

    // release() rows: the consumer is gone; answer the peer so that it does not wait.
    static void release_rej_consumer(Agent& a, Conn& c, const Ctx& x) {
        send_rej(a, c, rej_reason::consumer_reject, {}, c.tid);
        enter_timewait(a, c, x.now);
    }
    static void release_rej_timeout(Agent& a, Conn& c, const Ctx& x) {
        send_rej(a, c, rej_reason::timeout, {}, new_tid(a, c));
        enter_timewait(a, c, x.now);
    }
    static void release_sidr(Agent& a, Conn& c, const Ctx&) { erase(a, c); }
    static void forget(Agent& a, Conn& c, const Ctx&) { erase(a, c); }
    static void release_sidr_rcvd(Agent& a, Conn& c, const Ctx& x) {
        Ctx y = x;
        y.sidr_status = sidr_status::rejected;
        y.priv = {};
        reply_sidr(a, c, y);
    }

    // SIDR.
    static void send_sidr_req(Agent& a, Conn& c, const Ctx& x) {
        SidrReqMsg m;
        m.request_id = c.id;
        m.service_id = c.service_id;
        set_private(m.private_data, x.priv);
        c.tid = new_tid(a, c);
        send(a, c, MsgType::sidr_req, c.tid, m);
        arm(a, c, x.now + interval(c));
    }
    static void deliver_sidr_req(Agent& a, Conn& c, const Ctx& x) {
        Event e = event(c, EventType::sidr_req_received);
        e.private_data = x.priv;
        emit(a, c, e);
    }
    static void deliver_sidr_rep(Agent& a, Conn& c, const Ctx& x) {
        const SidrRepMsg& r = *x.sidr_rep;
        Event e = event(c, EventType::sidr_rep_received);
        e.peer.qpn = r.qpn;
        e.peer.qkey = r.qkey;
        e.peer.qp_type = 4;  // UD
        e.sidr_status = r.status;
        e.private_data = x.priv;
        const bool released = c.released;
        erase(a, c);
        if (!released) a.sink_.deliver(e);
    }
    static void sidr_unreachable(Agent& a, Conn& c, const Ctx&) {
        const Event e = event(c, EventType::unreachable);
        const bool released = c.released;
        erase(a, c);
        if (!released) a.sink_.deliver(e);
    }
    static void reply_sidr(Agent& a, Conn& c, const Ctx& x) {
        SidrRepMsg m;
        m.request_id = c.remote_comm_id;
        m.status = x.sidr_status;
        m.service_id = c.service_id;
        if (x.qp != nullptr) {
            m.qpn = x.qp->qpn;
            m.qkey = x.qp->qkey;
        }
        set_private(m.private_data, x.priv);
        send_mad(a, c.remote_ip, MsgType::sidr_rep, build_mad(c.tid, m));
        erase(a, c);
    }

    // --- the table ---

    using Fn = void (*)(Agent&, Conn&, const Ctx&);
    struct Row {
        State from;
        Input in;
        Fn fn;
        State next;
    };

    static bool dispatch(Agent& a, Conn& c, Input in, const Ctx& x);
};

namespace {

using A = Actions;
using S = State;
using I = Input;

// The connection state machine (IBA vol 1 §12.9.6 and §12.9.7, the REQ/REP/RTU, REJ, MRA,
// DREQ/DREP and LAP/APR rules): one row per (state, input) that means something. A received
// message whose (state, input) has no row is dropped and counted (RxDrop::wrong_state); a
// consumer call without a row fails with EINVAL.
constexpr A::Row kTransitions[] = {
    // Active side: REQ out, REP back, RTU out.
    {S::idle, I::connect, A::send_req, S::req_sent},
    {S::req_sent, I::rx_mra_req, A::mra_wait, S::mra_req_rcvd},
    {S::mra_req_rcvd, I::rx_mra_req, A::mra_wait, S::mra_req_rcvd},
    {S::req_sent, I::rx_rep, A::deliver_rep, S::rep_rcvd},
    {S::mra_req_rcvd, I::rx_rep, A::deliver_rep, S::rep_rcvd},
    {S::req_sent, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::mra_req_rcvd, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::req_sent, I::timer_retry, A::retransmit, S::req_sent},
    {S::mra_req_rcvd, I::timer_retry, A::retransmit, S::req_sent},
    {S::req_sent, I::timer_expired, A::give_up, S::timewait},
    {S::mra_req_rcvd, I::timer_expired, A::give_up, S::timewait},
    {S::req_sent, I::release, A::release_rej_timeout, S::timewait},
    {S::mra_req_rcvd, I::release, A::release_rej_timeout, S::timewait},
    {S::rep_rcvd, I::confirm, A::send_rtu, S::established},
    {S::mra_rep_sent, I::confirm, A::send_rtu, S::established},
    {S::rep_rcvd, I::reject, A::consumer_rej, S::timewait},
    {S::mra_rep_sent, I::reject, A::consumer_rej, S::timewait},
    {S::rep_rcvd, I::rx_rep, A::send_mra_rep, S::mra_rep_sent},
    {S::mra_rep_sent, I::rx_rep, A::resend_dup, S::mra_rep_sent},
    {S::rep_rcvd, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::mra_rep_sent, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::rep_rcvd, I::release, A::release_rej_consumer, S::timewait},
    {S::mra_rep_sent, I::release, A::release_rej_consumer, S::timewait},

    // Passive side: REQ in, REP out, RTU back.
    {S::idle, I::rx_req, A::deliver_req, S::req_rcvd},
    {S::req_rcvd, I::rx_req_dup, A::send_mra_req, S::mra_req_sent},
    {S::mra_req_sent, I::rx_req_dup, A::resend_dup, S::mra_req_sent},
    {S::req_rcvd, I::accept, A::send_rep, S::rep_sent},
    {S::mra_req_sent, I::accept, A::send_rep, S::rep_sent},
    {S::req_rcvd, I::reject, A::consumer_rej, S::timewait},
    {S::mra_req_sent, I::reject, A::consumer_rej, S::timewait},
    {S::req_rcvd, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::mra_req_sent, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::req_rcvd, I::release, A::release_rej_consumer, S::timewait},
    {S::mra_req_sent, I::release, A::release_rej_consumer, S::timewait},
    {S::req_rcvd, I::discard, A::forget, S::idle},
    {S::mra_req_sent, I::discard, A::forget, S::idle},
    {S::rep_sent, I::rx_req_dup, A::resend_dup, S::rep_sent},
    {S::mra_rep_rcvd, I::rx_req_dup, A::resend_dup, S::mra_rep_rcvd},
    {S::rep_sent, I::rx_mra_rep, A::mra_wait, S::mra_rep_rcvd},
    {S::mra_rep_rcvd, I::rx_mra_rep, A::mra_wait, S::mra_rep_rcvd},
    {S::rep_sent, I::rx_rtu, A::deliver_established, S::established},
    {S::mra_rep_rcvd, I::rx_rtu, A::deliver_established, S::established},
    {S::rep_sent, I::established, A::stop_timer, S::established},
    {S::mra_rep_rcvd, I::established, A::stop_timer, S::established},
    {S::rep_sent, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::mra_rep_rcvd, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::rep_sent, I::rx_dreq, A::answer_dreq_before_rtu, S::timewait},
    {S::mra_rep_rcvd, I::rx_dreq, A::answer_dreq_before_rtu, S::timewait},
    {S::rep_sent, I::timer_retry, A::retransmit, S::rep_sent},
    {S::mra_rep_rcvd, I::timer_retry, A::retransmit, S::rep_sent},
    {S::rep_sent, I::timer_expired, A::give_up, S::timewait},
    {S::mra_rep_rcvd, I::timer_expired, A::give_up, S::timewait},
    {S::rep_sent, I::release, A::release_rej_timeout, S::timewait},
    {S::mra_rep_rcvd, I::release, A::release_rej_timeout, S::timewait},

    // Established, and the way out.
    {S::established, I::rx_req_dup, A::ignore_dup, S::established},
    {S::established, I::rx_rep, A::resend_dup, S::established},  // our RTU was lost
    {S::established, I::rx_rtu, A::ignore_dup, S::established},
    {S::established, I::established, A::none, S::established},
    {S::established, I::disconnect, A::dreq, S::dreq_sent},
    {S::established, I::release, A::dreq, S::dreq_sent},
    {S::established, I::stale, A::dreq, S::dreq_sent},
    {S::established, I::rx_dreq, A::answer_dreq, S::timewait},
    {S::established, I::rx_rej, A::deliver_rejected, S::timewait},
    {S::established, I::rx_lap, A::apr_unsupported, S::established},
    {S::dreq_sent, I::rx_drep, A::deliver_disconnected, S::timewait},
    {S::dreq_sent, I::rx_dreq, A::answer_dreq_simultaneous, S::timewait},
    {S::dreq_sent, I::rx_rej, A::rejected_disconnected, S::timewait},
    {S::dreq_sent, I::timer_retry, A::retransmit, S::dreq_sent},
    {S::dreq_sent, I::timer_expired, A::give_up_dreq, S::timewait},
    {S::dreq_sent, I::disconnect, A::none, S::dreq_sent},
    {S::dreq_sent, I::release, A::none, S::dreq_sent},
    {S::dreq_sent, I::rx_req_dup, A::ignore_dup, S::dreq_sent},
    {S::dreq_sent, I::rx_rep, A::ignore_dup, S::dreq_sent},
    {S::timewait, I::rx_dreq, A::resend_drep, S::timewait},
    {S::timewait, I::rx_req_dup, A::rej_stale, S::timewait},
    {S::timewait, I::rx_rep, A::ignore_dup, S::timewait},
    {S::timewait, I::rx_rtu, A::ignore_dup, S::timewait},
    {S::timewait, I::rx_drep, A::ignore_dup, S::timewait},
    {S::timewait, I::rx_rej, A::ignore_dup, S::timewait},
    {S::timewait, I::disconnect, A::none, S::timewait},
    {S::timewait, I::release, A::none, S::timewait},
    {S::timewait, I::timer_expired, A::leave_timewait, S::idle},

    // SIDR: one request, one reply, no connection.
    {S::idle, I::sidr_request, A::send_sidr_req, S::sidr_req_sent},
    {S::sidr_req_sent, I::rx_sidr_rep, A::deliver_sidr_rep, S::idle},
    {S::sidr_req_sent, I::timer_retry, A::retransmit, S::sidr_req_sent},
    {S::sidr_req_sent, I::timer_expired, A::sidr_unreachable, S::idle},
    {S::sidr_req_sent, I::release, A::release_sidr, S::idle},
    {S::idle, I::rx_sidr_req, A::deliver_sidr_req, S::sidr_req_rcvd},
    {S::sidr_req_rcvd, I::sidr_reply, A::reply_sidr, S::idle},
    {S::sidr_req_rcvd, I::release, A::release_sidr_rcvd, S::idle},
};

struct Cell {
    A::Fn fn = nullptr;
    State next = State::idle;
};
using Table = std::array<std::array<Cell, kInputs>, kStates>;

// The rows as a (state, input) matrix; two rows for one cell do not compile.
consteval Table make_table() {
    Table t{};
    for (const A::Row& r : kTransitions) {
        Cell& c = t[static_cast<std::size_t>(r.from)][static_cast<std::size_t>(r.in)];
        if (c.fn != nullptr) throw "two rows for one (state, input)";
        c = Cell{r.fn, r.next};
    }
    return t;
}
constexpr Table kTable = make_table();

}  // namespace

bool Actions::dispatch(Agent& a, Conn& c, Input in, const Ctx& x) {
    const Cell& cell = kTable[static_cast<std::size_t>(c.state)][static_cast<std::size_t>(in)];
    if (cell.fn == nullptr) return false;
    c.prev = c.state;
    set_state(a, c, cell.next);
    cell.fn(a, c, x);
    return true;
}

// ---------------------------------------------------------------------------------------
// Receiving: parse, match the message to a connection, feed the table.

struct Receivers {
    using Conn = Agent::Conn;

    struct Rx {
        std::uint32_t src_ip;
        std::uint64_t tid;
        ConstMadData data;
        std::uint64_t now;
    };

    static void drop(Agent& a, RxDrop why) {
        ++a.counters_.mads_bad;
        ++a.counters_.drops[static_cast<std::size_t>(why)];
    }

    // The connection a message names: ours by `our_id`, with the address it was made with,
    // and with the peer's ID it recorded, exactly: a 0 is no wildcard (Linux's
    // cm_acquire_id). `early`: a message that may come before the peer's ID is known to us
    // (a REP, an MRA, a REJ: the peer's answer to our REQ, or its REJ of a REP that never
    // reached us), which matches while we know none; our own ID is the secret it must name.
    static Conn* match(Agent& a, const Rx& rx, std::uint32_t our_id, std::uint32_t their_id,
                       bool early = false) {
        Conn* c = a.find(our_id);
        if (c == nullptr || c->remote_ip != rx.src_ip) return nullptr;
        if (c->remote_comm_id == their_id || (early && c->remote_comm_id == 0)) return c;
        return nullptr;
    }

    static void feed(Agent& a, Conn* c, Input in, const Ctx& x) {
        if (c == nullptr) return drop(a, RxDrop::unknown_conn);
        if (!Actions::dispatch(a, *c, in, x)) drop(a, RxDrop::wrong_state);
    }

    template <typename M>
    static std::optional<M> decode_or_drop(Agent& a, const Rx& rx) {
        auto m = decode<M>(rx.data);
        if (!m) drop(a, RxDrop::bad_message);
        return m;
    }

    static void reject_unknown_req(Agent& a, const Rx& rx, const ReqMsg& r, std::uint16_t why) {
        RejMsg m;
        m.remote_comm_id = r.local_comm_id;
        m.message_rejected = static_cast<std::uint8_t>(MsgCode::req);
        m.reason = why;
        Actions::send_mad(a, rx.src_ip, MsgType::rej, build_mad(rx.tid, m));
    }

    static void on_req(Agent& a, const Rx& rx) {
        auto r = decode_or_drop<ReqMsg>(a, rx);
        if (!r) return;
        Ctx x{.now = rx.now, .tid = rx.tid, .priv = r->private_data, .req = &*r};
        if (auto it = a.by_remote_.find({rx.src_ip, r->local_comm_id}); it != a.by_remote_.end())
            return feed(a, a.find(it->second), Input::rx_req_dup, x);
        if (r->local_comm_id == 0) return drop(a, RxDrop::bad_message);
        // IBA §12.9.8.3.1: a REQ from a QP that a live connection of ours is bound to means
        // that connection is stale: reject the REQ, disconnect the old one.
        if (auto it = a.by_qpn_.find({rx.src_ip, r->local_qpn}); it != a.by_qpn_.end()) {
            ++a.counters_.stale;
            reject_unknown_req(a, rx, *r, rej_reason::stale_connection);
            if (Conn* old = a.find(it->second)) Actions::dispatch(a, *old, Input::stale, x);
            return;
        }
        if (a.half_open_ >= a.config_.max_half_open) {
            // Full: the oldest connection still waiting for its RTU gives way (a peer's RTU
            // comes within a round trip; a spoofed REQ's never does), as a SYN queue under a
            // flood drops its oldest entries.
            if (Conn* old = Actions::oldest_unconfirmed(a)) {
                ++a.counters_.half_open_evicted;
                Actions::dispatch(a, *old, Input::timer_expired, x);
            }
        }
        if (a.half_open_ >= a.config_.max_half_open) {
            ++a.counters_.half_open_refused;
            return reject_unknown_req(a, rx, *r, rej_reason::no_resources);
        }
        Conn& c = Actions::create(a, false);
        c.remote_ip = rx.src_ip;
        c.local_ip = ipv4_from_gid(r->primary.remote_gid).value_or(a.config_.local_ip);
        c.service_id = r->service_id;
        c.remote_comm_id = r->local_comm_id;
        c.tid = rx.tid;
        c.peer = Actions::peer_of(*r);
        c.timeout_exp = response_timeout(r->local_cm_response_timeout);
        c.max_retries = r->max_cm_retries;
        a.by_remote_.emplace(std::pair{c.remote_ip, c.remote_comm_id}, c.id);
        a.by_qpn_.emplace(std::pair{c.remote_ip, c.peer.qpn}, c.id);
        Actions::dispatch(a, c, Input::rx_req, x);
    }

    static void on_mra(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<MraMsg>(a, rx);
        if (!m) return;
        Ctx x{.now = rx.now, .tid = rx.tid, .service_timeout = m->service_timeout};
        Conn* c = match(a, rx, m->remote_comm_id, m->local_comm_id, true);
        switch (static_cast<MsgCode>(m->message_mraed)) {
            case MsgCode::req:
                return feed(a, c, Input::rx_mra_req, x);
            case MsgCode::rep:
                return feed(a, c, Input::rx_mra_rep, x);
            default:  // an MRA for a LAP: we never send LAP
                return drop(a, c == nullptr ? RxDrop::unknown_conn : RxDrop::wrong_state);
        }
    }

    static void on_rej(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<RejMsg>(a, rx);
        if (!m) return;
        Conn* c = nullptr;
        if (m->remote_comm_id != 0) {
            c = match(a, rx, m->remote_comm_id, m->local_comm_id, true);
        } else if (auto it = a.by_remote_.find({rx.src_ip, m->local_comm_id});
                   m->reason == rej_reason::timeout && it != a.by_remote_.end()) {
            // The one REJ that cannot name our ID: the requester gave up waiting for our REP
            // (Linux looks it up by the requester's ID for a timeout alone).
            c = a.find(it->second);
        }
        Ctx x{.now = rx.now, .tid = rx.tid, .priv = m->private_data, .reason = m->reason};
        feed(a, c, Input::rx_rej, x);
    }

    static void on_rep(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<RepMsg>(a, rx);
        if (!m) return;
        Conn* c = match(a, rx, m->remote_comm_id, m->local_comm_id, true);
        if (c != nullptr && !c->active) c = nullptr;
        Ctx x{.now = rx.now, .tid = rx.tid, .priv = m->private_data, .rep = &*m};
        feed(a, c, Input::rx_rep, x);
    }

    static void on_rtu(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<RtuMsg>(a, rx);
        if (!m) return;
        Conn* c = match(a, rx, m->remote_comm_id, m->local_comm_id);
        if (c != nullptr && c->active) c = nullptr;
        feed(a, c, Input::rx_rtu, Ctx{.now = rx.now, .tid = rx.tid, .priv = m->private_data});
    }

    static void on_dreq(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<DreqMsg>(a, rx);
        if (!m) return;
        Conn* c = match(a, rx, m->remote_comm_id, m->local_comm_id);
        if (c == nullptr) {
            // A DREQ for a connection we do not know (forgotten, or never ours) is answered
            // all the same, as Linux's cm_issue_drep does, so that the peer stops resending.
            ++a.counters_.duplicates;
            DrepMsg r;
            r.local_comm_id = m->remote_comm_id;
            r.remote_comm_id = m->local_comm_id;
            return Actions::send_mad(a, rx.src_ip, MsgType::drep, build_mad(rx.tid, r));
        }
        // Linux's cm_dreq_handler: the DREQ must name our QP.
        if (m->remote_qpn != c->local.qpn) return drop(a, RxDrop::unknown_conn);
        feed(a, c, Input::rx_dreq, Ctx{.now = rx.now, .tid = rx.tid, .priv = m->private_data});
    }

    static void on_drep(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<DrepMsg>(a, rx);
        if (!m) return;
        Conn* c = match(a, rx, m->remote_comm_id, m->local_comm_id);
        feed(a, c, Input::rx_drep, Ctx{.now = rx.now, .tid = rx.tid, .priv = m->private_data});
    }

    static void on_lap(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<LapMsg>(a, rx);
        if (!m) return;
        Conn* c = match(a, rx, m->remote_comm_id, m->local_comm_id);
        feed(a, c, Input::rx_lap, Ctx{.now = rx.now, .tid = rx.tid});
    }

    // We never send LAP, so an APR answers nothing of ours.
    static void on_apr(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<AprMsg>(a, rx);
        if (!m) return;
        drop(a, match(a, rx, m->remote_comm_id, m->local_comm_id) ? RxDrop::wrong_state
                                                                  : RxDrop::unknown_conn);
    }

    static void on_sidr_req(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<SidrReqMsg>(a, rx);
        if (!m) return;
        if (a.by_sidr_.contains({rx.src_ip, m->request_id})) {  // still being answered
            ++a.counters_.duplicates;
            return;
        }
        Conn& c = Actions::create(a, false);
        c.remote_ip = rx.src_ip;
        c.local_ip = a.config_.local_ip;
        c.service_id = m->service_id;
        c.remote_comm_id = m->request_id;
        c.tid = rx.tid;
        a.by_sidr_.emplace(std::pair{c.remote_ip, c.remote_comm_id}, c.id);
        Actions::dispatch(a, c, Input::rx_sidr_req,
                          Ctx{.now = rx.now, .tid = rx.tid, .priv = m->private_data});
    }

    static void on_sidr_rep(Agent& a, const Rx& rx) {
        auto m = decode_or_drop<SidrRepMsg>(a, rx);
        if (!m) return;
        Conn* c = a.find(m->request_id);
        if (c != nullptr && (c->remote_ip != rx.src_ip || !c->active)) c = nullptr;
        feed(a, c, Input::rx_sidr_rep,
             Ctx{.now = rx.now, .tid = rx.tid, .priv = m->private_data, .sidr_rep = &*m});
    }

    using Handler = void (*)(Agent&, const Rx&);
    struct Route {
        AttrId attr;
        MsgType type;
        Handler fn;
    };
};

namespace {

using R = Receivers;
// Attribute ID -> message type and handler.
constexpr R::Route kRoutes[] = {
    {AttrId::req, MsgType::req, R::on_req},
    {AttrId::mra, MsgType::mra, R::on_mra},
    {AttrId::rej, MsgType::rej, R::on_rej},
    {AttrId::rep, MsgType::rep, R::on_rep},
    {AttrId::rtu, MsgType::rtu, R::on_rtu},
    {AttrId::dreq, MsgType::dreq, R::on_dreq},
    {AttrId::drep, MsgType::drep, R::on_drep},
    {AttrId::sidr_req, MsgType::sidr_req, R::on_sidr_req},
    {AttrId::sidr_rep, MsgType::sidr_rep, R::on_sidr_rep},
    {AttrId::lap, MsgType::lap, R::on_lap},
    {AttrId::apr, MsgType::apr, R::on_apr},
};

}  // namespace

// ---------------------------------------------------------------------------------------
// The consumer's side.

Agent::Agent(Sink& sink, AgentConfig config)
    : sink_(sink),
      config_(config),
      ca_guid_(config.ca_guid != 0 ? config.ca_guid
                                   : (std::uint64_t{0x02} << 56) | config.local_ip),
      id_seq_(0) {}

Agent::~Agent() = default;

Agent::Conn* Agent::find(ConnId id) {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
}
const Agent::Conn* Agent::find(ConnId id) const {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
}

namespace {

Status refuse(int code, std::string what) {
    return make_error(code, std::move(what));
}

Status call(Agent& a, Agent::Conn* c, ConnId id, Input in, const Ctx& x, const char* op) {
    if (c == nullptr)
        return refuse(ENOENT, std::string(op) + ": no connection " + std::to_string(id));
    if (!Actions::dispatch(a, *c, in, x))
        return refuse(EINVAL, std::string(op) + ": connection " + std::to_string(id) + " is " +
                                  std::string(state_name(c->state)));
    return Ok{};
}

}  // namespace

Result<ConnId> Agent::connect(const ConnectParams& p, std::uint64_t now) {
    if (p.private_data.size() > kReqPrivate)
        return make_error(EINVAL, "connect: private data over 92 bytes");
    if (p.qp.qp_type != 2 && p.qp.qp_type != 3)
        return make_error(EINVAL, "connect: only RC and UC QPs connect");
    if (p.remote_ip == 0 || p.qp.qpn > 0xFFFFFF || p.qp.psn > 0xFFFFFF ||
        p.cm_response_timeout > 31 || p.max_cm_retries > 15)
        return make_error(EINVAL, "connect: a parameter is out of its field's range");
    if (half_open_ >= config_.max_half_open) {
        ++counters_.half_open_refused;
        return make_error(EAGAIN, "connect: too many half-open connections");
    }
    Conn& c = Actions::create(*this, true);
    c.local_ip = p.local_ip != 0 ? p.local_ip : config_.local_ip;
    c.remote_ip = p.remote_ip;
    c.service_id = p.service_id;
    c.local = p.qp;
    c.timeout_exp = response_timeout(p.cm_response_timeout);
    c.max_retries = p.max_cm_retries;
    Actions::dispatch(*this, c, Input::connect, Ctx{.now = now, .params = &p});
    return c.id;
}

Status Agent::accept(ConnId id, const QpInfo& qp, std::span<const std::uint8_t> private_data,
                     std::uint64_t now) {
    if (private_data.size() > kRepPrivate)
        return make_error(EINVAL, "accept: private data over 196 bytes");
    return call(*this, find(id), id, Input::accept,
                Ctx{.now = now, .priv = private_data, .qp = &qp}, "accept");
}

Status Agent::confirm(ConnId id, std::span<const std::uint8_t> private_data, std::uint64_t now) {
    if (private_data.size() > kRtuPrivate)
        return make_error(EINVAL, "confirm: private data over 224 bytes");
    return call(*this, find(id), id, Input::confirm, Ctx{.now = now, .priv = private_data},
                "confirm");
}

Status Agent::reject(ConnId id, std::uint16_t reason, std::span<const std::uint8_t> private_data,
                     std::uint64_t now) {
    if (private_data.size() > kRejPrivate)
        return make_error(EINVAL, "reject: private data over 148 bytes");
    return call(*this, find(id), id, Input::reject,
                Ctx{.now = now, .priv = private_data, .reason = reason}, "reject");
}

Status Agent::disconnect(ConnId id, std::span<const std::uint8_t> private_data, std::uint64_t now) {
    if (private_data.size() > kDreqPrivate)
        return make_error(EINVAL, "disconnect: private data over 220 bytes");
    return call(*this, find(id), id, Input::disconnect, Ctx{.now = now, .priv = private_data},
                "disconnect");
}

void Agent::established(ConnId id, std::uint64_t now) {
    if (Conn* c = find(id)) Actions::dispatch(*this, *c, Input::established, Ctx{.now = now});
}

Status Agent::discard(ConnId id, std::uint64_t now) {
    return call(*this, find(id), id, Input::discard, Ctx{.now = now}, "discard");
}

void Agent::release(ConnId id, std::uint64_t now) {
    Conn* c = find(id);
    if (c == nullptr) return;
    c->released = true;
    Actions::dispatch(*this, *c, Input::release, Ctx{.now = now});
}

Result<ConnId> Agent::sidr_request(std::uint32_t local_ip, std::uint32_t remote_ip,
                                   std::uint64_t service_id,
                                   std::span<const std::uint8_t> private_data, std::uint8_t timeout,
                                   std::uint8_t retries, std::uint64_t now) {
    if (private_data.size() > kSidrReqPrivate)
        return make_error(EINVAL, "sidr_request: private data over 216 bytes");
    if (remote_ip == 0 || timeout > 31)
        return make_error(EINVAL, "sidr_request: a parameter is out of its field's range");
    Conn& c = Actions::create(*this, true);
    c.local_ip = local_ip != 0 ? local_ip : config_.local_ip;
    c.remote_ip = remote_ip;
    c.service_id = service_id;
    c.timeout_exp = response_timeout(timeout);
    c.max_retries = retries;
    Actions::dispatch(*this, c, Input::sidr_request, Ctx{.now = now, .priv = private_data});
    return c.id;
}

Status Agent::sidr_reply(ConnId id, std::uint8_t status, std::uint32_t qpn, std::uint32_t qkey,
                         std::span<const std::uint8_t> private_data, std::uint64_t now) {
    if (private_data.size() > kSidrRepPrivate)
        return make_error(EINVAL, "sidr_reply: private data over 136 bytes");
    QpInfo qp;
    qp.qpn = qpn;
    qp.qkey = qkey;
    return call(*this, find(id), id, Input::sidr_reply,
                Ctx{.now = now, .priv = private_data, .qp = &qp, .sidr_status = status},
                "sidr_reply");
}

void Agent::receive(std::uint32_t src_ip, std::uint32_t src_qpn, std::span<const std::uint8_t> mad,
                    std::uint64_t now) {
    (void)src_qpn;  // answers always go to the peer's GSI QP
    ++counters_.mads_rx;
    MadView v;
    if (parse_mad(mad, v) != MadDrop::ok) return Receivers::drop(*this, RxDrop::bad_mad);
    for (const R::Route& r : kRoutes) {
        if (static_cast<std::uint16_t>(r.attr) != v.hdr.attr_id) continue;
        ++counters_.rx[static_cast<std::size_t>(r.type)];
        const R::Rx rx{src_ip, v.hdr.tid, ConstMadData(v.data.data(), kMadDataSize), now};
        return r.fn(*this, rx);
    }
    Receivers::drop(*this, RxDrop::bad_attribute);
}

void Agent::poll(std::uint64_t now) {
    // One due timer at a time: an action may arm, disarm or erase others.
    while (!timers_.empty() && timers_.begin()->first <= now) {
        const ConnId id = timers_.begin()->second;
        Conn* c = find(id);
        if (c == nullptr) {  // cannot happen: erase() disarms; keep the loop finite anyway
            timers_.erase(timers_.begin());
            continue;
        }
        Actions::disarm(*this, *c);
        const bool retry = c->state != State::timewait && c->retries < c->max_retries;
        Actions::dispatch(*this, *c, retry ? Input::timer_retry : Input::timer_expired,
                          Ctx{.now = now});
    }
}

std::uint64_t Agent::next_deadline() const {
    return timers_.empty() ? kNever : timers_.begin()->first;
}

void Agent::for_each_state(const std::function<void(std::string_view, std::size_t)>& fn) const {
    for (std::size_t i = 0; i < kStates; ++i) fn(kStateNames[i], in_state_[i]);
}

std::size_t Agent::count_in_state(State s) const {
    auto i = static_cast<std::size_t>(s);
    return i < kStates ? in_state_[i] : 0;
}

State Agent::state_of(ConnId id) const {
    const Conn* c = find(id);
    return c == nullptr ? State::idle : c->state;
}

std::optional<std::uint32_t> Agent::peer_comm_id(ConnId id) const {
    const Conn* c = find(id);
    if (c == nullptr || c->remote_comm_id == 0) return std::nullopt;
    return c->remote_comm_id;
}

}  // namespace snic::cm
