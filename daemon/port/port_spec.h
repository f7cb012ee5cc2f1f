// One --port as the command line gives it, and the burst bounds of the port's loop: what a
// port needs from snicd's configuration (daemon/config.h parses it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "daemon/port/fault.h"
#include "proto/net/addr.h"

namespace snic::daemon {

struct PortSpec {
    std::string port;  // DPDK port id ("0") or device name ("net_af_packet0", "wire0")
    // A shared-address port (iface=IF,shared): snicd drives the kernel interface IF through
    // AF_XDP beside the kernel, with IF's address, prefix and MTU; `port` is the PMD's device
    // snicd makes for it, `ifindex` IF's index once snicd has looked it up.
    std::string iface;
    bool shared = false;
    int ifindex = 0;
    // fallback=A.B.C.D/LEN: where IF cannot be shared (no XDP sockets), the port runs on IF
    // with this address of snicd's own instead, not shared (net_af_packet).
    std::optional<net::Ipv4Prefix> fallback;
    net::Ipv4Prefix ip;
    std::optional<net::MacAddr> mac;
    std::optional<std::uint16_t> mtu;
    FaultSpec fault;       // injected faults, none by default
    bool offloads = true;  // offloads=off: checksums in software even where the device offers them
    // queues=N: the port's receive and transmit queues, each polled by an lcore of its own
    // (a lane, port.h); 1..kMaxQueues.
    std::uint16_t queues = 1;

    // How a message names a shared-address port: the option as the user gave it.
    std::string shared_option() const { return "--port iface=" + iface + ",shared"; }
};

// The checksum offloads a port uses (those its device offers, unless offloads=off): the
// IPv4 header's and TCP's on transmit, and on receive the device's verdict on IPv4 headers
// and TCP and UDP checksums (a frame it vouches for is not checked again).
struct PortOffloads {
    bool tx_ipv4_checksum = false;
    bool tx_tcp_checksum = false;
    bool rx_checksum = false;
    bool any() const { return tx_ipv4_checksum || tx_tcp_checksum || rx_checksum; }
    friend bool operator==(const PortOffloads&, const PortOffloads&) = default;
};

// The most queues (lanes) a port may have: queues=N.
inline constexpr std::uint16_t kMaxQueues = 8;

// Frames per rx poll and per tx flush, at most (--rx-burst, --tx-burst).
inline constexpr std::uint16_t kDefaultBurst = 32;
inline constexpr std::uint16_t kMaxBurst = 128;

// The smallest payload sent from where it lies (--tx-in-place; daemon/port/placed_tx.h).
// Measured (docs/PERFORMANCE.md): below 4 KiB packets the extra mbufs cost more than the copy.
inline constexpr std::uint32_t kDefaultPlacedBytes = 4096;
inline constexpr std::uint32_t kMinPlacedBytes = 256;
inline constexpr std::uint32_t kMaxPlacedBytes = 65535;

}  // namespace snic::daemon
