// snicd's DPDK telemetry commands, read with dpdk-telemetry.py from a running daemon:
//   /snic/info, /snic/ports, /snic/port_stats,<port id>   the daemon and its ports
//   /snic/<transport>_stats,<port id>                     a port's transport (/snic/roce_stats)
//   /snic/qps, /snic/qp,<qpn>                             the sessions' QPs
//   /snic/tcp_stats,<port id>                             snic's TCP on a port: its counters
//   /snic/tcp_conns,<port id>                             its listeners and connections
//
// The callbacks run on DPDK's telemetry threads. Counters they read directly (relaxed atomics
// each lcore writes). The QPs live in the client sessions, whose tables only the control
// thread may walk: for those the callback asks the control thread (daemon/control/control_queue.h)
// and waits for its answer, at most a second; no callback takes anything an lcore takes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "shm/control_abi.h"

namespace snic::daemon {

class GsiPort;

class Port;
class TcpService;
class XdpMaps;
class Transport;

struct TelemetryInfo {
    std::string name;
    std::vector<const Port*> ports;  // must outlive the daemon's telemetry
    // Each port's transport, in the order of `ports` (nullptr: none); must outlive it too.
    std::vector<const Transport*> transports;  // per port: RoCEv2's
    std::vector<const Transport*> iwarp;       // per port: iWARP's
    // Per port of several queues: the RoCEv2 and iWARP transports of its lanes past the
    // first, whose counters /snic/roce_stats and /snic/iwarp_stats add to lane 0's.
    std::vector<std::vector<const Transport*>> roce_lanes;
    std::vector<std::vector<const Transport*>> iwarp_lanes;
    // Each port's QP1 bridge (the CM's MADs), in the order of `ports`; must outlive it too.
    std::vector<const GsiPort*> gsi;
    // Each shared-address port's XDP program, in the order of `ports` (nullptr: not shared);
    // must outlive it too.
    std::vector<const XdpMaps*> xdp;
    // The sessions' QPs as the control thread answers for them (ControlServer::ask_qps and
    // ask_qp, with their bound): every QP by increasing number, and one in full. Unset: the
    // QP commands answer nothing.
    std::function<Result<std::vector<shm::QpSummary>>()> qps;
    std::function<Result<shm::QpReply>(std::uint32_t qpn)> qp;
    // Each port's TCP by lane, in the order of `ports` (empty: none); must outlive it too.
    std::vector<std::vector<const TcpService*>> tcp;
    // The rows of the port at an index of `ports` (asked of its lcore through the control
    // thread, bounded); nullopt when no answer came. Unset: /snic/tcp_conns answers nothing.
    std::function<std::optional<std::vector<shm::TcpConnInfo>>(std::uint32_t port_index)> tcp_rows;
};

// Registers the commands; `info` stays the source of their answers.
void register_telemetry(const TelemetryInfo& info);

// Stops answering (the ports are about to go).
void unregister_telemetry();

}  // namespace snic::daemon
