// snicd's command line: parse_config and parse_port_spec, their defaults, both option
// forms, and the exact one-line errors a user sees.
#include <gtest/gtest.h>

#include <cerrno>
#include <initializer_list>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace snic::daemon {
namespace {

Result<Config> parse(std::initializer_list<const char*> args) {
    const std::vector<std::string> v(args.begin(), args.end());
    return parse_config(v);
}

// The error message of a parse that must fail ("" and a test failure if it succeeded).
std::string error_of(std::initializer_list<const char*> args) {
    auto r = parse(args);
    EXPECT_FALSE(r.ok()) << "parsed although it should not have";
    if (r.ok()) return "";
    EXPECT_EQ(r.error().code, EINVAL);
    return r.error().message;
}

std::string port_error(std::string_view spec) {
    auto r = parse_port_spec(spec);
    EXPECT_FALSE(r.ok()) << spec;
    return r.ok() ? "" : r.error().message;
}

constexpr const char* kPort0 = "0,ip=10.0.0.1/24";
constexpr const char* kPort1 = "1,ip=10.0.0.2/24";

// --- defaults ----------------------------------------------------------------------------------

TEST(Config, defaults_with_one_port) {
    auto r = parse({"--port", kPort0});
    ASSERT_TRUE(r.ok()) << r.error().message;
    const Config& c = *r;
    EXPECT_EQ(c.name, "snic");
    EXPECT_EQ(c.ctrl_path, "/run/snic/snic.sock");
    EXPECT_EQ(c.ctrl_mode, 0660u);
    EXPECT_FALSE(c.wire);
    EXPECT_EQ(c.idle_backoff_us, 0u);
    EXPECT_EQ(c.arp_timeout_s, 60u);
    EXPECT_EQ(c.log_level, "info");
    EXPECT_FALSE(c.selftest.has_value());
    EXPECT_FALSE(c.help);
    EXPECT_FALSE(c.version);
    ASSERT_EQ(c.ports.size(), 1u);
    EXPECT_EQ(c.ports[0].port, "0");
    EXPECT_EQ(c.ports[0].ip.addr.to_string(), "10.0.0.1");
    EXPECT_EQ(c.ports[0].ip.length, 24);
    EXPECT_FALSE(c.ports[0].mac.has_value());
    EXPECT_FALSE(c.ports[0].mtu.has_value());
}

TEST(Config, control_socket_path_follows_the_name) {
    auto r = parse({"--name", "lab-1", "--port", kPort0});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->name, "lab-1");
    EXPECT_EQ(r->ctrl_path, "/run/snic/lab-1.sock");
}

TEST(Config, explicit_control_socket_path_wins_over_the_name) {
    auto r = parse({"--ctrl", "/tmp/x.sock", "--name", "other", "--port", kPort0});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->ctrl_path, "/tmp/x.sock");
}

// --- both option forms ---------------------------------------------------------------------------

TEST(Config, option_value_as_next_argument_and_after_equals_sign) {
    auto a = parse({"--name", "n1", "--port", kPort0, "--idle-backoff", "50", "--arp-timeout", "30",
                    "--log-level", "debug", "--ctrl-mode", "0600", "--ctrl", "/tmp/a.sock"});
    auto b = parse({"--name=n1", "--port=0,ip=10.0.0.1/24", "--idle-backoff=50", "--arp-timeout=30",
                    "--log-level=debug", "--ctrl-mode=0600", "--ctrl=/tmp/a.sock"});
    ASSERT_TRUE(a.ok()) << a.error().message;
    ASSERT_TRUE(b.ok()) << b.error().message;
    for (const Config* c : {&*a, &*b}) {
        EXPECT_EQ(c->name, "n1");
        ASSERT_EQ(c->ports.size(), 1u);
        EXPECT_EQ(c->ports[0].port, "0");
        EXPECT_EQ(c->idle_backoff_us, 50u);
        EXPECT_EQ(c->arp_timeout_s, 30u);
        EXPECT_EQ(c->log_level, "debug");
        EXPECT_EQ(c->ctrl_mode, 0600u);
        EXPECT_EQ(c->ctrl_path, "/tmp/a.sock");
    }
}

TEST(Config, value_after_equals_sign_may_contain_equals_signs) {
    auto r = parse({"--port=wire0,ip=10.0.0.1/24,mtu=1500"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->ports[0].port, "wire0");
    EXPECT_EQ(r->ports[0].mtu, 1500);
}

TEST(Config, short_name_option) {
    auto r = parse({"-n", "short", "--port", kPort0});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->name, "short");
}

// --- every option
// ----------------------------------------------------------------------------------

