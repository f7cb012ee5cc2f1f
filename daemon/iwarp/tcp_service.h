// The daemon's TCP on one port: a TcpStack (daemon/iwarp/tcp_stack.h) on the port's lcore, fed by
// the port's TCP hook and ICMP-error hook, sending through the port's ARP cache and tx path
// (IPv4 with DF, Ethernet). A frame to a peer whose MAC is being resolved waits (a few, for
// a second at most) and goes when the reply comes, as a kernel's neighbour queue holds it,
// so that the first SYN to a new peer is not lost to ARP.
//
// Setup and the control thread's views in tcp_service.cc; the hooks and framing run on the
// lcore only (no allocation but mbufs, no syscalls, locks or logs).
#pragma once

#include <rte_mbuf.h>

struct rte_ring;

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "daemon/iwarp/tcp_stack.h"
#include "daemon/lcore/lcore.h"
#include "daemon/lcore/lcore_tasks.h"
#include "daemon/port/port.h"
#include "shm/control_abi.h"

namespace snic::daemon {

struct TcpServiceCounters {
    Counter tx_segments;     // segments framed and queued on the port
    Counter tx_no_mbuf;      // the pool was empty: the engine tries again
    Counter tx_arp_wait;     // frames held while the peer's MAC was resolved
    Counter tx_unresolved;   // frames dropped: no MAC within a second, or the hold was full
    Counter rx_segments;     // TCP frames from the port
    Counter icmp_in;         // ICMP destination unreachable frames from the port
    Counter icmp_malformed;  // quoting no IPv4/TCP header we can read
    Counter loopback;        // segments to the port's own address, received on the next poll
    Counter loopback_full;   // ... dropped: the loop queue was full (the engine retransmits)
    Counter rx_own_source;   // from the wire with the port's own address as source: dropped
};

// A port of several queues has a TcpService per lane (port.h), each with the connections and
// listeners of the local TCP ports its lane claimed (Port::claim_tcp_port). A segment of the
// port to its own address goes to the service of the lane that has its destination port.
class TcpService final : public LcorePoller, public TcpLink {
  public:
    TcpService(Port& port, LcoreTasks& tasks, const TcpStackConfig& config, std::uint64_t tsc_hz);
    ~TcpService();
    TcpService(const TcpService&) = delete;
    TcpService& operator=(const TcpService&) = delete;

    // The lcore only (the self-tests, the iWARP layer).
    TcpStack& stack() { return stack_; }
    const TcpStack& stack() const { return stack_; }
    Port& port() { return port_; }
    std::uint64_t now_ns(std::uint64_t tsc) const;

    // LcorePoller: held frames whose MAC came, then the connections due.
    bool poll(std::uint64_t now_tsc) override;
    // Setup, before the lcores run: the services of every lane of the port, by queue (this
    // one's among them). 0, or an errno when the ring other lanes loop segments into cannot
    // be made.
    int set_lanes(std::span<TcpService* const> lanes);

    // The port's hooks.
    static void on_tcp(void* ctx, Port& port, rte_mbuf* m, const net::RxFrame& f,
                       std::uint64_t now);
    static void on_icmp(void* ctx, Port& port, rte_mbuf* m, const net::RxFrame& f,
                        std::uint64_t now);

    // TcpLink
    std::span<std::uint8_t> tx_alloc(net::Ipv4Addr remote, std::size_t len) override;
    void tx_send(std::size_t len) override;
    bool on_link(net::Ipv4Addr ip) const override { return port_.ip().contains(ip); }

    // --- any thread ---
    const TcpServiceCounters& counters() const { return counters_; }
    // Calls fn(name, value) for the stack's counters and then the service's.
    template <typename F>
    void for_each_counter(F&& f) const;
    // The control thread: the listeners and connections, from row `first` on, at most `max`
    // (copied on the lcore between two turns); `total` gets how many rows there are.
    std::vector<TcpConnRow> rows(std::size_t first, std::size_t max, std::size_t& total);
    // The control thread: the port's new address and MTU (a shared-address port following its
    // interface), taken by the port and its TCP on the lcore between two turns. An MTU the
    // TCP cannot use leaves the MTU as it was; the MTU taken is returned.
    std::uint16_t readdress(net::Ipv4Prefix ip, std::uint16_t mtu);

  private:
    struct Held {
        rte_mbuf* m = nullptr;
        net::Ipv4Addr remote;
        std::uint64_t since = 0;  // tsc
    };
    // A peer's Ethernet and IPv4 headers, prepared once (a header template): a segment's frame
    // copies them and sets the IPv4 total length, ID and checksum (the checksum from the
    // template's sum), and no ARP lookup is made while the peer's MAC memo holds.
    struct Template {
        net::Ipv4Addr remote{}, local{};
        net::MacAddr mac{};
        bool built = false;
        MacMemo memo;
        std::array<std::uint8_t, 14 + 20> hdr{};
        std::uint32_t sum = 0;  // of the IPv4 header with total length, ID and checksum zero
    };
    // The template of `remote` (a slot per address hash: a peer whose slot another took is
    // prepared again).
    Template& template_of(net::Ipv4Addr remote);
    // Whether the template holds the peer's current MAC (looked up through its memo when the
    // memo no longer answers); false while ARP is under way.
    bool ready(Template& t, std::uint64_t now_tsc);
    void frame(rte_mbuf* m, const Template& t, std::size_t len);
    static void set_frame_length(rte_mbuf* m, std::size_t len);
    void frame(rte_mbuf* m, net::MacAddr mac, net::Ipv4Addr remote, std::size_t len);
    // Marks a framed segment's mbuf for the device's checksum offloads (IPv4 header, TCP),
    // where the port uses them.
    void offload(rte_mbuf* m) const;
    // A segment written for TCP checksum offload that loops back to the port itself: no
    // device completes its checksum, so it is completed here.
    void complete_checksum(rte_mbuf* m, std::size_t len) const;
    bool release_held(std::uint64_t now_tsc);
    // The segments a connection of the port to its own address sent since the last poll, to
    // the stack as received (never from inside an engine's send).
    bool release_loop(std::uint64_t now_tsc);
    // Those other lanes of the port sent to its own address, to a port of this lane's.
    bool release_looped_in(std::uint64_t now_tsc);
    // A looped segment's frame `m`, to the stack as received; frees it.
    void take_looped(rte_mbuf* m, std::uint64_t now_tsc);

