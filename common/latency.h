// A summary of latency samples, as snic's measuring tools report it: count, min, median,
// mean, p99, p99.9, max, and a histogram with log2-spaced buckets. Pure and header-only so
// that snicd's self-tests and the tools in tools/ summarise the same way. Runs after a
// measurement, never on a datapath: it sorts and allocates.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace snic {

// One histogram bucket: samples in [lo, hi).
struct LatencyBucket {
    double lo = 0;
    double hi = 0;
    std::uint64_t count = 0;
};

struct LatencySummary {
    std::size_t count = 0;
    double min = 0, median = 0, mean = 0, p99 = 0, p999 = 0, max = 0;
    std::vector<LatencyBucket>
        histogram;  // contiguous buckets from min to max, none empty at the ends
};

// The q-quantile (0 <= q <= 1) of sorted samples, by the nearest-rank method: the smallest
// sample with at least q of all samples at or below it.
inline double quantile_sorted(std::span<const double> sorted, double q) {
    if (sorted.empty()) return 0;
    const auto n = sorted.size();
    auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(n)));
    rank = std::clamp<std::size_t>(rank, 1, n);
    return sorted[rank - 1];
}

// Summarises `samples` (any unit; sorted in place). The histogram's buckets double in
// width: [b, 2b), [2b, 4b) ... from the power of two at or below the minimum, where b is
// at least `min_bucket` (so that a 0 sample has a bucket).
inline LatencySummary summarize_latency(std::span<double> samples, double min_bucket = 0.125) {
    LatencySummary s;
    s.count = samples.size();
    if (samples.empty()) return s;
    std::sort(samples.begin(), samples.end());
    double sum = 0;
    for (double v : samples) sum += v;
    s.min = samples.front();
    s.max = samples.back();
    s.mean = sum / static_cast<double>(samples.size());
    s.median = quantile_sorted(samples, 0.5);
    s.p99 = quantile_sorted(samples, 0.99);
    s.p999 = quantile_sorted(samples, 0.999);

    double lo = min_bucket;
    while (lo * 2 <= s.min) lo *= 2;
    std::size_t i = 0;
    while (i < samples.size()) {
        LatencyBucket b{lo == min_bucket && s.min < min_bucket ? 0 : lo, lo * 2, 0};
        while (i < samples.size() && samples[i] < b.hi) {
            ++b.count;
            ++i;
        }
        s.histogram.push_back(b);
        lo *= 2;
    }
    return s;
}

}  // namespace snic
