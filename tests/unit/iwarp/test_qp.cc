// The iWARP QP engine end to end: two engines over a byte link that cuts the stream at
// random points; every byte placed is checked, every completion seen once and in order.
#include <gtest/gtest.h>

#include <signal.h>

#include <cstring>
#include <random>

#include "tests/unit/iwarp/qp_harness.h"
#include "tests/unit/watchpoint.h"

namespace snic::iwarp::test {
namespace {

constexpr std::uint32_t kMiB = 1u << 20;

bool same(std::span<const std::uint8_t> x, std::span<const std::uint8_t> y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size()) == 0);
}

TEST(IwQp, send_random_sizes_every_byte_in_order) {
    auto p = IwPair::standard(1448, 7);
    std::mt19937 rng(3);
    constexpr int kMsgs = 24;
    const std::uint32_t src = p->a.mem.add(kMiB + 64);
    const std::uint32_t dst = p->b.mem.add(kMsgs * std::uint64_t{kMiB});
    std::vector<std::uint32_t> sizes;
    for (int i = 0; i < kMsgs; ++i) {
        std::uint32_t n = i == 0 ? 0 : (i % 6 == 0 ? kMiB : rng() % 70000);
        sizes.push_back(n);
        p->b.q.rq.push_back(
            iw_recv_wr(100 + i, dst, p->b.mem.va(dst, static_cast<std::uint64_t>(i) * kMiB), kMiB));
    }
    std::vector<std::vector<std::uint8_t>> sent;
    for (int i = 0; i < kMsgs; ++i) {
        // Each message from its own pattern, split over two SGEs.
        fill_pattern(p->a.mem.bytes(src, 0, kMiB + 64), 1000 + i);
        sent.emplace_back(p->a.mem.host(src), p->a.mem.host(src) + sizes[i]);
        SendWr wr =
            iw_send_wr(i, i % 3 == 0 ? WrOp::send : WrOp::send, src, p->a.mem.va(src), sizes[i]);
        if (sizes[i] > 10) {
            wr.num_sge = 2;
            wr.sge[0].length = sizes[i] / 3;
            wr.sge[1] = {p->a.mem.va(src, sizes[i] / 3), sizes[i] - sizes[i] / 3, src};
        }
        wr.solicited = i % 5 == 0;
        p->a.q.sq.push_back(wr);
        // Post and run one at a time so the source buffer can be refilled.
        ASSERT_TRUE(
            p->run_until([&] { return p->b.q.rcq.size() == static_cast<std::size_t>(i + 1); }));
    }
    ASSERT_TRUE(p->run_until([&] { return p->a.q.scq.size() == kMsgs; }));
    for (int i = 0; i < kMsgs; ++i) {
        const Completion& c = p->b.q.rcq[i];
        EXPECT_EQ(c.wr_id, 100u + i);
        EXPECT_EQ(c.status, WcStatus::success);
        EXPECT_EQ(c.byte_len, sizes[i]);
        EXPECT_EQ(c.solicited, i % 5 == 0);
        EXPECT_TRUE(
            same(p->b.mem.bytes(dst, static_cast<std::uint64_t>(i) * kMiB, sizes[i]), sent[i]))
            << i;
        EXPECT_EQ(p->a.q.scq[i].wr_id, static_cast<std::uint64_t>(i));
        EXPECT_EQ(p->a.q.scq[i].status, WcStatus::success);
    }
    EXPECT_EQ(p->a.stream.oversize, 0u);
    EXPECT_EQ(p->b.qp->expected_send_msn(), kMsgs + 1u);
    EXPECT_EQ(p->b.qp->counters().crc_errors.get(), 0u);
}

TEST(IwQp, write_read_random_sizes_every_byte) {
    auto p = IwPair::standard(1460, 11);
    std::mt19937 rng(5);
    const std::uint32_t la = p->a.mem.add(2 * kMiB);
    const std::uint32_t rb = p->b.mem.add(2 * kMiB);
    fill_pattern(p->a.mem.bytes(la, 0, kMiB), 1);
    fill_pattern(p->b.mem.bytes(rb, kMiB, kMiB), 2);
    std::uint64_t id = 0;
    for (int i = 0; i < 12; ++i) {
        const std::uint32_t n = i == 0 ? kMiB : rng() % 200000;
        const std::uint32_t off = rng() % (kMiB - n + 1);
        // WRITE a's [off, off+n) to b's [off, off+n).
        SendWr w = iw_send_wr(id++, WrOp::rdma_write, la, p->a.mem.va(la, off), n);
        w.remote_addr = p->b.mem.va(rb, off);
        w.rkey = rb;
        p->a.q.sq.push_back(w);
        // READ b's [kMiB+off, +n) into a's [kMiB+off, +n) over three SGEs.
        SendWr r = iw_send_wr(id++, WrOp::rdma_read, la, p->a.mem.va(la, kMiB + off), n);
        if (n >= 3) {
            r.num_sge = 3;
            r.sge[0].length = n / 3;
            r.sge[1] = {p->a.mem.va(la, kMiB + off + n / 3), n / 3, la};
            r.sge[2] = {p->a.mem.va(la, kMiB + off + 2 * (n / 3)), n - 2 * (n / 3), la};
        }
        r.remote_addr = p->b.mem.va(rb, kMiB + off);
        r.rkey = rb;
        p->a.q.sq.push_back(r);
        ASSERT_TRUE(p->run_until([&] { return p->a.q.scq.size() == id; })) << i;
        EXPECT_TRUE(same(p->b.mem.bytes(rb, off, n), p->a.mem.bytes(la, off, n))) << i;
        EXPECT_TRUE(same(p->a.mem.bytes(la, kMiB + off, n), p->b.mem.bytes(rb, kMiB + off, n)))
            << i;
    }
    for (std::uint64_t i = 0; i < id; ++i) {
        EXPECT_EQ(p->a.q.scq[i].wr_id, i);
        EXPECT_EQ(p->a.q.scq[i].status, WcStatus::success);
        EXPECT_EQ(p->a.q.scq[i].opcode,
                  i % 2 == 0 ? verbs::WcOpcode::rdma_write : verbs::WcOpcode::rdma_read);
    }
    EXPECT_TRUE(p->b.q.rcq.empty());
    EXPECT_EQ(p->a.stream.oversize + p->b.stream.oversize, 0u);
}

