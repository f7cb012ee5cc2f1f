// Bring-up of DPDK's EAL for snicd: argument handling, DPDK's log routed into
// spdlog, and one clear error line when initialisation fails.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace snic::daemon {

struct SplitArgs {
    std::vector<std::string> eal;  // argv[0] first
    std::vector<std::string> app;  // after "--"; everything when there is no "--"
};

SplitArgs split_args(int argc, char** argv);

// Adds --file-prefix snic-<name> unless the EAL arguments choose a prefix or --in-memory.
void add_default_file_prefix(std::vector<std::string>& eal, std::string_view name);

// In a build with AddressSanitizer only: adds --base-virtaddr kAsanBaseVirtaddr unless the EAL
// arguments choose one. EAL's own hint (4 GiB) lies in ASan's shadow gap, so the kernel puts
// DPDK's memory among the libraries instead, and a secondary process (dpdk-dumpcap), which
// must map it at the same addresses, finds them taken by its own libraries. ASan's high
// application memory begins at 0x10007fff8000; 32 TiB is inside it, and free in a process
// without ASan too.
inline constexpr std::string_view kAsanBaseVirtaddr = "0x200000000000";
void add_sanitizer_base_virtaddr(std::vector<std::string>& eal);

// Routes DPDK's log into spdlog (logger "dpdk") from now on.
void route_dpdk_log();

// rte_eal_init(); on failure the error carries DPDK's own last error message.
Status eal_init(const std::vector<std::string>& eal);

// The first error lines DPDK logged during eal_init() ("" if none): a device that
// failed to probe does not fail the initialisation, but explains a missing port.
std::string eal_errors();

}  // namespace snic::daemon
