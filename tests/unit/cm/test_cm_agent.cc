// The CM agent's state machine against a fake peer: two Agents on a link with loss, time
// advanced by hand. One test per rule of IBA §12.9.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "proto/cm/cma.h"
#include "tests/unit/cm/cm_harness.h"

namespace snic::cm::test {
namespace {

constexpr std::uint64_t kReqInterval = interval_ns(10);  // ConnectParams.cm_response_timeout
constexpr std::uint64_t kRepInterval = interval_ns(10);  // A's local_cm_response_timeout

TEST(CmAgent, HappyPathReqRepRtuEstablishesBothSides) {
    CmPair p;
    const std::uint8_t req_pd[] = {1, 2, 3};
    const std::uint8_t rep_pd[] = {9, 8};
    ConnId passive = 0;
    p.ep_b.on_event = [&](const Event& e) {
        if (e.type != EventType::req_received) return;
        passive = e.id;
        EXPECT_EQ(e.remote_ip, kIpA);
        EXPECT_EQ(e.local_ip, kIpB);
        EXPECT_EQ(e.service_id, CmPair::params().service_id);
        EXPECT_EQ(e.peer.qpn, 0x111u);
        EXPECT_EQ(e.peer.psn, 0xABCDEu);
        EXPECT_EQ(e.peer.responder_resources, 4);
        EXPECT_EQ(e.peer.initiator_depth, 2);
        EXPECT_EQ(e.peer.qp_type, 2);
        QpInfo q;
        q.qpn = 0x222;
        q.psn = 0x54321;
        EXPECT_TRUE(p.b.accept(e.id, q, rep_pd, p.now).ok());
    };
    ConnectParams cp = CmPair::params();
    cp.private_data = req_pd;
    auto id = p.a.connect(cp, p.now);
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(p.a.state_of(*id), State::req_sent);
    EXPECT_EQ(p.a.half_open(), 1u);
    p.pump();
    ASSERT_EQ(p.ep_b.count(EventType::req_received), 1u);
    EXPECT_EQ(p.ep_b.private_data[0].size(), kReqPrivate);
    EXPECT_EQ(p.ep_b.private_data[0][2], 3);
    auto rep = p.ep_a.last(EventType::rep_received);
    ASSERT_TRUE(rep);
    EXPECT_EQ(rep->peer.qpn, 0x222u);
    EXPECT_EQ(rep->peer.psn, 0x54321u);
    EXPECT_EQ(p.ep_a.private_data.back()[1], 8);
    EXPECT_EQ(p.a.state_of(*id), State::rep_rcvd);
    EXPECT_EQ(p.b.state_of(passive), State::rep_sent);
    ASSERT_TRUE(p.a.confirm(*id, {}, p.now).ok());
    EXPECT_EQ(p.a.state_of(*id), State::established);
    p.pump();
    EXPECT_EQ(p.ep_b.count(EventType::established), 1u);
    EXPECT_EQ(p.b.state_of(passive), State::established);
    EXPECT_EQ(p.a.half_open(), 0u);
    EXPECT_EQ(p.b.half_open(), 0u);
    EXPECT_EQ(p.a.next_deadline(), UINT64_MAX);
    EXPECT_EQ(p.b.next_deadline(), UINT64_MAX);
    EXPECT_EQ(p.a.counters().mads_bad + p.b.counters().mads_bad, 0u);
}

TEST(CmAgent, ResponsesCarryTheRequestsTransactionId) {
    CmPair p;
    p.establish();
    auto req = p.ep_a.last_sent(AttrId::req);
    auto rep = p.ep_b.last_sent(AttrId::rep);
    ASSERT_TRUE(req && rep);
    EXPECT_TRUE(std::equal(req->mad.begin() + 8, req->mad.begin() + 16, rep->mad.begin() + 8));
}

TEST(CmAgent, DisconnectDreqDrepThenTimewaitFreesBoth) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    EXPECT_EQ(p.a.state_of(id), State::dreq_sent);
    EXPECT_TRUE(p.a.disconnect(id, {}, p.now).ok());  // again: no-op
    EXPECT_EQ(p.ep_a.sent_count(AttrId::dreq), 1u);
    p.pump();
    EXPECT_EQ(p.ep_b.count(EventType::dreq_received), 1u);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 1u);
    EXPECT_EQ(p.a.state_of(id), State::timewait);
    EXPECT_EQ(p.b.state_of(passive), State::timewait);
    p.advance(50'000'000);
    EXPECT_EQ(p.ep_a.count(EventType::timewait_exit), 1u);
    EXPECT_EQ(p.ep_b.count(EventType::timewait_exit), 1u);
    std::size_t live = 0;
    p.a.for_each_state([&](std::string_view, std::size_t n) { live += n; });
    p.b.for_each_state([&](std::string_view, std::size_t n) { live += n; });
    EXPECT_EQ(live, 0u);
}

TEST(CmAgent, LostReqIsRetransmittedAfterTheRemoteResponseTimeout) {
    CmPair p;
    p.drop = drop_first(AttrId::req, 1);
    auto id = p.a.connect(CmPair::params(), p.now);
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(p.a.next_deadline(), p.now + kReqInterval);
    p.advance(kReqInterval - 1);
    EXPECT_EQ(p.ep_b.count(EventType::req_received), 0u);
    p.advance(1);
    EXPECT_EQ(p.ep_b.count(EventType::req_received), 1u);
    EXPECT_EQ(p.a.counters().retransmits, 1u);
    EXPECT_EQ(p.ep_a.sent_count(AttrId::req), 2u);
}

