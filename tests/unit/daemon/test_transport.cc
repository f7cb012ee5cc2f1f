// The data-plane seam (daemon/verbs/transport.h): a second, fake transport (fake_transport.h)
// runs QPs through the same interface RoCEv2 uses, with the shared glue (daemon/verbs/qp_glue.h)
// between its engine and the client's rings, CQs and async events; the async events an engine
// raises by itself; and RoCEv2's own attribute rule.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/iwarp/iwarp_rules.h"
#include "daemon/roce/roce_transport.h"
#include "daemon/verbs/qp_glue.h"
#include "proto/verbs/qp_state.h"
#include "tests/unit/daemon/fake_transport.h"
#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon::fixture {
namespace {

// A client that keeps its side of every ring: async events, a CQ, a QP's send and receive
// rings, an SRQ.
struct RingClient {
    explicit RingClient(Resources& r, std::span<const DevicePort> ports) : c(r, ports) {}

    void open(std::uint32_t transport = shm::kTransportRoce) {
        const shm::ContextLayout l = shm::context_layout(shm::kAsyncCapacity);
        async = std::make_unique<ClientMemfd>(l.bytes);
        auto ring =
            shm::RingConsumer<shm::AsyncEvent>::init(async->span(l.events), shm::kAsyncCapacity);
        ASSERT_TRUE(ring);
        events.emplace(*ring);
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        FdList fds = fds_of({sv[1], async->fd()});
        shm::OpenDeviceReply out{};
        ASSERT_EQ(c.session.open_device({0, transport}, fds, out), 0);
        pd = c.pd();
    }
    ~RingClient() {
        for (int fd : sv)
            if (fd >= 0) ::close(fd);
    }
    void make_cq() {
        const shm::Layout l = shm::cq_layout(16);
        cq_mem = std::make_unique<ClientMemfd>(l.bytes);
        auto ring = shm::RingConsumer<shm::Cqe>::init(cq_mem->span(l.ring0), 16);
        ASSERT_TRUE(ring);
        cqes.emplace(*ring);
        FdList fds = fds_of({cq_mem->fd()});
        shm::CreateCqReply out{};
        ASSERT_EQ(c.session.create_cq({15, 16, kNoHandle, 0}, fds, out), 0);
        cq = out.cq;
    }
    void make_srq(std::uint32_t limit) {
        const shm::Layout l = shm::srq_layout(16);
        srq_mem = std::make_unique<ClientMemfd>(l.bytes);
        auto ring = shm::RingProducer<shm::RecvWqe>::init(srq_mem->span(l.ring0), 16);
        ASSERT_TRUE(ring);
        srq_ring.emplace(*ring);
        FdList fds = fds_of({srq_mem->fd()});
        shm::CreateSrqReply out{};
        ASSERT_EQ(c.session.create_srq({pd, 16, 1, limit, 16, 0}, fds, out), 0);
        srq = out.srq;
    }
    int make_qp(std::uint8_t type = IBV_QPT_RC) {
        const std::uint32_t rq = srq == kNoHandle ? 16 : 0;
        const shm::Layout l = shm::qp_layout(16, rq);
        qp_mem = std::make_unique<ClientMemfd>(l.bytes);
        auto s = shm::RingProducer<shm::SendWqe>::init(
            qp_mem->span(l.ring0, (rq == 0 ? l.bytes : l.ring1) - l.ring0), 16);
        EXPECT_TRUE(s);
        if (!s) return EINVAL;
        sq.emplace(*s);
        if (rq != 0) {
            auto r = shm::RingProducer<shm::RecvWqe>::init(qp_mem->span(l.ring1), rq);
            EXPECT_TRUE(r);
            if (!r) return EINVAL;
            rq_ring.emplace(*r);
        }
        shm::CreateQpReq req{pd, cq, cq, srq, type, 0, {16, rq, 1, rq == 0 ? 0u : 1u, 0}, 16, rq};
        FdList fds = fds_of({qp_mem->fd()});
        shm::CreateQpReply out{};
        if (const int err = c.session.create_qp(req, fds, out); err != 0) return err;
        qp = out.qp;
        qpn = out.qp_num;
        doorbell = out.doorbell;
        return 0;
    }
    // The QP's control block, as the client sees it.
    std::uint32_t sleeping() const {
        const auto* ctl = reinterpret_cast<const shm::QpControl*>(qp_mem->span().data());
        return std::atomic_ref<const std::uint32_t>(ctl->sleeping).load();
    }
    // The QP's receive counters, as snic_query_qp_recv reads them: {taken, completed}.
    std::pair<std::uint64_t, std::uint64_t> recv_counters() const {
        auto* ctl = reinterpret_cast<shm::QpControl*>(qp_mem->span().data());
        std::uint64_t taken = 0, completed = 0;
        EXPECT_TRUE(shm::read_recv_counters(ctl->recv, taken, completed));
        return {taken, completed};
    }
    // ibv_modify_srq with IBV_SRQ_MAX_WR as libsnic makes it: a new area for `capacity` slots
    // (`bytes` long when given, unsealed when asked). On success the client produces there.
    int resize_srq(std::uint32_t max_wr, std::uint32_t capacity, shm::ModifySrqReply& rep,
                   std::uint32_t mask = IBV_SRQ_MAX_WR, std::uint32_t limit = 0,
                   std::size_t bytes = 0, bool seal = true) {
        const shm::Layout l = shm::srq_layout(capacity);
        auto mem = std::make_unique<ClientMemfd>(bytes != 0 ? bytes : l.bytes, seal);
        FdList fds = fds_of({mem->fd()});
        const int err = c.session.modify_srq({srq, mask, max_wr, limit, capacity, 0}, fds, rep);
        if (err == 0) {
            auto ring = shm::RingProducer<shm::RecvWqe>::attach(mem->span(l.ring0));
            EXPECT_TRUE(ring);
            if (ring) srq_ring.emplace(*ring);
            srq_mem = std::move(mem);
        }
        return err;
    }
    shm::QuerySrqReply query_srq() {
        FdList fds;
        shm::QuerySrqReply q{};
        EXPECT_EQ(c.session.query_srq({srq, 0}, fds, q), 0);
        return q;
    }
    // RESET -> INIT -> RTR (-> RTS).
    int connect(bool rts = true, std::uint32_t path_mtu = IBV_MTU_1024) {
        shm::QpAttr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        if (int e = c.modify(
                qp, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a))
            return e;
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = path_mtu;
        a.dest_qp_num = 0x42;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        const std::uint8_t dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
        std::memcpy(a.ah_attr.dgid, dgid, 16);
        if (int e = c.modify(qp,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                             a))
            return e;
        if (!rts) return 0;
        a = {};
        a.qp_state = IBV_QPS_RTS;
        return c.modify(qp,
                        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                        a);
    }
    std::vector<shm::AsyncEvent> take_events() {
        std::vector<shm::AsyncEvent> out;
        shm::AsyncEvent e;
        while (events->try_pop(e)) out.push_back(e);
        return out;
    }

