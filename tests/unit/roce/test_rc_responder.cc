// The responder's rules, one test each: execution at ePSN, placement of SENDs across
// packets and SGEs, the receive completion's fields, RNR, length errors, RDMA WRITE key
// checks (nothing written on failure), READ responses and their replay, atomics executed
// once, duplicates, sequence NAKs, ACK coalescing, the error state. The test plays the
// requester: it builds requests with build() and reads what the QP answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tests/unit/roce/rc_harness.h"

namespace snic::roce::test {
namespace {

constexpr std::uint32_t kQpn = 0x11;  // the QP under test; its peer is 0x22
constexpr std::uint32_t kEpsn = 5000;

struct Responder : Solo {
    explicit Responder(const RcConfig& c = solo_config()) : Solo(c) {
        buf = mem.add(1 << 16);
        target = mem.add(1 << 16);
        fill_pattern(mem.bytes(target, 0, 1 << 16), 11);
    }
    void post_recv(std::uint64_t wr_id, std::uint64_t off, std::uint32_t len) {
        q.rq.push_back(recv_wr(wr_id, buf, mem.va(buf, off), len));
    }
    // A request from the peer.
    void request(Opcode op, std::uint32_t psn, std::span<const std::uint8_t> payload = {},
                 bool ack_req = true, PacketSpec* extra = nullptr) {
        PacketSpec s = extra != nullptr ? *extra : PacketSpec{};
        s.opcode = op;
        s.dest_qp = kQpn;
        s.psn = psn & kPsnMask;
        s.ack_req = ack_req;
        s.payload = payload;
        deliver(make_packet(s));
    }
    void write(Opcode op, std::uint32_t psn, std::uint32_t key, std::uint64_t va,
               std::uint32_t dma_len, std::span<const std::uint8_t> payload, bool ack_req = true) {
        PacketSpec s;
        s.reth.va = va;
        s.reth.rkey = key;
        s.reth.dma_len = dma_len;
        request(op, psn, payload, ack_req, &s);
    }
    void read(std::uint32_t psn, std::uint32_t key, std::uint64_t va, std::uint32_t len) {
        PacketSpec s;
        s.reth.va = va;
        s.reth.rkey = key;
        s.reth.dma_len = len;
        request(Opcode::rc_rdma_read_request, psn, {}, true, &s);
    }
    void atomic(Opcode op, std::uint32_t psn, std::uint32_t key, std::uint64_t va,
                std::uint64_t swap_add, std::uint64_t compare = 0) {
        PacketSpec s;
        s.atomic_eth.va = va;
        s.atomic_eth.rkey = key;
        s.atomic_eth.swap_add = swap_add;
        s.atomic_eth.compare = compare;
        request(op, psn, {}, true, &s);
    }
    std::uint32_t buf = 0, target = 0;
};

std::vector<std::uint8_t> bytes(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> v(n);
    fill_pattern(v, seed);
    return v;
}

bool is_ack(const Packet& p, std::uint32_t psn) {
    return op_of(p) == Opcode::rc_acknowledge && psn_of(p) == psn &&
           aeth_type(p.aeth()->syndrome) == AckType::ack;
}

bool is_nak(const Packet& p, std::uint32_t psn, NakCode code) {
    return op_of(p) == Opcode::rc_acknowledge && psn_of(p) == psn &&
           p.aeth()->syndrome == nak_syndrome(code);
}

TEST(RcResponder, send_at_the_expected_psn_is_placed_completed_and_acknowledged) {
    Responder r;
    r.post_recv(77, 0, 4096);
    const auto data = bytes(200, 1);
    r.request(Opcode::rc_send_only, kEpsn, data);
    ASSERT_EQ(r.q.rcq.size(), 1u);
    const Completion& c = r.q.rcq[0];
    EXPECT_EQ(c.wr_id, 77u);
    EXPECT_EQ(c.status, WcStatus::success);
    EXPECT_EQ(c.opcode, WcOpcode::recv);
    EXPECT_EQ(c.byte_len, 200u);
    EXPECT_EQ(c.qp_num, kQpn);
    EXPECT_EQ(c.src_qp, 0x22u);
    EXPECT_FALSE(c.with_imm || c.with_inv || c.solicited);
    EXPECT_EQ(std::memcmp(r.mem.host(r.buf), data.data(), 200), 0);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
    EXPECT_EQ(p[0].aeth()->msn.host(), 1u);
    EXPECT_EQ(p[0].bth().dest_qp.host(), 0x22u);
    EXPECT_EQ(r.qp.expected_psn(), kEpsn + 1);
}

TEST(RcResponder, a_send_is_placed_across_packets_and_receive_sges) {
    Responder r;
    RecvWr wr;
    wr.wr_id = 5;
    wr.num_sge = 3;
    wr.sge[0] = {r.mem.va(r.buf, 0), 100, r.buf};
    wr.sge[1] = {r.mem.va(r.buf, 1000), 400, r.buf};
    wr.sge[2] = {r.mem.va(r.buf, 3000), 200, r.buf};
    r.q.rq.push_back(wr);
    const auto data = bytes(612, 2);
    const std::span<const std::uint8_t> d(data);
    r.request(Opcode::rc_send_first, kEpsn, d.subspan(0, 256), false);
    r.request(Opcode::rc_send_middle, kEpsn + 1, d.subspan(256, 256), false);
    EXPECT_TRUE(r.q.rcq.empty());
    r.request(Opcode::rc_send_last, kEpsn + 2, d.subspan(512, 100));
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].byte_len, 612u);
    EXPECT_EQ(std::memcmp(r.mem.host(r.buf, 0), data.data(), 100), 0);
    EXPECT_EQ(std::memcmp(r.mem.host(r.buf, 1000), data.data() + 100, 400), 0);
    EXPECT_EQ(std::memcmp(r.mem.host(r.buf, 3000), data.data() + 500, 112), 0);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn + 2));
}

