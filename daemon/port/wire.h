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
    // The name end 0 or 1 is made with (wire0, wire1), and DPDK's for it (net_ring_ before).
    static std::string port_name(int end) { return "wire" + std::to_string(end); }
    static std::string device_name(int end) { return "net_ring_" + port_name(end); }

  private:
    VirtualWire() = default;
    std::vector<rte_ring*> a_;  // wire0 -> wire1, by queue
    std::vector<rte_ring*> b_;  // wire1 -> wire0
};

}  // namespace snic::daemon
