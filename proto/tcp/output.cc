// Output: what to send next (the record rule, windows, NewReno and RFC 6675's NextSeg) and
// building the segments.
#include <algorithm>
#include <utility>

#include "proto/tcp/connection.h"

namespace snic::tcp {

std::uint32_t TcpConnection::tsval(TcpTime now) const {
    return static_cast<std::uint32_t>(now / kMs) + ts_offset_;
}

std::uint16_t TcpConnection::window_field(bool syn) {
    const std::uint64_t space = rcv_space();
    const std::uint8_t shift = syn ? 0 : rcv_wscale_;
    const std::uint64_t w = std::min<std::uint64_t>(space >> shift, 65535);
    rcv_adv_ = std::max(rcv_adv_, rcv_nxt_ + (w << shift));
    return static_cast<std::uint16_t>(w);
}

bool TcpConnection::transmit(Seq seq, std::uint8_t flags, std::uint64_t data_off, std::uint32_t len,
                             TcpTime now) {
    SegmentSpec s;
    s.src_port = cfg_.local.port;
    s.dst_port = cfg_.remote.port;
    s.seq = seq;
    s.flags = flags;
    const bool syn = (flags & flag::syn) != 0;
    if ((flags & flag::ack) != 0) s.ack = seq_of(irs_, rcv_nxt_);
    s.window = window_field(syn);
    TcpOptions& o = s.opts;
    if (syn) {
        const bool offer = state_ == TcpState::syn_sent;  // else answer what the peer offered
        o.has_mss = true;
        o.mss = static_cast<std::uint16_t>(mss_announce_);
        o.has_wscale = offer ? cfg_.window_scale : ws_ok_;
        o.wscale = our_wscale_;
        o.sack_permitted = offer ? cfg_.sack : sack_ok_;
        o.has_timestamps = offer ? cfg_.timestamps : ts_ok_;
        o.ts_val = tsval(now);
        o.ts_ecr = offer ? 0 : ts_recent_;
    } else {
        o.has_timestamps = ts_ok_;
        o.ts_val = tsval(now);
        o.ts_ecr = ts_recent_;
        const std::size_t dsack = sack_ok_ && dsack_pending_ ? 1 : 0;
        if (sack_ok_ && (dsack > 0 || !ooo_.empty())) {
            // RFC 2018 §4: newest first; as many as fit beside the payload. A D-SACK goes
            // first (RFC 2883 §4), once.
            const std::size_t limit = max_segment() + kTcpMinHdrLen;
            o.nsack = static_cast<std::uint8_t>(std::min(ooo_.size() + dsack, kMaxSackBlocks));
            // ... and within the 40 bytes a header has for options (RFC 2018 §3: three
            // blocks beside the timestamps).
            while (o.nsack > 0 && (kTcpMinHdrLen + options_length(o) + len > limit ||
                                   kTcpMinHdrLen + options_length(o) > kTcpMaxHdrLen)) {
                --o.nsack;
            }
            if (dsack > 0 && o.nsack > 0) o.sack[0] = SackBlock{dsack_left_, dsack_right_};
            for (std::size_t i = dsack; i < o.nsack; ++i) {
                const Range& r = ooo_[i - dsack];
                o.sack[i] = SackBlock{seq_of(irs_, r.start), seq_of(irs_, r.end)};
            }
            counters_.sack_blocks_out.add(o.nsack);
            if (dsack > 0 && o.nsack > 0) counters_.dsacks_out.add();
        }
    }
    std::span<const std::uint8_t> a, b;
    if (len > 0) {
        const std::size_t at = (data_off - 1) % sbuf_cap_;
        const std::size_t first = std::min<std::size_t>(len, sbuf_cap_ - at);
        a = {sbuf_.get() + at, first};
        b = {sbuf_.get(), len - first};
    }
    const std::size_t total = header_length(s) + len;
    const std::span<std::uint8_t> buf = wire_.tx_alloc(total);
    if (buf.size() < total) {
        counters_.tx_full.add();
        return false;
    }
    write_segment(buf, s, a, b, pseudo_base_ + static_cast<std::uint32_t>(total),
                  cfg_.tx_checksum_offload);
    wire_.tx_send(total);
    counters_.segments_out.add();
    if ((flags & flag::ack) != 0) {
        dsack_pending_ = false;
        ack_now_ = false;
        unacked_segs_ = 0;
        delack_deadline_ = kNever;
        last_ack_sent_ = s.ack;
    }
    return true;
}

bool TcpConnection::send_rst() {
    const std::size_t total = header_length(rst_);
    const std::span<std::uint8_t> buf = wire_.tx_alloc(total);
    if (buf.size() < total) {
        counters_.tx_full.add();
        return false;
    }
    write_segment(buf, rst_, {}, {}, pseudo_base_ + static_cast<std::uint32_t>(total),
                  cfg_.tx_checksum_offload);
    wire_.tx_send(total);
    counters_.segments_out.add();
    counters_.rst_out.add();
    rst_pending_ = false;
    return true;
}

bool TcpConnection::send_syn(TcpTime now) {
    const std::uint8_t flags = state_ == TcpState::syn_received ? flag::syn | flag::ack : flag::syn;
    if (!transmit(iss_, flags, 0, 0, now)) return false;
    syn_pending_ = false;
    if (snd_max_ == 0) {
        timing_ = true;  // the first SYN is timed; a retransmitted one is not (Karn)
        rtt_off_ = 0;
        rtt_start_ = now;
    } else {
        timing_ = false;
        counters_.retransmits.add();
    }
    snd_nxt_ = std::max<std::uint64_t>(snd_nxt_, 1);
    snd_max_ = std::max<std::uint64_t>(snd_max_, 1);
    if (rto_deadline_ == kNever) rto_deadline_ = now + rto_.rto();
    return true;
}

bool TcpConnection::send_ack(TcpTime now, bool probe) {
    // A probe (zero window or keepalive) carries SND.UNA - 1: old, so the peer answers it
    // with an ACK showing its window, and no byte of a record is sent out of turn. A plain
    // ACK carries the highest sequence number sent (as BSD does): after a timeout SND.NXT
    // goes back, and an ACK numbered below the peer's RCV.NXT would fail its sequence test
    // and be dropped, ACK field unread.
    const Seq seq = probe ? seq_of(iss_, snd_una_) - 1 : seq_of(iss_, snd_max_);
    if (!transmit(seq, flag::ack, 0, 0, now)) return false;
    if (probe) probe_pending_ = false;
    return true;
}

// The payload of a segment starting at `off` under the record rule (connection.h), and
// whether it ends a record.
std::uint32_t TcpConnection::plan_len(std::uint64_t off, bool& ends_record) const {
    ends_record = false;
    if (off >= write_end_) return 0;
    std::uint64_t lo = rec_head_, hi = rec_tail_;
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (rec_end_[mid % rec_cap_] <= off) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    const std::uint64_t rec_start = lo == rec_head_ ? rec_base_ : rec_end_[(lo - 1) % rec_cap_];
    const std::uint64_t rec_end = rec_end_[lo % rec_cap_];
    if (off != rec_start || rec_end - off > mss_) {
        // Inside a record, or at the start of one larger than the MSS: its next piece.
        ends_record = rec_end - off <= mss_;
        return static_cast<std::uint32_t>(std::min<std::uint64_t>(rec_end - off, mss_));
    }
    std::uint64_t e = off;
    for (std::uint64_t i = lo; i < rec_tail_ && rec_end_[i % rec_cap_] - off <= mss_; ++i)
        e = rec_end_[i % rec_cap_];
    ends_record = true;
    return static_cast<std::uint32_t>(e - off);
}

// New data (or go-back-N retransmission after a timeout) at SND.NXT, within the peer's
// window and, with `check_cwnd`, the congestion window.
bool TcpConnection::pick_normal(Plan& p, TcpTime now, bool check_cwnd) {
    while (snd_nxt_ < snd_max_ && sb_.is_sacked(snd_nxt_)) snd_nxt_ = sb_.sacked_end(snd_nxt_);
    const std::uint64_t off = snd_nxt_;
    const bool fin_next = fin_queued_ && off == fin_off_;
    p = Plan{};
    p.off = off;
    p.len = plan_len(off, p.ends_record);
    if (p.len == 0 && !fin_next) return false;
    const std::uint64_t wnd_end = snd_una_ + snd_wnd_;
    if (off + p.len > wnd_end || (p.len == 0 && off > wnd_end)) {
        if (snd_nxt_ == snd_una_ && off < wnd_end) {
            p.len = static_cast<std::uint32_t>(wnd_end - off);  // the peer forces a split
            p.ends_record = false;
        } else {
            if (snd_una_ == snd_max_ && persist_deadline_ == kNever) {
                persist_deadline_ = now + rto_.rto();  // zero window: start probing
            }
            return false;
        }
    }
    bool limited = false;
    if (check_cwnd && snd_nxt_ > snd_una_ && (snd_nxt_ - snd_una_) + p.len > cc_.cwnd()) {
        // Limited Transmit (RFC 3042): on each of the first two duplicate ACKs, one segment of
        // new data the peer's window takes, with at most cwnd + 2 SMSS outstanding; cwnd stays.
        // The segments it gets out draw the duplicate ACKs a small window would otherwise not
        // have for a fast retransmit.
        const std::uint64_t allowance =
            cc_.in_recovery() || off < snd_max_ ? 0 : std::min<std::uint32_t>(dupacks_, 2) * mss_;
        if ((snd_nxt_ - snd_una_) + p.len > cc_.cwnd() + allowance || lt_sent_ >= dupacks_)
            return false;
        limited = true;
    }
    p.limited = limited;
    p.fin = fin_queued_ && off + p.len == fin_off_;
    p.retransmit = off < snd_max_;
    p.advance = true;
    return true;
}

// A retransmission from `off`, under the record rule and never past `limit` (a hole's end,
// SND.MAX); its FIN when it ends where the FIN is. True when it sends anything.
bool TcpConnection::plan_resend(Plan& p, std::uint64_t off, std::uint64_t limit) const {
    p = Plan{};
    p.off = off;
    p.len = plan_len(off, p.ends_record);
    if (p.off + p.len > limit) {
        p.len = static_cast<std::uint32_t>(limit - p.off);
        p.ends_record = false;
    }
    p.fin = fin_queued_ && fin_off_ < snd_max_ && p.off + p.len == fin_off_;
    p.retransmit = true;
    p.advance = false;
    return p.len > 0 || p.fin;
}

// The bytes RACK found lost that sack_pipe counts as still in the network: not acknowledged,
// not SACKed, not lost by RFC 6675's IsLost.
std::uint64_t TcpConnection::rack_lost_bytes() const {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < nlost_; ++i) {
        std::uint64_t at = std::max(rack_lost_[i].start, snd_una_);
        const std::uint64_t end = std::min(rack_lost_[i].end, snd_max_);
        while (at < end) {
            at = sb_.sacked_end(at);
            if (at >= end) break;
            const std::uint64_t hole_end = std::min(sb_.next_sacked(at, end), end);
            n += hole_end - first_not_lost(sb_, at, hole_end, mss_);
            at = hole_end;
        }
    }
    return n;
}