TEST(RcResponder, the_receive_completion_carries_immediate_data_and_the_solicited_flag) {
    Responder r;
    r.post_recv(1, 0, 100);
    PacketSpec s;
    const std::uint8_t imm[4] = {1, 2, 3, 4};
    std::memcpy(&s.immdt, imm, 4);
    s.solicited = true;
    r.request(Opcode::rc_send_only_with_immediate, kEpsn, bytes(10, 3), true, &s);
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_TRUE(r.q.rcq[0].with_imm);
    EXPECT_TRUE(r.q.rcq[0].solicited);
    EXPECT_EQ(r.q.rcq[0].wc_flags(), kWcWithImm);
    EXPECT_EQ(std::memcmp(&r.q.rcq[0].imm_or_rkey, imm, 4), 0);  // as on the wire
}

TEST(RcResponder, send_with_invalidate_invalidates_the_rkey_before_completing) {
    Responder r;
    const std::uint32_t mw = r.mem.add(4096);
    r.post_recv(1, 0, 100);
    PacketSpec s;
    s.ieth.rkey = mw;
    r.request(Opcode::rc_send_only_with_invalidate, kEpsn, bytes(10, 3), true, &s);
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_TRUE(r.q.rcq[0].with_inv);
    EXPECT_EQ(r.q.rcq[0].imm_or_rkey, mw);
    EXPECT_FALSE(r.mem.region(mw).valid);
    EXPECT_EQ(r.mem.invalidated, std::vector<std::uint32_t>{mw});
}

TEST(RcResponder, send_with_invalidate_of_a_key_that_cannot_be_invalidated_is_an_invalid_request) {
    Responder r;
    const std::uint32_t mr = r.mem.add(4096);
    r.mem.region(mr).remote_invalidate = false;
    r.post_recv(1, 0, 100);
    PacketSpec s;
    s.ieth.rkey = mr;
    r.request(Opcode::rc_send_only_with_invalidate, kEpsn, bytes(10, 3), true, &s);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn, NakCode::invalid_request));
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].status, WcStatus::rem_inv_req_err);
    EXPECT_EQ(r.qp.state(), RcState::error);
}

TEST(RcResponder, send_without_a_receive_wr_gets_an_rnr_nak_and_is_not_consumed) {
    RcConfig c = solo_config();
    c.min_rnr_timer = 14;
    Responder r(c);
    const auto data = bytes(600, 4);
    const std::span<const std::uint8_t> d(data);
    r.request(Opcode::rc_send_first, kEpsn, d.subspan(0, 256), false);
    r.request(Opcode::rc_send_middle, kEpsn + 1, d.subspan(256, 256), false);  // dropped quietly
    auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_acknowledge);
    EXPECT_EQ(psn_of(p[0]), kEpsn);
    EXPECT_EQ(p[0].aeth()->syndrome, aeth_syndrome(AckType::rnr_nak, 14));
    EXPECT_EQ(r.qp.expected_psn(), kEpsn);
    EXPECT_EQ(r.qp.counters().rnr_naks_sent.get(), 1u);
    EXPECT_EQ(r.qp.counters().seq_naks_sent.get(), 0u);
    // The requester comes back after the wait; now there is a receive WR.
    r.post_recv(9, 0, 1000);
    r.request(Opcode::rc_send_first, kEpsn, d.subspan(0, 256), false);
    r.request(Opcode::rc_send_middle, kEpsn + 1, d.subspan(256, 256), false);
    r.request(Opcode::rc_send_last, kEpsn + 2, d.subspan(512, 88));
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].wr_id, 9u);
    EXPECT_EQ(r.q.rcq[0].byte_len, 600u);
    EXPECT_EQ(std::memcmp(r.mem.host(r.buf), data.data(), 600), 0);
    p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn + 2));
}

