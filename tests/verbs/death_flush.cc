// snic-death-flush: what libsnic makes of the work requests its daemon leaves outstanding when
// it dies, for tests/integration/test_daemon_death.py. One RC connection between the two
// devices of one snicd, both ends in this process. A's peer B never posts a receive, so A's
// SENDs stay in flight (RNR, retried forever) behind WRs that did complete:
//
//     A's send queue:    1 WRITE (polled)  2 WRITE unsignaled  3 WRITE (polled)
//                        4 SEND  5 SEND unsignaled  6 WRITE        (outstanding)
//     A's receive queue: 100 101 102 103                            (outstanding)
//
// Prints "ready" once WRs 1 and 3 are polled, then reads one line from stdin: the test kills
// snicd in between. Then, as from an RNIC's fatal error, A's send CQ (polled with ibv_poll_cq)
// must give WR_FLUSH_ERR for 4, 5 and 6, in order, and then fail with EIO; its receive CQ
// (polled with ibv_start_poll) WR_FLUSH_ERR for 100-103, then EIO; posts fail with EIO; B's
// CQ, which had nothing outstanding, fails at once; the async event is IBV_EVENT_DEVICE_FATAL.
//
//     snic-death-flush DEVICE_A DEVICE_B
//
// Exits 0 when all of that held; otherwise prints each broken expectation and exits 1.
#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "tests/verbs/common.h"

namespace {

using namespace snic::verbs_test;

constexpr std::size_t kLength = 4096;
constexpr auto kPatience = std::chrono::seconds(20);

int broken = 0;

void expect(bool ok, const char* fmt, ...) {
    if (ok) return;
    std::va_list ap;
    va_start(ap, fmt);
    std::fputs("snic-death-flush: expected ", stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    ++broken;
}

struct End {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* send_cq = nullptr;
    ibv_cq_ex* recv_cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_mr* mr = nullptr;
    PortAddress addr;
    std::vector<std::uint8_t> buf = std::vector<std::uint8_t>(kLength);
};

void open_end(End& e, const char* name) {
    e.ctx = open_device(name);
    if (e.ctx == nullptr) fail("cannot open %s", name);
    if (!query_address(e.ctx, e.addr))
        fail("%s: query_port/query_gid: %s", name, std::strerror(errno));
    e.pd = ibv_alloc_pd(e.ctx);
    e.send_cq = ibv_create_cq(e.ctx, 32, nullptr, nullptr, 0);
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 32;
    e.recv_cq = ibv_create_cq_ex(e.ctx, &ca);
    if (e.pd == nullptr || e.send_cq == nullptr || e.recv_cq == nullptr)
        fail("%s: pd/cq: %s", name, std::strerror(errno));
    ibv_qp_init_attr qa{};
    qa.send_cq = e.send_cq;
    qa.recv_cq = ibv_cq_ex_to_cq(e.recv_cq);
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {16, 16, 1, 1, 0};
    e.qp = ibv_create_qp(e.pd, &qa);
    e.mr =
        ibv_reg_mr(e.pd, e.buf.data(), kLength, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (e.qp == nullptr || e.mr == nullptr) fail("%s: qp/mr: %s", name, std::strerror(errno));
}

void connect_to(End& e, const End& peer) {
    // RNR retried forever: the SENDs stay outstanding until snicd dies.
    const RcParams p{.access = IBV_ACCESS_REMOTE_WRITE, .rq_psn = 11, .sq_psn = 11};
    const ModifyResult r = connect_rc(e.qp, e.addr, peer.qp->qp_num, peer.addr, p);
    if (r.err != 0) fail("modify to %s: %s", r.state, std::strerror(r.err));
}

int post(End& a, const End& b, std::uint64_t id, ibv_wr_opcode op, bool signaled) {
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(a.buf.data()), 64, a.mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = reinterpret_cast<std::uintptr_t>(b.buf.data());
    wr.wr.rdma.rkey = b.mr->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(a.qp, &wr, &bad);
}

// ibv_poll_cq until it gives one completion or fails, for at most kPatience; its result.
int poll_one(ibv_cq* cq, ibv_wc* wc) {
    const Polled p = snic::verbs_test::poll_one(cq, kPatience);
    *wc = p.wc;
    return p.n;
}

// ibv_start_poll until it gives a completion or fails; its result.
int start_poll(ibv_cq_ex* cq) {
    const auto until = std::chrono::steady_clock::now() + kPatience;
    ibv_poll_cq_attr attr{};
    for (;;) {
        const int err = ibv_start_poll(cq, &attr);
        if (err != ENOENT || std::chrono::steady_clock::now() > until) return err;
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) fail("usage: snic-death-flush DEVICE_A DEVICE_B");
    End a, b;
    open_end(a, argv[1]);
    open_end(b, argv[2]);
    connect_to(a, b);
    connect_to(b, a);

    for (std::uint64_t id = 100; id < 104; ++id) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(a.buf.data()), 64, a.mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_recv(a.qp, &wr, &bad) != 0) fail("post_recv: %s", std::strerror(errno));
    }
    ibv_wc wc{};
    if (post(a, b, 1, IBV_WR_RDMA_WRITE, true) != 0 || poll_one(a.send_cq, &wc) != 1 ||
        wc.wr_id != 1 || wc.status != IBV_WC_SUCCESS)
        fail("WRITE 1 did not complete");
    // WR 2 asks for no completion; polling 3 says it is done too.
    if (post(a, b, 2, IBV_WR_RDMA_WRITE, false) != 0 ||
        post(a, b, 3, IBV_WR_RDMA_WRITE, true) != 0 || poll_one(a.send_cq, &wc) != 1 ||
        wc.wr_id != 3 || wc.status != IBV_WC_SUCCESS)
        fail("WRITE 3 did not complete");
    if (post(a, b, 4, IBV_WR_SEND, true) != 0 || post(a, b, 5, IBV_WR_SEND, false) != 0 ||
        post(a, b, 6, IBV_WR_RDMA_WRITE, true) != 0)
        fail("post_send: %s", std::strerror(errno));

    std::cout << "ready" << std::endl;
    std::string line;
    std::getline(std::cin, line);  // snicd is killed meanwhile

    struct Flushed {
        std::uint64_t id;
        ibv_wc_opcode opcode;
    };
    for (const Flushed f : {Flushed{4, IBV_WC_SEND}, {5, IBV_WC_SEND}, {6, IBV_WC_RDMA_WRITE}}) {
        wc = {};
        const int n = poll_one(a.send_cq, &wc);
        expect(n == 1 && wc.wr_id == f.id && wc.status == IBV_WC_WR_FLUSH_ERR &&
                   wc.opcode == f.opcode && wc.qp_num == a.qp->qp_num,
               "send WR %llu flushed (opcode %d, QP %#x); got %d: wr_id %llu status %s opcode %d "
               "qp %#x",
               static_cast<unsigned long long>(f.id), f.opcode, a.qp->qp_num, n,
               static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status), wc.opcode,
               wc.qp_num);
    }
    errno = 0;
    int n = poll_one(a.send_cq, &wc);
    expect(n == -1 && errno == EIO, "the send CQ to fail with EIO after the flush; got %d (%s)", n,
           std::strerror(errno));

