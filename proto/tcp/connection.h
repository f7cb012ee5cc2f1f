// One TCP connection (RFC 9293), the transport under iWARP's MPA. Files by role:
// connection.cc (construction, the byte-stream API, events, timers), input.cc (segment
// arrival, RFC 9293 §3.10.7), output.cc (what to send and building it).
//
// Pure engine, like the RC QP (proto/roce/rc_qp.h): no DPDK, no syscalls, no exceptions,
// no logs; its buffers (the send ring, record list, receive-buffer ring, event queue) are
// sized by the constructor and nothing is allocated after. Time is a nanosecond value the
// caller passes in. One thread owns a connection. The owner hands it every segment of its
// 4-tuple, parsed and checksum-verified (segment.h), through on_segment(); calls poll()
// whenever next_deadline() has passed (0 means "now": after a segment, a send, a posted
// buffer); and reads events with next_event(). Segments leave through TcpWire (tcp.h).
//
// Opening: open_active() sends a SYN; a listener (the owner's table, not here) that takes
// a SYN builds a connection and calls open_passive(syn). `connected` follows ESTABLISHED.
//
// Sending: send(record) queues one record whole or refuses it whole (no room in the send
// ring or record list; `send_space` comes when a refused sender may retry). The record
// rule, for MPA's FPDU alignment (RFC 5044 §8.1.2): every segment starts at a record
// boundary, or continues a record that had to be split. A segment holds either (a) one or
// more whole records that together fit the MSS, or (b) the next piece, at most one MSS, of
// a record larger than the MSS, ending at that record's end when the remainder fits. So a
// record that fits one MSS is never split and never shares a segment with part of another,
// and an FPDU sized to the MSS (mss() after connected) always travels alone and whole,
// retransmissions included. One exception the peer forces: when it offers a window smaller
// than the next segment and nothing is in flight, the segment is cut to the window. PSH is
// set on every segment that ends a record. No Nagle: records go out as soon as windows
// allow (iWARP wants TCP_NODELAY).
//
// Receiving: the owner posts buffers (post_receive) and the engine writes the peer's bytes
// straight into them, in stream order across the buffers: buffer k holds the bytes after
// those of buffers 0..k-1. So DDP can place without a copy: it learns from `readable`
// events (and received()) how many in-order bytes exist, reads them where they landed, and
// gets each buffer back with `recv_done` when it is full (or, with what it holds, when the
// stream ends or the connection dies). Out-of-order bytes are written into their place in
// the posted buffers too and tracked as SACK blocks; bytes past received() must not be
// read. The window advertised is the posted room (at most recv_window): a peer can send
// only what has a place, and buffers must be posted before data can arrive.
//
// Path MTU (RFC 1191, RFC 8201): the owner hands on_path_mtu() the MTU an ICMP
// fragmentation-needed (or ICMPv6 packet too big) reports, once it has checked that the
// error quotes a sequence number sent_unacked() holds (RFC 5927 §4.1). A smaller MTU lowers
// mss() for good (RFC 1191 §6.3's probing for a larger MTU is not done) and everything in
// flight and not SACKed is sent again at once, cut to the new MSS: the engine keeps bytes
// and record ends, not the boundaries of the segments it sent, so it cannot pick out only
// those too large for the hop, as Linux does; the peer drops the copies it holds. This is
// no congestion signal: cwnd and ssthresh keep their bytes, no loss is counted, and the
// duplicate ACKs the copies draw cannot start a fast retransmit
// (Congestion::hold_recovery). Records queued under the old MSS that exceed the new one are
// split (case (b) of the record rule); the owner sizes records to mss() from then on.
//
// Closing: close() sends FIN after the queued data (peer_closed when the peer's FIN
// comes, closed when both are done and, on the active side, TIME-WAIT's 2 MSL passed);
// abort() sends RST and is closed at once.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "proto/tcp/congestion.h"
#include "proto/tcp/rack.h"
#include "proto/tcp/rto.h"
#include "proto/tcp/sack.h"
#include "proto/tcp/segment.h"
#include "proto/tcp/seq.h"
#include "proto/tcp/tcp.h"

