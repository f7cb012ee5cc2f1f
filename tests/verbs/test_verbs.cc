// snic-verbs-tests: the verbs resources through libsnic, against a running
// snicd. Linked with libsnic and not libibverbs: every verb below, the inline
// ones of <infiniband/verbs.h> included, lands in libsnic.
//
// The daemon is found as libsnic finds it (SNIC_SOCKET_DIR, default /run/snic);
// SNIC_TEST_DEVICE picks a device by name (default: the first). Without a
// device every test that needs one is skipped, saying why.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <snic/snic_ext.h>

#include "tests/verbs/common.h"

namespace {

namespace vt = snic::verbs_test;
using vt::kInitMask;
using vt::kRtrMask;
using vt::kRtsMask;

constexpr std::size_t kPage = 4096;

// Defined by libsnic (rdma-core keeps it in driver.h, which is not installed).
extern "C" int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size);

// ---- tests that need no daemon ------------------------------------------------

TEST(VerbsHelpers, StringsAndRates) {
    EXPECT_STREQ(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
    EXPECT_STREQ(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error");
    EXPECT_STREQ(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active");
    EXPECT_STREQ(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter");
    EXPECT_STREQ(ibv_port_state_str(IBV_PORT_ACTIVE), "active");
    EXPECT_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
    EXPECT_EQ(mult_to_ibv_rate(16), IBV_RATE_40_GBPS);
    EXPECT_EQ(ibv_rate_to_mbps(IBV_RATE_25_GBPS), 25781);
    EXPECT_EQ(mbps_to_ibv_rate(103125), IBV_RATE_100_GBPS);
    EXPECT_EQ(mbps_to_ibv_rate(1), IBV_RATE_MAX);
}

TEST(VerbsHelpers, SysfsFileMissing) {
    char buf[64];
    errno = 0;
    EXPECT_EQ(ibv_read_sysfs_file("/run/snic/none.sock", "board_id", buf, sizeof buf), -1);
    EXPECT_NE(errno, 0);
}

TEST(VerbsHelpers, ForkStatus) {
    // A child gets its own copy of registered memory (as from a kernel that copies pinned
    // pages at fork): fork support is not needed, before ibv_fork_init or after.
    EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
    EXPECT_EQ(ibv_fork_init(), 0);
    EXPECT_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
}

// ---- the fixture --------------------------------------------------------------

class Verbs : public ::testing::Test {
  protected:
    void SetUp() override {
        int n = 0;
        list_ = ibv_get_device_list(&n);
        ASSERT_NE(list_, nullptr) << std::strerror(errno);
        if (n == 0) {
            const char* dir = std::getenv("SNIC_SOCKET_DIR");
            GTEST_SKIP() << "no snic device found in " << (dir != nullptr ? dir : "/run/snic")
                         << " (start snicd, or set SNIC_SOCKET_DIR to its socket directory)";
        }
        const char* want = std::getenv("SNIC_TEST_DEVICE");
        for (int i = 0; i < n && dev_ == nullptr; ++i)
            if (want == nullptr || std::strcmp(ibv_get_device_name(list_[i]), want) == 0)
                dev_ = list_[i];
        ASSERT_NE(dev_, nullptr) << "device " << want << " not found";
        ctx_ = ibv_open_device(dev_);
        ASSERT_NE(ctx_, nullptr) << std::strerror(errno);
        ASSERT_EQ(ibv_query_device(ctx_, &dattr_), 0);
        ASSERT_EQ(ibv_query_port(ctx_, 1, &pattr_), 0);
        ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid_), 0);
        pd_ = ibv_alloc_pd(ctx_);
        ASSERT_NE(pd_, nullptr) << std::strerror(errno);
    }

    void TearDown() override {
        if (pd_ != nullptr) {
            EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
        }
        if (ctx_ != nullptr) {
            EXPECT_EQ(ibv_close_device(ctx_), 0);
        }
        if (list_ != nullptr) ibv_free_device_list(list_);
    }

    ibv_cq* make_cq(int cqe = 16) {
        ibv_cq* cq = ibv_create_cq(ctx_, cqe, nullptr, nullptr, 0);
        EXPECT_NE(cq, nullptr) << std::strerror(errno);
        return cq;
    }

    ibv_qp* make_qp(ibv_cq* cq, std::uint32_t send_wr = 16, std::uint32_t recv_wr = 16,
                    ibv_srq* srq = nullptr, ibv_qp_type type = IBV_QPT_RC) {
        ibv_qp_init_attr a{};
        a.send_cq = cq;
        a.recv_cq = cq;
        a.srq = srq;
        a.qp_type = type;
        a.cap.max_send_wr = send_wr;
        a.cap.max_recv_wr = recv_wr;
        a.cap.max_send_sge = 2;
        a.cap.max_recv_sge = 2;
        a.cap.max_inline_data = 64;
        ibv_qp* qp = ibv_create_qp(pd_, &a);
        EXPECT_NE(qp, nullptr) << std::strerror(errno);
        return qp;
    }

    // A QP of `type` on `cq` with small queues.
    static ibv_qp_init_attr plain_qp_attr(ibv_cq* cq, ibv_qp_type type) {
        ibv_qp_init_attr a{};
        a.send_cq = cq;
        a.recv_cq = cq;
        a.qp_type = type;
        a.cap = {4, 4, 1, 1, 0};
        return a;
    }

    // The RC attributes of these tests: a QP connected to itself, or to another QP of this
    // port, through the port's own address.
    static constexpr vt::RcParams kRc{
        .access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
        .rq_psn = 0x1234,
        .sq_psn = 0x4321,
        .rd_atomic = 4,
        .min_rnr_timer = 12};

    // Attributes of each valid step, against this port (loopback address).
    static ibv_qp_attr init_attr() { return vt::init_attr(kRc.access); }
    ibv_qp_attr rtr_attr(std::uint32_t dest_qpn) const {
        return vt::rtr_attr(pattr_.active_mtu, dest_qpn, gid_, kRc);
    }
    static ibv_qp_attr rts_attr() { return vt::rts_attr(kRc); }
    vt::PortAddress address() const { return {gid_, pattr_.active_mtu}; }

    void to_rts(ibv_qp* qp) {
        const vt::ModifyResult r = vt::connect_rc(qp, address(), qp->qp_num, address(), kRc);
        ASSERT_EQ(r.err, 0) << "to " << r.state;
    }

    ibv_qp_state state_of(ibv_qp* qp) {
        ibv_qp_attr a{};
        ibv_qp_init_attr ia{};
        EXPECT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia), 0);
        return a.qp_state;
    }

    // A modify that must fail with EINVAL and leave the QP in `state`.
    void expect_refused(ibv_qp* qp, ibv_qp_attr a, int mask, ibv_qp_state state, const char* what) {
        EXPECT_EQ(ibv_modify_qp(qp, &a, mask), EINVAL) << what;
        EXPECT_EQ(state_of(qp), state) << what;
    }

    ibv_device** list_ = nullptr;
    ibv_device* dev_ = nullptr;
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_device_attr dattr_{};
    ibv_port_attr pattr_{};
    ibv_gid gid_{};
};

// ---- devices ------------------------------------------------------------------

TEST_F(Verbs, DeviceAttributes) {
    EXPECT_EQ(dev_->node_type, IBV_NODE_CA);
    EXPECT_EQ(dev_->transport_type, IBV_TRANSPORT_IB);
    EXPECT_GE(ibv_get_device_index(dev_), 0);
    EXPECT_NE(ibv_get_device_guid(dev_), 0u);
    EXPECT_EQ(dattr_.node_guid, ibv_get_device_guid(dev_));
    EXPECT_EQ(dattr_.phys_port_cnt, 1);
    EXPECT_GT(dattr_.max_qp, 0);
    EXPECT_GT(dattr_.max_qp_wr, 0);
    EXPECT_GT(dattr_.max_cq, 0);
    EXPECT_GT(dattr_.max_cqe, 0);
    EXPECT_GT(dattr_.max_mr, 0);
    EXPECT_GT(dattr_.max_pd, 0);
    EXPECT_GT(dattr_.max_srq, 0);
    EXPECT_GT(dattr_.max_mw, 0);
    EXPECT_GT(dattr_.max_sge, 0);
    EXPECT_GT(dattr_.max_mr_size, 0u);
    EXPECT_EQ(dattr_.max_pkeys, 1);

    ibv_device_attr_ex ex{};
    ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
    EXPECT_EQ(ex.orig_attr.max_qp, dattr_.max_qp);
    EXPECT_EQ(ex.orig_attr.node_guid, dattr_.node_guid);
}

