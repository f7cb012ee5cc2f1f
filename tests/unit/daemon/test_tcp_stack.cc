// The daemon's TCP tables (daemon/iwarp/tcp_stack.h): listeners, the SYN backlog and per-peer
// bounds, RSTs for closed ports, ICMP errors, handles and events, over a fake link: two
// stacks back to back, and a raw peer that writes segments by hand. The clock is a number.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "daemon/iwarp/tcp_stack.h"

namespace snic::daemon {
namespace {

using tcp::kMs;
using tcp::kSec;

const net::Ipv4Addr kA{0x0a000001};    // 10.0.0.1
const net::Ipv4Addr kB{0x0a000002};    // 10.0.0.2
const net::Ipv4Addr kRaw{0x0a000009};  // 10.0.0.9: segments written by the test
const net::Ipv4Addr kFar{0x0b000001};  // 11.0.0.1: off the subnet
const net::Ipv4Prefix kNet{{0x0a000000}, 24};

struct Frame {
    net::Ipv4Addr src, dst;
    std::vector<std::uint8_t> bytes;
};

// Queues what a stack sends; the test delivers it.
class FakeLink final : public TcpLink {
  public:
    FakeLink(net::Ipv4Addr self, std::deque<Frame>& wire) : self_(self), wire_(wire) {}
    std::span<std::uint8_t> tx_alloc(net::Ipv4Addr remote, std::size_t len) override {
        remote_ = remote;
        buf_.assign(len, 0);
        return buf_;
    }
    void tx_send(std::size_t len) override {
        buf_.resize(len);
        wire_.push_back(Frame{self_, remote_, buf_});
    }
    bool on_link(net::Ipv4Addr ip) const override { return kNet.contains(ip); }

  private:
    net::Ipv4Addr self_, remote_;
    std::deque<Frame>& wire_;
    std::vector<std::uint8_t> buf_;
};

// Records events; `on` may act on them.
class Recorder final : public TcpStreamOwner {
  public:
    void on_tcp_event(const TcpStreamEvent& e) override {
        events.push_back(e);
        if (on) on(e);
    }
    std::size_t count(TcpStreamEventKind k) const {
        std::size_t n = 0;
        for (const auto& e : events) n += e.kind == k ? 1 : 0;
        return n;
    }
    std::vector<TcpStreamEvent> events;
    std::function<void(const TcpStreamEvent&)> on;
};

TcpStackConfig config(net::Ipv4Addr ip) {
    TcpStackConfig c;
    c.local_ip = ip;
    c.conn.send_buffer = 64 * 1024;
    c.conn.recv_window = 64 * 1024;
    c.conn.isn_key[0] = static_cast<std::uint8_t>(ip.value);
    return c;
}

struct Net {
    explicit Net(TcpStackConfig ca = config(kA), TcpStackConfig cb = config(kB))
        : la(kA, wire), lb(kB, wire), a(ca, la), b(cb, lb) {}

    // Delivers everything on the wire (and what the answers send), polling both stacks.
    void pump() {
        for (int round = 0; round < 10000; ++round) {
            a.poll(now);
            b.poll(now);
            if (wire.empty()) return;
            while (!wire.empty()) {
                Frame f = std::move(wire.front());
                wire.pop_front();
                if (f.dst == kA) {
                    a.on_segment(f.src, f.bytes, now);
                } else if (f.dst == kB) {
                    b.on_segment(f.src, f.bytes, now);
                } else {
                    raw.push_back(std::move(f));
                }
            }
        }
        FAIL() << "the wire never went quiet";
    }
    // Lets `dt` pass, pumping at every millisecond.
    void run_for(std::uint64_t dt) {
        const std::uint64_t end = now + dt;
        while (now < end) {
            now += kMs;
            pump();
        }
    }

