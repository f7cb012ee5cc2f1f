// dapl/table.h: the key table the uDAPL provider's posts and completions read without a
// lock.
#include "dapl/table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace snic::dapl {
namespace {

TEST(KeyTable, finds_what_was_put_and_nothing_else) {
    KeyTable<int> t;
    int a = 1, b = 2;
    t.put(7, &a);
    t.put(0xffffffff, &b);
    EXPECT_EQ(t.find(7), &a);
    EXPECT_EQ(t.find(0xffffffff), &b);
    EXPECT_EQ(t.find(8), nullptr);
    EXPECT_EQ(t.find(0), nullptr);
}

TEST(KeyTable, a_removed_key_is_gone_and_keys_past_its_tombstone_are_found) {
    KeyTable<int> t;
    std::vector<int> v(40);
    for (std::uint32_t k = 0; k < 40; ++k) t.put(k * 64, &v[k]);  // many share a probe run
    for (std::uint32_t k = 0; k < 40; k += 2) t.put(k * 64, nullptr);
    for (std::uint32_t k = 0; k < 40; ++k)
        EXPECT_EQ(t.find(k * 64), k % 2 == 0 ? nullptr : &v[k]) << k;
    t.put(0, &v[0]);  // a key put back after removal
    EXPECT_EQ(t.find(0), &v[0]);
}

TEST(KeyTable, grows_past_half_full_and_keeps_every_key) {
    KeyTable<int> t;
    const std::size_t first = t.capacity();
    std::vector<int> v(10'000);
    for (std::uint32_t k = 0; k < v.size(); ++k) t.put(k ^ 0x5a5a5a5a, &v[k]);
    EXPECT_GT(t.capacity(), first);
    EXPECT_LE(2 * v.size(), t.capacity());
    for (std::uint32_t k = 0; k < v.size(); ++k) ASSERT_EQ(t.find(k ^ 0x5a5a5a5a), &v[k]);
}

TEST(KeyTable, a_reader_racing_growth_never_loses_a_key_present_throughout) {
    KeyTable<int> t;
    int stable = 42;
    t.put(123456, &stable);
    std::atomic<bool> stop{false};
    std::atomic<long> misses{0};
    std::thread reader([&] {
        while (!stop.load(std::memory_order_relaxed))
            if (t.find(123456) != &stable) misses.fetch_add(1);
    });
    std::vector<int> v(50'000);
    for (std::uint32_t k = 0; k < v.size(); ++k) t.put(k + 1'000'000, &v[k]);
    stop = true;
    reader.join();
    EXPECT_EQ(misses.load(), 0);
}

}  // namespace
}  // namespace snic::dapl