TEST_F(Verbs, PortGidPkey) {
    EXPECT_EQ(pattr_.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_GE(pattr_.active_mtu, IBV_MTU_256);
    EXPECT_LE(pattr_.active_mtu, pattr_.max_mtu);
    EXPECT_EQ(pattr_.gid_tbl_len, 1);
    EXPECT_EQ(pattr_.pkey_tbl_len, 1);
    if (pattr_.state == IBV_PORT_ACTIVE) {
        EXPECT_EQ(pattr_.phys_state, 5);
    }

    static const std::uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    EXPECT_EQ(std::memcmp(gid_.raw, mapped, 12), 0);

    ibv_gid_entry e{};
    ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &e, 0), 0);
    EXPECT_EQ(std::memcmp(e.gid.raw, gid_.raw, 16), 0);
    EXPECT_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
    ibv_gid_entry table[4];
    EXPECT_EQ(ibv_query_gid_table(ctx_, table, 4, 0), 1);

    ibv_gid g;
    EXPECT_EQ(ibv_query_gid(ctx_, 1, 1, &g), -1);
    EXPECT_EQ(ibv_query_gid(ctx_, 2, 0, &g), -1);
    ibv_port_attr pa;
    EXPECT_EQ(ibv_query_port(ctx_, 2, &pa), EINVAL);

    __be16 pkey = 0;
    ASSERT_EQ(ibv_query_pkey(ctx_, 1, 0, &pkey), 0);
    EXPECT_EQ(pkey, 0xffff);
    EXPECT_EQ(ibv_get_pkey_index(ctx_, 1, pkey), 0);
    EXPECT_EQ(ibv_query_pkey(ctx_, 1, 1, &pkey), -1);
}

TEST_F(Verbs, AsyncFdIsQuiet) {
    const int flags = fcntl(ctx_->async_fd, F_GETFL);
    ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
    ibv_async_event ev;
    EXPECT_EQ(ibv_get_async_event(ctx_, &ev), -1);
    EXPECT_EQ(errno, EAGAIN);
}

// ---- memory ----------------------------------------------------------------------

// Whether /proc/self/maps shows [addr, addr+len) backed by a libsnic memfd.
bool backed_by_memfd(const void* addr, std::size_t len) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    const auto lo = reinterpret_cast<std::uintptr_t>(addr);
    const auto hi = lo + len;
    std::uintptr_t covered = lo;
    while (std::getline(maps, line)) {
        unsigned long s = 0, e = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &s, &e) != 2) continue;
        if (e <= covered || s > covered) continue;
        if (line.find("/memfd:libsnic-mr") == std::string::npos) return false;
        covered = e;
        if (covered >= hi) return true;
    }
    return covered >= hi;
}

