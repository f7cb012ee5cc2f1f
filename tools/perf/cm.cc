#include "tools/perf/cm.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "tools/perf/oob.h"
#include "tools/perf/perf.h"

namespace snic::perf {

namespace {

constexpr int kResolveMs = 2000;        // rdma_resolve_addr and rdma_resolve_route
constexpr int kConnectMs = 20000;       // a CM exchange, its retransmissions included
constexpr int kAcceptMs = 60000;        // the server's wait for each connect request
constexpr int kTeardownMs = 2000;       // DISCONNECTED events after rdma_disconnect
constexpr std::uint8_t kRdAtomic = 16;  // READs/atomics in flight, as without -R

// `gid` as an IPv4 address (network order), if it is IPv4-mapped (::ffff:a.b.c.d).
bool ipv4_of(const ibv_gid& gid, in_addr* out) {
    static constexpr std::uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(gid.raw, kPrefix, sizeof kPrefix) != 0) return false;
    std::memcpy(&out->s_addr, gid.raw + 12, 4);
    return true;
}

std::string to_string(const sockaddr_in& a) {
    char ip[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// The IPv4 address of `end`'s device (its GID at -x), for the server's bind and the
// client's default source.
sockaddr_in device_addr(const End& end, const Options& o, std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (!ipv4_of(end.gid(), &a.sin_addr))
        failf("-R: GID %d of %s is not an IPv4 address", o.gid_index, end.name().c_str());
    return a;
}

}  // namespace

CmLink::CmLink(const End& end, const Options& o) {
    ch_ = rdma_create_event_channel();
    if (ch_ == nullptr) failf("rdma_create_event_channel: %s", std::strerror(errno));
    if (o.server) return;
    listening_ = device_addr(end, o, static_cast<std::uint16_t>(o.port + 1));
    if (rdma_create_id(ch_, &listener_, nullptr, RDMA_PS_TCP) != 0)
        failf("rdma_create_id: %s", std::strerror(errno));
    if (rdma_bind_addr(listener_, reinterpret_cast<sockaddr*>(&listening_)) != 0)
        failf("rdma_bind_addr %s: %s", to_string(listening_).c_str(), std::strerror(errno));
    if (rdma_listen(listener_, static_cast<int>(o.qps)) != 0)
        failf("rdma_listen %s: %s", to_string(listening_).c_str(), std::strerror(errno));
}

void CmLink::connect(End& end, const Options& o, Oob& oob) {
    oob_ = &oob;
    if (o.server)
        connect_all(end, o);
    else
        accept_all(end, o);
}

CmLink::~CmLink() {
    for (rdma_cm_id* id : connected_) rdma_disconnect(id);  // the peer may have already
    try {
        for (std::size_t left = connected_.size(); left > 0;) {
            rdma_cm_event* ev = next_event(kTeardownMs, false);
            if (ev == nullptr) {
                std::fprintf(stderr, "%s: %zu rdma_cm id(s) saw no DISCONNECTED event\n", kProg,
                             left);
                break;
            }
            if (ev->event == RDMA_CM_EVENT_DISCONNECTED) --left;
            rdma_ack_cm_event(ev);
        }
    } catch (const Failure& f) {
        std::fprintf(stderr, "%s: %s\n", kProg, f.what());
    }
    for (rdma_cm_id* id : ids_) {
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
    if (listener_ != nullptr) rdma_destroy_id(listener_);
    rdma_destroy_event_channel(ch_);
}

rdma_cm_event* CmLink::next_event(int ms, bool watch_peer) {
    const auto until = Clock::now() + std::chrono::milliseconds(ms);
    for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        pollfd p[2] = {{ch_->fd, POLLIN, 0}, {oob_ != nullptr ? oob_->fd() : -1, POLLIN, 0}};
        const int n = ::poll(p, watch_peer && oob_ != nullptr ? 2 : 1,
                             static_cast<int>(std::max<long>(left.count(), 0)));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) failf("poll on the rdma_cm channel: %s", std::strerror(errno));
        if (n == 0) return nullptr;
        if (p[0].revents != 0) {
            rdma_cm_event* ev = nullptr;
            if (rdma_get_cm_event(ch_, &ev) != 0)
                failf("rdma_get_cm_event: %s", std::strerror(errno));
            return ev;
        }
        if (oob_->peer_closed()) failf("the peer went away while connecting through rdma_cm");
        watch_peer = false;  // it sent what comes after (its connections are up): wait on
    }
}

rdma_cm_id* CmLink::expect(rdma_cm_event_type want, rdma_cm_id* id, int ms) {
    rdma_cm_event* ev = next_event(ms, true);
    if (ev == nullptr) failf("rdma_cm: no %s within %d ms", rdma_event_str(want), ms);
    const rdma_cm_event_type got = ev->event;
    const int status = ev->status;
    rdma_cm_id* from = ev->id;
    rdma_ack_cm_event(ev);
    if (got != want || status != 0 || (id != nullptr && from != id))
        failf("rdma_cm: %s (status %d) while waiting for %s", rdma_event_str(got), status,
              rdma_event_str(want));
    return from;
}

rdma_conn_param CmLink::conn_param(End& end) const {
    ibv_device_attr dev{};
    check(ibv_query_device(end.context(), &dev), "ibv_query_device");
    rdma_conn_param p{};
    p.responder_resources = static_cast<std::uint8_t>(std::min<int>(kRdAtomic, dev.max_qp_rd_atom));
    p.initiator_depth =
        static_cast<std::uint8_t>(std::min<int>(kRdAtomic, dev.max_qp_init_rd_atom));
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    return p;
}

void CmLink::accept_all(End& end, const Options& o) {
    oob_->send_cm_addr(listening_);
    const rdma_conn_param param = conn_param(end);
    for (std::uint32_t i = 0; i < o.qps; ++i) {
        rdma_cm_id* child = expect(RDMA_CM_EVENT_CONNECT_REQUEST, nullptr, kAcceptMs);
        ids_.push_back(child);
        if (child->verbs != end.context())
            failf("rdma_cm: a connect request on %s, not %s",
                  ibv_get_device_name(child->verbs->device), end.name().c_str());
        end.add_qp([&](ibv_qp_init_attr& a) {
            return rdma_create_qp(child, end.pd(), &a) == 0 ? child->qp : nullptr;
        });
        rdma_conn_param p = param;
        if (rdma_accept(child, &p) != 0) failf("rdma_accept: %s", std::strerror(errno));
        expect(RDMA_CM_EVENT_ESTABLISHED, child, kConnectMs);
        connected_.push_back(child);
    }
}

void CmLink::connect_all(End& end, const Options& o) {
    sockaddr_in src = device_addr(end, o, 0);
    if (!o.source_ip.empty() && ::inet_pton(AF_INET, o.source_ip.c_str(), &src.sin_addr) != 1)
        failf("--source_ip %s is not an IPv4 address", o.source_ip.c_str());
    sockaddr_in dst = oob_->recv_cm_addr();
    const rdma_conn_param param = conn_param(end);
    for (std::uint32_t i = 0; i < o.qps; ++i) {
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(ch_, &id, nullptr, RDMA_PS_TCP) != 0)
            failf("rdma_create_id: %s", std::strerror(errno));
        ids_.push_back(id);
        if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src),
                              reinterpret_cast<sockaddr*>(&dst), kResolveMs) != 0)
            failf("rdma_resolve_addr %s -> %s: %s", to_string(src).c_str(), to_string(dst).c_str(),
                  std::strerror(errno));
        expect(RDMA_CM_EVENT_ADDR_RESOLVED, id, kResolveMs);
        if (id->verbs != end.context())  // -d's own address is on -d: --source_ip's is not
            failf("--source_ip %s is on %s, not on -d %s", o.source_ip.c_str(),
                  ibv_get_device_name(id->verbs->device), end.name().c_str());
        if (rdma_resolve_route(id, kResolveMs) != 0)
            failf("rdma_resolve_route: %s", std::strerror(errno));
        expect(RDMA_CM_EVENT_ROUTE_RESOLVED, id, kResolveMs);
        end.add_qp([&](ibv_qp_init_attr& a) {
            return rdma_create_qp(id, end.pd(), &a) == 0 ? id->qp : nullptr;
        });
        rdma_conn_param p = param;
        if (rdma_connect(id, &p) != 0)
            failf("rdma_connect %s: %s", to_string(dst).c_str(), std::strerror(errno));
        expect(RDMA_CM_EVENT_ESTABLISHED, id, kConnectMs);
        connected_.push_back(id);
    }
}

}  // namespace snic::perf