TEST(IwQp, completions_in_queue_order_write_waits_for_read) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rb = p->b.mem.add(4096);
    SendWr r = iw_send_wr(1, WrOp::rdma_read, la, p->a.mem.va(la), 2000);
    r.rkey = rb;
    r.remote_addr = p->b.mem.va(rb);
    SendWr w = iw_send_wr(2, WrOp::rdma_write, la, p->a.mem.va(la, 2048), 100);
    w.rkey = rb;
    w.remote_addr = p->b.mem.va(rb, 2048);
    p->a.q.sq.push_back(r);
    p->a.q.sq.push_back(w);
    p->a.qp->poll(p->now);  // both go out; the WRITE is done on the wire
    EXPECT_EQ(p->a.qp->counters().tx_write_fpdus.get(), 1u);
    EXPECT_TRUE(p->a.q.scq.empty());  // but waits behind the READ
    ASSERT_TRUE(p->run_until([&] { return p->a.q.scq.size() == 2; }));
    EXPECT_EQ(p->a.q.scq[0].wr_id, 1u);
    EXPECT_EQ(p->a.q.scq[1].wr_id, 2u);
}

TEST(IwQp, ord_limits_reads_outstanding) {
    IwConfig ca = iw_config(1), cb = iw_config(2);
    ca.ord = 2;
    cb.ird = 2;
    IwPair p(ca, cb);
    const std::uint32_t la = p.a.mem.add(8192);
    const std::uint32_t rb = p.b.mem.add(8192);
    fill_pattern(p.b.mem.bytes(rb, 0, 8192), 9);
    for (int i = 0; i < 6; ++i) {
        SendWr r = iw_send_wr(i, i % 2 ? WrOp::rdma_read : WrOp::atomic_fetch_add, la,
                              p.a.mem.va(la, i * 1024), i % 2 ? 1000 : 8);
        r.rkey = rb;
        r.remote_addr = p.b.mem.va(rb, i * 1024);
        r.compare_add = 1;
        p.a.q.sq.push_back(r);
    }
    std::uint32_t max_out = 0;
    p.a.qp->poll(p.now);
    EXPECT_EQ(
        p.a.qp->counters().tx_read_requests.get() + p.a.qp->counters().tx_atomic_requests.get(),
        2u);
    ASSERT_TRUE(p.run_until([&] {
        max_out = std::max(max_out, p.a.qp->reads_outstanding());
        return p.a.q.scq.size() == 6;
    }));
    EXPECT_LE(max_out, 2u);
    EXPECT_EQ(p.a.qp->state(), IwState::ok);
    EXPECT_EQ(p.b.qp->state(), IwState::ok);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(p.a.q.scq[i].status, WcStatus::success) << i;
}

TEST(IwQp, more_reads_than_ird_terminate) {
    IwConfig ca = iw_config(1), cb = iw_config(2);
    ca.ord = 4;
    cb.ird = 2;  // the peer promised 4: a broken negotiation
    IwPair p(ca, cb);
    const std::uint32_t la = p.a.mem.add(4096);
    const std::uint32_t rb = p.b.mem.add(4096);
    for (int i = 0; i < 3; ++i) {
        SendWr r = iw_send_wr(i, WrOp::rdma_read, la, p.a.mem.va(la), 100);
        r.rkey = rb;
        r.remote_addr = p.b.mem.va(rb);
        p.a.q.sq.push_back(r);
    }
    p.a.qp->poll(p.now);  // all three requests before the peer answers any
    p.settle();
    EXPECT_EQ(p.b.qp->terminate_sent(), term_cause(DdpUntaggedCode::no_buffer));
    EXPECT_EQ(p.a.qp->state(), IwState::error);
    ASSERT_EQ(p.a.q.scq.size(), 3u);
}

