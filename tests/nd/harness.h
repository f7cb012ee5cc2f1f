// The ND rule tests' harness: two adapters opened in one process (the server side on one
// port's address, the client side on the other's), an endpoint pair connected by one thread
// that drives both ends, and one output line per rule: "PASS <rule>" or "FAIL <rule>: why".
//
// Written against <ndsnic/ndspi.h> only. Every wait is bounded (kWait); a bound that expires
// is a failure, never a way to synchronise.
#pragma once

#include <ndsnic/ndspi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ndt {

inline constexpr auto kWait = std::chrono::seconds(30);

// Records a failed check of the current rule (the first one is printed).
void fail(int line, const std::string& why);
std::string hex(HRESULT hr);  // "ND_CANCELED (0xc0000120)"

#define EXPECT(cond, why)                        \
    do {                                         \
        if (!(cond)) ::ndt::fail(__LINE__, why); \
    } while (0)
#define REQUIRE(cond, why)              \
    do {                                \
        if (!(cond)) {                  \
            ::ndt::fail(__LINE__, why); \
            return;                     \
        }                               \
    } while (0)
#define REQUIRE_HR(hr, want, what)                                                      \
    do {                                                                                \
        const HRESULT got_ = (hr);                                                      \
        if (got_ != (want)) {                                                           \
            ::ndt::fail(__LINE__, std::string(what) + " returned " + ::ndt::hex(got_) + \
                                      ", want " + ::ndt::hex(want));                    \
            return;                                                                     \
        }                                                                               \
    } while (0)
#define REQUIRE_OK(hr, what) REQUIRE_HR(hr, ND_SUCCESS, what)

// One adapter with its CQs (receive and request sides apart).
struct Side {
    sockaddr_in addr{};
    INDAdapter* adapter = nullptr;
    INDCompletionQueue* rcq = nullptr;
    INDCompletionQueue* scq = nullptr;
    ND_ADAPTER_INFO info{};
};

struct Pair {
    INDProvider* provider = nullptr;
    Side srv, cli;
    bool iwarp = false;  // -t iwarp: a request completes once TCP took it
};

// A registered buffer.
struct Mem {
    std::vector<unsigned char> buf;
    ND_MR_HANDLE mr = nullptr;
    ND_SGE sge(SIZE_T off, SIZE_T len) { return {buf.data() + off, len, mr}; }
};

// The endpoint limits a rule connects with.
struct Limits {
    SIZE_T recvs = 8, reqs = 4, sge_in = 2, sge_out = 2, read_in = 2, read_out = 2;
};

// A connected endpoint pair.
struct Link {
    INDConnector *sconn = nullptr, *cconn = nullptr;
    INDEndpoint *sep = nullptr, *cep = nullptr;
    INDListen* listen = nullptr;
};

// Runs rule `fn` as `name` if the command line selects it (-r NAME, default all).
void rule(const char* name, void (*fn)(Pair&), Pair& p);
// Parses -a SERVER_ADDR -b CLIENT_ADDR -p BASE_PORT [-t roce|iwarp] [-r RULE] [-l]; opens
// both adapters. Exits 2 on a setup failure.
void init(int argc, char** argv, Pair& p);
int finish(Pair& p);  // 0 when every rule run passed

USHORT next_port();
HRESULT reg(Side& s, SIZE_T len, Mem& m);
void unreg(Side& s, Mem& m);

// Waits (bounded) for an overlapped request; ND_IO_TIMEOUT when the bound expires.
HRESULT wait(INDOverlapped* o, OVERLAPPED* ov, HRESULT first);
// Whether the request is still pending now.
bool pending(const OVERLAPPED& ov);

// Connects a fresh client endpoint to a fresh server endpoint (limits `l`, both on the
// sides' CQs, private data given both ways). `before_accept` runs on the server endpoint
// before the accept (posting receives). Returns ND_SUCCESS or the failing call's result
// (`what` names it).
template <class F>
HRESULT connect(Pair& p, const Limits& l, Link& k, F before_accept, std::string* what);
HRESULT connect(Pair& p, const Limits& l, Link& k, std::string* what);
void close(Pair& p, Link& k);

// Waits for the next result of `cq` (bounded); nullptr if none came.
ND_RESULT* next(INDCompletionQueue* cq);
// Collects results of `cq` into out[0, n) until it has `want` of them or the bound expires
// (then also, for a moment, any more that come); the number collected.
SIZE_T results(INDCompletionQueue* cq, ND_RESULT** out, SIZE_T n, SIZE_T want);
// Whether `cq` holds no result now.
bool empty(INDCompletionQueue* cq);
// Empties both sides' CQs (what an earlier rule left).
void drain(Pair& p);
// Waits until the `len` bytes at `at` equal `want` (an RDMA Write's bytes at the target).
bool wait_bytes(const unsigned char* at, const unsigned char* want, SIZE_T len);

}  // namespace ndt

#include "harness_connect.h"
