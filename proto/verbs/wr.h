// The verbs-level vocabulary every transport speaks: work requests as the daemon copies them
// out of a client's rings, work completions as it posts them, and the WR opcode table (what
// kind of operation each opcode is and which completion it gets). Transport-neutral: RoCEv2
// (proto/roce) and iWARP each map these onto their wire. Numeric values of opcodes, statuses
// and flags are libibverbs' (ibv_wr_opcode, ibv_wc_status, ibv_wc_opcode, ibv_wc_flags,
// ibv_access_flags), so the glue casts.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace snic::verbs {

inline constexpr std::uint32_t kMaxSge = 16;              // per send or receive WR
inline constexpr std::uint32_t kMaxInline = 256;          // bytes of inline data per send WR
inline constexpr std::uint64_t kMaxMessage = 1ull << 31;  // IBA: a message is < 2^31 bytes

// --- work requests ------------------------------------------------------------------------

// ibv_wr_opcode values.
enum class WrOp : std::uint8_t {
    rdma_write = 0,
    rdma_write_imm = 1,
    send = 2,
    send_imm = 3,
    rdma_read = 4,
    atomic_cmp_swp = 5,
    atomic_fetch_add = 6,
    local_inv = 7,
    bind_mw = 8,
    send_inv = 9,
};
inline constexpr std::size_t kWrOpCount = 10;

// ibv_wc_status values.
enum class WcStatus : std::uint8_t {
    success = 0,
    loc_len_err = 1,
    loc_qp_op_err = 2,
    loc_eec_op_err = 3,
    loc_prot_err = 4,
    wr_flush_err = 5,
    mw_bind_err = 6,
    bad_resp_err = 7,
    loc_access_err = 8,
    rem_inv_req_err = 9,
    rem_access_err = 10,
    rem_op_err = 11,
    retry_exc_err = 12,
    rnr_retry_exc_err = 13,
    loc_rdd_viol_err = 14,
    rem_inv_rd_req_err = 15,
    rem_abort_err = 16,
    inv_eecn_err = 17,
    inv_eec_state_err = 18,
    fatal_err = 19,
    resp_timeout_err = 20,
    general_err = 21,
};

// ibv_wc_opcode values.
enum class WcOpcode : std::uint8_t {
    send = 0,
    rdma_write = 1,
    rdma_read = 2,
    comp_swap = 3,
    fetch_add = 4,
    bind_mw = 5,
    local_inv = 6,
    recv = 128,
    recv_rdma_with_imm = 129,
};

// ibv_wc_flags bits.
inline constexpr std::uint32_t kWcGrh = 1u << 0;  // a 40-byte GRH area starts the buffer (UD)
inline constexpr std::uint32_t kWcWithImm = 1u << 1;
inline constexpr std::uint32_t kWcWithInv = 1u << 3;

// wc.sl of a UD receive over RoCEv2 (see Completion::sl).
inline constexpr std::uint8_t kWcSlRoceV2Ipv4 = 0x8 | 0x2;
inline constexpr std::uint8_t kWcSlRoceV2Ipv6 = 0x8 | 0x1;

// ibv_access_flags bits: of a QP (what the peer may do through it) and of a region.
namespace access {
inline constexpr std::uint32_t local_write = 1u << 0;
inline constexpr std::uint32_t remote_write = 1u << 1;
inline constexpr std::uint32_t remote_read = 1u << 2;
inline constexpr std::uint32_t remote_atomic = 1u << 3;
}  // namespace access

struct Sge {
    std::uint64_t addr = 0;
    std::uint32_t length = 0;
    std::uint32_t lkey = 0;
};

// The fields of a bind_mw WR (the window, its new rkey, the region, access, range).
struct MwBind {
    std::uint32_t mw_handle = 0;
    std::uint32_t new_rkey = 0;
    std::uint32_t mr_lkey = 0;
    std::uint32_t access = 0;  // ibv_access_flags
    std::uint64_t addr = 0;
    std::uint64_t length = 0;
};

// Where a UD send goes: its address handle's destination GID and the WR's remote QP and Q_Key
// (plain members: it shares its room with MwBind).
struct UdDest {
    std::array<std::uint8_t, 16> dgid;
    std::uint32_t remote_qpn;
    std::uint32_t remote_qkey;  // high bit set: the QP's own Q_Key (controlled Q_Key)
};