    Client c;
    int sv[2] = {-1, -1};
    Handle pd = kNoHandle, cq = kNoHandle, srq = kNoHandle, qp = kNoHandle;
    std::uint32_t qpn = 0, doorbell = 0;
    std::unique_ptr<ClientMemfd> async, cq_mem, srq_mem, qp_mem;
    std::optional<shm::RingConsumer<shm::AsyncEvent>> events;
    std::optional<shm::RingConsumer<shm::Cqe>> cqes;
    std::optional<shm::RingProducer<shm::RecvWqe>> srq_ring;
    std::optional<shm::RingProducer<shm::RecvWqe>> rq_ring;
    std::optional<shm::RingProducer<shm::SendWqe>> sq;
};

class TransportSeam : public ::testing::Test {
  protected:
    TransportSeam() : fake(resources.keys()) {
        ports[0].devices[shm::kTransportRoce].transport = &fake;
    }
    // A client with a CQ and an RC QP (on an SRQ when asked) in RTS on the fake transport.
    void connect_client(bool with_srq) {
        cl.open();
        cl.make_cq();
        if (with_srq) cl.make_srq(0);
        ASSERT_EQ(cl.make_qp(), 0);
        ASSERT_EQ(cl.connect(), 0);
    }

    Resources resources;
    FakeTransport fake;
    std::vector<DevicePort> ports = test_ports();
    RingClient cl{resources, ports};
};

TEST_F(TransportSeam, a_second_transport_runs_a_qp_from_rtr_to_destroy) {
    ASSERT_NO_FATAL_FAILURE(connect_client(false));
    EXPECT_EQ(fake.calls, (std::vector<std::string>{"start", "start_sending"}));
    ASSERT_NE(fake.engine, nullptr);

    // A send WQE from the client's ring reaches the engine copied and checked; its completion
    // reaches the client's CQ.
    shm::SendWqe w{};
    w.wr_id = 77;
    w.opcode = static_cast<std::uint8_t>(shm::WrOpcode::send);
    w.flags = shm::kWqeSignaled;
    ASSERT_TRUE(cl.sq->try_push(w));
    verbs::SendWr wr;
    ASSERT_TRUE(fake.engine->glue.pop_send(wr));
    EXPECT_EQ(wr.wr_id, 77u);
    EXPECT_EQ(wr.op, verbs::WrOp::send);
    verbs::Completion done;
    done.wr_id = wr.wr_id;
    done.qp_num = cl.qpn;
    fake.engine->glue.complete_send(done);
    shm::Cqe cqe;
    ASSERT_TRUE(cl.cqes->try_pop(cqe));
    EXPECT_EQ(cqe.wr_id, 77u);
    EXPECT_EQ(cqe.status, IBV_WC_SUCCESS);

    shm::QpAttr e{};
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE, e), 0);
    EXPECT_EQ(fake.calls.back(), "to_error");
    EXPECT_TRUE(cl.take_events().empty()) << "Modify QP to ERR is no fatal error";
    FdList fds;
    ASSERT_EQ(cl.c.session.destroy_qp({cl.qp, 0}, fds, cl.c.none), 0);
    EXPECT_EQ(fake.calls.back(), "stop");
}

