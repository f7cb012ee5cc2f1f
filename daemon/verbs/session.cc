#include "daemon/verbs/session.h"

#include "daemon/verbs/completion.h"
#include "daemon/verbs/memory_keys.h"
#include "daemon/verbs/qp_glue.h"

#include <infiniband/verbs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

namespace snic::daemon {

namespace {

using shm::ObjKind;
using verbs::QpState;
namespace qa = verbs::qp_attr;

constexpr std::uint64_t kPage = shm::kPageSize;
constexpr std::uint64_t kMaxPageSize = std::uint64_t{1} << 30;  // the largest huge page

// ibv_access_flags a memory registration may carry. On-demand paging is refused: snicd maps
// registered memory once, at registration.
constexpr std::uint32_t kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                    IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                    IBV_ACCESS_HUGETLB | IBV_ACCESS_OPTIONAL_RANGE;
// ibv_access_flags of a QP (qp_access_flags): the remote rights it grants. LOCAL_WRITE and
// MW_BIND mean nothing for a QP, but passing LOCAL_WRITE there is a common idiom of verbs
// programs and providers accept it, so both are accepted and kept.
constexpr std::uint32_t kQpAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE |
                                    IBV_ACCESS_MW_BIND;
constexpr std::uint32_t kPsnMask = 0xffffff;

std::string hex(std::uint64_t v) {
    return fmt::format("{:#x}", v);
}

// Attaches to the ring the client formatted at [begin, end) of `map`, which must have
// `capacity` entries: the ring, or EINVAL and why (`what` names the ring).
template <class Ring>
Result<Ring> attach_ring(const Mapping& map, std::size_t begin, std::size_t end,
                         std::uint32_t capacity, std::string_view what) {
    auto ring = Ring::attach(map.span(begin, end - begin));
    if (!ring)
        return make_error(EINVAL, fmt::format("{}: {}", what, shm::ring_strerror(ring.error())));
    if (ring->capacity() != capacity)
        return make_error(
            EINVAL, fmt::format("{} of {} entries, {} expected", what, ring->capacity(), capacity));
    return *ring;
}

template <class T>
T* at(const Mapping& m, std::size_t offset) {
    // The client's memory holds this trivially copyable, implicit-lifetime structure.
    return std::launder(reinterpret_cast<T*>(m.data() + offset));
}

void store_qp_state(shm::QpControl* c, QpState s) {
    std::atomic_ref<std::uint32_t>(c->state).store(static_cast<std::uint32_t>(s),
                                                   std::memory_order_release);
}

// ib_get_eth_speed's mapping of an Ethernet speed to an IB speed and width.
std::pair<std::uint32_t, std::uint32_t> ib_speed_width(std::uint32_t mbps) {
    constexpr std::uint32_t kSdr = 1, kDdr = 2, kFdr10 = 8, kEdr = 32;
    constexpr std::uint32_t k1x = 1, k4x = 2;
    if (mbps <= 1000) return {kSdr, k1x};
    if (mbps <= 10000) return {kFdr10, k1x};
    if (mbps <= 20000) return {kDdr, k4x};
    if (mbps <= 25000) return {kEdr, k1x};
    if (mbps <= 40000) return {kFdr10, k4x};
    return {kEdr, k4x};
}

}  // namespace

std::uint64_t node_guid_from_mac(const net::MacAddr& mac) {
    const std::array<std::uint8_t, 8> eui{static_cast<std::uint8_t>(mac.bytes[0] ^ 2),
                                          mac.bytes[1],
                                          mac.bytes[2],
                                          0xff,
                                          0xfe,
                                          mac.bytes[3],
                                          mac.bytes[4],
                                          mac.bytes[5]};
    std::uint64_t guid;
    std::memcpy(&guid, eui.data(), sizeof guid);
    return guid;
}

Session::Session(Resources& resources, std::span<const DevicePort> ports, Peer peer)
    : r_(resources), ports_(ports), peer_(peer), id_(resources.add_session(this)) {}

Session::~Session() {
    // The engines stop first; then each kind goes before what it references, and client
    // memory is unmapped only once no lcore can be using it.
    qps_.for_each([this](Qp& qp) { stop_engine(qp); });
    qps_.clear();
    mrs_.for_each([](Mr& mr) { mr.key = NameLease{}; });
    mws_.for_each([](Mw& mw) { mw.key = NameLease{}; });
    r_.quiesce();
    srqs_.clear();
    cqs_.clear();
    channels_.clear();
    mws_.clear();
    mrs_.clear();
    pds_.clear();
    events_ = AsyncEvents{};
    r_.remove_session(this);
}

int Session::refuse(int err, const char* op, std::string_view why) const {
    spdlog::debug("control: session {} (pid {}): {} refused ({}): {}", id_, peer_.pid, op,
                  std::strerror(err), why);
    return err;
}

int Session::refuse_quota(int err, const char* op, std::string_view why) const {
    spdlog::warn("control: session {} (pid {} uid {}): {} refused ({}): {}", id_, peer_.pid,
                 peer_.uid, op, std::strerror(err), why);
    return err;
}

shm::ClientInfo Session::info() const {
    shm::ClientInfo c{};
    c.session = id_;
    c.pid = peer_.pid;
    c.uid = peer_.uid;
    c.gid = peer_.gid;
    if (port_ != nullptr) std::snprintf(c.device, sizeof c.device, "%s", device_name().c_str());
    std::copy(counts_.begin(), counts_.end(), c.counts);
    c.fds = fds_;
    c.mapped_bytes = mapped_bytes_;
    return c;
}

// ---- device -------------------------------------------------------------------

int Session::open_device(const shm::OpenDeviceReq& req, FdList& fds, shm::OpenDeviceReply& out) {
    constexpr const char* op = "open_device";
    if (opened()) return refuse(EINVAL, op, "the session has a device open already");
    if (req.port_index >= ports_.size())
        return refuse(EINVAL, op,
                      fmt::format("no port {} ({} configured)", req.port_index, ports_.size()));
    if (req.transport >= shm::kTransports)
        return refuse(EINVAL, op, fmt::format("transport {} (0 RoCEv2, 1 iWARP)", req.transport));
    const Device* device = ports_[req.port_index].device(req.transport);
    if (device == nullptr)
        return refuse(
            ENODEV, op,
            fmt::format("port {} has no device of transport {}", req.port_index, req.transport));
    if (fds.size() != 2)
        return refuse(EINVAL, op, "takes 2 fds: async notification socket, async memfd");
    if (!is_notify_socket(fds.get(0)))
        return refuse(EINVAL, op, "first fd is not a notification socket (AF_UNIX SOCK_STREAM)");
    auto notify = r_.keep_fd(fds.take(0), peer_.uid, fds_);
    if (!notify) return refuse_quota(notify.error().code, op, notify.error().message);

    const shm::ContextLayout layout = shm::context_layout(shm::kAsyncCapacity);
    auto map = map_object(fds.get(1), layout.bytes, &mapped_bytes_);
    if (!map) return refuse(map.error().code, op, "context memfd: " + map.error().message);
    shm::Doorbells* doorbells = doorbells_in(*map, layout);
    if (doorbells == nullptr) return refuse(EINVAL, op, "context memfd: no room for doorbells");
    auto ring = attach_ring<shm::RingProducer<shm::AsyncEvent>>(
        *map, layout.events, layout.doorbells, shm::kAsyncCapacity, "async ring");
    if (!ring) return refuse(ring.error().code, op, ring.error().message);

    const DevicePort& port = ports_[req.port_index];
    events_.map = std::move(*map);
    events_.ring = *ring;
    events_.notify = std::move(*notify);
    doorbells_ = doorbells;
    port_ = &port;
    device_ = device;
    transport_ = device->transport;

    out = {};
    out.limits = device_limits(r_.limits(), node_guid_from_mac(port.mac));
    std::snprintf(out.device, sizeof out.device, "%s", device_name().c_str());
    spdlog::debug("control: session {} (pid {}) opened {}", id_, peer_.pid, device_name());
    return 0;
}

int Session::query_port(const shm::Empty&, FdList&, shm::QueryPortReply& out) {
    const LinkInfo link = port_->link ? port_->link() : LinkInfo{};
    const auto [speed, width] = ib_speed_width(link.speed_mbps);
    out = {};
    out.state = link.up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    out.max_mtu = IBV_MTU_4096;
    out.active_mtu = device_->rules->active_mtu(port_->mtu);
    out.eth_mtu = port_->mtu;
    out.gid_tbl_len = 1;
    out.pkey_tbl_len = r_.limits().max_pkeys;
    out.max_msg_sz = r_.limits().max_msg_sz;
    out.active_speed = speed;
    out.active_width = width;
    out.ipv4 = port_->ip.addr.value;
    std::memcpy(out.mac, port_->mac.bytes.data(), sizeof out.mac);
    return 0;
}

// ---- protection domains ---------------------------------------------------------

int Session::alloc_pd(const shm::Empty&, FdList&, shm::HandleReply& out) {
    if (!r_.reserve(ObjKind::pd, counts_)) return refuse(ENOMEM, "alloc_pd", "PD limit reached");
    auto pd = std::make_unique<Pd>();
    pd->counted = Counted(r_, ObjKind::pd, counts_);
    const shm::Handle h = pds_.insert(std::move(pd));
    if (h == shm::kNoHandle) return refuse(ENOMEM, "alloc_pd", "handle table full");
    out = {h, 0};
    return 0;
}

int Session::dealloc_pd(const shm::HandleReq& req, FdList&, shm::Empty&) {
    const Pd* pd = pds_.find(req.handle);
    if (pd == nullptr) return refuse(EINVAL, "dealloc_pd", "no such PD " + hex(req.handle));
    if (pd->refs != 0)
        return refuse(EBUSY, "dealloc_pd", fmt::format("PD still used by {} object(s)", pd->refs));
    pds_.take(req.handle);
    return 0;
}

// ---- memory regions and windows ----------------------------------------------------

int Session::check_address_space(std::uint64_t bytes, std::uint32_t mappings,
                                 const char* op) const {
    const Limits& l = r_.limits();
    std::uint64_t of_uid = 0;
    for (const Session* s : r_.sessions())
        if (s->peer().uid == peer_.uid) of_uid += s->mapped_bytes();
    const ClientMemoryStats all = client_memory_stats();
    auto tib = [](std::uint64_t b) {
        return static_cast<double>(b) / double(std::uint64_t{1} << 40);
    };
    if (mapped_bytes_ + bytes > l.max_mapped_per_client)
        return refuse(ENOMEM, op,
                      fmt::format("this client has {:.2f} TiB mapped: {:.2f} more would pass its "
                                  "quota of {:.0f} TiB",
                                  tib(mapped_bytes_), tib(bytes), tib(l.max_mapped_per_client)));
    if (of_uid + bytes > l.max_mapped_per_uid)
        return refuse(ENOMEM, op,
                      fmt::format("uid {} has {:.2f} TiB mapped: {:.2f} more would pass its quota "
                                  "of {:.0f} TiB",
                                  peer_.uid, tib(of_uid), tib(bytes), tib(l.max_mapped_per_uid)));
    if (all.mapped_bytes + bytes > l.max_mapped_per_daemon ||
        all.mappings + mappings > l.max_mappings_per_daemon)
        return refuse(ENOMEM, op,
                      fmt::format("snicd maps {:.2f} TiB of client memory in {} mappings: no room "
                                  "for {:.2f} TiB in {} more ({:.0f} TiB, {} mappings at most)",
                                  tib(all.mapped_bytes), all.mappings, tib(bytes), mappings,
                                  tib(l.max_mapped_per_daemon), l.max_mappings_per_daemon));
    return 0;
}

int Session::reg_mr(const shm::RegMrReq& req, FdList& fds, shm::RegMrReply& out) {
    constexpr const char* op = "reg_mr";
    Pd* pd = pds_.find(req.pd);
    if (pd == nullptr) return refuse(EINVAL, op, "no such PD " + hex(req.pd));
    const std::uint32_t access = req.access;
    if ((access & IBV_ACCESS_ON_DEMAND) != 0)
        return refuse(EINVAL, op, "on-demand paging (IBV_ACCESS_ON_DEMAND) is not supported");
    if ((access & ~kMrAccess) != 0)
        return refuse(EINVAL, op, "unknown access flags " + hex(access));
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
        (access & IBV_ACCESS_LOCAL_WRITE) == 0)
        return refuse(EINVAL, op, "remote write or atomic access needs local write");
    if (req.length == 0 || req.length > r_.limits().max_mr_size)
        return refuse(EINVAL, op,
                      fmt::format("length {} not in 1..{}", req.length, r_.limits().max_mr_size));
    if (req.addr > UINT64_MAX - kMaxPageSize - req.length)
        return refuse(EINVAL, op, "address range wraps");
    if (req.iova > UINT64_MAX - req.length) return refuse(EINVAL, op, "iova range wraps");
    if (req.nsegs == 0 || req.nsegs > shm::kMaxMrSegments)
        return refuse(EINVAL, op,
                      fmt::format("{} segments, 1..{} allowed", req.nsegs, shm::kMaxMrSegments));
    std::size_t memfds = 0;
    for (std::uint32_t i = 0; i < req.nsegs; ++i)
        if (req.segs[i].backing == shm::MrBacking::memfd) ++memfds;
    if (fds.size() != memfds)
        return refuse(EINVAL, op, fmt::format("{} fds for {} memfd segments", fds.size(), memfds));