TEST(CmAgent, LostRepIsRetransmittedUntilTheRtu) {
    CmPair p;
    p.drop = drop_first(AttrId::rep, 1);
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    EXPECT_EQ(p.ep_a.count(EventType::rep_received), 0u);
    EXPECT_EQ(p.b.next_deadline(), p.now + kRepInterval);
    p.ep_a.on_event = [&](const Event& e) {
        if (e.type == EventType::rep_received) {
            EXPECT_TRUE(p.a.confirm(e.id, {}, p.now).ok());
        }
    };
    p.advance(kRepInterval);
    EXPECT_EQ(p.ep_a.count(EventType::rep_received), 1u);
    EXPECT_EQ(p.a.state_of(id), State::established);
    EXPECT_EQ(p.ep_b.count(EventType::established), 1u);
    EXPECT_EQ(p.b.counters().retransmits, 1u);
}

TEST(CmAgent, LostRtuRepResentAndAnsweredWithRtuAgain) {
    CmPair p;
    p.drop = drop_first(AttrId::rtu, 1);
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    EXPECT_EQ(p.a.state_of(id), State::established);
    EXPECT_EQ(p.b.state_of(passive), State::rep_sent);
    p.advance(kRepInterval);
    EXPECT_EQ(p.ep_a.count(EventType::rep_received), 1u);  // the resent REP is a duplicate
    EXPECT_EQ(p.ep_a.sent_count(AttrId::rtu), 2u);
    EXPECT_EQ(p.b.state_of(passive), State::established);
    EXPECT_EQ(p.ep_b.count(EventType::established), 1u);
}

TEST(CmAgent, DuplicateReqBeforeTheConsumerAnswersSendsMra) {
    CmPair p;
    auto id = p.a.connect(CmPair::params(), p.now);
    ASSERT_TRUE(id.ok());
    p.pump();
    ASSERT_EQ(p.ep_b.count(EventType::req_received), 1u);
    const ConnId passive = p.ep_b.events[0].id;
    p.advance(kReqInterval);  // A resends the REQ: B's consumer has not answered
    EXPECT_EQ(p.ep_b.count(EventType::req_received), 1u);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::mra), 1u);
    EXPECT_EQ(p.b.state_of(passive), State::mra_req_sent);
    EXPECT_EQ(p.a.state_of(*id), State::mra_req_rcvd);
    EXPECT_EQ(p.a.next_deadline(), p.now + interval_ns(12));  // B's MRA service timeout
    EXPECT_EQ(p.b.counters().duplicates, 1u);
    QpInfo q;
    q.qpn = 0x333;
    ASSERT_TRUE(p.b.accept(passive, q, {}, p.now).ok());
    p.pump();
    EXPECT_EQ(p.a.state_of(*id), State::rep_rcvd);
}

TEST(CmAgent, DuplicateReqAfterRepResendsRep) {
    CmPair p;
    p.drop = drop_first(AttrId::rep, 1);
    p.ep_b.on_event = [&](const Event& e) {
        if (e.type == EventType::req_received) {
            EXPECT_TRUE(p.b.accept(e.id, QpInfo{}, {}, p.now).ok());
        }
    };
    auto id = p.a.connect(CmPair::params(), p.now);
    ASSERT_TRUE(id.ok());
    p.pump();
    // Feed A's REQ to B again by hand, before any timer.
    auto req = p.ep_a.last_sent(AttrId::req);
    p.b.receive(kIpA, kGsiQpn, req->mad, p.now);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::rep), 2u);
    EXPECT_EQ(p.ep_b.count(EventType::req_received), 1u);
    p.pump();
    EXPECT_EQ(p.a.state_of(*id), State::rep_rcvd);
}

TEST(CmAgent, DuplicateReqWhenEstablishedIsIgnored) {
    CmPair p;
    ConnId passive = 0;
    p.establish(&passive);
    const auto sent = p.ep_b.sent.size();
    p.b.receive(kIpA, kGsiQpn, p.ep_a.last_sent(AttrId::req)->mad, p.now);
    EXPECT_EQ(p.ep_b.sent.size(), sent);
    EXPECT_EQ(p.b.state_of(passive), State::established);
    EXPECT_EQ(p.b.counters().duplicates, 1u);
}

TEST(CmAgent, DuplicateReqInTimewaitIsRejectedStale) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    p.pump();
    ASSERT_EQ(p.b.state_of(passive), State::timewait);
    p.b.receive(kIpA, kGsiQpn, p.ep_a.last_sent(AttrId::req)->mad, p.now);
    auto rej = p.ep_b.last_sent(AttrId::rej);
    ASSERT_TRUE(rej);
    EXPECT_EQ(decode<RejMsg>(rej->data())->reason, rej_reason::stale_connection);
    EXPECT_EQ(p.b.counters().stale, 1u);
}

