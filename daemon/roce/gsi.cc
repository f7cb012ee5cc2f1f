#include "daemon/roce/gsi.h"

#include <algorithm>
#include <cstring>

namespace snic::daemon {

GsiPort::GsiPort(SendFn send, void* ctx, std::uint64_t tsc_hz)
    : send_(send),
      ctx_(ctx),
      hold_tsc_(static_cast<std::uint64_t>(static_cast<double>(tsc_hz) * kHoldSeconds)),
      retry_tsc_(static_cast<std::uint64_t>(static_cast<double>(tsc_hz) * kRetrySeconds)) {}

GsiPort::~GsiPort() = default;

void GsiPort::receive(std::uint32_t ip, std::uint32_t qpn, std::uint32_t qkey,
                      std::span<const std::uint8_t> payload) {
    GsiMad m{};
    if (payload.size() < m.data.size()) {
        counters_.rx_dropped.add();
        return;
    }
    m.ip = ip;
    m.qpn = qpn;
    m.qkey = qkey;
    m.length = static_cast<std::uint16_t>(m.data.size());
    std::memcpy(m.data.data(), payload.data(), m.data.size());
    if (!in_.push(m)) {
        counters_.rx_dropped.add();
        return;
    }
    counters_.rx_mads.add();
    wakeup_.signal();
}

bool GsiPort::poll(std::uint64_t now) {
    bool did = held_count_ != 0 && now >= next_retry_ && retry_held(now);
    while (out_.pop(next_)) {
        did = true;
        // A peer's MADs keep their order: behind one held for it, a MAD is held too.
        if (!holds_for(next_.ip) &&
            send_(ctx_, next_.ip, next_.qpn, next_.qkey, {next_.data.data(), next_.length})) {
            counters_.tx_mads.add();
            continue;
        }
        hold(next_, now);
    }
    return did;
}

bool GsiPort::retry_held(std::uint64_t now) {
    next_retry_ = now + retry_tsc_;
    bool did = false;
    std::array<std::uint32_t, kHeld> stuck{};  // peers whose MAD stayed held this turn
    std::size_t nstuck = 0;
    const std::size_t n = held_count_;
    for (std::size_t i = 0; i < n; ++i) {
        Held h = held_[held_head_];
        held_head_ = (held_head_ + 1) % kHeld;
        --held_count_;
        const bool behind =
            std::find(stuck.begin(), stuck.begin() + nstuck, h.mad.ip) != stuck.begin() + nstuck;
        if (!behind &&
            send_(ctx_, h.mad.ip, h.mad.qpn, h.mad.qkey, {h.mad.data.data(), h.mad.length})) {
            counters_.tx_mads.add();
            did = true;
            continue;
        }
        if (now >= h.until) {
            counters_.tx_unsent.add();  // the CM's retransmission recovers
            continue;
        }
        if (!behind) stuck[nstuck++] = h.mad.ip;
        held_[(held_head_ + held_count_) % kHeld] = h;  // back, in order
        ++held_count_;
    }
    return did;
}

void GsiPort::hold(const GsiMad& m, std::uint64_t now) {
    if (held_count_ == kHeld) {  // the oldest gives way
        held_head_ = (held_head_ + 1) % kHeld;
        --held_count_;
        counters_.tx_unsent.add();
    }
    if (held_count_ == 0) next_retry_ = now + retry_tsc_;
    held_[(held_head_ + held_count_) % kHeld] = Held{m, now + hold_tsc_};
    ++held_count_;
}

bool GsiPort::holds_for(std::uint32_t ip) const {
    for (std::size_t i = 0; i < held_count_; ++i)
        if (held_[(held_head_ + i) % kHeld].mad.ip == ip) return true;
    return false;
}

bool GsiPort::send(const GsiMad& m) {
    if (out_.push(m)) return true;
    counters_.tx_dropped.add();
    return false;
}

}  // namespace snic::daemon
