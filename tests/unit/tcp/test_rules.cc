// One test per rule, packetdrill-style: a scripted peer (Script, tcp_harness.h) injects
// exact segments and checks the exact segments the engine answers with, on a fake clock.
// Unless a test says otherwise the peer offers only MSS 1460, so the engine's segments
// carry no options and the effective MSS is 1460.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tests/unit/tcp/tcp_harness.h"

namespace snic::tcp {
namespace {

using test::Bytes;
using test::Parsed;
using test::pattern;
using test::Script;
using test::Seg;
using test::send_bytes;

constexpr Seq P = Script::kPeerIss;

TcpOptions all_options(std::uint32_t ts_val = 1000) {
    TcpOptions o;
    o.has_mss = true;
    o.mss = 1460;
    o.has_wscale = true;
    o.wscale = 2;
    o.sack_permitted = true;
    o.has_timestamps = true;
    o.ts_val = ts_val;
    return o;
}

TcpOptions sack_only() {
    TcpOptions o;
    o.has_mss = true;
    o.mss = 1460;
    o.sack_permitted = true;
    return o;
}

// --- opening ---------------------------------------------------------------------------------

TEST(TcpRules, syn_offers_mss_from_path_mtu_wscale_sack_and_timestamps) {
    Script s;
    s.node.conn.open_active(s.now);
    s.poll();
    const Parsed syn = s.one();
    EXPECT_EQ(syn.seg.flags, flag::syn);
    EXPECT_EQ(syn.seg.seq, s.node.conn.iss());
    EXPECT_EQ(syn.seg.opts.mss, 1460);  // 1500 - 20 - 20
    EXPECT_TRUE(syn.seg.opts.has_wscale);
    EXPECT_EQ(syn.seg.opts.wscale, 3);  // 256 KiB window
    EXPECT_TRUE(syn.seg.opts.sack_permitted);
    EXPECT_TRUE(syn.seg.opts.has_timestamps);
    EXPECT_EQ(syn.seg.opts.ts_ecr, 0u);
    EXPECT_EQ(syn.seg.window, 65535);  // a SYN's window is never scaled
    EXPECT_EQ(s.node.conn.state(), TcpState::syn_sent);
}

TEST(TcpRules, syn_ack_completes_active_open_with_ack) {
    Script s;
    s.node.conn.open_active(s.now);
    s.poll();
    const Seq iss = s.one().seg.seq;
    s.inject(s.spec(flag::syn | flag::ack, P, iss + 1));
    const Parsed ack = s.one();
    EXPECT_EQ(ack.seg.flags, flag::ack);
    EXPECT_EQ(ack.seg.seq, iss + 1);
    EXPECT_EQ(ack.seg.ack, P + 1);
    EXPECT_EQ(s.node.conn.state(), TcpState::established);
    EXPECT_TRUE(s.node.saw(EventKind::connected));
    EXPECT_FALSE(s.node.conn.info().sack);  // the peer did not offer it
}

TEST(TcpRules, passive_open_answers_only_the_options_the_syn_offered) {
    Script s;
    s.passive_next = true;
    Seg syn = s.spec(flag::syn, P - 1);
    syn.opts.has_mss = true;
    syn.opts.mss = 1000;
    s.inject(syn);
    const Parsed sa = s.one();
    EXPECT_EQ(sa.seg.flags, flag::syn | flag::ack);
    EXPECT_EQ(sa.seg.ack, P);
    EXPECT_EQ(sa.seg.opts.mss, 1460);
    EXPECT_FALSE(sa.seg.opts.has_wscale || sa.seg.opts.sack_permitted ||
                 sa.seg.opts.has_timestamps);
    EXPECT_EQ(s.node.conn.state(), TcpState::syn_received);
    s.inject(s.spec(flag::ack, P, sa.seg.seq + 1));
    EXPECT_EQ(s.node.conn.state(), TcpState::established);
    EXPECT_TRUE(s.node.saw(EventKind::connected));
    EXPECT_EQ(s.node.conn.mss(), 1000u);  // the peer's MSS bounds our segments
}

// A peer MSS below the 12 bytes of timestamps each segment carries left mss() wrapped
// around to ~4 GB (found by tests/fuzz/tcp_connection.cc): segments as large as the peer's
// window. As Linux does (tcp_min_snd_mss), the peer's MSS counts as at least kMinSendMss.
TEST(TcpRules, peer_mss_below_the_least_send_mss_is_raised_to_it) {
    for (const bool timestamps : {true, false}) {
        Script s;
        TcpOptions o;
        o.has_mss = true;
        o.mss = 2;
        o.has_timestamps = timestamps;
        o.ts_val = 1000;
        s.establish(o);
        ASSERT_EQ(s.node.conn.state(), TcpState::established);
        EXPECT_EQ(s.node.conn.mss(), kMinSendMss - (timestamps ? 12u : 0u));
        ASSERT_TRUE(send_bytes(s.node.conn, pattern(500)));
        s.poll();
        for (const Parsed& p : s.out()) {
            EXPECT_LE(p.seg.payload.size() + p.seg.header_length - kTcpMinHdrLen, kMinSendMss);
        }
    }
}

TEST(TcpRules, duplicate_syn_in_syn_received_gets_the_syn_ack_again) {
    Script s;
    s.passive_next = true;
    s.inject(s.spec(flag::syn, P - 1));
    const Parsed sa = s.one();
    s.inject(s.spec(flag::syn, P - 1));
    const Parsed again = s.one();
    EXPECT_EQ(again.seg.flags, flag::syn | flag::ack);
    EXPECT_EQ(again.seg.seq, sa.seg.seq);
}

TEST(TcpRules, syn_sent_ack_of_something_never_sent_gets_rst) {
    Script s;
    s.node.conn.open_active(s.now);
    s.poll();
    const Seq iss = s.one().seg.seq;
    s.inject(s.spec(flag::syn | flag::ack, P, iss + 5));
    const Parsed r = s.one();
    EXPECT_EQ(r.seg.flags, flag::rst);  // <SEQ=SEG.ACK><CTL=RST>
    EXPECT_EQ(r.seg.seq, iss + 5);
    EXPECT_EQ(s.node.conn.state(), TcpState::syn_sent);
}

// RFC 9293 §3.10.7.3: SEG.ACK > SND.NXT is not acceptable. A SYN-ACK acknowledging a SYN
// still waiting for room on the wire was taken: SND.UNA passed SND.MAX and the flight
// wrapped around (found by tests/fuzz/tcp_connection.cc).
TEST(TcpRules, syn_ack_for_a_syn_not_yet_sent_is_not_taken) {
    Script s;
    s.node.wire.full = true;
    s.node.conn.open_active(s.now);
    s.poll();
    s.inject(s.spec(flag::syn | flag::ack, P - 1, s.node.conn.iss() + 1));
    EXPECT_EQ(s.node.conn.state(), TcpState::syn_sent);
    EXPECT_EQ(s.node.conn.info().unacked, 0u);
    EXPECT_FALSE(s.node.saw(EventKind::connected));
}

TEST(TcpRules, rst_acking_our_syn_is_connection_refused) {
    Script s;
    s.node.conn.open_active(s.now);
    s.poll();
    const Seq iss = s.one().seg.seq;
    s.inject(s.spec(flag::rst | flag::ack, 0, iss + 1));
    EXPECT_EQ(s.node.conn.state(), TcpState::closed);
    EXPECT_TRUE(s.node.saw(EventKind::reset));
    EXPECT_TRUE(s.out().empty());
}

TEST(TcpRules, segment_for_a_closed_connection_gets_rst) {
    Script s;
    s.inject(s.spec(flag::ack, P, 777));
    const Parsed r = s.one();
    EXPECT_EQ(r.seg.flags, flag::rst);
    EXPECT_EQ(r.seg.seq, 777u);
}

TEST(TcpRules, syn_retries_run_out_then_timed_out) {
    TcpConfig c = Script::default_config();
    c.syn_retries = 2;
    Script s(c);
    s.node.conn.open_active(s.now);
    s.poll();
    s.out();
    s.advance(1 * kSec);  // RTO 1 s, then 2 s
    EXPECT_EQ(s.out().size(), 1u);
    s.advance(2 * kSec);
    EXPECT_EQ(s.out().size(), 1u);
    s.advance(4 * kSec);
    EXPECT_TRUE(s.out().empty());  // nothing synchronized: no RST
    EXPECT_EQ(s.node.conn.state(), TcpState::closed);
    EXPECT_TRUE(s.node.saw(EventKind::timed_out));
}

// --- RST, SYN and ACK checks (RFC 5961) --------------------------------------------------------

TEST(TcpRules, rst_with_exact_sequence_number_resets) {
    Script s;
    s.establish();
    s.inject(s.spec(flag::rst, P + 1));
    EXPECT_EQ(s.node.conn.state(), TcpState::closed);
    EXPECT_TRUE(s.node.saw(EventKind::reset));
    EXPECT_TRUE(s.out().empty());
}

TEST(TcpRules, rst_in_window_but_not_exact_gets_challenge_ack) {
    Script s;
    const Seq iss = s.establish();
    s.inject(s.spec(flag::rst, P + 1 + 100));
    EXPECT_EQ(s.node.conn.state(), TcpState::established);
    const Parsed a = s.one();
    EXPECT_EQ(a.seg.flags, flag::ack);  // <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>
    EXPECT_EQ(a.seg.seq, iss + 1);
    EXPECT_EQ(a.seg.ack, P + 1);
    EXPECT_EQ(s.node.conn.counters().challenge_acks.get(), 1u);
}

TEST(TcpRules, rst_outside_window_is_dropped_silently) {
    Script s;
    s.establish();
    s.inject(s.spec(flag::rst, P - 10));
    s.inject(s.spec(flag::rst, P + 1 + 10'000'000));
    EXPECT_EQ(s.node.conn.state(), TcpState::established);
    EXPECT_TRUE(s.out().empty());
}

TEST(TcpRules, syn_in_established_gets_challenge_ack_not_reset) {
    Script s;
    const Seq iss = s.establish();
    s.inject(s.spec(flag::syn, P + 1 + 7));
    EXPECT_EQ(s.node.conn.state(), TcpState::established);
    const Parsed a = s.one();
    EXPECT_EQ(a.seg.flags, flag::ack);
    EXPECT_EQ(a.seg.seq, iss + 1);
    EXPECT_EQ(a.seg.ack, P + 1);
}

TEST(TcpRules, challenge_acks_are_rate_limited_per_second) {
    Script s;
    s.establish();
    for (int i = 0; i < 15; ++i) s.inject(s.spec(flag::rst, P + 1 + 100 + i));
    EXPECT_EQ(s.out().size(), 10u);
    EXPECT_EQ(s.node.conn.counters().challenge_acks_suppressed.get(), 5u);
    s.advance(1 * kSec);
    s.inject(s.spec(flag::rst, P + 1 + 50));
    EXPECT_EQ(s.out().size(), 1u);
}

TEST(TcpRules, ack_of_unsent_data_is_answered_and_the_segment_dropped) {
    Script s;
    const Seq iss = s.establish();
    s.data(iss + 1 + 1000, pattern(10));
    const Parsed a = s.one();
    EXPECT_EQ(a.seg.ack, P + 1);  // the 10 bytes were not taken
    EXPECT_EQ(s.node.conn.received(), 0u);
    EXPECT_EQ(s.node.conn.counters().bad_ack.get(), 1u);
}

TEST(TcpRules, unacceptable_segment_is_answered_with_ack) {
    Script s;
    const Seq iss = s.establish();
    s.inject(s.spec(flag::ack | flag::psh, P - 500, iss + 1), pattern(100));  // all old
    const Parsed a = s.one();
    EXPECT_EQ(a.seg.ack, P + 1);
    EXPECT_EQ(s.node.conn.counters().bad_seq.get(), 1u);
}

// --- timestamps (RFC 7323) ---------------------------------------------------------------------

TEST(TcpRules, paws_drops_old_timestamp) {
    Script s;
    const Seq iss = s.establish(all_options(1000));
    Seg d = s.spec(flag::ack | flag::psh, P + 1, iss + 1, 65535);
    d.opts.has_timestamps = true;
    d.opts.ts_val = 900;  // older than TS.Recent (1000)
    s.inject(d, pattern(100));
    EXPECT_EQ(s.node.conn.received(), 0u);
    EXPECT_EQ(s.node.conn.counters().paws_drops.get(), 1u);
    const Parsed a = s.one();  // R1: an ACK, then drop
    EXPECT_EQ(a.seg.ack, P + 1);
    EXPECT_EQ(a.seg.opts.ts_ecr, 1000u);
    d.opts.ts_val = 1001;
    s.inject(d, pattern(100));
    EXPECT_EQ(s.node.conn.received(), 100u);
}

TEST(TcpRules, timestamps_echo_ts_recent_and_are_required_once_agreed) {
    Script s;
    const Seq iss = s.establish(all_options(1000));
    Seg d = s.spec(flag::ack | flag::psh, P + 1, iss + 1, 65535);
    s.inject(d, pattern(10));  // no TSopt: dropped (RFC 7323 §3.2)
    EXPECT_EQ(s.node.conn.received(), 0u);
    d.opts.has_timestamps = true;
    d.opts.ts_val = 2000;
    s.inject(d, pattern(10));
    s.advance(100 * kMs);  // the delayed ACK
    const Parsed a = s.one();
    EXPECT_EQ(a.seg.ack, P + 11);
    EXPECT_EQ(a.seg.opts.ts_ecr, 2000u);
    EXPECT_TRUE(a.seg.opts.has_timestamps);
}

TEST(TcpRules, window_scale_applies_to_the_peers_window_but_not_in_its_syn) {
    Script s;
    const Seq iss = s.establish(all_options());
    EXPECT_EQ(s.node.conn.info().snd_wnd, 65535u);  // from the SYN-ACK: unscaled
    Seg a = s.spec(flag::ack, P + 1, iss + 1, 1000);
    a.opts.has_timestamps = true;
    a.opts.ts_val = 1001;
    s.inject(a);
    EXPECT_EQ(s.node.conn.info().snd_wnd, 4000u);  // 1000 << 2
    // And ours is scaled by our shift: 256 KiB posted >> 3.
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(10)));
    s.poll();
    EXPECT_EQ(s.one().seg.window, 262144 >> 3);
}

