// snic-rc-stress: RC between two snic devices in one process (RoCEv2 or iWARP), checked byte
// by byte.
//
//   snic-rc-stress [options] DEVICE_A DEVICE_B          the stress run (default)
//   snic-rc-stress --dead-peer IP [options] DEVICE_A    a peer that never answers
//   snic-rc-stress --access-errors [options] DEVICE_A DEVICE_B
//
// The devices are found through SNIC_SOCKET_DIR like any libsnic program; typically the
// two ports of one snicd started with --wire (NAME_0 and NAME_1, or their iWARP devices
// NAME_iw0 and NAME_iw1), possibly with faults injected on the wire. Linked with libsnic only.
//
// The stress run opens both devices, creates on each a PD, a completion channel, a send
// CQ and a receive CQ and one RC QP, connects the two QPs (GID index 0, the port's path
// MTU, rnr_retry 7, 16 READ/atomics each way) and runs N operations chosen by a seeded
// generator, up to D in flight, each in a random direction: SEND and SEND with immediate
// (log-uniform sizes from 0 to the maximum, sometimes inline, gathered from 1-3 SGEs,
// received into pre-posted receive WRs of 1-2 SGEs that are posted again as they
// complete), RDMA WRITE and RDMA WRITE with immediate (the immediate is the operation's
// index), RDMA READ, and atomic fetch-and-add and compare-and-swap on 8-byte words of a
// dedicated region. Every in-flight operation owns a slot: its local buffer, its window
// in the peer's target region, its compare-and-swap word and its atomic result word.
// Every byte of every buffer holds a known background value whenever no operation uses
// it; each message is a pattern derived from (seed, operation index). It checks:
//
//   - every completion arrives exactly once, in posting order per QP and queue, with
//     status SUCCESS, the right opcode, QP number, byte_len and immediate data;
//   - a SEND's bytes arrive intact, and the receive buffer beyond them is untouched;
//   - a WRITE's bytes land exactly at the target range, with guard bytes around it
//     untouched, and a WRITE with immediate leaves the receive buffer it consumes alone;
//   - a READ returns the target's bytes, leaves them as they were, and writes nothing
//     past its length into the local buffer;
//   - a fetch-and-add returns exactly the value the word held after the adds posted
//     before it (RC executes requests in order), so the returned values are distinct and
//     the word ends at its start value plus the sum of the adds; a compare-and-swap
//     returns the old value and swaps only when the compare matched;
//   - at the end nothing else arrives, and every buffer, window and word not in use holds
//     its background value again (nothing was written where it should not be).
//
// --rdma-cm connects the two QPs through rdma_cm (B listens on its port's IPv4 address, A
// connects from its own) instead of Modify QP; it is implied when the devices are iWARP,
// whose QPs connect only that way (the MPA exchange binds a QP to its TCP connection). Both
// devices must be iWARP or both RoCE. Since a port's RoCE and iWARP devices share its
// address, an iWARP run needs SNIC_DEVICES to name the iWARP devices (libsnic's rdma_cm
// takes an address to the first device that has it).
//
// On iWARP there is no SEND with immediate (RDMAP has none; its share of the mix goes to
// SEND), and a WRITE completes at the requester once the stream took it (RFC 5040: no
// acknowledgement from the peer), so its bytes are checked at the target only once a later
// operation in the same direction shows that the target got past it: a READ or atomic
// response, or the target's receive completion of a SEND or WRITE with immediate (RDMAP
// places a stream's messages in order). When none is coming (every slot is taken, or the
// run is ending), a fence goes: an 8-byte READ of a word that never changes, outside the
// operation count.
//
// It prints one summary line and exits 0; on the first violation it prints what was
// expected and what was found, and exits 1. Usage errors exit 2, setup errors (a device
// that is not there, a verb that fails) exit 3.
//
// --dead-peer IP connects the QP of DEVICE_A to an address of its subnet where nothing
// answers, posts K sends and expects the first to complete with RETRY_EXC_ERR, every
// other one with RETRY_EXC_ERR or WR_FLUSH_ERR, in order, within the time the local ACK
// timeout and retry count allow, then a send posted afterwards to be flushed and the QP to
// be in the error state. RoCE only.
//
// --access-errors runs, each on freshly created and connected QPs, RDMA operations the
// target must refuse (a WRITE with an invalid rkey, beyond or before its MR, to an MR
// without remote write, to an MR of another PD; a READ without remote read or with an
// invalid rkey; an atomic without remote atomic): the requester gets REM_ACCESS_ERR, the
// SEND posted behind it WR_FLUSH_ERR, the target's memory and the requester's buffers are
// unchanged, and the requester's QP is in the error state. A valid WRITE runs first as a
// control. RoCE only (an iWARP WRITE completes before the target could refuse it).
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kProg = "snic-rc-stress";
constexpr int kExitViolation = 1;
constexpr int kExitUsage = 2;
constexpr int kExitSetup = 3;

// ---- reporting ------------------------------------------------------------------------------

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char* fmt, ...) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: FAIL: ", kProg);
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fputc('\n', stderr);
    std::exit(kExitViolation);
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void setup_error(const char* fmt, ...) {
    const int err = errno;
    std::fflush(stdout);
    std::fprintf(stderr, "%s: ", kProg);
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, ": %s\n", std::strerror(err));
    std::exit(kExitSetup);
}

// A verb that returns 0 or a positive errno value.
void check_rc(int rc, const char* what) {
    if (rc != 0) {
        errno = rc > 0 ? rc : errno;
        setup_error("%s", what);
    }
}

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- generator and patterns -----------------------------------------------------------------

using snic::mix64;
// xoshiro256** seeded through splitmix64: the same sequence on every machine.
using Rng = snic::Xoshiro256;

// The bytes of message `key`: 8-byte words mix64(key + word index), in memory order.
void fill_pattern(std::uint8_t* p, std::size_t len, std::uint64_t key) {
    std::size_t i = 0;
    std::uint64_t j = 0;
    for (; i + 8 <= len; i += 8, ++j) {
        const std::uint64_t w = mix64(key + j);
        std::memcpy(p + i, &w, 8);
    }
    if (i < len) {
        const std::uint64_t w = mix64(key + j);
        std::memcpy(p + i, &w, len - i);
    }
}

std::uint8_t pattern_byte(std::uint64_t key, std::size_t i) {
    const std::uint64_t w = mix64(key + i / 8);
    std::uint8_t b[8];
    std::memcpy(b, &w, 8);
    return b[i % 8];
}

constexpr std::size_t kNoMismatch = ~std::size_t{0};

// The offset of the first byte of p[0, len) that differs from message `key`.
std::size_t find_pattern_mismatch(const std::uint8_t* p, std::size_t len, std::uint64_t key) {
    std::size_t i = 0;
    std::uint64_t j = 0;
    for (; i + 8 <= len; i += 8, ++j) {
        const std::uint64_t w = mix64(key + j);
        if (std::memcmp(p + i, &w, 8) != 0) break;
    }
    for (; i < len; ++i)
        if (p[i] != pattern_byte(key, i)) return i;
    return kNoMismatch;
}

// The offset of the first byte of p[0, len) that is not `b`.
std::size_t find_not_byte(const std::uint8_t* p, std::size_t len, std::uint8_t b) {
    const std::uint64_t w = 0x0101010101010101ull * b;
    std::size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        std::uint64_t v;
        std::memcpy(&v, p + i, 8);
        if (v != w) break;
    }
    for (; i < len; ++i)
        if (p[i] != b) return i;
    return kNoMismatch;
}

// Background values: what every byte holds while no operation uses it.
constexpr std::uint8_t kBgLocal = 0x3c;
constexpr std::uint8_t kBgTarget = 0x5a;
constexpr std::uint8_t kBgRecv = 0xc3;
constexpr std::uint64_t kAtomicGuard = 0xa5a5a5a5a5a5a5a5ull;
constexpr std::uint64_t kResultSentinel = 0x5e5e5e5e5e5e5e5eull;

// ---- options --------------------------------------------------------------------------------

enum class Mode { stress, dead_peer, access_errors };

struct Options {
    Mode mode = Mode::stress;
    std::uint64_t ops = 10000;
    std::uint32_t max_size = 1u << 20;
    std::uint32_t depth = 16;
    std::uint64_t seed = 1;
    int timeout = 14;  // local ACK timeout code
    int retry = 7;
    std::uint32_t mtu = 0;  // 0: the port's active MTU
    double stall_s = 30;
    unsigned time_limit_s = 0;
    std::string dead_ip;
    std::uint32_t dead_count = 8;
    bool verbose = false;
    bool rdma_cm = false;  // --rdma-cm, or implied by iWARP devices
    std::string addr[2];   // --addrs: the devices' IPv4 addresses for rdma_cm
    std::string dev[2];
};

void usage(FILE* out) {
    std::fprintf(
        out,
        "usage: %s [options] DEVICE_A DEVICE_B\n"
        "       %s --dead-peer IP [options] DEVICE_A\n"
        "       %s --access-errors [options] DEVICE_A DEVICE_B\n"
        "\n"
        "RC operations between two snic devices (SNIC_SOCKET_DIR), RoCEv2 or iWARP,\n"
        "every byte and every completion checked; exits 0, or 1 at the first violation.\n"
        "\n"
        "  -n, --ops N          operations (default 10000)\n"
        "  -m, --max-size B     largest SEND/WRITE/READ in bytes (default 1048576)\n"
        "  -d, --depth N        operations in flight, 1..256 (default 16)\n"
        "  -s, --seed N         generator seed (default 1)\n"
        "  -t, --timeout CODE   local ACK timeout code: 4.096 us * 2^CODE, 1..31 (default 14)\n"
        "  -r, --retry N        retry count, 0..7 (default 7)\n"
        "      --mtu B          path MTU 256..4096 (default: the port's active MTU)\n"
        "      --rdma-cm        connect the QPs through rdma_cm (implied on iWARP devices;\n"
        "                       their addresses must take rdma_cm to them: SNIC_DEVICES)\n"
        "      --addrs A,B      --rdma-cm: the devices' IPv4 addresses (default: their\n"
        "                       RoCEv2 GIDs, else the getifaddrs entries named after them)\n"
        "      --stall SEC      fail when nothing completes for SEC seconds (default 30)\n"
        "      --time-limit SEC fail when the whole run takes longer (default: none)\n"
        "      --dead-peer IP   connect DEVICE_A to IP, where nothing answers\n"
        "      --dead-count K   sends posted to the dead peer (default 8)\n"
        "      --access-errors  operations the target must refuse\n"
        "  -v, --verbose        say what is being set up\n"
        "  -h, --help           this text\n",
        kProg, kProg, kProg);
}

[[noreturn]] void usage_error(const char* fmt, const char* arg) {
    std::fprintf(stderr, "%s: ", kProg);
    std::fprintf(stderr, fmt, arg);
    std::fprintf(stderr, " (see %s --help)\n", kProg);
    std::exit(kExitUsage);
}

std::uint64_t parse_u64(const char* s, const char* what, std::uint64_t lo, std::uint64_t hi) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 0);
    if (errno != 0 || end == s || *end != '\0' || *s == '-' || v < lo || v > hi) {
        std::fprintf(stderr, "%s: invalid %s '%s' (%llu..%llu)\n", kProg, what, s,
                     static_cast<unsigned long long>(lo), static_cast<unsigned long long>(hi));
        std::exit(kExitUsage);
    }
    return v;
}

