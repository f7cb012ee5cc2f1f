#include "tools/perf/cm.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
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

// rdma_cm took `what` to another device than `end`'s.
[[noreturn]] void wrong_device(const End& end, rdma_cm_id* id, const std::string& what) {
    failf(
        "rdma_cm took %s to %s, not %s: a port's RoCE and iWARP devices share its address, "
        "and rdma_cm takes it to the first (SNIC_DEVICES=%s shows this process %s's kind "
        "alone)",
        what.c_str(), ibv_get_device_name(id->verbs->device), end.name().c_str(),
        end.name().c_str(), end.name().c_str());
}

// The IPv4 address of the getifaddrs entry named `name`: libsnic lists each port's address
// under its devices' names (as an RNIC's sits on its netdev), for names that fit an
// interface name (under 16 characters).
bool ifaddr_of(const std::string& name, in_addr* out) {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return false;
    bool found = false;
    for (const ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
        if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET || name != i->ifa_name)
            continue;
        *out = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
        found = true;
    }
    ::freeifaddrs(list);
    return found;
}

// The IPv4 address `end` listens on or connects from: `given` (--listen_ip, --source_ip) if
// any, else the device's: its GID at -x if IPv4-mapped (RoCEv2), else its getifaddrs entry
// (an iWARP device's GID is its MAC, as on an iWARP RNIC).
sockaddr_in device_addr(const End& end, const Options& o, std::uint16_t port,
                        const std::string& given, const char* option) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (!given.empty()) {
        if (::inet_pton(AF_INET, given.c_str(), &a.sin_addr) != 1)
            failf("%s %s is not an IPv4 address", option, given.c_str());
    } else if (!ipv4_of(end.gid(), &a.sin_addr) && !ifaddr_of(end.name(), &a.sin_addr)) {
        failf(
            "-R: no IPv4 address known for %s (GID %d is not one, and getifaddrs has no entry "
            "of that name: libsnic lists names under 16 characters): give it with %s",
            end.name().c_str(), o.gid_index, option);
    }
    return a;
}

}  // namespace

CmLink::CmLink(const End& end, const Options& o) {
    ch_ = rdma_create_event_channel();
    if (ch_ == nullptr) failf("rdma_create_event_channel: %s", std::strerror(errno));
    if (o.server) return;
    listening_ = device_addr(end, o, o.loopback ? 0 : static_cast<std::uint16_t>(o.port + 1),
                             o.listen_ip, "--listen_ip");
    if (rdma_create_id(ch_, &listener_, nullptr, RDMA_PS_TCP) != 0)
        failf("rdma_create_id: %s", std::strerror(errno));
    if (rdma_bind_addr(listener_, reinterpret_cast<sockaddr*>(&listening_)) != 0)
        failf("rdma_bind_addr %s: %s", to_string(listening_).c_str(), std::strerror(errno));
    if (listener_->verbs != nullptr && listener_->verbs != end.context())
        wrong_device(end, listener_, "the listener's address " + to_string(listening_));
    std::memcpy(&listening_, &listener_->route.addr.src_addr, sizeof listening_);  // its port
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

rdma_cm_id* CmLink::start_connect(End& end, sockaddr_in src, sockaddr_in dst) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch_, &id, nullptr, RDMA_PS_TCP) != 0)
        failf("rdma_create_id: %s", std::strerror(errno));
    ids_.push_back(id);
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&src), reinterpret_cast<sockaddr*>(&dst),
                          kResolveMs) != 0)
        failf("rdma_resolve_addr %s -> %s: %s", to_string(src).c_str(), to_string(dst).c_str(),
              std::strerror(errno));
    expect(RDMA_CM_EVENT_ADDR_RESOLVED, id, kResolveMs);
    if (id->verbs != end.context())  // -d's own address is on -d (but for its other kind)
        wrong_device(end, id, "the source address " + to_string(src));
    if (rdma_resolve_route(id, kResolveMs) != 0)
        failf("rdma_resolve_route: %s", std::strerror(errno));
    expect(RDMA_CM_EVENT_ROUTE_RESOLVED, id, kResolveMs);
    end.add_qp([&](ibv_qp_init_attr& a) {
        return rdma_create_qp(id, end.pd(), &a) == 0 ? id->qp : nullptr;
    });
    rdma_conn_param p = conn_param(end);
    if (rdma_connect(id, &p) != 0)
        failf("rdma_connect %s: %s", to_string(dst).c_str(), std::strerror(errno));
    return id;
}

void CmLink::connect_all(End& end, const Options& o) {
    const sockaddr_in src = device_addr(end, o, 0, o.source_ip, "--source_ip");
    const sockaddr_in dst = oob_->recv_cm_addr();
    for (std::uint32_t i = 0; i < o.qps; ++i) {
        rdma_cm_id* id = start_connect(end, src, dst);
        expect(RDMA_CM_EVENT_ESTABLISHED, id, kConnectMs);
        connected_.push_back(id);
    }
}

void CmLink::connect_loopback(End& a, End& b, const Options& o) {
    const sockaddr_in src = device_addr(a, o, 0, o.source_ip, "--source_ip");
    const rdma_conn_param param = conn_param(b);
    for (std::uint32_t i = 0; i < o.qps; ++i) {
        rdma_cm_id* id = start_connect(a, src, listening_);
        rdma_cm_id* child = expect(RDMA_CM_EVENT_CONNECT_REQUEST, nullptr, kConnectMs);
        ids_.push_back(child);
        if (child->verbs != b.context()) wrong_device(b, child, "the connect request");
        b.add_qp([&](ibv_qp_init_attr& at) {
            return rdma_create_qp(child, b.pd(), &at) == 0 ? child->qp : nullptr;
        });
        rdma_conn_param p = param;
        if (rdma_accept(child, &p) != 0) failf("rdma_accept: %s", std::strerror(errno));
        // Both ends come up, in either order.
        for (int up = 0; up < 2; ++up) {
            rdma_cm_id* got = expect(RDMA_CM_EVENT_ESTABLISHED, nullptr, kConnectMs);
            if (got != id && got != child) failf("rdma_cm: ESTABLISHED on an unexpected id");
            connected_.push_back(got);
        }
    }
}

}  // namespace snic::perf
