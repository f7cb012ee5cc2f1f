// INDEndpoint::SendAndInvalidate, each rule of its page (docs/ND.md): a send that also
// invalidates a memory window of the peer. The peer gets two results, the window's
// invalidate result (the ND_RESULT given at CreateMemoryWindow) on its receive CQ and then
// the receive's; the window is no longer bound and may be bound again; a Read or Write
// through it afterwards ends the connection. The flags (SILENT_SUCCESS, READ_FENCE,
// SEND_AND_SOLICIT_EVENT) and the return codes (ND_CONNECTION_INVALID, ND_BUFFER_OVERFLOW,
// ND_NO_MORE_ENTRIES, ND_DATA_OVERRUN), each failure posting nothing.
//
// Each rule connects a client endpoint to a server endpoint whose window, bound on the server
// endpoint, covers the first half of the server's target region; the client invalidates it.
#include <arpa/inet.h>

#include <cstring>

#include "harness.h"

namespace {

using ndt::Link;
using ndt::Mem;
using ndt::Pair;

constexpr SIZE_T kMsg = 64;
constexpr SIZE_T kWindow = 4096;  // the window; the target region is twice as large
constexpr SIZE_T kReqs = 4;       // the endpoints' outbound depth
constexpr SIZE_T kSge = 2;        // their outbound SGE limit

struct W {
    Link k;
    Mem target, rbuf, src;
    INDMemoryWindow* mw = nullptr;
    ND_RESULT invalidated{};  // the window's invalidate result
    ND_MW_DESCRIPTOR desc{};
    ND_RESULT recv[4]{};
    ND_RESULT bind{};
};

ndt::Limits limits() {
    ndt::Limits l;
    l.reqs = kReqs;
    l.sge_out = kSge;
    return l;
}

HRESULT post_recv(W& w, int i) {
    ND_SGE s = w.rbuf.sge(static_cast<SIZE_T>(i) * 1024, 1024);
    return w.k.sep->Receive(&w.recv[i], &s, 1);
}

// Connected, two receives posted on the server, the window bound over target[0, kWindow)
// (filled with 0xa5). Returns false after recording a failure.
bool up(Pair& p, W& w) {
    const auto check = [](HRESULT hr, const char* what) {
        if (hr != ND_SUCCESS) ndt::fail(__LINE__, std::string(what) + ": " + ndt::hex(hr));
        return hr == ND_SUCCESS;
    };
    if (!check(ndt::reg(p.srv, 2 * kWindow, w.target), "RegisterMemory (target)") ||
        !check(ndt::reg(p.srv, 4 * 1024, w.rbuf), "RegisterMemory (receives)") ||
        !check(ndt::reg(p.cli, 2 * kWindow, w.src), "RegisterMemory (source)"))
        return false;
    std::memset(w.target.buf.data(), 0xa5, w.target.buf.size());
    for (SIZE_T i = 0; i < w.src.buf.size(); ++i)
        w.src.buf[i] = static_cast<unsigned char>(i * 7 + 1);
    std::string what;
    const HRESULT hr = ndt::connect(
        p, limits(), w.k,
        [&](INDEndpoint* ep) {
            w.k.sep = ep;
            HRESULT r = post_recv(w, 0);
            return r == ND_SUCCESS ? post_recv(w, 1) : r;
        },
        &what);
    if (!check(hr, what.c_str())) return false;
    if (!check(p.srv.adapter->CreateMemoryWindow(&w.invalidated, &w.mw), "CreateMemoryWindow"))
        return false;
    if (!check(w.k.sep->Bind(&w.bind, w.target.mr, w.mw, w.target.buf.data(), kWindow,
                             ND_OP_FLAG_ALLOW_READ | ND_OP_FLAG_ALLOW_WRITE, &w.desc),
               "Bind"))
        return false;
    ND_RESULT* r = ndt::next(p.srv.scq);
    if (r != &w.bind || r->Status != ND_SUCCESS) {
        ndt::fail(__LINE__, "the bind's result: " + (r ? ndt::hex(r->Status) : "none"));
        return false;
    }
    return true;
}

void down(Pair& p, W& w) {
    ndt::close(p, w.k);
    if (w.mw != nullptr) w.mw->Release();
    ndt::unreg(p.srv, w.target);
    ndt::unreg(p.srv, w.rbuf);
    ndt::unreg(p.cli, w.src);
}

HRESULT send_inv(W& w, ND_RESULT* r, SIZE_T off, SIZE_T len, DWORD flags) {
    ND_SGE s = w.src.sge(off, len);
    return w.k.cep->SendAndInvalidate(r, &s, 1, &w.desc, flags);
}

// The client's next request result is `r`, successful.
void expect_sent(Pair& p, ND_RESULT* r) {
    ND_RESULT* got = ndt::next(p.cli.scq);
    REQUIRE(got != nullptr, "no result for the client's request");
    REQUIRE(got == r, "a result for another request");
    REQUIRE_OK(got->Status, "the request's result");
}

// The server's receive CQ gives the window's invalidate result, then receive `slot`'s, with
// the client's `len` bytes at `off`.
void expect_invalidate_then_receive(Pair& p, W& w, int slot, SIZE_T off, SIZE_T len) {
    ND_RESULT* got[8] = {};
    const SIZE_T n = ndt::results(p.srv.rcq, got, 8, 2);
    REQUIRE(n == 2, "the server's receive CQ gave " + std::to_string(n) + " results, want 2");
    ND_RESULT* first = got[0];
    REQUIRE(first == &w.invalidated, "the first result is not the window's invalidate result");
    REQUIRE_OK(first->Status, "the invalidate result");
    ND_RESULT* second = got[1];
    REQUIRE(second == &w.recv[slot], "the second result is not the receive's");
    REQUIRE_OK(second->Status, "the receive's result");
    REQUIRE(second->BytesTransferred == len, "received " +
                                                 std::to_string(second->BytesTransferred) +
                                                 " bytes, want " + std::to_string(len));
    REQUIRE(
        len == 0 || std::memcmp(w.rbuf.buf.data() + slot * 1024, w.src.buf.data() + off, len) == 0,
        "the received bytes differ from the sent ones");
}

// A Write (or Read) through the invalidated window: the connection ends on both sides and
// the target is untouched. RoCE's request fails on the peer's NAK; an iWARP Write completes
// once TCP took it, so there the rule is the connection's end.
void expect_window_dead(Pair& p, W& w, bool read) {
    OVERLAPPED sgone{}, cgone{};
    const HRESULT sn = w.k.sconn->NotifyDisconnect(&sgone);
    const HRESULT cn = w.k.cconn->NotifyDisconnect(&cgone);
    ND_RESULT r{};
    ND_SGE s = w.src.sge(kWindow, kMsg);
    const HRESULT hr =
        read ? w.k.cep->Read(&r, &s, 1, &w.desc, 0, 0) : w.k.cep->Write(&r, &s, 1, &w.desc, 0, 0);
    REQUIRE_OK(hr, read ? "Read through the invalidated window" : "Write through it");
    ND_RESULT* got = ndt::next(p.cli.scq);
    REQUIRE(got == &r, "no result for the request through the invalidated window");
    if (!p.iwarp || read)
        EXPECT(got->Status != ND_SUCCESS, "a request through an invalidated window succeeded");
    REQUIRE_OK(ndt::wait(w.k.cconn, &cgone, cn), "the client's NotifyDisconnect");
    REQUIRE_OK(ndt::wait(w.k.sconn, &sgone, sn), "the server's NotifyDisconnect");
    for (SIZE_T i = 0; i < kWindow; ++i)
        REQUIRE(w.target.buf[i] == 0xa5, "target byte " + std::to_string(i) + " changed");
    // The connection is gone: posting is refused.
    ND_RESULT after{};
    REQUIRE_HR(send_inv(w, &after, 0, kMsg, 0), ND_CONNECTION_INVALID,
               "SendAndInvalidate after the connection ended");
}

// ---- rules ----

void peer_gets_invalidate_then_receive(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT r{};
        REQUIRE_OK(send_inv(w, &r, 0, kMsg, 0), "SendAndInvalidate");
        expect_sent(p, &r);
        expect_invalidate_then_receive(p, w, 0, 0, kMsg);
        EXPECT(ndt::empty(p.srv.rcq), "more results on the server's receive CQ");
    }
    down(p, w);
}

