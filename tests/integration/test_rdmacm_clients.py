"""Real clients of rdma_cm and of librdmacm's rsockets, unmodified, under snic-run between the
two ports of one daemon's virtual wire (SUBNET.1 and SUBNET.2), on its RoCE devices and on
its iWARP devices:

- qperf's rdma_cm tests (-cm1): its server binds the wildcard with port 0 and sends its
  client the port rdma_get_src_port gives right after the bind, so that port must be real
  from the bind on;
- rsockets (librdmacm's rstream, riostream, rcopy, and a socket program under
  librspreload.so), librdmacm's own rsocket code running over libsnic's rdma_cm;
- perftest's UD over iWARP (which has no datagrams): a clean error, then perftest's retry
  with the id it destroyed, which must fail, not crash;
- cmtime with a thousand connections over iWARP, within snicd's --tcp-max-conns, and a
  small --tcp-max-conns or --tcp-max-per-peer, which gives ENOBUFS and says which bound.

Readiness is polled (`snicctl cm`, or the kernel's listening sockets for qperf's own
control connection), never slept for."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path

import pytest

import snictest as st
import test_iwarp as iw
import test_rdmacm as rcm

SUBNET = "198.18.71"
SERVER_IP, CLIENT_IP = f"{SUBNET}.1", f"{SUBNET}.2"
TOOLS = {"qperf": ("qperf",), "rdmacm-utils": ("rstream", "riostream", "rcopy", "cmtime"),
         "perftest": ("ib_send_lat",)}
RSPRELOAD = Path("/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so")
# qperf's result lines: "    latency  =  27.4 us", "    bw  =  1.52 GB/sec"
QPERF_VALUE = re.compile(r"^\s*(latency|bw)\s*=\s*([\d.]+)\s*(\S+)", re.M)

_ports = iter(range(23000, 23600))


def next_port() -> str:
    return str(next(_ports))


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args):
    with rcm.tools_wire(tmp_path_factory, mem_args, TOOLS, "rcl", SUBNET) as w:
        yield w


@pytest.fixture(autouse=True)
def no_ids_left(wire):
    rcm.wait_no_ids(wire[0])


def devices(d: st.Daemon, kind: str) -> str:
    """SNIC_DEVICES for one kind of device of the two ports: "roce" or "iwarp"."""
    return f"{d.name}_0,{d.name}_1" if kind == "roce" else f"{d.name}_iw0,{d.name}_iw1"


def env_of(d: st.Daemon, sock_dir, kind: str, **extra: str) -> dict:
    return rcm.env_for(sock_dir, SNIC_DEVICES=devices(d, kind), **extra)


def crashed(res: subprocess.CompletedProcess) -> bool:
    out = res.stdout + res.stderr
    return res.returncode < 0 or "Segmentation fault" in out or bool(st.sanitizer_findings(out))


def stream_pair(d: st.Daemon, sock_dir, tmp_path: Path, env: dict, tool: str,
                *args: str) -> subprocess.CompletedProcess:
    """rstream or riostream with ARGS: its server on SERVER_IP run to readiness (one more
    listening id), its client from CLIENT_IP to its end, then the server to its own; both
    must exit 0, neither by a crash. Returns the client's result."""
    server = rcm.start_server(d, sock_dir, tmp_path / f"{tool}-server.out", tool, "-b",
                              SERVER_IP, *args, env=env)
    try:
        client = rcm.run_client(sock_dir, tool, "-s", SERVER_IP, "-b", CLIENT_IP, *args, env=env)
        if client.returncode == 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=60)
    finally:
        server.kill()
    assert client.returncode == 0 and not crashed(client), \
        f"{rcm.shown(client)}\nserver:\n{server.describe()}\n{d.describe()}"
    assert server.proc.returncode == 0, f"{server.describe()}\nclient:\n{rcm.shown(client)}"
    assert d.running(), d.describe()
    return client


# ------------------------------------------------------------------------------ qperf

