// The ND objects around the endpoint: the provider's address list, the adapter's limits,
// connections with private data both ways (Connect, GetConnectionRequest, Accept,
// CompleteConnect, GetConnectionData, the addresses), Reject, Disconnect with
// NotifyDisconnect, Notify for any result, canceled overlapped requests, and Send/Receive
// with SGE lists.
#include <arpa/inet.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

#include "harness.h"

namespace {

using ndt::Link;
using ndt::Mem;
using ndt::Pair;

constexpr SIZE_T kMaxData = 256;

bool has(const SOCKET_ADDRESS_LIST* l, const sockaddr_in& a) {
    for (INT i = 0; i < l->iAddressCount; ++i) {
        const auto* s = reinterpret_cast<const sockaddr_in*>(l->Address[i].lpSockaddr);
        if (s->sin_family == AF_INET && s->sin_addr.s_addr == a.sin_addr.s_addr) return true;
    }
    return false;
}

void address_list_overflow_then_list(Pair& p) {
    SIZE_T size = 0;
    REQUIRE_HR(p.provider->QueryAddressList(nullptr, &size), ND_BUFFER_OVERFLOW,
               "QueryAddressList with no buffer");
    REQUIRE(size >= sizeof(SOCKET_ADDRESS_LIST), "the size asked for is too small");
    std::vector<unsigned char> buf(size);
    auto* l = reinterpret_cast<SOCKET_ADDRESS_LIST*>(buf.data());
    REQUIRE_OK(p.provider->QueryAddressList(l, &size), "QueryAddressList");
    EXPECT(has(l, p.srv.addr) && has(l, p.cli.addr), "the ports' addresses are not listed");
}

void adapter_query_limits(Pair& p) {
    ND_ADAPTER_INFO i{};
    SIZE_T size = 4;
    REQUIRE_HR(p.cli.adapter->Query(1, &i, &size), ND_BUFFER_OVERFLOW, "Query with 4 bytes");
    REQUIRE(size == sizeof i, "the size asked for is not ND_ADAPTER_INFO's");
    REQUIRE_HR(p.cli.adapter->Query(2, &i, &size), ND_NOT_SUPPORTED, "Query of version 2");
    REQUIRE_OK(p.cli.adapter->Query(1, &i, &size), "Query");
    EXPECT(i.MaxOutboundLength > 0 && i.MaxInboundLength > 0, "no message size");
    EXPECT(i.MaxOutboundSge >= 2 && i.MaxInboundSge >= 2, "fewer than 2 SGEs");
    EXPECT(i.MaxOutboundRequests >= 4 && i.MaxCqEntries >= 256, "small queues");
    EXPECT(i.MaxCallerData == 56 && i.MaxCalleeData == 196, "private data limits");
    EXPECT(i.MaxInboundReadLimit >= 1 && i.MaxOutboundReadLimit >= 1, "no RDMA Reads");
}

void connect_private_data_both_ways_and_addresses(Pair& p) {
    Link k;
    std::string what;
    const HRESULT hr = ndt::connect(p, ndt::Limits{}, k, &what);
    if (hr != ND_SUCCESS) {
        ndt::fail(__LINE__, what + ": " + ndt::hex(hr));
    } else {
        char data[256] = {};
        SIZE_T len = sizeof data, rin = 0, rout = 0;
        REQUIRE_OK(k.sconn->GetConnectionData(&rin, &rout, data, &len), "server's data");
        EXPECT(std::strcmp(data, "client hello") == 0, "the server got other private data");
        EXPECT(rin == 2 && rout == 2, "the server got other read limits");
        len = 1;
        REQUIRE_HR(k.cconn->GetConnectionData(nullptr, nullptr, data, &len), ND_BUFFER_OVERFLOW,
                   "the client's data into 1 byte");
        REQUIRE(len >= sizeof "server welcome", "the length asked for");
        REQUIRE_OK(k.cconn->GetConnectionData(nullptr, nullptr, data, &len), "client's data");
        EXPECT(std::strcmp(data, "server welcome") == 0, "the client got other private data");
        sockaddr_in a{}, b{};
        SIZE_T al = sizeof a, bl = sizeof b;
        REQUIRE_OK(k.cconn->GetLocalAddress(reinterpret_cast<sockaddr*>(&a), &al), "local");
        REQUIRE_OK(k.sconn->GetPeerAddress(reinterpret_cast<sockaddr*>(&b), &bl), "peer");
        EXPECT(a.sin_addr.s_addr == p.cli.addr.sin_addr.s_addr, "the client's local address");
        EXPECT(a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port,
               "the server's peer is not the client's local address");
    }
    ndt::close(p, k);
}

void reject_refuses_with_private_data(Pair& p) {
    INDListen* l = nullptr;
    INDConnector *s = nullptr, *c = nullptr;
    INDEndpoint* ep = nullptr;
    USHORT port = 0;
    REQUIRE_OK(p.srv.adapter->Listen(4, 0, ndt::next_port(), &port, &l), "Listen");
    REQUIRE_OK(p.srv.adapter->CreateConnector(&s), "CreateConnector");
    REQUIRE_OK(p.cli.adapter->CreateConnector(&c), "CreateConnector");
    REQUIRE_OK(c->CreateEndpoint(p.cli.rcq, p.cli.scq, 2, 2, 1, 1, 0, 0, nullptr, &ep),
               "CreateEndpoint");
    OVERLAPPED req{}, conn{};
    const HRESULT g = l->GetConnectionRequest(s, &req);
    sockaddr_in to = p.srv.addr;
    to.sin_port = htons(port);
    const HRESULT cn =
        c->Connect(ep, reinterpret_cast<const sockaddr*>(&to), sizeof to, 0, 0, "hi", 3, &conn);
    REQUIRE_HR(cn, ND_PENDING, "Connect");
    REQUIRE_OK(ndt::wait(l, &req, g), "GetConnectionRequest");
    REQUIRE_OK(s->Reject("no", 3), "Reject");
    REQUIRE_HR(ndt::wait(c, &conn, cn), ND_CONNECTION_REFUSED, "the rejected Connect");
    char data[kMaxData] = {};  // a REJ's private data comes padded to its full size
    SIZE_T len = sizeof data;
    REQUIRE_OK(c->GetConnectionData(nullptr, nullptr, data, &len), "the reject's data");
    EXPECT(std::strcmp(data, "no") == 0, "the reject's private data");
    ep->Release();
    c->Release();
    s->Release();
    l->Release();
}

void disconnect_notifies_peer_and_cancels_receives(Pair& p) {
    Link k;
    std::string what;
    Mem m;
    ND_RESULT r{};
    REQUIRE_OK(ndt::reg(p.srv, 256, m), "RegisterMemory");
    const HRESULT hr = ndt::connect(
        p, ndt::Limits{}, k,
        [&](INDEndpoint* ep) {
            ND_SGE s = m.sge(0, 256);
            return ep->Receive(&r, &s, 1);
        },
        &what);
    if (hr != ND_SUCCESS) {
        ndt::fail(__LINE__, what + ": " + ndt::hex(hr));
    } else {
        OVERLAPPED gone{}, d{};
        const HRESULT n = k.sconn->NotifyDisconnect(&gone);
        REQUIRE_HR(n, ND_PENDING, "NotifyDisconnect");
        REQUIRE_OK(ndt::wait(k.cconn, &d, k.cconn->Disconnect(&d)), "Disconnect");
        REQUIRE_OK(ndt::wait(k.sconn, &gone, n), "the peer's NotifyDisconnect");
        ND_RESULT* got = ndt::next(p.srv.rcq);
        REQUIRE(got == &r, "no result for the posted receive");
        EXPECT(got->Status == ND_CANCELED, "the receive's status: " + ndt::hex(got->Status));
        REQUIRE_HR(k.cconn->Disconnect(&d), ND_CONNECTION_INVALID, "a second Disconnect");
    }
    ndt::close(p, k);
    ndt::unreg(p.srv, m);
}

void notify_any_fires_on_result(Pair& p) {
    Link k;
    std::string what;
    Mem m, src;
    ND_RESULT r{}, sent{};
    REQUIRE_OK(ndt::reg(p.srv, 256, m), "RegisterMemory");
    REQUIRE_OK(ndt::reg(p.cli, 256, src), "RegisterMemory");
    const HRESULT hr = ndt::connect(
        p, ndt::Limits{}, k,
        [&](INDEndpoint* ep) {
            ND_SGE s = m.sge(0, 256);
            return ep->Receive(&r, &s, 1);
        },
        &what);
    if (hr != ND_SUCCESS) {
        ndt::fail(__LINE__, what + ": " + ndt::hex(hr));
    } else {
        OVERLAPPED ov{};
        const HRESULT n = p.srv.rcq->Notify(ND_CQ_NOTIFY_ANY, &ov);
        REQUIRE_HR(n, ND_PENDING, "Notify(ND_CQ_NOTIFY_ANY)");
        REQUIRE_HR(p.srv.rcq->Notify(ND_CQ_NOTIFY_ERRORS, &ov), ND_NOT_SUPPORTED,
                   "Notify(ND_CQ_NOTIFY_ERRORS)");
        ND_SGE s = src.sge(0, 32);
        REQUIRE_OK(k.cep->Send(&sent, &s, 1, 0), "Send");
        REQUIRE_OK(ndt::wait(p.srv.rcq, &ov, n), "the Notify");
        ND_RESULT* got = ndt::next(p.srv.rcq);
        REQUIRE(got == &r && r.Status == ND_SUCCESS && r.BytesTransferred == 32,
                "the receive's result");
        REQUIRE(ndt::next(p.cli.scq) == &sent, "the send's result");
    }
    ndt::close(p, k);
    ndt::unreg(p.srv, m);
    ndt::unreg(p.cli, src);
}

void cancel_completes_pending_requests(Pair& p) {
    INDListen* l = nullptr;
    INDConnector* s = nullptr;
    USHORT port = 0;
    REQUIRE_OK(p.srv.adapter->Listen(4, 0, 0, &port, &l), "Listen on port 0");
    EXPECT(port != 0, "no port assigned");
    REQUIRE_OK(p.srv.adapter->CreateConnector(&s), "CreateConnector");
    OVERLAPPED req{}, ov{};
    // The request's eventfd is told of its end.
    const int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    REQUIRE(efd >= 0, "eventfd");
    req.EventFd = efd;
    const HRESULT g = l->GetConnectionRequest(s, &req);
    REQUIRE_HR(g, ND_PENDING, "GetConnectionRequest");
    OVERLAPPED again{};
    REQUIRE_HR(l->GetConnectionRequest(s, &again), ND_CONNECTION_ACTIVE,
               "a second GetConnectionRequest for the same connector");
    std::uint64_t count = 0;
    EXPECT(read(efd, &count, sizeof count) < 0, "the eventfd was told before the end");
    REQUIRE_OK(l->CancelOverlappedRequests(), "CancelOverlappedRequests");
    REQUIRE_HR(l->GetOverlappedResult(&req, nullptr, TRUE), ND_CANCELED, "the canceled request");
    EXPECT(read(efd, &count, sizeof count) == sizeof count && count == 1,
           "the eventfd was not told of the end");
    ::close(efd);
    const HRESULT n = p.srv.rcq->Notify(ND_CQ_NOTIFY_ANY, &ov);
    REQUIRE_HR(n, ND_PENDING, "Notify");
    REQUIRE_OK(p.srv.rcq->CancelOverlappedRequests(), "CancelOverlappedRequests (CQ)");
    REQUIRE_HR(p.srv.rcq->GetOverlappedResult(&ov, nullptr, TRUE), ND_CANCELED,
               "the canceled Notify");
    s->Release();
    l->Release();
}

void send_receive_sge_lists(Pair& p) {
    Link k;
    std::string what;
    Mem m, src;
    ND_RESULT r{}, sent{};
    REQUIRE_OK(ndt::reg(p.srv, 256, m), "RegisterMemory");
    REQUIRE_OK(ndt::reg(p.cli, 256, src), "RegisterMemory");
    for (int i = 0; i < 256; ++i) src.buf[i] = static_cast<unsigned char>(i);
    const HRESULT hr = ndt::connect(
        p, ndt::Limits{}, k,
        [&](INDEndpoint* ep) {
            ND_SGE s[2] = {m.sge(0, 10), m.sge(100, 100)};
            return ep->Receive(&r, s, 2);
        },
        &what);
    if (hr != ND_SUCCESS) {
        ndt::fail(__LINE__, what + ": " + ndt::hex(hr));
    } else {
        ND_SGE s[2] = {src.sge(0, 5), src.sge(50, 20)};
        REQUIRE_OK(k.cep->Send(&sent, s, 2, 0), "Send of two SGEs");
        ND_RESULT* got = ndt::next(p.srv.rcq);
        REQUIRE(got == &r && r.Status == ND_SUCCESS, "the receive's result");
        EXPECT(r.BytesTransferred == 25, "received " + std::to_string(r.BytesTransferred));
        ND_RESULT* sr = ndt::next(p.cli.scq);
        REQUIRE(sr == &sent && sent.BytesTransferred == 25, "the send's result and bytes");
        // 5 bytes, then 20: the first SGE's 10 bytes take 5 + 5, the second the rest.
        const unsigned char want[25] = {0,  1,  2,  3,  4,  50, 51, 52, 53, 54, 55, 56, 57,
                                        58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69};
        EXPECT(std::memcmp(m.buf.data(), want, 10) == 0, "the first receive SGE");
        EXPECT(std::memcmp(m.buf.data() + 100, want + 10, 15) == 0, "the second receive SGE");
    }
    ndt::close(p, k);
    ndt::unreg(p.srv, m);
    ndt::unreg(p.cli, src);
}

}  // namespace

int main(int argc, char** argv) {
    Pair p;
    ndt::init(argc, argv, p);
    ndt::rule("nd_address_list_overflow_then_list", address_list_overflow_then_list, p);
    ndt::rule("nd_adapter_query_limits", adapter_query_limits, p);
    ndt::rule("nd_connect_private_data_both_ways_and_addresses",
              connect_private_data_both_ways_and_addresses, p);
    ndt::rule("nd_reject_refuses_with_private_data", reject_refuses_with_private_data, p);
    ndt::rule("nd_disconnect_notifies_peer_and_cancels_receives",
              disconnect_notifies_peer_and_cancels_receives, p);
    ndt::rule("nd_notify_any_fires_on_result", notify_any_fires_on_result, p);
    ndt::rule("nd_cancel_completes_pending_requests", cancel_completes_pending_requests, p);
    ndt::rule("nd_send_receive_sge_lists", send_receive_sge_lists, p);
    return ndt::finish(p);
}
