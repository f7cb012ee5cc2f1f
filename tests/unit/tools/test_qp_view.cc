// What `snicctl qp` prints (tools/snicctl/qp_view.h): QP numbers as users type them, the
// listing's line, one QP's dump, and the paging of a listing, malformed replies included.
#include "tools/snicctl/qp_view.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace snic::snicctl {
namespace {

TEST(SnicctlQp, qp_numbers_are_decimal_or_0x_hex_and_24_bits) {
    EXPECT_EQ(parse_qpn("16385"), 16385u);
    EXPECT_EQ(parse_qpn("0x004001"), 0x4001u);
    EXPECT_EQ(parse_qpn("0XFFFFFF"), 0xffffffu);
    EXPECT_EQ(parse_qpn("16777215"), 0xffffffu);
    EXPECT_EQ(parse_qpn("16777216"), std::nullopt);
    EXPECT_EQ(parse_qpn("0x1000000"), std::nullopt);
    EXPECT_EQ(parse_qpn("notanumber"), std::nullopt);
    EXPECT_EQ(parse_qpn(""), std::nullopt);
    EXPECT_EQ(parse_qpn("0x"), std::nullopt);
    EXPECT_EQ(parse_qpn("-1"), std::nullopt);
    EXPECT_EQ(parse_qpn("12abc"), std::nullopt);
    EXPECT_EQ(parse_qpn(" 12"), std::nullopt);
}

shm::QpSummary summary() {
    shm::QpSummary s{};
    s.qpn = 16385;
    s.session = 3;
    s.pid = 4321;
    s.uid = 1000;
    s.qp_type = 2;  // RC
    s.state = 3;    // RTS
    s.dest_qpn = 16384;
    const std::uint8_t dgid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 13, 2};
    std::memcpy(s.dgid, dgid, 16);
    std::strcpy(s.device, "snicA_1");
    return s;
}

TEST(SnicctlQp, a_listing_line_is_key_value_pairs) {
    EXPECT_EQ(qp_line(summary()),
              "qpn 16385 device snicA_1 session 3 pid 4321 uid 1000 type RC state RTS "
              "dest_qpn 16384 peer 198.18.13.2\n");
    shm::QpSummary fresh = summary();
    fresh.state = 0;
    fresh.dest_qpn = 0;
    std::memset(fresh.dgid, 0, 16);
    EXPECT_EQ(qp_line(fresh),
              "qpn 16385 device snicA_1 session 3 pid 4321 uid 1000 type RC state RESET "
              "dest_qpn 0 peer -\n");
}

// The "key value" pairs of the lines of `text` made of them (not the counters' heading).
std::map<std::string, std::string> pairs(const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        if (line.find('(') != std::string::npos) continue;
        std::istringstream in(line);
        std::string key, value;
        while (in >> key >> value) out[key] = value;
    }
    return out;
}

shm::QpReply running_qp() {
    shm::QpReply q{};
    q.summary = summary();
    q.attr.path_mtu = 3;  // IBV_MTU_1024
    q.attr.sq_psn = 0xabcdef;
    q.attr.rq_psn = 0x000123;
    q.attr.qp_access_flags = 0x2 | 0x4;
    q.attr.timeout = 14;
    q.attr.retry_cnt = 7;
    q.attr.rnr_retry = 7;
    q.attr.max_rd_atomic = 16;
    q.attr.max_dest_rd_atomic = 16;
    q.attr.cap = {128, 256, 2, 1, 64};
    q.engine.running = 1;
    std::strcpy(q.engine.transport, "roce");
    std::strcpy(q.engine.error, "none");
    q.engine.next_psn = 0xabcf00;
    q.engine.unacked_psn = 0xabcefe;
    q.engine.expected_psn = 0x000200;
    q.engine.msn = 221;
    q.engine.send_wrs_held = 2;
    q.engine.ncounters = 3;
    q.engine.all_counters = 3;
    q.counters[0] = {"tx_send_packets", 275};
    q.counters[1] = {"timeouts", 0};
    q.counters[2] = {"rx_acks", 273};
    return q;
}

TEST(SnicctlQp, a_dump_shows_attributes_engine_and_non_zero_counters) {
    const std::string out = qp_dump(running_qp(), false);
    const auto kv = pairs(out);
    EXPECT_EQ(kv.at("state"), "RTS");
    EXPECT_EQ(kv.at("path_mtu"), "1024");
    EXPECT_EQ(kv.at("sq_psn"), "0xabcdef");
    EXPECT_EQ(kv.at("rq_psn"), "0x000123");
    EXPECT_EQ(kv.at("access"), "REMOTE_WRITE,REMOTE_READ");
    EXPECT_EQ(kv.at("max_rd_atomic"), "16");
    EXPECT_EQ(kv.at("max_send_wr"), "128");
    EXPECT_EQ(kv.at("engine"), "roce");
    EXPECT_EQ(kv.at("error"), "none");
    EXPECT_EQ(kv.at("next_psn"), "0xabcf00");
    EXPECT_EQ(kv.at("unacked_psn"), "0xabcefe");
    EXPECT_EQ(kv.at("expected_psn"), "0x000200");
    EXPECT_EQ(kv.at("msn"), "221");
    EXPECT_EQ(kv.at("send_wrs_held"), "2");
    EXPECT_EQ(kv.at("tx_send_packets"), "275");
    EXPECT_EQ(kv.at("rx_acks"), "273");
    EXPECT_EQ(kv.count("timeouts"), 0u) << "zero counters only with -a";
    EXPECT_NE(out.find("counters (2 of 3 non-zero; -a for all)"), std::string::npos) << out;
    EXPECT_EQ(out.find(qp_line(summary())), 0u) << "the dump starts with the listing's line";
}

