// What a QP may touch through a key (IBA 10.6): memory regions (lkey == rkey) and memory
// windows of type 1 and 2, bound, renamed and invalidated by the QP's own work requests or
// by a peer's Send with Invalidate. Every access resolves its key afresh in the daemon-wide
// key table and checks PD, access, bounds and, for a window, its binding: nothing is cached,
// so a key withdrawn, invalidated or rebound fails at once.
//
// Runs on the lcore of the QP's port, which owns the bindings of the windows of the QP's
// session (all its QPs, and so every QP that may use its windows, share that lcore). Pure
// of DPDK, so that the rules run in unit tests.
#pragma once

#include <cstdint>

#include "proto/verbs/qp_memory.h"

namespace snic::daemon {

class NameTable;
struct Pd;
struct Mr;
struct Mw;

// The QP a key is used through: its protection domain and its number.
struct KeyUser {
    const NameTable& keys;
    const Pd* pd;
    std::uint32_t qpn;
};

// [addr, addr + len) of the local region `lkey` (an MR of the QP's PD), for reading or,
// with `write`, for writing (needs IBV_ACCESS_LOCAL_WRITE); nullptr when not allowed.
std::uint8_t* local_access(const KeyUser& u, std::uint32_t lkey, std::uint64_t addr,
                           std::uint32_t len, bool write);

// [addr, addr + len) under `rkey` (an MR, or a bound window that serves this QP) for the
// peer's operation `need`.
verbs::RemoteRegion remote_access(const KeyUser& u, std::uint32_t rkey, std::uint64_t addr,
                                  std::uint32_t len, verbs::RemoteNeed need);

// Bind MW (a type 1 window through ibv_bind_mw, a type 2 window through a bind WR): checks
// the window, the region and the range, then points the window there under bind.new_rkey.
// A type 1 bind of length 0 unbinds. mw_bind_err when a rule is broken; nothing changes then.
verbs::WcStatus bind_window(const KeyUser& u, const verbs::MwBind& bind);

// Local Invalidate of `key`: a bound type 2 window of the QP's PD becomes free (its key
// stops working). Regions registered through verbs cannot be invalidated: loc_qp_op_err.
verbs::WcStatus invalidate_local(const KeyUser& u, std::uint32_t key);

// Send with Invalidate from the peer: `rkey` must be a bound type 2 window serving this QP;
// it becomes free. False when it may not be invalidated (the responder then NAKs).
bool invalidate_remote(const KeyUser& u, std::uint32_t rkey);

// Releases the window's binding (its region counts one window less). On the lcore, or
// where no lcore can touch the window any more.
void unbind_window(const Mw& mw);

}  // namespace snic::daemon
