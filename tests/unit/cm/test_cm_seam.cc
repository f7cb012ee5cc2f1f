// The CM service at its seam (daemon/cm/wire.h): a fake wire in place of IB CM or MPA shows
// what the service asks of a device's wire for each rdma_cm op, and what it makes of each
// event a wire hands back, with no agent, QP1 or TCP under it.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/cm/service.h"
#include "daemon/cm/wire.h"
#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon {
namespace {

constexpr std::uint8_t kRc = 2, kUd = 4;

// Records every call; refuses or accepts as a test sets it; hands events to the service
// when a test says so.
class FakeCmWire final : public CmWire {
  public:
    explicit FakeCmWire(std::uint8_t transport, bool datagrams = true, bool listens = false)
        : transport_(transport), datagrams_(datagrams), listens_(listens) {}

    std::uint8_t transport() const override { return transport_; }
    bool datagrams() const override { return datagrams_; }
    std::size_t private_max(CmMessage m, bool) const override {
        return m == CmMessage::request ? 8 : answer_max;
    }
    Result<bool> listen(std::uint16_t port, std::uint32_t, std::uint8_t, const Peer&) override {
        calls.push_back("listen " + std::to_string(port));
        if (listen_error != 0) return make_error(listen_error, "cannot listen");
        return listens_;
    }
    void unlisten(std::uint16_t port) override {
        calls.push_back("unlisten " + std::to_string(port));
    }
    Result<WireConn> connect(const CmConnectSpec& s) override {
        calls.push_back("connect");
        last_connect = s;
        last_connect.param = nullptr;
        if (refuse_connect) return make_error(ECONNREFUSED, "refused");
        if (taken_ports.contains(s.local_port)) return make_error(EADDRINUSE, "taken");
        return WireConn{next_conn++};
    }
    void owned_by(WireConn conn, const Peer& owner) override {
        calls.push_back("owned_by " + std::to_string(conn));
        owner_pid = owner.pid;
    }
    Status accept(WireConn conn, const shm::CmConnParam&, std::uint8_t qp_type) override {
        calls.push_back("accept " + std::to_string(conn) + " " + std::to_string(qp_type));
        return Ok{};
    }
    Status confirm(WireConn conn, std::span<const std::uint8_t>) override {
        calls.push_back("confirm " + std::to_string(conn));
        return Ok{};
    }
    Status reject(WireConn conn, bool request, bool, std::span<const std::uint8_t> pd) override {
        calls.push_back("reject " + std::to_string(conn) + (request ? " request" : " reply") + " " +
                        std::to_string(pd.size()));
        return Ok{};
    }
    void refuse(WireConn conn, Refusal why, bool) override {
        calls.push_back("refuse " + std::to_string(conn) + " " +
                        std::to_string(static_cast<int>(why)));
    }
    Status disconnect(WireConn conn) override {
        calls.push_back("disconnect " + std::to_string(conn));
        return Ok{};
    }
    void forget(WireConn conn) override { calls.push_back("forget " + std::to_string(conn)); }
    void release(WireConn conn) override { calls.push_back("release " + std::to_string(conn)); }
    std::uint32_t qp_binding(WireConn conn) const override {
        return transport_ == shm::kTransportIwarp ? static_cast<std::uint32_t>(conn) : 0;
    }
    void poll_fds(std::vector<int>&) const override {}
    void run(std::uint64_t) override {
        for (const CmWireEvent& e : pending) {
            queue(e);
            settle();
        }
        pending.clear();
    }
    std::uint64_t next_deadline() const override { return ~std::uint64_t{0}; }
    bool status(shm::CmPortStatus&) const override { return false; }

    std::vector<std::string> calls;
    std::size_t answer_max = 16;       // a reply's or reject's private data
    std::vector<CmWireEvent> pending;  // handed over by the next run()
    CmConnectSpec last_connect;
    std::int32_t owner_pid = 0;
    bool refuse_connect = false;
    std::set<std::uint16_t> taken_ports;  // connect() from one of them: EADDRINUSE
    int listen_error = 0;                 // listen() fails with it
    WireConn next_conn = 0x100;

