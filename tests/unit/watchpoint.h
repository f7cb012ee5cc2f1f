// The CPU's data watchpoints for unit tests (perf_event_open breakpoints): a watch on a
// few bytes raises a synchronous SIGTRAP right after each instruction that touches them,
// whose handler the test installs (TrapHandler). With it a test sees what the machine code
// does: how many stores reach a byte and in what order (test_place.cc), or acts as another
// CPU between an engine's read of a word and its write (test_qp.cc's atomics).
#pragma once

#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace snic::test {

class Watchpoint {
  public:
    enum class On : std::uint8_t { writes, reads_and_writes };

    // A watch of `len` bytes (1, 2, 4 or 8, aligned to it) at `at`; off until on().
    Watchpoint(const void* at, std::uint32_t len, On on = On::writes) {
        perf_event_attr a{};
        a.type = PERF_TYPE_BREAKPOINT;
        a.size = sizeof a;
        a.bp_type = on == On::writes ? HW_BREAKPOINT_W : HW_BREAKPOINT_RW;
        a.bp_addr = reinterpret_cast<std::uintptr_t>(at);
        a.bp_len = len;
        a.sample_period = 1;
        a.sigtrap = 1;
        a.remove_on_exec = 1;  // the kernel asks it of sigtrap events
        a.exclude_kernel = 1;
        a.exclude_hv = 1;
        a.disabled = 1;
        fd_ = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
        err_ = fd_ < 0 ? errno : 0;
    }
    ~Watchpoint() {
        if (fd_ >= 0) close(fd_);
    }
    Watchpoint(const Watchpoint&) = delete;
    Watchpoint& operator=(const Watchpoint&) = delete;

    // 0, or the errno of perf_event_open (no watchpoints on this machine or for this user).
    int error() const { return err_; }
    void on() { ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0); }
    void off() { ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0); }

  private:
    int fd_ = -1;
    int err_ = 0;
};

// Installs `fn` as the SIGTRAP handler for its lifetime.
class TrapHandler {
  public:
    explicit TrapHandler(void (*fn)(int, siginfo_t*, void*)) {
        struct sigaction sa {};
        sa.sa_sigaction = fn;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        ok_ = sigaction(SIGTRAP, &sa, &old_) == 0;
    }
    ~TrapHandler() {
        if (ok_) sigaction(SIGTRAP, &old_, nullptr);
    }
    TrapHandler(const TrapHandler&) = delete;
    TrapHandler& operator=(const TrapHandler&) = delete;

    bool ok() const { return ok_; }

  private:
    struct sigaction old_ {};
    bool ok_ = false;
};

}  // namespace snic::test