    // The segments must tile the pages of [addr, addr + length) in order; the first and the
    // last may reach past them to the boundaries of a huge page.
    const std::uint64_t first = req.addr & ~(kPage - 1);
    const std::uint64_t end = shm::round_up(req.addr + req.length, kPage);
    const std::uint64_t start = req.segs[0].addr;
    if (start > first || first - start >= kMaxPageSize)
        return refuse(EINVAL, op,
                      fmt::format("segment 0 starts at {:#x}, the range at {:#x}", start, first));
    std::uint64_t next = start;
    for (std::uint32_t i = 0; i < req.nsegs; ++i) {
        const shm::MrSegment& s = req.segs[i];
        if (s.addr != next || s.length == 0 || s.length % kPage != 0 || s.offset % kPage != 0 ||
            s.length > end + kMaxPageSize - next || s.offset > UINT64_MAX - s.length)
            return refuse(EINVAL, op,
                          fmt::format("segment {} (addr {:#x} length {:#x} offset {:#x}) does not "
                                      "continue the page range at {:#x}",
                                      i, s.addr, s.length, s.offset, next));
        next += s.length;
    }
    if (next < end || next - end >= kMaxPageSize)
        return refuse(EINVAL, op,
                      fmt::format("segments end at {:#x}, the range at {:#x}", next, end));

