// snic-srq-tests: shared receive queues on the wire, through libsnic, between the two ports of
// one snicd's virtual wire (SNIC_SRQ_DEVICES="NAME_0 NAME_1", SNIC_SOCKET_DIR as for any
// libsnic program; tests/integration/test_srq.py starts the daemon). Side A sends, side B
// receives through an SRQ (or its own RQ): the SRQ is resized up and down while A keeps
// sending; snic_query_qp_recv is sampled while messages arrive; a QP of the SRQ entering the
// error state leaves the SRQ's WQEs to the others.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <snic/snic_ext.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/verbs/common.h"

namespace {

using namespace snic::verbs_test;
using Clock = std::chrono::steady_clock;

// The byte at `off` of message `i`: every message differs from its neighbours everywhere.
std::uint8_t pattern(std::uint64_t i, std::size_t off) {
    return static_cast<std::uint8_t>(i * 131 + off * 7 + (off >> 8));
}

struct Side {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    PortAddress addr;
    std::vector<std::uint8_t> mem;
    ibv_mr* mr = nullptr;
    std::vector<ibv_cq*> cqs;
    std::vector<ibv_qp*> qps;
};

// Message `i` sent on `qp` from slot i of s's memory (`len` bytes each, filled with its
// pattern); ibv_post_send's result.
int send_message(Side& s, ibv_qp* qp, std::uint64_t i, std::uint32_t len) {
    std::uint8_t* p = s.mem.data() + i * len;
    for (std::size_t off = 0; off < len; ++off) p[off] = pattern(i, off);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(p), len, s.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = i;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
}

class Srq : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto names = device_names("SNIC_SRQ_DEVICES");
        if (names.size() != 2) GTEST_SKIP() << "set SNIC_SRQ_DEVICES to two snic devices";
        for (int s = 0; s < 2; ++s) {
            side_[s].ctx = open_device(names[s]);
            ASSERT_NE(side_[s].ctx, nullptr) << "cannot open " << names[s];
        }
        for (Side& s : side_) {
            ASSERT_TRUE(query_address(s.ctx, s.addr)) << std::strerror(errno);
            s.pd = ibv_alloc_pd(s.ctx);
            ASSERT_NE(s.pd, nullptr);
        }
    }

    void TearDown() override {
        auto expect_ok = [](int rc, const char* what) { EXPECT_EQ(rc, 0) << what; };
        for (Side& s : side_)
            for (ibv_qp* qp : s.qps) expect_ok(ibv_destroy_qp(qp), "ibv_destroy_qp");
        if (srq_ != nullptr) expect_ok(ibv_destroy_srq(srq_), "ibv_destroy_srq");
        for (Side& s : side_) {
            for (ibv_cq* cq : s.cqs) expect_ok(ibv_destroy_cq(cq), "ibv_destroy_cq");
            if (s.mr != nullptr) expect_ok(ibv_dereg_mr(s.mr), "ibv_dereg_mr");
            if (s.pd != nullptr) expect_ok(ibv_dealloc_pd(s.pd), "ibv_dealloc_pd");
            if (s.ctx != nullptr) expect_ok(ibv_close_device(s.ctx), "ibv_close_device");
        }
    }

    Side& a() { return side_[0]; }
    Side& b() { return side_[1]; }

    void memory(Side& s, std::size_t bytes) {
        s.mem.assign(bytes, 0xee);
        s.mr = ibv_reg_mr(s.pd, s.mem.data(), s.mem.size(), IBV_ACCESS_LOCAL_WRITE);
        ASSERT_NE(s.mr, nullptr) << std::strerror(errno);
    }
    ibv_cq* cq(Side& s, int depth) {
        ibv_cq* cq = ibv_create_cq(s.ctx, depth, nullptr, nullptr, 0);
        EXPECT_NE(cq, nullptr) << std::strerror(errno);
        if (cq != nullptr) s.cqs.push_back(cq);
        return cq;
    }
    ibv_srq* make_srq(std::uint32_t max_wr) {
        ibv_srq_init_attr sa{};
        sa.attr.max_wr = max_wr;
        sa.attr.max_sge = 1;
        srq_ = ibv_create_srq(b().pd, &sa);
        EXPECT_NE(srq_, nullptr) << std::strerror(errno);
        return srq_;
    }
    ibv_qp* qp(Side& s, ibv_cq* cq, std::uint32_t send_wr, std::uint32_t recv_wr,
               ibv_srq* srq = nullptr) {
        ibv_qp_init_attr qa{};
        qa.send_cq = qa.recv_cq = cq;
        qa.srq = srq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap = {send_wr, srq != nullptr ? 0 : recv_wr, 1, 1, 0};
        ibv_qp* qp = ibv_create_qp(s.pd, &qa);
        EXPECT_NE(qp, nullptr) << std::strerror(errno);
        if (qp != nullptr) s.qps.push_back(qp);
        return qp;
    }
    void connect(ibv_qp* qp, const Side& s, ibv_qp* peer, const Side& ps) {
        // RNR retried for ever: the receiver may run out of WQEs for a while.
        const RcParams p{.access = 0, .rq_psn = 100, .sq_psn = 100};
        const ModifyResult r = connect_rc(qp, s.addr, peer->qp_num, ps.addr, p);
        ASSERT_EQ(r.err, 0) << "to " << r.state;
    }
    // A connected pair: `sender` on A to `receiver` on B.
    void pair(ibv_qp* sender, ibv_qp* receiver) {
        connect(sender, a(), receiver, b());
        connect(receiver, b(), sender, a());
    }

    // Receive WQE `i` into slot i of B's memory (`len` bytes each).
    static ibv_recv_wr recv_wr(Side& s, std::uint64_t i, std::uint32_t len, ibv_sge& sge) {
        sge = {reinterpret_cast<std::uintptr_t>(s.mem.data() + i * len), len, s.mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        return wr;
    }
    void post_srq(std::uint64_t i, std::uint32_t len) {
        ibv_sge sge;
        ibv_recv_wr wr = recv_wr(b(), i, len, sge);
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_srq_recv(srq_, &wr, &bad), 0) << "WQE " << i;
    }
    // The next completion of `cq`, within 20 s (a hang fails rather than blocks CI).
    static ibv_wc next(ibv_cq* cq) {
        const Polled p = poll_one(cq, std::chrono::seconds(20));
        EXPECT_EQ(p.n, 1) << "no completion within 20 s";
        return p.wc;
    }
    // Whether message `i` of `len` bytes is in slot i of B's memory.
    bool arrived(std::uint64_t i, std::uint32_t len) {
        const std::uint8_t* p = b().mem.data() + i * len;
        for (std::size_t off = 0; off < len; ++off)
            if (p[off] != pattern(i, off)) return false;
        return true;
    }

    Side side_[2];
    ibv_srq* srq_ = nullptr;
};