def lost_qperf_race(client: subprocess.CompletedProcess, refused_before: int,
                    d: st.Daemon) -> bool:
    """qperf 0.4.11 (Debian 12's) has its server send its rdma_cm port to the client before its
    rdma_listen (fixed upstream after that release, "Fix rdmacm race"): a client that connects
    first is refused, as it would be by any RDMA stack (REJ 8 here, as Linux's cm.c sends; a
    RST on iWARP). Both signs: the client's complaint, and the daemon counting a request that
    nobody listened for."""
    rejected = "unexpected event from RDMA CM: Event rejected" in client.stdout
    return rejected and iw.refusals(d) > refused_before


@pytest.mark.parametrize("kind", ["roce", "iwarp"])
def test_qperf_over_rdma_cm(wire, tmp_path, kind):
    """qperf -cm1 rc_lat rc_bw. Its control connection is the kernel's TCP to 127.0.0.1; the
    RDMA connection goes to the same address, which rdma_cm puts on the first snic port (a
    connection of the port to itself), to the port the server's bind gave. qperf's own race
    (lost_qperf_race) is run again, at most twice; any other failure fails at once."""
    d, sock_dir = wire
    env = env_of(d, sock_dir, kind)
    for attempt in range(3):
        refused = iw.refusals(d)
        ctrl_port = st.free_tcp_port()
        server = rcm.Background(sock_dir, tmp_path / f"qperf-server-{attempt}.out", "qperf",
                                "-lp", str(ctrl_port), env=env)
        try:
            st.poll(lambda: server.proc.poll() is not None or st.listening(ctrl_port),
                    "qperf's server listening")
            assert server.proc.poll() is None, server.describe()
            # One second each (qperf's latency tests end on their timer, not on -n).
            client = rcm.run_client(sock_dir, "qperf", "127.0.0.1", "-lp", str(ctrl_port),
                                    "-cm1", "-t", "1", "rc_lat", "rc_bw", env=env)
        finally:
            server.kill()
        if client.returncode == 0 or not lost_qperf_race(client, refused, d):
            break
        print(f"qperf: attempt {attempt + 1} lost qperf's race to its server's rdma_listen")
        rcm.wait_no_ids(d)
    assert client.returncode == 0, \
        f"{rcm.shown(client)}\nserver:\n{server.describe()}\n{rcm.cm_status(d)['text']}"
    values = dict((k, (float(v), u)) for k, v, u in QPERF_VALUE.findall(client.stdout))
    assert set(values) == {"latency", "bw"}, rcm.shown(client)
    assert all(v > 0 for v, _ in values.values()), rcm.shown(client)
    print(f"qperf -cm1 over {kind}: rc_lat {values['latency']}, rc_bw {values['bw']}")
    assert d.running(), d.describe()


# ---------------------------------------------------------------------------- rsockets

@pytest.mark.parametrize("kind,mode", [("roce", "b"), ("iwarp", "n")])
def test_rstream_moves_verified_data(wire, tmp_path, kind, mode):
    """rstream's blocking (b) and nonblocking (n) calls, each side checking every byte it
    receives (v): 100 transfers of 64 KiB each way; rsockets on RoCE write with immediate
    data, on iWARP they send. (Its poll-driven mode, a, fails by itself when the peer's close
    arrives with the last data: its poll then reports POLLIN with POLLHUP, which it takes for
    an error.)"""
    d, sock_dir = wire
    client = stream_pair(d, sock_dir, tmp_path, env_of(d, sock_dir, kind), "rstream", "-p",
                         next_port(), "-S", "65536", "-C", "100", "-T", mode, "-T", "v")
    assert re.search(r"^custom\s+64k\s+100\s", client.stdout, re.M), rcm.shown(client)


