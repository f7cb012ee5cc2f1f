"""snic-perf, the bundled perf tool, against one snicd's virtual wire: every test in
--loopback (one process, one thread, the two ports' devices) and the server/client form,
with statistics in order and the JSON parseable; bad flags are usage errors. The same over
the ports' iWARP devices, connected through rdma_cm (-R), in --loopback and between two
processes, figures printed. The tool checks the bytes that arrived itself (exit 1
otherwise). Nothing asserts on time."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess

import pytest

import snictest as st

PERF = st.BUILD / "tools" / "perf" / "snic-perf"
LAT = ("send_lat", "write_lat", "read_lat", "atomic_lat")
BW = ("send_bw", "write_bw", "read_bw")


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args):
    if not os.access(PERF, os.X_OK):
        pytest.fail(f"{PERF} is not built (ninja -C {st.BUILD})")
    with st.wire_daemon(tmp_path_factory, mem_args, "perf", "198.18.49", ",mtu=9000") as wire:
        yield wire


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(sock_dir) -> dict:
    e = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    e.pop("LD_PRELOAD", None)
    return e


def perf(wire, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    d, sock_dir = wire
    return subprocess.run([str(PERF), *args], env=env(sock_dir), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def ok(res: subprocess.CompletedProcess) -> str:
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def transport_counters(daemon: st.Daemon) -> dict[str, int]:
    """The RoCEv2 transports' counters snicd printed when it stopped, summed over its ports."""
    total: dict[str, int] = {}
    for line in daemon.stdout().splitlines():
        if re.match(r"snicd: port \d+ roce:", line):
            for name, value in re.findall(r"(\w+)=(\d+)", line):
                total[name] = total.get(name, 0) + int(value)
    return total


def test_idle_qps_are_not_polled_and_a_ping_pong_rings_no_doorbell(tmp_path_factory, mem_args):
    """1,000 established RC QPs that carry nothing beside a ping-pong: the lcore polls the
    engines of the QPs with work only (without that, every turn would poll all 1,002), the
    idle ones went to sleep, and the busy ones needed (almost) no doorbell."""
    iters = 5000
    with st.wire_daemon(tmp_path_factory, mem_args, "idle", "198.18.59", ",mtu=9000") as (d, sock):
        res = subprocess.run([str(PERF), "send_lat", "--loopback", "-d", f"{d.name}_0",
                              "--peer-device", f"{d.name}_1", "-s", "8", "-n", str(iters),
                              "--idle-qps", "1000", "--json"],
                             env=env(sock), capture_output=True, text=True, timeout=300,
                             stdin=subprocess.DEVNULL)
        r = json.loads(ok(res).splitlines()[-1])
        assert r["idle_qps"] == 1000
        d.stop()
        c = transport_counters(d)
    assert c.get("sleeps", 0) >= 1000, c
    assert 0 < c["engine_polls"] < 4 * c["turns"], c
    # A ping-pong keeps its QPs awake: doorbells only when the client was held up for the
    # grace period (a loaded machine), never once per message.
    assert c.get("doorbells", 0) < iters // 10, c
    assert c.get("doorbells_stray", 0) == 0, c


@pytest.mark.parametrize("burst", ["1", "128"])
def test_every_transfer_completes_at_the_burst_size_limits(tmp_path_factory, mem_args, burst):
    """--rx-burst and --tx-burst at their bounds: one frame per rx poll and a tx flush per
    frame, or bursts past the wire ring's batch. Every test's bytes still arrive (snic-perf
    checks them), and the ports moved the frames."""
    with st.wire_daemon(tmp_path_factory, mem_args, f"burst{burst}", "198.18.57", ",mtu=9000",
                        args=("--rx-burst", burst, "--tx-burst", burst)) as (d, sock):
        for test, size in (("send_lat", "8"), ("write_bw", "64"), ("write_bw", "65536"),
                           ("read_bw", "5000")):
            res = subprocess.run([str(PERF), test, "--loopback", "-d", f"{d.name}_0",
                                  "--peer-device", f"{d.name}_1", "-s", size, "-n", "2000",
                                  "--json"],
                                 env=env(sock), capture_output=True, text=True, timeout=300,
                                 stdin=subprocess.DEVNULL)
            r = json.loads(ok(res).splitlines()[-1])
            assert r["iterations"] == 2000, r
        d.stop()
        c = transport_counters(d)
    assert c["tx_packets"] > 4 * 2000 and c["rx_packets"] > 4 * 2000, c


