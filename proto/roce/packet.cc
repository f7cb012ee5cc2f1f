#include "proto/roce/packet.h"

#include <cstring>

namespace snic::roce {
namespace {

// Copies the spec member that carries extension header `e` when the opcode has it: a copy of
// a constant size, so a few moves rather than a call.
template <Ext E, typename H>
void put_ext(std::uint8_t* out, const OpcodeInfo& info, const H& header) {
    static_assert(sizeof(H) == kExtLen[static_cast<std::size_t>(E)]);
    if (info.has(E)) std::memcpy(out + info.offset_of(E), &header, sizeof(H));
}

// What parse and parse_split check first, of the BTH at `base`: an opcode snic knows, TVer 0.
bool parse_bth(Packet& p, const std::uint8_t* base) noexcept {
    p.base = base;
    const OpcodeInfo& info = opcode_info(base[0]);
    if (!info.known()) {
        p.drop = Drop::unknown_opcode;
        return false;
    }
    p.info = &info;
    if (p.bth().tver() != kTransportVersion) {
        p.drop = Drop::bad_version;
        return false;
    }
    return true;
}

}  // namespace

Packet parse(std::span<const std::uint8_t> udp_payload) noexcept {
    Packet p;
    const std::size_t n = udp_payload.size();
    if (n < kBthLen + kIcrcLen) {
        p.drop = Drop::truncated;
        return p;
    }
    if (!parse_bth(p, udp_payload.data())) return p;
    const OpcodeInfo& info = *p.info;
    const Bth& bth = p.bth();
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

Packet parse_split(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload,
                   std::span<const std::uint8_t> icrc) noexcept {
    Packet p;
    if (headers.size() < kBthLen) {
        p.drop = Drop::truncated;
        return p;
    }
    if (!parse_bth(p, headers.data())) return p;
    const OpcodeInfo& info = *p.info;
    if (headers.size() != info.length || icrc.size() != kIcrcLen || p.bth().pad_count() != 0 ||
        (payload.size() & 3u) != 0 || (!payload.empty() && !info.has(kHasPayload))) {
        p.drop = Drop::bad_split;
        return p;
    }
    p.payload = payload;
    p.icrc = icrc_load(icrc.data());
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
    std::uint8_t* p = out.data();
    put_ext<Ext::deth>(p, info, spec.deth);
    put_ext<Ext::reth>(p, info, spec.reth);
    put_ext<Ext::atomic_eth>(p, info, spec.atomic_eth);
    put_ext<Ext::aeth>(p, info, spec.aeth);
    put_ext<Ext::atomic_ack_eth>(p, info, spec.atomic_ack_eth);
    put_ext<Ext::immdt>(p, info, spec.immdt);
    put_ext<Ext::ieth>(p, info, spec.ieth);
    static_assert(kExtCount == 7, "a new extension header needs its put_ext line");
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

FlowFrame::FlowFrame(const net::UdpFlow& flow, std::uint16_t pkey, std::uint32_t dest_qp) noexcept {
    // A packet of the flow with no payload: its headers are the template.
    std::array<std::uint8_t, net::kUdpFrameOverhead + kBthLen + kIcrcLen> sample{};
    auto& bth = *reinterpret_cast<Bth*>(sample.data() + net::kUdpFrameOverhead);
    bth.pkey = pkey;
    bth.dest_qp = dest_qp;
    net::build_udp_frame(sample, flow, kBthLen + kIcrcLen, false);
    icrc_ = *IcrcFlow::prepare({sample.data() + net::kEthHdrLen, sample.size() - net::kEthHdrLen});
    // The template keeps the IPv4 total length and checksum zero: frame() writes both.
    std::memcpy(headers_.data(), sample.data(), headers_.size());
    auto& ip = *reinterpret_cast<net::Ipv4Hdr*>(headers_.data() + net::kEthHdrLen);
    ip.total_length = 0;
    ip.checksum = 0;
    ip_sum_ = net::csum_add({headers_.data() + net::kEthHdrLen, net::kIpv4MinHdrLen});
}

bool icrc_settle(const Packet& pkt) noexcept {
    return !pkt.icrc_pending || icrc_finish(pkt, crc32_update(pkt.icrc_reg, pkt.payload));
}

// Inlined into both framers: it is the per-packet path.
[[gnu::always_inline]] inline std::uint8_t* FlowFrame::write_l2_l3(
    std::uint8_t* eth, const net::MacAddr& dst_mac, std::size_t packet_length) const noexcept {
    constexpr std::size_t kL4 = net::kIpv4MinHdrLen + net::kUdpHdrLen;
    std::memcpy(eth, headers_.data(), headers_.size());
    std::memcpy(eth, dst_mac.bytes.data(), dst_mac.bytes.size());
    std::uint8_t* l3 = eth + net::kEthHdrLen;
    auto& ip = *reinterpret_cast<net::Ipv4Hdr*>(l3);
    auto& udp = *reinterpret_cast<net::UdpHdr*>(l3 + net::kIpv4MinHdrLen);
    const auto ip_length = static_cast<std::uint16_t>(kL4 + packet_length);
    ip.total_length = ip_length;
    ip.checksum = net::csum_finish(ip_sum_ + ip_length);
    udp.length = static_cast<std::uint16_t>(net::kUdpHdrLen + packet_length);
    return l3;
}

std::size_t FlowFrame::frame_gather(std::span<std::uint8_t> out, const net::MacAddr& dst_mac,
                                    std::size_t packet_length, std::size_t hdr,
                                    std::span<const TxPiece> payload) const noexcept {
    constexpr std::size_t kL4 = net::kIpv4MinHdrLen + net::kUdpHdrLen;
    if (packet_length < kBthLen + kIcrcLen || packet_length > 0xffff - kL4 ||
        out.size() < net::kUdpFrameOverhead + packet_length || hdr < kBthLen ||
        hdr > packet_length - kIcrcLen)
        return 0;
    std::uint8_t* l3 = write_l2_l3(out.data(), dst_mac, packet_length);
    const std::size_t ip_length = kL4 + packet_length;
    // The payload's room (with the pad) decides the path; pieces that overrun it leave the
    // frame unsent.
    std::uint8_t* p = l3 + kL4 + hdr;
    std::uint8_t* const icrc_at = l3 + ip_length - kIcrcLen;
    std::uint32_t reg = icrc_.begin(l3);
    if (static_cast<std::size_t>(icrc_at - p) < kIcrcCopyMin) {
        // Small: gathered first, then one fold over the extension headers, payload and pad.
        if (!gather_payload({l3 + kL4, icrc_at}, hdr, payload)) return 0;
        reg = crc32_update(reg, {l3 + IcrcFlow::kBthEnd, icrc_at});
    } else {
        // The extension headers, then the payload folded as it is copied in, then the pad.
        reg = crc32_update(reg, {l3 + IcrcFlow::kBthEnd, p});
        for (const TxPiece& piece : payload) {
            if (piece.len > static_cast<std::size_t>(icrc_at - p)) return 0;
            reg = crc::Crc32::update_copy(reg, p, {piece.data, piece.len});
            p += piece.len;
        }
        const std::size_t pad = static_cast<std::size_t>(icrc_at - p);
        std::memset(p, 0, pad);
        reg = crc32_update(reg, {p, pad});
    }
    icrc_store(icrc_at, ~reg);
    return net::kEthHdrLen + ip_length;
}

std::size_t FlowFrame::frame_head(std::span<std::uint8_t> out, const net::MacAddr& dst_mac,
                                  std::size_t packet_length, std::size_t hdr, TxPiece payload,
                                  std::uint8_t* icrc) const noexcept {
    constexpr std::size_t kL4 = net::kIpv4MinHdrLen + net::kUdpHdrLen;
    if (hdr < kBthLen || packet_length != hdr + payload.len + kIcrcLen ||
        packet_length > 0xffff - kL4 || out.size() < net::kUdpFrameOverhead + hdr ||
        (payload.len & 3u) != 0)
        return 0;
    std::uint8_t* l3 = write_l2_l3(out.data(), dst_mac, packet_length);
    std::uint32_t reg = icrc_.begin(l3);
    reg = crc32_update(reg, {l3 + IcrcFlow::kBthEnd, l3 + kL4 + hdr});
    reg = crc32_update(reg, {payload.data, payload.len});
    icrc_store(icrc, ~reg);
    return net::kUdpFrameOverhead + hdr;
}

}  // namespace snic::roce