@pytest.mark.parametrize("kind", ["roce", "iwarp"])
def test_riostream_writes_through_its_mapping(wire, tmp_path, kind):
    """riostream: the data goes by riowrite into the peer's riomap'ed buffer, verified."""
    d, sock_dir = wire
    stream_pair(d, sock_dir, tmp_path, env_of(d, sock_dir, kind), "riostream", "-p", next_port(),
                "-S", "65536", "-C", "100", "-T", "v")


def test_rcopy_copies_a_file(wire, tmp_path):
    """rcopy's server (it runs until stopped) takes a 3 MiB file of random bytes from its
    client; the copy equals the original."""
    d, sock_dir = wire
    src = tmp_path / "original"
    dst = tmp_path / "copy"
    src.write_bytes(os.urandom(3 << 20))
    port = next_port()
    env = env_of(d, sock_dir, "roce")
    server = rcm.start_server(d, sock_dir, tmp_path / "rcopy-server.out", "rcopy", "-p", port,
                              env=env)
    try:
        client = rcm.run_client(sock_dir, "rcopy", str(src), f"{SERVER_IP}:{dst}", "-p", port,
                                env=env)
    finally:
        server.kill()
    assert client.returncode == 0 and not crashed(client), \
        f"{rcm.shown(client)}\nserver:\n{server.describe()}"
    assert dst.exists(), server.describe()
    assert subprocess.run(["cmp", str(src), str(dst)]).returncode == 0
    assert d.running(), d.describe()


def test_a_socket_program_runs_on_rsockets_under_librspreload(wire, tmp_path):
    """rstream with the kernel's sockets (-T s), its socket calls turned into rsockets by
    librspreload.so. The addresses are snic's alone, so it runs only if the rsockets do (a
    kernel socket could not bind them); the daemon counts the connection request."""
    d, sock_dir = wire
    assert RSPRELOAD.exists(), f"{RSPRELOAD} is missing (rdmacm-utils' librdmacm1 ships it)"
    before = rcm.cm_status(d)["connect_requests"]
    env = env_of(d, sock_dir, "roce")
    env["LD_PRELOAD"] = str(RSPRELOAD)  # snic-run puts libsnic before it
    stream_pair(d, sock_dir, tmp_path, env, "rstream", "-p", next_port(), "-S", "4096", "-C",
                "100", "-T", "s", "-T", "v")
    assert rcm.cm_status(d)["connect_requests"] > before


def test_datagram_rsockets_are_refused_at_once(wire):
    """rsockets' datagram sockets size their queues from the kernel's RDMA devices: refused
    with EOPNOTSUPP and a line that says so, not run on sizes of zero."""
    d, sock_dir = wire
    # rsocket as a program linked with librdmacm finds it: the first in the process's scope
    # (libsnic's, preloaded), not the one inside librdmacm.
    prog = ("import ctypes, socket; "
            "ctypes.CDLL('librdmacm.so.1', mode=ctypes.RTLD_GLOBAL); "
            "rsocket = ctypes.CDLL(None, use_errno=True).rsocket; "
            "r = rsocket(socket.AF_INET, socket.SOCK_DGRAM, 0); "
            "print(r, ctypes.get_errno())")
    res = rcm.run_client(sock_dir, "python3", "-c", prog, env=env_of(d, sock_dir, "roce"),
                         timeout=60)
    assert res.returncode == 0, rcm.shown(res)
    assert res.stdout.split() == ["-1", str(95)], rcm.shown(res)  # EOPNOTSUPP
    assert "datagram rsockets do not run over snic" in res.stderr, rcm.shown(res)


# -------------------------------------------------------------------------- perftest

