// One client session: what one control connection (one ibv_context) owns, and the handlers
// of its verbs operations. Each op validates everything the client sent (handles, values,
// memfds, rings) and answers 0 or the errno verbs would return; nothing a client sends can
// name another session's object. Destroying the session releases everything it owned, in
// dependency order: QPs, SRQs, CQs, channels, MWs, MRs, PDs.
//
// Objects are allocated one by one and never move while they live: the data lcores of the
// transport will read them through the key and QP number tables (daemon/verbs/resources.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/device.h"
#include "daemon/verbs/resources.h"
#include "daemon/verbs/transport.h"
#include "proto/net/addr.h"
#include "proto/verbs/qp_state.h"
#include "shm/control_abi.h"
#include "shm/ring.h"
#include "shm/wqe.h"

namespace snic::daemon {

// The peer's credentials (SO_PEERCRED).
struct Peer {
    std::int32_t pid = 0;
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
};

// A reference from one object to another it depends on (a MR to its PD, a QP to its CQs):
// counted in the target's refs while it lives, which makes destroying the target EBUSY.
template <class T>
class Ref {
  public:
    Ref() = default;
    explicit Ref(T* p) : p_(p) {
        if (p_ != nullptr) ++p_->refs;
    }
    Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Ref& operator=(Ref&& o) noexcept {
        if (this != &o) {
            if (p_ != nullptr) --p_->refs;
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    ~Ref() {
        if (p_ != nullptr) --p_->refs;
    }
    T* get() const { return p_; }
    T* operator->() const { return p_; }
    explicit operator bool() const { return p_ != nullptr; }

  private:
    T* p_ = nullptr;
};

struct Pd {
    Counted counted;
    shm::Handle handle = shm::kNoHandle;
    std::uint32_t refs = 0;  // MRs, MWs, SRQs, QPs
};

struct Mr {
    Counted counted;
    Ref<Pd> pd;
    shm::Handle handle = shm::kNoHandle;
    Mapping map;                // the page-rounded range
    std::byte* addr = nullptr;  // where the registered range starts in snicd
    std::uint64_t client_addr = 0;
    std::uint64_t iova = 0;
    std::uint64_t length = 0;
    std::uint32_t access = 0;
    NameLease key;  // lkey == rkey; withdrawn before the mapping goes
    // Owned by the lcore of the session's port (daemon/verbs/memory_keys.h), which alone binds
    // windows: how many are bound to this region, and whether dereg_mr has claimed it
    // (then no window may be bound to it any more).
    mutable std::uint32_t windows = 0;
    mutable bool deregistering = false;
};

// Where a bound memory window points (IBA 10.6.7). Owned by the lcore of the session's
// port: written by binds and invalidations on that lcore, read there on every access.
struct MwBinding {
    std::uint32_t rkey = 0;  // the window's key now: its slot's, with the key byte of the last bind
    bool valid = false;      // bound: remote access under rkey is allowed
    const Mr* mr = nullptr;  // the region it is bound to (counted in mr->windows)
    std::uint64_t va = 0;    // the first address the peer uses (0 when zero-based)
    std::uint64_t mr_addr = 0;  // where that is in the region's address space (iova)
    std::uint64_t length = 0;
    std::uint32_t access = 0;  // IBV_ACCESS_REMOTE_* granted
    std::uint32_t qpn = 0;     // type 2: the QP it was bound through, the only one it serves
};

struct Mw {
    Counted counted;
    Ref<Pd> pd;
    shm::Handle handle = shm::kNoHandle;
    std::uint32_t type = 0;
    NameLease key;  // the window's slot in the key table; withdrawn before the window goes
    mutable MwBinding bound;
};

// A session's asynchronous events (ibv_get_async_event): a ring in the client's memory and
// the notification socket that signals it. Produced on the lcore of the session's port only,
// like CQEs (the control thread posts through a task there).
struct AsyncEvents {
    KeptFd notify;
    Mapping map;
    std::optional<shm::RingProducer<shm::AsyncEvent>> ring;
    // Queues an event (ibv_event_type) about `handle` and signals the socket; false when the
    // ring is full (the event is lost) or absent.
    bool post(std::uint32_t type, std::uint32_t handle);
};

struct Channel {
    Counted counted;
    shm::Handle handle = shm::kNoHandle;
    KeptFd notify;  // the channel's notification socket
    Mapping map;
    std::optional<shm::RingProducer<std::uint32_t>> ring;  // CQ handles, snicd produces
    std::uint32_t refs = 0;                                // CQs
};

struct Cq {
    Counted counted;
    Ref<Channel> channel;
    shm::Handle handle = shm::kNoHandle;
    shm::Handle channel_handle = shm::kNoHandle;
    Mapping map;
    shm::CqControl* control = nullptr;
    std::optional<shm::RingProducer<shm::Cqe>> ring;  // snicd produces
    std::uint32_t cqe = 0;
    std::uint32_t capacity = 0;
    std::uint32_t comp_vector = 0;
    std::uint32_t refs = 0;  // QPs (send and receive counted apart)
};

struct Srq {
    Counted counted;
    Ref<Pd> pd;
    shm::Handle handle = shm::kNoHandle;
    shm::Handle pd_handle = shm::kNoHandle;
    Mapping map;
    std::optional<shm::RingConsumer<shm::RecvWqe>> ring;  // the client produces
    std::uint32_t max_wr = 0;
    std::uint32_t max_sge = 0;
    // The armed limit (ibv_modify_srq IBV_SRQ_LIMIT), 0 when not armed: written by the control
    // thread, read and disarmed by the lcore (atomic_ref on both sides).
    std::uint32_t limit = 0;
    std::uint32_t capacity = 0;
    NameLease srqn;
    std::uint32_t refs = 0;         // QPs
    AsyncEvents* events = nullptr;  // its session's

    // The lcore, after taking a WQE: when armed and fewer than `limit` WQEs are left, raises
    // IBV_EVENT_SRQ_LIMIT_REACHED once and disarms (IBA 10.2.9.5).
    void check_limit(AsyncEvents* to);
};

struct Qp {
    Counted counted;
    Ref<Pd> pd;
    Ref<Cq> send_cq;
    Ref<Cq> recv_cq;
    Ref<Srq> srq;
    shm::Handle handle = shm::kNoHandle;
    shm::Handle pd_handle = shm::kNoHandle;
    shm::Handle send_cq_handle = shm::kNoHandle;
    shm::Handle recv_cq_handle = shm::kNoHandle;
    shm::Handle srq_handle = shm::kNoHandle;
    Mapping map;
    shm::QpControl* control = nullptr;
    std::optional<shm::RingConsumer<shm::SendWqe>> sq;  // the client produces
    std::optional<shm::RingConsumer<shm::RecvWqe>> rq;  // none with an SRQ
    verbs::QpType type = verbs::QpType::rc;
    std::uint32_t sq_sig_all = 0;
    shm::QpCap cap{};
    verbs::QpState state = verbs::QpState::reset;
    shm::QpAttr attr{};  // every attribute as last set (qp_state/cur_qp_state/cap unused)
    NameLease qpn;
    Peer owner;                           // its session's client (iWARP binds check it)
    AsyncEvents* events = nullptr;        // its session's
    shm::Doorbells* doorbells = nullptr;  // its session's; the QP's bit is qpn % kDoorbellBits
    // The engine its port's transport runs, from RTR on; stopped before the QP goes.
    std::unique_ptr<QpEngine> engine;
    // The receive counters published in control->recv (daemon/verbs/completion.h), written by
    // whoever produces the QP's CQEs; these are the writer's copies, never read back from
    // shared memory.
    std::uint64_t recv_taken = 0;
    std::uint64_t recv_completed = 0;
    std::uint32_t recv_seq = 0;
    // The done indices published in control->sq_done and control->rq_done (completion.h),
    // the writer's copies likewise.
    std::uint32_t sq_done = 0;
    std::uint32_t rq_done = 0;
    // QP_LAST_WQE_REACHED was raised for the QP's present stay in ERR (a QP on an SRQ hears it
    // once per entry, whoever moved it there: Modify QP, its own failure or, on iWARP, the
    // peer's orderly close). Set on the lcore (note_last_wqe); cleared by Reset.
    std::atomic<bool> last_wqe_told{false};
};

class Session {
  public:
    Session(Resources& resources, std::span<const DevicePort> ports, Peer peer);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Takes the session apart a share at a time, so that one with thousands of objects does
    // not hold the control thread while it goes: destroys at most `budget` of its objects (QPs
    // first, the engines of those stopped in one lcore task; then SRQs, CQs, channels, MWs,
    // MRs, PDs) and returns whether any are left. The destructor takes apart what is left.
    // Control thread only.
    bool dismantle(std::size_t budget);
    static constexpr std::size_t kDismantleAll = ~std::size_t{0};

    std::uint32_t id() const { return id_; }
    const Peer& peer() const { return peer_; }
    bool opened() const { return port_ != nullptr; }
    const Counts& counts() const { return counts_; }
    std::uint64_t mapped_bytes() const { return mapped_.bytes; }
    std::uint32_t mappings() const { return mapped_.mappings; }
    // The client's descriptors it keeps: the device's notification socket and each channel's.
    std::uint32_t fds() const { return fds_; }
    // Whether `bytes` more of client memory in `mappings` more mmaps fit the quotas of
    // limits.h (this client, its uid, the daemon less root's reserve): 0, or ENOMEM with the
    // reason logged. Asked before every mmap, a region's or an object's rings.
    int check_address_space(std::uint64_t bytes, std::uint32_t mappings, const char* op) const;
    shm::ClientInfo info() const;
    // The port of the device it opened (nullptr before open_device), and which of the port's
    // devices that is.
    const DevicePort* port() const { return port_; }
    const Device* device() const { return device_; }
    // The transport that runs the session's QPs (its lane's), nullptr before open_device.
    const Transport* transport() const { return transport_; }
    // Tells the client its port's link went down or came up (IBV_EVENT_PORT_ERR, _ACTIVE, on
    // port 1), as an RNIC does; false when its event ring is full.
    bool port_event(bool up);
    const std::string& device_name() const { return device_->name; }
    // Observability (snicctl qp, telemetry): calls `fn` with each of the session's QPs. Control
    // thread only, like every op.
    void for_each_qp(const std::function<void(const Qp&)>& fn) const;

    // The ops. Each returns 0 and fills its reply, or a positive errno. `fds` are the
    // descriptors of the request in order; an op takes those it keeps, the caller closes
    // the rest. One it keeps is counted against the client's and its user's descriptor
    // quotas before anything else is done with it (EMFILE past them). Every op but
    // open_device requires an opened device (the caller checks).
    int open_device(const shm::OpenDeviceReq& req, FdList& fds, shm::OpenDeviceReply& out);
    int query_port(const shm::Empty& req, FdList& fds, shm::QueryPortReply& out);
    int alloc_pd(const shm::Empty& req, FdList& fds, shm::HandleReply& out);
    int dealloc_pd(const shm::HandleReq& req, FdList& fds, shm::Empty& out);
    int reg_mr(const shm::RegMrReq& req, FdList& fds, shm::RegMrReply& out);
    int dereg_mr(const shm::HandleReq& req, FdList& fds, shm::Empty& out);
    int alloc_mw(const shm::AllocMwReq& req, FdList& fds, shm::AllocMwReply& out);
    int dealloc_mw(const shm::HandleReq& req, FdList& fds, shm::Empty& out);
    int create_channel(const shm::Empty& req, FdList& fds, shm::HandleReply& out);
    int destroy_channel(const shm::HandleReq& req, FdList& fds, shm::Empty& out);
    int create_cq(const shm::CreateCqReq& req, FdList& fds, shm::CreateCqReply& out);
    int destroy_cq(const shm::HandleReq& req, FdList& fds, shm::Empty& out);
    int create_srq(const shm::CreateSrqReq& req, FdList& fds, shm::CreateSrqReply& out);
    int modify_srq(const shm::ModifySrqReq& req, FdList& fds, shm::ModifySrqReply& out);
    int query_srq(const shm::HandleReq& req, FdList& fds, shm::QuerySrqReply& out);
    int destroy_srq(const shm::HandleReq& req, FdList& fds, shm::Empty& out);
    int create_qp(const shm::CreateQpReq& req, FdList& fds, shm::CreateQpReply& out);
    int modify_qp(const shm::ModifyQpReq& req, FdList& fds, shm::ModifyQpReply& out);
    int query_qp(const shm::HandleReq& req, FdList& fds, shm::QueryQpReply& out);
    int destroy_qp(const shm::HandleReq& req, FdList& fds, shm::Empty& out);

    // Lookups by handle (nullptr when the handle is not this session's live object).
    const Mr* mr(shm::Handle h) const { return mrs_.find(h); }
    const Qp* qp(shm::Handle h) const { return qps_.find(h); }
    const Cq* cq(shm::Handle h) const { return cqs_.find(h); }

  private:
    // Logs why `op` was refused (debug level) and returns `err`.
    int refuse(int err, const char* op, std::string_view why) const;
    // The same for a quota of the daemon's own resources, which the operator hears of (warn).
    int refuse_quota(int err, const char* op, std::string_view why) const;
    int check_modify_values(std::uint32_t mask, const shm::QpAttr& a) const;
    int check_qp_caps(const shm::CreateQpReq& req, bool with_srq) const;
    // modify_srq with IBV_SRQ_MAX_WR: the SRQ moved to the area of fds[0]; `prod` is the new
    // ring's producer index. 0 or EINVAL, and then nothing changed.
    int resize_srq(Srq& srq, const shm::ModifySrqReq& req, FdList& fds, std::uint32_t& prod);
    // Queues an asynchronous event (ibv_event_type) about `handle` on the lcore that produces
    // the session's events; false when the client's event ring is full.
    bool post_async(std::uint32_t type, std::uint32_t handle);
    // What entering `next` from `cur` does to the QP's queues and which events it raises.
    void enter_state(Qp& qp, verbs::QpState cur, verbs::QpState next);
    // Runs `fn` where the QP's CQEs are produced: on the port's lcore when the port has a
    // transport, else here.
    void on_lcore(const std::function<void()>& fn);
    // Stops the QP's engine, if it has one.
    void stop_engine(Qp& qp);
    // A QP whose engine failed by itself is in ERR from then on (IBA 10.3.1).
    static void sync_state(Qp& qp);

    Resources& r_;
    const std::span<const DevicePort> ports_;
    const Peer peer_;
    const std::uint32_t id_;
    // Declared before the tables: the objects update them as they go.
    Counts counts_{};
    MappedTotals mapped_;  // kept by the session's Mappings
    std::uint32_t fds_ = 0;
    bool keys_withdrawn_ = false;  // by dismantle, once no QP is left

    const DevicePort* port_ = nullptr;  // set by open_device
    const Device* device_ = nullptr;    // one of port_'s
    Transport* transport_ = nullptr;    // device_'s, of the session's lane
    std::size_t lane_ = 0;              // of device_'s port (Device::join)
    AsyncEvents events_;
    shm::Doorbells* doorbells_ = nullptr;  // in events_.map, set by open_device

    HandleTable<Pd> pds_;
    HandleTable<Mr> mrs_;
    HandleTable<Mw> mws_;
    HandleTable<Channel> channels_;
    HandleTable<Cq> cqs_;
    HandleTable<Srq> srqs_;
    HandleTable<Qp> qps_;
};

}  // namespace snic::daemon