Options parse_options(int argc, char** argv) {
    enum { kMtu = 1000, kStall, kTimeLimit, kDeadPeer, kDeadCount, kAccess, kRdmaCm, kAddrs };
    static const option longopts[] = {
        {"ops", required_argument, nullptr, 'n'},
        {"max-size", required_argument, nullptr, 'm'},
        {"depth", required_argument, nullptr, 'd'},
        {"seed", required_argument, nullptr, 's'},
        {"timeout", required_argument, nullptr, 't'},
        {"retry", required_argument, nullptr, 'r'},
        {"mtu", required_argument, nullptr, kMtu},
        {"stall", required_argument, nullptr, kStall},
        {"time-limit", required_argument, nullptr, kTimeLimit},
        {"dead-peer", required_argument, nullptr, kDeadPeer},
        {"dead-count", required_argument, nullptr, kDeadCount},
        {"access-errors", no_argument, nullptr, kAccess},
        {"rdma-cm", no_argument, nullptr, kRdmaCm},
        {"addrs", required_argument, nullptr, kAddrs},
        {"verbose", no_argument, nullptr, 'v'},
        {"help", no_argument, nullptr, 'h'},
        {nullptr, 0, nullptr, 0},
    };
    Options o;
    for (;;) {
        const int c = getopt_long(argc, argv, "n:m:d:s:t:r:vh", longopts, nullptr);
        if (c == -1) break;
        switch (c) {
            case 'n':
                o.ops = parse_u64(optarg, "operation count", 1, 1ull << 32);
                break;
            case 'm':
                o.max_size = static_cast<std::uint32_t>(parse_u64(optarg, "size", 0, 1u << 30));
                break;
            case 'd':
                o.depth = static_cast<std::uint32_t>(parse_u64(optarg, "depth", 1, 256));
                break;
            case 's':
                o.seed = parse_u64(optarg, "seed", 0, ~0ull);
                break;
            case 't':
                o.timeout = static_cast<int>(parse_u64(optarg, "timeout code", 1, 31));
                break;
            case 'r':
                o.retry = static_cast<int>(parse_u64(optarg, "retry count", 0, 7));
                break;
            case kMtu: {
                o.mtu = static_cast<std::uint32_t>(parse_u64(optarg, "MTU", 256, 4096));
                if ((o.mtu & (o.mtu - 1)) != 0)
                    usage_error("invalid MTU '%s' (256, 512, 1024, 2048 or 4096)", optarg);
                break;
            }
            case kStall:
                o.stall_s = static_cast<double>(parse_u64(optarg, "stall seconds", 1, 86400));
                break;
            case kTimeLimit:
                o.time_limit_s = static_cast<unsigned>(parse_u64(optarg, "time limit", 1, 86400));
                break;
            case kDeadPeer:
                o.mode = Mode::dead_peer;
                o.dead_ip = optarg;
                break;
            case kDeadCount:
                o.dead_count =
                    static_cast<std::uint32_t>(parse_u64(optarg, "dead-peer count", 1, 256));
                break;
            case kAccess:
                o.mode = Mode::access_errors;
                break;
            case kRdmaCm:
                o.rdma_cm = true;
                break;
            case kAddrs: {
                const char* comma = std::strchr(optarg, ',');
                in_addr ip{};
                if (comma == nullptr) usage_error("invalid --addrs '%s' (A,B)", optarg);
                o.addr[0].assign(optarg, static_cast<std::size_t>(comma - optarg));
                o.addr[1] = comma + 1;
                for (const std::string& a : o.addr)
                    if (inet_pton(AF_INET, a.c_str(), &ip) != 1)
                        usage_error("invalid --addrs '%s' (two IPv4 addresses)", optarg);
                break;
            }
            case 'v':
                o.verbose = true;
                break;
            case 'h':
                usage(stdout);
                std::exit(0);
            default:
                std::fprintf(stderr, "see %s --help\n", kProg);
                std::exit(kExitUsage);
        }
    }
    const int need = o.mode == Mode::dead_peer ? 1 : 2;
    const int have = argc - optind;
    if (have < need || have > 2) {
        std::fprintf(stderr, "%s: expected %s (see %s --help)\n", kProg,
                     need == 1 ? "DEVICE_A" : "DEVICE_A DEVICE_B", kProg);
        std::exit(kExitUsage);
    }
    for (int i = 0; i < have; ++i) o.dev[i] = argv[optind + i];
    return o;
}

// ---- verbs resources ------------------------------------------------------------------------

struct Region {
    std::uint8_t* p = nullptr;
    std::size_t len = 0;
    ibv_mr* mr = nullptr;
};

Region make_region(ibv_pd* pd, std::size_t len, int access, std::uint8_t bg, const char* what) {
    Region r;
    r.len = std::max<std::size_t>(len, 64);
    void* p = mmap(nullptr, r.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) setup_error("mmap %zu bytes for %s", r.len, what);
    r.p = static_cast<std::uint8_t*>(p);
    std::memset(r.p, bg, r.len);
    r.mr = ibv_reg_mr(pd, r.p, r.len, access);
    if (r.mr == nullptr) setup_error("ibv_reg_mr %zu bytes for %s", r.len, what);
    return r;
}

void free_region(Region& r) {
    if (r.mr != nullptr) check_rc(ibv_dereg_mr(r.mr), "ibv_dereg_mr");
    if (r.p != nullptr) munmap(r.p, r.len);
    r = Region{};
}

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

struct Side {
    char label = 'A';
    std::string dev;
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* ch = nullptr;
    ibv_cq* scq = nullptr;
    ibv_cq* rcq = nullptr;
    ibv_qp* qp = nullptr;
    unsigned scq_events = 0, rcq_events = 0;
    ibv_port_attr port{};
    ibv_gid gid{};
    std::uint32_t max_inline = 0;
    bool iwarp = false;
    rdma_cm_id* id = nullptr;  // --rdma-cm: the id that owns the QP
};

// The device `name` in `list` (n entries), or exits naming the devices there are.
ibv_device* pick_device(ibv_device** list, int n, const std::string& name) {
    std::string names;
    for (int i = 0; i < n; ++i) {
        if (name == ibv_get_device_name(list[i])) return list[i];
        names += std::string(i ? " " : "") + ibv_get_device_name(list[i]);
    }
    std::fprintf(stderr, "%s: no device %s (SNIC_SOCKET_DIR=%s, SNIC_DEVICES=%s; found: %s)\n",
                 kProg, name.c_str(),
                 std::getenv("SNIC_SOCKET_DIR") ? std::getenv("SNIC_SOCKET_DIR") : "(unset)",
                 std::getenv("SNIC_DEVICES") ? std::getenv("SNIC_DEVICES") : "(unset)",
                 names.empty() ? "none" : names.c_str());
    std::exit(kExitSetup);
}

bool is_iwarp_device(const std::string& name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) setup_error("ibv_get_device_list");
    const bool iwarp = pick_device(list, n, name)->transport_type == IBV_TRANSPORT_IWARP;
    ibv_free_device_list(list);
    return iwarp;
}

ibv_context* open_device(const std::string& name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) setup_error("ibv_get_device_list");
    ibv_context* ctx = ibv_open_device(pick_device(list, n, name));
    ibv_free_device_list(list);
    if (ctx == nullptr) setup_error("ibv_open_device %s", name.c_str());
    return ctx;
}

// rdma_cm's own context of the device (the one its ids take), for --rdma-cm.
ibv_context* cm_context(const std::string& name) {
    int n = 0;
    ibv_context** list = rdma_get_devices(&n);
    if (list == nullptr) setup_error("rdma_get_devices");
    std::vector<ibv_device*> devs;
    for (int i = 0; i < n; ++i) devs.push_back(list[i]->device);
    ibv_device* dev = pick_device(devs.data(), n, name);
    ibv_context* ctx = nullptr;
    for (int i = 0; i < n; ++i)
        if (list[i]->device == dev) ctx = list[i];
    rdma_free_devices(list);  // the contexts stay open
    return ctx;
}

void open_side(Side& s, char label, const std::string& dev, int scq_size, int rcq_size,
               bool rdma_cm) {
    s.label = label;
    s.dev = dev;
    s.ctx = rdma_cm ? cm_context(dev) : open_device(dev);
    s.iwarp = s.ctx->device->transport_type == IBV_TRANSPORT_IWARP;
    check_rc(ibv_query_port(s.ctx, 1, &s.port), "ibv_query_port");
    if (s.port.state != IBV_PORT_ACTIVE) {
        errno = ENETDOWN;
        setup_error("port 1 of %s is %s", dev.c_str(), ibv_port_state_str(s.port.state));
    }
    if (ibv_query_gid(s.ctx, 1, 0, &s.gid) != 0)
        setup_error("ibv_query_gid %s index 0", dev.c_str());
    s.pd = ibv_alloc_pd(s.ctx);
    if (s.pd == nullptr) setup_error("ibv_alloc_pd");
    s.ch = ibv_create_comp_channel(s.ctx);
    if (s.ch == nullptr) setup_error("ibv_create_comp_channel");
    const int fl = fcntl(s.ch->fd, F_GETFL);
    if (fl < 0 || fcntl(s.ch->fd, F_SETFL, fl | O_NONBLOCK) != 0) setup_error("fcntl O_NONBLOCK");
    s.scq = ibv_create_cq(s.ctx, scq_size, nullptr, s.ch, 0);
    if (s.scq == nullptr) setup_error("ibv_create_cq %d", scq_size);
    s.rcq = ibv_create_cq(s.ctx, rcq_size, nullptr, s.ch, 0);
    if (s.rcq == nullptr) setup_error("ibv_create_cq %d", rcq_size);
}

ibv_qp_init_attr qp_init_attr(const Side& s, std::uint32_t send_wr, std::uint32_t recv_wr) {
    ibv_qp_init_attr a{};
    a.send_cq = s.scq;
    a.recv_cq = s.rcq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = send_wr;
    a.cap.max_recv_wr = recv_wr;
    a.cap.max_send_sge = 4;
    a.cap.max_recv_sge = 2;
    a.cap.max_inline_data = 64;
    a.sq_sig_all = 0;
    return a;
}

void create_qp(Side& s, std::uint32_t send_wr, std::uint32_t recv_wr) {
    ibv_qp_init_attr a = qp_init_attr(s, send_wr, recv_wr);
    s.qp = ibv_create_qp(s.pd, &a);
    if (s.qp == nullptr) setup_error("ibv_create_qp on %s", s.dev.c_str());
    s.max_inline = a.cap.max_inline_data;
}

ibv_mtu to_ibv_mtu(std::uint32_t bytes) {
    switch (bytes) {
        case 256:
            return IBV_MTU_256;
        case 512:
            return IBV_MTU_512;
        case 1024:
            return IBV_MTU_1024;
        case 2048:
            return IBV_MTU_2048;
        default:
            return IBV_MTU_4096;
    }
}

std::uint32_t mtu_bytes(ibv_mtu m) {
    return 128u << static_cast<int>(m);
}

// RESET -> INIT -> RTR -> RTS, towards (dgid, dest_qpn).
void connect_qp(Side& s, const ibv_gid& dgid, std::uint32_t dest_qpn, std::uint32_t rq_psn,
                std::uint32_t sq_psn, ibv_mtu mtu, const Options& o) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    check_rc(ibv_modify_qp(s.qp, &a,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
             "ibv_modify_qp to INIT");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    check_rc(ibv_modify_qp(s.qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
             "ibv_modify_qp to RTR");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<std::uint8_t>(o.timeout);
    a.retry_cnt = static_cast<std::uint8_t>(o.retry);
    a.rnr_retry = 7;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = 16;
    check_rc(ibv_modify_qp(s.qp, &a,
                           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
             "ibv_modify_qp to RTS");
}

ibv_mtu path_mtu(const Side* sides, int n, const Options& o) {
    ibv_mtu m = IBV_MTU_4096;
    for (int i = 0; i < n; ++i) m = std::min(m, sides[i].port.active_mtu);
    if (o.mtu != 0) {
        if (mtu_bytes(m) < o.mtu) {
            std::fprintf(stderr, "%s: --mtu %u is above the ports' active MTU %u\n", kProg, o.mtu,
                         mtu_bytes(m));
            std::exit(kExitUsage);
        }
        m = to_ibv_mtu(o.mtu);
    }
    return m;
}

// A starting PSN just below the 24-bit wrap, so that every run crosses it.
std::uint32_t start_psn(Rng& rng) {
    return 0xffffffu - static_cast<std::uint32_t>(rng.below(512));
}

// ---- rdma_cm ---------------------------------------------------------------------------------

// Side A's QP connected to side B's through rdma_cm, in this one thread: B listens on its
// port's IPv4 address (a port the daemon picks), A connects from its own address, B
// accepts; each QP is made on its id (rdma_create_qp) as the connection comes up. On iWARP
// this is the only way to connect a QP; on RoCE it is the CM's REQ, REP and RTU instead of
// the Modify QPs (the PSNs are the CM's, the path MTU the route's).
class CmPair {
  public:
    CmPair() {
        ch_ = rdma_create_event_channel();
        if (ch_ == nullptr) setup_error("rdma_create_event_channel");
    }
    ~CmPair();
    CmPair(const CmPair&) = delete;
    CmPair& operator=(const CmPair&) = delete;

    void connect(Side s[2], std::uint32_t send_wr, std::uint32_t recv_wr, const Options& o);
    // Both ends disconnect (each sees DISCONNECTED); the QPs go to the error state.
    void disconnect();

  private:
    static constexpr int kEventMs = 20000;  // a CM step, retransmissions included
    rdma_cm_event* next_event(int ms, const char* waiting_for);
    // The next event, which must be `want` on `id` (any id when null); returns its id.
    rdma_cm_id* expect(rdma_cm_event_type want, rdma_cm_id* id, const char* what);
    void make_qp(Side& s, rdma_cm_id* id, std::uint32_t send_wr, std::uint32_t recv_wr);

    rdma_event_channel* ch_ = nullptr;
    rdma_cm_id* listener_ = nullptr;
    rdma_cm_id* ids_[2] = {nullptr, nullptr};  // A's (active), B's (from the request)
    bool connected_ = false;
};

// The IPv4 address of the getifaddrs entry named `name`: libsnic lists each port's address
// under its devices' names (as an RNIC's sits on its netdev), for names under 16 characters.
bool ifaddr_of(const std::string& name, in_addr* out) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return false;
    bool found = false;
    for (const ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || name != i->ifa_name)
            continue;
        *out = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
        found = true;
    }
    freeifaddrs(list);
    return found;
}

