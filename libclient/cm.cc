// librdmacm over snicd (shm/cm.h, daemon/cm_service.h): rdma_cm's entry points, compiled
// against rdma-core's <rdma/rdma_cma.h> and exported unversioned, so that under snic-run
// they interpose librdmacm's as libsnic's verbs interpose libibverbs'.
//
// An event channel is a notification socket pair: the application polls our end; each daemon
// the channel's ids live on holds a copy of the other end (one CM connection per daemon, with
// an event ring in a memfd), and the events libsnic makes itself (address and route
// resolution) are written to it here. One byte is one event, wherever the event waits: a
// reader takes one byte, then one event from the local queue or any ring.
//
// Address resolution is local: an address belongs to the snic device whose port holds it
// or whose subnet it is on. The QP moves through its states here, not in the daemon, as
// librdmacm moves it: INIT at rdma_create_qp, RTR/RTS at a connect response (active) or at
// rdma_accept (passive), ERR at rdma_disconnect.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "libclient/cm_rules.h"
#include "libclient/internal.h"
#include "libclient/util.h"
#include "shm/cm.h"

namespace shm = snic::shm;

static_assert(int{RDMA_CM_EVENT_CONNECT_REQUEST} == int{shm::kCmConnectRequest} &&
              int{RDMA_CM_EVENT_REJECTED} == int{shm::kCmRejected} &&
              int{RDMA_CM_EVENT_TIMEWAIT_EXIT} == int{shm::kCmTimewaitExit});
static_assert(RDMA_PS_TCP == shm::kCmPsTcp && RDMA_PS_UDP == shm::kCmPsUdp &&
              RDMA_PS_IB == shm::kCmPsIb && RDMA_PS_IPOIB == shm::kCmPsIpoib);

namespace snic::client {
namespace {

struct CmId;

// One daemon's CM connection of a channel.
struct CmConn {
    std::string path;
    Conn conn;
    Mapping map;
    std::optional<shm::RingConsumer<shm::CmEvent>> ring;
    std::uint64_t cookie = 0;
};

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
constexpr std::size_t kRdmacmQpsizeAt[] = {48, 72};

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

struct EventBox {
    rdma_cm_event ev;       // first
    CmId* owner = nullptr;  // whose events_reported counted it
    std::uint8_t data[shm::kCmMaxPrivate];
};

std::mutex g_mu;                  // the ids and the contexts
std::condition_variable g_acked;  // an event was acknowledged (rdma_destroy_id waits on it)
std::set<CmId*> g_ids;            // live ids (a connect request's token is checked here)
// Live channels: rdma_create_event_channel's and synchronous ids' own, checked as ids are.
std::set<const CmChannel*> g_channels;
std::map<Device*, ibv_context*> g_contexts;

int fail(int err) {
    errno = err;
    return -1;
}

int env_int(const char* name, int dflt, int lo, int hi) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return dflt;
    const int n = std::atoi(v);
    return n < lo || n > hi ? dflt : n;
}

// The CM response timeout exponent and retries of REQs (Linux's defaults: 20 and 15).
std::uint8_t cm_response_timeout() {
    return static_cast<std::uint8_t>(env_int("SNIC_CM_RESPONSE_TIMEOUT", 20, 8, 31));
}
std::uint8_t cm_retries() {
    return static_cast<std::uint8_t>(env_int("SNIC_CM_RETRIES", 15, 1, 15));
}

CmId* to_id(rdma_cm_id* id) {
    return reinterpret_cast<CmId*>(id);
}

// Keeps what librdmacm's helpers read of the id (RdmacmIdView) up to date: whether it is
// synchronous, and its device's largest queue once it is on one.
void show_rdmacm(CmId* i) {
    i->rdmacm.sync = i->sync ? 1 : 0;
    ibv_device_attr da{};
    if (i->rdmacm.cma_dev != nullptr || i->id.verbs == nullptr ||
        ibv_query_device(i->id.verbs, &da) != 0)
        return;
    for (const std::size_t at : kRdmacmQpsizeAt) i->rdmacm_dev[at / sizeof(int)] = da.max_qp_wr;
    i->rdmacm.cma_dev = i->rdmacm_dev;
}

// The id the application's pointer names if it is live, else nullptr: every call that takes
// an id looks it up here first, so that a call on an id already destroyed (perftest retries
// with one) fails with EINVAL instead of reading freed memory. Only the pointer's value is
// compared; nothing is read through it.
CmId* live_id(rdma_cm_id* id) {
    CmId* i = to_id(id);
    std::lock_guard lock(g_mu);
    return g_ids.count(i) != 0 ? i : nullptr;
}
CmChannel* to_chan(rdma_event_channel* c) {
    return reinterpret_cast<CmChannel*>(c);
}

CmChannel::~CmChannel() {
    std::lock_guard lock(g_mu);
    g_channels.erase(this);
}

// The channel the application's pointer names if it is live, else nullptr (as live_id).
CmChannel* live_channel(rdma_event_channel* c) {
    CmChannel* ch = to_chan(c);
    std::lock_guard lock(g_mu);
    return g_channels.count(ch) != 0 ? ch : nullptr;
}

std::uint32_t ip_of(const sockaddr* sa) {
    return sa != nullptr && sa->sa_family == AF_INET
               ? ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr)
               : 0;
}
std::uint16_t port_of(const sockaddr* sa) {
    return sa != nullptr && sa->sa_family == AF_INET
               ? ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port)
               : 0;
}
void set_sin(sockaddr_storage& ss, std::uint32_t ip, std::uint16_t port) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    std::memset(&ss, 0, sizeof ss);
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(ip);
    sin->sin_port = htons(port);
}
sockaddr_storage& src_of(CmId* i) {
    return *reinterpret_cast<sockaddr_storage*>(&i->id.route.addr.src_storage);
}
sockaddr_storage& dst_of(CmId* i) {
    return *reinterpret_cast<sockaddr_storage*>(&i->id.route.addr.dst_storage);
}

ibv_gid gid_of(std::uint32_t ip) {
    ibv_gid g{};
    g.raw[10] = 0xff, g.raw[11] = 0xff;
    g.raw[12] = static_cast<std::uint8_t>(ip >> 24);
    g.raw[13] = static_cast<std::uint8_t>(ip >> 16);
    g.raw[14] = static_cast<std::uint8_t>(ip >> 8);
    g.raw[15] = static_cast<std::uint8_t>(ip);
    return g;
}

// The device owning `ip`: its port's address first, then the port whose subnet holds it.
Device* device_for(std::uint32_t ip, bool exact) {
    const std::vector<Device*> all = current_devices();
    for (Device* d : all)
        if (d->ipv4 == ip) return d;
    if (exact) return nullptr;
    for (Device* d : all)
        if (d->ipv4 != 0 && ((d->ipv4 ^ ip) & d->netmask()) == 0) return d;
    return nullptr;
}

// 127.0.0.0/8. As a destination it stands for the first snic port, as the kernel's rdma_cm
// puts a loopback destination on the first RDMA device with an active port (the connection
// loops back through it).
bool is_loopback(std::uint32_t ip) {
    return (ip >> 24) == 127;
}

Device* loopback_device() {
    for (Device* d : current_devices())
        if (d->ipv4 != 0) return d;
    return nullptr;
}

ibv_context* context_of(Device* d) {
    std::lock_guard lock(g_mu);
    auto it = g_contexts.find(d);
    if (it != g_contexts.end()) return it->second;
    ibv_context* c = ibv_open_device(&d->dev);
    if (c != nullptr) g_contexts[d] = c;
    return c;
}

// The device of a daemon's port that a connect request came in on. The devices known
// already are looked at first: the request came to a listener of this process, whose
// devices were found when it bound or listened, and asking every daemon again for each of
// a thousand requests (cmtime -c 1000) costs a control connection each.
Device* device_at(const std::string& path, std::uint32_t port_index, std::uint32_t transport) {
    auto at = [&](Device* d) {
        return path == d->socket_path && d->port_index == port_index && d->transport == transport;
    };
    for (Device* d : known_devices())
        if (at(d)) return d;
    for (Device* d : current_devices())
        if (at(d)) return d;
    return nullptr;
}

bool is_iwarp(const CmId* i) {
    return i->dev != nullptr && i->dev->transport == shm::kTransportIwarp;
}

// The QP rdma_cm moves for the id: rdma_create_qp's; on iWARP also the application's own,
// named by conn_param.qp_num (on RoCE the application moves its own QP itself).
ibv_qp* managed_qp(CmId* i) {
    if (i->id.qp != nullptr) return i->id.qp;
    if (!is_iwarp(i) || i->app_qp_num == 0 || i->id.verbs == nullptr) return nullptr;
    return qp_by_num(i->id.verbs, i->app_qp_num);
}

// Remembers the application's QP that rdma_connect or rdma_accept names on iWARP.
void take_app_qp(CmId* i, const rdma_conn_param* p) {
    if (i->id.qp == nullptr && is_iwarp(i) && p != nullptr) i->app_qp_num = p->qp_num;
}

