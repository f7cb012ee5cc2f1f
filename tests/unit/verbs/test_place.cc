// verbs::place stores like a NIC's DMA: every destination byte exactly once, the stores in
// ascending address order (proto/verbs/place.h). Checked on the machine code that runs, with
// the CPU's own write watchpoints (tests/unit/watchpoint.h): one watched byte at a time, each
// store that touches it raises a SIGTRAP right after it, whose handler takes a snapshot of
// the destination. A byte stored once traps once; stores in ascending order
// leave, at every trap, a written prefix that covers the watched byte.
//
// The same check run on a copy of overlapping head and tail stores (glibc's memcpy of 8 to
// 64 bytes) and on one that stores its tail first shows that it can fail.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "proto/verbs/place.h"
#include "tests/unit/watchpoint.h"

namespace snic::verbs::test {
namespace {

using snic::test::TrapHandler;
using snic::test::Watchpoint;

constexpr std::size_t kMax = 256;
constexpr std::size_t kMaxTraps = 8;

// What the SIGTRAP handler sees: the destination after each store to the watched byte.
struct Traps {
    const std::uint8_t* dst = nullptr;
    std::size_t n = 0;
    std::size_t count = 0;
    std::array<std::array<std::uint8_t, kMax>, kMaxTraps> snaps{};
};
Traps g_traps;

void on_trap(int, siginfo_t*, void*) {
    if (g_traps.count < kMaxTraps)
        std::memcpy(g_traps.snaps[g_traps.count].data(), g_traps.dst, g_traps.n);
    ++g_traps.count;
}

using CopyFn = void (*)(std::uint8_t*, const std::uint8_t*, std::size_t);

// Byte stores the compiler keeps as written.
void store_bytes(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
    volatile std::uint8_t* v = d;
    for (std::size_t i = 0; i < n; ++i) v[i] = s[i];
}

// As glibc's memcpy of 16 to 31 bytes: a head and a tail that overlap.
void overlapping(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
    const std::size_t h = n / 2 + 1;
    store_bytes(d, s, h);
    store_bytes(d + n - h, s + n - h, h);
}

// Each byte once, but the last one first.
void tail_first(std::uint8_t* d, const std::uint8_t* s, std::size_t n) {
    if (n == 0) return;
    store_bytes(d + n - 1, s + n - 1, 1);
    store_bytes(d, s, n - 1);
}

class PlaceStores : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_TRUE(handler_.ok());
        const Watchpoint probe(dst_.data(), 1);
        if (probe.error() != 0)
            GTEST_SKIP() << "no write watchpoints here (perf_event_open: "
                         << std::strerror(probe.error()) << ")";
    }

    // Copies n bytes at offset `at` of the buffers with `copy` once per destination byte,
    // watching that byte; the first finding, or "" when each byte was stored once and every
    // store left a written prefix covering it.
    std::string check(CopyFn copy, std::size_t at, std::size_t n) {
        std::uint8_t* d = dst_.data() + at;
        const std::uint8_t* s = src_.data() + at;
        for (std::size_t i = 0; i < src_.size(); ++i)
            src_[i] = static_cast<std::uint8_t>(i * 7 + 3);
        for (std::size_t k = 0; k < n; ++k) {
            for (std::size_t i = 0; i < dst_.size(); ++i)
                dst_[i] = static_cast<std::uint8_t>(~src_[i]);
            g_traps.dst = d;
            g_traps.n = n;
            g_traps.count = 0;
            Watchpoint w(d + k, 1);
            if (w.error() != 0) return "perf_event_open: " + std::string(std::strerror(w.error()));
            w.on();
            copy(d, s, n);
            w.off();
            const std::string where = "n " + std::to_string(n) + " at " + std::to_string(at) +
                                      " byte " + std::to_string(k);
            if (std::memcmp(d, s, n) != 0) return where + ": the copy is wrong";
            if (g_traps.count != 1)
                return where + ": stored " + std::to_string(g_traps.count) + " times";
            const auto& snap = g_traps.snaps[0];
            std::size_t prefix = 0;
            while (prefix < n && snap[prefix] == s[prefix]) ++prefix;
            for (std::size_t i = prefix; i < n; ++i)
                if (snap[i] == s[i])
                    return where + ": byte " + std::to_string(i) + " was there first";
            if (prefix <= k) return where + ": stored before byte " + std::to_string(prefix);
        }
        return "";
    }

  private:
    TrapHandler handler_{on_trap};
    alignas(64) std::array<std::uint8_t, kMax + 64> dst_{};
    alignas(64) std::array<std::uint8_t, kMax + 64> src_{};
};

// Each implementation the CPU can run (AVX-512, AVX2, SSE2), and place() itself (its own
// path under 16 bytes, then the first of them).
TEST_F(PlaceStores, every_byte_once_in_ascending_order) {
    std::vector<PlaceVariant> all(place_variants().begin(), place_variants().end());
    all.push_back(
        {"place", [](std::uint8_t* d, const std::uint8_t* s, std::size_t n) { place(d, s, n); }});
    for (const PlaceVariant& v : all) {
        SCOPED_TRACE(v.name);
        // Every size through the widest vector and a half, then longer ones; aligned and not.
        for (std::size_t n = 1; n <= 72; ++n) {
            for (std::size_t at : {0, 5}) ASSERT_EQ(check(v.fn, at, n), "");
        }
        for (std::size_t n : {127, 128, 129, 200, 255, 256})
            for (std::size_t at : {3, 40}) ASSERT_EQ(check(v.fn, at, n), "");
    }
}

TEST(Place, copies_like_memcpy_with_the_first_usable_implementation) {
    std::vector<std::uint8_t> src(5000), dst(5000), want(5000);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>(i * 13 + 1);
    for (std::size_t n : {0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1428, 4096}) {
        for (std::size_t at : {0, 1, 33}) {
            std::fill(dst.begin(), dst.end(), 0xee);
            want = dst;
            std::memcpy(want.data() + at, src.data() + 7, n);
            place(dst.data() + at, src.data() + 7, n);
            ASSERT_EQ(dst, want) << "n " << n << " at " << at;
        }
    }
    ASSERT_FALSE(place_variants().empty());
    EXPECT_STREQ(place_variants().back().name, "sse2");  // x86-64's baseline: always there
}

TEST_F(PlaceStores, the_check_sees_a_byte_stored_twice) {
    EXPECT_NE(check(overlapping, 0, 16).find("stored 2 times"), std::string::npos);
}

TEST_F(PlaceStores, the_check_sees_a_tail_stored_first) {
    EXPECT_NE(check(tail_first, 0, 40).find("was there first"), std::string::npos);
}

}  // namespace
}  // namespace snic::verbs::test