TEST(RcResponder, message_larger_than_the_receive_wr_is_an_invalid_request_and_loc_len_err) {
    Responder r;
    r.post_recv(1, 0, 300);
    const auto data = bytes(512, 5);
    const std::span<const std::uint8_t> d(data);
    r.request(Opcode::rc_send_first, kEpsn, d.subspan(0, 256), false);
    r.request(Opcode::rc_send_last, kEpsn + 1, d.subspan(256, 256));
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn + 1, NakCode::invalid_request));
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].status, WcStatus::loc_len_err);
    EXPECT_EQ(r.qp.state(), RcState::error);
    EXPECT_EQ(r.qp.error(), RcError::responder_error);
}

// ---- the ICRC checked as the payload is copied (Packet::icrc_pending) --------------------------

void flip_last_payload_byte(std::vector<std::uint8_t>& b) {
    b[b.size() - kIcrcLen - 1] ^= 0x40;
}
void flip_psn(std::vector<std::uint8_t>& b) {
    b[11] ^= 0x01;
}  // the PSN's low bit

TEST(RcResponder, a_send_checked_as_it_is_copied_completes_as_one_checked_before) {
    Responder r;
    r.post_recv(77, 0, 4096);
    const auto data = bytes(256, 1);
    PacketSpec s = spec_for(Opcode::rc_send_only_with_immediate, kQpn, kEpsn);
    s.payload = data;
    s.immdt.imm = 0x01020304;
    s.ack_req = true;
    r.deliver_pending(make_packet(s));
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].status, WcStatus::success);
    EXPECT_EQ(r.q.rcq[0].byte_len, 256u);
    EXPECT_TRUE(r.q.rcq[0].with_imm);
    EXPECT_EQ(std::memcmp(r.mem.host(r.buf), data.data(), 256), 0);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
    EXPECT_EQ(r.qp.counters().drop_bad_icrc.get(), 0u);
}

// A corrupted SEND is dropped after its bytes were copied: no completion, no answer, ePSN and
// the receive WR kept; the retransmission puts the right bytes over them and completes.
TEST(RcResponder, a_send_whose_icrc_fails_in_the_copy_takes_no_effect) {
    Responder r;
    r.post_recv(77, 0, 4096);
    const auto data = bytes(250, 2);  // within the path MTU (256)
    PacketSpec s = spec_for(Opcode::rc_send_only, kQpn, kEpsn);
    s.payload = data;
    s.ack_req = true;
    r.deliver_pending(make_packet(s), flip_last_payload_byte);
    EXPECT_TRUE(r.q.rcq.empty());
    EXPECT_TRUE(r.run().empty());
    EXPECT_EQ(r.qp.expected_psn(), kEpsn);
    EXPECT_EQ(r.qp.counters().drop_bad_icrc.get(), 1u);
    EXPECT_TRUE(r.q.rq.empty());  // the WR stays with the QP for the message

    r.deliver_pending(make_packet(s));
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].wr_id, 77u);
    EXPECT_EQ(r.q.rcq[0].byte_len, 250u);
    EXPECT_EQ(std::memcmp(r.mem.host(r.buf), data.data(), 250), 0);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
}

TEST(RcResponder, a_write_packet_whose_icrc_fails_in_the_copy_is_not_counted_written) {
    Responder r;
    const auto data = bytes(600, 3);
    const std::span<const std::uint8_t> d(data);
    const std::uint64_t va = r.mem.va(r.target, 0);
    r.write(Opcode::rc_rdma_write_first, kEpsn, r.target, va, 600, d.subspan(0, 256), false);
    PacketSpec middle = spec_for(Opcode::rc_rdma_write_middle, kQpn, kEpsn + 1);
    middle.payload = d.subspan(256, 256);
    r.deliver_pending(make_packet(middle), flip_last_payload_byte);
    EXPECT_EQ(r.qp.expected_psn(), kEpsn + 1);
    EXPECT_EQ(r.qp.counters().drop_bad_icrc.get(), 1u);
    r.deliver_pending(make_packet(middle));
    PacketSpec last = spec_for(Opcode::rc_rdma_write_last, kQpn, kEpsn + 2);
    last.payload = d.subspan(512, 88);
    last.ack_req = true;
    r.deliver_pending(make_packet(last));
    EXPECT_EQ(std::memcmp(r.mem.host(r.target), data.data(), 600), 0);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn + 2));
    EXPECT_EQ(r.qp.state(), RcState::ok);
}