// What RACK found lost and has not sent again yet, lowest first, less what has been
// acknowledged or SACKed since. A range wholly acknowledged or SACKed leaves the list.
bool TcpConnection::pick_rack_lost(Plan& p) {
    std::size_t i = 0;
    while (i < nlost_) {
        Lost& r = rack_lost_[i];
        const std::uint64_t end = std::min(r.end, snd_max_);
        std::uint64_t first = std::max(r.start, snd_una_);
        while (first < end && sb_.is_sacked(first)) first = sb_.sacked_end(first);
        if (first >= end) {  // nothing of it is missing any more
            for (std::size_t k = i + 1; k < nlost_; ++k) rack_lost_[k - 1] = rack_lost_[k];
            --nlost_;
            continue;
        }
        std::uint64_t off = std::max(r.sent, first);
        while (off < end && sb_.is_sacked(off)) off = sb_.sacked_end(off);
        if (off >= end) {  // all sent again: it waits to be acknowledged
            ++i;
            continue;
        }
        const bool any = plan_resend(p, off, std::min(sb_.next_sacked(off, end), end));
        r.sent = p.off + p.len + (p.fin ? 1 : 0);
        if (any) return true;
        ++i;
    }
    return false;
}

// The tail-loss probe (RFC 8985 §7.3): the highest segment sent, again; new data only when
// nothing is left to resend.
bool TcpConnection::pick_probe(Plan& p, TcpTime now) {
    // The last segment sent goes again, where RFC 8985 §7.3 would rather send new data: a
    // receiver that holds it answers the copy at once with a D-SACK (a lost ACK, no
    // reduction), one that lacks it at once as the hole it fills; new data in order would
    // wait out the receiver's delayed ACK (40 ms and more on Linux) before any answer.
    if (snd_una_ >= snd_max_) return false;
    std::uint64_t start = 0, end = 0;
    if (rack_.last(snd_una_, start, end) && plan_resend(p, start, std::min(end, snd_max_))) {
        p.probe = true;
        return true;
    }
    if (snd_nxt_ == snd_max_ && pick_normal(p, now, false) && !p.retransmit) {
        p.probe = true;
        return true;
    }
    return false;
}

