// A data lcore's poll loop: poll rx, run the pollers (transports, a self-test), run the
// control thread's tasks, flush tx, back off when idle. Everything it drives is owned by this
// lcore alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace snic::daemon {

class LcoreTasks;
class Port;

// Work an lcore runs on every turn besides its ports: a transport (its engines' timers and
// output), the self-test.
class LcorePoller {
  public:
    // Returns true when it did something (which resets the idle backoff). `now` is rdtsc.
    virtual bool poll(std::uint64_t now) = 0;

  protected:
    ~LcorePoller() = default;
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
    Lcore(std::vector<Port*> ports, std::vector<LcorePoller*> pollers,
          std::uint32_t idle_backoff_us, const std::atomic<bool>& stop)
        : ports_(std::move(ports)),
          pollers_(std::move(pollers)),
          backoff_(idle_backoff_us),
          stop_(stop) {}

    // The control thread's work for this lcore, and more pollers (its ports' transports).
    void serve(LcoreTasks* control, const std::vector<LcorePoller*>& pollers) {
        control_ = control;
        pollers_.insert(pollers_.end(), pollers.begin(), pollers.end());
    }

    // One more poller (before run()).
    void add_poller(LcorePoller* p) { pollers_.push_back(p); }

    // Runs until `stop` is set.
    void run();

  private:
    std::vector<Port*> ports_;
    std::vector<LcorePoller*> pollers_;
    LcoreTasks* control_ = nullptr;
    IdleBackoff backoff_;
    const std::atomic<bool>& stop_;
};

}  // namespace snic::daemon
