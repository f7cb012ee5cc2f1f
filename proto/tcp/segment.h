// TCP segments on the wire (RFC 9293 §3.1): the header, the options snic speaks (MSS,
// window scale and timestamps of RFC 7323, SACK-permitted and SACK of RFC 2018), parse and
// build, and the checksum over the IPv4 or IPv6 pseudo-header (RFC 9293 §3.1, RFC 8200
// §8.1). The bytes handled here start at the TCP header: IP and below are the caller's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "proto/net/addr.h"
#include "proto/net/byteorder.h"
#include "proto/tcp/seq.h"

namespace snic::tcp {

// --- addresses -------------------------------------------------------------------------------

// An IPv4 or IPv6 address; IPv4 is held IPv4-mapped (::ffff:a.b.c.d, RFC 4291 §2.5.5.2).
struct IpAddr {
    std::array<std::uint8_t, 16> bytes{};

    static constexpr IpAddr v4(net::Ipv4Addr a) {
        IpAddr r;
        r.bytes[10] = r.bytes[11] = 0xff;
        for (int i = 0; i < 4; ++i)
            r.bytes[12 + i] = static_cast<std::uint8_t>(a.value >> (24 - 8 * i));
        return r;
    }
    constexpr bool is_v4() const {
        for (int i = 0; i < 10; ++i)
            if (bytes[i] != 0) return false;
        return bytes[10] == 0xff && bytes[11] == 0xff;
    }
    friend constexpr bool operator==(const IpAddr&, const IpAddr&) = default;
};

struct Endpoint {
    IpAddr addr;
    std::uint16_t port = 0;
    friend constexpr bool operator==(const Endpoint&, const Endpoint&) = default;
};

// The partial sum of the pseudo-header for a segment of `tcp_length` bytes from src to dst:
// IPv4's (RFC 9293 §3.1) when both are IPv4, else IPv6's (RFC 8200 §8.1).
std::uint32_t pseudo_sum(const IpAddr& src, const IpAddr& dst, std::uint32_t tcp_length);
// (For two IPv4 addresses as the IPv4 header holds them, net::ipv4_pseudo_sum is the same
// without an IpAddr to build.)

// --- the header ------------------------------------------------------------------------------

namespace flag {
inline constexpr std::uint8_t fin = 0x01;
inline constexpr std::uint8_t syn = 0x02;
inline constexpr std::uint8_t rst = 0x04;
inline constexpr std::uint8_t psh = 0x08;
inline constexpr std::uint8_t ack = 0x10;
inline constexpr std::uint8_t urg = 0x20;
inline constexpr std::uint8_t ece = 0x40;
inline constexpr std::uint8_t cwr = 0x80;
}  // namespace flag

struct TcpHdr {
    net::Be16 src_port;
    net::Be16 dst_port;
    net::Be32 seq;
    net::Be32 ack;
    std::uint8_t data_offset;  // header length in 32-bit words, high nibble
    std::uint8_t flags;
    net::Be16 window;
    net::Be16 checksum;
    net::Be16 urgent;
};
static_assert(sizeof(TcpHdr) == 20 && alignof(TcpHdr) == 1);

inline constexpr std::size_t kTcpMinHdrLen = sizeof(TcpHdr);
inline constexpr std::size_t kTcpMaxHdrLen = 60;
inline constexpr std::size_t kTcpChecksumOffset = 16;

// --- options ---------------------------------------------------------------------------------

enum class OptKind : std::uint8_t {
    eol = 0,
    nop = 1,
    mss = 2,
    wscale = 3,
    sack_permitted = 4,
    sack = 5,
    timestamps = 8,
};

// Each option's length as the RFCs fix it (0: variable, checked by its parser).
struct OptInfo {
    OptKind kind;
    std::uint8_t length;
    std::string_view name;
};
inline constexpr std::array<OptInfo, 5> kOptTable = {{
    {OptKind::mss, 4, "mss"},                        // RFC 9293 §3.2
    {OptKind::wscale, 3, "wscale"},                  // RFC 7323 §2.2
    {OptKind::sack_permitted, 2, "sack_permitted"},  // RFC 2018 §2
    {OptKind::sack, 0, "sack"},                      // RFC 2018 §3: 2 + 8n, n = 1..4
    {OptKind::timestamps, 10, "timestamps"},         // RFC 7323 §3.2
}};

inline constexpr std::uint8_t kMaxWscale = 14;  // RFC 7323 §2.3
inline constexpr std::size_t kMaxSackBlocks = 4;

struct SackBlock {
    Seq left = 0;   // first sequence number of the block
    Seq right = 0;  // one past its last
    friend constexpr bool operator==(const SackBlock&, const SackBlock&) = default;
};

struct TcpOptions {
    bool has_mss = false;
    std::uint16_t mss = 0;
    bool has_wscale = false;
    std::uint8_t wscale = 0;  // as sent; the receiver clamps to kMaxWscale
    bool sack_permitted = false;
    bool has_timestamps = false;
    std::uint32_t ts_val = 0;
    std::uint32_t ts_ecr = 0;
    std::uint8_t nsack = 0;
    std::array<SackBlock, kMaxSackBlocks> sack{};
};

// The bytes the builder's option layout takes (a multiple of 4; Linux's layout, so that a
// Linux segment rebuilds byte for byte): MSS; SACK-permitted and timestamps (or NOP NOP in
// place of the one missing); NOP and window scale; NOP NOP and SACK blocks.
std::size_t options_length(const TcpOptions& o);

// --- parse -----------------------------------------------------------------------------------

enum class ParseError : std::uint8_t {
    none,
    too_short,     // fewer bytes than a header
    bad_offset,    // data offset below 5 or past the end
    bad_checksum,  // the pseudo-header and segment do not sum to all ones
    bad_option,    // an option runs past the header or has a wrong length
};
std::string_view parse_error_name(ParseError e);

// A parsed segment: header fields in host order, options, and a view of the payload.
struct Segment {
    std::uint16_t src_port = 0;
    std::uint16_t dst_port = 0;
    Seq seq = 0;
    Seq ack = 0;
    std::uint8_t flags = 0;
    std::uint16_t window = 0;  // as on the wire, unscaled
    std::uint16_t urgent = 0;
    std::uint16_t checksum = 0;
    std::uint8_t header_length = 0;
    TcpOptions opts;
    std::span<const std::uint8_t> payload;

