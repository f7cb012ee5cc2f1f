// The latency summary every measuring tool prints (common/latency.h).
#include "common/latency.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace snic {
namespace {

TEST(Latency, empty_samples_summarise_to_zero) {
    std::vector<double> v;
    const LatencySummary s = summarize_latency(v);
    EXPECT_EQ(s.count, 0u);
    EXPECT_TRUE(s.histogram.empty());
}

TEST(Latency, quantiles_use_the_nearest_rank) {
    std::vector<double> v(1000);
    std::iota(v.begin(), v.end(), 1.0);  // 1..1000, shuffled below
    std::reverse(v.begin(), v.end());
    const LatencySummary s = summarize_latency(v);
    EXPECT_EQ(s.count, 1000u);
    EXPECT_EQ(s.min, 1.0);
    EXPECT_EQ(s.max, 1000.0);
    EXPECT_EQ(s.median, 500.0);
    EXPECT_EQ(s.p99, 990.0);
    EXPECT_EQ(s.p999, 999.0);
    EXPECT_DOUBLE_EQ(s.mean, 500.5);
}

TEST(Latency, one_sample_is_every_quantile) {
    std::vector<double> v{7.5};
    const LatencySummary s = summarize_latency(v);
    EXPECT_EQ(s.min, 7.5);
    EXPECT_EQ(s.median, 7.5);
    EXPECT_EQ(s.p999, 7.5);
    ASSERT_EQ(s.histogram.size(), 1u);
    EXPECT_EQ(s.histogram[0].lo, 4.0);
    EXPECT_EQ(s.histogram[0].hi, 8.0);
}

TEST(Latency, histogram_buckets_double_and_hold_every_sample) {
    std::vector<double> v{0.0, 0.1, 1.0, 1.5, 3.0, 40.0};
    const LatencySummary s = summarize_latency(v);
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < s.histogram.size(); ++i) {
        total += s.histogram[i].count;
        if (i > 0) {
            EXPECT_EQ(s.histogram[i].lo, s.histogram[i - 1].hi);
            EXPECT_EQ(s.histogram[i].hi, 2 * s.histogram[i].lo);
        }
    }
    EXPECT_EQ(total, v.size());
    EXPECT_EQ(s.histogram.front().lo, 0.0);
    EXPECT_EQ(s.histogram.front().count, 2u);  // 0.0 and 0.1 below 0.25
    EXPECT_GT(s.histogram.back().hi, 40.0);
    EXPECT_LE(s.histogram.back().lo, 40.0);
}

}  // namespace
}  // namespace snic
