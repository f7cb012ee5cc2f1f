// The 40-byte GRH area at the front of every UD receive buffer (IBA 11.4.1.1: a UD receive
// buffer starts with room for the GRH, filled when the packet had one). A RoCEv2 packet over
// IPv4 has no GRH: its place holds 20 reserved (zero) bytes and then the packet's IPv4 header,
// as RoCEv2 NICs and the Linux soft-RoCE driver write it and as libibverbs'
// ibv_init_ah_from_wc reads it back (an IPv4 header is told from a GRH by its version nibble).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "proto/net/addr.h"
#include "proto/net/ipv4.h"

namespace snic::roce {

inline constexpr std::size_t kGrhLen = 40;
inline constexpr std::size_t kGrhIpv4Offset = kGrhLen - net::kIpv4MinHdrLen;  // 20

// Writes the GRH area of a packet that came in `ipv4_header` (its first 20 bytes; options,
// which RoCEv2 senders do not use, are left out).
inline void write_grh_ipv4(std::span<std::uint8_t, kGrhLen> out,
                           std::span<const std::uint8_t, net::kIpv4MinHdrLen> ipv4_header) {
    std::memset(out.data(), 0, kGrhIpv4Offset);
    std::memcpy(out.data() + kGrhIpv4Offset, ipv4_header.data(), net::kIpv4MinHdrLen);
}

// What a GRH area written by write_grh_ipv4 says: the IPv4 header's source and destination,
// or nullopt when the area does not hold an IPv4 header (reserved bytes not zero, version
// not 4).
struct GrhIpv4 {
    net::Ipv4Addr src, dst;
    std::uint8_t tos = 0;
};
inline std::optional<GrhIpv4> parse_grh_ipv4(std::span<const std::uint8_t, kGrhLen> in) {
    for (std::size_t i = 0; i < kGrhIpv4Offset; ++i)
        if (in[i] != 0) return std::nullopt;
    const std::uint8_t* ip = in.data() + kGrhIpv4Offset;
    if ((ip[0] >> 4) != 4) return std::nullopt;
    auto load = [](const std::uint8_t* p) {
        return net::Ipv4Addr{(std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
                             (std::uint32_t{p[2]} << 8) | p[3]};
    };
    return GrhIpv4{load(ip + 12), load(ip + 16), ip[1]};
}

}  // namespace snic::roce