TEST(Config, every_option) {
    auto r = parse({"--name", "all", "--port",
                    "net_af_packet0,ip=192.168.1.10/24,mac=02:00:00:aa:bb:cc,mtu=9000", "--port",
                    "1,ip=192.168.2.10/16", "--wire", "--ctrl", "/tmp/all.sock", "--ctrl-mode",
                    "640", "--idle-backoff", "100000", "--arp-timeout", "86400", "--log-level",
                    "trace", "--selftest", "arp-ping,count=3"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    const Config& c = *r;
    EXPECT_EQ(c.name, "all");
    ASSERT_EQ(c.ports.size(), 2u);
    EXPECT_EQ(c.ports[0].port, "net_af_packet0");
    EXPECT_EQ(c.ports[0].ip.to_string(), "192.168.1.10/24");
    ASSERT_TRUE(c.ports[0].mac.has_value());
    EXPECT_EQ(c.ports[0].mac->to_string(), "02:00:00:aa:bb:cc");
    EXPECT_EQ(c.ports[0].mtu, 9000);
    EXPECT_EQ(c.ports[1].port, "1");
    EXPECT_EQ(c.ports[1].ip.to_string(), "192.168.2.10/16");
    EXPECT_TRUE(c.wire);
    EXPECT_EQ(c.ctrl_path, "/tmp/all.sock");
    EXPECT_EQ(c.ctrl_mode, 0640u);
    EXPECT_EQ(c.idle_backoff_us, 100000u);
    EXPECT_EQ(c.arp_timeout_s, 86400u);
    EXPECT_EQ(c.log_level, "trace");
    ASSERT_TRUE(c.selftest.has_value());
    EXPECT_EQ(c.selftest->name, "arp-ping");
    EXPECT_EQ(c.selftest->count, 3u);
}

TEST(Config, every_log_level) {
    for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
        auto r = parse({"--port", kPort0, "--log-level", level});
        ASSERT_TRUE(r.ok()) << level;
        EXPECT_EQ(r->log_level, level);
    }
    EXPECT_EQ(error_of({"--port", kPort0, "--log-level", "verbose"}),
              "--log-level: invalid level (trace|debug|info|warn|error|critical|off) 'verbose'");
}

TEST(Config, later_option_overrides_earlier) {
    auto r = parse({"--port", kPort0, "--name", "a", "--name", "b", "--arp-timeout", "5",
                    "--arp-timeout", "6"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->name, "b");
    EXPECT_EQ(r->arp_timeout_s, 6u);
}

// --- errors
// ----------------------------------------------------------------------------------------

TEST(Config, unknown_option_is_named) {
    EXPECT_EQ(error_of({"--port", kPort0, "--bogus"}),
              "unknown option '--bogus' (see snicd --help)");
    EXPECT_EQ(error_of({"--bogus=1", "--port", kPort0}),
              "unknown option '--bogus=1' (see snicd --help)");
    EXPECT_EQ(error_of({"-x"}), "unknown option '-x' (see snicd --help)");
    EXPECT_EQ(error_of({"stray"}), "unknown option 'stray' (see snicd --help)");
}

TEST(Config, bad_port_ip_is_named) {
    EXPECT_EQ(error_of({"--port", "0,ip=300.1.2.3/24"}),
              "--port 0: invalid IPv4 address/prefix '300.1.2.3/24'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1"}),
              "--port 0: invalid IPv4 address/prefix '10.0.0.1'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/33"}),
              "--port 0: invalid IPv4 address/prefix '10.0.0.1/33'");
    // A /0 "subnet" would make every address a neighbour.
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/0"}),
              "--port 0: invalid IPv4 address/prefix '10.0.0.1/0'");
    EXPECT_EQ(error_of({"--port", "0,ip="}), "--port 0: invalid IPv4 address/prefix ''");
}

TEST(Config, port_without_ip_is_rejected) {
    EXPECT_EQ(error_of({"--port", "0"}), "--port 0: missing ip=<a.b.c.d/len>");
    EXPECT_EQ(error_of({"--port", "eth1,mtu=1500"}), "--port eth1: missing ip=<a.b.c.d/len>");
}

TEST(Config, port_without_name_is_rejected) {
    EXPECT_EQ(error_of({"--port", ",ip=10.0.0.1/24"}),
              "--port: invalid port (expected <port>,ip=<addr/len>) ',ip=10.0.0.1/24'");
    EXPECT_EQ(error_of({"--port="}), "--port: invalid port (expected <port>,ip=<addr/len>) ''");
}

