// snic-ringbench: the shm SPSC ring (shm/ring.h) measured beside DPDK's rte_ring SP/SC.
//
// In one run, for each ring: ping-pong round-trip latency between two threads on two cores
// (min/median/p99/max), and one-way throughput with bursts. Both rings carry 8-byte entries
// (uint64_t in the snic ring, void* in rte_ring) and both live in ordinary 4 KiB pages: the snic
// ring in a memfd mapping as a client's would, rte_ring in EAL --no-huge memory. Then the snic
// ring with 64-byte entries twice: published through the producer index (the consumer reads
// the index's line, then the entry's), and sequenced as snic's CQEs are (the consumer reads
// the entry's line alone).
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_pause.h>
#include <rte_ring.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shm/ring.h"
#include "shm/wqe.h"

namespace {

using Clock = std::chrono::steady_clock;

// What to run, from the command line.
struct Options {
    std::uint64_t roundtrips = 1'000'000;  // ping-pong round trips per ring (-n)
    std::uint64_t messages = 50'000'000;   // entries per throughput run (-m)
    std::uint32_t burst = 32;              // throughput burst size (-b)
    std::uint32_t ring_size = 1024;        // ring capacity, a power of two (-s)
    unsigned repeats = 3;                  // measurement rounds (-r)
    int cpu[2] = {-1, -1};                 // cores for the two threads (-c A,B)
};

// Where the two benchmark threads run: pinned to two cores, or wherever the scheduler likes.
struct Placement {
    bool pinned = false;
    int cpu[2] = {-1, -1};
    // Without two dedicated cores a busy-waiting thread may hold the only CPU its peer needs,
    // so waits yield instead of spinning.
    bool yield = false;
};

void usage(const char* argv0) {
    std::printf(
        "usage: %s [-n ROUNDTRIPS] [-m MESSAGES] [-b BURST] [-s RING_SIZE] [-r REPEATS] "
        "[-c CPU_A,CPU_B]\n"
        "  -n  ping-pong round trips per ring (default 1000000)\n"
        "  -m  entries per one-way throughput run (default 50000000)\n"
        "  -b  throughput burst size (default 32)\n"
        "  -s  ring capacity, a power of two (default 1024)\n"
        "  -r  measurement rounds, snic and rte_ring interleaved (default 3)\n"
        "  -c  the two cores to pin the threads to (default: the first two allowed)\n",
        argv0);
}

bool parse_u64(const char* s, std::uint64_t& out) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(s, &end, 0);
    if (errno != 0 || end == s || *end != '\0') return false;
    out = v;
    return true;
}

bool parse_options(int argc, char** argv, Options& o) {
    int c = 0;
    std::uint64_t v = 0;
    while ((c = getopt(argc, argv, "n:m:b:s:r:c:h")) != -1) {
        switch (c) {
            case 'n':
                if (!parse_u64(optarg, o.roundtrips) || o.roundtrips == 0) return false;
                break;
            case 'm':
                if (!parse_u64(optarg, o.messages) || o.messages == 0) return false;
                break;
            case 'b':
                if (!parse_u64(optarg, v) || v == 0 || v > 4096) return false;
                o.burst = static_cast<std::uint32_t>(v);
                break;
            case 's':
                if (!parse_u64(optarg, v) || v < 2 || v > (1u << 24) || (v & (v - 1)) != 0)
                    return false;
                o.ring_size = static_cast<std::uint32_t>(v);
                break;
            case 'r':
                if (!parse_u64(optarg, v) || v == 0 || v > 100) return false;
                o.repeats = static_cast<unsigned>(v);
                break;
            case 'c':
                if (std::sscanf(optarg, "%d,%d", &o.cpu[0], &o.cpu[1]) != 2 || o.cpu[0] < 0 ||
                    o.cpu[1] < 0 || o.cpu[0] == o.cpu[1])
                    return false;
                break;
            default:
                return false;
        }
    }
    return optind == argc;
}