// IBA §12.9.8.3.1: a new REQ from a QP still connected to us: REJ stale to it, DREQ for
// the old connection.
TEST(CmAgent, NewReqFromAConnectedQpIsStaleAndTheOldConnectionDisconnected) {
    CmPair p;
    ConnId passive = 0;
    const ConnId old_id = p.establish(&passive, 0x111);
    p.drop = [](const SentMad& s) { return s.attr() == AttrId::dreq; };  // A never hears it
    auto id = p.a.connect(CmPair::params(0x111), p.now);
    ASSERT_TRUE(id.ok());
    p.pump();
    auto rej = p.ep_a.last(EventType::rejected);
    ASSERT_TRUE(rej);
    EXPECT_EQ(rej->id, *id);
    EXPECT_EQ(rej->reject_reason, rej_reason::stale_connection);
    EXPECT_EQ(p.b.state_of(passive), State::dreq_sent);
    EXPECT_EQ(p.ep_b.count(EventType::req_received), 1u);  // only the first
    EXPECT_EQ(p.a.state_of(old_id), State::established);
}

TEST(CmAgent, RejectAfterReqReceivedDeliversRejectedWithReasonAndData) {
    CmPair p;
    const std::uint8_t why[] = {0xAA, 0xBB};
    p.ep_b.on_event = [&](const Event& e) {
        if (e.type == EventType::req_received) {
            EXPECT_TRUE(p.b.reject(e.id, rej_reason::consumer_reject, why, p.now).ok());
        }
    };
    auto id = p.a.connect(CmPair::params(), p.now);
    p.pump();
    auto e = p.ep_a.last(EventType::rejected);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, *id);
    EXPECT_EQ(e->reject_reason, rej_reason::consumer_reject);
    EXPECT_EQ(p.ep_a.private_data.back()[1], 0xBB);
    auto rej = decode<RejMsg>(p.ep_b.last_sent(AttrId::rej)->data());
    EXPECT_EQ(rej->message_rejected, static_cast<std::uint8_t>(MsgCode::req));
    EXPECT_EQ(p.a.state_of(*id), State::timewait);
    EXPECT_EQ(p.a.half_open(), 0u);
    EXPECT_EQ(p.b.half_open(), 0u);
    EXPECT_EQ(p.a.next_deadline(), p.now + 50'000'000);
}

TEST(CmAgent, RejectAfterRepReceivedDeliversRejectedToThePassiveSide) {
    CmPair p;
    ConnId passive = 0;
    p.ep_b.on_event = [&](const Event& e) {
        if (e.type == EventType::req_received) {
            passive = e.id;
            EXPECT_TRUE(p.b.accept(e.id, QpInfo{}, {}, p.now).ok());
        }
    };
    p.ep_a.on_event = [&](const Event& e) {
        if (e.type == EventType::rep_received) {
            EXPECT_TRUE(p.a.reject(e.id, rej_reason::consumer_reject, {}, p.now).ok());
        }
    };
    auto id = p.a.connect(CmPair::params(), p.now);
    p.pump();
    auto e = p.ep_b.last(EventType::rejected);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, passive);
    auto rej = decode<RejMsg>(p.ep_a.last_sent(AttrId::rej)->data());
    EXPECT_EQ(rej->message_rejected, static_cast<std::uint8_t>(MsgCode::rep));
    EXPECT_EQ(p.b.state_of(passive), State::timewait);
    EXPECT_EQ(p.b.next_deadline(), p.now + 50'000'000);  // REP timer stopped
    EXPECT_FALSE(p.a.confirm(*id, {}, p.now).ok());
}

TEST(CmAgent, RejWhileTheConsumerHoldsAReqEndsItAsRejected) {
    CmPair p;
    auto id = p.a.connect(CmPair::params(), p.now);
    p.pump();
    const ConnId passive = p.ep_b.events.at(0).id;
    p.a.release(*id, p.now);  // the active side gives up: REJ timeout
    p.pump();
    auto e = p.ep_b.last(EventType::rejected);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, passive);
    EXPECT_EQ(e->reject_reason, rej_reason::timeout);
    EXPECT_EQ(p.b.state_of(passive), State::timewait);
    EXPECT_FALSE(p.b.accept(passive, QpInfo{}, {}, p.now).ok());
    EXPECT_EQ(p.ep_a.events.size(), 0u);  // released: no events
}

TEST(CmAgent, RejWhileDisconnectingEndsItAndInTimewaitIsIgnored) {
    CmPair p;
    p.drop = [](const SentMad& s) { return s.attr() == AttrId::dreq; };
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    RejMsg m;
    m.local_comm_id = passive;
    m.remote_comm_id = id;
    m.reason = rej_reason::stale_connection;
    p.a.receive(kIpB, kGsiQpn, build_mad(5, m), p.now);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 1u);
    EXPECT_EQ(p.a.state_of(id), State::timewait);
    const auto events = p.ep_a.events.size();
    p.a.receive(kIpB, kGsiQpn, build_mad(6, m), p.now);
    EXPECT_EQ(p.ep_a.events.size(), events);
    EXPECT_EQ(p.a.counters().mads_bad, 0u);
}