// --- retransmission (RFC 6298) -----------------------------------------------------------------

TEST(TcpRules, rto_doubles_on_each_timeout) {
    Script s;
    s.establish();
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.poll();
    const Parsed first = s.one();
    const TcpTime rto = s.node.conn.info().rto;
    EXPECT_EQ(rto, 200 * kMs);  // the handshake's sample was 0: RTO is the minimum
    s.advance(rto - 1);
    EXPECT_TRUE(s.out().empty());
    s.advance(1);
    EXPECT_EQ(s.one().seg.seq, first.seg.seq);
    s.advance(2 * rto - 1);
    EXPECT_TRUE(s.out().empty());
    s.advance(1);
    EXPECT_EQ(s.out().size(), 1u);
    s.advance(4 * rto);
    EXPECT_EQ(s.out().size(), 1u);
    EXPECT_EQ(s.node.conn.counters().timeouts.get(), 3u);
    EXPECT_EQ(s.node.conn.info().cwnd, 1460u);  // RFC 5681: LW = 1 SMSS
}

TEST(TcpRules, karn_no_rtt_sample_from_retransmitted_segment) {
    Script s;
    const Seq iss = s.establish();
    const TcpTime srtt0 = s.node.conn.info().srtt;
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.poll();
    s.out();
    s.advance(200 * kMs);
    EXPECT_EQ(s.out().size(), 1u);  // retransmitted
    s.advance(50 * kMs);
    s.data(iss + 101, {});  // acknowledges it: which transmission? unknown
    EXPECT_EQ(s.node.conn.info().srtt, srtt0);
    EXPECT_EQ(s.node.conn.info().rto, 400 * kMs);  // still backed off (RFC 6298 §5.7)
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.poll();
    s.out();
    s.advance(30 * kMs);
    s.data(iss + 201, {});  // a clean sample
    EXPECT_NE(s.node.conn.info().srtt, srtt0);
    EXPECT_EQ(s.node.conn.info().rto, 200 * kMs);
}

TEST(TcpRules, retransmissions_run_out_then_rst_and_timed_out) {
    TcpConfig c = Script::default_config();
    c.max_retries = 3;
    Script s(c);
    s.establish();
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.poll();
    s.out();
    s.advance(10 * kSec);
    const auto v = s.out();
    ASSERT_EQ(v.size(), 4u);  // three retransmissions and the RST
    EXPECT_EQ(v[3].seg.flags, flag::rst);
    EXPECT_EQ(s.node.conn.state(), TcpState::closed);
    EXPECT_TRUE(s.node.saw(EventKind::timed_out));
}

