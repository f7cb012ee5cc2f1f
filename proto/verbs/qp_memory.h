// The two interfaces through which a transport's QP engine meets the rest of the daemon,
// whatever its wire: QpMemory (the QP's view of the memory tables: keys, bounds, rights,
// windows) and QpQueues (its send and receive queues and its completion queues). The daemon
// implements them once per QP (daemon/qp_glue); RoCEv2's RC engines and iWARP's use them.
#pragma once

#include <cstdint>

#include "proto/verbs/wr.h"

namespace snic::verbs {

// Why a remote key check failed. Every failure is answered with NAK remote access error.
enum class RemoteCheck : std::uint8_t { ok, bad_key, out_of_bounds, no_access, pd_mismatch };
enum class RemoteNeed : std::uint8_t { read, write, atomic };

struct RemoteRegion {
    std::uint8_t* ptr = nullptr;  // the daemon's address of [addr, addr + len)
    RemoteCheck check = RemoteCheck::bad_key;
};

// The memory a QP may touch: the daemon implements it over its MR/MW tables, knowing the
// QP's PD. Every call is checked afresh (keys may be invalidated at any time); a pointer is
// valid for the bytes asked for until the engine returns to its caller.
class QpMemory {
  public:
    // [addr, addr + len) under lkey, for reading (gather) or writing (scatter, needs local
    // write access); nullptr when the key, bounds, access or PD do not allow it.
    virtual std::uint8_t* local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len,
                                bool write) = 0;
    // [addr, addr + len) under rkey for the peer's operation `need`.
    virtual RemoteRegion remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                                RemoteNeed need) = 0;
    // Send with Invalidate: invalidates rkey (an MW or MR of this QP's PD that allows remote
    // invalidation); false when it may not be invalidated.
    virtual bool invalidate(std::uint32_t rkey) = 0;
    // The local operations of the send queue; they return the WR's completion status.
    virtual WcStatus local_invalidate(std::uint32_t key) = 0;
    virtual WcStatus bind_mw(const MwBind& bind) = 0;

  protected:
    ~QpMemory() = default;
};

// The most WRs an engine flushes from each of its queues in one call (Modify QP to ERR, then
// each poll in ERR), unless its config says otherwise; the rest waits for its next poll. A
// client that keeps posting to a QP in ERR would otherwise hold the lcore for as long as it
// likes. The daemon gives each QP the capacity of its rings (daemon/verbs/completion.h), as
// the flush of a QP without an engine has.
inline constexpr std::uint32_t kFlushBudget = 4096;

// The QP's work queues and completion queues. The engine takes a send WR only when it has
// a slot for it and keeps it until it completes; receive WRs come from the RQ or the SRQ.
class QpQueues {
  public:
    // Whether pop_send may find a WR (it still may not: a WR in flight to the queue); the
    // engine asks before it makes room for one.
    virtual bool send_ready() = 0;
    // Takes the next send WR into `out`, writing every field the WR's operation uses (an
    // engine reuses slots without clearing them).
    virtual bool pop_send(SendWr& out) = 0;
    virtual bool pop_recv(RecvWr& out) = 0;
    virtual void complete_send(const Completion& c) = 0;
    virtual void complete_recv(const Completion& c) = 0;

  protected:
    ~QpQueues() = default;
};

}  // namespace snic::verbs
