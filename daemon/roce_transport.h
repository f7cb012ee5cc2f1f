// The RoCEv2 transport of one port (daemon/transport.h's first implementation). Its lcore
// runs the RC engines (proto/roce/rc_qp.h) of the QPs of the sessions bound to the port: a
// RoceQp ties one engine to the shared glue (QpGlue: the client's rings, CQs, memory keys,
// events) and to the port (RcWire: Ethernet/IPv4/UDP framing around each transport packet,
// the ICRC). The port's UDP 4791 hook parses, checks the ICRC, checks that the packet comes
// from the QP's peer, and hands it to its QP.
//
// Setup (roce_transport.cc) runs on the control thread and reaches the lcore through
// LcoreTasks; the datapath (roce_transport_datapath.cc) runs on the lcore only.
#pragma once

#include <rte_mbuf.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/lcore_tasks.h"
#include "daemon/qp_glue.h"
#include "daemon/stats.h"
#include "daemon/transport.h"
#include "proto/net/addr.h"
#include "proto/net/rx.h"
#include "proto/roce/packet.h"
#include "proto/roce/rc_qp.h"

namespace snic::daemon {

class NameTable;
class Port;

// Counters of the transport of one port (the engines count per QP).
struct RoceCounters {
    Counter rx_packets, tx_packets;
    Counter rx_unknown_qpn;    // no QP of this port has that number
    Counter rx_bad_source;     // from an address other than the QP's peer: dropped unseen
    Counter rx_not_ipv4;       // RoCEv2 over IPv6 is not spoken yet
    Counter tx_no_mbuf;        // the pool was empty: the engine retries
    Counter tx_unresolved;     // the peer's MAC is being resolved: the engine retransmits
    Counter loopback_packets;  // sent to a QP of this very port, without the wire
    Counter loopback_full;     // the loopback queue was full: dropped, the engine retransmits
    std::array<Counter, roce::kRoceDropReasons> drops;  // by roce::Drop
};

class RoceTransport;

// The RC QP an RC QpEngine is: the glue, the engine and this QP's end of the wire. Built by
// the control thread when the QP enters RTR, attached to the lcore, detached before it goes.
class RoceQp final : public QpEngine, public roce::RcWire {
  public:
    RoceQp(RoceTransport& transport, Qp& qp, const NameTable& keys, const roce::RcConfig& config,
           net::Ipv4Addr peer);

    roce::RcQp& engine() { return engine_; }
    QpGlue& glue() { return glue_; }
    std::uint32_t qpn() const { return config_.qpn; }

    // QpEngine
    bool failed() const override { return glue_.failed(); }
    QpEngineView view() const override;
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const override;

    // RcWire
    std::span<std::uint8_t> tx_alloc(std::size_t len) override;
    void tx_send(std::size_t len) override;

  private:
    friend class RoceTransport;
    // The lcore, after each engine call: publishes a move to the error state.
    void note_state();

    RoceTransport& transport_;
    QpGlue glue_;
    const roce::RcConfig config_;
    const net::Ipv4Addr peer_;
    const std::uint16_t src_port_;  // UDP source port: flow entropy from the QP numbers
    const bool loopback_;           // the peer is this port: frames go back to its rx path
    rte_mbuf* tx_m_ = nullptr;      // the frame being filled between tx_alloc and tx_send
    std::uint64_t now_tsc_ = 0;
    roce::RcQp engine_;  // last: built from the interfaces above
};

class RoceTransport final : public Transport {
  public:
    RoceTransport(Port& port, LcoreTasks& tasks, const NameTable& keys, std::uint64_t tsc_hz);
    ~RoceTransport() override;
    RoceTransport(const RoceTransport&) = delete;
    RoceTransport& operator=(const RoceTransport&) = delete;

    Port& port() { return port_; }
    const RoceCounters& counters() const { return counters_; }

    // Transport
    std::string_view name() const override { return "roce"; }
    void run(const std::function<void()>& fn) override { tasks_.run(fn); }
    const char* check_attr(std::uint32_t mask, const shm::QpAttr& a) const override;
    Result<std::unique_ptr<QpEngine>> start(Qp& qp) override;
    void start_sending(Qp& qp) override;
    void drain(Qp& qp) override;
    void resume(Qp& qp) override;
    void to_error(Qp& qp) override;
    void stop(Qp& qp) override;
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const override;

    // --- the lcore ---
    // Runs the engines' timers and output; true when any did something.
    bool poll(std::uint64_t now_tsc) override;
    // The port's UDP 4791 hook.
    static void on_rx(void* ctx, Port& port, rte_mbuf* m, const net::RxFrame& frame,
                      std::uint64_t now_tsc);

  private:
    friend class RoceQp;
    static RoceQp& of(Qp& qp);
    std::uint64_t ns(std::uint64_t tsc) const;
    void receive(rte_mbuf* m, const net::RxFrame& frame, std::uint64_t now_tsc);

    static constexpr std::uint32_t kQpnSlots = 1u << 14;  // as many as QP number slots
    Port& port_;
    LcoreTasks& tasks_;
    const NameTable& keys_;
    const double ns_per_tsc_;
    RoceCounters counters_;
    std::unique_ptr<std::array<RoceQp*, kQpnSlots>> by_slot_;  // lcore only
    std::vector<RoceQp*> active_;                              // lcore only
    // Frames to a QP of this port, received on the next poll (not from inside an engine).
    static constexpr std::uint32_t kLoopSlots = 512;
    std::array<rte_mbuf*, kLoopSlots> loop_{};
    std::uint32_t loop_head_ = 0;
    std::uint32_t loop_count_ = 0;
};

// The RcConfig of a QP entering RTR, from its attributes and caps.
roce::RcConfig rc_config_of(const Qp& qp);

// RoCEv2's rule for Modify QP attributes: the wire is IPv4, so a destination GID must be
// IPv4-mapped (::ffff:a.b.c.d). nullptr when `a` is fine.
const char* roce_check_attr(std::uint32_t mask, const shm::QpAttr& a);

}  // namespace snic::daemon