// --- fast retransmit and recovery --------------------------------------------------------------

// Queues n records of `size` bytes and sends what the initial window allows.
// The peer's ACK of `ack`, its SACK option carrying `blocks`.
void ack_sack(Script& s, Seq ack, std::initializer_list<SackBlock> blocks) {
    Seg a = s.spec(flag::ack, s.peer_nxt, ack);
    for (const SackBlock& b : blocks) a.opts.sack[a.opts.nsack++] = b;
    s.inject(a);
}

std::vector<Parsed> send_records(Script& s, int n, std::size_t size) {
    for (int i = 0; i < n; ++i)
        EXPECT_TRUE(send_bytes(s.node.conn, pattern(size, static_cast<std::uint8_t>(i))));
    s.poll();
    return s.out();
}

TEST(TcpRules, fast_retransmit_on_third_dup_ack) {
    Script s;
    const Seq iss = s.establish();
    const auto first = send_records(s, 4, 1000);
    ASSERT_EQ(first.size(), 4u);  // IW = 4380: four 1000-byte records
    s.data(iss + 1, {});
    s.data(iss + 1, {});
    EXPECT_TRUE(s.out().empty());
    s.data(iss + 1, {});
    const Parsed r = s.one();
    EXPECT_EQ(r.seg.seq, iss + 1);
    EXPECT_EQ(r.seg.payload.size(), 1000u);
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 1u);
    EXPECT_EQ(s.node.conn.info().ssthresh, 2920u);  // max(4000 / 2, 2 SMSS)
    EXPECT_EQ(s.node.conn.info().cwnd, 2920u + 3 * 1460u);
    EXPECT_TRUE(s.node.conn.info().in_recovery);
}

// RFC 3042: each of the first two duplicate ACKs lets one segment of new data go beyond cwnd
// (at most cwnd + 2 SMSS outstanding), cwnd unchanged; the third starts the fast retransmit.
TEST(TcpRules, limited_transmit_sends_new_data_on_the_first_two_dup_acks) {
    Script s;
    const Seq iss = s.establish();
    ASSERT_EQ(send_records(s, 8, 1000).size(), 4u);  // IW 4380: four of eight
    const std::uint64_t cwnd = s.node.conn.info().cwnd;
    s.data(iss + 1, {});
    Parsed r = s.one();
    EXPECT_EQ(r.seg.seq, iss + 1 + 4000);
    EXPECT_EQ(r.seg.payload.size(), 1000u);
    s.data(iss + 1, {});
    r = s.one();
    EXPECT_EQ(r.seg.seq, iss + 1 + 5000);
    EXPECT_EQ(s.node.conn.info().cwnd, cwnd);
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    EXPECT_EQ(s.node.conn.counters().limited_transmits.get(), 2u);
    // The same duplicate ACK again before the third: nothing more goes (one per ACK).
    s.poll();
    EXPECT_TRUE(s.out().empty());
    s.data(iss + 1, {});
    const auto v = s.out();
    ASSERT_GE(v.size(), 1u);
    EXPECT_EQ(v[0].seg.seq, iss + 1);  // the fast retransmit
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 1u);
    EXPECT_EQ(s.node.conn.counters().limited_transmits.get(), 2u);
    // ssthresh from the flight without Limited Transmit's segments (RFC 5681 §3.2 step 2):
    // max(4000 / 2, 2 SMSS), not 6000 / 2.
    EXPECT_EQ(s.node.conn.info().ssthresh, 2920u);
}

// Limited Transmit takes only what the peer's window allows.
TEST(TcpRules, limited_transmit_stays_within_the_peer_window) {
    Script s;
    const Seq iss = s.establish();
    ASSERT_EQ(send_records(s, 8, 1000).size(), 4u);
    // A duplicate ACK (RFC 5681: same window) from a peer whose window ends at the flight.
    Seg a = s.spec(flag::ack, s.peer_nxt, iss + 1, 4000);
    s.inject(a);
    s.out();
    s.inject(a);  // now a duplicate of the one before
    EXPECT_TRUE(s.out().empty());
    EXPECT_EQ(s.node.conn.counters().limited_transmits.get(), 0u);
}

// RFC 8985 §7: a whole tail lost draws no ACK at all. 2 * SRTT after the last send (at
// least 10 ms) the highest segment goes again as a probe, well before the 200 ms RTO; the
// peer's SACK of it lets RACK (§6) find the segments sent before it lost, and they go again
// at once, in a recovery: no timeout.
TEST(TcpRules, a_lost_tail_is_probed_then_repaired_by_rack_without_a_timeout) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    ASSERT_EQ(send_records(s, 4, 1000).size(), 4u);  // all four lost
    s.advance(9 * kMs);
    EXPECT_TRUE(s.out().empty());
    s.advance(2 * kMs);
    const Parsed probe = s.one();
    EXPECT_EQ(probe.seg.seq, d + 3000);  // the highest segment, sent again
    EXPECT_EQ(probe.seg.payload.size(), 1000u);
    EXPECT_EQ(s.node.conn.counters().tlp_probes.get(), 1u);
    // The peer got the probe alone: a duplicate ACK with its SACK.
    s.advance(1 * kMs);
    Seg a = s.spec(flag::ack, s.peer_nxt, d);
    a.opts.sack[a.opts.nsack++] = SackBlock{d + 3000, d + 4000};
    s.inject(a);
    const auto v = s.out();
    ASSERT_GE(v.size(), 2u);  // cwnd = ssthresh = 2 SMSS: two of the three go now
    EXPECT_EQ(v[0].seg.seq, d);
    EXPECT_EQ(v[1].seg.seq, d + 1000);
    EXPECT_TRUE(s.node.conn.info().in_recovery);
    EXPECT_EQ(s.node.conn.counters().rack_losses.get(), 3u);  // records 1-3, one each
    // Each ACK lets the next go, and the last one ends the recovery; no RTO on the way.
    s.advance(1 * kMs);
    s.data(d + 2000, {});
    s.advance(1 * kMs);
    const auto w = s.out();
    ASSERT_GE(w.size(), 1u);
    EXPECT_EQ(w[0].seg.seq, d + 2000);
    s.data(d + 4000, {});
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    EXPECT_EQ(s.node.conn.counters().timeouts.get(), 0u);
}

// RFC 8985 §6: a retransmission lost too is found once data sent after it is SACKed, and
// goes a third time, where RFC 6675 alone would wait for the RTO.
TEST(TcpRules, rack_finds_a_lost_retransmission_before_the_timeout) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    ASSERT_EQ(send_records(s, 12, 1000).size(), 4u);
    s.advance(1 * kMs);
    s.data(d + 1000, {});  // record 1 arrived: cwnd grows, records 5 and 6 go
    ASSERT_EQ(s.out().size(), 2u);
    auto sack = [&](Seq right) { ack_sack(s, d + 1000, {{d + 2000, right}}); };
    const auto has = [](const std::vector<Parsed>& v, Seq seq) {
        for (const Parsed& p : v)
            if (p.seg.seq == seq) return true;
        return false;
    };
    // Record 2 is lost; 3, 4 and 5 are SACKed: Limited Transmit sends 7 and 8 on the first
    // two, the third starts the recovery, which sends record 2 again.
    s.advance(1 * kMs);
    sack(d + 3000);
    sack(d + 4000);
    sack(d + 5000);
    ASSERT_TRUE(has(s.out(), d + 1000));
    const std::uint64_t retransmits = s.node.conn.counters().retransmits.get();
    // That retransmission is lost as well. What was sent before it is SACKed (6, 7, 8): the
    // pipe empties and new data goes, after the retransmission.
    s.advance(5 * kMs);
    sack(d + 8000);
    const auto later = s.out();
    ASSERT_GE(later.size(), 1u);
    EXPECT_FALSE(has(later, d + 1000)) << "sent again before anything sent after it arrived";
    // That new data is SACKed: RACK finds the retransmission lost, and it goes a third time.
    s.advance(5 * kMs);
    sack(later.back().seg.seq + static_cast<Seq>(later.back().seg.payload.size()));
    EXPECT_TRUE(has(s.out(), d + 1000)) << "record 2 was not sent a third time";
    EXPECT_EQ(s.node.conn.counters().retransmits.get(), retransmits + 1);
    EXPECT_GE(s.node.conn.counters().rack_losses.get(), 1u);
    EXPECT_EQ(s.node.conn.counters().timeouts.get(), 0u);
}