// GetResults with room for one result: the invalidate's, then the receive's on the next call.
void one_result_at_a_time_invalidate_first(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT r{};
        REQUIRE_OK(send_inv(w, &r, 0, kMsg, 0), "SendAndInvalidate");
        expect_sent(p, &r);
        ND_RESULT* got[1] = {};
        REQUIRE(ndt::results(p.srv.rcq, got, 1, 1) == 1, "no result on the receive CQ");
        REQUIRE(got[0] == &w.invalidated, "the first of one result is not the invalidate's");
        got[0] = nullptr;
        REQUIRE(p.srv.rcq->GetResults(got, 1) == 1 && got[0] == &w.recv[0],
                "the next call does not give the receive's result");
        REQUIRE_OK(got[0]->Status, "the receive's result");
    }
    down(p, w);
}

void zero_byte_null_sgl(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT r{};
        REQUIRE_OK(w.k.cep->SendAndInvalidate(&r, nullptr, 0, &w.desc, 0),
                   "SendAndInvalidate with pSgl NULL, nSge 0");
        expect_sent(p, &r);
        REQUIRE(r.BytesTransferred == 0, "the zero-byte send reports bytes");
        expect_invalidate_then_receive(p, w, 0, 0, 0);
    }
    down(p, w);
}

// After the invalidate the window is unbound: bound again to the other half of the region,
// a Write through the new descriptor lands there.
void window_can_be_bound_again(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT r{};
        REQUIRE_OK(send_inv(w, &r, 0, kMsg, 0), "SendAndInvalidate");
        expect_sent(p, &r);
        expect_invalidate_then_receive(p, w, 0, 0, kMsg);
        ND_MW_DESCRIPTOR again{};
        REQUIRE_OK(w.k.sep->Bind(&w.bind, w.target.mr, w.mw, w.target.buf.data() + kWindow, kWindow,
                                 ND_OP_FLAG_ALLOW_WRITE, &again),
                   "Bind of the invalidated window to another part of the region");
        ND_RESULT* b = ndt::next(p.srv.scq);
        REQUIRE(b == &w.bind && b->Status == ND_SUCCESS, "the second bind failed");
        EXPECT(again.Token != w.desc.Token, "the new binding has the old token");
        EXPECT(
            be64toh(again.Base) == reinterpret_cast<std::uintptr_t>(w.target.buf.data() + kWindow),
            "the descriptor's Base is not the buffer (network order)");
        EXPECT(be64toh(again.Length) == kWindow, "the descriptor's Length (network order)");
        ND_SGE s = w.src.sge(0, kMsg);
        ND_RESULT wr{};
        REQUIRE_OK(w.k.cep->Write(&wr, &s, 1, &again, 16, 0), "Write through the new binding");
        expect_sent(p, &wr);
        REQUIRE(ndt::wait_bytes(w.target.buf.data() + kWindow + 16, w.src.buf.data(), kMsg),
                "the write did not land in the rebound window");
    }
    down(p, w);
}

