// The BTH opcodes snic speaks, described once each in a table (IBA vol 1 §9.2, table
// "OpCode field", §9.3 for the headers each carries): name, a mask of properties, the
// length of BTH plus extension headers and the offset of each extension header. Parsing
// and building (packet.h) are loops over this table; a new opcode is one more row.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proto/roce/bth.h"
#include "proto/roce/headers.h"

namespace snic::roce {

// The transport service: the opcode's top three bits.
enum class Transport : std::uint8_t { rc = 0, uc = 1, rd = 2, ud = 3, cnp = 4, xrc = 5 };

constexpr Transport transport_of(std::uint8_t opcode) {
    return static_cast<Transport>(opcode >> 5);
}

enum class Opcode : std::uint8_t {
    rc_send_first = 0x00,
    rc_send_middle = 0x01,
    rc_send_last = 0x02,
    rc_send_last_with_immediate = 0x03,
    rc_send_only = 0x04,
    rc_send_only_with_immediate = 0x05,
    rc_rdma_write_first = 0x06,
    rc_rdma_write_middle = 0x07,
    rc_rdma_write_last = 0x08,
    rc_rdma_write_last_with_immediate = 0x09,
    rc_rdma_write_only = 0x0a,
    rc_rdma_write_only_with_immediate = 0x0b,
    rc_rdma_read_request = 0x0c,
    rc_rdma_read_response_first = 0x0d,
    rc_rdma_read_response_middle = 0x0e,
    rc_rdma_read_response_last = 0x0f,
    rc_rdma_read_response_only = 0x10,
    rc_acknowledge = 0x11,
    rc_atomic_acknowledge = 0x12,
    rc_compare_swap = 0x13,
    rc_fetch_add = 0x14,
    rc_send_last_with_invalidate = 0x16,
    rc_send_only_with_invalidate = 0x17,

    uc_send_first = 0x20,
    uc_send_middle = 0x21,
    uc_send_last = 0x22,
    uc_send_last_with_immediate = 0x23,
    uc_send_only = 0x24,
    uc_send_only_with_immediate = 0x25,
    uc_rdma_write_first = 0x26,
    uc_rdma_write_middle = 0x27,
    uc_rdma_write_last = 0x28,
    uc_rdma_write_last_with_immediate = 0x29,
    uc_rdma_write_only = 0x2a,
    uc_rdma_write_only_with_immediate = 0x2b,

