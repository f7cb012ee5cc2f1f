// snic-window-tests: memory windows on the wire, through libsnic, between the two ports of
// one snicd's virtual wire (SNIC_WINDOW_DEVICES="NAME_0 NAME_1", SNIC_SOCKET_DIR as for any
// libsnic program; tests/integration/test_windows.py starts the daemon). Side A owns the
// memory and its windows; side B uses them through RDMA WRITE and READ and invalidates
// them with SEND with Invalidate. Each test connects fresh QPs: an access error ends a QP.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/verbs/common.h"

namespace {

using namespace snic::verbs_test;

constexpr std::size_t kBuf = 64 * 1024;
constexpr int kDepth = 16;
constexpr std::uint8_t kBackground = 0xee;

struct Side {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    PortAddress addr;
    std::vector<std::uint8_t> mem = std::vector<std::uint8_t>(kBuf, kBackground);
    ibv_mr* mr = nullptr;
};

class Windows : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto names = device_names("SNIC_WINDOW_DEVICES");
        if (names.size() != 2) GTEST_SKIP() << "set SNIC_WINDOW_DEVICES to two snic devices";
        for (int s = 0; s < 2; ++s) {
            side_[s].ctx = open_device(names[s]);
            ASSERT_NE(side_[s].ctx, nullptr) << "cannot open " << names[s];
        }
        for (Side& s : side_) open(s);
        connect(a(), b());
        connect(b(), a());
    }

    void TearDown() override {
        for (Side& s : side_) {
            auto expect_ok = [](int rc, const char* what) { EXPECT_EQ(rc, 0) << what; };
            if (s.qp != nullptr) expect_ok(ibv_destroy_qp(s.qp), "ibv_destroy_qp");
            // Each window once, with its side: one freed with side A is not read again for B.
            std::erase_if(windows_, [&](ibv_mw* mw) {
                if (mw->context != s.ctx) return false;
                expect_ok(ibv_dealloc_mw(mw), "ibv_dealloc_mw");
                return true;
            });
            if (s.mr != nullptr) expect_ok(ibv_dereg_mr(s.mr), "ibv_dereg_mr");
            if (s.cq != nullptr) expect_ok(ibv_destroy_cq(s.cq), "ibv_destroy_cq");
            if (s.pd != nullptr) expect_ok(ibv_dealloc_pd(s.pd), "ibv_dealloc_pd");
            if (s.ctx != nullptr) expect_ok(ibv_close_device(s.ctx), "ibv_close_device");
        }
    }

    Side& a() { return side_[0]; }
    Side& b() { return side_[1]; }

    void open(Side& s) {
        ASSERT_TRUE(query_address(s.ctx, s.addr)) << std::strerror(errno);
        s.pd = ibv_alloc_pd(s.ctx);
        ASSERT_NE(s.pd, nullptr);
        s.cq = ibv_create_cq(s.ctx, 4 * kDepth, nullptr, nullptr, 0);
        ASSERT_NE(s.cq, nullptr);
        s.mr = ibv_reg_mr(s.pd, s.mem.data(), s.mem.size(),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
        ASSERT_NE(s.mr, nullptr) << std::strerror(errno);
        ibv_qp_init_attr qa{};
        qa.send_cq = qa.recv_cq = s.cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap = {kDepth, kDepth, 2, 2, 64};
        ibv_qp_init_attr_ex x{};
        x.send_cq = x.recv_cq = s.cq;
        x.qp_type = IBV_QPT_RC;
        x.cap = qa.cap;
        x.pd = s.pd;
        x.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        x.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
                           IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                           IBV_QP_EX_WITH_SEND_WITH_INV;
        s.qp = ibv_create_qp_ex(s.ctx, &x);
        ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
    }

    void connect(Side& s, const Side& peer) {
        const RcParams p{.access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE,
                         .rq_psn = 100,
                         .sq_psn = 100,
                         .rd_atomic = 4};
        const ModifyResult r = connect_rc(s.qp, s.addr, peer.qp->qp_num, peer.addr, p);
        ASSERT_EQ(r.err, 0) << "to " << r.state;
    }

    ibv_mw* window(Side& s, ibv_mw_type type) {
        ibv_mw* mw = ibv_alloc_mw(s.pd, type);
        EXPECT_NE(mw, nullptr) << std::strerror(errno);
        if (mw != nullptr) windows_.push_back(mw);
        return mw;
    }

    // The next completion of `s`, within 10 s (a hang fails rather than blocks CI).
    ibv_wc next(Side& s) {
        const Polled p = poll_one(s.cq, std::chrono::seconds(10));
        EXPECT_EQ(p.n, 1) << "no completion within 10 s";
        return p.wc;
    }

    void post(Side& s, ibv_send_wr& wr) {
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(s.qp, &wr, &bad), 0);
    }

    // Type 1 bind through ibv_bind_mw on A, completed; returns the window's new rkey.
    std::uint32_t bind_type1(ibv_mw* mw, std::size_t offset, std::size_t len, unsigned access) {
        ibv_mw_bind bind{};
        bind.wr_id = 1;
        bind.send_flags = IBV_SEND_SIGNALED;
        bind.bind_info = {a().mr, addr(a(), offset), len, access};
        EXPECT_EQ(ibv_bind_mw(a().qp, mw, &bind), 0);
        const ibv_wc wc = next(a());
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
        return mw->rkey;
    }

    // Type 2 bind through a bind WR on A; returns its completion status.
    ibv_wc_status bind_type2(ibv_mw* mw, std::uint32_t rkey, std::size_t offset, std::size_t len,
                             unsigned access) {
        ibv_send_wr wr{};
        wr.wr_id = 2;
        wr.opcode = IBV_WR_BIND_MW;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.bind_mw.mw = mw;
        wr.bind_mw.rkey = rkey;
        wr.bind_mw.bind_info = {a().mr, addr(a(), offset), len, access};
        post(a(), wr);
        const ibv_wc wc = next(a());
        if (wc.status == IBV_WC_SUCCESS) {
            EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
        }
        return wc.status;
    }

    // A receive WR on A's QP for [offset, offset + len) of A's memory.
    void post_recv_a(std::size_t offset, std::uint32_t len, std::uint64_t wr_id) {
        ibv_sge sge{addr(a(), offset), len, a().mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_recv(a().qp, &wr, &bad), 0);
    }

    static std::uint64_t addr(Side& s, std::size_t offset) {
        return reinterpret_cast<std::uintptr_t>(s.mem.data()) + offset;
    }

    // An RDMA operation from B's memory at `local` to A's (rkey, remote); its completion status.
    ibv_wc_status rdma(ibv_wr_opcode op, std::uint32_t rkey, std::uint64_t remote,
                       std::size_t local, std::uint32_t len) {
        ibv_sge sge{addr(b(), local), len, b().mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 3;
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma = {remote, rkey};
        post(b(), wr);
        return next(b()).status;
    }

    void expect_a_untouched_except(std::size_t from, std::size_t len) {
        for (std::size_t i = 0; i < kBuf; ++i)
            if (i < from || i >= from + len) {
                ASSERT_EQ(a().mem[i], kBackground) << "A's byte " << i << " was written";
            }
    }

    Side side_[2];
    std::vector<ibv_mw*> windows_;
};

