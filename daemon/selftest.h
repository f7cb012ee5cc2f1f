// Built-in self-tests that run on a data lcore. ArpPing resolves a peer's MAC by
// ARP from one port and measures ICMP echo round trips to it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/lcore.h"
#include "daemon/port.h"
#include "proto/net/addr.h"

namespace snic::daemon {

class ArpPing final : public LcoreTask, public EchoListener {
public:
    // Pings `target` from `from` `count` times; sets `stop` when finished.
    ArpPing(Port& from, net::Ipv4Addr target, std::uint32_t count, std::uint64_t tsc_hz,
            std::atomic<bool>& stop);

    bool poll(std::uint64_t now) override;
    void on_echo_reply(std::uint16_t id, std::uint16_t seq, std::uint64_t now) override;

    // After the lcore stopped: whether every echo was answered, and a one-line report.
    bool passed() const;
    std::string report() const;

private:
    enum class Phase { start, resolving, pinging, done };
    void send_echo(std::uint64_t now);
    void finish();

    static constexpr std::uint16_t kEchoId = 0x736e;  // "sn"

    Port& from_;
    const net::Ipv4Addr target_;
    const std::uint32_t count_;
    const std::uint64_t tsc_hz_;
    std::atomic<bool>& stop_;

    Phase phase_ = Phase::start;
    std::string failure_;
    net::MacAddr peer_mac_{};
    std::uint64_t deadline_ = 0;  // of the current phase or echo
    std::uint64_t sent_at_ = 0;
    std::uint16_t seq_ = 0;       // of the echo in flight
    std::uint32_t sent_ = 0;
    bool in_flight_ = false;
    std::vector<std::uint64_t> rtts_;  // cycles; reserved up front
};

}  // namespace snic::daemon