// INDEndpoint::Invalidate, the local counterpart: the window's owner invalidates it (a
// result on its outbound CQ), and it can be bound again; a Write through the new binding
// lands, the old descriptor's token is not the new one.
void local_invalidate_then_bind_again(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT inv{};
        REQUIRE_OK(w.k.sep->Invalidate(&inv, w.mw, 0), "Invalidate");
        ND_RESULT* got = ndt::next(p.srv.scq);
        REQUIRE(got == &inv, "no result for the Invalidate");
        REQUIRE_OK(got->Status, "the Invalidate's result");
        EXPECT(ndt::empty(p.srv.rcq), "a result on the receive CQ for a local invalidate");
        ND_MW_DESCRIPTOR again{};
        REQUIRE_OK(w.k.sep->Bind(&w.bind, w.target.mr, w.mw, w.target.buf.data() + kWindow, kWindow,
                                 ND_OP_FLAG_ALLOW_WRITE, &again),
                   "Bind after Invalidate");
        ND_RESULT* b = ndt::next(p.srv.scq);
        REQUIRE(b == &w.bind && b->Status == ND_SUCCESS, "the second bind failed");
        EXPECT(again.Token != w.desc.Token, "the new binding has the old token");
        ND_SGE s = w.src.sge(0, kMsg);
        ND_RESULT wr{};
        REQUIRE_OK(w.k.cep->Write(&wr, &s, 1, &again, 0, 0), "Write through the new binding");
        expect_sent(p, &wr);
        REQUIRE(ndt::wait_bytes(w.target.buf.data() + kWindow, w.src.buf.data(), kMsg),
                "the write did not land in the rebound window");
    }
    down(p, w);
}