// Wakes the channel's reader for one more event.
void post_byte(CmChannel& ch) {
    const char one = 1;
    [[maybe_unused]] const ssize_t n =
        ::send(ch.theirs.get(), &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void post_local(CmId* i, rdma_cm_event_type type, int status) {
    rdma_cm_event e{};
    e.id = &i->id;
    e.event = type;
    e.status = status;
    {
        std::lock_guard lock(i->ch->mu);
        i->ch->local.push_back(e);
    }
    post_byte(*i->ch);
}

// The channel's CM connection to the daemon at `path`, opened on first use.
int conn_for(CmChannel& ch, const std::string& path, CmConn** out) {
    std::lock_guard lock(ch.mu);
    for (auto& c : ch.conns)
        if (c->path == path) {
            *out = c.get();
            return 0;
        }
    auto c = std::make_unique<CmConn>();
    c->path = path;
    if (const int err = c->conn.connect(path, control_timeout_ms()); err != 0) return err;
    const shm::Layout layout = shm::cm_event_layout();
    Fd memfd;
    if (const int err = make_shared_area("libsnic-cm", layout.bytes, &memfd, &c->map); err != 0)
        return err;
    auto ring = shm::RingConsumer<shm::CmEvent>::init(std::span(c->map.data(), layout.bytes),
                                                      shm::kCmEventCapacity);
    if (!ring) return EINVAL;
    c->ring = *ring;
    shm::CmOpenReply rep{};
    const int fds[2] = {ch.theirs.get(), memfd.get()};
    if (const int err = c->conn.call(shm::CtrlOp::cm_open, shm::Empty{}, &rep, fds); err != 0) {
        if (err == EINVAL || err == ENOSYS)
            say("snicd at %s does not speak rdma_cm (%s)", path.c_str(), std::strerror(err));
        return err;
    }
    c->cookie = rep.cookie;
    *out = c.get();
    ch.conns.push_back(std::move(c));
    return 0;
}

// A daemon id for `i` on `conn`'s daemon, registered for the channel's events.
int daemon_id(CmId* i, CmConn* conn, shm::Handle* out) {
    shm::CmIdReply rep{};
    const shm::CmCreateIdReq req{reinterpret_cast<std::uint64_t>(i),
                                 static_cast<std::uint16_t>(i->id.ps),
                                 static_cast<std::uint8_t>(i->id.qp_type),
                                 {}};
    if (const int err = conn->conn.call(shm::CtrlOp::cm_create_id, req, &rep); err != 0) return err;
    std::lock_guard lock(i->ch->mu);
    i->ch->ids[{conn, rep.id}] = i;
    *out = rep.id;
    return 0;
}

// The protection domain librdmacm gives every id on a device (rdma_cm_id.pd): one per verbs
// context, made the first time an id lands on the device and kept while the process runs.
// Consumers create QPs on id->pd without allocating one (UCX's rdmacm transport does).
ibv_pd* default_pd(ibv_context* ctx) {
    static std::mutex mu;
    static std::map<ibv_context*, ibv_pd*> pds;
    std::lock_guard lock(mu);
    auto it = pds.find(ctx);
    if (it != pds.end()) return it->second;
    ibv_pd* pd = ibv_alloc_pd(ctx);
    if (pd != nullptr) pds[ctx] = pd;
    return pd;
}

// Puts the id on `dev` (its daemon id, its verbs context and the device's PD); 0 or an
// errno.
int attach(CmId* i, Device* dev) {
    if (i->dev == dev && i->handle != shm::kNoHandle) return 0;
    if (i->dev != nullptr && i->dev != dev) return EINVAL;  // bound elsewhere
    ibv_context* ctx = context_of(dev);
    if (ctx == nullptr) return errno != 0 ? errno : ENODEV;
    if (i->handle == shm::kNoHandle) {
        CmConn* conn = nullptr;
        if (const int err = conn_for(*i->ch, dev->socket_path, &conn); err != 0) return err;
        shm::Handle h;
        if (const int err = daemon_id(i, conn, &h); err != 0) return err;
        i->conn = conn;
        i->handle = h;
    }
    i->dev = dev;
    i->id.verbs = ctx;
    i->id.port_num = 1;
    if (i->id.pd == nullptr) i->id.pd = default_pd(ctx);
    show_rdmacm(i);
    return 0;
}

int bind_daemon(CmId* i, CmConn* conn, shm::Handle h, std::uint32_t ip, std::uint16_t port,
                shm::CmBindReply* rep) {
    const shm::CmBindReq req{h, ip, port, static_cast<std::uint8_t>(i->reuse != 0), 0};
    return conn->conn.call(shm::CtrlOp::cm_bind, req, rep);
}

void destroy_daemon_id(CmId* i, CmConn* conn, shm::Handle h) {
    shm::Empty none;
    conn->conn.call(shm::CtrlOp::cm_destroy_id, shm::HandleReq{h, 0}, &none);
    std::lock_guard lock(i->ch->mu);
    i->ch->ids.erase({conn, h});
}

// The daemon ids of a wildcard binding (`listens`).
void destroy_wildcard_ids(CmId* i) {
    for (const auto& [conn, h] : i->listens) destroy_daemon_id(i, conn, h);
    i->listens.clear();
}

void destroy_daemon_ids(CmId* i) {
    if (i->conn != nullptr && i->handle != shm::kNoHandle) destroy_daemon_id(i, i->conn, i->handle);
    destroy_wildcard_ids(i);
    i->handle = shm::kNoHandle;
}

// The daemons of the process's devices, each once (by control socket).
std::vector<std::string> daemon_paths() {
    std::vector<std::string> paths;
    for (Device* d : current_devices())
        if (std::find(paths.begin(), paths.end(), d->socket_path) == paths.end())
            paths.push_back(d->socket_path);
    return paths;
}

// Binds an id to the wildcard address on every daemon: a daemon id on each (`listens`), all
// on one port, so that the port is the id's from the bind on, as Linux's rdma_bind_addr
// assigns it (qperf sends its peer the port rdma_get_src_port gives after the bind). Port
// 0 takes the first daemon's ephemeral port; when another daemon has that one in use, the
// next try takes a new one. rdma_listen listens on these ids; rdma_resolve_addr keeps the
// one of the device it resolves to. 0 or an errno; on failure the id holds no daemon id.
int bind_wildcard(CmId* i, std::uint16_t port, std::uint16_t* out) {
    const std::vector<std::string> paths = daemon_paths();
    if (paths.empty()) return ENODEV;
    constexpr int kTries = 8;
    int err = 0;
    for (int attempt = 0; attempt < (port == 0 && paths.size() > 1 ? kTries : 1); ++attempt) {
        std::uint16_t want = port;
        for (const std::string& path : paths) {
            CmConn* conn = nullptr;
            shm::Handle h = shm::kNoHandle;
            shm::CmBindReply rep{};
            err = conn_for(*i->ch, path, &conn);
            if (err == 0) err = daemon_id(i, conn, &h);
            if (err == 0) i->listens.push_back({conn, h});
            if (err == 0) err = bind_daemon(i, conn, h, 0, want, &rep);
            if (err != 0) break;
            want = rep.port;
        }
        if (err == 0) {
            *out = want;
            return 0;
        }
        destroy_wildcard_ids(i);
        if (err != EADDRINUSE) break;
    }
    return err;
}

// A wildcard-bound id that resolves to `dev`: keeps the daemon id on dev's daemon as its
// own (bound to the wildcard, on the id's port) and lets the other daemons' ids go.
void keep_wildcard_id(CmId* i, const Device* dev) {
    for (auto it = i->listens.begin(); it != i->listens.end(); ++it) {
        if (it->first->path != dev->socket_path) continue;
        i->conn = it->first;
        i->handle = it->second;
        i->listens.erase(it);
        break;
    }
    destroy_wildcard_ids(i);
}

// Takes one waiting event, if any (the channel's lock held).
bool pop_event(CmChannel& ch, rdma_cm_event* out, shm::CmEvent* daemon_ev, CmConn** from) {
    if (!ch.local.empty()) {
        *out = ch.local.front();
        ch.local.pop_front();
        *from = nullptr;
        return true;
    }
    for (auto& c : ch.conns) {
        if (c->ring && c->ring->try_pop(*daemon_ev)) {
            *from = c.get();
            return true;
        }
    }
    return false;
}

bool any_event(CmChannel& ch) {
    if (!ch.local.empty()) return true;
    for (auto& c : ch.conns)
        if (c->ring && c->ring->size() != 0) return true;
    return false;
}

// Takes one event, waiting for one unless the fd is non-blocking. 0 or an errno.
//
// A byte on the socket says "an event waits", one per event as a rule; but a producer whose
// byte does not fit the socket's buffer (hundreds of unread events) drops it, so events are
// looked for first and a byte is waited for only when none is there. Each event taken takes
// a byte along if one is there; when the bytes run out while events remain, one is put back,
// so that the fd stays readable for poll/epoll as long as an event waits.
int take_event(CmChannel& ch, rdma_cm_event* out, shm::CmEvent* daemon_ev, CmConn** from) {
    for (;;) {
        {
            std::lock_guard lock(ch.mu);
            if (pop_event(ch, out, daemon_ev, from)) {
                char byte;
                const bool had_byte = ::recv(ch.ours.get(), &byte, 1, MSG_DONTWAIT) == 1;
                if (!had_byte && any_event(ch)) post_byte(ch);
                return 0;
            }
        }
        // Nothing waits: wait for a byte. A signal ends the wait with EINTR, as librdmacm's
        // read does; O_NONBLOCK gives EAGAIN.
        char byte;
        const ssize_t n = ::read(ch.ours.get(), &byte, 1);
        if (n == 0) return EIO;
        if (n < 0) return errno;
        // Its event (or, if a reader took that one along with an earlier byte, nothing).
        std::lock_guard lock(ch.mu);
        if (pop_event(ch, out, daemon_ev, from)) return 0;
    }
}

// Counts one more event reported for `i` if it is live: rdma_destroy_id then waits until
// that event is acknowledged, so the id outlives the event being made and read. False if
// the id is gone.
bool hold_event(CmId* i) {
    std::lock_guard lock(g_mu);
    if (g_ids.count(i) == 0) return false;
    ++i->events_reported;
    return true;
}

void release_event(CmId* i) {
    std::lock_guard lock(g_mu);
    ++i->events_completed;
    g_acked.notify_all();
}

// The id of daemon id `h` on `conn`, held for one event (hold_event), or nullptr. The
// channel's lock is held across both, so that no thread destroys the id in between.
CmId* held_id_in(CmChannel& ch, CmConn* conn, shm::Handle h) {
    std::lock_guard lock(ch.mu);
    const auto it = ch.ids.find({conn, h});
    return it != ch.ids.end() && hold_event(it->second) ? it->second : nullptr;
}

// The peer's REQ or REP as rdma_cm reports it: from this side's point of view, so the
// peer's initiator depth is the responder resources asked of us, and the other way round.
void fill_conn_param(rdma_conn_param& p, const shm::CmConnParam& c, std::uint8_t* data) {
    std::memcpy(data, c.private_data, c.private_data_len);
    p.private_data = c.private_data_len != 0 ? data : nullptr;
    p.private_data_len = c.private_data_len;
    p.responder_resources = c.initiator_depth;
    p.initiator_depth = c.responder_resources;
    p.flow_control = c.flow_control;
    p.retry_count = c.retry_count;
    p.rnr_retry_count = c.rnr_retry_count;
    p.srq = c.srq;
    p.qp_num = c.qpn;
}

bool is_ud(const CmId* i) {
    return i->id.qp_type == IBV_QPT_UD;
}

// A UD id's event: the peer's QP, Q_Key and the address handle attributes that reach it.
void fill_ud_param(rdma_ud_param& p, const shm::CmConnParam& c, std::uint32_t peer_ip,
                   std::uint8_t* data) {
    std::memcpy(data, c.private_data, c.private_data_len);
    p.private_data = c.private_data_len != 0 ? data : nullptr;
    p.private_data_len = c.private_data_len;
    p.qp_num = c.qpn;
    p.qkey = c.qkey;
    p.ah_attr = ibv_ah_attr{};
    p.ah_attr.is_global = 1;
    p.ah_attr.grh.dgid = gid_of(peer_ip);
    p.ah_attr.grh.sgid_index = 0;
    p.ah_attr.grh.hop_limit = 64;
    p.ah_attr.port_num = 1;
}

int modify_err(CmId* i) {
    if (i->id.qp == nullptr) return 0;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    return ibv_modify_qp(i->id.qp, &a, IBV_QP_STATE);
}

ibv_mtu port_mtu(CmId* i) {
    ibv_port_attr pa{};
    if (i->id.verbs == nullptr || ibv_query_port(i->id.verbs, 1, &pa) != 0) return IBV_MTU_1024;
    return pa.active_mtu;
}

// What cm_rules.h reads of the id's device, its options, and the connection so far.
cm_rules::DeviceFacts device_facts(CmId* i) {
    cm_rules::DeviceFacts d;
    d.port_mtu = port_mtu(i);
    ibv_device_attr da{};
    if (i->id.verbs != nullptr && ibv_query_device(i->id.verbs, &da) == 0) {
        d.ca_ack_delay = da.local_ca_ack_delay;
        d.max_responder_resources = static_cast<std::uint8_t>(std::min(da.max_qp_rd_atom, 255));
        d.max_initiator_depth = static_cast<std::uint8_t>(std::min(da.max_qp_init_rd_atom, 255));
    }
    return d;
}
cm_rules::IdOptions options_of(const CmId* i) {
    return {.ack_timeout = i->ack_timeout, .tos = i->tos};
}
bool is_passive(const CmId* i) {
    return i->listener != nullptr;
}
cm_rules::Side side_of(CmId* i, const cm_rules::DeviceFacts& d) {
    cm_rules::Side s;
    s.passive = is_passive(i);
    s.sent.psn = i->psn;
    s.sent.responder_resources = i->responder_resources;
    s.sent.initiator_depth = i->initiator_depth;
    s.sent.retry_count = i->retry_count;
    s.sent.rnr_retry_count = i->rnr_retry_count;
    if (!s.passive) s.sent.path_mtu = static_cast<std::uint8_t>(d.port_mtu);
    s.peer = i->peer;
    return s;
}

// The attributes that take an id's QP to a->qp_state, as rdma_init_qp_attr gives them: the
// rules of cm_rules.h over what the id's REQ and REP carried.
int qp_attr_for(CmId* i, ibv_qp_type type, ibv_qp_attr* a, int* mask) {
    const cm_rules::DeviceFacts d = device_facts(i);
    return cm_rules::qp_attr(side_of(i, d), d, options_of(i), type,
                             gid_of(ip_of(reinterpret_cast<sockaddr*>(&dst_of(i)))), a, mask);
}

// RTR then RTS from the peer's QP (REQ or REP). On iWARP the QP has no peer QP to name: its
// RTR binds it to the connection the daemon made (the MPA exchange is over), with the
// resources agreed on.
int connect_qp(CmId* i) {
    ibv_qp* qp = managed_qp(i);
    if (qp == nullptr) return 0;
    if (is_iwarp(i)) {
        if (const int err = bind_iwarp_qp(qp, i->iw_conn); err != 0) return err;
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_RTS;
        return ibv_modify_qp(qp, &a, IBV_QP_STATE);
    }
    ibv_qp_attr a{};
    int mask = 0;
    a.qp_state = IBV_QPS_RTR;
    if (const int err = qp_attr_for(i, qp->qp_type, &a, &mask); err != 0) return err;
    if (std::getenv("SNIC_CM_DEBUG") != nullptr)
        say("cm: QP %u to RTR: dest %u rq_psn %u mtu %d max_dest_rd_atomic %u", qp->qp_num,
            a.dest_qp_num, a.rq_psn, a.path_mtu, a.max_dest_rd_atomic);
    if (const int err = ibv_modify_qp(qp, &a, mask); err != 0) return err;
    a.qp_state = IBV_QPS_RTS;
    if (const int err = qp_attr_for(i, qp->qp_type, &a, &mask); err != 0) return err;
    return ibv_modify_qp(qp, &a, mask);
}

// What our REQ (active) or REP (passive) carries (cm_rules.h), with the QP, its SRQ, its
// type and private data; the id's resources and retry counts are take_resources'.
shm::CmConnParam our_param(CmId* i, const rdma_conn_param* p) {
    const cm_rules::DeviceFacts d = device_facts(i);
    const cm_rules::Resources r{i->responder_resources, i->initiator_depth};
    shm::CmConnParam c = is_passive(i) ? cm_rules::rep_fields(p, r, i->psn, d)
                                       : cm_rules::req_fields(p, r, i->psn, options_of(i), d);
    c.qpn = i->id.qp != nullptr ? i->id.qp->qp_num : (p != nullptr ? p->qp_num : 0);
    c.srq = (i->id.srq != nullptr || (i->id.qp != nullptr && i->id.qp->srq != nullptr) ||
             (p != nullptr && p->srq != 0))
                ? 1
                : 0;
    c.qp_type = static_cast<std::uint8_t>(i->id.qp_type);
    if (is_ud(i)) c.qkey = RDMA_UDP_QKEY;
    if (p != nullptr && p->private_data_len != 0 && p->private_data != nullptr) {
        c.private_data_len = p->private_data_len;
        std::memcpy(c.private_data, p->private_data,
                    std::min<std::size_t>(p->private_data_len, sizeof c.private_data));
    }
    return c;
}

// The resources and retry counts a connection asks for, as librdmacm's rdma_connect and
// rdma_accept take them (cm_rules::resources): without a conn_param, what the connect
// request asked (passive) or the device's most (active). EINVAL for a value beyond the
// device's in the TCP port space, as librdmacm.
int take_resources(CmId* i, const rdma_conn_param* p) {
    cm_rules::Resources r;
    if (const int err = cm_rules::resources(p, is_passive(i) ? &i->peer : nullptr, device_facts(i),
                                            i->id.ps == RDMA_PS_TCP, r);
        err != 0)
        return err;
    i->responder_resources = r.responder_resources;
    i->initiator_depth = r.initiator_depth;
    i->retry_count = p != nullptr ? std::min<std::uint8_t>(p->retry_count, 7) : 7;
    i->rnr_retry_count = p != nullptr ? std::min<std::uint8_t>(p->rnr_retry_count, 7) : 7;
    return 0;
}

std::uint32_t random_psn() {
    static thread_local std::mt19937 rng{std::random_device{}()};
    return rng() & 0xffffff;
}

// Turns a daemon's event into the application's, held for its owner (box.owner: the id, or
// a connect request's listener); false when it is not for the application (an id already
// gone).
bool translate(CmChannel& ch, CmConn* conn, const shm::CmEvent& d, EventBox& box) {
    rdma_cm_event& e = box.ev;
    e = rdma_cm_event{};
    e.event = static_cast<rdma_cm_event_type>(d.event);
    e.status = d.status;
    if (d.event == shm::kCmConnectRequest) {
        auto* l = reinterpret_cast<CmId*>(d.token);
        if (!hold_event(l)) return false;
        box.owner = l;
        auto child = std::make_unique<CmId>();
        child->ch = l->ch;
        child->sync = l->sync;
        child->listener = l;
        child->id.channel = &l->ch->ch;
        child->id.context = l->id.context;
        child->id.ps = l->id.ps;
        child->id.qp_type = l->id.qp_type;
        child->conn = conn;
        child->handle = d.id;
        child->bound = true;
        child->dev = device_at(conn->path, d.port_index, d.transport);
        child->iw_conn = d.iw_conn;
        child->id.verbs = child->dev != nullptr ? context_of(child->dev) : nullptr;
        child->id.port_num = 1;
        if (child->id.verbs != nullptr) child->id.pd = default_pd(child->id.verbs);
        child->tos = l->tos;
        child->ack_timeout = l->ack_timeout;
        child->peer = d.param;
        child->psn = random_psn();
        take_resources(child.get(), nullptr);  // until rdma_accept says otherwise
        set_sin(src_of(child.get()), d.src_ip, d.src_port);
        set_sin(dst_of(child.get()), d.dst_ip, d.dst_port);
        CmId* c = child.release();
        {
            std::lock_guard lock(g_mu);
            g_ids.insert(c);
        }
        {
            std::lock_guard lock(ch.mu);
            ch.ids[{conn, d.id}] = c;
        }
        show_rdmacm(c);
        // A synchronous listener's new id gets a channel of its own, as librdmacm's does: it
        // is used apart from the listener (an rsocket is named by its id's channel's fd).
        if (c->sync && rdma_migrate_id(&c->id, nullptr) != 0) {
            say("rdma_cm: a connect request of a synchronous listener is rejected: no channel "
                "for its id (%s)",
                std::strerror(errno));
            rdma_reject(&c->id, nullptr, 0);
            rdma_destroy_id(&c->id);
            release_event(l);
            return false;
        }
        e.id = &c->id;
        e.listen_id = &l->id;
        if (is_ud(c))
            fill_ud_param(e.param.ud, d.param, d.dst_ip, box.data);
        else
            fill_conn_param(e.param.conn, d.param, box.data);
        return true;
    }
    CmId* i = held_id_in(ch, conn, d.id);
    if (i == nullptr) return false;
    box.owner = i;
    e.id = &i->id;
    if (is_ud(i)) {  // SIDR: ESTABLISHED or UNREACHABLE, with the peer's QP and Q_Key
        fill_ud_param(e.param.ud, d.param, d.dst_ip, box.data);
        return true;
    }
    switch (d.event) {
        case shm::kCmConnectResponse:
            i->peer = d.param;
            i->iw_conn = d.iw_conn;
            fill_conn_param(e.param.conn, d.param, box.data);
            if (managed_qp(i) != nullptr) {
                // librdmacm's way: with a QP, the connection is established here.
                if (connect_qp(i) != 0) {
                    const shm::CmRejectReq rej{i->handle, 0, {}, {}};
                    shm::Empty none;
                    i->conn->conn.call(shm::CtrlOp::cm_reject, rej, &none);
                    modify_err(i);
                    e.event = RDMA_CM_EVENT_CONNECT_ERROR;
                    e.status = -EINVAL;
                    return true;
                }
                shm::CmAcceptReq acc{i->handle, 0, {}};
                shm::Empty none;
                if (const int err = i->conn->conn.call(shm::CtrlOp::cm_accept, acc, &none);
                    err != 0) {
                    e.event = RDMA_CM_EVENT_CONNECT_ERROR;
                    e.status = -err;
                    return true;
                }
                e.event = RDMA_CM_EVENT_ESTABLISHED;
            }
            return true;
        case shm::kCmRejected:
        case shm::kCmUnreachable:
            modify_err(i);
            fill_conn_param(e.param.conn, d.param, box.data);
            return true;
        case shm::kCmEstablished:
            fill_conn_param(e.param.conn, d.param, box.data);
            return true;
        default:
            return true;
    }
}

// Acknowledges the event a synchronous id holds in id->event (its last call's, kept there for
// the application to read as librdmacm keeps it), if any: at the id's next event, its move to
// another channel and its destruction.
void drop_held_event(CmId* i) {
    if (!i->sync || i->id.event == nullptr) return;
    rdma_ack_cm_event(std::exchange(i->id.event, nullptr));
}

// Acknowledges an event a call of this library took for itself (not for the application): a
// synchronous id no longer holds it.
void ack_taken(rdma_cm_event* e) {
    CmId* i = to_id(e->id);
    if (i->sync && i->id.event == e) i->id.event = nullptr;
    rdma_ack_cm_event(e);
}

// A sync id's call: the next event of its channel must be `want` (status 0). The event stays
// in id->event until the id's next call or its destruction, as librdmacm leaves it there:
// rsockets read the connect response's private data from it after rdma_connect.
int wait_for(CmId* i, rdma_cm_event_type want) {
    rdma_cm_event* e = nullptr;
    if (rdma_get_cm_event(i->id.channel, &e) != 0) return -1;
    const int status = e->status;
    const rdma_cm_event_type got = e->event;
    if (got == want && status == 0) return 0;
    if (got == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    if (got == RDMA_CM_EVENT_UNREACHABLE) return fail(ETIMEDOUT);
    return fail(status < 0 ? -status : (status != 0 ? status : EINVAL));
}

std::unique_ptr<CmChannel> new_channel() {
    auto ch = std::make_unique<CmChannel>();
    if (const int err = make_notify_pair(&ch->ours, &ch->theirs); err != 0) {
        errno = err;
        return nullptr;
    }
    ch->ch.fd = ch->ours.get();
    std::lock_guard lock(g_mu);
    g_channels.insert(ch.get());
    return ch;
}

}  // namespace
}  // namespace snic::client

using namespace snic::client;

// ---- channels and ids -----------------------------------------------------------------

SNIC_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
    return guarded<rdma_event_channel*>(nullptr, []() -> rdma_event_channel* {
        auto ch = new_channel();
        if (!ch) return nullptr;
        return &ch.release()->ch;
    });
}

