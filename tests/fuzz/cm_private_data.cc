// libFuzzer target: the private data a client gives with rdma_cm's connect, accept (and the
// active side's confirm) and reject (daemon/cm/session.cc), for every transport. A CmService
// with one client session (an event ring in a memfd, a notification socket, as libsnic opens
// it) over two fake wires: one like RoCEv2's IB CM (requests 92 bytes, replies 196, rejects
// 148; SIDR 216 and 136) and one like iWARP's MPA (512 for everything, more than any request
// struct holds). The input chooses the ops (create_id, bind, listen, connect, accept,
// reject, disconnect, destroy_id), their fields, private_data_len (0 to 255) and the bytes,
// and the wires' events (connect requests, replies, rejections, disconnects, ...).
//
// Each request struct is on the heap with exactly its size, so a read past its private_data
// array (the array is each struct's last member) is an ASan report: a past bug copied up to
// 255 bytes from CmRejectReq's 148 to an MPA reject, daemon memory onto the wire. Asserts:
// every private-data span a wire receives lies inside the request's own private_data array
// and within the wire's private_max for that message (the wire reads every byte of it, as it
// would copy it into its message); every op answers 0 or an errno; every event in the ring
// carries at most kCmMaxPrivate bytes; when the session goes, no descriptor is left open.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "daemon/cm/service.h"
#include "daemon/cm/wire.h"
#include "shm/cm.h"
#include "shm/ring.h"
#include "tests/fuzz/daemon_support.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace snic;
using namespace snic::daemon;
using fuzz::Input;

constexpr std::uint8_t kRc = 2, kUc = 3, kUd = 4;  // ibv_qp_type
constexpr std::uint32_t kPortIp = 0xc6120001;      // fake_ports()'s address
constexpr std::uint32_t kPeerIp = 0xc6120009;

// The request the op in progress was given: its heap block and its private_data array.
struct Given {
    std::span<const std::uint8_t> block;
    std::span<const std::uint8_t> pd;
};

bool inside(std::span<const std::uint8_t> outer, const void* p, std::size_t n) {
    const auto lo = reinterpret_cast<std::uintptr_t>(outer.data());
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    return b >= lo && b <= lo + outer.size() && n <= lo + outer.size() - b;
}

volatile std::uint8_t g_read;  // keeps the wire's reads of private data from being elided

// A device's wire that checks the private data it is handed; events come from the input.
class FakeWire final : public CmWire {
  public:
    struct Limits {
        std::size_t request, reply, reject, sidr_request, sidr_reply;
    };
    FakeWire(std::uint8_t transport, bool datagrams, bool listens, Limits limits,
             const Given& given)
        : transport_(transport),
          datagrams_(datagrams),
          listens_(listens),
          limits_(limits),
          given_(given) {}

    std::uint8_t transport() const override { return transport_; }
    bool datagrams() const override { return datagrams_; }
    std::size_t private_max(CmMessage m, bool datagram) const override {
        switch (m) {
            case CmMessage::request:
                return datagram ? limits_.sidr_request : limits_.request;
            case CmMessage::reply:
                return datagram ? limits_.sidr_reply : limits_.reply;
            case CmMessage::reject:
                return limits_.reject;
        }
        return 0;
    }
    Result<bool> listen(std::uint16_t, std::uint32_t, std::uint8_t, const Peer&) override {
        return listens_;
    }
    void unlisten(std::uint16_t) override {}
    Result<WireConn> connect(const CmConnectSpec& s) override {
        SNIC_FUZZ_REQUIRE(s.param != nullptr &&
                          inside(given_.block, s.param, sizeof(shm::CmConnParam)));
        check({s.param->private_data, s.param->private_data_len},
              private_max(CmMessage::request, s.qp_type == kUd));
        const WireConn c = next_conn_++;
        conns.push_back(c);
        return c;
    }
    void owned_by(WireConn, const Peer&) override {}
    Status accept(WireConn, const shm::CmConnParam& param, std::uint8_t qp_type) override {
        SNIC_FUZZ_REQUIRE(inside(given_.block, &param, sizeof param));
        check({param.private_data, param.private_data_len},
              private_max(CmMessage::reply, qp_type == kUd));
        return Ok{};
    }
    // IB CM's RTU carries up to 224 bytes (kCmMaxPrivate), the array's size; MPA sends
    // nothing. No CmMessage bounds it: the array does.
    Status confirm(WireConn, std::span<const std::uint8_t> pd) override {
        check(pd, shm::kCmMaxPrivate);
        return Ok{};
    }
    Status reject(WireConn, bool, bool datagram, std::span<const std::uint8_t> pd) override {
        check(pd, private_max(CmMessage::reject, datagram));
        return Ok{};
    }
    void refuse(WireConn, Refusal, bool) override {}
    Status disconnect(WireConn) override { return Ok{}; }
    void forget(WireConn) override {}
    void release(WireConn) override {}
    std::uint32_t qp_binding(WireConn conn) const override {
        return transport_ == shm::kTransportIwarp ? static_cast<std::uint32_t>(conn) : 0;
    }
    void poll_fds(std::vector<int>&) const override {}
    void run(std::uint64_t) override {
        for (const CmWireEvent& e : pending) {
            queue(e);
            settle();
        }
        pending.clear();
    }
    std::uint64_t next_deadline() const override { return ~std::uint64_t{0}; }
    bool status(shm::CmPortStatus&) const override { return false; }

