// The RoCEv2 transport's datapath, on the port's lcore: received RoCEv2 packets to their QP's
// engine, and the engines' wire. No allocation (but mbufs), no syscalls (but a notification
// socket's signal), no locks, no logs.
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <cstring>

#include "daemon/port/port.h"
#include "daemon/roce/roce_transport.h"
#include "daemon/verbs/session.h"
#include "proto/net/ethernet.h"
#include "proto/net/ipv4.h"
#include "proto/net/udp.h"
#include "proto/roce/icrc.h"
#include "proto/roce/psn.h"

namespace snic::daemon {

namespace {

constexpr std::size_t kFrameHeaders = net::kUdpFrameOverhead;  // Ethernet + IPv4 + UDP

}  // namespace

void RoceQp::note_state() {
    if (engine_.state() == roce::RcState::error)
        glue_.note_failed(engine_.error() == roce::RcError::requested);
    glue_.note_held(engine_.send_wrs_held());
}

// ---- RcWire ------------------------------------------------------------------------------

std::span<std::uint8_t> RoceQpBase::alloc_packet(std::size_t len) {
    if (tx_m_ != nullptr) rte_pktmbuf_free(std::exchange(tx_m_, nullptr));  // abandoned
    rte_mbuf* m = transport_.port_.alloc();
    if (m == nullptr) {
        transport_.counters_.tx_no_mbuf.add();
        return {};
    }
    if (rte_pktmbuf_tailroom(m) < kFrameHeaders + len + roce::kIcrcLen) {
        rte_pktmbuf_free(m);
        transport_.counters_.tx_no_mbuf.add();
        return {};
    }
    tx_m_ = m;
    return {rte_pktmbuf_mtod(m, std::uint8_t*) + kFrameHeaders, len};
}

bool RoceQp::await_peer() {
    const std::uint64_t now = transport_.now_tsc_;
    if (transport_.port_.resolve(peer_, now)) {
        peer_known_ = true;
        return true;
    }
    const std::uint64_t now_ns = transport_.ns(now);
    if (await_since_ == kNever) await_since_ = now_ns;
    if (now_ns - await_since_ >= kResolveWaitNs) return true;
    transport_.counters_.tx_uc_held.add();
    return false;
}

void RoceQp::tx_send(std::size_t len, std::size_t hdr, std::span<const roce::TxPiece> payload) {
    rte_mbuf* m = std::exchange(tx_m_, nullptr);
    if (m == nullptr) return;
    transport_.transmit(m, len + roce::kIcrcLen, peer_, mac_memo_, flow_, hdr, payload);
}

void RoceQp::tx_send_placed(std::size_t len, std::size_t hdr, roce::TxPiece payload,
                            roce::TxHold* hold) {
    rte_mbuf* m = std::exchange(tx_m_, nullptr);
    if (m == nullptr) return;
    transport_.transmit_placed(m, len + roce::kIcrcLen, peer_, mac_memo_, flow_, hdr, payload,
                               hold);
}

bool RoceQp::tx_settled(roce::TxHold& hold) {
    return transport_.port_.placed_settled(hold);
}

void RoceQp::tx_forget(roce::TxHold& hold) {
    transport_.port_.placed_forget(hold);
}

bool RoceUdQp::tx_send(std::size_t len, net::Ipv4Addr dst, std::uint32_t dst_qpn) {
    rte_mbuf* m = std::exchange(tx_m_, nullptr);
    if (m == nullptr) return true;
    return transport_.transmit(m, len + roce::kIcrcLen, dst, roce_source_port(qpn_, dst_qpn));
}

// ---- Schedulable ----------------------------------------------------------------------------

bool RoceQp::sched_poll(std::uint64_t now_ns) {
    // A QP on the ready list for its grace period is polled every turn: most of those polls
    // find nothing, and are not made.
    if (engine_.idle(now_ns) && !glue_.send_ready()) return false;
    const bool did = engine_.poll(now_ns);
    note_state();
    return did;
}

bool RoceUdQp::sched_poll(std::uint64_t now_ns) {
    const bool did = engine_.poll(now_ns);
    glue_.note_held(engine_.send_wrs_held());
    return did;
}

// ---- receive ------------------------------------------------------------------------------

void RoceQp::on_packet(const roce::Packet& pkt, const net::RxFrame& f, const std::uint8_t*,
                       std::uint64_t now_tsc) {
    // A connected QP hears its peer only (as the Linux soft-RoCE driver checks the address
    // vector): a packet from anywhere else never reaches the engine, whatever its PSN and keys.
    if (f.src_ip != peer_) {
        transport_.counters_.rx_bad_source.add();
        return;
    }
    engine_.on_packet(pkt, transport_.ns(now_tsc));
    note_state();
    transport_.runner_.wake(*this);  // to answer, or to send what the packet allowed
}

// A datagram QP hears anyone who knows its number and Q_Key (the engine checks the Q_Key).
void RoceUdQp::on_packet(const roce::Packet& pkt, const net::RxFrame& f, const std::uint8_t* frame,
                         std::uint64_t) {
    engine_.on_packet(pkt, std::span<const std::uint8_t, 20>(frame + f.l3_offset, 20));
}

// ---- the transport --------------------------------------------------------------------------

void RoceTransport::on_rx(void* ctx, Port&, rte_mbuf* m, const net::RxFrame& frame,
                          std::uint64_t now_tsc) {
    static_cast<RoceTransport*>(ctx)->receive(m, frame, now_tsc);
}

// The running QP a packet's destination QP number names; nullptr for QP1 (the GSI hook's) and
// for a number no QP of this port has.
inline RoceQpBase* RoceTransport::qp_for(std::uint32_t qpn) {
    return qpn == roce::kGsiQpn ? nullptr : static_cast<RoceQpBase*>(runner_.find(qpn));
}

// The ICRC's start for a packet at `l3` to `rt` (nullptr: QP1 or no QP): a connected QP's
// peer's packet from the flow the QP learnt from its peer (of_flow); any other, and the
// first, from its masked headers.
inline std::optional<roce::IcrcStart> RoceTransport::icrc_start(const RoceQpBase* rt,
                                                                std::span<const std::uint8_t> l3,
                                                                bool& of_flow) {
    std::optional<roce::IcrcStart> start = rt != nullptr ? rt->rx_flow_.begin(l3) : std::nullopt;
    of_flow = start.has_value();
    if (!of_flow) start = roce::icrc_begin(l3);
    return start;
}

// A checked packet to QP1's hook or to its QP; frees m.
inline void RoceTransport::deliver(rte_mbuf* m, const roce::Packet& pkt, const net::RxFrame& f,
                                   std::uint32_t qpn, RoceQpBase* rt, std::uint64_t now_tsc) {
    if (qpn == roce::kGsiQpn) return receive_gsi(m, pkt, f.src_ip);
    if (rt == nullptr) {
        counters_.rx_unknown_qpn.add();
        rte_pktmbuf_free(m);
        return;
    }
    rt->on_packet(pkt, f, rte_pktmbuf_mtod(m, const std::uint8_t*), now_tsc);
    rte_pktmbuf_free(m);
}

void RoceTransport::receive(rte_mbuf* m, const net::RxFrame& f, std::uint64_t now_tsc) {
    counters_.rx_packets.add();
    if (m->nb_segs != 1) return on_split(m, f, now_tsc);
    const auto* frame = rte_pktmbuf_mtod(m, const std::uint8_t*);
    const std::span<const std::uint8_t> payload(frame + f.l4_offset + net::kUdpHdrLen,
                                                f.l4_length - net::kUdpHdrLen);
    roce::Packet pkt = roce::parse(payload);
    auto drop = [&](roce::Drop why) {
        counters_.drops[static_cast<std::size_t>(why)].add();
        rte_pktmbuf_free(m);
    };
    if (!pkt.ok()) return drop(pkt.drop);
    const std::span<const std::uint8_t> l3(frame + f.l3_offset,
                                           f.l4_offset + f.l4_length - f.l3_offset);
    const std::uint32_t qpn = pkt.bth().dest_qp.host();
    RoceQpBase* const rt = qp_for(qpn);
    bool of_flow = false;
    const std::optional<roce::IcrcStart> start = icrc_start(rt, l3, of_flow);
    if (!start || start->ip_end > l3.size()) return drop(roce::Drop::bad_icrc);
    if (start->ip_end == l3.size() && roce::icrc_with_copy(pkt)) {
        // Checked by the responder as it copies the payload out: one pass over its bytes.
        pkt.icrc_reg =
            roce::crc32_update(start->reg, {l3.data() + start->bth_end, pkt.payload.data()});
        pkt.icrc_pending = true;
    } else {
        if (!roce::icrc_verify(l3, *start)) return drop(roce::Drop::bad_icrc);
        if (rt != nullptr && !of_flow) rt->rx_flow_.learn(l3);
    }
    deliver(m, pkt, f, qpn, rt, now_tsc);
}

// A packet in segments (Port::handle_split), as a placed payload arrives: the headers in the
// first segment, the payload in the second, the ICRC in the third.
void RoceTransport::on_split(rte_mbuf* m, const net::RxFrame& f, std::uint64_t now_tsc) {
    const auto* frame = rte_pktmbuf_mtod(m, const std::uint8_t*);
    auto drop = [&](roce::Drop why) {
        counters_.drops[static_cast<std::size_t>(why)].add();
        rte_pktmbuf_free(m);
    };
    if (m->nb_segs != 3) return drop(roce::Drop::bad_split);
    counters_.rx_split.add();
    const rte_mbuf* body = m->next;
    roce::Packet pkt = roce::parse_split(
        {frame + f.l4_offset + net::kUdpHdrLen, frame + m->data_len},
        {rte_pktmbuf_mtod(body, const std::uint8_t*), body->data_len},
        {rte_pktmbuf_mtod(body->next, const std::uint8_t*), body->next->data_len});
    if (!pkt.ok()) return drop(pkt.drop);
    // The IP packet's part in the first segment: its headers through the extension headers.
    const std::span<const std::uint8_t> l3(frame + f.l3_offset, m->data_len - f.l3_offset);
    const std::uint32_t qpn = pkt.bth().dest_qp.host();
    RoceQpBase* const rt = qp_for(qpn);
    bool of_flow = false;
    const std::optional<roce::IcrcStart> start = icrc_start(rt, l3, of_flow);
    if (!start || start->ip_end != f.l4_offset + f.l4_length - f.l3_offset)
        return drop(roce::Drop::bad_icrc);
    // The extension headers, then the payload where it lies (no pad).
    const std::uint32_t reg = roce::crc32_update(start->reg, l3.subspan(start->bth_end));
    if (roce::icrc_with_copy(pkt)) {
        pkt.icrc_reg = reg;
        pkt.icrc_pending = true;
    } else {
        if (!roce::icrc_finish(pkt, roce::crc32_update(reg, pkt.payload)))
            return drop(roce::Drop::bad_icrc);
        if (rt != nullptr && !of_flow) rt->rx_flow_.learn(l3);
    }
    deliver(m, pkt, f, qpn, rt, now_tsc);
}

template <typename FrameFn>
bool RoceTransport::transmit_framed(rte_mbuf* m, net::Ipv4Addr dst, MacMemo* memo, FrameFn&& frame,
                                    rte_mbuf* rest) {
    const bool loopback = dst == port_.ip().addr;
    std::optional<net::MacAddr> mac = loopback          ? std::optional(port_.mac())
                                      : memo != nullptr ? port_.resolve(dst, now_tsc_, *memo)
                                                        : port_.resolve(dst, now_tsc_);
    if (!mac) {
        rte_pktmbuf_free(m);
        rte_pktmbuf_free(rest);
        counters_.tx_unresolved.add();
        return false;
    }
    const std::size_t frame_len =
        frame(std::span(rte_pktmbuf_mtod(m, std::uint8_t*), rte_pktmbuf_tailroom(m)), *mac);
    if (frame_len == 0) {  // cannot happen: the sender made room for it
        rte_pktmbuf_free(m);
        rte_pktmbuf_free(rest);
        counters_.tx_no_mbuf.add();
        return false;
    }
    m->data_len = static_cast<std::uint16_t>(frame_len);
    m->pkt_len = m->data_len;
    if (rest != nullptr) rte_pktmbuf_chain(m, rest);
    counters_.tx_packets.add();
    if (!loopback) {
        port_.send(m);
        return true;
    }
    if (loop_count_ == kLoopSlots) {
        counters_.loopback_full.add();
        rte_pktmbuf_free(m);
        return true;  // lost as on a wire
    }
    loop_[(loop_head_ + loop_count_++) % kLoopSlots] = m;
    counters_.loopback_packets.add();
    return true;
}

bool RoceTransport::transmit(rte_mbuf* m, std::size_t packet_len, net::Ipv4Addr dst,
                             std::uint16_t src_port) {
    return transmit_framed(m, dst, nullptr,
                           [&](std::span<std::uint8_t> out, const net::MacAddr& mac) {
                               const net::UdpFlow flow{port_.mac(), mac,      port_.ip().addr,
                                                       dst,         src_port, net::kRoceV2Port};
                               return roce::frame_ipv4(out, flow, packet_len);
                           });
}

bool RoceTransport::transmit(rte_mbuf* m, std::size_t packet_len, net::Ipv4Addr dst, MacMemo& memo,
                             const roce::FlowFrame& flow, std::size_t hdr,
                             std::span<const roce::TxPiece> payload) {
    return transmit_framed(m, dst, &memo,
                           [&](std::span<std::uint8_t> out, const net::MacAddr& mac) {
                               return flow.frame_gather(out, mac, packet_len, hdr, payload);
                           });
}

bool RoceTransport::transmit_placed(rte_mbuf* m, std::size_t packet_len, net::Ipv4Addr dst,
                                    MacMemo& memo, const roce::FlowFrame& flow, std::size_t hdr,
                                    roce::TxPiece payload, roce::TxHold* hold) {
    rte_mbuf* body = nullptr;
    rte_mbuf* icrc = nullptr;
    // The payload must end where the ICRC starts (no pad), whole in one attached mbuf.
    if ((payload.len & 3u) == 0 && packet_len == hdr + payload.len + roce::kIcrcLen) {
        body = port_.alloc_placed(payload.data, static_cast<std::uint16_t>(payload.len), hold);
        if (body != nullptr) icrc = port_.alloc();
    }
    if (icrc == nullptr) {
        rte_pktmbuf_free(body);  // nothing of it sent: its tally counts it down now
        return transmit(m, packet_len, dst, memo, flow, hdr, {&payload, 1});
    }
    icrc->data_len = roce::kIcrcLen;
    icrc->pkt_len = roce::kIcrcLen;
    rte_pktmbuf_chain(body, icrc);
    counters_.tx_placed.add();
    return transmit_framed(
        m, dst, &memo,
        [&](std::span<std::uint8_t> out, const net::MacAddr& mac) {
            return flow.frame_head(out, mac, packet_len, hdr, payload,
                                   rte_pktmbuf_mtod(icrc, std::uint8_t*));
        },
        body);
}

bool RoceTransport::send_gsi(std::uint32_t dst_ip, std::uint32_t dst_qpn, std::uint32_t qkey,
                             std::span<const std::uint8_t> payload) {
    const std::size_t len = roce::transport_length(roce::Opcode::ud_send_only, payload.size());
    if (net::kIpv4MinHdrLen + net::kUdpHdrLen + len > port_.mtu()) return false;
    rte_mbuf* m = port_.alloc();
    if (m == nullptr || rte_pktmbuf_tailroom(m) < kFrameHeaders + len) {
        if (m != nullptr) rte_pktmbuf_free(m);
        counters_.tx_no_mbuf.add();
        return false;
    }
    roce::PacketSpec spec;
    spec.opcode = roce::Opcode::ud_send_only;
    spec.pkey = roce::kDefaultPkey;
    spec.dest_qp = dst_qpn;
    spec.psn = gsi_psn_;
    spec.deth.qkey = qkey;
    spec.deth.src_qp = roce::kGsiQpn;
    spec.payload = payload;
    const std::size_t built =
        roce::build({rte_pktmbuf_mtod(m, std::uint8_t*) + kFrameHeaders, len}, spec);
    if (built == 0) {
        rte_pktmbuf_free(m);
        return false;
    }
    if (!transmit(m, built, net::Ipv4Addr{dst_ip}, roce_source_port(roce::kGsiQpn, dst_qpn)))
        return false;
    gsi_psn_ = (gsi_psn_ + 1) & roce::kPsnMask;
    counters_.tx_gsi.add();
    return true;
}

void RoceTransport::receive_gsi(rte_mbuf* m, const roce::Packet& pkt, net::Ipv4Addr src) {
    if (pkt.opcode() != static_cast<std::uint8_t>(roce::Opcode::ud_send_only)) {
        counters_.rx_gsi_bad_opcode.add();
    } else if (gsi_fn_ == nullptr) {
        counters_.rx_gsi_no_hook.add();
    } else {
        counters_.rx_gsi.add();
        const roce::Deth& d = *pkt.deth();
        gsi_fn_(gsi_ctx_, src.value, d.src_qp.host(), d.qkey.host(), pkt.payload);
    }
    rte_pktmbuf_free(m);
}

bool RoceTransport::poll(std::uint64_t now_tsc) {
    now_tsc_ = now_tsc;
    counters_.turns.add();
    bool work = false;
    // Frames the engines sent to this port last turn: received now, outside any engine.
    for (std::uint32_t n = loop_count_; n > 0; --n) {
        rte_mbuf* m = loop_[loop_head_];
        loop_head_ = (loop_head_ + 1) % kLoopSlots;
        --loop_count_;
        port_.receive_local(m, now_tsc);
        work = true;
    }
    work |= runner_.poll(now_tsc);
    return work;
}

}  // namespace snic::daemon
