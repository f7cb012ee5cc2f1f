// snic-cacheline-pingpong: the least a round trip between two cores costs, one cache line
// handed back and forth. snic's SEND round trip crosses between the client's core and the
// daemon's four times (request, its completion, the peer's answer, its completion); the
// benchmark (scripts/bench.sh) adds two of these round trips to the raw wire round trip as the
// architectural floor (docs/PERFORMANCE.md).
//
//   snic-cacheline-pingpong [-c|--cpus A,B] [-n|--iters N] [-w|--warmup N] [--json]
//
// Thread A, pinned to CPU A, writes the odd number 2i+1 into one 64-byte-aligned cache line and
// spins until thread B, pinned to CPU B, has answered 2i+2 in the same word: the line moves
// from A's core to B's and back. Both wait by spinning on a load, without a pause instruction,
// so that the figures are the least the two cores allow. N round trips (default 200,000) are
// timed each on A after WARMUP untimed ones (default 10,000), with the TSC (rdtscp, calibrated
// against the steady clock) on x86 and with the steady clock elsewhere; nothing is allocated
// and no system call is made while they run. Prints min, median, mean, p99, p99.9 and max in
// nanoseconds (common/latency.h), one text line or with --json one JSON object.
// Exit 0, 1 on a failure (a CPU the threads cannot run on), 2 on a usage error.
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/latency.h"
#include "tools/common/cli.h"

namespace {

constexpr const char* kProg = "snic-cacheline-pingpong";
constexpr std::uint64_t kMaxIters = 10'000'000;  // 80 MB of samples

struct Options {
    int cpu_a = 0;  // the pinging thread's CPU: the client's in the benchmark
    int cpu_b = 1;  // the echoing thread's CPU: the daemon's in the benchmark
    std::uint64_t iters = 200'000;
    std::uint64_t warmup = 10'000;
    bool json = false;
};

[[noreturn]] void usage_error(const std::string& why) {
    snic::cli::usage_error(kProg, why);
}

[[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "%s: %s\n", kProg, why.c_str());
    std::exit(1);
}

void usage() {
    std::printf(
        "usage: %s [-c|--cpus A,B] [-n|--iters N] [-w|--warmup N] [--json]\n"
        "One cache line handed back and forth between a thread on CPU A and one on CPU B\n"
        "(default 0,1); prints the round trips (min/median/mean/p99/p99.9/max) in ns.\n"
        "  -c, --cpus A,B    the two CPUs, different (default 0,1)\n"
        "  -n, --iters N     timed round trips (default 200000, at most %llu)\n"
        "  -w, --warmup N    untimed round trips first (default 10000)\n"
        "      --json        one JSON object on stdout, nothing else\n"
        "  -h, --help        this text\n",
        kProg, static_cast<unsigned long long>(kMaxIters));
}

void parse_cpus(const char* arg, Options& o) {
    const std::string s(arg);
    const auto comma = s.find(',');
    if (comma == std::string::npos) usage_error("--cpus needs two CPUs, A,B, not '" + s + "'");
    const std::string a = s.substr(0, comma), b = s.substr(comma + 1);
    o.cpu_a = static_cast<int>(snic::cli::number(kProg, a.c_str(), "cpu", 0, CPU_SETSIZE - 1));
    o.cpu_b = static_cast<int>(snic::cli::number(kProg, b.c_str(), "cpu", 0, CPU_SETSIZE - 1));
    if (o.cpu_a == o.cpu_b) usage_error("--cpus needs two different CPUs, not " + s);
}

Options parse(int argc, char** argv) {
    enum { kJson = 256 };
    static const option longs[] = {
        {"cpus", required_argument, nullptr, 'c'},   {"iters", required_argument, nullptr, 'n'},
        {"warmup", required_argument, nullptr, 'w'}, {"json", no_argument, nullptr, kJson},
        {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0},
    };
    Options o;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, ":c:n:w:h", longs, nullptr)) != -1;) {
        switch (c) {
            case 'c':
                parse_cpus(optarg, o);
                break;
            case 'n':
                o.iters = snic::cli::number(kProg, optarg, "iterations", 1, kMaxIters);
                break;
            case 'w':
                o.warmup = snic::cli::number(kProg, optarg, "warm-up", 0, kMaxIters);
                break;
            case kJson:
                o.json = true;
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
    if (optind < argc) usage_error(std::string("unexpected argument '") + argv[optind] + "'");
    return o;
}

// The clock of the timed loop: ticks, and their length in ns.
#if defined(__x86_64__)
// Reads the TSC after every earlier instruction has executed, so that a round trip is never
// timed short by a read that ran ahead of the load that ended the wait.
inline std::uint64_t ticks() {
    unsigned aux = 0;
    const std::uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
}

constexpr const char* kClock = "tsc";

// The TSC's tick against the steady clock over 50 ms (before the run: the sleep is a syscall).
double ns_per_tick() {
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t c0 = ticks();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto t1 = std::chrono::steady_clock::now();
    const std::uint64_t c1 = ticks();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(c1 - c0);
}
#else
inline std::uint64_t ticks() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
}

