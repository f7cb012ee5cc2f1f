// MPA (proto/iwarp/mpa.h): the request/reply frames and RFC 6581's IRD/ORD header, the
// initiator's and responder's negotiation across revisions, CRC policies, markers, rejects
// and IRD/ORD, fed in every split; FPDU building and the deframer. The same code against
// siw's real traffic: test_mpa_vectors.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "proto/crc/crc.h"
#include "proto/iwarp/mpa.h"

namespace snic::iwarp {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes bytes_of(std::span<const std::uint8_t> s) {
    return {s.begin(), s.end()};
}

Bytes bytes_of(std::string_view s) {
    return {s.begin(), s.end()};
}

Bytes encode(const MpaFrame& f) {
    Bytes out(kMpaMaxFrameLen + 16);
    out.resize(encode_frame(out, f));
    return out;
}

Bytes cat(Bytes a, std::span<const std::uint8_t> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// --- frames ------------------------------------------------------------------------------

TEST(MpaFrame, request_layout_is_key_flags_revision_pd_length_private_data) {
    const Bytes pd = bytes_of("hi!");
    MpaFrame f;
    f.kind = FrameKind::request;
    f.crc = true;
    f.revision = 1;
    f.private_data = pd;
    const Bytes b = encode(f);
    ASSERT_EQ(b.size(), 23u);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(b.data()), 16), "MPA ID Req Frame");
    EXPECT_EQ(b[16], 0x40);  // C
    EXPECT_EQ(b[17], 1);
    EXPECT_EQ(b[18], 0);
    EXPECT_EQ(b[19], 3);
    EXPECT_EQ(b[20], 'h');
}

TEST(MpaFrame, flag_bits_are_m_c_r_then_rfc6581_enhanced) {
    MpaFrame f;
    f.kind = FrameKind::reply;
    f.markers = f.crc = f.reject = true;
    f.revision = 2;
    f.enhanced = true;
    const Bytes b = encode(f);
    ASSERT_EQ(b.size(), 24u);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(b.data()), 16), "MPA ID Rep Frame");
    EXPECT_EQ(b[16], 0x80 | 0x40 | 0x20 | 0x10);
    EXPECT_EQ(b[19], 4);  // PD_Length counts the IRD/ORD header
}

// RFC 6581 §9.1: |P|L| IRD |A|B| ORD |, each word big-endian, IRD and ORD 14 bits.
TEST(MpaFrame, ird_ord_header_bits_sit_where_rfc6581_puts_them) {
    std::array<std::uint8_t, 4> b{};
    write_ird_ord(b, {0x3fff, 0, true, 0});
    EXPECT_EQ(b, (std::array<std::uint8_t, 4>{0xbf, 0xff, 0x00, 0x00}));  // P, IRD
    write_ird_ord(b, {0, 0, false, kRtrSend});
    EXPECT_EQ(b, (std::array<std::uint8_t, 4>{0x40, 0x00, 0x00, 0x00}));  // L
    write_ird_ord(b, {0, 0, false, kRtrWrite});
    EXPECT_EQ(b, (std::array<std::uint8_t, 4>{0x00, 0x00, 0x80, 0x00}));  // A
    write_ird_ord(b, {0, 0x1234, false, kRtrRead});
    EXPECT_EQ(b, (std::array<std::uint8_t, 4>{0x00, 0x00, 0x52, 0x34}));  // B, ORD
    for (std::uint8_t rtr = 0; rtr <= kRtrAll; ++rtr) {
        for (bool p2p : {false, true}) {
            const IrdOrd v{0x2a5a, 0x15a5, p2p, rtr};
            write_ird_ord(b, v);
            EXPECT_EQ(read_ird_ord(b), v);
        }
    }
}

TEST(MpaFrame, decode_reads_back_what_encode_wrote) {
    const Bytes pd = bytes_of("private");
    for (FrameKind kind : {FrameKind::request, FrameKind::reply}) {
        for (std::uint8_t rev : {1, 2}) {
            MpaFrame f;
            f.kind = kind;
            f.crc = true;
            f.revision = rev;
            f.enhanced = rev == 2;
            f.ird_ord = {7, 9, true, kRtrRead};
            f.private_data = pd;
            const Bytes b = encode(f);
            const MpaDecoded d = decode_frame(b, kind);
            ASSERT_EQ(d.error, MpaError::none);
            EXPECT_EQ(d.frame.kind, kind);
            EXPECT_TRUE(d.frame.crc);
            EXPECT_FALSE(d.frame.markers);
            EXPECT_FALSE(d.frame.reject);
            EXPECT_EQ(d.frame.revision, rev);
            EXPECT_EQ(d.frame.enhanced, rev == 2);
            if (rev == 2) {
                EXPECT_EQ(d.frame.ird_ord, f.ird_ord);
            }
            EXPECT_EQ(bytes_of(d.frame.private_data), pd);
            EXPECT_EQ(d.frame.length, b.size());
        }
    }
}

TEST(MpaFrame, revision_1_has_no_ird_ord_header_even_with_the_enhanced_bit) {
    MpaFrame f;
    f.revision = 1;
    f.enhanced = true;  // writes the flag and 4 bytes; a revision 1 reader sees private data
    f.ird_ord = {1, 2, false, 0};
    const Bytes b = encode(f);
    const MpaDecoded d = decode_frame(b, FrameKind::request);
    ASSERT_EQ(d.error, MpaError::none);
    EXPECT_FALSE(d.frame.enhanced);
    EXPECT_EQ(d.frame.private_data.size(), 4u);
}

