#include "daemon/client_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace snic::daemon {

namespace {

std::atomic<std::uint64_t> g_mapped_bytes{0};
std::atomic<std::uint32_t> g_mappings{0};
std::atomic<std::uint32_t> g_fds{0};

// Checks one client memfd: regular file, sealed against shrinking, at least `need` bytes.
Status check_memfd(int fd, std::uint64_t need) {
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        return make_error(EINVAL, std::string("fstat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return make_error(EINVAL, "not a memfd (not a regular file)");
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return make_error(EINVAL, "not a memfd that allows sealing (F_GET_SEALS failed)");
    if ((seals & F_SEAL_SHRINK) == 0)
        return make_error(EINVAL, "memfd not sealed with F_SEAL_SHRINK");
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

Mapping::Mapping(void* addr, std::size_t bytes, std::uint32_t regions, std::uint64_t* owner_bytes)
    : addr_(addr), bytes_(bytes), regions_(regions), owner_bytes_(owner_bytes) {
    g_mapped_bytes.fetch_add(bytes_, std::memory_order_relaxed);
    g_mappings.fetch_add(regions_, std::memory_order_relaxed);
    if (owner_bytes_ != nullptr) *owner_bytes_ += bytes_;
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
    if (this != &o) {
        reset();
        addr_ = std::exchange(o.addr_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        regions_ = std::exchange(o.regions_, 0);
        owner_bytes_ = std::exchange(o.owner_bytes_, nullptr);
    }
    return *this;
}

void Mapping::reset() {
    if (addr_ == nullptr) return;
    ::munmap(addr_, bytes_);
    g_mapped_bytes.fetch_sub(bytes_, std::memory_order_relaxed);
    g_mappings.fetch_sub(regions_, std::memory_order_relaxed);
    if (owner_bytes_ != nullptr) *owner_bytes_ -= bytes_;
    addr_ = nullptr;
    bytes_ = 0;
    regions_ = 0;
    owner_bytes_ = nullptr;
}

Result<Mapping> map_object(int fd, std::size_t bytes, std::uint64_t* owner_bytes) {
    if (bytes == 0) return make_error(EINVAL, "empty mapping");
    if (auto st = check_memfd(fd, bytes); !st) return st.error();
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return mmap_error("mmap of the memfd");
    return Mapping(p, bytes, 1, owner_bytes);
}

Result<Mapping> map_region(std::span<const shm::MrSegment> segs, std::span<const int> fds,
                           bool writable, std::uint64_t* owner_bytes) {
    if (segs.empty() || segs.size() != fds.size())
        return make_error(EINVAL, "one memfd per segment needed");
    for (std::size_t i = 0; i < segs.size(); ++i)
        if (auto st = check_memfd(fds[i], segs[i].offset + segs[i].length); !st)
            return make_error(EINVAL, "segment " + std::to_string(i) + ": " + st.error().message);

    const std::uint64_t base = segs.front().addr;
    const std::uint64_t total = segs.back().addr + segs.back().length - base;
    void* range =
        ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) return mmap_error("reserving the address range");
    const int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    for (std::size_t i = 0; i < segs.size(); ++i) {
        void* at = static_cast<std::byte*>(range) + (segs[i].addr - base);
        void* p = ::mmap(at, segs[i].length, prot, MAP_SHARED | MAP_FIXED, fds[i],
                         static_cast<off_t>(segs[i].offset));
        if (p == MAP_FAILED) {
            Error e = mmap_error(("mmap of segment " + std::to_string(i)).c_str());
            ::munmap(range, total);
            return e;
        }
    }
    return Mapping(range, total, static_cast<std::uint32_t>(segs.size()), owner_bytes);
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
