#include "daemon/verbs/device.h"

#include <signal.h>

#include <cerrno>

namespace snic::daemon {

std::size_t ProcessLanes::lane_of(std::int32_t pid) {
    if (const auto it = by_pid_.find(pid); it != by_pid_.end()) return it->second.lane;
    forget_gone();
    std::size_t best = 0;
    for (std::size_t i = 1; i < processes_.size(); ++i)
        if (processes_[i] < processes_[best]) best = i;
    by_pid_[pid] = Entry{best, 0};
    return best;
}

std::size_t ProcessLanes::join(std::int32_t pid) {
    const std::size_t lane = lane_of(pid);
    if (by_pid_[pid].sessions++ == 0) ++processes_[lane];
    return lane;
}

void ProcessLanes::leave(std::int32_t pid) {
    const auto it = by_pid_.find(pid);
    if (it == by_pid_.end() || it->second.sessions == 0) return;
    if (--it->second.sessions == 0) --processes_[it->second.lane];
}

void ProcessLanes::forget_gone() {
    std::erase_if(by_pid_, [](const auto& e) {
        return e.second.sessions == 0 && ::kill(e.first, 0) != 0 && errno == ESRCH;
    });
}

}  // namespace snic::daemon