TEST_F(Verbs, RegisterMalloced64MiB) {
    constexpr std::size_t kLen = 64u << 20;
    void* raw = nullptr;
    ASSERT_EQ(posix_memalign(&raw, kPage, kLen), 0);
    auto* buf = static_cast<std::uint32_t*>(raw);
    for (std::size_t i = 0; i < kLen / 4; i += 1024)
        buf[i] = static_cast<std::uint32_t>(i * 2654435761u);
    buf[kLen / 4 - 1] = 0xdeadbeef;

    ibv_mr* mr = ibv_reg_mr(
        pd_, buf, kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(mr->addr, buf);
    EXPECT_EQ(mr->length, kLen);
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_EQ(mr->pd, pd_);
    EXPECT_TRUE(backed_by_memfd(buf, kLen));
    // The application's pointer still works, and the contents moved with it.
    for (std::size_t i = 0; i < kLen / 4; i += 1024)
        ASSERT_EQ(buf[i], static_cast<std::uint32_t>(i * 2654435761u)) << "word " << i;
    EXPECT_EQ(buf[kLen / 4 - 1], 0xdeadbeefu);
    buf[12345] = 42;
    EXPECT_EQ(buf[12345], 42u);

    // The same memory again (and a part of it) reuses the memfd.
    ibv_mr* again = ibv_reg_mr(pd_, buf + 1024, kLen / 2, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(again, nullptr) << std::strerror(errno);
    EXPECT_NE(again->lkey, mr->lkey);
    EXPECT_EQ(ibv_dereg_mr(again), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(buf[12345], 42u);
    std::free(raw);
}

TEST_F(Verbs, RegisterAnonymousMappingAndUnalignedBuffer) {
    constexpr std::size_t kLen = 1u << 20;
    auto* map = static_cast<char*>(
        mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(map, MAP_FAILED);
    std::memset(map, 0x5a, kLen);
    // Not page aligned: the pages that hold it are shared.
    ibv_mr* mr = ibv_reg_mr(pd_, map + 100, kLen - 200, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(mr->addr, map + 100);
    EXPECT_TRUE(backed_by_memfd(map, kLen));
    EXPECT_EQ(map[0], 0x5a);
    EXPECT_EQ(map[kLen - 1], 0x5a);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);

    // Registered again after the last deregistration: moved into a new memfd.
    mr = ibv_reg_mr(pd_, map, kLen, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    EXPECT_EQ(map[4096], 0x5a);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    munmap(map, kLen);
}

TEST_F(Verbs, RegisterFileBackedMemoryIsRefused) {
    char path[] = "/tmp/snic-verbs-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(fd, 2 * kPage), 0);
    void* file = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ASSERT_NE(file, MAP_FAILED);
    close(fd);

    testing::internal::CaptureStderr();
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd_, file, 2 * kPage, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("libsnic: cannot share ["), std::string::npos) << err;
    EXPECT_NE(err.find("mapped from a file"), std::string::npos) << err;
    munmap(file, 2 * kPage);

    // Unmapped memory and the stack are refused too.
    void* hole = mmap(nullptr, kPage, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(hole, MAP_FAILED);
    munmap(hole, kPage);
    testing::internal::CaptureStderr();
    EXPECT_EQ(ibv_reg_mr(pd_, hole, kPage, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("is not mapped"), std::string::npos);
    char on_stack[64];
    testing::internal::CaptureStderr();
    EXPECT_EQ(ibv_reg_mr(pd_, on_stack, sizeof on_stack, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    testing::internal::GetCapturedStderr();

    // Access flags verbs forbids: remote write without local write.
    std::vector<char> v(64);
    EXPECT_EQ(ibv_reg_mr(pd_, v.data(), v.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(Verbs, RegistrationOfTooManySegmentsIsRefused) {
    constexpr std::size_t kPages = 40;
    auto* map = static_cast<char*>(
        mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(map, MAP_FAILED);
    // Every other page shared on its own: the whole range would need 39 segments.
    std::vector<ibv_mr*> mrs;
    for (std::size_t p = 1; p < kPages; p += 2) {
        mrs.push_back(ibv_reg_mr(pd_, map + p * kPage, kPage, IBV_ACCESS_LOCAL_WRITE));
        ASSERT_NE(mrs.back(), nullptr) << std::strerror(errno);
    }
    testing::internal::CaptureStderr();
    EXPECT_EQ(ibv_reg_mr(pd_, map, kPages * kPage, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("segments"), std::string::npos);
    // Fifteen segments are fine: pages 0..14 are 8 new and 7 existing pieces.
    ibv_mr* ok = ibv_reg_mr(pd_, map, 15 * kPage, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(ok, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_dereg_mr(ok), 0);
    for (ibv_mr* mr : mrs) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    munmap(map, kPages * kPage);
}

// ---- completion queues ---------------------------------------------------------------

TEST_F(Verbs, CompletionQueueWithChannel) {
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
    ASSERT_NE(ch, nullptr) << std::strerror(errno);
    int marker = 0;
    ibv_cq* cq = ibv_create_cq(ctx_, 100, &marker, ch, 0);
    ASSERT_NE(cq, nullptr) << std::strerror(errno);
    EXPECT_GE(cq->cqe, 100);
    EXPECT_EQ(cq->cq_context, &marker);
    EXPECT_EQ(cq->channel, ch);
    EXPECT_EQ(ibv_req_notify_cq(cq, 0), 0);
    EXPECT_EQ(ibv_req_notify_cq(cq, 1), 0);
    ibv_wc wc[4];
    EXPECT_EQ(ibv_poll_cq(cq, 4, wc), 0);

    // No completion, no event: a non-blocking channel says EAGAIN.
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
    EXPECT_EQ(errno, EAGAIN);

    // A blocking wait that a signal interrupts ends with EINTR, as rdma-core's does (a
    // program that ends its test with SIGALRM must not hang).
    ASSERT_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) & ~O_NONBLOCK), 0);
    struct sigaction sa {
    }, old{};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);  // no SA_RESTART
    ASSERT_EQ(sigaction(SIGALRM, &sa, &old), 0);
    itimerval every{{0, 20000}, {0, 20000}};  // until the wait ends, however late it began
    ASSERT_EQ(setitimer(ITIMER_REAL, &every, nullptr), 0);
    errno = 0;
    EXPECT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), -1);
    EXPECT_EQ(errno, EINTR);
    ibv_async_event async_ev{};
    errno = 0;
    EXPECT_EQ(ibv_get_async_event(ctx_, &async_ev), -1);
    EXPECT_EQ(errno, EINTR);
    const itimerval off{};
    setitimer(ITIMER_REAL, &off, nullptr);
    sigaction(SIGALRM, &old, nullptr);

    EXPECT_EQ(ibv_destroy_comp_channel(ch), EBUSY);  // the CQ still uses it
    EXPECT_EQ(ibv_resize_cq(cq, 200), EOPNOTSUPP);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Verbs, CompletionQueueLimits) {
    EXPECT_EQ(ibv_create_cq(ctx_, 0, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_create_cq(ctx_, dattr_.max_cqe + 1, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_create_cq(ctx_, 1, nullptr, nullptr, 1), nullptr);  // one completion vector
    EXPECT_EQ(errno, EINVAL);
    ibv_cq* big = ibv_create_cq(ctx_, dattr_.max_cqe, nullptr, nullptr, 0);
    ASSERT_NE(big, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_destroy_cq(big), 0);

    // More CQs than the device allows: ENOMEM, after max_cq of them.
    std::vector<ibv_cq*> cqs;
    const int bound = dattr_.max_cq + 8;
    int err = 0;
    for (int i = 0; i < bound; ++i) {
        ibv_cq* cq = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
        if (cq == nullptr) {
            err = errno;
            break;
        }
        cqs.push_back(cq);
    }
    EXPECT_EQ(err, ENOMEM);
    EXPECT_EQ(static_cast<int>(cqs.size()), dattr_.max_cq);
    for (ibv_cq* cq : cqs) ASSERT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, ExtendedCompletionQueue) {
    ibv_cq_init_attr_ex a{};
    a.cqe = 32;
    a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM;
    ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &a);
    ASSERT_NE(cq, nullptr) << std::strerror(errno);
    ibv_poll_cq_attr pa{};
    EXPECT_EQ(ibv_start_poll(cq, &pa), ENOENT);  // empty: no end_poll
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc), 0);
    EXPECT_EQ(ibv_req_notify_cq(ibv_cq_ex_to_cq(cq), 0), 0);
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);

    a.wc_flags = IBV_WC_EX_WITH_TM_INFO;
    EXPECT_EQ(ibv_create_cq_ex(ctx_, &a), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
}

// A context's cmd_fd is a real descriptor, as a kernel RNIC's uverbs fd is: programs dup it to
// share the context with another process (rdma-core's own tests do). It is /dev/null's: no
// command goes through it, and importing it, or a PD or MR, fails cleanly with EOPNOTSUPP.
TEST_F(Verbs, CmdFdIsADescriptorAndImportIsNotOffered) {
    ASSERT_GE(ctx_->cmd_fd, 0);
    EXPECT_GE(::fcntl(ctx_->cmd_fd, F_GETFD), 0) << std::strerror(errno);
    struct stat st {};
    ASSERT_EQ(::fstat(ctx_->cmd_fd, &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    struct stat null {};
    ASSERT_EQ(::stat("/dev/null", &null), 0);
    EXPECT_EQ(st.st_rdev, null.st_rdev) << "no driver is reached through it";
    const int dup = ::dup(ctx_->cmd_fd);
    ASSERT_GE(dup, 0);
    errno = 0;
    EXPECT_EQ(ibv_import_device(dup), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_import_pd(ctx_, pd_->handle), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_import_mr(pd_, 1), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(::close(dup), 0);

    // Each context has its own, and closing the context closes it.
    ibv_context* other = ibv_open_device(dev_);
    ASSERT_NE(other, nullptr);
    ASSERT_GE(other->cmd_fd, 0);
    EXPECT_NE(other->cmd_fd, ctx_->cmd_fd);
    const int fd = other->cmd_fd;
    ASSERT_EQ(ibv_close_device(other), 0);
    EXPECT_EQ(::fcntl(fd, F_GETFD), -1);
    EXPECT_EQ(errno, EBADF);
}

// Flow steering is not offered: ibv_create_flow fails with EOPNOTSUPP (what the kernel's rxe and
// siw return, and what rdma-core's tests skip on), never EINVAL or a crash.
TEST_F(Verbs, FlowSteeringIsNotOffered) {
    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    ibv_flow_attr fa{};
    fa.type = IBV_FLOW_ATTR_NORMAL;
    fa.size = sizeof fa;
    fa.port = 1;
    errno = 0;
    EXPECT_EQ(ibv_create_flow(qp, &fa), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// ---- queue pairs ---------------------------------------------------------------------

TEST_F(Verbs, QueuePairCreateReportsCapsAndRefusesBadOnes) {
    ibv_cq* cq = make_cq();
    ibv_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap = {100, 50, 3, 2, 100};
    ibv_qp* qp = ibv_create_qp(pd_, &a);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    EXPECT_GE(a.cap.max_send_wr, 100u);
    EXPECT_GE(a.cap.max_recv_wr, 50u);
    EXPECT_GE(a.cap.max_send_sge, 3u);
    EXPECT_GE(a.cap.max_recv_sge, 2u);
    EXPECT_GE(a.cap.max_inline_data, 100u);
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_GT(qp->qp_num, 1u);
    EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
    EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);  // the QP uses it
    EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
    EXPECT_EQ(ibv_qp_to_qp_ex(qp), nullptr);  // not created for the ibv_wr_* API
    EXPECT_EQ(ibv_attach_mcast(qp, &gid_, 0), EOPNOTSUPP);

    struct Bad {
        const char* what;
        ibv_qp_init_attr attr;
    };
    const auto base = [&] { return plain_qp_attr(cq, IBV_QPT_RC); };
    std::vector<Bad> bad;
    // A QP may have an empty send or receive queue (one-sided use), as on real NICs.
    for (const auto& [send, recv] : {std::pair{0u, 4u}, std::pair{4u, 0u}}) {
        ibv_qp_init_attr z = base();
        z.cap.max_send_wr = send;
        z.cap.max_recv_wr = recv;
        ibv_qp* one_sided = ibv_create_qp(pd_, &z);
        ASSERT_NE(one_sided, nullptr) << send << "/" << recv << ": " << std::strerror(errno);
        EXPECT_EQ(ibv_destroy_qp(one_sided), 0);
    }
    bad.push_back({"max_send_wr over the limit", base()});
    bad.back().attr.cap.max_send_wr = static_cast<std::uint32_t>(dattr_.max_qp_wr) + 1;
    bad.push_back({"max_send_sge over the limit", base()});
    bad.back().attr.cap.max_send_sge = static_cast<std::uint32_t>(dattr_.max_sge) + 1;
    bad.push_back({"max_inline_data over the limit", base()});
    bad.back().attr.cap.max_inline_data = 100000;
    bad.push_back({"not a QP type", base()});
    bad.back().attr.qp_type = static_cast<ibv_qp_type>(5);
    bad.push_back({"no send CQ", base()});
    bad.back().attr.send_cq = nullptr;
    for (Bad& b : bad) {
        errno = 0;
        EXPECT_EQ(ibv_create_qp(pd_, &b.attr), nullptr) << b.what;
        EXPECT_EQ(errno, EINVAL) << b.what;
    }
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// A QP type verbs defines but snic runs no engine for is refused when it is created, with
// EOPNOTSUPP (as the Linux soft-RoCE and soft-iWARP drivers refuse them, and rdma-core's tests
// skip on), never later; so is an ibv_wr_* operation the QP's type has not.
TEST_F(Verbs, QpTypesWithoutAnEngineAreRefusedAtCreationWithEopnotsupp) {
    ibv_cq* cq = make_cq();
    const auto attr = [&](ibv_qp_type type) {
        ibv_qp_init_attr_ex a{};
        a.send_cq = cq;
        a.recv_cq = cq;
        a.qp_type = type;
        a.cap = {4, 4, 1, 1, 0};
        a.comp_mask = IBV_QP_INIT_ATTR_PD;
        a.pd = pd_;
        return a;
    };
    for (ibv_qp_type type :
         {IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, IBV_QPT_DRIVER}) {
        ibv_qp_init_attr a = plain_qp_attr(cq, type);
        errno = 0;
        EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr) << type;
        EXPECT_EQ(errno, EOPNOTSUPP) << type;
        ibv_qp_init_attr_ex x = attr(type);
        errno = 0;
        EXPECT_EQ(ibv_create_qp_ex(ctx_, &x), nullptr) << type;
        EXPECT_EQ(errno, EOPNOTSUPP) << type;
    }
    // An XRC receive QP as rdma-core makes it: an XRC domain, no PD.
    ibv_qp_init_attr_ex xrc = attr(IBV_QPT_XRC_RECV);
    xrc.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    xrc.pd = nullptr;
    errno = 0;
    EXPECT_EQ(ibv_create_qp_ex(ctx_, &xrc), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    // ibv_wr_* operations a type has not.
    struct Ops {
        ibv_qp_type type;
        std::uint64_t ops;
    };
    for (const Ops& o : {Ops{IBV_QPT_UC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ},
                         Ops{IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD},
                         Ops{IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV},
                         Ops{IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE}}) {
        ibv_qp_init_attr_ex x = attr(o.type);
        x.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        x.send_ops_flags = o.ops;
        errno = 0;
        EXPECT_EQ(ibv_create_qp_ex(ctx_, &x), nullptr) << o.type << " " << o.ops;
        EXPECT_EQ(errno, EOPNOTSUPP) << o.type << " " << o.ops;
    }
    // What runs is created: RC, UC and UD on a RoCE device, UC with what UC has.
    ibv_qp_init_attr_ex uc = attr(IBV_QPT_UC);
    uc.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    uc.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                        IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    ibv_qp* q = ibv_create_qp_ex(ctx_, &uc);
    ASSERT_NE(q, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_destroy_qp(q), 0);
    for (ibv_qp_type type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD}) {
        ibv_qp* qp = make_qp(cq, 4, 4, nullptr, type);
        ASSERT_NE(qp, nullptr) << type;
        EXPECT_EQ(ibv_destroy_qp(qp), 0);
    }
    EXPECT_EQ(ibv_destroy_cq(cq), 0);

    // An iWARP device runs RC only: UC and UD are refused when created, not at RTR.
    ibv_device* iw = nullptr;
    for (int i = 0; list_[i] != nullptr && iw == nullptr; ++i)
        if (list_[i]->transport_type == IBV_TRANSPORT_IWARP) iw = list_[i];
    if (iw == nullptr) return;
    ibv_context* ctx = ibv_open_device(iw);
    ASSERT_NE(ctx, nullptr) << std::strerror(errno);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    ibv_cq* icq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ASSERT_TRUE(pd != nullptr && icq != nullptr) << std::strerror(errno);
    for (ibv_qp_type type : {IBV_QPT_UC, IBV_QPT_UD, IBV_QPT_RC}) {
        ibv_qp_init_attr a = plain_qp_attr(icq, type);
        errno = 0;
        ibv_qp* qp = ibv_create_qp(pd, &a);
        if (type == IBV_QPT_RC) {
            ASSERT_NE(qp, nullptr) << std::strerror(errno);
            EXPECT_EQ(ibv_destroy_qp(qp), 0);
        } else {
            EXPECT_EQ(qp, nullptr) << type;
            EXPECT_EQ(errno, EOPNOTSUPP) << type;
        }
    }
    EXPECT_EQ(ibv_destroy_cq(icq), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
}

// A UC QP connected to itself through its port's loopback: a SEND of several packets and an
// RDMA WRITE with immediate land whole; each send WR completes; READ is no UC operation.
TEST_F(Verbs, UcQpMovesSendsAndWritesWithImmediate) {
    ibv_cq* cq = make_cq(64);
    ibv_qp* qp = make_qp(cq, 16, 16, nullptr, IBV_QPT_UC);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = init_attr();
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    a = rtr_attr(qp->qp_num);
    ASSERT_EQ(
        ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN),
        0);
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0x1234;  // the PSN its own receive side expects
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);

    constexpr std::size_t kLen = 5000;  // several packets at any path MTU
    std::vector<std::uint8_t> src(kLen), dst(kLen), target(kLen);
    for (std::size_t i = 0; i < kLen; ++i) src[i] = static_cast<std::uint8_t>(i * 7 + 1);
    ibv_mr* smr = ibv_reg_mr(pd_, src.data(), kLen, IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* dmr = ibv_reg_mr(pd_, dst.data(), kLen, IBV_ACCESS_LOCAL_WRITE);
    ibv_mr* tmr =
        ibv_reg_mr(pd_, target.data(), kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_TRUE(smr != nullptr && dmr != nullptr && tmr != nullptr) << std::strerror(errno);

    ibv_sge rsge{reinterpret_cast<std::uintptr_t>(dst.data()), kLen, dmr->lkey};
    ibv_recv_wr rwr{};
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    for (std::uint64_t id : {10, 11}) {
        rwr.wr_id = id;
        ASSERT_EQ(ibv_post_recv(qp, &rwr, &rbad), 0);
    }
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(src.data()), kLen, smr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    wr.wr_id = 2;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.imm_data = htonl(0xc0ffee);
    wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(target.data());
    wr.wr.rdma.rkey = tmr->rkey;
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    wr.wr_id = 3;
    wr.opcode = IBV_WR_RDMA_READ;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);  // UC has no READ

    std::vector<ibv_wc> wcs;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (wcs.size() < 4 && std::chrono::steady_clock::now() < give_up) {
        ibv_wc wc{};
        if (ibv_poll_cq(cq, 1, &wc) == 1) wcs.push_back(wc);
    }
    ASSERT_EQ(wcs.size(), 4u);
    int sends = 0;
    for (const ibv_wc& wc : wcs) {
        EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        if (wc.opcode == IBV_WC_RECV) {
            EXPECT_EQ(wc.wr_id, 10u);
            EXPECT_EQ(wc.byte_len, kLen);
        } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            EXPECT_EQ(wc.wr_id, 11u);
            EXPECT_EQ(wc.byte_len, kLen);
            EXPECT_TRUE(wc.wc_flags & IBV_WC_WITH_IMM);
            EXPECT_EQ(ntohl(wc.imm_data), 0xc0ffeeu);
        } else {
            ++sends;
        }
    }
    EXPECT_EQ(sends, 2);
    EXPECT_EQ(dst, src);
    EXPECT_EQ(target, src);
    EXPECT_EQ(state_of(qp), IBV_QPS_RTS);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    for (ibv_mr* mr : {smr, dmr, tmr}) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, QueuePairStateMachine) {
    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);

    // RESET: transitions other than to INIT (and RESET/ERR), and INIT with missing or bad bits.
    {
        ibv_qp_attr a = rts_attr();
        expect_refused(qp, a, kRtsMask, IBV_QPS_RESET, "RESET->RTS");
        a = rtr_attr(qp->qp_num);
        expect_refused(qp, a, kRtrMask, IBV_QPS_RESET, "RESET->RTR");
        a = init_attr();
        expect_refused(qp, a, kInitMask & ~IBV_QP_PORT, IBV_QPS_RESET, "INIT without PORT");
        expect_refused(qp, a, kInitMask & ~IBV_QP_PKEY_INDEX, IBV_QPS_RESET, "INIT without PKEY");
        expect_refused(qp, a, kInitMask | IBV_QP_SQ_PSN, IBV_QPS_RESET, "INIT with SQ_PSN");
        a.port_num = 2;
        expect_refused(qp, a, kInitMask, IBV_QPS_RESET, "port_num 2");
        a = init_attr();
        a.pkey_index = 1;
        expect_refused(qp, a, kInitMask, IBV_QPS_RESET, "pkey_index 1");
        a = init_attr();
        ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
        EXPECT_EQ(qp->state, IBV_QPS_INIT);
        EXPECT_EQ(state_of(qp), IBV_QPS_INIT);
    }
    // INIT -> RTR.
    {
        ibv_qp_attr a = rts_attr();
        expect_refused(qp, a, kRtsMask, IBV_QPS_INIT, "INIT->RTS");
        a = rtr_attr(qp->qp_num);
        expect_refused(qp, a, kRtrMask & ~IBV_QP_DEST_QPN, IBV_QPS_INIT, "RTR without DEST_QPN");
        expect_refused(qp, a, kRtrMask & ~IBV_QP_AV, IBV_QPS_INIT, "RTR without AV");
        a.path_mtu = static_cast<ibv_mtu>(IBV_MTU_4096 + 1);
        expect_refused(qp, a, kRtrMask, IBV_QPS_INIT, "path_mtu not an ibv_mtu");
        a = rtr_attr(qp->qp_num);
        a.max_dest_rd_atomic = static_cast<std::uint8_t>(dattr_.max_qp_rd_atom + 1);
        expect_refused(qp, a, kRtrMask, IBV_QPS_INIT, "max_dest_rd_atomic over the limit");
        a = rtr_attr(qp->qp_num);
        std::memset(a.ah_attr.grh.dgid.raw, 0, 16);
        a.ah_attr.grh.dgid.raw[0] = 0xfe;
        a.ah_attr.grh.dgid.raw[1] = 0x80;
        a.ah_attr.grh.dgid.raw[15] = 1;
        expect_refused(qp, a, kRtrMask, IBV_QPS_INIT, "GID not IPv4-mapped");
        a = rtr_attr(qp->qp_num);
        a.ah_attr.grh.sgid_index = 1;
        expect_refused(qp, a, kRtrMask, IBV_QPS_INIT, "sgid_index 1");
        a = rtr_attr(qp->qp_num);
        a.ah_attr.port_num = 2;
        expect_refused(qp, a, kRtrMask, IBV_QPS_INIT, "AV port_num 2");
        // The path MTU is clamped to the port's, the flow label masked to its 20 bits (UCX
        // sets all ones), as Linux does.
        a = rtr_attr(qp->qp_num);
        a.path_mtu = IBV_MTU_4096;
        a.ah_attr.grh.flow_label = 0xffffffff;
        ASSERT_EQ(ibv_modify_qp(qp, &a, kRtrMask), 0) << std::strerror(errno);
        EXPECT_EQ(state_of(qp), IBV_QPS_RTR);
        ibv_qp_attr got{};
        ibv_qp_init_attr init{};
        ASSERT_EQ(ibv_query_qp(qp, &got, IBV_QP_PATH_MTU | IBV_QP_AV, &init), 0);
        EXPECT_EQ(got.path_mtu, std::min(IBV_MTU_4096, pattr_.active_mtu));
        EXPECT_EQ(got.ah_attr.grh.flow_label, 0xfffffu);
    }
    // RTR -> RTS.
    {
        ibv_qp_attr a = rts_attr();
        expect_refused(qp, a, kRtsMask & ~IBV_QP_SQ_PSN, IBV_QPS_RTR, "RTS without SQ_PSN");
        a.max_rd_atomic = static_cast<std::uint8_t>(dattr_.max_qp_init_rd_atom + 1);
        expect_refused(qp, a, kRtsMask, IBV_QPS_RTR, "max_rd_atomic over the limit");
        a = init_attr();
        expect_refused(qp, a, kInitMask, IBV_QPS_RTR, "RTR->INIT");
        a = rts_attr();
        ASSERT_EQ(ibv_modify_qp(qp, &a, kRtsMask), 0);
        EXPECT_EQ(qp->state, IBV_QPS_RTS);
    }
    // What the QP holds now.
    {
        ibv_qp_attr a{};
        ibv_qp_init_attr ia{};
        ASSERT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU, &ia), 0);
        EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
        EXPECT_EQ(a.dest_qp_num, qp->qp_num);
        EXPECT_EQ(a.path_mtu, pattr_.active_mtu);
        EXPECT_EQ(a.sq_psn, 0x4321u);
        EXPECT_EQ(a.rq_psn, 0x1234u);
        EXPECT_EQ(a.port_num, 1);
        EXPECT_EQ(a.ah_attr.is_global, 1);
        EXPECT_EQ(std::memcmp(a.ah_attr.grh.dgid.raw, gid_.raw, 16), 0);
        EXPECT_EQ(ia.send_cq, cq);
        EXPECT_EQ(ia.qp_type, IBV_QPT_RC);
        EXPECT_GE(ia.cap.max_send_wr, 16u);
    }
    // RTS -> ERR -> RESET -> INIT.
    {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
        EXPECT_EQ(state_of(qp), IBV_QPS_ERR);
        a.qp_state = IBV_QPS_RESET;
        ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
        EXPECT_EQ(state_of(qp), IBV_QPS_RESET);
        a = init_attr();
        ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    }
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, PostValidation) {
    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq, 8, 8);
    ASSERT_NE(qp, nullptr);
    std::vector<char> buf(8192);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 64, mr->lkey};

    ibv_send_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    ibv_send_wr* bad = nullptr;
    // RESET: nothing may be posted.
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
    EXPECT_EQ(bad, &wr);
    ibv_recv_wr rwr{};
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    ibv_recv_wr* rbad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp, &rwr, &rbad), EINVAL);
    EXPECT_EQ(rbad, &rwr);

    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    // INIT: receives yes, sends no.
    EXPECT_EQ(ibv_post_recv(qp, &rwr, &rbad), 0);
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
    ASSERT_EQ(vt::connect_from_init(qp, address(), qp->qp_num, address(), kRc).err, 0);

    // Too many SGEs in the second WR of a chain: the first is posted, bad_wr names the second.
    ibv_sge many[8];
    for (ibv_sge& s : many) s = sge;
    ibv_send_wr second = wr;
    second.wr_id = 2;
    second.sg_list = many;
    second.num_sge = 8;
    ibv_send_wr first = wr;
    first.next = &second;
    EXPECT_EQ(ibv_post_send(qp, &first, &bad), EINVAL);
    EXPECT_EQ(bad, &second);
    rwr.sg_list = many;
    rwr.num_sge = 8;
    EXPECT_EQ(ibv_post_recv(qp, &rwr, &rbad), EINVAL);
    EXPECT_EQ(rbad, &rwr);

    // Inline data longer than the QP takes; an invalid opcode; an atomic of 4 bytes.
    ibv_sge big{reinterpret_cast<std::uintptr_t>(buf.data()), 4096, mr->lkey};
    ibv_send_wr w = wr;
    w.sg_list = &big;
    w.send_flags = IBV_SEND_INLINE;
    EXPECT_EQ(ibv_post_send(qp, &w, &bad), EINVAL);
    w = wr;
    w.opcode = static_cast<ibv_wr_opcode>(77);
    EXPECT_EQ(ibv_post_send(qp, &w, &bad), EINVAL);
    ibv_sge four{reinterpret_cast<std::uintptr_t>(buf.data()), 4, mr->lkey};
    w = wr;
    w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    w.sg_list = &four;
    EXPECT_EQ(ibv_post_send(qp, &w, &bad), EINVAL);
    EXPECT_EQ(bad, &w);

    // Inline data that fits, then fill the send queue: ENOMEM once it is full.
    w = wr;
    w.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    int posted = 0, err = 0;
    for (int i = 0; i < 64 && err == 0; ++i) {
        err = ibv_post_send(qp, &w, &bad);
        if (err == 0) ++posted;
    }
    EXPECT_EQ(err, ENOMEM);
    EXPECT_EQ(bad, &w);
    EXPECT_GE(posted, 7);  // the one of the chain above went in too

    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, WorkRequestApi) {
    ibv_cq* cq = make_cq();
    ibv_qp_init_attr_ex a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap = {8, 8, 2, 2, 64};
    a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    a.pd = pd_;
    a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ |
                       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_IMM;
    ibv_qp* qp = ibv_create_qp_ex(ctx_, &a);
    ASSERT_NE(qp, nullptr) << std::strerror(errno);
    EXPECT_EQ(a.cap.max_send_wr, 8u);
    ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(&x->qp_base, qp);

    std::vector<char> buf(4096);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    const auto addr = reinterpret_cast<std::uintptr_t>(buf.data());

    // Not in RTS yet: the batch is refused.
    ibv_wr_start(x);
    x->wr_id = 1;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, mr->lkey, addr, 16);
    EXPECT_EQ(ibv_wr_complete(x), EINVAL);
    to_rts(qp);
    // Send queue drained (SQD): posts are accepted but snicd starts none of them, so the ring's
    // free slots below do not depend on how fast the daemon takes WQEs.
    ibv_qp_attr sqd{};
    sqd.qp_state = IBV_QPS_SQD;
    ASSERT_EQ(ibv_modify_qp(qp, &sqd, IBV_QP_STATE), 0);

    // A valid batch of four.
    ibv_wr_start(x);
    x->wr_id = 10;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(x);
    ibv_wr_set_sge(x, mr->lkey, addr, 16);
    x->wr_id = 11;
    ibv_wr_rdma_write(x, mr->rkey, addr + 1024);
    char msg[] = "inline payload";
    ibv_wr_set_inline_data(x, msg, sizeof msg);
    x->wr_id = 12;
    ibv_wr_rdma_read(x, mr->rkey, addr + 2048);
    const ibv_sge list[2] = {{addr, 8, mr->lkey}, {addr + 8, 8, mr->lkey}};
    ibv_wr_set_sge_list(x, 2, list);
    x->wr_id = 13;
    ibv_wr_atomic_fetch_add(x, mr->rkey, addr + 3072, 1);
    ibv_wr_set_sge(x, mr->lkey, addr + 64, 8);
    EXPECT_EQ(ibv_wr_complete(x), 0);

    // Errors are reported by wr_complete, and nothing of the batch is posted.
    ibv_wr_start(x);
    ibv_wr_atomic_fetch_add(x, mr->rkey, addr, 1);
    ibv_wr_set_sge(x, mr->lkey, addr, 4);  // atomics take 8 bytes
    EXPECT_EQ(ibv_wr_complete(x), EINVAL);
    ibv_wr_start(x);
    ibv_wr_local_inv(x, mr->rkey);  // not among the QP's send_ops_flags
    EXPECT_EQ(ibv_wr_complete(x), EINVAL);
    ibv_wr_start(x);
    ibv_wr_send(x);
    std::vector<char> large(4096);
    ibv_wr_set_inline_data(x, large.data(), large.size());
    EXPECT_EQ(ibv_wr_complete(x), EINVAL);
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_abort(x);

    // All or nothing: 4 slots are left; a batch of 5 fails, then 4 fit, then none.
    const auto batch = [&](int n) {
        ibv_wr_start(x);
        for (int i = 0; i < n; ++i) {
            x->wr_id = 100 + static_cast<std::uint64_t>(i);
            ibv_wr_send_imm(x, htonl(7));
            ibv_wr_set_sge(x, mr->lkey, addr, 32);
        }
        return ibv_wr_complete(x);
    };
    EXPECT_EQ(batch(5), ENOMEM);
    EXPECT_EQ(batch(4), 0);
    EXPECT_EQ(batch(1), ENOMEM);

    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);

    // Operations snic does not offer.
    a.send_ops_flags = IBV_QP_EX_WITH_TSO;
    EXPECT_EQ(ibv_create_qp_ex(ctx_, &a), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(Verbs, ConcurrentPostersShareEachRing) {
    // Four threads post to the same receive queue, then the same send queue, one WR at a
    // time until it is full, and no WR is lost or taken twice: every one posted completes
    // exactly once when the QP is moved to the error state.
    ibv_cq* cq = make_cq(4096);
    ibv_qp* qp = make_qp(cq, 512, 512);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr qa{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(qp, &qa, IBV_QP_CAP, &ia), 0);
    std::vector<char> buf(4096);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 64, mr->lkey};

    constexpr int kThreads = 4;
    const auto fill = [&](bool send) {
        std::vector<int> posted(kThreads, 0), last_err(kThreads, 0);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&, t] {
                for (;;) {
                    int err;
                    if (send) {
                        ibv_send_wr wr{}, *bad = nullptr;
                        wr.wr_id = 100 + static_cast<std::uint64_t>(t);
                        wr.sg_list = &sge;
                        wr.num_sge = 1;
                        wr.opcode = IBV_WR_SEND;
                        err = ibv_post_send(qp, &wr, &bad);
                    } else {
                        ibv_recv_wr wr{}, *bad = nullptr;
                        wr.wr_id = static_cast<std::uint64_t>(t);
                        wr.sg_list = &sge;
                        wr.num_sge = 1;
                        err = ibv_post_recv(qp, &wr, &bad);
                    }
                    if (err != 0) {
                        last_err[t] = err;
                        return;
                    }
                    ++posted[t];
                }
            });
        }
        for (auto& th : threads) th.join();
        for (int t = 0; t < kThreads; ++t) EXPECT_EQ(last_err[t], ENOMEM);
        return posted;
    };

    // Receives while the QP is in INIT: nothing consumes them, so they fill it exactly.
    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    const std::vector<int> recvs = fill(false);
    int recv_total = 0;
    for (int n : recvs) recv_total += n;
    EXPECT_EQ(recv_total, static_cast<int>(qa.cap.max_recv_wr));

    // Sends towards a peer that does not exist (an unused address of the port's subnet):
    // the transport takes some of them in, none is delivered.
    vt::PortAddress nobody = address();
    nobody.gid.raw[15] = static_cast<std::uint8_t>(nobody.gid.raw[15] ^ 0x80);
    ASSERT_EQ(vt::connect_from_init(qp, address(), 0x123, nobody, kRc).err, 0);
    const std::vector<int> sends = fill(true);
    int send_total = 0;
    for (int n : sends) send_total += n;
    EXPECT_GE(send_total, static_cast<int>(qa.cap.max_send_wr));

    a = {};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    std::vector<int> seen(200, 0);
    int completions = 0;
    for (int spins = 0; completions < recv_total + send_total && spins < 1000000; ++spins) {
        ibv_wc wc[64];
        const int n = ibv_poll_cq(cq, 64, wc);
        ASSERT_GE(n, 0);
        for (int i = 0; i < n; ++i) {
            ASSERT_LT(wc[i].wr_id, seen.size());
            ++seen[wc[i].wr_id];
        }
        completions += n;
    }
    for (int t = 0; t < kThreads; ++t) {
        EXPECT_EQ(seen[static_cast<std::size_t>(t)], recvs[static_cast<std::size_t>(t)]) << t;
        EXPECT_EQ(seen[100 + static_cast<std::size_t>(t)], sends[static_cast<std::size_t>(t)]) << t;
    }
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// A queue reports the WRs it takes, no more and no fewer (rdma-core's own tests fill a receive
// queue to the reported max_recv_wr and expect ENOMEM at the next post): asking for 100 gives
// rings of 128, a CQ of 127, as rxe rounds them.
TEST_F(Verbs, QueuesTakeExactlyTheWorkRequestsTheyReport) {
    ibv_cq* cq = make_cq(100);
    ASSERT_NE(cq, nullptr);
    EXPECT_EQ(cq->cqe, 127);
    ibv_qp* qp = make_qp(cq, 100, 100);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr qa{};
    ibv_qp_init_attr ia{};
    ASSERT_EQ(ibv_query_qp(qp, &qa, IBV_QP_CAP, &ia), 0);
    EXPECT_EQ(qa.cap.max_send_wr, 128u);
    EXPECT_EQ(qa.cap.max_recv_wr, 128u);
    EXPECT_EQ(ia.cap.max_recv_wr, 128u);

    std::vector<char> buf(4096);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 64, mr->lkey};
    // Receives in INIT: nothing takes them, so they fill the queue.
    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    const auto post_recvs = [&](auto post) {
        std::uint32_t n = 0;
        for (; n <= 1000; ++n) {
            ibv_recv_wr wr{}, *bad = nullptr;
            wr.wr_id = n;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            const int err = post(&wr, &bad);
            if (err != 0) {
                EXPECT_EQ(err, ENOMEM);
                break;
            }
        }
        return n;
    };
    EXPECT_EQ(
        post_recvs([&](ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); }),
        qa.cap.max_recv_wr);

    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 100;
    sa.attr.max_sge = 1;
    ibv_srq* srq = ibv_create_srq(pd_, &sa);
    ASSERT_NE(srq, nullptr) << std::strerror(errno);
    EXPECT_EQ(sa.attr.max_wr, 128u);
    EXPECT_EQ(post_recvs([&](ibv_recv_wr* wr, ibv_recv_wr** bad) {
                  return ibv_post_srq_recv(srq, wr, bad);
              }),
              sa.attr.max_wr);

    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// ---- shared receive queues ------------------------------------------------------------

