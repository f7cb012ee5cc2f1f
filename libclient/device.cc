// Devices and contexts: discovery by enumerating daemon sockets, open/close,
// the query verbs (device, port, GID, pkey) and asynchronous events.
#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "libclient/internal.h"

#undef ibv_query_port
#undef ibv_get_device_list

namespace snic::client {

namespace {

// Every device seen so far; devices are never freed (see Device).
struct DeviceTable {
    std::mutex mu;
    std::vector<std::unique_ptr<Device>> all;
    int next_index = 0;
};

DeviceTable& devices() {
    static DeviceTable* t = new DeviceTable;
    return *t;
}

struct Found {
    std::string name;
    std::string path;
    std::uint32_t port_index;
    std::uint8_t mac[6];
    std::uint32_t ipv4;
    std::uint8_t prefix_length;
    std::uint32_t transport;
};

// SNIC_DEVICES: the devices this process may see, by name, comma-separated (as UCX_NET_DEVICES
// or NCCL_IB_HCA pick NICs); unset or empty, every device. With both ends of a test on one
// host, it keeps rdma_cm from resolving a peer's address to the peer's own device.
bool visible(const std::string& name) {
    const char* v = std::getenv("SNIC_DEVICES");
    if (v == nullptr || *v == '\0') return true;
    return any_item(v, ',', [&](std::string_view item) { return item == name; });
}

// Asks every socket in the socket directories for its status.
std::vector<Found> discover() {
    std::vector<Found> found;
    auto status = std::make_unique<shm::StatusReply>();
    any_item(socket_dirs(), ':', [&](std::string_view item) {
        const std::string dir(item);
        DIR* d = ::opendir(dir.c_str());
        if (d == nullptr) return false;
        std::vector<std::string> socks;
        while (dirent* e = ::readdir(d)) {
            const std::string n = e->d_name;
            if (n.size() > 5 && n.ends_with(".sock")) socks.push_back(dir + "/" + n);
        }
        ::closedir(d);
        std::sort(socks.begin(), socks.end());
        for (const std::string& path : socks) {
            Conn conn;
            if (conn.connect(path, discovery_timeout_ms()) != 0) continue;  // a dead socket
            if (conn.status(status.get()) != 0) continue;
            for (std::uint32_t i = 0; i < status->nports; ++i) {
                shm::PortInfo& p = status->ports[i];
                // [0] the port's RoCEv2 device, [1] its iWARP device.
                for (std::uint32_t d = 0; d < p.ndevices && d < 2; ++d) {
                    p.devices[d][shm::kNameLen - 1] = '\0';
                    if (p.devices[d][0] == '\0' || !visible(p.devices[d])) continue;
                    Found f{p.devices[d],
                            path,
                            i,
                            {},
                            p.ipv4,
                            p.prefix_length,
                            d == 0 ? shm::kTransportRoce : shm::kTransportIwarp};
                    std::memcpy(f.mac, p.mac, 6);
                    found.push_back(std::move(f));
                }
            }
        }
        return false;
    });
    return found;
}

void fill_device(Device* dev, const Found& f) {
    const bool iwarp = f.transport == shm::kTransportIwarp;
    dev->dev.node_type = iwarp ? IBV_NODE_RNIC : IBV_NODE_CA;
    dev->dev.transport_type = iwarp ? IBV_TRANSPORT_IWARP : IBV_TRANSPORT_IB;
    dev->transport = f.transport;
    std::snprintf(dev->dev.name, sizeof dev->dev.name, "%s", f.name.c_str());
    std::snprintf(dev->dev.dev_name, sizeof dev->dev.dev_name, "%s%s", shm::kDeviceNodePrefix,
                  f.name.c_str());
    std::snprintf(dev->dev.dev_path, sizeof dev->dev.dev_path, "%s", f.path.c_str());
    std::snprintf(dev->dev.ibdev_path, sizeof dev->dev.ibdev_path, "%s", f.path.c_str());
    std::snprintf(dev->socket_path, sizeof dev->socket_path, "%s", f.path.c_str());
    dev->port_index = f.port_index;
    std::memcpy(dev->mac, f.mac, 6);
    dev->ipv4 = f.ipv4;
    dev->prefix_length = f.prefix_length;
}

// EUI-64 from the port's MAC, in the byte order verbs returns (big-endian).
__be64 guid_from_mac(const std::uint8_t mac[6]) {
    const std::uint8_t b[8] = {
        static_cast<std::uint8_t>(mac[0] ^ 2), mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]};
    __be64 g;
    std::memcpy(&g, b, 8);
    return g;
}

std::uint8_t phys_state(std::uint32_t state) {
    return state == IBV_PORT_ACTIVE ? 5 : 3;
}

bool known_event(std::uint32_t t) {
    return t <= IBV_EVENT_WQ_FATAL;
}

}  // namespace