// A client that goes with QPs running stops their engines in one request to the transport
// (one lcore task), not one each: with the lcore busy, one turn per QP held the control thread,
// and the control socket, for seconds while a client with thousands of QPs went.
TEST_F(TransportSeam, a_client_that_goes_stops_its_running_qps_at_once) {
    {
        RingClient many(resources, ports);
        many.open();
        many.make_cq();
        for (int i = 0; i < 3; ++i) {
            ASSERT_EQ(many.make_qp(), 0);
            ASSERT_EQ(many.connect(), 0);
        }
        fake.calls.clear();
    }
    EXPECT_EQ(fake.calls, (std::vector<std::string>{"stop 3"}));
}

// A gone client's session is taken apart a share at a time (the control server answers other
// clients between shares): each share stops the engines of its running QPs in one request,
// QPs go before anything they refer to, and the resources come back as they go.
TEST_F(TransportSeam, a_session_is_dismantled_a_share_at_a_time) {
    auto many = std::make_unique<RingClient>(resources, ports);
    many->open();
    many->make_cq();
    for (int i = 0; i < 5; ++i) {
        ASSERT_EQ(many->make_qp(), 0);
        if (i != 2) {  // QP 2 never runs
            ASSERT_EQ(many->connect(), 0);
        }
    }
    fake.calls.clear();
    Session& s = many->c.session;
    const auto qps = [&] { return resources.count(shm::ObjKind::qp); };
    const auto cqs = [&] { return resources.count(shm::ObjKind::cq); };
    ASSERT_EQ(qps(), 5u);

    // Most recent first: QPs 4 and 3, both running.
    EXPECT_TRUE(s.dismantle(2));
    EXPECT_EQ(fake.calls, (std::vector<std::string>{"stop 2"}));
    EXPECT_EQ(qps(), 3u);
    // QPs 2 (idle) and 1 (running): one engine to stop.
    EXPECT_TRUE(s.dismantle(2));
    EXPECT_EQ(fake.calls.back(), "stop");
    EXPECT_EQ(qps(), 1u);
    // QP 0, then the share's rest on the CQ: nothing refers to it any more.
    EXPECT_TRUE(s.dismantle(2));
    EXPECT_EQ(fake.calls.size(), 3u);
    EXPECT_EQ(qps(), 0u);
    EXPECT_EQ(cqs(), 0u);
    EXPECT_EQ(resources.count(shm::ObjKind::pd), 1u) << "a share is at most two objects";
    EXPECT_FALSE(s.dismantle(2));
    EXPECT_EQ(resources.count(shm::ObjKind::pd), 0u);
    EXPECT_FALSE(s.dismantle(2)) << "nothing left: nothing to do";
    many.reset();
    EXPECT_EQ(fake.calls.size(), 3u) << "the destructor had nothing left to stop";
}

// A QP's doorbell is the slot of its number, which no other live QP has.
TEST_F(TransportSeam, each_qp_is_told_its_doorbell) {
    RingClient cl(resources, ports);
    cl.open();
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    EXPECT_EQ(cl.doorbell, cl.qpn % shm::kDoorbellBits);
    EXPECT_NE(cl.c.session.qp(cl.qp)->doorbells, nullptr);
}

// The lcore stops watching a QP's send queue only after telling the client (`sleeping`), and
// only when the send queue is empty once the client can see that.
TEST_F(TransportSeam, a_qp_goes_to_sleep_only_with_an_empty_send_queue) {
    RingClient cl(resources, ports);
    cl.open();
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    ASSERT_EQ(cl.connect(), 0);
    QpGlue& glue = fake.engine->glue;
    EXPECT_EQ(cl.sleeping(), 0u);
    EXPECT_TRUE(glue.try_sleep());
    EXPECT_EQ(cl.sleeping(), 1u);
    glue.awake();
    EXPECT_EQ(cl.sleeping(), 0u);
    shm::SendWqe w{};
    w.opcode = static_cast<std::uint8_t>(shm::WrOpcode::send);
    ASSERT_TRUE(cl.sq->try_push(w));
    EXPECT_TRUE(glue.send_ready());
    EXPECT_FALSE(glue.try_sleep());
    EXPECT_EQ(cl.sleeping(), 0u);
    verbs::SendWr wr;
    ASSERT_TRUE(glue.pop_send(wr));
    EXPECT_TRUE(glue.try_sleep());
}

TEST_F(TransportSeam, a_qp_in_rtr_has_no_send_queue_to_watch) {
    RingClient cl(resources, ports);
    cl.open();
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    ASSERT_EQ(cl.connect(false), 0);
    shm::SendWqe w{};
    ASSERT_TRUE(cl.sq->try_push(w));  // a client that broke the rules
    EXPECT_FALSE(fake.engine->glue.send_ready());
    EXPECT_TRUE(fake.engine->glue.try_sleep());
}

TEST_F(TransportSeam, the_transport_has_the_last_word_on_attribute_values) {
    cl.open();
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    EXPECT_EQ(cl.connect(false, IBV_MTU_512), EINVAL);
    EXPECT_TRUE(fake.calls.empty()) << "a refused RTR starts nothing";
    EXPECT_EQ(cl.connect(false, IBV_MTU_1024), 0);  // INIT -> INIT -> RTR
    EXPECT_EQ(fake.calls, std::vector<std::string>{"start"});
}

