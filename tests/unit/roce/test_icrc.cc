// The ICRC (IBA vol 1 §7.8.1, RoCEv2 annex A17): the CRC-32 forwards against the published
// check value (the engine itself is tested in tests/unit/crc/); the masking rules one by
// one; the whole ICRC against frames built and checksummed by scapy's RoCE layer (an
// independent implementation) and against a reference written straight from the annex's
// description.
// Real captures from Linux soft-RoCE are checked in test_vectors.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "proto/net/checksum.h"
#include "proto/net/udp.h"
#include "proto/roce/bth.h"
#include "proto/roce/icrc.h"

namespace snic::roce {
namespace {

// CRC-32 one bit at a time, straight from the definition (reflected 0xEDB88320, register
// starting at all ones, result complemented).
std::uint32_t reference_crc32(std::span<const std::uint8_t> bytes) {
    std::uint32_t reg = 0xffffffff;
    for (std::uint8_t b : bytes) {
        reg ^= b;
        for (int i = 0; i < 8; ++i) reg = (reg >> 1) ^ (0xedb88320 & (0u - (reg & 1)));
    }
    return ~reg;
}

// The ICRC as the annex describes it, spelled out: build the pseudo-packet (8 bytes of
// ones, then the IP packet up to the ICRC with the variant fields set to ones) in a vector
// and run the bitwise CRC over it. `l3` is exactly the IP packet.
std::uint32_t reference_icrc(std::span<const std::uint8_t> l3) {
    std::vector<std::uint8_t> v;
    v.reserve(8 + l3.size());
    v.assign(8, 0xff);
    v.insert(v.end(), l3.begin(), l3.end() - 4);
    std::uint8_t* ip = v.data() + 8;
    std::size_t udp = 0;
    if ((ip[0] >> 4) == 4) {
        ip[1] = 0xff;  // TOS
        ip[8] = 0xff;  // TTL
        ip[10] = 0xff;
        ip[11] = 0xff;  // header checksum
        udp = (ip[0] & 0x0f) * 4u;
    } else {
        // version(4) traffic class(8) flow label(20): all but the version
        ip[0] = static_cast<std::uint8_t>(ip[0] | 0x0f);
        ip[1] = ip[2] = ip[3] = 0xff;
        ip[7] = 0xff;  // hop limit
        udp = 40;
    }
    ip[udp + 6] = ip[udp + 7] = 0xff;  // UDP checksum
    ip[udp + 8 + 4] = 0xff;            // BTH resv8a
    return reference_crc32(v);
}

std::vector<std::uint8_t> random_bytes(std::mt19937& rng, std::size_t n) {
    std::vector<std::uint8_t> v(n);
    for (auto& b : v) b = static_cast<std::uint8_t>(rng());
    return v;
}

std::span<const std::uint8_t> text(std::string_view s) {
    return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// --- CRC-32 ---------------------------------------------------------------------------------
// The engine itself (every path, both polynomials) is tested in tests/unit/crc/test_crc.cc;
// here, the forwards the ICRC's callers use and the bitwise reference the ICRC tests use.

TEST(IcrcCrc32, crc32_and_the_bitwise_reference_give_the_check_value_cbf43926) {
    // The catalogue check value of CRC-32/ISO-HDLC (Ethernet, zlib, PKZIP).
    EXPECT_EQ(crc32(text("123456789")), 0xcbf43926u);
    EXPECT_EQ(~crc32_update(kCrc32Init, text("123456789")), 0xcbf43926u);
    EXPECT_EQ(~crc32_update_table(kCrc32Init, text("123456789")), 0xcbf43926u);
    EXPECT_EQ(reference_crc32(text("123456789")), 0xcbf43926u);
}

// --- Frames built by scapy (scapy.contrib.roce computes the ICRC, IPv4 only) -----------------
// Generated with Debian's python3-scapy 2.5: bytes(Ether()/IP()/UDP(dport=4791)/BTH()/...).

// Ether/IP(tos=0xb9, ttl=17)/UDP(checksum computed)/BTH(RC_SEND_ONLY, SE, pad 3, FECN, BECN,
// dqpn 0xabc, AckReq, psn 0xfffffe)/"hello" + 3 pad bytes. scapy's ICRC: 0x51428e17.
constexpr std::array<std::uint8_t, 66> kScapySendOnly = {
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00,
    0x45, 0xb9, 0x00, 0x34, 0x12, 0x34, 0x40, 0x00, 0x11, 0x11, 0xca, 0xa4, 0xc6, 0x12,
    0x00, 0x01, 0xc6, 0x12, 0x00, 0x02, 0xc1, 0x23, 0x12, 0xb7, 0x00, 0x20, 0xb1, 0x8e,
    0x04, 0xb0, 0xff, 0xff, 0xc0, 0x00, 0x0a, 0xbc, 0x80, 0xff, 0xff, 0xfe, 0x68, 0x65,
    0x6c, 0x6c, 0x6f, 0x00, 0x00, 0x00, 0x17, 0x8e, 0x42, 0x51,
};
// Ether/IP(ttl=64)/UDP(checksum 0)/BTH(RC_ACKNOWLEDGE, dqpn 0x123, psn 0x42)/AETH(0x1f, msn 7).
// scapy's ICRC: 0x450e9629.
constexpr std::array<std::uint8_t, 62> kScapyAck = {
    0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x45, 0x00,
    0x00, 0x30, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0xee, 0x94, 0xc6, 0x12, 0x00, 0x02, 0xc6, 0x12,
    0x00, 0x01, 0xc1, 0x23, 0x12, 0xb7, 0x00, 0x1c, 0x00, 0x00, 0x11, 0x00, 0xff, 0xff, 0x00, 0x00,
    0x01, 0x23, 0x00, 0x00, 0x00, 0x42, 0x1f, 0x00, 0x00, 0x07, 0x29, 0x96, 0x0e, 0x45,
};
// Ether/IP(tos=0x03 (ECN CE), ttl=255)/UDP(checksum computed)/BTH(RC_RDMA_WRITE_ONLY, BECN,
// dqpn 0xfffffe, AckReq)/RETH(va 0x7f0012345000, rkey 0x1234abcd, len 64)/bytes 00..3f.
// scapy's ICRC: 0x42f75200.
constexpr std::array<std::uint8_t, 138> kScapyWriteOnly = {
    0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x45, 0x03,
    0x00, 0x7c, 0x00, 0x01, 0x00, 0x00, 0xff, 0x11, 0x2f, 0x45, 0xc6, 0x12, 0x00, 0x01, 0xc6, 0x12,
    0x00, 0x02, 0xd0, 0x0d, 0x12, 0xb7, 0x00, 0x68, 0x4a, 0x23, 0x0a, 0x00, 0xff, 0xff, 0x40, 0xff,
    0xff, 0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x12, 0x34, 0x50, 0x00, 0x12, 0x34,
    0xab, 0xcd, 0x00, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
    0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19,
    0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29,
    0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39,
    0x3a, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f, 0x00, 0x52, 0xf7, 0x42,
};

struct ScapyFrame {
    const char* name;
    std::span<const std::uint8_t> bytes;
    std::uint32_t icrc;
};
const ScapyFrame kScapyFrames[] = {
    {"RC_SEND_ONLY, TOS/TTL/FECN/BECN set", kScapySendOnly, 0x51428e17},
    {"RC_ACKNOWLEDGE", kScapyAck, 0x450e9629},
    {"RC_RDMA_WRITE_ONLY, ECN CE, BECN", kScapyWriteOnly, 0x42f75200},
};

TEST(Icrc, matches_scapy_on_frames_scapy_built) {
    for (const auto& f : kScapyFrames) {
        SCOPED_TRACE(f.name);
        const auto l3 = f.bytes.subspan(net::kEthHdrLen);
        ASSERT_EQ(icrc_load(&l3[l3.size() - 4]), f.icrc);
        const auto c = icrc_compute(l3);
        ASSERT_TRUE(c.has_value());
        EXPECT_EQ(*c, f.icrc);
        EXPECT_TRUE(icrc_verify(l3));
        EXPECT_EQ(reference_icrc(l3), f.icrc);
    }
}

TEST(Icrc, is_stored_least_significant_byte_first) {
    // scapy packs the CRC big-endian and reverses it; the wire's first byte is bits 0-7.
    const auto tail = std::span(kScapyAck).last(4);
    EXPECT_EQ(tail[0], 0x29);
    EXPECT_EQ(tail[3], 0x45);
    std::array<std::uint8_t, 4> out{};
    icrc_store(out.data(), 0x450e9629);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), tail.begin()));
}

