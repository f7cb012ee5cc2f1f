// The TCP of one port: connection and listener tables, the bounds, SYN cookies, RSTs for
// closed ports, ICMP errors, and the events of the engines to their owners. No syscalls,
// locks or logs; memory is taken when a connection or listener is made, never per segment.
#include "daemon/iwarp/tcp_stack.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "proto/net/ipv4.h"
#include "proto/tcp/isn.h"

namespace snic::daemon {

namespace {

constexpr std::uint32_t kIndexBits = 16;
constexpr std::uint32_t kListenerBit = 1u << 31;
constexpr std::uint32_t kMaxSlots = 1u << kIndexBits;

TcpHandle make_handle(std::uint32_t index, std::uint16_t gen, bool listener) {
    return TcpHandle{(listener ? kListenerBit : 0) | (std::uint32_t{gen} << kIndexBits) | index};
}
std::uint32_t handle_index(TcpHandle h) {
    return h.value & (kMaxSlots - 1);
}
// Generations run 1..0x7fff (15 bits beside the listener bit), so no handle is 0.
std::uint16_t next_gen(std::uint16_t g) {
    return g >= 0x7fff ? 1 : static_cast<std::uint16_t>(g + 1);
}

tcp::Endpoint endpoint(net::Ipv4Addr ip, std::uint16_t port) {
    return tcp::Endpoint{tcp::IpAddr::v4(ip), port};
}

std::uint64_t seed_of(const tcp::IsnKey& k) {
    std::uint64_t s = 0;
    std::memcpy(&s, k.data(), sizeof s);
    return s | 1;
}

TcpStreamEventKind stream_kind(tcp::EventKind k) {
    switch (k) {
        case tcp::EventKind::connected:
            return TcpStreamEventKind::connected;
        case tcp::EventKind::readable:
            return TcpStreamEventKind::readable;
        case tcp::EventKind::recv_done:
            return TcpStreamEventKind::recv_done;
        case tcp::EventKind::send_space:
            return TcpStreamEventKind::send_space;
        case tcp::EventKind::peer_closed:
            return TcpStreamEventKind::peer_closed;
        case tcp::EventKind::closed:
            return TcpStreamEventKind::closed;
        case tcp::EventKind::reset:
            return TcpStreamEventKind::reset;
        case tcp::EventKind::timed_out:
            return TcpStreamEventKind::timed_out;
    }
    return TcpStreamEventKind::closed;
}

}  // namespace

const char* tcp_stack_config_error(const TcpStackConfig& c) {
    if (c.max_connections == 0 || c.max_connections >= kMaxSlots) return "max_connections";
    if (c.max_listeners == 0 || c.max_listeners >= kMaxSlots) return "max_listeners";
    if (c.syn_backlog == 0 || c.max_per_peer == 0 || c.max_listen_backlog == 0) return "bounds";
    if (c.listener_syn_backlog == 0 || c.listener_syn_backlog > c.syn_backlog)
        return "listener_syn_backlog";
    if (c.syn_cookie_slot_ns == 0) return "syn_cookie_slot_ns";
    if (c.ephemeral_first == 0 || c.ephemeral_first > c.ephemeral_last) return "ephemeral ports";
    tcp::TcpConfig probe = c.conn;
    probe.local = endpoint(c.local_ip, 1);
    probe.remote = endpoint(c.local_ip, 2);
    return tcp::tcp_config_error(probe);
}

// ---- Index ------------------------------------------------------------------------------------

TcpStack::Index::Index(std::uint32_t entries, std::uint64_t seed) : seed_(seed) {
    std::uint32_t cap = 16;
    while (cap < 2 * entries) cap *= 2;
    slots_.resize(cap);
    mask_ = cap - 1;
}

std::uint32_t TcpStack::Index::home(std::uint64_t key) const {
    const std::uint64_t h = (key ^ seed_) * 0x9e3779b97f4a7c15ull;
    return static_cast<std::uint32_t>(h >> 32) & mask_;
}

std::uint32_t* TcpStack::Index::find(std::uint64_t key) {
    for (std::uint32_t i = home(key);; i = (i + 1) & mask_) {
        Slot& s = slots_[i];
        if (!s.used) return nullptr;
        if (s.key == key) return &s.value;
    }
}

bool TcpStack::Index::insert(std::uint64_t key, std::uint32_t value) {
    if (size_ + 1 > (mask_ + 1) / 2) return false;  // never more than half full
    std::uint32_t i = home(key);
    while (slots_[i].used) i = (i + 1) & mask_;
    slots_[i] = Slot{key, value, true};
    ++size_;
    return true;
}

void TcpStack::Index::erase(std::uint64_t key) {
    std::uint32_t i = home(key);
    while (slots_[i].used && slots_[i].key != key) i = (i + 1) & mask_;
    if (!slots_[i].used) return;
    // Backward shift: entries after the hole that may move into it do, so that no probe
    // chain is broken and no tombstone is left.
    std::uint32_t hole = i;
    for (std::uint32_t j = (i + 1) & mask_; slots_[j].used; j = (j + 1) & mask_) {
        const std::uint32_t h = home(slots_[j].key);
        const bool between = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (between) continue;  // its home lies after the hole: it must stay
        slots_[hole] = slots_[j];
        hole = j;
    }
    slots_[hole] = Slot{};
    --size_;
}

// ---- connections and listeners ----------------------------------------------------------------

struct TcpStack::Conn final : public tcp::TcpWire, public Schedulable {
    Conn(TcpStack& s, const tcp::TcpConfig& cfg, std::uint32_t slot, std::uint16_t gen,
         net::Ipv4Addr remote, std::uint16_t rport, std::uint16_t lport)
        : stack(s),
          handle(make_handle(slot, gen, false)),
          remote_ip(remote),
          remote_port(rport),
          local_port(lport),
          engine(cfg, *this) {}

