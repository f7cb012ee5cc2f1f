// The Reliable Connection transport's types and the three interfaces through which its
// engines (requester, completer, responder; rc_qp.h ties them into one QP) meet the rest
// of snicd: RcMemory (the QP's view of the memory tables), RcQueues (its send and receive
// queues and completion queues) and RcWire (its transmit path). Pure and DPDK-free: work
// requests arrive already copied out of shared memory and validated by the daemon, packets
// arrive parsed and ICRC-checked, time is a nanosecond value passed into every call.
// Numeric values of opcodes, statuses and flags are libibverbs' (ibv_wr_opcode,
// ibv_wc_status, ibv_wc_opcode, ibv_wc_flags, ibv_access_flags), so the glue casts.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "proto/counter.h"
#include "proto/roce/headers.h"
#include "proto/roce/opcode.h"

namespace snic::roce {

using RcTime = std::uint64_t;  // nanoseconds on the caller's clock
inline constexpr RcTime kRcNever = ~RcTime{0};

inline constexpr std::uint32_t kRcMaxSge = 16;              // per send or receive WR
inline constexpr std::uint32_t kRcMaxInline = 256;          // bytes of inline data per send WR
inline constexpr std::uint64_t kRcMaxMessage = 1ull << 31;  // IBA: a message is < 2^31 bytes

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
inline constexpr std::uint32_t kWcWithImm = 1u << 1;
inline constexpr std::uint32_t kWcWithInv = 1u << 3;

// ibv_access_flags bits: of a QP (what the peer may do through it) and of a region.
namespace rc_access {
inline constexpr std::uint32_t local_write = 1u << 0;
inline constexpr std::uint32_t remote_write = 1u << 1;
inline constexpr std::uint32_t remote_read = 1u << 2;
inline constexpr std::uint32_t remote_atomic = 1u << 3;
}  // namespace rc_access

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
    MwBind bind;
    std::uint32_t num_sge = 0;
    std::array<Sge, kRcMaxSge> sge{};
    std::uint32_t inline_len = 0;
    std::array<std::uint8_t, kRcMaxInline> inline_bytes{};
};

// A receive WR (RQ or SRQ).
struct RecvWr {
    std::uint64_t wr_id = 0;
    std::uint32_t num_sge = 0;
    std::array<Sge, kRcMaxSge> sge{};
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
    std::uint32_t qp_num = 0;
    std::uint32_t src_qp = 0;

    constexpr std::uint32_t wc_flags() const {
        return (with_imm ? kWcWithImm : 0) | (with_inv ? kWcWithInv : 0);
    }
};

// --- the WR opcode table ---------------------------------------------------------------------

enum class WrKind : std::uint8_t { send, write, read, atomic, local };

// What each WR opcode becomes on the wire: its work completion opcode and the RC opcodes
// of its packets by place in the message (READ and atomics are one request packet: `only`).
struct WrOpInfo {
    std::string_view name;
    WrKind kind = WrKind::local;
    WcOpcode wc = WcOpcode::send;
    Opcode first = Opcode::rc_send_first;
    Opcode middle = Opcode::rc_send_middle;
    Opcode last = Opcode::rc_send_last;
    Opcode only = Opcode::rc_send_only;

    constexpr bool rd_atomic() const { return kind == WrKind::read || kind == WrKind::atomic; }
    constexpr bool has_payload() const { return kind == WrKind::send || kind == WrKind::write; }
};

