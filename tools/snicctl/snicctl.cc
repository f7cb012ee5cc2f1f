// snicctl: asks a running snicd what it holds, through its control socket.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "proto/net/addr.h"
#include "shm/control.h"

namespace {

constexpr int kTimeoutMs = 2000;

int usage(FILE* out, int code) {
    std::fputs(
        "usage: snicctl [-s SOCKET | -n NAME] status\n"
        "  -s, --socket PATH   the daemon's control socket\n"
        "  -n, --name NAME     the daemon's name: socket /run/snic/NAME.sock (default snic)\n",
        out);
    return code;
}

int fail(const std::string& msg) {
    std::fprintf(stderr, "snicctl: %s\n", msg.c_str());
    return 1;
}

std::string errno_text() { return std::strerror(errno); }

int status(const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail("socket: " + errno_text());
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};

    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) return fail("socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
        return fail("cannot connect to " + path + ": " + errno_text() + " (is snicd running?)");

    const snic::shm::CtrlHeader req{snic::shm::kCtrlMagic, snic::shm::kAbiVersion,
                                    static_cast<std::uint16_t>(snic::shm::CtrlOp::status), 1, 0,
                                    sizeof(snic::shm::CtrlHeader), 0};
    if (::send(fd, &req, sizeof req, MSG_NOSIGNAL) != sizeof req)
        return fail("cannot send to " + path + ": " + errno_text());

    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kTimeoutMs) != 1) return fail("no answer from " + path);
    static snic::shm::StatusReply reply;
    const ssize_t n = ::recv(fd, &reply, sizeof reply, 0);
    if (n < static_cast<ssize_t>(sizeof reply.hdr) || reply.hdr.magic != snic::shm::kCtrlMagic)
        return fail("malformed answer from " + path);
    if (reply.hdr.status == EPROTO)
        return fail("ABI mismatch: snicd speaks version " + std::to_string(reply.hdr.abi_version) +
                    ", snicctl " + std::to_string(snic::shm::kAbiVersion));
    if (reply.hdr.status != 0) return fail(std::string("snicd refused: ") + std::strerror(reply.hdr.status));
    if (n != sizeof reply || reply.nports > snic::shm::kMaxPorts)
        return fail("malformed answer from " + path);

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
        std::printf("port %u %s ip %s mac %s mtu %u link %s devices %s\n", port.port_id, port.name,
                    ip.to_string().c_str(), mac.to_string().c_str(), port.mtu,
                    port.link_up ? "up" : "down", devices.empty() ? "-" : devices.c_str());
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::string path = "/run/snic/snic.sock";
    std::string command;
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
        } else {
            std::fprintf(stderr, "snicctl: unknown argument '%s'\n", argv[i]);
            return usage(stderr, 2);
        }
    }
    if (command == "status") return status(path);
    if (command.empty()) return usage(stderr, 2);
    std::fprintf(stderr, "snicctl: unknown command '%s'\n", command.c_str());
    return usage(stderr, 2);
}
