// What operators see of the sessions' QPs (daemon/verbs/qp_report.h): who sees which QPs, the
// paging of a listing, and one QP's dump with its engine's view and counters.
#include "daemon/verbs/qp_report.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "proto/net/addr.h"
#include "proto/verbs/qp_state.h"
#include "tests/unit/daemon/fake_transport.h"
#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon::fixture {
namespace {

// A client of uid `uid` with one CQ, able to make QPs and connect them.
struct QpClient {
    QpClient(Resources& r, std::span<const DevicePort> ports, std::uint32_t uid)
        : c(r, ports, Peer{static_cast<std::int32_t>(1000 + uid), uid, uid}) {
        EXPECT_EQ(c.open(), 0);
        pd = c.pd();
        cq = c.cq();
    }
    std::uint32_t make_qp() {
        shm::CreateQpReply out{};
        EXPECT_EQ(c.qp(pd, cq, out), 0);
        handles.push_back(out.qp);
        return out.qp_num;
    }
    // RESET -> INIT -> RTR to `dest_qpn` at 198.18.0.2, path MTU 1024.
    void connect(std::size_t i, std::uint32_t dest_qpn) {
        shm::QpAttr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        ASSERT_EQ(c.modify(handles[i],
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a),
                  0);
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = dest_qpn;
        a.rq_psn = 0x123456;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        const std::uint8_t dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
        std::memcpy(a.ah_attr.dgid, dgid, 16);
        ASSERT_EQ(c.modify(handles[i],
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                           a),
                  0);
    }
    Client c;
    Handle pd = kNoHandle, cq = kNoHandle;
    std::vector<Handle> handles;
};

class QpReport : public ::testing::Test {
  protected:
    QpReport() { ports[0].devices[shm::kTransportRoce].transport = &transport; }
    std::span<Session* const> sessions() const { return resources.sessions(); }
    std::vector<std::uint32_t> qpns(const std::vector<shm::QpSummary>& rows) const {
        std::vector<std::uint32_t> out;
        for (const auto& r : rows) out.push_back(r.qpn);
        return out;
    }
    Resources resources;
    FakeTransport transport{resources.keys(), "show"};
    std::vector<DevicePort> ports = test_ports();
};

TEST_F(QpReport, root_sees_every_sessions_qps_by_number_others_only_their_own) {
    QpClient root(resources, ports, 0), alice(resources, ports, 1000), bob(resources, ports, 1001);
    const std::uint32_t a1 = alice.make_qp();
    const std::uint32_t r1 = root.make_qp();
    const std::uint32_t a2 = alice.make_qp();
    const std::uint32_t b1 = bob.make_qp();

    const auto all = list_qps(sessions(), ports, QpViewer{0});
    std::vector<std::uint32_t> want{a1, r1, a2, b1};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(qpns(all), want);

    std::vector<std::uint32_t> alices{a1, a2};
    std::sort(alices.begin(), alices.end());
    EXPECT_EQ(qpns(list_qps(sessions(), ports, QpViewer{1000})), alices);
    EXPECT_EQ(qpns(list_qps(sessions(), ports, QpViewer{1001})), std::vector<std::uint32_t>{b1});
    EXPECT_TRUE(list_qps(sessions(), ports, QpViewer{4242}).empty());

    shm::QpReply q;
    EXPECT_TRUE(dump_qp(sessions(), ports, QpViewer{1000}, a1, q));
    EXPECT_FALSE(dump_qp(sessions(), ports, QpViewer{1000}, b1, q)) << "bob's QP, asked by alice";
    EXPECT_FALSE(dump_qp(sessions(), ports, QpViewer{1000}, r1, q)) << "root's QP, asked by alice";
    EXPECT_TRUE(dump_qp(sessions(), ports, QpViewer{0}, b1, q));
}

TEST_F(QpReport, a_summary_names_the_session_device_state_and_peer) {
    QpClient alice(resources, ports, 1000);
    const std::uint32_t qpn = alice.make_qp();
    auto rows = list_qps(sessions(), ports, QpViewer{0});
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].qpn, qpn);
    EXPECT_EQ(rows[0].session, alice.c.session.id());
    EXPECT_EQ(rows[0].pid, 2000);
    EXPECT_EQ(rows[0].uid, 1000u);
    EXPECT_EQ(rows[0].port_index, 0u);
    EXPECT_STREQ(rows[0].device, "snic_0");
    EXPECT_EQ(rows[0].qp_type, static_cast<std::uint32_t>(IBV_QPT_RC));
    EXPECT_EQ(rows[0].state, static_cast<std::uint32_t>(IBV_QPS_RESET));
    EXPECT_EQ(rows[0].dest_qpn, 0u) << "no destination before RTR";

    alice.connect(0, 0x4242);
    rows = list_qps(sessions(), ports, QpViewer{0});
    EXPECT_EQ(rows[0].state, static_cast<std::uint32_t>(IBV_QPS_RTR));
    EXPECT_EQ(rows[0].dest_qpn, 0x4242u);
    EXPECT_EQ(rows[0].dgid[12], 198);
    EXPECT_EQ(rows[0].dgid[15], 2);
}