// clang-format off
inline constexpr std::array<WrOpInfo, kWrOpCount> kWrOpTable = {{
    {"rdma_write",       WrKind::write,  WcOpcode::rdma_write, Opcode::rc_rdma_write_first, Opcode::rc_rdma_write_middle, Opcode::rc_rdma_write_last,                Opcode::rc_rdma_write_only},
    {"rdma_write_imm",   WrKind::write,  WcOpcode::rdma_write, Opcode::rc_rdma_write_first, Opcode::rc_rdma_write_middle, Opcode::rc_rdma_write_last_with_immediate, Opcode::rc_rdma_write_only_with_immediate},
    {"send",             WrKind::send,   WcOpcode::send,       Opcode::rc_send_first,       Opcode::rc_send_middle,       Opcode::rc_send_last,                      Opcode::rc_send_only},
    {"send_imm",         WrKind::send,   WcOpcode::send,       Opcode::rc_send_first,       Opcode::rc_send_middle,       Opcode::rc_send_last_with_immediate,       Opcode::rc_send_only_with_immediate},
    {"rdma_read",        WrKind::read,   WcOpcode::rdma_read,  Opcode::rc_rdma_read_request, Opcode::rc_rdma_read_request, Opcode::rc_rdma_read_request,           Opcode::rc_rdma_read_request},
    {"atomic_cmp_swp",   WrKind::atomic, WcOpcode::comp_swap,  Opcode::rc_compare_swap,     Opcode::rc_compare_swap,      Opcode::rc_compare_swap,                   Opcode::rc_compare_swap},
    {"atomic_fetch_add", WrKind::atomic, WcOpcode::fetch_add,  Opcode::rc_fetch_add,        Opcode::rc_fetch_add,         Opcode::rc_fetch_add,                      Opcode::rc_fetch_add},
    {"local_inv",        WrKind::local,  WcOpcode::local_inv},
    {"bind_mw",          WrKind::local,  WcOpcode::bind_mw},
    {"send_inv",         WrKind::send,   WcOpcode::send,       Opcode::rc_send_first,       Opcode::rc_send_middle,       Opcode::rc_send_last_with_invalidate,      Opcode::rc_send_only_with_invalidate},
}};
// clang-format on

constexpr const WrOpInfo& wr_op_info(WrOp op) {
    return kWrOpTable[static_cast<std::size_t>(op)];
}

// The send completion status a NAK's code means for the WR it names (IBA vol 1 §9.7.5;
// the sequence error is no error: it makes the requester go back).
constexpr WcStatus nak_status(NakCode code) {
    switch (code) {
        case NakCode::invalid_request:
            return WcStatus::rem_inv_req_err;
        case NakCode::remote_access_error:
            return WcStatus::rem_access_err;
        case NakCode::remote_operational_error:
            return WcStatus::rem_op_err;
        case NakCode::invalid_rd_request:
            return WcStatus::rem_inv_rd_req_err;
        case NakCode::psn_sequence_error:
            break;
    }
    return WcStatus::rem_op_err;  // reserved codes: the peer failed in a way we cannot name
}

// --- timers (IBA vol 1 §9.7.6.1.3, local ACK timeout; the RNR timer is in rnr.h) ---------

// The local ACK timeout of a 5-bit code: 4.096 us * 2^code; code 0 means infinite.
constexpr RcTime ack_timeout_ns(std::uint8_t code) {
    return (code & 0x1f) == 0 ? kRcNever : RcTime{4096} << (code & 0x1f);
}

// --- the interfaces ----------------------------------------------------------------------------

// Why a remote key check failed. Every failure is answered with NAK remote access error.
enum class RemoteCheck : std::uint8_t { ok, bad_key, out_of_bounds, no_access, pd_mismatch };
enum class RemoteNeed : std::uint8_t { read, write, atomic };

struct RemoteRegion {
    std::uint8_t* ptr = nullptr;  // the daemon's address of [addr, addr + len)
    RemoteCheck check = RemoteCheck::bad_key;
};

// The memory a QP may touch: the daemon implements it over its MR/MW tables, knowing the
// QP's PD. Every call is checked afresh (keys may be invalidated at any time); a pointer is
// valid for the bytes asked for until the engine returns to its caller.
class RcMemory {
  public:
    // [addr, addr + len) under lkey, for reading (gather) or writing (scatter, needs local
    // write access); nullptr when the key, bounds, access or PD do not allow it.
    virtual std::uint8_t* local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len,
                                bool write) = 0;
    // [addr, addr + len) under rkey for the peer's operation `need`.
    virtual RemoteRegion remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                                RemoteNeed need) = 0;
    // Send with Invalidate: invalidates rkey (an MW or MR of this QP's PD that allows remote
    // invalidation); false when it may not be invalidated.
    virtual bool invalidate(std::uint32_t rkey) = 0;
    // The local operations of the send queue; they return the WR's completion status.
    virtual WcStatus local_invalidate(std::uint32_t key) = 0;
    virtual WcStatus bind_mw(const MwBind& bind) = 0;

  protected:
    ~RcMemory() = default;
};

// The QP's work queues and completion queues. The engine takes a send WR only when it has
// a slot for it and keeps it until it completes; receive WRs come from the RQ or the SRQ.
class RcQueues {
  public:
    virtual bool pop_send(SendWr& out) = 0;
    virtual bool pop_recv(RecvWr& out) = 0;
    virtual void complete_send(const Completion& c) = 0;
    virtual void complete_recv(const Completion& c) = 0;