    // TcpWire
    std::span<std::uint8_t> tx_alloc(std::size_t len) override {
        return stack.link_.tx_alloc(remote_ip, len);
    }
    void tx_send(std::size_t len) override { stack.link_.tx_send(len); }

    // Schedulable: no client to tell, so it may always sleep.
    bool sched_poll(std::uint64_t now_ns) override {
        const bool did = engine.poll(now_ns);
        stack.drain(*this);
        return did;
    }
    std::uint64_t sched_deadline() const override {
        if (pending_peer_closed && owner != nullptr) return 0;
        return engine.next_deadline();
    }
    bool sched_sleep() override { return true; }
    void sched_awake() override {}

    TcpStack& stack;
    const TcpHandle handle;
    const net::Ipv4Addr remote_ip;
    const std::uint16_t remote_port, local_port;
    TcpStreamOwner* owner = nullptr;
    Listener* from = nullptr;          // passive, until accepted (or its listener goes)
    bool embryonic = false;            // passive in SYN-RECEIVED: counted in the SYN backlog
    bool incoming = false;             // passive, not yet ESTABLISHED: then queued for accept()
    bool queued = false;               // ESTABLISHED, waiting for accept()
    bool pending_peer_closed = false;  // the peer's FIN came before accept()
    bool unreachable = false;          // ended by an ICMP error
    bool dead = false;                 // its terminal event came: freed by reap()
    tcp::TcpConnection engine;         // last: built on the members above
};

struct TcpStack::Listener {
    TcpHandle handle;
    std::uint16_t port = 0;
    std::uint32_t backlog = 0;
    std::uint32_t syn_backlog = 0;  // its bound on `embryonic`
    TcpStreamOwner* owner = nullptr;
    std::uint32_t embryonic = 0;
    // The time slot of its last cookie: ACKs are checked as cookies only for two slots after
    // (a listener that sent none has nothing for a forger to guess at).
    std::uint64_t cookie_slot = 0;
    bool sent_cookies = false;
    std::vector<Conn*> queue;  // ESTABLISHED, not accepted; reserved to `backlog`
};

std::uint32_t tcp_window_for(std::uint32_t link_mbps, std::uint32_t rtt_us) {
    const std::uint64_t mbps = link_mbps == 0 ? kDefaultLinkMbps : link_mbps;
    const std::uint64_t bdp = mbps * rtt_us / 8;  // Mb/s x us / 8 = bytes
    const std::uint64_t w = std::bit_ceil(std::max<std::uint64_t>(2 * bdp, 1));
    return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(w, kMinTcpWindow, kMaxTcpWindow));
}

void size_tcp_buffers(tcp::TcpConfig& c, std::uint32_t window) {
    c.send_buffer = window;
    c.recv_window = window;
    // A record a segment at least (iWARP's FPDUs are), so records for a buffer of 256-byte
    // ones, and the engine's default table below that.
    c.max_records = std::max<std::uint32_t>(1024, window / 256);
}

