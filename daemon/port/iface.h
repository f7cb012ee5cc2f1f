// A kernel network interface as a shared-address port takes it: its index, its IPv4 address
// and prefix, its MTU (the control thread: ioctl and getifaddrs).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/result.h"
#include "proto/net/addr.h"

namespace snic::daemon {

struct IfaceFacts {
    int index = 0;
    net::Ipv4Prefix ip;  // the interface's IPv4 address (see iface_facts)
    std::uint16_t mtu = 0;
};

// The interface's address is `keep` while it has it (with the prefix it has now), else its
// first IPv4 address. An error naming what is missing: no such interface, no IPv4 address on
// it (EADDRNOTAVAIL).
Result<IfaceFacts> iface_facts(const std::string& name,
                               std::optional<net::Ipv4Addr> keep = std::nullopt);

}  // namespace snic::daemon
