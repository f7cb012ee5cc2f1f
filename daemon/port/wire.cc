#include "daemon/port/wire.h"

#include <rte_errno.h>
#include <rte_eth_ring.h>
#include <rte_lcore.h>
#include <rte_ring.h>

#include <string>

namespace snic::daemon {

namespace {
constexpr unsigned kWireSlots = 4096;
}

Result<VirtualWire> VirtualWire::create() {
    const unsigned socket = rte_socket_id();
    const unsigned flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
    rte_ring* a = rte_ring_create("snic_wire_0to1", kWireSlots, socket, flags);
    rte_ring* b = rte_ring_create("snic_wire_1to0", kWireSlots, socket, flags);
    VirtualWire wire(a, b);
    if (a == nullptr || b == nullptr)
        return make_error(rte_errno,
                          std::string("--wire: cannot create rings: ") + rte_strerror(rte_errno));
    if (rte_eth_from_rings("wire0", &b, 1, &a, 1, socket) < 0 ||
        rte_eth_from_rings("wire1", &a, 1, &b, 1, socket) < 0)
        return make_error(rte_errno,
                          std::string("--wire: cannot create ports: ") + rte_strerror(rte_errno));
    return wire;
}

VirtualWire::~VirtualWire() {
    rte_ring_free(a_);
    rte_ring_free(b_);
}

}  // namespace snic::daemon
