// libdaplsnic: a uDAPL (DAT 2.0) provider over libsnic's verbs and rdma_cm.
// The objects a DAT handle points at, and what the provider's files share.
//
// Every handle is a pointer to an Object whose first member is the DAT_PROVIDER
// libdat2 dispatches through. Freed objects keep that pointer and are marked dead;
// they stay in a bounded quarantine so that a stale handle is answered with
// DAT_INVALID_HANDLE instead of reaching freed memory.
#pragma once

#include <netinet/in.h>

// udat.h first: the registry and extension headers build on it.
#include <dat2/udat.h>

#include <dat2/dat_ib_extensions.h>
#include <dat2/dat_registry.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dapl/table.h"

namespace snic::dapl {

struct Ia;
struct Ep;
struct Evd;
struct Srq;
struct Cno;

// IB CM REQ private data (92 bytes) less rdma_cm's 36-byte header: the most a
// consumer may pass to dat_ep_connect, dat_cr_accept or dat_cr_reject.
inline constexpr DAT_COUNT kMaxPrivateData = 56;
inline constexpr std::size_t kPeerPrivateData = 196;  // the most a REP carries
inline constexpr int kSpecificAttrs = 6;

enum class Kind : std::uint32_t {
    ia = 0x51a00001,
    pz,
    lmr,
    rmr,
    evd,
    cno,
    ep,
    srq,
    psp,
    rsp,
    cr,
    dead = 0xdeadd0a7,
};

// No virtual functions: the DAT_PROVIDER pointer must be the object's first word.
struct Object {
    DAT_PROVIDER* provider;  // first: libdat2's DAT_HANDLE_TO_PROVIDER reads it
    std::atomic<Kind> kind;
    DAT_HANDLE_TYPE type;
    Ia* ia = nullptr;
    DAT_CONTEXT context{};
    void (*destroy)(Object*) = nullptr;  // deletes the object as what it is

    Object(DAT_PROVIDER* p, Kind k, DAT_HANDLE_TYPE t, Ia* i)
        : provider(p), kind(k), type(t), ia(i) {}
    bool live(Kind k) const { return kind.load(std::memory_order_acquire) == k; }
};

// Object plus the deleter for type T.
template <class T>
struct Typed : Object {
    Typed(DAT_PROVIDER* p, Kind k, DAT_HANDLE_TYPE t, Ia* i) : Object(p, k, t, i) {
        destroy = [](Object* o) { delete static_cast<T*>(o); };
    }
};

// The handle as an object of kind K, or nullptr when it is not one (null, dead or of
// another kind).
template <class T>
T* as(DAT_HANDLE h) {
    auto* o = static_cast<Object*>(h);
    if (o == nullptr || !o->live(T::kKind)) return nullptr;
    return static_cast<T*>(o);
}

// Marks an object dead and hands it to the quarantine (which deletes the oldest
// dead objects beyond its bound).
void retire(Object* o);

struct Pz final : Typed<Pz> {
    static constexpr Kind kKind = Kind::pz;
    ibv_pd* pd = nullptr;
    std::atomic<int> users{0};  // LMRs, RMRs, EPs and SRQs made in it
    Pz(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_PZ, i) {}
};

struct Lmr final : Typed<Lmr> {
    static constexpr Kind kKind = Kind::lmr;
    Pz* pz = nullptr;
    ibv_mr* mr = nullptr;
    DAT_MEM_TYPE mem_type = DAT_MEM_TYPE_VIRTUAL;
    DAT_REGION_DESCRIPTION region{};
    DAT_MEM_PRIV_FLAGS priv = DAT_MEM_PRIV_NONE_FLAG;
    DAT_VADDR addr = 0;
    DAT_VLEN length = 0;
    std::atomic<int> users{0};  // RMRs bound to it
    Lmr(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_LMR, i) {}
};

struct Rmr final : Typed<Rmr> {
    static constexpr Kind kKind = Kind::rmr;
    Pz* pz = nullptr;
    ibv_mw* mw = nullptr;
    std::uint32_t rkey = 0;  // the RMR context now (a type 2 window's changes at each bind)
    Lmr* lmr = nullptr;      // bound to, or nullptr
    DAT_LMR_TRIPLET triplet{};
    DAT_MEM_PRIV_FLAGS priv = DAT_MEM_PRIV_NONE_FLAG;
    Rmr(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_RMR, i) {}
};

// One posted work request: what its completion reports. wr_id is the slot's address.
struct Slot {
    Ep* ep = nullptr;
    DAT_DTO_COOKIE cookie{};
    DAT_RMR_COOKIE rmr_cookie{};
    Rmr* rmr = nullptr;  // a bind's window
    Srq* srq = nullptr;  // an SRQ slot's SRQ
    std::uint32_t length = 0;
    int op = 0;  // DAT_DTOS or DAT_IB_DTOS; -1 for a bind
    bool in_srq = false;
    bool solicited_wait = false;  // a receive posted with DAT_COMPLETION_SOLICITED_WAIT_FLAG
    std::uint32_t seq = 0;        // a ring slot's place in post order
};

// Slots handed out in post order and retired in completion order: a send queue's
// completion retires every earlier (unsignalled) request too, as verbs has it.
class SlotRing {
  public:
    void init(Ep* ep, std::uint32_t n);
    Slot* take();   // nullptr when full
    void untake();  // the last slot taken was not posted after all
    void retire_through(const Slot* s);
    std::uint32_t in_use() const {
        return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
    }

