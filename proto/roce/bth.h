// The Base Transport Header (IBA vol 1 §9.2), first of every RoCEv2 UDP payload, and the
// 24-bit big-endian field type its PSN and QPN fields (and those of DETH and AETH) use.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "proto/net/byteorder.h"

namespace snic::roce {

inline constexpr std::uint32_t kMask24 = 0x00ffffff;

// A 24-bit big-endian field (PSN, QPN, MSN, source QP). Alignment 1, like net::Be<T>;
// set() keeps the low 24 bits of its argument.
class Be24 {
  public:
    constexpr Be24() = default;
    constexpr Be24(std::uint32_t host_value) noexcept { set(host_value); }  // NOLINT: implicit

    constexpr std::uint32_t host() const noexcept {
        return std::uint32_t{bytes_[0]} << 16 | std::uint32_t{bytes_[1]} << 8 | bytes_[2];
    }
    constexpr void set(std::uint32_t host_value) noexcept {
        bytes_[0] = static_cast<std::uint8_t>(host_value >> 16);
        bytes_[1] = static_cast<std::uint8_t>(host_value >> 8);
        bytes_[2] = static_cast<std::uint8_t>(host_value);
    }
    friend constexpr bool operator==(const Be24&, const Be24&) = default;

  private:
    std::array<std::uint8_t, 3> bytes_;
};
static_assert(sizeof(Be24) == 3 && alignof(Be24) == 1);
static_assert(Be24{0x123456}.host() == 0x123456);
static_assert(Be24{0xff123456}.host() == 0x123456);

// BTH, 12 bytes:
//   byte 0      OpCode
//   byte 1      SE(7) | MigReq(6) | PadCnt(5:4) | TVer(3:0)
//   bytes 2-3   P_Key
//   byte 4      FECN(7) | BECN(6) | reserved(5:0): the byte IBA calls resv8a; ICRC masks
//               all eight bits (FECN/BECN were carved out of it by the congestion annex)
//   bytes 5-7   DestQP
//   byte 8      AckReq(7) | reserved(6:0)
//   bytes 9-11  PSN
struct Bth {
    std::uint8_t opcode;
    std::uint8_t flags;
    net::Be16 pkey;
    std::uint8_t resv8a;
    Be24 dest_qp;
    std::uint8_t ack_req_byte;
    Be24 psn;

    static constexpr std::uint8_t kSolicited = 0x80;
    static constexpr std::uint8_t kMigReq = 0x40;
    static constexpr std::uint8_t kPadShift = 4;
    static constexpr std::uint8_t kPadMask = 0x30;
    static constexpr std::uint8_t kTverMask = 0x0f;
    static constexpr std::uint8_t kFecn = 0x80;
    static constexpr std::uint8_t kBecn = 0x40;
    static constexpr std::uint8_t kAckReq = 0x80;

    constexpr bool solicited() const { return (flags & kSolicited) != 0; }
    constexpr bool mig_req() const { return (flags & kMigReq) != 0; }
    constexpr std::uint8_t pad_count() const { return (flags & kPadMask) >> kPadShift; }
    constexpr std::uint8_t tver() const { return flags & kTverMask; }
    constexpr bool fecn() const { return (resv8a & kFecn) != 0; }
    constexpr bool becn() const { return (resv8a & kBecn) != 0; }
    constexpr bool ack_req() const { return (ack_req_byte & kAckReq) != 0; }

    // Writes bytes 1 (SE, MigReq, PadCnt; TVer 0), 4 (FECN, BECN; reserved bits 0) and 8.
    constexpr void set_flags(bool se, bool mig_req, std::uint8_t pad, bool fecn, bool becn,
                             bool ack_req) {
        flags = static_cast<std::uint8_t>((se ? kSolicited : 0) | (mig_req ? kMigReq : 0) |
                                          ((pad << kPadShift) & kPadMask));
        resv8a = static_cast<std::uint8_t>((fecn ? kFecn : 0) | (becn ? kBecn : 0));
        ack_req_byte = ack_req ? kAckReq : 0;
    }
};
static_assert(sizeof(Bth) == 12 && alignof(Bth) == 1);

inline constexpr std::size_t kBthLen = sizeof(Bth);
inline constexpr std::size_t kBthResv8aOffset = 4;     // the byte the ICRC masks
inline constexpr std::uint8_t kTransportVersion = 0;   // TVer of IBA 1.x
inline constexpr std::uint16_t kDefaultPkey = 0xffff;  // full member of the default partition

}  // namespace snic::roce