TEST_F(QpReport, a_dump_holds_the_attributes_and_the_engines_view_and_counters) {
    QpClient alice(resources, ports, 1000);
    const std::uint32_t qpn = alice.make_qp();

    shm::QpReply q;
    ASSERT_TRUE(dump_qp(sessions(), ports, QpViewer{0}, qpn, q));
    EXPECT_EQ(q.engine.running, 0u) << "no engine before RTR";
    EXPECT_EQ(q.attr.cap.max_send_wr, 16u);

    alice.connect(0, 0x4242);
    ASSERT_NE(transport.engine, nullptr);
    transport.engine->shown = {false, "none", 0x10, 0x0e, 0x123460, 7, 2};
    transport.engine->counters = {{"tx_send_packets", 5}, {"timeouts", 0}, {"rx_acks", 3}};
    ASSERT_TRUE(dump_qp(sessions(), ports, QpViewer{0}, qpn, q));
    EXPECT_EQ(q.summary.qpn, qpn);
    EXPECT_EQ(q.attr.qp_state, static_cast<std::uint32_t>(IBV_QPS_RTR));
    EXPECT_EQ(q.attr.path_mtu, static_cast<std::uint32_t>(IBV_MTU_1024));
    EXPECT_EQ(q.attr.rq_psn, 0x123456u);
    EXPECT_EQ(q.srqn, 0u);
    EXPECT_EQ(q.engine.running, 1u);
    EXPECT_EQ(q.engine.failed, 0u);
    EXPECT_STREQ(q.engine.transport, "show");
    EXPECT_STREQ(q.engine.error, "none");
    EXPECT_EQ(q.engine.next_psn, 0x10u);
    EXPECT_EQ(q.engine.unacked_psn, 0x0eu);
    EXPECT_EQ(q.engine.expected_psn, 0x123460u);
    EXPECT_EQ(q.engine.msn, 7u);
    EXPECT_EQ(q.engine.send_wrs_held, 2u);
    ASSERT_EQ(q.engine.ncounters, 3u);
    EXPECT_EQ(q.engine.all_counters, 3u);
    EXPECT_STREQ(q.counters[0].name, "tx_send_packets");
    EXPECT_EQ(q.counters[0].value, 5u);
    EXPECT_STREQ(q.counters[2].name, "rx_acks");
    EXPECT_EQ(q.counters[2].value, 3u);

    EXPECT_FALSE(dump_qp(sessions(), ports, QpViewer{0}, qpn + 1, q)) << "no such QP";
}

TEST_F(QpReport, a_qp_whose_engine_failed_by_itself_shows_err_before_the_session_syncs) {
    QpClient alice(resources, ports, 1000);
    const std::uint32_t qpn = alice.make_qp();
    alice.connect(0, 0x4242);
    transport.engine->shown = {true, "retry_exceeded", 0, 0, 0, 0, 0};
    shm::QpReply q;
    ASSERT_TRUE(dump_qp(sessions(), ports, QpViewer{0}, qpn, q));
    EXPECT_EQ(q.summary.state, static_cast<std::uint32_t>(IBV_QPS_ERR));
    EXPECT_EQ(q.engine.failed, 1u);
    EXPECT_STREQ(q.engine.error, "retry_exceeded");
}

TEST_F(QpReport, counters_past_what_a_reply_holds_are_counted_not_sent) {
    QpClient alice(resources, ports, 1000);
    const std::uint32_t qpn = alice.make_qp();
    alice.connect(0, 0x4242);
    transport.engine->counters.assign(shm::kMaxQpCounters + 3,
                                      {"a_counter_name_longer_than_the_field", 1});
    shm::QpReply q;
    ASSERT_TRUE(dump_qp(sessions(), ports, QpViewer{0}, qpn, q));
    EXPECT_EQ(q.engine.ncounters, shm::kMaxQpCounters);
    EXPECT_EQ(q.engine.all_counters, shm::kMaxQpCounters + 3);
    EXPECT_EQ(std::strlen(q.counters[0].name), shm::kCounterNameLen - 1) << "cut, NUL-terminated";
}