int query_port_internal(Context* ctx, std::uint8_t port, ibv_port_attr* out,
                        shm::QueryPortReply* raw) {
    if (port != 1) return EINVAL;
    shm::QueryPortReply r{};
    if (const int err = ctx->conn.call(shm::CtrlOp::query_port, shm::Empty{}, &r); err != 0)
        return err;
    if (raw != nullptr) *raw = r;
    if (out != nullptr) {
        std::memset(out, 0, sizeof *out);
        out->state = static_cast<ibv_port_state>(r.state);
        out->max_mtu = static_cast<ibv_mtu>(r.max_mtu);
        out->active_mtu = static_cast<ibv_mtu>(r.active_mtu);
        out->gid_tbl_len = static_cast<int>(r.gid_tbl_len);
        out->port_cap_flags = IBV_PORT_CM_SUP;
        out->max_msg_sz = r.max_msg_sz;
        out->pkey_tbl_len = static_cast<std::uint16_t>(r.pkey_tbl_len);
        out->max_vl_num = 1;
        out->active_width = static_cast<std::uint8_t>(r.active_width);
        out->active_speed = static_cast<std::uint8_t>(r.active_speed);
        out->phys_state = phys_state(r.state);
        out->link_layer = IBV_LINK_LAYER_ETHERNET;
    }
    return 0;
}

namespace ops {

int query_port(ibv_context* c, std::uint8_t port, ibv_port_attr* attr, std::size_t len) {
    return errno_verb([&] {
        ibv_port_attr full;
        const int err = query_port_internal(to_ctx(c), port, &full, nullptr);
        if (err != 0) return err;
        std::memset(attr, 0, len);
        std::memcpy(attr, &full, std::min(len, sizeof full));
        return 0;
    });
}

int query_device(ibv_context* c, ibv_device_attr* a) {
    Context* ctx = to_ctx(c);
    const shm::DeviceLimits& l = ctx->limits;
    std::memset(a, 0, sizeof *a);
    std::snprintf(a->fw_ver, sizeof a->fw_ver, "snic %s", SNIC_VERSION);
    a->node_guid = guid_from_mac(ctx->device->mac);
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = l.max_mr_size;
    a->page_size_cap = l.page_size_cap;
    a->vendor_id = l.vendor_id;
    a->vendor_part_id = l.vendor_part_id;
    a->hw_ver = l.hw_ver;
    a->max_qp = static_cast<int>(l.max_qp);
    a->max_qp_wr = static_cast<int>(l.max_qp_wr);
    a->device_cap_flags = l.device_cap_flags;
    a->max_sge = static_cast<int>(l.max_sge);
    a->max_sge_rd = static_cast<int>(l.max_sge_rd);
    a->max_cq = static_cast<int>(l.max_cq);
    a->max_cqe = static_cast<int>(l.max_cqe);
    a->max_mr = static_cast<int>(l.max_mr);
    a->max_pd = static_cast<int>(l.max_pd);
    a->max_qp_rd_atom = static_cast<int>(l.max_qp_rd_atom);
    a->max_res_rd_atom = static_cast<int>(l.max_res_rd_atom);
    a->max_qp_init_rd_atom = static_cast<int>(l.max_qp_init_rd_atom);
    a->atomic_cap = static_cast<ibv_atomic_cap>(l.atomic_cap);
    a->max_mw = static_cast<int>(l.max_mw);
    // Address handles live in libsnic; an iWARP device has none (it is connected: no UD).
    a->max_ah = ctx->device->transport == shm::kTransportIwarp ? 0 : 65536;
    a->max_srq = static_cast<int>(l.max_srq);
    a->max_srq_wr = static_cast<int>(l.max_srq_wr);
    a->max_srq_sge = static_cast<int>(l.max_srq_sge);
    a->max_pkeys = static_cast<std::uint16_t>(l.max_pkeys);
    a->local_ca_ack_delay = static_cast<std::uint8_t>(l.local_ca_ack_delay);
    a->phys_port_cnt = 1;
    return 0;
}

int query_device_ex(ibv_context* c, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, std::size_t len) {
    if ((input != nullptr && input->comp_mask != 0) || len < sizeof attr->orig_attr) {
        errno = EINVAL;
        return EINVAL;
    }
    ibv_device_attr_ex full{};
    query_device(c, &full.orig_attr);
    full.device_cap_flags_ex = full.orig_attr.device_cap_flags;
    full.phys_port_cnt_ex = 1;
    std::memset(attr, 0, len);
    std::memcpy(attr, &full, std::min(len, sizeof full));
    return 0;
}

}  // namespace ops

}  // namespace snic::client

