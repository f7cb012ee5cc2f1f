#include "tools/perf/end.h"

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/perf/perf.h"

namespace snic::perf {

namespace {

ibv_mtu to_mtu(std::uint32_t bytes) {
    switch (bytes) {
        case 256:
            return IBV_MTU_256;
        case 512:
            return IBV_MTU_512;
        case 1024:
            return IBV_MTU_1024;
        case 2048:
            return IBV_MTU_2048;
        default:
            return IBV_MTU_4096;
    }
}

}  // namespace

std::vector<DeviceEntry> devices() {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) failf("ibv_get_device_list: %s", std::strerror(errno));
    std::vector<DeviceEntry> all;
    for (int i = 0; i < n; ++i)
        all.push_back(
            {ibv_get_device_name(list[i]), list[i]->transport_type == IBV_TRANSPORT_IWARP});
    ibv_free_device_list(list);
    return all;
}

namespace {

// The -R context of `device` (or of the first device): rdma_cm's own, which its ids use.
ibv_context* cm_context(const std::string& device, int* count) {
    ibv_context** list = rdma_get_devices(count);
    if (list == nullptr) failf("rdma_get_devices: %s", std::strerror(errno));
    ibv_context* ctx = nullptr;
    for (int i = 0; i < *count && ctx == nullptr; ++i)
        if (device.empty() || device == ibv_get_device_name(list[i]->device)) ctx = list[i];
    rdma_free_devices(list);  // the contexts stay open
    return ctx;
}

// The device's own context (without -R).
ibv_context* verbs_context(const std::string& device, int* count) {
    ibv_device** list = ibv_get_device_list(count);
    if (list == nullptr) failf("ibv_get_device_list: %s", std::strerror(errno));
    ibv_device* dev = nullptr;
    for (int i = 0; i < *count && dev == nullptr; ++i)
        if (device.empty() || device == ibv_get_device_name(list[i])) dev = list[i];
    ibv_context* ctx = dev != nullptr ? ibv_open_device(dev) : nullptr;
    const int err = errno;
    ibv_free_device_list(list);
    if (dev != nullptr && ctx == nullptr)
        failf("ibv_open_device %s: %s", ibv_get_device_name(dev), std::strerror(err));
    return ctx;
}

}  // namespace

End::End(const std::string& device, const Options& o, std::uint32_t buf_size)
    : o_(o), own_(!o.rdma_cm), area_((buf_size + 4095) & ~4095u), buf_(2 * std::size_t{area_}) {
    int n = 0;
    ctx_ = o.rdma_cm ? cm_context(device, &n) : verbs_context(device, &n);
    if (ctx_ == nullptr) {
        if (n == 0)
            failf("no RDMA device found (is snicd running? SNIC_SOCKET_DIR=%s)",
                  std::getenv("SNIC_SOCKET_DIR") ? std::getenv("SNIC_SOCKET_DIR") : "/run/snic");
        failf("no RDMA device %s", device.c_str());
    }
    name_ = ibv_get_device_name(ctx_->device);
    check(ibv_query_port(ctx_, 1, &port_), "ibv_query_port");
    check(ibv_query_gid(ctx_, 1, o.gid_index, &gid_), "ibv_query_gid");
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) failf("ibv_alloc_pd: %s", std::strerror(errno));
    const int depth = static_cast<int>((o.tx_depth + rx_depth()) * o.qps + 64);
    scq_ = ibv_create_cq(ctx_, depth, nullptr, nullptr, 0);
    rcq_ = ibv_create_cq(ctx_, depth, nullptr, nullptr, 0);
    if (scq_ == nullptr || rcq_ == nullptr)
        failf("ibv_create_cq %d: %s", depth, std::strerror(errno));
    std::memset(buf_.p, 0, buf_.len);
    mr_ = ibv_reg_mr(pd_, buf_.p, buf_.len,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                         IBV_ACCESS_REMOTE_ATOMIC);
    if (mr_ == nullptr) failf("ibv_reg_mr %zu bytes: %s", buf_.len, std::strerror(errno));
    if (o.rdma_cm) return;
    for (std::uint32_t i = 0; i < o.qps; ++i)
        add_qp([this](ibv_qp_init_attr& a) { return ibv_create_qp(pd_, &a); });
}

ibv_qp* End::add_qp(const QpMaker& make) {
    ibv_qp_init_attr a{};
    a.send_cq = scq_;
    a.recv_cq = rcq_;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = o_.tx_depth + kSignalEvery;
    a.cap.max_recv_wr = rx_depth();
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    // The device's inline limit is not among ibv_query_device's attributes: without
    // -I, ask for the default and halve it until the device accepts (as perftest does).
    std::uint32_t want = qps_.empty() ? o_.inline_size : max_inline_;
    ibv_qp* qp = nullptr;
    for (;;) {
        a.cap.max_inline_data = want;
        qp = make(a);
        if (qp != nullptr || errno != EINVAL || o_.inline_set || want == 0) break;
        want /= 2;
    }
    if (qp == nullptr)
        failf("%s (send WRs %u, inline %u): %s", own_ ? "ibv_create_qp" : "rdma_create_qp",
              a.cap.max_send_wr, want, std::strerror(errno));
    max_inline_ = std::min(want, a.cap.max_inline_data);
    qps_.push_back(qp);
    psn_.push_back(static_cast<std::uint32_t>(std::rand()) & 0xffffff);
    return qp;
}

