// snicd: the snic daemon. Parses its options, claims its control socket, brings
// up DPDK and the ports, runs the data lcores until SIGINT/SIGTERM (or the end of
// a self-test), then reports its counters and tears everything down.
#include <pthread.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "daemon/cm/service.h"
#include "daemon/config.h"
#include "daemon/control/device_nodes.h"
#include "daemon/control/kernel_neighbours.h"
#include "daemon/control/server.h"
#include "daemon/iwarp/iw_cm_wire.h"
#include "daemon/iwarp/iwarp_rules.h"
#include "daemon/iwarp/iwarp_transport.h"
#include "daemon/iwarp/tcp_service.h"
#include "daemon/lcore/lcore.h"
#include "daemon/lcore/lcore_tasks.h"
#include "daemon/port/eal.h"
#include "daemon/port/iface.h"
#include "daemon/port/port.h"
#include "daemon/port/tcp_ports.h"
#include "daemon/port/wire.h"
#include "daemon/port/xdp_maps.h"
#include "daemon/roce/gsi.h"
#include "daemon/roce/ib_cm_wire.h"
#include "daemon/roce/roce_rules.h"
#include "daemon/roce/roce_transport.h"
#include "daemon/selftest.h"
#include "daemon/tcp_selftest.h"
#include "daemon/telemetry/telemetry.h"
#include "daemon/verbs/fault_guard.h"

namespace snic::daemon {
namespace {

constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;
constexpr unsigned kPoolCache = 256;

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) {
    g_stop.store(true, std::memory_order_relaxed);
}

int fail(int code, const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "snicd: %s\n", message.c_str());
    return code;
}

void setup_logging() {
    auto logger = std::make_shared<spdlog::logger>(
        "snicd", std::make_shared<spdlog::sinks::stdout_sink_mt>());
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l [%n] %v");
    logger->flush_on(spdlog::level::info);
    spdlog::set_default_logger(logger);
}

// DPDK's ports, by id, with their names (start-up only).
std::vector<std::pair<std::uint16_t, std::string>> dpdk_ports() {
    std::vector<std::pair<std::uint16_t, std::string>> ports;
    std::uint16_t id;
    RTE_ETH_FOREACH_DEV(id) {
        char name[RTE_ETH_NAME_MAX_LEN] = {};
        rte_eth_dev_get_name_by_port(id, name);
        ports.emplace_back(id, name);
    }
    return ports;
}

std::string available_ports() {
    std::string list;
    for (const auto& [id, name] : dpdk_ports())
        list += (list.empty() ? "" : ", ") + std::to_string(id) + "=" + name;
    return list.empty() ? "no DPDK ports: add one with --vdev, --wire or a bound NIC"
                        : "available: " + list;
}

// Whether --port `given` names the DPDK port `device`: by its name, or a ring port (the
// virtual wire's) by its name without DPDK's "net_ring_" (wire0, wire1).
bool names_port(std::string_view given, std::string_view device) {
    constexpr std::string_view ring = "net_ring_";
    return given == device || (device.starts_with(ring) && given == device.substr(ring.size()));
}

Result<std::uint16_t> find_port(const PortSpec& spec) {
    const auto& s = spec.port;
    const bool numeric = !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    if (numeric && s.size() <= 5) {
        const unsigned long n = std::stoul(s);
        if (n <= UINT16_MAX && rte_eth_dev_is_valid_port(static_cast<std::uint16_t>(n)))
            return static_cast<std::uint16_t>(n);
    } else if (!numeric) {
        for (const auto& [id, name] : dpdk_ports())
            if (names_port(s, name)) return id;
    }
    const std::string dpdk = eal_errors();
    return make_error(ENODEV, "--port " + s + ": no such DPDK port (" + available_ports() + ")" +
                                  (dpdk.empty() ? "" : "; DPDK: " + dpdk));
}

// The queues of every port: what the packet pool is sized for.
std::size_t queue_count(const Config& cfg) {
    std::size_t n = 0;
    for (const auto& p : cfg.ports) n += p.queues;
    return n;
}

std::uint16_t largest_mtu(const Config& cfg) {
    std::uint16_t mtu = RTE_ETHER_MTU;
    for (const auto& p : cfg.ports) mtu = std::max(mtu, p.mtu.value_or(0));
    return mtu;
}

// The RoCEv2 RDMA device of the port at `index` in --port order.
std::string device_name(const Config& cfg, std::size_t index) {
    return cfg.name + "_" + std::to_string(index);
}

// Its iWARP device.
std::string iw_device_name(const Config& cfg, std::size_t index) {
    return cfg.name + "_iw" + std::to_string(index);
}

// The ports as RDMA devices, for the control server's sessions.
std::vector<DevicePort> device_ports(const Config& cfg,
                                     const std::vector<std::unique_ptr<Port>>& ports,
                                     const std::vector<std::unique_ptr<RoceTransport>>& transports,
                                     const std::vector<std::vector<Transport*>>& roce_lanes,
                                     const std::vector<std::unique_ptr<IwarpTransport>>& iwarp,
                                     const std::vector<std::vector<IwarpTransport*>>& iwarp_lanes,
                                     const std::vector<std::shared_ptr<ProcessLanes>>& processes) {
    std::vector<DevicePort> devices;
    for (std::size_t i = 0; i < ports.size(); ++i) {
        const Port& p = *ports[i];
        auto link = [&p] {
            const Port::Link l = p.link();
            return LinkInfo{l.up, l.speed_mbps};
        };
        DevicePort d{p.mac(), p.ip(), p.mtu(), link};
        d.devices[shm::kTransportRoce] = {
            device_name(cfg, i), &roce_rules(), transports[i].get(), {}, {}, {}};
        if (roce_lanes[i].size() > 1) d.devices[shm::kTransportRoce].lanes = roce_lanes[i];
        d.devices[shm::kTransportIwarp] = {
            iw_device_name(cfg, i), &iwarp_rules(), iwarp[i].get(), {}, {}, {}};
        if (iwarp_lanes[i].size() > 1) {  // a process's sessions on its lane, which the CM knows
            d.devices[shm::kTransportIwarp].lanes.assign(iwarp_lanes[i].begin(),
                                                         iwarp_lanes[i].end());
            d.devices[shm::kTransportIwarp].by_process = processes[i];
        }
        devices.push_back(std::move(d));
    }
    return devices;
}