// The address of side `i` for rdma_cm: --addrs, else its GID if IPv4-mapped (RoCEv2), else
// its getifaddrs entry (an iWARP device's GID is its MAC, as on an iWARP RNIC).
sockaddr_in ipv4_of(const Side& s, const Options& o, int i) {
    static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    sockaddr_in a{};
    a.sin_family = AF_INET;
    if (!o.addr[i].empty()) {
        inet_pton(AF_INET, o.addr[i].c_str(), &a.sin_addr);  // checked by parse_options
    } else if (std::memcmp(s.gid.raw, kMapped, sizeof kMapped) == 0) {
        std::memcpy(&a.sin_addr, s.gid.raw + 12, 4);
    } else if (!ifaddr_of(s.dev, &a.sin_addr)) {
        errno = EADDRNOTAVAIL;
        setup_error(
            "--rdma-cm: no IPv4 address known for %s (its GID is not one, and getifaddrs has no "
            "entry of that name: libsnic lists names under 16 characters); give --addrs",
            s.dev.c_str());
    }
    return a;
}

std::string to_string(const sockaddr_in& a) {
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// rdma_cm took `id` to a device other than `s`'s: says why that happens.
[[noreturn]] void wrong_device(const Side& s, rdma_cm_id* id, const char* what) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "%s: --rdma-cm: %s went to device %s, not %s: a port's RoCE and iWARP devices "
                 "share its address and rdma_cm takes it to the first; set SNIC_DEVICES to the "
                 "two devices of the run so that this process sees their kind alone\n",
                 kProg, what, ibv_get_device_name(id->verbs->device), s.dev.c_str());
    std::exit(kExitSetup);
}

rdma_cm_event* CmPair::next_event(int ms, const char* waiting_for) {
    pollfd p{ch_->fd, POLLIN, 0};
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
        const int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 0)));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) setup_error("poll on the rdma_cm channel");
        if (n == 0) fail("--rdma-cm: no %s within %d ms", waiting_for, ms);
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(ch_, &ev) != 0) setup_error("rdma_get_cm_event");
        return ev;
    }
}

rdma_cm_id* CmPair::expect(rdma_cm_event_type want, rdma_cm_id* id, const char* what) {
    char waiting[160];
    std::snprintf(waiting, sizeof waiting, "%s (%s)", rdma_event_str(want), what);
    rdma_cm_event* ev = next_event(kEventMs, waiting);
    const rdma_cm_event_type got = ev->event;
    const int status = ev->status;
    rdma_cm_id* from = ev->id;
    rdma_ack_cm_event(ev);
    if (got != want || status != 0 || (id != nullptr && from != id))
        fail("--rdma-cm: %s (status %d) while waiting for %s", rdma_event_str(got), status,
             waiting);
    return from;
}

void CmPair::make_qp(Side& s, rdma_cm_id* id, std::uint32_t send_wr, std::uint32_t recv_wr) {
    if (id->verbs != s.ctx)
        wrong_device(s, id, s.label == 'A' ? "the connecting id" : "the request");
    ibv_qp_init_attr a = qp_init_attr(s, send_wr, recv_wr);
    if (rdma_create_qp(id, s.pd, &a) != 0) setup_error("rdma_create_qp on %s", s.dev.c_str());
    s.qp = id->qp;
    s.max_inline = a.cap.max_inline_data;
    s.id = id;
}

void CmPair::connect(Side s[2], std::uint32_t send_wr, std::uint32_t recv_wr, const Options& o) {
    sockaddr_in listen_at = ipv4_of(s[1], o, 1);
    if (rdma_create_id(ch_, &listener_, nullptr, RDMA_PS_TCP) != 0) setup_error("rdma_create_id");
    if (rdma_bind_addr(listener_, reinterpret_cast<sockaddr*>(&listen_at)) != 0)
        setup_error("rdma_bind_addr %s", to_string(listen_at).c_str());
    if (listener_->verbs != nullptr && listener_->verbs != s[1].ctx)
        wrong_device(s[1], listener_, "the listener");
    if (rdma_listen(listener_, 1) != 0) setup_error("rdma_listen %s", to_string(listen_at).c_str());
    // The port the daemon gave the listener.
    sockaddr_in dst{};
    std::memcpy(&dst, &listener_->route.addr.src_addr, sizeof dst);
    sockaddr_in src = ipv4_of(s[0], o, 0);

    if (rdma_create_id(ch_, &ids_[0], nullptr, RDMA_PS_TCP) != 0) setup_error("rdma_create_id");
    if (!s[0].iwarp) {  // the local ACK timeout of -t (RoCE; iWARP has TCP's)
        std::uint8_t timeout = static_cast<std::uint8_t>(o.timeout);
        if (rdma_set_option(ids_[0], RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                            sizeof timeout) != 0)
            setup_error("rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT");
    }
    if (rdma_resolve_addr(ids_[0], reinterpret_cast<sockaddr*>(&src),
                          reinterpret_cast<sockaddr*>(&dst), 2000) != 0)
        setup_error("rdma_resolve_addr %s -> %s", to_string(src).c_str(), to_string(dst).c_str());
    expect(RDMA_CM_EVENT_ADDR_RESOLVED, ids_[0], "A's address");
    if (rdma_resolve_route(ids_[0], 2000) != 0) setup_error("rdma_resolve_route");
    expect(RDMA_CM_EVENT_ROUTE_RESOLVED, ids_[0], "A's route");
    make_qp(s[0], ids_[0], send_wr, recv_wr);
    rdma_conn_param p{};
    p.responder_resources = 16;
    p.initiator_depth = 16;
    p.retry_count = static_cast<std::uint8_t>(o.retry);
    p.rnr_retry_count = 7;
    if (rdma_connect(ids_[0], &p) != 0) setup_error("rdma_connect %s", to_string(dst).c_str());
    ids_[1] = expect(RDMA_CM_EVENT_CONNECT_REQUEST, nullptr, "B's connect request");
    make_qp(s[1], ids_[1], send_wr, recv_wr);
    if (rdma_accept(ids_[1], &p) != 0) setup_error("rdma_accept");
    // Both ends come up, in either order.
    bool up[2] = {false, false};
    while (!up[0] || !up[1]) {
        rdma_cm_id* id = expect(RDMA_CM_EVENT_ESTABLISHED, nullptr, "both ends established");
        const int i = id == ids_[0] ? 0 : id == ids_[1] ? 1 : -1;
        if (i < 0 || up[i]) fail("--rdma-cm: ESTABLISHED on an unexpected id");
        up[i] = true;
    }
    connected_ = true;
}

void CmPair::disconnect() {
    if (!connected_) return;
    connected_ = false;
    check_rc(rdma_disconnect(ids_[0]), "rdma_disconnect");
    bool down[2] = {false, false};
    while (!down[0] || !down[1]) {
        rdma_cm_id* id = expect(RDMA_CM_EVENT_DISCONNECTED, nullptr, "both ends disconnected");
        const int i = id == ids_[0] ? 0 : id == ids_[1] ? 1 : -1;
        if (i < 0 || down[i]) fail("--rdma-cm: DISCONNECTED on an unexpected id");
        down[i] = true;
    }
}

CmPair::~CmPair() {
    for (rdma_cm_id* id : ids_) {
        if (id == nullptr) continue;
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
    if (listener_ != nullptr) rdma_destroy_id(listener_);
    rdma_destroy_event_channel(ch_);
}

// ---- waiting --------------------------------------------------------------------------------

// Blocks until a CQ of `sides` may have a completion (armed before), the deadline, or 100
// ms. The caller polls its CQs before calling: arm, poll again, then wait, so that no
// completion is missed between its last poll and the wait.
void arm(Side& s) {
    check_rc(ibv_req_notify_cq(s.scq, 0), "ibv_req_notify_cq");
    check_rc(ibv_req_notify_cq(s.rcq, 0), "ibv_req_notify_cq");
}

void wait_events(Side* sides, int n, Clock::time_point deadline) {
    pollfd fds[2];
    for (int i = 0; i < n; ++i) fds[i] = {sides[i].ch->fd, POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    const int ms = static_cast<int>(std::clamp<long long>(left, 0, 100));
    const int r = ::poll(fds, static_cast<nfds_t>(n), ms);
    if (r < 0 && errno != EINTR) setup_error("poll on the completion channels");
    for (int i = 0; i < n; ++i) {
        for (;;) {
            ibv_cq* cq = nullptr;
            void* cq_ctx = nullptr;
            if (ibv_get_cq_event(sides[i].ch, &cq, &cq_ctx) != 0) {
                if (errno != EAGAIN && errno != EWOULDBLOCK) setup_error("ibv_get_cq_event");
                break;
            }
            if (cq == sides[i].scq)
                ++sides[i].scq_events;
            else if (cq == sides[i].rcq)
                ++sides[i].rcq_events;
            else
                fail("ibv_get_cq_event on %s's channel returned a CQ that is not its own",
                     sides[i].dev.c_str());
        }
    }
}

void ack_events(Side& s) {
    if (s.scq_events) ibv_ack_cq_events(s.scq, s.scq_events);
    if (s.rcq_events) ibv_ack_cq_events(s.rcq, s.rcq_events);
    s.scq_events = s.rcq_events = 0;
}

// One completion from `cq` of side `sides[which]`, within `seconds`; fails with `what` otherwise.
ibv_wc poll_one(Side* sides, int n, int which, ibv_cq* cq, double seconds, const char* what) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(seconds));
    for (int spins = 0;; ++spins) {
        ibv_wc wc{};
        const int got = ibv_poll_cq(cq, 1, &wc);
        if (got < 0) setup_error("ibv_poll_cq");
        if (got == 1) return wc;
        if (Clock::now() >= deadline) fail("%s: no completion within %.1f s", what, seconds);
        if (spins < 100) continue;
        arm(sides[which]);
        if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
        wait_events(sides, n, deadline);
    }
}

