// A kernel network interface as a shared-address port takes it: its index, its IPv4 address
// and prefix, its MTU (setup only: ioctl and getifaddrs).
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"
#include "proto/net/addr.h"

namespace snic::daemon {

struct IfaceFacts {
    int index = 0;
    net::Ipv4Prefix ip;  // the interface's first IPv4 address
    std::uint16_t mtu = 0;
};

// An error naming what is missing: no such interface, no IPv4 address on it.
Result<IfaceFacts> iface_facts(const std::string& name);

}  // namespace snic::daemon
