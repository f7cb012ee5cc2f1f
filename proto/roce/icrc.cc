#include "proto/roce/icrc.h"

#include <array>
#include <cstring>

#include "proto/roce/bth.h"

namespace snic::roce {
namespace {

inline std::uint16_t load_be16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

constexpr std::size_t kLrhOnes = 8;
constexpr std::size_t kIpv4MinHdr = 20;
constexpr std::size_t kIpv4MaxHdr = 60;
constexpr std::size_t kIpv6Hdr = 40;
constexpr std::size_t kUdpHdr = 8;
constexpr std::uint8_t kProtoUdp = 17;

}  // namespace

std::optional<IcrcStart> icrc_begin(std::span<const std::uint8_t> l3) noexcept {
    if (l3.empty()) return std::nullopt;
    // The pseudo-packet's headers, masked in a copy: at most 8 + 60 + 8 + 12 bytes.
    std::array<std::uint8_t, kLrhOnes + kIpv4MaxHdr + kUdpHdr + kBthLen> pseudo;
    std::uint8_t* ip = pseudo.data() + kLrhOnes;
    std::size_t ip_len = 0;
    std::size_t ip_end = 0;
    switch (l3[0] >> 4) {
        case 4: {
            ip_len = (l3[0] & 0x0f) * std::size_t{4};
            if (ip_len < kIpv4MinHdr || l3.size() < ip_len + kUdpHdr + kBthLen) return std::nullopt;
            if (l3[9] != kProtoUdp) return std::nullopt;
            ip_end = load_be16(&l3[2]);
            std::memcpy(ip, l3.data(), ip_len);
            ip[1] = 0xff;            // TOS: DSCP and ECN
            ip[8] = 0xff;            // TTL
            ip[10] = ip[11] = 0xff;  // header checksum
            break;
        }
        case 6: {
            ip_len = kIpv6Hdr;
            if (l3.size() < ip_len + kUdpHdr + kBthLen) return std::nullopt;
            if (l3[6] != kProtoUdp) return std::nullopt;  // extension headers: unsupported
            ip_end = kIpv6Hdr + load_be16(&l3[4]);
            std::memcpy(ip, l3.data(), ip_len);
            ip[0] |= 0x0f;                 // traffic class, high nibble
            ip[1] = ip[2] = ip[3] = 0xff;  // traffic class, low nibble; flow label
            ip[7] = 0xff;                  // hop limit
            break;
        }
        default:
            return std::nullopt;
    }
    const std::size_t bth_end = ip_len + kUdpHdr + kBthLen;
    if (ip_end < bth_end + kIcrcLen) return std::nullopt;

    std::memset(pseudo.data(), 0xff, kLrhOnes);
    std::uint8_t* udp = ip + ip_len;
    std::memcpy(udp, l3.data() + ip_len, kUdpHdr + kBthLen);
    udp[6] = udp[7] = 0xff;                  // UDP checksum
    udp[kUdpHdr + kBthResv8aOffset] = 0xff;  // BTH resv8a: FECN, BECN, reserved
    const std::size_t pseudo_len = kLrhOnes + bth_end;
    return IcrcStart{crc32_update(kCrc32Init, {pseudo.data(), pseudo_len}),
                     static_cast<std::uint16_t>(bth_end), static_cast<std::uint16_t>(ip_end)};
}

namespace {

// The computed ICRC and the offset of the one on the wire.
struct Computed {
    std::uint32_t icrc;
    std::size_t at;
};

std::optional<Computed> compute(std::span<const std::uint8_t> l3) noexcept {
    const auto start = icrc_begin(l3);
    if (!start || start->ip_end > l3.size()) return std::nullopt;
    const std::size_t at = start->ip_end - kIcrcLen;
    return Computed{~crc32_update(start->reg, l3.subspan(start->bth_end, at - start->bth_end)), at};
}

}  // namespace

std::optional<std::uint32_t> icrc_compute(std::span<const std::uint8_t> l3) noexcept {
    const auto c = compute(l3);
    if (!c) return std::nullopt;
    return c->icrc;
}

bool icrc_verify(std::span<const std::uint8_t> l3) noexcept {
    const auto c = compute(l3);
    return c && c->icrc == icrc_load(&l3[c->at]);
}

bool icrc_fill(std::span<std::uint8_t> l3) noexcept {
    const auto c = compute(l3);
    if (c) icrc_store(&l3[c->at], c->icrc);
    return c.has_value();
}

}  // namespace snic::roce
