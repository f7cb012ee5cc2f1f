// Small tools of libsnic (util.h): the notification socket pair, the one-line messages,
// the environment knobs and the memfds shared with snicd.
#include "libclient/util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "libclient/internal.h"

namespace snic::client {

int make_notify_pair(Fd* ours, Fd* theirs) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return errno;
    ours->reset(sv[0]);
    theirs->reset(sv[1]);
    return 0;
}

int take_notify(int fd) {
    char byte;
    const ssize_t n = ::read(fd, &byte, 1);
    if (n == 1) return 0;
    if (n == 0) return EIO;  // snicd closed its end
    return errno;            // EINTR too: a signal ends the wait, as rdma-core's read does
}

void say(const char* fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    // One write, so that lines of several threads do not interleave.
    char out[540];
    const int n = std::snprintf(out, sizeof out, "libsnic: %s\n", line);
    if (n > 0) {
        const ssize_t r = ::write(STDERR_FILENO, out,
                                  static_cast<std::size_t>(n) < sizeof out ? n : sizeof out - 1);
        (void)r;
    }
}

namespace {

int env_int(const char* name, int dflt, int lo, int hi) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return dflt;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < lo || n > hi) return dflt;
    return static_cast<int>(n);
}

}  // namespace

const char* socket_dirs() {
    const char* v = std::getenv("SNIC_SOCKET_DIR");
    return v != nullptr && *v != '\0' ? v : "/run/snic";
}

int discovery_timeout_ms() {
    return env_int("SNIC_DISCOVERY_TIMEOUT_MS", 500, 1, 600000);
}
int control_timeout_ms() {
    return env_int("SNIC_CTRL_TIMEOUT_MS", 10000, 1, 3600000);
}

int make_shared_area(const char* name, std::size_t bytes, Fd* fd, Mapping* map) {
    Fd f(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (!f) return errno;
    if (::ftruncate(f.get(), static_cast<off_t>(bytes)) != 0) return errno;
    if (::fcntl(f.get(), F_ADD_SEALS, F_SEAL_SHRINK) != 0) return errno;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f.get(), 0);
    if (p == MAP_FAILED) return errno;
    *map = Mapping(p, bytes);
    *fd = std::move(f);
    return 0;
}

}  // namespace snic::client
