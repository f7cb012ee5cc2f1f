// rdma_cm's QPs: rdma_create_qp and rdma_create_srq on an id, and the moves of the id's QP
// through its states, with the attributes cm_rules.h gives from the id's device, options
// and the REQ and REP (what our own REQ or REP carries is made here too).
//
// The QP moves through its states here, not in the daemon, as librdmacm moves it: INIT at
// rdma_create_qp, RTR/RTS at a connect response (active) or at rdma_accept (passive), ERR at
// rdma_disconnect.
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "libclient/cm_internal.h"
#include "libclient/cm_rules.h"
#include "libclient/internal.h"
#include "libclient/util.h"
#include "shm/cm.h"

namespace shm = snic::shm;

namespace snic::client::cm {
namespace {

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

ibv_qp* managed_qp(CmId* i) {
    if (i->id.qp != nullptr) return i->id.qp;
    if (!is_iwarp(i) || i->app_qp_num == 0 || i->id.verbs == nullptr) return nullptr;
    return qp_by_num(i->id.verbs, i->app_qp_num);
}

void take_app_qp(CmId* i, const rdma_conn_param* p) {
    if (i->id.qp == nullptr && is_iwarp(i) && p != nullptr) i->app_qp_num = p->qp_num;
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

}  // namespace snic::client::cm

using namespace snic::client;
using namespace snic::client::cm;

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
