#include "daemon/roce/roce_rules.h"

#include <infiniband/verbs.h>

#include <spdlog/fmt/fmt.h>

namespace snic::daemon {

std::uint32_t active_ib_mtu(std::uint32_t eth_mtu) {
    // What a full-sized RoCEv2 packet adds to its IB payload inside the Ethernet MTU: IPv4
    // 20, UDP 8, BTH 12, RETH 16 (the largest first-packet header), ICRC 4.
    constexpr std::uint32_t kOverhead = 20 + 8 + 12 + 16 + 4;
    for (std::uint32_t mtu = IBV_MTU_4096; mtu > IBV_MTU_256; --mtu)
        if ((128u << mtu) + kOverhead <= eth_mtu) return mtu;
    return IBV_MTU_256;
}

namespace {

class RoceRules final : public TransportRules {
  public:
    std::uint32_t kind() const override { return shm::kTransportRoce; }
    const char* refuses_qp_type(verbs::QpType) const override { return nullptr; }
    std::uint32_t active_mtu(std::uint32_t eth_mtu) const override {
        return active_ib_mtu(eth_mtu);
    }
    std::uint32_t table_mask(verbs::QpState, verbs::QpState, verbs::QpType,
                             std::uint32_t mask) const override {
        return mask;
    }
    const char* check_binding(verbs::QpState, verbs::QpState, std::uint32_t mask) const override {
        if ((mask & shm::kQpAttrIwConn) != 0)
            return "an iWARP connection binds an iWARP QP going INIT -> RTR only";
        return nullptr;
    }
    std::string check_path(std::uint32_t mask, const shm::QpAttr& a) const override {
        namespace qa = verbs::qp_attr;
        // The Linux RDMA core allows no alternate path on RoCE either: APM is an IB feature.
        if ((mask & qa::alt_path) != 0) return "alternate paths are not supported on RoCE";
        if ((mask & qa::av) == 0) return {};
        const shm::AhAttr& ah = a.ah_attr;
        if (ah.is_global != 1) return "ah_attr.is_global must be 1 (RoCE needs a GRH)";
        if (ah.sgid_index >= 1) return fmt::format("sgid_index {} (one GID)", ah.sgid_index);
        if (ah.port_num != 1) return fmt::format("ah_attr.port_num {} (port 1)", ah.port_num);
        // A flow label has 20 bits; wider values are masked when stored, as Linux does.
        return {};
    }
};

}  // namespace

const TransportRules& roce_rules() {
    static const RoceRules rules;
    return rules;
}

}  // namespace snic::daemon