std::uint64_t TcpStack::memory_per_connection(const tcp::TcpConfig& c) {
    // What the engine's constructor allocates, and the connection itself.
    return sizeof(Conn) + c.send_buffer + std::uint64_t{c.max_records} * 8 +
           std::uint64_t{c.max_recv_buffers} * 32 +
           (2 * std::uint64_t{c.max_recv_buffers} + 16) * sizeof(tcp::TcpEvent);
}

TcpStack::TcpStack(const TcpStackConfig& config, TcpLink& link)
    : cfg_(config),
      link_(link),
      per_conn_bytes_(memory_per_connection(config.conn)),
      conns_(config.max_connections),
      conn_gen_(config.max_connections, 1),
      listeners_(config.max_listeners),
      listener_gen_(config.max_listeners, 1),
      by_tuple_(config.max_connections, seed_of(config.conn.isn_key)),
      by_peer_(config.max_connections, seed_of(config.conn.isn_key) * 3),
      sched_(config.max_connections, 0),
      next_ephemeral_(config.ephemeral_first) {
    free_slots_.reserve(cfg_.max_connections);
    for (std::uint32_t i = cfg_.max_connections; i-- > 0;) free_slots_.push_back(i);
    dead_.reserve(cfg_.max_connections);
    // Start the ephemeral search somewhere unpredictable (RFC 6056 §3.3.1's spirit).
    const std::uint32_t range = cfg_.ephemeral_last - cfg_.ephemeral_first + 1u;
    next_ephemeral_ = static_cast<std::uint16_t>(cfg_.ephemeral_first +
                                                 (seed_of(cfg_.conn.isn_key) >> 7) % range);
    counters_.memory_bound.set(per_conn_bytes_ * cfg_.max_connections);
    counters_.send_buffer.set(cfg_.conn.send_buffer);
    counters_.recv_window.set(cfg_.conn.recv_window);
}

bool TcpStack::readdress(net::Ipv4Addr ip, std::uint16_t mtu) {
    TcpStackConfig c = cfg_;
    c.local_ip = ip;
    c.conn.mtu = mtu;
    if (tcp_stack_config_error(c) != nullptr) return false;
    cfg_.local_ip = ip;
    cfg_.conn.mtu = mtu;
    return true;
}

TcpStack::~TcpStack() {
    for (auto& c : conns_)
        if (c) sched_.remove(*c);
}

std::uint64_t TcpStack::conn_key(net::Ipv4Addr remote, std::uint16_t rport, std::uint16_t lport) {
    return std::uint64_t{remote.value} << 32 | std::uint64_t{rport} << 16 | lport;
}

TcpStack::Conn* TcpStack::conn(TcpHandle h) const {
    if ((h.value & kListenerBit) != 0) return nullptr;
    const std::uint32_t i = handle_index(h);
    if (i >= conns_.size() || !conns_[i] || conns_[i]->handle != h || conns_[i]->dead)
        return nullptr;
    return conns_[i].get();
}

TcpStack::Listener* TcpStack::listener(TcpHandle h) const {
    if ((h.value & kListenerBit) == 0) return nullptr;
    const std::uint32_t i = handle_index(h);
    if (i >= listeners_.size() || !listeners_[i] || listeners_[i]->handle != h) return nullptr;
    return listeners_[i].get();
}

TcpStack::Listener* TcpStack::listener_on(std::uint16_t port) const {
    for (const auto& l : listeners_)
        if (l && l->port == port) return l.get();
    return nullptr;
}

TcpStack::Conn* TcpStack::make_conn(net::Ipv4Addr remote, std::uint16_t rport, std::uint16_t lport,
                                    bool passive) {
    if (free_slots_.empty()) return nullptr;
    const std::uint32_t slot = free_slots_.back();
    tcp::TcpConfig cfg = cfg_.conn;
    cfg.local = endpoint(cfg_.local_ip, lport);
    cfg.remote = endpoint(remote, rport);
    if (passive) cfg.syn_retries = cfg_.passive_syn_retries;
    auto c = std::make_unique<Conn>(*this, cfg, slot, conn_gen_[slot], remote, rport, lport);
    if (!by_tuple_.insert(conn_key(remote, rport, lport), slot)) return nullptr;
    if (std::uint32_t* n = by_peer_.find(remote.value)) {
        ++*n;
    } else {
        by_peer_.insert(remote.value, 1);  // room: never more peers than connections
    }
    free_slots_.pop_back();
    conns_[slot] = std::move(c);
    ++live_;
    counters_.connections.set(live_);
    counters_.memory_bytes.set(live_ * per_conn_bytes_);
    return conns_[slot].get();
}

