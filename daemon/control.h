// The control server: the daemon's Unix SOCK_SEQPACKET socket. claim() takes the
// socket path (a lock file makes it exclusive; a stale socket from a dead daemon
// is replaced), listen() binds it once the daemon is ready, and serve() answers
// requests on a control thread until stopped.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/result.h"
#include "shm/control.h"

namespace snic::daemon {

class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept;
    ~Fd();
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }
    explicit operator bool() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

class ControlServer {
public:
    using StatusFn = std::function<void(shm::StatusReply&)>;

    static Result<std::unique_ptr<ControlServer>> claim(const std::string& path, mode_t mode);
    ~ControlServer();

    Status listen();
    // Answers requests until `stop` is set (checked at least every 100 ms).
    void serve(const std::atomic<bool>& stop, const StatusFn& status);

    const std::string& path() const { return path_; }

private:
    ControlServer(std::string path, mode_t mode, Fd lock) : path_(std::move(path)), mode_(mode), lock_(std::move(lock)) {}
    void handle(int fd, const StatusFn& status);

    std::string path_;
    mode_t mode_;
    Fd lock_;
    Fd listen_;
    std::vector<Fd> clients_;
};

}  // namespace snic::daemon
