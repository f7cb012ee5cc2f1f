// libdaplsnic: registration with libdat2, the IA, PZs, LMRs, RMRs, CNOs and the calls
// every handle answers (consumer context, handle type).
#include <arpa/inet.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstring>
#include <iterator>

#include "dapl/provider.h"
#include "libclient/snic/snic_ext.h"

namespace snic::dapl {

namespace {

// One registration per dat.conf line: the DAT_PROVIDER libdat2 dispatches through,
// and the device its instance data names ("<device> <port>").
struct Registration {
    DAT_PROVIDER provider{};
    DAT_PROVIDER_INFO info{};
    std::string device;
};

std::mutex g_reg_mu;
std::list<std::unique_ptr<Registration>> g_regs;

Registration* registration_of(const DAT_PROVIDER* p) {
    return static_cast<Registration*>(p->extension);
}

// Dead objects, oldest first. A stale handle stays answerable until this many other
// objects have died after it.
constexpr std::size_t kQuarantine = 1 << 16;
std::mutex g_dead_mu;
std::deque<Object*> g_dead;

}  // namespace

void retire(Object* o) {
    o->kind.store(Kind::dead, std::memory_order_release);
    Object* old = nullptr;
    {
        std::lock_guard lock(g_dead_mu);
        g_dead.push_back(o);
        if (g_dead.size() > kQuarantine) {
            old = g_dead.front();
            g_dead.pop_front();
        }
    }
    if (old != nullptr) old->destroy(old);
}

DAT_RETURN err(DAT_RETURN type, DAT_RETURN sub) {
    // As the DAT reference implementation builds it: the error class bit, the type and
    // the subtype.
    return static_cast<DAT_RETURN>(DAT_CLASS_ERROR | static_cast<DAT_UINT32>(type) |
                                   static_cast<DAT_UINT32>(sub));
}

// errno of a failed verbs or rdma_cm call, as DAT says it.
DAT_RETURN from_errno(int e) {
    switch (e) {
        case ENOMEM:
        case ENOSPC:
        case EDQUOT:
        case EAGAIN:
        case EMFILE:
        case ENFILE:
            return err(DAT_INSUFFICIENT_RESOURCES);
        case EINVAL:
        case ERANGE:
        case EOVERFLOW:
            return err(DAT_INVALID_PARAMETER);
        case EACCES:
        case EPERM:
            return err(DAT_PRIVILEGES_VIOLATION);
        case EADDRINUSE:
            return err(DAT_CONN_QUAL_IN_USE);
        case ENOTSUP:
            return err(DAT_MODEL_NOT_SUPPORTED);
        case ENODEV:
        case ENXIO:
            return err(DAT_PROVIDER_NOT_FOUND);
        case ETIMEDOUT:
            return err(DAT_TIMEOUT_EXPIRED);
        default:
            return err(DAT_INTERNAL_ERROR);
    }
}

Lmr* find_lmr(Ia* ia, DAT_LMR_CONTEXT ctx) {
    return ia->lmrs.find(ctx);
}

DAT_RETURN check_iov(Ia* ia, Pz* pz, DAT_COUNT n, const DAT_LMR_TRIPLET* iov, bool need_write,
                     ibv_sge* sge) {
    for (DAT_COUNT i = 0; i < n; ++i) {
        const DAT_LMR_TRIPLET& t = iov[i];
        Lmr* l = find_lmr(ia, t.lmr_context);
        // The post pages: an LMR that is invalid (never made, or freed) is a privileges
        // violation, as one without the privileges the access needs.
        if (l == nullptr) return err(DAT_PRIVILEGES_VIOLATION);
        if (t.virtual_address < l->addr ||
            t.virtual_address + t.segment_length > l->addr + l->length ||
            t.virtual_address + t.segment_length < t.virtual_address)
            return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
        if (l->pz != pz) return err(DAT_PROTECTION_VIOLATION);
        if (need_write && (l->priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG) == 0)
            return err(DAT_PRIVILEGES_VIOLATION);
        sge[i] = {t.virtual_address, t.segment_length, l->mr->lkey};
    }
    return DAT_SUCCESS;
}

namespace {

// ---- IA ----

DAT_RETURN open_device(Ia* ia) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return err(DAT_PROVIDER_NOT_FOUND);
    for (int i = 0; i < n && ia->ctx == nullptr; ++i)
        if (ia->device == ibv_get_device_name(list[i])) ia->ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (ia->ctx == nullptr) return err(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
    if (ibv_query_device(ia->ctx, &ia->dev_attr) != 0 ||
        ibv_query_port(ia->ctx, 1, &ia->port_attr) != 0)
        return err(DAT_INTERNAL_ERROR);
    // dapl2-utils read these to decide which tests the provider can run.
    std::snprintf(ia->mtu_text, sizeof ia->mtu_text, "%d", 128 << ia->port_attr.active_mtu);
    const DAT_NAMED_ATTR specific[kSpecificAttrs] = {
        {"DAT_IB_RDMA_READ", "TRUE"},           {DAT_IB_ATTR_CMP_AND_SWAP, "TRUE"},
        {DAT_IB_ATTR_FETCH_AND_ADD, "TRUE"},    {DAT_IB_ATTR_IMMED_DATA, "TRUE"},
        {"DAT_IB_TRANSPORT_MTU", ia->mtu_text}, {"DAT_IB_EP_RECV_QUERY", "TRUE"},
    };
    std::copy(std::begin(specific), std::end(specific), ia->specific);
    // The port's IPv4 address, from libsnic: an iWARP device's GIDs are MAC-based, so GID 0
    // (a RoCE device's ::ffff:a.b.c.d) is no address for it.
    ia->addr.sin_family = AF_INET;
    if (snic_query_port_ipv4(ia->ctx, 1, &ia->addr.sin_addr) != 0) return err(DAT_INTERNAL_ERROR);
    return DAT_SUCCESS;
}

void close_ia(Ia* ia) {
    stop_events(ia);
    if (ia->own_async_evd && ia->async_evd != nullptr) evd_free(ia->async_evd);
    if (ia->ctx != nullptr) ibv_close_device(ia->ctx);
    ia->ctx = nullptr;
}

}  // namespace

extern "C" DAT_RETURN snic_ia_open(const DAT_NAME_PTR name, DAT_COUNT async_qlen,
                                   DAT_EVD_HANDLE* async_evd, DAT_IA_HANDLE* out) {
    if (out == nullptr || async_evd == nullptr) return err(DAT_INVALID_PARAMETER);
    Registration* reg = nullptr;
    {
        std::lock_guard lock(g_reg_mu);
        for (auto& r : g_regs)
            if (std::strcmp(r->info.ia_name, name) == 0) reg = r.get();
    }
    if (reg == nullptr) return err(DAT_PROVIDER_NOT_FOUND, DAT_NAME_NOT_REGISTERED);
    auto ia = std::make_unique<Ia>(&reg->provider);
    ia->device = reg->device;
    if (const DAT_RETURN r = open_device(ia.get()); r != DAT_SUCCESS) {
        close_ia(ia.get());
        return r;
    }
    if (*async_evd == DAT_HANDLE_NULL) {
        DAT_EVD_HANDLE h = nullptr;
        if (const DAT_RETURN r = evd_create(ia.get(), async_qlen > 0 ? async_qlen : 8, nullptr,
                                            DAT_EVD_ASYNC_FLAG, &h);
            r != DAT_SUCCESS) {
            close_ia(ia.get());
            return r;
        }
        ia->async_evd = static_cast<Evd*>(h);
        ia->own_async_evd = true;
        *async_evd = h;
    } else {
        Evd* e = as<Evd>(*async_evd);
        if (e == nullptr || (e->flags & DAT_EVD_ASYNC_FLAG) == 0) {
            close_ia(ia.get());
            return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EVD_ASYNC);
        }
        ia->async_evd = e;
    }
    if (const DAT_RETURN r = start_events(ia.get()); r != DAT_SUCCESS) {
        close_ia(ia.get());
        return r;
    }
    *out = ia.release();
    return DAT_SUCCESS;
}

