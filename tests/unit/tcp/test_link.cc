// Two engines on a fake link: handshakes (ordinary and simultaneous), orderly and
// simultaneous close, and randomised transfers through seeded loss, duplication,
// reordering and corruption, checking every byte delivered exactly once and in order.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "tests/unit/tcp/tcp_harness.h"

namespace snic::tcp {
namespace {

using test::Bytes;
using test::ep;
using test::LinkFaults;
using test::TcpPair;

TcpConfig cfg_a() {
    return test::base_config(ep(1, 40000), ep(2, 9999));
}
TcpConfig cfg_b() {
    return test::base_config(ep(2, 9999), ep(1, 40000));
}

bool both(TcpPair& p, TcpState s) {
    return p.a.conn.state() == s && p.b.conn.state() == s;
}

TEST(TcpLink, three_way_handshake_reaches_established) {
    TcpPair p(cfg_a(), cfg_b());
    p.a.conn.open_active(p.now);
    ASSERT_TRUE(p.run_until([&] { return both(p, TcpState::established); }, 5 * kSec));
    EXPECT_TRUE(p.a.saw(EventKind::connected));
    EXPECT_TRUE(p.b.saw(EventKind::connected));
    EXPECT_EQ(p.sent, 3u);
    const TcpInfo i = p.a.conn.info();
    EXPECT_TRUE(i.sack && i.timestamps);
    EXPECT_EQ(i.mss, 1460u - 12u);  // timestamps take 12 bytes of each segment
    EXPECT_EQ(i.snd_wscale, 3);     // 256 KiB needs a shift of 3
    EXPECT_GT(i.srtt, 0u);          // the SYN was timed
}

TEST(TcpLink, simultaneous_open_reaches_established) {
    TcpPair p(cfg_a(), cfg_b());
    p.b_listens = false;
    p.a.conn.open_active(p.now);
    p.b.conn.open_active(p.now);
    ASSERT_TRUE(p.run_until([&] { return both(p, TcpState::established); }, 5 * kSec));
    EXPECT_EQ(p.a.count(EventKind::connected), 1u);
    EXPECT_EQ(p.b.count(EventKind::connected), 1u);
    // Both went through SYN-RECEIVED (RFC 9293 figure 8) and can now carry data.
    const Bytes msg{'h', 'i'};
    ASSERT_TRUE(p.a.conn.send(std::as_bytes(std::span(msg))));
    p.a.conn.close();
    ASSERT_TRUE(p.run_until([&] { return p.b.saw(EventKind::peer_closed); }, 5 * kSec));
    EXPECT_EQ(p.b.stream, msg);
}

TEST(TcpLink, orderly_close_active_side_waits_in_time_wait) {
    TcpPair p(cfg_a(), cfg_b());
    p.a.conn.open_active(p.now);
    ASSERT_TRUE(p.run_until([&] { return both(p, TcpState::established); }, 5 * kSec));
    p.a.conn.close();
    ASSERT_TRUE(p.run_until([&] { return p.a.conn.state() == TcpState::fin_wait_2; }, 5 * kSec));
    EXPECT_EQ(p.b.conn.state(), TcpState::close_wait);
    EXPECT_TRUE(p.b.saw(EventKind::peer_closed));
    p.b.conn.close();
    ASSERT_TRUE(p.run_until([&] { return p.b.conn.state() == TcpState::closed; }, 5 * kSec));
    EXPECT_EQ(p.a.conn.state(), TcpState::time_wait);
    EXPECT_TRUE(p.b.saw(EventKind::closed));
}

TEST(TcpLink, simultaneous_close_goes_through_closing) {
    TcpPair p(cfg_a(), cfg_b());
    p.a.conn.open_active(p.now);
    ASSERT_TRUE(p.run_until([&] { return both(p, TcpState::established); }, 5 * kSec));
    p.a.conn.close();
    p.b.conn.close();
    std::vector<TcpState> seen_a;
    p.after_step = [&] {
        if (seen_a.empty() || seen_a.back() != p.a.conn.state()) seen_a.push_back(p.a.conn.state());
    };
    ASSERT_TRUE(p.run_until([&] { return both(p, TcpState::time_wait); }, 5 * kSec));
    EXPECT_NE(std::find(seen_a.begin(), seen_a.end(), TcpState::closing), seen_a.end());
    ASSERT_TRUE(p.run_until([&] { return both(p, TcpState::closed); }, 200 * kSec));
    EXPECT_TRUE(p.a.saw(EventKind::closed) && p.b.saw(EventKind::closed));
}

// A transfer of `total` bytes each way in records of random sizes through `f`.
struct Transfer {
    TcpPair& p;
    std::mt19937 rng;
    Bytes sent_a, sent_b;
    std::uint64_t target;
    std::uint32_t max_record;