// Chooses the two cores from the process's allowed set (taken before EAL narrowed it).
Placement choose_placement(const Options& o, const cpu_set_t& allowed) {
    Placement p;
    if (o.cpu[0] >= 0) {
        if (o.cpu[0] >= CPU_SETSIZE || o.cpu[1] >= CPU_SETSIZE || !CPU_ISSET(o.cpu[0], &allowed) ||
            !CPU_ISSET(o.cpu[1], &allowed)) {
            std::fprintf(stderr, "cpus %d,%d are not both allowed: running unpinned\n", o.cpu[0],
                         o.cpu[1]);
            p.yield = true;
            return p;
        }
        p.cpu[0] = o.cpu[0];
        p.cpu[1] = o.cpu[1];
    } else {
        int found = 0;
        for (int cpu = 0; cpu < CPU_SETSIZE && found < 2; ++cpu)
            if (CPU_ISSET(cpu, &allowed)) p.cpu[found++] = cpu;
        if (found < 2) {
            p.yield = true;
            return p;
        }
    }
    p.pinned = true;
    return p;
}

// Pins the calling thread to `cpu`; on failure the thread stays unpinned.
bool pin_self(int cpu) {
    if (cpu < 0) return false;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Reads the TSC after every earlier instruction has executed, so a round trip is never
// timed short by an rdtsc that ran ahead of the load that ended the wait.
inline std::uint64_t tsc_now() {
#if defined(__x86_64__)
    unsigned aux = 0;
    const std::uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
#else
    return rte_rdtsc_precise();
#endif
}

inline void relax(const Placement& p) {
    if (p.yield)
        std::this_thread::yield();
    else
        rte_pause();
}

// A ring memory region shaped like a client's: a memfd mapped shared.
class SharedMapping {
  public:
    explicit SharedMapping(std::size_t bytes) : bytes_(bytes) {
        const int fd = memfd_create("snic-ringbench", MFD_CLOEXEC);
        if (fd < 0) return;
        if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
            void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            if (p != MAP_FAILED) base_ = static_cast<std::byte*>(p);
        }
        close(fd);
    }
    ~SharedMapping() {
        if (base_ != nullptr) munmap(base_, bytes_);
    }
    SharedMapping(const SharedMapping&) = delete;
    SharedMapping& operator=(const SharedMapping&) = delete;

    bool ok() const { return base_ != nullptr; }
    std::span<std::byte> span() const { return {base_, bytes_}; }

  private:
    std::size_t bytes_;
    std::byte* base_ = nullptr;
};

// A 64-byte entry published through the producer index (no seq word): one CQE's size.
struct IndexedLine {
    std::uint64_t value;
    std::uint8_t pad[56];
};
static_assert(sizeof(IndexedLine) == 64 && !snic::shm::SequencedEntry<IndexedLine>);
// The same size, published by its own seq word as snic's CQEs are (shm/wqe.h).
using SequencedLine = snic::shm::Cqe;
static_assert(snic::shm::SequencedEntry<SequencedLine>);

// How each entry type carries the benchmark's sequence number.
template <class T>
struct Entry;
template <>
struct Entry<std::uint64_t> {
    static std::uint64_t make(std::uint64_t seq) { return seq; }
    static std::uint64_t seq(std::uint64_t v) { return v; }
};
template <>
struct Entry<IndexedLine> {
    static IndexedLine make(std::uint64_t seq) { return {seq, {}}; }
    static std::uint64_t seq(const IndexedLine& v) { return v.value; }
};
template <>
struct Entry<SequencedLine> {
    static SequencedLine make(std::uint64_t seq) {
        SequencedLine c{};
        c.wr_id = seq;
        return c;
    }
    static std::uint64_t seq(const SequencedLine& v) { return v.wr_id; }
};

// One direction through a snic ring of T: the producer view for the sending thread and the
// consumer view for the receiving one, formatted and attached as snicd and a client would.
template <class T>
class SnicLink {
  public:
    using value_type = T;
    static value_type make(std::uint64_t seq) { return Entry<T>::make(seq); }
    static std::uint64_t seq(const value_type& v) { return Entry<T>::seq(v); }

