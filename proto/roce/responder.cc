// The responder: checks and executes incoming requests (IBA vol 1 §9.7, §9.9.3).
//
// The request at the expected PSN (ePSN) is checked (opcode sequence, the QP's remote
// access flags, lengths, keys through QpMemory) and executed: SEND placed into the receive
// WR taken at its first packet, RDMA WRITE into the region its RETH names (checked for the
// whole message at the first packet, nothing written when the check fails), READ and
// atomics recorded in a ring of max_dest_rd_atomic resources whose responses poll() sends.
// A request behind ePSN is a duplicate: SEND/WRITE are acknowledged again, a READ is
// answered again from the requested PSN (memory read again), an atomic is answered from
// its resource (never executed twice). A request ahead of ePSN gets one sequence error NAK
// and then silence until ePSN arrives. A SEND that finds no receive WR gets an RNR NAK and
// is not consumed. Errors the requester caused (invalid request, remote access, remote
// operational) are answered with a NAK and put the QP in the error state. SEND and WRITE
// packets are executed by resp_send/resp_write, which UC's responder (uc.cc) shares: they
// say what went wrong (ExecFault) and the service decides the answer (resp_fault for RC).
//
// Output order is PSN order: READ responses and ATOMIC ACKs (oldest first), then a NAK or
// a coalesced ACK for everything up to ePSN - 1.
#include <algorithm>
#include <cstring>

#include "proto/roce/psn.h"
#include "proto/roce/rc_qp.h"
#include "proto/verbs/place.h"

