// Registrations of memory the application shares itself (daemon/verbs/client_memory.cc): SysV
// segments, mapped by snicd only where the client has them attached and may use them, and
// hugetlb memfds, mapped at their page size. The test process plays the client: the
// session's peer is this process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <linux/falloc.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/fault_guard.h"
#include "daemon/verbs/session.h"
#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon {
namespace {

using fixture::Client;
using fixture::SessionTest;
using shm::Handle;

constexpr std::uint64_t kHuge = 2 << 20;

// Free 2 MiB huge pages (HugePages_Free in /proc/meminfo).
long free_huge_pages() {
    std::ifstream in("/proc/meminfo");
    for (std::string line; std::getline(in, line);) {
        long n = 0;
        if (std::sscanf(line.c_str(), "HugePages_Free: %ld", &n) == 1) return n;
    }
    return 0;
}

// A SysV segment, removed (IPC_RMID) at once as UCX does, attached here unless `attach` is
// false.
class Segment {
  public:
    Segment(std::size_t bytes, int flags = 0, bool attach = true, int mode = 0600) : bytes_(bytes) {
        id_ = ::shmget(IPC_PRIVATE, bytes, IPC_CREAT | mode | flags);
        if (id_ < 0) return;
        if (attach) {
            p_ = static_cast<std::byte*>(::shmat(id_, nullptr, 0));
            EXPECT_NE(p_, reinterpret_cast<std::byte*>(-1)) << std::strerror(errno);
        }
        ::shmctl(id_, IPC_RMID, nullptr);
    }
    ~Segment() {
        if (p_ != nullptr) ::shmdt(p_);
    }
    int id() const { return id_; }
    std::byte* data() const { return p_; }
    std::uint64_t addr() const { return reinterpret_cast<std::uintptr_t>(p_); }
    std::size_t bytes() const { return bytes_; }
    shmatt_t attached() const {
        shmid_ds ds{};
        return ::shmctl(id_, IPC_STAT, &ds) == 0 ? ds.shm_nattch : 0;
    }