TEST_F(TransportSeam, an_engine_that_fails_by_itself_raises_qp_fatal_and_is_in_err) {
    ASSERT_NO_FATAL_FAILURE(connect_client(false));
    fake.engine->glue.note_failed(false);  // e.g. retries exhausted
    const auto ev = cl.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, std::uint32_t{IBV_EVENT_QP_FATAL});
    EXPECT_EQ(ev[0].handle, cl.qp);
    EXPECT_EQ(cl.c.query(cl.qp).attr.qp_state, std::uint32_t{IBV_QPS_ERR});
    fake.engine->glue.note_failed(false);
    EXPECT_TRUE(cl.take_events().empty()) << "once";
}

TEST_F(TransportSeam, an_srq_attached_qp_that_fails_by_itself_raises_last_wqe_reached) {
    ASSERT_NO_FATAL_FAILURE(connect_client(true));
    verbs::Completion bad;
    bad.status = verbs::WcStatus::rem_access_err;
    fake.engine->glue.complete_send(bad);  // the first error completion publishes the failure
    const auto ev = cl.take_events();
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].type, std::uint32_t{IBV_EVENT_QP_FATAL});
    EXPECT_EQ(ev[1].type, std::uint32_t{IBV_EVENT_QP_LAST_WQE_REACHED});
    EXPECT_EQ(ev[1].handle, cl.qp);
}

TEST_F(TransportSeam, srq_limit_reached_once_when_armed_and_below_the_limit) {
    ASSERT_NO_FATAL_FAILURE(connect_client(true));
    shm::RecvWqe r{};
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(cl.srq_ring->try_push(r));
    verbs::RecvWr got;
    ASSERT_TRUE(fake.engine->glue.pop_recv(got));  // 5 left, not armed
    EXPECT_TRUE(cl.take_events().empty());
    FdList fds;
    shm::ModifySrqReply m{};
    ASSERT_EQ(cl.c.session.modify_srq({cl.srq, IBV_SRQ_LIMIT, 16, 4, 0, 0}, fds, m), 0);
    ASSERT_TRUE(fake.engine->glue.pop_recv(got));  // 4 left: not below 4
    EXPECT_TRUE(cl.take_events().empty());
    ASSERT_TRUE(fake.engine->glue.pop_recv(got));  // 3 left
    auto ev = cl.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, std::uint32_t{IBV_EVENT_SRQ_LIMIT_REACHED});
    EXPECT_EQ(ev[0].handle, cl.srq);
    shm::QuerySrqReply q{};
    ASSERT_EQ(cl.c.session.query_srq({cl.srq, 0}, fds, q), 0);
    EXPECT_EQ(q.srq_limit, 0u) << "disarmed";
    ASSERT_TRUE(fake.engine->glue.pop_recv(got));
    EXPECT_TRUE(cl.take_events().empty()) << "once per arming";
}

TEST_F(TransportSeam, async_events_are_produced_on_the_transports_lcore) {
    ASSERT_NO_FATAL_FAILURE(connect_client(true));
    const int before = fake.runs;
    shm::QpAttr e{};
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE, e), 0);
    EXPECT_GT(fake.runs, before) << "LAST_WQE_REACHED went through Transport::run";
    const auto ev = cl.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, std::uint32_t{IBV_EVENT_QP_LAST_WQE_REACHED});
}

TEST_F(TransportSeam, sq_drained_only_after_the_last_wr_started_completes) {
    ASSERT_NO_FATAL_FAILURE(connect_client(false));
    fake.held = 2;  // two WRs in flight
    shm::QpAttr d{};
    d.qp_state = IBV_QPS_SQD;
    d.en_sqd_async_notify = 1;
    ASSERT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY, d), 0);
    EXPECT_EQ(fake.calls.back(), "drain");
    EXPECT_TRUE(cl.take_events().empty()) << "WRs still in flight";

    shm::SendWqe w{};
    w.opcode = static_cast<std::uint8_t>(shm::WrOpcode::send);
    ASSERT_TRUE(cl.sq->try_push(w));
    verbs::SendWr wr;
    EXPECT_FALSE(fake.engine->glue.pop_send(wr)) << "no new WR starts while draining";
    fake.engine->glue.note_held(1);
    EXPECT_TRUE(cl.take_events().empty());
    fake.engine->glue.note_held(0);
    auto ev = cl.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, std::uint32_t{IBV_EVENT_SQ_DRAINED});
    EXPECT_EQ(ev[0].handle, cl.qp);
    fake.engine->glue.note_held(0);
    EXPECT_TRUE(cl.take_events().empty()) << "once";

    shm::QpAttr r{};
    r.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE, r), 0);
    EXPECT_EQ(fake.calls.back(), "resume");
    EXPECT_TRUE(fake.engine->glue.pop_send(wr)) << "SQD -> RTS serves the send queue again";
}

// ---- the receive counters (snic_query_qp_recv) ---------------------------------------------

shm::RecvWqe recv_wqe(std::uint64_t wr_id) {
    shm::RecvWqe w{};
    w.wr_id = wr_id;
    return w;
}

