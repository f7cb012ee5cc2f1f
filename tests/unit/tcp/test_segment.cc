// The TCP wire format and the engine's building blocks, each rule on its own: segments and
// options (parse, build, the pseudo-header checksum, RSTs for strays), sequence
// arithmetic, SipHash and RFC 6528 ISNs, the RFC 6298 estimator, the SACK lists and the
// NewReno / RFC 6675 arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "proto/net/checksum.h"
#include "proto/net/ipv4.h"
#include "proto/tcp/congestion.h"
#include "proto/tcp/isn.h"
#include "proto/tcp/rack.h"
#include "proto/tcp/rto.h"
#include "proto/tcp/sack.h"
#include "proto/tcp/segment.h"
#include "proto/tcp/seq.h"
#include "tests/unit/tcp/tcp_harness.h"

namespace snic::tcp {
namespace {

using test::Bytes;
using test::ep;

Bytes build(const SegmentSpec& s, const Bytes& payload, const Endpoint& src, const Endpoint& dst) {
    Bytes b(header_length(s) + payload.size());
    write_segment(b, s, payload, {},
                  pseudo_sum(src.addr, dst.addr, static_cast<std::uint32_t>(b.size())));
    return b;
}

// Checksum offload: the segment leaves with the pseudo-header's sum in its checksum field;
// what a device then stores (the complement of the sum of the segment with that field in
// it) is the checksum write_segment() computes itself, for payloads of odd and even length
// in one piece or two.
TEST(TcpSegment, a_partial_checksum_is_what_a_device_completes_to_the_full_one) {
    SegmentSpec s;
    s.src_port = 4791;
    s.dst_port = 80;
    s.seq = 1000;
    s.flags = flag::ack;
    s.opts.has_timestamps = true;
    s.opts.ts_val = 7;
    Bytes data(1500);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 31 + 1);
    for (const auto& [first, second] :
         {std::pair{0, 0}, std::pair{1001, 0}, std::pair{700, 333}, std::pair{7, 1200}}) {
        const std::span<const std::uint8_t> a(data.data(), static_cast<std::size_t>(first));
        const std::span<const std::uint8_t> b(data.data() + first,
                                              static_cast<std::size_t>(second));
        Bytes full(header_length(s) + static_cast<std::size_t>(first + second)), part(full.size());
        const std::uint32_t pseudo =
            pseudo_sum(ep(1, 1).addr, ep(2, 2).addr, static_cast<std::uint32_t>(full.size()));
        write_segment(full, s, a, b, pseudo);
        write_segment(part, s, a, b, pseudo, true);
        EXPECT_EQ(part[16] << 8 | part[17], net::csum_fold(pseudo));
        Bytes same = part;
        same[16] = full[16];
        same[17] = full[17];
        ASSERT_EQ(same, full) << first << "+" << second << ": the same bytes but the checksum";
        const std::uint16_t completed = net::csum_finish(net::csum_add(part));
        EXPECT_EQ(completed, full[16] << 8 | full[17]) << first << "+" << second;
    }
}

TEST(TcpSegment, round_trip_keeps_every_field_and_option) {
    SegmentSpec s;
    s.src_port = 1234;
    s.dst_port = 80;
    s.seq = 0xfffffff0;
    s.ack = 77;
    s.flags = flag::ack | flag::psh;
    s.window = 4321;
    s.opts.has_mss = true;
    s.opts.mss = 1460;
    s.opts.has_wscale = true;
    s.opts.wscale = 7;
    s.opts.sack_permitted = true;
    s.opts.has_timestamps = true;
    s.opts.ts_val = 0x01020304;
    s.opts.ts_ecr = 0xa0b0c0d0;
    s.opts.nsack = 2;
    s.opts.sack[0] = SackBlock{100, 200};
    s.opts.sack[1] = SackBlock{300, 400};
    const Bytes payload{1, 2, 3, 4, 5};
    const Bytes b = build(s, payload, ep(1, 1), ep(2, 2));
    EXPECT_EQ(header_length(s) % 4, 0u);
    Segment g;
    ASSERT_EQ(parse_segment(b, pseudo_sum(ep(1, 1).addr, ep(2, 2).addr, b.size()), g),
              ParseError::none);
    EXPECT_EQ(g.src_port, 1234);
    EXPECT_EQ(g.dst_port, 80);
    EXPECT_EQ(g.seq, 0xfffffff0u);
    EXPECT_EQ(g.ack, 77u);
    EXPECT_EQ(g.flags, flag::ack | flag::psh);
    EXPECT_EQ(g.window, 4321);
    EXPECT_TRUE(g.opts.has_mss);
    EXPECT_EQ(g.opts.mss, 1460);
    EXPECT_TRUE(g.opts.has_wscale);
    EXPECT_EQ(g.opts.wscale, 7);
    EXPECT_TRUE(g.opts.sack_permitted);
    EXPECT_TRUE(g.opts.has_timestamps);
    EXPECT_EQ(g.opts.ts_val, 0x01020304u);
    EXPECT_EQ(g.opts.ts_ecr, 0xa0b0c0d0u);
    ASSERT_EQ(g.opts.nsack, 2);
    EXPECT_EQ(g.opts.sack[1], (SackBlock{300, 400}));
    EXPECT_EQ(Bytes(g.payload.begin(), g.payload.end()), payload);
    EXPECT_EQ(g.seq_len(), 5u);
}

TEST(TcpSegment, every_flipped_bit_fails_the_checksum) {
    SegmentSpec s;
    s.src_port = 9;
    s.dst_port = 10;
    s.flags = flag::ack;
    s.opts.has_timestamps = true;
    const Bytes b = build(s, Bytes(37, 0x5a), ep(1, 9), ep(2, 10));
    const std::uint32_t ps = pseudo_sum(ep(1, 9).addr, ep(2, 10).addr, b.size());
    for (std::size_t i = 0; i < b.size() * 8; ++i) {
        Bytes x = b;
        x[i / 8] ^= static_cast<std::uint8_t>(1u << (i % 8));
        Segment g;
        const ParseError e = parse_segment(x, ps, g);
        EXPECT_NE(e, ParseError::none) << "bit " << i;
    }
    // And the wrong addresses fail it too: the pseudo-header is covered.
    Segment g;
    EXPECT_EQ(parse_segment(b, pseudo_sum(ep(3, 9).addr, ep(2, 10).addr, b.size()), g),
              ParseError::bad_checksum);
}

TEST(TcpSegment, ipv6_pseudo_header_differs_from_ipv4_and_verifies) {
    IpAddr a6, b6;
    a6.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
    b6.bytes = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 8, 7, 6, 5, 4, 3, 2, 1};
    EXPECT_FALSE(a6.is_v4());
    // RFC 8200 §8.1: addresses, 32-bit length, 24 zero bits, next header 6.
    std::uint32_t expect = 0;
    for (std::size_t i = 0; i < 16; i += 2)
        expect += (a6.bytes[i] << 8 | a6.bytes[i + 1]) + (b6.bytes[i] << 8 | b6.bytes[i + 1]);
    expect += 40 + 6;
    EXPECT_EQ(net::csum_fold(pseudo_sum(a6, b6, 40)), net::csum_fold(expect));
    SegmentSpec s;
    s.flags = flag::syn;
    Bytes b(header_length(s));
    write_segment(b, s, {}, {}, pseudo_sum(a6, b6, b.size()));
    Segment g;
    EXPECT_EQ(parse_segment(b, pseudo_sum(a6, b6, b.size()), g), ParseError::none);
}

