// NewReno and RFC 6675 loss recovery.
#include "proto/tcp/congestion.h"

#include <algorithm>

namespace snic::tcp {

void Congestion::init(std::uint32_t smss, bool sack) {
    smss_ = smss;
    sack_ = sack;
    cwnd_ = std::min<std::uint64_t>(4ull * smss, std::max<std::uint64_t>(2ull * smss, 4380));
    ssthresh_ = ~std::uint64_t{0} >> 1;
    bytes_acked_ = 0;
    in_recovery_ = false;
    guarded_ = false;
    recover_ = 0;
}

void Congestion::on_ack(std::uint64_t acked) {
    if (cwnd_ < ssthresh_) {
        cwnd_ += std::min<std::uint64_t>(acked, smss_);
        return;
    }
    bytes_acked_ += acked;
    if (bytes_acked_ >= cwnd_) {
        bytes_acked_ -= cwnd_;
        cwnd_ += smss_;
    }
}

void Congestion::enter_recovery(std::uint64_t flight, std::uint64_t snd_max) {
    prior_cwnd_ = cwnd_;
    prior_ssthresh_ = ssthresh_;
    ssthresh_ = std::max<std::uint64_t>(flight / 2, 2ull * smss_);
    cwnd_ = sack_ ? ssthresh_ : ssthresh_ + 3ull * smss_;
    in_recovery_ = true;
    guarded_ = !sack_;
    recover_ = snd_max;
    bytes_acked_ = 0;
}

void Congestion::on_dupack_in_recovery() {
    if (in_recovery_ && !sack_) cwnd_ += smss_;
}

bool Congestion::on_ack_in_recovery(std::uint64_t una, std::uint64_t acked,
                                    std::uint64_t flight_after) {
    if (una >= recover_) {
        in_recovery_ = false;
        cwnd_ = sack_ ? ssthresh_
                      : std::min<std::uint64_t>(
                            ssthresh_, std::max<std::uint64_t>(flight_after, smss_) + smss_);
        return true;
    }
    if (!sack_) {
        cwnd_ = cwnd_ > acked ? cwnd_ - acked : 0;
        if (acked >= smss_) cwnd_ += smss_;
        cwnd_ = std::max<std::uint64_t>(cwnd_, smss_);
    }
    return false;
}

void Congestion::on_timeout(std::uint64_t flight, std::uint64_t snd_max) {
    prior_cwnd_ = cwnd_;
    prior_ssthresh_ = ssthresh_;
    ssthresh_ = std::max<std::uint64_t>(flight / 2, 2ull * smss_);
    cwnd_ = smss_;
    in_recovery_ = false;
    guarded_ = true;
    recover_ = snd_max;
    bytes_acked_ = 0;
}

void Congestion::on_repaired_loss(std::uint64_t flight) {
    ssthresh_ = std::max<std::uint64_t>(flight / 2, 2ull * smss_);
    cwnd_ = std::min(cwnd_, ssthresh_);
    bytes_acked_ = 0;
}

void Congestion::undo() {
    cwnd_ = std::max(cwnd_, prior_cwnd_);
    ssthresh_ = std::max(ssthresh_, prior_ssthresh_);
    bytes_acked_ = 0;
}

void Congestion::hold_recovery(std::uint64_t snd_max) {
    if (in_recovery_) return;
    guarded_ = true;
    recover_ = std::max(recover_, snd_max);
}

std::uint64_t first_not_lost(const Scoreboard& sb, std::uint64_t lo, std::uint64_t hi,
                             std::uint32_t smss) {
    while (lo < hi) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        if (sb.is_lost(mid, smss)) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

std::uint64_t sack_pipe(const Scoreboard& sb, std::uint64_t una, std::uint64_t snd_max,
                        std::uint64_t high_rxt, std::uint32_t smss) {
    std::uint64_t pipe = 0;
    std::uint64_t at = una;
    while (at < snd_max) {
        at = sb.sacked_end(at);
        if (at >= snd_max) break;
        const std::uint64_t end = sb.next_sacked(at, snd_max);  // the hole [at, end)
        const std::uint64_t lost_end = first_not_lost(sb, at, end, smss);
        pipe += end - lost_end;                                   // not lost: in the network
        if (high_rxt > at) pipe += std::min(high_rxt, end) - at;  // retransmitted
        at = end;
    }
    return pipe;
}

bool next_hole(const Scoreboard& sb, std::uint64_t una, std::uint64_t high_rxt, std::uint32_t smss,
               Range& hole, bool& lost) {
    const std::uint64_t top = sb.highest();
    std::uint64_t at = std::max(una, high_rxt);
    while (at < top) {
        const std::uint64_t e = sb.sacked_end(at);
        if (e != at) {
            at = e;
            continue;
        }
        hole = Range{at, sb.next_sacked(at, top)};
        lost = sb.is_lost(at, smss);
        return true;
    }
    return false;
}

}  // namespace snic::tcp