    if (const int err = check_address_space(next - start, req.nsegs, op); err != 0) return err;
    if (!r_.reserve(ObjKind::mr, counts_)) return refuse(ENOMEM, op, "MR limit reached");
    auto mr = std::make_unique<Mr>();
    mr->counted = Counted(r_, ObjKind::mr, counts_);

    std::array<int, shm::kMaxMrSegments> fdv{};
    for (std::size_t i = 0; i < memfds; ++i) fdv[i] = fds.get(i);
    const MemoryOwner owner{peer_.pid, peer_.uid, peer_.gid};
    auto map = map_region(std::span(req.segs, req.nsegs), std::span(fdv.data(), memfds),
                          (access & IBV_ACCESS_LOCAL_WRITE) != 0, owner, &mapped_bytes_);
    if (!map) return refuse(map.error().code, op, map.error().message);

    mr->pd = Ref<Pd>(pd);
    mr->map = std::move(*map);
    mr->addr = mr->map.data() + (req.addr - start);
    mr->client_addr = req.addr;
    mr->iova = req.iova;
    mr->length = req.length;
    mr->access = access;
    const std::uint32_t key = r_.keys().acquire(mr.get(), NameTable::kMr);
    if (key == 0) return refuse(ENOMEM, op, "key space full");
    mr->key = NameLease(r_.keys(), key);

