// Memory sharing for ibv_reg_mr (see memory.h).
//
// A registration names the whole pages that hold [addr, addr+len). Pages that
// a live Share already backs are reused as they are. The others must be
// private anonymous memory (or memory of a released libsnic memfd): they are
// copied into a new memfd, which is then mapped MAP_SHARED|MAP_FIXED over the
// same addresses with the same protection. The registry's lock is held from
// reading /proc/self/maps to the last remap, so registrations in several
// threads do not race each other; the application must not write the pages
// from another thread while they are being moved (docs/LIBSNIC.md).
#include "libclient/memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/memfd.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "libclient/util.h"

namespace snic::client {

namespace {

constexpr const char* kMemfdName = "libsnic-mr";
constexpr const char* kMemfdPath = "/memfd:libsnic-mr";

struct Vma {
    std::uintptr_t start;
    std::uintptr_t end;
    int prot;
    bool priv;
    std::uint64_t offset;
    std::uint64_t inode;
    dev_t dev;
    std::string path;
};

// The mappings of this process that overlap [lo, hi), in address order.
std::vector<Vma> read_maps(std::uintptr_t lo, std::uintptr_t hi) {
    std::vector<Vma> out;
    Fd fd(::open("/proc/self/maps", O_RDONLY | O_CLOEXEC));
    if (!fd) return out;
    std::string text;
    char buf[16384];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<std::size_t>(n));
    }
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        const std::string line = text.substr(pos, eol - pos);
        pos = eol + 1;
        unsigned long start = 0, end = 0, inode = 0;
        unsigned long long offset = 0;
        char perms[5] = {};
        unsigned dev_major = 0, dev_minor = 0;
        int consumed = 0;
        if (std::sscanf(line.c_str(), "%lx-%lx %4s %llx %x:%x %lu %n", &start, &end, perms, &offset,
                        &dev_major, &dev_minor, &inode, &consumed) < 7)
            continue;
        if (end <= lo || start >= hi) continue;
        Vma v;
        v.start = start;
        v.end = end;
        v.prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                 (perms[2] == 'x' ? PROT_EXEC : 0);
        v.priv = perms[3] == 'p';
        v.offset = offset;
        v.inode = inode;
        v.dev = makedev(dev_major, dev_minor);
        v.path = line.substr(static_cast<std::size_t>(consumed));
        while (!v.path.empty() && v.path.back() == ' ') v.path.pop_back();
        out.push_back(std::move(v));
    }
    return out;
}

struct Registry {
    std::mutex mu;
    std::map<std::uintptr_t, std::shared_ptr<Share>> shares;  // by address, disjoint
};

Registry& registry() {
    // Never destroyed: contexts may be closed from atexit handlers.
    static Registry* r = new Registry;
    return *r;
}

std::size_t page_size() {
    static const std::size_t ps = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return ps;
}

// How a shared mapping the application made is handed to snicd as it is: a SysV segment by
// its id, or the file behind it by a descriptor (a memfd; or a hugetlbfs file, which cannot
// be sealed, but whose pages snicd guards against the faults truncation brings).
enum class Backing { none, sysv, memfd };

// Whether v maps a hugetlbfs file: shared MAP_HUGETLB memory (/anon_hugepage) or a file on a
// hugetlbfs mount.
bool hugetlbfs_file(const Vma& v) {
    if (v.path.starts_with("/anon_hugepage")) return true;
    if (!v.path.starts_with("/")) return false;
    // An unlinked file is named "<path> (deleted)": its directory tells the file system.
    std::string path = v.path;
    if (path.ends_with(" (deleted)")) {
        path.resize(path.size() - std::strlen(" (deleted)"));
        path.resize(path.rfind('/') + 1);
    }
    struct statfs sfs {};
    return ::statfs(path.c_str(), &sfs) == 0 && sfs.f_type == HUGETLBFS_MAGIC;
}

Backing backing_of(const Vma& v) {
    if (v.priv) return Backing::none;
    // A SysV segment's file is named /SYSV<key> and its inode number is the shmid.
    if (v.path.starts_with("/SYSV") && v.inode <= static_cast<std::uint64_t>(INT32_MAX))
        return Backing::sysv;
    if (v.path.starts_with("/memfd:") && !v.path.starts_with(kMemfdPath)) return Backing::memfd;
    if (hugetlbfs_file(v)) return Backing::memfd;
    return Backing::none;
}