extern "C" DAT_RETURN snic_ia_close(DAT_IA_HANDLE h, DAT_CLOSE_FLAGS flags) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    // Graceful close asks that the consumer freed everything first; abrupt close
    // frees what is left with the device.
    if (flags == DAT_CLOSE_GRACEFUL_FLAG && ia->objects.load() > (ia->own_async_evd ? 1 : 0))
        return err(DAT_INVALID_STATE);
    close_ia(ia);
    retire(ia);
    return DAT_SUCCESS;
}

extern "C" DAT_RETURN snic_ia_query(DAT_IA_HANDLE h, DAT_EVD_HANDLE* async_evd,
                                    DAT_IA_ATTR_MASK ia_mask, DAT_IA_ATTR* a,
                                    DAT_PROVIDER_ATTR_MASK provider_mask, DAT_PROVIDER_ATTR* p) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    if ((a == nullptr && ia_mask != 0) || (p == nullptr && provider_mask != 0))
        return err(DAT_INVALID_PARAMETER, a == nullptr ? DAT_INVALID_ARG4 : DAT_INVALID_ARG6);
    if (async_evd != nullptr) *async_evd = ia->async_evd;
    const ibv_device_attr& d = ia->dev_attr;
    if (a != nullptr) {
        static DAT_NAMED_ATTR transport[] = {
            {DAT_IB_ATTR_FETCH_AND_ADD, "TRUE"}, {DAT_IB_ATTR_CMP_AND_SWAP, "TRUE"},
            {DAT_IB_ATTR_IMMED_DATA, "TRUE"},    {DAT_IB_ATTR_UD, "FALSE"},
            {"DAT_IB_TRANSPORT_MTU", "4096"},
        };
        *a = DAT_IA_ATTR{};
        std::snprintf(a->adapter_name, sizeof a->adapter_name, "%s", ia->device.c_str());
        std::snprintf(a->vendor_name, sizeof a->vendor_name, "snic");
        a->hardware_version_major = d.hw_ver;
        a->hardware_version_minor = 0;
        std::sscanf(d.fw_ver, "%u.%u", &a->firmware_version_major, &a->firmware_version_minor);
        a->ia_address_ptr = reinterpret_cast<DAT_IA_ADDRESS_PTR>(&ia->addr);
        a->max_eps = d.max_qp;
        a->max_dto_per_ep = d.max_qp_wr;
        a->max_rdma_read_per_ep_in = d.max_qp_rd_atom;
        a->max_rdma_read_per_ep_out = d.max_qp_init_rd_atom;
        a->max_evds = d.max_cq;
        a->max_evd_qlen = d.max_cqe;
        a->max_iov_segments_per_dto = d.max_sge;
        a->max_lmrs = d.max_mr;
        a->max_lmr_block_size =
            static_cast<DAT_SEG_LENGTH>(std::min<std::uint64_t>(d.max_mr_size, UINT32_MAX));
        a->max_lmr_virtual_address = UINT64_MAX;
        a->max_pzs = d.max_pd;
        a->max_message_size = ia->port_attr.max_msg_sz;  // the port's (IBA: at most 2^31)
        a->max_rdma_size = ia->port_attr.max_msg_sz;
        a->max_rmrs = d.max_mw;
        a->max_rmr_target_address = UINT64_MAX;
        a->max_srqs = d.max_srq;
        a->max_ep_per_srq = d.max_qp;
        a->max_recv_per_srq = d.max_srq_wr;
        a->max_iov_segments_per_rdma_read = d.max_sge;
        a->max_iov_segments_per_rdma_write = d.max_sge;
        a->max_rdma_read_in = d.max_qp_rd_atom;
        a->max_rdma_read_out = d.max_qp_init_rd_atom;
        a->max_rdma_read_per_ep_in_guaranteed = DAT_TRUE;
        a->max_rdma_read_per_ep_out_guaranteed = DAT_TRUE;
        a->zb_supported = DAT_FALSE;
        a->extension_supported = DAT_EXTENSION_IB;
        a->extension_version = DAT_IB_EXTENSION_VERSION;
        a->num_transport_attr = sizeof transport / sizeof transport[0];
        a->transport_attr = transport;
        a->num_vendor_attr = 0;
        a->vendor_attr = nullptr;
    }
    if (p != nullptr) {
        static const DAT_PROVIDER_ATTR proto = [] {
            DAT_PROVIDER_ATTR x{};
            // Every event stream may share an EVD with every other.
            auto* merge = const_cast<DAT_BOOLEAN*>(&x.evd_stream_merging_supported[0][0]);
            for (int i = 0; i < 36; ++i) merge[i] = DAT_TRUE;
            return x;
        }();
        std::memcpy(static_cast<void*>(p), &proto, sizeof *p);
        std::snprintf(p->provider_name, sizeof p->provider_name, "%s",
                      registration_of(ia->provider)->info.ia_name);
        std::sscanf(SNIC_VERSION, "%u.%u", &p->provider_version_major, &p->provider_version_minor);
        p->dapl_version_major = DAT_VERSION_MAJOR;
        p->dapl_version_minor = DAT_VERSION_MINOR;
        p->lmr_mem_types_supported = static_cast<DAT_MEM_TYPE>(
            DAT_MEM_TYPE_VIRTUAL | DAT_MEM_TYPE_LMR | DAT_MEM_TYPE_SHARED_VIRTUAL);
        p->iov_ownership_on_return = DAT_IOV_CONSUMER;
        p->dat_qos_supported = DAT_QOS_BEST_EFFORT;
        p->completion_flags_supported = static_cast<DAT_COMPLETION_FLAGS>(
            DAT_COMPLETION_SUPPRESS_FLAG | DAT_COMPLETION_SOLICITED_WAIT_FLAG |
            DAT_COMPLETION_UNSIGNALLED_FLAG | DAT_COMPLETION_BARRIER_FENCE_FLAG |
            DAT_COMPLETION_EVD_THRESHOLD_FLAG);
        p->is_thread_safe = registration_of(ia->provider)->info.is_thread_safe;
        p->max_private_data_size = kMaxPrivateData;
        p->supports_multipath = DAT_FALSE;
        p->ep_creator = DAT_PSP_CREATES_EP_IFASKED;
        p->pz_support = DAT_PZ_UNIQUE;
        p->optimal_buffer_alignment = 64;
        p->srq_supported = DAT_TRUE;
        p->srq_watermarks_supported = 1;  // the low watermark
        p->srq_ep_pz_difference_supported = DAT_FALSE;
        p->srq_info_supported = 1;
        p->ep_recv_info_supported = 1;
        p->lmr_sync_req = DAT_FALSE;
        p->dto_async_return_guaranteed = DAT_FALSE;
        p->rdma_write_for_rdma_read_req = DAT_FALSE;
        p->rdma_read_lmr_rmr_context_exposure = DAT_FALSE;
        p->rmr_scope_supported = DAT_RMR_SCOPE_PZ;
        p->is_signal_safe = DAT_FALSE;
        p->ha_supported = DAT_FALSE;
        p->ha_loadbalancing = DAT_HA_LB_NONE;
        p->num_provider_specific_attr = kSpecificAttrs;
        p->provider_specific_attr = ia->specific;
    }
    return DAT_SUCCESS;
}