TEST(CmAgent, RejWhileEstablishedEndsTheConnection) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    RejMsg m;
    m.local_comm_id = passive;
    m.remote_comm_id = id;
    m.reason = rej_reason::stale_connection;
    p.a.receive(kIpB, kGsiQpn, build_mad(5, m), p.now);
    EXPECT_EQ(p.ep_a.count(EventType::rejected), 1u);
    EXPECT_EQ(p.a.state_of(id), State::timewait);
}

TEST(CmAgent, RejWithWrongIdsIsCountedBadAndChangesNothing) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    RejMsg m;
    m.local_comm_id = passive + 1;  // not the peer's id
    m.remote_comm_id = id;
    p.a.receive(kIpB, kGsiQpn, build_mad(5, m), p.now);
    m.local_comm_id = passive;
    p.a.receive(0x0A000009, kGsiQpn, build_mad(5, m), p.now);  // not the peer
    EXPECT_EQ(p.a.counters().drops[static_cast<std::size_t>(RxDrop::unknown_conn)], 2u);
    EXPECT_EQ(p.a.state_of(id), State::established);
}

TEST(CmAgent, SimultaneousDreqBothSidesDisconnect) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    ASSERT_TRUE(p.b.disconnect(passive, {}, p.now).ok());
    p.pump();
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 1u);
    EXPECT_EQ(p.ep_b.count(EventType::disconnected), 1u);
    EXPECT_EQ(p.ep_a.count(EventType::dreq_received), 0u);
    EXPECT_EQ(p.ep_a.sent_count(AttrId::drep), 1u);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::drep), 1u);
    EXPECT_EQ(p.a.state_of(id), State::timewait);
    EXPECT_EQ(p.b.state_of(passive), State::timewait);
    EXPECT_EQ(p.a.counters().mads_bad + p.b.counters().mads_bad, 0u);
}

TEST(CmAgent, LostDreqIsRetransmitted) {
    CmPair p;
    const ConnId id = p.establish();
    p.drop = drop_first(AttrId::dreq, 1);
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    p.pump();
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 0u);
    p.advance(kReqInterval);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 1u);
    EXPECT_EQ(p.ep_b.count(EventType::dreq_received), 1u);
}

TEST(CmAgent, LostDrepIsAnsweredAgainFromTimewait) {
    CmPair p;
    const ConnId id = p.establish();
    p.drop = drop_first(AttrId::drep, 1);
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    p.pump();
    p.advance(kReqInterval);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::drep), 2u);
    EXPECT_EQ(p.ep_b.count(EventType::dreq_received), 1u);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 1u);
}

TEST(CmAgent, DreqUnansweredDisconnectsAfterTheRetries) {
    CmPair p;
    const ConnId id = p.establish();
    p.drop = [](const SentMad& s) { return s.attr() == AttrId::dreq; };
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    p.advance(3 * kReqInterval);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 0u);
    p.advance(kReqInterval);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 1u);
    EXPECT_EQ(p.ep_a.sent_count(AttrId::dreq), 4u);  // 1 + max_cm_retries (3)
}

// A DREQ for no connection of ours is answered all the same (Linux's cm_issue_drep), so
// that a peer whose DREQ outlived our state stops resending it.
TEST(CmAgent, DreqForAnUnknownConnectionIsAnsweredWithDrep) {
    CmPair p;
    DreqMsg m;
    m.local_comm_id = 0x1234;
    m.remote_comm_id = 0x5678;  // not one of B's
    m.remote_qpn = 0x222;
    const Mad mad = build_mad(0xABCD, m);
    p.b.receive(kIpA, kGsiQpn, mad, p.now);
    const auto drep = p.ep_b.last_sent(AttrId::drep);
    ASSERT_TRUE(drep);
    EXPECT_EQ(drep->to_ip, kIpA);
    const auto r = decode<DrepMsg>(drep->data());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->local_comm_id, 0x5678u);
    EXPECT_EQ(r->remote_comm_id, 0x1234u);
    MadView v;
    ASSERT_EQ(parse_mad(drep->mad, v), MadDrop::ok);
    EXPECT_EQ(v.hdr.tid, 0xABCDu);
    EXPECT_EQ(p.b.counters().duplicates, 1u);
    EXPECT_EQ(p.b.counters().mads_bad, 0u);
}

// Linux's cm_dreq_handler: a DREQ must name the receiver's QP; one that names another is
// dropped and the connection stays.
TEST(CmAgent, DreqNamingAnotherQpIsDropped) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    DreqMsg m;
    m.local_comm_id = id;
    m.remote_comm_id = passive;
    m.remote_qpn = 0x223;  // B's QP is 0x222
    p.b.receive(kIpA, kGsiQpn, build_mad(1, m), p.now);
    EXPECT_EQ(p.b.state_of(passive), State::established);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::drep), 0u);
    EXPECT_EQ(p.b.counters().drops[static_cast<std::size_t>(RxDrop::unknown_conn)], 1u);
    m.remote_qpn = 0x222;
    p.b.receive(kIpA, kGsiQpn, build_mad(2, m), p.now);
    EXPECT_EQ(p.b.state_of(passive), State::timewait);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::drep), 1u);
}

