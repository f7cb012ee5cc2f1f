// rdma_cm's rules for one RoCE connection, as Linux's CM (drivers/infiniband/core/cm.c), its
// rdma_cm (cma.c) and librdmacm apply them: what our REQ or REP carries, and the attributes
// each state of the QP takes from what the two messages carried. Pure: no syscalls, no
// state; libclient/cm_qp.cc feeds it an id's facts, and the unit tests feed it a captured
// kernel exchange (tests/unit/cm/test_cm_kernel.cc). docs/PROTOCOL-CM.md has the table of
// which side's value each field takes and where each rule comes from.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "shm/cm.h"

namespace snic::client::cm_rules {

// librdmacm's "as many as the device allows" (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).
inline constexpr std::uint8_t kMaxResources = 0xff;

// The packet life time of snic's RoCE route, as cma.c's cma_resolve_iboe_route sets it
// (CMA_IBOE_PACKET_LIFETIME there: 18, 16 in newer kernels). Chosen so that with snic's own
// CA ACK delay (daemon/verbs/limits.h) both QPs of a snic-to-snic connection get an ACK timeout of
// 14 (67 ms), as they did before the rules below were followed.
inline constexpr std::uint8_t kPacketLifeTime = 13;

// cm.c's cm_ack_timeout: the local ACK timeout of a QP from the target CA's ACK delay and
// the path's packet life time (IBA §12.7.34: 2 x PacketLifeTime + target ACK delay, in the
// exponents of 4.096 us x 2^t).
constexpr std::uint8_t ack_timeout(std::uint8_t ca_ack_delay, std::uint8_t packet_life_time) {
    int t = packet_life_time + 1;
    if (t >= ca_ack_delay)
        t += ca_ack_delay >= t - 1 ? 1 : 0;
    else
        t = ca_ack_delay + (t >= ca_ack_delay - 1 ? 1 : 0);
    return static_cast<std::uint8_t>(std::min(31, t));
}

// What of the device the rules read (ibv_query_device, ibv_query_port).
struct DeviceFacts {
    ibv_mtu port_mtu = IBV_MTU_1024;
    std::uint8_t ca_ack_delay = 0;             // local_ca_ack_delay
    std::uint8_t max_responder_resources = 0;  // max_qp_rd_atom
    std::uint8_t max_initiator_depth = 0;      // max_qp_init_rd_atom
};

// An id's options (rdma_set_option).
struct IdOptions {
    std::uint8_t ack_timeout = 0;  // RDMA_OPTION_ID_ACK_TIMEOUT; 0: not set
    std::uint8_t tos = 0;          // RDMA_OPTION_ID_TOS
};

// cma.c: the route's packet life time is the ACK timeout set on the id less one, or the
// default.
constexpr std::uint8_t packet_life_time(const IdOptions& o) {
    return o.ack_timeout != 0 ? static_cast<std::uint8_t>(o.ack_timeout - 1) : kPacketLifeTime;
}

// One side of a connection: what our REQ (active) or REP (passive) carried, and the peer's
// REP or REQ as the daemon's event gave it (shm::CmConnParam's fields keep the message's
// meaning: responder_resources is the sender's, ack_timeout is a REQ's Local ACK Timeout or
// a REP's Target ACK Delay). peer.qpn is 0 until that message came.
struct Side {
    bool passive = false;
    shm::CmConnParam sent{};
    shm::CmConnParam peer{};
};

// The resources a side asks for, as librdmacm's rdma_connect and rdma_accept take them: a
// value from the application, or kMaxResources (or no conn_param at all) for the device's
// most (active) or the least of the request's and the device's (passive: its REQ's
// initiator depth for our responder resources, its responder resources for our depth). A
// value beyond the device's is EINVAL (librdmacm's ucma_valid_param, for the TCP port
// space; other spaces are clamped).
struct Resources {
    std::uint8_t responder_resources = 0;
    std::uint8_t initiator_depth = 0;
};
inline int resources(const rdma_conn_param* p, const shm::CmConnParam* req, const DeviceFacts& d,
                     bool strict, Resources& out) {
    const std::uint8_t want_rr = p != nullptr ? p->responder_resources : kMaxResources;
    const std::uint8_t want_id = p != nullptr ? p->initiator_depth : kMaxResources;
    if (strict && ((want_rr != kMaxResources && want_rr > d.max_responder_resources) ||
                   (want_id != kMaxResources && want_id > d.max_initiator_depth)))
        return EINVAL;
    const std::uint8_t rr_default =
        req != nullptr ? req->initiator_depth : d.max_responder_resources;
    const std::uint8_t id_default =
        req != nullptr ? req->responder_resources : d.max_initiator_depth;
    out.responder_resources = want_rr == kMaxResources
                                  ? std::min(rr_default, d.max_responder_resources)
                                  : std::min(want_rr, d.max_responder_resources);
    out.initiator_depth = want_id == kMaxResources ? std::min(id_default, d.max_initiator_depth)
                                                   : std::min(want_id, d.max_initiator_depth);
    return 0;
}

// The QP fields of our REQ (cma.c cma_connect_ib, librdmacm ucma_copy_conn_param_to_kern;
// qpn, srq, qp_type, Q_Key and private data are the caller's): the retry counts the
// passive side is to use (at most 7; 7 without a conn_param), end-to-end flow control as
// given (0 without), the path MTU of our port, and the primary path's Local ACK Timeout
// from our CA's ACK delay and the route's packet life time (cm.c cm_format_req).
inline shm::CmConnParam req_fields(const rdma_conn_param* p, const Resources& r, std::uint32_t psn,
                                   const IdOptions& o, const DeviceFacts& d) {
    shm::CmConnParam c{};
    c.psn = psn & 0xffffff;
    c.responder_resources = r.responder_resources;
    c.initiator_depth = r.initiator_depth;
    c.flow_control = p != nullptr ? p->flow_control : 0;
    c.retry_count = p != nullptr ? std::min<std::uint8_t>(p->retry_count, 7) : 7;
    c.rnr_retry_count = p != nullptr ? std::min<std::uint8_t>(p->rnr_retry_count, 7) : 7;
    c.path_mtu = static_cast<std::uint8_t>(d.port_mtu);
    c.ack_timeout = ack_timeout(d.ca_ack_delay, packet_life_time(o));
    c.tos = o.tos;
    return c;
}

// The QP fields of our REP (cma.c cma_accept_ib, cm.c cm_format_rep): the RNR retry count
// the active side is to use (at most 7; 7 without a conn_param), flow control as given, and
// our CA's ACK delay as the Target ACK Delay. A REP has no retry count or path MTU.
inline shm::CmConnParam rep_fields(const rdma_conn_param* p, const Resources& r, std::uint32_t psn,
                                   const DeviceFacts& d) {
    shm::CmConnParam c{};
    c.psn = psn & 0xffffff;
    c.responder_resources = r.responder_resources;
    c.initiator_depth = r.initiator_depth;
    c.flow_control = p != nullptr ? p->flow_control : 0;
    c.rnr_retry_count = p != nullptr ? std::min<std::uint8_t>(p->rnr_retry_count, 7) : 7;
    c.ack_timeout = d.ca_ack_delay;
    return c;
}

// The attributes that take the QP of `s` to a->qp_state (INIT, RTR, RTS), as rdma_init_qp_attr
// gives them (cm.c cm_init_qp_{init,rtr,rts}_attr, cma.c rdma_init_qp_attr, librdmacm
// ucma_modify_qp_rtr/rts). Every value a message carried is read from the message that
// names it for its receiver:
//   - rq_psn is our own Starting PSN, sq_psn the peer's (IBA §12.7.20, §12.7.31);
//   - max_dest_rd_atomic is our responder resources as our REP said (passive) or the REP's
//     initiator depth (active); max_rd_atomic our initiator depth (passive) or the REP's
//     responder resources (active);
//   - retry_cnt is the REQ's retry count on both sides (the active side's own);
//     rnr_retry is the peer's message's RNR retry count on both sides;
//   - timeout is the ACK timeout set on the id, else the REQ's Local ACK Timeout (passive)
//     or the REP's Target ACK Delay with our route's packet life time (active);
//   - path_mtu is the least of our port's and the REQ's; the traffic class is the REQ's
//     (passive) or our TOS (active);
//   - INIT grants remote writes, and reads and atomics when the peer has an initiator
//     depth (cm_init_qp_init_attr); before the peer is known, writes and reads.
// `dgid` is the peer's GID. EINVAL when the state needs the peer and none came yet, or for
// a state rdma_cm does not set.
inline int qp_attr(const Side& s, const DeviceFacts& d, const IdOptions& o, ibv_qp_type type,
                   const ibv_gid& dgid, ibv_qp_attr* a, int* mask) {
    const ibv_qp_state want = a->qp_state;
    const bool have_peer = s.peer.qpn != 0;
    *a = ibv_qp_attr{};
    a->qp_state = want;
    switch (want) {
        case IBV_QPS_INIT:
            a->pkey_index = 0;
            a->port_num = 1;
            *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
            if (type == IBV_QPT_UD) {
                a->qkey = RDMA_UDP_QKEY;
                *mask |= IBV_QP_QKEY;
                return 0;
            }
            a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
            if (!have_peer || s.peer.initiator_depth != 0)
                a->qp_access_flags |= IBV_ACCESS_REMOTE_READ;
            if (have_peer && s.peer.initiator_depth != 0)
                a->qp_access_flags |= IBV_ACCESS_REMOTE_ATOMIC;
            *mask |= IBV_QP_ACCESS_FLAGS;
            return 0;
        case IBV_QPS_RTR: {
            if (!have_peer) return EINVAL;  // no REQ or REP yet
            const std::uint8_t path_mtu = s.passive ? s.peer.path_mtu : s.sent.path_mtu;
            a->path_mtu =
                path_mtu != 0 ? std::min(d.port_mtu, static_cast<ibv_mtu>(path_mtu)) : d.port_mtu;
            a->dest_qp_num = s.peer.qpn;
            a->rq_psn = s.sent.psn;
            a->max_dest_rd_atomic = s.passive ? s.sent.responder_resources : s.peer.initiator_depth;
            // Linux's CM leaves 0 (655 ms), the time the peer waits after each of our RNR
            // NAKs: a consumer's RNR retry count of 5 then outlasts seconds of a busy
            // receiver, as rdma-core's test suite expects (0.64 ms ran out under load).
            a->min_rnr_timer = 0;
            a->ah_attr.is_global = 1;
            a->ah_attr.grh.dgid = dgid;
            a->ah_attr.grh.sgid_index = 0;
            a->ah_attr.grh.hop_limit = 64;
            a->ah_attr.grh.traffic_class = s.passive ? s.peer.tos : o.tos;
            a->ah_attr.port_num = 1;
            *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
            if (type == IBV_QPT_RC) *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
            return 0;
        }
        case IBV_QPS_RTS:
            if (type != IBV_QPT_UD && !have_peer) return EINVAL;  // no REQ or REP yet
            a->sq_psn = s.peer.psn;
            a->timeout = o.ack_timeout != 0 ? o.ack_timeout
                         : s.passive        ? s.peer.ack_timeout
                                            : ack_timeout(s.peer.ack_timeout, packet_life_time(o));
            a->retry_cnt = s.passive ? s.peer.retry_count : s.sent.retry_count;
            a->rnr_retry = s.peer.rnr_retry_count;
            a->max_rd_atomic = s.passive ? s.sent.initiator_depth : s.peer.responder_resources;
            *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
            if (type == IBV_QPT_RC)
                *mask |=
                    IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
            return 0;
        default:
            return EINVAL;
    }
}

}  // namespace snic::client::cm_rules