// No completion on any CQ of `sides` for `seconds`.
void expect_quiet(Side* sides, int n, double seconds, const char* when) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(seconds));
    for (;;) {
        for (int i = 0; i < n; ++i) {
            for (ibv_cq* cq : {sides[i].scq, sides[i].rcq}) {
                ibv_wc wc{};
                if (ibv_poll_cq(cq, 1, &wc) == 1)
                    fail(
                        "%s: unexpected %s completion on %s: wr_id %#llx status %s opcode %d "
                        "byte_len %u",
                        when, cq == sides[i].scq ? "send" : "receive", sides[i].dev.c_str(),
                        static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status),
                        static_cast<int>(wc.opcode), wc.byte_len);
            }
        }
        if (Clock::now() >= deadline) return;
        for (int i = 0; i < n; ++i) arm(sides[i]);
        wait_events(sides, n, deadline);
    }
}

std::string gid_str(const ibv_gid& g) {
    char buf[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, g.raw, buf, sizeof buf);
    return buf;
}

// ---- the stress run -------------------------------------------------------------------------

enum class Kind : std::uint8_t { send, send_imm, write, write_imm, read, fetch_add, cmp_swap };
constexpr int kKinds = 7;
constexpr const char* kKindName[kKinds] = {"SEND", "SEND_IMM",  "WRITE",   "WRITE_IMM",
                                           "READ", "FETCH_ADD", "CMP_SWAP"};
// Weights of the operation mix, in percent: RoCEv2's, and iWARP's, where RDMAP has no Send
// with Immediate (RFC 7306's Immediate Data goes alone, after a Write: WRITE with immediate)
// and iWARP RNICs refuse it, so its share goes to SEND.
constexpr int kKindWeight[kKinds] = {20, 10, 15, 20, 20, 8, 7};
constexpr int kKindWeightIwarp[kKinds] = {30, 0, 15, 20, 20, 8, 7};

bool consumes_recv(Kind k) {
    return k == Kind::send || k == Kind::send_imm || k == Kind::write_imm;
}
bool is_atomic(Kind k) {
    return k == Kind::fetch_add || k == Kind::cmp_swap;
}

ibv_wc_opcode send_wc_opcode(Kind k) {
    switch (k) {
        case Kind::send:
        case Kind::send_imm:
            return IBV_WC_SEND;
        case Kind::write:
        case Kind::write_imm:
            return IBV_WC_RDMA_WRITE;
        case Kind::read:
            return IBV_WC_RDMA_READ;
        case Kind::fetch_add:
            return IBV_WC_FETCH_ADD;
        case Kind::cmp_swap:
            return IBV_WC_COMP_SWAP;
    }
    return IBV_WC_SEND;
}

constexpr std::size_t kGuard = 512;      // guard bytes checked around each target range
constexpr std::size_t kMaxOffset = 64;   // target ranges start at a random offset below this
constexpr std::uint32_t kFaWords = 8;    // fetch-and-add words per side, shared by all slots
constexpr std::uint32_t kFaBase = 64;    // word index of the first fetch-and-add word
constexpr std::uint32_t kCasBase = 128;  // compare-and-swap words: one per slot
constexpr std::uint32_t kResBase = 512;  // atomic result words: one per slot
constexpr std::uint32_t kAtomicWords = 1024;
constexpr std::uint32_t kFenceSource = 1000;  // a word that never changes, READ by fences
constexpr std::uint32_t kFenceSink = 1001;    // where a fence READs it to
// The wr_id of a fence: this bit, and the index of the first operation posted after it.
constexpr std::uint64_t kFenceTag = 1ull << 63;

std::size_t round64(std::size_t n) {
    return (n + 63) & ~std::size_t{63};
}

struct Op {
    std::uint64_t index = 0;
    Kind kind = Kind::send;
    int from = 0;  // the initiating side; the target is 1 - from
    std::uint32_t slot = 0;
    std::uint32_t len = 0;
    std::uint32_t offset = 0;  // of the target range inside its window, past the guard
    bool inline_data = false;
    std::uint32_t fa_word = 0;
    std::uint64_t add_or_compare = 0, swap = 0, expect_old = 0, expect_new = 0;
    bool send_done = false, recv_done = false;
    bool placed = true;  // an iWARP WRITE: false until the target is known to have it
    bool active = false;
};

struct Pending {  // an operation expected to consume a receive WR at the target
    std::uint64_t index;
    std::uint32_t slot;
};

class Stress {
  public:
    explicit Stress(const Options& o)
        : o_(o), rng_(o.seed), recv_rng_(mix64(o.seed ^ 0x7265637673ull)) {}
    void run();

  private:
    struct Mem {        // one side's memory
        Region local;   // slots x local_stride: sources of SEND/WRITE, destinations of READ
        Region target;  // slots x window_stride: where the peer WRITEs and READs
        Region recv;    // nrecv x recv_stride: receive buffers
        Region atom;    // kAtomicWords words: the peer's atomic targets, our result words
        std::uint64_t fa_value[kFaWords] =
            {};  // what each fetch-and-add word holds once all posted adds ran
        std::uint64_t fa_initial[kFaWords] = {};
        std::uint64_t cas_value[256] = {};      // each compare-and-swap word
        std::deque<std::uint64_t> send_fifo;    // op indexes posted on this QP, in order
        std::deque<Pending> recv_expect;        // ops of the peer that consume our receives
        std::deque<std::uint32_t> recv_posted;  // receive buffers posted, in order
        // iWARP: WRITEs of ours whose send completed, their placement not yet witnessed
        // (slots, in posting order); operations before index `witnessed` are placed; a
        // witness (or fence) posted covers the operations before `witness_posted`.
        std::deque<std::uint32_t> unplaced;
        std::uint64_t witnessed = 0, witness_posted = 0;
        bool fence_out = false;
        std::uint64_t* atom_word(std::uint32_t i) {
            return reinterpret_cast<std::uint64_t*>(atom.p) + i;
        }
    };

    std::uint64_t key_of(std::uint64_t op) const {
        return mix64(o_.seed * 0x100000001b3ull ^ (op + 1) * 0x9e3779b97f4a7c15ull);
    }
    std::uint8_t* local_buf(int side, std::uint32_t slot) {
        return mem_[side].local.p + slot * local_stride_;
    }
    std::uint8_t* window(int side, std::uint32_t slot) {
        return mem_[side].target.p + slot * window_stride_;
    }
    std::uint8_t* recv_buf(int side, std::uint32_t b) {
        return mem_[side].recv.p + b * recv_stride_;
    }
    std::string describe(const Op& op) const;

    void setup();
    void post_recv(int side, std::uint32_t buf);
    void post_op(std::uint64_t index);
    std::uint32_t draw_len();
    static int split_sges(Rng& rng, ibv_sge* sge, std::uint8_t* base, std::uint32_t len,
                          std::uint32_t lkey, int max_pieces);
    bool poll_cqs();
    void on_send_wc(int side, const ibv_wc& wc);
    void on_recv_wc(int side, const ibv_wc& wc);
    void on_fence_wc(int side, const ibv_wc& wc);
    void post_fences();
    void witness(int side, std::uint64_t before);
    void check_written(const Op& op);
    void maybe_finish(Op& op);
    void check_bytes_bg(const char* what, const Op& op, const std::uint8_t* p, std::size_t len,
                        std::uint8_t bg, std::size_t base_off);
    void check_bytes_pattern(const char* what, const Op& op, const std::uint8_t* p,
                             std::size_t len);
    void final_checks();
    [[noreturn]] void stalled();
    [[noreturn]] void failed_completion(const Op* op, int side, const char* queue,
                                        const ibv_wc& wc);
    const Op* find_op(std::uint64_t index) const;

    const Options& o_;
    Rng rng_;       // the operations: the same sequence for the same seed
    Rng recv_rng_;  // how receive WRs are split, which depends on when they complete
    Side side_[2];
    std::unique_ptr<CmPair> cm_;  // --rdma-cm
    bool deferred_ = false;       // iWARP: WRITEs are checked once a later operation shows it
    std::uint64_t fences_ = 0;
    Mem mem_[2];
    ibv_mtu mtu_ = IBV_MTU_1024;
    std::size_t local_stride_ = 0, window_stride_ = 0, recv_stride_ = 0;
    std::uint32_t nrecv_ = 0;
    std::vector<Op> slots_;
    std::vector<std::uint32_t> free_slots_;
    std::uint64_t next_op_ = 0, done_ops_ = 0, bytes_ = 0;
    std::uint64_t kind_count_[kKinds] = {};
    Clock::time_point last_progress_;
};

std::string Stress::describe(const Op& op) const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "op %llu %s %c->%c len %u slot %u%s",
                  static_cast<unsigned long long>(op.index), kKindName[static_cast<int>(op.kind)],
                  side_[op.from].label, side_[1 - op.from].label, op.len, op.slot,
                  op.inline_data ? " inline" : "");
    return buf;
}

void Stress::check_bytes_bg(const char* what, const Op& op, const std::uint8_t* p, std::size_t len,
                            std::uint8_t bg, std::size_t base_off) {
    const std::size_t at = find_not_byte(p, len, bg);
    if (at != kNoMismatch)
        fail("%s: %s: byte %zu is %#04x, expected the untouched value %#04x", describe(op).c_str(),
             what, base_off + at, p[at], bg);
}

void Stress::check_bytes_pattern(const char* what, const Op& op, const std::uint8_t* p,
                                 std::size_t len) {
    const std::size_t at = find_pattern_mismatch(p, len, key_of(op.index));
    if (at == kNoMismatch) return;
    std::size_t bad = 0;
    for (std::size_t i = at; i < len; ++i) bad += p[i] != pattern_byte(key_of(op.index), i);
    fail("%s: %s: byte %zu of %zu is %#04x, expected %#04x (%zu bytes differ from there on)",
         describe(op).c_str(), what, at, len, p[at], pattern_byte(key_of(op.index), at), bad);
}

void Stress::setup() {
    const std::uint32_t d = o_.depth;
    nrecv_ = d + 8;
    const int scq = static_cast<int>(2 * d + 16), rcq = static_cast<int>(2 * nrecv_ + 16);
    // One send WR more than the slots: a fence (iWARP).
    const std::uint32_t send_wr = d + 1;
    for (int i = 0; i < 2; ++i)
        open_side(side_[i], i == 0 ? 'A' : 'B', o_.dev[i], scq, rcq, o_.rdma_cm);
    if (o_.rdma_cm) {
        cm_ = std::make_unique<CmPair>();
        cm_->connect(side_, send_wr, nrecv_, o_);
        ibv_qp_attr a{};
        ibv_qp_init_attr init{};
        check_rc(ibv_query_qp(side_[0].qp, &a, IBV_QP_PATH_MTU, &init), "ibv_query_qp");
        mtu_ = a.path_mtu;
    } else {
        for (int i = 0; i < 2; ++i) create_qp(side_[i], send_wr, nrecv_);
        mtu_ = path_mtu(side_, 2, o_);
    }
    deferred_ = side_[0].iwarp;
    const std::size_t m = o_.max_size;
    local_stride_ = round64(m + kGuard);
    window_stride_ = round64(kGuard + kMaxOffset + m + kGuard);
    recv_stride_ = round64(m + kGuard);
    for (int i = 0; i < 2; ++i) {
        Mem& mm = mem_[i];
        mm.local =
            make_region(side_[i].pd, d * local_stride_, kAllAccess, kBgLocal, "local buffers");
        mm.target =
            make_region(side_[i].pd, d * window_stride_, kAllAccess, kBgTarget, "target windows");
        mm.recv = make_region(side_[i].pd, nrecv_ * recv_stride_, IBV_ACCESS_LOCAL_WRITE, kBgRecv,
                              "receive buffers");
        mm.atom = make_region(side_[i].pd, kAtomicWords * 8, kAllAccess, 0, "atomic words");
        for (std::uint32_t w = 0; w < kAtomicWords; ++w) *mm.atom_word(w) = kAtomicGuard;
        for (std::uint32_t w = 0; w < kFaWords; ++w) {
            mm.fa_initial[w] = mm.fa_value[w] = rng_.next() >> 32;
            *mm.atom_word(kFaBase + w) = mm.fa_value[w];
        }
        for (std::uint32_t s = 0; s < d; ++s) {
            mm.cas_value[s] = rng_.next();
            *mm.atom_word(kCasBase + s) = mm.cas_value[s];
            *mm.atom_word(kResBase + s) = kResultSentinel;
        }
    }
    const std::uint32_t psn[2] = {start_psn(rng_), start_psn(rng_)};
    if (!o_.rdma_cm)
        for (int i = 0; i < 2; ++i)
            connect_qp(side_[i], side_[1 - i].gid, side_[1 - i].qp->qp_num, psn[1 - i], psn[i],
                       mtu_, o_);
    for (int i = 0; i < 2; ++i)
        for (std::uint32_t b = 0; b < nrecv_; ++b) post_recv(i, b);
    slots_.assign(d, Op{});
    for (std::uint32_t s = d; s-- > 0;) free_slots_.push_back(s);
    if (o_.verbose && o_.rdma_cm)
        std::printf(
            "%s: %s (%s, %s, QP %#x) <-> %s (%s, QP %#x) connected through rdma_cm, path MTU %u, "
            "max inline %u, %u receive WRs per QP\n",
            kProg, side_[0].dev.c_str(), side_[0].iwarp ? "iWARP" : "RoCEv2",
            gid_str(side_[0].gid).c_str(), side_[0].qp->qp_num, side_[1].dev.c_str(),
            gid_str(side_[1].gid).c_str(), side_[1].qp->qp_num, mtu_bytes(mtu_),
            side_[0].max_inline, nrecv_);
    else if (o_.verbose)
        std::printf(
            "%s: %s (%s, QP %#x, PSN %#x) <-> %s (%s, QP %#x, PSN %#x), path MTU %u, timeout %d, "
            "retry %d, max inline %u, %u receive WRs per QP\n",
            kProg, side_[0].dev.c_str(), gid_str(side_[0].gid).c_str(), side_[0].qp->qp_num, psn[0],
            side_[1].dev.c_str(), gid_str(side_[1].gid).c_str(), side_[1].qp->qp_num, psn[1],
            mtu_bytes(mtu_), o_.timeout, o_.retry, side_[0].max_inline, nrecv_);
}

