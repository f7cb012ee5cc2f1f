// snic-kping: kernel TCP and UDP ping-pong, what a user would use instead of RDMA; the
// benchmark (scripts/bench.sh) runs it over a veth pair between two namespaces.
//
//   snic-kping server [--tcp|--udp] [-p PORT] [-B ADDR] [--forever]
//   snic-kping client [--tcp|--udp] [-p PORT] -s SIZE [-n ITERS] [-w WARMUP] [--json]
//                     [--samples FILE] HOST
//
// The client sends a message of SIZE bytes and waits until all of it has come back, ITERS
// times, and prints the round trips (min, median, mean, p99, p99.9, max in microseconds;
// common/latency.h). TCP runs with TCP_NODELAY; a UDP message is one datagram (at most
// 65507 bytes). Blocking sockets, as a kernel user would write it. The server answers one
// client (TCP) or one run (UDP: until a zero-length datagram), or all of them with
// --forever. Exit 0, 1 on a failure, 2 on a usage error.
#include <arpa/inet.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/latency.h"
#include "tools/common/cli.h"

namespace {

constexpr const char* kProg = "snic-kping";
constexpr std::uint32_t kUdpMax = 65507;
constexpr std::uint32_t kTcpMax = 64u << 20;

struct Options {
    bool server = false;
    bool udp = false;
    std::uint16_t port = 19000;
    std::string bind_addr;
    std::string host;
    std::uint32_t size = 0;
    std::uint32_t iters = 1000;
    std::uint32_t warmup = 100;
    bool json = false;
    bool forever = false;
    std::string samples;
};

[[noreturn]] void usage_error(const std::string& why) {
    snic::cli::usage_error(kProg, why);
}

[[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", kProg, why.c_str());
    std::exit(1);
}

std::string sys(const char* what) {
    return std::string(what) + ": " + std::strerror(errno);
}

std::uint64_t number(const char* s, const char* what, std::uint64_t lo, std::uint64_t hi) {
    return snic::cli::number(kProg, s, what, lo, hi);
}

void usage() {
    std::printf(
        "usage: %s server [--tcp|--udp] [-p PORT] [-B ADDR] [--forever]\n"
        "       %s client [--tcp|--udp] [-p PORT] -s SIZE [-n ITERS] [-w WARMUP] [--json]\n"
        "                 [--samples FILE] HOST\n"
        "Kernel TCP (TCP_NODELAY) or UDP ping-pong; the client prints round trips in us.\n",
        kProg, kProg);
}

Options parse(int argc, char** argv) {
    if (argc < 2) usage_error("server or client?");
    if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        usage();
        std::exit(0);
    }
    Options o;
    if (!std::strcmp(argv[1], "server")) {
        o.server = true;
    } else if (std::strcmp(argv[1], "client") != 0) {
        usage_error(std::string("unknown mode '") + argv[1] + "'");
    }
    enum { kTcp = 256, kUdp, kJson, kForever, kSamples };
    static const option longs[] = {
        {"tcp", no_argument, nullptr, kTcp},
        {"udp", no_argument, nullptr, kUdp},
        {"json", no_argument, nullptr, kJson},
        {"forever", no_argument, nullptr, kForever},
        {"samples", required_argument, nullptr, kSamples},
        {"help", no_argument, nullptr, 'h'},
        {nullptr, 0, nullptr, 0},
    };
    opterr = 0;
    optind = 2;
    bool size_set = false;
    for (int c; (c = getopt_long(argc, argv, ":p:B:s:n:w:h", longs, nullptr)) != -1;) {
        switch (c) {
            case kTcp:
                o.udp = false;
                break;
            case kUdp:
                o.udp = true;
                break;
            case kJson:
                o.json = true;
                break;
            case kForever:
                o.forever = true;
                break;
            case kSamples:
                o.samples = optarg;
                break;
            case 'p':
                o.port = static_cast<std::uint16_t>(number(optarg, "port", 1, 65535));
                break;
            case 'B':
                o.bind_addr = optarg;
                break;
            case 's':
                o.size = static_cast<std::uint32_t>(number(optarg, "size", 1, kTcpMax));
                size_set = true;
                break;
            case 'n':
                o.iters = static_cast<std::uint32_t>(number(optarg, "iterations", 1, 100'000'000));
                break;
            case 'w':
                o.warmup = static_cast<std::uint32_t>(number(optarg, "warm-up", 0, 10'000'000));
                break;
            case 'h':
                usage();
                std::exit(0);
            case ':':
                usage_error(std::string("option ") + argv[optind - 1] + " needs a value");
            default:
                usage_error(std::string("unknown option ") + argv[optind - 1]);
        }
    }
    if (!o.server) {
        if (optind >= argc) usage_error("the client needs a HOST");
        o.host = argv[optind++];
        if (!size_set) usage_error("the client needs -s SIZE");
        if (o.udp && o.size > kUdpMax)
            usage_error("a UDP message is one datagram of at most 65507 bytes, not " +
                        std::to_string(o.size));
    }
    if (optind < argc) usage_error(std::string("unexpected argument '") + argv[optind] + "'");
    return o;
}

addrinfo* resolve(const std::string& host, std::uint16_t port, bool udp, bool passive) {
    addrinfo hints{};
    hints.ai_socktype = udp ? SOCK_DGRAM : SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    const std::string p = std::to_string(port);
    if (const int e = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), p.c_str(), &hints, &res);
        e != 0)
        fail((host.empty() ? "any" : host) + ": " + gai_strerror(e));
    return res;
}

