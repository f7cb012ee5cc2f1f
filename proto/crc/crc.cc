#include "proto/crc/crc.h"

#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace snic::crc {
namespace {

// --- The constants, derived from the polynomial at compile time ---------------------------
//
// The functions below only initialise kEngine<Poly>, a constexpr variable, so they run in
// the compiler. (They are constexpr rather than consteval because clang 14 rejects
// consteval calls in a variable template's initializer.)
//
// The register is reflected: bit 31 holds x^0's coefficient and bit 0 x^31's. In that form
// multiplying by x is a right shift, and the x^32 that falls out of bit 0 comes back as the
// polynomial (x^32 = P - x^32 mod P, and P - x^32 is what `poly` spells).

// x^n mod P, reflected.
constexpr std::uint32_t xpow_mod(std::uint32_t poly, unsigned n) {
    std::uint32_t r = 0x80000000;  // x^0
    for (unsigned i = 0; i < n; ++i) r = (r >> 1) ^ ((r & 1) != 0 ? poly : 0);
    return r;
}

constexpr std::uint64_t reverse_bits(std::uint64_t v, unsigned width) {
    std::uint64_t r = 0;
    for (unsigned i = 0; i < width; ++i) r |= (v >> i & 1) << (width - 1 - i);
    return r;
}

// tables[0][b] advances the register over byte b (b times x^32 mod P); tables[k][b] over
// byte b followed by k zero bytes, which lets the loop take 8 bytes per step.
using Tables = std::array<std::array<std::uint32_t, 256>, 8>;

constexpr Tables make_tables(std::uint32_t poly) {
    Tables t{};
    for (std::uint32_t b = 0; b < 256; ++b) {
        std::uint32_t r = b;
        for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ ((r & 1) != 0 ? poly : 0);
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

// A multiplier for PCLMULQDQ: x^n mod P reflected and shifted left by one (x^0 in bit 32).
// A 64-bit half h of a 128-bit lane (reflected: x^63 in bit 0) times it reads, as a lane
// (x^127 in bit 0), as h * x^(n+32) mod P. In a lane the low half stands for h * x^64 and
// the high half for h, so moving a lane d bits on takes n = d + 32 for the low half and
// n = d - 32 for the high one.
constexpr std::uint64_t multiplier(std::uint32_t poly, unsigned n) {
    return std::uint64_t{xpow_mod(poly, n)} << 1;
}

// One 128-bit constant as PCLMULQDQ reads it: `lo` multiplies an accumulator's low 64 bits
// (the earlier bytes, the higher powers of x), `hi` its high 64 bits.
struct alignas(16) Pair {
    std::uint64_t lo;
    std::uint64_t hi;
};

// The pair that moves a 128-bit lane `bits` bits on (see multiplier()).
constexpr Pair fold_by(std::uint32_t poly, unsigned bits) {
    return {multiplier(poly, bits + 32), multiplier(poly, bits - 32)};
}

// The Barrett reduction's pair: P (its x^32 included) and mu = floor(x^64 / P), each
// reflected over 33 bits.
constexpr Pair barrett(std::uint32_t poly) {
    const std::uint64_t p = std::uint64_t{1} << 32 | reverse_bits(poly, 32);  // x^32 in bit 32
    // Long division of x^64 by P: `rem` holds the 33 coefficients from x^(i+32) down to
    // x^i, and a set top bit is a quotient term x^i.
    std::uint64_t rem = std::uint64_t{1} << 32;  // i = 32: x^64
    std::uint64_t mu = 0;
    for (int i = 32; i >= 0; --i) {
        if ((rem >> 32 & 1) != 0) {
            mu |= std::uint64_t{1} << i;
            rem ^= p;
        }
        rem <<= 1;
    }
    return {reverse_bits(p, 33), reverse_bits(mu, 33)};
}

struct Engine {
    std::uint32_t poly;  // the generator, as Reflected32's Poly
    Tables tables;
    Pair by2048;  // four 512-bit accumulators, 256 bytes a step
    Pair by512;   // four 128-bit accumulators, 64 bytes a step (and the four into one)
    Pair by128;   // one accumulator, 16 bytes a step; `hi` is also the reduction's x^96 mod P
    std::uint64_t by64;  // the reduction's x^64 mod P
    Pair barrett;        // lo: P, hi: mu
};

constexpr Engine make_engine(std::uint32_t poly) {
    return {poly,
            make_tables(poly),
            fold_by(poly, 2048),
            fold_by(poly, 512),
            fold_by(poly, 128),
            multiplier(poly, 64),
            barrett(poly)};
}

template <std::uint32_t Poly>
constexpr Engine kEngine = make_engine(Poly);

// Against published values: entries of the well-known byte tables; the 128-bit folding
// constants and Barrett pair of Intel's paper (CRC-32) and of the CRC-32C implementations
// that follow it (Linux's s390 CRC-32C, Abseil's); for CRC-32, the 2048-bit pair the
// 512-bit path was first written with.
constexpr const Engine& kCrc32Engine = kEngine<0xedb88320>;
static_assert(kCrc32Engine.tables[0][1] == 0x77073096);
static_assert(kCrc32Engine.tables[0][255] == 0x2d02ef8d);
static_assert(kCrc32Engine.by512.lo == 0x154442bd4 && kCrc32Engine.by512.hi == 0x1c6e41596);
static_assert(kCrc32Engine.by128.lo == 0x1751997d0 && kCrc32Engine.by128.hi == 0x0ccaa009e);
static_assert(kCrc32Engine.by64 == 0x163cd6124);
static_assert(kCrc32Engine.barrett.lo == 0x1db710641 && kCrc32Engine.barrett.hi == 0x1f7011641);
static_assert(kCrc32Engine.by2048.lo == 0x11542778a && kCrc32Engine.by2048.hi == 0x1322d1430);

constexpr const Engine& kCrc32cEngine = kEngine<0x82f63b78>;
static_assert(kCrc32cEngine.tables[0][1] == 0xf26b8303);
static_assert(kCrc32cEngine.tables[0][128] == 0x82f63b78);
static_assert(kCrc32cEngine.by512.lo == 0x0740eef02 && kCrc32cEngine.by512.hi == 0x09e4addf8);
static_assert(kCrc32cEngine.by128.lo == 0x0f20c0dfe && kCrc32cEngine.by128.hi == 0x14cd00bd6);
static_assert(kCrc32cEngine.by64 == 0x0dd45aab8);
static_assert(kCrc32cEngine.barrett.lo == 0x105ec76f1 && kCrc32cEngine.barrett.hi == 0x0dea713f1);

// --- Where the bytes are read, and where they are copied -----------------------------------
//
// Every kernel takes its bytes as a Cursor<Copy>. Without a copy (update) that is the source
// pointer itself and copy() is empty, so update() is what it was before there was a copy:
// the folding kernels and by_best compile to the same instructions, by_table to the same
// but for register allocation. With one (update_copy) it is a Copying, the source and the
// destination moved on together by the same += and +, and every load a kernel makes through
// it is also stored to the destination at the same offset: the bytes are copied as they are
// read, in the same pass.

struct Copying {
    const std::uint8_t* src;
    std::uint8_t* dst;

    Copying& operator+=(std::size_t n) {
        src += n;
        dst += n;
        return *this;
    }
    Copying operator+(std::size_t n) const { return {src + n, dst + n}; }
};

template <bool Copy>
using Cursor = std::conditional_t<Copy, Copying, const std::uint8_t*>;

inline const std::uint8_t* source(const std::uint8_t* p) {
    return p;
}
inline const std::uint8_t* source(Copying c) {
    return c.src;
}

// The next n bytes to the destination, for the table loop (the folding stores the vectors
// it loads).
inline void copy(const std::uint8_t*, std::size_t) {}
inline void copy(Copying c, std::size_t n) {
    std::memcpy(c.dst, c.src, n);
}

// --- Slicing-by-8 ---------------------------------------------------------------------------

inline std::uint32_t load_le32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
           std::uint32_t{p[3]} << 24;
}

template <const Engine& e, bool Copy>
std::uint32_t by_table(std::uint32_t reg, Cursor<Copy> p, std::size_t n) noexcept {
    const Tables& t = e.tables;
    while (n >= 8) {
        const std::uint32_t lo = load_le32(source(p)) ^ reg;
        const std::uint32_t hi = load_le32(source(p) + 4);
        copy(p, 8);
        reg = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
              t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    if (n >= 4) {  // four bytes take the whole register: slicing-by-4
        const std::uint32_t w = load_le32(source(p)) ^ reg;
        copy(p, 4);
        reg = t[3][w & 0xff] ^ t[2][(w >> 8) & 0xff] ^ t[1][(w >> 16) & 0xff] ^ t[0][w >> 24];
        p += 4;
        n -= 4;
    }
    while (n--) {
        copy(p, 1);
        reg = t[0][(reg ^ *source(p)) & 0xff] ^ (reg >> 8);
        p += 1;
    }
    return reg;
}

#if defined(__x86_64__)

// --- Folding with carry-less multiplication -------------------------------------------------
//
// Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (2009),
// in the bit-reflected domain: 128-bit accumulators are multiplied forward by x^k mod P and
// combined with the data k bits on; at the end one accumulator is reduced to 64 bits and
// finished by a Barrett reduction. Only the constants depend on the polynomial: the kernels
// take the engine as a template argument, so each instance addresses its constants directly,
// as code written for one polynomial would. Copying, each 16- or 64-byte load is also stored
// to the destination, unaligned as the loads are.

#define SNIC_CLMUL __attribute__((target("pclmul,sse4.1")))

SNIC_CLMUL inline __m128i load(const std::uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

SNIC_CLMUL inline __m128i load(Copying c) {
    const __m128i v = load(c.src);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(c.dst), v);
    return v;
}

SNIC_CLMUL inline __m128i constant(const Pair& k) {
    return _mm_load_si128(reinterpret_cast<const __m128i*>(&k));
}

SNIC_CLMUL inline __m128i fold(__m128i acc, __m128i k, __m128i next) {
    const __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
    const __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

// One accumulator (the register folded in, every lane folded into it) to the CRC register.
template <const Engine& e>
SNIC_CLMUL std::uint32_t reduce(__m128i x) {
    const __m128i k128 = constant(e.by128);
    // What is left is the register the lane's bytes give: lane * x^32 mod P.
    // 128 -> 96 bits: the low half times x^96 mod P (by128.hi) plus the high half, which
    // reads as lane * x^32.
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k128, 0x10));
    // 96 -> 64 bits, the same mod P: the low 32 bits times x^64 mod P plus the rest.
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    x = _mm_xor_si128(
        _mm_srli_si128(x, 4),
        _mm_clmulepi64_si128(_mm_and_si128(x, mask32),
                             _mm_cvtsi64_si128(static_cast<long long>(e.by64)), 0x00));
    // 64 -> 32 bits: Barrett reduction, mod P.
    const __m128i pm = constant(e.barrett);
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), pm, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), pm, 0x00);
    return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(t, x), 1));
}

