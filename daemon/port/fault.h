// Fault injection on a port: drops, duplicates, reorders and corrupts a chosen
// fraction of frames in each direction, from a seeded generator so that a run
// repeats exactly. Decisions are pure (no DPDK) and unit tested; the port's
// datapath applies them to mbufs.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

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
    // Received frames wait this long before snicd reads them (a longer path; 0: none).
    std::uint32_t rx_delay_us = 0;
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

// Items held a fixed time, in arrival order: a path `delay` ticks longer. Bounded: push()
// refuses past `capacity` (rounded up to a power of two) items held.
template <class T>
class DelayLine {
  public:
    DelayLine(std::size_t capacity, std::uint64_t delay)
        : cap_(std::bit_ceil(capacity)), delay_(delay), q_(std::make_unique<Slot[]>(cap_)) {}
    std::uint64_t delay() const { return delay_; }
    std::size_t size() const { return tail_ - head_; }
    bool push(T item, std::uint64_t now) {
        if (tail_ - head_ == cap_) return false;
        q_[tail_++ & (cap_ - 1)] = Slot{item, now + delay_};
        return true;
    }
    // The oldest item if its time has come.
    bool pop_due(T& out, std::uint64_t now) {
        if (head_ == tail_ || q_[head_ & (cap_ - 1)].due > now) return false;
        out = q_[head_++ & (cap_ - 1)].item;
        return true;
    }

  private:
    struct Slot {
        T item{};
        std::uint64_t due = 0;
    };
    const std::size_t cap_;
    const std::uint64_t delay_;
    std::unique_ptr<Slot[]> q_;
    std::size_t head_ = 0, tail_ = 0;
};

}  // namespace snic::daemon