void write_through_invalidated_window_is_fatal(Pair& p) {
    W w;
    if (up(p, w)) {
        // The window works before: a write through it lands.
        ND_SGE s = w.src.sge(0, 16);
        ND_RESULT wr{};
        REQUIRE_OK(w.k.cep->Write(&wr, &s, 1, &w.desc, 128, 0), "Write");
        expect_sent(p, &wr);
        REQUIRE(ndt::wait_bytes(w.target.buf.data() + 128, w.src.buf.data(), 16),
                "the write did not land");
        std::memset(w.target.buf.data() + 128, 0xa5, 16);
        ND_RESULT r{};
        REQUIRE_OK(send_inv(w, &r, 0, kMsg, 0), "SendAndInvalidate");
        expect_sent(p, &r);
        expect_invalidate_then_receive(p, w, 0, 0, kMsg);
        expect_window_dead(p, w, false);
    }
    down(p, w);
}

void read_through_invalidated_window_is_fatal(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT r{};
        REQUIRE_OK(send_inv(w, &r, 0, kMsg, 0), "SendAndInvalidate");
        expect_sent(p, &r);
        expect_invalidate_then_receive(p, w, 0, 0, kMsg);
        expect_window_dead(p, w, true);
    }
    down(p, w);
}

// SILENT_SUCCESS: the send gives no result; the next, signalled, send's is the only one.
void silent_success_no_result(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT silent{}, loud{};
        REQUIRE_OK(send_inv(w, &silent, 0, kMsg, ND_OP_FLAG_SILENT_SUCCESS),
                   "SendAndInvalidate, SILENT_SUCCESS");
        expect_invalidate_then_receive(p, w, 0, 0, kMsg);
        ND_SGE s = w.src.sge(kMsg, kMsg);
        REQUIRE_OK(w.k.cep->Send(&loud, &s, 1, 0), "a signalled Send");
        ND_RESULT* got = ndt::next(p.cli.scq);
        REQUIRE(got == &loud, "the first request result is not the signalled send's");
        EXPECT(ndt::empty(p.cli.scq), "more request results than the signalled send's");
    }
    down(p, w);
}

// SILENT_SUCCESS: a request that fails still gives a result (here a source buffer outside
// its registered region: a local protection error).
void silent_failure_gives_result(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT silent{};
        ND_SGE s = w.src.sge(0, kMsg);
        s.pAddr = w.src.buf.data() + w.src.buf.size() + 4096;  // past the region
        REQUIRE_OK(w.k.cep->SendAndInvalidate(&silent, &s, 1, &w.desc, ND_OP_FLAG_SILENT_SUCCESS),
                   "SendAndInvalidate, SILENT_SUCCESS, outside the region");
        ND_RESULT* got = ndt::next(p.cli.scq);
        REQUIRE(got == &silent, "no result for the failed silent request");
        EXPECT(got->Status != ND_SUCCESS, "the request outside its region succeeded");
    }
    down(p, w);
}

// READ_FENCE: a Read through the window into the client's buffer, then a fenced
// SendAndInvalidate of that same buffer: the send starts once the read completed, so the
// peer receives the window's bytes (not what the buffer held before), and the results come
// in order: the read, the send, then the peer's invalidate and receive.
void read_fence_after_read_through_window(Pair& p) {
    W w;
    if (up(p, w)) {
        for (SIZE_T i = 0; i < kMsg; ++i) w.target.buf[i] = static_cast<unsigned char>(0x30 + i);
        ND_SGE s = w.src.sge(kWindow, kMsg);
        ND_RESULT rd{}, r{};
        REQUIRE_OK(w.k.cep->Read(&rd, &s, 1, &w.desc, 0, 0), "Read through the window");
        REQUIRE_OK(send_inv(w, &r, kWindow, kMsg, ND_OP_FLAG_READ_FENCE),
                   "SendAndInvalidate, READ_FENCE, of the read's buffer");
        expect_sent(p, &rd);
        expect_sent(p, &r);
        REQUIRE(std::memcmp(w.src.buf.data() + kWindow, w.target.buf.data(), kMsg) == 0,
                "the read did not return the window's bytes");
        expect_invalidate_then_receive(p, w, 0, kWindow, kMsg);
        REQUIRE(std::memcmp(w.rbuf.buf.data(), w.target.buf.data(), kMsg) == 0,
                "the peer received the buffer as it was before the read: the send did not wait");
    }
    down(p, w);
}

