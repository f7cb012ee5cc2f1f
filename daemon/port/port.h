// A DPDK port serving one IPv4 address: bring-up and teardown (port.cc) and the
// datapath (port_datapath.cc): rx burst, first checks and dispatch, ARP and ICMP
// echo, buffered tx. The datapath runs on the one lcore that owns the port.
//
// A port of several queues (queues=N) is N lanes: a Port object per queue pair, each polled
// by an lcore of its own, with its own transmit buffer, ARP cache and counters. Lane 0 is the
// port as the rest of the daemon knows it (QP1, TCP and iWARP live there) and owns the others.
// A frame a lane receives that is not its own goes to its lane's inbox (a ring that lane
// empties on its poll): a RoCEv2 packet to the lane of its destination QP (claim_qpn), a TCP
// segment (or an ICMP error quoting one) to the lane whose TCP has its local port
// (claim_tcp_port), all other IPv4 for a transport to lane 0; each ARP reply is learnt by
// every lane.
#pragma once

#include <rte_mbuf.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/port/arp_cache.h"
#include "daemon/port/fault.h"
#include "daemon/port/neighbours.h"
#include "daemon/port/placed_tx.h"
#include "daemon/port/port_spec.h"
#include "daemon/port/stats.h"
#include "proto/net/addr.h"
#include "proto/net/rx.h"

struct rte_mempool;
struct rte_ring;

namespace snic::daemon {

class Port;

// The lanes of a port of several queues: each lane by queue, the lane that runs each QP (by
// the QP number's low 14 bits, which tell live QPs apart: daemon/verbs/resources.h), and the
// lane whose TCP has each local TCP port (lane 0 for a port nobody claimed). Written by the
// control thread before a QP runs or a port is listened on or connected from, read by every
// lane.
struct PortLanes {
    static constexpr std::uint32_t kQpnSlots = 1u << 14;
    static constexpr std::uint32_t kTcpPorts = 1u << 16;
    std::vector<Port*> lanes;
    std::unique_ptr<std::atomic<std::uint8_t>[]> qp_lane {
        new std::atomic<std::uint8_t>[kQpnSlots] {}
    };
    std::unique_ptr<std::atomic<std::uint8_t>[]> tcp_lane {
        new std::atomic<std::uint8_t>[kTcpPorts] {}
    };
};

// A transport's receive hook: takes ownership of the mbuf.
struct RxHook {
    void (*fn)(void* ctx, Port& port, rte_mbuf* m, const net::RxFrame& frame,
               std::uint64_t now) = nullptr;
    void* ctx = nullptr;
};

// Told of ICMP echo replies addressed to the port (the self-test's pinger).
class EchoListener {
  public:
    virtual void on_echo_reply(std::uint16_t id, std::uint16_t seq, std::uint64_t now) = 0;

  protected:
    ~EchoListener() = default;
};

// What every port of the daemon shares: the clock, the ARP lifetime and the burst sizes
// (1..kMaxBurst, port_spec.h).
struct PortSettings {
    std::uint64_t tsc_hz;
    std::uint32_t arp_timeout_s;
    std::uint16_t rx_burst = kDefaultBurst;
    std::uint16_t tx_burst = kDefaultBurst;
    std::uint32_t tx_in_place = kDefaultPlacedBytes;  // 0: every payload copied
};

// Descriptors asked for per port (the device may round them), and the packet pool for
// `ports` ports: each port's receive ring full and its transmit ring in flight, and room for
// the lcores' caches and the frames held meanwhile (ARP, loopback, reordering), at least the
// 8,191 that one or two ports have always had.
inline constexpr std::uint16_t kRxDescriptors = 1024;
inline constexpr std::uint16_t kTxDescriptors = 1024;
constexpr unsigned packet_pool_mbufs(std::size_t ports) {
    const std::size_t n = ports * (kRxDescriptors + kTxDescriptors) + 4095;
    return static_cast<unsigned>(n < 8191 ? 8191 : n);
}

// The checksum offloads a port uses, from the device's capabilities (rte_eth_dev_info's
// rx_offload_capa and tx_offload_capa) and its spec: none with offloads=off; none on
// transmit where tx faults corrupt frames, none on receive where rx faults do (a checksum
// made or judged on the other side of the flipped bit would hide it).
PortOffloads choose_offloads(std::uint64_t rx_capa, std::uint64_t tx_capa, const PortSpec& spec);
// As snicctl status carries them (shm::PortInfo::offloads, named by shm::offload_names).
std::uint32_t offload_bits(const PortOffloads& o);

class Port {
  public:
    // Configures and starts DPDK port `port_id` as `spec` says.
    static Result<std::unique_ptr<Port>> open(std::uint16_t port_id, const PortSpec& spec,
                                              rte_mempool* pool, const PortSettings& settings);
    ~Port();
    Port(const Port&) = delete;
    Port& operator=(const Port&) = delete;

