#include "daemon/config.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <vector>

namespace snic::daemon {

namespace {

template <typename T>
std::optional<T> parse_number(std::string_view s, int base = 10) {
    if (s.empty()) return std::nullopt;
    T v{};
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
}

Error bad(std::string_view option, std::string_view what, std::string_view value) {
    return make_error(EINVAL, std::string(option) + ": invalid " + std::string(what) + " '" +
                                  std::string(value) + "'");
}

bool valid_name(std::string_view name) {
    if (name.empty() || name.size() > 32) return false;
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
        if (!ok) return false;
    }
    return name != "." && name != "..";
}

// Splits "a,b,c" into its fields.
std::vector<std::string_view> split(std::string_view text, char sep) {
    std::vector<std::string_view> out;
    for (;;) {
        const std::size_t pos = text.find(sep);
        out.push_back(text.substr(0, pos));
        if (pos == std::string_view::npos) return out;
        text.remove_prefix(pos + 1);
    }
}

Result<SelftestSpec> parse_selftest(std::string_view text) {
    const auto fields = split(text, ',');
    SelftestSpec spec;
    spec.name = std::string(fields[0]);
    const bool ping = spec.name == "arp-ping" || spec.name == "raw-ping";
    const bool tcp = spec.name == "tcp-send" || spec.name == "tcp-sink";
    if (!ping && !tcp && spec.name != "raw-bw")
        return bad("--selftest",
                   "self-test (known: arp-ping, raw-ping, raw-bw, tcp-send, tcp-sink)", text);
    if (spec.name == "raw-bw") spec.count = 10000;
    if (spec.name == "raw-ping") spec.count = 1000;
    if (tcp) spec.count = 1;
    if (spec.name == "tcp-send") spec.bytes = std::uint64_t{64} << 20;
    for (std::size_t i = 1; i < fields.size(); ++i) {
        const auto f = fields[i];
        const auto eq = f.find('=');
        const auto key = f.substr(0, eq);
        const auto value = eq == std::string_view::npos ? std::string_view{} : f.substr(eq + 1);
        if (key == "json" && eq == std::string_view::npos && spec.name != "arp-ping") {
            spec.json = true;
            continue;
        }
        if (eq == std::string_view::npos) return bad("--selftest", "parameter", f);
        if (key == "samples" && spec.name == "raw-ping" && !value.empty()) {
            spec.samples = std::string(value);
            continue;
        }
        if (key == "dst" && spec.name == "tcp-send") {
            // IP:PORT
            const auto colon = value.rfind(':');
            const auto ip = net::Ipv4Addr::parse(value.substr(0, colon));
            const auto port = colon == std::string_view::npos
                                  ? std::nullopt
                                  : parse_number<std::uint16_t>(value.substr(colon + 1));
            if (!ip || !port || *port == 0) return bad("--selftest", "dst (IP:PORT)", f);
            spec.dst_ip = *ip;
            spec.dst_port = *port;
            continue;
        }
        if (key == "bytes" && spec.name == "tcp-send") {
            const auto b = parse_number<std::uint64_t>(value);
            if (!b || *b == 0 || *b > kMaxSelftestBytes)
                return bad("--selftest", "bytes (1..2^40)", f);
            spec.bytes = *b;
            continue;
        }
        const auto n = parse_number<std::uint32_t>(value);
        if (key == "port" && spec.name == "tcp-sink") {
            if (!n || *n == 0 || *n > 65535) return bad("--selftest", "port (1..65535)", f);
            spec.listen_port = static_cast<std::uint16_t>(*n);
        } else if (key == "record" && spec.name == "tcp-send") {
            if (!n || *n == 0 || *n > (256u << 10))
                return bad("--selftest", "record (1..262144 bytes)", f);
            spec.record = *n;
        } else if (key == "count" && tcp) {
            if (!n || *n == 0 || *n > 1000) return bad("--selftest", "count (1..1000)", f);
            spec.count = *n;
        } else if (key == "count") {
            if (!n || *n == 0 || *n > 10'000'000)
                return bad("--selftest", "count (1..10000000)", f);
            spec.count = *n;
        } else if (key == "size" && !tcp && spec.name != "arp-ping") {
            if (!n || *n == 0 || *n > kMaxSelftestSize)
                return bad("--selftest", "size (1..8388608 bytes)", f);
            spec.size = *n;
        } else if (key == "warmup" && spec.name == "raw-ping") {
            if (!n || *n > 1'000'000) return bad("--selftest", "warmup (0..1000000)", f);
            spec.warmup = *n;
        } else {
            return bad("--selftest", "parameter", f);
        }
    }
    if (spec.name == "tcp-send" && spec.dst_port == 0)
        return make_error(EINVAL, "--selftest tcp-send needs dst=IP:PORT");
    if (spec.name == "tcp-sink" && spec.listen_port == 0)
        return make_error(EINVAL, "--selftest tcp-sink needs port=P");
    return spec;
}

// "0.05" or "5%": a fraction in [0, 1].
std::optional<double> parse_fraction(std::string_view s) {
    const bool percent = s.ends_with('%');
    if (percent) s.remove_suffix(1);
    if (s.empty()) return std::nullopt;
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    if (percent) v /= 100;
    if (!(v >= 0 && v <= 1)) return std::nullopt;
    return v;
}

// The rates a fault key sets: "loss" both directions, "rx-loss" one; nullopt if not a fault key.
std::optional<std::vector<double*>> fault_rate(FaultSpec& f, std::string_view key) {
    struct Dir {
        std::string_view prefix;
        std::vector<FaultRates*> rates;
    };
    const Dir dirs[] = {{"", {&f.rx, &f.tx}}, {"rx-", {&f.rx}}, {"tx-", {&f.tx}}};
    for (const auto& d : dirs) {
        if (!key.starts_with(d.prefix)) continue;
        const auto kind = key.substr(d.prefix.size());
        double FaultRates::*field = kind == "loss"      ? &FaultRates::drop
                                    : kind == "dup"     ? &FaultRates::duplicate
                                    : kind == "reorder" ? &FaultRates::reorder
                                    : kind == "corrupt" ? &FaultRates::corrupt
                                                        : nullptr;
        if (field == nullptr) continue;
        std::vector<double*> out;
        for (FaultRates* r : d.rates) out.push_back(&(r->*field));
        return out;
    }
    return std::nullopt;
}

}  // namespace