// From four accumulators of consecutive 16-byte lanes (the register already folded in) and
// the n bytes after them (a multiple of 16): the CRC register.
template <const Engine& e, bool Copy>
SNIC_CLMUL std::uint32_t fold_tail(__m128i a0, __m128i a1, __m128i a2, __m128i a3, Cursor<Copy> p,
                                   std::size_t n) {
    const __m128i k512 = constant(e.by512);
    for (; n >= 64; p += 64, n -= 64) {
        a0 = fold(a0, k512, load(p));
        a1 = fold(a1, k512, load(p + 16));
        a2 = fold(a2, k512, load(p + 32));
        a3 = fold(a3, k512, load(p + 48));
    }
    const __m128i k128 = constant(e.by128);
    __m128i x = fold(fold(fold(a0, k128, a1), k128, a2), k128, a3);
    for (; n >= 16; p += 16, n -= 16) x = fold(x, k128, load(p));
    return reduce<e>(x);
}

// n in [16, 64) and a multiple of 16: one accumulator from the start, the same reduction
// (a RoCEv2 pseudo-header through the BTH is 48 bytes).
template <const Engine& e, bool Copy>
SNIC_CLMUL std::uint32_t fold_short(std::uint32_t reg, Cursor<Copy> p, std::size_t n) {
    const __m128i k128 = constant(e.by128);
    __m128i x = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(reg)));
    for (p += 16, n -= 16; n >= 16; p += 16, n -= 16) x = fold(x, k128, load(p));
    return reduce<e>(x);
}