// `devices` (the control thread's) has each port's address and MTU as the sessions see them.
void fill_status(const Config& cfg, const std::vector<std::unique_ptr<Port>>& ports,
                 const std::vector<DevicePort>& devices, shm::StatusReply& r) {
    auto copy = [](char* dst, std::size_t cap, const std::string& src) {
        std::snprintf(dst, cap, "%s", src.c_str());
    };
    copy(r.name, sizeof r.name, cfg.name);
    copy(r.version, sizeof r.version, SNIC_VERSION);
    r.pid = static_cast<std::uint32_t>(::getpid());
    r.nports = static_cast<std::uint32_t>(std::min(ports.size(), shm::kMaxPorts));
    for (std::uint32_t i = 0; i < r.nports; ++i) {
        const Port& p = *ports[i];
        shm::PortInfo& info = r.ports[i];
        info.port_id = p.id();
        info.mtu = devices[i].mtu;
        std::memcpy(info.mac, p.mac().bytes.data(), 6);
        info.prefix_length = devices[i].ip.length;
        info.link_up = p.link_up() ? 1 : 0;
        info.ipv4 = devices[i].ip.addr.value;
        info.ndevices = 2;
        copy(info.devices[0], sizeof info.devices[0], device_name(cfg, i));
        copy(info.devices[1], sizeof info.devices[1], iw_device_name(cfg, i));
        copy(info.name, sizeof info.name, p.name());
        info.offloads = offload_bits(p.offloads());
        info.queues = static_cast<std::uint32_t>(p.lanes().size());
    }
}

// Each port's non-zero counters, then its transport's on a line of their own.
// One line of a transport's non-zero counters.
std::string transport_line(std::string head, const Transport& t) {
    t.for_each_counter(
        [](void* ctx, NamedCounter c) {
            if (c.value != 0)
                *static_cast<std::string*>(ctx) +=
                    " " + std::string(c.name) + "=" + std::to_string(c.value);
        },
        &head);
    return head;
}

// What the exit report shows of a port's (or a lane's) counters, appended to `line`: the
// non-zero ones, and rx_packets and tx_packets always.
auto port_counter_appender(std::string& line) {
    return [&line](std::string_view name, std::uint64_t v) {
        if (v != 0 || name == "rx_packets" || name == "tx_packets")
            line += " " + std::string(name) + "=" + std::to_string(v);
    };
}

// What the exit report shows of TCP's counters: the non-zero ones.
auto nonzero_appender(std::string& line) {
    return [&line](std::string_view name, std::uint64_t v) {
        if (v != 0) line += " " + std::string(name) + "=" + std::to_string(v);
    };
}

// A port of several queues: each lane's own figures, and its transports' and TCP's.
void print_lanes(const Port& p, const std::vector<Transport*>& roce,
                 const std::vector<IwarpTransport*>& iwarp, const std::vector<TcpService*>& tcp) {
    const auto lanes = p.lanes();
    if (lanes.size() < 2) return;
    for (std::size_t q = 0; q < lanes.size(); ++q) {
        const Port& lane = *lanes[q];
        const std::string head =
            fmt::format("snicd: port {} lane {} (lcore {}):", p.id(), q, lane.lcore());
        std::string line = head + fmt::format(" qps={}", lane.lane_qps());
        for_each_counter(lane.counters(), port_counter_appender(line));
        std::printf("%s\n", line.c_str());
        if (q < roce.size() && roce[q] != nullptr)
            std::printf("%s\n", transport_line(head + " roce:", *roce[q]).c_str());
        if (q < iwarp.size() && iwarp[q] != nullptr)
            std::printf("%s\n", transport_line(head + " iwarp:", *iwarp[q]).c_str());
        if (q < tcp.size() && tcp[q] != nullptr) {
            line = head + " tcp:";
            tcp[q]->for_each_counter(nonzero_appender(line));
            std::printf("%s\n", line.c_str());
        }
    }
}

