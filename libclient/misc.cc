// Address handles (kept in libsnic: an AH only carries an address), the
// string and rate helpers, sysfs, fork support, multicast, and the verbs snic
// refuses with a documented errno.
#include <fcntl.h>
#include <sys/mman.h>

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

#include "libclient/internal.h"
#include "libclient/memory.h"

namespace snic::client {

namespace {

constexpr std::size_t kMaxAh = 65536;  // per context; reported as max_ah

bool ipv4_mapped(const ibv_gid& g) {
    static const std::uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(g.raw, prefix, 12) == 0;
}

// The context's GID 0 (::ffff:a.b.c.d); 0 or an errno.
int own_gid(ibv_context* c, ibv_gid* gid) {
    shm::QueryPortReply r{};
    if (const int err = query_port_internal(to_ctx(c), 1, nullptr, &r); err != 0) return err;
    std::memset(gid, 0, sizeof *gid);
    gid->raw[10] = gid->raw[11] = 0xff;
    const std::uint32_t be = htonl(r.ipv4);
    std::memcpy(gid->raw + 12, &be, 4);
    return 0;
}

}  // namespace

ibv_ah* create_ah_internal(ibv_pd* pd, ibv_ah_attr* attr) {
    Context* ctx = to_ctx(pd->context);
    // iWARP is connected: no UD, so no address handles (max_ah 0), as on Linux's soft-iWARP.
    if (ctx->device->transport == shm::kTransportIwarp) return fail_null<ibv_ah>(EOPNOTSUPP);
    // RoCE: every address is global (a GRH), from GID 0 of port 1, to an IPv4-mapped GID.
    if (attr->port_num != 1 || !attr->is_global || attr->grh.sgid_index != 0 ||
        !ipv4_mapped(attr->grh.dgid))
        return fail_null<ibv_ah>(EINVAL);
    auto ah = std::make_unique<Ah>();
    ah->ah.context = pd->context;
    ah->ah.pd = pd;
    ah->attr = *attr;
    std::lock_guard lock(ctx->objs_mu);
    if (ctx->ahs.size() >= kMaxAh) return fail_null<ibv_ah>(ENOMEM);
    ah->ah.handle = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(ah.get()));
    ctx->ahs.insert(ah.get());
    return &ah.release()->ah;
}

int init_ah_from_wc_internal(ibv_context* c, std::uint8_t port, const ibv_wc* wc,
                             const ibv_grh* grh, ibv_ah_attr* ah) {
    if (port != 1) return EINVAL;
    std::memset(ah, 0, sizeof *ah);
    ah->port_num = port;
    ah->dlid = wc->slid;
    ah->sl = wc->sl;
    ah->src_path_bits = wc->dlid_path_bits;
    if ((wc->wc_flags & IBV_WC_GRH) == 0) return 0;
    if (grh == nullptr) return EINVAL;
    ibv_gid own;
    if (const int err = own_gid(c, &own); err != 0) return err;
    ah->is_global = 1;
    ah->grh.hop_limit = 0xff;
    ah->grh.sgid_index = 0;
    const auto* raw = reinterpret_cast<const std::uint8_t*>(grh);
    ibv_gid local{};
    if (raw[20] == 0x45) {
        // RoCEv2 over IPv4: the 40-byte GRH area holds the IPv4 header in its last 20 bytes.
        ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xff;
        std::memcpy(ah->grh.dgid.raw + 12, raw + 32, 4);  // source address
        local.raw[10] = local.raw[11] = 0xff;
        std::memcpy(local.raw + 12, raw + 36, 4);  // destination address
        ah->grh.traffic_class = raw[21];
    } else {
        const std::uint32_t vtf = ntohl(grh->version_tclass_flow);
        ah->grh.dgid = grh->sgid;
        local = grh->dgid;
        ah->grh.flow_label = vtf & 0xfffff;
        ah->grh.traffic_class = static_cast<std::uint8_t>((vtf >> 20) & 0xff);
    }
    if (std::memcmp(local.raw, own.raw, 16) != 0) return EINVAL;  // not addressed to this port
    return 0;
}

}  // namespace snic::client

using namespace snic::client;
namespace shm = snic::shm;

// ---- address handles ---------------------------------------------------------------

SNIC_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    return guarded<ibv_ah*>(nullptr, [&] { return create_ah_internal(pd, attr); });
}

