#include "daemon/port/tcp_ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace snic::daemon {

int SharedTcpPorts::bind_port(std::uint32_t ip, std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(ip);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        const int e = errno;
        ::close(fd);
        return -e;
    }
    return fd;
}

SharedTcpPorts::~SharedTcpPorts() {
    for (auto& [port, h] : ports_) {
        (void)maps_.hold_tcp_port(port, false);
        ::close(h.fd);
    }
}

int SharedTcpPorts::hold(std::uint16_t port) {
    if (port == 0) return EINVAL;
    if (auto it = ports_.find(port); it != ports_.end()) {
        ++it->second.holds;
        return 0;
    }
    const int fd = bind_port(ip_, port);
    if (fd < 0) {
        spdlog::debug("shared port: TCP port {} is the kernel's: {}", port, std::strerror(-fd));
        return -fd;
    }
    if (auto st = maps_.hold_tcp_port(port, true); !st) {
        spdlog::warn("shared port: TCP port {}: {}", port, st.error().message);
        ::close(fd);
        return st.error().code;
    }
    ports_.emplace(port, Held{fd, 1});
    return 0;
}

void SharedTcpPorts::release(std::uint16_t port) {
    auto it = ports_.find(port);
    if (it == ports_.end() || --it->second.holds != 0) return;
    if (auto st = maps_.hold_tcp_port(port, false); !st)
        spdlog::warn("shared port: TCP port {}: {}", port, st.error().message);
    ::close(it->second.fd);
    ports_.erase(it);
}

void SharedTcpPorts::readdress(std::uint32_t ip) {
    ip_ = ip;
    for (auto& [port, h] : ports_) {
        const int fd = bind_port(ip, port);
        if (fd < 0) {
            spdlog::warn("shared port: TCP port {} is the kernel's on the new address: {}", port,
                         std::strerror(-fd));
            continue;
        }
        ::close(h.fd);
        h.fd = fd;
    }
}

}  // namespace snic::daemon