TEST(Config, unknown_port_parameter_is_named) {
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,speed=10G"}),
              "--port 0: invalid parameter (known: ip, mac, mtu, shared, fallback, "
              "[rx-|tx-]loss|dup|reorder|corrupt, seed, delay, offloads, queues) 'speed=10G'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,"}),
              "--port 0: invalid parameter (known: ip, mac, mtu, shared, fallback, "
              "[rx-|tx-]loss|dup|reorder|corrupt, seed, delay, offloads, queues) ''");
}

TEST(Config, port_mac_must_be_unicast) {
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mac=01:00:5e:00:00:01"}),
              "--port 0: invalid unicast MAC '01:00:5e:00:00:01'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mac=ff:ff:ff:ff:ff:ff"}),
              "--port 0: invalid unicast MAC 'ff:ff:ff:ff:ff:ff'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mac=00:00:00:00:00:00"}),
              "--port 0: invalid unicast MAC '00:00:00:00:00:00'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mac=02:00:00:00:00"}),
              "--port 0: invalid unicast MAC '02:00:00:00:00'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mac=zz:00:00:00:00:01"}),
              "--port 0: invalid unicast MAC 'zz:00:00:00:00:01'");
}

TEST(Config, port_mtu_must_lie_in_68_to_9000) {
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mtu=67"}),
              "--port 0: invalid MTU (68..9000) '67'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mtu=9001"}),
              "--port 0: invalid MTU (68..9000) '9001'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mtu=jumbo"}),
              "--port 0: invalid MTU (68..9000) 'jumbo'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mtu=1500x"}),
              "--port 0: invalid MTU (68..9000) '1500x'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mtu=-1"}),
              "--port 0: invalid MTU (68..9000) '-1'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mtu=70000"}),
              "--port 0: invalid MTU (68..9000) '70000'");
    EXPECT_EQ(error_of({"--port", "0,ip=10.0.0.1/24,mtu="}), "--port 0: invalid MTU (68..9000) ''");
    auto lo = parse({"--port", "0,ip=10.0.0.1/24,mtu=68"});
    auto hi = parse({"--port", "0,ip=10.0.0.1/24,mtu=9000"});
    ASSERT_TRUE(lo.ok() && hi.ok());
    EXPECT_EQ(lo->ports[0].mtu, 68);
    EXPECT_EQ(hi->ports[0].mtu, 9000);
}

TEST(Config, port_given_twice_is_rejected) {
    EXPECT_EQ(error_of({"--port", kPort0, "--port", "0,ip=10.0.1.1/24"}),
              "--port: invalid port (given twice) '0'");
}

TEST(Config, ip_on_two_ports_is_rejected) {
    EXPECT_EQ(error_of({"--port", kPort0, "--port", "1,ip=10.0.0.1/16"}),
              "--port 1: invalid IP (already on another port) '10.0.0.1/16'");
}

TEST(Config, two_ports_in_one_subnet_are_fine) {
    auto r = parse({"--port", kPort0, "--port", kPort1});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->ports.size(), 2u);
}

TEST(Config, missing_value_at_end_is_named) {
    EXPECT_EQ(error_of({"--port", kPort0, "--name"}), "--name: missing value (see snicd --help)");
    EXPECT_EQ(error_of({"--port", kPort0, "-n"}), "-n: missing value (see snicd --help)");
    EXPECT_EQ(error_of({"--port"}), "--port: missing value (see snicd --help)");
    for (const char* opt : {"--ctrl", "--ctrl-mode", "--idle-backoff", "--arp-timeout",
                            "--log-level", "--selftest"}) {
        EXPECT_EQ(error_of({"--port", kPort0, opt}),
                  std::string(opt) + ": missing value (see snicd --help)");
    }
}

TEST(Config, bad_name_is_rejected) {
    EXPECT_EQ(error_of({"--name", "a/b", "--port", kPort0}),
              "--name: invalid name (1-32 of [A-Za-z0-9_.-]) 'a/b'");
    EXPECT_EQ(error_of({"--name", "..", "--port", kPort0}),
              "--name: invalid name (1-32 of [A-Za-z0-9_.-]) '..'");
    EXPECT_EQ(error_of({"--name=", "--port", kPort0}),
              "--name: invalid name (1-32 of [A-Za-z0-9_.-]) ''");
    const std::string long_name(33, 'x');
    EXPECT_FALSE(parse({"--name", long_name.c_str(), "--port", kPort0}).ok());
    const std::string max_name(32, 'x');
    EXPECT_TRUE(parse({"--name", max_name.c_str(), "--port", kPort0}).ok());
}