// A send queue WR as the daemon hands it over, copied out of the client's ring.
struct SendWr {
    std::uint64_t wr_id = 0;
    WrOp op = WrOp::send;
    bool signaled = false;
    bool fence = false;
    bool solicited = false;
    bool inline_data = false;  // payload in inline_bytes[0, inline_len), not in the SGEs
    // send_imm/rdma_write_imm: the immediate data as posted (network order, opaque);
    // send_inv: the rkey to invalidate at the peer; local_inv: the key to invalidate.
    std::uint32_t imm_or_rkey = 0;
    std::uint64_t remote_addr = 0;  // RDMA and atomics
    std::uint32_t rkey = 0;
    std::uint64_t compare_add = 0;  // cmp_swp: compare; fetch_add: add
    std::uint64_t swap = 0;
    union {
        MwBind bind{};  // bind_mw
        UdDest ud;      // sends of a UD QP
    };
    std::uint32_t num_sge = 0;
    std::uint32_t inline_len = 0;
    // The payload: num_sge SGEs, or inline_len bytes when inline_data. A WR never uses both,
    // so they share their room (an engine holds many WRs: this halves each).
    union {
        std::array<Sge, kMaxSge> sge{};
        std::array<std::uint8_t, kMaxInline> inline_bytes;
    };
};

// A receive WR (RQ or SRQ).
struct RecvWr {
    std::uint64_t wr_id = 0;
    std::uint32_t num_sge = 0;
    std::array<Sge, kMaxSge> sge{};
};

// One work completion (send or receive side).
struct Completion {
    std::uint64_t wr_id = 0;
    WcStatus status = WcStatus::success;
    WcOpcode opcode = WcOpcode::send;
    std::uint32_t byte_len = 0;
    std::uint32_t imm_or_rkey = 0;  // with_imm: immediate data (network order); with_inv: rkey
    bool with_imm = false;
    bool with_inv = false;
    bool solicited = false;  // the message asked for a solicited event (CQ arming)
    bool with_grh = false;   // UD receive: the buffer starts with the 40-byte GRH area
    std::uint16_t pkey_index = 0;
    // UD receive over RoCEv2: the packet's type, as mlx5 RNICs report it in wc.sl (bit 3: a
    // UDP header was present; bits 2:0: 1 IPv6, 2 IPv4). Consumers (UCX) read it to find the
    // destination address in the GRH area, where an IPv4 header fills only the last 20 bytes.
    std::uint8_t sl = 0;
    std::uint32_t qp_num = 0;
    std::uint32_t src_qp = 0;

    constexpr std::uint32_t wc_flags() const {
        return (with_grh ? kWcGrh : 0) | (with_imm ? kWcWithImm : 0) | (with_inv ? kWcWithInv : 0);
    }
};

// --- the WR opcode table ---------------------------------------------------------------------

enum class WrKind : std::uint8_t { send, write, read, atomic, local };

// What each WR opcode is, whatever the transport: its kind and its work completion opcode.
struct WrOpKind {
    std::string_view name;
    WrKind kind = WrKind::local;
    WcOpcode wc = WcOpcode::send;

    constexpr bool rd_atomic() const { return kind == WrKind::read || kind == WrKind::atomic; }
    constexpr bool has_payload() const { return kind == WrKind::send || kind == WrKind::write; }
};

inline constexpr std::array<WrOpKind, kWrOpCount> kWrOpKinds = {{
    {"rdma_write", WrKind::write, WcOpcode::rdma_write},
    {"rdma_write_imm", WrKind::write, WcOpcode::rdma_write},
    {"send", WrKind::send, WcOpcode::send},
    {"send_imm", WrKind::send, WcOpcode::send},
    {"rdma_read", WrKind::read, WcOpcode::rdma_read},
    {"atomic_cmp_swp", WrKind::atomic, WcOpcode::comp_swap},
    {"atomic_fetch_add", WrKind::atomic, WcOpcode::fetch_add},
    {"local_inv", WrKind::local, WcOpcode::local_inv},
    {"bind_mw", WrKind::local, WcOpcode::bind_mw},
    {"send_inv", WrKind::send, WcOpcode::send},
}};

constexpr const WrOpKind& wr_op_kind(WrOp op) {
    return kWrOpKinds[static_cast<std::size_t>(op)];
}

// The completion opcode of a send WQE whose opcode byte is `op`, checked or not (`send` for a
// value out of range): what a flush reports.
constexpr WcOpcode send_wc_opcode(std::uint8_t op) {
    return op < kWrOpCount ? kWrOpKinds[op].wc : WcOpcode::send;
}

}  // namespace snic::verbs
