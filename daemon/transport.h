// The RoCEv2 transport of one port. Its lcore runs the RC engines (proto/roce/rc_qp.h) of
// the QPs of the sessions bound to the port: QpRuntime glues one engine to the client's
// rings and CQs (QpQueues), to the daemon's memory tables (QpMemory) and to the port
// (RcWire: framing Ethernet/IPv4/UDP around each transport packet and filling its ICRC).
// The port's UDP 4791 hook parses, checks the ICRC and hands each packet to its QP.
//
// Setup (transport.cc) runs on the control thread and reaches the lcore through
// LcoreTasks; the datapath (transport_datapath.cc) runs on the lcore only.
#pragma once

#include <rte_mbuf.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/lcore_tasks.h"
#include "daemon/memory_keys.h"
#include "daemon/stats.h"
#include "proto/net/addr.h"
#include "proto/net/rx.h"
#include "proto/roce/packet.h"
#include "proto/roce/rc_qp.h"

namespace snic::daemon {

class NameTable;
class Port;
struct Qp;
struct Pd;

// Counters of the transport of one port (the engines count per QP).
struct RoceCounters {
    Counter rx_packets, tx_packets;
    Counter rx_unknown_qpn;      // no QP of this port has that number
    Counter rx_not_ipv4;         // RoCEv2 over IPv6 is not spoken yet
    Counter tx_no_mbuf;          // the pool was empty: the engine retries
    Counter tx_unresolved;       // the peer's MAC is being resolved: the engine retransmits
    Counter loopback_packets;    // sent to a QP of this very port, without the wire
    Counter loopback_full;       // the loopback queue was full: dropped, the engine retransmits
    std::array<Counter, roce::kRoceDropReasons> drops;  // by roce::Drop
};

class RoceTransport;

// One QP as its lcore runs it. Created by the control thread when the QP enters RTR,
// attached to the lcore, detached before the QP goes.
class QpRuntime final : public verbs::QpMemory, public verbs::QpQueues, public roce::RcWire {
public:
    QpRuntime(RoceTransport& transport, Qp& qp, const roce::RcConfig& config,
              net::Ipv4Addr peer);

    roce::RcQp& engine() { return engine_; }
    std::uint32_t qpn() const { return config_.qpn; }

    // True once the engine is in the error state, whether it failed by itself (retries
    // exhausted, a fatal NAK sent or received, a local error) or was told to. Set by the
    // lcore, read by the control thread (query_qp, modify_qp).
    bool failed() const { return failed_.load(std::memory_order_acquire); }

    // The lcore, at RTR -> RTS: the requester starts from the RTS attributes, and from
    // now on takes WRs from the send queue (in RTR it only responds).
    void start_sending(std::uint32_t sq_psn, std::uint8_t timeout, std::uint8_t retry_cnt,
                       std::uint8_t rnr_retry, std::uint8_t max_rd_atomic);

    // QpMemory
    std::uint8_t* local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len,
                        bool write) override;
    verbs::RemoteRegion remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                              verbs::RemoteNeed need) override;
    bool invalidate(std::uint32_t rkey) override;
    verbs::WcStatus local_invalidate(std::uint32_t key) override;
    verbs::WcStatus bind_mw(const verbs::MwBind& bind) override;

    // QpQueues
    bool pop_send(verbs::SendWr& out) override;
    bool pop_recv(verbs::RecvWr& out) override;
    void complete_send(const verbs::Completion& c) override;
    void complete_recv(const verbs::Completion& c) override;

    // RcWire
    std::span<std::uint8_t> tx_alloc(std::size_t len) override;
    void tx_send(std::size_t len) override;

private:
    friend class RoceTransport;
    RoceTransport& t_;
    Qp& qp_;
    const roce::RcConfig config_;
    const net::Ipv4Addr peer_;
    const std::uint16_t src_port_;  // UDP source port: flow entropy from the QP numbers
    const bool loopback_;           // the peer is this port: frames go back to its rx path
    rte_mbuf* tx_m_ = nullptr;      // the frame being filled between tx_alloc and tx_send
    bool sending_ = false;          // in RTS (or later): the send queue is served
    std::uint64_t now_tsc_ = 0;
    std::atomic<bool> failed_{false};
    KeyUser key_user() const;
    // The lcore, after each engine call: publishes a move to the error state.
    void note_state();
    void mark_failed();
    roce::RcQp engine_;  // last: built from the interfaces above
};

class RoceTransport {
public:
    RoceTransport(Port& port, LcoreTasks& tasks, const NameTable& keys, std::uint64_t tsc_hz);
    ~RoceTransport();
    RoceTransport(const RoceTransport&) = delete;
    RoceTransport& operator=(const RoceTransport&) = delete;

    Port& port() { return port_; }
    LcoreTasks& tasks() { return tasks_; }
    const RoceCounters& counters() const { return counters_; }

    // --- control thread (each waits until the lcore has done it) ---
    // Starts running `rt` for packets to its QP number and for its send queue.
    void attach(QpRuntime* rt);
    // Stops running `rt`: afterwards the lcore no longer touches it.
    // (Frames still queued for it are dropped as an unknown QP number.)
    void detach(QpRuntime* rt);
    // Returns once no engine of this lcore can hold a pointer obtained before the call.
    void quiesce();

    // --- the lcore ---
    // Runs the engines' timers and output; true when any did something.
    bool poll(std::uint64_t now_tsc);
    // The port's UDP 4791 hook.
    static void on_rx(void* ctx, Port& port, rte_mbuf* m, const net::RxFrame& frame,
                      std::uint64_t now_tsc);

private:
    friend class QpRuntime;
    std::uint64_t ns(std::uint64_t tsc) const;
    void receive(rte_mbuf* m, const net::RxFrame& frame, std::uint64_t now_tsc);

    static constexpr std::uint32_t kQpnSlots = 1u << 14;  // as many as QP number slots
    Port& port_;
    LcoreTasks& tasks_;
    const NameTable& keys_;
    const double ns_per_tsc_;
    RoceCounters counters_;
    std::unique_ptr<std::array<QpRuntime*, kQpnSlots>> by_slot_;  // lcore only
    std::vector<QpRuntime*> active_;                                // lcore only
    // Frames to a QP of this port, received on the next poll (not from inside an engine).
    static constexpr std::uint32_t kLoopSlots = 512;
    std::array<rte_mbuf*, kLoopSlots> loop_{};
    std::uint32_t loop_head_ = 0;
    std::uint32_t loop_count_ = 0;
};

// The RcConfig of a QP entering RTR, from its attributes; nullopt (and why) when its
// destination is not an IPv4-mapped GID.
std::optional<roce::RcConfig> rc_config_of(const Qp& qp, net::Ipv4Addr* peer);

}  // namespace snic::daemon
