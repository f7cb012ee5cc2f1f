#include "proto/cm/cma.h"

#include "proto/cm/wire.h"

namespace snic::cm {

namespace {

constexpr Field kVersion{0, 0, 8};
constexpr Field kIpVersion{1, 0, 4};
constexpr Field kSrcPort{2, 0, 16};
constexpr Field kSrcIp{16, 0, 32};  // the last 4 of src_addr (4..19)
constexpr Field kDstIp{32, 0, 32};  // the last 4 of dst_addr (20..35)

}  // namespace

std::optional<IpService> ip_service(std::uint64_t sid) {
    if (sid >> 32 != 0) return std::nullopt;
    const auto ps = static_cast<std::uint16_t>(sid >> 16);
    switch (static_cast<PortSpace>(ps)) {
        case PortSpace::ipoib:
        case PortSpace::tcp:
        case PortSpace::udp:
        case PortSpace::ib:
            return IpService{static_cast<PortSpace>(ps), static_cast<std::uint16_t>(sid)};
    }
    return std::nullopt;
}

bool encode_cma_header(const CmaHeader& h, std::span<std::uint8_t> out) {
    if (out.size() < kCmaHeaderSize) return false;
    for (std::size_t i = 0; i < kCmaHeaderSize; ++i) out[i] = 0;
    set_field(out, kVersion, kCmaVersion);
    set_field(out, kIpVersion, 4);
    set_field(out, kSrcPort, h.src_port);
    set_field(out, kSrcIp, h.src_ip);
    set_field(out, kDstIp, h.dst_ip);
    return true;
}

std::optional<CmaHeader> decode_cma_header(std::span<const std::uint8_t> in) {
    if (in.size() < kCmaHeaderSize) return std::nullopt;
    if (get_field(in, kVersion) != kCmaVersion || get_field(in, kIpVersion) != 4)
        return std::nullopt;
    CmaHeader h;
    h.src_port = static_cast<std::uint16_t>(get_field(in, kSrcPort));
    h.src_ip = static_cast<std::uint32_t>(get_field(in, kSrcIp));
    h.dst_ip = static_cast<std::uint32_t>(get_field(in, kDstIp));
    return h;
}

}  // namespace snic::cm