// A message that names a connection must name both IDs as the connection knows them (Linux's
// cm_acquire_id): a DREQ or REJ with the right receiver's ID and a sender's ID of 0, or of
// another connection, names no connection, and the connection stays.
TEST(CmAgent, DreqAndRejMustNameBothCommunicationIds) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    for (const std::uint32_t sender : {0u, id ^ 1u}) {
        DreqMsg d;
        d.local_comm_id = sender;
        d.remote_comm_id = passive;
        d.remote_qpn = 0x222;
        p.b.receive(kIpA, kGsiQpn, build_mad(1, d), p.now);
        EXPECT_EQ(p.b.state_of(passive), State::established) << "DREQ from ID " << sender;
        RejMsg r;
        r.local_comm_id = sender;
        r.remote_comm_id = passive;
        r.message_rejected = static_cast<std::uint8_t>(MsgCode::rep);
        r.reason = rej_reason::consumer_reject;
        p.b.receive(kIpA, kGsiQpn, build_mad(2, r), p.now);
        EXPECT_EQ(p.b.state_of(passive), State::established) << "REJ from ID " << sender;
    }
    // The REJs are dropped; each DREQ is one for no connection of ours, answered with a DREP
    // as Linux answers one (so that a peer stops resending), which ends nothing.
    EXPECT_EQ(p.b.counters().drops[static_cast<std::size_t>(RxDrop::unknown_conn)], 2u);
    EXPECT_EQ(p.b.counters().duplicates, 2u);
    DreqMsg d;
    d.local_comm_id = id;
    d.remote_comm_id = passive;
    d.remote_qpn = 0x222;
    p.b.receive(kIpA, kGsiQpn, build_mad(3, d), p.now);
    EXPECT_EQ(p.b.state_of(passive), State::timewait);
}

// Communication IDs are a keyed permutation of a count: distinct, unlike for another key,
// and with no step from one to the next that a peer could run (the xorshift32 generator
// they once came from made each ID the state that gives the next).
TEST(CmAgent, CommunicationIdsAreAKeyedPermutation) {
    SipKey k1{}, k2{};
    k1[0] = 1;
    k2[0] = 2;
    std::set<std::uint32_t> seen;
    int same = 0;
    for (std::uint32_t x = 1; x <= 65536; ++x) {
        seen.insert(permute_id(k1, x));
        same += permute_id(k1, x) == permute_id(k2, x);
    }
    EXPECT_EQ(seen.size(), 65536u);
    EXPECT_LE(same, 2);
    CmPair p;
    std::vector<ConnId> ids;
    for (std::uint32_t q = 1; q <= 64; ++q) {
        auto id = p.a.connect(CmPair::params(q), p.now);
        ASSERT_TRUE(id.ok());
        ids.push_back(*id);
    }
    int xorshift_steps = 0;
    for (std::size_t i = 1; i < ids.size(); ++i) {
        std::uint32_t x = ids[i - 1];
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        xorshift_steps += x == ids[i];
    }
    EXPECT_EQ(xorshift_steps, 0);
}

// discard(): a REQ forgotten without a word (a full listen backlog, as Linux's ucma); the
// peer's next REQ is a new request.
TEST(CmAgent, DiscardedReqSendsNothingAndItsRetransmissionIsNew) {
    CmPair p;
    std::vector<ConnId> seen;
    p.ep_b.on_event = [&](const Event& e) {
        if (e.type == EventType::req_received) seen.push_back(e.id);
    };
    auto id = p.a.connect(CmPair::params(), p.now);
    ASSERT_TRUE(id.ok());
    p.pump();
    ASSERT_EQ(seen.size(), 1u);
    ASSERT_TRUE(p.b.discard(seen[0], p.now).ok());
    EXPECT_EQ(p.b.state_of(seen[0]), State::idle);
    EXPECT_EQ(p.b.half_open(), 0u);
    EXPECT_TRUE(p.ep_b.sent.empty());
    EXPECT_FALSE(p.b.discard(seen[0], p.now).ok());
    p.advance(kReqInterval);  // A sends its REQ again
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_NE(seen[1], seen[0]);
    EXPECT_EQ(p.b.state_of(seen[1]), State::req_rcvd);
    EXPECT_TRUE(p.ep_b.sent.empty());
    EXPECT_FALSE(p.a.discard(*id, p.now).ok());  // only a REQ received may be
}

// The primary path's flow label is the caller's (cma.c's hash of the ports, cma.h).
TEST(CmAgent, ReqCarriesTheFlowLabelItIsGiven) {
    CmPair p;
    ConnectParams cp = CmPair::params();
    cp.flow_label = roce_flow_label(47456, 7174);
    ASSERT_TRUE(p.a.connect(cp, p.now).ok());
    const auto req = p.ep_a.last_sent(AttrId::req);
    ASSERT_TRUE(req);
    const auto r = decode<ReqMsg>(req->data());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->primary.flow_label, 429734u);  // what rxe sent for these ports
}

TEST(CmAgent, ReqRetriesExhaustedIsUnreachableWithRejTimeout) {
    CmPair p;
    p.drop = [](const SentMad& s) { return s.attr() == AttrId::req; };
    auto id = p.a.connect(CmPair::params(), p.now);
    ASSERT_TRUE(id.ok());
    p.advance(4 * kReqInterval);
    EXPECT_EQ(p.ep_a.count(EventType::unreachable), 1u);
    EXPECT_EQ(p.ep_a.sent_count(AttrId::req), 4u);
    auto rej = decode<RejMsg>(p.ep_a.last_sent(AttrId::rej)->data());
    EXPECT_EQ(rej->reason, rej_reason::timeout);
    EXPECT_EQ(rej->ari_length, 8);
    EXPECT_EQ(p.a.state_of(*id), State::timewait);
    EXPECT_EQ(p.a.half_open(), 0u);
}

