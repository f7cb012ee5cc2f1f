#include "daemon/verbs/fault_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <mutex>

namespace snic::daemon::fault_guard {
namespace {

// One guarded range. `start` 0 is a free slot; the handler trusts `bytes` and `page` of a
// slot whose start it read (acquire), as add() writes them before publishing start.
struct Slot {
    std::atomic<std::uintptr_t> start{0};
    std::atomic<std::size_t> bytes{0};
    std::atomic<std::size_t> page{0};
    std::atomic<std::uint32_t> faults{0};
};

// As many as the daemon's client mappings can be (daemon/verbs/limits.h bounds them far lower in
// practice: only hugetlb segments are guarded).
constexpr std::uint32_t kSlots = 65536;
Slot g_slots[kSlots];
std::atomic<std::uint32_t> g_high{0};  // slots [0, g_high) may be in use
std::atomic<std::uint64_t> g_recovered{0};
std::mutex g_mu;  // add() and remove()
struct sigaction g_previous;
std::atomic<bool> g_installed{false};

// Maps zero-filled private memory over the page at `at` of slot `s`; true when it did.
bool replace(Slot& s, std::uintptr_t at) {
    const std::size_t page = s.page.load(std::memory_order_relaxed);
    void* base = reinterpret_cast<void*>(at & ~(page - 1));
    if (::mmap(base, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
               0) == MAP_FAILED)
        return false;
    s.faults.fetch_add(1, std::memory_order_relaxed);
    g_recovered.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
    const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
    const std::uint32_t high = g_high.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < high; ++i) {
        Slot& s = g_slots[i];
        const std::uintptr_t start = s.start.load(std::memory_order_acquire);
        if (start != 0 && at - start < s.bytes.load(std::memory_order_relaxed)) {
            if (replace(s, at)) return;  // the access is retried, into the new page
            break;
        }
    }
    // Not a client's: the action that was there before applies to the retried access.
    if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
        g_previous.sa_sigaction(sig, info, context);
        return;
    }
    ::sigaction(SIGBUS, &g_previous, nullptr);
}

}  // namespace

bool install() {
    std::lock_guard lock(g_mu);
    if (g_installed.load(std::memory_order_relaxed)) return true;
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGBUS, &sa, &g_previous) != 0) return false;
    g_installed.store(true, std::memory_order_relaxed);
    return true;
}

std::uint32_t add(void* addr, std::size_t bytes, std::size_t page) {
    std::lock_guard lock(g_mu);
    const std::uint32_t high = g_high.load(std::memory_order_relaxed);
    std::uint32_t i = 0;
    while (i < high && g_slots[i].start.load(std::memory_order_relaxed) != 0) ++i;
    if (i == kSlots) return kNoSlot;
    Slot& s = g_slots[i];
    s.bytes.store(bytes, std::memory_order_relaxed);
    s.page.store(page, std::memory_order_relaxed);
    s.faults.store(0, std::memory_order_relaxed);
    s.start.store(reinterpret_cast<std::uintptr_t>(addr), std::memory_order_release);
    if (i == high) g_high.store(high + 1, std::memory_order_release);
    return i;
}

std::uint32_t remove(std::uint32_t slot) {
    if (slot >= kSlots) return 0;
    std::lock_guard lock(g_mu);
    Slot& s = g_slots[slot];
    s.start.store(0, std::memory_order_release);
    return s.faults.load(std::memory_order_relaxed);
}

std::uint64_t recovered() {
    return g_recovered.load(std::memory_order_relaxed);
}

}  // namespace snic::daemon::fault_guard
