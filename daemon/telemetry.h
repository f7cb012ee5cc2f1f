// snicd's DPDK telemetry commands (/snic/info, /snic/ports, /snic/port_stats,<id>),
// read with dpdk-telemetry.py from a running daemon.
#pragma once

#include <string>
#include <vector>

namespace snic::daemon {

class Port;

struct TelemetryInfo {
    std::string name;
    std::vector<const Port*> ports;  // must outlive the daemon's telemetry
};

// Registers the commands; `info` stays the source of their answers.
void register_telemetry(const TelemetryInfo& info);

// Stops answering (the ports are about to go).
void unregister_telemetry();

}  // namespace snic::daemon
