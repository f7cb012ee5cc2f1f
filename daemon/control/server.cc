#include "daemon/control/server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <type_traits>
#include <utility>

#include <spdlog/spdlog.h>

#include "daemon/verbs/fault_guard.h"
#include "daemon/verbs/qp_report.h"
#include "shm/cm.h"

namespace snic::daemon {

namespace {

constexpr std::size_t kMaxClients = 256;
// Connections one user (uid) may hold: one process cannot lock every other user out.
constexpr std::size_t kMaxClientsPerUid = 64;
constexpr int kPollMs = 100;
// How often each port's link is looked at (a link event reaches clients within about this).
constexpr std::chrono::milliseconds kLinkCheck{100};
// Objects of a gone client's session destroyed per turn of the loop. Each QP or region costs
// an munmap with its TLB shootdown (tens of microseconds): a client with 8,000 QPs, taken
// apart in one go, held the control socket for 0.45 s; at 64 a turn, snicctl status waited
// 30 ms at most meanwhile (scripts/teardown-stall.py).
constexpr std::size_t kDismantlePerTurn = 64;

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

Result<std::unique_ptr<ControlServer>> ControlServer::claim(const std::string& path, mode_t mode) {
    if (path.size() >= sizeof(sockaddr_un{}.sun_path))
        return make_error(ENAMETOOLONG, "control socket path too long: " + path);
    const std::string dir = parent_dir(path);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
        return sys_error("cannot create " + dir + " for the control socket");

    const std::string lock_path = path + ".lock";
    // O_NOFOLLOW: a link planted at the lock's path is not followed to some other file.
    Fd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
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
    // Only a regular file of our own is rewritten with our pid.
    struct stat st {};
    if (::fstat(lock.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
        return make_error(EPERM, lock_path + " is not a regular file owned by snicd's user");
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock.get(), 0) != 0 ||
        ::pwrite(lock.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
        return sys_error("cannot write " + lock_path);
    return std::unique_ptr<ControlServer>(new ControlServer(path, mode, std::move(lock)));
}

ControlServer::ControlServer(std::string path, mode_t mode, Fd lock)
    : path_(std::move(path)),
      mode_(mode),
      lock_(std::move(lock)),
      in_(shm::kCtrlMaxMessage),
      out_(shm::kCtrlMaxMessage) {}

ControlServer::~ControlServer() {
    disconnect_all();  // sessions release their objects before the tables go
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
    spare_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    return Ok{};
}

void ControlServer::check_links() {
    link_up_.resize(devices_.size(), -1);
    for (std::size_t i = 0; i < devices_.size(); ++i) {
        const DevicePort& port = devices_[i];
        if (!port.link) continue;
        const LinkInfo link = port.link();
        const std::int8_t now = link.up ? 1 : 0;
        const std::int8_t was = std::exchange(link_up_[i], now);
        if (was == now || was < 0) continue;  // no change, or the first look
        if (link.up) {
            spdlog::info("port {}: link up ({} Mb/s)", i, link.speed_mbps);
        } else {
            spdlog::warn("port {}: link down", i);
        }
        std::size_t told = 0, lost = 0;
        for (const auto& c : clients_) {
            if (!c->session || c->session->port() != &port) continue;
            (c->session->port_event(link.up) ? told : lost) += 1;
        }
        if (lost != 0)
            spdlog::warn("port {}: {} session(s) missed the link event: event ring full", i, lost);
        spdlog::debug("port {}: link event told to {} session(s)", i, told);
    }
}

void ControlServer::serve(const std::atomic<bool>& stop, const StatusFn& status) {
    std::vector<pollfd> fds;
    std::vector<int> cm_fds;
    while (!stop.load(std::memory_order_relaxed)) {
        // The listening socket, the questions of other threads, CM's MAD queues, then one per
        // client.
        cm_fds.clear();
        if (cm_ != nullptr) cm_->poll_fds(cm_fds);
        const std::size_t first_watched = 2 + cm_fds.size();
        const std::size_t first_client = first_watched + watched_.size();
        fds.clear();
        fds.push_back({listen_.get(), POLLIN, 0});
        fds.push_back({questions_.fd(), POLLIN, 0});
        for (const int fd : cm_fds) fds.push_back({fd, POLLIN, 0});
        for (const auto& w : watched_) fds.push_back({w.first, POLLIN, 0});
        for (const auto& c : clients_) fds.push_back({c->sock.get(), POLLIN, 0});
        const int timeout = !dying_.empty()  ? 0
                            : cm_ != nullptr ? cm_->timeout_ms(CmService::now_ns(), kPollMs)
                                             : kPollMs;
        const int ready = ::poll(fds.data(), fds.size(), timeout);
        if (const auto now = std::chrono::steady_clock::now(); now >= next_link_check_) {
            next_link_check_ = now + kLinkCheck;
            check_links();
        }
        // CM's MADs and timers first: a reply it owes a client's request is then already due.
        if (cm_ != nullptr) cm_->run(CmService::now_ns());
        if (!dying_.empty() && !dying_.front()->dismantle(kDismantlePerTurn))
            dying_.erase(dying_.begin());
        if (ready <= 0) continue;
        for (std::size_t i = 0; i < watched_.size(); ++i)
            if ((fds[first_watched + i].revents & POLLIN) != 0) watched_[i].second();

        // One request per ready client per turn; a client that must go is disconnected here,
        // and its session taken apart over the next turns.
        for (std::size_t i = fds.size(); i-- > first_client;) {
            if (fds[i].revents == 0) continue;
            Client& c = *clients_[i - first_client];
            if (!handle(c, status)) {
                if (c.session) {
                    spdlog::debug("control: session {} (pid {}) closed", c.session->id(),
                                  c.peer.pid);
                    dying_.push_back(std::move(c.session));
                }
                clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i - first_client));
            }
        }
        if ((fds[1].revents & POLLIN) != 0) questions_.answer_all();
        if ((fds[0].revents & POLLIN) != 0) {
            Fd sock(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
            if (!sock && (errno == EMFILE || errno == ENFILE)) {
                shed_newest();
                continue;
            }
            if (!sock) continue;
            ucred cred{};
            socklen_t len = sizeof cred;
            if (::getsockopt(sock.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
                spdlog::warn("control: no credentials for a client: {}", std::strerror(errno));
                continue;
            }
            if (!make_room(cred.uid)) continue;  // refused: the connection closes
            spdlog::debug("control: client pid {} uid {} gid {}", cred.pid, cred.uid, cred.gid);
            auto c = std::make_unique<Client>();
            c->sock = std::move(sock);
            c->peer = Peer{cred.pid, cred.uid, cred.gid};
            clients_.push_back(std::move(c));
        }
    }
    questions_.close();  // no one answers them any more
}

bool ControlServer::make_room(std::uint32_t uid) {
    const auto of_uid = static_cast<std::size_t>(std::count_if(
        clients_.begin(), clients_.end(), [&](const auto& c) { return c->peer.uid == uid; }));
    const bool uid_full = of_uid >= kMaxClientsPerUid;
    if (!uid_full && clients_.size() < kMaxClients) return true;
    // Full: the oldest connection that holds nothing (no device opened, no CM) gives way,
    // the user's own when it is the user's quota that is full.
    const auto idle = std::find_if(clients_.begin(), clients_.end(), [&](const auto& c) {
        return !c->session && !c->cm && (!uid_full || c->peer.uid == uid);
    });
    if (idle == clients_.end()) {
        spdlog::warn(
            "control: refusing a client of uid {}: {} connections of that uid, {} in "
            "all, each holding objects (at most {} per uid, {} in all)",
            uid, of_uid, clients_.size(), kMaxClientsPerUid, kMaxClients);
        return false;
    }
    spdlog::info("control: closing an idle connection of uid {} (pid {}) to make room",
                 (*idle)->peer.uid, (*idle)->peer.pid);
    clients_.erase(idle);
    return true;
}

void ControlServer::shed_newest() {
    spare_ = Fd();
    {
        // Closed at once: the client sees its connection end.
        const Fd shed(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    }
    spare_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (shed_++ % 1000 == 0)
        spdlog::warn(
            "control: out of file descriptors ({} connections refused so far); "
            "raise snicd's RLIMIT_NOFILE (LimitNOFILE in its unit)",
            shed_);
}

bool ControlServer::handle(Client& c, const StatusFn& status) {
    // Every descriptor that comes with the message lands here first and is closed when
    // `fds` goes, unless the op keeps it.
    FdList fds;
    iovec iov{in_.data(), in_.size()};
    alignas(cmsghdr) std::byte control[CMSG_SPACE(sizeof(int) * shm::kMaxFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(c.sock.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    bool fds_truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
    for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm != nullptr; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        const std::size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (!fds.push(fd)) fds_truncated = true;
        }
    }
    if (n == 0) return false;  // the peer closed

    shm::CtrlHeader req{};
    if (static_cast<std::size_t>(n) < sizeof req || static_cast<std::size_t>(n) > in_.size() ||
        (msg.msg_flags & MSG_TRUNC) != 0) {
        spdlog::warn("control: client pid {}: malformed request of {} bytes", c.peer.pid, n);
        return false;
    }
    std::memcpy(&req, in_.data(), sizeof req);
    if (req.magic != shm::kCtrlMagic || req.length != static_cast<std::uint32_t>(n)) {
        spdlog::warn("control: client pid {}: malformed request (magic {:#x}, length {} of {})",
                     c.peer.pid, req.magic, req.length, n);
        return false;
    }

    std::size_t len;
    if (req.abi_version != shm::kAbiVersion) {
        shm::CtrlHeader hdr{shm::kCtrlMagic, shm::kAbiVersion, req.op, req.seq,
                            EPROTO,          sizeof hdr,       0};
        std::memcpy(out_.data(), &hdr, sizeof hdr);
        len = sizeof hdr;
        spdlog::info("control: client pid {} speaks ABI {}, snicd {}", c.peer.pid, req.abi_version,
                     shm::kAbiVersion);
    } else {
        len =
            dispatch(c, req, static_cast<std::size_t>(n) - sizeof req, fds, fds_truncated, status);
        if (len == 0) {
            spdlog::warn("control: client pid {}: op {} with a body of {} bytes", c.peer.pid,
                         req.op, static_cast<std::size_t>(n) - sizeof req);
            return false;
        }
    }
    fds.clear();  // closed before the client hears the answer
    const ssize_t sent = ::send(c.sock.get(), out_.data(), len, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent != static_cast<ssize_t>(len)) {
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            spdlog::warn("control: client pid {} does not read its replies; disconnecting",
                         c.peer.pid);
        return false;
    }
    return true;
}

namespace {

// One op of the table: its request and reply bodies, the fds it takes and its handler.
struct OpSpec {
    std::size_t request;  // body bytes
    std::size_t reply;    // body bytes on success
    int fds;              // descriptors it takes; kFdsInBody: the handler checks
    bool needs_device;    // only after open_device
    int (*run)(Session&, const std::byte* body, FdList& fds, std::byte* out);
};
constexpr int kFdsInBody = -1;

template <class T>
constexpr std::size_t body_size() {
    return std::is_same_v<T, shm::Empty> ? 0 : sizeof(T);
}

// Adapts a Session member int op(const Req&, FdList&, Rep&) to the table.
template <auto Method>
struct SessionOp;
template <class Req, class Rep, int (Session::*Method)(const Req&, FdList&, Rep&)>
struct SessionOp<Method> {
    static int run(Session& s, const std::byte* body, FdList& fds, std::byte* out) {
        Req req{};
        if constexpr (body_size<Req>() != 0) std::memcpy(&req, body, sizeof req);
        Rep rep{};
        const int err = (s.*Method)(req, fds, rep);
        if constexpr (body_size<Rep>() != 0)
            if (err == 0) std::memcpy(out, &rep, sizeof rep);
        return err;
    }
    static constexpr OpSpec spec(int fds, bool needs_device = true) {
        return {body_size<Req>(), body_size<Rep>(), fds, needs_device, &run};
    }
};

// The session ops, by CtrlOp value.
const OpSpec* session_op(std::uint16_t op) {
    using shm::CtrlOp;
    static const auto table = [] {
        std::array<std::optional<OpSpec>, 32> t{};
        auto set = [&t](CtrlOp op, OpSpec s) { t[static_cast<std::size_t>(op)] = s; };
        set(CtrlOp::open_device, SessionOp<&Session::open_device>::spec(2, false));
        set(CtrlOp::query_port, SessionOp<&Session::query_port>::spec(0));
        set(CtrlOp::alloc_pd, SessionOp<&Session::alloc_pd>::spec(0));
        set(CtrlOp::dealloc_pd, SessionOp<&Session::dealloc_pd>::spec(0));
        set(CtrlOp::reg_mr, SessionOp<&Session::reg_mr>::spec(kFdsInBody));
        set(CtrlOp::dereg_mr, SessionOp<&Session::dereg_mr>::spec(0));
        set(CtrlOp::create_channel, SessionOp<&Session::create_channel>::spec(2));
        set(CtrlOp::destroy_channel, SessionOp<&Session::destroy_channel>::spec(0));
        set(CtrlOp::create_cq, SessionOp<&Session::create_cq>::spec(1));
        set(CtrlOp::destroy_cq, SessionOp<&Session::destroy_cq>::spec(0));
        set(CtrlOp::create_srq, SessionOp<&Session::create_srq>::spec(1));
        set(CtrlOp::modify_srq, SessionOp<&Session::modify_srq>::spec(kFdsInBody));
        set(CtrlOp::query_srq, SessionOp<&Session::query_srq>::spec(0));
        set(CtrlOp::destroy_srq, SessionOp<&Session::destroy_srq>::spec(0));
        set(CtrlOp::create_qp, SessionOp<&Session::create_qp>::spec(1));
        set(CtrlOp::modify_qp, SessionOp<&Session::modify_qp>::spec(0));
        set(CtrlOp::query_qp, SessionOp<&Session::query_qp>::spec(0));
        set(CtrlOp::destroy_qp, SessionOp<&Session::destroy_qp>::spec(0));
        set(CtrlOp::alloc_mw, SessionOp<&Session::alloc_mw>::spec(0));
        set(CtrlOp::dealloc_mw, SessionOp<&Session::dealloc_mw>::spec(0));
        return t;
    }();
    return op < table.size() && table[op] ? &*table[op] : nullptr;
}

// A request without a body is the header alone; the header followed by an empty
// Msg<Empty>'s padding is accepted as the same thing.
constexpr std::size_t kEmptyPadding = sizeof(shm::Msg<shm::Empty>) - sizeof(shm::CtrlHeader);

bool body_fits(std::size_t want, std::size_t got) {
    return got == want || (want == 0 && got == kEmptyPadding);
}

}  // namespace

std::size_t ControlServer::dispatch(Client& c, const shm::CtrlHeader& req, std::size_t body_len,
                                    FdList& fds, bool fds_truncated, const StatusFn& status) {
    using shm::CtrlOp;
    auto* hdr = reinterpret_cast<shm::CtrlHeader*>(out_.data());
    *hdr = shm::CtrlHeader{shm::kCtrlMagic, shm::kAbiVersion, req.op, req.seq, 0, sizeof *hdr, 0};
    std::byte* out_body = out_.data() + sizeof *hdr;
    const std::byte* in_body = in_.data() + sizeof req;
    auto finish = [&](int err, std::size_t reply_body) {
        hdr->status = err;
        hdr->length = static_cast<std::uint32_t>(sizeof *hdr + (err == 0 ? reply_body : 0));
        return std::size_t{hdr->length};
    };

    // Daemon-wide ops: no session, no descriptors.
    const auto op = static_cast<CtrlOp>(req.op);
    if (op == CtrlOp::status || op == CtrlOp::clients || op == CtrlOp::resources) {
        if (!body_fits(0, body_len)) return 0;
        if (fds_truncated || fds.size() != 0) return finish(EINVAL, 0);
        if (op == CtrlOp::clients) return finish(0, fill_clients(c.peer, out_body));
        if (op == CtrlOp::resources) return finish(0, fill_resources(out_body));
        auto* reply = reinterpret_cast<shm::StatusReply*>(out_.data());
        std::memset(out_body, 0, sizeof *reply - sizeof *hdr);
        status(*reply);
        return finish(0, sizeof *reply - sizeof *hdr);
    }
    if (op == CtrlOp::qps || op == CtrlOp::qp) {
        const std::size_t want = op == CtrlOp::qps ? sizeof(shm::QpsReq) : sizeof(shm::QpReq);
        if (!body_fits(want, body_len)) return 0;
        if (fds_truncated || fds.size() != 0) return finish(EINVAL, 0);
        if (op == CtrlOp::qps) return finish(0, fill_qps(c, in_body, out_body));
        return finish(fill_qp(c, in_body, out_body), sizeof(shm::QpReply));
    }

    if (op == CtrlOp::cm_status) {
        if (!body_fits(0, body_len)) return 0;
        if (fds_truncated || fds.size() != 0 || cm_ == nullptr) return finish(EINVAL, 0);
        shm::CmStatusReply r;
        // Root sees every user's ids; anyone else its own (as snicctl qp's sessions).
        cm_->fill_status(r, c.peer.uid == 0 ? std::nullopt : std::optional(c.peer.uid));
        std::memcpy(out_body, &r, sizeof r);
        return finish(0, sizeof r);
    }
    if (op == CtrlOp::tcp_conns) {
        if (!body_fits(sizeof(shm::TcpConnsReq), body_len)) return 0;
        if (fds_truncated || fds.size() != 0) return finish(EINVAL, 0);
        if (!tcp_rows_) return finish(ENOSYS, 0);
        shm::TcpConnsReq q{};
        std::memcpy(&q, in_body, sizeof q);
        auto* r = reinterpret_cast<shm::TcpConnsReply*>(out_body);
        std::memset(r, 0, sizeof *r);
        // Root sees every row; anyone else its own listeners and connections (as cm_status).
        const auto uid = c.peer.uid == 0 ? std::nullopt : std::optional(c.peer.uid);
        return finish(tcp_rows_(q, *r, uid), sizeof *r);
    }
    if (req.op >= static_cast<std::uint16_t>(CtrlOp::cm_open) &&
        req.op <= static_cast<std::uint16_t>(CtrlOp::cm_migrate)) {
        if (fds_truncated) return finish(EINVAL, 0);
        std::size_t reply = 0;
        bool malformed = false;
        const int err = dispatch_cm(c, op, in_body, body_len, fds, out_body, reply, malformed);
        if (malformed) return 0;
        return finish(err, reply);
    }

    const OpSpec* spec = session_op(req.op);
    if (spec == nullptr) {
        spdlog::debug("control: client pid {}: unknown op {}", c.peer.pid, req.op);
        return finish(EINVAL, 0);
    }
    if (!body_fits(spec->request, body_len)) return 0;
    if (fds_truncated) return finish(EINVAL, 0);  // more descriptors than any op takes
    if (spec->fds != kFdsInBody && fds.size() != static_cast<std::size_t>(spec->fds)) {
        spdlog::debug("control: client pid {}: op {} with {} fds, {} expected", c.peer.pid, req.op,
                      fds.size(), spec->fds);
        return finish(EINVAL, 0);
    }
    if (spec->needs_device && (!c.session || !c.session->opened())) return finish(EINVAL, 0);
    if (c.cm) return finish(EINVAL, 0);  // a CM connection opens no device
    if (!c.session) c.session = std::make_unique<Session>(resources_, devices_, c.peer);
    return finish(spec->run(*c.session, in_body, fds, out_body), spec->reply);
}

int ControlServer::dispatch_cm(Client& c, shm::CtrlOp op, const std::byte* in, std::size_t body_len,
                               FdList& fds, std::byte* out, std::size_t& reply, bool& malformed) {
    using shm::CtrlOp;
    // Each op: the request's size, then its run with the request copied out.
    auto run = [&]<class Req>(std::type_identity<Req>, auto&& f) -> int {
        if (!body_fits(body_size<Req>(), body_len)) {
            malformed = true;
            return EINVAL;
        }
        Req req{};
        if constexpr (body_size<Req>() != 0) std::memcpy(&req, in, sizeof req);
        return f(req);
    };
    auto answer = [&](const auto& rep) {
        std::memcpy(out, &rep, sizeof rep);
        reply = sizeof rep;
    };
    if (cm_ == nullptr) return ENOSYS;
    if (op == CtrlOp::cm_open) {
        return run(std::type_identity<shm::Empty>{}, [&](const shm::Empty&) {
            if (c.session || c.cm) return EINVAL;  // one kind of connection, opened once
            auto s = cm_->new_session(c.peer);
            if (const int err = s->open(fds, resources_); err != 0) return err;
            answer(shm::CmOpenReply{s->cookie()});
            c.cm = std::move(s);
            return 0;
        });
    }
    if (!c.cm || fds.size() != 0) return EINVAL;
    CmSession& s = *c.cm;
    switch (op) {
        case CtrlOp::cm_create_id:
            return run(std::type_identity<shm::CmCreateIdReq>{}, [&](const auto& r) {
                shm::CmIdReply rep{};
                const int err = s.create_id(r, rep);
                if (err == 0) answer(rep);
                return err;
            });
        case CtrlOp::cm_destroy_id:
            return run(std::type_identity<shm::HandleReq>{},
                       [&](const auto& r) { return s.destroy_id(r); });
        case CtrlOp::cm_bind:
            return run(std::type_identity<shm::CmBindReq>{}, [&](const auto& r) {
                shm::CmBindReply rep{};
                const int err = s.bind(r, rep);
                if (err == 0) answer(rep);
                return err;
            });
        case CtrlOp::cm_listen:
            return run(std::type_identity<shm::CmListenReq>{},
                       [&](const auto& r) { return s.listen(r); });
        case CtrlOp::cm_connect:
            return run(std::type_identity<shm::CmConnectReq>{},
                       [&](const auto& r) { return s.connect(r); });
        case CtrlOp::cm_accept:
            return run(std::type_identity<shm::CmAcceptReq>{},
                       [&](const auto& r) { return s.accept(r); });
        case CtrlOp::cm_reject:
            return run(std::type_identity<shm::CmRejectReq>{},
                       [&](const auto& r) { return s.reject(r); });
        case CtrlOp::cm_disconnect:
            return run(std::type_identity<shm::HandleReq>{},
                       [&](const auto& r) { return s.disconnect(r); });
        case CtrlOp::cm_migrate:
            return run(std::type_identity<shm::CmMigrateReq>{}, [&](const auto& r) {
                shm::CmIdReply rep{};
                const int err = s.migrate(r, rep);
                if (err == 0) answer(rep);
                return err;
            });
        default:
            return EINVAL;
    }
}

// Root sees every session; anyone else only the sessions of its own uid (their pids and
// devices are nobody else's business).
std::size_t ControlServer::fill_clients(const Peer& asker, std::byte* body) const {
    shm::ClientsReply r{};
    for (const Session* s : resources_.sessions()) {
        if (asker.uid != 0 && s->peer().uid != asker.uid) continue;
        ++r.nclients;
        if (r.listed < shm::kMaxClientsListed) r.clients[r.listed++] = s->info();
    }
    std::memcpy(body, &r, sizeof r);
    return sizeof r;
}

std::size_t ControlServer::fill_resources(std::byte* body) const {
    shm::ResourcesReply r{};
    r.sessions = static_cast<std::uint32_t>(resources_.sessions().size());
    const Limits& l = resources_.limits();
    for (std::size_t k = 0; k < shm::kObjKinds; ++k) {
        r.counts[k] = resources_.counts()[k];
        r.max_per_client[k] = l.objects[k].per_client;
        r.max_per_daemon[k] = l.objects[k].per_daemon;
    }
    const ClientMemoryStats m = client_memory_stats();
    r.mapped_bytes = m.mapped_bytes;
    r.mappings = m.mappings;
    r.fds = m.fds;
    r.max_fds_per_client = l.max_fds_per_client;
    r.max_fds_per_uid = l.max_fds_per_uid;
    r.faults_recovered = static_cast<std::uint32_t>(fault_guard::recovered());
    std::memcpy(body, &r, sizeof r);
    return sizeof r;
}

std::size_t ControlServer::fill_qps(const Client& c, const std::byte* req, std::byte* body) const {
    shm::QpsReq q;
    std::memcpy(&q, req, sizeof q);
    const auto rows = list_qps(resources_.sessions(), devices_, QpViewer{c.peer.uid});
    shm::QpsReply r;
    fill_qps_reply(rows, q.first_qpn, r);
    std::memcpy(body, &r, sizeof r);
    return sizeof r;
}

int ControlServer::fill_qp(const Client& c, const std::byte* req, std::byte* body) const {
    shm::QpReq q;
    std::memcpy(&q, req, sizeof q);
    shm::QpReply r;
    if (!dump_qp(resources_.sessions(), devices_, QpViewer{c.peer.uid}, q.qpn, r)) {
        spdlog::debug("control: client pid {} uid {}: no QP {} it may see", c.peer.pid, c.peer.uid,
                      q.qpn);
        return ENOENT;
    }
    std::memcpy(body, &r, sizeof r);
    return 0;
}

Result<std::vector<shm::QpSummary>> ControlServer::ask_qps(std::chrono::milliseconds timeout) {
    auto rows = questions_.ask<std::vector<shm::QpSummary>>(
        [this] { return list_qps(resources_.sessions(), devices_, QpViewer{0}); }, timeout);
    if (!rows) return make_error(ETIMEDOUT, "the control thread did not answer");
    return std::move(*rows);
}

Result<shm::QpReply> ControlServer::ask_qp(std::uint32_t qpn, std::chrono::milliseconds timeout) {
    auto reply = questions_.ask<std::optional<shm::QpReply>>(
        [this, qpn]() -> std::optional<shm::QpReply> {
            shm::QpReply r;
            if (!dump_qp(resources_.sessions(), devices_, QpViewer{0}, qpn, r)) return std::nullopt;
            return r;
        },
        timeout);
    if (!reply) return make_error(ETIMEDOUT, "the control thread did not answer");
    if (!*reply) return make_error(ENOENT, "no QP " + std::to_string(qpn));
    return **reply;
}

}  // namespace snic::daemon