// Stops and joins the sending thread however the test leaves its scope.
struct Joiner {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~Joiner() {
        stop.store(true);
        if (thread.joinable()) thread.join();
    }
};

// Sends messages 0..count-1 on `qp`, at most `window` unacknowledged, until done, `stop` or
// a minute.
// Returns how many completed successfully.
std::uint64_t send_all(Side& s, ibv_qp* qp, ibv_cq* cq, std::uint64_t count, std::uint32_t len,
                       std::uint32_t window, const std::atomic<bool>& stop) {
    std::uint64_t posted = 0, done = 0;
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (done < count && !stop.load(std::memory_order_relaxed) && Clock::now() < until) {
        while (posted < count && posted - done < window) {
            if (send_message(s, qp, posted, len) != 0) return done;
            ++posted;
        }
        ibv_wc wc[16];
        const int n = ibv_poll_cq(cq, 16, wc);
        if (n < 0) return done;
        for (int k = 0; k < n; ++k) {
            if (wc[k].status != IBV_WC_SUCCESS || wc[k].wr_id != done) return done;
            ++done;
        }
    }
    return done;
}

// The receive counters of `qp` as they are sampled: each snapshot within what was posted and
// polled, neither counter going backwards.
struct RecvSampler {
    ibv_qp* qp;
    snic_qp_recv_state last{0, 0};
    std::uint64_t samples = 0;
    void sample(std::uint64_t posted, std::uint64_t polled) {
        snic_qp_recv_state s{};
        ASSERT_EQ(snic_query_qp_recv(qp, &s), 0);
        ++samples;
        ASSERT_GE(s.taken, s.completed);
        ASSERT_LE(s.taken, posted) << "taken more WQEs than were posted";
        ASSERT_LE(s.taken - s.completed, posted - polled);
        ASSERT_GE(s.completed, polled) << "a completion is counted before it is polled";
        ASSERT_GE(s.taken, last.taken);
        ASSERT_GE(s.completed, last.completed);
        last = s;
    }
};