// Splits [base, base + len) into 1..max_pieces SGEs (none for an empty message, sometimes).
int Stress::split_sges(Rng& rng, ibv_sge* sge, std::uint8_t* base, std::uint32_t len,
                       std::uint32_t lkey, int max_pieces) {
    if (len == 0) {
        if (rng.chance(0.5)) return 0;
        sge[0] = {reinterpret_cast<std::uintptr_t>(base), 0, lkey};
        return 1;
    }
    int pieces = 1 + static_cast<int>(rng.below(static_cast<std::uint64_t>(max_pieces)));
    pieces = static_cast<int>(std::min<std::uint32_t>(static_cast<std::uint32_t>(pieces), len));
    std::vector<std::uint32_t> cuts;
    while (static_cast<int>(cuts.size()) < pieces - 1) {
        const auto c = static_cast<std::uint32_t>(1 + rng.below(len - 1));
        if (std::find(cuts.begin(), cuts.end(), c) == cuts.end()) cuts.push_back(c);
    }
    std::sort(cuts.begin(), cuts.end());
    std::uint32_t at = 0;
    for (int i = 0; i < pieces; ++i) {
        const std::uint32_t end = i + 1 < pieces ? cuts[static_cast<std::size_t>(i)] : len;
        sge[i] = {reinterpret_cast<std::uintptr_t>(base + at), end - at, lkey};
        at = end;
    }
    return pieces;
}

void Stress::post_recv(int side, std::uint32_t b) {
    ibv_sge sge[2];
    const int n =
        split_sges(recv_rng_, sge, recv_buf(side, b), o_.max_size, mem_[side].recv.mr->lkey, 2);
    ibv_recv_wr wr{};
    wr.wr_id = b;
    wr.sg_list = sge;
    wr.num_sge = n;
    ibv_recv_wr* bad = nullptr;
    check_rc(ibv_post_recv(side_[side].qp, &wr, &bad), "ibv_post_recv");
    mem_[side].recv_posted.push_back(b);
}

// Log-uniform in [0, max]: as many 1-9 byte messages as 100-999 byte ones.
std::uint32_t Stress::draw_len() {
    const double top = std::log2(static_cast<double>(o_.max_size) + 1);
    const double v = std::exp2(rng_.unit() * top) - 1;
    return std::min<std::uint32_t>(o_.max_size, static_cast<std::uint32_t>(v));
}

void Stress::post_op(std::uint64_t index) {
    const std::uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    Op& op = slots_[slot];
    op = Op{};
    op.index = index;
    op.slot = slot;
    op.active = true;
    const int* weight = side_[0].iwarp ? kKindWeightIwarp : kKindWeight;
    int pick = static_cast<int>(rng_.below(100));
    int k = 0;
    while (pick >= weight[k]) pick -= weight[k++];
    op.kind = static_cast<Kind>(k);
    op.from = static_cast<int>(rng_.below(2));
    const int to = 1 - op.from;
    Side& src = side_[op.from];
    Mem& sm = mem_[op.from];
    Mem& tm = mem_[to];
    const std::uint64_t key = key_of(index);

    ibv_sge sge[4];
    ibv_send_wr wr{};
    wr.wr_id = index;
    wr.sg_list = sge;
    wr.send_flags = IBV_SEND_SIGNALED;
    std::uint8_t* lb = local_buf(op.from, slot);
    if (!is_atomic(op.kind)) {
        op.len = draw_len();
        op.offset = static_cast<std::uint32_t>(rng_.below(kMaxOffset));
    }
    const std::uint64_t remote =
        reinterpret_cast<std::uintptr_t>(window(to, slot) + kGuard + op.offset);
    switch (op.kind) {
        case Kind::send:
        case Kind::send_imm:
        case Kind::write:
        case Kind::write_imm: {
            fill_pattern(lb, op.len, key);
            op.inline_data = op.len <= src.max_inline && rng_.chance(0.25);
            if (op.inline_data) wr.send_flags |= IBV_SEND_INLINE;
            wr.num_sge = split_sges(rng_, sge, lb, op.len, sm.local.mr->lkey, 3);
            wr.opcode = op.kind == Kind::send       ? IBV_WR_SEND
                        : op.kind == Kind::send_imm ? IBV_WR_SEND_WITH_IMM
                        : op.kind == Kind::write    ? IBV_WR_RDMA_WRITE
                                                    : IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(static_cast<std::uint32_t>(index));
            if (op.kind == Kind::write || op.kind == Kind::write_imm) {
                wr.wr.rdma.remote_addr = remote;
                wr.wr.rdma.rkey = tm.target.mr->rkey;
            }
            break;
        }
        case Kind::read:
            fill_pattern(window(to, slot) + kGuard + op.offset, op.len, key);
            wr.num_sge = split_sges(rng_, sge, lb, op.len, sm.local.mr->lkey, 3);
            wr.opcode = IBV_WR_RDMA_READ;
            wr.wr.rdma.remote_addr = remote;
            wr.wr.rdma.rkey = tm.target.mr->rkey;
            break;
        case Kind::fetch_add: {
            op.len = 8;
            op.fa_word = static_cast<std::uint32_t>(rng_.below(kFaWords));
            op.add_or_compare = 1 + (rng_.next() >> 32);
            op.expect_old = tm.fa_value[op.fa_word];  // RC executes the requests of a QP in order
            tm.fa_value[op.fa_word] += op.add_or_compare;
            wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.wr.atomic.remote_addr =
                reinterpret_cast<std::uintptr_t>(tm.atom_word(kFaBase + op.fa_word));
            wr.wr.atomic.rkey = tm.atom.mr->rkey;
            wr.wr.atomic.compare_add = op.add_or_compare;
            sge[0] = {reinterpret_cast<std::uintptr_t>(sm.atom_word(kResBase + slot)), 8,
                      sm.atom.mr->lkey};
            wr.num_sge = 1;
            break;
        }
        case Kind::cmp_swap: {
            op.len = 8;
            const std::uint64_t cur = tm.cas_value[slot];
            op.add_or_compare = rng_.chance(0.6) ? cur : cur ^ (1 + rng_.below(~0ull));
            op.swap = rng_.next();
            op.expect_old = cur;
            op.expect_new = op.add_or_compare == cur ? op.swap : cur;
            tm.cas_value[slot] = op.expect_new;
            wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
            wr.wr.atomic.remote_addr =
                reinterpret_cast<std::uintptr_t>(tm.atom_word(kCasBase + slot));
            wr.wr.atomic.rkey = tm.atom.mr->rkey;
            wr.wr.atomic.compare_add = op.add_or_compare;
            wr.wr.atomic.swap = op.swap;
            sge[0] = {reinterpret_cast<std::uintptr_t>(sm.atom_word(kResBase + slot)), 8,
                      sm.atom.mr->lkey};
            wr.num_sge = 1;
            break;
        }
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(src.qp, &wr, &bad);
    if (rc != 0) {
        errno = rc;
        setup_error("ibv_post_send of %s", describe(op).c_str());
    }
    sm.send_fifo.push_back(index);
    if (consumes_recv(op.kind)) tm.recv_expect.push_back({index, slot});
    if (op.kind != Kind::write) sm.witness_posted = index;  // it shows the target got past
    // Inline data is the WR's own: the buffer may change at once.
    if (op.inline_data) std::memset(lb, kBgLocal, op.len);
    ++kind_count_[static_cast<int>(op.kind)];
}

void Stress::on_send_wc(int side, const ibv_wc& wc) {
    Mem& sm = mem_[side];
    const Side& s = side_[side];
    if (sm.send_fifo.empty())
        fail("send completion wr_id %llu (status %s) with nothing outstanding on %s's QP",
             static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status),
             s.dev.c_str());
    const std::uint64_t want = sm.send_fifo.front();
    if ((want & kFenceTag) != 0) return on_fence_wc(side, wc);
    if (wc.wr_id != want)
        fail(
            "send completion out of order on %s's QP: wr_id %llu (status %s), expected op %llu, "
            "the oldest outstanding (%zu outstanding)",
            s.dev.c_str(), static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status),
            static_cast<unsigned long long>(want), sm.send_fifo.size());
    sm.send_fifo.pop_front();
    Op* opp = const_cast<Op*>(find_op(want));
    if (opp == nullptr)
        fail("send completion for op %llu, which is not in flight",
             static_cast<unsigned long long>(want));
    Op& op = *opp;
    if (op.send_done) fail("%s: a second send completion", describe(op).c_str());
    if (wc.status != IBV_WC_SUCCESS) failed_completion(&op, side, "send", wc);
    if (wc.opcode != send_wc_opcode(op.kind))
        fail("%s: send completion opcode %d, expected %d", describe(op).c_str(),
             static_cast<int>(wc.opcode), static_cast<int>(send_wc_opcode(op.kind)));
    if (wc.qp_num != s.qp->qp_num)
        fail("%s: send completion qp_num %#x, expected %#x", describe(op).c_str(), wc.qp_num,
             s.qp->qp_num);
    if ((op.kind == Kind::read || is_atomic(op.kind)) && wc.byte_len != op.len)
        fail("%s: send completion byte_len %u, expected %u", describe(op).c_str(), wc.byte_len,
             op.len);
    op.send_done = true;

    const int to = 1 - side;
    std::uint8_t* lb = local_buf(side, op.slot);
    std::uint8_t* win = window(to, op.slot);
    const std::size_t data_at = kGuard + op.offset;
    switch (op.kind) {
        case Kind::send:
        case Kind::send_imm:
            if (!op.inline_data) {
                check_bytes_pattern("source buffer changed under a SEND", op, lb, op.len);
                std::memset(lb, kBgLocal, op.len);
            }
            break;
        case Kind::write:
        case Kind::write_imm:
            if (!op.inline_data) {
                check_bytes_pattern("source buffer changed under a WRITE", op, lb, op.len);
                std::memset(lb, kBgLocal, op.len);
            }
            if (!deferred_) {
                check_written(op);  // RC's ACK: the bytes are there
            } else if (op.kind == Kind::write && op.index >= sm.witnessed) {
                op.placed = false;  // until a later operation shows it (witness())
                sm.unplaced.push_back(op.slot);
            } else if (op.kind == Kind::write) {
                check_written(op);
            }  // an iWARP WRITE with immediate: at its receive completion
            break;
        case Kind::read:
            check_bytes_pattern("data READ into the local buffer", op, lb, op.len);
            check_bytes_bg("local buffer past the READ length", op, lb + op.len, kGuard, kBgLocal,
                           op.len);
            check_bytes_pattern("target range after a READ of it", op, win + data_at, op.len);
            check_bytes_bg("target window before the READ range", op, win, data_at, kBgTarget, 0);
            check_bytes_bg("target window after the READ range", op, win + data_at + op.len, kGuard,
                           kBgTarget, data_at + op.len);
            std::memset(lb, kBgLocal, op.len);
            std::memset(win + data_at, kBgTarget, op.len);
            break;
        case Kind::fetch_add:
        case Kind::cmp_swap: {
            std::uint64_t* res = sm.atom_word(kResBase + op.slot);
            const std::uint64_t got = __atomic_load_n(res, __ATOMIC_ACQUIRE);
            if (got != op.expect_old) {
                if (op.kind == Kind::fetch_add)
                    fail(
                        "%s: fetch-and-add of %#llx on word %u returned %#llx, expected %#llx "
                        "(the word's start value %#llx plus the adds posted before it)",
                        describe(op).c_str(), static_cast<unsigned long long>(op.add_or_compare),
                        op.fa_word, static_cast<unsigned long long>(got),
                        static_cast<unsigned long long>(op.expect_old),
                        static_cast<unsigned long long>(mem_[to].fa_initial[op.fa_word]));
                fail("%s: compare-and-swap returned %#llx, expected the old value %#llx",
                     describe(op).c_str(), static_cast<unsigned long long>(got),
                     static_cast<unsigned long long>(op.expect_old));
            }
            *res = kResultSentinel;
            if (op.kind == Kind::cmp_swap) {
                const std::uint64_t now =
                    __atomic_load_n(mem_[to].atom_word(kCasBase + op.slot), __ATOMIC_ACQUIRE);
                if (now != op.expect_new)
                    fail(
                        "%s: after compare %#llx swap %#llx on %#llx the word holds %#llx, "
                        "expected %#llx",
                        describe(op).c_str(), static_cast<unsigned long long>(op.add_or_compare),
                        static_cast<unsigned long long>(op.swap),
                        static_cast<unsigned long long>(op.expect_old),
                        static_cast<unsigned long long>(now),
                        static_cast<unsigned long long>(op.expect_new));
            }
            break;
        }
    }
    // A READ's or atomic's response came after the target took everything before it.
    if (deferred_ && (op.kind == Kind::read || is_atomic(op.kind))) witness(side, op.index);
    maybe_finish(op);
}

