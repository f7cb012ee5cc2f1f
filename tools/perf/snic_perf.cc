// snic-perf: latency and bandwidth of RDMA over snic, in perftest's vocabulary.
//
//   snic-perf TEST [options] [SERVER]       TEST: send_lat write_lat read_lat atomic_lat
//                                                 send_bw write_bw read_bw
//
// Without SERVER it is the server and waits for one client on TCP port -p; with SERVER it
// is the client. Over that connection the two check that they run the same test, agree on
// the path MTU and exchange each QP's number, PSN, GID, rkey and buffer address; then they
// connect RC QPs (INIT, RTR, RTS), run, and meet at a sync after each size. --loopback runs both
// ends in one process and one thread through two devices (the two ports of one snicd's virtual
// wire, typically), alternating between them, so that the measurement needs one core.
//
// Latency tests time every iteration: send_lat and write_lat are ping-pongs (a SEND answered
// by a SEND; an RDMA WRITE answered by a WRITE, detected by polling memory), read_lat and
// atomic_lat one READ or fetch-and-add until its completion. All figures are ROUND TRIPS in
// microseconds (perftest prints half of them for send_lat and write_lat as "t_typical").
// Bandwidth tests post from the client (or the first device), round robin over the -q QPs
// with up to -t WRs in flight on each, and report messages per second and payload
// bandwidth. After each size the bytes that arrived are checked once against the pattern
// that was sent (atomic_lat: the counter), outside the timed loop.
//
// --idle-qps N[,N...] measures beside N established RC QPs that carry nothing (each connected to
// itself, spread over the ends of this process), for each N in turn: the idle set grows or
// shrinks between measurements, so that one run compares the same measured QPs at every N.
//
// Uses only <infiniband/verbs.h>; linked with libsnic. Exit 0, 1 on a run-time failure
// (a verb failed, a completion in error, data that does not match), 2 on a usage error.
#include <arpa/inet.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/latency.h"
#include "tools/common/cli.h"
#include "proto/net/byteorder.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kProg = "snic-perf";
constexpr int kExitFail = 1;
constexpr std::uint32_t kMaxSize = 8u << 20;
constexpr std::uint32_t kRxDepth = 512;  // receives kept posted per QP (at least -t)
constexpr std::uint32_t kSignalEvery = 32;
constexpr std::uint32_t kDefaultInline = 220;  // perftest's default -I

// A failure at run time: reported in one line, exit 1.
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void failf(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw Failure(buf);
}

void check(int rc, const char* what) {
    if (rc != 0) failf("%s: %s", what, std::strerror(rc > 0 ? rc : errno));
}

// ---- options ---------------------------------------------------------------------------------

enum class Test { send_lat, write_lat, read_lat, atomic_lat, send_bw, write_bw, read_bw };

struct TestInfo {
    std::string_view name;
    Test test;
    bool latency;
};
constexpr TestInfo kTests[] = {
    {"send_lat", Test::send_lat, true}, {"write_lat", Test::write_lat, true},
    {"read_lat", Test::read_lat, true}, {"atomic_lat", Test::atomic_lat, true},
    {"send_bw", Test::send_bw, false},  {"write_bw", Test::write_bw, false},
    {"read_bw", Test::read_bw, false},
};

struct Options {
    const TestInfo* test = nullptr;
    std::vector<std::uint32_t> sizes;
    std::uint32_t iters = 0;  // 0: the test's default
    std::uint32_t warmup = 0;
    bool warmup_set = false;
    std::string device, peer_device;
    int gid_index = 0;
    std::uint32_t qps = 1;
    std::uint32_t tx_depth = 128;
    std::uint32_t inline_size = kDefaultInline;
    bool inline_set = false;  // -I given: the device must take it as is
    std::uint16_t port = 18515;
    bool gbits = false;
    std::uint32_t mtu = 0;  // 0: the port's active MTU
    bool json = false;
    bool loopback = false;
    bool histogram = false;
    std::string samples;
    std::optional<std::string> server;  // the client's peer
    std::vector<std::uint32_t> idle_qps{0};  // measure beside each of these many idle QPs
};

void usage(FILE* out) {
    std::fprintf(
        out,
        "usage: %s TEST [options] [SERVER]\n"
        "  TEST: send_lat write_lat read_lat atomic_lat send_bw write_bw read_bw\n"
        "  Without SERVER: wait for a client on TCP port -p; with SERVER: connect to it.\n"
        "  Latency tests print ROUND TRIPS in microseconds (perftest's send_lat and\n"
        "  write_lat print half of them as t_typical).\n"
        "options:\n"
        "  -s, --size BYTES        message size (default 2; atomics: 8)\n"
        "  -a, --all               every size from 2 to 8 MiB by powers of two\n"
        "  -n, --iters N           iterations (latency 1000, bandwidth 5000)\n"
        "  -w, --warmup N          untimed iterations first (latency 100, bandwidth 0)\n"
        "  -d, --ib-dev DEV        the RDMA device (default: the first)\n"
        "      --peer-device DEV   --loopback: the other end's device (default: another\n"
        "                          port of DEV's daemon, e.g. NAME_1 for NAME_0)\n"
        "  -x, --gid-index N       GID index (default 0, snic's RoCEv2 GID)\n"
        "  -q, --qp N              QPs (bandwidth tests spread over them; default 1)\n"
        "  -t, --tx-depth N        WRs in flight per QP in bandwidth tests (default 128)\n"
        "  -I, --inline_size BYTES SEND and WRITE of at most BYTES go inline (default 220,\n"
        "                          or less if the device allows less; 0: never)\n"
        "  -p, --port PORT         TCP port of the exchange (default 18515)\n"
        "  -m, --mtu BYTES         path MTU 256..4096 (default: the port's active MTU)\n"
        "      --report_gbits      bandwidth in Gb/s rather than MB/s\n"
        "      --loopback          both ends in this process and thread (two devices)\n"
        "      --json              one JSON object per size on stdout, nothing else\n"
        "      --histogram         print the latency histogram with -a too\n"
        "      --samples FILE      latency: every measured round trip (us), one a line,\n"
        "                          in measuring order (with -a: size after size)\n"
        "      --idle-qps N[,N..]  measure beside N established idle RC QPs (each connected\n"
        "                          to itself, spread over this process's devices), for each\n"
        "                          N in turn (default 0)\n"
        "  -h, --help              this text\n",
        kProg);
}

