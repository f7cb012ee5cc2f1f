#include "proto/roce/icrc.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "proto/roce/bth.h"

namespace snic::roce {
namespace {

constexpr std::uint32_t kPolyReflected = 0xedb88320;

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] advances the register
// over byte b followed by k zero bytes, which lets the loop take 8 bytes per step.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables() {
    Tables t{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t r = b;
        for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ ((r & 1) ? kPolyReflected : 0);
        t[0][b] = r;
    }
    for (std::size_t k = 1; k < t.size(); ++k) {
        for (std::size_t b = 0; b < 256; ++b) {
            const std::uint32_t prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][prev & 0xff];
        }
    }
    return t;
}

constexpr Tables kTables = make_tables();
static_assert(kTables[0][1] == 0x77073096);  // the first entries of the well-known table
static_assert(kTables[0][255] == 0x2d02ef8d);

inline std::uint32_t load_le32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
           std::uint32_t{p[3]} << 24;
}

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

std::uint32_t crc32_update_table(std::uint32_t reg, std::span<const std::uint8_t> bytes) noexcept {
    const std::uint8_t* p = bytes.data();
    std::size_t n = bytes.size();
    while (n >= 8) {
        const std::uint32_t lo = load_le32(p) ^ reg;
        const std::uint32_t hi = load_le32(p + 4);
        reg = kTables[7][lo & 0xff] ^ kTables[6][(lo >> 8) & 0xff] ^ kTables[5][(lo >> 16) & 0xff] ^
              kTables[4][lo >> 24] ^ kTables[3][hi & 0xff] ^ kTables[2][(hi >> 8) & 0xff] ^
              kTables[1][(hi >> 16) & 0xff] ^ kTables[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) reg = kTables[0][(reg ^ *p++) & 0xff] ^ (reg >> 8);
    return reg;
}

#if defined(__x86_64__)
namespace {

// CRC-32 by folding with carry-less multiplication (Intel, "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ Instruction", 2009), in the bit-reflected domain of the
// Ethernet CRC. Four 128-bit accumulators fold 64 bytes a step (constants x^(512+-32) and
// x^(512+32) mod P), then fold into one (x^(128+-32), x^(128+32)), reduce 128 -> 64 bits,
// 64 -> 32 bits (x^64 mod P), and finish with a Barrett reduction (mu and P, reflected).
constexpr long long kFold2048Lo = 0x11542778a, kFold2048Hi = 0x1322d1430;
constexpr long long kFold512Lo = 0x154442bd4, kFold512Hi = 0x1c6e41596;
constexpr long long kFold128Lo = 0x1751997d0, kFold128Hi = 0x0ccaa009e;
constexpr long long kFold64 = 0x163cd6124;
constexpr long long kPoly = 0x1db710641, kMu = 0x1f7011641;

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i acc, __m128i k,
                                                             __m128i next) {
    const __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
    const __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i load(const std::uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// From four accumulators of consecutive 16-byte lanes (the register already folded in) and
// the n bytes after them (a multiple of 16): the CRC register.
__attribute__((target("pclmul,sse4.1"))) std::uint32_t crc32_fold_tail(__m128i a0, __m128i a1,
                                                                       __m128i a2, __m128i a3,
                                                                       const std::uint8_t* p,
                                                                       std::size_t n) {
    const __m128i k512 = _mm_set_epi64x(kFold512Hi, kFold512Lo);
    for (; n >= 64; p += 64, n -= 64) {
        a0 = fold(a0, k512, load(p));
        a1 = fold(a1, k512, load(p + 16));
        a2 = fold(a2, k512, load(p + 32));
        a3 = fold(a3, k512, load(p + 48));
    }
    const __m128i k128 = _mm_set_epi64x(kFold128Hi, kFold128Lo);
    __m128i x = fold(fold(fold(a0, k128, a1), k128, a2), k128, a3);
    for (; n >= 16; p += 16, n -= 16) x = fold(x, k128, load(p));

    // 128 -> 64 bits: the low half times x^(128+32) mod P into the high half.
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k128, 0x10));
    // 64 -> 32 bits, appending 32 zero bits.
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    x = _mm_xor_si128(_mm_srli_si128(x, 4),
                      _mm_clmulepi64_si128(_mm_and_si128(x, mask32), _mm_set_epi64x(0, kFold64), 0x00));
    // Barrett reduction to the 32-bit register.
    const __m128i pm = _mm_set_epi64x(kMu, kPoly);
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), pm, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), pm, 0x00);
    return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(t, x), 1));
}

