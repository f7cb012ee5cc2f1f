// A statistics counter written by one thread (its owner: a relaxed load and a store, no
// locked instruction) and read by any (telemetry, the control thread, the exit report).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

// The sums of several sources' counters that go by the same names in the same order (a
// port's lanes): next() before each source, add() for each of its counters, then
// for_each(name, sum). It allocates: for telemetry and reports, never a datapath.
class CounterSum {
  public:
    void next() noexcept { k_ = 0; }
    void add(std::string_view name, std::uint64_t v) {
        if (k_ == names_.size()) {
            names_.emplace_back(name);
            sums_.push_back(0);
        }
        sums_[k_++] += v;
    }
    // A setting every source has alike (a size, not a count): the first source's, not summed.
    void keep(std::string_view name, std::uint64_t v) {
        if (k_ == names_.size()) {
            names_.emplace_back(name);
            sums_.push_back(v);
        }
        ++k_;
    }
    template <typename F>
    void for_each(F&& f) const {
        for (std::size_t k = 0; k < names_.size(); ++k) f(std::string_view(names_[k]), sums_[k]);
    }

  private:
    std::vector<std::string> names_;
    std::vector<std::uint64_t> sums_;
    std::size_t k_ = 0;
};

}  // namespace snic