TEST(CmAgent, RepRetriesExhaustedUnreachableAndPeerRejected) {
    CmPair p;
    p.drop = [](const SentMad& s) { return s.attr() == AttrId::rep; };
    ConnId passive = 0;
    const ConnId id = p.establish(&passive, 0x111, 14);  // A resends no REQ meanwhile
    p.advance(4 * kRepInterval);
    EXPECT_EQ(p.ep_b.count(EventType::unreachable), 1u);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::rep), 4u);
    auto e = p.ep_a.last(EventType::rejected);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->reject_reason, rej_reason::timeout);
    EXPECT_EQ(p.a.state_of(id), State::timewait);
}

// A client's connect asking the longest waits the REQ's fields can name (31: 2.4 hours a try,
// 15 retries) to a peer that never answers holds its half-open entry for 16 tries of 4.3 s
// (2^20 units), not 39 hours: the agent bounds the wait.
TEST(CmAgent, AConnectNobodyAnswersIsGoneWithinTheAgentsBound) {
    CmPair p;
    p.drop = [](const SentMad& s) { return s.attr() == AttrId::req; };
    ConnectParams cp = CmPair::params();
    cp.cm_response_timeout = 31;
    cp.max_cm_retries = 15;
    auto id = p.a.connect(cp, p.now);
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(p.a.next_deadline(), p.now + interval_ns(20));
    p.advance(16 * interval_ns(20));
    EXPECT_EQ(p.ep_a.count(EventType::unreachable), 1u);
    EXPECT_EQ(p.ep_a.sent_count(AttrId::req), 16u);
    EXPECT_EQ(p.a.half_open(), 0u);
}

// The same for a peer's REQ that asks 31 (its local CM response timeout): the REP is resent
// at the agent's bound.
TEST(CmAgent, APeersLongResponseTimeoutIsBoundedToo) {
    AgentConfig ca = CmPair::config(kIpA, 11);
    ca.local_cm_response_timeout = 31;
    CmPair p(ca);
    p.drop = [](const SentMad& s) { return s.attr() == AttrId::rep; };
    ConnId passive = 0;
    p.establish(&passive, 0x111, 14);
    EXPECT_EQ(p.b.next_deadline(), p.now + interval_ns(20));
}

// A's REQ answered by B's MRA asking `service_timeout`: A's next deadline, A in mra_req_rcvd.
std::uint64_t deadline_after_mra(std::uint8_t service_timeout) {
    CmPair p;
    auto id = p.a.connect(CmPair::params(), p.now);
    p.pump();
    MraMsg m;
    m.local_comm_id = p.ep_b.events.at(0).id;
    m.remote_comm_id = *id;
    m.message_mraed = static_cast<std::uint8_t>(MsgCode::req);
    m.service_timeout = service_timeout;
    p.a.receive(kIpB, kGsiQpn, build_mad(9, m), p.now);
    EXPECT_EQ(p.a.state_of(*id), State::mra_req_rcvd);
    return p.a.next_deadline() - p.now;
}

TEST(CmAgent, MraFromPeerExtendsTheReqTimer) {
    EXPECT_EQ(deadline_after_mra(16), interval_ns(16));
}

// An MRA's service timeout is bounded as Linux's own MRAs ask (2^24 units, 69 s), not the
// 2.4 hours of 31.
TEST(CmAgent, AnMrasServiceTimeoutIsBounded) {
    EXPECT_EQ(deadline_after_mra(31), interval_ns(24));
}

TEST(CmAgent, HalfOpenBoundRefusesReqWithNoResources) {
    AgentConfig cb = CmPair::config(kIpB, 22);
    cb.max_half_open = 2;
    CmPair p(CmPair::config(kIpA, 11), cb);
    std::vector<ConnId> ids;
    for (std::uint32_t q = 1; q <= 3; ++q) ids.push_back(*p.a.connect(CmPair::params(q), p.now));
    p.pump();
    EXPECT_EQ(p.ep_b.count(EventType::req_received), 2u);
    EXPECT_EQ(p.b.counters().half_open_refused, 1u);
    auto e = p.ep_a.last(EventType::rejected);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, ids[2]);
    EXPECT_EQ(e->reject_reason, rej_reason::no_resources);
    EXPECT_EQ(p.b.half_open(), 2u);
}

