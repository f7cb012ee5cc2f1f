// What operators see of the sessions' QPs, as `rdma resource show qp` shows a kernel RNIC's:
// the listing and the one-QP dump of `snicctl qp` (control ops qps and qp) and of the
// telemetry commands /snic/qps and /snic/qp,<qpn>.
//
// Control thread only: it walks the sessions' QP tables, which only the control thread
// changes. A running QP's engine is read through QpEngine::view() and its counters, figures
// the lcore publishes as it goes; nothing here asks anything of the lcore or waits for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "daemon/verbs/session.h"
#include "shm/control_abi.h"

namespace snic::daemon {

// Who asks, and so what they may see: root (uid 0) every session's QPs, any other user only
// those of sessions whose client has its uid.
struct QpViewer {
    std::uint32_t uid = 0;
    bool sees(const Session& s) const { return uid == 0 || s.peer().uid == uid; }
};

// Every QP `viewer` may see, by increasing QP number.
std::vector<shm::QpSummary> list_qps(std::span<Session* const> sessions,
                                     std::span<const DevicePort> devices, QpViewer viewer);

// One page of a listing sorted by QP number: rows [begin, end), the first with a QP number
// >= first_qpn, at most `max` of them; `more` when rows remain after them, from next_qpn on.
struct QpPage {
    std::size_t begin = 0;
    std::size_t end = 0;
    bool more = false;
    std::uint32_t next_qpn = 0;
};
QpPage qp_page(std::span<const shm::QpSummary> rows, std::uint32_t first_qpn, std::size_t max);

// The qps op's reply: the page of `rows` from first_qpn on.
void fill_qps_reply(std::span<const shm::QpSummary> rows, std::uint32_t first_qpn,
                    shm::QpsReply& out);

// QP `qpn` in full; false when no QP that `viewer` may see has that number.
bool dump_qp(std::span<Session* const> sessions, std::span<const DevicePort> devices,
             QpViewer viewer, std::uint32_t qpn, shm::QpReply& out);

}  // namespace snic::daemon
