#include "daemon/control/kernel_neighbours.h"

#include <arpa/inet.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

namespace snic::daemon {
namespace {

// The states in which an entry's MAC may be used (as the kernel's own output path does).
constexpr std::uint16_t kUsable =
    NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;

}  // namespace

Result<std::unique_ptr<KernelNeighbours>> KernelNeighbours::open(int ifindex) {
    const int s = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
    if (s < 0)
        return make_error(errno,
                          std::string("cannot open an rtnetlink socket: ") + std::strerror(errno));
    sockaddr_nl addr{};
    addr.nl_family = AF_NETLINK;
    addr.nl_groups = RTMGRP_NEIGH | RTMGRP_IPV4_IFADDR | RTMGRP_LINK;
    if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        const int e = errno;
        ::close(s);
        return make_error(
            e, std::string("cannot listen to the kernel's neighbour table: ") + std::strerror(e));
    }
    std::unique_ptr<KernelNeighbours> n(new KernelNeighbours(ifindex, s));
    if (!n->request(RTM_GETNEIGH, NLM_F_DUMP, 0, false))
        return make_error(errno, std::string("cannot read the kernel's neighbour table: ") +
                                     std::strerror(errno));
    return n;
}

KernelNeighbours::~KernelNeighbours() {
    ::close(sock_);
}

void KernelNeighbours::ask(net::Ipv4Addr ip) {
    if (!asks_.push(ip.value)) {
        ++asks_lost_;
        return;
    }
    wakeup_.signal();
}

bool KernelNeighbours::next(net::Ipv4Addr& ip, net::MacAddr& mac) {
    Learnt l;
    if (!learnt_.pop(l)) return false;
    ip = net::Ipv4Addr{l.ip};
    mac = l.mac;
    return true;
}

bool KernelNeighbours::request(std::uint16_t type, std::uint16_t flags, std::uint32_t ip,
                               bool use) {
    struct {
        nlmsghdr h;
        ndmsg nd;
        rtattr dst;
        std::uint32_t addr;
    } req{};
    req.h.nlmsg_type = type;
    req.h.nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
    req.h.nlmsg_seq = ++seq_;
    req.nd.ndm_family = AF_INET;
    req.nd.ndm_ifindex = ifindex_;
    std::size_t len = NLMSG_LENGTH(sizeof(ndmsg));
    if (ip != 0) {
        req.dst.rta_type = NDA_DST;
        req.dst.rta_len = RTA_LENGTH(sizeof(std::uint32_t));
        req.addr = htonl(ip);
        len += RTA_SPACE(sizeof(std::uint32_t));
    }
    if (use) {
        req.nd.ndm_state = NUD_NONE;
        req.nd.ndm_flags = NTF_USE;
    }
    req.h.nlmsg_len = static_cast<std::uint32_t>(len);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    return ::sendto(sock_, &req, len, 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) ==
           static_cast<ssize_t>(len);
}

void KernelNeighbours::on_asks() {
    wakeup_.clear();
    std::uint32_t ip;
    while (asks_.pop(ip)) {
        // What the kernel knows now (its answer comes as an RTM_NEWNEIGH), and a resolution
        // if it knows nothing usable; an entry it has already is left as it is.
        request(RTM_GETNEIGH, 0, ip, false);
        request(RTM_NEWNEIGH, NLM_F_CREATE | NLM_F_REPLACE, ip, true);
    }
}

void KernelNeighbours::on_kernel() {
    alignas(nlmsghdr) std::array<std::uint8_t, 16384> buf;
    for (;;) {
        const ssize_t n = ::recv(sock_, buf.data(), buf.size(), 0);
        if (n < 0) {
            // ENOBUFS: the kernel dropped news while we were slow; the table is read again,
            // and the interface as it is now.
            if (errno == ENOBUFS) {
                request(RTM_GETNEIGH, NLM_F_DUMP, 0, false);
                if (interface_change_) interface_change_();
            }
            return;
        }
        if (n == 0) return;
        if (take(buf.data(), static_cast<std::size_t>(n)) && interface_change_) interface_change_();
    }
}

bool KernelNeighbours::take(const std::uint8_t* buf, std::size_t len) {
    bool news = false;
    for (auto* h = reinterpret_cast<const nlmsghdr*>(buf); NLMSG_OK(h, len);
         h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == RTM_NEWADDR || h->nlmsg_type == RTM_DELADDR ||
            h->nlmsg_type == RTM_NEWLINK) {
            news = news || about_interface(h);
            continue;
        }
        // Errors (a GET of an unknown address), deletions, the dump's end.
        if (h->nlmsg_type != RTM_NEWNEIGH) continue;
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ndmsg))) continue;
        const auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(h));
        if (nd->ndm_family != AF_INET || nd->ndm_ifindex != ifindex_ ||
            (nd->ndm_state & kUsable) == 0)
            continue;
        std::uint32_t ip = 0;
        const std::uint8_t* mac = nullptr;
        unsigned attr_len = static_cast<unsigned>(h->nlmsg_len - NLMSG_LENGTH(sizeof(ndmsg)));
        for (auto* a = reinterpret_cast<const rtattr*>(reinterpret_cast<const std::uint8_t*>(nd) +
                                                       NLMSG_ALIGN(sizeof(ndmsg)));
             RTA_OK(a, attr_len); a = RTA_NEXT(a, attr_len)) {
            if (a->rta_type == NDA_DST && RTA_PAYLOAD(a) == 4) {
                std::memcpy(&ip, RTA_DATA(a), 4);
                ip = ntohl(ip);
            } else if (a->rta_type == NDA_LLADDR && RTA_PAYLOAD(a) == 6) {
                mac = static_cast<const std::uint8_t*>(RTA_DATA(a));
            }
        }
        if (ip == 0 || mac == nullptr) continue;
        Learnt l{ip, {}};
        std::memcpy(l.mac.bytes.data(), mac, 6);
        if (!learnt_.push(l)) ++learnt_lost_;
    }
    return news;
}

bool KernelNeighbours::about_interface(const nlmsghdr* h) const {
    if (h->nlmsg_type == RTM_NEWLINK) {
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifinfomsg))) return false;
        return static_cast<const ifinfomsg*>(NLMSG_DATA(h))->ifi_index == ifindex_;
    }
    if (h->nlmsg_len < NLMSG_LENGTH(sizeof(ifaddrmsg))) return false;
    const auto* ifa = static_cast<const ifaddrmsg*>(NLMSG_DATA(h));
    return ifa->ifa_family == AF_INET && static_cast<int>(ifa->ifa_index) == ifindex_;
}

}  // namespace snic::daemon
