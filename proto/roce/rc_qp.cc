// The RC QP: construction, dispatch of received packets to the responder or the completer,
// the poll loop, the error state and flushing, and the packet writer the engines share.
#include "proto/roce/rc_qp.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "proto/roce/psn.h"

namespace snic::roce {

const char* rc_config_error(const RcConfig& c) {
    if (c.service != Transport::rc && c.service != Transport::uc)
        return "the service must be RC or UC";
    if (c.mtu != 256 && c.mtu != 512 && c.mtu != 1024 && c.mtu != 2048 && c.mtu != 4096)
        return "path MTU must be 256, 512, 1024, 2048 or 4096 bytes";
    if (c.qpn > kMask24 || c.dest_qpn > kMask24) return "QP numbers are 24-bit";
    if (c.sq_psn > kPsnMask || c.rq_psn > kPsnMask) return "PSNs are 24-bit";
    if (c.timeout > 31) return "local ACK timeout is a 5-bit code";
    if (c.retry_cnt > 7 || c.rnr_retry > 7) return "retry counts are 3-bit";
    if (c.min_rnr_timer > 31) return "min_rnr_timer is a 5-bit code";
    if (c.max_rd_atomic > kRcMaxRdAtomic || c.max_dest_rd_atomic > kRcMaxRdAtomic)
        return "at most 128 READ/atomics outstanding";
    if (c.sq_depth == 0 || c.sq_depth > 65536) return "send queue depth must be 1..65536";
    if (c.max_inline > kMaxInline) return "at most 256 bytes of inline data";
    if (c.window == 0 || c.window > (1u << 20)) return "window must be 1..2^20 PSNs";
    if (c.max_burst == 0) return "max_burst must be at least 1";
    return nullptr;
}

RcQp::RcQp(const RcConfig& config, QpMemory& memory, QpQueues& queues, RcWire& wire,
           SendSlotPool* pool)
    : cfg_(config), mem_(memory), queues_(queues), wire_(wire), pool_(pool) {
    // Clamp what rc_config_error() would refuse, so that a bad config cannot break the
    // engine's arithmetic.
    if (cfg_.service != Transport::uc) cfg_.service = Transport::rc;
    ops_ = &wr_op_table(cfg_.service);
    if (cfg_.mtu < 256) cfg_.mtu = 256;
    if (cfg_.mtu > 4096) cfg_.mtu = 4096;
    cfg_.mtu = std::bit_floor(cfg_.mtu);
    cfg_.qpn &= kMask24;
    cfg_.dest_qpn &= kMask24;
    cfg_.sq_psn &= kPsnMask;
    cfg_.rq_psn &= kPsnMask;
    cfg_.timeout &= 0x1f;
    cfg_.retry_cnt = std::min<std::uint8_t>(cfg_.retry_cnt, 7);
    cfg_.rnr_retry = std::min<std::uint8_t>(cfg_.rnr_retry, 7);
    cfg_.min_rnr_timer &= 0x1f;
    cfg_.max_rd_atomic = std::min(cfg_.max_rd_atomic, kRcMaxRdAtomic);
    cfg_.max_dest_rd_atomic = std::min(cfg_.max_dest_rd_atomic, kRcMaxRdAtomic);
    cfg_.sq_depth = std::clamp<std::uint32_t>(cfg_.sq_depth, 1, 65536);
    cfg_.max_inline = std::min(cfg_.max_inline, kMaxInline);
    cfg_.window = std::clamp<std::uint32_t>(cfg_.window, 1, 1u << 20);
    cfg_.max_burst = std::max<std::uint32_t>(cfg_.max_burst, 1);
    cfg_.flush_budget = std::max<std::uint32_t>(cfg_.flush_budget, 1);
    cfg_.ack_req_every = std::max<std::uint32_t>(cfg_.ack_req_every, 1);
    cfg_.ack_every = std::max<std::uint32_t>(cfg_.ack_every, 1);

    timeout_ns_ = uc() ? kRcNever : ack_timeout_ns(cfg_.timeout);  // UC waits for nothing
    // WRs beyond depth_ wait in the client's ring: the ring keeps max_send_wr posts possible.
    depth_ = std::bit_ceil(std::min(cfg_.sq_depth, kMaxHeldWrs));
    chunk_ = std::min(depth_, kSlotChunk);
    chunk_shift_ = static_cast<std::uint32_t>(std::countr_zero(chunk_));
    nchunks_ = depth_ / chunk_;
    if (pool_ == nullptr) {
        own_pool_ = std::make_unique<SendSlotPool>(nchunks_);
        pool_ = own_pool_.get();
    }
    next_psn_ = una_ = sent_end_ = cfg_.sq_psn;
    retry_left_ = cfg_.retry_cnt;
    rnr_left_ = cfg_.rnr_retry;
    epsn_ = cfg_.rq_psn;
    nres_ = cfg_.max_dest_rd_atomic;
    res_ = std::make_unique<RdAtomicRes[]>(std::max<std::uint32_t>(nres_, 1));
}

RcQp::~RcQp() {
    // The slots go back to the pool as a fresh chunk's are: nothing held, nothing decided.
    for (std::uint32_t i = head_; i != tail_; ++i) {
        if (slot(i).tx_hold != 0) wire_.tx_forget(slot(i).tx_hold);
        slot(i).decided = false;
    }
    for (SlotChunk*& c : chunks_)
        if (c != nullptr) pool_->give(std::exchange(c, nullptr));
}

std::uint32_t RcQp::slot_chunks_held() const {
    std::uint32_t n = 0;
    for (const SlotChunk* c : chunks_) n += c != nullptr ? 1 : 0;
    return n;
}

bool RcQp::borrow(SlotChunk*& c) {
    c = pool_->take();
    if (c != nullptr) return true;
    counters_.send_slot_waits.add();
    more_ = true;  // taken again on a later poll, once another QP gave chunks back
    return false;
}

void RcQp::pop_head() {
    ++head_;
    if (head_ == tail_ || (head_ & (chunk_ - 1)) == 0) release_chunks();
}

// Gives back every chunk in which no held WR ([head_, tail_)) lives.
void RcQp::release_chunks() {
    std::uint32_t live = 0;  // bit per chunk
    if (head_ != tail_) {
        const std::uint32_t first = head_ >> chunk_shift_, last = (tail_ - 1) >> chunk_shift_;
        for (std::uint32_t r = first; r - first <= last - first && r - first < nchunks_; ++r)
            live |= 1u << (r & (nchunks_ - 1));
    }
    for (std::uint32_t k = 0; k < nchunks_; ++k)
        if ((live & (1u << k)) == 0 && chunks_[k] != nullptr)
            pool_->give(std::exchange(chunks_[k], nullptr));
}

bool RcQp::start_requester(std::uint32_t sq_psn, std::uint8_t timeout, std::uint8_t retry_cnt,
                           std::uint8_t rnr_retry, std::uint8_t max_rd_atomic) {
    if (tail_ != 0 || sent_end_ != cfg_.sq_psn || state_ == RcState::error) return false;
    cfg_.sq_psn = sq_psn & kPsnMask;
    cfg_.timeout = timeout & 0x1f;
    cfg_.retry_cnt = std::min<std::uint8_t>(retry_cnt, 7);
    cfg_.rnr_retry = std::min<std::uint8_t>(rnr_retry, 7);
    cfg_.max_rd_atomic = std::min(max_rd_atomic, kRcMaxRdAtomic);
    timeout_ns_ = uc() ? kRcNever : ack_timeout_ns(cfg_.timeout);
    next_psn_ = una_ = sent_end_ = cfg_.sq_psn;
    retry_left_ = cfg_.retry_cnt;
    rnr_left_ = cfg_.rnr_retry;
    return true;
}

bool RcQp::pkey_ok(std::uint16_t pkey) const {
    // IBA §10.9.3: the low 15 bits must match and at least one side be a full member.
    return ((pkey ^ cfg_.pkey) & 0x7fff) == 0 && ((pkey | cfg_.pkey) & 0x8000) != 0;
}

void RcQp::on_packet(const Packet& pkt, RcTime now) {
    if (!pkt.ok() || pkt.info == nullptr) {
        counters_.drop_bad_opcode.add();
        return;
    }
    if (state_ == RcState::error) {
        counters_.drop_qp_error.add();
        return;
    }
    const Bth& bth = pkt.bth();
    if (transport_of(bth.opcode) != cfg_.service) {
        counters_.drop_bad_opcode.add();
        return;
    }
    if (bth.dest_qp.host() != cfg_.qpn) {
        counters_.drop_bad_qpn.add();
        return;
    }
    if (!pkey_ok(bth.pkey.host())) {
        counters_.drop_bad_pkey.add();
        return;
    }
    if (pkt.icrc_pending && (uc() || !pkt.info->has(kRequest))) {
        // Only RC's responder checks the ICRC as it places a payload: settled here for the rest.
        if (icrc_bad(pkt)) return;
        Packet checked = pkt;
        checked.icrc_pending = false;
        return on_packet(checked, now);
    }
    if (uc())
        uc_on_packet(pkt);  // UC has requests only
    else if (pkt.info->has(kRequest)) {
        if (!cfg_.fast_path || !resp_fast(pkt, now)) resp_on_packet(pkt, now);
    } else
        comp_on_packet(pkt, now);
}

bool RcQp::icrc_bad(const Packet& pkt) {
    if (icrc_settle(pkt)) return false;
    counters_.drop_bad_icrc.add();
    return true;
}

bool RcQp::poll(RcTime now) {
    more_ = false;
    if (state_ == RcState::error) {
        bool did = false;
        if (nak_pending_ && nak_fatal_) did = resp_send_nak();
        // WRs posted since the error, or left by the last flush; more_ when some may be left.
        if (flush() > 0) did = true;
        return did;
    }
    // Quiet: no timer due, nothing to retire, nothing for the responder to send. Only WRs
    // posted since can give the QP work, and the loop below goes straight to the requester.
    const bool quiet = cfg_.fast_path && poll_quiet(now);
    bool did = false;
    if (!quiet) {
        did = req_timers(now);
        if (state_ == RcState::error) return true;
        did |= comp_retire();
        if (state_ == RcState::error) return true;
    }

    std::uint32_t budget = cfg_.max_burst;
    while (budget > 0) {
        bool any = false;
        if (!quiet && resp_emit_one(now)) {
            any = true;
            --budget;
        }
        if (state_ == RcState::error) return true;
        if (budget > 0 && req_emit_one(now)) {
            any = true;
            --budget;
        }
        if (state_ == RcState::error) return true;
        if (!any) break;
        did = true;
    }
    if (budget == 0) more_ = true;  // cut short: the rest goes on the next poll
    // Local operations started above complete here when nothing is ahead of them; a WR
    // that failed to start completes in error. What they were holding back (a local operation
    // waits for every WR before it) starts on the next poll.
    if (comp_retire()) {
        did = true;
        more_ = true;
    }
    return did;
}

// What poll() would find with nothing to do before its requester: req_timers() fires
// nothing, comp_retire() retires nothing, resp_emit_one() has nothing to send (and sending
// requests changes none of it).
bool RcQp::poll_quiet(RcTime now) const {
    return !rnr_wait_ && now < deadline_ && !nak_pending_ && res_active_ == 0 &&
           !resp_ack_due(now) && (head_ == start_ || slot(head_).state == SlotState::in_flight);
}

RcTime RcQp::next_deadline() const {
    if (more_) return 0;
    if (state_ == RcState::error) return nak_pending_ && nak_fatal_ ? 0 : kRcNever;
    // Responder output made due by a packet since the last poll.
    if (nak_pending_ || res_active_ > 0 || (ack_needed_ && ack_now_)) return 0;
    RcTime t = deadline_;
    if (rnr_wait_) t = std::min(t, rnr_until_);
    if (ack_needed_) {
        const RcTime due = ack_since_ + cfg_.ack_delay_ns;
        t = std::min(t, due < ack_since_ ? kRcNever : due);
    }
    return t;
}

// --- error state and flush ---------------------------------------------------------------------

void RcQp::fail(RcError why) {
    if (state_ == RcState::error) return;
    state_ = RcState::error;
    error_ = why;
    deadline_ = kRcNever;
    rnr_wait_ = false;
    ack_needed_ = false;
    if (!nak_fatal_) nak_pending_ = false;  // only a fatal NAK still goes out
    for (std::uint32_t i = 0; i < std::max<std::uint32_t>(nres_, 1); ++i) res_[i].active = false;
    res_active_ = 0;
    flush();
}

void RcQp::complete_send_slot(const SendSlot& s, WcStatus status) {
    Completion c;
    c.wr_id = s.wr.wr_id;
    c.status = status;
    c.opcode = s.op != nullptr ? s.op->wc : wr_op_info(WrOp::send).wc;
    c.byte_len = status == WcStatus::success ? s.length : 0;
    c.qp_num = cfg_.qpn;
    c.src_qp = cfg_.dest_qpn;
    queues_.complete_send(c);
}

void RcQp::complete_recv_error(const RecvWr& wr, WcStatus status) {
    Completion c;
    c.wr_id = wr.wr_id;
    c.status = status;
    c.opcode = WcOpcode::recv;
    c.qp_num = cfg_.qpn;
    c.src_qp = cfg_.dest_qpn;
    queues_.complete_recv(c);
}

std::uint32_t RcQp::flush() {
    std::uint32_t n = 0;
    // Send WRs held by the engine, in order, then those still in the queue. The held ones are
    // at most sq_depth; the queue's are as many as the client keeps posting, so at most
    // flush_budget of them go per call and poll() takes the rest (more_).
    while (head_ != tail_) {
        SendSlot& s = slot(head_);
        if (!tx_settled(s)) break;  // the rest after it, in order, on a later poll
        if (s.op == nullptr) s.op = &wr_op_info(WrOp::send);
        if (!s.decided)
            complete_send_slot(s, WcStatus::wr_flush_err);
        else if (s.state == SlotState::failed)
            complete_send_slot(s, s.status);
        else if (s.wr.signaled)
            complete_send_slot(s, WcStatus::success);  // done before the WR that failed
        s.decided = false;
        pop_head();
        ++n;
    }
    start_ = cur_ = tail_;
    cur_pkt_ = 0;
    rd_atomic_out_ = 0;
    SendSlot spare;  // on the stack: no chunk needed to flush what the queue still holds
    std::uint32_t sends = 0;
    // Only once every held WR is flushed: the queue's come after them.
    for (; head_ == tail_ && sends < cfg_.flush_budget && queues_.pop_send(spare.wr); ++sends) {
        const auto op = static_cast<std::uint8_t>(spare.wr.op);
        spare.op = op < kWrOpCount ? &kWrOpTable[op] : &wr_op_info(WrOp::send);
        complete_send_slot(spare, WcStatus::wr_flush_err);
        ++head_, ++start_, ++cur_, ++tail_;  // keeps send_wrs_held() at 0 and counts the flush
    }
    // The receive WR in progress, then the RQ (an SRQ's WRs are not this QP's to flush).
    if (have_recv_) {
        complete_recv_error(recv_, WcStatus::wr_flush_err);
        have_recv_ = false;
        ++n;
    }
    std::uint32_t recvs = 0;
    if (!cfg_.srq) {
        RecvWr r;
        for (; recvs < cfg_.flush_budget && queues_.pop_recv(r); ++recvs)
            complete_recv_error(r, WcStatus::wr_flush_err);
    }
    if (sends == cfg_.flush_budget || recvs == cfg_.flush_budget) more_ = true;
    return n + sends + recvs;
}

// --- the packet writer -------------------------------------------------------------------------

bool RcQp::emit(const PacketSpec& spec, std::uint32_t len, const Piece* pieces,
                std::uint32_t npieces, bool place, TxHold* hold) {
    const OpcodeInfo& info = opcode_info(spec.opcode);
    const std::size_t pad = pad_for(len);
    const std::size_t total = info.length + len + pad;
    const std::span<std::uint8_t> out = wire_.tx_alloc(total);
    if (out.size() < total) {
        counters_.tx_full.add();
        more_ = true;  // sent on a later poll
        return false;
    }
    const std::size_t hdr = write_headers(out, spec, len);
    if (place && npieces == 1 && placed(len))
        wire_.tx_send_placed(total, hdr, pieces[0], hold);
    else
        wire_.tx_send(total, hdr, {pieces, npieces});
    return true;
}

}  // namespace snic::roce
