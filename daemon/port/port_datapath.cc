// The port datapath: rx burst, first checks and dispatch, ARP, ICMP echo and
// buffered tx. No allocation (but mbufs), no syscalls, no locks, no logs.
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_prefetch.h>
#include <rte_ring.h>

#include <algorithm>

#include "daemon/port/port.h"
#include "proto/net/arp.h"
#include "proto/net/ethernet.h"
#include "proto/net/icmp.h"
#include "proto/net/udp.h"

namespace snic::daemon {

std::uint16_t Port::poll_rx(std::uint64_t now) {
    rte_mbuf* pkts[2 * kMaxBurst + 1];
    if (neighbours_ != nullptr) {
        net::Ipv4Addr ip;
        net::MacAddr mac;
        while (neighbours_->next(ip, mac)) {
            arp_.learn(ip, mac, now);
            counters_.neighbours_learnt.add();
        }
    }
    std::uint16_t n = rte_eth_rx_burst(id_, queue_, pkts, rx_burst_);
    if (rx_fault_.injector.active()) {
        rte_mbuf* in[kMaxBurst];
        std::copy_n(pkts, n, in);
        n = inject(rx_fault_, in, n, pkts);
    }
    if (rx_delay_) n = delay_rx(pkts, n, rx_burst_, now);
    for (std::uint16_t i = 0; i < n; ++i) {
        if (i + 1 < n) rte_prefetch0(rte_pktmbuf_mtod(pkts[i + 1], void*));
        handle(pkts[i], now);
    }
    if (inbox_ != nullptr) n += poll_inbox(now);
    return n;
}

std::uint16_t Port::poll_inbox(std::uint64_t now) {
    rte_mbuf* pkts[kMaxBurst];
    const unsigned n =
        rte_ring_sc_dequeue_burst(inbox_, reinterpret_cast<void**>(pkts), rx_burst_, nullptr);
    counters_.rx_from_lanes.add(n);
    for (unsigned i = 0; i < n; ++i) handle(pkts[i], now, true);
    return static_cast<std::uint16_t>(n);
}

void Port::forward(rte_mbuf* m, std::uint16_t to) {
    if (rte_ring_mp_enqueue(lanes_->lanes[to]->inbox_, m) != 0) {
        counters_.rx_lane_full.add();
        rte_pktmbuf_free(m);
        return;
    }
    counters_.rx_to_lanes.add();
}

void Port::share_arp(const rte_mbuf* m) {
    for (Port* lane : lanes_->lanes) {
        if (lane == this) continue;
        rte_mbuf* copy = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX);
        if (copy != nullptr) forward(copy, lane->queue_);
    }
}

std::uint16_t Port::icmp_lane(const std::uint8_t* data, const net::RxFrame& f) const {
    net::IcmpUnreachable u;
    if (!net::parse_icmp_unreachable({data + f.l4_offset, f.l4_length}, u) ||
        u.protocol != static_cast<std::uint8_t>(net::IpProto::tcp))
        return 0;
    return tcp_lane(u.src_port);  // the quoted segment is ours: its source port is local
}

std::uint16_t Port::roce_lane(const std::uint8_t* data, const net::RxFrame& f) const {
    // The BTH's destination QP, bytes 5..7 of the header that follows UDP's.
    constexpr std::size_t kDestQp = net::kUdpHdrLen + 5;
    if (f.l4_length < kDestQp + 3) return queue_;
    const std::uint8_t* q = data + f.l4_offset + kDestQp;
    const std::uint32_t qpn = std::uint32_t{q[0]} << 16 | std::uint32_t{q[1]} << 8 | q[2];
    if (qpn == 1) return 0;  // QP1: the CM's, on lane 0
    return lanes_->qp_lane[qpn & (PortLanes::kQpnSlots - 1)].load(std::memory_order_acquire);
}