TEST(IwQp, fence_waits_for_prior_reads) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rb = p->b.mem.add(4096);
    const std::uint32_t rbuf = p->b.mem.add(4096);
    p->b.q.rq.push_back(iw_recv_wr(9, rbuf, p->b.mem.va(rbuf), 4096));
    SendWr r = iw_send_wr(1, WrOp::rdma_read, la, p->a.mem.va(la), 1000);
    r.rkey = rb;
    r.remote_addr = p->b.mem.va(rb);
    SendWr s = iw_send_wr(2, WrOp::send, la, p->a.mem.va(la), 10);
    s.fence = true;
    p->a.q.sq.push_back(r);
    p->a.q.sq.push_back(s);
    p->a.qp->poll(p->now);
    EXPECT_EQ(p->a.qp->counters().tx_read_requests.get(), 1u);
    EXPECT_EQ(p->a.qp->counters().tx_send_fpdus.get(), 0u);  // fenced behind the READ
    ASSERT_TRUE(p->run_until([&] { return p->a.q.scq.size() == 2 && p->b.q.rcq.size() == 1; }));
    EXPECT_EQ(p->a.qp->counters().tx_send_fpdus.get(), 1u);
}

TEST(IwQp, unsignaled_complete_silently) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rb = p->b.mem.add(4096);
    for (int i = 0; i < 4; ++i) {
        SendWr w = iw_send_wr(i, WrOp::rdma_write, la, p->a.mem.va(la), 100, i == 3);
        w.rkey = rb;
        w.remote_addr = p->b.mem.va(rb);
        p->a.q.sq.push_back(w);
    }
    p->settle();
    ASSERT_EQ(p->a.q.scq.size(), 1u);
    EXPECT_EQ(p->a.q.scq[0].wr_id, 3u);
    EXPECT_EQ(p->a.qp->send_wrs_held(), 0u);
}

TEST(IwQp, send_with_invalidate_invalidates_before_the_receive_completes) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rbuf = p->b.mem.add(4096);
    const std::uint32_t win = p->b.mem.add(4096);
    p->b.q.rq.push_back(iw_recv_wr(5, rbuf, p->b.mem.va(rbuf), 4096));
    SendWr s = iw_send_wr(1, WrOp::send_inv, la, p->a.mem.va(la), 64);
    s.imm_or_rkey = win;
    s.solicited = true;
    p->a.q.sq.push_back(s);
    ASSERT_TRUE(p->run_until([&] { return p->b.q.rcq.size() == 1; }));
    const Completion& c = p->b.q.rcq[0];
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_TRUE(c.with_inv);
    EXPECT_EQ(c.imm_or_rkey, win);
    EXPECT_TRUE(c.solicited);
    EXPECT_FALSE(p->b.mem.region(win).valid);
    ASSERT_EQ(p->b.mem.invalidated.size(), 1u);
    // Use of the invalidated key is fatal: a WRITE to it is answered with a Terminate.
    SendWr w = iw_send_wr(2, WrOp::rdma_write, la, p->a.mem.va(la), 8);
    w.rkey = win;
    w.remote_addr = p->b.mem.va(win);
    p->a.q.sq.push_back(w);
    p->settle();
    EXPECT_EQ(p->b.qp->state(), IwState::error);
    EXPECT_EQ(p->b.qp->terminate_sent(), term_cause(DdpTaggedCode::invalid_stag));
    EXPECT_EQ(p->a.qp->terminate_received(), term_cause(DdpTaggedCode::invalid_stag));
}

TEST(IwQp, no_posted_receive_terminates_both_sides) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p->a.mem.va(la), 10));
    p->settle();
    EXPECT_EQ(p->b.qp->state(), IwState::error);
    EXPECT_EQ(p->b.qp->error(), IwError::remote_error);
    EXPECT_EQ(p->b.qp->terminate_sent(), term_cause(DdpUntaggedCode::no_buffer));
    EXPECT_EQ(p->a.qp->state(), IwState::error);
    EXPECT_EQ(p->a.qp->error(), IwError::remote_terminate);
    EXPECT_EQ(p->a.qp->terminate_received(), term_cause(DdpUntaggedCode::no_buffer));
    EXPECT_TRUE(p->a.qp->wants_close());
    EXPECT_TRUE(p->b.qp->wants_close());
    EXPECT_FALSE(p->b.qp->terminate_pending());
}

TEST(IwQp, message_too_long_for_the_receive) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rbuf = p->b.mem.add(4096);
    p->b.q.rq.push_back(iw_recv_wr(5, rbuf, p->b.mem.va(rbuf), 100));
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p->a.mem.va(la), 101));
    p->settle();
    ASSERT_EQ(p->b.q.rcq.size(), 1u);
    EXPECT_EQ(p->b.q.rcq[0].status, WcStatus::loc_len_err);
    EXPECT_EQ(p->b.qp->terminate_sent(), term_cause(DdpUntaggedCode::too_long));
    EXPECT_EQ(p->a.qp->state(), IwState::error);
}

