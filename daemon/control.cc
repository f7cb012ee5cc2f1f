#include "daemon/control.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace snic::daemon {

namespace {

constexpr std::size_t kMaxClients = 256;
constexpr int kPollMs = 100;

Error sys_error(const std::string& what) {
    const int e = errno;
    return make_error(e, what + ": " + std::strerror(e));
}

std::string parent_dir(const std::string& path) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    return slash == 0 ? "/" : path.substr(0, slash);
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

Result<std::unique_ptr<ControlServer>> ControlServer::claim(const std::string& path, mode_t mode) {
    if (path.size() >= sizeof(sockaddr_un{}.sun_path))
        return make_error(ENAMETOOLONG, "control socket path too long: " + path);
    const std::string dir = parent_dir(path);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return sys_error("cannot create " + dir + " for the control socket");

    const std::string lock_path = path + ".lock";
    Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!lock) return sys_error("cannot open " + lock_path);
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) return sys_error("cannot lock " + lock_path);
        char buf[32] = {};
        const ssize_t n = ::pread(lock.get(), buf, sizeof buf - 1, 0);
        const std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "?";
        return make_error(EADDRINUSE, "control socket " + path +
                                          " is in use by another snicd (pid " +
                                          pid.substr(0, pid.find('\n')) + ")");
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock.get(), 0) != 0 ||
        ::pwrite(lock.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
        return sys_error("cannot write " + lock_path);
    return std::unique_ptr<ControlServer>(new ControlServer(path, mode, std::move(lock)));
}

ControlServer::~ControlServer() {
    if (listen_) ::unlink(path_.c_str());
}

Status ControlServer::listen() {
    Fd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!s) return sys_error("cannot create the control socket");
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    ::unlink(path_.c_str());  // a stale socket: we hold the lock, so no daemon serves it
    if (::bind(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        return sys_error("cannot bind the control socket " + path_);
    if (::chmod(path_.c_str(), mode_) != 0) return sys_error("cannot chmod " + path_);
    if (::listen(s.get(), 64) != 0) return sys_error("cannot listen on " + path_);
    listen_ = std::move(s);
    return Ok{};
}

void ControlServer::serve(const std::atomic<bool>& stop, const StatusFn& status) {
    std::vector<pollfd> fds;
    while (!stop.load(std::memory_order_relaxed)) {
        fds.clear();
        fds.push_back({listen_.get(), POLLIN, 0});
        for (const Fd& c : clients_) fds.push_back({c.get(), POLLIN, 0});
        if (::poll(fds.data(), fds.size(), kPollMs) <= 0) continue;

        // Serve the clients first: accepting may reorder clients_.
        for (std::size_t i = fds.size(); i-- > 1;) {
            if (fds[i].revents == 0) continue;
            handle(fds[i].fd, status);
        }
        std::erase_if(clients_, [](const Fd& c) { return !c; });
        if ((fds[0].revents & POLLIN) != 0) {
            Fd c(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
            if (!c) continue;
            ucred cred{};
            socklen_t len = sizeof cred;
            if (::getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
                spdlog::debug("control: client pid {} uid {} gid {}", cred.pid, cred.uid, cred.gid);
            if (clients_.size() >= kMaxClients) {
                spdlog::warn("control: refusing client, {} already connected", kMaxClients);
                continue;
            }
            clients_.push_back(std::move(c));
        }
    }
}

// Answers one request; closes the client on EOF, error or a malformed message.
void ControlServer::handle(int fd, const StatusFn& status) {
    auto close_client = [&] {
        for (Fd& c : clients_)
            if (c.get() == fd) c = Fd{};
    };
    alignas(shm::CtrlHeader) std::byte buf[shm::kCtrlMaxMessage];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_TRUNC);
    if (n <= 0) return close_client();

    shm::CtrlHeader req{};
    if (static_cast<std::size_t>(n) < sizeof req || static_cast<std::size_t>(n) > sizeof buf) {
        spdlog::warn("control: malformed request of {} bytes", n);
        return close_client();
    }
    std::memcpy(&req, buf, sizeof req);
    if (req.magic != shm::kCtrlMagic || req.length != static_cast<std::uint32_t>(n)) {
        spdlog::warn("control: malformed request (magic {:#x}, length {})", req.magic, req.length);
        return close_client();
    }

    auto reply = std::make_unique<shm::StatusReply>();
    shm::CtrlHeader& hdr = reply->hdr;
    hdr = shm::CtrlHeader{shm::kCtrlMagic, shm::kAbiVersion, req.op, req.seq, 0, sizeof hdr, 0};
    if (req.abi_version != shm::kAbiVersion) {
        hdr.status = EPROTO;
    } else if (req.op == static_cast<std::uint16_t>(shm::CtrlOp::status)) {
        status(*reply);
        hdr.length = sizeof *reply;
    } else {
        hdr.status = EINVAL;  // unknown request
    }
    if (::send(fd, reply.get(), hdr.length, MSG_NOSIGNAL) < 0) close_client();
}

}  // namespace snic::daemon