End::~End() {
    set_idle(0);
    if (idle_cq_ != nullptr) ibv_destroy_cq(idle_cq_);
    if (own_)
        for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
    if (mr_ != nullptr) ibv_dereg_mr(mr_);
    if (scq_ != nullptr) ibv_destroy_cq(scq_);
    if (rcq_ != nullptr) ibv_destroy_cq(rcq_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (ctx_ != nullptr && own_) ibv_close_device(ctx_);
}

std::vector<PeerInfo> End::info() const {
    std::vector<PeerInfo> v;
    for (std::size_t i = 0; i < qps_.size(); ++i) {
        PeerInfo p{};
        p.qpn = qps_[i]->qp_num;
        p.psn = psn_[i];
        std::memcpy(p.gid, gid_.raw, 16);
        p.rkey = mr_->rkey;
        p.addr = reinterpret_cast<std::uintptr_t>(buf_.p);
        v.push_back(p);
    }
    return v;
}

void End::connect(const std::vector<PeerInfo>& peer, std::uint32_t mtu) {
    set_peer(peer);
    for (std::size_t i = 0; i < qps_.size(); ++i) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        check(ibv_modify_qp(qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              "ibv_modify_qp INIT");
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = to_mtu(mtu);
        a.dest_qp_num = peer[i].qpn;
        a.rq_psn = peer[i].psn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        std::memcpy(a.ah_attr.grh.dgid.raw, peer[i].gid, 16);
        a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(o_.gid_index);
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.port_num = 1;
        check(ibv_modify_qp(qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              "ibv_modify_qp RTR");
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = psn_[i];
        a.max_rd_atomic = 16;
        check(ibv_modify_qp(qps_[i], &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              "ibv_modify_qp RTS");
    }
}

void End::set_peer(const std::vector<PeerInfo>& peer) {
    if (peer.size() != qps_.size()) failf("the peer has %zu QPs, we %zu", peer.size(), qps_.size());
    peer_ = peer;
}

std::uint32_t End::path_mtu() const {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    check(ibv_query_qp(qps_.front(), &a, IBV_QP_PATH_MTU, &init), "ibv_query_qp");
    return 128u << static_cast<int>(a.path_mtu);
}

void End::set_idle(std::uint32_t n) {
    for (; idle_.size() > n; idle_.pop_back())
        check(ibv_destroy_qp(idle_.back()), "ibv_destroy_qp");
    if (idle_.size() == n) return;
    if (idle_cq_ == nullptr) {
        idle_cq_ = ibv_create_cq(ctx_, 1, nullptr, nullptr, 0);
        if (idle_cq_ == nullptr) failf("ibv_create_cq for idle QPs: %s", std::strerror(errno));
    }
    while (idle_.size() < n) {
        ibv_qp_init_attr init{};
        init.send_cq = idle_cq_;
        init.recv_cq = idle_cq_;
        init.qp_type = IBV_QPT_RC;
        init.cap = {1, 1, 1, 1, 0};
        ibv_qp* qp = ibv_create_qp(pd_, &init);
        if (qp == nullptr)
            failf("ibv_create_qp (idle QP %zu of %u on %s): %s", idle_.size() + 1, n, name_.c_str(),
                  std::strerror(errno));
        idle_.push_back(qp);
        const auto psn = static_cast<std::uint32_t>(std::rand()) & 0xffffff;
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        check(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
              "ibv_modify_qp INIT (idle)");
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = port_.active_mtu;
        a.dest_qp_num = qp->qp_num;
        a.rq_psn = psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = gid_;
        a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(o_.gid_index);
        a.ah_attr.grh.hop_limit = 64;
        a.ah_attr.port_num = 1;
        check(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
              "ibv_modify_qp RTR (idle)");
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = psn;
        a.max_rd_atomic = 1;
        check(ibv_modify_qp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
              "ibv_modify_qp RTS (idle)");
    }
}

void End::post_recv(std::uint32_t qp) {
    ibv_sge sge{addr(area_), area_, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = qp;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    check(ibv_post_recv(qps_[qp], &wr, &bad), "ibv_post_recv");
}

void End::post(std::uint32_t qp, ibv_wr_opcode op, std::uint32_t size, bool signaled,
               std::uint64_t wr_id) {
    const bool into_recv = op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
    ibv_sge sge{addr(into_recv ? area_ : 0), size, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    if ((op == IBV_WR_SEND || op == IBV_WR_RDMA_WRITE) && size <= max_inline_)
        wr.send_flags |= IBV_SEND_INLINE;
    const PeerInfo& p = peer_[qp];
    // WRITE and READ target the peer's receive area; READ's source is the peer's send area.
    const std::uint64_t remote = p.addr + (op == IBV_WR_RDMA_READ ? 0 : area_);
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        wr.wr.atomic.remote_addr = p.addr + area_;
        wr.wr.atomic.rkey = p.rkey;
        wr.wr.atomic.compare_add = 1;
    } else {
        wr.wr.rdma.remote_addr = remote;
        wr.wr.rdma.rkey = p.rkey;
    }
    ibv_send_wr* bad = nullptr;
    check(ibv_post_send(qps_[qp], &wr, &bad), "ibv_post_send");
}

int End::poll(ibv_cq* cq, ibv_wc* wc, int n) {
    const int got = ibv_poll_cq(cq, n, wc);
    if (got < 0) failf("ibv_poll_cq failed on %s", name_.c_str());
    for (int i = 0; i < got; ++i)
        if (wc[i].status != IBV_WC_SUCCESS)
            failf("%s: completion with %s (opcode %d, vendor_err %u)", name_.c_str(),
                  ibv_wc_status_str(wc[i].status), wc[i].opcode, wc[i].vendor_err);
    return got;
}

}  // namespace snic::perf