    explicit SnicLink(std::uint32_t capacity) : mem_(snic::shm::ring_bytes<T>(capacity)) {
        if (!mem_.ok()) return;
        auto c = snic::shm::RingConsumer<T>::init(mem_.span(), capacity);
        if (!c) return;
        auto p = snic::shm::RingProducer<T>::attach(mem_.span());
        if (!p) return;
        rx_.emplace(*c);
        tx_.emplace(*p);
    }
    bool ok() const { return tx_.has_value() && rx_.has_value(); }

    bool send(const value_type& v) { return tx_->try_push(v); }
    bool recv(value_type& v) { return rx_->try_pop(v); }
    unsigned send_burst(const value_type* v, unsigned n) { return tx_->push_burst({v, n}); }
    unsigned recv_burst(value_type* v, unsigned n) { return rx_->pop_burst({v, n}); }

  private:
    SharedMapping mem_;
    // Each view is written by its own thread (in snic, by its own process): keep them on
    // separate cache lines so that the benchmark does not add false sharing.
    alignas(64) std::optional<snic::shm::RingProducer<T>> tx_;
    alignas(64) std::optional<snic::shm::RingConsumer<T>> rx_;
};

// One direction through an rte_ring created single-producer/single-consumer.
class RteLink {
  public:
    using value_type = void*;
    static value_type make(std::uint64_t seq) { return reinterpret_cast<void*>(seq); }
    static std::uint64_t seq(value_type v) { return reinterpret_cast<std::uintptr_t>(v); }

    RteLink(const char* name, std::uint32_t count)
        : ring_(rte_ring_create(name, count, static_cast<int>(rte_socket_id()),
                                RING_F_SP_ENQ | RING_F_SC_DEQ)) {}
    bool ok() const { return ring_ != nullptr; }

    bool send(value_type v) { return rte_ring_sp_enqueue(ring_.get(), v) == 0; }
    bool recv(value_type& v) { return rte_ring_sc_dequeue(ring_.get(), &v) == 0; }
    unsigned send_burst(const value_type* v, unsigned n) {
        return rte_ring_sp_enqueue_burst(ring_.get(), v, n, nullptr);
    }
    unsigned recv_burst(value_type* v, unsigned n) {
        return rte_ring_sc_dequeue_burst(ring_.get(), v, n, nullptr);
    }

  private:
    struct Free {
        void operator()(rte_ring* r) const { rte_ring_free(r); }
    };
    std::unique_ptr<rte_ring, Free> ring_;
};

// Releases both threads at once so neither measures the other's start-up.
class StartGate {
  public:
    void arrive_and_wait() {
        waiting_.fetch_add(1, std::memory_order_acq_rel);
        while (waiting_.load(std::memory_order_acquire) < 2) rte_pause();
    }

  private:
    std::atomic<int> waiting_{0};
};

struct Latency {
    double min_ns = 0, p50_ns = 0, p99_ns = 0, max_ns = 0;
    std::uint64_t errors = 0;
};