verbs::Completion recv_done(std::uint64_t wr_id, std::uint32_t qpn) {
    verbs::Completion c;
    c.wr_id = wr_id;
    c.opcode = verbs::WcOpcode::recv;
    c.qp_num = qpn;
    return c;
}

TEST_F(TransportSeam, receive_counters_count_wqes_taken_and_completions_made) {
    ASSERT_NO_FATAL_FAILURE(connect_client(false));
    using Pair = std::pair<std::uint64_t, std::uint64_t>;
    EXPECT_EQ(cl.recv_counters(), (Pair{0, 0}));
    for (std::uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(cl.rq_ring->try_push(recv_wqe(id)));
    EXPECT_EQ(cl.recv_counters(), (Pair{0, 0})) << "posted is not taken";
    QpGlue& glue = fake.engine->glue;
    verbs::RecvWr wr;
    ASSERT_TRUE(glue.pop_recv(wr));  // the first packet of a message
    EXPECT_EQ(cl.recv_counters(), (Pair{1, 0}));
    glue.complete_recv(recv_done(wr.wr_id, cl.qpn));  // its last
    EXPECT_EQ(cl.recv_counters(), (Pair{1, 1}));
    shm::Cqe cqe;
    ASSERT_TRUE(cl.cqes->try_pop(cqe));
    ASSERT_TRUE(glue.pop_recv(wr));
    verbs::Completion bad = recv_done(wr.wr_id, cl.qpn);
    bad.status = verbs::WcStatus::loc_len_err;  // an error completion counts too
    glue.complete_recv(bad);
    EXPECT_EQ(cl.recv_counters(), (Pair{2, 2}));
    ASSERT_TRUE(glue.pop_recv(wr));  // the third is taken
    EXPECT_EQ(cl.recv_counters(), (Pair{3, 2}));
}

TEST_F(TransportSeam, srq_wqes_count_for_the_qp_that_takes_them) {
    ASSERT_NO_FATAL_FAILURE(connect_client(true));
    ASSERT_TRUE(cl.srq_ring->try_push(recv_wqe(1)));
    verbs::RecvWr wr;
    ASSERT_TRUE(fake.engine->glue.pop_recv(wr));
    EXPECT_EQ(cl.recv_counters(), (std::pair<std::uint64_t, std::uint64_t>{1, 0}));
    fake.engine->glue.complete_recv(recv_done(1, cl.qpn));
    EXPECT_EQ(cl.recv_counters(), (std::pair<std::uint64_t, std::uint64_t>{1, 1}));
}

// A QP without an engine flushes its own RQ itself: each WQE flushed is taken and completed;
// Modify QP to RESET starts the count afresh.
TEST_F(TransportSeam, flushed_receives_count_as_taken_and_completed_and_reset_clears_both) {
    cl.open();
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    shm::QpAttr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    ASSERT_EQ(
        cl.c.modify(cl.qp, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a),
        0);
    for (std::uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(cl.rq_ring->try_push(recv_wqe(id)));
    shm::QpAttr e{};
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE, e), 0);
    using Pair = std::pair<std::uint64_t, std::uint64_t>;
    EXPECT_EQ(cl.recv_counters(), (Pair{3, 3}));
    for (std::uint64_t id = 1; id <= 3; ++id) {
        shm::Cqe cqe;
        ASSERT_TRUE(cl.cqes->try_pop(cqe));
        EXPECT_EQ(cqe.wr_id, id);
        EXPECT_EQ(cqe.status, IBV_WC_WR_FLUSH_ERR);
    }
    shm::QpAttr r{};
    r.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE, r), 0);
    EXPECT_EQ(cl.recv_counters(), (Pair{0, 0}));
}

// ---- SRQ resize (ibv_modify_srq with IBV_SRQ_MAX_WR) ---------------------------------------

std::vector<std::uint64_t> take_recvs(QpGlue& glue) {
    std::vector<std::uint64_t> ids;
    verbs::RecvWr wr;
    while (glue.pop_recv(wr)) ids.push_back(wr.wr_id);
    return ids;
}

std::vector<std::uint64_t> ids(std::uint64_t first, std::uint64_t last) {
    std::vector<std::uint64_t> v;
    for (std::uint64_t i = first; i <= last; ++i) v.push_back(i);
    return v;
}

