// DDP (RFC 5041) and RDMAP (RFC 5040, with RFC 7306's Immediate Data and Atomics) as they sit
// in one ULPDU, the payload of one MPA FPDU: the DDP and RDMAP control bytes, the tagged
// (14 bytes) and untagged (18 bytes) DDP headers, the RDMAP bodies of fixed size (Read
// Request, Atomic Request and Response, Terminate), the RDMAP opcode table and the Terminate
// error codes (RFC 5040 §7.2/§7.3, RFC 5041 §7.2, RFC 5044 §8). parse() turns ULPDU bytes
// into a Segment view; build_header() writes the headers of one segment. Pure: no
// allocation, no exceptions.
//
// Byte layout of every ULPDU (bit 0 = the most significant bit of byte 0):
//   byte 0  DDP control:   T (0x80) tagged, L (0x40) last segment, 4 reserved, DV (0x03) = 1
//   byte 1  RDMAP control: RV (0xc0) = 1, 2 reserved, opcode (0x0f)
//   tagged:   STag (4), TO (8)                                            -> 14 bytes
//   untagged: RDMAP's 32 bits (Invalidate STag or 0), QN (4), MSN (4), MO (4) -> 18 bytes
// then the RDMAP body of the opcode (if any), then the payload.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "proto/net/byteorder.h"