SNIC_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
    CmChannel* ch = to_chan(channel);
    {
        std::lock_guard lock(g_mu);
        if (g_channels.erase(ch) == 0) return;  // not a live channel (destroyed already)
    }
    if (ch->readers.load() == 0) {
        delete ch;  // its CM connections close: snicd drops what they still held
        return;
    }
    // A thread still waits in rdma_get_cm_event (rping's event thread does when its main
    // thread ends): with librdmacm it stays blocked, so here too. The CM connections close;
    // the socket pair and the channel stay, so that its read never sees an end of file.
    std::lock_guard lock(ch->mu);
    ch->conns.clear();
    ch->ids.clear();
}

SNIC_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context,
                               rdma_port_space ps) {
    return guarded<int>(-1, [&]() -> int {
        ibv_qp_type qpt;
        switch (ps) {
            case RDMA_PS_TCP:
            case RDMA_PS_IB:
                qpt = IBV_QPT_RC;
                break;
            case RDMA_PS_UDP:
            case RDMA_PS_IPOIB:
                qpt = IBV_QPT_UD;
                break;
            default:
                return fail(EINVAL);
        }
        if (channel != nullptr && live_channel(channel) == nullptr) return fail(EINVAL);
        auto i = std::make_unique<CmId>();
        if (channel == nullptr) {
            i->own = new_channel();
            if (!i->own) return -1;
            i->sync = true;
            channel = &i->own->ch;
        }
        i->ch = to_chan(channel);
        i->id.channel = channel;
        i->id.context = context;
        i->id.ps = ps;
        i->id.qp_type = qpt;
        i->psn = random_psn();
        show_rdmacm(i.get());
        CmId* raw = i.release();
        {
            std::lock_guard lock(g_mu);
            g_ids.insert(raw);
        }
        *out = &raw->id;
        return 0;
    });
}

