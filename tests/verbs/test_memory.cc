// libsnic's memory sharing (libclient/memory.cc) on its own, without a
// daemon: which memory is moved into memfds, how the segments of a
// registration are cut, and that the application's pointers keep working.
#include "libclient/memory.h"

#include <fcntl.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/verbs/common.h"

namespace {

using snic::client::share_range;
using snic::client::SharedRange;
using snic::client::unshare;
using snic::verbs_test::free_huge_pages;

constexpr std::size_t kPage = 4096;

std::uintptr_t u(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p);
}

// The /proc/self/maps line of the mapping that holds addr.
std::string maps_line(const void* addr) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        unsigned long s = 0, e = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx", &s, &e) == 2 && u(addr) >= s && u(addr) < e)
            return line;
    }
    return "";
}

std::uint64_t inode_of(int fd) {
    struct stat st {};
    EXPECT_EQ(fstat(fd, &st), 0);
    return st.st_ino;
}

char* anon(std::size_t len, int prot = PROT_READ | PROT_WRITE) {
    void* p = mmap(nullptr, len, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<char*>(p);
}

TEST(ShareRange, MovesAnonymousMemoryInPlaceKeepingContents) {
    constexpr std::size_t kLen = 64 * kPage;
    char* buf = anon(kLen);
    for (std::size_t i = 0; i < kLen; ++i) buf[i] = static_cast<char>(i * 7);

    SharedRange r;
    ASSERT_EQ(share_range(u(buf), kLen, &r), 0);
    ASSERT_EQ(r.segs.size(), 1u);
    EXPECT_EQ(r.segs[0].addr, u(buf));
    EXPECT_EQ(r.segs[0].length, kLen);
    EXPECT_EQ(r.segs[0].offset, 0u);
    ASSERT_EQ(r.fds.size(), 1u);
    for (std::size_t i = 0; i < kLen; ++i) ASSERT_EQ(buf[i], static_cast<char>(i * 7)) << i;
    EXPECT_NE(maps_line(buf).find("/memfd:libsnic-mr"), std::string::npos) << maps_line(buf);
    EXPECT_NE(maps_line(buf).find(" rw-s "), std::string::npos) << maps_line(buf);

    // The memfd is sealed against shrinking, and it is the application's memory:
    // a write through another mapping of it shows at the application's address.
    EXPECT_NE(fcntl(r.fds[0], F_GET_SEALS) & F_SEAL_SHRINK, 0);
    void* other = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, r.fds[0], 0);
    ASSERT_NE(other, MAP_FAILED);
    static_cast<char*>(other)[100] = 'X';
    EXPECT_EQ(buf[100], 'X');
    buf[200] = 'Y';
    EXPECT_EQ(static_cast<char*>(other)[200], 'Y');
    munmap(other, kLen);

    unshare(r.shares);
    munmap(buf, kLen);
}

TEST(ShareRange, ReusesSharesAndCutsSegments) {
    constexpr std::size_t kLen = 16 * kPage;
    char* buf = anon(kLen);
    SharedRange a;
    ASSERT_EQ(share_range(u(buf) + 4 * kPage, 4 * kPage, &a), 0);
    ASSERT_EQ(a.segs.size(), 1u);

    // The same pages again: the same memfd.
    SharedRange same;
    ASSERT_EQ(share_range(u(buf) + 5 * kPage + 10, 100, &same), 0);
    ASSERT_EQ(same.segs.size(), 1u);
    EXPECT_EQ(inode_of(same.fds[0]), inode_of(a.fds[0]));
    EXPECT_EQ(same.segs[0].addr, u(buf) + 5 * kPage);  // whole pages
    EXPECT_EQ(same.segs[0].length, kPage);
    EXPECT_EQ(same.segs[0].offset, kPage);

    // The whole buffer: new, existing, new; contiguous and in address order.
    SharedRange all;
    ASSERT_EQ(share_range(u(buf), kLen, &all), 0);
    ASSERT_EQ(all.segs.size(), 3u);
    EXPECT_EQ(all.segs[0].addr, u(buf));
    EXPECT_EQ(all.segs[0].length, 4 * kPage);
    EXPECT_EQ(all.segs[1].addr, u(buf) + 4 * kPage);
    EXPECT_EQ(all.segs[1].offset, 0u);
    EXPECT_EQ(inode_of(all.fds[1]), inode_of(a.fds[0]));
    EXPECT_EQ(all.segs[2].addr, u(buf) + 8 * kPage);
    EXPECT_EQ(all.segs[2].length, 8 * kPage);
    EXPECT_EQ(all.segs[2].offset, 0u);

    unshare(same.shares);
    unshare(all.shares);
    unshare(a.shares);
    munmap(buf, kLen);
}

