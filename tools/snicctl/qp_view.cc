#include "tools/snicctl/qp_view.h"

#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstdio>
#include <cstring>

#include "proto/net/addr.h"
#include "proto/tcp/tcp.h"
#include "proto/verbs/qp_state.h"

namespace snic::snicctl {

namespace {

constexpr std::uint32_t kQpnMax = (1u << 24) - 1;

// A fixed-size text field of the ABI, up to its NUL or its end.
template <std::size_t N>
std::string_view text(const char (&field)[N]) {
    return {field, strnlen(field, N)};
}

std::string hex(std::uint32_t v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%06x", v);
    return buf;
}

std::string state_name(std::uint32_t state) {
    const auto s = verbs::qp_state_from(state);
    return s ? verbs::qp_state_name(*s) : "?" + std::to_string(state);
}

// The peer of a QP: "-" until RTR set its destination GID.
std::string peer(const std::uint8_t (&dgid)[16]) {
    for (std::uint8_t b : dgid)
        if (b != 0) return net::gid_to_string(dgid);
    return "-";
}

// ibv_access_flags by name.
std::string access_names(std::uint32_t flags) {
    struct Flag {
        std::uint32_t bit;
        const char* name;
    };
    constexpr Flag kFlags[] = {{1u << 0, "LOCAL_WRITE"},
                               {1u << 1, "REMOTE_WRITE"},
                               {1u << 2, "REMOTE_READ"},
                               {1u << 3, "REMOTE_ATOMIC"},
                               {1u << 4, "MW_BIND"}};
    std::string out;
    for (const Flag& f : kFlags) {
        if ((flags & f.bit) == 0) continue;
        out += (out.empty() ? "" : ",") + std::string(f.name);
        flags &= ~f.bit;
    }
    if (flags != 0) out += (out.empty() ? "" : ",") + hex(flags);
    return out.empty() ? "-" : out;
}

// A line of "key value" pairs.
class Line {
  public:
    explicit Line(std::string_view indent = "") : s_(indent) {}
    Line& add(std::string_view key, std::string_view value) {
        if (!s_.empty() && s_.back() != ' ') s_ += ' ';
        s_.append(key).append(" ").append(value);
        return *this;
    }
    template <std::integral T>
    Line& add(std::string_view key, T value) {
        return add(key, std::string_view(std::to_string(value)));
    }
    std::string str() const { return s_ + "\n"; }