SNIC_EXPORT int rdma_destroy_id(rdma_cm_id* id) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = to_id(id);
        {
            std::lock_guard lock(g_mu);
            if (g_ids.erase(i) == 0) return fail(EINVAL);
        }
        destroy_daemon_ids(i);
        drop_held_event(i);
        {
            // Events made here and not yet taken go with the id.
            std::lock_guard lock(i->ch->mu);
            std::erase_if(i->ch->local, [&](const rdma_cm_event& e) { return e.id == &i->id; });
        }
        {
            std::unique_lock lock(g_mu);
            g_acked.wait(lock, [&] { return i->events_completed >= i->events_reported; });
        }
        std::free(i->id.route.path_rec);
        delete i;
        return 0;
    });
}

SNIC_EXPORT int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (addr == nullptr || i->bound) return fail(EINVAL);
        if (addr->sa_family != AF_INET) return fail(EAFNOSUPPORT);
        const std::uint32_t ip = ip_of(addr);
        std::uint16_t port = port_of(addr);
        if (ip != 0 && !is_loopback(ip)) {
            Device* d = device_for(ip, true);
            if (d == nullptr) return fail(EADDRNOTAVAIL);
            if (const int err = attach(i, d); err != 0) return fail(err);
            shm::CmBindReply rep{};
            if (const int err = bind_daemon(i, i->conn, i->handle, d->ipv4, port, &rep); err != 0)
                return fail(err);
            port = rep.port;
        } else if (const int err = bind_wildcard(i, port, &port); err != 0) {
            // A loopback address binds the wildcard too: a listen on it listens everywhere;
            // a connect from it goes out of the first port.
            return fail(err);
        }
        set_sin(src_of(i), ip, port);
        i->bound = true;
        return 0;
    });
}