TEST(Icrc, udp_checksum_over_an_icrc_covered_datagram_still_verifies) {
    // scapy computed the UDP checksum after the ICRC: both hold at once.
    const auto dgram = std::span(kScapySendOnly).subspan(34);
    EXPECT_TRUE(net::udp_checksum_ok(net::Ipv4Addr{0xc6120001}, net::Ipv4Addr{0xc6120002}, dgram));
}

// --- The masking rules, each on its own ----------------------------------------------------

// An IPv4 RoCEv2 packet with an ICRC of the given length of payload (random bytes).
std::vector<std::uint8_t> ipv4_packet(std::mt19937& rng, std::size_t payload,
                                      std::size_t options = 0) {
    const std::size_t ihl = 20 + options;
    const std::size_t len = ihl + 8 + kBthLen + payload + kIcrcLen;
    auto v = random_bytes(rng, len);
    v[0] = static_cast<std::uint8_t>(0x40 | (ihl / 4));
    v[2] = static_cast<std::uint8_t>(len >> 8);
    v[3] = static_cast<std::uint8_t>(len);
    v[9] = 17;
    v[ihl + 2] = 0x12;
    v[ihl + 3] = 0xb7;
    v[ihl + 4] = static_cast<std::uint8_t>((len - ihl) >> 8);
    v[ihl + 5] = static_cast<std::uint8_t>(len - ihl);
    EXPECT_TRUE(icrc_fill(v));
    return v;
}

