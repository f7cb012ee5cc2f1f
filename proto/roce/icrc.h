// The RoCEv2 Invariant CRC (IBA vol 1 §7.8.1, RoCEv2 annex A17, ICRC): the CRC-32 of the
// Ethernet FCS (reflected polynomial 0xEDB88320, register starting at all ones, result
// complemented) over a pseudo-packet that stands in for the IB fields a router may change:
//
//   8 bytes of 0xff                    (the LRH, all variant in IB; absent in RoCEv2)
//   IP header, variant fields as ones  (IPv4: TOS (DSCP+ECN), TTL, header checksum;
//                                       IPv6: traffic class, flow label, hop limit)
//   UDP header, checksum as ones
//   BTH, its byte 4 (resv8a: FECN, BECN, reserved) as ones
//   the rest of the UDP payload up to the ICRC (extension headers, payload, pad)
//
// It is the last 4 bytes of the UDP payload, stored least significant byte first (the CRC's
// bit order, as the Ethernet FCS is). The CRC arithmetic is proto/crc's. Pure: no allocation,
// no state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "proto/crc/crc.h"

namespace snic::roce {

inline constexpr std::size_t kIcrcLen = 4;
inline constexpr std::uint32_t kCrc32Init = crc::Crc32::kInit;

// The CRC-32 of proto/crc, under the names the ICRC's callers use. Advances a CRC-32
// register over `bytes`: start from kCrc32Init and complement the register at the end,
// crc32(b) == ~crc32_update(kCrc32Init, b).
inline std::uint32_t crc32_update(std::uint32_t reg, std::span<const std::uint8_t> bytes) noexcept {
    return crc::Crc32::update(reg, bytes);
}
// The same by slicing-by-8 only (the reference the folding is tested against).
inline std::uint32_t crc32_update_table(std::uint32_t reg,
                                        std::span<const std::uint8_t> bytes) noexcept {
    return crc::Crc32::update_table(reg, bytes);
}
// Whether crc32_update folds with carry-less multiplication on this CPU.
inline bool crc32_folds() noexcept {
    return crc::Crc32::folds();
}

inline std::uint32_t crc32(std::span<const std::uint8_t> bytes) noexcept {
    return crc::Crc32::compute(bytes);
}

// Where an ICRC computation stands after the masked headers.
struct IcrcStart {
    std::uint32_t reg;      // CRC register after the pseudo-header through the BTH
    std::uint16_t bth_end;  // offset in l3 of the first byte after the BTH: continue from here
    std::uint16_t ip_end;   // the IP packet's length per its header; the ICRC is its last 4 bytes
};

// Starts the ICRC of the IP packet at `l3`, which must hold at least the IP header, UDP
// header and BTH (the rest may be elsewhere: continue with crc32_update over the bytes from
// bth_end to ip_end - kIcrcLen, complement). nullopt unless IPv4 (any IHL) or IPv6 (no
// extension headers) carrying UDP, with the lengths consistent.
std::optional<IcrcStart> icrc_begin(std::span<const std::uint8_t> l3) noexcept;

// The ICRC that the IP packet at `l3` should carry. `l3` may extend past the IP packet
// (Ethernet padding is ignored); nullopt when it is not IPv4/IPv6 + UDP + BTH + ICRC.
std::optional<std::uint32_t> icrc_compute(std::span<const std::uint8_t> l3) noexcept;

// True when the ICRC on the wire equals the computed one.
bool icrc_verify(std::span<const std::uint8_t> l3) noexcept;
// The same from the start of its computation (icrc_begin's, or a flow's: IcrcRxFlow); false
// when the packet is longer than l3. Inline below: every received packet's.
inline bool icrc_verify(std::span<const std::uint8_t> l3, const IcrcStart& start) noexcept;

// Computes and stores the ICRC in the packet's last 4 bytes; false when icrc_compute fails.
// Call it after every other header field is final (but the masked ones).
bool icrc_fill(std::span<std::uint8_t> l3) noexcept;

// The ICRC of one flow, its invariant part folded once (CRC is linear). For a flow of
// IPv4 (no options) + UDP + BTH packets whose headers differ only in the per-packet fields
// (IPv4 total length and identification, UDP length, BTH bytes 0-1: opcode, SE, MigReq,
// PadCnt, TVer; byte 8: AckReq; the PSN), the register after a packet's masked pseudo-header
// is the flow's seed (the register of a packet of the flow with those fields zero) XOR what
// the fields themselves contribute, twelve bytes by table. That replaces masking and folding
// 48 bytes a packet.
class IcrcFlow {
  public:
    // The pseudo-header bytes from the LRH's ones through the BTH, and where the packet
    // continues after them in l3.
    static constexpr std::size_t kPseudoLen = 48;
    static constexpr std::size_t kBthEnd = 40;

