// Fakes for the TCP engine's unit tests: a transmit path that records segments
// (FakeWire); one connection with an application on top that posts receive buffers,
// collects the byte stream and events (Node); a link between two nodes that parses every
// segment with parse_segment() (so corruption is caught by the checksum) and can drop,
// duplicate, reorder and corrupt with a seeded generator, and hold a hop with a smaller
// MTU (FakeLink); the two driven by a
// fake clock (TcpPair); and a scripted peer (Script) that injects exact segments and reads
// back the engine's exact output, packetdrill-style.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "proto/tcp/connection.h"
#include "proto/tcp/segment.h"

namespace snic::tcp::test {

using Bytes = std::vector<std::uint8_t>;
using Seg = SegmentSpec;

inline Endpoint ep(std::uint8_t last, std::uint16_t port) {
    return Endpoint{IpAddr::v4(net::Ipv4Addr{0x0a000000u | last}), port};
}

class FakeWire final : public TcpWire {
  public:
    std::span<std::uint8_t> tx_alloc(std::size_t len) override {
        if (full) return {};
        scratch_.assign(len, 0);
        return scratch_;
    }
    void tx_send(std::size_t len) override {
        scratch_.resize(len);
        out.push_back(scratch_);
    }
    std::deque<Bytes> out;
    bool full = false;

  private:
    Bytes scratch_;
};

// A parsed copy of a segment (the payload view points into `bytes`).
struct Parsed {
    Bytes bytes;
    Segment seg;
    ParseError err = ParseError::none;
};

inline Parsed parse_copy(const Bytes& b, const Endpoint& src, const Endpoint& dst) {
    Parsed p;
    p.bytes = b;
    p.err = parse_segment(
        p.bytes, pseudo_sum(src.addr, dst.addr, static_cast<std::uint32_t>(b.size())), p.seg);
    return p;
}

inline TcpConfig base_config(const Endpoint& local, const Endpoint& remote) {
    TcpConfig c;
    c.local = local;
    c.remote = remote;
    c.mtu = 1500;
    for (std::size_t i = 0; i < c.isn_key.size(); ++i)
        c.isn_key[i] = static_cast<std::uint8_t>(i * 7 + local.port);
    return c;
}

// One connection and the application on it: receive buffers kept posted, the stream
// collected from recv_done events, every event recorded.
struct Node {
    Node(const TcpConfig& c, std::uint32_t buf_size = 16384, std::uint32_t nbufs = 16)
        : cfg(c), conn(cfg, wire), buf_size(buf_size) {
        for (std::uint32_t i = 0; i < nbufs; ++i)
            bufs.push_back(std::make_unique<std::byte[]>(buf_size));
        for (std::uint32_t i = 0; i < nbufs; ++i) repost(i);
    }
    void repost(std::uint64_t i) {
        if (auto_post) conn.post_receive(std::span(bufs[i].get(), buf_size), i);
    }
    // Drains events; recv_done buffers are appended to `stream` and posted again.
    void drain() {
        TcpEvent e;
        while (conn.next_event(e)) {
            events.push_back(e);
            if (e.kind == EventKind::recv_done) {
                const auto* p = reinterpret_cast<const std::uint8_t*>(bufs[e.cookie].get());
                stream.insert(stream.end(), p, p + e.bytes);
                repost(e.cookie);
            }
        }
    }
    bool saw(EventKind k) const {
        return std::any_of(events.begin(), events.end(),
                           [k](const TcpEvent& e) { return e.kind == k; });
    }
    std::size_t count(EventKind k) const {
        return static_cast<std::size_t>(std::count_if(
            events.begin(), events.end(), [k](const TcpEvent& e) { return e.kind == k; }));
    }

    TcpConfig cfg;
    FakeWire wire;
    TcpConnection conn;
    std::uint32_t buf_size;
    std::vector<std::unique_ptr<std::byte[]>> bufs;
    std::vector<TcpEvent> events;
    Bytes stream;
    bool auto_post = true;
};

struct LinkFaults {
    double loss = 0, dup = 0, reorder = 0, corrupt = 0;
    TcpTime delay = 100'000;          // one-way, ns
    TcpTime reorder_extra = 300'000;  // added to a reordered segment
};

// Two nodes on a link; the clock moves to the next delivery or deadline.
class TcpPair {
  public:
    TcpPair(const TcpConfig& ca, const TcpConfig& cb, LinkFaults f = {}, std::uint32_t seed = 1,
            std::uint32_t buf_size = 16384, std::uint32_t nbufs = 16)
        : a(ca, buf_size, nbufs), b(cb, buf_size, nbufs), faults(f), rng(seed) {}

