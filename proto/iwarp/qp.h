// One iWARP QP in RTS over an in-order reliable byte stream (snic's TCP after the MPA
// exchange): RDMAP (RFC 5040, RFC 7306) over DDP (RFC 5041) over MPA FPDUs (RFC 5044), in
// the manner of the Linux soft-iWARP driver. Split by role like proto/roce: the requester
// (requester.cc: send WRs -> FPDUs), the responder (responder.cc: incoming Sends, Writes,
// Read and Atomic Requests -> placement, receive completions, responses) and the completer
// (completer.cc: Read and Atomic Responses, Terminates -> retired send WRs); qp.cc ties them
// together (framing, poll, errors, flush).
//
// Pure engine: no DPDK, no syscalls, no exceptions, no logs, no allocation after the
// constructor. The stream is reliable and in order, so there are no timers and no
// retransmission: a send WR is done once its last FPDU was accepted by IwStream::send, a
// READ or atomic once its response has fully arrived. Any protocol or protection error is
// fatal to the QP (RFC 5040 §5.4): the engine sends one Terminate, completes what it must and
// asks its owner to close the stream (wants_close()).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/counter.h"
#include "proto/iwarp/ddp.h"
#include "proto/iwarp/mpa.h"
#include "proto/verbs/place.h"
#include "proto/verbs/qp_memory.h"
#include "proto/verbs/wr.h"

namespace snic::iwarp {

using IwTime = std::uint64_t;  // ns on the caller's clock
inline constexpr IwTime kIwNever = ~IwTime{0};

// The TCP connection under the QP (the daemon: snic's TCP). send() queues one FPDU whole or
// refuses it whole (false: the engine retries on a later poll, rebuilding the same FPDU).
class IwStream {
  public:
    virtual bool send(std::span<const std::uint8_t> fpdu) = 0;

