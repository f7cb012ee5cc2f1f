// Access through MR and MW keys, window binds and invalidations (IBA 10.6.7, 11.4.1.2).
#include "daemon/verbs/memory_keys.h"

#include <infiniband/verbs.h>

#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"

namespace snic::daemon {

namespace {

constexpr std::uint32_t kRemoteAccess =
    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

// Whether [addr, addr + len) lies within [base, base + length).
constexpr bool within(std::uint64_t base, std::uint64_t length, std::uint64_t addr,
                      std::uint64_t len) {
    return addr >= base && len <= length && addr - base <= length - len;
}

// The daemon's pointer to [addr, addr + len) of `mr` (addresses in its iova space), or
// nullptr when out of bounds.
std::uint8_t* in_region(const Mr& mr, std::uint64_t addr, std::uint64_t len) {
    if (!within(mr.iova, mr.length, addr, len)) return nullptr;
    return reinterpret_cast<std::uint8_t*>(mr.addr) + (addr - mr.iova);
}

constexpr std::uint32_t access_for(verbs::RemoteNeed need) {
    switch (need) {
        case verbs::RemoteNeed::read:
            return IBV_ACCESS_REMOTE_READ;
        case verbs::RemoteNeed::write:
            return IBV_ACCESS_REMOTE_WRITE;
        case verbs::RemoteNeed::atomic:
            break;
    }
    return IBV_ACCESS_REMOTE_ATOMIC;
}

const Mr* find_mr(const KeyUser& u, std::uint32_t key) {
    return static_cast<const Mr*>(u.keys.lookup(key, NameTable::kMr));
}

// The window whose slot `key` names, if it belongs to the QP's PD. Its binding is read only
// after the PD matched: a window of another PD may be another lcore's.
const Mw* find_own_mw(const KeyUser& u, std::uint32_t key) {
    const auto* mw = static_cast<const Mw*>(u.keys.lookup_slot(key, NameTable::kMw));
    return mw != nullptr && mw->pd.get() == u.pd ? mw : nullptr;
}

// Whether the window (of the QP's PD) is bound under exactly `key` and serves this QP: a
// type 2 window serves only the QP it was bound through.
bool serves(const Mw& mw, const KeyUser& u, std::uint32_t key) {
    if (!mw.bound.valid || mw.bound.rkey != key) return false;
    return mw.type != IBV_MW_TYPE_2 || mw.bound.qpn == u.qpn;
}

}  // namespace

std::uint8_t* local_access(const KeyUser& u, std::uint32_t lkey, std::uint64_t addr,
                           std::uint32_t len, bool write) {
    const Mr* mr = find_mr(u, lkey);
    if (mr == nullptr || mr->pd.get() != u.pd) return nullptr;
    if (write && (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0) return nullptr;
    return in_region(*mr, addr, len);
}

verbs::RemoteRegion remote_access(const KeyUser& u, std::uint32_t rkey, std::uint64_t addr,
                                  std::uint32_t len, verbs::RemoteNeed need) {
    const std::uint32_t want = access_for(need);
    if (const Mr* mr = find_mr(u, rkey)) {
        if (mr->pd.get() != u.pd) return {nullptr, verbs::RemoteCheck::pd_mismatch};
        if ((mr->access & want) == 0) return {nullptr, verbs::RemoteCheck::no_access};
        std::uint8_t* p = in_region(*mr, addr, len);
        if (p == nullptr) return {nullptr, verbs::RemoteCheck::out_of_bounds};
        return {p, verbs::RemoteCheck::ok};
    }
    const auto* mw = static_cast<const Mw*>(u.keys.lookup_slot(rkey, NameTable::kMw));
    if (mw == nullptr) return {nullptr, verbs::RemoteCheck::bad_key};
    if (mw->pd.get() != u.pd) return {nullptr, verbs::RemoteCheck::pd_mismatch};
    if (!serves(*mw, u, rkey)) return {nullptr, verbs::RemoteCheck::bad_key};
    const MwBinding& b = mw->bound;
    if ((b.access & want) == 0) return {nullptr, verbs::RemoteCheck::no_access};
    if (!within(b.va, b.length, addr, len)) return {nullptr, verbs::RemoteCheck::out_of_bounds};
    std::uint8_t* p = in_region(*b.mr, b.mr_addr + (addr - b.va), len);
    if (p == nullptr) return {nullptr, verbs::RemoteCheck::out_of_bounds};
    return {p, verbs::RemoteCheck::ok};
}

verbs::WcStatus bind_window(const KeyUser& u, const verbs::MwBind& bind) {
    constexpr auto fail = verbs::WcStatus::mw_bind_err;
    const Mw* mw = find_own_mw(u, bind.new_rkey);
    if (mw == nullptr || mw->handle != bind.mw_handle) return fail;
    const bool zero_based = (bind.access & IBV_ACCESS_ZERO_BASED) != 0;
    // Local write is no window right (local access goes through the region's lkey), but
    // applications pass their region's flags, local write among them, and rxe and mlx5 take
    // it: accepted and ignored. Any other flag is refused.
    if ((bind.access & ~(kRemoteAccess | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE)) != 0)
        return fail;
    // A type 2 window is bound once, then invalidated before it is bound again; type 1
    // windows are not zero-based (IBA 10.6.7.2).
    if (mw->type == IBV_MW_TYPE_2 && mw->bound.valid) return fail;
    if (mw->type == IBV_MW_TYPE_1 && zero_based) return fail;

    const Mr* mr = nullptr;
    if (bind.length != 0) {
        mr = find_mr(u, bind.mr_lkey);
        if (mr == nullptr || mr->deregistering || mr->pd.get() != u.pd) return fail;
        if ((mr->access & IBV_ACCESS_MW_BIND) == 0) return fail;
        if ((bind.access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
            (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0)
            return fail;
        if (!within(mr->iova, mr->length, bind.addr, bind.length)) return fail;
    } else if (mw->type == IBV_MW_TYPE_2) {
        return fail;  // a type 2 window is bound to a range; only type 1 unbinds this way
    }

    unbind_window(*mw);
    MwBinding& b = mw->bound;
    b.rkey = bind.new_rkey;
    b.qpn = u.qpn;
    if (mr == nullptr) return verbs::WcStatus::success;  // type 1, length 0: unbound
    ++mr->windows;
    b.mr = mr;
    b.mr_addr = bind.addr;
    b.va = zero_based ? 0 : bind.addr;
    b.length = bind.length;
    b.access = bind.access & kRemoteAccess;
    b.valid = true;
    return verbs::WcStatus::success;
}

verbs::WcStatus invalidate_local(const KeyUser& u, std::uint32_t key) {
    const Mw* mw = find_own_mw(u, key);
    if (mw == nullptr || mw->type != IBV_MW_TYPE_2 || !mw->bound.valid || mw->bound.rkey != key)
        return verbs::WcStatus::loc_qp_op_err;
    unbind_window(*mw);
    return verbs::WcStatus::success;
}

bool invalidate_remote(const KeyUser& u, std::uint32_t rkey) {
    const Mw* mw = find_own_mw(u, rkey);
    if (mw == nullptr || mw->type != IBV_MW_TYPE_2 || !serves(*mw, u, rkey)) return false;
    unbind_window(*mw);
    return true;
}

void unbind_window(const Mw& mw) {
    MwBinding& b = mw.bound;
    if (b.mr != nullptr) --b.mr->windows;
    b.mr = nullptr;
    b.valid = false;
    b.va = b.mr_addr = b.length = 0;
    b.access = 0;
}

}  // namespace snic::daemon