// `tcp`: each port's TCP by lane (empty: none).
void print_counters(const std::vector<std::unique_ptr<Port>>& ports,
                    const std::vector<const Transport*>& transports,
                    const std::vector<std::vector<TcpService*>>& tcp,
                    const std::vector<std::vector<Transport*>>& roce_lanes,
                    const std::vector<std::vector<IwarpTransport*>>& iwarp_lanes) {
    for (std::size_t i = 0; i < ports.size(); ++i) {
        const Port& p = *ports[i];
        std::string line = "snicd: port " + std::to_string(p.id()) + " (" + p.name() + "):";
        for_each_port_counter(p, port_counter_appender(line));
        std::printf("%s\n", line.c_str());
        // The port's transports (RoCEv2, iWARP): their own counters and their QP schedulers'.
        for (std::size_t t = 2 * i; t < 2 * i + 2 && t < transports.size(); ++t) {
            if (transports[t] == nullptr) continue;
            line = transport_line("snicd: port " + std::to_string(p.id()) + " " +
                                      std::string(transports[t]->name()) + ":",
                                  *transports[t]);
            std::printf("%s\n", line.c_str());
        }
        if (i < roce_lanes.size()) print_lanes(p, roce_lanes[i], iwarp_lanes[i], tcp[i]);
        if (i >= tcp.size() || tcp[i].empty()) continue;
        // The port's TCP: its lanes' summed.
        line = "snicd: port " + std::to_string(p.id()) + " tcp:";
        for_each_tcp_counter(tcp[i], nonzero_appender(line));
        std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
}

int lcore_main(void* arg) {
    static_cast<Lcore*>(arg)->run();
    return 0;
}

// What a shared-address port takes of its interface's changes (the control thread).
struct Following {
    std::uint16_t max_mtu = 0;     // the largest the port's device takes
    bool said_no_address = false;  // the warning is given once per absence
    bool said_mtu = false;         // and once per MTU too large
};

// Everything the daemon holds once EAL is up, destroyed in reverse order.
struct Running {
    std::optional<VirtualWire> wire;
    rte_mempool* pool = nullptr;
    std::vector<std::unique_ptr<Port>> ports;
    std::vector<unsigned> lcore_ids;                              // main lcore first
    std::vector<std::vector<Port*>> owned;                        // per lcore: its ports
    std::vector<std::unique_ptr<Lcore>> lcores;                   // per lcore
    std::vector<std::unique_ptr<LcoreTasks>> tasks;               // per lcore
    std::vector<std::unique_ptr<RoceTransport>> transports;       // per port (its lane 0's)
    std::vector<std::unique_ptr<RoceTransport>> lane_transports;  // ports' lanes 1..N-1
    std::vector<std::vector<Transport*>>
        roce_lanes;                                // per port: each lane's RoCEv2, lane 0's first
    std::vector<std::unique_ptr<GsiPort>> gsi;     // per port: its QP1
    std::vector<std::unique_ptr<TcpService>> tcp;  // per port: snic's TCP (its lane 0's)
    std::vector<std::unique_ptr<IwarpTransport>> iwarp;       // per port: on its TCP (lane 0's)
    std::vector<std::unique_ptr<TcpService>> lane_tcp;        // ports' lanes 1..N-1
    std::vector<std::unique_ptr<IwarpTransport>> lane_iwarp;  // ports' lanes 1..N-1
    std::vector<std::vector<TcpService*>> tcp_lanes;        // per port: each lane's, lane 0's first
    std::vector<std::vector<IwarpTransport*>> iwarp_lanes;  // per port: each lane's, lane 0's first
    // Per port of several queues: the lane of each process on its iWARP device (none with one).
    std::vector<std::shared_ptr<ProcessLanes>> iw_processes;
    std::vector<std::unique_ptr<CmWire>> cm_wires;  // per device: its CM
    // Per port, for a shared-address port: its XDP program's maps and its neighbours.
    std::vector<std::unique_ptr<XdpMaps>> xdp;
    std::vector<std::unique_ptr<SharedTcpPorts>> tcp_ports;  // its iWARP's TCP ports
    std::vector<std::unique_ptr<KernelNeighbours>> neighbours;
    std::vector<Following> following;
    ~Running() {
        cm_wires.clear();
        lane_iwarp.clear();
        iwarp.clear();
        lane_tcp.clear();
        tcp.clear();
        transports.clear();
        lane_transports.clear();
        gsi.clear();
        tasks.clear();
        ports.clear();  // closes the ports before their pool and wire go
        if (pool != nullptr) rte_mempool_free(pool);
    }
};

// A shared-address port, once its PMD has attached snicd's XDP program to the interface: the
// program learns the port's address (it sends snicd nothing before), and the port its
// neighbours from the kernel. 0 or the exit code (the error said).
int share_port(const PortSpec& spec, Port& port, Running& r) {
    const std::string what = spec.shared_option();
    auto maps = XdpMaps::of_interface(spec.ifindex);
    if (!maps) return fail(kExitRuntime, what + ": " + maps.error().message);
    if (auto st = maps->set_address(spec.ip.addr.value); !st)
        return fail(kExitRuntime, what + ": " + st.error().message);
    r.xdp.back() = std::make_unique<XdpMaps>(std::move(*maps));
    r.tcp_ports.back() = std::make_unique<SharedTcpPorts>(*r.xdp.back(), spec.ip.addr.value);
    auto neighbours = KernelNeighbours::open(spec.ifindex);
    if (!neighbours) return fail(kExitRuntime, what + ": " + neighbours.error().message);
    port.set_neighbour_source(neighbours->get());
    r.neighbours.back() = std::move(*neighbours);
    rte_eth_dev_info info{};
    r.following.back().max_mtu =
        rte_eth_dev_info_get(port.id(), &info) == 0 ? info.max_mtu : port.mtu();
    spdlog::info("{}: {} with the kernel, address {}, MTU {}, MAC {}", what, port.name(),
                 spec.ip.to_string(), port.mtu(), port.mac().to_string());
    return 0;
}

// The virtual wire (if asked for), the packet pool and every --port, started. 0 or the exit
// code (the error said).
int open_ports(const Config& cfg, Running& r) {
    if (cfg.wire) {
        // As many queue pairs as its ports have queues, the same at both ends.
        const PortSpec* ends[2] = {};
        for (const auto& p : cfg.ports)
            for (int e = 0; e < 2; ++e)
                if (names_port(p.port, VirtualWire::device_name(e))) ends[e] = &p;
        if (ends[0] != nullptr && ends[1] != nullptr && ends[0]->queues != ends[1]->queues)
            return fail(kExitUsage, fmt::format("--wire: wire0 has queues={} and wire1 queues={}: "
                                                "a queue's frames reach the same queue at the "
                                                "other end, so both need as many",
                                                ends[0]->queues, ends[1]->queues));
        unsigned queues = 1;
        for (const PortSpec* e : ends)
            if (e != nullptr) queues = std::max<unsigned>(queues, e->queues);
        auto wire = VirtualWire::create(queues);
        if (!wire) return fail(kExitRuntime, wire.error().message);
        r.wire.emplace(std::move(wire.value()));
    }

    const std::uint32_t data_room = RTE_PKTMBUF_HEADROOM + largest_mtu(cfg) + RTE_ETHER_HDR_LEN +
                                    RTE_VLAN_HLEN + RTE_ETHER_CRC_LEN;
    r.pool = rte_pktmbuf_pool_create(
        "snic_mbufs", packet_pool_mbufs(queue_count(cfg)), kPoolCache, 0,
        static_cast<std::uint16_t>(std::max<std::uint32_t>(data_room, RTE_MBUF_DEFAULT_BUF_SIZE)),
        static_cast<int>(rte_socket_id()));
    if (r.pool == nullptr)
        return fail(kExitRuntime, std::string("cannot allocate the packet pool: ") +
                                      rte_strerror(rte_errno) +
                                      " (hugepages exhausted? try --no-huge -m 512)");

    const PortSettings settings{rte_get_tsc_hz(), cfg.arp_timeout_s, cfg.rx_burst, cfg.tx_burst,
                                cfg.tx_in_place};
    for (const auto& spec : cfg.ports) {
        auto id = find_port(spec);
        if (!id && spec.shared)
            return fail(kExitRuntime, spec.shared_option() + ": DPDK could not drive " +
                                          spec.iface + " with net_af_xdp and snicd's XDP program " +
                                          xdp_program_path() +
                                          " (no net_af_xdp driver, or the kernel " +
                                          "refused the program; DPDK's log above says which)");
        if (!id) return fail(kExitRuntime, id.error().message);
        for (const auto& p : r.ports)
            if (p->id() == *id)
                return fail(kExitUsage, "--port " + spec.port + ": port given twice");
        auto port = Port::open(*id, spec, r.pool, settings);
        if (!port) return fail(kExitRuntime, port.error().message);
        r.ports.push_back(std::move(port.value()));
        r.xdp.emplace_back();
        r.tcp_ports.emplace_back();
        r.neighbours.emplace_back();
        r.following.emplace_back();
        if (spec.shared) {
            if (const int err = share_port(spec, *r.ports.back(), r); err != 0) return err;
        }
    }
    return 0;
}

// snic's TCP on one lane of port `p` (the port itself with one queue): its segments and ICMP
// errors, its connections' timers; buffers from the bandwidth-delay product of the link's speed
// now and --tcp-window-rtt. Then the lane's iWARP device transport, MPA, DDP and RDMAP over that
// TCP. Its QPs are polled before the TCP they write to, so that what a QP hands its stream on a
// turn is sent on the same turn (the stack builds segments on its poll).
void add_tcp_lane(const Config& cfg, Running& r, std::size_t p, Port& lane, LcoreTasks& tasks,
                  const NameTable& keys, const tcp::IsnKey& isn_key,
                  std::vector<LcorePoller*>& pollers) {
    const std::uint32_t mbps = r.ports[p]->link_speed_mbps();
    const std::uint32_t window = tcp_window_for(mbps, cfg.tcp.window_rtt_us);
    if (lane.queue() == 0)
        spdlog::info("port {}: TCP buffers {} KiB: {} Mb/s{} x {} us, twice", p, window / 1024,
                     mbps == 0 ? kDefaultLinkMbps : mbps, mbps == 0 ? " (link speed unknown)" : "",
                     cfg.tcp.window_rtt_us);
    auto tcp = std::make_unique<TcpService>(
        lane, tasks,
        daemon_tcp_config(lane, isn_key, cfg.tcp.rto_min_ms * tcp::kMs, cfg.tcp.max_connections,
                          cfg.tcp.max_per_peer, window),
        rte_get_tsc_hz());
    lane.set_tcp_hook({&TcpService::on_tcp, tcp.get()});
    lane.set_icmp_error_hook({&TcpService::on_icmp, tcp.get()});
    auto iwarp = std::make_unique<IwarpTransport>(tasks, keys, *tcp, rte_get_tsc_hz());
    pollers.push_back(iwarp.get());
    pollers.push_back(tcp.get());
    r.tcp_lanes[p][lane.queue()] = tcp.get();
    r.iwarp_lanes[p][lane.queue()] = iwarp.get();
    if (lane.queue() == 0) {
        r.tcp[p] = std::move(tcp);
        r.iwarp[p] = std::move(iwarp);
    } else {
        r.lane_tcp.push_back(std::move(tcp));
        r.lane_iwarp.push_back(std::move(iwarp));
    }
}

// Ports go round-robin to the enabled lcores, main lcore first; each port's RoCEv2 transport
// runs on the port's lcore, which also takes the control thread's work for it (starting QPs,
// grace periods). The self-test, if any, runs on the main lcore. A port of several queues has
// its lanes on lcores of their own, each with its RoCEv2 transport, TCP and iWARP transport.
// 0 or the exit code (the error said).
int assign_lcores(const Config& cfg, Running& r, Selftest* selftest, Resources& resources,
                  const tcp::IsnKey& isn_key) {
    r.lcore_ids = {rte_get_main_lcore()};
    unsigned worker;
    RTE_LCORE_FOREACH_WORKER(worker) r.lcore_ids.push_back(worker);
    const std::size_t n = r.lcore_ids.size();
    r.owned.assign(n, {});
    // Lane q of port i (port.h) on lcore (i + q) mod n: a port's lanes on lcores of their own.
    for (std::size_t i = 0; i < r.ports.size(); ++i) {
        const std::span<Port* const> lanes = r.ports[i]->lanes();
        if (lanes.size() > n)
            spdlog::warn("--port {}: queues={} on {} lcore(s): lanes share lcores",
                         cfg.ports[i].port, lanes.size(), n);
        for (std::size_t q = 0; q < lanes.size(); ++q) {
            r.owned[(i + q) % n].push_back(lanes[q]);
            lanes[q]->set_lcore(r.lcore_ids[(i + q) % n]);
        }
    }
    r.roce_lanes.resize(r.ports.size());
    r.tcp_lanes.resize(r.ports.size());
    r.iwarp_lanes.resize(r.ports.size());
    for (std::size_t i = 0; i < r.ports.size(); ++i) {
        const std::size_t lanes = r.ports[i]->lanes().size();
        r.roce_lanes[i].resize(lanes);
        r.tcp_lanes[i].resize(lanes);
        r.iwarp_lanes[i].resize(lanes);
        r.iw_processes.push_back(lanes > 1 ? std::make_shared<ProcessLanes>(lanes) : nullptr);
    }
    r.transports.resize(r.ports.size());
    r.gsi.resize(r.ports.size());
    r.tcp.resize(r.ports.size());
    r.iwarp.resize(r.ports.size());
    for (std::size_t i = 0; i < n; ++i) r.tasks.push_back(std::make_unique<LcoreTasks>());
    // Each lcore's pollers: first the transports of the lanes past the first, then those of
    // the ports whose lane 0 it runs.
    std::vector<std::vector<LcorePoller*>> mine(n);
    for (std::size_t p = 0; p < r.ports.size(); ++p) {
        const std::span<Port* const> lanes = r.ports[p]->lanes();
        for (std::size_t q = 1; q < lanes.size(); ++q) {
            const std::size_t i = (p + q) % n;
            r.lane_transports.push_back(std::make_unique<RoceTransport>(
                *lanes[q], *r.tasks[i], resources.keys(), rte_get_tsc_hz()));
            lanes[q]->set_roce_hook({&RoceTransport::on_rx, r.lane_transports.back().get()});
            r.roce_lanes[p][q] = r.lane_transports.back().get();
            mine[i].push_back(r.lane_transports.back().get());
            add_tcp_lane(cfg, r, p, *lanes[q], *r.tasks[i], resources.keys(), isn_key, mine[i]);
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        std::vector<LcorePoller*> pollers;
        if (selftest != nullptr && i == 0) pollers.push_back(selftest);
        r.lcores.push_back(
            std::make_unique<Lcore>(r.owned[i], std::move(pollers), cfg.idle_backoff_us, g_stop));
        for (std::size_t p = i; p < r.ports.size(); p += n) {
            r.transports[p] = std::make_unique<RoceTransport>(*r.ports[p], *r.tasks[i],
                                                              resources.keys(), rte_get_tsc_hz());
            r.ports[p]->set_roce_hook({&RoceTransport::on_rx, r.transports[p].get()});
            r.roce_lanes[p][0] = r.transports[p].get();
            mine[i].push_back(r.transports[p].get());
            // QP1: the CM's MADs between this lcore and the control thread.
            r.gsi[p] = std::make_unique<GsiPort>(
                [](void* t, std::uint32_t ip, std::uint32_t qpn, std::uint32_t qkey,
                   std::span<const std::uint8_t> mad) {
                    return static_cast<RoceTransport*>(t)->send_gsi(ip, qpn, qkey, mad);
                },
                r.transports[p].get(), rte_get_tsc_hz());
            r.transports[p]->set_gsi_hook(
                [](void* g, std::uint32_t ip, std::uint32_t qpn, std::uint32_t qkey,
                   std::span<const std::uint8_t> mad) {
                    static_cast<GsiPort*>(g)->receive(ip, qpn, qkey, mad);
                },
                r.gsi[p].get());
            mine[i].push_back(r.gsi[p].get());
            add_tcp_lane(cfg, r, p, *r.ports[p], *r.tasks[i], resources.keys(), isn_key, mine[i]);
        }
        r.lcores[i]->serve(r.tasks[i].get(), mine[i]);
    }
    // A port's TCPs hand each other the segments the port sends to its own address.
    for (std::size_t p = 0; p < r.ports.size(); ++p) {
        for (TcpService* t : r.tcp_lanes[p]) {
            if (const int err = t->set_lanes(r.tcp_lanes[p]); err != 0)
                return fail(kExitRuntime, fmt::format("--port {}: cannot create the ring of a "
                                                      "lane's TCP: {}",
                                                      cfg.ports[p].port, rte_strerror(err)));
        }
    }
    resources.set_quiesce([&r] {
        // No lcore uses what it found before the round trip; a port may still hold mbufs
        // attached to client memory before it (placed_tx.h) until it frees them.
        const std::uint32_t epoch = placed_quiesce_begin();
        for (std::size_t i = 0; i < r.tasks.size(); ++i)
            if (!r.owned[i].empty()) r.tasks[i]->run([] {});
        placed_quiesce_wait(epoch);
    });
    return 0;
}

// The self-test's line (or JSON object) on stdout; 0, or its failure's exit code.
int report_selftest(const Config& cfg, Selftest& selftest) {
    const std::string& name = cfg.selftest->name;
    if (!selftest.passed())
        return fail(kExitRuntime, "selftest " + name + " failed: " + selftest.report());
    if (cfg.selftest->json) {
        std::printf("%s\n", selftest.report().c_str());
    } else {
        std::printf("selftest %s: %s\n", name.c_str(), selftest.report().c_str());
    }
    return 0;
}

// SIGINT/SIGTERM mean "stop cleanly" from here on (a signal during start-up stops the
// daemon as soon as its loops run); the descriptor limit is raised to the hard one (each
// client holds a few in snicd; the soft limit is 1,024 by default).
void prepare_process() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    rlimit nofile{};
    if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &nofile);
    }
}