std::vector<std::uint8_t> ipv6_packet(std::mt19937& rng, std::size_t payload) {
    const std::size_t len = 40 + 8 + kBthLen + payload + kIcrcLen;
    auto v = random_bytes(rng, len);
    v[0] = static_cast<std::uint8_t>(0x60 | (v[0] & 0x0f));
    v[4] = static_cast<std::uint8_t>((len - 40) >> 8);
    v[5] = static_cast<std::uint8_t>(len - 40);
    v[6] = 17;
    v[42] = 0x12;
    v[43] = 0xb7;
    v[44] = static_cast<std::uint8_t>((len - 40) >> 8);
    v[45] = static_cast<std::uint8_t>(len - 40);
    EXPECT_TRUE(icrc_fill(v));
    return v;
}

// Sets every byte of `l3` at `at` to each of a few values; the ICRC must stay (or not).
void expect_icrc_ignores(std::vector<std::uint8_t> l3, std::initializer_list<std::size_t> at,
                         std::uint8_t bits = 0xff) {
    ASSERT_TRUE(icrc_verify(l3));
    for (std::size_t i : at) {
        for (std::uint8_t v : {0x00, 0x01, 0x5a, 0x80, 0xff}) {
            auto copy = l3;
            copy[i] = static_cast<std::uint8_t>((copy[i] & ~bits) | (v & bits));
            EXPECT_TRUE(icrc_verify(copy)) << "byte " << i << " = " << int(copy[i]);
        }
    }
}

TEST(IcrcMask, ipv4_tos_ttl_and_header_checksum_are_masked) {
    std::mt19937 rng(1);
    expect_icrc_ignores(ipv4_packet(rng, 32), {1, 8, 10, 11});
}

TEST(IcrcMask, udp_checksum_is_masked) {
    std::mt19937 rng(2);
    expect_icrc_ignores(ipv4_packet(rng, 32), {26, 27});
    expect_icrc_ignores(ipv6_packet(rng, 32), {46, 47});
}

TEST(IcrcMask, bth_resv8a_fecn_becn_byte_is_masked) {
    std::mt19937 rng(3);
    expect_icrc_ignores(ipv4_packet(rng, 8), {28 + kBthResv8aOffset});
    expect_icrc_ignores(ipv6_packet(rng, 8), {48 + kBthResv8aOffset});
}

TEST(IcrcMask, ipv6_traffic_class_flow_label_and_hop_limit_are_masked) {
    std::mt19937 rng(4);
    const auto p = ipv6_packet(rng, 16);
    expect_icrc_ignores(p, {0}, 0x0f);  // traffic class, high nibble
    expect_icrc_ignores(p, {1, 2, 3, 7});
}

TEST(IcrcMask, every_other_header_byte_is_covered) {
    // Flipping any bit outside the masked fields changes the ICRC (or, for the version,
    // protocol and length fields, makes the packet one the ICRC does not apply to).
    std::mt19937 rng(5);
    const std::vector<std::pair<std::vector<std::uint8_t>, std::vector<std::size_t>>> cases = {
        {ipv4_packet(rng, 12), {1, 8, 10, 11, 26, 27, 32}},
        {ipv4_packet(rng, 12, 8), {1, 8, 10, 11, 34, 35, 40}},  // with 8 bytes of IP options
        {ipv6_packet(rng, 12), {1, 2, 3, 7, 46, 47, 52}},
    };
    for (const auto& [pkt, masked] : cases) {
        for (std::size_t at = 0; at + kIcrcLen < pkt.size(); ++at) {
            const bool is_masked = std::find(masked.begin(), masked.end(), at) != masked.end();
            for (int bit = 0; bit < 8; ++bit) {
                auto copy = pkt;
                copy[at] ^= static_cast<std::uint8_t>(1u << bit);
                const bool masked_bit = is_masked || (pkt[0] >> 4 == 6 && at == 0 && bit < 4);
                EXPECT_EQ(icrc_verify(copy), masked_bit) << "byte " << at << " bit " << bit;
            }
        }
    }
}