// No bytes yet: a frame still to come. An empty span may have no address; decode_frame
// passed it to memcmp, which UBSan reports (found by tests/fuzz/mpa_frames.cc; this test
// fails under -fsanitize=undefined with halt_on_error=1 before the fix).
TEST(MpaFrame, no_bytes_is_truncated) {
    EXPECT_EQ(decode_frame({}, FrameKind::request).error, MpaError::truncated);
    EXPECT_EQ(decode_frame({}, FrameKind::reply).error, MpaError::truncated);
}

TEST(MpaFrame, bad_key_is_told_as_soon_as_a_key_byte_differs) {
    MpaFrame f;
    f.kind = FrameKind::reply;
    const Bytes b = encode(f);
    EXPECT_EQ(decode_frame(b, FrameKind::request).error, MpaError::bad_key);
    // "MPA ID Re" is common to both keys; the tenth byte tells them apart.
    EXPECT_EQ(decode_frame(std::span(b).first(9), FrameKind::request).error, MpaError::truncated);
    EXPECT_EQ(decode_frame(std::span(b).first(10), FrameKind::request).error, MpaError::bad_key);
    const Bytes http = bytes_of("GET / HTTP/1.1\r\n\r\n");
    EXPECT_EQ(decode_frame(http, FrameKind::request).error, MpaError::bad_key);
}

TEST(MpaFrame, revisions_other_than_1_and_2_are_bad) {
    for (int rev : {0, 3, 255}) {
        MpaFrame f;
        f.revision = static_cast<std::uint8_t>(rev);
        const Bytes b = encode(f);
        EXPECT_EQ(decode_frame(b, FrameKind::request).error, MpaError::bad_revision) << rev;
    }
}

TEST(MpaFrame, pd_length_above_512_is_refused_both_ways) {
    Bytes pd(512);
    MpaFrame f;
    f.revision = 1;
    f.private_data = pd;
    Bytes b = encode(f);
    ASSERT_EQ(b.size(), 532u);
    EXPECT_EQ(decode_frame(b, FrameKind::request).error, MpaError::none);
    pd.resize(513);
    f.private_data = pd;
    Bytes out(600);
    EXPECT_EQ(encode_frame(out, f), 0u);
    f.revision = 2;
    f.enhanced = true;
    pd.resize(509);  // + 4 header bytes
    f.private_data = pd;
    EXPECT_EQ(encode_frame(out, f), 0u);
    b[18] = 0x02;
    b[19] = 0x01;  // 513
    EXPECT_EQ(decode_frame(b, FrameKind::request).error, MpaError::pd_too_long);
}

TEST(MpaFrame, encode_refuses_a_buffer_too_small) {
    MpaFrame f;
    Bytes out(23);
    f.enhanced = true;
    EXPECT_EQ(encode_frame(out, f), 0u);
    out.resize(24);
    EXPECT_EQ(encode_frame(out, f), 24u);
}

TEST(MpaFrame, every_cut_of_a_frame_is_truncated) {
    const Bytes pd = bytes_of("0123456789");
    MpaFrame f;
    f.enhanced = true;
    f.private_data = pd;
    const Bytes b = encode(f);
    for (std::size_t n = 0; n < b.size(); ++n) {
        EXPECT_EQ(decode_frame(std::span(b).first(n), FrameKind::request).error,
                  MpaError::truncated)
            << n;
    }
}

TEST(MpaFrame, enhanced_revision_2_needs_4_bytes_of_private_data_unless_rejecting) {
    MpaFrame f;
    f.revision = 2;
    Bytes b = encode(f);
    b[16] |= mpa_flag::kEnhanced;
    EXPECT_EQ(decode_frame(b, FrameKind::request).error, MpaError::missing_ird_ord);
    b[16] |= mpa_flag::kReject;
    const MpaDecoded d = decode_frame(b, FrameKind::request);
    EXPECT_EQ(d.error, MpaError::none);
    EXPECT_FALSE(d.frame.enhanced);
}

// --- negotiation -------------------------------------------------------------------------

MpaConfig config(std::uint8_t rev, CrcPolicy crc, std::uint16_t ird = 4, std::uint16_t ord = 4) {
    MpaConfig c;
    c.revision = rev;
    c.crc = crc;
    c.ird = ird;
    c.ord = ord;
    return c;
}

// The whole exchange: the request to the responder, its accept (or reject), the reply back.
struct Exchange {
    MpaInitiator initiator;
    MpaResponder responder;
    MpaError accepted = MpaError::none;

    Exchange(const MpaConfig& ic, std::span<const std::uint8_t> ipd, const MpaConfig& rc)
        : initiator(ic, ipd), responder(rc) {}

    void request() {
        const auto req = initiator.request();
        EXPECT_EQ(responder.on_bytes(req), req.size());
    }
    void reply() {
        const auto rep = responder.reply();
        EXPECT_EQ(initiator.on_bytes(rep), rep.size());
    }
};

