// A data lcore's poll loop: poll rx, run tasks, flush tx, back off when idle.
// Everything it drives (ports, tasks) is owned by this lcore alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace snic::daemon {

class LcoreTasks;
class Port;
class RoceTransport;

// Work an lcore runs each turn besides its ports (timers, the self-test).
class LcoreTask {
public:
    // Returns true when it did something (which resets the idle backoff).
    virtual bool poll(std::uint64_t now) = 0;

protected:
    ~LcoreTask() = default;
};

// Idle policy: spin a while on empty polls, then sleep with exponential growth up
// to `max_us` (0: never sleep), so that a small machine is not starved.
class IdleBackoff {
public:
    explicit IdleBackoff(std::uint32_t max_us) : max_us_(max_us) {}
    void busy() { empty_polls_ = 0, sleep_us_ = 0; }
    void idle();
    std::uint32_t current_sleep_us() const { return sleep_us_; }

    static constexpr std::uint32_t kSpinPolls = 256;

private:
    std::uint32_t max_us_;
    std::uint32_t empty_polls_ = 0;
    std::uint32_t sleep_us_ = 0;
};

class Lcore {
public:
    Lcore(std::vector<Port*> ports, std::vector<LcoreTask*> tasks, std::uint32_t idle_backoff_us,
          const std::atomic<bool>& stop)
        : ports_(std::move(ports)), tasks_(std::move(tasks)), backoff_(idle_backoff_us), stop_(stop) {}

    // The control thread's work for this lcore, and the transports of its ports.
    void set_transports(LcoreTasks* control, std::vector<RoceTransport*> transports) {
        control_ = control;
        transports_ = std::move(transports);
    }

    // Runs until `stop` is set.
    void run();

private:
    std::vector<Port*> ports_;
    std::vector<LcoreTask*> tasks_;
    LcoreTasks* control_ = nullptr;
    std::vector<RoceTransport*> transports_;
    IdleBackoff backoff_;
    const std::atomic<bool>& stop_;
};

}  // namespace snic::daemon
