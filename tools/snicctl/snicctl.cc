// snicctl: asks a running snicd what it holds, through its control socket: its ports and
// devices (status), its client sessions (clients), its resource counts (resources) and the
// sessions' QPs (qp).
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/net/addr.h"
#include "shm/cm.h"
#include "shm/control_abi.h"
#include "tools/snicctl/qp_view.h"

namespace {

constexpr int kTimeoutMs = 2000;

int usage(FILE* out, int code) {
    std::fputs(
        "usage: snicctl [-s SOCKET | -n NAME] status|clients|resources|cm|tcp|qp [-a] [QPN]\n"
        "  -s, --socket PATH   the daemon's control socket\n"
        "  -n, --name NAME     the daemon's name: socket /run/snic/NAME.sock (default snic)\n"
        "commands:\n"
        "  status     the daemon, its ports and their RDMA devices: per port its device, address,\n"
        "             MAC, MTU, link, devices, the checksum offloads it uses and its queues\n"
        "  clients    one line per client session: session N pid N uid N gid N device NAME\n"
        "             (root sees every session, anyone else those of its own uid)\n"
        "             pd N mr N mw N channel N cq N srq N qp N mapped BYTES fds N (the\n"
        "             descriptors snicd keeps for it: its notification sockets)\n"
        "  resources  one line per object kind: KIND count N per-client N per-daemon N;\n"
        "             then sessions N, mappings N, mapped_bytes N, fds N per-client N\n"
        "             per-uid N (kept in all, and the quotas), faults_recovered N\n"
        "  cm         rdma_cm: ids N, then state NAME N per id state (root counts every\n"
        "             user's ids, others their own), the CM service's counters, and per\n"
        "             port its MADs, retransmits and connections\n"
        "  tcp        snic's own TCP (iWARP's byte stream), as ss -tin shows it: one line per\n"
        "             listener (port N LISTEN local IP:PORT backlog N queued N) and per\n"
        "             connection: port N STATE local IP:PORT remote IP:PORT mss N cwnd N\n"
        "             ssthresh N srtt US rttvar US rto US retransmits N fast N timeouts N\n"
        "             bytes_sent N bytes_acked N bytes_received N segs_out N segs_in N\n"
        "             snd_wnd N rcv_wnd N (the windows offered by the peer and by snic)\n"
        "             (root sees every row, others those of their own rdma_cm ids)\n"
        "  qp         one line per QP: qpn N device NAME session N pid N uid N type T state S\n"
        "             dest_qpn N peer IP (root sees every session's QPs, others their own)\n"
        "  qp QPN     one QP (decimal or 0x hex): state, attributes, the engine's PSNs and\n"
        "             its non-zero counters (-a: all of them)\n",
        out);
    return code;
}

int fail(const std::string& msg) {
    std::fprintf(stderr, "snicctl: %s\n", msg.c_str());
    return 1;
}

std::string errno_text() {
    return std::strerror(errno);
}

struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
};

// Sends request `op` with `body` and receives its reply into `reply` (`size` bytes, the reply
// header first). Returns 0; the daemon's errno when it refused the request (not printed); or
// -1 after printing what else went wrong.
int exchange(const std::string& path, snic::shm::CtrlOp op, std::span<const std::byte> body,
             void* reply, std::size_t size) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail("socket: " + errno_text()), -1;
    Closer closer{fd};

    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return fail("socket path too long: " + path), -1;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        return fail("cannot connect to " + path + ": " + errno_text() + " (is snicd running?)"), -1;

    const std::size_t len = sizeof(snic::shm::CtrlHeader) + body.size();
    const snic::shm::CtrlHeader hdr{snic::shm::kCtrlMagic,
                                    snic::shm::kAbiVersion,
                                    static_cast<std::uint16_t>(op),
                                    1,
                                    0,
                                    static_cast<std::uint32_t>(len),
                                    0};
    std::vector<std::byte> req(len);
    std::memcpy(req.data(), &hdr, sizeof hdr);
    if (!body.empty()) std::memcpy(req.data() + sizeof hdr, body.data(), body.size());
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
        return fail("cannot send to " + path + ": " + errno_text()), -1;

    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kTimeoutMs) != 1) return fail("no answer from " + path), -1;
    const ssize_t n = ::recv(fd, reply, size, 0);
    snic::shm::CtrlHeader rep{};
    if (n >= static_cast<ssize_t>(sizeof rep)) std::memcpy(&rep, reply, sizeof rep);
    if (n < static_cast<ssize_t>(sizeof rep) || rep.magic != snic::shm::kCtrlMagic)
        return fail("malformed answer from " + path), -1;
    if (rep.status == EPROTO)
        return fail("ABI mismatch: snicd speaks version " + std::to_string(rep.abi_version) +
                    ", snicctl " + std::to_string(snic::shm::kAbiVersion)),
               -1;
    if (rep.status != 0) return rep.status;
    if (static_cast<std::size_t>(n) != size) return fail("malformed answer from " + path), -1;
    return 0;
}