TEST(Config, idle_backoff_bounds) {
    auto zero = parse({"--port", kPort0, "--idle-backoff", "0"});
    auto max = parse({"--port", kPort0, "--idle-backoff", "100000"});
    ASSERT_TRUE(zero.ok() && max.ok());
    EXPECT_EQ(zero->idle_backoff_us, 0u);
    EXPECT_EQ(max->idle_backoff_us, kMaxIdleBackoffUs);
    EXPECT_EQ(error_of({"--port", kPort0, "--idle-backoff", "100001"}),
              "--idle-backoff: invalid microseconds (0..100000) '100001'");
    EXPECT_EQ(error_of({"--port", kPort0, "--idle-backoff", "-1"}),
              "--idle-backoff: invalid microseconds (0..100000) '-1'");
    EXPECT_EQ(error_of({"--port", kPort0, "--idle-backoff", "10ms"}),
              "--idle-backoff: invalid microseconds (0..100000) '10ms'");
    EXPECT_EQ(error_of({"--port", kPort0, "--idle-backoff", "99999999999"}),
              "--idle-backoff: invalid microseconds (0..100000) '99999999999'");
}

TEST(Config, burst_bounds) {
    auto dflt = parse({"--port", kPort0});
    ASSERT_TRUE(dflt.ok());
    EXPECT_EQ(dflt->rx_burst, kDefaultBurst);
    EXPECT_EQ(dflt->tx_burst, kDefaultBurst);
    auto set = parse({"--port", kPort0, "--rx-burst", "1", "--tx-burst=128"});
    ASSERT_TRUE(set.ok());
    EXPECT_EQ(set->rx_burst, 1u);
    EXPECT_EQ(set->tx_burst, kMaxBurst);
    EXPECT_EQ(error_of({"--port", kPort0, "--rx-burst", "0"}),
              "--rx-burst: invalid frames (1..128) '0'");
    EXPECT_EQ(error_of({"--port", kPort0, "--tx-burst", "129"}),
              "--tx-burst: invalid frames (1..128) '129'");
    EXPECT_EQ(error_of({"--port", kPort0, "--rx-burst", "65537"}),
              "--rx-burst: invalid frames (1..128) '65537'");
    EXPECT_EQ(error_of({"--port", kPort0, "--tx-burst", "many"}),
              "--tx-burst: invalid frames (1..128) 'many'");
}

TEST(Config, tx_in_place_bytes_or_off) {
    auto dflt = parse({"--port", kPort0});
    ASSERT_TRUE(dflt.ok());
    EXPECT_EQ(dflt->tx_in_place, kDefaultPlacedBytes);
    auto off = parse({"--port", kPort0, "--tx-in-place", "off"});
    ASSERT_TRUE(off.ok());
    EXPECT_EQ(off->tx_in_place, 0u);
    auto low = parse({"--port", kPort0, "--tx-in-place=256"});
    ASSERT_TRUE(low.ok());
    EXPECT_EQ(low->tx_in_place, 256u);
    for (const char* bad : {"255", "65536", "0", "some", ""})
        EXPECT_EQ(error_of({"--port", kPort0, "--tx-in-place", bad}),
                  std::string("--tx-in-place: invalid bytes (256..65535) or off '") + bad + "'");
}

TEST(Config, tcp_connection_bounds) {
    auto dflt = parse({"--port", kPort0});
    ASSERT_TRUE(dflt.ok());
    EXPECT_EQ(dflt->tcp.max_connections, 4096u);
    EXPECT_EQ(dflt->tcp.max_per_peer, 2048u);
    auto set = parse({"--port", kPort0, "--tcp-max-conns", "65535", "--tcp-max-per-peer=1"});
    ASSERT_TRUE(set.ok());
    EXPECT_EQ(set->tcp.max_connections, kMaxTcpConnections);
    EXPECT_EQ(set->tcp.max_per_peer, 1u);
    // A smaller table lowers the default per-peer bound with it; a per-peer bound given above
    // the table is an error.
    auto small = parse({"--port", kPort0, "--tcp-max-conns", "16"});
    ASSERT_TRUE(small.ok());
    EXPECT_EQ(small->tcp.max_per_peer, 16u);
    EXPECT_EQ(error_of({"--port", kPort0, "--tcp-max-conns", "16", "--tcp-max-per-peer", "17"}),
              "--tcp-max-per-peer 17 exceeds --tcp-max-conns 16");
    EXPECT_EQ(error_of({"--port", kPort0, "--tcp-max-conns", "0"}),
              "--tcp-max-conns: invalid connections (1..65535) '0'");
    EXPECT_EQ(error_of({"--port", kPort0, "--tcp-max-conns", "65536"}),
              "--tcp-max-conns: invalid connections (1..65535) '65536'");
    EXPECT_EQ(error_of({"--port", kPort0, "--tcp-max-per-peer", "lots"}),
              "--tcp-max-per-peer: invalid connections (1..65535) 'lots'");
}

