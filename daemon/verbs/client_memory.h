// What snicd holds of a client's: the file descriptors it keeps (notification sockets) and the
// mappings of the memfds the client passed (object rings and registered memory) and of the SysV
// segments it registered. Every holding is an RAII object, counted daemon-wide (snicctl
// resources) and, for mappings, in the bytes of the session that owns it; a memfd is checked
// before it is mapped: a regular file, sealed against shrinking, large enough; a SysV segment
// must be attached by the client where it says and readable (writable) by it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "common/result.h"
#include "shm/control_abi.h"

namespace snic::daemon {

// An owned file descriptor, closed on destruction.
class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept;
    ~Fd();
    int get() const { return fd_; }
    int release() { return std::exchange(fd_, -1); }
    explicit operator bool() const { return fd_ >= 0; }

  private:
    int fd_ = -1;
};

// The descriptors that came with one request, in order. The op takes the ones it keeps;
// the rest are closed when the list goes, on every path.
class FdList {
  public:
    bool push(int fd);  // false (and fd closed) when full
    std::size_t size() const { return n_; }
    int get(std::size_t i) const { return fds_[i].get(); }
    Fd take(std::size_t i) { return std::move(fds_[i]); }
    void clear();

  private:
    std::array<Fd, shm::kMaxFds> fds_;
    std::size_t n_ = 0;
};

struct ClientMemoryStats {
    std::uint64_t mapped_bytes;
    std::uint32_t mappings;  // live mmaps of client memory
    std::uint32_t fds;       // client descriptors held open
};
ClientMemoryStats client_memory_stats();

// A client's descriptor snicd keeps (notification socket), counted in ClientMemoryStats::fds
// (and, held by a KeptFd of daemon/verbs/resources.h, per client and per user).
class ClientFd {
  public:
    ClientFd() = default;
    explicit ClientFd(Fd fd);
    ClientFd(ClientFd&& o) noexcept : fd_(std::move(o.fd_)) {}
    ClientFd& operator=(ClientFd&& o) noexcept;
    ~ClientFd();
    int get() const { return fd_.get(); }

  private:
    Fd fd_;
};

// The client process whose memory is mapped (SO_PEERCRED): its SysV attachments are
// checked in /proc/<pid>/maps, its uid and gid against the segment's permissions.
struct MemoryOwner {
    std::int32_t pid;
    std::uint32_t uid;
    std::uint32_t gid;
};

// What one owner (a client's session) has mapped of client memory: bytes, and the mmaps
// they took (the daemon's mappings are bounded per user and in all).
struct MappedTotals {
    std::uint64_t bytes = 0;
    std::uint32_t mappings = 0;
};

// One mapping of client memory, MAP_SHARED; unmapped on destruction. `totals`, when given,
// are a session's, kept up to date.
class Mapping {
  public:
    Mapping() = default;
    Mapping(Mapping&& o) noexcept
        : addr_(std::exchange(o.addr_, nullptr)),
          bytes_(std::exchange(o.bytes_, 0)),
          regions_(std::exchange(o.regions_, 0)),
          totals_(std::exchange(o.totals_, nullptr)),
          guards_(std::exchange(o.guards_, {})) {}
    Mapping& operator=(Mapping&& o) noexcept;
    ~Mapping() { reset(); }

    std::byte* data() const { return static_cast<std::byte*>(addr_); }
    std::size_t size() const { return bytes_; }
    std::span<std::byte> span(std::size_t offset, std::size_t length) const {
        return {data() + offset, length};
    }
    void reset();

  private:
    friend Result<Mapping> map_object(int fd, std::size_t bytes, MappedTotals* totals);
    friend Result<Mapping> map_region(std::span<const shm::MrSegment> segs,
                                      std::span<const int> fds, bool writable,
                                      const MemoryOwner& owner, MappedTotals* totals);
    Mapping(void* addr, std::size_t bytes, std::uint32_t regions, MappedTotals* totals);

    // The fault_guard slots of its hugetlb segments (daemon/verbs/fault_guard.h): the pages that
    // can fault under snicd when the client punches them out.
    struct Guards {
        std::array<std::uint32_t, shm::kMaxMrSegments> slots{};
        std::uint32_t n = 0;
    };

    void* addr_ = nullptr;
    std::size_t bytes_ = 0;
    std::uint32_t regions_ = 0;  // mmap calls it took (counted as mappings)
    MappedTotals* totals_ = nullptr;
    Guards guards_;
};

// Checks that `fd` is a memfd a client may hand over (a regular file sealed with
// F_SEAL_SHRINK, at least `bytes` long, not on hugetlbfs) and maps its first `bytes`
// read-write. EINVAL with the reason otherwise; ENOMEM when the mapping fails for want of
// memory.
Result<Mapping> map_object(int fd, std::size_t bytes, MappedTotals* totals);

// Maps the segments of a memory registration where they lie relative to each other: a
// reserved range covering them all, aligned as the client's addresses are to the largest
// page size, each segment mapped over its place (MAP_FIXED) from its backing:
// - MrBacking::memfd: the next of `fds`, checked as map_object checks (a hugetlb memfd is
//   mapped at its page size), or a hugetlbfs file, which cannot be sealed (shared
//   MAP_HUGETLB memory, a file on a hugetlbfs mount): its huge pages, like every huge page
//   mapped here, are guarded (fault_guard), so that a truncation costs snicd nothing;
// - MrBacking::sysv: the SysV segment `shmid`, attached by snicd only if the owner has it
//   attached at those addresses with that offset (/proc/<pid>/maps, same IPC namespace)
//   and its permissions grant the owner read (and write when `writable`).
// Segments must be in address order and contiguous (the caller checks); each must be
// aligned to its backing's page size (checked here). Read-only unless `writable`.
Result<Mapping> map_region(std::span<const shm::MrSegment> segs, std::span<const int> fds,
                           bool writable, const MemoryOwner& owner, MappedTotals* totals);

// Whether `fd` is a notification socket (an AF_UNIX SOCK_STREAM end, see shm/control_abi.h).
bool is_notify_socket(int fd);

// Signals one event on a notification socket without ever blocking: false when the
// client's end is full (it is not reading its events) or gone.
bool notify(int fd);

}  // namespace snic::daemon