namespace snic::tcp {

// The least MSS (options included) path MTU discovery may lower a connection to, and the
// least the peer's MSS option counts as: Linux's tcp_min_snd_mss default, so a forged ICMP
// or a peer cannot make a connection send 8-byte segments.
inline constexpr std::uint32_t kMinSendMss = 48;

class TcpConnection {
  public:
    TcpConnection(const TcpConfig& config, TcpWire& wire);
    ~TcpConnection();
    TcpConnection(const TcpConnection&) = delete;
    TcpConnection& operator=(const TcpConnection&) = delete;

    // --- opening --------------------------------------------------------------------------
    // CLOSED -> SYN-SENT. Ignored in any other state.
    void open_active(TcpTime now);
    // CLOSED -> SYN-RECEIVED from a SYN the owner's listener took (no ACK, no RST). False,
    // with nothing changed, for anything else.
    bool open_passive(const Segment& syn, TcpTime now);
    // CLOSED -> ESTABLISHED from the final ACK of a handshake whose SYN-ACK (ISN `iss`, our
    // MSS and no other option) the owner's listener sent as a SYN cookie without keeping
    // state (RFC 4987 §3.6). The cookie gave back the peer's MSS; window scaling, SACK and
    // timestamps are off, as the SYN-ACK did not offer them. The ACK is then taken as in
    // SYN-RECEIVED, with any data or FIN on it. False when it does not end in ESTABLISHED
    // (not an ACK of iss + 1, or not acceptable): the owner drops the connection.
    bool open_from_cookie(const Segment& ack, Seq iss, std::uint32_t peer_mss, TcpTime now);

    // --- the wire -------------------------------------------------------------------------
    // A segment of this connection's 4-tuple (the owner matched ports and addresses and
    // verified the checksum). Answers wait for poll().
    void on_segment(const Segment& seg, TcpTime now);
    // Fires due timers and sends what is due (at most max_burst segments). True when
    // anything happened.
    bool poll(TcpTime now);
    // 0 when poll() has work now; else the earliest timer; kNever when none.
    TcpTime next_deadline() const;
    // The path carries IP packets of at most `mtu` bytes (see above). True when mss()
    // fell; false, changing nothing, when the MTU is not below what the connection uses,
    // before it is synchronized, or in TIME-WAIT. An MTU below the least of the IP version
    // (68, RFC 791; 1280, RFC 8200) is taken as that least, and the MSS (options included)
    // never goes below kMinSendMss.
    bool on_path_mtu(std::uint32_t mtu, TcpTime now);
    // Whether `seq` was sent and is not yet acknowledged: SND.UNA <= seq < SND.MAX.
    bool sent_unacked(Seq seq) const;

    // --- the byte stream ------------------------------------------------------------------
    // Queues one record (see above). False, queuing nothing, when it does not fit now, when
    // it is empty or larger than the send buffer, or when the connection cannot send (not
    // yet or no longer open for sending).
    bool send(std::span<const std::byte> record);
    // Bytes send() would take now (records permitting).
    std::size_t send_space() const;
    // Posts a buffer for the next bytes of the stream (see above); may be called before
    // opening. False when the ring of posted buffers is full, the buffer empty, or no more
    // bytes can come.
    bool post_receive(std::span<std::byte> buffer, std::uint64_t cookie);
    // Bytes received in order so far (the stream position up to which posted buffers hold
    // valid data).
    std::uint64_t received() const {
        return rcv_nxt_ > 0 ? rcv_nxt_ - 1 - (rcv_fin_done_ ? 1 : 0) : 0;
    }

    // Orderly close: FIN after the queued data.
    void close();
    // RST now (when synchronized); CLOSED at once with a `closed` event.
    void abort();

