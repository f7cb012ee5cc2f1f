// What the files of libsnic's rdma_cm share: the id and the event channel as libsnic keeps
// them, the sets of live ids, and the helpers that more than one file calls. cm.cc holds the
// ids and channels, cm_resolve.cc address and route resolution, cm_connect.cc the connection
// calls, cm_events.cc the events, cm_qp.cc the id's QP and its state moves, and cm_ep.cc
// rdma_getaddrinfo and the endpoint calls (rdma_create_ep).
#pragma once

#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "libclient/internal.h"
#include "libclient/util.h"
#include "shm/cm.h"

namespace snic::client::cm {

struct CmId;

// One daemon's CM connection of a channel.
struct CmConn {
    std::string path;
    Conn conn;
    Mapping map;
    std::optional<shm::RingConsumer<shm::CmEvent>> ring;
    std::uint64_t cookie = 0;
};

// An event channel: our end of the notification socket pair, the events made here, and a
// CM connection to each daemon its ids live on.
struct CmChannel {
    rdma_event_channel ch;  // ch.fd is our end
    Fd ours;
    Fd theirs;  // the daemons' end; local events are written here
    std::mutex mu;
    std::deque<rdma_cm_event> local;  // made here; id pointers inside
    std::vector<std::unique_ptr<CmConn>> conns;
    std::map<std::pair<CmConn*, shm::Handle>, CmId*> ids;
    std::atomic<int> readers{0};  // threads in rdma_get_cm_event
    ~CmChannel();
};

// librdmacm's rsockets (its rsocket.c) run over this rdma_cm: under snic-run their rdma_*
// calls are ours. Two helpers of librdmacm's own that they call read librdmacm's id behind
// its rdma_cm_id, though: ucma_complete (whether the id is synchronous; if so it acknowledges
// id->event and waits for the next) and ucma_max_qpsize (the largest queue of the id's
// device, through the id's device pointer). A CmId keeps these where librdmacm's id (struct
// cma_id_private) has them, the same in every rdma-core from 17 to 65; rsocket.cc lets
// sockets be made only in a librdmacm of those releases.
struct RdmacmIdView {
    const int* cma_dev = nullptr;  // CmId::rdmacm_dev once the id is on a device
    void* connect = nullptr;
    std::size_t connect_len = 0;
    int events_completed = 0;
    int connect_error = 0;
    int sync = 0;
};

struct CmIdHead {
    rdma_cm_id id;        // first: the application's pointer converts back
    RdmacmIdView rdmacm;  // then what librdmacm's helpers read
};
static_assert(offsetof(CmIdHead, rdmacm) == sizeof(rdma_cm_id) &&
              offsetof(RdmacmIdView, cma_dev) == 0 && offsetof(RdmacmIdView, sync) == 32);

// librdmacm's struct cma_device holds max_qpsize at byte 72 since rdma-core 30, at byte 48
// before (two pointers and a list node came in front); ucma_max_qpsize reads nothing else.
inline constexpr std::size_t kRdmacmQpsizeAt[] = {48, 72};

struct CmId : CmIdHead {
    // What ucma_max_qpsize finds as the id's device (kRdmacmQpsizeAt).
    alignas(8) int rdmacm_dev[20] = {};
    CmChannel* ch = nullptr;
    bool sync = false;               // created without a channel: its calls wait for their events
    std::unique_ptr<CmChannel> own;  // a sync id's private channel
    Device* dev = nullptr;
    CmConn* conn = nullptr;  // where `handle` lives
    shm::Handle handle = shm::kNoHandle;
    std::vector<std::pair<CmConn*, shm::Handle>> listens;  // a wildcard listener's other daemons
    bool bound = false;
    bool listening = false;
    int reuse = 0;
    std::uint8_t tos = 0;
    std::uint8_t ack_timeout = 0;  // 0: the default (14)
    std::uint32_t psn = 0;
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
    std::uint8_t retry_count = 7;
    std::uint8_t rnr_retry_count = 7;
    shm::CmConnParam peer{};    // the connect request's or response's QP
    std::uint32_t iw_conn = 0;  // iWARP: the daemon's connection the QP binds to
    // iWARP: the application's own QP (ibv_create_qp), named by conn_param.qp_num, which
    // rdma_cm binds to the connection as the kernel's iWARP CM does (none: id.qp).
    std::uint32_t app_qp_num = 0;
    CmId* listener = nullptr;
    // rdma_create_ep's listener: what rdma_get_request gives each new id.
    bool has_ep_attr = false;
    ibv_qp_init_attr ep_attr{};
    bool own_cqs = false;
    bool closing = false;
    // Events rdma_get_cm_event handed out for this id (a connect request counts for its
    // listener) and those acknowledged; rdma_destroy_id waits until they are equal, as
    // librdmacm's does, so no event an application still holds names freed memory. Under g_mu.
    unsigned events_reported = 0;
    unsigned events_completed = 0;
};

extern std::mutex g_mu;                  // the ids and the contexts
extern std::condition_variable g_acked;  // an event was acknowledged (rdma_destroy_id waits on it)
extern std::set<CmId*> g_ids;            // live ids (a connect request's token is checked here)

inline int fail(int err) {
    errno = err;
    return -1;
}

inline CmId* to_id(rdma_cm_id* id) {
    return reinterpret_cast<CmId*>(id);
}
inline CmChannel* to_chan(rdma_event_channel* c) {
    return reinterpret_cast<CmChannel*>(c);
}

inline std::uint32_t ip_of(const sockaddr* sa) {
    return sa != nullptr && sa->sa_family == AF_INET
               ? ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr)
               : 0;
}
inline std::uint16_t port_of(const sockaddr* sa) {
    return sa != nullptr && sa->sa_family == AF_INET
               ? ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port)
               : 0;
}
inline sockaddr_storage& src_of(CmId* i) {
    return *reinterpret_cast<sockaddr_storage*>(&i->id.route.addr.src_storage);
}
inline sockaddr_storage& dst_of(CmId* i) {
    return *reinterpret_cast<sockaddr_storage*>(&i->id.route.addr.dst_storage);
}