namespace snic::iwarp {

inline constexpr std::uint8_t kDdpVersion = 1;    // DV
inline constexpr std::uint8_t kRdmapVersion = 1;  // RV (RFC 5040; 0 was the pre-IETF RDMAC)

inline constexpr std::uint8_t kDdpTagged = 0x80;
inline constexpr std::uint8_t kDdpLast = 0x40;
inline constexpr std::uint8_t kDdpReserved = 0x3c;
inline constexpr std::uint8_t kDdpVersionMask = 0x03;
inline constexpr std::uint8_t kRdmapVersionShift = 6;
inline constexpr std::uint8_t kRdmapReserved = 0x30;
inline constexpr std::uint8_t kRdmapOpcodeMask = 0x0f;

inline constexpr std::size_t kTaggedHeaderLen = 14;
inline constexpr std::size_t kUntaggedHeaderLen = 18;

// --- wire structures (alignment 1: they overlay any byte buffer) ---------------------------

struct TaggedHeader {
    std::uint8_t ddp_ctrl;
    std::uint8_t rdmap_ctrl;
    net::Be32 stag;
    net::Be64 to;
};
static_assert(sizeof(TaggedHeader) == kTaggedHeaderLen && alignof(TaggedHeader) == 1);

struct UntaggedHeader {
    std::uint8_t ddp_ctrl;
    std::uint8_t rdmap_ctrl;
    net::Be32 inv_stag;  // RDMAP's use of DDP's reserved-for-ULP field; 0 unless Send w/ Inv.
    net::Be32 qn;
    net::Be32 msn;
    net::Be32 mo;
};
static_assert(sizeof(UntaggedHeader) == kUntaggedHeaderLen && alignof(UntaggedHeader) == 1);

// RFC 5040 §4.4: the body of an RDMA Read Request (untagged, QN 1).
struct ReadRequestBody {
    net::Be32 sink_stag;
    net::Be64 sink_to;
    net::Be32 size;  // RDMA Read Message Size
    net::Be32 src_stag;
    net::Be64 src_to;
};
static_assert(sizeof(ReadRequestBody) == 28 && alignof(ReadRequestBody) == 1);

// RFC 7306 §5.2.1: the body of an Atomic Request (untagged, QN 1, shared with Read Requests
// and bounded by the same IRD/ORD).
struct AtomicRequestBody {
    net::Be32 aopcode;  // 28 reserved bits, then AtomicOp
    net::Be32 request_id;
    net::Be32 stag;
    net::Be64 to;
    net::Be64 swap_add;       // Add Data (FetchAdd) or Swap Data (Swap, CmpSwap)
    net::Be64 swap_add_mask;  // Add Mask (carry boundaries) or Swap Mask
    net::Be64 compare;        // CmpSwap
    net::Be64 compare_mask;   // CmpSwap
};
static_assert(sizeof(AtomicRequestBody) == 52 && alignof(AtomicRequestBody) == 1);

// RFC 7306 §5.2.2: the body of an Atomic Response (untagged, QN 3).
struct AtomicResponseBody {
    net::Be32 request_id;  // Original Request Identifier
    net::Be64 orig;        // Original Remote Data Value
};
static_assert(sizeof(AtomicResponseBody) == 12 && alignof(AtomicResponseBody) == 1);

// RFC 7306 §4: the Immediate Data message's 8 bytes, opaque to RDMAP. snic carries verbs'
// 32-bit immediate in the first four (as posted, network order) and zeroes the rest.
inline constexpr std::size_t kImmediateLen = 8;

// RFC 5040 §4.8: the first 32 bits of a Terminate body: Layer (4), EType (4), Error Code (8),
// Hdrct M/D/R (3), reserved (13). Then, when D: the DDP Segment Length (2 bytes, valid when
// M) and the terminated DDP header (14 or 18 bytes by its T bit); when R: the terminated
// RDMAP header (28 bytes: a Read Request's body). Linux siw lays it out the same way.
inline constexpr std::size_t kTerminateControlLen = 4;
inline constexpr std::uint32_t kTermFlagM = 1u << 15;
inline constexpr std::uint32_t kTermFlagD = 1u << 14;
inline constexpr std::uint32_t kTermFlagR = 1u << 13;
inline constexpr std::size_t kTerminatedRdmapLen = 28;
inline constexpr std::size_t kTerminateMaxLen =
    kTerminateControlLen + 2 + kUntaggedHeaderLen + kTerminatedRdmapLen;

// --- opcodes and queues ---------------------------------------------------------------------

enum class RdmapOp : std::uint8_t {
    write = 0x0,
    read_request = 0x1,
    read_response = 0x2,
    send = 0x3,
    send_inv = 0x4,
    send_se = 0x5,
    send_se_inv = 0x6,
    terminate = 0x7,
    immediate = 0x8,     // RFC 7306
    immediate_se = 0x9,  // RFC 7306
    atomic_request = 0xa,
    atomic_response = 0xb,
};
inline constexpr std::size_t kRdmapOpCount = 16;  // the 4-bit space; 0xc..0xf reserved

// DDP untagged queue numbers RDMAP uses (RFC 5040 §5.1, RFC 7306 §8 / IANA).
enum class Queue : std::uint8_t { send = 0, read_request = 1, terminate = 2, atomic_response = 3 };
inline constexpr std::uint32_t kQueueCount = 4;

// RFC 7306 AtomicOp codes.
enum class AtomicOp : std::uint8_t { fetch_add = 0, swap = 1, compare_swap = 2 };

// One row per RDMAP opcode.
struct OpInfo {
    std::string_view name;
    bool valid = false;
    bool tagged = false;
    Queue qn = Queue::send;     // untagged opcodes
    std::uint8_t body_len = 0;  // fixed RDMAP body after the DDP header
    bool fixed = false;         // exactly body_len bytes and a single segment (L set)
    bool payload = false;       // may carry ULP payload after the header
    bool invalidate = false;    // the untagged header carries an Invalidate STag
    bool solicited = false;
};

// clang-format off
inline constexpr std::array<OpInfo, kRdmapOpCount> kOpTable = {{
    {"write",           true, true,  Queue::send,            0,  false, true,  false, false},
    {"read_request",    true, false, Queue::read_request,    28, true,  false, false, false},
    {"read_response",   true, true,  Queue::send,            0,  false, true,  false, false},
    {"send",            true, false, Queue::send,            0,  false, true,  false, false},
    {"send_inv",        true, false, Queue::send,            0,  false, true,  true,  false},
    {"send_se",         true, false, Queue::send,            0,  false, true,  false, true},
    {"send_se_inv",     true, false, Queue::send,            0,  false, true,  true,  true},
    {"terminate",       true, false, Queue::terminate,       4,  false, false, false, false},
    {"immediate",       true, false, Queue::send,            8,  true,  false, false, false},
    {"immediate_se",    true, false, Queue::send,            8,  true,  false, false, true},
    {"atomic_request",  true, false, Queue::read_request,    52, true,  false, false, false},
    {"atomic_response", true, false, Queue::atomic_response, 12, true,  false, false, false},
    {"reserved_c"}, {"reserved_d"}, {"reserved_e"}, {"reserved_f"},
}};
// clang-format on

constexpr const OpInfo& op_info(RdmapOp op) {
    return kOpTable[static_cast<std::size_t>(op) & kRdmapOpcodeMask];
}
constexpr std::size_t header_len(RdmapOp op) {
    return op_info(op).tagged ? kTaggedHeaderLen : kUntaggedHeaderLen;
}

// --- Terminate error codes (RFC 5040 §7.2, RFC 5041 §7.2, RFC 5044 §8) ------------------------

enum class TermLayer : std::uint8_t { rdmap = 0, ddp = 1, llp = 2 };

enum class RdmapEtype : std::uint8_t {
    local_catastrophic = 0,
    remote_protection = 1,
    remote_operation = 2,
};
enum class RdmapCode : std::uint8_t {
    invalid_stag = 0x00,
    base_or_bounds = 0x01,
    access_rights = 0x02,
    stag_not_associated = 0x03,
    to_wrap = 0x04,
    invalid_version = 0x05,
    unexpected_opcode = 0x06,
    catastrophic_stream = 0x07,
    catastrophic_global = 0x08,
    cannot_invalidate = 0x09,
    unspecified = 0xff,
};

enum class DdpEtype : std::uint8_t { local_catastrophic = 0, tagged = 1, untagged = 2 };
enum class DdpTaggedCode : std::uint8_t {
    invalid_stag = 0x00,
    base_or_bounds = 0x01,
    stag_not_associated = 0x02,
    to_wrap = 0x03,
    invalid_version = 0x04,
};
enum class DdpUntaggedCode : std::uint8_t {
    invalid_qn = 0x01,
    no_buffer = 0x02,  // Invalid MSN: no buffer available
    msn_range = 0x03,  // Invalid MSN: MSN range is not valid
    invalid_mo = 0x04,
    too_long = 0x05,  // DDP Message too long for available buffer
    invalid_version = 0x06,
};

enum class LlpCode : std::uint8_t {  // EType 0 (MPA)
    stream_lost = 0x01,
    crc_error = 0x02,
    marker_mismatch = 0x03,
    invalid_request_reply = 0x04,
    local_catastrophic = 0x05,
    insufficient_ird = 0x06,
    no_matching_rtr = 0x07,
};

// One Terminate's cause: layer, error type and code, as three numbers on the wire.
struct TermCause {
    TermLayer layer = TermLayer::rdmap;
    std::uint8_t etype = 0;
    std::uint8_t code = 0;