// Where a packet would take effect without its payload's copy, its ICRC is checked first: a
// corrupted packet makes no NAK, no fault and no duplicate's ACK.
TEST(RcResponder, a_corrupted_packet_makes_no_nak_fault_or_duplicate_ack) {
    Responder r;
    r.post_recv(1, 0, 256);
    const auto data = bytes(512, 4);
    const std::span<const std::uint8_t> d(data);
    PacketSpec big = spec_for(Opcode::rc_send_only, kQpn, kEpsn);  // too long for the WR
    big.payload = d;
    r.deliver_pending(make_packet(big), flip_last_payload_byte);
    PacketSpec ahead = spec_for(Opcode::rc_send_only, kQpn, kEpsn + 3);  // a sequence NAK
    ahead.payload = d.subspan(0, 256);
    r.deliver_pending(make_packet(ahead), flip_last_payload_byte);
    PacketSpec wrong = spec_for(Opcode::rc_send_middle, kQpn, kEpsn);  // out of sequence
    wrong.payload = d.subspan(0, 256);
    r.deliver_pending(make_packet(wrong), flip_last_payload_byte);
    EXPECT_TRUE(r.run().empty());
    EXPECT_EQ(r.qp.state(), RcState::ok);
    EXPECT_EQ(r.qp.counters().drop_bad_icrc.get(), 3u);

    PacketSpec ok = spec_for(Opcode::rc_send_only, kQpn, kEpsn);
    ok.payload = d.subspan(0, 256);
    ok.ack_req = true;
    r.deliver_pending(make_packet(ok));
    ASSERT_EQ(r.run().size(), 1u);
    // The same packet again, its PSN now behind ePSN by a flipped bit it does not have.
    PacketSpec dup = ok;
    dup.psn = kEpsn + 1;
    r.deliver_pending(make_packet(dup), flip_psn);  // reads as kEpsn, a duplicate
    EXPECT_TRUE(r.run().empty());
    EXPECT_EQ(r.qp.counters().duplicate_requests.get(), 0u);
    EXPECT_EQ(r.qp.counters().drop_bad_icrc.get(), 4u);
    EXPECT_EQ(r.q.rcq.size(), 1u);
}

TEST(RcResponder, rdma_write_is_placed_after_the_rkey_check) {
    Responder r;
    const auto data = bytes(300, 6);
    const std::span<const std::uint8_t> d(data);
    const std::uint64_t va = r.mem.va(r.target, 100);
    r.write(Opcode::rc_rdma_write_first, kEpsn, r.target, va, 300, d.subspan(0, 256), false);
    r.request(Opcode::rc_rdma_write_last, kEpsn + 1, d.subspan(256, 44));
    EXPECT_EQ(std::memcmp(r.mem.host(r.target, 100), data.data(), 300), 0);
    EXPECT_TRUE(r.q.rcq.empty());
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn + 1));
    EXPECT_EQ(p[0].aeth()->msn.host(), 1u);
}

// Each rkey violation: NAK remote access error, the target untouched, the QP in error.
void expect_write_refused(Responder& r, std::uint32_t key, std::uint64_t va) {
    const std::vector<std::uint8_t> before(r.mem.host(r.target), r.mem.host(r.target) + 4096);
    const auto data = bytes(300, 7);
    const std::span<const std::uint8_t> d(data);
    r.write(Opcode::rc_rdma_write_first, kEpsn, key, va, 300, d.subspan(0, 256), false);
    r.request(Opcode::rc_rdma_write_last, kEpsn + 1, d.subspan(256, 44));
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn, NakCode::remote_access_error));
    EXPECT_EQ(std::memcmp(r.mem.host(r.target), before.data(), 4096), 0);
    EXPECT_EQ(r.qp.state(), RcState::error);
    EXPECT_EQ(r.qp.counters().fatal_naks_sent.get(), 1u);
    EXPECT_GE(r.qp.counters().drop_qp_error.get(), 1u);  // the LAST packet found it in error
}

TEST(RcResponder, nak_remote_access_on_a_bad_rkey) {
    Responder r;
    expect_write_refused(r, 0x999999, r.mem.va(r.target));
}

TEST(RcResponder, nak_remote_access_on_rkey_out_of_bounds) {
    Responder r;
    expect_write_refused(r, r.target, r.mem.va(r.target, (1 << 16) - 200));
}

