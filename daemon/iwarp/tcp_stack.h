// The TCP of one port: the engines (proto/tcp) of its connections, on the port's lcore. It
// takes every TCP segment and ICMP error addressed to the port, finds the connection by its
// 4-tuple (or the listener by its port), lowers a connection's MSS when an ICMP says the path
// needs it (RFC 1191), creates passive connections within its bounds,
// answers segments for no connection with RST, runs each engine when a segment, a call or
// its deadline says so (daemon/lcore/qp_sched.h, as the QPs), and delivers the engines' events to
// their owners through the byte-stream API (daemon/iwarp/tcp_stream.h).
//
// Bounds, so that a flood costs memory the operator can name (`memory_bound` below):
//   max_connections  engines at once, any state (each memory_per_connection() bytes)
//   syn_backlog      connections in SYN-RECEIVED at once, all listeners together: a cap on
//                    the memory half-open connections hold
//   listener_syn_backlog  connections in SYN-RECEIVED at once for one listener, so that a
//                    flood to one port leaves room in syn_backlog for the others
//   a listener's backlog  its SYN-RECEIVED connections plus those waiting for accept(); the
//                    accept queue alone never holds more
//   max_per_peer     connections at once with one remote address
// A SYN that finds a SYN backlog full (the port's or its listener's) is answered with a SYN
// cookie (RFC 4987 §3.6, as Linux does): a SYN-ACK whose ISN encodes what the connection
// needs (proto/tcp/isn.h), no state kept. The final ACK, if its cookie checks out, makes the
// connection in ESTABLISHED, without window scaling, SACK or timestamps (the cookie cannot
// carry them). A SYN past any other bound is dropped and counted by reason: the peer retries,
// and established connections are not touched.
//
// Pure, like the engines: no DPDK. Frames leave through TcpLink (the port's IPv4 framing,
// ARP and tx path: daemon/iwarp/tcp_service.h), so tests run it over a fake link. Connections are
// allocated when made (connect(), or a SYN a listener takes), never per segment.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/counter.h"
#include "daemon/iwarp/tcp_stream.h"
#include "daemon/lcore/qp_sched.h"
#include "proto/net/addr.h"
#include "proto/net/icmp.h"
#include "proto/tcp/connection.h"

namespace snic::daemon {

// The port under a stack: IPv4 and Ethernet around each segment.
class TcpLink {
  public:
    // Room for a segment of `len` bytes (TCP header on) to `remote`; empty when none now (no
    // mbuf: the engine tries again on its next poll). A frame to a peer whose MAC is still
    // being resolved may be given room and dropped at tx_send (the engine retransmits).
    virtual std::span<std::uint8_t> tx_alloc(net::Ipv4Addr remote, std::size_t len) = 0;
    // Sends the segment written into that room: its checksum complete, or with
    // conn.tx_checksum_offload the pseudo-header's sum for the device to complete (every
    // segment of the stack, its own RSTs and SYN cookies too).
    virtual void tx_send(std::size_t len) = 0;
    // Whether `ip` can be reached (on the port's subnet: there is no gateway).
    virtual bool on_link(net::Ipv4Addr ip) const = 0;