// Holds pkts[0..n) in the delay line and returns in pkts what is due, at most `room`.
std::uint16_t Port::delay_rx(rte_mbuf** pkts, std::uint16_t n, std::uint16_t room,
                             std::uint64_t now) {
    for (std::uint16_t i = 0; i < n; ++i) {
        if (rx_delay_->push(pkts[i], now)) {
            counters_.rx_delayed.add();
        } else {
            counters_.rx_delay_full.add();
            rte_pktmbuf_free(pkts[i]);
        }
    }
    std::uint16_t due = 0;
    while (due < room && rx_delay_->pop_due(pkts[due], now)) ++due;
    return due;
}

void Port::drop(rte_mbuf* m, net::Drop why) {
    counters_.drop(why);
    rte_pktmbuf_free(m);
}

void Port::handle(rte_mbuf* m, std::uint64_t now, bool forwarded) {
    if (!forwarded) {
        counters_.rx_packets.add();
        counters_.rx_bytes.add(m->pkt_len);
    }
    if (m->nb_segs != 1) return handle_split(m, now, forwarded);

    auto* data = rte_pktmbuf_mtod(m, std::uint8_t*);
    // The device's verdicts: GOOD, or NONE (a virtio peer's partial checksum: the field is
    // not the checksum, but the data is known intact); BAD and UNKNOWN leave the check here.
    net::RxVerified verified;
    if (offloads_.rx_checksum) {
        const std::uint64_t ip = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
        const std::uint64_t l4 = m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK;
        verified.ip = ip == RTE_MBUF_F_RX_IP_CKSUM_GOOD || ip == RTE_MBUF_F_RX_IP_CKSUM_NONE;
        verified.l4 = l4 == RTE_MBUF_F_RX_L4_CKSUM_GOOD || l4 == RTE_MBUF_F_RX_L4_CKSUM_NONE;
    }
    const net::RxFrame f = net::classify({data, m->data_len}, local_, verified);
    auto& eth = *reinterpret_cast<net::EthHdr*>(data);
    switch (f.kind) {
        case net::RxKind::drop:
            return drop(m, f.drop);
        case net::RxKind::arp_request: {
            auto& arp = *reinterpret_cast<net::ArpHdr*>(data + f.l3_offset);
            arp_.learn(f.src_ip, arp.sha, now);
            net::arp_request_to_reply(eth, arp, local_.mac);
            counters_.arp_requests_answered.add();
            return send(m);
        }
        case net::RxKind::arp_reply: {
            const auto& arp = *reinterpret_cast<const net::ArpHdr*>(data + f.l3_offset);
            arp_.learn(f.src_ip, arp.sha, now);
            if (!forwarded) {
                counters_.arp_replies_received.add();
                if (lanes_ != nullptr) share_arp(m);
            }
            rte_pktmbuf_free(m);
            return;
        }
        case net::RxKind::arp_other: {
            const auto& arp = *reinterpret_cast<const net::ArpHdr*>(data + f.l3_offset);
            arp_.refresh(f.src_ip, arp.sha, now);
            return drop(m, net::Drop::arp_not_for_us);
        }
        case net::RxKind::icmp_echo_request: {
            auto& ip = *reinterpret_cast<net::Ipv4Hdr*>(data + f.l3_offset);
            auto& icmp = *reinterpret_cast<net::IcmpEchoHdr*>(data + f.l4_offset);
            net::icmp_echo_request_to_reply(eth, ip, icmp);
            counters_.icmp_echo_answered.add();
            return send(m);
        }
        case net::RxKind::icmp_echo_reply: {
            if (queue_ != 0) return forward(m, 0);  // the pinger's, if any, is lane 0's
            const auto& icmp = *reinterpret_cast<const net::IcmpEchoHdr*>(data + f.l4_offset);
            counters_.icmp_echo_replies_received.add();
            if (echo_listener_ != nullptr)
                echo_listener_->on_echo_reply(icmp.id.host(), icmp.seq.host(), now);
            rte_pktmbuf_free(m);
            return;
        }
        case net::RxKind::icmp_unreachable:
            if (lanes_ != nullptr && !forwarded) {  // to the lane of the TCP it quotes
                if (const std::uint16_t to = icmp_lane(data, f); to != queue_)
                    return forward(m, to);
            }
            if (icmp_error_hook_.fn == nullptr) return drop(m, net::Drop::icmp_unsupported_type);
            return icmp_error_hook_.fn(icmp_error_hook_.ctx, *this, m, f, now);
        case net::RxKind::udp:
            if (f.dst_port == net::kRoceV2Port && lanes_ != nullptr && !forwarded) {
                if (const std::uint16_t to = roce_lane(data, f); to != queue_)
                    return forward(m, to);
            }
            if (f.dst_port == net::kRoceV2Port && roce_hook_.fn != nullptr) {
                counters_.roce_dispatched.add();
                return roce_hook_.fn(roce_hook_.ctx, *this, m, f, now);
            }
            if (queue_ != 0) return forward(m, 0);
            if (udp_hook_.fn != nullptr) return udp_hook_.fn(udp_hook_.ctx, *this, m, f, now);
            return drop(m, net::Drop::udp_no_listener);
        case net::RxKind::tcp:
            if (lanes_ != nullptr && !forwarded) {  // to the lane whose TCP has the port
                if (const std::uint16_t to = tcp_lane(f.dst_port); to != queue_)
                    return forward(m, to);
            }
            if (tcp_hook_.fn == nullptr) return drop(m, net::Drop::tcp_no_listener);
            counters_.tcp_dispatched.add();
            return tcp_hook_.fn(tcp_hook_.ctx, *this, m, f, now);
    }
    rte_pktmbuf_free(m);  // not reached: every kind returns above
}