TEST(IwQp, read_access_errors_terminate_with_the_right_code_and_status) {
    struct Case {
        const char* name;
        int kind;  // 0 bad key, 1 out of bounds, 2 no access, 3 QP without remote read
        TermCause cause;
    };
    const Case cases[] = {
        {"bad_key", 0, term_cause(RdmapEtype::remote_protection, RdmapCode::invalid_stag)},
        {"bounds", 1, term_cause(RdmapEtype::remote_protection, RdmapCode::base_or_bounds)},
        {"access", 2, term_cause(RdmapEtype::remote_protection, RdmapCode::access_rights)},
        {"qp_access", 3, term_cause(RdmapEtype::remote_protection, RdmapCode::access_rights)},
    };
    for (const Case& k : cases) {
        IwConfig cb = iw_config(2);
        if (k.kind == 3) cb.remote_access = verbs::access::remote_write;
        IwPair p(iw_config(1), cb);
        const std::uint32_t la = p.a.mem.add(4096);
        const std::uint32_t rb =
            p.b.mem.add(4096, k.kind == 2 ? verbs::access::local_write | verbs::access::remote_write
                                          : kAllAccess);
        SendWr r = iw_send_wr(1, WrOp::rdma_read, la, p.a.mem.va(la), 100);
        r.rkey = k.kind == 0 ? rb + 1 : rb;
        r.remote_addr = p.b.mem.va(rb, k.kind == 1 ? 4000 : 0);
        p.a.q.sq.push_back(r);
        p.a.q.sq.push_back(iw_send_wr(2, WrOp::rdma_write, la, p.a.mem.va(la), 0));
        p.settle();
        EXPECT_EQ(p.b.qp->terminate_sent(), k.cause) << k.name;
        EXPECT_EQ(p.a.qp->terminate_received(), k.cause) << k.name;
        ASSERT_EQ(p.a.q.scq.size(), 2u) << k.name;
        EXPECT_EQ(p.a.q.scq[0].status, WcStatus::rem_access_err) << k.name;
        EXPECT_EQ(p.a.q.scq[1].status, WcStatus::wr_flush_err) << k.name;
    }
}

TEST(IwQp, write_out_of_bounds_writes_nothing) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rb = p->b.mem.add(4096);
    fill_pattern(p->a.mem.bytes(la, 0, 4096), 4);
    SendWr w = iw_send_wr(1, WrOp::rdma_write, la, p->a.mem.va(la), 200);
    w.rkey = rb;
    w.remote_addr = p->b.mem.va(rb, 4000);
    p->a.q.sq.push_back(w);
    p->settle();
    EXPECT_EQ(p->b.qp->terminate_sent(), term_cause(DdpTaggedCode::base_or_bounds));
    for (std::uint8_t x : p->b.mem.bytes(rb, 0, 4096)) ASSERT_EQ(x, 0);
    EXPECT_EQ(p->a.qp->state(), IwState::error);
}

TEST(IwQp, write_with_immediate) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(8192);
    const std::uint32_t rb = p->b.mem.add(8192);
    const std::uint32_t rbuf = p->b.mem.add(64);
    fill_pattern(p->a.mem.bytes(la, 0, 8192), 8);
    p->b.q.rq.push_back(iw_recv_wr(7, rbuf, p->b.mem.va(rbuf), 64));
    SendWr w = iw_send_wr(1, WrOp::rdma_write_imm, la, p->a.mem.va(la), 5000);
    w.rkey = rb;
    w.remote_addr = p->b.mem.va(rb);
    w.imm_or_rkey = 0x12345678;
    p->a.q.sq.push_back(w);
    ASSERT_TRUE(p->run_until([&] { return p->b.q.rcq.size() == 1 && p->a.q.scq.size() == 1; }));
    const Completion& c = p->b.q.rcq[0];
    EXPECT_EQ(c.opcode, verbs::WcOpcode::recv_rdma_with_imm);
    EXPECT_TRUE(c.with_imm);
    EXPECT_EQ(c.imm_or_rkey, 0x12345678u);
    EXPECT_EQ(c.byte_len, 5000u) << "the Write's length, as RoCE reports it";
    EXPECT_TRUE(same(p->b.mem.bytes(rb, 0, 5000), p->a.mem.bytes(la, 0, 5000)));
    EXPECT_EQ(p->b.qp->counters().rx_immediates.get(), 1u);
}

TEST(IwQp, send_with_immediate_is_refused_as_by_rnics) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(64);
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send_imm, la, p->a.mem.va(la), 8));
    p->settle();
    ASSERT_EQ(p->a.q.scq.size(), 1u);
    EXPECT_EQ(p->a.q.scq[0].status, WcStatus::loc_qp_op_err);
}

// A's atomic `op` on b's word at rb (40 when it was made by forty()), its original value
// returned to la at offset `lo`.
SendWr atomic_on(IwPair& p, std::uint64_t id, WrOp op, std::uint32_t la, std::uint64_t lo,
                 std::uint32_t rb) {
    SendWr w = iw_send_wr(id, op, la, p.a.mem.va(la, lo), 8);
    w.rkey = rb;
    w.remote_addr = p.b.mem.va(rb);
    return w;
}

// A word of 40 in b's memory (its key), and a's buffer for the original values (its key).
std::pair<std::uint32_t, std::uint32_t> forty(IwPair& p) {
    const std::uint32_t la = p.a.mem.add(64);
    const std::uint32_t rb = p.b.mem.add(64);
    const std::uint64_t v = 40;
    std::memcpy(p.b.mem.host(rb), &v, 8);
    return {la, rb};
}

