// rdma_cm in snicd: the ids of libsnic's librdmacm, the ports they bind, their listeners and
// connections, all on the control thread. A client's event channel opens one CM connection
// to the daemon (cm_open, shm/cm.h); its ids live in one daemon-wide table, so that a
// listener's connect requests can become ids of the listener's owner whichever port they
// came in on, and each op checks that the id belongs to the asking connection.
//
// The wire is each device's CmWire (daemon/cm/wire.h): IB CM on QP1 for a port's RoCEv2
// device, MPA over snic's TCP for its iWARP device. The service speaks to that seam alone:
// connect/accept/reject/disconnect go out through the id's wire, and the wires' events come
// back here and become CmEvents in the owning connection's ring, followed by one
// notification byte on its socket (one byte per event: libsnic reads one byte for each event
// it takes). A listener listens on every device of its address.
//
// What the daemon does not do is touch the client's QP: libsnic moves its QP through
// RTR/RTS itself when a connect response or request comes, and to ERR on a disconnect (on
// iWARP, its RTR names the connection the QP runs on: CmEvent::iw_conn).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "common/result.h"
#include "daemon/cm/wire.h"
#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"
#include "proto/crc/siphash.h"
#include "shm/cm.h"
#include "shm/ring.h"

namespace snic::daemon {

class CmService;

// Counters of the CM service, daemon-wide (snicctl cm).
struct CmServiceCounters {
    std::uint64_t connect_requests = 0;  // REQs that found a listener
    std::uint64_t no_listener = 0;       // REQs rejected: no listener takes the request
    std::uint64_t backlog_full = 0;      // the listener's backlog was full: the REQ was dropped
                                         // unanswered (a SIDR_REQ rejected)
    std::uint64_t no_room = 0;           // REQs rejected: the listener's owner is at its id limit
    std::uint64_t events = 0;            // events delivered to clients
    std::uint64_t events_lost = 0;       // a client's event ring was full
};

// One CM connection of a client (an event channel of one process).
class CmSession {
  public:
    CmSession(CmService& service, const Peer& peer, std::uint64_t cookie)
        : service_(service), peer_(peer), cookie_(cookie) {}
    ~CmSession();
    CmSession(const CmSession&) = delete;
    CmSession& operator=(const CmSession&) = delete;

    // cm_open: the notification socket and the event ring's memfd. The socket is counted
    // in the client descriptors `resources` keeps per user (EMFILE past the quota).
    int open(FdList& fds, Resources& resources);

    const Peer& peer() const { return peer_; }
    std::uint32_t fds() const { return fds_; }  // descriptors kept: its notification socket
    std::uint64_t cookie() const { return cookie_; }
    std::uint32_t ids() const { return ids_; }

    // The ops of shm/cm.h; each returns 0 or an errno (and logs why at debug).
    int create_id(const shm::CmCreateIdReq& req, shm::CmIdReply& out);
    int destroy_id(const shm::HandleReq& req);
    int bind(const shm::CmBindReq& req, shm::CmBindReply& out);
    int listen(const shm::CmListenReq& req);
    int connect(const shm::CmConnectReq& req);
    int accept(const shm::CmAcceptReq& req);
    int reject(const shm::CmRejectReq& req);
    int disconnect(const shm::HandleReq& req);
    int migrate(const shm::CmMigrateReq& req, shm::CmIdReply& out);

    // Queues one event and notifies; false when the ring is full.
    bool push(const shm::CmEvent& e);

  private:
    friend class CmService;
    CmService& service_;
    Peer peer_;
    std::uint64_t cookie_;
    std::uint32_t fds_ = 0;
    KeptFd notify_;
    Mapping map_;
    std::optional<shm::RingProducer<shm::CmEvent>> ring_;
    std::uint32_t ids_ = 0;  // owned now
};

// A device's wire, and the port the device is on.
struct PortWire {
    std::uint16_t port = 0;
    CmWire* wire = nullptr;
};

// Which TCP rows (snicctl tcp) belong to one user: its ids' listening addresses and their
// connections' address pairs.
class TcpRowOwner {
  public:
    bool owns(const shm::TcpConnInfo& row) const;

  private:
    friend class CmService;
    using Listen = std::pair<std::uint32_t, std::uint16_t>;  // ip (0: any), port
    using Conn = std::tuple<std::uint32_t, std::uint16_t, std::uint32_t, std::uint16_t>;
    std::set<Listen> listens_;
    std::set<Conn> conns_;
};

class CmService final : private CmWireSink {
  public:
    // Ids per CM connection at most (listeners' connect requests included), and per user
    // (uid) over all of its connections: one user cannot take the daemon's whole id table
    // (65,535 handles) from the others. A server with a thousand connections holds an id
    // per connection plus the requests still pending (dtestcm -c 1000 through the OFED
    // uDAPL provider needs about 1,100).
    static constexpr std::uint32_t kMaxIdsPerSession = 4096;
    static constexpr std::uint32_t kMaxIdsPerUid = 16384;
    // Listening ids that hold a wire's listener (an iWARP port's TCP listener: 256 per port,
    // daemon_tcp_config) per user other than root: eight users together fill a port's table,
    // one alone cannot (ENOBUFS past it).
    static constexpr std::uint32_t kMaxListenersPerUid = 32;
    // Connects not yet answered per user other than root: a quarter of a port's half-open
    // table (4,096), so one user's connects to a dead address cannot take it all (EAGAIN past
    // it, as the agent's own bound answers).
    static constexpr std::uint32_t kMaxConnectingPerUid = 1024;