    std::deque<Frame> wire;
    std::vector<Frame> raw;  // sent to addresses no stack has
    FakeLink la, lb;
    TcpStack a, b;
    std::uint64_t now = kSec;
};

// A segment from `src`:`sport` to b's `dport`, written by hand.
std::vector<std::uint8_t> segment(net::Ipv4Addr src, std::uint16_t sport, std::uint16_t dport,
                                  std::uint8_t flags, tcp::Seq seq = 1000, tcp::Seq ack = 0) {
    tcp::SegmentSpec s;
    s.src_port = sport;
    s.dst_port = dport;
    s.seq = seq;
    s.ack = ack;
    s.flags = flags;
    s.window = 65535;
    std::vector<std::uint8_t> out(tcp::header_length(s));
    tcp::write_segment(out, s, {}, {},
                       tcp::pseudo_sum(tcp::IpAddr::v4(src), tcp::IpAddr::v4(kB),
                                       static_cast<std::uint32_t>(out.size())));
    return out;
}

tcp::Segment parse(const Frame& f) {
    tcp::Segment s;
    EXPECT_EQ(tcp::parse_segment(f.bytes,
                                 tcp::pseudo_sum(tcp::IpAddr::v4(f.src), tcp::IpAddr::v4(f.dst),
                                                 static_cast<std::uint32_t>(f.bytes.size())),
                                 s),
              tcp::ParseError::none);
    return s;
}

// B listens on 80 and accepts everything into `server`, posting `buf`.
struct Server {
    explicit Server(Net& n, std::uint32_t backlog = 16) : net(n) {
        EXPECT_EQ(net.b.listen(80, backlog, listener_events, listener), 0);
        listener_events.on = [this](const TcpStreamEvent& e) {
            if (e.kind != TcpStreamEventKind::incoming || !accepting) return;
            EXPECT_EQ(e.listener, listener);
            EXPECT_EQ(net.b.accept(e.conn, conn_events), 0);
            conns.push_back(e.conn);
            bufs.emplace_back(4096);
            EXPECT_TRUE(net.b.post_receive(e.conn, bufs.back(), conns.size()));
        };
    }
    Net& net;
    TcpHandle listener;
    bool accepting = true;
    Recorder listener_events, conn_events;
    std::vector<TcpHandle> conns;
    std::deque<std::vector<std::byte>> bufs;
};

TEST(TcpStack, a_listener_takes_a_syn_and_the_stream_flows_both_ways_until_both_close) {
    Net n;
    Server srv(n);
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    std::vector<std::byte> reply(64);
    ASSERT_TRUE(n.a.post_receive(c, reply, 7));
    n.pump();
    ASSERT_EQ(client.count(TcpStreamEventKind::connected), 1u);
    ASSERT_EQ(srv.listener_events.count(TcpStreamEventKind::incoming), 1u);
    ASSERT_EQ(srv.conns.size(), 1u);
    TcpFourTuple t;
    ASSERT_TRUE(n.b.four_tuple(srv.conns[0], t));
    EXPECT_EQ(t.remote_ip, kA);
    EXPECT_EQ(t.local_port, 80);
    EXPECT_GE(t.remote_port, 49152);

    const char hello[] = "hello, snic";
    ASSERT_TRUE(n.a.send(c, std::as_bytes(std::span(hello, sizeof hello))));
    n.pump();
    EXPECT_EQ(n.b.received(srv.conns[0]), sizeof hello);
    EXPECT_EQ(std::memcmp(srv.bufs[0].data(), hello, sizeof hello), 0);
    ASSERT_TRUE(n.b.send(srv.conns[0], std::as_bytes(std::span(hello, 5))));
    n.b.close(srv.conns[0]);
    n.pump();
    EXPECT_EQ(client.count(TcpStreamEventKind::peer_closed), 1u);
    EXPECT_EQ(std::memcmp(reply.data(), hello, 5), 0);
    n.a.close(c);
    n.run_for(10 * kMs);
    // B's FIN went first: B ends in TIME-WAIT (2 MSL), A from LAST-ACK at once.
    EXPECT_EQ(client.count(TcpStreamEventKind::closed), 1u);
    EXPECT_EQ(n.a.counters().connections.get(), 0u) << "A's close answered a FIN: no TIME-WAIT";
    EXPECT_EQ(n.b.counters().connections.get(), 1u) << "B closed first: TIME-WAIT";
    n.run_for(61 * kSec);
    EXPECT_EQ(srv.conn_events.count(TcpStreamEventKind::closed), 1u);
    EXPECT_EQ(n.b.counters().connections.get(), 0u);
    // Every event has one terminal event at the end, and the handles are stale after.
    EXPECT_FALSE(n.a.send(c, std::as_bytes(std::span(hello, 1))));
    tcp::TcpInfo info;
    EXPECT_FALSE(n.a.info(c, info));
    EXPECT_EQ(n.a.accept(c, client), EBADF);
}

TEST(TcpWindow, buffers_are_twice_the_bandwidth_delay_product_in_powers_of_two) {
    EXPECT_EQ(tcp_window_for(10'000, 100), 256u * 1024) << "10 Gb/s x 100 us = 125 kB";
    EXPECT_EQ(tcp_window_for(0, 100), tcp_window_for(kDefaultLinkMbps, 100)) << "unknown speed";
    EXPECT_EQ(tcp_window_for(25'000, 100), 1024u * 1024) << "625 kB, twice, up to 2^20";
    EXPECT_EQ(tcp_window_for(100'000, 100), 4u * 1024 * 1024);
    EXPECT_EQ(tcp_window_for(10'000, 1000), 4u * 1024 * 1024) << "1 ms at 10 Gb/s";
    EXPECT_EQ(tcp_window_for(1'000, 10), kMinTcpWindow) << "2.5 kB: the floor";
    EXPECT_EQ(tcp_window_for(400'000, 100'000), kMaxTcpWindow) << "5 GB: the ceiling";
    tcp::TcpConfig c;
    size_tcp_buffers(c, 4u << 20);
    EXPECT_EQ(c.send_buffer, 4u << 20);
    EXPECT_EQ(c.recv_window, 4u << 20);
    EXPECT_EQ(c.max_records, 16384u) << "a record per 256 bytes";
    size_tcp_buffers(c, kMinTcpWindow);
    EXPECT_EQ(c.max_records, 1024u) << "never fewer than the engine's default";
    EXPECT_EQ(tcp::tcp_config_error(c), nullptr);
}

TEST(TcpWindow, a_window_sized_for_a_fast_link_is_offered_whole_and_fills) {
    // A is sized for 100 Gb/s and 100 us (4 MiB); B keeps 64 KiB.
    TcpStackConfig big = config(kA);
    const std::uint32_t w = tcp_window_for(100'000, 100);
    size_tcp_buffers(big.conn, w);
    Net n(big);
    EXPECT_EQ(n.a.counters().send_buffer.get(), w);
    EXPECT_EQ(n.a.counters().recv_window.get(), w);
    Server srv(n);
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    std::vector<std::vector<std::byte>> rx(4, std::vector<std::byte>(w / 4));
    for (std::size_t i = 0; i < rx.size(); ++i) ASSERT_TRUE(n.a.post_receive(c, rx[i], i));
    n.pump();
    ASSERT_EQ(srv.conns.size(), 1u);
    // The window scale in A's SYN carries 4 MiB: B may send that much unacknowledged.
    tcp::TcpInfo peer, mine;
    ASSERT_TRUE(n.b.info(srv.conns[0], peer));
    ASSERT_TRUE(n.a.info(c, mine));
    EXPECT_EQ(peer.snd_wnd, w);
    EXPECT_EQ(mine.rcv_wnd, w);
    EXPECT_EQ(mine.rcv_wscale, 7) << "4 MiB >> 7 fits 16 bits, >> 6 does not";
    // And A queues a record of three quarters of it, which 256 KiB would refuse.
    std::vector<std::byte> record(3 * (w / 4), std::byte{0x5a});
    EXPECT_TRUE(n.a.send(c, record));
    EXPECT_FALSE(n.a.send(c, std::span(record).first(w / 2))) << "past the send buffer";
}

TEST(TcpStack, a_segment_to_a_closed_port_is_answered_with_rst_and_the_connect_is_reset) {
    Net n;
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 81, client, c), 0);
    n.pump();
    EXPECT_EQ(n.b.counters().no_listener.get(), 1u);
    EXPECT_EQ(n.b.counters().rst_sent.get(), 1u);
    ASSERT_EQ(client.events.size(), 1u);
    EXPECT_EQ(client.events[0].kind, TcpStreamEventKind::reset);
    EXPECT_EQ(n.a.counters().ended_reset.get(), 1u);
    EXPECT_EQ(n.a.counters().connections.get(), 0u);
}

TEST(TcpStack, an_rst_to_no_connection_is_never_answered) {
    Net n;
    n.b.on_segment(kRaw, segment(kRaw, 1234, 81, tcp::flag::rst), n.now);
    n.b.on_segment(kRaw, segment(kRaw, 1234, 81, tcp::flag::ack, 5, 77), n.now);
    n.pump();
    EXPECT_EQ(n.b.counters().rst_sent.get(), 1u);  // the ACK's
    ASSERT_EQ(n.raw.size(), 1u);
    const tcp::Segment rst = parse(n.raw[0]);
    EXPECT_TRUE(rst.has(tcp::flag::rst));
    EXPECT_EQ(rst.seq, 77u);  // RFC 9293 §3.10.7.1: seq = SEG.ACK
    EXPECT_EQ(rst.dst_port, 1234);
}

TEST(TcpStack, a_segment_with_a_bad_checksum_is_counted_and_not_answered) {
    Net n;
    auto syn = segment(kRaw, 1234, 81, tcp::flag::syn);
    syn[4] ^= 1;
    n.b.on_segment(kRaw, syn, n.now);
    n.b.on_segment(kRaw, std::span(syn).first(10), n.now);
    n.pump();
    EXPECT_EQ(n.b.counters().bad_segment.get(), 2u);
    EXPECT_EQ(n.b.counters().parse_errors[static_cast<int>(tcp::ParseError::bad_checksum)].get(),
              1u);
    EXPECT_EQ(n.b.counters().rst_sent.get(), 0u);
    EXPECT_TRUE(n.raw.empty());
}

TEST(TcpStack, the_syn_backlog_bounds_half_open_connections_and_says_what_they_cost) {
    TcpStackConfig cb = config(kB);
    cb.syn_backlog = 4;
    cb.listener_syn_backlog = 4;
    cb.syn_cookies = false;  // the bound alone: what a SYN past it costs without cookies
    Net n(config(kA), cb);
    Server srv(n, 64);
    for (std::uint16_t p = 0; p < 10; ++p)
        n.b.on_segment(
            kRaw, segment(kRaw, static_cast<std::uint16_t>(2000 + p), 80, tcp::flag::syn), n.now);
    n.pump();
    EXPECT_EQ(n.b.counters().syn_accepted.get(), 4u);
    EXPECT_EQ(n.b.counters().syn_backlog_full.get(), 6u);
    EXPECT_EQ(n.b.counters().syn_received.get(), 4u);
    EXPECT_EQ(n.b.counters().memory_bytes.get(), 4 * TcpStack::memory_per_connection(cb.conn));
    EXPECT_EQ(n.b.counters().memory_bound.get(),
              cb.max_connections * TcpStack::memory_per_connection(cb.conn));
    EXPECT_EQ(n.raw.size(), 4u);  // four SYN-ACKs, nothing for the refused
    // A real client meanwhile: its SYN is refused too, and it gets through once the half-open
    // ones time out (3 SYN-ACK retransmissions: 1 + 2 + 4 + 8 s) and its SYN comes again
    // (at 1, 3, 7, 15, 31 s).
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    n.pump();
    EXPECT_EQ(n.b.counters().syn_backlog_full.get(), 7u);
    n.run_for(32 * kSec);
    EXPECT_EQ(client.count(TcpStreamEventKind::connected), 1u);
    EXPECT_EQ(n.b.counters().ended_timed_out.get(), 4u);
    EXPECT_EQ(n.b.counters().syn_received.get(), 0u);
    EXPECT_EQ(n.b.counters().connections.get(), 1u);
}

TEST(TcpStack, a_syn_flood_leaves_established_connections_moving) {
    TcpStackConfig cb = config(kB);
    cb.syn_backlog = 8;
    Net n(config(kA), cb);
    Server srv(n);
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    n.pump();
    ASSERT_EQ(srv.conns.size(), 1u);
    std::mt19937 rng(5);
    std::vector<std::byte> chunk(1000, std::byte{0x5a});
    std::uint64_t sent = 0;
    for (int i = 0; i < 200; ++i) {
        for (int k = 0; k < 20; ++k) {
            const net::Ipv4Addr src{kNet.addr.value | static_cast<std::uint32_t>(10 + rng() % 200)};
            n.b.on_segment(src, segment(src, static_cast<std::uint16_t>(rng()), 80, tcp::flag::syn),
                           n.now);
        }
        if (n.a.send(c, chunk)) sent += chunk.size();
        n.pump();
        // Keep the server's window open: repost its buffer as it fills.
        for (const auto& e : srv.conn_events.events) {
            if (e.kind == TcpStreamEventKind::recv_done) {
                ASSERT_TRUE(n.b.post_receive(srv.conns[0], srv.bufs[0], 99));
            }
        }
        srv.conn_events.events.clear();
        n.now += kMs;
    }
    n.pump();
    EXPECT_EQ(n.b.received(srv.conns[0]), sent);
    EXPECT_GT(sent, 100'000u);
    EXPECT_GT(n.b.counters().syn_backlog_full.get(), 3000u);
    EXPECT_LE(n.b.counters().syn_received.get(), 8u);
}

// Spoofed SYNs from many on-link addresses and ports, none of which will ever answer.
void flood(Net& n, std::uint16_t port, int count, std::uint32_t seed = 7) {
    std::mt19937 rng(seed);
    for (int i = 0; i < count; ++i) {
        const net::Ipv4Addr src{kNet.addr.value | static_cast<std::uint32_t>(10 + rng() % 200)};
        n.b.on_segment(
            src,
            segment(src, static_cast<std::uint16_t>(1024 + rng() % 60000), port, tcp::flag::syn),
            n.now);
    }
}

// Sends b a SYN from kRaw:`sport` and returns b's SYN-ACK to it.
tcp::Segment raw_syn(Net& n, std::uint16_t sport, std::uint16_t dport = 80, tcp::Seq seq = 1000) {
    n.raw.clear();
    n.b.on_segment(kRaw, segment(kRaw, sport, dport, tcp::flag::syn, seq), n.now);
    n.pump();
    for (const Frame& f : n.raw) {
        if (f.dst != kRaw) continue;
        const tcp::Segment s = parse(f);
        if (s.dst_port == sport && s.has(tcp::flag::syn) && s.has(tcp::flag::ack)) return s;
    }
    ADD_FAILURE() << "no SYN-ACK to port " << sport;
    return {};
}

// The handshake's last ACK from kRaw:`sport`, for a SYN of sequence number `seq`.
void raw_ack(Net& n, std::uint16_t sport, tcp::Seq cookie, tcp::Seq seq = 1000,
             std::uint16_t dport = 80) {
    n.raw.clear();
    n.b.on_segment(kRaw, segment(kRaw, sport, dport, tcp::flag::ack, seq + 1, cookie + 1), n.now);
    n.pump();
}

bool raw_got_rst(const Net& n, std::uint16_t sport) {
    for (const Frame& f : n.raw) {
        if (f.dst != kRaw) continue;
        const tcp::Segment s = parse(f);
        if (s.dst_port == sport && s.has(tcp::flag::rst)) return true;
    }
    return false;
}

TEST(TcpStack, a_syn_flood_past_the_backlog_gets_cookies_and_a_real_client_connects_and_sends) {
    Net n;  // the defaults: 64 half-open for the port, 32 for one listener
    Server srv(n, 128);
    flood(n, 80, 500);
    n.pump();
    EXPECT_EQ(n.b.counters().syn_received.get(), 32u);
    EXPECT_EQ(n.b.counters().syn_backlog_full.get(), 468u);
    EXPECT_EQ(n.b.counters().syn_cookies_sent.get(), 468u);
    // The SYN backlog stays full: the client's SYN gets a cookie, its ACK makes the connection.
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    n.pump();
    ASSERT_EQ(client.count(TcpStreamEventKind::connected), 1u);
    ASSERT_EQ(srv.conns.size(), 1u);
    EXPECT_EQ(n.b.counters().syn_cookies_sent.get(), 469u);
    EXPECT_EQ(n.b.counters().syn_cookies_accepted.get(), 1u);
    EXPECT_EQ(n.b.counters().syn_cookies_rejected.get(), 0u);
    EXPECT_EQ(n.b.counters().syn_received.get(), 32u) << "the cookie connection skipped it";
    // The cookie kept A's MSS (1460 on a 1500 MTU); the options it cannot carry are off.
    EXPECT_EQ(n.b.mss(srv.conns[0]), 1460u);
    EXPECT_EQ(n.a.mss(c), 1460u);
    TcpFourTuple t;
    ASSERT_TRUE(n.b.four_tuple(srv.conns[0], t));
    EXPECT_EQ(t.remote_ip, kA);
    // And the stream flows both ways.
    std::vector<std::byte> reply(16);
    ASSERT_TRUE(n.a.post_receive(c, reply, 1));
    const char hello[] = "through a cookie";
    ASSERT_TRUE(n.a.send(c, std::as_bytes(std::span(hello, sizeof hello))));
    n.pump();
    ASSERT_EQ(n.b.received(srv.conns[0]), sizeof hello);
    EXPECT_EQ(std::memcmp(srv.bufs[0].data(), hello, sizeof hello), 0);
    ASSERT_TRUE(n.b.send(srv.conns[0], std::as_bytes(std::span(hello, 7))));
    n.pump();
    EXPECT_EQ(n.a.received(c), 7u);
    EXPECT_EQ(std::memcmp(reply.data(), hello, 7), 0);
}

TEST(TcpStack, an_ack_with_a_forged_cookie_is_rejected_with_rst) {
    Net n;
    Server srv(n, 128);
    flood(n, 80, 100);
    n.pump();
    const tcp::Segment synack = raw_syn(n, 5000);
    EXPECT_EQ(synack.ack, 1001u);
    EXPECT_EQ(synack.window, 0u);
    EXPECT_FALSE(synack.opts.has_wscale || synack.opts.sack_permitted ||
                 synack.opts.has_timestamps);
    const std::uint64_t rst_before = n.b.counters().rst_sent.get();
    // A guess, the cookie of another port, one with its MSS bits changed, one with its hash
    // bits changed, and the right cookie for a different peer ISN.
    raw_ack(n, 5001, 0x12345670);
    EXPECT_TRUE(raw_got_rst(n, 5001));
    raw_ack(n, 5001, synack.seq);
    raw_ack(n, 5000, synack.seq ^ 0x7);
    raw_ack(n, 5000, synack.seq ^ 0x100);
    raw_ack(n, 5000, synack.seq, 2000);
    EXPECT_TRUE(raw_got_rst(n, 5000));
    EXPECT_EQ(n.b.counters().syn_cookies_rejected.get(), 5u);
    EXPECT_EQ(n.b.counters().rst_sent.get(), rst_before + 5);
    EXPECT_EQ(n.b.counters().syn_cookies_accepted.get(), 0u);
    EXPECT_TRUE(srv.conns.empty());
    // The right one is taken: the peer's MSS was unknown (no option), so 536.
    raw_ack(n, 5000, synack.seq);
    EXPECT_EQ(n.b.counters().syn_cookies_accepted.get(), 1u);
    ASSERT_EQ(srv.conns.size(), 1u);
    EXPECT_EQ(n.b.mss(srv.conns[0]), 536u);
    EXPECT_FALSE(raw_got_rst(n, 5000));
}

TEST(TcpStack, a_cookie_is_good_for_its_time_slot_and_the_next_and_no_longer) {
    TcpStackConfig cb = config(kB);
    cb.syn_cookie_slot_ns = kSec;
    Net n(config(kA), cb);
    Server srv(n, 128);
    n.now = 10 * kSec;  // the start of a slot
    flood(n, 80, 40);
    n.pump();
    const tcp::Segment old = raw_syn(n, 6000);
    const tcp::Segment recent = raw_syn(n, 6001);
    n.now += kSec + 500 * kMs;  // the next slot
    raw_ack(n, 6001, recent.seq);
    EXPECT_EQ(n.b.counters().syn_cookies_accepted.get(), 1u);
    n.now += kSec;       // two slots after `old` was made: its slot bit is that of the current one
    flood(n, 80, 1, 8);  // the listener still sends cookies: ACKs are still checked
    raw_ack(n, 6000, old.seq);
    EXPECT_EQ(n.b.counters().syn_cookies_rejected.get(), 1u);
    EXPECT_TRUE(raw_got_rst(n, 6000));
    EXPECT_EQ(srv.conns.size(), 1u);
}

TEST(TcpStack, a_listener_that_sent_no_cookie_lately_answers_any_ack_with_rst_unchecked) {
    Net n;
    Server srv(n);
    raw_ack(n, 7000, 0x12345670);
    EXPECT_TRUE(raw_got_rst(n, 7000));
    EXPECT_EQ(n.b.counters().syn_cookies_rejected.get(), 0u);
}

TEST(TcpStack, a_good_cookie_that_finds_the_accept_queue_full_is_dropped) {
    TcpStackConfig cb = config(kB);
    cb.listener_syn_backlog = 1;
    Net n(config(kA), cb);
    Server srv(n, 2);
    srv.accepting = false;
    const tcp::Segment half_open = raw_syn(n, 8000);  // the listener's one SYN-RECEIVED place
    EXPECT_EQ(n.b.counters().syn_received.get(), 1u);
    const tcp::Segment c1 = raw_syn(n, 8001), c2 = raw_syn(n, 8002), c3 = raw_syn(n, 8003);
    EXPECT_EQ(n.b.counters().syn_cookies_sent.get(), 3u);
    raw_ack(n, 8001, c1.seq);
    raw_ack(n, 8002, c2.seq);
    EXPECT_EQ(srv.listener_events.count(TcpStreamEventKind::incoming), 2u);
    raw_ack(n, 8003, c3.seq);
    EXPECT_EQ(srv.listener_events.count(TcpStreamEventKind::incoming), 2u);
    EXPECT_EQ(n.b.counters().accept_queue_full.get(), 1u);
    EXPECT_EQ(n.b.counters().syn_cookies_accepted.get(), 2u);
    EXPECT_FALSE(raw_got_rst(n, 8003)) << "dropped: the peer's retransmission may find room";
    // A SYN now is dropped too, with no cookie; and the half-open one that completes finds
    // no room either, and is reset.
    n.raw.clear();
    n.b.on_segment(kRaw, segment(kRaw, 8004, 80, tcp::flag::syn), n.now);
    n.pump();
    EXPECT_TRUE(n.raw.empty());
    EXPECT_EQ(n.b.counters().accept_queue_full.get(), 2u);
    EXPECT_EQ(n.b.counters().syn_cookies_sent.get(), 3u);
    raw_ack(n, 8000, half_open.seq);
    EXPECT_EQ(n.b.counters().accept_queue_full.get(), 3u);
    EXPECT_TRUE(raw_got_rst(n, 8000));
    EXPECT_EQ(srv.listener_events.count(TcpStreamEventKind::incoming), 2u);
    EXPECT_EQ(n.b.counters().syn_received.get(), 0u);
}

TEST(TcpStack, a_flood_to_one_listener_leaves_syn_backlog_for_another) {
    TcpStackConfig cb = config(kB);
    cb.syn_cookies = false;  // the per-listener bound alone
    Net n(config(kA), cb);
    Server flooded(n, 128);
    Recorder other_events;
    TcpHandle other;
    ASSERT_EQ(n.b.listen(81, 16, other_events, other), 0);
    flood(n, 80, 200);
    n.pump();
    EXPECT_EQ(n.b.counters().syn_received.get(), 32u);
    EXPECT_EQ(n.b.counters().syn_backlog_full.get(), 168u);
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 81, client, c), 0);
    n.pump();
    EXPECT_EQ(client.count(TcpStreamEventKind::connected), 1u);
    EXPECT_EQ(other_events.count(TcpStreamEventKind::incoming), 1u);
    EXPECT_EQ(n.b.counters().syn_backlog_full.get(), 168u);
    // Two listeners flooded together cannot pass the port's bound.
    ASSERT_EQ(n.b.listen(82, 128, other_events, other), 0);
    ASSERT_EQ(n.b.listen(83, 128, other_events, other), 0);
    flood(n, 82, 100, 9);
    flood(n, 83, 100, 10);
    n.pump();
    EXPECT_EQ(n.b.counters().syn_received.get(), 64u);
}

TEST(TcpStack, one_peer_holds_at_most_max_per_peer_connections) {
    TcpStackConfig cb = config(kB);
    cb.max_per_peer = 3;
    Net n(config(kA), cb);
    Server srv(n);
    for (std::uint16_t p = 0; p < 5; ++p)
        n.b.on_segment(
            kRaw, segment(kRaw, static_cast<std::uint16_t>(3000 + p), 80, tcp::flag::syn), n.now);
    EXPECT_EQ(n.b.counters().syn_accepted.get(), 3u);
    EXPECT_EQ(n.b.counters().syn_peer_limit.get(), 2u);
    // Another peer is not affected.
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    n.pump();
    EXPECT_EQ(client.count(TcpStreamEventKind::connected), 1u);
    // And the stack refuses its own connects to a full peer.
    TcpStackConfig ca = config(kA);
    ca.max_per_peer = 1;
    Net m(ca, config(kB));
    Recorder r;
    TcpHandle h1, h2;
    EXPECT_EQ(m.a.bound_for(kB), TcpBound::none);
    EXPECT_EQ(m.a.connect(kB, 80, r, h1), 0);
    EXPECT_EQ(m.a.connect(kB, 80, r, h2), ENOBUFS);
    EXPECT_EQ(m.a.counters().connect_refused.get(), 1u);
    // Which bound it was, for the error the operator reads.
    EXPECT_EQ(m.a.bound_for(kB), TcpBound::per_peer);
    EXPECT_EQ(m.a.bound_for(kRaw), TcpBound::none);
}

TEST(TcpStack, a_syn_from_off_the_subnet_is_dropped) {
    Net n;
    Server srv(n);
    n.b.on_segment(kFar, segment(kFar, 1, 80, tcp::flag::syn), n.now);
    EXPECT_EQ(n.b.counters().syn_off_link.get(), 1u);
    EXPECT_EQ(n.b.counters().connections.get(), 0u);
    Recorder r;
    TcpHandle h;
    EXPECT_EQ(n.a.connect(kFar, 80, r, h), ENETUNREACH);
}

TEST(TcpStack, listeners_are_found_by_port_and_a_port_has_one) {
    Net n;
    Recorder l;
    TcpHandle h80, h81, dup;
    ASSERT_EQ(n.b.listen(80, 4, l, h80), 0);
    ASSERT_EQ(n.b.listen(81, 4, l, h81), 0);
    EXPECT_EQ(n.b.listen(80, 4, l, dup), EADDRINUSE);
    EXPECT_NE(h80, h81);
    Recorder c;
    TcpHandle x, y;
    ASSERT_EQ(n.a.connect(kB, 81, c, x), 0);
    n.pump();
    ASSERT_EQ(l.events.size(), 1u);
    EXPECT_EQ(l.events[0].listener, h81);
    // Closing 80 frees the port; 81 keeps working.
    n.b.close(h80);
    EXPECT_EQ(n.b.listen(80, 4, l, dup), 0);
    ASSERT_EQ(n.a.connect(kB, 81, c, y), 0);
    n.pump();
    EXPECT_EQ(l.events.size(), 2u);
    std::size_t total = 0;
    std::vector<TcpConnRow> rows(8);
    EXPECT_EQ(n.b.snapshot(0, rows, total), 4u);  // two listeners, two connections
    EXPECT_TRUE(rows[0].listener);
    EXPECT_FALSE(rows[3].listener);
    EXPECT_EQ(rows[3].info.state, tcp::TcpState::established);
}

TEST(TcpStack, closing_a_listener_resets_the_connections_it_did_not_hand_out) {
    Net n;
    Server srv(n);
    srv.accepting = false;
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    n.pump();
    ASSERT_EQ(client.count(TcpStreamEventKind::connected), 1u);
    n.b.close(srv.listener);
    n.pump();
    EXPECT_EQ(n.b.counters().listen_aborted.get(), 1u);
    EXPECT_EQ(client.count(TcpStreamEventKind::reset), 1u);
    EXPECT_EQ(n.b.counters().connections.get(), 0u);
}

TEST(TcpStack, an_aborted_connection_sends_rst_and_tells_its_owner_nothing_more) {
    Net n;
    Server srv(n);
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    n.pump();
    const std::size_t before = client.events.size();
    n.a.abort(c);
    n.pump();
    EXPECT_EQ(client.events.size(), before);
    EXPECT_EQ(srv.conn_events.count(TcpStreamEventKind::reset), 1u);
    EXPECT_EQ(n.a.counters().connections.get(), 0u);
    EXPECT_EQ(n.b.counters().connections.get(), 0u);
}

TEST(TcpStack, a_connection_not_accepted_offers_no_window_and_its_data_waits_for_accept) {
    Net n;
    Server srv(n);
    srv.accepting = false;
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    std::vector<std::byte> answer(16);
    ASSERT_TRUE(n.a.post_receive(c, answer, 1));  // room for B's FIN (a zero window refuses it)
    n.pump();
    const char req[] = "request";
    ASSERT_TRUE(n.a.send(c, std::as_bytes(std::span(req, sizeof req))));
    n.a.close(c);
    n.run_for(500 * kMs);
    ASSERT_EQ(srv.listener_events.count(TcpStreamEventKind::incoming), 1u);
    const TcpHandle in = srv.listener_events.events[0].conn;
    EXPECT_EQ(n.b.received(in), 0u);  // no buffer: a zero window
    Recorder late;
    ASSERT_EQ(n.b.accept(in, late), 0);
    EXPECT_EQ(n.b.accept(in, late), EISCONN);
    std::vector<std::byte> buf(64);
    ASSERT_TRUE(n.b.post_receive(in, buf, 1));
    n.run_for(5 * kSec);  // the window update, or A's probe
    EXPECT_EQ(n.b.received(in), sizeof req);
    ASSERT_EQ(late.count(TcpStreamEventKind::peer_closed), 1u);
    ASSERT_EQ(late.count(TcpStreamEventKind::recv_done), 1u);
    n.b.close(in);
    n.pump();
    tcp::TcpInfo ia;
    ASSERT_TRUE(n.a.info(c, ia));
    EXPECT_EQ(ia.state, tcp::TcpState::time_wait);
    EXPECT_EQ(late.count(TcpStreamEventKind::closed), 1u);
}

TEST(TcpStack, icmp_port_unreachable_to_our_syn_ends_the_open_and_others_are_soft) {
    Net n;
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kRaw, 80, client, c), 0);
    n.pump();
    ASSERT_EQ(n.raw.size(), 1u);
    const tcp::Segment syn = parse(n.raw[0]);
    IcmpUnreachable u;
    u.code = 3;
    u.src = kA;
    u.dst = kRaw;
    u.src_port = syn.src_port;
    u.dst_port = 80;
    u.seq = syn.seq + 1;  // not the one we sent: ignored (RFC 5927)
    n.a.on_icmp_unreachable(u, n.now);
    EXPECT_EQ(n.a.counters().icmp_soft.get(), 1u);
    EXPECT_TRUE(client.events.empty());
    u.code = 4;
    n.a.on_icmp_unreachable(u, n.now);
    EXPECT_EQ(n.a.counters().icmp_frag_needed.get(), 1u);
    EXPECT_EQ(n.a.counters().pmtu_ignored.get(), 1u);  // SYN-SENT: nothing to lower yet
    u.dst_port = 81;
    n.a.on_icmp_unreachable(u, n.now);
    EXPECT_EQ(n.a.counters().icmp_no_connection.get(), 1u);
    u.dst_port = 80;
    u.code = 3;
    u.seq = syn.seq;
    n.a.on_icmp_unreachable(u, n.now);
    ASSERT_EQ(client.events.size(), 1u);
    EXPECT_EQ(client.events[0].kind, TcpStreamEventKind::unreachable);
    EXPECT_EQ(n.a.counters().ended_unreachable.get(), 1u);
    EXPECT_EQ(n.a.counters().connections.get(), 0u);
}

TEST(TcpStack, icmp_frag_needed_for_a_live_connection_lowers_its_mss_and_resends_cut_to_it) {
    Net n;
    Server srv(n);
    Recorder client;
    TcpHandle c;
    ASSERT_EQ(n.a.connect(kB, 80, client, c), 0);
    n.pump();
    ASSERT_EQ(srv.conns.size(), 1u);
    EXPECT_EQ(n.a.mss(c), 1500u - 40 - 12);
    std::vector<std::byte> rec(3000);
    for (std::size_t i = 0; i < rec.size(); ++i) rec[i] = static_cast<std::byte>(i * 7);
    ASSERT_TRUE(n.a.send(c, rec));
    n.a.poll(n.now);
    ASSERT_EQ(n.wire.size(), 3u);  // 1448, 1448, 104
    const tcp::Segment first = parse(n.wire.front());
    n.wire.clear();  // a hop of MTU 1280 dropped them all
    tcp::TcpInfo before;
    ASSERT_TRUE(n.a.info(c, before));
    TcpFourTuple t;
    ASSERT_TRUE(n.a.four_tuple(c, t));
    IcmpUnreachable u;
    u.code = 4;
    u.next_mtu = 1280;
    u.src = kA;
    u.dst = kB;
    u.protocol = static_cast<std::uint8_t>(net::IpProto::tcp);
    u.quoted_length = 1500;
    u.src_port = t.local_port;
    u.dst_port = 80;
    u.seq = first.seq + 3000;  // not in flight: forged or stale (RFC 5927 §4.1)
    n.a.on_icmp_unreachable(u, n.now);
    u.seq = first.seq + 100;
    u.next_mtu = 1500;  // not below the MTU in use
    n.a.on_icmp_unreachable(u, n.now);
    EXPECT_EQ(n.a.counters().pmtu_ignored.get(), 2u);
    EXPECT_EQ(n.a.mss(c), 1448u);
    EXPECT_EQ(client.count(TcpStreamEventKind::mss_changed), 0u);
    u.next_mtu = 1280;
    n.a.on_icmp_unreachable(u, n.now);
    EXPECT_EQ(n.a.counters().icmp_frag_needed.get(), 3u);
    EXPECT_EQ(n.a.counters().pmtu_lowered.get(), 1u);
    ASSERT_EQ(client.count(TcpStreamEventKind::mss_changed), 1u);
    EXPECT_EQ(client.events.back().bytes, 1280u - 40 - 12);
    EXPECT_EQ(n.a.mss(c), 1280u - 40 - 12);
    tcp::TcpInfo after;
    ASSERT_TRUE(n.a.info(c, after));
    EXPECT_EQ(after.mss, 1228u);
    EXPECT_EQ(after.cwnd, before.cwnd);
    n.a.poll(n.now);               // the flight again, cut to the new MSS
    ASSERT_EQ(n.wire.size(), 3u);  // 1228, 1228, 544
    for (const Frame& f : n.wire) EXPECT_LE(f.bytes.size() + 20, 1280u);
    n.pump();
    ASSERT_EQ(n.b.received(srv.conns[0]), rec.size());
    EXPECT_EQ(std::memcmp(srv.bufs[0].data(), rec.data(), rec.size()), 0);
    EXPECT_EQ(n.a.counters(c)->retransmits.get(), 3u);
    EXPECT_EQ(n.a.counters(c)->timeouts.get(), 0u);
}

TEST(TcpStack, a_new_mtu_is_announced_on_new_connections_and_one_too_small_is_refused) {
    Net n;
    Server srv(n);
    Recorder first, second;
    TcpHandle c1, c2;
    ASSERT_EQ(n.a.connect(kB, 80, first, c1), 0);
    n.pump();
    ASSERT_EQ(first.count(TcpStreamEventKind::connected), 1u);
    EXPECT_EQ(n.a.mss(c1), 1448u);  // 1500 less IP, TCP and the timestamps

    // The port's interface went to MTU 1280 (a shared-address port following it).
    ASSERT_TRUE(n.b.readdress(kB, 1280));
    EXPECT_EQ(n.b.config().conn.mtu, 1280u);
    ASSERT_EQ(n.a.connect(kB, 80, second, c2), 0);
    n.pump();
    ASSERT_EQ(second.count(TcpStreamEventKind::connected), 1u);
    EXPECT_EQ(n.a.mss(c2), 1228u) << "B's SYN-ACK did not announce its new MSS";
    EXPECT_EQ(n.a.mss(c1), 1448u) << "a connection made before kept what it had";
    ASSERT_EQ(srv.conns.size(), 2u);
    const char hello[] = "after the change";
    ASSERT_TRUE(n.a.send(c2, std::as_bytes(std::span(hello, sizeof hello))));
    n.pump();
    EXPECT_EQ(n.b.received(srv.conns[1]), sizeof hello);

    // Too small for a TCP segment: refused, and nothing changed.
    EXPECT_FALSE(n.b.readdress(kA, 60));
    EXPECT_EQ(n.b.config().conn.mtu, 1280u);
    EXPECT_EQ(n.b.config().local_ip, kB);
}

TEST(TcpStack, a_stale_handle_never_reaches_the_connection_that_took_its_slot) {
    TcpStackConfig ca = config(kA);
    ca.max_connections = 1;
    Net n(ca, config(kB));
    Server srv(n);
    Recorder r;
    TcpHandle first, second;
    ASSERT_EQ(n.a.connect(kB, 80, r, first), 0);
    EXPECT_EQ(n.a.connect(kB, 80, r, second), ENOBUFS);  // one slot
    EXPECT_EQ(n.a.bound_for(kRaw), TcpBound::connections);
    n.a.abort(first);
    n.pump();
    ASSERT_EQ(n.a.connect(kB, 80, r, second), 0);
    EXPECT_NE(first, second);
    n.pump();
    const char x = 'x';
    EXPECT_FALSE(n.a.send(first, std::as_bytes(std::span(&x, 1))));
    n.a.abort(first);  // nothing happens to `second`
    n.a.close(first);
    EXPECT_TRUE(n.a.send(second, std::as_bytes(std::span(&x, 1))));
    EXPECT_EQ(n.a.counters().connections.get(), 1u);
}

TEST(TcpStack, many_connections_come_and_go_and_each_segment_finds_its_own) {
    TcpStackConfig ca = config(kA);
    ca.max_connections = 64;
    ca.max_per_peer = 64;
    TcpStackConfig cb = ca;
    cb.local_ip = kB;
    Net n(ca, cb);
    Server srv(n, 64);
    std::mt19937 rng(11);
    Recorder client;
    std::vector<TcpHandle> clients;
    for (int round = 0; round < 300; ++round) {
        if (clients.size() < 40 || rng() % 2 == 0) {
            TcpHandle h;
            if (n.a.connect(kB, 80, client, h) == 0) clients.push_back(h);
        } else {
            const std::size_t i = rng() % clients.size();
            n.a.abort(clients[i]);
            clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
        }
        n.pump();
    }
    // Each remaining client's byte lands in its own server connection.
    for (std::size_t i = 0; i < clients.size(); ++i) {
        const char b = static_cast<char>(i);
        ASSERT_TRUE(n.a.send(clients[i], std::as_bytes(std::span(&b, 1))));
    }
    n.pump();
    std::size_t live = 0, got = 0;
    for (std::size_t k = 0; k < srv.conns.size(); ++k) {
        if (n.b.received(srv.conns[k]) == 1) ++got;
        tcp::TcpInfo info;
        if (n.b.info(srv.conns[k], info)) ++live;
    }
    EXPECT_EQ(live, clients.size());
    EXPECT_EQ(got, clients.size());
    EXPECT_EQ(n.a.counters().connections.get(), clients.size());
}

}  // namespace
}  // namespace snic::daemon
