// QP1's outbound queue (daemon/roce/gsi.h): a MAD whose peer is not resolved yet is held
// aside, and the MADs of other peers go on past it.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "daemon/roce/gsi.h"

namespace snic::daemon {
namespace {

constexpr std::uint64_t kHz = 1'000'000'000;  // poll()'s clock in ns
constexpr std::uint32_t kLive = 0xc6120002, kDead = 0xc6120063;

// A wire that takes MADs to resolved peers only, and records what it took.
struct Wire {
    std::set<std::uint32_t> resolved{kLive};
    std::vector<std::pair<std::uint32_t, std::uint8_t>> sent;  // (ip, the MAD's first byte)
    static bool send(void* ctx, std::uint32_t ip, std::uint32_t, std::uint32_t,
                     std::span<const std::uint8_t> payload) {
        auto* w = static_cast<Wire*>(ctx);
        if (w->resolved.count(ip) == 0) return false;
        w->sent.emplace_back(ip, payload[0]);
        return true;
    }
};

GsiMad mad(std::uint32_t ip, std::uint8_t tag) {
    GsiMad m{};
    m.ip = ip;
    m.qpn = 1;
    m.length = 256;
    m.data[0] = tag;
    return m;
}

// The review's case: REQs to an address nothing answers used to hold the queue (each for
// half a second, tried on every poll), and a live peer's REP waited behind them until its
// connection timed out.
TEST(GsiPort, a_mad_to_an_unresolved_peer_does_not_hold_up_another_peers) {
    Wire w;
    GsiPort port(&Wire::send, &w, kHz);
    for (std::uint8_t i = 0; i < 40; ++i) ASSERT_TRUE(port.send(mad(kDead, i)));
    ASSERT_TRUE(port.send(mad(kLive, 100)));
    port.poll(1'000);
    ASSERT_EQ(w.sent.size(), 1u);
    EXPECT_EQ(w.sent[0], std::make_pair(kLive, std::uint8_t{100}));
    // 40 held for the dead peer, 32 kept: the 8 oldest given up at once.
    EXPECT_EQ(port.counters().tx_unsent.get(), 40u - GsiPort::kHeld);
    // Held past kHoldSeconds, the rest are given up (the CM retransmits).
    port.poll(1'000 + static_cast<std::uint64_t>(GsiPort::kHoldSeconds * kHz));
    EXPECT_EQ(port.counters().tx_unsent.get(), 40u);
    EXPECT_EQ(port.counters().tx_mads.get(), 1u);
}

// A peer's MADs keep their order: held ones go first once its MAC is known, and a MAD queued
// for it meanwhile waits behind them; retries are paced (kRetrySeconds), not every poll.
TEST(GsiPort, a_peers_held_mads_go_in_order_once_it_is_resolved) {
    Wire w;
    GsiPort port(&Wire::send, &w, kHz);
    ASSERT_TRUE(port.send(mad(kDead, 1)));
    ASSERT_TRUE(port.send(mad(kDead, 2)));
    port.poll(1'000);
    EXPECT_TRUE(w.sent.empty());
    w.resolved.insert(kDead);
    ASSERT_TRUE(port.send(mad(kDead, 3)));
    port.poll(2'000);  // before the retry is due: 3 waits behind 1 and 2
    EXPECT_TRUE(w.sent.empty());
    port.poll(1'000 + static_cast<std::uint64_t>(GsiPort::kRetrySeconds * kHz));
    const std::vector<std::pair<std::uint32_t, std::uint8_t>> want = {
        {kDead, 1}, {kDead, 2}, {kDead, 3}};
    EXPECT_EQ(w.sent, want);
    EXPECT_EQ(port.counters().tx_unsent.get(), 0u);
}

}  // namespace
}  // namespace snic::daemon
