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

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "libclient/util.h"

namespace snic::client {

namespace {

constexpr const char* kMemfdName = "libsnic-mr";
constexpr const char* kMemfdPath = "/memfd:libsnic-mr";

std::atomic<bool> g_dontfork{false};

struct Vma {
    std::uintptr_t start;
    std::uintptr_t end;
    int prot;
    bool priv;
    std::uint64_t offset;
    std::uint64_t inode;
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
        *detail = v.path;
        return "it is a shared mapping not made by libsnic";
    }
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
int migrate(std::uintptr_t p, std::uintptr_t q, const std::vector<Vma>& vmas,
            std::shared_ptr<Share>* out, std::uintptr_t addr, std::size_t len) {
    const std::size_t bytes = q - p;
    const auto failed = [&](const char* what) {
        const int err = errno;
        refuse(addr, len, what, std::strerror(err));
        return err;
    };
    Fd fd(::memfd_create(kMemfdName, MFD_CLOEXEC | MFD_ALLOW_SEALING));
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
    if (g_dontfork.load(std::memory_order_relaxed))
        ::madvise(reinterpret_cast<void*>(p), bytes, MADV_DONTFORK);
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

void set_dontfork() {
    g_dontfork.store(true, std::memory_order_relaxed);
}
bool dontfork() {
    return g_dontfork.load(std::memory_order_relaxed);
}

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

    // Shares the application has unmapped or replaced since are forgotten.
    for (auto it = reg.shares.begin(); it != reg.shares.end();) {
        Share& s = *it->second;
        const std::uintptr_t s_lo = s.addr > lo ? s.addr : lo;
        const std::uintptr_t s_hi = s.addr + s.len < hi ? s.addr + s.len : hi;
        if (s_lo < s_hi && !still_mapped(s, maps, s_lo, s_hi))
            it = reg.shares.erase(it);
        else
            ++it;
    }

    // Plan: pieces of existing shares and new ranges to move, in address order.
    struct Piece {
        std::uintptr_t start, end;
        std::shared_ptr<Share> share;  // null: to be moved
    };
    std::vector<Piece> pieces;
    int stack_probe = 0;
    const auto sp = reinterpret_cast<std::uintptr_t>(&stack_probe);
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
            cur = v.end;
        }
        if (cur < q) {
            char what[64];
            std::snprintf(what, sizeof what, "%#" PRIxPTR " is not mapped", cur);
            refuse(addr, len, what, "");
            return EINVAL;
        }
        if (sp >= p && sp < q) {
            refuse(addr, len, "it holds the calling thread's stack", "");
            return EINVAL;
        }
        pieces.push_back({p, q, nullptr});
        p = q;
    }
    if (pieces.size() > shm::kMaxMrSegments) {
        char what[96];
        std::snprintf(what, sizeof what, "it would take %zu memfd segments, at most %zu",
                      pieces.size(), shm::kMaxMrSegments);
        refuse(addr, len, what, "");
        return EINVAL;
    }

    for (Piece& piece : pieces) {
        if (piece.share) continue;
        std::shared_ptr<Share> s;
        if (const int err = migrate(piece.start, piece.end, maps, &s, addr, len); err != 0)
            return err;
        reg.shares.emplace(s->addr, s);
        piece.share = std::move(s);
    }

    out->segs.clear();
    out->fds.clear();
    out->shares.clear();
    for (Piece& piece : pieces) {
        shm::MrSegment seg{piece.start, piece.end - piece.start, piece.start - piece.share->addr};
        out->segs.push_back(seg);
        out->fds.push_back(piece.share->fd);
        ++piece.share->refs;
        out->shares.push_back(std::move(piece.share));
    }
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
