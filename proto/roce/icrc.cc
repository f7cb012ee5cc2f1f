#include "proto/roce/icrc.h"

#include <array>
#include <cstring>
#include <utility>

#include "proto/roce/bth.h"

namespace snic::roce {
namespace {

inline std::uint16_t load_be16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

inline std::uint32_t load_be32(const std::uint8_t* p) {
    return std::uint32_t{load_be16(p)} << 16 | load_be16(p + 2);
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
    constexpr std::size_t kShortEnd = kIpv4MinHdr + kUdpHdr + kBthLen;
    static_assert(kShortEnd == IcrcFlow::kBthEnd && kLrhOnes + kShortEnd == IcrcFlow::kPseudoLen);
    if (l3[0] == 0x45 && l3.size() >= kShortEnd) {
        // IPv4 without options, every packet snicd and the kernel's drivers send: fixed
        // offsets, so the copy and masks are constant moves.
        if (l3[9] != kProtoUdp) return std::nullopt;
        const std::size_t ip_end = load_be16(&l3[2]);
        if (ip_end < kShortEnd + kIcrcLen) return std::nullopt;
        std::array<std::uint8_t, kLrhOnes + kShortEnd> pseudo;
        std::memset(pseudo.data(), 0xff, kLrhOnes);
        std::memcpy(pseudo.data() + kLrhOnes, l3.data(), kShortEnd);
        std::uint8_t* ip = pseudo.data() + kLrhOnes;
        ip[1] = ip[8] = ip[10] = ip[11] = 0xff;               // TOS, TTL, header checksum
        ip[kIpv4MinHdr + 6] = ip[kIpv4MinHdr + 7] = 0xff;     // UDP checksum
        ip[kIpv4MinHdr + kUdpHdr + kBthResv8aOffset] = 0xff;  // BTH resv8a
        return IcrcStart{crc32_update(kCrc32Init, pseudo), static_cast<std::uint16_t>(kShortEnd),
                         static_cast<std::uint16_t>(ip_end)};
    }
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

// From the start of the ICRC of the packet at l3, which must hold all of it.
std::optional<Computed> compute(std::span<const std::uint8_t> l3, const IcrcStart& start) noexcept {
    if (start.ip_end > l3.size()) return std::nullopt;
    const std::size_t at = start.ip_end - kIcrcLen;
    return Computed{~crc32_update(start.reg, l3.subspan(start.bth_end, at - start.bth_end)), at};
}

std::optional<Computed> compute(std::span<const std::uint8_t> l3) noexcept {
    const auto start = icrc_begin(l3);
    if (!start) return std::nullopt;
    return compute(l3, *start);
}

}  // namespace

std::optional<std::uint32_t> icrc_compute(std::span<const std::uint8_t> l3) noexcept {
    const auto c = compute(l3);
    if (!c) return std::nullopt;
    return c->icrc;
}

bool icrc_verify(std::span<const std::uint8_t> l3) noexcept {
    const auto start = icrc_begin(l3);
    return start && icrc_verify(l3, *start);
}

bool icrc_fill(std::span<std::uint8_t> l3) noexcept {
    const auto c = compute(l3);
    if (c) icrc_store(&l3[c->at], c->icrc);
    return c.has_value();
}

// ---- IcrcFlow ---------------------------------------------------------------------------------

namespace {

// The per-packet bytes of the IPv4 + UDP + BTH headers, as offsets in l3.
constexpr std::array<std::uint8_t, 12> kPacketFields = {
    2,  3,           // IPv4 total length
    4,  5,           // IPv4 identification
    24, 25,          // UDP length
    28, 29,          // BTH opcode; SE, MigReq, PadCnt, TVer
    36, 37, 38, 39,  // BTH AckReq; PSN
};
constexpr std::size_t kPseudoLead = kLrhOnes;  // l3 offset o is pseudo-header offset o + 8

// contribution[i][v]: what byte value v at l3 offset kPacketFields[i] adds to the register
// after the pseudo-header, from a register of zero (the linear part alone).
struct Contributions {
    std::array<std::array<std::uint32_t, 256>, kPacketFields.size()> by_field;