// SEND_AND_SOLICIT_EVENT: the peer's solicited-only Notify stays pending through an
// unsolicited message and fires for the solicited one, after its receive completed.
void solicit_event_satisfies_solicited_notify(Pair& p) {
    W w;
    if (up(p, w)) {
        OVERLAPPED ov{};
        const HRESULT n = p.srv.rcq->Notify(ND_CQ_NOTIFY_SOLICITED, &ov);
        REQUIRE_HR(n, ND_PENDING, "Notify(ND_CQ_NOTIFY_SOLICITED)");
        ND_RESULT plain{}, r{};
        ND_SGE s = w.src.sge(0, kMsg);
        REQUIRE_OK(w.k.cep->Send(&plain, &s, 1, 0), "an unsolicited Send");
        expect_sent(p, &plain);
        ND_RESULT* got = ndt::next(p.srv.rcq);
        REQUIRE(got == &w.recv[0], "the unsolicited message's receive");
        // A round trip more (a Read of the window) before looking: the CQ's event, had it
        // fired, has had the time to arrive.
        ND_RESULT rd{};
        ND_SGE d = w.src.sge(kWindow, 8);
        REQUIRE_OK(w.k.cep->Read(&rd, &d, 1, &w.desc, 0, 0), "Read");
        expect_sent(p, &rd);
        REQUIRE(ndt::pending(ov), "the solicited-only Notify fired for an unsolicited message");
        REQUIRE_OK(send_inv(w, &r, 0, kMsg, ND_OP_FLAG_SEND_AND_SOLICIT_EVENT),
                   "SendAndInvalidate, SEND_AND_SOLICIT_EVENT");
        REQUIRE_OK(ndt::wait(p.srv.rcq, &ov, n), "the solicited-only Notify");
        expect_sent(p, &r);
        expect_invalidate_then_receive(p, w, 1, 0, kMsg);
    }
    down(p, w);
}

// Errors always satisfy a Notify: a solicited-only Notify fires for flushed receives.
void error_satisfies_solicited_notify(Pair& p) {
    W w;
    if (up(p, w)) {
        OVERLAPPED ov{};
        const HRESULT n = p.srv.rcq->Notify(ND_CQ_NOTIFY_SOLICITED, &ov);
        REQUIRE_HR(n, ND_PENDING, "Notify(ND_CQ_NOTIFY_SOLICITED)");
        REQUIRE_OK(w.k.sep->Flush(), "Flush");
        REQUIRE_OK(ndt::wait(p.srv.rcq, &ov, n), "the Notify after the receives failed");
        ND_RESULT* got = ndt::next(p.srv.rcq);
        REQUIRE(got == &w.recv[0], "the first flushed receive");
        EXPECT(got->Status == ND_CANCELED, "a flushed receive's status: " + ndt::hex(got->Status));
    }
    down(p, w);
}

void not_connected_connection_invalid(Pair& p) {
    INDConnector* c = nullptr;
    INDEndpoint* ep = nullptr;
    Mem m;
    ndt::Limits l = limits();
    REQUIRE_OK(p.cli.adapter->CreateConnector(&c), "CreateConnector");
    HRESULT hr = c->CreateEndpoint(p.cli.rcq, p.cli.scq, l.recvs, l.reqs, l.sge_in, l.sge_out,
                                   l.read_in, l.read_out, nullptr, &ep);
    if (hr == ND_SUCCESS) hr = ndt::reg(p.cli, 4096, m);
    if (hr == ND_SUCCESS) {
        ND_MW_DESCRIPTOR d{0, htobe64(4096), htonl(0x1234)};
        ND_RESULT r{};
        ND_SGE s = m.sge(0, kMsg);
        const HRESULT got = ep->SendAndInvalidate(&r, &s, 1, &d, 0);
        EXPECT(got == ND_CONNECTION_INVALID,
               "SendAndInvalidate on an unconnected endpoint: " + ndt::hex(got));
        EXPECT(ndt::empty(p.cli.scq), "a result for a refused request");
    } else {
        ndt::fail(__LINE__, "setup: " + ndt::hex(hr));
    }
    ndt::unreg(p.cli, m);
    if (ep != nullptr) ep->Release();
    c->Release();
}

// Refused requests post nothing; the endpoint then completes a valid one, which
// invalidates the window.
void then_valid_completes(Pair& p, W& w) {
    ND_RESULT r{};
    REQUIRE_OK(send_inv(w, &r, 0, kMsg, 0), "a valid SendAndInvalidate after the refused one");
    expect_sent(p, &r);
    expect_invalidate_then_receive(p, w, 0, 0, kMsg);
}

