#include "tools/perf/runs.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tools/perf/end.h"
#include "tools/perf/perf.h"

namespace snic::perf {

namespace {

// The bytes each message carries: byte i of a `size`-byte message. The higher bits of i
// take part so that a packet placed at another multiple of 256 (or of the MTU) shows.
constexpr std::uint8_t pattern_byte(std::uint32_t i, std::uint32_t size) {
    return static_cast<std::uint8_t>(i * 131u + (i >> 8) * 7u + (i >> 16) * 11u + size);
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

}  // namespace

void fill_pattern(std::uint8_t* p, std::uint32_t n, std::uint32_t size) {
    for (std::uint32_t i = 0; i < n; ++i) p[i] = pattern_byte(i, size);
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

}  // namespace snic::perf