// No probe while nothing is out, and none in a recovery.
TEST(TcpRules, no_probe_when_all_is_acknowledged) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    ASSERT_EQ(send_records(s, 2, 1000).size(), 2u);
    s.advance(1 * kMs);
    s.data(iss + 1 + 2000, {});
    s.advance(1 * kSec);
    EXPECT_TRUE(s.out().empty());
    EXPECT_EQ(s.node.conn.counters().tlp_probes.get(), 0u);
}

TEST(TcpRules, newreno_partial_ack_retransmits_the_next_hole) {
    Script s;
    const Seq iss = s.establish();
    send_records(s, 4, 1000);
    for (int i = 0; i < 3; ++i) s.data(iss + 1, {});
    s.out();
    s.data(iss + 1 + 2000, {});  // partial: segments 1 and 2 arrived, 3 is missing
    const Parsed r = s.one();
    EXPECT_EQ(r.seg.seq, iss + 1 + 2000);
    EXPECT_EQ(r.seg.payload.size(), 1000u);
    EXPECT_TRUE(s.node.conn.info().in_recovery);
    s.data(iss + 1 + 4000, {});  // full ACK: recovery ends
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    EXPECT_EQ(s.node.conn.info().cwnd, 2920u);  // min(ssthresh, max(0, SMSS) + SMSS)
}

// RFC 6675 §2: an ACK that SACKs new data is a duplicate even when the window it advertises
// changed. Linux grows its window (receive-buffer autotuning) on nearly every ACK early in a
// connection; counted as RFC 5681 counts, those ACKs were never duplicates, and a single lost
// segment waited for the RTO while fifty SACKs arrived.
TEST(TcpRules, sack_acks_count_as_duplicates_though_the_window_grows) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    auto v = send_records(s, 6, 1000);
    ASSERT_EQ(v.size(), 4u);
    // A round trip of 1 ms: RACK does not find segment 2 lost before the third SACK does.
    s.advance(1 * kMs);
    s.data(d + 1000, {});  // segment 1 acknowledged: 5 and 6 go
    ASSERT_EQ(s.out().size(), 2u);
    s.advance(1 * kMs);
    std::uint16_t window = 65535;
    auto sack = [&](Seq right) {
        Seg a = s.spec(flag::ack, s.peer_nxt, d + 1000, --window);  // a new window each time
        a.opts.sack[a.opts.nsack++] = SackBlock{d + 2000, right};
        s.inject(a);
    };
    sack(d + 3000);
    sack(d + 4000);
    EXPECT_TRUE(s.out().empty());
    sack(d + 5000);  // third: segment 2 is lost (RFC 6675 IsLost)
    v = s.out();
    ASSERT_GE(v.size(), 1u);
    EXPECT_EQ(v[0].seg.seq, d + 1000);
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 1u);
    EXPECT_EQ(s.node.conn.counters().dup_acks.get(), 3u);
}

TEST(TcpRules, sack_recovery_retransmits_only_the_holes) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    auto v = send_records(s, 6, 1000);
    ASSERT_EQ(v.size(), 4u);
    // A round trip of 1 ms: RACK (RFC 8985) then finds 5 not yet lost when 6 is SACKed a
    // round trip after both were sent, as RFC 6675 does.
    s.advance(1 * kMs);
    s.data(d + 1000, {});  // segment 1 acknowledged: cwnd 5380 lets 5 and 6 go
    ASSERT_EQ(s.out().size(), 2u);
    s.advance(1 * kMs);
    auto sack = [&](std::initializer_list<SackBlock> blocks) { ack_sack(s, d + 1000, blocks); };
    sack({{d + 2000, d + 3000}});
    sack({{d + 2000, d + 4000}});
    EXPECT_TRUE(s.out().empty());
    sack({{d + 5000, d + 6000}, {d + 2000, d + 4000}});  // third duplicate
    v = s.out();
    ASSERT_EQ(v.size(), 1u);  // only segment 2: 3 and 4 are SACKed, 5 is not yet lost
    EXPECT_EQ(v[0].seg.seq, d + 1000);
    EXPECT_EQ(s.node.conn.info().cwnd, 2920u);  // RFC 6675: cwnd = ssthresh
    // Segment 2 arrives: the ACK covers 3 and 4; 5 is a hole but not lost (one SACKed
    // block, 1000 bytes above it): NextSeg's rule 3 sends it, pipe permitting.
    Seg a = s.spec(flag::ack, s.peer_nxt, d + 4000);
    a.opts.nsack = 1;
    a.opts.sack[0] = {d + 5000, d + 6000};
    s.inject(a);
    v = s.out();
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].seg.seq, d + 4000);
    EXPECT_EQ(s.node.conn.counters().retransmits.get(), 2u);
}

// RFC 6675 keeps no RFC 6582 guard: a segment lost just after a recovery's full ACK starts
// the next recovery at the third SACK, where the guard left it to the retransmission timer.
TEST(TcpRules, a_loss_at_the_end_of_a_recovery_starts_the_next_one) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    ASSERT_EQ(send_records(s, 12, 1000).size(), 4u);
    s.advance(1 * kMs);
    auto sack = [&](Seq ack, Seq left, Seq right) { ack_sack(s, ack, {{left, right}}); };
    // Record 1 lost: 2, 3, 4 SACKed; the recovery ends at the ACK of all four.
    sack(d, d + 1000, d + 2000);
    sack(d, d + 1000, d + 3000);
    sack(d, d + 1000, d + 4000);
    Seq top = d + 4000;
    for (const Parsed& p : s.out())
        top = std::max(top, p.seg.seq + static_cast<Seq>(p.seg.payload.size()));
    ASSERT_EQ(s.node.conn.counters().fast_retransmits.get(), 1u);
    s.advance(1 * kMs);
    s.data(top, {});  // the full ACK: everything sent before the recovery began
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    const auto next = s.out();
    ASSERT_GE(next.size(), 2u);  // cwnd = ssthresh = 2 SMSS
    EXPECT_EQ(next[0].seg.seq, top);
    // The first segment after it is lost; the three after it (two by Limited Transmit) are
    // SACKed.
    s.advance(1 * kMs);
    sack(top, top + 1000, top + 2000);
    sack(top, top + 1000, top + 3000);
    sack(top, top + 1000, top + 4000);
    bool resent = false;
    for (const Parsed& p : s.out()) resent |= p.seg.seq == top;
    EXPECT_TRUE(resent);
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 2u);
    EXPECT_EQ(s.node.conn.counters().timeouts.get(), 0u);
}

// Reordering within RACK's window (a quarter of the minimum RTT) sends nothing again: record 2
// comes after 3, 0.1 ms late, and no segment goes twice (RFC 8985 §6.2).
TEST(TcpRules, a_little_reordering_sends_nothing_again) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    ASSERT_EQ(send_records(s, 4, 1000).size(), 4u);
    s.advance(1 * kMs);
    s.data(d + 1000, {});                           // record 1: a round trip of 1 ms
    ack_sack(s, d + 1000, {{d + 2000, d + 3000}});  // 3 before 2
    s.advance(100 * 1000);
    s.data(d + 3000, {});  // 2 came
    s.data(d + 4000, {});
    s.advance(1 * kSec);
    for (const Parsed& p : s.out()) EXPECT_EQ(p.seg.payload.size(), 0u) << "sent again";
    EXPECT_EQ(s.node.conn.counters().retransmits.get(), 0u);
    EXPECT_EQ(s.node.conn.counters().rack_losses.get(), 0u);
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 0u);
}

