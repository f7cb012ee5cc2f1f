// Real RoCEv2 traffic from Linux soft-RoCE (rxe), captured between two machines running
// rdma-core's tools (see tests/vectors/README.md): every RoCEv2 packet must parse with our
// opcode table, its lengths must add up, and our ICRC must equal the one rxe put on the
// wire, over IPv4 and IPv6. Everything else in the captures must be told apart from RoCE.
//
// The captures are found as tests/unit/pcap.h says. A missing capture is a failure, never
// a skip.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "proto/roce/headers.h"
#include "proto/roce/icrc.h"
#include "proto/roce/opcode.h"
#include "proto/roce/packet.h"
#include "proto/roce/psn.h"
#include "tests/unit/pcap.h"

namespace snic::roce {
namespace {

using test::Pcap;
using test::read_pcap;

// --- What each frame is, from the Ethernet type, the IP protocol and the UDP port.

enum class Kind { arp, roce_ipv4, roce_ipv6, ipv4_other, ipv6_other, other };

struct Frame {
    Kind kind = Kind::other;
    std::span<const std::uint8_t> l3;           // the IP packet (Ethernet padding excluded)
    std::span<const std::uint8_t> udp_payload;  // RoCE: BTH through ICRC
    std::uint16_t udp_length = 0;
};

std::uint16_t be16(std::span<const std::uint8_t> b, std::size_t at) {
    return static_cast<std::uint16_t>(b[at] << 8 | b[at + 1]);
}

Frame dissect(std::span<const std::uint8_t> f) {
    Frame out;
    if (f.size() < 14) return out;
    const std::uint16_t type = be16(f, 12);
    const auto l3 = f.subspan(14);
    std::size_t ip_len = 0;
    std::size_t l4 = 0;
    std::uint8_t proto = 0;
    if (type == 0x0806) {
        out.kind = Kind::arp;
        return out;
    } else if (type == 0x0800 && l3.size() >= 20 && (l3[0] >> 4) == 4) {
        out.kind = Kind::ipv4_other;
        ip_len = be16(l3, 2);
        l4 = (l3[0] & 0x0f) * 4u;
        proto = l3[9];
    } else if (type == 0x86dd && l3.size() >= 40 && (l3[0] >> 4) == 6) {
        out.kind = Kind::ipv6_other;
        ip_len = 40u + be16(l3, 4);
        l4 = 40;
        proto = l3[6];
    } else {
        return out;
    }
    if (ip_len > l3.size()) return out;
    out.l3 = l3.first(ip_len);
    if (proto != 17 || ip_len < l4 + 8 || be16(out.l3, l4 + 2) != 4791) return out;
    out.udp_length = be16(out.l3, l4 + 4);
    if (out.udp_length < 8 || l4 + out.udp_length > ip_len) return out;
    out.kind = out.kind == Kind::ipv4_other ? Kind::roce_ipv4 : Kind::roce_ipv6;
    out.udp_payload = out.l3.subspan(l4 + 8, out.udp_length - 8u);
    return out;
}

// --- What the captures hold.

struct Census {
    std::size_t frames = 0;
    std::map<Kind, std::size_t> kinds;
    std::map<std::uint8_t, std::size_t> opcodes;  // RoCE packets by opcode
    std::size_t icrc_good = 0;
};

// Checks every RoCE packet of `pcap` and counts what it holds.
Census check_capture(const Pcap& pcap) {
    Census c;
    for (std::size_t i = 0; i < pcap.frames.size(); ++i) {
        SCOPED_TRACE("frame " + std::to_string(i + 1));  // numbered as tshark numbers them
        const Frame f = dissect(pcap.frames[i]);
        ++c.frames;
        ++c.kinds[f.kind];
        if (f.kind != Kind::roce_ipv4 && f.kind != Kind::roce_ipv6) continue;

        const Packet p = parse(f.udp_payload);
        EXPECT_TRUE(p.ok()) << drop_name(p.drop);
        if (!p.ok()) continue;
        ++c.opcodes[p.opcode()];
        EXPECT_FALSE(p.info->name.empty());
        EXPECT_EQ(p.payload.size(), f.udp_length - 8u - p.info->length - p.pad - kIcrcLen);
        EXPECT_EQ(p.payload.data(), f.udp_payload.data() + p.info->length);
        EXPECT_EQ((p.payload.size() + p.pad) % 4, 0u);

        const auto computed = icrc_compute(f.l3);
        EXPECT_TRUE(computed.has_value());
        if (!computed) continue;
        EXPECT_EQ(*computed, p.icrc) << std::hex << "computed " << *computed << " wire " << p.icrc;
        EXPECT_TRUE(icrc_verify(f.l3));
        if (computed == p.icrc) ++c.icrc_good;
    }
    return c;
}

class RxeCaptures : public ::testing::Test {
  protected:
    static std::string path(const char* name) { return test::vector_path(name); }
};

// A receiving QP learns its flow's ICRC from one packet checked in full (IcrcRxFlow): on the
// kernel's own traffic, every later packet of the same flow (destination address and QP)
// must start its ICRC where the full computation does, and most of them must be of the flow.
TEST_F(RxeCaptures, a_flow_learnt_from_one_real_packet_starts_every_later_icrc_as_the_full_check) {
    Pcap pcap;
    ASSERT_TRUE(read_pcap(path("rxe_real.pcap"), pcap));
    std::map<std::uint64_t, IcrcRxFlow> flows;
    std::size_t roce = 0, of_flow = 0;
    for (std::size_t i = 0; i < pcap.frames.size(); ++i) {
        SCOPED_TRACE("frame " + std::to_string(i + 1));
        const Frame f = dissect(pcap.frames[i]);
        if (f.kind != Kind::roce_ipv4) continue;
        const Packet p = parse(f.udp_payload);
        ASSERT_TRUE(p.ok());
        ++roce;
        const std::uint64_t key = std::uint64_t{be16(f.l3, 16)} << 40 |
                                  std::uint64_t{be16(f.l3, 18)} << 24 | p.bth().dest_qp.host();
        const auto full = icrc_begin(f.l3);
        ASSERT_TRUE(full.has_value());
        const std::uint32_t source = std::uint32_t{be16(f.l3, 12)} << 16 | be16(f.l3, 14);
        IcrcRxFlow& flow = flows.try_emplace(key, source).first->second;
        if (const auto fast = flow.begin(f.l3)) {
            ++of_flow;
            EXPECT_EQ(fast->reg, full->reg);
            EXPECT_EQ(fast->bth_end, full->bth_end);
            EXPECT_EQ(fast->ip_end, full->ip_end);
        } else {
            ASSERT_TRUE(icrc_verify(f.l3));
            EXPECT_TRUE(flow.learn(f.l3));
        }
    }
    EXPECT_EQ(roce, 311u);
    EXPECT_GE(of_flow, roce * 9 / 10) << "flows " << flows.size();
}

TEST_F(RxeCaptures, ipv4_capture_every_roce_packet_parses_and_its_icrc_verifies) {
    Pcap pcap;
    ASSERT_TRUE(read_pcap(path("rxe_real.pcap"), pcap));
    Census c = check_capture(pcap);

    EXPECT_EQ(c.frames, 391u);
    EXPECT_EQ(c.kinds[Kind::roce_ipv4], 311u);
    EXPECT_EQ(c.kinds[Kind::roce_ipv6], 0u);
    EXPECT_EQ(c.icrc_good, 311u);
    // The rest: ARP, IPv4 ICMP and TCP (the tools' out-of-band exchange), IPv6 ND and MLD.
    EXPECT_EQ(c.kinds[Kind::arp], 10u);
    EXPECT_EQ(c.kinds[Kind::ipv4_other], 53u);
    EXPECT_EQ(c.kinds[Kind::ipv6_other], 17u);
    EXPECT_EQ(c.kinds[Kind::other], 0u);

    const std::map<std::uint8_t, std::size_t> expected = {
        {0x00, 50},   // RC SEND First
        {0x01, 100},  // RC SEND Middle
        {0x02, 50},   // RC SEND Last
        {0x04, 22},   // RC SEND Only
        {0x0a, 3},    // RC RDMA WRITE Only
        {0x0c, 3},    // RC RDMA READ Request
        {0x10, 3},    // RC RDMA READ Response Only
        {0x11, 75},   // RC Acknowledge
        {0x64, 5},    // UD SEND Only: CM MADs to QP1
    };
    EXPECT_EQ(c.opcodes, expected);
    EXPECT_EQ(c.opcodes.size(), 9u);
}

TEST_F(RxeCaptures, ipv6_capture_every_roce_packet_parses_and_its_icrc_verifies) {
    Pcap pcap;
    ASSERT_TRUE(read_pcap(path("rxe_real_ipv6.pcap"), pcap));
    Census c = check_capture(pcap);

    EXPECT_EQ(c.frames, 80u);
    EXPECT_EQ(c.kinds[Kind::roce_ipv6], 20u);
    EXPECT_EQ(c.kinds[Kind::roce_ipv4], 0u);
    EXPECT_EQ(c.icrc_good, 20u);
    EXPECT_EQ(c.kinds[Kind::arp], 11u);
    EXPECT_EQ(c.kinds[Kind::ipv4_other], 31u);
    EXPECT_EQ(c.kinds[Kind::ipv6_other], 18u);
    EXPECT_EQ(c.kinds[Kind::other], 0u);
    const std::map<std::uint8_t, std::size_t> expected = {{0x04, 10}, {0x11, 10}};
    EXPECT_EQ(c.opcodes, expected);
}

// What the headers of the real packets say, against what tshark shows for them.
TEST_F(RxeCaptures, real_headers_decode_as_tshark_shows_them) {
    Pcap pcap;
    ASSERT_TRUE(read_pcap(path("rxe_real.pcap"), pcap));
    std::size_t ud = 0, acks = 0, writes = 0, reads = 0, full = 0;
    std::set<std::uint16_t> pkeys;
    for (const auto& bytes : pcap.frames) {
        const Frame f = dissect(bytes);
        if (f.kind != Kind::roce_ipv4) continue;
        const Packet p = parse(f.udp_payload);
        ASSERT_TRUE(p.ok());
        pkeys.insert(p.bth().pkey.host());
        EXPECT_EQ(p.bth().tver(), 0);
        const OpcodeInfo& info = *p.info;
        if (p.opcode() == static_cast<std::uint8_t>(Opcode::ud_send_only)) {
            // rdma_cm's CM MADs: UD to QP1 from QP1 with the GSI Q_Key, one 256-byte MAD.
            ++ud;
            EXPECT_EQ(p.bth().dest_qp.host(), 1u);
            ASSERT_NE(p.deth(), nullptr);
            EXPECT_EQ(p.deth()->qkey.host(), kGsiQkey);
            EXPECT_EQ(p.deth()->src_qp.host(), 1u);
            EXPECT_EQ(p.payload.size(), 256u);
            EXPECT_EQ(p.payload[0], 1);     // MAD base version
            EXPECT_EQ(p.payload[1], 0x07);  // management class: CM
        }
        if (info.has(kAcknowledge)) {
            ++acks;
            ASSERT_NE(p.aeth(), nullptr);
            EXPECT_EQ(aeth_type(p.aeth()->syndrome), AckType::ack);
            EXPECT_TRUE(p.payload.empty());
        }
        if (info.has(kWrite | kOnly)) {
            // One packet carries the whole WRITE: the RETH's DMA length is its payload.
            ++writes;
            ASSERT_NE(p.reth(), nullptr);
            EXPECT_EQ(p.reth()->dma_len.host(), p.payload.size());
        }
        if (info.has(kRead | kRequest)) {
            ++reads;
            ASSERT_NE(p.reth(), nullptr);
            EXPECT_TRUE(p.payload.empty());
            EXPECT_TRUE(p.bth().ack_req());
        }
        if (info.has_any(kFirst | kMiddle) && !info.has(kLast) && info.has(kHasPayload)) {
            // First and middle packets carry exactly one path MTU (1024 in this capture).
            ++full;
            EXPECT_EQ(p.payload.size(), 1024u);
        }
    }
    EXPECT_EQ(ud, 5u);
    EXPECT_EQ(acks, 75u);
    EXPECT_EQ(writes, 3u);
    EXPECT_EQ(reads, 3u);
    EXPECT_EQ(full, 150u);
    EXPECT_EQ(pkeys, std::set<std::uint16_t>{kDefaultPkey});
}

// Frame 356 of rxe_real.pcap, field by field as tshark -V shows it.
TEST_F(RxeCaptures, rdma_read_request_fields_match_tshark) {
    Pcap pcap;
    ASSERT_TRUE(read_pcap(path("rxe_real.pcap"), pcap));
    ASSERT_GE(pcap.frames.size(), 356u);
    const Frame f = dissect(pcap.frames[355]);
    ASSERT_EQ(f.kind, Kind::roce_ipv4);
    const Packet p = parse(f.udp_payload);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.opcode(), 0x0c);
    EXPECT_EQ(p.info->name, "RC_RDMA_READ_REQUEST");
    EXPECT_EQ(p.bth().dest_qp.host(), 0x13u);
    EXPECT_EQ(p.bth().psn.host(), 0x0a3bdeu);
    EXPECT_TRUE(p.bth().ack_req());
    ASSERT_NE(p.reth(), nullptr);
    EXPECT_EQ(p.reth()->va.host(), 0x000055615'07f05c0ull);
    EXPECT_EQ(p.reth()->rkey.host(), 0x7c9u);
    EXPECT_EQ(p.reth()->dma_len.host(), 64u);
    EXPECT_EQ(p.icrc, 0x08393f41u);  // wire bytes 41 3f 39 08
}

// Within one connection the requester's PSNs run on by one per packet (this capture has
// no loss), and every ACK acknowledges a PSN its peer sent: PSN arithmetic on real sequences.
TEST_F(RxeCaptures, request_psns_advance_by_one_per_packet) {
    Pcap pcap;
    ASSERT_TRUE(read_pcap(path("rxe_real.pcap"), pcap));
    const auto addr = [](const Frame& f, std::size_t at) {
        return std::uint64_t{be16(f.l3, at)} << 16 | be16(f.l3, at + 2);
    };
    std::map<std::uint64_t, std::uint32_t> next_psn;        // (destination, dest QP) -> next PSN
    std::map<std::uint64_t, std::set<std::uint32_t>> sent;  // (source, destination) -> PSNs
    std::size_t checked = 0;
    for (const auto& bytes : pcap.frames) {
        const Frame f = dissect(bytes);
        if (f.kind != Kind::roce_ipv4) continue;
        const Packet p = parse(f.udp_payload);
        ASSERT_TRUE(p.ok());
        if (!p.info->has(kNeedsAck)) continue;
        const std::uint64_t conn = addr(f, 16) << 24 | p.bth().dest_qp.host();
        const std::uint32_t psn = p.bth().psn.host();
        if (auto it = next_psn.find(conn); it != next_psn.end()) {
            EXPECT_EQ(psn_diff(psn, it->second), 0) << "to QP " << p.bth().dest_qp.host();
            ++checked;
        }
        next_psn[conn] = psn_add(psn, 1);
        sent[addr(f, 12) << 32 | addr(f, 16)].insert(psn);
    }
    EXPECT_GT(checked, 200u);
    std::size_t acks = 0;
    for (const auto& bytes : pcap.frames) {
        const Frame f = dissect(bytes);
        if (f.kind != Kind::roce_ipv4) continue;
        const Packet p = parse(f.udp_payload);
        if (!p.info->has(kAcknowledge)) continue;
        ++acks;
        EXPECT_EQ(sent[addr(f, 16) << 32 | addr(f, 12)].count(p.bth().psn.host()), 1u);
    }
    EXPECT_EQ(acks, 75u);
}

// Every single-bit flip in a byte the ICRC covers unmasked (IPv4 and UDP headers included)
// is caught; flips in the masked bytes are not.
TEST_F(RxeCaptures, corrupting_a_real_packet_fails_its_icrc) {
    Pcap pcap;
    ASSERT_TRUE(read_pcap(path("rxe_real.pcap"), pcap));
    // IPv4 TOS, TTL, checksum; UDP checksum; BTH resv8a (20-byte IPv4 header, 8-byte UDP).
    const std::set<std::size_t> masked = {1, 8, 10, 11, 26, 27, 28 + kBthResv8aOffset};
    std::size_t tried = 0;
    for (const auto& bytes : pcap.frames) {
        const Frame f = dissect(bytes);
        if (f.kind != Kind::roce_ipv4 || f.udp_payload.size() > 300) continue;
        std::vector<std::uint8_t> l3(f.l3.begin(), f.l3.end());
        ASSERT_EQ(l3[0], 0x45);
        for (std::size_t at = 0; at < l3.size(); ++at) {
            for (int bit = 0; bit < 8; ++bit) {
                l3[at] ^= static_cast<std::uint8_t>(1u << bit);
                EXPECT_EQ(icrc_verify(l3), masked.count(at) == 1)
                    << "byte " << at << " bit " << bit;
                l3[at] ^= static_cast<std::uint8_t>(1u << bit);
            }
        }
        EXPECT_TRUE(icrc_verify(l3));
        if (++tried == 20) break;
    }
    EXPECT_EQ(tried, 20u);
}

}  // namespace
}  // namespace snic::roce
