// rdma_cm in snicd: the ids of libsnic's librdmacm, the ports they bind, and IB CM on the
// ports' QP1, all on the control thread. A client's event channel opens one CM connection to
// the daemon (cm_open, shm/cm.h); its ids live in one daemon-wide table, so that a listener's
// connect requests can become ids of the listener's owner whichever port they came in on,
// and each op checks that the id belongs to the asking connection.
//
// The wire side is one cm::Agent per port (proto/cm/agent.h): connect/accept/reject/
// disconnect go out through the port's GsiPort (daemon/gsi.h) as MADs; the agent's events come
// back here and become CmEvents in the owning connection's ring, followed by one notification
// byte on its socket (one byte per event: libsnic reads one byte for each event it takes).
//
// On a port's iWARP device the wire is MPA over snic's TCP instead (daemon/iwarp_transport.h):
// the same ids and events, a connection of the port's IwarpTransport in place of an agent's,
// the consumer's private data in the MPA frames, listeners listening on both.
//
// What the daemon does not do is touch the client's QP: libsnic moves its QP through
// RTR/RTS itself when a connect response or request comes, and to ERR on a disconnect (on
// iWARP, its RTR names the connection the QP runs on).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/result.h"
#include "daemon/client_memory.h"
#include "daemon/resources.h"
#include "daemon/session.h"
#include "proto/cm/agent.h"
#include "shm/cm.h"
#include "shm/ring.h"

namespace snic::daemon {

class GsiPort;
class CmService;
class IwarpTransport;
struct IwCmEvent;

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

class CmService {
  public:
    // Ids per CM connection at most (listeners' connect requests included), and per user
    // (uid) over all of its connections: one user cannot take the daemon's whole id table
    // (65,535 handles) from the others. A server with a thousand connections holds an id
    // per connection plus the requests still pending (dtestcm -c 1000 through the OFED
    // uDAPL provider needs about 1,100).
    static constexpr std::uint32_t kMaxIdsPerSession = 4096;
    static constexpr std::uint32_t kMaxIdsPerUid = 16384;

    // `devices`, `gsi` and `iwarp` are per port, in port order (gsi entries may be null in
    // tests that give a port no wire, iwarp entries for ports without an iWARP device); `seed`
    // makes ephemeral ports and CM identifiers unpredictable.
    CmService(const std::vector<DevicePort>& devices, std::vector<GsiPort*> gsi, std::uint64_t seed,
              std::vector<IwarpTransport*> iwarp = {});
    ~CmService();

    std::unique_ptr<CmSession> new_session(const Peer& peer);
    CmSession* find_session(std::uint64_t cookie) const;

    // The control thread's loop: descriptors to poll (one per port), the MADs that came in,
    // the agents' timers; the milliseconds the loop may sleep at most.
    void poll_fds(std::vector<int>& out) const;
    void run(std::uint64_t now_ns);
    int timeout_ms(std::uint64_t now_ns, int at_most) const;

    // snicctl cm.
    void fill_status(shm::CmStatusReply& r) const;

    static std::uint64_t now_ns();

  private:
    friend class CmSession;
    struct Id;
    struct PortCm;

    Id* find(CmSession& owner, shm::Handle h, const char* op);
    Id* find_any(shm::Handle h) const { return ids_.find(h); }
    void destroy(Id& id);
    // Binding: true when (ps, ip, port) is free for `id`.
    bool bindable(const Id& id, std::uint32_t ip, std::uint16_t port, bool reuse) const;
    std::uint16_t ephemeral_port(const Id& id, std::uint32_t ip);
    // The port whose subnet holds `ip` (or whose address it is), if any.
    std::optional<std::uint16_t> port_for(std::uint32_t ip) const;
    Id* listener_for(std::uint16_t ps, std::uint16_t port, std::uint32_t ip) const;
    // Whether any id listens on (ps, port), whatever its address.
    bool listening_on(std::uint16_t ps, std::uint16_t port) const;

    void on_event(std::size_t port, const cm::Event& e, std::span<const std::uint8_t> pd);
    // A connect request's new id, owned by listener `l`'s owner, on port `port`.
    std::unique_ptr<Id> child_of(const Id& l, std::size_t port, std::uint32_t local_ip,
                                 std::uint16_t local_port, std::uint32_t remote_ip,
                                 std::uint16_t remote_port) const;
    // iWARP: one connection event of a port's transport.
    void on_iw_event(std::size_t port, const IwCmEvent& e);
    void on_iw_request(std::size_t port, const IwCmEvent& e);
    // iWARP: the ports an id listens on for MPA (all of them for the wildcard).
    void iw_listen(Id& id);
    void iw_unlisten(Id& id);
    // The ops on an iWARP id.
    int iw_accept(Id& id, const shm::CmConnParam& param);
    int iw_reject(Id& id, std::span<const std::uint8_t> pd);
    int iw_disconnect(Id& id);
    // Delivers an iWARP event: the resources in `rr`/`depth`, the peer's private data.
    bool deliver_iw(Id& id, std::uint32_t type, std::int32_t status, std::uint8_t rr,
                    std::uint8_t depth, std::span<const std::uint8_t> pd);
    void on_request(std::size_t port, const cm::Event& e, std::span<const std::uint8_t> pd);
    // Handles what the agents queued while they ran.
    void drain_events();
    // Queues one event of `id` in its owner's ring; false when the ring was full (counted).
    bool deliver(Id& id, std::uint32_t type, std::int32_t status, const cm::Event* e,
                 std::span<const std::uint8_t> private_data);
    void unlink(Id& id);  // forgets the id's connection (no more events for it)
    // Whether `owner` may hold one more id; counting one in or out.
    bool has_room(const CmSession& owner) const;
    void count_id(CmSession& owner, int delta);

    const std::vector<DevicePort>& devices_;
    std::vector<std::unique_ptr<PortCm>> ports_;
    HandleTable<Id> ids_;
    std::map<std::uint64_t, CmSession*> sessions_;  // by cookie
    std::map<std::uint32_t, std::uint32_t> ids_by_uid_;
    std::uint64_t next_cookie_;
    std::uint64_t rng_;
    CmServiceCounters counters_;
};

}  // namespace snic::daemon
