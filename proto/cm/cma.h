// rdma_cm's conventions on top of the IB CM, as Linux's cma.c speaks them (IBA vol 1 annex
// A11, "RDMA IP CM Service"): the service ID of an IP port space and port, and the 36-byte
// header rdma_cm puts at the front of REQ and SIDR_REQ private data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace snic::cm {

// rdma_cm port spaces (enum rdma_ucm_port_space).
enum class PortSpace : std::uint16_t { ipoib = 0x0002, tcp = 0x0106, udp = 0x0111, ib = 0x013F };

// Linux's cma_get_service_id: ps << 16 | port. The TCP, UDP and IB spaces put their 0x01 in
// bits 24-31, which is the 0x0000000001000000 prefix of annex A11's IP service IDs.
constexpr std::uint64_t service_id(PortSpace ps, std::uint16_t port) {
    return (std::uint64_t{static_cast<std::uint16_t>(ps)} << 16) | port;
}

// The flow label of a RoCEv2 path from rdma_cm's ports, as cma.c's
// cma_get_roce_udp_flow_label derives it for the REQ's primary path (an IPv4 source, or an
// IPv6 one without a flow label of its own): a hash of the source and destination ports.
// The passive side's QP takes the REQ's, so both directions carry the same label.
constexpr std::uint32_t roce_flow_label(std::uint16_t src_port, std::uint16_t dst_port) {
    return (std::uint32_t{src_port} * 31 + dst_port) & 0xFFFFF;
}

// The port space and port of an rdma_cm service ID, or nullopt if it is not one.
struct IpService {
    PortSpace ps;
    std::uint16_t port;
};
std::optional<IpService> ip_service(std::uint64_t service_id);

// The cma header (struct cma_hdr): byte 0 cma_version (0), byte 1 the IP version in its high
// nibble (4 << 4 for IPv4), bytes 2-3 the source port (network order; the destination port
// is in the service ID), bytes 4-19 the source address, 20-35 the destination address, an
// IPv4 address in the last 4 bytes of each (the first 12 zero).
inline constexpr std::size_t kCmaHeaderSize = 36;
inline constexpr std::uint8_t kCmaVersion = 0x00;

struct CmaHeader {
    std::uint16_t src_port = 0;
    std::uint32_t src_ip = 0;  // IPv4, host order
    std::uint32_t dst_ip = 0;
};

// Writes the header at the front of `out` (>= 36 bytes); false when out is too short.
bool encode_cma_header(const CmaHeader& h, std::span<std::uint8_t> out);
// Reads it: nullopt when too short, cma_version is not 0, or the IP version is not 4.
std::optional<CmaHeader> decode_cma_header(std::span<const std::uint8_t> in);

// REQ private data rdma_cm style: the header then the consumer's bytes (<= 92 - 36 = 56).
inline constexpr std::size_t kCmaReqUserData = 92 - kCmaHeaderSize;
inline constexpr std::size_t kCmaSidrUserData = 216 - kCmaHeaderSize;

}  // namespace snic::cm