def check_rtt(r: dict) -> None:
    t = r["rtt_us"]
    assert 0 < t["min"] <= t["median"] <= t["p99"] <= t["p999"] <= t["max"], r
    assert t["min"] <= t["mean"] <= t["max"], r
    assert sum(b["count"] for b in r["histogram"]) == r["iterations"], r


def test_send_lat_loopback_all_sizes(wire):
    d, _ = wire
    out = ok(perf(wire, "send_lat", "--loopback", "-a", "-n", "20", "-w", "2", "-d", f"{d.name}_0"))
    rows = re.findall(r"^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$",
                      out, re.M)
    assert [int(r[0]) for r in rows] == [2 ** k for k in range(1, 24)], out
    for r in rows:
        mn, med, avg, p99, p999, mx = map(float, r[2:])
        assert int(r[1]) == 20
        assert mn <= med <= p99 <= p999 <= mx and mn <= avg <= mx, r
    assert "round trips" in out


def test_one_size_prints_a_histogram_and_the_peer_is_the_daemons_other_port(wire):
    d, _ = wire
    out = ok(perf(wire, "read_lat", "--loopback", "-d", f"{d.name}_1", "-n", "100"))
    assert f"{d.name}_1 <-> {d.name}_0" in out, out
    assert "ROUND TRIPS" in out, out
    buckets = re.findall(r"^ +\[ *([\d.]+), *([\d.]+)\) us +(\d+)", out, re.M)
    assert buckets and sum(int(b[2]) for b in buckets) == 100, out


@pytest.mark.parametrize("test", LAT + BW)
def test_every_test_in_loopback_gives_json(wire, test, tmp_path):
    args = [test, "--loopback", "-n", "200", "--json"]
    if test != "atomic_lat":
        args += ["-s", "5000"]  # more than one 4096-byte packet
    samples = tmp_path / "s.txt"
    if test in LAT:
        args += ["--samples", str(samples)]
    lines = ok(perf(wire, *args)).splitlines()
    assert len(lines) == 1, lines
    r = json.loads(lines[0])
    assert r["test"] == test and r["iterations"] == 200
    if test in LAT:
        check_rtt(r)
        assert len(samples.read_text().split()) == 200
    else:
        assert r["seconds"] > 0 and r["msg_rate_mpps"] > 0 and r["bw_gbps"] > 0
        assert r["bw_gbps"] == pytest.approx(r["msg_rate_mpps"] * 1e6 * 5000 * 8 / 1e9, rel=0.01)


@pytest.mark.parametrize("test", BW)
@pytest.mark.parametrize("qps,depth,iters,warmup", [(4, 16, 400, 0), (3, 13, 101, 7), (2, 1, 33, 0)])
def test_bandwidth_over_several_qps(wire, test, qps, depth, iters, warmup):
    """Round robin over the QPs with -t in flight on each; message counts that do not divide
    among the QPs and depths that are not a multiple of the signaling interval must still
    retire every WR (each QP's last WR is signaled)."""
    r = json.loads(ok(perf(wire, test, "--loopback", "-q", str(qps), "-t", str(depth), "-s", "3000",
                           "-n", str(iters), "-w", str(warmup), "--json")))
    assert r["qps"] == qps and r["tx_depth"] == depth and r["iterations"] == iters


