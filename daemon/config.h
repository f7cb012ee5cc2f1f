// snicd's own command line (the part after "--"): parsed into a Config, or a
// one-line error that names the option and the bad value.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "daemon/port/port_spec.h"
#include "proto/net/addr.h"

namespace snic::daemon {

// A built-in self-test between the first two ports (daemon/selftest.h).
struct SelftestSpec {
    std::string name;          // "arp-ping", "raw-ping", "raw-bw", "tcp-send" or "tcp-sink"
    std::uint32_t count = 10;  // round trips (pings) or messages (raw-bw)
    std::uint32_t size = 0;    // message bytes; 0: the test's default
    std::uint32_t warmup = 0;  // raw-ping: round trips before the measured ones
    bool json = false;         // the result as one JSON object
    std::string samples;       // raw-ping: write each round trip (us) to this file
    // tcp-send: the kernel (or any) TCP server to connect to, the bytes to send and the size
    // of the records they are sent in. tcp-sink: the port to listen on; `count` connections.
    net::Ipv4Addr dst_ip{};
    std::uint16_t dst_port = 0;
    std::uint16_t listen_port = 0;
    std::uint64_t bytes = 0;
    std::uint32_t record = 0;
    // Whether it runs between the first two ports (the others) or on the first alone (tcp-*).
    bool one_port() const { return name.starts_with("tcp-"); }
};
inline constexpr std::uint64_t kMaxSelftestBytes = std::uint64_t{1} << 40;
inline constexpr std::uint32_t kMaxSelftestSize = 8u << 20;

// snic's TCP on each port (iWARP's connections, the TCP self-tests): connections at once in
// any state, and with one remote address (--tcp-max-conns, --tcp-max-per-peer). A connection
// holds up to about 530 KiB at a 10 Gb/s port's default window (TcpStack::memory_per_connection
// and iWARP's receive buffers; they grow with --tcp-window-rtt and the link), touched as it is
// used: an idle one, with its iWARP QP, holds about 40 KiB (docs/SECURITY.md).
struct TcpLimits {
    std::uint32_t max_connections = 4096;
    std::uint32_t max_per_peer = 2048;
    // The retransmission timer's least value (--tcp-rto-min, ms; Linux's 200 ms by default).
    std::uint32_t rto_min_ms = 200;
    // The longest round trip (us) a connection's window fills at its port's link speed
    // (--tcp-window-rtt): buffers of twice that bandwidth-delay product (tcp_window_for).
    std::uint32_t window_rtt_us = 100;
};
inline constexpr std::uint32_t kMaxTcpConnections = 65535;  // TcpStack's and iWARP's handles

struct Config {
    std::string name = "snic";
    std::vector<PortSpec> ports;
    bool wire = false;
    // --no-xdp: shared-address ports are driven as on a kernel without XDP sockets.
    bool no_xdp = false;
    std::string ctrl_path;  // default /run/snic/<name>.sock
    mode_t ctrl_mode = 0660;
    std::string dev_dir = "/dev/infiniband";  // where device nodes go; empty: none
    std::uint32_t idle_backoff_us = 0;
    std::uint32_t arp_timeout_s = 60;
    std::uint16_t rx_burst = kDefaultBurst;  // frames a port's rx poll takes at most
    std::uint16_t tx_burst = kDefaultBurst;  // frames a port holds before it transmits them
    std::uint32_t tx_in_place = kDefaultPlacedBytes;  // payloads sent from place from; 0: off
    TcpLimits tcp;
    std::string log_level = "info";
    std::optional<SelftestSpec> selftest;
    bool help = false;
    bool version = false;
};

inline constexpr std::uint16_t kMinMtu = 68;
inline constexpr std::uint16_t kMaxMtu = 9000;
inline constexpr std::uint32_t kMaxIdleBackoffUs = 100'000;

Result<Config> parse_config(std::span<const std::string> args);

// Parses one --port value: <port>,ip=<a.b.c.d/len>[,mac=..][,mtu=..].
Result<PortSpec> parse_port_spec(std::string_view text);

std::string usage();

}  // namespace snic::daemon
