// Link and network addresses: Ethernet MAC, IPv4 address and prefix, with text forms.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace snic::net {

struct MacAddr {
    std::array<std::uint8_t, 6> bytes;

    static constexpr MacAddr broadcast() { return {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}; }
    static constexpr MacAddr zero() { return {{0, 0, 0, 0, 0, 0}}; }
    constexpr bool is_broadcast() const { return *this == broadcast(); }
    constexpr bool is_multicast() const { return (bytes[0] & 1) != 0; }
    constexpr bool is_zero() const { return *this == zero(); }
    friend constexpr bool operator==(const MacAddr&, const MacAddr&) = default;

    // "aa:bb:cc:dd:ee:ff" (case-insensitive); nullopt when malformed.
    static std::optional<MacAddr> parse(std::string_view text);
    std::string to_string() const;
};
static_assert(sizeof(MacAddr) == 6 && alignof(MacAddr) == 1);

// An IPv4 address as a host-order number; wire fields are Be32.
struct Ipv4Addr {
    std::uint32_t value = 0;

    friend constexpr bool operator==(Ipv4Addr, Ipv4Addr) = default;
    // Dotted quad, strictly four decimal octets; nullopt when malformed.
    static std::optional<Ipv4Addr> parse(std::string_view text);
    std::string to_string() const;
};

// The IPv4 address of an IPv4-mapped IPv6 address or GID (::ffff:a.b.c.d, RFC 4291 2.5.5.2),
// or nullopt for any other.
constexpr std::optional<Ipv4Addr> ipv4_from_mapped(const std::uint8_t (&gid)[16]) {
    for (int i = 0; i < 10; ++i)
        if (gid[i] != 0) return std::nullopt;
    if (gid[10] != 0xff || gid[11] != 0xff) return std::nullopt;
    return Ipv4Addr{std::uint32_t{gid[12]} << 24 | std::uint32_t{gid[13]} << 16 |
                    std::uint32_t{gid[14]} << 8 | gid[15]};
}

// The text form of a GID: a.b.c.d for an IPv4-mapped one, else IPv6's (RFC 5952).
std::string gid_to_string(const std::uint8_t (&gid)[16]);

struct Ipv4Prefix {
    Ipv4Addr addr;
    std::uint8_t length = 32;

    constexpr std::uint32_t mask() const {
        return length == 0 ? 0u : ~std::uint32_t{0} << (32 - length);
    }
    constexpr bool contains(Ipv4Addr a) const { return ((a.value ^ addr.value) & mask()) == 0; }
    friend constexpr bool operator==(const Ipv4Prefix&, const Ipv4Prefix&) = default;
    // "a.b.c.d/len" with len 0..32; nullopt when malformed.
    static std::optional<Ipv4Prefix> parse(std::string_view text);
    std::string to_string() const;
};

}  // namespace snic::net
