#include "daemon/lcore_tasks.h"

#include <rte_errno.h>
#include <rte_ring.h>
#include <time.h>

#include <stdexcept>
#include <string>

namespace snic::daemon {

namespace {
std::atomic<unsigned> g_rings{0};
}

LcoreTasks::LcoreTasks() {
    const std::string name = "snic_tasks_" + std::to_string(g_rings.fetch_add(1));
    // One producer (the control thread), one consumer (the lcore).
    ring_ = rte_ring_create(name.c_str(), 64, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    if (ring_ == nullptr)
        throw std::runtime_error("cannot create the lcore task ring: " +
                                 std::string(rte_strerror(rte_errno)));
}

LcoreTasks::~LcoreTasks() {
    rte_ring_free(ring_);
}

void LcoreTasks::run(const std::function<void()>& fn) {
    Task task{&fn};
    if (!running_.load(std::memory_order_acquire) || rte_ring_enqueue(ring_, &task) != 0) {
        fn();
        return;
    }
    // The lcore takes it within one turn of its loop (plus its idle sleep, bounded by
    // --idle-backoff). Once its loop has ended for good, this thread is the only consumer.
    // Waiting sleeps rather than yields: when this thread shares a core with the busy-polling
    // lcore, a yield gives the lcore the rest of a scheduler time slice (milliseconds), where a
    // short sleep lets it run only until the sleep ends, and the task takes it one turn.
    while (!task.done.load(std::memory_order_acquire)) {
        if (drained_.load(std::memory_order_acquire)) {
            poll();
        } else {
            const timespec ts{0, 10'000};
            nanosleep(&ts, nullptr);
        }
    }
}

void LcoreTasks::stop() {
    running_.store(false, std::memory_order_release);
    poll();
    drained_.store(true, std::memory_order_release);
}

unsigned LcoreTasks::poll() {
    void* items[8];
    const unsigned n = rte_ring_dequeue_burst(ring_, items, 8, nullptr);
    for (unsigned i = 0; i < n; ++i) {
        auto* t = static_cast<Task*>(items[i]);
        (*t->fn)();
        t->done.store(true, std::memory_order_release);
    }
    return n;
}

}  // namespace snic::daemon