// net::ipv4_pseudo_sum (the stack's, on IPv4 addresses as they are) sums as the general one
// does, folded, for any addresses and lengths.
TEST(TcpSegment, the_ipv4_pseudo_sum_equals_the_general_one) {
    std::mt19937 rng(11);
    for (int i = 0; i < 1000; ++i) {
        const net::Ipv4Addr a{static_cast<std::uint32_t>(rng())},
            b{static_cast<std::uint32_t>(rng())};
        const std::uint32_t len = rng() % 65536;
        EXPECT_EQ(net::csum_fold(net::ipv4_pseudo_sum(a, b, net::IpProto::tcp,
                                                      static_cast<std::uint16_t>(len))),
                  net::csum_fold(pseudo_sum(IpAddr::v4(a), IpAddr::v4(b), len)))
            << a.value << " " << b.value << " " << len;
    }
}

TEST(TcpSegment, malformed_headers_and_options_are_rejected) {
    SegmentSpec s;
    s.opts.has_mss = true;
    Bytes b = build(s, {}, ep(1, 1), ep(2, 2));
    Segment g;
    EXPECT_EQ(parse_segment(std::span(b).first(19), 0, g, false), ParseError::too_short);
    Bytes x = b;
    x[12] = 0x40;  // data offset 4 words
    EXPECT_EQ(parse_segment(x, 0, g, false), ParseError::bad_offset);
    x = b;
    x[12] = 0xf0;  // 60 bytes, more than there are
    EXPECT_EQ(parse_segment(x, 0, g, false), ParseError::bad_offset);
    x = b;
    x[21] = 5;  // MSS with length 5
    EXPECT_EQ(parse_segment(x, 0, g, false), ParseError::bad_option);
    x = b;
    x[20] = 5;  // SACK with length 4: not 2 + 8n
    x[21] = 4;
    EXPECT_EQ(parse_segment(x, 0, g, false), ParseError::bad_option);
    x = b;
    x[20] = 99;  // an unknown option is skipped
    EXPECT_EQ(parse_segment(x, 0, g, false), ParseError::none);
}