constexpr const char* kClock = "steady";

double ns_per_tick() {
    return 1.0;
}
#endif

// Pins the calling thread to `cpu`; the error number, 0 on success.
int pin_self(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// What the two threads share. The line the ping-pong moves is alone on its cache line; the
// start gate, touched only before the timed loop, is on another.
struct Shared {
    struct alignas(64) Line {
        std::atomic<std::uint64_t> seq{0};
    };
    static_assert(sizeof(Line) == 64 && alignof(Line) == 64);

    Line line;
    alignas(64) std::atomic<int> arrived{0};
    std::atomic<int> pin_error[2] = {0, 0};

    // Waits until both threads are pinned (or failed to be); true if both were.
    bool arrive(int side, int error) {
        pin_error[side].store(error);
        arrived.fetch_add(1);
        while (arrived.load() < 2) std::this_thread::yield();
        return pin_error[0].load() == 0 && pin_error[1].load() == 0;
    }
};

// Thread A: sends 2i+1 and waits for 2i+2, `warmup + out.size()` times; each timed round trip's
// ticks into `out` (sized beforehand).
void ping(Shared& sh, int cpu, std::uint64_t warmup, std::vector<std::uint64_t>& out) {
    if (!sh.arrive(0, pin_self(cpu))) return;
    const std::uint64_t total = warmup + out.size();
    for (std::uint64_t i = 0; i < total; ++i) {
        const std::uint64_t t0 = ticks();
        sh.line.seq.store(2 * i + 1, std::memory_order_release);
        while (sh.line.seq.load(std::memory_order_acquire) != 2 * i + 2) {
        }
        const std::uint64_t t1 = ticks();
        if (i >= warmup) out[i - warmup] = t1 - t0;
    }
}

// Thread B: answers each 2i+1 with 2i+2.
void echo(Shared& sh, int cpu, std::uint64_t total) {
    if (!sh.arrive(1, pin_self(cpu))) return;
    for (std::uint64_t i = 0; i < total; ++i) {
        while (sh.line.seq.load(std::memory_order_acquire) != 2 * i + 1) {
        }
        sh.line.seq.store(2 * i + 2, std::memory_order_release);
    }
}

}  // namespace

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    const double tick_ns = ns_per_tick();
    std::vector<std::uint64_t> samples(o.iters);
    Shared sh;
    std::thread b([&] { echo(sh, o.cpu_b, o.warmup + o.iters); });
    std::thread a([&] { ping(sh, o.cpu_a, o.warmup, samples); });
    a.join();
    b.join();
    for (int side = 0; side < 2; ++side)
        if (const int e = sh.pin_error[side].load(); e != 0)
            fail("cannot run a thread on cpu " + std::to_string(side == 0 ? o.cpu_a : o.cpu_b) +
                 ": " + std::strerror(e));

    std::vector<double> ns(samples.size());
    for (std::size_t i = 0; i < samples.size(); ++i)
        ns[i] = static_cast<double>(samples[i]) * tick_ns;
    const snic::LatencySummary st = snic::summarize_latency(ns);
    if (o.json) {
        std::printf(
            "{\"test\":\"cacheline-pingpong\",\"cpus\":[%d,%d],\"iterations\":%zu,"
            "\"clock\":\"%s\",\"rtt_ns\":{\"min\":%.1f,\"median\":%.1f,\"mean\":%.1f,"
            "\"p99\":%.1f,\"p999\":%.1f,\"max\":%.1f}}\n",
            o.cpu_a, o.cpu_b, st.count, kClock, st.min, st.median, st.mean, st.p99, st.p999,
            st.max);
    } else {
        std::printf(
            "%s cpus %d,%d ; %zu round trips, rtt min/median/mean/p99/p99.9/max = "
            "%.1f/%.1f/%.1f/%.1f/%.1f/%.1f ns\n",
            kProg, o.cpu_a, o.cpu_b, st.count, st.min, st.median, st.mean, st.p99, st.p999, st.max);
    }
    return 0;
}
