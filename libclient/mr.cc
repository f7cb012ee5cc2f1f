// Protection domains, memory regions and memory windows.
#include <cstring>

#include "libclient/internal.h"
#include "libclient/memory.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace snic::client {

namespace {

constexpr unsigned kOptionalAccess = IBV_ACCESS_OPTIONAL_RANGE;

ibv_mr* reg_mr(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova, unsigned access) {
    return guarded<ibv_mr*>(nullptr, [&]() -> ibv_mr* {
        Context* ctx = to_ctx(pd->context);
        // Optional access flags are hints a device may ignore; snic ignores them.
        access &= ~kOptionalAccess;
        if (length == 0) return fail_null<ibv_mr>(EINVAL);
        if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
            (access & IBV_ACCESS_LOCAL_WRITE) == 0)
            return fail_null<ibv_mr>(EINVAL);
        if ((access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB)) != 0)
            return fail_null<ibv_mr>(EOPNOTSUPP);

        SharedRange range;
        if (const int err = share_range(reinterpret_cast<std::uintptr_t>(addr), length, &range);
            err != 0)
            return fail_null<ibv_mr>(err);

        shm::RegMrReq req{};
        req.pd = pd->handle;
        req.access = access;
        req.addr = reinterpret_cast<std::uintptr_t>(addr);
        req.length = length;
        req.iova = iova;
        req.nsegs = static_cast<std::uint32_t>(range.segs.size());
        std::memcpy(req.segs, range.segs.data(), range.segs.size() * sizeof(shm::MrSegment));
        shm::RegMrReply rep{};
        if (const int err = ctx->conn.call(shm::CtrlOp::reg_mr, req, &rep, range.fds); err != 0) {
            unshare(range.shares);
            return fail_null<ibv_mr>(err);
        }
        auto mr = std::make_unique<Mr>();
        mr->mr.context = pd->context;
        mr->mr.pd = pd;
        mr->mr.addr = addr;
        mr->mr.length = length;
        mr->mr.handle = rep.mr;
        mr->mr.lkey = rep.lkey;
        mr->mr.rkey = rep.rkey;
        mr->access = access;
        mr->iova = iova;
        mr->shares = std::move(range.shares);
        std::lock_guard lock(ctx->objs_mu);
        ctx->mrs.insert(mr.get());
        return &mr.release()->mr;
    });
}

}  // namespace

void release_mr_local(Mr* mr) {
    unshare(mr->shares);
    delete mr;
}

namespace ops {

ibv_mw* alloc_mw(ibv_pd* pd, ibv_mw_type type) {
    return guarded<ibv_mw*>(nullptr, [&]() -> ibv_mw* {
        if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) return fail_null<ibv_mw>(EINVAL);
        Context* ctx = to_ctx(pd->context);
        const shm::AllocMwReq req{pd->handle, static_cast<std::uint32_t>(type)};
        shm::AllocMwReply rep{};
        if (const int err = ctx->conn.call(shm::CtrlOp::alloc_mw, req, &rep); err != 0)
            return fail_null<ibv_mw>(err);
        auto mw = std::make_unique<Mw>();
        mw->mw.context = pd->context;
        mw->mw.pd = pd;
        mw->mw.rkey = rep.rkey;
        mw->mw.handle = rep.mw;
        mw->mw.type = type;
        std::lock_guard lock(ctx->objs_mu);
        ctx->mws.insert(mw.get());
        return &mw.release()->mw;
    });
}

int dealloc_mw(ibv_mw* mw) {
    return errno_verb([&] {
        Context* ctx = to_ctx(mw->context);
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::dealloc_mw, mw->handle); err != 0)
            return err;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->mws.erase(to_mw(mw));
        }
        delete to_mw(mw);
        return 0;
    });
}

}  // namespace ops

}  // namespace snic::client

using namespace snic::client;
namespace shm = snic::shm;

SNIC_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* c) {
    return guarded<ibv_pd*>(nullptr, [&]() -> ibv_pd* {
        Context* ctx = to_ctx(c);
        shm::HandleReply rep{};
        if (const int err = ctx->conn.call(shm::CtrlOp::alloc_pd, shm::Empty{}, &rep); err != 0)
            return fail_null<ibv_pd>(err);
        auto pd = std::make_unique<Pd>();
        pd->pd.context = c;
        pd->pd.handle = rep.handle;
        std::lock_guard lock(ctx->objs_mu);
        ctx->pds.insert(pd.get());
        return &pd.release()->pd;
    });
}

SNIC_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
    return errno_verb([&] {
        Context* ctx = to_ctx(pd->context);
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::dealloc_pd, pd->handle); err != 0)
            return err;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->pds.erase(to_pd(pd));
        }
        delete to_pd(pd);
        return 0;
    });
}

SNIC_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, std::size_t length, int access) {
    return reg_mr(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr),
                  static_cast<unsigned>(access));
}

SNIC_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                                    int access) {
    return reg_mr(pd, addr, length, iova, static_cast<unsigned>(access));
}

SNIC_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t iova,
                                     unsigned int access) {
    return reg_mr(pd, addr, length, iova, access);
}

SNIC_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, std::uint64_t, std::size_t, std::uint64_t, int,
                                      int) {
    return fail_null<ibv_mr>(EOPNOTSUPP);
}

SNIC_EXPORT int ibv_rereg_mr(ibv_mr*, int, ibv_pd*, void*, std::size_t, int) {
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;
}

SNIC_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
    return errno_verb([&] {
        Context* ctx = to_ctx(mr->context);
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::dereg_mr, mr->handle); err != 0)
            return err;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->mrs.erase(to_mr(mr));
        }
        release_mr_local(to_mr(mr));
        return 0;
    });
}
