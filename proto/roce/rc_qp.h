// One RoCEv2 Reliable Connection QP: the requester (requester.cc: send WRs -> request
// packets), the completer (completer.cc: ACKs, NAKs and responses -> retired WRs) and the
// responder (responder.cc: request packets -> checks, placement, ACKs and responses), in
// the manner of the Linux soft-RoCE driver, tied together over the QP's QpMemory, QpQueues
// and RcWire (rc.h). IBA vol 1 §9.7 (reliable service) is the rule book.
//
// The same QP runs the Unreliable Connection service (RcConfig::service, IBA vol 1 §9.8):
// the requester's packets in UC's opcode range, each WR done once its last packet is on the
// wire (no ACK, no timer, no retransmission); the responder's checks and placement, but no
// answer: what it cannot execute (a PSN gap, a bad packet, no receive WR, a bad rkey) drops
// the message, and it takes up again at the next FIRST or ONLY packet (uc.cc).
//
// Pure engine: no DPDK, no syscalls, no exceptions, no logs, no allocation after the
// constructor (which sizes the READ/atomic resources). The send WRs it holds live in slots
// borrowed from a SendSlotPool (send_slots.h) while they are held. The owner calls
// on_packet() for every packet addressed to the QP and poll() when the QP has work: after a
// packet, after new send WRs were posted, while next_deadline() says it has output now, and
// when that deadline passes; a QP that is not polled otherwise loses nothing. Both calls
// take the current time. One thread owns a QP.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "proto/roce/packet.h"
#include "proto/roce/rc.h"
#include "proto/roce/send_slots.h"

namespace snic::roce {

class RcQp {
  public:
    // `pool`: where its send slots come from, shared with the owner's other QPs and
    // outliving them; none: a pool of its own, as large as the QP may need.
    RcQp(const RcConfig& config, QpMemory& memory, QpQueues& queues, RcWire& wire,
         SendSlotPool* pool = nullptr);
    ~RcQp();
    RcQp(const RcQp&) = delete;
    RcQp& operator=(const RcQp&) = delete;

    // A packet addressed to this QP, parsed by parse() and ICRC-checked by the caller.
    // Requests go to the responder, ACKs/NAKs/responses to the completer. Nothing is sent
    // from here: answers wait for poll().
    void on_packet(const Packet& pkt, RcTime now);

    // Does the QP's share of work: fires due timers (retransmission, RNR wait, ACK delay),
    // sends at most max_burst packets (responder output and requests, alternating), starts
    // send WRs, retires completed ones; in the error state, flushes WRs posted since.
    // Returns true when anything happened. What it leaves undone (a burst cut short, the
    // wire or the slot pool full) makes next_deadline() 0.
    bool poll(RcTime now);

    // Whether poll(now) would do nothing at all unless a send WR is waiting in the queue: no
    // timer due, no output left or due, nothing to retire, nothing taken and not sent. An
    // owner that knows its queue holds no send WR may skip such a poll.
    bool idle(RcTime now) const {
        return state_ == RcState::ok && !more_ && cur_ == start_ && start_ == tail_ &&
               poll_quiet(now);
    }

    // RTR -> RTS: the attributes Modify QP gives the send side only at RTS (IBA §11.2.4.2).
    // A QP built at RTR (its RcConfig holding the RTR attributes) serves its receive side at
    // once; the owner serves no send WRs (pop_send returns nothing) until it calls this. Takes
    // effect only while nothing has been sent; returns false (and changes nothing) after.
    bool start_requester(std::uint32_t sq_psn, std::uint8_t timeout, std::uint8_t retry_cnt,
                         std::uint8_t rnr_retry, std::uint8_t max_rd_atomic);

    // Moves the QP to the error state: every outstanding send and receive WR completes with
    // WR_FLUSH_ERR, in order: those held at once, and at most flush_budget of each queue; the
    // rest, and WRs posted later, are flushed by poll() (next_deadline() is 0 while some may
    // be left), flush_budget of each queue per poll.
    void to_error() { fail(RcError::requested); }

    RcState state() const { return state_; }
    RcError error() const { return error_; }
    const RcCounters& counters() const { return counters_; }
    const RcConfig& config() const { return cfg_; }