// A TCP option of one number: its default, a value taken, and each bad value's error.
void expect_tcp_number_option(const char* opt, std::uint32_t TcpLimits::*field, std::uint32_t dflt,
                              const char* value, std::uint32_t taken, const std::string& range,
                              std::initializer_list<const char*> bad) {
    auto d = parse({"--port", kPort0});
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->tcp.*field, dflt) << opt;
    auto set = parse({"--port", kPort0, opt, value});
    ASSERT_TRUE(set.ok()) << opt;
    EXPECT_EQ(set->tcp.*field, taken) << opt;
    for (const char* b : bad)
        EXPECT_EQ(error_of({"--port", kPort0, opt, b}),
                  std::string(opt) + ": invalid " + range + " '" + b + "'");
}

TEST(Config, tcp_rto_min_bounds) {
    expect_tcp_number_option("--tcp-rto-min", &TcpLimits::rto_min_ms, 200, "5", 5,
                             "milliseconds (1..1000)", {"0", "1001", "2.5", "soon", ""});
}

TEST(Config, tcp_window_rtt_bounds) {
    expect_tcp_number_option("--tcp-window-rtt", &TcpLimits::window_rtt_us, 100, "2000", 2000,
                             "microseconds (1..100000)", {"0", "100001", "1.5", "far", ""});
}

TEST(Config, arp_timeout_bounds) {
    EXPECT_EQ(error_of({"--port", kPort0, "--arp-timeout", "0"}),
              "--arp-timeout: invalid seconds (1..86400) '0'");
    EXPECT_EQ(error_of({"--port", kPort0, "--arp-timeout", "86401"}),
              "--arp-timeout: invalid seconds (1..86400) '86401'");
    auto one = parse({"--port", kPort0, "--arp-timeout", "1"});
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->arp_timeout_s, 1u);
}

TEST(Config, ctrl_mode_is_octal) {
    auto r = parse({"--port", kPort0, "--ctrl-mode", "777"});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->ctrl_mode, 0777u);
    EXPECT_EQ(error_of({"--port", kPort0, "--ctrl-mode", "0800"}),
              "--ctrl-mode: invalid octal mode '0800'");
    EXPECT_EQ(error_of({"--port", kPort0, "--ctrl-mode", "1777"}),
              "--ctrl-mode: invalid octal mode '1777'");
    EXPECT_EQ(error_of({"--port", kPort0, "--ctrl-mode", "rw"}),
              "--ctrl-mode: invalid octal mode 'rw'");
}

TEST(Config, ctrl_path_must_be_short_and_non_empty) {
    EXPECT_EQ(error_of({"--port", kPort0, "--ctrl="}), "--ctrl: invalid socket path ''");
    // A path longer than 100 bytes (sun_path holds 108) is refused up front.
    const std::string long_path = "/tmp/" + std::string(100, 's');
    EXPECT_EQ(error_of({"--port", kPort0, "--ctrl", long_path.c_str()}),
              "--ctrl: invalid socket path '" + long_path + "'");
}

// --- self-test ---------------------------------------------------------------------------------

