// The responder: the peer's Sends (placed at MO into the receive WR taken for their MSN),
// Immediate Data, tagged Writes (placed through QpMemory::remote), Read and Atomic Requests
// (checked when they arrive, answered in request order by resp_emit()), and the peer's RFC
// 6581 RTR. Every rule broken is a Terminate (RFC 5040 §7.2, RFC 5041 §7.2) and the end of
// the QP; nothing is placed from a segment that broke one.
#include <algorithm>
#include <cstring>
#include <utility>

#include "proto/iwarp/qp.h"

namespace snic::iwarp {

using verbs::Completion;
using verbs::RemoteCheck;
using verbs::WcStatus;

namespace {

constexpr std::size_t qn(Queue q) {
    return static_cast<std::size_t>(q);
}

// Why a tagged placement (DDP, RFC 5041 §7.2) failed.
TermCause tagged_cause(RemoteCheck c) {
    switch (c) {
        case RemoteCheck::bad_key:
            return term_cause(DdpTaggedCode::invalid_stag);
        case RemoteCheck::out_of_bounds:
            return term_cause(DdpTaggedCode::base_or_bounds);
        case RemoteCheck::pd_mismatch:
            return term_cause(DdpTaggedCode::stag_not_associated);
        case RemoteCheck::no_access:
        case RemoteCheck::ok:
            break;
    }
    return term_cause(RdmapEtype::remote_protection, RdmapCode::access_rights);
}

// Why a Read or Atomic source check (RDMAP, RFC 5040 §7.2) failed.
TermCause rdmap_cause(RemoteCheck c) {
    switch (c) {
        case RemoteCheck::bad_key:
            return term_cause(RdmapEtype::remote_protection, RdmapCode::invalid_stag);
        case RemoteCheck::out_of_bounds:
            return term_cause(RdmapEtype::remote_protection, RdmapCode::base_or_bounds);
        case RemoteCheck::pd_mismatch:
            return term_cause(RdmapEtype::remote_protection, RdmapCode::stag_not_associated);
        case RemoteCheck::no_access:
        case RemoteCheck::ok:
            break;
    }
    return term_cause(RdmapEtype::remote_protection, RdmapCode::access_rights);
}

// RFC 7306 masked Fetch and Add: a set bit in `mask` ends a field (no carry out of it).
std::uint64_t masked_add(std::uint64_t v, std::uint64_t add, std::uint64_t mask) {
    if (mask == 0) return v + add;
    std::uint64_t out = 0, carry = 0;
    for (unsigned i = 0; i < 64; ++i) {
        const std::uint64_t sum = ((v >> i) & 1) + ((add >> i) & 1) + carry;
        out |= (sum & 1) << i;
        carry = ((mask >> i) & 1) != 0 ? 0 : sum >> 1;
    }
    return out;
}

}  // namespace

// The peer's RTR (its first message, RFC 6581): swallowed when it is the one expected.
bool IwQp::resp_rtr(const Segment& seg) {
    rtr_seen_ = true;
    const bool empty = seg.payload.empty() && seg.last;
    switch (cfg_.rtr_expect) {
        case Rtr::write:
            if (seg.op != RdmapOp::write || !empty) break;
            counters_.rx_rtr.add();
            return true;
        case Rtr::send:
            if (seg.op != RdmapOp::send || !empty || seg.msn != rx_msn_[qn(Queue::send)]) break;
            ++rx_msn_[qn(Queue::send)];
            counters_.rx_rtr.add();
            return true;
        case Rtr::read: {
            if (seg.op != RdmapOp::read_request || seg.read.size != 0 ||
                seg.msn != rx_msn_[qn(Queue::read_request)])
                break;
            ++rx_msn_[qn(Queue::read_request)];
            Response& r = res_[(res_head_ + res_count_++) % res_size_];
            r = Response{};
            r.sink_stag = seg.read.sink_stag;
            r.sink_to = seg.read.sink_to;
            r.rtr = true;
            counters_.rx_rtr.add();
            more_ = true;
            return true;
        }
        case Rtr::none:
            return false;
    }
    terminate(term_cause(LlpCode::no_matching_rtr), {}, IwError::remote_error);
    return true;
}

bool IwQp::resp_place(std::uint32_t off, std::span<const std::uint8_t> data) {
    std::uint64_t o = off;
    for (std::uint32_t i = 0; i < recv_.num_sge && !data.empty(); ++i) {
        const verbs::Sge& g = recv_.sge[i];
        if (o >= g.length) {
            o -= g.length;
            continue;
        }
        const auto n =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(g.length - o, data.size()));
        std::uint8_t* p = mem_.local(g.lkey, g.addr + o, n, true);
        if (p == nullptr) return false;
        rx_place(p, data.first(n));
        data = data.subspan(n);
        o = 0;
    }
    return data.empty();
}