    std::uint16_t id() const { return id_; }
    const std::string& name() const { return name_; }
    net::MacAddr mac() const { return mac_; }
    // The address and MTU: any thread may read them (a shared-address port's change as its
    // interface's changes, readdress()).
    net::Ipv4Prefix ip() const { return unpack_ip(addr_.load(std::memory_order_relaxed)); }
    std::uint16_t mtu() const {
        return static_cast<std::uint16_t>(addr_.load(std::memory_order_relaxed));
    }
    // The link as the device reports it now (a speed of 0: unknown). Any thread.
    struct Link {
        bool up = false;
        std::uint32_t speed_mbps = 0;
    };
    Link link() const;
    bool link_up() const { return link().up; }
    // The checksum offloads the port uses (fixed once it runs).
    const PortOffloads& offloads() const { return offloads_; }
    // The link's speed in Mb/s: as the device reports it now when the link is up, else the
    // fastest it says it supports (a link still negotiating at start); 0 when it says neither.
    std::uint32_t link_speed_mbps() const;
    // This lane's counters (PortCounters' note: for_each_port_counter sums the lanes').
    const PortCounters& counters() const { return counters_; }
    // The EAL lcore that polls the port and runs its transports (set once, before it runs).
    unsigned lcore() const { return lcore_; }
    void set_lcore(unsigned id) { lcore_ = id; }

    // --- lanes (queues=N) ---
    // The queue this lane polls and sends on (0 for the port itself).
    std::uint16_t queue() const { return queue_; }
    // Every lane of the port, this one's first when it is lane 0 (the port itself alone when
    // it has one queue).
    std::span<Port* const> lanes() const {
        return lanes_ != nullptr ? std::span<Port* const>(lanes_->lanes)
                                 : std::span<Port* const>(&self_, 1);
    }
    // Control thread: RoCEv2 packets to QP `qpn` go to this lane from now on; counted in
    // lane_qps() until release_qpn().
    void claim_qpn(std::uint32_t qpn);
    void release_qpn() { qps_.set(qps_.get() - 1); }
    // A QP whose packets find their lane otherwise (an iWARP QP, by its connection's TCP
    // port), counted in lane_qps() until release_qpn().
    void count_qp() { qps_.add(); }
    std::uint64_t lane_qps() const { return qps_.get(); }
    // Control thread: TCP segments to local port `port` (and ICMP errors quoting one from it)
    // go to this lane from now on.
    void claim_tcp_port(std::uint16_t port);
    // Any thread: the lane whose TCP has local port `port` (0 with one queue).
    std::uint16_t tcp_lane(std::uint16_t port) const {
        return lanes_ != nullptr ? lanes_->tcp_lane[port].load(std::memory_order_acquire) : 0;
    }

    void set_roce_hook(RxHook h) { roce_hook_ = h; }
    void set_tcp_hook(RxHook h) { tcp_hook_ = h; }
    // ICMP destination unreachable (the TCP stack's errors); dropped as
    // icmp_unsupported_type without one.
    void set_icmp_error_hook(RxHook h) { icmp_error_hook_ = h; }
    // Other UDP traffic (the raw-bw self-test's sink); dropped as udp_no_listener without one.
    void set_udp_hook(RxHook h) { udp_hook_ = h; }
    void set_echo_listener(EchoListener* l) { echo_listener_ = l; }
    // A shared-address port resolves its peers through the kernel's neighbour table (set
    // once, before the port runs): it sends no ARP request of its own.
    void set_neighbour_source(NeighbourSource* n) { neighbours_ = n; }

