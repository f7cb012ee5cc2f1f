#include "proto/tcp/rack.h"

namespace snic::tcp {

void Rack::sent(std::uint64_t start, std::uint64_t end, TcpTime now, bool retransmit) {
    if (retransmit) {
        // The earlier transmissions of these bytes count no more: this one stands for them.
        for (std::size_t i = 0; i < n_; ++i) {
            Tx& t = at(i);
            if (!t.done && t.start < end && start < t.end) t.done = true;
        }
        trim();
    }
    if (n_ == kMax) {  // the oldest goes: its loss, if any, is the retransmission timer's
        head_ = (head_ + 1) % kMax;
        --n_;
    }
    at(n_++) = Tx{start, end, now, retransmit, false};
}

void Rack::on_ack(std::uint64_t una, const Scoreboard& sb, TcpTime now) {
    for (std::size_t i = 0; i < n_; ++i) {
        Tx& t = at(i);
        if (t.done || !delivered(t, una, sb)) continue;
        t.done = true;
        const TcpTime rtt = now - t.xmit;
        if (t.retransmit && has_rtt() && rtt < min_rtt_) continue;  // ambiguous (§6.2 step 2)
        if (rtt < min_rtt_) min_rtt_ = rtt;
        if (!any_ || t.xmit > xmit_ || (t.xmit == xmit_ && t.end > end_)) {
            xmit_ = t.xmit;
            end_ = t.end;
            rtt_ = rtt;
            any_ = true;
        }
    }
    trim();
}

bool Rack::last(std::uint64_t una, std::uint64_t& start, std::uint64_t& end) const {
    bool found = false;
    for (std::size_t i = 0; i < n_; ++i) {
        const Tx& t = at(i);
        if (t.done || t.end <= una || (found && t.end <= end)) continue;
        start = t.start > una ? t.start : una;
        end = t.end;
        found = true;
    }
    return found;
}

void Rack::on_dsack(TcpTime now, TcpTime srtt) {
    recoveries_left_ = 16;
    if (now < dsack_round_end_) return;
    if (reo_wnd_mult_ < 64) ++reo_wnd_mult_;
    dsack_round_end_ = now + srtt;
}

void Rack::on_recovery_end() {
    if (recoveries_left_ > 0 && --recoveries_left_ == 0) reo_wnd_mult_ = 1;
}

void Rack::clear() {
    head_ = 0;
    n_ = 0;
}

void Rack::trim() {
    while (n_ > 0 && at(0).done) {
        head_ = (head_ + 1) % kMax;
        --n_;
    }
}

}  // namespace snic::tcp