TEST(IcrcMask, the_masked_lrh_stand_in_is_eight_bytes_of_ones) {
    // Without the 8 bytes of ones (or with zeros instead) the CRC differs: the reference
    // and the implementation agree only with them.
    std::mt19937 rng(6);
    const auto p = ipv4_packet(rng, 20);
    std::vector<std::uint8_t> without(p.begin(), p.end() - 4);
    without[1] = without[8] = without[10] = without[11] = 0xff;
    without[26] = without[27] = without[32] = 0xff;
    EXPECT_NE(reference_crc32(without), icrc_load(&p[p.size() - 4]));
    std::vector<std::uint8_t> with;
    with.reserve(8 + without.size());
    with.assign(8, 0xff);
    with.insert(with.end(), without.begin(), without.end());
    EXPECT_EQ(reference_crc32(with), icrc_load(&p[p.size() - 4]));
}

TEST(Icrc, matches_the_reference_on_random_packets) {
    std::mt19937 rng(7);
    for (std::size_t payload = 0; payload < 300; payload += 1) {
        const auto v4 = ipv4_packet(rng, payload, (payload % 5) * 4);
        ASSERT_EQ(icrc_load(&v4[v4.size() - 4]), reference_icrc(v4)) << payload;
        const auto v6 = ipv6_packet(rng, payload);
        ASSERT_EQ(icrc_load(&v6[v6.size() - 4]), reference_icrc(v6)) << payload;
    }
}

TEST(Icrc, begin_then_update_over_scattered_pieces_equals_compute) {
    std::mt19937 rng(8);
    const auto p = ipv4_packet(rng, 1000);
    // Headers in one piece, the rest split as an mbuf chain might be.
    const auto start = icrc_begin(std::span(p).first(20 + 8 + kBthLen));
    ASSERT_TRUE(start.has_value());
    EXPECT_EQ(start->bth_end, 40);
    EXPECT_EQ(start->ip_end, p.size());
    std::uint32_t reg = start->reg;
    std::size_t at = start->bth_end;
    for (std::size_t piece : {7u, 256u, 1u, 500u}) {
        reg = crc32_update(reg, std::span(p).subspan(at, piece));
        at += piece;
    }
    reg = crc32_update(reg, std::span(p).subspan(at, p.size() - kIcrcLen - at));
    EXPECT_EQ(~reg, icrc_compute(p).value());
    EXPECT_EQ(~reg, icrc_load(&p[p.size() - 4]));
}

TEST(Icrc, ethernet_padding_after_the_ip_packet_is_ignored) {
    std::mt19937 rng(9);
    auto p = ipv4_packet(rng, 0);  // 48 bytes: a 62-byte frame, padded to 64 by some NICs
    const auto c = icrc_compute(p);
    p.push_back(0);
    p.push_back(0);
    EXPECT_EQ(icrc_compute(p), c);
    EXPECT_TRUE(icrc_verify(p));
}

TEST(Icrc, applies_only_to_ipv4_or_ipv6_udp_with_room_for_bth_and_icrc) {
    std::mt19937 rng(10);
    const auto good = ipv4_packet(rng, 4);
    EXPECT_FALSE(icrc_compute({}).has_value());
    EXPECT_FALSE(icrc_compute(std::span(good).first(20 + 8 + 11)).has_value());  // BTH cut
    auto tcp = good;
    tcp[9] = 6;
    EXPECT_FALSE(icrc_compute(tcp).has_value());
    auto v5 = good;
    v5[0] = 0x55;
    EXPECT_FALSE(icrc_compute(v5).has_value());
    auto short_ihl = good;
    short_ihl[0] = 0x44;
    EXPECT_FALSE(icrc_compute(short_ihl).has_value());
    auto long_total = good;
    long_total[3] = static_cast<std::uint8_t>(long_total[3] + 4);  // beyond the buffer
    EXPECT_FALSE(icrc_compute(long_total).has_value());
    EXPECT_FALSE(icrc_verify(long_total));
    auto no_icrc = good;
    no_icrc[2] = 0;
    no_icrc[3] = 20 + 8 + 12 + 3;  // total length leaves no room for the ICRC
    EXPECT_FALSE(icrc_compute(no_icrc).has_value());
    auto v6 = ipv6_packet(rng, 4);
    v6[6] = 0;  // a hop-by-hop extension header: not supported
    EXPECT_FALSE(icrc_compute(v6).has_value());
    std::vector<std::uint8_t> small(good.begin(), good.end());
    EXPECT_FALSE(icrc_fill(std::span(small).first(30)));
}

