// Per-port counters (per lane, on a port of several queues). Each is written by the lane's lcore
// only (a relaxed load and store, no locked instruction) and read by any thread: telemetry, the
// control server, the exit report.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>

#include "common/counter.h"
#include "proto/net/rx.h"

namespace snic::daemon {

using snic::Counter;

struct PortCounters {
    Counter rx_packets, rx_bytes, tx_packets, tx_bytes, tx_dropped;
    Counter arp_requests_answered, arp_replies_received, arp_requests_sent;
    Counter neighbour_asks, neighbours_learnt;  // a shared-address port's, of the kernel
    Counter icmp_echo_answered, icmp_echo_replies_received;
    Counter roce_dispatched, tcp_dispatched;
    Counter rx_fault_dropped, rx_fault_duplicated, rx_fault_reordered, rx_fault_corrupted;
    Counter tx_fault_dropped, tx_fault_duplicated, tx_fault_reordered, tx_fault_corrupted;
    Counter rx_delayed, rx_delay_full;  // frames held by the port's delay=, and dropped: full
    // A port of several queues: frames handed to another lane, taken from other lanes, and
    // dropped because the other lane's inbox was full.
    Counter rx_to_lanes, rx_from_lanes, rx_lane_full;
    std::array<Counter, net::kDropReasons> drops;

    void drop(net::Drop why) noexcept { drops[static_cast<std::size_t>(why)].add(); }
};

struct CounterField {
    std::string_view name;
    Counter PortCounters::*field;
};

inline constexpr std::array<CounterField, 27> kPortCounterFields = {{
    {"rx_packets", &PortCounters::rx_packets},
    {"rx_bytes", &PortCounters::rx_bytes},
    {"tx_packets", &PortCounters::tx_packets},
    {"tx_bytes", &PortCounters::tx_bytes},
    {"tx_dropped", &PortCounters::tx_dropped},
    {"arp_requests_answered", &PortCounters::arp_requests_answered},
    {"arp_replies_received", &PortCounters::arp_replies_received},
    {"arp_requests_sent", &PortCounters::arp_requests_sent},
    {"neighbour_asks", &PortCounters::neighbour_asks},
    {"neighbours_learnt", &PortCounters::neighbours_learnt},
    {"icmp_echo_answered", &PortCounters::icmp_echo_answered},
    {"icmp_echo_replies_received", &PortCounters::icmp_echo_replies_received},
    {"roce_dispatched", &PortCounters::roce_dispatched},
    {"tcp_dispatched", &PortCounters::tcp_dispatched},
    {"rx_fault_dropped", &PortCounters::rx_fault_dropped},
    {"rx_fault_duplicated", &PortCounters::rx_fault_duplicated},
    {"rx_fault_reordered", &PortCounters::rx_fault_reordered},
    {"rx_fault_corrupted", &PortCounters::rx_fault_corrupted},
    {"tx_fault_dropped", &PortCounters::tx_fault_dropped},
    {"tx_fault_duplicated", &PortCounters::tx_fault_duplicated},
    {"tx_fault_reordered", &PortCounters::tx_fault_reordered},
    {"tx_fault_corrupted", &PortCounters::tx_fault_corrupted},
    {"rx_delayed", &PortCounters::rx_delayed},
    {"rx_delay_full", &PortCounters::rx_delay_full},
    {"rx_to_lanes", &PortCounters::rx_to_lanes},
    {"rx_from_lanes", &PortCounters::rx_from_lanes},
    {"rx_lane_full", &PortCounters::rx_lane_full},
}};

// Calls f(name, value) for every counter; drop reasons are named "drop_<reason>".
// `name` is only valid during the call.
template <typename F>
void for_each_counter(const PortCounters& c, F&& f) {
    for (const auto& field : kPortCounterFields) f(field.name, (c.*field.field).get());
    char buf[64];
    for (std::size_t i = 0; i < net::kDropReasons; ++i) {
        const auto reason = net::kDropNames[i];
        const std::string_view prefix = "drop_";
        std::size_t n = 0;
        for (char ch : prefix) buf[n++] = ch;
        for (char ch : reason) buf[n++] = ch;
        f(std::string_view(buf, n), c.drops[i].get());
    }
}

}  // namespace snic::daemon