SNIC_EXPORT int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src, sockaddr* dst, int timeout_ms) {
    return guarded<int>(-1, [&]() -> int {
        (void)timeout_ms;  // resolution is local: it answers at once
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (dst == nullptr) return fail(EINVAL);
        if (dst->sa_family != AF_INET || (src != nullptr && src->sa_family != AF_INET))
            return fail(EAFNOSUPPORT);
        if (src != nullptr && !i->bound && rdma_bind_addr(id, src) != 0) return -1;
        std::uint32_t dip = ip_of(dst);
        Device* d = i->dev;
        if (d == nullptr) d = is_loopback(dip) ? loopback_device() : device_for(dip, false);
        if (d != nullptr && is_loopback(dip)) dip = d->ipv4;
        set_sin(dst_of(i), dip, port_of(dst));
        if (d == nullptr) {
            post_local(i, RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH);
            return i->sync ? wait_for(i, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
        }
        const std::uint16_t bound_port =
            i->bound ? port_of(reinterpret_cast<sockaddr*>(&src_of(i))) : 0;
        // Bound to the wildcard: the daemon id of d's daemon is bound already, on that port.
        if (i->dev == nullptr && !i->listens.empty()) keep_wildcard_id(i, d);
        if (i->handle == shm::kNoHandle) {
            if (const int err = attach(i, d); err != 0) return fail(err);
            shm::CmBindReply rep{};
            if (const int err = bind_daemon(i, i->conn, i->handle, d->ipv4, bound_port, &rep);
                err != 0)
                return fail(err);
            set_sin(src_of(i), d->ipv4, rep.port);
            i->bound = true;
        } else if (i->dev == nullptr) {
            if (const int err = attach(i, d); err != 0) return fail(err);
            set_sin(src_of(i), d->ipv4, bound_port);
        }
        id->route.addr.addr.ibaddr.sgid = gid_of(d->ipv4);
        id->route.addr.addr.ibaddr.dgid = gid_of(dip);
        id->route.addr.addr.ibaddr.pkey = htons(0xffff);
        post_local(i, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
        return i->sync ? wait_for(i, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
    });
}

SNIC_EXPORT int rdma_resolve_route(rdma_cm_id* id, int timeout_ms) {
    return guarded<int>(-1, [&]() -> int {
        (void)timeout_ms;
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->dev == nullptr) return fail(EINVAL);
        if (id->route.path_rec == nullptr) {
            auto* p = static_cast<ibv_sa_path_rec*>(std::calloc(1, sizeof(ibv_sa_path_rec)));
            if (p == nullptr) return fail(ENOMEM);
            id->route.path_rec = p;
        }
        ibv_sa_path_rec& p = *id->route.path_rec;
        p.sgid = id->route.addr.addr.ibaddr.sgid;
        p.dgid = id->route.addr.addr.ibaddr.dgid;
        p.pkey = htons(0xffff);
        p.mtu = static_cast<std::uint8_t>(port_mtu(i));
        p.hop_limit = 64;
        p.traffic_class = i->tos;
        p.numb_path = 1;
        id->route.num_paths = 1;
        post_local(i, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
        return i->sync ? wait_for(i, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
    });
}

SNIC_EXPORT int rdma_listen(rdma_cm_id* id, int backlog) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->listening) return fail(EINVAL);
        const shm::CmListenReq req{shm::kNoHandle,
                                   backlog > 0 ? static_cast<std::uint32_t>(backlog) : 0};
        shm::Empty none;
        if (i->handle != shm::kNoHandle) {  // bound to one address
            shm::CmListenReq r = req;
            r.id = i->handle;
            if (const int err = i->conn->conn.call(shm::CtrlOp::cm_listen, r, &none); err != 0)
                return fail(err);
            i->listening = true;
            return 0;
        }
        // The wildcard: every daemon's every address, on the bound port (an ephemeral one
        // if the id is not bound yet).
        if (!i->bound) {
            std::uint16_t port = 0;
            if (const int err = bind_wildcard(i, 0, &port); err != 0) return fail(err);
            set_sin(src_of(i), 0, port);
            i->bound = true;
        }
        for (const auto& [conn, h] : i->listens) {
            shm::CmListenReq r = req;
            r.id = h;
            if (const int err = conn->conn.call(shm::CtrlOp::cm_listen, r, &none); err != 0) {
                // Bound still, listening nowhere: the daemons' ids go back to idle.
                destroy_wildcard_ids(i);
                i->bound = false;
                return fail(err);
            }
        }
        set_sin(src_of(i), 0, port_of(reinterpret_cast<sockaddr*>(&src_of(i))));
        i->listening = true;
        return 0;
    });
}

SNIC_EXPORT int rdma_connect(rdma_cm_id* id, rdma_conn_param* param) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->handle == shm::kNoHandle || i->dev == nullptr) return fail(EINVAL);
        const std::size_t max = is_ud(i) ? shm::kCmSidrReqPrivate : shm::kCmReqPrivate;
        if (param != nullptr && param->private_data_len > max) return fail(EINVAL);
        if (i->id.qp == nullptr && (param == nullptr || param->qp_num == 0)) return fail(EINVAL);
        if (const int err = take_resources(i, param); err != 0) return fail(err);
        take_app_qp(i, param);
        shm::CmConnectReq req{};
        req.id = i->handle;
        req.dst_ip = ip_of(reinterpret_cast<sockaddr*>(&dst_of(i)));
        req.dst_port = port_of(reinterpret_cast<sockaddr*>(&dst_of(i)));
        req.cm_response_timeout = cm_response_timeout();
        req.max_cm_retries = cm_retries();
        req.transport = static_cast<std::uint8_t>(i->dev->transport);
        req.param = our_param(i, param);
        shm::Empty none;
        if (const int err = i->conn->conn.call(shm::CtrlOp::cm_connect, req, &none); err != 0)
            return fail(err);
        return i->sync ? wait_for(i, RDMA_CM_EVENT_ESTABLISHED) : 0;
    });
}

SNIC_EXPORT int rdma_establish(rdma_cm_id* id) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->handle == shm::kNoHandle) return fail(EINVAL);
        shm::CmAcceptReq acc{i->handle, 0, {}};
        shm::Empty none;
        if (const int err = i->conn->conn.call(shm::CtrlOp::cm_accept, acc, &none); err != 0)
            return fail(err);
        return 0;
    });
}

