// The CM wire formats: the MAD header, every CM message against the IBA offsets (golden
// bytes), round trips of every message, rdma_cm's service IDs and cma header.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

#include "proto/cm/cma.h"
#include "proto/cm/mad.h"
#include "proto/cm/messages.h"

namespace snic::cm {
namespace {

// The MAD byte at an offset of the CM message (the data starts after the 24-byte header).
constexpr std::size_t D = kMadHeaderSize;

ReqMsg sample_req() {
    ReqMsg m;
    m.local_comm_id = 0x11223344;
    m.service_id = 0x0000000001060000ULL | 0x12B7;
    m.local_ca_guid = 0x0102030405060708ULL;
    m.local_qkey = 0xA1A2A3A4;
    m.local_qpn = 0x123456;
    m.responder_resources = 0x10;
    m.local_eecn = 0x654321;
    m.initiator_depth = 0x08;
    m.remote_eecn = 0x0A0B0C;
    m.remote_cm_response_timeout = 20;
    m.transport_service_type = static_cast<std::uint8_t>(TransportType::uc);
    m.end_to_end_flow_control = 1;
    m.starting_psn = 0xFEDCBA;
    m.local_cm_response_timeout = 19;
    m.retry_count = 7;
    m.pkey = 0xFFFF;
    m.path_mtu = 5;
    m.rdc_exists = 1;
    m.rnr_retry_count = 6;
    m.max_cm_retries = 15;
    m.srq = 1;
    m.extended_transport_type = 0;
    m.primary.local_lid = 0xFFFF;
    m.primary.remote_lid = 0xFFFF;
    m.primary.local_gid = gid_from_ipv4(0xC0A80001);
    m.primary.remote_gid = gid_from_ipv4(0xC0A80002);
    m.primary.flow_label = 0xABCDE;
    m.primary.packet_rate = 0x2A;
    m.primary.traffic_class = 0x60;
    m.primary.hop_limit = 64;
    m.primary.sl = 0xC;
    m.primary.subnet_local = 1;
    m.primary.local_ack_timeout = 14;
    for (std::size_t i = 0; i < m.private_data.size(); ++i)
        m.private_data[i] = static_cast<std::uint8_t>(0x80 + i);
    return m;
}

TEST(CmMad, HeaderIsClassCmVersion2MethodSend) {
    Mad mad = build_mad(0x0102030405060708ULL, RtuMsg{});
    EXPECT_EQ(mad[0], 1);     // base version
    EXPECT_EQ(mad[1], 0x07);  // management class CM
    EXPECT_EQ(mad[2], 2);     // class version
    EXPECT_EQ(mad[3], 0x03);  // method Send
    EXPECT_EQ(mad[4] | mad[5] | mad[6] | mad[7], 0);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(mad[8 + i], i + 1) << "tid byte " << i;
    EXPECT_EQ(mad[16], 0x00);
    EXPECT_EQ(mad[17], 0x14);  // RTU
    MadView v;
    ASSERT_EQ(parse_mad(mad, v), MadDrop::ok);
    EXPECT_EQ(v.hdr.tid, 0x0102030405060708ULL);
    EXPECT_EQ(v.hdr.attr_id, 0x14);
    EXPECT_EQ(v.data.size(), kMadDataSize);
}

TEST(CmMad, ParseRefusesEachWrongHeaderFieldWithItsReason) {
    const Mad good = build_mad(1, RtuMsg{});
    MadView v;
    EXPECT_EQ(parse_mad(std::span(good).first(255), v), MadDrop::wrong_size);
    std::vector<std::uint8_t> longer(good.begin(), good.end());
    longer.push_back(0);
    EXPECT_EQ(parse_mad(longer, v), MadDrop::wrong_size);
    const std::pair<std::size_t, MadDrop> cases[] = {{0, MadDrop::base_version},
                                                     {1, MadDrop::mgmt_class},
                                                     {2, MadDrop::class_version},
                                                     {3, MadDrop::method}};
    for (auto [byte, why] : cases) {
        Mad bad = good;
        bad[byte] ^= 0x40;
        EXPECT_EQ(parse_mad(bad, v), why) << mad_drop_name(why);
    }
}

TEST(CmMessages, AttributeIdsAreIbas) {
    EXPECT_EQ(static_cast<int>(ReqMsg::kAttr), 0x10);
    EXPECT_EQ(static_cast<int>(MraMsg::kAttr), 0x11);
    EXPECT_EQ(static_cast<int>(RejMsg::kAttr), 0x12);
    EXPECT_EQ(static_cast<int>(RepMsg::kAttr), 0x13);
    EXPECT_EQ(static_cast<int>(RtuMsg::kAttr), 0x14);
    EXPECT_EQ(static_cast<int>(DreqMsg::kAttr), 0x15);
    EXPECT_EQ(static_cast<int>(DrepMsg::kAttr), 0x16);
    EXPECT_EQ(static_cast<int>(SidrReqMsg::kAttr), 0x17);
    EXPECT_EQ(static_cast<int>(SidrRepMsg::kAttr), 0x18);
    EXPECT_EQ(static_cast<int>(LapMsg::kAttr), 0x19);
    EXPECT_EQ(static_cast<int>(AprMsg::kAttr), 0x1A);
}

// Each private data area runs to the end of the 232 bytes of MAD data.
TEST(CmMessages, PrivateDataSizesEndAtTheMadsEnd) {
    EXPECT_EQ(140 + kReqPrivate, kMadDataSize);
    EXPECT_EQ(10 + kMraPrivate, kMadDataSize);
    EXPECT_EQ(84 + kRejPrivate, kMadDataSize);
    EXPECT_EQ(36 + kRepPrivate, kMadDataSize);
    EXPECT_EQ(8 + kRtuPrivate, kMadDataSize);
    EXPECT_EQ(12 + kDreqPrivate, kMadDataSize);
    EXPECT_EQ(8 + kDrepPrivate, kMadDataSize);
    EXPECT_EQ(64 + kLapPrivate, kMadDataSize);
    EXPECT_EQ(84 + kAprPrivate, kMadDataSize);
    EXPECT_EQ(16 + kSidrReqPrivate, kMadDataSize);
    EXPECT_EQ(96 + kSidrRepPrivate, kMadDataSize);
}

// REQ byte by byte at the offsets of IBA's REQ message contents table.
TEST(CmMessages, ReqGoldenBytesAtIbaOffsets) {
    const Mad mad = build_mad(7, sample_req());
    const std::uint8_t* p = mad.data() + D;
    const std::array<std::uint8_t, 4> comm = {0x11, 0x22, 0x33, 0x44};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(p[0 + i], comm[i]);
    for (int i = 4; i < 8; ++i) EXPECT_EQ(p[i], 0) << "reserved " << i;
    const std::array<std::uint8_t, 8> sid = {0, 0, 0, 0, 0x01, 0x06, 0x12, 0xB7};
    for (int i = 0; i < 8; ++i) EXPECT_EQ(p[8 + i], sid[i]);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(p[16 + i], i + 1);  // CA GUID
    for (int i = 24; i < 28; ++i) EXPECT_EQ(p[i], 0) << "reserved " << i;
    EXPECT_EQ(p[28], 0xA1);  // Q_Key
    EXPECT_EQ(p[31], 0xA4);
    EXPECT_EQ(p[32], 0x12);  // QPN 24 bits, then responder resources
    EXPECT_EQ(p[33], 0x34);
    EXPECT_EQ(p[34], 0x56);
    EXPECT_EQ(p[35], 0x10);
    EXPECT_EQ(p[36], 0x65);  // local EECN, initiator depth
    EXPECT_EQ(p[38], 0x21);
    EXPECT_EQ(p[39], 0x08);
    EXPECT_EQ(p[40], 0x0A);  // remote EECN
    EXPECT_EQ(p[42], 0x0C);
    // byte 43: remote CM response timeout (5) | transport service type (2) | e2e flow (1)
    EXPECT_EQ(p[43], (20 << 3) | (1 << 1) | 1);
    EXPECT_EQ(p[44], 0xFE);  // starting PSN
    EXPECT_EQ(p[46], 0xBA);
    EXPECT_EQ(p[47], (19 << 3) | 7);  // local CM response timeout | retry count
    EXPECT_EQ(p[48], 0xFF);           // P_Key
    EXPECT_EQ(p[49], 0xFF);
    EXPECT_EQ(p[50], (5 << 4) | (1 << 3) | 6);   // path MTU | RDC exists | RNR retry count
    EXPECT_EQ(p[51], (15 << 4) | (1 << 3) | 0);  // max CM retries | SRQ | ext transport
    EXPECT_EQ(p[52], 0xFF);                      // primary local LID (permissive)
    EXPECT_EQ(p[53], 0xFF);
    EXPECT_EQ(p[54], 0xFF);  // primary remote LID
    EXPECT_EQ(p[55], 0xFF);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(p[56 + i], 0);  // ::ffff:192.168.0.1
    EXPECT_EQ(p[66], 0xFF);
    EXPECT_EQ(p[67], 0xFF);
    EXPECT_EQ(p[68], 192);
    EXPECT_EQ(p[69], 168);
    EXPECT_EQ(p[70], 0);
    EXPECT_EQ(p[71], 1);
    EXPECT_EQ(p[72 + 10], 0xFF);  // remote GID
    EXPECT_EQ(p[72 + 15], 2);
    EXPECT_EQ(p[88], 0xAB);  // flow label 20 bits, 6 reserved, packet rate 6 bits
    EXPECT_EQ(p[89], 0xCD);
    EXPECT_EQ(p[90], 0xE0);
    EXPECT_EQ(p[91], 0x2A);
    EXPECT_EQ(p[92], 0x60);                   // traffic class
    EXPECT_EQ(p[93], 64);                     // hop limit
    EXPECT_EQ(p[94], (0xC << 4) | (1 << 3));  // SL | subnet local | reserved
    EXPECT_EQ(p[95], 14 << 3);                // local ACK timeout | reserved
    for (int i = 96; i < 140; ++i) EXPECT_EQ(p[i], 0) << "no alternate path, byte " << i;
    for (int i = 0; i < 92; ++i) EXPECT_EQ(p[140 + i], 0x80 + i);
}

TEST(CmMessages, ReqDecodesBackAndRefusesReservedTransport) {
    const Mad mad = build_mad(7, sample_req());
    auto m = decode<ReqMsg>(ConstMadData(mad.data() + D, kMadDataSize));
    ASSERT_TRUE(m);
    const ReqMsg want = sample_req();
    EXPECT_EQ(m->local_comm_id, want.local_comm_id);
    EXPECT_EQ(m->service_id, want.service_id);
    EXPECT_EQ(m->local_qpn, want.local_qpn);
    EXPECT_EQ(m->starting_psn, want.starting_psn);
    EXPECT_EQ(m->primary.flow_label, want.primary.flow_label);
    EXPECT_EQ(m->primary.local_gid, want.primary.local_gid);
    EXPECT_EQ(ipv4_from_gid(m->primary.remote_gid), 0xC0A80002u);
    EXPECT_EQ(m->private_data, want.private_data);
    Mad bad = mad;
    bad[D + 43] |= 0x06;  // transport service type 3 is reserved
    EXPECT_FALSE(decode<ReqMsg>(ConstMadData(bad.data() + D, kMadDataSize)));
}

TEST(CmMessages, RepGoldenBytesAtIbaOffsets) {
    RepMsg m;
    m.local_comm_id = 0x01020304;
    m.remote_comm_id = 0x05060708;
    m.local_qkey = 0x11111111;
    m.local_qpn = 0xABCDEF;
    m.local_eecn = 0x000001;
    m.starting_psn = 0x123456;
    m.responder_resources = 3;
    m.initiator_depth = 4;
    m.target_ack_delay = 17;
    m.failover_accepted = 2;
    m.end_to_end_flow_control = 1;
    m.rnr_retry_count = 5;
    m.srq = 1;
    m.local_ca_guid = 0xF0E0D0C0B0A09080ULL;
    m.private_data[0] = 0x5A;
    m.private_data[195] = 0xA5;
    const Mad mad = build_mad(1, m);
    const std::uint8_t* p = mad.data() + D;
    EXPECT_EQ(p[3], 0x04);
    EXPECT_EQ(p[7], 0x08);
    EXPECT_EQ(p[12], 0xAB);
    EXPECT_EQ(p[14], 0xEF);
    EXPECT_EQ(p[15], 0);
    EXPECT_EQ(p[18], 0x01);
    EXPECT_EQ(p[20], 0x12);
    EXPECT_EQ(p[24], 3);
    EXPECT_EQ(p[25], 4);
    EXPECT_EQ(p[26], (17 << 3) | (2 << 1) | 1);
    EXPECT_EQ(p[27], (5 << 5) | (1 << 4));
    EXPECT_EQ(p[28], 0xF0);
    EXPECT_EQ(p[35], 0x80);
    EXPECT_EQ(p[36], 0x5A);
    EXPECT_EQ(p[231], 0xA5);
    EXPECT_EQ(mad[17], 0x13);
}

TEST(CmMessages, RejMraDreqSidrGoldenBytes) {
    RejMsg rej;
    rej.local_comm_id = 1;
    rej.remote_comm_id = 2;
    rej.message_rejected = 1;
    rej.ari_length = 8;
    rej.reason = rej_reason::consumer_reject;
    Mad mad = build_mad(1, rej);
    EXPECT_EQ(mad[D + 8], 1 << 6);
    EXPECT_EQ(mad[D + 9], 8 << 1);
    EXPECT_EQ(mad[D + 10], 0);
    EXPECT_EQ(mad[D + 11], 28);

    MraMsg mra;
    mra.message_mraed = 2;
    mra.service_timeout = 24;
    mad = build_mad(1, mra);
    EXPECT_EQ(mad[D + 8], 2 << 6);
    EXPECT_EQ(mad[D + 9], 24 << 3);

    DreqMsg dreq;
    dreq.remote_qpn = 0x00ABCD;
    mad = build_mad(1, dreq);
    EXPECT_EQ(mad[D + 8], 0x00);
    EXPECT_EQ(mad[D + 9], 0xAB);
    EXPECT_EQ(mad[D + 10], 0xCD);
    EXPECT_EQ(mad[D + 11], 0);

    SidrReqMsg sreq;
    sreq.request_id = 0x01020304;
    sreq.pkey = 0xFFFF;
    sreq.service_id = 0x0000000001110000ULL | 7;
    mad = build_mad(1, sreq);
    EXPECT_EQ(mad[D + 4], 0xFF);
    EXPECT_EQ(mad[D + 13], 0x11);
    EXPECT_EQ(mad[D + 15], 7);

    SidrRepMsg srep;
    srep.status = sidr_status::no_qp;
    srep.qpn = 0x010203;
    srep.service_id = 9;
    srep.qkey = 0x80010000;
    mad = build_mad(1, srep);
    EXPECT_EQ(mad[D + 4], 3);
    EXPECT_EQ(mad[D + 8], 0x01);
    EXPECT_EQ(mad[D + 10], 0x03);
    EXPECT_EQ(mad[D + 11], 0);
    EXPECT_EQ(mad[D + 19], 9);
    EXPECT_EQ(mad[D + 20], 0x80);
    EXPECT_EQ(mad[D + 22], 0x00);

    AprMsg apr;
    apr.ap_status = apr_status::unsupported;
    mad = build_mad(1, apr);
    EXPECT_EQ(mad[D + 9], 2);

    LapMsg lap;
    lap.remote_qpn = 0x123456;
    lap.remote_cm_response_timeout = 31;
    lap.alt_packet_rate = 63;
    mad = build_mad(1, lap);
    EXPECT_EQ(mad[D + 12], 0x12);
    EXPECT_EQ(mad[D + 15], 31 << 3);
    EXPECT_EQ(mad[D + 61], 63);
}

// The bits a message does not define: all-ones in (with `patch` making reserved values
// valid), count the one bits that encoding drops.
template <typename M>
std::size_t reserved_bits_of(
    std::initializer_list<std::pair<std::size_t, std::uint8_t>> patch = {}) {
    std::array<std::uint8_t, kMadDataSize> in;
    in.fill(0xFF);
    for (auto [at, v] : patch) in[at] = v;
    auto m = decode<M>(ConstMadData(in));
    EXPECT_TRUE(m);
    if (!m) return 0;
    const Mad out = build_mad(0, *m);
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < kMadDataSize; ++i)
        dropped += static_cast<std::size_t>(__builtin_popcount(in[i] & ~out[D + i]));
    return dropped;
}

template <typename M>
void expect_round_trip(std::mt19937& rng) {
    for (int round = 0; round < 50; ++round) {
        std::array<std::uint8_t, kMadDataSize> in;
        for (auto& b : in) b = static_cast<std::uint8_t>(rng());
        auto m = decode<M>(ConstMadData(in));
        if (!m) continue;
        const Mad out = build_mad(0, *m);
        auto again = decode<M>(ConstMadData(out.data() + D, kMadDataSize));
        ASSERT_TRUE(again);
        const Mad out2 = build_mad(0, *again);
        EXPECT_EQ(out, out2);
        // Every bit that survives encoding came from the input.
        for (std::size_t i = 0; i < kMadDataSize; ++i)
            EXPECT_EQ(out[D + i] & ~in[i], 0) << "byte " << i;
    }
}

TEST(CmMessages, EveryMessageRoundTripsRandomBytes) {
    std::mt19937 rng(12345);
    expect_round_trip<ReqMsg>(rng);
    expect_round_trip<MraMsg>(rng);
    expect_round_trip<RejMsg>(rng);
    expect_round_trip<RepMsg>(rng);
    expect_round_trip<RtuMsg>(rng);
    expect_round_trip<DreqMsg>(rng);
    expect_round_trip<DrepMsg>(rng);
    expect_round_trip<LapMsg>(rng);
    expect_round_trip<AprMsg>(rng);
    expect_round_trip<SidrReqMsg>(rng);
    expect_round_trip<SidrRepMsg>(rng);
}

// The reserved bits of each message, counted from the IBA tables: proof that no defined
// bit is left out of a table (round trips cannot see that).
TEST(CmMessages, ReservedBitsAreExactlyIbas) {
    // REQ: bytes 4-7 and 24-27; per path 6 after the flow label and 3 after SL; 3 after the
    // primary ACK timeout, 2 after the alternate's SAP bit. Byte 43 patched: transport RD.
    EXPECT_EQ(reserved_bits_of<ReqMsg>({{43, 0xFB}}), 32u + 32u + 6u + 3u + 3u + 6u + 3u + 2u);
    EXPECT_EQ(reserved_bits_of<MraMsg>(), 6u + 3u);
    EXPECT_EQ(reserved_bits_of<RejMsg>({{9, 0x91}}), 6u + 1u);  // ARI length 72
    EXPECT_EQ(reserved_bits_of<RepMsg>(), 8u + 8u + 8u + 4u);
    EXPECT_EQ(reserved_bits_of<RtuMsg>(), 0u);
    EXPECT_EQ(reserved_bits_of<DreqMsg>(), 8u);
    EXPECT_EQ(reserved_bits_of<DrepMsg>(), 0u);
    EXPECT_EQ(reserved_bits_of<LapMsg>(), 32u + 3u + 32u + 4u + 2u + 3u + 3u);
    EXPECT_EQ(reserved_bits_of<AprMsg>({{8, 72}}), 16u);
    EXPECT_EQ(reserved_bits_of<SidrReqMsg>(), 16u);
    EXPECT_EQ(reserved_bits_of<SidrRepMsg>({{5, 72}}), 16u + 8u);
}

TEST(CmCma, ServiceIdsAreLinuxs) {
    EXPECT_EQ(service_id(PortSpace::tcp, 7471), 0x0000000001061D2FULL);
    EXPECT_EQ(service_id(PortSpace::udp, 1), 0x0000000001110001ULL);
    EXPECT_EQ(service_id(PortSpace::ib, 0xFFFF), 0x00000000013FFFFFULL);
    EXPECT_EQ(service_id(PortSpace::ipoib, 2), 0x0000000000020002ULL);
    auto s = ip_service(0x0000000001061D2FULL);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->ps, PortSpace::tcp);
    EXPECT_EQ(s->port, 7471);
    EXPECT_FALSE(ip_service(0x0000000001070000ULL));
    EXPECT_FALSE(ip_service(0x1000000001060000ULL));
}