    Transfer(TcpPair& pair, std::uint32_t seed, std::uint64_t total, std::uint32_t max_rec)
        : p(pair), rng(seed), target(total), max_record(max_rec) {}

    void feed(test::Node& n, Bytes& sent) {
        while (sent.size() < target) {
            std::uniform_int_distribution<std::uint32_t> len(1, max_record);
            Bytes r(std::min<std::uint64_t>(len(rng), target - sent.size()));
            for (auto& x : r) x = static_cast<std::uint8_t>(rng());
            if (!n.conn.send(std::as_bytes(std::span(r)))) return;
            sent.insert(sent.end(), r.begin(), r.end());
        }
    }
    // Both ways at once; then both close; every byte must arrive exactly once, in order.
    void run() {
        p.a.conn.open_active(p.now);
        p.after_step = [&] {
            if (p.a.conn.state() == TcpState::established ||
                p.a.conn.state() == TcpState::close_wait)
                feed(p.a, sent_a);
            if (p.b.conn.state() == TcpState::established ||
                p.b.conn.state() == TcpState::close_wait)
                feed(p.b, sent_b);
            if (sent_a.size() == target) p.a.conn.close();
            if (sent_b.size() == target) p.b.conn.close();
        };
        ASSERT_TRUE(p.run_until(
            [&] {
                const bool a_done =
                    p.a.conn.state() == TcpState::time_wait || p.a.conn.state() == TcpState::closed;
                return p.a.saw(EventKind::peer_closed) && p.b.saw(EventKind::peer_closed) &&
                       a_done && p.b.conn.state() == TcpState::closed;
            },
            3600 * kSec))
            << "a " << state_name(p.a.conn.state()) << " b " << state_name(p.b.conn.state())
            << " a got " << p.a.stream.size() << " b got " << p.b.stream.size() << " a reset "
            << p.a.saw(EventKind::reset) << " a timed out " << p.a.saw(EventKind::timed_out)
            << " b reset " << p.b.saw(EventKind::reset) << " b timed out "
            << p.b.saw(EventKind::timed_out) << " at " << p.now / kMs << " ms";
        EXPECT_EQ(p.b.stream.size(), sent_a.size());
        EXPECT_TRUE(p.b.stream == sent_a);
        EXPECT_EQ(p.a.stream.size(), sent_b.size());
        EXPECT_TRUE(p.a.stream == sent_b);
        EXPECT_FALSE(p.a.saw(EventKind::reset) || p.b.saw(EventKind::reset));
        EXPECT_FALSE(p.a.saw(EventKind::timed_out) || p.b.saw(EventKind::timed_out));
    }
};

TEST(TcpLink, clean_transfer_is_byte_exact_and_never_retransmits) {
    TcpPair p(cfg_a(), cfg_b());
    Transfer t(p, 7, 2'000'000, 5000);
    t.run();
    EXPECT_EQ(p.a.conn.counters().retransmits.get(), 0u);
    EXPECT_EQ(p.b.conn.counters().retransmits.get(), 0u);
    EXPECT_EQ(p.a.conn.counters().bytes_acked.get(), 2'000'000u);
    EXPECT_EQ(p.b.conn.counters().bytes_received.get(), 2'000'000u);
}

TEST(TcpLink, ipv6_connection_carries_data_with_the_ipv6_pseudo_header) {
    IpAddr a6, b6;
    a6.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    b6.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1};
    TcpConfig a = test::base_config(Endpoint{a6, 40000}, Endpoint{b6, 9999});
    TcpConfig b = test::base_config(Endpoint{b6, 9999}, Endpoint{a6, 40000});
    TcpPair p(a, b, LinkFaults{0.02, 0, 0, 0.02}, 3);
    Transfer t(p, 5, 200'000, 3000);
    t.run();
    EXPECT_EQ(p.a.conn.mss(), 1500u - 40 - 20 - 12);  // IPv6 header, TCP header, timestamps
}

struct LossyCase {
    bool sack, timestamps;
    LinkFaults faults;
};

void lossy_transfers(const LossyCase& c, std::uint32_t seeds, std::uint64_t bytes) {
    for (std::uint32_t seed = 1; seed <= seeds; ++seed) {
        TcpConfig a = cfg_a(), b = cfg_b();
        a.sack = b.sack = c.sack;
        a.timestamps = b.timestamps = c.timestamps;
        a.isn_key[0] = b.isn_key[0] = static_cast<std::uint8_t>(seed);
        TcpPair p(a, b, c.faults, seed);
        Transfer t(p, seed * 31, bytes, 4000);
        t.run();
        EXPECT_GT(p.a.conn.counters().retransmits.get() + p.b.conn.counters().retransmits.get(),
                  0u);
        if (c.faults.corrupt > 0) {
            EXPECT_GT(p.rejected, 0u);
        }
        if (::testing::Test::HasFailure()) {
            ADD_FAILURE() << "seed " << seed;
            return;
        }
    }
}

TEST(TcpLink, lossy_link_delivers_every_byte_once_with_sack_and_timestamps) {
    lossy_transfers({true, true, {0.03, 0.02, 0.05, 0.01}}, 40, 300'000);
}

TEST(TcpLink, lossy_link_delivers_every_byte_once_newreno_without_options) {
    lossy_transfers({false, false, {0.03, 0.02, 0.05, 0.01}}, 40, 300'000);
}

TEST(TcpLink, heavy_loss_and_reordering_still_deliver) {
    lossy_transfers({true, true, {0.15, 0.05, 0.2, 0.03}}, 20, 100'000);
}

// A hop of MTU 1280 on the path, found mid-transfer: each side's first full-size segments
// are dropped there, the router's ICMP lowers the MSS (RFC 1191), and everything arrives,
// byte-exact, with no timeout and no fast retransmit.
void transfer_through_a_smaller_hop(LinkFaults f, std::uint32_t seed, bool expect_clean) {
    TcpConfig a = cfg_a(), b = cfg_b();
    a.isn_key[0] = b.isn_key[0] = static_cast<std::uint8_t>(seed);
    TcpPair p(a, b, f, seed);
    p.hop_mtu = 1280;
    std::uint32_t icmps = 0;
    p.on_too_big = [&](test::Node& n, const Bytes& s) {
        test::Parsed x = test::parse_copy(s, n.cfg.local, n.cfg.remote);
        ASSERT_EQ(x.err, ParseError::none);
        if (n.conn.sent_unacked(x.seg.seq) && n.conn.on_path_mtu(1280, p.now)) ++icmps;
    };
    Transfer t(p, seed * 17, 400'000, 6000);
    t.run();
    EXPECT_GT(p.too_big, 0u);
    EXPECT_EQ(icmps, 2u);  // one lowering for each direction
    EXPECT_EQ(p.a.conn.mss(), 1280u - 40 - 12);
    EXPECT_EQ(p.b.conn.mss(), 1280u - 40 - 12);
    EXPECT_EQ(p.a.conn.counters().pmtu_lowered.get(), 1u);
    if (expect_clean) {
        for (const test::Node* n : {&p.a, &p.b}) {
            EXPECT_EQ(n->conn.counters().timeouts.get(), 0u);
            EXPECT_EQ(n->conn.counters().fast_retransmits.get(), 0u);
        }
    }
}

TEST(TcpLink, a_smaller_hop_found_mid_transfer_lowers_the_mss_and_loses_nothing) {
    transfer_through_a_smaller_hop(LinkFaults{}, 1, true);
}

TEST(TcpLink, a_smaller_hop_on_a_lossy_link_still_delivers_every_byte_once) {
    for (std::uint32_t seed = 1; seed <= 20 && !::testing::Test::HasFailure(); ++seed) {
        transfer_through_a_smaller_hop(LinkFaults{0.03, 0.02, 0.05, 0.01}, seed, false);
        if (::testing::Test::HasFailure()) ADD_FAILURE() << "seed " << seed;
    }
}

}  // namespace
}  // namespace snic::tcp
