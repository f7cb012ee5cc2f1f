// The CRC core (proto/crc): CRC-32C against RFC 3720's published examples, both CRCs
// against their catalogue check values, and every path of the engine (slicing-by-8, and
// the carry-less folding where this CPU has it) against a bit-at-a-time reference written
// from the definition, at every length to 1 KiB and every alignment to 63 bytes; and
// update_copy (the copy and the CRC in one pass) against update_table and update at every
// length to 1100 bytes, source and destination misaligned each way, with guard bytes around
// the destination. Real MPA traffic is checked in test_mpa_captures.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/crc/crc.h"

namespace snic::crc {
namespace {

// One bit at a time, from the definition: the reflected register shifts right, and a one
// shifted out of bit 0 (x^31's coefficient, times x, is x^32) brings in the polynomial.
std::uint32_t bitwise_update(std::uint32_t poly, std::uint32_t reg,
                             std::span<const std::uint8_t> bytes) {
    for (std::uint8_t b : bytes) {
        reg ^= b;
        for (int i = 0; i < 8; ++i) reg = (reg >> 1) ^ (poly & (0u - (reg & 1)));
    }
    return reg;
}

std::span<const std::uint8_t> text(std::string_view s) {
    return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    for (auto& b : v) b = static_cast<std::uint8_t>(rng());
    return v;
}

// The four bytes of a CRC as RFC 3720 lists them (lowest-numbered byte first, as iSCSI
// puts the digest on the wire): the CRC's least significant byte first.
std::uint32_t rfc3720_crc(std::array<std::uint8_t, 4> b) {
    return std::uint32_t{b[0]} | std::uint32_t{b[1]} << 8 | std::uint32_t{b[2]} << 16 |
           std::uint32_t{b[3]} << 24;
}

// The value by every path: compute() (the fastest this CPU has), the table alone, and the
// bitwise reference must all give `expected`.
void expect_crc32c(std::span<const std::uint8_t> bytes, std::uint32_t expected) {
    EXPECT_EQ(Crc32c::compute(bytes), expected);
    EXPECT_EQ(~Crc32c::update_table(Crc32c::kInit, bytes), expected);
    EXPECT_EQ(~bitwise_update(Crc32c::kPoly, Crc32c::kInit, bytes), expected);
}

// --- CRC-32C: RFC 3720 appendix B.4 (iSCSI), 32 bytes each and one 48-byte PDU -------------

TEST(Crc32cRfc3720, thirty_two_zero_bytes_give_aa_36_91_8a) {
    const std::array<std::uint8_t, 32> zeros{};
    expect_crc32c(zeros, rfc3720_crc({0xaa, 0x36, 0x91, 0x8a}));
}

TEST(Crc32cRfc3720, thirty_two_ff_bytes_give_43_ab_a8_62) {
    std::array<std::uint8_t, 32> ones;
    ones.fill(0xff);
    expect_crc32c(ones, rfc3720_crc({0x43, 0xab, 0xa8, 0x62}));
}

TEST(Crc32cRfc3720, incrementing_bytes_0_to_31_give_4e_79_dd_46) {
    std::array<std::uint8_t, 32> up;
    for (std::size_t i = 0; i < up.size(); ++i) up[i] = static_cast<std::uint8_t>(i);
    expect_crc32c(up, rfc3720_crc({0x4e, 0x79, 0xdd, 0x46}));
}

TEST(Crc32cRfc3720, decrementing_bytes_31_to_0_give_5c_db_3f_11) {
    std::array<std::uint8_t, 32> down;
    for (std::size_t i = 0; i < down.size(); ++i) down[i] = static_cast<std::uint8_t>(31 - i);
    expect_crc32c(down, rfc3720_crc({0x5c, 0xdb, 0x3f, 0x11}));
}

TEST(Crc32cRfc3720, iscsi_scsi_read_10_command_pdu_gives_56_3a_96_d9) {
    // A SCSI Command PDU (opcode 0x01, immediate; F and R set), LUN 0, initiator task tag
    // 0x14, expected transfer length 0x400, CmdSN 0x14, ExpStatSN 0x18, and the CDB READ(10)
    // (0x28) of two blocks from LBA 0.
    constexpr std::array<std::uint8_t, 48> kPdu = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    expect_crc32c(kPdu, rfc3720_crc({0x56, 0x3a, 0x96, 0xd9}));
}

// --- Check values (the CRC catalogue's "check": the CRC of the ASCII digits 1 to 9) --------

TEST(Crc32, check_value_of_123456789_is_cbf43926) {
    EXPECT_EQ(Crc32::compute(text("123456789")), 0xcbf43926u);
    EXPECT_EQ(~Crc32::update_table(Crc32::kInit, text("123456789")), 0xcbf43926u);
    EXPECT_EQ(~bitwise_update(Crc32::kPoly, Crc32::kInit, text("123456789")), 0xcbf43926u);
}

TEST(Crc32c, check_value_of_123456789_is_e3069283) {
    expect_crc32c(text("123456789"), 0xe3069283u);
}

// --- Every path against the others, for both polynomials ------------------------------------

template <typename C>
class CrcPaths : public ::testing::Test {};

struct Names {
    template <typename C>
    static std::string GetName(int) {
        return C::kPoly == Crc32::kPoly ? "Crc32" : "Crc32c";
    }
};

using Both = ::testing::Types<Crc32, Crc32c>;
TYPED_TEST_SUITE(CrcPaths, Both, Names);

constexpr std::size_t kMaxLength = 1024;
constexpr std::size_t kMaxAlignment = 63;

TYPED_TEST(CrcPaths, empty_input_leaves_the_register_and_gives_zero) {
    EXPECT_EQ(TypeParam::compute({}), 0u);
    EXPECT_EQ(TypeParam::update(0x12345678, {}), 0x12345678u);
    EXPECT_EQ(TypeParam::update_table(0x12345678, {}), 0x12345678u);
}

// Runs `check(offset, start, bytes, bitwise)` for every alignment 0..63 and length 0..1024
// of random bytes: `start` is a register (all ones at offset 0, else random, as a previous
// buffer leaves it) and `bitwise` the reference register after `bytes` from it, computed
// incrementally along the lengths.
template <typename C, typename Check>
void for_every_length_and_alignment(std::uint32_t seed, Check check) {
    std::mt19937 rng(seed);
    const auto buf = random_bytes(rng, kMaxAlignment + kMaxLength);
    for (std::size_t off = 0; off <= kMaxAlignment; ++off) {
        const std::uint32_t start = off == 0 ? C::kInit : static_cast<std::uint32_t>(rng());
        std::uint32_t bitwise = start;
        for (std::size_t n = 0; n <= kMaxLength; ++n) {
            const auto bytes = std::span(buf).subspan(off, n);
            if (n > 0) bitwise = bitwise_update(C::kPoly, bitwise, bytes.last(1));
            check(off, start, bytes, bitwise);
            if (::testing::Test::HasFatalFailure()) return;
        }
    }
}

TYPED_TEST(CrcPaths, slicing_by_8_equals_bitwise_at_every_length_and_alignment) {
    for_every_length_and_alignment<TypeParam>(
        3720, [](std::size_t off, std::uint32_t start, auto bytes, std::uint32_t bitwise) {
            ASSERT_EQ(TypeParam::update_table(start, bytes), bitwise)
                << "offset " << off << " length " << bytes.size();
        });
}

// update() folds runs of 64 bytes and more (256 and more 512 bits at a time where the CPU
// has VPCLMULQDQ), then finishes by table: every split between the two is covered.
TYPED_TEST(CrcPaths, folding_equals_slicing_by_8_and_bitwise_at_every_length_and_alignment) {
    if (!TypeParam::folds()) {
        GTEST_SKIP() << "this CPU has no PCLMULQDQ: update() is slicing-by-8, checked above";
    }
    for_every_length_and_alignment<TypeParam>(
        5044, [](std::size_t off, std::uint32_t start, auto bytes, std::uint32_t bitwise) {
            const std::uint32_t folded = TypeParam::update(start, bytes);
            ASSERT_EQ(folded, TypeParam::update_table(start, bytes))
                << "offset " << off << " length " << bytes.size();
            ASSERT_EQ(folded, bitwise) << "offset " << off << " length " << bytes.size();
        });
}

// Long runs: many 256-byte steps, then every kind of tail, from random registers.
TYPED_TEST(CrcPaths, folding_equals_slicing_by_8_on_long_runs_from_any_register) {
    if (!TypeParam::folds()) {
        GTEST_SKIP() << "this CPU has no PCLMULQDQ: update() is slicing-by-8";
    }
    std::mt19937 rng(7143);
    const auto buf = random_bytes(rng, 70000);
    for (std::size_t n : {1025u, 2047u, 4096u, 4099u, 9000u, 9018u, 65536u, 65551u, 69990u}) {
        const std::size_t off = rng() % (buf.size() - n + 1);
        const std::uint32_t reg = static_cast<std::uint32_t>(rng());
        const auto s = std::span(buf).subspan(off, n);
        ASSERT_EQ(TypeParam::update(reg, s), TypeParam::update_table(reg, s)) << "length " << n;
    }
}

TYPED_TEST(CrcPaths, update_in_pieces_equals_one_pass) {
    std::mt19937 rng(4791);
    const auto buf = random_bytes(rng, 1500);
    for (std::size_t cut1 = 0; cut1 < 40; cut1 += 3) {
        for (std::size_t cut2 = cut1; cut2 < 1500; cut2 += 97) {
            std::uint32_t reg = TypeParam::kInit;
            reg = TypeParam::update(reg, std::span(buf).first(cut1));
            reg = TypeParam::update(reg, std::span(buf).subspan(cut1, cut2 - cut1));
            reg = TypeParam::update(reg, std::span(buf).subspan(cut2));
            ASSERT_EQ(~reg, TypeParam::compute(buf)) << cut1 << " " << cut2;
        }
    }
}

// --- update_copy: the copy and the CRC in one pass -----------------------------------------

template <typename C>
class CrcCopy : public ::testing::Test {};

TYPED_TEST_SUITE(CrcCopy, Both, Names);

constexpr std::size_t kMaxCopyLength = 1100;
// Where the source and the destination start, each against the other: every offset from
// 16-byte alignment, and 63 (one byte short of a cache line).
constexpr std::array<std::size_t, 17> kCopyOffsets = {0, 1,  2,  3,  4,  5,  6,  7, 8,
                                                      9, 10, 11, 12, 13, 14, 15, 63};
constexpr std::size_t kMaxCopyOffset = 63;
// Destination bytes on either side of the copy that must stay as they were.
constexpr std::size_t kGuard = 64;

// The buffers of the update_copy tests: random source bytes, and a destination of kGuard
// bytes, then the copy (dst_off bytes further in), then kGuard bytes and more. Both come
// from the heap, 16-byte aligned, so the offsets give every alignment a 16-byte load or store
// can have, and 63 one that crosses a cache line differently. Before each copy every
// destination byte holds the complement of the source byte a copy would put there (0xa5
// where there is none), so each byte of the range must change and a stray write shows
// wherever it lands.
template <typename C>
class CopyCheck {
  public:
    CopyCheck(std::uint32_t seed, std::size_t max_length)
        : rng_(seed),
          src_(random_bytes(rng_, kMaxCopyOffset + max_length)),
          dst_(kGuard + kMaxCopyOffset + max_length + kGuard),
          before_(dst_.size()) {}