TEST(RcResponder, nak_remote_access_on_a_missing_access_flag) {
    Responder r;
    r.mem.region(r.target).access = rc_access::local_write | rc_access::remote_read;
    expect_write_refused(r, r.target, r.mem.va(r.target));
}

TEST(RcResponder, nak_remote_access_on_a_pd_mismatch) {
    Responder r;
    r.mem.region(r.target).pd = 2;
    expect_write_refused(r, r.target, r.mem.va(r.target));
}

TEST(RcResponder, nak_remote_access_when_the_qp_does_not_allow_remote_writes) {
    RcConfig c = solo_config();
    c.remote_access = rc_access::remote_read;
    Responder r(c);
    expect_write_refused(r, r.target, r.mem.va(r.target));
}

TEST(RcResponder, write_with_immediate_consumes_a_receive_wr_at_its_last_packet) {
    Responder r;
    const auto data = bytes(300, 8);
    const std::span<const std::uint8_t> d(data);
    r.write(Opcode::rc_rdma_write_first, kEpsn, r.target, r.mem.va(r.target), 300,
            d.subspan(0, 256), false);
    PacketSpec s;
    s.immdt.imm = 0xcafe;
    r.request(Opcode::rc_rdma_write_last_with_immediate, kEpsn + 1, d.subspan(256, 44), true, &s);
    // No receive WR: RNR, the data of the last packet not written.
    auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(aeth_type(p[0].aeth()->syndrome), AckType::rnr_nak);
    EXPECT_EQ(psn_of(p[0]), kEpsn + 1);
    r.post_recv(3, 0, 0);
    r.request(Opcode::rc_rdma_write_last_with_immediate, kEpsn + 1, d.subspan(256, 44), true, &s);
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].wr_id, 3u);
    EXPECT_EQ(r.q.rcq[0].opcode, WcOpcode::recv_rdma_with_imm);
    EXPECT_EQ(r.q.rcq[0].byte_len, 300u);
    EXPECT_TRUE(r.q.rcq[0].with_imm);
    EXPECT_EQ(std::memcmp(r.mem.host(r.target), data.data(), 300), 0);
    p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn + 1));
}

TEST(RcResponder, read_request_is_answered_with_first_middle_last_responses) {
    Responder r;
    r.read(kEpsn, r.target, r.mem.va(r.target, 8), 600);
    EXPECT_EQ(r.qp.expected_psn(), kEpsn + 3);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_response_first);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_rdma_read_response_middle);
    EXPECT_EQ(op_of(p[2]), Opcode::rc_rdma_read_response_last);
    EXPECT_NE(p[0].aeth(), nullptr);
    EXPECT_EQ(p[1].aeth(), nullptr);
    EXPECT_NE(p[2].aeth(), nullptr);
    EXPECT_EQ(p[2].aeth()->msn.host(), 1u);
    std::vector<std::uint8_t> got;
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(psn_of(p[i]), kEpsn + i);
        got.insert(got.end(), p[i].payload.begin(), p[i].payload.end());
    }
    ASSERT_EQ(got.size(), 600u);
    EXPECT_EQ(std::memcmp(got.data(), r.mem.host(r.target, 8), 600), 0);
}

TEST(RcResponder, zero_length_read_is_one_empty_response_only) {
    Responder r;
    r.read(kEpsn, 0, 0, 0);  // no key is needed for no bytes
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_response_only);
    EXPECT_TRUE(p[0].payload.empty());
}

TEST(RcResponder, duplicate_read_is_answered_again_from_the_requested_psn_reading_memory_again) {
    Responder r;
    const std::uint64_t va = r.mem.va(r.target);
    r.read(kEpsn, r.target, va, 600);
    ASSERT_EQ(r.run().size(), 3u);
    std::memset(r.mem.host(r.target, 256), 0x42, 344);
    r.read(kEpsn + 1, r.target, va + 256, 344);  // the requester lost responses 1 and 2
    const auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_response_first);
    EXPECT_EQ(psn_of(p[0]), kEpsn + 1);
    EXPECT_EQ(op_of(p[1]), Opcode::rc_rdma_read_response_last);
    EXPECT_EQ(psn_of(p[1]), kEpsn + 2);
    EXPECT_EQ(p[0].payload[0], 0x42);
    EXPECT_EQ(p[1].payload.size(), 88u);
    EXPECT_EQ(r.qp.counters().read_replays.get(), 1u);
    EXPECT_EQ(r.qp.expected_psn(), kEpsn + 3);
}