TEST(MpaNegotiation, crc_is_on_when_either_side_sets_c_and_a_refusing_side_says_no) {
    const CrcPolicy policies[] = {CrcPolicy::require, CrcPolicy::accept, CrcPolicy::refuse};
    for (std::uint8_t ri : {1, 2}) {
        for (std::uint8_t rr : {1, 2}) {
            for (CrcPolicy ci : policies) {
                for (CrcPolicy cr : policies) {
                    SCOPED_TRACE(testing::Message() << "rev " << int{ri} << "/" << int{rr}
                                                    << " crc " << int(ci) << "/" << int(cr));
                    const Bytes pd = bytes_of("ipd");
                    Exchange x(config(ri, ci), pd, config(rr, cr));
                    ASSERT_EQ(x.initiator.state(), MpaState::awaiting_frame);
                    x.request();
                    const bool c_req = ci == CrcPolicy::require;
                    if (c_req && cr == CrcPolicy::refuse) {
                        // The responder refuses at once, with a reject and C clear.
                        EXPECT_EQ(x.responder.state(), MpaState::failed);
                        EXPECT_EQ(x.responder.error(), MpaError::crc_refused);
                        x.reply();
                        EXPECT_EQ(x.initiator.state(), MpaState::rejected);
                        continue;
                    }
                    ASSERT_EQ(x.responder.state(), MpaState::request_received);
                    EXPECT_EQ(bytes_of(x.responder.request().private_data), pd);
                    ASSERT_EQ(x.responder.accept(bytes_of("rpd"), 4, 4), MpaError::none);
                    x.reply();
                    const bool crc = c_req || cr == CrcPolicy::require;
                    const std::uint8_t rev = std::min(ri, rr);
                    if (crc && ci == CrcPolicy::refuse) {
                        EXPECT_EQ(x.initiator.state(), MpaState::failed);
                        EXPECT_EQ(x.initiator.error(), MpaError::crc_refused);
                        continue;
                    }
                    ASSERT_EQ(x.initiator.state(), MpaState::established);
                    EXPECT_EQ(x.responder.state(), MpaState::established);
                    EXPECT_EQ(x.initiator.result().crc, crc);
                    EXPECT_EQ(x.responder.result().crc, crc);
                    EXPECT_EQ(x.initiator.result().revision, rev);
                    EXPECT_EQ(x.responder.result().revision, rev);
                    EXPECT_EQ(bytes_of(x.initiator.result().peer_private_data), bytes_of("rpd"));
                    EXPECT_EQ(bytes_of(x.responder.result().peer_private_data), pd);
                }
            }
        }
    }
}

TEST(MpaNegotiation, a_request_for_markers_is_rejected_with_m_clear_as_siw_does) {
    for (std::uint8_t rev : {1, 2}) {
        MpaFrame f;
        f.markers = true;
        f.crc = true;
        f.revision = rev;
        f.enhanced = rev == 2;
        const Bytes req = encode(f);
        MpaResponder r(config(2, CrcPolicy::accept));
        EXPECT_EQ(r.on_bytes(req), req.size());
        EXPECT_EQ(r.state(), MpaState::failed);
        EXPECT_EQ(r.error(), MpaError::markers_requested);
        const MpaDecoded rep = decode_frame(r.reply(), FrameKind::reply);
        ASSERT_EQ(rep.error, MpaError::none);
        EXPECT_TRUE(rep.frame.reject);
        EXPECT_FALSE(rep.frame.markers);
        EXPECT_EQ(rep.frame.revision, rev);
        EXPECT_EQ(r.accept({}, 1, 1), MpaError::wrong_state);
    }
}

TEST(MpaNegotiation, a_reply_asking_for_markers_fails_the_initiator) {
    MpaInitiator i(config(2, CrcPolicy::require), {});
    MpaFrame f;
    f.kind = FrameKind::reply;
    f.markers = f.crc = f.enhanced = true;
    const Bytes rep = encode(f);
    EXPECT_EQ(i.on_bytes(rep), rep.size());
    EXPECT_EQ(i.state(), MpaState::failed);
    EXPECT_EQ(i.error(), MpaError::markers_requested);
}

TEST(MpaNegotiation, our_frames_never_ask_for_markers) {
    MpaInitiator i(config(2, CrcPolicy::require), {});
    EXPECT_EQ(i.request()[16] & mpa_flag::kMarkers, 0);
    Exchange x(config(1, CrcPolicy::accept), {}, config(2, CrcPolicy::require));
    x.request();
    ASSERT_EQ(x.responder.accept({}, 0, 0), MpaError::none);
    EXPECT_EQ(x.responder.reply()[16] & mpa_flag::kMarkers, 0);
}

TEST(MpaNegotiation, reject_carries_the_responders_private_data_to_the_initiator) {
    for (std::uint8_t rev : {1, 2}) {
        Exchange x(config(rev, CrcPolicy::require), bytes_of("please"),
                   config(2, CrcPolicy::accept));
        x.request();
        ASSERT_EQ(x.responder.state(), MpaState::request_received);
        ASSERT_EQ(x.responder.reject(bytes_of("no thanks")), MpaError::none);
        EXPECT_EQ(x.responder.state(), MpaState::rejected);
        EXPECT_EQ(x.responder.reject({}), MpaError::wrong_state);
        x.reply();
        EXPECT_EQ(x.initiator.state(), MpaState::rejected);
        EXPECT_EQ(bytes_of(x.initiator.result().peer_private_data), bytes_of("no thanks"));
        EXPECT_EQ(x.initiator.result().revision, rev);
    }
}

// RFC 6581 §9.2: the responder's ORD comes down to the initiator's IRD; the initiator's ORD
// comes down to the responder's IRD.
TEST(MpaNegotiation, ird_ord_are_lowered_to_what_the_other_side_takes) {
    Exchange x(config(2, CrcPolicy::require, /*ird=*/4, /*ord=*/8), {},
               config(2, CrcPolicy::require));
    x.request();
    EXPECT_EQ(x.responder.request().ird_ord.ird, 4);
    EXPECT_EQ(x.responder.request().ird_ord.ord, 8);
    ASSERT_EQ(x.responder.accept({}, /*ird=*/2, /*ord=*/16), MpaError::none);
    EXPECT_EQ(x.responder.result().ird, 2);
    EXPECT_EQ(x.responder.result().ord, 4);
    x.reply();
    ASSERT_EQ(x.initiator.state(), MpaState::established);
    EXPECT_EQ(x.initiator.result().ird, 4);
    EXPECT_EQ(x.initiator.result().ord, 2);
}