    // The next event, oldest first; false when none. The queue holds 2 * max_recv_buffers
    // + 16: an owner that drains it before posting buffers again never loses one.
    bool next_event(TcpEvent& out);

    // --- views ----------------------------------------------------------------------------
    TcpState state() const { return state_; }
    TcpInfo info() const;
    const TcpCounters& counters() const { return counters_; }
    const TcpConfig& config() const { return cfg_; }
    std::uint32_t mss() const { return mss_; }  // payload bytes per segment
    Seq iss() const { return iss_; }
    Seq irs() const { return irs_; }

  private:
    // --- input.cc -------------------------------------------------------------------------
    void input_syn_sent(const Segment& seg, TcpTime now);
    bool paws_reject(const Segment& seg, TcpTime now);
    bool acceptable(const Segment& seg) const;
    void input_rst(const Segment& seg);
    bool input_ack(const Segment& seg, TcpTime now);
    void new_ack(std::uint64_t ack_off, TcpTime now);
    void take_sack(const Segment& seg, TcpTime now);
    // A D-SACK (RFC 2883 §4) for offsets [lo, hi): the peer got them twice. It may show a
    // probe or a whole recovery to have been spurious (RFC 3708).
    void take_dsack(std::uint64_t lo, std::uint64_t hi, TcpTime now);
    // A reduction begins (a recovery, a timeout): what it sends again is counted for its undo.
    void arm_undo();
    void try_undo();
    // The receiver's side of RFC 2883: the next ACK's first SACK block reports [lo, hi).
    void note_duplicate(Seq lo, Seq hi);
    // RACK-TLP (RFC 8985), with SACK: loss detection after an ACK or when the reordering
    // timer fires, and the tail-loss probe's timer.
    void rack_detect(TcpTime now);
    // Fast recovery begins (by three duplicate ACKs, or a loss RACK found).
    void begin_recovery();
    // Whether a tail-loss probe may go: SACK, data out, no probe out.
    bool may_probe() const;
    void arm_pto(TcpTime now);
    void on_pto();
    void input_data(const Segment& seg, TcpTime now, bool& fin_ok);
    void input_fin(const Segment& seg, TcpTime now);
    void check_fin(TcpTime now);
    void our_fin_acked(TcpTime now);
    void take_syn_options(const Segment& seg);
    void challenge_ack(TcpTime now);
    void enter_time_wait(TcpTime now);

    // --- output.cc ------------------------------------------------------------------------
    struct Plan {
        std::uint64_t off = 0;  // first offset sent
        std::uint32_t len = 0;  // payload bytes
        bool fin = false;
        bool retransmit = false;
        bool advance = true;  // moves snd_nxt (false for holes and the fast retransmit)
        bool ends_record = false;
        bool limited = false;  // Limited Transmit's (RFC 3042)
        bool probe = false;    // a tail-loss probe (RFC 8985 §7)
    };
    bool output(TcpTime now);
    bool pick(Plan& p, TcpTime now);
    bool pick_normal(Plan& p, TcpTime now, bool check_cwnd);
    bool plan_resend(Plan& p, std::uint64_t off, std::uint64_t limit) const;
    bool pick_rack_lost(Plan& p);
    std::uint64_t rack_lost_bytes() const;
    bool pick_probe(Plan& p, TcpTime now);
    std::uint32_t plan_len(std::uint64_t off, bool& ends_record) const;
    bool send_plan(const Plan& p, TcpTime now);
    bool send_syn(TcpTime now);
    bool send_ack(TcpTime now, bool probe);
    bool send_rst();
    // Builds and sends one segment; false when the wire is full.
    bool transmit(Seq seq, std::uint8_t flags, std::uint64_t data_off, std::uint32_t len,
                  TcpTime now);
    std::uint16_t window_field(bool syn);
    std::uint32_t tsval(TcpTime now) const;

