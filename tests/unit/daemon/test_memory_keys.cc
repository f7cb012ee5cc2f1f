// Access through MR and MW keys, window binds and invalidations (daemon/verbs/memory_keys.h),
// on sessions driven op by op, without DPDK.
#include "daemon/verbs/memory_keys.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cerrno>

#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon {
namespace {

using namespace fixture;
using verbs::RemoteCheck;
using verbs::RemoteNeed;
using verbs::WcStatus;

constexpr std::uint64_t kLen = 4 * shm::kPageSize;
constexpr std::uint32_t kQpn = 0x123;
constexpr std::uint32_t kOtherQpn = 0x456;
constexpr std::uint32_t kAllRemote =
    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

class MemoryKeys : public SessionTest {
  protected:
    void SetUp() override {
        ASSERT_EQ(c.open(), 0);
        pd = c.pd();
        mr = reg(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | kAllRemote);
        mr_obj = c.session.mr(mr.mr);
        ASSERT_NE(mr_obj, nullptr);
    }

    shm::RegMrReply reg(Handle on_pd, std::uint32_t access) {
        shm::RegMrReply out{};
        EXPECT_EQ(c.reg_mr(on_pd, mem, kLen, access, out), 0);
        return out;
    }
    shm::AllocMwReply window(std::uint32_t type, Handle on_pd = kNoHandle) {
        FdList fds;
        shm::AllocMwReply out{};
        EXPECT_EQ(c.session.alloc_mw({on_pd == kNoHandle ? pd : on_pd, type}, fds, out), 0);
        return out;
    }
    KeyUser user(std::uint32_t qpn = kQpn) { return {resources.keys(), mr_obj->pd.get(), qpn}; }
    static std::uint32_t next_key(std::uint32_t rkey) { return ibv_inc_rkey(rkey); }
    verbs::MwBind bind_of(const shm::AllocMwReply& w, std::uint32_t new_rkey, std::uint64_t offset,
                          std::uint64_t length, std::uint32_t access) const {
        return {w.mw, new_rkey, mr.lkey, access, kAddr + offset, length};
    }
    std::uint8_t* at(std::uint64_t offset) const {
        return reinterpret_cast<std::uint8_t*>(mr_obj->addr) + offset;
    }

    Client c{resources, ports};
    ClientMemfd mem{kLen};
    Handle pd = kNoHandle;
    shm::RegMrReply mr{};
    const Mr* mr_obj = nullptr;
};

TEST_F(MemoryKeys, region_key_gives_remote_access_within_its_bounds_and_rights) {
    const auto r = remote_access(user(), mr.rkey, kAddr + 8, 16, RemoteNeed::write);
    EXPECT_EQ(r.check, RemoteCheck::ok);
    EXPECT_EQ(r.ptr, at(8));
    EXPECT_EQ(remote_access(user(), mr.rkey, kAddr + kLen - 8, 16, RemoteNeed::read).check,
              RemoteCheck::out_of_bounds);
    const auto ro = reg(pd, IBV_ACCESS_REMOTE_READ);
    EXPECT_EQ(remote_access(user(), ro.rkey, kAddr, 8, RemoteNeed::write).check,
              RemoteCheck::no_access);
    EXPECT_EQ(remote_access(user(), mr.rkey ^ 0x1, kAddr, 8, RemoteNeed::read).check,
              RemoteCheck::bad_key);
}

TEST_F(MemoryKeys, unbound_window_gives_no_access) {
    const auto w1 = window(IBV_MW_TYPE_1);
    const auto w2 = window(IBV_MW_TYPE_2);
    EXPECT_EQ(remote_access(user(), w1.rkey, kAddr, 8, RemoteNeed::read).check,
              RemoteCheck::bad_key);
    EXPECT_EQ(remote_access(user(), w2.rkey, kAddr, 8, RemoteNeed::read).check,
              RemoteCheck::bad_key);
}

TEST_F(MemoryKeys, type1_bind_grants_access_to_the_window_only_under_the_new_key) {
    const auto w = window(IBV_MW_TYPE_1);
    const std::uint32_t key = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, key, 4096, 8192, IBV_ACCESS_REMOTE_WRITE)),
              WcStatus::success);
    const auto r = remote_access(user(), key, kAddr + 4096, 8, RemoteNeed::write);
    EXPECT_EQ(r.check, RemoteCheck::ok);
    EXPECT_EQ(r.ptr, at(4096));
    EXPECT_EQ(remote_access(user(), key, kAddr + 4096 + 8192 - 8, 8, RemoteNeed::write).ptr,
              at(4096 + 8192 - 8));
    // Outside the window (though inside the region), another right, the old key.
    EXPECT_EQ(remote_access(user(), key, kAddr + 4088, 8, RemoteNeed::write).check,
              RemoteCheck::out_of_bounds);
    EXPECT_EQ(remote_access(user(), key, kAddr + 4096 + 8190, 8, RemoteNeed::write).check,
              RemoteCheck::out_of_bounds);
    EXPECT_EQ(remote_access(user(), key, kAddr + 4096, 8, RemoteNeed::read).check,
              RemoteCheck::no_access);
    EXPECT_EQ(remote_access(user(), w.rkey, kAddr + 4096, 8, RemoteNeed::write).check,
              RemoteCheck::bad_key);
    // Type 1 windows serve every QP of their PD.
    EXPECT_EQ(remote_access(user(kOtherQpn), key, kAddr + 4096, 8, RemoteNeed::write).check,
              RemoteCheck::ok);
    EXPECT_EQ(mr_obj->windows, 1u);
}

