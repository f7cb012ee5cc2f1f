// Queue pairs: create/modify/query/destroy through snicd, the attributes they carry, and
// the binding of an iWARP QP to its connection (rdma_cm's). The post path (ibv_post_send,
// ibv_post_recv, ibv_bind_mw, the ibv_wr_* API) is qp_post.cc's.
#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "libclient/internal.h"
#include "libclient/qp_internal.h"
#include "proto/verbs/qp_state.h"

namespace snic::client {

namespace {

// The ibv_wr_* operations snic supports (IBV_QP_EX_WITH_*).
constexpr std::uint64_t kSupportedSendOps =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |
    IBV_QP_EX_WITH_SEND_WITH_INV;

// Why a QP cannot be made on `c` with `attr`, or 0: what snic does not offer (EOPNOTSUPP)
// before what is wrong with the attributes (EINVAL).
int check_init_attr(ibv_context* c, const ibv_qp_init_attr_ex* attr) {
    constexpr std::uint32_t kKnownMask =
        IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
        IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
        IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if ((attr->comp_mask & ~kKnownMask) != 0) return EINVAL;
    // What snic does not offer is refused as such before anything else is looked at (an XRC
    // receive QP comes with an XRC domain and no PD).
    if ((attr->comp_mask & (IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                            IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH)) != 0)
        return EOPNOTSUPP;
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr->create_flags != 0)
        return EOPNOTSUPP;
    // A type verbs names but snic runs no engine for (raw packet, XRC, driver): EOPNOTSUPP, as
    // the kernel's soft-RoCE refuses it (and rdma-core's tests skip on); no type at all: EINVAL.
    if (const int err = verbs::qp_type_refusal(attr->qp_type); err != 0) return err;
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0) return EINVAL;
    // Operations snic has not, or the QP's type has not (UD: only sends; UC: no READ,
    // atomics or Send with Invalidate).
    if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0 &&
        (attr->send_ops_flags & ~(kSupportedSendOps & allowed_send_ops(attr->qp_type))) != 0)
        return EOPNOTSUPP;
    const ibv_pd* pd = attr->pd;
    if (pd == nullptr || pd->context != c || attr->send_cq == nullptr || attr->recv_cq == nullptr ||
        attr->send_cq->context != c || attr->recv_cq->context != c ||
        (attr->srq != nullptr && attr->srq->context != c))
        return EINVAL;
    const shm::DeviceLimits& l = to_ctx(c)->limits;
    const ibv_qp_cap& cap = attr->cap;
    if (cap.max_send_wr > l.max_qp_wr || cap.max_send_sge > l.max_sge ||
        cap.max_inline_data > l.max_inline_data ||
        (attr->srq == nullptr && (cap.max_recv_wr > l.max_qp_wr || cap.max_recv_sge > l.max_sge)))
        return EINVAL;
    return 0;
}

// The QP's memfd (`memfd`, for snicd), mapped: its QpControl, its send queue and, with
// `rq_cap`, its receive queue. 0 or an errno.
int make_queues(Qp* qp, std::uint32_t sq_cap, std::uint32_t rq_cap, Fd* memfd) {
    const shm::Layout lay = shm::qp_layout(sq_cap, rq_cap);
    if (const int err = make_shared_area("libsnic-qp", lay.bytes, memfd, &qp->map); err != 0)
        return err;
    qp->control = ::new (qp->map.data() + lay.control) shm::QpControl{};
    {
        const std::size_t sq_end = lay.ring0 + shm::ring_bytes<shm::SendWqe>(sq_cap);
        auto sq = shm::RingProducer<shm::SendWqe>::init(
            std::span(qp->map.data() + lay.ring0, sq_end - lay.ring0), sq_cap);
        if (!sq) return EINVAL;
        qp->sq = *sq;
    }
    if (rq_cap != 0) {
        auto rq = shm::RingProducer<shm::RecvWqe>::init(
            std::span(qp->map.data() + lay.ring1, lay.bytes - lay.ring1), rq_cap);
        if (!rq) return EINVAL;
        qp->rq = *rq;
    }
    return 0;
}