    Contributions() noexcept {
        std::array<std::uint8_t, IcrcFlow::kPseudoLen> block{};
        for (std::size_t i = 0; i < kPacketFields.size(); ++i) {
            const std::size_t at = kPseudoLead + kPacketFields[i];
            for (std::size_t v = 0; v < 256; ++v) {
                block[at] = static_cast<std::uint8_t>(v);
                by_field[i][v] = crc32_update_table(0, {block.data() + at, block.size() - at});
            }
            block[at] = 0;
        }
    }
};

const Contributions kContributions;

}  // namespace

std::optional<IcrcFlow> IcrcFlow::prepare(std::span<const std::uint8_t> l3) noexcept {
    if (l3.size() < kBthEnd || l3[0] != 0x45) return std::nullopt;
    const auto start = icrc_begin(l3);
    if (!start || start->bth_end != kBthEnd) return std::nullopt;
    // The packet's register less what its own per-packet fields added: the seed.
    IcrcFlow flow;
    flow.seed_ = start->reg ^ flow.fields(l3.data());
    return flow;
}

namespace {

template <std::size_t... I>
std::uint32_t fields_of(const std::uint8_t* l3, std::index_sequence<I...>) noexcept {
    return (kContributions.by_field[I][l3[kPacketFields[I]]] ^ ...);
}

}  // namespace

std::uint32_t IcrcFlow::fields(const std::uint8_t* l3) noexcept {
    return fields_of(l3, std::make_index_sequence<kPacketFields.size()>());
}

// ---- IcrcRxFlow -------------------------------------------------------------------------------

namespace {

// The l3 bytes that are neither masked nor per-packet: what a packet of the flow repeats.
constexpr std::array<std::uint8_t, 21> kInvariantBytes = {
    0,                               // IPv4 version, header length
    6,  7,                           // flags, fragment offset
    9,                               // protocol
    12, 13, 14, 15, 16, 17, 18, 19,  // source and destination addresses
    20, 21, 22, 23,                  // UDP ports
    30, 31,                          // BTH P_Key
    33, 34, 35,                      // BTH destination QP
};

// Five little-endian words over l3[0, 40): the invariant bytes' masks.
consteval std::array<std::uint64_t, 5> invariant_masks() {
    std::array<std::uint64_t, 5> m{};
    for (std::size_t i = 0; i < kInvariantBytes.size(); ++i) {
        const std::size_t at = kInvariantBytes[i];
        m[at / 8] |= std::uint64_t{0xff} << (8 * (at % 8));
    }
    return m;
}
constexpr std::array<std::uint64_t, 5> kInvariantMask = invariant_masks();

inline std::uint64_t load_le64(const std::uint8_t* p) {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;  // x86-64 and every target snicd builds for are little-endian
}

}  // namespace

std::optional<IcrcStart> IcrcRxFlow::begin(std::span<const std::uint8_t> l3) const noexcept {
    static_assert(IcrcFlow::kBthEnd == 8 * kInvariantMask.size());
    if (!learnt_ || l3.size() < IcrcFlow::kBthEnd) return std::nullopt;
    const std::uint8_t* p = l3.data();
    const auto word = [&](std::size_t k) {
        return (load_le64(p + 8 * k) & kInvariantMask[k]) ^ invariant_[k];
    };
    if ((word(0) | word(1) | word(2) | word(3) | word(4)) != 0) return std::nullopt;
    const std::size_t ip_end = load_be16(&l3[2]);
    if (ip_end < IcrcFlow::kBthEnd + kIcrcLen) return std::nullopt;  // as icrc_begin
    return IcrcStart{flow_.begin(p), static_cast<std::uint16_t>(IcrcFlow::kBthEnd),
                     static_cast<std::uint16_t>(ip_end)};
}

bool IcrcRxFlow::learn(std::span<const std::uint8_t> l3) noexcept {
    constexpr std::size_t kSource = 12;  // the IPv4 source address
    if (peer_ == 0 || l3.size() < kSource + 4 || load_be32(&l3[kSource]) != peer_) return false;
    learnt_ = false;
    const auto flow = IcrcFlow::prepare(l3);
    if (!flow) return false;
    for (std::size_t k = 0; k < kInvariantMask.size(); ++k)
        invariant_[k] = load_le64(l3.data() + 8 * k) & kInvariantMask[k];
    flow_ = *flow;
    learnt_ = true;
    return true;
}

}  // namespace snic::roce