    friend constexpr bool operator==(const TermCause&, const TermCause&) = default;
};

constexpr TermCause term_cause(RdmapEtype e, RdmapCode c) {
    return {TermLayer::rdmap, static_cast<std::uint8_t>(e), static_cast<std::uint8_t>(c)};
}
constexpr TermCause term_cause(DdpTaggedCode c) {
    return {TermLayer::ddp, static_cast<std::uint8_t>(DdpEtype::tagged),
            static_cast<std::uint8_t>(c)};
}
constexpr TermCause term_cause(DdpUntaggedCode c) {
    return {TermLayer::ddp, static_cast<std::uint8_t>(DdpEtype::untagged),
            static_cast<std::uint8_t>(c)};
}
constexpr TermCause term_cause(LlpCode c) {
    return {TermLayer::llp, 0, static_cast<std::uint8_t>(c)};
}

// A name for counters and snicctl ("ddp_untagged/no_buffer").
std::string_view term_cause_name(const TermCause& c);

// --- parse ------------------------------------------------------------------------------------

enum class ParseError : std::uint8_t {
    ok,
    too_short,          // shorter than the DDP header or the opcode's RDMAP body
    bad_ddp_version,    // DV != 1
    bad_rdmap_version,  // RV != 1
    bad_opcode,         // reserved opcode
    tagged_mismatch,    // T flag not what the opcode's model is
    bad_qn,             // QN not the opcode's queue
    not_last,           // a single-segment message (Read Request, Atomics, Immediate) without L
    bad_length,         // a fixed-size message with bytes after its body
    bad_terminate,      // Terminate's Hdrct promises headers that are not there
};
inline constexpr std::array<std::string_view, 10> kParseErrorNames = {
    "ok",     "too_short", "bad_ddp_version", "bad_rdmap_version", "bad_opcode", "tagged_mismatch",
    "bad_qn", "not_last",  "bad_length",      "bad_terminate",
};
constexpr std::string_view parse_error_name(ParseError e) {
    return kParseErrorNames[static_cast<std::size_t>(e)];
}

// The Terminate a receiver sends for a ULPDU parse() refused.
TermCause parse_error_cause(ParseError e, bool tagged);

struct ReadRequest {
    std::uint32_t sink_stag = 0;
    std::uint64_t sink_to = 0;
    std::uint32_t size = 0;
    std::uint32_t src_stag = 0;
    std::uint64_t src_to = 0;
};

struct AtomicRequest {
    AtomicOp op = AtomicOp::fetch_add;
    std::uint32_t request_id = 0;
    std::uint32_t stag = 0;
    std::uint64_t to = 0;
    std::uint64_t swap_add = 0, swap_add_mask = 0;
    std::uint64_t compare = 0, compare_mask = 0;
};

struct AtomicResponse {
    std::uint32_t request_id = 0;
    std::uint64_t orig = 0;
};

struct Terminate {
    TermCause cause;
    bool m = false, d = false, r = false;
    std::uint16_t ddp_seg_len = 0;               // when D (valid when M)
    std::span<const std::uint8_t> ddp_header;    // when D: 14 or 18 bytes
    std::span<const std::uint8_t> rdmap_header;  // when R: 28 bytes
};

// One parsed ULPDU (DDP segment). Views point into the bytes given to parse().
struct Segment {
    ParseError error = ParseError::too_short;
    RdmapOp op = RdmapOp::send;
    bool tagged = false;
    bool last = false;
    // tagged
    std::uint32_t stag = 0;
    std::uint64_t to = 0;
    // untagged
    std::uint32_t inv_stag = 0;
    std::uint32_t qn = 0, msn = 0, mo = 0;
    // the RDMAP body of the opcode, decoded (only the one of `op` is set)
    ReadRequest read;
    AtomicRequest atomic;
    AtomicResponse atomic_resp;
    std::array<std::uint8_t, kImmediateLen> immediate{};
    Terminate term;
    std::span<const std::uint8_t> header;   // DDP header plus RDMAP body, as received
    std::span<const std::uint8_t> payload;  // ULP payload