// snicd's Create QP request for `attr`, whose rings hold `sq_cap` and `rq_cap` WQEs.
shm::CreateQpReq create_request(const ibv_qp_init_attr_ex* attr, const shm::DeviceLimits& l,
                                std::uint32_t sq_cap, std::uint32_t rq_cap) {
    const ibv_qp_cap& cap = attr->cap;
    shm::CreateQpReq req{};
    req.pd = attr->pd->handle;
    req.send_cq = attr->send_cq->handle;
    req.recv_cq = attr->recv_cq->handle;
    req.srq = attr->srq != nullptr ? attr->srq->handle : shm::kNoHandle;
    req.qp_type = attr->qp_type;
    req.sq_sig_all = attr->sq_sig_all != 0 ? 1 : 0;
    // Inline data as rxe sizes it: a send WQE's SGE space holds inline bytes too, so a QP
    // gets at least max_send_sge SGEs' worth (verbs lets a provider grant more than asked;
    // rdma_cm's examples post 16 inline bytes with max_inline_data 0).
    const std::uint32_t inline_bytes = std::max<std::uint32_t>(
        cap.max_inline_data,
        std::min<std::uint32_t>(cap.max_send_sge * sizeof(ibv_sge), l.max_inline_data));
    req.cap = {cap.max_send_wr, attr->srq != nullptr ? 0 : cap.max_recv_wr, cap.max_send_sge,
               attr->srq != nullptr ? 0 : cap.max_recv_sge, inline_bytes};
    req.sq_capacity = sq_cap;
    req.rq_capacity = rq_cap;
    return req;
}

// ---- attribute translation ----------------------------------------------------------

void to_shm(const ibv_ah_attr& a, shm::AhAttr* o) {
    std::memcpy(o->dgid, a.grh.dgid.raw, 16);
    o->flow_label = a.grh.flow_label;
    o->sgid_index = a.grh.sgid_index;
    o->hop_limit = a.grh.hop_limit;
    o->traffic_class = a.grh.traffic_class;
    o->is_global = a.is_global;
    o->dlid = a.dlid;
    o->sl = a.sl;
    o->src_path_bits = a.src_path_bits;
    o->static_rate = a.static_rate;
    o->port_num = a.port_num;
}

void from_shm(const shm::AhAttr& a, ibv_ah_attr* o) {
    std::memset(o, 0, sizeof *o);
    std::memcpy(o->grh.dgid.raw, a.dgid, 16);
    o->grh.flow_label = a.flow_label;
    o->grh.sgid_index = a.sgid_index;
    o->grh.hop_limit = a.hop_limit;
    o->grh.traffic_class = a.traffic_class;
    o->is_global = a.is_global;
    o->dlid = a.dlid;
    o->sl = a.sl;
    o->src_path_bits = a.src_path_bits;
    o->static_rate = a.static_rate;
    o->port_num = a.port_num;
}

// The bits of an enum field the caller may have left unwritten: ibv_modify_qp reads only the
// fields its mask names, and callers (librdmacm's rshutdown among them) pass an attribute whose
// other fields are whatever the stack held. Loading such a field as its enum type is undefined;
// copying its bytes is not, and the daemon ignores what the mask leaves out.
template <class Enum>
std::uint32_t enum_bits(const Enum& e) {
    static_assert(sizeof(Enum) == sizeof(std::uint32_t));
    std::uint32_t bits;
    std::memcpy(&bits, &e, sizeof bits);
    return bits;
}

