// libndsnic: the provider (the addresses of snic's devices, adapters opened by address) and
// the adapter (a device with its PD: limits, memory, windows, and the event thread that
// serves its connections, CQ notifications and QP errors).
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "libclient/snic/snic_ext.h"
#include "nd/provider.h"

namespace snic::nd {

namespace {

// The IPv4 address of each snic device, in device-list order. A device without one (a port
// with no address) is left out.
struct DeviceAddr {
    ibv_device* dev;
    sockaddr_in addr;
};

std::vector<DeviceAddr> device_addresses(ibv_device** list, int n) {
    std::vector<DeviceAddr> out;
    for (int i = 0; i < n; ++i) {
        ibv_context* ctx = ibv_open_device(list[i]);
        if (ctx == nullptr) continue;
        in_addr a{};
        if (snic_query_port_ipv4(ctx, 1, &a) == 0) {
            sockaddr_in s{};
            s.sin_family = AF_INET;
            s.sin_addr = a;
            out.push_back({list[i], s});
        }
        ibv_close_device(ctx);
    }
    return out;
}

struct DeviceList {
    DeviceList() : list(ibv_get_device_list(&n)) {}
    ~DeviceList() {
        if (list != nullptr) ibv_free_device_list(list);
    }
    int n = 0;
    ibv_device** list;
};

HRESULT from_errno(int e) {
    switch (e) {
        case 0:
            return ND_SUCCESS;
        case ENOMEM:
            return ND_NO_MEMORY;
        case EINVAL:
            return ND_INVALID_PARAMETER;
        case EADDRINUSE:
            return ND_ADDRESS_ALREADY_EXISTS;
        case EACCES:
        case EPERM:
            return ND_ACCESS_VIOLATION;
        case ENOSPC:
        case EAGAIN:
            return ND_INSUFFICIENT_RESOURCES;
        default:
            return ND_UNSUCCESSFUL;
    }
}

}  // namespace

// ---- provider ----

HRESULT Provider::QueryAddressList(SOCKET_ADDRESS_LIST* list, SIZE_T* size) {
    if (size == nullptr) return ND_INVALID_PARAMETER;
    DeviceList devs;
    std::vector<sockaddr_in> addrs;
    for (const DeviceAddr& d : device_addresses(devs.list, devs.n))
        if (std::none_of(addrs.begin(), addrs.end(), [&](const sockaddr_in& a) {
                return a.sin_addr.s_addr == d.addr.sin_addr.s_addr;
            }))
            addrs.push_back(d.addr);
    // The list, then the addresses it points at, in the caller's one buffer.
    const SIZE_T head = offsetof(SOCKET_ADDRESS_LIST, Address) +
                        std::max<SIZE_T>(addrs.size(), 1) * sizeof(SOCKET_ADDRESS);
    const SIZE_T need = head + addrs.size() * sizeof(sockaddr_in);
    if (list == nullptr || *size < need) {
        *size = need;
        return ND_BUFFER_OVERFLOW;
    }
    auto* at = reinterpret_cast<sockaddr_in*>(reinterpret_cast<char*>(list) + head);
    list->iAddressCount = static_cast<INT>(addrs.size());
    for (std::size_t i = 0; i < addrs.size(); ++i) {
        at[i] = addrs[i];
        list->Address[i].lpSockaddr = reinterpret_cast<sockaddr*>(&at[i]);
        list->Address[i].iSockaddrLength = sizeof(sockaddr_in);
    }
    *size = need;
    return ND_SUCCESS;
}

HRESULT Provider::OpenAdapter(const sockaddr* addr, SIZE_T len, INDAdapter** out) {
    if (out == nullptr) return ND_INVALID_PARAMETER_3;
    if (addr == nullptr || len < sizeof(sockaddr_in) || addr->sa_family != AF_INET)
        return ND_INVALID_ADDRESS;
    const auto* want = reinterpret_cast<const sockaddr_in*>(addr);
    DeviceList devs;
    for (const DeviceAddr& d : device_addresses(devs.list, devs.n)) {
        if (d.addr.sin_addr.s_addr != want->sin_addr.s_addr) continue;
        auto* a = new Adapter;
        if (const HRESULT r = a->open(d.dev, d.addr); r != ND_SUCCESS) {
            a->Release();
            return r;
        }
        *out = a;
        return ND_SUCCESS;
    }
    return ND_INVALID_ADDRESS;
}

// ---- windows by key ----

bool WindowTable::put(MemoryWindow* mw, std::uint32_t rkey) {
    const std::uint32_t index = rkey >> 8;
    for (std::size_t n = 0, i = index % kSlots; n < kSlots; ++n, i = (i + 1) % kSlots) {
        MemoryWindow* none = nullptr;
        if (slots_[i].compare_exchange_strong(none, mw, std::memory_order_acq_rel)) {
            keys_[i].store(index, std::memory_order_release);
            return true;
        }
    }
    return false;
}

void WindowTable::remove(MemoryWindow* mw) {
    for (auto& s : slots_) {
        MemoryWindow* m = mw;
        if (s.compare_exchange_strong(m, nullptr, std::memory_order_release)) return;
    }
}

MemoryWindow* WindowTable::find(std::uint32_t rkey) const {
    const std::uint32_t index = rkey >> 8;
    for (std::size_t n = 0, i = index % kSlots; n < kSlots; ++n, i = (i + 1) % kSlots) {
        MemoryWindow* m = slots_[i].load(std::memory_order_acquire);
        if (m != nullptr && keys_[i].load(std::memory_order_acquire) == index) return m;
    }
    return nullptr;
}

// ---- adapter ----

HRESULT Adapter::open(ibv_device* dev, const sockaddr_in& a) {
    addr = a;
    ctx = ibv_open_device(dev);
    if (ctx == nullptr) return ND_DEVICE_NOT_READY;
    iwarp = dev->transport_type == IBV_TRANSPORT_IWARP;
    if (ibv_query_device(ctx, &dev_attr) != 0 || ibv_query_port(ctx, 1, &port_attr) != 0)
        return ND_DEVICE_NOT_READY;
    pd = ibv_alloc_pd(ctx);
    channel = ibv_create_comp_channel(ctx);
    cm_channel = rdma_create_event_channel();
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (pd == nullptr || channel == nullptr || cm_channel == nullptr || wake_fd_ < 0)
        return ND_INSUFFICIENT_RESOURCES;
    // The thread reads the channels without blocking: poll says when.
    for (const int fd : {channel->fd, cm_channel->fd, ctx->async_fd})
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    events_thread_ = std::thread([this] { events_loop(); });
    return ND_SUCCESS;
}

Adapter::~Adapter() {
    if (events_thread_.joinable()) {
        stopping_ = true;
        const std::uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
        events_thread_.join();
    }
    for (rdma_cm_id* id : retired_ids_) rdma_destroy_id(id);
    if (cm_channel != nullptr) rdma_destroy_event_channel(cm_channel);
    if (channel != nullptr) ibv_destroy_comp_channel(channel);
    if (pd != nullptr) ibv_dealloc_pd(pd);
    if (ctx != nullptr) ibv_close_device(ctx);
    if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Adapter::retire_id(rdma_cm_id* id) {
    retired_ids_.push_back(id);
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
}

HRESULT Adapter::Query(DWORD version, ND_ADAPTER_INFO* info, SIZE_T* size) {
    if (version != 1) return ND_NOT_SUPPORTED;
    if (size == nullptr) return ND_INVALID_PARAMETER_3;
    if (info == nullptr || *size < sizeof(ND_ADAPTER_INFO)) {
        *size = sizeof(ND_ADAPTER_INFO);
        return ND_BUFFER_OVERFLOW;
    }
    const ibv_device_attr& d = dev_attr;
    ND_ADAPTER_INFO i{};
    i.VendorId = d.vendor_id;
    i.DeviceId = d.vendor_part_id;
    i.MaxInboundSge = static_cast<SIZE_T>(d.max_sge);
    i.MaxInboundRequests = static_cast<SIZE_T>(d.max_qp_wr);
    i.MaxInboundLength = port_attr.max_msg_sz;
    i.MaxOutboundSge = static_cast<SIZE_T>(d.max_sge);
    i.MaxOutboundRequests = static_cast<SIZE_T>(d.max_qp_wr);
    i.MaxOutboundLength = port_attr.max_msg_sz;
    i.MaxInlineData = 0;
    i.MaxInboundReadLimit = static_cast<SIZE_T>(d.max_qp_rd_atom);
    i.MaxOutboundReadLimit = static_cast<SIZE_T>(d.max_qp_init_rd_atom);
    i.MaxCqEntries = static_cast<SIZE_T>(d.max_cqe);
    i.MaxRegistrationSize = d.max_mr_size;
    i.MaxWindowSize = d.max_mr_size;
    i.LargeRequestThreshold = 0;
    i.MaxCallerData = kMaxCallerData;
    i.MaxCalleeData = kMaxCalleeData;
    *info = i;
    *size = sizeof(ND_ADAPTER_INFO);
    return ND_SUCCESS;
}

HRESULT Adapter::CreateCompletionQueue(SIZE_T n, INDCompletionQueue** out) {
    if (out == nullptr) return ND_INVALID_PARAMETER_2;
    if (n == 0 || n > static_cast<SIZE_T>(dev_attr.max_cqe)) return ND_INVALID_PARAMETER_1;
    auto* c = new CompletionQueue(this);
    c->cq = ibv_create_cq(ctx, static_cast<int>(n), c, channel, 0);
    if (c->cq == nullptr) {
        const int e = errno;
        c->Release();
        return e == ENOMEM ? ND_NO_MEMORY : ND_INSUFFICIENT_RESOURCES;
    }
    *out = c;
    return ND_SUCCESS;
}

// Registration is synchronous here: the call completes the overlapped request itself and
// answers ND_SUCCESS (a caller that waits on it finds it done).
HRESULT Adapter::RegisterMemory(const void* buf, SIZE_T len, OVERLAPPED* ov, ND_MR_HANDLE* out) {
    if (buf == nullptr || len == 0) return ND_INVALID_PARAMETER_1;
    if (ov == nullptr) return ND_INVALID_PARAMETER_3;
    if (out == nullptr) return ND_INVALID_PARAMETER_4;
    if (len > dev_attr.max_mr_size) return ND_INVALID_BUFFER_SIZE;
    constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND;
    ibv_mr* mr = ibv_reg_mr(pd, const_cast<void*>(buf), len, kAccess);
    const HRESULT r = mr != nullptr ? ND_SUCCESS : from_errno(errno);
    if (mr != nullptr) *out = reinterpret_cast<ND_MR_HANDLE>(mr);
    start(ov);
    finish(ov, r);
    return r;
}

HRESULT Adapter::DeregisterMemory(ND_MR_HANDLE h, OVERLAPPED* ov) {
    if (h == nullptr) return ND_INVALID_PARAMETER_1;
    if (ov == nullptr) return ND_INVALID_PARAMETER_2;
    const int e = ibv_dereg_mr(reinterpret_cast<ibv_mr*>(h));
    // A region windows are still bound to cannot go (verbs: EBUSY).
    const HRESULT r = e == 0 ? ND_SUCCESS : e == EBUSY ? ND_DEVICE_BUSY : from_errno(e);
    start(ov);
    finish(ov, r);
    return r;
}

// ND's windows are bound by a work request on an endpoint and may be invalidated by a peer's
// SendAndInvalidate: verbs' type 2 windows.
HRESULT Adapter::CreateMemoryWindow(ND_RESULT* invalidate_result, INDMemoryWindow** out) {
    if (invalidate_result == nullptr) return ND_INVALID_PARAMETER_1;
    if (out == nullptr) return ND_INVALID_PARAMETER_2;
    auto* w = new MemoryWindow(this, invalidate_result);
    w->mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (w->mw == nullptr) {
        const int e = errno;
        w->Release();
        return from_errno(e);
    }
    w->rkey = w->mw->rkey;
    if (!windows.put(w, w->rkey)) {
        w->Release();
        return ND_INSUFFICIENT_RESOURCES;
    }
    *out = w;
    return ND_SUCCESS;
}

MemoryWindow::~MemoryWindow() {
    adapter->windows.remove(this);
    if (mw != nullptr) ibv_dealloc_mw(mw);
    adapter->Release();
}

HRESULT Adapter::CreateConnector(INDConnector** out) {
    if (out == nullptr) return ND_INVALID_PARAMETER_1;
    *out = new Connector(this);
    return ND_SUCCESS;
}

HRESULT Adapter::Listen(SIZE_T backlog, INT, USHORT port, USHORT* assigned, INDListen** out) {
    if (out == nullptr) return ND_INVALID_PARAMETER_5;
    auto* l = new snic::nd::Listen(this);
    if (const HRESULT r = l->open(backlog, port, assigned); r != ND_SUCCESS) {
        l->Release();
        return r;
    }
    *out = l;
    return ND_SUCCESS;
}

// ---- the event thread ----

void Adapter::handle_cm_event(rdma_cm_event* e) {
    std::lock_guard lock(mu);
    if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        const auto l =
            std::find_if(listeners.begin(), listeners.end(),
                         [&](const snic::nd::Listen* x) { return x->id() == e->listen_id; });
        if (l != listeners.end()) {
            (*l)->request(e);
        } else {
            rdma_reject(e->id, nullptr, 0);
            retire_id(e->id);
        }
        return;
    }
    auto* c = static_cast<Connector*>(e->id->context);
    if (c != nullptr) c->handle(e);
}

void Adapter::handle_async_event(const ibv_async_event& e) {
    switch (e.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR: {
            std::lock_guard lock(mu);
            auto* ep = static_cast<Endpoint*>(e.element.qp->qp_context);
            if (ep != nullptr && ep->connector != nullptr) ep->connector->qp_failed();
            return;
        }
        default:
            return;
    }
}

void Adapter::handle_cq_event() {
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    while (ibv_get_cq_event(channel, &cq, &context) == 0) {
        static_cast<CompletionQueue*>(context)->notified();
        ibv_ack_cq_events(cq, 1);
    }
}

void Adapter::events_loop() {
    // A daemon that is gone hangs up the fds: each is polled no more once it has.
    bool cm_gone = false, cq_gone = false, dev_gone = false;
    for (;;) {
        pollfd fds[4] = {{cm_gone ? -1 : cm_channel->fd, POLLIN, 0},
                         {cq_gone ? -1 : channel->fd, POLLIN, 0},
                         {dev_gone ? -1 : ctx->async_fd, POLLIN, 0},
                         {wake_fd_, POLLIN, 0}};
        if (::poll(fds, 4, -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if ((fds[3].revents & POLLIN) != 0) {
            std::uint64_t v;
            [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &v, sizeof v);
            if (stopping_.load()) return;
        }
        constexpr short kReady = POLLIN | POLLHUP | POLLERR;
        if ((fds[0].revents & kReady) != 0) {
            rdma_cm_event* e = nullptr;
            while (rdma_get_cm_event(cm_channel, &e) == 0) {
                handle_cm_event(e);
                rdma_ack_cm_event(e);
            }
            if (errno != EAGAIN) cm_gone = true;
        }
        if ((fds[1].revents & kReady) != 0) {
            handle_cq_event();
            if (errno != EAGAIN) cq_gone = true;
        }
        if ((fds[2].revents & kReady) != 0) {
            ibv_async_event ae{};
            while (ibv_get_async_event(ctx, &ae) == 0) {
                handle_async_event(ae);
                ibv_ack_async_event(&ae);
            }
            if (errno != EAGAIN) dev_gone = true;
        }
        std::vector<rdma_cm_id*> ids;
        {
            std::lock_guard lock(mu);
            ids.swap(retired_ids_);
        }
        for (rdma_cm_id* id : ids) rdma_destroy_id(id);
    }
}

}  // namespace snic::nd

extern "C" __attribute__((visibility("default"))) HRESULT NdSnicOpenProvider(INDProvider** out) {
    if (out == nullptr) return ND_INVALID_PARAMETER_1;
    *out = new snic::nd::Provider;
    return ND_SUCCESS;
}