bool TcpConnection::pick(Plan& p, TcpTime now) {
    // A probe due is sent now or not at all (the state may have moved on since the PTO); a
    // retransmission left pending by a full wire is dropped once no data may be sent (our FIN
    // acknowledged meanwhile): pending, it would keep next_deadline() at 0.
    const bool probe = std::exchange(tlp_pending_, false);
    if (!can_send_data()) {
        fast_rtx_pending_ = false;
        return false;
    }
    if (probe && pick_probe(p, now)) return true;
    if (fast_rtx_pending_) {
        fast_rtx_pending_ = false;
        if (snd_una_ < snd_max_) {
            plan_resend(p, snd_una_, snd_max_);
            return true;
        }
    }
    if (!(cc_.in_recovery() && cc_.sack())) {
        // Outside a recovery (one could not begin: RFC 6582's guard after a timeout), what
        // RACK found lost goes as the window allows.
        if (nlost_ > 0 && snd_nxt_ - snd_una_ <= cc_.cwnd() && pick_rack_lost(p)) return true;
        return pick_normal(p, now, true);
    }
    // RFC 6675 §5 step (C): send while cwnd - pipe >= 1 SMSS, choosing by NextSeg, after
    // what RACK found lost (RFC 8985 §6: its losses are NextSeg's rule 1, and out of the pipe).
    std::uint64_t pipe = sack_pipe(sb_, snd_una_, snd_max_, high_rxt_, mss_);
    pipe -= std::min(pipe, rack_lost_bytes());
    if (pipe + mss_ > cc_.cwnd()) return false;
    if (pick_rack_lost(p)) return true;
    Range hole;
    bool lost = false;
    const bool have_hole = next_hole(sb_, snd_una_, high_rxt_, mss_, hole, lost);
    if (!(have_hole && lost) && pick_normal(p, now, false)) return true;  // rule 2
    if (!have_hole) return false;                                         // rules 1 and 3
    return plan_resend(p, hole.start, hole.end);
}