using namespace snic::client;
namespace shm = snic::shm;

// ---- devices -------------------------------------------------------------------

SNIC_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
    return guarded<ibv_device**>(nullptr, [&]() -> ibv_device** {
        const std::vector<Found> found = discover();
        std::vector<Device*> list;
        {
            DeviceTable& t = devices();
            std::lock_guard lock(t.mu);
            for (const Found& f : found) {
                Device* dev = nullptr;
                for (auto& d : t.all) {
                    if (f.name == d->dev.name && f.path == d->socket_path) dev = d.get();
                }
                if (dev == nullptr) {
                    auto fresh = std::make_unique<Device>();
                    fresh->index = t.next_index++;
                    dev = fresh.get();
                    fill_device(dev, f);
                    t.all.push_back(std::move(fresh));
                } else if (dev->port_index != f.port_index ||
                           std::memcmp(dev->mac, f.mac, 6) != 0) {
                    // The daemon was restarted with other ports: follow it.
                    dev->port_index = f.port_index;
                    std::memcpy(dev->mac, f.mac, 6);
                }
                dev->ipv4 = f.ipv4;
                dev->prefix_length = f.prefix_length;
                if (std::none_of(list.begin(), list.end(), [&](Device* o) {
                        return std::strcmp(o->dev.name, dev->dev.name) == 0;
                    }))
                    list.push_back(dev);
            }
        }
        std::sort(list.begin(), list.end(),
                  [](Device* a, Device* b) { return std::strcmp(a->dev.name, b->dev.name) < 0; });
        auto** out = static_cast<ibv_device**>(std::calloc(list.size() + 1, sizeof(ibv_device*)));
        if (out == nullptr) return fail_null<ibv_device*>(ENOMEM);
        for (std::size_t i = 0; i < list.size(); ++i) out[i] = &list[i]->dev;
        if (num_devices != nullptr) *num_devices = static_cast<int>(list.size());
        return out;
    });
}

namespace snic::client {

OpenContexts& open_contexts() {
    static OpenContexts* o = new OpenContexts;  // never freed: contexts may close at exit
    return *o;
}

std::vector<Device*> known_devices() {
    std::vector<Device*> out;
    DeviceTable& t = devices();
    std::lock_guard lock(t.mu);
    for (const auto& d : t.all)
        if (visible(d->dev.name)) out.push_back(d.get());
    return out;
}

std::vector<Device*> current_devices() {
    std::vector<Device*> out;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return out;
    for (int i = 0; i < n; ++i) out.push_back(to_dev(list[i]));
    ibv_free_device_list(list);
    return out;
}

}  // namespace snic::client

SNIC_EXPORT void ibv_free_device_list(ibv_device** list) {
    std::free(list);
}

SNIC_EXPORT const char* ibv_get_device_name(ibv_device* device) {
    return device->name;
}

SNIC_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
    return guid_from_mac(to_dev(device)->mac);
}

SNIC_EXPORT int ibv_get_device_index(ibv_device* device) {
    return to_dev(device)->index;
}

// ---- contexts ------------------------------------------------------------------

namespace {

// The ibv_context the application sees of `ctx`, opened on `device`: its descriptors and
// libsnic's context operations.
void fill_context(Context* ctx, ibv_device* device) {
    verbs_context& v = ctx->vctx;
    v.sz = sizeof(verbs_context);
    v.query_port = ops::query_port;
    v.query_device_ex = ops::query_device_ex;
    v.create_cq_ex = ops::create_cq_ex;
    v.create_qp_ex = ops::create_qp_ex;
    v.create_srq_ex = ops::create_srq_ex;
    v.get_srq_num = ops::get_srq_num;
    ibv_context& c = v.context;
    c.device = device;
    c.cmd_fd = ctx->cmd_fd.get();
    c.async_fd = ctx->async_fd.get();
    c.num_comp_vectors = 1;
    c.abi_compat = __VERBS_ABI_IS_EXTENDED;
    ::pthread_mutex_init(&c.mutex, nullptr);
    c.ops.poll_cq = ops::poll_cq;
    c.ops.req_notify_cq = ops::req_notify_cq;
    c.ops.post_send = ops::post_send;
    c.ops.post_recv = ops::post_recv;
    c.ops.post_srq_recv = ops::post_srq_recv;
    c.ops.alloc_mw = ops::alloc_mw;
    c.ops.dealloc_mw = ops::dealloc_mw;
    c.ops.bind_mw = ops::bind_mw;
}

}  // namespace

