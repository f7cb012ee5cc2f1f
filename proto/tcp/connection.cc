// The connection's construction, byte-stream API, events and timers.
#include "proto/tcp/connection.h"

#include <algorithm>
#include <cstring>

namespace snic::tcp {

const char* tcp_config_error(const TcpConfig& c) {
    const bool v4 = c.local.addr.is_v4() && c.remote.addr.is_v4();
    if (c.mtu < (v4 ? 20u : 40u) + 20u + 64u) return "mtu too small";
    if (c.mtu > 65535) return "mtu above 65535";
    if (c.send_buffer == 0 || c.max_records == 0) return "no send buffer";
    if (c.recv_window == 0 || c.max_recv_buffers == 0) return "no receive window";
    if (c.recv_window > (65535u << kMaxWscale)) return "recv_window beyond scale 14";
    if (!c.window_scale && c.recv_window > 65535) return "recv_window needs window scaling";
    if (c.rto_min == 0 || c.rto_min > c.rto_max || c.rto_initial > c.rto_max)
        return "bad RTO bounds";
    if (c.max_burst == 0) return "max_burst 0";
    return nullptr;
}

TcpConnection::TcpConnection(const TcpConfig& config, TcpWire& wire)
    : cfg_(config), wire_(wire), rto_(config.rto_initial, config.rto_min, config.rto_max) {
    const bool v4 = cfg_.local.addr.is_v4() && cfg_.remote.addr.is_v4();
    pseudo_base_ = pseudo_sum(cfg_.local.addr, cfg_.remote.addr, 0);
    mss_announce_ = std::min<std::uint32_t>(cfg_.mtu - (v4 ? 20 : 40) - 20, 65535);
    peer_mss_ = v4 ? 536 : 1220;  // RFC 9293 §3.7.1 defaults
    mss_ = std::min(peer_mss_, mss_announce_);
    sbuf_cap_ = cfg_.send_buffer;
    sbuf_ = std::make_unique_for_overwrite<std::uint8_t[]>(sbuf_cap_);  // touched as used
    rec_cap_ = cfg_.max_records;
    rec_end_ = std::make_unique<std::uint64_t[]>(rec_cap_);
    rbuf_cap_ = cfg_.max_recv_buffers;
    rbufs_ = std::make_unique<RecvBuf[]>(rbuf_cap_);
    ev_cap_ = 2 * rbuf_cap_ + 16;
    ev_ = std::make_unique<TcpEvent[]>(ev_cap_);
    while (our_wscale_ < kMaxWscale && (std::uint64_t{cfg_.recv_window} >> our_wscale_) > 65535)
        ++our_wscale_;
    ts_offset_ = timestamp_offset(cfg_.isn_key, cfg_.local, cfg_.remote);
    cc_.init(mss_, false);
}

TcpConnection::~TcpConnection() = default;

// --- opening -----------------------------------------------------------------------------------

void TcpConnection::open_active(TcpTime now) {
    if (state_ != TcpState::closed) return;
    iss_ = initial_sequence(cfg_.isn_key, cfg_.local, cfg_.remote, now);
    state_ = TcpState::syn_sent;
    passive_ = false;
    syn_pending_ = true;
    last_rx_ = now;
}

bool TcpConnection::open_passive(const Segment& syn, TcpTime now) {
    if (state_ != TcpState::closed || !syn.has(flag::syn) || syn.has(flag::ack) ||
        syn.has(flag::rst)) {
        return false;
    }
    counters_.segments_in.add();
    last_rx_ = now;
    iss_ = initial_sequence(cfg_.isn_key, cfg_.local, cfg_.remote, now);
    irs_ = syn.seq;
    rcv_nxt_ = 1;
    rcv_adv_ = 1;
    take_syn_options(syn);
    snd_wnd_ = syn.window;  // never scaled in a SYN (RFC 7323 §2.2)
    max_snd_wnd_ = snd_wnd_;
    snd_wl1_ = syn.seq;
    snd_wl2_ = iss_;
    state_ = TcpState::syn_received;
    passive_ = true;
    syn_pending_ = true;
    return true;
}

bool TcpConnection::open_from_cookie(const Segment& ack, Seq iss, std::uint32_t peer_mss,
                                     TcpTime now) {
    if (state_ != TcpState::closed || !ack.has(flag::ack) || ack.has(flag::syn) ||
        ack.has(flag::rst)) {
        return false;
    }
    // What open_passive() and sending the SYN-ACK would have left, had we kept state: the
    // SYN (offset 0) sent, nothing acknowledged, the peer's ISN just before its ACK.
    iss_ = iss;
    irs_ = ack.seq - 1;
    rcv_nxt_ = 1;
    rcv_adv_ = 1;
    ws_ok_ = sack_ok_ = ts_ok_ = false;
    snd_wscale_ = rcv_wscale_ = 0;
    peer_mss_ = std::max(peer_mss, kMinSendMss);
    mss_ = max_segment();
    cc_.init(mss_, false);
    snd_nxt_ = snd_max_ = 1;
    snd_wl1_ = irs_;
    snd_wl2_ = iss_;
    state_ = TcpState::syn_received;
    passive_ = true;
    on_segment(ack, now);
    return state_ == TcpState::established || state_ == TcpState::close_wait;
}

// --- the byte stream ---------------------------------------------------------------------------

std::size_t TcpConnection::send_space() const {
    const std::uint64_t held = queued();
    if (rec_tail_ - rec_head_ >= rec_cap_) return 0;
    return sbuf_cap_ - held;
}

bool TcpConnection::send(std::span<const std::byte> record) {
    const bool open = state_ == TcpState::syn_sent || state_ == TcpState::syn_received ||
                      state_ == TcpState::established || state_ == TcpState::close_wait;
    if (!open || fin_queued_ || record.empty() || record.size() > sbuf_cap_) return false;
    if (record.size() > send_space()) {
        want_space_ = true;
        return false;
    }
    // Copy into the ring at write_end_ (data offset 1 is ring index 0).
    std::size_t at = (write_end_ - 1) % sbuf_cap_;
    const std::size_t first = std::min<std::size_t>(record.size(), sbuf_cap_ - at);
    std::memcpy(sbuf_.get() + at, record.data(), first);
    std::memcpy(sbuf_.get(), record.data() + first, record.size() - first);
    write_end_ += record.size();
    rec_end_[rec_tail_ % rec_cap_] = write_end_;
    ++rec_tail_;
    kick_ = true;
    return true;
}

bool TcpConnection::post_receive(std::span<std::byte> buffer, std::uint64_t cookie) {
    if (buffer.empty() || buffer.size() > 0xffffffffu || rbuf_tail_ - rbuf_head_ >= rbuf_cap_ ||
        rcv_fin_done_ || finished_) {
        return false;
    }
    const std::uint64_t before = rcv_space();
    RecvBuf& b = rbufs_[rbuf_tail_ % rbuf_cap_];
    b = RecvBuf{buffer.data(), static_cast<std::uint32_t>(buffer.size()), cookie, posted_end_};
    ++rbuf_tail_;
    posted_end_ += buffer.size();
    // Window update (RFC 9293 §3.8.6.2.2): when the right edge may move by an MSS or half
    // the buffer, whichever is less.
    const std::uint64_t step = std::min<std::uint64_t>(mss_, cfg_.recv_window / 2);
    if (synchronized() && rcv_space() >= before + step &&
        rcv_nxt_ + rcv_space() >= rcv_adv_ + step) {
        ack_now_ = true;
    }
    return true;
}

void TcpConnection::close() {
    switch (state_) {
        case TcpState::syn_sent:
            to_closed(EventKind::closed);
            return;
        case TcpState::syn_received:
        case TcpState::established:
        case TcpState::close_wait:
            if (fin_queued_) return;
            fin_queued_ = true;
            fin_off_ = write_end_;
            if (state_ == TcpState::established) state_ = TcpState::fin_wait_1;
            if (state_ == TcpState::close_wait) state_ = TcpState::last_ack;
            kick_ = true;
            return;
        default:
            return;
    }
}

void TcpConnection::abort() {
    if (state_ == TcpState::closed) return;
    if (state_ != TcpState::syn_sent && state_ != TcpState::time_wait) {
        queue_rst(seq_of(iss_, snd_max_));
    }
    to_closed(EventKind::closed);
}

// --- events ------------------------------------------------------------------------------------

void TcpConnection::push_event(EventKind kind, std::uint64_t cookie, std::uint64_t bytes) {
    if (kind == EventKind::readable && ev_tail_ != ev_head_ &&
        ev_[(ev_tail_ - 1) % ev_cap_].kind == EventKind::readable) {
        ev_[(ev_tail_ - 1) % ev_cap_].bytes = bytes;  // coalesced: the total is what counts
        return;
    }
    if (ev_tail_ - ev_head_ >= ev_cap_) {
        counters_.events_lost.add();  // sized for every posted buffer twice over
        return;
    }
    ev_[ev_tail_ % ev_cap_] = TcpEvent{kind, cookie, bytes};
    ++ev_tail_;
}

bool TcpConnection::next_event(TcpEvent& out) {
    if (ev_head_ == ev_tail_) return false;
    out = ev_[ev_head_ % ev_cap_];
    ++ev_head_;
    return true;
}

// Completes posted buffers: those wholly below the in-order point, and with `all` every
// one (the stream ended), each with the in-order bytes it holds.
void TcpConnection::complete_receives(bool all) {
    const std::uint64_t in_order = 1 + received();
    while (rbuf_head_ != rbuf_tail_) {
        const RecvBuf& b = rbufs_[rbuf_head_ % rbuf_cap_];
        const std::uint64_t end = b.start + b.len;
        if (end > in_order && !all) break;
        const std::uint64_t got = in_order > b.start ? std::min(end, in_order) - b.start : 0;
        push_event(EventKind::recv_done, b.cookie, got);
        ++rbuf_head_;
    }
}

void TcpConnection::to_closed(EventKind why) {
    state_ = TcpState::closed;
    finished_ = true;
    rto_deadline_ = persist_deadline_ = delack_deadline_ = tw_deadline_ = kNever;
    syn_pending_ = probe_pending_ = fast_rtx_pending_ = ack_now_ = false;
    complete_receives(true);
    push_event(why);
}

void TcpConnection::queue_rst(Seq seq) {
    rst_ = SegmentSpec{};
    rst_.src_port = cfg_.local.port;
    rst_.dst_port = cfg_.remote.port;
    rst_.seq = seq;
    rst_.flags = flag::rst;
    rst_pending_ = true;
}

void TcpConnection::give_up(EventKind why) {
    if (synchronized() || state_ == TcpState::syn_received) {
        queue_rst(seq_of(iss_, snd_max_));
    }
    to_closed(why);
}

// --- windows -----------------------------------------------------------------------------------

std::uint64_t TcpConnection::rcv_space() const {
    const std::uint64_t from = std::max<std::uint64_t>(rcv_nxt_, 1);
    const std::uint64_t room = posted_end_ > from ? posted_end_ - from : 0;
    return std::min<std::uint64_t>(room, cfg_.recv_window);
}

std::uint64_t TcpConnection::rcv_window_for_check() const {
    const std::uint64_t adv = rcv_adv_ > rcv_nxt_ ? rcv_adv_ - rcv_nxt_ : 0;
    return std::max(adv, rcv_space());
}

void TcpConnection::pop_acked_records() {
    const std::uint64_t acked_data_end = std::min(snd_una_, write_end_);
    while (rec_head_ != rec_tail_ && rec_end_[rec_head_ % rec_cap_] <= acked_data_end) {
        rec_base_ = rec_end_[rec_head_ % rec_cap_];
        ++rec_head_;
    }
    if (want_space_ && send_space() > 0) {
        want_space_ = false;
        push_event(EventKind::send_space);
    }
}

// --- timers ------------------------------------------------------------------------------------

TcpTime TcpConnection::keepalive_deadline() const {
    if (!cfg_.keepalive || state_ != TcpState::established || snd_una_ != snd_max_ ||
        write_end_ != snd_max_) {
        return kNever;
    }
    return ka_probes_ == 0 ? last_rx_ + cfg_.keepalive_idle
                           : ka_last_probe_ + cfg_.keepalive_interval;
}

TcpTime TcpConnection::next_deadline() const {
    if (kick_ || ack_now_ || rst_pending_ || syn_pending_ || probe_pending_ || fast_rtx_pending_ ||
        tlp_pending_)
        return 0;
    return std::min({rto_deadline_, persist_deadline_, delack_deadline_, tw_deadline_,
                     keepalive_deadline(), pto_deadline_, rack_deadline_});
}

void TcpConnection::run_timers(TcpTime now) {
    if (tw_deadline_ <= now) {
        tw_deadline_ = kNever;
        if (state_ == TcpState::fin_wait_2) {
            counters_.fin_wait_2_timeouts.add();
            give_up(EventKind::timed_out);
        } else {
            to_closed(EventKind::closed);
        }
        return;
    }
    if (rto_deadline_ <= now) on_rto(now);
    if (state_ == TcpState::closed) return;
    if (rack_deadline_ <= now) {
        rack_deadline_ = kNever;
        rack_detect(now);
    }
    if (pto_deadline_ <= now) on_pto();
    if (persist_deadline_ <= now) {
        // Zero-window probe (RFC 9293 §3.8.6.1): a segment the peer must answer with its
        // window; the interval backs off like the RTO.
        probe_pending_ = true;
        counters_.window_probes.add();
        ++persist_backoff_;
        TcpTime next = rto_.rto();
        for (std::uint32_t i = 0; i < persist_backoff_ && next < cfg_.rto_max; ++i) next *= 2;
        persist_deadline_ = now + std::min(next, cfg_.rto_max);
    }
    if (delack_deadline_ <= now) {
        delack_deadline_ = kNever;
        ack_now_ = true;
        counters_.delayed_acks.add();
    }
    if (keepalive_deadline() <= now) {
        if (ka_probes_ >= cfg_.keepalive_probes) {
            give_up(EventKind::timed_out);
            return;
        }
        ++ka_probes_;
        ka_last_probe_ = now;
        probe_pending_ = true;
        counters_.keepalive_probes.add();
    }
}

void TcpConnection::on_rto(TcpTime now) {
    counters_.timeouts.add();
    timing_ = false;  // Karn: nothing sent before now may give a sample
    if (state_ == TcpState::syn_sent || state_ == TcpState::syn_received) {
        if (retries_ >= cfg_.syn_retries) {
            give_up(EventKind::timed_out);
            return;
        }
        ++retries_;
        rto_.back_off();
        syn_pending_ = true;
        rto_deadline_ = now + rto_.rto();
        return;
    }
    if (snd_una_ == snd_max_) {
        rto_deadline_ = kNever;
        return;
    }
    if (retries_ >= cfg_.max_retries) {
        give_up(EventKind::timed_out);
        return;
    }
    ++retries_;
    // RFC 5681 §3.1 and RFC 6298 §5.4-5.6: collapse cwnd, go back to SND.UNA, back off.
    cc_.on_timeout(flight(), snd_max_);
    arm_undo();
    sb_.clear();  // RFC 2018 §8: SACKed data may be discarded by the receiver
    high_rxt_ = snd_una_;
    dupacks_ = 0;
    lt_sent_ = 0;
    lt_bytes_ = 0;
    fast_rtx_pending_ = false;
    // Everything goes again from SND.UNA: RACK starts over, no probe is out or due.
    rack_.clear();
    nlost_ = 0;
    rack_deadline_ = kNever;
    pto_deadline_ = kNever;
    tlp_pending_ = false;
    tlp_out_ = false;
    snd_nxt_ = snd_una_;
    rto_.back_off();
    rto_deadline_ = now + rto_.rto();
}

// --- RACK-TLP (RFC 8985) -------------------------------------------------------------------------

void TcpConnection::rack_detect(TcpTime now) {
    if (!sack_ok_ || !synchronized()) return;
    bool any = false;
    rack_deadline_ =
        rack_.detect(snd_una_, sb_, now, rto_.srtt(), [&](std::uint64_t start, std::uint64_t end) {
            counters_.rack_losses.add();
            any = true;
            // Kept sorted and apart; when full the last range grows to take it (more is sent
            // again than was lost, nothing lost is left out). A range lost again goes again.
            std::size_t i = 0;
            while (i < nlost_ && rack_lost_[i].end < start) ++i;
            if (i < nlost_ && rack_lost_[i].start <= end) {
                Lost& l = rack_lost_[i];
                l.sent = std::min(l.sent, start);
                l.start = std::min(l.start, start);
                l.end = std::max(l.end, end);
                return;
            }
            if (nlost_ == kRackLost) {
                Lost& l = rack_lost_[nlost_ - 1];
                l = Lost{std::min(l.start, start), std::max(l.end, end), std::min(l.sent, start)};
                return;
            }
            for (std::size_t k = nlost_; k > i; --k) rack_lost_[k] = rack_lost_[k - 1];
            rack_lost_[i] = Lost{start, end, start};
            ++nlost_;
        });
    if (!any) return;
    kick_ = true;
    if (!cc_.in_recovery() && cc_.may_enter_recovery(snd_una_)) {
        // A loss starts the recovery as the third duplicate ACK would (RFC 8985 §6.2, RFC
        // 6675), with its fast retransmit whatever the pipe (RFC 6675 §5 step 4.2): the pipe
        // may be full of segments whose ACKs were lost, and then nothing else would send it.
        begin_recovery();
        fast_rtx_pending_ = true;
    }
    // A loss found within a recovery may wait for the pipe to drain; should the ACKs that
    // would drain it be lost, the probe draws one.
    arm_pto(now);
}

void TcpConnection::begin_recovery() {
    // ssthresh from the flight without what Limited Transmit sent (RFC 5681 §3.2 step 2).
    cc_.enter_recovery(flight() - std::min(lt_bytes_, flight()), snd_max_);
    arm_undo();
    counters_.fast_retransmits.add();
    high_rxt_ = snd_una_;
    timing_ = false;
    pto_deadline_ = kNever;
    if (tlp_out_) tlp_saw_recovery_ = true;
}

// --- D-SACK (RFC 2883) and undo (RFC 3708) -----------------------------------------------------

void TcpConnection::take_dsack(std::uint64_t lo, std::uint64_t hi, TcpTime now) {
    counters_.dsacks_in.add();
    // A D-SACK of our own probe's copy says an ACK was lost; any other, that reordering made
    // a resend spurious: RACK waits longer before it calls a segment lost.
    if (tlp_out_ && tlp_retransmit_ && lo < tlp_end_ && tlp_start_ < hi) {
        tlp_dsacked_ = true;
    } else {
        rack_.on_dsack(now, rto_.srtt());
    }
    if (undo_armed_ && lo >= undo_marker_) undo_retrans_ -= std::min(undo_retrans_, hi - lo);
}

void TcpConnection::arm_undo() {
    undo_armed_ = true;
    undo_sent_ = false;
    undo_marker_ = snd_una_;
    undo_retrans_ = 0;
}

void TcpConnection::try_undo() {
    // Once the recovery is over, and every byte it sent again was D-SACKed: nothing had been
    // lost, the reduction goes (a D-SACK may come after the ACK that ended the recovery).
    if (!undo_armed_ || !undo_sent_ || undo_retrans_ > 0 || cc_.in_recovery()) return;
    undo_armed_ = false;
    cc_.undo();
    counters_.undos.add();
}

void TcpConnection::note_duplicate(Seq lo, Seq hi) {
    ack_now_ = true;
    if (!sack_ok_) return;
    dsack_pending_ = true;
    dsack_left_ = lo;
    dsack_right_ = hi;
}

bool TcpConnection::may_probe() const {
    return sack_ok_ && !tlp_out_ && snd_una_ < snd_max_ && can_send_data();
}

void TcpConnection::arm_pto(TcpTime now) {
    pto_deadline_ = kNever;
    // Not after a timeout, nor with SACKed data out outside a recovery (RACK has what it
    // needs then). Within a recovery, unlike RFC 8985 §7.2: when the ACK that would end it is
    // lost and the last segment sent was a retransmission, nothing but a probe draws another
    // ACK before the retransmission timer.
    if (!may_probe() || retries_ > 0 || (sb_.size() != 0 && !cc_.in_recovery())) return;
    // RFC 8985 §7.2: PTO = 2 * SRTT, and the worst case of a delayed ACK when one segment is
    // out; never later than the retransmission timer. At least 1 ms: on a link of
    // microseconds, 2 * SRTT is shorter than a busy host's scheduling delays; a probe sent too
    // soon costs one segment, which the peer's D-SACK shows was not lost.
    constexpr TcpTime kWcDelAck = 200 * kMs;
    constexpr TcpTime kPtoMin = kMs;
    TcpTime pto = rto_.has_sample() ? std::max(2 * rto_.srtt(), kPtoMin) : kSec;
    if (flight() <= mss_) pto += kWcDelAck;
    if (rto_deadline_ != kNever && now + pto >= rto_deadline_) return;
    pto_deadline_ = now + pto;
}

void TcpConnection::on_pto() {
    pto_deadline_ = kNever;
    tlp_pending_ = may_probe();
}

// --- path MTU ----------------------------------------------------------------------------------

bool TcpConnection::sent_unacked(Seq seq) const {
    if (snd_max_ == snd_una_) return false;
    const std::int64_t d = seq_diff(seq, seq_of(iss_, snd_una_));
    return d >= 0 && static_cast<std::uint64_t>(d) < snd_max_ - snd_una_;
}

bool TcpConnection::on_path_mtu(std::uint32_t mtu, TcpTime now) {
    if (!synchronized() || state_ == TcpState::time_wait) return false;
    const bool v4 = cfg_.local.addr.is_v4() && cfg_.remote.addr.is_v4();
    const std::uint32_t least_mtu = v4 ? 68 : 1280;  // RFC 791, RFC 8200 §5
    const std::uint32_t headers = (v4 ? 20 : 40) + static_cast<std::uint32_t>(kTcpMinHdrLen);
    const std::uint32_t seg = std::max(std::max(mtu, least_mtu) - headers, kMinSendMss);
    if (seg >= max_segment()) return false;
    path_mss_ = seg;
    mss_ = max_segment() - (ts_ok_ ? 12 : 0);
    cc_.set_smss(mss_);
    counters_.pmtu_lowered.add();
    if (snd_max_ > snd_una_ && can_send_data()) {
        // RFC 1191 §6.1: what the hop dropped goes again now, in pieces that fit, from
        // SND.UNA (pick_normal skips what the peer SACKed). Not a loss: cwnd stays, the
        // copies the peer already holds may not start a fast retransmit, and the timer
        // restarts for the head being sent again (its old deadline was the dropped copy's).
        cc_.hold_recovery(snd_max_);
        snd_nxt_ = snd_una_;
        fast_rtx_pending_ = false;
        timing_ = false;  // Karn: the timed segment may be one sent again
        rto_deadline_ = now + rto_.rto();
        kick_ = true;
    }
    return true;
}

bool TcpConnection::poll(TcpTime now) {
    const std::uint64_t out_before = counters_.segments_out.get();
    const TcpState state_before = state_;
    run_timers(now);
    output(now);
    return counters_.segments_out.get() != out_before || state_ != state_before;
}

// --- views -------------------------------------------------------------------------------------

TcpInfo TcpConnection::info() const {
    TcpInfo i;
    i.state = state_;
    i.mss = mss_;
    i.cwnd = cc_.cwnd();
    i.ssthresh = cc_.ssthresh();
    i.srtt = rto_.srtt();
    i.rttvar = rto_.rttvar();
    i.rto = rto_.rto();
    i.snd_wnd = snd_wnd_;
    i.rcv_wnd = rcv_space();
    i.snd_wscale = snd_wscale_;
    i.rcv_wscale = rcv_wscale_;
    i.sack = sack_ok_;
    i.timestamps = ts_ok_;
    i.in_recovery = cc_.in_recovery();
    i.unacked = snd_max_ - snd_una_;
    i.queued = queued();
    i.sacked_blocks = static_cast<std::uint32_t>(sb_.size());
    i.ooo_blocks = static_cast<std::uint32_t>(ooo_.size());
    i.ooo_bytes = ooo_.bytes();
    return i;
}

}  // namespace snic::tcp