  private:
    std::vector<Slot> slots_;
    std::atomic<std::uint32_t> head_{0}, tail_{0};
};

struct Cno final : Typed<Cno> {
    static constexpr Kind kKind = Kind::cno;
    DAT_OS_WAIT_PROXY_AGENT agent{};
    std::mutex mu;
    std::vector<Evd*> evds;
    int wake_fd = -1;  // eventfd: dat_cno_trigger and software events
    Cno(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_CNO, i) {}
    ~Cno();
};

// An event made and not yet taken by the consumer. A receive's buffer counts as reaped (for
// dat_srq_resize, dat_srq_query and dat_ep_get_status) when the consumer takes its event, so
// the event names what it credits then.
struct Queued {
    DAT_EVENT event;
    Ep* ep = nullptr;         // a receive's EP (nullptr once the EP is freed)
    Srq* srq = nullptr;       // an SRQ receive's SRQ (likewise)
    std::uint32_t epoch = 0;  // the EP's Ep::epoch when the completion was reaped
};

struct Evd final : Typed<Evd> {
    static constexpr Kind kKind = Kind::evd;
    DAT_EVD_FLAGS flags{};
    DAT_COUNT qlen = 0;
    bool enabled = true;
    bool waitable = true;
    Cno* cno = nullptr;
    std::mutex mu;
    std::deque<Queued> events;  // made, not yet taken
    // Events at the back of `events` that wake no waiter: successful unsolicited completions
    // of receives that asked for a solicited wait. The events before the last one that wakes
    // count toward a wait's threshold; these count once a waking event follows them.
    std::size_t quiet = 0;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* cq = nullptr;  // DTO and bind completions
    bool armed = false;
    bool overflowed = false;    // the async EVD was told; cleared when an event fits again
    int wake_fd = -1;           // eventfd: an event was queued by another thread
    std::atomic<int> users{0};  // EPs and SPs that deliver here
    Evd(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_EVD, i) {}
    ~Evd();

