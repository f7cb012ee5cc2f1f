// The QP state machine table (proto/roce/qp_state): one test per rule of IBA vol 1
// §11.2.4.2, and the values checked against libibverbs' own enums.
#include "proto/verbs/qp_state.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <set>
#include <tuple>

namespace snic::verbs {
namespace {

using namespace qp_attr;

constexpr QpType kAllTypes[] = {QpType::rc, QpType::uc, QpType::ud};
constexpr QpState kAllStates[] = {QpState::reset, QpState::init, QpState::rtr, QpState::rts,
                                  QpState::sqd,   QpState::sqe,  QpState::err};

// Every attribute bit a Modify QP may name.
constexpr std::uint32_t kAllBits =
    state | cur_state | en_sqd_async_notify | access_flags | pkey_index | port | qkey | av |
    path_mtu | timeout | retry_cnt | rnr_retry | rq_psn | max_qp_rd_atomic | alt_path |
    min_rnr_timer | sq_psn | max_dest_rd_atomic | path_mig_state | cap | dest_qpn | rate_limit;

// The mask must hold `required` exactly, with nothing missing: drop any one bit and it fails.
void expect_exactly_required(QpState cur, QpState next, QpType type, std::uint32_t required) {
    SCOPED_TRACE(::testing::Message()
                 << qp_state_name(cur) << " -> " << qp_state_name(next) << " type " << int(type));
    const QpTransition t = qp_transition(cur, next, type);
    EXPECT_TRUE(t.allowed);
    EXPECT_EQ(t.required, required);
    EXPECT_TRUE(qp_modify_ok(cur, next, type, state | required));
    for (std::uint32_t bit = 1; bit != 0; bit <<= 1)
        if ((required & bit) != 0) {
            EXPECT_FALSE(qp_modify_ok(cur, next, type, state | (required & ~bit)));
        }
}

TEST(QpState, values_are_those_of_libibverbs) {
    static_assert(static_cast<int>(QpState::reset) == IBV_QPS_RESET);
    static_assert(static_cast<int>(QpState::init) == IBV_QPS_INIT);
    static_assert(static_cast<int>(QpState::rtr) == IBV_QPS_RTR);
    static_assert(static_cast<int>(QpState::rts) == IBV_QPS_RTS);
    static_assert(static_cast<int>(QpState::sqd) == IBV_QPS_SQD);
    static_assert(static_cast<int>(QpState::sqe) == IBV_QPS_SQE);
    static_assert(static_cast<int>(QpState::err) == IBV_QPS_ERR);
    static_assert(static_cast<int>(QpType::rc) == IBV_QPT_RC);
    static_assert(static_cast<int>(QpType::uc) == IBV_QPT_UC);
    static_assert(static_cast<int>(QpType::ud) == IBV_QPT_UD);
    static_assert(state == IBV_QP_STATE && cur_state == IBV_QP_CUR_STATE);
    static_assert(en_sqd_async_notify == IBV_QP_EN_SQD_ASYNC_NOTIFY);
    static_assert(access_flags == IBV_QP_ACCESS_FLAGS && pkey_index == IBV_QP_PKEY_INDEX);
    static_assert(port == IBV_QP_PORT && qkey == IBV_QP_QKEY && av == IBV_QP_AV);
    static_assert(path_mtu == IBV_QP_PATH_MTU && timeout == IBV_QP_TIMEOUT);
    static_assert(retry_cnt == IBV_QP_RETRY_CNT && rnr_retry == IBV_QP_RNR_RETRY);
    static_assert(rq_psn == IBV_QP_RQ_PSN && max_qp_rd_atomic == IBV_QP_MAX_QP_RD_ATOMIC);
    static_assert(alt_path == IBV_QP_ALT_PATH && min_rnr_timer == IBV_QP_MIN_RNR_TIMER);
    static_assert(sq_psn == IBV_QP_SQ_PSN && max_dest_rd_atomic == IBV_QP_MAX_DEST_RD_ATOMIC);
    static_assert(path_mig_state == IBV_QP_PATH_MIG_STATE && cap == IBV_QP_CAP);
    static_assert(dest_qpn == IBV_QP_DEST_QPN && rate_limit == IBV_QP_RATE_LIMIT);
    SUCCEED();
}

TEST(QpState, verbs_values_convert_and_others_are_refused) {
    EXPECT_EQ(qp_state_from(IBV_QPS_RTS), QpState::rts);
    EXPECT_EQ(qp_state_from(IBV_QPS_UNKNOWN), std::nullopt);
    EXPECT_EQ(qp_state_from(0xffffffffu), std::nullopt);
    EXPECT_EQ(qp_type_from(IBV_QPT_UD), QpType::ud);
    EXPECT_EQ(qp_type_from(IBV_QPT_RAW_PACKET), std::nullopt);
    EXPECT_EQ(qp_type_from(IBV_QPT_XRC_SEND), std::nullopt);
    EXPECT_EQ(qp_type_from(0), std::nullopt);
}

TEST(QpState, reset_to_init_requires_pkey_port_access_for_rc) {
    expect_exactly_required(QpState::reset, QpState::init, QpType::rc,
                            pkey_index | port | access_flags);
}

TEST(QpState, reset_to_init_requires_pkey_port_access_for_uc) {
    expect_exactly_required(QpState::reset, QpState::init, QpType::uc,
                            pkey_index | port | access_flags);
}

TEST(QpState, reset_to_init_requires_pkey_port_qkey_for_ud) {
    expect_exactly_required(QpState::reset, QpState::init, QpType::ud, pkey_index | port | qkey);
    EXPECT_FALSE(qp_modify_ok(QpState::reset, QpState::init, QpType::ud,
                              state | pkey_index | port | qkey | access_flags));
}

TEST(QpState, reset_to_init_allows_nothing_more) {
    const std::uint32_t rc = state | pkey_index | port | access_flags;
    EXPECT_FALSE(qp_modify_ok(QpState::reset, QpState::init, QpType::rc, rc | qkey));
    EXPECT_FALSE(qp_modify_ok(QpState::reset, QpState::init, QpType::rc, rc | av));
    EXPECT_FALSE(qp_modify_ok(QpState::reset, QpState::init, QpType::rc, rc | cap));
}

TEST(QpState, init_to_init_takes_the_reset_to_init_attributes_as_optional) {
    for (QpType t : {QpType::rc, QpType::uc}) {
        EXPECT_TRUE(qp_modify_ok(QpState::init, QpState::init, t, state));
        EXPECT_TRUE(qp_modify_ok(QpState::init, QpState::init, t, state | port | access_flags));
        EXPECT_FALSE(qp_modify_ok(QpState::init, QpState::init, t, state | qkey));
    }
    EXPECT_TRUE(qp_modify_ok(QpState::init, QpState::init, QpType::ud, state | qkey | pkey_index));
    EXPECT_FALSE(qp_modify_ok(QpState::init, QpState::init, QpType::ud, state | access_flags));
}

TEST(QpState, init_to_rtr_requires_av_mtu_dest_qpn_rq_psn_rd_atomic_rnr_timer_for_rc) {
    expect_exactly_required(QpState::init, QpState::rtr, QpType::rc,
                            av | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic | min_rnr_timer);
    EXPECT_TRUE(qp_modify_ok(QpState::init, QpState::rtr, QpType::rc,
                             state | av | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic |
                                 min_rnr_timer | access_flags | pkey_index | alt_path));
}

TEST(QpState, init_to_rtr_requires_av_mtu_dest_qpn_rq_psn_for_uc) {
    expect_exactly_required(QpState::init, QpState::rtr, QpType::uc,
                            av | path_mtu | dest_qpn | rq_psn);
    EXPECT_FALSE(qp_modify_ok(QpState::init, QpState::rtr, QpType::uc,
                              state | av | path_mtu | dest_qpn | rq_psn | max_dest_rd_atomic));
}

TEST(QpState, init_to_rtr_requires_nothing_for_ud_and_allows_pkey_qkey) {
    expect_exactly_required(QpState::init, QpState::rtr, QpType::ud, 0);
    EXPECT_TRUE(qp_modify_ok(QpState::init, QpState::rtr, QpType::ud, state | pkey_index | qkey));
    EXPECT_FALSE(qp_modify_ok(QpState::init, QpState::rtr, QpType::ud, state | av));
}

TEST(QpState, rtr_to_rts_requires_sq_psn_timeout_retry_rnr_retry_max_rd_atomic) {
    expect_exactly_required(QpState::rtr, QpState::rts, QpType::rc,
                            sq_psn | timeout | retry_cnt | rnr_retry | max_qp_rd_atomic);
    EXPECT_TRUE(qp_modify_ok(QpState::rtr, QpState::rts, QpType::rc,
                             state | sq_psn | timeout | retry_cnt | rnr_retry | max_qp_rd_atomic |
                                 cur_state | access_flags | min_rnr_timer | path_mig_state));
}

TEST(QpState, rtr_to_rts_requires_sq_psn_for_uc_and_ud) {
    expect_exactly_required(QpState::rtr, QpState::rts, QpType::uc, sq_psn);
    expect_exactly_required(QpState::rtr, QpState::rts, QpType::ud, sq_psn);
    EXPECT_FALSE(qp_modify_ok(QpState::rtr, QpState::rts, QpType::uc, state | sq_psn | timeout));
    EXPECT_TRUE(qp_modify_ok(QpState::rtr, QpState::rts, QpType::ud, state | sq_psn | qkey));
}

TEST(QpState, rts_to_rts_takes_only_optional_attributes) {
    EXPECT_TRUE(
        qp_modify_ok(QpState::rts, QpState::rts, QpType::rc, state | min_rnr_timer | access_flags));
    EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::rts, QpType::uc, state | min_rnr_timer));
    EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::rts, QpType::rc, state | sq_psn));
    EXPECT_TRUE(qp_modify_ok(QpState::rts, QpState::rts, QpType::ud, state | qkey));
}