    // From the headers of any packet of the flow (l3 at its IPv4 header); nullopt unless
    // IPv4 with a 20-byte header carrying UDP, with at least the BTH present.
    static std::optional<IcrcFlow> prepare(std::span<const std::uint8_t> l3) noexcept;

    // The register after the pseudo-header of the flow's packet at l3 (kBthEnd bytes, its
    // per-packet fields final): continue with crc32_update from l3 + kBthEnd, complement.
    std::uint32_t begin(const std::uint8_t* l3) const noexcept { return seed_ ^ fields(l3); }

    // The ICRC that the flow's IP packet at l3, `ip_length` bytes with the ICRC, should carry.
    std::uint32_t compute(const std::uint8_t* l3, std::size_t ip_length) const noexcept {
        return ~crc32_update(begin(l3), {l3 + kBthEnd, ip_length - kBthEnd - kIcrcLen});
    }

  private:
    // What the per-packet fields of the packet at l3 add to the register (from zero).
    static std::uint32_t fields(const std::uint8_t* l3) noexcept;

    std::uint32_t seed_ = 0;
};

// The same turned around, for the packets one connected QP receives from its peer: learnt
// from one of them whose ICRC was checked in full. A packet whose other covered header bytes
// (IPv4 version and header length, flags and fragment offset, protocol, addresses; the UDP
// ports; the P_Key and destination QP) equal the learnt packet's starts from that packet's
// IcrcFlow, its own per-packet fields folded in; the masked bytes may be anything. Any other
// packet is not of the flow (begin() says so) and is checked in full with icrc_begin.
class IcrcRxFlow {
  public:
    IcrcRxFlow() = default;  // learns from no one
    // Learns from packets whose IPv4 source is `peer` (host order) only.
    explicit IcrcRxFlow(std::uint32_t peer) noexcept : peer_(peer) {}

    // What icrc_begin(l3) gives, when the packet at l3 is of the learnt flow; else nullopt.
    std::optional<IcrcStart> begin(std::span<const std::uint8_t> l3) const noexcept;
    // Learns the flow of the peer's packet at l3 (its ICRC checked); false, and the flow
    // forgotten, unless IPv4 with a 20-byte header carrying UDP, with at least the BTH present.
    // A packet from anyone else changes nothing (false).
    bool learn(std::span<const std::uint8_t> l3) noexcept;
    bool learnt() const noexcept { return learnt_; }

  private:
    std::array<std::uint64_t, 5> invariant_{};  // the learnt headers' invariant bytes, in place
    IcrcFlow flow_;                             // the learnt packet's
    std::uint32_t peer_ = 0;                    // 0: nobody
    bool learnt_ = false;
};

constexpr std::uint32_t icrc_load(const std::uint8_t* p) noexcept {
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
           std::uint32_t{p[3]} << 24;
}

inline bool icrc_verify(std::span<const std::uint8_t> l3, const IcrcStart& start) noexcept {
    if (start.ip_end > l3.size()) return false;
    const std::size_t at = start.ip_end - kIcrcLen;
    return ~crc32_update(start.reg, l3.subspan(start.bth_end, at - start.bth_end)) ==
           icrc_load(&l3[at]);
}

constexpr void icrc_store(std::uint8_t* p, std::uint32_t icrc) noexcept {
    p[0] = static_cast<std::uint8_t>(icrc);
    p[1] = static_cast<std::uint8_t>(icrc >> 8);
    p[2] = static_cast<std::uint8_t>(icrc >> 16);
    p[3] = static_cast<std::uint8_t>(icrc >> 24);
}

}  // namespace snic::roce