TEST(IwQp, atomics_return_the_original_value) {
    auto p = IwPair::standard();
    const auto [la, rb] = forty(*p);
    std::uint64_t v = 0;
    SendWr fa = atomic_on(*p, 1, WrOp::atomic_fetch_add, la, 0, rb);
    fa.compare_add = 2;
    SendWr cs = atomic_on(*p, 2, WrOp::atomic_cmp_swp, la, 8, rb);
    cs.compare_add = 42;
    cs.swap = 7;
    SendWr cs2 = atomic_on(*p, 3, WrOp::atomic_cmp_swp, la, 16, rb);
    cs2.compare_add = 42;  // no longer matches
    cs2.swap = 99;
    p->a.q.sq.push_back(fa);
    p->a.q.sq.push_back(cs);
    p->a.q.sq.push_back(cs2);
    ASSERT_TRUE(p->run_until([&] { return p->a.q.scq.size() == 3; }));
    std::uint64_t got[3];
    std::memcpy(got, p->a.mem.host(la), sizeof got);
    EXPECT_EQ(got[0], 40u);
    EXPECT_EQ(got[1], 42u);
    EXPECT_EQ(got[2], 7u);
    std::memcpy(&v, p->b.mem.host(rb), 8);
    EXPECT_EQ(v, 7u);
    for (const Completion& c : p->a.q.scq) EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(p->a.q.scq[0].opcode, verbs::WcOpcode::fetch_add);
    EXPECT_EQ(p->a.q.scq[1].opcode, verbs::WcOpcode::comp_swap);
}

TEST(IwQp, misaligned_atomic_terminates) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(64);
    const std::uint32_t rb = p->b.mem.add(64);
    SendWr fa = iw_send_wr(1, WrOp::atomic_fetch_add, la, p->a.mem.va(la), 8);
    fa.rkey = rb;
    fa.remote_addr = p->b.mem.va(rb, 4);
    p->a.q.sq.push_back(fa);
    p->settle();
    ASSERT_EQ(p->a.q.scq.size(), 1u);
    EXPECT_EQ(p->a.q.scq[0].status, WcStatus::rem_access_err);
}

// The word an atomic targets is shared with the client's CPUs and with QPs on other lcores:
// a write that comes between the engine's read of it and its write is not lost. A watchpoint
// on the word stops the engine right after its first access, and the trap's handler adds
// 1000 to the word as another CPU would; a plain read and write would then store 42 over it.
snic::test::Watchpoint* g_word_watch = nullptr;
std::uint64_t* g_word = nullptr;

void another_cpu_adds(int, siginfo_t*, void*) {
    g_word_watch->off();  // once, and never a trap inside the handler
    __atomic_fetch_add(g_word, 1000, __ATOMIC_SEQ_CST);
}

TEST(IwQp, an_atomic_loses_no_write_made_between_its_read_and_its_write) {
    auto p = IwPair::standard();
    const auto [la, rb] = forty(*p);
    const snic::test::TrapHandler handler(another_cpu_adds);
    ASSERT_TRUE(handler.ok());
    snic::test::Watchpoint watch(p->b.mem.host(rb), 8,
                                 snic::test::Watchpoint::On::reads_and_writes);
    if (watch.error() != 0)
        GTEST_SKIP() << "no watchpoints here (perf_event_open: " << std::strerror(watch.error())
                     << ")";
    g_word_watch = &watch;
    g_word = reinterpret_cast<std::uint64_t*>(p->b.mem.host(rb));
    SendWr fa = atomic_on(*p, 1, WrOp::atomic_fetch_add, la, 0, rb);
    fa.compare_add = 2;
    p->a.q.sq.push_back(fa);
    watch.on();
    std::uint64_t v = 0;
    ASSERT_TRUE(p->run_until([&] { return p->a.q.scq.size() == 1; }));
    watch.off();
    std::memcpy(&v, p->b.mem.host(rb), 8);
    EXPECT_EQ(v, 1042u);  // 40, the other CPU's 1000, the atomic's 2
    std::memcpy(&v, p->a.mem.host(la), 8);
    EXPECT_EQ(v, 1040u);  // the original value is the one the add was made to
    EXPECT_EQ(p->a.q.scq[0].status, WcStatus::success);
}

TEST(IwQp, to_error_flushes_in_order) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rb = p->b.mem.add(4096);
    for (int i = 0; i < 3; ++i) p->a.q.rq.push_back(iw_recv_wr(50 + i, la, p->a.mem.va(la), 64));
    SendWr r = iw_send_wr(1, WrOp::rdma_read, la, p->a.mem.va(la), 100);
    r.rkey = rb;
    r.remote_addr = p->b.mem.va(rb);
    p->a.q.sq.push_back(r);
    p->a.q.sq.push_back(iw_send_wr(2, WrOp::rdma_write, la, p->a.mem.va(la), 0, false));
    p->a.qp->poll(p->now);  // the READ is out, the WRITE done behind it
    p->a.q.sq.push_back(iw_send_wr(3, WrOp::send, la, p->a.mem.va(la), 5));
    p->a.qp->to_error();
    EXPECT_FALSE(p->a.qp->wants_close());
    ASSERT_EQ(p->a.q.scq.size(), 3u);
    for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(p->a.q.scq[i].wr_id, i + 1u);
        EXPECT_EQ(p->a.q.scq[i].status, WcStatus::wr_flush_err);
    }
    ASSERT_EQ(p->a.q.rcq.size(), 3u);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(p->a.q.rcq[i].wr_id, 50u + i);
    // Posted later: flushed by poll().
    p->a.q.sq.push_back(iw_send_wr(4, WrOp::send, la, p->a.mem.va(la), 5));
    p->a.q.rq.push_back(iw_recv_wr(60, la, p->a.mem.va(la), 64));
    EXPECT_TRUE(p->a.qp->poll(p->now));
    EXPECT_EQ(p->a.q.scq.back().wr_id, 4u);
    EXPECT_EQ(p->a.q.rcq.back().wr_id, 60u);
}

