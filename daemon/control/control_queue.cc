#include "daemon/control/control_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace snic::daemon {

ControlQueue::ControlQueue() : event_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

bool ControlQueue::push(std::function<void()> job) {
    {
        std::lock_guard lock(mu_);
        if (closed_ || !event_) return false;
        jobs_.push_back(std::move(job));
    }
    const std::uint64_t one = 1;
    // Cannot fail: an eventfd's write fails only when its counter would pass 2^64 - 2, and
    // answer_all() reads it back to 0.
    [[maybe_unused]] const ssize_t n = ::write(event_.get(), &one, sizeof one);
    return true;
}

void ControlQueue::answer_all() {
    std::uint64_t count;
    [[maybe_unused]] const ssize_t n = ::read(event_.get(), &count, sizeof count);
    std::deque<std::function<void()>> jobs;
    {
        std::lock_guard lock(mu_);
        jobs.swap(jobs_);
    }
    for (auto& job : jobs) job();  // outside the lock: an asker may queue meanwhile
}

void ControlQueue::close() {
    std::deque<std::function<void()>> dropped;
    {
        std::lock_guard lock(mu_);
        closed_ = true;
        dropped.swap(jobs_);
    }
    // `dropped` goes here, outside the lock: each job's promise breaks and its asker wakes.
}

}  // namespace snic::daemon
