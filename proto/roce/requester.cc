// The requester: turns send WRs into request packets (IBA vol 1 §9.7).
//
// A WR is taken from the send queue when a slot is free, checked (SGEs against QpMemory,
// lengths, atomic alignment) and started when it may be: not past a failed WR, a fenced WR
// only when no READ/atomic is outstanding, a READ/atomic only under max_rd_atomic, and not
// beyond the window of unacknowledged PSNs. Starting gives the WR its PSNs: one per packet
// of a SEND/WRITE (segmented by path MTU), one per response packet of a READ, one for an
// atomic. Local operations (local invalidate, bind MW) start only when every earlier WR has
// completed, so that they take effect exactly between the WRs around them.
//
// The send cursor walks the started WRs packet by packet; going back (sequence NAK, RNR,
// timeout, lost READ response) moves it back to a PSN, and what is sent again is read
// again from the still-registered memory. Payload is gathered straight into the packet.
//
// UC: the same packets in UC's opcode range (without AckReq); a packet counts as
// acknowledged once it is on the wire, so a WR completes when its last packet leaves and the
// cursor never goes back.
#include <algorithm>
#include <cstring>
#include <utility>

#include "proto/roce/psn.h"
#include "proto/roce/rc_qp.h"

namespace snic::roce {
namespace {

// Most PSNs one WR may take: keeps every outstanding PSN within IBA's half space (2^23)
// together with the window. With a 256-byte MTU that is 1 GiB per message.
constexpr std::uint32_t kMaxWrPsns = 1u << 22;

constexpr std::uint32_t packets_for(std::uint64_t length, std::uint32_t mtu) {
    return length == 0 ? 1 : static_cast<std::uint32_t>((length + mtu - 1) / mtu);
}

}  // namespace

// Checks a WR just taken from the queue and computes its length and PSN count. A WR that
// fails here is started as failed: it completes in error when it reaches the head.
void RcQp::req_prepare(SendSlot& s) {
    s.state = SlotState::staged;
    s.status = WcStatus::success;
    s.why = RcError::none;
    s.acked = 0;
    s.length = 0;
    s.npsn = 0;
    const SendWr& wr = s.wr;
    const auto opv = static_cast<std::uint8_t>(wr.op);
    if (opv >= kWrOpCount) {
        s.op = &wr_op_info(WrOp::send);
        req_fail_slot(s, WcStatus::loc_qp_op_err, RcError::local_error);
        return;
    }
    s.op = &(*ops_)[opv];
    const WrOpInfo& op = *s.op;
    if (!op.offered) {  // UC: READ, atomics, Send with Invalidate
        req_fail_slot(s, WcStatus::loc_qp_op_err, RcError::local_error);
        return;
    }
    if (op.kind == WrKind::local) return;

    std::uint64_t length = 0;
    if (wr.inline_data) {
        if (!op.has_payload() || wr.inline_len > cfg_.max_inline) {
            req_fail_slot(s, WcStatus::loc_qp_op_err, RcError::local_error);
            return;
        }
        length = wr.inline_len;
    } else {
        if (wr.num_sge > kMaxSge) {
            req_fail_slot(s, WcStatus::loc_qp_op_err, RcError::local_error);
            return;
        }
        for (std::uint32_t i = 0; i < wr.num_sge; ++i) length += wr.sge[i].length;
    }
    if (length > kMaxMessage || packets_for(length, cfg_.mtu) > kMaxWrPsns) {
        req_fail_slot(s, WcStatus::loc_len_err, RcError::local_error);
        return;
    }
    s.length = static_cast<std::uint32_t>(length);
    if (op.kind == WrKind::atomic) {
        if (length != sizeof(std::uint64_t)) {
            req_fail_slot(s, WcStatus::loc_len_err, RcError::local_error);
            return;
        }
        if (wr.remote_addr % sizeof(std::uint64_t) != 0) {
            req_fail_slot(s, WcStatus::loc_qp_op_err, RcError::local_error);
            return;
        }
    }
    if (op.rd_atomic() && cfg_.max_rd_atomic == 0) {
        req_fail_slot(s, WcStatus::loc_qp_op_err, RcError::local_error);
        return;
    }
    if (!wr.inline_data) {
        // READ and atomics write into their SGEs; the others read from them.
        const bool write = op.rd_atomic();
        for (std::uint32_t i = 0; i < wr.num_sge; ++i) {
            const Sge& g = wr.sge[i];
            if (g.length != 0 && mem_.local(g.lkey, g.addr, g.length, write) == nullptr) {
                req_fail_slot(s, WcStatus::loc_prot_err, RcError::local_error);
                return;
            }
        }
    }
    s.npsn = op.kind == WrKind::atomic ? 1 : packets_for(length, cfg_.mtu);
}

void RcQp::req_fail_slot(SendSlot& s, WcStatus status, RcError why) {
    s.state = SlotState::failed;
    s.status = status;
    s.why = why;
    blocked_ = true;
}

// Takes the next WR from the queue into slot(tail_) (tail_ moves on) when the QP may hold
// another and a slot is to be had; false, holding nothing more, when not.
inline bool RcQp::req_take() {
    if (tail_ - head_ >= depth_) return false;
    SlotChunk*& chunk = chunk_of(tail_);
    const bool borrowed = chunk == nullptr;
    if (borrowed && (!queues_.send_ready() || !borrow(chunk))) return false;
    if (!queues_.pop_send(slot(tail_).wr)) {
        if (borrowed) pool_->give(std::exchange(chunk, nullptr));  // nothing to hold
        return false;
    }
    ++tail_;
    return true;
}

// Takes the next WR from the queue if need be and starts it if it may start now.
bool RcQp::req_start_next() {
    if (blocked_) return false;
    if (start_ == tail_) {
        if (!req_take()) return false;
        req_prepare(slot(start_));
    }
    return req_start_staged();
}

// Starts the WR taken but not started, if it may start now.
bool RcQp::req_start_staged() {
    SendSlot& s = slot(start_);
    if (s.state == SlotState::failed) {
        s.first_psn = next_psn_;
        s.npsn = 0;
        ++start_;
        return true;
    }
    if (s.wr.fence && rd_atomic_out_ > 0) return false;
    if (s.op->kind == WrKind::local) {
        if (head_ != start_) return false;  // after everything before it has completed
        const WcStatus st = s.wr.op == WrOp::local_inv ? mem_.local_invalidate(s.wr.imm_or_rkey)
                                                       : mem_.bind_mw(s.wr.bind);
        s.first_psn = next_psn_;
        s.npsn = 0;
        if (st == WcStatus::success)
            s.state = SlotState::done;
        else
            req_fail_slot(s, st, RcError::local_error);
        ++start_;
        return true;
    }
    if (s.op->rd_atomic() && rd_atomic_out_ >= cfg_.max_rd_atomic) return false;
    if (una_ != next_psn_ && psn_diff(next_psn_, una_) >= static_cast<std::int32_t>(cfg_.window))
        return false;
    s.first_psn = next_psn_;
    s.acked = 0;
    s.state = SlotState::in_flight;
    next_psn_ = psn_add(next_psn_, s.npsn);
    if (s.op->rd_atomic()) ++rd_atomic_out_;
    ++start_;
    return true;
}

// Keeps the cursor off retired WRs and acknowledged packets.
void RcQp::req_normalize_cursor() {
    if (static_cast<std::int32_t>(cur_ - head_) < 0) {
        cur_ = head_;
        cur_pkt_ = 0;
    }
    if (cur_ == head_ && head_ != start_) {
        const SendSlot& s = slot(head_);
        if (s.state == SlotState::in_flight && cur_pkt_ < s.acked) cur_pkt_ = s.acked;
    }
}

// The PSN of the next packet the cursor will send.
std::uint32_t RcQp::req_cursor_psn() const {
    if (cur_ == start_) return next_psn_;
    const SendSlot& s = slot(cur_);
    return psn_add(s.first_psn, cur_pkt_);
}

void RcQp::req_arm_timer(RcTime now) {
    if (deadline_ == kRcNever && timeout_ns_ != kRcNever) deadline_ = now + timeout_ns_;
}

// The common case in one piece: with nothing staged and the cursor at the end, the next WR
// taken from the queue is a SEND or RDMA WRITE (with or without immediate) of one packet,
// inline or in at most one SGE, that may start now. It is started and sent here, with no
// packet description and no gather loop, to the same bytes and the same state the general
// path below gives it (the RcFast differential tests in test_rc_link.cc hold the two
// together).
// Anything else is taken and started (when it may start) as the general path does it, which
// goes on from there.
RcQp::Fast RcQp::req_fast(RcTime now) {
    if (blocked_ || !req_take()) return Fast::none;
    SendSlot& s = slot(start_);
    const SendWr& wr = s.wr;
    const bool with_imm = wr.op == WrOp::send_imm || wr.op == WrOp::rdma_write_imm;
    const bool write = wr.op == WrOp::rdma_write || wr.op == WrOp::rdma_write_imm;
    const bool plain = write || with_imm || wr.op == WrOp::send;
    const std::uint32_t len = wr.inline_data    ? wr.inline_len
                              : wr.num_sge == 1 ? wr.sge[0].length
                                                : 0;
    const std::uint32_t psn = next_psn_;
    if (!plain || (wr.fence && rd_atomic_out_ > 0) || len > cfg_.mtu ||
        (wr.inline_data ? len > cfg_.max_inline : wr.num_sge > 1) ||
        (una_ != psn && psn_diff(psn, una_) >= static_cast<std::int32_t>(cfg_.window))) {
        req_prepare(s);
        req_start_staged();
        return Fast::staged;
    }
    const std::uint8_t* data = wr.inline_bytes.data();
    if (!wr.inline_data && len != 0) {
        data = mem_.local(wr.sge[0].lkey, wr.sge[0].addr, len, false);
        if (data == nullptr) {
            req_prepare(s);  // fails it as the general path does
            req_start_staged();
            return Fast::staged;
        }
    }
    const WrOpInfo& op = (*ops_)[static_cast<std::uint8_t>(wr.op)];
    s.op = &op;
    s.length = len;
    s.first_psn = psn;
    s.npsn = 1;
    s.acked = 0;
    s.state = SlotState::in_flight;
    s.status = WcStatus::success;
    s.why = RcError::none;
    next_psn_ = psn_add(psn, 1);
    ++start_;

    const OpcodeInfo& info = opcode_info(op.only);
    const std::size_t total = info.length + len + pad_for(len);
    const std::span<std::uint8_t> out = wire_.tx_alloc(total);
    if (out.size() < total) {  // started, not sent: the cursor sends it on a later poll
        counters_.tx_full.add();
        more_ = true;
        return Fast::none;
    }
    put_bth(out.data(), op.only, wr.solicited && (!write || with_imm), pad_for(len), !uc(), psn);
    std::uint8_t* ext = out.data() + kBthLen;
    if (write) {
        Reth reth;
        reth.va = wr.remote_addr;
        reth.rkey = wr.rkey;
        reth.dma_len = len;
        std::memcpy(ext, &reth, sizeof reth);
        ext += sizeof reth;
    }
    if (with_imm) std::memcpy(ext, &wr.imm_or_rkey, sizeof(ImmDt));  // as posted
    const TxPiece piece{data, len};
    if (!wr.inline_data && placed(len))
        wire_.tx_send_placed(total, info.length, piece, &s.tx_hold);
    else
        wire_.tx_send(total, info.length, {&piece, len != 0 ? 1u : 0u});

    (write ? counters_.tx_write_packets : counters_.tx_send_packets).add();
    sent_end_ = next_psn_;  // a new PSN: never behind what was sent
    ++cur_;
    cur_pkt_ = 0;
    if (uc()) {
        s.acked = 1;
        s.state = SlotState::done;
        comp_retire();
        comp_update_una();
    } else {
        req_arm_timer(now);
    }
    return Fast::sent;
}

// Sends one request packet from the cursor. False when there is nothing it may send now.
bool RcQp::req_emit_one(RcTime now) {
    if (rnr_wait_) return false;
    req_normalize_cursor();
    if (cur_ == start_ && start_ == tail_ && cfg_.fast_path) {
        const Fast f = req_fast(now);
        if (f != Fast::staged) return f == Fast::sent;
    }
    for (std::uint32_t steps = 0; steps <= depth_; ++steps) {
        if (cur_ == start_ && !req_start_next()) return false;
        SendSlot& s = slot(cur_);
        if (s.state == SlotState::failed) return false;
        if (s.state != SlotState::in_flight || s.npsn == 0) {
            ++cur_;
            cur_pkt_ = 0;
            continue;
        }
        const std::uint32_t psn = psn_add(s.first_psn, cur_pkt_);
        if (psn != una_ && psn_diff(psn, una_) >= static_cast<std::int32_t>(cfg_.window))
            return false;
        if (!req_send(s, cur_pkt_, now)) return false;
        if (s.op->rd_atomic() || ++cur_pkt_ == s.npsn) {
            ++cur_;
            cur_pkt_ = 0;
        }
        if (uc()) {
            // Nothing will acknowledge it: a packet is done once sent, a WR once its last
            // packet is, and completes now (after every WR before it, all sent already).
            comp_retire();
            comp_update_una();
        }
        return true;
    }
    return false;
}

// Gathers [off, off + len) of the WR's message (SGEs or inline data) as pieces.
bool RcQp::req_gather(SendSlot& s, std::uint64_t off, std::uint32_t len, Piece* pieces,
                      std::uint32_t& npieces) {
    npieces = 0;
    if (len == 0) return true;
    const SendWr& wr = s.wr;
    if (wr.inline_data) {
        pieces[npieces++] = {wr.inline_bytes.data() + off, len};
        return true;
    }
    std::uint64_t pos = 0;  // message offset of SGE i
    for (std::uint32_t i = 0; i < wr.num_sge && len > 0; ++i) {
        const Sge& g = wr.sge[i];
        if (off >= pos + g.length) {
            pos += g.length;
            continue;
        }
        const std::uint64_t in = off - pos;
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(len, g.length - in));
        const std::uint8_t* p = mem_.local(g.lkey, g.addr + in, n, false);
        if (p == nullptr) return false;
        pieces[npieces++] = {p, n};
        off += n;
        len -= n;
        pos += g.length;
    }
    return len == 0;
}