// A recovery that reordering started, shown spurious by the peer's D-SACK of the one segment
// it sent again, gives cwnd and ssthresh back (RFC 3708, RFC 4015's response); an ACK that
// carries only that D-SACK is no duplicate.
TEST(TcpRules, a_recovery_every_resend_of_which_was_dsacked_is_undone) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    ASSERT_EQ(send_records(s, 6, 1000).size(), 4u);
    s.advance(1 * kMs);
    s.data(d + 1000, {});
    ASSERT_EQ(s.out().size(), 2u);
    const std::uint64_t cwnd = s.node.conn.info().cwnd;
    s.advance(1 * kMs);
    auto ack = [&](Seq a, std::initializer_list<SackBlock> blocks) { ack_sack(s, a, blocks); };
    ack(d + 1000, {{d + 2000, d + 3000}});
    ack(d + 1000, {{d + 2000, d + 4000}});
    ack(d + 1000, {{d + 2000, d + 5000}});
    const auto r = s.out();
    ASSERT_GE(r.size(), 1u);
    EXPECT_EQ(r[0].seg.seq, d + 1000);
    EXPECT_LT(s.node.conn.info().cwnd, cwnd);
    // Record 2 was only late: it and 6 arrive, then the copy, which the peer D-SACKs.
    s.advance(1 * kMs);
    ack(d + 6000, {});
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    EXPECT_EQ(s.node.conn.counters().undos.get(), 0u);
    ack(d + 6000, {{d + 1000, d + 2000}});
    EXPECT_EQ(s.node.conn.counters().dsacks_in.get(), 1u);
    EXPECT_EQ(s.node.conn.counters().undos.get(), 1u);
    EXPECT_GE(s.node.conn.info().cwnd, cwnd);
    EXPECT_EQ(s.node.conn.counters().dup_acks.get(), 3u);  // the D-SACK alone was none
}

// A tail-loss probe that went again is D-SACKed when only the ACK was lost: no congestion
// response. Without the D-SACK it repaired a loss, and cwnd comes down (RFC 8985 §7.4.2).
TEST(TcpRules, a_dsacked_probe_keeps_cwnd_and_a_repairing_one_reduces_it) {
    for (const bool dsack : {true, false}) {
        Script s;
        const Seq iss = s.establish(sack_only(), 5 * kMs);
        const Seq d = iss + 1;
        ASSERT_EQ(send_records(s, 4, 1000).size(), 4u);
        const std::uint64_t cwnd = s.node.conn.info().cwnd;
        s.advance(11 * kMs);
        const Parsed probe = s.one();
        EXPECT_EQ(probe.seg.seq, d + 3000);  // the last segment again, not new data
        if (dsack) {
            ack_sack(s, d + 4000, {{d + 3000, d + 4000}});
        } else {
            s.data(d + 4000, {});
        }
        EXPECT_EQ(s.node.conn.counters().tlp_probes.get(), 1u);
        EXPECT_EQ(s.node.conn.counters().dsacks_in.get(), dsack ? 1u : 0u);
        if (dsack) {
            EXPECT_GE(s.node.conn.info().cwnd, cwnd) << "a lost ACK is no congestion";
        } else {
            EXPECT_LT(s.node.conn.info().ssthresh, 1u << 30) << "a repaired loss reduces";
        }
        EXPECT_EQ(s.node.conn.counters().timeouts.get(), 0u);
    }
}

// In a recovery, a lost segment RACK found goes at once even when the pipe is full, and a
// probe draws an ACK when the one that would end the recovery is lost: no timeout.
TEST(TcpRules, a_recovery_whose_acks_are_lost_is_probed_not_timed_out) {
    Script s;
    const Seq iss = s.establish(sack_only(), 5 * kMs);
    const Seq d = iss + 1;
    ASSERT_EQ(send_records(s, 4, 1000).size(), 4u);
    s.advance(1 * kMs);
    // Record 1 lost, 2 SACKed; one SACK alone is no duplicate threshold, RACK's timer finds it.
    ack_sack(s, d, {{d + 1000, d + 2000}});
    s.advance(2 * kMs);
    const auto r = s.out();
    ASSERT_GE(r.size(), 1u);
    EXPECT_EQ(r[0].seg.seq, d);
    EXPECT_TRUE(s.node.conn.info().in_recovery);
    // Every ACK after that is lost: the probe goes long before the retransmission timer.
    s.advance(30 * kMs);
    const auto p = s.out();
    ASSERT_GE(p.size(), 1u);
    EXPECT_EQ(s.node.conn.counters().tlp_probes.get(), 1u);
    s.data(d + 4000, {});
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    EXPECT_EQ(s.node.conn.counters().timeouts.get(), 0u);
}

// --- the receiver ------------------------------------------------------------------------------

// RFC 2883: a segment that came twice is reported in the first SACK block of the next ACK,
// once; below RCV.NXT alone, or within an out-of-order block, then followed by that block.
TEST(TcpRules, receiver_reports_a_duplicate_in_a_dsack_once) {
    Script s;
    const Seq iss = s.establish(sack_only());
    const auto seg = [&](Seq at) { s.inject(s.spec(flag::ack, at, iss + 1), pattern(100)); };
    seg(P + 1);
    s.out();
    seg(P + 1);  // again: wholly below RCV.NXT
    Parsed a = s.one();
    EXPECT_EQ(a.seg.ack, P + 101);
    ASSERT_EQ(a.seg.opts.nsack, 1);
    EXPECT_EQ(a.seg.opts.sack[0], (SackBlock{P + 1, P + 101}));
    seg(P + 1001);  // out of order
    a = s.one();
    ASSERT_EQ(a.seg.opts.nsack, 1);
    EXPECT_EQ(a.seg.opts.sack[0], (SackBlock{P + 1001, P + 1101}));
    seg(P + 1001);  // again: within the block
    a = s.one();
    ASSERT_EQ(a.seg.opts.nsack, 2);
    EXPECT_EQ(a.seg.opts.sack[0], (SackBlock{P + 1001, P + 1101}));
    EXPECT_EQ(a.seg.opts.sack[1], (SackBlock{P + 1001, P + 1101}));
    seg(P + 2001);  // new: no D-SACK any more
    a = s.one();
    ASSERT_EQ(a.seg.opts.nsack, 2);
    EXPECT_EQ(a.seg.opts.sack[0], (SackBlock{P + 2001, P + 2101}));
    EXPECT_EQ(a.seg.opts.sack[1], (SackBlock{P + 1001, P + 1101}));
    EXPECT_EQ(s.node.conn.counters().dsacks_out.get(), 2u);
}

TEST(TcpRules, receiver_reports_sack_blocks_newest_first) {
    Script s;
    const Seq iss = s.establish(sack_only());
    s.inject(s.spec(flag::ack, P + 1 + 1000, iss + 1), pattern(100));
    Parsed a = s.one();  // out of order: acknowledged at once
    EXPECT_EQ(a.seg.ack, P + 1);
    ASSERT_EQ(a.seg.opts.nsack, 1);
    EXPECT_EQ(a.seg.opts.sack[0], (SackBlock{P + 1001, P + 1101}));
    s.inject(s.spec(flag::ack, P + 1 + 2000, iss + 1), pattern(100));
    a = s.one();
    ASSERT_EQ(a.seg.opts.nsack, 2);
    EXPECT_EQ(a.seg.opts.sack[0], (SackBlock{P + 2001, P + 2101}));
    EXPECT_EQ(a.seg.opts.sack[1], (SackBlock{P + 1001, P + 1101}));
    s.inject(s.spec(flag::ack, P + 1, iss + 1), pattern(1000));  // fills the first hole
    a = s.one();
    EXPECT_EQ(a.seg.ack, P + 1101);
    ASSERT_EQ(a.seg.opts.nsack, 1);
    EXPECT_EQ(s.node.conn.received(), 1100u);
}

// RFC 2018 §3: 40 bytes of options hold at most three SACK blocks beside the timestamps. A
// fourth block used to be written too: a 68-byte header whose data offset (17) does not fit
// its 4 bits, which Linux dropped as malformed, so a receiver with four holes stalled it.
TEST(TcpRules, sack_blocks_beside_timestamps_fit_forty_bytes_of_options) {
    Script s;
    const Seq iss = s.establish(all_options());
    for (int k = 1; k <= 5; ++k) {
        Seg seg = s.spec(flag::ack, P + 1 + 1000 * static_cast<Seq>(k), iss + 1);
        seg.opts.has_timestamps = true;
        seg.opts.ts_val = 1000 + static_cast<std::uint32_t>(k);
        s.inject(seg, pattern(100));
        const Parsed a = s.one();
        ASSERT_EQ(a.err, ParseError::none);
        EXPECT_TRUE(a.seg.opts.has_timestamps);
        EXPECT_EQ(a.seg.opts.nsack, std::min(k, 3));
        EXPECT_LE(a.seg.header_length, kTcpMaxHdrLen);
        EXPECT_EQ(a.seg.opts.sack[0], (SackBlock{P + 1 + 1000 * static_cast<Seq>(k),
                                                 P + 101 + 1000 * static_cast<Seq>(k)}));
    }
}

