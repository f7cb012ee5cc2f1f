// A statistics counter written by one thread (its owner: a relaxed load and a store, no
// locked instruction) and read by any (telemetry, the control thread, the exit report).
#pragma once

#include <atomic>
#include <cstdint>

namespace snic {

class Counter {
  public:
    void add(std::uint64_t n = 1) noexcept {
        v_.store(v_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
    }
    // A gauge's new value (same single writer).
    void set(std::uint64_t v) noexcept { v_.store(v, std::memory_order_relaxed); }
    std::uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }

  private:
    std::atomic<std::uint64_t> v_{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

}  // namespace snic
