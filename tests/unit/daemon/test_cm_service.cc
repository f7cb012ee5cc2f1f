// The CM service's bookkeeping of rdma_cm ids, without a wire: who may use an id, the
// bounds per connection and per user, binding rules, and what a closing connection leaves.
#include "daemon/cm/service.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <set>
#include <vector>

#include "daemon/roce/ib_cm_wire.h"
#include "tests/unit/daemon/session_fixture.h"

namespace snic::daemon {
namespace {

class CmServiceTest : public ::testing::Test {
  protected:
    std::vector<DevicePort> ports = fixture::test_ports();
    IbCmWire wire{nullptr, ports[0].ip.addr.value, SipKey{42}, CmService::kMaxIdsPerSession};
    CmService service{ports, {{0, &wire}}, 42};

    static shm::CmCreateIdReq tcp_id(std::uint64_t token = 1) {
        return {token, shm::kCmPsTcp, 2, {}};
    }
    shm::Handle create(CmSession& s, int* err = nullptr) {
        shm::CmIdReply rep{};
        const int e = s.create_id(tcp_id(), rep);
        if (err != nullptr) *err = e;
        return e == 0 ? rep.id : shm::kNoHandle;
    }
    std::uint32_t ids() {
        shm::CmStatusReply r;
        service.fill_status(r);
        return r.ids;
    }
};

TEST_F(CmServiceTest, an_id_belongs_to_the_connection_that_made_it) {
    auto a = service.new_session(Peer{100, 1000, 1000});
    auto b = service.new_session(Peer{200, 1000, 1000});
    const shm::Handle h = create(*a);
    ASSERT_NE(h, shm::kNoHandle);
    EXPECT_EQ(b->destroy_id({h, 0}), EINVAL);  // not b's
    shm::CmBindReply rep{};
    EXPECT_EQ(b->bind({h, 0, 7000, 0, 0}, rep), EINVAL);
    EXPECT_EQ(b->listen({h, 16}), EINVAL);
    EXPECT_EQ(a->destroy_id({h, 0}), 0);
    EXPECT_EQ(a->destroy_id({h, 0}), EINVAL);  // gone
}

TEST_F(CmServiceTest, bad_port_spaces_and_qp_types_are_refused) {
    auto a = service.new_session(Peer{100, 1000, 1000});
    shm::CmIdReply rep{};
    EXPECT_EQ(a->create_id({1, 0x0999, 2, {}}, rep), EINVAL);
    EXPECT_EQ(a->create_id({1, shm::kCmPsUdp, 2, {}}, rep), EINVAL);  // UDP is UD
    EXPECT_EQ(a->create_id({1, shm::kCmPsTcp, 9, {}}, rep), EINVAL);
    EXPECT_EQ(a->create_id({1, shm::kCmPsUdp, 4, {}}, rep), 0);
}

TEST_F(CmServiceTest, binding_follows_the_port_space_and_the_address) {
    auto a = service.new_session(Peer{100, 1000, 1000});
    const shm::Handle h1 = create(*a), h2 = create(*a), h3 = create(*a);
    shm::CmBindReply rep{};
    EXPECT_EQ(a->bind({h1, 0x0a000001, 7000, 0, 0}, rep), EADDRNOTAVAIL);  // no port's address
    ASSERT_EQ(a->bind({h1, 0xc6120001, 7000, 0, 0}, rep), 0);
    EXPECT_EQ(rep.port_index, 0);
    EXPECT_EQ(a->bind({h2, 0, 7000, 0, 0}, rep), EADDRINUSE);  // the wildcard overlaps
    ASSERT_EQ(a->bind({h2, 0, 0, 0, 0}, rep), 0);              // an ephemeral port
    EXPECT_GE(rep.port, 32768);
    EXPECT_LE(rep.port, 60999);
    EXPECT_EQ(rep.port_index, shm::kCmNoPort);
    EXPECT_EQ(a->bind({h1, 0, 7001, 0, 0}, rep), EINVAL);  // bound already
    ASSERT_EQ(a->listen({h1, 0}), 0);
    EXPECT_EQ(a->listen({h1, 0}), EINVAL);
    EXPECT_EQ(a->bind({h3, 0xc6120001, 7000, 1, 0}, rep), EADDRINUSE);  // a listener's
}

// Ephemeral ports are drawn under the service's secret: distinct, in the range, and another
// daemon (another seed) draws others.
TEST_F(CmServiceTest, ephemeral_ports_depend_on_the_secret) {
    const auto draw = [](CmService& svc) {
        auto a = svc.new_session(Peer{100, 1000, 1000});
        std::vector<std::uint16_t> ports;
        for (int i = 0; i < 64; ++i) {
            shm::CmIdReply id{};
            EXPECT_EQ(a->create_id({1, shm::kCmPsTcp, 2, {}}, id), 0);
            shm::CmBindReply rep{};
            EXPECT_EQ(a->bind({id.id, 0, 0, 0, 0}, rep), 0);
            EXPECT_GE(rep.port, 32768);
            EXPECT_LE(rep.port, 60999);
            ports.push_back(rep.port);
        }
        return ports;
    };
    const std::vector<std::uint16_t> ours = draw(service);
    EXPECT_EQ(std::set<std::uint16_t>(ours.begin(), ours.end()).size(), ours.size());
    CmService other{ports, {{0, &wire}}, 43};
    EXPECT_NE(draw(other), ours);
}

TEST_F(CmServiceTest, ids_are_bounded_per_connection_and_per_user) {
    std::vector<std::unique_ptr<CmSession>> mine;
    std::uint32_t made = 0;
    int err = 0;
    // One connection: kMaxIdsPerSession, then ENOMEM.
    mine.push_back(service.new_session(Peer{100, 1000, 1000}));
    while (create(*mine.back(), &err) != shm::kNoHandle) ++made;
    EXPECT_EQ(err, ENOMEM);
    EXPECT_EQ(made, CmService::kMaxIdsPerSession);
    // More connections of the same user: kMaxIdsPerUid in all.
    while (made < CmService::kMaxIdsPerUid + CmService::kMaxIdsPerSession) {
        mine.push_back(service.new_session(Peer{100, 1000, 1000}));
        const std::uint32_t before = made;
        while (create(*mine.back(), &err) != shm::kNoHandle) ++made;
        if (made == before) break;
    }
    EXPECT_EQ(err, ENOMEM);
    EXPECT_EQ(made, CmService::kMaxIdsPerUid);
    // Another user is not held up by it.
    auto other = service.new_session(Peer{300, 2000, 2000});
    EXPECT_NE(create(*other), shm::kNoHandle);
    // Closing connections gives everything back.
    mine.clear();
    EXPECT_EQ(ids(), 1u);
    other.reset();
    EXPECT_EQ(ids(), 0u);
    auto again = service.new_session(Peer{100, 1000, 1000});
    EXPECT_NE(create(*again), shm::kNoHandle);
}

// A CM connection keeps its notification socket: counted for its user together with the
// sessions' (Resources::keep_fd), EMFILE when the user's quota is full, given back when the
// connection goes.
TEST_F(CmServiceTest, a_connection_keeps_its_socket_within_the_users_descriptor_quota) {
    Limits l = kLimits;
    l.max_fds_per_uid = 2;
    Resources r(l);
    auto open = [&](CmSession& s) {
        const shm::Layout lay = shm::cm_event_layout();
        fixture::ClientMemfd m(lay.bytes);
        EXPECT_TRUE(shm::RingConsumer<shm::CmEvent>::init(m.span(), shm::kCmEventCapacity));
        int sv[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        FdList fds = fixture::fds_of({sv[1], m.fd()});
        ::close(sv[0]);
        ::close(sv[1]);
        return s.open(fds, r);
    };
    const ClientMemoryStats before = client_memory_stats();
    auto a = service.new_session(Peer{100, 1000, 1000});
    ASSERT_EQ(open(*a), 0);
    EXPECT_EQ(a->fds(), 1u);
    fixture::Client session(r, ports, Peer{101, 1000, 1000});  // a device of the same user
    ASSERT_EQ(session.open(), 0);
    EXPECT_EQ(r.fds_of_uid(1000), 2u);
    auto b = service.new_session(Peer{102, 1000, 1000});
    EXPECT_EQ(open(*b), EMFILE);
    EXPECT_EQ(b->fds(), 0u);
    EXPECT_EQ(client_memory_stats().fds, before.fds + 2);
    auto other = service.new_session(Peer{300, 2000, 2000});
    EXPECT_EQ(open(*other), 0);
    a.reset();
    EXPECT_EQ(r.fds_of_uid(1000), 1u);
    EXPECT_EQ(open(*b), 0);
    b.reset();
    other.reset();
    EXPECT_EQ(r.fds_of_uid(1000), 1u);
    EXPECT_EQ(r.fds_of_uid(2000), 0u);
}

TEST_F(CmServiceTest, migrating_keeps_the_id_within_one_process) {
    auto a = service.new_session(Peer{100, 1000, 1000});
    auto b = service.new_session(Peer{100, 1000, 1000});
    auto stranger = service.new_session(Peer{200, 1000, 1000});
    const shm::Handle h = create(*a);
    shm::CmIdReply rep{};
    EXPECT_EQ(stranger->migrate({h, 0, a->cookie()}, rep), EINVAL);  // another process
    EXPECT_EQ(b->migrate({h, 0, 12345}, rep), EINVAL);               // no such connection
    ASSERT_EQ(b->migrate({h, 0, a->cookie()}, rep), 0);
    EXPECT_EQ(rep.id, h);
    EXPECT_EQ(a->destroy_id({h, 0}), EINVAL);  // a no longer holds it
    EXPECT_EQ(b->ids(), 1u);
    EXPECT_EQ(a->ids(), 0u);
    EXPECT_EQ(b->destroy_id({h, 0}), 0);
}

TEST_F(CmServiceTest, connecting_needs_an_idle_id_and_a_reachable_address) {
    auto a = service.new_session(Peer{100, 1000, 1000});
    const shm::Handle h = create(*a);
    shm::CmConnectReq req{};
    req.id = h;
    req.dst_ip = 0x0a000002;  // on no port's subnet
    req.dst_port = 7000;
    EXPECT_EQ(a->connect(req), ENETUNREACH);
    req.dst_ip = 0xc6120002;
    req.dst_port = 0;
    EXPECT_EQ(a->connect(req), EINVAL);
    req.dst_port = 7000;
    req.param.private_data_len = shm::kCmReqPrivate + 1;
    EXPECT_EQ(a->connect(req), EINVAL);
    req.param.private_data_len = 0;
    ASSERT_EQ(a->connect(req), 0);       // a REQ goes out (to no wire here)
    EXPECT_EQ(a->connect(req), EINVAL);  // connecting already
    shm::CmStatusReply r;
    service.fill_status(r);
    EXPECT_EQ(r.states[2], 1u);                // connecting
    EXPECT_EQ(a->disconnect({h, 0}), EINVAL);  // not connected yet
    a.reset();                                 // the REQ is given up: nothing is left
    EXPECT_EQ(ids(), 0u);
}

// A REQ nobody answers (no wire here) ends, after the agent's retries, in UNREACHABLE: an
// event with no private data, whose empty span must reach the event without a memcpy from
// a null pointer (UBSan stopped snicd there under the integration suite).
TEST_F(CmServiceTest, a_req_nobody_answers_ends_unreachable_with_no_private_data) {
    auto a = service.new_session(Peer{100, 1000, 1000});
    const shm::Handle h = create(*a);
    shm::CmConnectReq req{};
    req.id = h;
    req.dst_ip = 0xc6120002;
    req.dst_port = 7000;
    ASSERT_EQ(a->connect(req), 0);
    shm::CmStatusReply r;
    const std::uint64_t start = CmService::now_ns();
    for (std::uint64_t t = start; t < start + 3600'000'000'000ull; t += 100'000'000) {
        service.run(t);
        service.fill_status(r);
        if (r.states[2] == 0) break;  // no longer connecting
    }
    EXPECT_EQ(r.states[2], 0u) << "the REQ is given up within an hour";
    EXPECT_EQ(r.states[0], 1u) << "idle again";
    EXPECT_EQ(r.events + r.events_lost, 1u) << "one event (lost: the session has no ring here)";
}

}  // namespace
}  // namespace snic::daemon