TEST(QpState, rts_to_sqd_optionally_asks_for_the_drained_event) {
    for (QpType t : kAllTypes) {
        EXPECT_TRUE(qp_modify_ok(QpState::rts, QpState::sqd, t, state));
        EXPECT_TRUE(qp_modify_ok(QpState::rts, QpState::sqd, t, state | en_sqd_async_notify));
        EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::sqd, t, state | qkey | access_flags));
    }
}

TEST(QpState, sqd_to_sqd_lets_rc_change_its_path_and_limits) {
    EXPECT_TRUE(qp_modify_ok(QpState::sqd, QpState::sqd, QpType::rc,
                             state | port | av | timeout | retry_cnt | rnr_retry |
                                 max_qp_rd_atomic | max_dest_rd_atomic | access_flags | pkey_index |
                                 min_rnr_timer));
    EXPECT_FALSE(qp_modify_ok(QpState::sqd, QpState::sqd, QpType::uc, state | timeout));
    EXPECT_FALSE(qp_modify_ok(QpState::sqd, QpState::sqd, QpType::ud, state | av));
}

TEST(QpState, sqd_to_rts_resumes_with_optional_attributes) {
    for (QpType t : kAllTypes) EXPECT_TRUE(qp_modify_ok(QpState::sqd, QpState::rts, t, state));
    EXPECT_TRUE(
        qp_modify_ok(QpState::sqd, QpState::rts, QpType::rc, state | cur_state | min_rnr_timer));
    EXPECT_FALSE(qp_modify_ok(QpState::sqd, QpState::rts, QpType::uc, state | min_rnr_timer));
}