// Builds and sends packet k of WR s (for a READ: the request for responses k and on).
bool RcQp::req_send(SendSlot& s, std::uint32_t k, RcTime now) {
    const SendWr& wr = s.wr;
    const WrOpInfo& op = *s.op;
    PacketSpec spec;
    spec.pkey = cfg_.pkey;
    spec.dest_qp = cfg_.dest_qpn;
    spec.psn = psn_add(s.first_psn, k);
    Piece pieces[kMaxPieces];
    std::uint32_t npieces = 0;
    std::uint32_t len = 0;
    std::uint32_t end = psn_add(spec.psn, 1);  // one past the PSNs this packet asks for
    const std::uint64_t off = std::uint64_t{k} * cfg_.mtu;

    switch (op.kind) {
        case WrKind::send:
        case WrKind::write: {
            const bool first = k == 0;
            const bool last = k + 1 == s.npsn;
            spec.opcode = first && last ? op.only : first ? op.first : last ? op.last : op.middle;
            len = static_cast<std::uint32_t>(std::min<std::uint64_t>(cfg_.mtu, s.length - off));
            if (!req_gather(s, off, len, pieces, npieces)) {
                req_fail_slot(s, WcStatus::loc_prot_err, RcError::local_error);
                return false;
            }
            std::memcpy(&spec.immdt, &wr.imm_or_rkey, sizeof(spec.immdt));  // as posted
            spec.ieth.rkey = wr.imm_or_rkey;
            spec.reth.va = wr.remote_addr;
            spec.reth.rkey = wr.rkey;
            spec.reth.dma_len = s.length;
            spec.solicited =
                wr.solicited && last && (op.kind == WrKind::send || wr.op == WrOp::rdma_write_imm);
            spec.ack_req = !uc() && (last || (k + 1) % cfg_.ack_req_every == 0);
            break;
        }
        case WrKind::read:
            spec.opcode = op.only;
            spec.reth.va = wr.remote_addr + off;
            spec.reth.rkey = wr.rkey;
            spec.reth.dma_len =
                static_cast<std::uint32_t>(s.length - std::min<std::uint64_t>(off, s.length));
            spec.ack_req = true;
            end = psn_add(s.first_psn, s.npsn);
            break;
        case WrKind::atomic:
            spec.opcode = op.only;
            spec.atomic_eth.va = wr.remote_addr;
            spec.atomic_eth.rkey = wr.rkey;
            spec.atomic_eth.swap_add = wr.op == WrOp::atomic_cmp_swp ? wr.swap : wr.compare_add;
            spec.atomic_eth.compare = wr.op == WrOp::atomic_cmp_swp ? wr.compare_add : 0;
            spec.ack_req = true;
            break;
        case WrKind::local:
            return false;
    }
    if (!emit(spec, len, pieces, npieces, !wr.inline_data, &s.tx_hold)) return false;

    switch (op.kind) {
        case WrKind::send:
            counters_.tx_send_packets.add();
            break;
        case WrKind::write:
            counters_.tx_write_packets.add();
            break;
        case WrKind::read:
            counters_.tx_read_requests.add();
            break;
        case WrKind::atomic:
            counters_.tx_atomic_requests.add();
            break;
        case WrKind::local:
            break;
    }
    if (psn_lt(spec.psn, sent_end_)) counters_.tx_retransmits.add();
    if (psn_gt(end, sent_end_)) sent_end_ = end;
    if (uc()) {
        s.acked = k + 1;  // on the wire: all UC does for a packet
        if (s.acked == s.npsn) s.state = SlotState::done;
        return true;
    }
    req_arm_timer(now);
    return true;
}