TEST_F(TransportSeam, srq_resize_keeps_every_wqe_posted_and_not_taken_in_order) {
    ASSERT_NO_FATAL_FAILURE(connect_client(true));
    QpGlue& glue = fake.engine->glue;
    for (std::uint64_t id = 1; id <= 10; ++id) ASSERT_TRUE(cl.srq_ring->try_push(recv_wqe(id)));
    verbs::RecvWr wr;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(glue.pop_recv(wr));
    const std::uint64_t before = cl.c.session.mapped_bytes();

    shm::ModifySrqReply rep{};
    ASSERT_EQ(cl.resize_srq(100, 128, rep), 0);  // grow
    EXPECT_EQ(rep.max_wr, 128u) << "what the new ring holds";
    EXPECT_EQ(rep.capacity, 128u);
    EXPECT_EQ(rep.prod, 7u) << "the 7 WQEs not taken moved";
    EXPECT_EQ(cl.query_srq().max_wr, 128u);
    EXPECT_EQ(cl.c.session.mapped_bytes(),
              before - shm::srq_layout(16).bytes + shm::srq_layout(128).bytes)
        << "the old area is unmapped, the new one counted";
    for (std::uint64_t id = 11; id <= 100; ++id) ASSERT_TRUE(cl.srq_ring->try_push(recv_wqe(id)));
    EXPECT_EQ(take_recvs(glue), ids(4, 100));

    for (std::uint64_t id = 101; id <= 105; ++id) ASSERT_TRUE(cl.srq_ring->try_push(recv_wqe(id)));
    ASSERT_EQ(cl.resize_srq(5, 8, rep), 0);  // shrink to exactly the WQEs posted
    EXPECT_EQ(rep.prod, 5u);
    EXPECT_EQ(cl.query_srq().max_wr, 8u);
    for (std::uint64_t id = 106; id <= 108; ++id) ASSERT_TRUE(cl.srq_ring->try_push(recv_wqe(id)));
    EXPECT_FALSE(cl.srq_ring->try_push(recv_wqe(109))) << "8 slots";
    EXPECT_EQ(take_recvs(glue), ids(101, 108));
}

TEST_F(TransportSeam, srq_resize_below_the_wqes_posted_is_refused_and_changes_nothing) {
    ASSERT_NO_FATAL_FAILURE(connect_client(true));
    for (std::uint64_t id = 1; id <= 6; ++id) ASSERT_TRUE(cl.srq_ring->try_push(recv_wqe(id)));
    const std::uint64_t before = cl.c.session.mapped_bytes();
    shm::ModifySrqReply rep{};
    EXPECT_EQ(cl.resize_srq(5, 8, rep), EINVAL);
    EXPECT_EQ(cl.c.session.mapped_bytes(), before);
    EXPECT_EQ(cl.query_srq().max_wr, 16u);
    ASSERT_TRUE(cl.srq_ring->try_push(recv_wqe(7))) << "the old ring still serves";
    EXPECT_EQ(take_recvs(fake.engine->glue), ids(1, 7));
}

TEST_F(TransportSeam, srq_resize_checks_max_wr_the_armed_limit_and_the_new_area) {
    ASSERT_NO_FATAL_FAILURE(connect_client(true));
    shm::ModifySrqReply rep{};
    const std::uint32_t most = resources.limits().max_srq_wr;
    EXPECT_EQ(cl.resize_srq(0, 1, rep), EINVAL);
    EXPECT_EQ(cl.resize_srq(most + 1, shm::wq_capacity_for(most + 1), rep), EINVAL);
    EXPECT_EQ(cl.resize_srq(100, 100, rep), EINVAL) << "capacity not a power of two";
    EXPECT_EQ(cl.resize_srq(100, 64, rep), EINVAL) << "capacity below max_wr";
    EXPECT_EQ(cl.resize_srq(32, 32, rep, IBV_SRQ_MAX_WR, 0, shm::kPageSize), EINVAL)
        << "an area shorter than its layout";
    EXPECT_EQ(cl.resize_srq(32, 32, rep, IBV_SRQ_MAX_WR, 0, 0, false), EINVAL)
        << "an area not sealed against shrinking";

    FdList none;
    ASSERT_EQ(cl.c.session.modify_srq({cl.srq, IBV_SRQ_LIMIT, 0, 10, 0, 0}, none, rep), 0);
    EXPECT_EQ(cl.resize_srq(8, 8, rep), EINVAL) << "below the armed limit";
    EXPECT_EQ(cl.query_srq().srq_limit, 10u);
    ASSERT_EQ(cl.resize_srq(8, 8, rep, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT, 4), 0)
        << "with a new limit that fits";
    const shm::QuerySrqReply q = cl.query_srq();
    EXPECT_EQ(q.max_wr, 8u);
    EXPECT_EQ(q.srq_limit, 4u);
    EXPECT_EQ(cl.resize_srq(8, 8, rep, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT, 9), EINVAL);

    // A resize takes the new area's memfd, and only a resize takes one.
    EXPECT_EQ(cl.c.session.modify_srq({cl.srq, IBV_SRQ_MAX_WR, 8, 0, 8, 0}, none, rep), EINVAL);
    const shm::Layout l = shm::srq_layout(8);
    ClientMemfd m(l.bytes);
    FdList one = fds_of({m.fd()});
    EXPECT_EQ(cl.c.session.modify_srq({cl.srq, IBV_SRQ_LIMIT, 0, 2, 0, 0}, one, rep), EINVAL);
    FdList two = fds_of({m.fd(), m.fd()});
    EXPECT_EQ(cl.c.session.modify_srq({cl.srq, IBV_SRQ_MAX_WR, 8, 0, 8, 0}, two, rep), EINVAL);
    EXPECT_EQ(cl.query_srq().max_wr, 8u);
}

