// Every limit snicd puts on its clients, in one table: objects per client and per daemon,
// queue depths, scatter/gather and inline sizes, and the rest of what query_device reports.
// The control server checks against these numbers and libsnic reports them (DeviceLimits).
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>

#include "shm/control_abi.h"
#include "shm/wqe.h"

namespace snic::daemon {

struct KindLimit {
    std::uint32_t per_client;
    std::uint32_t per_daemon;
    // A user other than root holds at most half of the daemon's objects of a kind, and such
    // users together leave root the last sixteenth: one user's clients cannot take a table
    // from every other user, nor all users from root.
    constexpr std::uint32_t per_uid() const { return per_daemon / 2; }
    constexpr std::uint32_t root_reserve() const { return per_daemon / 16; }
};

struct Limits {
    // Objects, in shm::ObjKind order: pd, mr, mw, channel, cq, srq, qp.
    std::array<KindLimit, shm::kObjKinds> objects;
    std::uint32_t max_qp_wr;
    std::uint32_t max_cqe;
    std::uint32_t max_srq_wr;
    std::uint32_t max_sge;
    std::uint32_t max_sge_rd;
    std::uint32_t max_inline_data;
    std::uint32_t max_qp_rd_atom;
    std::uint32_t max_qp_init_rd_atom;
    std::uint64_t max_mr_size;
    std::uint64_t page_size_cap;
    std::uint32_t atomic_cap;
    std::uint32_t max_pkeys;
    std::uint32_t local_ca_ack_delay;
    std::uint32_t device_cap_flags;
    std::uint32_t vendor_id;
    std::uint32_t vendor_part_id;
    std::uint32_t hw_ver;
    std::uint32_t max_msg_sz;       // query_port: the largest message
    std::uint32_t max_cq_capacity;  // ring slots of a CQ: the power of two above max_cqe
    std::uint32_t
        max_wq_capacity;  // ring slots of a SQ, RQ or SRQ: max_qp_wr / max_srq_wr rounded up

    // The daemon's address space: client memory it maps (registered regions, rings), per
    // client, per user (uid) and in all, and its mmaps in all (the kernel's
    // vm.max_map_count, 65,530 by default, also holds DPDK's and the libraries').
    std::uint64_t max_mapped_per_client;
    std::uint64_t max_mapped_per_uid;
    std::uint64_t max_mapped_per_daemon;
    std::uint32_t max_mappings_per_daemon;
    // Of those mmaps: at most this many for one user other than root, and this many that
    // only root's clients may take.
    std::uint32_t max_mappings_per_uid;
    std::uint32_t root_reserved_mappings;

