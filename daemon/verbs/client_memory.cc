#include "daemon/verbs/client_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "daemon/verbs/fault_guard.h"

namespace snic::daemon {

namespace {

std::atomic<std::uint64_t> g_mapped_bytes{0};
std::atomic<std::uint32_t> g_mappings{0};
std::atomic<std::uint32_t> g_fds{0};

constexpr std::uint64_t kSmallPage = 4096;

// The page size of a memfd's pages: the hugetlb page size for a hugetlbfs file.
std::uint64_t fd_page_size(int fd) {
    struct statfs sfs {};
    if (::fstatfs(fd, &sfs) == 0 && sfs.f_type == HUGETLBFS_MAGIC)
        return static_cast<std::uint64_t>(sfs.f_bsize);
    return kSmallPage;
}

// Checks one client memfd: regular file, sealed against shrinking, at least `need` bytes.
// `hugetlbfs_ok`: a hugetlbfs file that cannot be sealed is accepted too (registered memory
// only, whose hugetlb pages fault_guard covers; never the rings snicd writes unguarded).
Status check_memfd(int fd, std::uint64_t need, bool hugetlbfs_ok = false) {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        return make_error(EINVAL, std::string("fstat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return make_error(EINVAL, "not a memfd (not a regular file)");
    const int seals = ::fcntl(fd, F_GET_SEALS);
    const bool sealed = seals >= 0 && (seals & F_SEAL_SHRINK) != 0;
    if (!sealed && !(hugetlbfs_ok && fd_page_size(fd) > kSmallPage))
        return make_error(EINVAL, seals < 0 ? "not a memfd that allows sealing (F_GET_SEALS failed)"
                                            : "memfd not sealed with F_SEAL_SHRINK");
    if (static_cast<std::uint64_t>(st.st_size) < need)
        return make_error(EINVAL, "memfd of " + std::to_string(st.st_size) + " bytes, " +
                                      std::to_string(need) + " needed");
    return Ok{};
}

Error mmap_error(const char* what) {
    const int e = errno;
    return make_error(e == ENOMEM ? ENOMEM : EINVAL, std::string(what) + ": " + std::strerror(e));
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
    if (this != &o) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = o.release();
    }
    return *this;
}

Fd::~Fd() {
    if (fd_ >= 0) ::close(fd_);
}

bool FdList::push(int fd) {
    if (n_ == fds_.size()) {
        ::close(fd);
        return false;
    }
    fds_[n_++] = Fd(fd);
    return true;
}

void FdList::clear() {
    for (std::size_t i = 0; i < n_; ++i) fds_[i] = Fd{};
    n_ = 0;
}

ClientMemoryStats client_memory_stats() {
    return {g_mapped_bytes.load(std::memory_order_relaxed),
            g_mappings.load(std::memory_order_relaxed), g_fds.load(std::memory_order_relaxed)};
}

ClientFd::ClientFd(Fd fd) : fd_(std::move(fd)) {
    if (fd_) g_fds.fetch_add(1, std::memory_order_relaxed);
}

ClientFd& ClientFd::operator=(ClientFd&& o) noexcept {
    if (this != &o) {
        if (fd_) g_fds.fetch_sub(1, std::memory_order_relaxed);
        fd_ = std::move(o.fd_);
    }
    return *this;
}

ClientFd::~ClientFd() {
    if (fd_) g_fds.fetch_sub(1, std::memory_order_relaxed);
}

Mapping::Mapping(void* addr, std::size_t bytes, std::uint32_t regions, MappedTotals* totals)
    : addr_(addr), bytes_(bytes), regions_(regions), totals_(totals) {
    g_mapped_bytes.fetch_add(bytes_, std::memory_order_relaxed);
    g_mappings.fetch_add(regions_, std::memory_order_relaxed);
    if (totals_ != nullptr) {
        totals_->bytes += bytes_;
        totals_->mappings += regions_;
    }
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
    if (this != &o) {
        reset();
        addr_ = std::exchange(o.addr_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        regions_ = std::exchange(o.regions_, 0);
        totals_ = std::exchange(o.totals_, nullptr);
        guards_ = std::exchange(o.guards_, {});
    }
    return *this;
}

void Mapping::reset() {
    if (addr_ == nullptr) return;
    std::uint32_t faults = 0;
    for (std::uint32_t i = 0; i < guards_.n; ++i) faults += fault_guard::remove(guards_.slots[i]);
    if (faults > 0)
        spdlog::warn(
            "client memory at {}: {} huge page(s) the client punched out faulted under "
            "snicd (no huge page to replace them) and were replaced by zeroed memory",
            addr_, faults);
    guards_ = {};
    ::munmap(addr_, bytes_);
    g_mapped_bytes.fetch_sub(bytes_, std::memory_order_relaxed);
    g_mappings.fetch_sub(regions_, std::memory_order_relaxed);
    if (totals_ != nullptr) {
        totals_->bytes -= bytes_;
        totals_->mappings -= regions_;
    }
    addr_ = nullptr;
    bytes_ = 0;
    regions_ = 0;
    totals_ = nullptr;
}

Result<Mapping> map_object(int fd, std::size_t bytes, MappedTotals* totals) {
    if (bytes == 0) return make_error(EINVAL, "empty mapping");
    if (auto st = check_memfd(fd, bytes); !st) return st.error();
    // An object's rings are written by snicd unguarded: no huge page a client could punch out.
    if (fd_page_size(fd) > kSmallPage)
        return make_error(EINVAL, "a hugetlb memfd cannot hold an object's rings");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return mmap_error("mmap of the memfd");
    return Mapping(p, bytes, 1, totals);
}

namespace {

constexpr std::uint64_t kMaxPage = std::uint64_t{1} << 30;

bool valid_page_size(std::uint64_t p) {
    return p >= kSmallPage && p <= kMaxPage && (p & (p - 1)) == 0;
}

// Whether a SysV segment's permissions let (uid, gid) read it, and write it if `write`.
// Only the primary gid counts: a group granted through supplementary groups is not seen.
bool ipc_allows(const ipc_perm& p, std::uint32_t uid, std::uint32_t gid, bool write) {
    if (uid == 0) return true;
    unsigned bits = p.mode & 07;
    if (uid == p.uid || uid == p.cuid)
        bits = (p.mode >> 6) & 07;
    else if (gid == p.gid || gid == p.cgid)
        bits = (p.mode >> 3) & 07;
    const unsigned need = write ? 06 : 04;
    return (bits & need) == need;
}

bool same_ipc_namespace(std::int32_t pid) {
    char theirs[64] = {}, ours[64] = {};
    const std::string path = "/proc/" + std::to_string(pid) + "/ns/ipc";
    const ssize_t a = ::readlink(path.c_str(), theirs, sizeof theirs - 1);
    const ssize_t b = ::readlink("/proc/self/ns/ipc", ours, sizeof ours - 1);
    return a > 0 && a == b && std::memcmp(theirs, ours, static_cast<std::size_t>(a)) == 0;
}

// Checks that process `pid` maps [addr, addr+len) from SysV segment `shmid` at segment
// offset `offset`, shared, readable and (if `write`) writable.
Status check_attached(std::int32_t pid, const shm::MrSegment& seg, bool write) {
    const std::string path = "/proc/" + std::to_string(pid) + "/maps";
    std::FILE* f = std::fopen(path.c_str(), "re");
    if (f == nullptr) return make_error(EINVAL, "cannot read " + path);
    std::uint64_t cur = seg.addr;
    const std::uint64_t end = seg.addr + seg.length;
    char line[4096];
    while (cur < end && std::fgets(line, sizeof line, f) != nullptr) {
        unsigned long long start = 0, stop = 0, off = 0, ino = 0;
        char perms[5] = {};
        int consumed = 0;
        if (std::sscanf(line, "%llx-%llx %4s %llx %*x:%*x %llu %n", &start, &stop, perms, &off,
                        &ino, &consumed) < 5)
            continue;
        if (stop <= cur || start > cur) continue;
        const std::string name(line + consumed);
        if (ino != static_cast<unsigned long long>(seg.shmid) || !name.starts_with("/SYSV") ||
            perms[3] != 's' || perms[0] != 'r' || (write && perms[1] != 'w') ||
            off + (cur - start) != seg.offset + (cur - seg.addr))
            break;
        cur = stop;
    }
    std::fclose(f);
    if (cur < end)
        return make_error(
            EINVAL, fmt::format("the client does not have SysV segment {} attached "
                                "{}at {:#x} (offset {:#x}) up to {:#x}",
                                seg.shmid, write ? "writable " : "", seg.addr, seg.offset, end));
    return Ok{};
}

// The checks before snicd attaches a client's SysV segment. Returns the segment's size.
Result<std::uint64_t> check_sysv(const shm::MrSegment& seg, bool write, const MemoryOwner& o) {
    if (seg.shmid < 0) return make_error(EINVAL, "no shmid");
    shmid_ds ds{};
    if (::shmctl(seg.shmid, IPC_STAT, &ds) != 0)
        return make_error(EINVAL,
                          fmt::format("SysV segment {}: {}", seg.shmid, std::strerror(errno)));
    if (!ipc_allows(ds.shm_perm, o.uid, o.gid, write))
        return make_error(EACCES, fmt::format("SysV segment {} (mode {:o}) is not {} by uid {}",
                                              seg.shmid, ds.shm_perm.mode & 0777,
                                              write ? "readable and writable" : "readable", o.uid));
    const std::uint64_t size = (ds.shm_segsz + seg.page_size - 1) & ~(seg.page_size - 1);
    if (seg.offset > size || seg.length > size - seg.offset)
        return make_error(EINVAL, fmt::format("SysV segment {} has {:#x} bytes, not {:#x}+{:#x}",
                                              seg.shmid, size, seg.offset, seg.length));
    if (!same_ipc_namespace(o.pid))
        return make_error(EINVAL, "the client is in another IPC namespace");
    if (auto st = check_attached(o.pid, seg, write); !st) return st.error();
    return size;
}

// Replaces [at, at+len) of a reservation with PROT_NONE again.
bool reserve_again(void* at, std::size_t len) {
    return len == 0 ||
           ::mmap(at, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
                  0) != MAP_FAILED;
}

// Attaches SysV segment seg.shmid so that its bytes [offset, offset+length) lie at `at`,
// and gives the rest of the attachment back to the reservation around it.
Status attach_sysv(std::byte* at, const shm::MrSegment& seg, std::uint64_t size, bool writable) {
    std::byte* whole = at - seg.offset;
    void* p = ::shmat(seg.shmid, whole, SHM_REMAP | (writable ? 0 : SHM_RDONLY));
    if (p == reinterpret_cast<void*>(-1)) return mmap_error("shmat");
    if (!reserve_again(whole, seg.offset) ||
        !reserve_again(at + seg.length, size - seg.offset - seg.length))
        return mmap_error("trimming the SysV attachment");
    return Ok{};
}

// A region's segments checked, before anything is mapped: their page sizes, the alignment
// the range must keep, the room SysV attachments need around it (they map whole segments,
// then give back what is not registered), and each SysV segment's size.
struct RegionPlan {
    std::uint64_t base = 0, total = 0;
    std::uint64_t align = kSmallPage, lead = 0, tail = 0;
    std::array<std::uint64_t, shm::kMaxMrSegments> sysv_size{}, page_of{};
};

Result<RegionPlan> plan_region(std::span<const shm::MrSegment> segs, std::span<const int> fds,
                               bool writable, const MemoryOwner& owner) {
    RegionPlan p;
    p.base = segs.front().addr;
    p.total = segs.back().addr + segs.back().length - p.base;
    std::size_t nfd = 0;
    for (std::size_t i = 0; i < segs.size(); ++i) {
        const shm::MrSegment& s = segs[i];
        const auto bad = [&](const std::string& why) {
            return make_error(EINVAL, "segment " + std::to_string(i) + ": " + why);
        };
        std::uint64_t page = kSmallPage;
        if (s.backing == shm::MrBacking::memfd) {
            if (nfd == fds.size()) return bad("no memfd for it");
            if (auto st = check_memfd(fds[nfd], s.offset + s.length, true); !st)
                return bad(st.error().message);
            page = fd_page_size(fds[nfd++]);
        } else if (s.backing == shm::MrBacking::sysv) {
            if (!valid_page_size(s.page_size)) return bad("bad page size");
            page = s.page_size;
        } else {
            return bad("unknown backing");
        }
        if (s.addr % page != 0 || s.length % page != 0 || s.offset % page != 0)
            return bad(fmt::format("not aligned to its {} KiB pages", page / 1024));
        if (s.backing == shm::MrBacking::sysv) {
            auto size = check_sysv(s, writable, owner);
            if (!size) return make_error(size.error().code, bad(size.error().message).message);
            p.sysv_size[i] = *size;
            const std::uint64_t before = s.addr - p.base;
            const std::uint64_t after = p.base + p.total - s.addr - s.length;
            if (s.offset > before) p.lead = std::max(p.lead, s.offset - before);
            if (*size - s.offset - s.length > after)
                p.tail = std::max(p.tail, *size - s.offset - s.length - after);
        }
        p.align = std::max(p.align, page);
        p.page_of[i] = page;
    }
    if (nfd != fds.size()) return make_error(EINVAL, "more memfds than memfd segments");
    return p;
}

// Maps segment `i` at `at`. Huge pages are faulted in now: a fault that finds the pool empty
// later would be a SIGBUS in an lcore; here it is an error (ENOMEM) for this registration.
Status map_segment(std::byte* at, const shm::MrSegment& s, std::size_t i, int fd,
                   const RegionPlan& p, bool writable) {
    const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    if (s.backing == shm::MrBacking::sysv) {
        if (auto st = attach_sysv(at, s, p.sysv_size[i], writable); !st) return st;
    } else if (::mmap(at, s.length, prot, MAP_SHARED | MAP_FIXED, fd,
                      static_cast<off_t>(s.offset)) == MAP_FAILED) {
        return mmap_error(("mmap of segment " + std::to_string(i)).c_str());
    }
    if (p.page_of[i] > kSmallPage &&
        ::madvise(at, s.length, writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) != 0)
        return make_error(ENOMEM, fmt::format("segment {}: its huge pages cannot be faulted "
                                              "in ({}): is the huge page pool exhausted?",
                                              i, std::strerror(errno)));
    return Ok{};
}

}  // namespace

Result<Mapping> map_region(std::span<const shm::MrSegment> segs, std::span<const int> fds,
                           bool writable, const MemoryOwner& owner, MappedTotals* totals) {
    if (segs.empty()) return make_error(EINVAL, "no segments");
    auto plan = plan_region(segs, fds, writable, owner);
    if (!plan) return plan.error();
    const RegionPlan& p = *plan;

    // The reservation: the range where base % align is kept, with room around it.
    const std::uint64_t span = p.lead + p.total + p.tail + p.align;
    void* res =
        ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) return mmap_error("reserving the address range");
    auto* lo = static_cast<std::byte*>(res);
    const auto want = reinterpret_cast<std::uintptr_t>(lo + p.lead);
    const std::uintptr_t shift = ((p.base % p.align) - want % p.align + p.align) % p.align;
    std::byte* range = lo + p.lead + shift;

    std::size_t nfd = 0;
    for (std::size_t i = 0; i < segs.size(); ++i) {
        const shm::MrSegment& s = segs[i];
        const int fd = s.backing == shm::MrBacking::memfd ? fds[nfd++] : -1;
        if (auto st = map_segment(range + (s.addr - p.base), s, i, fd, p, writable); !st) {
            ::munmap(lo, span);
            return st.error();
        }
    }
    // What lies around the range goes back.
    ::munmap(lo, range - lo);
    ::munmap(range + p.total, lo + span - (range + p.total));
    Mapping m(range, p.total, static_cast<std::uint32_t>(segs.size()), totals);
    // A hugetlb page the client punches out faults on snicd's next access if the pool has no
    // page then: guarded, so that the fault costs the client its page, not snicd its life.
    for (std::size_t i = 0; i < segs.size(); ++i) {
        if (p.page_of[i] <= kSmallPage) continue;
        const std::uint32_t slot =
            fault_guard::add(range + (segs[i].addr - p.base), segs[i].length, p.page_of[i]);
        if (slot == fault_guard::kNoSlot)  // (more than the daemon's mappings can be)
            return make_error(ENOMEM,
                              fmt::format("segment {}: no room to guard its huge pages", i));
        m.guards_.slots[m.guards_.n++] = slot;
    }
    return m;
}

bool is_notify_socket(int fd) {
    int type = 0, domain = 0;
    socklen_t len = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) return false;
    len = sizeof domain;
    if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) return false;
    return type == SOCK_STREAM && domain == AF_UNIX;
}

bool notify(int fd) {
    const char one = 1;
    return ::send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
}

}  // namespace snic::daemon