@pytest.mark.parametrize("inline", ["0", "64", "220"])
def test_inline_sizes(wire, inline):
    """-I: SEND and WRITE at or under the size go inline, larger ones through the SGE."""
    for test in ("send_lat", "write_lat"):
        out = ok(perf(wire, test, "--loopback", "-I", inline, "-s", "100", "-n", "50"))
        assert f"inline up to {inline} B" in out, out
    out = ok(perf(wire, "send_bw", "--loopback", "-I", inline, "-s", "200", "-n", "500"))
    assert f"inline up to {inline} B" in out, out


def test_inline_size_above_the_device_limit_is_refused(wire):
    res = perf(wire, "send_lat", "--loopback", "-I", "4096", "-n", "5")
    assert res.returncode == 1 and "ibv_create_qp" in res.stderr, res


def server_and_client(wire, server_args: list[str], client_args: list[str]):
    """Runs a server on NAME_0 and a client on NAME_1 (it retries its connect while the
    server comes up); returns both CompletedProcess-like (returncode, stdout, stderr)."""
    d, sock_dir = wire
    port = str(free_tcp_port())
    server = subprocess.Popen([str(PERF), *server_args, "-p", port, "-d", f"{d.name}_0"],
                              env=env(sock_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, stdin=subprocess.DEVNULL)
    try:
        client = perf(wire, *client_args, "-p", port, "-d", f"{d.name}_1", "127.0.0.1")
        sout, serr = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return subprocess.CompletedProcess(server.args, server.returncode, sout, serr), client


@pytest.mark.parametrize("test,extra", [
    ("send_lat", ["-s", "64"]), ("write_lat", ["-s", "5000"]), ("read_lat", ["-s", "4096"]),
    ("atomic_lat", []), ("send_bw", ["-s", "1000", "-q", "2"]), ("write_bw", ["-s", "65536"]),
    ("read_bw", ["-s", "5000", "-t", "7"]),
])
def test_server_and_client_processes(wire, test, extra):
    common = [test, "-n", "50", "--json", *extra]
    server, client = server_and_client(wire, common, common)
    r = json.loads(ok(client).splitlines()[-1])
    assert server.returncode == 0, server.stderr
    assert server.stdout == "", "the server prints nothing; the client reports"
    assert r["test"] == test and r["iterations"] == 50
    if "rtt_us" in r:
        check_rtt(r)


def test_server_and_client_agree_on_the_smaller_mtu(wire):
    server, client = server_and_client(wire, ["write_lat", "-m", "512", "-s", "3000", "-n", "20"],
                                       ["write_lat", "-s", "3000", "-n", "20", "--json"])
    assert server.returncode == 0, server.stderr
    assert json.loads(ok(client))["path_mtu"] == 512


def test_server_and_client_with_different_runs_refuse(wire):
    server, client = server_and_client(wire, ["send_lat", "-n", "100"], ["send_lat", "-n", "200"])
    for res in (server, client):
        assert res.returncode == 1, res
        assert "give both the same options" in res.stderr, res.stderr


def test_rdma_cm_server_and_client(wire):
    """-R: the QPs are created and connected through rdma_cm (libsnic's rdma_* calls); the
    server listens (snicctl cm counts it) before the client starts, both exit 0, the client
    prints its row, and every rdma_cm id is gone afterwards."""
    d, sock_dir = wire

    def cm_states() -> dict[str, int]:
        out = st.run([st.SNICCTL, "-s", d.ctrl, "cm"], check=True).stdout
        return {m[0]: int(m[1]) for m in re.findall(r"^state (\w+) (\d+)$", out, re.M)}

    for test, size, extra in (("send_lat", 64, []), ("write_bw", 65536, ["-q", "2"])):
        common = [test, "-R", "-n", "50", "-s", str(size), *extra, "-p", str(free_tcp_port())]
        server = subprocess.Popen([str(PERF), *common, "-d", f"{d.name}_0"], env=env(sock_dir),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL)
        try:
            st.poll(lambda: server.poll() is not None or cm_states()["listening"] >= 1,
                    f"the {test} -R server to listen")
            assert server.poll() is None, f"the server exited: {server.communicate()}"
            out = ok(perf(wire, *common, "-d", f"{d.name}_1", "127.0.0.1"))
            sout, serr = server.communicate(timeout=120)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        assert server.returncode == 0, serr
        assert "RC via rdma_cm" in out and "RC via rdma_cm" in sout, (out, sout)
        rows = re.findall(r"^ (\d+)\s+(\d+)\s+[\d.]+", out, re.M)
        assert rows == [(str(size), "50")], out
    st.poll(lambda: sum(cm_states().values()) == 0, "every rdma_cm id destroyed")


@pytest.mark.parametrize("args,why", [
    ([], "no test given"),
    (["bogus_lat"], "unknown test"),
    (["send_lat", "-s", "0"], "invalid size"),
    (["send_lat", "-s", "9000000"], "invalid size"),
    (["send_lat", "-n", "ten"], "invalid iterations"),
    (["send_lat", "-a", "-s", "8"], "exclude each other"),
    (["atomic_lat", "-s", "16"], "atomics are 8 bytes"),
    (["send_lat", "--loopback", "10.0.0.1"], "--loopback takes no server"),
    (["send_lat", "-m", "1000"], "MTU"),
    (["send_bw", "--samples", "/tmp/x"], "--samples goes with latency"),
    (["send_lat", "--frobnicate"], "unknown option"),
    (["send_lat", "-s"], "needs a value"),
    (["send_lat", "-q", "0"], "invalid QP count"),
    (["send_bw", "-t", "0"], "invalid tx depth"),
    (["send_lat", "-I", "x"], "invalid inline size"),
    (["send_lat", "--peer-device", "x_1"], "--peer-device goes with --loopback"),
    (["send_lat", "a", "b"], "unexpected argument"),
    (["send_lat", "--listen_ip", "198.18.49.1"], "--listen_ip goes with -R on the server"),
    (["send_lat", "-R", "--listen_ip", "198.18.49.1", "10.0.0.1"], "--listen_ip goes with -R"),
    (["send_lat", "-R", "--source_ip", "198.18.49.1"], "--source_ip goes with -R on the client"),
])
def test_bad_flags_are_usage_errors(wire, args, why):
    res = perf(wire, *args)
    assert res.returncode == 2, res
    assert why in res.stderr and res.stdout == "", res.stderr
    assert res.stderr.count("\n") == 1, "one line"


def test_missing_device_is_a_runtime_error(wire):
    res = perf(wire, "send_lat", "--loopback", "-d", "nosuchdev_0", "-n", "5")
    assert res.returncode == 1 and "no RDMA device nosuchdev_0" in res.stderr, res


IW_SUBNET = "198.18.49"  # the wire fixture's


def iwarp_env(sock_dir, *devices: str) -> dict:
    """An iWARP process's environment: it sees its iWARP devices alone (a port's RoCE and
    iWARP devices share its address, and rdma_cm takes it to the first)."""
    return dict(env(sock_dir), SNIC_DEVICES=",".join(devices))


@pytest.mark.parametrize("test,size", [("send_lat", 8), ("write_lat", 4096), ("read_lat", 65536),
                                       ("atomic_lat", 8), ("send_bw", 65536), ("write_bw", 65536),
                                       ("read_bw", 5000)])
def test_iwarp_loopback_through_rdma_cm(wire, test, size):
    """-R --loopback on the ports' iWARP devices: the peer device listens, -d connects, in one
    thread; the tool checks the bytes. A figure is printed, nothing asserted on time."""
    d, sock_dir = wire
    iw = (f"{d.name}_iw0", f"{d.name}_iw1")
    res = subprocess.run([str(PERF), test, "-R", "--loopback", "-d", iw[0], "--peer-device", iw[1],
                          "--source_ip", f"{IW_SUBNET}.1", "--listen_ip", f"{IW_SUBNET}.2",
                          "-s", str(size), "-n", "200", "--json"],
                         env=iwarp_env(sock_dir, *iw), capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    r = json.loads(ok(res).splitlines()[-1])
    assert r["test"] == test and r["iterations"] == 200, r
    assert res.stderr == "", res.stderr  # every id saw its DISCONNECTED
    if "rtt_us" in r:
        check_rtt(r)
        print(f"iWARP {test} {size} B: round trip median {r['rtt_us']['median']:.1f} us")
    else:
        print(f"iWARP {test} {size} B: {r['bw_gbps']:.2f} Gb/s")


@pytest.mark.parametrize("test,size", [("send_lat", 8), ("write_bw", 65536)])
def test_iwarp_server_and_client_processes(wire, test, size):
    """-R between two processes, each seeing its own iWARP device (the server NAME_iw0, the
    client NAME_iw1; neither could reach the other's address through its own port: snic's TCP
    makes no connection of a port to itself). The server listens before the client starts."""
    d, sock_dir = wire
    common = [test, "-R", "-n", "200", "-s", str(size), "-p", str(free_tcp_port())]
    server = subprocess.Popen([str(PERF), *common, "-d", f"{d.name}_iw0", "--listen_ip",
                               f"{IW_SUBNET}.1"],
                              env=iwarp_env(sock_dir, f"{d.name}_iw0"), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        def listening() -> bool:
            out = st.run([st.SNICCTL, "-s", d.ctrl, "cm"], check=True).stdout
            return re.search(r"^state listening [1-9]", out, re.M) is not None
        st.poll(lambda: server.poll() is not None or listening(), f"the {test} -R server to listen")
        assert server.poll() is None, f"the server exited: {server.communicate()}"
        client = subprocess.run([str(PERF), *common, "-d", f"{d.name}_iw1", "--source_ip",
                                 f"{IW_SUBNET}.2", "127.0.0.1"],
                                env=iwarp_env(sock_dir, f"{d.name}_iw1"), capture_output=True,
                                text=True, timeout=120, stdin=subprocess.DEVNULL)
        sout, serr = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    out = ok(client)
    assert server.returncode == 0, serr
    assert f"{d.name}_iw1" in out and "RC via rdma_cm" in out, out
    rows = re.findall(r"^ (\d+)\s+(\d+)\s+([\d.]+)", out, re.M)
    assert rows and rows[0][:2] == (str(size), "200"), out
    print(f"iWARP {test} {size} B, two processes: {rows[0][2]} ({'round trip us' if 'lat' in test else 'MB/s'})")


def test_iwarp_needs_rdma_cm(wire):
    """An iWARP QP connects through rdma_cm only: without -R the tool says so (it would fail
    at Modify QP to RTR), and so it does for --idle-qps (QPs connected each to itself)."""
    d, sock_dir = wire
    iw = (f"{d.name}_iw0", f"{d.name}_iw1")
    res = subprocess.run([str(PERF), "send_lat", "--loopback", "-d", iw[0], "-n", "5"],
                         env=iwarp_env(sock_dir, *iw), capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 1 and "connect through rdma_cm only" in res.stderr, res
    assert "(add -R)" in res.stderr, res.stderr
    res = subprocess.run([str(PERF), "send_lat", "-R", "--loopback", "-d", iw[0], "--idle-qps", "4",
                          "-n", "5"], env=iwarp_env(sock_dir, *iw), capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert res.returncode == 1 and "--idle-qps" in res.stderr and "iWARP" in res.stderr, res


def test_loopback_peer_is_of_the_same_kind(wire):
    """--loopback without --peer-device picks the daemon's other port of -d's kind: NAME_iw1
    for NAME_iw0 (not NAME_0, which shares NAME_iw0's port and address)."""
    d, sock_dir = wire
    res = subprocess.run([str(PERF), "send_lat", "-R", "--loopback", "-d", f"{d.name}_iw0",
                          "--source_ip", f"{IW_SUBNET}.1", "--listen_ip", f"{IW_SUBNET}.2", "-n",
                          "20"], env=env(sock_dir), capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    # Without SNIC_DEVICES rdma_cm takes the addresses to the RoCE devices: the tool says why.
    assert res.returncode == 1, res
    assert f"not {d.name}_iw1" in res.stderr and "SNIC_DEVICES" in res.stderr, res.stderr