// ---- names -----------------------------------------------------------------------------

TEST(QpNames, types_mtus_and_peers_read_as_verbs_users_know_them) {
    EXPECT_STREQ(verbs::qp_type_name(IBV_QPT_RC), "RC");
    EXPECT_STREQ(verbs::qp_type_name(IBV_QPT_UD), "UD");
    EXPECT_STREQ(verbs::qp_type_name(IBV_QPT_RAW_PACKET), "?");
    EXPECT_EQ(verbs::path_mtu_bytes(IBV_MTU_256), 256u);
    EXPECT_EQ(verbs::path_mtu_bytes(IBV_MTU_4096), 4096u);
    EXPECT_EQ(verbs::path_mtu_bytes(0), 0u);
    EXPECT_EQ(verbs::path_mtu_bytes(6), 0u);
    const std::uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
    EXPECT_EQ(net::gid_to_string(mapped), "198.18.0.2");
    const std::uint8_t v6[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    EXPECT_EQ(net::gid_to_string(v6), "fe80::1");
}

// ---- paging --------------------------------------------------------------------------

std::vector<shm::QpSummary> rows_numbered(std::initializer_list<std::uint32_t> qpns) {
    std::vector<shm::QpSummary> rows;
    for (std::uint32_t n : qpns) {
        shm::QpSummary r{};
        r.qpn = n;
        rows.push_back(r);
    }
    return rows;
}

TEST(QpPage, an_empty_listing_is_one_empty_page) {
    const QpPage p = qp_page({}, 0, 4);
    EXPECT_EQ(p.begin, 0u);
    EXPECT_EQ(p.end, 0u);
    EXPECT_FALSE(p.more);
}

TEST(QpPage, pages_follow_each_other_by_qp_number) {
    const auto rows = rows_numbered({3, 5, 8, 9, 20});
    QpPage p = qp_page(rows, 0, 2);
    EXPECT_EQ(p.begin, 0u);
    EXPECT_EQ(p.end, 2u);
    EXPECT_TRUE(p.more);
    EXPECT_EQ(p.next_qpn, 6u);
    p = qp_page(rows, p.next_qpn, 2);
    EXPECT_EQ(p.begin, 2u);
    EXPECT_EQ(p.end, 4u);
    EXPECT_TRUE(p.more);
    EXPECT_EQ(p.next_qpn, 10u);
    p = qp_page(rows, p.next_qpn, 2);
    EXPECT_EQ(p.begin, 4u);
    EXPECT_EQ(p.end, 5u);
    EXPECT_FALSE(p.more);
}

TEST(QpPage, a_page_that_ends_at_the_last_row_has_no_more) {
    const auto rows = rows_numbered({3, 5});
    const QpPage p = qp_page(rows, 0, 2);
    EXPECT_EQ(p.end, 2u);
    EXPECT_FALSE(p.more);
}

TEST(QpPage, a_qp_destroyed_between_pages_is_skipped_and_one_created_is_seen) {
    // The cursor is a QP number, not an index: the listing may change between two requests.
    const auto before = rows_numbered({3, 5, 8, 9});
    const QpPage first = qp_page(before, 0, 2);
    const auto after = rows_numbered({3, 7, 8, 9});  // 5 went, 7 came
    const QpPage second = qp_page(after, first.next_qpn, 2);
    EXPECT_EQ(after[second.begin].qpn, 7u);
    EXPECT_EQ(second.end, 3u);
}

TEST(QpPage, a_cursor_past_the_end_gives_an_empty_last_page) {
    const auto rows = rows_numbered({3, 5});
    const QpPage p = qp_page(rows, 6, 2);
    EXPECT_EQ(p.begin, p.end);
    EXPECT_FALSE(p.more);
}

TEST(QpPage, the_reply_holds_at_most_its_array_and_counts_them_all) {
    std::vector<shm::QpSummary> rows(shm::kMaxQpsListed + 5);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i].qpn = static_cast<std::uint32_t>(2 + i);
    shm::QpsReply r;
    fill_qps_reply(rows, 0, r);
    EXPECT_EQ(r.nqps, rows.size());
    EXPECT_EQ(r.listed, shm::kMaxQpsListed);
    EXPECT_EQ(r.more, 1u);
    EXPECT_EQ(r.qps[0].qpn, 2u);
    EXPECT_EQ(r.next_qpn, r.qps[shm::kMaxQpsListed - 1].qpn + 1);
    fill_qps_reply(rows, r.next_qpn, r);
    EXPECT_EQ(r.listed, 5u);
    EXPECT_EQ(r.more, 0u);
}

}  // namespace
}  // namespace snic::daemon::fixture
