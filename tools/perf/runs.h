// snic-perf's measurements: who runs in this process, the latency and bandwidth loops of
// one size, and the check of the data that arrived.
#pragma once

#include <cstdint>
#include <vector>

#include "tools/perf/end.h"
#include "tools/perf/options.h"

namespace snic::perf {

class Oob;

// Who is running in this process: both ends (loopback), or one end and its role.
struct Run {
    const Options& o;
    End* a;              // loopback: the first device; else this process's end
    End* b;              // loopback: the second device; else nullptr
    bool client;         // this process starts ping-pongs and posts bandwidth WRs
    Oob* oob = nullptr;  // the peer process's connection, when there is one
};

// Fills `n` bytes at `p` with the pattern of a `size`-byte message.
void fill_pattern(std::uint8_t* p, std::uint32_t n, std::uint32_t size);

// One measured latency run of `size`; returns round trips in microseconds.
std::vector<double> run_latency(Run& r, std::uint32_t size);

struct BwResult {
    double seconds = 0;
    std::uint64_t messages = 0;
};

BwResult run_bandwidth(Run& r, std::uint32_t size);

// What arrived in the last message of `size`, checked where it landed; for atomic_lat, the
// target counter, which every fetch-and-add (warm-up included) incremented by 1.
void check_data(Run& r, std::uint32_t size, const std::uint8_t* landed, const char* where);

}  // namespace snic::perf
