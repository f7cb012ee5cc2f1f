#include "daemon/port/wire.h"

#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_lcore.h>
#include <rte_ring.h>

#include <string>

#include <fmt/format.h>

namespace snic::daemon {

namespace {
constexpr unsigned kWireSlots = 4096;
}

Result<VirtualWire> VirtualWire::create(unsigned queues) {
    const unsigned socket = rte_socket_id();
    const unsigned flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
    VirtualWire wire;
    for (unsigned q = 0; q < queues; ++q) {
        wire.a_.push_back(rte_ring_create(fmt::format("snic_wire_0to1_{}", q).c_str(), kWireSlots,
                                          socket, flags));
        wire.b_.push_back(rte_ring_create(fmt::format("snic_wire_1to0_{}", q).c_str(), kWireSlots,
                                          socket, flags));
        if (wire.a_.back() == nullptr || wire.b_.back() == nullptr)
            return make_error(
                rte_errno, std::string("--wire: cannot create rings: ") + rte_strerror(rte_errno));
    }
    if (rte_eth_from_rings(port_name(0).c_str(), wire.b_.data(), queues, wire.a_.data(), queues,
                           socket) < 0 ||
        rte_eth_from_rings(port_name(1).c_str(), wire.a_.data(), queues, wire.b_.data(), queues,
                           socket) < 0)
        return make_error(rte_errno,
                          std::string("--wire: cannot create ports: ") + rte_strerror(rte_errno));
    return wire;
}

VirtualWire::~VirtualWire() {
    for (rte_ring* r : a_) rte_ring_free(r);
    for (rte_ring* r : b_) rte_ring_free(r);
}

}  // namespace snic::daemon
