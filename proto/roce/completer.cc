// The completer: matches ACKs, NAKs, READ responses and ATOMIC ACKs to the started WRs
// and retires them in send queue order (IBA vol 1 §9.7.5).
//
// An ACK with PSN a acknowledges every PSN up to a (coalesced ACKs retire several WRs); so
// does, implicitly, a NAK or a response for the PSNs before its own. A READ or atomic is
// finished only by its own responses: an acknowledgement that covers PSNs of a READ whose
// responses have not all arrived means they were lost, and the requester goes back to the
// first missing one. A sequence error NAK sends the requester back to its PSN; an RNR NAK
// makes it wait the time its AETH encodes first; NAKs invalid request, remote access and
// remote operational fail the WR they name and the QP. Duplicates (PSN before the oldest
// unacknowledged) and ghosts (PSN never sent) are counted and ignored.
#include <cstring>

#include "proto/roce/psn.h"
#include "proto/roce/rc_qp.h"
#include "proto/roce/rnr.h"
#include "proto/verbs/place.h"

namespace snic::roce {

void RcQp::comp_on_packet(const Packet& pkt, RcTime now) {
    const std::uint32_t psn = pkt.bth().psn.host();
    const bool read = pkt.info->has(kRead);
    if (read)
        counters_.rx_read_responses.add();
    else if (pkt.info->has(kAtomic))
        counters_.rx_atomic_acks.add();
    const Aeth* aeth = pkt.aeth();
    const AckType type = aeth != nullptr ? aeth_type(aeth->syndrome) : AckType::ack;
    if (!read && !pkt.info->has(kAtomic)) {
        if (type == AckType::ack)
            counters_.rx_acks.add();
        else
            counters_.rx_naks.add();
    }

    // Only PSNs in [una, sent_end) name something outstanding; an ACK may also repeat
    // una - 1, which tells nothing new.
    if (!psn_lt(psn, sent_end_) || psn_lt(psn, una_)) {
        counters_.duplicate_responses.add();
        return;
    }
    if (type == AckType::reserved || ((read || pkt.info->has(kAtomic)) && type != AckType::ack)) {
        counters_.drop_bad_response.add();
        return;
    }
    if (read) {
        comp_read_response(pkt, now);
    } else if (pkt.info->has(kAtomic)) {
        comp_atomic_ack(pkt, now);
    } else if (type == AckType::ack) {
        comp_ack_upto(psn, now);
    } else {
        comp_nak(pkt, now);
    }
}

// Recomputes the oldest unacknowledged PSN from the head WR.
void RcQp::comp_update_una() {
    if (head_ == start_) {
        una_ = next_psn_;
        return;
    }
    const SendSlot& s = slot(head_);
    una_ = psn_add(s.first_psn, s.state == SlotState::in_flight ? s.acked : 0);
}

// Something new was acknowledged: retry counters start over, the timer restarts.
void RcQp::comp_progress(RcTime now) {
    retry_left_ = cfg_.retry_cnt;
    rnr_left_ = cfg_.rnr_retry;
    if (guard_ && psn_lt(guard_psn_, una_)) guard_ = false;  // past the PSN we went back to
    if (una_ != sent_end_ && timeout_ns_ != kRcNever && !rnr_wait_)
        deadline_ = now + timeout_ns_;
    else if (una_ == sent_end_)
        deadline_ = kRcNever;
}

// Acknowledges every PSN up to and including `psn`.
void RcQp::comp_ack_upto(std::uint32_t psn, RcTime now) {
    const std::uint32_t before = una_;
    for (std::uint32_t i = head_; i != start_; ++i) {
        SendSlot& s = slot(i);
        if (s.state == SlotState::done) continue;
        if (s.state != SlotState::in_flight) break;             // failed: completes at the head
        if (psn_lt(psn, psn_add(s.first_psn, s.acked))) break;  // nothing new for this WR
        if (s.op->rd_atomic()) {
            // Acknowledged past responses that never came: they were lost.
            req_go_back(psn_add(s.first_psn, s.acked), false, now);
            break;
        }
        const std::uint32_t last = psn_add(s.first_psn, s.npsn - 1);
        if (psn_ge(psn, last)) {
            s.acked = s.npsn;
            s.state = SlotState::done;
            continue;
        }
        s.acked = psn_sub(psn, s.first_psn) + 1;
        break;
    }
    comp_retire();
    if (state_ == RcState::error) return;
    comp_update_una();
    if (una_ != before) comp_progress(now);
}

// Completes finished WRs from the head, in order: successes when signaled, errors always
// (and the QP goes to error after the failed WR's completion).
bool RcQp::comp_retire() {
    bool did = false;
    while (head_ != start_) {
        SendSlot& s = slot(head_);
        if ((s.state == SlotState::done || s.state == SlotState::failed) && !tx_settled(s)) break;
        if (s.state == SlotState::done) {
            if (s.wr.signaled) complete_send_slot(s, WcStatus::success);
            pop_head();
            did = true;
            continue;
        }
        if (s.state == SlotState::failed) {
            complete_send_slot(s, s.status);
            const RcError why = s.why;  // the slot may go back to the pool with the head
            pop_head();
            fail(why);
            return true;
        }
        break;
    }
    if (did) comp_update_una();
    return did;
}

// Fails the WR holding `psn` with `status` (the WRs before it that are still unfinished,
// READ/atomics without their data, with WR_FLUSH_ERR), then the QP.
// Their completions are decided here and made by the flush, in order, each once the wire
// holds nothing of its WR.
void RcQp::comp_fail_at(std::uint32_t psn, WcStatus status, RcError why) {
    for (std::uint32_t i = head_; i != start_; ++i) {
        SendSlot& s = slot(i);
        const bool holds = s.npsn != 0 && psn_in_range(psn, s.first_psn, s.npsn);
        const bool last = holds || i + 1 == start_;
        s.decided = true;
        if (s.state != SlotState::done || last) {
            s.state = SlotState::failed;
            s.status = last ? status : WcStatus::wr_flush_err;
        }
        if (last) break;
    }
    fail(why);
}

// Writes `len` bytes at offset `off` of the WR's local SGEs (READ data, atomic result).
bool RcQp::comp_scatter(SendSlot& s, std::uint64_t off, const std::uint8_t* data,
                        std::uint32_t len) {
    const SendWr& wr = s.wr;
    std::uint64_t pos = 0;
    for (std::uint32_t i = 0; i < wr.num_sge && len > 0; ++i) {
        const Sge& g = wr.sge[i];
        if (off >= pos + g.length) {
            pos += g.length;
            continue;
        }
        const std::uint64_t in = off - pos;
        const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(len, g.length - in));
        std::uint8_t* p = mem_.local(g.lkey, g.addr + in, n, true);
        if (p == nullptr) return false;
        verbs::place(p, data, n);
        data += n;
        off += n;
        len -= n;
        pos += g.length;
    }
    return len == 0;
}