void TcpStack::free_conn(Conn& c) {
    const std::uint32_t slot = handle_index(c.handle);
    sched_.remove(c);
    by_tuple_.erase(conn_key(c.remote_ip, c.remote_port, c.local_port));
    if (std::uint32_t* n = by_peer_.find(c.remote_ip.value); n != nullptr && --*n == 0)
        by_peer_.erase(c.remote_ip.value);
    if (c.embryonic) {
        --syn_received_;
        if (c.from != nullptr) --c.from->embryonic;
    }
    if (c.queued && c.from != nullptr) std::erase(c.from->queue, &c);
    conn_gen_[slot] = next_gen(conn_gen_[slot]);
    conns_[slot].reset();
    free_slots_.push_back(slot);
    --live_;
    counters_.connections.set(live_);
    counters_.syn_received.set(syn_received_);
    counters_.memory_bytes.set(live_ * per_conn_bytes_);
}

// ---- segments in ------------------------------------------------------------------------------

void TcpStack::on_segment(net::Ipv4Addr src, std::span<const std::uint8_t> bytes,
                          std::uint64_t now_ns, bool checksum_verified) {
    now_ = now_ns;
    counters_.segments_in.add();
    if (checksum_verified) counters_.checksum_offloaded.add();
    tcp::Segment seg;
    const std::uint32_t pseudo = net::ipv4_pseudo_sum(src, cfg_.local_ip, net::IpProto::tcp,
                                                      static_cast<std::uint16_t>(bytes.size()));
    if (const tcp::ParseError e = tcp::parse_segment(bytes, pseudo, seg, !checksum_verified);
        e != tcp::ParseError::none) {
        counters_.bad_segment.add();
        counters_.parse_errors[static_cast<std::size_t>(e)].add();
        return;
    }
    if (std::uint32_t* slot = by_tuple_.find(conn_key(src, seg.src_port, seg.dst_port))) {
        Conn& c = *conns_[*slot];
        counters_.to_connection.add();
        c.engine.on_segment(seg, now_ns);
        sched_.wake(c);
        drain(c);
        reap();
        return;
    }
    Listener* l = listener_on(seg.dst_port);
    if (l == nullptr) counters_.no_listener.add();
    if (l != nullptr && seg.has(tcp::flag::syn) && !seg.has(tcp::flag::ack) &&
        !seg.has(tcp::flag::rst)) {
        accept_syn(*l, src, seg);
        reap();
        return;
    }
    if (l != nullptr && seg.has(tcp::flag::ack) && !seg.has(tcp::flag::syn) &&
        !seg.has(tcp::flag::rst) && cookie_ack(*l, src, seg)) {
        reap();
        return;
    }
    // RFC 9293 §3.10.7.1: a segment to no connection is answered with RST (never an RST),
    // whether the port is closed or a listener sees a non-SYN.
    send_reset(src, seg);
}

void TcpStack::accept_syn(Listener& l, net::Ipv4Addr src, const tcp::Segment& seg) {
    if (!link_.on_link(src)) return counters_.syn_off_link.add();
    // A full accept queue drops the SYN, cookie or not (as Linux): a connection made now
    // would have nowhere to wait. The peer retries.
    if (l.queue.size() >= l.backlog) return counters_.accept_queue_full.add();
    if (l.embryonic >= l.syn_backlog || l.embryonic + l.queue.size() >= l.backlog ||
        syn_received_ >= cfg_.syn_backlog) {
        counters_.syn_backlog_full.add();
        if (cfg_.syn_cookies) send_cookie(l, src, seg);
        return;
    }
    if (const std::uint32_t* n = by_peer_.find(src.value); n != nullptr && *n >= cfg_.max_per_peer)
        return counters_.syn_peer_limit.add();
    Conn* c = make_conn(src, seg.src_port, seg.dst_port, true);
    if (c == nullptr) return counters_.syn_table_full.add();
    if (!c->engine.open_passive(seg, now_)) {  // not reached: the flags were checked
        c->dead = true;
        dead_.push_back(c);
        return;
    }
    c->from = &l;
    c->embryonic = true;
    c->incoming = true;
    ++l.embryonic;
    ++syn_received_;
    counters_.syn_received.set(syn_received_);
    counters_.syn_accepted.add();
    counters_.passive_opens.add();
    sched_.add(*c, now_);
}

