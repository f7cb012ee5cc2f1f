// The ports' QP1 between the lcore and the control thread. IB CM runs on the control thread
// (daemon/cm_service), next to the sessions whose ids it serves; QP1's packets arrive and
// leave on the port's lcore. A GsiPort is the bridge of one port: two single-producer,
// single-consumer rings of MADs, one each way, and an eventfd that wakes the control thread
// when the inbound ring turns non-empty. Only CM traffic crosses it, never data, so the one
// write(2) an inbound MAD may cost the lcore is not on the datapath.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/counter.h"
#include "daemon/lcore/lcore.h"
#include "daemon/lcore/spsc_queue.h"
#include "shm/wqe.h"

namespace snic::daemon {

// One MAD with its UD addressing.
struct GsiMad {
    std::uint32_t ip;   // the peer's IPv4, host order
    std::uint32_t qpn;  // the peer's QP (1 for its GSI)
    std::uint32_t qkey;
    std::uint16_t length;
    std::uint16_t reserved;
    std::array<std::uint8_t, 256> data;
};

// QP1's MADs each way.
using MadQueue = SpscQueue<GsiMad, 256>;

struct GsiCounters {
    Counter rx_mads;     // handed to the control thread
    Counter rx_dropped;  // the inbound queue was full, or the MAD was no MAD's size
    Counter tx_mads;     // sent on the wire
    Counter tx_unsent;   // the wire would not take it within kHoldSeconds (peer unresolved)
    Counter tx_dropped;  // the outbound queue was full (control thread side)
};

class GsiPort final : public LcorePoller {
  public:
    // Sends one UD packet from QP1 on the port's lcore; false when it was not sent.
    using SendFn = bool (*)(void* ctx, std::uint32_t ip, std::uint32_t qpn, std::uint32_t qkey,
                            std::span<const std::uint8_t> payload);

    // `tsc_hz`: the rate of poll()'s `now`.
    GsiPort(SendFn send, void* ctx, std::uint64_t tsc_hz);
    ~GsiPort();
    GsiPort(const GsiPort&) = delete;
    GsiPort& operator=(const GsiPort&) = delete;

    // The lcore: a packet for QP1 (the transport's GSI hook).
    void receive(std::uint32_t ip, std::uint32_t qpn, std::uint32_t qkey,
                 std::span<const std::uint8_t> payload);
    // The lcore: sends what the control thread queued.
    bool poll(std::uint64_t now) override;

    // The control thread: queues a MAD to send (false: the queue is full), takes a received one.
    bool send(const GsiMad& m);
    bool take(GsiMad& out) { return in_.pop(out); }
    // Readable when MADs wait in the inbound queue; read() it empty before taking them.
    int fd() const { return wakeup_.fd(); }
    void clear_wakeup() { wakeup_.clear(); }

    const GsiCounters& counters() const { return counters_; }
    template <typename F>
    void for_each_counter(F&& f) const {
        f("gsi_rx_mads", counters_.rx_mads.get());
        f("gsi_rx_dropped", counters_.rx_dropped.get());
        f("gsi_tx_mads", counters_.tx_mads.get());
        f("gsi_tx_unsent", counters_.tx_unsent.get());
        f("gsi_tx_dropped", counters_.tx_dropped.get());
    }

    // A MAD the wire would not take yet (the peer's MAC being resolved) is held and tried
    // again for this long, so that a connection's first REQ is not lost to ARP; every
    // kRetrySeconds, not on every poll (each try of an unresolved peer costs a lookup and
    // counts as unresolved).
    static constexpr double kHoldSeconds = 0.5;
    static constexpr double kRetrySeconds = 0.001;
    // MADs held at once. They are held aside, per peer in order, and the MADs of other peers
    // go on past them: connects to an address nothing answers no longer hold up every other
    // peer's MADs behind theirs. A MAD past the bound gives the oldest held one up (counted
    // unsent; the CM retransmits).
    static constexpr std::size_t kHeld = 32;

  private:
    struct Held {
        GsiMad mad;
        std::uint64_t until;
    };
    // Tries the held MADs, oldest first, a peer's in order; drops those held too long.
    bool retry_held(std::uint64_t now);
    void hold(const GsiMad& m, std::uint64_t now);
    bool holds_for(std::uint32_t ip) const;

    SendFn send_;
    void* ctx_;
    std::uint64_t hold_tsc_;
    std::uint64_t retry_tsc_;
    std::array<Held, kHeld> held_{};
    std::size_t held_head_ = 0, held_count_ = 0;
    std::uint64_t next_retry_ = 0;
    GsiMad next_{};
    Wakeup wakeup_;
    MadQueue in_;
    MadQueue out_;
    GsiCounters counters_;
};

}  // namespace snic::daemon
