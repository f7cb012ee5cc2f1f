// libsnic's objects. Each starts with the libibverbs structure the application
// sees (ibv_context inside verbs_context, ibv_pd, ibv_cq_ex, ibv_qp_ex, ...),
// so that a pointer handed out converts back with a cast; behind it lives what
// libsnic needs: the daemon's handle, the shared rings and their locks.
#pragma once

#include <infiniband/verbs.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "libclient/control.h"
#include "libclient/util.h"
#include "shm/control_abi.h"
#include "shm/ring.h"
#include "shm/wqe.h"

namespace snic::client {

struct Share;  // memory.h

// One RDMA device: a port of one daemon. Lives as long as the process (a
// device list may be freed while its devices are open).
struct Device {
    ibv_device dev;
    char socket_path[108];
    std::uint32_t port_index;
    std::uint8_t mac[6];
    int index;           // ibv_get_device_index
    std::uint32_t ipv4;  // the port's address, host order (rdma_cm's routing)
    std::uint8_t prefix_length;
    std::uint32_t transport = shm::kTransportRoce;  // which of the port's devices it is

    // The port's subnet mask, host order.
    std::uint32_t netmask() const {
        return prefix_length == 0 ? 0 : ~std::uint32_t{0} << (32 - prefix_length);
    }
};

// Every snic device now (the device list refreshed: each daemon asked), for rdma_cm.
std::vector<Device*> current_devices();
// The snic devices found so far and visible now (SNIC_DEVICES), no daemon asked.
std::vector<Device*> known_devices();

// rdma_cm on an iWARP device: INIT -> RTR bound to the daemon's connection `iw_conn`.
int bind_iwarp_qp(ibv_qp* qp, std::uint32_t iw_conn);
// The QP numbered `qpn` of any context this process opened on `c`'s device (an application's
// own QP may live in a context of its own), or nullptr. Connection setup: a walk of the QPs.
ibv_qp* qp_by_num(ibv_context* c, std::uint32_t qpn);

struct Context;

struct Pd {
    ibv_pd pd;
};

struct Mr {
    ibv_mr mr;
    std::vector<std::shared_ptr<Share>> shares;  // the shared memory it holds on to
    std::uint32_t access;
    std::uint64_t iova;
};

struct Mw {
    ibv_mw mw;
};

struct Channel {
    ibv_comp_channel ch;  // ch.fd is the eventfd (owned)
    shm::Handle handle;
    Mapping map;
    std::optional<shm::RingConsumer<std::uint32_t>> ring;
    std::mutex mu;  // one consumer of the ring at a time
};

struct Cq {
    ibv_cq_ex cq;  // first: ibv_cq and ibv_cq_ex views of the same object
    Context* ctx;
    Channel* channel;
    Mapping map;
    shm::CqControl* control;
    std::optional<shm::RingConsumer<shm::Cqe>> ring;
    SpinLock lock;
    bool single_threaded;
    std::uint64_t wc_flags;
    std::uint8_t solicited_mask = 0;  // shm::kCqeSolicited once snic_cq_report_solicited
    shm::Cqe cur;                     // the entry between start_poll/next_poll and the next call
    std::uint32_t comp_events_reported;
    std::uint32_t async_events_reported;
    std::uint32_t empty_polls;  // since snicd's liveness was last looked at
    // After snicd died: the flush completions of the WRs it left outstanding (cq.cc), built
    // once its own CQEs are all polled, and how many of them were polled.
    std::vector<shm::Cqe> flushed;
    std::size_t flushed_polled = 0;
    bool flush_built = false;
};

struct Srq {
    ibv_srq srq;
    Mapping map;
    std::optional<shm::RingProducer<shm::RecvWqe>> ring;
    SpinLock lock;
    std::uint32_t max_wr;
    std::uint32_t max_sge;
    std::uint32_t srq_limit;
    std::uint32_t srq_num;
    std::uint32_t events_reported;
};

struct Qp {
    ibv_qp_ex qpx;  // qpx.qp_base is the ibv_qp
    bool has_ex;    // created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
    std::uint64_t send_ops;
    Mapping map;
    shm::QpControl* control;
    shm::Doorbells* doorbells;  // its context's
    std::uint32_t doorbell;     // its bit there
    std::optional<shm::RingProducer<shm::SendWqe>> sq;
    std::optional<shm::RingProducer<shm::RecvWqe>> rq;
    SpinLock sq_lock;
    SpinLock rq_lock;
    shm::QpCap cap;
    bool sq_sig_all;
    std::uint32_t events_reported;
    // The ibv_wr_* API: WQEs staged between wr_start and wr_complete.
    std::vector<shm::SendWqe> staged;
    std::uint32_t nstaged;
    int wr_error;
};

struct Ah {
    ibv_ah ah;
    ibv_ah_attr attr;
};

struct Context {
    verbs_context vctx;  // first: vctx.context is the ibv_context
    Device* device;
    Conn conn;
    // snicd is gone (its control connection hung up): posts fail with EIO, an empty CQ
    // poll reports an error, and ibv_get_async_event reports IBV_EVENT_DEVICE_FATAL once.
    std::atomic<bool> dead{false};
    bool fatal_reported = false;
    shm::DeviceLimits limits;
    char devname[shm::kNameLen];