  private:
    std::string s_;
};

}  // namespace

std::optional<std::uint32_t> parse_qpn(std::string_view s) {
    int base = 10;
    if (s.starts_with("0x") || s.starts_with("0X")) {
        s.remove_prefix(2);
        base = 16;
    }
    std::uint32_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (s.empty() || ec != std::errc{} || p != s.data() + s.size() || v > kQpnMax)
        return std::nullopt;
    return v;
}

std::string qp_line(const shm::QpSummary& q) {
    return Line()
        .add("qpn", q.qpn)
        .add("device", q.device[0] != '\0' ? text(q.device) : "-")
        .add("session", q.session)
        .add("pid", q.pid)
        .add("uid", q.uid)
        .add("type", verbs::qp_type_name(q.qp_type))
        .add("state", state_name(q.state))
        .add("dest_qpn", q.dest_qpn)
        .add("peer", peer(q.dgid))
        .str();
}

std::string qp_dump(const shm::QpReply& q, bool all) {
    const shm::QpAttr& a = q.attr;
    std::string out = qp_line(q.summary);
    out += Line("  ")
               .add("path_mtu", verbs::path_mtu_bytes(a.path_mtu))
               .add("sq_psn", hex(a.sq_psn))
               .add("rq_psn", hex(a.rq_psn))
               .add("access", access_names(a.qp_access_flags))
               .str();
    out += Line("  ")
               .add("timeout", a.timeout)
               .add("retry_cnt", a.retry_cnt)
               .add("rnr_retry", a.rnr_retry)
               .add("min_rnr_timer", a.min_rnr_timer)
               .add("max_rd_atomic", a.max_rd_atomic)
               .add("max_dest_rd_atomic", a.max_dest_rd_atomic)
               .str();
    out += Line("  ")
               .add("max_send_wr", a.cap.max_send_wr)
               .add("max_recv_wr", a.cap.max_recv_wr)
               .add("max_send_sge", a.cap.max_send_sge)
               .add("max_recv_sge", a.cap.max_recv_sge)
               .add("max_inline_data", a.cap.max_inline_data)
               .add("sq_sig_all", q.sq_sig_all)
               .add("srqn", q.srqn)
               .str();

    const shm::QpEngineInfo& e = q.engine;
    if (e.running == 0) return out + "engine none (a QP runs from RTR on)\n";
    out += Line()
               .add("engine", text(e.transport))
               .add("failed", e.failed != 0 ? "yes" : "no")
               .add("error", text(e.error))
               .str();
    out += Line("  ")
               .add("next_psn", hex(e.next_psn))
               .add("unacked_psn", hex(e.unacked_psn))
               .add("expected_psn", hex(e.expected_psn))
               .add("msn", e.msn)
               .add("send_wrs_held", e.send_wrs_held)
               .str();

    const std::uint32_t n = std::min<std::uint32_t>(e.ncounters, shm::kMaxQpCounters);
    std::uint32_t nonzero = 0;
    for (std::uint32_t i = 0; i < n; ++i) nonzero += q.counters[i].value != 0 ? 1 : 0;
    out += all ? "counters (all " + std::to_string(n) + ")\n"
               : "counters (" + std::to_string(nonzero) + " of " + std::to_string(n) +
                     " non-zero; -a for all)\n";
    for (std::uint32_t i = 0; i < n; ++i) {
        const shm::NamedValue& c = q.counters[i];
        if (all || c.value != 0) out += Line("  ").add(text(c.name), c.value).str();
    }
    if (e.all_counters > n)
        out += "  (" + std::to_string(e.all_counters - n) + " more not sent by snicd)\n";
    return out;
}

std::optional<std::vector<shm::QpSummary>> fetch_qps(const QpsPager& page) {
    std::vector<shm::QpSummary> rows;
    std::uint32_t first = 0;
    for (;;) {
        const std::optional<shm::QpsReply> r = page(first);
        if (!r || r->listed > shm::kMaxQpsListed) return std::nullopt;
        for (std::uint32_t i = 0; i < r->listed; ++i) {
            const shm::QpSummary& q = r->qps[i];
            if (q.qpn < first || (!rows.empty() && q.qpn <= rows.back().qpn)) return std::nullopt;
            rows.push_back(q);
        }
        if (r->more == 0) return rows;
        if (r->listed == 0 || r->next_qpn <= rows.back().qpn) return std::nullopt;
        first = r->next_qpn;
    }
}

std::string tcp_line(std::uint32_t port_id, const shm::TcpConnInfo& c) {
    auto ep = [](std::uint32_t ip, std::uint16_t port) {
        return net::Ipv4Addr{ip}.to_string() + ":" + std::to_string(port);
    };
    const std::string head = "port " + std::to_string(port_id) + " ";
    if (c.state == shm::kTcpListenState)
        return head + "LISTEN local " + ep(c.local_ip, c.local_port) + " backlog " +
               std::to_string(c.backlog) + " queued " + std::to_string(c.queued) + "\n";
    const auto state = c.state < tcp::kTcpStateNames.size()
                           ? std::string(tcp::kTcpStateNames[c.state])
                           : "?" + std::to_string(c.state);
    auto n = [](std::uint64_t v) { return std::to_string(v); };
    auto us = [](std::uint64_t ns) {
        char b[32];
        std::snprintf(b, sizeof b, "%.1f", static_cast<double>(ns) / 1e3);
        return std::string(b);
    };
    std::string line = head + state + " local " + ep(c.local_ip, c.local_port) + " remote " +
                       ep(c.remote_ip, c.remote_port) + " mss " + n(c.mss) + " cwnd " + n(c.cwnd) +
                       " ssthresh " + n(c.ssthresh) + " srtt " + us(c.srtt_ns) + " rttvar " +
                       us(c.rttvar_ns) + " rto " + us(c.rto_ns) + " retransmits " +
                       n(c.retransmits) + " fast " + n(c.fast_retransmits) + " timeouts " +
                       n(c.timeouts) + " bytes_sent " + n(c.bytes_sent) + " bytes_acked " +
                       n(c.bytes_acked) + " bytes_received " + n(c.bytes_received) + " segs_out " +
                       n(c.segments_out) + " segs_in " + n(c.segments_in) + " snd_wnd " +
                       n(c.snd_wnd) + " rcv_wnd " + n(c.rcv_wnd);
    if ((c.flags & 1) != 0) line += " sack";
    if ((c.flags & 2) != 0) line += " ts";
    if ((c.flags & 4) != 0) line += " recovery";
    return line + "\n";
}

}  // namespace snic::snicctl