// A body-less request whose every refusal is an error: 0, or 1 after printing why not.
int request(const std::string& path, snic::shm::CtrlOp op, void* reply, std::size_t size) {
    const int rc = exchange(path, op, {}, reply, size);
    if (rc > 0) return fail(std::string("snicd refused: ") + std::strerror(rc));
    return rc == 0 ? 0 : 1;
}

int status(const std::string& path) {
    static snic::shm::StatusReply reply;
    if (int rc = request(path, snic::shm::CtrlOp::status, &reply, sizeof reply); rc != 0) return rc;
    if (reply.nports > snic::shm::kMaxPorts) return fail("malformed answer from " + path);

    reply.name[sizeof reply.name - 1] = '\0';
    reply.version[sizeof reply.version - 1] = '\0';
    std::printf("snicd %s pid %u version %s ctrl %s\n", reply.name, reply.pid, reply.version,
                path.c_str());
    for (std::uint32_t i = 0; i < reply.nports; ++i) {
        auto& port = reply.ports[i];
        port.name[sizeof port.name - 1] = '\0';
        snic::net::MacAddr mac;
        std::memcpy(mac.bytes.data(), port.mac, 6);
        const snic::net::Ipv4Prefix ip{{port.ipv4}, port.prefix_length};
        std::string devices;
        for (std::uint32_t d = 0; d < port.ndevices && d < 2; ++d) {
            port.devices[d][sizeof port.devices[d] - 1] = '\0';
            devices += (devices.empty() ? "" : ",") + std::string(port.devices[d]);
        }
        const std::string offloads = snic::shm::offload_names(port.offloads);
        std::printf("port %u %s ip %s mac %s mtu %u link %s devices %s offloads %s queues %u\n",
                    port.port_id, port.name, ip.to_string().c_str(), mac.to_string().c_str(),
                    port.mtu, port.link_up ? "up" : "down", devices.empty() ? "-" : devices.c_str(),
                    offloads.c_str(), port.queues);
    }
    return 0;
}

int clients(const std::string& path) {
    static snic::shm::Msg<snic::shm::ClientsReply> reply;
    if (int rc = request(path, snic::shm::CtrlOp::clients, &reply, sizeof reply); rc != 0)
        return rc;
    const auto& r = reply.body;
    if (r.listed > snic::shm::kMaxClientsListed || r.listed > r.nclients)
        return fail("malformed answer from " + path);
    for (std::uint32_t i = 0; i < r.listed; ++i) {
        auto c = r.clients[i];
        c.device[sizeof c.device - 1] = '\0';
        std::string line = "session " + std::to_string(c.session) + " pid " +
                           std::to_string(c.pid) + " uid " + std::to_string(c.uid) + " gid " +
                           std::to_string(c.gid) + " device " +
                           (c.device[0] != '\0' ? c.device : "-");
        for (std::size_t k = 0; k < snic::shm::kObjKinds; ++k)
            line +=
                std::string(" ") + snic::shm::kObjKindNames[k] + " " + std::to_string(c.counts[k]);
        line += " mapped " + std::to_string(c.mapped_bytes) + " fds " + std::to_string(c.fds);
        std::printf("%s\n", line.c_str());
    }
    if (r.nclients > r.listed)
        std::printf("(%u more sessions not listed)\n", r.nclients - r.listed);
    return 0;
}