TEST(TcpRules, delayed_ack_every_second_segment_or_after_the_timer) {
    Script s;
    const Seq iss = s.establish();
    s.data(iss + 1, pattern(100));
    EXPECT_TRUE(s.out().empty());
    s.peer_nxt += 100;
    s.data(iss + 1, pattern(100));
    EXPECT_EQ(s.one().seg.ack, P + 201);  // every second segment
    s.peer_nxt += 100;
    s.data(iss + 1, pattern(100));
    s.advance(40 * kMs - 1);
    EXPECT_TRUE(s.out().empty());
    s.advance(1);
    EXPECT_EQ(s.one().seg.ack, P + 301);
    EXPECT_EQ(s.node.conn.counters().delayed_acks.get(), 1u);
}

TEST(TcpRules, bytes_land_in_posted_buffers_in_stream_order) {
    Script s(Script::default_config(), 100, 3);
    s.node.auto_post = false;
    const Seq iss = s.establish();
    const Bytes b = pattern(250);
    s.data(iss + 1, b);
    ASSERT_EQ(s.node.count(EventKind::recv_done), 2u);  // buffers 0 and 1 are full
    EXPECT_EQ(s.node.stream, Bytes(b.begin(), b.begin() + 200));
    EXPECT_EQ(s.node.conn.received(), 250u);
    EXPECT_EQ(s.node.events.back().kind, EventKind::readable);
    EXPECT_EQ(s.node.events.back().bytes, 250u);
    const auto* third = reinterpret_cast<const std::uint8_t*>(s.node.bufs[2].get());
    EXPECT_EQ(Bytes(third, third + 50), Bytes(b.begin() + 200, b.end()));  // in place, no copy out
    s.peer_nxt += 250;
    s.inject(s.spec(flag::ack | flag::fin, s.peer_nxt, iss + 1));  // the FIN completes the rest
    EXPECT_TRUE(s.node.saw(EventKind::peer_closed));
    EXPECT_EQ(s.node.events.back().kind, EventKind::recv_done);
    EXPECT_EQ(s.node.events.back().bytes, 50u);
    EXPECT_EQ(s.node.conn.state(), TcpState::close_wait);
}

TEST(TcpRules, out_of_order_bytes_are_placed_and_delivered_when_the_hole_fills) {
    Script s(Script::default_config(), 1000, 4);
    const Seq iss = s.establish();
    const Bytes b = pattern(3000);
    s.inject(s.spec(flag::ack, P + 1 + 1500, iss + 1), Bytes(b.begin() + 1500, b.end()));
    EXPECT_EQ(s.node.conn.received(), 0u);
    EXPECT_EQ(s.node.conn.info().ooo_bytes, 1500u);
    s.inject(s.spec(flag::ack, P + 1, iss + 1), Bytes(b.begin(), b.begin() + 1500));
    EXPECT_EQ(s.node.conn.received(), 3000u);
    EXPECT_EQ(s.node.stream, b);  // three full buffers
}

TEST(TcpRules, data_beyond_the_posted_buffers_is_not_taken) {
    Script s(Script::default_config(), 1000, 1);
    s.node.auto_post = false;
    const Seq iss = s.establish();
    s.data(iss + 1, pattern(1500));
    EXPECT_EQ(s.node.conn.received(), 1000u);
    const Parsed a = s.one();
    EXPECT_EQ(a.seg.ack, P + 1001);
    EXPECT_EQ(a.seg.window, 0);
    EXPECT_EQ(s.node.conn.counters().beyond_window.get(), 500u);
}

TEST(TcpRules, posting_buffers_into_a_closed_window_sends_a_window_update) {
    Script s(Script::default_config(), 1000, 1);
    s.node.auto_post = false;
    const Seq iss = s.establish();
    s.data(iss + 1, pattern(1000));
    s.advance(40 * kMs);
    EXPECT_EQ(s.one().seg.window, 0);
    static std::byte more[4000];
    ASSERT_TRUE(s.node.conn.post_receive(more, 99));
    s.poll();
    const Parsed u = s.one();
    EXPECT_EQ(u.seg.window, 4000);
    EXPECT_EQ(u.seg.ack, P + 1001);
}

// --- the sender: records and windows -----------------------------------------------------------

TEST(TcpRules, record_never_split_when_it_fits_mss) {
    Script s;
    s.establish();
    for (std::size_t n : {1000, 1000, 400, 1460, 300, 300, 300})
        ASSERT_TRUE(send_bytes(s.node.conn, pattern(n)));
    s.poll();
    std::vector<std::size_t> sizes;
    for (const Parsed& p : s.out()) {
        sizes.push_back(p.seg.payload.size());
        EXPECT_TRUE(p.seg.has(flag::psh));
    }
    // 1000 alone (with the next 1000 it would not fit); 1000 + 400 whole; 1460; then
    // 300 * 3 waits for the congestion window.
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1000, 1400, 1460}));
    s.data(s.node.conn.iss() + 1 + 3860, {});
    auto v = s.out();
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].seg.payload.size(), 900u);
}

TEST(TcpRules, record_larger_than_mss_is_split_at_mss_and_ends_on_its_boundary) {
    Script s;
    s.establish();
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(3000)));
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(500)));
    s.poll();
    std::vector<std::size_t> sizes;
    std::vector<bool> push;
    for (const Parsed& p : s.out()) {
        sizes.push_back(p.seg.payload.size());
        push.push_back(p.seg.has(flag::psh));
    }
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1460, 1460, 80, 500}));
    EXPECT_EQ(push, (std::vector<bool>{false, false, true, true}));
}

TEST(TcpRules, send_takes_a_whole_record_or_none) {
    TcpConfig c = Script::default_config();
    c.send_buffer = 4000;
    Script s(c);
    const Seq iss = s.establish();
    EXPECT_TRUE(send_bytes(s.node.conn, pattern(3000)));
    EXPECT_FALSE(send_bytes(s.node.conn, pattern(1500)));  // refused whole
    EXPECT_TRUE(send_bytes(s.node.conn, pattern(1000)));
    EXPECT_EQ(s.node.conn.send_space(), 0u);
    EXPECT_FALSE(send_bytes(s.node.conn, pattern(5000)));  // larger than the buffer: never
    s.poll();
    s.out();
    s.data(iss + 1 + 1460, {});
    EXPECT_TRUE(s.node.saw(EventKind::send_space));
    EXPECT_EQ(s.node.conn.send_space(), 1460u);
}

TEST(TcpRules, retransmission_keeps_record_boundaries) {
    Script s;
    s.establish();
    for (std::size_t n : {700, 700, 2000}) ASSERT_TRUE(send_bytes(s.node.conn, pattern(n)));
    s.poll();
    const auto first = s.out();
    s.advance(200 * kMs);  // timeout: go back to SND.UNA with cwnd 1 SMSS
    const auto again = s.out();
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].seg.seq, first[0].seg.seq);
    EXPECT_EQ(again[0].seg.payload.size(), first[0].seg.payload.size());
    EXPECT_EQ(again[0].seg.payload.size(), 1400u);
}

TEST(TcpRules, zero_window_probe_backs_off) {
    Script s;
    const Seq iss = s.establish();
    s.data(iss + 1, {}, 0);  // the peer closes its window
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.poll();
    EXPECT_TRUE(s.out().empty());
    std::vector<TcpTime> at;
    for (int i = 0; i < 4; ++i) {
        const TcpTime start = s.now;
        for (TcpTime t = 0; t < 10 * kSec; t += 10 * kMs) {
            s.advance(10 * kMs);
            auto v = s.out();
            if (!v.empty()) {
                ASSERT_EQ(v.size(), 1u);
                EXPECT_EQ(v[0].seg.seq, iss);  // SND.UNA - 1, no payload
                EXPECT_TRUE(v[0].seg.payload.empty());
                at.push_back(s.now - start);
                break;
            }
        }
    }
    ASSERT_EQ(at.size(), 4u);
    EXPECT_EQ(at[0], 200 * kMs);
    EXPECT_EQ(at[1], 400 * kMs);
    EXPECT_EQ(at[2], 800 * kMs);
    EXPECT_EQ(at[3], 1600 * kMs);
    s.data(iss + 1, {}, 65535);  // the answer opens the window: the record goes
    EXPECT_EQ(s.one().seg.payload.size(), 100u);
    EXPECT_EQ(s.node.conn.counters().window_probes.get(), 4u);
}

TEST(TcpRules, peer_window_smaller_than_the_record_forces_a_split_when_idle) {
    Script s;
    const Seq iss = s.establish();
    s.data(iss + 1, {}, 600);
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(1000)));
    s.poll();
    EXPECT_EQ(s.one().seg.payload.size(), 600u);
}

