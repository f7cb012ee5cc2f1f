// iWARP's rules for the verbs (daemon/verbs/transport.h): RC QPs alone (RFC 5040 runs over
// a connection); no path, PSN or timer for the consumer to give (the connection is
// rdma_cm's, and a QP binds to it going INIT -> RTR); the path MTU as the kernel's siw
// reports it, the largest IB MTU within the Ethernet MTU.
#pragma once

#include "daemon/verbs/transport.h"

namespace snic::daemon {

const TransportRules& iwarp_rules();

}  // namespace snic::daemon
