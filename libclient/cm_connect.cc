// rdma_cm's connection calls: rdma_listen, rdma_connect, rdma_accept, rdma_establish,
// rdma_reject and rdma_disconnect, each a request to the id's daemon (shm/cm.h). What the
// REQ and REP carry, and the QP moves they make, are cm_qp.cc's.
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "libclient/cm_internal.h"
#include "libclient/internal.h"
#include "libclient/util.h"
#include "shm/cm.h"

namespace shm = snic::shm;

namespace snic::client::cm {
namespace {

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

}  // namespace
}  // namespace snic::client::cm

using namespace snic::client;
using namespace snic::client::cm;

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
