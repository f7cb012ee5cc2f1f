// The connection-management seam: what the CM service (daemon/cm/service.h) knows of a
// device's way of making connections, and nothing more. rdma_cm's ids, port spaces,
// listeners, bounds and events are the service's; how a connect request, a reply, a
// rejection or a disconnect goes on the wire is the device's CmWire:
//   - RoCEv2: IB CM MADs on the port's QP1 through the GSI bridge, rdma_cm's header in the
//     REQ's private data (daemon/roce/ib_cm_wire.h);
//   - iWARP: MPA request and reply over snic's TCP (daemon/iwarp/iw_cm_wire.h).
// The service holds one CmWire per device; each wire hands its connections' events back
// through the sink the service attached, in one neutral form (CmWireEvent).
//
// Dependencies point one way: service -> wire.h (this file) <- ib_cm_wire.h, iw_cm_wire.h;
// the service never includes a wire's own header. Everything here runs on the control
// thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/result.h"
#include "shm/cm.h"

namespace snic::daemon {

struct Peer;

// The clock of the CM's timers (the agents' retransmissions and time-waits).
inline std::uint64_t cm_now_ns() {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
}

// A connection as its wire names it; 0 is none.
using WireConn = std::uint64_t;

// The messages whose private data a wire bounds (CmWire::private_max).
enum class CmMessage : std::uint8_t { request, reply, reject };

// Why the service refuses a connect request; the wire says it as its protocol does.
enum class Refusal : std::uint8_t {
    no_listener,   // nobody listens on the request's port at all
    not_taken,     // someone listens there, but no listener takes this request
    backlog_full,  // the listener's backlog is full
    no_room,       // the listener's owner (or the id table) has no room for another id
};

// One event of a wire's connection, as the service reads it.
struct CmWireEvent {
    enum class Kind : std::uint8_t {
        request,        // passive: a connect request (a datagram one when peer.qp_type is UD)
        reply,          // active: the peer accepted; its QP and resources in `peer`
        established,    // the connection is made (or a datagram request was answered yes)
        rejected,       // the peer refused (status: its reason, or a negative errno)
        unreachable,    // no answer came, or a datagram request was answered no (status)
        connect_error,  // no connection for another reason (status: a negative errno)
        disconnected,   // the connection ends after it was made (status 0)
        timewait_exit,  // the ended connection's time-wait is over: it may be reused
        gone,           // the connection is over for good: its id forgets it
    };
    Kind kind = Kind::gone;
    WireConn conn = 0;
    std::int32_t status = 0;
    // request: where it goes and where it comes from, the port space it names (and one
    // more it may be matched in, 0 for none), and whether the request could be read at
    // all (false: no listener takes it, whoever listens on its port).
    std::uint32_t local_ip = 0, remote_ip = 0;
    std::uint16_t local_port = 0, remote_port = 0;
    std::uint16_t ps = 0, ps_also = 0;
    bool readable = true;
    // The peer's QP, resources and private data (the consumer's alone, bounded for the
    // event), as the event shows them; zero where it shows none.
    shm::CmConnParam peer{};
};

class CmWire;

// Where a wire's events go. A wire queues an event whenever it has one (also inside one of
// its own operations); the service handles what was queued when settle() is called, which a
// wire does between two pieces of its own work (two incoming messages), never inside one.
class CmWireSink {
  public:
    virtual ~CmWireSink() = default;
    virtual void queue(std::size_t wire, const CmWireEvent& e) = 0;
    virtual void settle() = 0;
};

// What the active side asks for: the addresses, the port space and QP type of its id, the
// consumer's parameters and private data, and who owns the connection.
struct CmConnectSpec {
    std::uint32_t local_ip = 0, remote_ip = 0;
    std::uint16_t local_port = 0, remote_port = 0;
    std::uint16_t ps = 0;
    std::uint8_t qp_type = 0;  // UD: a datagram request (IB CM's SIDR)
    const shm::CmConnParam* param = nullptr;
    std::uint8_t cm_response_timeout = 0;  // 0: the wire's default
    std::uint8_t max_cm_retries = 0;       // 0: the wire's default
    const Peer* owner = nullptr;
};

class CmWire {
  public:
    virtual ~CmWire() = default;