TEST_F(TransportSeam, qp_types_without_an_engine_are_refused_at_creation_with_eopnotsupp) {
    cl.open();
    cl.make_cq();
    // Raw packet, XRC send, XRC receive, driver-specific: verbs types snic has no engine for.
    for (std::uint8_t type : {8, 9, 10, 0xff}) EXPECT_EQ(cl.make_qp(type), EOPNOTSUPP) << +type;
    // Values that name no QP type at all.
    for (std::uint8_t type : {0, 1, 5, 7, 11}) EXPECT_EQ(cl.make_qp(type), EINVAL) << +type;
    // What runs on RoCEv2 is created.
    for (std::uint8_t type : {IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD})
        EXPECT_EQ(cl.make_qp(type), 0) << +type;
    EXPECT_TRUE(fake.calls.empty());  // nothing reached a transport
}

TEST(QpTypes, each_verbs_qp_type_is_run_refused_as_not_offered_or_invalid) {
    EXPECT_EQ(verbs::qp_type_refusal(IBV_QPT_RC), 0);
    EXPECT_EQ(verbs::qp_type_refusal(IBV_QPT_UC), 0);
    EXPECT_EQ(verbs::qp_type_refusal(IBV_QPT_UD), 0);
    for (std::uint32_t t : {IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV, IBV_QPT_DRIVER})
        EXPECT_EQ(verbs::qp_type_refusal(t), EOPNOTSUPP) << t;
    for (std::uint32_t t : {0u, 1u, 5u, 6u, 7u, 11u, 0xfeu, 0x100u})
        EXPECT_EQ(verbs::qp_type_refusal(t), EINVAL) << t;
}

TEST(RoceAttr, a_destination_gid_must_be_ipv4_mapped) {
    shm::QpAttr a{};
    const std::uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
    std::memcpy(a.ah_attr.dgid, mapped, 16);
    EXPECT_EQ(roce_check_attr(IBV_QP_AV, a), nullptr);
    a.ah_attr.dgid[10] = 0;  // an IPv6 address
    EXPECT_NE(roce_check_attr(IBV_QP_AV, a), nullptr);
    EXPECT_EQ(roce_check_attr(IBV_QP_PATH_MTU, a), nullptr) << "only when the AV is set";
}

// --- iWARP's rules at the seam ---------------------------------------------------------------

class IwarpSeam : public ::testing::Test {
  protected:
    IwarpSeam() : fake(resources.keys()) {
        ports[0].devices[shm::kTransportIwarp] = {"snic_iw0", &iwarp_rules(), &fake, {}, {}, {}};
    }
    // INIT as rdma_create_qp leaves a QP.
    int init(RingClient& c) {
        shm::QpAttr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        return c.c.modify(c.qp,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a);
    }
    // INIT -> RTR bound to iWARP connection `conn`, as libsnic's rdma_cm asks.
    int bind(RingClient& c, std::uint32_t conn) {
        shm::QpAttr a{};
        a.qp_state = IBV_QPS_RTR;
        a.iw_conn = conn;
        return c.c.modify(c.qp, IBV_QP_STATE | shm::kQpAttrIwConn, a);
    }

    Resources resources;
    FakeTransport fake;
    std::vector<DevicePort> ports = test_ports();
};

TEST_F(IwarpSeam, a_port_without_an_iwarp_device_refuses_to_open_one) {
    ports[0].devices[shm::kTransportIwarp] = {};
    RingClient cl(resources, ports);
    const shm::ContextLayout l = shm::context_layout(shm::kAsyncCapacity);
    ClientMemfd async(l.bytes);
    ASSERT_TRUE(
        shm::RingConsumer<shm::AsyncEvent>::init(async.span(l.events), shm::kAsyncCapacity));
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    FdList fds = fds_of({sv[1], async.fd()});
    shm::OpenDeviceReply out{};
    EXPECT_EQ(cl.c.session.open_device({0, shm::kTransportIwarp}, fds, out), ENODEV);
    FdList more = fds_of({sv[1], async.fd()});
    EXPECT_EQ(cl.c.session.open_device({0, 7}, more, out), EINVAL);
    ::close(sv[0]);
    ::close(sv[1]);
}

TEST_F(IwarpSeam, an_iwarp_device_runs_its_qps_on_the_iwarp_transport_and_rc_only) {
    RingClient cl(resources, ports);
    cl.open(shm::kTransportIwarp);
    EXPECT_EQ(cl.c.session.device()->rules->kind(), shm::kTransportIwarp);
    EXPECT_EQ(cl.c.session.device_name(), "snic_iw0");
    cl.make_cq();
    EXPECT_EQ(cl.make_qp(IBV_QPT_UD), EOPNOTSUPP);
    EXPECT_EQ(cl.make_qp(IBV_QPT_UC), EOPNOTSUPP);
    ASSERT_EQ(cl.make_qp(IBV_QPT_RC), 0);
    ASSERT_EQ(init(cl), 0);
    EXPECT_TRUE(fake.calls.empty());
}

TEST_F(IwarpSeam, modify_qp_alone_cannot_take_an_iwarp_qp_to_rtr) {
    RingClient cl(resources, ports);
    cl.open(shm::kTransportIwarp);
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    ASSERT_EQ(init(cl), 0);
    // RoCE's RTR attributes name no connection.
    shm::QpAttr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = 0x42;
    EXPECT_EQ(cl.c.modify(cl.qp,
                          IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                          a),
              EINVAL);
    EXPECT_TRUE(fake.calls.empty());
    EXPECT_EQ(cl.c.session.qp(cl.qp)->state, verbs::QpState::init);
}

