// The RC engines' tables: the RNR timer encoding (against IBA's table, written out here
// independently, and its doubling rule), the local ACK timeout, the WR opcode table and the
// NAK-to-status mapping, the counter table, the config check.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "proto/roce/rc.h"
#include "proto/roce/rnr.h"

namespace snic::roce {
namespace {

// IBA vol 1 §9.7.5.2.8, "RNR NAK Timer Field Encoding", in milliseconds as the table
// gives them.
constexpr double kIbaRnrMs[32] = {
    655.36, 0.01,  0.02,  0.03,  0.04,  0.06,   0.08,   0.12,   0.16,   0.24,   0.32,
    0.48,   0.64,  0.96,  1.28,  1.92,  2.56,   3.84,   5.12,   7.68,   10.24,  15.36,
    20.48,  30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
};

TEST(RcRnrTimer, every_code_matches_the_iba_table) {
    for (std::uint8_t code = 0; code < 32; ++code) {
        const auto want_ns = static_cast<std::uint64_t>(kIbaRnrMs[code] * 1e6 + 0.5);
        EXPECT_EQ(rnr_timer_ns(code), want_ns) << "code " << int{code};
    }
}

TEST(RcRnrTimer, doubles_every_two_codes_from_code_4) {
    for (std::uint8_t code = 4; code + 2 < 32; ++code)
        EXPECT_EQ(rnr_timer_ns(code + 2), 2 * rnr_timer_ns(code)) << "code " << int{code};
    for (std::uint8_t code = 1; code + 1 < 32; ++code)
        EXPECT_LT(rnr_timer_ns(code), rnr_timer_ns(code + 1));
}

TEST(RcRnrTimer, code_0_is_the_longest_and_only_five_bits_count) {
    for (std::uint8_t code = 1; code < 32; ++code) EXPECT_GT(rnr_timer_ns(0), rnr_timer_ns(code));
    EXPECT_EQ(rnr_timer_ns(0x21), rnr_timer_ns(1));
}

TEST(RcAckTimeout, is_4096ns_times_two_to_the_code_and_0_is_infinite) {
    EXPECT_EQ(ack_timeout_ns(0), kRcNever);
    EXPECT_EQ(ack_timeout_ns(1), 8192u);
    EXPECT_EQ(ack_timeout_ns(14), 4096ull << 14);  // 67.1 ms
    EXPECT_EQ(ack_timeout_ns(31), 4096ull << 31);  // 2.4 hours
    for (std::uint8_t c = 1; c < 31; ++c) EXPECT_EQ(ack_timeout_ns(c + 1), 2 * ack_timeout_ns(c));
}

TEST(RcWrOpTable, rows_follow_ibv_wr_opcode_numbering_and_iba_opcodes) {
    EXPECT_EQ(wr_op_info(WrOp::rdma_write).name, "rdma_write");
    EXPECT_EQ(wr_op_info(WrOp::send_inv).name, "send_inv");
    EXPECT_EQ(static_cast<int>(WrOp::send), 2);
    EXPECT_EQ(static_cast<int>(WrOp::rdma_read), 4);
    EXPECT_EQ(static_cast<int>(WrOp::send_inv), 9);
    for (const WrOpInfo& op : kWrOpTable) {
        if (op.kind == WrKind::local) continue;
        // Every packet opcode is an RC request of the right operation.
        for (Opcode o : {op.first, op.middle, op.last, op.only}) {
            const OpcodeInfo& info = opcode_info(o);
            EXPECT_TRUE(info.has(kRequest | kNeedsAck)) << op.name;
            EXPECT_EQ(transport_of(static_cast<std::uint8_t>(o)), Transport::rc) << op.name;
            const std::uint32_t want = op.kind == WrKind::send    ? kSend
                                       : op.kind == WrKind::write ? kWrite
                                       : op.kind == WrKind::read  ? kRead
                                                                  : kAtomic;
            EXPECT_TRUE(info.has(want)) << op.name;
        }
        if (op.has_payload()) {
            EXPECT_TRUE(opcode_info(op.first).has(kFirst) && !opcode_info(op.first).has(kLast));
            EXPECT_TRUE(opcode_info(op.middle).has(kMiddle));
            EXPECT_TRUE(opcode_info(op.last).has(kLast) && !opcode_info(op.last).has(kFirst));
            EXPECT_TRUE(opcode_info(op.only).has(kOnly));
            // Immediate data and IETH only on the packets that end the message.
            EXPECT_FALSE(opcode_info(op.first).has(Ext::immdt) ||
                         opcode_info(op.first).has(Ext::ieth));
            EXPECT_FALSE(opcode_info(op.middle).has(Ext::immdt));
            EXPECT_EQ(opcode_info(op.last).has(Ext::immdt), opcode_info(op.only).has(Ext::immdt));
            EXPECT_EQ(opcode_info(op.last).has(Ext::ieth), opcode_info(op.only).has(Ext::ieth));
        }
    }
    EXPECT_TRUE(opcode_info(wr_op_info(WrOp::send_imm).last).has(Ext::immdt));
    EXPECT_TRUE(opcode_info(wr_op_info(WrOp::rdma_write_imm).only).has(Ext::immdt));
    EXPECT_TRUE(opcode_info(wr_op_info(WrOp::send_inv).only).has(Ext::ieth));
    EXPECT_TRUE(opcode_info(wr_op_info(WrOp::rdma_write).first).has(Ext::reth));
    EXPECT_FALSE(opcode_info(wr_op_info(WrOp::rdma_write).middle).has(Ext::reth));
    EXPECT_TRUE(wr_op_info(WrOp::rdma_read).rd_atomic());
    EXPECT_TRUE(wr_op_info(WrOp::atomic_fetch_add).rd_atomic());
    EXPECT_FALSE(wr_op_info(WrOp::send).rd_atomic());
}

TEST(RcWrOpTable, completion_opcodes_are_ibv_wc_opcode_values) {
    EXPECT_EQ(static_cast<int>(wr_op_info(WrOp::send_imm).wc), 0);
    EXPECT_EQ(static_cast<int>(wr_op_info(WrOp::rdma_write_imm).wc), 1);
    EXPECT_EQ(static_cast<int>(wr_op_info(WrOp::rdma_read).wc), 2);
    EXPECT_EQ(static_cast<int>(wr_op_info(WrOp::atomic_cmp_swp).wc), 3);
    EXPECT_EQ(static_cast<int>(wr_op_info(WrOp::atomic_fetch_add).wc), 4);
    EXPECT_EQ(static_cast<int>(wr_op_info(WrOp::bind_mw).wc), 5);
    EXPECT_EQ(static_cast<int>(wr_op_info(WrOp::local_inv).wc), 6);
    EXPECT_EQ(static_cast<int>(WcOpcode::recv), 128);
    EXPECT_EQ(static_cast<int>(WcOpcode::recv_rdma_with_imm), 129);
}

TEST(RcNakStatus, each_nak_code_maps_to_its_ibv_wc_status) {
    EXPECT_EQ(nak_status(NakCode::invalid_request), WcStatus::rem_inv_req_err);
    EXPECT_EQ(nak_status(NakCode::remote_access_error), WcStatus::rem_access_err);
    EXPECT_EQ(nak_status(NakCode::remote_operational_error), WcStatus::rem_op_err);
    EXPECT_EQ(static_cast<int>(WcStatus::rem_inv_req_err), 9);
    EXPECT_EQ(static_cast<int>(WcStatus::rem_access_err), 10);
    EXPECT_EQ(static_cast<int>(WcStatus::rem_op_err), 11);
    EXPECT_EQ(static_cast<int>(WcStatus::retry_exc_err), 12);
    EXPECT_EQ(static_cast<int>(WcStatus::rnr_retry_exc_err), 13);
    EXPECT_EQ(static_cast<int>(WcStatus::wr_flush_err), 5);
}

TEST(RcCounters, the_table_names_every_counter_once) {
    EXPECT_EQ(kRcCounterFields.size() * sizeof(RcCounter), sizeof(RcCounters));
    // Every member appears exactly once: distinct names, distinct addresses.
    RcCounters counters;
    std::set<std::string_view> names;
    std::set<const RcCounter*> fields;
    for (const auto& f : kRcCounterFields) {
        EXPECT_TRUE(names.insert(f.name).second) << f.name;
        EXPECT_TRUE(fields.insert(&(counters.*f.field)).second) << f.name;
    }
}

TEST(RcConfig, check_refuses_what_iba_does_not_allow) {
    RcConfig c;
    EXPECT_EQ(rc_config_error(c), nullptr);
    for (std::uint32_t mtu : {256u, 512u, 1024u, 2048u, 4096u}) {
        c.mtu = mtu;
        EXPECT_EQ(rc_config_error(c), nullptr);
    }
    c.mtu = 1500;
    EXPECT_NE(rc_config_error(c), nullptr);
    c = RcConfig{};
    c.retry_cnt = 8;
    EXPECT_NE(rc_config_error(c), nullptr);
    c = RcConfig{};
    c.max_rd_atomic = 129;
    EXPECT_NE(rc_config_error(c), nullptr);
    c = RcConfig{};
    c.sq_psn = 1u << 24;
    EXPECT_NE(rc_config_error(c), nullptr);
}

}  // namespace
}  // namespace snic::roce
