// Parsing and building of the RoCEv2 transport packet, the UDP payload to port 4791:
// BTH, the extension headers the opcode table gives the opcode, payload, pad, ICRC.
// Both are generic over opcode.h's table. Pure: no allocation, no exceptions; a received
// packet is a view into the caller's buffer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "proto/net/udp.h"
#include "proto/roce/bth.h"
#include "proto/roce/headers.h"
#include "proto/roce/icrc.h"
#include "proto/roce/opcode.h"

namespace snic::roce {

// Every reason parse() rejects a packet, and the ICRC check's. The names are counter names.
enum class Drop : std::uint8_t {
    truncated,           // shorter than the BTH + ICRC, or than the opcode's headers + ICRC
    unknown_opcode,      // not in the table: reserved, or a transport snic does not speak
    bad_version,         // BTH TVer is not 0
    unexpected_payload,  // bytes between the headers and the ICRC of an opcode without payload
    bad_pad,             // PadCnt larger than the payload
    misaligned_length,   // headers + payload + pad not a multiple of 4 bytes (IBA §9.2, PadCnt)
    bad_icrc,
    bad_split,  // a packet in pieces (parse_split) split elsewhere than headers/payload/ICRC
    count_
};

inline constexpr std::size_t kRoceDropReasons = static_cast<std::size_t>(Drop::count_);

inline constexpr std::array<std::string_view, kRoceDropReasons> kRoceDropNames = {
    "roce_truncated", "roce_unknown_opcode",    "roce_bad_version", "roce_unexpected_payload",
    "roce_bad_pad",   "roce_misaligned_length", "roce_bad_icrc",    "roce_bad_split",
};

constexpr std::string_view drop_name(Drop d) {
    return kRoceDropNames[static_cast<std::size_t>(d)];
}

// A parsed transport packet: views into the buffer given to parse().
struct Packet {
    Drop drop = Drop::count_;  // count_: accepted
    const OpcodeInfo* info = nullptr;
    const std::uint8_t* base = nullptr;     // the BTH's first byte
    std::span<const std::uint8_t> payload;  // without the pad
    std::uint8_t pad = 0;
    std::uint32_t icrc = 0;  // as on the wire (see icrc_load)
    // Set by a receiver that leaves the ICRC check to the payload's copy (an RC responder
    // folds it while it places a SEND or RDMA WRITE payload, crc::update_copy): the CRC
    // register over the pseudo-header and every byte before the payload. Such a packet takes
    // effect only once icrc_settle (or icrc_finish, after the caller's own fold of the
    // payload) says the ICRC is right.
    bool icrc_pending = false;
    std::uint32_t icrc_reg = 0;

    bool ok() const { return drop == Drop::count_; }
    const Bth& bth() const { return *reinterpret_cast<const Bth*>(base); }
    std::uint8_t opcode() const { return base[0]; }

