// The listener table the lcore reads without locks (daemon/listeners.h).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "daemon/listeners.h"

namespace snic::daemon {
namespace {

using L = ListenerTable::Listener;

TEST(Listeners, a_bound_key_is_found_until_unbound) {
    ListenerTable t;
    EXPECT_FALSE(t.find(0x1234));
    ASSERT_TRUE(t.bind(0x1234, {7, 42}));
    EXPECT_EQ(t.find(0x1234), (L{7, 42}));
    EXPECT_FALSE(t.bind(0x1234, {8, 1})) << "one listener per key";
    EXPECT_EQ(t.size(), 1u);
    EXPECT_TRUE(t.unbind(0x1234));
    EXPECT_FALSE(t.find(0x1234));
    EXPECT_FALSE(t.unbind(0x1234));
    EXPECT_EQ(t.size(), 0u);
    EXPECT_TRUE(t.bind(0x1234, {8, 1})) << "the key is free again";
    EXPECT_EQ(t.find(0x1234), (L{8, 1}));
}

TEST(Listeners, reserved_keys_are_refused) {
    ListenerTable t;
    EXPECT_FALSE(t.bind(ListenerTable::kEmpty, {1, 1}));
    EXPECT_FALSE(t.bind(ListenerTable::kTombstone, {1, 1}));
    EXPECT_FALSE(t.find(ListenerTable::kTombstone));
}

TEST(Listeners, an_unbound_key_keeps_the_probe_chain_of_the_others_whole) {
    ListenerTable t;
    // Enough keys that many share probe chains.
    for (std::uint64_t k = 1; k <= 600; ++k)
        ASSERT_TRUE(t.bind(k, {1, static_cast<std::uint32_t>(k)}));
    for (std::uint64_t k = 1; k <= 600; k += 2) ASSERT_TRUE(t.unbind(k));
    for (std::uint64_t k = 2; k <= 600; k += 2)
        EXPECT_EQ(t.find(k), (L{1, static_cast<std::uint32_t>(k)})) << k;
    for (std::uint64_t k = 1; k <= 600; k += 2) EXPECT_FALSE(t.find(k)) << k;
    // Tombstones are reused.
    for (std::uint64_t k = 1001; k <= 1300; ++k) ASSERT_TRUE(t.bind(k, {2, 0}));
    EXPECT_EQ(t.size(), 600u);
}

TEST(Listeners, a_full_probe_window_refuses_the_bind) {
    ListenerTable t;
    std::uint32_t bound = 0;
    for (std::uint64_t k = 1; k <= 2 * ListenerTable::kSlots; ++k)
        bound += t.bind(k, {1, 1}) ? 1 : 0;
    EXPECT_LE(bound, ListenerTable::kSlots);
    EXPECT_EQ(t.size(), bound);
    EXPECT_GT(bound, ListenerTable::kSlots / 2) << "the table fills well before probes run out";
}

// A reader on another thread (the lcore) never sees a key with a value it was not bound to,
// while the control thread binds, unbinds and rebinds it.
TEST(Listeners, a_concurrent_reader_sees_only_real_bindings) {
    ListenerTable t;
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> bad{0}, seen{0};
    std::thread reader([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            for (std::uint64_t k = 1; k <= 64; ++k) {
                if (auto l = t.find(k)) {
                    // Every binding of key k is {k, generation}: the session names the key.
                    if (l->session != k) bad.fetch_add(1, std::memory_order_relaxed);
                    seen.fetch_add(1, std::memory_order_relaxed);
                }
            }
        }
    });
    // Until the reader has looked often (it may start late on a loaded machine), bounded.
    for (std::uint32_t gen = 1; gen <= 50'000'000; ++gen) {
        const std::uint64_t k = 1 + gen % 64;
        t.unbind(k);
        ASSERT_TRUE(t.bind(k, {static_cast<std::uint32_t>(k), gen}));
        if (gen >= 20000 && seen.load(std::memory_order_relaxed) >= 100'000) break;
    }
    stop = true;
    reader.join();
    EXPECT_EQ(bad.load(), 0u);
    EXPECT_GT(seen.load(), 0u);
}

}  // namespace
}  // namespace snic::daemon