void RcQp::comp_read_response(const Packet& pkt, RcTime now) {
    const std::uint32_t psn = pkt.bth().psn.host();
    comp_ack_upto(psn_sub(psn, 1), now);  // a response acknowledges the PSNs before it
    if (state_ == RcState::error) return;
    if (head_ == start_) {
        counters_.duplicate_responses.add();
        return;
    }
    SendSlot& s = slot(head_);
    const std::uint32_t expected = psn_add(s.first_psn, s.acked);
    if (s.state != SlotState::in_flight || s.op->kind != WrKind::read ||
        !psn_in_range(psn, s.first_psn, s.npsn) || psn != expected) {
        // A gap was handled by comp_ack_upto (go back); anything else is a duplicate.
        counters_.duplicate_responses.add();
        return;
    }
    const std::uint32_t k = s.acked;
    const std::uint64_t off = std::uint64_t{k} * cfg_.mtu;
    const std::uint64_t want =
        std::min<std::uint64_t>(cfg_.mtu, s.length - std::min<std::uint64_t>(off, s.length));
    const bool last = k + 1 == s.npsn;
    if (pkt.payload.size() != want || pkt.info->has(kLast) != last) {
        comp_fail_at(psn, WcStatus::bad_resp_err, RcError::bad_response);
        return;
    }
    if (!comp_scatter(s, off, pkt.payload.data(), static_cast<std::uint32_t>(want))) {
        comp_fail_at(psn, WcStatus::loc_prot_err, RcError::local_error);
        return;
    }
    ++s.acked;
    if (last) {
        s.state = SlotState::done;
        --rd_atomic_out_;
    }
    comp_retire();
    comp_update_una();
    comp_progress(now);
}