  protected:
    ~IwStream() = default;
};

struct IwConfig {
    std::uint32_t qpn = 0;
    std::uint32_t mss = 1448;         // TCP payload per segment: an FPDU never exceeds it
    bool crc = true;                  // MPA CRC-32C negotiated
    std::uint32_t ird = 16;           // READs/atomics of the peer we answer concurrently
    std::uint32_t ord = 16;           // READs/atomics we have outstanding at the peer
    std::uint32_t remote_access = 0;  // verbs::access::remote_* the peer may use
    std::uint32_t sq_depth = 128;     // send WRs held at once
    std::uint32_t max_inline = verbs::kMaxInline;
    bool srq = false;  // receive WRs come from an SRQ: flushing leaves its WRs alone
    std::uint32_t flush_budget = verbs::kFlushBudget;  // WRs flushed per queue per call
    // RFC 6581 ready-to-receive: the zero-length message this side sends first (send, write
    // or read) and the one it takes as the peer's first (swallowed: no receive WR, no
    // completion; a read RTR is answered with a zero-length Read Response). none: no RTR.
    // After a read RTR nothing else goes until its answer comes: the peer has then read the
    // RTR, so its QP takes whatever follows. (A responder that hands its socket to the QP
    // only after its MPA reply, as the kernel's siw does, leaves an FPDU that comes in
    // between unread until more data arrives.) Unanswered for rtr_nudge ns, a zero-length
    // Write follows (a no-op for the peer, but new bytes that wake its reader), then again
    // at twice the wait, up to a second.
    Rtr rtr_send = Rtr::none;
    Rtr rtr_expect = Rtr::none;
    std::uint64_t rtr_nudge = 20'000'000;
};

// --- counters -----------------------------------------------------------------------------

// Written by the owning lcore only, readable from any thread.
using IwCounter = snic::Counter;

struct IwCounters {
    // transmitted
    IwCounter tx_fpdus, tx_bytes;  // FPDUs accepted by the stream, and their bytes
    IwCounter tx_send_fpdus, tx_write_fpdus, tx_read_requests, tx_read_response_fpdus;
    IwCounter tx_atomic_requests, tx_atomic_responses, tx_immediates, tx_terminates;
    IwCounter tx_refused;     // IwStream::send said no: retried on a later poll
    IwCounter tx_rtr_nudges;  // zero-length Writes sent while our read RTR went unanswered
    // received
    IwCounter rx_fpdus, rx_bytes;  // stream bytes given to on_bytes
    IwCounter rx_send_fpdus, rx_write_fpdus, rx_read_requests, rx_read_response_fpdus;
    IwCounter rx_atomic_requests, rx_atomic_responses, rx_immediates, rx_terminates;
    IwCounter rx_rtr;              // the peer's RFC 6581 RTR, swallowed
    IwCounter remote_invalidates;  // Send with Invalidate: keys invalidated
    // errors
    IwCounter crc_errors, framing_errors, parse_errors;
    IwCounter drop_qp_error;  // FPDUs after the QP failed, ignored
};

struct IwCounterField {
    std::string_view name;
    IwCounter IwCounters::*field;
};

inline constexpr std::array<IwCounterField, 28> kIwCounterFields = {{
    {"tx_fpdus", &IwCounters::tx_fpdus},
    {"tx_bytes", &IwCounters::tx_bytes},
    {"tx_send_fpdus", &IwCounters::tx_send_fpdus},
    {"tx_write_fpdus", &IwCounters::tx_write_fpdus},
    {"tx_read_requests", &IwCounters::tx_read_requests},
    {"tx_read_response_fpdus", &IwCounters::tx_read_response_fpdus},
    {"tx_atomic_requests", &IwCounters::tx_atomic_requests},
    {"tx_atomic_responses", &IwCounters::tx_atomic_responses},
    {"tx_immediates", &IwCounters::tx_immediates},
    {"tx_terminates", &IwCounters::tx_terminates},
    {"tx_refused", &IwCounters::tx_refused},
    {"tx_rtr_nudges", &IwCounters::tx_rtr_nudges},
    {"rx_fpdus", &IwCounters::rx_fpdus},
    {"rx_bytes", &IwCounters::rx_bytes},
    {"rx_send_fpdus", &IwCounters::rx_send_fpdus},
    {"rx_write_fpdus", &IwCounters::rx_write_fpdus},
    {"rx_read_requests", &IwCounters::rx_read_requests},
    {"rx_read_response_fpdus", &IwCounters::rx_read_response_fpdus},
    {"rx_atomic_requests", &IwCounters::rx_atomic_requests},
    {"rx_atomic_responses", &IwCounters::rx_atomic_responses},
    {"rx_immediates", &IwCounters::rx_immediates},
    {"rx_terminates", &IwCounters::rx_terminates},
    {"rx_rtr", &IwCounters::rx_rtr},
    {"remote_invalidates", &IwCounters::remote_invalidates},
    {"crc_errors", &IwCounters::crc_errors},
    {"framing_errors", &IwCounters::framing_errors},
    {"parse_errors", &IwCounters::parse_errors},
    {"drop_qp_error", &IwCounters::drop_qp_error},
}};

// --- state ----------------------------------------------------------------------------------

enum class IwState : std::uint8_t { ok, error };

// Why the QP went to the error state (the first reason wins).
enum class IwError : std::uint8_t {
    none,
    requested,         // to_error() from the owner
    stream_closed,     // FIN: the peer closed without a Terminate
    stream_lost,       // RST or timeout
    remote_terminate,  // the peer sent a Terminate
    local_error,       // a send WR failed locally (protection, length, unsupported op)
    remote_error,      // the peer's message broke a rule: we sent a Terminate
    crc_error,         // an FPDU failed its CRC (or its length): we sent a Terminate
};
inline constexpr std::array<std::string_view, 8> kIwErrorNames = {
    "none",        "requested",    "stream_closed", "stream_lost", "remote_terminate",
    "local_error", "remote_error", "crc_error",
};
constexpr std::string_view iw_error_name(IwError e) {
    return kIwErrorNames[static_cast<std::size_t>(e)];
}

// The send completion status a received Terminate means for the oldest unfinished send WR.
verbs::WcStatus terminate_status(const TermCause& c);

// --- the QP ---------------------------------------------------------------------------------

class IwQp {
  public:
    IwQp(const IwConfig& config, verbs::QpMemory& memory, verbs::QpQueues& queues,
         IwStream& stream);
    ~IwQp();
    IwQp(const IwQp&) = delete;
    IwQp& operator=(const IwQp&) = delete;

