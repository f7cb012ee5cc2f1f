// libsnic's extensions (<snic/snic_ext.h>): what snic offers beyond the verbs API.
#include "libclient/snic/snic_ext.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstdint>

#include "libclient/internal.h"

namespace snic::client {
namespace {

// Attempts at a consistent snapshot between two looks at whether snicd is still there: snicd
// writes a pair in a few nanoseconds, but its lcore may be preempted in the middle (or killed,
// leaving the sequence odd for good).
constexpr std::uint32_t kSpinsPerLivenessCheck = 1u << 14;

}  // namespace
}  // namespace snic::client

using namespace snic::client;

SNIC_EXPORT int snic_query_qp_recv(ibv_qp* qp, snic_qp_recv_state* state) {
    return errno_verb([&] {
        if (qp == nullptr || state == nullptr) return EINVAL;
        Qp* q = to_qp(qp);
        Context* ctx = to_ctx(qp->context);
        std::uint64_t taken = 0, completed = 0;
        for (std::uint32_t spins = 1;; ++spins) {
            if (snic::shm::read_recv_counters(q->control->recv, taken, completed)) break;
            __builtin_ia32_pause();
            if (spins % kSpinsPerLivenessCheck == 0 && daemon_gone(ctx)) return EIO;
        }
        if (daemon_dead(ctx)) return EIO;
        state->taken = taken;
        state->completed = completed;
        return 0;
    });
}

SNIC_EXPORT int snic_query_port_ipv4(ibv_context* ctx, std::uint8_t port_num, in_addr* addr) {
    return errno_verb([&] {
        if (ctx == nullptr || addr == nullptr || port_num != 1) return EINVAL;
        const Device* d = to_dev(ctx->device);
        if (d->ipv4 == 0) return ENODATA;
        addr->s_addr = htonl(d->ipv4);
        return 0;
    });
}

SNIC_EXPORT int snic_cq_report_solicited(ibv_cq* cq, int on) {
    return errno_verb([&] {
        if (cq == nullptr) return EINVAL;
        Cq* q = to_cq(cq);
        if (!q->single_threaded) q->lock.lock();
        q->solicited_mask = on != 0 ? snic::shm::kCqeSolicited : 0;
        if (!q->single_threaded) q->lock.unlock();
        return 0;
    });
}