TEST(TcpSegment, stray_segment_gets_rst_per_rfc9293_3_10_7_1) {
    Segment in;
    in.src_port = 1;
    in.dst_port = 2;
    in.seq = 100;
    in.flags = flag::syn;
    SegmentSpec r;
    ASSERT_TRUE(reset_for(in, r));  // no ACK: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>
    EXPECT_EQ(r.seq, 0u);
    EXPECT_EQ(r.ack, 101u);
    EXPECT_EQ(r.flags, flag::rst | flag::ack);
    EXPECT_EQ(r.src_port, 2);
    in.flags = flag::ack;
    in.ack = 555;
    ASSERT_TRUE(reset_for(in, r));  // ACK: <SEQ=SEG.ACK><CTL=RST>
    EXPECT_EQ(r.seq, 555u);
    EXPECT_EQ(r.flags, flag::rst);
    in.flags = flag::rst;
    EXPECT_FALSE(reset_for(in, r));  // never answer a RST
}

TEST(TcpSeq, comparisons_wrap_modulo_2_32) {
    EXPECT_TRUE(seq_lt(0xfffffff0u, 0x10u));
    EXPECT_TRUE(seq_gt(0x10u, 0xfffffff0u));
    EXPECT_TRUE(seq_in(0, 0xffffff00u, 0x100u));
    EXPECT_FALSE(seq_in(0x100u, 0xffffff00u, 0x100u));
    EXPECT_EQ(seq_of(0xffffffffu, 2), 1u);
    EXPECT_EQ(offset_of(0xffffffffu, 1000, seq_of(0xffffffffu, 1500)), 1500u);
    EXPECT_EQ(offset_of(0xffffffffu, 1000, seq_of(0xffffffffu, 700)), 700u);
}

// --- ISNs ------------------------------------------------------------------------------------

TEST(TcpIsn, siphash24_matches_the_reference_vectors) {
    IsnKey k;
    for (std::size_t i = 0; i < 16; ++i) k[i] = static_cast<std::uint8_t>(i);
    EXPECT_EQ(siphash24(k, {}), 0x726fdb47dd0e0e31ull);
    std::vector<std::uint8_t> m(15);
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<std::uint8_t>(i);
    EXPECT_EQ(siphash24(k, m), 0xa129ca6149be45e5ull);
}

TEST(TcpIsn, rfc6528_isn_is_hash_plus_4us_clock) {
    IsnKey k{};
    k[0] = 1;
    const Endpoint a = ep(1, 1000), b = ep(2, 2000);
    const Seq i0 = initial_sequence(k, a, b, 0);
    EXPECT_EQ(initial_sequence(k, a, b, 4000), i0 + 1);  // M ticks every 4 us
    EXPECT_EQ(initial_sequence(k, a, b, 4'000'000), i0 + 1000);
    EXPECT_NE(initial_sequence(k, a, ep(2, 2001), 0), i0);  // F depends on the tuple
    IsnKey k2 = k;
    k2[15] = 9;
    EXPECT_NE(initial_sequence(k2, a, b, 0), i0);  // and on the secret
    EXPECT_NE(timestamp_offset(k, a, b), timestamp_offset(k, a, ep(2, 2001)));
}

