// One end of a snic-perf run: a device, its PD, CQs and RC QPs and one registered buffer,
// connected to the peer's (or the loopback's other) end.
#pragma once

#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/perf/options.h"
#include "tools/perf/perf.h"

namespace snic::perf {

constexpr std::uint32_t kRxDepth = 512;  // receives kept posted per QP (at least -t)

// What the other end needs to reach one QP and the buffer.
struct PeerInfo {
    std::uint32_t qpn;
    std::uint32_t psn;
    std::uint8_t gid[16];
    std::uint32_t rkey;
    std::uint64_t addr;
};

// Anonymous memory of its own for an end's buffer (libsnic moves it into a memfd when it
// is registered; page-aligned, so nothing else shares its pages).
struct Mapped {
    void* p = MAP_FAILED;
    std::size_t len = 0;
    Mapped() = default;
    explicit Mapped(std::size_t n) : len(n) {
        p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) failf("mmap %zu bytes: %s", n, std::strerror(errno));
    }
    ~Mapped() {
        if (p != MAP_FAILED) ::munmap(p, len);
    }
    Mapped(const Mapped&) = delete;
    Mapped& operator=(const Mapped&) = delete;
};

// Makes one RC QP from the attributes (ibv_create_qp, or rdma_create_qp on a cm id);
// nullptr with errno on failure. It may lower the attributes' capabilities as the device did.
using QpMaker = std::function<ibv_qp*(ibv_qp_init_attr&)>;

// One end of the test: a device context, a PD, a send CQ and a receive CQ shared by the
// end's RC QPs, and one registered buffer that all of them use.
class End {
  public:
    // Without -R the end creates its -q QPs itself; with -R it opens the device's context
    // through rdma_get_devices (the cm ids' context) and its QPs come later, from add_qp.
    End(const std::string& device, const Options& o, std::uint32_t buf_size);
    ~End();
    End(const End&) = delete;
    End& operator=(const End&) = delete;

    const std::string& name() const { return name_; }
    std::vector<PeerInfo> info() const;
    void connect(const std::vector<PeerInfo>& peer, std::uint32_t mtu);
    // -R: the QPs are connected already; only the peer's buffers are new.
    void set_peer(const std::vector<PeerInfo>& peer);
    // -R: one more QP made by `make` (which owns it: the end never destroys it).
    ibv_qp* add_qp(const QpMaker& make);
    // The path MTU of the first QP, as rdma_cm set it.
    std::uint32_t path_mtu() const;
    ibv_context* context() const { return ctx_; }
    ibv_pd* pd() { return pd_; }
    const ibv_gid& gid() const { return gid_; }
    // An iWARP device: its QPs connect through rdma_cm only (-R).
    bool iwarp() const { return ctx_->device->transport_type == IBV_TRANSPORT_IWARP; }
    std::uint32_t active_mtu() const { return 128u << static_cast<int>(port_.active_mtu); }

    // The send area [0, size) and the receive/target area [size, 2 size) of the buffer.
    std::uint8_t* send_area() { return base(); }
    std::uint8_t* recv_area() { return base() + area_; }
    std::uint64_t addr(std::uint32_t off) const {
        return reinterpret_cast<std::uintptr_t>(buf_.p) + off;
    }
    std::uint32_t area() const { return area_; }

    // A receive WR for the whole receive area on QP `qp` (its wr_id is `qp`).
    void post_recv(std::uint32_t qp);
    // Posts one WR on QP `qp`: the local send area (or recv area for READ/atomic results)
    // to the peer's (rkey, remote).
    void post(std::uint32_t qp, ibv_wr_opcode op, std::uint32_t size, bool signaled,
              std::uint64_t wr_id);
    // Polls `cq` once; returns completions, fails on an error completion.
    int poll(ibv_cq* cq, ibv_wc* wc, int n);
    ibv_cq* scq() { return scq_; }
    ibv_cq* rcq() { return rcq_; }
    std::uint32_t qps() const { return static_cast<std::uint32_t>(qps_.size()); }
    std::uint32_t max_inline() const { return max_inline_; }
    std::uint32_t rx_depth() const { return std::max(kRxDepth, o_.tx_depth); }

    // Makes (or destroys) RC QPs that do nothing until `n` exist: each connected to itself
    // (RTS), the smallest queues, no READ/atomic resources beyond one.
    void set_idle(std::uint32_t n);

  private:
    std::uint8_t* base() { return static_cast<std::uint8_t*>(buf_.p); }

    std::string name_;
    const Options& o_;
    ibv_context* ctx_ = nullptr;
    bool own_ = true;  // ctx_ and qps_ are ours (not rdma_cm's) to close and destroy
    ibv_pd* pd_ = nullptr;
    ibv_cq* scq_ = nullptr;
    ibv_cq* rcq_ = nullptr;
    std::vector<ibv_qp*> qps_;
    std::vector<std::uint32_t> psn_;
    ibv_port_attr port_{};
    ibv_gid gid_{};
    std::uint32_t area_ = 0;
    Mapped buf_;
    ibv_mr* mr_ = nullptr;
    std::uint32_t max_inline_ = 0;
    std::vector<PeerInfo> peer_;
    ibv_cq* idle_cq_ = nullptr;  // the idle QPs' send and receive CQ
    std::vector<ibv_qp*> idle_;
};

// The RDMA devices, in the order ibv_get_device_list gives them.
struct DeviceEntry {
    std::string name;
    bool iwarp;
};
std::vector<DeviceEntry> devices();

}  // namespace snic::perf
