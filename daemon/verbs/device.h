// A daemon port as RDMA devices: what a session opens, what query_port reports, and each
// device's transport (its rules, and its datapath on the port's lcore). A port has a device
// per transport it serves, named "<daemon name>_<port index>" for RoCEv2 and
// "<daemon name>_iw<port index>" for iWARP.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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

// The lanes of a device whose connections come before its QPs (iWARP: a connection is a TCP
// connection on one lane's TCP, and the QP bound to it must run on that lane). rdma_cm knows
// the process that asks for a connection, not the verbs context its QP will be made in, so
// every session of one process runs on one lane: the one the process was given first, by a
// session or by the CM (a listener, a connect), whichever came first. A process is given the
// lane with fewest processes that have a session open on the device (the lowest of those):
// one that only listens there (rdma_cm's listeners listen on every device of their address)
// weighs nothing. A process keeps its lane while it lives; those found gone, with no session
// open, are forgotten when a new one comes.
class ProcessLanes {
  public:
    explicit ProcessLanes(std::size_t lanes) : processes_(lanes, 0) {}

    std::size_t lanes() const { return processes_.size(); }
    // The lane of process `pid` (given it now if it has none).
    std::size_t lane_of(std::int32_t pid);
    // A session of `pid` opens, or closes.
    std::size_t join(std::int32_t pid);
    void leave(std::int32_t pid);
    // The processes with a session open on each lane; every process it knows.
    const std::vector<std::uint32_t>& processes() const { return processes_; }
    std::size_t known() const { return by_pid_.size(); }

  private:
    struct Entry {
        std::size_t lane = 0;
        std::uint32_t sessions = 0;
    };
    // Forgets the processes with no session open that are gone.
    void forget_gone();
    std::vector<std::uint32_t> processes_;
    std::map<std::int32_t, Entry> by_pid_;
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
    // Set: a process's sessions all run on its lane (ProcessLanes), shared with the CM.
    std::shared_ptr<ProcessLanes> by_process;

    // Control thread: the lane a new session of process `pid` runs on, counted until
    // leave(): its process's with by_process, else the one with fewest sessions open (the
    // lowest of those).
    std::size_t join(std::int32_t pid) const {
        if (lanes.empty()) return 0;
        lane_sessions.resize(lanes.size());
        std::size_t best = 0;
        if (by_process) {
            best = by_process->join(pid);
        } else {
            for (std::size_t i = 1; i < lanes.size(); ++i)
                if (lane_sessions[i] < lane_sessions[best]) best = i;
        }
        ++lane_sessions[best];
        return best;
    }
    void leave(std::size_t lane, std::int32_t pid) const {
        if (lane < lane_sessions.size() && lane_sessions[lane] > 0) --lane_sessions[lane];
        if (by_process && !lanes.empty()) by_process->leave(pid);
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
