// The completer: Read Responses (scattered into the READ's local SGEs), Atomic Responses
// (the original value into the atomic's buffer), the peer's Terminate, and the retirement of
// send WRs in queue order. The sink STag a READ names is its first SGE's lkey and the sink
// TO that SGE's address; the responses are matched to the oldest outstanding READ (RDMAP
// answers in request order) and scattered here across all its SGEs.
#include <algorithm>
#include <cstring>

#include "proto/iwarp/qp.h"

namespace snic::iwarp {

using verbs::WcStatus;
using verbs::WrKind;

IwQp::Held* IwQp::comp_oldest_rd() {
    for (std::uint32_t i = head_; i != cur_; ++i) {
        Held& h = held(i);
        if (h.started && h.sent && !h.done && verbs::wr_op_kind(h.wr.op).rd_atomic()) return &h;
    }
    return nullptr;
}

void IwQp::comp_rd_done(Held& h) {
    h.done = true;
    h.status = WcStatus::success;
    --rd_out_;
    more_ = true;  // a fenced WR or one held back by ORD may go now
}

void IwQp::comp_read_response(const Segment& seg, Ulpdu u) {
    counters_.rx_read_response_fpdus.add();
    if (rtr_read_out_ && seg.stag == 0 && seg.payload.empty() && seg.last) {
        rtr_read_out_ = false;  // the answer to our read RTR: the WRs may go
        rtr_nudge_at_ = kIwNever;
        more_ = true;
        return;
    }
    Held* h = comp_oldest_rd();
    if (h == nullptr || verbs::wr_op_kind(h->wr.op).kind != WrKind::read) {
        terminate(term_cause(RdmapEtype::remote_operation, RdmapCode::unexpected_opcode), u,
                  IwError::remote_error);
        return;
    }
    const bool has_sge = h->wr.num_sge > 0;
    const std::uint32_t sink = has_sge ? h->wr.sge[0].lkey : 0;
    const std::uint64_t base = has_sge ? h->wr.sge[0].addr : 0;
    if (seg.stag != sink) {
        terminate(term_cause(DdpTaggedCode::invalid_stag), u, IwError::remote_error);
        return;
    }
    const std::uint64_t n = seg.payload.size();
    if (seg.to != base + h->off || h->off + n > h->len || (seg.last && h->off + n != h->len)) {
        terminate(term_cause(DdpTaggedCode::base_or_bounds), u, IwError::remote_error);
        return;
    }
    // Scatter at offset h->off of the WR's SGE list.
    std::uint64_t o = h->off;
    std::span<const std::uint8_t> data = seg.payload;
    for (std::uint32_t i = 0; i < h->wr.num_sge && !data.empty(); ++i) {
        const verbs::Sge& g = h->wr.sge[i];
        if (o >= g.length) {
            o -= g.length;
            continue;
        }
        const auto k =
            static_cast<std::uint32_t>(std::min<std::uint64_t>(g.length - o, data.size()));
        std::uint8_t* p = mem_.local(g.lkey, g.addr + o, k, true);
        if (p == nullptr) {
            if (!rx_crc_ok()) return;
            h->done = true;
            h->status = WcStatus::loc_prot_err;
            terminate(term_cause(RdmapEtype::local_catastrophic, RdmapCode::catastrophic_stream),
                      {}, IwError::local_error);
            return;
        }
        rx_place(p, data.first(k));
        data = data.subspan(k);
        o = 0;
    }
    h->off += n;
    if (seg.last && rx_crc_ok()) comp_rd_done(*h);
}

void IwQp::comp_atomic_response(const Segment& seg, Ulpdu u) {
    counters_.rx_atomic_responses.add();
    constexpr auto q = static_cast<std::size_t>(Queue::atomic_response);
    Held* h = comp_oldest_rd();
    if (seg.msn != rx_msn_[q]) {
        terminate(term_cause(DdpUntaggedCode::msn_range), u, IwError::remote_error);
        return;
    }
    if (h == nullptr || verbs::wr_op_kind(h->wr.op).kind != WrKind::atomic ||
        h->imm_msn != seg.atomic_resp.request_id) {
        terminate(term_cause(RdmapEtype::remote_operation, RdmapCode::unexpected_opcode), u,
                  IwError::remote_error);
        return;
    }
    ++rx_msn_[q];
    // The original value goes to the local buffer in host order, as verbs returns it.
    const std::uint64_t orig = seg.atomic_resp.orig;
    std::uint8_t* p = mem_.local(h->wr.sge[0].lkey, h->wr.sge[0].addr, sizeof orig, true);
    if (p == nullptr) {
        h->done = true;
        h->status = WcStatus::loc_prot_err;
        terminate(term_cause(RdmapEtype::local_catastrophic, RdmapCode::catastrophic_stream), {},
                  IwError::local_error);
        return;
    }
    std::memcpy(p, &orig, sizeof orig);
    comp_rd_done(*h);
}

void IwQp::comp_terminate(const Segment& seg) {
    counters_.rx_terminates.add();
    term_received_ = seg.term.cause;
    // The oldest unfinished WR learns why; the rest are flushed.
    for (std::uint32_t i = head_; i != tail_; ++i) {
        Held& h = held(i);
        if (h.done) continue;
        if (h.started) {
            h.done = true;
            h.status = terminate_status(seg.term.cause);
        }
        break;
    }
    fail(IwError::remote_terminate);
}

// Completes done WRs at the head, in queue order.
bool IwQp::comp_retire() {
    bool did = false;
    while (head_ != cur_ && held(head_).done) {
        const Held& h = held(head_);
        complete_send(h, h.status);
        ++head_;
        did = true;
    }
    return did;
}

}  // namespace snic::iwarp
