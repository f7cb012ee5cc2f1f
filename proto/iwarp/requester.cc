// The requester: send WRs, in queue order, into FPDUs of at most mss bytes. Send variants are
// untagged messages on QN 0, RDMA Writes tagged segments to the WR's rkey, READs and atomics
// one untagged request on QN 1 (bounded by ORD, waited on by fenced WRs); RDMA Write with
// Immediate is the Write followed by an RFC 7306 Immediate Data message on QN 0. Local
// operations (local invalidate, MW bind) run through QpMemory when the WR's turn comes.
#include <algorithm>
#include <cstring>

#include "proto/crc/crc.h"
#include "proto/iwarp/qp.h"

namespace snic::iwarp {

using verbs::WcStatus;
using verbs::WrKind;
using verbs::WrOp;

bool IwQp::req_rtr(IwTime now) {
    // RFC 6581: the zero-length message that tells the peer it may send. A read RTR asks for
    // nothing (size 0); its zero-length Read Response is taken by the completer.
    SegmentSpec s;
    switch (cfg_.rtr_send) {
        case Rtr::write:
            s.op = RdmapOp::write;
            break;
        case Rtr::read:
            s.op = RdmapOp::read_request;
            s.msn = tx_msn_[static_cast<std::size_t>(Queue::read_request)];
            break;
        case Rtr::send:
        case Rtr::none:
            s.op = RdmapOp::send;
            s.msn = tx_msn_[static_cast<std::size_t>(Queue::send)];
            break;
    }
    if (emit(s, 0, Source{}) != Emit::sent) return false;
    if (cfg_.rtr_send == Rtr::read) {
        ++tx_msn_[static_cast<std::size_t>(Queue::read_request)];
        rtr_read_out_ = true;
        rtr_nudge_gap_ = cfg_.rtr_nudge;
        rtr_nudge_at_ = now + rtr_nudge_gap_;
    } else if (cfg_.rtr_send == Rtr::send) {
        ++tx_msn_[static_cast<std::size_t>(Queue::send)];
    }
    rtr_sent_ = true;
    return true;
}

// Our read RTR is unanswered: a zero-length Write, which RFC 5040 places nothing for, gives a
// peer that left the RTR unread new bytes to read it with. Then the wait doubles, to 1 s.
bool IwQp::req_nudge(IwTime now) {
    SegmentSpec s;
    s.op = RdmapOp::write;
    if (emit(s, 0, Source{}) != Emit::sent) return false;
    counters_.tx_rtr_nudges.add();
    constexpr IwTime kMaxGap = 1'000'000'000;
    rtr_nudge_gap_ = std::min(2 * rtr_nudge_gap_, kMaxGap);
    rtr_nudge_at_ = now + rtr_nudge_gap_;
    return true;
}

// One step of the send queue: takes a WR, starts one, or sends one FPDU. False when nothing
// could be done (queue empty, a fence or ORD waits, the stream refused).
bool IwQp::req_step() {
    if (cur_ == tail_) {
        if (tail_ - head_ == sq_size_) return false;
        Held& h = held(tail_);
        h.reset();
        if (!queues_.pop_send(h.wr)) return false;
        ++tail_;
    }
    Held& h = held(cur_);
    if (!h.started && !req_start(h)) return false;
    if (state_ != IwState::ok) return true;  // it failed: flushed with everything else
    if (!h.sent && !req_send(h)) return false;
    if (state_ != IwState::ok) return true;
    if (h.sent) ++cur_;
    return true;
}

void IwQp::req_local_fail(Held& h, WcStatus status) {
    h.started = h.sent = h.done = true;
    h.status = status;
    terminate(term_cause(RdmapEtype::local_catastrophic, RdmapCode::catastrophic_stream), {},
              IwError::local_error);
}

bool IwQp::req_check_local(const Held& h, bool write) {
    for (std::uint32_t i = 0; i < h.wr.num_sge; ++i) {
        const verbs::Sge& g = h.wr.sge[i];
        if (g.length != 0 && mem_.local(g.lkey, g.addr, g.length, write) == nullptr) return false;
    }
    return true;
}

// Checks and numbers a WR before its first FPDU; false when it must wait (fence, ORD).
bool IwQp::req_start(Held& h) {
    const auto opi = static_cast<std::size_t>(h.wr.op);
    if (opi >= verbs::kWrOpCount || h.wr.op == WrOp::send_imm) {
        // RDMAP has no Send with Immediate (RFC 7306 has Immediate Data alone, which is
        // how Write with Immediate goes); iWARP RNICs refuse it as siw does.
        req_local_fail(h, WcStatus::loc_qp_op_err);
        return true;
    }
    const verbs::WrOpKind& kind = verbs::kWrOpKinds[opi];
    if (h.wr.fence && rd_out_ > 0) return false;
    if (kind.rd_atomic() && rd_out_ >= cfg_.ord) return false;
    if (h.wr.num_sge > verbs::kMaxSge || (h.wr.inline_data && h.wr.inline_len > cfg_.max_inline)) {
        req_local_fail(h, WcStatus::loc_len_err);
        return true;
    }
    if (h.wr.inline_data && kind.has_payload()) {
        h.len = h.wr.inline_len;
    } else {
        for (std::uint32_t i = 0; i < h.wr.num_sge; ++i) h.len += h.wr.sge[i].length;
    }
    switch (kind.kind) {
        case WrKind::local: {
            const WcStatus st = h.wr.op == WrOp::local_inv ? mem_.local_invalidate(h.wr.imm_or_rkey)
                                                           : mem_.bind_mw(h.wr.bind);
            h.len = 0;
            if (st != WcStatus::success) {
                req_local_fail(h, st);
                return true;
            }
            h.started = h.sent = h.done = true;
            return true;
        }
        case WrKind::send:
        case WrKind::write:
            if (h.len >= verbs::kMaxMessage) {
                req_local_fail(h, WcStatus::loc_len_err);
                return true;
            }
            if (!h.wr.inline_data && !req_check_local(h, false)) {
                req_local_fail(h, WcStatus::loc_prot_err);
                return true;
            }
            if (kind.kind == WrKind::send) h.msn = tx_msn_[static_cast<std::size_t>(Queue::send)]++;
            if (h.wr.op == WrOp::rdma_write_imm)
                h.imm_msn = tx_msn_[static_cast<std::size_t>(Queue::send)]++;
            break;
        case WrKind::read:
        case WrKind::atomic:
            if (kind.kind == WrKind::atomic && (h.wr.num_sge < 1 || h.wr.sge[0].length < 8)) {
                req_local_fail(h, WcStatus::loc_len_err);
                return true;
            }
            if (kind.kind == WrKind::atomic) h.len = 8;
            if (h.len >= verbs::kMaxMessage) {
                req_local_fail(h, WcStatus::loc_len_err);
                return true;
            }
            if (!req_check_local(h, true)) {
                req_local_fail(h, WcStatus::loc_prot_err);
                return true;
            }
            h.msn = tx_msn_[static_cast<std::size_t>(Queue::read_request)]++;
            if (kind.kind == WrKind::atomic) h.imm_msn = next_atomic_id_++;
            ++rd_out_;
            break;
    }
    h.started = true;
    return true;
}

// Copies payload bytes [off, off + len) of a WR (inline bytes or its SGEs) to dst.
bool IwQp::req_gather(const Held& h, std::uint64_t off, std::uint32_t len, std::uint8_t* dst,
                      std::uint32_t* crc) {
    if (h.wr.inline_data) {
        copy_out(dst, h.wr.inline_bytes.data() + off, len, crc);
        return true;
    }
    for (std::uint32_t i = 0; i < h.wr.num_sge && len > 0; ++i) {
        const verbs::Sge& g = h.wr.sge[i];
        if (off >= g.length) {
            off -= g.length;
            continue;
        }
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(g.length - off, len));
        const std::uint8_t* p = mem_.local(g.lkey, g.addr + off, n, false);
        if (p == nullptr) return false;
        copy_out(dst, p, n, crc);
        dst += n;
        len -= n;
        off = 0;
    }
    return len == 0;
}

