#include "daemon/verbs/session.h"

#include "daemon/verbs/completion.h"
#include "daemon/verbs/memory_keys.h"
#include "daemon/verbs/qp_glue.h"
#include "daemon/verbs/session_util.h"

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

using namespace session_util;

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
    while (dismantle(kDismantleAll)) {
    }
    events_ = AsyncEvents{};
    if (device_ != nullptr) device_->leave(lane_, peer_.pid);
    r_.remove_session(this);
}

bool Session::dismantle(std::size_t budget) {
    // The engines stop first (those of this turn's QPs in one lcore task); then each kind goes
    // before what it references, and client memory is unmapped only once no lcore can be
    // using it.
    if (qps_.size() != 0) {
        budget -= qps_.drop(budget, [&](std::span<Qp* const> qps) {
            std::vector<Qp*> running;
            for (Qp* qp : qps)
                if (qp->engine) running.push_back(qp);
            if (running.empty()) return;
            transport_->stop(running);
            for (Qp* qp : running) qp->engine.reset();
        });
        if (qps_.size() != 0) return true;
    }
    if (!keys_withdrawn_) {
        mrs_.for_each([](Mr& mr) { mr.key = NameLease{}; });
        mws_.for_each([](Mw& mw) { mw.key = NameLease{}; });
        r_.quiesce();
        keys_withdrawn_ = true;
    }
    const auto drop = [&budget](auto& table) {
        budget -= table.drop(budget);
        return table.size() != 0;
    };
    return drop(srqs_) || drop(cqs_) || drop(channels_) || drop(mws_) || drop(mrs_) || drop(pds_);
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
    c.mapped_bytes = mapped_.bytes;
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
        return refuse(EINVAL, op,
                      fmt::format("transport {} (0..{})", req.transport, shm::kTransports - 1));
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
    if (const int err = check_address_space(layout.bytes, 1, op); err != 0) return err;
    auto map = map_object(fds.get(1), layout.bytes, &mapped_);
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
    lane_ = device->join(peer_.pid);
    transport_ = device->transport_of(lane_);

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
    if (!r_.reserve(ObjKind::pd, counts_, peer_.uid))
        return refuse(ENOMEM, "alloc_pd", "PD limit reached");
    auto pd = std::make_unique<Pd>();
    pd->counted = Counted(r_, ObjKind::pd, counts_, peer_.uid);
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
    std::uint32_t maps_of_uid = 0;
    for (const Session* s : r_.sessions()) {
        if (s->peer().uid != peer_.uid) continue;
        of_uid += s->mapped_bytes();
        maps_of_uid += s->mappings();
    }
    const ClientMemoryStats all = client_memory_stats();
    auto tib = [](std::uint64_t b) {
        return static_cast<double>(b) / double(std::uint64_t{1} << 40);
    };
    if (mapped_.bytes + bytes > l.max_mapped_per_client)
        return refuse(ENOMEM, op,
                      fmt::format("this client has {:.2f} TiB mapped: {:.2f} more would pass its "
                                  "quota of {:.0f} TiB",
                                  tib(mapped_.bytes), tib(bytes), tib(l.max_mapped_per_client)));
    if (of_uid + bytes > l.max_mapped_per_uid)
        return refuse(ENOMEM, op,
                      fmt::format("uid {} has {:.2f} TiB mapped: {:.2f} more would pass its quota "
                                  "of {:.0f} TiB",
                                  peer_.uid, tib(of_uid), tib(bytes), tib(l.max_mapped_per_uid)));
    // A user other than root holds at most its share of the daemon's mmaps, and leaves root
    // its reserve: one user's regions cannot leave every other user, root included, ENOMEM.
    if (peer_.uid != 0 && maps_of_uid + mappings > l.max_mappings_per_uid)
        return refuse(ENOMEM, op,
                      fmt::format("uid {} holds {} mappings: {} more would pass its share of {}",
                                  peer_.uid, maps_of_uid, mappings, l.max_mappings_per_uid));
    const std::uint32_t max_mappings =
        l.max_mappings_per_daemon - (peer_.uid == 0 ? 0 : l.root_reserved_mappings);
    if (all.mapped_bytes + bytes > l.max_mapped_per_daemon ||
        all.mappings + mappings > max_mappings)
        return refuse(ENOMEM, op,
                      fmt::format("snicd maps {:.2f} TiB of client memory in {} mappings: no room "
                                  "for {:.2f} TiB in {} more ({:.0f} TiB, {} mappings at most{})",
                                  tib(all.mapped_bytes), all.mappings, tib(bytes), mappings,
                                  tib(l.max_mapped_per_daemon), max_mappings,
                                  peer_.uid == 0 ? "" : ", the rest root's"));
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
    if (!r_.reserve(ObjKind::mr, counts_, peer_.uid)) return refuse(ENOMEM, op, "MR limit reached");
    auto mr = std::make_unique<Mr>();
    mr->counted = Counted(r_, ObjKind::mr, counts_, peer_.uid);

    std::array<int, shm::kMaxMrSegments> fdv{};
    for (std::size_t i = 0; i < memfds; ++i) fdv[i] = fds.get(i);
    const MemoryOwner owner{peer_.pid, peer_.uid, peer_.gid};
    auto map = map_region(std::span(req.segs, req.nsegs), std::span(fdv.data(), memfds),
                          (access & IBV_ACCESS_LOCAL_WRITE) != 0, owner, &mapped_);
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
    if (!r_.reserve(ObjKind::mw, counts_, peer_.uid)) return refuse(ENOMEM, op, "MW limit reached");
    auto mw = std::make_unique<Mw>();
    mw->counted = Counted(r_, ObjKind::mw, counts_, peer_.uid);
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
    if (!r_.reserve(ObjKind::channel, counts_, peer_.uid))
        return refuse(ENOMEM, op, "channel limit reached");
    auto ch = std::make_unique<Channel>();
    ch->counted = Counted(r_, ObjKind::channel, counts_, peer_.uid);

    const shm::Layout layout = shm::channel_layout(shm::kChannelCapacity);
    if (const int err = check_address_space(layout.bytes, 1, op); err != 0) return err;
    auto map = map_object(fds.get(1), layout.bytes, &mapped_);
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
    if (!r_.reserve(ObjKind::cq, counts_, peer_.uid)) return refuse(ENOMEM, op, "CQ limit reached");
    auto cq = std::make_unique<Cq>();
    cq->counted = Counted(r_, ObjKind::cq, counts_, peer_.uid);

    const shm::Layout layout = shm::cq_layout(req.capacity);
    if (const int err = check_address_space(layout.bytes, 1, op); err != 0) return err;
    auto map = map_object(fds.get(0), layout.bytes, &mapped_);
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
    if (!r_.reserve(ObjKind::srq, counts_, peer_.uid))
        return refuse(ENOMEM, op, "SRQ limit reached");
    auto srq = std::make_unique<Srq>();
    srq->counted = Counted(r_, ObjKind::srq, counts_, peer_.uid);

    const shm::Layout layout = shm::srq_layout(req.capacity);
    if (const int err = check_address_space(layout.bytes, 1, op); err != 0) return err;
    auto map = map_object(fds.get(0), layout.bytes, &mapped_);
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
    if (const int err = check_address_space(layout.bytes, 1, op); err != 0) return err;
    auto map = map_object(fds.get(0), layout.bytes, &mapped_);
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

// ---- observability ---------------------------------------------------------------

void Session::for_each_qp(const std::function<void(const Qp&)>& fn) const {
    qps_.for_each([&fn](const Qp& qp) { fn(qp); });
}

}  // namespace snic::daemon