    // The extension header of type H at `e`, or nullptr when this opcode has none.
    template <typename H>
    const H* ext(Ext e) const {
        return info->has(e) ? reinterpret_cast<const H*>(base + info->offset_of(e)) : nullptr;
    }
    const Deth* deth() const { return ext<Deth>(Ext::deth); }
    const Reth* reth() const { return ext<Reth>(Ext::reth); }
    const AtomicEth* atomic_eth() const { return ext<AtomicEth>(Ext::atomic_eth); }
    const Aeth* aeth() const { return ext<Aeth>(Ext::aeth); }
    const AtomicAckEth* atomic_ack_eth() const { return ext<AtomicAckEth>(Ext::atomic_ack_eth); }
    const ImmDt* immdt() const { return ext<ImmDt>(Ext::immdt); }
    const Ieth* ieth() const { return ext<Ieth>(Ext::ieth); }
};

// Parses a RoCEv2 UDP payload (BTH through ICRC; exactly the UDP length less 8). Checks
// what the packet alone says (opcode known, TVer, lengths, pad); not the ICRC (that needs
// the IP header: icrc_verify), nor anything a QP decides (P_Key, QPN, PSN).
Packet parse(std::span<const std::uint8_t> udp_payload) noexcept;

// parse() of a packet received in three pieces, as a frame transmitted from the sender's
// memory arrives over a wire that hands the sender's buffers on: the BTH and extension
// headers (exactly), the payload (no pad: its length a multiple of 4) and the ICRC. The
// same Packet as parse() of the three joined; any other split is Drop::bad_split.
Packet parse_split(std::span<const std::uint8_t> headers, std::span<const std::uint8_t> payload,
                   std::span<const std::uint8_t> icrc) noexcept;

// Whether the ICRC of `pkt` is right: true when it was checked before (not pending), else the
// pending register continued over the payload and the pad, compared with the ICRC.
bool icrc_settle(const Packet& pkt) noexcept;

// For a receiver that folded the payload itself from pkt.icrc_reg (copying it out): the
// register `reg` after the payload continued over the pad, compared with the ICRC.
inline bool icrc_finish(const Packet& pkt, std::uint32_t reg) noexcept {
    reg = crc32_update(reg, {pkt.payload.data() + pkt.payload.size(), pkt.pad});
    return ~reg == pkt.icrc;
}

// What build() writes. Extension headers are taken from the members the opcode's row
// names and ignored otherwise; they are wire-format structs, assigned host values.
struct PacketSpec {
    Opcode opcode = Opcode::rc_send_only;
    bool solicited = false;
    bool mig_req = false;
    bool fecn = false;
    bool becn = false;
    bool ack_req = false;
    std::uint16_t pkey = kDefaultPkey;
    std::uint32_t dest_qp = 0;
    std::uint32_t psn = 0;
    Deth deth{};
    Reth reth{};
    AtomicEth atomic_eth{};
    Aeth aeth{};
    AtomicAckEth atomic_ack_eth{};
    ImmDt immdt{};
    Ieth ieth{};
    std::span<const std::uint8_t> payload;
};

// The pad that brings a payload to a multiple of 4 bytes.
constexpr std::uint8_t pad_for(std::size_t payload_length) {
    return static_cast<std::uint8_t>(-payload_length & 3u);
}

// The UDP payload length of a packet: headers, payload, pad, ICRC.
constexpr std::size_t transport_length(Opcode op, std::size_t payload_length) {
    return opcode_info(op).length + payload_length + pad_for(payload_length) + kIcrcLen;
}

// Writes the BTH and the opcode's extension headers for a payload of `payload_length`
// bytes (PadCnt follows from it). Returns the header length, or 0 when `out` is too small,
// the opcode unknown or a payload given to an opcode without one.
std::size_t write_headers(std::span<std::uint8_t> out, const PacketSpec& spec,
                          std::size_t payload_length) noexcept;

// Writes the whole transport packet: headers, spec.payload, zero pad bytes and a zero
// ICRC (the ICRC needs the IP header: icrc_fill). Returns its length (transport_length),
// or 0 as write_headers does.
std::size_t build(std::span<std::uint8_t> out, const PacketSpec& spec) noexcept;

// Frames the transport packet already at out[net::kUdpFrameOverhead, + packet_length) (its
// last 4 bytes the ICRC's place): writes Ethernet, IPv4 (DF, TTL 64, TOS 0, valid checksum)
// and UDP (flow's ports, checksum 0 as RoCEv2 over IPv4 allows) in front and fills the ICRC.
// Returns the frame length, or 0 when it does not fit. The one framing of every RoCEv2 frame
// snicd sends, and of those the interop tests judge.
std::size_t frame_ipv4(std::span<std::uint8_t> out, const net::UdpFlow& flow,
                       std::size_t packet_length) noexcept;

// Payloads from this size on are copied in one pass with their ICRC's fold (crc::update_copy):
// on transmit (FlowFrame::frame_gather) and on receive (Packet::icrc_pending). Below it one
// pass saves less than splitting the fold costs, and a packet is copied, then folded whole.
inline constexpr std::size_t kIcrcCopyMin = crc::kCopyFoldMin;

// Whether a received packet is handed to its QP with its ICRC left to the payload's copy
// (Packet::icrc_pending): an RC SEND packet's, whose place is its receive WR, and an RC RDMA
// WRITE packet's after the first, whose place its first packet's checked RETH named, from
// kIcrcCopyMin payload bytes on. A WRITE's first packet names the place itself, so its ICRC
// is checked before anything is written; so are small payloads, where one pass saves less
// than the split costs.
inline bool icrc_with_copy(const Packet& pkt) noexcept {
    const OpcodeInfo& info = *pkt.info;
    return pkt.payload.size() >= kIcrcCopyMin && transport_of(pkt.opcode()) == Transport::rc &&
           (info.has(kSend) || (info.has(kWrite) && !info.has(kFirst)));
}

// A piece of a packet's payload, gathered into the packet in order (from a WR's SGEs, its
// inline data, or the memory a READ response reads).
struct TxPiece {
    const std::uint8_t* data;
    std::uint32_t len;
};

// Copies `payload` into `packet` after its first `hdr` bytes and zeroes the rest (the pad);
// false when the pieces do not fit (the packet is then not to be sent).
inline bool gather_payload(std::span<std::uint8_t> packet, std::size_t hdr,
                           std::span<const TxPiece> payload) noexcept {
    if (hdr > packet.size()) return false;
    std::uint8_t* p = packet.data() + hdr;
    std::size_t room = packet.size() - hdr;
    for (const TxPiece& piece : payload) {
        if (piece.len > room) return false;
        if (piece.len != 0) std::memcpy(p, piece.data, piece.len);
        p += piece.len;
        room -= piece.len;
    }
    while (room-- > 0) *p++ = 0;  // the pad: at most 3 bytes when the lengths agree
    return true;
}

// A connected flow's frame headers, prepared once (per RC QP): Ethernet, IPv4 and UDP as
// frame_ipv4 writes them for `flow`, the IPv4 header's sum over its fields fixed for the
// flow, and the flow's ICRC (IcrcFlow) for BTHs with this P_Key and destination QP. frame()
// writes what frame_ipv4 would, byte for byte, without building or masking headers a packet.
class FlowFrame {
  public:
    FlowFrame(const net::UdpFlow& flow, std::uint16_t pkey, std::uint32_t dest_qp) noexcept;