bool TcpConnection::send_plan(const Plan& p, TcpTime now) {
    std::uint8_t flags = flag::ack;
    if (p.ends_record && p.len > 0) flags |= flag::psh;
    if (p.fin) flags |= flag::fin;
    if (!transmit(seq_of(iss_, p.off), flags, p.off, p.len, now)) return false;
    const std::uint64_t end = p.off + p.len + (p.fin ? 1 : 0);
    if (p.retransmit) {
        counters_.retransmits.add();
        timing_ = false;  // Karn: an ACK now may be for either transmission
        if (undo_armed_ && !p.probe) {
            undo_retrans_ += p.len;
            undo_sent_ = true;
        }
    } else {
        counters_.bytes_sent.add(p.len);
        if (!timing_) {
            timing_ = true;
            rtt_off_ = end - 1;
            rtt_start_ = now;
        }
    }
    if (p.limited) {
        ++lt_sent_;
        lt_bytes_ += p.len;
        counters_.limited_transmits.add();
    }
    if (sack_ok_) {
        rack_.sent(p.off, end, now, p.retransmit);
        // Whatever sent these bytes again (the fast retransmit, NextSeg) sent them for RACK's
        // lost ranges too.
        for (std::size_t i = 0; i < nlost_; ++i) {
            Lost& l = rack_lost_[i];
            if (p.retransmit && p.off <= l.sent && l.sent < end) l.sent = end;
        }
    }
    if (p.advance) {
        snd_nxt_ = end;
    } else if (!p.probe) {  // a probe is no recovery's retransmission (RFC 6675's HighRxt)
        high_rxt_ = std::max(high_rxt_, end);
    }
    snd_max_ = std::max(snd_max_, end);
    if (p.len > 0) {
        persist_deadline_ = kNever;
        persist_backoff_ = 0;
    }
    if (p.probe) {
        counters_.tlp_probes.add();
        tlp_out_ = true;
        tlp_retransmit_ = p.retransmit;
        tlp_saw_recovery_ = cc_.in_recovery();
        tlp_dsacked_ = false;
        tlp_start_ = p.off;
        tlp_end_ = snd_max_;
        tlp_flight_ = flight();
        pto_deadline_ = kNever;
        rto_deadline_ = now + rto_.rto();  // RFC 8985 §7.3: the RTO runs from the probe
        return true;
    }
    if (rto_deadline_ == kNever) rto_deadline_ = now + rto_.rto();
    arm_pto(now);
    return true;
}

bool TcpConnection::output(TcpTime now) {
    kick_ = false;
    if (rst_pending_ && !send_rst()) {
        kick_ = true;
        return false;
    }
    if (state_ == TcpState::closed) return true;
    if (syn_pending_ && !send_syn(now)) {
        kick_ = true;
        return false;
    }
    if (state_ == TcpState::syn_sent) {
        ack_now_ = false;  // nothing to acknowledge yet
        return true;
    }
    std::uint32_t budget = cfg_.max_burst;
    Plan p;
    while (budget > 0 && pick(p, now)) {
        if (!send_plan(p, now)) {
            if (!p.advance && p.retransmit && p.off == snd_una_) fast_rtx_pending_ = true;
            kick_ = true;
            return false;
        }
        --budget;
    }
    if (budget == 0) kick_ = true;
    if (probe_pending_ && !send_ack(now, true)) {
        kick_ = true;
        return false;
    }
    if (ack_now_ && !send_ack(now, false)) {
        kick_ = true;
        return false;
    }
    return true;
}

}  // namespace snic::tcp