  private:
    std::uint8_t transport_;
    bool datagrams_;
    bool listens_;
};

// A request of `conn` from 198.18.0.9:40000 to port 7000 of the port's address.
CmWireEvent request(WireConn conn, std::uint8_t qp_type = kRc, std::uint16_t ps = shm::kCmPsTcp) {
    CmWireEvent e;
    e.kind = CmWireEvent::Kind::request;
    e.conn = conn;
    e.local_ip = 0xc6120001;
    e.remote_ip = 0xc6120009;
    e.local_port = 7000;
    e.remote_port = 40000;
    e.ps = ps;
    e.peer.qp_type = qp_type;
    e.peer.qpn = 0x1234;
    e.peer.private_data[0] = 0xab;
    e.peer.private_data_len = 1;
    return e;
}

CmWireEvent event(CmWireEvent::Kind kind, WireConn conn, std::int32_t status = 0) {
    CmWireEvent e;
    e.kind = kind;
    e.conn = conn;
    e.status = status;
    return e;
}

class CmSeam : public ::testing::Test {
  protected:
    CmSeam() {
        service.emplace(ports, std::vector<PortWire>{{0, &roce}, {0, &iw}}, 42);
        session = service->new_session(Peer{100, 1000, 1000});
        const shm::Layout lay = shm::cm_event_layout();
        memfd = std::make_unique<fixture::ClientMemfd>(lay.bytes);
        auto r = shm::RingConsumer<shm::CmEvent>::init(memfd->span(), shm::kCmEventCapacity);
        EXPECT_TRUE(r);
        if (r) ring = *r;
        int sv[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        notify = sv[0];
        FdList fds = fixture::fds_of({sv[1], memfd->fd()});
        ::close(sv[1]);
        EXPECT_EQ(session->open(fds, resources), 0);
    }
    ~CmSeam() override {
        session.reset();
        service.reset();
        ::close(notify);
    }

    shm::Handle create(std::uint8_t qp_type = kRc, std::uint16_t ps = shm::kCmPsTcp) {
        shm::CmIdReply r{};
        EXPECT_EQ(session->create_id({7, ps, qp_type, {}}, r), 0);
        return r.id;
    }
    shm::Handle listen(std::uint32_t ip, std::uint32_t backlog, std::uint8_t qp_type = kRc) {
        const shm::Handle h = create(qp_type, qp_type == kUd ? shm::kCmPsUdp : shm::kCmPsTcp);
        shm::CmBindReply b{};
        EXPECT_EQ(session->bind({h, ip, 7000, 0, 0}, b), 0);
        EXPECT_EQ(session->listen({h, backlog}), 0);
        return h;
    }
    void hand(FakeCmWire& w, const CmWireEvent& e) {
        w.pending.push_back(e);
        service->run(0);
    }
    std::optional<shm::CmEvent> next() {
        shm::CmEvent e;
        if (ring && ring->try_pop(e)) return e;
        return std::nullopt;
    }
    std::uint32_t state_count(std::size_t state) {
        shm::CmStatusReply r;
        service->fill_status(r);
        return static_cast<std::uint32_t>(r.states[state]);
    }

    std::vector<DevicePort> ports = fixture::test_ports();
    FakeCmWire roce{static_cast<std::uint8_t>(shm::kTransportRoce)};
    FakeCmWire iw{static_cast<std::uint8_t>(shm::kTransportIwarp), false, true};
    Resources resources;
    std::optional<CmService> service;
    std::unique_ptr<CmSession> session;
    std::unique_ptr<fixture::ClientMemfd> memfd;
    std::optional<shm::RingConsumer<shm::CmEvent>> ring;
    int notify = -1;
};

TEST_F(CmSeam, a_listener_listens_on_the_wires_of_its_address_and_stops_when_it_goes) {
    const shm::Handle l = listen(0, 4);
    EXPECT_EQ(roce.calls, (std::vector<std::string>{"listen 7000"}));
    EXPECT_EQ(iw.calls, (std::vector<std::string>{"listen 7000"}));
    ASSERT_EQ(session->destroy_id({l, 0}), 0);
    EXPECT_EQ(roce.calls.size(), 1u) << "the RoCE fake listens on nothing: nothing to undo";
    EXPECT_EQ(iw.calls.back(), "unlisten 7000");
}

TEST_F(CmSeam, a_request_becomes_an_id_of_the_listeners_owner_with_the_wires_transport) {
    const shm::Handle l = listen(0, 4);
    hand(iw, request(0x77));
    EXPECT_EQ(iw.calls.back(), "owned_by 119");
    EXPECT_EQ(iw.owner_pid, 100);
    const auto e = next();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->event, shm::kCmConnectRequest);
    EXPECT_NE(e->id, l);
    EXPECT_EQ(e->token, 7u);
    EXPECT_EQ(e->transport, shm::kTransportIwarp);
    EXPECT_EQ(e->iw_conn, 0x77u) << "an iWARP QP binds to the request's connection";
    EXPECT_EQ(e->src_port, 7000);
    EXPECT_EQ(e->dst_ip, 0xc6120009u);
    EXPECT_EQ(e->dst_port, 40000);
    EXPECT_EQ(e->param.qpn, 0x1234u);
    ASSERT_EQ(e->param.private_data_len, 1);
    EXPECT_EQ(e->param.private_data[0], 0xab);
}

TEST_F(CmSeam, requests_no_listener_takes_are_refused_with_the_reason) {
    hand(roce, request(1));
    EXPECT_EQ(roce.calls.back(), "refuse 1 0") << "nobody listens on the port";
    listen(0, 1);
    hand(roce, request(2, kUd, shm::kCmPsTcp));
    EXPECT_EQ(roce.calls.back(), "refuse 2 1") << "someone listens there, not for UD";
    CmWireEvent unreadable = request(3);
    unreadable.readable = false;
    hand(roce, unreadable);
    EXPECT_EQ(roce.calls.back(), "refuse 3 1");
    hand(roce, request(4));
    ASSERT_TRUE(next());
    hand(roce, request(5));
    EXPECT_EQ(roce.calls.back(), "refuse 5 2") << "backlog 1, one pending";
    EXPECT_FALSE(next());
}

TEST_F(CmSeam, accepting_answers_through_the_wire_and_the_wire_says_when_it_is_established) {
    listen(0, 1);
    hand(roce, request(9));
    const auto req = next();
    ASSERT_TRUE(req);
    shm::CmAcceptReq a{};
    a.id = req->id;
    a.param.private_data_len = 17;
    EXPECT_EQ(session->accept(a), EINVAL) << "the fake's replies carry 16 bytes at most";
    a.param.private_data_len = 4;
    ASSERT_EQ(session->accept(a), 0);
    EXPECT_EQ(roce.calls.back(), "accept 9 2");
    EXPECT_FALSE(next()) << "not established until the wire says so";
    EXPECT_EQ(state_count(5), 1u);  // accepted
    // The listener's backlog has room again: the answered request no longer counts.
    hand(roce, request(10));
    ASSERT_TRUE(next());
    hand(roce, event(CmWireEvent::Kind::established, 9));
    const auto est = next();
    ASSERT_TRUE(est);
    EXPECT_EQ(est->event, shm::kCmEstablished);
    EXPECT_EQ(est->id, req->id);
}

TEST_F(CmSeam, the_active_side_connects_through_the_device_it_names) {
    const shm::Handle h = create();
    shm::CmConnectReq c{};
    c.id = h;
    c.dst_ip = 0xc6120009;
    c.dst_port = 5000;
    c.transport = static_cast<std::uint8_t>(shm::kTransportIwarp);
    c.param.private_data_len = 9;
    EXPECT_EQ(session->connect(c), EINVAL) << "the fake's requests carry 8 bytes at most";
    c.param.private_data_len = 8;
    c.transport = 5;
    EXPECT_EQ(session->connect(c), EINVAL) << "no such device";
    c.transport = static_cast<std::uint8_t>(shm::kTransportIwarp);
    ASSERT_EQ(session->connect(c), 0);
    EXPECT_EQ(iw.calls.back(), "connect");
    EXPECT_TRUE(roce.calls.empty());
    EXPECT_EQ(iw.last_connect.local_ip, 0xc6120001u);
    EXPECT_EQ(iw.last_connect.remote_ip, 0xc6120009u);
    EXPECT_EQ(iw.last_connect.remote_port, 5000);
    EXPECT_GE(iw.last_connect.local_port, 32768) << "bound to an ephemeral port first";
    EXPECT_EQ(iw.last_connect.ps, shm::kCmPsTcp);
    EXPECT_EQ(iw.last_connect.owner->pid, 100);

    CmWireEvent reply = event(CmWireEvent::Kind::reply, 0x100);
    reply.peer.responder_resources = 3;
    hand(iw, reply);
    const auto rep = next();
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->event, shm::kCmConnectResponse);
    EXPECT_EQ(rep->param.responder_resources, 3);
    EXPECT_EQ(rep->iw_conn, 0x100u);
    shm::CmAcceptReq a{};
    a.id = h;
    ASSERT_EQ(session->accept(a), 0);
    EXPECT_EQ(iw.calls.back(), "confirm 256");
    hand(iw, event(CmWireEvent::Kind::established, 0x100));
    EXPECT_FALSE(next()) << "the active side's own confirmation is no event";
    ASSERT_EQ(session->disconnect({h, 0}), 0);
    EXPECT_EQ(iw.calls.back(), "disconnect 256");
    EXPECT_EQ(session->disconnect({h, 0}), 0) << "disconnecting already";
}