TEST(TcpIsn, a_syn_cookie_carries_the_mss_and_slot_bit_and_holds_for_two_slots) {
    IsnKey k{};
    k[0] = 3;
    const Endpoint a = ep(1, 80), b = ep(2, 4000);
    EXPECT_EQ(cookie_mss_index(0), 0u);     // no option, or a tiny one: 536
    EXPECT_EQ(cookie_mss_index(1459), 3u);  // rounded down: 1440
    EXPECT_EQ(cookie_mss_index(1460), 4u);
    EXPECT_EQ(cookie_mss_index(65535), 7u);
    const Seq c = make_syn_cookie(k, a, b, 1000, 41, 4);
    EXPECT_EQ(c & 7, 4u);         // bits 2..0: the MSS index
    EXPECT_EQ((c >> 3) & 1, 1u);  // bit 3: the slot's low bit
    EXPECT_EQ(check_syn_cookie(k, a, b, 1000, c, 41), 1460u);
    EXPECT_EQ(check_syn_cookie(k, a, b, 1000, c, 42), 1460u);  // the next slot
    EXPECT_EQ(check_syn_cookie(k, a, b, 1000, c, 43), 0u);     // two slots on
    EXPECT_EQ(check_syn_cookie(k, a, b, 1000, c, 40), 0u);     // not yet made
    EXPECT_EQ(check_syn_cookie(k, a, b, 1001, c, 41), 0u);     // another SYN
    EXPECT_EQ(check_syn_cookie(k, a, ep(2, 4001), 1000, c, 41), 0u);
    EXPECT_EQ(check_syn_cookie(k, a, b, 1000, (c & ~7u) | 7u, 41), 0u);  // MSS bits forged
    IsnKey k2 = k;
    k2[15] = 1;
    EXPECT_EQ(check_syn_cookie(k2, a, b, 1000, c, 41), 0u);
    EXPECT_EQ(check_syn_cookie(k, a, b, 1000, make_syn_cookie(k, a, b, 1000, 0, 0), 0), 536u);
}

// --- RTO -------------------------------------------------------------------------------------

TEST(TcpRto, rfc6298_estimator_and_backoff) {
    RtoEstimator r(1 * kSec, 200 * kMs, 60 * kSec, 1000);
    EXPECT_EQ(r.rto(), 1 * kSec);  // §2.1 before any sample
    r.sample(100 * kMs);           // §2.2: SRTT = R, RTTVAR = R/2, RTO = SRTT + 4 RTTVAR
    EXPECT_EQ(r.srtt(), 100 * kMs);
    EXPECT_EQ(r.rttvar(), 50 * kMs);
    EXPECT_EQ(r.rto(), 300 * kMs);
    r.sample(200 * kMs);  // §2.3: RTTVAR = 3/4 50 + 1/4 100; SRTT = 7/8 100 + 1/8 200
    EXPECT_EQ(r.rttvar(), 62'500'000u);
    EXPECT_EQ(r.srtt(), 112'500'000u);
    EXPECT_EQ(r.rto(), 362'500'000u);
    r.back_off();
    EXPECT_EQ(r.rto(), 725 * kMs);  // §5.5 doubles
    for (int i = 0; i < 20; ++i) r.back_off();
    EXPECT_EQ(r.rto(), 60 * kSec);  // §2.5 capped
    r.sample(1 * kMs);              // a new sample clears the backoff
    EXPECT_EQ(r.backoff(), 0u);
    EXPECT_LT(r.rto(), 1 * kSec);
    RtoEstimator fast(1 * kSec, 200 * kMs, 60 * kSec, 1000);
    fast.sample(1 * kMs);  // §2.4: never below the minimum
    EXPECT_EQ(fast.rto(), 200 * kMs);
}

// --- SACK lists ------------------------------------------------------------------------------

TEST(TcpSack, receiver_blocks_merge_and_report_newest_first) {
    OooBlocks o;
    EXPECT_TRUE(o.add(100, 200));
    EXPECT_TRUE(o.add(300, 400));
    EXPECT_TRUE(o.add(500, 600));
    EXPECT_EQ(o[0], (Range{500, 600}));  // RFC 2018 §4: the newest first
    EXPECT_TRUE(o.add(200, 300));        // joins the first two
    EXPECT_EQ(o.size(), 2u);
    EXPECT_EQ(o[0], (Range{100, 400}));
    EXPECT_EQ(o.advance(50), 50u);
    EXPECT_EQ(o.advance(100), 400u);  // RCV.NXT jumps over the block
    EXPECT_EQ(o.size(), 1u);
}

