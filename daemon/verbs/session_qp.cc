// A session's queue pairs: creation with its rings and caps, Modify QP by IBA's table and the
// device's rules (daemon/verbs/transport.h), the engine a transport runs from RTR on, and
// the state word the client reads.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "daemon/verbs/completion.h"
#include "daemon/verbs/qp_glue.h"
#include "daemon/verbs/session.h"
#include "daemon/verbs/session_util.h"

namespace snic::daemon {

using namespace session_util;
using shm::ObjKind;
using verbs::QpState;
namespace qa = verbs::qp_attr;

// ---- queue pairs ---------------------------------------------------------------------------

// The caps and ring capacities of a create_qp request against the limits: 0 or EINVAL.
int Session::check_qp_caps(const shm::CreateQpReq& req, bool with_srq) const {
    constexpr const char* op = "create_qp";
    const Limits& l = r_.limits();
    const shm::QpCap& c = req.cap;
    // 0 is a QP that only receives (or only sends): real NICs accept it, and so does verbs.
    if (c.max_send_wr > l.max_qp_wr)
        return refuse(EINVAL, op,
                      fmt::format("max_send_wr {} not in 0..{}", c.max_send_wr, l.max_qp_wr));
    if (c.max_send_sge > l.max_sge)
        return refuse(EINVAL, op,
                      fmt::format("max_send_sge {} above {}", c.max_send_sge, l.max_sge));
    if (c.max_inline_data > l.max_inline_data)
        return refuse(
            EINVAL, op,
            fmt::format("max_inline_data {} above {}", c.max_inline_data, l.max_inline_data));
    if (!shm::wq_capacity_ok(req.sq_capacity, c.max_send_wr, l.max_wq_capacity))
        return refuse(EINVAL, op,
                      fmt::format("send ring capacity {} for max_send_wr {}", req.sq_capacity,
                                  c.max_send_wr));
    if (with_srq) {
        // With an SRQ the QP has no receive queue; verbs ignores the receive caps.
        if (req.rq_capacity != 0) return refuse(EINVAL, op, "a QP with an SRQ has no receive ring");
    } else {
        if (c.max_recv_wr > l.max_qp_wr)
            return refuse(EINVAL, op,
                          fmt::format("max_recv_wr {} not in 0..{}", c.max_recv_wr, l.max_qp_wr));
        if (c.max_recv_sge > l.max_sge)
            return refuse(EINVAL, op,
                          fmt::format("max_recv_sge {} above {}", c.max_recv_sge, l.max_sge));
        if (!shm::wq_capacity_ok(req.rq_capacity, c.max_recv_wr, l.max_wq_capacity))
            return refuse(EINVAL, op,
                          fmt::format("receive ring capacity {} for max_recv_wr {}",
                                      req.rq_capacity, c.max_recv_wr));
    }
    return 0;
}

int Session::create_qp(const shm::CreateQpReq& req, FdList& fds, shm::CreateQpReply& out) {
    constexpr const char* op = "create_qp";
    const auto type = verbs::qp_type_from(req.qp_type);
    if (!type)
        return refuse(verbs::qp_type_refusal(req.qp_type), op,
                      fmt::format("QP type {} (RC 2, UC 3, UD 4 only)", req.qp_type));
    if (const char* why = device_->rules->refuses_qp_type(*type))
        return refuse(
            EOPNOTSUPP, op,
            fmt::format("{} QPs on {}: {}", verbs::qp_type_name(req.qp_type), device_name(), why));
    Pd* pd = pds_.find(req.pd);
    if (pd == nullptr) return refuse(EINVAL, op, "no such PD " + hex(req.pd));
    Cq* send_cq = cqs_.find(req.send_cq);
    if (send_cq == nullptr) return refuse(EINVAL, op, "no such send CQ " + hex(req.send_cq));
    Cq* recv_cq = cqs_.find(req.recv_cq);
    if (recv_cq == nullptr) return refuse(EINVAL, op, "no such receive CQ " + hex(req.recv_cq));
    Srq* srq = nullptr;
    if (req.srq != shm::kNoHandle) {
        srq = srqs_.find(req.srq);
        if (srq == nullptr) return refuse(EINVAL, op, "no such SRQ " + hex(req.srq));
    }

    if (const int err = check_qp_caps(req, srq != nullptr); err != 0) return err;
    const shm::QpCap& c = req.cap;
    if (fds.size() != 1) return refuse(EINVAL, op, "takes 1 fd: the QP memfd");
    if (!r_.reserve(ObjKind::qp, counts_, peer_.uid)) return refuse(ENOMEM, op, "QP limit reached");
    auto qp = std::make_unique<Qp>();
    qp->counted = Counted(r_, ObjKind::qp, counts_, peer_.uid);

    const shm::Layout layout = shm::qp_layout(req.sq_capacity, req.rq_capacity);
    if (const int err = check_address_space(layout.bytes, 1, op); err != 0) return err;
    auto map = map_object(fds.get(0), layout.bytes, &mapped_);
    if (!map) return refuse(map.error().code, op, map.error().message);
    const std::size_t sq_end = req.rq_capacity == 0 ? layout.bytes : layout.ring1;
    auto sq = attach_ring<shm::RingConsumer<shm::SendWqe>>(*map, layout.ring0, sq_end,
                                                           req.sq_capacity, "send ring");
    if (!sq) return refuse(sq.error().code, op, sq.error().message);
    if (req.rq_capacity != 0) {
        auto rq = attach_ring<shm::RingConsumer<shm::RecvWqe>>(*map, layout.ring1, layout.bytes,
                                                               req.rq_capacity, "receive ring");
        if (!rq) return refuse(rq.error().code, op, rq.error().message);
        qp->rq = *rq;
    }

    qp->pd = Ref<Pd>(pd);
    qp->send_cq = Ref<Cq>(send_cq);
    qp->recv_cq = Ref<Cq>(recv_cq);
    qp->srq = Ref<Srq>(srq);
    qp->pd_handle = req.pd;
    qp->send_cq_handle = req.send_cq;
    qp->recv_cq_handle = req.recv_cq;
    qp->srq_handle = srq != nullptr ? req.srq : shm::kNoHandle;
    qp->map = std::move(*map);
    qp->control = at<shm::QpControl>(qp->map, layout.control);
    qp->sq = *sq;
    qp->type = *type;
    qp->events = &events_;
    qp->owner = peer_;
    qp->doorbells = doorbells_;
    qp->sq_sig_all = req.sq_sig_all != 0 ? 1 : 0;
    // A queue offers what its ring holds (IBA 11.2.4.1: at least what was asked), as rxe and
    // real NICs report it: a post past that is ENOMEM.
    qp->cap = c;
    qp->cap.max_send_wr = req.sq_capacity;
    qp->cap.max_recv_wr = req.rq_capacity;
    if (srq != nullptr) qp->cap.max_recv_wr = qp->cap.max_recv_sge = 0;
    const shm::QpCap cap = qp->cap;
    qp->state = QpState::reset;
    store_qp_state(qp->control, QpState::reset);
    reset_recv_counters(*qp);
    note_send_held(*qp, 0);
    const std::uint32_t qpn = r_.qpns().acquire(qp.get());
    if (qpn == 0) return refuse(ENOMEM, op, "QP numbers exhausted");
    qp->qpn = NameLease(r_.qpns(), qpn);

    const shm::Handle h = qps_.insert(std::move(qp));
    if (h == shm::kNoHandle) return refuse(ENOMEM, op, "handle table full");
    out = {h, qpn, cap, qpn % shm::kDoorbellBits, 0};
    return 0;
}

// The values of the attributes the mask names (the mask itself is checked against the
// state table first). 0 or EINVAL.
int Session::check_modify_values(std::uint32_t mask, const shm::QpAttr& a) const {
    constexpr const char* op = "modify_qp";
    const Limits& l = r_.limits();
    if ((mask & qa::port) != 0 && a.port_num != 1)
        return refuse(EINVAL, op, fmt::format("port_num {} (the device has port 1)", a.port_num));
    if ((mask & qa::pkey_index) != 0 && a.pkey_index >= l.max_pkeys)
        return refuse(EINVAL, op, fmt::format("pkey_index {} (one pkey)", a.pkey_index));
    // Any IB MTU is taken and clamped to what the port carries when stored (below), as rxe and
    // hardware NICs do: a path MTU is what the path allows, the port may allow less.
    if ((mask & qa::path_mtu) != 0 && (a.path_mtu < IBV_MTU_256 || a.path_mtu > IBV_MTU_4096))
        return refuse(EINVAL, op, fmt::format("path_mtu {} (an ibv_mtu, 1..5)", a.path_mtu));
    if ((mask & qa::max_qp_rd_atomic) != 0 && a.max_rd_atomic > l.max_qp_init_rd_atom)
        return refuse(
            EINVAL, op,
            fmt::format("max_rd_atomic {} above {}", a.max_rd_atomic, l.max_qp_init_rd_atom));
    if ((mask & qa::max_dest_rd_atomic) != 0 && a.max_dest_rd_atomic > l.max_qp_rd_atom)
        return refuse(
            EINVAL, op,
            fmt::format("max_dest_rd_atomic {} above {}", a.max_dest_rd_atomic, l.max_qp_rd_atom));
    if ((mask & qa::min_rnr_timer) != 0 && a.min_rnr_timer > 31)
        return refuse(EINVAL, op, fmt::format("min_rnr_timer {} above 31", a.min_rnr_timer));
    if ((mask & qa::timeout) != 0 && a.timeout > 31)
        return refuse(EINVAL, op, fmt::format("timeout {} above 31", a.timeout));
    if ((mask & qa::retry_cnt) != 0 && a.retry_cnt > 7)
        return refuse(EINVAL, op, fmt::format("retry_cnt {} above 7", a.retry_cnt));
    if ((mask & qa::rnr_retry) != 0 && a.rnr_retry > 7)
        return refuse(EINVAL, op, fmt::format("rnr_retry {} above 7", a.rnr_retry));
    if ((mask & qa::rq_psn) != 0 && a.rq_psn > kPsnMask)
        return refuse(EINVAL, op, fmt::format("rq_psn {:#x} wider than 24 bits", a.rq_psn));
    if ((mask & qa::sq_psn) != 0 && a.sq_psn > kPsnMask)
        return refuse(EINVAL, op, fmt::format("sq_psn {:#x} wider than 24 bits", a.sq_psn));
    if ((mask & qa::dest_qpn) != 0 && a.dest_qp_num > kPsnMask)
        return refuse(EINVAL, op,
                      fmt::format("dest_qp_num {:#x} wider than 24 bits", a.dest_qp_num));
    if ((mask & qa::access_flags) != 0 && (a.qp_access_flags & ~kQpAccess) != 0)
        return refuse(EINVAL, op, "qp_access_flags " + hex(a.qp_access_flags));
    if ((mask & qa::path_mig_state) != 0 && a.path_mig_state > IBV_MIG_ARMED)
        return refuse(EINVAL, op, fmt::format("path_mig_state {}", a.path_mig_state));
    if (const std::string why = device_->rules->check_path(mask, a); !why.empty())
        return refuse(EINVAL, op, why);
    if (transport_ != nullptr) {
        if (const char* why = transport_->check_attr(mask, a)) return refuse(EINVAL, op, why);
    }
    return 0;
}

int Session::modify_qp(const shm::ModifyQpReq& req, FdList&, shm::ModifyQpReply& out) {
    constexpr const char* op = "modify_qp";
    Qp* qp = qps_.find(req.qp);
    if (qp == nullptr) return refuse(EINVAL, op, "no such QP " + hex(req.qp));
    sync_state(*qp);
    const std::uint32_t mask = req.mask;
    const shm::QpAttr& a = req.attr;
    const QpState cur = qp->state;
    if ((mask & qa::cur_state) != 0 && a.cur_qp_state != static_cast<std::uint32_t>(cur))
        return refuse(EINVAL, op,
                      fmt::format("cur_qp_state {} but the QP is in {}", a.cur_qp_state,
                                  verbs::qp_state_name(cur)));
    QpState next = cur;
    if ((mask & qa::state) != 0) {
        const auto s = verbs::qp_state_from(a.qp_state);
        if (!s) return refuse(EINVAL, op, fmt::format("qp_state {}", a.qp_state));
        next = *s;
    }
    const TransportRules& rules = *device_->rules;
    if (const char* why = rules.check_binding(cur, next, mask)) return refuse(EINVAL, op, why);
    // The QP binds to the connection rdma_cm made for it (where the transport has one).
    const bool binds = (mask & shm::kQpAttrIwConn) != 0;
    if (!verbs::qp_modify_ok(cur, next, qp->type, rules.table_mask(cur, next, qp->type, mask)))
        return refuse(EINVAL, op,
                      fmt::format("{} -> {} with attribute mask {:#x} is not a valid transition",
                                  verbs::qp_state_name(cur), verbs::qp_state_name(next), mask));
    if (const int err = check_modify_values(mask, a); err != 0) return err;

    shm::QpAttr& s = qp->attr;
    const shm::QpAttr before = s;
    if (next == QpState::reset) s = shm::QpAttr{};  // Reset forgets every attribute
    if ((mask & qa::en_sqd_async_notify) != 0) s.en_sqd_async_notify = a.en_sqd_async_notify;
    if ((mask & qa::access_flags) != 0) s.qp_access_flags = a.qp_access_flags;
    if ((mask & qa::pkey_index) != 0) s.pkey_index = a.pkey_index;
    if ((mask & qa::port) != 0) s.port_num = a.port_num;
    if ((mask & qa::qkey) != 0) s.qkey = a.qkey;
    if ((mask & qa::av) != 0) {
        s.ah_attr = a.ah_attr;
        s.ah_attr.flow_label &= 0xfffff;
    }
    if ((mask & qa::path_mtu) != 0)
        s.path_mtu = std::min(a.path_mtu, device_->rules->active_mtu(port_->mtu));
    if ((mask & qa::timeout) != 0) s.timeout = a.timeout;
    if ((mask & qa::retry_cnt) != 0) s.retry_cnt = a.retry_cnt;
    if ((mask & qa::rnr_retry) != 0) s.rnr_retry = a.rnr_retry;
    if ((mask & qa::rq_psn) != 0) s.rq_psn = a.rq_psn;
    if ((mask & qa::max_qp_rd_atomic) != 0) s.max_rd_atomic = a.max_rd_atomic;
    if ((mask & qa::min_rnr_timer) != 0) s.min_rnr_timer = a.min_rnr_timer;
    if ((mask & qa::sq_psn) != 0) s.sq_psn = a.sq_psn;
    if ((mask & qa::max_dest_rd_atomic) != 0) s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    if ((mask & qa::path_mig_state) != 0) s.path_mig_state = a.path_mig_state;
    if ((mask & qa::dest_qpn) != 0) s.dest_qp_num = a.dest_qp_num;
    if (binds) {
        // The QP runs from here on, on the connection rdma_cm made: refused (and nothing
        // changed) when that connection is not this client's or not waiting for a QP.
        s.iw_conn = a.iw_conn;
        if (transport_ != nullptr) {
            auto engine = transport_->start(*qp);
            if (!engine) {
                s = before;
                return refuse(engine.error().code, op, engine.error().message);
            }
            qp->engine = std::move(*engine);
        }
    }
    qp->state = next;
    store_qp_state(qp->control, next);
    // A running engine takes the attributes it uses while running (UD: the Q_Key).
    if (qp->engine && (mask & qa::qkey) != 0 && next != QpState::reset && next != QpState::err)
        transport_->modified(*qp, mask);
    if (next != cur) enter_state(*qp, cur, next);
    out = {static_cast<std::uint32_t>(next), 0};
    return 0;
}

void Session::enter_state(Qp& qp, QpState cur, QpState next) {
    Transport* transport = transport_;
    switch (next) {
        case QpState::rtr:
            // The QP starts running on its port's lcore: its receive side takes packets now.
            if (transport != nullptr && !qp.engine) {
                auto engine = transport->start(qp);
                if (engine) {
                    qp.engine = std::move(*engine);
                } else {
                    spdlog::warn("session {}: QP {:#x} cannot run: {}", id_, qp.qpn.get(),
                                 engine.error().message);
                }
            }
            break;
        case QpState::rts:
            if (qp.engine && cur == QpState::rtr) transport->start_sending(qp);
            if (qp.engine && cur == QpState::sqd) transport->resume(qp);
            break;
        case QpState::reset: {  // the queues are emptied without completions
            stop_engine(qp);
            if (qp.sq) drain_bounded(*qp.sq, [](const shm::SendWqe&) {});
            if (qp.rq) drain_bounded(*qp.rq, [](const shm::RecvWqe&) {});
            // Nothing writes them now (the engine stopped): the QP counts afresh, as created,
            // and every WQE taken is done.
            reset_recv_counters(qp);
            note_send_held(qp, 0);
            qp.last_wqe_told.store(false);
            break;
        }
        case QpState::err: {
            if (qp.engine) {  // the engine completes what it holds and what is posted
                transport->to_error(qp);
            } else {
                on_lcore([&] {
                    const FlushResult f = flush_qp(qp);
                    if (f.send_cq_overflow) events_.post(IBV_EVENT_CQ_ERR, qp.send_cq_handle);
                    if (f.recv_cq_overflow && qp.recv_cq_handle != qp.send_cq_handle)
                        events_.post(IBV_EVENT_CQ_ERR, qp.recv_cq_handle);
                });
            }
            on_lcore([&] { note_last_wqe(qp); });
            break;
        }
        case QpState::sqd:
            // Drained once every WR started has completed: the engine says when. A QP without
            // one has nothing in flight.
            if (cur != QpState::rts) break;
            if (qp.engine) {
                transport->drain(qp);
            } else if (qp.attr.en_sqd_async_notify != 0) {
                post_async(IBV_EVENT_SQ_DRAINED, qp.handle);
            }
            break;
        default:
            break;
    }
}

bool Session::port_event(bool up) {
    return post_async(up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR, 1);
}

bool Session::post_async(std::uint32_t type, std::uint32_t handle) {
    bool posted = false;
    on_lcore([&] { posted = events_.post(type, handle); });
    return posted;
}

int Session::query_qp(const shm::HandleReq& req, FdList&, shm::QueryQpReply& out) {
    Qp* qp = qps_.find(req.handle);
    if (qp == nullptr) return refuse(EINVAL, "query_qp", "no such QP " + hex(req.handle));
    sync_state(*qp);
    out = {};
    out.attr = qp->attr;
    out.attr.qp_state = static_cast<std::uint32_t>(qp->state);
    out.attr.cur_qp_state = static_cast<std::uint32_t>(qp->state);
    out.attr.cap = qp->cap;
    out.attr.sq_draining = 0;
    out.sq_sig_all = qp->sq_sig_all;
    out.qp_type = static_cast<std::uint32_t>(qp->type);
    out.send_cq = qp->send_cq_handle;
    out.recv_cq = qp->recv_cq_handle;
    out.srq = qp->srq_handle;
    out.pd = qp->pd_handle;
    return 0;
}

int Session::destroy_qp(const shm::HandleReq& req, FdList&, shm::Empty&) {
    Qp* qp = qps_.find(req.handle);
    if (qp == nullptr) return refuse(EINVAL, "destroy_qp", "no such QP " + hex(req.handle));
    stop_engine(*qp);
    qps_.take(req.handle);
    return 0;
}

void Session::on_lcore(const std::function<void()>& fn) {
    if (transport_ != nullptr) {
        transport_->run(fn);
    } else {
        fn();
    }
}

void Session::sync_state(Qp& qp) {
    if (qp.engine && qp.engine->failed() && qp.state != QpState::err) qp.state = QpState::err;
}

void Session::stop_engine(Qp& qp) {
    if (!qp.engine) return;
    Qp* one = &qp;
    transport_->stop({&one, 1});
    qp.engine.reset();
}

}  // namespace snic::daemon
