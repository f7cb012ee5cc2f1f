// rdma_cm's events: how an event waits on a channel and is taken (rdma_get_cm_event), how
// a daemon's event becomes the application's (a connect request makes a new id; a connect
// response establishes the connection of an id with a QP), and their acknowledgement, which
// rdma_destroy_id waits for. A synchronous id's calls wait for their own events here too.
#include <rdma/rdma_cma.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "libclient/cm_internal.h"
#include "libclient/internal.h"
#include "libclient/util.h"
#include "shm/cm.h"

namespace shm = snic::shm;

static_assert(int{RDMA_CM_EVENT_CONNECT_REQUEST} == int{shm::kCmConnectRequest} &&
              int{RDMA_CM_EVENT_REJECTED} == int{shm::kCmRejected} &&
              int{RDMA_CM_EVENT_TIMEWAIT_EXIT} == int{shm::kCmTimewaitExit});

namespace snic::client::cm {
namespace {

struct EventBox {
    rdma_cm_event ev;       // first
    CmId* owner = nullptr;  // whose events_reported counted it
    std::uint8_t data[shm::kCmMaxPrivate];
};

// Wakes the channel's reader for one more event.
void post_byte(CmChannel& ch) {
    const char one = 1;
    [[maybe_unused]] const ssize_t n =
        ::send(ch.theirs.get(), &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
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

// A connect request's new id, the child of listener `l`, live and on the channel.
CmId* new_request_id(CmChannel& ch, CmConn* conn, const shm::CmEvent& d, CmId* l) {
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
    return c;
}

// A connect request for the listener d.token: the application's event names a new id, and
// is held for the listener. False when the listener is gone, or when a synchronous
// listener's new id can have no channel of its own (the request is rejected).
bool connect_request(CmChannel& ch, CmConn* conn, const shm::CmEvent& d, EventBox& box) {
    rdma_cm_event& e = box.ev;
    auto* l = reinterpret_cast<CmId*>(d.token);
    if (!hold_event(l)) return false;
    box.owner = l;
    CmId* c = new_request_id(ch, conn, d, l);
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

// A connect response on an id whose QP rdma_cm moves: the QP goes to RTR and RTS and the
// daemon sends the RTU, so `e` reports ESTABLISHED; or, when either fails, CONNECT_ERROR.
void establish_on_response(CmId* i, rdma_cm_event& e) {
    if (connect_qp(i) != 0) {
        const shm::CmRejectReq rej{i->handle, 0, {}, {}};
        shm::Empty none;
        i->conn->conn.call(shm::CtrlOp::cm_reject, rej, &none);
        modify_err(i);
        e.event = RDMA_CM_EVENT_CONNECT_ERROR;
        e.status = -EINVAL;
        return;
    }
    shm::CmAcceptReq acc{i->handle, 0, {}};
    shm::Empty none;
    if (const int err = i->conn->conn.call(shm::CtrlOp::cm_accept, acc, &none); err != 0) {
        e.event = RDMA_CM_EVENT_CONNECT_ERROR;
        e.status = -err;
        return;
    }
    e.event = RDMA_CM_EVENT_ESTABLISHED;
}

// Turns a daemon's event into the application's, held for its owner (box.owner: the id, or
// a connect request's listener); false when it is not for the application (an id already
// gone).
bool translate(CmChannel& ch, CmConn* conn, const shm::CmEvent& d, EventBox& box) {
    rdma_cm_event& e = box.ev;
    e = rdma_cm_event{};
    e.event = static_cast<rdma_cm_event_type>(d.event);
    e.status = d.status;
    if (d.event == shm::kCmConnectRequest) return connect_request(ch, conn, d, box);
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
            // librdmacm's way: with a QP, the connection is established here.
            if (managed_qp(i) != nullptr) establish_on_response(i, e);
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

}  // namespace

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

void drop_held_event(CmId* i) {
    if (!i->sync || i->id.event == nullptr) return;
    rdma_ack_cm_event(std::exchange(i->id.event, nullptr));
}

void ack_taken(rdma_cm_event* e) {
    CmId* i = to_id(e->id);
    if (i->sync && i->id.event == e) i->id.event = nullptr;
    rdma_ack_cm_event(e);
}

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

}  // namespace snic::client::cm

using namespace snic::client;
using namespace snic::client::cm;

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