    // In-order stream bytes after the MPA exchange, split anywhere: deframes (CRC check),
    // parses, places, completes. Answers (Read/Atomic Responses, a Terminate) wait for poll().
    void on_bytes(std::span<const std::uint8_t> stream_bytes, IwTime now);

    // Sends what is due, a Terminate first, then Read and Atomic Responses, then send WRs
    // (taken with pop_send), until the stream refuses; retires completed WRs in order; in the
    // error state flushes WRs posted since. True when anything happened.
    bool poll(IwTime now);

    // 0: poll() has output now; else kIwNever (no timers over TCP).
    IwTime next_deadline() const;

    // Whether poll() would do nothing at all unless a send WR is waiting in the queue: no
    // Terminate or response to send, the read RTR settled, no WR taken and not finished. An
    // owner that knows its queue holds no send WR may skip such a poll (most of a QP's polls
    // in its grace period find nothing).
    bool idle() const {
        return state_ == IwState::ok && !term_pending_ && !more_ && rtr_sent_ && !rtr_read_out_ &&
               res_count_ == 0 && head_ == tail_;
    }

    // The path MTU changed: later FPDUs are at most `mss` bytes (an FPDU being rebuilt after
    // a refusal is rebuilt at the new size; DDP segments carry their own offsets).
    void set_mss(std::uint32_t mss);

    // Moves the QP to the error state: outstanding and later WRs complete with WR_FLUSH_ERR,
    // in order (flush_budget of each queue at once, the rest by poll()). Sends no Terminate.
    void to_error() { fail(IwError::requested); }

    // The TCP connection ended (graceful: FIN; else RST or timeout): QP to error, flush.
    void on_stream_end(bool graceful);

    // The engine sent or got a Terminate or hit a fatal error: the owner should close (or
    // abort) the stream once poll() has sent the Terminate (terminate_pending() false).
    bool wants_close() const { return wants_close_; }
    bool terminate_pending() const { return term_pending_; }

    IwState state() const { return state_; }
    IwError error() const { return error_; }
    const IwCounters& counters() const { return counters_; }
    const IwConfig& config() const { return cfg_; }
    // The Terminate this QP sent or received (layer 0/etype 0/code 0 when none).
    const TermCause& terminate_sent() const { return term_sent_; }
    const TermCause& terminate_received() const { return term_received_; }

    // For snicctl's qp dump and for tests.
    std::uint32_t expected_send_msn() const { return rx_msn_[0]; }  // next MSN on QN 0
    std::uint32_t send_wrs_held() const { return tail_ - head_; }
    std::uint32_t reads_outstanding() const { return rd_out_; }    // ours at the peer
    std::uint32_t responses_queued() const { return res_count_; }  // the peer's at us

  private:
    // A send WR held from pop_send until it completes.
    struct Held {
        verbs::SendWr wr;
        std::uint64_t len = 0;  // payload bytes
        std::uint64_t off = 0;  // sent (send/write) or received (read response)
        std::uint32_t msn = 0;  // of its untagged message (send, read/atomic request)
        std::uint32_t imm_msn = 0;
        bool started = false;
        bool imm_phase = false;  // write_imm: the data is out, the Immediate Data is next
        bool sent = false;       // all its FPDUs accepted
        bool done = false;       // complete: status below
        verbs::WcStatus status = verbs::WcStatus::success;