    // `devices` are the ports in port order, `wires` their devices' (at most 64); `seed`
    // makes ephemeral ports unpredictable.
    CmService(const std::vector<DevicePort>& devices, std::vector<PortWire> wires,
              std::uint64_t seed);
    ~CmService();

    std::unique_ptr<CmSession> new_session(const Peer& peer);
    CmSession* find_session(std::uint64_t cookie) const;

    // The control thread's loop: descriptors to poll (the wires'), the work they bring, the
    // wires' timers; the milliseconds the loop may sleep at most.
    void poll_fds(std::vector<int>& out) const;
    void run(std::uint64_t now_ns);
    int timeout_ms(std::uint64_t now_ns, int at_most) const;

    // snicctl cm.
    // snicctl cm's status: the ids of `uid` alone when given (a client other than root sees
    // its own), every id otherwise; the ports' counters are the port's.
    void fill_status(shm::CmStatusReply& r, std::optional<std::uint32_t> uid = {}) const;
    // snicctl tcp's filter for a client other than root: the rows of port `port_index`'s TCP
    // that are the listeners or the connections of `uid`'s ids. A connection that outlived
    // its id (closing, TIME-WAIT) is nobody's: root alone sees it.
    TcpRowOwner tcp_rows_of(std::uint32_t uid, std::uint32_t port_index) const;

    static std::uint64_t now_ns();

  private:
    friend class CmSession;
    struct Id;
    struct WireCm;

    Id* find(CmSession& owner, shm::Handle h, const char* op);
    Id* find_any(shm::Handle h) const { return ids_.find(h); }
    void destroy(Id& id);
    // Binding: true when (ps, ip, port) is free for `id`.
    bool bindable(const Id& id, std::uint32_t ip, std::uint16_t port, bool reuse) const;
    std::uint16_t ephemeral_port(const Id& id, std::uint32_t ip);
    // The port whose subnet holds `ip` (or whose address it is), if any.
    std::optional<std::uint16_t> port_for(std::uint32_t ip) const;
    // The wire of port `port`'s device of `transport`, if the port has one.
    std::optional<std::size_t> wire_for(std::uint16_t port, std::uint8_t transport) const;
    Id* listener_for(std::uint16_t ps, std::uint16_t port, std::uint32_t ip) const;
    // Whether any id listens on (ps, port), whatever its address.
    bool listening_on(std::uint16_t ps, std::uint16_t port) const;
    // A listener listens on every device of its address, or on none when one of them cannot
    // (its error) or its owner holds its share of listeners already; unlisten undoes it.
    Status listen_on_wires(Id& id);
    void unlisten(Id& id);
    void unlisten_wires(Id& id);

    // CmWireSink: a wire's events are queued, then handled by drain_events().
    void queue(std::size_t wire, const CmWireEvent& e) override;
    void settle() override { drain_events(); }
    void drain_events();
    void on_event(std::size_t wire, const CmWireEvent& e);
    void on_request(std::size_t wire, const CmWireEvent& e);
    // The listener that takes a request, or why none does.
    Id* taker(const CmWireEvent& e, Refusal& why) const;
    // A connect request's new id, owned by listener `l`'s owner, on wire `wire`.
    std::unique_ptr<Id> child_of(const Id& l, std::size_t wire, const CmWireEvent& e) const;
    // Queues one event of `id` in its owner's ring, with the peer's parameters if any;
    // false when the ring was full (counted).
    bool deliver(Id& id, std::uint32_t type, std::int32_t status,
                 const shm::CmConnParam* peer = nullptr);
    // Forgets the id's connection (no more events for it); the wire forgets it too unless
    // `tell_wire` is false (it was refused or released there already).
    void unlink(Id& id, bool tell_wire = true);
    // Whether `owner` may hold one more id; counting one in or out.
    bool has_room(const CmSession& owner) const;
    // The ids of `uid` whose connect request is not yet answered.
    std::uint32_t connecting(std::uint32_t uid) const;
    void count_id(CmSession& owner, int delta);

    const std::vector<DevicePort>& devices_;
    std::vector<std::unique_ptr<WireCm>> wires_;
    std::vector<std::pair<std::size_t, CmWireEvent>> queued_;  // by wire index
    HandleTable<Id> ids_;
    std::map<std::uint64_t, CmSession*> sessions_;  // by cookie
    std::map<std::uint32_t, std::uint32_t> ids_by_uid_;
    std::map<std::uint32_t, std::uint32_t> listeners_by_uid_;  // ids with `listening` set
    std::uint64_t next_cookie_;
    SipKey port_key_{};             // ephemeral ports: from the seed
    std::uint64_t port_draws_ = 0;  // ephemeral ports drawn
    CmServiceCounters counters_;
};

}  // namespace snic::daemon