TEST_F(CmSeam, a_datagram_request_needs_a_wire_that_carries_datagrams) {
    const shm::Handle h = create(kUd, shm::kCmPsUdp);
    shm::CmConnectReq c{};
    c.id = h;
    c.dst_ip = 0xc6120009;
    c.dst_port = 5000;
    c.transport = static_cast<std::uint8_t>(shm::kTransportIwarp);
    EXPECT_EQ(session->connect(c), EINVAL);
    EXPECT_TRUE(iw.calls.empty());
    c.transport = static_cast<std::uint8_t>(shm::kTransportRoce);
    ASSERT_EQ(session->connect(c), 0);
    EXPECT_EQ(roce.last_connect.qp_type, kUd);
    // The answer ends the exchange: the id keeps no connection.
    hand(roce, event(CmWireEvent::Kind::established, 0x100));
    const auto e = next();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->event, shm::kCmEstablished);
    EXPECT_EQ(e->param.qp_type, kUd);
    EXPECT_EQ(roce.calls.back(), "forget 256");
}

// A wire that finds a local port taken (a shared address, where the kernel uses ports of the
// ephemeral range too) makes a connect from a port the service drew draw another; a port the
// user chose is the user's, and the connect fails with EADDRINUSE.
TEST_F(CmSeam, a_drawn_port_the_wire_finds_taken_is_drawn_again) {
    shm::CmConnectReq c{};
    c.dst_ip = 0xc6120009;
    c.dst_port = 5000;
    c.transport = static_cast<std::uint8_t>(shm::kTransportIwarp);
    c.id = create();
    shm::CmBindReply b{};
    ASSERT_EQ(session->bind({c.id, 0xc6120001, 0, 0, 0}, b), 0);
    iw.taken_ports.insert(b.port);
    ASSERT_EQ(session->connect(c), 0);
    EXPECT_NE(iw.last_connect.local_port, b.port);
    EXPECT_GE(iw.last_connect.local_port, 32768);

    c.id = create();
    ASSERT_EQ(session->bind({c.id, 0xc6120001, 7100, 0, 0}, b), 0);
    iw.taken_ports.insert(7100);
    EXPECT_EQ(session->connect(c), EADDRINUSE) << "the user's own port is not drawn again";
}