[[noreturn]] void usage_error(const std::string& why) { snic::cli::usage_error(kProg, why); }

std::uint64_t number(const char* s, const char* what, std::uint64_t lo, std::uint64_t hi) {
    return snic::cli::number(kProg, s, what, lo, hi);
}

Options parse_options(int argc, char** argv) {
    Options o;
    if (argc < 2) usage_error("no test given");
    if (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        std::exit(0);
    }
    for (const TestInfo& t : kTests)
        if (t.name == argv[1]) o.test = &t;
    if (o.test == nullptr) usage_error(std::string("unknown test '") + argv[1] + "'");
    enum { kPeer = 256, kGbits, kLoop, kJson, kHist, kSamples, kIdle };
    static const option longs[] = {
        {"size", required_argument, nullptr, 's'},
        {"all", no_argument, nullptr, 'a'},
        {"iters", required_argument, nullptr, 'n'},
        {"warmup", required_argument, nullptr, 'w'},
        {"ib-dev", required_argument, nullptr, 'd'},
        {"peer-device", required_argument, nullptr, kPeer},
        {"gid-index", required_argument, nullptr, 'x'},
        {"qp", required_argument, nullptr, 'q'},
        {"tx-depth", required_argument, nullptr, 't'},
        {"inline_size", required_argument, nullptr, 'I'},
        {"port", required_argument, nullptr, 'p'},
        {"mtu", required_argument, nullptr, 'm'},
        {"report_gbits", no_argument, nullptr, kGbits},
        {"loopback", no_argument, nullptr, kLoop},
        {"json", no_argument, nullptr, kJson},
        {"histogram", no_argument, nullptr, kHist},
        {"samples", required_argument, nullptr, kSamples},
        {"idle-qps", required_argument, nullptr, kIdle},
        {"help", no_argument, nullptr, 'h'},
        {nullptr, 0, nullptr, 0},
    };
    bool all = false;
    std::optional<std::uint32_t> size;
    opterr = 0;
    optind = 2;
    for (int c; (c = getopt_long(argc, argv, ":s:an:w:d:x:q:t:I:p:m:h", longs, nullptr)) != -1;) {
        switch (c) {
            case 's':
                size = static_cast<std::uint32_t>(number(optarg, "size", 1, kMaxSize));
                break;
            case 'a':
                all = true;
                break;
            case 'n':
                o.iters = static_cast<std::uint32_t>(number(optarg, "iterations", 1, 100'000'000));
                break;
            case 'w':
                o.warmup = static_cast<std::uint32_t>(number(optarg, "warm-up", 0, 10'000'000));
                o.warmup_set = true;
                break;
            case 'd':
                o.device = optarg;
                break;
            case kPeer:
                o.peer_device = optarg;
                break;
            case 'x':
                o.gid_index = static_cast<int>(number(optarg, "GID index", 0, 255));
                break;
            case 'q':
                o.qps = static_cast<std::uint32_t>(number(optarg, "QP count", 1, 64));
                break;
            case 't':
                o.tx_depth = static_cast<std::uint32_t>(number(optarg, "tx depth", 1, 4096));
                break;
            case 'I':
                o.inline_size = static_cast<std::uint32_t>(number(optarg, "inline size", 0, 4096));
                o.inline_set = true;
                break;
            case 'p':
                o.port = static_cast<std::uint16_t>(number(optarg, "port", 1, 65535));
                break;
            case 'm': {
                o.mtu = static_cast<std::uint32_t>(number(optarg, "MTU", 256, 4096));
                if ((o.mtu & (o.mtu - 1)) != 0)
                    usage_error("the MTU is 256, 512, 1024, 2048 or 4096");
                break;
            }
            case kGbits:
                o.gbits = true;
                break;
            case kLoop:
                o.loopback = true;
                break;
            case kJson:
                o.json = true;
                break;
            case kHist:
                o.histogram = true;
                break;
            case kSamples:
                o.samples = optarg;
                break;
            case kIdle: {
                o.idle_qps.clear();
                std::string list = optarg;
                for (std::size_t at = 0; at <= list.size();) {
                    const std::size_t comma = std::min(list.find(',', at), list.size());
                    const std::string one = list.substr(at, comma - at);
                    o.idle_qps.push_back(
                        static_cast<std::uint32_t>(number(one.c_str(), "idle QP count", 0, 16384)));
                    at = comma + 1;
                }
                break;
            }
            case 'h':
                usage(stdout);
                std::exit(0);
            case ':':
                usage_error(std::string("option ") + argv[optind - 1] + " needs a value");
            default:
                usage_error(std::string("unknown option ") + argv[optind - 1]);
        }
    }
    if (optind < argc) o.server = argv[optind++];
    if (optind < argc) usage_error(std::string("unexpected argument '") + argv[optind] + "'");
    if (o.loopback && o.server) usage_error("--loopback takes no server");
    if (!o.peer_device.empty() && !o.loopback) usage_error("--peer-device goes with --loopback");
    if (all && size) usage_error("-a and -s exclude each other");
    const bool atomic = o.test->test == Test::atomic_lat;
    if (atomic && size && *size != 8) usage_error("atomics are 8 bytes");
    if (!o.samples.empty() && !o.test->latency) usage_error("--samples goes with latency tests");
    if (atomic) {
        o.sizes = {8};
    } else if (all) {
        for (std::uint32_t s = 2; s <= kMaxSize; s *= 2) o.sizes.push_back(s);
    } else {
        o.sizes = {size.value_or(2)};
    }
    if (o.iters == 0) o.iters = o.test->latency ? 1000 : 5000;
    if (!o.warmup_set) o.warmup = o.test->latency ? 100 : 0;
    if (o.test->latency) o.qps = 1;
    return o;
}