// The SYN-ACK of a SYN the SYN backlog had no room for: its ISN is a cookie (proto/tcp/isn.h)
// and nothing is kept. It offers our MSS only, and the window a passive connection's SYN-ACK
// offers (none: no buffer is posted before accept()). Not retransmitted: the peer's SYN is.
void TcpStack::send_cookie(Listener& l, net::Ipv4Addr to, const tcp::Segment& syn) {
    const std::uint32_t peer_mss = syn.opts.has_mss ? syn.opts.mss : 536u;  // RFC 9293 §3.7.1
    tcp::SegmentSpec s;
    s.src_port = syn.dst_port;
    s.dst_port = syn.src_port;
    s.seq = tcp::make_syn_cookie(cfg_.conn.isn_key, endpoint(cfg_.local_ip, syn.dst_port),
                                 endpoint(to, syn.src_port), syn.seq, cookie_slot(),
                                 tcp::cookie_mss_index(peer_mss));
    s.ack = syn.seq + 1;
    s.flags = tcp::flag::syn | tcp::flag::ack;
    s.window = 0;
    s.opts.has_mss = true;
    s.opts.mss = static_cast<std::uint16_t>(std::min<std::uint32_t>(cfg_.conn.mtu - 40, 65535));
    const std::size_t len = tcp::header_length(s);
    const std::span<std::uint8_t> buf = link_.tx_alloc(to, len);
    if (buf.size() < len) return;
    tcp::write_segment(
        buf, s, {}, {},
        net::ipv4_pseudo_sum(cfg_.local_ip, to, net::IpProto::tcp, static_cast<std::uint16_t>(len)),
        cfg_.conn.tx_checksum_offload);
    link_.tx_send(len);
    l.cookie_slot = cookie_slot();
    l.sent_cookies = true;
    counters_.syn_cookies_sent.add();
}

bool TcpStack::cookie_ack(Listener& l, net::Ipv4Addr src, const tcp::Segment& seg) {
    if (!cfg_.syn_cookies || !l.sent_cookies || cookie_slot() - l.cookie_slot > 1) return false;
    const std::uint16_t mss =
        tcp::check_syn_cookie(cfg_.conn.isn_key, endpoint(cfg_.local_ip, seg.dst_port),
                              endpoint(src, seg.src_port), seg.seq - 1, seg.ack - 1, cookie_slot());
    if (mss == 0) {
        counters_.syn_cookies_rejected.add();
        return false;
    }
    // The bounds a SYN meets, but the SYN backlog's: the connection skips SYN-RECEIVED. A
    // drop leaves the peer retransmitting; its retransmissions carry the same cookie.
    if (!link_.on_link(src)) {
        counters_.syn_off_link.add();
        return true;
    }
    if (l.queue.size() >= l.backlog) {
        counters_.accept_queue_full.add();
        return true;
    }
    if (const std::uint32_t* n = by_peer_.find(src.value);
        n != nullptr && *n >= cfg_.max_per_peer) {
        counters_.syn_peer_limit.add();
        return true;
    }
    Conn* c = make_conn(src, seg.src_port, seg.dst_port, true);
    if (c == nullptr) {
        counters_.syn_table_full.add();
        return true;
    }
    if (!c->engine.open_from_cookie(seg, seg.ack - 1, mss, now_)) {
        c->dead = true;  // an ACK the connection could not take (data past the window)
        dead_.push_back(c);
        return true;
    }
    counters_.syn_cookies_accepted.add();
    c->from = &l;
    c->incoming = true;
    counters_.passive_opens.add();
    sched_.add(*c, now_);
    drain(*c);  // `connected`: into the accept queue
    return true;
}

void TcpStack::send_reset(net::Ipv4Addr to, const tcp::Segment& seg) {
    tcp::SegmentSpec rst;
    if (!tcp::reset_for(seg, rst)) return;
    const std::size_t len = tcp::header_length(rst);
    const std::span<std::uint8_t> buf = link_.tx_alloc(to, len);
    if (buf.size() < len) return;
    tcp::write_segment(
        buf, rst, {}, {},
        net::ipv4_pseudo_sum(cfg_.local_ip, to, net::IpProto::tcp, static_cast<std::uint16_t>(len)),
        cfg_.conn.tx_checksum_offload);
    link_.tx_send(len);
    counters_.rst_sent.add();
}

