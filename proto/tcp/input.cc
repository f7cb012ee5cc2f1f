// Segment arrival, in the order of RFC 9293 §3.10.7 (SEGMENT ARRIVES), with RFC 5961's
// checks on RST, SYN and ACK, and RFC 7323's PAWS.
#include <algorithm>
#include <cstring>

#include "proto/tcp/connection.h"

namespace snic::tcp {

namespace {
constexpr TcpTime kPawsIdle = 24ull * 24 * 3600 * kSec;  // RFC 7323 §5.5: 24 days
}

void TcpConnection::take_syn_options(const Segment& seg) {
    const TcpOptions& o = seg.opts;
    ws_ok_ = cfg_.window_scale && o.has_wscale;
    snd_wscale_ = ws_ok_ ? std::min(o.wscale, kMaxWscale) : 0;
    rcv_wscale_ = ws_ok_ ? our_wscale_ : 0;
    sack_ok_ = cfg_.sack && o.sack_permitted;
    ts_ok_ = cfg_.timestamps && o.has_timestamps;
    if (ts_ok_) {
        ts_recent_ = o.ts_val;
        ts_recent_time_ = last_rx_;
    }
    // Never below kMinSendMss (Linux's tcp_min_snd_mss): a peer MSS under the 12 bytes of
    // timestamps would leave no payload (or wrap mss_ around), and a tiny one would cut the
    // stream into segments of a few bytes.
    if (o.has_mss && o.mss > 0) peer_mss_ = std::max<std::uint32_t>(o.mss, kMinSendMss);
    mss_ = max_segment() - (ts_ok_ ? 12 : 0);
    cc_.init(mss_, sack_ok_);
}

void TcpConnection::challenge_ack(TcpTime now) {
    if (now - ca_window_ >= kSec) {
        ca_window_ = now;
        ca_count_ = 0;
    }
    if (ca_count_ < cfg_.challenge_acks_per_second) {
        ++ca_count_;
        ack_now_ = true;
        counters_.challenge_acks.add();
    } else {
        counters_.challenge_acks_suppressed.add();
    }
}

void TcpConnection::on_segment(const Segment& seg, TcpTime now) {
    counters_.segments_in.add();
    kick_ = true;
    if (state_ == TcpState::closed) {
        // RFC 9293 §3.10.7.1: anything but a RST gets a RST.
        SegmentSpec r;
        if (reset_for(seg, r)) {
            rst_ = r;
            rst_pending_ = true;
        }
        return;
    }
    if (seg.has(flag::rst)) counters_.rst_in.add();
    last_rx_ = now;
    ka_probes_ = 0;
    if (state_ == TcpState::syn_sent) {
        input_syn_sent(seg, now);
        return;
    }
    // A retransmitted SYN for a passive connection gets the SYN-ACK again.
    if (state_ == TcpState::syn_received && seg.has(flag::syn) && !seg.has(flag::ack) &&
        !seg.has(flag::rst) && seg.seq == irs_) {
        syn_pending_ = true;
        return;
    }
    if (paws_reject(seg, now)) return;
    // First: the sequence number (RFC 9293 §3.10.7.4).
    if (!acceptable(seg)) {
        counters_.bad_seq.add();
        if (!seg.has(flag::rst)) {
            ack_now_ = true;
            // Data wholly below RCV.NXT came twice: the ACK says so (RFC 2883).
            const std::int64_t d = seq_diff(seg.seq, seq_of(irs_, rcv_nxt_));
            const std::int64_t len = static_cast<std::int64_t>(seg.payload.size());
            if (len > 0 && d < 0 && d + len <= 0 && -d < static_cast<std::int64_t>(rcv_nxt_))
                note_duplicate(seg.seq, seg.seq + static_cast<Seq>(len));
            if (state_ == TcpState::time_wait && seg.has(flag::fin)) enter_time_wait(now);
        }
        return;
    }
    // RFC 7323 §4.3 (R3): TS.Recent follows the segment that the last ACK sent covers.
    if (ts_ok_ && seg.opts.has_timestamps && seq_le(seg.seq, last_ack_sent_) &&
        seq_ge(seg.opts.ts_val, ts_recent_)) {
        ts_recent_ = seg.opts.ts_val;
        ts_recent_time_ = now;
    }
    // Second: RST (RFC 5961 §3.2): exact match resets, anything else in the window is
    // answered with a challenge ACK.
    if (seg.has(flag::rst)) {
        input_rst(seg);
        if (state_ != TcpState::closed) challenge_ack(now);
        return;
    }
    // Fourth: SYN in a synchronized state (RFC 5961 §4): a challenge ACK, never a reset.
    if (seg.has(flag::syn)) {
        challenge_ack(now);
        return;
    }
    // Fifth: ACK.
    if (!seg.has(flag::ack)) return;
    if (!input_ack(seg, now)) return;
    // Seventh and eighth: text and FIN.
    bool fin_ok = true;
    if (!seg.payload.empty()) input_data(seg, now, fin_ok);
    if (seg.has(flag::fin) && fin_ok) input_fin(seg, now);
}

void TcpConnection::input_syn_sent(const Segment& seg, TcpTime now) {
    const bool ack = seg.has(flag::ack);
    if (ack && (snd_max_ == 0 || seg.ack != seq_of(iss_, 1))) {
        // An ACK of something we never sent (SEG.ACK > SND.NXT, or the SYN has not left
        // yet): RST unless it is one (§3.10.7.3).
        if (!seg.has(flag::rst)) {
            queue_rst(seg.ack);
        }
        return;
    }
    if (seg.has(flag::rst)) {
        if (ack) to_closed(EventKind::reset);  // connection refused
        return;
    }
    if (!seg.has(flag::syn)) return;
    irs_ = seg.seq;
    rcv_nxt_ = 1;
    rcv_adv_ = 1;
    take_syn_options(seg);
    snd_wnd_ = seg.window;  // not scaled in a SYN
    max_snd_wnd_ = snd_wnd_;
    snd_wl1_ = seg.seq;
    snd_wl2_ = seg.ack;
    if (ack) {
        if (timing_) {
            rto_.sample(now - rtt_start_);
            timing_ = false;
        }
        snd_una_ = 1;
        retries_ = 0;
        rto_deadline_ = kNever;
        state_ = fin_queued_ ? TcpState::fin_wait_1 : TcpState::established;
        ack_now_ = true;
        push_event(EventKind::connected);
    } else {
        // Simultaneous open (RFC 9293 §3.5, figure 8).
        state_ = TcpState::syn_received;
        syn_pending_ = true;
    }
}

bool TcpConnection::paws_reject(const Segment& seg, TcpTime now) {
    if (!ts_ok_ || seg.has(flag::rst)) return false;
    if (!seg.opts.has_timestamps) {
        counters_.paws_drops.add();  // RFC 7323 §3.2: SHOULD drop a non-RST without TSopt
        return true;
    }
    if (!seq_lt(seg.opts.ts_val, ts_recent_)) return false;
    if (now - ts_recent_time_ > kPawsIdle) {
        ts_recent_ = seg.opts.ts_val;  // §5.5: TS.Recent is stale, not the segment
        return false;
    }
    counters_.paws_drops.add();
    ack_now_ = true;  // §5.3 R1: send an acknowledgment and drop
    return true;
}

bool TcpConnection::acceptable(const Segment& seg) const {
    const std::int64_t d = seq_diff(seg.seq, seq_of(irs_, rcv_nxt_));
    const std::int64_t wnd = static_cast<std::int64_t>(rcv_window_for_check());
    const std::int64_t len = seg.seq_len();
    if (len == 0) return wnd == 0 ? d == 0 : (d >= 0 && d < wnd);
    if (wnd == 0) return false;
    return (d >= 0 && d < wnd) || (d + len - 1 >= 0 && d + len - 1 < wnd);
}

void TcpConnection::input_rst(const Segment& seg) {
    if (seg.seq != seq_of(irs_, rcv_nxt_)) return;  // the caller sends a challenge ACK
    switch (state_) {
        case TcpState::closing:
        case TcpState::last_ack:
        case TcpState::time_wait:
            to_closed(EventKind::closed);
            return;
        default:
            to_closed(EventKind::reset);
            return;
    }
}

// The ACK field (RFC 9293 §3.10.7.4 fifth, RFC 5961 §5). False when the segment is done.
bool TcpConnection::input_ack(const Segment& seg, TcpTime now) {
    const std::int64_t da = seq_diff(seg.ack, seq_of(iss_, snd_una_));
    const std::int64_t ahead = seq_diff(seg.ack, seq_of(iss_, snd_max_));
    if (state_ == TcpState::syn_received) {
        if (da <= 0 || ahead > 0) {
            queue_rst(seg.ack);
            return false;
        }
        snd_una_ = 1;
        if (timing_) {
            rto_.sample(now - rtt_start_);
            timing_ = false;
        }
        retries_ = 0;
        rto_deadline_ = kNever;
        snd_wnd_ = std::uint64_t{seg.window} << snd_wscale_;
        max_snd_wnd_ = snd_wnd_;
        snd_wl1_ = seg.seq;
        snd_wl2_ = seg.ack;
        state_ = fin_queued_ ? TcpState::fin_wait_1 : TcpState::established;
        push_event(EventKind::connected);
        return true;
    }
    const std::int64_t oldest =
        -static_cast<std::int64_t>(std::max<std::uint64_t>(max_snd_wnd_, 1));
    if (ahead > 0 || da < oldest) {
        // RFC 5961 §5.2: an ACK of data never sent, or older than the largest window, is
        // answered with a (rate-limited) ACK and dropped.
        counters_.bad_ack.add();
        challenge_ack(now);
        return false;
    }
    const std::uint64_t sacked_before = sb_.total();
    take_sack(seg, now);
    const bool new_sack = sb_.total() > sacked_before;
    const std::uint64_t wnd = std::uint64_t{seg.window} << snd_wscale_;
    if (da > 0) {
        new_ack(snd_una_ + static_cast<std::uint64_t>(da), now);
    } else if (da == 0 && seg.payload.empty() && !seg.has(flag::syn) && !seg.has(flag::fin) &&
               (sack_ok_ ? new_sack : wnd == snd_wnd_) && snd_max_ > snd_una_) {
        // A duplicate ACK (RFC 5681 §2; with SACK, RFC 6675 §2: an ACK that SACKs new data,
        // whatever window it advertises; one that only reports a duplicate, a D-SACK, is not).
        counters_.dup_acks.add();
        ++dupacks_;
        if (cc_.in_recovery()) {
            cc_.on_dupack_in_recovery();
        } else if ((dupacks_ >= kDupThresh || (sack_ok_ && sb_.is_lost(snd_una_, mss_))) &&
                   cc_.may_enter_recovery(snd_una_)) {
            // Fast retransmit (RFC 5681 §3.2, RFC 6675 §5): SND.UNA's segment first.
            begin_recovery();
            fast_rtx_pending_ = true;
        }
    }
    // The send window (RFC 9293 §3.10.7.4: SND.WL1 and SND.WL2 say which segment is newer).
    if (seq_lt(snd_wl1_, seg.seq) || (snd_wl1_ == seg.seq && seq_le(snd_wl2_, seg.ack))) {
        snd_wnd_ = wnd;
        max_snd_wnd_ = std::max(max_snd_wnd_, wnd);
        snd_wl1_ = seg.seq;
        snd_wl2_ = seg.ack;
        if (snd_wnd_ > 0) {
            persist_deadline_ = kNever;
            persist_backoff_ = 0;
        }
    }
    if (sack_ok_) {
        rack_.on_ack(snd_una_, sb_, now);
        rack_detect(now);
    }
    if (tlp_out_ && snd_una_ >= tlp_end_) {
        // The probe's episode ends (RFC 8985 §7.4). A retransmitted probe answered without a
        // recovery and without a D-SACK for it repaired a loss, and a loss asks for the
        // congestion response a fast recovery would make; with a D-SACK only an ACK was lost.
        tlp_out_ = false;
        if (tlp_retransmit_ && !tlp_dsacked_ && !tlp_saw_recovery_ && !cc_.in_recovery())
            cc_.on_repaired_loss(tlp_flight_);
    }
    try_undo();
    if (fin_queued_ && snd_una_ > fin_off_) our_fin_acked(now);
    return state_ != TcpState::closed;
}

void TcpConnection::take_sack(const Segment& seg, TcpTime now) {
    if (!sack_ok_) return;
    const auto& s = seg.opts.sack;
    for (std::size_t i = 0; i < seg.opts.nsack; ++i) {
        counters_.sack_blocks_in.add();
        const SackBlock& b = s[i];
        const std::int64_t l = seq_diff(b.left, seq_of(iss_, snd_una_));
        const std::int64_t r = seq_diff(b.right, seq_of(iss_, snd_una_));
        // RFC 2883 §4: a first block below the cumulative ACK, or within the second block,
        // reports a duplicate.
        if (i == 0 && seq_lt(b.left, b.right) &&
            (seq_le(b.right, seg.ack) ||
             (seg.opts.nsack > 1 && seq_le(s[1].left, b.left) && seq_le(b.right, s[1].right)))) {
            const std::int64_t una = static_cast<std::int64_t>(snd_una_);
            if (l + una >= 1 && r + una <= static_cast<std::int64_t>(snd_max_))
                take_dsack(static_cast<std::uint64_t>(l + una), static_cast<std::uint64_t>(r + una),
                           now);
            continue;
        }
        // Only blocks within (SND.UNA, SND.MAX] mean anything (D-SACKs and stale blocks
        // below SND.UNA are ignored).
        if (l <= 0 || r <= l || snd_una_ + static_cast<std::uint64_t>(r) > snd_max_) continue;
        sb_.add(snd_una_ + static_cast<std::uint64_t>(l), snd_una_ + static_cast<std::uint64_t>(r));
    }
}

void TcpConnection::new_ack(std::uint64_t ack_off, TcpTime now) {
    const std::uint64_t acked = ack_off - snd_una_;
    // RTT (RFC 6298 §3, Karn): only the timed segment, only if never retransmitted.
    if (timing_ && ack_off > rtt_off_) {
        rto_.sample(now - rtt_start_);
        timing_ = false;
    }
    const std::uint64_t data_acked =
        std::min(ack_off, write_end_) - std::min(std::max<std::uint64_t>(snd_una_, 1), write_end_);
    counters_.bytes_acked.add(data_acked);
    snd_una_ = ack_off;
    if (snd_nxt_ < snd_una_) snd_nxt_ = snd_una_;
    if (high_rxt_ < snd_una_) high_rxt_ = snd_una_;
    sb_.advance(snd_una_);
    pop_acked_records();
    if (cc_.in_recovery()) {
        const bool full = cc_.on_ack_in_recovery(snd_una_, acked, flight());
        if (full) rack_.on_recovery_end();
        if (!full && !cc_.sack()) {
            fast_rtx_pending_ = true;  // RFC 6582 §3.2 step 5: retransmit the next hole
            counters_.fast_retransmits.add();
        }
    } else {
        cc_.on_ack(acked);
    }
    dupacks_ = 0;
    lt_sent_ = 0;
    lt_bytes_ = 0;
    retries_ = 0;
    // RFC 6298 §5.2-5.3: stop the timer when all is acknowledged, else restart it.
    rto_deadline_ = snd_una_ == snd_max_ ? kNever : now + rto_.rto();
    arm_pto(now);
}

void TcpConnection::our_fin_acked(TcpTime now) {
    switch (state_) {
        case TcpState::fin_wait_1:
            state_ = TcpState::fin_wait_2;
            tw_deadline_ = now + cfg_.fin_wait_2_timeout;  // the peer's FIN, or give up
            return;
        case TcpState::closing:
            enter_time_wait(now);
            return;
        case TcpState::last_ack:
            to_closed(EventKind::closed);
            return;
        default:
            return;
    }
}

void TcpConnection::enter_time_wait(TcpTime now) {
    state_ = TcpState::time_wait;
    rto_deadline_ = persist_deadline_ = kNever;
    tw_deadline_ = now + 2 * cfg_.msl;
}

// Seventh: the segment's text, written into the posted buffers at its place.
void TcpConnection::input_data(const Segment& seg, TcpTime now, bool& fin_ok) {
    if (state_ != TcpState::established && state_ != TcpState::fin_wait_1 &&
        state_ != TcpState::fin_wait_2) {
        return;  // after the peer's FIN: ignored (RFC 9293 §3.10.7.4)
    }
    const std::int64_t d = seq_diff(seg.seq, seq_of(irs_, rcv_nxt_));
    const std::uint64_t start = d >= 0 ? rcv_nxt_ + static_cast<std::uint64_t>(d)
                                       : rcv_nxt_ - static_cast<std::uint64_t>(-d);
    const std::uint64_t end = start + seg.payload.size();
    const std::uint64_t lo = std::max(start, rcv_nxt_);
    const std::uint64_t hi = std::min(end, std::min(posted_end_, rcv_nxt_ + cfg_.recv_window));
    if (hi < end) {
        counters_.beyond_window.add(end - std::max(hi, lo));
        fin_ok = false;  // the FIN lies past what we took
        ack_now_ = true;
    }
    if (start < rcv_nxt_ && end > start) {
        note_duplicate(seg.seq, seq_of(irs_, std::min(end, rcv_nxt_)));  // partly old
    }
    if (hi <= lo) {
        if (end <= rcv_nxt_) counters_.dup_segments.add();
        ack_now_ = true;
        return;
    }
    if (lo > rcv_nxt_) {
        if (ooo_.holds(lo, hi)) {
            counters_.dup_segments.add();
            note_duplicate(seq_of(irs_, lo), seq_of(irs_, hi));
        } else if (!ooo_.add(lo, hi)) {
            counters_.ooo_dropped.add();
            fin_ok = false;
            ack_now_ = true;
            return;
        } else {
            counters_.ooo_segments.add();
        }
        ack_now_ = true;  // RFC 5681 §4.2: out-of-order data is acknowledged at once
    }
    // Place [lo, hi) into the buffers that cover it.
    const std::uint8_t* src = seg.payload.data() + (lo - start);
    std::uint64_t at = lo;
    for (std::uint64_t i = rbuf_head_; i != rbuf_tail_ && at < hi; ++i) {
        const RecvBuf& b = rbufs_[i % rbuf_cap_];
        const std::uint64_t bend = b.start + b.len;
        if (bend <= at) continue;
        const std::uint64_t n = std::min(hi, bend) - at;
        std::memcpy(b.data + (at - b.start), src, n);
        src += n;
        at += n;
    }
    if (lo == rcv_nxt_) {
        const bool had_ooo = !ooo_.empty();
        const std::uint64_t before = rcv_nxt_;
        rcv_nxt_ = ooo_.advance(hi);
        counters_.bytes_received.add(rcv_nxt_ - before);
        if (had_ooo) {
            ack_now_ = true;  // RFC 5681 §4.2: a segment that fills a hole
        } else if (++unacked_segs_ >= 2) {
            ack_now_ = true;  // RFC 5681 §4.2: at least every second full segment
        } else if (delack_deadline_ == kNever) {
            delack_deadline_ = now + cfg_.delayed_ack;
        }
        complete_receives(false);
        push_event(EventKind::readable, 0, received());
        check_fin(now);
    }
}

// Eighth: FIN. Taken when it is next in sequence; an early one waits for the data before it.
void TcpConnection::input_fin(const Segment& seg, TcpTime now) {
    const std::int64_t d = seq_diff(seg.seq, seq_of(irs_, rcv_nxt_));
    const std::int64_t at = d + static_cast<std::int64_t>(seg.payload.size());
    if (at < 0) return;
    if (!rcv_fin_done_) {
        rcv_fin_pending_ = true;
        rcv_fin_off_ = rcv_nxt_ + static_cast<std::uint64_t>(at);
    }
    ack_now_ = true;
    check_fin(now);
}

void TcpConnection::check_fin(TcpTime now) {
    if (!rcv_fin_pending_ || rcv_fin_done_ || rcv_nxt_ != rcv_fin_off_) return;
    rcv_fin_pending_ = false;
    rcv_fin_done_ = true;
    ++rcv_nxt_;
    ack_now_ = true;
    push_event(EventKind::peer_closed);
    complete_receives(true);
    switch (state_) {
        case TcpState::syn_received:
        case TcpState::established:
            state_ = TcpState::close_wait;
            break;
        case TcpState::fin_wait_1:
            // Our FIN not yet acknowledged (else we would be in FIN-WAIT-2): simultaneous close.
            state_ = TcpState::closing;
            break;
        case TcpState::fin_wait_2:
            enter_time_wait(now);
            break;
        default:
            break;
    }
}

}  // namespace snic::tcp