// The page size of the mapping that starts at `start` (KernelPageSize in smaps).
std::size_t vma_page_size(std::uintptr_t start) {
    std::FILE* f = std::fopen("/proc/self/smaps", "re");
    if (f == nullptr) return 0;
    char line[4096];
    bool in = false;
    std::size_t kib = 0;
    while (std::fgets(line, sizeof line, f) != nullptr) {
        unsigned long a = 0, b = 0;
        if (std::sscanf(line, "%lx-%lx ", &a, &b) == 2) {
            in = a == start;
            continue;
        }
        if (in && std::sscanf(line, "KernelPageSize: %zu kB", &kib) == 1) break;
    }
    std::fclose(f);
    return kib * 1024;
}

// An fd of the memfd mapped by v, sealed against shrinking: the file behind the mapping
// (/proc/self/map_files, which needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), or else a
// descriptor of the same file the process holds, or else (a hugetlbfs file) the file at its
// path. A hugetlbfs file that cannot be sealed is returned unsealed. -1 and errno when there
// is none or a memfd cannot be sealed.
int memfd_of(const Vma& v) {
    char path[96];
    std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx",
                  static_cast<unsigned long>(v.start), static_cast<unsigned long>(v.end));
    Fd fd(::open(path, O_RDWR | O_CLOEXEC));
    const auto same = [&](int f) {
        struct stat st {};
        return ::fstat(f, &st) == 0 && st.st_ino == v.inode && st.st_dev == v.dev;
    };
    if (!fd || !same(fd.get())) {
        fd = Fd();
        if (DIR* d = ::opendir("/proc/self/fd")) {
            while (dirent* e = ::readdir(d)) {
                const int n = std::atoi(e->d_name);
                if (e->d_name[0] == '.' || n == ::dirfd(d) || !same(n)) continue;
                fd = Fd(::fcntl(n, F_DUPFD_CLOEXEC, 0));
                break;
            }
            ::closedir(d);
        }
    }
    if (!fd && v.path.starts_with("/") && !v.path.starts_with("/anon_hugepage") &&
        !v.path.ends_with(" (deleted)")) {
        fd = Fd(::open(v.path.c_str(), O_RDWR | O_CLOEXEC));
        if (fd && !same(fd.get())) fd = Fd();
    }
    if (!fd) {
        errno = ENOENT;
        return -1;
    }
    const int seals = ::fcntl(fd.get(), F_GET_SEALS);
    if (seals >= 0 &&
        ((seals & F_SEAL_SHRINK) != 0 || ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK) == 0))
        return fd.release();
    const int err = errno;
    // A hugetlbfs file not made by memfd_create cannot be sealed: snicd guards its pages.
    struct statfs sfs {};
    if (::fstatfs(fd.get(), &sfs) == 0 && sfs.f_type == HUGETLBFS_MAGIC) return fd.release();
    errno = err;
    return -1;
}

// Whether [lo, hi) is still mapped from share s at the offsets it was moved to.
bool still_mapped(const Share& s, const std::vector<Vma>& maps, std::uintptr_t lo,
                  std::uintptr_t hi) {
    std::uintptr_t cur = lo;
    for (const Vma& v : maps) {
        if (v.end <= cur) continue;
        if (v.start > cur) return false;
        if (v.priv || v.inode != s.ino || v.offset + (cur - v.start) != cur - s.addr) return false;
        cur = v.end;
        if (cur >= hi) return true;
    }
    return cur >= hi;
}

// Whether the file `inode` is mapped executable in this process: a program or a library the
// loader mapped, whose writable mappings are its data segment.
bool loaded_image(std::uint64_t inode) {
    for (const Vma& v : read_maps(0, UINTPTR_MAX))
        if (v.inode == inode && (v.prot & PROT_EXEC) != 0) return true;
    return false;
}

