// What the two halves of a session's ops (daemon/verbs/session.cc: device, memory, CQs,
// SRQs; daemon/verbs/session_qp.cc: QPs) share: formatting, ring attachment, the QP's state
// word and the attribute bounds. Internal to those files.
#pragma once

#include <atomic>
#include <cstdint>
#include <new>
#include <string>
#include <string_view>

#include <infiniband/verbs.h>
#include <spdlog/spdlog.h>

#include "common/result.h"
#include "daemon/verbs/client_memory.h"
#include "proto/verbs/qp_state.h"
#include "shm/ring.h"
#include "shm/wqe.h"

namespace snic::daemon::session_util {

// ibv_access_flags of a QP (qp_access_flags): the remote rights it grants. LOCAL_WRITE and
// MW_BIND mean nothing for a QP, but passing LOCAL_WRITE there is a common idiom of verbs
// programs and providers accept it, so both are accepted and kept.
constexpr std::uint32_t kQpAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE |
                                    IBV_ACCESS_MW_BIND;
constexpr std::uint32_t kPsnMask = 0xffffff;

inline std::string hex(std::uint64_t v) {
    return fmt::format("{:#x}", v);
}

// Attaches to the ring the client formatted at [begin, end) of `map`, which must have
// `capacity` entries: the ring, or EINVAL and why (`what` names the ring).
template <class Ring>
Result<Ring> attach_ring(const Mapping& map, std::size_t begin, std::size_t end,
                         std::uint32_t capacity, std::string_view what) {
    auto ring = Ring::attach(map.span(begin, end - begin));
    if (!ring)
        return make_error(EINVAL, fmt::format("{}: {}", what, shm::ring_strerror(ring.error())));
    if (ring->capacity() != capacity)
        return make_error(
            EINVAL, fmt::format("{} of {} entries, {} expected", what, ring->capacity(), capacity));
    return *ring;
}

template <class T>
T* at(const Mapping& m, std::size_t offset) {
    // The client's memory holds this trivially copyable, implicit-lifetime structure.
    return std::launder(reinterpret_cast<T*>(m.data() + offset));
}

inline void store_qp_state(shm::QpControl* c, verbs::QpState s) {
    std::atomic_ref<std::uint32_t>(c->state).store(static_cast<std::uint32_t>(s),
                                                   std::memory_order_release);
}

}  // namespace snic::daemon::session_util