TEST(ShareRange, ReleasedMemoryIsMovedAgain) {
    char* buf = anon(4 * kPage);
    std::memset(buf, 'a', 4 * kPage);
    SharedRange a;
    ASSERT_EQ(share_range(u(buf), 4 * kPage, &a), 0);
    const std::uint64_t first = inode_of(a.fds[0]);
    unshare(a.shares);  // last user: the memfd is closed, the pages stay mapped from it
    EXPECT_EQ(buf[3 * kPage], 'a');
    SharedRange b;
    ASSERT_EQ(share_range(u(buf), 4 * kPage, &b), 0);
    EXPECT_NE(inode_of(b.fds[0]), first);
    EXPECT_EQ(buf[3 * kPage], 'a');
    unshare(b.shares);
    munmap(buf, 4 * kPage);
}

TEST(ShareRange, ForgetsMemoryTheApplicationReplaced) {
    char* buf = anon(4 * kPage);
    SharedRange a;
    ASSERT_EQ(share_range(u(buf), 4 * kPage, &a), 0);
    const std::uint64_t first = inode_of(a.fds[0]);
    // New anonymous memory over the same addresses while the share is still held.
    ASSERT_EQ(mmap(buf, 4 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0),
              buf);
    buf[0] = 'n';
    SharedRange b;
    ASSERT_EQ(share_range(u(buf), 4 * kPage, &b), 0);
    EXPECT_NE(inode_of(b.fds[0]), first);
    EXPECT_EQ(buf[0], 'n');
    unshare(a.shares);
    unshare(b.shares);
    munmap(buf, 4 * kPage);
}

TEST(ShareRange, KeepsProtection) {
    char* buf = anon(2 * kPage);
    buf[0] = 'r';
    ASSERT_EQ(mprotect(buf + kPage, kPage, PROT_READ), 0);
    SharedRange a;
    ASSERT_EQ(share_range(u(buf), 2 * kPage, &a), 0);
    ASSERT_EQ(a.segs.size(), 1u);
    EXPECT_NE(maps_line(buf).find(" rw-s "), std::string::npos) << maps_line(buf);
    EXPECT_NE(maps_line(buf + kPage).find(" r--s "), std::string::npos) << maps_line(buf + kPage);
    EXPECT_EQ(buf[0], 'r');
    unshare(a.shares);
    munmap(buf, 2 * kPage);
}

TEST(ShareRange, MallocedMemory) {
    void* raw = nullptr;
    ASSERT_EQ(posix_memalign(&raw, kPage, 8 * kPage), 0);
    std::memset(raw, 'm', 8 * kPage);
    SharedRange a;
    ASSERT_EQ(share_range(u(raw), 8 * kPage, &a), 0);
    EXPECT_EQ(static_cast<char*>(raw)[8 * kPage - 1], 'm');
    unshare(a.shares);
    std::free(raw);  // malloc keeps working on the moved pages
    void* again = std::malloc(1000);
    ASSERT_NE(again, nullptr);
    std::free(again);
}