// n >= 64 and a multiple of 16.
template <const Engine& e, bool Copy>
SNIC_CLMUL std::uint32_t fold_narrow(std::uint32_t reg, Cursor<Copy> p, std::size_t n) {
    const __m128i a0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(reg)));
    return fold_tail<e, Copy>(a0, load(p + 16), load(p + 32), load(p + 48), p + 64, n - 64);
}
#undef SNIC_CLMUL

// The same 256 bytes a step: four 512-bit accumulators (VPCLMULQDQ folds the four 128-bit
// lanes of each at once by x^(2048+-32)), folded into one by x^(512+-32), whose four lanes
// are then fold_tail's accumulators. n >= 256 and a multiple of 16.
// GCC 12's AVX-512 headers start some results from _mm512_undefined_*(), which
// -Wuninitialized reports inside the headers (-Wmaybe-uninitialized in the TSan build): a
// false positive, silenced here only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__)  // GCC's own warning; clang has no such group
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SNIC_WIDE __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))
SNIC_WIDE inline __m512i fold4(__m512i acc, __m512i k, __m512i next) {
    const __m512i lo = _mm512_clmulepi64_epi128(acc, k, 0x00);
    const __m512i hi = _mm512_clmulepi64_epi128(acc, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, next, 0x96);  // lo ^ hi ^ next
}

