// A context's doorbells (shm/wqe.h): what a client rings is taken once, by its index; a hostile
// client's area costs the daemon at most one scan of it; rings racing a take are never lost;
// and the `sleeping` handshake (store, full fence, load on both sides) never leaves a post
// unseen.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "shm/ring.h"
#include "shm/wqe.h"

namespace snic::shm {
namespace {

std::vector<std::uint32_t> take_all(Doorbells& d) {
    std::vector<std::uint32_t> out;
    take_doorbells(d, [&](std::uint32_t i) { out.push_back(i); });
    return out;
}

TEST(Doorbells, a_rung_doorbell_is_taken_once_by_its_index) {
    auto d = std::make_unique<Doorbells>();
    ring_doorbell(*d, 0);
    ring_doorbell(*d, 4097);
    ring_doorbell(*d, kDoorbellBits - 1);
    ring_doorbell(*d, 4097);  // twice before a take: one doorbell
    EXPECT_EQ(take_all(*d), (std::vector<std::uint32_t>{0, 4097, kDoorbellBits - 1}));
    EXPECT_TRUE(take_all(*d).empty());
}

TEST(Doorbells, the_context_layout_holds_the_events_ring_then_aligned_doorbells) {
    const ContextLayout l = context_layout(kAsyncCapacity);
    EXPECT_EQ(l.events, 0u);
    EXPECT_GE(l.doorbells, ring_bytes<AsyncEvent>(kAsyncCapacity));
    EXPECT_EQ(l.doorbells % kRingCacheLine, 0u);
    EXPECT_GE(l.bytes, l.doorbells + sizeof(Doorbells));
    EXPECT_EQ(l.bytes % kPageSize, 0u);
}

// Whatever a client writes there, a take reads the area once, yields indices within it and
// leaves it empty.
TEST(Doorbells, a_hostile_area_costs_at_most_one_scan) {
    auto d = std::make_unique<Doorbells>();
    d->summary = ~std::uint64_t{0};
    for (auto& w : d->pad) w = 0xff;
    for (auto& w : d->bits) w = ~std::uint64_t{0};
    std::uint32_t n = 0;
    bool in_range = true;
    EXPECT_EQ(take_doorbells(*d,
                             [&](std::uint32_t i) {
                                 in_range &= i < kDoorbellBits;
                                 ++n;
                             }),
              kDoorbellBits);
    EXPECT_EQ(n, kDoorbellBits);
    EXPECT_TRUE(in_range);
    EXPECT_TRUE(take_all(*d).empty());
    // Bits without their summary bit wait for it; a summary bit without bits costs a load.
    d->bits[7] = 1;
    EXPECT_TRUE(take_all(*d).empty());
    d->summary = std::uint64_t{1} << (7 / kDoorbellGroup);
    EXPECT_EQ(take_all(*d), std::vector<std::uint32_t>{7 * 64});
    d->summary = std::uint64_t{1} << 63;
    EXPECT_TRUE(take_all(*d).empty());
}

TEST(Doorbells, an_out_of_range_index_rings_within_the_area) {
    auto d = std::make_unique<Doorbells>();
    ring_doorbell(*d, kDoorbellBits + 5);
    EXPECT_EQ(take_all(*d), std::vector<std::uint32_t>{5});
}

// Several client threads ring while the daemon takes: every ring is taken, none twice per
// ring round.
TEST(Doorbells, rings_racing_takes_are_never_lost) {
    auto d = std::make_unique<Doorbells>();
    constexpr std::uint32_t kThreads = 3, kPerThread = 4000;
    std::atomic<std::uint32_t> done{0};
    std::vector<std::atomic<std::uint32_t>> rung(kDoorbellBits), taken(kDoorbellBits);
    std::vector<std::thread> clients;
    for (std::uint32_t t = 0; t < kThreads; ++t)
        clients.emplace_back([&, t] {
            for (std::uint32_t i = 0; i < kPerThread; ++i) {
                const std::uint32_t index = (t * 5003 + i * 7919) % kDoorbellBits;
                rung[index].fetch_add(1);
                ring_doorbell(*d, index);
            }
            done.fetch_add(1);
        });
    // A ring after the last take would be lost: take until the clients are done, then once
    // more.
    while (done.load() < kThreads) take_doorbells(*d, [&](std::uint32_t i) { taken[i]++; });
    take_doorbells(*d, [&](std::uint32_t i) { taken[i]++; });
    for (auto& c : clients) c.join();
    for (std::uint32_t i = 0; i < kDoorbellBits; ++i) {
        if (rung[i].load() == 0) {
            EXPECT_EQ(taken[i].load(), 0u) << i;
        } else {
            EXPECT_GE(taken[i].load(), 1u) << i;
            EXPECT_LE(taken[i].load(), rung[i].load()) << i;
        }
    }
}

// The sleep handshake of QpControl::sleeping, on a real send ring: the daemon stores
// `sleeping`, fences, reads the producer index; the client pushes (stores the index), fences,
// reads `sleeping`. In every round at least one of them sees the other: the daemon stays awake
// or the client rings the doorbell.
TEST(Doorbells, a_post_racing_the_sleep_is_seen_by_one_side) {
    constexpr std::uint32_t kRounds = 20'000;
    alignas(64) static std::byte mem[ring_bytes<std::uint64_t>(64)];
    auto producer = RingProducer<std::uint64_t>::init(mem, 64);
    ASSERT_TRUE(producer);
    auto consumer = RingConsumer<std::uint64_t>::attach(mem);
    ASSERT_TRUE(consumer);
    QpControl control{};
    std::atomic<std::uint32_t> round{0}, posted{0}, checked{0};
    std::uint32_t missed = 0;
    std::thread client([&] {
        for (std::uint32_t r = 1; r <= kRounds; ++r) {
            while (round.load(std::memory_order_acquire) != r) {
            }
            producer->try_push(r);
            std::atomic_thread_fence(std::memory_order_seq_cst);
            const bool rang =
                std::atomic_ref<std::uint32_t>(control.sleeping).load(std::memory_order_relaxed);
            posted.store(rang ? 2 * r + 1 : 2 * r, std::memory_order_release);
        }
    });
    for (std::uint32_t r = 1; r <= kRounds; ++r) {
        std::atomic_ref<std::uint32_t>(control.sleeping).store(0, std::memory_order_relaxed);
        round.store(r, std::memory_order_release);
        // The daemon goes to sleep while the client posts.
        std::atomic_ref<std::uint32_t>(control.sleeping).store(1, std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_seq_cst);
        const bool saw_wqe = consumer->size() != 0;
        std::uint32_t p;
        while ((p = posted.load(std::memory_order_acquire)) / 2 != r) {
        }
        const bool rang = (p & 1) != 0;
        if (!saw_wqe && !rang) ++missed;
        std::uint64_t v;
        while (!consumer->try_pop(v)) {
        }
        checked.fetch_add(1);
    }
    client.join();
    EXPECT_EQ(missed, 0u);
}

}  // namespace
}  // namespace snic::shm