namespace snic::roce {
namespace {

constexpr std::uint32_t packets_for(std::uint64_t length, std::uint32_t mtu) {
    return length == 0 ? 1 : static_cast<std::uint32_t>((length + mtu - 1) / mtu);
}

constexpr std::uint8_t kAckSyndrome = aeth_syndrome(AckType::ack, kCreditsInvalid);

}  // namespace

// The common case in one piece on the receive side: a SEND or RDMA WRITE ONLY (with or without
// immediate) at ePSN, between messages, its ICRC checked, that executes: placed, completed
// and made due for the ACK here, to the same effects the general path gives it. Anything
// else, and a packet any check refuses, goes to the general path (false), which finds what
// this found (none of the checks took effect) and answers it.
bool RcQp::resp_fast(const Packet& pkt, RcTime now) {
    const auto op = static_cast<Opcode>(pkt.opcode());
    const bool imm = op == Opcode::rc_send_only_with_immediate ||
                     op == Opcode::rc_rdma_write_only_with_immediate;
    const bool write =
        op == Opcode::rc_rdma_write_only || op == Opcode::rc_rdma_write_only_with_immediate;
    if (!(write || imm || op == Opcode::rc_send_only) || pkt.icrc_pending ||
        in_msg_ != InMsg::none || pkt.bth().psn.host() != epsn_)
        return false;
    const std::size_t len = pkt.payload.size();
    if (len > cfg_.mtu) return false;
    if (write) {
        if ((cfg_.remote_access & rc_access::remote_write) == 0) return false;
        const Reth& reth = *pkt.reth();
        if (reth.dma_len.host() != len) return false;
        std::uint8_t* to = nullptr;
        if (len != 0) {
            const RemoteRegion r = mem_.remote(reth.rkey.host(), reth.va.host(),
                                               static_cast<std::uint32_t>(len), RemoteNeed::write);
            if (r.check != RemoteCheck::ok || r.ptr == nullptr) return false;
            to = r.ptr;
        }
        if (imm && !resp_take_recv()) return false;
        counters_.rx_write_packets.add();
        write_va_ = reth.va.host();
        write_rkey_ = reth.rkey.host();
        write_len_ = write_done_ = static_cast<std::uint32_t>(len);
        if (len != 0) verbs::place(to, pkt.payload.data(), len);
        epsn_ = psn_add(epsn_, 1);
        msn_ = psn_add(msn_, 1);
        if (imm) resp_complete_recv(pkt, WcOpcode::recv_rdma_with_imm, write_len_, nullptr);
    } else {
        if (!resp_take_recv() || len > recv_cap_) return false;
        std::uint32_t unused = 0;
        if (!resp_place(0, pkt, unused)) return false;
        counters_.rx_send_packets.add();
        recv_off_ = static_cast<std::uint32_t>(len);
        epsn_ = psn_add(epsn_, 1);
        msn_ = psn_add(msn_, 1);
        resp_complete_recv(pkt, WcOpcode::recv, recv_off_, nullptr);
    }
    resp_executed(pkt, now);
    return true;
}

void RcQp::resp_on_packet(const Packet& pkt, RcTime now) {
    const OpcodeInfo& info = *pkt.info;
    const std::uint32_t psn = pkt.bth().psn.host();
    if (info.has(kSend))
        counters_.rx_send_packets.add();
    else if (info.has(kWrite))
        counters_.rx_write_packets.add();
    else if (info.has(kRead))
        counters_.rx_read_requests.add();
    else
        counters_.rx_atomic_requests.add();

    // A packet whose ICRC is left to the payload's copy is checked first wherever it would
    // take effect otherwise: a NAK, a duplicate's answer, a fault.
    const bool pending = pkt.icrc_pending;
    const std::int32_t d = psn_diff(psn, epsn_);
    if (d != 0 && pending && icrc_bad(pkt)) return;
    if (d > 0) {
        counters_.out_of_sequence.add();
        if (!seq_nak_sent_) {
            seq_nak_sent_ = true;
            resp_queue_nak(nak_syndrome(NakCode::psn_sequence_error), epsn_, false);
        }
        return;
    }
    if (d < 0) {
        counters_.duplicate_requests.add();
        resp_duplicate(pkt, now);
        return;
    }

    if (pkt.payload.size() > cfg_.mtu) {
        if (pending && icrc_bad(pkt)) return;
        resp_fatal(NakCode::invalid_request, psn, WcStatus::rem_inv_req_err);
        return;
    }
    // The opcode must continue the message in progress, or start one.
    const bool continues = info.has_any(kMiddle) || (info.has(kLast) && !info.has(kFirst));
    const bool ok_sequence = in_msg_ == InMsg::none
                                 ? !continues
                                 : continues && info.has(in_msg_ == InMsg::send ? kSend : kWrite);
    if (!ok_sequence) {
        if (pending && icrc_bad(pkt)) return;
        resp_fatal(NakCode::invalid_request, psn, WcStatus::rem_inv_req_err);
        return;
    }
    if (info.has(kRead) || info.has(kAtomic)) {
        if (pending && icrc_bad(pkt)) return;
        return info.has(kRead) ? resp_read(pkt) : resp_atomic(pkt);
    }
    const ExecFault fault = info.has(kSend) ? resp_send(pkt) : resp_write(pkt);
    if (fault == ExecFault::none)
        resp_executed(pkt, now);
    else if (fault != ExecFault::bad_icrc && !(pending && icrc_bad(pkt)))
        resp_fault(fault, psn);
}

// RC's answer to a SEND or WRITE it could not execute: an RNR NAK for want of a receive WR
// (the packet is not consumed: ePSN stays); otherwise the requester broke a rule, or our own
// receive WR's memory failed: a NAK, the receive WR completes in error, the QP goes to error.
void RcQp::resp_fault(ExecFault fault, std::uint32_t psn) {
    struct Answer {
        NakCode code;
        WcStatus recv_status;
    };
    constexpr Answer kAnswers[] = {
        {NakCode::invalid_request, WcStatus::rem_inv_req_err},        // none (not used)
        {NakCode::invalid_request, WcStatus::rem_inv_req_err},        // no_recv (not used)
        {NakCode::invalid_request, WcStatus::rem_inv_req_err},        // bad_request
        {NakCode::invalid_request, WcStatus::loc_len_err},            // too_long
        {NakCode::remote_access_error, WcStatus::rem_access_err},     // no_access
        {NakCode::remote_operational_error, WcStatus::loc_prot_err},  // local_memory
        {NakCode::invalid_request, WcStatus::rem_inv_req_err},        // invalidate
        {NakCode::invalid_request, WcStatus::rem_inv_req_err},        // bad_icrc (not used)
    };
    static_assert(std::size(kAnswers) == static_cast<std::size_t>(ExecFault::bad_icrc) + 1);
    if (fault == ExecFault::no_recv) {
        seq_nak_sent_ = true;  // packets after this one are dropped silently until it is back
        resp_queue_nak(aeth_syndrome(AckType::rnr_nak, cfg_.min_rnr_timer), psn, false);
        return;
    }
    const Answer& a = kAnswers[static_cast<std::size_t>(fault)];
    resp_fatal(a.code, psn, a.recv_status);
}

// The request at ePSN was executed: the NAK episode ends, a pending NAK about the old ePSN
// is moot (a fatal one never is).
void RcQp::resp_executed(const Packet& pkt, RcTime now) {
    seq_nak_sent_ = false;
    if (nak_pending_ && !nak_fatal_) nak_pending_ = false;
    if (!pkt.info->has(kSend) && !pkt.info->has(kWrite)) return;  // answered by its response
    if (!ack_needed_) {
        ack_needed_ = true;
        ack_since_ = now;
        ack_count_ = 0;
        ack_reqs_ = 0;
    }
    ++ack_count_;
    if (pkt.bth().ack_req()) {
        ack_now_ = true;
        ++ack_reqs_;
    }
    if (ack_count_ >= cfg_.ack_every) ack_now_ = true;
}

void RcQp::resp_queue_nak(std::uint8_t syndrome, std::uint32_t psn, bool fatal) {
    if (nak_pending_ && nak_fatal_) return;
    nak_pending_ = true;
    nak_fatal_ = fatal;
    nak_syndrome_ = syndrome;
    nak_psn_ = psn;
}

// The requester broke a rule: NAK, the receive WR in progress completes with
// `recv_status`, the QP goes to error (the NAK is still sent).
void RcQp::resp_fatal(NakCode code, std::uint32_t psn, WcStatus recv_status) {
    resp_queue_nak(nak_syndrome(code), psn, true);
    if (have_recv_) {
        complete_recv_error(recv_, recv_status);
        have_recv_ = false;
    }
    fail(RcError::responder_error);
}

// The receive WR for a message starting now: the one held (UC keeps the WR of a message it
// dropped for the next one: placement starts over), else the next one of the RQ or SRQ.
bool RcQp::resp_take_recv() {
    if (have_recv_) {
        recv_off_ = 0;
        return true;
    }
    if (!queues_.pop_recv(recv_)) return false;
    have_recv_ = true;
    recv_off_ = 0;
    recv_cap_ = 0;
    if (recv_.num_sge > kMaxSge) recv_.num_sge = kMaxSge;  // the daemon validated it
    for (std::uint32_t i = 0; i < recv_.num_sge; ++i) recv_cap_ += recv_.sge[i].length;
    return true;
}

// Writes the packet's payload at message offset `off` of the receive WR's SGEs; a pending
// ICRC is folded into `icrc_reg` as the bytes are copied (in order, so the caller finishes it).
bool RcQp::resp_place(std::uint32_t off, const Packet& pkt, std::uint32_t& icrc_reg) {
    std::uint64_t pos = 0;
    std::uint64_t at = off;
    const std::uint8_t* src = pkt.payload.data();
    std::size_t len = pkt.payload.size();
    for (std::uint32_t i = 0; i < recv_.num_sge && len > 0; ++i) {
        const Sge& g = recv_.sge[i];
        if (at >= pos + g.length) {
            pos += g.length;
            continue;
        }
        const std::uint64_t in = at - pos;
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(len, g.length - in));
        std::uint8_t* p = mem_.local(g.lkey, g.addr + in, n, true);
        if (p == nullptr) return false;
        if (pkt.icrc_pending)
            icrc_reg = crc::Crc32::update_copy(icrc_reg, p, {src, n});
        else
            verbs::place(p, src, n);
        src += n;
        at += n;
        len -= n;
        pos += g.length;
    }
    return len == 0;
}

