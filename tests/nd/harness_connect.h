// The harness's connection of two endpoints (harness.h), a template for the callback run
// between the server's endpoint creation and its accept.
#pragma once

namespace ndt {

template <class F>
HRESULT connect(Pair& p, const Limits& l, Link& k, F before_accept, std::string* what) {
    const auto step = [&](HRESULT hr, const char* name) {
        if (hr != ND_SUCCESS) *what = name;
        return hr;
    };
    HRESULT hr;
    USHORT port = 0;
    if ((hr = step(p.srv.adapter->Listen(4, 0, next_port(), &port, &k.listen), "Listen")) != 0)
        return hr;
    if ((hr = step(p.srv.adapter->CreateConnector(&k.sconn), "CreateConnector")) != 0) return hr;
    if ((hr = step(p.cli.adapter->CreateConnector(&k.cconn), "CreateConnector")) != 0) return hr;
    if ((hr = step(k.cconn->CreateEndpoint(p.cli.rcq, p.cli.scq, l.recvs, l.reqs, l.sge_in,
                                           l.sge_out, l.read_in, l.read_out, nullptr, &k.cep),
                   "CreateEndpoint (client)")) != 0)
        return hr;
    OVERLAPPED req{}, conn{}, acc{}, done{};
    const HRESULT got = k.listen->GetConnectionRequest(k.sconn, &req);
    sockaddr_in to = p.srv.addr;
    to.sin_port = htons(port);
    static const char kHello[] = "client hello";
    hr = k.cconn->Connect(k.cep, reinterpret_cast<const sockaddr*>(&to), sizeof to, 0, 0, kHello,
                          sizeof kHello, &conn);
    if ((hr = step(hr == ND_PENDING ? ND_SUCCESS : hr, "Connect")) != 0) return hr;
    if ((hr = step(wait(k.listen, &req, got), "GetConnectionRequest")) != 0) return hr;
    if ((hr = step(k.sconn->CreateEndpoint(p.srv.rcq, p.srv.scq, l.recvs, l.reqs, l.sge_in,
                                           l.sge_out, l.read_in, l.read_out, nullptr, &k.sep),
                   "CreateEndpoint (server)")) != 0)
        return hr;
    if ((hr = step(before_accept(k.sep), "posting before the accept")) != 0) return hr;
    static const char kWelcome[] = "server welcome";
    const HRESULT a = k.sconn->Accept(k.sep, kWelcome, sizeof kWelcome, &acc);
    if ((hr = step(wait(k.cconn, &conn, ND_PENDING), "Connect's completion")) != 0) return hr;
    if ((hr = step(wait(k.cconn, &done, k.cconn->CompleteConnect(&done)), "CompleteConnect")) != 0)
        return hr;
    return step(wait(k.sconn, &acc, a), "Accept");
}

}  // namespace ndt