    const shm::Handle h = mrs_.insert(std::move(mr));
    if (h == shm::kNoHandle) return refuse(ENOMEM, op, "handle table full");
    out = {h, key, key, 0};
    return 0;
}

int Session::dereg_mr(const shm::HandleReq& req, FdList&, shm::Empty&) {
    Mr* mr = mrs_.find(req.handle);
    if (mr == nullptr) return refuse(EINVAL, "dereg_mr", "no such MR " + hex(req.handle));
    // A region with windows bound to it stays (IBA 10.6.7.1, verbs' EBUSY). Asked where
    // windows are bound, so that no bind can slip in between the check and the withdrawal.
    bool busy = false;
    on_lcore([&] {
        busy = mr->windows != 0;
        if (!busy) mr->deregistering = true;
    });
    if (busy)
        return refuse(
            EBUSY, "dereg_mr",
            fmt::format("MR {} has {} memory window(s) bound", hex(req.handle), mr->windows));
    std::unique_ptr<Mr> gone = mrs_.take(req.handle);
    gone->key = NameLease{};  // withdrawn: lookups miss it from now on
    r_.quiesce();             // and no lcore still holds what it found before
    return 0;
}

int Session::alloc_mw(const shm::AllocMwReq& req, FdList&, shm::AllocMwReply& out) {
    constexpr const char* op = "alloc_mw";
    Pd* pd = pds_.find(req.pd);
    if (pd == nullptr) return refuse(EINVAL, op, "no such PD " + hex(req.pd));
    if (req.type != IBV_MW_TYPE_1 && req.type != IBV_MW_TYPE_2)
        return refuse(EINVAL, op, fmt::format("window type {} (1 or 2)", req.type));
    if (!r_.reserve(ObjKind::mw, counts_)) return refuse(ENOMEM, op, "MW limit reached");
    auto mw = std::make_unique<Mw>();
    mw->counted = Counted(r_, ObjKind::mw, counts_);
    mw->pd = Ref<Pd>(pd);
    mw->type = req.type;
    const std::uint32_t rkey = r_.keys().acquire(mw.get(), NameTable::kMw);
    if (rkey == 0) return refuse(ENOMEM, op, "key space full");
    mw->key = NameLease(r_.keys(), rkey);
    const shm::Handle h = mws_.insert(std::move(mw));
    if (h == shm::kNoHandle) return refuse(ENOMEM, op, "handle table full");
    out = {h, rkey};
    return 0;
}