    // --- connection.cc --------------------------------------------------------------------
    void run_timers(TcpTime now);
    void on_rto(TcpTime now);
    void give_up(EventKind why);
    // Queues a RST with sequence number `seq` for the next poll().
    void queue_rst(Seq seq);
    void to_closed(EventKind why);
    void push_event(EventKind kind, std::uint64_t cookie = 0, std::uint64_t bytes = 0);
    void complete_receives(bool all);
    void pop_acked_records();
    std::uint64_t rcv_space() const;
    std::uint64_t rcv_window_for_check() const;
    TcpTime keepalive_deadline() const;
    bool synchronized() const {
        return state_ != TcpState::closed && state_ != TcpState::syn_sent &&
               state_ != TcpState::syn_received;
    }
    bool can_send_data() const {
        return state_ == TcpState::established || state_ == TcpState::close_wait ||
               state_ == TcpState::fin_wait_1 || state_ == TcpState::closing ||
               state_ == TcpState::last_ack;
    }
    std::uint64_t flight() const { return snd_max_ - snd_una_; }
    // Data bytes queued and not yet acknowledged (SND.UNA passes the data by one once our
    // FIN is acknowledged).
    std::uint64_t queued() const {
        return write_end_ - std::min(std::max<std::uint64_t>(snd_una_, 1), write_end_);
    }
    // Payload and options in one segment: the least of the peer's MSS, ours, the path's.
    std::uint32_t max_segment() const {
        return std::min(std::min(peer_mss_, mss_announce_), path_mss_);
    }

    TcpConfig cfg_;
    TcpWire& wire_;
    TcpCounters counters_;
    TcpState state_ = TcpState::closed;
    bool passive_ = false;
    bool finished_ = false;  // was open and is CLOSED again

    // Send side, offsets from ISS (seq.h): SYN at 0, data from 1, FIN after the data.
    Seq iss_ = 0;
    std::uint64_t snd_una_ = 0, snd_nxt_ = 0, snd_max_ = 0;
    std::uint64_t write_end_ = 1;  // past the last byte queued
    bool fin_queued_ = false;
    std::uint64_t fin_off_ = 0;  // FIN's offset once queued
    std::unique_ptr<std::uint8_t[]> sbuf_;
    std::uint32_t sbuf_cap_ = 0;
    std::unique_ptr<std::uint64_t[]> rec_end_;  // record ends, a ring of max_records
    std::uint32_t rec_cap_ = 0;
    std::uint64_t rec_head_ = 0, rec_tail_ = 0;  // free-running indices
    std::uint64_t rec_base_ = 1;                 // the start of record rec_head_
    bool want_space_ = false;
    std::uint64_t snd_wnd_ = 0, max_snd_wnd_ = 0;
    Seq snd_wl1_ = 0, snd_wl2_ = 0;
    std::uint8_t snd_wscale_ = 0, rcv_wscale_ = 0, our_wscale_ = 0;
    std::uint32_t mss_announce_ = 536, peer_mss_ = 536, mss_ = 536;
    std::uint32_t path_mss_ = 65535;  // the path MTU less IP and TCP headers (on_path_mtu)
    bool sack_ok_ = false, ts_ok_ = false, ws_ok_ = false;
    Congestion cc_;
    Scoreboard sb_;
    std::uint64_t high_rxt_ = 0;
    std::uint32_t dupacks_ = 0;
    std::uint32_t lt_sent_ = 0;   // segments Limited Transmit sent since the last new ACK
    std::uint64_t lt_bytes_ = 0;  // and their bytes: not part of the ssthresh computation
    Rack rack_;
    // Ranges RACK found lost: out of the pipe until acknowledged or SACKed, and sent again
    // up to `sent`.
    struct Lost {
        std::uint64_t start = 0, end = 0, sent = 0;
    };
    static constexpr std::size_t kRackLost = 8;
    std::array<Lost, kRackLost> rack_lost_{};
    std::size_t nlost_ = 0;
    TcpTime rack_deadline_ = kNever;  // RACK's reordering timer
    TcpTime pto_deadline_ = kNever;   // the tail-loss probe's timer
    bool tlp_pending_ = false;        // the PTO fired: the probe goes on the next output
    bool tlp_out_ = false;            // a probe is out, for bytes up to tlp_end_
    bool tlp_retransmit_ = false;     // and it was a retransmission
    bool tlp_saw_recovery_ = false;   // a recovery began while it was out
    bool tlp_dsacked_ = false;        // a D-SACK says the probe's bytes had arrived before
    std::uint64_t tlp_start_ = 0, tlp_end_ = 0;
    std::uint64_t tlp_flight_ = 0;  // the flight when it went
    // RFC 3708: the last reduction's resent bytes not yet D-SACKed, from undo_marker_ on.
    bool undo_armed_ = false;
    bool undo_sent_ = false;  // it has sent something again
    std::uint64_t undo_marker_ = 0, undo_retrans_ = 0;
    bool fast_rtx_pending_ = false;
    RtoEstimator rto_;
    TcpTime rto_deadline_ = kNever;
    std::uint32_t retries_ = 0;
    bool timing_ = false;
    std::uint64_t rtt_off_ = 0;
    TcpTime rtt_start_ = 0;
    TcpTime persist_deadline_ = kNever;
    std::uint32_t persist_backoff_ = 0;