// Why the pages of v cannot be moved into a memfd, or nullptr if they can.
const char* unshareable(const Vma& v, std::string* detail) {
    if (v.path.starts_with("[stack")) return "it is the process stack";
    if (v.path == "[vvar]" || v.path == "[vdso]" || v.path == "[vsyscall]") {
        *detail = v.path;
        return "it is kernel-provided memory";
    }
    const bool anon_name = v.path.empty() || v.path == "[heap]" || v.path.starts_with("[anon:");
    if (!v.priv) {
        if (v.path.starts_with(kMemfdPath)) return nullptr;  // a released libsnic memfd
        if (backing_of(v) != Backing::none) return nullptr;  // handed to snicd as it is
        *detail = v.path;
        return "it is a shared mapping not made by libsnic";
    }
    if (v.path.starts_with("/anon_hugepage")) return nullptr;  // moved into a hugetlb memfd
    // A loaded program's or library's writable data (static buffers, as rdma_cm's examples
    // register) is private to the process like anonymous memory: it moves the same way.
    // Any other file mapping is the file's.
    if ((v.inode != 0 || !anon_name) &&
        ((v.prot & PROT_WRITE) == 0 || v.inode == 0 || !loaded_image(v.inode))) {
        *detail = v.path;
        return "it is mapped from a file";
    }
    if ((v.prot & PROT_READ) == 0) return "it is not readable";
    return nullptr;
}

void refuse(std::uintptr_t addr, std::size_t len, const char* why, const std::string& detail) {
    if (detail.empty())
        say("cannot share [%#" PRIxPTR ",%#" PRIxPTR "): %s", addr, addr + len, why);
    else
        say("cannot share [%#" PRIxPTR ",%#" PRIxPTR "): %s (%s)", addr, addr + len, why,
            detail.c_str());
}

// Copies whole pages. They may hold objects the application has freed (heap
// pages around a small buffer), which AddressSanitizer would report for a
// plain memcpy; so this copy is neither instrumented nor turned into a memcpy call.
__attribute__((no_sanitize("address"), optimize("no-tree-loop-distribute-patterns"))) void
copy_pages(void* dst, const void* src, std::size_t bytes) {
    auto* d = static_cast<std::uint64_t*>(dst);
    const auto* s = static_cast<const std::uint64_t*>(src);
    for (std::size_t i = 0; i < bytes / sizeof(std::uint64_t); ++i) d[i] = s[i];
}

// Moves [p, q), covered by `vmas`, into a new memfd mapped over the same addresses.
// Huge pages (`page` above the small page size, private MAP_HUGETLB memory) move into a
// hugetlb memfd of that page size, which takes free pages from the pool for the copy.
int migrate(std::uintptr_t p, std::uintptr_t q, const std::vector<Vma>& vmas,
            std::shared_ptr<Share>* out, std::uintptr_t addr, std::size_t len,
            std::size_t page = 0) {
    const std::size_t bytes = q - p;
    const auto failed = [&](const char* what) {
        const int err = errno;
        refuse(addr, len, what, std::strerror(err));
        return err;
    };
    unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    if (page > page_size())
        flags |= MFD_HUGETLB | (static_cast<unsigned>(std::countr_zero(page)) << MFD_HUGE_SHIFT);
    Fd fd(::memfd_create(kMemfdName, flags));
    if (!fd) return failed("memfd_create failed");
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
        return failed("sizing the memfd failed");
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK) != 0)
        return failed("sealing the memfd failed");
    void* tmp = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (tmp == MAP_FAILED) return failed("mapping the memfd failed");
    copy_pages(tmp, reinterpret_cast<const void*>(p), bytes);
    ::munmap(tmp, bytes);
    for (const Vma& v : vmas) {
        const std::uintptr_t s = v.start > p ? v.start : p;
        const std::uintptr_t e = v.end < q ? v.end : q;
        if (s >= e) continue;
        void* r = ::mmap(reinterpret_cast<void*>(s), e - s, v.prot, MAP_SHARED | MAP_FIXED,
                         fd.get(), static_cast<off_t>(s - p));
        if (r == MAP_FAILED) return failed("mapping the memfd over the pages failed");
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return failed("fstat of the memfd failed");
    auto share = std::make_shared<Share>();
    share->addr = p;
    share->len = bytes;
    share->ino = st.st_ino;
    share->refs = 0;
    share->idle_since = 0;
    share->fd = fd.release();
    *out = std::move(share);
    return 0;
}

}  // namespace

Share::~Share() {
    if (fd >= 0) ::close(fd);
}

