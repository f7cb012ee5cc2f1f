// snic-spoof-victim: the victim of tests/integration/test_spoof.py. One RC connection
// between two snic devices (usually of two daemons), both ends in this process; the
// victim's end owns a one-page region open to RDMA WRITE and filled with a known pattern.
// The test then forges RDMA WRITE frames against that QP and asks whether the region
// changed. Linked with libsnic only; the daemons are found as libsnic finds them
// (SNIC_SOCKET_DIR).
//
//     snic-spoof-victim VICTIM_DEVICE PEER_DEVICE
//
// Prints one JSON line once both QPs are in RTS:
//     {"qpn":N,"psn":N,"peer_qpn":N,"addr":N,"rkey":N,"length":N,
//      "victim_ip":"A.B.C.D","peer_ip":"A.B.C.D"}
// (psn: the PSN the victim's responder expects next), then answers each line on stdin:
//     check OFF LEN  ->  {"untouched":BOOL,"bytes":"<hex of region[OFF, OFF+LEN)>","qp_state":N}
//     quit, or the end of input: exits 0.
// Any failure: one line on stderr and exit 1.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

namespace {

constexpr std::size_t kLength = 4096;

[[noreturn]] void fail(const char* fmt, ...) {
    std::va_list ap;
    va_start(ap, fmt);
    std::fputs("snic-spoof-victim: ", stderr);
    std::vfprintf(stderr, fmt, ap);
    std::fputc('\n', stderr);
    va_end(ap);
    std::exit(1);
}

// The byte the untouched region holds at `i`: not constant, so that a write of any one
// value shows.
std::uint8_t pattern(std::size_t i) {
    return static_cast<std::uint8_t>(i * 7 + 0x5a);
}

std::uint32_t random_psn() {
    std::uint32_t v = 0;
    if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
        fail("getrandom: %s", std::strerror(errno));
    return v & 0xffffff;
}

struct End {
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_gid gid{};
    ibv_mtu mtu = IBV_MTU_1024;
    std::uint32_t rq_psn = 0;  // what this end's responder expects first
};

void open_end(End& e, const char* name) {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) fail("ibv_get_device_list: %s", std::strerror(errno));
    for (int i = 0; i < n && e.ctx == nullptr; ++i)
        if (std::strcmp(ibv_get_device_name(list[i]), name) == 0) e.ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (e.ctx == nullptr) fail("cannot open device %s", name);
    ibv_port_attr port{};
    if (ibv_query_port(e.ctx, 1, &port) != 0) fail("ibv_query_port %s", name);
    e.mtu = port.active_mtu;
    if (ibv_query_gid(e.ctx, 1, 0, &e.gid) != 0) fail("ibv_query_gid %s", name);
    e.pd = ibv_alloc_pd(e.ctx);
    if (e.pd == nullptr) fail("ibv_alloc_pd %s: %s", name, std::strerror(errno));
    e.cq = ibv_create_cq(e.ctx, 16, nullptr, nullptr, 0);
    if (e.cq == nullptr) fail("ibv_create_cq %s: %s", name, std::strerror(errno));
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = e.cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {4, 4, 1, 1, 0};
    e.qp = ibv_create_qp(e.pd, &qa);
    if (e.qp == nullptr) fail("ibv_create_qp %s: %s", name, std::strerror(errno));
    e.rq_psn = random_psn();
}