void TcpStack::on_icmp_unreachable(const IcmpUnreachable& icmp, std::uint64_t now_ns) {
    now_ = now_ns;
    counters_.icmp_errors.add();
    std::uint32_t* slot = icmp.src == cfg_.local_ip
                              ? by_tuple_.find(conn_key(icmp.dst, icmp.dst_port, icmp.src_port))
                              : nullptr;
    if (slot == nullptr || conns_[*slot]->dead) return counters_.icmp_no_connection.add();
    Conn& c = *conns_[*slot];
    if (icmp.code == 4) return frag_needed(c, icmp);
    // RFC 5927 §4.1: only an error quoting the one sequence number we sent can end an open
    // (our SYN); errors to synchronized connections are soft (RFC 5461 §4).
    const bool hard_code = icmp.code == 2 || icmp.code == 3 || icmp.code == 1;
    if (c.engine.state() != tcp::TcpState::syn_sent || icmp.seq != c.engine.iss() || !hard_code)
        return counters_.icmp_soft.add();
    counters_.icmp_hard.add();
    c.unreachable = true;
    c.engine.abort();  // CLOSED from SYN-SENT: no RST goes out
    sched_.wake(c);
    drain(c);
    reap();
}

// RFC 1191: a hop on the path needs smaller packets than the segment quoted. Believed only
// when the quoted sequence number is in flight (RFC 5927 §4.1); the engine lowers its MSS
// and sends what is in flight again, cut to it, on its next poll.
void TcpStack::frag_needed(Conn& c, const IcmpUnreachable& icmp) {
    counters_.icmp_frag_needed.add();
    const std::uint16_t mtu = net::frag_needed_mtu(icmp);
    if (mtu == 0 || !c.engine.sent_unacked(icmp.seq) || !c.engine.on_path_mtu(mtu, now_))
        return counters_.pmtu_ignored.add();
    counters_.pmtu_lowered.add();
    sched_.wake(c);
    deliver(c.owner,
            TcpStreamEvent{TcpStreamEventKind::mss_changed, c.handle, {}, 0, c.engine.mss()});
}

// ---- events out -------------------------------------------------------------------------------

void TcpStack::deliver(TcpStreamOwner* owner, const TcpStreamEvent& e) {
    if (owner == nullptr) return;
    counters_.events_delivered.add();
    owner->on_tcp_event(e);
}

void TcpStack::end(Conn& c, TcpStreamEventKind why) {
    c.dead = true;
    dead_.push_back(&c);
    switch (why) {
        case TcpStreamEventKind::reset:
            counters_.ended_reset.add();
            break;
        case TcpStreamEventKind::timed_out:
            counters_.ended_timed_out.add();
            break;
        case TcpStreamEventKind::unreachable:
            counters_.ended_unreachable.add();
            break;
        default:
            counters_.ended_closed.add();
            break;
    }
    TcpStreamOwner* owner = c.owner;
    c.owner = nullptr;
    deliver(owner, TcpStreamEvent{why, c.handle, {}, 0, 0});
}

void TcpStack::drain(Conn& c) {
    if (c.pending_peer_closed && c.owner != nullptr) {
        c.pending_peer_closed = false;
        deliver(c.owner, TcpStreamEvent{TcpStreamEventKind::peer_closed, c.handle, {}, 0, 0});
    }
    tcp::TcpEvent ev;
    while (!c.dead && c.engine.next_event(ev)) {
        TcpStreamEventKind kind = stream_kind(ev.kind);
        switch (ev.kind) {
            case tcp::EventKind::connected:
                counters_.established.add();
                if (c.embryonic) {
                    c.embryonic = false;
                    --syn_received_;
                    counters_.syn_received.set(syn_received_);
                    if (c.from != nullptr) --c.from->embryonic;
                }
                if (c.incoming) {
                    c.incoming = false;
                    Listener* l = c.from;
                    if (l == nullptr) {  // its listener went meanwhile
                        c.engine.abort();
                        continue;
                    }
                    // Cookies may have filled the accept queue while this one was in
                    // SYN-RECEIVED; the queue's memory is reserved to `backlog`, never more.
                    if (l->queue.size() >= l->backlog) {
                        counters_.accept_queue_full.add();
                        c.from = nullptr;
                        c.engine.abort();
                        continue;
                    }
                    c.queued = true;
                    l->queue.push_back(&c);
                    deliver(l->owner, TcpStreamEvent{TcpStreamEventKind::incoming, c.handle,
                                                     l->handle, 0, 0});
                    continue;
                }
                break;
            case tcp::EventKind::peer_closed:
                if (c.owner == nullptr) {
                    c.pending_peer_closed = true;
                    continue;
                }
                break;
            case tcp::EventKind::closed:
            case tcp::EventKind::reset:
            case tcp::EventKind::timed_out:
                if (c.unreachable) kind = TcpStreamEventKind::unreachable;
                end(c, kind);
                return;
            default:
                break;
        }
        deliver(c.owner, TcpStreamEvent{kind, c.handle, {}, ev.cookie, ev.bytes});
    }
}

