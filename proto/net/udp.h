// UDP (RFC 768) header and checksum.
#pragma once

#include <cstdint>
#include <span>

#include "proto/net/addr.h"
#include "proto/net/byteorder.h"
#include "proto/net/ethernet.h"
#include "proto/net/ipv4.h"

namespace snic::net {

struct UdpHdr {
    Be16 src_port;
    Be16 dst_port;
    Be16 length;
    Be16 checksum;  // 0: not computed
};
static_assert(sizeof(UdpHdr) == 8 && alignof(UdpHdr) == 1);

inline constexpr std::uint16_t kUdpHdrLen = sizeof(UdpHdr);
inline constexpr std::uint16_t kRoceV2Port = 4791;

// The checksum of a UDP datagram (header and payload, `datagram`) with the checksum field zero;
// a computed 0 is sent as 0xffff (RFC 768).
std::uint16_t udp_checksum(Ipv4Addr src, Ipv4Addr dst, std::span<const std::uint8_t> datagram);

// True when the datagram's checksum is absent (0) or verifies.
bool udp_checksum_ok(Ipv4Addr src, Ipv4Addr dst, std::span<const std::uint8_t> datagram);

struct UdpFlow {
    MacAddr src_mac, dst_mac;
    Ipv4Addr src_ip, dst_ip;
    std::uint16_t src_port = 0, dst_port = 0;
};

inline constexpr std::size_t kUdpFrameOverhead = kEthHdrLen + kIpv4MinHdrLen + kUdpHdrLen;

// Writes Ethernet, IPv4 and UDP headers in front of a payload already at
// out[kUdpFrameOverhead ...); computes the UDP checksum when `checksum` is set.
// Returns the frame length, or 0 if `out` is too small or the datagram too long.
std::size_t build_udp_frame(std::span<std::uint8_t> out, const UdpFlow& flow,
                            std::uint16_t payload_length, bool checksum);

}  // namespace snic::net