TEST(Config, selftest_arp_ping_defaults_to_ten) {
    auto r = parse({"--port", kPort0, "--port", kPort1, "--selftest", "arp-ping"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_TRUE(r->selftest.has_value());
    EXPECT_EQ(r->selftest->name, "arp-ping");
    EXPECT_EQ(r->selftest->count, 10u);
}

TEST(Config, selftest_raw_ping_takes_size_warmup_json_and_samples) {
    auto r = parse({"--port", kPort0, "--port", kPort1, "--selftest",
                    "raw-ping,size=65536,count=50,warmup=5,json,samples=/tmp/s.txt"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->selftest->name, "raw-ping");
    EXPECT_EQ(r->selftest->size, 65536u);
    EXPECT_EQ(r->selftest->count, 50u);
    EXPECT_EQ(r->selftest->warmup, 5u);
    EXPECT_TRUE(r->selftest->json);
    EXPECT_EQ(r->selftest->samples, "/tmp/s.txt");
}

TEST(Config, selftest_raw_bw_defaults) {
    auto r = parse({"--port", kPort0, "--port", kPort1, "--selftest", "raw-bw"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->selftest->name, "raw-bw");
    EXPECT_EQ(r->selftest->count, 10000u);
    EXPECT_EQ(r->selftest->size, 0u);  // the test's default, 64 KiB
    EXPECT_FALSE(r->selftest->json);
}

TEST(Config, selftest_refuses_bad_specs) {
    for (const char* spec :
         {"raw-ping,size=0", "raw-ping,size=8388609", "raw-bw,count=0", "raw-ping,foo=1",
          "raw-bw,warmup=3", "raw-bw,samples=/tmp/x", "arp-ping,size=8", "arp-ping,json",
          "raw-ping,json=1", "raw-ping,size=", "ping", "raw-ping,samples="}) {
        auto r = parse({"--port", kPort0, "--port", kPort1, "--selftest", spec});
        EXPECT_FALSE(r.ok()) << spec;
        if (!r.ok()) {
            EXPECT_EQ(r.error().code, EINVAL) << spec;
        }
    }
    auto one = parse({"--port", kPort0, "--selftest", "raw-bw"});
    ASSERT_FALSE(one.ok());
    EXPECT_EQ(one.error().message, "--selftest raw-bw needs two ports (--port twice)");
}

TEST(Config, selftest_count) {
    auto r = parse({"--port", kPort0, "--port", kPort1, "--selftest=arp-ping,count=1000000"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->selftest->count, 1000000u);
}

TEST(Config, selftest_bad_count_is_named) {
    for (const char* bad : {"count=0", "count=10000001", "count=", "count=ten", "count=-1"}) {
        const std::string spec = std::string("arp-ping,") + bad;
        EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", spec.c_str()}),
                  std::string("--selftest: invalid count (1..10000000) '") + bad + "'");
    }
}

TEST(Config, selftest_size_is_one_byte_to_8_mib) {
    for (const char* spec :
         {"raw-ping,size=1", "raw-ping,size=8388608", "raw-bw,size=1", "raw-bw,size=8388608"}) {
        auto r = parse({"--port", kPort0, "--port", kPort1, "--selftest", spec});
        ASSERT_TRUE(r.ok()) << spec << ": " << r.error().message;
    }
    for (const char* bad : {"size=0", "size=8388609", "size=", "size=1k", "size=-8"}) {
        for (const char* test : {"raw-ping,", "raw-bw,"}) {
            const std::string spec = std::string(test) + bad;
            EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", spec.c_str()}),
                      std::string("--selftest: invalid size (1..8388608 bytes) '") + bad + "'");
        }
    }
}

TEST(Config, selftest_raw_bw_takes_size_count_and_json) {
    auto r =
        parse({"--port", kPort0, "--port", kPort1, "--selftest", "raw-bw,json,size=4096,count=7"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->selftest->name, "raw-bw");
    EXPECT_EQ(r->selftest->size, 4096u);
    EXPECT_EQ(r->selftest->count, 7u);
    EXPECT_TRUE(r->selftest->json);
}

TEST(Config, selftest_raw_ping_defaults) {
    auto r = parse({"--port", kPort0, "--port", kPort1, "--selftest", "raw-ping"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->selftest->count, 1000u);
    EXPECT_EQ(r->selftest->size, 0u);  // the test's default, 8 B
    EXPECT_EQ(r->selftest->warmup, 0u);
    EXPECT_FALSE(r->selftest->json);
    EXPECT_TRUE(r->selftest->samples.empty());
}

TEST(Config, selftest_bad_warmup_and_json_are_named) {
    EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", "raw-ping,warmup=x"}),
              "--selftest: invalid warmup (0..1000000) 'warmup=x'");
    EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", "raw-bw,warmup=1"}),
              "--selftest: invalid parameter 'warmup=1'");
    EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", "raw-ping,json=yes"}),
              "--selftest: invalid parameter 'json=yes'");
    EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", "raw-bw,fast"}),
              "--selftest: invalid parameter 'fast'");
}

TEST(Config, selftest_unknown_parameter_is_named) {
    EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", "arp-ping,size=64"}),
              "--selftest: invalid parameter 'size=64'");
}

TEST(Config, selftest_unknown_name_is_named) {
    EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", "ping"}),
              "--selftest: invalid self-test (known: arp-ping, raw-ping, raw-bw, tcp-send, "
              "tcp-sink) 'ping'");
    EXPECT_EQ(error_of({"--port", kPort0, "--port", kPort1, "--selftest", "ping,count=3"}),
              "--selftest: invalid self-test (known: arp-ping, raw-ping, raw-bw, tcp-send, "
              "tcp-sink) 'ping,count=3'");
    EXPECT_EQ(
        error_of({"--port", kPort0, "--port", kPort1, "--selftest="}),
        "--selftest: invalid self-test (known: arp-ping, raw-ping, raw-bw, tcp-send, tcp-sink) ''");
}

