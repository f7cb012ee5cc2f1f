#include "daemon/telemetry/telemetry.h"

#include <rte_telemetry.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "daemon/iwarp/tcp_service.h"
#include "daemon/port/port.h"
#include "daemon/port/xdp_maps.h"
#include "daemon/roce/gsi.h"
#include "daemon/verbs/transport.h"
#include "proto/net/addr.h"
#include "proto/verbs/qp_state.h"

namespace snic::daemon {

namespace {

// DPDK telemetry callbacks take no context: they read this, published once.
std::atomic<const TelemetryInfo*> g_info{nullptr};

// The QP numbers /snic/qps lists in all: their text fits DPDK's 16 KiB reply with room to
// spare (it lists no more than 512 per port either, DPDK's limit for one array).
constexpr std::size_t kMaxQpsListed = 1024;

// A number given as a command's parameter: decimal, or hexadecimal after 0x (QP numbers as
// the verbs tools print them).
std::optional<std::uint32_t> parse_number(const char* params) {
    if (params == nullptr) return std::nullopt;
    std::string_view s(params);
    int base = 10;
    if (s.starts_with("0x") || s.starts_with("0X")) {
        s.remove_prefix(2);
        base = 16;
    }
    std::uint32_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (s.empty() || ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
}

// The index in info.ports of the port whose id is the parameter.
std::optional<std::size_t> find_port(const TelemetryInfo& info, const char* params) {
    const auto id = parse_number(params);
    if (!id) return std::nullopt;
    for (std::size_t i = 0; i < info.ports.size(); ++i)
        if (info.ports[i]->id() == *id) return i;
    return std::nullopt;
}

// A dict key: `name` cut to DPDK's limit, NUL-terminated.
struct Key {
    explicit Key(std::string_view name) {
        const std::size_t n = std::min(name.size(), sizeof s - 1);
        std::memcpy(s, name.data(), n);
        s[n] = '\0';
    }
    char s[RTE_TEL_MAX_STRING_LEN];
};

void add_u64(rte_tel_data* d, std::string_view name, std::uint64_t v) {
    rte_tel_data_add_dict_u64(d, Key(name).s, v);
}

// A fixed-size text field of the control ABI, up to its NUL or its end.
template <std::size_t N>
void add_text(rte_tel_data* d, const char* name, const char (&field)[N]) {
    rte_tel_data_add_dict_string(d, name, std::string(field, strnlen(field, N)).c_str());
}

int cmd_info(const char*, const char*, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_string(d, "name", info->name.c_str());
    rte_tel_data_add_dict_string(d, "version", SNIC_VERSION);
    rte_tel_data_add_dict_int(d, "pid", ::getpid());
    rte_tel_data_add_dict_int(d, "ports", static_cast<int>(info->ports.size()));
    return 0;
}

int cmd_ports(const char*, const char*, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    rte_tel_data_start_array(d, RTE_TEL_INT_VAL);
    for (const Port* p : info->ports) rte_tel_data_add_array_int(d, p->id());
    return 0;
}

int cmd_port_stats(const char*, const char* params, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    const auto i = find_port(*info, params);
    if (!i) return -EINVAL;
    const Port& port = *info->ports[*i];
    rte_tel_data_start_dict(d);
    add_u64(d, "lcore", port.lcore());
    add_u64(d, "queues", port.lanes().size());
    for_each_port_counter(port,
                          [d](std::string_view name, std::uint64_t v) { add_u64(d, name, v); });
    // A port of several queues: each lane's lcore and traffic, as "lane<queue>".
    const auto lanes = port.lanes();
    for (std::size_t q = 0; lanes.size() > 1 && q < lanes.size(); ++q) {
        rte_tel_data* lane = rte_tel_data_alloc();
        if (lane == nullptr) return -ENOMEM;
        rte_tel_data_start_dict(lane);
        const PortCounters& c = lanes[q]->counters();
        add_u64(lane, "lcore", lanes[q]->lcore());
        add_u64(lane, "qps", lanes[q]->lane_qps());
        add_u64(lane, "rx_packets", c.rx_packets.get());
        add_u64(lane, "tx_packets", c.tx_packets.get());
        add_u64(lane, "roce_dispatched", c.roce_dispatched.get());
        add_u64(lane, "tcp_dispatched", c.tcp_dispatched.get());
        add_u64(lane, "rx_to_lanes", c.rx_to_lanes.get());
        add_u64(lane, "rx_from_lanes", c.rx_from_lanes.get());
        add_u64(lane, "rx_lane_full", c.rx_lane_full.get());
        rte_tel_data_add_dict_container(d, Key("lane" + std::to_string(q)).s, lane, 0);
    }
    // A shared-address port: what its XDP program sent snicd and what it left to the kernel.
    if (*i < info->xdp.size() && info->xdp[*i] != nullptr) {
        if (auto c = info->xdp[*i]->counts()) {
            add_u64(d, "xdp_roce", c->roce);
            add_u64(d, "xdp_tcp", c->tcp);
            add_u64(d, "xdp_passed", c->passed);
            add_u64(d, "xdp_no_socket", c->no_sock);
        }
    }
    return 0;
}

// /snic/<transport>_stats,<port id>: the counters of the port's transport of that name.
constexpr std::string_view kCmdPrefix = "/snic/";
constexpr std::string_view kStatsSuffix = "_stats";

int cmd_transport_stats(const char* cmd, const char* params, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    std::string_view name(cmd);
    if (!name.starts_with(kCmdPrefix) || !name.ends_with(kStatsSuffix)) return -EINVAL;
    name = name.substr(kCmdPrefix.size(), name.size() - kCmdPrefix.size() - kStatsSuffix.size());
    const auto i = find_port(*info, params);
    const std::vector<const Transport*>& list = name == "iwarp" ? info->iwarp : info->transports;
    if (!i || *i >= list.size()) return -EINVAL;
    const Transport* t = list[*i];
    if (t == nullptr || t->name() != name) return -EINVAL;
    // Lane 0's counters, plus those of the port's other lanes.
    CounterSum sum;
    const auto add = [](void* ctx, NamedCounter c) {
        static_cast<CounterSum*>(ctx)->add(c.name, c.value);
    };
    t->for_each_counter(add, &sum);
    const auto& others = &list == &info->transports ? info->roce_lanes : info->iwarp_lanes;
    if (*i < others.size()) {
        for (const Transport* lane : others[*i]) {
            sum.next();
            lane->for_each_counter(add, &sum);
        }
    }
    rte_tel_data_start_dict(d);
    sum.for_each([d](std::string_view name, std::uint64_t v) { add_u64(d, name, v); });
    return 0;
}

// /snic/gsi_stats,<port id>: the port's QP1 bridge: CM MADs in and out, and what was lost.
int cmd_gsi_stats(const char*, const char* params, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    const auto i = find_port(*info, params);
    if (!i || *i >= info->gsi.size() || info->gsi[*i] == nullptr) return -EINVAL;
    rte_tel_data_start_dict(d);
    info->gsi[*i]->for_each_counter(
        [d](std::string_view name, std::uint64_t v) { add_u64(d, name, v); });
    return 0;
}

// /snic/qps: {"<port id>": [QP numbers], ..., "unlisted": N}.
int cmd_qps(const char*, const char*, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    if (!info->qps) return -ENOTSUP;
    const auto rows = info->qps();
    if (!rows) return -rows.error().code;

    struct Free {
        void operator()(rte_tel_data* a) const { rte_tel_data_free(a); }
    };
    std::vector<std::unique_ptr<rte_tel_data, Free>> per_port;
    std::vector<std::size_t> counts(info->ports.size(), 0);
    for (std::size_t i = 0; i < info->ports.size(); ++i) {
        per_port.emplace_back(rte_tel_data_alloc());
        if (!per_port.back()) return -ENOMEM;
        rte_tel_data_start_array(per_port.back().get(), RTE_TEL_U64_VAL);
    }
    std::size_t listed = 0;
    for (const shm::QpSummary& r : *rows) {
        const std::size_t i = r.port_index;
        if (i >= per_port.size() || listed == kMaxQpsListed ||
            counts[i] == RTE_TEL_MAX_ARRAY_ENTRIES)
            continue;
        rte_tel_data_add_array_u64(per_port[i].get(), r.qpn);
        ++counts[i];
        ++listed;
    }
    rte_tel_data_start_dict(d);
    for (std::size_t i = 0; i < per_port.size(); ++i) {
        const Key key(std::to_string(info->ports[i]->id()));
        if (rte_tel_data_add_dict_container(d, key.s, per_port[i].get(), 0) == 0)
            per_port[i].release();  // the reply owns it now
    }
    add_u64(d, "unlisted", rows->size() - listed);
    return 0;
}

// /snic/qp,<qpn>: one QP in full (what `snicctl qp QPN` shows).
void add_qp(rte_tel_data* d, const TelemetryInfo& info, const shm::QpReply& q) {
    const shm::QpSummary& s = q.summary;
    const shm::QpAttr& a = q.attr;
    add_u64(d, "qpn", s.qpn);
    if (s.port_index < info.ports.size()) add_u64(d, "port", info.ports[s.port_index]->id());
    add_text(d, "device", s.device);
    add_u64(d, "session", s.session);
    rte_tel_data_add_dict_int(d, "pid", s.pid);
    add_u64(d, "uid", s.uid);
    rte_tel_data_add_dict_string(d, "type", verbs::qp_type_name(s.qp_type));
    const auto state = verbs::qp_state_from(s.state);
    rte_tel_data_add_dict_string(d, "state", state ? verbs::qp_state_name(*state) : "?");
    add_u64(d, "dest_qpn", s.dest_qpn);
    rte_tel_data_add_dict_string(d, "peer", net::gid_to_string(s.dgid).c_str());
    add_u64(d, "path_mtu", verbs::path_mtu_bytes(a.path_mtu));
    add_u64(d, "sq_psn", a.sq_psn);
    add_u64(d, "rq_psn", a.rq_psn);
    add_u64(d, "timeout", a.timeout);
    add_u64(d, "retry_cnt", a.retry_cnt);
    add_u64(d, "rnr_retry", a.rnr_retry);
    add_u64(d, "min_rnr_timer", a.min_rnr_timer);
    add_u64(d, "max_rd_atomic", a.max_rd_atomic);
    add_u64(d, "max_dest_rd_atomic", a.max_dest_rd_atomic);
    add_u64(d, "access_flags", a.qp_access_flags);
    add_u64(d, "max_send_wr", a.cap.max_send_wr);
    add_u64(d, "max_recv_wr", a.cap.max_recv_wr);
    add_u64(d, "max_send_sge", a.cap.max_send_sge);
    add_u64(d, "max_recv_sge", a.cap.max_recv_sge);
    add_u64(d, "max_inline_data", a.cap.max_inline_data);
    add_u64(d, "sq_sig_all", q.sq_sig_all);
    add_u64(d, "srqn", q.srqn);
    const shm::QpEngineInfo& e = q.engine;
    if (e.running == 0) {
        rte_tel_data_add_dict_string(d, "engine", "none");
        return;
    }
    add_text(d, "engine", e.transport);
    add_u64(d, "failed", e.failed);
    add_text(d, "error", e.error);
    add_u64(d, "next_psn", e.next_psn);
    add_u64(d, "unacked_psn", e.unacked_psn);
    add_u64(d, "expected_psn", e.expected_psn);
    add_u64(d, "msn", e.msn);
    add_u64(d, "send_wrs_held", e.send_wrs_held);
    for (std::uint32_t i = 0; i < e.ncounters && i < shm::kMaxQpCounters; ++i) {
        const shm::NamedValue& c = q.counters[i];
        add_u64(d, std::string_view(c.name, strnlen(c.name, sizeof c.name)), c.value);
    }
}

int cmd_qp(const char*, const char* params, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    if (!info->qp) return -ENOTSUP;
    const auto qpn = parse_number(params);
    if (!qpn) return -EINVAL;
    const auto q = info->qp(*qpn);
    if (!q) return -q.error().code;
    rte_tel_data_start_dict(d);
    add_qp(d, *info, *q);
    return 0;
}

// /snic/tcp_stats,<port id>: the counters of snic's TCP on that port.
int cmd_tcp_stats(const char*, const char* params, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    const auto i = find_port(*info, params);
    if (!i || *i >= info->tcp.size() || info->tcp[*i].empty()) return -EINVAL;
    const std::vector<const TcpService*>& lanes = info->tcp[*i];
    rte_tel_data_start_dict(d);
    for_each_tcp_counter(lanes,
                         [d](std::string_view name, std::uint64_t v) { add_u64(d, name, v); });
    // A port of several queues: each lane's TCP's segments and connections, as "lane<queue>".
    for (std::size_t q = 0; lanes.size() > 1 && q < lanes.size(); ++q) {
        rte_tel_data* lane = rte_tel_data_alloc();
        if (lane == nullptr) return -ENOMEM;
        rte_tel_data_start_dict(lane);
        lanes[q]->for_each_counter([lane](std::string_view name, std::uint64_t v) {
            if (name == "rx_segments" || name == "tx_segments" || name == "loopback" ||
                name == "active_opens" || name == "passive_opens" || name == "established" ||
                name == "listeners")
                add_u64(lane, name, v);
        });
        rte_tel_data_add_dict_container(d, Key("lane" + std::to_string(q)).s, lane, 0);
    }
    return 0;
}

// /snic/tcp_conns,<port id>: {"conn_N": {state, local, remote, cwnd, srtt_us, ...}, ...}, what
// `snicctl tcp` shows (at most 64 rows: DPDK's reply is 16 KiB).
int cmd_tcp_conns(const char*, const char* params, rte_tel_data* d) {
    const TelemetryInfo* info = g_info.load();
    if (info == nullptr) return -EAGAIN;
    if (!info->tcp_rows) return -ENOTSUP;
    const auto i = find_port(*info, params);
    if (!i) return -EINVAL;
    const auto rows = info->tcp_rows(static_cast<std::uint32_t>(*i));
    if (!rows) return -ETIMEDOUT;
    rte_tel_data_start_dict(d);
    std::size_t n = 0;
    for (const shm::TcpConnInfo& c : *rows) {
        if (n++ == 64) break;
        rte_tel_data* row = rte_tel_data_alloc();
        if (row == nullptr) return -ENOMEM;
        rte_tel_data_start_dict(row);
        const bool listen = c.state == shm::kTcpListenState;
        rte_tel_data_add_dict_string(row, "state",
                                     listen
                                         ? "LISTEN"
                                         : std::string(tcp::state_name(static_cast<tcp::TcpState>(
                                                           std::min<std::uint8_t>(c.state, 9))))
                                               .c_str());
        add_u64(row, "cwnd", c.cwnd);
        add_u64(row, "ssthresh", c.ssthresh);
        add_u64(row, "srtt_us", c.srtt_ns / 1000);
        add_u64(row, "rttvar_us", c.rttvar_ns / 1000);
        add_u64(row, "rto_us", c.rto_ns / 1000);
        add_u64(row, "mss", c.mss);
        add_u64(row, "bytes_sent", c.bytes_sent);
        add_u64(row, "bytes_acked", c.bytes_acked);
        add_u64(row, "bytes_received", c.bytes_received);
        add_u64(row, "retransmits", c.retransmits);
        add_u64(row, "fast_retransmits", c.fast_retransmits);
        add_u64(row, "timeouts", c.timeouts);
        rte_tel_data_add_dict_string(
            row, "local",
            (net::Ipv4Addr{c.local_ip}.to_string() + ":" + std::to_string(c.local_port)).c_str());
        if (!listen)
            rte_tel_data_add_dict_string(
                row, "remote",
                (net::Ipv4Addr{c.remote_ip}.to_string() + ":" + std::to_string(c.remote_port))
                    .c_str());
        // Keys may hold letters, digits, '_' and '/' only.
        const std::string key = (listen ? "listener_" : "conn_") + std::to_string(n - 1);
        if (rte_tel_data_add_dict_container(d, Key(key).s, row, 0) != 0) rte_tel_data_free(row);
    }
    return 0;
}

}  // namespace

void register_telemetry(const TelemetryInfo& info) {
    g_info.store(&info);
    rte_telemetry_register_cmd("/snic/info", cmd_info, "snicd name, version, pid, port count");
    rte_telemetry_register_cmd("/snic/ports", cmd_ports, "snicd port ids");
    rte_telemetry_register_cmd("/snic/port_stats", cmd_port_stats,
                               "snicd port counters and drops by reason. Parameters: int port_id");
    std::vector<std::string_view> names;  // one command per transport, not per port
    std::vector<const Transport*> all = info.transports;
    all.insert(all.end(), info.iwarp.begin(), info.iwarp.end());
    for (const Transport* t : all) {
        if (t == nullptr || std::find(names.begin(), names.end(), t->name()) != names.end())
            continue;
        names.push_back(t->name());
        const std::string cmd =
            std::string(kCmdPrefix) + std::string(t->name()) + std::string(kStatsSuffix);
        const std::string help = "snicd " + std::string(t->name()) +
                                 " transport counters and drops by reason. Parameters: int port_id";
        rte_telemetry_register_cmd(cmd.c_str(), cmd_transport_stats, help.c_str());
    }
    rte_telemetry_register_cmd("/snic/gsi_stats", cmd_gsi_stats,
                               "snicd QP1 (CM MADs) counters. Parameters: int port_id");
    rte_telemetry_register_cmd("/snic/tcp_stats", cmd_tcp_stats,
                               "snicd TCP counters of a port. Parameters: int port_id");
    rte_telemetry_register_cmd("/snic/tcp_conns", cmd_tcp_conns,
                               "snicd TCP listeners and connections of a port (state, cwnd, srtt, "
                               "retransmits). Parameters: int port_id");
    rte_telemetry_register_cmd("/snic/qps", cmd_qps,
                               "snicd QP numbers by port id, and how many were not listed");
    rte_telemetry_register_cmd("/snic/qp", cmd_qp,
                               "snicd QP state, attributes, engine and counters. Parameters: "
                               "int qpn (decimal or 0x hex)");
}

void unregister_telemetry() {
    g_info.store(nullptr);
}

}  // namespace snic::daemon