// Executes a SEND packet at ePSN: checks, placement into the receive WR, and at LAST/ONLY
// the receive completion. The caller answers (RC) or drops (UC) what it returns.
RcQp::ExecFault RcQp::resp_send(const Packet& pkt) {
    const OpcodeInfo& info = *pkt.info;
    const std::size_t len = pkt.payload.size();
    // Every packet but the last carries exactly one MTU; the last 1..MTU (ONLY: 0..MTU).
    const bool last = info.has(kLast);
    const bool length_ok = !last              ? len == cfg_.mtu
                           : info.has(kFirst) ? len <= cfg_.mtu
                                              : len >= 1 && len <= cfg_.mtu;
    if (!length_ok) return ExecFault::bad_request;
    if (info.has(kTakesRecvWqe) && !resp_take_recv()) return ExecFault::no_recv;
    if (!have_recv_) return ExecFault::bad_request;  // cannot happen after the sequence check
    if (recv_off_ + len > recv_cap_) return ExecFault::too_long;
    std::uint32_t icrc_reg = pkt.icrc_reg;
    if (!resp_place(recv_off_, pkt, icrc_reg)) return ExecFault::local_memory;
    // A wrong ICRC leaves bytes in the receive WR, at the place the retransmission takes.
    if (pkt.icrc_pending && !icrc_finish(pkt, icrc_reg)) {
        counters_.drop_bad_icrc.add();
        return ExecFault::bad_icrc;
    }
    recv_off_ += static_cast<std::uint32_t>(len);
    epsn_ = psn_add(epsn_, 1);
    in_msg_ = last ? InMsg::none : InMsg::send;
    if (last) {
        const Ieth* ieth = pkt.ieth();
        const std::uint32_t rkey = ieth != nullptr ? ieth->rkey.host() : 0;
        if (ieth != nullptr && !mem_.invalidate(rkey)) return ExecFault::invalidate;
        msn_ = psn_add(msn_, 1);
        resp_complete_recv(pkt, WcOpcode::recv, recv_off_, ieth != nullptr ? &rkey : nullptr);
    }
    return ExecFault::none;
}