  protected:
    ~TcpLink() = default;
};

// Which bound keeps a connection from being made (TcpStack::bound_for).
enum class TcpBound : std::uint8_t { none, per_peer, connections };

struct TcpStackConfig {
    net::Ipv4Addr local_ip;
    tcp::TcpConfig conn;  // every connection's (local and remote are filled in per connection)
    std::uint32_t max_connections = 256;
    std::uint32_t syn_backlog = 64;
    std::uint32_t listener_syn_backlog = 32;  // at most syn_backlog
    bool syn_cookies = true;
    // A cookie is good for the slot it was made in and the next (64 to 128 s, as Linux's).
    std::uint64_t syn_cookie_slot_ns = 64'000'000'000;
    std::uint32_t max_per_peer = 64;
    std::uint32_t max_listeners = 16;
    std::uint32_t max_listen_backlog = 128;
    std::uint32_t passive_syn_retries = 3;  // SYN-ACK retransmissions (1+2+4+8 s, then gone)
    std::uint16_t ephemeral_first = 49152;  // RFC 6335 §6
    std::uint16_t ephemeral_last = 65535;
};

// Why a config cannot be used, or nullptr.
const char* tcp_stack_config_error(const TcpStackConfig& c);

// --- buffers from the bandwidth-delay product ------------------------------------------------
// A connection's send buffer and receive window, in bytes, for a link of `link_mbps` (Mb/s;
// 0: unknown, taken as 10 Gb/s) whose round trips last up to `rtt_us`: twice the product,
// the window in flight and the next one queued behind it (or being read out of the receive
// buffers while the peer fills the rest), as Linux's autotuning gives its buffers twice the
// window they carry. A power of two (iWARP's receive ring splits it in four, and finds a
// stream offset's buffer by a shift), at least kMinTcpWindow, at most kMaxTcpWindow.
inline constexpr std::uint32_t kMinTcpWindow = 128 * 1024;
inline constexpr std::uint32_t kMaxTcpWindow = 16 * 1024 * 1024;
inline constexpr std::uint32_t kDefaultLinkMbps = 10'000;
std::uint32_t tcp_window_for(std::uint32_t link_mbps, std::uint32_t rtt_us);
// Sizes c's send buffer, its records' table and its receive window for `window` bytes.
void size_tcp_buffers(tcp::TcpConfig& c, std::uint32_t window);

// The stack's counters (per port); the engines count per connection.
struct TcpStackCounters {
    Counter segments_in;           // segments that reached the stack
    Counter checksum_offloaded;    // ... whose checksum the port's device had found good
    Counter bad_segment;           // parse_segment() refused them (by reason below)
    Counter to_connection;         // handed to a connection's engine
    Counter rst_sent;              // RSTs for segments to no connection or closed port
    Counter no_listener;           // segments (SYNs among them) to a port nobody listens on
    Counter syn_accepted;          // SYNs a listener took: a passive connection
    Counter syn_backlog_full;      // SYNs that found the SYN backlog (the port's or the
                                   // listener's) full: answered with a cookie, or dropped when
                                   // syn_cookies is off
    Counter accept_queue_full;     // SYNs and cookie ACKs dropped, and handshakes that completed
                                   // aborted: the listener's accept queue was full
    Counter syn_cookies_sent;      // SYN-ACKs sent as cookies
    Counter syn_cookies_accepted;  // final ACKs whose cookie checked out
    Counter syn_cookies_rejected;  // ACKs to a listener that sent cookies lately, with no
                                   // good cookie: answered with RST
    Counter syn_peer_limit;        // SYNs dropped: that peer holds max_per_peer connections
    Counter syn_table_full;        // SYNs dropped: max_connections reached
    Counter syn_off_link;          // SYNs dropped: from an address we cannot answer (no gateway)
    Counter connect_refused;       // connect() calls refused (bounds, addresses, ports)
    Counter active_opens, passive_opens;  // connections made
    Counter established;                  // connections that reached ESTABLISHED
    Counter accepted;                     // incoming connections accept()ed
    Counter listen_aborted;               // incoming connections aborted: their listener closed
    Counter ended_closed, ended_reset, ended_timed_out, ended_unreachable;  // terminal events
    Counter icmp_errors;         // ICMP destination unreachable quoting a segment of ours
    Counter icmp_no_connection;  // quoting no connection (or not our address)
    Counter icmp_hard;           // port/protocol/host unreachable to a SYN: the open failed
    Counter icmp_soft;           // to a synchronized connection: counted, not acted on (RFC 5461)
    Counter icmp_frag_needed;    // fragmentation needed (RFC 1191) to a connection
    Counter pmtu_lowered;        // ... that lowered its MSS (the owner heard mss_changed)
    Counter pmtu_ignored;        // ... not acted on: no MTU to take, the quoted sequence number
                                 // not in flight (RFC 5927 §4.1), the connection not
                                 // synchronized, or the MTU not below the one in use
    Counter events_delivered;
    Counter connections;                  // gauge: live connections (any state)
    Counter syn_received;                 // gauge: connections in SYN-RECEIVED
    Counter listeners;                    // gauge
    Counter memory_bytes;                 // gauge: what the live connections hold
    Counter memory_bound;                 // max_connections * memory_per_connection()
    Counter send_buffer, recv_window;     // each connection's (size_tcp_buffers)
    std::array<Counter, 5> parse_errors;  // by tcp::ParseError (none unused)
};

struct TcpStackCounterField {
    std::string_view name;
    Counter TcpStackCounters::*field;
};
inline constexpr std::array<TcpStackCounterField, 40> kTcpStackCounterFields = {{
    {"segments_in", &TcpStackCounters::segments_in},
    {"checksum_offloaded", &TcpStackCounters::checksum_offloaded},
    {"bad_segment", &TcpStackCounters::bad_segment},
    {"to_connection", &TcpStackCounters::to_connection},
    {"rst_sent", &TcpStackCounters::rst_sent},
    {"no_listener", &TcpStackCounters::no_listener},
    {"syn_accepted", &TcpStackCounters::syn_accepted},
    {"syn_backlog_full", &TcpStackCounters::syn_backlog_full},
    {"accept_queue_full", &TcpStackCounters::accept_queue_full},
    {"syn_cookies_sent", &TcpStackCounters::syn_cookies_sent},
    {"syn_cookies_accepted", &TcpStackCounters::syn_cookies_accepted},
    {"syn_cookies_rejected", &TcpStackCounters::syn_cookies_rejected},
    {"syn_peer_limit", &TcpStackCounters::syn_peer_limit},
    {"syn_table_full", &TcpStackCounters::syn_table_full},
    {"syn_off_link", &TcpStackCounters::syn_off_link},
    {"connect_refused", &TcpStackCounters::connect_refused},
    {"active_opens", &TcpStackCounters::active_opens},
    {"passive_opens", &TcpStackCounters::passive_opens},
    {"established", &TcpStackCounters::established},
    {"accepted", &TcpStackCounters::accepted},
    {"listen_aborted", &TcpStackCounters::listen_aborted},
    {"ended_closed", &TcpStackCounters::ended_closed},
    {"ended_reset", &TcpStackCounters::ended_reset},
    {"ended_timed_out", &TcpStackCounters::ended_timed_out},
    {"ended_unreachable", &TcpStackCounters::ended_unreachable},
    {"icmp_errors", &TcpStackCounters::icmp_errors},
    {"icmp_no_connection", &TcpStackCounters::icmp_no_connection},
    {"icmp_hard", &TcpStackCounters::icmp_hard},
    {"icmp_soft", &TcpStackCounters::icmp_soft},
    {"icmp_frag_needed", &TcpStackCounters::icmp_frag_needed},
    {"pmtu_lowered", &TcpStackCounters::pmtu_lowered},
    {"pmtu_ignored", &TcpStackCounters::pmtu_ignored},
    {"events_delivered", &TcpStackCounters::events_delivered},
    {"connections", &TcpStackCounters::connections},
    {"syn_received", &TcpStackCounters::syn_received},
    {"listeners", &TcpStackCounters::listeners},
    {"memory_bytes", &TcpStackCounters::memory_bytes},
    {"memory_bound", &TcpStackCounters::memory_bound},
    {"send_buffer", &TcpStackCounters::send_buffer},
    {"recv_window", &TcpStackCounters::recv_window},
}};

// What an ICMP destination unreachable says (proto/net/icmp.h reads it).
using IcmpUnreachable = net::IcmpUnreachable;

// One row of `snicctl tcp`: a listener or a connection.
struct TcpConnRow {
    bool listener = false;
    TcpFourTuple tuple;
    tcp::TcpInfo info;  // connections
    std::uint64_t bytes_sent = 0, bytes_acked = 0, bytes_received = 0;
    std::uint64_t segments_in = 0, segments_out = 0;
    std::uint64_t retransmits = 0, fast_retransmits = 0, timeouts = 0;
    std::uint32_t backlog = 0, queued = 0;  // listeners: bound, and waiting for accept()
};

class TcpStack final : public TcpStreams {
  public:
    TcpStack(const TcpStackConfig& config, TcpLink& link);
    ~TcpStack();
    TcpStack(const TcpStack&) = delete;
    TcpStack& operator=(const TcpStack&) = delete;