void Port::handle_split(rte_mbuf* m, std::uint64_t now, bool forwarded) {
    if (roce_hook_.fn == nullptr) return drop(m, net::Drop::rx_scattered);
    const auto* data = rte_pktmbuf_mtod(m, const std::uint8_t*);
    const net::RxFrame f = net::classify_split({data, m->data_len}, m->pkt_len, local_);
    if (f.kind == net::RxKind::drop) return drop(m, f.drop);
    if (f.dst_port != net::kRoceV2Port) return drop(m, net::Drop::rx_scattered);
    if (lanes_ != nullptr && !forwarded && m->data_len >= f.l4_offset + net::kUdpHdrLen + 8) {
        if (const std::uint16_t to = roce_lane(data, f); to != queue_) return forward(m, to);
    }
    counters_.roce_dispatched.add();
    return roce_hook_.fn(roce_hook_.ctx, *this, m, f, now);
}

void Port::send(rte_mbuf* m) {
    if (tx_count_ == tx_burst_) flush_tx();
    tx_[tx_count_++] = m;
}

void Port::flush_tx() {
    if (tx_count_ == 0 && tx_fault_.held == nullptr) return;
    rte_mbuf* faulted[2 * kMaxBurst + 1];
    rte_mbuf** out = tx_;
    std::uint16_t count = tx_count_;
    if (tx_fault_.injector.active()) {
        count = inject(tx_fault_, tx_, tx_count_, faulted);
        out = faulted;
    }
    tx_count_ = 0;
    std::uint64_t bytes = 0;
    for (std::uint16_t i = 0; i < count; ++i) bytes += out[i]->pkt_len;
    const std::uint16_t sent = count == 0 ? 0 : rte_eth_tx_burst(id_, queue_, out, count);
    for (std::uint16_t i = sent; i < count; ++i) {
        bytes -= out[i]->pkt_len;
        rte_pktmbuf_free(out[i]);
    }
    counters_.tx_packets.add(sent);
    counters_.tx_bytes.add(bytes);
    counters_.tx_dropped.add(count - sent);
}

