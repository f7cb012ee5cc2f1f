#include "daemon/roce/gsi.h"

#include <cstring>

namespace snic::daemon {

GsiPort::GsiPort(SendFn send, void* ctx, std::uint64_t tsc_hz)
    : send_(send),
      ctx_(ctx),
      hold_tsc_(static_cast<std::uint64_t>(static_cast<double>(tsc_hz) * kHoldSeconds)) {}

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
    bool did = false;
    if (held_) {
        if (send_(ctx_, held_mad_.ip, held_mad_.qpn, held_mad_.qkey,
                  {held_mad_.data.data(), held_mad_.length})) {
            counters_.tx_mads.add();
            held_ = false;
            did = true;
        } else if (now >= held_until_) {
            counters_.tx_unsent.add();  // the CM's retransmission recovers
            held_ = false;
        } else {
            return false;  // order kept: what follows waits behind it
        }
    }
    while (out_.pop(held_mad_)) {
        did = true;
        if (send_(ctx_, held_mad_.ip, held_mad_.qpn, held_mad_.qkey,
                  {held_mad_.data.data(), held_mad_.length})) {
            counters_.tx_mads.add();
            continue;
        }
        held_ = true;
        held_until_ = now + hold_tsc_;
        break;
    }
    return did;
}

bool GsiPort::send(const GsiMad& m) {
    if (out_.push(m)) return true;
    counters_.tx_dropped.add();
    return false;
}

}  // namespace snic::daemon