SNIC_EXPORT int rdma_accept(rdma_cm_id* id, rdma_conn_param* param) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->handle == shm::kNoHandle || i->listener == nullptr) return fail(EINVAL);
        const std::size_t max = is_ud(i) ? shm::kCmSidrRepPrivate : shm::kCmRepPrivate;
        if (param != nullptr && param->private_data_len > max) return fail(EINVAL);
        if (i->id.qp == nullptr && (param == nullptr || param->qp_num == 0)) return fail(EINVAL);
        if (is_ud(i)) {  // SIDR_REP: the QP is in RTS since rdma_create_qp
            shm::CmAcceptReq req{i->handle, 0, our_param(i, param)};
            shm::Empty none;
            const int err = i->conn->conn.call(shm::CtrlOp::cm_accept, req, &none);
            return err != 0 ? fail(err) : 0;
        }
        if (const int err = take_resources(i, param); err != 0) return fail(err);
        if (is_iwarp(i)) {
            take_app_qp(i, param);
            // The MPA reply goes first: the QP binds to a connection whose exchange is over
            // (what the initiator sends meanwhile waits in the daemon for the QP).
            shm::CmAcceptReq req{i->handle, 0, our_param(i, param)};
            shm::Empty none;
            if (const int err = i->conn->conn.call(shm::CtrlOp::cm_accept, req, &none); err != 0)
                return fail(err);
            if (const int err = connect_qp(i); err != 0) {
                modify_err(i);
                shm::Empty gone;
                i->conn->conn.call(shm::CtrlOp::cm_disconnect, shm::HandleReq{i->handle, 0}, &gone);
                return fail(err);
            }
            return i->sync ? wait_for(i, RDMA_CM_EVENT_ESTABLISHED) : 0;
        }
        if (const int err = connect_qp(i); err != 0) {
            modify_err(i);
            return fail(err);
        }
        shm::CmAcceptReq req{i->handle, 0, our_param(i, param)};
        shm::Empty none;
        if (const int err = i->conn->conn.call(shm::CtrlOp::cm_accept, req, &none); err != 0)
            return fail(err);
        return i->sync ? wait_for(i, RDMA_CM_EVENT_ESTABLISHED) : 0;
    });
}

SNIC_EXPORT int rdma_reject(rdma_cm_id* id, const void* private_data, std::uint8_t len) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->handle == shm::kNoHandle) return fail(EINVAL);
        if (len > shm::kCmRejPrivate) return fail(EINVAL);
        shm::CmRejectReq req{};
        req.id = i->handle;
        req.private_data_len = len;
        if (len != 0 && private_data != nullptr) std::memcpy(req.private_data, private_data, len);
        shm::Empty none;
        if (const int err = i->conn->conn.call(shm::CtrlOp::cm_reject, req, &none); err != 0)
            return fail(err);
        return 0;
    });
}

SNIC_EXPORT int rdma_reject_ece(rdma_cm_id* id, const void* private_data, std::uint8_t len) {
    return rdma_reject(id, private_data, len);
}

SNIC_EXPORT int rdma_disconnect(rdma_cm_id* id) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->handle == shm::kNoHandle) return fail(EINVAL);
        modify_err(i);
        shm::Empty none;
        if (const int err =
                i->conn->conn.call(shm::CtrlOp::cm_disconnect, shm::HandleReq{i->handle, 0}, &none);
            err != 0)
            return fail(err);
        return i->sync ? wait_for(i, RDMA_CM_EVENT_DISCONNECTED) : 0;
    });
}

SNIC_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
    return guarded<int>(-1, [&]() -> int {
        if (channel == nullptr || event == nullptr || live_channel(channel) == nullptr)
            return fail(EINVAL);
        CmChannel& ch = *to_chan(channel);
        ++ch.readers;
        struct Leave {
            CmChannel& ch;
            ~Leave() { --ch.readers; }
        } leave{ch};
        for (;;) {
            auto box = std::make_unique<EventBox>();
            shm::CmEvent d{};
            CmConn* from = nullptr;
            if (const int err = take_event(ch, &box->ev, &d, &from); err != 0) return fail(err);
            if (from != nullptr) {
                if (!translate(ch, from, d, *box)) continue;  // held there
            } else if (box->ev.id != nullptr) {
                if (!hold_event(to_id(box->ev.id))) continue;  // destroyed meanwhile: it goes
                box->owner = to_id(box->ev.id);
            }
            CmId* i = to_id(box->ev.id);
            if (i != nullptr && i->sync) {
                // A synchronous id holds its latest event for the application to read; the one
                // before is acknowledged now (librdmacm does it at the next call).
                drop_held_event(i);
                i->id.event = &box->ev;
            }
            *event = &box.release()->ev;
            return 0;
        }
    });
}

SNIC_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
    if (event == nullptr) return fail(EINVAL);
    auto* box = reinterpret_cast<EventBox*>(event);
    if (box->owner != nullptr) {
        std::lock_guard lock(g_mu);
        ++box->owner->events_completed;
        g_acked.notify_all();
    }
    delete box;
    return 0;
}

SNIC_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
    switch (event) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            return "RDMA_CM_EVENT_ADDR_RESOLVED";
        case RDMA_CM_EVENT_ADDR_ERROR:
            return "RDMA_CM_EVENT_ADDR_ERROR";
        case RDMA_CM_EVENT_ROUTE_RESOLVED:
            return "RDMA_CM_EVENT_ROUTE_RESOLVED";
        case RDMA_CM_EVENT_ROUTE_ERROR:
            return "RDMA_CM_EVENT_ROUTE_ERROR";
        case RDMA_CM_EVENT_CONNECT_REQUEST:
            return "RDMA_CM_EVENT_CONNECT_REQUEST";
        case RDMA_CM_EVENT_CONNECT_RESPONSE:
            return "RDMA_CM_EVENT_CONNECT_RESPONSE";
        case RDMA_CM_EVENT_CONNECT_ERROR:
            return "RDMA_CM_EVENT_CONNECT_ERROR";
        case RDMA_CM_EVENT_UNREACHABLE:
            return "RDMA_CM_EVENT_UNREACHABLE";
        case RDMA_CM_EVENT_REJECTED:
            return "RDMA_CM_EVENT_REJECTED";
        case RDMA_CM_EVENT_ESTABLISHED:
            return "RDMA_CM_EVENT_ESTABLISHED";
        case RDMA_CM_EVENT_DISCONNECTED:
            return "RDMA_CM_EVENT_DISCONNECTED";
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            return "RDMA_CM_EVENT_DEVICE_REMOVAL";
        case RDMA_CM_EVENT_MULTICAST_JOIN:
            return "RDMA_CM_EVENT_MULTICAST_JOIN";
        case RDMA_CM_EVENT_MULTICAST_ERROR:
            return "RDMA_CM_EVENT_MULTICAST_ERROR";
        case RDMA_CM_EVENT_ADDR_CHANGE:
            return "RDMA_CM_EVENT_ADDR_CHANGE";
        case RDMA_CM_EVENT_TIMEWAIT_EXIT:
            return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
        default:
            return "UNKNOWN EVENT";
    }
}

// ---- QPs ------------------------------------------------------------------------------

namespace {

// INIT, as rdma_create_qp leaves a QP; UD QPs of the UDP port space go on to RTS.
int init_qp(CmId* i, ibv_qp* qp) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (qp->qp_type == IBV_QPT_UD) {
        a.qkey = RDMA_UDP_QKEY;
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    if (const int err = ibv_modify_qp(qp, &a, mask); err != 0) return err;
    if (qp->qp_type != IBV_QPT_UD) return 0;
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTR;
    if (const int err = ibv_modify_qp(qp, &r, IBV_QP_STATE); err != 0) return err;
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.sq_psn = i->psn;
    return ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int create_cqs(CmId* i, ibv_qp_init_attr* attr) {
    if (attr->send_cq != nullptr && attr->recv_cq != nullptr) return 0;
    if (attr->recv_cq == nullptr) {
        i->id.recv_cq_channel = ibv_create_comp_channel(i->id.verbs);
        if (i->id.recv_cq_channel == nullptr) return errno;
        i->id.recv_cq = ibv_create_cq(i->id.verbs, std::max<int>(attr->cap.max_recv_wr, 1), i,
                                      i->id.recv_cq_channel, 0);
        if (i->id.recv_cq == nullptr) return errno;
        attr->recv_cq = i->id.recv_cq;
    }
    if (attr->send_cq == nullptr) {
        i->id.send_cq_channel = ibv_create_comp_channel(i->id.verbs);
        if (i->id.send_cq_channel == nullptr) return errno;
        i->id.send_cq = ibv_create_cq(i->id.verbs, std::max<int>(attr->cap.max_send_wr, 1), i,
                                      i->id.send_cq_channel, 0);
        if (i->id.send_cq == nullptr) return errno;
        attr->send_cq = i->id.send_cq;
    }
    i->own_cqs = true;
    return 0;
}

void destroy_cqs(CmId* i) {
    if (!i->own_cqs) return;
    if (i->id.send_cq != nullptr) ibv_destroy_cq(i->id.send_cq);
    if (i->id.recv_cq != nullptr) ibv_destroy_cq(i->id.recv_cq);
    if (i->id.send_cq_channel != nullptr) ibv_destroy_comp_channel(i->id.send_cq_channel);
    if (i->id.recv_cq_channel != nullptr) ibv_destroy_comp_channel(i->id.recv_cq_channel);
    i->id.send_cq = i->id.recv_cq = nullptr;
    i->id.send_cq_channel = i->id.recv_cq_channel = nullptr;
    i->own_cqs = false;
}

}  // namespace

SNIC_EXPORT int rdma_create_qp(rdma_cm_id* id, ibv_pd* pd, ibv_qp_init_attr* attr) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (attr == nullptr || i->id.verbs == nullptr || i->id.qp != nullptr) return fail(EINVAL);
        if (pd == nullptr) pd = i->id.pd != nullptr ? i->id.pd : default_pd(i->id.verbs);
        if (pd == nullptr || pd->context != i->id.verbs) return fail(EINVAL);
        ibv_qp_init_attr a = *attr;
        if (const int err = create_cqs(i, &a); err != 0) {
            destroy_cqs(i);
            return fail(err);
        }
        if (a.srq == nullptr) a.srq = i->id.srq;
        a.qp_type = i->id.qp_type;
        ibv_qp* qp = ibv_create_qp(pd, &a);
        if (qp == nullptr) {
            const int err = errno;
            destroy_cqs(i);
            return fail(err);
        }
        if (const int err = init_qp(i, qp); err != 0) {
            ibv_destroy_qp(qp);
            destroy_cqs(i);
            return fail(err);
        }
        attr->cap = a.cap;
        attr->send_cq = a.send_cq;
        attr->recv_cq = a.recv_cq;
        i->id.qp = qp;
        i->id.pd = pd;
        return 0;
    });
}