namespace {

DAT_RETURN set_consumer_context(DAT_HANDLE h, DAT_CONTEXT c) {
    auto* o = static_cast<Object*>(h);
    if (o == nullptr || o->kind.load() == Kind::dead) return err(DAT_INVALID_HANDLE);
    o->context = c;
    return DAT_SUCCESS;
}

DAT_RETURN get_consumer_context(DAT_HANDLE h, DAT_CONTEXT* c) {
    auto* o = static_cast<Object*>(h);
    if (o == nullptr || o->kind.load() == Kind::dead) return err(DAT_INVALID_HANDLE);
    if (c == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    *c = o->context;
    return DAT_SUCCESS;
}

DAT_RETURN get_handle_type(DAT_HANDLE h, DAT_HANDLE_TYPE* t) {
    auto* o = static_cast<Object*>(h);
    if (o == nullptr || o->kind.load() == Kind::dead) return err(DAT_INVALID_HANDLE);
    if (t == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    *t = o->type;
    return DAT_SUCCESS;
}

// ---- PZ ----

DAT_RETURN pz_create(DAT_IA_HANDLE h, DAT_PZ_HANDLE* out) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    auto pz = std::make_unique<Pz>(ia->provider, ia);
    pz->pd = ibv_alloc_pd(ia->ctx);
    if (pz->pd == nullptr) return from_errno(errno);
    ++ia->objects;
    *out = pz.release();
    return DAT_SUCCESS;
}

DAT_RETURN pz_query(DAT_PZ_HANDLE h, DAT_PZ_PARAM_MASK, DAT_PZ_PARAM* p) {
    Pz* pz = as<Pz>(h);
    if (pz == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    p->ia_handle = pz->ia;
    return DAT_SUCCESS;
}

DAT_RETURN pz_free(DAT_PZ_HANDLE h) {
    Pz* pz = as<Pz>(h);
    if (pz == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    if (pz->users.load() != 0) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE);
    if (ibv_dealloc_pd(pz->pd) != 0) return from_errno(errno);
    --pz->ia->objects;
    retire(pz);
    return DAT_SUCCESS;
}

// ---- LMR ----

int access_of(DAT_MEM_PRIV_FLAGS priv) {
    int a = 0;
    if ((priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG) != 0) a |= IBV_ACCESS_LOCAL_WRITE;
    if ((priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG) != 0)
        a |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if ((priv & DAT_MEM_PRIV_REMOTE_READ_FLAG) != 0) a |= IBV_ACCESS_REMOTE_READ;
    if ((static_cast<int>(priv) & static_cast<int>(DAT_IB_MEM_PRIV_REMOTE_ATOMIC)) != 0)
        a |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
    return a | IBV_ACCESS_MW_BIND;
}

DAT_RETURN lmr_create(DAT_IA_HANDLE h, DAT_MEM_TYPE type, DAT_REGION_DESCRIPTION region,
                      DAT_VLEN length, DAT_PZ_HANDLE pzh, DAT_MEM_PRIV_FLAGS priv,
                      DAT_VA_TYPE va_type, DAT_LMR_HANDLE* out, DAT_LMR_CONTEXT* lctx,
                      DAT_RMR_CONTEXT* rctx, DAT_VLEN* reg_len, DAT_VADDR* reg_addr) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    Pz* pz = as<Pz>(pzh);
    if (pz == nullptr || pz->ia != ia) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
    if (va_type != DAT_VA_TYPE_VA) return err(DAT_MODEL_NOT_SUPPORTED);  // no zero-based
    void* addr = nullptr;
    switch (type) {
        case DAT_MEM_TYPE_VIRTUAL:
            addr = region.for_va;
            break;
        case DAT_MEM_TYPE_LMR: {
            Lmr* base = as<Lmr>(region.for_lmr_handle);
            if (base == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
            addr = reinterpret_cast<void*>(base->addr);
            length = base->length;
            break;
        }
        case DAT_MEM_TYPE_SHARED_VIRTUAL:
            // The region is the calling process's mapping of the shared memory; the
            // cookie only names the memory to other processes.
            addr = region.for_shared_memory.virtual_address;
            break;
        default:
            return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    }
    if (length == 0) return err(DAT_LENGTH_ERROR);
    if (addr == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    auto l = std::make_unique<Lmr>(ia->provider, ia);
    l->mr = ibv_reg_mr(pz->pd, addr, length, access_of(priv));
    if (l->mr == nullptr) return from_errno(errno);
    l->pz = pz;
    l->mem_type = type;
    l->region = region;
    l->priv = priv;
    l->addr = reinterpret_cast<DAT_VADDR>(addr);
    l->length = length;
    ia->lmrs.put(l->mr->lkey, l.get());
    ++pz->users;
    ++ia->objects;
    if (lctx != nullptr) *lctx = l->mr->lkey;
    if (rctx != nullptr) *rctx = l->mr->rkey;
    if (reg_len != nullptr) *reg_len = length;
    if (reg_addr != nullptr) *reg_addr = l->addr;
    *out = l.release();
    return DAT_SUCCESS;
}

DAT_RETURN lmr_query(DAT_LMR_HANDLE h, DAT_LMR_PARAM_MASK, DAT_LMR_PARAM* p) {
    Lmr* l = as<Lmr>(h);
    if (l == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    p->ia_handle = l->ia;
    p->mem_type = l->mem_type;
    p->region_desc = l->region;
    p->length = l->length;
    p->pz_handle = l->pz;
    p->mem_priv = l->priv;
    p->va_type = DAT_VA_TYPE_VA;
    p->lmr_context = l->mr->lkey;
    p->rmr_context = l->mr->rkey;
    p->registered_size = l->length;
    p->registered_address = l->addr;
    return DAT_SUCCESS;
}

DAT_RETURN lmr_free(DAT_LMR_HANDLE h) {
    Lmr* l = as<Lmr>(h);
    if (l == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
    if (l->users.load() != 0) return err(DAT_INVALID_STATE, DAT_INVALID_STATE_LMR_IN_USE);
    l->ia->lmrs.put(l->mr->lkey, nullptr);
    if (ibv_dereg_mr(l->mr) != 0) return from_errno(errno);
    --l->pz->users;
    --l->ia->objects;
    retire(l);
    return DAT_SUCCESS;
}

DAT_RETURN lmr_sync(DAT_IA_HANDLE h, const DAT_LMR_TRIPLET* iov, DAT_VLEN n) {
    Ia* ia = as<Ia>(h);
    if (ia == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
    for (DAT_VLEN i = 0; i < n; ++i)
        if (find_lmr(ia, iov[i].lmr_context) == nullptr) return err(DAT_INVALID_PARAMETER);
    return DAT_SUCCESS;  // placement is coherent with the CPU: nothing to flush
}

// ---- RMR ----

DAT_RETURN rmr_create_type(DAT_PZ_HANDLE h, DAT_RMR_HANDLE* out, ibv_mw_type type) {
    Pz* pz = as<Pz>(h);
    if (pz == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
    if (out == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
    auto r = std::make_unique<Rmr>(pz->provider, pz->ia);
    r->mw = ibv_alloc_mw(pz->pd, type);
    if (r->mw == nullptr) return from_errno(errno);
    r->rkey = r->mw->rkey;
    r->pz = pz;
    ++pz->users;
    ++pz->ia->objects;
    *out = r.release();
    return DAT_SUCCESS;
}

DAT_RETURN rmr_create(DAT_PZ_HANDLE h, DAT_RMR_HANDLE* out) {
    return rmr_create_type(h, out, IBV_MW_TYPE_1);
}

DAT_RETURN rmr_create_for_ep(DAT_PZ_HANDLE h, DAT_RMR_HANDLE* out) {
    return rmr_create_type(h, out, IBV_MW_TYPE_2);
}

DAT_RETURN rmr_query(DAT_RMR_HANDLE h, DAT_RMR_PARAM_MASK, DAT_RMR_PARAM* p) {
    Rmr* r = as<Rmr>(h);
    if (r == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
    if (p == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    p->ia_handle = r->ia;
    p->pz_handle = r->pz;
    p->lmr_triplet = r->triplet;
    p->mem_priv = r->priv;
    p->rmr_context = r->rkey;
    p->rmr_scope = r->mw->type == IBV_MW_TYPE_2 ? DAT_RMR_SCOPE_EP : DAT_RMR_SCOPE_PZ;
    p->va_type = DAT_VA_TYPE_VA;
    return DAT_SUCCESS;
}

DAT_RETURN rmr_bind(DAT_RMR_HANDLE rh, DAT_LMR_HANDLE lh, const DAT_LMR_TRIPLET* t,
                    DAT_MEM_PRIV_FLAGS priv, DAT_VA_TYPE va_type, DAT_EP_HANDLE eh,
                    DAT_RMR_COOKIE cookie, DAT_COMPLETION_FLAGS flags, DAT_RMR_CONTEXT* out) {
    Rmr* r = as<Rmr>(rh);
    if (r == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
    Ep* ep = as<Ep>(eh);
    if (ep == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_EP);
    if (va_type != DAT_VA_TYPE_VA) return err(DAT_MODEL_NOT_SUPPORTED);
    if (t == nullptr) return err(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
    Lmr* l = nullptr;
    if (t->segment_length != 0) {  // a zero length unbinds
        l = as<Lmr>(lh);
        if (l == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
        if (l->pz != r->pz || ep->pz != r->pz) return err(DAT_PROTECTION_VIOLATION);
        if (t->virtual_address < l->addr ||
            t->virtual_address + t->segment_length > l->addr + l->length)
            return err(DAT_LENGTH_ERROR);
    }
    if (ep->state != DAT_EP_STATE_CONNECTED)
        return err(DAT_INVALID_STATE, DAT_INVALID_STATE_EP_NOTREADY);
    std::lock_guard lock(ep->post_mu);
    Slot* s = ep->sq.take();
    if (s == nullptr) return err(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_TEP);
    s->rmr_cookie = cookie;
    s->rmr = r;
    s->op = -1;
    s->length = 0;
    ibv_mw_bind_info info{};
    info.mr = l != nullptr ? l->mr : nullptr;
    info.addr = t->virtual_address;
    info.length = t->segment_length;
    info.mw_access_flags = access_of(priv) & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    const unsigned send_flags = (flags & DAT_COMPLETION_SUPPRESS_FLAG) != 0 ? 0 : IBV_SEND_SIGNALED;
    int e = 0;
    if (r->mw->type == IBV_MW_TYPE_2) {
        // An RMR for an EP is a type 2 window: a Bind MW work request binds it, under a key
        // whose low byte the consumer advances (ibv_bind_mw binds type 1 windows only).
        ibv_send_wr wr{};
        wr.wr_id = reinterpret_cast<std::uintptr_t>(s);
        wr.opcode = IBV_WR_BIND_MW;
        wr.send_flags = send_flags;
        wr.bind_mw.mw = r->mw;
        wr.bind_mw.rkey = ibv_inc_rkey(r->rkey);
        wr.bind_mw.bind_info = info;
        ibv_send_wr* bad = nullptr;
        e = ibv_post_send(ep->qp, &wr, &bad);
        if (e == 0) r->rkey = wr.bind_mw.rkey;
    } else {
        ibv_mw_bind b{};
        b.wr_id = reinterpret_cast<std::uintptr_t>(s);
        b.send_flags = send_flags;
        b.bind_info = info;
        e = ibv_bind_mw(ep->qp, r->mw, &b);
        if (e == 0) r->rkey = r->mw->rkey;
    }
    if (e != 0) {
        ep->sq.untake();
        return from_errno(e);
    }
    if (r->lmr != nullptr) --r->lmr->users;
    r->lmr = l;
    if (l != nullptr) ++l->users;
    r->triplet = *t;
    r->priv = priv;
    if (out != nullptr) *out = r->rkey;
    return DAT_SUCCESS;
}

DAT_RETURN rmr_free(DAT_RMR_HANDLE h) {
    Rmr* r = as<Rmr>(h);
    if (r == nullptr) return err(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_RMR);
    if (ibv_dealloc_mw(r->mw) != 0) return from_errno(errno);
    if (r->lmr != nullptr) --r->lmr->users;
    --r->pz->users;
    --r->ia->objects;
    retire(r);
    return DAT_SUCCESS;
}

// ---- extension operations ----

}  // namespace

DAT_RETURN ep_extension_entry(DAT_HANDLE h, DAT_EXTENDED_OP op, va_list args) {
    if (Ep* ep = as<Ep>(h); ep != nullptr) return ep_extension(ep, op, args);
    if (as<Ia>(h) != nullptr && (op == DAT_IB_QUERY_COUNTERS_OP || op == DAT_IB_PRINT_COUNTERS_OP))
        return err(DAT_NOT_IMPLEMENTED);
    return err(DAT_INVALID_HANDLE);
}

namespace {

DAT_RETURN ha_related(DAT_IA_HANDLE, const DAT_NAME_PTR, DAT_BOOLEAN* answer) {
    if (answer != nullptr) *answer = DAT_FALSE;
    return DAT_SUCCESS;
}

DAT_RETURN csp_unsupported_create(DAT_IA_HANDLE, DAT_COMM*, DAT_IA_ADDRESS_PTR, DAT_EVD_HANDLE,
                                  DAT_CSP_HANDLE*) {
    return err(DAT_NOT_IMPLEMENTED);
}
DAT_RETURN csp_unsupported_query(DAT_CSP_HANDLE, DAT_CSP_PARAM_MASK, DAT_CSP_PARAM*) {
    return err(DAT_INVALID_HANDLE);
}
DAT_RETURN csp_unsupported_free(DAT_CSP_HANDLE) {
    return err(DAT_INVALID_HANDLE);
}

void fill_provider(DAT_PROVIDER& p) {
    p.ia_open_func = snic_ia_open;
    p.ia_query_func = snic_ia_query;
    p.ia_close_func = snic_ia_close;
    p.set_consumer_context_func = set_consumer_context;
    p.get_consumer_context_func = get_consumer_context;
    p.get_handle_type_func = get_handle_type;
    p.pz_create_func = pz_create;
    p.pz_query_func = pz_query;
    p.pz_free_func = pz_free;
    p.lmr_create_func = lmr_create;
    p.lmr_query_func = lmr_query;
    p.lmr_free_func = lmr_free;
    p.lmr_sync_rdma_read_func = lmr_sync;
    p.lmr_sync_rdma_write_func = lmr_sync;
    p.rmr_create_func = rmr_create;
    p.rmr_create_for_ep_func = rmr_create_for_ep;
    p.rmr_query_func = rmr_query;
    p.rmr_bind_func = rmr_bind;
    p.rmr_free_func = rmr_free;
    p.csp_create_func = csp_unsupported_create;
    p.csp_query_func = csp_unsupported_query;
    p.csp_free_func = csp_unsupported_free;
    p.ia_ha_related_func = ha_related;
    p.handle_extendedop_func = ep_extension_entry;
    fill_provider_evd(p);
    fill_provider_ep(p);
    fill_provider_connect(p);
    fill_provider_srq(p);
}

}  // namespace

}  // namespace snic::dapl

using namespace snic::dapl;

// libdat2 calls this once per dat.conf line naming this library. The instance data
// is "<device> [<port>]": the snic device (ibv_devices lists them) whose port 1 the
// IA drives.
extern "C" __attribute__((visibility("default"))) void dat_provider_init(
    const DAT_PROVIDER_INFO* info, const char* instance_data) {
    if (info == nullptr || instance_data == nullptr) return;
    auto reg = std::make_unique<Registration>();
    reg->info = *info;
    const char* s = instance_data;
    while (*s == ' ' || *s == '"') ++s;
    const char* e = s;
    while (*e != '\0' && *e != ' ' && *e != '"') ++e;
    reg->device.assign(s, e);
    if (reg->device.empty()) {
        std::fprintf(stderr, "libdaplsnic: %s: instance data names no device\n", info->ia_name);
        return;
    }
    reg->provider.device_name = reg->info.ia_name;
    reg->provider.extension = reg.get();
    fill_provider(reg->provider);
    if (dat_registry_add_provider(&reg->provider, &reg->info) != DAT_SUCCESS) {
        std::fprintf(stderr, "libdaplsnic: %s: the registry refused the provider\n", info->ia_name);
        return;
    }
    std::lock_guard lock(g_reg_mu);
    g_regs.push_back(std::move(reg));
}

// libdat2 looks this symbol up to tell a provider built with the DAT extensions.
extern "C" __attribute__((visibility("default"))) DAT_RETURN dapl_extensions(DAT_HANDLE h,
                                                                             DAT_EXTENDED_OP op,
                                                                             va_list args) {
    return snic::dapl::ep_extension_entry(h, op, args);
}

extern "C" __attribute__((visibility("default"))) void dat_provider_fini(
    const DAT_PROVIDER_INFO* info) {
    std::lock_guard lock(g_reg_mu);
    for (auto it = g_regs.begin(); it != g_regs.end(); ++it)
        if (std::strcmp((*it)->info.ia_name, info->ia_name) == 0) {
            dat_registry_remove_provider(&(*it)->provider, &(*it)->info);
            g_regs.erase(it);
            return;
        }
}
