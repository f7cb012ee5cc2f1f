// Fault injection decisions: rates honoured, runs repeat for a seed, directions independent.
#include <gtest/gtest.h>
#include <rte_ethdev.h>

#include <cmath>

#include "daemon/config.h"
#include "daemon/port/fault.h"
#include "daemon/port/port.h"
#include "shm/control_abi.h"

namespace snic::daemon {
namespace {

struct Tally {
    int drop = 0, duplicate = 0, reorder = 0, corrupt = 0;
};

Tally run(const FaultRates& rates, std::uint64_t seed, int n) {
    FaultInjector f(rates, seed);
    Tally t;
    for (int i = 0; i < n; ++i) {
        const FaultAction a = f.decide();
        t.drop += a.drop;
        t.duplicate += a.duplicate;
        t.reorder += a.reorder;
        t.corrupt += a.corrupt;
        if (a.drop) {
            EXPECT_FALSE(a.duplicate || a.reorder || a.corrupt)
                << "a dropped frame has no other fault";
        }
    }
    return t;
}

TEST(Fault, no_rates_no_faults) {
    const Tally t = run(FaultRates{}, 1, 100000);
    EXPECT_EQ(t.drop + t.duplicate + t.reorder + t.corrupt, 0);
    EXPECT_FALSE(FaultInjector(FaultRates{}, 1).active());
}

TEST(Fault, rates_are_honoured_within_statistical_bounds) {
    const int n = 1'000'000;
    const Tally t = run({0.05, 0.01, 0.01, 0.005}, 42, n);
    // Four standard deviations of a binomial: never flaky for a fixed seed, and a wrong
    // generator or threshold lands far outside.
    auto near = [n](int got, double p, double p_seen) {
        const double mean = n * p_seen * p;
        const double sd = std::sqrt(n * p_seen * p * (1 - p));
        return std::abs(got - mean) <= 4 * sd + 1;
    };
    EXPECT_TRUE(near(t.drop, 0.05, 1.0)) << t.drop;
    // duplicate, reorder and corrupt are decided for the frames not dropped
    EXPECT_TRUE(near(t.duplicate, 0.01, 0.95)) << t.duplicate;
    EXPECT_TRUE(near(t.reorder, 0.01, 0.95)) << t.reorder;
    EXPECT_TRUE(near(t.corrupt, 0.005, 0.95)) << t.corrupt;
}

TEST(Fault, same_seed_repeats_exactly) {
    FaultInjector a({0.1, 0.1, 0.1, 0.1}, 7), b({0.1, 0.1, 0.1, 0.1}, 7);
    for (int i = 0; i < 10000; ++i) {
        const FaultAction x = a.decide(), y = b.decide();
        ASSERT_EQ(x.drop, y.drop);
        ASSERT_EQ(x.duplicate, y.duplicate);
        ASSERT_EQ(x.reorder, y.reorder);
        ASSERT_EQ(x.corrupt, y.corrupt);
        ASSERT_EQ(x.corrupt_at, y.corrupt_at);
    }
}

TEST(Fault, different_seeds_differ) {
    FaultInjector x({0.5, 0, 0, 0}, 1), y({0.5, 0, 0, 0}, 2);
    int differ = 0;
    for (int i = 0; i < 1000; ++i) differ += x.decide().drop != y.decide().drop;
    EXPECT_GT(differ, 100);
}

TEST(Fault, certain_loss_drops_everything) {
    EXPECT_EQ(run({1.0, 0, 0, 0}, 3, 1000).drop, 1000);
}

TEST(FaultConfig, port_spec_sets_both_directions_or_one) {
    auto s = parse_port_spec(
        "wire1,ip=198.18.1.2/24,loss=5%,tx-dup=0.01,rx-corrupt=0.5%,reorder=0.02,seed=9");
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_DOUBLE_EQ(s->fault.rx.drop, 0.05);
    EXPECT_DOUBLE_EQ(s->fault.tx.drop, 0.05);
    EXPECT_DOUBLE_EQ(s->fault.tx.duplicate, 0.01);
    EXPECT_DOUBLE_EQ(s->fault.rx.duplicate, 0.0);
    EXPECT_DOUBLE_EQ(s->fault.rx.corrupt, 0.005);
    EXPECT_DOUBLE_EQ(s->fault.tx.corrupt, 0.0);
    EXPECT_DOUBLE_EQ(s->fault.rx.reorder, 0.02);
    EXPECT_DOUBLE_EQ(s->fault.tx.reorder, 0.02);
    EXPECT_EQ(s->fault.seed, 9u);
}

TEST(FaultConfig, no_fault_keys_no_faults) {
    auto s = parse_port_spec("0,ip=198.18.1.2/24");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->fault, FaultSpec{});
}

TEST(FaultConfig, rejects_fraction_out_of_range_or_malformed) {
    for (const char* bad : {"0,ip=198.18.1.2/24,loss=1.5", "0,ip=198.18.1.2/24,loss=-0.1",
                            "0,ip=198.18.1.2/24,loss=abc", "0,ip=198.18.1.2/24,dup=101%",
                            "0,ip=198.18.1.2/24,loss=", "0,ip=198.18.1.2/24,seed=x",
                            "0,ip=198.18.1.2/24,rx-bogus=0.1"}) {
        auto s = parse_port_spec(bad);
        EXPECT_FALSE(s.ok()) << bad;
        if (!s.ok()) {
            EXPECT_NE(s.error().message.find("invalid"), std::string::npos) << s.error().message;
        }
    }
}

TEST(FaultConfig, delay_is_microseconds_on_received_frames) {
    auto s = parse_port_spec("0,ip=198.18.1.2/24,delay=1000");
    ASSERT_TRUE(s.ok()) << s.error().message;
    EXPECT_EQ(s->fault.rx_delay_us, 1000u);
    EXPECT_FALSE(s->fault.rx.any() || s->fault.tx.any()) << "a delay is no fault rate";
    for (const char* bad : {"0,ip=198.18.1.2/24,delay=0", "0,ip=198.18.1.2/24,delay=100001",
                            "0,ip=198.18.1.2/24,delay=1ms", "0,ip=198.18.1.2/24,delay="}) {
        auto e = parse_port_spec(bad);
        ASSERT_FALSE(e.ok()) << bad;
        EXPECT_NE(e.error().message.find("invalid delay (1..100000 us)"), std::string::npos)
            << e.error().message;
    }
}

TEST(PortOffloads, the_device_offers_the_spec_allows_and_faults_do_not_hide) {
    const std::uint64_t rx =
        RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_UDP_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
    const std::uint64_t tx = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM |
                             RTE_ETH_TX_OFFLOAD_UDP_CKSUM | RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
    PortSpec spec;
    EXPECT_EQ(choose_offloads(rx, tx, spec), (PortOffloads{true, true, true}));
    EXPECT_EQ(snic::shm::offload_names(offload_bits(choose_offloads(rx, tx, spec))),
              "tx-ipv4-cksum,tx-tcp-cksum,rx-cksum");
    EXPECT_EQ(choose_offloads(0, RTE_ETH_TX_OFFLOAD_TCP_CKSUM, spec),
              (PortOffloads{false, true, false}))
        << "what the device offers (virtio: TCP, no IPv4 header)";
    EXPECT_EQ(snic::shm::offload_names(offload_bits(choose_offloads(0, 0, spec))), "none");
    PortSpec off;
    off.offloads = false;
    EXPECT_FALSE(choose_offloads(rx, tx, off).any()) << "offloads=off";
    PortSpec corrupt_tx;
    corrupt_tx.fault.tx.corrupt = 0.01;
    EXPECT_EQ(choose_offloads(rx, tx, corrupt_tx), (PortOffloads{false, false, true}))
        << "a checksum made after the flipped bit would hide it";
    PortSpec corrupt_rx;
    corrupt_rx.fault.rx.corrupt = 0.01;
    EXPECT_EQ(choose_offloads(rx, tx, corrupt_rx), (PortOffloads{true, true, false}))
        << "a verdict given before the flipped bit would hide it";
    auto parsed = parse_port_spec("0,ip=198.18.1.2/24,offloads=off");
    ASSERT_TRUE(parsed.ok());
    EXPECT_FALSE(parsed->offloads);
    EXPECT_TRUE(parse_port_spec("0,ip=198.18.1.2/24")->offloads);
    EXPECT_FALSE(parse_port_spec("0,ip=198.18.1.2/24,offloads=maybe").ok());
}

TEST(PortPool, holds_every_ports_rings_and_never_less_than_before) {
    EXPECT_EQ(packet_pool_mbufs(1), 8191u);
    EXPECT_EQ(packet_pool_mbufs(2), 8191u) << "the wire's two ports: as they always had";
    EXPECT_EQ(packet_pool_mbufs(4), 4u * 2048 + 4095) << "four NIC ports' rings, and room";
    EXPECT_GE(packet_pool_mbufs(32), 32u * (kRxDescriptors + kTxDescriptors));
}

TEST(DelayLine, items_leave_in_order_once_their_time_has_come) {
    DelayLine<int> line(3, 100);  // room for 4
    EXPECT_TRUE(line.push(1, 1000));
    EXPECT_TRUE(line.push(2, 1010));
    EXPECT_TRUE(line.push(3, 1050));
    EXPECT_TRUE(line.push(4, 1050));
    EXPECT_FALSE(line.push(5, 1060)) << "full: the caller drops it";
    int got = 0;
    EXPECT_FALSE(line.pop_due(got, 1099)) << "not yet";
    ASSERT_TRUE(line.pop_due(got, 1100));
    EXPECT_EQ(got, 1);
    EXPECT_FALSE(line.pop_due(got, 1109));
    EXPECT_TRUE(line.push(6, 1105)) << "room again";
    ASSERT_TRUE(line.pop_due(got, 1200));
    EXPECT_EQ(got, 2);
    ASSERT_TRUE(line.pop_due(got, 1200));
    EXPECT_EQ(got, 3);
    ASSERT_TRUE(line.pop_due(got, 1200));
    EXPECT_EQ(got, 4);
    EXPECT_FALSE(line.pop_due(got, 1204)) << "6 is due at 1205";
    ASSERT_TRUE(line.pop_due(got, 1205));
    EXPECT_EQ(got, 6);
    EXPECT_EQ(line.size(), 0u);
}

}  // namespace
}  // namespace snic::daemon