    // --- datapath: owning lcore only ---

    // Receives and handles one burst; returns the number of frames received.
    std::uint16_t poll_rx(std::uint64_t now);
    // Queues a frame for transmission (ownership passes); sent by flush_tx().
    void send(rte_mbuf* m);
    void flush_tx();
    // The MAC of an on-link peer, or nullopt while it is being resolved (a request is
    // sent, paced); callers retry later.
    std::optional<net::MacAddr> resolve(net::Ipv4Addr ip, std::uint64_t now);
    // The same for a sender that talks to one peer (a connected QP): its memo answers
    // without a lookup while the ARP cache has not changed and the entry has not expired.
    std::optional<net::MacAddr> resolve(net::Ipv4Addr ip, std::uint64_t now, MacMemo& memo) {
        if (memo_holds(memo, now)) return memo.mac;
        return resolve_memo(ip, now, memo);
    }
    // Whether a memo resolve() filled still answers for its peer.
    bool memo_holds(const MacMemo& memo, std::uint64_t now) const {
        return now < memo.until && memo.generation == arp_.generation();
    }
    // A fresh mbuf from the port's pool, or nullptr (counted as tx_dropped).
    rte_mbuf* alloc();

    // Payloads sent from where they lie (placed_tx.h): the smallest sent so, 0 when the port
    // sends none so (--tx-in-place off, or a device that takes no chained mbufs or that
    // DMAs: a PCI device would need the client's memory mapped for it).
    std::uint32_t placed_min() const { return placed_min_; }
    // A fresh mbuf attached to [data, data + len), counted in `hold` (PlacedTx::attach), or
    // nullptr when none can be (the caller copies the payload instead). For payloads of
    // placed_min() bytes or more.
    rte_mbuf* alloc_placed(const std::uint8_t* data, std::uint16_t len, roce::TxHold* hold);
    bool placed_settled(roce::TxHold& hold) { return placed_->settled(hold); }
    void placed_forget(roce::TxHold& hold) { placed_->forget(hold); }
    // Takes a frame this port sent to itself (a transport's loopback) as if received.
    void receive_local(rte_mbuf* m, std::uint64_t now) { handle(m, now); }
    // A new address and MTU (a shared-address port whose interface changed): what the port
    // answers and sends from here on; run as one of the lcore's tasks.
    void readdress(net::Ipv4Prefix ip, std::uint16_t mtu);

  private:
    std::optional<net::MacAddr> resolve_memo(net::Ipv4Addr ip, std::uint64_t now, MacMemo& memo);
    Port(std::uint16_t id, std::uint16_t queue, std::string name, const PortSpec& spec,
         net::MacAddr mac, std::uint16_t mtu, rte_mempool* pool, const PortSettings& settings);
    // Lanes 1..queues-1 and their inboxes, once the device runs (lane 0 is this).
    Status add_lanes(const PortSpec& spec, const PortSettings& settings);

    // `forwarded`: the frame came from another lane's inbox (counted there as received; it
    // is handled here whatever the lanes say now, so that it never goes round).
    void handle(rte_mbuf* m, std::uint64_t now, bool forwarded = false);
    // A frame in several segments: taken only as a RoCEv2 packet in the pieces a sender's
    // placed payload arrives in over a wire that hands its mbufs on.
    void handle_split(rte_mbuf* m, std::uint64_t now, bool forwarded);
    void drop(rte_mbuf* m, net::Drop why);
    // The lane a RoCEv2 packet (frame `f` at `data`) goes to: its destination QP's (QP1's is
    // lane 0), this one when too short to say.
    std::uint16_t roce_lane(const std::uint8_t* data, const net::RxFrame& f) const;
    // The lane of the TCP connection an ICMP error (frame `f` at `data`) quotes a segment of:
    // its source port's; lane 0 when it quotes none that can be read.
    std::uint16_t icmp_lane(const std::uint8_t* data, const net::RxFrame& f) const;
    // Hands `m` to lane `to`'s inbox (dropped as lane_full when it is full).
    void forward(rte_mbuf* m, std::uint16_t to);
    // A copy of an ARP reply to every other lane, which learns from it.
    void share_arp(const rte_mbuf* m);
    // Handles what other lanes left in the inbox; returns how many frames.
    std::uint16_t poll_inbox(std::uint64_t now);

