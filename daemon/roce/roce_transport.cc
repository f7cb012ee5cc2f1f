// The RoCEv2 transport's setup side: building a QP's engine from its attributes, and handing
// it to (and taking it back from) the port's lcore. Control thread only.
#include "daemon/roce/roce_transport.h"

#include <rte_cycles.h>

#include <algorithm>

#include "daemon/port/port.h"
#include "daemon/roce/roce_rules.h"
#include "daemon/verbs/completion.h"
#include "daemon/verbs/session.h"

namespace snic::daemon {

std::uint16_t roce_source_port(std::uint32_t qpn, std::uint32_t dest_qpn) {
    const std::uint32_t h = (qpn * 0x9e3779b1u) ^ (dest_qpn * 0x85ebca6bu);
    return static_cast<std::uint16_t>(0xc000u | ((h >> 16) & 0x3fffu));
}

const char* roce_check_attr(std::uint32_t mask, const shm::QpAttr& a) {
    if ((mask & verbs::qp_attr::av) != 0 && !net::ipv4_from_mapped(a.ah_attr.dgid))
        return "dgid is not an IPv4-mapped address (::ffff:a.b.c.d): the wire is IPv4";
    return nullptr;
}

roce::RcConfig rc_config_of(const Qp& qp) {
    const shm::QpAttr& a = qp.attr;
    roce::RcConfig c;
    c.service = qp.type == verbs::QpType::uc ? roce::Transport::uc : roce::Transport::rc;
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
    c.remote_access =
        a.qp_access_flags &
        (verbs::access::remote_write | verbs::access::remote_read | verbs::access::remote_atomic);
    c.sq_depth = std::max<std::uint32_t>(qp.cap.max_send_wr, 1);
    c.max_inline = qp.cap.max_inline_data;
    c.srq = static_cast<bool>(qp.srq);
    c.flush_budget = flush_budget(qp);
    return c;
}

roce::UdConfig ud_config_of(const Qp& qp, std::uint32_t ip_mtu) {
    roce::UdConfig c;
    c.qpn = qp.qpn.get();
    c.qkey = qp.attr.qkey;
    // The largest message: what one packet carries on this port (IBA 10.2.5: UD messages
    // are at most the port's MTU), as an IB MTU, so that both ends agree on it.
    c.mtu = 128u << std::clamp<std::uint32_t>(active_ib_mtu(ip_mtu), 1, 5);
    c.sq_psn = qp.attr.sq_psn;
    c.srq = static_cast<bool>(qp.srq);
    c.flush_budget = flush_budget(qp);
    return c;
}

RoceQpBase::RoceQpBase(RoceTransport& transport, Qp& qp, const NameTable& keys, std::uint32_t qpn)
    : RunningQp(qp, keys, qpn), transport_(transport) {}

RoceQpBase::~RoceQpBase() = default;

RoceQp::RoceQp(RoceTransport& transport, Qp& qp, const NameTable& keys,
               const roce::RcConfig& config, net::Ipv4Addr peer, roce::SendSlotPool& slots)
    : RoceQpBase(transport, qp, keys, config.qpn),
      config_(config),
      peer_(peer),
      src_port_(roce_source_port(config.qpn, config.dest_qpn)),
      loopback_(peer == transport.port().ip().addr),
      peer_known_(loopback_ || config.service != roce::Transport::uc),
      await_since_(kNever),
      flow_({transport.port().mac(), net::MacAddr::zero(), transport.port().ip().addr, peer,
             src_port_, net::kRoceV2Port},
            config.pkey, config.dest_qpn),
      engine_(config, glue_, glue_, *this, &slots) {
    rx_flow_ = roce::IcrcRxFlow(peer.value);
    if (const std::uint32_t from = transport.port().placed_min(); from != 0) tx_placed_from = from;
}

void RoceQp::start_sending(const shm::QpAttr& a) {
    engine_.start_requester(a.sq_psn, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic);
}

void RoceQp::to_error() {
    engine_.to_error();
}

RoceUdQp::RoceUdQp(RoceTransport& transport, Qp& qp, const NameTable& keys,
                   const roce::UdConfig& config)
    : RoceQpBase(transport, qp, keys, config.qpn), engine_(config, glue_, glue_, *this) {}

void RoceUdQp::start_sending(const shm::QpAttr& a) {
    engine_.start_sending(a.sq_psn);
}

void RoceUdQp::to_error() {
    engine_.to_error();
    glue_.set_sending();  // so that the engine can take what is posted, to flush it
}

void RoceUdQp::modified(std::uint32_t mask, const shm::QpAttr& a) {
    if ((mask & verbs::qp_attr::qkey) != 0) engine_.set_qkey(a.qkey);
}

QpEngineView RoceUdQp::view() const {
    QpEngineView v;
    v.failed = failed();
    v.error = failed() ? "requested" : "none";
    v.next_psn = engine_.next_psn();
    v.send_wrs_held = engine_.send_wrs_held();
    return v;
}

void RoceUdQp::for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const {
    for (const auto& f : roce::kUdCounterFields)
        fn(ctx, {f.name, (engine_.counters().*f.field).get()});
}

QpEngineView RoceQp::view() const {
    QpEngineView v;
    v.failed = failed();
    v.error = roce::rc_error_name(engine_.error());
    v.next_psn = engine_.next_psn();
    v.unacked_psn = engine_.unacked_psn();
    v.expected_psn = engine_.expected_psn();
    v.msn = engine_.msn();
    v.send_wrs_held = engine_.send_wrs_held();
    return v;
}

void RoceQp::for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const {
    for (const auto& f : roce::kRcCounterFields)
        fn(ctx, {f.name, (engine_.counters().*f.field).get()});
}

RoceTransport::RoceTransport(Port& port, LcoreTasks& tasks, const NameTable& keys,
                             std::uint64_t tsc_hz)
    : port_(port),
      tasks_(tasks),
      keys_(keys),
      runner_(tasks, tsc_hz, kGraceNs),
      slots_(kSlotChunks) {}

RoceTransport::~RoceTransport() {
    for (; loop_count_ > 0; --loop_count_, loop_head_ = (loop_head_ + 1) % kLoopSlots)
        rte_pktmbuf_free(loop_[loop_head_]);
}

void RoceTransport::set_gsi_hook(GsiReceiveFn fn, void* ctx) {
    gsi_fn_ = fn;
    gsi_ctx_ = ctx;
}

const char* RoceTransport::check_attr(std::uint32_t mask, const shm::QpAttr& a) const {
    return roce_check_attr(mask, a);
}

RoceQpBase& RoceTransport::of(Qp& qp) {
    return static_cast<RoceQpBase&>(*qp.engine);
}

Result<std::unique_ptr<QpEngine>> RoceTransport::start(Qp& qp) {
    std::unique_ptr<RoceQpBase> rt;
    std::optional<net::Ipv4Addr> peer;
    if (qp.type == verbs::QpType::ud) {
        rt = std::make_unique<RoceUdQp>(*this, qp, keys_, ud_config_of(qp, port_.mtu()));
    } else {  // RC or UC: connected, one engine for both services
        peer = net::ipv4_from_mapped(qp.attr.ah_attr.dgid);
        if (!peer) return make_error(EINVAL, "the destination GID is not IPv4-mapped");
        rt = std::make_unique<RoceQp>(*this, qp, keys_, rc_config_of(qp), *peer, slots_);
    }
    port_.claim_qpn(rt->qpn());  // its packets to this lane (port.h), whatever queue they reach
    runner_.add(*rt, qp, [&](std::uint64_t now) {
        if (peer && *peer != port_.ip().addr) port_.resolve(*peer, now);  // ARP ahead of time
    });
    return std::unique_ptr<QpEngine>(std::move(rt));
}

void RoceTransport::start_sending(Qp& qp) {
    RoceQpBase& rt = of(qp);
    const shm::QpAttr& a = qp.attr;
    tasks_.run([&] {
        rt.start_sending(a);
        rt.glue_.set_sending();
        runner_.wake(rt);
    });
}

void RoceTransport::drain(Qp& qp) {
    RoceQpBase& rt = of(qp);
    const bool notify = qp.attr.en_sqd_async_notify != 0;
    tasks_.run([&] {
        rt.glue_.set_draining(notify);
        rt.glue_.note_held(rt.send_wrs_held());  // already drained?
    });
}

void RoceTransport::resume(Qp& qp) {
    RoceQpBase& rt = of(qp);
    tasks_.run([&] {
        rt.glue_.set_sending();
        runner_.wake(rt);  // WQEs posted in SQD rang no doorbell if the QP was awake
    });
}

void RoceTransport::to_error(Qp& qp) {
    RoceQpBase& rt = of(qp);
    tasks_.run([&] {
        rt.glue_.note_failed(true);
        rt.to_error();
        runner_.wake(rt);  // a fatal NAK may be left to send; WRs posted later are flushed
    });
}

void RoceTransport::modified(Qp& qp, std::uint32_t mask) {
    RoceQpBase& rt = of(qp);
    const shm::QpAttr& a = qp.attr;
    tasks_.run([&] { rt.modified(mask, a); });
}

void RoceTransport::stop(std::span<Qp* const> qps) {
    std::vector<RunningQp*> running;
    running.reserve(qps.size());
    for (Qp* qp : qps) {
        running.push_back(&of(*qp));
        port_.release_qpn();
    }
    runner_.remove(running, [this](RunningQp& q) {
        auto& rt = static_cast<RoceQpBase&>(q);
        if (rt.tx_m_ != nullptr) rte_pktmbuf_free(std::exchange(rt.tx_m_, nullptr));
        rt.for_each_counter(
            [](void* ctx, NamedCounter c) {
                RoceCounters& t = *static_cast<RoceCounters*>(ctx);
                Counter* sum = c.name == "out_of_sequence"      ? &t.qps_out_of_sequence
                               : c.name == "duplicate_requests" ? &t.qps_duplicate_requests
                               : c.name == "seq_naks_sent"      ? &t.qps_seq_naks_sent
                               : c.name == "tx_retransmits"     ? &t.qps_retransmits
                                                                : nullptr;
                if (sum != nullptr && c.value != 0) sum->add(c.value);
            },
            &counters_);
    });
}

void RoceTransport::for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const {
    const RoceCounters& c = counters_;
    fn(ctx, {"rx_packets", c.rx_packets.get()});
    fn(ctx, {"tx_packets", c.tx_packets.get()});
    fn(ctx, {"rx_unknown_qpn", c.rx_unknown_qpn.get()});
    fn(ctx, {"rx_bad_source", c.rx_bad_source.get()});
    fn(ctx, {"rx_not_ipv4", c.rx_not_ipv4.get()});
    fn(ctx, {"tx_no_mbuf", c.tx_no_mbuf.get()});
    fn(ctx, {"tx_unresolved", c.tx_unresolved.get()});
    fn(ctx, {"tx_uc_held", c.tx_uc_held.get()});
    fn(ctx, {"loopback_packets", c.loopback_packets.get()});
    fn(ctx, {"loopback_full", c.loopback_full.get()});
    fn(ctx, {"turns", c.turns.get()});
    fn(ctx, {"qps_out_of_sequence", c.qps_out_of_sequence.get()});
    fn(ctx, {"qps_duplicate_requests", c.qps_duplicate_requests.get()});
    fn(ctx, {"qps_seq_naks_sent", c.qps_seq_naks_sent.get()});
    fn(ctx, {"qps_retransmits", c.qps_retransmits.get()});
    fn(ctx, {"rx_gsi", c.rx_gsi.get()});
    fn(ctx, {"rx_gsi_no_hook", c.rx_gsi_no_hook.get()});
    fn(ctx, {"rx_gsi_bad_opcode", c.rx_gsi_bad_opcode.get()});
    fn(ctx, {"tx_gsi", c.tx_gsi.get()});
    fn(ctx, {"tx_placed", c.tx_placed.get()});
    fn(ctx, {"rx_split", c.rx_split.get()});
    runner_.for_each_counter(fn, ctx);
    for (std::size_t i = 0; i < roce::kRoceDropReasons; ++i)
        fn(ctx, {roce::kRoceDropNames[i], c.drops[i].get()});
}

}  // namespace snic::daemon