TEST_F(CmSeam, failures_end_the_connection_and_the_wire_forgets_it) {
    for (const auto& [kind, type] :
         {std::pair{CmWireEvent::Kind::rejected, shm::kCmRejected},
          std::pair{CmWireEvent::Kind::unreachable, shm::kCmUnreachable},
          std::pair{CmWireEvent::Kind::connect_error, shm::kCmConnectError}}) {
        const shm::Handle h = create();
        shm::CmConnectReq c{};
        c.id = h;
        c.dst_ip = 0xc6120009;
        c.dst_port = 5000;
        ASSERT_EQ(session->connect(c), 0);
        const WireConn conn = roce.next_conn - 1;
        hand(roce, event(kind, conn, -111));
        const auto e = next();
        ASSERT_TRUE(e);
        EXPECT_EQ(e->event, type);
        EXPECT_EQ(e->status, -111);
        EXPECT_EQ(roce.calls.back(), "forget " + std::to_string(conn));
        // Later events of that connection reach nobody.
        hand(roce, event(CmWireEvent::Kind::disconnected, conn));
        EXPECT_FALSE(next());
        ASSERT_EQ(session->destroy_id({h, 0}), 0);
        EXPECT_EQ(roce.calls.back(), "forget " + std::to_string(conn)) << "nothing to release";
    }
}