    bool ok() const { return error == ParseError::ok; }
    const OpInfo& info() const { return op_info(op); }
};

// Parses one ULPDU (DDP header through payload; no MPA length, pad or CRC).
Segment parse(std::span<const std::uint8_t> ulpdu);

// --- build ------------------------------------------------------------------------------------

// The headers of one segment to build. Only the fields of `op` are used.
struct SegmentSpec {
    RdmapOp op = RdmapOp::send;
    bool last = true;
    std::uint32_t stag = 0;  // tagged
    std::uint64_t to = 0;
    std::uint32_t inv_stag = 0;  // untagged (send_inv, send_se_inv)
    std::uint32_t msn = 0;
    std::uint32_t mo = 0;
    ReadRequest read;
    AtomicRequest atomic;
    AtomicResponse atomic_resp;
    std::array<std::uint8_t, kImmediateLen> immediate{};
    // terminate
    TermCause cause;
    std::uint16_t term_ddp_seg_len = 0;
    bool term_seg_len_valid = false;                  // M
    std::span<const std::uint8_t> term_ddp_header;    // D when not empty (14 or 18 bytes)
    std::span<const std::uint8_t> term_rdmap_header;  // R when not empty (28 bytes)
};

// Bytes build_header() writes for spec: the DDP header and the RDMAP body.
std::size_t built_header_len(const SegmentSpec& spec);

// Writes the DDP header and the RDMAP body of spec into out; returns the bytes written, or 0
// when out is too small or the Terminate's copied headers have a wrong length. The payload
// (if any) goes right after, written by the caller.
std::size_t build_header(std::span<std::uint8_t> out, const SegmentSpec& spec);

}  // namespace snic::iwarp
