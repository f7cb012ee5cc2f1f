#include "proto/net/addr.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstdio>

namespace snic::net {

namespace {

// Parses a decimal number of at most `max_digits` digits, no sign, no leading '+'.
std::optional<unsigned> parse_decimal(std::string_view s, std::size_t max_digits) {
    if (s.empty() || s.size() > max_digits) return std::nullopt;
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
}

std::optional<unsigned> parse_hex_byte(std::string_view s) {
    if (s.empty() || s.size() > 2) return std::nullopt;
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
}

}  // namespace

std::optional<MacAddr> MacAddr::parse(std::string_view text) {
    MacAddr mac{};
    for (std::size_t i = 0; i < 6; ++i) {
        std::size_t colon = text.find(':');
        std::string_view part = i < 5 ? text.substr(0, colon) : text;
        if (i < 5 && colon == std::string_view::npos) return std::nullopt;
        auto byte = parse_hex_byte(part);
        if (!byte) return std::nullopt;
        mac.bytes[i] = static_cast<std::uint8_t>(*byte);
        if (i < 5) text.remove_prefix(colon + 1);
    }
    return mac;
}

std::string MacAddr::to_string() const {
    char buf[18];
    std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1], bytes[2],
                  bytes[3], bytes[4], bytes[5]);
    return buf;
}

std::optional<Ipv4Addr> Ipv4Addr::parse(std::string_view text) {
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
        std::size_t dot = text.find('.');
        std::string_view part = i < 3 ? text.substr(0, dot) : text;
        if (i < 3 && dot == std::string_view::npos) return std::nullopt;
        auto octet = parse_decimal(part, 3);
        if (!octet || *octet > 255) return std::nullopt;
        value = (value << 8) | *octet;
        if (i < 3) text.remove_prefix(dot + 1);
    }
    return Ipv4Addr{value};
}

std::string Ipv4Addr::to_string() const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", value >> 24, (value >> 16) & 0xff,
                  (value >> 8) & 0xff, value & 0xff);
    return buf;
}

std::string gid_to_string(const std::uint8_t (&gid)[16]) {
    if (const auto v4 = ipv4_from_mapped(gid)) return v4->to_string();
    char buf[INET6_ADDRSTRLEN];
    return ::inet_ntop(AF_INET6, gid, buf, sizeof buf) != nullptr ? buf : "?";
}

std::optional<Ipv4Prefix> Ipv4Prefix::parse(std::string_view text) {
    std::size_t slash = text.find('/');
    if (slash == std::string_view::npos) return std::nullopt;
    auto addr = Ipv4Addr::parse(text.substr(0, slash));
    auto length = parse_decimal(text.substr(slash + 1), 2);
    if (!addr || !length || *length > 32) return std::nullopt;
    return Ipv4Prefix{*addr, static_cast<std::uint8_t>(*length)};
}

std::string Ipv4Prefix::to_string() const {
    return addr.to_string() + "/" + std::to_string(length);
}

}  // namespace snic::net