TEST(TcpSack, receiver_block_list_is_bounded) {
    OooBlocks o;
    for (std::uint64_t i = 0; i < OooBlocks::kMax; ++i)
        EXPECT_TRUE(o.add(100 * i + 10, 100 * i + 20));
    EXPECT_FALSE(o.add(5000, 5010));  // a new block beyond the bound is refused
    EXPECT_TRUE(o.add(15, 30));       // growing an old one is not
}

TEST(TcpSack, scoreboard_is_lost_per_rfc6675) {
    Scoreboard sb;
    const std::uint32_t mss = 100;
    sb.add(200, 300);                    // segments 1, 3, 5 (of 100 bytes) SACKed, 0, 2, 4 missing
    EXPECT_FALSE(sb.is_lost(100, mss));  // 1 block, 100 bytes above
    sb.add(400, 500);
    EXPECT_FALSE(sb.is_lost(100, mss));  // 2 blocks, 200 bytes: not more than 2 * SMSS
    sb.add(600, 700);
    EXPECT_TRUE(sb.is_lost(100, mss));   // 3 discontiguous blocks above
    EXPECT_FALSE(sb.is_lost(300, mss));  // only 2 above
    EXPECT_FALSE(sb.is_lost(250, mss));  // SACKed bytes are never lost
    sb.add(300, 400);                    // merges into 200..500
    EXPECT_EQ(sb.size(), 2u);
    EXPECT_TRUE(sb.is_lost(100, mss));  // 400 bytes above > 2 * SMSS
    sb.advance(450);
    EXPECT_EQ(sb[0], (Range{450, 500}));
}

TEST(TcpSack, pipe_counts_unsacked_not_lost_plus_retransmitted) {
    Scoreboard sb;
    const std::uint32_t mss = 100;
    // Sent 0..1000; SACKed 300..400, 500..600, 700..800: 0..300 is lost (3 blocks above).
    sb.add(300, 400);
    sb.add(500, 600);
    sb.add(700, 800);
    // Not lost: 400..500 (2 blocks, 200 bytes above), 600..700, 800..1000 = 400 bytes.
    EXPECT_EQ(sack_pipe(sb, 0, 1000, 0, mss), 400u);
    // 0..100 retransmitted counts once more.
    EXPECT_EQ(sack_pipe(sb, 0, 1000, 100, mss), 500u);
    Range h;
    bool lost = false;
    ASSERT_TRUE(next_hole(sb, 0, 100, mss, h, lost));
    EXPECT_EQ(h, (Range{100, 300}));
    EXPECT_TRUE(lost);
    ASSERT_TRUE(next_hole(sb, 0, 300, mss, h, lost));
    EXPECT_EQ(h, (Range{400, 500}));
    EXPECT_FALSE(lost);  // NextSeg rule 3 material
}

// --- congestion control ----------------------------------------------------------------------

TEST(TcpCongestion, initial_window_and_slow_start_then_avoidance) {
    Congestion c;
    c.init(1460, false);
    EXPECT_EQ(c.cwnd(), 4380u);  // RFC 3390: min(4 * 1460, max(2 * 1460, 4380))
    c.init(1000, false);
    EXPECT_EQ(c.cwnd(), 4000u);
    c.on_ack(3000);  // slow start: at most one SMSS per ACK (RFC 3465 L = 1)
    EXPECT_EQ(c.cwnd(), 5000u);
    c.on_timeout(8000, 100);  // ssthresh = flight / 2, cwnd = 1 SMSS
    EXPECT_EQ(c.ssthresh(), 4000u);
    EXPECT_EQ(c.cwnd(), 1000u);
    for (int i = 0; i < 3; ++i) c.on_ack(1000);
    EXPECT_EQ(c.cwnd(), 4000u);  // slow start up to ssthresh
    c.on_ack(1000);
    c.on_ack(1000);
    c.on_ack(1000);
    EXPECT_EQ(c.cwnd(), 4000u);  // avoidance: one SMSS per cwnd of bytes
    c.on_ack(1000);
    EXPECT_EQ(c.cwnd(), 5000u);
}