    static constexpr std::size_t kHeld = 16;
    static constexpr std::size_t kLoopSlots = 256;
    static constexpr std::size_t kL4Offset = 14 + 20;  // Ethernet and an option-less IPv4 header
    static constexpr std::size_t kTemplates = 16;

    Port& port_;
    LcoreTasks& tasks_;
    const std::uint64_t tsc_hz_;
    const double ns_per_tsc_;
    TcpServiceCounters counters_;
    TcpStack stack_;
    std::uint64_t now_tsc_ = 0;
    // The frame between tx_alloc and tx_send.
    rte_mbuf* tx_m_ = nullptr;
    net::Ipv4Addr tx_remote_;
    bool tx_hold_ = false;  // no MAC yet: into held_
    std::uint16_t ip_id_ = 0;
    std::array<Template, kTemplates> templates_{};
    std::array<Held, kHeld> held_{};
    std::size_t nheld_ = 0;
    std::array<rte_mbuf*, kLoopSlots> loop_{};
    std::size_t loop_head_ = 0, loop_count_ = 0;
    // A port of several queues: every lane's service, and the ring the others loop segments
    // to this lane's ports into (multi-producer, this lcore consumes).
    std::vector<TcpService*> lanes_;
    rte_ring* looped_in_ = nullptr;
};

template <typename F>
void TcpService::for_each_counter(F&& f) const {
    stack_.for_each_counter(f);
    f(std::string_view("tx_segments"), counters_.tx_segments.get());
    f(std::string_view("tx_no_mbuf"), counters_.tx_no_mbuf.get());
    f(std::string_view("tx_arp_wait"), counters_.tx_arp_wait.get());
    f(std::string_view("tx_unresolved"), counters_.tx_unresolved.get());
    f(std::string_view("rx_segments"), counters_.rx_segments.get());
    f(std::string_view("icmp_in"), counters_.icmp_in.get());
    f(std::string_view("loopback"), counters_.loopback.get());
    f(std::string_view("loopback_full"), counters_.loopback_full.get());
    f(std::string_view("rx_own_source"), counters_.rx_own_source.get());
    f(std::string_view("icmp_malformed"), counters_.icmp_malformed.get());
}

// Calls fn(name, value) for the counters of a port's TCP, its lanes' (`lanes`, pointers to
// TcpService) summed; each connection's buffer sizes are the lanes' setting, not summed.
// Telemetry and the exit report only: it allocates.
template <typename Lanes, typename F>
void for_each_tcp_counter(const Lanes& lanes, F&& f) {
    CounterSum sum;
    for (const TcpService* lane : lanes) {
        sum.next();
        lane->for_each_counter([&sum](std::string_view name, std::uint64_t v) {
            if (name == "send_buffer" || name == "recv_window") {
                sum.keep(name, v);
            } else {
                sum.add(name, v);
            }
        });
    }
    sum.for_each(f);
}

// A row as snicctl tcp receives it.
shm::TcpConnInfo tcp_conn_info(const TcpConnRow& r);
// snicctl tcp's op on the control thread: a page of the rows of the port at q.port_index,
// over its lanes' TCPs (`ports`: each port's, by queue; empty where a port has no TCP). 0,
// or EINVAL for no such port.
int fill_tcp_conns(std::span<const std::vector<TcpService*>> ports, const shm::TcpConnsReq& q,
                   shm::TcpConnsReply& r);
// The same for a client other than root: the rows `keep` passes, paged among themselves.
int fill_tcp_conns(std::span<const std::vector<TcpService*>> ports, const shm::TcpConnsReq& q,
                   shm::TcpConnsReply& r, const std::function<bool(const shm::TcpConnInfo&)>& keep);

// TCP listeners per port: rdma_cm's listening ids of every user (CmService::kMaxListenersPerUid
// each, but root's).
inline constexpr std::uint32_t kMaxListeners = 256;

// The stack configuration snicd runs each port with: the port's address and MTU, a random
// ISN key (per daemon start), the least RTO and the connection bounds of snicd's options,
// buffers for `window` bytes (tcp_window_for), defaults elsewhere.
TcpStackConfig daemon_tcp_config(const Port& port, const tcp::IsnKey& key, tcp::TcpTime rto_min,
                                 std::uint32_t max_connections, std::uint32_t max_per_peer,
                                 std::uint32_t window);

}  // namespace snic::daemon