void over_max_message_buffer_overflow(Pair& p) {
    W w;
    if (up(p, w)) {
        const SIZE_T max = p.cli.info.MaxOutboundLength;
        ND_SGE s[2] = {w.src.sge(0, max), w.src.sge(0, 1)};  // checked before any byte is read
        ND_RESULT r{};
        REQUIRE_HR(w.k.cep->SendAndInvalidate(&r, s, 2, &w.desc, 0), ND_BUFFER_OVERFLOW,
                   "SendAndInvalidate of MaxOutboundLength + 1 bytes");
        EXPECT(ndt::empty(p.cli.scq), "a result for the refused request");
        then_valid_completes(p, w);
    }
    down(p, w);
}

// The outbound limit: kReqs sends posted and not yet reported fill it; one more is refused.
void send_queue_full_no_more_entries(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_RESULT s[kReqs]{};
        for (int i = 2; i < 4; ++i) REQUIRE_OK(post_recv(w, i), "Receive");
        for (SIZE_T i = 0; i < kReqs; ++i) {
            ND_SGE g = w.src.sge(0, kMsg);
            REQUIRE_OK(w.k.cep->Send(&s[i], &g, 1, 0), "a Send");
        }
        ND_RESULT r{};
        REQUIRE_HR(send_inv(w, &r, 0, kMsg, 0), ND_NO_MORE_ENTRIES,
                   "SendAndInvalidate past the outbound limit");
        for (SIZE_T i = 0; i < kReqs; ++i) expect_sent(p, &s[i]);
        for (int i = 0; i < 4; ++i) {
            ND_RESULT* got = ndt::next(p.srv.rcq);
            REQUIRE(got == &w.recv[i], "receive " + std::to_string(i) +
                                           " (the refused request invalidated the window?)");
        }
        REQUIRE_OK(post_recv(w, 0), "Receive");
        then_valid_completes(p, w);
    }
    down(p, w);
}

void too_many_sges_data_overrun(Pair& p) {
    W w;
    if (up(p, w)) {
        ND_SGE s[kSge + 1];
        for (SIZE_T i = 0; i <= kSge; ++i) s[i] = w.src.sge(i * 16, 16);
        ND_RESULT r{};
        REQUIRE_HR(w.k.cep->SendAndInvalidate(&r, s, kSge + 1, &w.desc, 0), ND_DATA_OVERRUN,
                   "SendAndInvalidate with more SGEs than the endpoint allows");
        EXPECT(ndt::empty(p.cli.scq), "a result for the refused request");
        then_valid_completes(p, w);
    }
    down(p, w);
}

}  // namespace

int main(int argc, char** argv) {
    Pair p;
    ndt::init(argc, argv, p);
    ndt::rule("nd_send_invalidate_peer_gets_invalidate_then_receive",
              peer_gets_invalidate_then_receive, p);
    ndt::rule("nd_send_invalidate_one_result_at_a_time_invalidate_first",
              one_result_at_a_time_invalidate_first, p);
    ndt::rule("nd_send_invalidate_zero_byte_null_sgl", zero_byte_null_sgl, p);
    ndt::rule("nd_send_invalidate_window_can_be_bound_again", window_can_be_bound_again, p);
    ndt::rule("nd_invalidate_local_window_then_bind_again", local_invalidate_then_bind_again, p);
    ndt::rule("nd_send_invalidate_write_through_invalidated_window_is_fatal",
              write_through_invalidated_window_is_fatal, p);
    ndt::rule("nd_send_invalidate_read_through_invalidated_window_is_fatal",
              read_through_invalidated_window_is_fatal, p);
    ndt::rule("nd_send_invalidate_silent_success_no_result", silent_success_no_result, p);
    ndt::rule("nd_send_invalidate_silent_failure_gives_result", silent_failure_gives_result, p);
    ndt::rule("nd_send_invalidate_read_fence_after_read_through_window",
              read_fence_after_read_through_window, p);
    ndt::rule("nd_send_invalidate_solicit_event_satisfies_solicited_notify",
              solicit_event_satisfies_solicited_notify, p);
    ndt::rule("nd_send_invalidate_error_satisfies_solicited_notify",
              error_satisfies_solicited_notify, p);
    ndt::rule("nd_send_invalidate_not_connected_connection_invalid",
              not_connected_connection_invalid, p);
    ndt::rule("nd_send_invalidate_over_max_message_buffer_overflow",
              over_max_message_buffer_overflow, p);
    ndt::rule("nd_send_invalidate_send_queue_full_no_more_entries", send_queue_full_no_more_entries,
              p);
    ndt::rule("nd_send_invalidate_too_many_sges_data_overrun", too_many_sges_data_overrun, p);
    return ndt::finish(p);
}