int Session::dealloc_mw(const shm::HandleReq& req, FdList&, shm::Empty&) {
    Mw* mw = mws_.find(req.handle);
    if (mw == nullptr) return refuse(EINVAL, "dealloc_mw", "no such MW " + hex(req.handle));
    mw->key = NameLease{};  // withdrawn: no bind or access finds the window any more
    r_.quiesce();           // nor holds it from before
    on_lcore([&] { unbind_window(*mw); });
    mws_.take(req.handle);
    return 0;
}

// ---- completion channels and CQs -------------------------------------------------------

int Session::create_channel(const shm::Empty&, FdList& fds, shm::HandleReply& out) {
    constexpr const char* op = "create_channel";
    if (fds.size() != 2) return refuse(EINVAL, op, "takes 2 fds: notification socket, memfd");
    if (!is_notify_socket(fds.get(0)))
        return refuse(EINVAL, op, "first fd is not a notification socket (AF_UNIX SOCK_STREAM)");
    auto notify = r_.keep_fd(fds.take(0), peer_.uid, fds_);
    if (!notify) return refuse_quota(notify.error().code, op, notify.error().message);
    if (!r_.reserve(ObjKind::channel, counts_)) return refuse(ENOMEM, op, "channel limit reached");
    auto ch = std::make_unique<Channel>();
    ch->counted = Counted(r_, ObjKind::channel, counts_);

    const shm::Layout layout = shm::channel_layout(shm::kChannelCapacity);
    auto map = map_object(fds.get(1), layout.bytes, &mapped_bytes_);
    if (!map) return refuse(map.error().code, op, map.error().message);
    auto ring = attach_ring<shm::RingProducer<std::uint32_t>>(*map, layout.ring0, layout.bytes,
                                                              shm::kChannelCapacity, "ring");
    if (!ring) return refuse(ring.error().code, op, ring.error().message);
    ch->map = std::move(*map);
    ch->ring = *ring;
    ch->notify = std::move(*notify);

    const shm::Handle h = channels_.insert(std::move(ch));
    if (h == shm::kNoHandle) return refuse(ENOMEM, op, "handle table full");
    out = {h, 0};
    return 0;
}

int Session::destroy_channel(const shm::HandleReq& req, FdList&, shm::Empty&) {
    const Channel* ch = channels_.find(req.handle);
    if (ch == nullptr)
        return refuse(EINVAL, "destroy_channel", "no such channel " + hex(req.handle));
    if (ch->refs != 0)
        return refuse(EBUSY, "destroy_channel",
                      fmt::format("channel still used by {} CQ(s)", ch->refs));
    channels_.take(req.handle);
    return 0;
}

