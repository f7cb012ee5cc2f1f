// rdma_cm's addresses: rdma_bind_addr, rdma_resolve_addr and rdma_resolve_route, the ports
// an id is bound to, and the devices rdma_cm offers (rdma_get_devices).
//
// Address resolution is local: an address belongs to the snic device whose port holds it
// or whose subnet it is on. A binding to the wildcard address holds a daemon id on every
// daemon, all on one port, until the id resolves to one device.
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "libclient/cm_internal.h"
#include "libclient/internal.h"
#include "libclient/util.h"
#include "shm/cm.h"

namespace shm = snic::shm;

namespace snic::client::cm {
namespace {

// The device owning `ip`: its port's address first, then the port whose subnet holds it.
Device* device_for(std::uint32_t ip, bool exact) {
    const std::vector<Device*> all = current_devices();
    for (Device* d : all)
        if (d->ipv4 == ip) return d;
    if (exact) return nullptr;
    for (Device* d : all)
        if (d->ipv4 != 0 && ((d->ipv4 ^ ip) & d->netmask()) == 0) return d;
    return nullptr;
}

// 127.0.0.0/8. As a destination it stands for the first snic port, as the kernel's rdma_cm
// puts a loopback destination on the first RDMA device with an active port (the connection
// loops back through it).
bool is_loopback(std::uint32_t ip) {
    return (ip >> 24) == 127;
}

Device* loopback_device() {
    for (Device* d : current_devices())
        if (d->ipv4 != 0) return d;
    return nullptr;
}

int bind_daemon(CmId* i, CmConn* conn, shm::Handle h, std::uint32_t ip, std::uint16_t port,
                shm::CmBindReply* rep) {
    const shm::CmBindReq req{h, ip, port, static_cast<std::uint8_t>(i->reuse != 0), 0};
    return conn->conn.call(shm::CtrlOp::cm_bind, req, rep);
}

// The daemons of the process's devices, each once (by control socket).
std::vector<std::string> daemon_paths() {
    std::vector<std::string> paths;
    for (Device* d : current_devices())
        if (std::find(paths.begin(), paths.end(), d->socket_path) == paths.end())
            paths.push_back(d->socket_path);
    return paths;
}

// A wildcard-bound id that resolves to `dev`: keeps the daemon id on dev's daemon as its
// own (bound to the wildcard, on the id's port) and lets the other daemons' ids go.
void keep_wildcard_id(CmId* i, const Device* dev) {
    for (auto it = i->listens.begin(); it != i->listens.end(); ++it) {
        if (it->first->path != dev->socket_path) continue;
        i->conn = it->first;
        i->handle = it->second;
        i->listens.erase(it);
        break;
    }
    destroy_wildcard_ids(i);
}

}  // namespace

void set_sin(sockaddr_storage& ss, std::uint32_t ip, std::uint16_t port) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    std::memset(&ss, 0, sizeof ss);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(ip);
    sin->sin_port = htons(port);
}

ibv_gid gid_of(std::uint32_t ip) {
    ibv_gid g{};
    g.raw[10] = 0xff, g.raw[11] = 0xff;
    g.raw[12] = static_cast<std::uint8_t>(ip >> 24);
    g.raw[13] = static_cast<std::uint8_t>(ip >> 16);
    g.raw[14] = static_cast<std::uint8_t>(ip >> 8);
    g.raw[15] = static_cast<std::uint8_t>(ip);
    return g;
}

Device* device_at(const std::string& path, std::uint32_t port_index, std::uint32_t transport) {
    auto at = [&](Device* d) {
        return path == d->socket_path && d->port_index == port_index && d->transport == transport;
    };
    for (Device* d : known_devices())
        if (at(d)) return d;
    for (Device* d : current_devices())
        if (at(d)) return d;
    return nullptr;
}

int bind_wildcard(CmId* i, std::uint16_t port, std::uint16_t* out) {
    const std::vector<std::string> paths = daemon_paths();
    if (paths.empty()) return ENODEV;
    constexpr int kTries = 8;
    int err = 0;
    for (int attempt = 0; attempt < (port == 0 && paths.size() > 1 ? kTries : 1); ++attempt) {
        std::uint16_t want = port;
        for (const std::string& path : paths) {
            CmConn* conn = nullptr;
            shm::Handle h = shm::kNoHandle;
            shm::CmBindReply rep{};
            err = conn_for(*i->ch, path, &conn);
            if (err == 0) err = daemon_id(i, conn, &h);
            if (err == 0) i->listens.push_back({conn, h});
            if (err == 0) err = bind_daemon(i, conn, h, 0, want, &rep);
            if (err != 0) break;
            want = rep.port;
        }
        if (err == 0) {
            *out = want;
            return 0;
        }
        destroy_wildcard_ids(i);
        if (err != EADDRINUSE) break;
    }
    return err;
}

}  // namespace snic::client::cm

using namespace snic::client;
using namespace snic::client::cm;