// ---- IcrcFlow: the invariant part folded once --------------------------------------------------

// A packet of the flow `base` with another payload length and other per-packet fields (and
// other masked bytes, which the ICRC ignores), its lengths consistent.
std::vector<std::uint8_t> flow_packet(std::mt19937& rng, const std::vector<std::uint8_t>& base,
                                      std::size_t payload) {
    auto v = random_bytes(rng, 40 + payload + kIcrcLen);
    std::copy_n(base.begin(), 40, v.begin());
    const std::size_t len = v.size();
    v[2] = static_cast<std::uint8_t>(len >> 8);
    v[3] = static_cast<std::uint8_t>(len);
    v[24] = static_cast<std::uint8_t>((len - 20) >> 8);
    v[25] = static_cast<std::uint8_t>(len - 20);
    for (const std::size_t at : {28, 29, 36, 37, 38, 39}) v[at] = static_cast<std::uint8_t>(rng());
    for (const std::size_t at : {1, 8, 10, 11, 26, 27, 32})
        v[at] = static_cast<std::uint8_t>(rng());
    return v;
}

TEST(IcrcFlow, equals_the_full_computation_for_every_packet_of_the_flow) {
    std::mt19937 rng(11);
    for (int flow = 0; flow < 8; ++flow) {
        const auto base = ipv4_packet(rng, 16);
        const auto prepared = IcrcFlow::prepare(base);
        ASSERT_TRUE(prepared.has_value());
        for (std::size_t payload = 0; payload < 1100; payload += 1 + payload / 8) {
            const auto p = flow_packet(rng, base, payload);
            ASSERT_EQ(prepared->compute(p.data(), p.size()), reference_icrc(p))
                << "flow " << flow << ", payload " << payload;
        }
    }
}

TEST(IcrcFlow, a_change_in_an_invariant_byte_changes_the_icrc) {
    std::mt19937 rng(12);
    const auto base = ipv4_packet(rng, 16);
    const auto prepared = IcrcFlow::prepare(base);
    ASSERT_TRUE(prepared.has_value());
    // The addresses, ports, P_Key and destination QP are folded in the seed, not read.
    for (const std::size_t at : {12, 19, 20, 23, 30, 31, 33, 35}) {
        auto p = flow_packet(rng, base, 8);
        p[at] ^= 0x01;
        EXPECT_NE(prepared->compute(p.data(), p.size()), reference_icrc(p)) << at;
    }
}

TEST(IcrcFlow, prepares_only_ipv4_without_options_carrying_udp) {
    std::mt19937 rng(13);
    EXPECT_FALSE(IcrcFlow::prepare(ipv4_packet(rng, 16, 4)).has_value());
    EXPECT_FALSE(IcrcFlow::prepare(ipv6_packet(rng, 16)).has_value());
    auto tcp = ipv4_packet(rng, 16);
    tcp[9] = 6;
    EXPECT_FALSE(IcrcFlow::prepare(tcp).has_value());
    const auto ok = ipv4_packet(rng, 16);
    EXPECT_FALSE(IcrcFlow::prepare(std::span(ok).first(39)).has_value());
    EXPECT_TRUE(IcrcFlow::prepare(std::span(ok).first(40)).has_value());
}

// ---- IcrcRxFlow: a receiver's flow, learnt from one packet -------------------------------------

// The IPv4 source of the packet at l3 (host order): the peer its flow learns from.
std::uint32_t source_of(const std::vector<std::uint8_t>& l3) {
    return std::uint32_t{l3[12]} << 24 | std::uint32_t{l3[13]} << 16 | std::uint32_t{l3[14]} << 8 |
           l3[15];
}