    // The pseudo-header's sum of the two addresses and the protocol: a segment's checksum
    // starts from it plus the segment's length (under 65536, the one word it then takes).
    std::uint32_t pseudo_base_ = 0;

    // Receive side, offsets from IRS.
    Seq irs_ = 0;
    std::uint64_t rcv_nxt_ = 0;
    std::uint64_t rcv_adv_ = 0;  // the highest right window edge advertised
    OooBlocks ooo_;
    bool rcv_fin_pending_ = false, rcv_fin_done_ = false;
    std::uint64_t rcv_fin_off_ = 0;
    struct RecvBuf {
        std::byte* data = nullptr;
        std::uint32_t len = 0;
        std::uint64_t cookie = 0;
        std::uint64_t start = 0;  // offset of its first byte
    };
    std::unique_ptr<RecvBuf[]> rbufs_;
    std::uint32_t rbuf_cap_ = 0;
    std::uint64_t rbuf_head_ = 0, rbuf_tail_ = 0;
    std::uint64_t posted_end_ = 1;

    // ACKs.
    bool ack_now_ = false;
    bool dsack_pending_ = false;  // the next ACK reports a duplicate (RFC 2883)
    Seq dsack_left_ = 0, dsack_right_ = 0;
    std::uint32_t unacked_segs_ = 0;
    TcpTime delack_deadline_ = kNever;
    Seq last_ack_sent_ = 0;

    // Timestamps (RFC 7323).
    std::uint32_t ts_offset_ = 0;
    std::uint32_t ts_recent_ = 0;
    TcpTime ts_recent_time_ = 0;

    // Keepalive, TIME-WAIT, challenge ACKs, pending control.
    TcpTime last_rx_ = 0, ka_last_probe_ = 0;
    std::uint32_t ka_probes_ = 0;
    TcpTime tw_deadline_ = kNever;  // TIME-WAIT's end, or FIN-WAIT-2's bound
    TcpTime ca_window_ = 0;
    std::uint32_t ca_count_ = 0;
    bool syn_pending_ = false;
    bool probe_pending_ = false;
    bool rst_pending_ = false;
    SegmentSpec rst_;
    bool kick_ = false;  // something changed that may let poll() send

    // Events.
    std::unique_ptr<TcpEvent[]> ev_;
    std::uint32_t ev_cap_ = 0;
    std::uint64_t ev_head_ = 0, ev_tail_ = 0;
};

}  // namespace snic::tcp