TEST_F(CmSeam, rejecting_and_destroying_tell_the_wire_what_the_peer_must_hear) {
    listen(0, 4);
    hand(roce, request(20));
    hand(roce, request(21));
    const auto a = next();
    const auto b = next();
    ASSERT_TRUE(a && b);
    shm::CmRejectReq r{};
    r.id = a->id;
    r.private_data_len = 3;
    ASSERT_EQ(session->reject(r), 0);
    EXPECT_EQ(roce.calls[roce.calls.size() - 2], "reject 20 request 3");
    EXPECT_EQ(roce.calls.back(), "forget 20");
    ASSERT_EQ(session->destroy_id({b->id, 0}), 0);
    EXPECT_EQ(roce.calls.back(), "release 21") << "an id that goes with its connection";
}

// A wire may carry more private data than a client's request holds (MPA: a reject of 255
// bytes, a reply of 508): a length beyond the request's own array is refused before anything
// is copied from it, whatever the wire would take.
TEST_F(CmSeam, private_data_longer_than_the_requests_buffer_is_refused_whatever_the_wire_takes) {
    iw.answer_max = 255;
    listen(0, 4);
    hand(iw, request(30));
    const auto req = next();
    ASSERT_TRUE(req);
    const std::size_t calls = iw.calls.size();
    shm::CmRejectReq r{};
    r.id = req->id;
    r.private_data_len = sizeof r.private_data + 1;
    EXPECT_EQ(session->reject(r), EINVAL);
    shm::CmAcceptReq a{};
    a.id = req->id;
    a.param.private_data_len = 255;
    EXPECT_EQ(session->accept(a), EINVAL);
    EXPECT_EQ(iw.calls.size(), calls) << "nothing reached the wire";
    r.private_data_len = sizeof r.private_data;
    ASSERT_EQ(session->reject(r), 0);
    EXPECT_EQ(iw.calls[iw.calls.size() - 2], "reject 30 request 148");

    // The active side's confirmation of a reply (rep_received) is bounded likewise.
    const shm::Handle h = create();
    shm::CmConnectReq c{};
    c.id = h;
    c.dst_ip = 0xc6120009;
    c.dst_port = 7000;
    c.transport = static_cast<std::uint8_t>(shm::kTransportIwarp);
    ASSERT_EQ(session->connect(c), 0);
    CmWireEvent rep = event(CmWireEvent::Kind::reply, iw.next_conn - 1);
    hand(iw, rep);
    const auto got = next();
    ASSERT_TRUE(got);
    shm::CmAcceptReq confirm{};
    confirm.id = h;
    confirm.param.private_data_len = 255;
    EXPECT_EQ(session->accept(confirm), EINVAL);
    confirm.param.private_data_len = 0;
    EXPECT_EQ(session->accept(confirm), 0);
    EXPECT_EQ(iw.calls.back(), "confirm " + std::to_string(iw.next_conn - 1));
}