// ---- one end: device, PD, CQs, QPs and its buffer -----------------------------------------

// What the other end needs to reach one QP and the buffer.
struct PeerInfo {
    std::uint32_t qpn;
    std::uint32_t psn;
    std::uint8_t gid[16];
    std::uint32_t rkey;
    std::uint64_t addr;
};

// Anonymous memory of its own for an end's buffer (libsnic moves it into a memfd when it
// is registered; page-aligned, so nothing else shares its pages).
struct Mapped {
    void* p = MAP_FAILED;
    std::size_t len = 0;
    Mapped() = default;
    explicit Mapped(std::size_t n) : len(n) {
        p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) failf("mmap %zu bytes: %s", n, std::strerror(errno));
    }
    ~Mapped() {
        if (p != MAP_FAILED) ::munmap(p, len);
    }
    Mapped(const Mapped&) = delete;
    Mapped& operator=(const Mapped&) = delete;
};

// One end of the test: a device context, a PD, a send CQ and a receive CQ shared by the
// end's RC QPs, and one registered buffer that all of them use.
class End {
  public:
    End(const std::string& device, const Options& o, std::uint32_t buf_size);
    ~End();
    End(const End&) = delete;
    End& operator=(const End&) = delete;

    const std::string& name() const { return name_; }
    std::vector<PeerInfo> info() const;
    void connect(const std::vector<PeerInfo>& peer, std::uint32_t mtu);
    std::uint32_t active_mtu() const { return 128u << static_cast<int>(port_.active_mtu); }

    // The send area [0, size) and the receive/target area [size, 2 size) of the buffer.
    std::uint8_t* send_area() { return base(); }
    std::uint8_t* recv_area() { return base() + area_; }
    std::uint64_t addr(std::uint32_t off) const {
        return reinterpret_cast<std::uintptr_t>(buf_.p) + off;
    }
    std::uint32_t area() const { return area_; }

    // A receive WR for the whole receive area on QP `qp` (its wr_id is `qp`).
    void post_recv(std::uint32_t qp);
    // Posts one WR on QP `qp`: the local send area (or recv area for READ/atomic results)
    // to the peer's (rkey, remote).
    void post(std::uint32_t qp, ibv_wr_opcode op, std::uint32_t size, bool signaled,
              std::uint64_t wr_id);
    // Polls `cq` once; returns completions, fails on an error completion.
    int poll(ibv_cq* cq, ibv_wc* wc, int n);
    ibv_cq* scq() { return scq_; }
    ibv_cq* rcq() { return rcq_; }
    std::uint32_t qps() const { return static_cast<std::uint32_t>(qps_.size()); }
    std::uint32_t max_inline() const { return max_inline_; }
    std::uint32_t rx_depth() const { return std::max(kRxDepth, o_.tx_depth); }

    // Makes (or destroys) RC QPs that do nothing until `n` exist: each connected to itself
    // (RTS), the smallest queues, no READ/atomic resources beyond one.
    void set_idle(std::uint32_t n);

  private:
    std::uint8_t* base() { return static_cast<std::uint8_t*>(buf_.p); }

    std::string name_;
    const Options& o_;
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_cq* scq_ = nullptr;
    ibv_cq* rcq_ = nullptr;
    std::vector<ibv_qp*> qps_;
    std::vector<std::uint32_t> psn_;
    ibv_port_attr port_{};
    ibv_gid gid_{};
    std::uint32_t area_ = 0;
    Mapped buf_;
    ibv_mr* mr_ = nullptr;
    std::uint32_t max_inline_ = 0;
    std::vector<PeerInfo> peer_;
    ibv_cq* idle_cq_ = nullptr;  // the idle QPs' send and receive CQ
    std::vector<ibv_qp*> idle_;
};

std::vector<std::string> device_names() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) failf("ibv_get_device_list: %s", std::strerror(errno));
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
    ibv_free_device_list(list);
    return names;
}

End::End(const std::string& device, const Options& o, std::uint32_t buf_size)
    : o_(o), area_((buf_size + 4095) & ~4095u), buf_(2 * std::size_t{area_}) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) failf("ibv_get_device_list: %s", std::strerror(errno));
    ibv_device* dev = nullptr;
    for (int i = 0; i < n && dev == nullptr; ++i)
        if (device.empty() || device == ibv_get_device_name(list[i])) dev = list[i];
    if (dev == nullptr) {
        ibv_free_device_list(list);
        if (n == 0)
            failf("no RDMA device found (is snicd running? SNIC_SOCKET_DIR=%s)",
                  std::getenv("SNIC_SOCKET_DIR") ? std::getenv("SNIC_SOCKET_DIR") : "/run/snic");
        failf("no RDMA device %s", device.c_str());
    }
    name_ = ibv_get_device_name(dev);
    ctx_ = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (ctx_ == nullptr) failf("ibv_open_device %s: %s", name_.c_str(), std::strerror(errno));
    check(ibv_query_port(ctx_, 1, &port_), "ibv_query_port");
    check(ibv_query_gid(ctx_, 1, o.gid_index, &gid_), "ibv_query_gid");
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) failf("ibv_alloc_pd: %s", std::strerror(errno));
    const int depth = static_cast<int>((o.tx_depth + rx_depth()) * o.qps + 64);
    scq_ = ibv_create_cq(ctx_, depth, nullptr, nullptr, 0);
    rcq_ = ibv_create_cq(ctx_, depth, nullptr, nullptr, 0);
    if (scq_ == nullptr || rcq_ == nullptr)
        failf("ibv_create_cq %d: %s", depth, std::strerror(errno));
    std::memset(buf_.p, 0, buf_.len);
    mr_ = ibv_reg_mr(pd_, buf_.p, buf_.len,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC);
    if (mr_ == nullptr) failf("ibv_reg_mr %zu bytes: %s", buf_.len, std::strerror(errno));
    for (std::uint32_t i = 0; i < o.qps; ++i) {
        ibv_qp_init_attr a{};
        a.send_cq = scq_;
        a.recv_cq = rcq_;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = o.tx_depth + kSignalEvery;
        a.cap.max_recv_wr = rx_depth();
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        // The device's inline limit is not among ibv_query_device's attributes: without
        // -I, ask for the default and halve it until the device accepts (as perftest does).
        std::uint32_t want = i == 0 ? o.inline_size : max_inline_;
        ibv_qp* qp = nullptr;
        for (;;) {
            a.cap.max_inline_data = want;
            qp = ibv_create_qp(pd_, &a);
            if (qp != nullptr || errno != EINVAL || o.inline_set || want == 0) break;
            want /= 2;
        }
        if (qp == nullptr)
            failf("ibv_create_qp (send WRs %u, inline %u): %s", a.cap.max_send_wr, want,
                  std::strerror(errno));
        max_inline_ = std::min(want, a.cap.max_inline_data);
        qps_.push_back(qp);
        psn_.push_back(static_cast<std::uint32_t>(std::rand()) & 0xffffff);
    }
}