  protected:
    ~RcQueues() = default;
};

// The QP's transmit path. tx_alloc(len) returns `len` bytes for one transport packet (BTH
// through payload and pad; the glue adds Ethernet/IP/UDP in front and the ICRC behind), or
// an empty span when the path is full: the engine then stops and tries again on its next
// poll. tx_send(len) sends the packet just allocated (len == the length allocated). A span
// that is not sent is abandoned by the next tx_alloc.
class RcWire {
  public:
    virtual std::span<std::uint8_t> tx_alloc(std::size_t len) = 0;
    virtual void tx_send(std::size_t len) = 0;

  protected:
    ~RcWire() = default;
};

// --- configuration ---------------------------------------------------------------------------

struct RcConfig {
    std::uint32_t qpn = 0;
    std::uint32_t dest_qpn = 0;
    std::uint32_t mtu = 1024;  // path MTU in bytes: 256, 512, 1024, 2048 or 4096
    std::uint32_t sq_psn = 0;  // first PSN this QP sends
    std::uint32_t rq_psn = 0;  // first PSN it expects
    std::uint16_t pkey = kDefaultPkey;
    std::uint8_t timeout = 14;        // local ACK timeout code (4.096 us * 2^code; 0 = infinite)
    std::uint8_t retry_cnt = 7;       // 0..7
    std::uint8_t rnr_retry = 7;       // 0..7; 7 = infinite
    std::uint8_t min_rnr_timer = 12;  // code for our RNR NAKs (rnr.h)
    std::uint8_t max_rd_atomic = 16;  // our READ/atomics outstanding at the peer (<= 128)
    std::uint8_t max_dest_rd_atomic = 16;  // the peer's READ/atomics we track (<= 128)
    std::uint32_t remote_access = 0;       // rc_access::remote_* the peer may use
    std::uint32_t sq_depth = 128;          // send WRs in flight
    std::uint32_t max_inline = kRcMaxInline;
    bool srq = false;  // receive WRs come from an SRQ: flushing leaves its WRs alone
    // Tuning (not IBA attributes):
    std::uint32_t window = 128;        // request PSNs sent beyond the oldest unacknowledged
    std::uint32_t max_burst = 32;      // packets sent per poll()
    std::uint32_t ack_req_every = 32;  // AckReq also on every Nth packet of long messages
    std::uint32_t ack_every = 16;      // responder: ACK after this many unacknowledged packets
    RcTime ack_delay_ns = 8'000;       // responder: or when the oldest waited this long
};

// READ/atomics outstanding each way: as many as the Linux soft-RoCE driver offers, since
// peers (perftest) set max_rd_atomic to the other side's max_qp_rd_atom. The responder's
// resources are sized by the QP's own max_dest_rd_atomic (about 72 bytes each).
inline constexpr std::uint8_t kRcMaxRdAtomic = 128;

// Why the config cannot be used, or nullptr. RcQp clamps what it is given regardless.
const char* rc_config_error(const RcConfig& c);

// --- counters ----------------------------------------------------------------------------------

// Written by the owning lcore only, readable from any thread.
using RcCounter = snic::Counter;

struct RcCounters {
    // transmitted, by kind
    RcCounter tx_send_packets, tx_write_packets, tx_read_requests, tx_atomic_requests;
    RcCounter tx_read_responses, tx_atomic_acks, tx_acks, tx_naks;
    RcCounter tx_retransmits;  // request packets sent again (go-back-N, timeout, RNR)
    RcCounter tx_full;         // tx_alloc refused: retried on the next poll
    // received, by kind
    RcCounter rx_send_packets, rx_write_packets, rx_read_requests, rx_atomic_requests;
    RcCounter rx_read_responses, rx_atomic_acks, rx_acks, rx_naks;
    // reliability
    RcCounter duplicate_requests;   // responder: PSN behind the expected one, not executed
    RcCounter duplicate_responses;  // completer: duplicate or ghost ACK/response, ignored
    RcCounter out_of_sequence;      // responder: PSN ahead of the expected one, dropped
    RcCounter seq_naks_sent, seq_naks_received;
    RcCounter rnr_naks_sent, rnr_naks_received;
    RcCounter fatal_naks_sent, fatal_naks_received;  // invalid request, access, operational
    RcCounter acks_coalesced;                // ACK-worthy requests answered by one ACK with others
    RcCounter timeouts;                      // local ACK timer expirations
    RcCounter go_back;                       // times the requester went back to retransmit
    RcCounter read_replays, atomic_replays;  // duplicate READ/atomic answered again
    // packets dropped before the engines looked at them
    RcCounter drop_qp_error, drop_bad_pkey, drop_bad_qpn, drop_bad_opcode, drop_bad_response;
};