inline bool is_iwarp(const CmId* i) {
    return i->dev != nullptr && i->dev->transport == shm::kTransportIwarp;
}
inline bool is_ud(const CmId* i) {
    return i->id.qp_type == IBV_QPT_UD;
}

// ---- cm.cc: ids, channels and their daemon ids ----------------------------------------

// The id the application's pointer names if it is live, else nullptr: every call that takes
// an id looks it up here first, so that a call on an id already destroyed (perftest retries
// with one) fails with EINVAL instead of reading freed memory. Only the pointer's value is
// compared; nothing is read through it.
CmId* live_id(rdma_cm_id* id);
// The channel the application's pointer names if it is live, else nullptr (as live_id).
CmChannel* live_channel(rdma_event_channel* c);
// Keeps what librdmacm's helpers read of the id (RdmacmIdView) up to date: whether it is
// synchronous, and its device's largest queue once it is on one.
void show_rdmacm(CmId* i);
// The verbs context rdma_cm opens on `d`: one per device, kept while the process runs.
ibv_context* context_of(Device* d);
// The protection domain librdmacm gives every id on a device (rdma_cm_id.pd): one per verbs
// context, made the first time an id lands on the device and kept while the process runs.
// Consumers create QPs on id->pd without allocating one (UCX's rdmacm transport does).
ibv_pd* default_pd(ibv_context* ctx);
// The channel's CM connection to the daemon at `path`, opened on first use.
int conn_for(CmChannel& ch, const std::string& path, CmConn** out);
// A daemon id for `i` on `conn`'s daemon, registered for the channel's events.
int daemon_id(CmId* i, CmConn* conn, shm::Handle* out);
// Puts the id on `dev` (its daemon id, its verbs context and the device's PD); 0 or an
// errno.
int attach(CmId* i, Device* dev);
// The daemon ids of a wildcard binding (`listens`).
void destroy_wildcard_ids(CmId* i);
// A random starting PSN (24 bits): each new id's, a connect request's too.
std::uint32_t random_psn();