TEST(IwQp, stream_end_flushes_and_asks_to_close) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    p->a.q.rq.push_back(iw_recv_wr(50, la, p->a.mem.va(la), 64));
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p->a.mem.va(la), 5));
    p->a.qp->on_stream_end(false);
    EXPECT_EQ(p->a.qp->error(), IwError::stream_lost);
    EXPECT_TRUE(p->a.qp->wants_close());
    EXPECT_FALSE(p->a.qp->terminate_pending());
    ASSERT_EQ(p->a.q.scq.size(), 1u);
    EXPECT_EQ(p->a.q.scq[0].status, WcStatus::wr_flush_err);
    ASSERT_EQ(p->a.q.rcq.size(), 1u);
    EXPECT_FALSE(p->a.qp->poll(p->now));
    EXPECT_EQ(p->a.stream.fpdus, 0u);
}

TEST(IwQp, corrupted_byte_caught_by_crc) {
    auto p = IwPair::standard(1448, 21);
    const std::uint32_t la = p->a.mem.add(100000);
    const std::uint32_t rbuf = p->b.mem.add(100000);
    p->b.q.rq.push_back(iw_recv_wr(5, rbuf, p->b.mem.va(rbuf), 100000));
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p->a.mem.va(la), 100000));
    p->corrupt_at = 30000;
    p->settle();
    EXPECT_EQ(p->b.qp->counters().crc_errors.get(), 1u);
    EXPECT_EQ(p->b.qp->error(), IwError::crc_error);
    EXPECT_EQ(p->b.qp->terminate_sent(), term_cause(LlpCode::crc_error));
    EXPECT_EQ(p->a.qp->terminate_received(), term_cause(LlpCode::crc_error));
    ASSERT_EQ(p->b.q.rcq.size(), 1u);
    EXPECT_EQ(p->b.q.rcq[0].status, WcStatus::wr_flush_err);
}

// The CRC of an FPDU whose payload is placed is folded into the placement's copy (FpduCrcFold):
// a damaged one still completes nothing and ends in the CRC error, never in another cause.
// The a->b stream holds only what the test sends: FPDU byte 2 is the DDP control byte, bytes
// 4-7 a tagged segment's STag.
TEST(IwQp, a_damaged_send_in_one_fpdu_completes_nothing) {
    auto p = IwPair::standard(1448, 22);
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rbuf = p->b.mem.add(4096);
    p->b.q.rq.push_back(iw_recv_wr(5, rbuf, p->b.mem.va(rbuf), 4096));
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p->a.mem.va(la), 1000));
    p->corrupt_at = 600;  // in the payload of the Send's only FPDU
    p->settle();
    EXPECT_EQ(p->b.qp->counters().crc_errors.get(), 1u);
    EXPECT_EQ(p->b.qp->error(), IwError::crc_error);
    EXPECT_EQ(p->a.qp->terminate_received(), term_cause(LlpCode::crc_error));
    ASSERT_EQ(p->b.q.rcq.size(), 1u);
    EXPECT_EQ(p->b.q.rcq[0].status, WcStatus::wr_flush_err);
}

TEST(IwQp, a_damaged_write_is_a_crc_error) {
    for (const std::uint64_t at : {std::uint64_t{5}, std::uint64_t{700}}) {  // STag, payload
        auto p = IwPair::standard(1448, 23);
        const std::uint32_t la = p->a.mem.add(4096);
        const std::uint32_t rb = p->b.mem.add(4096);
        SendWr w = iw_send_wr(1, WrOp::rdma_write, la, p->a.mem.va(la), 1000);
        w.remote_addr = p->b.mem.va(rb);
        w.rkey = rb;
        p->a.q.sq.push_back(w);
        p->corrupt_at = at;
        p->settle();
        EXPECT_EQ(p->b.qp->counters().crc_errors.get(), 1u) << at;
        EXPECT_EQ(p->b.qp->error(), IwError::crc_error) << at;
        EXPECT_EQ(p->b.qp->terminate_sent(), term_cause(LlpCode::crc_error)) << at;
        EXPECT_EQ(p->a.qp->terminate_received(), term_cause(LlpCode::crc_error)) << at;
    }
}

