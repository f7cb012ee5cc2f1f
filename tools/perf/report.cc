#include "tools/perf/report.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/latency.h"
#include "tools/perf/perf.h"

namespace snic::perf {

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

}  // namespace snic::perf