TEST(RcResponder, fetch_add_is_executed_once_and_returns_the_original_value) {
    Responder r;
    std::uint64_t v = 10;
    std::memcpy(r.mem.host(r.target, 64), &v, 8);
    r.atomic(Opcode::rc_fetch_add, kEpsn, r.target, r.mem.va(r.target, 64), 5);
    auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_atomic_acknowledge);
    EXPECT_EQ(psn_of(p[0]), kEpsn);
    EXPECT_EQ(p[0].atomic_ack_eth()->orig.host(), 10u);
    std::memcpy(&v, r.mem.host(r.target, 64), 8);
    EXPECT_EQ(v, 15u);
    // The same request again (its ACK was lost): answered from the replay cache.
    r.atomic(Opcode::rc_fetch_add, kEpsn, r.target, r.mem.va(r.target, 64), 5);
    p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_EQ(p[0].atomic_ack_eth()->orig.host(), 10u);
    std::memcpy(&v, r.mem.host(r.target, 64), 8);
    EXPECT_EQ(v, 15u);
    EXPECT_EQ(r.qp.counters().atomic_replays.get(), 1u);
}

TEST(RcResponder, compare_swap_swaps_only_when_the_value_equals_compare) {
    Responder r;
    std::uint64_t v = 7;
    std::memcpy(r.mem.host(r.target, 8), &v, 8);
    r.atomic(Opcode::rc_compare_swap, kEpsn, r.target, r.mem.va(r.target, 8), 100, 6);
    r.atomic(Opcode::rc_compare_swap, kEpsn + 1, r.target, r.mem.va(r.target, 8), 200, 7);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].atomic_ack_eth()->orig.host(), 7u);
    EXPECT_EQ(p[1].atomic_ack_eth()->orig.host(), 7u);
    std::memcpy(&v, r.mem.host(r.target, 8), 8);
    EXPECT_EQ(v, 200u);
}

TEST(RcResponder, misaligned_atomic_is_an_invalid_request) {
    Responder r;
    r.atomic(Opcode::rc_fetch_add, kEpsn, r.target, r.mem.va(r.target, 4), 1);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn, NakCode::invalid_request));
}

TEST(RcResponder, duplicate_send_is_acknowledged_again_and_not_executed) {
    Responder r;
    r.post_recv(1, 0, 100);
    r.post_recv(2, 100, 100);
    r.request(Opcode::rc_send_only, kEpsn, bytes(10, 1));
    ASSERT_EQ(r.run().size(), 1u);
    r.request(Opcode::rc_send_only, kEpsn, bytes(10, 2));
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
    EXPECT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rq.size(), 1u);
    EXPECT_EQ(r.qp.counters().duplicate_requests.get(), 1u);
}

TEST(RcResponder, duplicate_write_is_acknowledged_again_and_not_written) {
    Responder r;
    const auto data = bytes(100, 9);
    r.write(Opcode::rc_rdma_write_only, kEpsn, r.target, r.mem.va(r.target), 100, data);
    r.run();
    std::memset(r.mem.host(r.target), 0, 100);  // the client reuses the buffer
    r.write(Opcode::rc_rdma_write_only, kEpsn, r.target, r.mem.va(r.target), 100, data);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
    EXPECT_EQ(r.mem.host(r.target)[0], 0);
}

TEST(RcResponder, psn_ahead_gets_one_sequence_nak_until_the_expected_psn_arrives) {
    Responder r;
    r.post_recv(1, 0, 100);
    r.post_recv(2, 100, 100);
    r.request(Opcode::rc_send_only, kEpsn + 1, bytes(10, 1));
    r.request(Opcode::rc_send_only, kEpsn + 2, bytes(10, 1));
    auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn, NakCode::psn_sequence_error));
    r.request(Opcode::rc_send_only, kEpsn + 3, bytes(10, 1));
    EXPECT_TRUE(r.run().empty());
    EXPECT_EQ(r.qp.counters().out_of_sequence.get(), 3u);
    r.request(Opcode::rc_send_only, kEpsn, bytes(10, 1));
    p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
    // A new episode: one NAK again.
    r.request(Opcode::rc_send_only, kEpsn + 5, bytes(10, 1));
    p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn + 1, NakCode::psn_sequence_error));
    EXPECT_EQ(r.qp.counters().seq_naks_sent.get(), 2u);
}