// Ping-pong: thread A sends seq i through `ab` and waits for it to come back through `ba`;
// thread B echoes. Each round trip is timed on A with the TSC.
template <class Link>
Latency ping_pong(Link& ab, Link& ba, std::uint64_t n, const Placement& pl) {
    using V = typename Link::value_type;
    const std::uint64_t warmup = std::min<std::uint64_t>(n / 10 + 1, 100'000);
    const std::uint64_t total = warmup + n;
    std::vector<std::uint64_t> ticks(n);
    std::uint64_t errors = 0;
    StartGate gate;

    std::thread echo([&] {
        if (pl.pinned) pin_self(pl.cpu[1]);
        gate.arrive_and_wait();
        for (std::uint64_t i = 0; i < total; ++i) {
            V v{};
            while (!ab.recv(v)) relax(pl);
            while (!ba.send(v)) relax(pl);
        }
    });
    std::thread ping([&] {
        if (pl.pinned) pin_self(pl.cpu[0]);
        gate.arrive_and_wait();
        for (std::uint64_t i = 0; i < total; ++i) {
            const std::uint64_t t0 = tsc_now();
            while (!ab.send(Link::make(i))) relax(pl);
            V v{};
            while (!ba.recv(v)) relax(pl);
            const std::uint64_t t1 = tsc_now();
            if (Link::seq(v) != i) ++errors;
            if (i >= warmup) ticks[i - warmup] = t1 - t0;
        }
    });
    ping.join();
    echo.join();

    std::sort(ticks.begin(), ticks.end());
    const double ns_per_tick = 1e9 / static_cast<double>(rte_get_tsc_hz());
    auto at = [&](double q) {
        const auto idx = static_cast<std::size_t>(q * static_cast<double>(n - 1));
        return static_cast<double>(ticks[idx]) * ns_per_tick;
    };
    return {at(0.0), at(0.5), at(0.99), at(1.0), errors};
}

struct Throughput {
    double mops = 0;
    std::uint64_t errors = 0;
};

// One way: the producer pushes 0..m-1 in bursts, the consumer pops in bursts and checks order.
// Timed on the consumer from the gate to the last entry.
template <class Link>
Throughput one_way(Link& link, std::uint64_t m, std::uint32_t burst, const Placement& pl) {
    using V = typename Link::value_type;
    std::uint64_t errors = 0;
    Clock::duration elapsed{};
    StartGate gate;

    std::thread consumer([&] {
        if (pl.pinned) pin_self(pl.cpu[1]);
        std::vector<V> buf(burst);
        gate.arrive_and_wait();
        const auto t0 = Clock::now();
        std::uint64_t expect = 0;
        while (expect < m) {
            const unsigned n = link.recv_burst(buf.data(), burst);
            if (n == 0) relax(pl);
            for (unsigned i = 0; i < n; ++i)
                if (Link::seq(buf[i]) != expect++) ++errors;
        }
        elapsed = Clock::now() - t0;
    });
    std::thread producer([&] {
        if (pl.pinned) pin_self(pl.cpu[0]);
        std::vector<V> buf(burst);
        gate.arrive_and_wait();
        std::uint64_t next = 0;
        while (next < m) {
            const unsigned want = static_cast<unsigned>(std::min<std::uint64_t>(burst, m - next));
            for (unsigned i = 0; i < want; ++i) buf[i] = Link::make(next + i);
            unsigned done = 0;
            while (done < want) {
                const unsigned n = link.send_burst(buf.data() + done, want - done);
                if (n == 0) relax(pl);
                done += n;
            }
            next += want;
        }
    });
    producer.join();
    consumer.join();

    const double secs = std::chrono::duration<double>(elapsed).count();
    return {static_cast<double>(m) / secs / 1e6, errors};
}

// One row of the results table.
template <class Link>
bool run_row(const char* label, Link& ab, Link& ba, const Options& o, const Placement& pl) {
    const Latency lat = ping_pong(ab, ba, o.roundtrips, pl);
    const Throughput tp = one_way(ab, o.messages, o.burst, pl);
    std::printf("%-18s %9.0f %9.0f %9.0f %10.0f %14.1f\n", label, lat.min_ns, lat.p50_ns,
                lat.p99_ns, lat.max_ns, tp.mops);
    std::fflush(stdout);
    if (lat.errors != 0 || tp.errors != 0) {
        std::fprintf(stderr,
                     "%s: %" PRIu64 " ping-pong and %" PRIu64 " throughput entries out of order\n",
                     label, lat.errors, tp.errors);
        return false;
    }
    return true;
}

// Brings up a minimal EAL on one core and tears it down at exit: rte_ring needs EAL memory.
class Eal {
  public:
    explicit Eal(int main_cpu) {
        std::string lcores = std::to_string(main_cpu < 0 ? 0 : main_cpu);
        // --no-huge implies legacy memory, which rules out --in-memory; --no-shconf keeps the
        // run from leaving shared config behind instead. --log-level=4: errors only.
        const char* args[] = {
            "snic-ringbench", "--no-huge",     "-m", "64",          "--no-shconf", "--no-pci",
            "--no-telemetry", "--log-level=4", "-l", lcores.c_str()};
        std::vector<char*> argv;
        for (const char* a : args) argv.push_back(const_cast<char*>(a));
        ok_ = rte_eal_init(static_cast<int>(argv.size()), argv.data()) >= 0;
    }
    ~Eal() {
        if (ok_) rte_eal_cleanup();
    }
    Eal(const Eal&) = delete;
    Eal& operator=(const Eal&) = delete;
    bool ok() const { return ok_; }

  private:
    bool ok_ = false;
};

}  // namespace