    // When poll() has work again without a packet or a new send WR: 0 when it has output it
    // could send now (poll() stopped short, or a packet made output due), else the earliest
    // timer (local ACK timeout, RNR wait, ACK coalescing delay), kRcNever when none. A QP
    // whose deadline is kRcNever needs no poll until a packet arrives or a WR is posted.
    RcTime next_deadline() const;

    // For snicctl's qp dump and for tests.
    std::uint32_t next_psn() const { return next_psn_; }  // PSN of the next new request
    std::uint32_t unacked_psn() const { return una_; }    // oldest not acknowledged
    std::uint32_t expected_psn() const { return epsn_; }  // the responder's ePSN
    std::uint32_t msn() const { return msn_; }            // messages the responder completed
    std::uint32_t send_wrs_held() const { return tail_ - head_; }
    // Chunks of send slots held now (none when no send WR is held).
    std::uint32_t slot_chunks_held() const;

  private:
    // --- the send WRs held, shared by requester and completer ------------------------------
    // A ring of depth_ slots (a power of two, at most kMaxHeldWrs) indexed by free-running WR
    // numbers, made of nchunks_ chunks of chunk_ slots; a chunk is borrowed from the pool
    // when a WR first needs it and given back when no held WR lives in it.
    SendSlot& slot(std::uint32_t index) {
        return chunks_[(index >> chunk_shift_) & (nchunks_ - 1)]->slots[index & (chunk_ - 1)];
    }
    const SendSlot& slot(std::uint32_t index) const {
        return chunks_[(index >> chunk_shift_) & (nchunks_ - 1)]->slots[index & (chunk_ - 1)];
    }
    SlotChunk*& chunk_of(std::uint32_t index) {
        return chunks_[(index >> chunk_shift_) & (nchunks_ - 1)];
    }
    // Fills an empty chunk entry from the pool; false (and more_) when the pool has none.
    bool borrow(SlotChunk*& chunk);
    // Retires the head WR (head_ moves on) and gives back the chunks it no longer needs.
    void pop_head();
    void release_chunks();
    // Whether the wire holds nothing of WR s's any more (RcWire::tx_settled); a WR completes
    // only then. When it still does, poll() is wanted again (more_).
    bool tx_settled(SendSlot& s) {
        if (s.tx_hold == 0 || wire_.tx_settled(s.tx_hold)) return true;
        counters_.tx_held_waits.add();
        more_ = true;
        return false;
    }

    // --- shared ----------------------------------------------------------------------------
    bool uc() const { return cfg_.service == Transport::uc; }
    void fail(RcError why);
    bool poll_quiet(RcTime now) const;
    // Completes the WRs held and at most flush_budget of each queue's with WR_FLUSH_ERR, in
    // order; sets more_ when a queue may hold more. Returns how many it completed.
    std::uint32_t flush();
    void complete_send_slot(const SendSlot& s, WcStatus status);
    void complete_recv_error(const RecvWr& wr, WcStatus status);
    // Writes one packet: headers from spec, `len` payload bytes gathered from pieces.
    using Piece = TxPiece;
    static constexpr std::uint32_t kMaxPieces = kMaxSge + 1;
    // Whether a payload of `len` bytes in one piece of registered memory goes to the wire
    // from where it lies (RcWire::tx_send_placed) rather than to be copied (tx_send).
    bool placed(std::uint32_t len) const { return len != 0 && len >= wire_.tx_placed_from; }
    // `place`: a payload in one piece may be sent from where it lies (placed()), held under
    // `hold`.
    bool emit(const PacketSpec& spec, std::uint32_t len, const Piece* pieces, std::uint32_t npieces,
              bool place = false, TxHold* hold = nullptr);
    // The BTH of one of this QP's packets (its P_Key and destination QP; no MigReq, FECN or
    // BECN), written at `out` by the one-piece paths that write their headers themselves.
    void put_bth(std::uint8_t* out, Opcode opcode, bool solicited, std::uint8_t pad, bool ack_req,
                 std::uint32_t psn) const {
        auto& bth = *reinterpret_cast<Bth*>(out);
        bth.opcode = static_cast<std::uint8_t>(opcode);
        bth.set_flags(solicited, false, pad, false, false, ack_req);
        bth.pkey = cfg_.pkey;
        bth.dest_qp = cfg_.dest_qpn;
        bth.psn = psn;
    }
    bool pkey_ok(std::uint16_t pkey) const;
    // A packet whose ICRC was left to the payload's copy (Packet::icrc_pending) is about to
    // take effect without that copy (a NAK, a duplicate, a fault): true, and counted, when
    // its ICRC is wrong and it must be dropped instead.
    bool icrc_bad(const Packet& pkt);