    // --- the lcore's datapath ---
    // One segment from `src` to the port: `bytes` from the TCP header to the end of the IP
    // payload, its checksum still to check unless the port's device found it good
    // (`checksum_verified`). Valid for the call only.
    void on_segment(net::Ipv4Addr src, std::span<const std::uint8_t> bytes, std::uint64_t now_ns,
                    bool checksum_verified = false);
    void on_icmp_unreachable(const IcmpUnreachable& icmp, std::uint64_t now_ns);
    // Runs the connections with work or a deadline due; true when any did something.
    bool poll(std::uint64_t now_ns);

    // --- TcpStreams (daemon/iwarp/tcp_stream.h) ---
    int listen(std::uint16_t port, std::uint32_t backlog, TcpStreamOwner& owner,
               TcpHandle& out) override;
    int connect(net::Ipv4Addr ip, std::uint16_t port, TcpStreamOwner& owner, TcpHandle& out,
                std::uint16_t local_port = 0) override;
    int accept(TcpHandle conn, TcpStreamOwner& owner) override;
    bool send(TcpHandle conn, std::span<const std::byte> record) override;
    bool post_receive(TcpHandle conn, std::span<std::byte> buffer, std::uint64_t cookie) override;
    void close(TcpHandle h) override;
    void abort(TcpHandle h) override;
    std::uint32_t mss(TcpHandle conn) const override;
    std::size_t send_space(TcpHandle conn) const override;
    std::uint64_t received(TcpHandle conn) const override;
    bool info(TcpHandle conn, tcp::TcpInfo& out) const override;
    bool four_tuple(TcpHandle conn, TcpFourTuple& out) const override;
    const tcp::TcpCounters* counters(TcpHandle conn) const override;