SNIC_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
    return errno_verb([&] {
        Context* ctx = to_ctx(ah->context);
        {
            std::lock_guard lock(ctx->objs_mu);
            ctx->ahs.erase(to_ah(ah));
        }
        delete to_ah(ah);
        return 0;
    });
}

SNIC_EXPORT int ibv_init_ah_from_wc(ibv_context* c, std::uint8_t port, ibv_wc* wc, ibv_grh* grh,
                                    ibv_ah_attr* ah) {
    return guarded(-1, [&] {
        if (const int err = init_ah_from_wc_internal(c, port, wc, grh, ah); err != 0) {
            errno = err;
            return -1;
        }
        return 0;
    });
}

SNIC_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, std::uint8_t port) {
    return guarded<ibv_ah*>(nullptr, [&]() -> ibv_ah* {
        ibv_ah_attr attr;
        if (const int err = init_ah_from_wc_internal(pd->context, port, wc, grh, &attr); err != 0)
            return fail_null<ibv_ah>(err);
        return create_ah_internal(pd, &attr);
    });
}

// ---- multicast: not supported -------------------------------------------------------

SNIC_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) {
    return fail_status(EOPNOTSUPP);
}
SNIC_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, std::uint16_t) {
    return fail_status(EOPNOTSUPP);
}

// ---- strings -------------------------------------------------------------------------

SNIC_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
    static const char* const str[] = {
        "success",
        "local length error",
        "local QP operation error",
        "local EE context operation error",
        "local protection error",
        "Work Request Flushed Error",
        "memory management operation error",
        "bad response error",
        "local access error",
        "remote invalid request error",
        "remote access error",
        "remote operation error",
        "transport retry counter exceeded",
        "RNR retry counter exceeded",
        "local RDD violation error",
        "remote invalid RD request",
        "aborted error",
        "invalid EE context number",
        "invalid EE context state",
        "fatal error",
        "response timeout error",
        "general error",
        "TM error",
        "TM software rendezvous",
    };
    const auto i = static_cast<unsigned>(status);
    return i < sizeof str / sizeof *str ? str[i] : "unknown";
}

SNIC_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
    static const char* const str[] = {
        "CQ error",
        "local work queue catastrophic error",
        "invalid request local work queue error",
        "local access violation work queue error",
        "communication established",
        "send queue drained",
        "path migrated",
        "path migration request error",
        "local catastrophic error",
        "port active",
        "port error",
        "LID change",
        "P_Key change",
        "SM change",
        "SRQ catastrophic error",
        "SRQ limit reached",
        "last WQE reached",
        "client reregistration",
        "GID table change",
        "WQ fatal",
    };
    const auto i = static_cast<unsigned>(event);
    return i < sizeof str / sizeof *str ? str[i] : "unknown";
}

SNIC_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
    switch (node_type) {
        case IBV_NODE_CA:
            return "InfiniBand channel adapter";
        case IBV_NODE_SWITCH:
            return "InfiniBand switch";
        case IBV_NODE_ROUTER:
            return "InfiniBand router";
        case IBV_NODE_RNIC:
            return "iWARP NIC";
        case IBV_NODE_USNIC:
            return "usNIC";
        case IBV_NODE_USNIC_UDP:
            return "usNIC UDP";
        case IBV_NODE_UNSPECIFIED:
            return "unspecified";
        default:
            return "unknown";
    }
}

SNIC_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
    static const char* const str[] = {"no state change (NOP)", "down", "init", "armed", "active",
                                      "active defer"};
    const auto i = static_cast<unsigned>(port_state);
    return i < sizeof str / sizeof *str ? str[i] : "unknown";
}

// ---- rates ----------------------------------------------------------------------------