    ud_send_only = 0x64,
    ud_send_only_with_immediate = 0x65,
};

// The extension headers, in the order they follow the BTH on the wire (IBA §9.2: BTH,
// [RDETH,] DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, payload).
enum class Ext : std::uint8_t { deth, reth, atomic_eth, aeth, atomic_ack_eth, immdt, ieth, count_ };

inline constexpr std::size_t kExtCount = static_cast<std::size_t>(Ext::count_);

inline constexpr std::array<std::uint8_t, kExtCount> kExtLen = {
    sizeof(Deth),         sizeof(Reth),  sizeof(AtomicEth), sizeof(Aeth),
    sizeof(AtomicAckEth), sizeof(ImmDt), sizeof(Ieth),
};
inline constexpr std::array<std::string_view, kExtCount> kExtNames = {
    "DETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH",
};

constexpr std::uint32_t ext_bit(Ext e) {
    return std::uint32_t{1} << static_cast<unsigned>(e);
}

// Properties of an opcode. The first seven bits say which extension headers it carries.
inline constexpr std::uint32_t kHasDeth = ext_bit(Ext::deth);
inline constexpr std::uint32_t kHasReth = ext_bit(Ext::reth);
inline constexpr std::uint32_t kHasAtomicEth = ext_bit(Ext::atomic_eth);
inline constexpr std::uint32_t kHasAeth = ext_bit(Ext::aeth);
inline constexpr std::uint32_t kHasAtomicAckEth = ext_bit(Ext::atomic_ack_eth);
inline constexpr std::uint32_t kHasImmDt = ext_bit(Ext::immdt);
inline constexpr std::uint32_t kHasIeth = ext_bit(Ext::ieth);
inline constexpr std::uint32_t kExtMask = (1u << kExtCount) - 1;
// Payload, place in the message, direction:
inline constexpr std::uint32_t kHasPayload = 1u << 8;  // may carry payload (possibly 0 bytes)
inline constexpr std::uint32_t kFirst = 1u << 9;       // starts a message
inline constexpr std::uint32_t kMiddle = 1u << 10;
inline constexpr std::uint32_t kLast = 1u << 11;  // ends a message
inline constexpr std::uint32_t kOnly = kFirst | kLast;
inline constexpr std::uint32_t kRequest = 1u << 12;   // requester -> responder
inline constexpr std::uint32_t kResponse = 1u << 13;  // responder -> requester
// The operation (exactly one of these):
inline constexpr std::uint32_t kSend = 1u << 14;
inline constexpr std::uint32_t kWrite = 1u << 15;        // RDMA WRITE
inline constexpr std::uint32_t kRead = 1u << 16;         // RDMA READ request or response
inline constexpr std::uint32_t kAtomic = 1u << 17;       // CmpSwap, FetchAdd, their ACK
inline constexpr std::uint32_t kAcknowledge = 1u << 18;  // the ACK/NAK packet itself
// What the responder does with it:
inline constexpr std::uint32_t kNeedsAck = 1u << 19;       // RC request: answered (ACK/response)
inline constexpr std::uint32_t kTakesRecvWqe = 1u << 20;   // consumes a receive WQE
inline constexpr std::uint32_t kCompletesRecv = 1u << 21;  // ends a message: receive completion

struct OpcodeInfo {
    std::string_view name;  // empty: an opcode snic does not speak (reserved, RD, XRC, CNP)
    std::uint32_t props = 0;
    std::uint8_t length = 0;  // BTH and extension headers, bytes: where the payload starts
    std::array<std::uint8_t, kExtCount> offset{};  // from the BTH's first byte; 0 when absent

