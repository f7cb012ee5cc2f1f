// RACK's loss detection (RFC 8985 §6) over the sender's transmissions: a segment is lost when
// one sent after it has been delivered (cumulatively acknowledged or SACKed) and it has not,
// and more than an RTT and a reordering window have passed since it was sent. Unlike RFC
// 6675's duplicate-ACK count it finds a lost retransmission, and a loss at the tail once a
// tail-loss probe (RFC 8985 §7) draws an ACK; its reordering window keeps a little
// reordering from counting as loss.
//
// The log holds each transmission in the order it was sent, as a range of sequence offsets
// (seq.h) and its time; a retransmission makes the earlier transmissions of its bytes count
// no more. Bounded: when the log is full the oldest transmission is forgotten (its loss is
// then left to the retransmission timer). Nothing is allocated.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "proto/tcp/rto.h"
#include "proto/tcp/sack.h"

namespace snic::tcp {

class Rack {
  public:
    static constexpr std::size_t kMax = 256;

    // [start, end) went out at `now`; `retransmit`: bytes sent before.
    void sent(std::uint64_t start, std::uint64_t end, TcpTime now, bool retransmit);

    // After an ACK moved SND.UNA to `una` and the scoreboard `sb` took its SACK blocks
    // (§6.2 steps 1-3): each transmission delivered now updates the most recently sent
    // delivered one (RACK.xmit_ts, RACK.end_seq) and RACK.rtt; a retransmission delivered
    // sooner than the minimum RTT after it went out is ambiguous (the original's ACK) and
    // updates nothing.
    void on_ack(std::uint64_t una, const Scoreboard& sb, TcpTime now);

    // §6.2 step 5: calls lost(start, end) for each transmission sent before RACK's most
    // recent delivered one, not delivered, and older than RACK.rtt + the reordering window;
    // such a transmission is reported once. Returns when the next one would be due (the
    // reordering timer), or kNever.
    template <typename Lost>
    TcpTime detect(std::uint64_t una, const Scoreboard& sb, TcpTime now, TcpTime srtt, Lost&& lost);

    // The transmission of the highest offset still unacknowledged (a tail-loss probe
    // resends it); false when none.
    bool last(std::uint64_t una, std::uint64_t& start, std::uint64_t& end) const;

    // The retransmission timer expired: everything is sent again from SND.UNA.
    void clear();

    // §6.2 step 4's adaptation: a D-SACK (reordering made a retransmission spurious) widens
    // the reordering window by a quarter of the minimum RTT, at most once per round trip;
    // 16 recoveries without one narrow it back.
    void on_dsack(TcpTime now, TcpTime srtt);
    void on_recovery_end();

    bool has_rtt() const { return min_rtt_ != kNever; }
    // RACK.reo_wnd: reo_wnd_mult quarters of the minimum RTT, at most SRTT (§6.2 step 4).
    TcpTime reo_wnd(TcpTime srtt) const {
        if (!has_rtt()) return 0;
        const TcpTime w = reo_wnd_mult_ * (min_rtt_ / 4);
        return srtt > 0 && w > srtt ? srtt : w;
    }
    std::uint32_t reo_wnd_mult() const { return reo_wnd_mult_; }

  private:
    struct Tx {
        std::uint64_t start = 0, end = 0;
        TcpTime xmit = 0;
        bool retransmit = false;
        bool done = false;  // delivered, sent again, or reported lost
    };
    Tx& at(std::size_t i) { return log_[(head_ + i) % kMax]; }
    const Tx& at(std::size_t i) const { return log_[(head_ + i) % kMax]; }
    static bool delivered(const Tx& t, std::uint64_t una, const Scoreboard& sb) {
        const std::uint64_t from = t.start > una ? t.start : una;
        return from >= t.end || sb.sacked_end(from) >= t.end;
    }
    // Sent before RACK's most recent delivered transmission (§6.2 step 5's order: time, then
    // sequence).
    bool before_rack(const Tx& t) const {
        return t.xmit < xmit_ || (t.xmit == xmit_ && t.end <= end_);
    }
    void trim();

    std::array<Tx, kMax> log_{};
    std::size_t head_ = 0, n_ = 0;
    TcpTime xmit_ = 0;       // RACK.xmit_ts
    std::uint64_t end_ = 0;  // RACK.end_seq
    bool any_ = false;       // something was delivered since the log began
    TcpTime rtt_ = 0;
    TcpTime min_rtt_ = kNever;
    std::uint32_t reo_wnd_mult_ = 1;
    TcpTime dsack_round_end_ = 0;        // the next D-SACK that may widen the window
    std::uint32_t recoveries_left_ = 0;  // before the window narrows back
};

template <typename Lost>
TcpTime Rack::detect(std::uint64_t una, const Scoreboard& sb, TcpTime now, TcpTime srtt,
                     Lost&& lost) {
    if (!any_) return kNever;
    TcpTime next = kNever;
    const TcpTime wait = rtt_ + reo_wnd(srtt);
    for (std::size_t i = 0; i < n_; ++i) {
        Tx& t = at(i);
        if (t.done || !before_rack(t)) continue;
        if (delivered(t, una, sb)) {
            t.done = true;
            continue;
        }
        const TcpTime due = t.xmit + wait;
        if (due <= now) {
            t.done = true;
            lost(t.start > una ? t.start : una, t.end);
        } else if (due < next) {
            next = due;
        }
    }
    trim();
    return next;
}

}  // namespace snic::tcp