TEST_F(Windows, type1_window_grants_write_and_read_within_its_range_only) {
    ibv_mw* mw = window(a(), IBV_MW_TYPE_1);
    const std::uint32_t rkey =
        bind_type1(mw, 4096, 8192, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    std::memset(b().mem.data(), 0x5a, 8192);
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, rkey, addr(a(), 4096), 0, 8192), IBV_WC_SUCCESS);
    for (std::size_t i = 4096; i < 4096 + 8192; ++i) ASSERT_EQ(a().mem[i], 0x5a) << i;
    a().mem[4100] = 0x77;
    EXPECT_EQ(rdma(IBV_WR_RDMA_READ, rkey, addr(a(), 4100), 20000, 1), IBV_WC_SUCCESS);
    EXPECT_EQ(b().mem[20000], 0x77);
    a().mem[4100] = 0x5a;
    // One byte past the window: refused, nothing written.
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, rkey, addr(a(), 4096 + 8192 - 4), 0, 8),
              IBV_WC_REM_ACCESS_ERR);
    expect_a_untouched_except(4096, 8192);
}

TEST_F(Windows, rebinding_a_type1_window_retires_its_old_rkey) {
    ibv_mw* mw = window(a(), IBV_MW_TYPE_1);
    const std::uint32_t first = bind_type1(mw, 0, 4096, IBV_ACCESS_REMOTE_WRITE);
    const std::uint32_t second = bind_type1(mw, 8192, 4096, IBV_ACCESS_REMOTE_WRITE);
    EXPECT_NE(first, second);
    EXPECT_EQ(first >> 8, second >> 8);  // same window, the key byte renamed
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, second, addr(a(), 8192), 0, 64), IBV_WC_SUCCESS);
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, first, addr(a(), 0), 0, 64), IBV_WC_REM_ACCESS_ERR);
    expect_a_untouched_except(8192, 64);
}

