#include "proto/roce/packet.h"

#include <cstring>

namespace snic::roce {
namespace {

// The spec member that carries extension header `e`, as bytes.
const void* ext_source(const PacketSpec& spec, Ext e) {
    switch (e) {
        case Ext::deth:
            return &spec.deth;
        case Ext::reth:
            return &spec.reth;
        case Ext::atomic_eth:
            return &spec.atomic_eth;
        case Ext::aeth:
            return &spec.aeth;
        case Ext::atomic_ack_eth:
            return &spec.atomic_ack_eth;
        case Ext::immdt:
            return &spec.immdt;
        case Ext::ieth:
            return &spec.ieth;
        case Ext::count_:
            break;
    }
    return nullptr;
}

}  // namespace

Packet parse(std::span<const std::uint8_t> udp_payload) noexcept {
    Packet p;
    const std::size_t n = udp_payload.size();
    if (n < kBthLen + kIcrcLen) {
        p.drop = Drop::truncated;
        return p;
    }
    p.base = udp_payload.data();
    const OpcodeInfo& info = opcode_info(p.base[0]);
    if (!info.known()) {
        p.drop = Drop::unknown_opcode;
        return p;
    }
    p.info = &info;
    const Bth& bth = p.bth();
    if (bth.tver() != kTransportVersion) {
        p.drop = Drop::bad_version;
        return p;
    }
    if (n < info.length + kIcrcLen) {
        p.drop = Drop::truncated;
        return p;
    }
    const std::size_t body = n - info.length - kIcrcLen;  // payload and pad
    p.pad = bth.pad_count();
    if (!info.has(kHasPayload) && (body != 0 || p.pad != 0)) {
        p.drop = Drop::unexpected_payload;
        return p;
    }
    if (p.pad > body) {
        p.drop = Drop::bad_pad;
        return p;
    }
    if ((n & 3u) != 0) {
        p.drop = Drop::misaligned_length;
        return p;
    }
    p.payload = udp_payload.subspan(info.length, body - p.pad);
    p.icrc = icrc_load(p.base + n - kIcrcLen);
    return p;
}

std::size_t write_headers(std::span<std::uint8_t> out, const PacketSpec& spec,
                          std::size_t payload_length) noexcept {
    const OpcodeInfo& info = opcode_info(spec.opcode);
    if (!info.known() || out.size() < info.length) return 0;
    if (payload_length != 0 && !info.has(kHasPayload)) return 0;
    auto& bth = *reinterpret_cast<Bth*>(out.data());
    bth.opcode = static_cast<std::uint8_t>(spec.opcode);
    bth.set_flags(spec.solicited, spec.mig_req, pad_for(payload_length), spec.fecn, spec.becn,
                  spec.ack_req);
    bth.pkey = spec.pkey;
    bth.dest_qp = spec.dest_qp;
    bth.psn = spec.psn;
    for (std::size_t e = 0; e < kExtCount; ++e) {
        const auto ext = static_cast<Ext>(e);
        if (info.has(ext))
            std::memcpy(out.data() + info.offset_of(ext), ext_source(spec, ext), kExtLen[e]);
    }
    return info.length;
}

std::size_t build(std::span<std::uint8_t> out, const PacketSpec& spec) noexcept {
    const std::size_t len = spec.payload.size();
    if (!opcode_info(spec.opcode).known() || out.size() < transport_length(spec.opcode, len))
        return 0;
    const std::size_t hdr = write_headers(out, spec, len);
    if (hdr == 0) return 0;
    std::uint8_t* p = out.data() + hdr;
    if (len != 0) std::memcpy(p, spec.payload.data(), len);
    p += len;
    const std::size_t tail = pad_for(len) + kIcrcLen;
    std::memset(p, 0, tail);
    return hdr + len + tail;
}

std::size_t frame_ipv4(std::span<std::uint8_t> out, const net::UdpFlow& flow,
                       std::size_t packet_length) noexcept {
    if (packet_length < kIcrcLen || packet_length > 0xffff - net::kIpv4MinHdrLen - net::kUdpHdrLen)
        return 0;
    const std::size_t frame =
        net::build_udp_frame(out, flow, static_cast<std::uint16_t>(packet_length), false);
    if (frame == 0) return 0;
    if (!icrc_fill(out.subspan(net::kEthHdrLen, frame - net::kEthHdrLen))) return 0;
    return frame;
}

std::size_t build_ipv4_frame(std::span<std::uint8_t> out, const net::UdpFlow& flow,
                             const PacketSpec& spec, bool udp_checksum) noexcept {
    if (!opcode_info(spec.opcode).known()) return 0;
    const std::size_t tlen = transport_length(spec.opcode, spec.payload.size());
    if (out.size() < net::kUdpFrameOverhead + tlen || tlen > 0xffff) return 0;
    const std::size_t built = build(out.subspan(net::kUdpFrameOverhead), spec);
    if (built == 0) return 0;
    const std::size_t frame = frame_ipv4(out, flow, built);
    if (frame == 0) return 0;
    const auto l3 = out.subspan(net::kEthHdrLen, frame - net::kEthHdrLen);
    if (udp_checksum) {
        // After the ICRC, which it covers; the ICRC masks this field, so the order is free
        // for the ICRC but not for the checksum.
        const auto dgram = l3.subspan(net::kIpv4MinHdrLen);
        auto& udp = *reinterpret_cast<net::UdpHdr*>(dgram.data());
        udp.checksum = net::udp_checksum(flow.src_ip, flow.dst_ip, dgram);
    }
    return frame;
}

}  // namespace snic::roce