void to_shm(const ibv_qp_attr& a, shm::QpAttr* o) {
    std::memset(o, 0, sizeof *o);
    o->qp_state = enum_bits(a.qp_state);
    o->cur_qp_state = enum_bits(a.cur_qp_state);
    o->path_mtu = enum_bits(a.path_mtu);
    o->path_mig_state = enum_bits(a.path_mig_state);
    o->qkey = a.qkey;
    o->rq_psn = a.rq_psn;
    o->sq_psn = a.sq_psn;
    o->dest_qp_num = a.dest_qp_num;
    o->qp_access_flags = static_cast<std::uint32_t>(a.qp_access_flags);
    o->rate_limit = a.rate_limit;
    o->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge,
              a.cap.max_inline_data};
    to_shm(a.ah_attr, &o->ah_attr);
    to_shm(a.alt_ah_attr, &o->alt_ah_attr);
    o->pkey_index = a.pkey_index;
    o->alt_pkey_index = a.alt_pkey_index;
    o->en_sqd_async_notify = a.en_sqd_async_notify;
    o->sq_draining = a.sq_draining;
    o->max_rd_atomic = a.max_rd_atomic;
    o->max_dest_rd_atomic = a.max_dest_rd_atomic;
    o->min_rnr_timer = a.min_rnr_timer;
    o->port_num = a.port_num;
    o->timeout = a.timeout;
    o->retry_cnt = a.retry_cnt;
    o->rnr_retry = a.rnr_retry;
    o->alt_port_num = a.alt_port_num;
    o->alt_timeout = a.alt_timeout;
}

void from_shm(const shm::QpAttr& a, ibv_qp_attr* o) {
    std::memset(o, 0, sizeof *o);
    o->qp_state = static_cast<ibv_qp_state>(a.qp_state);
    o->cur_qp_state = static_cast<ibv_qp_state>(a.cur_qp_state);
    o->path_mtu = static_cast<ibv_mtu>(a.path_mtu);
    o->path_mig_state = static_cast<ibv_mig_state>(a.path_mig_state);
    o->qkey = a.qkey;
    o->rq_psn = a.rq_psn;
    o->sq_psn = a.sq_psn;
    o->dest_qp_num = a.dest_qp_num;
    o->qp_access_flags = static_cast<unsigned>(a.qp_access_flags);
    o->rate_limit = a.rate_limit;
    o->cap = {a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge,
              a.cap.max_inline_data};
    from_shm(a.ah_attr, &o->ah_attr);
    from_shm(a.alt_ah_attr, &o->alt_ah_attr);
    o->pkey_index = a.pkey_index;
    o->alt_pkey_index = a.alt_pkey_index;
    o->en_sqd_async_notify = a.en_sqd_async_notify;
    o->sq_draining = a.sq_draining;
    o->max_rd_atomic = a.max_rd_atomic;
    o->max_dest_rd_atomic = a.max_dest_rd_atomic;
    o->min_rnr_timer = a.min_rnr_timer;
    o->port_num = a.port_num;
    o->timeout = a.timeout;
    o->retry_cnt = a.retry_cnt;
    o->rnr_retry = a.rnr_retry;
    o->alt_port_num = a.alt_port_num;
    o->alt_timeout = a.alt_timeout;
}

}  // namespace

