#include "daemon/verbs/qp_report.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace snic::daemon {

namespace {

// Copies `s` into a NUL-terminated field, cut to fit.
template <std::size_t N>
void copy_text(char (&dst)[N], std::string_view s) {
    const std::size_t n = std::min(s.size(), N - 1);
    std::memcpy(dst, s.data(), n);
    dst[n] = '\0';
}

// The state a client would be told: ERR once the engine failed by itself, even before the
// session next syncs the QP's state (Session::sync_state, on query and modify).
verbs::QpState state_of(const Qp& qp) {
    return qp.engine && qp.engine->failed() ? verbs::QpState::err : qp.state;
}

shm::QpSummary summary_of(const Session& s, const Qp& qp, std::span<const DevicePort> devices) {
    shm::QpSummary r{};
    r.qpn = qp.qpn.get();
    r.session = s.id();
    r.pid = s.peer().pid;
    r.uid = s.peer().uid;
    if (const DevicePort* p = s.port()) {
        for (std::size_t i = 0; i < devices.size(); ++i)
            if (&devices[i] == p) r.port_index = static_cast<std::uint32_t>(i);
        copy_text(r.device, s.device_name());
    }
    r.qp_type = static_cast<std::uint32_t>(qp.type);
    r.state = static_cast<std::uint32_t>(state_of(qp));
    r.dest_qpn = qp.attr.dest_qp_num;
    std::memcpy(r.dgid, qp.attr.ah_attr.dgid, sizeof r.dgid);
    return r;
}

// The engine's figures and counters, when one runs the QP.
void engine_of(const Session& s, const Qp& qp, shm::QpReply& out) {
    shm::QpEngineInfo& e = out.engine;
    if (!qp.engine) {
        copy_text(e.error, "none");
        return;
    }
    const QpEngineView v = qp.engine->view();
    e.running = 1;
    e.failed = v.failed ? 1 : 0;
    if (s.transport() != nullptr) copy_text(e.transport, s.transport()->name());
    copy_text(e.error, v.error.empty() ? "none" : v.error);
    e.next_psn = v.next_psn;
    e.unacked_psn = v.unacked_psn;
    e.expected_psn = v.expected_psn;
    e.msn = v.msn;
    e.send_wrs_held = v.send_wrs_held;
    qp.engine->for_each_counter(
        [](void* ctx, NamedCounter c) {
            auto& r = *static_cast<shm::QpReply*>(ctx);
            if (r.engine.ncounters < shm::kMaxQpCounters) {
                shm::NamedValue& nv = r.counters[r.engine.ncounters++];
                copy_text(nv.name, c.name);
                nv.value = c.value;
            }
            ++r.engine.all_counters;
        },
        &out);
}

}  // namespace

std::vector<shm::QpSummary> list_qps(std::span<Session* const> sessions,
                                     std::span<const DevicePort> devices, QpViewer viewer) {
    std::vector<shm::QpSummary> rows;
    for (const Session* s : sessions) {
        if (!viewer.sees(*s)) continue;
        s->for_each_qp([&](const Qp& qp) { rows.push_back(summary_of(*s, qp, devices)); });
    }
    std::sort(rows.begin(), rows.end(),
              [](const shm::QpSummary& a, const shm::QpSummary& b) { return a.qpn < b.qpn; });
    return rows;
}

QpPage qp_page(std::span<const shm::QpSummary> rows, std::uint32_t first_qpn, std::size_t max) {
    QpPage p;
    p.begin = static_cast<std::size_t>(
        std::partition_point(rows.begin(), rows.end(),
                             [first_qpn](const shm::QpSummary& r) { return r.qpn < first_qpn; }) -
        rows.begin());
    p.end = p.begin + std::min(max, rows.size() - p.begin);
    p.more = p.end < rows.size();
    p.next_qpn = p.end > p.begin ? rows[p.end - 1].qpn + 1 : first_qpn;
    return p;
}

void fill_qps_reply(std::span<const shm::QpSummary> rows, std::uint32_t first_qpn,
                    shm::QpsReply& out) {
    out = {};
    const QpPage p = qp_page(rows, first_qpn, shm::kMaxQpsListed);
    out.nqps = static_cast<std::uint32_t>(rows.size());
    out.listed = static_cast<std::uint32_t>(p.end - p.begin);
    out.more = p.more ? 1 : 0;
    out.next_qpn = p.next_qpn;
    std::copy(rows.begin() + static_cast<std::ptrdiff_t>(p.begin),
              rows.begin() + static_cast<std::ptrdiff_t>(p.end), out.qps);
}

bool dump_qp(std::span<Session* const> sessions, std::span<const DevicePort> devices,
             QpViewer viewer, std::uint32_t qpn, shm::QpReply& out) {
    bool found = false;
    for (const Session* s : sessions) {
        if (found || !viewer.sees(*s)) continue;
        s->for_each_qp([&](const Qp& qp) {
            if (found || qp.qpn.get() != qpn) return;
            found = true;
            out = {};
            out.summary = summary_of(*s, qp, devices);
            out.attr = qp.attr;
            out.attr.qp_state = out.summary.state;
            out.attr.cur_qp_state = out.summary.state;
            out.attr.cap = qp.cap;
            out.sq_sig_all = qp.sq_sig_all;
            out.srqn = qp.srq ? qp.srq->srqn.get() : 0;
            engine_of(*s, qp, out);
        });
    }
    return found;
}

}  // namespace snic::daemon
