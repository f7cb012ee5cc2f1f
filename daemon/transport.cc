// The transport's setup side: building a QP's engine from its attributes, and handing
// it to (and taking it back from) the port's lcore. Control thread only.
#include "daemon/transport.h"

#include <rte_cycles.h>

#include <algorithm>

#include "daemon/port.h"
#include "daemon/session.h"

namespace snic::daemon {

namespace {

// The UDP source port of a QP's packets: RoCEv2 uses it for flow entropy (ECMP), from
// 0xC000 up; one per QP pair so that each connection stays on one path.
std::uint16_t source_port(std::uint32_t qpn, std::uint32_t dest_qpn) {
    const std::uint32_t h = (qpn * 0x9e3779b1u) ^ (dest_qpn * 0x85ebca6bu);
    return static_cast<std::uint16_t>(0xc000u | ((h >> 16) & 0x3fffu));
}

}  // namespace

std::optional<roce::RcConfig> rc_config_of(const Qp& qp, net::Ipv4Addr* peer) {
    const shm::QpAttr& a = qp.attr;
    const std::uint8_t* g = a.ah_attr.dgid;
    for (int i = 0; i < 10; ++i)
        if (g[i] != 0) return std::nullopt;
    if (g[10] != 0xff || g[11] != 0xff) return std::nullopt;
    *peer = net::Ipv4Addr{std::uint32_t{g[12]} << 24 | std::uint32_t{g[13]} << 16 |
                          std::uint32_t{g[14]} << 8 | g[15]};
    roce::RcConfig c;
    c.qpn = qp.qpn.get();
    c.dest_qpn = a.dest_qp_num;
    c.mtu = 128u << std::clamp<std::uint32_t>(a.path_mtu, 1, 5);
    c.sq_psn = a.sq_psn;
    c.rq_psn = a.rq_psn;
    c.timeout = a.timeout;
    c.retry_cnt = a.retry_cnt;
    c.rnr_retry = a.rnr_retry;
    c.min_rnr_timer = a.min_rnr_timer;
    c.max_rd_atomic = a.max_rd_atomic;
    c.max_dest_rd_atomic = a.max_dest_rd_atomic;
    c.remote_access = a.qp_access_flags & (verbs::access::remote_write |
                                           verbs::access::remote_read |
                                           verbs::access::remote_atomic);
    c.sq_depth = std::max<std::uint32_t>(qp.cap.max_send_wr, 1);
    c.max_inline = qp.cap.max_inline_data;
    c.srq = static_cast<bool>(qp.srq);
    return c;
}

QpRuntime::QpRuntime(RoceTransport& transport, Qp& qp, const roce::RcConfig& config,
                     net::Ipv4Addr peer)
    : t_(transport),
      qp_(qp),
      config_(config),
      peer_(peer),
      src_port_(source_port(config.qpn, config.dest_qpn)),
      loopback_(peer == transport.port().ip().addr),
      engine_(config, *this, *this, *this) {}

RoceTransport::RoceTransport(Port& port, LcoreTasks& tasks, const NameTable& keys,
                             std::uint64_t tsc_hz)
    : port_(port),
      tasks_(tasks),
      keys_(keys),
      ns_per_tsc_(1e9 / static_cast<double>(tsc_hz)),
      by_slot_(std::make_unique<std::array<QpRuntime*, kQpnSlots>>()) {
    by_slot_->fill(nullptr);
    active_.reserve(1024);
}

RoceTransport::~RoceTransport() {
    for (; loop_count_ > 0; --loop_count_, loop_head_ = (loop_head_ + 1) % kLoopSlots)
        rte_pktmbuf_free(loop_[loop_head_]);
}

void RoceTransport::attach(QpRuntime* rt) {
    tasks_.run([&] {
        (*by_slot_)[rt->qpn() & (kQpnSlots - 1)] = rt;
        active_.push_back(rt);
        if (!rt->loopback_) port_.resolve(rt->peer_, rte_rdtsc());  // ARP ahead of the first send
    });
}

void RoceTransport::detach(QpRuntime* rt) {
    tasks_.run([&] {
        auto& slot = (*by_slot_)[rt->qpn() & (kQpnSlots - 1)];
        if (slot == rt) slot = nullptr;
        std::erase(active_, rt);
        if (rt->tx_m_ != nullptr) rte_pktmbuf_free(std::exchange(rt->tx_m_, nullptr));
    });
}

void RoceTransport::quiesce() {
    tasks_.run([] {});
}

}  // namespace snic::daemon