// As Linux's rdma_cm: a port below 1024 is root's (this session's client is uid 1000).
TEST_F(CmSeam, binding_a_privileged_port_needs_root) {
    shm::CmBindReply b{};
    EXPECT_EQ(session->bind({create(), 0, 80, 0, 0}, b), EACCES);
    EXPECT_EQ(session->bind({create(), 0, 1023, 1, 0}, b), EACCES);
    EXPECT_EQ(session->bind({create(), 0, 1024, 0, 0}, b), 0);
}

// REUSEADDR lets ids share an address while none listens; a listen wants the address alone
// (Linux's rdma_listen), so an id bound there first with REUSEADDR cannot listen in front of
// the other and take the connect requests meant for it.
TEST_F(CmSeam, reuseaddr_shares_an_address_but_not_with_a_listener) {
    const shm::Handle thief = create(), victim = create();
    shm::CmBindReply b{};
    ASSERT_EQ(session->bind({thief, 0, 7100, 1, 0}, b), 0);
    ASSERT_EQ(session->bind({victim, 0, 7100, 1, 0}, b), 0);
    EXPECT_EQ(session->listen({thief, 4}), EADDRINUSE);
    EXPECT_EQ(session->listen({victim, 4}), EADDRINUSE);
    ASSERT_EQ(session->destroy_id({thief, 0}), 0);
    ASSERT_EQ(session->listen({victim, 4}), 0);
    const shm::Handle late = create();
    EXPECT_EQ(session->bind({late, 0, 7100, 1, 0}, b), EADDRINUSE) << "the listener keeps it";
}

// snicctl cm's status, asked by a client other than root, counts that client's uid's ids only
// (the session here is uid 1000's).
TEST_F(CmSeam, the_status_shows_a_user_its_own_ids_and_root_every_id) {
    listen(0, 4);
    create();
    shm::CmStatusReply r;
    service->fill_status(r);
    EXPECT_EQ(r.ids, 2u);
    service->fill_status(r, 1000);
    EXPECT_EQ(r.ids, 2u);
    EXPECT_EQ(r.states[1], 1u);  // listening
    service->fill_status(r, 2000);
    EXPECT_EQ(r.ids, 0u);
    EXPECT_EQ(r.states[1], 0u);
}

// A listen a device cannot honour (the port's TCP listener table full) fails with the
// device's error, as Linux's rdma_listen does, instead of listening on the other devices
// alone: the id stays idle and may listen once the device can.
TEST_F(CmSeam, a_listen_a_device_cannot_honour_fails_and_leaves_the_id_idle) {
    const shm::Handle h = create();
    shm::CmBindReply b{};
    ASSERT_EQ(session->bind({h, 0, 7000, 0, 0}, b), 0);
    iw.listen_error = ENOBUFS;
    EXPECT_EQ(session->listen({h, 4}), ENOBUFS);
    EXPECT_EQ(state_count(1), 0u) << "no id listens";
    hand(iw, request(WireConn{5}));
    EXPECT_FALSE(next().has_value()) << "no connect request reaches the id";
    iw.listen_error = 0;
    EXPECT_EQ(session->listen({h, 4}), 0);
    EXPECT_EQ(state_count(1), 1u);
}

