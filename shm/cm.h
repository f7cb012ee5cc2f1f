// rdma_cm over snicd: the control messages of a CM connection and the event entries of its
// ring. libsnic's librdmacm opens one CM connection to each daemon an event channel uses
// (cm_open: the channel's notification socket and a memfd holding the event ring); the
// connection names its ids by handle, and snicd speaks IB CM for them on the ports' QP1.
// Addresses and ports are in host order here; the wire is snicd's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shm/control_abi.h"
#include "shm/wqe.h"

namespace snic::shm {

// The most private data each message carries for the consumer. A connect request's REQ
// holds 92 bytes, 36 of which are rdma_cm's addressing header (RDMA_PS_TCP and
// RDMA_PS_IB alike, as Linux's rdma_cm sends them).
inline constexpr std::size_t kCmReqPrivate = 56;
inline constexpr std::size_t kCmRepPrivate = 196;
inline constexpr std::size_t kCmRejPrivate = 148;
inline constexpr std::size_t kCmDreqPrivate = 220;
inline constexpr std::size_t kCmSidrReqPrivate = 180;  // 216 less the header
inline constexpr std::size_t kCmSidrRepPrivate = 136;
inline constexpr std::size_t kCmMaxPrivate = 224;  // the largest of them all (RTU, DREP)

// Events waiting in a CM connection's ring at most: room for the four a connection may
// raise (request or response, established, disconnected, TimeWait exit) for each of the ids
// one connection may hold (daemon/cm/service.h). An event that finds the ring full is lost
// and counted (a connect request is rejected instead).
inline constexpr std::uint32_t kCmEventCapacity = 4096;

// What a connection carries about the QP on each side (rdma_conn_param and more).
struct CmConnParam {
    std::uint32_t qpn;
    std::uint32_t psn;
    std::uint8_t responder_resources;
    std::uint8_t initiator_depth;
    std::uint8_t flow_control;
    std::uint8_t retry_count;
    std::uint8_t rnr_retry_count;
    std::uint8_t srq;
    std::uint8_t path_mtu;     // ibv_mtu
    std::uint8_t ack_timeout;  // local ACK timeout exponent (RDMA_OPTION_ID_ACK_TIMEOUT)
    std::uint8_t tos;
    std::uint8_t qp_type;  // ibv_qp_type: RC, UC (REQ) or UD (SIDR)
    std::uint8_t private_data_len;
    std::uint8_t reserved;
    std::uint32_t qkey;  // UD (SIDR)
    std::uint8_t private_data[kCmMaxPrivate];
};
static_assert(sizeof(CmConnParam) == 24 + kCmMaxPrivate &&
              std::is_trivially_copyable_v<CmConnParam>);

// cm_open: fds [notification socket, memfd of cm_event_layout()] -> Empty.
struct CmCreateIdReq {
    std::uint64_t token;  // comes back in the id's events
    std::uint16_t ps;     // rdma_port_space
    std::uint8_t qp_type;
    std::uint8_t reserved[5];
};
struct CmIdReply {
    Handle id;
    std::uint32_t reserved;
};

// cm_bind: ip 0 is the wildcard (every port of this daemon), port 0 an ephemeral one.
struct CmBindReq {
    Handle id;
    std::uint32_t ip;
    std::uint16_t port;
    std::uint8_t reuse_addr;
    std::uint8_t reserved;
};
struct CmBindReply {
    std::uint32_t ip;
    std::uint16_t port;
    std::uint16_t port_index;  // the device's port; kCmNoPort for a wildcard
};
inline constexpr std::uint16_t kCmNoPort = 0xffff;

struct CmListenReq {
    Handle id;
    std::uint32_t backlog;
};

// cm_connect: to dst_ip:dst_port from the bound address (bound to a port first).
struct CmConnectReq {
    Handle id;
    std::uint32_t dst_ip;
    std::uint16_t dst_port;
    std::uint8_t cm_response_timeout;  // 4.096 us * 2^t
    std::uint8_t max_cm_retries;
    std::uint8_t transport;  // the device's: kTransportRoce (IB CM) or kTransportIwarp (MPA)
    std::uint8_t reserved[3];
    CmConnParam param;
};

// cm_accept: a connect request's id answers with its QP (REP, or SIDR_REP), or the active side
// confirms a connect response (RTU) with an empty param (rdma_establish).
struct CmAcceptReq {
    Handle id;
    std::uint32_t reserved;
    CmConnParam param;
};

struct CmRejectReq {
    Handle id;
    std::uint8_t private_data_len;
    std::uint8_t reserved[3];
    std::uint8_t private_data[kCmRejPrivate];
};

// cm_migrate: moves an id of another CM connection of the same process to this one.
struct CmMigrateReq {
    Handle id;  // on the old connection
    std::uint32_t reserved;
    std::uint64_t old_cookie;  // CmOpenReply.cookie of the old connection
};

struct CmOpenReply {
    std::uint64_t cookie;  // names this connection to cm_migrate
};

// rdma_cm_event_type's values (libsnic checks them against rdma_cma.h).
enum CmEventType : std::uint32_t {
    kCmAddrResolved = 0,
    kCmAddrError = 1,
    kCmRouteResolved = 2,
    kCmRouteError = 3,
    kCmConnectRequest = 4,
    kCmConnectResponse = 5,
    kCmConnectError = 6,
    kCmUnreachable = 7,
    kCmRejected = 8,
    kCmEstablished = 9,
    kCmDisconnected = 10,
    kCmDeviceRemoval = 11,
    kCmTimewaitExit = 15,
};

// rdma_port_space's values.
inline constexpr std::uint16_t kCmPsIpoib = 0x0002;
inline constexpr std::uint16_t kCmPsTcp = 0x0106;
inline constexpr std::uint16_t kCmPsUdp = 0x0111;
inline constexpr std::uint16_t kCmPsIb = 0x013f;

// One event, as the ring carries it; rdma_cm_event and its parameters.
struct CmEvent {
    std::uint64_t token;   // the id's (for a connect request: the listener's)
    Handle id;             // the id it is about (a connect request: the new id)
    std::uint32_t event;   // rdma_cm_event_type
    std::int32_t status;   // 0, a negative errno, or a REJ reason (REJECTED)
    std::uint32_t src_ip;  // the new id's addresses (connect request), else the id's
    std::uint32_t dst_ip;
    std::uint16_t src_port;
    std::uint16_t dst_port;
    std::uint16_t port_index;  // the device port the new id is on
    std::uint16_t transport;   // kTransportRoce or kTransportIwarp: the new id's device
    std::uint32_t iw_conn;     // iWARP: the connection an RTR binds the id's QP to
    CmConnParam param;         // the peer's QP and private data
};
static_assert(sizeof(CmEvent) % 8 == 0 && std::is_trivially_copyable_v<CmEvent>);

// snicctl cm: the ids by state and each port's CM figures.
inline constexpr std::size_t kCmIdStates = 8;
inline constexpr const char* kCmIdStateNames[kCmIdStates] = {
    "idle",         "listening", "connecting",  "req_received",
    "rep_received", "accepted",  "established", "disconnecting"};

struct CmPortStatus {
    std::uint64_t mads_rx, mads_tx, mads_bad;
    std::uint64_t retransmits, duplicates, stale, half_open_refused;
    std::uint64_t connections;  // the port's agent holds (TimeWait included)
};

struct CmStatusReply {
    std::uint32_t ids;
    std::uint32_t nports;
    std::uint64_t states[kCmIdStates];
    std::uint64_t connect_requests, no_listener, backlog_full, no_room, events, events_lost;
    CmPortStatus ports[kMaxPorts];
};
static_assert(std::is_trivially_copyable_v<CmStatusReply>);

constexpr Layout cm_event_layout() {
    return {0, 0, 0, round_up(ring_bytes<CmEvent>(kCmEventCapacity), kPageSize)};
}

}  // namespace snic::shm
