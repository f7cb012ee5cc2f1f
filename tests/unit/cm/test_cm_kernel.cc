// The IB CM against Linux's: rping's rdma_cm exchange between two soft-RoCE (rxe) peers,
// captured on a wire (tests/vectors/rxe_real.pcap: rping -c on 10.99.0.3, rping -s on
// 10.99.0.2), replayed against snicd's CM service as the daemon runs it (the agent behind a
// GSI port, events in a client's ring) and against libclient's rules for the QP
// (libclient/cm_rules.h). Each side of the capture is played by snic in turn: the kernel's
// REQ goes to a passive snic, whose REP must be one the kernel takes, and a snic active side
// must send the kernel's REQ byte for byte (but for its own comm ID and CA GUID) and take the
// kernel's REP. The QP attributes each snic side ends up with must be those the capture's
// data packets show: each side sends from the PSN the other side's message carried.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "daemon/cm/service.h"
#include "daemon/roce/gsi.h"
#include "daemon/roce/ib_cm_wire.h"
#include "libclient/cm_rules.h"
#include "proto/cm/agent.h"
#include "proto/cm/cma.h"
#include "proto/cm/mad.h"
#include "proto/cm/messages.h"
#include "proto/roce/packet.h"
#include "shm/ring.h"
#include "tests/unit/daemon/session_fixture.h"
#include "tests/unit/pcap.h"

