// IPv4 header (RFC 791) and its header checksum.
#pragma once

#include <cstdint>
#include <span>

#include "proto/net/addr.h"
#include "proto/net/byteorder.h"
#include "proto/net/checksum.h"

namespace snic::net {

enum class IpProto : std::uint8_t { icmp = 1, tcp = 6, udp = 17 };

struct Ipv4Hdr {
    std::uint8_t version_ihl;
    std::uint8_t tos;
    Be16 total_length;
    Be16 id;
    Be16 frag;  // flags (3 bits) and fragment offset (13 bits)
    std::uint8_t ttl;
    std::uint8_t proto;
    Be16 checksum;
    Be32 src;
    Be32 dst;

    constexpr std::uint8_t version() const { return version_ihl >> 4; }
    constexpr std::uint16_t header_length() const { return (version_ihl & 0x0f) * 4u; }
    constexpr bool is_fragment() const {
        return (frag.host() & (kMoreFragments | kOffsetMask)) != 0;
    }

    static constexpr std::uint16_t kDontFragment = 0x4000;
    static constexpr std::uint16_t kMoreFragments = 0x2000;
    static constexpr std::uint16_t kOffsetMask = 0x1fff;
};
static_assert(sizeof(Ipv4Hdr) == 20 && alignof(Ipv4Hdr) == 1);

inline constexpr std::uint16_t kIpv4MinHdrLen = sizeof(Ipv4Hdr);
inline constexpr std::uint8_t kDefaultTtl = 64;

// The bytes of a header of `header_length` bytes starting at h.
inline std::span<const std::uint8_t> ipv4_header_bytes(const Ipv4Hdr& h) {
    return {reinterpret_cast<const std::uint8_t*>(&h), h.header_length()};
}

// Recomputes and stores the header checksum over the whole header (options included).
inline void ipv4_set_checksum(Ipv4Hdr& h) {
    h.checksum = 0;
    h.checksum = csum_finish(csum_add(ipv4_header_bytes(h)));
}

// Writes an option-less header with DF set and a valid checksum.
inline void write_ipv4(Ipv4Hdr& h, Ipv4Addr src, Ipv4Addr dst, IpProto proto,
                       std::uint16_t payload_length, std::uint16_t id = 0) {
    h.version_ihl = 0x45;
    h.tos = 0;
    h.total_length = static_cast<std::uint16_t>(kIpv4MinHdrLen + payload_length);
    h.id = id;
    h.frag = Ipv4Hdr::kDontFragment;
    h.ttl = kDefaultTtl;
    h.proto = static_cast<std::uint8_t>(proto);
    h.src = src.value;
    h.dst = dst.value;
    ipv4_set_checksum(h);
}

// The partial sum of the IPv4 pseudo-header (RFC 768, RFC 9293) for a transport checksum.
inline std::uint32_t ipv4_pseudo_sum(Ipv4Addr src, Ipv4Addr dst, IpProto proto,
                                     std::uint16_t l4_length) {
    std::uint32_t sum = (src.value >> 16) + (src.value & 0xffff);
    sum += (dst.value >> 16) + (dst.value & 0xffff);
    sum += static_cast<std::uint8_t>(proto);
    sum += l4_length;
    return sum;
}

}  // namespace snic::net
