// ArpCache: learning, expiry, RFC 826 merge (refresh), request pacing and eviction,
// driven by a fake clock (plain integers).
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "daemon/port/arp_cache.h"
#include "proto/net/addr.h"

namespace snic::daemon {
namespace {

using net::Ipv4Addr;
using net::MacAddr;

constexpr std::uint64_t kLifetime = 60'000;
constexpr std::uint64_t kRetry = 1'000;
constexpr std::uint64_t kT0 = 5'000'000;  // a clock that has been running a while

constexpr Ipv4Addr ip(std::uint8_t a, std::uint8_t b, std::uint8_t c, std::uint8_t d) {
    return Ipv4Addr{std::uint32_t{a} << 24 | std::uint32_t{b} << 16 | std::uint32_t{c} << 8 | d};
}

constexpr MacAddr mac(std::uint8_t last) {
    return MacAddr{{0x02, 0x00, 0x00, 0x00, 0x00, last}};
}

constexpr Ipv4Addr kA = ip(10, 0, 0, 1);
constexpr Ipv4Addr kB = ip(10, 0, 0, 2);

TEST(ArpCache, lookup_misses_unknown_address) {
    const ArpCache cache(64, kLifetime, kRetry);
    EXPECT_EQ(cache.lookup(kA, kT0), std::nullopt);
    EXPECT_EQ(cache.lookup(Ipv4Addr{0}, 0), std::nullopt);
    EXPECT_EQ(cache.valid_entries(kT0), 0u);
}

TEST(ArpCache, learnt_address_is_found) {
    ArpCache cache(64, kLifetime, kRetry);
    cache.learn(kA, mac(1), kT0);
    EXPECT_EQ(cache.lookup(kA, kT0), mac(1));
    EXPECT_EQ(cache.lookup(kA, kT0 + 1), mac(1));
    EXPECT_EQ(cache.lookup(kB, kT0), std::nullopt);
    EXPECT_EQ(cache.valid_entries(kT0), 1u);
}

TEST(ArpCache, learning_again_replaces_the_mac) {
    ArpCache cache(64, kLifetime, kRetry);
    cache.learn(kA, mac(1), kT0);
    cache.learn(kA, mac(9), kT0 + 10);
    EXPECT_EQ(cache.lookup(kA, kT0 + 10), mac(9));
    EXPECT_EQ(cache.valid_entries(kT0 + 10), 1u);  // one entry per address
}

TEST(ArpCache, entry_expires_at_exactly_lifetime) {
    ArpCache cache(64, kLifetime, kRetry);
    cache.learn(kA, mac(1), kT0);
    EXPECT_EQ(cache.lookup(kA, kT0 + kLifetime - 1), mac(1));
    EXPECT_EQ(cache.valid_entries(kT0 + kLifetime - 1), 1u);
    EXPECT_EQ(cache.lookup(kA, kT0 + kLifetime), std::nullopt);
    EXPECT_EQ(cache.valid_entries(kT0 + kLifetime), 0u);
    EXPECT_EQ(cache.lookup(kA, kT0 + 10 * kLifetime), std::nullopt);
}

TEST(ArpCache, learning_again_extends_lifetime) {
    ArpCache cache(64, kLifetime, kRetry);
    cache.learn(kA, mac(1), kT0);
    cache.learn(kA, mac(1), kT0 + 100);
    EXPECT_EQ(cache.lookup(kA, kT0 + kLifetime), mac(1));
    EXPECT_EQ(cache.lookup(kA, kT0 + 100 + kLifetime - 1), mac(1));
    EXPECT_EQ(cache.lookup(kA, kT0 + 100 + kLifetime), std::nullopt);
}

TEST(ArpCache, expired_entry_can_be_learnt_again) {
    ArpCache cache(64, kLifetime, kRetry);
    cache.learn(kA, mac(1), kT0);
    const std::uint64_t later = kT0 + 2 * kLifetime;
    ASSERT_EQ(cache.lookup(kA, later), std::nullopt);
    cache.learn(kA, mac(2), later);
    EXPECT_EQ(cache.lookup(kA, later), mac(2));
}

TEST(ArpCache, refresh_ignores_unknown_address) {
    // RFC 826 merge: traffic not addressed to us only updates what is already cached.
    ArpCache cache(64, kLifetime, kRetry);
    EXPECT_FALSE(cache.refresh(kA, mac(1), kT0));
    EXPECT_EQ(cache.lookup(kA, kT0), std::nullopt);
    EXPECT_EQ(cache.valid_entries(kT0), 0u);
}

TEST(ArpCache, refresh_updates_existing_entry) {
    ArpCache cache(64, kLifetime, kRetry);
    cache.learn(kA, mac(1), kT0);
    EXPECT_TRUE(cache.refresh(kA, mac(7), kT0 + 500));
    EXPECT_EQ(cache.lookup(kA, kT0 + 500), mac(7));
    // The lifetime restarts at the refresh.
    EXPECT_EQ(cache.lookup(kA, kT0 + 500 + kLifetime - 1), mac(7));
    EXPECT_EQ(cache.lookup(kA, kT0 + 500 + kLifetime), std::nullopt);
    // Other addresses are still not cached.
    EXPECT_FALSE(cache.refresh(kB, mac(8), kT0 + 500));
    EXPECT_EQ(cache.lookup(kB, kT0 + 500), std::nullopt);
    EXPECT_EQ(cache.valid_entries(kT0 + 500), 1u);
}

TEST(ArpCache, first_request_goes_out_at_once) {
    ArpCache cache(64, kLifetime, kRetry);
    EXPECT_TRUE(cache.should_request(kA, kT0));
}

TEST(ArpCache, requests_are_paced_by_retry) {
    ArpCache cache(64, kLifetime, kRetry);
    EXPECT_TRUE(cache.should_request(kA, kT0));
    EXPECT_FALSE(cache.should_request(kA, kT0));
    EXPECT_FALSE(cache.should_request(kA, kT0 + 1));
    EXPECT_FALSE(cache.should_request(kA, kT0 + kRetry - 1));
    EXPECT_TRUE(cache.should_request(kA, kT0 + kRetry));
    EXPECT_FALSE(cache.should_request(kA, kT0 + kRetry + 1));
    EXPECT_FALSE(cache.should_request(kA, kT0 + 2 * kRetry - 1));
    EXPECT_TRUE(cache.should_request(kA, kT0 + 2 * kRetry + 500));
}

TEST(ArpCache, pacing_is_per_address) {
    ArpCache cache(64, kLifetime, kRetry);
    EXPECT_TRUE(cache.should_request(kA, kT0));
    EXPECT_TRUE(cache.should_request(kB, kT0 + 1));
    EXPECT_FALSE(cache.should_request(kA, kT0 + 2));
    EXPECT_FALSE(cache.should_request(kB, kT0 + 2));
}

TEST(ArpCache, pending_request_is_not_a_resolved_entry) {
    ArpCache cache(64, kLifetime, kRetry);
    ASSERT_TRUE(cache.should_request(kA, kT0));
    EXPECT_EQ(cache.lookup(kA, kT0), std::nullopt);
    EXPECT_EQ(cache.valid_entries(kT0), 0u);
}

TEST(ArpCache, no_request_when_resolved) {
    ArpCache cache(64, kLifetime, kRetry);
    cache.learn(kA, mac(1), kT0);
    EXPECT_FALSE(cache.should_request(kA, kT0));
    EXPECT_FALSE(cache.should_request(kA, kT0 + kRetry));
    EXPECT_FALSE(cache.should_request(kA, kT0 + kLifetime - 1));
    EXPECT_EQ(cache.lookup(kA, kT0 + kLifetime - 1), mac(1));  // asking did not disturb it
}

TEST(ArpCache, reply_to_a_request_resolves_it) {
    ArpCache cache(64, kLifetime, kRetry);
    ASSERT_TRUE(cache.should_request(kA, kT0));
    cache.learn(kA, mac(1), kT0 + 3);
    EXPECT_EQ(cache.lookup(kA, kT0 + 3), mac(1));
    EXPECT_FALSE(cache.should_request(kA, kT0 + kRetry + 3));
    EXPECT_EQ(cache.valid_entries(kT0 + 3), 1u);
}

TEST(ArpCache, refresh_of_a_pending_address_resolves_it) {
    // An address being resolved is known to the cache: another host's ARP about it
    // (a gratuitous ARP, say) answers the question.
    ArpCache cache(64, kLifetime, kRetry);
    ASSERT_TRUE(cache.should_request(kA, kT0));
    EXPECT_TRUE(cache.refresh(kA, mac(5), kT0 + 1));
    EXPECT_EQ(cache.lookup(kA, kT0 + 1), mac(5));
}

TEST(ArpCache, expired_entry_is_requested_again) {
    ArpCache cache(64, kLifetime, kRetry);
    ASSERT_TRUE(cache.should_request(kA, kT0));
    cache.learn(kA, mac(1), kT0 + 2);
    const std::uint64_t expired = kT0 + 2 + kLifetime;
    ASSERT_EQ(cache.lookup(kA, expired), std::nullopt);
    EXPECT_TRUE(cache.should_request(kA, expired));
    EXPECT_FALSE(cache.should_request(kA, expired + 1));  // and paced again
    EXPECT_TRUE(cache.should_request(kA, expired + kRetry));
}

TEST(ArpCache, expired_entry_never_requested_may_be_requested_at_once) {
    // "No request went out within retry": none ever did for an address learnt from a
    // request addressed to us, so once that entry expires a request may go out, whatever
    // the clock reads (here a clock that starts at 0 and a lifetime shorter than retry).
    ArpCache cache(16, /*lifetime=*/5, /*retry=*/10);
    cache.learn(kA, mac(1), 0);
    ASSERT_EQ(cache.lookup(kA, 5), std::nullopt);
    EXPECT_TRUE(cache.should_request(kA, 5));
}

TEST(ArpCache, first_request_at_time_zero) {
    ArpCache cache(16, kLifetime, kRetry);
    EXPECT_TRUE(cache.should_request(kA, 0));
    EXPECT_FALSE(cache.should_request(kA, kRetry - 1));
    EXPECT_TRUE(cache.should_request(kA, kRetry));
}

// With a capacity of 8 (the least; also the probe window) every address competes for the
// same eight entries, so eviction order is observable.
constexpr std::size_t kSmall = 8;

TEST(ArpCache, holds_as_many_addresses_as_its_capacity) {
    ArpCache cache(kSmall, kLifetime, kRetry);
    for (std::uint8_t i = 0; i < kSmall; ++i) cache.learn(ip(10, 0, 0, i), mac(i), kT0);
    EXPECT_EQ(cache.valid_entries(kT0), kSmall);
    for (std::uint8_t i = 0; i < kSmall; ++i) EXPECT_EQ(cache.lookup(ip(10, 0, 0, i), kT0), mac(i));
}

TEST(ArpCache, capacity_is_rounded_up) {
    // Asked for 5, it holds at least 5 (rounded up to a power of two, at least the probe window).
    ArpCache cache(5, kLifetime, kRetry);
    for (std::uint8_t i = 0; i < 5; ++i) cache.learn(ip(10, 0, 1, i), mac(i), kT0);
    EXPECT_EQ(cache.valid_entries(kT0), 5u);
    for (std::uint8_t i = 0; i < 5; ++i) EXPECT_EQ(cache.lookup(ip(10, 0, 1, i), kT0), mac(i));
}

TEST(ArpCache, full_cache_evicts_expired_entries_before_valid_ones) {
    ArpCache cache(kSmall, /*lifetime=*/1000, kRetry);
    // Four entries learnt early (expire at kT0 + 1000), four later (expire at kT0 + 1500).
    for (std::uint8_t i = 0; i < 4; ++i) cache.learn(ip(10, 0, 0, i), mac(i), kT0);
    for (std::uint8_t i = 4; i < 8; ++i) cache.learn(ip(10, 0, 0, i), mac(i), kT0 + 500);
    const std::uint64_t now = kT0 + 1200;
    ASSERT_EQ(cache.valid_entries(now), 4u);
    // Four new addresses take the places of the four expired ones.
    for (std::uint8_t i = 0; i < 4; ++i) cache.learn(ip(10, 0, 2, i), mac(100 + i), now);
    for (std::uint8_t i = 4; i < 8; ++i)
        EXPECT_EQ(cache.lookup(ip(10, 0, 0, i), now), mac(i)) << int{i};
    for (std::uint8_t i = 0; i < 4; ++i)
        EXPECT_EQ(cache.lookup(ip(10, 0, 2, i), now), mac(100 + i)) << int{i};
    EXPECT_EQ(cache.valid_entries(now), 8u);
}

TEST(ArpCache, full_cache_of_valid_entries_evicts_the_one_expiring_first) {
    ArpCache cache(kSmall, kLifetime, kRetry);
    // Learnt in a scrambled order so that the oldest is not simply the first slot.
    const std::uint8_t order[kSmall] = {5, 2, 7, 0, 3, 6, 1, 4};
    for (std::uint8_t k = 0; k < kSmall; ++k) {
        const std::uint8_t i = order[k];
        cache.learn(ip(10, 0, 0, i), mac(i), kT0 + k);  // order[0] expires first
    }
    const std::uint64_t now = kT0 + 100;
    cache.learn(ip(10, 0, 3, 3), mac(33), now);
    EXPECT_EQ(cache.lookup(ip(10, 0, 3, 3), now), mac(33));
    EXPECT_EQ(cache.lookup(ip(10, 0, 0, order[0]), now), std::nullopt);
    for (std::uint8_t k = 1; k < kSmall; ++k) {
        EXPECT_EQ(cache.lookup(ip(10, 0, 0, order[k]), now), mac(order[k])) << int{order[k]};
    }
    EXPECT_EQ(cache.valid_entries(now), kSmall);
}

TEST(ArpCache, full_cache_evicts_a_pending_request_before_a_valid_entry) {
    ArpCache cache(kSmall, kLifetime, kRetry);
    for (std::uint8_t i = 0; i < 7; ++i) cache.learn(ip(10, 0, 0, i), mac(i), kT0);
    ASSERT_TRUE(cache.should_request(ip(10, 0, 0, 7), kT0));  // the eighth entry, pending
    cache.learn(ip(10, 0, 4, 4), mac(44), kT0 + 1);
    for (std::uint8_t i = 0; i < 7; ++i) EXPECT_EQ(cache.lookup(ip(10, 0, 0, i), kT0 + 1), mac(i));
    EXPECT_EQ(cache.lookup(ip(10, 0, 4, 4), kT0 + 1), mac(44));
}

TEST(ArpCache, learning_a_known_address_in_a_full_cache_evicts_nothing) {
    ArpCache cache(kSmall, kLifetime, kRetry);
    for (std::uint8_t i = 0; i < kSmall; ++i) cache.learn(ip(10, 0, 0, i), mac(i), kT0 + i);
    cache.learn(ip(10, 0, 0, 6), mac(66), kT0 + 50);
    for (std::uint8_t i = 0; i < kSmall; ++i) {
        EXPECT_EQ(cache.lookup(ip(10, 0, 0, i), kT0 + 50), i == 6 ? mac(66) : mac(i));
    }
}

TEST(ArpCache, never_holds_more_valid_entries_than_its_size) {
    ArpCache cache(64, kLifetime, kRetry);
    for (std::uint32_t i = 0; i < 20'000; ++i) {
        const Ipv4Addr a{0x0a000000u + i * 7919u};
        cache.learn(a, mac(static_cast<std::uint8_t>(i)), kT0 + i);
        // The address just learnt is always found.
        ASSERT_EQ(cache.lookup(a, kT0 + i), mac(static_cast<std::uint8_t>(i))) << i;
    }
    EXPECT_LE(cache.valid_entries(kT0 + 20'000), 64u);
    EXPECT_GT(cache.valid_entries(kT0 + 20'000), 0u);
}

TEST(ArpCache, holds_a_subnet_of_addresses_at_half_load) {
    // 128 neighbours of one /24 in a cache of 256: every one of them is kept.
    ArpCache cache(256, kLifetime, kRetry);
    for (std::uint32_t i = 1; i <= 128; ++i) {
        cache.learn(ip(192, 168, 7, static_cast<std::uint8_t>(i)),
                    mac(static_cast<std::uint8_t>(i)), kT0);
    }
    EXPECT_EQ(cache.valid_entries(kT0), 128u);
    for (std::uint32_t i = 1; i <= 128; ++i) {
        EXPECT_EQ(cache.lookup(ip(192, 168, 7, static_cast<std::uint8_t>(i)), kT0),
                  mac(static_cast<std::uint8_t>(i)))
            << i;
    }
}

TEST(ArpCache, many_addresses_expire_together) {
    ArpCache cache(1024, kLifetime, kRetry);
    for (std::uint32_t i = 0; i < 300; ++i) cache.learn(Ipv4Addr{0xac100000u + i}, mac(1), kT0);
    const std::size_t held = cache.valid_entries(kT0);
    EXPECT_GE(held, 290u);  // a hash table with bounded probing may lose a few, not many
    EXPECT_EQ(cache.valid_entries(kT0 + kLifetime), 0u);
}

}  // namespace
}  // namespace snic::daemon

namespace snic::daemon {
namespace {

TEST(ArpCacheStale, expired_entry_keeps_its_last_mac_while_it_is_resolved_again) {
    ArpCache c(16, /*lifetime=*/10, /*retry=*/100);
    const net::Ipv4Addr a{0xc6120001};
    const net::MacAddr m{{0x02, 1, 2, 3, 4, 5}};
    EXPECT_FALSE(c.last_known(a));
    c.learn(a, m, 0);
    EXPECT_FALSE(c.lookup(a, 10));         // expired
    EXPECT_TRUE(c.should_request(a, 10));  // asked again
    ASSERT_TRUE(c.last_known(a));          // and still known meanwhile
    EXPECT_EQ(*c.last_known(a), m);
    EXPECT_FALSE(c.should_request(a, 20));  // paced
    EXPECT_EQ(*c.last_known(a), m);
}

TEST(ArpCacheStale, never_resolved_address_has_no_last_mac) {
    ArpCache c(16, 10, 100);
    const net::Ipv4Addr a{0xc6120002};
    EXPECT_TRUE(c.should_request(a, 0));
    EXPECT_FALSE(c.last_known(a));
}

}  // namespace
}  // namespace snic::daemon

namespace snic::daemon {
namespace {

// A connected QP keeps its peer's MAC (MacMemo) while the cache's generation stands and the
// entry has not expired: the generation must move whenever the answer could differ.
TEST(ArpCacheGeneration, moves_when_a_mac_changes_or_an_entry_is_taken_not_when_one_is_refreshed) {
    ArpCache c(64, kLifetime, kRetry);
    c.learn(kA, mac(1), kT0);
    const auto r = c.lookup_until(kA, kT0 + 5);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->mac, mac(1));
    EXPECT_EQ(r->expires, kT0 + kLifetime);
    EXPECT_FALSE(c.lookup_until(kA, kT0 + kLifetime));  // expired
    EXPECT_FALSE(c.lookup_until(kB, kT0));

    std::uint64_t g = c.generation();
    c.refresh(kA, mac(1), kT0 + 10);  // the same MAC, a later expiry
    c.learn(kA, mac(1), kT0 + 20);
    EXPECT_EQ(c.generation(), g);
    EXPECT_EQ(c.lookup_until(kA, kT0 + 20)->expires, kT0 + 20 + kLifetime);

    c.refresh(kA, mac(2), kT0 + 30);  // the peer moved
    EXPECT_NE(c.generation(), g);
    g = c.generation();
    c.learn(kA, mac(3), kT0 + 40);
    EXPECT_NE(c.generation(), g);
    g = c.generation();
    c.learn(kB, mac(4), kT0 + 50);  // a new entry
    EXPECT_NE(c.generation(), g);
    g = c.generation();
    EXPECT_FALSE(c.refresh(ip(10, 0, 0, 3), mac(5), kT0 + 60));  // unknown: nothing changes
    EXPECT_EQ(c.generation(), g);
}

TEST(ArpCacheGeneration, moves_when_an_entry_is_evicted_for_another_address) {
    ArpCache c(8, kLifetime, kRetry);  // one probe window: every address competes
    for (std::uint8_t i = 1; i <= 8; ++i) c.learn(ip(10, 0, 1, i), mac(i), kT0 + i);
    const std::uint64_t g = c.generation();
    ASSERT_TRUE(c.lookup(ip(10, 0, 1, 1), kT0 + 9));
    c.learn(ip(10, 0, 1, 9), mac(9), kT0 + 9);  // takes the entry that expires first
    EXPECT_NE(c.generation(), g);
    EXPECT_FALSE(c.lookup(ip(10, 0, 1, 1), kT0 + 9));
}

}  // namespace
}  // namespace snic::daemon
