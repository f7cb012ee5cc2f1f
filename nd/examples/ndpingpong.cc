// ndpingpong: Send/Receive ping-pong latency between two ND endpoints, with perftest's
// figures. Server: ndpingpong -s -a LOCAL [-p PORT]; client: ndpingpong -c SERVER -a LOCAL
// [-p PORT] [-n ITERS] [-b BYTES].
#include "nd_example.h"

namespace {

constexpr const char* kUsage =
    "usage: ndpingpong -s -a LOCAL_ADDR [-p PORT] [-n ITERS] [-b BYTES]\n"
    "       ndpingpong -c SERVER_ADDR -a LOCAL_ADDR [-p PORT] [-n ITERS] [-b BYTES]\n";

}  // namespace

int main(int argc, char** argv) {
    const ndx::Options o = ndx::parse(argc, argv, kUsage);
    std::vector<char> sbuf(o.bytes, 's'), rbuf(o.bytes);
    ND_MR_HANDLE smr = nullptr, rmr = nullptr;
    // Two receives stay posted: on iWARP a message that finds none ends the connection.
    ND_RESULT recv_result[2]{}, send_result{};
    ND_SGE rsge{};
    const auto post_recv = [&](ndx::Link& l, ND_RESULT* r) {
        ndx::check(l.ep->Receive(r, &rsge, 1), "Receive");
    };
    const auto is_recv = [&](const ND_RESULT* r) {
        return r == &recv_result[0] || r == &recv_result[1];
    };
    ndx::Link l = ndx::connect(o, 4, [&](ndx::Link& l) {
        OVERLAPPED ov{};
        ndx::check(ndx::wait(l.adapter, &ov,
                             l.adapter->RegisterMemory(sbuf.data(), sbuf.size(), &ov, &smr)),
                   "RegisterMemory");
        ndx::check(ndx::wait(l.adapter, &ov,
                             l.adapter->RegisterMemory(rbuf.data(), rbuf.size(), &ov, &rmr)),
                   "RegisterMemory");
        rsge = {rbuf.data(), rbuf.size(), rmr};
        post_recv(l, &recv_result[0]);
        post_recv(l, &recv_result[1]);
    });
    const ND_SGE ssge{sbuf.data(), sbuf.size(), smr};
    std::vector<double> t;
    t.reserve(static_cast<std::size_t>(o.iters));
    int sends_out = 0;  // sent, completion not yet seen (every send is signalled)
    // The next result; a send's is counted, a receive's answered by a new receive.
    const auto next = [&] {
        ND_RESULT* r = l.next();
        if (r == &send_result) --sends_out;
        if (is_recv(r)) post_recv(l, r);
        return r;
    };
    const auto receive = [&] {
        while (!is_recv(next())) {
        }
    };
    const auto send = [&](const ND_SGE* sge, SIZE_T n) {
        ndx::check(l.ep->Send(&send_result, sge, n, 0), "Send");
        ++sends_out;
    };
    for (int i = 0; i < o.iters; ++i) {
        const auto t0 = ndx::Clock::now();
        if (o.server) {
            receive();
            send(&ssge, 1);
        } else {
            send(&ssge, 1);
            receive();
            t.push_back(ndx::usec(ndx::Clock::now() - t0) / 2);
        }
    }
    if (!o.server) ndx::print_latency(o.bytes, t);
    // The end: each side sends an empty message and waits for its own sends and the peer's
    // empty message, so that neither disconnects while the other still has a request out.
    send(nullptr, 0);
    for (bool heard = false; sends_out > 0 || !heard;) heard |= is_recv(next());
    OVERLAPPED ov{};
    ndx::wait(l.adapter, &ov, l.adapter->DeregisterMemory(smr, &ov));
    ndx::wait(l.adapter, &ov, l.adapter->DeregisterMemory(rmr, &ov));
    ndx::close(l);
    return 0;
}