End::~End() {
    set_idle(0);
    if (idle_cq_ != nullptr) ibv_destroy_cq(idle_cq_);
    for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (scq_ != nullptr) ibv_destroy_cq(scq_);
    if (rcq_ != nullptr) ibv_destroy_cq(rcq_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (ctx_ != nullptr) ibv_close_device(ctx_);
}

std::vector<PeerInfo> End::info() const {
    std::vector<PeerInfo> v;
    for (std::size_t i = 0; i < qps_.size(); ++i) {
        PeerInfo p{};
        p.qpn = qps_[i]->qp_num;
        p.psn = psn_[i];
        std::memcpy(p.gid, gid_.raw, 16);
        p.rkey = mr_->rkey;
        p.addr = reinterpret_cast<std::uintptr_t>(buf_.p);
        v.push_back(p);
    }
    return v;
}

ibv_mtu to_mtu(std::uint32_t bytes) {
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

void End::connect(const std::vector<PeerInfo>& peer, std::uint32_t mtu) {
    if (peer.size() != qps_.size()) failf("the peer has %zu QPs, we %zu", peer.size(), qps_.size());
    peer_ = peer;
    for (std::size_t i = 0; i < qps_.size(); ++i) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        check(ibv_modify_qp(qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              "ibv_modify_qp INIT");
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = to_mtu(mtu);
        a.dest_qp_num = peer[i].qpn;
        a.rq_psn = peer[i].psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        std::memcpy(a.ah_attr.grh.dgid.raw, peer[i].gid, 16);
        a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(o_.gid_index);
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.port_num = 1;
        check(ibv_modify_qp(qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              "ibv_modify_qp RTR");
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = psn_[i];
        a.max_rd_atomic = 16;
        check(ibv_modify_qp(qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              "ibv_modify_qp RTS");
    }
}

void End::set_idle(std::uint32_t n) {
    for (; idle_.size() > n; idle_.pop_back())
        check(ibv_destroy_qp(idle_.back()), "ibv_destroy_qp");
    if (idle_.size() == n) return;
    if (idle_cq_ == nullptr) {
        idle_cq_ = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
        if (idle_cq_ == nullptr) failf("ibv_create_cq for idle QPs: %s", std::strerror(errno));
    }
    while (idle_.size() < n) {
        ibv_qp_init_attr init{};
        init.send_cq = idle_cq_;
        init.recv_cq = idle_cq_;
        init.qp_type = IBV_QPT_RC;
        init.cap = {1, 1, 1, 1, 0};
        ibv_qp* qp = ibv_create_qp(pd_, &init);
        if (qp == nullptr)
            failf("ibv_create_qp (idle QP %zu of %u on %s): %s", idle_.size() + 1, n, name_.c_str(),
                  std::strerror(errno));
        idle_.push_back(qp);
        const auto psn = static_cast<std::uint32_t>(std::rand()) & 0xffffff;
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        check(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              "ibv_modify_qp INIT (idle)");
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = port_.active_mtu;
        a.dest_qp_num = qp->qp_num;
        a.rq_psn = psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = gid_;
        a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(o_.gid_index);
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.port_num = 1;
        check(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              "ibv_modify_qp RTR (idle)");
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = psn;
        a.max_rd_atomic = 1;
        check(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              "ibv_modify_qp RTS (idle)");
    }
}

void End::post_recv(std::uint32_t qp) {
    ibv_sge sge{addr(area_), area_, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = qp;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(ibv_post_recv(qps_[qp], &wr, &bad), "ibv_post_recv");
}

void End::post(std::uint32_t qp, ibv_wr_opcode op, std::uint32_t size, bool signaled,
               std::uint64_t wr_id) {
    const bool into_recv = op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
    ibv_sge sge{addr(into_recv ? area_ : 0), size, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    if ((op == IBV_WR_SEND || op == IBV_WR_RDMA_WRITE) && size <= max_inline_)
        wr.send_flags |= IBV_SEND_INLINE;
    const PeerInfo& p = peer_[qp];
    // WRITE and READ target the peer's receive area; READ's source is the peer's send area.
    const std::uint64_t remote = p.addr + (op == IBV_WR_RDMA_READ ? 0 : area_);
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = p.addr + area_;
        wr.wr.atomic.rkey = p.rkey;
        wr.wr.atomic.compare_add = 1;
    } else {
        wr.wr.rdma.remote_addr = remote;
        wr.wr.rdma.rkey = p.rkey;
    }
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(qps_[qp], &wr, &bad), "ibv_post_send");
}

int End::poll(ibv_cq* cq, ibv_wc* wc, int n) {
    const int got = ibv_poll_cq(cq, n, wc);
    if (got < 0) failf("ibv_poll_cq failed on %s", name_.c_str());
    for (int i = 0; i < got; ++i)
        if (wc[i].status != IBV_WC_SUCCESS)
            failf("%s: completion with %s (opcode %d, vendor_err %u)", name_.c_str(),
                  ibv_wc_status_str(wc[i].status), wc[i].opcode, wc[i].vendor_err);
    return got;
}

// ---- the out-of-band exchange over TCP ------------------------------------------------------

// The exchange's messages, big-endian. First both sides send a WireHello, then one WireQp
// per QP; after that, 8-byte syncs (sync()) mark the points both sides must reach.
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
static_assert(sizeof(WireHello) == 32 && sizeof(WireQp) == 36);

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

// The out-of-band TCP connection between server and client (never used in the timed loop).
class Oob {
  public:
    // Server: accepts one client on `port`; client: connects to host:port (retrying 10 s).
    explicit Oob(const Options& o) {
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
            if (::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
                ::listen(ls, 1) != 0) {
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
                std::this_thread::sleep_for(
                    std::chrono::milliseconds(50));  // the server is not up yet
            }
            ::freeaddrinfo(res);
        }
        const int on = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    }
    ~Oob() {
        if (fd_ >= 0) ::close(fd_);
    }
    Oob(const Oob&) = delete;
    Oob& operator=(const Oob&) = delete;

    void send_all(const void* p, std::size_t n) {
        const auto* c = static_cast<const char*>(p);
        while (n > 0) {
            const ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
            if (w <= 0) failf("the exchange with the peer broke: %s", std::strerror(errno));
            c += w;
            n -= static_cast<std::size_t>(w);
        }
    }
    void recv_all(void* p, std::size_t n) {
        auto* c = static_cast<char*>(p);
        while (n > 0) {
            const ssize_t r = ::recv(fd_, c, n, 0);
            if (r <= 0) failf("the peer went away during the exchange");
            c += r;
            n -= static_cast<std::size_t>(r);
        }
    }
    // Both sides send their parameters; a peer that would run something else (another
    // test, sizes, iterations or QP count) would wait forever in the middle of a run, so
    // that is an error here. Returns the path MTU both can use.
    std::uint32_t hello(const Options& o, std::uint32_t mtu) {
        const WireHello mine = hello_of(o, mtu);
        send_all(&mine, sizeof mine);
        WireHello theirs;
        recv_all(&theirs, sizeof theirs);
        if (theirs.magic.host() != kHelloMagic) failf("the peer is not snic-perf %s", SNIC_VERSION);
        const auto differs = [&](const char* what, const Be32& a, const Be32& b) {
            if (a != b)
                failf("the peer runs %s %u, this side %u: give both the same options", what,
                      b.host(), a.host());
        };
        if (mine.test != theirs.test)
            failf("the peer runs %s, this side %s",
                  kTests[std::min<std::size_t>(theirs.test.host(), std::size(kTests) - 1)]
                      .name.data(),
                  o.test->name.data());
        differs("sizes", mine.sizes, theirs.sizes);
        differs("first size", mine.first_size, theirs.first_size);
        differs("iterations", mine.iters, theirs.iters);
        differs("warm-up iterations", mine.warmup, theirs.warmup);
        differs("QPs", mine.qps, theirs.qps);
        return std::min(mtu, theirs.mtu.host());
    }
    std::vector<PeerInfo> exchange(const std::vector<PeerInfo>& mine) {
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
    // Both sides reach this point; each sends `mine` and returns the peer's.
    std::uint64_t sync(std::uint64_t mine = 0) {
        send_all(&mine, sizeof mine);
        std::uint64_t theirs = 0;
        recv_all(&theirs, sizeof theirs);
        return theirs;
    }

  private:
    int fd_ = -1;
};

// ---- runs ---------------------------------------------------------------------------------------

// Who is running in this process: both ends (loopback), or one end and its role.
struct Run {
    const Options& o;
    End* a;       // loopback: the first device; else this process's end
    End* b;       // loopback: the second device; else nullptr
    bool client;  // this process starts ping-pongs and posts bandwidth WRs
    Oob* oob = nullptr;  // the peer process's connection, when there is one
};

// The bytes each message carries: byte i of a `size`-byte message. The higher bits of i
// take part so that a packet placed at another multiple of 256 (or of the MTU) shows.
constexpr std::uint8_t pattern_byte(std::uint32_t i, std::uint32_t size) {
    return static_cast<std::uint8_t>(i * 131u + (i >> 8) * 7u + (i >> 16) * 11u + size);
}
void fill_pattern(std::uint8_t* p, std::uint32_t n, std::uint32_t size) {
    for (std::uint32_t i = 0; i < n; ++i) p[i] = pattern_byte(i, size);
}
bool pattern_ok(const std::uint8_t* p, std::uint32_t n, std::uint32_t size) {
    for (std::uint32_t i = 0; i < n; ++i)
        if (p[i] != pattern_byte(i, size)) return false;
    return true;
}

// A progress bar on stderr, only on a terminal and for long runs; in the timed loop it
// costs a compare per update and one fprintf per percent.
class Progress {
  public:
    Progress(bool on, const char* what, std::uint32_t size, std::uint64_t total)
        : on_(on && total >= 20000 && ::isatty(STDERR_FILENO)),
          what_(what),
          size_(size),
          total_(total) {}
    void update(std::uint64_t done) {
        if (!on_ || done < next_) return;
        next_ = done + total_ / 100 + 1;
        const int pct = static_cast<int>(std::min<std::uint64_t>(done * 100 / total_, 100));
        std::fprintf(stderr, "\r%s %u B [%-40.*s] %3d%%", what_, size_, pct * 40 / 100,
                     "########################################", pct);
    }
    ~Progress() {
        if (on_) std::fprintf(stderr, "\r%72s\r", "");
    }

  private:
    bool on_;
    const char* what_;
    std::uint32_t size_;
    std::uint64_t total_;
    std::uint64_t next_ = 0;
};

// Waits for one completion on `cq` of `e`; while waiting, `idle` runs (the loopback's
// other end).
template <class Idle>
ibv_wc wait_one(End& e, ibv_cq* cq, Idle&& idle) {
    ibv_wc wc;
    while (e.poll(cq, &wc, 1) == 0) idle();
    return wc;
}

// Retires send completions without waiting (unsignaled WRs retire with the signaled ones).
void drain_send(End& e) {
    ibv_wc wc[16];
    while (e.poll(e.scq(), wc, 16) > 0) {
    }
}

// One measured latency run of `size`; returns round trips in microseconds.
std::vector<double> run_latency(Run& r, std::uint32_t size) {
    const Options& o = r.o;
    const Test t = r.o.test->test;
    std::vector<double> rtt;
    rtt.reserve(o.iters);
    const std::uint32_t total = o.warmup + o.iters;
    Progress progress(!o.json, o.test->name.data(), size, total);
    End& a = *r.a;
    auto ping_once = [&](std::uint32_t i, auto&& body) {
        const auto t0 = Clock::now();
        body(i);
        const auto t1 = Clock::now();
        if (i >= o.warmup)
            rtt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        progress.update(i);
    };
    const bool signal_every = t == Test::read_lat || t == Test::atomic_lat;
    auto signaled = [&](std::uint32_t i) {
        return signal_every || i % kSignalEvery == kSignalEvery - 1;
    };

    switch (t) {
        case Test::send_lat: {
            // Ping: the client (or a) sends, the peer answers with a send of its own.
            auto serve = [&](End& e, std::uint32_t i) {  // one pong: got a send, answer it
                ibv_wc wc = wait_one(e, e.rcq(), [] {});
                (void)wc;
                e.post_recv(0);
                e.post(0, IBV_WR_SEND, size, signaled(i), i);
                if (signaled(i)) drain_send(e);
            };
            if (r.b != nullptr) {
                End& b = *r.b;
                for (std::uint32_t i = 0; i < total; ++i)
                    ping_once(i, [&](std::uint32_t k) {
                        a.post(0, IBV_WR_SEND, size, signaled(k), k);
                        wait_one(b, b.rcq(), [] {});
                        b.post_recv(0);
                        b.post(0, IBV_WR_SEND, size, signaled(k), k);
                        wait_one(a, a.rcq(), [] {});
                        a.post_recv(0);
                        drain_send(a);
                        drain_send(b);
                    });
            } else if (r.client) {
                for (std::uint32_t i = 0; i < total; ++i)
                    ping_once(i, [&](std::uint32_t k) {
                        a.post(0, IBV_WR_SEND, size, signaled(k), k);
                        wait_one(a, a.rcq(), [] {});
                        a.post_recv(0);
                        drain_send(a);
                    });
            } else {
                for (std::uint32_t i = 0; i < total; ++i) serve(a, i);
            }
            break;
        }
        case Test::write_lat: {
            // The last byte of each message carries the iteration; each side watches its
            // receive area for the peer's.
            // Stamps run 1..255 and never repeat back to back, nor equal the cleared 0.
            auto stamp_of = [](std::uint32_t k) { return static_cast<std::uint8_t>(k % 255 + 1); };
            auto expect = [&](End& e, std::uint32_t k) {
                volatile std::uint8_t* last = e.recv_area() + size - 1;
                while (*last != stamp_of(k)) {
                }
            };
            auto stamp = [&](End& e, std::uint32_t k) { e.send_area()[size - 1] = stamp_of(k); };
            auto write = [&](End& e, std::uint32_t k) {
                stamp(e, k);
                e.post(0, IBV_WR_RDMA_WRITE, size, signaled(k), k);
                drain_send(e);
            };
            if (r.b != nullptr) {
                End& b = *r.b;
                for (std::uint32_t i = 0; i < total; ++i)
                    ping_once(i, [&](std::uint32_t k) {
                        write(a, k);
                        expect(b, k);
                        write(b, k);
                        expect(a, k);
                    });
            } else if (r.client) {
                for (std::uint32_t i = 0; i < total; ++i)
                    ping_once(i, [&](std::uint32_t k) {
                        write(a, k);
                        expect(a, k);
                    });
            } else {
                for (std::uint32_t i = 0; i < total; ++i) {
                    expect(a, i);
                    write(a, i);
                }
            }
            break;
        }
        case Test::read_lat:
        case Test::atomic_lat: {
            if (!r.client && r.b == nullptr) break;  // the server is passive
            const ibv_wr_opcode op =
                t == Test::read_lat ? IBV_WR_RDMA_READ : IBV_WR_ATOMIC_FETCH_AND_ADD;
            for (std::uint32_t i = 0; i < total; ++i)
                ping_once(i, [&](std::uint32_t k) {
                    a.post(0, op, size, true, k);
                    wait_one(a, a.scq(), [] {});
                });
            break;
        }
        default:
            break;
    }
    return rtt;
}

struct BwResult {
    double seconds = 0;
    std::uint64_t messages = 0;
};

BwResult run_bandwidth(Run& r, std::uint32_t size) {
    const Options& o = r.o;
    const Test t = o.test->test;
    End& a = *r.a;
    const ibv_wr_opcode op = t == Test::send_bw    ? IBV_WR_SEND
                             : t == Test::write_bw ? IBV_WR_RDMA_WRITE
                                                   : IBV_WR_RDMA_READ;
    const std::uint32_t q = a.qps();
    ibv_wc wc[64];

    // The receiving side of send_bw keeps each receive queue full (a receive's wr_id is
    // its QP) and counts arrivals.
    auto receive = [&](End& e) {
        const int k = e.poll(e.rcq(), wc, 64);
        for (int i = 0; i < k; ++i) e.post_recv(static_cast<std::uint32_t>(wc[i].wr_id));
        return static_cast<std::uint64_t>(k);
    };
    if (!r.client && r.b == nullptr) {
        if (t != Test::send_bw) return {};  // WRITE and READ need nothing of the target
        for (std::uint64_t got = 0, n = std::uint64_t{o.warmup} + o.iters; got < n;)
            got += receive(a);
        return {};
    }

    // Sends `n` messages, round robin over the QPs (QP j gets quota[j] of them), with at most
    // -t in flight on each. Every `batch`-th WR of a QP and its last one are signaled; a
    // completion's wr_id says which QP and how many of its WRs are done. Allocates nothing.
    std::vector<std::uint64_t> quota(q), posted(q), done(q);
    const std::uint32_t batch = std::clamp<std::uint32_t>(o.tx_depth / 2, 1, kSignalEvery);
    constexpr int kQpShift = 40;
    constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kQpShift) - 1;
    auto pump = [&](std::uint64_t n, Progress* progress) {
        for (std::uint32_t j = 0; j < q; ++j) quota[j] = n / q + (j < n % q ? 1 : 0);
        std::fill(posted.begin(), posted.end(), 0);
        std::fill(done.begin(), done.end(), 0);
        const bool count_received = t == Test::send_bw && r.b != nullptr;
        std::uint64_t total_done = 0, received = 0;
        while (total_done < n || (count_received && received < n)) {
            for (bool more = true; more;) {
                more = false;
                for (std::uint32_t j = 0; j < q; ++j) {
                    if (posted[j] == quota[j] || posted[j] - done[j] >= o.tx_depth) continue;
                    const std::uint64_t k = ++posted[j];
                    a.post(j, op, size, k % batch == 0 || k == quota[j],
                           (std::uint64_t{j} << kQpShift) | k);
                    more = true;
                }
            }
            const int got = a.poll(a.scq(), wc, 64);
            for (int i = 0; i < got; ++i) {
                const auto j = static_cast<std::uint32_t>(wc[i].wr_id >> kQpShift);
                const std::uint64_t upto = wc[i].wr_id & kCountMask;
                total_done += upto - done[j];
                done[j] = upto;
            }
            if (count_received) received += receive(*r.b);
            if (progress != nullptr) progress->update(total_done);
        }
    };
    if (o.warmup > 0) pump(o.warmup, nullptr);
    Progress progress(!o.json, o.test->name.data(), size, o.iters);
    const auto t0 = Clock::now();
    pump(o.iters, &progress);
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return {seconds, o.iters};
}

// ---- output
// --------------------------------------------------------------------------------------

void print_latency(const Options& o, std::uint32_t size, std::uint32_t mtu, std::uint32_t idle,
                   std::vector<double>& us, bool header) {
    if (!o.samples.empty()) {
        // In measuring order, before summarize_latency sorts them; with -a the sizes
        // follow each other (-n lines each).
        if (FILE* f = std::fopen(o.samples.c_str(), header ? "w" : "a")) {
            for (double v : us) std::fprintf(f, "%.3f\n", v);
            std::fclose(f);
        } else {
            failf("cannot write %s: %s", o.samples.c_str(), std::strerror(errno));
        }
    }
    const snic::LatencySummary s = snic::summarize_latency(us);
    if (o.json) {
        std::printf(
            "{\"test\":\"%s\",\"size\":%u,\"iterations\":%zu,\"path_mtu\":%u,\"idle_qps\":%u,"
            "\"rtt_us\":{\"min\":%.3f,\"median\":%.3f,\"mean\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
            "\"max\":%.3f},\"histogram\":[",
            o.test->name.data(), size, s.count, mtu, idle, s.min, s.median, s.mean, s.p99, s.p999,
            s.max);
        for (std::size_t i = 0; i < s.histogram.size(); ++i)
            std::printf("%s{\"lo\":%g,\"hi\":%g,\"count\":%llu}", i ? "," : "", s.histogram[i].lo,
                        s.histogram[i].hi, static_cast<unsigned long long>(s.histogram[i].count));
        std::printf("]}\n");
        std::fflush(stdout);
        return;
    }
    if (header)
        std::printf(" %-9s %-10s %10s %10s %10s %10s %10s %10s   (round trips, us)\n", "#bytes",
                    "#iters", "min", "median", "average", "p99", "p99.9", "max");
    std::printf(" %-9u %-10zu %10.2f %10.2f %10.2f %10.2f %10.2f %10.2f\n", size, s.count, s.min,
                s.median, s.mean, s.p99, s.p999, s.max);
    if (o.sizes.size() == 1 || o.histogram) {
        std::uint64_t most = 1;
        for (const auto& b : s.histogram) most = std::max(most, b.count);
        for (const auto& b : s.histogram)
            std::printf("   [%9.3f, %9.3f) us %9llu %.*s\n", b.lo, b.hi,
                        static_cast<unsigned long long>(b.count),
                        static_cast<int>(b.count * 50 / most),
                        "##################################################");
    }
    std::fflush(stdout);
}

void print_bandwidth(const Options& o, std::uint32_t size, std::uint32_t mtu, std::uint32_t idle,
                     const BwResult& r, bool header) {
    const double rate = static_cast<double>(r.messages) / r.seconds;
    const double bytes = rate * size;
    if (o.json) {
        std::printf(
            "{\"test\":\"%s\",\"size\":%u,\"iterations\":%llu,\"path_mtu\":%u,\"qps\":%u,"
            "\"tx_depth\":%u,\"idle_qps\":%u,"
            "\"seconds\":%.6f,\"msg_rate_mpps\":%.4f,\"bw_gbps\":%.3f,\"bw_MBps\":%.2f}\n",
            o.test->name.data(), size, static_cast<unsigned long long>(r.messages), mtu, o.qps,
            o.tx_depth, idle, r.seconds, rate / 1e6, bytes * 8 / 1e9, bytes / 1e6);
        std::fflush(stdout);
        return;
    }
    if (header)
        std::printf(" %-9s %-12s %14s %14s\n", "#bytes", "#iterations",
                    o.gbits ? "BW [Gb/s]" : "BW [MB/s]", "MsgRate [Mpps]");
    std::printf(" %-9u %-12llu %14.2f %14.4f\n", size, static_cast<unsigned long long>(r.messages),
                o.gbits ? bytes * 8 / 1e9 : bytes / 1e6, rate / 1e6);
    std::fflush(stdout);
}

// What arrived in the last message of `size`, checked where it landed; for atomic_lat, the
// target counter, which every fetch-and-add (warm-up included) incremented by 1.
void check_data(Run& r, std::uint32_t size, const std::uint8_t* landed, const char* where) {
    const Test t = r.o.test->test;
    if (t == Test::atomic_lat) {
        std::uint64_t counter = 0;
        std::memcpy(&counter, landed, sizeof counter);
        const std::uint64_t want = std::uint64_t{r.o.warmup} + r.o.iters;
        if (counter != want)
            failf("%s: %llu fetch-and-adds of 1 left the counter at %llu", where,
                  static_cast<unsigned long long>(want), static_cast<unsigned long long>(counter));
        return;
    }
    const std::uint32_t n = t == Test::write_lat ? size - 1 : size;  // last byte: the stamp
    if (!pattern_ok(landed, n, size))
        failf("%s: the data of the last %u-byte message differs from what was sent", where, size);
}

// --loopback's default peer: another port of the same daemon (devices are DAEMON_i), else
// any other device.
std::string sibling_device(const std::string& mine) {
    const auto daemon = [](const std::string& dev) { return dev.substr(0, dev.rfind('_')); };
    std::string any;
    for (const std::string& name : device_names()) {
        if (name == mine) continue;
        if (daemon(name) == daemon(mine)) return name;
        if (any.empty()) any = name;
    }
    if (any.empty()) failf("--loopback needs a second device (--peer-device)");
    return any;
}

void run_sizes(Run& r, std::uint32_t mtu, std::uint32_t idle, bool& header);

int run_all(const Options& o) {
    std::uint32_t max_size = 0;
    for (std::uint32_t s : o.sizes) max_size = std::max(max_size, s);
    const Test t = o.test->test;
    std::optional<End> a, b;
    std::optional<Oob> oob;
    std::string dev = o.device;
    a.emplace(dev, o, max_size);
    // A RoCE packet larger than the port's active MTU would not fit the Ethernet frame.
    std::uint32_t mtu = o.mtu != 0 ? std::min(o.mtu, a->active_mtu()) : a->active_mtu();
    if (o.mtu > mtu)
        std::fprintf(stderr, "%s: -m %u is above %s's active MTU; using %u\n", kProg, o.mtu,
                     a->name().c_str(), mtu);
    if (o.loopback) {
        std::string peer = o.peer_device;
        if (peer.empty()) peer = sibling_device(a->name());
        if (peer == a->name()) failf("--loopback needs two different devices");
        b.emplace(peer, o, max_size);
        mtu = std::min(mtu, b->active_mtu());
        a->connect(b->info(), mtu);
        b->connect(a->info(), mtu);
    } else {
        oob.emplace(o);
        mtu = oob->hello(o, mtu);
        a->connect(oob->exchange(a->info()), mtu);
    }
    Run r{o, &*a, b ? &*b : nullptr, o.server.has_value() || o.loopback, oob ? &*oob : nullptr};
    if (!o.json) {
        std::printf("%s: %s%s, %s%s%s, RC, path MTU %u, %u QP(s), inline up to %u B\n", kProg,
                    o.test->name.data(),
                    o.loopback ? " --loopback" : (r.client ? " client" : " server"),
                    a->name().c_str(), b ? " <-> " : "", b ? b->name().c_str() : "", mtu, o.qps,
                    a->max_inline());
        if (o.test->latency)
            std::printf("%s: figures are ROUND TRIPS in microseconds%s\n", kProg,
                        t == Test::send_lat || t == Test::write_lat
                            ? " (perftest's t_typical is half a round trip)"
                            : ", post to completion");
        else
            std::printf("%s: payload bandwidth, up to %u WRs in flight per QP\n", kProg,
                        o.tx_depth);
    }

    bool header = true;
    for (std::uint32_t idle : o.idle_qps) {
        // The idle QPs, half on each end of a loopback.
        r.a->set_idle(r.b != nullptr ? idle - idle / 2 : idle);
        if (r.b != nullptr) r.b->set_idle(idle / 2);
        if (!o.json && (idle != 0 || o.idle_qps.size() > 1) && r.client)
            std::printf("%s: beside %u established idle RC QPs\n", kProg, idle);
        run_sizes(r, mtu, idle, header);
    }
    if (oob) oob->sync();
    return 0;
}

// Every size of the run, with `idle` idle QPs beside the measured ones.
void run_sizes(Run& r, std::uint32_t mtu, std::uint32_t idle, bool& header) {
    const Options& o = r.o;
    const Test t = o.test->test;
    Oob* oob = r.oob;
    for (std::uint32_t size : o.sizes) {
        // Patterns in every send area; receive areas cleared; receive queues full (once:
        // each receive consumed is posted again).
        for (End* e : {r.a, r.b}) {
            if (e == nullptr) continue;
            fill_pattern(e->send_area(), size, size);
            std::memset(e->recv_area(), 0, size);
            if (header && (t == Test::send_lat || t == Test::send_bw))
                for (std::uint32_t j = 0; j < e->qps(); ++j)
                    for (std::uint32_t k = 0; k < e->rx_depth(); ++k) e->post_recv(j);
        }
        if (oob) oob->sync();  // both sides posted their receives
        if (o.test->latency) {
            std::vector<double> us = run_latency(r, size);
            if (oob) oob->sync();
            if (r.client) print_latency(o, size, mtu, idle, us, header);
        } else {
            const BwResult res = run_bandwidth(r, size);
            if (oob) oob->sync();
            if (r.client) print_bandwidth(o, size, mtu, idle, res, header);
        }
        header = false;
        // The data that landed, where it landed.
        if (r.b != nullptr) {
            End& target = (t == Test::read_lat || t == Test::read_bw) ? *r.a : *r.b;
            check_data(r, size, target.recv_area(), target.name().c_str());
        } else if (r.client == (t == Test::read_lat || t == Test::read_bw)) {
            check_data(r, size, r.a->recv_area(), r.a->name().c_str());
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse_options(argc, argv);
    std::srand(static_cast<unsigned>(::getpid()));
    try {
        return run_all(o);
    } catch (const Failure& f) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s: %s\n", kProg, f.what());
        return kExitFail;
    }
}