TEST(QpState, sqe_to_rts_recovers_uc_and_ud) {
    EXPECT_TRUE(qp_modify_ok(QpState::sqe, QpState::rts, QpType::uc, state | access_flags));
    EXPECT_TRUE(qp_modify_ok(QpState::sqe, QpState::rts, QpType::ud, state | cur_state | qkey));
    EXPECT_FALSE(qp_modify_ok(QpState::sqe, QpState::rts, QpType::rc, state | access_flags));
}

TEST(QpState, any_state_to_err_allowed) {
    for (QpState s : kAllStates)
        for (QpType t : kAllTypes)
            EXPECT_TRUE(qp_modify_ok(s, QpState::err, t, state)) << qp_state_name(s);
}

TEST(QpState, any_state_to_reset_allowed) {
    for (QpState s : kAllStates)
        for (QpType t : kAllTypes)
            EXPECT_TRUE(qp_modify_ok(s, QpState::reset, t, state)) << qp_state_name(s);
}

TEST(QpState, moves_to_err_and_reset_take_no_attributes) {
    for (QpType t : kAllTypes) {
        EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::err, t, state | qkey | access_flags));
        EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::reset, t, state | port));
    }
}

TEST(QpState, reset_to_rts_refused) {
    for (QpType t : kAllTypes)
        EXPECT_FALSE(qp_modify_ok(QpState::reset, QpState::rts, t, kAllBits & ~cur_state));
}