TEST(SnicctlQp, a_dump_with_all_shows_zero_counters_too) {
    const std::string out = qp_dump(running_qp(), true);
    EXPECT_EQ(pairs(out).at("timeouts"), "0");
    EXPECT_NE(out.find("counters (all 3)"), std::string::npos) << out;
}

TEST(SnicctlQp, a_dump_says_when_no_engine_runs_the_qp) {
    shm::QpReply q{};
    q.summary = summary();
    q.summary.state = 1;  // INIT
    const std::string out = qp_dump(q, true);
    EXPECT_NE(out.find("engine none"), std::string::npos) << out;
    EXPECT_EQ(out.find("counters"), std::string::npos) << out;
}

TEST(SnicctlQp, a_dump_says_how_many_counters_snicd_could_not_send) {
    shm::QpReply q = running_qp();
    q.engine.all_counters = 70;
    EXPECT_NE(qp_dump(q, false).find("(67 more not sent by snicd)"), std::string::npos);
}

TEST(SnicctlQp, a_failed_engine_says_why) {
    shm::QpReply q = running_qp();
    q.summary.state = 6;  // ERR
    q.engine.failed = 1;
    std::strcpy(q.engine.error, "retry_exceeded");
    const auto kv = pairs(qp_dump(q, false));
    EXPECT_EQ(kv.at("state"), "ERR");
    EXPECT_EQ(kv.at("failed"), "yes");
    EXPECT_EQ(kv.at("error"), "retry_exceeded");
}

// ---- paging ----------------------------------------------------------------------------

// A daemon's listing served in pages of `per_page`, as the qps op serves it.
struct Pages {
    std::vector<std::uint32_t> qpns;  // increasing
    std::uint32_t per_page = 2;
    int requests = 0;
    std::optional<shm::QpsReply> operator()(std::uint32_t first) {
        ++requests;
        shm::QpsReply r{};
        r.nqps = static_cast<std::uint32_t>(qpns.size());
        for (std::uint32_t n : qpns) {
            if (n < first) continue;
            if (r.listed == per_page) {
                r.more = 1;
                break;
            }
            r.qps[r.listed++].qpn = n;
        }
        r.next_qpn = r.listed > 0 ? r.qps[r.listed - 1].qpn + 1 : first;
        return r;
    }
};

TEST(SnicctlQp, a_listing_is_fetched_page_after_page) {
    Pages pages{{3, 5, 8, 9, 20}};
    const auto rows = fetch_qps(std::ref(pages));
    ASSERT_TRUE(rows);
    ASSERT_EQ(rows->size(), 5u);
    EXPECT_EQ((*rows)[0].qpn, 3u);
    EXPECT_EQ((*rows)[4].qpn, 20u);
    EXPECT_EQ(pages.requests, 3);
}

TEST(SnicctlQp, an_empty_listing_is_one_request) {
    Pages pages{{}};
    const auto rows = fetch_qps(std::ref(pages));
    ASSERT_TRUE(rows);
    EXPECT_TRUE(rows->empty());
    EXPECT_EQ(pages.requests, 1);
}

TEST(SnicctlQp, a_failed_request_fails_the_listing) {
    EXPECT_EQ(fetch_qps([](std::uint32_t) { return std::optional<shm::QpsReply>(); }),
              std::nullopt);
}

TEST(SnicctlQp, malformed_pages_fail_the_listing_instead_of_looping) {
    auto reply = [](std::uint32_t listed, std::uint32_t more, std::uint32_t next) {
        shm::QpsReply r{};
        r.listed = listed;
        r.more = more;
        r.next_qpn = next;
        for (std::uint32_t i = 0; i < listed && i < shm::kMaxQpsListed; ++i) r.qps[i].qpn = 10 + i;
        return r;
    };
    // More listed than the array holds.
    EXPECT_EQ(fetch_qps([&](std::uint32_t) {
                  return std::optional(reply(shm::kMaxQpsListed + 1, 0, 0));
              }),
              std::nullopt);
    // "More", but nothing listed: no progress.
    EXPECT_EQ(fetch_qps([&](std::uint32_t) { return std::optional(reply(0, 1, 0)); }),
              std::nullopt);
    // "More" from a QP number already listed.
    EXPECT_EQ(fetch_qps([&](std::uint32_t) { return std::optional(reply(2, 1, 5)); }),
              std::nullopt);
    // The same page again: numbers before the cursor.
    EXPECT_EQ(fetch_qps([&](std::uint32_t) { return std::optional(reply(2, 1, 12)); }),
              std::nullopt);
    // Numbers out of order within a page.
    EXPECT_EQ(fetch_qps([&](std::uint32_t) {
                  auto r = reply(2, 0, 0);
                  std::swap(r.qps[0], r.qps[1]);
                  return std::optional(r);
              }),
              std::nullopt);
}

}  // namespace
}  // namespace snic::snicctl
