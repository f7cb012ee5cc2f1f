// RoCEv2's rules for the verbs (daemon/verbs/transport.h): RC, UC and UD QPs; a path is an
// address vector with a GRH whose GID is an IPv4-mapped address, on port 1, with no
// alternate; the path MTU is the largest IB MTU whose packets fit the Ethernet MTU.
#pragma once

#include <cstdint>

#include "daemon/verbs/transport.h"

namespace snic::daemon {

const TransportRules& roce_rules();

// The largest IB MTU (ibv_mtu) whose RoCEv2 packets fit an Ethernet MTU: IB MTU plus the
// IPv4, UDP, BTH, RETH and ICRC headers (60 bytes); IBV_MTU_256 at the least.
std::uint32_t active_ib_mtu(std::uint32_t eth_mtu);

}  // namespace snic::daemon