    // Client descriptors snicd keeps open (notification sockets), per client and per user
    // (uid): the checks of Resources::keep_fd, EMFILE beyond them.
    std::uint32_t max_fds_per_client;
    std::uint32_t max_fds_per_uid;
    constexpr KindLimit of(shm::ObjKind k) const { return objects[static_cast<std::size_t>(k)]; }
};

inline constexpr Limits kLimits{
    .objects = {{
        {1024, 16384},  // pd
        {4096, 65536},  // mr
        {1024, 16384},  // mw
        {64, 1024},     // channel
        {1024, 16384},  // cq
        {256, 4096},    // srq
        {8192, 16384},  // qp: a client may hold half the daemon's QP numbers
    }},
    .max_qp_wr = 16384,
    // mlx5's: libfabric's RDM endpoints ask (rx + tx) x universe size entries of one CQ
    // (65,536 by default), more than soft-RoCE's 32,767 allows. The ring is the client's memory.
    .max_cqe = 4194303,
    .max_srq_wr = 16384,
    .max_sge = shm::kMaxSge,
    .max_sge_rd = shm::kMaxSge,
    .max_inline_data = shm::kMaxInline,
    .max_qp_rd_atom = 128,
    .max_qp_init_rd_atom = 128,
    .max_mr_size = std::uint64_t{1} << 40,
    .page_size_cap = shm::kPageSize,
    .atomic_cap = IBV_ATOMIC_HCA,
    .max_pkeys = 1,
    // 4.096 us x 2^8 = 1 ms: the responder ACKs within rc.h's ack_delay_ns (8 us), with room
    // for a poll loop that shares its core. rdma_cm's REP carries it as the Target ACK Delay,
    // from which the active side's ACK timeout follows (libclient/cm_rules.h; rxe says 15).
    .local_ca_ack_delay = 8,
    // SRQ_RESIZE: ibv_modify_srq moves an SRQ to a new ring (Session::resize_srq).
    .device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_MEM_WINDOW |
                        IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_MEM_MGT_EXTENSIONS |
                        IBV_DEVICE_SRQ_RESIZE,
    // No IEEE OUI of our own: the value soft-RoCE uses for "none".
    .vendor_id = 0xffffff,
    .vendor_part_id = 0,
    .hw_ver = 0,
    .max_msg_sz = 1u << 31,
    .max_cq_capacity = 4194304,
    .max_wq_capacity = 16384,
    // A 47-bit address space is 128 TiB: no client, and no user, can fill it.
    .max_mapped_per_client = std::uint64_t{16} << 40,
    .max_mapped_per_uid = std::uint64_t{32} << 40,
    .max_mapped_per_daemon = std::uint64_t{64} << 40,
    .max_mappings_per_daemon = 49152,
    .max_mappings_per_uid = 24576,
    .root_reserved_mappings = 3072,
    // What a client leaves with snicd: the notification socket of its device (async events),
    // of each completion channel and of each rdma_cm connection (memfds are closed once
    // mapped; the control connection itself is bounded by the connection quotas, 64 per uid
    // and 256 in all). A client: its device's socket and one for each of its 64 channels. A
    // user: 512, half the daemon's 1,024 channels (as a user may map half the daemon's
    // address space), which gives each of its 64 connections its own socket and 7 channels
    // on average and leaves the other half to other users. In all, the object and
    // connection limits bound what snicd keeps to 1,280 (256 devices' or rdma_cm
    // connections' sockets, 1,024 channels'), beside the 256 control connections: within
    // even the kernel's default hard RLIMIT_NOFILE (4,096), to which snicd raises its soft
    // limit.
    .max_fds_per_client = 1 + 64,
    .max_fds_per_uid = 512,
};

static_assert(kLimits.max_cq_capacity > kLimits.max_cqe);
static_assert(kLimits.max_wq_capacity >= kLimits.max_qp_wr &&
              kLimits.max_wq_capacity >= kLimits.max_srq_wr);
static_assert(kLimits.max_fds_per_client >= 1 + kLimits.of(shm::ObjKind::channel).per_client,
              "a client may keep its device's socket and one for each channel it may create");
static_assert(kLimits.max_fds_per_uid >= kLimits.max_fds_per_client);
static_assert(kLimits.of(shm::ObjKind::cq).per_client <= shm::kChannelCapacity,
              "a channel's ring must hold one notification of every CQ of its client");

// The DeviceLimits a client receives from open_device; node_guid is the port's EUI-64
// (see node_guid_from_mac).
constexpr shm::DeviceLimits device_limits(const Limits& l, std::uint64_t node_guid) {
    shm::DeviceLimits d{};
    d.max_mr_size = l.max_mr_size;
    d.page_size_cap = l.page_size_cap;
    d.node_guid = node_guid;
    d.vendor_id = l.vendor_id;
    d.vendor_part_id = l.vendor_part_id;
    d.hw_ver = l.hw_ver;
    d.max_qp = l.of(shm::ObjKind::qp).per_client;
    d.max_qp_wr = l.max_qp_wr;
    d.max_sge = l.max_sge;
    d.max_sge_rd = l.max_sge_rd;
    d.max_cq = l.of(shm::ObjKind::cq).per_client;
    d.max_cqe = l.max_cqe;
    d.max_mr = l.of(shm::ObjKind::mr).per_client;
    d.max_pd = l.of(shm::ObjKind::pd).per_client;
    d.max_qp_rd_atom = l.max_qp_rd_atom;
    d.max_qp_init_rd_atom = l.max_qp_init_rd_atom;
    d.max_res_rd_atom = l.max_qp_rd_atom * l.of(shm::ObjKind::qp).per_client;
    d.max_mw = l.of(shm::ObjKind::mw).per_client;
    d.max_srq = l.of(shm::ObjKind::srq).per_client;
    d.max_srq_wr = l.max_srq_wr;
    d.max_srq_sge = l.max_sge;
    d.max_inline_data = l.max_inline_data;
    d.max_pkeys = l.max_pkeys;
    d.local_ca_ack_delay = l.local_ca_ack_delay;
    d.device_cap_flags = l.device_cap_flags;
    d.atomic_cap = l.atomic_cap;
    d.max_channels = l.of(shm::ObjKind::channel).per_client;
    return d;
}

}  // namespace snic::daemon
