// The control connection to one snicd (control.h): connect, and one request and its reply
// at a time, with fds passed along; replies of requests that timed out earlier are skipped.
#include "libclient/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>

#include <cstring>
#include <vector>

namespace snic::client {

namespace {

std::int64_t now_ms() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return std::int64_t{ts.tv_sec} * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

int Conn::connect(const std::string& path, int timeout_ms) {
    path_ = path;
    timeout_ms_ = timeout_ms;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return ENAMETOOLONG;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);

    Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!fd) return errno;
    // Bounds a connect to a daemon whose listen backlog is full.
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return errno;
    fd_ = std::move(fd);
    return 0;
}

int Conn::call_raw(shm::CtrlOp op, const void* req, std::size_t req_len, void* reply,
                   std::size_t reply_len, std::span<const int> fds) {
    std::lock_guard lock(mu_);
    std::size_t got = 0;
    return exchange_locked(op, req, req_len, reply, reply_len, fds, &got);
}

int Conn::status(shm::StatusReply* out) {
    std::lock_guard lock(mu_);
    std::size_t got = 0;
    // StatusReply starts with its own CtrlHeader: receive the whole datagram into it.
    const int err = exchange_locked(shm::CtrlOp::status, nullptr, 0, out, sizeof *out, {}, &got);
    if (err != 0) return err;
    if (got < offsetof(shm::StatusReply, ports) || out->nports > shm::kMaxPorts ||
        got < offsetof(shm::StatusReply, ports) + out->nports * sizeof(shm::PortInfo))
        return EIO;
    return 0;
}

int Conn::exchange_locked(shm::CtrlOp op, const void* req, std::size_t req_len, void* reply,
                          std::size_t reply_len, std::span<const int> fds, std::size_t* got) {
    if (!fd_) return EIO;
    if (fds.size() > shm::kMaxFds) return EINVAL;
    const bool whole = op == shm::CtrlOp::status;  // reply buffer includes the header
    if (req_len > shm::kCtrlMaxMessage - sizeof(shm::CtrlHeader)) return EINVAL;
    const std::uint32_t seq = ++seq_;
    if (const int err = send_locked(op, seq, req, req_len, fds); err != 0) return err;
    return reply_locked(seq, whole, reply, reply_len, got);
}

int Conn::send_locked(shm::CtrlOp op, std::uint32_t seq, const void* req, std::size_t req_len,
                      std::span<const int> fds) {
    alignas(8) std::byte msg[shm::kCtrlMaxMessage];
    const shm::CtrlHeader hdr{shm::kCtrlMagic,
                              shm::kAbiVersion,
                              static_cast<std::uint16_t>(op),
                              seq,
                              0,
                              static_cast<std::uint32_t>(sizeof hdr + req_len),
                              0};
    std::memcpy(msg, &hdr, sizeof hdr);
    if (req_len != 0) std::memcpy(msg + sizeof hdr, req, req_len);

    iovec iov{msg, sizeof hdr + req_len};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * shm::kMaxFds)];
    if (!fds.empty()) {
        const std::size_t bytes = sizeof(int) * fds.size();
        mh.msg_control = cbuf;
        mh.msg_controllen = CMSG_SPACE(bytes);
        std::memset(cbuf, 0, sizeof cbuf);
        cmsghdr* c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(bytes);
        std::memcpy(CMSG_DATA(c), fds.data(), bytes);
    }
    ssize_t n;
    do {
        n = ::sendmsg(fd_.get(), &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return errno == EPIPE || errno == ECONNRESET ? EIO : errno;
    return 0;
}

int Conn::reply_locked(std::uint32_t seq, bool whole, void* reply, std::size_t reply_len,
                       std::size_t* got) {
    // The reply: skip stale replies (of a request that timed out earlier).
    std::vector<std::byte> buf(shm::kCtrlMaxMessage);
    const std::int64_t deadline = now_ms() + timeout_ms_;
    for (;;) {
        const std::int64_t left = deadline - now_ms();
        if (left <= 0) return ETIMEDOUT;
        pollfd p{fd_.get(), POLLIN, 0};
        const int r = ::poll(&p, 1, static_cast<int>(left));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) return ETIMEDOUT;
        const ssize_t n = ::recv(fd_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) {
            fd_.reset();  // the daemon went away: every later call says EIO
            return EIO;
        }
        shm::CtrlHeader rh;
        if (static_cast<std::size_t>(n) < sizeof rh) return EIO;
        std::memcpy(&rh, buf.data(), sizeof rh);
        if (rh.magic != shm::kCtrlMagic) return EIO;
        if (rh.status == EPROTO) {
            if (!abi_reported_) {
                say("snicd at %s speaks ABI %u, libsnic %u", path_.c_str(), rh.abi_version,
                    shm::kAbiVersion);
                abi_reported_ = true;
            }
            return EPROTO;
        }
        if (rh.seq != seq) continue;
        if (rh.status != 0) return rh.status > 0 ? rh.status : EIO;
        const std::size_t body = whole ? static_cast<std::size_t>(n) : n - sizeof rh;
        if (!whole && body < reply_len) return EIO;
        const std::size_t copy = body < reply_len ? body : reply_len;
        if (copy != 0) std::memcpy(reply, whole ? buf.data() : buf.data() + sizeof rh, copy);
        *got = body;
        return 0;
    }
}

bool Conn::hung_up() const {
    if (!fd_) return true;
    pollfd p{fd_.get(), POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

}  // namespace snic::client
