// libndsnic: overlapped requests. An ND_OVERLAPPED is the caller's; the library stores its
// result and wakes whoever waits for it (GetOverlappedResult with bWait, or the caller's
// eventfd). One condition variable serves every request of the process: completions of
// connection calls are rare, and a waiter checks its own request's status when woken.
#include <sys/eventfd.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>

#include "nd/provider.h"

namespace snic::nd {

namespace {

std::mutex gate_mu;
std::condition_variable gate;

HRESULT load(const OVERLAPPED* ov) {
    return __atomic_load_n(&ov->Status, __ATOMIC_ACQUIRE);
}

}  // namespace

void start(OVERLAPPED* ov) {
    __atomic_store_n(&ov->Status, ND_PENDING, __ATOMIC_RELEASE);
    ov->BytesTransferred = 0;
}

void finish(OVERLAPPED* ov, HRESULT status, SIZE_T bytes) {
    ov->BytesTransferred = bytes;
    const int fd = ov->EventFd;
    {
        std::lock_guard lock(gate_mu);
        // After this store the caller may free the structure: it is not touched again.
        __atomic_store_n(&ov->Status, status, __ATOMIC_RELEASE);
    }
    gate.notify_all();
    if (fd > 0) {
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(fd, &one, sizeof one);
    }
}

HRESULT overlapped_result(OVERLAPPED* ov, SIZE_T* bytes, BOOL wait) {
    if (ov == nullptr) return ND_INVALID_PARAMETER;
    HRESULT s = load(ov);
    if (s == ND_PENDING && wait) {
        std::unique_lock lock(gate_mu);
        gate.wait(lock, [&] { return load(ov) != ND_PENDING; });
        s = load(ov);
    }
    if (bytes != nullptr) *bytes = s == ND_PENDING ? 0 : ov->BytesTransferred;
    return s;
}

}  // namespace snic::nd