TEST(CmCma, HeaderBytesAreStructCmaHdr) {
    std::array<std::uint8_t, kCmaHeaderSize> b;
    b.fill(0xEE);
    ASSERT_TRUE(
        encode_cma_header({.src_port = 0x1234, .src_ip = 0x0A000001, .dst_ip = 0xC0A80102}, b));
    EXPECT_EQ(b[0], 0x00);  // cma_version
    EXPECT_EQ(b[1], 0x40);  // IPv4 in the high nibble
    EXPECT_EQ(b[2], 0x12);  // source port, network order
    EXPECT_EQ(b[3], 0x34);
    for (int i = 4; i < 16; ++i) EXPECT_EQ(b[i], 0);
    EXPECT_EQ(b[16], 10);
    EXPECT_EQ(b[19], 1);
    for (int i = 20; i < 32; ++i) EXPECT_EQ(b[i], 0);
    EXPECT_EQ(b[32], 192);
    EXPECT_EQ(b[35], 2);
    std::array<std::uint8_t, 35> short_buf{};
    EXPECT_FALSE(encode_cma_header({}, short_buf));
    EXPECT_FALSE(decode_cma_header(short_buf));
    b[1] = 0x60;  // IPv6: not ours
    EXPECT_FALSE(decode_cma_header(b));
}