    constexpr bool known() const { return props != 0; }
    constexpr bool has(std::uint32_t p) const { return (props & p) == p; }
    constexpr bool has_any(std::uint32_t p) const { return (props & p) != 0; }
    constexpr bool has(Ext e) const { return has(ext_bit(e)); }
    constexpr std::uint8_t offset_of(Ext e) const { return offset[static_cast<std::size_t>(e)]; }
};

namespace detail {

struct OpcodeRow {
    Opcode opcode;
    std::string_view name;
    std::uint32_t props;
    std::uint8_t length;  // as IBA §9.3 lays the packet out; checked against the mask below
};

inline constexpr std::uint32_t kRcReq = kRequest | kNeedsAck;
inline constexpr std::uint32_t kSendFirst = kHasPayload | kFirst | kSend | kTakesRecvWqe;
inline constexpr std::uint32_t kSendMiddle = kHasPayload | kMiddle | kSend;
inline constexpr std::uint32_t kSendLast = kHasPayload | kLast | kSend | kCompletesRecv;
inline constexpr std::uint32_t kSendOnly =
    kHasPayload | kOnly | kSend | kTakesRecvWqe | kCompletesRecv;
inline constexpr std::uint32_t kWriteFirst = kHasReth | kHasPayload | kFirst | kWrite;
inline constexpr std::uint32_t kWriteMiddle = kHasPayload | kMiddle | kWrite;
inline constexpr std::uint32_t kWriteLast = kHasPayload | kLast | kWrite;
inline constexpr std::uint32_t kWriteOnly = kHasReth | kHasPayload | kOnly | kWrite;
inline constexpr std::uint32_t kWithImm = kHasImmDt | kTakesRecvWqe | kCompletesRecv;
inline constexpr std::uint32_t kReadResp = kHasPayload | kRead | kResponse;

// clang-format off
inline constexpr OpcodeRow kOpcodeRows[] = {
    {Opcode::rc_send_first,                     "RC_SEND_FIRST",                     kRcReq | kSendFirst,               12},
    {Opcode::rc_send_middle,                    "RC_SEND_MIDDLE",                    kRcReq | kSendMiddle,              12},
    {Opcode::rc_send_last,                      "RC_SEND_LAST",                      kRcReq | kSendLast,                12},
    {Opcode::rc_send_last_with_immediate,       "RC_SEND_LAST_WITH_IMMEDIATE",       kRcReq | kSendLast | kHasImmDt,    16},
    {Opcode::rc_send_only,                      "RC_SEND_ONLY",                      kRcReq | kSendOnly,                12},
    {Opcode::rc_send_only_with_immediate,       "RC_SEND_ONLY_WITH_IMMEDIATE",       kRcReq | kSendOnly | kHasImmDt,    16},
    {Opcode::rc_rdma_write_first,               "RC_RDMA_WRITE_FIRST",               kRcReq | kWriteFirst,              28},
    {Opcode::rc_rdma_write_middle,              "RC_RDMA_WRITE_MIDDLE",              kRcReq | kWriteMiddle,             12},
    {Opcode::rc_rdma_write_last,                "RC_RDMA_WRITE_LAST",                kRcReq | kWriteLast,               12},
    {Opcode::rc_rdma_write_last_with_immediate, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kRcReq | kWriteLast | kWithImm,    16},
    {Opcode::rc_rdma_write_only,                "RC_RDMA_WRITE_ONLY",                kRcReq | kWriteOnly,               28},
    {Opcode::rc_rdma_write_only_with_immediate, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kRcReq | kWriteOnly | kWithImm,    32},
    {Opcode::rc_rdma_read_request,              "RC_RDMA_READ_REQUEST",              kRcReq | kHasReth | kOnly | kRead, 28},
    {Opcode::rc_rdma_read_response_first,       "RC_RDMA_READ_RESPONSE_FIRST",       kReadResp | kHasAeth | kFirst,     16},
    {Opcode::rc_rdma_read_response_middle,      "RC_RDMA_READ_RESPONSE_MIDDLE",      kReadResp | kMiddle,               12},
    {Opcode::rc_rdma_read_response_last,        "RC_RDMA_READ_RESPONSE_LAST",        kReadResp | kHasAeth | kLast,      16},
    {Opcode::rc_rdma_read_response_only,        "RC_RDMA_READ_RESPONSE_ONLY",        kReadResp | kHasAeth | kOnly,      16},
    {Opcode::rc_acknowledge,                    "RC_ACKNOWLEDGE",                    kResponse | kHasAeth | kOnly | kAcknowledge, 16},
    {Opcode::rc_atomic_acknowledge,             "RC_ATOMIC_ACKNOWLEDGE",             kResponse | kHasAeth | kHasAtomicAckEth | kOnly | kAtomic, 24},
    {Opcode::rc_compare_swap,                   "RC_COMPARE_SWAP",                   kRcReq | kHasAtomicEth | kOnly | kAtomic, 40},
    {Opcode::rc_fetch_add,                      "RC_FETCH_ADD",                      kRcReq | kHasAtomicEth | kOnly | kAtomic, 40},
    {Opcode::rc_send_last_with_invalidate,      "RC_SEND_LAST_WITH_INVALIDATE",      kRcReq | kSendLast | kHasIeth,     16},
    {Opcode::rc_send_only_with_invalidate,      "RC_SEND_ONLY_WITH_INVALIDATE",      kRcReq | kSendOnly | kHasIeth,     16},

    {Opcode::uc_send_first,                     "UC_SEND_FIRST",                     kRequest | kSendFirst,             12},
    {Opcode::uc_send_middle,                    "UC_SEND_MIDDLE",                    kRequest | kSendMiddle,            12},
    {Opcode::uc_send_last,                      "UC_SEND_LAST",                      kRequest | kSendLast,              12},
    {Opcode::uc_send_last_with_immediate,       "UC_SEND_LAST_WITH_IMMEDIATE",       kRequest | kSendLast | kHasImmDt,  16},
    {Opcode::uc_send_only,                      "UC_SEND_ONLY",                      kRequest | kSendOnly,              12},
    {Opcode::uc_send_only_with_immediate,       "UC_SEND_ONLY_WITH_IMMEDIATE",       kRequest | kSendOnly | kHasImmDt,  16},
    {Opcode::uc_rdma_write_first,               "UC_RDMA_WRITE_FIRST",               kRequest | kWriteFirst,            28},
    {Opcode::uc_rdma_write_middle,              "UC_RDMA_WRITE_MIDDLE",              kRequest | kWriteMiddle,           12},
    {Opcode::uc_rdma_write_last,                "UC_RDMA_WRITE_LAST",                kRequest | kWriteLast,             12},
    {Opcode::uc_rdma_write_last_with_immediate, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kRequest | kWriteLast | kWithImm,  16},
    {Opcode::uc_rdma_write_only,                "UC_RDMA_WRITE_ONLY",                kRequest | kWriteOnly,             28},
    {Opcode::uc_rdma_write_only_with_immediate, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kRequest | kWriteOnly | kWithImm,  32},

    {Opcode::ud_send_only,                      "UD_SEND_ONLY",                      kRequest | kSendOnly | kHasDeth,   20},
    {Opcode::ud_send_only_with_immediate,       "UD_SEND_ONLY_WITH_IMMEDIATE",       kRequest | kSendOnly | kHasDeth | kHasImmDt, 24},
};
// clang-format on

// Reached only during constant evaluation of a bad row: the build fails there.
void opcode_table_row_is_inconsistent();

consteval std::array<OpcodeInfo, 256> make_opcode_table() {
    std::array<OpcodeInfo, 256> table{};
    for (const OpcodeRow& row : kOpcodeRows) {
        OpcodeInfo& info = table[static_cast<std::uint8_t>(row.opcode)];
        if (info.known()) opcode_table_row_is_inconsistent();  // a duplicate row
        info.name = row.name;
        info.props = row.props;
        std::size_t at = kBthLen;
        for (std::size_t e = 0; e < kExtCount; ++e) {
            if ((row.props & (1u << e)) == 0) continue;
            info.offset[e] = static_cast<std::uint8_t>(at);
            at += kExtLen[e];
        }
        info.length = static_cast<std::uint8_t>(at);
        const bool one_direction = ((row.props & kRequest) != 0) != ((row.props & kResponse) != 0);
        const bool one_place = (row.props & kMiddle) == 0 || (row.props & kOnly) == 0;
        if (at != row.length || !one_direction || !one_place) opcode_table_row_is_inconsistent();
    }
    return table;
}

}  // namespace detail

// Indexed by the BTH opcode byte.
inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_opcode_table();

inline constexpr std::size_t kOpcodeCount = std::size(detail::kOpcodeRows);
inline constexpr std::size_t kMaxHeaderLen = 40;  // BTH + AtomicETH: the longest row

constexpr const OpcodeInfo& opcode_info(std::uint8_t opcode) {
    return kOpcodeTable[opcode];
}
constexpr const OpcodeInfo& opcode_info(Opcode opcode) {
    return kOpcodeTable[static_cast<std::uint8_t>(opcode)];
}

// Every known opcode in ascending order (for tools and tests).
constexpr std::array<Opcode, kOpcodeCount> all_opcodes() {
    std::array<Opcode, kOpcodeCount> out{};
    std::size_t n = 0;
    for (std::size_t op = 0; op < kOpcodeTable.size(); ++op) {
        if (kOpcodeTable[op].known()) out[n++] = static_cast<Opcode>(op);
    }
    return out;
}

// The opcode named `name` ("RC_SEND_ONLY", case-sensitive), or nullopt.
std::optional<Opcode> opcode_by_name(std::string_view name);

// The properties as text, "RETH|payload|first|request|..." (for logs and test messages).
std::string props_to_string(std::uint32_t props);

}  // namespace snic::roce