SNIC_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
    return guarded<ibv_context*>(nullptr, [&]() -> ibv_context* {
        Device* dev = to_dev(device);
        auto ctx = std::make_unique<Context>();
        ctx->device = dev;
        if (const int err = ctx->conn.connect(dev->socket_path, control_timeout_ms()); err != 0) {
            say("cannot connect to %s for %s: %s", dev->socket_path, dev->dev.name,
                std::strerror(err));
            return fail_null<ibv_context>(err == ENOENT || err == ECONNREFUSED ? ENODEV : err);
        }
        Fd theirs;
        if (const int err = make_notify_pair(&ctx->async_fd, &theirs); err != 0)
            return fail_null<ibv_context>(err);
        // A kernel RNIC's context carries its uverbs descriptor in cmd_fd, which programs dup
        // and pass on to share the context (ibv_import_device; rdma-core's own tests do). snic's
        // commands go over the control socket, so cmd_fd is a descriptor on /dev/null: valid for
        // dup, poll and close, reaching no driver; importing it fails with EOPNOTSUPP.
        ctx->cmd_fd.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
        if (!ctx->cmd_fd) return fail_null<ibv_context>(errno);
        const shm::ContextLayout lay = shm::context_layout(shm::kAsyncCapacity);
        Fd memfd;
        if (const int err = make_shared_area("libsnic-context", lay.bytes, &memfd, &ctx->async_map);
            err != 0)
            return fail_null<ibv_context>(err);
        auto ring = shm::RingConsumer<shm::AsyncEvent>::init(
            std::span(ctx->async_map.data() + lay.events, lay.doorbells - lay.events),
            shm::kAsyncCapacity);
        if (!ring) return fail_null<ibv_context>(EINVAL);
        ctx->async_ring = *ring;
        ctx->doorbells = ::new (ctx->async_map.data() + lay.doorbells) shm::Doorbells{};

        const shm::OpenDeviceReq req{dev->port_index, dev->transport};
        shm::OpenDeviceReply rep{};
        const int fds[2] = {theirs.get(), memfd.get()};
        if (const int err = ctx->conn.call(shm::CtrlOp::open_device, req, &rep, fds); err != 0) {
            if (err != EPROTO)
                say("snicd at %s refused to open %s: %s", dev->socket_path, dev->dev.name,
                    std::strerror(err));
            return fail_null<ibv_context>(err);
        }
        rep.device[shm::kNameLen - 1] = '\0';
        if (std::strcmp(rep.device, dev->dev.name) != 0) {
            say("snicd at %s now has %s where %s was: list the devices again", dev->socket_path,
                rep.device, dev->dev.name);
            return fail_null<ibv_context>(ENODEV);
        }
        ctx->limits = rep.limits;
        std::memcpy(ctx->devname, rep.device, sizeof ctx->devname);

        fill_context(ctx.get(), device);
        Context* opened = ctx.release();
        {
            std::lock_guard lock(open_contexts().mu);
            open_contexts().all.insert(opened);
        }
        return &opened->vctx.context;
    });
}

SNIC_EXPORT int ibv_close_device(ibv_context* c) {
    return guarded(-1, [&] {
        Context* ctx = to_ctx(c);
        {
            std::lock_guard lock(open_contexts().mu);
            open_contexts().all.erase(ctx);
        }
        {
            std::lock_guard lock(ctx->objs_mu);
            for (auto& [h, qp] : ctx->qps) release_qp_local(qp);
            for (auto& [h, srq] : ctx->srqs) release_srq_local(srq);
            for (auto& [h, cq] : ctx->cqs) release_cq_local(cq);
            for (Channel* ch : ctx->channels) release_channel_local(ch);
            for (Mr* mr : ctx->mrs) release_mr_local(mr);
            for (Mw* mw : ctx->mws) delete mw;
            for (Pd* pd : ctx->pds) delete pd;
            for (Ah* ah : ctx->ahs) delete ah;
        }
        ctx->conn.close();  // the daemon releases everything the session held
        ::pthread_mutex_destroy(&c->mutex);
        delete ctx;
        return 0;
    });
}

