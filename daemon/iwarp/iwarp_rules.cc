#include "daemon/iwarp/iwarp_rules.h"

#include <infiniband/verbs.h>

namespace snic::daemon {

namespace {

class IwarpRules final : public TransportRules {
  public:
    std::uint32_t kind() const override { return shm::kTransportIwarp; }
    const char* refuses_qp_type(verbs::QpType type) const override {
        return type == verbs::QpType::rc ? nullptr : "RC only: iWARP is connected";
    }
    std::uint32_t active_mtu(std::uint32_t eth_mtu) const override {
        for (std::uint32_t mtu = IBV_MTU_4096; mtu > IBV_MTU_256; --mtu)
            if ((128u << mtu) <= eth_mtu) return mtu;
        return IBV_MTU_256;
    }
    // What the IBA table requires of INIT -> RTR and RTR -> RTS counts as given, and the
    // binding bit is not an IBA attribute.
    std::uint32_t table_mask(verbs::QpState cur, verbs::QpState next, verbs::QpType type,
                             std::uint32_t mask) const override {
        using S = verbs::QpState;
        mask &= ~shm::kQpAttrIwConn;
        if ((cur == S::init && next == S::rtr) || (cur == S::rtr && next == S::rts))
            mask |= verbs::qp_transition(cur, next, type).required;
        return mask;
    }
    const char* check_binding(verbs::QpState cur, verbs::QpState next,
                              std::uint32_t mask) const override {
        const bool binds = cur == verbs::QpState::init && next == verbs::QpState::rtr;
        const bool named = (mask & shm::kQpAttrIwConn) != 0;
        if (named && !binds) return "an iWARP connection binds an iWARP QP going INIT -> RTR only";
        if (binds && !named)
            return "an iWARP QP is connected by rdma_cm (rdma_connect, rdma_accept), not moved "
                   "to RTR by ibv_modify_qp alone";
        return nullptr;
    }
    std::string check_path(std::uint32_t mask, const shm::QpAttr&) const override {
        if ((mask & verbs::qp_attr::alt_path) != 0)
            return "alternate paths are not supported on iWARP";
        if ((mask & verbs::qp_attr::av) != 0)
            return "an iWARP QP has no address vector: rdma_cm connects it";
        return {};
    }
};

}  // namespace

const TransportRules& iwarp_rules() {
    static const IwarpRules rules;
    return rules;
}

}  // namespace snic::daemon
