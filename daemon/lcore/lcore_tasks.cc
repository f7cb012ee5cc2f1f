#include "daemon/lcore/lcore_tasks.h"

#include <rte_errno.h>
#include <rte_ring.h>
#include <time.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace snic::daemon {

namespace {
std::atomic<unsigned> g_rings{0};
constexpr unsigned kSlots = 64;
}  // namespace

LcoreTasks::LcoreTasks() {
    const std::string name = "snic_tasks_" + std::to_string(g_rings.fetch_add(1));
    // One producer (the control thread), one consumer (the lcore). The ring lives in this
    // process's own heap, not in a memzone: nothing outside snicd looks it up, and it needs
    // no EAL (the unit tests run it between two threads).
    const auto bytes = static_cast<std::size_t>(rte_ring_get_memsize(kSlots));
    ring_ = static_cast<rte_ring*>(
        std::aligned_alloc(RTE_CACHE_LINE_SIZE, RTE_ALIGN_CEIL(bytes, RTE_CACHE_LINE_SIZE)));
    if (ring_ == nullptr) throw std::bad_alloc();
    if (const int err = rte_ring_init(ring_, name.c_str(), kSlots, RING_F_SP_ENQ | RING_F_SC_DEQ);
        err != 0) {
        std::free(ring_);
        throw std::runtime_error("cannot create the lcore task ring: " +
                                 std::string(rte_strerror(-err)));
    }
}

LcoreTasks::~LcoreTasks() {
    std::free(ring_);
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
