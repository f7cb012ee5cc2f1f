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

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "tests/verbs/common.h"

namespace {

using namespace snic::verbs_test;

constexpr std::size_t kLength = 4096;

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
    PortAddress addr;
    std::uint32_t rq_psn = 0;  // what this end's responder expects first
};

void open_end(End& e, const char* name) {
    e.ctx = open_device(name);
    if (e.ctx == nullptr) fail("cannot open device %s", name);
    if (!query_address(e.ctx, e.addr)) fail("ibv_query_port/ibv_query_gid %s", name);
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
    const RcParams p{.access = IBV_ACCESS_REMOTE_WRITE,
                     .rq_psn = e.rq_psn,
                     .sq_psn = peer.rq_psn,
                     .rd_atomic = 1,
                     .min_rnr_timer = 12};
    const ModifyResult r = connect_rc(e.qp, e.addr, peer.qp->qp_num, peer.addr, p);
    if (r.err != 0) fail("modify_qp to %s: %s", r.state, std::strerror(r.err));
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
        kLength, ipv4_of(victim.addr.gid).c_str(), ipv4_of(peer.addr.gid).c_str());
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