int resources(const std::string& path) {
    static snic::shm::Msg<snic::shm::ResourcesReply> reply;
    if (int rc = request(path, snic::shm::CtrlOp::resources, &reply, sizeof reply); rc != 0)
        return rc;
    const auto& r = reply.body;
    for (std::size_t k = 0; k < snic::shm::kObjKinds; ++k)
        std::printf("%s count %u per-client %u per-daemon %u\n", snic::shm::kObjKindNames[k],
                    r.counts[k], r.max_per_client[k], r.max_per_daemon[k]);
    std::printf(
        "sessions %u\nmappings %u\nmapped_bytes %llu\nfds %u per-client %u per-uid %u\n"
        "faults_recovered %u\n",
        r.sessions, r.mappings, static_cast<unsigned long long>(r.mapped_bytes), r.fds,
        r.max_fds_per_client, r.max_fds_per_uid, r.faults_recovered);
    return 0;
}

int cm(const std::string& path) {
    static snic::shm::Msg<snic::shm::CmStatusReply> reply;
    if (int rc = request(path, snic::shm::CtrlOp::cm_status, &reply, sizeof reply); rc != 0)
        return rc;
    const auto& r = reply.body;
    if (r.nports > snic::shm::kMaxPorts) return fail("malformed answer from " + path);
    std::printf("ids %u\n", r.ids);
    for (std::size_t k = 0; k < snic::shm::kCmIdStates; ++k)
        std::printf("state %s %llu\n", snic::shm::kCmIdStateNames[k],
                    static_cast<unsigned long long>(r.states[k]));
    std::printf(
        "connect_requests %llu no_listener %llu backlog_full %llu no_room %llu events %llu "
        "events_lost %llu\n",
        static_cast<unsigned long long>(r.connect_requests),
        static_cast<unsigned long long>(r.no_listener),
        static_cast<unsigned long long>(r.backlog_full), static_cast<unsigned long long>(r.no_room),
        static_cast<unsigned long long>(r.events), static_cast<unsigned long long>(r.events_lost));
    for (std::uint32_t i = 0; i < r.nports; ++i) {
        const auto& p = r.ports[i];
        std::printf(
            "port %u mads_rx %llu mads_tx %llu mads_bad %llu retransmits %llu "
            "duplicates %llu stale %llu half_open_refused %llu connections %llu\n",
            i, static_cast<unsigned long long>(p.mads_rx),
            static_cast<unsigned long long>(p.mads_tx), static_cast<unsigned long long>(p.mads_bad),
            static_cast<unsigned long long>(p.retransmits),
            static_cast<unsigned long long>(p.duplicates), static_cast<unsigned long long>(p.stale),
            static_cast<unsigned long long>(p.half_open_refused),
            static_cast<unsigned long long>(p.connections));
    }
    return 0;
}

// snicctl tcp: every port's rows, page by page.
int tcp(const std::string& path) {
    static snic::shm::StatusReply st;
    if (int rc = request(path, snic::shm::CtrlOp::status, &st, sizeof st); rc != 0) return rc;
    if (st.nports > snic::shm::kMaxPorts) return fail("malformed answer from " + path);
    for (std::uint32_t port = 0; port < st.nports; ++port) {
        snic::shm::TcpConnsReq req{port, 0};
        for (;;) {
            static snic::shm::Msg<snic::shm::TcpConnsReply> reply;
            const int rc = exchange(path, snic::shm::CtrlOp::tcp_conns,
                                    std::as_bytes(std::span(&req, 1)), &reply, sizeof reply);
            if (rc > 0)
                return fail(std::string("snicd refused: ") + std::strerror(rc) +
                            (rc == EINVAL ? " (is snicd older than snicctl?)" : ""));
            if (rc < 0) return 1;
            const auto& r = reply.body;
            if (r.listed > snic::shm::kMaxTcpConnsListed)
                return fail("malformed answer from " + path);
            for (std::uint32_t i = 0; i < r.listed; ++i)
                std::fputs(snic::snicctl::tcp_line(st.ports[port].port_id, r.conns[i]).c_str(),
                           stdout);
            if (r.more == 0 || r.listed == 0) break;
            req.first += r.listed;
        }
    }
    return 0;
}

