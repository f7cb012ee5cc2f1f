#include "proto/roce/ud_qp.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "proto/roce/grh.h"
#include "proto/roce/psn.h"
#include "proto/verbs/place.h"

namespace snic::roce {

namespace {

using verbs::WcStatus;

std::optional<net::Ipv4Addr> ipv4_of(const std::array<std::uint8_t, 16>& gid) {
    std::uint8_t raw[16];
    std::memcpy(raw, gid.data(), sizeof raw);
    return net::ipv4_from_mapped(raw);
}

// A P_Key of the default partition (IBA 10.9.3): its low 15 bits all ones.
constexpr bool default_partition(std::uint16_t pkey) {
    return (pkey & 0x7fffu) == 0x7fffu;
}

}  // namespace

UdQp::UdQp(const UdConfig& config, verbs::QpMemory& memory, verbs::QpQueues& queues, UdWire& wire)
    : cfg_(config), memory_(memory), queues_(queues), wire_(wire), psn_(config.sq_psn & kPsnMask) {
    cfg_.flush_budget = std::max<std::uint32_t>(cfg_.flush_budget, 1);
}

// ---- send side --------------------------------------------------------------------------------

void UdQp::complete_send(const verbs::SendWr& wr, WcStatus status) {
    // An error completes even an unsignaled WR (IBA 10.8.6): the client must see it.
    if (!wr.signaled && status == WcStatus::success) return;
    verbs::Completion c;
    c.wr_id = wr.wr_id;
    c.status = status;
    c.opcode = verbs::wr_op_kind(wr.op).wc;
    c.qp_num = cfg_.qpn;
    queues_.complete_send(c);
}

UdQp::Sent UdQp::send(const verbs::SendWr& wr, std::uint64_t now_ns) {
    if (wr.op != verbs::WrOp::send && wr.op != verbs::WrOp::send_imm) {
        complete_send(wr, WcStatus::loc_qp_op_err);
        return Sent::failed;
    }
    std::uint64_t len = wr.inline_data ? wr.inline_len : 0;
    if (!wr.inline_data)
        for (std::uint32_t i = 0; i < wr.num_sge; ++i) len += wr.sge[i].length;
    if (len > cfg_.mtu) {
        // C10-93.1.1: a UD message longer than the port's MTU emits no packet and raises no
        // error.
        counters_.tx_too_long.add();
        complete_send(wr, WcStatus::success);
        return Sent::done;
    }
    const std::optional<net::Ipv4Addr> dst = ipv4_of(wr.ud.dgid);
    if (!dst) {
        counters_.tx_bad_dest.add();
        complete_send(wr, WcStatus::loc_qp_op_err);
        return Sent::failed;
    }
    const Opcode op =
        wr.op == verbs::WrOp::send_imm ? Opcode::ud_send_only_with_immediate : Opcode::ud_send_only;
    const std::size_t packet_len = transport_length(op, len) - kIcrcLen;
    const std::span<std::uint8_t> buf = wire_.tx_alloc(packet_len);
    if (buf.empty()) {
        retry_at_ = now_ns;  // no buffer: on the next poll
        return Sent::retry;
    }

    PacketSpec spec;
    spec.opcode = op;
    spec.solicited = wr.solicited;
    spec.pkey = cfg_.pkey;
    spec.dest_qp = wr.ud.remote_qpn & kPsnMask;
    spec.psn = psn_;
    spec.deth.qkey = effective_qkey(wr.ud.remote_qkey, cfg_.qkey);
    spec.deth.src_qp = cfg_.qpn;
    std::memcpy(&spec.immdt, &wr.imm_or_rkey, sizeof spec.immdt);  // as posted
    const std::size_t hdr = write_headers(buf, spec, len);
    std::uint8_t* out = buf.data() + hdr;
    if (wr.inline_data) {
        std::memcpy(out, wr.inline_bytes.data(), len);
    } else {
        for (std::uint32_t i = 0; i < wr.num_sge; ++i) {
            const verbs::Sge& s = wr.sge[i];
            if (s.length == 0) continue;
            const std::uint8_t* src = memory_.local(s.lkey, s.addr, s.length, false);
            if (src == nullptr) {  // the buffer from tx_alloc is abandoned: the wire frees it
                complete_send(wr, WcStatus::loc_prot_err);
                return Sent::failed;
            }
            std::memcpy(out, src, s.length);
            out += s.length;
        }
    }
    std::memset(buf.data() + hdr + len, 0, packet_len - hdr - len);  // the pad
    if (!wire_.tx_send(packet_len, *dst, spec.dest_qp)) {
        counters_.tx_unresolved.add();
        if (now_ns - held_since_ < kResolveWaitNs) {
            retry_at_ = now_ns + kResolveRetryNs;
            return Sent::retry;
        }
        complete_send(wr, WcStatus::success);  // lost, as a datagram may be
        return Sent::done;
    }
    psn_ = psn_add(psn_, 1);
    counters_.tx_packets.add();
    complete_send(wr, WcStatus::success);
    return Sent::done;
}

bool UdQp::poll(std::uint64_t now_ns) {
    more_ = false;
    if (error_) return flush() > 0;
    bool did = false;
    if (held_) {
        if (now_ns < retry_at_) return false;
        if (send(wr_, now_ns) == Sent::retry) return did;
        held_ = false;
        did = true;
    }
    for (std::uint32_t n = 0; n < kMaxBurst; ++n) {
        if (!queues_.pop_send(wr_)) return did;
        did = true;
        held_since_ = now_ns;
        if (send(wr_, now_ns) == Sent::retry) {
            held_ = true;
            return did;
        }
    }
    more_ = true;
    return did;
}

std::uint64_t UdQp::next_deadline() const {
    if (more_) return 0;
    if (held_) return retry_at_;
    return std::numeric_limits<std::uint64_t>::max();
}

std::uint32_t UdQp::flush() {
    std::uint32_t n = 0;
    if (held_) {
        held_ = false;
        complete_send(wr_, WcStatus::wr_flush_err);
        ++n;
    }
    // At most flush_budget of each queue: a client that keeps posting gets the rest flushed
    // on the next poll (more_), not this one.
    std::uint32_t sends = 0;
    for (; sends < cfg_.flush_budget && queues_.pop_send(wr_); ++sends)
        complete_send(wr_, WcStatus::wr_flush_err);
    std::uint32_t recvs = 0;
    verbs::RecvWr r;
    // An SRQ's WRs belong to its other QPs too.
    for (; !cfg_.srq && recvs < cfg_.flush_budget && queues_.pop_recv(r); ++recvs) {
        verbs::Completion c;
        c.wr_id = r.wr_id;
        c.status = WcStatus::wr_flush_err;
        c.opcode = verbs::WcOpcode::recv;
        c.qp_num = cfg_.qpn;
        queues_.complete_recv(c);
    }
    if (sends == cfg_.flush_budget || recvs == cfg_.flush_budget) more_ = true;
    return n + sends + recvs;
}

// ---- receive side -----------------------------------------------------------------------------

WcStatus UdQp::place(const verbs::RecvWr& wr, std::span<const std::uint8_t, 20> ipv4_header,
                     std::span<const std::uint8_t> payload) {
    std::uint64_t room = 0;
    for (std::uint32_t i = 0; i < wr.num_sge; ++i) room += wr.sge[i].length;
    if (room < kGrhLen + payload.size()) {
        counters_.rx_too_long.add();
        return WcStatus::loc_len_err;
    }
    std::uint8_t grh[kGrhLen];
    write_grh_ipv4(std::span<std::uint8_t, kGrhLen>(grh), ipv4_header);
    // The GRH area then the payload, as one byte stream over the SGEs.
    const std::span<const std::uint8_t> parts[2] = {{grh, kGrhLen}, payload};
    std::size_t part = 0, off = 0;
    for (std::uint32_t i = 0; i < wr.num_sge && part < 2; ++i) {
        const verbs::Sge& s = wr.sge[i];
        std::uint64_t done = 0;
        while (done < s.length && part < 2) {
            const std::size_t n = static_cast<std::size_t>(
                std::min<std::uint64_t>(s.length - done, parts[part].size() - off));
            if (n != 0) {
                std::uint8_t* dst =
                    memory_.local(s.lkey, s.addr + done, static_cast<std::uint32_t>(n), true);
                if (dst == nullptr) return WcStatus::loc_prot_err;
                verbs::place(dst, parts[part].data() + off, n);
            }
            done += n;
            off += n;
            if (off == parts[part].size()) ++part, off = 0;
        }
    }
    return WcStatus::success;
}

void UdQp::on_packet(const Packet& pkt, std::span<const std::uint8_t, 20> ipv4_header) {
    const Opcode op = static_cast<Opcode>(pkt.opcode());
    if (op != Opcode::ud_send_only && op != Opcode::ud_send_only_with_immediate) {
        counters_.drop_bad_opcode.add();
        return;
    }
    if (error_) {
        counters_.drop_qp_error.add();
        return;
    }
    if (!default_partition(pkt.bth().pkey.host())) {
        counters_.drop_bad_pkey.add();
        return;
    }
    const Deth& deth = *pkt.deth();
    if (deth.qkey.host() != cfg_.qkey) {
        counters_.drop_bad_qkey.add();
        return;
    }
    verbs::RecvWr wr;
    if (!queues_.pop_recv(wr)) {
        counters_.drop_no_recv.add();
        return;
    }
    counters_.rx_packets.add();
    verbs::Completion c;
    c.wr_id = wr.wr_id;
    c.opcode = verbs::WcOpcode::recv;
    c.status = place(wr, ipv4_header, pkt.payload);
    c.qp_num = cfg_.qpn;
    c.src_qp = deth.src_qp.host();
    c.solicited = pkt.bth().solicited();
    c.with_grh = true;
    c.sl = verbs::kWcSlRoceV2Ipv4;
    c.pkey_index = 0;
    if (c.status == WcStatus::success) {
        c.byte_len = static_cast<std::uint32_t>(kGrhLen + pkt.payload.size());
        if (const ImmDt* imm = pkt.immdt()) {
            c.with_imm = true;
            std::memcpy(&c.imm_or_rkey, imm, sizeof c.imm_or_rkey);  // as on the wire
        }
    } else {
        c.with_grh = false;
    }
    queues_.complete_recv(c);
}

}  // namespace snic::roce
