// Built-in self-tests that run on a data lcore, from the first port to the second:
//
//   Pinger (arp-ping, raw-ping): resolves the peer's MAC by ARP and measures round trips
//   of a message of `size` bytes sent as ICMP echo requests, one frame per MTU, each
//   payload copied from a message buffer, answered by the peer port's ordinary receive
//   path (which checks the ICMP checksum, as the sender's port does the reply's). Over the virtual
//   wire this is the floor under an RDMA round trip on the same ports. Streamer (raw-bw): sends
//   `count` messages of `size` bytes as UDP frames, each payload copied from a message buffer, as
//   fast as the wire takes them (never more in flight than the wire holds); the peer port copies
//   each payload into its place in a message buffer of its own and counts it. The data moves as a
//   NIC must move it, without a protocol around it: the floor under RDMA bandwidth.
//
// Both send at most one burst per turn of the lcore, so that the frames a device refuses
// (Port::flush_tx frees them and counts tx_dropped) are the tail of the last turn's burst;
// they are sent again, never counted as delivered.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/lcore/lcore.h"
#include "daemon/port/port.h"
#include "proto/net/addr.h"

namespace snic::daemon {

// Frames a port's device refused since the last look: the growth of its tx_dropped counter,
// less the empty-pool allocations the caller reported (Port::alloc counts those there too).
class TxRefusals {
  public:
    explicit TxRefusals(const Port& port) : port_(port), seen_(port.counters().tx_dropped.get()) {}
    void alloc_failed() { ++alloc_failures_; }
    std::uint64_t take() {
        const std::uint64_t now = port_.counters().tx_dropped.get();
        const std::uint64_t refused = now - seen_ - alloc_failures_;
        seen_ = now;
        alloc_failures_ = 0;
        return refused;
    }

  private:
    const Port& port_;
    std::uint64_t seen_;
    std::uint64_t alloc_failures_ = 0;
};

class Selftest : public LcorePoller {
  public:
    virtual ~Selftest() = default;
    // After the lcore stopped: whether the test passed, and its one-line report.
    virtual bool passed() const = 0;
    virtual std::string report() const = 0;
};

// Messages of `size` bytes become frames of at most this many payload bytes each.
std::uint32_t icmp_payload_per_frame(std::uint16_t mtu);

class Pinger final : public Selftest, public EchoListener {
  public:
    Pinger(const SelftestSpec& spec, Port& from, Port& to, std::uint64_t tsc_hz,
           std::atomic<bool>& stop);
    ~Pinger() override;

    bool poll(std::uint64_t now) override;
    void on_echo_reply(std::uint16_t id, std::uint16_t seq, std::uint64_t now) override;
    bool passed() const override;
    std::string report() const override;

  private:
    enum class Phase { resolving, pinging, done };
    bool send_frame();
    // Sends the round's next frames, one burst at most; whether any went.
    bool send_burst();
    void start_round(std::uint64_t now);
    void finish();

    static constexpr std::uint16_t kEchoId = 0x736e;    // "sn"
    static constexpr std::uint32_t kMaxInFlight = 256;  // frames of one round on the wire

    const SelftestSpec spec_;
    Port& from_;
    const net::Ipv4Addr target_;
    const std::uint64_t tsc_hz_;
    std::atomic<bool>& stop_;
    const std::uint32_t size_;
    const std::uint32_t per_frame_;
    const std::uint32_t frames_;  // per round

    Phase phase_ = Phase::resolving;
    std::string failure_;
    net::MacAddr peer_mac_{};
    std::uint64_t deadline_ = 0;  // of resolving or of the current round; 0 before either
    std::uint64_t round_start_ = 0;
    std::uint16_t base_seq_ = 0;  // of the round's first frame
    std::uint32_t sent_ = 0;      // frames of this round sent
    std::uint32_t got_ = 0;       // and answered
    std::uint32_t rounds_ = 0;    // started, warm-up included
    std::uint32_t lost_ = 0;
    std::uint32_t last_burst_ = 0;  // frames sent in the last turn
    std::uint64_t resent_ = 0;      // frames the device refused, sent again
    TxRefusals refused_;
    bool in_round_ = false;
    std::vector<std::uint8_t> message_;      // the message, sent slice by slice
    std::vector<std::uint32_t> slice_sums_;  // each slice's share of its frame's ICMP checksum
    std::vector<std::uint64_t> rtts_;        // cycles of the measured rounds; reserved up front
};

class Streamer final : public Selftest {
  public:
    Streamer(const SelftestSpec& spec, Port& from, Port& to, std::uint64_t tsc_hz,
             std::atomic<bool>& stop);
    ~Streamer() override;

    bool poll(std::uint64_t now) override;
    bool passed() const override;
    std::string report() const override;

  private:
    enum class Phase { resolving, streaming, done };
    void finish();
    // The peer port's receive hook for the stream's frames.
    static void on_rx(void* ctx, Port& port, rte_mbuf* m, const net::RxFrame& frame,
                      std::uint64_t now);

    static constexpr std::uint32_t kMaxInFlight = 1024;  // frames sent but not yet received
    static constexpr std::uint16_t kDiscardPort = 9;

    const SelftestSpec spec_;
    Port& from_;
    Port& to_;
    const std::uint64_t tsc_hz_;
    std::atomic<bool>& stop_;
    const std::uint32_t size_;
    const std::uint32_t per_frame_;
    const std::uint32_t frames_per_msg_;
    const std::uint64_t total_frames_;

    Phase phase_ = Phase::resolving;
    std::string failure_;
    net::MacAddr peer_mac_{};
    std::uint64_t deadline_ = 0;
    std::uint64_t received_ = 0;    // frames
    std::uint64_t rx_msg_off_ = 0;  // where the next received payload goes in sink_
    std::uint64_t sent_ = 0;        // frames; frame i is frame i % frames_per_msg_ of a message
    std::uint32_t last_burst_ = 0;  // frames sent in the last turn
    std::uint64_t resent_ = 0;      // frames the device refused, sent again
    TxRefusals refused_;
    std::uint64_t start_ = 0, end_ = 0;
    std::uint64_t last_progress_ = 0;
    std::uint64_t seen_ = 0;
    std::vector<std::uint8_t> source_;  // the sender's message buffer
    std::vector<std::uint8_t> sink_;    // the receiver's
};

// The self-test `spec` names, between ports `from` and `to`.
std::unique_ptr<Selftest> make_selftest(const SelftestSpec& spec, Port& from, Port& to,
                                        std::uint64_t tsc_hz, std::atomic<bool>& stop);

}  // namespace snic::daemon