int Session::create_cq(const shm::CreateCqReq& req, FdList& fds, shm::CreateCqReply& out) {
    constexpr const char* op = "create_cq";
    const Limits& l = r_.limits();
    if (req.cqe == 0 || req.cqe > l.max_cqe)
        return refuse(EINVAL, op, fmt::format("cqe {} not in 1..{}", req.cqe, l.max_cqe));
    if (!shm::cq_capacity_ok(req.capacity, req.cqe, l.max_cq_capacity))
        return refuse(EINVAL, op,
                      fmt::format("ring capacity {} for {} CQEs (a power of two > cqe, <= {})",
                                  req.capacity, req.cqe, l.max_cq_capacity));
    Channel* ch = nullptr;
    if (req.channel != shm::kNoHandle) {
        ch = channels_.find(req.channel);
        if (ch == nullptr) return refuse(EINVAL, op, "no such channel " + hex(req.channel));
    }
    if (fds.size() != 1) return refuse(EINVAL, op, "takes 1 fd: the CQ memfd");
    if (!r_.reserve(ObjKind::cq, counts_)) return refuse(ENOMEM, op, "CQ limit reached");
    auto cq = std::make_unique<Cq>();
    cq->counted = Counted(r_, ObjKind::cq, counts_);

    const shm::Layout layout = shm::cq_layout(req.capacity);
    auto map = map_object(fds.get(0), layout.bytes, &mapped_bytes_);
    if (!map) return refuse(map.error().code, op, map.error().message);
    auto ring = attach_ring<shm::RingProducer<shm::Cqe>>(*map, layout.ring0, layout.bytes,
                                                         req.capacity, "ring");
    if (!ring) return refuse(ring.error().code, op, ring.error().message);

    cq->channel = Ref<Channel>(ch);
    cq->channel_handle = req.channel;
    cq->map = std::move(*map);
    cq->control = at<shm::CqControl>(cq->map, layout.control);
    cq->ring = *ring;
    // Reported as rxe rounds it: its ring, a power of two above cqe, less one (at least what
    // was asked, never above max_cqe); the ring holds that one more.
    cq->cqe = req.capacity - 1;
    cq->capacity = req.capacity;
    cq->comp_vector = req.comp_vector;

    const std::uint32_t cqe = cq->cqe;
    const shm::Handle h = cqs_.insert(std::move(cq));
    if (h == shm::kNoHandle) return refuse(ENOMEM, op, "handle table full");
    out = {h, cqe};
    return 0;
}

int Session::destroy_cq(const shm::HandleReq& req, FdList&, shm::Empty&) {
    const Cq* cq = cqs_.find(req.handle);
    if (cq == nullptr) return refuse(EINVAL, "destroy_cq", "no such CQ " + hex(req.handle));
    if (cq->refs != 0)
        return refuse(EBUSY, "destroy_cq",
                      fmt::format("CQ still used by {} QP queue(s)", cq->refs));
    cqs_.take(req.handle);
    return 0;
}

// ---- shared receive queues -------------------------------------------------------------