SNIC_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (addr == nullptr || i->bound) return fail(EINVAL);
        if (addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);
        const std::uint32_t ip = ip_of(addr);
        std::uint16_t port = port_of(addr);
        if (ip != 0 && !is_loopback(ip)) {
            Device* d = device_for(ip, true);
            if (d == nullptr) return fail(EADDRNOTAVAIL);
            if (const int err = attach(i, d); err != 0) return fail(err);
            shm::CmBindReply rep{};
            if (const int err = bind_daemon(i, i->conn, i->handle, d->ipv4, port, &rep); err != 0)
                return fail(err);
            port = rep.port;
        } else if (const int err = bind_wildcard(i, port, &port); err != 0) {
            // A loopback address binds the wildcard too: a listen on it listens everywhere;
            // a connect from it goes out of the first port.
            return fail(err);
        }
        set_sin(src_of(i), ip, port);
        i->bound = true;
        return 0;
    });
}

SNIC_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src, sockaddr* dst, int timeout_ms) {
    return guarded<int>(-1, [&]() -> int {
        (void)timeout_ms;  // resolution is local: it answers at once
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (dst == nullptr) return fail(EINVAL);
        if (dst->sa_family != AF_INET || (src != nullptr && src->sa_family != AF_INET))
            return fail(EAFNOSUPPORT);
        if (src != nullptr && !i->bound && rdma_bind_addr(id, src) != 0) return -1;
        std::uint32_t dip = ip_of(dst);
        Device* d = i->dev;
        if (d == nullptr) d = is_loopback(dip) ? loopback_device() : device_for(dip, false);
        if (d != nullptr && is_loopback(dip)) dip = d->ipv4;
        set_sin(dst_of(i), dip, port_of(dst));
        if (d == nullptr) {
            post_local(i, RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH);
            return i->sync ? wait_for(i, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
        }
        const std::uint16_t bound_port =
            i->bound ? port_of(reinterpret_cast<sockaddr*>(&src_of(i))) : 0;
        // Bound to the wildcard: the daemon id of d's daemon is bound already, on that port.
        if (i->dev == nullptr && !i->listens.empty()) keep_wildcard_id(i, d);
        if (i->handle == shm::kNoHandle) {
            if (const int err = attach(i, d); err != 0) return fail(err);
            shm::CmBindReply rep{};
            if (const int err = bind_daemon(i, i->conn, i->handle, d->ipv4, bound_port, &rep);
                err != 0)
                return fail(err);
            set_sin(src_of(i), d->ipv4, rep.port);
            i->bound = true;
        } else if (i->dev == nullptr) {
            if (const int err = attach(i, d); err != 0) return fail(err);
            set_sin(src_of(i), d->ipv4, bound_port);
        }
        id->route.addr.addr.ibaddr.sgid = gid_of(d->ipv4);
        id->route.addr.addr.ibaddr.dgid = gid_of(dip);
        id->route.addr.addr.ibaddr.pkey = htons(0xffff);
        post_local(i, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
        return i->sync ? wait_for(i, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
    });
}

SNIC_EXPORT int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
    return guarded<int>(-1, [&]() -> int {
        (void)timeout_ms;
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->dev == nullptr) return fail(EINVAL);
        if (id->route.path_rec == nullptr) {
            auto* p = static_cast<ibv_sa_path_rec*>(std::calloc(1, sizeof(ibv_sa_path_rec)));
            if (p == nullptr) return fail(ENOMEM);
            id->route.path_rec = p;
        }
        ibv_sa_path_rec& p = *id->route.path_rec;
        p.sgid = id->route.addr.addr.ibaddr.sgid;
        p.dgid = id->route.addr.addr.ibaddr.dgid;
        p.pkey = htons(0xffff);
        p.mtu = static_cast<std::uint8_t>(port_mtu(i));
        p.hop_limit = 64;
        p.traffic_class = i->tos;
        p.numb_path = 1;
        id->route.num_paths = 1;
        post_local(i, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
        return i->sync ? wait_for(i, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
    });
}

SNIC_EXPORT std::uint16_t rdma_get_src_port(rdma_cm_id* id) {
    CmId* i = live_id(id);
    return i != nullptr ? htons(port_of(reinterpret_cast<sockaddr*>(&src_of(i)))) : 0;
}

SNIC_EXPORT std::uint16_t rdma_get_dst_port(rdma_cm_id* id) {
    CmId* i = live_id(id);
    return i != nullptr ? htons(port_of(reinterpret_cast<sockaddr*>(&dst_of(i)))) : 0;
}

SNIC_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
    return guarded<ibv_context**>(nullptr, [&]() -> ibv_context** {
        std::vector<ibv_context*> ctxs;
        for (Device* d : current_devices())
            if (ibv_context* c = context_of(d)) ctxs.push_back(c);
        auto** out = static_cast<ibv_context**>(std::calloc(ctxs.size() + 1, sizeof(ibv_context*)));
        if (out == nullptr) return fail_null<ibv_context*>(ENOMEM);
        std::copy(ctxs.begin(), ctxs.end(), out);
        if (num_devices != nullptr) *num_devices = static_cast<int>(ctxs.size());
        return out;
    });
}

SNIC_EXPORT void rdma_free_devices(ibv_context** list) {
    std::free(list);  // the contexts stay open for the process's ids
}
