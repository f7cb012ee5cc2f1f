// librdmacm over snicd (shm/cm.h, daemon/cm/service.h): rdma_cm's entry points, compiled
// against rdma-core's <rdma/rdma_cma.h> and exported unversioned, so that under snic-run
// they interpose librdmacm's as libsnic's verbs interpose libibverbs'. This file holds the
// ids and the event channels: their making, lookup and destruction, the daemon ids behind
// an id, its options and its move to another channel. The other calls are in the cm_*.cc
// files beside it (cm_internal.h lists them).
//
// An event channel is a notification socket pair: the application polls our end; each daemon
// the channel's ids live on holds a copy of the other end (one CM connection per daemon, with
// an event ring in a memfd), and the events libsnic makes itself (address and route
// resolution) are written to it here. One byte is one event, wherever the event waits: a
// reader takes one byte, then one event from the local queue or any ring.
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <utility>

#include "libclient/cm_internal.h"
#include "libclient/internal.h"
#include "libclient/util.h"
#include "shm/cm.h"

namespace shm = snic::shm;

static_assert(RDMA_PS_TCP == shm::kCmPsTcp && RDMA_PS_UDP == shm::kCmPsUdp &&
              RDMA_PS_IB == shm::kCmPsIb && RDMA_PS_IPOIB == shm::kCmPsIpoib);

namespace snic::client::cm {

std::mutex g_mu;
std::condition_variable g_acked;
std::set<CmId*> g_ids;

namespace {

// Live channels: rdma_create_event_channel's and synchronous ids' own, checked as ids are.
std::set<const CmChannel*> g_channels;
std::map<Device*, ibv_context*> g_contexts;

void destroy_daemon_id(CmId* i, CmConn* conn, shm::Handle h) {
    shm::Empty none;
    conn->conn.call(shm::CtrlOp::cm_destroy_id, shm::HandleReq{h, 0}, &none);
    std::lock_guard lock(i->ch->mu);
    i->ch->ids.erase({conn, h});
}

void destroy_daemon_ids(CmId* i) {
    if (i->conn != nullptr && i->handle != shm::kNoHandle) destroy_daemon_id(i, i->conn, i->handle);
    destroy_wildcard_ids(i);
    i->handle = shm::kNoHandle;
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

void show_rdmacm(CmId* i) {
    i->rdmacm.sync = i->sync ? 1 : 0;
    ibv_device_attr da{};
    if (i->rdmacm.cma_dev != nullptr || i->id.verbs == nullptr ||
        ibv_query_device(i->id.verbs, &da) != 0)
        return;
    for (const std::size_t at : kRdmacmQpsizeAt) i->rdmacm_dev[at / sizeof(int)] = da.max_qp_wr;
    i->rdmacm.cma_dev = i->rdmacm_dev;
}

CmId* live_id(rdma_cm_id* id) {
    CmId* i = to_id(id);
    std::lock_guard lock(g_mu);
    return g_ids.count(i) != 0 ? i : nullptr;
}

CmChannel::~CmChannel() {
    std::lock_guard lock(g_mu);
    g_channels.erase(this);
}

CmChannel* live_channel(rdma_event_channel* c) {
    CmChannel* ch = to_chan(c);
    std::lock_guard lock(g_mu);
    return g_channels.count(ch) != 0 ? ch : nullptr;
}

ibv_context* context_of(Device* d) {
    std::lock_guard lock(g_mu);
    auto it = g_contexts.find(d);
    if (it != g_contexts.end()) return it->second;
    ibv_context* c = ibv_open_device(&d->dev);
    if (c != nullptr) g_contexts[d] = c;
    return c;
}

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

void destroy_wildcard_ids(CmId* i) {
    for (const auto& [conn, h] : i->listens) destroy_daemon_id(i, conn, h);
    i->listens.clear();
}

std::uint32_t random_psn() {
    static thread_local std::mt19937 rng{std::random_device{}()};
    return rng() & 0xffffff;
}

}  // namespace snic::client::cm

using namespace snic::client;
using namespace snic::client::cm;

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

// ---- options --------------------------------------------------------------------------

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
