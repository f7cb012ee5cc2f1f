#include "proto/verbs/qp_state.h"

#include <array>

namespace snic::verbs {

namespace {

using namespace qp_attr;

// One cell of the table: the rule for each of RC, UC, UD (in that order).
struct Row {
    bool allowed = false;
    std::array<std::uint32_t, 3> required{};
    std::array<std::uint32_t, 3> optional{};
};
using Table = std::array<std::array<Row, kQpStates>, kQpStates>;

constexpr std::size_t idx(QpState s) {
    return static_cast<std::size_t>(s);
}
constexpr std::size_t idx(QpType t) {
    return static_cast<std::size_t>(t) - 2;
}

// Per type: {RC, UC, UD}.
constexpr Row allow(std::array<std::uint32_t, 3> required, std::array<std::uint32_t, 3> optional) {
    return Row{true, required, optional};
}
constexpr Row allow_plain() {
    return Row{true, {}, {}};
}

// IBA vol 1 §11.2.4.2 (Modify QP), the attributes by transition and service type; the same
// facts as the Linux RDMA core's transition table (ib_modify_qp_is_ok), with one choice of
// ours: Modify QP may move a QP to Error from every state, Reset included, as the IBA state
// diagram draws it (the Linux table leaves Reset -> Error out). Reset is reachable from
// every state.
constexpr Table make_table() {
    Table t{};
    constexpr auto kReset = QpState::reset, kInit = QpState::init, kRtr = QpState::rtr,
                   kRts = QpState::rts, kSqd = QpState::sqd, kSqe = QpState::sqe,
                   kErr = QpState::err;

    for (std::size_t s = 0; s < kQpStates; ++s) {
        t[s][idx(kReset)] = allow_plain();
        t[s][idx(kErr)] = allow_plain();
    }

    // RESET -> INIT: the port, partition and (connected) remote access or (datagram) Q_Key.
    t[idx(kReset)][idx(kInit)] = allow({pkey_index | port | access_flags,
                                        pkey_index | port | access_flags, pkey_index | port | qkey},
                                       {0, 0, 0});
    // INIT -> INIT: the same attributes, all optional.
    t[idx(kInit)][idx(kInit)] =
        allow({0, 0, 0}, {pkey_index | port | access_flags, pkey_index | port | access_flags,
                          pkey_index | port | qkey});
    // INIT -> RTR: the path and the receive side.
    t[idx(kInit)][idx(kRtr)] =
        allow({av | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic | min_rnr_timer,
               av | path_mtu | dest_qpn | rq_psn, 0},
              {alt_path | access_flags | pkey_index, alt_path | access_flags | pkey_index,
               pkey_index | qkey});
    // RTR -> RTS: the send side.
    t[idx(kRtr)][idx(kRts)] =
        allow({timeout | retry_cnt | rnr_retry | sq_psn | max_qp_rd_atomic, sq_psn, sq_psn},
              {cur_state | alt_path | access_flags | min_rnr_timer | path_mig_state,
               cur_state | alt_path | access_flags | path_mig_state, cur_state | qkey});
    // RTS -> RTS: tuning a running QP.
    t[idx(kRts)][idx(kRts)] =
        allow({0, 0, 0}, {cur_state | access_flags | alt_path | path_mig_state | min_rnr_timer,
                          cur_state | access_flags | alt_path | path_mig_state, cur_state | qkey});
    // RTS -> SQD: drain the send queue, optionally with an event when drained.
    t[idx(kRts)][idx(kSqd)] =
        allow({0, 0, 0}, {en_sqd_async_notify, en_sqd_async_notify, en_sqd_async_notify});
    // SQD -> RTS: resume.
    t[idx(kSqd)][idx(kRts)] =
        allow({0, 0, 0}, {cur_state | alt_path | access_flags | min_rnr_timer | path_mig_state,
                          cur_state | alt_path | access_flags | path_mig_state, cur_state | qkey});
    // SQD -> SQD: change the path while drained.
    t[idx(kSqd)][idx(kSqd)] =
        allow({0, 0, 0},
              {port | av | timeout | retry_cnt | rnr_retry | max_qp_rd_atomic | max_dest_rd_atomic |
                   alt_path | access_flags | pkey_index | min_rnr_timer | path_mig_state,
               av | alt_path | access_flags | pkey_index | path_mig_state, pkey_index | qkey});
    // SQE -> RTS: recover from a send queue error (UC, UD; RC goes to ERR instead).
    t[idx(kSqe)][idx(kRts)] = allow({0, 0, 0}, {0, cur_state | access_flags, cur_state | qkey});
    return t;
}

constexpr Table kTable = make_table();

// A few facts checked at compile time; the unit tests check the rest rule by rule.
static_assert(kTable[idx(QpState::reset)][idx(QpState::init)].allowed);
static_assert(!kTable[idx(QpState::reset)][idx(QpState::rts)].allowed);
static_assert(!kTable[idx(QpState::init)][idx(QpState::rts)].allowed);
static_assert(kTable[idx(QpState::sqe)][idx(QpState::err)].allowed);

}  // namespace

const char* qp_state_name(QpState s) {
    constexpr const char* kNames[kQpStates] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return idx(s) < kQpStates ? kNames[idx(s)] : "?";
}

const char* qp_type_name(std::uint32_t ibv_qp_type) {
    const auto t = qp_type_from(ibv_qp_type);
    if (!t) return "?";
    constexpr const char* kNames[3] = {"RC", "UC", "UD"};
    return kNames[idx(*t)];
}

QpTransition qp_transition(QpState cur, QpState next, QpType type) {
    if (idx(cur) >= kQpStates || idx(next) >= kQpStates || idx(type) >= 3) return {};
    const Row& r = kTable[idx(cur)][idx(next)];
    return {r.allowed, r.required[idx(type)], r.optional[idx(type)]};
}

bool qp_modify_ok(QpState cur, QpState next, QpType type, std::uint32_t mask) {
    if ((mask & cur_state) != 0 && cur != QpState::rtr && cur != QpState::rts &&
        cur != QpState::sqd && cur != QpState::sqe)
        return false;
    const QpTransition t = qp_transition(cur, next, type);
    if (!t.allowed) return false;
    if ((mask & t.required) != t.required) return false;
    return (mask & ~(t.required | t.optional | state)) == 0;
}

}  // namespace snic::verbs