SNIC_EXPORT int rdma_create_qp_ex(rdma_cm_id* id, ibv_qp_init_attr_ex* attr) {
    if (attr == nullptr) return fail(EINVAL);
    ibv_qp_init_attr a{};
    a.qp_context = attr->qp_context;
    a.send_cq = attr->send_cq;
    a.recv_cq = attr->recv_cq;
    a.srq = attr->srq;
    a.cap = attr->cap;
    a.qp_type = attr->qp_type;
    a.sq_sig_all = attr->sq_sig_all;
    const int rc =
        rdma_create_qp(id, (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
    if (rc == 0) attr->cap = a.cap;
    return rc;
}

SNIC_EXPORT void rdma_destroy_qp(rdma_cm_id* id) {
    CmId* i = live_id(id);
    if (i == nullptr) return;
    if (i->id.qp != nullptr) ibv_destroy_qp(i->id.qp);
    i->id.qp = nullptr;
    destroy_cqs(i);
}

SNIC_EXPORT int rdma_create_srq(rdma_cm_id* id, ibv_pd* pd, ibv_srq_init_attr* attr) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (attr == nullptr || i->id.verbs == nullptr) return fail(EINVAL);
        if (pd == nullptr) pd = i->id.pd != nullptr ? i->id.pd : default_pd(i->id.verbs);
        ibv_srq* srq = ibv_create_srq(pd, attr);
        if (srq == nullptr) return -1;
        i->id.srq = srq;
        i->id.pd = pd;
        return 0;
    });
}

SNIC_EXPORT int rdma_create_srq_ex(rdma_cm_id* id, ibv_srq_init_attr_ex* attr) {
    if (attr == nullptr) return fail(EINVAL);
    ibv_srq_init_attr a{};
    a.srq_context = attr->srq_context;
    a.attr = attr->attr;
    return rdma_create_srq(id, (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ? attr->pd : nullptr, &a);
}

SNIC_EXPORT void rdma_destroy_srq(rdma_cm_id* id) {
    CmId* i = live_id(id);
    if (i == nullptr) return;
    if (i->id.srq != nullptr) ibv_destroy_srq(i->id.srq);
    i->id.srq = nullptr;
}

namespace {

// rdma_init_qp_attr on an iWARP id, as Linux's iw_cm gives them: INIT and RTR alike are the
// INIT attributes (remote read and write, and rdma_cm's port), RTS is no attribute at all.
// An iWARP QP waits in INIT until its connection binds it (rdma_accept, or the connect
// response), so RTR names INIT here: a modify with these attributes keeps the QP where the
// binding takes it from (iw_cm leaves RTR in qp_state, which siw ignores and snicd refuses).
// P_Key index 0 is added, so that the INIT attributes also move a QP still in RESET; RTS
// leaves out the port rdma_cm adds, which a QP in RTS may not be given again.
int iwarp_qp_attr_for(ibv_qp_attr* a, int* mask) {
    const ibv_qp_state want = a->qp_state;
    *a = ibv_qp_attr{};
    a->port_num = 1;
    switch (want) {
        case IBV_QPS_INIT:
        case IBV_QPS_RTR:
            a->qp_state = IBV_QPS_INIT;
            a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
            *mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_PKEY_INDEX;
            return 0;
        case IBV_QPS_RTS:
            a->qp_state = IBV_QPS_RTS;
            *mask = 0;
            return 0;
        default:
            a->qp_state = want;
            return EINVAL;
    }
}

}  // namespace

// For a QP the application created itself and named by conn_param.qp_num: the attributes
// of the next state, which the application gives to ibv_modify_qp.
SNIC_EXPORT int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* attr, int* mask) {
    return guarded<int>(-1, [&]() -> int {
        if (attr == nullptr || mask == nullptr) return fail(EINVAL);
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        if (i->dev == nullptr) return fail(EINVAL);
        const ibv_qp_type type = i->id.qp != nullptr ? i->id.qp->qp_type : i->id.qp_type;
        const int err =
            is_iwarp(i) ? iwarp_qp_attr_for(attr, mask) : qp_attr_for(i, type, attr, mask);
        return err != 0 ? fail(err) : 0;
    });
}

SNIC_EXPORT int rdma_notify(rdma_cm_id*, ibv_event_type) {
    return 0;  // the connection is established by RTU or by the first packet alike
}

// ---- options, addresses, devices ------------------------------------------------------

SNIC_EXPORT int rdma_set_option(rdma_cm_id* id, int level, int optname, void* optval,
                                std::size_t optlen) {
    CmId* i = live_id(id);
    if (i == nullptr) return fail(EINVAL);
    if (optval == nullptr) return fail(EINVAL);
    if (level == RDMA_OPTION_ID) {
        switch (optname) {
            case RDMA_OPTION_ID_TOS:
                if (optlen != sizeof(std::uint8_t)) return fail(EINVAL);
                i->tos = *static_cast<std::uint8_t*>(optval);
                return 0;
            case RDMA_OPTION_ID_REUSEADDR:
                if (optlen != sizeof(int)) return fail(EINVAL);
                if (i->bound) return fail(EINVAL);
                i->reuse = *static_cast<int*>(optval);
                return 0;
            case RDMA_OPTION_ID_AFONLY:
                return optlen == sizeof(int) ? 0 : fail(EINVAL);
            case RDMA_OPTION_ID_ACK_TIMEOUT:
                if (optlen != sizeof(std::uint8_t)) return fail(EINVAL);
                i->ack_timeout = std::min<std::uint8_t>(*static_cast<std::uint8_t*>(optval), 31);
                return 0;
            default:
                return fail(ENOSYS);
        }
    }
    if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) return 0;  // one path only
    return fail(ENOSYS);
}

SNIC_EXPORT int rdma_migrate_id(rdma_cm_id* id, rdma_event_channel* channel) {
    return guarded<int>(-1, [&]() -> int {
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        std::unique_ptr<CmChannel> own;
        CmChannel* to = nullptr;
        if (channel == nullptr) {
            own = new_channel();
            if (!own) return -1;
            to = own.get();
        } else {
            to = live_channel(channel);
            if (to == nullptr) return fail(EINVAL);
        }
        if (to == i->ch) return 0;
        auto move = [&](CmConn*& conn, shm::Handle& h) -> int {
            CmConn* nc = nullptr;
            if (const int err = conn_for(*to, conn->path, &nc); err != 0) return err;
            shm::CmIdReply rep{};
            const shm::CmMigrateReq req{h, 0, conn->cookie};
            if (const int err = nc->conn.call(shm::CtrlOp::cm_migrate, req, &rep); err != 0)
                return err;
            {
                std::lock_guard lock(i->ch->mu);
                i->ch->ids.erase({conn, h});
            }
            std::lock_guard lock(to->mu);
            to->ids[{nc, rep.id}] = i;
            conn = nc;
            h = rep.id;
            return 0;
        };
        if (i->conn != nullptr && i->handle != shm::kNoHandle)
            if (const int err = move(i->conn, i->handle); err != 0) return fail(err);
        for (auto& [conn, h] : i->listens)
            if (const int err = move(conn, h); err != 0) return fail(err);
        // A synchronous id's last event goes as it leaves its own channel (librdmacm acks
        // it too): an application's channel never sees it, so nothing would ack it, and
        // rdma_destroy_id would wait for it forever (libfabric's verbs provider resolves
        // synchronously, then migrates the id to its event queue's channel).
        drop_held_event(i);
        i->ch = to;
        i->id.channel = &to->ch;
        i->sync = channel == nullptr;
        if (own) i->own = std::move(own);
        show_rdmacm(i);
        return 0;
    });
}