// A child made by fork gets its own copy of moved memory, registered or released since, and
// the parent keeps its pages: neither sees the other's writes, so the heap pages around a
// registered buffer are not written by two allocators (as Linux copies pinned pages at fork;
// rdma-core's tests fork after registering heap memory). A read-only page stays read-only.
TEST(ShareRange, ForkedChildGetsItsOwnCopyOfMovedMemory) {
    constexpr std::size_t kLen = 4 * kPage;
    char* buf = anon(kLen);
    std::memset(buf, 'P', kLen);
    ASSERT_EQ(mprotect(buf + 3 * kPage, kPage, PROT_READ), 0);
    SharedRange held;
    ASSERT_EQ(share_range(u(buf), kLen, &held), 0);
    char* released = anon(kPage);
    released[0] = 'R';
    SharedRange gone;
    ASSERT_EQ(share_range(u(released), kPage, &gone), 0);
    unshare(gone.shares);
    ASSERT_NE(maps_line(released).find("/memfd:libsnic-mr"), std::string::npos);

    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        // Exit status: 0, or the first check that failed.
        if (buf[0] != 'P' || buf[kLen - 1] != 'P' || released[0] != 'R') _exit(1);
        if (maps_line(buf).find(" rw-p ") == std::string::npos) _exit(2);
        if (maps_line(buf + 3 * kPage).find(" r--p ") == std::string::npos) _exit(3);
        if (maps_line(released).find(" rw-p ") == std::string::npos) _exit(4);
        std::memset(buf, 'C', 3 * kPage);
        released[0] = 'c';
        _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
    for (std::size_t i = 0; i < kLen; ++i) ASSERT_EQ(buf[i], 'P') << i;
    EXPECT_EQ(released[0], 'R');
    // The parent's pages are still the memfd snicd maps.
    EXPECT_NE(maps_line(buf).find("/memfd:libsnic-mr"), std::string::npos) << maps_line(buf);
    void* other = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, held.fds[0], 0);
    ASSERT_NE(other, MAP_FAILED);
    static_cast<char*>(other)[1] = 'X';
    EXPECT_EQ(buf[1], 'X');
    munmap(other, kLen);
    unshare(held.shares);
    munmap(buf, kLen);
    munmap(released, kPage);
}

std::string refused(std::uintptr_t addr, std::size_t len) {
    testing::internal::CaptureStderr();
    SharedRange r;
    const int err = share_range(addr, len, &r);
    std::string msg = testing::internal::GetCapturedStderr();
    EXPECT_EQ(err, EINVAL) << msg;
    EXPECT_TRUE(r.shares.empty());
    return msg;
}