// A full half-open table of connections that were accepted but never confirmed (REQs whose
// sender never sends the RTU, as spoofed ones never do) gives up its oldest for a new REQ:
// the old one gets REJ 4 (timeout) and its consumer `unreachable`; the new one is taken.
TEST(CmAgent, AFullTableOfUnconfirmedConnectionsGivesUpItsOldestForANewReq) {
    AgentConfig cb = CmPair::config(kIpB, 22);
    cb.max_half_open = 2;
    CmPair p(CmPair::config(kIpA, 11), cb);
    p.ep_b.on_event = [&](const Event& e) {
        if (e.type != EventType::req_received) return;
        QpInfo q;
        q.qpn = 0x200 + static_cast<std::uint32_t>(p.ep_b.count(EventType::req_received));
        EXPECT_TRUE(p.b.accept(e.id, q, {}, p.now).ok());
    };
    std::vector<ConnId> ids;
    for (std::uint32_t q = 1; q <= 2; ++q) ids.push_back(*p.a.connect(CmPair::params(q), p.now));
    p.pump();  // A never confirms: B's two connections wait for RTUs
    ASSERT_EQ(p.b.half_open(), 2u);
    const ConnId oldest = p.ep_b.events.at(0).id;
    ids.push_back(*p.a.connect(CmPair::params(3), p.now));
    p.pump();
    EXPECT_EQ(p.b.counters().half_open_evicted, 1u);
    EXPECT_EQ(p.b.counters().half_open_refused, 0u);
    EXPECT_EQ(p.ep_b.count(EventType::req_received), 3u);
    EXPECT_EQ(p.ep_b.sent_count(AttrId::rep), 3u);
    EXPECT_EQ(p.b.state_of(oldest), State::timewait);
    auto gone = p.ep_b.last(EventType::unreachable);
    ASSERT_TRUE(gone);
    EXPECT_EQ(gone->id, oldest);
    auto e = p.ep_a.last(EventType::rejected);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->id, ids[0]);
    EXPECT_EQ(e->reject_reason, rej_reason::timeout);
    EXPECT_EQ(p.b.half_open(), 2u);
}

TEST(CmAgent, ConnectBeyondTheHalfOpenBoundFails) {
    AgentConfig ca = CmPair::config(kIpA, 11);
    ca.max_half_open = 1;
    CmPair p(ca);
    ASSERT_TRUE(p.a.connect(CmPair::params(1), p.now).ok());
    auto second = p.a.connect(CmPair::params(2), p.now);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.error().code, EAGAIN);
    EXPECT_EQ(p.a.counters().half_open_refused, 1u);
}

TEST(CmAgent, LapIsAnsweredWithAprUnsupported) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    LapMsg lap;
    lap.local_comm_id = id;
    lap.remote_comm_id = passive;
    p.b.receive(kIpA, kGsiQpn, build_mad(77, lap), p.now);
    auto apr = p.ep_b.last_sent(AttrId::apr);
    ASSERT_TRUE(apr);
    auto m = decode<AprMsg>(apr->data());
    EXPECT_EQ(m->ap_status, apr_status::unsupported);
    EXPECT_EQ(m->local_comm_id, passive);
    EXPECT_EQ(m->remote_comm_id, id);
    EXPECT_EQ(apr->mad[15], 77);  // the LAP's transaction
    EXPECT_EQ(p.b.state_of(passive), State::established);
}

TEST(CmAgent, EstablishedCallBeforeRtuStopsTheRepTimer) {
    CmPair p;
    p.drop = drop_first(AttrId::rtu, 1);
    ConnId passive = 0;
    p.establish(&passive);
    p.b.established(passive, p.now);
    EXPECT_EQ(p.b.state_of(passive), State::established);
    EXPECT_EQ(p.b.next_deadline(), UINT64_MAX);
    EXPECT_EQ(p.ep_b.count(EventType::established), 0u);  // the caller knows
}

TEST(CmAgent, DreqBeforeRtuMeansEstablishedThenDisconnected) {
    CmPair p;
    p.drop = drop_first(AttrId::rtu, 1);
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    ASSERT_TRUE(p.a.disconnect(id, {}, p.now).ok());
    p.pump();
    ASSERT_EQ(p.ep_b.events.size(), 3u);
    EXPECT_EQ(p.ep_b.events[1].type, EventType::established);
    EXPECT_EQ(p.ep_b.events[2].type, EventType::dreq_received);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 1u);
}

TEST(CmAgent, ReleasePendingReqRejectsWithConsumerReasonAndSilences) {
    CmPair p;
    auto id = p.a.connect(CmPair::params(), p.now);
    p.pump();
    const ConnId passive = p.ep_b.events.at(0).id;
    p.b.release(passive, p.now);
    p.pump();
    auto e = p.ep_a.last(EventType::rejected);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->reject_reason, rej_reason::consumer_reject);
    const auto events = p.ep_b.events.size();
    p.advance(100'000'000);
    EXPECT_EQ(p.ep_b.events.size(), events);  // not even timewait_exit
    EXPECT_EQ(p.b.count_in_state(State::timewait), 0u);
    EXPECT_EQ(p.ep_a.count(EventType::timewait_exit), 1u);
    (void)id;
}

TEST(CmAgent, ReleaseEstablishedSendsDreq) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    p.a.release(id, p.now);
    p.pump();
    EXPECT_EQ(p.ep_b.count(EventType::dreq_received), 1u);
    EXPECT_EQ(p.ep_a.count(EventType::disconnected), 0u);
}