TEST(IwQp, a_damaged_read_response_completes_no_read) {
    auto p = IwPair::standard(1448, 24);
    const std::uint32_t ra = p->a.mem.add(4096);  // a's region, read by b
    const std::uint32_t lb = p->b.mem.add(4096);
    fill_pattern(p->a.mem.bytes(ra, 0, 4096), 9);
    SendWr r = iw_send_wr(1, WrOp::rdma_read, lb, p->b.mem.va(lb), 4000);
    r.remote_addr = p->a.mem.va(ra);
    r.rkey = ra;
    p->b.q.sq.push_back(r);
    // a -> b carries the Read Response alone, in FPDUs of 1,448 bytes: this is in the last.
    p->corrupt_at = 3500;
    p->settle();
    EXPECT_EQ(p->b.qp->counters().crc_errors.get(), 1u);
    EXPECT_EQ(p->b.qp->error(), IwError::crc_error);
    ASSERT_EQ(p->b.q.scq.size(), 1u);
    EXPECT_NE(p->b.q.scq[0].status, WcStatus::success);
}

TEST(IwQp, mss_change_mid_stream) {
    auto p = IwPair::standard(1448, 13);
    const std::uint32_t la = p->a.mem.add(kMiB);
    const std::uint32_t rbuf = p->b.mem.add(kMiB);
    fill_pattern(p->a.mem.bytes(la, 0, kMiB), 77);
    p->b.q.rq.push_back(iw_recv_wr(5, rbuf, p->b.mem.va(rbuf), kMiB));
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p->a.mem.va(la), kMiB));
    // 200 FPDUs go out at 1448 bytes, then the path MTU drops: the rest are at most 536.
    p->a.stream.accept_limit = 200;
    p->a.qp->poll(p->now);
    ASSERT_EQ(p->a.stream.fpdus, 200u);
    EXPECT_EQ(p->a.stream.oversize, 0u);
    p->a.qp->set_mss(536);
    p->a.stream.mss = 536;
    p->a.stream.accept_limit = ~std::uint64_t{0};
    const std::uint64_t before = p->a.stream.fpdus;
    ASSERT_TRUE(p->run_until([&] { return p->b.q.rcq.size() == 1; }));
    EXPECT_GT(p->a.stream.fpdus, before);
    EXPECT_EQ(p->a.stream.oversize, 0u);
    EXPECT_EQ(p->b.q.rcq[0].byte_len, kMiB);
    EXPECT_TRUE(same(p->b.mem.bytes(rbuf, 0, kMiB), p->a.mem.bytes(la, 0, kMiB)));
}

TEST(IwQp, stream_refusals_lose_nothing) {
    auto p = IwPair::standard(1448, 17);
    const std::uint32_t la = p->a.mem.add(300000);
    const std::uint32_t rbuf = p->b.mem.add(300000);
    fill_pattern(p->a.mem.bytes(la, 0, 300000), 5);
    p->b.q.rq.push_back(iw_recv_wr(5, rbuf, p->b.mem.va(rbuf), 300000));
    p->a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p->a.mem.va(la), 300000));
    for (int i = 0; i < 100000 && p->b.q.rcq.empty(); ++i) {
        p->a.stream.refuse = i % 3 == 0 ? 1 : 0;
        p->step();
    }
    ASSERT_EQ(p->b.q.rcq.size(), 1u);
    EXPECT_GT(p->a.qp->counters().tx_refused.get(), 0u);
    EXPECT_TRUE(same(p->b.mem.bytes(rbuf, 0, 300000), p->a.mem.bytes(la, 0, 300000)));
}

TEST(IwQp, rtr_write_and_read_are_swallowed) {
    for (Rtr kind : {Rtr::write, Rtr::read, Rtr::send}) {
        IwConfig ca = iw_config(1), cb = iw_config(2);
        ca.rtr_send = kind;
        cb.rtr_expect = kind;
        IwPair p(ca, cb);
        const std::uint32_t la = p.a.mem.add(64);
        const std::uint32_t rbuf = p.b.mem.add(64);
        p.b.q.rq.push_back(iw_recv_wr(5, rbuf, p.b.mem.va(rbuf), 64));
        p.a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p.a.mem.va(la), 10));
        ASSERT_TRUE(p.run_until([&] { return p.b.q.rcq.size() == 1 && p.a.q.scq.size() == 1; }));
        EXPECT_EQ(p.b.q.rcq[0].wr_id, 5u);
        EXPECT_EQ(p.b.qp->counters().rx_rtr.get(), 1u);
        p.settle();
        EXPECT_EQ(p.a.qp->state(), IwState::ok);
        EXPECT_EQ(p.b.qp->state(), IwState::ok);
    }
}

