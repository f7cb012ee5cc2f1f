// libFuzzer target: the control socket itself (daemon/control/server.cc's ControlServer::handle and
// dispatch: recvmsg with SCM_RIGHTS, the framing checks, the op table), through a real Unix
// SOCK_SEQPACKET socket. Once per process a ControlServer is claimed in a fresh temporary
// directory and serves on a thread of its own (one fake port, as control_ops's, no DPDK, no
// CM service, no TCP rows), until exit. Each input connects up to three clients and sends up
// to 32 messages, each chosen by the input: a header with the right magic and ABI version or
// not, an op among the 37 of CtrlOp or any other, a length that matches the datagram or is
// off by a chosen amount, a body of the op's size or off by a chosen amount or of any size up
// to past the largest message, filled from the input (its first word optionally a handle an
// earlier reply gave); or raw bytes; each with 0 to 19 descriptors attached (memfds of any
// size, formatted as the rings the ops want or not, notification sockets, /dev/null, a pipe),
// more than any op takes included. A message may also be sent and its client closed unread,
// or its answer read only after other clients' messages were sent.
// Asserts, after each message (a reply or a hang-up within 5 s, never silence): a message
// too short, too long, of another magic or whose length is not its size gets the connection
// closed; another ABI gets EPROTO; a body of the wrong size for a known op gets the
// connection closed (the cm_* ops excepted: no CM service, ENOSYS first); otherwise a
// reply comes that echoes magic, ABI, op and seq, whose length is the bytes received, whose
// status is 0 or a positive errno (the one the protocol gives where it is fixed: EINVAL for an
// unknown op or descriptors to a daemon-wide op, ENOSYS for CM and TCP), and whose body on
// success is the op's reply. After the clients close, within 10 s: no connection, no session,
// no object counted, no client memory mapped, no client descriptor kept or counted for the
// uid, and the process has as many descriptors open as before the input.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <spdlog/spdlog.h>

#include "daemon/control/server.h"
#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"
#include "shm/control_abi.h"
#include "shm/ring.h"
#include "shm/wqe.h"
#include "tests/fuzz/daemon_support.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace snic;
using namespace snic::daemon;
using fuzz::Input;
using fuzz::memfd;
using fuzz::open_fds;
using shm::CtrlOp;

// The server answers in well under a millisecond.
constexpr int kReplyTimeoutMs = 5000;
constexpr auto kSettle = std::chrono::seconds(10);
constexpr std::size_t kClients = 3;
constexpr std::size_t kSteps = 32;
constexpr std::size_t kHdr = sizeof(shm::CtrlHeader);
// A header followed by an empty Msg<Empty>'s padding counts as a body-less request.
constexpr std::size_t kEmptyPadding = sizeof(shm::Msg<shm::Empty>) - kHdr;
constexpr std::uint16_t kLastOp = static_cast<std::uint16_t>(CtrlOp::tcp_conns);

// The server, once per process: serves on its own thread until exit, then is stopped and
// joined, and its directory removed.
class Served {
  public:
    Served() {
        spdlog::set_level(spdlog::level::off);  // every malformed message is logged
        char tmpl[] = "/tmp/snic-fuzz-ctl.XXXXXX";
        SNIC_FUZZ_REQUIRE(::mkdtemp(tmpl) != nullptr);
        dir_ = tmpl;
        path_ = dir_ + "/snicd.sock";
        auto s = ControlServer::claim(path_, 0600);
        SNIC_FUZZ_REQUIRE(s.ok());
        server_ = std::move(*s);
        server_->set_devices(fuzz::fake_ports());
        SNIC_FUZZ_REQUIRE(server_->listen().ok());
        thread_ = std::thread(
            [this] { server_->serve(stop_, [this](shm::StatusReply& r) { fill_status(r); }); });
    }
    ~Served() {
        stop_.store(true);
        thread_.join();
        server_.reset();  // unlinks the socket
        ::unlink((path_ + ".lock").c_str());
        ::rmdir(dir_.c_str());
    }
    ControlServer& server() { return *server_; }
    const std::string& path() const { return path_; }