void IwQp::resp_send(const Segment& seg, Ulpdu u) {
    counters_.rx_send_fpdus.add();
    if (!in_msg_) {
        if (seg.msn != rx_msn_[qn(Queue::send)]) {
            terminate(term_cause(DdpUntaggedCode::msn_range), u, IwError::remote_error);
            return;
        }
        if (!queues_.pop_recv(recv_)) {
            terminate(term_cause(DdpUntaggedCode::no_buffer), u, IwError::remote_error);
            return;
        }
        ++rx_msn_[qn(Queue::send)];
        have_recv_ = in_msg_ = true;
        in_msn_ = seg.msn;
        recv_cap_ = 0;
        for (std::uint32_t i = 0; i < recv_.num_sge; ++i) recv_cap_ += recv_.sge[i].length;
    } else if (seg.msn != in_msn_) {
        // Over one in-order stream a sender finishes a message before it starts the next on
        // the same queue: another MSN here is out of range.
        terminate(term_cause(DdpUntaggedCode::msn_range), u, IwError::remote_error);
        return;
    }
    const std::uint64_t end = std::uint64_t{seg.mo} + seg.payload.size();
    if (end > recv_cap_) {
        if (!rx_crc_ok()) return;
        complete_recv_error(recv_, WcStatus::loc_len_err);
        have_recv_ = false;
        terminate(term_cause(DdpUntaggedCode::too_long), u, IwError::remote_error);
        return;
    }
    if (!resp_place(seg.mo, seg.payload)) {
        if (!rx_crc_ok()) return;
        complete_recv_error(recv_, WcStatus::loc_prot_err);
        have_recv_ = false;
        terminate(term_cause(RdmapEtype::local_catastrophic, RdmapCode::catastrophic_stream), u,
                  IwError::local_error);
        return;
    }
    if (!rx_crc_ok() || !seg.last) return;
    Completion c;
    c.wr_id = recv_.wr_id;
    c.opcode = verbs::WcOpcode::recv;
    c.byte_len = static_cast<std::uint32_t>(end);
    c.solicited = seg.info().solicited;
    c.qp_num = cfg_.qpn;
    if (seg.info().invalidate) {
        // The key is invalid before the receive completes (NetworkDirect: the peer sees the
        // invalidate result and then the receive).
        if (!mem_.invalidate(seg.inv_stag)) {
            complete_recv_error(recv_, WcStatus::rem_inv_req_err);
            have_recv_ = false;
            terminate(term_cause(RdmapEtype::remote_operation, RdmapCode::cannot_invalidate), u,
                      IwError::remote_error);
            return;
        }
        counters_.remote_invalidates.add();
        c.with_inv = true;
        c.imm_or_rkey = seg.inv_stag;
    }
    have_recv_ = in_msg_ = false;
    queues_.complete_recv(c);
}