    struct InFlight {
        TcpTime at;
        std::uint64_t order;
        bool to_b;
        Bytes bytes;
    };

    void transmit_from(Node& n, bool to_b) {
        while (!n.wire.out.empty()) {
            Bytes s = std::move(n.wire.out.front());
            n.wire.out.pop_front();
            ++sent;
            if (on_send) on_send(to_b, s);
            if (trace) {
                Parsed x = parse_copy(s, n.cfg.local, n.cfg.remote);
                std::fprintf(stderr,
                             "%llu %s seq=%u ack=%u fl=%02x win=%u len=%zu ts=%u/%u sack=%u\n",
                             static_cast<unsigned long long>(now / 1000), to_b ? "a>b" : "b>a",
                             x.seg.seq, x.seg.ack, x.seg.flags, x.seg.window, x.seg.payload.size(),
                             x.seg.opts.ts_val, x.seg.opts.ts_ecr, x.seg.opts.nsack);
            }
            if (drop_next_to_b > 0 && to_b) {
                --drop_next_to_b;
                continue;
            }
            const std::size_t ip_header = n.cfg.local.addr.is_v4() ? 20 : 40;
            if (hop_mtu > 0 && s.size() + ip_header > hop_mtu) {
                ++too_big;  // the hop drops it (DF) and its router answers with an ICMP
                if (on_too_big) on_too_big(n, s);
                continue;
            }
            if (chance(faults.loss)) continue;
            int copies = chance(faults.dup) ? 2 : 1;
            for (int c = 0; c < copies; ++c) {
                Bytes x = s;
                if (chance(faults.corrupt) && !x.empty()) {
                    std::uniform_int_distribution<std::size_t> pos(0, x.size() - 1);
                    std::uniform_int_distribution<int> bit(0, 7);
                    x[pos(rng)] ^= static_cast<std::uint8_t>(1u << bit(rng));
                }
                TcpTime at =
                    now + faults.delay + (chance(faults.reorder) ? faults.reorder_extra : 0);
                q.push_back(InFlight{at, order++, to_b, std::move(x)});
            }
        }
    }

    // One step: deliver what is due, poll both. False when nothing can ever happen again.
    bool step(TcpTime limit) {
        TcpTime t = std::min(a.conn.next_deadline(), b.conn.next_deadline());
        for (const InFlight& f : q) t = std::min(t, f.at);
        if (t == kNever || t > limit) return false;
        now = std::max(now, t);
        std::stable_sort(q.begin(), q.end(), [](const InFlight& x, const InFlight& y) {
            return x.at != y.at ? x.at < y.at : x.order < y.order;
        });
        while (!q.empty() && q.front().at <= now) {
            InFlight f = std::move(q.front());
            q.pop_front();
            Node& to = f.to_b ? b : a;
            Parsed p = parse_copy(f.bytes, f.to_b ? a.cfg.local : b.cfg.local, to.cfg.local);
            if (p.err != ParseError::none) {
                ++rejected;
                continue;
            }
            // b listens: while closed, a SYN opens it passively (the owner's listener).
            if (f.to_b && b_listens && b.conn.state() == TcpState::closed &&
                b.conn.open_passive(p.seg, now)) {
                b_listens = false;
                continue;
            }
            to.conn.on_segment(p.seg, now);
        }
        a.conn.poll(now);
        b.conn.poll(now);
        transmit_from(a, true);
        transmit_from(b, false);
        a.drain();
        b.drain();
        if (after_step) after_step();
        return true;
    }

    // Runs until `done` or until nothing happens before `limit`.
    template <class F>
    bool run_until(F done, TcpTime limit) {
        for (std::uint64_t i = 0; i < 10'000'000; ++i) {
            if (done()) return true;
            if (!step(limit)) return done();
        }
        return done();
    }

    bool chance(double p) {
        if (p <= 0) return false;
        return std::uniform_real_distribution<double>(0, 1)(rng) < p;
    }

    Node a, b;
    LinkFaults faults;
    std::mt19937 rng;
    std::deque<InFlight> q;
    std::uint64_t order = 0;
    TcpTime now = 1 * kSec;
    std::uint64_t sent = 0, rejected = 0;
    std::uint32_t drop_next_to_b = 0;
    // A hop that carries IP packets of at most hop_mtu bytes (0: no limit); what is larger
    // is dropped and counted, and on_too_big (the router's ICMP) sees it at once.
    std::size_t hop_mtu = 0;
    std::uint64_t too_big = 0;
    std::function<void(Node&, const Bytes&)> on_too_big;
    bool b_listens = true;
    bool trace = std::getenv("TCP_TRACE") != nullptr;
    std::function<void(bool, const Bytes&)> on_send;
    std::function<void()> after_step;
};

// A scripted peer facing one engine: inject() delivers an exact segment from the peer,
// out() returns what the engine sent since, parsed; the clock moves only by advance().
class Script {
  public:
    static constexpr Seq kPeerIss = 5000;