// ibv_modify_srq(IBV_SRQ_MAX_WR) up and down while A keeps sending into the SRQ: every WQE
// posted completes exactly once, in posting order, with its message; a shrink below the WQEs
// posted is refused and changes nothing.
TEST_F(Srq, ResizeUpAndDownWhileMessagesArrive) {
    constexpr std::uint64_t kMessages = 3000;
    constexpr std::uint32_t kLen = 1500;  // two packets at a 1024-byte path MTU
    ibv_device_attr dev{};
    ASSERT_EQ(ibv_query_device(b().ctx, &dev), 0);
    ASSERT_NE(dev.device_cap_flags & IBV_DEVICE_SRQ_RESIZE, 0) << "resize not advertised";
    ASSERT_NO_FATAL_FAILURE(memory(a(), kMessages * kLen));
    ASSERT_NO_FATAL_FAILURE(memory(b(), kMessages * kLen));
    ibv_cq* acq = cq(a(), 64);
    ibv_cq* bcq = cq(b(), 4096);
    ASSERT_NE(make_srq(64), nullptr);
    ibv_qp* sender = qp(a(), acq, 32, 0);
    ibv_qp* receiver = qp(b(), bcq, 1, 0, srq_);
    ASSERT_NO_FATAL_FAILURE(pair(sender, receiver));

    std::uint64_t posted = 0, polled = 0;
    // Before A sends: 20 WQEs posted, a resize to 10 is refused and the SRQ keeps 64.
    for (; posted < 20; ++posted) ASSERT_NO_FATAL_FAILURE(post_srq(posted, kLen));
    ibv_srq_attr m{};
    m.max_wr = 10;
    EXPECT_EQ(ibv_modify_srq(srq_, &m, IBV_SRQ_MAX_WR), EINVAL);
    ibv_srq_attr q{};
    ASSERT_EQ(ibv_query_srq(srq_, &q), 0);
    EXPECT_EQ(q.max_wr, 64u);
    m.max_wr = dev.max_srq_wr + 1;
    EXPECT_EQ(ibv_modify_srq(srq_, &m, IBV_SRQ_MAX_WR), EINVAL);
    std::uint32_t max_wr = 64;

    std::atomic<bool> stop{false};
    std::uint64_t sent = 0;
    std::thread a_thread([&] { sent = send_all(a(), sender, acq, kMessages, kLen, 32, stop); });
    Joiner joiner{stop, a_thread};
    const std::uint32_t sizes[] = {256, 16, 1024, 8, 128, 32, 2048, 4, 64};
    std::size_t next_size = 0;
    RecvSampler sampler{receiver};
    const auto until = Clock::now() + std::chrono::seconds(60);
    std::uint64_t resized = 0;
    while (polled < kMessages && Clock::now() < until && !HasFatalFailure()) {
        // A resize every 250 messages, once the WQEs posted and not completed fit the new size.
        if (polled >= (resized + 1) * 250 && next_size < std::size(sizes)) {
            const std::uint32_t want = sizes[next_size];
            if (posted - polled <= want) {
                m = {};
                m.max_wr = want;
                ASSERT_EQ(ibv_modify_srq(srq_, &m, IBV_SRQ_MAX_WR), 0) << "to " << want;
                ASSERT_EQ(ibv_query_srq(srq_, &q), 0);
                EXPECT_EQ(q.max_wr, want);
                max_wr = want;
                ++next_size;
                ++resized;
            }
        }
        const bool resize_due = polled >= (resized + 1) * 250 && next_size < std::size(sizes);
        const std::uint32_t room = resize_due ? std::min(max_wr, sizes[next_size]) : max_wr;
        while (posted < kMessages && posted - polled < room)
            ASSERT_NO_FATAL_FAILURE(post_srq(posted++, kLen));
        ibv_wc wc[32];
        const int n = ibv_poll_cq(bcq, 32, wc);
        ASSERT_GE(n, 0);
        for (int k = 0; k < n; ++k) {
            ASSERT_EQ(wc[k].status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc[k].status);
            ASSERT_EQ(wc[k].wr_id, polled) << "completions out of posting order";
            ASSERT_EQ(wc[k].byte_len, kLen);
            ASSERT_EQ(wc[k].qp_num, receiver->qp_num);
            ASSERT_TRUE(arrived(polled, kLen)) << "message " << polled << " corrupted";
            ++polled;
        }
        ASSERT_NO_FATAL_FAILURE(sampler.sample(posted, polled));
    }
    a_thread.join();  // A finishes once its last message is acknowledged
    EXPECT_EQ(polled, kMessages);
    EXPECT_EQ(sent, kMessages);
    EXPECT_EQ(resized, std::size(sizes));
    ibv_wc extra{};
    EXPECT_EQ(ibv_poll_cq(bcq, 1, &extra), 0) << "a WQE completed twice";
    snic_qp_recv_state s{};
    ASSERT_EQ(snic_query_qp_recv(receiver, &s), 0);
    EXPECT_EQ(s.taken, kMessages);
    EXPECT_EQ(s.completed, kMessages);
    EXPECT_GT(sampler.samples, 0u);
}