// siw_accept's relaxed negotiation: a responder whose IRD is below the initiator's ORD
// grows it to that ORD as far as its max_ird goes; the reply says so, and the initiator
// keeps its ORD.
TEST(MpaNegotiation, a_responder_ird_grows_to_the_initiators_ord_within_its_most) {
    MpaConfig resp = config(2, CrcPolicy::require);
    resp.max_ird = 6;
    for (const std::uint16_t ask : {std::uint16_t{5}, std::uint16_t{9}}) {
        Exchange x(config(2, CrcPolicy::require, /*ird=*/4, /*ord=*/ask), {}, resp);
        x.request();
        ASSERT_EQ(x.responder.accept({}, /*ird=*/2, /*ord=*/3), MpaError::none);
        const std::uint16_t grown = ask <= 6 ? ask : 6;
        EXPECT_EQ(x.responder.result().ird, grown);
        EXPECT_EQ(x.responder.result().ord, 3);
        x.reply();
        ASSERT_EQ(x.initiator.state(), MpaState::established);
        EXPECT_EQ(x.initiator.result().ord, grown);  // lowered only when we could not give
        EXPECT_EQ(x.initiator.result().ird, 4);
    }
}

MpaFrame v2_reply(std::uint16_t ird, std::uint16_t ord) {
    MpaFrame f;
    f.kind = FrameKind::reply;
    f.crc = f.enhanced = true;
    f.ird_ord = {ird, ord, false, 0};
    return f;
}

TEST(MpaNegotiation, a_responder_ord_above_our_ird_is_insufficient_ird_unless_we_may_grow) {
    const Bytes rep = encode(v2_reply(4, 6));
    MpaInitiator strict(config(2, CrcPolicy::require, 4, 4), {});
    strict.on_bytes(rep);
    EXPECT_EQ(strict.state(), MpaState::failed);
    EXPECT_EQ(strict.error(), MpaError::insufficient_ird);
    MpaConfig c = config(2, CrcPolicy::require, 4, 4);
    c.max_ird = 6;
    MpaInitiator relaxed(c, {});
    relaxed.on_bytes(rep);
    ASSERT_EQ(relaxed.state(), MpaState::established);
    EXPECT_EQ(relaxed.result().ird, 6);
    EXPECT_EQ(relaxed.result().ord, 4);
}

TEST(MpaNegotiation, revision_1_exchanges_no_ird_ord_and_keeps_ours) {
    Exchange x(config(1, CrcPolicy::require, 3, 5), bytes_of("x"), config(2, CrcPolicy::accept));
    EXPECT_EQ(x.initiator.request().size(), 21u);
    x.request();
    EXPECT_FALSE(x.responder.request().enhanced);
    ASSERT_EQ(x.responder.accept({}, 7, 9), MpaError::none);
    EXPECT_EQ(x.responder.reply().size(), 20u);
    EXPECT_EQ(x.responder.result().ird, 7);
    EXPECT_EQ(x.responder.result().ord, 9);
    x.reply();
    ASSERT_EQ(x.initiator.state(), MpaState::established);
    EXPECT_EQ(x.initiator.result().ird, 3);
    EXPECT_EQ(x.initiator.result().ord, 5);
}

TEST(MpaNegotiation, a_reply_of_a_higher_revision_than_the_request_is_bad) {
    MpaInitiator i(config(1, CrcPolicy::require), {});
    const Bytes rep = encode(v2_reply(1, 1));
    i.on_bytes(rep);
    EXPECT_EQ(i.state(), MpaState::failed);
    EXPECT_EQ(i.error(), MpaError::bad_revision);
}

TEST(MpaNegotiation, a_revision_2_reply_without_the_ird_ord_header_is_refused) {
    MpaInitiator i(config(2, CrcPolicy::require), {});
    MpaFrame f = v2_reply(1, 1);
    f.enhanced = false;
    i.on_bytes(encode(f));
    EXPECT_EQ(i.state(), MpaState::failed);
    EXPECT_EQ(i.error(), MpaError::missing_ird_ord);
}

MpaConfig p2p(std::uint8_t rtr, std::uint16_t ird = 4, std::uint16_t ord = 4) {
    MpaConfig c = config(2, CrcPolicy::require, ird, ord);
    c.peer_to_peer = true;
    c.rtr = rtr;
    return c;
}

TEST(MpaNegotiation, peer_to_peer_picks_one_rtr_both_take_write_first) {
    struct Case {
        std::uint8_t offered, taken;
        Rtr rtr;
    };
    const Case cases[] = {
        {kRtrAll, kRtrAll, Rtr::write},
        {kRtrWrite | kRtrRead, kRtrRead, Rtr::read},
        {kRtrSend | kRtrRead, kRtrAll, Rtr::read},
        {kRtrSend, kRtrSend | kRtrWrite, Rtr::send},
        {0, kRtrWrite | kRtrRead, Rtr::write},  // siw: none offered, propose Write
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(testing::Message()
                     << "offered " << int{c.offered} << " taken " << int{c.taken});
        Exchange x(p2p(c.offered), {}, p2p(c.taken));
        x.request();
        EXPECT_TRUE(x.responder.request().ird_ord.peer_to_peer);
        EXPECT_EQ(x.responder.request().ird_ord.rtr, c.offered);
        ASSERT_EQ(x.responder.accept({}, 4, 4), MpaError::none);
        EXPECT_EQ(x.responder.result().rtr, c.rtr);
        const MpaDecoded rep = decode_frame(x.responder.reply(), FrameKind::reply);
        EXPECT_TRUE(rep.frame.ird_ord.peer_to_peer);
        EXPECT_EQ(std::popcount(rep.frame.ird_ord.rtr), 1);  // exactly one kind
        x.reply();
        if (c.offered == 0) {
            // We offered none, so no kind of the reply is ours.
            EXPECT_EQ(x.initiator.error(), MpaError::no_matching_rtr);
            continue;
        }
        ASSERT_EQ(x.initiator.state(), MpaState::established);
        EXPECT_EQ(x.initiator.result().rtr, c.rtr);
    }
}