    // One direction's injected faults: the injector, the frame it holds back to
    // reorder, and that direction's counters.
    struct FaultPath {
        FaultInjector injector;
        rte_mbuf* held = nullptr;
        bool held_new = false;  // held during the current call: goes out behind a later frame
        Counter* dropped;
        Counter* duplicated;
        Counter* reordered;
        Counter* corrupted;
    };
    // Applies a direction's faults to frames in[0..n) writing what goes on to out
    // (room for 2n + 1); returns how many.
    std::uint16_t inject(FaultPath& path, rte_mbuf* const* in, std::uint16_t n, rte_mbuf** out);

    const std::uint16_t id_;
    const std::uint16_t queue_;
    const std::string name_;
    unsigned lcore_ = 0;
    // The address, its prefix length and the MTU in one word: bits 63..32, 23..16, 15..0.
    static std::uint64_t pack(net::Ipv4Prefix ip, std::uint16_t mtu) {
        return std::uint64_t{ip.addr.value} << 32 | std::uint64_t{ip.length} << 16 | mtu;
    }
    static net::Ipv4Prefix unpack_ip(std::uint64_t word) {
        return {net::Ipv4Addr{static_cast<std::uint32_t>(word >> 32)},
                static_cast<std::uint8_t>(word >> 16)};
    }

    const net::MacAddr mac_;
    std::atomic<std::uint64_t> addr_;
    net::LocalIf local_;  // the owning lcore's copy of the MAC and address, for classify()
    rte_mempool* const pool_;
    const std::uint16_t rx_burst_;  // 1..kMaxBurst
    const std::uint16_t tx_burst_;
    bool started_ = false;

    ArpCache arp_;
    PortCounters counters_;
    RxHook roce_hook_;
    RxHook tcp_hook_;
    RxHook udp_hook_;
    RxHook icmp_error_hook_;
    EchoListener* echo_listener_ = nullptr;
    NeighbourSource* neighbours_ = nullptr;

    FaultPath rx_fault_;
    FaultPath tx_fault_;
    // delay=: received frames held until their time (none without it).
    std::unique_ptr<DelayLine<rte_mbuf*>> rx_delay_;
    std::uint16_t delay_rx(rte_mbuf** pkts, std::uint16_t n, std::uint16_t room, std::uint64_t now);

    std::uint16_t tx_count_ = 0;
    rte_mbuf* tx_[kMaxBurst];

    PortOffloads offloads_;
    std::unique_ptr<PlacedTx> placed_;  // none: every payload is copied
    std::uint32_t placed_min_ = 0;      // set with placed_

    // Lanes, last: the datapath's members above keep their places (and cache lines).
    rte_ring* inbox_ = nullptr;                    // this lane's, with lanes
    PortLanes* lanes_ = nullptr;                   // shared by the lanes; nullptr with one queue
    Port* const self_ = this;                      // lanes() of a port of one queue
    std::unique_ptr<PortLanes> owned_lanes_;       // lane 0's
    std::vector<std::unique_ptr<Port>> siblings_;  // lane 0's: lanes 1..N-1
    Counter qps_;                                  // QPs claimed (control thread)
};

// Calls f(name, value) for every counter of the port, its lanes' summed (for_each_counter's
// names and order). Telemetry and the exit report only: it allocates.
template <typename F>
void for_each_port_counter(const Port& port, F&& f) {
    CounterSum sum;
    for (const Port* lane : port.lanes()) {
        sum.next();
        for_each_counter(lane->counters(),
                         [&sum](std::string_view name, std::uint64_t v) { sum.add(name, v); });
    }
    sum.for_each(f);
}

}  // namespace snic::daemon
