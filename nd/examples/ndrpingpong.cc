// ndrpingpong: RDMA Write ping-pong latency, then RDMA Read bandwidth, between two ND
// endpoints, with perftest's figures. Each side binds a window over its buffer and sends the
// window's descriptor to the other. The ping-pong: the client writes the server's buffer, its
// last byte a sequence number the server waits for in memory, and the server writes back.
// Then the client reads the server's window ITERS times (up to the endpoint's depth in
// flight). Server: ndrpingpong -s -a LOCAL [-p PORT]; client: ndrpingpong -c SERVER -a LOCAL.
#include "nd_example.h"

namespace {

constexpr const char* kUsage =
    "usage: ndrpingpong -s -a LOCAL_ADDR [-p PORT] [-n ITERS] [-b BYTES]\n"
    "       ndrpingpong -c SERVER_ADDR -a LOCAL_ADDR [-p PORT] [-n ITERS] [-b BYTES]\n";
constexpr SIZE_T kDepth = 16;

}  // namespace

int main(int argc, char** argv) {
    const ndx::Options o = ndx::parse(argc, argv, kUsage);
    std::vector<unsigned char> buf(o.bytes), out(o.bytes, 0x5a), read_buf(o.bytes);
    // The descriptors travel from and to registered memory, which the stack cannot be.
    std::vector<ND_MW_DESCRIPTOR> descs(2);
    ND_MW_DESCRIPTOR& mine = descs[0];
    ND_MW_DESCRIPTOR& desc_in = descs[1];
    ND_MW_DESCRIPTOR peer{};
    ND_MR_HANDLE mr = nullptr, out_mr = nullptr, read_mr = nullptr, desc_mr = nullptr;
    ND_RESULT desc_recv{}, done_recv{}, bind_result{}, invalidated{}, op[kDepth]{};
    ND_SGE desc_sge{};
    ndx::Link l = ndx::connect(o, kDepth, [&](ndx::Link& l) {
        OVERLAPPED ov{};
        for (auto [p, n, h] :
             {std::tuple{static_cast<void*>(buf.data()), buf.size(), &mr},
              std::tuple{static_cast<void*>(out.data()), out.size(), &out_mr},
              std::tuple{static_cast<void*>(read_buf.data()), read_buf.size(), &read_mr},
              std::tuple{static_cast<void*>(&desc_in), sizeof desc_in, &desc_mr}})
            ndx::check(ndx::wait(l.adapter, &ov, l.adapter->RegisterMemory(p, n, &ov, h)),
                       "RegisterMemory");
        desc_sge = {&desc_in, sizeof desc_in, desc_mr};
        ndx::check(l.ep->Receive(&desc_recv, &desc_sge, 1), "Receive");
        ndx::check(l.ep->Receive(&done_recv, nullptr, 0), "Receive");
    });
    INDMemoryWindow* mw = nullptr;
    ndx::check(l.adapter->CreateMemoryWindow(&invalidated, &mw), "CreateMemoryWindow");
    ndx::check(l.ep->Bind(&bind_result, mr, mw, buf.data(), buf.size(),
                          ND_OP_FLAG_ALLOW_READ | ND_OP_FLAG_ALLOW_WRITE, &mine),
               "Bind");
    // The descriptor goes out from registered memory: a copy in the out buffer's region.
    ND_MR_HANDLE mine_mr = nullptr;
    {
        OVERLAPPED ov{};
        ndx::check(
            ndx::wait(l.adapter, &ov, l.adapter->RegisterMemory(&mine, sizeof mine, &ov, &mine_mr)),
            "RegisterMemory");
    }
    const ND_SGE mine_sge{&mine, sizeof mine, mine_mr};
    ND_RESULT desc_send{};
    ndx::check(l.ep->Send(&desc_send, &mine_sge, 1, 0), "Send");
    for (bool bound = false, sent = false, heard = false; !bound || !sent || !heard;) {
        const ND_RESULT* r = l.next();
        bound |= r == &bind_result;
        sent |= r == &desc_send;
        heard |= r == &desc_recv;
    }
    peer = desc_in;

    // Write ping-pong. Every write is signalled; results are consumed while waiting. The
    // CQ is the receives' too: the client's last message may come while the server still
    // waits for its own writes' results (on iWARP a write's result waits for TCP's ACK, and
    // the client's reads carry on meanwhile), so each result is told by its ND_RESULT.
    int writes_out = 0;
    bool done_heard = false;
    const auto drain = [&] {
        ND_RESULT* r = nullptr;
        while (l.cq->GetResults(&r, 1) == 1) {
            if (FAILED(r->Status)) ndx::die("a write", r->Status);
            if (r == &done_recv)
                done_heard = true;
            else
                --writes_out;
        }
    };
    const ND_SGE wsge{out.data(), out.size(), out_mr};
    const auto write = [&](unsigned char seq) {
        out.back() = seq;
        while (writes_out >= static_cast<int>(kDepth)) drain();
        ndx::check(l.ep->Write(&op[0], &wsge, 1, &peer, 0, 0), "Write");
        ++writes_out;
    };
    const auto await = [&](unsigned char seq) {
        while (*static_cast<volatile unsigned char*>(&buf.back()) != seq) drain();
    };
    std::vector<double> t;
    for (int i = 0; i < o.iters; ++i) {
        const auto seq = static_cast<unsigned char>(i % 255 + 1);
        const auto t0 = ndx::Clock::now();
        if (o.server) {
            await(seq);
            write(seq);
        } else {
            write(seq);
            await(seq);
            t.push_back(ndx::usec(ndx::Clock::now() - t0) / 2);
        }
    }
    while (writes_out > 0) drain();
    if (!o.server) {
        std::printf("RDMA Write ping-pong\n");
        ndx::print_latency(o.bytes, t);
        // Read bandwidth: ITERS reads of the peer's window, kDepth in flight.
        const ND_SGE rsge{read_buf.data(), read_buf.size(), read_mr};
        const auto t0 = ndx::Clock::now();
        int posted = 0, done = 0;
        while (done < o.iters) {
            while (posted < o.iters && posted - done < static_cast<int>(kDepth)) {
                ndx::check(l.ep->Read(&op[posted % kDepth], &rsge, 1, &peer, 0, 0), "Read");
                ++posted;
            }
            l.next();
            ++done;
        }
        const double secs = std::chrono::duration<double>(ndx::Clock::now() - t0).count();
        std::printf("RDMA Read\n");
        ndx::print_bandwidth(o.bytes, o.iters, secs);
        ND_RESULT done_send{};
        ndx::check(l.ep->Send(&done_send, nullptr, 0, 0), "Send");
        while (l.next() != &done_send) {
        }
    } else {
        while (!done_heard) done_heard = l.next() == &done_recv;
    }
    ndx::close(l);
    mw->Release();
    return 0;
}
