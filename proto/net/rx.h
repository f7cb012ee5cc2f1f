// First checks and dispatch of a received frame: classify() validates Ethernet,
// ARP, IPv4, ICMP and UDP/TCP headers against the local interface and says what
// the frame is, or why it is dropped. Pure: no state, no allocation.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "proto/net/addr.h"

namespace snic::net {

// Every reason a frame is dropped. The names are the counters' names.
enum class Drop : std::uint8_t {
    eth_truncated,
    eth_not_for_us,
    ethertype_unsupported,
    arp_malformed,
    arp_unsupported,
    arp_not_for_us,
    ip_truncated,
    ip_bad_version,
    ip_bad_header_length,
    ip_bad_total_length,
    ip_bad_checksum,
    ip_not_for_us,
    ip_fragment,
    ip_proto_unsupported,
    icmp_truncated,
    icmp_bad_checksum,
    icmp_unsupported_type,
    udp_truncated,
    udp_bad_length,
    udp_bad_checksum,
    udp_no_listener,
    tcp_truncated,
    tcp_no_listener,
    rx_scattered,
    count_
};

inline constexpr std::size_t kDropReasons = static_cast<std::size_t>(Drop::count_);

inline constexpr std::array<std::string_view, kDropReasons> kDropNames = {
    "eth_truncated",         "eth_not_for_us",       "ethertype_unsupported", "arp_malformed",
    "arp_unsupported",       "arp_not_for_us",       "ip_truncated",          "ip_bad_version",
    "ip_bad_header_length",  "ip_bad_total_length",  "ip_bad_checksum",       "ip_not_for_us",
    "ip_fragment",           "ip_proto_unsupported", "icmp_truncated",        "icmp_bad_checksum",
    "icmp_unsupported_type", "udp_truncated",        "udp_bad_length",        "udp_bad_checksum",
    "udp_no_listener",       "tcp_truncated",        "tcp_no_listener",       "rx_scattered",
};

constexpr std::string_view drop_name(Drop d) {
    return kDropNames[static_cast<std::size_t>(d)];
}

enum class RxKind : std::uint8_t {
    drop,
    arp_request,  // a request for our address
    arp_reply,    // a reply addressed to us
    arp_other,    // valid ARP not about us: may refresh a cache entry (RFC 826 merge)
    icmp_echo_request,
    icmp_echo_reply,
    icmp_unreachable,  // destination unreachable quoting an IPv4 header and 8 bytes (RFC 792)
    udp,
    tcp,
};

// What classify() found. Offsets are from the start of the frame; l4_length is the
// transport segment's length as bounded by the IP total length (Ethernet padding excluded).
struct RxFrame {
    RxKind kind = RxKind::drop;
    Drop drop = Drop::count_;
    std::uint16_t l3_offset = 0;
    std::uint16_t l4_offset = 0;
    std::uint16_t l4_length = 0;
    Ipv4Addr src_ip{};
    std::uint16_t dst_port = 0;  // UDP/TCP
    bool l4_verified = false;    // TCP: the port vouched for its checksum (RxVerified::l4)
};

struct LocalIf {
    MacAddr mac;
    Ipv4Addr ip;
};

// The checksums the port's device found good (receive checksum offload): those classify()
// does not check again.
struct RxVerified {
    bool ip = false;  // the IPv4 header's
    bool l4 = false;  // UDP's or TCP's (TCP's is checked by the TCP stack: RxFrame::l4_verified)
};

RxFrame classify(std::span<const std::uint8_t> frame, const LocalIf& local,
                 RxVerified verified = {});

// classify() of a frame of `frame_len` bytes that arrives in segments, `head` its first:
// taken only as a UDP datagram to this address without a checksum (RFC 768 allows none over
// IPv4; RoCEv2 senders send none), its Ethernet, IPv4 and UDP headers in `head` and its IPv4
// length the frame's. Anything else is dropped, as rx_scattered when classify() would have
// taken it whole.
RxFrame classify_split(std::span<const std::uint8_t> head, std::size_t frame_len,
                       const LocalIf& local);

}  // namespace snic::net
