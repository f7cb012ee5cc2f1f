// Control messages between snicd and its clients (libsnic, snicctl) on the
// daemon's Unix SOCK_SEQPACKET socket: one request, one reply, each a single
// datagram that starts with CtrlHeader, followed by the op's fixed-size body.
// File descriptors (memfds, notification sockets) travel with the request as
// SCM_RIGHTS, in the order each op names.
//
// A notification socket is one end of an AF_UNIX SOCK_STREAM socketpair that the
// client made: snicd writes one byte per event to it with send(MSG_DONTWAIT), which
// never blocks whatever the client does to its own end (an eventfd's or pipe's
// write could be made to block by a hostile client). The client reads one byte per
// event (ibv_get_cq_event, ibv_get_async_event) from the other end. Fixed-width fields, host byte
// order (one host).
//
// One connection is one client session. A session that opens a device (one
// ibv_context) owns the objects it creates; closing the socket, by exit or
// crash, releases them all. Objects are named by per-session handles: an index
// and a generation, never valid in another session.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <type_traits>

namespace snic::shm {

inline constexpr std::uint32_t kCtrlMagic = 0x43494e53;  // "SNIC" in memory order
// 11: PortInfo::queues; 10: PortInfo::offloads; 9: Cqe::wc_flags' kCqeSolicited; 8: sequenced SQ,
// RQ, SRQ and CQ entries (shm/ring.h version 2), a send WQE's first SGE in its first line,
// QpControl in two lines; 7: ClientInfo::fds, ResourcesReply's descriptor quotas; 6:
// CmStatusReply::no_room; 5: MrSegment kinds (SysV, hugetlb); 4: SRQ resize, QpControl::recv
inline constexpr std::uint16_t kAbiVersion = 11;
inline constexpr std::size_t kMaxPorts = 32;
inline constexpr std::size_t kNameLen = 64;  // NUL-terminated strings
inline constexpr std::size_t kMaxMrSegments = 16;
// libsnic's ibv_device.dev_name is this prefix and the device name; snicd makes the node
// /dev/infiniband/<dev_name> (daemon/control/device_nodes.h). Kernel nodes (uverbsN, umadN, issmN,
// rdma_cm) never start with it.
inline constexpr const char* kDeviceNodePrefix = "snic-";
inline constexpr std::size_t kMaxFds = kMaxMrSegments;  // per message

using Handle = std::uint32_t;  // (generation << 16) | index; kNoHandle: none
inline constexpr Handle kNoHandle = 0xffffffffu;

enum class CtrlOp : std::uint16_t {
    status = 1,       // -> StatusReply
    open_device,      // OpenDeviceReq, fds [notification socket, context memfd] -> OpenDeviceReply
    query_port,       // -> QueryPortReply
    alloc_pd,         // -> HandleReply
    dealloc_pd,       // HandleReq
    reg_mr,           // RegMrReq, one memfd per memfd segment -> RegMrReply
    dereg_mr,         // HandleReq
    create_channel,   // fds [notification socket, memfd] -> HandleReply
    destroy_channel,  // HandleReq
    create_cq,        // CreateCqReq, fds [memfd] -> CreateCqReply
    destroy_cq,       // HandleReq
    create_srq,       // CreateSrqReq, fds [memfd] -> CreateSrqReply
    modify_srq,       // ModifySrqReq, fds [memfd] with IBV_SRQ_MAX_WR -> ModifySrqReply
    query_srq,        // HandleReq -> QuerySrqReply
    destroy_srq,      // HandleReq
    create_qp,        // CreateQpReq, fds [memfd] -> CreateQpReply
    modify_qp,        // ModifyQpReq -> ModifyQpReply
    query_qp,         // HandleReq -> QueryQpReply
    destroy_qp,       // HandleReq
    alloc_mw,         // AllocMwReq -> AllocMwReply
    dealloc_mw,       // HandleReq
    clients,          // -> ClientsReply (snicctl)
    resources,        // -> ResourcesReply (snicctl)
    qps,              // QpsReq -> QpsReply (snicctl qp)
    qp,               // QpReq -> QpReply (snicctl qp QPN)
    // rdma_cm (shm/cm.h): a connection that opened none of the above with cm_open.
    cm_open,        // fds [notification socket, memfd] -> CmOpenReply
    cm_create_id,   // CmCreateIdReq -> CmIdReply
    cm_destroy_id,  // HandleReq
    cm_bind,        // CmBindReq -> CmBindReply
    cm_listen,      // CmListenReq
    cm_connect,     // CmConnectReq
    cm_accept,      // CmAcceptReq
    cm_reject,      // CmRejectReq
    cm_disconnect,  // HandleReq
    cm_migrate,     // CmMigrateReq -> CmIdReply
    cm_status,      // -> CmStatusReply (snicctl cm), on any connection
    tcp_conns,      // TcpConnsReq -> TcpConnsReply (snicctl tcp), on any connection
};

struct CtrlHeader {
    std::uint32_t magic;
    std::uint16_t abi_version;
    std::uint16_t op;      // CtrlOp
    std::uint32_t seq;     // echoed in the reply
    std::int32_t status;   // replies: 0 or a positive errno (EPROTO: ABI mismatch)
    std::uint32_t length;  // of the whole message, header included
    std::uint32_t reserved;
};
static_assert(sizeof(CtrlHeader) == 24 && std::is_trivially_copyable_v<CtrlHeader>);

// A request or reply: the header and the op's body.
template <typename Body>
struct Msg {
    CtrlHeader hdr;
    Body body;
};
struct Empty {};

// ---- status: the daemon, its ports and their RDMA devices -------------------

struct PortInfo {
    std::uint16_t port_id;
    std::uint16_t mtu;
    std::uint8_t mac[6];
    std::uint8_t prefix_length;
    std::uint8_t link_up;
    std::uint32_t ipv4;  // host order
    std::uint32_t ndevices;
    char name[kNameLen];        // DPDK device name
    char devices[2][kNameLen];  // RDMA devices on this port: [0] RoCEv2, [1] iWARP when present
    std::uint32_t offloads;     // the checksum offloads the port uses: kOffload* bits
    std::uint32_t queues;       // its queue pairs, each polled by an lcore (queues=N)
};
static_assert(sizeof(PortInfo) == 28 + 3 * kNameLen && std::is_trivially_copyable_v<PortInfo>);
// PortInfo::offloads, bit i named kOffloadNames[i].
inline constexpr std::uint32_t kOffloadTxIpv4Checksum = 1u << 0;
inline constexpr std::uint32_t kOffloadTxTcpChecksum = 1u << 1;
inline constexpr std::uint32_t kOffloadRxChecksum = 1u << 2;
inline constexpr const char* kOffloadNames[] = {"tx-ipv4-cksum", "tx-tcp-cksum", "rx-cksum"};
// How snicd's log and snicctl status name a PortInfo::offloads: "tx-ipv4-cksum,rx-cksum", or
// "none".
inline std::string offload_names(std::uint32_t bits) {
    std::string out;
    for (std::size_t i = 0; i < std::size(kOffloadNames); ++i) {
        if ((bits & (1u << i)) == 0) continue;
        if (!out.empty()) out += ',';
        out += kOffloadNames[i];
    }
    return out.empty() ? "none" : out;
}

struct StatusReply {
    CtrlHeader hdr;
    char name[kNameLen];
    char version[16];
    std::uint32_t pid;
    std::uint32_t nports;
    PortInfo ports[kMaxPorts];
};
static_assert(std::is_trivially_copyable_v<StatusReply>);

// ---- devices ------------------------------------------------------------------

// What query_device reports: the limits of one client session.
struct DeviceLimits {
    std::uint64_t max_mr_size;
    std::uint64_t page_size_cap;
    std::uint64_t node_guid;
    std::uint32_t vendor_id;
    std::uint32_t vendor_part_id;
    std::uint32_t hw_ver;
    std::uint32_t max_qp;
    std::uint32_t max_qp_wr;
    std::uint32_t max_sge;
    std::uint32_t max_sge_rd;
    std::uint32_t max_cq;
    std::uint32_t max_cqe;
    std::uint32_t max_mr;
    std::uint32_t max_pd;
    std::uint32_t max_qp_rd_atom;
    std::uint32_t max_qp_init_rd_atom;
    std::uint32_t max_res_rd_atom;
    std::uint32_t max_mw;
    std::uint32_t max_srq;
    std::uint32_t max_srq_wr;
    std::uint32_t max_srq_sge;
    std::uint32_t max_inline_data;
    std::uint32_t max_pkeys;
    std::uint32_t local_ca_ack_delay;
    std::uint32_t device_cap_flags;  // ibv_device_cap_flags
    std::uint32_t atomic_cap;        // ibv_atomic_cap
    std::uint32_t max_channels;
    std::uint32_t reserved;
};

// The transports of a port's RDMA devices (OpenDeviceReq::transport, PortInfo::devices).
inline constexpr std::uint32_t kTransportRoce = 0;
inline constexpr std::uint32_t kTransportIwarp = 1;
inline constexpr std::size_t kTransports = 2;

struct OpenDeviceReq {
    std::uint32_t port_index;  // index into StatusReply::ports
    std::uint32_t transport;   // kTransportRoce or kTransportIwarp
};
struct OpenDeviceReply {
    DeviceLimits limits;
    char device[kNameLen];
};

struct QueryPortReply {
    std::uint32_t state;       // ibv_port_state
    std::uint32_t max_mtu;     // ibv_mtu
    std::uint32_t active_mtu;  // ibv_mtu
    std::uint32_t eth_mtu;
    std::uint32_t gid_tbl_len;
    std::uint32_t pkey_tbl_len;
    std::uint32_t max_msg_sz;
    std::uint32_t active_speed;  // ibv speed code
    std::uint32_t active_width;  // ibv width code
    std::uint32_t ipv4;          // host order: GID 0 is ::ffff:ipv4
    std::uint8_t mac[6];
    std::uint8_t reserved[2];
};

// ---- generic ------------------------------------------------------------------

struct HandleReq {
    Handle handle;
    std::uint32_t reserved;
};
struct HandleReply {
    Handle handle;
    std::uint32_t reserved;
};

// ---- memory -------------------------------------------------------------------

// What backs one piece of a registration.
enum class MrBacking : std::uint32_t {
    memfd = 0,  // a memfd (libsnic's, or a hugetlb memfd), sealed with F_SEAL_SHRINK: one fd
    sysv = 1,   // a SysV shared memory segment the client has attached: no fd, `shmid`
};

// One piece of the registered range: bytes [offset, offset+length) of its backing (memfd
// or SysV segment) are mapped by the client at addr. Segments are aligned to their
// backing's page size (4 KiB, or the hugetlb page size), in address order and contiguous,
// and together cover the pages of [addr, addr+length) of the request (a hugetlb segment
// may reach past them to its page boundaries). Segments with an fd take the request's fds
// in order.
struct MrSegment {
    std::uint64_t addr;
    std::uint64_t length;
    std::uint64_t offset;
    MrBacking backing = MrBacking::memfd;
    std::int32_t shmid = -1;         // MrBacking::sysv; -1 otherwise
    std::uint64_t page_size = 4096;  // of the backing, as the client found it
};

struct RegMrReq {
    Handle pd;
    std::uint32_t access;  // ibv_access_flags
    std::uint64_t addr;
    std::uint64_t length;
    std::uint64_t iova;
    std::uint32_t nsegs;
    std::uint32_t reserved;
    MrSegment segs[kMaxMrSegments];
};
struct RegMrReply {
    Handle mr;
    std::uint32_t lkey;
    std::uint32_t rkey;
    std::uint32_t reserved;
};

struct AllocMwReq {
    Handle pd;
    std::uint32_t type;  // ibv_mw_type: 1 or 2
};
struct AllocMwReply {
    Handle mw;
    std::uint32_t rkey;
};

// ---- queues -------------------------------------------------------------------

struct CreateCqReq {
    std::uint32_t cqe;       // requested depth
    std::uint32_t capacity;  // ring slots in the memfd (a power of two > cqe)
    Handle channel;          // or kNoHandle
    std::uint32_t comp_vector;
};
struct CreateCqReply {
    Handle cq;
    std::uint32_t cqe;  // actual depth
};

struct CreateSrqReq {
    Handle pd;
    std::uint32_t max_wr;
    std::uint32_t max_sge;
    std::uint32_t srq_limit;
    std::uint32_t capacity;  // ring slots (a power of two >= max_wr)
    std::uint32_t reserved;
};
struct CreateSrqReply {
    Handle srq;
    std::uint32_t max_wr;
    std::uint32_t max_sge;
    std::uint32_t srq_num;
};

// With IBV_SRQ_MAX_WR (a resize) the request carries the memfd of the SRQ's new area,
// srq_layout(capacity) long; snicd formats the new ring there, moves the WQEs not yet taken
// into it in order, and from then on takes WQEs from it. The client holds its posts meanwhile,
// and resumes producing at `prod` of the reply in the new area.
struct ModifySrqReq {
    Handle srq;
    std::uint32_t mask;  // ibv_srq_attr_mask
    std::uint32_t max_wr;
    std::uint32_t srq_limit;
    std::uint32_t capacity;  // IBV_SRQ_MAX_WR: the new ring's slots (a power of two >= max_wr)
    std::uint32_t reserved;
};
struct ModifySrqReply {
    std::uint32_t max_wr;    // as now
    std::uint32_t capacity;  // the ring's slots now
    std::uint32_t prod;      // IBV_SRQ_MAX_WR: the new ring's producer index (the WQEs moved)
    std::uint32_t reserved;
};
struct QuerySrqReply {
    std::uint32_t max_wr;
    std::uint32_t max_sge;
    std::uint32_t srq_limit;
    std::uint32_t reserved;
};

struct QpCap {
    std::uint32_t max_send_wr;
    std::uint32_t max_recv_wr;
    std::uint32_t max_send_sge;
    std::uint32_t max_recv_sge;
    std::uint32_t max_inline_data;
};

struct CreateQpReq {
    Handle pd;
    Handle send_cq;
    Handle recv_cq;
    Handle srq;             // or kNoHandle
    std::uint32_t qp_type;  // ibv_qp_type: RC 2, UC 3, UD 4
    std::uint32_t sq_sig_all;
    QpCap cap;
    std::uint32_t sq_capacity;  // ring slots (powers of two >= the cap's wr counts)
    std::uint32_t rq_capacity;  // 0 with an SRQ
};
struct CreateQpReply {
    Handle qp;
    std::uint32_t qp_num;
    QpCap cap;               // actual
    std::uint32_t doorbell;  // the QP's bit in its context's Doorbells (shm/wqe.h)
    std::uint32_t reserved;
};

// ibv_global_route + ibv_ah_attr, fixed layout.
struct AhAttr {
    std::uint8_t dgid[16];
    std::uint32_t flow_label;
    std::uint8_t sgid_index;
    std::uint8_t hop_limit;
    std::uint8_t traffic_class;
    std::uint8_t is_global;
    std::uint16_t dlid;
    std::uint8_t sl;
    std::uint8_t src_path_bits;
    std::uint8_t static_rate;
    std::uint8_t port_num;
    std::uint8_t reserved[2];
};
static_assert(sizeof(AhAttr) == 32);

// ibv_qp_attr, fixed layout; which fields count is said by an ibv_qp_attr_mask.
struct QpAttr {
    std::uint32_t qp_state;
    std::uint32_t cur_qp_state;
    std::uint32_t path_mtu;
    std::uint32_t path_mig_state;
    std::uint32_t qkey;
    std::uint32_t rq_psn;
    std::uint32_t sq_psn;
    std::uint32_t dest_qp_num;
    std::uint32_t qp_access_flags;
    std::uint32_t rate_limit;
    QpCap cap;
    std::uint32_t iw_conn;  // iWARP: the connection rdma_cm made for the QP (kQpAttrIwConn)
    AhAttr ah_attr;
    AhAttr alt_ah_attr;
    std::uint16_t pkey_index;
    std::uint16_t alt_pkey_index;
    std::uint8_t en_sqd_async_notify;
    std::uint8_t sq_draining;
    std::uint8_t max_rd_atomic;
    std::uint8_t max_dest_rd_atomic;
    std::uint8_t min_rnr_timer;
    std::uint8_t port_num;
    std::uint8_t timeout;
    std::uint8_t retry_cnt;
    std::uint8_t rnr_retry;
    std::uint8_t alt_port_num;
    std::uint8_t alt_timeout;
    std::uint8_t reserved1;
};

// A Modify QP attribute of snic's own, beside ibv_qp_attr_mask's: on an iWARP device, the
// connection (QpAttr::iw_conn) an INIT -> RTR binds the QP to. Only libsnic's rdma_cm gives it
// (rdma_connect, rdma_accept): an iWARP QP is not moved to RTR by ibv_modify_qp alone.
inline constexpr std::uint32_t kQpAttrIwConn = 1u << 31;

struct ModifyQpReq {
    Handle qp;
    std::uint32_t mask;  // ibv_qp_attr_mask
    QpAttr attr;
};
struct ModifyQpReply {
    std::uint32_t state;  // after the change
    std::uint32_t reserved;
};
struct QueryQpReply {
    QpAttr attr;  // every field; cap is the QP's actual capacity
    std::uint32_t sq_sig_all;
    std::uint32_t qp_type;
    Handle send_cq, recv_cq, srq, pd;
};

// ---- snicctl ------------------------------------------------------------------

// Object kinds, in the order of the count arrays below.
enum class ObjKind : std::uint8_t { pd, mr, mw, channel, cq, srq, qp, count_ };
inline constexpr std::size_t kObjKinds = static_cast<std::size_t>(ObjKind::count_);
inline constexpr const char* kObjKindNames[kObjKinds] = {"pd", "mr",  "mw", "channel",
                                                         "cq", "srq", "qp"};

inline constexpr std::size_t kMaxClientsListed = 64;
struct ClientInfo {
    std::uint32_t session;  // daemon-wide session number
    std::int32_t pid;
    std::uint32_t uid;
    std::uint32_t gid;
    char device[kNameLen];  // "" until it opens one
    std::uint32_t counts[kObjKinds];
    std::uint32_t fds;           // its descriptors snicd keeps (notification sockets)
    std::uint64_t mapped_bytes;  // memory of this client snicd has mapped
};
struct ClientsReply {
    std::uint32_t nclients;  // all of them; at most kMaxClientsListed listed
    std::uint32_t listed;
    ClientInfo clients[kMaxClientsListed];
};
struct ResourcesReply {
    std::uint32_t sessions;
    std::uint32_t counts[kObjKinds];  // daemon-wide
    std::uint32_t max_per_client[kObjKinds];
    std::uint32_t max_per_daemon[kObjKinds];
    std::uint64_t mapped_bytes;
    std::uint32_t mappings;  // live mmaps of client memory
    std::uint32_t fds;       // client fds snicd holds open
    // SIGBUS faults in client memory snicd survived (daemon/verbs/fault_guard.h): huge pages a
    // client punched out with no page left in the pool to replace them.
    std::uint32_t faults_recovered;
    // The client descriptors snicd keeps at most for one client and for one user (uid).
    std::uint32_t max_fds_per_client;
    std::uint32_t max_fds_per_uid;
};

// ---- snicctl qp: the sessions' QPs, as `rdma resource show qp` lists a kernel RNIC's ----
//
// Neither op needs a session; both are answered by the control thread, which owns the
// sessions. Root (uid 0) sees every session's QPs, any other user only those of sessions
// whose peer has its uid; a QP the asker may not see is answered like one that does not
// exist (ENOENT).

// One QP in a listing.
struct QpSummary {
    std::uint32_t qpn;
    std::uint32_t session;  // daemon-wide session number
    std::int32_t pid;       // the session's client
    std::uint32_t uid;
    std::uint32_t port_index;  // index into StatusReply::ports
    std::uint32_t qp_type;     // ibv_qp_type
    std::uint32_t state;       // ibv_qp_state; ERR once its engine failed by itself
    std::uint32_t dest_qpn;    // as set for RTR (0 before)
    std::uint8_t dgid[16];     // the peer's GID as set for RTR (zero before)
    char device[kNameLen];
};
static_assert(sizeof(QpSummary) == 48 + kNameLen && std::is_trivially_copyable_v<QpSummary>);

// A listing is paged by QP number: each reply holds at most kMaxQpsListed QPs, from
// first_qpn on, and says where the next page starts.
inline constexpr std::size_t kMaxQpsListed = 48;
struct QpsReq {
    std::uint32_t first_qpn;  // 0: from the first
    std::uint32_t reserved;
};
struct QpsReply {
    std::uint32_t nqps;      // the QPs the asker may see, in all
    std::uint32_t listed;    // in qps[], by increasing QP number
    std::uint32_t more;      // 1: QPs past the last one listed remain; ask from next_qpn
    std::uint32_t next_qpn;  // the last one listed + 1
    QpSummary qps[kMaxQpsListed];
};

// One named counter.
inline constexpr std::size_t kCounterNameLen = 32;
struct NamedValue {
    char name[kCounterNameLen];
    std::uint64_t value;
};

// What the engine running a QP (from RTR on) shows of it.
struct QpEngineInfo {
    std::uint32_t running;        // 1: an engine runs the QP and the fields below are its own
    std::uint32_t failed;         // 1: the engine is in the error state
    char transport[16];           // "roce"
    char error[32];               // why it failed ("none" while it runs)
    std::uint32_t next_psn;       // of the next new request
    std::uint32_t unacked_psn;    // the oldest request not acknowledged
    std::uint32_t expected_psn;   // the responder's next
    std::uint32_t msn;            // messages the responder completed
    std::uint32_t send_wrs_held;  // taken from the send queue, not completed
    std::uint32_t ncounters;      // in QpReply::counters
    std::uint32_t all_counters;   // the engine's, more than ncounters when some did not fit
    std::uint32_t reserved;
};
static_assert(sizeof(QpEngineInfo) == 88 && std::is_trivially_copyable_v<QpEngineInfo>);

// One QP in full.
inline constexpr std::size_t kMaxQpCounters = 64;
struct QpReq {
    std::uint32_t qpn;
    std::uint32_t reserved;
};
struct QpReply {
    QpSummary summary;
    QpAttr attr;  // as last set; qp_state is summary.state, cap the QP's actual capacity
    std::uint32_t sq_sig_all;
    std::uint32_t srqn;  // of the SRQ it takes receive WQEs from, 0 for none
    QpEngineInfo engine;
    NamedValue counters[kMaxQpCounters];  // the engine's, in its own order
};
static_assert(sizeof(QpReply) == sizeof(QpSummary) + sizeof(QpAttr) + 8 + sizeof(QpEngineInfo) +
                                     kMaxQpCounters * sizeof(NamedValue),
              "no padding");

// ---- snicctl tcp: the listeners and connections of snic's TCP on a port, as `ss -tin` shows --
//
// Needs no session. Root sees every row; any other client the listeners and connections of its
// own uid's rdma_cm ids. A port's rows are paged: from row `first`, at most
// kMaxTcpConnsListed.
inline constexpr std::size_t kMaxTcpConnsListed = 32;
inline constexpr std::uint8_t kTcpListenState = 0xff;  // state of a listener's row
struct TcpConnsReq {
    std::uint32_t port_index;  // into StatusReply::ports
    std::uint32_t first;
};
struct TcpConnInfo {
    std::uint32_t local_ip, remote_ip;  // host order
    std::uint16_t local_port, remote_port;
    std::uint8_t state;  // tcp::TcpState, or kTcpListenState
    std::uint8_t flags;  // 1 SACK, 2 timestamps, 4 in recovery
    std::uint8_t snd_wscale, rcv_wscale;
    std::uint32_t mss;
    std::uint32_t backlog, queued;  // listeners
    std::uint32_t reserved;
    std::uint64_t cwnd, ssthresh;  // bytes
    std::uint64_t srtt_ns, rttvar_ns, rto_ns;
    std::uint64_t snd_wnd, rcv_wnd, unacked;
    std::uint64_t bytes_sent, bytes_acked, bytes_received;
    std::uint64_t segments_out, segments_in;
    std::uint64_t retransmits, fast_retransmits, timeouts;
};
static_assert(sizeof(TcpConnInfo) == 32 + 16 * 8 && std::is_trivially_copyable_v<TcpConnInfo>);
struct TcpConnsReply {
    std::uint32_t total;   // rows of that port
    std::uint32_t listed;  // in conns[]
    std::uint32_t more;    // 1: ask again from `first` + listed
    std::uint32_t reserved;
    TcpConnInfo conns[kMaxTcpConnsListed];
};

// The largest message either side sends or accepts.
inline constexpr std::size_t kCtrlMaxMessage = sizeof(Msg<ClientsReply>) > sizeof(StatusReply)
                                                   ? sizeof(Msg<ClientsReply>)
                                                   : sizeof(StatusReply);
static_assert(sizeof(Msg<QpsReply>) <= kCtrlMaxMessage && sizeof(Msg<QpReply>) <= kCtrlMaxMessage,
              "the QP replies fit the message size clients already use");
static_assert(sizeof(Msg<TcpConnsReply>) <= kCtrlMaxMessage, "snicctl tcp's reply fits too");

}  // namespace snic::shm