// RESET -> INIT -> RTR -> RTS towards `peer`, both PSNs agreeing with the peer's.
void connect(End& e, const End& peer) {
    ibv_qp_attr q{};
    q.qp_state = IBV_QPS_INIT;
    q.port_num = 1;
    q.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(e.qp, &q,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
        fail("modify_qp to INIT: %s", std::strerror(errno));
    q = {};
    q.qp_state = IBV_QPS_RTR;
    q.path_mtu = std::min(e.mtu, peer.mtu);
    q.dest_qp_num = peer.qp->qp_num;
    q.rq_psn = e.rq_psn;
    q.max_dest_rd_atomic = 1;
    q.min_rnr_timer = 12;
    q.ah_attr.is_global = 1;
    q.ah_attr.grh.dgid = peer.gid;
    q.ah_attr.grh.hop_limit = 64;
    q.ah_attr.port_num = 1;
    if (ibv_modify_qp(e.qp, &q,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
        fail("modify_qp to RTR: %s", std::strerror(errno));
    q = {};
    q.qp_state = IBV_QPS_RTS;
    q.timeout = 14;
    q.retry_cnt = 7;
    q.rnr_retry = 7;
    q.sq_psn = peer.rq_psn;
    q.max_rd_atomic = 1;
    if (ibv_modify_qp(e.qp, &q,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
        fail("modify_qp to RTS: %s", std::strerror(errno));
}

// The IPv4 address of a RoCEv2 GID (::ffff:a.b.c.d), dotted.
std::string ipv4_of(const ibv_gid& g) {
    return std::to_string(g.raw[12]) + "." + std::to_string(g.raw[13]) + "." +
           std::to_string(g.raw[14]) + "." + std::to_string(g.raw[15]);
}

void close_end(End& e) {
    if (e.qp != nullptr) ibv_destroy_qp(e.qp);
    if (e.cq != nullptr) ibv_destroy_cq(e.cq);
    if (e.pd != nullptr) ibv_dealloc_pd(e.pd);
    if (e.ctx != nullptr) ibv_close_device(e.ctx);
}

int qp_state(ibv_qp* qp) {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    return ibv_query_qp(qp, &a, IBV_QP_STATE, &init) == 0 ? static_cast<int>(a.qp_state) : -1;
}

// One answer to "check OFF LEN".
void check(const std::uint8_t* region, std::size_t off, std::size_t len, ibv_qp* qp) {
    bool untouched = true;
    for (std::size_t i = 0; i < kLength; ++i) untouched = untouched && region[i] == pattern(i);
    std::string hex;
    static constexpr char kDigits[] = "0123456789abcdef";
    for (std::size_t i = off; i < off + len && i < kLength; ++i) {
        hex += kDigits[region[i] >> 4];
        hex += kDigits[region[i] & 0xf];
    }
    std::printf("{\"untouched\":%s,\"bytes\":\"%s\",\"qp_state\":%d}\n",
                untouched ? "true" : "false", hex.c_str(), qp_state(qp));
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: snic-spoof-victim VICTIM_DEVICE PEER_DEVICE\n");
        return 2;
    }
    End victim, peer;
    open_end(victim, argv[1]);
    open_end(peer, argv[2]);

    // Private anonymous and page-aligned: libsnic shares it with the daemon in place.
    void* mem =
        ::mmap(nullptr, kLength, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) fail("mmap: %s", std::strerror(errno));
    auto* region = static_cast<std::uint8_t*>(mem);
    for (std::size_t i = 0; i < kLength; ++i) region[i] = pattern(i);
    ibv_mr* mr =
        ibv_reg_mr(victim.pd, region, kLength, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr == nullptr) fail("ibv_reg_mr: %s", std::strerror(errno));

    connect(victim, peer);
    connect(peer, victim);

    std::printf(
        "{\"qpn\":%u,\"psn\":%u,\"peer_qpn\":%u,\"addr\":%llu,\"rkey\":%u,\"length\":%zu,"
        "\"victim_ip\":\"%s\",\"peer_ip\":\"%s\"}\n",
        victim.qp->qp_num, victim.rq_psn, peer.qp->qp_num,
        static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(region)), mr->rkey,
        kLength, ipv4_of(victim.gid).c_str(), ipv4_of(peer.gid).c_str());
    std::fflush(stdout);

    for (std::string line; std::getline(std::cin, line);) {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "quit") break;
        std::size_t off = 0, len = 0;
        if (cmd != "check" || !(in >> off >> len) || off > kLength || len > kLength - off)
            fail("unknown request: %s", line.c_str());
        check(region, off, len, victim.qp);
    }

    ibv_dereg_mr(mr);
    close_end(peer);
    close_end(victim);
    ::munmap(mem, kLength);
    return 0;
}