int Session::create_srq(const shm::CreateSrqReq& req, FdList& fds, shm::CreateSrqReply& out) {
    constexpr const char* op = "create_srq";
    const Limits& l = r_.limits();
    Pd* pd = pds_.find(req.pd);
    if (pd == nullptr) return refuse(EINVAL, op, "no such PD " + hex(req.pd));
    if (req.max_wr == 0 || req.max_wr > l.max_srq_wr)
        return refuse(EINVAL, op, fmt::format("max_wr {} not in 1..{}", req.max_wr, l.max_srq_wr));
    if (req.max_sge == 0 || req.max_sge > l.max_sge)
        return refuse(EINVAL, op, fmt::format("max_sge {} not in 1..{}", req.max_sge, l.max_sge));
    if (req.srq_limit > req.max_wr)
        return refuse(EINVAL, op,
                      fmt::format("srq_limit {} above max_wr {}", req.srq_limit, req.max_wr));
    if (!shm::wq_capacity_ok(req.capacity, req.max_wr, l.max_wq_capacity))
        return refuse(
            EINVAL, op,
            fmt::format("ring capacity {} for max_wr {} (a power of two >= max_wr, <= {})",
                        req.capacity, req.max_wr, l.max_wq_capacity));
    if (fds.size() != 1) return refuse(EINVAL, op, "takes 1 fd: the SRQ memfd");
    if (!r_.reserve(ObjKind::srq, counts_)) return refuse(ENOMEM, op, "SRQ limit reached");
    auto srq = std::make_unique<Srq>();
    srq->counted = Counted(r_, ObjKind::srq, counts_);

    const shm::Layout layout = shm::srq_layout(req.capacity);
    auto map = map_object(fds.get(0), layout.bytes, &mapped_bytes_);
    if (!map) return refuse(map.error().code, op, map.error().message);
    auto ring = attach_ring<shm::RingConsumer<shm::RecvWqe>>(*map, layout.ring0, layout.bytes,
                                                             req.capacity, "ring");
    if (!ring) return refuse(ring.error().code, op, ring.error().message);

    srq->pd = Ref<Pd>(pd);
    srq->pd_handle = req.pd;
    srq->map = std::move(*map);
    srq->ring = *ring;
    srq->max_wr = req.capacity;  // what the ring holds (IBA: at least what was asked)
    srq->max_sge = req.max_sge;
    srq->limit = req.srq_limit;
    srq->capacity = req.capacity;
    srq->events = &events_;
    const std::uint32_t srqn = r_.srqns().acquire(srq.get());
    if (srqn == 0) return refuse(ENOMEM, op, "SRQ numbers exhausted");
    srq->srqn = NameLease(r_.srqns(), srqn);

    const std::uint32_t srq_max_wr = srq->max_wr;
    const shm::Handle h = srqs_.insert(std::move(srq));
    if (h == shm::kNoHandle) return refuse(ENOMEM, op, "handle table full");
    out = {h, srq_max_wr, req.max_sge, srqn};
    return 0;
}

int Session::modify_srq(const shm::ModifySrqReq& req, FdList& fds, shm::ModifySrqReply& out) {
    constexpr const char* op = "modify_srq";
    Srq* srq = srqs_.find(req.srq);
    if (srq == nullptr) return refuse(EINVAL, op, "no such SRQ " + hex(req.srq));
    if ((req.mask & ~std::uint32_t{IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT}) != 0)
        return refuse(EINVAL, op, "unknown attribute mask " + hex(req.mask));
    const bool resize = (req.mask & IBV_SRQ_MAX_WR) != 0;
    const bool arm = (req.mask & IBV_SRQ_LIMIT) != 0;
    if (fds.size() != (resize ? 1u : 0u))
        return refuse(EINVAL, op,
                      resize ? "a resize takes 1 fd: the new SRQ memfd" : "takes no fd");
    const std::uint32_t max_wr = resize ? req.max_wr : srq->max_wr;
    if (arm && req.srq_limit > max_wr)
        return refuse(EINVAL, op,
                      fmt::format("srq_limit {} above max_wr {}", req.srq_limit, max_wr));
    std::uint32_t prod = 0;
    if (resize) {
        if (const int err = resize_srq(*srq, req, fds, prod); err != 0) return err;
    }
    if (arm) {
        // Arms (or disarms, with 0) the limit the lcore checks as it takes WQEs.
        std::atomic_ref<std::uint32_t>(srq->limit).store(req.srq_limit, std::memory_order_release);
    }
    out = {srq->max_wr, srq->capacity, prod, 0};
    return 0;
}

