// Client sessions driven op by op without DPDK, with real memfds and rings formatted as
// libsnic formats them: shared by the unit tests of the session ops and the key rules.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <span>
#include <vector>

#include "daemon/roce/roce_rules.h"
#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"
#include "shm/ring.h"
#include "shm/wqe.h"

namespace snic::daemon::fixture {

using shm::Handle;
using shm::kNoHandle;

// A memfd as libsnic makes it: sized, sealed against shrinking, mapped here too.
class ClientMemfd {
  public:
    explicit ClientMemfd(std::size_t bytes, bool seal = true) : size_(bytes) {
        fd_ = ::memfd_create("snic-unit", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        EXPECT_GE(fd_, 0);
        EXPECT_EQ(::ftruncate(fd_, static_cast<off_t>(bytes)), 0);
        if (seal) {
            EXPECT_EQ(::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK), 0);
        }
        p_ = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
        EXPECT_NE(p_, MAP_FAILED);
    }
    ~ClientMemfd() {
        ::munmap(p_, size_);
        ::close(fd_);
    }
    int fd() const { return fd_; }
    std::span<std::byte> span(std::size_t off, std::size_t len) {
        return {static_cast<std::byte*>(p_) + off, len};
    }
    std::span<std::byte> span(std::size_t off = 0) { return span(off, size_ - off); }

  private:
    int fd_ = -1;
    void* p_ = nullptr;
    std::size_t size_;
};

// The descriptors of one request (duplicates: the list closes what the op does not keep).
inline FdList fds_of(std::initializer_list<int> fds) {
    FdList l;
    for (int fd : fds) l.push(::dup(fd));
    return l;
}

// One port with its RoCEv2 device "snic_0" (rules, no datapath); tests add what they need.
inline std::vector<DevicePort> test_ports() {
    DevicePort p{net::MacAddr{{0x02, 0, 0, 0, 0, 1}}, {{0xc6120001}, 24}, 1500, [] {
                     return LinkInfo{true, 10000};
                 }};
    p.devices[shm::kTransportRoce] = {"snic_0", &roce_rules(), nullptr, {}, {}, {}};
    return {p};
}

constexpr std::uint64_t kAddr = 0x7f0000000000;

// One client: a session and what it needs to call ops the way libsnic does.
struct Client {
    Client(Resources& r, std::span<const DevicePort> ports, Peer peer = Peer{1234, 0, 0})
        : session(r, ports, peer) {}
    Session session;
    shm::Empty none{};

    int open() {
        const shm::ContextLayout l = shm::context_layout(shm::kAsyncCapacity);
        ClientMemfd async(l.bytes);
        EXPECT_TRUE(shm::RingConsumer<shm::AsyncEvent>::init(async.span(), shm::kAsyncCapacity));
        int sv[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        FdList fds = fds_of({sv[1], async.fd()});
        ::close(sv[0]);
        ::close(sv[1]);
        shm::OpenDeviceReply out{};
        return session.open_device({0, 0}, fds, out);
    }
    // A completion channel as ibv_create_comp_channel makes it: 0 and its handle in `out`, or
    // the errno.
    int channel(Handle& out) {
        const shm::Layout l = shm::channel_layout(shm::kChannelCapacity);
        ClientMemfd m(l.bytes);
        EXPECT_TRUE(shm::RingConsumer<std::uint32_t>::init(m.span(l.ring0), shm::kChannelCapacity));
        int sv[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        FdList fds = fds_of({sv[1], m.fd()});
        ::close(sv[0]);
        ::close(sv[1]);
        shm::HandleReply rep{};
        const int err = session.create_channel(none, fds, rep);
        out = rep.handle;
        return err;
    }
    int destroy_channel(Handle h) {
        FdList fds;
        return session.destroy_channel({h, 0}, fds, none);
    }
    Handle pd() {
        FdList fds;
        shm::HandleReply out{};
        EXPECT_EQ(session.alloc_pd(none, fds, out), 0);
        return out.handle;
    }
    int reg_mr(Handle pd, const ClientMemfd& m, std::uint64_t length, std::uint32_t access,
               shm::RegMrReply& out, std::uint64_t offset = 0) {
        shm::RegMrReq req{};
        req.pd = pd;
        req.access = access;
        req.addr = kAddr;
        req.length = length;
        req.iova = kAddr;
        req.nsegs = 1;
        req.segs[0] = {kAddr, shm::round_up(length, shm::kPageSize), offset};
        FdList fds = fds_of({m.fd()});
        return session.reg_mr(req, fds, out);
    }
    Handle cq() {
        const shm::Layout l = shm::cq_layout(16);
        ClientMemfd m(l.bytes);
        EXPECT_TRUE(shm::RingConsumer<shm::Cqe>::init(m.span(l.ring0), 16));
        FdList fds = fds_of({m.fd()});
        shm::CreateCqReply out{};
        EXPECT_EQ(session.create_cq({15, 16, kNoHandle, 0}, fds, out), 0);
        return out.cq;
    }
    int qp(Handle pd, Handle cq, shm::CreateQpReply& out, std::uint32_t type = IBV_QPT_RC) {
        const shm::Layout l = shm::qp_layout(16, 16);
        ClientMemfd m(l.bytes);
        EXPECT_TRUE(shm::RingProducer<shm::SendWqe>::init(m.span(l.ring0, l.ring1 - l.ring0), 16));
        EXPECT_TRUE(shm::RingProducer<shm::RecvWqe>::init(m.span(l.ring1), 16));
        shm::CreateQpReq req{pd, cq, cq, kNoHandle, type, 0, {16, 16, 1, 1, 0}, 16, 16};
        FdList fds = fds_of({m.fd()});
        return session.create_qp(req, fds, out);
    }
    int modify(Handle qp, std::uint32_t mask, const shm::QpAttr& attr) {
        FdList fds;
        shm::ModifyQpReply out{};
        return session.modify_qp({qp, mask, attr}, fds, out);
    }
    shm::QueryQpReply query(Handle qp) {
        FdList fds;
        shm::QueryQpReply out{};
        EXPECT_EQ(session.query_qp({qp, 0}, fds, out), 0);
        return out;
    }
    int destroy_pd(Handle pd) {
        FdList fds;
        return session.dealloc_pd({pd, 0}, fds, none);
    }
};

class SessionTest : public ::testing::Test {
  protected:
    std::vector<DevicePort> ports = test_ports();
    Resources resources;
};

}  // namespace snic::daemon::fixture
