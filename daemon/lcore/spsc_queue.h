// A fixed single-producer, single-consumer queue between two threads of this process: the
// lcore and the control thread (QP1's MADs, iWARP's connection events). No allocation, no
// locks; one producer and one consumer at a time. And the eventfd by which the lcore wakes
// the control thread's poll when it queued something for it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace snic::daemon {

template <typename T, std::uint32_t Capacity>
class SpscQueue {
  public:
    static constexpr std::uint32_t kCapacity = Capacity;

    bool push(const T& v) {
        const std::uint32_t tail = tail_.load(std::memory_order_relaxed);
        if (tail - head_.load(std::memory_order_acquire) == kCapacity) return false;
        slots_[tail % kCapacity] = v;
        tail_.store(tail + 1, std::memory_order_release);
        return true;
    }
    bool pop(T& out) {
        const std::uint32_t head = head_.load(std::memory_order_relaxed);
        if (head == tail_.load(std::memory_order_acquire)) return false;
        out = slots_[head % kCapacity];
        head_.store(head + 1, std::memory_order_release);
        return true;
    }
    bool empty() const {
        return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
    }

  private:
    alignas(64) std::atomic<std::uint32_t> head_{0};
    alignas(64) std::atomic<std::uint32_t> tail_{0};
    alignas(64) std::array<T, kCapacity> slots_{};
};

// An eventfd the control thread polls. signal() costs the lcore one write(2): for control
// traffic only (a handful of messages per connection), never for data. A signal per message
// can never be lost between the control thread's last look and its sleep.
class Wakeup {
  public:
    Wakeup();
    ~Wakeup();
    Wakeup(const Wakeup&) = delete;
    Wakeup& operator=(const Wakeup&) = delete;

    int fd() const { return fd_; }
    void signal();
    // Read it empty before taking what the signals announced.
    void clear();

  private:
    int fd_ = -1;
};

}  // namespace snic::daemon