// IBA 11.2.3.3 (Modify Shared Receive Queue): a new max_wr in 1..the device's, not below the
// WQEs on the queue now nor below the armed limit; the WQEs posted and not yet taken stay, in
// order. The new area is mapped here; the lcore that takes the SRQ's WQEs moves them into it
// between two turns (no engine is taking one then) and from then on takes them from there;
// the old area is unmapped once it has.
int Session::resize_srq(Srq& srq, const shm::ModifySrqReq& req, FdList& fds, std::uint32_t& prod) {
    constexpr const char* op = "modify_srq";
    const Limits& l = r_.limits();
    if (req.max_wr == 0 || req.max_wr > l.max_srq_wr)
        return refuse(EINVAL, op, fmt::format("max_wr {} not in 1..{}", req.max_wr, l.max_srq_wr));
    if (!shm::wq_capacity_ok(req.capacity, req.max_wr, l.max_wq_capacity))
        return refuse(
            EINVAL, op,
            fmt::format("ring capacity {} for max_wr {} (a power of two >= max_wr, <= {})",
                        req.capacity, req.max_wr, l.max_wq_capacity));
    const shm::Layout layout = shm::srq_layout(req.capacity);
    auto map = map_object(fds.get(0), layout.bytes, &mapped_bytes_);
    if (!map) return refuse(map.error().code, op, map.error().message);
    const std::span<std::byte> area = map->span(layout.ring0, layout.bytes - layout.ring0);
    // The limit the request arms is checked by the caller; otherwise the one armed now.
    const bool keeps_limit = (req.mask & IBV_SRQ_LIMIT) == 0;

    // Decided on the lcore, told here (the lcore allocates nothing and logs nothing).
    enum class Outcome { moved, below_posted, below_limit, bad_ring } outcome = Outcome::moved;
    std::uint32_t posted = 0, armed = 0;
    shm::RingError ring_error = shm::RingError::ok;
    on_lcore([&] {
        posted = srq.ring->size();
        armed = std::atomic_ref<std::uint32_t>(srq.limit).load(std::memory_order_acquire);
        if (posted > req.max_wr) {
            outcome = Outcome::below_posted;
            return;
        }
        if (keeps_limit && armed > req.max_wr) {
            outcome = Outcome::below_limit;
            return;
        }
        // snicd formats the new ring itself: nothing the client wrote there counts, and the
        // consumer's geometry is snicd's own. The producer view only fills it.
        auto consumer = shm::RingConsumer<shm::RecvWqe>::init(area, req.capacity);
        if (!consumer) {
            outcome = Outcome::bad_ring, ring_error = consumer.error();
            return;
        }
        auto producer = shm::RingProducer<shm::RecvWqe>::attach(area);
        if (!producer) {
            outcome = Outcome::bad_ring, ring_error = producer.error();
            return;
        }
        shm::RecvWqe w;
        std::uint32_t moved = 0;
        while (moved < posted && srq.ring->try_pop(w) && producer->try_push(w)) ++moved;
        srq.ring = *consumer;
        srq.capacity = req.capacity;
        prod = moved;
    });
    switch (outcome) {
        case Outcome::moved:
            break;
        case Outcome::below_posted:
            return refuse(EINVAL, op,
                          fmt::format("max_wr {} below the {} WQEs posted", req.max_wr, posted));
        case Outcome::below_limit:
            return refuse(EINVAL, op,
                          fmt::format("max_wr {} below the armed limit {}", req.max_wr, armed));
        case Outcome::bad_ring:
            return refuse(EINVAL, op, fmt::format("new ring: {}", shm::ring_strerror(ring_error)));
    }
    srq.map = std::move(*map);  // the old area goes: the lcore no longer reads it
    srq.max_wr = req.capacity;
    return 0;
}

int Session::query_srq(const shm::HandleReq& req, FdList&, shm::QuerySrqReply& out) {
    Srq* srq = srqs_.find(req.handle);
    if (srq == nullptr) return refuse(EINVAL, "query_srq", "no such SRQ " + hex(req.handle));
    out = {srq->max_wr, srq->max_sge,
           std::atomic_ref<std::uint32_t>(srq->limit).load(std::memory_order_acquire), 0};
    return 0;
}

int Session::destroy_srq(const shm::HandleReq& req, FdList&, shm::Empty&) {
    const Srq* srq = srqs_.find(req.handle);
    if (srq == nullptr) return refuse(EINVAL, "destroy_srq", "no such SRQ " + hex(req.handle));
    if (srq->refs != 0)
        return refuse(EBUSY, "destroy_srq", fmt::format("SRQ still used by {} QP(s)", srq->refs));
    srqs_.take(req.handle);
    return 0;
}

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
    if (!r_.reserve(ObjKind::qp, counts_)) return refuse(ENOMEM, op, "QP limit reached");
    auto qp = std::make_unique<Qp>();
    qp->counted = Counted(r_, ObjKind::qp, counts_);

    const shm::Layout layout = shm::qp_layout(req.sq_capacity, req.rq_capacity);
    auto map = map_object(fds.get(0), layout.bytes, &mapped_bytes_);
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
    // The QP binds to the connection rdma_cm made for it (on iWARP).
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
    transport_->stop(qp);
    qp.engine.reset();
}

// ---- observability ---------------------------------------------------------------

void Session::for_each_qp(const std::function<void(const Qp&)>& fn) const {
    qps_.for_each([&fn](const Qp& qp) { fn(qp); });
}

}  // namespace snic::daemon