SNIC_WIDE inline __m512i load_wide(const std::uint8_t* p) {
    return _mm512_loadu_si512(p);
}

SNIC_WIDE inline __m512i load_wide(Copying c) {
    const __m512i v = load_wide(c.src);
    _mm512_storeu_si512(c.dst, v);
    return v;
}

SNIC_WIDE inline __m512i constant_wide(const Pair& k) {
    return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(&k)));
}

template <const Engine& e, bool Copy>
SNIC_WIDE std::uint32_t fold_wide(std::uint32_t reg, Cursor<Copy> p, std::size_t n) {
    __m512i z0 = _mm512_xor_si512(load_wide(p),
                                  _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(reg))));
    __m512i z1 = load_wide(p + 64), z2 = load_wide(p + 128), z3 = load_wide(p + 192);
    p += 256;
    n -= 256;
    const __m512i k2048 = constant_wide(e.by2048);
    for (; n >= 256; p += 256, n -= 256) {
        z0 = fold4(z0, k2048, load_wide(p));
        z1 = fold4(z1, k2048, load_wide(p + 64));
        z2 = fold4(z2, k2048, load_wide(p + 128));
        z3 = fold4(z3, k2048, load_wide(p + 192));
    }
    const __m512i k512 = constant_wide(e.by512);
    const __m512i z = fold4(fold4(fold4(z0, k512, z1), k512, z2), k512, z3);
    const __m128i a0 = _mm512_extracti32x4_epi32(z, 0), a1 = _mm512_extracti32x4_epi32(z, 1);
    const __m128i a2 = _mm512_extracti32x4_epi32(z, 2), a3 = _mm512_extracti32x4_epi32(z, 3);
    // fold_tail is SSE code: entered with the upper halves of the vector registers dirty, each
    // of its instructions pays for them (about 130 ns a call on this project's machines, more
    // than the whole fold of 4 KiB). The four lanes live in the low halves, which stay.
    _mm256_zeroupper();
    return fold_tail<e, Copy>(a0, a1, a2, a3, p, n);
}
#undef SNIC_WIDE
#pragma GCC diagnostic pop

const bool kHaveFold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
const bool kHaveWideFold =
    kHaveFold && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");

// Below this many bytes slicing-by-8 is faster than folding: the fold's set-up and final
// reduction cost more than the table takes for the bytes (a CRC-32 chained on its own result,
// this project's machine: 16 bytes 6.8 ns by table and 11.3 folded, 24 bytes 10.2 and 14.3,
// 32 bytes 12.9 both, 48 bytes 19.2 and 14.1). RoCE's ACKs and small requests are there.
constexpr std::size_t kFoldMin = 32;