// A SipHash key, random for each start of the daemon: the TCP's RFC 6528 secret, each IB
// CM's communication-ID key.
SipKey random_key() {
    SipKey key;
    std::random_device rd;
    for (std::size_t i = 0; i < key.size(); i += 4) {
        const std::uint32_t v = rd();
        std::memcpy(key.data() + i, &v, 4);
    }
    return key;
}

// DPDK telemetry's view of the daemon: ports, transports, QP1 bridges, TCP (whose rows the
// control thread asks each port's lcore for) and the QPs (the control thread owns the
// sessions, daemon/control/control_queue.h).
// `tel` is read by telemetry's threads until unregister_telemetry(): the caller keeps it.
void start_telemetry(TelemetryInfo& tel, const Running& r, ControlServer& ctl,
                     const std::vector<std::vector<TcpService*>>& tcp_services) {
    static constexpr std::chrono::milliseconds kTelemetryWait{1000};
    for (const auto& p : r.ports) tel.ports.push_back(p.get());
    for (const auto& lanes : r.tcp_lanes) tel.tcp.emplace_back(lanes.begin(), lanes.end());
    tel.tcp_rows = [&ctl, &tcp_services](std::uint32_t port_index) {
        return ctl.ask<std::vector<shm::TcpConnInfo>>(
            [&tcp_services, port_index] {
                std::vector<shm::TcpConnInfo> out;
                shm::TcpConnsReq q{port_index, 0};
                shm::TcpConnsReply page;
                do {
                    if (fill_tcp_conns(tcp_services, q, page) != 0) break;
                    for (std::uint32_t k = 0; k < page.listed; ++k) out.push_back(page.conns[k]);
                    q.first += page.listed;
                } while (page.more != 0 && page.listed != 0);
                return out;
            },
            kTelemetryWait);
    };
    for (const auto& t : r.transports) tel.transports.push_back(t.get());
    for (const auto& t : r.iwarp) tel.iwarp.push_back(t.get());
    for (const auto& lanes : r.iwarp_lanes)
        tel.iwarp_lanes.emplace_back(lanes.begin() + (lanes.empty() ? 0 : 1), lanes.end());
    for (const auto& lanes : r.roce_lanes)
        tel.roce_lanes.emplace_back(lanes.begin() + (lanes.empty() ? 0 : 1), lanes.end());
    for (const auto& g : r.gsi) tel.gsi.push_back(g.get());
    for (const auto& x : r.xdp) tel.xdp.push_back(x.get());
    tel.qps = [&ctl] { return ctl.ask_qps(kTelemetryWait); };
    tel.qp = [&ctl](std::uint32_t qpn) { return ctl.ask_qp(qpn, kTelemetryWait); };
    register_telemetry(tel);
}

