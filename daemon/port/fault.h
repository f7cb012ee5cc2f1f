// Fault injection on a port: drops, duplicates, reorders and corrupts a chosen
// fraction of frames in each direction, from a seeded generator so that a run
// repeats exactly. Decisions are pure (no DPDK) and unit tested; the port's
// datapath applies them to mbufs.
#pragma once

#include <cstdint>

#include "common/rng.h"

namespace snic::daemon {

// Fractions in [0, 1] of the frames of one direction.
struct FaultRates {
    double drop = 0;
    double duplicate = 0;
    double reorder = 0;
    double corrupt = 0;

    bool any() const { return drop > 0 || duplicate > 0 || reorder > 0 || corrupt > 0; }
    friend bool operator==(const FaultRates&, const FaultRates&) = default;
};

struct FaultSpec {
    FaultRates rx;
    FaultRates tx;
    std::uint64_t seed = 1;
    friend bool operator==(const FaultSpec&, const FaultSpec&) = default;
};

// What to do with one frame. Several may apply: a duplicated frame may also be corrupted.
struct FaultAction {
    bool drop = false;
    bool duplicate = false;
    bool reorder = false;  // hold it back behind the frames that follow
    bool corrupt = false;
    std::uint32_t corrupt_at = 0;  // a pseudo-random number to choose the flipped bit
};

class FaultInjector {
  public:
    FaultInjector(const FaultRates& rates, std::uint64_t seed) : rates_(rates), rng_(seed) {}
    bool active() const { return rates_.any(); }
    FaultAction decide();

  private:
    FaultRates rates_;
    Xoshiro256 rng_;  // common/rng.h: a seed replays the run
};

}  // namespace snic::daemon