TEST(CmAgent, CallsInTheWrongStateFail) {
    CmPair p;
    ConnId passive = 0;
    const ConnId id = p.establish(&passive);
    EXPECT_EQ(p.a.accept(id, QpInfo{}, {}, p.now).error().code, EINVAL);
    EXPECT_EQ(p.b.confirm(passive, {}, p.now).error().code, EINVAL);
    EXPECT_EQ(p.a.reject(id, 28, {}, p.now).error().code, EINVAL);
    EXPECT_EQ(p.a.confirm(12345, {}, p.now).error().code, ENOENT);
    std::vector<std::uint8_t> big(93);
    ConnectParams cp = CmPair::params();
    cp.private_data = big;
    EXPECT_FALSE(p.a.connect(cp, p.now).ok());
}

TEST(CmAgent, SidrRequestAndReply) {
    CmPair p;
    p.ep_b.on_event = [&](const Event& e) {
        if (e.type == EventType::sidr_req_received) {
            EXPECT_TRUE(
                p.b.sidr_reply(e.id, sidr_status::valid, 0x777, 0x11223344, {}, p.now).ok());
        }
    };
    auto id = p.a.sidr_request(kIpA, kIpB, 0x0000000001110000ULL | 9, {}, 10, 2, p.now);
    ASSERT_TRUE(id.ok());
    p.pump();
    auto e = p.ep_a.last(EventType::sidr_rep_received);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->peer.qpn, 0x777u);
    EXPECT_EQ(e->peer.qkey, 0x11223344u);
    EXPECT_EQ(e->sidr_status, sidr_status::valid);
    EXPECT_EQ(p.a.state_of(*id), State::idle);
    EXPECT_EQ(p.b.count_in_state(State::sidr_req_rcvd), 0u);
}

TEST(CmAgent, SidrUnansweredIsUnreachable) {
    CmPair p;
    p.drop = [](const SentMad&) { return true; };
    auto id = p.a.sidr_request(kIpA, kIpB, 1, {}, 10, 2, p.now);
    ASSERT_TRUE(id.ok());
    p.advance(3 * interval_ns(10));
    EXPECT_EQ(p.ep_a.count(EventType::unreachable), 1u);
    EXPECT_EQ(p.ep_a.sent_count(AttrId::sidr_req), 3u);
}

TEST(CmAgent, BadMadsAreCountedByReason) {
    CmPair p;
    Mad m = build_mad(1, RtuMsg{});
    p.a.receive(kIpB, kGsiQpn, std::span(m).first(100), p.now);
    m[2] = 1;  // class version
    p.a.receive(kIpB, kGsiQpn, m, p.now);
    m = build_mad(1, RtuMsg{});
    m[17] = 0x1B;  // no such attribute
    p.a.receive(kIpB, kGsiQpn, m, p.now);
    m = build_mad(1, RtuMsg{});  // an RTU for nobody
    p.a.receive(kIpB, kGsiQpn, m, p.now);
    const auto& c = p.a.counters();
    EXPECT_EQ(c.mads_rx, 4u);
    EXPECT_EQ(c.mads_bad, 4u);
    EXPECT_EQ(c.drops[static_cast<std::size_t>(RxDrop::bad_mad)], 2u);
    EXPECT_EQ(c.drops[static_cast<std::size_t>(RxDrop::bad_attribute)], 1u);
    EXPECT_EQ(c.drops[static_cast<std::size_t>(RxDrop::unknown_conn)], 1u);
    EXPECT_EQ(p.ep_a.events.size(), 0u);
}

// Random bytes, and valid MADs with random bytes changed, must never crash the agent; every
// one is received and the drops add up to mads_bad.
TEST(CmAgent, GarbageMadsNeverCrashAndAreCounted) {
    CmPair p;
    ConnId passive = 0;
    p.establish(&passive);
    std::mt19937 rng(2024);
    std::vector<Mad> seeds;
    for (const SentMad& s : p.ep_a.sent) seeds.push_back(s.mad);
    for (const SentMad& s : p.ep_b.sent) seeds.push_back(s.mad);
    p.drop = [](const SentMad& s) { return s.to_ip == kIpB; };  // B hears only the fuzz
    const auto rx0 = p.b.counters().mads_rx;
    const auto bad0 = p.b.counters().mads_bad;
    std::size_t random_bad = 0;
    for (int i = 0; i < 20000; ++i) {
        if (i % 2 == 0) {
            std::vector<std::uint8_t> junk(rng() % 300);
            for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
            const bool valid_header =
                junk.size() == 256 && junk[0] == 1 && junk[1] == 7 && junk[2] == 2 && junk[3] == 3;
            random_bad += !valid_header;
            p.b.receive(kIpA, kGsiQpn, junk, p.now);
        } else {
            Mad m = seeds[rng() % seeds.size()];
            for (int k = 0; k < 4; ++k)
                m[kMadHeaderSize + rng() % kMadDataSize] ^= 1u << (rng() % 8);
            p.b.receive(i % 4 == 1 ? kIpA : rng(), kGsiQpn, m, p.now);
        }
        p.wire.clear();
        if (i % 1000 == 0) p.advance(interval_ns(12));
    }
    const auto& c = p.b.counters();
    EXPECT_EQ(c.mads_rx - rx0, 20000u);
    EXPECT_GE(c.mads_bad - bad0, random_bad);
    std::uint64_t sum = 0;
    for (auto d : c.drops) sum += d;
    EXPECT_EQ(sum, c.mads_bad);
}

}  // namespace
}  // namespace snic::cm::test