    std::uint32_t random_register() { return static_cast<std::uint32_t>(rng_()); }

    // Prepares the destination for copies from src_off to dst_off.
    void place(std::size_t src_off, std::size_t dst_off) {
        src_off_ = src_off;
        dst_off_ = dst_off;
        for (std::size_t j = 0; j < before_.size(); ++j) {
            // The source byte that lands on destination byte j if the copy runs that far.
            const std::size_t k = src_off + j - (kGuard + dst_off);  // wraps when before it
            before_[j] = k < src_.size() ? static_cast<std::uint8_t>(~src_[k]) : 0xa5;
        }
        dst_ = before_;
    }

    // update_copy of the n bytes at the source offset to the destination offset, from
    // register `start`: it gives update_table's register (the reference) and update()'s,
    // the destination range equals the source, and every other destination byte is as it
    // was. Leaves the destination as place() left it.
    void check(std::size_t n, std::uint32_t start) {
        const auto src = std::span<const std::uint8_t>(src_).subspan(src_off_, n);
        std::uint8_t* const dst = dst_.data() + kGuard + dst_off_;
        const std::uint32_t copied = C::update_copy(start, dst, src);
        ASSERT_EQ(copied, C::update_table(start, src)) << where(n, start);
        ASSERT_EQ(copied, C::update(start, src)) << where(n, start);
        const auto wrong = std::mismatch(src.begin(), src.end(), dst).first;
        ASSERT_TRUE(wrong == src.end())
            << "destination byte " << (wrong - src.begin()) << " differs; " << where(n, start);
        ASSERT_EQ(std::memcmp(dst_.data(), before_.data(), kGuard + dst_off_), 0)
            << "written before the destination; " << where(n, start);
        const std::size_t end = kGuard + dst_off_ + n;
        ASSERT_EQ(std::memcmp(dst_.data() + end, before_.data() + end, dst_.size() - end), 0)
            << "written after the destination; " << where(n, start);
        std::memcpy(dst, before_.data() + kGuard + dst_off_, n);
    }