  private:
    void fill_status(shm::StatusReply& r) const {
        std::snprintf(r.name, sizeof r.name, "snicd-fuzz");
        std::snprintf(r.version, sizeof r.version, "fuzz");
        r.pid = static_cast<std::uint32_t>(::getpid());
        r.nports = 1;
        std::snprintf(r.ports[0].name, sizeof r.ports[0].name, "fuzz0");
        std::snprintf(r.ports[0].devices[0], sizeof r.ports[0].devices[0], "snic_0");
        r.ports[0].ndevices = 1;
        r.ports[0].mtu = 1500;
        r.ports[0].link_up = 1;
    }

    std::string dir_, path_;
    std::unique_ptr<ControlServer> server_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

// One end of a notification socketpair (the other closed, as if the client had gone).
int notify_socket() {
    int sv[2];
    SNIC_FUZZ_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    ::close(sv[0]);
    return sv[1];
}

// One descriptor of a kind the input chooses.
int pick_fd(Input& in) {
    switch (in.u8() % 8) {
        case 0:
            return memfd(std::size_t{in.u16()} * 64);
        case 1: {  // open_device's context: the async ring
            const shm::ContextLayout l = shm::context_layout(shm::kAsyncCapacity);
            return memfd(l.bytes, [&](std::span<std::byte> m) {
                (void)shm::RingConsumer<shm::AsyncEvent>::init(m, shm::kAsyncCapacity);
            });
        }
        case 2: {  // a CQ's ring
            const std::uint32_t cap = 1u << (in.u8() % 6);
            const shm::Layout l = shm::cq_layout(cap);
            return memfd(l.bytes, [&](std::span<std::byte> m) {
                (void)shm::RingConsumer<shm::Cqe>::init(m.subspan(l.ring0), cap);
            });
        }
        case 3: {  // a QP's rings (or an SRQ's)
            const std::uint32_t cap = 1u << (in.u8() % 6);
            const shm::Layout l = shm::qp_layout(cap, cap);
            return memfd(l.bytes, [&](std::span<std::byte> m) {
                (void)shm::RingProducer<shm::SendWqe>::init(m.subspan(l.ring0, l.ring1 - l.ring0),
                                                            cap);
                (void)shm::RingProducer<shm::RecvWqe>::init(m.subspan(l.ring1), cap);
            });
        }
        case 4: {  // a channel's ring
            const shm::Layout l = shm::channel_layout(shm::kChannelCapacity);
            return memfd(l.bytes, [&](std::span<std::byte> m) {
                (void)shm::RingConsumer<std::uint32_t>::init(m.subspan(l.ring0),
                                                             shm::kChannelCapacity);
            });
        }
        case 5:
            return notify_socket();
        case 6: {
            const int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
            SNIC_FUZZ_REQUIRE(fd >= 0);
            return fd;
        }
        default: {
            int p[2];
            SNIC_FUZZ_REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
            ::close(p[1]);
            return p[0];
        }
    }
}

// The descriptors of one message: mostly 0 to 2, sometimes up to 3 more than any op takes.
std::vector<int> pick_fds(Input& in) {
    const std::uint8_t b = in.u8();
    const std::size_t n = b < 0xC0 ? b % 3 : b % (shm::kMaxFds + 4);
    std::vector<int> fds;
    for (std::size_t i = 0; i < n; ++i) fds.push_back(pick_fd(in));
    return fds;
}

// What the protocol says of an op: its request and reply bodies (from the ABI's types).
struct OpShape {
    enum Kind { unknown, daemon_wide, snicctl_qp, cm_status, tcp, cm, session } kind = unknown;
    std::size_t request = 0;
    std::size_t reply = 0;
};

template <class T>
constexpr std::size_t body_size() {
    return std::is_same_v<T, shm::Empty> ? 0 : sizeof(T);
}
template <class Req, class Rep>
OpShape session_shape(int (Session::*)(const Req&, FdList&, Rep&)) {
    return {OpShape::session, body_size<Req>(), body_size<Rep>()};
}

OpShape shape(std::uint16_t op) {
    switch (static_cast<CtrlOp>(op)) {
        case CtrlOp::status:
            return {OpShape::daemon_wide, 0, sizeof(shm::StatusReply) - kHdr};
        case CtrlOp::clients:
            return {OpShape::daemon_wide, 0, sizeof(shm::ClientsReply)};
        case CtrlOp::resources:
            return {OpShape::daemon_wide, 0, sizeof(shm::ResourcesReply)};
        case CtrlOp::qps:
            return {OpShape::snicctl_qp, sizeof(shm::QpsReq), sizeof(shm::QpsReply)};
        case CtrlOp::qp:
            return {OpShape::snicctl_qp, sizeof(shm::QpReq), sizeof(shm::QpReply)};
        case CtrlOp::cm_status:
            return {OpShape::cm_status, 0, 0};
        case CtrlOp::tcp_conns:
            return {OpShape::tcp, sizeof(shm::TcpConnsReq), sizeof(shm::TcpConnsReply)};
        case CtrlOp::open_device:
            return session_shape(&Session::open_device);
        case CtrlOp::query_port:
            return session_shape(&Session::query_port);
        case CtrlOp::alloc_pd:
            return session_shape(&Session::alloc_pd);
        case CtrlOp::dealloc_pd:
            return session_shape(&Session::dealloc_pd);
        case CtrlOp::reg_mr:
            return session_shape(&Session::reg_mr);
        case CtrlOp::dereg_mr:
            return session_shape(&Session::dereg_mr);
        case CtrlOp::create_channel:
            return session_shape(&Session::create_channel);
        case CtrlOp::destroy_channel:
            return session_shape(&Session::destroy_channel);
        case CtrlOp::create_cq:
            return session_shape(&Session::create_cq);
        case CtrlOp::destroy_cq:
            return session_shape(&Session::destroy_cq);
        case CtrlOp::create_srq:
            return session_shape(&Session::create_srq);
        case CtrlOp::modify_srq:
            return session_shape(&Session::modify_srq);
        case CtrlOp::query_srq:
            return session_shape(&Session::query_srq);
        case CtrlOp::destroy_srq:
            return session_shape(&Session::destroy_srq);
        case CtrlOp::create_qp:
            return session_shape(&Session::create_qp);
        case CtrlOp::modify_qp:
            return session_shape(&Session::modify_qp);
        case CtrlOp::query_qp:
            return session_shape(&Session::query_qp);
        case CtrlOp::destroy_qp:
            return session_shape(&Session::destroy_qp);
        case CtrlOp::alloc_mw:
            return session_shape(&Session::alloc_mw);
        case CtrlOp::dealloc_mw:
            return session_shape(&Session::dealloc_mw);
        default:
            break;
    }
    if (op >= static_cast<std::uint16_t>(CtrlOp::cm_open) &&
        op <= static_cast<std::uint16_t>(CtrlOp::cm_migrate))
        return {OpShape::cm, 0, 0};
    return {};
}

// Ops whose successful reply starts with a handle of the session's.
bool gives_handle(std::uint16_t op) {
    switch (static_cast<CtrlOp>(op)) {
        case CtrlOp::alloc_pd:
        case CtrlOp::reg_mr:
        case CtrlOp::alloc_mw:
        case CtrlOp::create_channel:
        case CtrlOp::create_cq:
        case CtrlOp::create_srq:
        case CtrlOp::create_qp:
            return true;
        default:
            return false;
    }
}

bool body_fits(std::size_t want, std::size_t got) {
    return got == want || (want == 0 && got == kEmptyPadding);
}

// What must come back for one message.
struct Expect {
    bool hang_up = false;  // the connection closed, no reply
    bool reply = false;    // a reply (else either)
    int status = -1;       // this status (-1: 0 or any errno)
    std::uint16_t op = 0;
    std::uint32_t seq = 0;
    std::size_t reply_body = 0;  // on success
    bool body_known = false;
};

Expect expect(std::span<const std::uint8_t> msg, std::size_t nfds) {
    Expect e;
    if (msg.size() < kHdr || msg.size() > shm::kCtrlMaxMessage) {
        e.hang_up = true;
        return e;
    }
    shm::CtrlHeader h;
    std::memcpy(&h, msg.data(), kHdr);
    if (h.magic != shm::kCtrlMagic || h.length != msg.size()) {
        e.hang_up = true;
        return e;
    }
    e.op = h.op;
    e.seq = h.seq;
    e.reply = true;
    if (h.abi_version != shm::kAbiVersion) {
        e.status = EPROTO;
        return e;
    }
    const bool truncated = nfds > shm::kMaxFds;
    const std::size_t body = msg.size() - kHdr;
    const OpShape s = shape(h.op);
    switch (s.kind) {
        case OpShape::unknown:
            e.status = EINVAL;
            break;
        case OpShape::cm:  // no CM service: ENOSYS before the body is looked at
            e.status = truncated ? EINVAL : ENOSYS;
            break;
        case OpShape::daemon_wide:
        case OpShape::snicctl_qp:
        case OpShape::cm_status:
        case OpShape::tcp:
        case OpShape::session:
            if (!body_fits(s.request, body)) {
                e = Expect{};
                e.hang_up = true;
                return e;
            }
            e.reply_body = s.reply;
            e.body_known = true;
            if (s.kind == OpShape::session) {
                if (truncated) e.status = EINVAL;
            } else if (s.kind == OpShape::cm_status) {
                e.status = EINVAL;  // no CM service
            } else if (nfds != 0) {
                e.status = EINVAL;
            } else if (s.kind == OpShape::tcp) {
                e.status = ENOSYS;  // no TCP rows
            } else if (s.kind == OpShape::daemon_wide ||
                       h.op == static_cast<std::uint16_t>(CtrlOp::qps)) {
                e.status = 0;
            }
            break;
    }
    return e;
}

struct Client {
    int sock = -1;
    std::vector<std::uint32_t> handles;  // from its replies
    std::optional<Expect> pending;       // a message sent whose answer is not read yet
};

void connect_client(Client& c, const std::string& path) {
    c.sock = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    SNIC_FUZZ_REQUIRE(c.sock >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    int rc;
    do {  // a blocking connect (the listener's queue full) is cut short by a signal too
        rc = ::connect(c.sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    } while (rc != 0 && errno == EINTR);
    SNIC_FUZZ_REQUIRE(rc == 0);
    c.handles.clear();
}

void close_client(Client& c) {
    if (c.sock >= 0) ::close(c.sock);
    c.sock = -1;
    c.handles.clear();
    c.pending.reset();
}

void send_msg(Client& c, std::span<const std::uint8_t> msg, const std::vector<int>& fds) {
    iovec iov{const_cast<std::uint8_t*>(msg.data()), msg.size()};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    std::vector<std::byte> control(CMSG_SPACE(sizeof(int) * (fds.empty() ? 1 : fds.size())));
    if (!fds.empty()) {
        mh.msg_control = control.data();
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
        cmsghdr* cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
        std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t sent = ::sendmsg(c.sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    // One message at a time on a connection the server has not closed: it always fits.
    SNIC_FUZZ_REQUIRE(sent == static_cast<ssize_t>(msg.size()));
}

// Whether `fd` becomes readable (or hangs up) within kReplyTimeoutMs. A signal cuts poll
// short with EINTR whatever its handler's flags: libFuzzer's SIGALRM, every -timeout/2 + 1
// seconds to the main thread, lands in this wait now and then (once in some 130,000 runs
// with -timeout=25, then taken for a message the server never answered); the wait goes on
// for the time left.
bool wait_readable(int fd) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kReplyTimeoutMs);
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        pollfd p{fd, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
        if (ready == 1) return true;
        if (ready == 0 || errno != EINTR) return false;
    }
}

// Waits for the answer to one message and checks it against `e`; false when the server hung up.
bool check_answer(Client& c, const Expect& e) {
    SNIC_FUZZ_REQUIRE(wait_readable(c.sock));  // neither a reply nor a hang-up: the server hangs
    std::vector<std::uint8_t> buf(shm::kCtrlMaxMessage + 64);
    iovec iov{buf.data(), buf.size()};
    alignas(cmsghdr) std::byte control[CMSG_SPACE(sizeof(int) * shm::kMaxFds)];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(c.sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    // Descriptors passed back (none expected) are closed.
    std::size_t fds_back = 0;
    if (n >= 0)
        for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm != nullptr; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
            const std::size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (std::size_t i = 0; i < count; ++i) {
                int fd;
                std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
                ::close(fd);
                ++fds_back;
            }
        }
    if (n == 0 || (n < 0 && errno == ECONNRESET)) {
        SNIC_FUZZ_REQUIRE(!e.reply);  // a message it had to answer
        return false;
    }
    SNIC_FUZZ_REQUIRE(n > 0);
    SNIC_FUZZ_REQUIRE(!e.hang_up);  // answered a message that must close the connection
    SNIC_FUZZ_REQUIRE(fds_back == 0);
    SNIC_FUZZ_REQUIRE((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0);
    const auto len = static_cast<std::size_t>(n);
    SNIC_FUZZ_REQUIRE(len >= kHdr && len <= shm::kCtrlMaxMessage);
    shm::CtrlHeader h;
    std::memcpy(&h, buf.data(), kHdr);
    SNIC_FUZZ_REQUIRE(h.magic == shm::kCtrlMagic);
    SNIC_FUZZ_REQUIRE(h.abi_version == shm::kAbiVersion);
    SNIC_FUZZ_REQUIRE(h.op == e.op);
    SNIC_FUZZ_REQUIRE(h.seq == e.seq);
    SNIC_FUZZ_REQUIRE(h.length == len);
    SNIC_FUZZ_REQUIRE(h.status >= 0 && h.status < 4096);
    if (e.status >= 0) SNIC_FUZZ_REQUIRE(h.status == e.status);
    if (h.status != 0) {
        SNIC_FUZZ_REQUIRE(len == kHdr);
    } else {
        SNIC_FUZZ_REQUIRE(e.body_known);  // success where the protocol has only errors
        SNIC_FUZZ_REQUIRE(len == kHdr + e.reply_body);
        if (gives_handle(h.op) && c.handles.size() < 64) {
            std::uint32_t handle;
            std::memcpy(&handle, buf.data() + kHdr, sizeof handle);
            c.handles.push_back(handle);
        }
    }
    return true;
}

// Reads the answer left pending.
void resolve(Client& c) {
    const Expect e = *c.pending;
    c.pending.reset();
    if (!check_answer(c, e)) close_client(c);
}

// One message of the input's choosing: a header and a body, or raw bytes.
std::vector<std::uint8_t> make_message(Input& in, const Client& c, std::uint32_t seq,
                                       bool& close_unread) {
    const std::uint8_t kind = in.u8();
    std::vector<std::uint8_t> msg;
    if ((kind & 0x0F) == 0x0F) {  // raw bytes
        const std::size_t len = in.u16() % (shm::kCtrlMaxMessage + 64);
        const auto b = in.bytes(len);
        msg.assign(b.begin(), b.end());
        close_unread = (kind & 0x80) != 0;
        return msg;
    }
    const std::uint8_t sel = in.u8();
    const std::uint16_t op =
        sel == 0xFF ? in.u16() : static_cast<std::uint16_t>(sel % (kLastOp + 3));
    const std::uint8_t flags = in.u8();
    std::size_t body = shape(op).request;
    switch ((flags >> 4) & 3) {
        case 0:
            break;
        case 1: {  // off by a little (-8..8), or by a multiple of 4 up to 256 either way
            const std::uint8_t b = in.u8();
            const int d = b < 0x80 ? b % 17 - 8 : (b - 0xC0) * 4;
            body = d < 0 && static_cast<std::size_t>(-d) > body
                       ? 0
                       : body + static_cast<std::size_t>(d);
            break;
        }
        case 2:
            body = in.u16() % (shm::kCtrlMaxMessage + 64 - kHdr);
            break;
        default:
            body = kEmptyPadding;
            break;
    }
    shm::CtrlHeader h{
        shm::kCtrlMagic, shm::kAbiVersion, op, seq, 0, static_cast<std::uint32_t>(kHdr + body), 0};
    if ((flags & 1) != 0) h.magic ^= in.u32() | 1;
    if ((flags & 2) != 0) h.abi_version = in.u16();
    switch ((flags >> 2) & 3) {
        case 0:
            break;
        case 1:
            h.length += static_cast<std::uint32_t>(static_cast<std::int8_t>(in.u8()));
            break;
        case 2:
            h.length = in.u32();
            break;
        default:
            h.status = static_cast<std::int32_t>(in.u32());  // ignored in requests
            h.reserved = in.u32();
            break;
    }
    msg.resize(kHdr + body);
    std::memcpy(msg.data(), &h, kHdr);
    const auto b = in.bytes(body);
    std::memcpy(msg.data() + kHdr, b.data(), b.size());
    // Often aim the body's first word at a handle an earlier reply gave, and sometimes the
    // next two as well (create_qp's PD, send CQ and receive CQ).
    if ((flags & 0x40) != 0 && body >= 4 && !c.handles.empty()) {
        const std::uint8_t pick = in.u8();
        const std::size_t words = (pick & 0x80) != 0 && body >= 12 ? 3 : 1;
        for (std::size_t w = 0; w < words; ++w) {
            const std::uint32_t handle = c.handles[(w == 0 ? pick : in.u8()) % c.handles.size()];
            std::memcpy(msg.data() + kHdr + 4 * w, &handle, sizeof handle);
        }
    }
    close_unread = (flags & 0x80) != 0;
    return msg;
}

// What the server holds, asked on its thread.
struct Held {
    std::size_t connections = 0;
    std::size_t sessions = 0;
    std::uint64_t objects = 0;
    std::uint32_t fds_of_uid = 0;
    ClientMemoryStats memory{};
    bool none() const {
        return connections == 0 && sessions == 0 && objects == 0 && fds_of_uid == 0 &&
               memory.mapped_bytes == 0 && memory.mappings == 0 && memory.fds == 0;
    }
};

Held held(ControlServer& s) {
    auto h = s.ask<Held>(
        [&s] {
            Held r;
            r.connections = s.connections();
            r.sessions = s.resources().sessions().size();
            for (std::size_t k = 0; k < shm::kObjKinds; ++k) r.objects += s.resources().counts()[k];
            r.fds_of_uid = s.resources().fds_of_uid(static_cast<std::uint32_t>(::getuid()));
            r.memory = client_memory_stats();
            return r;
        },
        std::chrono::milliseconds(kReplyTimeoutMs));
    SNIC_FUZZ_REQUIRE(h.has_value());  // the control thread answers while it serves
    return *h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static Served served;
    const std::size_t fds_before = open_fds();
    std::uint32_t seq = 0;
    Input in(data, size);
    std::array<Client, kClients> clients;
    for (std::size_t step = 0; step < kSteps && !in.empty(); ++step) {
        const std::uint8_t who = in.u8();
        Client& c = clients[(who & 0x7F) % kClients];
        if (c.pending) resolve(c);
        if (c.sock < 0) connect_client(c, served.path());
        bool close_unread = false;
        const std::vector<std::uint8_t> msg = make_message(in, c, ++seq, close_unread);
        const std::vector<int> fds = pick_fds(in);
        const Expect e = expect(msg, fds.size());
        send_msg(c, msg, fds);
        for (const int fd : fds) ::close(fd);  // the server has its own copies now
        if (close_unread) {
            close_client(c);
            continue;
        }
        if ((who & 0x80) != 0) {  // read later: several clients' messages wait at once
            c.pending = e;
            continue;
        }
        if (!check_answer(c, e)) close_client(c);
    }
    for (Client& c : clients) {
        if (c.pending) resolve(c);
        close_client(c);
    }
    // A connection closed right after its message may still wait in the listener's queue,
    // counted nowhere yet. The server accepts in the queue's order: once a last connection's
    // status request is answered, it has accepted every one before it, and the wait below
    // sees them released.
    {
        Client last;
        connect_client(last, served.path());
        const shm::CtrlHeader h{shm::kCtrlMagic,
                                shm::kAbiVersion,
                                static_cast<std::uint16_t>(CtrlOp::status),
                                ++seq,
                                0,
                                static_cast<std::uint32_t>(kHdr),
                                0};
        std::array<std::uint8_t, kHdr> msg;
        std::memcpy(msg.data(), &h, kHdr);
        send_msg(last, msg, {});
        SNIC_FUZZ_REQUIRE(check_answer(last, expect(msg, 0)));
        close_client(last);
    }

    // Everything the connections held is released, soon: poll the server until then.
    const auto deadline = std::chrono::steady_clock::now() + kSettle;
    Held h = held(served.server());
    std::size_t fds_now = open_fds();
    while ((!h.none() || fds_now != fds_before) && std::chrono::steady_clock::now() < deadline) {
        ::poll(nullptr, 0, 1);
        h = held(served.server());
        fds_now = open_fds();
    }
    SNIC_FUZZ_REQUIRE(h.connections == 0);
    SNIC_FUZZ_REQUIRE(h.sessions == 0);
    SNIC_FUZZ_REQUIRE(h.objects == 0);
    SNIC_FUZZ_REQUIRE(h.fds_of_uid == 0);
    SNIC_FUZZ_REQUIRE(h.memory.mapped_bytes == 0 && h.memory.mappings == 0 && h.memory.fds == 0);
    SNIC_FUZZ_REQUIRE(fds_now == fds_before);
    return 0;
}