// snic_query_qp_recv on a QP with its own RQ: sampled while 3-packet messages arrive; exact
// when quiescent; WQEs flushed by the error state count as taken and completed.
TEST_F(Srq, RecvStateOfAQpFollowsItsMessagesAndFlushes) {
    constexpr std::uint64_t kMessages = 400;
    constexpr std::uint32_t kLen = 3000;  // three packets
    constexpr std::uint32_t kDepth = 64;
    ASSERT_NO_FATAL_FAILURE(memory(a(), kMessages * kLen));
    ASSERT_NO_FATAL_FAILURE(memory(b(), (kMessages + 8) * kLen));
    ibv_cq* acq = cq(a(), 64);
    ibv_cq* bcq = cq(b(), 256);
    ibv_qp* sender = qp(a(), acq, 16, 0);
    ibv_qp* receiver = qp(b(), bcq, 1, kDepth);
    ASSERT_NO_FATAL_FAILURE(pair(sender, receiver));
    EXPECT_EQ(snic_query_qp_recv(receiver, nullptr), EINVAL);

    std::uint64_t posted = 0, polled = 0;
    auto post = [&](std::uint64_t i) {
        ibv_sge sge;
        ibv_recv_wr wr = recv_wr(b(), i, kLen, sge);
        ibv_recv_wr* bad = nullptr;
        ASSERT_EQ(ibv_post_recv(receiver, &wr, &bad), 0);
    };
    std::atomic<bool> stop{false};
    std::uint64_t sent = 0;
    std::thread a_thread([&] { sent = send_all(a(), sender, acq, kMessages, kLen, 16, stop); });
    Joiner joiner{stop, a_thread};
    RecvSampler sampler{receiver};
    const auto until = Clock::now() + std::chrono::seconds(60);
    while (polled < kMessages && Clock::now() < until && !HasFatalFailure()) {
        while (posted < kMessages && posted - polled < kDepth)
            ASSERT_NO_FATAL_FAILURE(post(posted++));
        ASSERT_NO_FATAL_FAILURE(sampler.sample(posted, polled));
        ibv_wc wc{};
        const int n = ibv_poll_cq(bcq, 1, &wc);
        ASSERT_GE(n, 0);
        if (n == 0) continue;
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        ASSERT_EQ(wc.wr_id, polled);
        ASSERT_TRUE(arrived(polled, kLen));
        ++polled;
    }
    a_thread.join();  // A finishes once its last message is acknowledged
    ASSERT_EQ(polled, kMessages);
    EXPECT_EQ(sent, kMessages);
    snic_qp_recv_state s{};
    ASSERT_EQ(snic_query_qp_recv(receiver, &s), 0);
    EXPECT_EQ(s.taken, kMessages);
    EXPECT_EQ(s.completed, kMessages);

    for (int i = 0; i < 5; ++i) ASSERT_NO_FATAL_FAILURE(post(posted++));
    ibv_qp_attr e{};
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(receiver, &e, IBV_QP_STATE), 0);
    for (int i = 0; i < 5; ++i) {
        const ibv_wc wc = next(bcq);
        EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(wc.wr_id, kMessages + static_cast<std::uint64_t>(i));
    }
    ASSERT_EQ(snic_query_qp_recv(receiver, &s), 0);
    EXPECT_EQ(s.taken, kMessages + 5);
    EXPECT_EQ(s.completed, kMessages + 5);
}

