// PSN arithmetic modulo 2^24 (IBA vol 1 §9.7.1): each rule by name, then the whole
// definition against a reference written with 64-bit integers.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "proto/roce/psn.h"

namespace snic::roce {
namespace {

constexpr std::uint32_t kMax = 0xffffff;
constexpr std::int32_t kHalf = 1 << 23;

TEST(Psn, psn_wraps_at_2_24) {
    EXPECT_EQ(psn_add(kMax, 1), 0u);
    EXPECT_EQ(psn_add(0xfffff0, 0x20), 0x10u);
    EXPECT_EQ(psn_add(0x123456, 1u << 24), 0x123456u);  // a whole turn changes nothing
    EXPECT_EQ(psn_add(0, kMax), kMax);
    EXPECT_EQ(psn_sub(0, 1), kMax);
    EXPECT_EQ(psn_sub(0x10, 0x20), 0xfffff0u);
}

TEST(Psn, psn_results_stay_within_24_bits) {
    std::mt19937 rng(24);
    for (int i = 0; i < 10000; ++i) {
        const std::uint32_t a = rng(), n = rng();
        EXPECT_LE(psn_add(a, n), kMax);
        EXPECT_LE(psn_sub(a, n), kMax);
    }
}

TEST(Psn, psn_compare_across_wrap) {
    // 0xfffffe, 0xffffff, 0, 1 follow one another.
    EXPECT_TRUE(psn_lt(0xfffffe, 0xffffff));
    EXPECT_TRUE(psn_lt(0xffffff, 0));
    EXPECT_TRUE(psn_lt(0xfffffe, 1));
    EXPECT_TRUE(psn_gt(1, 0xfffffe));
    EXPECT_FALSE(psn_lt(1, 0xfffffe));
    EXPECT_EQ(psn_diff(1, 0xfffffe), 3);
    EXPECT_EQ(psn_diff(0xfffffe, 1), -3);
}

TEST(Psn, psn_diff_is_signed_within_half_the_circle) {
    EXPECT_EQ(psn_diff(5, 5), 0);
    EXPECT_EQ(psn_diff(kHalf - 1, 0), kHalf - 1);
    EXPECT_EQ(psn_diff(0, kHalf - 1), -(kHalf - 1));
    EXPECT_EQ(psn_diff(kHalf + 1, 0), -(kHalf - 1));  // more than half ahead is behind
}

TEST(Psn, psn_exactly_half_apart_reads_as_after) {
    // a - b lies in (-2^23, 2^23]: the one ambiguous distance is taken as positive, so
    // each of two PSNs 2^23 apart is "after" the other. Windows must stay under 2^23.
    EXPECT_EQ(psn_diff(kHalf, 0), kHalf);
    EXPECT_EQ(psn_diff(0, kHalf), kHalf);
    EXPECT_EQ(psn_diff(0x100, 0x100 + kHalf), kHalf);
    EXPECT_TRUE(psn_gt(kHalf, 0));
    EXPECT_TRUE(psn_gt(0, kHalf));
}

TEST(Psn, psn_order_is_antisymmetric_under_half_the_circle) {
    std::mt19937 rng(23);
    for (int i = 0; i < 100000; ++i) {
        const std::uint32_t a = rng() & kMax;
        const std::uint32_t b = rng() & kMax;
        if (psn_diff(a, b) == kHalf) continue;
        EXPECT_EQ(psn_diff(a, b), -psn_diff(b, a));
        EXPECT_EQ(psn_lt(a, b), psn_gt(b, a));
        EXPECT_EQ(psn_le(a, b), psn_ge(b, a));
        EXPECT_NE(psn_lt(a, b), psn_ge(a, b));
    }
}

TEST(Psn, psn_add_of_diff_gets_back) {
    std::mt19937 rng(9);
    for (int i = 0; i < 100000; ++i) {
        const std::uint32_t a = rng() & kMax;
        const std::uint32_t b = rng() & kMax;
        EXPECT_EQ(psn_add(b, static_cast<std::uint32_t>(psn_diff(a, b))), a);
    }
}

TEST(Psn, psn_diff_matches_a_64_bit_reference) {
    // Reference: the representative of a - b modulo 2^24 in (-2^23, 2^23].
    const auto reference = [](std::uint32_t a, std::uint32_t b) {
        std::int64_t d = (static_cast<std::int64_t>(a) - b) % (1 << 24);
        if (d <= -kHalf) d += 1 << 24;
        if (d > kHalf) d -= 1 << 24;
        return d;
    };
    std::mt19937 rng(7);
    for (int i = 0; i < 100000; ++i) {
        const std::uint32_t a = rng() & kMax;
        const std::uint32_t b = rng() & kMax;
        ASSERT_EQ(psn_diff(a, b), reference(a, b)) << a << " " << b;
    }
    for (std::uint32_t a : {0u, 1u, kMax, kMax - 1, 1u << 23, (1u << 23) - 1, (1u << 23) + 1}) {
        for (std::uint32_t b : {0u, 1u, kMax, kMax - 1, 1u << 23, (1u << 23) - 1, (1u << 23) + 1}) {
            EXPECT_EQ(psn_diff(a, b), reference(a, b)) << a << " " << b;
        }
    }
}

TEST(Psn, psn_range_wraps) {
    EXPECT_TRUE(psn_in_range(0xfffffe, 0xfffffe, 4));
    EXPECT_TRUE(psn_in_range(0, 0xfffffe, 4));
    EXPECT_TRUE(psn_in_range(1, 0xfffffe, 4));
    EXPECT_FALSE(psn_in_range(2, 0xfffffe, 4));
    EXPECT_FALSE(psn_in_range(0xfffffd, 0xfffffe, 4));
    EXPECT_FALSE(psn_in_range(7, 7, 0));
}

}  // namespace
}  // namespace snic::roce
