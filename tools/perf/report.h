// snic-perf's output: one size's latency or bandwidth figures, as a table (perftest's
// columns) or one JSON object a line.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/perf/options.h"
#include "tools/perf/runs.h"

namespace snic::perf {

// Prints the round trips `us` of one size (sorted on the way); writes --samples first.
void print_latency(const Options& o, std::uint32_t size, std::uint32_t mtu, std::uint32_t idle,
                   std::vector<double>& us, bool header);
// Prints the bandwidth and message rate of one size.
void print_bandwidth(const Options& o, std::uint32_t size, std::uint32_t mtu, std::uint32_t idle,
                     const BwResult& r, bool header);

}  // namespace snic::perf
