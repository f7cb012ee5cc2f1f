// Work the control thread hands to a data lcore and waits for: attaching a QP to its
// port's transport, moving it to error, flushing it, and the grace period before client
// memory is unmapped. A task runs between two turns of the lcore's loop, when no engine
// holds a pointer into client memory, so finishing one is also a quiescent point.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>

struct rte_ring;

namespace snic::daemon {

class LcoreTasks {
  public:
    LcoreTasks();
    ~LcoreTasks();
    LcoreTasks(const LcoreTasks&) = delete;
    LcoreTasks& operator=(const LcoreTasks&) = delete;

    // Control thread: runs `fn` on the lcore and returns once it ran. Runs it here
    // instead when the lcore is not (or no longer) running its loop.
    void run(const std::function<void()>& fn);

    // The lcore: runs the tasks waiting (called once per turn of its loop); returns
    // how many ran.
    unsigned poll();

    // The lcore, as its loop ends: runs what is queued; later tasks run on the caller.
    void stop();

  private:
    struct Task {
        const std::function<void()>* fn;
        std::atomic<bool> done{false};
    };
    rte_ring* ring_ = nullptr;
    std::atomic<bool> running_{true};   // the loop runs, or will: tasks wait for it
    std::atomic<bool> drained_{false};  // the loop ended and took its last tasks
};

}  // namespace snic::daemon