Result<PortSpec> parse_port_spec(std::string_view text) {
    const auto fields = split(text, ',');
    PortSpec spec;
    spec.port = std::string(fields[0]);
    const std::string option = "--port " + spec.port;
    if (spec.port.empty()) return bad("--port", "port (expected <port>,ip=<addr/len>)", text);
    // iface=IF,shared: the address, prefix and MTU are IF's.
    if (spec.port.starts_with("iface=")) {
        spec.iface = spec.port.substr(6);
        spec.port.clear();
        if (spec.iface.empty() || spec.iface.size() >= 16 ||
            spec.iface.find_first_of("/ \t") != std::string::npos)
            return bad("--port", "interface name", fields[0]);
    }
    bool have_ip = false;
    for (std::size_t i = 1; i < fields.size(); ++i) {
        const auto f = fields[i];
        const std::size_t eq = f.find('=');
        const auto key = f.substr(0, eq);
        const auto value = eq == std::string_view::npos ? std::string_view{} : f.substr(eq + 1);
        if (!spec.iface.empty() && (key == "ip" || key == "mtu" || key == "mac"))
            return make_error(
                EINVAL, option + ": " + std::string(key) + " is the interface's on a shared port");
        if (key == "fallback") {
            if (spec.iface.empty())
                return make_error(EINVAL, option +
                                              ": fallback is a shared port's: --port "
                                              "iface=IF,shared,fallback=A.B.C.D/LEN");
            auto p = net::Ipv4Prefix::parse(value);
            if (!p || p->length == 0) return bad(option, "IPv4 address/prefix", value);
            spec.fallback = *p;
        } else if (key == "shared" && eq == std::string_view::npos) {
            if (spec.iface.empty())
                return make_error(EINVAL, option +
                                              ": shared takes an interface: --port "
                                              "iface=IF,shared");
            spec.shared = true;
        } else if (key == "ip") {
            auto p = net::Ipv4Prefix::parse(value);
            if (!p || p->length == 0) return bad(option, "IPv4 address/prefix", value);
            spec.ip = *p;
            have_ip = true;
        } else if (key == "mac") {
            auto m = net::MacAddr::parse(value);
            if (!m || m->is_multicast() || m->is_zero()) return bad(option, "unicast MAC", value);
            spec.mac = *m;
        } else if (key == "mtu") {
            auto m = parse_number<std::uint16_t>(value);
            if (!m || *m < kMinMtu || *m > kMaxMtu) return bad(option, "MTU (68..9000)", value);
            spec.mtu = *m;
        } else if (key == "offloads") {
            if (value != "on" && value != "off") return bad(option, "offloads (on or off)", f);
            spec.offloads = value == "on";
        } else if (key == "queues") {
            auto n = parse_number<std::uint16_t>(value);
            if (!n || *n == 0 || *n > kMaxQueues)
                return bad(option, "queues (1.." + std::to_string(kMaxQueues) + ")", f);
            spec.queues = *n;
        } else if (key == "delay") {
            auto us = parse_number<std::uint32_t>(value);
            if (!us || *us == 0 || *us > 100'000) return bad(option, "delay (1..100000 us)", f);
            spec.fault.rx_delay_us = *us;
        } else if (key == "seed") {
            auto n = parse_number<std::uint64_t>(value);
            if (!n) return bad(option, "seed", value);
            spec.fault.seed = *n;
        } else if (auto rate = fault_rate(spec.fault, key)) {
            auto p = parse_fraction(value);
            if (!p) return bad(option, "fraction (0..1, or 0%..100%)", f);
            for (double* r : *rate) *r = *p;
        } else {
            return bad(option,
                       "parameter (known: ip, mac, mtu, shared, fallback, "
                       "[rx-|tx-]loss|dup|reorder|corrupt, seed, delay, offloads, queues)",
                       f);
        }
    }
    if (!spec.iface.empty()) {
        if (spec.queues != 1)
            return make_error(EINVAL, option + ": a shared port has one queue (queues=1)");
        if (!spec.shared)
            return make_error(EINVAL, option +
                                          ": an interface is driven as a shared port only: "
                                          "--port iface=" +
                                          spec.iface + ",shared");
        return spec;
    }
    if (!have_ip) return make_error(EINVAL, option + ": missing ip=<a.b.c.d/len>");
    return spec;
}

namespace {

// The options that take no value, and those that take one ("--opt value" or "--opt=value").
constexpr std::string_view kFlags[] = {"-h",     "--help",         "-V",      "--version",
                                       "--wire", "--no-dev-nodes", "--no-xdp"};
constexpr std::string_view kValued[] = {"-n",
                                        "--name",
                                        "--port",
                                        "--ctrl",
                                        "--ctrl-mode",
                                        "--dev-dir",
                                        "--idle-backoff",
                                        "--rx-burst",
                                        "--tx-burst",
                                        "--tx-in-place",
                                        "--tcp-max-conns",
                                        "--tcp-max-per-peer",
                                        "--tcp-rto-min",
                                        "--tcp-window-rtt",
                                        "--arp-timeout",
                                        "--log-level",
                                        "--selftest"};

bool one_of(std::span<const std::string_view> set, std::string_view s) {
    return std::ranges::find(set, s) != set.end();
}

// What the command line gave, beyond the values: what the defaults depend on.
struct Given {
    bool ctrl = false;
    bool tcp_per_peer = false;
};

void set_flag(Config& cfg, std::string_view flag) {
    if (flag == "-h" || flag == "--help") cfg.help = true;
    if (flag == "-V" || flag == "--version") cfg.version = true;
    if (flag == "--wire") cfg.wire = true;
    if (flag == "--no-dev-nodes") cfg.dev_dir.clear();
    if (flag == "--no-xdp") cfg.no_xdp = true;
}

Status add_port(Config& cfg, std::string_view v) {
    auto spec = parse_port_spec(v);
    if (!spec) return spec.error();
    for (const auto& p : cfg.ports) {
        if (spec->shared) {
            if (p.iface == spec->iface)
                return bad("--port", "interface (given twice)", spec->iface);
            continue;  // its address is the interface's, known at start
        }
        if (p.shared) continue;
        if (p.port == spec->port) return bad("--port", "port (given twice)", spec->port);
        if (p.ip.addr == spec->ip.addr)
            return bad("--port " + spec->port, "IP (already on another port)",
                       spec->ip.to_string());
    }
    cfg.ports.push_back(std::move(spec.value()));
    return Ok{};
}

Status set_log_level(Config& cfg, std::string_view v) {
    static constexpr std::string_view kLevels[] = {"trace", "debug",    "info", "warn",
                                                   "error", "critical", "off"};
    if (!one_of(kLevels, v))
        return bad("--log-level", "level (trace|debug|info|warn|error|critical|off)", v);
    cfg.log_level = std::string(v);
    return Ok{};
}

// One option of kValued with its value.
Status set_option(Config& cfg, std::string_view opt, std::string_view v, Given& given) {
    if (opt == "-n" || opt == "--name") {
        if (!valid_name(v)) return bad("--name", "name (1-32 of [A-Za-z0-9_.-])", v);
        cfg.name = std::string(v);
    } else if (opt == "--port") {
        return add_port(cfg, v);
    } else if (opt == "--ctrl") {
        if (v.empty() || v.size() > 100) return bad("--ctrl", "socket path", v);
        cfg.ctrl_path = std::string(v);
        given.ctrl = true;
    } else if (opt == "--ctrl-mode") {
        auto m = parse_number<unsigned>(v, 8);
        if (!m || *m > 0777) return bad("--ctrl-mode", "octal mode", v);
        cfg.ctrl_mode = static_cast<mode_t>(*m);
    } else if (opt == "--dev-dir") {
        if (v.empty() || v.front() != '/' || v.size() > 100)
            return bad("--dev-dir", "absolute directory path", v);
        cfg.dev_dir = std::string(v);
    } else if (opt == "--idle-backoff") {
        auto us = parse_number<std::uint32_t>(v);
        if (!us || *us > kMaxIdleBackoffUs)
            return bad("--idle-backoff", "microseconds (0..100000)", v);
        cfg.idle_backoff_us = *us;
    } else if (opt == "--rx-burst" || opt == "--tx-burst") {
        auto n = parse_number<std::uint16_t>(v);
        if (!n || *n == 0 || *n > kMaxBurst) return bad(opt, "frames (1..128)", v);
        (opt == "--rx-burst" ? cfg.rx_burst : cfg.tx_burst) = *n;
    } else if (opt == "--tx-in-place") {
        const auto n = parse_number<std::uint32_t>(v);
        if (v != "off" && (!n || *n < kMinPlacedBytes || *n > kMaxPlacedBytes))
            return bad(opt, "bytes (256..65535) or off", v);
        cfg.tx_in_place = v == "off" ? 0 : *n;
    } else if (opt == "--tcp-max-conns" || opt == "--tcp-max-per-peer") {
        auto n = parse_number<std::uint32_t>(v);
        if (!n || *n == 0 || *n > kMaxTcpConnections) return bad(opt, "connections (1..65535)", v);
        (opt == "--tcp-max-conns" ? cfg.tcp.max_connections : cfg.tcp.max_per_peer) = *n;
        given.tcp_per_peer |= opt == "--tcp-max-per-peer";
    } else if (opt == "--tcp-rto-min") {
        auto ms = parse_number<std::uint32_t>(v);
        if (!ms || *ms == 0 || *ms > 1000) return bad(opt, "milliseconds (1..1000)", v);
        cfg.tcp.rto_min_ms = *ms;
    } else if (opt == "--tcp-window-rtt") {
        auto us = parse_number<std::uint32_t>(v);
        if (!us || *us == 0 || *us > 100'000) return bad(opt, "microseconds (1..100000)", v);
        cfg.tcp.window_rtt_us = *us;
    } else if (opt == "--arp-timeout") {
        auto s = parse_number<std::uint32_t>(v);
        if (!s || *s == 0 || *s > 86400) return bad("--arp-timeout", "seconds (1..86400)", v);
        cfg.arp_timeout_s = *s;
    } else if (opt == "--log-level") {
        return set_log_level(cfg, v);
    } else if (opt == "--selftest") {
        auto spec = parse_selftest(v);
        if (!spec) return spec.error();
        cfg.selftest = std::move(spec.value());
    }
    return Ok{};
}

// The checks across options, and the defaults that depend on what was given.
Status finish(Config& cfg, const Given& given) {
    if (cfg.ports.empty())
        return make_error(EINVAL, "no port configured: give --port <port>,ip=<a.b.c.d/len>");
    if (cfg.selftest && !cfg.selftest->one_port() && cfg.ports.size() < 2)
        return make_error(EINVAL,
                          "--selftest " + cfg.selftest->name + " needs two ports (--port twice)");
    if (!given.ctrl) cfg.ctrl_path = "/run/snic/" + cfg.name + ".sock";
    // A smaller table lowers the per-peer bound with it, unless that was given too.
    if (!given.tcp_per_peer)
        cfg.tcp.max_per_peer = std::min(cfg.tcp.max_per_peer, cfg.tcp.max_connections);
    if (cfg.tcp.max_per_peer > cfg.tcp.max_connections)
        return make_error(EINVAL, "--tcp-max-per-peer " + std::to_string(cfg.tcp.max_per_peer) +
                                      " exceeds --tcp-max-conns " +
                                      std::to_string(cfg.tcp.max_connections));
    return Ok{};
}

}  // namespace

Result<Config> parse_config(std::span<const std::string> args) {
    Config cfg;
    Given given;
    for (std::size_t i = 0; i < args.size(); ++i) {
        std::string_view arg = args[i];
        std::optional<std::string_view> inline_value;
        if (arg.starts_with("--")) {
            if (const auto eq = arg.find('='); eq != std::string_view::npos) {
                inline_value = arg.substr(eq + 1);
                arg = arg.substr(0, eq);
            }
        }
        if (one_of(kFlags, arg)) {
            if (inline_value)
                return make_error(EINVAL, std::string(arg) + " takes no value (see snicd --help)");
            set_flag(cfg, arg);
            continue;
        }
        if (!one_of(kValued, arg))
            return make_error(EINVAL,
                              "unknown option '" + std::string(args[i]) + "' (see snicd --help)");
        // The value: from "--opt=value" or the next argument.
        if (!inline_value && i + 1 < args.size()) inline_value = std::string_view(args[++i]);
        if (!inline_value)
            return make_error(EINVAL, std::string(arg) + ": missing value (see snicd --help)");
        if (auto st = set_option(cfg, arg, *inline_value, given); !st) return st.error();
    }
    if (cfg.help || cfg.version) return cfg;
    if (auto st = finish(cfg, given); !st) return st.error();
    return cfg;
}

std::string usage() {
    return R"(usage: snicd [EAL options] -- [snicd options]

Runs the snic soft RDMA NIC on DPDK ports. EAL options are DPDK's (for example
-l 0 --no-pci --vdev=net_af_packet0,iface=veth0 --no-huge -m 512). Unless
--file-prefix or --in-memory is among them, snicd adds --file-prefix snic-<name>.

snicd options:
  -n, --name NAME        daemon name (default snic): control socket and device names
  --port SPEC            configure a port; SPEC = <port>,ip=<a.b.c.d/len>[,mac=<mac>][,mtu=<68..9000>]
                         or iface=IF,shared[,fallback=<a.b.c.d/len>]: the kernel interface IF
                         through AF_XDP, with IF's address, prefix and MTU (followed as they
                         change), beside the kernel's own traffic; where the kernel makes no
                         XDP sockets the port runs on IF with the fallback address of its own
                         (net_af_packet), or snicd stops without one
                         [,loss=F][,dup=F][,reorder=F][,corrupt=F][,seed=N][,delay=US]
                         [,offloads=on|off][,queues=N]
                         <port> is a DPDK port id or device name (net_af_packet0, wire0, ...);
                         loss/dup/reorder/corrupt inject faults into that fraction F (0.01 or 1%)
                         of the frames in both directions (rx-loss=, tx-dup=, ... for one),
                         from a generator seeded with N (default 1) so that runs repeat;
                         delay holds each received frame US us (1..100000) before it is read:
                         every round trip through the port is that much longer;
                         offloads=off computes every checksum in software even where the device
                         offers to (default on: IPv4 and TCP checksums on transmit, the device's
                         checksum verdict on receive, where it offers them);
                         queues=N (1..8) gives the port N receive and transmit queues, each
                         polled by an lcore of its own where -l gives N; a RoCE device's
                         clients are spread over them, and frames reach the queue of their QP
  --wire                 add the in-process virtual wire: ports wire0 and wire1 joined back to back
  --no-xdp               use no XDP socket: shared ports run as on a kernel without them
  --ctrl PATH            control socket (default /run/snic/NAME.sock)
  --ctrl-mode MODE       octal permissions of the control socket (default 0660)
  --dev-dir DIR          where the device nodes verbs consumers look for go (default
                         /dev/infiniband): DIR/snic-<device>, character devices with /dev/null's
                         numbers and --ctrl-mode's permissions, removed at stop
  --no-dev-nodes         make no device nodes
  --idle-backoff USEC    an idle data lcore sleeps up to USEC us per empty poll (0: busy poll, default)
  --arp-timeout SEC      lifetime of ARP cache entries (default 60)
  --tcp-max-conns N      connections of snic's TCP (iWARP's) per port (per lane of a port of
                         queues=N) at once, in any state
                         (1..65535, default 4096); each holds up to about 530 KiB as it is used
                         (its send buffer and iWARP's receive buffers, at 10 Gb/s and the
                         default --tcp-window-rtt). An rdma_connect past it
                         fails with ENOBUFS, a SYN past it is dropped (counted: syn_table_full)
  --tcp-max-per-peer N   of those, connections with one remote address at once (1..65535,
                         default 2048, at most --tcp-max-conns): ENOBUFS or dropped past it
                         (syn_peer_limit)
  --tcp-rto-min MS       the least retransmission timeout of snic's TCP (1..1000, default 200 as
                         on Linux). On a LAN of microsecond round trips a few ms lets a tail
                         whose probe was lost too wait that long rather than 200 ms; a peer that
                         delays its ACK longer than it draws spurious timeouts, which D-SACKs undo
  --tcp-window-rtt USEC  the longest round trip snic's TCP fills at a port's link speed (1..100000,
                         default 100): each connection's send buffer and receive window are twice
                         that bandwidth-delay product (128 KiB..16 MiB; 256 KiB at 10 Gb/s)
  --rx-burst N           frames a port takes per rx poll, at most (1..128, default 32)
  --tx-burst N           frames a port gathers before it transmits them (1..128, default 32);
                         whatever a turn of the lcore sent goes out at its end in any case
  --tx-in-place B|off    a RoCE packet's payload of at least B bytes in one piece of registered
                         memory is sent from there, not copied (DPDK external buffers), on ports
                         that take chained mbufs and do not DMA (virtual devices); its WR
                         completes once the port has let the memory go (default 4096)
  --log-level LEVEL      trace, debug, info, warn, error, critical or off (default info)
  --selftest SPEC        run a self-test from the first port to the second, print one line, exit:
                         arp-ping[,count=N]: resolve the second port's IP and ping it N times (10)
                         raw-ping[,size=B][,count=N][,warmup=N][,json][,samples=FILE]: N round trips
                           (1000) of a B-byte message (8) as ICMP echoes, one frame per MTU: the
                           floor under RDMA latency; samples= writes each round trip (us) to FILE
                         raw-bw[,size=B][,count=N][,json]: stream N messages (10000) of B bytes
                           (65536) as UDP frames and report what arrived: the floor under bandwidth
                         tcp-send,dst=IP:PORT[,bytes=N][,record=B][,json]: snic's TCP on the first
                           port connects to IP:PORT, sends N bytes (64 MiB) in B-byte records,
                           half-closes and checks the peer's answer "<bytes> <crc32 hex>\n"
                         tcp-sink,port=P[,count=N][,json]: listens on P, takes N connections (1):
                           reads each to its FIN, answers "<bytes> <crc32 hex>\n" and closes
  -h, --help             this text
  -V, --version          the version
)";
}

}  // namespace snic::daemon
