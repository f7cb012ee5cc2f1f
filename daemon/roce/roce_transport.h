// The RoCEv2 transport of one port (daemon/verbs/transport.h's first implementation). Its lcore
// runs the RC engines (proto/roce/rc_qp.h) of the QPs of the sessions bound to the port: a
// RoceQp ties one engine to the shared glue (QpGlue: the client's rings, CQs, memory keys,
// events) and to the port (RcWire: Ethernet/IPv4/UDP framing around each transport packet,
// the ICRC). The port's UDP 4791 hook parses, checks the ICRC, checks that the packet comes
// from the QP's peer, and hands it to its QP.
//
// The lcore runs a QP's engine only when the QP has work (daemon/lcore/qp_sched.h): a packet, a
// doorbell of its client, output left from its last poll, a deadline, or the grace period
// after it was last busy; the send WRs an engine holds take slots from the transport's pool.
//
// Setup (roce_transport.cc) runs on the control thread and reaches the lcore through
// LcoreTasks; the datapath (roce_transport_datapath.cc) runs on the lcore only.
#pragma once

#include <rte_mbuf.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "daemon/lcore/lcore_tasks.h"
#include "daemon/port/arp_cache.h"
#include "daemon/port/stats.h"
#include "daemon/verbs/qp_glue.h"
#include "daemon/verbs/qp_runner.h"
#include "daemon/verbs/transport.h"
#include "proto/net/addr.h"
#include "proto/net/rx.h"
#include "proto/roce/icrc.h"
#include "proto/roce/packet.h"
#include "proto/roce/rc_qp.h"
#include "proto/roce/ud_qp.h"

namespace snic::daemon {

class NameTable;
class Port;

// Counters of the transport of one port (the engines count per QP).
struct RoceCounters {
    Counter rx_packets, tx_packets;
    Counter rx_unknown_qpn;     // no QP of this port has that number
    Counter rx_bad_source;      // from an address other than the QP's peer: dropped unseen
    Counter rx_not_ipv4;        // RoCEv2 over IPv6 is not spoken yet
    Counter tx_no_mbuf;         // the pool was empty: the engine retries
    Counter tx_unresolved;      // the peer's MAC is being resolved: the engine retransmits
    Counter tx_uc_held;         // a UC QP held its packet: its peer's MAC is not known yet
    Counter loopback_packets;   // sent to a QP of this very port, without the wire
    Counter loopback_full;      // the loopback queue was full: dropped, the engine retransmits
    Counter turns;              // polls of the transport: turns of its lcore's loop
    Counter rx_gsi;             // to QP1, handed to the GSI hook
    Counter rx_gsi_no_hook;     // to QP1 while no GSI hook is set: dropped
    Counter rx_gsi_bad_opcode;  // to QP1 but not UD SEND ONLY: dropped
    Counter tx_gsi;             // sent from QP1 (send_gsi)
    Counter tx_placed;          // packets whose payload went from where it lies
    Counter rx_split;           // packets that came in pieces (a sender's placed payload)
    // The QPs that stopped here, their engines' counts of packets out of their order
    // (out_of_sequence, duplicate_requests, seq_naks_sent) and of retransmitted requests: a
    // QP's own counters go with it.
    Counter qps_out_of_sequence, qps_duplicate_requests, qps_seq_naks_sent, qps_retransmits;
    std::array<Counter, roce::kRoceDropReasons> drops;  // by roce::Drop
};

class RoceTransport;

// QP1's receive hook (the General Service Interface: the CM's MADs). Called on the lcore with
// each UD SEND ONLY packet to QP1 whose ICRC verified: the sender's IPv4 address (host order),
// the DETH's source QP and Q_Key (unchecked: the hook checks kGsiQkey itself) and the payload,
// valid for the call only.
using GsiReceiveFn = void (*)(void* ctx, std::uint32_t src_ip, std::uint32_t src_qpn,
                              std::uint32_t qkey, std::span<const std::uint8_t> payload);

// The UDP source port of a QP's packets to `dest_qpn`: flow entropy (ECMP) from 0xC000 up, one
// per QP pair so that each conversation stays on one path.
std::uint16_t roce_source_port(std::uint32_t qpn, std::uint32_t dest_qpn);

// What the transport's table holds of a running QP, RC or UD: the glue, the QP's number and
// doorbells, and the frame it is filling. Built by the control thread when the QP enters RTR,
// attached to the lcore, detached before it goes.
class RoceQpBase : public RunningQp {
  public:
    RoceQpBase(RoceTransport& transport, Qp& qp, const NameTable& keys, std::uint32_t qpn);
    ~RoceQpBase() override;

