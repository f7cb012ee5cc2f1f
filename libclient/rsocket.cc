// rsockets over snic (docs/LIBSNIC.md): librdmacm's own rsocket code (rstream, rcopy,
// librspreload.so) runs on libsnic's rdma_cm and verbs, since under snic-run its rdma_* and
// ibv_* calls are ours. It also calls two helpers of librdmacm's own that read librdmacm's
// private id, which libsnic's ids mirror (RdmacmIdView in cm_internal.h) as rdma-core 17 to
// 65 lay it out.
//
// This file is the door: rsocket(), interposed, lets a socket be made only where that code
// works over snic: a stream socket, in a librdmacm of those releases. Anything else fails at
// once with EOPNOTSUPP and a line on stderr, rather than later on reads of the wrong fields.
#include <dlfcn.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <string_view>

#include "libclient/util.h"

namespace snic::client {
namespace {

constexpr int kFirstRelease = 17, kLastRelease = 65;

using RsocketFn = int (*)(int, int, int);

// librdmacm's rsocket and the rdma-core release of the file it is in (0: not known).
struct Next {
    RsocketFn fn = nullptr;
    int release = 0;
    std::string file;
};

// rdma-core names the library librdmacm.so.1.<ABI>.<release>: "./librdmacm.so.1.3.44.0" is
// release 44. 0 for any other name.
int rdmacm_release(std::string_view path) {
    constexpr std::string_view kStem = "librdmacm.so.1.";
    const std::size_t at = path.rfind(kStem);
    if (at == std::string_view::npos) return 0;
    std::string_view rest = path.substr(at + kStem.size());
    const std::size_t dot = rest.find('.');
    if (dot == std::string_view::npos) return 0;
    rest.remove_prefix(dot + 1);  // past the ABI number
    int release = 0;
    std::size_t n = 0;
    for (; n < rest.size() && n < 4 && rest[n] >= '0' && rest[n] <= '9'; ++n)
        release = release * 10 + (rest[n] - '0');
    return n != 0 && (n == rest.size() || rest[n] == '.') ? release : 0;
}

const Next& next_rsocket() {
    static const Next next = [] {
        Next n;
        n.fn = reinterpret_cast<RsocketFn>(dlsym(RTLD_NEXT, "rsocket"));
        Dl_info info{};
        if (n.fn == nullptr || dladdr(reinterpret_cast<void*>(n.fn), &info) == 0 ||
            info.dli_fname == nullptr)
            return n;
        char real[PATH_MAX];
        n.file = ::realpath(info.dli_fname, real) != nullptr ? real : info.dli_fname;
        n.release = rdmacm_release(n.file);
        return n;
    }();
    return next;
}

// The refusal's line, once per process (librspreload asks for every socket it intercepts).
int refuse(int err, const char* why) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) say("rsocket: %s", why);
    errno = err;
    return -1;
}

}  // namespace
}  // namespace snic::client

using namespace snic::client;

SNIC_EXPORT int rsocket(int domain, int type, int protocol) {
    const Next& next = next_rsocket();
    if (next.fn == nullptr)
        return refuse(ENOSYS,
                      "no librdmacm in the process: rsockets are librdmacm's, run over libsnic");
    if (next.release < kFirstRelease || next.release > kLastRelease) {
        const std::string why = next.file + " is not the librdmacm of an rdma-core release from " +
                                std::to_string(kFirstRelease) + " to " +
                                std::to_string(kLastRelease) + ", whose rsockets run over snic";
        return refuse(EOPNOTSUPP, why.c_str());
    }
    if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_DGRAM)
        return refuse(EOPNOTSUPP,
                      "datagram rsockets do not run over snic (they size their queues from the "
                      "kernel's RDMA devices); stream rsockets do");
    return next.fn(domain, type, protocol);
}