    bool has(std::uint8_t f) const { return (flags & f) != 0; }
    // SEG.LEN: payload plus one for SYN and one for FIN.
    std::uint32_t seq_len() const {
        return static_cast<std::uint32_t>(payload.size()) + (has(flag::syn) ? 1 : 0) +
               (has(flag::fin) ? 1 : 0);
    }
};

// Parses the `bytes` of one segment (TCP header to the end of the IP payload). The checksum
// is verified against `pseudo` (pseudo_sum() of the segment's addresses and length) unless
// `verify_checksum` is false (a NIC checked it).
ParseError parse_segment(std::span<const std::uint8_t> bytes, std::uint32_t pseudo, Segment& out,
                         bool verify_checksum = true);

// --- build -----------------------------------------------------------------------------------

struct SegmentSpec {
    std::uint16_t src_port = 0;
    std::uint16_t dst_port = 0;
    Seq seq = 0;
    Seq ack = 0;
    std::uint8_t flags = 0;
    std::uint16_t window = 0;
    std::uint16_t urgent = 0;
    TcpOptions opts;
};

// Header plus options, in bytes.
inline std::size_t header_length(const SegmentSpec& s) {
    return kTcpMinHdrLen + options_length(s.opts);
}

// Writes the header, options and payload (the concatenation of `a` and `b`, so that a
// ring's two halves need no copy) into `out`, which must hold header_length(s) + payload
// bytes, and stores the checksum over `pseudo` (pseudo_sum() for the total length). With
// `partial` it stores `pseudo` folded instead, for a device to complete (checksum offload:
// the sum of the segment with that field in it, complemented, is the checksum). Returns the
// bytes written.
std::size_t write_segment(std::span<std::uint8_t> out, const SegmentSpec& s,
                          std::span<const std::uint8_t> a, std::span<const std::uint8_t> b,
                          std::uint32_t pseudo, bool partial = false);

// The reset that answers a segment arriving for no connection (RFC 9293 §3.10.7.1): seq =
// SEG.ACK when it has ACK, else seq 0 with ACK of SEG.SEQ + SEG.LEN. Ports are swapped. A
// segment that is itself a reset gets no answer: returns false.
bool reset_for(const Segment& in, SegmentSpec& out);

}  // namespace snic::tcp
