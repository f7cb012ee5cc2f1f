// CRC-32C against real iWARP traffic: soft-iWARP (Linux siw) between two machines, MPA with
// CRCs and without markers, revision 2 and revision 1 (tests/vectors/README.md). Each TCP
// connection's byte stream is put back together by sequence number, the MPA request or
// reply at its start is read (RFC 5044 §7.1), and the rest is split into FPDUs (§4): the
// CRC-32C of every FPDU must equal the one siw put on the wire.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/crc/crc.h"
#include "tests/unit/pcap.h"
#include "tests/unit/tcp_streams.h"

namespace snic::crc {
namespace {

std::uint16_t be16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

std::uint32_t be32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

std::uint32_t le32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
           std::uint32_t{p[3]} << 24;
}

// The TCP byte streams: tests/unit/tcp_streams.h.
using test::Direction;
using test::HalfStream;
using test::reassemble;
using test::Segment;
using test::tcp_segments;

// --- MPA ------------------------------------------------------------------------------

constexpr std::string_view kRequestKey = "MPA ID Req Frame";
constexpr std::string_view kReplyKey = "MPA ID Rep Frame";

// The MPA request or reply frame a stream starts with (RFC 5044 §7.1): a 16-byte key, the
// flags M (markers), C (CRC), R (rejected) and reserved bits, the revision, the private
// data length, the private data.
struct MpaFrame {
    bool request = false;
    bool markers = false;
    bool crc = false;
    bool rejected = false;
    std::uint8_t revision = 0;
    std::size_t length = 0;  // of the whole frame: the first FPDU follows
};

std::optional<MpaFrame> read_mpa_frame(std::span<const std::uint8_t> s) {
    constexpr std::size_t kKeyLen = 16;
    constexpr std::size_t kFixed = kKeyLen + 4;
    if (s.size() < kFixed) return std::nullopt;
    const std::string_view key(reinterpret_cast<const char*>(s.data()), kKeyLen);
    if (key != kRequestKey && key != kReplyKey) return std::nullopt;
    MpaFrame m;
    m.request = key == kRequestKey;
    m.markers = (s[16] & 0x80) != 0;
    m.crc = (s[16] & 0x40) != 0;
    m.rejected = (s[16] & 0x20) != 0;
    m.revision = s[17];
    m.length = kFixed + be16(&s[18]);
    if (m.length > s.size()) return std::nullopt;
    return m;
}

// FPDUs (RFC 5044 §4, markers off): the ULPDU length (2 bytes, big-endian), the ULPDU, pad
// to a multiple of 4 counted from the FPDU's start, and the CRC-32C of all of that. On the
// wire the CRC goes least significant byte first, as iSCSI's digest does (see
// the_crc_goes_on_the_wire_least_significant_byte_first).
struct Fpdus {
    std::size_t count = 0;
    std::size_t crc_good = 0;
};

void check_fpdus(std::span<const std::uint8_t> s, Fpdus& out) {
    std::size_t at = 0;
    while (at < s.size()) {
        if (s.size() - at < 2) {
            ADD_FAILURE() << "a cut ULPDU length at stream byte " << at;
            return;
        }
        const std::size_t covered = (2 + be16(&s[at]) + std::size_t{3}) & ~std::size_t{3};
        if (s.size() - at < covered + 4) {
            ADD_FAILURE() << "a cut FPDU at stream byte " << at;
            return;
        }
        const auto fpdu = s.subspan(at, covered);
        const std::uint32_t wire = le32(&s[at + covered]);
        const std::uint32_t computed = Crc32c::compute(fpdu);
        EXPECT_EQ(computed, wire) << std::hex << "FPDU at stream byte 0x" << at;
        EXPECT_EQ(~Crc32c::update_table(Crc32c::kInit, fpdu), wire);
        ++out.count;
        if (computed == wire) ++out.crc_good;
        at += covered + 4;
    }
}

struct Census {
    std::size_t connections = 0;  // with an MPA request one way and a reply the other
    Fpdus fpdus;
};

// Checks every iWARP connection of the capture: the initiator's stream starts with an MPA
// request and the responder's with a reply, both of `revision`, CRCs on, markers off, not
// rejected; every FPDU after them carries a good CRC-32C.
Census check_capture(const char* name, int revision) {
    test::Pcap pcap;
    Census c;
    EXPECT_TRUE(test::read_pcap(test::vector_path(name), pcap));
    const auto directions = tcp_segments(pcap);
    for (const auto& [dir, half] : directions) {
        SCOPED_TRACE("TCP port " + std::to_string(dir.sport) + " -> " + std::to_string(dir.dport));
        std::vector<std::uint8_t> stream;
        EXPECT_TRUE(reassemble(half, stream));
        if (stream.empty()) continue;  // e.g. a connection refused
        const auto mpa = read_mpa_frame(stream);
        EXPECT_TRUE(mpa.has_value()) << "a TCP stream that does not start with an MPA frame";
        if (!mpa) continue;
        EXPECT_FALSE(mpa->markers) << "captured with markers off";
        EXPECT_TRUE(mpa->crc) << "captured with CRCs on";
        EXPECT_FALSE(mpa->rejected);
        EXPECT_EQ(mpa->revision, revision);
        if (mpa->request) {
            // The other direction must answer with a reply.
            const auto back = directions.find(dir.reversed());
            std::vector<std::uint8_t> reply;
            EXPECT_TRUE(back != directions.end() && reassemble(back->second, reply));
            const auto rep = read_mpa_frame(reply);
            EXPECT_TRUE(rep && !rep->request) << "an MPA request without a reply";
            if (rep && !rep->request) ++c.connections;
        }
        check_fpdus(std::span(stream).subspan(mpa->length), c.fpdus);
    }
    return c;
}

TEST(MpaCaptures, every_fpdu_crc32c_of_siw_mpa_revision_2_matches_the_wire) {
    const Census c = check_capture("siw_real_crc.pcap", 2);
    // 7 connections (rping's to port 7174, six to perftest's 18515) and 311 FPDUs, as many
    // as Wireshark 4.0's iwarp_mpa dissector marks "Good CRC32".
    EXPECT_EQ(c.connections, 7u);
    EXPECT_GE(c.fpdus.count, 311u);
    EXPECT_EQ(c.fpdus.crc_good, c.fpdus.count);
}

TEST(MpaCaptures, every_fpdu_crc32c_of_siw_mpa_revision_1_matches_the_wire) {
    const Census c = check_capture("siw_real_crc_mpav1.pcap", 1);
    // 7 connections and 291 FPDUs (Wireshark: 291 "Good CRC32"); one more TCP connection,
    // to rping's port, is refused (SYN, RST) before any data.
    EXPECT_EQ(c.connections, 7u);
    EXPECT_GE(c.fpdus.count, 291u);
    EXPECT_EQ(c.fpdus.crc_good, c.fpdus.count);
}

// Frame 41 of siw_real_crc.pcap, rping's first FPDU after the MPA exchange: a 34-byte ULPDU
// (no pad) and the CRC bytes bc 41 a9 c3. The CRC-32C is 0xc3a941bc: its least significant
// byte goes first, as in iSCSI's digest and RFC 3720's examples. (Wireshark shows the bytes
// read big-endian, "0xbc41a9c3 (Good CRC32)".)
TEST(MpaCaptures, the_crc_goes_on_the_wire_least_significant_byte_first) {
    test::Pcap pcap;
    ASSERT_TRUE(test::read_pcap(test::vector_path("siw_real_crc.pcap"), pcap));
    ASSERT_GE(pcap.frames.size(), 41u);
    const std::span<const std::uint8_t> f = pcap.frames[40];
    const std::size_t payload = 14 + 20 + 32;  // Ethernet, IPv4, TCP with timestamps
    ASSERT_EQ(f.size(), payload + 40);
    ASSERT_EQ(be16(&f[payload]), 34);
    const auto fpdu = f.subspan(payload, 36);
    const auto crc = f.subspan(payload + 36, 4);
    EXPECT_EQ(Crc32c::compute(fpdu), 0xc3a941bcu);
    const std::array<std::uint8_t, 4> wire = {0xbc, 0x41, 0xa9, 0xc3};
    EXPECT_TRUE(std::equal(crc.begin(), crc.end(), wire.begin()));
    EXPECT_EQ(le32(crc.data()), Crc32c::compute(fpdu));
    EXPECT_NE(be32(crc.data()), Crc32c::compute(fpdu));
}

// The captures hold no retransmission: make some. Every segment again, in a random order
// (whole and from a few bytes in), must rebuild the same streams; a lost one is a hole.
TEST(MpaCaptures, reordered_and_repeated_segments_rebuild_the_same_streams) {
    test::Pcap pcap;
    ASSERT_TRUE(test::read_pcap(test::vector_path("siw_real_crc.pcap"), pcap));
    std::mt19937 rng(5044);
    std::size_t streams = 0;
    for (const auto& [dir, half] : tcp_segments(pcap)) {
        std::vector<std::uint8_t> in_order;
        ASSERT_TRUE(reassemble(half, in_order));
        if (half.segments.empty()) continue;
        ++streams;
        HalfStream mixed = half;
        for (const Segment& s : half.segments) {
            mixed.segments.push_back(s);
            const std::size_t k = rng() % s.data.size();
            mixed.segments.push_back({s.seq + static_cast<std::uint32_t>(k), s.data.subspan(k)});
        }
        std::shuffle(mixed.segments.begin(), mixed.segments.end(), rng);
        std::vector<std::uint8_t> rebuilt;
        ASSERT_TRUE(reassemble(mixed, rebuilt));
        EXPECT_EQ(rebuilt, in_order);

        if (half.segments.size() < 2) continue;
        HalfStream lost = half;
        lost.segments.erase(lost.segments.begin());  // the first, so nothing else covers it
        EXPECT_FALSE(reassemble(lost, rebuilt));
    }
    EXPECT_EQ(streams, 14u);  // both directions of the 7 connections
}

}  // namespace
}  // namespace snic::crc