// The receive WR's completion for the message `pkt` ends: its immediate data as on the wire
// when it carries some, `invalidated` the rkey its Send with Invalidate invalidated. The
// receive WR is done with.
void RcQp::resp_complete_recv(const Packet& pkt, WcOpcode opcode, std::uint32_t byte_len,
                              const std::uint32_t* invalidated) {
    Completion c;
    c.wr_id = recv_.wr_id;
    c.opcode = opcode;
    c.byte_len = byte_len;
    c.solicited = pkt.bth().solicited();
    c.qp_num = cfg_.qpn;
    c.src_qp = cfg_.dest_qpn;
    if (const ImmDt* imm = pkt.immdt()) {
        std::memcpy(&c.imm_or_rkey, imm, sizeof c.imm_or_rkey);
        c.with_imm = true;
    }
    if (invalidated != nullptr) {
        c.imm_or_rkey = *invalidated;
        c.with_inv = true;
    }
    have_recv_ = false;
    queues_.complete_recv(c);
}

// Executes an RDMA WRITE packet at ePSN: the key checks (of the whole message at its first
// packet, then of each packet), the write, and for WRITE with immediate the receive WR taken
// and completed at LAST/ONLY.
RcQp::ExecFault RcQp::resp_write(const Packet& pkt) {
    const OpcodeInfo& info = *pkt.info;
    const std::size_t len = pkt.payload.size();
    if ((cfg_.remote_access & rc_access::remote_write) == 0) return ExecFault::no_access;
    RemoteRegion whole;  // the first packet's check of the whole message
    if (info.has(kFirst)) {
        const Reth& reth = *pkt.reth();
        const std::uint32_t dma_len = reth.dma_len.host();
        if (dma_len > kMaxMessage) return ExecFault::bad_request;
        // The whole message is checked at its first packet: nothing is written otherwise.
        if (dma_len != 0) {
            whole = mem_.remote(reth.rkey.host(), reth.va.host(), dma_len, RemoteNeed::write);
            if (whole.check != RemoteCheck::ok) return ExecFault::no_access;
        }
        write_va_ = reth.va.host();
        write_rkey_ = reth.rkey.host();
        write_len_ = dma_len;
        write_done_ = 0;
    }
    const bool last = info.has(kLast);
    const std::uint64_t after = std::uint64_t{write_done_} + len;
    const bool length_ok = last ? after == write_len_ : len == cfg_.mtu && after < write_len_;
    if (!length_ok) return ExecFault::bad_request;
    if (info.has(kTakesRecvWqe) && !resp_take_recv()) return ExecFault::no_recv;
    if (len != 0) {
        // Checked again for each later packet: a key may be invalidated while the message
        // flows. The first packet uses its check of the whole message (one key lookup for a
        // message of one packet) when that found the message in one piece of memory.
        const RemoteRegion r =
            whole.ptr != nullptr ? whole
                                 : mem_.remote(write_rkey_, write_va_ + write_done_,
                                               static_cast<std::uint32_t>(len), RemoteNeed::write);
        if (r.check != RemoteCheck::ok || r.ptr == nullptr) return ExecFault::no_access;
        if (!pkt.icrc_pending) {
            verbs::place(r.ptr, pkt.payload.data(), len);
        } else if (!icrc_finish(pkt, crc::Crc32::update_copy(pkt.icrc_reg, r.ptr, pkt.payload))) {
            // The bytes are in the message's own region, where the retransmission puts them.
            counters_.drop_bad_icrc.add();
            return ExecFault::bad_icrc;
        }
    } else if (pkt.icrc_pending && icrc_bad(pkt)) {
        return ExecFault::bad_icrc;
    }
    write_done_ = static_cast<std::uint32_t>(after);
    epsn_ = psn_add(epsn_, 1);
    in_msg_ = last ? InMsg::none : InMsg::write;
    if (last) {
        msn_ = psn_add(msn_, 1);
        if (pkt.immdt() != nullptr)
            resp_complete_recv(pkt, WcOpcode::recv_rdma_with_imm, write_len_, nullptr);
    }
    return ExecFault::none;
}