TEST(Config, tcp_selftests_take_their_peer_and_need_one_port) {
    const auto send = parse({"--port", kPort0, "--selftest",
                             "tcp-send,dst=198.18.2.1:5001,bytes=1048576,record=4096,json"});
    ASSERT_TRUE(send) << send.error().message;
    EXPECT_EQ(send->selftest->dst_ip.to_string(), "198.18.2.1");
    EXPECT_EQ(send->selftest->dst_port, 5001);
    EXPECT_EQ(send->selftest->bytes, 1048576u);
    EXPECT_EQ(send->selftest->record, 4096u);
    EXPECT_TRUE(send->selftest->json);
    const auto sink = parse({"--port", kPort0, "--selftest", "tcp-sink,port=5002,count=3"});
    ASSERT_TRUE(sink) << sink.error().message;
    EXPECT_EQ(sink->selftest->listen_port, 5002);
    EXPECT_EQ(sink->selftest->count, 3u);
    EXPECT_EQ(error_of({"--port", kPort0, "--selftest", "tcp-send"}),
              "--selftest tcp-send needs dst=IP:PORT");
    EXPECT_EQ(error_of({"--port", kPort0, "--selftest", "tcp-send,dst=1.2.3.4"}),
              "--selftest: invalid dst (IP:PORT) 'dst=1.2.3.4'");
    EXPECT_EQ(error_of({"--port", kPort0, "--selftest", "tcp-sink"}),
              "--selftest tcp-sink needs port=P");
}

TEST(Config, selftest_needs_two_ports) {
    EXPECT_EQ(error_of({"--port", kPort0, "--selftest", "arp-ping"}),
              "--selftest arp-ping needs two ports (--port twice)");
}

TEST(Config, no_port_configured) {
    EXPECT_EQ(error_of({}), "no port configured: give --port <port>,ip=<a.b.c.d/len>");
    EXPECT_EQ(error_of({"--name", "x", "--wire"}),
              "no port configured: give --port <port>,ip=<a.b.c.d/len>");
}

// --- --help and --version ------------------------------------------------------------------------

TEST(Config, help_needs_no_port) {
    for (const char* h : {"--help", "-h"}) {
        auto r = parse({h});
        ASSERT_TRUE(r.ok()) << h << ": " << r.error().message;
        EXPECT_TRUE(r->help);
        EXPECT_FALSE(r->version);
    }
}

TEST(Config, version_needs_no_port) {
    for (const char* v : {"--version", "-V"}) {
        auto r = parse({v});
        ASSERT_TRUE(r.ok()) << v << ": " << r.error().message;
        EXPECT_TRUE(r->version);
        EXPECT_FALSE(r->help);
    }
}

TEST(Config, help_skips_the_checks_of_the_whole_configuration) {
    // With --help, a self-test without its two ports is not an error.
    auto r = parse({"--selftest", "arp-ping", "--help"});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->help);
}

TEST(Config, usage_mentions_every_option) {
    const std::string u = usage();
    for (const char* opt : {"--name", "--port", "--wire", "--ctrl", "--ctrl-mode", "--idle-backoff",
                            "--arp-timeout", "--tcp-max-conns", "--tcp-max-per-peer", "--log-level",
                            "--selftest", "--help", "--version"}) {
        EXPECT_NE(u.find(opt), std::string::npos) << opt;
    }
}

// --- flags take no value -----------------------------------------------------------------------

TEST(Config, flag_options_take_no_value) {
    // "--wire=no" must not turn the wire on: a flag given a value is an error.
    EXPECT_FALSE(parse({"--port", kPort0, "--wire=no"}).ok());
    EXPECT_FALSE(parse({"--port", kPort0, "--wire=0"}).ok());
}

// --- parse_port_spec on its own
// --------------------------------------------------------------------

TEST(PortSpec, minimal_spec) {
    auto r = parse_port_spec("net_af_packet0,ip=10.1.2.3/8");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->port, "net_af_packet0");
    EXPECT_EQ(r->ip.addr.value, 0x0a010203u);
    EXPECT_EQ(r->ip.length, 8);
    EXPECT_FALSE(r->mac.has_value());
    EXPECT_FALSE(r->mtu.has_value());
}

TEST(PortSpec, parameters_in_any_order) {
    auto r = parse_port_spec("wire1,mtu=1500,mac=02:AA:bb:00:00:01,ip=10.0.0.9/32");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->port, "wire1");
    EXPECT_EQ(r->mtu, 1500);
    ASSERT_TRUE(r->mac.has_value());
    EXPECT_EQ(r->mac->to_string(), "02:aa:bb:00:00:01");
    EXPECT_EQ(r->ip.to_string(), "10.0.0.9/32");
}