TEST_F(Verbs, SharedReceiveQueue) {
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 100;
    sa.attr.max_sge = 2;
    ibv_srq* srq = ibv_create_srq(pd_, &sa);
    ASSERT_NE(srq, nullptr) << std::strerror(errno);
    EXPECT_GE(sa.attr.max_wr, 100u);
    EXPECT_GE(sa.attr.max_sge, 2u);
    std::uint32_t srq_num = 0;
    EXPECT_EQ(ibv_get_srq_num(srq, &srq_num), 0);
    EXPECT_NE(srq_num, 0u);

    ibv_srq_attr q{};
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_GE(q.max_wr, 100u);
    EXPECT_EQ(q.srq_limit, 0u);
    ibv_srq_attr m{};
    m.srq_limit = 10;
    ASSERT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT), 0);
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.srq_limit, 10u);
    m.srq_limit = 100000;  // above max_wr
    EXPECT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT), EINVAL);
    m.max_wr = 200;  // a resize (IBV_DEVICE_SRQ_RESIZE), to a ring of 256
    EXPECT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR), 0);
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 256u);
    EXPECT_EQ(q.srq_limit, 10u);
    m.max_wr = 5;  // below the armed limit
    EXPECT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR), EINVAL);
    m.max_wr = 0;
    EXPECT_EQ(ibv_modify_srq(srq, &m, IBV_SRQ_MAX_WR), EINVAL);
    ASSERT_EQ(ibv_query_srq(srq, &q), 0);
    EXPECT_EQ(q.max_wr, 256u);

    std::vector<char> buf(4096);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sges[3];
    for (ibv_sge& s : sges) s = {reinterpret_cast<std::uintptr_t>(buf.data()), 64, mr->lkey};
    ibv_recv_wr r{};
    r.sg_list = sges;
    r.num_sge = 2;
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_srq_recv(srq, &r, &bad), 0);
    r.num_sge = 3;
    EXPECT_EQ(ibv_post_srq_recv(srq, &r, &bad), EINVAL);
    EXPECT_EQ(bad, &r);

    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq, 4, 0, srq);
    ASSERT_NE(qp, nullptr);
    r.num_sge = 1;
    ibv_qp_attr ia = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &ia, kInitMask), 0);
    EXPECT_EQ(ibv_post_recv(qp, &r, &bad), EINVAL);  // the QP's receives go to the SRQ
    EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);

    sa.attr.max_wr = static_cast<std::uint32_t>(dattr_.max_srq_wr) + 1;
    EXPECT_EQ(ibv_create_srq(pd_, &sa), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

// ---- memory windows, address handles, busy objects ----------------------------------------

TEST_F(Verbs, MemoryWindows) {
    ibv_mw* mw1 = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
    ASSERT_NE(mw1, nullptr) << std::strerror(errno);
    ibv_mw* mw2 = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
    ASSERT_NE(mw2, nullptr) << std::strerror(errno);
    EXPECT_EQ(mw1->type, IBV_MW_TYPE_1);
    EXPECT_EQ(mw2->type, IBV_MW_TYPE_2);
    EXPECT_NE(mw1->rkey, mw2->rkey);
    EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(3)), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);  // windows in it

    // Binding: type 1 through ibv_bind_mw, type 2 through a bind WR.
    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    to_rts(qp);
    std::vector<char> buf(8192);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(),
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(mr, nullptr);
    ibv_mr* plain = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(plain, nullptr);
    ibv_mw_bind bind{};
    bind.wr_id = 5;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_info = {mr, reinterpret_cast<std::uintptr_t>(buf.data()), 4096,
                      IBV_ACCESS_REMOTE_READ};
    const std::uint32_t old_rkey = mw1->rkey;
    EXPECT_EQ(ibv_bind_mw(qp, mw1, &bind), 0);
    EXPECT_EQ(mw1->rkey, ibv_inc_rkey(old_rkey));
    bind.bind_info.mr = plain;  // no MW_BIND access
    EXPECT_EQ(ibv_bind_mw(qp, mw1, &bind), EINVAL);
    bind.bind_info.mr = mr;
    bind.bind_info.length = 1 << 20;  // beyond the MR
    EXPECT_EQ(ibv_bind_mw(qp, mw1, &bind), EINVAL);
    EXPECT_EQ(ibv_bind_mw(qp, mw2, &bind), EINVAL);  // type 2 binds are work requests

    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw2;
    wr.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
    wr.bind_mw.bind_info = {mr, reinterpret_cast<std::uintptr_t>(buf.data()), 4096,
                            IBV_ACCESS_REMOTE_READ};
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    wr.bind_mw.mw = mw1;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);

    // Both binds take effect (the QP sends to itself): the region is busy while windows are
    // bound to it, and free again once they are gone.
    ibv_wc wc{};
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ibv_poll_cq(cq, 1, &wc) == 0 && std::chrono::steady_clock::now() < until) {
    }
    EXPECT_EQ(wc.wr_id, 5u);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    EXPECT_EQ(ibv_dereg_mr(mr), EBUSY);

    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_dereg_mr(plain), 0);
    EXPECT_EQ(ibv_dealloc_mw(mw1), 0);
    EXPECT_EQ(ibv_dealloc_mw(mw2), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(Verbs, AddressHandles) {
    ibv_ah_attr a{};
    a.is_global = 1;
    a.grh.dgid = gid_;
    a.grh.hop_limit = 64;
    a.port_num = 1;
    ibv_ah* ah = ibv_create_ah(pd_, &a);
    ASSERT_NE(ah, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_destroy_ah(ah), 0);
    a.is_global = 0;  // RoCE needs a GRH
    EXPECT_EQ(ibv_create_ah(pd_, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);

    // A receive completion with a RoCEv2 (IPv4) header, as seen by a UD QP.
    ibv_wc wc{};
    wc.wc_flags = IBV_WC_GRH;
    std::uint8_t grh[40] = {};
    grh[20] = 0x45;
    const std::uint8_t peer[4] = {198, 18, 9, 9};
    std::memcpy(grh + 32, peer, 4);
    std::memcpy(grh + 36, gid_.raw + 12, 4);
    ibv_ah_attr from{};
    ASSERT_EQ(ibv_init_ah_from_wc(ctx_, 1, &wc, reinterpret_cast<ibv_grh*>(grh), &from), 0);
    EXPECT_EQ(from.is_global, 1);
    EXPECT_EQ(std::memcmp(from.grh.dgid.raw + 12, peer, 4), 0);
    ah = ibv_create_ah_from_wc(pd_, &wc, reinterpret_cast<ibv_grh*>(grh), 1);
    ASSERT_NE(ah, nullptr) << std::strerror(errno);
    EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(Verbs, BusyObjectsAreNotDestroyed) {
    std::vector<char> buf(4096);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);

    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(ibv_destroy_cq(cq), EBUSY);
    EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, CloseReleasesWhatTheContextStillHolds) {
    // Objects left behind are released with the context (daemon side by the socket closing).
    ibv_context* c = ibv_open_device(dev_);
    ASSERT_NE(c, nullptr);
    ibv_pd* pd = ibv_alloc_pd(c);
    ASSERT_NE(pd, nullptr);
    std::vector<char> buf(8192);
    ASSERT_NE(ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
    ibv_cq* cq = ibv_create_cq(c, 8, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap = {4, 4, 1, 1, 0};
    ASSERT_NE(ibv_create_qp(pd, &a), nullptr);
    EXPECT_EQ(ibv_close_device(c), 0);
}

// ---- completions and events: a QP entering the error state flushes its queues ----

// Waits (bounded) until `fd` is readable: events are delivered, not slept for.
bool readable(int fd, int timeout_ms = 5000) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN) != 0;
}

TEST_F(Verbs, ErrorStateFlushesEveryPostedWqeInOrderAndWakesTheChannel) {
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
    ASSERT_NE(ch, nullptr);
    ibv_cq* cq = ibv_create_cq(ctx_, 32, this, ch, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    to_rts(qp);
    std::vector<char> buf(4096);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 64, mr->lkey};
    for (std::uint64_t i = 0; i < 3; ++i) {
        ibv_recv_wr rwr{};
        rwr.wr_id = 100 + i;
        rwr.sg_list = &sge;
        rwr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad), 0);
    }
    for (std::uint64_t i = 0; i < 2; ++i) {
        ibv_send_wr swr{};
        swr.wr_id = 200 + i;
        swr.sg_list = &sge;
        swr.num_sge = 1;
        swr.opcode = i == 0 ? IBV_WR_SEND : IBV_WR_RDMA_READ;
        swr.wr.rdma.remote_addr = 0x1000;
        swr.wr.rdma.rkey = 1;
        swr.send_flags = 0;  // unsignaled: an error completion is reported all the same
        ibv_send_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_send(qp, &swr, &bad), 0);
    }
    ASSERT_EQ(ibv_req_notify_cq(cq, 0), 0);

    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);

    ASSERT_TRUE(readable(ch->fd)) << "no completion event";
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, cq);
    EXPECT_EQ(ev_ctx, this);
    ibv_ack_cq_events(cq, 1);

    ibv_wc wc[8];
    const int n = ibv_poll_cq(cq, 8, wc);
    ASSERT_EQ(n, 5);
    const std::uint64_t want_id[5] = {200, 201, 100, 101, 102};
    const ibv_wc_opcode want_op[5] = {IBV_WC_SEND, IBV_WC_RDMA_READ, IBV_WC_RECV, IBV_WC_RECV,
                                      IBV_WC_RECV};
    for (int i = 0; i < n; ++i) {
        EXPECT_EQ(wc[i].wr_id, want_id[i]) << i;
        EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR) << i;
        EXPECT_EQ(wc[i].opcode, want_op[i]) << i;
        EXPECT_EQ(wc[i].qp_num, qp->qp_num) << i;
    }
    EXPECT_EQ(ibv_poll_cq(cq, 8, wc), 0);
    // The CQ was armed once: no second event without a new arm.
    EXPECT_FALSE(readable(ch->fd, 50));

    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Verbs, UnarmedCqGetsCompletionsButNoEvent) {
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
    ASSERT_NE(ch, nullptr);
    ibv_cq* cq = ibv_create_cq(ctx_, 8, nullptr, ch, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    ibv_recv_wr rwr{};
    rwr.wr_id = 7;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad), 0);
    a = {};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    ibv_wc wc{};
    ASSERT_EQ(ibv_poll_cq(cq, 1, &wc), 1);
    EXPECT_EQ(wc.wr_id, 7u);
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_FALSE(readable(ch->fd, 50));
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