    // --- the lcore ---
    // A packet for this QP number (parsed, ICRC verified; `frame` is the whole frame).
    virtual void on_packet(const roce::Packet& pkt, const net::RxFrame& f,
                           const std::uint8_t* frame, std::uint64_t now_tsc) = 0;
    // RTR -> RTS with the QP's attributes.
    virtual void start_sending(const shm::QpAttr& a) = 0;
    // Modify QP to ERR.
    virtual void to_error() = 0;
    // Modify QP changed attributes of a running QP (`mask` names them).
    virtual void modified(std::uint32_t mask, const shm::QpAttr& a) = 0;
    virtual std::uint32_t send_wrs_held() const = 0;

  protected:
    friend class RoceTransport;
    // Room for a transport packet of `len` bytes (+ ICRC) after the frame headers, in tx_m_.
    std::span<std::uint8_t> alloc_packet(std::size_t len);

    RoceTransport& transport_;
    rte_mbuf* tx_m_ = nullptr;  // the frame being filled between tx_alloc and tx_send
    // The ICRC of the peer's packets, learnt from one of them checked in full: a connected
    // QP's; a UD QP, whose packets come from anywhere, learns from no one.
    roce::IcrcRxFlow rx_flow_;
};

// The RC or UC QP a connected QpEngine is: the glue, the engine and this QP's end of the wire.
class RoceQp final : public RoceQpBase, public roce::RcWire {
  public:
    RoceQp(RoceTransport& transport, Qp& qp, const NameTable& keys, const roce::RcConfig& config,
           net::Ipv4Addr peer, roce::SendSlotPool& slots);

    roce::RcQp& engine() { return engine_; }

    // QpEngine
    QpEngineView view() const override;
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const override;

    // RcWire
    std::span<std::uint8_t> tx_alloc(std::size_t len) override {
        if (!peer_known_ && !await_peer()) return {};
        return alloc_packet(len);
    }
    void tx_send(std::size_t len, std::size_t hdr, std::span<const roce::TxPiece> payload) override;
    void tx_send_placed(std::size_t len, std::size_t hdr, roce::TxPiece payload,
                        roce::TxHold* hold) override;
    bool tx_settled(roce::TxHold& hold) override;
    void tx_forget(roce::TxHold& hold) override;

    // Schedulable
    bool sched_poll(std::uint64_t now_ns) override;
    std::uint64_t sched_deadline() const override { return engine_.next_deadline(); }

    // How long a UC QP holds its packets while its peer's MAC is unknown (as a UD send waits):
    // UC does not retransmit, so a packet sent into an unresolved neighbour would be lost.
    static constexpr std::uint64_t kResolveWaitNs = roce::UdQp::kResolveWaitNs;
    static constexpr std::uint64_t kNever = ~std::uint64_t{0};

    // RoceQpBase
    void on_packet(const roce::Packet& pkt, const net::RxFrame& f, const std::uint8_t* frame,
                   std::uint64_t now_tsc) override;
    void start_sending(const shm::QpAttr& a) override;
    void to_error() override;
    void modified(std::uint32_t, const shm::QpAttr&) override {}
    std::uint32_t send_wrs_held() const override { return engine_.send_wrs_held(); }

  private:
    friend class RoceTransport;
    // The lcore, after each engine call: publishes a move to the error state.
    void note_state();
    // UC, until the peer's MAC is first known: true when packets may go (the MAC is known, or
    // kResolveWaitNs went by: then they go, and are lost as on a wire, until it is); false
    // holds them in the engine, which tries again on its next poll.
    bool await_peer();