    // The service's sink, and this wire's index there.
    void attach(CmWireSink& sink, std::size_t index) {
        sink_ = &sink;
        index_ = index;
    }

    // The device's transport (shm::kTransportRoce or kTransportIwarp): what libsnic's ids
    // and QPs on it are told.
    virtual std::uint8_t transport() const = 0;
    // Whether the wire carries datagram requests (rdma_cm's UDP port space).
    virtual bool datagrams() const = 0;
    // The most private data the consumer may give in `m` (a datagram exchange's when
    // `datagram`).
    virtual std::size_t private_max(CmMessage m, bool datagram) const = 0;

    // The listener of an id of `owner`'s on `port`: true when the wire listens for it
    // (unlisten() once for each), false when it has nothing to listen on (it takes every
    // request and the service matches them), or the reason it cannot listen there (the
    // listen fails). The requests it takes become ids of `owner`'s.
    virtual Result<bool> listen(std::uint16_t port, std::uint32_t backlog, std::uint8_t qp_type,
                                const Peer& owner) = 0;
    virtual void unlisten(std::uint16_t port) = 0;

    virtual Result<WireConn> connect(const CmConnectSpec& spec) = 0;
    // A request becomes an id of `owner`'s: the connection is that client's (its QP may
    // bind to it).
    virtual void owned_by(WireConn conn, const Peer& owner) = 0;
    // The passive side answers a request yes (for a QP of `qp_type`); the connection is
    // established when the wire says so (an `established` event).
    virtual Status accept(WireConn conn, const shm::CmConnParam& param, std::uint8_t qp_type) = 0;
    // The active side's answer to a reply (IB CM's RTU).
    virtual Status confirm(WireConn conn, std::span<const std::uint8_t> pd) = 0;
    // Refuses a request (`request`) or a reply the consumer did not want.
    virtual Status reject(WireConn conn, bool request, bool datagram,
                          std::span<const std::uint8_t> pd) = 0;
    // Refuses a request no id took; the wire forgets it.
    virtual void refuse(WireConn conn, Refusal why, bool datagram) = 0;
    virtual Status disconnect(WireConn conn) = 0;
    // The service no longer follows the connection, which an event or its own answer
    // ended; the wire may drop it.
    virtual void forget(WireConn conn) = 0;
    // The id goes while it holds the connection: the peer hears of it (a rejection, a
    // disconnect, or the connection's end).
    virtual void release(WireConn conn) = 0;
    // The connection a QP on this device binds to when libsnic moves it to RTR (0: none;
    // a RoCEv2 QP is given its peer by its attributes instead).
    virtual std::uint32_t qp_binding(WireConn conn) const = 0;

    // The control thread's loop: descriptors that wake it, the work they bring (settling
    // in between), timers, and when the next timer is due (UINT64_MAX: none).
    virtual void poll_fds(std::vector<int>& out) const = 0;
    virtual void run(std::uint64_t now_ns) = 0;
    virtual std::uint64_t next_deadline() const = 0;
    // snicctl cm: the wire's own counters; false when it keeps none.
    virtual bool status(shm::CmPortStatus& out) const = 0;
    // The port's address changed (a shared-address port following its interface): the
    // connections set up from here on are on `ip` (host order).
    virtual void readdress(std::uint32_t ip) { (void)ip; }

  protected:
    void queue(const CmWireEvent& e) {
        if (sink_ != nullptr) sink_->queue(index_, e);
    }
    void settle() {
        if (sink_ != nullptr) sink_->settle();
    }

  private:
    CmWireSink* sink_ = nullptr;
    std::size_t index_ = 0;
};

}  // namespace snic::daemon