void IwQp::resp_immediate(const Segment& seg, Ulpdu u) {
    counters_.rx_immediates.add();
    if (in_msg_ || seg.msn != rx_msn_[qn(Queue::send)]) {
        terminate(term_cause(DdpUntaggedCode::msn_range), u, IwError::remote_error);
        return;
    }
    verbs::RecvWr r;
    if (!queues_.pop_recv(r)) {
        terminate(term_cause(DdpUntaggedCode::no_buffer), u, IwError::remote_error);
        return;
    }
    ++rx_msn_[qn(Queue::send)];
    Completion c;
    c.wr_id = r.wr_id;
    c.opcode = verbs::WcOpcode::recv_rdma_with_imm;
    c.with_imm = true;
    // As RoCE's WRITE with immediate reports its length: the Write message just before it
    // (RFC 7306's Immediate Data follows the Write it goes with on the same stream).
    c.byte_len = static_cast<std::uint32_t>(std::exchange(write_bytes_, 0));
    std::memcpy(&c.imm_or_rkey, seg.immediate.data(), sizeof c.imm_or_rkey);
    c.solicited = seg.info().solicited;
    c.qp_num = cfg_.qpn;
    queues_.complete_recv(c);
}

void IwQp::resp_write(const Segment& seg, Ulpdu u) {
    counters_.rx_write_fpdus.add();
    // A zero-length Write, whole in one FPDU, places nothing and needs no right: an RTR
    // (RFC 6581) or a peer's nudge after one.
    if (seg.payload.empty() && seg.last && !in_write_) {
        write_bytes_ = 0;
        return;
    }
    if ((cfg_.remote_access & verbs::access::remote_write) == 0) {
        terminate(term_cause(RdmapEtype::remote_protection, RdmapCode::access_rights), u,
                  IwError::remote_error);
        return;
    }
    const auto n = static_cast<std::uint32_t>(seg.payload.size());
    // The bytes of the Write message so far: an Immediate Data right after it reports them.
    write_bytes_ = in_write_ ? write_bytes_ + n : n;
    in_write_ = !seg.last;
    if (n == 0) return;  // nothing to place, nothing to check
    if (seg.to + n < seg.to) {
        terminate(term_cause(DdpTaggedCode::to_wrap), u, IwError::remote_error);
        return;
    }
    const verbs::RemoteRegion r = mem_.remote(seg.stag, seg.to, n, verbs::RemoteNeed::write);
    if (r.check != RemoteCheck::ok) {
        terminate(tagged_cause(r.check), u, IwError::remote_error);
        return;
    }
    rx_place(r.ptr, seg.payload);
}

// The checks every request on QN 1 passes: its MSN, the QP's access right, IRD.
bool IwQp::resp_rd_admit(const Segment& seg, Ulpdu u, std::uint32_t right) {
    if (seg.msn != rx_msn_[qn(Queue::read_request)]) {
        terminate(term_cause(DdpUntaggedCode::msn_range), u, IwError::remote_error);
        return false;
    }
    if ((cfg_.remote_access & right) == 0) {
        terminate(term_cause(RdmapEtype::remote_protection, RdmapCode::access_rights), u,
                  IwError::remote_error);
        return false;
    }
    if (res_count_ >= res_size_) {
        // More than IRD outstanding: no buffer on the Read Request queue.
        terminate(term_cause(DdpUntaggedCode::no_buffer), u, IwError::remote_error);
        return false;
    }
    ++rx_msn_[qn(Queue::read_request)];
    return true;
}

void IwQp::resp_read_request(const Segment& seg, Ulpdu u) {
    counters_.rx_read_requests.add();
    if (!resp_rd_admit(seg, u, verbs::access::remote_read)) return;
    const ReadRequest& rr = seg.read;
    if (rr.size > 0) {
        if (rr.src_to + rr.size < rr.src_to) {
            terminate(term_cause(RdmapEtype::remote_protection, RdmapCode::to_wrap), u,
                      IwError::remote_error);
            return;
        }
        const verbs::RemoteRegion r =
            mem_.remote(rr.src_stag, rr.src_to, rr.size, verbs::RemoteNeed::read);
        if (r.check != RemoteCheck::ok) {
            terminate(rdmap_cause(r.check), u, IwError::remote_error);
            return;
        }
    }
    Response& res = res_[(res_head_ + res_count_++) % res_size_];
    res = Response{};
    res.sink_stag = rr.sink_stag;
    res.sink_to = rr.sink_to;
    res.src_stag = rr.src_stag;
    res.src_to = rr.src_to;
    res.size = rr.size;
    more_ = true;
}

