#include "daemon/telemetry.h"

#include <rte_telemetry.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cstring>

#include "daemon/port.h"

namespace snic::daemon {

namespace {

// DPDK telemetry callbacks take no context: they read this, published once.
std::atomic<const TelemetryInfo*> g_info{nullptr};

const Port* find_port(const TelemetryInfo& info, const char* params) {
    if (params == nullptr) return nullptr;
    unsigned id = 0;
    const char* end = params + std::strlen(params);
    auto [p, ec] = std::from_chars(params, end, id);
    if (ec != std::errc{} || p != end) return nullptr;
    for (const Port* port : info.ports)
        if (port->id() == id) return port;
    return nullptr;
}

int cmd_info(const char*, const char*, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_string(d, "name", info->name.c_str());
    rte_tel_data_add_dict_string(d, "version", SNIC_VERSION);
    rte_tel_data_add_dict_int(d, "pid", ::getpid());
    rte_tel_data_add_dict_int(d, "ports", static_cast<int>(info->ports.size()));
    return 0;
}

int cmd_ports(const char*, const char*, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    rte_tel_data_start_array(d, RTE_TEL_INT_VAL);
    for (const Port* p : info->ports) rte_tel_data_add_array_int(d, p->id());
    return 0;
}

int cmd_port_stats(const char*, const char* params, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    const Port* port = find_port(*info, params);
    if (port == nullptr) return -EINVAL;
    rte_tel_data_start_dict(d);
    for_each_counter(port->counters(), [d](std::string_view name, std::uint64_t v) {
        char key[RTE_TEL_MAX_STRING_LEN];
        const std::size_t n = std::min(name.size(), sizeof key - 1);
        std::memcpy(key, name.data(), n);
        key[n] = '\0';
        rte_tel_data_add_dict_u64(d, key, v);
    });
    return 0;
}

}  // namespace

void register_telemetry(const TelemetryInfo& info) {
    g_info.store(&info);
    rte_telemetry_register_cmd("/snic/info", cmd_info, "snicd name, version, pid, port count");
    rte_telemetry_register_cmd("/snic/ports", cmd_ports, "snicd port ids");
    rte_telemetry_register_cmd("/snic/port_stats", cmd_port_stats,
                               "snicd port counters and drops by reason. Parameters: int port_id");
}

void unregister_telemetry() { g_info.store(nullptr); }

}  // namespace snic::daemon