    const roce::RcConfig config_;
    const net::Ipv4Addr peer_;
    const std::uint16_t src_port_;  // UDP source port: flow entropy from the QP numbers
    const bool loopback_;           // the peer is this port: frames go back to its rx path
    bool peer_known_;               // RC, loopback, or a UC QP whose peer's MAC was known once
    std::uint64_t await_since_;     // UC: since when it waits for the peer's MAC (ns), or never
    const roce::FlowFrame flow_;    // the headers of this QP's frames, prepared once
    MacMemo mac_memo_;              // the peer's MAC, as long as the port's ARP cache says so
    roce::RcQp engine_;             // last: built from the interfaces above
};

// The UD QP a UD QpEngine is: the glue, the engine (proto/roce/ud_qp.h) and its end of the
// wire, which sends each packet to its own destination. It takes packets from any source.
class RoceUdQp final : public RoceQpBase, public roce::UdWire {
  public:
    RoceUdQp(RoceTransport& transport, Qp& qp, const NameTable& keys, const roce::UdConfig& config);

    // QpEngine
    QpEngineView view() const override;
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const override;

    // UdWire
    std::span<std::uint8_t> tx_alloc(std::size_t len) override { return alloc_packet(len); }
    bool tx_send(std::size_t len, net::Ipv4Addr dst, std::uint32_t dst_qpn) override;

    // Schedulable
    bool sched_poll(std::uint64_t now_ns) override;
    std::uint64_t sched_deadline() const override { return engine_.next_deadline(); }

    // RoceQpBase
    void on_packet(const roce::Packet& pkt, const net::RxFrame& f, const std::uint8_t* frame,
                   std::uint64_t now_tsc) override;
    void start_sending(const shm::QpAttr& a) override;
    void to_error() override;
    void modified(std::uint32_t mask, const shm::QpAttr& a) override;
    std::uint32_t send_wrs_held() const override { return engine_.send_wrs_held(); }

  private:
    roce::UdQp engine_;
};

class RoceTransport final : public Transport {
  public:
    RoceTransport(Port& port, LcoreTasks& tasks, const NameTable& keys, std::uint64_t tsc_hz);
    ~RoceTransport() override;
    RoceTransport(const RoceTransport&) = delete;
    RoceTransport& operator=(const RoceTransport&) = delete;

    Port& port() { return port_; }
    const RoceCounters& counters() const { return counters_; }
    const SchedCounters& sched_counters() const { return runner_.sched_counters(); }

    // Transport
    std::string_view name() const override { return "roce"; }
    void run(const std::function<void()>& fn) override { tasks_.run(fn); }
    const char* check_attr(std::uint32_t mask, const shm::QpAttr& a) const override;
    Result<std::unique_ptr<QpEngine>> start(Qp& qp) override;
    void start_sending(Qp& qp) override;
    void drain(Qp& qp) override;
    void resume(Qp& qp) override;
    void to_error(Qp& qp) override;
    void modified(Qp& qp, std::uint32_t mask) override;
    void stop(std::span<Qp* const> qps) override;
    void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const override;

    // --- the lcore ---
    // Frames looped back last turn, the doorbells of its clients, then the QPs with work
    // (QpRunner::poll); true when any of it did something.
    bool poll(std::uint64_t now_tsc) override;
    // QP1, the General Service Interface. Packets to QP1 go to the hook; without one they are
    // counted (rx_gsi_no_hook) and dropped. Set on the control thread before the port runs.
    void set_gsi_hook(GsiReceiveFn fn, void* ctx);
    // The lcore only: one UD SEND ONLY from QP1 (DETH source QP 1, P_Key 0xffff) to `dst_ip`'s
    // (host order) QP `dst_qpn`; false if not sent (no mbuf, the MAC not resolved yet: a
    // request is on its way, or the payload larger than the port's MTU allows).
    bool send_gsi(std::uint32_t dst_ip, std::uint32_t dst_qpn, std::uint32_t qkey,
                  std::span<const std::uint8_t> payload);

    // The port's UDP 4791 hook.
    static void on_rx(void* ctx, Port& port, rte_mbuf* m, const net::RxFrame& frame,
                      std::uint64_t now_tsc);

    // How long a QP that did something stays on the ready list, its send queue watched by the
    // lcore (no doorbell needed): longer than a round trip of a ping-pong and than a client's
    // turn between a completion and its next post, short enough that QPs touched now and then
    // are soon asleep.
    static constexpr std::uint64_t kGraceNs = 200'000;
    // Send slot chunks per port (kSlotChunk slots each): the send WRs its QPs hold at once.
    static constexpr std::uint32_t kSlotChunks = 256;