    // --- requester (requester.cc) -----------------------------------------------------------
    enum class Fast : std::uint8_t { none, sent, staged };  // what req_fast did
    Fast req_fast(RcTime now);
    void req_prepare(SendSlot& s);
    bool req_take();
    bool req_start_next();
    bool req_start_staged();
    bool req_emit_one(RcTime now);
    bool req_send(SendSlot& s, std::uint32_t k, RcTime now);
    bool req_gather(SendSlot& s, std::uint64_t off, std::uint32_t len, Piece* pieces,
                    std::uint32_t& npieces);
    void req_fail_slot(SendSlot& s, WcStatus status, RcError why);
    bool req_go_back(std::uint32_t psn, bool forced, RcTime now);
    bool req_timers(RcTime now);
    void req_normalize_cursor();
    std::uint32_t req_cursor_psn() const;
    void req_arm_timer(RcTime now);

    // --- completer (completer.cc) -----------------------------------------------------------
    void comp_on_packet(const Packet& pkt, RcTime now);
    void comp_ack_upto(std::uint32_t psn, RcTime now);
    bool comp_retire();
    void comp_update_una();
    void comp_progress(RcTime now);
    void comp_read_response(const Packet& pkt, RcTime now);
    void comp_atomic_ack(const Packet& pkt, RcTime now);
    void comp_nak(const Packet& pkt, RcTime now);
    void comp_fail_at(std::uint32_t psn, WcStatus status, RcError why);
    bool comp_scatter(SendSlot& s, std::uint64_t off, const std::uint8_t* data, std::uint32_t len);

    // --- responder (responder.cc) -----------------------------------------------------------
    struct RdAtomicRes {
        bool used = false;
        bool atomic = false;
        bool active = false;          // responses (or the ATOMIC ACK) still to send
        bool replay = false;          // active because of a duplicate request
        std::uint32_t first_psn = 0;  // the request's PSN
        std::uint32_t npsn = 0;       // PSNs it takes (READ: responses)
        std::uint32_t start_psn = 0;  // PSN of response 0 of the current (re)answer
        std::uint32_t count = 0;      // responses in the current answer
        std::uint32_t next = 0;       // next response to send, from start_psn
        std::uint64_t va = 0;         // of the current answer
        std::uint32_t rkey = 0;
        std::uint32_t len = 0;
        std::uint64_t orig = 0;  // atomic: the value before the operation
        std::uint32_t msn = 0;
    };

    // Why a SEND or RDMA WRITE packet at ePSN was not executed (nothing of it took effect).
    // The service decides what follows: RC answers with a NAK (resp_fault), UC drops the
    // message (uc_fault).
    enum class ExecFault : std::uint8_t {
        none,
        no_recv,       // no receive WR (RC: RNR NAK)
        bad_request,   // lengths, RETH, opcode sequence
        too_long,      // more than the receive WR holds
        no_access,     // the QP's rights, or the rkey, bounds, rights or PD of the region
        local_memory,  // the receive WR's own memory failed
        invalidate,    // Send with Invalidate may not invalidate that rkey
        bad_icrc,      // the ICRC folded while placing the payload was wrong: drop it
    };

