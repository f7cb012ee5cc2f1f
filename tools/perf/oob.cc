#include "tools/perf/oob.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "proto/net/byteorder.h"
#include "tools/perf/perf.h"

namespace snic::perf {

namespace {

// The exchange's messages, big-endian. First both sides send a WireHello (with -R, then the
// server a WireCmAddr), then one WireQp per QP; after that, 8-byte syncs (sync()) mark the
// points both sides must reach.
using snic::net::Be32;
using snic::net::Be64;
constexpr std::uint32_t kHelloMagic = 0x736e7066;  // "snpf"

struct WireHello {
    Be32 magic, test, sizes, first_size, iters, warmup, qps, mtu;
};
struct WireQp {
    Be32 qpn, psn;
    std::uint8_t gid[16];
    Be32 rkey;
    Be64 addr;
};
struct WireCmAddr {
    Be32 ip, port;
};
static_assert(sizeof(WireHello) == 32 && sizeof(WireQp) == 36 && sizeof(WireCmAddr) == 8);

WireHello hello_of(const Options& o, std::uint32_t mtu) {
    WireHello h;
    h.magic = kHelloMagic;
    h.test = static_cast<std::uint32_t>(o.test - kTests);
    h.sizes = static_cast<std::uint32_t>(o.sizes.size());
    h.first_size = o.sizes.front();
    h.iters = o.iters;
    h.warmup = o.warmup;
    h.qps = o.qps;
    h.mtu = mtu;
    return h;
}

}  // namespace

Oob::Oob(const Options& o) {
    if (!o.server) {
        const int ls = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (ls < 0) failf("socket: %s", std::strerror(errno));
        const int on = 1, off = 0;
        ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        ::setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(o.port);
        a.sin6_addr = in6addr_any;
        if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(ls, 1) != 0) {
            const int e = errno;
            ::close(ls);
            failf("cannot listen on TCP port %u: %s", o.port, std::strerror(e));
        }
        fd_ = ::accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
        ::close(ls);
        if (fd_ < 0) failf("accept: %s", std::strerror(errno));
    } else {
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const std::string port = std::to_string(o.port);
        if (const int e = ::getaddrinfo(o.server->c_str(), port.c_str(), &hints, &res); e != 0)
            failf("%s: %s", o.server->c_str(), gai_strerror(e));
        const auto until = Clock::now() + std::chrono::seconds(10);
        for (;;) {
            fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd_ >= 0 && ::connect(fd_, res->ai_addr, res->ai_addrlen) == 0) break;
            const int e = errno;
            if (fd_ >= 0) ::close(fd_);
            fd_ = -1;
            if (Clock::now() > until) {
                ::freeaddrinfo(res);
                failf("cannot connect to %s port %u: %s", o.server->c_str(), o.port,
                      std::strerror(e));
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the server is not up yet
        }
        ::freeaddrinfo(res);
    }
    const int on = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

Oob::~Oob() {
    if (fd_ >= 0) ::close(fd_);
}

void Oob::send_all(const void* p, std::size_t n) {
    const auto* c = static_cast<const char*>(p);
    while (n > 0) {
        const ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
        if (w <= 0) failf("the exchange with the peer broke: %s", std::strerror(errno));
        c += w;
        n -= static_cast<std::size_t>(w);
    }
}

void Oob::recv_all(void* p, std::size_t n) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
        const ssize_t r = ::recv(fd_, c, n, 0);
        if (r <= 0) failf("the peer went away during the exchange");
        c += r;
        n -= static_cast<std::size_t>(r);
    }
}

std::uint32_t Oob::hello(const Options& o, std::uint32_t mtu) {
    const WireHello mine = hello_of(o, mtu);
    send_all(&mine, sizeof mine);
    WireHello theirs;
    recv_all(&theirs, sizeof theirs);
    if (theirs.magic.host() != kHelloMagic) failf("the peer is not snic-perf %s", SNIC_VERSION);
    const auto differs = [&](const char* what, const Be32& a, const Be32& b) {
        if (a != b)
            failf("the peer runs %s %u, this side %u: give both the same options", what, b.host(),
                  a.host());
    };
    if (mine.test != theirs.test)
        failf("the peer runs %s, this side %s",
              kTests[std::min<std::size_t>(theirs.test.host(), std::size(kTests) - 1)].name.data(),
              o.test->name.data());
    differs("sizes", mine.sizes, theirs.sizes);
    differs("first size", mine.first_size, theirs.first_size);
    differs("iterations", mine.iters, theirs.iters);
    differs("warm-up iterations", mine.warmup, theirs.warmup);
    differs("QPs", mine.qps, theirs.qps);
    return std::min(mtu, theirs.mtu.host());
}

std::vector<PeerInfo> Oob::exchange(const std::vector<PeerInfo>& mine) {
    std::vector<WireQp> out;
    for (const PeerInfo& p : mine) {
        WireQp w{p.qpn, p.psn, {}, p.rkey, p.addr};
        std::memcpy(w.gid, p.gid, sizeof w.gid);
        out.push_back(w);
    }
    send_all(out.data(), out.size() * sizeof(WireQp));
    std::vector<WireQp> in(mine.size());  // the same count: hello() checked it
    recv_all(in.data(), in.size() * sizeof(WireQp));
    std::vector<PeerInfo> theirs;
    for (const WireQp& w : in) {
        PeerInfo p{w.qpn.host(), w.psn.host(), {}, w.rkey.host(), w.addr.host()};
        std::memcpy(p.gid, w.gid, sizeof p.gid);
        theirs.push_back(p);
    }
    return theirs;
}

void Oob::send_cm_addr(const sockaddr_in& a) {
    const WireCmAddr w{ntohl(a.sin_addr.s_addr), ntohs(a.sin_port)};
    send_all(&w, sizeof w);
}

sockaddr_in Oob::recv_cm_addr() {
    WireCmAddr w;
    recv_all(&w, sizeof w);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(w.ip.host());
    a.sin_port = htons(static_cast<std::uint16_t>(w.port.host()));
    return a;
}

bool Oob::peer_closed() const {
    char c;
    const ssize_t r = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::uint64_t Oob::sync(std::uint64_t mine) {
    send_all(&mine, sizeof mine);
    std::uint64_t theirs = 0;
    recv_all(&theirs, sizeof theirs);
    return theirs;
}

}  // namespace snic::perf
