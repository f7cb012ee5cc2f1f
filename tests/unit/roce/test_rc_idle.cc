// What an RC engine tells its owner about when to run it (next_deadline(): now, at a time,
// never), so that an idle QP costs nothing; and the send slots it borrows from a pool while it
// holds send WRs, so that an idle QP holds none. The test plays the peer.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

struct Sender : Solo {
    explicit Sender(const RcConfig& c = solo_config()) : Solo(c) { key = mem.add(1 << 20); }
    void post(std::uint64_t wr_id, std::uint32_t len, WrOp op = WrOp::send) {
        SendWr wr = send_wr(wr_id, op, key, mem.va(key), len);
        wr.remote_addr = 0x5000'0000;
        wr.rkey = 0xabcd;
        q.sq.push_back(wr);
    }
    std::uint32_t key = 0;
};

TEST(RcIdle, a_qp_with_nothing_outstanding_needs_no_poll) {
    Sender s;
    EXPECT_EQ(s.qp.next_deadline(), kRcNever);
    s.post(1, 10);
    ASSERT_EQ(s.run().size(), 1u);
    EXPECT_EQ(s.qp.next_deadline(), s.now + ack_timeout_ns(solo_config().timeout));  // ACK timer
    s.deliver(ack_packet(0x11, 100));
    s.settle();
    ASSERT_EQ(s.q.scq.size(), 1u);
    EXPECT_EQ(s.qp.next_deadline(), kRcNever);
}

TEST(RcIdle, a_burst_cut_short_is_due_now) {
    RcConfig c = solo_config();
    c.max_burst = 4;
    Sender s(c);
    s.post(1, 10 * 256);
    EXPECT_TRUE(s.poll());
    EXPECT_EQ(s.take().size(), 4u);
    EXPECT_EQ(s.qp.next_deadline(), 0u);
    s.poll();
    EXPECT_EQ(s.take().size(), 4u);
    EXPECT_EQ(s.qp.next_deadline(), 0u);
    s.poll();
    EXPECT_EQ(s.take().size(), 2u);
    EXPECT_NE(s.qp.next_deadline(), 0u);  // all sent: only the ACK timer is left
}

TEST(RcIdle, a_full_wire_is_due_now) {
    Sender s;
    s.wire.refuse = 1;
    s.post(1, 10);
    s.poll();
    EXPECT_EQ(s.take().size(), 0u);
    EXPECT_EQ(s.qp.next_deadline(), 0u);
    s.poll();
    EXPECT_EQ(s.take().size(), 1u);
}

TEST(RcIdle, a_request_that_asks_for_an_ack_makes_the_ack_due_now) {
    Solo r;
    const std::uint32_t buf = r.mem.add(64);
    r.q.rq.push_back(recv_wr(1, buf, r.mem.va(buf), 64));
    PacketSpec sp = spec_for(Opcode::rc_send_only, 0x11, solo_config().rq_psn);
    const std::uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    sp.payload = data;
    sp.ack_req = true;
    r.deliver(make_packet(sp));
    EXPECT_EQ(r.qp.next_deadline(), 0u);  // the ACK waits for a poll
    EXPECT_EQ(r.run().size(), 1u);
    EXPECT_EQ(r.qp.next_deadline(), kRcNever);
}

TEST(RcIdle, a_request_without_ackreq_is_acknowledged_at_the_coalescing_deadline) {
    Solo r;
    const std::uint32_t buf = r.mem.add(4096);
    r.q.rq.push_back(recv_wr(1, buf, r.mem.va(buf), 4096));
    PacketSpec sp = spec_for(Opcode::rc_send_first, 0x11, solo_config().rq_psn);
    std::vector<std::uint8_t> data(256, 7);
    sp.payload = data;
    r.deliver(make_packet(sp));
    EXPECT_EQ(r.run().size(), 0u);
    EXPECT_EQ(r.qp.next_deadline(), r.now + solo_config().ack_delay_ns);
}

TEST(RcIdle, a_qp_that_failed_needs_no_poll_until_a_wr_is_posted) {
    Sender s;
    s.qp.to_error();
    EXPECT_EQ(s.qp.next_deadline(), kRcNever);
    s.post(1, 10);
    s.settle();  // the owner polls it for the post: flushed
    ASSERT_EQ(s.q.scq.size(), 1u);
    EXPECT_EQ(s.q.scq[0].status, WcStatus::wr_flush_err);
    EXPECT_EQ(s.qp.next_deadline(), kRcNever);
}

// A local operation starts once every WR before it has completed, so a second one right behind
// a first waits for the poll after the first completed: the engine asks for that poll.
TEST(RcIdle, local_operations_in_a_row_ask_for_the_poll_that_starts_the_next) {
    Sender s;
    std::vector<std::uint32_t> keys;
    for (std::uint64_t i = 1; i <= 3; ++i) {
        keys.push_back(s.mem.add(64));
        SendWr inv;
        inv.wr_id = i;
        inv.op = WrOp::local_inv;
        inv.signaled = true;
        inv.imm_or_rkey = keys.back();
        s.q.sq.push_back(inv);
    }
    // Polled only while it says it has work now.
    s.poll();
    for (int i = 0; i < 10 && s.qp.next_deadline() == 0; ++i) s.poll();
    ASSERT_EQ(s.q.scq.size(), 3u);
    EXPECT_EQ(s.q.scq[2].wr_id, 3u);
    EXPECT_EQ(s.mem.invalidated, keys);
    EXPECT_EQ(s.qp.next_deadline(), kRcNever);
}

// --- send slots ------------------------------------------------------------------------------