namespace {

// Replaces [start, end), a libsnic memfd mapping, by a private anonymous copy with the same
// contents and protection, at once (mremap). One that cannot be copied stays shared.
void privatize(std::uintptr_t start, std::uintptr_t end, int prot) {
    auto* at = reinterpret_cast<void*>(start);
    const std::size_t bytes = end - start;
    void* copy = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) return;
    if ((prot & PROT_READ) == 0 && ::mprotect(at, bytes, prot | PROT_READ) != 0) {
        ::munmap(copy, bytes);
        return;
    }
    copy_pages(copy, at, bytes);
    if (::mremap(copy, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED)
        ::munmap(copy, bytes);
    ::mprotect(at, bytes, prot);
}

// The child's copy of every libsnic memfd mapping ("libsnic-mr": registered memory, and
// memory released since, whose pages hold the application's objects still). Nothing here
// allocates from the heap: until its copies are made, the child's heap pages may be its
// parent's too. /proc/self/maps is read whole into anonymous memory first, then acted on.
void privatize_moved_memory() {
    std::size_t cap = std::size_t{1} << 20, len = 0;
    void* area = ::mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (area == MAP_FAILED) return;
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ::munmap(area, cap);
        return;
    }
    for (;;) {
        if (len == cap) {
            void* bigger = ::mremap(area, cap, cap * 2, MREMAP_MAYMOVE);
            if (bigger == MAP_FAILED) break;
            area = bigger;
            cap *= 2;
        }
        const ssize_t n = ::read(fd, static_cast<char*>(area) + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += static_cast<std::size_t>(n);
    }
    ::close(fd);
    char* const text = static_cast<char*>(area);
    const std::size_t path_len = std::strlen(kMemfdPath);
    for (char* line = text; line < text + len;) {
        char* eol = static_cast<char*>(
            std::memchr(line, '\n', static_cast<std::size_t>(text + len - line)));
        if (eol == nullptr) eol = text + len;
        *eol = '\0';
        unsigned long start = 0, end = 0;
        char perms[5] = {};
        int path_at = 0;
        if (std::sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &start, &end, perms, &path_at) >= 3 &&
            path_at > 0 && perms[3] == 's' &&
            std::strncmp(line + path_at, kMemfdPath, path_len) == 0)
            privatize(start, end,
                      (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                          (perms[2] == 'x' ? PROT_EXEC : 0));
        line = eol + 1;
    }
    ::munmap(area, cap);
}

// No thread moves memory while the process forks; the child, single-threaded, gets its
// copies before fork returns to it. (The registry's shares of the child no longer match
// its mappings: a registration there moves the memory afresh.)
void before_fork() {
    registry().mu.lock();
}
void after_fork_in_parent() {
    registry().mu.unlock();
}
void after_fork_in_child() {
    privatize_moved_memory();
    registry().mu.unlock();
}

[[maybe_unused]] const int g_fork_handlers =
    ::pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);

}  // namespace

namespace {

// Forgets the shares over [lo, hi) that the application has unmapped or replaced since.
void forget_replaced(Registry& reg, const std::vector<Vma>& maps, std::uintptr_t lo,
                     std::uintptr_t hi) {
    for (auto it = reg.shares.begin(); it != reg.shares.end();) {
        Share& s = *it->second;
        const std::uintptr_t s_lo = s.addr > lo ? s.addr : lo;
        const std::uintptr_t s_hi = s.addr + s.len < hi ? s.addr + s.len : hi;
        if (s_lo < s_hi && !still_mapped(s, maps, s_lo, s_hi))
            it = reg.shares.erase(it);
        else
            ++it;
    }
}

// One piece of a registration: part of an existing share, a range to move, or the
// application's own shared memory (a SysV segment, a memfd) handed over as it is.
struct Piece {
    std::uintptr_t start, end;
    std::shared_ptr<Share> share;  // null: to be moved (unless backing says otherwise)
    Backing backing = Backing::none;
    const Vma* vma = nullptr;  // backing != none
    std::size_t page = 0;
};

// The pieces of one registration of [addr, addr+len), in address order, as they are
// planned. Each refusal says one line on stderr naming the range and why.
struct Plan {
    std::uintptr_t addr;
    std::size_t len;
    std::uintptr_t sp;  // in the calling thread's stack, which no piece to move may hold
    const std::vector<Vma>& maps;
    std::vector<Piece> pieces;