TEST_F(IwarpSeam, a_binding_the_transport_refuses_leaves_the_qp_in_init) {
    RingClient cl(resources, ports);
    cl.open(shm::kTransportIwarp);
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    ASSERT_EQ(init(cl), 0);
    fake.refuse_start = true;
    EXPECT_EQ(bind(cl, 0x10005), EINVAL);
    EXPECT_EQ(fake.started_with, 0x10005u);
    const Qp& qp = *cl.c.session.qp(cl.qp);
    EXPECT_EQ(qp.state, verbs::QpState::init);
    EXPECT_EQ(qp.attr.iw_conn, 0u) << "nothing changed";
    EXPECT_FALSE(qp.engine);
}

TEST_F(IwarpSeam, rdma_cms_binding_runs_the_qp_and_rts_needs_no_roce_attributes) {
    RingClient cl(resources, ports);
    cl.open(shm::kTransportIwarp);
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    ASSERT_EQ(init(cl), 0);
    ASSERT_EQ(bind(cl, 0x20003), 0);
    EXPECT_EQ(fake.calls, (std::vector<std::string>{"start"}));
    EXPECT_EQ(fake.started_with, 0x20003u);
    shm::QpAttr a{};
    a.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE, a), 0);
    EXPECT_EQ(fake.calls, (std::vector<std::string>{"start", "start_sending"}));
    // The binding bit is for INIT -> RTR only.
    a.qp_state = IBV_QPS_RTS;
    EXPECT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE | shm::kQpAttrIwConn, a), EINVAL);
}

TEST_F(TransportSeam, the_iwarp_binding_bit_means_nothing_on_a_roce_device) {
    cl.open();
    cl.make_cq();
    ASSERT_EQ(cl.make_qp(), 0);
    shm::QpAttr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    ASSERT_EQ(
        cl.c.modify(cl.qp, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, a),
        0);
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.iw_conn = 1;
    EXPECT_EQ(cl.c.modify(cl.qp, IBV_QP_STATE | shm::kQpAttrIwConn, a), EINVAL);
    EXPECT_TRUE(fake.calls.empty());
}

// A port of two queues (port.h's lanes): a session goes to the lane with fewest sessions
// open, and its QPs start on that lane's transport; a session gone frees its place.
TEST(DeviceLanes, sessions_go_to_the_least_loaded_lane_and_their_qps_run_there) {
    Resources resources;
    FakeTransport lane0(resources.keys()), lane1(resources.keys());
    std::vector<DevicePort> ports = test_ports();
    Device& dev = ports[0].devices[shm::kTransportRoce];
    dev.transport = &lane0;
    dev.lanes = {&lane0, &lane1};
    const std::vector<std::string> started{"start", "start_sending"};
    auto connected = [&] {
        auto c = std::make_unique<RingClient>(resources, ports);
        c->open();
        c->make_cq();
        EXPECT_EQ(c->make_qp(), 0);
        EXPECT_EQ(c->connect(), 0);
        return c;
    };
    auto a = connected();
    EXPECT_EQ(lane0.calls, started);
    EXPECT_TRUE(lane1.calls.empty());
    auto b = connected();
    EXPECT_EQ(lane1.calls, started);
    EXPECT_EQ(dev.lane_sessions, (std::vector<std::uint32_t>{1, 1}));
    a.reset();
    EXPECT_EQ(dev.lane_sessions, (std::vector<std::uint32_t>{0, 1}));
    EXPECT_EQ(lane0.calls.back(), "stop");
    auto c = connected();
    EXPECT_EQ(lane0.calls.size(), 5u) << "the third session takes lane 0, free again";
    EXPECT_EQ(lane1.calls, started);
}

}  // namespace
}  // namespace snic::daemon::fixture

namespace {

using Sums = std::vector<std::pair<std::string, std::uint64_t>>;

// What a CounterSum gives, in its order.
Sums sums_of(const snic::CounterSum& sum) {
    Sums got;
    sum.for_each([&](std::string_view n, std::uint64_t v) { got.emplace_back(n, v); });
    return got;
}

}  // namespace

// A port's lanes, or a RoCE device's transports, report the same counters in the same order:
// their sums go by name, in that order, and a source with more adds its own.
TEST(CounterSum, sums_each_name_across_sources_in_order) {
    snic::CounterSum sum;
    sum.add("rx", 1);
    sum.add("tx", 2);
    sum.next();
    sum.add("rx", 10);
    sum.add("tx", 20);
    sum.next();
    sum.add("rx", 100);
    sum.add("tx", 200);
    sum.add("late", 7);
    EXPECT_EQ(sums_of(sum), (Sums{{"rx", 111}, {"tx", 222}, {"late", 7}}));
}

// A setting the sources share (a lane's TCP buffer size) is kept once, beside the sums.
TEST(CounterSum, keeps_a_shared_setting_from_the_first_source) {
    snic::CounterSum sum;
    sum.add("segments", 3);
    sum.keep("window", 65536);
    sum.next();
    sum.add("segments", 4);
    sum.keep("window", 65536);
    EXPECT_EQ(sums_of(sum), (Sums{{"segments", 7}, {"window", 65536}}));
}