ibv_qp* create_qp_common(ibv_context* c, ibv_qp_init_attr_ex* attr) {
    Context* ctx = to_ctx(c);
    if (const int err = check_init_attr(c, attr); err != 0) return fail_null<ibv_qp>(err);
    const bool has_ex = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    const std::uint64_t send_ops = has_ex ? attr->send_ops_flags : 0;
    ibv_pd* pd = attr->pd;
    ibv_qp_cap& cap = attr->cap;

    const std::uint32_t sq_cap = shm::wq_capacity_for(cap.max_send_wr);
    const std::uint32_t rq_cap = attr->srq != nullptr ? 0 : shm::wq_capacity_for(cap.max_recv_wr);
    auto qp = std::make_unique<Qp>();
    Fd memfd;
    if (const int err = make_queues(qp.get(), sq_cap, rq_cap, &memfd); err != 0)
        return fail_null<ibv_qp>(err);

    const shm::CreateQpReq req = create_request(attr, ctx->limits, sq_cap, rq_cap);
    shm::CreateQpReply rep{};
    const int fds[1] = {memfd.get()};
    if (const int err = ctx->conn.call(shm::CtrlOp::create_qp, req, &rep, fds); err != 0)
        return fail_null<ibv_qp>(err);

    cap = {rep.cap.max_send_wr, rep.cap.max_recv_wr, rep.cap.max_send_sge, rep.cap.max_recv_sge,
           rep.cap.max_inline_data};
    qp->cap = rep.cap;
    qp->doorbells = ctx->doorbells;
    qp->doorbell = rep.doorbell % shm::kDoorbellBits;
    qp->sq_sig_all = attr->sq_sig_all != 0;
    qp->has_ex = has_ex;
    qp->send_ops = send_ops;
    ibv_qp& b = qp->qpx.qp_base;
    b.context = c;
    b.qp_context = attr->qp_context;
    b.pd = pd;
    b.send_cq = attr->send_cq;
    b.recv_cq = attr->recv_cq;
    b.srq = attr->srq;
    b.handle = rep.qp;
    b.qp_num = rep.qp_num;
    b.state = IBV_QPS_RESET;
    b.qp_type = attr->qp_type;
    ::pthread_mutex_init(&b.mutex, nullptr);
    ::pthread_cond_init(&b.cond, nullptr);
    install_wr_api(&qp->qpx);

    std::lock_guard lock(ctx->objs_mu);
    ctx->qps.emplace(rep.qp, qp.get());
    ctx->qps_peak = std::max(ctx->qps_peak, ctx->qps.size());
    return &qp.release()->qpx.qp_base;
}

void release_qp_local(Qp* qp) {
    ::pthread_mutex_destroy(&qp->qpx.qp_base.mutex);
    ::pthread_cond_destroy(&qp->qpx.qp_base.cond);
    delete qp;
}

namespace ops {

ibv_qp* create_qp_ex(ibv_context* c, ibv_qp_init_attr_ex* attr) {
    return guarded<ibv_qp*>(nullptr, [&] { return create_qp_common(c, attr); });
}

}  // namespace ops

}  // namespace snic::client

using namespace snic::client;
namespace shm = snic::shm;

SNIC_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
    return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
        ibv_qp_init_attr_ex ex{};
        ex.qp_context = attr->qp_context;
        ex.send_cq = attr->send_cq;
        ex.recv_cq = attr->recv_cq;
        ex.srq = attr->srq;
        ex.cap = attr->cap;
        ex.qp_type = attr->qp_type;
        ex.sq_sig_all = attr->sq_sig_all;
        ex.comp_mask = IBV_QP_INIT_ATTR_PD;
        ex.pd = pd;
        ibv_qp* qp = create_qp_common(pd->context, &ex);
        if (qp != nullptr) attr->cap = ex.cap;
        return qp;
    });
}

SNIC_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
    Qp* q = to_qp(qp);
    return q->has_ex ? &q->qpx : nullptr;
}