// n >= 64 and a multiple of 16.
__attribute__((target("pclmul,sse4.1"))) std::uint32_t crc32_fold(std::uint32_t reg,
                                                                  const std::uint8_t* p,
                                                                  std::size_t n) {
    const __m128i a0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(reg)));
    return crc32_fold_tail(a0, load(p + 16), load(p + 32), load(p + 48), p + 64, n - 64);
}

// The same 256 bytes a step: four 512-bit accumulators (VPCLMULQDQ folds the four 128-bit
// lanes of each at once by x^(2048+-32)), folded into one by x^(512+-32), whose four lanes
// are then crc32_fold_tail's accumulators. n >= 256 and a multiple of 16.
// GCC 12's AVX-512 headers start some results from _mm512_undefined_*(), which
// -Wuninitialized reports inside the headers: a false positive, silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#define SNIC_WIDE __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
SNIC_WIDE inline __m512i fold_wide(__m512i acc, __m512i k, __m512i next) {
    const __m512i lo = _mm512_clmulepi64_epi128(acc, k, 0x00);
    const __m512i hi = _mm512_clmulepi64_epi128(acc, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, next, 0x96);  // lo ^ hi ^ next
}

SNIC_WIDE inline __m512i load_wide(const std::uint8_t* p) { return _mm512_loadu_si512(p); }

SNIC_WIDE std::uint32_t crc32_fold_wide(std::uint32_t reg, const std::uint8_t* p, std::size_t n) {
    __m512i z0 = _mm512_xor_si512(load_wide(p),
                                  _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(reg))));
    __m512i z1 = load_wide(p + 64), z2 = load_wide(p + 128), z3 = load_wide(p + 192);
    p += 256;
    n -= 256;
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(kFold2048Hi, kFold2048Lo));
    for (; n >= 256; p += 256, n -= 256) {
        z0 = fold_wide(z0, k2048, load_wide(p));
        z1 = fold_wide(z1, k2048, load_wide(p + 64));
        z2 = fold_wide(z2, k2048, load_wide(p + 128));
        z3 = fold_wide(z3, k2048, load_wide(p + 192));
    }
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(kFold512Hi, kFold512Lo));
    const __m512i z = fold_wide(fold_wide(fold_wide(z0, k512, z1), k512, z2), k512, z3);
    return crc32_fold_tail(_mm512_extracti32x4_epi32(z, 0), _mm512_extracti32x4_epi32(z, 1),
                           _mm512_extracti32x4_epi32(z, 2), _mm512_extracti32x4_epi32(z, 3), p, n);
}
#undef SNIC_WIDE
#pragma GCC diagnostic pop

const bool kHaveFold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
const bool kHaveWideFold =
    kHaveFold && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");

}  // namespace

bool crc32_folds() noexcept { return kHaveFold; }

std::uint32_t crc32_update(std::uint32_t reg, std::span<const std::uint8_t> bytes) noexcept {
    if (!kHaveFold || bytes.size() < 64) return crc32_update_table(reg, bytes);
    const std::size_t folded = bytes.size() & ~std::size_t{15};
    reg = kHaveWideFold && folded >= 256 ? crc32_fold_wide(reg, bytes.data(), folded)
                                         : crc32_fold(reg, bytes.data(), folded);
    return crc32_update_table(reg, bytes.subspan(folded));
}
#else
bool crc32_folds() noexcept { return false; }

std::uint32_t crc32_update(std::uint32_t reg, std::span<const std::uint8_t> bytes) noexcept {
    return crc32_update_table(reg, bytes);
}
#endif

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