// ibv_modify_qp reads only the fields its mask names: librdmacm's rshutdown passes an attribute
// whose other fields (enums among them) hold whatever its stack did. Sanitized (UBSan), loading
// such a field as its enum type was a finding; the call must neither read nor act on them.
TEST_F(Verbs, ModifyReadsOnlyTheFieldsItsMaskNames) {
    ibv_cq* cq = ibv_create_cq(ctx_, 8, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    std::memset(&a, 0xa5, sizeof a);  // no valid ibv_mtu, ibv_mig_state or cur_qp_state
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    EXPECT_EQ(state_of(qp), IBV_QPS_ERR);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, SolicitedOnlyArmIsWokenByAnErrorCompletion) {
    ibv_comp_channel* ch = ibv_create_comp_channel(ctx_);
    ASSERT_NE(ch, nullptr);
    ibv_cq* cq = ibv_create_cq(ctx_, 8, nullptr, ch, 0);
    ASSERT_NE(cq, nullptr);
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    ibv_recv_wr rwr{};
    rwr.wr_id = 9;
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad), 0);
    ASSERT_EQ(ibv_req_notify_cq(cq, 1), 0);
    a = {};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    ASSERT_TRUE(readable(ch->fd));
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, cq);
    ibv_ack_cq_events(cq, 1);
    ibv_wc wc{};
    EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 1);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
}

