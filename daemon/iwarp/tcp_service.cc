// The daemon's TCP on one port: the hooks, the framing and the ARP hold (lcore), and the
// rows the control thread asks for.
#include "daemon/iwarp/tcp_service.h"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ring.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "proto/net/ethernet.h"
#include "proto/net/icmp.h"
#include "proto/net/ipv4.h"

namespace snic::daemon {

TcpStackConfig daemon_tcp_config(const Port& port, const tcp::IsnKey& key, tcp::TcpTime rto_min,
                                 std::uint32_t max_connections, std::uint32_t max_per_peer,
                                 std::uint32_t window) {
    TcpStackConfig c;
    c.conn.rto_min = rto_min;
    size_tcp_buffers(c.conn, window);
    c.local_ip = port.ip().addr;
    c.max_connections = max_connections;
    c.max_per_peer = max_per_peer;
    // rdma_cm's listeners on the port (CmService shares them out per user).
    c.max_listeners = kMaxListeners;
    c.conn.mtu = port.mtu();
    c.conn.isn_key = key;
    c.conn.tx_checksum_offload = port.offloads().tx_tcp_checksum;
    // A burst per poll no larger than the port's tx buffer: the device takes it whole.
    c.conn.max_burst = kDefaultBurst;
    return c;
}

TcpService::TcpService(Port& port, LcoreTasks& tasks, const TcpStackConfig& config,
                       std::uint64_t tsc_hz)
    : port_(port),
      tasks_(tasks),
      tsc_hz_(tsc_hz),
      ns_per_tsc_(1e9 / static_cast<double>(tsc_hz)),
      stack_(config, *this) {}

TcpService::~TcpService() {
    for (std::size_t i = 0; i < nheld_; ++i) rte_pktmbuf_free(held_[i].m);
    for (; loop_count_ > 0; --loop_count_, loop_head_ = (loop_head_ + 1) % kLoopSlots)
        rte_pktmbuf_free(loop_[loop_head_]);
    if (looped_in_ != nullptr) {
        rte_mbuf* m = nullptr;
        while (rte_ring_sc_dequeue(looped_in_, reinterpret_cast<void**>(&m)) == 0)
            rte_pktmbuf_free(m);
        rte_ring_free(looped_in_);
    }
}

int TcpService::set_lanes(std::span<TcpService* const> lanes) {
    lanes_.assign(lanes.begin(), lanes.end());
    if (lanes_.size() < 2 || looped_in_ != nullptr) return 0;
    const std::string name = fmt::format("snic_tl_{}_{}", port_.id(), port_.queue());
    looped_in_ = rte_ring_create(name.c_str(), kLoopSlots, rte_socket_id(), RING_F_SC_DEQ);
    return looped_in_ != nullptr ? 0 : rte_errno;
}

std::uint64_t TcpService::now_ns(std::uint64_t tsc) const {
    return static_cast<std::uint64_t>(static_cast<double>(tsc) * ns_per_tsc_);
}

std::vector<TcpConnRow> TcpService::rows(std::size_t first, std::size_t max, std::size_t& total) {
    std::vector<TcpConnRow> out(max);
    std::size_t n = 0, all = 0;
    tasks_.run([&] { n = stack_.snapshot(first, out, all); });
    out.resize(n);
    total = all;
    return out;
}

std::uint16_t TcpService::readdress(net::Ipv4Prefix ip, std::uint16_t mtu) {
    std::uint16_t taken = mtu;
    tasks_.run([&] {
        if (!stack_.readdress(ip.addr, mtu)) {
            taken = port_.mtu();
            (void)stack_.readdress(ip.addr, taken);
        }
        port_.readdress(ip, taken);
    });
    return taken;
}

shm::TcpConnInfo tcp_conn_info(const TcpConnRow& r) {
    shm::TcpConnInfo c{};
    c.local_ip = r.tuple.local_ip.value;
    c.remote_ip = r.tuple.remote_ip.value;
    c.local_port = r.tuple.local_port;
    c.remote_port = r.tuple.remote_port;
    if (r.listener) {
        c.state = shm::kTcpListenState;
        c.backlog = r.backlog;
        c.queued = r.queued;
        return c;
    }
    const tcp::TcpInfo& i = r.info;
    c.state = static_cast<std::uint8_t>(i.state);
    c.flags = static_cast<std::uint8_t>((i.sack ? 1 : 0) | (i.timestamps ? 2 : 0) |
                                        (i.in_recovery ? 4 : 0));
    c.snd_wscale = i.snd_wscale;
    c.rcv_wscale = i.rcv_wscale;
    c.mss = i.mss;
    c.cwnd = i.cwnd;
    c.ssthresh = i.ssthresh;
    c.srtt_ns = i.srtt;
    c.rttvar_ns = i.rttvar;
    c.rto_ns = i.rto;
    c.snd_wnd = i.snd_wnd;
    c.rcv_wnd = i.rcv_wnd;
    c.unacked = i.unacked;
    c.bytes_sent = r.bytes_sent;
    c.bytes_acked = r.bytes_acked;
    c.bytes_received = r.bytes_received;
    c.segments_out = r.segments_out;
    c.segments_in = r.segments_in;
    c.retransmits = r.retransmits;
    c.fast_retransmits = r.fast_retransmits;
    c.timeouts = r.timeouts;
    return c;
}

int fill_tcp_conns(std::span<const std::vector<TcpService*>> ports, const shm::TcpConnsReq& q,
                   shm::TcpConnsReply& r) {
    if (q.port_index >= ports.size()) return EINVAL;
    r = shm::TcpConnsReply{};
    // The page's rows from each lane in turn (one lcore turn each): the lanes' rows are
    // numbered one after the other, lane 0's first.
    std::size_t skip = q.first, total = 0, listed = 0;
    for (TcpService* lane : ports[q.port_index]) {
        std::size_t lane_total = 0;
        const auto rows = lane->rows(skip, shm::kMaxTcpConnsListed - listed, lane_total);
        for (const TcpConnRow& row : rows) r.conns[listed++] = tcp_conn_info(row);
        skip = skip > lane_total ? skip - lane_total : 0;
        total += lane_total;
    }
    r.total = static_cast<std::uint32_t>(total);
    r.listed = static_cast<std::uint32_t>(listed);
    r.more = q.first + listed < total ? 1 : 0;
    return 0;
}

int fill_tcp_conns(std::span<const std::vector<TcpService*>> ports, const shm::TcpConnsReq& q,
                   shm::TcpConnsReply& r,
                   const std::function<bool(const shm::TcpConnInfo&)>& keep) {
    if (q.port_index >= ports.size()) return EINVAL;
    r = shm::TcpConnsReply{};
    constexpr std::size_t kPage = 256;  // rows copied on an lcore per turn
    std::vector<shm::TcpConnInfo> kept;
    for (TcpService* lane : ports[q.port_index]) {  // each lane's TCP, in queue order
        std::size_t total = 0;
        for (std::size_t first = 0;; first += kPage) {
            const auto rows = lane->rows(first, kPage, total);
            for (const TcpConnRow& row : rows)
                if (shm::TcpConnInfo c = tcp_conn_info(row); keep(c)) kept.push_back(c);
            if (rows.size() < kPage || first + rows.size() >= total) break;
        }
    }
    const std::size_t from = std::min<std::size_t>(q.first, kept.size());
    const std::size_t n = std::min(kept.size() - from, shm::kMaxTcpConnsListed);
    std::copy_n(kept.begin() + static_cast<std::ptrdiff_t>(from), n, r.conns);
    r.total = static_cast<std::uint32_t>(kept.size());
    r.listed = static_cast<std::uint32_t>(n);
    r.more = from + n < kept.size() ? 1 : 0;
    return 0;
}

// ---- the lcore --------------------------------------------------------------------------------

bool TcpService::poll(std::uint64_t now_tsc) {
    now_tsc_ = now_tsc;
    const bool released = nheld_ != 0 && release_held(now_tsc);
    const bool looped = loop_count_ != 0 && release_loop(now_tsc);
    const bool looped_in = looped_in_ != nullptr && release_looped_in(now_tsc);
    return stack_.poll(now_ns(now_tsc)) || released || looped || looped_in;
}

void TcpService::take_looped(rte_mbuf* m, std::uint64_t now_tsc) {
    const auto* p = rte_pktmbuf_mtod(m, const std::uint8_t*);
    const std::size_t ip_len = std::size_t{p[net::kEthHdrLen + 2]} << 8 | p[net::kEthHdrLen + 3];
    counters_.rx_segments.add();
    stack_.on_segment(port_.ip().addr, {p + kL4Offset, ip_len - (kL4Offset - net::kEthHdrLen)},
                      now_ns(now_tsc));
    rte_pktmbuf_free(m);
}

bool TcpService::release_loop(std::uint64_t now_tsc) {
    // Only those queued before this call: what their answers send waits for the next poll.
    for (std::size_t n = loop_count_; n > 0; --n) {
        rte_mbuf* m = loop_[loop_head_];
        loop_head_ = (loop_head_ + 1) % kLoopSlots;
        --loop_count_;
        take_looped(m, now_tsc);
    }
    return true;
}

bool TcpService::release_looped_in(std::uint64_t now_tsc) {
    rte_mbuf* pkts[kDefaultBurst];
    const unsigned n = rte_ring_sc_dequeue_burst(looped_in_, reinterpret_cast<void**>(pkts),
                                                 kDefaultBurst, nullptr);
    for (unsigned i = 0; i < n; ++i) take_looped(pkts[i], now_tsc);
    return n != 0;
}

void TcpService::on_tcp(void* ctx, Port&, rte_mbuf* m, const net::RxFrame& f, std::uint64_t now) {
    auto* self = static_cast<TcpService*>(ctx);
    self->now_tsc_ = now;
    if (f.src_ip == self->port_.ip().addr) {  // only the port's own loop sends those
        self->counters_.rx_own_source.add();
        rte_pktmbuf_free(m);
        return;
    }
    self->counters_.rx_segments.add();
    const auto* data = rte_pktmbuf_mtod(m, const std::uint8_t*);
    self->stack_.on_segment(f.src_ip, {data + f.l4_offset, f.l4_length}, self->now_ns(now),
                            f.l4_verified);
    rte_pktmbuf_free(m);
}

void TcpService::on_icmp(void* ctx, Port&, rte_mbuf* m, const net::RxFrame& f, std::uint64_t now) {
    auto* self = static_cast<TcpService*>(ctx);
    self->now_tsc_ = now;
    self->counters_.icmp_in.add();
    const auto* icmp = rte_pktmbuf_mtod(m, const std::uint8_t*) + f.l4_offset;
    IcmpUnreachable u;
    if (!net::parse_icmp_unreachable({icmp, f.l4_length}, u) ||
        u.protocol != static_cast<std::uint8_t>(net::IpProto::tcp)) {
        self->counters_.icmp_malformed.add();
        rte_pktmbuf_free(m);
        return;
    }
    rte_pktmbuf_free(m);
    self->stack_.on_icmp_unreachable(u, self->now_ns(now));
}

std::span<std::uint8_t> TcpService::tx_alloc(net::Ipv4Addr remote, std::size_t len) {
    if (kL4Offset + len > 0xffff) return {};
    tx_remote_ = remote;
    tx_hold_ = false;
    rte_mbuf* m = port_.alloc();
    if (m == nullptr) {
        counters_.tx_no_mbuf.add();
        return {};
    }
    if (kL4Offset + std::max<std::size_t>(len, net::kEthMinFrame) > rte_pktmbuf_tailroom(m)) {
        rte_pktmbuf_free(m);
        return {};
    }
    tx_m_ = m;
    return {rte_pktmbuf_mtod(m, std::uint8_t*) + kL4Offset, len};
}

TcpService::Template& TcpService::template_of(net::Ipv4Addr remote) {
    const std::uint32_t v = remote.value;
    Template& t = templates_[(v ^ v >> 8 ^ v >> 16 ^ v >> 24) % kTemplates];
    if (t.remote != remote || t.local != port_.ip().addr) {
        t = Template{};
        t.remote = remote;
        t.local = port_.ip().addr;
    }
    return t;
}

bool TcpService::ready(Template& t, std::uint64_t now_tsc) {
    if (t.built && port_.memo_holds(t.memo, now_tsc)) return true;
    const auto mac = port_.resolve(t.remote, now_tsc, t.memo);
    if (!mac) return false;
    if (!t.built || t.mac != *mac) {
        auto* p = t.hdr.data();
        net::write_eth(*reinterpret_cast<net::EthHdr*>(p), *mac, port_.mac(), net::EtherType::ipv4);
        auto& ip = *reinterpret_cast<net::Ipv4Hdr*>(p + net::kEthHdrLen);
        net::write_ipv4(ip, t.local, t.remote, net::IpProto::tcp, 0, 0);
        ip.total_length = 0;
        ip.checksum = 0;
        t.sum = net::csum_add(net::ipv4_header_bytes(ip));
        t.mac = *mac;
        t.built = true;
    }
    return true;
}

// The frame of a segment of `len` bytes after its headers, padded to Ethernet's least.
void TcpService::set_frame_length(rte_mbuf* m, std::size_t len) {
    std::size_t frame_len = kL4Offset + len;
    if (frame_len < net::kEthMinFrame) {
        std::memset(rte_pktmbuf_mtod(m, std::uint8_t*) + frame_len, 0,
                    net::kEthMinFrame - frame_len);
        frame_len = net::kEthMinFrame;
    }
    m->data_len = static_cast<std::uint16_t>(frame_len);
    m->pkt_len = static_cast<std::uint32_t>(frame_len);
}

void TcpService::frame(rte_mbuf* m, const Template& t, std::size_t len) {
    auto* p = rte_pktmbuf_mtod(m, std::uint8_t*);
    std::memcpy(p, t.hdr.data(), kL4Offset);
    auto& ip = *reinterpret_cast<net::Ipv4Hdr*>(p + net::kEthHdrLen);
    const auto total = static_cast<std::uint16_t>(net::kIpv4MinHdrLen + len);
    const std::uint16_t id = ip_id_++;
    ip.total_length = total;
    ip.id = id;
    ip.checksum = port_.offloads().tx_ipv4_checksum ? 0 : net::csum_finish(t.sum + total + id);
    set_frame_length(m, len);
    offload(m);
}

void TcpService::offload(rte_mbuf* m) const {
    const PortOffloads& o = port_.offloads();
    if (!o.tx_ipv4_checksum && !o.tx_tcp_checksum) return;
    m->ol_flags |= RTE_MBUF_F_TX_IPV4;
    if (o.tx_ipv4_checksum) {
        m->ol_flags |= RTE_MBUF_F_TX_IP_CKSUM;  // over a zero field, as DPDK asks
        reinterpret_cast<net::Ipv4Hdr*>(rte_pktmbuf_mtod(m, std::uint8_t*) + net::kEthHdrLen)
            ->checksum = 0;
    }
    if (o.tx_tcp_checksum) m->ol_flags |= RTE_MBUF_F_TX_TCP_CKSUM;
    m->l2_len = net::kEthHdrLen;
    m->l3_len = net::kIpv4MinHdrLen;
}

void TcpService::complete_checksum(rte_mbuf* m, std::size_t len) const {
    if (!port_.offloads().tx_tcp_checksum) return;
    std::uint8_t* tcp = rte_pktmbuf_mtod(m, std::uint8_t*) + kL4Offset;
    auto& h = *reinterpret_cast<tcp::TcpHdr*>(tcp);
    h.checksum = net::csum_finish(net::csum_add({tcp, len}));  // the field holds the pseudo sum
}

void TcpService::frame(rte_mbuf* m, net::MacAddr mac, net::Ipv4Addr remote, std::size_t len) {
    auto* p = rte_pktmbuf_mtod(m, std::uint8_t*);
    net::write_eth(*reinterpret_cast<net::EthHdr*>(p), mac, port_.mac(), net::EtherType::ipv4);
    net::write_ipv4(*reinterpret_cast<net::Ipv4Hdr*>(p + net::kEthHdrLen), port_.ip().addr, remote,
                    net::IpProto::tcp, static_cast<std::uint16_t>(len), ip_id_++);
    set_frame_length(m, len);
}

void TcpService::tx_send(std::size_t len) {
    rte_mbuf* m = tx_m_;
    tx_m_ = nullptr;
    if (m == nullptr) return;
    if (tx_remote_ == port_.ip().addr) {  // a connection of the port to itself
        complete_checksum(m, len);
        frame(m, port_.mac(), tx_remote_, len);
        // To the lane whose TCP has the destination port (this one's, with one queue).
        const auto* tcp = rte_pktmbuf_mtod(m, const std::uint8_t*) + kL4Offset;
        const std::uint16_t to = port_.tcp_lane(static_cast<std::uint16_t>(tcp[2] << 8 | tcp[3]));
        if (to != port_.queue() && to < lanes_.size()) {
            if (rte_ring_mp_enqueue(lanes_[to]->looped_in_, m) != 0) {
                counters_.loopback_full.add();
                rte_pktmbuf_free(m);
                return;
            }
            counters_.loopback.add();
            return;
        }
        if (loop_count_ == kLoopSlots) {
            counters_.loopback_full.add();
            rte_pktmbuf_free(m);
            return;
        }
        counters_.loopback.add();
        loop_[(loop_head_ + loop_count_++) % kLoopSlots] = m;
        return;
    }
    Template& t = template_of(tx_remote_);
    if (ready(t, now_tsc_)) {
        frame(m, t, len);
        counters_.tx_segments.add();
        port_.send(m);
        return;
    }
    // No MAC yet (a request is on its way): hold the frame, its length kept in the mbuf.
    if (nheld_ == kHeld) {
        counters_.tx_unresolved.add();
        rte_pktmbuf_free(m);
        return;
    }
    m->data_len = static_cast<std::uint16_t>(len);  // the segment's; framed when sent
    held_[nheld_++] = Held{m, tx_remote_, now_tsc_};
    counters_.tx_arp_wait.add();
}

bool TcpService::release_held(std::uint64_t now_tsc) {
    bool did = false;
    std::size_t keep = 0;
    for (std::size_t i = 0; i < nheld_; ++i) {
        Held h = held_[i];
        if (const auto mac = port_.resolve(h.remote, now_tsc)) {
            frame(h.m, *mac, h.remote, h.m->data_len);
            offload(h.m);
            counters_.tx_segments.add();
            port_.send(h.m);
            did = true;
        } else if (now_tsc - h.since > tsc_hz_) {  // a second: the engine retransmits
            counters_.tx_unresolved.add();
            rte_pktmbuf_free(h.m);
        } else {
            held_[keep++] = h;
        }
    }
    nheld_ = keep;
    return did;
}

}  // namespace snic::daemon
