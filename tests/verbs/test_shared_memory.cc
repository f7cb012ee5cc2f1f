// snic-shared-memory-tests: memory the application shares itself, registered and used on the
// wire between the two ports of one snicd's virtual wire (SNIC_TEST_DEVICES="NAME_0 NAME_1",
// SNIC_SOCKET_DIR as for any libsnic program; tests/integration/test_shared_memory.py starts
// the daemon): SysV segments (normal and SHM_HUGETLB, removed with IPC_RMID at once, as UCX
// does), hugetlb memfds, shared and private MAP_HUGETLB memory (the private kind moved by
// libsnic into a hugetlb memfd, its bytes kept) and a file on a hugetlbfs mount. Side A
// RDMA WRITEs from its buffer into B's, B SENDs from its buffer into A's; every byte is
// checked. A hugetlbfs file truncated under its registration costs its owner the pages, and
// the daemon nothing.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/verbs/common.h"

namespace {

using namespace snic::verbs_test;

constexpr std::size_t kHuge = 2 << 20;
constexpr std::size_t kMsg = 256 * 1024;  // bytes moved each way

// A hugetlbfs mount of 2 MiB pages (/proc/mounts), or "".
std::string hugetlbfs_mount() {
    std::ifstream in("/proc/mounts");
    for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::string dev, dir, type, opts;
        f >> dev >> dir >> type >> opts;
        if (type == "hugetlbfs" && opts.find("pagesize=2M") != std::string::npos) return dir;
    }
    return "";
}

// Application memory of one kind, released at the end.
struct Buffer {
    enum Kind { sysv, sysv_huge, memfd_huge, anon_huge, hugetlbfs_file, private_huge };
    Buffer(Kind kind, std::size_t bytes) : bytes(bytes) {
        if (kind == anon_huge || kind == private_huge) {
            void* p =
                mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     (kind == anon_huge ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS | MAP_HUGETLB,
                     -1, 0);
            if (p != MAP_FAILED) data = static_cast<std::uint8_t*>(p);
            return;
        }
        if (kind == hugetlbfs_file) {  // kept open and linked until the end
            path = hugetlbfs_mount() + "/snic-test-XXXXXX";
            fd = mkstemp(path.data());
            if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return;
            void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) data = static_cast<std::uint8_t*>(p);
            return;
        }
        if (kind == memfd_huge) {
            fd = memfd_create("app-huge", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
            if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) return;
            void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) data = static_cast<std::uint8_t*>(p);
            return;
        }
        const int id =
            shmget(IPC_PRIVATE, bytes, IPC_CREAT | 0600 | (kind == sysv_huge ? SHM_HUGETLB : 0));
        if (id < 0) return;
        void* p = shmat(id, nullptr, 0);
        shmctl(id, IPC_RMID, nullptr);
        if (p != reinterpret_cast<void*>(-1)) data = static_cast<std::uint8_t*>(p);
        shm = true;
    }
    ~Buffer() {
        if (data != nullptr) {
            if (shm)
                shmdt(data);
            else
                munmap(data, bytes);
        }
        if (fd >= 0) close(fd);
        if (!path.empty()) unlink(path.c_str());
    }
    std::size_t bytes;
    std::uint8_t* data = nullptr;
    int fd = -1;
    bool shm = false;
    std::string path;  // a hugetlbfs file's
};

struct Side {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    PortAddress addr;
};

class SharedMemory : public ::testing::TestWithParam<Buffer::Kind> {
  protected:
    void SetUp() override {
        const auto names = device_names("SNIC_TEST_DEVICES");
        if (names.size() != 2) GTEST_SKIP() << "set SNIC_TEST_DEVICES to two snic devices";
        if (GetParam() != Buffer::sysv && free_huge_pages() < 4)
            GTEST_SKIP() << "fewer than 4 free 2 MiB huge pages (HugePages_Free in /proc/meminfo)";
        if (GetParam() == Buffer::hugetlbfs_file && hugetlbfs_mount().empty())
            GTEST_SKIP() << "no hugetlbfs mount of 2 MiB pages";
        for (int s = 0; s < 2; ++s) {
            side_[s].ctx = open_device(names[s]);
            ASSERT_NE(side_[s].ctx, nullptr) << "cannot open " << names[s];
        }
        for (Side& s : side_) open(s);
        connect(side_[0], side_[1]);
        connect(side_[1], side_[0]);
    }

