// Small tools of libsnic: owned fds and mappings, a spinlock for ring
// producers and consumers, the C-boundary guard and the one-line messages.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string_view>
#include <utility>

// Everything libsnic exports: unversioned, so that under LD_PRELOAD each one
// interposes libibverbs' versioned symbol of the same name.
#define SNIC_EXPORT extern "C" __attribute__((visibility("default")))

namespace snic::client {

// An owned file descriptor.
class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) reset(std::exchange(o.fd_, -1));
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }

    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    int release() { return std::exchange(fd_, -1); }
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

  private:
    int fd_ = -1;
};

// A notification socket pair (shm/control_abi.h): `ours` is read, one byte per event;
// `theirs` goes to snicd. Returns 0 or an errno.
int make_notify_pair(Fd* ours, Fd* theirs);

// Waits for and takes one event from our end: 0, or an errno (EAGAIN when the
// caller made the fd non-blocking and nothing is there; EINTR when a signal ended
// the wait; EIO when snicd is gone).
int take_notify(int fd);

// An owned shared mapping.
class Mapping {
  public:
    Mapping() = default;
    Mapping(void* addr, std::size_t len) : addr_(addr), len_(len) {}
    Mapping(Mapping&& o) noexcept
        : addr_(std::exchange(o.addr_, nullptr)), len_(std::exchange(o.len_, 0)) {}
    Mapping& operator=(Mapping&& o) noexcept {
        if (this != &o) {
            reset();
            addr_ = std::exchange(o.addr_, nullptr);
            len_ = std::exchange(o.len_, 0);
        }
        return *this;
    }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;
    ~Mapping() { reset(); }

    std::byte* data() const { return static_cast<std::byte*>(addr_); }
    std::size_t size() const { return len_; }
    void reset() {
        if (addr_ != nullptr) ::munmap(addr_, len_);
        addr_ = nullptr;
        len_ = 0;
    }

  private:
    void* addr_ = nullptr;
    std::size_t len_ = 0;
};

// The lock of one ring end: verbs lets several threads post to (or poll) the
// same queue, the ring has one producer (consumer) at a time. Held for a few
// hundred nanoseconds at most, so it spins instead of sleeping.
class SpinLock {
  public:
    void lock() noexcept {
        while (locked_.exchange(true, std::memory_order_acquire)) {
            while (locked_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
        }
    }
    void unlock() noexcept { locked_.store(false, std::memory_order_release); }

  private:
    std::atomic<bool> locked_{false};
};

// Runs f at the C boundary: no exception crosses it. A failed allocation sets
// errno ENOMEM, anything else EIO, and `fail` is returned.
template <class R, class F>
R guarded(R fail, F&& f) noexcept {
    try {
        return f();
    } catch (const std::bad_alloc&) {
        errno = ENOMEM;
    } catch (...) {
        errno = EIO;
    }
    return fail;
}

// Calls f(item) for each non-empty item of a `sep`-separated list (SNIC_SOCKET_DIR's ':',
// SNIC_DEVICES' ','), in order, until f returns true; returns whether one did.
template <class F>
bool any_item(std::string_view list, char sep, F&& f) {
    while (!list.empty()) {
        const std::size_t end = std::min(list.find(sep), list.size());
        if (end != 0 && f(list.substr(0, end))) return true;
        list.remove_prefix(std::min(end + 1, list.size()));
    }
    return false;
}

// A verb that returns an errno value (0 or the error): errno is set to the error too, since
// callers read either.
template <class F>
int errno_verb(F&& f) noexcept {
    const int err = guarded(EIO, std::forward<F>(f));
    if (err != 0) errno = err;
    return err;
}

// Sets errno and returns `err` (for the verbs that return an errno value and fail outright).
inline int fail_status(int err) {
    errno = err;
    return err;
}

// Sets errno and returns the null pointer (for the verbs that return objects).
template <class T = void>
T* fail_null(int err) {
    errno = err;
    return nullptr;
}

// One line on stderr, prefixed "libsnic: ".
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Environment knobs (docs/LIBSNIC.md).
const char* socket_dirs();   // SNIC_SOCKET_DIR, default /run/snic (":"-separated list)
int discovery_timeout_ms();  // SNIC_DISCOVERY_TIMEOUT_MS, default 500
int control_timeout_ms();    // SNIC_CTRL_TIMEOUT_MS, default 10000

}  // namespace snic::client