TEST(MpaNegotiation, no_common_rtr_fails_accept_without_effect_and_reject_still_works) {
    Exchange x(p2p(kRtrRead), {}, p2p(kRtrSend));
    x.request();
    EXPECT_EQ(x.responder.accept({}, 4, 4), MpaError::no_matching_rtr);
    EXPECT_EQ(x.responder.state(), MpaState::request_received);
    EXPECT_TRUE(x.responder.reply().empty());
    EXPECT_EQ(x.responder.reject({}), MpaError::none);
    x.reply();
    EXPECT_EQ(x.initiator.state(), MpaState::rejected);
}

// A responder that does not grant peer-to-peer mode (no P bit, or revision 1) leaves the
// initiator without an RTR, and the connection goes on: an RNIC without the mode still talks.
TEST(MpaNegotiation, peer_to_peer_against_a_responder_without_it_goes_on_without_rtr) {
    MpaConfig plain = config(2, CrcPolicy::require);
    Exchange x(p2p(kRtrWrite), {}, plain);
    x.request();
    ASSERT_EQ(x.responder.accept({}, 4, 4), MpaError::none);
    EXPECT_EQ(x.responder.result().rtr, Rtr::none);
    x.reply();
    ASSERT_EQ(x.initiator.state(), MpaState::established);
    EXPECT_EQ(x.initiator.result().rtr, Rtr::none);
    Exchange y(p2p(kRtrWrite), {}, config(1, CrcPolicy::require));  // a revision 1 responder
    y.request();
    ASSERT_EQ(y.responder.accept({}, 4, 4), MpaError::none);
    y.reply();
    ASSERT_EQ(y.initiator.state(), MpaState::established);
    EXPECT_EQ(y.initiator.result().rtr, Rtr::none);
}

// The ORD a responder reports to its ULP leaves out the read a Read RTR raised it by.
TEST(MpaNegotiation, the_read_rtr_read_is_not_the_ulps) {
    struct Case {
        std::uint8_t offered;  // by the initiator
        std::uint16_t ord;     // its ULP's
        bool responder_p2p;
        std::uint16_t ulp_ord;  // what the responder reports
    };
    for (const Case& c : {Case{kRtrRead, 0, true, 0}, Case{kRtrRead, 3, true, 3},
                          Case{kRtrWrite | kRtrRead, 0, true, 1},  // Write taken: the 1 stands
                          Case{kRtrRead, 0, false, 1}}) {
        MpaConfig resp =
            c.responder_p2p ? p2p(kRtrWrite | kRtrRead) : config(2, CrcPolicy::require);
        Exchange x(p2p(c.offered, 4, c.ord), {}, resp);
        x.request();
        EXPECT_EQ(x.responder.ulp_ord(), c.ulp_ord) << int(c.offered) << " " << c.ord;
    }
}

TEST(MpaNegotiation, a_read_rtr_needs_one_read_each_way) {
    Exchange x(p2p(kRtrRead, 0, 0), {}, p2p(kRtrRead));
    EXPECT_EQ(decode_frame(x.initiator.request(), FrameKind::request).frame.ird_ord.ord, 1);
    x.request();
    ASSERT_EQ(x.responder.accept({}, 0, 0), MpaError::none);
    EXPECT_EQ(x.responder.result().ird, 1);
    x.reply();
    ASSERT_EQ(x.initiator.state(), MpaState::established);
    EXPECT_EQ(x.initiator.result().ord, 1);
}

TEST(MpaNegotiation, bad_arguments_are_refused) {
    const Bytes pd509(509), pd508(508);
    EXPECT_EQ(MpaInitiator(config(2, CrcPolicy::require), pd509).error(), MpaError::bad_argument);
    EXPECT_EQ(MpaInitiator(config(2, CrcPolicy::require), pd508).state(), MpaState::awaiting_frame);
    EXPECT_EQ(MpaInitiator(config(1, CrcPolicy::require), Bytes(512)).request().size(), 532u);
    EXPECT_EQ(MpaInitiator(config(2, CrcPolicy::require, 0x4000), {}).error(),
              MpaError::bad_argument);
    EXPECT_EQ(MpaInitiator(config(3, CrcPolicy::require), {}).error(), MpaError::bad_argument);
    MpaConfig c = p2p(kRtrWrite);
    c.revision = 1;
    EXPECT_EQ(MpaInitiator(c, {}).error(), MpaError::bad_argument);
    EXPECT_TRUE(MpaInitiator(c, {}).request().empty());
    EXPECT_EQ(MpaResponder(config(0, CrcPolicy::require)).error(), MpaError::bad_argument);

    Exchange x(config(2, CrcPolicy::require), {}, config(2, CrcPolicy::require));
    EXPECT_EQ(x.responder.accept({}, 1, 1), MpaError::wrong_state);
    x.request();
    EXPECT_EQ(x.responder.accept({}, 0x4000, 1), MpaError::bad_argument);
    EXPECT_EQ(x.responder.accept(pd509, 1, 1), MpaError::bad_argument);
    EXPECT_EQ(x.responder.state(), MpaState::request_received);
    EXPECT_EQ(x.responder.accept(pd508, 1, 1), MpaError::none);
    EXPECT_EQ(x.responder.accept({}, 1, 1), MpaError::wrong_state);
}