TEST(RcResponder, more_reads_than_max_dest_rd_atomic_is_an_invalid_request) {
    RcConfig c = solo_config();
    c.max_dest_rd_atomic = 2;
    Responder r(c);
    r.read(kEpsn, r.target, r.mem.va(r.target), 10);
    r.read(kEpsn + 1, r.target, r.mem.va(r.target), 10);
    r.read(kEpsn + 2, r.target, r.mem.va(r.target), 10);  // none of them answered yet
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);  // the fatal NAK goes first; the QP is in error
    EXPECT_TRUE(is_nak(p[0], kEpsn + 2, NakCode::invalid_request));
    EXPECT_EQ(r.qp.state(), RcState::error);
}

TEST(RcResponder, read_resources_are_reused_once_answered) {
    RcConfig c = solo_config();
    c.max_dest_rd_atomic = 2;
    Responder r(c);
    for (std::uint32_t i = 0; i < 6; ++i) {
        r.read(kEpsn + i, r.target, r.mem.va(r.target), 10);
        ASSERT_EQ(r.run().size(), 1u) << i;
    }
    EXPECT_EQ(r.qp.state(), RcState::ok);
}

TEST(RcResponder, read_responses_go_out_before_the_ack_of_later_requests) {
    Responder r;
    r.post_recv(1, 0, 100);
    r.read(kEpsn, r.target, r.mem.va(r.target), 600);
    r.request(Opcode::rc_send_only, kEpsn + 3, bytes(10, 1));
    const auto p = r.run();
    ASSERT_EQ(p.size(), 4u);
    EXPECT_EQ(op_of(p[0]), Opcode::rc_rdma_read_response_first);
    EXPECT_EQ(op_of(p[2]), Opcode::rc_rdma_read_response_last);
    EXPECT_TRUE(is_ack(p[3], kEpsn + 3));
}

TEST(RcResponder, an_ack_req_is_answered_at_the_next_poll) {
    Responder r;
    r.write(Opcode::rc_rdma_write_only, kEpsn, r.target, r.mem.va(r.target), 10, bytes(10, 1),
            true);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
}

TEST(RcResponder, several_ack_reqs_in_one_burst_share_one_coalesced_ack) {
    Responder r;
    for (std::uint32_t i = 0; i < 3; ++i)
        r.write(Opcode::rc_rdma_write_only, kEpsn + i, r.target, r.mem.va(r.target), 10,
                bytes(10, 1), true);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn + 2));
    EXPECT_EQ(r.qp.counters().acks_coalesced.get(), 2u);
}

TEST(RcResponder, an_ack_goes_out_after_ack_every_packets_without_ack_req) {
    RcConfig c = solo_config();
    c.ack_every = 4;
    Responder r(c);
    for (std::uint32_t i = 0; i < 3; ++i)
        r.write(Opcode::rc_rdma_write_only, kEpsn + i, r.target, r.mem.va(r.target), 10,
                bytes(10, 1), false);
    EXPECT_TRUE(r.run().empty());
    r.write(Opcode::rc_rdma_write_only, kEpsn + 3, r.target, r.mem.va(r.target), 10, bytes(10, 1),
            false);
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn + 3));
}

TEST(RcResponder, the_ack_timer_acknowledges_requests_that_did_not_ask) {
    Responder r;
    r.write(Opcode::rc_rdma_write_only, kEpsn, r.target, r.mem.va(r.target), 10, bytes(10, 1),
            false);
    EXPECT_TRUE(r.run().empty());
    EXPECT_EQ(r.qp.next_deadline(), r.now + solo_config().ack_delay_ns);
    r.now += solo_config().ack_delay_ns;
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_ack(p[0], kEpsn));
}

TEST(RcResponder, naks_go_out_at_the_next_poll_without_waiting) {
    Responder r;
    r.request(Opcode::rc_send_only, kEpsn + 9, bytes(10, 1), false);
    r.poll();
    const auto p = r.take();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn, NakCode::psn_sequence_error));
}

TEST(RcResponder, opcode_out_of_sequence_is_an_invalid_request) {
    Responder r;
    r.post_recv(1, 0, 1000);
    r.request(Opcode::rc_send_middle, kEpsn, bytes(256, 1));
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn, NakCode::invalid_request));
    EXPECT_EQ(r.qp.state(), RcState::error);
}

TEST(RcResponder, a_payload_longer_than_the_path_mtu_is_an_invalid_request) {
    Responder r;
    r.post_recv(1, 0, 1000);
    r.request(Opcode::rc_send_only, kEpsn, bytes(257, 1));
    const auto p = r.run();
    ASSERT_EQ(p.size(), 1u);
    EXPECT_TRUE(is_nak(p[0], kEpsn, NakCode::invalid_request));
}

