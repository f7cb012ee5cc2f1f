// The QP's shared parts: construction, the FPDU writer, the receive dispatch, poll(), the
// Terminate and the error state with its flush.
#include "proto/iwarp/qp.h"

#include <algorithm>
#include <cstring>

#include "proto/crc/crc.h"

namespace snic::iwarp {

using verbs::Completion;
using verbs::RecvWr;
using verbs::WcStatus;

namespace {

std::uint32_t pow2_at_least(std::uint32_t n) {
    std::uint32_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

// The smallest MSS the engine accepts: an FPDU must carry the largest fixed header and body
// (an Atomic Request, 70 bytes) and at least one payload byte after an untagged header.
constexpr std::uint32_t kMinMss = 96;

}  // namespace

WcStatus terminate_status(const TermCause& c) {
    switch (c.layer) {
        case TermLayer::rdmap:
            if (c.etype == static_cast<std::uint8_t>(RdmapEtype::remote_protection))
                return WcStatus::rem_access_err;
            if (c.code == static_cast<std::uint8_t>(RdmapCode::invalid_version) ||
                c.code == static_cast<std::uint8_t>(RdmapCode::unexpected_opcode))
                return WcStatus::rem_inv_req_err;
            return WcStatus::rem_op_err;
        case TermLayer::ddp:
            if (c.etype == static_cast<std::uint8_t>(DdpEtype::tagged))
                return WcStatus::rem_access_err;
            if (c.etype == static_cast<std::uint8_t>(DdpEtype::untagged)) {
                if (c.code == static_cast<std::uint8_t>(DdpUntaggedCode::no_buffer))
                    return WcStatus::rem_op_err;  // no RNR over TCP: the receiver gave up
                return WcStatus::rem_inv_req_err;
            }
            return WcStatus::rem_op_err;
        case TermLayer::llp:
            break;
    }
    return WcStatus::rem_op_err;
}

IwQp::IwQp(const IwConfig& config, verbs::QpMemory& memory, verbs::QpQueues& queues,
           IwStream& stream)
    : cfg_(config),
      mem_(memory),
      queues_(queues),
      stream_(stream),
      deframer_(kMaxUlpdu, config.crc),
      txmem_(std::make_unique_for_overwrite<std::uint8_t[]>(fpdu_size(kMaxUlpdu))),
      txbuf_(txmem_.get(), fpdu_size(kMaxUlpdu)) {
    cfg_.mss = std::max(cfg_.mss, kMinMss);
    cfg_.max_inline = std::min(cfg_.max_inline, verbs::kMaxInline);
    cfg_.ord = std::max(cfg_.ord, 1u);
    cfg_.flush_budget = std::max(cfg_.flush_budget, 1u);
    sq_size_ = pow2_at_least(std::max(cfg_.sq_depth, 1u));
    sq_mask_ = sq_size_ - 1;
    sq_ = std::make_unique<Held[]>(sq_size_);
    res_size_ = std::max(cfg_.ird, 1u);
    res_ = std::make_unique<Response[]>(res_size_);
    for (std::uint32_t q = 0; q < kQueueCount; ++q) tx_msn_[q] = rx_msn_[q] = 1;  // RFC 5041 §5.3
    rtr_sent_ = cfg_.rtr_send == Rtr::none;
    rtr_seen_ = cfg_.rtr_expect == Rtr::none;
    more_ = !rtr_sent_;
    deframer_.set_fold(true);
}

IwQp::~IwQp() = default;

void IwQp::set_mss(std::uint32_t mss) {
    cfg_.mss = std::max(mss, kMinMss);
}

std::uint32_t IwQp::payload_room(RdmapOp op) const {
    return static_cast<std::uint32_t>(max_ulpdu(cfg_.mss) - header_len(op));
}

IwTime IwQp::next_deadline() const {
    if (more_ || term_pending_) return 0;
    return rtr_read_out_ && state_ == IwState::ok ? rtr_nudge_at_ : kIwNever;
}

// --- the FPDU writer ------------------------------------------------------------------------

void IwQp::copy_out(std::uint8_t* dst, const std::uint8_t* src, std::uint32_t n,
                    std::uint32_t* crc) {
    if (crc != nullptr)
        *crc = crc::Crc32c::update_copy(*crc, dst, {src, n});
    else if (n != 0)
        std::memcpy(dst, src, n);
}

IwQp::Emit IwQp::emit(const SegmentSpec& spec, std::uint32_t len, const Source& src) {
    const std::span<std::uint8_t> ulpdu = txbuf_.subspan(kFpduLengthLen);
    const std::size_t hl = build_header(ulpdu, spec);
    std::uint8_t* dst = ulpdu.data() + hl;
    // A payload of crc::kCopyFoldMin bytes or more has its CRC-32C folded as it is copied
    // in; a smaller one is copied, then the FPDU is folded whole.
    const bool fold = cfg_.crc && len >= crc::kCopyFoldMin;
    std::uint32_t reg = fold ? begin_fpdu(txbuf_, hl + len, hl) : 0;
    std::uint32_t* const fold_into = fold ? &reg : nullptr;
    if (len > 0) {
        if (src.remote) {
            const verbs::RemoteRegion r =
                mem_.remote(src.stag, src.to, len, verbs::RemoteNeed::read);
            if (r.check != verbs::RemoteCheck::ok) {
                remote_check_ = r.check;
                return Emit::gather_failed;
            }
            copy_out(dst, r.ptr, len, fold_into);
        } else if (!req_gather(*src.wr, src.off, len, dst, fold_into)) {
            return Emit::gather_failed;
        }
    }
    const std::size_t n =
        fold ? seal_fpdu_folded(txbuf_, hl + len, reg) : seal_fpdu(txbuf_, hl + len, cfg_.crc);
    if (!stream_.send(std::span<const std::uint8_t>(txbuf_.data(), n))) {
        counters_.tx_refused.add();
        more_ = true;
        return Emit::refused;
    }
    counters_.tx_fpdus.add();
    counters_.tx_bytes.add(n);
    return Emit::sent;
}

// --- receive dispatch ---------------------------------------------------------------------------

void IwQp::on_bytes(std::span<const std::uint8_t> bytes, IwTime /*now*/) {
    counters_.rx_bytes.add(bytes.size());
    if (state_ == IwState::error) {
        counters_.drop_qp_error.add();
        return;
    }
    using Bytes = std::span<const std::uint8_t>;
    const FpduDeframer::Status st = deframer_.feed(bytes, [&](Bytes u, Bytes unchecked) {
        if (state_ == IwState::error) {
            counters_.drop_qp_error.add();
            return;
        }
        on_ulpdu(u, unchecked);
    });
    if (st == FpduDeframer::Status::crc_error) {
        crc_failed();
    } else if (st == FpduDeframer::Status::too_long) {
        counters_.framing_errors.add();
        terminate(term_cause(LlpCode::marker_mismatch), {}, IwError::crc_error);
    }
    if (comp_retire()) more_ = more_ || cur_ != tail_;
}

// RFC 5044 §8: a CRC error is fatal and the connection must be closed. The stream is still in
// order towards the peer, so tell it why first, as Linux siw does (Terminate, LLP layer, "MPA
// CRC error"); bytes after the bad FPDU are ignored.
void IwQp::crc_failed() {
    counters_.crc_errors.add();
    terminate(term_cause(LlpCode::crc_error), {}, IwError::crc_error);
}

bool IwQp::rx_crc_ok() {
    if (rx_fold_ == nullptr || rx_fold_->verify()) return true;
    rx_fold_ = nullptr;
    crc_failed();
    return false;
}

// An FPDU whose payload is placed (Writes, Sends, Read Responses) has its CRC folded into
// the placement's copies, and checked before its completion; any other is checked first.
void IwQp::on_ulpdu(std::span<const std::uint8_t> u, std::span<const std::uint8_t> unchecked) {
    FpduCrcFold fold(unchecked);
    rx_fold_ = unchecked.empty() ? nullptr : &fold;
    dispatch(u);
    rx_crc_ok();
    rx_fold_ = nullptr;
}

void IwQp::dispatch(std::span<const std::uint8_t> u) {
    counters_.rx_fpdus.add();
    const Segment seg = parse(u);
    if (!seg.ok()) {
        counters_.parse_errors.add();
        terminate(parse_error_cause(seg.error, seg.tagged), u, IwError::remote_error);
        return;
    }
    // The opcodes that carry a payload (Writes, Sends, Read Responses) fold their CRC into
    // its placement.
    if (rx_fold_ != nullptr && (!seg.info().payload || !rtr_seen_) && !rx_crc_ok()) return;
    if (!rtr_seen_ && resp_rtr(seg)) return;
    switch (seg.op) {
        case RdmapOp::write:
            resp_write(seg, u);
            break;
        case RdmapOp::read_request:
            resp_read_request(seg, u);
            break;
        case RdmapOp::read_response:
            comp_read_response(seg, u);
            break;
        case RdmapOp::send:
        case RdmapOp::send_inv:
        case RdmapOp::send_se:
        case RdmapOp::send_se_inv:
            resp_send(seg, u);
            break;
        case RdmapOp::terminate:
            comp_terminate(seg);
            break;
        case RdmapOp::immediate:
        case RdmapOp::immediate_se:
            resp_immediate(seg, u);
            break;
        case RdmapOp::atomic_request:
            resp_atomic_request(seg, u);
            break;
        case RdmapOp::atomic_response:
            comp_atomic_response(seg, u);
            break;
    }
}

// --- poll ---------------------------------------------------------------------------------------

bool IwQp::poll(IwTime now) {
    bool did = false;
    more_ = false;
    if (term_pending_) {
        if (!send_terminate()) return did;
        did = true;
    }
    if (state_ == IwState::error) {
        // WRs posted since the QP failed, or left by the last flush; more_ when some may be
        // left.
        if (flush() > 0) did = true;
        return did;
    }
    if (!rtr_sent_) {
        if (!req_rtr(now)) return did;
        did = true;
    }
    if (rtr_read_out_ && now >= rtr_nudge_at_ && req_nudge(now)) did = true;
    while (state_ == IwState::ok) {
        if (res_count_ > 0) {
            const Emit e = resp_emit();
            if (e == Emit::refused) break;
            did = true;
            continue;
        }
        if (rtr_read_out_) break;  // the WRs wait for the answer to our read RTR
        if (!req_step()) break;
        did = true;
        if (more_) break;  // the stream refused
    }
    did |= comp_retire();
    if (term_pending_) {
        more_ = true;  // a failure on the way: its Terminate goes on the next poll
    }
    return did;
}

// --- errors -------------------------------------------------------------------------------------

void IwQp::terminate(const TermCause& cause, std::span<const std::uint8_t> u, IwError why) {
    if (state_ == IwState::error) return;
    // A segment whose CRC is still unchecked may be wrong only because it was damaged: the
    // CRC error is the one to report (and rx_crc_ok reports it).
    if (rx_fold_ != nullptr && !rx_crc_ok()) return;
    term_spec_ = SegmentSpec{};
    term_spec_.op = RdmapOp::terminate;
    term_spec_.msn = tx_msn_[static_cast<std::size_t>(Queue::terminate)]++;
    term_spec_.cause = cause;
    // The offending segment's headers (RFC 5040 §4.8): its DDP header for DDP errors and
    // RDMAP protection or operation errors, and a Read Request's body too.
    const bool copy = cause.layer == TermLayer::ddp ||
                      (cause.layer == TermLayer::rdmap &&
                       cause.etype != static_cast<std::uint8_t>(RdmapEtype::local_catastrophic));
    if (copy && u.size() >= 2) {
        const std::size_t hl = (u[0] & kDdpTagged) != 0 ? kTaggedHeaderLen : kUntaggedHeaderLen;
        if (u.size() >= hl) {
            std::memcpy(term_ddp_.data(), u.data(), hl);
            term_spec_.term_ddp_header = std::span(term_ddp_).first(hl);
            term_spec_.term_ddp_seg_len = static_cast<std::uint16_t>(u.size());
            term_spec_.term_seg_len_valid = true;
            if ((u[1] & kRdmapOpcodeMask) == static_cast<std::uint8_t>(RdmapOp::read_request) &&
                hl == kUntaggedHeaderLen && u.size() >= hl + kTerminatedRdmapLen) {
                std::memcpy(term_rdmap_.data(), u.data() + hl, kTerminatedRdmapLen);
                term_spec_.term_rdmap_header = term_rdmap_;
            }
        }
    }
    term_sent_ = cause;
    term_pending_ = true;
    fail(why);
}

bool IwQp::send_terminate() {
    if (emit(term_spec_, 0, Source{}) != Emit::sent) return false;
    term_pending_ = false;
    counters_.tx_terminates.add();
    return true;
}

void IwQp::on_stream_end(bool graceful) {
    term_pending_ = false;  // nowhere to send it
    fail(graceful ? IwError::stream_closed : IwError::stream_lost);
}

void IwQp::fail(IwError why) {
    if (state_ == IwState::error) return;
    state_ = IwState::error;
    error_ = why;
    if (why != IwError::requested) wants_close_ = true;
    flush();
}

void IwQp::complete_send(const Held& h, WcStatus status) {
    if (status == WcStatus::success && !h.wr.signaled) return;
    const auto op = static_cast<std::size_t>(h.wr.op);
    const verbs::WrOpKind& kind =
        op < verbs::kWrOpCount ? verbs::kWrOpKinds[op] : verbs::wr_op_kind(verbs::WrOp::send);
    Completion c;
    c.wr_id = h.wr.wr_id;
    c.status = status;
    c.opcode = kind.wc;
    c.byte_len = status == WcStatus::success ? static_cast<std::uint32_t>(h.len) : 0;
    c.qp_num = cfg_.qpn;
    queues_.complete_send(c);
}

void IwQp::complete_recv_error(const RecvWr& wr, WcStatus status) {
    Completion c;
    c.wr_id = wr.wr_id;
    c.status = status;
    c.opcode = verbs::WcOpcode::recv;
    c.qp_num = cfg_.qpn;
    queues_.complete_recv(c);
}

std::uint32_t IwQp::flush() {
    std::uint32_t n = 0;
    // Send WRs in order: those done before the first unfinished or failed one complete as
    // they are; after it, a WR that failed keeps its status and everything else is flushed
    // (a WR done on the wire but waiting behind an unfinished READ included).
    while (head_ != cur_ && held(head_).done && held(head_).status == WcStatus::success) {
        complete_send(held(head_), WcStatus::success);
        ++head_;
        ++n;
    }
    for (; head_ != tail_; ++head_) {
        const Held& h = held(head_);
        complete_send(h,
                      h.done && h.status != WcStatus::success ? h.status : WcStatus::wr_flush_err);
        ++n;
    }
    cur_ = tail_;
    rd_out_ = 0;
    // The held WRs are at most sq_depth; the queues hold as many as the client keeps posting,
    // so at most flush_budget of each go per call and poll() takes the rest (more_).
    Held spare;
    std::uint32_t sends = 0;
    for (; sends < cfg_.flush_budget && queues_.pop_send(spare.wr); ++sends)
        complete_send(spare, WcStatus::wr_flush_err);
    if (have_recv_) {
        complete_recv_error(recv_, WcStatus::wr_flush_err);
        have_recv_ = false;
        ++n;
    }
    in_msg_ = false;
    std::uint32_t recvs = 0;
    if (!cfg_.srq) {
        RecvWr r;
        for (; recvs < cfg_.flush_budget && queues_.pop_recv(r); ++recvs)
            complete_recv_error(r, WcStatus::wr_flush_err);
    }
    res_count_ = 0;
    if (sends == cfg_.flush_budget || recvs == cfg_.flush_budget) more_ = true;
    return n + sends + recvs;
}

}  // namespace snic::iwarp
