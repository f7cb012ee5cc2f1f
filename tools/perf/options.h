// snic-perf's command line: the tests it knows and the options of one run, parsed
// (a usage error exits 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace snic::perf {

enum class Test { send_lat, write_lat, read_lat, atomic_lat, send_bw, write_bw, read_bw };

struct TestInfo {
    std::string_view name;
    Test test;
    bool latency;
};
inline constexpr TestInfo kTests[] = {
    {"send_lat", Test::send_lat, true}, {"write_lat", Test::write_lat, true},
    {"read_lat", Test::read_lat, true}, {"atomic_lat", Test::atomic_lat, true},
    {"send_bw", Test::send_bw, false},  {"write_bw", Test::write_bw, false},
    {"read_bw", Test::read_bw, false},
};

constexpr std::uint32_t kDefaultInline = 220;  // perftest's default -I

struct Options {
    const TestInfo* test = nullptr;
    std::vector<std::uint32_t> sizes;
    std::uint32_t iters = 0;  // 0: the test's default
    std::uint32_t warmup = 0;
    bool warmup_set = false;
    std::string device, peer_device;
    int gid_index = 0;
    std::uint32_t qps = 1;
    std::uint32_t tx_depth = 128;
    std::uint32_t inline_size = kDefaultInline;
    bool inline_set = false;  // -I given: the device must take it as is
    std::uint16_t port = 18515;
    bool gbits = false;
    std::uint32_t mtu = 0;  // 0: the port's active MTU
    bool json = false;
    bool loopback = false;
    bool rdma_cm = false;   // -R: QPs created and connected through rdma_cm
    std::string source_ip;  // -R client: the address to connect from (default: -d's)
    std::string listen_ip;  // -R server: the address to listen on (default: -d's)
    bool histogram = false;
    std::string samples;
    std::optional<std::string> server;       // the client's peer
    std::vector<std::uint32_t> idle_qps{0};  // measure beside each of these many idle QPs
};

// Parses the command line; prints the usage and exits 0 on -h, exits 2 on a usage error.
Options parse_options(int argc, char** argv);

}  // namespace snic::perf
