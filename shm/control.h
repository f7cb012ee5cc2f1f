// Control messages between snicd and its clients (libsnic, snicctl) on the
// daemon's Unix SOCK_SEQPACKET socket: one request, one reply, each a single
// datagram that starts with CtrlHeader. Fixed-width fields, host byte order
// (both ends are on one host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace snic::shm {

inline constexpr std::uint32_t kCtrlMagic = 0x43494e53;  // "SNIC" in memory order
inline constexpr std::uint16_t kAbiVersion = 1;
inline constexpr std::size_t kMaxPorts = 32;
inline constexpr std::size_t kNameLen = 64;  // NUL-terminated strings

enum class CtrlOp : std::uint16_t {
    status = 1,  // -> StatusReply
};

struct CtrlHeader {
    std::uint32_t magic;
    std::uint16_t abi_version;
    std::uint16_t op;      // CtrlOp
    std::uint32_t seq;     // echoed in the reply
    std::int32_t status;   // replies: 0 or a positive errno (EPROTO: ABI mismatch, EINVAL, ...)
    std::uint32_t length;  // of the whole message, header included
    std::uint32_t reserved;
};
static_assert(sizeof(CtrlHeader) == 24 && std::is_trivially_copyable_v<CtrlHeader>);

struct PortInfo {
    std::uint16_t port_id;
    std::uint16_t mtu;
    std::uint8_t mac[6];
    std::uint8_t prefix_length;
    std::uint8_t link_up;
    std::uint32_t ipv4;  // host order
    std::uint32_t ndevices;
    char name[kNameLen];        // DPDK device name
    char devices[2][kNameLen];  // RDMA devices on this port (RoCEv2, iWARP)
};
static_assert(sizeof(PortInfo) == 20 + 3 * kNameLen && std::is_trivially_copyable_v<PortInfo>);

struct StatusReply {
    CtrlHeader hdr;
    char name[kNameLen];
    char version[16];
    std::uint32_t pid;
    std::uint32_t nports;
    PortInfo ports[kMaxPorts];
};
static_assert(std::is_trivially_copyable_v<StatusReply>);

// The largest message either side sends or accepts.
inline constexpr std::size_t kCtrlMaxMessage = sizeof(StatusReply);

}  // namespace snic::shm