namespace snic::client {

namespace {

// One Modify QP through the daemon; the state it reports is the QP's from then on.
int modify_call(ibv_qp* qp, const shm::ModifyQpReq& req) {
    shm::ModifyQpReply rep{};
    if (const int err = to_ctx(qp->context)->conn.call(shm::CtrlOp::modify_qp, req, &rep); err != 0)
        return err;
    store_state(to_qp(qp), rep.state);
    return 0;
}

}  // namespace

ibv_qp* qp_by_num(ibv_context* c, std::uint32_t qpn) {
    const Device* dev = to_ctx(c)->device;
    std::lock_guard lock(open_contexts().mu);
    for (Context* ctx : open_contexts().all) {
        if (ctx->device != dev) continue;
        std::lock_guard objs(ctx->objs_mu);
        for (const auto& [handle, q] : ctx->qps)
            if (q->qpx.qp_base.qp_num == qpn) return &q->qpx.qp_base;
    }
    return nullptr;
}

int bind_iwarp_qp(ibv_qp* qp, std::uint32_t iw_conn) {
    // A new iWARP QP is reported in INIT (ibv_query_qp), as Linux's iWARP drivers report it,
    // while snicd keeps it in RESET: one the application never moved goes to INIT first, with
    // the attributes rdma_init_qp_attr gives for INIT (port 1, remote read and write).
    if (load_state(to_qp(qp)) == IBV_QPS_RESET) {
        shm::ModifyQpReq init{};
        init.qp = qp->handle;
        init.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        init.attr.qp_state = IBV_QPS_INIT;
        init.attr.port_num = 1;
        init.attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
        if (const int err = modify_call(qp, init); err != 0) return err;
    }
    shm::ModifyQpReq req{};
    req.qp = qp->handle;
    req.mask = IBV_QP_STATE | shm::kQpAttrIwConn;
    req.attr.qp_state = IBV_QPS_RTR;
    req.attr.iw_conn = iw_conn;
    return modify_call(qp, req);
}

}  // namespace snic::client

SNIC_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    return errno_verb([&] {
        // The binding of an iWARP QP to its connection is rdma_cm's (bind_iwarp_qp).
        if ((static_cast<std::uint32_t>(mask) & shm::kQpAttrIwConn) != 0) return EINVAL;
        shm::ModifyQpReq req{};
        req.qp = qp->handle;
        req.mask = static_cast<std::uint32_t>(mask);
        to_shm(*attr, &req.attr);
        return modify_call(qp, req);
    });
}

SNIC_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
    return errno_verb([&] {
        (void)mask;  // every attribute is returned
        Qp* q = to_qp(qp);
        shm::QueryQpReply rep{};
        if (const int err =
                to_ctx(qp->context)
                    ->conn.call(shm::CtrlOp::query_qp, shm::HandleReq{qp->handle, 0}, &rep);
            err != 0)
            return err;
        from_shm(rep.attr, attr);
        store_state(q, rep.attr.qp_state);
        // An iWARP QP waits for its connection in one state, which Linux's iWARP drivers
        // report as INIT (siw's IDLE, cxgb4's and irdma's alike), a new QP included: so does
        // libsnic. snicd keeps IBA's RESET for it until rdma_cm or the application moves it.
        if (attr->qp_state == IBV_QPS_RESET &&
            to_ctx(qp->context)->device->transport == shm::kTransportIwarp)
            attr->qp_state = attr->cur_qp_state = IBV_QPS_INIT;
        if (init != nullptr) {
            std::memset(init, 0, sizeof *init);
            init->qp_context = qp->qp_context;
            init->send_cq = qp->send_cq;
            init->recv_cq = qp->recv_cq;
            init->srq = qp->srq;
            init->cap = attr->cap;
            init->qp_type = qp->qp_type;
            init->sq_sig_all = rep.sq_sig_all != 0 ? 1 : 0;
        }
        return 0;
    });
}

SNIC_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
    return errno_verb([&] {
        Qp* q = to_qp(qp);
        Context* ctx = to_ctx(qp->context);
        if (const int err = ctx->conn.call_handle(shm::CtrlOp::destroy_qp, qp->handle); err != 0)
            return err;
        bool trim = false;
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->qps.erase(qp->handle);
            // When many QPs went, the heap's free pages go back to the system: each time the
            // context's QPs halved from a peak of at least 256.
            if (ctx->qps_peak >= 256 && ctx->qps.size() <= ctx->qps_peak / 2) {
                ctx->qps_peak = ctx->qps.size();
                trim = true;
            }
        }
        ::pthread_mutex_lock(&qp->mutex);
        while (qp->events_completed != q->events_reported)
            ::pthread_cond_wait(&qp->cond, &qp->mutex);
        ::pthread_mutex_unlock(&qp->mutex);
        release_qp_local(q);
        if (trim) ::malloc_trim(0);
        return 0;
    });
}
