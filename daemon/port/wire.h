// The in-process virtual wire: two DPDK ports, wire0 and wire1, joined back to
// back through pairs of rte_rings (what one sends on its queue i, the other receives on its
// queue i).
#pragma once

#include <string>
#include <vector>

#include "common/result.h"

struct rte_ring;

namespace snic::daemon {

class VirtualWire {
  public:
    // A wire of `queues` queue pairs (1..kMaxQueues): both ports must use as many.
    static Result<VirtualWire> create(unsigned queues = 1);
    VirtualWire(VirtualWire&& o) noexcept = default;
    VirtualWire& operator=(VirtualWire&&) = delete;
    ~VirtualWire();  // call after the ports are closed
    // DPDK's name for end 0 (wire0) or 1 (wire1).
    static std::string device_name(int end) { return "net_ring_wire" + std::to_string(end); }

  private:
    VirtualWire() = default;
    std::vector<rte_ring*> a_;  // wire0 -> wire1, by queue
    std::vector<rte_ring*> b_;  // wire1 -> wire0
};

}  // namespace snic::daemon
