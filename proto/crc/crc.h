// The one engine for the wire protocols' 32-bit CRCs: CRC-32 (the RoCEv2 ICRC) and CRC-32C
// (iWARP's MPA), sharing one folding core; docs/CRC.md says how the constants are derived.
#pragma once

#include <cstdint>
#include <span>

namespace snic::crc {

// A reflected CRC with a 32-bit register: bytes enter least significant bit first, the
// register shifts right, and `Poly` is the generator without its x^32 term, bit-reversed
// (x^31's coefficient in bit 0). The register starts at all ones and the result is its
// complement, so compute(b) == ~update(kInit, b). Pure: no allocation, no state beyond
// which instructions this CPU has, decided once at start-up.
template <std::uint32_t Poly>
struct Reflected32 {
    static constexpr std::uint32_t kPoly = Poly;
    static constexpr std::uint32_t kInit = 0xffffffff;

    // Advances the register over `bytes`, the fastest way this CPU allows: folding with
    // carry-less multiplication 256 bytes a step (VPCLMULQDQ, AVX-512) or 64 (PCLMULQDQ),
    // then slicing-by-8 for what is left and on CPUs without either; CRC-32C takes what is
    // left, and inputs under 128 bytes, with SSE4.2's CRC32 instruction instead.
    static std::uint32_t update(std::uint32_t reg, std::span<const std::uint8_t> bytes) noexcept;
    // Copies src to dst (same length, not overlapping) and advances the register over the
    // bytes, in one pass: the result equals update(reg, src) and dst equals src. The same
    // paths as update(): each 64- or 16-byte block folded is stored to dst as it is loaded,
    // and the table loop copies the bytes it takes. Any alignment of either.
    static std::uint32_t update_copy(std::uint32_t reg, std::uint8_t* dst,
                                     std::span<const std::uint8_t> src) noexcept;
    // The same by slicing-by-8 only: the reference the folding is tested against.
    static std::uint32_t update_table(std::uint32_t reg,
                                      std::span<const std::uint8_t> bytes) noexcept;
    // Whether update() folds with carry-less multiplication on this CPU.
    static bool folds() noexcept;

    // The CRC of `bytes` in one go.
    static std::uint32_t compute(std::span<const std::uint8_t> bytes) noexcept {
        return ~update(kInit, bytes);
    }
};

// CRC-32/ISO-HDLC: Ethernet, zlib, the RoCEv2 ICRC. Check value 0xCBF43926.
using Crc32 = Reflected32<0xedb88320>;
// CRC-32C/ISCSI (Castagnoli): iSCSI digests, iWARP MPA (RFC 5044). Check value 0xE3069283.
using Crc32c = Reflected32<0x82f63b78>;

extern template struct Reflected32<0xedb88320>;
extern template struct Reflected32<0x82f63b78>;

// From this many bytes on, a sender or receiver that moves bytes and needs their CRC is
// better off with update_copy (one pass) than with a copy and then update; below it, where
// splitting one fold into pieces costs more than the second pass saves, it copies first and
// folds the whole once. RoCEv2's ICRC (proto/roce, kIcrcCopyMin) and MPA's FPDUs
// (proto/iwarp) both go by it.
inline constexpr std::uint32_t kCopyFoldMin = 256;

}  // namespace snic::crc
