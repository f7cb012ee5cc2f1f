// The ND rule tests' harness (harness.h).
#include "harness.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

// The layouts NetworkDirect v1 gives its structures (LP64): what a program written for them
// expects of <ndsnic/ndspi.h>.
static_assert(sizeof(ND_MW_DESCRIPTOR) == 20, "ND_MW_DESCRIPTOR is packed: 8 + 8 + 4");
static_assert(offsetof(ND_MW_DESCRIPTOR, Length) == 8 && offsetof(ND_MW_DESCRIPTOR, Token) == 16);
static_assert(sizeof(ND_RESULT) == 16 && offsetof(ND_RESULT, BytesTransferred) == 8);
static_assert(sizeof(ND_SGE) == 24 && offsetof(ND_SGE, hMr) == 16);
static_assert(sizeof(ND_ADAPTER_INFO) == 2 * 4 + 15 * 8);
static_assert(offsetof(ND_ADAPTER_INFO, MaxInboundSge) == 8 &&
              offsetof(ND_ADAPTER_INFO, MaxCalleeData) == 8 + 14 * 8);
static_assert(sizeof(HRESULT) == 4 && ND_PENDING > 0 && FAILED(ND_BUFFER_OVERFLOW) &&
              FAILED(ND_CANCELED) && SUCCEEDED(ND_TIMEOUT));

