// The Internet checksum (RFC 1071) and its incremental update (RFC 1624), checked
// against the RFCs' own examples, a published IPv4 header and a byte-wise reference.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "proto/net/checksum.h"
#include "proto/net/ipv4.h"

namespace snic::net {
namespace {

// The RFC 1071 definition, one byte at a time: big-endian 16-bit words, an odd
// last byte padded with zero, carries folded back in at the end.
std::uint16_t reference_fold(std::span<const std::uint8_t> bytes, std::uint64_t initial = 0) {
    std::uint64_t sum = initial;
    for (std::size_t i = 0; i < bytes.size(); i += 2) {
        const std::uint64_t hi = bytes[i];
        const std::uint64_t lo = i + 1 < bytes.size() ? bytes[i + 1] : 0;
        sum += hi << 8 | lo;
    }
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<std::uint16_t>(sum);
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    for (auto& b : v) b = static_cast<std::uint8_t>(rng());
    return v;
}

// Every length up to past the vector path's threshold and blocks, at odd and even starts,
// with a running sum carried in: csum_add agrees with the byte-wise reference, and csum_copy
// sums the same while its copy is the source byte for byte (and writes nothing beyond).
TEST(Checksum, add_and_copy_agree_with_the_reference_at_every_length) {
    std::mt19937 rng(11);
    const std::vector<std::uint8_t> src = random_bytes(rng, 1200);
    for (std::size_t start : {std::size_t{0}, std::size_t{1}, std::size_t{6}}) {
        for (std::size_t n = 0; n + start <= 1100; ++n) {
            const auto in = std::span(src).subspan(start, n);
            const std::uint32_t carried = 0x1fffe;
            const std::uint16_t want = reference_fold(in, carried);
            EXPECT_EQ(csum_fold(csum_add(in, carried)), want) << start << " " << n;
            std::vector<std::uint8_t> dst(n + 8, 0xa5);
            EXPECT_EQ(csum_fold(csum_copy(dst.data(), in, carried)), want) << start << " " << n;
            EXPECT_TRUE(std::equal(in.begin(), in.end(), dst.begin())) << start << " " << n;
            for (std::size_t i = n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xa5) << n;
        }
    }
    // All ones for a long run: the lanes' carries fold back as the words' would.
    const std::vector<std::uint8_t> ones(65536, 0xff);
    EXPECT_EQ(csum_fold(csum_add(ones)), reference_fold(ones));
}

TEST(Checksum, rfc1071_example_sums_to_ddf2) {
    // RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to 2ddf0, folded ddf2.
    const std::array<std::uint8_t, 8> bytes = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    EXPECT_EQ(csum_fold(csum_add(bytes)), 0xddf2);
    EXPECT_EQ(csum_finish(csum_add(bytes)), 0x220d);
}

TEST(Checksum, rfc1071_example_is_byte_order_independent_of_buffer_alignment) {
    // The same words at every offset of a larger buffer give the same sum.
    const std::array<std::uint8_t, 8> words = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    std::array<std::uint8_t, 32> buf{};
    for (std::size_t off = 0; off + words.size() <= buf.size(); ++off) {
        buf.fill(0xa5);
        std::copy(words.begin(), words.end(), buf.begin() + static_cast<std::ptrdiff_t>(off));
        EXPECT_EQ(csum_fold(csum_add(std::span(buf).subspan(off, words.size()))), 0xddf2) << off;
    }
}

TEST(Checksum, empty_range_sums_to_zero) {
    EXPECT_EQ(csum_add({}), 0u);
    EXPECT_EQ(csum_add({}, 0x1234), 0x1234u);
}

TEST(Checksum, odd_length_pads_last_byte_with_zero) {
    const std::array<std::uint8_t, 1> one = {0x01};
    EXPECT_EQ(csum_fold(csum_add(one)), 0x0100);
    const std::array<std::uint8_t, 3> three = {0x01, 0x02, 0x03};
    EXPECT_EQ(csum_fold(csum_add(three)), 0x0402);  // 0102 + 0300
    const std::array<std::uint8_t, 9> nine = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7, 0x80};
    EXPECT_EQ(csum_fold(csum_add(nine)), reference_fold(nine));
    EXPECT_EQ(csum_fold(csum_add(nine)), 0x5df3);  // ddf2 + 8000 = 15df2 -> 5df3
}

TEST(Checksum, every_length_matches_the_bytewise_reference) {
    std::mt19937 rng(1071);
    for (std::size_t n = 0; n <= 200; ++n) {
        for (int rep = 0; rep < 8; ++rep) {
            const auto v = random_bytes(rng, n);
            ASSERT_EQ(csum_fold(csum_add(v)), reference_fold(v)) << "length " << n;
        }
    }
}

TEST(Checksum, carries_fold_back_in_over_long_ranges) {
    // 64 KiB + 1 of 0xff: a sum far beyond 32 bits of carries in the hot loop.
    const std::vector<std::uint8_t> ones(65537, 0xff);
    EXPECT_EQ(csum_fold(csum_add(ones)), reference_fold(ones));
    // 32768 words of ffff (one's complement -0) and a last odd byte padded to ff00.
    EXPECT_EQ(csum_fold(csum_add(ones)), 0xff00);
    const std::vector<std::uint8_t> even_ones(65536, 0xff);
    EXPECT_EQ(csum_fold(csum_add(even_ones)), 0xffff);
    std::mt19937 rng(7);
    const auto big = random_bytes(rng, 9001);
    EXPECT_EQ(csum_fold(csum_add(big)), reference_fold(big));
}

TEST(Checksum, initial_sum_is_added_with_end_around_carry) {
    std::mt19937 rng(3);
    for (std::uint32_t initial : {0u, 1u, 0xffffu, 0x10000u, 0xfffeffffu, 0xffffffffu}) {
        const auto v = random_bytes(rng, 37);
        EXPECT_EQ(csum_fold(csum_add(v, initial)), reference_fold(v, initial)) << initial;
    }
}

TEST(Checksum, chunked_sums_equal_one_shot_sums) {
    std::mt19937 rng(1624);
    for (int rep = 0; rep < 2000; ++rep) {
        const std::size_t n = rng() % 300;
        const auto v = random_bytes(rng, n);
        const std::span<const std::uint8_t> all(v);
        // Cut into even-length chunks (the last one may be odd), at random places.
        std::uint32_t sum = 0;
        std::size_t pos = 0;
        while (pos < n) {
            std::size_t len = 2 * (rng() % 40);
            if (len == 0 || pos + len > n) len = n - pos;
            sum = csum_add(all.subspan(pos, len), sum);
            pos += len;
        }
        ASSERT_EQ(csum_fold(sum), csum_fold(csum_add(all))) << "rep " << rep;
        ASSERT_EQ(csum_fold(sum), reference_fold(v)) << "rep " << rep;
    }
}

TEST(Checksum, finish_is_complement_of_fold) {
    EXPECT_EQ(csum_finish(0), 0xffff);
    EXPECT_EQ(csum_finish(0xffff), 0x0000);
    EXPECT_EQ(csum_finish(0x2ddf0), 0x220d);
    EXPECT_EQ(csum_fold(0xffffffffu), 0xffff);
    EXPECT_EQ(csum_fold(0x0001ffffu), 0x0001);
}

// RFC 791 header from the well-known worked example: 192.168.0.1 -> 192.168.0.199, UDP.
constexpr std::array<std::uint8_t, 20> kKnownIpv4Header = {
    0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
    0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
};

TEST(Checksum, known_ipv4_header_checksum_is_b861) {
    auto h = kKnownIpv4Header;
    h[10] = h[11] = 0;
    EXPECT_EQ(csum_finish(csum_add(h)), 0xb861);
    EXPECT_EQ(reference_fold(h), static_cast<std::uint16_t>(~0xb861));
}

TEST(Checksum, csum_ok_accepts_known_ipv4_header) {
    EXPECT_TRUE(csum_ok(kKnownIpv4Header));
    auto& ip = *reinterpret_cast<const Ipv4Hdr*>(kKnownIpv4Header.data());
    EXPECT_TRUE(csum_ok(ipv4_header_bytes(ip)));
}

TEST(Checksum, csum_ok_rejects_any_single_bit_flip) {
    for (std::size_t bit = 0; bit < kKnownIpv4Header.size() * 8; ++bit) {
        auto h = kKnownIpv4Header;
        h[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
        EXPECT_FALSE(csum_ok(h)) << "bit " << bit;
    }
}

TEST(Checksum, ipv4_set_checksum_reproduces_known_header) {
    auto h = kKnownIpv4Header;
    h[10] = 0x12;
    h[11] = 0x34;
    auto& ip = *reinterpret_cast<Ipv4Hdr*>(h.data());
    ipv4_set_checksum(ip);
    EXPECT_EQ(ip.checksum.host(), 0xb861);
    EXPECT_EQ(h, kKnownIpv4Header);
}

TEST(Checksum, rfc1624_example_update_gives_zero_not_minus_zero) {
    // RFC 1624 section 4: HC = 0xdd2f, m = 0x5555 -> m' = 0x3285. Recomputation and
    // eqn. 3 give 0x0000; the older eqn. 2 (RFC 1141) would give 0xffff.
    EXPECT_EQ(csum_update(0xdd2f, 0x5555, 0x3285), 0x0000);
}

TEST(Checksum, update_of_unchanged_word_keeps_checksum) {
    EXPECT_EQ(csum_update(0xb861, 0x4011, 0x4011), 0xb861);
}

TEST(Checksum, update_equals_full_recompute) {
    std::mt19937 rng(2024);
    for (int rep = 0; rep < 20000; ++rep) {
        const std::size_t words = 2 + rng() % 30;
        auto v = random_bytes(rng, 2 * words);
        v[2] |= 1;                                   // never all zero: 0 and -0 are the same sum
        const std::size_t ck = 2 * (rng() % words);  // the checksum field
        std::size_t w = 2 * (rng() % words);         // the changed word
        if (w == ck) w = (w + 2) % (2 * words);
        if (w == 2 || ck == 2) continue;  // keep the non-zero word
        v[ck] = v[ck + 1] = 0;
        const std::uint16_t c = csum_finish(csum_add(v));
        v[ck] = static_cast<std::uint8_t>(c >> 8);
        v[ck + 1] = static_cast<std::uint8_t>(c);
        ASSERT_TRUE(csum_ok(v));

        const auto old_word = static_cast<std::uint16_t>(v[w] << 8 | v[w + 1]);
        const auto new_word = static_cast<std::uint16_t>(rng());
        v[w] = static_cast<std::uint8_t>(new_word >> 8);
        v[w + 1] = static_cast<std::uint8_t>(new_word);
        const std::uint16_t updated = csum_update(c, old_word, new_word);

        v[ck] = v[ck + 1] = 0;
        const std::uint16_t recomputed = csum_finish(csum_add(v));
        ASSERT_EQ(updated, recomputed) << "rep " << rep;
        v[ck] = static_cast<std::uint8_t>(updated >> 8);
        v[ck + 1] = static_cast<std::uint8_t>(updated);
        ASSERT_TRUE(csum_ok(v)) << "rep " << rep;
    }
}

TEST(Checksum, update_of_ttl_matches_recompute_on_known_header) {
    // Decrementing the TTL (first byte of the TTL/protocol word), as a router does.
    auto h = kKnownIpv4Header;
    const auto old_word = static_cast<std::uint16_t>(h[8] << 8 | h[9]);
    h[8] = 0x3f;
    const auto new_word = static_cast<std::uint16_t>(h[8] << 8 | h[9]);
    const std::uint16_t updated = csum_update(0xb861, old_word, new_word);
    h[10] = h[11] = 0;
    EXPECT_EQ(updated, csum_finish(csum_add(h)));
    EXPECT_EQ(updated, 0xb961);
}

TEST(Checksum, pseudo_header_sum_matches_bytewise_pseudo_header) {
    // RFC 768: source, destination, zero, protocol, UDP length.
    const Ipv4Addr src{0xc0a80001}, dst{0xc0a800c7};
    const std::array<std::uint8_t, 12> pseudo = {0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8,
                                                 0x00, 0xc7, 0x00, 0x11, 0x00, 0x5f};
    EXPECT_EQ(csum_fold(ipv4_pseudo_sum(src, dst, IpProto::udp, 0x5f)), reference_fold(pseudo));
}

}  // namespace
}  // namespace snic::net