// One user (other than root) holds at most kMaxListenersPerUid listeners of the devices'
// tables (an iWARP port's TCP has 256): the next listen fails with ENOBUFS; one goes, and a
// listen succeeds again.
TEST_F(CmSeam, a_user_holds_its_share_of_listeners_and_no_more) {
    std::vector<shm::Handle> held;
    shm::CmBindReply b{};
    for (std::uint32_t i = 0; i < CmService::kMaxListenersPerUid; ++i) {
        held.push_back(create());
        ASSERT_EQ(session->bind({held.back(), 0, static_cast<std::uint16_t>(8000 + i), 0, 0}, b),
                  0);
        ASSERT_EQ(session->listen({held.back(), 4}), 0) << i;
    }
    const shm::Handle extra = create();
    ASSERT_EQ(session->bind({extra, 0, 9000, 0, 0}, b), 0);
    EXPECT_EQ(session->listen({extra, 4}), ENOBUFS);
    EXPECT_EQ(iw.calls.back(), "unlisten 9000") << "the device's listener is given back";
    ASSERT_EQ(session->destroy_id({held.front(), 0}), 0);
    EXPECT_EQ(session->listen({extra, 4}), 0);
}

// One user (other than root) has at most kMaxConnectingPerUid connects unanswered, a quarter
// of a port's half-open table: the next connect fails with EAGAIN and reaches no wire; an
// answer (here a rejection) makes room again.
TEST_F(CmSeam, a_user_holds_its_share_of_unanswered_connects_and_no_more) {
    shm::CmConnectReq c{};
    c.dst_ip = 0xc6120009;
    c.dst_port = 5000;
    c.transport = static_cast<std::uint8_t>(shm::kTransportRoce);
    WireConn first = 0;
    for (std::uint32_t i = 0; i < CmService::kMaxConnectingPerUid; ++i) {
        c.id = create();
        ASSERT_EQ(session->connect(c), 0) << i;
        if (i == 0) first = roce.next_conn - 1;
    }
    c.id = create();
    const std::size_t calls = roce.calls.size();
    EXPECT_EQ(session->connect(c), EAGAIN);
    EXPECT_EQ(roce.calls.size(), calls) << "the refused connect reached the wire";
    hand(roce, event(CmWireEvent::Kind::rejected, first));
    EXPECT_EQ(session->connect(c), 0);
}

// snicctl tcp, asked by a client other than root, lists the TCP rows of its own ids: the
// listener of its listening id (bound to any address) and the connection of the request
// its listener took; another uid's question sees none of them, nor a row no id names.
TEST_F(CmSeam, a_user_sees_the_tcp_rows_of_its_own_ids_alone) {
    listen(0, 4);
    hand(iw, request(WireConn{5}));
    shm::TcpConnInfo listener{};
    listener.state = shm::kTcpListenState;
    listener.local_ip = 0xc6120001;
    listener.local_port = 7000;
    shm::TcpConnInfo conn{};
    conn.state = 4;  // established
    conn.local_ip = 0xc6120001;
    conn.local_port = 7000;
    conn.remote_ip = 0xc6120009;
    conn.remote_port = 40000;
    shm::TcpConnInfo stranger = conn;
    stranger.remote_port = 40001;
    shm::TcpConnInfo other_listener = listener;
    other_listener.local_port = 7001;

    const TcpRowOwner mine = service->tcp_rows_of(1000, 0);
    EXPECT_TRUE(mine.owns(listener));
    EXPECT_TRUE(mine.owns(conn));
    EXPECT_FALSE(mine.owns(stranger));
    EXPECT_FALSE(mine.owns(other_listener));
    const TcpRowOwner theirs = service->tcp_rows_of(2000, 0);
    EXPECT_FALSE(theirs.owns(listener));
    EXPECT_FALSE(theirs.owns(conn));
    EXPECT_FALSE(service->tcp_rows_of(1000, 1).owns(conn)) << "the connection is port 0's";
}

}  // namespace
}  // namespace snic::daemon