    explicit Script(TcpConfig c, std::uint32_t buf_size = 16384, std::uint32_t nbufs = 16)
        : node(c, buf_size, nbufs) {}
    Script() : Script(default_config()) {}

    static TcpConfig default_config() { return base_config(ep(1, 4000), ep(2, 5000)); }

    Seg spec(std::uint8_t flags, Seq seq, Seq ack = 0, std::uint16_t window = 65535) const {
        Seg s;
        s.src_port = node.cfg.remote.port;
        s.dst_port = node.cfg.local.port;
        s.seq = seq;
        s.ack = ack;
        s.flags = flags;
        s.window = window;
        return s;
    }

    // An ACK from the peer at peer_nxt acknowledging `ack`, carrying `payload`.
    void data(Seq ack, const Bytes& payload, std::uint16_t window = 65535,
              std::uint8_t flags = flag::ack | flag::psh) {
        inject(spec(flags, peer_nxt, ack, window), payload);
    }

    // Builds the segment as the peer would, parses it and hands it over, then polls.
    void inject(const Seg& s, const Bytes& payload = {}) {
        Bytes b(header_length(s) + payload.size());
        write_segment(b, s, payload, {},
                      pseudo_sum(node.cfg.remote.addr, node.cfg.local.addr,
                                 static_cast<std::uint32_t>(b.size())));
        Parsed p = parse_copy(b, node.cfg.remote, node.cfg.local);
        ASSERT_EQ(p.err, ParseError::none);
        if (passive_next) {
            passive_next = false;
            ASSERT_TRUE(node.conn.open_passive(p.seg, now));
        } else {
            node.conn.on_segment(p.seg, now);
        }
        poll();
    }

    void poll() {
        if (node.conn.next_deadline() <= now) node.conn.poll(now);
        node.drain();
    }

    // Moves the clock by dt, firing whatever falls due on the way, in order.
    void advance(TcpTime dt) {
        const TcpTime end = now + dt;
        for (;;) {
            const TcpTime d = node.conn.next_deadline();
            if (d > end) break;
            now = std::max(now, d);
            node.conn.poll(now);
            node.drain();
        }
        now = end;
    }

    std::vector<Parsed> out() {
        std::vector<Parsed> v;
        while (!node.wire.out.empty()) {
            v.push_back(parse_copy(node.wire.out.front(), node.cfg.local, node.cfg.remote));
            node.wire.out.pop_front();
        }
        return v;
    }
    // Exactly one segment was sent since the last look: returns it.
    Parsed one() {
        auto v = out();
        EXPECT_EQ(v.size(), 1u);
        if (v.empty()) return Parsed{};
        EXPECT_EQ(v[0].err, ParseError::none);
        return v[0];
    }

    // Active open against a peer answering with `opts`; ends ESTABLISHED with the output
    // consumed. Returns the engine's ISS.
    // `rtt`: how long the SYN takes to be answered (the first RTT sample, which sets the
    // tail-loss probe's timer: 2 * SRTT, at least 1 ms).
    Seq establish(const TcpOptions& peer_opts, TcpTime rtt = 0) {
        node.conn.open_active(now);
        poll();
        Parsed syn = one();
        advance(rtt);
        Seg sa = spec(flag::syn | flag::ack, kPeerIss, syn.seg.seq + 1);
        sa.opts = peer_opts;
        inject(sa);
        out();
        peer_nxt = kPeerIss + 1;
        return syn.seg.seq;
    }
    Seq establish() {
        TcpOptions o;
        o.has_mss = true;
        o.mss = 1460;
        return establish(o);
    }

    Node node;
    TcpTime now = 10 * kSec;
    bool passive_next = false;
    Seq peer_nxt = kPeerIss + 1;
};

inline Bytes pattern(std::size_t n, std::uint8_t seed = 1) {
    Bytes b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::uint8_t>(seed + i * 13);
    return b;
}

inline bool send_bytes(TcpConnection& c, const Bytes& b) {
    return c.send(std::as_bytes(std::span(b)));
}

}  // namespace snic::tcp::test