namespace snic::daemon {
namespace {

namespace rules = client::cm_rules;

constexpr std::uint32_t kActiveIp = 0x0A630003;   // 10.99.0.3: rping -c
constexpr std::uint32_t kPassiveIp = 0x0A630002;  // 10.99.0.2: rping -s
constexpr std::uint16_t kRpingPort = 7174;        // rping's default port

// --- the capture ----------------------------------------------------------------------------

// One RoCEv2 packet over IPv4.
struct Captured {
    std::size_t frame = 0;  // numbered from 1, as tshark numbers them
    std::uint32_t src_ip = 0, dst_ip = 0;
    std::uint8_t opcode = 0;
    std::uint32_t dest_qp = 0, psn = 0;
    std::vector<std::uint8_t> payload;  // for QP1's packets: the MAD
};

std::uint32_t be32(std::span<const std::uint8_t> b, std::size_t at) {
    return std::uint32_t{b[at]} << 24 | std::uint32_t{b[at + 1]} << 16 |
           std::uint32_t{b[at + 2]} << 8 | b[at + 3];
}

std::vector<Captured> roce_ipv4(const test::Pcap& pcap) {
    std::vector<Captured> out;
    for (std::size_t i = 0; i < pcap.frames.size(); ++i) {
        std::span<const std::uint8_t> f = pcap.frames[i];
        if (f.size() < 14 + 20 || f[12] != 0x08 || f[13] != 0x00) continue;
        const auto ip = f.subspan(14);
        const std::size_t ihl = (ip[0] & 0x0f) * 4u;
        if (ip[9] != 17 || ip.size() < ihl + 8) continue;
        const auto udp = ip.subspan(ihl);
        if ((udp[2] << 8 | udp[3]) != 4791) continue;
        const std::size_t udp_len = static_cast<std::size_t>(udp[4] << 8 | udp[5]);
        const roce::Packet p = roce::parse(udp.subspan(8, udp_len - 8));
        if (!p.ok()) continue;
        Captured c;
        c.frame = i + 1;
        c.src_ip = be32(ip, 12);
        c.dst_ip = be32(ip, 16);
        c.opcode = p.opcode();
        c.dest_qp = p.bth().dest_qp.host();
        c.psn = p.bth().psn.host();
        c.payload.assign(p.payload.begin(), p.payload.end());
        out.push_back(std::move(c));
    }
    return out;
}

cm::AttrId attr_of(std::span<const std::uint8_t> mad) {
    return static_cast<cm::AttrId>(mad[16] << 8 | mad[17]);
}

template <typename M>
M decoded(std::span<const std::uint8_t> mad) {
    auto m = cm::decode<M>(cm::ConstMadData(mad.data() + cm::kMadHeaderSize, cm::kMadDataSize));
    EXPECT_TRUE(m.has_value());
    return m.value_or(M{});
}

// An RC request (not an ACK, nor a READ response).
bool rc_request(std::uint8_t op) {
    return op <= 0x0c || op == 0x13 || op == 0x14;
}

// The capture's rdma_cm exchange and the first request each side sent on its QP.
struct Exchange {
    Captured req, rep, rtu, dreq, drep;
    Captured active_first, passive_first;
};

::testing::AssertionResult load(Exchange& x) {
    test::Pcap pcap;
    if (auto r = test::read_pcap(test::vector_path("rxe_real.pcap"), pcap); !r) return r;
    bool cm_seen[5] = {};
    bool first[2] = {};
    for (Captured& c : roce_ipv4(pcap)) {
        if (c.dest_qp == cm::kGsiQpn && c.payload.size() == cm::kMadSize) {
            constexpr cm::AttrId kOrder[5] = {cm::AttrId::req, cm::AttrId::rep, cm::AttrId::rtu,
                                              cm::AttrId::dreq, cm::AttrId::drep};
            Captured* slots[5] = {&x.req, &x.rep, &x.rtu, &x.dreq, &x.drep};
            for (std::size_t k = 0; k < 5; ++k) {
                if (attr_of(c.payload) != kOrder[k]) continue;
                *slots[k] = c;
                cm_seen[k] = true;
            }
        } else if (cm_seen[2] && rc_request(c.opcode)) {  // after the RTU: the QPs' traffic
            const int side = c.src_ip == kActiveIp ? 0 : 1;
            if (!first[side]) (side == 0 ? x.active_first : x.passive_first) = c;
            first[side] = true;
        }
    }
    for (bool seen : cm_seen)
        if (!seen) return ::testing::AssertionFailure() << "a CM message is missing";
    if (!first[0] || !first[1]) return ::testing::AssertionFailure() << "no data after the RTU";
    return ::testing::AssertionSuccess();
}

// A MAD of the capture with a 32-bit field of its message replaced (a comm ID or a QPN the
// kernel would have named as snic's).
std::vector<std::uint8_t> patched(std::vector<std::uint8_t> m, std::size_t data_offset,
                                  std::uint32_t v, std::size_t bytes = 4) {
    const std::size_t at = cm::kMadHeaderSize + data_offset;
    if (m.size() != cm::kMadSize || at + bytes > m.size()) {
        ADD_FAILURE() << "not a MAD, or no such field";
        return m;
    }
    for (std::size_t i = 0; i < bytes; ++i)
        m[at + i] = static_cast<std::uint8_t>(v >> (8 * (bytes - 1 - i)));
    return m;
}

// --- snicd's CM service on one port, with a client ------------------------------------------

struct SentMad {
    std::uint32_t ip, qpn, qkey;
    std::vector<std::uint8_t> mad;
};

class CmHarness {
  public:
    explicit CmHarness(std::uint32_t ip)
        : ports_{DevicePort{net::MacAddr{{0x02, 0, 0, 0, 0, 1}},
                            {{ip}, 24},
                            1500,
                            [] {
                                return LinkInfo{true, 10000};
                            }}},
          gsi_(&CmHarness::record, this, 1'000'000'000),
          wire_(&gsi_, ip, SipKey{42}, CmService::kMaxIdsPerSession),
          service_(ports_, {{0, &wire_}}, 42),
          session_(service_.new_session(Peer{100, 1000, 1000})) {
        const shm::Layout lay = shm::cm_event_layout();
        memfd_ = std::make_unique<fixture::ClientMemfd>(lay.bytes);
        auto ring = shm::RingConsumer<shm::CmEvent>::init(memfd_->span(), shm::kCmEventCapacity);
        EXPECT_TRUE(ring);
        if (ring) ring_ = *ring;
        int sv[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        notify_ = sv[0];
        FdList fds = fixture::fds_of({sv[1], memfd_->fd()});
        ::close(sv[1]);
        EXPECT_EQ(session_->open(fds, resources_), 0);
    }
    ~CmHarness() {
        session_.reset();
        ::close(notify_);
    }

    CmSession& session() { return *session_; }
    CmService& service() { return service_; }

    // A MAD arriving from `from` at QP1, then what the service does about it.
    void arrive(std::uint32_t from, std::span<const std::uint8_t> mad) {
        gsi_.receive(from, cm::kGsiQpn, cm::kGsiQkey, mad);
        run();
    }
    void run() {
        service_.run(CmService::now_ns());
        gsi_.poll(0);
    }
    std::optional<shm::CmEvent> event() {
        shm::CmEvent e;
        if (ring_ && ring_->try_pop(e)) return e;
        return std::nullopt;
    }
    std::vector<SentMad> sent;

    shm::Handle listen(std::uint16_t port, std::uint32_t backlog) {
        const shm::Handle h = create();
        shm::CmBindReply b{};
        EXPECT_EQ(session_->bind({h, 0, port, 0, 0}, b), 0);
        EXPECT_EQ(session_->listen({h, backlog}), 0);
        return h;
    }
    shm::Handle create() {
        shm::CmIdReply r{};
        EXPECT_EQ(session_->create_id({7, shm::kCmPsTcp, IBV_QPT_RC, {}}, r), 0);
        return r.id;
    }

  private:
    static bool record(void* ctx, std::uint32_t ip, std::uint32_t qpn, std::uint32_t qkey,
                       std::span<const std::uint8_t> payload) {
        static_cast<CmHarness*>(ctx)->sent.push_back(
            {ip, qpn, qkey, std::vector<std::uint8_t>(payload.begin(), payload.end())});
        return true;
    }

    std::vector<DevicePort> ports_;
    GsiPort gsi_;
    IbCmWire wire_;
    CmService service_;
    Resources resources_;
    std::unique_ptr<CmSession> session_;
    std::unique_ptr<fixture::ClientMemfd> memfd_;
    std::optional<shm::RingConsumer<shm::CmEvent>> ring_;
    int notify_ = -1;
};

// A snic port of 1500 bytes (IB MTU 1024, the capture's), as libsnic's device shows it.
rules::DeviceFacts snic_device() {
    rules::DeviceFacts d;
    d.port_mtu = IBV_MTU_1024;
    d.ca_ack_delay = 8;  // daemon/verbs/limits.h
    d.max_responder_resources = 128;
    d.max_initiator_depth = 128;
    return d;
}

// rping's conn_param, on both sides (librdmacm/examples/rping.c rping_init_conn_param).
rdma_conn_param rping_param() {
    rdma_conn_param p{};
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    return p;
}

ibv_gid gid_of(std::uint32_t ip) {
    const cm::Gid g = cm::gid_from_ipv4(ip);
    ibv_gid out{};
    std::copy(g.begin(), g.end(), out.raw);
    return out;
}

void expect_mad_header(std::span<const std::uint8_t> mad, cm::AttrId attr) {
    cm::MadView v;
    ASSERT_EQ(cm::parse_mad(mad, v), cm::MadDrop::ok);
    EXPECT_EQ(v.hdr.attr_id, static_cast<std::uint16_t>(attr));
}

std::uint64_t tid_of(std::span<const std::uint8_t> mad) {
    std::uint64_t t = 0;
    for (int i = 8; i < 16; ++i) t = t << 8 | mad[i];
    return t;
}

class KernelPeer : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        x_ = new Exchange;
        loaded_ = load(*x_);
    }
    static void TearDownTestSuite() {
        delete x_;
        x_ = nullptr;
    }
    void SetUp() override { ASSERT_TRUE(loaded_) << loaded_.message(); }
    static const Exchange& x() { return *x_; }