        // A slot taken for a new WR: its own state cleared, `wr` left for pop_send to
        // write (352 bytes a WR that clearing would store for nothing).
        void reset() {
            len = off = 0;
            msn = imm_msn = 0;
            started = imm_phase = sent = done = false;
            status = verbs::WcStatus::success;
        }
    };
    // A Read or Atomic Request of the peer, answered in request order.
    struct Response {
        bool atomic = false;
        std::uint32_t sink_stag = 0;
        std::uint64_t sink_to = 0;
        std::uint32_t src_stag = 0;
        std::uint64_t src_to = 0;
        std::uint32_t size = 0, off = 0;
        std::uint32_t request_id = 0;
        std::uint64_t orig = 0;
        bool rtr = false;
    };

    Held& held(std::uint32_t i) { return sq_[i & sq_mask_]; }

    // --- qp.cc ---
    void fail(IwError why);
    // Completes the WRs held (those done before the first unfinished one as they are) and at
    // most flush_budget of each queue's with WR_FLUSH_ERR, in order; sets more_ when a queue
    // may hold more. Returns how many it completed.
    std::uint32_t flush();
    void complete_send(const Held& h, verbs::WcStatus status);
    void complete_recv_error(const verbs::RecvWr& wr, verbs::WcStatus status);
    // Queues a Terminate for the segment `seg` (may be null) and fails the QP.
    void terminate(const TermCause& cause, std::span<const std::uint8_t> ulpdu, IwError why);
    // Where an FPDU's payload comes from: a held send WR's SGEs or inline bytes from `off`,
    // or the peer's region [to, to + len) under stag (a Read Response).
    struct Source {
        const Held* wr = nullptr;
        std::uint64_t off = 0;
        bool remote = false;
        std::uint32_t stag = 0;
        std::uint64_t to = 0;
    };
    enum class Emit : std::uint8_t { sent, refused, gather_failed };
    // Sends one FPDU: the headers of spec and `len` payload bytes from src. refused: the
    // stream said no (nothing changed; more_ is set). gather_failed: a key no longer allows
    // the access (remote_check_ says why for a remote source).
    Emit emit(const SegmentSpec& spec, std::uint32_t len, const Source& src);
    bool send_terminate();
    // One FPDU's ULPDU; `unchecked`, when not empty, is the whole FPDU whose CRC the
    // deframer left to be folded into the placement copies (rx_place, rx_crc_ok).
    void on_ulpdu(std::span<const std::uint8_t> ulpdu, std::span<const std::uint8_t> unchecked);
    void dispatch(std::span<const std::uint8_t> ulpdu);
    // Copies payload bytes of the FPDU being read to their place, folding its CRC.
    void rx_place(std::uint8_t* dst, std::span<const std::uint8_t> src) {
        if (rx_fold_ != nullptr) {
            rx_fold_->place(dst, src);
        } else {
            verbs::place(dst, src.data(), src.size());
        }
    }
    // Whether the FPDU being read passed its CRC (folded or checked in full now); on a
    // mismatch, the QP has terminated as for any CRC error. Called before an FPDU's effect
    // shows (a completion, a response, a Terminate for another cause).
    bool rx_crc_ok();
    void crc_failed();
    std::uint32_t payload_room(RdmapOp op) const;

    // --- requester.cc ---
    bool req_take();
    bool req_step();
    bool req_start(Held& h);
    bool req_send(Held& h);
    // Copies the WR's bytes [off, off + len) to dst; with `crc`, folds them into that
    // CRC-32C register as it copies them (one pass).
    bool req_gather(const Held& h, std::uint64_t off, std::uint32_t len, std::uint8_t* dst,
                    std::uint32_t* crc = nullptr);
    // Copies n bytes from src to dst; with `crc`, folds them into that CRC-32C register as it
    // copies them (one pass, crc::Crc32c::update_copy).
    static void copy_out(std::uint8_t* dst, const std::uint8_t* src, std::uint32_t n,
                         std::uint32_t* crc);
    bool req_check_local(const Held& h, bool write);
    void req_local_fail(Held& h, verbs::WcStatus status);
    bool req_rtr(IwTime now);
    bool req_nudge(IwTime now);