  private:
    friend class RoceQpBase;
    friend class RoceQp;
    friend class RoceUdQp;
    static RoceQpBase& of(Qp& qp);
    std::uint64_t ns(std::uint64_t tsc) const { return runner_.ns(tsc); }
    void receive(rte_mbuf* m, const net::RxFrame& frame, std::uint64_t now_tsc);
    // receive() of a packet in segments (named apart: profile.sh's callgrind collects from
    // receive* down, and a nested match would stop it).
    void on_split(rte_mbuf* m, const net::RxFrame& frame, std::uint64_t now_tsc);
    RoceQpBase* qp_for(std::uint32_t qpn);
    std::optional<roce::IcrcStart> icrc_start(const RoceQpBase* rt,
                                              std::span<const std::uint8_t> l3, bool& of_flow);
    void deliver(rte_mbuf* m, const roce::Packet& pkt, const net::RxFrame& f, std::uint32_t qpn,
                 RoceQpBase* rt, std::uint64_t now_tsc);
    // A packet to QP1: to the GSI hook. Frees m.
    void receive_gsi(rte_mbuf* m, const roce::Packet& pkt, net::Ipv4Addr src);
    // Frames the transport packet at [kUdpFrameOverhead, + packet_len) of `m` (its ICRC's place
    // last) towards `dst` and sends it, or loops it back when `dst` is this port. False, with
    // `m` freed and counted, when the peer's MAC is not resolved yet. Takes `m` in every case.
    bool transmit(rte_mbuf* m, std::size_t packet_len, net::Ipv4Addr dst, std::uint16_t src_port);
    // The same for a connected QP's packet, framed by its prepared headers, whose first `hdr`
    // bytes only are in place: the payload is copied in as the ICRC is folded over it
    // (FlowFrame::frame_gather). `memo`: the QP's memo of its peer's MAC.
    bool transmit(rte_mbuf* m, std::size_t packet_len, net::Ipv4Addr dst, MacMemo& memo,
                  const roce::FlowFrame& flow, std::size_t hdr,
                  std::span<const roce::TxPiece> payload);
    // The same for a payload in one piece large enough to be sent from where it lies
    // (Port::placed_min): `m` holds the headers, an mbuf attached to the payload follows,
    // then one with the ICRC; copied as above when it has a pad or no mbuf can be attached.
    bool transmit_placed(rte_mbuf* m, std::size_t packet_len, net::Ipv4Addr dst, MacMemo& memo,
                         const roce::FlowFrame& flow, std::size_t hdr, roce::TxPiece payload,
                         roce::TxHold* hold);
    // What they do around the framing: `frame(out, mac)` writes the frame's first segment and
    // returns its length; `rest` (or nullptr) is chained behind it.
    template <typename FrameFn>
    bool transmit_framed(rte_mbuf* m, net::Ipv4Addr dst, MacMemo* memo, FrameFn&& frame,
                         rte_mbuf* rest = nullptr);

    Port& port_;
    LcoreTasks& tasks_;
    const NameTable& keys_;
    RoceCounters counters_;
    QpRunner runner_;
    roce::SendSlotPool slots_;   // lcore only
    std::uint64_t now_tsc_ = 0;  // lcore: this turn's time, for the engines' wire
    // Frames to a QP of this port, received on the next poll (not from inside an engine).
    static constexpr std::uint32_t kLoopSlots = 512;
    std::array<rte_mbuf*, kLoopSlots> loop_{};
    std::uint32_t loop_head_ = 0;
    std::uint32_t loop_count_ = 0;
    GsiReceiveFn gsi_fn_ = nullptr;  // set before the port runs, read by the lcore
    void* gsi_ctx_ = nullptr;
    std::uint32_t gsi_psn_ = 0;  // lcore: the PSN of QP1's next packet
};

// The RcConfig of a QP entering RTR, from its attributes and caps.
roce::RcConfig rc_config_of(const Qp& qp);
// The UdConfig of a UD QP entering RTR on a port of IP MTU `ip_mtu`.
roce::UdConfig ud_config_of(const Qp& qp, std::uint32_t ip_mtu);

// RoCEv2's rule for Modify QP attributes: the wire is IPv4, so a destination GID must be
// IPv4-mapped (::ffff:a.b.c.d). nullptr when `a` is fine.
const char* roce_check_attr(std::uint32_t mask, const shm::QpAttr& a);

}  // namespace snic::daemon
