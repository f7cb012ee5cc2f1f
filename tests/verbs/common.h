// What the programs of tests/verbs share: opening a snic device by name, the bring-up of an RC
// QP (RESET -> INIT -> RTR -> RTS over RoCEv2 on port 1, GID index 0) with the attributes that
// differ between the programs as parameters, polling a CQ with a deadline, the free huge pages,
// and fail() for the programs without gtest. Plain libibverbs calls: a gtest program asserts
// on what they return.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace snic::verbs_test {

// Prints "PROGRAM: MESSAGE" on stderr and exits 1.
[[noreturn, gnu::format(printf, 1, 2)]] inline void fail(const char* fmt, ...) {
    std::va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "%s: ", program_invocation_short_name);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    std::exit(1);
}

// The device names listed in environment variable `var`, white space between them.
inline std::vector<std::string> device_names(const char* var) {
    const char* env = std::getenv(var);
    std::vector<std::string> names;
    std::istringstream in(env != nullptr ? env : "");
    for (std::string n; in >> n;) names.push_back(n);
    return names;
}

// The device called `name`, opened; nullptr when there is none (errno says why, if anything).
inline ibv_context* open_device(std::string_view name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) return nullptr;
    ibv_context* ctx = nullptr;
    for (int i = 0; i < n && ctx == nullptr; ++i)
        if (name == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    return ctx;
}

// Where a peer's QP reaches this device: port 1's GID 0 (an IPv4-mapped address) and the
// port's active MTU.
struct PortAddress {
    ibv_gid gid{};
    ibv_mtu mtu = IBV_MTU_1024;
};

// Fills `out` from `ctx`; false (errno set) when the port or its GID cannot be queried.
inline bool query_address(ibv_context* ctx, PortAddress& out) {
    ibv_port_attr port{};
    if (ibv_query_port(ctx, 1, &port) != 0 || ibv_query_gid(ctx, 1, 0, &out.gid) != 0) return false;
    out.mtu = port.active_mtu;
    return true;
}

// The attributes of an RC bring-up that a program chooses. The rest is the same everywhere:
// port 1, pkey index 0, GID index 0, hop limit 64.
struct RcParams {
    unsigned access = IBV_ACCESS_REMOTE_WRITE;  // INIT's qp_access_flags
    std::uint32_t rq_psn = 0;                   // the first PSN the responder expects
    std::uint32_t sq_psn = 0;                   // the first PSN the requester sends
    std::uint8_t rd_atomic = 1;                 // RTR's max_dest_rd_atomic, RTS's max_rd_atomic
    std::uint8_t min_rnr_timer = 1;
    std::uint8_t timeout = 14;
    std::uint8_t retry_cnt = 7;
    std::uint8_t rnr_retry = 7;  // 7: an RNR NAK is retried for ever
};

inline constexpr int kInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
inline constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
inline constexpr int kRtsMask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

// RESET -> INIT (kInitMask).
inline ibv_qp_attr init_attr(unsigned access) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = access;
    return a;
}

// INIT -> RTR towards QP `dest_qpn` at GID `dgid` (kRtrMask).
inline ibv_qp_attr rtr_attr(ibv_mtu path_mtu, std::uint32_t dest_qpn, const ibv_gid& dgid,
                            const RcParams& p) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path_mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = p.rq_psn;
    a.max_dest_rd_atomic = p.rd_atomic;
    a.min_rnr_timer = p.min_rnr_timer;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = dgid;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    return a;
}

// RTR -> RTS (kRtsMask).
inline ibv_qp_attr rts_attr(const RcParams& p) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = p.timeout;
    a.retry_cnt = p.retry_cnt;
    a.rnr_retry = p.rnr_retry;
    a.sq_psn = p.sq_psn;
    a.max_rd_atomic = p.rd_atomic;
    return a;
}

// What a bring-up came to: `err` 0, or ibv_modify_qp's error on the way to `state`.
struct ModifyResult {
    int err = 0;
    const char* state = "RTS";
};

// `qp`, in INIT, through RTR to RTS towards QP `dest_qpn` at `remote`, the path MTU the
// smaller of the two ports'. Stops at the first step refused.
inline ModifyResult connect_from_init(ibv_qp* qp, const PortAddress& local, std::uint32_t dest_qpn,
                                      const PortAddress& remote, const RcParams& p) {
    ibv_qp_attr a = rtr_attr(std::min(local.mtu, remote.mtu), dest_qpn, remote.gid, p);
    if (const int err = ibv_modify_qp(qp, &a, kRtrMask); err != 0) return {err, "RTR"};
    a = rts_attr(p);
    if (const int err = ibv_modify_qp(qp, &a, kRtsMask); err != 0) return {err, "RTS"};
    return {};
}

// `qp` from RESET through INIT and RTR to RTS: connect_from_init after INIT.
inline ModifyResult connect_rc(ibv_qp* qp, const PortAddress& local, std::uint32_t dest_qpn,
                               const PortAddress& remote, const RcParams& p) {
    ibv_qp_attr a = init_attr(p.access);
    if (const int err = ibv_modify_qp(qp, &a, kInitMask); err != 0) return {err, "INIT"};
    return connect_from_init(qp, local, dest_qpn, remote, p);
}

// One completion polled from a CQ.
struct Polled {
    int n = 0;    // ibv_poll_cq's last result: 1, 0 (none came in time) or < 0 (an error)
    ibv_wc wc{};  // the completion; when n is not 1, status IBV_WC_GENERAL_ERR and wr_id ~0
};

// Polls `cq` until it gives one completion or fails, for at most `patience` (a hang then
// fails a test rather than blocks CI).
inline Polled poll_one(ibv_cq* cq, std::chrono::steady_clock::duration patience) {
    const auto until = std::chrono::steady_clock::now() + patience;
    Polled p;
    do {
        p.n = ibv_poll_cq(cq, 1, &p.wc);
    } while (p.n == 0 && std::chrono::steady_clock::now() < until);
    if (p.n != 1) {
        p.wc = {};
        p.wc.status = IBV_WC_GENERAL_ERR;
        p.wc.wr_id = ~0ull;
    }
    return p;
}

// Free 2 MiB huge pages (HugePages_Free in /proc/meminfo).
inline long free_huge_pages() {
    std::ifstream in("/proc/meminfo");
    for (std::string line; std::getline(in, line);) {
        long n = 0;
        if (std::sscanf(line.c_str(), "HugePages_Free: %ld", &n) == 1) return n;
    }
    return 0;
}

}  // namespace snic::verbs_test