// Sends the WR's next FPDU; false when the stream refused it.
bool IwQp::req_send(Held& h) {
    const verbs::WrOpKind& kind = verbs::wr_op_kind(h.wr.op);
    SegmentSpec s;
    std::uint32_t len = 0;
    IwCounter* counter = nullptr;
    bool finishes = false;
    if (kind.rd_atomic()) {
        if (kind.kind == WrKind::read) {
            s.op = RdmapOp::read_request;
            const bool has_sge = h.wr.num_sge > 0;
            s.read = {has_sge ? h.wr.sge[0].lkey : 0, has_sge ? h.wr.sge[0].addr : 0,
                      static_cast<std::uint32_t>(h.len), h.wr.rkey, h.wr.remote_addr};
            counter = &counters_.tx_read_requests;
        } else {
            s.op = RdmapOp::atomic_request;
            const bool cas = h.wr.op == WrOp::atomic_cmp_swp;
            s.atomic.op = cas ? AtomicOp::compare_swap : AtomicOp::fetch_add;
            s.atomic.request_id = h.imm_msn;
            s.atomic.stag = h.wr.rkey;
            s.atomic.to = h.wr.remote_addr;
            s.atomic.swap_add = cas ? h.wr.swap : h.wr.compare_add;
            s.atomic.swap_add_mask = cas ? ~std::uint64_t{0} : 0;  // add: no carry boundaries
            s.atomic.compare = cas ? h.wr.compare_add : 0;
            s.atomic.compare_mask = cas ? ~std::uint64_t{0} : 0;
            counter = &counters_.tx_atomic_requests;
        }
        s.msn = h.msn;
        finishes = true;
    } else if (h.imm_phase) {
        s.op = h.wr.solicited ? RdmapOp::immediate_se : RdmapOp::immediate;
        s.msn = h.imm_msn;
        std::memcpy(s.immediate.data(), &h.wr.imm_or_rkey, sizeof h.wr.imm_or_rkey);
        counter = &counters_.tx_immediates;
        finishes = true;
    } else {
        if (kind.kind == WrKind::send) {
            const bool inv = h.wr.op == WrOp::send_inv;
            s.op = h.wr.solicited ? (inv ? RdmapOp::send_se_inv : RdmapOp::send_se)
                                  : (inv ? RdmapOp::send_inv : RdmapOp::send);
            s.inv_stag = h.wr.imm_or_rkey;
            s.msn = h.msn;
            s.mo = static_cast<std::uint32_t>(h.off);
            counter = &counters_.tx_send_fpdus;
        } else {
            s.op = RdmapOp::write;
            s.stag = h.wr.rkey;
            s.to = h.wr.remote_addr + h.off;
            counter = &counters_.tx_write_fpdus;
        }
        len =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(payload_room(s.op), h.len - h.off));
        s.last = h.off + len == h.len;
        finishes = s.last && h.wr.op != WrOp::rdma_write_imm;
    }
    const Emit e = emit(s, len, Source{&h, h.off, false, 0, 0});
    if (e == Emit::refused) return false;
    if (e == Emit::gather_failed) {
        // A key was invalidated after the WR started: nothing more can go out right.
        h.sent = h.done = true;
        h.status = WcStatus::loc_prot_err;
        terminate(term_cause(RdmapEtype::local_catastrophic, RdmapCode::catastrophic_stream), {},
                  IwError::local_error);
        return true;
    }
    counter->add();
    h.off += len;
    if (!finishes && h.wr.op == WrOp::rdma_write_imm && h.off == h.len && !kind.rd_atomic()) {
        h.imm_phase = true;
        return true;
    }
    if (finishes) {
        h.sent = true;
        if (!kind.rd_atomic()) h.done = true;  // complete once its last FPDU is accepted
    }
    return true;
}

}  // namespace snic::iwarp