    std::vector<CmWireEvent> pending;  // handed to the service by the next run()
    std::vector<WireConn> conns;       // every connection it made or announced

  private:
    // Reads every byte first, as a wire copying it into its message would (ASan names a
    // byte outside the request's block), then checks where the span lies.
    void check(std::span<const std::uint8_t> pd, std::size_t max) const {
        std::uint8_t x = 0;
        for (const std::uint8_t b : pd) x ^= b;
        g_read = x;
        SNIC_FUZZ_REQUIRE(pd.size() <= max);
        if (!pd.empty()) SNIC_FUZZ_REQUIRE(inside(given_.pd, pd.data(), pd.size()));
    }

    std::uint8_t transport_;
    bool datagrams_;
    bool listens_;
    Limits limits_;
    const Given& given_;
    WireConn next_conn_ = 0x100;
};

void require_errno(int err) {
    SNIC_FUZZ_REQUIRE(err >= 0 && err < 4096);
}

// The client's end: the session, its event ring and notification socket.
struct Client {
    Client(CmService& service, Resources& resources, std::uint32_t uid) {
        session = service.new_session(Peer{100, uid, uid});
        const shm::Layout lay = shm::cm_event_layout();
        bytes = lay.bytes;
        const int mfd = fuzz::memfd(bytes);
        map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
        SNIC_FUZZ_REQUIRE(map != MAP_FAILED);
        auto r = shm::RingConsumer<shm::CmEvent>::init({static_cast<std::byte*>(map), bytes},
                                                       shm::kCmEventCapacity);
        SNIC_FUZZ_REQUIRE(r.has_value());
        ring = *r;
        int sv[2];
        SNIC_FUZZ_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        notify = sv[0];
        FdList fds;
        fds.push(sv[1]);
        fds.push(mfd);
        SNIC_FUZZ_REQUIRE(session->open(fds, resources) == 0);
    }
    ~Client() {
        session.reset();
        ::munmap(map, bytes);
        ::close(notify);
    }
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    // Takes every event queued (and its notification bytes); new ids join `handles`.
    void drain(std::vector<shm::Handle>& handles) {
        shm::CmEvent e;
        while (ring && ring->try_pop(e)) {
            SNIC_FUZZ_REQUIRE(e.param.private_data_len <= shm::kCmMaxPrivate);
            if (e.event == shm::kCmConnectRequest) handles.push_back(e.id);
        }
        std::uint8_t buf[256];
        while (::recv(notify, buf, sizeof buf, MSG_DONTWAIT) > 0) {
        }
    }

    std::unique_ptr<CmSession> session;
    std::optional<shm::RingConsumer<shm::CmEvent>> ring;
    void* map = nullptr;
    std::size_t bytes = 0;
    int notify = -1;
};

// The private data the input gives: its length (any byte: 0 to 255) and its bytes, written
// into the request's array as far as the array goes.
template <std::size_t N>
std::uint8_t fill_private(Input& in, std::uint8_t (&dst)[N]) {
    const std::uint8_t len = in.u8();
    const auto b = in.bytes(std::min<std::size_t>(len, N));
    std::memcpy(dst, b.data(), b.size());
    return len;
}

void fill_param(Input& in, shm::CmConnParam& p) {
    p.qpn = in.u32() & 0xffffff;
    p.psn = in.u32() & 0xffffff;
    p.responder_resources = in.u8();
    p.initiator_depth = in.u8();
    p.qp_type = in.u8();
    p.qkey = in.u32();
    p.private_data_len = fill_private(in, p.private_data);
}

// What a wire may read of request `r` on the heap: its block, and its private_data array.
template <typename Req, std::size_t N>
Given given_of(const Req& r, const std::uint8_t (&pd)[N]) {
    return {{reinterpret_cast<const std::uint8_t*>(&r), sizeof r}, {pd, N}};
}

const std::uint16_t kPortSpaces[] = {shm::kCmPsTcp, shm::kCmPsUdp, shm::kCmPsIb, shm::kCmPsIpoib};