// Each port's devices' connection management: IB CM on QP1 for RoCEv2, MPA on the port's TCP
// for iWARP, each IB CM with a key of its own for its communication IDs.
std::vector<PortWire> make_cm_wires(Running& r) {
    std::vector<PortWire> wires;
    for (std::size_t i = 0; i < r.ports.size(); ++i) {
        const auto port = static_cast<std::uint16_t>(i);
        // As many connections being set up at once as one CM connection may hold ids
        // (cmtime makes 1,000 at once); each costs the agent a few hundred bytes.
        r.cm_wires.push_back(std::make_unique<IbCmWire>(r.gsi[i].get(), r.ports[i]->ip().addr.value,
                                                        random_key(),
                                                        CmService::kMaxIdsPerSession));
        wires.push_back({port, r.cm_wires.back().get()});
        r.cm_wires.push_back(
            std::make_unique<IwCmWire>(r.iwarp_lanes[i], r.iw_processes[i], r.tcp_ports[i].get()));
        wires.push_back({port, r.cm_wires.back().get()});
    }
    return wires;
}

// A shared-address port after news of its interface (the control thread): it keeps its
// address while the interface has it, and otherwise takes the interface's (first) one; its
// MTU is the interface's, up to what its device takes. New connections, listeners and
// sessions use what it has now; connections on an address gone end as their peers' segments
// stop reaching snicd, as on an RNIC whose GID went. Without any address the port keeps the
// one it had, and says so.
void follow_interface(const PortSpec& spec, std::size_t i, Running& r, ControlServer& control) {
    const DevicePort& was = control.devices()[i];
    const net::Ipv4Prefix old_ip = was.ip;
    const std::uint16_t old_mtu = was.mtu;
    Following& f = r.following[i];
    auto facts = iface_facts(spec.iface, old_ip.addr);
    if (!facts) {
        if (!f.said_no_address)
            spdlog::warn("{}: {}; the port keeps {} until the interface has an address again",
                         spec.shared_option(), facts.error().message, old_ip.to_string());
        f.said_no_address = true;
        return;
    }
    f.said_no_address = false;
    std::uint16_t mtu = facts->mtu;
    if (mtu > f.max_mtu) {
        if (!f.said_mtu)
            spdlog::warn(
                "{}: the interface's MTU {} is more than the port's device takes; the "
                "port's is {}",
                spec.shared_option(), mtu, f.max_mtu);
        f.said_mtu = true;
        mtu = f.max_mtu;
    } else {
        f.said_mtu = false;
    }
    const net::Ipv4Prefix ip = facts->ip;
    if (ip == old_ip && mtu == old_mtu) return;

    // The lcore first: from here on the port answers the new address.
    const std::uint16_t taken = r.tcp[i]->readdress(ip, mtu);
    if (ip.addr != old_ip.addr) {
        if (auto st = r.xdp[i]->set_address(ip.addr.value); !st)
            spdlog::warn("{}: {}", spec.shared_option(), st.error().message);
        r.tcp_ports[i]->readdress(ip.addr.value);
        r.cm_wires[2 * i]->readdress(ip.addr.value);
        r.cm_wires[2 * i + 1]->readdress(ip.addr.value);
    }
    control.readdress(i, ip, taken);
    if (taken != mtu)
        spdlog::warn("{}: MTU {} is too small for the port's TCP; it keeps MTU {}",
                     spec.shared_option(), mtu, taken);
    spdlog::info("{}: the port follows its interface: address {} MTU {} (was {} MTU {})",
                 spec.shared_option(), ip.to_string(), taken, old_ip.to_string(), old_mtu);
}