TEST_F(Windows, type2_window_bound_by_wr_and_invalidated_locally) {
    ibv_mw* mw = window(a(), IBV_MW_TYPE_2);
    const std::uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw, rkey, 0, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
    std::memset(b().mem.data(), 0x11, 4096);
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, rkey, addr(a(), 0), 0, 4096), IBV_WC_SUCCESS);

    ibv_send_wr inv{};
    inv.wr_id = 4;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.invalidate_rkey = rkey;
    post(a(), inv);
    const ibv_wc wc = next(a());
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
    EXPECT_EQ(wc.wr_id, 4u);

    std::memset(b().mem.data(), 0x22, 4096);
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, rkey, addr(a(), 0), 0, 4096), IBV_WC_REM_ACCESS_ERR);
    for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(a().mem[i], 0x11) << i;
    expect_a_untouched_except(0, 4096);
}

TEST_F(Windows, binding_a_bound_type2_window_is_a_bind_error) {
    ibv_mw* mw = window(a(), IBV_MW_TYPE_2);
    const std::uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw, rkey, 0, 4096, IBV_ACCESS_REMOTE_READ), IBV_WC_SUCCESS);
    EXPECT_EQ(bind_type2(mw, ibv_inc_rkey(rkey), 0, 4096, IBV_ACCESS_REMOTE_READ),
              IBV_WC_MW_BIND_ERR);
    ibv_qp_attr qa{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(a().qp, &qa, IBV_QP_STATE, &ia), 0);
    EXPECT_EQ(qa.qp_state, IBV_QPS_ERR);
}

TEST_F(Windows, send_with_invalidate_reports_the_key_and_ends_the_window) {
    ibv_mw* mw = window(a(), IBV_MW_TYPE_2);
    const std::uint32_t rkey = ibv_inc_rkey(mw->rkey);
    ASSERT_EQ(bind_type2(mw, rkey, 0, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);

    post_recv_a(32768, 256, 7);

    // The ibv_wr_* API, as perftest and newer programs post.
    std::memcpy(b().mem.data(), "invalidate", 10);
    ibv_qp_ex* x = ibv_qp_to_qp_ex(b().qp);
    ASSERT_NE(x, nullptr);
    ibv_wr_start(x);
    x->wr_id = 8;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_inv(x, rkey);
    ibv_wr_set_sge(x, b().mr->lkey, addr(b(), 0), 10);
    ASSERT_EQ(ibv_wr_complete(x), 0);
    const ibv_wc sent = next(b());
    EXPECT_EQ(sent.status, IBV_WC_SUCCESS) << ibv_wc_status_str(sent.status);
    EXPECT_EQ(sent.opcode, IBV_WC_SEND);

    const ibv_wc got = next(a());
    EXPECT_EQ(got.status, IBV_WC_SUCCESS) << ibv_wc_status_str(got.status);
    EXPECT_EQ(got.wr_id, 7u);
    EXPECT_EQ(got.opcode, IBV_WC_RECV);
    EXPECT_EQ(got.byte_len, 10u);
    EXPECT_TRUE(got.wc_flags & IBV_WC_WITH_INV);
    EXPECT_EQ(got.invalidated_rkey, rkey);
    EXPECT_EQ(std::memcmp(a().mem.data() + 32768, "invalidate", 10), 0);

    // Using the invalidated window is a fatal error for the connection.
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, rkey, addr(a(), 0), 0, 64), IBV_WC_REM_ACCESS_ERR);
    expect_a_untouched_except(32768, 10);
}

TEST_F(Windows, send_with_invalidate_of_a_key_that_cannot_be_invalidated_fails) {
    post_recv_a(0, 256, 9);
    ibv_sge sge{addr(b(), 0), 8, b().mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 10;
    wr.opcode = IBV_WR_SEND_WITH_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.invalidate_rkey = a().mr->rkey;  // a region, not a window
    post(b(), wr);
    EXPECT_EQ(next(b()).status, IBV_WC_REM_INV_REQ_ERR);
    const ibv_wc got = next(a());
    EXPECT_NE(got.status, IBV_WC_SUCCESS);
    expect_a_untouched_except(0, 0);
}

TEST_F(Windows, region_with_a_bound_window_is_busy) {
    ibv_mw* mw = window(a(), IBV_MW_TYPE_1);
    bind_type1(mw, 0, 4096, IBV_ACCESS_REMOTE_READ);
    EXPECT_EQ(ibv_dereg_mr(a().mr), EBUSY);
    EXPECT_EQ(rdma(IBV_WR_RDMA_READ, mw->rkey, addr(a(), 0), 0, 64), IBV_WC_SUCCESS);
}

}  // namespace