    // --- views ---
    const TcpStackCounters& counters() const { return counters_; }
    const SchedCounters& sched_counters() const { return sched_.counters(); }
    const TcpStackConfig& config() const { return cfg_; }
    // The lcore: the port's new address and MTU (a shared-address port whose interface
    // changed), for the connections opened or accepted from here on; those open keep their
    // own. False, and nothing changed, when the MTU is one a connection cannot use.
    bool readdress(net::Ipv4Addr ip, std::uint16_t mtu);
    // The lcore: rows for the listeners, then the connections, from row `first` on; the number
    // written. `total` gets the number of rows there are.
    std::size_t snapshot(std::size_t first, std::span<TcpConnRow> out, std::size_t& total) const;
    // Calls fn(name, value) for every stack counter.
    template <typename F>
    void for_each_counter(F&& f) const;
    // What one connection's engine holds.
    static std::uint64_t memory_per_connection(const tcp::TcpConfig& c);
    // The lcore: whether a listener or a connection (in any state, TIME-WAIT too) has local
    // port `port`.
    bool uses_port(std::uint16_t port) const;
    // The lcore: the bound a connect() to `remote` would hit now (ENOBUFS), if any.
    TcpBound bound_for(net::Ipv4Addr remote);

  private:
    struct Conn;
    struct Listener;
    // Open addressing, linear probing, backward-shift deletion, sized once.
    class Index {
      public:
        Index(std::uint32_t entries, std::uint64_t seed);
        std::uint32_t* find(std::uint64_t key);
        // Inserts `key` (absent) with `value`; false when full.
        bool insert(std::uint64_t key, std::uint32_t value);
        void erase(std::uint64_t key);

