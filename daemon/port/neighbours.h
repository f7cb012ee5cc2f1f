// Where a shared-address port's neighbours come from. Such a port shares its interface's
// address with the kernel, and ARP is the kernel's: the frames never reach snicd (its XDP
// program passes them on), so the port cannot resolve a peer itself. It asks the kernel's
// neighbour table instead, through an implementation on the control thread
// (daemon/control/kernel_neighbours), and learns what the kernel knows.
#pragma once

#include "proto/net/addr.h"

namespace snic::daemon {

class NeighbourSource {
  public:
    virtual ~NeighbourSource() = default;
    // The port's lcore, when `ip` is not resolved (paced by its ARP cache as its own requests
    // are): asks for it to be resolved. Queued, no system call on the lcore but a wakeup.
    virtual void ask(net::Ipv4Addr ip) = 0;
    // The port's lcore, every poll: the next neighbour learnt since, if any.
    virtual bool next(net::Ipv4Addr& ip, net::MacAddr& mac) = 0;
};

}  // namespace snic::daemon
