// libFuzzer target: the session ops behind the control socket (daemon/verbs/session.cc, as
// daemon/control/server.cc's op table calls them): a client session with an opened device, a PD,
// a CQ and a QP set up the way libsnic does it, then a sequence of ops, each with a request
// body of arbitrary bytes (copied into the op's request struct as control.cc copies it) and
// descriptors the input chooses (none, a memfd of a chosen size, formatted as a ring or not,
// a socket). No DPDK and no socket: the framing control.cc checks before an op (magic,
// length, body size, descriptor count) is not reached from here; control_socket.cc fuzzes it
// through a served socket. Asserts: every op answers 0 or an errno; the session's objects stay
// within the daemon's counts; and when the session goes, everything it held is released: no
// object counted, no client memory mapped, no descriptor left open.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "daemon/verbs/client_memory.h"
#include "daemon/verbs/resources.h"
#include "daemon/verbs/session.h"
#include "shm/ring.h"
#include "shm/wqe.h"
#include "tests/fuzz/daemon_support.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace snic;
using namespace snic::daemon;
using fuzz::Input;
using fuzz::memfd;
using fuzz::open_fds;

FdList fds_of(std::initializer_list<int> fds) {
    FdList l;
    for (int fd : fds) l.push(fd);
    return l;
}

void require_errno(int err) {
    SNIC_FUZZ_REQUIRE(err >= 0 && err < 4096);
}

// Descriptors for one op, chosen by the input.
FdList pick_fds(Input& in) {
    const std::uint8_t how = in.u8();
    switch (how % 6) {
        case 0:
            return {};
        case 1:
            return fds_of({memfd(std::size_t{in.u16()} * 64)});
        case 2: {  // a CQ's ring
            const std::uint32_t cap = 1u << (in.u8() % 6);
            const shm::Layout l = shm::cq_layout(cap);
            return fds_of({memfd(l.bytes, [&](std::span<std::byte> m) {
                (void)shm::RingConsumer<shm::Cqe>::init(m.subspan(l.ring0), cap);
            })});
        }
        case 3: {  // a QP's rings (or an SRQ's, the same send ring ignored)
            const std::uint32_t cap = 1u << (in.u8() % 6);
            const shm::Layout l = shm::qp_layout(cap, cap);
            return fds_of({memfd(l.bytes, [&](std::span<std::byte> m) {
                (void)shm::RingProducer<shm::SendWqe>::init(m.subspan(l.ring0, l.ring1 - l.ring0),
                                                            cap);
                (void)shm::RingProducer<shm::RecvWqe>::init(m.subspan(l.ring1), cap);
            })});
        }
        case 4: {  // a notification socket and a memfd: a channel's ring, or any bytes
            int sv[2];
            SNIC_FUZZ_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
            ::close(sv[0]);
            if ((in.u8() & 1) != 0) {
                const shm::Layout l = shm::channel_layout(shm::kChannelCapacity);
                return fds_of({sv[1], memfd(l.bytes, [&](std::span<std::byte> m) {
                                   (void)shm::RingConsumer<std::uint32_t>::init(
                                       m.subspan(l.ring0), shm::kChannelCapacity);
                               })});
            }
            return fds_of({sv[1], memfd(std::size_t{in.u16()} * 64)});
        }
        default:
            return fds_of({memfd(4096), memfd(4096)});
    }
}

template <class Req, class Rep>
void run_op(Session& s, int (Session::*op)(const Req&, FdList&, Rep&), Input& in,
            const std::vector<std::uint32_t>& handles) {
    Req req{};
    if constexpr (!std::is_same_v<Req, shm::Empty>) {
        const auto b = in.bytes(sizeof req);
        std::memcpy(&req, b.data(), b.size());
        // Often aim the request's first handle at an object the session has.
        if (sizeof req >= 4 && (in.u8() & 1) && !handles.empty()) {
            const std::uint32_t h = handles[in.u8() % handles.size()];
            std::memcpy(&req, &h, 4);
        }
    }
    FdList fds = pick_fds(in);
    Rep rep{};
    require_errno((s.*op)(req, fds, rep));
}

