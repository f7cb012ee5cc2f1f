// DDP/RDMAP headers: the opcode table, every opcode built and parsed back, hand-checked bytes
// of RFC 5040/5041/7306 layouts, and each rejection rule of parse().
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "proto/iwarp/ddp.h"

namespace snic::iwarp {
namespace {

std::vector<std::uint8_t> build(const SegmentSpec& spec,
                                std::span<const std::uint8_t> payload = {}) {
    std::vector<std::uint8_t> b(built_header_len(spec) + payload.size());
    const std::size_t n = build_header(b, spec);
    EXPECT_EQ(n, built_header_len(spec));
    std::copy(payload.begin(), payload.end(), b.begin() + static_cast<long>(n));
    return b;
}

TEST(DdpTable, opcodes_match_rfc5040_and_rfc7306) {
    EXPECT_EQ(static_cast<int>(RdmapOp::write), 0);
    EXPECT_EQ(static_cast<int>(RdmapOp::read_request), 1);
    EXPECT_EQ(static_cast<int>(RdmapOp::read_response), 2);
    EXPECT_EQ(static_cast<int>(RdmapOp::send), 3);
    EXPECT_EQ(static_cast<int>(RdmapOp::send_inv), 4);
    EXPECT_EQ(static_cast<int>(RdmapOp::send_se), 5);
    EXPECT_EQ(static_cast<int>(RdmapOp::send_se_inv), 6);
    EXPECT_EQ(static_cast<int>(RdmapOp::terminate), 7);
    EXPECT_EQ(static_cast<int>(RdmapOp::immediate), 8);
    EXPECT_EQ(static_cast<int>(RdmapOp::immediate_se), 9);
    EXPECT_EQ(static_cast<int>(RdmapOp::atomic_request), 0xa);
    EXPECT_EQ(static_cast<int>(RdmapOp::atomic_response), 0xb);
    for (std::size_t i = 0xc; i < kRdmapOpCount; ++i) EXPECT_FALSE(kOpTable[i].valid);
}

TEST(DdpTable, tagged_only_write_and_read_response) {
    for (std::size_t i = 0; i < kRdmapOpCount; ++i) {
        const auto op = static_cast<RdmapOp>(i);
        EXPECT_EQ(op_info(op).tagged, op == RdmapOp::write || op == RdmapOp::read_response) << i;
    }
}

TEST(DdpTable, queue_numbers) {
    EXPECT_EQ(op_info(RdmapOp::send).qn, Queue::send);
    EXPECT_EQ(op_info(RdmapOp::send_se_inv).qn, Queue::send);
    EXPECT_EQ(op_info(RdmapOp::immediate).qn, Queue::send);
    EXPECT_EQ(op_info(RdmapOp::read_request).qn, Queue::read_request);
    EXPECT_EQ(op_info(RdmapOp::atomic_request).qn, Queue::read_request);
    EXPECT_EQ(op_info(RdmapOp::terminate).qn, Queue::terminate);
    EXPECT_EQ(op_info(RdmapOp::atomic_response).qn, Queue::atomic_response);
}

TEST(DdpBytes, send_header_hand_checked) {
    SegmentSpec s;
    s.op = RdmapOp::send;
    s.last = true;
    s.msn = 1;
    s.mo = 0x1234;
    const std::array<std::uint8_t, 3> pl = {0xaa, 0xbb, 0xcc};
    const auto b = build(s, pl);
    const std::vector<std::uint8_t> want = {0x41, 0x43, 0, 0, 0, 0,    0,    0,    0,    0,   0,
                                            0,    0,    1, 0, 0, 0x12, 0x34, 0xaa, 0xbb, 0xcc};
    EXPECT_EQ(b, want);
}

TEST(DdpBytes, send_inv_se_not_last_hand_checked) {
    SegmentSpec s;
    s.op = RdmapOp::send_se_inv;
    s.last = false;
    s.inv_stag = 0xdeadbeef;
    s.msn = 0x01020304;
    const auto b = build(s);
    const std::vector<std::uint8_t> want = {0x01, 0x46, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0,
                                            0,    1,    2,    3,    4,    0,    0, 0, 0};
    EXPECT_EQ(b, want);
}

TEST(DdpBytes, write_header_hand_checked) {
    SegmentSpec s;
    s.op = RdmapOp::write;
    s.last = false;
    s.stag = 0x12345678;
    s.to = 0x1122334455667788ull;
    const auto b = build(s);
    const std::vector<std::uint8_t> want = {0x81, 0x40, 0x12, 0x34, 0x56, 0x78, 0x11,
                                            0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
    EXPECT_EQ(b, want);
}

TEST(DdpBytes, read_request_hand_checked) {
    SegmentSpec s;
    s.op = RdmapOp::read_request;
    s.msn = 7;
    s.read = {0xa1a2a3a4, 0x0102030405060708ull, 0x00010000, 0xb1b2b3b4, 0x1112131415161718ull};
    const auto b = build(s);
    ASSERT_EQ(b.size(), 18u + 28u);
    const std::vector<std::uint8_t> want = {
        0x41, 0x41, 0,    0,    0,    0,    0,    0,    0,    1,    0,    0,    0,    7,   0, 0,
        0,    0,    0xa1, 0xa2, 0xa3, 0xa4, 1,    2,    3,    4,    5,    6,    7,    8,   0, 1,
        0,    0,    0xb1, 0xb2, 0xb3, 0xb4, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};
    EXPECT_EQ(b, want);
}

TEST(DdpBytes, terminate_hand_checked) {
    // DDP untagged "no buffer" for a Send: control 0x12 0x02, Hdrct M|D, then the segment
    // length and the copied 18-byte header.
    SegmentSpec send;
    send.op = RdmapOp::send;
    send.msn = 5;
    const auto hdr = build(send);
    SegmentSpec t;
    t.op = RdmapOp::terminate;
    t.msn = 1;
    t.cause = term_cause(DdpUntaggedCode::no_buffer);
    t.term_ddp_header = hdr;
    t.term_ddp_seg_len = 0x40;
    t.term_seg_len_valid = true;
    const auto b = build(t);
    ASSERT_EQ(b.size(), 18u + 4u + 2u + 18u);
    const std::vector<std::uint8_t> head = {0x41, 0x47, 0,    0,    0,    0,    0,    0,
                                            0,    2,    0,    0,    0,    1,    0,    0,
                                            0,    0,    0x12, 0x02, 0xc0, 0x00, 0x00, 0x40};
    EXPECT_TRUE(std::equal(head.begin(), head.end(), b.begin()));
    EXPECT_TRUE(std::equal(hdr.begin(), hdr.end(), b.begin() + 24));
    const Segment p = parse(b);
    ASSERT_TRUE(p.ok()) << parse_error_name(p.error);
    EXPECT_EQ(p.term.cause, term_cause(DdpUntaggedCode::no_buffer));
    EXPECT_TRUE(p.term.m);
    EXPECT_TRUE(p.term.d);
    EXPECT_FALSE(p.term.r);
    EXPECT_EQ(p.term.ddp_seg_len, 0x40);
    EXPECT_TRUE(std::equal(hdr.begin(), hdr.end(), p.term.ddp_header.begin()));
    EXPECT_EQ(term_cause_name(p.term.cause), "ddp_untagged/no_buffer");
}

TEST(DdpBytes, atomic_request_and_response_layout) {
    SegmentSpec s;
    s.op = RdmapOp::atomic_request;
    s.msn = 2;
    s.atomic = {AtomicOp::compare_swap, 9, 0x55, 0x1000, 1, ~0ull, 2, ~0ull};
    const auto b = build(s);
    ASSERT_EQ(b.size(), 18u + 52u);
    EXPECT_EQ(b[1], 0x4a);
    EXPECT_EQ(b[9], 1);       // QN 1, with Read Requests
    EXPECT_EQ(b[18 + 3], 2);  // AtomicOp CmpSwap in the low bits of the first word
    EXPECT_EQ(b[18 + 7], 9);  // request id
    EXPECT_EQ(b[18 + 11], 0x55);
    SegmentSpec r;
    r.op = RdmapOp::atomic_response;
    r.msn = 2;
    r.atomic_resp = {9, 0x0102030405060708ull};
    const auto rb = build(r);
    ASSERT_EQ(rb.size(), 18u + 12u);
    EXPECT_EQ(rb[1], 0x4b);
    EXPECT_EQ(rb[9], 3);  // QN 3
    EXPECT_EQ(rb[18 + 3], 9);
    EXPECT_EQ(rb[18 + 4], 1);
    EXPECT_EQ(rb[18 + 11], 8);
}

TEST(DdpRoundTrip, every_opcode) {
    const std::array<std::uint8_t, 5> pl = {1, 2, 3, 4, 5};
    for (std::size_t i = 0; i < 0xc; ++i) {
        const auto op = static_cast<RdmapOp>(i);
        const OpInfo& info = op_info(op);
        SegmentSpec s;
        s.op = op;
        s.last = true;
        s.stag = 0x1000 + static_cast<std::uint32_t>(i);
        s.to = 0xabc00000000ull + i;
        s.inv_stag = 0x77;
        s.msn = 3;
        s.mo = info.fixed ? 0 : 100;
        s.read = {1, 2, 3, 4, 5};
        s.atomic = {AtomicOp::fetch_add, 6, 7, 8, 9, 10, 11, 12};
        s.atomic_resp = {13, 14};
        s.immediate = {1, 2, 3, 4, 0, 0, 0, 0};
        s.cause = term_cause(RdmapEtype::remote_protection, RdmapCode::access_rights);
        const auto b = build(
            s, info.payload ? std::span<const std::uint8_t>(pl) : std::span<const std::uint8_t>{});
        const Segment p = parse(b);
        ASSERT_TRUE(p.ok()) << info.name << " " << parse_error_name(p.error);
        EXPECT_EQ(p.op, op);
        EXPECT_EQ(p.tagged, info.tagged);
        EXPECT_TRUE(p.last);
        if (info.tagged) {
            EXPECT_EQ(p.stag, s.stag);
            EXPECT_EQ(p.to, s.to);
        } else {
            EXPECT_EQ(p.qn, static_cast<std::uint32_t>(info.qn));
            EXPECT_EQ(p.msn, 3u);
            EXPECT_EQ(p.mo, s.mo);
            EXPECT_EQ(p.inv_stag, info.invalidate ? 0x77u : 0u);
        }
        EXPECT_EQ(p.payload.size(), info.payload ? pl.size() : 0u) << info.name;
        EXPECT_EQ(p.header.size() + p.payload.size(), b.size());
        switch (op) {
            case RdmapOp::read_request:
                EXPECT_EQ(p.read.sink_to, 2u);
                EXPECT_EQ(p.read.size, 3u);
                EXPECT_EQ(p.read.src_to, 5u);
                break;
            case RdmapOp::atomic_request:
                EXPECT_EQ(p.atomic.request_id, 6u);
                EXPECT_EQ(p.atomic.compare_mask, 12u);
                break;
            case RdmapOp::atomic_response:
                EXPECT_EQ(p.atomic_resp.orig, 14u);
                break;
            case RdmapOp::immediate:
            case RdmapOp::immediate_se:
                EXPECT_EQ(p.immediate, s.immediate);
                break;
            case RdmapOp::terminate:
                EXPECT_EQ(p.term.cause, s.cause);
                EXPECT_FALSE(p.term.d);
                break;
            default:
                break;
        }
    }
}

TEST(DdpParse, too_short) {
    SegmentSpec s;
    s.op = RdmapOp::read_request;
    auto b = build(s);
    for (std::size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(parse(std::span(b).first(n)).ok()) << n;
}

TEST(DdpParse, bad_versions) {
    SegmentSpec s;
    auto b = build(s);
    b[0] = static_cast<std::uint8_t>((b[0] & ~kDdpVersionMask) | 2);
    EXPECT_EQ(parse(b).error, ParseError::bad_ddp_version);
    EXPECT_EQ(parse_error_cause(ParseError::bad_ddp_version, false),
              term_cause(DdpUntaggedCode::invalid_version));
    b = build(s);
    b[1] = static_cast<std::uint8_t>(b[1] & 0x3f);  // RV 0 (RDMAC)
    EXPECT_EQ(parse(b).error, ParseError::bad_rdmap_version);
}

TEST(DdpParse, reserved_opcode_and_tag_mismatch) {
    SegmentSpec s;
    auto b = build(s);
    b[1] = static_cast<std::uint8_t>((b[1] & 0xf0) | 0xc);
    EXPECT_EQ(parse(b).error, ParseError::bad_opcode);
    b = build(s);
    b[0] |= kDdpTagged;  // a Send claiming the tagged model
    EXPECT_EQ(parse(b).error, ParseError::tagged_mismatch);
}

TEST(DdpParse, wrong_queue_number) {
    SegmentSpec s;
    s.op = RdmapOp::send;
    auto b = build(s);
    b[9] = 1;
    EXPECT_EQ(parse(b).error, ParseError::bad_qn);
    EXPECT_EQ(parse_error_cause(ParseError::bad_qn, false),
              term_cause(DdpUntaggedCode::invalid_qn));
}

TEST(DdpParse, single_segment_messages_need_last_and_exact_length) {
    SegmentSpec s;
    s.op = RdmapOp::read_request;
    auto b = build(s);
    b[0] &= static_cast<std::uint8_t>(~kDdpLast);
    EXPECT_EQ(parse(b).error, ParseError::not_last);
    b = build(s);
    b.push_back(0);
    EXPECT_EQ(parse(b).error, ParseError::bad_length);
}

TEST(DdpParse, terminate_promising_missing_headers) {
    SegmentSpec t;
    t.op = RdmapOp::terminate;
    t.cause = term_cause(RdmapEtype::remote_protection, RdmapCode::invalid_stag);
    auto b = build(t);
    b[18 + 2] |= 0x20;  // R without the 28 bytes
    EXPECT_EQ(parse(b).error, ParseError::bad_terminate);
}

TEST(DdpBuild, refuses_short_buffer_and_bad_copied_header) {
    SegmentSpec s;
    std::array<std::uint8_t, 10> small{};
    EXPECT_EQ(build_header(small, s), 0u);
    SegmentSpec t;
    t.op = RdmapOp::terminate;
    const std::array<std::uint8_t, 5> odd{};
    t.term_ddp_header = odd;
    std::array<std::uint8_t, 128> big{};
    EXPECT_EQ(build_header(big, t), 0u);
}

}  // namespace
}  // namespace snic::iwarp