// ---- cm_resolve.cc: addresses and devices ---------------------------------------------

// `ss` made the IPv4 address `ip` and `port` (both in host order).
void set_sin(sockaddr_storage& ss, std::uint32_t ip, std::uint16_t port);
// The IPv4-mapped GID of `ip` (::ffff:a.b.c.d).
ibv_gid gid_of(std::uint32_t ip);
// The device of a daemon's port that a connect request came in on. The devices known
// already are looked at first: the request came to a listener of this process, whose
// devices were found when it bound or listened, and asking every daemon again for each of
// a thousand requests (cmtime -c 1000) costs a control connection each.
Device* device_at(const std::string& path, std::uint32_t port_index, std::uint32_t transport);
// Binds an id to the wildcard address on every daemon: a daemon id on each (`listens`), all
// on one port, so that the port is the id's from the bind on, as Linux's rdma_bind_addr
// assigns it (qperf sends its peer the port rdma_get_src_port gives after the bind). Port
// 0 takes the first daemon's ephemeral port; when another daemon has that one in use, the
// next try takes a new one. rdma_listen listens on these ids; rdma_resolve_addr keeps the
// one of the device it resolves to. 0 or an errno; on failure the id holds no daemon id.
int bind_wildcard(CmId* i, std::uint16_t port, std::uint16_t* out);

// ---- cm_events.cc: events ---------------------------------------------------------------

// An event made here (address or route resolution) for the id's channel, and its byte.
void post_local(CmId* i, rdma_cm_event_type type, int status);
// Acknowledges the event a synchronous id holds in id->event (its last call's, kept there for
// the application to read as librdmacm keeps it), if any: at the id's next event, its move to
// another channel and its destruction.
void drop_held_event(CmId* i);
// Acknowledges an event a call of this library took for itself (not for the application): a
// synchronous id no longer holds it.
void ack_taken(rdma_cm_event* e);
// A sync id's call: the next event of its channel must be `want` (status 0). The event stays
// in id->event until the id's next call or its destruction, as librdmacm leaves it there:
// rsockets read the connect response's private data from it after rdma_connect.
int wait_for(CmId* i, rdma_cm_event_type want);

// ---- cm_qp.cc: the id's QP ------------------------------------------------------------

// The QP rdma_cm moves for the id: rdma_create_qp's; on iWARP also the application's own,
// named by conn_param.qp_num (on RoCE the application moves its own QP itself).
ibv_qp* managed_qp(CmId* i);
// Remembers the application's QP that rdma_connect or rdma_accept names on iWARP.
void take_app_qp(CmId* i, const rdma_conn_param* p);
// The id's QP (rdma_create_qp's) to ERR; 0 when it has none.
int modify_err(CmId* i);
// The active MTU of the id's port; IBV_MTU_1024 when the id has no device to ask.
ibv_mtu port_mtu(CmId* i);
// RTR then RTS from the peer's QP (REQ or REP). On iWARP the QP has no peer QP to name: its
// RTR binds it to the connection the daemon made (the MPA exchange is over), with the
// resources agreed on.
int connect_qp(CmId* i);
// What our REQ (active) or REP (passive) carries (cm_rules.h), with the QP, its SRQ, its
// type and private data; the id's resources and retry counts are take_resources'.
shm::CmConnParam our_param(CmId* i, const rdma_conn_param* p);
// The resources and retry counts a connection asks for, as librdmacm's rdma_connect and
// rdma_accept take them (cm_rules::resources): without a conn_param, what the connect
// request asked (passive) or the device's most (active). EINVAL for a value beyond the
// device's in the TCP port space, as librdmacm.
int take_resources(CmId* i, const rdma_conn_param* p);

}  // namespace snic::client::cm