  private:
    static inline Exchange* x_ = nullptr;
    static inline ::testing::AssertionResult loaded_ = ::testing::AssertionSuccess();
};

// What the kernel's messages say, as the data that followed them confirms: each side sends
// from the Starting PSN of the other side's message (IBA §12.7.20, §12.7.31).
TEST_F(KernelPeer, each_kernel_side_sends_from_the_psn_of_the_others_message) {
    const auto req = decoded<cm::ReqMsg>(x().req.payload);
    const auto rep = decoded<cm::RepMsg>(x().rep.payload);
    EXPECT_EQ(x().req.src_ip, kActiveIp);
    EXPECT_EQ(req.starting_psn, 0x0a3bdeu);
    EXPECT_EQ(rep.starting_psn, 0x25e3ccu);
    EXPECT_EQ(x().active_first.psn, rep.starting_psn) << "frame " << x().active_first.frame;
    EXPECT_EQ(x().passive_first.psn, req.starting_psn) << "frame " << x().passive_first.frame;
    EXPECT_EQ(x().active_first.dest_qp, rep.local_qpn);
    EXPECT_EQ(x().passive_first.dest_qp, req.local_qpn);
    // The fields whose rules are Linux's, as rxe's kernel sent them (the table of
    // docs/PROTOCOL-CM.md): a REQ's Local ACK Timeout of cm_ack_timeout(15, 18) = 19, a
    // REP's Target ACK Delay of rxe's CA ACK delay (15), the flow label hashed from the
    // ports, hop limit 64, no SL or traffic class, LIDs permissive, the CMA header.
    EXPECT_EQ(req.primary.local_ack_timeout, rules::ack_timeout(15, 18));
    EXPECT_EQ(rep.target_ack_delay, 15);
    const auto hdr = cm::decode_cma_header(req.private_data);
    ASSERT_TRUE(hdr.has_value());
    EXPECT_EQ(hdr->src_ip, kActiveIp);
    EXPECT_EQ(hdr->dst_ip, kPassiveIp);
    EXPECT_EQ(req.service_id, cm::service_id(cm::PortSpace::tcp, kRpingPort));
    EXPECT_EQ(req.primary.flow_label, cm::roce_flow_label(hdr->src_port, kRpingPort));
    EXPECT_EQ(req.primary.hop_limit, 64);
    EXPECT_EQ(req.primary.traffic_class, 0);
    EXPECT_EQ(req.primary.sl, 0);
    EXPECT_EQ(req.primary.local_lid, cm::kPermissiveLid);
    EXPECT_EQ(req.primary.remote_lid, cm::kPermissiveLid);
    EXPECT_EQ(rep.remote_comm_id, req.local_comm_id);
    EXPECT_EQ(tid_of(x().rep.payload), tid_of(x().req.payload));  // REP answers the REQ
}

// snic passive: the kernel's REQ to a snic listener; the REP snic sends must be what the
// kernel's cm_rep_handler takes (the REQ's comm ID and TID echoed, our own QP and PSN, the
// resources rping accepts with), and snic's QP must end up as the kernel's passive QP did.
TEST_F(KernelPeer, snic_passive_answers_the_kernels_req_and_its_qp_takes_the_reqs_values) {
    CmHarness h(kPassiveIp);
    const shm::Handle listener = h.listen(kRpingPort, 16);
    h.arrive(kActiveIp, x().req.payload);
    const auto ev = h.event();
    ASSERT_TRUE(ev.has_value());
    ASSERT_EQ(ev->event, shm::kCmConnectRequest);
    EXPECT_NE(ev->id, listener);
    const auto req = decoded<cm::ReqMsg>(x().req.payload);
    const shm::CmConnParam& peer = ev->param;
    EXPECT_EQ(peer.qpn, req.local_qpn);
    EXPECT_EQ(peer.psn, req.starting_psn);
    EXPECT_EQ(peer.responder_resources, req.responder_resources);
    EXPECT_EQ(peer.initiator_depth, req.initiator_depth);
    EXPECT_EQ(peer.retry_count, 7);
    EXPECT_EQ(peer.rnr_retry_count, 7);
    EXPECT_EQ(peer.path_mtu, req.path_mtu);
    EXPECT_EQ(peer.ack_timeout, req.primary.local_ack_timeout);
    EXPECT_EQ(ev->src_ip, kPassiveIp);
    EXPECT_EQ(ev->dst_ip, kActiveIp);
    EXPECT_EQ(ev->src_port, kRpingPort);
    EXPECT_EQ(ev->dst_port, cm::decode_cma_header(req.private_data)->src_port);
    EXPECT_EQ(peer.private_data_len, cm::kCmaReqUserData);  // the header is not the user's

    // libsnic's rdma_accept with rping's conn_param.
    const rules::DeviceFacts dev = snic_device();
    const rdma_conn_param rp = rping_param();
    rules::Resources res;
    ASSERT_EQ(rules::resources(&rp, &peer, dev, true, res), 0);
    constexpr std::uint32_t kOurPsn = 0x5a5a5a, kOurQpn = 0x2a;
    shm::CmAcceptReq acc{ev->id, 0, rules::rep_fields(&rp, res, kOurPsn, dev)};
    acc.param.qpn = kOurQpn;
    acc.param.qp_type = IBV_QPT_RC;
    ASSERT_EQ(h.session().accept(acc), 0);
    h.run();
    ASSERT_EQ(h.sent.size(), 1u);
    const SentMad& out = h.sent[0];
    EXPECT_EQ(out.ip, kActiveIp);
    EXPECT_EQ(out.qpn, cm::kGsiQpn);
    EXPECT_EQ(out.qkey, cm::kGsiQkey);
    expect_mad_header(out.mad, cm::AttrId::rep);
    EXPECT_EQ(tid_of(out.mad), tid_of(x().req.payload));
    const auto ours = decoded<cm::RepMsg>(out.mad);
    const auto theirs = decoded<cm::RepMsg>(x().rep.payload);
    EXPECT_NE(ours.local_comm_id, 0u);
    EXPECT_EQ(ours.remote_comm_id, req.local_comm_id);
    EXPECT_EQ(ours.local_qpn, kOurQpn);
    EXPECT_EQ(ours.starting_psn, kOurPsn);
    EXPECT_EQ(ours.target_ack_delay, dev.ca_ack_delay);
    // Everything else is what the kernel's passive side sent.
    EXPECT_EQ(ours.local_qkey, theirs.local_qkey);
    EXPECT_EQ(ours.local_eecn, theirs.local_eecn);
    EXPECT_EQ(ours.responder_resources, theirs.responder_resources);
    EXPECT_EQ(ours.initiator_depth, theirs.initiator_depth);
    EXPECT_EQ(ours.failover_accepted, theirs.failover_accepted);
    EXPECT_EQ(ours.end_to_end_flow_control, theirs.end_to_end_flow_control);
    EXPECT_EQ(ours.rnr_retry_count, theirs.rnr_retry_count);
    EXPECT_EQ(ours.srq, theirs.srq);
    EXPECT_EQ(ours.private_data, theirs.private_data);

    // Our QP, as rdma_accept moves it: the REQ's PSN to send from (what the kernel's own
    // passive QP sent from), ours to receive with, the REQ's timeout and retry counts.
    rules::Side side;
    side.passive = true;
    side.sent = acc.param;
    side.peer = peer;
    ibv_qp_attr a{};
    int mask = 0;
    a.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(rules::qp_attr(side, dev, {}, IBV_QPT_RC, gid_of(kActiveIp), &a, &mask), 0);
    EXPECT_EQ(a.dest_qp_num, req.local_qpn);
    EXPECT_EQ(a.rq_psn, kOurPsn);
    EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(a.max_dest_rd_atomic, 1);
    EXPECT_EQ(a.ah_attr.grh.traffic_class, req.primary.traffic_class);
    // Linux's CM's RNR timer (655 ms), which the QP's RNR NAKs carry to the peer.
    EXPECT_EQ(a.min_rnr_timer, 0);
    EXPECT_TRUE(mask & IBV_QP_MIN_RNR_TIMER);
    a.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(rules::qp_attr(side, dev, {}, IBV_QPT_RC, gid_of(kActiveIp), &a, &mask), 0);
    EXPECT_EQ(a.sq_psn, x().passive_first.psn);
    EXPECT_EQ(a.timeout, req.primary.local_ack_timeout);
    EXPECT_EQ(a.retry_cnt, req.retry_count);
    EXPECT_EQ(a.rnr_retry, req.rnr_retry_count);
    EXPECT_EQ(a.max_rd_atomic, 1);

    // The kernel's RTU, naming our comm ID as it would: established.
    h.arrive(kActiveIp, patched(x().rtu.payload, 4, ours.local_comm_id));
    const auto est = h.event();
    ASSERT_TRUE(est.has_value());
    EXPECT_EQ(est->event, shm::kCmEstablished);
    EXPECT_EQ(est->id, ev->id);

    // Its DREQ (our comm ID, our QPN): DREP with the DREQ's TID, then DISCONNECTED.
    const auto dreq = patched(patched(x().dreq.payload, 4, ours.local_comm_id), 8, kOurQpn, 3);
    h.sent.clear();
    h.arrive(kActiveIp, dreq);
    ASSERT_EQ(h.sent.size(), 1u);
    expect_mad_header(h.sent[0].mad, cm::AttrId::drep);
    EXPECT_EQ(tid_of(h.sent[0].mad), tid_of(x().dreq.payload));
    const auto drep = decoded<cm::DrepMsg>(h.sent[0].mad);
    EXPECT_EQ(drep.local_comm_id, ours.local_comm_id);
    EXPECT_EQ(drep.remote_comm_id, req.local_comm_id);
    const auto gone = h.event();
    ASSERT_TRUE(gone.has_value());
    EXPECT_EQ(gone->event, shm::kCmDisconnected);
}

// snic active: with rping's conn_param, the QP, PSN and port of the capture, and the ACK
// timeout the kernel's route gave (19), snic's REQ is the kernel's byte for byte but for
// the comm ID, the CA GUID and the TID; the kernel's REP is taken, and the QP ends up with
// what the kernel's active QP had.
TEST_F(KernelPeer, snic_active_sends_the_kernels_req_and_its_qp_takes_the_reps_values) {
    CmHarness h(kActiveIp);
    const auto kreq = decoded<cm::ReqMsg>(x().req.payload);
    const auto hdr = cm::decode_cma_header(kreq.private_data);
    ASSERT_TRUE(hdr.has_value());
    const shm::Handle id = h.create();
    shm::CmBindReply b{};
    ASSERT_EQ(h.session().bind({id, kActiveIp, hdr->src_port, 0, 0}, b), 0);

    const rules::DeviceFacts dev = snic_device();
    const rules::IdOptions opts{.ack_timeout = 19, .tos = 0};
    const rdma_conn_param rp = rping_param();
    rules::Resources res;
    ASSERT_EQ(rules::resources(&rp, nullptr, dev, true, res), 0);
    shm::CmConnectReq req{};
    req.id = id;
    req.dst_ip = kPassiveIp;
    req.dst_port = kRpingPort;
    req.cm_response_timeout = 20;
    req.max_cm_retries = 15;
    req.transport = shm::kTransportRoce;
    req.param = rules::req_fields(&rp, res, kreq.starting_psn, opts, dev);
    req.param.qpn = kreq.local_qpn;
    req.param.qp_type = IBV_QPT_RC;
    ASSERT_EQ(h.session().connect(req), 0);
    h.run();
    ASSERT_EQ(h.sent.size(), 1u);
    const SentMad& out = h.sent[0];
    EXPECT_EQ(out.ip, kPassiveIp);
    expect_mad_header(out.mad, cm::AttrId::req);
    // The MAD header but for the TID, and the message but for the local comm ID (bytes 0-3)
    // and the local CA GUID (16-23).
    for (std::size_t i = 0; i < cm::kMadSize; ++i) {
        const std::size_t d = i - cm::kMadHeaderSize;
        if ((i >= 8 && i < 16) || (i >= cm::kMadHeaderSize && (d < 4 || (d >= 16 && d < 24))))
            continue;
        EXPECT_EQ(out.mad[i], x().req.payload[i]) << "byte " << i << " of the MAD";
    }
    const auto ours = decoded<cm::ReqMsg>(out.mad);

    // The kernel's REP, naming our comm ID as it would.
    h.sent.clear();
    h.arrive(kPassiveIp, patched(x().rep.payload, 4, ours.local_comm_id));
    const auto ev = h.event();
    ASSERT_TRUE(ev.has_value());
    ASSERT_EQ(ev->event, shm::kCmConnectResponse);
    const auto krep = decoded<cm::RepMsg>(x().rep.payload);
    const shm::CmConnParam& peer = ev->param;
    EXPECT_EQ(peer.qpn, krep.local_qpn);
    EXPECT_EQ(peer.psn, krep.starting_psn);
    EXPECT_EQ(peer.responder_resources, krep.responder_resources);
    EXPECT_EQ(peer.initiator_depth, krep.initiator_depth);
    EXPECT_EQ(peer.rnr_retry_count, krep.rnr_retry_count);
    EXPECT_EQ(peer.ack_timeout, krep.target_ack_delay);

    rules::Side side;
    side.passive = false;
    side.sent = req.param;
    side.sent.path_mtu = static_cast<std::uint8_t>(dev.port_mtu);
    side.peer = peer;
    ibv_qp_attr a{};
    int mask = 0;
    a.qp_state = IBV_QPS_RTR;
    ASSERT_EQ(rules::qp_attr(side, dev, opts, IBV_QPT_RC, gid_of(kPassiveIp), &a, &mask), 0);
    EXPECT_EQ(a.dest_qp_num, krep.local_qpn);
    EXPECT_EQ(a.rq_psn, x().passive_first.psn);  // what the kernel's passive side sent from
    EXPECT_EQ(a.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(a.max_dest_rd_atomic, krep.initiator_depth);
    EXPECT_EQ(a.min_rnr_timer, 0);
    EXPECT_TRUE(mask & IBV_QP_MIN_RNR_TIMER);
    a.qp_state = IBV_QPS_RTS;
    ASSERT_EQ(rules::qp_attr(side, dev, opts, IBV_QPT_RC, gid_of(kPassiveIp), &a, &mask), 0);
    EXPECT_EQ(a.sq_psn, x().active_first.psn);  // what the kernel's active side sent from
    EXPECT_EQ(a.timeout, 19);                   // set on the id, as the kernel's route had it
    EXPECT_EQ(a.retry_cnt, 7);
    EXPECT_EQ(a.rnr_retry, krep.rnr_retry_count);
    EXPECT_EQ(a.max_rd_atomic, krep.responder_resources);
    // Without the option: the REP's Target ACK Delay with snic's packet life time.
    ASSERT_EQ(rules::qp_attr(side, dev, {}, IBV_QPT_RC, gid_of(kPassiveIp), &a, &mask), 0);
    EXPECT_EQ(a.timeout, rules::ack_timeout(krep.target_ack_delay, rules::kPacketLifeTime));

    // rdma_connect's RTU: what the kernel's cm_rtu_handler looks up (its comm ID, ours).
    shm::CmAcceptReq rtu{id, 0, {}};
    ASSERT_EQ(h.session().accept(rtu), 0);
    h.run();
    ASSERT_EQ(h.sent.size(), 1u);
    expect_mad_header(h.sent[0].mad, cm::AttrId::rtu);
    const auto r = decoded<cm::RtuMsg>(h.sent[0].mad);
    EXPECT_EQ(r.local_comm_id, ours.local_comm_id);
    EXPECT_EQ(r.remote_comm_id, krep.local_comm_id);
}

// A full listen backlog: Linux's ucma forgets the REQ unanswered (ENOMEM, so cm.c sends no
// REJ), and the sender's next REQ is a new request once there is room. snicd did send REJ 28.
TEST_F(KernelPeer, a_req_beyond_the_backlog_is_forgotten_unanswered_and_taken_when_it_returns) {
    CmHarness h(kPassiveIp);
    h.listen(kRpingPort, 1);
    h.arrive(kActiveIp, x().req.payload);
    const auto first = h.event();
    ASSERT_TRUE(first.has_value());
    ASSERT_EQ(first->event, shm::kCmConnectRequest);
    // Another connection's REQ (its own comm ID and QP) while the first is unanswered.
    const auto second = patched(patched(x().req.payload, 0, 0x11223344), 32, 0x99, 3);
    h.arrive(kActiveIp, second);
    EXPECT_FALSE(h.event().has_value());
    EXPECT_TRUE(h.sent.empty()) << "no REJ, no MRA";
    shm::CmStatusReply st;
    h.service().fill_status(st);
    EXPECT_EQ(st.backlog_full, 1u);
    // The first is rejected by its consumer: room again. The second REQ, sent again, is new.
    ASSERT_EQ(h.session().reject({first->id, 0, {}, {}}), 0);
    h.run();
    h.sent.clear();
    h.arrive(kActiveIp, second);
    const auto again = h.event();
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->event, shm::kCmConnectRequest);
    EXPECT_EQ(again->param.qpn, 0x99u);
    EXPECT_TRUE(h.sent.empty());
}

// The kernel's REQ where nobody takes it: no listener on its service ID at all, REJ 8 (cm.c
// cm_match_req); a listener on the service whose QP type differs, REJ 28 (cma.c's handler
// refuses and cm.c rejects for the consumer). Either answers the REQ's TID and comm ID.
TEST_F(KernelPeer, the_kernels_req_is_rejected_as_linux_rejects_it) {
    for (const bool listener : {false, true}) {
        CmHarness h(kPassiveIp);
        if (listener) {
            shm::CmIdReply r{};
            ASSERT_EQ(h.session().create_id({7, shm::kCmPsTcp, IBV_QPT_UC, {}}, r), 0);
            shm::CmBindReply b{};
            ASSERT_EQ(h.session().bind({r.id, 0, kRpingPort, 0, 0}, b), 0);
            ASSERT_EQ(h.session().listen({r.id, 16}), 0);
        }
        h.arrive(kActiveIp, x().req.payload);
        EXPECT_FALSE(h.event().has_value());
        ASSERT_EQ(h.sent.size(), 1u);
        expect_mad_header(h.sent[0].mad, cm::AttrId::rej);
        EXPECT_EQ(tid_of(h.sent[0].mad), tid_of(x().req.payload));
        const auto rej = decoded<cm::RejMsg>(h.sent[0].mad);
        EXPECT_EQ(rej.reason,
                  listener ? cm::rej_reason::consumer_reject : cm::rej_reason::invalid_service_id);
        EXPECT_EQ(rej.remote_comm_id, decoded<cm::ReqMsg>(x().req.payload).local_comm_id);
        EXPECT_EQ(rej.message_rejected, static_cast<std::uint8_t>(cm::MsgCode::req));
    }
}

// --- the rules alone, on values the capture cannot tell apart -------------------------------

// cm.c's cm_ack_timeout, at values worked by hand from its code.
TEST(CmRules, ack_timeout_is_cm_c_s) {
    EXPECT_EQ(rules::ack_timeout(15, 18), 19);  // rxe's REQ in the capture
    EXPECT_EQ(rules::ack_timeout(15, 16), 17);  // newer kernels' packet life time
    EXPECT_EQ(rules::ack_timeout(15, 13), 16);
    EXPECT_EQ(rules::ack_timeout(8, 13), 14);  // snic to snic
    EXPECT_EQ(rules::ack_timeout(8, 9), 10);
    EXPECT_EQ(rules::ack_timeout(15, 0), 15);
    EXPECT_EQ(rules::ack_timeout(0, 31), 31);  // capped
    EXPECT_EQ(rules::packet_life_time({}), rules::kPacketLifeTime);
    EXPECT_EQ(rules::packet_life_time({.ack_timeout = 10}), 9);
}

// Two sides asking for different things: each QP takes every value from the message that
// names it for its receiver, never its own ask where the peer decides.
TEST(CmRules, each_qp_takes_the_peers_message_where_the_peer_decides) {
    const rules::DeviceFacts dev = snic_device();
    rdma_conn_param ask{};  // the active side's rdma_connect
    ask.responder_resources = 4;
    ask.initiator_depth = 2;
    ask.retry_count = 5;
    ask.rnr_retry_count = 3;
    ask.flow_control = 1;
    rdma_conn_param give{};  // the passive side's rdma_accept
    give.responder_resources = 3;
    give.initiator_depth = 1;
    give.rnr_retry_count = 6;
    const rules::IdOptions active_opts{.ack_timeout = 0, .tos = 0x20};
    const rules::IdOptions passive_opts{.ack_timeout = 0, .tos = 0x48};  // the listener's

    rules::Resources ra, rp;
    ASSERT_EQ(rules::resources(&ask, nullptr, dev, true, ra), 0);
    rules::Side act;
    act.sent = rules::req_fields(&ask, ra, 0x111111, active_opts, dev);
    act.sent.qpn = 0x100;
    rules::Side pas;
    pas.passive = true;
    pas.peer = act.sent;  // the REQ, as the passive side's event gives it
    ASSERT_EQ(rules::resources(&give, &pas.peer, dev, true, rp), 0);
    pas.sent = rules::rep_fields(&give, rp, 0x222222, dev);
    pas.sent.qpn = 0x200;
    act.peer = pas.sent;  // the REP
    EXPECT_EQ(act.sent.ack_timeout, rules::ack_timeout(dev.ca_ack_delay, rules::kPacketLifeTime));
    EXPECT_EQ(pas.sent.ack_timeout, dev.ca_ack_delay);
    EXPECT_EQ(act.sent.flow_control, 1);
    EXPECT_EQ(pas.sent.rnr_retry_count, 6);

    ibv_qp_attr a{};
    int mask = 0;
    auto at = [&](const rules::Side& s, const rules::IdOptions& o, ibv_qp_state st) {
        a = ibv_qp_attr{};
        a.qp_state = st;
        EXPECT_EQ(rules::qp_attr(s, dev, o, IBV_QPT_RC, ibv_gid{}, &a, &mask), 0);
        return a;
    };
    // Active: reads answered as the REP's initiator depth, issued as its responder resources.
    EXPECT_EQ(at(act, active_opts, IBV_QPS_RTR).max_dest_rd_atomic, 1);
    EXPECT_EQ(a.dest_qp_num, 0x200u);
    EXPECT_EQ(a.rq_psn, 0x111111u);
    EXPECT_EQ(a.ah_attr.grh.traffic_class, 0x20);
    EXPECT_EQ(at(act, active_opts, IBV_QPS_RTS).max_rd_atomic, 3);
    EXPECT_EQ(a.sq_psn, 0x222222u);
    EXPECT_EQ(a.retry_cnt, 5);  // its own
    EXPECT_EQ(a.rnr_retry, 6);  // the REP's
    EXPECT_EQ(a.timeout, rules::ack_timeout(dev.ca_ack_delay, rules::kPacketLifeTime));
    // Passive: its own resources as its REP gave them, the REQ's counts, TC and timeout.
    EXPECT_EQ(at(pas, passive_opts, IBV_QPS_RTR).max_dest_rd_atomic, 3);
    EXPECT_EQ(a.dest_qp_num, 0x100u);
    EXPECT_EQ(a.rq_psn, 0x222222u);
    EXPECT_EQ(a.ah_attr.grh.traffic_class, 0x20);  // the REQ's, not the listener's 0x48
    EXPECT_EQ(at(pas, passive_opts, IBV_QPS_RTS).max_rd_atomic, 1);
    EXPECT_EQ(a.sq_psn, 0x111111u);
    EXPECT_EQ(a.retry_cnt, 5);  // the REQ's
    EXPECT_EQ(a.rnr_retry, 3);  // the REQ's, not the 6 it asked of the active side
    EXPECT_EQ(a.timeout, act.sent.ack_timeout);
    // An ACK timeout set on an id is that id's QP's alone.
    EXPECT_EQ(at(pas, {.ack_timeout = 11, .tos = 0}, IBV_QPS_RTS).timeout, 11);
    EXPECT_EQ(at(act, {.ack_timeout = 12, .tos = 0}, IBV_QPS_RTS).timeout, 12);
    // INIT: remote reads and atomics only for a peer that will issue them.
    EXPECT_EQ(
        at(pas, passive_opts, IBV_QPS_INIT).qp_access_flags,
        unsigned{IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC});
    rules::Side no_reads = pas;
    no_reads.peer.initiator_depth = 0;
    EXPECT_EQ(at(no_reads, passive_opts, IBV_QPS_INIT).qp_access_flags,
              unsigned{IBV_ACCESS_REMOTE_WRITE});
}

// librdmacm's resources: a value as given, "the most" (0xff, or no conn_param) as the
// device's most (active) or the least of the request's and the device's (passive), and a
// value beyond the device's refused in the TCP port space.
TEST(CmRules, resources_are_librdmacms) {
    const rules::DeviceFacts dev = snic_device();
    shm::CmConnParam req{};
    req.responder_resources = 5;
    req.initiator_depth = 200;
    rules::Resources r;
    ASSERT_EQ(rules::resources(nullptr, nullptr, dev, true, r), 0);
    EXPECT_EQ(r.responder_resources, 128);
    EXPECT_EQ(r.initiator_depth, 128);
    ASSERT_EQ(rules::resources(nullptr, &req, dev, true, r), 0);
    EXPECT_EQ(r.responder_resources, 128);  // min(REQ's initiator depth 200, 128)
    EXPECT_EQ(r.initiator_depth, 5);        // the REQ's responder resources
    rdma_conn_param p{};
    p.responder_resources = rules::kMaxResources;
    p.initiator_depth = 2;
    ASSERT_EQ(rules::resources(&p, &req, dev, true, r), 0);
    EXPECT_EQ(r.responder_resources, 128);
    EXPECT_EQ(r.initiator_depth, 2);
    p.initiator_depth = 129;
    EXPECT_EQ(rules::resources(&p, &req, dev, true, r), EINVAL);
    ASSERT_EQ(rules::resources(&p, &req, dev, false, r), 0);
    EXPECT_EQ(r.initiator_depth, 128);
    // Without a conn_param a REQ asks for retries of 7 each and no flow control.
    const shm::CmConnParam q = rules::req_fields(nullptr, r, 1, {}, dev);
    EXPECT_EQ(q.retry_count, 7);
    EXPECT_EQ(q.rnr_retry_count, 7);
    EXPECT_EQ(q.flow_control, 0);
}

}  // namespace
}  // namespace snic::daemon