// The next resource of the ring. The requester keeps at most max_rd_atomic (<= our
// max_dest_rd_atomic) READ/atomics outstanding, so the oldest one has been answered in
// full when a new one arrives, unless the requester broke that rule; a resource active only
// because of a duplicate may be reused.
RcQp::RdAtomicRes* RcQp::resp_alloc_res() {
    if (nres_ == 0) return nullptr;
    RdAtomicRes& r = res_[res_next_ % nres_];
    if (r.used && r.active && !r.replay) return nullptr;
    ++res_next_;
    res_set_active(r, false);
    r = RdAtomicRes{};
    r.used = true;
    return &r;
}

void RcQp::resp_read(const Packet& pkt) {
    const std::uint32_t psn = pkt.bth().psn.host();
    if ((cfg_.remote_access & rc_access::remote_read) == 0) {
        resp_fatal(NakCode::remote_access_error, psn, WcStatus::rem_access_err);
        return;
    }
    const Reth& reth = *pkt.reth();
    const std::uint32_t len = reth.dma_len.host();
    const std::uint32_t n = packets_for(len, cfg_.mtu);
    if (len > kMaxMessage || n >= (1u << 22)) {
        resp_fatal(NakCode::invalid_request, psn, WcStatus::rem_inv_req_err);
        return;
    }
    if (len != 0 && mem_.remote(reth.rkey.host(), reth.va.host(), len, RemoteNeed::read).check !=
                        RemoteCheck::ok) {
        resp_fatal(NakCode::remote_access_error, psn, WcStatus::rem_access_err);
        return;
    }
    RdAtomicRes* r = resp_alloc_res();
    if (r == nullptr) {
        resp_fatal(NakCode::invalid_request, psn, WcStatus::rem_inv_req_err);
        return;
    }
    msn_ = psn_add(msn_, 1);
    r->first_psn = r->start_psn = psn;
    r->npsn = r->count = n;
    r->va = reth.va.host();
    r->rkey = reth.rkey.host();
    r->len = len;
    r->msn = msn_;
    res_set_active(*r, true);
    epsn_ = psn_add(epsn_, n);
    seq_nak_sent_ = false;
    if (nak_pending_ && !nak_fatal_) nak_pending_ = false;
}