void IwQp::resp_atomic_request(const Segment& seg, Ulpdu u) {
    counters_.rx_atomic_requests.add();
    if (!resp_rd_admit(seg, u, verbs::access::remote_atomic)) return;
    const AtomicRequest& a = seg.atomic;
    if (a.op != AtomicOp::fetch_add && a.op != AtomicOp::swap && a.op != AtomicOp::compare_swap) {
        terminate(term_cause(RdmapEtype::remote_operation, RdmapCode::unexpected_opcode), u,
                  IwError::remote_error);
        return;
    }
    if (a.to % 8 != 0) {
        terminate(term_cause(RdmapEtype::remote_protection, RdmapCode::base_or_bounds), u,
                  IwError::remote_error);
        return;
    }
    const verbs::RemoteRegion r = mem_.remote(a.stag, a.to, 8, verbs::RemoteNeed::atomic);
    if (r.check != RemoteCheck::ok) {
        terminate(rdmap_cause(r.check), u, IwError::remote_error);
        return;
    }
    if (reinterpret_cast<std::uintptr_t>(r.ptr) % alignof(std::uint64_t) != 0) {
        terminate(term_cause(RdmapEtype::remote_protection, RdmapCode::base_or_bounds), u,
                  IwError::remote_error);
        return;
    }
    // Executed now, in request order with the READs before it (their data is read when
    // their responses go out, so a READ before an atomic may see its result: RFC 7306
    // leaves that ordering to the requester's fence). The word is shared with the client's
    // CPUs and with QPs on other lcores: a compare-and-swap until no other write came
    // between the read and the write (a compare that fails writes nothing).
    auto* word = reinterpret_cast<std::uint64_t*>(r.ptr);
    std::uint64_t v = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    while (true) {
        std::uint64_t nv = v;
        switch (a.op) {
            case AtomicOp::fetch_add:
                nv = masked_add(v, a.swap_add, a.swap_add_mask);
                break;
            case AtomicOp::swap:
                nv = (v & ~a.swap_add_mask) | (a.swap_add & a.swap_add_mask);
                break;
            case AtomicOp::compare_swap:
                if (((v ^ a.compare) & a.compare_mask) == 0)
                    nv = (v & ~a.swap_add_mask) | (a.swap_add & a.swap_add_mask);
                break;
        }
        if (nv == v) break;  // nothing to write: v was the word at the load
        if (__atomic_compare_exchange_n(word, &v, nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
    }
    Response& res = res_[(res_head_ + res_count_++) % res_size_];
    res = Response{};
    res.atomic = true;
    res.request_id = a.request_id;
    res.orig = v;
    more_ = true;
}

// Sends the next FPDU of the oldest response.
IwQp::Emit IwQp::resp_emit() {
    Response& r = res_[res_head_];
    SegmentSpec s;
    std::uint32_t len = 0;
    Source src;
    if (r.atomic) {
        s.op = RdmapOp::atomic_response;
        s.msn = tx_msn_[qn(Queue::atomic_response)];
        s.atomic_resp = {r.request_id, r.orig};
    } else {
        s.op = RdmapOp::read_response;
        len = std::min(payload_room(s.op), r.size - r.off);
        s.stag = r.sink_stag;
        s.to = r.sink_to + r.off;
        s.last = r.off + len == r.size;
        src = Source{nullptr, 0, true, r.src_stag, r.src_to + r.off};
    }
    const Emit e = emit(s, len, src);
    if (e == Emit::refused) return e;
    if (e == Emit::gather_failed) {
        // The source was invalidated or deregistered since the request was checked.
        terminate(rdmap_cause(remote_check_), {}, IwError::remote_error);
        return e;
    }
    if (r.atomic) {
        ++tx_msn_[qn(Queue::atomic_response)];
        counters_.tx_atomic_responses.add();
    } else {
        counters_.tx_read_response_fpdus.add();
        r.off += len;
        if (!s.last) return e;
    }
    res_head_ = (res_head_ + 1) % res_size_;
    --res_count_;
    return e;
}

}  // namespace snic::iwarp