// The frame comes in any split, and bytes after it (the first FPDU) are left to the engine.
TEST(MpaNegotiation, frames_split_at_every_byte_boundary_negotiate_the_same) {
    const Bytes ipd = bytes_of("initiator's private data");
    const Bytes fpdu = {0x00, 0x02, 0xaa, 0xbb, 0, 0, 0, 0};
    MpaInitiator ref(config(2, CrcPolicy::require, 2, 3), ipd);
    const Bytes req = cat(bytes_of(ref.request()), fpdu);
    for (std::size_t k = 0; k <= req.size(); ++k) {
        MpaResponder r(config(2, CrcPolicy::accept));
        const std::size_t a = r.on_bytes(std::span(req).first(k));
        const std::size_t b = r.on_bytes(std::span(req).subspan(a));
        EXPECT_EQ(a + b, ref.request().size()) << k;
        ASSERT_EQ(r.state(), MpaState::request_received) << k;
        EXPECT_EQ(bytes_of(r.request().private_data), ipd);
        EXPECT_EQ(r.request().ird_ord.ird, 2);
        ASSERT_EQ(r.accept(bytes_of("ok"), 3, 3), MpaError::none);

        const Bytes rep = cat(bytes_of(r.reply()), fpdu);
        MpaInitiator i(config(2, CrcPolicy::require, 2, 3), ipd);
        const std::size_t c = i.on_bytes(std::span(rep).first(k % (rep.size() + 1)));
        const std::size_t d = i.on_bytes(std::span(rep).subspan(c));
        EXPECT_EQ(c + d, r.reply().size()) << k;
        ASSERT_EQ(i.state(), MpaState::established) << k;
        EXPECT_EQ(i.result().ord, 3);
        EXPECT_EQ(bytes_of(i.result().peer_private_data), bytes_of("ok"));
        EXPECT_EQ(i.on_bytes(fpdu), 0u);  // done: nothing more is MPA's
    }
    // One byte at a time.
    MpaResponder r(config(2, CrcPolicy::accept));
    std::size_t taken = 0;
    for (std::uint8_t byte : req) taken += r.on_bytes(std::span(&byte, 1));
    EXPECT_EQ(taken, ref.request().size());
    EXPECT_EQ(r.state(), MpaState::request_received);
}

TEST(MpaNegotiation, garbage_fails_cleanly_and_never_reads_past_the_frame) {
    std::mt19937 rng(6581);
    MpaInitiator ref(config(2, CrcPolicy::require), bytes_of("pd"));
    const Bytes good = bytes_of(ref.request());
    std::size_t failed = 0;
    for (int round = 0; round < 3000; ++round) {
        Bytes b = good;
        if (round % 3 == 0) {
            b.assign(rng() % 64, 0);
            for (auto& x : b) x = static_cast<std::uint8_t>(rng());
        } else {
            // Flip a few bytes past the key: flags, revision, lengths, the IRD/ORD header.
            for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) {
                b[16 + rng() % (b.size() - 16)] = static_cast<std::uint8_t>(rng());
            }
        }
        MpaResponder r(config(2, CrcPolicy::accept));
        const std::size_t taken = r.on_bytes(b);
        EXPECT_LE(taken, b.size());
        if (r.state() == MpaState::failed) {
            ++failed;
            EXPECT_NE(r.error(), MpaError::none);
        } else if (r.state() == MpaState::request_received) {
            EXPECT_EQ(taken, r.request().length);
            EXPECT_LE(r.request().private_data.size(), kMpaMaxPrivateData);
        } else {
            EXPECT_EQ(taken, b.size());  // waiting for the rest
        }
    }
    EXPECT_GT(failed, 1000u);
}

// --- FPDUs -------------------------------------------------------------------------------

TEST(MpaFpdu, size_is_length_ulpdu_pad_to_4_and_crc) {
    EXPECT_EQ(fpdu_size(0), 8u);
    EXPECT_EQ(fpdu_size(1), 8u);
    EXPECT_EQ(fpdu_size(2), 8u);
    EXPECT_EQ(fpdu_size(3), 12u);
    EXPECT_EQ(fpdu_size(34), 40u);  // siw's first rping FPDU
    EXPECT_EQ(fpdu_size(65535), 65544u);
}

TEST(MpaFpdu, max_ulpdu_is_the_largest_that_fits_the_mss) {
    EXPECT_EQ(max_ulpdu(1460), 1454u);
    EXPECT_EQ(max_ulpdu(7), 0u);
    EXPECT_EQ(max_ulpdu(8), 2u);
    for (std::size_t mss = 8; mss < 70000; ++mss) {
        const std::size_t u = max_ulpdu(mss);
        ASSERT_LE(fpdu_size(u), mss) << mss;
        if (u < kMaxUlpdu) {
            ASSERT_GT(fpdu_size(u + 1), mss) << mss;
        }
    }
}