// IBA 10.3.1, 11.6.3: a QP of an SRQ entering the error state raises LAST_WQE_REACHED; the
// WQEs still on the SRQ are not flushed but serve the SRQ's other QPs, in order.
TEST_F(Srq, AQpInErrorLeavesTheSrqsWqesToTheOthers) {
    constexpr std::uint32_t kLen = 2000;
    ASSERT_NO_FATAL_FAILURE(memory(a(), 8 * kLen));
    ASSERT_NO_FATAL_FAILURE(memory(b(), 8 * kLen));
    ibv_cq* acq = cq(a(), 64);
    ibv_cq* b1cq = cq(b(), 64);
    ibv_cq* b2cq = cq(b(), 64);
    ASSERT_NE(make_srq(16), nullptr);
    ibv_qp* a1 = qp(a(), acq, 8, 0);
    ibv_qp* a2 = qp(a(), acq, 8, 0);
    ibv_qp* b1 = qp(b(), b1cq, 1, 0, srq_);
    ibv_qp* b2 = qp(b(), b2cq, 1, 0, srq_);
    ASSERT_NO_FATAL_FAILURE(pair(a1, b1));
    ASSERT_NO_FATAL_FAILURE(pair(a2, b2));
    for (std::uint64_t i = 0; i < 6; ++i) ASSERT_NO_FATAL_FAILURE(post_srq(i, kLen));

    ASSERT_EQ(send_message(a(), a1, 0, kLen), 0);
    ibv_wc wc = next(acq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    wc = next(b1cq);
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 0u);

    ibv_qp_attr e{};
    e.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(b1, &e, IBV_QP_STATE), 0);
    pollfd pfd{b().ctx->async_fd, POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 10000), 1) << "no async event";
    ibv_async_event ev{};
    ASSERT_EQ(ibv_get_async_event(b().ctx, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    EXPECT_EQ(ev.element.qp, b1);
    ibv_ack_async_event(&ev);
    EXPECT_EQ(ibv_poll_cq(b1cq, 1, &wc), 0) << "an SRQ's WQE was flushed";
    snic_qp_recv_state s{};
    ASSERT_EQ(snic_query_qp_recv(b1, &s), 0);
    EXPECT_EQ(s.taken, 1u);
    EXPECT_EQ(s.completed, 1u);

    for (std::uint64_t i = 1; i < 6; ++i) ASSERT_EQ(send_message(a(), a2, i, kLen), 0);
    for (std::uint64_t i = 1; i < 6; ++i) {
        wc = next(acq);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
        wc = next(b2cq);
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
        EXPECT_EQ(wc.wr_id, i) << "the SRQ's WQEs serve the other QP in order";
        EXPECT_TRUE(arrived(i, kLen));
    }
    EXPECT_EQ(ibv_poll_cq(b1cq, 1, &wc), 0);
}

}  // namespace