std::uint16_t Port::inject(FaultPath& path, rte_mbuf* const* in, std::uint16_t n, rte_mbuf** out) {
    std::uint16_t m = 0;
    // A frame held back by an earlier call that no frame has passed since goes out now.
    if (path.held != nullptr && !path.held_new && n == 0) {
        out[m++] = path.held;
        path.held = nullptr;
    }
    path.held_new = false;
    for (std::uint16_t i = 0; i < n; ++i) {
        rte_mbuf* f = in[i];
        const FaultAction a = path.injector.decide();
        if (a.drop) {
            path.dropped->add();
            rte_pktmbuf_free(f);
            continue;
        }
        if (a.corrupt) {
            // Flip one bit past the Ethernet header, where checksums and the ICRC must catch it.
            auto* bytes = rte_pktmbuf_mtod(f, std::uint8_t*);
            const std::uint32_t start = f->data_len > net::kEthHdrLen ? net::kEthHdrLen : 0;
            const std::uint32_t span = f->data_len - start;
            if (span > 0) {
                const std::uint32_t bit = a.corrupt_at % (span * 8);
                bytes[start + bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
                path.corrupted->add();
            }
        }
        if (a.duplicate) {
            if (rte_mbuf* copy = rte_pktmbuf_copy(f, pool_, 0, UINT32_MAX)) {
                out[m++] = copy;
                path.duplicated->add();
            }
        }
        if (a.reorder && path.held == nullptr) {
            path.held = f;
            path.held_new = true;
            path.reordered->add();
            continue;
        }
        out[m++] = f;
        if (path.held != nullptr) {
            out[m++] = path.held;  // behind the frame that followed it
            path.held = nullptr;
            path.held_new = false;
        }
    }
    return m;
}

rte_mbuf* Port::alloc() {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) counters_.tx_dropped.add();
    return m;
}

rte_mbuf* Port::alloc_placed(const std::uint8_t* data, std::uint16_t len, roce::TxHold* hold) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) return nullptr;
    if (!placed_->attach(m, data, len, hold)) {
        rte_pktmbuf_free(m);
        return nullptr;
    }
    return m;
}

void Port::readdress(net::Ipv4Prefix ip, std::uint16_t mtu) {
    local_.ip = ip.addr;
    addr_.store(pack(ip, mtu), std::memory_order_relaxed);
}

std::optional<net::MacAddr> Port::resolve_memo(net::Ipv4Addr ip, std::uint64_t now, MacMemo& memo) {
    if (const auto r = arp_.lookup_until(ip, now)) {
        memo = {r->mac, r->expires, arp_.generation()};
        return r->mac;
    }
    memo.until = 0;
    return resolve(ip, now);
}

std::optional<net::MacAddr> Port::resolve(net::Ipv4Addr ip, std::uint64_t now) {
    if (auto mac = arp_.lookup(ip, now)) return mac;
    if (!this->ip().contains(ip)) return std::nullopt;
    // Expired: ask again (paced), and meanwhile keep using the MAC it had, so that a
    // connection does not stall (and exhaust its retries) every time the entry ages out.
    const std::optional<net::MacAddr> stale = arp_.last_known(ip);
    if (!arp_.should_request(ip, now)) return stale;
    if (neighbours_ != nullptr) {  // a shared address: ARP is the kernel's
        neighbours_->ask(ip);
        counters_.neighbour_asks.add();
        return stale;
    }
    rte_mbuf* m = alloc();
    if (m == nullptr) return stale;
    auto* buf = rte_pktmbuf_mtod(m, std::uint8_t*);
    const std::size_t len =
        net::build_arp_request({buf, rte_pktmbuf_tailroom(m)}, local_.mac, local_.ip, ip);
    m->data_len = static_cast<std::uint16_t>(len);
    m->pkt_len = static_cast<std::uint32_t>(len);
    counters_.arp_requests_sent.add();
    send(m);
    return stale;
}

}  // namespace snic::daemon