// --- path MTU (RFC 1191) -----------------------------------------------------------------------

// The payloads of `v`, one after the other.
Bytes payloads(const std::vector<Parsed>& v) {
    Bytes b;
    for (const Parsed& p : v) b.insert(b.end(), p.seg.payload.begin(), p.seg.payload.end());
    return b;
}

TEST(TcpRules, path_mtu_drop_resends_the_flight_cut_to_the_new_mss_and_keeps_cwnd) {
    Script s;
    const Seq d = s.establish() + 1;
    ASSERT_EQ(send_records(s, 3, 1460).size(), 3u);  // IW 4380: three full segments
    const TcpInfo before = s.node.conn.info();
    // A hop of MTU 1280 dropped them and its router said so.
    EXPECT_TRUE(s.node.conn.on_path_mtu(1280, s.now));
    EXPECT_EQ(s.node.conn.mss(), 1240u);  // 1280 - 20 (IPv4) - 20 (TCP)
    EXPECT_EQ(s.node.conn.info().mss, 1240u);
    s.poll();
    const auto v = s.out();
    std::vector<std::size_t> sizes;
    std::vector<bool> push;
    for (const Parsed& p : v) {
        sizes.push_back(p.seg.payload.size());
        push.push_back(p.seg.has(flag::psh));
        EXPECT_LE(p.bytes.size() + 20, 1280u);
    }
    // Each 1460-byte record is now larger than the MSS: a piece of 1240, then its end.
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1240, 220, 1240, 220, 1240, 220}));
    EXPECT_EQ(push, (std::vector<bool>{false, true, false, true, false, true}));
    ASSERT_EQ(v.size(), 6u);
    EXPECT_EQ(v[0].seg.seq, d);
    EXPECT_EQ(v[2].seg.seq, d + 1460);
    Bytes want;
    for (int i = 0; i < 3; ++i) {
        const Bytes r = pattern(1460, static_cast<std::uint8_t>(i));
        want.insert(want.end(), r.begin(), r.end());
    }
    EXPECT_EQ(payloads(v), want);
    // Not a congestion signal (RFC 1191 §6.1): the windows stay, no loss is counted.
    EXPECT_EQ(s.node.conn.info().cwnd, before.cwnd);
    EXPECT_EQ(s.node.conn.info().ssthresh, before.ssthresh);
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    EXPECT_EQ(s.node.conn.counters().retransmits.get(), 6u);
    EXPECT_EQ(s.node.conn.counters().timeouts.get(), 0u);
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 0u);
    EXPECT_EQ(s.node.conn.counters().pmtu_lowered.get(), 1u);
    // Later records are cut to the new MSS too, and slow start grows by it.
    s.data(d + 4380, {});
    EXPECT_EQ(s.node.conn.info().cwnd, before.cwnd + 1240);
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(2000)));
    s.poll();
    sizes.clear();
    for (const Parsed& p : s.out()) sizes.push_back(p.seg.payload.size());
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1240, 760}));
}

TEST(TcpRules, path_mtu_leaves_room_for_the_timestamp_option) {
    Script s;
    s.establish(all_options());
    EXPECT_EQ(s.node.conn.mss(), 1448u);
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(1448)));
    s.poll();
    s.out();
    EXPECT_TRUE(s.node.conn.on_path_mtu(1280, s.now));
    EXPECT_EQ(s.node.conn.mss(), 1228u);  // 1280 - 40 - 12
    s.poll();
    const auto v = s.out();
    ASSERT_EQ(v.size(), 2u);
    EXPECT_EQ(v[0].seg.payload.size(), 1228u);
    EXPECT_EQ(v[0].bytes.size() + 20, 1280u);  // the packet fills the hop exactly
    EXPECT_EQ(v[1].seg.payload.size(), 220u);
}

TEST(TcpRules, path_mtu_not_below_the_one_in_use_is_ignored) {
    Script s;
    s.establish();
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(1000)));
    s.poll();
    s.out();
    EXPECT_FALSE(s.node.conn.on_path_mtu(1500, s.now));  // the same: 1460 + 40
    EXPECT_FALSE(s.node.conn.on_path_mtu(9000, s.now));  // larger: no increase from an ICMP
    s.poll();
    EXPECT_TRUE(s.out().empty());
    EXPECT_EQ(s.node.conn.mss(), 1460u);
    EXPECT_EQ(s.node.conn.counters().pmtu_lowered.get(), 0u);
    EXPECT_EQ(s.node.conn.counters().retransmits.get(), 0u);
}

TEST(TcpRules, path_mtu_before_the_handshake_completes_is_ignored) {
    Script s;
    s.node.conn.open_active(s.now);
    s.poll();
    s.out();
    EXPECT_FALSE(s.node.conn.on_path_mtu(576, s.now));
    EXPECT_EQ(s.node.conn.state(), TcpState::syn_sent);
    s.poll();
    EXPECT_TRUE(s.out().empty());
}

// RFC 1191 §3: no estimate below 68; Linux's tcp_min_snd_mss: no MSS below 48.
TEST(TcpRules, path_mtu_below_68_is_taken_as_68_and_the_mss_stops_at_48) {
    Script s;
    s.establish();
    EXPECT_TRUE(s.node.conn.on_path_mtu(20, s.now));
    EXPECT_EQ(s.node.conn.mss(), kMinSendMss);
    EXPECT_FALSE(s.node.conn.on_path_mtu(68, s.now));
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.poll();
    std::vector<std::size_t> sizes;
    for (const Parsed& p : s.out()) sizes.push_back(p.seg.payload.size());
    EXPECT_EQ(sizes, (std::vector<std::size_t>{48, 48, 4}));
}

// The peer holds some of what goes again: its duplicate ACKs for those copies are no sign of
// loss, and may not start a fast retransmit until the ACK passes what was resent.
TEST(TcpRules, duplicate_acks_for_copies_resent_after_a_path_mtu_drop_start_no_recovery) {
    Script s;
    const Seq d = s.establish() + 1;
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(300)));
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(1460, 1)));
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(1460, 2)));
    s.poll();
    ASSERT_EQ(s.out().size(), 3u);  // 300 alone (with the next it would not fit), 1460, 1460
    ASSERT_TRUE(s.node.conn.on_path_mtu(1280, s.now));
    s.poll();
    ASSERT_EQ(s.out().size(), 5u);  // 300, 1240, 220, 1240, 220
    s.data(d + 300, {});            // the 300 bytes got through the first time
    const TcpInfo before = s.node.conn.info();
    for (int i = 0; i < 3; ++i) s.data(d + 300, {});  // ... and again: duplicates
    EXPECT_TRUE(s.out().empty());
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 0u);
    EXPECT_EQ(s.node.conn.info().cwnd, before.cwnd);
    EXPECT_FALSE(s.node.conn.info().in_recovery);
    // Once the ACK passes all of it, a real loss is recovered from as ever.
    s.data(d + 3220, {});
    for (int i = 0; i < 4; ++i)
        ASSERT_TRUE(send_bytes(s.node.conn, pattern(1000, static_cast<std::uint8_t>(i))));
    s.poll();
    ASSERT_EQ(s.out().size(), 4u);
    s.data(d + 4220, {});
    s.out();
    for (int i = 0; i < 3; ++i) s.data(d + 4220, {});
    EXPECT_EQ(s.one().seg.seq, d + 4220);
    EXPECT_EQ(s.node.conn.counters().fast_retransmits.get(), 1u);
}

// RFC 5927 §4.1: an ICMP error is believed only when it quotes a sequence number sent and
// not yet acknowledged.
TEST(TcpRules, sent_unacked_holds_snd_una_up_to_snd_max) {
    Script s;
    const Seq iss = s.establish();
    EXPECT_FALSE(s.node.conn.sent_unacked(iss + 1));  // nothing in flight
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(1000)));
    s.poll();
    s.out();
    EXPECT_FALSE(s.node.conn.sent_unacked(iss));  // the SYN, acknowledged
    EXPECT_TRUE(s.node.conn.sent_unacked(iss + 1));
    EXPECT_TRUE(s.node.conn.sent_unacked(iss + 1000));
    EXPECT_FALSE(s.node.conn.sent_unacked(iss + 1001));
    EXPECT_FALSE(s.node.conn.sent_unacked(iss + 1 + 0x80000000u));
    s.data(iss + 501, {});
    EXPECT_FALSE(s.node.conn.sent_unacked(iss + 500));
    EXPECT_TRUE(s.node.conn.sent_unacked(iss + 501));
}

