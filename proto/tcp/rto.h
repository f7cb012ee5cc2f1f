// The retransmission timer's value per RFC 6298: SRTT and RTTVAR from RTT samples (§2),
// RTO = SRTT + max(G, 4 * RTTVAR) clamped to [min, max] (§2.4, §2.5), doubled on each
// expiry (§5.5) until a new sample arrives. Which samples may be taken is the caller's
// business (Karn's rule, §3: never from a retransmitted segment). Times in nanoseconds.
#pragma once

#include <algorithm>
#include <cstdint>

namespace snic::tcp {

using TcpTime = std::uint64_t;  // nanoseconds on the caller's clock
inline constexpr TcpTime kNever = ~TcpTime{0};
inline constexpr TcpTime kMs = 1'000'000;
inline constexpr TcpTime kSec = 1'000'000'000;

class RtoEstimator {
  public:
    // `granularity`: G, the clock granularity of the samples.
    RtoEstimator(TcpTime initial, TcpTime min, TcpTime max, TcpTime granularity = 1000)
        : base_(initial), min_(min), max_(max), g_(granularity) {}

    // One RTT measurement (§2.2, §2.3); clears the backoff.
    void sample(TcpTime r) {
        if (!have_) {
            srtt_ = r;
            rttvar_ = r / 2;
            have_ = true;
        } else {
            const TcpTime err = srtt_ > r ? srtt_ - r : r - srtt_;
            rttvar_ = rttvar_ - rttvar_ / 4 + err / 4;  // (1 - beta) * RTTVAR + beta * |err|
            srtt_ = srtt_ - srtt_ / 8 + r / 8;          // (1 - alpha) * SRTT + alpha * R
        }
        base_ = std::clamp(srtt_ + std::max(g_, 4 * rttvar_), min_, max_);
        backoff_ = 0;
    }

    // The timer expired (§5.5): the next RTO is twice this one, up to max.
    void back_off() {
        if (rto() < max_) ++backoff_;
    }

    TcpTime rto() const {
        TcpTime r = base_;
        for (std::uint32_t i = 0; i < backoff_ && r < max_; ++i) r *= 2;
        return std::min(r, max_);
    }
    bool has_sample() const { return have_; }
    TcpTime srtt() const { return srtt_; }
    TcpTime rttvar() const { return rttvar_; }
    std::uint32_t backoff() const { return backoff_; }

  private:
    TcpTime base_, min_, max_, g_;
    TcpTime srtt_ = 0, rttvar_ = 0;
    bool have_ = false;
    std::uint32_t backoff_ = 0;
};

}  // namespace snic::tcp