int main(int argc, char** argv) {
    Options o;
    if (!parse_options(argc, argv, o)) {
        usage(argv[0]);
        return 2;
    }

    // EAL pins the main thread to its lcore; keep the original set for the benchmark threads.
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_SET(0, &allowed);
    int first_cpu = 0;
    while (first_cpu < CPU_SETSIZE - 1 && !CPU_ISSET(first_cpu, &allowed)) ++first_cpu;

    Eal eal(first_cpu);
    if (!eal.ok()) {
        std::fprintf(stderr, "rte_eal_init failed: %s\n", rte_strerror(rte_errno));
        return 1;
    }
    sched_setaffinity(0, sizeof allowed, &allowed);

    const Placement pl = choose_placement(o, allowed);
    if (pl.pinned) {
        std::printf("threads pinned to cpus %d and %d\n", pl.cpu[0], pl.cpu[1]);
    } else {
        std::printf("no two cores to pin to: threads unpinned, waits yield\n");
    }
    std::printf("ring size %u (rte_ring holds %u), 8-byte entries (64 B rows: 64), TSC %.3f GHz\n",
                o.ring_size, o.ring_size - 1, static_cast<double>(rte_get_tsc_hz()) / 1e9);
    std::printf("ping-pong: %" PRIu64 " round trips; one-way: %" PRIu64
                " entries, bursts of %u\n\n",
                o.roundtrips, o.messages, o.burst);

    SnicLink<std::uint64_t> snic_ab(o.ring_size), snic_ba(o.ring_size);
    SnicLink<IndexedLine> line_ab(o.ring_size), line_ba(o.ring_size);
    SnicLink<SequencedLine> seq_ab(o.ring_size), seq_ba(o.ring_size);
    RteLink rte_ab("ringbench_ab", o.ring_size), rte_ba("ringbench_ba", o.ring_size);
    if (!snic_ab.ok() || !snic_ba.ok() || !line_ab.ok() || !line_ba.ok() || !seq_ab.ok() ||
        !seq_ba.ok()) {
        std::fprintf(stderr, "cannot set up the snic rings: %s\n", std::strerror(errno));
        return 1;
    }
    if (!rte_ab.ok() || !rte_ba.ok()) {
        std::fprintf(stderr, "rte_ring_create failed: %s\n", rte_strerror(rte_errno));
        return 1;
    }

    std::printf("%-18s %9s %9s %9s %10s %14s\n", "ring", "rtt min", "rtt p50", "rtt p99", "rtt max",
                "one-way");
    std::printf("%-18s %9s %9s %9s %10s %14s\n", "", "(ns)", "(ns)", "(ns)", "(ns)", "(Mops/s)");
    bool ok = true;
    for (unsigned r = 0; r < o.repeats; ++r) {
        ok = run_row("snic shm ring", snic_ab, snic_ba, o, pl) && ok;
        ok = run_row("rte_ring SP/SC", rte_ab, rte_ba, o, pl) && ok;
        ok = run_row("64 B, index", line_ab, line_ba, o, pl) && ok;
        ok = run_row("64 B, seq", seq_ab, seq_ba, o, pl) && ok;
    }
    return ok ? 0 : 1;
}