// Why snicd refused a qp request, in one line.
int qp_refused(int err, const std::string& what) {
    if (err == ENOENT) return fail(what + (::getuid() == 0 ? "" : " (or it is not one of yours)"));
    if (err == EINVAL)  // what an snicd without the qp ops answers
        return fail(std::string("snicd refused: ") + std::strerror(err) +
                    " (is snicd older than snicctl?)");
    return fail(std::string("snicd refused: ") + std::strerror(err));
}

int qp_list(const std::string& path) {
    int err = 0;
    const auto rows = snic::snicctl::fetch_qps(
        [&](std::uint32_t first_qpn) -> std::optional<snic::shm::QpsReply> {
            const snic::shm::QpsReq req{first_qpn, 0};
            static snic::shm::Msg<snic::shm::QpsReply> reply;
            const int rc = exchange(path, snic::shm::CtrlOp::qps, std::as_bytes(std::span(&req, 1)),
                                    &reply, sizeof reply);
            if (rc != 0) {
                err = rc;
                return std::nullopt;
            }
            return reply.body;
        });
    if (err > 0) return qp_refused(err, "");
    if (err < 0) return 1;
    if (!rows) return fail("malformed answer from " + path);
    for (const auto& q : *rows) std::fputs(snic::snicctl::qp_line(q).c_str(), stdout);
    return 0;
}

int qp_show(const std::string& path, std::uint32_t qpn, bool all) {
    const snic::shm::QpReq req{qpn, 0};
    static snic::shm::Msg<snic::shm::QpReply> reply;
    const int rc = exchange(path, snic::shm::CtrlOp::qp, std::as_bytes(std::span(&req, 1)), &reply,
                            sizeof reply);
    if (rc > 0) return qp_refused(rc, "no QP " + std::to_string(qpn));
    if (rc < 0) return 1;
    if (reply.body.summary.qpn != qpn) return fail("malformed answer from " + path);
    std::fputs(snic::snicctl::qp_dump(reply.body, all).c_str(), stdout);
    return 0;
}

// snicctl qp [-a] [QPN]
int qp(const std::string& path, const std::vector<std::string_view>& args) {
    bool all = false;
    std::optional<std::uint32_t> qpn;
    for (std::string_view a : args) {
        if (a == "-a" || a == "--all") {
            all = true;
        } else if (!qpn && !a.starts_with("-")) {
            qpn = snic::snicctl::parse_qpn(a);
            if (!qpn) {
                std::fprintf(
                    stderr, "snicctl: qp: '%.*s' is not a QP number (decimal or 0x hex, 24 bits)\n",
                    static_cast<int>(a.size()), a.data());
                return 2;
            }
        } else {
            std::fprintf(stderr, "snicctl: qp: unexpected argument '%.*s'\n",
                         static_cast<int>(a.size()), a.data());
            return usage(stderr, 2);
        }
    }
    return qpn ? qp_show(path, *qpn, all) : qp_list(path);
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = "/run/snic/snic.sock";
    std::string command;
    std::vector<std::string_view> args;  // the command's own
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if ((a == "-s" || a == "--socket") && i + 1 < argc) {
            path = argv[++i];
        } else if ((a == "-n" || a == "--name") && i + 1 < argc) {
            path = std::string("/run/snic/") + argv[++i] + ".sock";
        } else if (a == "-h" || a == "--help") {
            return usage(stdout, 0);
        } else if (command.empty() && !a.starts_with("-")) {
            command = a;
        } else if (command == "qp") {
            args.push_back(a);
        } else {
            std::fprintf(stderr, "snicctl: unknown argument '%s'\n", argv[i]);
            return usage(stderr, 2);
        }
    }
    if (command == "status") return status(path);
    if (command == "clients") return clients(path);
    if (command == "resources") return resources(path);
    if (command == "cm") return cm(path);
    if (command == "tcp") return tcp(path);
    if (command == "qp") return qp(path, args);
    if (command.empty()) return usage(stderr, 2);
    std::fprintf(stderr, "snicctl: unknown command '%s'\n", command.c_str());
    return usage(stderr, 2);
}
