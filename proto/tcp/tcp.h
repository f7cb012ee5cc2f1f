// The TCP engine's types: its configuration, the wire it sends through, the events it
// reports, its states and counters. connection.h is the engine itself.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/counter.h"
#include "proto/tcp/isn.h"
#include "proto/tcp/rto.h"
#include "proto/tcp/segment.h"

namespace snic::tcp {

// --- the wire --------------------------------------------------------------------------------

// The connection's transmit path, as RcWire (proto/roce/rc.h): tx_alloc(len) returns `len`
// bytes for one TCP segment (header through payload; the owner adds IP and Ethernet in
// front), or an empty span when the path is full: the engine stops and tries again on its
// next poll. tx_send(len) sends the segment just allocated.
class TcpWire {
  public:
    virtual std::span<std::uint8_t> tx_alloc(std::size_t len) = 0;
    virtual void tx_send(std::size_t len) = 0;

  protected:
    ~TcpWire() = default;
};

// --- configuration ---------------------------------------------------------------------------

struct TcpConfig {
    Endpoint local;
    Endpoint remote;
    // Path MTU: the MSS we announce is mtu minus the IP (20 or 40) and TCP (20) headers;
    // we send at most min(that, the peer's MSS) bytes of payload less our options, and
    // less again when path MTU discovery learns of a smaller hop (on_path_mtu()).
    std::uint32_t mtu = 1500;
    std::uint32_t send_buffer = 256 * 1024;  // bytes queued and not yet acknowledged
    std::uint32_t max_records = 1024;        // records queued and not yet acknowledged
    std::uint32_t recv_window = 256 * 1024;  // the most we advertise (sizes the window scale)
    std::uint32_t max_recv_buffers = 64;     // receive buffers posted at once
    bool sack = true;                        // offer SACK (RFC 2018)
    bool timestamps = true;                  // offer timestamps (RFC 7323)
    bool window_scale = true;                // offer window scaling (RFC 7323)
    IsnKey isn_key{};                        // the owner's secret (RFC 6528)
    TcpTime rto_initial = 1 * kSec;          // RFC 6298 §2.1
    TcpTime rto_min = 200 * kMs;             // RFC 6298 §2.4 says 1 s; Linux uses 200 ms
    TcpTime rto_max = 60 * kSec;
    std::uint32_t max_retries = 15;  // RTO expiries without progress before timed_out
    std::uint32_t syn_retries = 6;   // SYN or SYN-ACK retransmissions before timed_out
    TcpTime delayed_ack = 40 * kMs;  // RFC 9293 §3.8.6.3: under 0.5 s
    TcpTime msl = 30 * kSec;         // TIME-WAIT lasts 2 * msl
    // How long FIN-WAIT-2 waits for the peer's FIN once ours is acknowledged (Linux's
    // tcp_fin_timeout): a peer that never closes does not hold the connection for ever. Then
    // RST, and timed_out. snic's close() ends both directions, so the bound always applies.
    TcpTime fin_wait_2_timeout = 60 * kSec;
    bool keepalive = false;
    TcpTime keepalive_idle = 7200 * kSec;  // RFC 9293 §3.8.4: no less than two hours
    TcpTime keepalive_interval = 75 * kSec;
    std::uint32_t keepalive_probes = 9;
    std::uint32_t challenge_acks_per_second = 10;  // RFC 5961 §7
    std::uint32_t max_burst = 64;                  // segments sent per poll()
    // The device completes the checksum (TCP checksum offload): each segment leaves with the
    // pseudo-header's sum, folded, in its checksum field, and the payload is only copied.
    bool tx_checksum_offload = false;
};

// Why the config cannot be used, or nullptr.
const char* tcp_config_error(const TcpConfig& c);

// --- states and events -----------------------------------------------------------------------

// RFC 9293 §3.3.2. LISTEN belongs to the owner's listener table: a passive connection is
// born in SYN-RECEIVED from the SYN the listener took.
enum class TcpState : std::uint8_t {
    closed,
    syn_sent,
    syn_received,
    established,
    fin_wait_1,
    fin_wait_2,
    close_wait,
    closing,
    last_ack,
    time_wait,
};
inline constexpr std::array<std::string_view, 10> kTcpStateNames = {
    "CLOSED",     "SYN-SENT",   "SYN-RECEIVED", "ESTABLISHED", "FIN-WAIT-1",
    "FIN-WAIT-2", "CLOSE-WAIT", "CLOSING",      "LAST-ACK",    "TIME-WAIT",
};
constexpr std::string_view state_name(TcpState s) {
    return kTcpStateNames[static_cast<std::size_t>(s)];
}

enum class EventKind : std::uint8_t {
    connected,    // ESTABLISHED reached
    readable,     // in-order bytes were placed; `bytes` is the total received so far
    recv_done,    // a posted buffer completed: `cookie`, `bytes` placed in it
    send_space,   // send() refused a record earlier and there is room again
    peer_closed,  // the peer's FIN arrived in order (no more bytes will come)
    closed,       // the connection is over (orderly close, or TIME-WAIT ended)
    reset,        // the peer reset it (or refused the SYN)
    timed_out,    // retransmissions, SYN retries, keepalive probes or FIN-WAIT-2's wait for
                  // the peer's FIN ran out; RST sent
};
inline constexpr std::array<std::string_view, 8> kEventNames = {
    "connected",   "readable", "recv_done", "send_space",
    "peer_closed", "closed",   "reset",     "timed_out",
};

struct TcpEvent {
    EventKind kind = EventKind::connected;
    std::uint64_t cookie = 0;  // recv_done: the buffer's cookie
    std::uint64_t bytes = 0;   // recv_done: bytes in the buffer; readable: total in order
};

// --- counters --------------------------------------------------------------------------------

using TcpCounter = snic::Counter;

struct TcpCounters {
    TcpCounter segments_in, segments_out;
    TcpCounter bytes_sent;      // payload bytes sent (first transmissions)
    TcpCounter bytes_acked;     // payload bytes the peer acknowledged
    TcpCounter bytes_received;  // payload bytes delivered in order
    TcpCounter retransmits;     // segments sent again, for any reason
    TcpCounter fast_retransmits;
    TcpCounter limited_transmits;  // new segments sent on the first two duplicate ACKs
    TcpCounter rack_losses;        // transmissions RACK found lost (RFC 8985 §6)
    TcpCounter tlp_probes;         // tail-loss probes sent (RFC 8985 §7)
    TcpCounter dsacks_in;          // D-SACK blocks received: the peer got bytes twice (RFC 2883)
    TcpCounter dsacks_out;         // D-SACK blocks sent
    TcpCounter undos;     // recoveries and timeouts undone: every resend was D-SACKed (RFC 3708)
    TcpCounter timeouts;  // RTO expiries
    TcpCounter dup_acks;
    TcpCounter sack_blocks_in;   // SACK blocks received
    TcpCounter sack_blocks_out;  // SACK blocks sent
    TcpCounter ooo_segments;     // segments queued out of order
    TcpCounter ooo_dropped;      // out-of-order segments dropped: the block list was full
    TcpCounter dup_segments;     // segments wholly below RCV.NXT
    TcpCounter bad_seq;          // segments failing the acceptability test
    TcpCounter paws_drops;       // RFC 7323: PAWS rejections, and segments lacking the agreed TSopt
    TcpCounter challenge_acks;   // RFC 5961
    TcpCounter challenge_acks_suppressed;
    TcpCounter bad_ack;  // ACKs outside the acceptable range
    TcpCounter rst_in, rst_out;
    TcpCounter window_probes;  // zero-window probes sent
    TcpCounter keepalive_probes;
    TcpCounter delayed_acks;         // ACKs sent by the delayed-ACK timer
    TcpCounter tx_full;              // tx_alloc refused
    TcpCounter beyond_window;        // payload bytes trimmed: beyond the receive window
    TcpCounter events_lost;          // the event queue was full (the owner did not drain it)
    TcpCounter pmtu_lowered;         // on_path_mtu() lowered the MSS (RFC 1191)
    TcpCounter fin_wait_2_timeouts;  // FIN-WAIT-2 ended by fin_wait_2_timeout: no FIN came
};

struct TcpCounterField {
    std::string_view name;
    TcpCounter TcpCounters::*field;
};

inline constexpr std::array<TcpCounterField, 35> kTcpCounterFields = {{
    {"segments_in", &TcpCounters::segments_in},
    {"segments_out", &TcpCounters::segments_out},
    {"bytes_sent", &TcpCounters::bytes_sent},
    {"bytes_acked", &TcpCounters::bytes_acked},
    {"bytes_received", &TcpCounters::bytes_received},
    {"retransmits", &TcpCounters::retransmits},
    {"fast_retransmits", &TcpCounters::fast_retransmits},
    {"limited_transmits", &TcpCounters::limited_transmits},
    {"rack_losses", &TcpCounters::rack_losses},
    {"tlp_probes", &TcpCounters::tlp_probes},
    {"dsacks_in", &TcpCounters::dsacks_in},
    {"dsacks_out", &TcpCounters::dsacks_out},
    {"undos", &TcpCounters::undos},
    {"timeouts", &TcpCounters::timeouts},
    {"dup_acks", &TcpCounters::dup_acks},
    {"sack_blocks_in", &TcpCounters::sack_blocks_in},
    {"sack_blocks_out", &TcpCounters::sack_blocks_out},
    {"ooo_segments", &TcpCounters::ooo_segments},
    {"ooo_dropped", &TcpCounters::ooo_dropped},
    {"dup_segments", &TcpCounters::dup_segments},
    {"bad_seq", &TcpCounters::bad_seq},
    {"paws_drops", &TcpCounters::paws_drops},
    {"challenge_acks", &TcpCounters::challenge_acks},
    {"challenge_acks_suppressed", &TcpCounters::challenge_acks_suppressed},
    {"bad_ack", &TcpCounters::bad_ack},
    {"rst_in", &TcpCounters::rst_in},
    {"rst_out", &TcpCounters::rst_out},
    {"window_probes", &TcpCounters::window_probes},
    {"keepalive_probes", &TcpCounters::keepalive_probes},
    {"delayed_acks", &TcpCounters::delayed_acks},
    {"tx_full", &TcpCounters::tx_full},
    {"beyond_window", &TcpCounters::beyond_window},
    {"events_lost", &TcpCounters::events_lost},
    {"pmtu_lowered", &TcpCounters::pmtu_lowered},
    {"fin_wait_2_timeouts", &TcpCounters::fin_wait_2_timeouts},
}};

// What `ss -ti` shows of a connection, as a snapshot.
struct TcpInfo {
    TcpState state = TcpState::closed;
    std::uint32_t mss = 0;  // payload bytes per segment (options excluded)
    std::uint64_t cwnd = 0, ssthresh = 0;
    TcpTime srtt = 0, rttvar = 0, rto = 0;
    std::uint64_t snd_wnd = 0, rcv_wnd = 0;
    std::uint8_t snd_wscale = 0, rcv_wscale = 0;
    bool sack = false, timestamps = false;
    bool in_recovery = false;
    std::uint64_t unacked = 0;  // bytes sent and not acknowledged
    std::uint64_t queued = 0;   // bytes queued (sent or not) and not acknowledged
    std::uint32_t sacked_blocks = 0, ooo_blocks = 0;
    std::uint64_t ooo_bytes = 0;
};

}  // namespace snic::tcp