// A WRITE's bytes, exactly at its target range, the guard bytes around it untouched; then
// the range back to the background.
void Stress::check_written(const Op& op) {
    std::uint8_t* win = window(1 - op.from, op.slot);
    const std::size_t data_at = kGuard + op.offset;
    check_bytes_bg("target window before the written range", op, win, data_at, kBgTarget, 0);
    check_bytes_pattern("written range at the target", op, win + data_at, op.len);
    check_bytes_bg("target window after the written range", op, win + data_at + op.len, kGuard,
                   kBgTarget, data_at + op.len);
    std::memset(win + data_at, kBgTarget, op.len);
}

// The target of `side`'s operations took every one posted before operation `before`: the
// WRITEs among them are placed.
void Stress::witness(int side, std::uint64_t before) {
    Mem& sm = mem_[side];
    sm.witnessed = std::max(sm.witnessed, before);
    while (!sm.unplaced.empty() && slots_[sm.unplaced.front()].index < sm.witnessed) {
        Op& op = slots_[sm.unplaced.front()];
        sm.unplaced.pop_front();
        check_written(op);
        op.placed = true;
        maybe_finish(op);
    }
}

// Fences (iWARP): an 8-byte READ from each side whose WRITEs wait for a witness that is not
// coming: no operation after its newest unplaced WRITE is in flight, and none will be posted
// (every slot is taken, or every operation was posted).
void Stress::post_fences() {
    if (!free_slots_.empty() && next_op_ < o_.ops) return;
    for (int side = 0; side < 2; ++side) {
        Mem& sm = mem_[side];
        if (sm.unplaced.empty() || sm.fence_out) continue;
        if (slots_[sm.unplaced.back()].index < sm.witness_posted) continue;
        Mem& tm = mem_[1 - side];
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(sm.atom_word(kFenceSink)), 8,
                    sm.atom.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = kFenceTag | next_op_;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_READ;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(tm.atom_word(kFenceSource));
        wr.wr.rdma.rkey = tm.atom.mr->rkey;
        ibv_send_wr* bad = nullptr;
        check_rc(ibv_post_send(side_[side].qp, &wr, &bad), "ibv_post_send of a fence");
        sm.send_fifo.push_back(wr.wr_id);
        sm.witness_posted = next_op_;
        sm.fence_out = true;
        ++fences_;
    }
}

void Stress::on_fence_wc(int side, const ibv_wc& wc) {
    Mem& sm = mem_[side];
    const std::uint64_t want = sm.send_fifo.front();
    if (wc.wr_id != want)
        fail(
            "send completion out of order on %s's QP: wr_id %#llx (status %s), expected the fence "
            "posted before op %llu",
            side_[side].dev.c_str(), static_cast<unsigned long long>(wc.wr_id),
            ibv_wc_status_str(wc.status), static_cast<unsigned long long>(want & ~kFenceTag));
    sm.send_fifo.pop_front();
    if (wc.status != IBV_WC_SUCCESS) failed_completion(nullptr, side, "send (a fence READ)", wc);
    if (wc.opcode != IBV_WC_RDMA_READ || wc.byte_len != 8)
        fail("the fence READ posted before op %llu completed with opcode %d, byte_len %u",
             static_cast<unsigned long long>(want & ~kFenceTag), static_cast<int>(wc.opcode),
             wc.byte_len);
    if (*sm.atom_word(kFenceSink) != kAtomicGuard)
        fail("the fence READ posted before op %llu read %#llx, expected %#llx",
             static_cast<unsigned long long>(want & ~kFenceTag),
             static_cast<unsigned long long>(*sm.atom_word(kFenceSink)),
             static_cast<unsigned long long>(kAtomicGuard));
    sm.fence_out = false;
    witness(side, want & ~kFenceTag);
}

void Stress::on_recv_wc(int side, const ibv_wc& wc) {
    Mem& tm = mem_[side];
    const Side& s = side_[side];
    if (tm.recv_posted.empty())
        fail("receive completion wr_id %llu (status %s) on %s's QP with no receive WR posted",
             static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status),
             s.dev.c_str());
    const std::uint32_t buf = tm.recv_posted.front();
    if (wc.wr_id != buf)
        fail(
            "receive completion out of order on %s's QP: wr_id %llu (status %s), expected receive "
            "WR %u, the oldest posted",
            s.dev.c_str(), static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status),
            buf);
    tm.recv_posted.pop_front();
    if (wc.status != IBV_WC_SUCCESS && !tm.recv_expect.empty()) {
        const Pending p = tm.recv_expect.front();
        failed_completion(&slots_[p.slot], side, "receive", wc);
    }
    if (wc.status != IBV_WC_SUCCESS) failed_completion(nullptr, side, "receive", wc);
    if (tm.recv_expect.empty())
        fail(
            "receive completion (status %s, opcode %d, byte_len %u) on %s's QP, but no SEND or "
            "WRITE with immediate is outstanding towards it",
            ibv_wc_status_str(wc.status), static_cast<int>(wc.opcode), wc.byte_len, s.dev.c_str());
    const Pending p = tm.recv_expect.front();
    tm.recv_expect.pop_front();
    Op& op = slots_[p.slot];
    if (!op.active || op.index != p.index)
        fail("receive completion for op %llu, which is not in flight",
             static_cast<unsigned long long>(p.index));
    if (op.recv_done) fail("%s: a second receive completion", describe(op).c_str());
    const bool wimm = op.kind == Kind::write_imm;
    const ibv_wc_opcode want_opc = wimm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
    if (wc.opcode != want_opc)
        fail("%s: receive completion opcode %d, expected %d", describe(op).c_str(),
             static_cast<int>(wc.opcode), static_cast<int>(want_opc));
    if (wc.qp_num != s.qp->qp_num)
        fail("%s: receive completion qp_num %#x, expected %#x", describe(op).c_str(), wc.qp_num,
             s.qp->qp_num);
    // Both transports report a WRITE with immediate's length (iWARP's Immediate Data message
    // carries none: snic counts the Write that came just before it, as RoCEv2 reports it).
    const std::uint32_t want_len = op.len;
    if (wc.byte_len != want_len)
        fail("%s: receive completion byte_len %u, expected %u", describe(op).c_str(), wc.byte_len,
             want_len);
    const bool want_imm = op.kind != Kind::send;
    if (((wc.wc_flags & IBV_WC_WITH_IMM) != 0) != want_imm)
        fail("%s: receive completion wc_flags %#x: IBV_WC_WITH_IMM %s", describe(op).c_str(),
             wc.wc_flags, want_imm ? "missing" : "set without immediate data");
    if (want_imm && wc.imm_data != htonl(static_cast<std::uint32_t>(op.index)))
        fail("%s: immediate data %#x (network order), expected %#x", describe(op).c_str(),
             ntohl(wc.imm_data), static_cast<std::uint32_t>(op.index));
    std::uint8_t* rb = recv_buf(side, buf);
    if (deferred_) {
        // The target placed everything of the requester's before this message.
        witness(op.from, op.index);
        if (wimm) check_written(op);
    }
    if (wimm) {
        check_bytes_bg("receive buffer consumed by a WRITE with immediate", op, rb,
                       std::min<std::size_t>(recv_stride_, kGuard), kBgRecv, 0);
    } else {
        check_bytes_pattern("message in the receive buffer", op, rb, op.len);
        check_bytes_bg("receive buffer past the message", op, rb + op.len,
                       std::min<std::size_t>(kGuard, recv_stride_ - op.len), kBgRecv, op.len);
        std::memset(rb, kBgRecv, op.len);
    }
    post_recv(side, buf);
    op.recv_done = true;
    maybe_finish(op);
}

void Stress::maybe_finish(Op& op) {
    if (!op.send_done || !op.placed || (consumes_recv(op.kind) && !op.recv_done)) return;
    op.active = false;
    free_slots_.push_back(op.slot);
    ++done_ops_;
    bytes_ += op.len;
}

bool Stress::poll_cqs() {
    bool any = false;
    ibv_wc wc[16];
    for (int i = 0; i < 2; ++i) {
        // Receive completions first: a SEND's receive completes before its ACK leaves.
        int n = ibv_poll_cq(side_[i].rcq, 16, wc);
        if (n < 0) setup_error("ibv_poll_cq");
        for (int j = 0; j < n; ++j) on_recv_wc(i, wc[j]);
        any |= n > 0;
        n = ibv_poll_cq(side_[i].scq, 16, wc);
        if (n < 0) setup_error("ibv_poll_cq");
        for (int j = 0; j < n; ++j) on_send_wc(i, wc[j]);
        any |= n > 0;
    }
    return any;
}

const Op* Stress::find_op(std::uint64_t index) const {
    for (const Op& o : slots_)
        if (o.active && o.index == index) return &o;
    return nullptr;
}