void session_run(Resources& r, std::span<const DevicePort> p, Input& in) {
    Session s(r, p, Peer{1234, 1000, 1000});
    // Open the device as libsnic does (its async ring formatted), then a PD, a CQ, a QP.
    {
        const shm::ContextLayout l = shm::context_layout(shm::kAsyncCapacity);
        int sv[2];
        SNIC_FUZZ_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        ::close(sv[0]);
        FdList fds =
            fds_of({sv[1], memfd(l.bytes, [&](std::span<std::byte> m) {
                        (void)shm::RingConsumer<shm::AsyncEvent>::init(m, shm::kAsyncCapacity);
                    })});
        shm::OpenDeviceReply out{};
        SNIC_FUZZ_REQUIRE(s.open_device({0, 0}, fds, out) == 0);
    }
    std::vector<std::uint32_t> handles;
    {
        FdList none;
        shm::HandleReply pd{};
        SNIC_FUZZ_REQUIRE(s.alloc_pd({}, none, pd) == 0);
        handles.push_back(pd.handle);
        const shm::Layout l = shm::cq_layout(16);
        FdList cqfd = fds_of({memfd(l.bytes, [&](std::span<std::byte> m) {
            (void)shm::RingConsumer<shm::Cqe>::init(m.subspan(l.ring0), 16);
        })});
        shm::CreateCqReply cq{};
        SNIC_FUZZ_REQUIRE(s.create_cq({15, 16, shm::kNoHandle, 0}, cqfd, cq) == 0);
        handles.push_back(cq.cq);
        const shm::Layout q = shm::qp_layout(16, 16);
        FdList qpfd = fds_of({memfd(q.bytes, [&](std::span<std::byte> m) {
            (void)shm::RingProducer<shm::SendWqe>::init(m.subspan(q.ring0, q.ring1 - q.ring0), 16);
            (void)shm::RingProducer<shm::RecvWqe>::init(m.subspan(q.ring1), 16);
        })});
        shm::CreateQpReq req{pd.handle,         cq.cq, cq.cq, shm::kNoHandle, 2, 0,
                             {16, 16, 1, 1, 0}, 16,    16};
        shm::CreateQpReply qp{};
        SNIC_FUZZ_REQUIRE(s.create_qp(req, qpfd, qp) == 0);
        handles.push_back(qp.qp);
    }
    for (int step = 0; step < 32 && !in.empty(); ++step) {
        switch (in.u8() % 20) {
            case 0:
                run_op(s, &Session::query_port, in, handles);
                break;
            case 1:
                run_op(s, &Session::alloc_pd, in, handles);
                break;
            case 2:
                run_op(s, &Session::dealloc_pd, in, handles);
                break;
            case 3:
                run_op(s, &Session::reg_mr, in, handles);
                break;
            case 4:
                run_op(s, &Session::dereg_mr, in, handles);
                break;
            case 5:
                run_op(s, &Session::alloc_mw, in, handles);
                break;
            case 6:
                run_op(s, &Session::dealloc_mw, in, handles);
                break;
            case 7:
                run_op(s, &Session::create_channel, in, handles);
                break;
            case 8:
                run_op(s, &Session::destroy_channel, in, handles);
                break;
            case 9:
                run_op(s, &Session::create_cq, in, handles);
                break;
            case 10:
                run_op(s, &Session::destroy_cq, in, handles);
                break;
            case 11:
                run_op(s, &Session::create_srq, in, handles);
                break;
            case 12:
                run_op(s, &Session::modify_srq, in, handles);
                break;
            case 13:
                run_op(s, &Session::query_srq, in, handles);
                break;
            case 14:
                run_op(s, &Session::destroy_srq, in, handles);
                break;
            case 15:
                run_op(s, &Session::create_qp, in, handles);
                break;
            case 16:
            case 17:
                run_op(s, &Session::modify_qp, in, handles);
                break;
            case 18:
                run_op(s, &Session::query_qp, in, handles);
                break;
            case 19:
                run_op(s, &Session::destroy_qp, in, handles);
                break;
        }
        for (std::size_t k = 0; k < shm::kObjKinds; ++k)
            SNIC_FUZZ_REQUIRE(s.counts()[k] <= r.counts()[k]);
        // The descriptors it keeps are its device's socket and its channels', all counted.
        SNIC_FUZZ_REQUIRE(s.fds() ==
                          1 + s.counts()[static_cast<std::size_t>(shm::ObjKind::channel)]);
        SNIC_FUZZ_REQUIRE(s.fds() <= r.limits().max_fds_per_client);
        SNIC_FUZZ_REQUIRE(r.fds_of_uid(s.peer().uid) == s.fds());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static Resources resources;
    static const std::vector<DevicePort> devices = fuzz::fake_ports();
    const std::size_t fds_before = open_fds();
    Input in(data, size);
    session_run(resources, devices, in);
    // The session is gone: nothing of it is left.
    for (std::size_t k = 0; k < shm::kObjKinds; ++k) SNIC_FUZZ_REQUIRE(resources.counts()[k] == 0);
    const ClientMemoryStats m = client_memory_stats();
    SNIC_FUZZ_REQUIRE(m.mapped_bytes == 0 && m.mappings == 0 && m.fds == 0);
    SNIC_FUZZ_REQUIRE(resources.fds_of_uid(1000) == 0);
    SNIC_FUZZ_REQUIRE(open_fds() == fds_before);
    return 0;
}