bool read_full(int fd, char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t r = ::recv(fd, p, n, 0);
        if (r <= 0) return false;
        p += r;
        n -= static_cast<std::size_t>(r);
    }
    return true;
}

bool write_full(int fd, const char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        p += w;
        n -= static_cast<std::size_t>(w);
    }
    return true;
}

// Sends out[0..n) and receives the n-byte echo into `in`. While a send would block it reads
// what has come back, so that a message bigger than the socket buffers cannot deadlock
// against the echoing server; a message that fits goes out in one send and is read with
// blocking receives, as a kernel user would write it.
bool exchange(int fd, const char* out, char* in, std::size_t n) {
    std::size_t sent = 0, got = 0;
    while (sent < n) {
        const ssize_t w = ::send(fd, out + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            sent += static_cast<std::size_t>(w);
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        pollfd p{fd, POLLIN | POLLOUT, 0};
        if (::poll(&p, 1, -1) < 0 && errno != EINTR) return false;
        if ((p.revents & POLLIN) != 0) {
            const ssize_t r = ::recv(fd, in + got, n - got, MSG_DONTWAIT);
            if (r == 0) return false;
            if (r > 0)
                got += static_cast<std::size_t>(r);
            else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return false;
        }
    }
    return read_full(fd, in + got, n - got);
}

int serve(const Options& o) {
    addrinfo* ai = resolve(o.bind_addr, o.port, o.udp, true);
    const int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (s < 0) fail(sys("socket"));
    const int on = 1;
    ::setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(s, ai->ai_addr, ai->ai_addrlen) != 0) fail(sys("bind"));
    ::freeaddrinfo(ai);
    std::vector<char> buf(o.udp ? kUdpMax + 1 : 1 << 20);
    if (o.udp) {
        do {
            for (;;) {
                sockaddr_storage from{};
                socklen_t fl = sizeof from;
                const ssize_t n = ::recvfrom(s, buf.data(), buf.size(), 0,
                                             reinterpret_cast<sockaddr*>(&from), &fl);
                if (n < 0) fail(sys("recvfrom"));
                if (n == 0) break;  // the client's end of run
                if (::sendto(s, buf.data(), static_cast<std::size_t>(n), 0,
                             reinterpret_cast<sockaddr*>(&from), fl) != n)
                    fail(sys("sendto"));
            }
        } while (o.forever);
        return 0;
    }
    if (::listen(s, 4) != 0) fail(sys("listen"));
    do {
        const int c = ::accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) fail(sys("accept"));
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        for (;;) {  // echo whatever arrives until the client closes
            const ssize_t n = ::recv(c, buf.data(), buf.size(), 0);
            if (n <= 0) break;
            if (!write_full(c, buf.data(), static_cast<std::size_t>(n))) break;
        }
        ::close(c);
    } while (o.forever);
    ::close(s);
    return 0;
}

int client(const Options& o) {
    addrinfo* ai = resolve(o.host, o.port, o.udp, false);
    const int s = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (s < 0) fail(sys("socket"));
    if (::connect(s, ai->ai_addr, ai->ai_addrlen) != 0) fail(sys(("connect to " + o.host).c_str()));
    ::freeaddrinfo(ai);
    const int on = 1;
    if (!o.udp) ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    if (o.udp) {  // a lost datagram must not hang the run
        const timeval tv{2, 0};
        ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    }
    std::vector<char> out(o.size), in(o.size + 1);
    for (std::uint32_t i = 0; i < o.size; ++i) out[i] = static_cast<char>(i * 7 + 1);
    std::vector<double> us;
    us.reserve(o.iters);
    const std::uint32_t total = o.warmup + o.iters;
    for (std::uint32_t i = 0; i < total; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (o.udp) {
            if (::send(s, out.data(), o.size, 0) != static_cast<ssize_t>(o.size)) fail(sys("send"));
            const ssize_t n = ::recv(s, in.data(), in.size(), 0);
            if (n != static_cast<ssize_t>(o.size))
                fail(n < 0 ? sys("recv (lost datagram?)") : "a short echo");
        } else {
            errno = 0;
            if (!exchange(s, out.data(), in.data(), o.size))
                fail(errno != 0 ? sys("send/recv") : "the server closed the connection");
        }
        const auto t1 = std::chrono::steady_clock::now();
        if (i >= o.warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    if (std::memcmp(in.data(), out.data(), o.size) != 0)
        fail("the echo differs from what was sent");
    if (o.udp) ::send(s, nullptr, 0, 0);  // tells the server the run is over
    ::close(s);
    if (!o.samples.empty()) {
        FILE* f = std::fopen(o.samples.c_str(), "w");
        if (f == nullptr) fail(sys(o.samples.c_str()));
        for (double v : us) std::fprintf(f, "%.3f\n", v);
        std::fclose(f);
    }
    const snic::LatencySummary st = snic::summarize_latency(us);
    const char* proto = o.udp ? "udp" : "tcp";
    if (o.json) {
        std::printf(
            "{\"test\":\"kernel-%s\",\"size\":%u,\"iterations\":%zu,\"rtt_us\":{\"min\":%.3f,"
            "\"median\":%.3f,\"mean\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f}}\n",
            proto, o.size, st.count, st.min, st.median, st.mean, st.p99, st.p999, st.max);
    } else {
        std::printf(
            "%s %s size %u B ; %zu round trips, rtt min/median/mean/p99/p99.9/max = "
            "%.2f/%.2f/%.2f/%.2f/%.2f/%.2f us\n",
            kProg, proto, o.size, st.count, st.min, st.median, st.mean, st.p99, st.p999, st.max);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    return o.server ? serve(o) : client(o);
}
