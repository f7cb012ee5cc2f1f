// Congestion control: NewReno (RFC 5681 slow start and congestion avoidance, fast
// retransmit and fast recovery with RFC 6582's partial ACKs) and, when SACK was agreed,
// RFC 6675's conservative loss recovery (the pipe estimate, NextSeg's choice of what to
// send). Windows and offsets in bytes of the sender's sequence space (seq.h offsets).
// The connection decides when an ACK is new, a duplicate, partial or full; this decides
// what the windows become.
#pragma once

#include <cstdint>

#include "proto/tcp/sack.h"

namespace snic::tcp {

inline constexpr std::uint32_t kDupThresh = 3;  // RFC 5681 §3.2, RFC 6675 §2

class Congestion {
  public:
    // RFC 5681 §3.1: IW = min(4 * SMSS, max(2 * SMSS, 4380)) (RFC 3390); ssthresh as large
    // as possible. `sack`: loss recovery per RFC 6675 rather than NewReno's inflation.
    void init(std::uint32_t smss, bool sack);

    // New data acknowledged outside recovery: slow start (cwnd += min(N, SMSS), RFC 5681
    // §3.1 with RFC 3465's limit L = 1 SMSS) or congestion avoidance (one SMSS per cwnd's
    // worth of bytes acknowledged, byte counting).
    void on_ack(std::uint64_t acked);

    // RFC 6582 §3.2 step 2: fast retransmit only when the cumulative ACK is past `recover`,
    // after a NewReno recovery, a timeout or a held resend (duplicate ACKs then may be for
    // copies the peer already held). A SACK recovery leaves no such guard (RFC 6675 §5: a
    // new loss after a full ACK starts the next recovery; the scoreboard tells the ACKs apart).
    bool may_enter_recovery(std::uint64_t una) const { return !guarded_ || una > recover_; }
    // Fast retransmit (RFC 5681 §3.2 steps 2-3, RFC 6675 §5 step 4): ssthresh =
    // max(FlightSize / 2, 2 * SMSS); NewReno inflates cwnd to ssthresh + 3 * SMSS, SACK
    // recovery sets cwnd = ssthresh. `snd_max`: the highest offset sent (RecoveryPoint).
    void enter_recovery(std::uint64_t flight, std::uint64_t snd_max);
    // A further duplicate ACK in NewReno recovery inflates cwnd by SMSS (§3.2 step 4).
    void on_dupack_in_recovery();
    // An ACK of new data during recovery. Returns true when it is a full ACK (recovery
    // ends: NewReno sets cwnd = min(ssthresh, max(FlightSize, SMSS) + SMSS), RFC 6582 §3.2
    // step 3; SACK recovery sets cwnd = ssthresh). A partial ACK deflates NewReno's cwnd by
    // the bytes acknowledged and adds back SMSS when at least SMSS was (step 4).
    bool on_ack_in_recovery(std::uint64_t una, std::uint64_t acked, std::uint64_t flight_after);
    // The retransmission timer expired (RFC 5681 §3.1 eq. 4, §3.2 LW): ssthresh =
    // max(FlightSize / 2, 2 * SMSS), cwnd = 1 SMSS, recovery abandoned; recover = snd_max
    // (RFC 6582 §3.2 step 4... of the timeout rule).
    void on_timeout(std::uint64_t flight, std::uint64_t snd_max);
    // A loss repaired without a recovery (a tail-loss probe's retransmission, RFC 8985
    // §7.4.2): the same reduction a fast recovery ends in, ssthresh = max(FlightSize / 2,
    // 2 * SMSS) and cwnd = ssthresh.
    void on_repaired_loss(std::uint64_t flight);
    // The path's MSS fell (RFC 1191): growth from now on is in the new SMSS; cwnd and
    // ssthresh stay the bytes they were (not a congestion signal).
    void set_smss(std::uint32_t smss) { smss_ = smss; }
    // Everything up to `snd_max` is being sent again without a loss (path MTU): the peer's
    // duplicate ACKs for copies it already held must not start a fast retransmit before the
    // cumulative ACK passes `snd_max` (RFC 6582 §3.2 step 2's guard, as after a timeout).
    // Nothing changes during a recovery (its own `recover` stands).
    void hold_recovery(std::uint64_t snd_max);
    // The last reduction (a recovery, a timeout) was spurious: every byte it sent again had
    // arrived before (RFC 3708's D-SACK detection). cwnd and ssthresh go back to at least
    // what they were before it, the response of RFC 4015 §3.
    void undo();

    std::uint64_t cwnd() const { return cwnd_; }
    std::uint64_t ssthresh() const { return ssthresh_; }
    bool in_recovery() const { return in_recovery_; }
    std::uint64_t recover() const { return recover_; }
    bool sack() const { return sack_; }
    std::uint32_t smss() const { return smss_; }

  private:
    std::uint32_t smss_ = 536;
    bool sack_ = false;
    std::uint64_t cwnd_ = 0;
    std::uint64_t ssthresh_ = ~std::uint64_t{0} >> 1;
    std::uint64_t bytes_acked_ = 0;                      // congestion avoidance's byte count
    std::uint64_t prior_cwnd_ = 0, prior_ssthresh_ = 0;  // before the last reduction
    bool in_recovery_ = false;
    bool guarded_ = false;  // may_enter_recovery's RFC 6582 guard stands
    std::uint64_t recover_ = 0;
};

// RFC 6675 §4 SetPipe: the bytes of [una, snd_max) the sender thinks are in the network:
// each byte not SACKed counts once unless IsLost, and once more when it was retransmitted
// (below high_rxt).
std::uint64_t sack_pipe(const Scoreboard& sb, std::uint64_t una, std::uint64_t snd_max,
                        std::uint64_t high_rxt, std::uint32_t smss);

// The first offset of [lo, hi) (all not SACKed) that IsLost() says is not lost; IsLost is
// monotone there (fewer SACKed bytes and blocks lie above a higher offset).
std::uint64_t first_not_lost(const Scoreboard& sb, std::uint64_t lo, std::uint64_t hi,
                             std::uint32_t smss);

// RFC 6675 §4 NextSeg rules 1 and 3: the first hole at or above max(una, high_rxt) and
// below the highest SACKed byte, as [start, end); `lost` tells rule 1 (IsLost) from rule 3.
// Returns false when there is none.
bool next_hole(const Scoreboard& sb, std::uint64_t una, std::uint64_t high_rxt, std::uint32_t smss,
               Range& hole, bool& lost);

}  // namespace snic::tcp
