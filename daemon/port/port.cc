// Port bring-up and teardown: careful, slow, and off the datapath.
#include "daemon/port/port.h"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ring.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string_view>
#include <utility>

#include <spdlog/spdlog.h>

#include "shm/control_abi.h"

namespace snic::daemon {

namespace {

constexpr std::uint32_t kArpEntries = 256;
// Placed mbufs out at once per port (a window of 128 packets on each of many QPs is more than
// one lcore sends before its port frees them), and WRs with some out.
constexpr std::uint32_t kPlacedRecords = 4096;
constexpr std::uint32_t kPlacedTallies = 1024;

Error port_error(const PortSpec& spec, const std::string& what, int rc) {
    const int code = rc < 0 ? -rc : rc;
    return make_error(code, "--port " + spec.port + ": " + what + ": " + std::strerror(code));
}

// A locally administered MAC for ports that have none (the in-process wire),
// derived from the port's name so that it is stable across runs.
net::MacAddr derived_mac(const std::string& port_name, std::uint16_t port_id) {
    const std::size_t h = std::hash<std::string>{}(port_name);
    return {{0x02, 0x73, 0x6e, static_cast<std::uint8_t>(h >> 8), static_cast<std::uint8_t>(h),
             static_cast<std::uint8_t>(port_id)}};
}

// Each lane's faults from a generator of its own; lane 0's seed is the port's.
std::uint64_t lane_seed(const PortSpec& spec, std::uint16_t queue) {
    return spec.fault.seed + queue * 0x9e3779b97f4a7c15ull;
}

// What an RSS-capable device hashes frames by across a port's queues: addresses and UDP and
// TCP ports, where it can (RoCEv2's source port differs by QP, TCP's by connection).
constexpr std::uint64_t kRssHash = RTE_ETH_RSS_IP | RTE_ETH_RSS_UDP | RTE_ETH_RSS_TCP;

// The receive checksum verdicts a port takes where its device gives them.
constexpr std::uint64_t kRxChecksums =
    RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;

// Frames one lane holds for another at once.
constexpr unsigned kInboxSlots = 1024;

}  // namespace

Port::Port(std::uint16_t id, std::uint16_t queue, std::string name, const PortSpec& spec,
           net::MacAddr mac, std::uint16_t mtu, rte_mempool* pool, const PortSettings& settings)
    : id_(id),
      queue_(queue),
      name_(std::move(name)),
      mac_(mac),
      addr_(pack(spec.ip, mtu)),
      local_{mac, spec.ip.addr},
      pool_(pool),
      rx_burst_(std::clamp<std::uint16_t>(settings.rx_burst, 1, kMaxBurst)),
      tx_burst_(std::clamp<std::uint16_t>(settings.tx_burst, 1, kMaxBurst)),
      arp_(kArpEntries, settings.tsc_hz * settings.arp_timeout_s, settings.tsc_hz /* 1 s pacing */),
      rx_fault_{FaultInjector(spec.fault.rx, lane_seed(spec, queue)),
                nullptr,
                false,
                &counters_.rx_fault_dropped,
                &counters_.rx_fault_duplicated,
                &counters_.rx_fault_reordered,
                &counters_.rx_fault_corrupted},
      tx_fault_{FaultInjector(spec.fault.tx, lane_seed(spec, queue) ^ 0x5a5a5a5a5a5a5a5aull),
                nullptr,
                false,
                &counters_.tx_fault_dropped,
                &counters_.tx_fault_duplicated,
                &counters_.tx_fault_reordered,
                &counters_.tx_fault_corrupted} {
    if (spec.fault.rx_delay_us != 0) {
        // Room for the delay's frames at 10 Mpps, bounded: a full line drops (rx_delay_full).
        const std::uint64_t frames =
            std::clamp<std::uint64_t>(std::uint64_t{spec.fault.rx_delay_us} * 10, 1024, 1u << 20);
        rx_delay_ = std::make_unique<DelayLine<rte_mbuf*>>(
            frames, settings.tsc_hz * spec.fault.rx_delay_us / 1'000'000);
    }
}

PortOffloads choose_offloads(std::uint64_t rx_capa, std::uint64_t tx_capa, const PortSpec& spec) {
    PortOffloads o;
    if (!spec.offloads) return o;
    if (spec.fault.tx.corrupt == 0) {
        o.tx_ipv4_checksum = (tx_capa & RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) != 0;
        o.tx_tcp_checksum = (tx_capa & RTE_ETH_TX_OFFLOAD_TCP_CKSUM) != 0;
    }
    if (spec.fault.rx.corrupt == 0) o.rx_checksum = (rx_capa & kRxChecksums) != 0;
    return o;
}

std::uint32_t offload_bits(const PortOffloads& o) {
    return (o.tx_ipv4_checksum ? shm::kOffloadTxIpv4Checksum : 0) |
           (o.tx_tcp_checksum ? shm::kOffloadTxTcpChecksum : 0) |
           (o.rx_checksum ? shm::kOffloadRxChecksum : 0);
}

Result<std::unique_ptr<Port>> Port::open(std::uint16_t port_id, const PortSpec& spec,
                                         rte_mempool* pool, const PortSettings& settings) {
    char name_buf[RTE_ETH_NAME_MAX_LEN] = {};
    rte_eth_dev_get_name_by_port(port_id, name_buf);
    const std::string name = name_buf;

    rte_eth_dev_info info{};
    if (int rc = rte_eth_dev_info_get(port_id, &info); rc != 0)
        return port_error(spec, "cannot query device", rc);

    // Chained mbufs (a payload sent from the client's memory behind its headers) where the
    // device takes them and reads no memory by DMA: a virtual device's driver reads the
    // mbufs with the CPU, where the client's memory is mapped. Not virtio-user: its back end
    // (vhost-user, or the kernel's vhost-net) reads the buffers through the memory table the
    // driver gave it, DPDK's own memory, where the client's is not.
    const char* no_placement = settings.tx_in_place == 0 ? "--tx-in-place off"
                               : (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) == 0
                                   ? "the device takes no chained mbufs"
                               : std::string_view(rte_bus_name(rte_dev_bus(info.device))) != "vdev"
                                   ? "the device reads by DMA"
                               : std::string_view(info.driver_name) == "net_virtio_user"
                                   ? "the device's back end reads only the driver's own memory"
                                   : nullptr;
    rte_eth_conf conf{};
    if (no_placement == nullptr) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    const PortOffloads offloads = choose_offloads(info.rx_offload_capa, info.tx_offload_capa, spec);
    if (offloads.tx_ipv4_checksum) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_IPV4_CKSUM;
    if (offloads.tx_tcp_checksum) conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
    if (offloads.rx_checksum) conf.rxmode.offloads |= info.rx_offload_capa & kRxChecksums;
    const std::uint16_t queues = spec.queues;
    if (queues > info.max_rx_queues || queues > info.max_tx_queues)
        return make_error(EINVAL,
                          fmt::format("--port {}: queues={}: the device has at most {}", spec.port,
                                      queues, std::min(info.max_rx_queues, info.max_tx_queues)));
    const std::uint64_t rss = queues > 1 ? info.flow_type_rss_offloads & kRssHash : 0;
    if (rss != 0) {
        conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
        conf.rx_adv_conf.rss_conf.rss_hf = rss;
    }
    if (int rc = rte_eth_dev_configure(port_id, queues, queues, &conf); rc != 0)
        return port_error(spec, "cannot configure", rc);
    std::uint16_t nb_rxd = kRxDescriptors, nb_txd = kTxDescriptors;
    if (int rc = rte_eth_dev_adjust_nb_rx_tx_desc(port_id, &nb_rxd, &nb_txd); rc != 0)
        return port_error(spec, "cannot size queues", rc);
    const int socket = rte_eth_dev_socket_id(port_id);
    const unsigned sock = socket < 0 ? 0u : static_cast<unsigned>(socket);
    for (std::uint16_t q = 0; q < queues; ++q) {
        if (int rc = rte_eth_rx_queue_setup(port_id, q, nb_rxd, sock, nullptr, pool); rc != 0)
            return port_error(spec, fmt::format("cannot set up rx queue {}", q), rc);
        if (int rc = rte_eth_tx_queue_setup(port_id, q, nb_txd, sock, nullptr); rc != 0)
            return port_error(spec, fmt::format("cannot set up tx queue {}", q), rc);
    }

    // MTU: set on the device where it can be; devices without MTU control (the
    // in-process wire) get it in software only.
    std::uint16_t mtu = spec.mtu.value_or(0);
    if (mtu != 0) {
        const int rc = rte_eth_dev_set_mtu(port_id, mtu);
        if (rc != 0 && rc != -ENOTSUP) return port_error(spec, "cannot set MTU", rc);
    } else if (rte_eth_dev_get_mtu(port_id, &mtu) != 0 || mtu == 0) {
        mtu = RTE_ETHER_MTU;
    }

    // MAC: the device's own unless one is given; filtered in software with promiscuous
    // mode where the device cannot take it.
    rte_ether_addr hw{};
    rte_eth_macaddr_get(port_id, &hw);
    net::MacAddr mac;
    std::memcpy(mac.bytes.data(), hw.addr_bytes, 6);
    bool promiscuous = false;
    if (spec.mac || mac.is_zero()) {
        const net::MacAddr want = spec.mac ? *spec.mac : derived_mac(name, port_id);
        rte_ether_addr addr;
        std::memcpy(addr.addr_bytes, want.bytes.data(), 6);
        promiscuous = rte_eth_dev_default_mac_addr_set(port_id, &addr) != 0;
        mac = want;
    }
    if (promiscuous) {
        if (int rc = rte_eth_promiscuous_enable(port_id); rc != 0 && rc != -ENOTSUP)
            return port_error(spec, "cannot enable promiscuous mode for the MAC", rc);
    }

    if (int rc = rte_eth_dev_start(port_id); rc != 0) return port_error(spec, "cannot start", rc);

    std::unique_ptr<Port> port(new Port(port_id, 0, name, spec, mac, mtu, pool, settings));
    port->started_ = true;
    port->offloads_ = offloads;
    if (no_placement == nullptr) {
        port->placed_ = std::make_unique<PlacedTx>(kPlacedRecords, kPlacedTallies);
        port->placed_min_ = settings.tx_in_place;
    }
    if (auto st = port->add_lanes(spec, settings); !st) return st.error();
    if (queues > 1 && std::string_view(info.driver_name) == "net_af_packet")
        spdlog::warn(
            "port {} ({}): af_packet hands a frame to another queue when its own is "
            "full: a QP's packets may then arrive out of order, and be retransmitted",
            port_id, name);
    if (queues > 1)
        spdlog::info("port {} ({}): {} queues, {}", port_id, name, queues,
                     rss != 0 ? "spread by the device's RSS, then by QP in software"
                              : "no RSS: each lane takes what its queue gets, then by QP");
    spdlog::info("port {} ({}): ip {} mac {} mtu {}{}; payloads {}", port_id, name,
                 spec.ip.to_string(), mac.to_string(), mtu,
                 promiscuous ? " (software MAC filter)" : "",
                 no_placement == nullptr
                     ? fmt::format("of {} bytes or more sent from place", settings.tx_in_place)
                     : fmt::format("copied ({})", no_placement));
    spdlog::info("port {} ({}): offloads {}{}", port_id, name,
                 shm::offload_names(offload_bits(offloads)),
                 spec.offloads ? "" : " (offloads=off)");
    for (const auto& [dir, r] : {std::pair{"rx", spec.fault.rx}, std::pair{"tx", spec.fault.tx}}) {
        if (r.any())
            spdlog::warn(
                "port {}: injecting {} faults: loss {} dup {} reorder {} corrupt {} (seed {})",
                port_id, dir, r.drop, r.duplicate, r.reorder, r.corrupt, spec.fault.seed);
    }
    if (spec.fault.rx_delay_us != 0)
        spdlog::warn("port {}: received frames wait {} us before they are read (delay=)", port_id,
                     spec.fault.rx_delay_us);
    return port;
}

Status Port::add_lanes(const PortSpec& spec, const PortSettings& settings) {
    if (spec.queues < 2) return Ok{};
    owned_lanes_ = std::make_unique<PortLanes>();
    lanes_ = owned_lanes_.get();
    lanes_->lanes.push_back(this);
    for (std::uint16_t q = 1; q < spec.queues; ++q) {
        siblings_.push_back(
            std::unique_ptr<Port>(new Port(id_, q, name_, spec, mac_, mtu(), pool_, settings)));
        Port& lane = *siblings_.back();
        lane.lanes_ = lanes_;
        lane.offloads_ = offloads_;
        if (placed_) {
            lane.placed_ = std::make_unique<PlacedTx>(kPlacedRecords, kPlacedTallies);
            lane.placed_min_ = placed_min_;
        }
        lanes_->lanes.push_back(&lane);
    }
    for (Port* lane : lanes_->lanes) {
        const std::string ring = fmt::format("snic_in_{}_{}", id_, lane->queue_);
        lane->inbox_ = rte_ring_create(ring.c_str(), kInboxSlots, rte_socket_id(), RING_F_SC_DEQ);
        if (lane->inbox_ == nullptr)
            return make_error(rte_errno,
                              fmt::format("--port {}: cannot create lane {}'s inbox: {}", spec.port,
                                          lane->queue_, rte_strerror(rte_errno)));
    }
    return Ok{};
}

void Port::claim_qpn(std::uint32_t qpn) {
    if (lanes_ != nullptr)
        lanes_->qp_lane[qpn & (PortLanes::kQpnSlots - 1)].store(static_cast<std::uint8_t>(queue_),
                                                                std::memory_order_release);
    qps_.add();
}

void Port::claim_tcp_port(std::uint16_t port) {
    if (lanes_ != nullptr)
        lanes_->tcp_lane[port].store(static_cast<std::uint8_t>(queue_), std::memory_order_release);
}

Port::~Port() {
    siblings_.clear();  // lanes 1..N-1 first: they may hold frames for this one's inbox
    for (std::uint16_t i = 0; i < tx_count_; ++i) rte_pktmbuf_free(tx_[i]);
    if (inbox_ != nullptr) {
        rte_mbuf* m = nullptr;
        while (rte_ring_sc_dequeue(inbox_, reinterpret_cast<void**>(&m)) == 0) rte_pktmbuf_free(m);
        rte_ring_free(inbox_);
    }
    rte_pktmbuf_free(rx_fault_.held);
    rte_pktmbuf_free(tx_fault_.held);
    rte_mbuf* m = nullptr;
    while (rx_delay_ && rx_delay_->pop_due(m, ~std::uint64_t{0})) rte_pktmbuf_free(m);
    if (started_) {
        rte_eth_dev_stop(id_);
        rte_eth_dev_close(id_);
    }
}

Port::Link Port::link() const {
    rte_eth_link l{};
    if (rte_eth_link_get_nowait(id_, &l) != 0) return {};
    const bool known = l.link_speed != RTE_ETH_SPEED_NUM_UNKNOWN;
    return {l.link_status == RTE_ETH_LINK_UP, known ? l.link_speed : 0};
}

std::uint32_t Port::link_speed_mbps() const {
    if (const Link l = link(); l.up && l.speed_mbps != RTE_ETH_SPEED_NUM_NONE) return l.speed_mbps;
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(id_, &info) != 0) return 0;
    static constexpr std::pair<std::uint32_t, std::uint32_t> kSpeeds[] = {
        {RTE_ETH_LINK_SPEED_200G, RTE_ETH_SPEED_NUM_200G},
        {RTE_ETH_LINK_SPEED_100G, RTE_ETH_SPEED_NUM_100G},
        {RTE_ETH_LINK_SPEED_56G, RTE_ETH_SPEED_NUM_56G},
        {RTE_ETH_LINK_SPEED_50G, RTE_ETH_SPEED_NUM_50G},
        {RTE_ETH_LINK_SPEED_40G, RTE_ETH_SPEED_NUM_40G},
        {RTE_ETH_LINK_SPEED_25G, RTE_ETH_SPEED_NUM_25G},
        {RTE_ETH_LINK_SPEED_20G, RTE_ETH_SPEED_NUM_20G},
        {RTE_ETH_LINK_SPEED_10G, RTE_ETH_SPEED_NUM_10G},
        {RTE_ETH_LINK_SPEED_5G, RTE_ETH_SPEED_NUM_5G},
        {RTE_ETH_LINK_SPEED_2_5G, RTE_ETH_SPEED_NUM_2_5G},
        {RTE_ETH_LINK_SPEED_1G, RTE_ETH_SPEED_NUM_1G},
    };
    for (const auto& [flag, mbps] : kSpeeds)
        if ((info.speed_capa & flag) != 0) return mbps;
    return 0;
}

}  // namespace snic::daemon