SNIC_EXPORT int ibv_query_device(ibv_context* c, ibv_device_attr* attr) {
    return ops::query_device(c, attr);
}

// The exported form takes the old, shorter ibv_port_attr (up to `flags`).
SNIC_EXPORT int ibv_query_port(ibv_context* c, std::uint8_t port,
                               struct _compat_ibv_port_attr* attr) {
    return guarded(-1, [&] {
        ibv_port_attr full;
        const int err = query_port_internal(to_ctx(c), port, &full, nullptr);
        if (err != 0) {
            errno = err;
            return err;
        }
        std::memcpy(attr, &full, offsetof(ibv_port_attr, port_cap_flags2));
        return 0;
    });
}

// ---- GIDs and pkeys ----------------------------------------------------------------

namespace {

// GID `index` of the device: ::ffff:a.b.c.d, the port's address.
int gid_entry(ibv_context* c, std::uint32_t port, std::uint32_t index, ibv_gid_entry* e) {
    if (port != 1) return EINVAL;
    shm::QueryPortReply r{};
    if (const int err = query_port_internal(to_ctx(c), 1, nullptr, &r); err != 0) return err;
    if (index >= r.gid_tbl_len || index != 0) return EINVAL;
    std::memset(e, 0, sizeof *e);
    e->gid_index = index;
    e->port_num = port;
    if (to_ctx(c)->device->transport == shm::kTransportIwarp) {
        // An iWARP device's GID is its MAC, as Linux's soft-iWARP reports it.
        std::memcpy(e->gid.raw, r.mac, 6);
        e->gid_type = IBV_GID_TYPE_IB;
        return 0;
    }
    e->gid.raw[10] = 0xff;
    e->gid.raw[11] = 0xff;
    e->gid.raw[12] = static_cast<std::uint8_t>(r.ipv4 >> 24);
    e->gid.raw[13] = static_cast<std::uint8_t>(r.ipv4 >> 16);
    e->gid.raw[14] = static_cast<std::uint8_t>(r.ipv4 >> 8);
    e->gid.raw[15] = static_cast<std::uint8_t>(r.ipv4);
    e->gid_type = IBV_GID_TYPE_ROCE_V2;
    e->ndev_ifindex = 0;
    return 0;
}

}  // namespace

SNIC_EXPORT int ibv_query_gid(ibv_context* c, std::uint8_t port, int index, ibv_gid* gid) {
    return guarded(-1, [&] {
        ibv_gid_entry e;
        if (index < 0) {
            errno = EINVAL;
            return -1;
        }
        if (const int err = gid_entry(c, port, static_cast<std::uint32_t>(index), &e); err != 0) {
            errno = err;
            return -1;
        }
        *gid = e.gid;
        return 0;
    });
}

SNIC_EXPORT int _ibv_query_gid_ex(ibv_context* c, std::uint32_t port, std::uint32_t index,
                                  ibv_gid_entry* entry, std::uint32_t flags,
                                  std::size_t entry_size) {
    return errno_verb([&] {
        if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return EINVAL;
        return gid_entry(c, port, index, entry);
    });
}