namespace ndt {

namespace {

const char* g_only = nullptr;  // -r: this rule only
bool g_list = false;           // -l: print the rules' names
USHORT g_port = 0;             // -p: the next port
int g_rules = 0, g_failed = 0;
bool g_rule_failed = false;
std::string g_why;

struct Name {
    HRESULT hr;
    const char* name;
};
#define N(x) \
    { x, #x }
constexpr Name kNames[] = {
    N(ND_SUCCESS),
    N(ND_TIMEOUT),
    N(ND_PENDING),
    N(ND_BUFFER_OVERFLOW),
    N(ND_DEVICE_BUSY),
    N(ND_NO_MORE_ENTRIES),
    N(ND_UNSUCCESSFUL),
    N(ND_ACCESS_VIOLATION),
    N(ND_INVALID_HANDLE),
    N(ND_INVALID_PARAMETER),
    N(ND_INVALID_DEVICE_REQUEST),
    N(ND_NO_MEMORY),
    N(ND_DATA_OVERRUN),
    N(ND_INSUFFICIENT_RESOURCES),
    N(ND_IO_TIMEOUT),
    N(ND_NOT_SUPPORTED),
    N(ND_INTERNAL_ERROR),
    N(ND_CANCELED),
    N(ND_REMOTE_ERROR),
    N(ND_INVALID_ADDRESS),
    N(ND_CONNECTION_REFUSED),
    N(ND_CONNECTION_INVALID),
    N(ND_CONNECTION_ACTIVE),
    N(ND_HOST_UNREACHABLE),
    N(ND_CONNECTION_ABORTED),
    N(ND_DEVICE_REMOVED),
};
#undef N

sockaddr_in ipv4(const char* a) {
    sockaddr_in s{};
    s.sin_family = AF_INET;
    if (inet_pton(AF_INET, a, &s.sin_addr) != 1) {
        std::fprintf(stderr, "not an IPv4 address: %s\n", a);
        std::exit(2);
    }
    return s;
}

void open_side(Pair& p, Side& s, const char* who) {
    HRESULT hr = p.provider->OpenAdapter(reinterpret_cast<const sockaddr*>(&s.addr), sizeof s.addr,
                                         &s.adapter);
    SIZE_T size = sizeof s.info;
    if (hr == ND_SUCCESS) hr = s.adapter->Query(1, &s.info, &size);
    if (hr == ND_SUCCESS) hr = s.adapter->CreateCompletionQueue(256, &s.rcq);
    if (hr == ND_SUCCESS) hr = s.adapter->CreateCompletionQueue(256, &s.scq);
    if (hr != ND_SUCCESS) {
        std::printf("setup: the %s adapter: %s\n", who, hex(hr).c_str());
        std::exit(2);
    }
}

}  // namespace

void fail(int line, const std::string& why) {
    if (g_rule_failed) return;
    g_rule_failed = true;
    g_why = "line " + std::to_string(line) + ": " + why;
}

std::string hex(HRESULT hr) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%08x", static_cast<unsigned>(hr));
    for (const Name& n : kNames)
        if (n.hr == hr) return std::string(n.name) + " (" + b + ")";
    return b;
}

void rule(const char* name, void (*fn)(Pair&), Pair& p) {
    if (g_list) {
        std::printf("%s\n", name);
        return;
    }
    if (g_only != nullptr && std::strcmp(g_only, name) != 0) return;
    drain(p);
    g_rule_failed = false;
    g_why.clear();
    fn(p);
    ++g_rules;
    if (g_rule_failed) {
        ++g_failed;
        std::printf("FAIL %s: %s\n", name, g_why.c_str());
    } else {
        std::printf("PASS %s\n", name);
    }
    std::fflush(stdout);
}

void init(int argc, char** argv, Pair& p) {
    const char *a = nullptr, *b = nullptr;
    int c;
    while ((c = getopt(argc, argv, "a:b:p:t:r:l")) != -1) {
        switch (c) {
            case 'a':
                a = optarg;
                break;
            case 'b':
                b = optarg;
                break;
            case 'p':
                g_port = static_cast<USHORT>(std::atoi(optarg));
                break;
            case 't':
                p.iwarp = std::strcmp(optarg, "iwarp") == 0;
                break;
            case 'r':
                g_only = optarg;
                break;
            case 'l':
                g_list = true;
                break;
            default:
                std::fprintf(stderr,
                             "usage: %s -a SERVER_ADDR -b CLIENT_ADDR -p PORT [-t roce|iwarp] "
                             "[-r RULE] [-l]\n",
                             argv[0]);
                std::exit(2);
        }
    }
    if (g_list) return;
    if (a == nullptr || b == nullptr || g_port == 0) {
        std::fprintf(stderr, "-a, -b and -p are needed\n");
        std::exit(2);
    }
    p.srv.addr = ipv4(a);
    p.cli.addr = ipv4(b);
    if (NdSnicOpenProvider(&p.provider) != ND_SUCCESS) {
        std::printf("setup: NdSnicOpenProvider failed\n");
        std::exit(2);
    }
    open_side(p, p.srv, "server");
    open_side(p, p.cli, "client");
}

int finish(Pair& p) {
    for (Side* s : {&p.srv, &p.cli}) {
        if (s->rcq != nullptr) s->rcq->Release();
        if (s->scq != nullptr) s->scq->Release();
        if (s->adapter != nullptr) s->adapter->Release();
    }
    if (p.provider != nullptr) p.provider->Release();
    return g_failed == 0 ? 0 : 1;
}

USHORT next_port() {
    return g_port++;
}

HRESULT reg(Side& s, SIZE_T len, Mem& m) {
    m.buf.assign(len, 0);
    OVERLAPPED ov{};
    return wait(s.adapter, &ov, s.adapter->RegisterMemory(m.buf.data(), len, &ov, &m.mr));
}

void unreg(Side& s, Mem& m) {
    if (m.mr == nullptr) return;
    OVERLAPPED ov{};
    wait(s.adapter, &ov, s.adapter->DeregisterMemory(m.mr, &ov));
    m.mr = nullptr;
}

bool pending(const OVERLAPPED& ov) {
    return __atomic_load_n(&ov.Status, __ATOMIC_ACQUIRE) == ND_PENDING;
}

HRESULT wait(INDOverlapped* o, OVERLAPPED* ov, HRESULT first) {
    if (first != ND_PENDING) return first;
    const auto end = std::chrono::steady_clock::now() + kWait;
    while (pending(*ov)) {
        if (std::chrono::steady_clock::now() > end) return ND_IO_TIMEOUT;
        std::this_thread::yield();
    }
    return o->GetOverlappedResult(ov, nullptr, FALSE);
}

HRESULT connect(Pair& p, const Limits& l, Link& k, std::string* what) {
    return connect(
        p, l, k, [](INDEndpoint*) { return ND_SUCCESS; }, what);
}

void close(Pair& p, Link& k) {
    (void)p;
    OVERLAPPED ov{};
    if (k.cconn != nullptr) wait(k.cconn, &ov, k.cconn->Disconnect(&ov));
    for (IUnknown* o : std::initializer_list<IUnknown*>{k.cep, k.sep, k.cconn, k.sconn, k.listen})
        if (o != nullptr) o->Release();
    k = Link{};
}

ND_RESULT* next(INDCompletionQueue* cq) {
    const auto end = std::chrono::steady_clock::now() + kWait;
    ND_RESULT* r = nullptr;
    while (cq->GetResults(&r, 1) == 0) {
        if (std::chrono::steady_clock::now() > end) return nullptr;
        std::this_thread::yield();
    }
    return r;
}

SIZE_T results(INDCompletionQueue* cq, ND_RESULT** out, SIZE_T n, SIZE_T want) {
    const auto end = std::chrono::steady_clock::now() + kWait;
    SIZE_T got = 0;
    while (got < want && std::chrono::steady_clock::now() < end) {
        got += cq->GetResults(out + got, n - got);
        if (got < want) std::this_thread::yield();
    }
    if (got < n) got += cq->GetResults(out + got, n - got);
    return got;
}

bool empty(INDCompletionQueue* cq) {
    ND_RESULT* r = nullptr;
    // GetResults takes what it returns: an unexpected result is reported and lost.
    return cq->GetResults(&r, 1) == 0;
}

void drain(Pair& p) {
    for (INDCompletionQueue* cq : {p.srv.rcq, p.srv.scq, p.cli.rcq, p.cli.scq}) {
        ND_RESULT* r = nullptr;
        while (cq->GetResults(&r, 1) == 1)
            std::fprintf(stderr, "note: a result left by an earlier rule: %s\n",
                         hex(r->Status).c_str());
    }
}

bool wait_bytes(const unsigned char* at, const unsigned char* want, SIZE_T len) {
    const auto end = std::chrono::steady_clock::now() + kWait;
    while (std::memcmp(const_cast<const unsigned char*>(at), want, len) != 0) {
        if (std::chrono::steady_clock::now() > end) return false;
        std::this_thread::yield();
    }
    return true;
}

}  // namespace ndt
