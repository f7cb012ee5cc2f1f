// The data-plane seam: what the lcore, a device port, a QP and a session know of a transport
// (RoCEv2 and iWARP), and nothing more: its rules (TransportRules, pure: the verbs a session
// checks differ by transport) and its datapath (Transport). A transport serves the QPs of one port
// on that port's lcore; it is handed each QP when the QP starts running (RTR) and takes it back
// before the QP goes. The glue every transport shares (WQEs copied out of the client's rings
// and checked, CQEs, receive WQEs from the RQ or SRQ, memory access through keys, events) is
// daemon/verbs/qp_glue.h; a transport adds only its wire.
//
// Dependencies point one way: session -> transport.h (this file) <- roce/, iwarp/; the
// session never includes a transport's own header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/result.h"
#include "daemon/lcore/lcore.h"
#include "proto/verbs/qp_state.h"
#include "shm/control_abi.h"

namespace snic::daemon {

struct Qp;

// One named figure of a transport or of one of its QPs (telemetry, snicctl qp).
struct NamedCounter {
    std::string_view name;
    std::uint64_t value;
};

// What snicctl qp shows of a running QP beyond its attributes; read from the control thread
// while the lcore runs it, so each figure is a snapshot of its own (never torn, possibly a
// few packets apart from its neighbours).
struct QpEngineView {
    bool failed = false;
    std::string_view error;           // why it failed ("none" while it runs)
    std::uint32_t next_psn = 0;       // of the next new request
    std::uint32_t unacked_psn = 0;    // the oldest request not acknowledged
    std::uint32_t expected_psn = 0;   // the responder's next
    std::uint32_t msn = 0;            // messages the responder completed
    std::uint32_t send_wrs_held = 0;  // taken from the send queue, not completed
};

// A QP as its transport runs it. Created by the transport when the QP enters RTR and owned by
// the QP; every call below but failed() and view() is made on the transport's lcore.
class QpEngine {
  public:
    virtual ~QpEngine() = default;
    // True once the engine is in the error state, whether it failed by itself or was told
    // to (acquire: set on the lcore, read by the control thread).
    virtual bool failed() const = 0;
    virtual QpEngineView view() const = 0;
    // Calls `fn` with each per-QP counter.
    virtual void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const = 0;
};

// What a device's transport allows of the verbs, answered without its datapath (a device in
// a unit test has rules and no transport). One instance per transport, for every port.
class TransportRules {
  public:
    virtual ~TransportRules() = default;
    // shm::kTransportRoce or kTransportIwarp.
    virtual std::uint32_t kind() const = 0;
    // nullptr when the device runs QPs of `type`, else why not (EOPNOTSUPP).
    virtual const char* refuses_qp_type(verbs::QpType type) const = 0;
    // The IB MTU (ibv_mtu) the device's port reports active on an Ethernet MTU: the most a
    // QP's path MTU may be.
    virtual std::uint32_t active_mtu(std::uint32_t eth_mtu) const = 0;
    // Modify QP: the attribute mask IBA's table of transitions is checked with, from the one
    // the consumer gave (a transport whose connection rdma_cm makes counts what the table
    // requires as given), and nullptr or why `mask` is wrong for cur -> next (shm::
    // kQpAttrIwConn: the connection a QP binds to).
    virtual std::uint32_t table_mask(verbs::QpState cur, verbs::QpState next, verbs::QpType type,
                                     std::uint32_t mask) const = 0;
    virtual const char* check_binding(verbs::QpState cur, verbs::QpState next,
                                      std::uint32_t mask) const = 0;
    // Modify QP's attribute values the transport cannot address (the address vector, paths):
    // empty when `a` (the attributes `mask` names) is fine, else why not.
    virtual std::string check_path(std::uint32_t mask, const shm::QpAttr& a) const = 0;
};

class Transport : public LcorePoller {
  public:
    virtual ~Transport() = default;

    virtual std::string_view name() const = 0;

    // Control thread: runs `fn` on the lcore that serves the port (the only producer of its
    // QPs' CQEs and its sessions' events) between two turns, and returns once it ran.
    virtual void run(const std::function<void()>& fn) = 0;

    // --- control thread ---
    // The transport's own rules for Modify QP's attribute values (the addressing it can
    // reach, the path MTU of its wire); nullptr when `a` (the attributes `mask` names) is
    // fine, else why not.
    virtual const char* check_attr(std::uint32_t mask, const shm::QpAttr& a) const = 0;
    // The QP enters RTR: its engine from the QP's attributes, running on the lcore when this
    // returns (its receive side takes packets). An error when the attributes cannot be run.
    virtual Result<std::unique_ptr<QpEngine>> start(Qp& qp) = 0;
    // RTR -> RTS: the engine's send side starts from the RTS attributes in qp.attr.
    virtual void start_sending(Qp& qp) = 0;
    // RTS -> SQD: no new send WR is started; once every WR started has completed, the QP is
    // drained and, if qp.attr.en_sqd_async_notify, IBV_EVENT_SQ_DRAINED is raised (once).
    // SQD -> RTS: resume() serves the send queue again.
    virtual void drain(Qp& qp) = 0;
    virtual void resume(Qp& qp) = 0;
    // Modify QP to ERR: the engine completes what it holds and what is posted, flushed.
    virtual void to_error(Qp& qp) = 0;
    // Modify QP changed attributes (`mask`, now in qp.attr) of a QP whose engine runs and that
    // stays in its state; the engine takes those it uses while running (UD: the Q_Key).
    virtual void modified(Qp& qp, std::uint32_t mask) {
        (void)qp;
        (void)mask;
    }
    // The QPs leave RTR..ERR (RESET, destroy, the client gone): afterwards the lcore no longer
    // touches their engines and they may be destroyed. One lcore task for all of them: a
    // client's thousands of QPs going at once cost the control thread one lcore turn, not
    // one each (with the lcore busy, those turns held the control socket for seconds).
    virtual void stop(std::span<Qp* const> qps) = 0;
    // Calls `fn` with each of the transport's own counters (per port).
    virtual void for_each_counter(void (*fn)(void* ctx, NamedCounter c), void* ctx) const = 0;
};

}  // namespace snic::daemon