  private:
    std::string where(std::size_t n, std::uint32_t start) const {
        return "source offset " + std::to_string(src_off_) + ", destination offset " +
               std::to_string(dst_off_) + ", length " + std::to_string(n) + ", from " +
               std::to_string(start);
    }

    std::mt19937 rng_;
    std::vector<std::uint8_t> src_;
    std::vector<std::uint8_t> dst_;
    std::vector<std::uint8_t> before_;
    std::size_t src_off_ = 0;
    std::size_t dst_off_ = 0;
};

TYPED_TEST(CrcCopy, empty_input_leaves_the_register_and_writes_nothing) {
    EXPECT_EQ(TypeParam::update_copy(0x12345678, nullptr, {}), 0x12345678u);
    std::array<std::uint8_t, 4> dst = {1, 2, 3, 4};
    const std::array<std::uint8_t, 4> src = {5, 6, 7, 8};
    EXPECT_EQ(TypeParam::update_copy(TypeParam::kInit, dst.data() + 2, std::span(src).first(0)),
              TypeParam::kInit);
    EXPECT_EQ(dst, (std::array<std::uint8_t, 4>{1, 2, 3, 4}));
}

// Every length 0..1100 (the table alone below 16 bytes; 16..63 one folded lane; 64..255 the
// 128-bit loop; from 256 the 512-bit loop where the CPU has VPCLMULQDQ, else the 128-bit
// one; then every tail), for each pair of source and destination offsets, from kInit and
// from a random register.
TYPED_TEST(CrcCopy, equals_update_and_copies_exactly_at_every_length_and_misalignment) {
    CopyCheck<TypeParam> c(6040, kMaxCopyLength);
    for (std::size_t src_off : kCopyOffsets) {
        for (std::size_t dst_off : kCopyOffsets) {
            c.place(src_off, dst_off);
            const std::uint32_t reg = c.random_register();
            for (std::size_t n = 0; n <= kMaxCopyLength; ++n) {
                c.check(n, TypeParam::kInit);
                if (::testing::Test::HasFatalFailure()) return;
                c.check(n, reg);
                if (::testing::Test::HasFatalFailure()) return;
            }
        }
    }
}

// Long runs: many 256-byte steps, then the 64- and 16-byte steps and the table's tail.
TYPED_TEST(CrcCopy, long_runs_equal_update_and_copy_exactly) {
    constexpr std::array<std::size_t, 3> kLengths = {4096, 9000, 65536 + 7};
    CopyCheck<TypeParam> c(9000, kLengths.back());
    for (std::size_t src_off : {0u, 1u, 8u, 15u, 63u}) {
        for (std::size_t dst_off : {0u, 3u, 8u, 13u, 63u}) {
            c.place(src_off, dst_off);
            for (std::size_t n : kLengths) {
                c.check(n, TypeParam::kInit);
                if (::testing::Test::HasFatalFailure()) return;
                c.check(n, c.random_register());
                if (::testing::Test::HasFatalFailure()) return;
            }
        }
    }
}

// Source and destination each end where their allocation ends, so that in the sanitizer
// build (scripts/test.sh, build-asan) a read past the source or a write past the
// destination is reported, not only a wrong byte.
TYPED_TEST(CrcCopy, touches_nothing_beyond_the_two_spans) {
    std::mt19937 rng(1500);
    for (std::size_t n = 0; n <= kMaxCopyLength; ++n) {
        for (std::size_t off : {0u, 1u, 9u, 15u}) {
            const std::size_t dst_off = (off + 7) % 16;
            auto src = random_bytes(rng, off + n);
            std::vector<std::uint8_t> dst(dst_off + n);
            const auto s = std::span<const std::uint8_t>(src).subspan(off);
            ASSERT_EQ(TypeParam::update_copy(TypeParam::kInit, dst.data() + dst_off, s),
                      TypeParam::update_table(TypeParam::kInit, s))
                << "length " << n << " offsets " << off << " " << dst_off;
            ASSERT_TRUE(std::equal(s.begin(), s.end(), dst.begin() + dst_off))
                << "length " << n << " offsets " << off << " " << dst_off;
        }
    }
}

TYPED_TEST(CrcCopy, copies_in_pieces_equal_one_pass) {
    std::mt19937 rng(5044);
    const auto buf = random_bytes(rng, 1500);
    for (std::size_t cut1 = 0; cut1 < 40; cut1 += 3) {
        for (std::size_t cut2 = cut1; cut2 < 1500; cut2 += 97) {
            std::vector<std::uint8_t> dst(buf.size());
            std::uint32_t reg = TypeParam::kInit;
            reg = TypeParam::update_copy(reg, dst.data(), std::span(buf).first(cut1));
            reg = TypeParam::update_copy(reg, dst.data() + cut1,
                                         std::span(buf).subspan(cut1, cut2 - cut1));
            reg = TypeParam::update_copy(reg, dst.data() + cut2, std::span(buf).subspan(cut2));
            ASSERT_EQ(~reg, TypeParam::compute(buf)) << cut1 << " " << cut2;
            ASSERT_EQ(dst, buf) << cut1 << " " << cut2;
        }
    }
}

}  // namespace
}  // namespace snic::crc