struct RcCounterField {
    std::string_view name;
    RcCounter RcCounters::*field;
};

inline constexpr std::array<RcCounterField, 37> kRcCounterFields = {{
    {"tx_send_packets", &RcCounters::tx_send_packets},
    {"tx_write_packets", &RcCounters::tx_write_packets},
    {"tx_read_requests", &RcCounters::tx_read_requests},
    {"tx_atomic_requests", &RcCounters::tx_atomic_requests},
    {"tx_read_responses", &RcCounters::tx_read_responses},
    {"tx_atomic_acks", &RcCounters::tx_atomic_acks},
    {"tx_acks", &RcCounters::tx_acks},
    {"tx_naks", &RcCounters::tx_naks},
    {"tx_retransmits", &RcCounters::tx_retransmits},
    {"tx_full", &RcCounters::tx_full},
    {"rx_send_packets", &RcCounters::rx_send_packets},
    {"rx_write_packets", &RcCounters::rx_write_packets},
    {"rx_read_requests", &RcCounters::rx_read_requests},
    {"rx_atomic_requests", &RcCounters::rx_atomic_requests},
    {"rx_read_responses", &RcCounters::rx_read_responses},
    {"rx_atomic_acks", &RcCounters::rx_atomic_acks},
    {"rx_acks", &RcCounters::rx_acks},
    {"rx_naks", &RcCounters::rx_naks},
    {"duplicate_requests", &RcCounters::duplicate_requests},
    {"duplicate_responses", &RcCounters::duplicate_responses},
    {"out_of_sequence", &RcCounters::out_of_sequence},
    {"seq_naks_sent", &RcCounters::seq_naks_sent},
    {"seq_naks_received", &RcCounters::seq_naks_received},
    {"rnr_naks_sent", &RcCounters::rnr_naks_sent},
    {"rnr_naks_received", &RcCounters::rnr_naks_received},
    {"fatal_naks_sent", &RcCounters::fatal_naks_sent},
    {"fatal_naks_received", &RcCounters::fatal_naks_received},
    {"acks_coalesced", &RcCounters::acks_coalesced},
    {"timeouts", &RcCounters::timeouts},
    {"go_back", &RcCounters::go_back},
    {"read_replays", &RcCounters::read_replays},
    {"atomic_replays", &RcCounters::atomic_replays},
    {"drop_qp_error", &RcCounters::drop_qp_error},
    {"drop_bad_pkey", &RcCounters::drop_bad_pkey},
    {"drop_bad_qpn", &RcCounters::drop_bad_qpn},
    {"drop_bad_opcode", &RcCounters::drop_bad_opcode},
    {"drop_bad_response", &RcCounters::drop_bad_response},
}};

// --- QP state --------------------------------------------------------------------------------

enum class RcState : std::uint8_t { ok, error };

// Why a QP went to the error state (the first reason wins).
enum class RcError : std::uint8_t {
    none,
    requested,           // to_error() from the owner (Modify QP to ERR, client gone)
    retry_exceeded,      // local ACK timeout retry_cnt + 1 times without progress
    rnr_retry_exceeded,  // RNR NAKs beyond rnr_retry
    remote_nak,          // the peer answered NAK invalid request / access / operational
    local_error,         // a send WR failed locally (protection, length, bind, invalidate)
    bad_response,        // the peer's response broke the protocol
    responder_error,     // our responder sent a fatal NAK (the peer's request was bad)
};

inline constexpr std::array<std::string_view, 8> kRcErrorNames = {
    "none",       "requested",   "retry_exceeded", "rnr_retry_exceeded",
    "remote_nak", "local_error", "bad_response",   "responder_error",
};

constexpr std::string_view rc_error_name(RcError e) {
    return kRcErrorNames[static_cast<std::size_t>(e)];
}

}  // namespace snic::roce