// After a read RTR the WRs wait for its answer; a peer that stays silent gets a zero-length
// Write after rtr_nudge, then at twice the wait. The Write needs no right at the peer.
TEST(IwQp, a_read_rtr_holds_the_wrs_until_answered_and_nudges_a_silent_peer) {
    IwConfig ca = iw_config(1), cb = iw_config(2);
    ca.rtr_send = Rtr::read;
    cb.rtr_expect = Rtr::read;
    cb.remote_access = 0;
    IwPair p(ca, cb);
    const std::uint32_t la = p.a.mem.add(64);
    const std::uint32_t rbuf = p.b.mem.add(64);
    p.b.q.rq.push_back(iw_recv_wr(5, rbuf, p.b.mem.va(rbuf), 64));
    p.a.q.sq.push_back(iw_send_wr(1, WrOp::send, la, p.a.mem.va(la), 10));
    p.a.qp->poll(p.now);
    const std::size_t rtr_bytes = p.a.stream.bytes.size();
    EXPECT_GT(rtr_bytes, 0u);
    EXPECT_EQ(p.a.qp->counters().tx_send_fpdus.get(), 0u);  // the SEND waits
    EXPECT_EQ(p.a.qp->next_deadline(), p.now + ca.rtr_nudge);
    p.now += ca.rtr_nudge - 1;
    EXPECT_FALSE(p.a.qp->poll(p.now));
    p.now += 1;
    EXPECT_TRUE(p.a.qp->poll(p.now));
    EXPECT_EQ(p.a.qp->counters().tx_rtr_nudges.get(), 1u);
    EXPECT_GT(p.a.stream.bytes.size(), rtr_bytes);
    EXPECT_EQ(p.a.qp->counters().tx_send_fpdus.get(), 0u);
    EXPECT_EQ(p.a.qp->next_deadline(), p.now + 2 * ca.rtr_nudge);
    // The peer reads both: it answers the RTR and takes the Write as nothing; the SEND goes.
    ASSERT_TRUE(p.run_until([&] { return p.b.q.rcq.size() == 1 && p.a.q.scq.size() == 1; }));
    EXPECT_EQ(p.b.qp->counters().rx_rtr.get(), 1u);
    EXPECT_EQ(p.b.qp->counters().rx_write_fpdus.get(), 1u);
    EXPECT_EQ(p.a.qp->counters().tx_rtr_nudges.get(), 1u);
    EXPECT_EQ(p.a.qp->next_deadline(), kIwNever);
    p.settle();
    EXPECT_EQ(p.a.qp->state(), IwState::ok);
    EXPECT_EQ(p.b.qp->state(), IwState::ok);
}

// idle(): a poll would do nothing unless a send WR waits (the owner then skips it). Not
// while the read RTR is unsent or unanswered, a READ is outstanding, a Read Response is owed.
TEST(IwQp, idle_only_when_a_poll_would_find_nothing_but_the_queue) {
    IwConfig ca = iw_config(1), cb = iw_config(2);
    ca.rtr_send = Rtr::read;
    cb.rtr_expect = Rtr::read;
    IwPair p(ca, cb);
    EXPECT_FALSE(p.a.qp->idle());  // the RTR is to send
    EXPECT_TRUE(p.b.qp->idle());
    p.a.qp->poll(p.now);
    EXPECT_FALSE(p.a.qp->idle());  // its answer is awaited
    p.settle();
    EXPECT_TRUE(p.a.qp->idle());
    EXPECT_TRUE(p.b.qp->idle());
    const std::uint32_t la = p.a.mem.add(4096);
    const std::uint32_t rb = p.b.mem.add(4096);
    SendWr r = iw_send_wr(1, WrOp::rdma_read, la, p.a.mem.va(la), 4000);
    r.remote_addr = p.b.mem.va(rb);
    r.rkey = rb;
    p.a.q.sq.push_back(r);
    EXPECT_TRUE(p.a.qp->idle());  // the WR is in the queue only: the owner's send_ready sees it
    p.a.qp->poll(p.now);
    EXPECT_FALSE(p.a.qp->idle());  // the READ is out
    p.move(p.a, p.b);
    EXPECT_FALSE(p.b.qp->idle());  // the Read Response is owed
    ASSERT_TRUE(p.run_until([&] { return p.a.q.scq.size() == 1; }));
    EXPECT_EQ(p.a.q.scq[0].status, WcStatus::success);
    EXPECT_FALSE(p.a.qp->idle());  // the READ's end may free a fenced WR: one more poll
    p.a.qp->poll(p.now);
    EXPECT_TRUE(p.a.qp->idle());
    EXPECT_TRUE(p.b.qp->idle());
    p.a.qp->to_error();
    EXPECT_FALSE(p.a.qp->idle());
}

TEST(IwQp, local_invalidate_and_bind_complete_in_order) {
    auto p = IwPair::standard();
    const std::uint32_t la = p->a.mem.add(4096);
    const std::uint32_t rb = p->b.mem.add(4096);
    SendWr w = iw_send_wr(1, WrOp::rdma_write, la, p->a.mem.va(la), 100);
    w.rkey = rb;
    w.remote_addr = p->b.mem.va(rb);
    SendWr inv = iw_send_wr(2, WrOp::local_inv, 0, 0, 0);
    const std::uint32_t victim = p->a.mem.add(64);
    inv.imm_or_rkey = victim;
    p->a.q.sq.push_back(w);
    p->a.q.sq.push_back(inv);
    p->settle();
    ASSERT_EQ(p->a.q.scq.size(), 2u);
    EXPECT_EQ(p->a.q.scq[1].opcode, verbs::WcOpcode::local_inv);
    EXPECT_FALSE(p->a.mem.region(victim).valid);
}

}  // namespace
}  // namespace snic::iwarp::test