    // Plans [lo, hi): pieces of the registry's shares where one backs a page, the rest as
    // unshared() finds it. 0 or EINVAL.
    int make(const Registry& reg, std::uintptr_t lo, std::uintptr_t hi);
    // Plans [p, q), which no share backs, from p on; p ends at q, or past it where huge pages
    // reach beyond. 0 or EINVAL.
    int unshared(std::uintptr_t& p, std::uintptr_t q);
    // Adds [from, to) as a range to move, unless it holds the calling thread's stack.
    bool movable(std::uintptr_t from, std::uintptr_t to);
};

bool Plan::movable(std::uintptr_t from, std::uintptr_t to) {
    if (sp >= from && sp < to) {
        refuse(addr, len, "it holds the calling thread's stack", "");
        return false;
    }
    pieces.push_back({from, to, nullptr});
    return true;
}

int Plan::unshared(std::uintptr_t& p, std::uintptr_t q) {
    std::uintptr_t cur = p;
    for (const Vma& v : maps) {
        if (v.end <= cur) continue;
        if (cur >= q) break;
        if (v.start > cur) break;  // a hole at cur
        std::string detail;
        if (const char* why = unshareable(v, &detail)) {
            refuse(addr, len, why, detail);
            return EINVAL;
        }
        // Huge pages to move (private MAP_HUGETLB memory, or a released libsnic hugetlb
        // memfd): a piece of their own, whole huge pages, into a hugetlb memfd.
        const bool private_huge = v.priv && v.path.starts_with("/anon_hugepage");
        if (private_huge || (!v.priv && v.path.starts_with(kMemfdPath))) {
            const std::size_t page = vma_page_size(v.start);
            if (private_huge && (page <= page_size() || (v.start % page) != 0)) {
                refuse(addr, len, "its page size is unknown", v.path);
                return EINVAL;
            }
            if (page > page_size()) {
                if (cur > p && !movable(p, cur)) return EINVAL;
                const std::uintptr_t e = v.end < q ? v.end : q;
                pieces.push_back({cur & ~(page - 1), (e + page - 1) & ~(page - 1), nullptr,
                                  Backing::none, &v, page});
                p = cur = pieces.back().end;
                continue;
            }
        }
        if (const Backing b = backing_of(v); b != Backing::none) {
            if (cur > p && !movable(p, cur)) return EINVAL;
            // Whole pages of the mapping's own size (huge pages reach past [lo, hi)).
            const std::size_t page = vma_page_size(v.start);
            if (page == 0 || (v.start % page) != 0) {
                refuse(addr, len, "its page size is unknown", v.path);
                return EINVAL;
            }
            const std::uintptr_t e = v.end < q ? v.end : q;
            pieces.push_back(
                {cur & ~(page - 1), (e + page - 1) & ~(page - 1), nullptr, b, &v, page});
            p = cur = pieces.back().end;
            continue;
        }
        cur = v.end;
    }
    if (cur < q && p < q) {
        char what[64];
        std::snprintf(what, sizeof what, "%#" PRIxPTR " is not mapped", cur);
        refuse(addr, len, what, "");
        return EINVAL;
    }
    if (p < q && !movable(p, q)) return EINVAL;
    p = p > q ? p : q;
    return 0;
}

int Plan::make(const Registry& reg, std::uintptr_t lo, std::uintptr_t hi) {
    for (std::uintptr_t p = lo; p < hi;) {
        auto it = reg.shares.upper_bound(p);
        if (it != reg.shares.begin()) {
            auto prev = std::prev(it);
            const Share& s = *prev->second;
            if (s.addr + s.len > p) {
                const std::uintptr_t e = s.addr + s.len < hi ? s.addr + s.len : hi;
                pieces.push_back({p, e, prev->second});
                p = e;
                continue;
            }
        }
        const std::uintptr_t q = it != reg.shares.end() && it->first < hi ? it->first : hi;
        if (const int err = unshared(p, q); err != 0) return err;
    }
    if (pieces.size() > shm::kMaxMrSegments) {
        char what[96];
        std::snprintf(what, sizeof what, "it would take %zu memfd segments, at most %zu",
                      pieces.size(), shm::kMaxMrSegments);
        refuse(addr, len, what, "");
        return EINVAL;
    }
    return 0;
}

// Gives each piece of the application's memfds a share of its own (held for this
// registration only, not kept in the registry). 0 or EINVAL, after a line on stderr.
int open_app_memfds(std::vector<Piece>& pieces, std::uintptr_t addr, std::size_t len) {
    for (Piece& piece : pieces) {
        if (piece.backing != Backing::memfd) continue;
        const int fd = memfd_of(*piece.vma);
        if (fd < 0) {
            const int err = errno;
            const bool huge = hugetlbfs_file(*piece.vma);
            refuse(addr, len,
                   err != ENOENT ? "its memfd cannot be sealed against shrinking"
                   : huge ? "its hugetlbfs file cannot be opened (not open in this process, and "
                            "/proc/self/map_files needs CAP_SYS_ADMIN)"
                          : "its memfd is not open in this process",
                   piece.vma->path);
            return EINVAL;
        }
        auto share = std::make_shared<Share>();
        share->addr = piece.vma->start;
        share->len = piece.vma->end - piece.vma->start;
        share->file_offset = piece.vma->offset;
        share->ino = piece.vma->inode;
        share->refs = 0;
        share->idle_since = 0;
        share->fd = fd;
        piece.share = std::move(share);
    }
    return 0;
}

// Moves each piece that has no share and no backing of its own into a new memfd, kept in
// the registry. 0 or an errno.
int move_pieces(Registry& reg, std::vector<Piece>& pieces, const std::vector<Vma>& maps,
                std::uintptr_t addr, std::size_t len) {
    for (Piece& piece : pieces) {
        if (piece.share || piece.backing != Backing::none) continue;
        std::shared_ptr<Share> s;
        if (const int err = migrate(piece.start, piece.end, maps, &s, addr, len, piece.page);
            err != 0)
            return err;
        reg.shares.emplace(s->addr, s);
        piece.share = std::move(s);
    }
    return 0;
}

// The registration's segments, its memfds' descriptors and its shares, each share
// referenced once more.
void describe(std::vector<Piece>& pieces, SharedRange* out) {
    out->segs.clear();
    out->fds.clear();
    out->shares.clear();
    for (Piece& piece : pieces) {
        shm::MrSegment seg{};
        seg.addr = piece.start;
        seg.length = piece.end - piece.start;
        seg.shmid = -1;
        seg.page_size = piece.page != 0 ? piece.page : page_size();
        if (piece.backing == Backing::sysv) {
            seg.backing = shm::MrBacking::sysv;
            seg.shmid = static_cast<std::int32_t>(piece.vma->inode);
            seg.offset = piece.vma->offset + (piece.start - piece.vma->start);
            out->segs.push_back(seg);
            continue;
        }
        seg.backing = shm::MrBacking::memfd;
        seg.offset = piece.share->file_offset + (piece.start - piece.share->addr);
        out->segs.push_back(seg);
        out->fds.push_back(piece.share->fd);
        ++piece.share->refs;
        out->shares.push_back(std::move(piece.share));
    }
}

}  // namespace

