// The Reliable Connection transport's types: the WR opcode table on RC's wire, NAK codes to
// completion statuses, timers, RcWire (the engines' transmit path), the configuration,
// counters and error reasons. Its engines (requester, completer, responder; rc_qp.h ties
// them into one QP) meet the rest of snicd through verbs::QpMemory and verbs::QpQueues
// (proto/verbs/qp_memory.h) and RcWire. Pure and DPDK-free: work requests arrive already
// copied out of shared memory and validated by the daemon, packets arrive parsed and
// ICRC-checked, time is a nanosecond value passed into every call.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/counter.h"
#include "proto/roce/headers.h"
#include "proto/roce/opcode.h"
#include "proto/roce/packet.h"
#include "proto/verbs/qp_memory.h"
#include "proto/verbs/wr.h"

namespace snic::roce {

using RcTime = std::uint64_t;  // nanoseconds on the caller's clock
inline constexpr RcTime kRcNever = ~RcTime{0};

// RC speaks the verbs vocabulary (proto/verbs): its work requests, completions, memory and
// queues are those every transport shares.
using verbs::Completion;
using verbs::kMaxInline;
using verbs::kMaxMessage;
using verbs::kMaxSge;
using verbs::kWcWithImm;
using verbs::kWcWithInv;
using verbs::kWrOpCount;
using verbs::MwBind;
using verbs::QpMemory;
using verbs::QpQueues;
using verbs::RecvWr;
using verbs::RemoteCheck;
using verbs::RemoteNeed;
using verbs::RemoteRegion;
using verbs::SendWr;
using verbs::Sge;
using verbs::WcOpcode;
using verbs::WcStatus;
using verbs::WrKind;
using verbs::WrOp;
namespace rc_access = verbs::access;

// --- the WR opcode table ---------------------------------------------------------------------

// What each WR opcode becomes on the wire: its verbs kind and completion (proto/verbs/wr.h)
// and the opcodes of its packets by place in the message (READ and atomics are one request
// packet: `only`; local operations send nothing). `offered`: the service has the operation
// (UC has no READ, atomics or Send with Invalidate: IBA §9.2, table of opcodes).
struct WrOpInfo : verbs::WrOpKind {
    Opcode first = Opcode::rc_send_first;
    Opcode middle = Opcode::rc_send_middle;
    Opcode last = Opcode::rc_send_last;
    Opcode only = Opcode::rc_send_only;
    bool offered = true;
};

// The UC opcode of an RC SEND or RDMA WRITE opcode: the same operation and place in UC's range
// (IBA §9.2: the top three bits name the service, 001 for UC; the low five are RC's).
constexpr Opcode uc_opcode(Opcode rc) {
    return static_cast<Opcode>(static_cast<std::uint8_t>(rc) | 0x20);
}

namespace detail {
struct RcOpcodes {
    Opcode first, middle, last, only;
};
// clang-format off
inline constexpr std::array<RcOpcodes, kWrOpCount> kRcWrOpcodes = {{
    {Opcode::rc_rdma_write_first,   Opcode::rc_rdma_write_middle,  Opcode::rc_rdma_write_last,                Opcode::rc_rdma_write_only},
    {Opcode::rc_rdma_write_first,   Opcode::rc_rdma_write_middle,  Opcode::rc_rdma_write_last_with_immediate, Opcode::rc_rdma_write_only_with_immediate},
    {Opcode::rc_send_first,         Opcode::rc_send_middle,        Opcode::rc_send_last,                      Opcode::rc_send_only},
    {Opcode::rc_send_first,         Opcode::rc_send_middle,        Opcode::rc_send_last_with_immediate,       Opcode::rc_send_only_with_immediate},
    {Opcode::rc_rdma_read_request,  Opcode::rc_rdma_read_request,  Opcode::rc_rdma_read_request,              Opcode::rc_rdma_read_request},
    {Opcode::rc_compare_swap,       Opcode::rc_compare_swap,       Opcode::rc_compare_swap,                   Opcode::rc_compare_swap},
    {Opcode::rc_fetch_add,          Opcode::rc_fetch_add,          Opcode::rc_fetch_add,                      Opcode::rc_fetch_add},
    {Opcode::rc_send_first,         Opcode::rc_send_middle,        Opcode::rc_send_last,                      Opcode::rc_send_only},  // local_inv: none
    {Opcode::rc_send_first,         Opcode::rc_send_middle,        Opcode::rc_send_last,                      Opcode::rc_send_only},  // bind_mw: none
    {Opcode::rc_send_first,         Opcode::rc_send_middle,        Opcode::rc_send_last_with_invalidate,      Opcode::rc_send_only_with_invalidate},
}};
// clang-format on

// Reached only during constant evaluation of a bad UC row: the build fails there.
void uc_wr_op_row_is_inconsistent();

consteval std::array<WrOpInfo, kWrOpCount> make_wr_op_table() {
    std::array<WrOpInfo, kWrOpCount> t{};
    for (std::size_t i = 0; i < kWrOpCount; ++i) {
        const RcOpcodes& o = kRcWrOpcodes[i];
        t[i] = WrOpInfo{verbs::kWrOpKinds[i], o.first, o.middle, o.last, o.only, true};
    }
    return t;
}

// UC: SEND and RDMA WRITE (with or without immediate) as RC's rows moved to UC's opcodes, the
// local operations as RC's; READ, atomics and Send with Invalidate not offered. Each UC
// opcode must be in the opcode table with RC's properties but the acknowledgement.
consteval std::array<WrOpInfo, kWrOpCount> make_uc_wr_op_table() {
    std::array<WrOpInfo, kWrOpCount> t = make_wr_op_table();
    for (std::size_t i = 0; i < kWrOpCount; ++i) {
        WrOpInfo& w = t[i];
        if (w.rd_atomic() || static_cast<WrOp>(i) == WrOp::send_inv) {
            w.offered = false;
            continue;
        }
        if (w.kind == WrKind::local) continue;
        for (Opcode* op : {&w.first, &w.middle, &w.last, &w.only}) {
            const std::uint32_t rc_props = opcode_info(*op).props;
            *op = uc_opcode(*op);
            const OpcodeInfo& uc = opcode_info(*op);
            if (transport_of(static_cast<std::uint8_t>(*op)) != Transport::uc || !uc.known() ||
                (uc.props | kNeedsAck) != rc_props)
                uc_wr_op_row_is_inconsistent();
        }
    }
    return t;
}
}  // namespace detail

inline constexpr std::array<WrOpInfo, kWrOpCount> kWrOpTable = detail::make_wr_op_table();
inline constexpr std::array<WrOpInfo, kWrOpCount> kUcWrOpTable = detail::make_uc_wr_op_table();

constexpr const WrOpInfo& wr_op_info(WrOp op) {
    return kWrOpTable[static_cast<std::size_t>(op)];
}

// The WR opcode table of a connected service: RC's, or UC's.
constexpr const std::array<WrOpInfo, kWrOpCount>& wr_op_table(Transport service) {
    return service == Transport::uc ? kUcWrOpTable : kWrOpTable;
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

// The QP's transmit path. tx_alloc(len) returns `len` bytes for one transport packet (BTH
// through payload and pad; the glue adds Ethernet/IP/UDP in front and the ICRC behind), or
// an empty span when the path is full: the engine then stops and tries again on its next
// poll. tx_send(len, hdr, payload) sends the packet just allocated (len == the length
// allocated): the engine has written its first `hdr` bytes (BTH and extension headers); the
// wire copies the payload pieces after them and zeroes the pad (gather_payload), so that it
// may fold the ICRC over the payload as it copies it. A span that is not sent is abandoned
// by the next tx_alloc.
//
// A payload in one piece of registered memory, of tx_placed_from bytes or more, may instead be
// left where it is and sent from there (tx_send_placed: DPDK external buffers); the wire then
// holds the piece until the port is done with it. `hold` (a SendSlot's tx_hold; nullptr for a READ
// response, which no completion waits for) is that WR's: the engine completes the WR only once
// tx_settled(hold) says nothing of it is still held, and a QP that goes away with a WR unsettled
// gives its hold up with tx_forget. A wire that copies every payload needs none of the three.
using TxHold = std::uint32_t;  // 0: nothing held
class RcWire {
  public:
    virtual std::span<std::uint8_t> tx_alloc(std::size_t len) = 0;
    virtual void tx_send(std::size_t len, std::size_t hdr, std::span<const TxPiece> payload) = 0;
    virtual void tx_send_placed(std::size_t len, std::size_t hdr, TxPiece payload, TxHold*) {
        tx_send(len, hdr, {&payload, 1});
    }
    virtual bool tx_settled(TxHold& hold) {
        hold = 0;
        return true;
    }
    virtual void tx_forget(TxHold& hold) { hold = 0; }

    // The smallest payload the wire sends from where it lies (never, unless the wire says):
    // the engine offers only those to tx_send_placed, so that the others cost nothing more.
    std::uint32_t tx_placed_from = ~std::uint32_t{0};

  protected:
    ~RcWire() = default;
};

// --- configuration ---------------------------------------------------------------------------

struct RcConfig {
    // The service: RC, or UC (IBA vol 1 §9.8, unreliable service: the same packets in UC's opcode
    // range, no ACKs, no retransmission; a WR completes once its last packet is on the wire, and
    // the responder drops a message it cannot take whole). Anything else is taken as RC.
    Transport service = Transport::rc;
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
    std::uint32_t max_inline = kMaxInline;
    bool srq = false;  // receive WRs come from an SRQ: flushing leaves its WRs alone
    // Tuning (not IBA attributes):
    std::uint32_t flush_budget = verbs::kFlushBudget;  // WRs flushed per queue per call
    std::uint32_t window = 128;        // request PSNs sent beyond the oldest unacknowledged
    std::uint32_t max_burst = 32;      // packets sent per poll()
    std::uint32_t ack_req_every = 32;  // AckReq also on every Nth packet of long messages
    std::uint32_t ack_every = 16;      // responder: ACK after this many unacknowledged packets
    RcTime ack_delay_ns = 8'000;       // responder: or when the oldest waited this long
    // The common cases in one piece each (a one-packet SEND or WRITE to the wire; one in
    // order from the wire). Off: the general engine alone, to the same bytes (for tests).
    bool fast_path = true;
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
    RcCounter tx_retransmits;   // request packets sent again (go-back-N, timeout, RNR)
    RcCounter tx_full;          // tx_alloc refused: retried on the next poll
    RcCounter send_slot_waits;  // the send slot pool was empty: WRs taken on a later poll
    RcCounter tx_held_waits;    // a WR's completion waited for the wire to let its memory go
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
    RcCounter drop_bad_icrc;  // an ICRC left to the payload's copy was wrong: nothing took effect
    // UC's responder, which answers nothing: packets it did not execute, messages it gave up
    // (lost to a PSN gap, cut short by a new message, or refused), and why it refused one
    RcCounter uc_drop_packets, uc_drop_messages;
    RcCounter uc_drop_no_recv;      // a SEND or WRITE with immediate found no receive WR
    RcCounter uc_drop_bad_access;   // a WRITE's rkey, bounds or rights (or the QP's) refused it
    RcCounter uc_drop_bad_request;  // opcode sequence, lengths, a message too long to receive
};

struct RcCounterField {
    std::string_view name;
    RcCounter RcCounters::*field;
};

inline constexpr std::array<RcCounterField, 45> kRcCounterFields = {{
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
    {"send_slot_waits", &RcCounters::send_slot_waits},
    {"tx_held_waits", &RcCounters::tx_held_waits},
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
    {"drop_bad_icrc", &RcCounters::drop_bad_icrc},
    {"uc_drop_packets", &RcCounters::uc_drop_packets},
    {"uc_drop_messages", &RcCounters::uc_drop_messages},
    {"uc_drop_no_recv", &RcCounters::uc_drop_no_recv},
    {"uc_drop_bad_access", &RcCounters::uc_drop_bad_access},
    {"uc_drop_bad_request", &RcCounters::uc_drop_bad_request},
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
