// The opcode table against the InfiniBand spec (IBA vol 1 §9.2 "OpCode field" for the
// numbers, §9.3 for the headers each opcode carries), written out here independently of
// the table's own rows: numbers, names, headers and their offsets, lengths and the rules
// its properties must keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "proto/roce/bth.h"
#include "proto/roce/headers.h"
#include "proto/roce/opcode.h"

namespace snic::roce {
namespace {

// IBA's header sizes in bytes, from the spec's figures (not from sizeof).
constexpr std::size_t kIbaBth = 12, kIbaDeth = 8, kIbaReth = 16, kIbaAtomicEth = 28, kIbaAeth = 4,
                      kIbaAtomicAckEth = 8, kIbaImmDt = 4, kIbaIeth = 4;

struct Expected {
    std::uint8_t number;
    std::string_view name;
    std::vector<Ext> headers;  // in wire order
    bool payload;
};

// Every opcode snic speaks, as IBA lists them.
const std::vector<Expected> kIba = {
    {0x00, "RC_SEND_FIRST", {}, true},
    {0x01, "RC_SEND_MIDDLE", {}, true},
    {0x02, "RC_SEND_LAST", {}, true},
    {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", {Ext::immdt}, true},
    {0x04, "RC_SEND_ONLY", {}, true},
    {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", {Ext::immdt}, true},
    {0x06, "RC_RDMA_WRITE_FIRST", {Ext::reth}, true},
    {0x07, "RC_RDMA_WRITE_MIDDLE", {}, true},
    {0x08, "RC_RDMA_WRITE_LAST", {}, true},
    {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", {Ext::immdt}, true},
    {0x0a, "RC_RDMA_WRITE_ONLY", {Ext::reth}, true},
    {0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", {Ext::reth, Ext::immdt}, true},
    {0x0c, "RC_RDMA_READ_REQUEST", {Ext::reth}, false},
    {0x0d, "RC_RDMA_READ_RESPONSE_FIRST", {Ext::aeth}, true},
    {0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", {}, true},
    {0x0f, "RC_RDMA_READ_RESPONSE_LAST", {Ext::aeth}, true},
    {0x10, "RC_RDMA_READ_RESPONSE_ONLY", {Ext::aeth}, true},
    {0x11, "RC_ACKNOWLEDGE", {Ext::aeth}, false},
    {0x12, "RC_ATOMIC_ACKNOWLEDGE", {Ext::aeth, Ext::atomic_ack_eth}, false},
    {0x13, "RC_COMPARE_SWAP", {Ext::atomic_eth}, false},
    {0x14, "RC_FETCH_ADD", {Ext::atomic_eth}, false},
    {0x16, "RC_SEND_LAST_WITH_INVALIDATE", {Ext::ieth}, true},
    {0x17, "RC_SEND_ONLY_WITH_INVALIDATE", {Ext::ieth}, true},
    {0x20, "UC_SEND_FIRST", {}, true},
    {0x21, "UC_SEND_MIDDLE", {}, true},
    {0x22, "UC_SEND_LAST", {}, true},
    {0x23, "UC_SEND_LAST_WITH_IMMEDIATE", {Ext::immdt}, true},
    {0x24, "UC_SEND_ONLY", {}, true},
    {0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", {Ext::immdt}, true},
    {0x26, "UC_RDMA_WRITE_FIRST", {Ext::reth}, true},
    {0x27, "UC_RDMA_WRITE_MIDDLE", {}, true},
    {0x28, "UC_RDMA_WRITE_LAST", {}, true},
    {0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", {Ext::immdt}, true},
    {0x2a, "UC_RDMA_WRITE_ONLY", {Ext::reth}, true},
    {0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", {Ext::reth, Ext::immdt}, true},
    {0x64, "UD_SEND_ONLY", {Ext::deth}, true},
    {0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", {Ext::deth, Ext::immdt}, true},
};

std::size_t iba_size(Ext e) {
    switch (e) {
        case Ext::deth:
            return kIbaDeth;
        case Ext::reth:
            return kIbaReth;
        case Ext::atomic_eth:
            return kIbaAtomicEth;
        case Ext::aeth:
            return kIbaAeth;
        case Ext::atomic_ack_eth:
            return kIbaAtomicAckEth;
        case Ext::immdt:
            return kIbaImmDt;
        case Ext::ieth:
            return kIbaIeth;
        case Ext::count_:
            break;
    }
    return 0;
}

TEST(OpcodeTable, header_structs_have_iba_sizes) {
    EXPECT_EQ(sizeof(Bth), kIbaBth);
    EXPECT_EQ(sizeof(Deth), kIbaDeth);
    EXPECT_EQ(sizeof(Reth), kIbaReth);
    EXPECT_EQ(sizeof(AtomicEth), kIbaAtomicEth);
    EXPECT_EQ(sizeof(Aeth), kIbaAeth);
    EXPECT_EQ(sizeof(AtomicAckEth), kIbaAtomicAckEth);
    EXPECT_EQ(sizeof(ImmDt), kIbaImmDt);
    EXPECT_EQ(sizeof(Ieth), kIbaIeth);
    for (std::size_t e = 0; e < kExtCount; ++e)
        EXPECT_EQ(kExtLen[e], iba_size(static_cast<Ext>(e)));
}

TEST(OpcodeTable, opcode_numbers_are_iba_values) {
    EXPECT_EQ(static_cast<int>(Opcode::rc_send_only), 0x04);
    EXPECT_EQ(static_cast<int>(Opcode::rc_rdma_write_only), 0x0a);
    EXPECT_EQ(static_cast<int>(Opcode::rc_rdma_read_request), 0x0c);
    EXPECT_EQ(static_cast<int>(Opcode::rc_acknowledge), 0x11);
    EXPECT_EQ(static_cast<int>(Opcode::rc_atomic_acknowledge), 0x12);
    EXPECT_EQ(static_cast<int>(Opcode::rc_compare_swap), 0x13);
    EXPECT_EQ(static_cast<int>(Opcode::rc_send_only_with_invalidate), 0x17);
    EXPECT_EQ(static_cast<int>(Opcode::uc_send_only), 0x24);
    EXPECT_EQ(static_cast<int>(Opcode::ud_send_only), 0x64);
    for (const Expected& e : kIba) {
        SCOPED_TRACE(std::string(e.name));
        const OpcodeInfo& info = opcode_info(e.number);
        ASSERT_TRUE(info.known());
        EXPECT_EQ(info.name, e.name);
        EXPECT_EQ(opcode_by_name(e.name), static_cast<Opcode>(e.number));
    }
}

TEST(OpcodeTable, exactly_the_iba_opcodes_snic_speaks_are_known) {
    std::size_t known = 0;
    for (std::size_t op = 0; op < 256; ++op) {
        const bool listed = std::any_of(kIba.begin(), kIba.end(),
                                        [op](const Expected& e) { return e.number == op; });
        EXPECT_EQ(kOpcodeTable[op].known(), listed) << "opcode " << op;
        if (!kOpcodeTable[op].known()) {
            EXPECT_TRUE(kOpcodeTable[op].name.empty());
            EXPECT_EQ(kOpcodeTable[op].length, 0);
        }
        known += kOpcodeTable[op].known();
    }
    EXPECT_EQ(known, kIba.size());
    EXPECT_EQ(kOpcodeCount, kIba.size());
    EXPECT_FALSE(opcode_info(0x15).known());  // reserved in RC
    EXPECT_FALSE(opcode_info(0x44).known());  // RD SEND Only: RD is not spoken
    EXPECT_FALSE(opcode_info(0x80).known());  // CNP
    EXPECT_FALSE(opcode_info(0xa4).known());  // XRC SEND Only
    EXPECT_EQ(opcode_by_name("RC_RESYNC"), std::nullopt);
}

TEST(OpcodeTable, each_opcode_carries_the_iba_headers_in_wire_order) {
    for (const Expected& e : kIba) {
        SCOPED_TRACE(std::string(e.name));
        const OpcodeInfo& info = opcode_info(e.number);
        std::size_t at = kIbaBth;
        for (std::size_t x = 0; x < kExtCount; ++x) {
            const auto ext = static_cast<Ext>(x);
            const bool want = std::find(e.headers.begin(), e.headers.end(), ext) != e.headers.end();
            EXPECT_EQ(info.has(ext), want) << kExtNames[x];
            if (want) {
                EXPECT_EQ(info.offset_of(ext), at) << kExtNames[x];
                at += iba_size(ext);
            } else {
                EXPECT_EQ(info.offset_of(ext), 0) << kExtNames[x];
            }
        }
        EXPECT_EQ(info.has(kHasPayload), e.payload);
    }
}

TEST(OpcodeTable, length_is_bth_plus_the_sum_of_its_headers) {
    for (const Expected& e : kIba) {
        std::size_t sum = kIbaBth;
        for (Ext x : e.headers) sum += iba_size(x);
        EXPECT_EQ(opcode_info(e.number).length, sum) << e.name;
    }
    // A few totals as IBA's packet layouts give them.
    EXPECT_EQ(opcode_info(Opcode::rc_send_only).length, 12);
    EXPECT_EQ(opcode_info(Opcode::rc_rdma_write_only_with_immediate).length, 32);
    EXPECT_EQ(opcode_info(Opcode::rc_compare_swap).length, 40);
    EXPECT_EQ(opcode_info(Opcode::rc_atomic_acknowledge).length, 24);
    EXPECT_EQ(opcode_info(Opcode::ud_send_only_with_immediate).length, 24);
    std::size_t longest = 0;
    for (const auto& info : kOpcodeTable) longest = std::max<std::size_t>(longest, info.length);
    EXPECT_EQ(longest, kMaxHeaderLen);
}

TEST(OpcodeTable, transport_is_the_top_three_bits_and_the_name_prefix) {
    const std::map<Transport, std::string_view> prefix = {
        {Transport::rc, "RC_"}, {Transport::uc, "UC_"}, {Transport::ud, "UD_"}};
    for (Opcode op : all_opcodes()) {
        const auto n = static_cast<std::uint8_t>(op);
        const OpcodeInfo& info = opcode_info(op);
        ASSERT_EQ(prefix.count(transport_of(n)), 1u) << info.name;
        EXPECT_TRUE(info.name.starts_with(prefix.at(transport_of(n)))) << info.name;
    }
    EXPECT_EQ(transport_of(0x80), Transport::cnp);
    EXPECT_EQ(transport_of(0xa0), Transport::xrc);
    EXPECT_EQ(transport_of(0x40), Transport::rd);
}

TEST(OpcodeTable, every_opcode_is_a_request_or_a_response) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        EXPECT_NE(info.has(kRequest), info.has(kResponse)) << info.name;
    }
}

TEST(OpcodeTable, every_opcode_is_first_middle_last_or_only) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        const int places = info.has(kMiddle) + info.has(kFirst) + info.has(kLast);
        EXPECT_TRUE(places == 1 || (info.has(kOnly) && !info.has(kMiddle))) << info.name;
        EXPECT_EQ(info.name.ends_with("_FIRST"), info.has(kFirst) && !info.has(kLast)) << info.name;
        EXPECT_EQ(info.name.ends_with("_MIDDLE"), info.has(kMiddle)) << info.name;
        const bool named_last = info.name.find("_LAST") != std::string_view::npos;
        EXPECT_EQ(named_last, info.has(kLast) && !info.has(kFirst)) << info.name;
    }
}

TEST(OpcodeTable, only_rc_requests_need_an_ack) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        const bool rc_request =
            transport_of(static_cast<std::uint8_t>(op)) == Transport::rc && info.has(kRequest);
        EXPECT_EQ(info.has(kNeedsAck), rc_request) << info.name;
    }
}

TEST(OpcodeTable, operation_class_follows_the_name) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        const auto named = [&](std::string_view s) {
            return info.name.find(s) != std::string_view::npos;
        };
        const int classes = info.has(kSend) + info.has(kWrite) + info.has(kRead) +
                            info.has(kAtomic) + info.has(kAcknowledge);
        EXPECT_EQ(classes, 1) << info.name;
        EXPECT_EQ(info.has(kSend), named("_SEND_")) << info.name;
        EXPECT_EQ(info.has(kWrite), named("_RDMA_WRITE_")) << info.name;
        EXPECT_EQ(info.has(kRead), named("_RDMA_READ_")) << info.name;
        EXPECT_EQ(info.has(kAtomic),
                  named("COMPARE_SWAP") || named("FETCH_ADD") || named("ATOMIC_ACKNOWLEDGE"))
            << info.name;
        EXPECT_EQ(info.has(kHasImmDt), named("_WITH_IMMEDIATE")) << info.name;
        EXPECT_EQ(info.has(kHasIeth), named("_WITH_INVALIDATE")) << info.name;
        EXPECT_EQ(info.has(kHasDeth), transport_of(static_cast<std::uint8_t>(op)) == Transport::ud)
            << info.name;
    }
}

TEST(OpcodeTable, receive_wqes_are_taken_by_send_first_or_only_and_by_write_with_immediate) {
    for (Opcode op : all_opcodes()) {
        const OpcodeInfo& info = opcode_info(op);
        const bool send_start = info.has(kSend) && info.has(kFirst);
        const bool write_imm = info.has(kWrite) && info.has(kHasImmDt);
        EXPECT_EQ(info.has(kTakesRecvWqe), send_start || write_imm) << info.name;
        // A receive completes where a SEND ends, or where a WRITE with immediate does.
        const bool send_end = info.has(kSend) && info.has(kLast);
        EXPECT_EQ(info.has(kCompletesRecv), send_end || write_imm) << info.name;
    }
}

TEST(OpcodeTable, ack_and_atomic_rows_are_single_packet_without_payload) {
    for (Opcode op :
         {Opcode::rc_acknowledge, Opcode::rc_atomic_acknowledge, Opcode::rc_compare_swap,
          Opcode::rc_fetch_add, Opcode::rc_rdma_read_request}) {
        const OpcodeInfo& info = opcode_info(op);
        EXPECT_TRUE(info.has(kOnly)) << info.name;
        EXPECT_FALSE(info.has(kHasPayload)) << info.name;
    }
    for (Opcode op : {Opcode::rc_rdma_read_response_first, Opcode::rc_rdma_read_response_middle,
                      Opcode::rc_rdma_read_response_last, Opcode::rc_rdma_read_response_only}) {
        EXPECT_TRUE(opcode_info(op).has(kRead | kResponse | kHasPayload)) << opcode_info(op).name;
    }
}

TEST(OpcodeTable, all_opcodes_lists_the_table_in_ascending_order) {
    const auto ops = all_opcodes();
    ASSERT_EQ(ops.size(), kIba.size());
    for (std::size_t i = 0; i < ops.size(); ++i)
        EXPECT_EQ(static_cast<std::uint8_t>(ops[i]), kIba[i].number);
}

TEST(OpcodeTable, props_print_as_names) {
    EXPECT_EQ(props_to_string(opcode_info(Opcode::rc_rdma_write_first).props),
              "RETH|payload|first|request|write|needs_ack");
    EXPECT_EQ(props_to_string(opcode_info(Opcode::ud_send_only).props),
              "DETH|payload|first|last|request|send|takes_recv_wqe|completes_recv");
    EXPECT_EQ(props_to_string(0), "");
}

// --- AETH syndromes (IBA vol 1 §9.3, AETH) --------------------------------------------------

TEST(Aeth, syndrome_type_is_bits_6_5_and_value_bits_4_0) {
    EXPECT_EQ(aeth_type(0x1f), AckType::ack);
    EXPECT_EQ(aeth_value(0x1f), kCreditsInvalid);
    EXPECT_EQ(aeth_type(0x20), AckType::rnr_nak);
    EXPECT_EQ(aeth_value(0x2e), 0x0e);  // an RNR timer code
    EXPECT_EQ(aeth_type(0x40), AckType::reserved);
    EXPECT_EQ(aeth_type(0x61), AckType::nak);
}

TEST(Aeth, nak_codes_are_the_iba_values) {
    EXPECT_EQ(nak_syndrome(NakCode::psn_sequence_error), 0x60);
    EXPECT_EQ(nak_syndrome(NakCode::invalid_request), 0x61);
    EXPECT_EQ(nak_syndrome(NakCode::remote_access_error), 0x62);
    EXPECT_EQ(nak_syndrome(NakCode::remote_operational_error), 0x63);
    EXPECT_EQ(nak_syndrome(NakCode::invalid_rd_request), 0x64);
    EXPECT_EQ(aeth_syndrome(AckType::rnr_nak, 0x12), 0x32);
}

}  // namespace
}  // namespace snic::roce
