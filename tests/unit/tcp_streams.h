// The TCP byte streams of a wire capture (tests/vectors): each direction's segments, put
// back in stream order by sequence number. For tests that read what rides on TCP (MPA,
// DDP/RDMAP) from real traffic. IPv4 only (siw's traffic in the captures is all IPv4).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "tests/unit/pcap.h"

namespace snic::test {

inline std::uint16_t stream_be16(const std::uint8_t* p) {
    return static_cast<std::uint16_t>(p[0] << 8 | p[1]);
}

inline std::uint32_t stream_be32(const std::uint8_t* p) {
    return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

// One direction of a TCP connection.
struct Direction {
    std::array<std::uint8_t, 4> src{};
    std::array<std::uint8_t, 4> dst{};
    std::uint16_t sport = 0;
    std::uint16_t dport = 0;

    Direction reversed() const { return {dst, src, dport, sport}; }
    auto operator<=>(const Direction&) const = default;
};

struct Segment {
    std::uint32_t seq;
    std::span<const std::uint8_t> data;
};

struct HalfStream {
    std::optional<std::uint32_t> isn;  // from the SYN; the data starts at isn + 1
    std::vector<Segment> segments;     // in capture order
};

// The TCP segments of the capture's IPv4 frames, by direction. The spans point into `pcap`.
inline std::map<Direction, HalfStream> tcp_segments(const Pcap& pcap) {
    std::map<Direction, HalfStream> out;
    for (const auto& frame : pcap.frames) {
        const std::span<const std::uint8_t> f = frame;
        if (f.size() < 14 + 20 || stream_be16(&f[12]) != 0x0800) continue;
        const auto ip = f.subspan(14);
        const std::size_t ihl = (ip[0] & 0x0f) * std::size_t{4};
        const std::size_t total = stream_be16(&ip[2]);
        if ((ip[0] >> 4) != 4 || ip[9] != 6 || total > ip.size() || total < ihl + 20) continue;
        EXPECT_EQ(stream_be16(&ip[6]) & 0x3fff, 0) << "an IP fragment";  // MF clear, offset 0
        const auto tcp = ip.subspan(ihl, total - ihl);
        const std::size_t doff = (tcp[12] >> 4) * std::size_t{4};
        if (doff < 20 || doff > tcp.size()) {
            ADD_FAILURE() << "bad TCP data offset " << doff;
            continue;
        }
        Direction d;
        std::memcpy(d.src.data(), &ip[12], 4);
        std::memcpy(d.dst.data(), &ip[16], 4);
        d.sport = stream_be16(&tcp[0]);
        d.dport = stream_be16(&tcp[2]);
        HalfStream& h = out[d];
        const std::uint32_t seq = stream_be32(&tcp[4]);
        if ((tcp[13] & 0x02) != 0) h.isn = seq;  // SYN
        if (tcp.size() > doff) h.segments.push_back({seq, tcp.subspan(doff)});
    }
    return out;
}

// The bytes of one direction in stream order. Segments are placed by sequence number
// relative to the SYN's, so retransmitted and reordered segments land where they belong;
// a byte seen twice must be the same both times and counts once; a hole is a failure.
inline ::testing::AssertionResult reassemble(const HalfStream& h, std::vector<std::uint8_t>& out) {
    out.clear();
    if (h.segments.empty()) return ::testing::AssertionSuccess();
    if (!h.isn) return ::testing::AssertionFailure() << "data without a SYN";
    struct Placed {
        std::uint32_t offset;  // of its first byte in the stream
        std::span<const std::uint8_t> data;
    };
    std::vector<Placed> placed;
    for (const Segment& s : h.segments) placed.push_back({s.seq - (*h.isn + 1), s.data});
    std::stable_sort(placed.begin(), placed.end(),
                     [](const Placed& a, const Placed& b) { return a.offset < b.offset; });
    for (const Placed& p : placed) {
        if (p.offset > out.size()) {
            return ::testing::AssertionFailure() << "a hole at stream byte " << out.size();
        }
        const std::size_t seen = std::min(out.size() - p.offset, p.data.size());
        if (!std::equal(p.data.begin(), p.data.begin() + static_cast<std::ptrdiff_t>(seen),
                        out.begin() + p.offset)) {
            return ::testing::AssertionFailure()
                   << "a retransmission differs from the first copy at byte " << p.offset;
        }
        out.insert(out.end(), p.data.begin() + static_cast<std::ptrdiff_t>(seen), p.data.end());
    }
    return ::testing::AssertionSuccess();
}

}  // namespace snic::test