TEST(RcSlots, an_idle_qp_holds_no_send_slots) {
    Sender s;
    EXPECT_EQ(s.qp.slot_chunks_held(), 0u);
    s.settle();  // polled with an empty queue: borrows nothing
    EXPECT_EQ(s.qp.slot_chunks_held(), 0u);
    s.post(1, 10);
    s.run();
    EXPECT_EQ(s.qp.slot_chunks_held(), 1u);
    s.deliver(ack_packet(0x11, 100));
    s.settle();
    EXPECT_EQ(s.qp.send_wrs_held(), 0u);
    EXPECT_EQ(s.qp.slot_chunks_held(), 0u);
}

TEST(RcSlots, a_chunk_goes_back_once_the_head_has_passed_it) {
    RcConfig c = solo_config();
    c.sq_depth = 128;
    c.window = 1024;
    Sender s(c);
    for (std::uint64_t i = 0; i < 70; ++i) s.post(i + 1, 10);
    EXPECT_EQ(s.run().size(), 70u);
    EXPECT_EQ(s.qp.slot_chunks_held(), 3u);  // WRs 0..31, 32..63, 64..69
    s.deliver(ack_packet(0x11, 100 + 39));   // WRs 0..39 retire
    s.settle();
    EXPECT_EQ(s.q.scq.size(), 40u);
    EXPECT_EQ(s.qp.slot_chunks_held(), 2u);
    s.deliver(ack_packet(0x11, 100 + 69));
    s.settle();
    EXPECT_EQ(s.qp.slot_chunks_held(), 0u);
}

TEST(RcSlots, a_qp_holds_at_most_256_send_wrs_and_the_rest_wait_in_the_queue) {
    RcConfig c = solo_config();
    c.sq_depth = 16384;
    c.window = 4096;
    c.max_burst = 1024;
    Sender s(c);
    for (std::uint64_t i = 0; i < 300; ++i) s.post(i + 1, 10);
    EXPECT_EQ(s.run().size(), kMaxHeldWrs);
    EXPECT_EQ(s.qp.send_wrs_held(), kMaxHeldWrs);
    EXPECT_EQ(s.qp.slot_chunks_held(), kMaxChunksPerQp);
    EXPECT_EQ(s.q.sq.size(), 300u - kMaxHeldWrs);
    s.deliver(ack_packet(0x11, 100 + kMaxHeldWrs - 1));
    EXPECT_EQ(s.run().size(), 300u - kMaxHeldWrs);  // the rest, taken as slots came back
    s.deliver(ack_packet(0x11, 100 + 299));
    s.settle();
    EXPECT_EQ(s.q.scq.size(), 300u);
    EXPECT_EQ(s.qp.slot_chunks_held(), 0u);
}

// QPs sharing a pool: when it is empty a requester takes no more WRs (they wait in the queue,
// counted as send_slot_waits) and goes on once another QP gave chunks back.
TEST(RcSlots, an_empty_pool_makes_the_requester_wait_not_fail) {
    SendSlotPool pool(1);
    FakeMemory mem;
    FakeQueues q1, q2;
    FakeWire w1, w2;
    RcConfig c = solo_config();
    RcQp one(c, mem, q1, w1, &pool), two(c, mem, q2, w2, &pool);
    const std::uint32_t key = mem.add(4096);
    q1.sq.push_back(send_wr(1, WrOp::send, key, mem.va(key), 10));
    q2.sq.push_back(send_wr(2, WrOp::send, key, mem.va(key), 10));
    RcTime now = 1'000'000;
    one.poll(now);
    EXPECT_EQ(pool.free_chunks(), 0u);
    two.poll(now);
    EXPECT_EQ(w2.sent_count, 0u);
    EXPECT_EQ(q2.sq.size(), 1u);
    EXPECT_EQ(two.counters().send_slot_waits.get(), 1u);
    EXPECT_EQ(two.next_deadline(), 0u);  // it wants to try again
    one.on_packet(ack_packet(0x11, 100).parsed(), now);
    one.poll(now);
    EXPECT_EQ(q1.scq.size(), 1u);
    EXPECT_EQ(pool.free_chunks(), 1u);
    two.poll(now);
    EXPECT_EQ(w2.sent_count, 1u);
    EXPECT_EQ(two.state(), RcState::ok);
}

TEST(RcSlots, a_destroyed_qp_gives_its_chunks_back) {
    SendSlotPool pool(4);
    FakeMemory mem;
    FakeQueues q;
    FakeWire w;
    const std::uint32_t key = mem.add(4096);
    {
        RcQp qp(solo_config(), mem, q, w, &pool);
        q.sq.push_back(send_wr(1, WrOp::send, key, mem.va(key), 10));
        qp.poll(1'000'000);
        EXPECT_EQ(pool.free_chunks(), 3u);
    }
    EXPECT_EQ(pool.free_chunks(), 4u);
}

TEST(RcSlots, the_pool_touches_only_the_chunks_it_handed_out) {
    SendSlotPool pool(100);
    EXPECT_EQ(pool.touched(), 0u);
    SlotChunk* a = pool.take();
    SlotChunk* b = pool.take();
    pool.give(a);
    EXPECT_EQ(pool.take(), a);  // the one given back last, still in cache
    EXPECT_EQ(pool.touched(), 2u);
    pool.give(a);
    pool.give(b);
    EXPECT_EQ(pool.free_chunks(), 100u);
}

TEST(RcSlots, a_send_wr_is_far_smaller_than_its_sges_and_inline_bytes_apart) {
    // SGEs (256 bytes) and inline data (256 bytes) share their room.
    EXPECT_LT(sizeof(SendWr), 400u);
    EXPECT_LT(sizeof(SendSlot), 448u);
}

}  // namespace
}  // namespace snic::roce::test
