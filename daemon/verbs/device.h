// A daemon port as RDMA devices: what a session opens, what query_port reports, and each
// device's transport (its rules, and its datapath on the port's lcore). A port has a device
// per transport it serves, named "<daemon name>_<port index>" for RoCEv2 and
// "<daemon name>_iw<port index>" for iWARP.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/verbs/transport.h"
#include "proto/net/addr.h"
#include "shm/control_abi.h"

namespace snic::daemon {

struct LinkInfo {
    bool up = false;
    std::uint32_t speed_mbps = 0;  // 0: unknown
};

struct Device {
    std::string name;                       // empty: the port has no device of this transport
    const TransportRules* rules = nullptr;  // set when the device exists
    // Runs the device's QPs on the port's lcore; none in unit tests that need no datapath.
    Transport* transport = nullptr;
    // A port of several queues: each lane's transport, lane 0's (`transport`) first; empty
    // when `transport` is the only one. A session's QPs, CQs and SRQs all run on one lane.
    std::vector<Transport*> lanes;
    // Control thread: the sessions open on each lane.
    mutable std::vector<std::uint32_t> lane_sessions;

    // Control thread: the lane a new session runs on, the one with fewest sessions open
    // (the lowest of those), counted until leave().
    std::size_t join() const {
        if (lanes.empty()) return 0;
        lane_sessions.resize(lanes.size());
        std::size_t best = 0;
        for (std::size_t i = 1; i < lanes.size(); ++i)
            if (lane_sessions[i] < lane_sessions[best]) best = i;
        ++lane_sessions[best];
        return best;
    }
    void leave(std::size_t lane) const {
        if (lane < lane_sessions.size() && lane_sessions[lane] > 0) --lane_sessions[lane];
    }
    Transport* transport_of(std::size_t lane) const {
        return lanes.empty() ? transport : lanes[lane];
    }
};

struct DevicePort {
    net::MacAddr mac;
    net::Ipv4Prefix ip;
    std::uint16_t mtu;                               // Ethernet MTU
    std::function<LinkInfo()> link;                  // the link now
    std::array<Device, shm::kTransports> devices{};  // by transport (shm::kTransportRoce, ...)

    // The port's device of `transport`, or nullptr.
    const Device* device(std::uint32_t transport) const {
        if (transport >= devices.size() || devices[transport].name.empty()) return nullptr;
        return &devices[transport];
    }
};

// The EUI-64 node GUID of a port MAC, as verbs returns it (big-endian in memory).
std::uint64_t node_guid_from_mac(const net::MacAddr& mac);

}  // namespace snic::daemon
