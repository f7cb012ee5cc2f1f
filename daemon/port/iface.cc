#include "daemon/port/iface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

namespace snic::daemon {

Result<IfaceFacts> iface_facts(const std::string& name, std::optional<net::Ipv4Addr> keep) {
    IfaceFacts f;
    f.index = static_cast<int>(::if_nametoindex(name.c_str()));
    if (f.index == 0)
        return make_error(ENODEV, "no interface " + name + " in this network namespace");

    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0)
        return make_error(errno, std::string("cannot list the addresses: ") + std::strerror(errno));
    bool found = false;
    for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
        if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name)
            continue;
        const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
        const auto* mask = reinterpret_cast<const sockaddr_in*>(a->ifa_netmask);
        const net::Ipv4Prefix ip{
            net::Ipv4Addr{ntohl(in->sin_addr.s_addr)},
            mask != nullptr ? static_cast<std::uint8_t>(std::popcount(mask->sin_addr.s_addr))
                            : std::uint8_t{32}};
        const bool kept = keep && ip.addr == *keep;
        if (!found || kept) f.ip = ip;
        found = true;
        if (kept || !keep) break;
    }
    ::freeifaddrs(list);
    if (!found) return make_error(EADDRNOTAVAIL, "interface " + name + " has no IPv4 address");

    const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return make_error(errno, std::string("socket: ") + std::strerror(errno));
    ifreq req{};
    std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
    const int rc = ::ioctl(s, SIOCGIFMTU, &req);
    const int e = errno;
    ::close(s);
    if (rc != 0) return make_error(e, "cannot read " + name + "'s MTU: " + std::strerror(e));
    f.mtu = static_cast<std::uint16_t>(req.ifr_mtu);
    return f;
}

}  // namespace snic::daemon