SNIC_EXPORT ssize_t _ibv_query_gid_table(ibv_context* c, ibv_gid_entry* entries,
                                         std::size_t max_entries, std::uint32_t flags,
                                         std::size_t entry_size) {
    return guarded<ssize_t>(-EIO, [&]() -> ssize_t {
        if (flags != 0 || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
        if (max_entries < 1) return -EINVAL;
        ibv_gid_entry e;
        if (const int err = gid_entry(c, 1, 0, &e); err != 0) return -err;
        std::memcpy(entries, &e, sizeof e);
        return 1;
    });
}

// rdma-core's private (IBVERBS_PRIVATE) helper that ibv_devinfo uses.
enum snic_gid_type_sysfs { kGidTypeIbRoceV1 = 0, kGidTypeRoceV2 = 1 };
SNIC_EXPORT int ibv_query_gid_type(ibv_context* c, std::uint8_t port, unsigned int index,
                                   snic_gid_type_sysfs* type) {
    return guarded(-1, [&] {
        ibv_gid_entry e;
        if (const int err = gid_entry(c, port, index, &e); err != 0) {
            errno = err;
            return -1;
        }
        *type = kGidTypeRoceV2;
        return 0;
    });
}

SNIC_EXPORT int ibv_query_pkey(ibv_context* c, std::uint8_t port, int index, __be16* pkey) {
    return guarded(-1, [&] {
        (void)c;
        if (port != 1 || index != 0) {
            errno = EINVAL;
            return -1;
        }
        *pkey = 0xffff;  // the default pkey, the same in either byte order
        return 0;
    });
}

SNIC_EXPORT int ibv_get_pkey_index(ibv_context* c, std::uint8_t port, __be16 pkey) {
    (void)c;
    if (port != 1) {
        errno = EINVAL;
        return -1;
    }
    if ((pkey & 0xff7f) == 0xff7f) return 0;  // 0xffff or 0x7fff, in network order
    errno = ENOENT;
    return -1;
}

// ---- asynchronous events --------------------------------------------------------

namespace {

// Which object an asynchronous event is about (IBA 11.6.3): the one place that says so
// for both ibv_get_async_event and ibv_ack_async_event.
enum class EventElement { cq, qp, srq, wq, port };

EventElement element_of(ibv_event_type type) {
    switch (type) {
        case IBV_EVENT_CQ_ERR:
            return EventElement::cq;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            return EventElement::qp;
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            return EventElement::srq;
        case IBV_EVENT_WQ_FATAL:
            return EventElement::wq;
        default:
            return EventElement::port;
    }
}

}  // namespace

SNIC_EXPORT int ibv_get_async_event(ibv_context* c, ibv_async_event* event) {
    return guarded(-1, [&] {
        Context* ctx = to_ctx(c);
        for (;;) {
            if (const int err = take_notify(ctx->async_fd.get()); err != 0) {
                if (err == EIO) {
                    // snicd closed its end: it is gone. Reported once as the device's fatal
                    // error, as an RNIC reports its own.
                    ctx->dead.store(true, std::memory_order_relaxed);
                    std::lock_guard lock(ctx->async_mu);
                    if (!ctx->fatal_reported) {
                        ctx->fatal_reported = true;
                        *event = ibv_async_event{};
                        event->event_type = IBV_EVENT_DEVICE_FATAL;
                        event->element.port_num = 1;
                        return 0;
                    }
                }
                errno = err;  // EAGAIN when the application made async_fd non-blocking
                return -1;
            }
            shm::AsyncEvent ev;
            {
                std::lock_guard lock(ctx->async_mu);
                if (!ctx->async_ring->try_pop(ev)) {
                    errno = EIO;
                    return -1;
                }
            }
            if (!known_event(ev.type)) continue;
            const auto type = static_cast<ibv_event_type>(ev.type);
            std::lock_guard lock(ctx->objs_mu);
            switch (element_of(type)) {
                case EventElement::cq: {
                    auto it = ctx->cqs.find(ev.handle);
                    if (it == ctx->cqs.end()) continue;
                    ++it->second->async_events_reported;
                    event->element.cq = ibv_cq_ex_to_cq(&it->second->cq);
                    break;
                }
                case EventElement::qp: {
                    auto it = ctx->qps.find(ev.handle);
                    if (it == ctx->qps.end()) continue;
                    ++it->second->events_reported;
                    event->element.qp = &it->second->qpx.qp_base;
                    break;
                }
                case EventElement::srq: {
                    auto it = ctx->srqs.find(ev.handle);
                    if (it == ctx->srqs.end()) continue;
                    ++it->second->events_reported;
                    event->element.srq = &it->second->srq;
                    break;
                }
                case EventElement::wq:
                    continue;  // no work queues
                case EventElement::port:
                    event->element.port_num = static_cast<int>(ev.handle);
                    break;
            }
            event->event_type = type;
            return 0;
        }
    });
}

SNIC_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
    auto bump = [](pthread_mutex_t* m, pthread_cond_t* cv, std::uint32_t* n) {
        ::pthread_mutex_lock(m);
        ++*n;
        ::pthread_cond_signal(cv);
        ::pthread_mutex_unlock(m);
    };
    switch (element_of(event->event_type)) {
        case EventElement::cq: {
            ibv_cq* cq = event->element.cq;
            bump(&cq->mutex, &cq->cond, &cq->async_events_completed);
            break;
        }
        case EventElement::qp: {
            ibv_qp* qp = event->element.qp;
            bump(&qp->mutex, &qp->cond, &qp->events_completed);
            break;
        }
        case EventElement::srq: {
            ibv_srq* srq = event->element.srq;
            bump(&srq->mutex, &srq->cond, &srq->events_completed);
            break;
        }
        case EventElement::wq:
        case EventElement::port:
            break;
    }
}