// The CPUs given to snicd that no data lcore busy-polls (all of them when none is left): the
// control thread runs there, as DPDK's control threads do, so that it does not wait for a
// busy lcore's time slice on every request.
cpu_set_t control_cpus(const cpu_set_t& given, const Running& r) {
    cpu_set_t cpus = given;
    for (unsigned id : r.lcore_ids) {
        const rte_cpuset_t lcore_cpus = rte_lcore_cpuset(id);
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (CPU_ISSET(c, &lcore_cpus)) CPU_CLR(c, &cpus);
    }
    return CPU_COUNT(&cpus) == 0 ? given : cpus;
}

// The counters of every port and transport on stdout, as snicd stops.
void print_all_counters(const Running& r) {
    std::vector<const Transport*> all;
    for (std::size_t i = 0; i < r.ports.size(); ++i) {
        all.push_back(r.transports[i].get());
        all.push_back(r.iwarp[i].get());
    }
    print_counters(r.ports, all, r.tcp_lanes, r.roce_lanes, r.iwarp_lanes);
}

// The daemon once EAL is up: ports, lcores, telemetry, the CM and the control thread, until a
// signal (or the self-test) stops it. The exit code.
int serve(const Config& cfg, ControlServer& control, const cpu_set_t& given) {
    Running r;
    if (const int err = open_ports(cfg, r); err != 0) return err;
    std::unique_ptr<Selftest> selftest;
    if (cfg.selftest && !cfg.selftest->one_port())
        selftest = make_selftest(*cfg.selftest, *r.ports[0], *r.ports[1], rte_get_tsc_hz(), g_stop);
    Resources& resources = control.resources();
    if (const int err = assign_lcores(cfg, r, selftest.get(), resources, random_key()); err != 0)
        return err;
    if (cfg.selftest && cfg.selftest->one_port()) {
        // On the first port's lcore (the main one), beside that port's TCP.
        selftest = make_tcp_selftest(*cfg.selftest, *r.tcp[0], rte_get_tsc_hz(), g_stop);
        r.lcores[0]->add_poller(selftest.get());
    }
    const std::vector<std::vector<TcpService*>>& tcp_services = r.tcp_lanes;
    TelemetryInfo tel{cfg.name, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}};
    start_telemetry(tel, r, control, tcp_services);

    for (std::size_t i = 1; i < r.lcore_ids.size(); ++i)
        if (!r.owned[i].empty())
            rte_eal_remote_launch(lcore_main, r.lcores[i].get(), r.lcore_ids[i]);

    control.set_devices(device_ports(cfg, r.ports, r.transports, r.roce_lanes, r.iwarp,
                                     r.iwarp_lanes, r.iw_processes));
    std::vector<std::string> names;
    for (std::size_t i = 0; i < r.ports.size(); ++i) {
        names.push_back(device_name(cfg, i));
        names.push_back(iw_device_name(cfg, i));
    }
    std::optional<DeviceNodes> nodes;
    if (!cfg.dev_dir.empty()) nodes.emplace(cfg.dev_dir, names, cfg.ctrl_mode);
    const std::uint64_t cm_seed = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
    CmService cm(control.devices(), make_cm_wires(r), cm_seed);
    control.set_cm(&cm);
    control.set_tcp([&tcp_services, &cm](const shm::TcpConnsReq& q, shm::TcpConnsReply& rep,
                                         std::optional<std::uint32_t> uid) {
        if (!uid) return fill_tcp_conns(tcp_services, q, rep);
        const TcpRowOwner mine = cm.tcp_rows_of(*uid, q.port_index);
        return fill_tcp_conns(tcp_services, q, rep,
                              [&mine](const shm::TcpConnInfo& c) { return mine.owns(c); });
    });
    if (auto st = control.listen(); !st) {
        g_stop.store(true);
        rte_eal_mp_wait_lcore();
        unregister_telemetry();
        return fail(kExitRuntime, st.error().message);
    }
    for (std::size_t i = 0; i < r.neighbours.size(); ++i) {
        KernelNeighbours* n = r.neighbours[i].get();
        if (n == nullptr) continue;
        n->on_interface_change(
            [&cfg, i, &r, &control] { follow_interface(cfg.ports[i], i, r, control); });
        control.watch(n->fd(), [n] { n->on_kernel(); });
        control.watch(n->wakeup_fd(), [n] { n->on_asks(); });
    }
    const cpu_set_t cpus = control_cpus(given, r);
    std::thread control_thread([&] {
        if (CPU_COUNT(&cpus) != 0) pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
        control.serve(g_stop, [&](shm::StatusReply& reply) {
            fill_status(cfg, r.ports, control.devices(), reply);
        });
    });
    spdlog::info("snicd {} ready: {} port(s), {} lcore(s), control socket {}", cfg.name,
                 r.ports.size(), r.lcore_ids.size(), cfg.ctrl_path);

    if (!r.owned[0].empty() || selftest) {
        r.lcores[0]->run();
    } else {
        while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    rte_eal_mp_wait_lcore();
    control_thread.join();
    control.disconnect_all();  // sessions go while their transports still exist
    control.set_cm(nullptr);
    resources.set_quiesce({});
    unregister_telemetry();
    spdlog::info("snicd {} stopping", cfg.name);
    print_all_counters(r);
    return selftest ? report_selftest(cfg, *selftest) : 0;
}

