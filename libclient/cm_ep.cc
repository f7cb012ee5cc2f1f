// rdma_cm's address lookup and endpoint calls: rdma_getaddrinfo and rdma_freeaddrinfo, and
// rdma_create_ep, rdma_destroy_ep and rdma_get_request, which are built on the other rdma_*
// calls, as librdmacm's are.
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "libclient/cm_internal.h"
#include "libclient/util.h"

namespace snic::client::cm {
namespace {

// A copy of an IPv4 address from rdma_getaddrinfo's hints; nullptr for another family.
sockaddr* copy_ipv4(const sockaddr* from) {
    if (from == nullptr || from->sa_family != AF_INET) return nullptr;
    auto* sa = static_cast<sockaddr_in*>(std::calloc(1, sizeof(sockaddr_in)));
    if (sa != nullptr) std::memcpy(sa, from, sizeof *sa);
    return reinterpret_cast<sockaddr*>(sa);
}

}  // namespace
}  // namespace snic::client::cm

using namespace snic::client;
using namespace snic::client::cm;

// As librdmacm's: node and service (either may be absent) name the destination, or the source
// with RAI_PASSIVE; addresses the hints carry fill what they leave out (libfabric passes only
// hints, with the source and destination already known).
SNIC_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                 rdma_addrinfo** res) {
    return guarded<int>(-1, [&]() -> int {
        const bool hinted_addr =
            hints != nullptr && (hints->ai_src_addr != nullptr || hints->ai_dst_addr != nullptr);
        if (res == nullptr || (node == nullptr && service == nullptr && !hinted_addr))
            return fail(EINVAL);
        if (hints != nullptr && hints->ai_family != 0 && hints->ai_family != AF_INET)
            return fail(EAFNOSUPPORT);
        const bool passive = hints != nullptr && (hints->ai_flags & RAI_PASSIVE) != 0;
        auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
        if (r == nullptr) return fail(ENOMEM);
        if (node != nullptr || service != nullptr) {
            addrinfo h{};
            h.ai_family = AF_INET;
            h.ai_socktype = SOCK_STREAM;
            if (passive) h.ai_flags |= AI_PASSIVE;
            if (hints != nullptr && (hints->ai_flags & RAI_NUMERICHOST) != 0)
                h.ai_flags |= AI_NUMERICHOST;
            addrinfo* ai = nullptr;
            if (const int rc = ::getaddrinfo(node, service, &h, &ai); rc != 0 || ai == nullptr) {
                std::free(r);
                errno = rc == EAI_SYSTEM ? errno : ENOENT;
                return rc == 0 ? -1 : rc;
            }
            sockaddr* sa = copy_ipv4(ai->ai_addr);
            ::freeaddrinfo(ai);
            if (sa == nullptr) {
                std::free(r);
                return fail(ENOMEM);
            }
            (passive ? r->ai_src_addr : r->ai_dst_addr) = sa;
        }
        if (hints != nullptr && r->ai_src_addr == nullptr)
            r->ai_src_addr = copy_ipv4(hints->ai_src_addr);
        if (hints != nullptr && r->ai_dst_addr == nullptr && !passive)
            r->ai_dst_addr = copy_ipv4(hints->ai_dst_addr);
        if (r->ai_src_addr != nullptr) r->ai_src_len = sizeof(sockaddr_in);
        if (r->ai_dst_addr != nullptr) r->ai_dst_len = sizeof(sockaddr_in);
        if (r->ai_src_addr == nullptr && r->ai_dst_addr == nullptr) {
            std::free(r);
            return fail(hinted_addr ? EAFNOSUPPORT : ENOMEM);
        }
        r->ai_flags = hints != nullptr ? hints->ai_flags : 0;
        r->ai_family = AF_INET;
        r->ai_qp_type = hints != nullptr && hints->ai_qp_type != 0 ? hints->ai_qp_type : IBV_QPT_RC;
        r->ai_port_space = hints != nullptr && hints->ai_port_space != 0
                               ? hints->ai_port_space
                               : (r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP);
        *res = r;
        return 0;
    });
}

SNIC_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
    while (res != nullptr) {
        rdma_addrinfo* next = res->ai_next;
        std::free(res->ai_src_addr);
        std::free(res->ai_dst_addr);
        std::free(res->ai_src_canonname);
        std::free(res->ai_dst_canonname);
        std::free(res->ai_route);
        std::free(res->ai_connect);
        std::free(res);
        res = next;
    }
}

SNIC_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd,
                               ibv_qp_init_attr* qp_init_attr) {
    return guarded<int>(-1, [&]() -> int {
        if (out == nullptr || res == nullptr) return fail(EINVAL);
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(nullptr, &id, nullptr,
                           static_cast<rdma_port_space>(res->ai_port_space)) != 0)
            return -1;
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        auto undo = [&] {
            const int err = errno;
            rdma_destroy_id(id);
            errno = err;
            return -1;
        };
        if ((res->ai_flags & RAI_PASSIVE) != 0) {
            if (res->ai_src_addr == nullptr || rdma_bind_addr(id, res->ai_src_addr) != 0)
                return undo();
            if (qp_init_attr != nullptr) {
                i->has_ep_attr = true;
                i->ep_attr = *qp_init_attr;
            }
            if (pd != nullptr) i->id.pd = pd;
            *out = id;
            return 0;
        }
        if (rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return undo();
        if (rdma_resolve_route(id, 2000) != 0) return undo();
        if (qp_init_attr != nullptr && rdma_create_qp(id, pd, qp_init_attr) != 0) return undo();
        *out = id;
        return 0;
    });
}

SNIC_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
    if (id == nullptr) return;
    rdma_destroy_qp(id);
    rdma_destroy_srq(id);
    rdma_destroy_id(id);
}

SNIC_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
    return guarded<int>(-1, [&]() -> int {
        CmId* l = live_id(listen);
        if (l == nullptr) return fail(EINVAL);
        if (!l->listening || out == nullptr) return fail(EINVAL);
        for (;;) {
            rdma_cm_event* e = nullptr;
            if (rdma_get_cm_event(listen->channel, &e) != 0) return -1;
            if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
                ack_taken(e);
                continue;
            }
            rdma_cm_id* id = e->id;
            to_id(id)->id.event = e;  // read by the application until the id's next call
            if (l->has_ep_attr) {
                ibv_qp_init_attr a = l->ep_attr;
                if (rdma_create_qp(id, l->id.pd, &a) != 0) {
                    const int err = errno;
                    rdma_reject(id, nullptr, 0);
                    rdma_destroy_id(id);
                    return fail(err);
                }
            }
            *out = id;
            return 0;
        }
    });
}