// --- closing -----------------------------------------------------------------------------------

TEST(TcpRules, fin_follows_queued_data) {
    Script s;
    s.establish();
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.node.conn.close();
    s.poll();
    const Parsed f = s.one();  // the FIN rides on the last data segment
    EXPECT_EQ(f.seg.payload.size(), 100u);
    EXPECT_TRUE(f.seg.has(flag::fin));
    EXPECT_EQ(s.node.conn.state(), TcpState::fin_wait_1);
    EXPECT_FALSE(send_bytes(s.node.conn, pattern(1)));
}

// Once the FIN is acknowledged SND.UNA is past the last byte queued: info().queued wrapped
// around to 2^64 - 1 and send_space() to the buffer plus one (found by
// tests/fuzz/tcp_connection.cc).
TEST(TcpRules, nothing_is_queued_once_our_fin_is_acknowledged) {
    Script s;
    s.establish();
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.node.conn.close();
    s.poll();
    const Parsed f = s.one();
    ASSERT_TRUE(f.seg.has(flag::fin));
    s.data(f.seg.seq + 101, {});
    EXPECT_EQ(s.node.conn.state(), TcpState::fin_wait_2);
    EXPECT_EQ(s.node.conn.info().unacked, 0u);
    EXPECT_EQ(s.node.conn.info().queued, 0u);
    EXPECT_LE(s.node.conn.send_space(), s.node.cfg.send_buffer);
}

// A connection whose FIN-WAIT-2 lasts at most 5 s.
TcpConfig fin_wait_2_config() {
    TcpConfig c = Script::default_config();
    c.fin_wait_2_timeout = 5 * kSec;
    return c;
}

// Establishes, closes and has our FIN acknowledged: FIN-WAIT-2. The ISS.
Seq into_fin_wait_2(Script& s) {
    const Seq iss = s.establish();
    s.node.conn.close();
    s.poll();
    s.out();
    s.data(iss + 2, {});  // our FIN acknowledged
    EXPECT_EQ(s.node.conn.state(), TcpState::fin_wait_2);
    return iss;
}

TEST(TcpRules, time_wait_lasts_2msl) {
    Script s;
    const Seq iss = into_fin_wait_2(s);
    s.inject(s.spec(flag::ack | flag::fin, P + 1, iss + 2));
    EXPECT_EQ(s.node.conn.state(), TcpState::time_wait);
    EXPECT_EQ(s.one().seg.ack, P + 2);
    s.advance(60 * kSec - 1);  // 2 MSL with MSL = 30 s
    EXPECT_EQ(s.node.conn.state(), TcpState::time_wait);
    s.inject(s.spec(flag::ack | flag::fin, P + 1, iss + 2));  // a retransmitted FIN
    EXPECT_EQ(s.one().seg.ack, P + 2);                        // is acknowledged again
    s.advance(60 * kSec - 1);                                 // and restarts the timer
    EXPECT_EQ(s.node.conn.state(), TcpState::time_wait);
    s.advance(1);
    EXPECT_EQ(s.node.conn.state(), TcpState::closed);
    EXPECT_TRUE(s.node.saw(EventKind::closed));
}

TEST(TcpRules, abort_sends_rst_and_closes) {
    Script s;
    const Seq iss = s.establish();
    s.node.conn.abort();
    s.poll();
    const Parsed r = s.one();
    EXPECT_EQ(r.seg.flags, flag::rst);
    EXPECT_EQ(r.seg.seq, iss + 1);
    EXPECT_EQ(s.node.conn.state(), TcpState::closed);
    EXPECT_TRUE(s.node.saw(EventKind::closed));
}

// A peer that acknowledges our FIN and never sends its own holds the connection in
// FIN-WAIT-2 for fin_wait_2_timeout, then no more (as Linux's tcp_fin_timeout).
TEST(TcpRules, fin_wait_2_gives_up_when_the_peer_never_closes) {
    Script s(fin_wait_2_config());
    const Seq iss = into_fin_wait_2(s);
    s.advance(2 * kSec);
    s.data(iss + 2, pattern(10));  // still talking: taken, and the bound holds
    s.advance(3 * kSec - 1);
    s.out();  // the data's ACK
    EXPECT_EQ(s.node.conn.state(), TcpState::fin_wait_2);
    EXPECT_FALSE(s.node.saw(EventKind::timed_out));
    s.advance(1);
    EXPECT_EQ(s.node.conn.state(), TcpState::closed);
    EXPECT_TRUE(s.node.saw(EventKind::timed_out));
    const auto v = s.out();
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].seg.flags, flag::rst);
    EXPECT_EQ(v[0].seg.seq, iss + 2);
    EXPECT_EQ(s.node.conn.counters().fin_wait_2_timeouts.get(), 1u);
}

// The peer's FIN within the bound: TIME-WAIT as usual, and the bound is gone.
TEST(TcpRules, fin_wait_2_ends_in_time_wait_when_the_fin_comes) {
    Script s(fin_wait_2_config());
    const Seq iss = into_fin_wait_2(s);
    s.advance(4 * kSec);
    s.inject(s.spec(flag::ack | flag::fin, P + 1, iss + 2));
    ASSERT_EQ(s.node.conn.state(), TcpState::time_wait);
    s.out();
    s.advance(2 * kSec);  // past where the bound was
    EXPECT_EQ(s.node.conn.state(), TcpState::time_wait);
    s.advance(60 * kSec);
    EXPECT_TRUE(s.node.saw(EventKind::closed));
    EXPECT_FALSE(s.node.saw(EventKind::timed_out));
    EXPECT_EQ(s.node.conn.counters().fin_wait_2_timeouts.get(), 0u);
}

TEST(TcpRules, keepalive_probes_then_times_out) {
    TcpConfig c = Script::default_config();
    c.keepalive = true;
    c.keepalive_idle = 10 * kSec;
    c.keepalive_interval = 1 * kSec;
    c.keepalive_probes = 3;
    Script s(c);
    const Seq iss = s.establish();
    s.advance(10 * kSec - 1);
    EXPECT_TRUE(s.out().empty());
    s.advance(1);
    Parsed p = s.one();
    EXPECT_EQ(p.seg.seq, iss);  // SND.UNA - 1
    s.data(iss + 1, {});        // answered: idle again
    s.advance(10 * kSec);
    EXPECT_EQ(s.out().size(), 1u);
    s.advance(1 * kSec);
    EXPECT_EQ(s.out().size(), 1u);
    s.advance(1 * kSec);
    EXPECT_EQ(s.out().size(), 1u);
    s.advance(1 * kSec);
    const auto v = s.out();
    ASSERT_EQ(v.size(), 1u);
    EXPECT_EQ(v[0].seg.flags, flag::rst);
    EXPECT_TRUE(s.node.saw(EventKind::timed_out));
    EXPECT_EQ(s.node.conn.counters().keepalive_probes.get(), 4u);
}

TEST(TcpRules, a_full_wire_loses_nothing_and_is_retried_on_the_next_poll) {
    Script s;
    s.establish();
    s.node.wire.full = true;
    ASSERT_TRUE(send_bytes(s.node.conn, pattern(100)));
    s.poll();
    EXPECT_TRUE(s.out().empty());
    EXPECT_GT(s.node.conn.counters().tx_full.get(), 0u);
    EXPECT_EQ(s.node.conn.next_deadline(), 0u);  // it still has output
    s.node.wire.full = false;
    s.poll();
    EXPECT_EQ(s.one().seg.payload.size(), 100u);
}

TEST(TcpRules, counter_table_names_every_counter) {
    EXPECT_EQ(kTcpCounterFields.size() * sizeof(TcpCounter), sizeof(TcpCounters));
    for (std::size_t i = 0; i < kTcpCounterFields.size(); ++i)
        for (std::size_t j = i + 1; j < kTcpCounterFields.size(); ++j)
            EXPECT_NE(kTcpCounterFields[i].field, kTcpCounterFields[j].field);
}

TEST(TcpRules, config_errors_are_named) {
    TcpConfig c = Script::default_config();
    EXPECT_EQ(tcp_config_error(c), nullptr);
    c.window_scale = false;
    EXPECT_NE(tcp_config_error(c), nullptr);  // 256 KiB needs scaling
    c = Script::default_config();
    c.mtu = 60;
    EXPECT_NE(tcp_config_error(c), nullptr);
}

}  // namespace
}  // namespace snic::tcp