TEST(ShareRange, RefusesFileBackedMemory) {
    char path[] = "/tmp/snic-mem-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kPage), 0);
    void* p = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    ASSERT_NE(p, MAP_FAILED);
    const std::string msg = refused(u(p), kPage);
    EXPECT_NE(msg.find("libsnic: cannot share [0x"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mapped from a file"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    munmap(p, kPage);
    void* s = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(s, MAP_FAILED);
    EXPECT_NE(refused(u(s), kPage).find("shared mapping"), std::string::npos);
    munmap(s, kPage);
    close(fd);
    unlink(path);
}

constexpr std::size_t kHuge = 2 << 20;

TEST(ShareRange, NamesSysvSegmentsByShmidWithoutMovingThem) {
    const int id = shmget(IPC_PRIVATE, 8 * kPage, IPC_CREAT | 0600);
    ASSERT_GE(id, 0);
    char* p = static_cast<char*>(shmat(id, nullptr, 0));
    ASSERT_NE(p, reinterpret_cast<char*>(-1));
    shmctl(id, IPC_RMID, nullptr);
    // A private page before the segment is moved; the segment's pages are named.
    char* before =
        static_cast<char*>(mmap(p - kPage, kPage, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0));
    SharedRange r;
    if (before == p - kPage) {
        ASSERT_EQ(share_range(u(before) + 10, kPage + 3 * kPage, &r), 0);
        ASSERT_EQ(r.segs.size(), 2u);
        EXPECT_EQ(r.segs[0].backing, snic::shm::MrBacking::memfd);
        EXPECT_EQ(r.fds.size(), 1u);
        EXPECT_EQ(r.segs[1].addr, u(p));
    } else {
        ASSERT_EQ(share_range(u(p) + 2 * kPage + 5, 2 * kPage, &r), 0);
        ASSERT_EQ(r.segs.size(), 1u);
        EXPECT_EQ(r.segs[0].addr, u(p) + 2 * kPage);
        EXPECT_EQ(r.segs[0].offset, 2 * kPage);
        EXPECT_TRUE(r.fds.empty());
    }
    const auto& seg = r.segs.back();
    EXPECT_EQ(seg.backing, snic::shm::MrBacking::sysv);
    EXPECT_EQ(seg.shmid, id);
    EXPECT_EQ(seg.page_size, kPage);
    EXPECT_NE(maps_line(p).find("/SYSV"), std::string::npos) << maps_line(p);  // not moved
    unshare(r.shares);
    if (before == p - kPage) munmap(before, kPage);
    shmdt(p);
}

TEST(ShareRange, HugePagesAreNamedWholeAndHugetlbMemfdsSealed) {
    if (free_huge_pages() < 2) GTEST_SKIP() << "no 2 MiB huge pages free (HugePages_Free < 2)";
    const int id = shmget(IPC_PRIVATE, kHuge, IPC_CREAT | SHM_HUGETLB | 0600);
    ASSERT_GE(id, 0) << std::strerror(errno);
    char* p = static_cast<char*>(shmat(id, nullptr, 0));
    ASSERT_NE(p, reinterpret_cast<char*>(-1));
    shmctl(id, IPC_RMID, nullptr);
    SharedRange r;
    ASSERT_EQ(share_range(u(p) + 3 * kPage + 1, 100, &r), 0);
    ASSERT_EQ(r.segs.size(), 1u);
    EXPECT_EQ(r.segs[0].addr, u(p));  // the whole huge page
    EXPECT_EQ(r.segs[0].length, kHuge);
    EXPECT_EQ(r.segs[0].page_size, kHuge);
    EXPECT_EQ(r.segs[0].shmid, id);
    shmdt(p);

    const int fd = memfd_create("app-huge", MFD_HUGETLB | MFD_ALLOW_SEALING | MFD_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kHuge), 0);
    char* m = static_cast<char*>(mmap(nullptr, kHuge, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    ASSERT_NE(m, MAP_FAILED);
    SharedRange h;
    ASSERT_EQ(share_range(u(m) + 100, 100, &h), 0);
    ASSERT_EQ(h.segs.size(), 1u);
    EXPECT_EQ(h.segs[0].backing, snic::shm::MrBacking::memfd);
    EXPECT_EQ(h.segs[0].length, kHuge);
    ASSERT_EQ(h.fds.size(), 1u);
    EXPECT_EQ(inode_of(h.fds[0]), inode_of(fd));
    EXPECT_NE(fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK, 0);  // sealed by libsnic
    unshare(h.shares);
    munmap(m, kHuge);
    close(fd);

    // Private MAP_HUGETLB memory moves, whole huge pages, into a hugetlb memfd sealed
    // against shrinking; its bytes stay, and it is private no more.
    auto* a = static_cast<char*>(mmap(nullptr, kHuge, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0));
    ASSERT_NE(a, MAP_FAILED);
    for (std::size_t i = 0; i < kHuge; i += 4096) a[i] = static_cast<char>(i >> 12);
    SharedRange pr;
    ASSERT_EQ(share_range(u(a) + kPage, kPage, &pr), 0);
    ASSERT_EQ(pr.segs.size(), 1u);
    EXPECT_EQ(pr.segs[0].addr, u(a));
    EXPECT_EQ(pr.segs[0].length, kHuge);
    EXPECT_EQ(pr.segs[0].page_size, kHuge);
    EXPECT_EQ(pr.segs[0].backing, snic::shm::MrBacking::memfd);
    ASSERT_EQ(pr.fds.size(), 1u);
    EXPECT_NE(fcntl(pr.fds[0], F_GET_SEALS) & F_SEAL_SHRINK, 0);
    for (std::size_t i = 0; i < kHuge; i += 4096)
        ASSERT_EQ(a[i], static_cast<char>(i >> 12)) << "byte " << i << " lost in the move";
    unshare(pr.shares);
    munmap(a, kHuge);
}

TEST(ShareRange, RefusesAMemfdTheProcessNoLongerHolds) {
    const int fd = memfd_create("app", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kPage), 0);
    void* m = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(m, MAP_FAILED);
    close(fd);
    // Root reaches it through /proc/self/map_files; others must keep the fd open.
    if (geteuid() != 0) {
        EXPECT_NE(refused(u(m), kPage).find("not open"), std::string::npos);
    } else {
        SharedRange r;
        EXPECT_EQ(share_range(u(m), kPage, &r), 0);
        unshare(r.shares);
    }
    munmap(m, kPage);
    const int unsealable = memfd_create("app-nosealing", MFD_CLOEXEC);  // F_SEAL_SEAL set
    ASSERT_EQ(ftruncate(unsealable, kPage), 0);
    void* n = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, unsealable, 0);
    ASSERT_NE(n, MAP_FAILED);
    EXPECT_NE(refused(u(n), kPage).find("cannot be sealed"), std::string::npos);
    munmap(n, kPage);
    close(unsealable);
}

TEST(ShareRange, RefusesUnmappedStackAndUnreadableMemory) {
    char* hole = anon(3 * kPage);
    munmap(hole + kPage, kPage);
    const std::string msg = refused(u(hole), 3 * kPage);
    EXPECT_NE(msg.find("is not mapped"), std::string::npos) << msg;
    munmap(hole, 3 * kPage);

    char local[100];
    EXPECT_NE(refused(u(local), sizeof local).find("stack"), std::string::npos);

    char* none = anon(kPage, PROT_NONE);
    EXPECT_NE(refused(u(none), kPage).find("not readable"), std::string::npos);
    munmap(none, kPage);

    EXPECT_EQ(share_range(u(hole), 0, nullptr), EINVAL);
}

TEST(ShareRange, RefusesMoreThanSixteenSegments) {
    constexpr std::size_t kPages = 40;
    char* buf = anon(kPages * kPage);
    std::vector<SharedRange> held(kPages / 2);
    for (std::size_t p = 1; p < kPages; p += 2)
        ASSERT_EQ(share_range(u(buf) + p * kPage, kPage, &held[p / 2]), 0);
    const std::string msg = refused(u(buf), kPages * kPage);
    EXPECT_NE(msg.find("segments, at most 16"), std::string::npos) << msg;
    // Nothing was moved by the refused registration: page 0 is still private.
    EXPECT_EQ(maps_line(buf).find("memfd"), std::string::npos) << maps_line(buf);
    SharedRange sixteen;
    ASSERT_EQ(share_range(u(buf), 15 * kPage + 1, &sixteen), 0);  // pages 0..15
    EXPECT_EQ(sixteen.segs.size(), 16u);
    unshare(sixteen.shares);
    for (SharedRange& r : held) unshare(r.shares);
    munmap(buf, kPages * kPage);
}

TEST(ShareRange, ThreadsShareConcurrently) {
    constexpr int kThreads = 4;
    constexpr std::size_t kLen = 32 * kPage;
    std::vector<char*> bufs;
    for (int i = 0; i < kThreads; ++i) {
        bufs.push_back(anon(kLen));
        std::memset(bufs.back(), 'a' + i, kLen);
    }
    std::vector<int> errs(kThreads, -1);
    std::vector<SharedRange> ranges(kThreads);
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
        threads.emplace_back([&, i] { errs[i] = share_range(u(bufs[i]), kLen, &ranges[i]); });
    for (auto& t : threads) t.join();
    for (int i = 0; i < kThreads; ++i) {
        EXPECT_EQ(errs[i], 0);
        EXPECT_EQ(bufs[i][kLen - 1], 'a' + i);
        unshare(ranges[i].shares);
        munmap(bufs[i], kLen);
    }
}

}  // namespace