int share_range(std::uintptr_t addr, std::size_t len, SharedRange* out) {
    const std::size_t ps = page_size();
    if (len == 0) return EINVAL;
    if (addr + len < addr || addr + len > UINTPTR_MAX - ps) {
        refuse(addr, len, "the range wraps around the address space", "");
        return EINVAL;
    }
    const std::uintptr_t lo = addr & ~(ps - 1);
    const std::uintptr_t hi = (addr + len + ps - 1) & ~(ps - 1);

    Registry& reg = registry();
    std::lock_guard lock(reg.mu);
    const std::vector<Vma> maps = read_maps(lo, hi);
    forget_replaced(reg, maps, lo, hi);

    // Plan, in address order: pieces of existing shares, new ranges to move, and the
    // application's own shared memory (SysV segments, memfds) handed over as it is.
    int stack_probe = 0;
    Plan plan{addr, len, reinterpret_cast<std::uintptr_t>(&stack_probe), maps, {}};
    if (const int err = plan.make(reg, lo, hi); err != 0) return err;
    // The application's memfds first (nothing is moved if one cannot be had), then the moves.
    if (const int err = open_app_memfds(plan.pieces, addr, len); err != 0) return err;
    if (const int err = move_pieces(reg, plan.pieces, maps, addr, len); err != 0) return err;
    describe(plan.pieces, out);
    return 0;
}

void unshare(std::vector<std::shared_ptr<Share>>& shares) {
    Registry& reg = registry();
    std::lock_guard lock(reg.mu);
    for (auto& s : shares) {
        if (s->refs > 0 && --s->refs == 0) {
            // No registration uses it: forget it (the pages stay mapped from the
            // memfd; a later registration moves them into a new one).
            auto it = reg.shares.find(s->addr);
            if (it != reg.shares.end() && it->second == s) reg.shares.erase(it);
        }
    }
    shares.clear();
}

}  // namespace snic::client
