"""What scripts/bench.sh compares snic with.

The floor: snicd's raw-ping and raw-bw self-tests over the virtual wire, at the default MTU
(1500) and at 9000. They complete, report ordered statistics and nonzero rates, and refuse
bad specs as usage errors.

The architectural floor: snic-cacheline-pingpong, one cache line between two cores. It
completes with a few round trips, reports ordered statistics, and refuses bad flags.

The alternatives: snic-kping, kernel TCP and UDP ping-pong over the veth pair of
scripts/kping-net.sh. It completes at 8 B and 64 KiB (UDP: one 60000-byte datagram),
reports ordered statistics, and refuses bad flags. The namespaces are removed also when a
test fails.

Nothing here asserts on time, and nothing sleeps to wait: readiness is polled."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import snictest as st

KPING = st.BUILD / "tools" / "kping" / "snic-kping"
PINGPONG = st.BUILD / "tools" / "perf" / "snic-cacheline-pingpong"
KPING_NET = st.REPO / "scripts" / "kping-net.sh"


def wire(mtu: int) -> list[str]:
    return ["--wire", "--port", f"wire0,ip=198.18.48.1/24,mtu={mtu}",
            "--port", f"wire1,ip=198.18.48.2/24,mtu={mtu}"]


def selftest(daemons, mem_args, spec: str, mtu: int = 9000):
    d = daemons(st.unique("floor", maxlen=24), ["-l", "0", "--no-pci", *mem_args],
                [*wire(mtu), "--selftest", spec])
    rc = d.wait(timeout=120)
    return d, rc


def frames(size: int, per_frame: int) -> int:
    return -(-size // per_frame)


def check_rtt(r: dict) -> None:
    t = r["rtt_us"]
    assert 0 < t["min"] <= t["median"] <= t["p99"] <= t["p999"] <= t["max"], r
    assert t["min"] <= t["mean"] <= t["max"], r


# ---------------------------------------------------------------- the floor

@pytest.mark.parametrize("mtu,size", [(1500, 8), (1500, 64), (1500, 4096), (1500, 65536),
                                      (9000, 8), (9000, 65536), (9000, 100000)])
def test_raw_ping_reports_ordered_round_trips(daemons, mem_args, tmp_path, mtu, size):
    samples = tmp_path / "samples.txt"
    d, rc = selftest(daemons, mem_args,
                     f"raw-ping,size={size},count=300,warmup=10,json,samples={samples}", mtu)
    assert rc == 0, d.describe()
    r = json.loads(d.stdout().strip().splitlines()[-1])
    assert (r["test"], r["size"], r["count"], r["lost"]) == ("raw-ping", size, 300, 0), r
    assert r["frames"] == frames(size, mtu - 20 - 8), r  # IPv4 and ICMP echo headers
    check_rtt(r)
    values = [float(x) for x in samples.read_text().split()]
    assert len(values) == 300 and min(values) == pytest.approx(r["rtt_us"]["min"], abs=0.001)


def test_raw_ping_text_line(daemons, mem_args):
    d, rc = selftest(daemons, mem_args, "raw-ping,count=50")
    assert rc == 0, d.describe()
    line = next(ln for ln in d.stdout().splitlines() if ln.startswith("selftest raw-ping:"))
    assert line.startswith("selftest raw-ping: 198.18.48.2 size 8 B (1 frame) ; 50/50 round trips, "
                           "rtt min/median/mean/p99/p99.9/max = "), d.describe()
    figures = [float(x) for x in line.split("= ")[1].split()[0].split("/")]
    assert len(figures) == 6 and figures[0] <= figures[1] <= figures[3] <= figures[4] <= figures[5]


def test_arp_ping_line_is_unchanged(daemons, mem_args):
    d, rc = selftest(daemons, mem_args, "arp-ping,count=5", 1500)
    assert rc == 0, d.describe()
    assert "selftest arp-ping: 198.18.48.2 is at " in d.stdout(), d.describe()
    assert " ; 5/5 echo replies, rtt min/avg/max/p99 = " in d.stdout(), d.describe()


@pytest.mark.parametrize("mtu,size", [(1500, 64), (1500, 65536), (9000, 64), (9000, 65536)])
def test_raw_bw_delivers_every_frame(daemons, mem_args, mtu, size):
    d, rc = selftest(daemons, mem_args, f"raw-bw,size={size},count=2000,json", mtu)
    assert rc == 0, d.describe()
    r = json.loads(d.stdout().strip().splitlines()[-1])
    assert (r["test"], r["size"], r["messages"]) == ("raw-bw", size, 2000), r
    assert r["frames"] == 2000 * frames(size, mtu - 20 - 8), r  # IPv4 and UDP headers
    assert r["seconds"] > 0 and r["msg_rate_mpps"] > 0 and r["bw_gbps"] > 0, r
    assert r["bw_gbps"] == pytest.approx(r["msg_rate_mpps"] * 1e6 * size * 8 / 1e9, rel=0.01)


def test_raw_bw_text_line(daemons, mem_args):
    d, rc = selftest(daemons, mem_args, "raw-bw,size=4096,count=500", 1500)
    assert rc == 0, d.describe()
    assert "selftest raw-bw: 198.18.48.2 size 4096 B ; 500 messages (1500 frames) in " in d.stdout(), \
        d.describe()


@pytest.mark.parametrize("spec", ["raw-ping,size=0", "raw-ping,size=8388609", "raw-bw,size=0",
                                  "raw-bw,count=0", "raw-ping,count=0", "raw-ping,bogus=1",
                                  "raw-bw,warmup=3", "raw-ping,json=1", "raw-pong"])
def test_bad_selftest_specs_are_usage_errors(daemons, mem_args, spec):
    d, rc = selftest(daemons, mem_args, spec)
    assert rc == 2, d.describe()
    err = d.stderr().strip().splitlines()
    assert len(err) == 1 and "--selftest" in err[0], d.describe()


# ---------------------------------------------------------------- the architectural floor

def pingpong(*args) -> subprocess.CompletedProcess:
    if not os.access(PINGPONG, os.X_OK):
        pytest.fail(f"{PINGPONG} is not built "
                    f"(ninja -C {st.BUILD} tools/perf/snic-cacheline-pingpong)")
    return st.run([PINGPONG, *args], timeout=60)


def two_cpus() -> tuple[int, int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: no second core for the cache line to cross to")
    return cpus[1], cpus[0]  # as the benchmark: the client's core, then the daemon's


def check_rtt_ns(r: dict) -> None:
    t = r["rtt_ns"]
    assert 0 < t["min"] <= t["median"] <= t["p99"] <= t["p999"] <= t["max"], r
    assert t["min"] <= t["mean"] <= t["max"], r


def test_cacheline_pingpong_reports_ordered_round_trips():
    a, b = two_cpus()
    res = pingpong("--cpus", f"{a},{b}", "--iters", "2000", "--warmup", "100", "--json")
    assert res.returncode == 0, res
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    r = json.loads(lines[0])
    assert (r["test"], r["cpus"], r["iterations"]) == ("cacheline-pingpong", [a, b], 2000), r
    assert r["clock"] in ("tsc", "steady"), r
    check_rtt_ns(r)


def test_cacheline_pingpong_text_line():
    a, b = two_cpus()
    res = pingpong("-c", f"{a},{b}", "-n", "500")
    assert res.returncode == 0, res
    prefix = (f"snic-cacheline-pingpong cpus {a},{b} ; 500 round trips, "
              "rtt min/median/mean/p99/p99.9/max = ")
    assert res.stdout.startswith(prefix) and res.stdout.rstrip().endswith(" ns"), res.stdout
    figures = [float(x) for x in res.stdout[len(prefix):].split()[0].split("/")]
    low, median, _mean, p99, p999, high = figures
    assert 0 < low <= median <= p99 <= p999 <= high, res.stdout


@pytest.mark.parametrize("args,why", [
    (["--bogus"], "unknown option --bogus"),
    (["--iters", "0"], "invalid iterations"),
    (["--iters"], "needs a value"),
    (["--warmup", "-1"], "invalid warm-up"),
    (["--cpus", "0"], "two CPUs"),
    (["--cpus", "1,1"], "two different CPUs"),
    (["--cpus", "0,x"], "invalid cpu"),
    (["stray"], "unexpected argument"),
])
def test_cacheline_pingpong_bad_flags_are_usage_errors(args, why):
    res = pingpong(*args)
    assert res.returncode == 2 and why in res.stderr, res
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == "", res


def test_cacheline_pingpong_on_a_cpu_it_cannot_have_is_a_runtime_error():
    allowed = os.sched_getaffinity(0)
    cpu = max(allowed) + 1  # outside the allowed set
    res = pingpong("--cpus", f"{min(allowed)},{cpu}", "-n", "10")
    assert res.returncode == 1 and f"cpu {cpu}" in res.stderr, res


# ---------------------------------------------------------------- the alternatives

@pytest.fixture(scope="module")
def kping_net():
    """The two namespaces of scripts/kping-net.sh, removed at the end whatever happens."""
    if not os.access(KPING, os.X_OK):
        pytest.fail(f"{KPING} is not built (ninja -C {st.BUILD} tools/kping/snic-kping)")
    try:
        st.run([KPING_NET, "up"], timeout=120, check=True)
        yield
    finally:
        st.run([KPING_NET, "down"], timeout=60)
        assert not st.netns_exists("snic-kping-a") and not st.netns_exists("snic-kping-b")


def bound(proto: str, port: int) -> bool:
    flag = "-Hltn" if proto == "tcp" else "-Hlun"
    out = st.run(["ip", "netns", "exec", "snic-kping-b", "ss", flag, f"sport = :{port}"]).stdout
    return bool(out.strip())


@pytest.mark.parametrize("proto,size", [("tcp", 8), ("tcp", 65536), ("udp", 8), ("udp", 60000)])
def test_kping_over_veth(kping_net, proto, size):
    port = 19200 + size % 97 + (proto == "udp")
    server = subprocess.Popen(["ip", "netns", "exec", "snic-kping-b", str(KPING), "server",
                               f"--{proto}", "-p", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        st.poll(lambda: bound(proto, port) or server.poll() is not None, "snic-kping server")
        assert server.poll() is None, server.communicate()
        res = st.run(["ip", "netns", "exec", "snic-kping-a", KPING, "client", f"--{proto}",
                      "-p", port, "-s", size, "-n", 300, "-w", 10, "--json", "198.18.7.2"],
                     timeout=120)
        assert res.returncode == 0, res.stderr
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
        out, err = server.communicate()
    assert server.returncode == 0, err
    r = json.loads(res.stdout)
    assert (r["test"], r["size"], r["iterations"]) == (f"kernel-{proto}", size, 300), r
    check_rtt(r)


def test_kping_text_line(kping_net):
    port = 19300
    server = subprocess.Popen(["ip", "netns", "exec", "snic-kping-b", str(KPING), "server",
                               "--tcp", "-p", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        st.poll(lambda: bound("tcp", port) or server.poll() is not None, "snic-kping server")
        res = st.run(["ip", "netns", "exec", "snic-kping-a", KPING, "client", "-p", port,
                      "-s", 1 << 20, "-n", 20, "-w", 2, "198.18.7.2"], timeout=120)
        assert res.returncode == 0, res.stderr
    finally:
        if server.poll() is None:
            server.kill()
        server.communicate()
    # 1 MiB is more than the socket buffers hold: the client reads while it sends.
    assert res.stdout.startswith("snic-kping tcp size 1048576 B ; 20 round trips, "
                                 "rtt min/median/mean/p99/p99.9/max = "), res.stdout


@pytest.mark.parametrize("args,why", [
    (["client", "--udp", "-s", "65508", "198.18.7.2"], "at most 65507 bytes"),
    (["client", "-s", "8"], "needs a HOST"),
    (["client", "198.18.7.2"], "needs -s SIZE"),
    (["client", "-s", "0", "h"], "invalid size"),
    (["client", "-s", "8", "-n", "0", "h"], "invalid iterations"),
    (["client", "-s", "8", "--bogus", "h"], "unknown option"),
    (["sideways"], "unknown mode"),
    (["server", "-p", "99999"], "invalid port"),
])
def test_kping_bad_flags_are_usage_errors(args, why):
    res = st.run([KPING, *args], timeout=30)
    assert res.returncode == 2 and why in res.stderr, res