    void TearDown() override {
        for (ibv_mr* mr : mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
        for (Side& s : side_) {
            if (s.qp != nullptr) {
                EXPECT_EQ(ibv_destroy_qp(s.qp), 0);
            }
            if (s.cq != nullptr) {
                EXPECT_EQ(ibv_destroy_cq(s.cq), 0);
            }
            if (s.pd != nullptr) {
                EXPECT_EQ(ibv_dealloc_pd(s.pd), 0);
            }
            if (s.ctx != nullptr) {
                EXPECT_EQ(ibv_close_device(s.ctx), 0);
            }
        }
    }

    void open(Side& s) {
        ASSERT_TRUE(query_address(s.ctx, s.addr)) << std::strerror(errno);
        s.pd = ibv_alloc_pd(s.ctx);
        ASSERT_NE(s.pd, nullptr);
        s.cq = ibv_create_cq(s.ctx, 64, nullptr, nullptr, 0);
        ASSERT_NE(s.cq, nullptr);
        ibv_qp_init_attr qa{};
        qa.send_cq = qa.recv_cq = s.cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap = {16, 16, 1, 1, 0};
        s.qp = ibv_create_qp(s.pd, &qa);
        ASSERT_NE(s.qp, nullptr) << std::strerror(errno);
    }

    void connect(Side& s, const Side& peer) {
        const RcParams p{.access = IBV_ACCESS_REMOTE_WRITE, .rq_psn = 7, .sq_psn = 7};
        const ModifyResult r = connect_rc(s.qp, s.addr, peer.qp->qp_num, peer.addr, p);
        ASSERT_EQ(r.err, 0) << "to " << r.state;
    }

    ibv_mr* reg(Side& s, void* addr, std::size_t len) {
        ibv_mr* mr = ibv_reg_mr(s.pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (mr != nullptr) mrs_.push_back(mr);
        return mr;
    }

    // A signalled RDMA WRITE of `len` bytes from `from` (lkey) to `to` (rkey), posted on s's
    // QP; ibv_post_send's result.
    static int post_write(Side& s, const void* from, std::uint32_t len, std::uint32_t lkey,
                          const void* to, std::uint32_t rkey, std::uint64_t id) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(from), len, lkey};
        ibv_send_wr wr{};
        wr.wr_id = id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(to);
        wr.wr.rdma.rkey = rkey;
        ibv_send_wr* bad = nullptr;
        return ibv_post_send(s.qp, &wr, &bad);
    }

    // A receive of up to `len` bytes at `at` (lkey), posted on s's QP.
    static int post_recv(Side& s, void* at, std::uint32_t len, std::uint32_t lkey,
                         std::uint64_t id) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(at), len, lkey};
        ibv_recv_wr wr{};
        wr.wr_id = id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        return ibv_post_recv(s.qp, &wr, &bad);
    }

    // A signalled SEND of `len` bytes from `from` (lkey; no SGE when len is 0) on s's QP.
    static int post_send(Side& s, const void* from, std::uint32_t len, std::uint32_t lkey,
                         std::uint64_t id) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(from), len, lkey};
        ibv_send_wr wr{};
        wr.wr_id = id;
        wr.sg_list = len > 0 ? &sge : nullptr;
        wr.num_sge = len > 0 ? 1 : 0;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        return ibv_post_send(s.qp, &wr, &bad);
    }

    // The next completion of `s`, within 10 s (a hang fails rather than blocks CI).
    ibv_wc next(Side& s) {
        const Polled p = poll_one(s.cq, std::chrono::seconds(10));
        EXPECT_EQ(p.n, 1) << "no completion within 10 s";
        return p.wc;
    }

    Side side_[2];
    std::vector<ibv_mr*> mrs_;
};

std::uint8_t pattern(std::size_t i, unsigned seed) {
    return static_cast<std::uint8_t>((i * 131 + seed * 17 + (i >> 9)) & 0xff);
}