void run(Input& in, Resources& resources, const std::vector<DevicePort>& devices) {
    Given given;
    FakeWire roce(static_cast<std::uint8_t>(shm::kTransportRoce), true, false,
                  {92, 196, 148, 216, 136}, given);
    FakeWire iw(static_cast<std::uint8_t>(shm::kTransportIwarp), false, true,
                {512, 512, 512, 512, 512}, given);
    CmService service(devices, {{0, &roce}, {0, &iw}}, 42);
    Client client(service, resources, in.u8() & 1 ? 0 : 1000);
    CmSession& s = *client.session;
    std::vector<shm::Handle> handles;
    auto pick = [&]() -> shm::Handle {
        const std::uint8_t b = in.u8();
        if (handles.empty() || b >= 248) return in.u32();
        return handles[b % handles.size()];
    };

    for (int step = 0; step < 64 && !in.empty(); ++step) {
        int err = 0;
        switch (in.u8() % 9) {
            case 0: {
                const std::uint8_t how = in.u8();
                shm::CmCreateIdReq r{};
                r.token = in.u64();
                r.ps = how & 0x80 ? in.u16() : kPortSpaces[how % 4];
                r.qp_type = how & 0x40 ? in.u8() : static_cast<std::uint8_t>(kRc + how / 4 % 3);
                shm::CmIdReply out{};
                err = s.create_id(r, out);
                if (err == 0) handles.push_back(out.id);
                break;
            }
            case 1: {
                const std::uint8_t how = in.u8();
                shm::CmBindReq r{};
                r.id = pick();
                r.ip = how & 1 ? kPortIp : how & 2 ? in.u32() : 0;
                r.port = how & 4   ? in.u16()
                         : how & 8 ? 0
                                   : static_cast<std::uint16_t>(7000 + how / 16);
                r.reuse_addr = how & 0x80 ? 1 : 0;
                shm::CmBindReply out{};
                err = s.bind(r, out);
                break;
            }
            case 2:
                err = s.listen({pick(), in.u8()});
                break;
            case 3: {
                const std::uint8_t how = in.u8();
                shm::CmConnectReq r{};
                r.id = pick();
                r.dst_ip = how & 1 ? in.u32() : kPeerIp;
                r.dst_port = how & 2 ? in.u16() : 7000;
                r.cm_response_timeout = in.u8();
                r.max_cm_retries = in.u8();
                r.transport = how & 4   ? in.u8()
                              : how & 8 ? static_cast<std::uint8_t>(shm::kTransportIwarp)
                                        : static_cast<std::uint8_t>(shm::kTransportRoce);
                fill_param(in, r.param);
                // On the heap with exactly its size: ASan sees a read past it.
                const auto req = std::make_unique<shm::CmConnectReq>(r);
                given = given_of(*req, req->param.private_data);
                err = s.connect(*req);
                break;
            }
            case 4: {
                shm::CmAcceptReq r{};
                r.id = pick();
                fill_param(in, r.param);
                const auto req = std::make_unique<shm::CmAcceptReq>(r);
                given = given_of(*req, req->param.private_data);
                err = s.accept(*req);
                break;
            }
            case 5: {
                shm::CmRejectReq r{};
                r.id = pick();
                r.private_data_len = fill_private(in, r.private_data);
                const auto req = std::make_unique<shm::CmRejectReq>(r);
                given = given_of(*req, req->private_data);
                err = s.reject(*req);
                break;
            }
            case 6:
                err = s.disconnect({pick(), 0});
                break;
            case 7:
                err = s.destroy_id({pick(), 0});
                break;
            case 8: {  // an event of one wire's connection
                const std::uint8_t how = in.u8();
                FakeWire& w = how & 1 ? iw : roce;
                CmWireEvent e;
                e.kind = static_cast<CmWireEvent::Kind>(how / 2 % 9);
                if (e.kind == CmWireEvent::Kind::request || w.conns.empty() || (how & 0x80)) {
                    e.conn = 0x1000 + in.u16();
                    if (e.kind == CmWireEvent::Kind::request) w.conns.push_back(e.conn);
                } else {
                    e.conn = w.conns[in.u8() % w.conns.size()];
                }
                e.status = static_cast<std::int8_t>(in.u8());
                e.local_ip = in.u8() & 1 ? kPortIp : in.u32();
                e.remote_ip = kPeerIp;
                e.local_port = static_cast<std::uint16_t>(7000 + in.u8() % 4);
                e.remote_port = in.u16();
                e.ps = kPortSpaces[in.u8() % 4];
                e.readable = (in.u8() & 7) != 0;
                // The peer's parameters, bounded for the event as a wire bounds them.
                e.peer.qpn = in.u32() & 0xffffff;
                e.peer.qp_type = std::array{kRc, kUc, kUd}[in.u8() % 3];
                const auto b = in.bytes(in.u8() % (shm::kCmMaxPrivate + 1));
                std::memcpy(e.peer.private_data, b.data(), b.size());
                e.peer.private_data_len = static_cast<std::uint8_t>(b.size());
                w.pending.push_back(e);
                service.run(0);
                break;
            }
        }
        given = {};
        require_errno(err);
        client.drain(handles);
        if (handles.size() > 64) handles.erase(handles.begin());
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static Resources resources;
    static const std::vector<DevicePort> devices = fuzz::fake_ports();
    const std::size_t fds_before = fuzz::open_fds();
    Input in(data, size);
    run(in, resources, devices);
    SNIC_FUZZ_REQUIRE(resources.fds_of_uid(0) == 0 && resources.fds_of_uid(1000) == 0);
    SNIC_FUZZ_REQUIRE(fuzz::open_fds() == fds_before);
    return 0;
}
