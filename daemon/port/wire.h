// The in-process virtual wire: two DPDK ports, wire0 and wire1, joined back to
// back through a pair of rte_rings (what one sends, the other receives).
#pragma once

#include "common/result.h"

struct rte_ring;

namespace snic::daemon {

class VirtualWire {
  public:
    static Result<VirtualWire> create();
    VirtualWire(VirtualWire&& o) noexcept : a_(o.a_), b_(o.b_) { o.a_ = o.b_ = nullptr; }
    VirtualWire& operator=(VirtualWire&&) = delete;
    ~VirtualWire();  // call after the ports are closed

  private:
    VirtualWire(rte_ring* a, rte_ring* b) : a_(a), b_(b) {}
    rte_ring* a_;  // wire0 -> wire1
    rte_ring* b_;  // wire1 -> wire0
};

}  // namespace snic::daemon
