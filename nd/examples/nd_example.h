// What the ND example programs share: the command line, opening the adapter, making one
// connection (server: listen and accept; client: connect), and perftest-like figures.
// Written against <ndsnic/ndspi.h> alone, as a program outside the tree would be.
#pragma once

#include <arpa/inet.h>
#include <ndsnic/ndspi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

namespace ndx {

struct Options {
    bool server = false;
    std::string local, remote;
    USHORT port = 18515;
    int iters = 1000;
    SIZE_T bytes = 64;
};

[[noreturn]] inline void die(const char* what, HRESULT hr) {
    std::fprintf(stderr, "%s failed: 0x%08x\n", what, static_cast<unsigned>(hr));
    std::exit(1);
}

inline void check(HRESULT hr, const char* what) {
    if (FAILED(hr)) die(what, hr);
}

inline Options parse(int argc, char** argv, const char* usage) {
    Options o;
    int c;
    while ((c = getopt(argc, argv, "sc:a:p:n:b:")) != -1) {
        switch (c) {
            case 's':
                o.server = true;
                break;
            case 'c':
                o.remote = optarg;
                break;
            case 'a':
                o.local = optarg;
                break;
            case 'p':
                o.port = static_cast<USHORT>(std::atoi(optarg));
                break;
            case 'n':
                o.iters = std::atoi(optarg);
                break;
            case 'b':
                o.bytes = static_cast<SIZE_T>(std::atoll(optarg));
                break;
            default:
                std::fprintf(stderr, "%s", usage);
                std::exit(2);
        }
    }
    if (o.local.empty() || (o.server == !o.remote.empty()) || o.iters < 1 || o.bytes < 1) {
        std::fprintf(stderr, "%s", usage);
        std::exit(2);
    }
    return o;
}

inline sockaddr_in ipv4(const std::string& a, USHORT port) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(port);
    if (inet_pton(AF_INET, a.c_str(), &s.sin_addr) != 1) {
        std::fprintf(stderr, "not an IPv4 address: %s\n", a.c_str());
        std::exit(2);
    }
    return s;
}

inline HRESULT wait(INDOverlapped* o, OVERLAPPED* ov, HRESULT hr) {
    if (hr == ND_PENDING) hr = o->GetOverlappedResult(ov, nullptr, TRUE);
    return hr;
}

// One connection and its objects: a CQ for both directions, one endpoint.
struct Link {
    INDProvider* provider = nullptr;
    INDAdapter* adapter = nullptr;
    INDCompletionQueue* cq = nullptr;
    INDConnector* conn = nullptr;
    INDListen* listen = nullptr;
    INDEndpoint* ep = nullptr;
    ND_ADAPTER_INFO info{};

    // Polls the CQ until one result; exits on a failed one.
    ND_RESULT* next() {
        ND_RESULT* r = nullptr;
        while (cq->GetResults(&r, 1) == 0) {
        }
        if (FAILED(r->Status)) die("a request", r->Status);
        return r;
    }
};

// Opens the adapter, makes the endpoint (depth `depth`) and connects it. The server says
// "listening on port N" once it listens. `post_receives` runs before the connection.
template <class F>
Link connect(const Options& o, SIZE_T depth, F post_receives) {
    Link l;
    check(NdSnicOpenProvider(&l.provider), "NdSnicOpenProvider");
    const sockaddr_in local = ipv4(o.local, 0);
    check(l.provider->OpenAdapter(reinterpret_cast<const sockaddr*>(&local), sizeof local,
                                  &l.adapter),
          "OpenAdapter");
    SIZE_T size = sizeof l.info;
    check(l.adapter->Query(1, &l.info, &size), "Query");
    check(l.adapter->CreateCompletionQueue(2 * depth + 2, &l.cq), "CreateCompletionQueue");
    check(l.adapter->CreateConnector(&l.conn), "CreateConnector");
    OVERLAPPED ov{};
    if (o.server) {
        USHORT port = 0;
        check(l.adapter->Listen(8, 0, o.port, &port, &l.listen), "Listen");
        std::printf("listening on port %u\n", port);
        std::fflush(stdout);
        check(wait(l.listen, &ov, l.listen->GetConnectionRequest(l.conn, &ov)),
              "GetConnectionRequest");
    }
    check(l.conn->CreateEndpoint(l.cq, l.cq, depth, depth, 1, 1, 1, 1, nullptr, &l.ep),
          "CreateEndpoint");
    post_receives(l);
    if (o.server) {
        check(wait(l.conn, &ov, l.conn->Accept(l.ep, nullptr, 0, &ov)), "Accept");
    } else {
        const sockaddr_in peer = ipv4(o.remote, o.port);
        check(wait(l.conn, &ov,
                   l.conn->Connect(l.ep, reinterpret_cast<const sockaddr*>(&peer), sizeof peer, 0,
                                   0, nullptr, 0, &ov)),
              "Connect");
        check(wait(l.conn, &ov, l.conn->CompleteConnect(&ov)), "CompleteConnect");
    }
    return l;
}

inline void close(Link& l) {
    OVERLAPPED ov{};
    // The peer may have disconnected first: that is no failure here.
    wait(l.conn, &ov, l.conn->Disconnect(&ov));
    l.ep->Release();
    l.conn->Release();
    if (l.listen != nullptr) l.listen->Release();
    l.cq->Release();
    l.adapter->Release();
    l.provider->Release();
}

using Clock = std::chrono::steady_clock;

inline double usec(Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
}

// perftest's latency line: half round trips, in microseconds.
inline void print_latency(SIZE_T bytes, std::vector<double> t) {
    std::sort(t.begin(), t.end());
    double sum = 0;
    for (double x : t) sum += x;
    std::printf(" %-10s %-13s %-14s %-14s %-16s %-14s\n", "#bytes", "#iterations", "t_min[usec]",
                "t_max[usec]", "t_typical[usec]", "t_avg[usec]");
    std::printf(" %-10zu %-13zu %-14.2f %-14.2f %-16.2f %-14.2f\n", bytes, t.size(), t.front(),
                t.back(), t[t.size() / 2], sum / static_cast<double>(t.size()));
}

inline void print_bandwidth(SIZE_T bytes, int iters, double seconds) {
    const double mb = static_cast<double>(bytes) * iters / 1e6;
    std::printf(" %-10s %-13s %-16s\n", "#bytes", "#iterations", "BW average[MB/sec]");
    std::printf(" %-10zu %-13d %-16.2f\n", bytes, iters, mb / seconds);
}

}  // namespace ndx