// A completion in error: one QP went to the error state. Says which error came first on
// each queue (the rest are flushes), from what is left in the CQs.
void Stress::failed_completion(const Op* op, int side, const char* queue, const ibv_wc& wc) {
    std::string more;
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    int errors = 0;
    while (Clock::now() < until) {
        for (int i = 0; i < 2; ++i) {
            for (ibv_cq* cq : {side_[i].scq, side_[i].rcq}) {
                ibv_wc w{};
                if (ibv_poll_cq(cq, 1, &w) != 1 || w.status == IBV_WC_SUCCESS) continue;
                if (w.status == IBV_WC_WR_FLUSH_ERR || errors >= 8) continue;
                ++errors;
                const bool send = cq == side_[i].scq;
                std::string what;
                if (send) {
                    const Op* o = find_op(w.wr_id);
                    what = o != nullptr ? describe(*o) : "wr_id " + std::to_string(w.wr_id);
                } else {
                    what = "receive WR " + std::to_string(w.wr_id);
                }
                more += std::string("\n  then on ") + side_[i].dev + "'s " +
                        (send ? "send" : "receive") + " queue: " + what + ": " +
                        ibv_wc_status_str(w.status);
            }
        }
    }
    const std::string who =
        op != nullptr ? describe(*op) : side_[side].dev + " (nothing outstanding towards it)";
    fail(
        "%s: %s completion status %s (%d), vendor_err %#x, after %llu of %llu operations "
        "completed%s%s",
        who.c_str(), queue, ibv_wc_status_str(wc.status), static_cast<int>(wc.status),
        wc.vendor_err, static_cast<unsigned long long>(done_ops_),
        static_cast<unsigned long long>(o_.ops),
        more.empty() ? "" : "; other errors (not flushes):", more.c_str());
}

void Stress::stalled() {
    std::vector<const Op*> active;
    for (const Op& op : slots_)
        if (op.active) active.push_back(&op);
    std::sort(active.begin(), active.end(),
              [](const Op* x, const Op* y) { return x->index < y->index; });
    if (active.size() > 16) active.resize(16);
    std::string list;
    for (const Op* opp : active) {
        const Op& op = *opp;
        list +=
            "\n  " + describe(op) + (op.send_done ? " (send completed)" : " (no send completion)") +
            (op.placed ? "" : " (not yet shown placed)") +
            (consumes_recv(op.kind) ? (op.recv_done ? " (received)" : " (no receive completion)")
                                    : "");
    }
    fail("no completion for %.0f s after %llu of %llu operations completed; in flight:%s",
         o_.stall_s, static_cast<unsigned long long>(done_ops_),
         static_cast<unsigned long long>(o_.ops), list.c_str());
}

void Stress::final_checks() {
    expect_quiet(side_, 2, 0.2, "after the last operation");
    for (int i = 0; i < 2; ++i) {
        Mem& mm = mem_[i];
        const char lab = side_[i].label;
        if (!mm.send_fifo.empty() || !mm.recv_expect.empty() || !mm.unplaced.empty())
            fail("%c: %zu sends, %zu receives, %zu WRITE placements still expected at the end", lab,
                 mm.send_fifo.size(), mm.recv_expect.size(), mm.unplaced.size());
        if (mm.recv_posted.size() != nrecv_)
            fail("%c: %zu receive WRs posted at the end, expected all %u", lab,
                 mm.recv_posted.size(), nrecv_);
        for (std::uint32_t w = 0; w < kFaWords; ++w) {
            const std::uint64_t v = *mm.atom_word(kFaBase + w);
            if (v != mm.fa_value[w])
                fail(
                    "%c: fetch-and-add word %u ends at %#llx, expected %#llx (start %#llx plus "
                    "the sum of the adds)",
                    lab, w, static_cast<unsigned long long>(v),
                    static_cast<unsigned long long>(mm.fa_value[w]),
                    static_cast<unsigned long long>(mm.fa_initial[w]));
        }
        for (std::uint32_t w = 0; w < kAtomicWords; ++w) {
            const bool fa = w >= kFaBase && w < kFaBase + kFaWords;
            const bool cas = w >= kCasBase && w < kCasBase + o_.depth;
            const bool res = w >= kResBase && w < kResBase + o_.depth;
            const std::uint64_t want = fa    ? mm.fa_value[w - kFaBase]
                                       : cas ? mm.cas_value[w - kCasBase]
                                       : res ? kResultSentinel
                                             : kAtomicGuard;
            if (*mm.atom_word(w) != want)
                fail("%c: atomic region word %u holds %#llx, expected %#llx", lab, w,
                     static_cast<unsigned long long>(*mm.atom_word(w)),
                     static_cast<unsigned long long>(want));
        }
        struct {
            const char* what;
            const Region& r;
            std::uint8_t bg;
        } const regions[] = {{"local buffers", mm.local, kBgLocal},
                             {"target windows", mm.target, kBgTarget},
                             {"receive buffers", mm.recv, kBgRecv}};
        for (const auto& r : regions) {
            const std::size_t at = find_not_byte(r.r.p, r.r.len, r.bg);
            if (at != kNoMismatch)
                fail(
                    "%c: %s: byte %zu is %#04x at the end, expected the untouched value %#04x "
                    "(written where no operation was to write)",
                    lab, r.what, at, r.r.p[at], r.bg);
        }
    }
}

void Stress::run() {
    setup();
    const auto t0 = Clock::now();
    last_progress_ = t0;
    int idle = 0;
    while (done_ops_ < o_.ops || mem_[0].fence_out || mem_[1].fence_out) {
        while (next_op_ < o_.ops && !free_slots_.empty()) post_op(next_op_++);
        if (deferred_) post_fences();
        if (poll_cqs()) {
            last_progress_ = Clock::now();
            idle = 0;
            continue;
        }
        if (seconds_since(last_progress_) > o_.stall_s) stalled();
        if (++idle < 64) continue;
        arm(side_[0]);
        arm(side_[1]);
        if (poll_cqs()) {
            last_progress_ = Clock::now();
            idle = 0;
            continue;
        }
        wait_events(side_, 2,
                    last_progress_ + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(o_.stall_s + 0.001)));
    }
    const double secs = seconds_since(t0);
    final_checks();
    std::string mix;
    for (int k = 0; k < kKinds; ++k)
        mix += std::string(k ? " " : "") + kKindName[k] + "=" + std::to_string(kind_count_[k]);
    std::string how = side_[0].iwarp ? "iWARP via rdma_cm, " + std::to_string(fences_) + " fences"
                      : o_.rdma_cm   ? "mtu " + std::to_string(mtu_bytes(mtu_)) + " via rdma_cm"
                                     : "mtu " + std::to_string(mtu_bytes(mtu_));
    std::printf(
        "%s: ok: ops %llu bytes %llu seconds %.3f MB/s %.1f (seed %llu, depth %u, max %u, %s; "
        "%s)\n",
        kProg, static_cast<unsigned long long>(done_ops_), static_cast<unsigned long long>(bytes_),
        secs, secs > 0 ? static_cast<double>(bytes_) / secs / 1e6 : 0.0,
        static_cast<unsigned long long>(o_.seed), o_.depth, o_.max_size, how.c_str(), mix.c_str());
    for (int i = 0; i < 2; ++i) ack_events(side_[i]);
    if (cm_) cm_->disconnect();
}

// ---- dead peer ------------------------------------------------------------------------------

int run_dead_peer(const Options& o) {
    in_addr ip{};
    if (inet_pton(AF_INET, o.dead_ip.c_str(), &ip) != 1)
        usage_error("invalid --dead-peer address '%s'", o.dead_ip.c_str());
    Rng rng(o.seed);
    Side s[1];
    const std::uint32_t k = o.dead_count;
    open_side(s[0], 'A', o.dev[0], static_cast<int>(2 * k + 16), 16, false);
    create_qp(s[0], k + 1, 4);
    const ibv_mtu mtu = path_mtu(s, 1, o);
    ibv_gid dgid{};
    dgid.raw[10] = dgid.raw[11] = 0xff;
    std::memcpy(&dgid.raw[12], &ip, 4);
    const std::uint32_t mtub = mtu_bytes(mtu);
    Region buf = make_region(s[0].pd, std::size_t{k} * 4 * mtub, IBV_ACCESS_LOCAL_WRITE, kBgLocal,
                             "send buffers");
    connect_qp(s[0], dgid, 0x00abcd, start_psn(rng), start_psn(rng), mtu, o);

    // IBA: the local ACK timeout is 4.096 us * 2^timeout, tried retry_cnt + 1 times.
    const double nominal = 4.096e-6 * std::ldexp(1.0, o.timeout) * (o.retry + 1);
    const double bound = nominal * 2 + 2;
    const auto t0 = Clock::now();
    for (std::uint32_t i = 0; i < k; ++i) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.p + std::size_t{i} * 4 * mtub),
                    static_cast<std::uint32_t>(1 + (i * 997u) % (3 * mtub)), buf.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        check_rc(ibv_post_send(s[0].qp, &wr, &bad), "ibv_post_send");
    }
    double first_at = 0;
    std::uint32_t retry_exc = 0, flushed = 0;
    for (std::uint32_t i = 0; i < k; ++i) {
        const double left = bound - seconds_since(t0);
        char what[128];
        std::snprintf(what, sizeof what,
                      "dead peer %s: send %u of %u (bound %.3f s from the first post)",
                      o.dead_ip.c_str(), i, k, bound);
        const ibv_wc wc = poll_one(s, 1, 0, s[0].scq, std::max(left, 0.0), what);
        if (wc.wr_id != i)
            fail(
                "dead peer: completion wr_id %llu (status %s), expected send %u: not in posting "
                "order",
                static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status), i);
        if (i == 0) {
            first_at = seconds_since(t0);
            if (wc.status != IBV_WC_RETRY_EXC_ERR)
                fail("dead peer: the first send completed with %s (%d), expected %s",
                     ibv_wc_status_str(wc.status), static_cast<int>(wc.status),
                     ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR));
        } else if (wc.status != IBV_WC_RETRY_EXC_ERR && wc.status != IBV_WC_WR_FLUSH_ERR) {
            fail("dead peer: send %u completed with %s (%d), expected %s or %s", i,
                 ibv_wc_status_str(wc.status), static_cast<int>(wc.status),
                 ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR));
        }
        (wc.status == IBV_WC_RETRY_EXC_ERR ? retry_exc : flushed)++;
    }
    const double all_at = seconds_since(t0);
    if (first_at > bound)
        fail("dead peer: RETRY_EXC_ERR after %.3f s, above the bound %.3f s", first_at, bound);
    if (first_at < nominal * 0.5)
        fail(
            "dead peer: RETRY_EXC_ERR after %.3f s, before half of the %.3f s that timeout %d and "
            "retry count %d give (retries not honoured)",
            first_at, nominal, o.timeout, o.retry);
    // A send posted now is flushed: the QP is in the error state.
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.p), 16, buf.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = k;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    const int prc = ibv_post_send(s[0].qp, &wr, &bad);
    if (prc != 0) {
        errno = prc;
        setup_error("ibv_post_send after the error");
    }
    const ibv_wc wc = poll_one(s, 1, 0, s[0].scq, 5, "dead peer: a send posted after the error");
    if (wc.wr_id != k || wc.status != IBV_WC_WR_FLUSH_ERR)
        fail(
            "dead peer: a send posted after the error completed as wr_id %llu with %s, expected "
            "wr_id %u with %s",
            static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status), k,
            ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR));
    expect_quiet(s, 1, 0.1, "dead peer");
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    check_rc(ibv_query_qp(s[0].qp, &attr, IBV_QP_STATE, &init), "ibv_query_qp");
    if (attr.qp_state != IBV_QPS_ERR)
        fail(
            "dead peer: after RETRY_EXC_ERR ibv_query_qp says the QP is in state %d, expected "
            "IBV_QPS_ERR (%d)",
            static_cast<int>(attr.qp_state), static_cast<int>(IBV_QPS_ERR));
    std::printf(
        "%s: ok: dead peer %s: %u sends, RETRY_EXC_ERR after %.3f s (timeout %d, retry %d: "
        "nominal %.3f s, bound %.3f s), %u RETRY_EXC_ERR, %u WR_FLUSH_ERR, all within %.3f s; QP "
        "in ERR\n",
        kProg, o.dead_ip.c_str(), k, first_at, o.timeout, o.retry, nominal, bound, retry_exc,
        flushed, all_at);
    ack_events(s[0]);
    return 0;
}

// ---- access errors --------------------------------------------------------------------------

struct AccessCase {
    const char* name;
    enum { write, read, fetch_add } op;
    int region;       // index into the target regions, or -1 for the dead key
    std::int64_t at;  // byte offset from the region's start (may be negative or past it)
    std::uint32_t len;
    bool valid;  // the control case: must succeed
};

