// The transport's datapath, on the port's lcore: received RoCEv2 packets to their QP's
// engine; the engines' queues, memory and wire. No allocation (but mbufs), no syscalls
// (but the completion channel's signal), no locks, no logs.
#include <rte_cycles.h>
#include <rte_mbuf.h>

#include <infiniband/verbs.h>

#include <cstring>

#include "daemon/completion.h"
#include "daemon/memory_keys.h"
#include "daemon/port.h"
#include "daemon/resources.h"
#include "daemon/session.h"
#include "daemon/transport.h"
#include "proto/net/ethernet.h"
#include "proto/net/ipv4.h"
#include "proto/net/udp.h"
#include "proto/roce/icrc.h"

namespace snic::daemon {

// The engines speak libibverbs' numbers, as the shared-memory ABI does: one cast apart.
static_assert(static_cast<int>(verbs::WrOp::rdma_write) == static_cast<int>(shm::WrOpcode::rdma_write));
static_assert(static_cast<int>(verbs::WrOp::rdma_write_imm) == static_cast<int>(shm::WrOpcode::rdma_write_imm));
static_assert(static_cast<int>(verbs::WrOp::send) == static_cast<int>(shm::WrOpcode::send));
static_assert(static_cast<int>(verbs::WrOp::send_imm) == static_cast<int>(shm::WrOpcode::send_imm));
static_assert(static_cast<int>(verbs::WrOp::rdma_read) == static_cast<int>(shm::WrOpcode::rdma_read));
static_assert(static_cast<int>(verbs::WrOp::atomic_cmp_swp) == static_cast<int>(shm::WrOpcode::atomic_cmp_swp));
static_assert(static_cast<int>(verbs::WrOp::atomic_fetch_add) == static_cast<int>(shm::WrOpcode::atomic_fetch_add));
static_assert(static_cast<int>(verbs::WrOp::local_inv) == static_cast<int>(shm::WrOpcode::local_inv));
static_assert(static_cast<int>(verbs::WrOp::bind_mw) == static_cast<int>(shm::WrOpcode::bind_mw));
static_assert(static_cast<int>(verbs::WrOp::send_inv) == static_cast<int>(shm::WrOpcode::send_inv));
static_assert(static_cast<int>(verbs::WcStatus::wr_flush_err) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<int>(verbs::WcStatus::rnr_retry_exc_err) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<int>(verbs::WcOpcode::recv_rdma_with_imm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(verbs::kWcWithImm == IBV_WC_WITH_IMM && verbs::kWcWithInv == IBV_WC_WITH_INV);
static_assert(verbs::kMaxSge == shm::kMaxSge && verbs::kMaxInline == shm::kMaxInline);

namespace {

constexpr std::size_t kFrameHeaders = net::kUdpFrameOverhead;  // Ethernet + IPv4 + UDP

// A send WQE copied out of the client's ring, checked, as the engine takes it. A WQE that
// breaks the rules becomes a local operation that fails: the QP then errors, in order.
verbs::SendWr to_send_wr(const shm::SendWqe& w, const Qp& qp) {
    verbs::SendWr wr;
    wr.wr_id = w.wr_id;
    wr.signaled = (w.flags & shm::kWqeSignaled) != 0 || qp.sq_sig_all != 0;
    wr.fence = (w.flags & shm::kWqeFence) != 0;
    wr.solicited = (w.flags & shm::kWqeSolicited) != 0;
    const bool valid_op = w.opcode < verbs::kWrOpCount;
    const bool inline_ok = (w.flags & shm::kWqeInline) == 0 ||
                           w.inline_length <= std::min(shm::kMaxInline, qp.cap.max_inline_data);
    const bool sge_ok = (w.flags & shm::kWqeInline) != 0 ||
                        w.num_sge <= std::min(shm::kMaxSge, qp.cap.max_send_sge);
    if (!valid_op || !inline_ok || !sge_ok) {
        wr.op = verbs::WrOp::local_inv;  // key 0: never valid
        wr.imm_or_rkey = 0;
        wr.signaled = true;
        return wr;
    }
    wr.op = static_cast<verbs::WrOp>(w.opcode);
    wr.imm_or_rkey = w.ex;
    switch (verbs::wr_op_kind(wr.op).kind) {
        case verbs::WrKind::write:
        case verbs::WrKind::read:
            wr.remote_addr = w.rdma.remote_addr;
            wr.rkey = w.rdma.rkey;
            break;
        case verbs::WrKind::atomic:
            wr.remote_addr = w.atomic.remote_addr;
            wr.rkey = w.atomic.rkey;
            wr.compare_add = w.atomic.compare_add;
            wr.swap = w.atomic.swap;
            break;
        case verbs::WrKind::local:
            if (wr.op == verbs::WrOp::bind_mw)
                wr.bind = {w.bind.mw_handle, w.bind.new_rkey, w.bind.mr_lkey, w.bind.access,
                           w.bind.addr, w.bind.length};
            break;
        case verbs::WrKind::send:
            break;
    }
    if ((w.flags & shm::kWqeInline) != 0) {
        wr.inline_data = true;
        wr.inline_len = w.inline_length;
        std::memcpy(wr.inline_bytes.data(), w.inline_data, w.inline_length);
    } else {
        wr.num_sge = w.num_sge;
        for (std::uint32_t i = 0; i < w.num_sge; ++i)
            wr.sge[i] = {w.sge[i].addr, w.sge[i].length, w.sge[i].lkey};
    }
    return wr;
}

shm::Cqe to_cqe(const verbs::Completion& c) {
    shm::Cqe e{};
    e.wr_id = c.wr_id;
    e.status = static_cast<std::uint8_t>(c.status);
    e.opcode = static_cast<std::uint8_t>(c.opcode);
    e.wc_flags = static_cast<std::uint8_t>(c.wc_flags());
    e.byte_len = c.byte_len;
    e.ex = c.imm_or_rkey;
    e.qp_num = c.qp_num;
    e.src_qp = c.src_qp;
    return e;
}

}  // namespace

// ---- QpMemory ----------------------------------------------------------------------------

KeyUser QpRuntime::key_user() const { return {t_.keys_, qp_.pd.get(), config_.qpn}; }

std::uint8_t* QpRuntime::local(std::uint32_t lkey, std::uint64_t addr, std::uint32_t len,
                               bool write) {
    return local_access(key_user(), lkey, addr, len, write);
}

verbs::RemoteRegion QpRuntime::remote(std::uint32_t rkey, std::uint64_t addr, std::uint32_t len,
                                     verbs::RemoteNeed need) {
    return remote_access(key_user(), rkey, addr, len, need);
}

bool QpRuntime::invalidate(std::uint32_t rkey) { return invalidate_remote(key_user(), rkey); }

verbs::WcStatus QpRuntime::local_invalidate(std::uint32_t key) {
    return invalidate_local(key_user(), key);
}

verbs::WcStatus QpRuntime::bind_mw(const verbs::MwBind& bind) {
    return bind_window(key_user(), bind);
}

// ---- state ---------------------------------------------------------------------------------

void QpRuntime::note_state() {
    if (engine_.state() == roce::RcState::error) mark_failed();
}

void QpRuntime::mark_failed() {
    if (failed_.load(std::memory_order_relaxed)) return;
    failed_.store(true, std::memory_order_release);
    // The client's view (libsnic's in_error()): the QP is in ERR.
    std::atomic_ref<std::uint32_t>(qp_.control->state)
        .store(static_cast<std::uint32_t>(verbs::QpState::err), std::memory_order_release);
}

// ---- QpQueues ----------------------------------------------------------------------------

void QpRuntime::start_sending(std::uint32_t sq_psn, std::uint8_t timeout, std::uint8_t retry_cnt,
                              std::uint8_t rnr_retry, std::uint8_t max_rd_atomic) {
    engine_.start_requester(sq_psn, timeout, retry_cnt, rnr_retry, max_rd_atomic);
    sending_ = true;
}

bool QpRuntime::pop_send(verbs::SendWr& out) {
    shm::SendWqe w;
    if (!sending_ || !qp_.sq || !qp_.sq->try_pop(w)) return false;
    out = to_send_wr(w, qp_);
    return true;
}

bool QpRuntime::pop_recv(verbs::RecvWr& out) {
    shm::RecvWqe w;
    const bool got = qp_.srq ? qp_.srq->ring->try_pop(w) : (qp_.rq && qp_.rq->try_pop(w));
    if (!got) return false;
    out.wr_id = w.wr_id;
    // A WQE with more SGEs than there can be has room for nothing: a message to it is too long.
    out.num_sge = w.num_sge <= shm::kMaxSge ? w.num_sge : 0;
    for (std::uint32_t i = 0; i < out.num_sge; ++i)
        out.sge[i] = {w.sge[i].addr, w.sge[i].length, w.sge[i].lkey};
    return true;
}

// An RC QP completes a WR in error only on its way to ERR: that is published before the
// client can see the completion (and ask the QP's state).
void QpRuntime::complete_send(const verbs::Completion& c) {
    if (c.status != verbs::WcStatus::success) mark_failed();
    post_cqe(*qp_.send_cq.get(), to_cqe(c), c.solicited);
}

void QpRuntime::complete_recv(const verbs::Completion& c) {
    if (c.status != verbs::WcStatus::success) mark_failed();
    post_cqe(*qp_.recv_cq.get(), to_cqe(c), c.solicited);
}

// ---- RcWire ------------------------------------------------------------------------------

std::span<std::uint8_t> QpRuntime::tx_alloc(std::size_t len) {
    if (tx_m_ != nullptr) rte_pktmbuf_free(std::exchange(tx_m_, nullptr));  // abandoned
    rte_mbuf* m = t_.port_.alloc();
    if (m == nullptr) {
        t_.counters_.tx_no_mbuf.add();
        return {};
    }
    if (rte_pktmbuf_tailroom(m) < kFrameHeaders + len + roce::kIcrcLen) {
        rte_pktmbuf_free(m);
        t_.counters_.tx_no_mbuf.add();
        return {};
    }
    tx_m_ = m;
    return {rte_pktmbuf_mtod(m, std::uint8_t*) + kFrameHeaders, len};
}

void QpRuntime::tx_send(std::size_t len) {
    rte_mbuf* m = std::exchange(tx_m_, nullptr);
    if (m == nullptr) return;
    Port& port = t_.port_;
    std::optional<net::MacAddr> dst =
        loopback_ ? std::optional(port.mac()) : port.resolve(peer_, now_tsc_);
    if (!dst) {
        rte_pktmbuf_free(m);
        t_.counters_.tx_unresolved.add();
        return;
    }
    auto* frame = rte_pktmbuf_mtod(m, std::uint8_t*);
    auto& eth = *reinterpret_cast<net::EthHdr*>(frame);
    auto& ip = *reinterpret_cast<net::Ipv4Hdr*>(frame + net::kEthHdrLen);
    auto& udp = *reinterpret_cast<net::UdpHdr*>(frame + net::kEthHdrLen + net::kIpv4MinHdrLen);
    const auto udp_len = static_cast<std::uint16_t>(net::kUdpHdrLen + len + roce::kIcrcLen);
    net::write_eth(eth, *dst, port.mac(), net::EtherType::ipv4);
    net::write_ipv4(ip, port.ip().addr, peer_, net::IpProto::udp, udp_len);
    udp.src_port = src_port_;
    udp.dst_port = net::kRoceV2Port;
    udp.length = udp_len;
    udp.checksum = 0;  // RoCEv2 over IPv4: the ICRC protects the payload
    const std::size_t ip_len = net::kIpv4MinHdrLen + udp_len;
    roce::icrc_fill({frame + net::kEthHdrLen, ip_len});
    m->data_len = static_cast<std::uint16_t>(net::kEthHdrLen + ip_len);
    m->pkt_len = m->data_len;
    t_.counters_.tx_packets.add();
    if (!loopback_) return port.send(m);
    if (t_.loop_count_ == RoceTransport::kLoopSlots) {
        t_.counters_.loopback_full.add();
        rte_pktmbuf_free(m);
        return;
    }
    t_.loop_[(t_.loop_head_ + t_.loop_count_++) % RoceTransport::kLoopSlots] = m;
    t_.counters_.loopback_packets.add();
}

// ---- the transport --------------------------------------------------------------------------

std::uint64_t RoceTransport::ns(std::uint64_t tsc) const {
    return static_cast<std::uint64_t>(static_cast<double>(tsc) * ns_per_tsc_);
}

void RoceTransport::on_rx(void* ctx, Port&, rte_mbuf* m, const net::RxFrame& frame,
                          std::uint64_t now_tsc) {
    static_cast<RoceTransport*>(ctx)->receive(m, frame, now_tsc);
}

void RoceTransport::receive(rte_mbuf* m, const net::RxFrame& f, std::uint64_t now_tsc) {
    counters_.rx_packets.add();
    const auto* frame = rte_pktmbuf_mtod(m, const std::uint8_t*);
    const std::span<const std::uint8_t> payload(frame + f.l4_offset + net::kUdpHdrLen,
                                                f.l4_length - net::kUdpHdrLen);
    const roce::Packet pkt = roce::parse(payload);
    auto drop = [&](roce::Drop why) {
        counters_.drops[static_cast<std::size_t>(why)].add();
        rte_pktmbuf_free(m);
    };
    if (!pkt.ok()) return drop(pkt.drop);
    const std::size_t l3_len = f.l4_offset + f.l4_length - f.l3_offset;
    if (!roce::icrc_verify({frame + f.l3_offset, l3_len})) return drop(roce::Drop::bad_icrc);
    const std::uint32_t qpn = pkt.bth().dest_qp.host();
    QpRuntime* rt = (*by_slot_)[qpn & (kQpnSlots - 1)];
    if (rt == nullptr || rt->qpn() != qpn) {
        counters_.rx_unknown_qpn.add();
        rte_pktmbuf_free(m);
        return;
    }
    rt->now_tsc_ = now_tsc;
    rt->engine_.on_packet(pkt, ns(now_tsc));
    rt->note_state();
    rte_pktmbuf_free(m);
}

bool RoceTransport::poll(std::uint64_t now_tsc) {
    bool work = false;
    // Frames the engines sent to this port last turn: received now, outside any engine.
    for (std::uint32_t n = loop_count_; n > 0; --n) {
        rte_mbuf* m = loop_[loop_head_];
        loop_head_ = (loop_head_ + 1) % kLoopSlots;
        --loop_count_;
        port_.receive_local(m, now_tsc);
        work = true;
    }
    const std::uint64_t now = ns(now_tsc);
    for (QpRuntime* rt : active_) {
        rt->now_tsc_ = now_tsc;
        work |= rt->engine_.poll(now);
        rt->note_state();
    }
    return work;
}

}  // namespace snic::daemon
