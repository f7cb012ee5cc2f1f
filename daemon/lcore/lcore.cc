#include "daemon/lcore/lcore.h"

#include <rte_cycles.h>
#include <rte_pause.h>
#include <sys/prctl.h>

#include <algorithm>
#include <ctime>

#include "daemon/lcore/lcore_tasks.h"
#include "daemon/port/port.h"

namespace snic::daemon {

void IdleBackoff::idle() {
    if (max_us_ == 0 || ++empty_polls_ < kSpinPolls) {
        rte_pause();
        return;
    }
    sleep_us_ = std::min(max_us_, sleep_us_ == 0 ? 1u : sleep_us_ * 2);
    const timespec ts{0, static_cast<long>(sleep_us_) * 1000};
    nanosleep(&ts, nullptr);
}

void Lcore::run() {
    // Short sleeps must stay short: the default 50 us timer slack would dominate them.
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    while (!stop_.load(std::memory_order_relaxed)) {
        const std::uint64_t now = rte_rdtsc();
        std::uint32_t work = 0;
        for (Port* p : ports_) work += p->poll_rx(now);
        for (LcorePoller* p : pollers_) work += p->poll(now);
        if (control_ != nullptr) work += control_->poll();
        for (Port* p : ports_) p->flush_tx();
        if (work != 0) {
            backoff_.busy();
        } else {
            backoff_.idle();
        }
    }
    for (Port* p : ports_) p->flush_tx();
    if (control_ != nullptr) control_->stop();
}

}  // namespace snic::daemon