    int err = start_poll(a.recv_cq);
    for (std::uint64_t id = 100; id < 104; ++id) {
        expect(err == 0 && a.recv_cq->wr_id == id && a.recv_cq->status == IBV_WC_WR_FLUSH_ERR &&
                   ibv_wc_read_opcode(a.recv_cq) == IBV_WC_RECV &&
                   ibv_wc_read_qp_num(a.recv_cq) == a.qp->qp_num,
               "receive WR %llu flushed; got %d: wr_id %llu status %s",
               static_cast<unsigned long long>(id), err,
               static_cast<unsigned long long>(a.recv_cq->wr_id),
               ibv_wc_status_str(a.recv_cq->status));
        if (err != 0) break;
        err = id + 1 < 104 ? ibv_next_poll(a.recv_cq) : 0;
    }
    if (err == 0) {
        expect(ibv_next_poll(a.recv_cq) == ENOENT, "no receive completion after WR 103");
        ibv_end_poll(a.recv_cq);
    }
    err = start_poll(a.recv_cq);
    expect(err == EIO, "the receive CQ to fail with EIO after the flush; got %d", err);

    errno = 0;
    n = poll_one(b.send_cq, &wc);
    expect(n == -1 && errno == EIO, "B's CQ, with nothing outstanding, to fail with EIO; got %d",
           n);
    expect(post(a, b, 7, IBV_WR_RDMA_WRITE, true) == EIO,
           "a post after the death to fail with EIO");
    ibv_async_event ev{};
    expect(ibv_get_async_event(a.ctx, &ev) == 0 && ev.event_type == IBV_EVENT_DEVICE_FATAL,
           "IBV_EVENT_DEVICE_FATAL; got %s", ibv_event_type_str(ev.event_type));

    if (broken != 0) return 1;
    std::cout << "flushed as expected" << std::endl;
    return 0;
}
