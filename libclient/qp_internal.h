// What qp.cc (a QP's creation, state and teardown) and qp_post.cc (the post path) share:
// the QP's state as libsnic last learnt it, and what the post path offers a new QP.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "libclient/internal.h"

namespace snic::client {

inline ibv_qp_state load_state(const Qp* q) {
    return std::atomic_ref<ibv_qp_state>(const_cast<Qp*>(q)->qpx.qp_base.state)
        .load(std::memory_order_acquire);
}
inline void store_state(Qp* q, std::uint32_t s) {
    std::atomic_ref<ibv_qp_state>(q->qpx.qp_base.state)
        .store(static_cast<ibv_qp_state>(s), std::memory_order_release);
}

// The ibv_wr_* operations (IBV_QP_EX_WITH_*) a QP of `qp_type` may be created with.
std::uint64_t allowed_send_ops(std::uint32_t qp_type);

// Installs the ibv_wr_* API (wr_start, wr_send, ..., wr_complete) in a new QP's ibv_qp_ex.
void install_wr_api(ibv_qp_ex* x);

}  // namespace snic::client