TEST_F(MemoryKeys, type1_rebind_renames_the_key_and_the_old_one_stops_working) {
    const auto w = window(IBV_MW_TYPE_1);
    const std::uint32_t k1 = next_key(w.rkey);
    const std::uint32_t k2 = next_key(k1);
    ASSERT_EQ(bind_window(user(), bind_of(w, k1, 0, 4096, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    ASSERT_EQ(bind_window(user(), bind_of(w, k2, 8192, 4096, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    EXPECT_EQ(remote_access(user(), k1, kAddr, 8, RemoteNeed::read).check, RemoteCheck::bad_key);
    EXPECT_EQ(remote_access(user(), k2, kAddr + 8192, 8, RemoteNeed::read).ptr, at(8192));
    EXPECT_EQ(mr_obj->windows, 1u);  // still one window, bound once
}

TEST_F(MemoryKeys, type1_bind_of_length_zero_unbinds) {
    const auto w = window(IBV_MW_TYPE_1);
    const std::uint32_t k1 = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, k1, 0, 4096, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    const std::uint32_t k2 = next_key(k1);
    ASSERT_EQ(bind_window(user(), {w.mw, k2, 0, 0, 0, 0}), WcStatus::success);
    EXPECT_EQ(remote_access(user(), k2, kAddr, 8, RemoteNeed::read).check, RemoteCheck::bad_key);
    EXPECT_EQ(mr_obj->windows, 0u);
}

TEST_F(MemoryKeys, bind_refuses_what_the_region_does_not_allow) {
    const auto w = window(IBV_MW_TYPE_1);
    const std::uint32_t key = next_key(w.rkey);
    auto fails = [&](verbs::MwBind b) { return bind_window(user(), b) == WcStatus::mw_bind_err; };
    const auto no_bind = reg(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    EXPECT_TRUE(fails({w.mw, key, no_bind.lkey, IBV_ACCESS_REMOTE_READ, kAddr, 64}));
    const auto read_only = reg(pd, IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ);
    EXPECT_TRUE(fails(
        {w.mw, key, read_only.lkey, IBV_ACCESS_REMOTE_WRITE, kAddr, 64}));  // needs local write
    EXPECT_TRUE(fails(bind_of(w, key, kLen - 32, 64, IBV_ACCESS_REMOTE_READ)));  // past the region
    EXPECT_TRUE(
        fails(bind_of(w, key, 0, 64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ZERO_BASED)));  // type 1
    EXPECT_TRUE(fails(bind_of(w, key, 0, 64, IBV_ACCESS_MW_BIND)));  // not a window right
    EXPECT_TRUE(
        fails({w.mw + 1, key, mr.lkey, IBV_ACCESS_REMOTE_READ, kAddr, 64}));  // other handle
    EXPECT_TRUE(
        fails({w.mw, key, mr.lkey ^ 0x1, IBV_ACCESS_REMOTE_READ, kAddr, 64}));  // stale lkey
    // A window of another PD cannot be bound through this QP.
    const Handle pd2 = c.pd();
    const auto w2 = window(IBV_MW_TYPE_1, pd2);
    EXPECT_TRUE(fails(bind_of(w2, next_key(w2.rkey), 0, 64, IBV_ACCESS_REMOTE_READ)));
    EXPECT_EQ(mr_obj->windows, 0u);
    EXPECT_EQ(remote_access(user(), key, kAddr, 8, RemoteNeed::read).check, RemoteCheck::bad_key);
}

// Applications bind with their region's flags, local write among them (rdma-core's own tests
// do, and rxe takes it): the bind succeeds and the window grants the remote rights alone.
TEST_F(MemoryKeys, bind_with_local_write_grants_the_remote_rights_only) {
    const auto w1 = window(IBV_MW_TYPE_1);
    const std::uint32_t k1 = next_key(w1.rkey);
    ASSERT_EQ(bind_window(user(),
                          bind_of(w1, k1, 0, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)),
              WcStatus::success);
    EXPECT_EQ(remote_access(user(), k1, kAddr, 8, RemoteNeed::write).ptr, at(0));
    EXPECT_EQ(remote_access(user(), k1, kAddr, 8, RemoteNeed::read).check, RemoteCheck::no_access);

    const auto w2 = window(IBV_MW_TYPE_2);
    const std::uint32_t k2 = next_key(w2.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w2, k2, 64, 64, IBV_ACCESS_LOCAL_WRITE)),
              WcStatus::success);
    EXPECT_EQ(remote_access(user(), k2, kAddr + 64, 8, RemoteNeed::write).check,
              RemoteCheck::no_access);
    EXPECT_EQ(remote_access(user(), k2, kAddr + 64, 8, RemoteNeed::read).check,
              RemoteCheck::no_access);
    EXPECT_EQ(mr_obj->windows, 2u);
}

TEST_F(MemoryKeys, window_of_another_pd_is_a_pd_mismatch) {
    const Handle pd2 = c.pd();
    const auto mr2 = reg(pd2, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | kAllRemote);
    const auto w2 = window(IBV_MW_TYPE_2, pd2);
    const KeyUser other{resources.keys(), c.session.mr(mr2.mr)->pd.get(), kQpn};
    const std::uint32_t key = next_key(w2.rkey);
    ASSERT_EQ(bind_window(other, {w2.mw, key, mr2.lkey, IBV_ACCESS_REMOTE_READ, kAddr, 64}),
              WcStatus::success);
    EXPECT_EQ(remote_access(other, key, kAddr, 8, RemoteNeed::read).check, RemoteCheck::ok);
    EXPECT_EQ(remote_access(user(), key, kAddr, 8, RemoteNeed::read).check,
              RemoteCheck::pd_mismatch);
}

TEST_F(MemoryKeys, type2_window_serves_only_the_qp_it_was_bound_through) {
    const auto w = window(IBV_MW_TYPE_2);
    const std::uint32_t key = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, key, 0, 64, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    EXPECT_EQ(remote_access(user(), key, kAddr, 8, RemoteNeed::read).check, RemoteCheck::ok);
    EXPECT_EQ(remote_access(user(kOtherQpn), key, kAddr, 8, RemoteNeed::read).check,
              RemoteCheck::bad_key);
    EXPECT_FALSE(invalidate_remote(user(kOtherQpn), key));
}

TEST_F(MemoryKeys, type2_window_is_bound_again_only_after_invalidation) {
    const auto w = window(IBV_MW_TYPE_2);
    const std::uint32_t k1 = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, k1, 0, 64, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    const std::uint32_t k2 = next_key(k1);
    EXPECT_EQ(bind_window(user(), bind_of(w, k2, 64, 64, IBV_ACCESS_REMOTE_READ)),
              WcStatus::mw_bind_err);
    EXPECT_EQ(remote_access(user(), k1, kAddr, 8, RemoteNeed::read).check, RemoteCheck::ok);

    EXPECT_EQ(invalidate_local(user(), k2), WcStatus::loc_qp_op_err);  // not its key
    EXPECT_EQ(invalidate_local(user(), k1), WcStatus::success);
    EXPECT_EQ(remote_access(user(), k1, kAddr, 8, RemoteNeed::read).check, RemoteCheck::bad_key);
    EXPECT_EQ(invalidate_local(user(), k1), WcStatus::loc_qp_op_err);  // already free
    EXPECT_EQ(mr_obj->windows, 0u);
    ASSERT_EQ(bind_window(user(), bind_of(w, k2, 64, 64, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    EXPECT_EQ(remote_access(user(), k2, kAddr + 64, 8, RemoteNeed::read).ptr, at(64));
}

TEST_F(MemoryKeys, type2_zero_based_window_is_addressed_from_zero) {
    const auto w = window(IBV_MW_TYPE_2);
    const std::uint32_t key = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, key, 4096, 128,
                                          IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED)),
              WcStatus::success);
    EXPECT_EQ(remote_access(user(), key, 0, 8, RemoteNeed::write).ptr, at(4096));
    EXPECT_EQ(remote_access(user(), key, 120, 8, RemoteNeed::write).ptr, at(4096 + 120));
    EXPECT_EQ(remote_access(user(), key, 124, 8, RemoteNeed::write).check,
              RemoteCheck::out_of_bounds);
    EXPECT_EQ(remote_access(user(), key, kAddr + 4096, 8, RemoteNeed::write).check,
              RemoteCheck::out_of_bounds);
}

TEST_F(MemoryKeys, send_with_invalidate_frees_a_type2_window_once) {
    const auto w = window(IBV_MW_TYPE_2);
    const std::uint32_t key = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, key, 0, 64, IBV_ACCESS_REMOTE_WRITE)),
              WcStatus::success);
    EXPECT_TRUE(invalidate_remote(user(), key));
    EXPECT_EQ(remote_access(user(), key, kAddr, 8, RemoteNeed::write).check, RemoteCheck::bad_key);
    EXPECT_FALSE(invalidate_remote(user(), key));
    EXPECT_EQ(mr_obj->windows, 0u);
}

TEST_F(MemoryKeys, regions_and_type1_windows_cannot_be_invalidated) {
    EXPECT_FALSE(invalidate_remote(user(), mr.rkey));
    EXPECT_EQ(invalidate_local(user(), mr.lkey), WcStatus::loc_qp_op_err);
    const auto w = window(IBV_MW_TYPE_1);
    const std::uint32_t key = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, key, 0, 64, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    EXPECT_FALSE(invalidate_remote(user(), key));
    EXPECT_EQ(invalidate_local(user(), key), WcStatus::loc_qp_op_err);
    EXPECT_EQ(remote_access(user(), key, kAddr, 8, RemoteNeed::read).check, RemoteCheck::ok);
}

TEST_F(MemoryKeys, region_with_a_bound_window_is_busy_until_the_window_goes) {
    const auto w = window(IBV_MW_TYPE_1);
    const std::uint32_t key = next_key(w.rkey);
    ASSERT_EQ(bind_window(user(), bind_of(w, key, 0, 64, IBV_ACCESS_REMOTE_READ)),
              WcStatus::success);
    FdList none;
    EXPECT_EQ(c.session.dereg_mr({mr.mr, 0}, none, c.none), EBUSY);
    EXPECT_EQ(remote_access(user(), key, kAddr, 8, RemoteNeed::read).check, RemoteCheck::ok);
    EXPECT_EQ(c.session.dealloc_mw({w.mw, 0}, none, c.none), 0);
    EXPECT_EQ(mr_obj->windows, 0u);
    EXPECT_EQ(remote_access(user(), key, kAddr, 8, RemoteNeed::read).check, RemoteCheck::bad_key);
    EXPECT_EQ(c.session.dereg_mr({mr.mr, 0}, none, c.none), 0);
}

TEST_F(MemoryKeys, region_being_deregistered_takes_no_new_window) {
    const auto w = window(IBV_MW_TYPE_1);
    FdList none;
    // What dereg_mr leaves when it wins the race against a bind: the region is claimed.
    const auto spare = reg(pd, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | kAllRemote);
    const Mr* spare_obj = c.session.mr(spare.mr);
    spare_obj->deregistering = true;
    EXPECT_EQ(bind_window(user(),
                          {w.mw, next_key(w.rkey), spare.lkey, IBV_ACCESS_REMOTE_READ, kAddr, 64}),
              WcStatus::mw_bind_err);
    spare_obj->deregistering = false;
    EXPECT_EQ(c.session.dereg_mr({spare.mr, 0}, none, c.none), 0);
}

}  // namespace
}  // namespace snic::daemon