TEST(TcpCongestion, newreno_recovery_inflates_deflates_and_exits) {
    Congestion c;
    c.init(1000, false);
    EXPECT_TRUE(c.may_enter_recovery(0));
    c.enter_recovery(10000, 10001);
    EXPECT_EQ(c.ssthresh(), 5000u);
    EXPECT_EQ(c.cwnd(), 8000u);  // ssthresh + 3 SMSS
    c.on_dupack_in_recovery();
    EXPECT_EQ(c.cwnd(), 9000u);
    EXPECT_FALSE(c.on_ack_in_recovery(3001, 3000, 7000));  // partial: -3000 + 1000
    EXPECT_EQ(c.cwnd(), 7000u);
    EXPECT_TRUE(c.on_ack_in_recovery(10001, 7000, 0));  // full: min(ssthresh, max(0, SMSS) + SMSS)
    EXPECT_EQ(c.cwnd(), 2000u);
    EXPECT_FALSE(c.in_recovery());
    EXPECT_FALSE(c.may_enter_recovery(10001));  // RFC 6582: not again until past recover
    EXPECT_TRUE(c.may_enter_recovery(10002));
}

TEST(TcpCongestion, sack_recovery_sets_cwnd_to_ssthresh) {
    Congestion c;
    c.init(1000, true);
    c.enter_recovery(10000, 10001);
    EXPECT_EQ(c.cwnd(), 5000u);
    c.on_dupack_in_recovery();
    EXPECT_EQ(c.cwnd(), 5000u);  // no inflation: pipe does the accounting
    // RFC 6675 keeps no RFC 6582 guard: a loss found at the full ACK starts the next one.
    EXPECT_TRUE(c.on_ack_in_recovery(10001, 10000, 0));
    EXPECT_TRUE(c.may_enter_recovery(10001));
}

TEST(TcpCongestion, a_timeout_guards_a_sack_connection_too) {
    Congestion c;
    c.init(1000, true);
    c.on_timeout(8000, 9001);
    EXPECT_FALSE(c.may_enter_recovery(9001));  // duplicates of the go-back-N copies
    EXPECT_TRUE(c.may_enter_recovery(9002));
}

// RFC 8985 §6.2 step 4: each round trip with a D-SACK widens RACK's reordering window by a
// quarter of the minimum RTT, never past SRTT; 16 recoveries without one narrow it back.
TEST(TcpRack, dsacks_widen_the_reordering_window_once_a_round_trip) {
    Rack r;
    Scoreboard sb;
    r.sent(1, 1001, 0, false);
    r.on_ack(1001, sb, 100'000);  // min RTT 100 us
    const TcpTime srtt = 100'000;
    EXPECT_EQ(r.reo_wnd(srtt), 25'000u);
    r.on_dsack(200'000, srtt);
    EXPECT_EQ(r.reo_wnd(srtt), 50'000u);
    r.on_dsack(250'000, srtt);  // the same round trip
    EXPECT_EQ(r.reo_wnd_mult(), 2u);
    r.on_dsack(300'000, srtt);
    r.on_dsack(400'000, srtt);
    r.on_dsack(500'000, srtt);
    EXPECT_EQ(r.reo_wnd_mult(), 5u);
    EXPECT_EQ(r.reo_wnd(srtt), srtt);  // 125 us, held to SRTT
    for (int i = 0; i < 15; ++i) r.on_recovery_end();
    EXPECT_EQ(r.reo_wnd_mult(), 5u);
    r.on_recovery_end();
    EXPECT_EQ(r.reo_wnd_mult(), 1u);
}

TEST(TcpCongestion, undo_restores_what_the_reduction_took) {
    Congestion c;
    c.init(1000, true);
    for (int i = 0; i < 8; ++i) c.on_ack(1000);  // slow start: 4000 + 8000
    const std::uint64_t cwnd = c.cwnd();
    c.enter_recovery(cwnd, 20001);
    EXPECT_EQ(c.cwnd(), cwnd / 2);
    EXPECT_TRUE(c.on_ack_in_recovery(20001, 1000, 0));
    c.undo();
    EXPECT_EQ(c.cwnd(), cwnd);
    EXPECT_GT(c.ssthresh(), cwnd);  // as large as before: slow start again
    c.on_timeout(cwnd, 30001);
    EXPECT_EQ(c.cwnd(), 1000u);
    c.undo();
    EXPECT_EQ(c.cwnd(), cwnd);
}

}  // namespace
}  // namespace snic::tcp