    void post(const DAT_EVENT& e);    // from any thread
    bool reap(int max);               // completions into `events`; mu held
    DAT_RETURN take(DAT_EVENT* out);  // mu held
    // `ep`'s QP is destroyed: its completions still in the CQ are reaped, and what its
    // events credit is credited now (they outlive the EP).
    void forget(Ep* ep);
    std::size_t waking() const { return events.size() - quiet; }  // mu held
};

struct Srq final : Typed<Srq> {
    static constexpr Kind kKind = Kind::srq;
    Pz* pz = nullptr;
    ibv_srq* srq = nullptr;
    std::mutex mu;
    DAT_COUNT max_recv_dtos = 0;
    DAT_COUNT max_recv_iov = 0;
    DAT_COUNT low_watermark = 0;
    std::vector<std::unique_ptr<Slot[]>> chunks;  // slots never move: wr_ids point at them
    std::vector<Slot*> free;                      // capacity reserved: posting allocates nothing
    std::uint64_t posted = 0;
    std::atomic<std::uint64_t> reaped{0};
    DAT_COUNT total_slots = 0;
    std::uint64_t taken_before = 0;  // taken by QPs since reset or destroyed
    std::vector<Ep*> eps;
    Srq(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_SRQ, i) {}
};

struct Ep final : Typed<Ep> {
    static constexpr Kind kKind = Kind::ep;
    std::mutex mu;  // state and connection
    DAT_EP_STATE state = DAT_EP_STATE_UNCONNECTED;
    Pz* pz = nullptr;
    Evd* recv_evd = nullptr;
    Evd* request_evd = nullptr;
    Evd* connect_evd = nullptr;
    Srq* srq = nullptr;
    DAT_EP_ATTR attr{};
    ibv_qp* qp = nullptr;
    ibv_cq* own_send_cq = nullptr;  // when no request EVD is given
    ibv_cq* own_recv_cq = nullptr;  // when no receive EVD is given
    rdma_cm_id* cm = nullptr;
    bool from_rsp = false;
    std::mutex post_mu;
    SlotRing sq, rq;
    // Receives posted and reaped by the consumer since the QP was made or last went through
    // RESET, the points at which snicd's receive counters start again from 0; `epoch` counts
    // those resets, so that an event reaped before one is not credited after it.
    std::atomic<std::uint64_t> recv_posted{0};
    std::atomic<std::uint64_t> recv_reaped{0};
    std::atomic<std::uint32_t> epoch{0};
    sockaddr_in remote{};
    DAT_CONN_QUAL remote_qual = 0;
    DAT_CONN_QUAL local_qual = 0;
    std::uint8_t connect_data[kMaxPrivateData]{};
    DAT_COUNT connect_data_len = 0;
    std::uint8_t peer_data[kPeerPrivateData]{};
    DAT_COUNT peer_data_len = 0;
    bool established_posted = false;
    bool disconnect_posted = false;
    Ep(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_EP, i) {}
};

struct Sp final : Typed<Sp> {  // a PSP or an RSP
    static constexpr Kind kKind = Kind::psp;
    Evd* evd = nullptr;
    DAT_CONN_QUAL qual = 0;
    DAT_PSP_FLAGS flags = DAT_PSP_CONSUMER_FLAG;
    Ep* ep = nullptr;  // an RSP's
    rdma_cm_id* listen = nullptr;
    Sp(DAT_PROVIDER* p, Ia* i, Kind k)
        : Typed(p, k, k == Kind::rsp ? DAT_HANDLE_TYPE_RSP : DAT_HANDLE_TYPE_PSP, i) {}
};

template <>
inline Sp* as<Sp>(DAT_HANDLE h) {
    auto* o = static_cast<Object*>(h);
    if (o == nullptr) return nullptr;
    const Kind k = o->kind.load(std::memory_order_acquire);
    return k == Kind::psp || k == Kind::rsp ? static_cast<Sp*>(o) : nullptr;
}

struct Cr final : Typed<Cr> {
    static constexpr Kind kKind = Kind::cr;
    Sp* sp = nullptr;
    rdma_cm_id* id = nullptr;
    sockaddr_in remote{};
    DAT_CONN_QUAL remote_qual = 0;
    std::uint8_t data[kMaxPrivateData]{};
    DAT_COUNT data_len = 0;
    std::uint8_t peer_read_out = 0;  // RDMA Reads the requester may have outstanding to us
    std::uint8_t peer_read_in = 0;   // RDMA Reads the requester takes from us
    Ep* ep = nullptr;                // made by the provider for a PSP that asks for one
    Cr(DAT_PROVIDER* p, Ia* i) : Typed(p, kKind, DAT_HANDLE_TYPE_CR, i) {}
};

struct Ia final : Typed<Ia> {
    static constexpr Kind kKind = Kind::ia;
    std::string device;
    ibv_context* ctx = nullptr;
    ibv_device_attr dev_attr{};
    ibv_port_attr port_attr{};
    sockaddr_in addr{};
    Evd* async_evd = nullptr;
    bool own_async_evd = false;
    std::recursive_mutex mu;  // the connection objects below
    rdma_event_channel* channel = nullptr;
    int wake_fd = -1;  // eventfd: ids to destroy, or stop
    std::atomic<bool> stopping{false};
    std::vector<rdma_cm_id*> retired_ids;  // destroyed by the event thread, between events
    std::thread events_thread;
    std::list<Sp*> sps;
    std::list<Cr*> crs;
    // lmr_context (lkey) -> LMR, for the checks every post makes.
    KeyTable<Lmr> lmrs;
    // qp_num -> EP, for completions from an SRQ (whose wr_id names no EP).
    KeyTable<Ep> eps_by_qpn;
    std::atomic<int> objects{0};
    Pz* provider_pz = nullptr;  // the PZ of EPs the provider creates, until modified
    char mtu_text[16]{};
    DAT_NAMED_ATTR specific[kSpecificAttrs]{};  // the provider-specific attributes
    Ia(DAT_PROVIDER* p) : Typed(p, kKind, DAT_HANDLE_TYPE_IA, this) {}
};

// ---- shared helpers ----
DAT_RETURN err(DAT_RETURN type, DAT_RETURN sub = 0);
DAT_RETURN from_errno(int e);
Lmr* find_lmr(Ia* ia, DAT_LMR_CONTEXT ctx);
// Checks a local IOV for a post: every segment inside an LMR of `pz`, with `need`.
DAT_RETURN check_iov(Ia* ia, Pz* pz, DAT_COUNT n, const DAT_LMR_TRIPLET* iov, bool need_write,
                     ibv_sge* sge);
void flush_ep(Ep* ep);  // QP to the error state
int qp_to_init(Ep* ep);
int reset_qp(Ep* ep);  // QP through RESET to INIT, the EP's receive counts from 0; ep->mu held
Ep* ep_by_qpn(Ia* ia, std::uint32_t qpn);
DAT_RETURN ep_create_common(DAT_IA_HANDLE ia, DAT_PZ_HANDLE pz, DAT_EVD_HANDLE recv,
                            DAT_EVD_HANDLE request, DAT_EVD_HANDLE connect, DAT_SRQ_HANDLE srq,
                            const DAT_EP_ATTR* attr, DAT_EP_HANDLE* out);
DAT_RETURN ep_free_handle(DAT_EP_HANDLE ep);

// ---- the DAT entry points, one per file group ----
extern "C" {
// provider.cc
DAT_RETURN snic_ia_open(const DAT_NAME_PTR, DAT_COUNT, DAT_EVD_HANDLE*, DAT_IA_HANDLE*);
DAT_RETURN snic_ia_query(DAT_IA_HANDLE, DAT_EVD_HANDLE*, DAT_IA_ATTR_MASK, DAT_IA_ATTR*,
                         DAT_PROVIDER_ATTR_MASK, DAT_PROVIDER_ATTR*);
DAT_RETURN snic_ia_close(DAT_IA_HANDLE, DAT_CLOSE_FLAGS);
}
// evd.cc
DAT_RETURN evd_create(DAT_IA_HANDLE, DAT_COUNT, DAT_CNO_HANDLE, DAT_EVD_FLAGS, DAT_EVD_HANDLE*);
DAT_RETURN evd_free(DAT_EVD_HANDLE);

void fill_provider_evd(DAT_PROVIDER& p);
void fill_provider_ep(DAT_PROVIDER& p);
void fill_provider_connect(DAT_PROVIDER& p);
void fill_provider_srq(DAT_PROVIDER& p);
DAT_RETURN ep_extension(Ep* ep, DAT_EXTENDED_OP op, va_list args);
DAT_RETURN ep_extension_entry(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args);
void stop_events(Ia* ia);
void post_low_watermark(Srq* srq);
std::uint64_t srq_taken(Srq* srq);  // srq->mu held
void srq_keep_taken(Ep* ep, bool detach = false);
// Hands an id to the IA's event thread to destroy (ia->mu held): rdma_cm events already
// taken from the channel may name it until that thread is done with them.
void retire_id(Ia* ia, rdma_cm_id* id);
DAT_RETURN start_events(Ia* ia);

}  // namespace snic::dapl