namespace {

struct RateRow {
    ibv_rate rate;
    int mult;  // of 2.5 Gb/s, -1 when not a multiple
    int mbps;
};
constexpr RateRow kRates[] = {
    {IBV_RATE_2_5_GBPS, 1, 2500},       {IBV_RATE_5_GBPS, 2, 5000},
    {IBV_RATE_10_GBPS, 4, 10000},       {IBV_RATE_20_GBPS, 8, 20000},
    {IBV_RATE_30_GBPS, 12, 30000},      {IBV_RATE_40_GBPS, 16, 40000},
    {IBV_RATE_60_GBPS, 24, 60000},      {IBV_RATE_80_GBPS, 32, 80000},
    {IBV_RATE_120_GBPS, 48, 120000},    {IBV_RATE_14_GBPS, -1, 14062},
    {IBV_RATE_56_GBPS, -1, 56250},      {IBV_RATE_112_GBPS, -1, 112500},
    {IBV_RATE_168_GBPS, -1, 168750},    {IBV_RATE_25_GBPS, -1, 25781},
    {IBV_RATE_100_GBPS, -1, 103125},    {IBV_RATE_200_GBPS, -1, 206250},
    {IBV_RATE_300_GBPS, -1, 309375},    {IBV_RATE_28_GBPS, -1, 28125},
    {IBV_RATE_50_GBPS, 20, 53125},      {IBV_RATE_400_GBPS, 160, 425000},
    {IBV_RATE_600_GBPS, 240, 637500},   {IBV_RATE_800_GBPS, 320, 850000},
    {IBV_RATE_1200_GBPS, 480, 1275000},
};

}  // namespace

SNIC_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
    for (const RateRow& r : kRates)
        if (r.rate == rate) return r.mult;
    return -1;
}

SNIC_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
    for (const RateRow& r : kRates)
        if (r.mult == mult) return r.rate;
    return IBV_RATE_MAX;
}

SNIC_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
    for (const RateRow& r : kRates)
        if (r.rate == rate) return r.mbps;
    return -1;
}

SNIC_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
    for (const RateRow& r : kRates)
        if (r.mbps == mbps) return r.rate;
    return IBV_RATE_MAX;
}

// ---- sysfs (rdma-core's driver.h helpers; snic devices have no sysfs entries) ----------

SNIC_EXPORT const char* ibv_get_sysfs_path(void) {
    return "/sys";
}

SNIC_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf,
                                    std::size_t size) {
    char path[512];
    if (std::snprintf(path, sizeof path, "%s/%s", dir, file) >= static_cast<int>(sizeof path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
    if (!fd) return -1;
    const ssize_t n = ::read(fd.get(), buf, size);
    if (n < 0) return -1;
    if (static_cast<std::size_t>(n) == size) {
        if (size == 0) return 0;
        buf[size - 1] = '\0';
    } else {
        buf[n] = '\0';
    }
    if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = '\0';
    return static_cast<int>(n);
}

// ---- fork ----------------------------------------------------------------------------------

// A child made by fork gets its own copy of registered memory and the parent keeps its pages
// (memory.cc), as Linux gives a child copies of pinned pages: nothing to initialise, and
// IBV_FORK_UNNEEDED whether or not ibv_fork_init was called, as rdma-core says on such a kernel.
SNIC_EXPORT int ibv_fork_init(void) {
    return 0;
}

SNIC_EXPORT ibv_fork_status ibv_is_fork_initialized(void) {
    return IBV_FORK_UNNEEDED;
}

SNIC_EXPORT int ibv_dontfork_range(void* base, std::size_t size) {
    return ::madvise(base, size, MADV_DONTFORK) == 0 ? 0 : errno;
}

SNIC_EXPORT int ibv_dofork_range(void* base, std::size_t size) {
    return ::madvise(base, size, MADV_DOFORK) == 0 ? 0 : errno;
}

// ---- what snic does not do (documented in docs/LIBSNIC.md) ------------------------------

SNIC_EXPORT ibv_context* ibv_import_device(int) {
    return fail_null<ibv_context>(EOPNOTSUPP);
}
SNIC_EXPORT ibv_pd* ibv_import_pd(ibv_context*, std::uint32_t) {
    return fail_null<ibv_pd>(EOPNOTSUPP);
}
SNIC_EXPORT void ibv_unimport_pd(ibv_pd*) {}
SNIC_EXPORT ibv_mr* ibv_import_mr(ibv_pd*, std::uint32_t) {
    return fail_null<ibv_mr>(EOPNOTSUPP);
}
SNIC_EXPORT void ibv_unimport_mr(ibv_mr*) {}
SNIC_EXPORT ibv_dm* ibv_import_dm(ibv_context*, std::uint32_t) {
    return fail_null<ibv_dm>(EOPNOTSUPP);
}
SNIC_EXPORT void ibv_unimport_dm(ibv_dm*) {}
SNIC_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) {
    return fail_status(EOPNOTSUPP);
}
SNIC_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) {
    return fail_status(EOPNOTSUPP);
}
SNIC_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, std::uint32_t) {
    return 0;
}