// CRC-32C is SSE4.2's CRC32 instruction (the Castagnoli polynomial, bit-reflected, on the
// register as the table keeps it): 8 bytes an instruction, for what is too short to fold
// (iWARP's small FPDUs, their headers and pads) and for a fold's tail. Chosen at run time,
// as the folding is: the build targets no particular CPU.
const bool kHaveCrc32cInsn = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
}();
constexpr std::size_t kCrc32cFoldMin = 128;

template <bool Copy>
__attribute__((target("sse4.2"))) std::uint32_t by_insn(std::uint32_t reg, Cursor<Copy> p,
                                                        std::size_t n) noexcept {
    std::uint64_t r = reg;
    while (n >= 8) {
        std::uint64_t v;
        std::memcpy(&v, source(p), 8);
        copy(p, 8);
        r = _mm_crc32_u64(r, v);
        p += 8;
        n -= 8;
    }
    auto r32 = static_cast<std::uint32_t>(r);
    if (n >= 4) {
        std::uint32_t v;
        std::memcpy(&v, source(p), 4);
        copy(p, 4);
        r32 = _mm_crc32_u32(r32, v);
        p += 4;
        n -= 4;
    }
    while (n--) {
        copy(p, 1);
        r32 = _mm_crc32_u8(r32, *source(p));
        p += 1;
    }
    return r32;
}

// The short path: the instruction for CRC-32C where the CPU has it, else the table.
template <const Engine& e, bool Copy>
std::uint32_t by_short(std::uint32_t reg, Cursor<Copy> p, std::size_t n) noexcept {
    if constexpr (e.poly == kCrc32cEngine.poly) {
        if (kHaveCrc32cInsn) return by_insn<Copy>(reg, p, n);
    }
    return by_table<e, Copy>(reg, p, n);
}

// update() without a copy, update_copy() with one: the same choice of path.
template <const Engine& e, bool Copy>
std::uint32_t by_best(std::uint32_t reg, Cursor<Copy> p, std::size_t n) noexcept {
    const std::size_t fold_min =
        e.poly == kCrc32cEngine.poly && kHaveCrc32cInsn ? kCrc32cFoldMin : kFoldMin;
    if (!kHaveFold || n < fold_min) return by_short<e, Copy>(reg, p, n);
    const std::size_t folded = n & ~std::size_t{15};
    if (folded < 64)
        reg = fold_short<e, Copy>(reg, p, folded);
    else if (kHaveWideFold && folded >= 256)
        reg = fold_wide<e, Copy>(reg, p, folded);
    else
        reg = fold_narrow<e, Copy>(reg, p, folded);
    return by_short<e, Copy>(reg, p + folded, n - folded);
}

#else

constexpr bool kHaveFold = false;

template <const Engine& e, bool Copy>
std::uint32_t by_best(std::uint32_t reg, Cursor<Copy> p, std::size_t n) noexcept {
    return by_table<e, Copy>(reg, p, n);
}

#endif

}  // namespace

template <std::uint32_t Poly>
std::uint32_t Reflected32<Poly>::update(std::uint32_t reg,
                                        std::span<const std::uint8_t> bytes) noexcept {
    return by_best<kEngine<Poly>, false>(reg, bytes.data(), bytes.size());
}

template <std::uint32_t Poly>
std::uint32_t Reflected32<Poly>::update_copy(std::uint32_t reg, std::uint8_t* dst,
                                             std::span<const std::uint8_t> src) noexcept {
    return by_best<kEngine<Poly>, true>(reg, Copying{src.data(), dst}, src.size());
}

template <std::uint32_t Poly>
std::uint32_t Reflected32<Poly>::update_table(std::uint32_t reg,
                                              std::span<const std::uint8_t> bytes) noexcept {
    return by_table<kEngine<Poly>, false>(reg, bytes.data(), bytes.size());
}

template <std::uint32_t Poly>
bool Reflected32<Poly>::folds() noexcept {
    return kHaveFold;
}

template struct Reflected32<0xedb88320>;
template struct Reflected32<0x82f63b78>;

}  // namespace snic::crc