// An rdma_cm REQ: cma header then user bytes in the private data; it decodes back.
TEST(CmCma, ReqWithCmaHeaderDecodesBack) {
    ReqMsg m = sample_req();
    m.service_id = service_id(PortSpace::tcp, 20000);
    m.private_data.fill(0);
    ASSERT_TRUE(encode_cma_header({.src_port = 40000, .src_ip = 0x0A000001, .dst_ip = 0x0A000002},
                                  m.private_data));
    for (std::size_t i = 0; i < kCmaReqUserData; ++i)
        m.private_data[kCmaHeaderSize + i] = static_cast<std::uint8_t>(i);
    const Mad mad = build_mad(3, m);
    MadView v;
    ASSERT_EQ(parse_mad(mad, v), MadDrop::ok);
    auto req = decode<ReqMsg>(ConstMadData(v.data.data(), kMadDataSize));
    ASSERT_TRUE(req);
    auto svc = ip_service(req->service_id);
    ASSERT_TRUE(svc);
    EXPECT_EQ(svc->port, 20000);
    auto h = decode_cma_header(req->private_data);
    ASSERT_TRUE(h);
    EXPECT_EQ(h->src_port, 40000);
    EXPECT_EQ(h->src_ip, 0x0A000001u);
    EXPECT_EQ(h->dst_ip, 0x0A000002u);
    EXPECT_EQ(req->private_data[kCmaHeaderSize + 55], 55);
}

}  // namespace
}  // namespace snic::cm