    // Async events: the context's eventfd (context.async_fd) and ring, in the context memfd
    // with the doorbells of its QPs.
    Fd async_fd;
    // context.cmd_fd: open on /dev/null (ibv_open_device says why).
    Fd cmd_fd;
    Mapping async_map;
    std::optional<shm::RingConsumer<shm::AsyncEvent>> async_ring;
    shm::Doorbells* doorbells;
    std::mutex async_mu;

    // Every object of the context, for events (handle -> object) and for
    // the teardown at ibv_close_device.
    std::mutex objs_mu;
    std::unordered_map<shm::Handle, Cq*> cqs;
    std::unordered_map<shm::Handle, Qp*> qps;
    std::size_t qps_peak = 0;  // the most QPs since memory was last given back (ibv_destroy_qp)
    std::unordered_map<shm::Handle, Srq*> srqs;
    std::unordered_set<Pd*> pds;
    std::unordered_set<Mr*> mrs;
    std::unordered_set<Mw*> mws;
    std::unordered_set<Channel*> channels;
    std::unordered_set<Ah*> ahs;
};

// Every context the process has open (rdma_cm finds an application's QP among them).
struct OpenContexts {
    std::mutex mu;
    std::unordered_set<Context*> all;
};
OpenContexts& open_contexts();

inline Context* to_ctx(ibv_context* c) {
    return reinterpret_cast<Context*>(reinterpret_cast<char*>(c) -
                                      offsetof(verbs_context, context));
}
inline Device* to_dev(ibv_device* d) {
    return reinterpret_cast<Device*>(d);
}
inline Pd* to_pd(ibv_pd* p) {
    return reinterpret_cast<Pd*>(p);
}
inline Mr* to_mr(ibv_mr* m) {
    return reinterpret_cast<Mr*>(m);
}
inline Mw* to_mw(ibv_mw* m) {
    return reinterpret_cast<Mw*>(m);
}
inline Channel* to_channel(ibv_comp_channel* c) {
    return reinterpret_cast<Channel*>(c);
}
inline Cq* to_cq(ibv_cq* c) {
    return reinterpret_cast<Cq*>(c);
}
inline Cq* to_cq(ibv_cq_ex* c) {
    return reinterpret_cast<Cq*>(c);
}
inline Srq* to_srq(ibv_srq* s) {
    return reinterpret_cast<Srq*>(s);
}
inline Qp* to_qp(ibv_qp* q) {
    return reinterpret_cast<Qp*>(q);
}
inline Qp* to_qp(ibv_qp_ex* q) {
    return reinterpret_cast<Qp*>(q);
}
inline Ah* to_ah(ibv_ah* a) {
    return reinterpret_cast<Ah*>(a);
}

// Whether snicd is gone for `ctx`. Cheap when it is not: an empty poll looks at the
// control connection once every kLivenessPolls times (one poll(2), never blocking).
inline constexpr std::uint32_t kLivenessPolls = 1u << 14;
inline bool daemon_gone(Context* ctx) {
    if (ctx->dead.load(std::memory_order_relaxed)) return true;
    if (!ctx->conn.hung_up()) return false;
    ctx->dead.store(true, std::memory_order_relaxed);
    return true;
}
inline bool daemon_dead(const Context* ctx) {
    return ctx->dead.load(std::memory_order_relaxed);
}

// A memfd the daemon will map: created, sized, sealed against shrinking and
// mapped read-write here. 0 or an errno.
int make_shared_area(const char* name, std::size_t bytes, Fd* fd, Mapping* map);

// Context operations installed in ibv_context_ops / verbs_context.
namespace ops {
int query_port(ibv_context*, std::uint8_t, ibv_port_attr*, std::size_t);
int query_device_ex(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*,
                    std::size_t);
int query_device(ibv_context*, ibv_device_attr*);
ibv_cq_ex* create_cq_ex(ibv_context*, ibv_cq_init_attr_ex*);
ibv_qp* create_qp_ex(ibv_context*, ibv_qp_init_attr_ex*);
ibv_srq* create_srq_ex(ibv_context*, ibv_srq_init_attr_ex*);
int get_srq_num(ibv_srq*, std::uint32_t*);
int poll_cq(ibv_cq*, int, ibv_wc*);
int req_notify_cq(ibv_cq*, int);
int post_send(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
int post_recv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
int post_srq_recv(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
ibv_mw* alloc_mw(ibv_pd*, ibv_mw_type);
int dealloc_mw(ibv_mw*);
int bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*);
}  // namespace ops

// Teardown of what a closing context still owns (no daemon calls: closing the
// socket releases the daemon's side).
void release_mr_local(Mr* mr);
void release_cq_local(Cq* cq);
void release_qp_local(Qp* qp);
void release_srq_local(Srq* srq);
void release_channel_local(Channel* ch);

// Internal versions of exported verbs, called from inside libsnic.
ibv_qp* create_qp_common(ibv_context* c, ibv_qp_init_attr_ex* attr);
int query_port_internal(Context* ctx, std::uint8_t port, ibv_port_attr* out,
                        shm::QueryPortReply* raw);
int init_ah_from_wc_internal(ibv_context* c, std::uint8_t port, const ibv_wc* wc,
                             const ibv_grh* grh, ibv_ah_attr* ah);
ibv_ah* create_ah_internal(ibv_pd* pd, ibv_ah_attr* attr);

}  // namespace snic::client
