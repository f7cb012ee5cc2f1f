// The data-plane seam (daemon/transport.h): a second, fake transport runs QPs through the same
// interface RoCEv2 uses, with the shared glue (daemon/qp_glue.h) between its engine and the
// client's rings, CQs and async events; the async events an engine raises by itself; and
// RoCEv2's own attribute rule.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/qp_glue.h"
#include "daemon/roce_transport.h"
#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon::fixture {
namespace {

// An engine that does only what a test tells it, through the glue every transport shares.
class FakeEngine final : public QpEngine {
  public:
    FakeEngine(Qp& qp, const NameTable& keys) : glue(qp, keys) {}
    bool failed() const override { return glue.failed(); }
    QpEngineView view() const override { return {}; }
    void for_each_counter(void (*)(void*, NamedCounter), void*) const override {}
    QpGlue glue;
};

// A transport that records what the session asks of it and runs "lcore" work inline.
class FakeTransport final : public Transport {
  public:
    explicit FakeTransport(const NameTable& keys) : keys_(keys) {}

    std::string_view name() const override { return "fake"; }
    void run(const std::function<void()>& fn) override {
        ++runs;
        fn();
    }
    const char* check_attr(std::uint32_t mask, const shm::QpAttr& a) const override {
        return (mask & IBV_QP_PATH_MTU) != 0 && a.path_mtu == IBV_MTU_512 ? "no 512 here" : nullptr;
    }
    Result<std::unique_ptr<QpEngine>> start(Qp& qp) override {
        calls.push_back("start");
        auto e = std::make_unique<FakeEngine>(qp, keys_);
        engine = e.get();
        return std::unique_ptr<QpEngine>(std::move(e));
    }
    void start_sending(Qp&) override {
        calls.push_back("start_sending");
        engine->glue.set_sending();
    }
    void drain(Qp& qp) override {
        calls.push_back("drain");
        engine->glue.set_draining(qp.attr.en_sqd_async_notify != 0);
        engine->glue.note_held(held);
    }
    void resume(Qp&) override {
        calls.push_back("resume");
        engine->glue.set_sending();
    }
    void to_error(Qp&) override {
        calls.push_back("to_error");
        engine->glue.note_failed(true);
    }
    void stop(Qp&) override {
        calls.push_back("stop");
        engine = nullptr;
    }
    void for_each_counter(void (*)(void*, NamedCounter), void*) const override {}
    bool poll(std::uint64_t) override { return false; }

    std::vector<std::string> calls;
    int runs = 0;
    std::uint32_t held = 0;  // send WRs the fake engine holds
    FakeEngine* engine = nullptr;

  private:
    const NameTable& keys_;
};

// A client that keeps its side of every ring: async events, a CQ, a QP's send and receive
// rings, an SRQ.
struct RingClient {
    explicit RingClient(Resources& r, std::span<const DevicePort> ports) : c(r, ports) {}

    void open() {
        const shm::ContextLayout l = shm::context_layout(shm::kAsyncCapacity);
        async = std::make_unique<ClientMemfd>(l.bytes);
        auto ring =
            shm::RingConsumer<shm::AsyncEvent>::init(async->span(l.events), shm::kAsyncCapacity);
        ASSERT_TRUE(ring);
        events.emplace(*ring);
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        FdList fds = fds_of({sv[1], async->fd()});
        shm::OpenDeviceReply out{};
        ASSERT_EQ(c.session.open_device({0, 0}, fds, out), 0);
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
    void make_qp() {
        const std::uint32_t rq = srq == kNoHandle ? 16 : 0;
        const shm::Layout l = shm::qp_layout(16, rq);
        qp_mem = std::make_unique<ClientMemfd>(l.bytes);
        auto s = shm::RingProducer<shm::SendWqe>::init(
            qp_mem->span(l.ring0, (rq == 0 ? l.bytes : l.ring1) - l.ring0), 16);
        ASSERT_TRUE(s);
        sq.emplace(*s);
        if (rq != 0) {
            ASSERT_TRUE(shm::RingProducer<shm::RecvWqe>::init(qp_mem->span(l.ring1), rq));
        }
        shm::CreateQpReq req{pd, cq, cq, srq, IBV_QPT_RC, 0, {16, rq, 1, rq == 0 ? 0u : 1u, 0},
                             16, rq};
        FdList fds = fds_of({qp_mem->fd()});
        shm::CreateQpReply out{};
        ASSERT_EQ(c.session.create_qp(req, fds, out), 0);
        qp = out.qp;
        qpn = out.qp_num;
        doorbell = out.doorbell;
    }
    // The QP's control block, as the client sees it.
    std::uint32_t sleeping() const {
        const auto* ctl = reinterpret_cast<const shm::QpControl*>(qp_mem->span().data());
        return std::atomic_ref<const std::uint32_t>(ctl->sleeping).load();
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
    std::optional<shm::RingProducer<shm::SendWqe>> sq;
};

class TransportSeam : public ::testing::Test {
  protected:
    TransportSeam() : fake(resources.keys()) { ports[0].transport = &fake; }
    // A client with a CQ and an RC QP (on an SRQ when asked) in RTS on the fake transport.
    void connect_client(bool with_srq) {
        cl.open();
        cl.make_cq();
        if (with_srq) cl.make_srq(0);
        cl.make_qp();
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

// A QP's doorbell is the slot of its number, which no other live QP has.
TEST_F(TransportSeam, each_qp_is_told_its_doorbell) {
    RingClient cl(resources, ports);
    cl.open();
    cl.make_cq();
    cl.make_qp();
    EXPECT_EQ(cl.doorbell, cl.qpn % shm::kDoorbellBits);
    EXPECT_NE(cl.c.session.qp(cl.qp)->doorbells, nullptr);
}

// The lcore stops watching a QP's send queue only after telling the client (`sleeping`), and
// only when the send queue is empty once the client can see that.
TEST_F(TransportSeam, a_qp_goes_to_sleep_only_with_an_empty_send_queue) {
    RingClient cl(resources, ports);
    cl.open();
    cl.make_cq();
    cl.make_qp();
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
    EXPECT_TRUE(glue.send_pending());
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
    cl.make_qp();
    ASSERT_EQ(cl.connect(false), 0);
    shm::SendWqe w{};
    ASSERT_TRUE(cl.sq->try_push(w));  // a client that broke the rules
    EXPECT_FALSE(fake.engine->glue.send_pending());
    EXPECT_TRUE(fake.engine->glue.try_sleep());
}

TEST_F(TransportSeam, the_transport_has_the_last_word_on_attribute_values) {
    cl.open();
    cl.make_cq();
    cl.make_qp();
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
    ASSERT_EQ(cl.c.session.modify_srq({cl.srq, IBV_SRQ_LIMIT, 16, 4}, fds, cl.c.none), 0);
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

TEST(RoceAttr, a_destination_gid_must_be_ipv4_mapped) {
    shm::QpAttr a{};
    const std::uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 2};
    std::memcpy(a.ah_attr.dgid, mapped, 16);
    EXPECT_EQ(roce_check_attr(IBV_QP_AV, a), nullptr);
    a.ah_attr.dgid[10] = 0;  // an IPv6 address
    EXPECT_NE(roce_check_attr(IBV_QP_AV, a), nullptr);
    EXPECT_EQ(roce_check_attr(IBV_QP_PATH_MTU, a), nullptr) << "only when the AV is set";
}

}  // namespace
}  // namespace snic::daemon::fixture
