#include "daemon/lcore/spsc_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

namespace snic::daemon {

Wakeup::Wakeup() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

Wakeup::~Wakeup() {
    if (fd_ >= 0) ::close(fd_);
}

void Wakeup::signal() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(fd_, &one, sizeof one);
}

void Wakeup::clear() {
    std::uint64_t v;
    [[maybe_unused]] const ssize_t n = ::read(fd_, &v, sizeof v);
}

}  // namespace snic::daemon