  private:
    int id_ = -1;
    std::byte* p_ = nullptr;
    std::size_t bytes_;
};

Peer self() {
    return Peer{::getpid(), ::getuid(), ::getgid()};
}

// A registration of [addr, addr+length) backed by one SysV segment piece.
int reg_sysv(Client& c, Handle pd, int shmid, std::uint64_t seg_addr, std::uint64_t seg_len,
             std::uint64_t offset, std::uint64_t page, std::uint64_t addr, std::uint64_t length,
             std::uint32_t access, shm::RegMrReply& out) {
    shm::RegMrReq req{};
    req.pd = pd;
    req.access = access;
    req.addr = addr;
    req.length = length;
    req.iova = addr;
    req.nsegs = 1;
    req.segs[0] = {seg_addr, seg_len, offset, shm::MrBacking::sysv, shmid, page};
    FdList none;
    return c.session.reg_mr(req, none, out);
}

constexpr std::uint32_t kRw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

TEST_F(SessionTest, sysv_segment_the_client_attached_is_mapped_by_the_daemon) {
    Client c(resources, ports, self());
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const std::uint64_t rings = c.session.mapped_bytes();
    Segment seg(16 * shm::kPageSize);
    ASSERT_GE(seg.id(), 0);
    ASSERT_EQ(seg.attached(), 1u);

    // Pages 2..5 of the segment, the range starting inside page 2.
    const std::uint64_t at = seg.addr() + 2 * shm::kPageSize;
    shm::RegMrReply out{};
    ASSERT_EQ(reg_sysv(c, pd, seg.id(), at, 4 * shm::kPageSize, 2 * shm::kPageSize, shm::kPageSize,
                       at + 100, 3 * shm::kPageSize, kRw, out),
              0);
    EXPECT_EQ(seg.attached(), 2u);  // snicd's attachment beside the client's
    const Mr* mr = c.session.mr(out.mr);
    ASSERT_NE(mr, nullptr);
    std::memcpy(seg.data() + 2 * shm::kPageSize + 100, "sysv", 4);
    EXPECT_EQ(std::memcmp(mr->addr, "sysv", 4), 0);
    std::memcpy(mr->addr + 3 * shm::kPageSize - 4, "back", 4);
    EXPECT_EQ(std::memcmp(seg.data() + 5 * shm::kPageSize + 96, "back", 4), 0);

    // Deregistering detaches it; so does the end of the session.
    FdList fds;
    ASSERT_EQ(c.session.dereg_mr({out.mr, 0}, fds, c.none), 0);
    EXPECT_EQ(seg.attached(), 1u);
    ASSERT_EQ(reg_sysv(c, pd, seg.id(), seg.addr(), seg.bytes(), 0, shm::kPageSize, seg.addr(),
                       seg.bytes(), kRw, out),
              0);
    EXPECT_EQ(seg.attached(), 2u);
    EXPECT_EQ(c.session.mapped_bytes(), rings + seg.bytes());
}

TEST_F(SessionTest, sysv_segment_ends_with_the_session) {
    Segment seg(4 * shm::kPageSize);
    ASSERT_GE(seg.id(), 0);
    {
        Client c(resources, ports, self());
        ASSERT_EQ(c.open(), 0);
        shm::RegMrReply out{};
        ASSERT_EQ(reg_sysv(c, c.pd(), seg.id(), seg.addr(), seg.bytes(), 0, shm::kPageSize,
                           seg.addr(), seg.bytes(), kRw, out),
                  0);
        EXPECT_EQ(seg.attached(), 2u);
    }
    EXPECT_EQ(seg.attached(), 1u);
    EXPECT_EQ(client_memory_stats().mapped_bytes, 0u);
}

TEST_F(SessionTest, sysv_segment_the_client_has_not_attached_is_refused) {
    Client c(resources, ports, self());
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const std::uint64_t rings = c.session.mapped_bytes();
    Segment mine(4 * shm::kPageSize);
    Segment other(4 * shm::kPageSize, 0, /*attach=*/false);
    ASSERT_GE(mine.id(), 0);
    ASSERT_GE(other.id(), 0);
    shm::RegMrReply out{};
    // Another segment named at the addresses where this one is attached.
    EXPECT_EQ(reg_sysv(c, pd, other.id(), mine.addr(), mine.bytes(), 0, shm::kPageSize, mine.addr(),
                       mine.bytes(), kRw, out),
              EINVAL);
    EXPECT_EQ(other.attached(), 0u);
    // The right segment at the wrong offset, or past where it is attached.
    EXPECT_EQ(reg_sysv(c, pd, mine.id(), mine.addr(), 2 * shm::kPageSize, shm::kPageSize,
                       shm::kPageSize, mine.addr(), shm::kPageSize, kRw, out),
              EINVAL);
    EXPECT_EQ(reg_sysv(c, pd, mine.id(), mine.addr() + shm::kPageSize, mine.bytes(), shm::kPageSize,
                       shm::kPageSize, mine.addr() + shm::kPageSize, shm::kPageSize, kRw, out),
              EINVAL);
    EXPECT_EQ(reg_sysv(c, pd, 0x7ffffff0, mine.addr(), mine.bytes(), 0, shm::kPageSize, mine.addr(),
                       mine.bytes(), kRw, out),
              EINVAL);  // no such segment
    EXPECT_EQ(mine.attached(), 1u);
    EXPECT_EQ(c.session.mapped_bytes(), rings);
}

TEST_F(SessionTest, sysv_segment_is_refused_to_a_uid_its_permissions_exclude) {
    Segment seg(4 * shm::kPageSize, 0, true, 0644);
    ASSERT_GE(seg.id(), 0);
    // Not the owner (nor root): others may read it, not write it.
    Client c(resources, ports, Peer{::getpid(), 54321, 54321});
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    shm::RegMrReply out{};
    EXPECT_EQ(reg_sysv(c, pd, seg.id(), seg.addr(), seg.bytes(), 0, shm::kPageSize, seg.addr(),
                       seg.bytes(), kRw, out),
              EACCES);
    EXPECT_EQ(reg_sysv(c, pd, seg.id(), seg.addr(), seg.bytes(), 0, shm::kPageSize, seg.addr(),
                       seg.bytes(), IBV_ACCESS_REMOTE_READ, out),
              0);
}

TEST_F(SessionTest, sysv_hugetlb_segment_is_mapped_at_its_page_size) {
    if (free_huge_pages() < 2) GTEST_SKIP() << "no 2 MiB huge pages free (HugePages_Free < 2)";
    Client c(resources, ports, self());
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const std::uint64_t rings = c.session.mapped_bytes();
    Segment seg(2 * kHuge, SHM_HUGETLB);
    ASSERT_GE(seg.id(), 0) << std::strerror(errno);
    ASSERT_EQ(seg.addr() % kHuge, 0u);
    shm::RegMrReply out{};
    // The second huge page alone, the range inside it.
    const std::uint64_t at = seg.addr() + kHuge;
    ASSERT_EQ(reg_sysv(c, pd, seg.id(), at, kHuge, kHuge, kHuge, at + 5000, 10000, kRw, out), 0);
    const Mr* mr = c.session.mr(out.mr);
    std::memcpy(seg.data() + kHuge + 5000, "huge", 4);
    EXPECT_EQ(std::memcmp(mr->addr, "huge", 4), 0);
    EXPECT_EQ(c.session.mapped_bytes(), rings + kHuge);
    // A huge segment cut at a small page is refused, not mapped.
    EXPECT_EQ(reg_sysv(c, pd, seg.id(), at, shm::kPageSize, kHuge, shm::kPageSize, at,
                       shm::kPageSize, kRw, out),
              EINVAL);
    EXPECT_EQ(seg.attached(), 2u);
}

// Registered memory on hugetlbfs is mapped sealed or not: its huge pages are guarded
// (fault_guard), so a truncation cannot end snicd. A ring (map_object), written unguarded,
// is never on huge pages.
TEST_F(SessionTest, hugetlb_memfd_is_mapped_sealed_or_not_but_a_ring_must_be_sealed) {
    if (free_huge_pages() < 2) GTEST_SKIP() << "no 2 MiB huge pages free (HugePages_Free < 2)";
    Client c(resources, ports, self());
    ASSERT_EQ(c.open(), 0);
    const Handle pd = c.pd();
    const int fd = ::memfd_create("snic-unit-huge", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::ftruncate(fd, kHuge), 0);
    auto* p =
        static_cast<std::byte*>(::mmap(nullptr, kHuge, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(p, MAP_FAILED);
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    shm::RegMrReq req{};
    req.pd = pd;
    req.access = kRw;
    req.addr = addr + 64;
    req.length = 100;
    req.iova = req.addr;
    req.nsegs = 1;
    req.segs[0] = {addr, kHuge, 0, shm::MrBacking::memfd, -1, kHuge};
    shm::RegMrReply out{};
    EXPECT_FALSE(map_object(fd, kHuge, nullptr)) << "an unsealed memfd as a ring";
    FdList unsealed = fixture::fds_of({fd});
    ASSERT_EQ(c.session.reg_mr(req, unsealed, out), 0);
    std::memcpy(p + 64, "memfd", 5);
    EXPECT_EQ(std::memcmp(c.session.mr(out.mr)->addr, "memfd", 5), 0);
    ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    FdList sealed = fixture::fds_of({fd});
    ASSERT_EQ(c.session.reg_mr(req, sealed, out), 0);
    EXPECT_EQ(std::memcmp(c.session.mr(out.mr)->addr, "memfd", 5), 0);
    EXPECT_FALSE(map_object(fd, kHuge, nullptr)) << "a sealed hugetlb memfd as a ring";
    // Cut at a small page: refused.
    req.segs[0].length = shm::kPageSize;
    req.length = 10;
    FdList again = fixture::fds_of({fd});
    EXPECT_EQ(c.session.reg_mr(req, again, out), EINVAL);
    ::munmap(p, kHuge);
    ::close(fd);
}

// The guard itself: a page of a guarded range that faults (here a memfd cut under its
// mapping, where every access is SIGBUS) is replaced by zeroed memory and the access goes on;
// the fault is counted in the range and in all.
TEST(FaultGuard, a_fault_in_a_guarded_range_is_survived_and_counted) {
    ASSERT_TRUE(fault_guard::install());
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const int fd = ::memfd_create("snic-unit-guard", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(2 * page)), 0);
    auto* p = static_cast<volatile std::uint8_t*>(
        ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(p, MAP_FAILED);
    p[0] = 1;
    const std::uint32_t slot = fault_guard::add(const_cast<std::uint8_t*>(p), 2 * page, page);
    ASSERT_NE(slot, fault_guard::kNoSlot);
    const std::uint64_t before = fault_guard::recovered();
    ASSERT_EQ(::ftruncate(fd, 0), 0);  // both pages are gone under the mapping
    p[page + 7] = 0x5a;                // SIGBUS, survived
    EXPECT_EQ(p[page + 7], 0x5a);
    EXPECT_EQ(p[page + 8], 0);  // the replacement is zeroed
    EXPECT_EQ(fault_guard::recovered(), before + 1);
    EXPECT_EQ(fault_guard::remove(slot), 1u);
    ::munmap(const_cast<std::uint8_t*>(p), 2 * page);
    ::close(fd);
}

// Outside every guarded range (or once its slot is retired) SIGBUS is what it always was.
TEST(FaultGuardDeathTest, a_fault_outside_the_guarded_ranges_still_kills) {
    ASSERT_TRUE(fault_guard::install());
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const int fd = ::memfd_create("snic-unit-unguarded", MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(page)), 0);
    auto* p = static_cast<volatile std::uint8_t*>(
        ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(p, MAP_FAILED);
    fault_guard::remove(fault_guard::add(const_cast<std::uint8_t*>(p), page, page));
    ASSERT_EQ(::ftruncate(fd, 0), 0);
    // Killed by SIGBUS (under ASan, its report of the BUS and exit 1).
    EXPECT_DEATH(p[1] = 1, "");
    ::munmap(const_cast<std::uint8_t*>(p), page);
    ::close(fd);
}

// A client punches a huge page out of its registered hugetlb memory and the pool has no page
// left when snicd next writes there (a placement, a CQE): snicd survives the SIGBUS, the page
// reads back as what snicd wrote on snicd's side only, and deregistration reports the fault.
TEST_F(SessionTest, a_punched_huge_page_with_the_pool_empty_does_not_end_the_daemon) {
    ASSERT_TRUE(fault_guard::install());
    if (free_huge_pages() < 2) GTEST_SKIP() << "no 2 MiB huge pages free (HugePages_Free < 2)";
    Client c(resources, ports, self());
    ASSERT_EQ(c.open(), 0);
    const int fd = ::memfd_create("snic-unit-punch", MFD_CLOEXEC | MFD_HUGETLB | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(::ftruncate(fd, kHuge), 0);
    ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    auto* p =
        static_cast<std::byte*>(::mmap(nullptr, kHuge, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(p, MAP_FAILED);
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    shm::RegMrReq req{};
    req.pd = c.pd();
    req.access = kRw;
    req.addr = addr;
    req.length = kHuge;
    req.iova = addr;
    req.nsegs = 1;
    req.segs[0] = {addr, kHuge, 0, shm::MrBacking::memfd, -1, kHuge};
    shm::RegMrReply out{};
    FdList fds = fixture::fds_of({fd});
    ASSERT_EQ(c.session.reg_mr(req, fds, out), 0);
    auto* daemon_side = reinterpret_cast<volatile std::uint8_t*>(c.session.mr(out.mr)->addr);
    // The client punches its page out, then takes every free huge page (its own mapping
    // of another hugetlb memfd, faulted in): none is left for the punched one.
    ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kHuge), 0);
    const long hog_pages = free_huge_pages();
    const int hog = ::memfd_create("snic-unit-hog", MFD_CLOEXEC | MFD_HUGETLB);
    ASSERT_GE(hog, 0);
    const std::size_t hog_bytes = static_cast<std::size_t>(hog_pages) * kHuge;
    void* h = MAP_FAILED;
    if (hog_pages > 0) {
        ASSERT_EQ(::ftruncate(hog, static_cast<off_t>(hog_bytes)), 0);
        h = ::mmap(nullptr, hog_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, hog, 0);
        ASSERT_NE(h, MAP_FAILED);
    }
    const std::uint64_t before = fault_guard::recovered();
    EXPECT_EQ(free_huge_pages(), 0) << "the pool is not empty: the write below may not fault";
    daemon_side[100] = 0x77;  // snicd's write into the punched page
    EXPECT_EQ(daemon_side[100], 0x77);
    if (h != MAP_FAILED) ::munmap(h, hog_bytes);
    ::close(hog);
    EXPECT_EQ(fault_guard::recovered(), before + 1);
    FdList none;
    EXPECT_EQ(c.session.dereg_mr({out.mr, 0}, none, c.none), 0);
    ::munmap(p, kHuge);
    ::close(fd);
}

}  // namespace
}  // namespace snic::daemon