      private:
        std::uint32_t home(std::uint64_t key) const;
        struct Slot {
            std::uint64_t key = 0;
            std::uint32_t value = 0;
            bool used = false;
        };
        std::vector<Slot> slots_;
        std::uint32_t mask_ = 0, size_ = 0;
        std::uint64_t seed_ = 0;
    };

    static std::uint64_t conn_key(net::Ipv4Addr remote, std::uint16_t rport, std::uint16_t lport);
    Conn* conn(TcpHandle h) const;
    Listener* listener(TcpHandle h) const;
    Listener* listener_on(std::uint16_t port) const;
    // A new connection in a free slot (nullptr: none); counted per peer and indexed.
    Conn* make_conn(net::Ipv4Addr remote, std::uint16_t rport, std::uint16_t lport, bool passive);
    int refuse_connect(int err);
    void accept_syn(Listener& l, net::Ipv4Addr src, const tcp::Segment& seg);
    void send_cookie(Listener& l, net::Ipv4Addr to, const tcp::Segment& syn);
    // True when `seg` (an ACK to listener `l`) was taken as a handshake's last ACK by cookie,
    // or dropped; false when it is to be answered with RST.
    bool cookie_ack(Listener& l, net::Ipv4Addr src, const tcp::Segment& seg);
    std::uint64_t cookie_slot() const { return now_ / cfg_.syn_cookie_slot_ns; }
    void send_reset(net::Ipv4Addr to, const tcp::Segment& seg);
    void frag_needed(Conn& c, const IcmpUnreachable& icmp);
    // Delivers the engine's events to their owners; a terminal one marks the connection dead.
    void drain(Conn& c);
    void deliver(TcpStreamOwner* owner, const TcpStreamEvent& e);
    void end(Conn& c, TcpStreamEventKind why);
    // Frees the dead connections (after their last output).
    void reap();
    void free_conn(Conn& c);
    std::uint16_t pick_ephemeral(net::Ipv4Addr remote, std::uint16_t rport);

    TcpStackConfig cfg_;
    TcpLink& link_;
    const std::uint64_t per_conn_bytes_;
    TcpStackCounters counters_;
    std::vector<std::unique_ptr<Conn>> conns_;  // by slot
    std::vector<std::uint16_t> conn_gen_;       // by slot: the generation of its next handle
    std::vector<std::uint32_t> free_slots_;
    std::vector<std::unique_ptr<Listener>> listeners_;
    std::vector<std::uint16_t> listener_gen_;
    Index by_tuple_;  // conn_key -> slot
    Index by_peer_;   // remote address -> connections
    QpScheduler sched_;
    std::vector<Conn*> dead_;  // terminal, freed by reap()
    std::uint64_t now_ = 0;
    std::uint32_t syn_received_ = 0;
    std::uint16_t next_ephemeral_;
    std::uint32_t live_ = 0;
};

template <typename F>
void TcpStack::for_each_counter(F&& f) const {
    for (const auto& field : kTcpStackCounterFields) f(field.name, (counters_.*field.field).get());
    f(std::string_view("bad_checksum"),
      counters_.parse_errors[static_cast<std::size_t>(tcp::ParseError::bad_checksum)].get());
    f(std::string_view("bad_offset"),
      counters_.parse_errors[static_cast<std::size_t>(tcp::ParseError::bad_offset)].get());
    f(std::string_view("bad_option"),
      counters_.parse_errors[static_cast<std::size_t>(tcp::ParseError::bad_option)].get());
    f(std::string_view("too_short"),
      counters_.parse_errors[static_cast<std::size_t>(tcp::ParseError::too_short)].get());
}

}  // namespace snic::daemon