    // Frames the transport packet already at out[net::kUdpFrameOverhead, + packet_length)
    // (its BTH final; its last 4 bytes the ICRC's place) for
    // the next hop `dst_mac`. The BTH's P_Key and destination QP must be the flow's. Returns
    // the frame length, or 0 when it does not fit.
    std::size_t frame(std::span<std::uint8_t> out, const net::MacAddr& dst_mac,
                      std::size_t packet_length) const noexcept {
        return frame_gather(out, dst_mac, packet_length, packet_length - kIcrcLen, {});
    }

    // frame() for a transport packet whose first `hdr` bytes only (BTH and extension headers)
    // are in place: copies `payload` after them and zeroes the pad up to the ICRC, folding
    // the ICRC over each byte as it copies it (one pass over the payload, crc::update_copy)
    // from kIcrcCopyMin bytes on.
    // Returns 0, with nothing sent, when the headers and pieces do not fit packet_length.
    std::size_t frame_gather(std::span<std::uint8_t> out, const net::MacAddr& dst_mac,
                             std::size_t packet_length, std::size_t hdr,
                             std::span<const TxPiece> payload) const noexcept;

    // frame_gather() for a payload left where it is (a transmit from the client's memory):
    // writes the frame up to the payload's first byte (the transport packet's first `hdr`
    // bytes already in place at out[net::kUdpFrameOverhead]) and stores at `icrc` the four
    // bytes that follow the payload, which then needs no pad. The ICRC is folded over the
    // payload where it lies, read once. Returns the head's length (Ethernet through the
    // extension headers), or 0 when packet_length is not hdr + payload + ICRC.
    std::size_t frame_head(std::span<std::uint8_t> out, const net::MacAddr& dst_mac,
                           std::size_t packet_length, std::size_t hdr, TxPiece payload,
                           std::uint8_t* icrc) const noexcept;

  private:
    std::uint8_t* write_l2_l3(std::uint8_t* eth, const net::MacAddr& dst_mac,
                              std::size_t packet_length) const noexcept;

    std::array<std::uint8_t, net::kUdpFrameOverhead> headers_{};
    std::uint32_t ip_sum_ = 0;  // IPv4 header words but the total length and checksum
    IcrcFlow icrc_;
};

// Writes a whole RoCEv2 frame: Ethernet, IPv4 (DF, TTL 64, TOS 0, valid checksum), UDP
// (flow's ports; checksum 0 as RFC 768 allows over IPv4, or computed when asked), the
// transport packet and its ICRC. Returns the frame length, or 0 when it does not fit.
std::size_t build_ipv4_frame(std::span<std::uint8_t> out, const net::UdpFlow& flow,
                             const PacketSpec& spec, bool udp_checksum = false) noexcept;

}  // namespace snic::roce