TEST(RcResponder, a_qp_in_error_drops_incoming_packets) {
    Responder r;
    r.post_recv(1, 0, 100);
    r.qp.to_error();
    r.request(Opcode::rc_send_only, kEpsn, bytes(10, 1));
    EXPECT_TRUE(r.run().empty());
    EXPECT_EQ(r.qp.counters().drop_qp_error.get(), 1u);
    ASSERT_EQ(r.q.rcq.size(), 1u);
    EXPECT_EQ(r.q.rcq[0].status, WcStatus::wr_flush_err);
}

// IBA 10.3.1 and 11.6.3: a QP on an SRQ that enters the error state completes the WQE it took
// for a partly received message with a flush error on its receive CQ; the WQEs still on the
// SRQ stay there, in order, for its other QPs; a completed one is not touched again.
TEST(RcResponder, on_an_srq_the_wqe_of_a_partial_message_is_flushed_and_the_srq_kept) {
    RcConfig cfg = solo_config();
    cfg.srq = true;
    Responder r(cfg);
    for (std::uint64_t id = 1; id <= 4; ++id) r.post_recv(id, (id - 1) * 1000, 1000);
    r.request(Opcode::rc_send_only, kEpsn, bytes(10, 1));
    r.request(Opcode::rc_send_first, kEpsn + 1, bytes(256, 2), false);  // one of 3 packets
    ASSERT_EQ(r.q.rcq.size(), 1u);
    r.qp.to_error();
    r.run();
    ASSERT_EQ(r.q.rcq.size(), 2u);
    EXPECT_EQ(r.q.rcq[0].wr_id, 1u);
    EXPECT_EQ(r.q.rcq[0].status, WcStatus::success);
    EXPECT_EQ(r.q.rcq[1].wr_id, 2u);
    EXPECT_EQ(r.q.rcq[1].status, WcStatus::wr_flush_err);
    EXPECT_EQ(r.q.rcq[1].qp_num, kQpn);
    ASSERT_EQ(r.q.rq.size(), 2u) << "the SRQ's WQEs are not the QP's to flush";
    EXPECT_EQ(r.q.rq[0].wr_id, 3u);
    EXPECT_EQ(r.q.rq[1].wr_id, 4u);
}

TEST(RcResponder, packets_for_another_qp_or_partition_are_dropped) {
    Responder r;
    r.post_recv(1, 0, 100);
    PacketSpec s = spec_for(Opcode::rc_send_only, 0x99, kEpsn);
    r.deliver(make_packet(s));
    s = spec_for(Opcode::rc_send_only, kQpn, kEpsn);
    s.pkey = 0x8002;
    r.deliver(make_packet(s));
    s = spec_for(Opcode::uc_send_only, kQpn, kEpsn);
    r.deliver(make_packet(s));
    EXPECT_TRUE(r.q.rcq.empty());
    EXPECT_EQ(r.qp.counters().drop_bad_qpn.get(), 1u);
    EXPECT_EQ(r.qp.counters().drop_bad_pkey.get(), 1u);
    EXPECT_EQ(r.qp.counters().drop_bad_opcode.get(), 1u);
    EXPECT_EQ(r.qp.expected_psn(), kEpsn);
}

}  // namespace
}  // namespace snic::roce::test

namespace snic::roce::test {
namespace {

// The responder writes ACKs and NAKs itself (BTH and AETH): byte for byte what build() makes
// of the same ACK, the P_Key and destination QP the QP's own.
TEST(RcResponderAck, acks_and_naks_are_the_bytes_build_makes_of_them) {
    RcConfig c = solo_config();
    c.pkey = 0x7fff;  // a limited member of the default partition: its own P_Key on the wire
    Responder r(c);
    r.wire.keep = true;
    r.post_recv(1, 0, 64);
    const auto data = bytes(8, 1);
    r.request(Opcode::rc_send_only, kEpsn, data);
    r.run();
    r.request(Opcode::rc_send_only, kEpsn + 3, data);  // ahead: a sequence NAK
    r.run();
    ASSERT_EQ(r.wire.logged(), 2u);
    const auto expect = [&](std::uint8_t syndrome, std::uint32_t psn, std::uint32_t msn) {
        PacketSpec s = spec_for(Opcode::rc_acknowledge, 0x22, psn);
        s.pkey = c.pkey;
        s.aeth.syndrome = syndrome;
        s.aeth.msn = msn;
        return make_packet(s).bytes;
    };
    EXPECT_EQ(r.wire.log[0], expect(aeth_syndrome(AckType::ack, kCreditsInvalid), kEpsn, 1));
    EXPECT_EQ(r.wire.log[1], expect(nak_syndrome(NakCode::psn_sequence_error), kEpsn + 1, 1));
}

}  // namespace
}  // namespace snic::roce::test