// Moves the cursor back to `psn` (go-back-N). A trigger that is not forced (a NAK, a gap
// in READ responses, an ACK past a READ without its data) is ignored when the cursor is
// already due to send `psn` or went back to it before without progress since: it is a
// stale echo of the same loss. Returns true when the cursor moved.
bool RcQp::req_go_back(std::uint32_t psn, bool forced, RcTime now) {
    if (!forced && guard_ && guard_psn_ == psn) return false;
    req_normalize_cursor();
    if (!forced && psn_le(req_cursor_psn(), psn)) {
        guard_ = true;
        guard_psn_ = psn;
        return false;
    }
    for (std::uint32_t i = head_; i != start_; ++i) {
        const SendSlot& s = slot(i);
        if (s.state != SlotState::in_flight || s.npsn == 0) continue;
        if (!psn_in_range(psn, s.first_psn, s.npsn)) continue;
        cur_ = i;
        cur_pkt_ = psn_sub(psn, s.first_psn);
        guard_ = true;
        guard_psn_ = psn;
        counters_.go_back.add();
        if (timeout_ns_ != kRcNever) deadline_ = now + timeout_ns_;
        return true;
    }
    return false;
}

// The local ACK timer and the RNR wait.
bool RcQp::req_timers(RcTime now) {
    bool did = false;
    if (rnr_wait_ && now >= rnr_until_) {
        rnr_wait_ = false;
        req_go_back(rnr_psn_, true, now);
        did = true;
    }
    if (deadline_ != kRcNever && now >= deadline_) {
        did = true;
        if (una_ == sent_end_ || head_ == start_) {
            deadline_ = kRcNever;  // nothing outstanding
            return did;
        }
        counters_.timeouts.add();
        if (retry_left_ == 0) {
            comp_fail_at(una_, WcStatus::retry_exc_err, RcError::retry_exceeded);
            return did;
        }
        --retry_left_;
        deadline_ = kRcNever;
        req_go_back(una_, true, now);
        if (deadline_ == kRcNever && timeout_ns_ != kRcNever) deadline_ = now + timeout_ns_;
    }
    return did;
}

}  // namespace snic::roce