void TcpStack::reap() {
    while (!dead_.empty()) {
        Conn* c = dead_.back();
        dead_.pop_back();
        c->engine.poll(now_);  // its last output: the RST of an abort
        free_conn(*c);
    }
}

bool TcpStack::poll(std::uint64_t now_ns) {
    now_ = now_ns;
    const bool did = sched_.run(now_ns);
    reap();
    return did;
}

// ---- the API ----------------------------------------------------------------------------------

int TcpStack::listen(std::uint16_t port, std::uint32_t backlog, TcpStreamOwner& owner,
                     TcpHandle& out) {
    if (port == 0 || backlog == 0) return EINVAL;
    if (listener_on(port) != nullptr) return EADDRINUSE;
    std::uint32_t i = 0;
    while (i < listeners_.size() && listeners_[i]) ++i;
    if (i == listeners_.size()) return ENOBUFS;
    auto l = std::make_unique<Listener>();
    l->handle = make_handle(i, listener_gen_[i], true);
    l->port = port;
    l->backlog = std::min(backlog, cfg_.max_listen_backlog);
    l->syn_backlog = std::min(l->backlog, cfg_.listener_syn_backlog);
    l->owner = &owner;
    l->queue.reserve(l->backlog);
    out = l->handle;
    listeners_[i] = std::move(l);
    counters_.listeners.add();
    return 0;
}

std::uint16_t TcpStack::pick_ephemeral(net::Ipv4Addr remote, std::uint16_t rport) {
    const std::uint32_t range = cfg_.ephemeral_last - cfg_.ephemeral_first + 1u;
    for (std::uint32_t tries = 0; tries < range; ++tries) {
        const std::uint16_t p = next_ephemeral_;
        next_ephemeral_ =
            p == cfg_.ephemeral_last ? cfg_.ephemeral_first : static_cast<std::uint16_t>(p + 1);
        if (listener_on(p) == nullptr && by_tuple_.find(conn_key(remote, rport, p)) == nullptr)
            return p;
    }
    return 0;
}

TcpBound TcpStack::bound_for(net::Ipv4Addr remote) {
    if (free_slots_.empty()) return TcpBound::connections;
    const std::uint32_t* n = by_peer_.find(remote.value);
    return n != nullptr && *n >= cfg_.max_per_peer ? TcpBound::per_peer : TcpBound::none;
}

int TcpStack::refuse_connect(int err) {
    counters_.connect_refused.add();
    return err;
}

int TcpStack::connect(net::Ipv4Addr ip, std::uint16_t port, TcpStreamOwner& owner, TcpHandle& out,
                      std::uint16_t local_port) {
    if (port == 0 || ip.value == 0) return refuse_connect(EINVAL);
    if (!link_.on_link(ip)) return refuse_connect(ENETUNREACH);
    if (const std::uint32_t* n = by_peer_.find(ip.value); n != nullptr && *n >= cfg_.max_per_peer)
        return refuse_connect(ENOBUFS);
    if (local_port == 0) local_port = pick_ephemeral(ip, port);
    if (local_port == 0 || by_tuple_.find(conn_key(ip, port, local_port)) != nullptr)
        return refuse_connect(EADDRINUSE);
    Conn* c = make_conn(ip, port, local_port, false);
    if (c == nullptr) return refuse_connect(ENOBUFS);
    c->owner = &owner;
    c->engine.open_active(now_);
    counters_.active_opens.add();
    sched_.add(*c, now_);
    out = c->handle;
    return 0;
}

int TcpStack::accept(TcpHandle h, TcpStreamOwner& owner) {
    Conn* c = conn(h);
    if (c == nullptr) return EBADF;
    if (!c->queued) return c->owner != nullptr ? EISCONN : EINVAL;
    std::erase(c->from->queue, c);
    c->queued = false;
    c->from = nullptr;
    c->owner = &owner;
    counters_.accepted.add();
    if (c->pending_peer_closed) sched_.wake(*c);  // delivered on its next poll
    return 0;
}