TEST_P(SharedMemory, WriteAndSendMoveEveryByte) {
    const std::size_t bytes = GetParam() == Buffer::sysv ? 2 * kMsg + 8192 : 2 * kHuge;
    Buffer a(GetParam(), bytes), b(GetParam(), bytes);
    ASSERT_NE(a.data, nullptr) << "cannot make the buffer: " << std::strerror(errno);
    ASSERT_NE(b.data, nullptr) << "cannot make the buffer: " << std::strerror(errno);
    // Registered unaligned, inside the buffers: [100, 100 + 2 * kMsg).
    std::uint8_t* const pa = a.data + 100;
    std::uint8_t* const pb = b.data + 100;
    for (std::size_t i = 0; i < kMsg; ++i) pa[i] = pattern(i, 1);
    for (std::size_t i = 0; i < kMsg; ++i) pb[kMsg + i] = pattern(i, 2);
    ibv_mr* ma = reg(side_[0], pa, 2 * kMsg);
    ASSERT_NE(ma, nullptr) << std::strerror(errno);
    ibv_mr* mb = reg(side_[1], pb, 2 * kMsg);
    ASSERT_NE(mb, nullptr) << std::strerror(errno);

    // A writes its first half into B's first half.
    ASSERT_EQ(post_write(side_[0], pa, kMsg, ma->lkey, pb, mb->rkey, 1), 0);
    ibv_wc wc = next(side_[0]);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);

    // B sends its second half into A's second half.
    ASSERT_EQ(post_recv(side_[0], pa + kMsg, kMsg, ma->lkey, 2), 0);
    ASSERT_EQ(post_send(side_[1], pb + kMsg, kMsg, mb->lkey, 3), 0);
    wc = next(side_[1]);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    wc = next(side_[0]);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.byte_len, kMsg);

    for (std::size_t i = 0; i < kMsg; ++i) ASSERT_EQ(pb[i], pattern(i, 1)) << "written byte " << i;
    for (std::size_t i = 0; i < kMsg; ++i)
        ASSERT_EQ(pa[kMsg + i], pattern(i, 2)) << "sent byte " << i;
    // The memory was named, not moved: it is still the application's segment or memfd.
}

std::string kind_name(const ::testing::TestParamInfo<Buffer::Kind>& info) {
    switch (info.param) {
        case Buffer::sysv:
            return "SysV";
        case Buffer::sysv_huge:
            return "SysVHugetlb";
        case Buffer::memfd_huge:
            return "HugetlbMemfd";
        case Buffer::anon_huge:
            return "SharedMapHugetlb";
        case Buffer::private_huge:
            return "PrivateMapHugetlb";
        default:
            return "HugetlbfsFile";
    }
}

INSTANTIATE_TEST_SUITE_P(Kinds, SharedMemory,
                         ::testing::Values(Buffer::sysv, Buffer::sysv_huge, Buffer::memfd_huge,
                                           Buffer::anon_huge, Buffer::hugetlbfs_file,
                                           Buffer::private_huge),
                         kind_name);

// A hugetlbfs file cannot be sealed against truncation. B's is truncated to nothing while
// registered; A's RDMA WRITE into it then makes snicd fault on the vanished pages: snicd
// survives (its fault guard puts zeroed memory there), the WRITE completes, and the
// connection goes on carrying data. B lost the pages, as it asked; its own mapping of them is
// gone too (it must not touch it).
class TruncatedFile : public SharedMemory {};

TEST_P(TruncatedFile, TruncationUnderARegistrationCostsOnlyItsOwner) {
    Buffer a(Buffer::memfd_huge, 2 * kHuge), b(GetParam(), 2 * kHuge);
    ASSERT_NE(a.data, nullptr) << std::strerror(errno);
    ASSERT_NE(b.data, nullptr) << std::strerror(errno);
    for (std::size_t i = 0; i < kMsg; ++i) a.data[i] = pattern(i, 3);
    ibv_mr* ma = reg(side_[0], a.data, 2 * kHuge);
    ASSERT_NE(ma, nullptr) << std::strerror(errno);
    ibv_mr* mb = reg(side_[1], b.data, 2 * kHuge);
    ASSERT_NE(mb, nullptr) << std::strerror(errno);
    ASSERT_EQ(ftruncate(b.fd, 0), 0) << std::strerror(errno);

    ASSERT_EQ(post_write(side_[0], a.data, kMsg, ma->lkey, b.data, mb->rkey, 7), 0);
    ibv_wc wc = next(side_[0]);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);

    // The daemon and the connection are still there: B sends A a message.
    ASSERT_EQ(post_recv(side_[0], a.data + kHuge, 64, ma->lkey, 8), 0);
    ASSERT_EQ(post_send(side_[1], nullptr, 0, 0, 9), 0);  // no SGE: B's pages are gone
    EXPECT_EQ(next(side_[1]).status, IBV_WC_SUCCESS);
    wc = next(side_[0]);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
    EXPECT_EQ(wc.wr_id, 8u);
}

INSTANTIATE_TEST_SUITE_P(Hugetlbfs, TruncatedFile, ::testing::Values(Buffer::hugetlbfs_file),
                         kind_name);

}  // namespace