void RcQp::resp_atomic(const Packet& pkt) {
    const std::uint32_t psn = pkt.bth().psn.host();
    if ((cfg_.remote_access & rc_access::remote_atomic) == 0) {
        resp_fatal(NakCode::remote_access_error, psn, WcStatus::rem_access_err);
        return;
    }
    const AtomicEth& a = *pkt.atomic_eth();
    const std::uint64_t va = a.va.host();
    if (va % sizeof(std::uint64_t) != 0) {
        resp_fatal(NakCode::invalid_request, psn, WcStatus::rem_inv_req_err);
        return;
    }
    const RemoteRegion region =
        mem_.remote(a.rkey.host(), va, sizeof(std::uint64_t), RemoteNeed::atomic);
    if (region.check != RemoteCheck::ok || region.ptr == nullptr) {
        resp_fatal(NakCode::remote_access_error, psn, WcStatus::rem_access_err);
        return;
    }
    if (reinterpret_cast<std::uintptr_t>(region.ptr) % alignof(std::uint64_t) != 0) {
        resp_fatal(NakCode::remote_operational_error, psn, WcStatus::rem_op_err);
        return;
    }
    RdAtomicRes* r = resp_alloc_res();
    if (r == nullptr) {
        resp_fatal(NakCode::invalid_request, psn, WcStatus::rem_inv_req_err);
        return;
    }
    // The memory is shared with the client and possibly other QPs: a real atomic.
    auto* word = reinterpret_cast<std::uint64_t*>(region.ptr);
    std::uint64_t orig;
    if (pkt.opcode() == static_cast<std::uint8_t>(Opcode::rc_compare_swap)) {
        orig = a.compare.host();
        __atomic_compare_exchange_n(word, &orig, a.swap_add.host(), false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
    } else {
        orig = __atomic_fetch_add(word, a.swap_add.host(), __ATOMIC_SEQ_CST);
    }
    msn_ = psn_add(msn_, 1);
    r->atomic = true;
    r->first_psn = r->start_psn = psn;
    r->npsn = r->count = 1;
    r->orig = orig;
    r->msn = msn_;
    res_set_active(*r, true);
    epsn_ = psn_add(epsn_, 1);
    seq_nak_sent_ = false;
    if (nak_pending_ && !nak_fatal_) nak_pending_ = false;
}

void RcQp::resp_duplicate(const Packet& pkt, RcTime now) {
    const OpcodeInfo& info = *pkt.info;
    const std::uint32_t psn = pkt.bth().psn.host();
    if (info.has(kSend) || info.has(kWrite)) {
        // Already executed: acknowledge again (up to ePSN - 1), never execute again.
        if (!ack_needed_) {
            ack_needed_ = true;
            ack_since_ = now;
            ack_count_ = 0;
            ack_reqs_ = 0;
        }
        ack_now_ = true;
        ++ack_reqs_;
        return;
    }
    for (std::uint32_t i = 0; i < nres_; ++i) {
        RdAtomicRes& r = res_[i];
        if (!r.used || !psn_in_range(psn, r.first_psn, r.npsn)) continue;
        if (info.has(kAtomic)) {
            if (!r.atomic || r.first_psn != psn) return;
            res_set_active(r, true);  // the ATOMIC ACK again, from the saved original value
            r.replay = true;
            counters_.atomic_replays.add();
            return;
        }
        if (r.atomic) return;
        // A READ again from the PSN asked for (a requester that received part of the
        // responses asks for the rest): its RETH must end where the original did.
        const Reth& reth = *pkt.reth();
        const std::uint32_t len = reth.dma_len.host();
        const std::uint32_t n = packets_for(len, cfg_.mtu);
        if (len > kMaxMessage || psn_add(psn, n) != psn_add(r.first_psn, r.npsn)) return;
        if (len != 0 &&
            mem_.remote(reth.rkey.host(), reth.va.host(), len, RemoteNeed::read).check !=
                RemoteCheck::ok) {
            resp_fatal(NakCode::remote_access_error, psn, WcStatus::rem_access_err);
            return;
        }
        r.start_psn = psn;
        r.count = n;
        r.next = 0;
        r.va = reth.va.host();
        r.rkey = reth.rkey.host();
        r.len = len;
        res_set_active(r, true);
        r.replay = true;
        counters_.read_replays.add();
        return;
    }
    // Too old to be in the resources: nothing to answer.
}

// --- output --------------------------------------------------------------------------------------

void RcQp::res_set_active(RdAtomicRes& r, bool active) {
    if (r.active == active) return;
    r.active = active;
    active ? ++res_active_ : --res_active_;
}

RcQp::RdAtomicRes* RcQp::resp_oldest_active() {
    if (res_active_ == 0) return nullptr;  // the common case, without a scan of 128
    RdAtomicRes* best = nullptr;
    std::int32_t best_d = 0;
    for (std::uint32_t i = 0; i < nres_; ++i) {
        RdAtomicRes& r = res_[i];
        if (!r.active) continue;
        const std::int32_t d = psn_diff(psn_add(r.start_psn, r.next), epsn_);
        if (best == nullptr || d < best_d) {
            best = &r;
            best_d = d;
        }
    }
    return best;
}

bool RcQp::resp_ack_due(RcTime now) const {
    return ack_needed_ && (ack_now_ || now - ack_since_ >= cfg_.ack_delay_ns);
}

// An ACK or NAK (syndrome) for `psn` with the current MSN: BTH and AETH, written here.
bool RcQp::resp_emit_ack(std::uint8_t syndrome, std::uint32_t psn) {
    constexpr std::size_t kLen = kBthLen + sizeof(Aeth);
    const std::span<std::uint8_t> out = wire_.tx_alloc(kLen);
    if (out.size() < kLen) {
        counters_.tx_full.add();
        more_ = true;  // sent on a later poll
        return false;
    }
    put_bth(out.data(), Opcode::rc_acknowledge, false, 0, false, psn);
    Aeth aeth;
    aeth.syndrome = syndrome;
    aeth.msn = msn_;
    std::memcpy(out.data() + kBthLen, &aeth, sizeof aeth);
    wire_.tx_send(kLen, kLen, {});
    return true;
}

bool RcQp::resp_send_nak() {
    if (!resp_emit_ack(nak_syndrome_, nak_psn_)) return false;
    counters_.tx_naks.add();
    if (aeth_type(nak_syndrome_) == AckType::rnr_nak)
        counters_.rnr_naks_sent.add();
    else if (static_cast<NakCode>(aeth_value(nak_syndrome_)) == NakCode::psn_sequence_error)
        counters_.seq_naks_sent.add();
    else
        counters_.fatal_naks_sent.add();
    nak_pending_ = false;
    nak_fatal_ = false;
    ack_needed_ = false;  // a NAK acknowledges the PSNs before its own
    ack_now_ = false;
    return true;
}

// One READ response or the ATOMIC ACK of resource r.
bool RcQp::resp_send_res(RdAtomicRes& r) {
    PacketSpec spec;
    spec.pkey = cfg_.pkey;
    spec.dest_qp = cfg_.dest_qpn;
    spec.psn = psn_add(r.start_psn, r.next);
    spec.aeth.syndrome = kAckSyndrome;
    spec.aeth.msn = r.msn;
    if (r.atomic) {
        spec.opcode = Opcode::rc_atomic_acknowledge;
        spec.atomic_ack_eth.orig = r.orig;
        if (!emit(spec, 0, nullptr, 0)) return false;
        counters_.tx_atomic_acks.add();
        res_set_active(r, false);
        r.replay = false;
        return true;
    }
    const std::uint32_t k = r.next;
    const bool first = k == 0;
    const bool last = k + 1 == r.count;
    spec.opcode = first && last ? Opcode::rc_rdma_read_response_only
                  : first       ? Opcode::rc_rdma_read_response_first
                  : last        ? Opcode::rc_rdma_read_response_last
                                : Opcode::rc_rdma_read_response_middle;
    const std::uint64_t off = std::uint64_t{k} * cfg_.mtu;
    const auto len = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(cfg_.mtu, r.len - std::min<std::uint64_t>(off, r.len)));
    Piece piece{nullptr, 0};
    std::uint32_t npieces = 0;
    if (len != 0) {
        // Read now, from the region as it is now (a duplicate READ reads again).
        const RemoteRegion region = mem_.remote(r.rkey, r.va + off, len, RemoteNeed::read);
        if (region.check != RemoteCheck::ok || region.ptr == nullptr) {
            res_set_active(r, false);
            resp_fatal(NakCode::remote_access_error, spec.psn, WcStatus::rem_access_err);
            return false;
        }
        piece = {region.ptr, len};
        npieces = 1;
    }
    if (!emit(spec, len, &piece, npieces, true)) return false;
    counters_.tx_read_responses.add();
    if (++r.next == r.count) {
        res_set_active(r, false);
        r.replay = false;
    }
    return true;
}

// One packet of responder output, in PSN order.
bool RcQp::resp_emit_one(RcTime now) {
    if (nak_pending_ && nak_fatal_) return resp_send_nak();
    if (RdAtomicRes* r = resp_oldest_active()) return resp_send_res(*r);
    if (nak_pending_) return resp_send_nak();
    if (!resp_ack_due(now)) return false;
    if (!resp_emit_ack(kAckSyndrome, psn_sub(epsn_, 1))) return false;
    counters_.tx_acks.add();
    if (ack_reqs_ > 1) counters_.acks_coalesced.add(ack_reqs_ - 1);
    ack_needed_ = false;
    ack_now_ = false;
    return true;
}

}  // namespace snic::roce