int run_access_errors(const Options& o) {
    Rng rng(o.seed);
    Side s[2];
    for (int i = 0; i < 2; ++i) open_side(s[i], i == 0 ? 'A' : 'B', o.dev[i], 32, 32, false);
    const ibv_mtu mtu = path_mtu(s, 2, o);
    const std::uint32_t mtub = mtu_bytes(mtu);
    Side& a = s[0];
    Side& b = s[1];
    ibv_pd* pd2 = ibv_alloc_pd(b.ctx);
    if (pd2 == nullptr) setup_error("ibv_alloc_pd (a second PD on %s)", b.dev.c_str());
    constexpr std::size_t kLen = 64 * 1024;
    enum { kGood, kNoWrite, kNoRemote, kOtherPd, kRegions };
    Region reg[kRegions] = {
        make_region(b.pd, kLen, kAllAccess, 0, "target (all rights)"),
        make_region(b.pd, kLen,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC, 0,
                    "target (no remote write)"),
        make_region(b.pd, kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0,
                    "target (no remote read or atomic)"),
        make_region(pd2, kLen, kAllAccess, 0, "target (another PD)"),
    };
    for (int r = 0; r < kRegions; ++r)
        fill_pattern(reg[r].p, reg[r].len, 0x7a00 + static_cast<unsigned>(r));
    Region dead = make_region(b.pd, 4096, kAllAccess, 0, "deregistered");
    const std::uint32_t dead_key = dead.mr->rkey;
    free_region(dead);
    Region local = make_region(a.pd, kLen, kAllAccess, kBgLocal, "requester buffer");
    Region brecv = make_region(b.pd, 4096, IBV_ACCESS_LOCAL_WRITE, kBgRecv, "receive buffer");

    const std::uint32_t multi = 3 * mtub + 7;  // a WRITE of several packets
    const AccessCase cases[] = {
        {"valid WRITE (control)", AccessCase::write, kGood, 128, multi, true},
        {"WRITE with an invalid rkey (of a deregistered MR)", AccessCase::write, -1, 128, multi,
         false},
        {"WRITE beyond the end of the MR", AccessCase::write, kGood,
         static_cast<std::int64_t>(kLen) - 1000, multi, false},
        {"WRITE starting before the MR", AccessCase::write, kGood, -64, 128, false},
        {"WRITE to an MR without remote write", AccessCase::write, kNoWrite, 0, multi, false},
        {"WRITE to an MR of another PD", AccessCase::write, kOtherPd, 0, multi, false},
        {"READ from an MR without remote read", AccessCase::read, kNoRemote, 0, multi, false},
        {"READ with an invalid rkey", AccessCase::read, -1, 0, 256, false},
        {"fetch-and-add on an MR without remote atomic", AccessCase::fetch_add, kNoRemote, 64, 8,
         false},
    };
    int n_ok = 0;
    for (const AccessCase& c : cases) {
        for (int i = 0; i < 2; ++i) {
            if (s[i].qp != nullptr) check_rc(ibv_destroy_qp(s[i].qp), "ibv_destroy_qp");
            s[i].qp = nullptr;
            for (ibv_cq* cq : {s[i].scq, s[i].rcq}) {  // nothing is left behind from the last case
                ibv_wc wc{};
                while (ibv_poll_cq(cq, 1, &wc) == 1) {
                }
            }
            create_qp(s[i], 4, 4);
        }
        const std::uint32_t psn[2] = {start_psn(rng), start_psn(rng)};
        for (int i = 0; i < 2; ++i)
            connect_qp(s[i], s[1 - i].gid, s[1 - i].qp->qp_num, psn[1 - i], psn[i], mtu, o);
        std::memset(brecv.p, kBgRecv, brecv.len);
        ibv_sge rsge{reinterpret_cast<std::uintptr_t>(brecv.p), 4096, brecv.mr->lkey};
        ibv_recv_wr rwr{};
        rwr.wr_id = 77;
        rwr.sg_list = &rsge;
        rwr.num_sge = 1;
        ibv_recv_wr* rbad = nullptr;
        check_rc(ibv_post_recv(b.qp, &rwr, &rbad), "ibv_post_recv");

        // Snapshots: every target region, the requester's buffer.
        std::vector<std::vector<std::uint8_t>> before;
        for (const Region& r : reg) before.emplace_back(r.p, r.p + r.len);
        std::memset(local.p, kBgLocal, local.len);
        const std::uint64_t payload_key = 0x5100 + static_cast<std::uint64_t>(n_ok);
        if (c.op == AccessCase::write) fill_pattern(local.p, c.len, payload_key);
        const std::vector<std::uint8_t> local_before(local.p, local.p + local.len);

        const std::uint32_t rkey = c.region < 0 ? dead_key : reg[c.region].mr->rkey;
        const std::uint64_t base =
            reinterpret_cast<std::uintptr_t>(reg[c.region < 0 ? kGood : c.region].p);
        const std::uint64_t addr = base + static_cast<std::uint64_t>(c.at);
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(local.p), c.len, local.mr->lkey};
        ibv_send_wr wr{};
        wr.wr_id = 1;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.send_flags = IBV_SEND_SIGNALED;
        if (c.op == AccessCase::fetch_add) {
            wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.wr.atomic.remote_addr = addr;
            wr.wr.atomic.rkey = rkey;
            wr.wr.atomic.compare_add = 1;
        } else {
            wr.opcode = c.op == AccessCase::write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
            wr.wr.rdma.remote_addr = addr;
            wr.wr.rdma.rkey = rkey;
        }
        ibv_sge ssge{reinterpret_cast<std::uintptr_t>(local.p + kLen - 64), 64, local.mr->lkey};
        ibv_send_wr swr{};
        swr.wr_id = 2;
        swr.sg_list = &ssge;
        swr.num_sge = 1;
        swr.opcode = IBV_WR_SEND;
        swr.send_flags = IBV_SEND_SIGNALED;
        wr.next = &swr;
        ibv_send_wr* bad = nullptr;
        check_rc(ibv_post_send(a.qp, &wr, &bad), "ibv_post_send");

        char what[160];
        std::snprintf(what, sizeof what, "%s: the operation's completion", c.name);
        const ibv_wc w1 = poll_one(s, 2, 0, a.scq, 10, what);
        std::snprintf(what, sizeof what, "%s: the completion of the SEND behind it", c.name);
        const ibv_wc w2 = poll_one(s, 2, 0, a.scq, 10, what);
        const ibv_wc_status want1 = c.valid ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
        const ibv_wc_status want2 = c.valid ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR;
        if (w1.wr_id != 1 || w1.status != want1)
            fail("%s: completed as wr_id %llu with %s (%d), expected wr_id 1 with %s", c.name,
                 static_cast<unsigned long long>(w1.wr_id), ibv_wc_status_str(w1.status),
                 static_cast<int>(w1.status), ibv_wc_status_str(want1));
        if (w2.wr_id != 2 || w2.status != want2)
            fail(
                "%s: the SEND behind it completed as wr_id %llu with %s (%d), expected wr_id 2 "
                "with %s",
                c.name, static_cast<unsigned long long>(w2.wr_id), ibv_wc_status_str(w2.status),
                static_cast<int>(w2.status), ibv_wc_status_str(want2));
        if (c.valid) {
            const ibv_wc wr_b =
                poll_one(s, 2, 1, b.rcq, 10, "valid WRITE (control): the SEND's receive");
            if (wr_b.status != IBV_WC_SUCCESS || wr_b.byte_len != 64)
                fail("valid WRITE (control): the SEND's receive completed with %s, byte_len %u",
                     ibv_wc_status_str(wr_b.status), wr_b.byte_len);
            const std::size_t at =
                find_pattern_mismatch(reinterpret_cast<std::uint8_t*>(addr), c.len, payload_key);
            if (at != kNoMismatch) fail("valid WRITE (control): byte %zu did not arrive", at);
            std::memcpy(before[kGood].data() + c.at, local.p, c.len);  // the expected change
        } else {
            // The target refused the request: its QP is in error, its receive WR flushed (if it
            // completes at all, it must not have received the SEND).
            ibv_wc wr_b{};
            const auto until = Clock::now() + std::chrono::milliseconds(500);
            while (Clock::now() < until && ibv_poll_cq(b.rcq, 1, &wr_b) == 0) usleep(1000);
            if (wr_b.wr_id == 77 && wr_b.status == IBV_WC_SUCCESS)
                fail("%s: the target received the SEND posted behind the refused operation",
                     c.name);
            ibv_qp_attr attr{};
            ibv_qp_init_attr init{};
            check_rc(ibv_query_qp(a.qp, &attr, IBV_QP_STATE, &init), "ibv_query_qp");
            if (attr.qp_state != IBV_QPS_ERR)
                fail(
                    "%s: after REM_ACCESS_ERR ibv_query_qp says the requester's QP is in state "
                    "%d, expected IBV_QPS_ERR (%d)",
                    c.name, static_cast<int>(attr.qp_state), static_cast<int>(IBV_QPS_ERR));
        }
        for (int r = 0; r < kRegions; ++r) {
            const auto& snap = before[static_cast<std::size_t>(r)];
            const auto* p = reg[r].p;
            for (std::size_t i = 0; i < snap.size(); ++i)
                if (p[i] != snap[i])
                    fail("%s: target region %d byte %zu changed from %#04x to %#04x", c.name, r, i,
                         snap[i], p[i]);
        }
        for (std::size_t i = 0; i < local.len; ++i)
            if (local.p[i] != local_before[i])
                fail("%s: requester buffer byte %zu changed from %#04x to %#04x", c.name, i,
                     local_before[i], local.p[i]);
        if (o.verbose) std::printf("%s: %s: ok\n", kProg, c.name);
        ++n_ok;
    }
    std::printf(
        "%s: ok: access errors: %d cases (1 valid, %d refused with REM_ACCESS_ERR, target memory "
        "unchanged)\n",
        kProg, n_ok, n_ok - 1);
    for (int i = 0; i < 2; ++i) ack_events(s[i]);
    return 0;
}

void on_alarm(int) {
    static const char msg[] = "snic-rc-stress: FAIL: the time limit (--time-limit) ran out\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(kExitViolation);
}

// iWARP devices imply --rdma-cm, and only the stress run (usage errors otherwise).
void check_transport(Options& o) {
    const int n = o.mode == Mode::dead_peer ? 1 : 2;
    int iwarp = 0;
    for (int i = 0; i < n; ++i) iwarp += is_iwarp_device(o.dev[i]) ? 1 : 0;
    if (iwarp == 0) {
        if (o.rdma_cm && o.mode != Mode::stress)
            usage_error("%s: --rdma-cm goes with the stress run only",
                        o.mode == Mode::dead_peer ? "--dead-peer" : "--access-errors");
        if (o.rdma_cm && o.mtu != 0)
            usage_error("%s: rdma_cm sets the path MTU (the route's), not --mtu", "--rdma-cm");
        if (!o.rdma_cm && !o.addr[0].empty()) usage_error("%s goes with --rdma-cm", "--addrs");
        return;
    }
    if (o.mode != Mode::stress)
        usage_error(
            "%s runs on RoCE devices only (an iWARP WRITE completes before its target could "
            "refuse it, and a dead peer is a TCP connection that never comes up)",
            o.mode == Mode::dead_peer ? "--dead-peer" : "--access-errors");
    if (iwarp != n)
        usage_error("%s: one device is iWARP, the other RoCE; give two of one kind",
                    (o.dev[0] + " " + o.dev[1]).c_str());
    if (o.mtu != 0) usage_error("%s: iWARP's FPDUs follow TCP's MSS, not --mtu", o.dev[0].c_str());
    o.rdma_cm = true;  // the only way to connect an iWARP QP
}

}  // namespace

int main(int argc, char** argv) {
    Options o = parse_options(argc, argv);
    check_transport(o);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (o.time_limit_s != 0) {
        signal(SIGALRM, on_alarm);
        alarm(o.time_limit_s);
    }
    switch (o.mode) {
        case Mode::dead_peer:
            return run_dead_peer(o);
        case Mode::access_errors:
            return run_access_errors(o);
        case Mode::stress:
            break;
    }
    Stress s(o);
    s.run();
    return 0;
}