SNIC_EXPORT std::uint16_t rdma_get_src_port(rdma_cm_id* id) {
    CmId* i = live_id(id);
    return i != nullptr ? htons(port_of(reinterpret_cast<sockaddr*>(&src_of(i)))) : 0;
}

SNIC_EXPORT std::uint16_t rdma_get_dst_port(rdma_cm_id* id) {
    CmId* i = live_id(id);
    return i != nullptr ? htons(port_of(reinterpret_cast<sockaddr*>(&dst_of(i)))) : 0;
}

SNIC_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
    return guarded<ibv_context**>(nullptr, [&]() -> ibv_context** {
        std::vector<ibv_context*> ctxs;
        for (Device* d : current_devices())
            if (ibv_context* c = context_of(d)) ctxs.push_back(c);
        auto** out = static_cast<ibv_context**>(std::calloc(ctxs.size() + 1, sizeof(ibv_context*)));
        if (out == nullptr) return fail_null<ibv_context*>(ENOMEM);
        std::copy(ctxs.begin(), ctxs.end(), out);
        if (num_devices != nullptr) *num_devices = static_cast<int>(ctxs.size());
        return out;
    });
}

SNIC_EXPORT void rdma_free_devices(ibv_context** list) {
    std::free(list);  // the contexts stay open for the process's ids
}

SNIC_EXPORT int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) {
    say("rdma_join_multicast: snic has no multicast (no multicast groups on RoCE ports yet)");
    return fail(ENOSYS);
}

SNIC_EXPORT int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) {
    say("rdma_join_multicast_ex: snic has no multicast (no multicast groups on RoCE ports yet)");
    return fail(ENOSYS);
}

SNIC_EXPORT int rdma_leave_multicast(rdma_cm_id*, sockaddr*) {
    return fail(EADDRNOTAVAIL);
}

SNIC_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) {
    return fail(EOPNOTSUPP);
}

SNIC_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) {
    return fail(EOPNOTSUPP);
}

// ---- rdma_getaddrinfo and the endpoint calls -------------------------------------------

namespace {

// A copy of an IPv4 address from rdma_getaddrinfo's hints; nullptr for another family.
sockaddr* copy_ipv4(const sockaddr* from) {
    if (from == nullptr || from->sa_family != AF_INET) return nullptr;
    auto* sa = static_cast<sockaddr_in*>(std::calloc(1, sizeof(sockaddr_in)));
    if (sa != nullptr) std::memcpy(sa, from, sizeof *sa);
    return reinterpret_cast<sockaddr*>(sa);
}

}  // namespace

// As librdmacm's: node and service (either may be absent) name the destination, or the source
// with RAI_PASSIVE; addresses the hints carry fill what they leave out (libfabric passes only
// hints, with the source and destination already known).
SNIC_EXPORT int rdma_getaddrinfo(const char* node, const char* service, const rdma_addrinfo* hints,
                                 rdma_addrinfo** res) {
    return guarded<int>(-1, [&]() -> int {
        const bool hinted_addr =
            hints != nullptr && (hints->ai_src_addr != nullptr || hints->ai_dst_addr != nullptr);
        if (res == nullptr || (node == nullptr && service == nullptr && !hinted_addr))
            return fail(EINVAL);
        if (hints != nullptr && hints->ai_family != 0 && hints->ai_family != AF_INET)
            return fail(EAFNOSUPPORT);
        const bool passive = hints != nullptr && (hints->ai_flags & RAI_PASSIVE) != 0;
        auto* r = static_cast<rdma_addrinfo*>(std::calloc(1, sizeof(rdma_addrinfo)));
        if (r == nullptr) return fail(ENOMEM);
        if (node != nullptr || service != nullptr) {
            addrinfo h{};
            h.ai_family = AF_INET;
            h.ai_socktype = SOCK_STREAM;
            if (passive) h.ai_flags |= AI_PASSIVE;
            if (hints != nullptr && (hints->ai_flags & RAI_NUMERICHOST) != 0)
                h.ai_flags |= AI_NUMERICHOST;
            addrinfo* ai = nullptr;
            if (const int rc = ::getaddrinfo(node, service, &h, &ai); rc != 0 || ai == nullptr) {
                std::free(r);
                errno = rc == EAI_SYSTEM ? errno : ENOENT;
                return rc == 0 ? -1 : rc;
            }
            sockaddr* sa = copy_ipv4(ai->ai_addr);
            ::freeaddrinfo(ai);
            if (sa == nullptr) {
                std::free(r);
                return fail(ENOMEM);
            }
            (passive ? r->ai_src_addr : r->ai_dst_addr) = sa;
        }
        if (hints != nullptr && r->ai_src_addr == nullptr)
            r->ai_src_addr = copy_ipv4(hints->ai_src_addr);
        if (hints != nullptr && r->ai_dst_addr == nullptr && !passive)
            r->ai_dst_addr = copy_ipv4(hints->ai_dst_addr);
        if (r->ai_src_addr != nullptr) r->ai_src_len = sizeof(sockaddr_in);
        if (r->ai_dst_addr != nullptr) r->ai_dst_len = sizeof(sockaddr_in);
        if (r->ai_src_addr == nullptr && r->ai_dst_addr == nullptr) {
            std::free(r);
            return fail(hinted_addr ? EAFNOSUPPORT : ENOMEM);
        }
        r->ai_flags = hints != nullptr ? hints->ai_flags : 0;
        r->ai_family = AF_INET;
        r->ai_qp_type = hints != nullptr && hints->ai_qp_type != 0 ? hints->ai_qp_type : IBV_QPT_RC;
        r->ai_port_space = hints != nullptr && hints->ai_port_space != 0
                               ? hints->ai_port_space
                               : (r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP);
        *res = r;
        return 0;
    });
}

SNIC_EXPORT void rdma_freeaddrinfo(rdma_addrinfo* res) {
    while (res != nullptr) {
        rdma_addrinfo* next = res->ai_next;
        std::free(res->ai_src_addr);
        std::free(res->ai_dst_addr);
        std::free(res->ai_src_canonname);
        std::free(res->ai_dst_canonname);
        std::free(res->ai_route);
        std::free(res->ai_connect);
        std::free(res);
        res = next;
    }
}

SNIC_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd,
                               ibv_qp_init_attr* qp_init_attr) {
    return guarded<int>(-1, [&]() -> int {
        if (out == nullptr || res == nullptr) return fail(EINVAL);
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(nullptr, &id, nullptr,
                           static_cast<rdma_port_space>(res->ai_port_space)) != 0)
            return -1;
        CmId* i = live_id(id);
        if (i == nullptr) return fail(EINVAL);
        auto undo = [&] {
            const int err = errno;
            rdma_destroy_id(id);
            errno = err;
            return -1;
        };
        if ((res->ai_flags & RAI_PASSIVE) != 0) {
            if (res->ai_src_addr == nullptr || rdma_bind_addr(id, res->ai_src_addr) != 0)
                return undo();
            if (qp_init_attr != nullptr) {
                i->has_ep_attr = true;
                i->ep_attr = *qp_init_attr;
            }
            if (pd != nullptr) i->id.pd = pd;
            *out = id;
            return 0;
        }
        if (rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, 2000) != 0) return undo();
        if (rdma_resolve_route(id, 2000) != 0) return undo();
        if (qp_init_attr != nullptr && rdma_create_qp(id, pd, qp_init_attr) != 0) return undo();
        *out = id;
        return 0;
    });
}

SNIC_EXPORT void rdma_destroy_ep(rdma_cm_id* id) {
    if (id == nullptr) return;
    rdma_destroy_qp(id);
    rdma_destroy_srq(id);
    rdma_destroy_id(id);
}

SNIC_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
    return guarded<int>(-1, [&]() -> int {
        CmId* l = live_id(listen);
        if (l == nullptr) return fail(EINVAL);
        if (!l->listening || out == nullptr) return fail(EINVAL);
        for (;;) {
            rdma_cm_event* e = nullptr;
            if (rdma_get_cm_event(listen->channel, &e) != 0) return -1;
            if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
                ack_taken(e);
                continue;
            }
            rdma_cm_id* id = e->id;
            to_id(id)->id.event = e;  // read by the application until the id's next call
            if (l->has_ep_attr) {
                ibv_qp_init_attr a = l->ep_attr;
                if (rdma_create_qp(id, l->id.pd, &a) != 0) {
                    const int err = errno;
                    rdma_reject(id, nullptr, 0);
                    rdma_destroy_id(id);
                    return fail(err);
                }
            }
            *out = id;
            return 0;
        }
    });
}