    // --- responder.cc ---
    // Each takes the parsed segment and its ULPDU bytes (copied into a Terminate).
    using Ulpdu = std::span<const std::uint8_t>;
    void resp_send(const Segment& seg, Ulpdu u);
    void resp_immediate(const Segment& seg, Ulpdu u);
    void resp_write(const Segment& seg, Ulpdu u);
    void resp_read_request(const Segment& seg, Ulpdu u);
    void resp_atomic_request(const Segment& seg, Ulpdu u);
    bool resp_rd_admit(const Segment& seg, Ulpdu u, std::uint32_t right);
    bool resp_rtr(const Segment& seg);
    Emit resp_emit();
    bool resp_place(std::uint32_t off, std::span<const std::uint8_t> data);

    // --- completer.cc ---
    void comp_read_response(const Segment& seg, Ulpdu u);
    void comp_atomic_response(const Segment& seg, Ulpdu u);
    void comp_terminate(const Segment& seg);
    Held* comp_oldest_rd();
    void comp_rd_done(Held& h);
    bool comp_retire();

    IwConfig cfg_;
    verbs::QpMemory& mem_;
    verbs::QpQueues& queues_;
    IwStream& stream_;
    IwCounters counters_;
    IwState state_ = IwState::ok;
    IwError error_ = IwError::none;
    bool wants_close_ = false;
    bool more_ = false;  // output left that could go now

    FpduDeframer deframer_;
    FpduCrcFold* rx_fold_ = nullptr;  // the FPDU being read, while its CRC is unchecked
    // One FPDU, sized for the largest ULPDU. Not written when allocated: every byte of an
    // FPDU is written as it is built (headers, payload, pad, CRC), and a QP that sends little
    // takes few of its pages.
    std::unique_ptr<std::uint8_t[]> txmem_;
    std::span<std::uint8_t> txbuf_;

    // Send WRs: [head_, cur_) started, [cur_, tail_) taken but not started. Free-running.
    std::unique_ptr<Held[]> sq_;
    std::uint32_t sq_mask_ = 0, sq_size_ = 0;
    std::uint32_t head_ = 0, cur_ = 0, tail_ = 0;
    std::uint32_t rd_out_ = 0;           // READ/atomics outstanding at the peer
    std::uint32_t tx_msn_[kQueueCount];  // next MSN we send per queue (QN 0, 1, 2, 3)
    std::uint32_t next_atomic_id_ = 1;
    bool rtr_sent_ = false;
    bool rtr_read_out_ = false;  // our read RTR awaits its zero-length response
    IwTime rtr_nudge_at_ = kIwNever;
    IwTime rtr_nudge_gap_ = 0;

    // Responder.
    std::uint32_t rx_msn_[kQueueCount];  // next MSN expected per queue
    bool in_msg_ = false;                // a QN 0 message is being placed
    std::uint32_t in_msn_ = 0;
    verbs::RecvWr recv_;
    bool have_recv_ = false;
    std::uint64_t recv_cap_ = 0;
    bool rtr_seen_ = false;
    bool in_write_ = false;          // a tagged Write message is being placed
    std::uint64_t write_bytes_ = 0;  // the bytes of the last (or current) Write message
    verbs::RemoteCheck remote_check_ = verbs::RemoteCheck::ok;  // why the last gather failed
    std::unique_ptr<Response[]> res_;                           // ring of ird entries
    std::uint32_t res_size_ = 0, res_head_ = 0, res_count_ = 0;

    // Terminate to send (first thing poll() does).
    bool term_pending_ = false;
    SegmentSpec term_spec_;
    std::array<std::uint8_t, kUntaggedHeaderLen> term_ddp_{};
    std::array<std::uint8_t, kTerminatedRdmapLen> term_rdmap_{};
    TermCause term_sent_{}, term_received_{};
};

}  // namespace snic::iwarp
