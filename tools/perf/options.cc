#include "tools/perf/options.h"

#include <getopt.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "tools/common/cli.h"
#include "tools/perf/perf.h"

namespace snic::perf {

namespace {

constexpr std::uint32_t kMaxSize = 8u << 20;

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
        "                          port of DEV's daemon of DEV's kind, e.g. NAME_1 for\n"
        "                          NAME_0, NAME_iw1 for NAME_iw0)\n"
        "  -x, --gid-index N       GID index (default 0, snic's RoCEv2 GID)\n"
        "  -q, --qp N              QPs (bandwidth tests spread over them; default 1)\n"
        "  -t, --tx-depth N        WRs in flight per QP in bandwidth tests (default 128)\n"
        "  -I, --inline_size BYTES SEND and WRITE of at most BYTES go inline (default 220,\n"
        "                          or less if the device allows less; 0: never)\n"
        "  -p, --port PORT         TCP port of the exchange (default 18515)\n"
        "  -m, --mtu BYTES         path MTU 256..4096 (default: the port's active MTU)\n"
        "      --report_gbits      bandwidth in Gb/s rather than MB/s\n"
        "      --loopback          both ends in this process and thread (two devices)\n"
        "  -R, --rdma_cm           create and connect the QPs through rdma_cm: the server\n"
        "                          listens on its device's IPv4 address, port -p + 1 of\n"
        "                          rdma_cm's TCP port space, and tells the client where over\n"
        "                          the exchange on TCP port -p; the client connects one id\n"
        "                          per QP from -d's address (or --source_ip). With\n"
        "                          --loopback: the peer device listens, -d connects.\n"
        "                          iWARP devices need -R (their QPs connect only so)\n"
        "      --source_ip ADDR    -R client (or --loopback's -d): connect from this IPv4\n"
        "                          address (default: the device's: its RoCEv2 GID, else\n"
        "                          the getifaddrs entry libsnic names after it)\n"
        "      --listen_ip ADDR    -R server (or --loopback's peer device): listen on this\n"
        "                          IPv4 address (default: the device's, as above)\n"
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

[[noreturn]] void usage_error(const std::string& why) {
    snic::cli::usage_error(kProg, why);
}

std::uint64_t number(const char* s, const char* what, std::uint64_t lo, std::uint64_t hi) {
    return snic::cli::number(kProg, s, what, lo, hi);
}

}  // namespace

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
    enum { kPeer = 256, kGbits, kLoop, kJson, kHist, kSamples, kIdle, kSource, kListen };
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
        {"rdma_cm", no_argument, nullptr, 'R'},
        {"source_ip", required_argument, nullptr, kSource},
        {"listen_ip", required_argument, nullptr, kListen},
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
    for (int c; (c = getopt_long(argc, argv, ":s:an:w:d:x:q:t:I:p:m:Rh", longs, nullptr)) != -1;) {
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
            case 'R':
                o.rdma_cm = true;
                break;
            case kSource:
                o.source_ip = optarg;
                break;
            case kListen:
                o.listen_ip = optarg;
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
    if (o.rdma_cm && o.mtu != 0) usage_error("-R: rdma_cm sets the path MTU (the route's), not -m");
    if (o.rdma_cm && o.port == 65535)
        usage_error("-R listens on port -p + 1: -p 65535 is too high");
    if (!o.source_ip.empty() && (!o.rdma_cm || !(o.server || o.loopback)))
        usage_error("--source_ip goes with -R on the client or --loopback");
    if (!o.listen_ip.empty() && (!o.rdma_cm || o.server))
        usage_error("--listen_ip goes with -R on the server or --loopback");
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

}  // namespace snic::perf