TEST(PortSpec, errors_name_the_port) {
    EXPECT_EQ(port_error("7,ip=1.2.3"), "--port 7: invalid IPv4 address/prefix '1.2.3'");
    EXPECT_EQ(port_error("7"), "--port 7: missing ip=<a.b.c.d/len>");
    EXPECT_EQ(port_error("7,ip"), "--port 7: invalid IPv4 address/prefix ''");
    EXPECT_EQ(port_error(""), "--port: invalid port (expected <port>,ip=<addr/len>) ''");
}

// A shared-address port names a kernel interface; its address, prefix and MTU are the
// interface's, found at start.
TEST(PortSpec, a_shared_port_names_an_interface) {
    auto r = parse_port_spec("iface=eth1,shared");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_TRUE(r->shared);
    EXPECT_EQ(r->iface, "eth1");
    EXPECT_TRUE(r->port.empty()) << "snicd names the device it makes for it";
    EXPECT_FALSE(r->mtu.has_value());
    EXPECT_FALSE(r->fallback.has_value());
    auto faulty = parse_port_spec("iface=eth1,shared,loss=1%");
    ASSERT_TRUE(faulty.ok()) << faulty.error().message;
    EXPECT_DOUBLE_EQ(faulty->fault.rx.drop, 0.01);
    // Where the interface cannot be shared: an address of the port's own.
    auto fb = parse_port_spec("iface=eth1,shared,fallback=10.0.0.7/24");
    ASSERT_TRUE(fb.ok()) << fb.error().message;
    ASSERT_TRUE(fb->fallback.has_value());
    EXPECT_EQ(fb->fallback->to_string(), "10.0.0.7/24");
    auto cfg = parse({"--no-xdp", "--port", "iface=eth1,shared"});
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    EXPECT_TRUE(cfg->no_xdp);
}

TEST(PortSpec, shared_port_errors) {
    EXPECT_EQ(port_error("iface=eth1"),
              "--port iface=eth1: an interface is driven as a shared port only: --port "
              "iface=eth1,shared");
    EXPECT_EQ(port_error("iface=eth1,shared,ip=10.0.0.1/24"),
              "--port iface=eth1: ip is the interface's on a shared port");
    EXPECT_EQ(port_error("iface=eth1,shared,mtu=9000"),
              "--port iface=eth1: mtu is the interface's on a shared port");
    EXPECT_EQ(port_error("0,ip=10.0.0.1/24,shared"),
              "--port 0: shared takes an interface: --port iface=IF,shared");
    EXPECT_EQ(port_error("iface=,shared"), "--port: invalid interface name 'iface='");
    EXPECT_EQ(port_error("iface=a/b,shared"), "--port: invalid interface name 'iface=a/b'");
    EXPECT_EQ(port_error("0,ip=10.0.0.1/24,fallback=10.0.0.2/24"),
              "--port 0: fallback is a shared port's: --port iface=IF,shared,fallback=A.B.C.D/LEN");
    EXPECT_EQ(port_error("iface=eth1,shared,fallback=10.0.0.2/0"),
              "--port iface=eth1: invalid IPv4 address/prefix '10.0.0.2/0'");
    EXPECT_EQ(error_of({"--port", "iface=eth1,shared", "--port", "iface=eth1,shared"}),
              "--port: invalid interface (given twice) 'eth1'");
}

// queues=N: a port's lanes, 1 to 8; a shared port has one.
TEST(PortSpec, queues_are_one_to_eight) {
    auto one = parse_port_spec("wire0,ip=10.0.0.1/24");
    ASSERT_TRUE(one.ok()) << one.error().message;
    EXPECT_EQ(one->queues, 1);
    auto two = parse_port_spec("wire0,ip=10.0.0.1/24,queues=2");
    ASSERT_TRUE(two.ok()) << two.error().message;
    EXPECT_EQ(two->queues, 2);
    auto eight = parse_port_spec("wire0,queues=8,ip=10.0.0.1/24");
    ASSERT_TRUE(eight.ok()) << eight.error().message;
    EXPECT_EQ(eight->queues, kMaxQueues);
    EXPECT_EQ(port_error("wire0,ip=10.0.0.1/24,queues=0"),
              "--port wire0: invalid queues (1..8) 'queues=0'");
    EXPECT_EQ(port_error("wire0,ip=10.0.0.1/24,queues=9"),
              "--port wire0: invalid queues (1..8) 'queues=9'");
    EXPECT_EQ(port_error("wire0,ip=10.0.0.1/24,queues=two"),
              "--port wire0: invalid queues (1..8) 'queues=two'");
    EXPECT_EQ(port_error("iface=eth1,shared,queues=2"),
              "--port iface=eth1: a shared port has one queue (queues=1)");
}

}  // namespace
}  // namespace snic::daemon