    bool resp_fast(const Packet& pkt, RcTime now);
    void resp_on_packet(const Packet& pkt, RcTime now);
    void resp_duplicate(const Packet& pkt, RcTime now);
    ExecFault resp_send(const Packet& pkt);
    ExecFault resp_write(const Packet& pkt);
    void resp_fault(ExecFault fault, std::uint32_t psn);
    void resp_read(const Packet& pkt);
    void resp_atomic(const Packet& pkt);
    bool resp_take_recv();
    void resp_complete_recv(const Packet& pkt, WcOpcode opcode, std::uint32_t byte_len,
                            const std::uint32_t* invalidated);
    bool resp_place(std::uint32_t off, const Packet& pkt, std::uint32_t& icrc_reg);
    void resp_fatal(NakCode code, std::uint32_t psn, WcStatus recv_status);
    void resp_queue_nak(std::uint8_t syndrome, std::uint32_t psn, bool fatal);
    void resp_executed(const Packet& pkt, RcTime now);
    RdAtomicRes* resp_alloc_res();
    RdAtomicRes* resp_oldest_active();
    void res_set_active(RdAtomicRes& r, bool active);
    bool resp_emit_one(RcTime now);
    bool resp_emit_ack(std::uint8_t syndrome, std::uint32_t psn);
    bool resp_send_nak();
    bool resp_send_res(RdAtomicRes& r);
    bool resp_ack_due(RcTime now) const;

    // --- UC's responder (uc.cc) -------------------------------------------------------------
    void uc_on_packet(const Packet& pkt);
    void uc_fault(ExecFault fault);
    void uc_drop_message();

    // --- state -----------------------------------------------------------------------------
    RcConfig cfg_;
    QpMemory& mem_;
    QpQueues& queues_;
    RcWire& wire_;
    RcCounters counters_;
    const std::array<WrOpInfo, kWrOpCount>* ops_ = &kWrOpTable;  // the service's WR opcodes
    RcState state_ = RcState::ok;
    RcError error_ = RcError::none;
    RcTime timeout_ns_ = kRcNever;

    // Requester and completer. Slots [head_, start_) are started (in flight, done, failed),
    // [start_, tail_) taken from the queue but not started (at most one). Free-running.
    std::unique_ptr<SendSlotPool> own_pool_;  // when not given one
    SendSlotPool* pool_ = nullptr;
    std::array<SlotChunk*, kMaxChunksPerQp> chunks_{};
    std::uint32_t depth_ = 0;  // the most WRs held at once
    std::uint32_t chunk_ = 0, chunk_shift_ = 0, nchunks_ = 0;
    bool more_ = false;  // the last poll() left output it could have sent
    std::uint32_t head_ = 0, start_ = 0, tail_ = 0;
    std::uint32_t cur_ = 0, cur_pkt_ = 0;  // the send cursor: slot and packet within it
    std::uint32_t next_psn_ = 0;           // PSN of the next WR to start
    std::uint32_t una_ = 0;                // oldest unacknowledged PSN
    std::uint32_t sent_end_ = 0;  // one past the highest PSN ever sent (or asked for by a READ)
    std::uint32_t rd_atomic_out_ = 0;
    bool blocked_ = false;  // a failed WR was started: start nothing after it
    std::uint8_t retry_left_ = 0, rnr_left_ = 0;
    RcTime deadline_ = kRcNever;  // local ACK timer
    bool rnr_wait_ = false;
    RcTime rnr_until_ = 0;
    std::uint32_t rnr_psn_ = 0;
    bool guard_ = false;  // went back to guard_psn_ already: stale triggers are ignored
    std::uint32_t guard_psn_ = 0;

    // Responder.
    enum class InMsg : std::uint8_t { none, send, write };
    std::uint32_t epsn_ = 0;
    std::uint32_t msn_ = 0;
    InMsg in_msg_ = InMsg::none;
    RecvWr recv_;
    bool have_recv_ = false;
    std::uint64_t recv_cap_ = 0;
    std::uint32_t recv_off_ = 0;
    std::uint64_t write_va_ = 0;
    std::uint32_t write_rkey_ = 0, write_len_ = 0, write_done_ = 0;
    bool seq_nak_sent_ = false;  // a NAK episode: PSNs ahead are dropped silently
    bool uc_dropping_ = false;   // UC: a message is being dropped, up to the next FIRST/ONLY
    bool nak_pending_ = false, nak_fatal_ = false;
    std::uint8_t nak_syndrome_ = 0;
    std::uint32_t nak_psn_ = 0;
    bool ack_needed_ = false, ack_now_ = false;
    std::uint32_t ack_count_ = 0, ack_reqs_ = 0;
    RcTime ack_since_ = 0;
    std::unique_ptr<RdAtomicRes[]> res_;
    std::uint32_t nres_ = 0, res_next_ = 0;
    std::uint32_t res_active_ = 0;  // resources with responses still to send
};

}  // namespace snic::roce