def test_perftest_ud_over_iwarp_fails_cleanly(wire, tmp_path):
    """iWARP has no datagrams: perftest -R -c UD gets an error from rdma_cm, retries with the
    id it destroyed, and that call fails too (EINVAL) instead of reading freed memory. The
    client exits with its error, not by a signal; the server, which waits for a client that
    never connects, is stopped."""
    d, sock_dir = wire
    port = next_port()
    common = ["ib_send_lat", "-R", "-c", "UD", "-p", port, "-n", "10"]
    server = rcm.Background(sock_dir, tmp_path / "ud-server.out", *common, "-d", f"{d.name}_iw0",
                            env=env_of(d, sock_dir, "iwarp"))
    try:
        st.poll(lambda: server.proc.poll() is not None or rcm.cm_status(d)["listening"] > 0,
                "ib_send_lat's server listening or gone")
        client = rcm.run_client(sock_dir, *common, "-d", f"{d.name}_iw1", SERVER_IP,
                                env=env_of(d, sock_dir, "iwarp"), timeout=60)
        server_crashed = server.proc.poll() is not None and server.proc.returncode < 0
    finally:
        server.kill()  # it may wait for a client that never comes
    assert client.returncode > 0 and not crashed(client), rcm.shown(client)
    assert not server_crashed, server.describe()
    assert d.running(), d.describe()


# ---------------------------------------------------------------------------- cmtime

def cmtime(d: st.Daemon, sock_dir, tmp_path: Path, count: int,
           subnet: str = SUBNET) -> subprocess.CompletedProcess:
    """cmtime with COUNT connections over the iWARP devices of the wire on SUBNET; returns
    the client's result once the server (which runs until stopped) is stopped."""
    port = next_port()
    env = env_of(d, sock_dir, "iwarp")
    server = rcm.start_server(d, sock_dir, tmp_path / "cmtime-server.out", "cmtime", "-b",
                              f"{subnet}.1", "-p", port, "-c", str(count), env=env)
    try:
        return rcm.run_client(sock_dir, "cmtime", "-s", f"{subnet}.1", "-b", f"{subnet}.2",
                              "-p", port, "-c", str(count), env=env)
    finally:
        server.kill()


def test_cmtime_a_thousand_connections_over_iwarp(wire, tmp_path):
    """cmtime's thousand connections at once, over the TCP of one port to the other (one
    peer). Its server accepts them one by one, so the last MPA replies come seconds after
    their requests. A sanitized build makes 200: past the old bounds all the same, in a
    fraction of the time."""
    d, sock_dir = wire
    client = cmtime(d, sock_dir, tmp_path, 200 if st.SANITIZED else 1000)
    assert client.returncode == 0, f"{rcm.shown(client)}\n{d.describe()}"
    assert not rcm.cmtime_failures(client.stdout + client.stderr), rcm.shown(client)
    table = rcm.cmtime_table(client.stdout)
    assert all(step in table for step in rcm.CMTIME_STEPS), rcm.shown(client)
    print(f"\ncmtime over iWARP: connect {table['connect'][0]:.0f} ms, "
          f"disconnect {table['disconnect'][0]:.0f} ms")
    assert d.running(), d.describe()


def test_a_full_tcp_table_refuses_with_enobufs_and_names_its_bound(tmp_path_factory, mem_args,
                                                                   tmp_path):
    """A daemon whose TCP takes 24 connections per port, 16 of them with one address:
    cmtime's first 16 connections are made, the other 24 fail at rdma_connect with ENOBUFS,
    and snicd's log names the bound and the option that sets it. (Which bound a refusal
    names is unit-tested: TcpStack's bound_for.)"""
    subnet = "198.18.72"
    with st.wire_daemon(tmp_path_factory, mem_args, "rclim", subnet,
                        args=("--tcp-max-conns", "24", "--tcp-max-per-peer", "16")) as (d, sock_dir):
        client = cmtime(d, sock_dir, tmp_path, 40, subnet)
        failures = rcm.cmtime_failures(client.stdout + client.stderr)
        refused = [f for f in failures if "No buffer space available" in f]
        assert len(refused) == 24 and refused == failures, rcm.shown(client)
        assert not crashed(client), rcm.shown(client)
        log = d.stderr() + d.stdout()
        assert re.search(r"holds 16 connections with that address, snicd's --tcp-max-per-peer",
                         log), d.describe()
        assert d.running(), d.describe()