TEST(IcrcRxFlow, starts_every_packet_of_the_learnt_flow_as_the_full_computation) {
    std::mt19937 rng(21);
    for (int f = 0; f < 8; ++f) {
        const auto base = ipv4_packet(rng, 16);
        IcrcRxFlow flow(source_of(base));
        EXPECT_FALSE(flow.begin(base).has_value());  // nothing learnt yet
        ASSERT_TRUE(flow.learn(base));
        for (std::size_t payload = 0; payload < 1100; payload += 1 + payload / 8) {
            auto p = flow_packet(rng, base, payload);
            p[4] = static_cast<std::uint8_t>(rng());  // the IPv4 identification: per packet
            p[5] = static_cast<std::uint8_t>(rng());
            const auto fast = flow.begin(p);
            const auto full = icrc_begin(p);
            ASSERT_TRUE(fast.has_value()) << payload;
            ASSERT_TRUE(full.has_value());
            EXPECT_EQ(fast->reg, full->reg) << payload;
            EXPECT_EQ(fast->bth_end, full->bth_end);
            EXPECT_EQ(fast->ip_end, full->ip_end);
        }
    }
}

TEST(IcrcRxFlow, a_packet_differing_in_any_invariant_byte_is_not_of_the_flow) {
    std::mt19937 rng(22);
    const auto base = ipv4_packet(rng, 16);
    IcrcRxFlow flow(source_of(base));
    ASSERT_TRUE(flow.learn(base));
    // Every byte of the 40 is masked, per packet, or repeated by the flow; each of the last
    // kind, changed, takes the packet off the learnt flow.
    const std::set<std::size_t> masked = {1, 8, 10, 11, 26, 27, 32};
    const std::set<std::size_t> per_packet = {2, 3, 4, 5, 24, 25, 28, 29, 36, 37, 38, 39};
    std::size_t invariant = 0;
    for (std::size_t at = 0; at < 40; ++at) {
        auto p = flow_packet(rng, base, 8);
        ASSERT_TRUE(flow.begin(p).has_value());
        p[at] ^= 0x10;
        const bool free_byte = masked.count(at) != 0 || per_packet.count(at) != 0;
        if (at == 2 || at == 3) continue;  // the length: may leave the packet malformed
        EXPECT_EQ(flow.begin(p).has_value(), free_byte) << "byte " << at;
        invariant += free_byte ? 0 : 1;
    }
    EXPECT_EQ(invariant, 21u);
}

TEST(IcrcRxFlow, learns_only_ipv4_without_options_carrying_udp_and_forgets_on_a_failed_learn) {
    std::mt19937 rng(23);
    const auto ok = ipv4_packet(rng, 16);
    IcrcRxFlow flow(source_of(ok));
    ASSERT_TRUE(flow.learn(ok));
    EXPECT_TRUE(flow.learnt());
    auto options = ipv4_packet(rng, 16, 4);
    std::copy_n(ok.begin() + 12, 4, options.begin() + 12);  // the peer's, with IPv4 options
    EXPECT_FALSE(flow.learn(options));
    EXPECT_FALSE(flow.learnt());
    EXPECT_FALSE(flow.begin(ok).has_value());
    EXPECT_FALSE(flow.learn(ipv6_packet(rng, 16)));
    auto tcp = ok;
    tcp[9] = 6;
    EXPECT_FALSE(flow.learn(tcp));
    EXPECT_FALSE(flow.learn(std::span(ok).first(39)));
    ASSERT_TRUE(flow.learn(ok));
    EXPECT_FALSE(flow.begin(std::span(ok).first(39)).has_value());  // too short for the headers
}

TEST(IcrcRxFlow, learns_from_its_peer_only_and_a_stranger_changes_nothing) {
    std::mt19937 rng(24);
    const auto peer = ipv4_packet(rng, 16);
    auto stranger = peer;
    stranger[15] ^= 0x01;  // another source: the same flow but for its address
    IcrcRxFlow flow(source_of(peer));
    EXPECT_FALSE(flow.learn(stranger));
    EXPECT_FALSE(flow.learnt());
    ASSERT_TRUE(flow.learn(peer));
    EXPECT_FALSE(flow.learn(stranger));
    EXPECT_TRUE(flow.learnt());  // still the peer's flow
    EXPECT_TRUE(flow.begin(peer).has_value());
    EXPECT_FALSE(flow.begin(stranger).has_value());
    IcrcRxFlow nobody;  // a datagram QP's: learns from no one
    EXPECT_FALSE(nobody.learn(peer));
    EXPECT_FALSE(nobody.begin(peer).has_value());
}

}  // namespace
}  // namespace snic::roce