TEST(MpaFpdu, write_puts_length_ulpdu_zero_pad_and_the_crc_least_significant_byte_first) {
    const Bytes header = {1, 2, 3};
    const Bytes payload = {4, 5, 6, 7};
    Bytes out(16, 0xee);
    ASSERT_EQ(write_fpdu(out, header, payload, true), 16u);
    EXPECT_EQ(out[0], 0);
    EXPECT_EQ(out[1], 7);
    EXPECT_EQ(Bytes(out.begin() + 2, out.begin() + 9), (Bytes{1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(Bytes(out.begin() + 9, out.begin() + 12), (Bytes{0, 0, 0}));
    const std::uint32_t crc = crc::Crc32c::compute(std::span(out).first(12));
    EXPECT_EQ(out[12], crc & 0xff);
    EXPECT_EQ(out[15], crc >> 24);
    ASSERT_EQ(write_fpdu(out, header, payload, false), 16u);
    EXPECT_EQ(Bytes(out.begin() + 12, out.end()), (Bytes{0, 0, 0, 0}));  // CRCs off
    EXPECT_EQ(write_fpdu(std::span(out).first(15), header, payload, true), 0u);
    Bytes big(fpdu_size(65536));
    EXPECT_EQ(write_fpdu(big, Bytes(65536), {}, true), 0u);
}

TEST(MpaFpdu, pieces_already_in_place_are_not_moved) {
    Bytes out(64);
    for (std::size_t i = 0; i < 30; ++i) out[2 + i] = static_cast<std::uint8_t>(i * 7);
    const Bytes expect_ulpdu(out.begin() + 2, out.begin() + 32);
    const std::span<const std::uint8_t> header(out.data() + 2, 10);
    const std::span<const std::uint8_t> payload(out.data() + 12, 20);
    ASSERT_EQ(write_fpdu(out, header, payload, true), 36u);
    EXPECT_EQ(Bytes(out.begin() + 2, out.begin() + 32), expect_ulpdu);
    Bytes copied(64);
    ASSERT_EQ(write_fpdu(copied, expect_ulpdu, {}, true), 36u);
    EXPECT_EQ(Bytes(out.begin(), out.begin() + 36), Bytes(copied.begin(), copied.begin() + 36));
}

// The CRC-32C folded while the payload is copied in (begin_fpdu, update_copy,
// seal_fpdu_folded) is the FPDU seal_fpdu makes of the same ULPDU, pad and CRC included.
TEST(MpaFpdu, folding_the_crc_while_copying_makes_the_same_fpdu) {
    for (const std::size_t head : {0, 1, 14, 28}) {
        for (const std::size_t len : {0, 1, 3, 255, 256, 1001, 1420, 8192}) {
            Bytes ulpdu(head + len);
            for (std::size_t i = 0; i < ulpdu.size(); ++i)
                ulpdu[i] = static_cast<std::uint8_t>(i * 13 + len);
            Bytes want(fpdu_size(ulpdu.size()) + 8, 0xee);
            ASSERT_EQ(write_fpdu(want, ulpdu, {}, true), fpdu_size(ulpdu.size()));

            Bytes got(want.size(), 0xee);
            std::copy_n(ulpdu.begin(), head, got.begin() + 2);  // the header, written in place
            std::uint32_t reg = begin_fpdu(got, ulpdu.size(), head);
            reg = crc::Crc32c::update_copy(reg, got.data() + 2 + head,
                                           std::span(ulpdu).subspan(head));
            ASSERT_EQ(seal_fpdu_folded(got, ulpdu.size(), reg), fpdu_size(ulpdu.size()));
            EXPECT_EQ(got, want) << head << " + " << len;
        }
    }
    Bytes small(fpdu_size(10) - 1);
    EXPECT_EQ(seal_fpdu_folded(small, 10, begin_fpdu(small, 10, 0)), 0u);  // does not fit
    Bytes big(fpdu_size(65536));
    EXPECT_EQ(seal_fpdu_folded(big, 65536, begin_fpdu(big, 65536, 0)), 0u);  // past the limit
}

// A stream of FPDUs of every ULPDU length 0..40, with CRCs.
struct Stream {
    Bytes bytes;
    std::vector<Bytes> ulpdus;
};

Stream make_stream(bool crc) {
    Stream s;
    for (std::size_t len = 0; len <= 40; ++len) {
        Bytes u(len);
        for (std::size_t i = 0; i < len; ++i) u[i] = static_cast<std::uint8_t>(len + 3 * i);
        Bytes f(fpdu_size(len));
        EXPECT_EQ(write_fpdu(f, u, {}, crc), f.size());
        s.bytes.insert(s.bytes.end(), f.begin(), f.end());
        s.ulpdus.push_back(u);
    }
    return s;
}

std::vector<Bytes> deframe(FpduDeframer& d, std::span<const std::uint8_t> in,
                           FpduDeframer::Status expect = FpduDeframer::Status::need_more) {
    std::vector<Bytes> got;
    EXPECT_EQ(d.feed(in, [&](std::span<const std::uint8_t> u) { got.push_back(bytes_of(u)); }),
              expect);
    return got;
}

TEST(MpaFpdu, deframer_yields_whole_fpdus_in_place) {
    const Stream s = make_stream(true);
    FpduDeframer d(1024, true);
    std::span<const std::uint8_t> in = s.bytes;
    std::size_t n = 0;
    while (!in.empty()) {
        const auto step = d.next(in);
        ASSERT_EQ(step.status, FpduDeframer::Status::fpdu);
        EXPECT_EQ(step.ulpdu.data(), in.data() + 2);  // no copy
        EXPECT_EQ(bytes_of(step.ulpdu), s.ulpdus[n++]);
        in = in.subspan(step.consumed);
    }
    EXPECT_EQ(n, s.ulpdus.size());
    EXPECT_EQ(d.buffered(), 0u);
    EXPECT_EQ(d.fpdus(), n);
}

TEST(MpaFpdu, deframer_split_at_every_byte_boundary_yields_the_same_ulpdus) {
    const Stream s = make_stream(true);
    for (std::size_t k = 0; k <= s.bytes.size(); ++k) {
        FpduDeframer d(1024, true);
        auto got = deframe(d, std::span(s.bytes).first(k));
        const auto rest = deframe(d, std::span(s.bytes).subspan(k));
        got.insert(got.end(), rest.begin(), rest.end());
        ASSERT_EQ(got, s.ulpdus) << k;
        EXPECT_EQ(d.buffered(), 0u);
    }
    FpduDeframer d(1024, true);
    std::vector<Bytes> got;
    for (std::uint8_t b : s.bytes) {
        const auto one = deframe(d, std::span(&b, 1));
        got.insert(got.end(), one.begin(), one.end());
    }
    EXPECT_EQ(got, s.ulpdus);
}

TEST(MpaFpdu, a_flipped_byte_is_a_crc_error_that_sticks) {
    const Stream s = make_stream(true);
    std::size_t ulpdu_20 = 2;  // the third byte of the ULPDU of 20 bytes
    for (std::size_t len = 0; len < 20; ++len) ulpdu_20 += fpdu_size(len);
    for (std::size_t at : {std::size_t{1}, ulpdu_20 + 2, s.bytes.size() - 1}) {
        Bytes bad = s.bytes;
        bad[at] ^= 0x01;
        FpduDeframer d(1024, true);
        std::vector<Bytes> got;
        std::span<const std::uint8_t> in = bad;
        FpduDeframer::Status st = FpduDeframer::Status::need_more;
        while (true) {
            const auto step = d.next(in);
            st = step.status;
            if (st != FpduDeframer::Status::fpdu) break;
            got.push_back(bytes_of(step.ulpdu));
            in = in.subspan(step.consumed);
        }
        // Byte 1 is the first length: the FPDU then ends elsewhere and its CRC is wrong too.
        EXPECT_EQ(st, FpduDeframer::Status::crc_error) << at;
        EXPECT_LT(got.size(), s.ulpdus.size());
        EXPECT_EQ(d.next(s.bytes).status, FpduDeframer::Status::crc_error);  // sticks
    }
}

// With set_fold, an FPDU of crc::kCopyFoldMin bytes of ULPDU or more comes unchecked, and
// its reader's FpduCrcFold finds what the deframer would have: the CRC folded from pieces
// copied in order with gaps between them, a flipped byte anywhere (copied or not) found.
TEST(MpaFpdu, a_large_fpdu_is_left_to_its_readers_fold) {
    std::mt19937 rng(3);
    for (const std::size_t len :
         {std::size_t{crc::kCopyFoldMin} - 1, std::size_t{crc::kCopyFoldMin}, std::size_t{3000}}) {
        Bytes ulpdu(len);
        for (auto& x : ulpdu) x = static_cast<std::uint8_t>(rng());
        Bytes fpdu(fpdu_size(len));
        ASSERT_EQ(write_fpdu(fpdu, std::span(ulpdu).first(14), std::span(ulpdu).subspan(14), true),
                  fpdu.size());
        for (const std::size_t flip : {~std::size_t{0}, std::size_t{5}, std::size_t{40},
                                       std::size_t{2 + len - 1}, fpdu.size() - 1}) {
            Bytes in = fpdu;
            if (flip != ~std::size_t{0}) in[flip] ^= 0x04;
            FpduDeframer d(kMaxUlpdu, true);
            d.set_fold(true);
            const auto step = d.next(in);
            if (len < crc::kCopyFoldMin) {
                // Checked by the deframer, as without set_fold.
                EXPECT_EQ(step.status, flip == ~std::size_t{0} ? FpduDeframer::Status::fpdu
                                                               : FpduDeframer::Status::crc_error);
                EXPECT_TRUE(step.unchecked.empty());
                continue;
            }
            ASSERT_EQ(step.status, FpduDeframer::Status::fpdu) << len << " " << flip;
            ASSERT_EQ(step.unchecked.size(), fpdu.size());
            // The payload copied in three pieces with gaps (folded, not copied) between them.
            FpduCrcFold fold(step.unchecked);
            Bytes out(len);
            const std::uint8_t* u = step.ulpdu.data();
            fold.place(out.data() + 20, {u + 20, 100});
            fold.place(out.data() + 150, {u + 150, 50});
            fold.place(out.data() + 230, {u + 230, len - 240});
            EXPECT_TRUE(std::equal(out.begin() + 20, out.begin() + 120, u + 20));
            EXPECT_TRUE(
                std::equal(out.begin() + 230, out.begin() + static_cast<long>(len - 10), u + 230));
            EXPECT_EQ(fold.verify(), flip == ~std::size_t{0}) << len << " " << flip;
            EXPECT_EQ(fold.verify(), flip == ~std::size_t{0});  // the same answer again
        }
    }
    FpduCrcFold none;  // nothing to check: copies, and is good
    const std::array<std::uint8_t, 3> src{1, 2, 3};
    std::array<std::uint8_t, 3> dst{};
    none.place(dst.data(), src);
    EXPECT_EQ(dst, src);
    EXPECT_TRUE(none.verify());
}

TEST(MpaFpdu, with_crcs_off_the_crc_field_is_not_checked) {
    Stream s = make_stream(false);
    s.bytes[s.bytes.size() - 1] = 0x5a;  // the last CRC field
    FpduDeframer d(1024, false);
    EXPECT_EQ(deframe(d, s.bytes), s.ulpdus);
}

TEST(MpaFpdu, a_ulpdu_length_past_the_limit_is_fatal) {
    const Stream s = make_stream(true);
    FpduDeframer d(39, true);
    const auto got = deframe(d, s.bytes, FpduDeframer::Status::too_long);
    EXPECT_EQ(got.size(), 40u);  // 0..39
    FpduDeframer split(39, true);
    const std::size_t last = s.bytes.size() - fpdu_size(40);
    deframe(split, std::span(s.bytes).first(last + 1));
    EXPECT_EQ(split.next(std::span(s.bytes).subspan(last + 1)).status,
              FpduDeframer::Status::too_long);
}

}  // namespace
}  // namespace snic::iwarp