bool TcpStack::send(TcpHandle h, std::span<const std::byte> record) {
    Conn* c = conn(h);
    if (c == nullptr || !c->engine.send(record)) return false;
    sched_.wake(*c);
    return true;
}

bool TcpStack::post_receive(TcpHandle h, std::span<std::byte> buffer, std::uint64_t cookie) {
    Conn* c = conn(h);
    if (c == nullptr || !c->engine.post_receive(buffer, cookie)) return false;
    sched_.wake(*c);
    return true;
}

void TcpStack::close(TcpHandle h) {
    if (Listener* l = listener(h)) {
        const std::uint32_t i = handle_index(h);
        // Its connections not accepted are aborted; those in the handshake lose their listener
        // and are aborted when they would have been queued.
        for (auto& slot : conns_) {
            if (!slot || slot->from != l) continue;
            if (slot->queued) {
                slot->queued = false;
                counters_.listen_aborted.add();
                slot->engine.abort();
                sched_.wake(*slot);
            }
            if (slot->embryonic) --l->embryonic;
            slot->from = nullptr;
        }
        listener_gen_[i] = next_gen(listener_gen_[i]);
        listeners_[i].reset();
        counters_.listeners.set(counters_.listeners.get() - 1);
        return;
    }
    if (Conn* c = conn(h)) {
        c->engine.close();
        sched_.wake(*c);
        drain(*c);  // closing in SYN-SENT ends it at once
    }
}

void TcpStack::abort(TcpHandle h) {
    Conn* c = conn(h);
    if (c == nullptr) return;
    c->owner = nullptr;  // nothing more reaches it
    c->engine.abort();
    sched_.wake(*c);
}

std::uint32_t TcpStack::mss(TcpHandle h) const {
    const Conn* c = conn(h);
    return c != nullptr ? c->engine.mss() : 0;
}

std::size_t TcpStack::send_space(TcpHandle h) const {
    const Conn* c = conn(h);
    return c != nullptr ? c->engine.send_space() : 0;
}

std::uint64_t TcpStack::received(TcpHandle h) const {
    const Conn* c = conn(h);
    return c != nullptr ? c->engine.received() : 0;
}

bool TcpStack::info(TcpHandle h, tcp::TcpInfo& out) const {
    const Conn* c = conn(h);
    if (c == nullptr) return false;
    out = c->engine.info();
    return true;
}

bool TcpStack::four_tuple(TcpHandle h, TcpFourTuple& out) const {
    const Conn* c = conn(h);
    if (c == nullptr) return false;
    out = TcpFourTuple{cfg_.local_ip, c->remote_ip, c->local_port, c->remote_port};
    return true;
}

const tcp::TcpCounters* TcpStack::counters(TcpHandle h) const {
    const Conn* c = conn(h);
    return c != nullptr ? &c->engine.counters() : nullptr;
}

bool TcpStack::uses_port(std::uint16_t port) const {
    if (listener_on(port) != nullptr) return true;
    return std::ranges::any_of(conns_,
                               [port](const auto& c) { return c && c->local_port == port; });
}

std::size_t TcpStack::snapshot(std::size_t first, std::span<TcpConnRow> out,
                               std::size_t& total) const {
    std::size_t row = 0, n = 0;
    auto put = [&](const TcpConnRow& r) {
        if (row++ >= first && n < out.size()) out[n++] = r;
    };
    for (const auto& l : listeners_) {
        if (!l) continue;
        TcpConnRow r;
        r.listener = true;
        r.tuple = TcpFourTuple{cfg_.local_ip, {}, l->port, 0};
        r.backlog = l->backlog;
        r.queued = static_cast<std::uint32_t>(l->queue.size());
        put(r);
    }
    for (const auto& c : conns_) {
        if (!c) continue;
        TcpConnRow r;
        r.tuple = TcpFourTuple{cfg_.local_ip, c->remote_ip, c->local_port, c->remote_port};
        r.info = c->engine.info();
        const tcp::TcpCounters& k = c->engine.counters();
        r.bytes_sent = k.bytes_sent.get();
        r.bytes_acked = k.bytes_acked.get();
        r.bytes_received = k.bytes_received.get();
        r.segments_in = k.segments_in.get();
        r.segments_out = k.segments_out.get();
        r.retransmits = k.retransmits.get();
        r.fast_retransmits = k.fast_retransmits.get();
        r.timeouts = k.timeouts.get();
        put(r);
    }
    total = row;
    return n;
}

}  // namespace snic::daemon
