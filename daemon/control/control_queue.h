// Questions other threads put to the control thread, which alone may read the client
// sessions (their tables change only there): DPDK telemetry's threads ask it for the QP
// reports of daemon/verbs/qp_report.h. The asker waits for the answer, at most a bound; the control
// thread's poll wakes on the queue's eventfd and answers between two requests of its clients.
// An answer that comes too late is dropped. The data lcores take no part in it.
#pragma once

#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>

#include "daemon/verbs/client_memory.h"

namespace snic::daemon {

class ControlQueue {
  public:
    ControlQueue();
    ControlQueue(const ControlQueue&) = delete;
    ControlQueue& operator=(const ControlQueue&) = delete;

    // Any thread but the control thread: runs `fn` on the control thread and returns its
    // result; nullopt when no answer came within `timeout`, the control thread stopped
    // serving, or `fn` threw.
    template <class T>
    std::optional<T> ask(std::function<T()> fn, std::chrono::milliseconds timeout);

    // --- the control thread ---
    // Readable while questions wait (for its poll).
    int fd() const { return event_.get(); }
    // Answers every question waiting.
    void answer_all();
    // Takes no more questions; those waiting are dropped, and their askers get nullopt at once.
    void close();

  private:
    // Queues `job` and wakes the control thread; false once closed.
    bool push(std::function<void()> job);

    Fd event_;  // an eventfd: non-zero while questions wait
    std::mutex mu_;
    std::deque<std::function<void()>> jobs_;  // under mu_
    bool closed_ = false;                     // under mu_
};

template <class T>
std::optional<T> ControlQueue::ask(std::function<T()> fn, std::chrono::milliseconds timeout) {
    // The queued job alone owns the task (std::function wants it copyable, hence shared);
    // the asker keeps only the future, whose state outlives both, so that an asker that gave
    // up leaves nothing dangling. A job dropped unanswered breaks its promise, which readies
    // the future at once.
    auto task = std::make_shared<std::packaged_task<T()>>(std::move(fn));
    std::future<T> answer = task->get_future();
    if (!push([task = std::move(task)] { (*task)(); })) return std::nullopt;
    if (answer.wait_for(timeout) != std::future_status::ready) return std::nullopt;
    try {
        return answer.get();
    } catch (const std::exception&) {  // dropped by close(), or fn threw
        return std::nullopt;
    }
}

}  // namespace snic::daemon
