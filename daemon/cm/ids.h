// The CM service's own records, shared by its two halves: the ids and wires
// (daemon/cm/service.cc) and the ops of a client's CM connection (daemon/cm/session.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <infiniband/verbs.h>
#include <spdlog/spdlog.h>

#include "daemon/cm/service.h"

namespace snic::daemon {

// Logs why an op is refused (debug) and returns its errno.
inline int cm_refuse(int err, const char* op, const std::string& why) {
    spdlog::debug("cm: {}: {}", op, why);
    return err;
}

struct CmService::Id {
    enum class State : std::uint8_t {
        idle,  // created, maybe bound
        listening,
        connecting,    // connect request sent
        req_received,  // a connect request not yet answered
        rep_received,  // active: reply in, not yet confirmed
        accepted,      // passive: reply sent, the connection not yet established
        established,
        disconnecting,  // a disconnect sent or received
    };

    shm::Handle handle = shm::kNoHandle;
    CmSession* owner = nullptr;
    std::uint64_t token = 0;
    std::uint16_t ps = 0;
    std::uint8_t qp_type = 0;
    State state = State::idle;
    bool bound = false;
    // The port was drawn from the ephemeral range (bind to port 0, or none before listen or
    // connect): a connect may draw another when the wire finds it taken (a shared address,
    // where the kernel uses ports of that range too).
    bool ephemeral = false;
    bool reuse = false;
    bool disconnect_delivered = false;
    bool sidr = false;     // a UD id's exchange (a datagram request), not a connection
    std::uint32_t ip = 0;  // bound address (0: the wildcard)
    std::uint16_t port = 0;
    std::uint16_t port_index = shm::kCmNoPort;
    std::uint32_t backlog = 0;
    std::uint32_t pending = 0;            // a listener's unanswered connect requests
    shm::Handle parent = shm::kNoHandle;  // a connect request's listener, while it counts there
    // The connection, on wires_[wire], while the id holds one.
    static constexpr std::size_t kNoWire = ~std::size_t{0};
    std::size_t wire = kNoWire;
    WireConn conn = 0;
    std::uint32_t remote_ip = 0;
    std::uint16_t remote_port = 0;
    std::uint64_t listening = 0;  // a listener: the wires that listen for it (a bit each)
};

// One device's wire and the connections of it the ids hold.
struct CmService::WireCm {
    CmWire* wire;
    std::uint16_t port;
    std::map<WireConn, shm::Handle> conns;
};

}  // namespace snic::daemon