TEST(QpState, states_cannot_be_skipped_or_walked_back) {
    const std::tuple<QpState, QpState> refused[] = {
        {QpState::reset, QpState::rtr}, {QpState::init, QpState::rts},
        {QpState::rtr, QpState::init},  {QpState::rts, QpState::rtr},
        {QpState::err, QpState::init},  {QpState::err, QpState::rts},
        {QpState::sqe, QpState::sqd},   {QpState::reset, QpState::sqd},
        {QpState::init, QpState::sqe},
    };
    for (auto [from, to] : refused)
        for (QpType t : kAllTypes)
            EXPECT_FALSE(qp_modify_ok(from, to, t, kAllBits))
                << qp_state_name(from) << " -> " << qp_state_name(to);
}

TEST(QpState, exactly_the_iba_transitions_exist) {
    using S = QpState;
    const std::set<std::pair<S, S>> allowed = {
        {S::reset, S::init}, {S::init, S::init}, {S::init, S::rtr},
        {S::rtr, S::rts},    {S::rts, S::rts},   {S::rts, S::sqd},
        {S::sqd, S::rts},    {S::sqd, S::sqd},   {S::sqe, S::rts},
    };
    for (S from : kAllStates)
        for (S to : kAllStates)
            for (QpType t : kAllTypes) {
                const bool want = to == S::err || to == S::reset || allowed.count({from, to}) != 0;
                EXPECT_EQ(qp_transition(from, to, t).allowed, want)
                    << qp_state_name(from) << " -> " << qp_state_name(to) << " type " << int(t);
            }
}

TEST(QpState, current_state_may_be_named_only_from_rtr_rts_sqd_sqe) {
    EXPECT_FALSE(qp_modify_ok(QpState::reset, QpState::init, QpType::rc,
                              state | cur_state | pkey_index | port | access_flags));
    EXPECT_FALSE(qp_modify_ok(QpState::init, QpState::init, QpType::rc, state | cur_state));
    EXPECT_TRUE(qp_modify_ok(QpState::rts, QpState::rts, QpType::rc, state | cur_state));
    EXPECT_TRUE(qp_modify_ok(QpState::sqd, QpState::rts, QpType::uc, state | cur_state));
    // ... and only where the transition lists it.
    EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::sqd, QpType::rc, state | cur_state));
}

TEST(QpState, a_mask_without_the_state_bit_stays_in_the_current_state) {
    EXPECT_TRUE(qp_modify_ok(QpState::rts, QpState::rts, QpType::rc, min_rnr_timer));
    EXPECT_TRUE(qp_modify_ok(QpState::init, QpState::init, QpType::rc, pkey_index));
    // RTR -> RTR is no transition at all.
    EXPECT_FALSE(qp_modify_ok(QpState::rtr, QpState::rtr, QpType::rc, 0));
}

TEST(QpState, capability_rate_limit_and_unknown_bits_are_refused) {
    EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::rts, QpType::rc, state | cap));
    EXPECT_FALSE(qp_modify_ok(
        QpState::rtr, QpState::rts, QpType::rc,
        state | sq_psn | timeout | retry_cnt | rnr_retry | max_qp_rd_atomic | rate_limit));
    EXPECT_FALSE(qp_modify_ok(QpState::rts, QpState::rts, QpType::rc, state | (1u << 30)));
}

}  // namespace
}  // namespace snic::verbs