// Why this snicd cannot share an interface: "" when it can (the kernel makes XDP sockets and
// --no-xdp was not given).
std::string why_not_shared(const Config& cfg) {
    if (cfg.no_xdp) return "--no-xdp was given";
    const int s = ::socket(AF_XDP, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (s < 0)
        return std::string("this kernel makes no XDP sockets (") + std::strerror(errno) + ")";
    ::close(s);
    return "";
}

// Whether `addr` is the address of a port of snicd's own other than `spec`.
bool on_another_port(const Config& cfg, const PortSpec& spec, net::Ipv4Addr addr) {
    return std::ranges::any_of(cfg.ports, [&](const PortSpec& other) {
        return &other != &spec && !other.shared && other.ip.addr == addr;
    });
}

// A shared port that cannot be shared, with a fallback address: the port runs on its
// interface with that address of its own (net_af_packet), as a port that is not shared.
Status fall_back(Config& cfg, PortSpec& spec, const std::string& why, std::size_t n) {
    const std::string what = spec.shared_option();
    if (!spec.fallback)
        return make_error(EAFNOSUPPORT,
                          what + ": " + why +
                              "; a shared-address port needs XDP sockets (AF_XDP). Give the "
                              "port an address of its own to run on instead: --port iface=" +
                              spec.iface + ",shared,fallback=A.B.C.D/LEN");
    if (auto facts = iface_facts(spec.iface); !facts && facts.error().code == ENODEV)
        return make_error(ENODEV, what + ": " + facts.error().message);
    if (on_another_port(cfg, spec, spec.fallback->addr))
        return make_error(EINVAL, what + ": the fallback " + spec.fallback->to_string() +
                                      " is on another port too");
    spdlog::warn(
        "{}: {}; {} is not shared: the port runs on it with an address of its own, {} "
        "(net_af_packet), where RDMA programs reach it (not at {}'s own address)",
        what, why, spec.iface, spec.fallback->to_string(), spec.iface);
    spec.shared = false;
    spec.ip = *spec.fallback;
    spec.port = "net_af_packet_fallback" + std::to_string(n);
    return Ok{};
}

// Each shared-address port: its interface's address, prefix and MTU, and the af_xdp device
// that drives it with snicd's XDP program (one queue: the interface's first); or, where the
// interface cannot be shared, its fallback.
Status prepare_shared_ports(Config& cfg, std::vector<std::string>& eal_args,
                            std::vector<int>& claims) {
    std::size_t n = 0;
    std::optional<std::string> why;  // asked once, at the first shared port
    for (PortSpec& spec : cfg.ports) {
        if (!spec.shared) continue;
        const std::string what = spec.shared_option();
        if (!why) why = why_not_shared(cfg);
        if (!why->empty()) {
            if (auto st = fall_back(cfg, spec, *why, n); !st) return st;
            eal_args.push_back("--vdev=" + spec.port + ",iface=" + spec.iface);
            ++n;
            continue;
        }
        auto facts = iface_facts(spec.iface);
        if (!facts) return make_error(facts.error().code, what + ": " + facts.error().message);
        auto claim = claim_interface(facts->index, spec.iface);
        if (!claim) return make_error(claim.error().code, what + ": " + claim.error().message);
        claims.push_back(*claim);  // held until snicd exits
        if (on_another_port(cfg, spec, facts->ip.addr))
            return make_error(EINVAL,
                              what + ": " + facts->ip.to_string() + " is on another port too");
        spec.ifindex = facts->index;
        spec.ip = facts->ip;
        spec.mtu = facts->mtu;
        spec.port = "net_af_xdp_shared" + std::to_string(n++);
        // busy_budget=0: no preferred busy polling, whose system call on every receive burst
        // (to run the device's NAPI on this core) costs more than it saves when snicd polls
        // the ring anyway (docs/PERFORMANCE.md).
        eal_args.push_back(
            "--vdev=" + spec.port + ",iface=" + spec.iface +
            ",start_queue=0,queue_count=1,busy_budget=0,xdp_prog=" + xdp_program_path());
    }
    return Ok{};
}

int run(const Config& cfg, std::vector<std::string> eal_args) {
    prepare_process();
    auto control = ControlServer::claim(cfg.ctrl_path, cfg.ctrl_mode);
    if (!control) return fail(kExitRuntime, control.error().message);

    add_default_file_prefix(eal_args, cfg.name);
    add_sanitizer_base_virtaddr(eal_args);
    route_dpdk_log();
    // The CPUs snicd was given, before EAL pins this thread to the main lcore.
    cpu_set_t given;
    if (sched_getaffinity(0, sizeof given, &given) != 0) CPU_ZERO(&given);
    if (auto st = eal_init(eal_args); !st) return fail(kExitRuntime, st.error().message);
    // After EAL (whose own SIGBUS handling, around its page allocations, restores ours): a
    // hugetlb page a client punched out of its registered memory must not end snicd.
    if (!fault_guard::install())
        spdlog::warn("no SIGBUS guard for client memory: {}", std::strerror(errno));

    const int rc = serve(cfg, **control, given);
    rte_eal_cleanup();
    return rc;
}

}  // namespace
}  // namespace snic::daemon

int main(int argc, char** argv) {
    using namespace snic::daemon;
    setup_logging();
    auto args = split_args(argc, argv);
    auto cfg = parse_config(args.app);
    if (!cfg) return fail(kExitUsage, cfg.error().message);
    if (cfg->help) {
        std::fputs(usage().c_str(), stdout);
        return 0;
    }
    if (cfg->version) {
        std::printf("snicd %s\n", SNIC_VERSION);
        return 0;
    }
    spdlog::set_level(spdlog::level::from_str(cfg->log_level));
    std::vector<int> claims;  // the shared interfaces' locks: open until snicd exits
    if (auto st = prepare_shared_ports(*cfg, args.eal, claims); !st)
        return fail(kExitRuntime, st.error().message);
    return run(*cfg, std::move(args.eal));
}