void RcQp::comp_atomic_ack(const Packet& pkt, RcTime now) {
    const std::uint32_t psn = pkt.bth().psn.host();
    comp_ack_upto(psn_sub(psn, 1), now);
    if (state_ == RcState::error) return;
    if (head_ == start_) {
        counters_.duplicate_responses.add();
        return;
    }
    SendSlot& s = slot(head_);
    if (s.state != SlotState::in_flight || s.op->kind != WrKind::atomic || s.first_psn != psn) {
        counters_.duplicate_responses.add();
        return;
    }
    // The original value goes to the local buffer in host order, as verbs returns it.
    const std::uint64_t orig = pkt.atomic_ack_eth()->orig.host();
    std::uint8_t bytes[sizeof orig];
    std::memcpy(bytes, &orig, sizeof orig);
    if (!comp_scatter(s, 0, bytes, sizeof bytes)) {
        comp_fail_at(psn, WcStatus::loc_prot_err, RcError::local_error);
        return;
    }
    s.acked = 1;
    s.state = SlotState::done;
    --rd_atomic_out_;
    comp_retire();
    comp_update_una();
    comp_progress(now);
}

void RcQp::comp_nak(const Packet& pkt, RcTime now) {
    const std::uint32_t psn = pkt.bth().psn.host();
    const std::uint8_t syndrome = pkt.aeth()->syndrome;
    // A NAK acknowledges the PSNs before the one it names.
    comp_ack_upto(psn_sub(psn, 1), now);
    if (state_ == RcState::error) return;

    if (aeth_type(syndrome) == AckType::rnr_nak) {
        counters_.rnr_naks_received.add();
        if (rnr_wait_ && rnr_psn_ == psn) return;  // a copy of the NAK we are waiting on
        if (cfg_.rnr_retry != 7) {
            if (rnr_left_ == 0) {
                comp_fail_at(psn, WcStatus::rnr_retry_exc_err, RcError::rnr_retry_exceeded);
                return;
            }
            --rnr_left_;
        }
        rnr_wait_ = true;
        rnr_psn_ = psn;
        rnr_until_ = now + rnr_timer_ns(aeth_value(syndrome));
        deadline_ = kRcNever;  // the local ACK timer sleeps during the wait
        guard_ = false;
        return;
    }
    const auto code = static_cast<NakCode>(aeth_value(syndrome));
    if (code == NakCode::psn_sequence_error) {
        counters_.seq_naks_received.add();
        if (rnr_wait_) return;                      // the RNR wait ends in going back anyway
        if (!req_go_back(psn, false, now)) return;  // stale, or already going back there
        // Each go-back for a sequence error is a retry, counted with the timeouts against
        // retry_cnt (progress, as this NAK may itself have made, restarts the count).
        if (retry_left_ == 0) {
            comp_fail_at(psn, WcStatus::retry_exc_err, RcError::retry_exceeded);
            return;
        }
        --retry_left_;
        return;
    }
    counters_.fatal_naks_received.add();
    comp_fail_at(psn, nak_status(code), RcError::remote_nak);
}

}  // namespace snic::roce