TEST_F(Verbs, SolicitedFlagOfAReceiveIsReportedOnlyOnACqThatAsks) {
    EXPECT_EQ(snic_cq_report_solicited(nullptr, 1), EINVAL);
    ibv_cq* cq = make_cq(32);
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    vt::RcParams self = kRc;
    self.sq_psn = self.rq_psn;  // connected to itself: it sends the PSNs it expects
    const vt::ModifyResult r = vt::connect_rc(qp, address(), qp->qp_num, address(), self);
    ASSERT_EQ(r.err, 0) << "to " << r.state;
    std::vector<std::uint8_t> buf(4 * 64);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr) << std::strerror(errno);
    // Two rounds of an unsolicited then a solicited SEND to the QP itself: the first round on
    // the CQ as verbs has it, the second once the CQ reports the flag.
    for (int round = 0; round < 2; ++round) {
        if (round == 1) {
            ASSERT_EQ(snic_cq_report_solicited(cq, 1), 0);
        }
        for (std::uint64_t i = 0; i < 2; ++i) {
            ibv_sge rsge{reinterpret_cast<std::uintptr_t>(buf.data() + i * 64), 64, mr->lkey};
            ibv_recv_wr rwr{};
            rwr.wr_id = 100 + i;
            rwr.sg_list = &rsge;
            rwr.num_sge = 1;
            ibv_recv_wr* rbad = nullptr;
            ASSERT_EQ(ibv_post_recv(qp, &rwr, &rbad), 0);
        }
        for (std::uint64_t i = 0; i < 2; ++i) {
            const char msg[8] = "hello";
            ibv_sge sge{reinterpret_cast<std::uintptr_t>(msg), sizeof msg, 0};
            ibv_send_wr wr{};
            wr.wr_id = i;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_SEND;
            wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE | (i == 1 ? IBV_SEND_SOLICITED : 0);
            ibv_send_wr* bad = nullptr;
            ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
        }
        int recvs = 0, sends = 0;
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (recvs + sends < 4 && std::chrono::steady_clock::now() < give_up) {
            ibv_wc wc{};
            if (ibv_poll_cq(cq, 1, &wc) != 1) continue;
            ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
            if (wc.opcode != IBV_WC_RECV) {
                EXPECT_EQ(wc.wc_flags, 0u) << "send " << wc.wr_id;
                ++sends;
                continue;
            }
            const bool solicited = wc.wr_id == 101;
            const unsigned int want = round == 1 && solicited ? SNIC_WC_SOLICITED : 0u;
            EXPECT_EQ(wc.wc_flags, want) << "round " << round << ", receive " << wc.wr_id;
            ++recvs;
        }
        ASSERT_EQ(recvs, 2);
        ASSERT_EQ(sends, 2);
    }
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, SrqQpEnteringErrorRaisesLastWqeReached) {
    ibv_cq* cq = make_cq();
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = 8;
    sa.attr.max_sge = 1;
    ibv_srq* srq = ibv_create_srq(pd_, &sa);
    ASSERT_NE(srq, nullptr);
    ibv_qp* qp = make_qp(cq, 16, 0, srq);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    a = {};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    ASSERT_TRUE(readable(ctx_->async_fd)) << "no async event";
    ibv_async_event ev{};
    ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    EXPECT_EQ(ev.element.qp, qp);
    ibv_ack_async_event(&ev);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, DrainingTheSendQueueRaisesSqDrainedWhenAsked) {
    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    to_rts(qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_SQD;
    a.en_sqd_async_notify = 1;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
    ASSERT_TRUE(readable(ctx_->async_fd)) << "no async event";
    ibv_async_event ev{};
    ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_SQ_DRAINED);
    EXPECT_EQ(ev.element.qp, qp);
    ibv_ack_async_event(&ev);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

// An engine that fails by itself (here: retries exhausted against a peer that is gone)
// completes the WR with RETRY_EXC_ERR and raises IBV_EVENT_QP_FATAL, as an RNIC does.
TEST_F(Verbs, RetriesExhaustedRaiseQpFatal) {
    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq);
    ibv_qp* gone = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    ASSERT_NE(gone, nullptr);
    const std::uint32_t dest = gone->qp_num;
    ASSERT_EQ(ibv_destroy_qp(gone), 0);  // nobody answers to `dest` any more
    vt::RcParams fast = kRc;
    fast.timeout = 1;  // 8 us
    fast.retry_cnt = 0;
    ASSERT_EQ(vt::connect_rc(qp, address(), dest, address(), fast).err, 0);
    ibv_send_wr wr{};
    wr.wr_id = 9;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    ASSERT_TRUE(readable(ctx_->async_fd)) << "no async event";
    ibv_async_event ev{};
    ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
    EXPECT_EQ(ev.element.qp, qp);
    ibv_ack_async_event(&ev);
    ibv_wc wc{};
    int n = 0;
    for (int i = 0; i < 5'000'000 && n == 0; ++i) n = ibv_poll_cq(cq, 1, &wc);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(wc.wr_id, 9u);
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
    EXPECT_EQ(state_of(qp), IBV_QPS_ERR);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

TEST_F(Verbs, ResetDiscardsPostedWqesWithoutCompletions) {
    ibv_cq* cq = make_cq();
    ibv_qp* qp = make_qp(cq);
    ASSERT_NE(qp, nullptr);
    ibv_qp_attr a = init_attr();
    ASSERT_EQ(ibv_modify_qp(qp, &a, kInitMask), 0);
    ibv_recv_wr rwr{};
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_recv(qp, &rwr, &bad), 0);
    a = {};
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    a = {};
    a.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE), 0);
    ibv_wc wc{};
    EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0) << "a WQE discarded by reset was flushed later";
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
}

}  // namespace
