"""Shared-address ports: snicd on the host's own interface beside the kernel, as an RNIC is.

Two network namespaces are two hosts, joined by a veth pair; each end has its kernel's
address (198.18.31.1 and .2). Each host runs a snicd with --port iface=END,shared: snicd
drives the end through AF_XDP with its XDP program, which sends it RoCEv2 and its iWARP
ports and leaves everything else to the host's kernel. Each host has its own socket
directory, as /run/snic is a host's. Programs on one host are given the other host's address
and nothing else, as they would be between two machines with RNICs, unmodified under
snic-run:

- rping over RoCEv2 and over iWARP (snic's TCP on the kernel's address: the listener's port
  is refused to the kernel's programs while it listens, and given back after);
- perftest's ib_send_lat without -R (its setup over the kernels' TCP) and with -R (rdma_cm),
  over RoCEv2 and iWARP;
- qperf -cm1 (rc_lat, rc_bw, rc_rdma_read_lat, rc_rdma_write_bw, rc_compare_swap_mr),
  ucx_perftest (tag_lat, tag_bw, ucp_put_bw), libfabric's fi_pingpong (verbs, RDM and MSG);
- Open MPI over UCX, one rank per host, launched as on two machines;
- the kernels' own traffic all along while ibv_rc_pingpong checks every byte of its RDMA:
  ping, and a TCP stream compared byte for byte; the XDP program's counters say what it
  passed to each;
- the ports following their interfaces: a new MTU, host B's new address (and none for a
  while), then rping to B's new address over both devices.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import snictest as st
import test_rdmacm as rcm
from test_mpi import mpi_check, run_job  # noqa: F401  (the fixture, and the job runner)

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SUBNET = "198.18.31"
A_IP, B_IP = f"{SUBNET}.1", f"{SUBNET}.2"
TCP_PORT = 5231  # the kernels' own stream
WAIT = 120  # s: only ever cuts a hang short


@dataclass
class Hosts:
    ns_a: str
    ns_b: str
    end_a: str
    end_b: str


@pytest.fixture
def namespaces():
    """Two hosts: a namespace each, one end of a veth pair each, with its kernel's address.
    Set up before the daemons and removed after them."""
    if not st.af_xdp_supported():
        pytest.skip("no AF_XDP here (no XDP sockets, or DPDK without net_af_xdp)")
    h = Hosts(st.unique("snic-ha", maxlen=40), st.unique("snic-hb", maxlen=40), st.unique("sha"),
              st.unique("shb"))
    try:
        for ns in (h.ns_a, h.ns_b):
            st.add_netns(ns)
        st.delete_link(h.end_a)
        st.run(["ip", "link", "add", h.end_a, "type", "veth", "peer", "name", h.end_b], check=True)
        for end, ns, ip in ((h.end_a, h.ns_a, A_IP), (h.end_b, h.ns_b, B_IP)):
            st.run(["ip", "link", "set", end, "netns", ns], check=True)
            st.disable_ipv6(end, ns)
            st.run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", end], check=True)
            st.run(["ip", "-n", ns, "link", "set", end, "up"], check=True)
        yield h
    finally:
        for ns in (h.ns_a, h.ns_b):
            st.delete_netns(ns)
        st.delete_link(h.end_a)


@dataclass
class Setup:
    hosts: Hosts
    a: st.Daemon
    b: st.Daemon
    # Each host's own socket directory, as /run/snic is a host's: a program finds its own
    # host's snicd only.
    dirs: dict[str, Path]


@pytest.fixture
def shared(namespaces, daemons, mem_args, tmp_path) -> Setup:
    h = namespaces
    dirs = {h.ns_a: tmp_path / "host-a", h.ns_b: tmp_path / "host-b"}
    for d in dirs.values():
        d.mkdir()
    name_a, name_b = st.unique("sha", maxlen=24), st.unique("shb", maxlen=24)
    a = daemons(name_a, ["-l", "0", "--no-pci", *mem_args],
                ["--port", f"iface={h.end_a},shared", "--idle-backoff", "20"],
                ctrl=str(dirs[h.ns_a] / f"{name_a}.sock"), netns=h.ns_a)
    b = daemons(name_b, ["-l", "1", "--no-pci", *mem_args],
                ["--port", f"iface={h.end_b},shared", "--idle-backoff", "20"],
                ctrl=str(dirs[h.ns_b] / f"{name_b}.sock"), netns=h.ns_b)
    for d, ip in ((a, A_IP), (b, B_IP)):
        status = d.wait_ready()
        assert status.ports[0].ip == f"{ip}/24", (
            f"the shared port took {status.ports[0].ip}, not its interface's {ip}/24")
    return Setup(h, a, b, dirs)


def env(s: Setup, ns: str, **extra: str) -> dict:
    e = dict(os.environ, SNIC_SOCKET_DIR=str(s.dirs[ns]), **extra)
    e.pop("LD_PRELOAD", None)
    if "SNIC_DEVICES" not in extra:
        e.pop("SNIC_DEVICES", None)
    return e


def on_host(ns: str, *cmd: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *cmd]


def background(s: Setup, ns: str, log: Path, *cmd: str, **extra: str) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(on_host(ns, *cmd), env=env(s, ns, **extra), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def finish(p: subprocess.Popen, log: Path, what: str) -> str:
    try:
        p.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise AssertionError(f"{what} did not finish within {WAIT} s:\n{log.read_text()}")
    out = log.read_text()
    assert p.returncode == 0, f"{what} exited {p.returncode}:\n{out}"
    return out


def kill(*procs: subprocess.Popen) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def tcp_listening(ns: str, port: int) -> bool:
    out = st.run(on_host(ns, "ss", "-Hltn", f"sport = :{port}"), check=True).stdout
    return out.strip() != ""


def xdp_counts(d: st.Daemon) -> dict:
    (reply,) = st.telemetry_query(d.prefix, "/snic/port_stats,0")
    stats = reply["/snic/port_stats"]
    assert "xdp_passed" in stats, f"no XDP counters on a shared port: {sorted(stats)}"
    return stats


def rping_to_b(s: Setup, tmp_path: Path, ip: str, iwarp: bool = False, port: int = 7174,
               while_listening=None) -> None:
    """rping's server on host B at `ip`, its client on host A given that address only: ten
    pings, over the ports' RoCEv2 devices or their iWARP ones. `while_listening` runs once
    the server listens."""
    kind = "iWARP" if iwarp else "RoCEv2"
    devices = ({"SNIC_DEVICES": f"{s.b.name}_iw0"}, {"SNIC_DEVICES": f"{s.a.name}_iw0"}) \
        if iwarp else ({}, {})
    before = rcm.cm_status(s.b)["listening"]
    server = background(s, s.hosts.ns_b, tmp_path / "server.log", str(SNIC_RUN), "rping", "-s",
                        "-a", ip, "-p", str(port), "-C", "10", "-v", **devices[0])
    client = None
    try:
        st.poll(lambda: server.poll() is not None or rcm.cm_status(s.b)["listening"] > before,
                "rping's server listening")
        if while_listening is not None:
            while_listening()
        client = background(s, s.hosts.ns_a, tmp_path / "client.log", str(SNIC_RUN), "rping",
                            "-c", "-a", ip, "-p", str(port), "-C", "10", "-v", **devices[1])
        out = finish(client, tmp_path / "client.log", f"rping -c ({kind})")
        assert out.count("ping data: rdma-ping-") == 10, out
        finish(server, tmp_path / "server.log", f"rping -s ({kind})")
    finally:
        kill(*(p for p in (client, server) if p is not None))


def test_rping_between_two_hosts_by_address(shared, tmp_path):
    s = shared
    rping_to_b(s, tmp_path, B_IP)
    # A resolved B through its kernel's neighbour table: it sent no ARP of its own.
    (stats,) = st.telemetry_query(s.a.prefix, "/snic/port_stats,0")
    ports = stats["/snic/port_stats"]
    assert ports["arp_requests_sent"] == 0, ports
    assert ports["neighbours_learnt"] >= 1, ports


BIND = r"""
import errno, socket, sys
s = socket.socket()
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
    print("bound")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


def kernel_bind(ns: str, ip: str, port: int) -> str:
    """What binding ip:port does in host `ns`'s kernel: "bound" or the errno's name."""
    res = st.run(on_host(ns, "python3", "-c", BIND, ip, str(port)), check=True)
    return res.stdout.strip()


def test_iwarp_rping_between_two_hosts_by_address(shared, tmp_path):
    """The same over the ports' iWARP devices: snic's TCP on the kernels' addresses. While
    the server listens its port is snicd's, and the kernel's programs cannot have it."""
    s = shared
    port = 7390

    def port_is_snicds():
        assert kernel_bind(s.hosts.ns_b, B_IP, port) == "EADDRINUSE", \
            "the kernel let a program bind the port snicd's iWARP listens on"

    rping_to_b(s, tmp_path, B_IP, iwarp=True, port=port, while_listening=port_is_snicds)
    stats = xdp_counts(s.b)
    assert stats["xdp_tcp"] > 0, stats
    # The server gone, its port is the kernel's again.
    st.poll(lambda: kernel_bind(s.hosts.ns_b, B_IP, port) == "bound",
            "the iWARP listener's port given back to the kernel")


@pytest.mark.parametrize("transport,cm", [("roce", False), ("roce", True), ("iwarp", True)])
def test_perftest_by_the_servers_address(shared, tmp_path, transport, cm):
    """ib_send_lat to the server host's address: without -R its exchange is a TCP connection
    between the kernels, with -R rdma_cm's (over snic's TCP for iWARP); the traffic is RDMA
    to the same address (the snicds'). With -R, an attempt that hits perftest's own race
    (its client connects before the server's second listen, test_rdmacm's lost_perftest_race)
    is run again on a fresh port, at most three times."""
    s = shared
    dev = "_iw0" if transport == "iwarp" else "_0"
    for attempt in range(3):
        port = 18600 + 10 * attempt + (2 if transport == "iwarp" else 0) + (1 if cm else 0)
        args = ["-n", "2000", "-p", str(port), *(["-R"] if cm else ["-x", "0"])]
        before = rcm.cm_status(s.b)["listening"]
        server = background(s, s.hosts.ns_b, tmp_path / f"server-{attempt}.log", str(SNIC_RUN),
                            "ib_send_lat", "-d", f"{s.b.name}{dev}", *args,
                            SNIC_DEVICES=f"{s.b.name}{dev}")
        client = None
        try:
            if cm:
                st.poll(lambda: server.poll() is not None
                        or rcm.cm_status(s.b)["listening"] > before,
                        "ib_send_lat's server listening (rdma_cm)")
            else:
                st.poll(lambda: server.poll() is not None or tcp_listening(s.hosts.ns_b, port),
                        f"ib_send_lat's server listening on TCP {port}")
            log = tmp_path / f"client-{attempt}.log"
            client = background(s, s.hosts.ns_a, log, str(SNIC_RUN), "ib_send_lat", "-d",
                                f"{s.a.name}{dev}", *args, B_IP, SNIC_DEVICES=f"{s.a.name}{dev}")
            client.wait(timeout=WAIT)
            out = log.read_text()
            if cm and rcm.lost_perftest_race(
                    subprocess.CompletedProcess(client.args, client.returncode, out, "")):
                print(f"attempt {attempt + 1} lost perftest's race")
                continue
            assert client.returncode == 0 and "t_typical" in out, out
            finish(server, tmp_path / f"server-{attempt}.log", "ib_send_lat (server)")
            return
        finally:
            kill(*(p for p in (client, server) if p is not None))
    pytest.fail("three attempts lost perftest's race")


RECEIVER = r"""
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2])))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
h, n = hashlib.sha256(), 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    h.update(b)
    n += len(b)
print(n, h.hexdigest(), flush=True)
"""

# Streams until its stdin closes, then says how many bytes it sent and their hash. At most
# 64 KiB a millisecond: the kernels' traffic flows all along without taking the two cores from
# the RDMA beside it.
SENDER = r"""
import hashlib, select, socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
print("streaming", flush=True)
h, n, i = hashlib.sha256(), 0, 0
while not select.select([sys.stdin], [], [], 0.001)[0]:
    chunk = hashlib.shake_256(i.to_bytes(8, "big")).digest(65536)
    c.sendall(chunk)
    h.update(chunk)
    n += len(chunk)
    i += 1
c.close()
print(n, h.hexdigest(), flush=True)
"""


def counters(s: Setup) -> str:
    """Each daemon's port and RoCEv2 counters that are not 0, for a failure's context."""
    out = []
    for d in (s.a, s.b):
        for cmd in ("/snic/port_stats,0", "/snic/roce_stats,0"):
            (r,) = st.telemetry_query(d.prefix, cmd)
            vals = {k: v for k, v in r[cmd.split(",")[0]].items() if v}
            out.append(f"{d.name} {cmd}: {vals}")
    return "\n".join(out)


def test_the_kernels_traffic_flows_beside_rdma(shared, tmp_path):
    """A TCP stream between the two kernels runs from before ibv_rc_pingpong starts until
    after it ends, with pings; ibv_rc_pingpong checks every byte of its 64 KiB messages (-c),
    the stream's bytes are compared at the end. Both are byte-exact; the XDP programs passed
    the kernels' frames on and sent the snicds RoCEv2."""
    s = shared
    a_before, b_before = xdp_counts(s.a), xdp_counts(s.b)
    receiver = subprocess.Popen(on_host(s.hosts.ns_b, "python3", "-c", RECEIVER, B_IP,
                                        str(TCP_PORT)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sender = server = client = None
    try:
        assert receiver.stdout.readline().strip() == "listening", receiver.stderr.read()
        sender = subprocess.Popen(on_host(s.hosts.ns_a, "python3", "-c", SENDER, B_IP,
                                          str(TCP_PORT)), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert sender.stdout.readline().strip() == "streaming", sender.stderr.read()
        args = ["ibv_rc_pingpong", "-g", "0", "-c", "-s", "65536", "-n", "2000"]
        server = background(s, s.hosts.ns_b, tmp_path / "pp-server.log", str(SNIC_RUN), *args,
                            "-d", f"{s.b.name}_0")
        st.poll(lambda: server.poll() is not None or tcp_listening(s.hosts.ns_b, 18515),
                "ibv_rc_pingpong's server listening on TCP 18515")
        client = background(s, s.hosts.ns_a, tmp_path / "pp-client.log", str(SNIC_RUN), *args,
                            "-d", f"{s.a.name}_0", B_IP)
        ping = st.run(on_host(s.hosts.ns_a, "ping", "-c", "5", "-i", "0.2", "-W", "2", B_IP),
                      timeout=WAIT)
        assert ping.returncode == 0 and " 0% packet loss" in ping.stdout, ping.stdout
        try:
            out = finish(client, tmp_path / "pp-client.log", "ibv_rc_pingpong (client)")
            finish(server, tmp_path / "pp-server.log", "ibv_rc_pingpong (server)")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{counters(s)}") from None
        assert "262144000 bytes in" in out, out  # 2,000 x 64 KiB, both ways
        sender.stdin.close()
        sent = sender.stdout.readline().split()
        got = receiver.stdout.readline().split()
        assert sent and got == sent, f"sent {sent}, received {got}"
        assert int(sent[0]) > 0, sent
    finally:
        kill(*(p for p in (client, server, sender, receiver) if p is not None))
    a_after, b_after = xdp_counts(s.a), xdp_counts(s.b)
    # B's kernel received the stream and the pings through B's program; A's kernel the
    # stream's ACKs and the ping replies.
    assert b_after["xdp_passed"] - b_before["xdp_passed"] > 100, (b_before, b_after)
    assert a_after["xdp_passed"] - a_before["xdp_passed"] > 10, (a_before, a_after)
    # The messages reached the snicds both ways (44 frames a 64 KiB message at MTU 1500).
    assert b_after["xdp_roce"] - b_before["xdp_roce"] > 2000 * 44, (b_before, b_after)
    assert a_after["xdp_roce"] - a_before["xdp_roce"] > 2000 * 44, (a_before, a_after)
    assert b_after["xdp_no_socket"] == b_before["xdp_no_socket"], b_after


# ------------------------------------------------------------------ the users' tools

def serve_and_run(s: Setup, tmp_path: Path, what: str, server_cmd: list[str], ready,
                  client_cmd: list[str], server_env: dict, client_env: dict) -> str:
    """A server on host B until `ready()`, then the client on host A to its end; the client's
    output. Both must exit 0."""
    server = background(s, s.hosts.ns_b, tmp_path / f"{what}-server.log", *server_cmd,
                        **server_env)
    client = None
    try:
        st.poll(lambda: server.poll() is not None or ready(), f"{what}'s server ready")
        assert server.poll() is None, (tmp_path / f"{what}-server.log").read_text()
        client = background(s, s.hosts.ns_a, tmp_path / f"{what}-client.log", *client_cmd,
                            **client_env)
        return finish(client, tmp_path / f"{what}-client.log", f"{what} (client)")
    finally:
        kill(*(p for p in (client, server) if p is not None))


QPERF_TESTS = ["rc_lat", "rc_bw", "rc_rdma_read_lat", "rc_rdma_write_bw", "rc_compare_swap_mr"]


def test_qperf_cm_by_address(shared, tmp_path):
    """qperf -cm1 to the server host's address: its control connection is the kernels' TCP,
    its RDMA connections rdma_cm's to the same address. (ud_lat is left out: qperf 0.4.11
    makes its UD address handle without a GRH, which a RoCE device refuses, snic as the
    kernel's rxe and RoCE NICs do.) qperf's own race (its server sends its rdma_cm port before
    it listens, test_rdmacm_clients' lost_qperf_race) is run again, at most twice."""
    s = shared
    for attempt in range(3):
        ctrl = 19765 + attempt
        refused = rcm.cm_status(s.b)["no_listener"]
        try:
            out = serve_and_run(s, tmp_path,
                                f"qperf{attempt}", [str(SNIC_RUN), "qperf", "-lp", str(ctrl)],
                                lambda c=ctrl: tcp_listening(s.hosts.ns_b, c),
                                [str(SNIC_RUN), "qperf", B_IP, "-lp", str(ctrl), "-cm1", "-t",
                                 "1", *QPERF_TESTS], {}, {})
        except AssertionError as e:
            lost = ("Event rejected" in str(e)
                    and rcm.cm_status(s.b)["no_listener"] > refused)
            if lost and attempt < 2:
                print(f"qperf: attempt {attempt + 1} lost its race to the server's rdma_listen")
                continue
            raise
        break
    values = re.findall(r"^\s+(latency|bw|msg_rate)\s+=\s+([\d.]+) (\S+)", out, re.M)
    assert len(values) == len(QPERF_TESTS), out
    assert all(float(v) > 0 for _, v, _ in values), out
    print("qperf -cm1 between hosts:", values)


UCX_TESTS = [("tag_lat", 8), ("tag_bw", 65536), ("ucp_put_bw", 65536)]


@pytest.mark.parametrize("test,size", UCX_TESTS, ids=[f"{t}-{s}" for t, s in UCX_TESTS])
def test_ucx_perftest_by_address(shared, tmp_path, test, size):
    """ucx_perftest to the server host's address (its setup over the kernels' TCP), UCX over
    rc_verbs and ud_verbs on each host's device."""
    s = shared
    port = 17620 + UCX_TESTS.index((test, size))
    ucx = {"UCX_TLS": "rc_verbs,ud_verbs"}
    out = serve_and_run(
        s, tmp_path, "ucx_perftest", [str(SNIC_RUN), "ucx_perftest", "-p", str(port)],
        lambda: tcp_listening(s.hosts.ns_b, port),
        [str(SNIC_RUN), "ucx_perftest", B_IP, "-p", str(port), "-t", test, "-s", str(size),
         "-n", "500"],
        dict(ucx, UCX_NET_DEVICES=f"{s.b.name}_0:1"), dict(ucx, UCX_NET_DEVICES=f"{s.a.name}_0:1"))
    assert re.search(r"^Final:", out, re.M), out


@pytest.mark.parametrize("ep", ["rdm", "msg"])
def test_fi_pingpong_by_address(shared, tmp_path, ep):
    """libfabric's fi_pingpong over the verbs provider (RDM: with RxM, as fi_rdm_pingpong
    runs; Debian 12 ships fabtests' fi_pingpong alone) to the server host's address, every
    byte checked (-c)."""
    s = shared
    port = 17700 + (1 if ep == "msg" else 0)
    common = ["fi_pingpong", "-p", "verbs", "-e", ep, "-c", "-I", "100", "-S", "4096"]
    out = serve_and_run(
        s, tmp_path, "fi_pingpong", [str(SNIC_RUN), *common, "-B", str(port)],
        lambda: tcp_listening(s.hosts.ns_b, port) or udp_bound(s.hosts.ns_b, port),
        [str(SNIC_RUN), *common, "-P", str(port), B_IP],
        {"SNIC_DEVICES": f"{s.b.name}_0"}, {"SNIC_DEVICES": f"{s.a.name}_0"})
    assert re.search(r"^\S+\s+100\s+=100\s", out, re.M), out


def udp_bound(ns: str, port: int) -> bool:
    out = st.run(on_host(ns, "ss", "-Hlun", f"sport = :{port}"), check=True).stdout
    return out.strip() != ""


def test_open_mpi_one_rank_per_host(shared, tmp_path, mpi_check):
    """Open MPI (pml ucx, osc ucx), one rank on each host, launched as on two machines:
    mpirun runs on host A with a hostfile of the two hosts' addresses, and its rsh agent
    (a script here, in place of ssh) runs Open MPI's daemon in the other host's namespace,
    which connects back to mpirun over the kernels' TCP. Each rank finds its host's snicd;
    UCX reaches the other rank at its host's address. tests/mpi's mpi_check sends every size
    class both ways and checks each byte, runs an allreduce, and puts and gets through a
    window."""
    s = shared
    h = s.hosts
    agent = tmp_path / "netns-rsh"
    agent.write_text(f"""#!/bin/sh
host=$1; shift
case $host in
    {A_IP}) ns={h.ns_a} ;;
    {B_IP}) ns={h.ns_b} ;;
    *) echo "netns-rsh: no host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" sh -c "$*"
""")
    rank = tmp_path / "rank"
    rank.write_text(f"""#!/bin/sh
case $(ip netns identify $$) in
    {h.ns_a}) d={s.a.name}; dir={s.dirs[h.ns_a]} ;;
    {h.ns_b}) d={s.b.name}; dir={s.dirs[h.ns_b]} ;;
    *) echo "rank: not on a host" >&2; exit 1 ;;
esac
export SNIC_SOCKET_DIR=$dir SNIC_DEVICES=${{d}}_0 UCX_NET_DEVICES=${{d}}_0:1
exec {SNIC_RUN} {mpi_check}
""")
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"{A_IP} slots=1\n{B_IP} slots=1\n")
    for f in (agent, rank):
        f.chmod(0o755)
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    e = dict(os.environ, UCX_TLS="rc_verbs,ud_verbs")
    e.pop("LD_PRELOAD", None)
    before = xdp_counts(s.b)["xdp_roce"]
    res = run_job(on_host(h.ns_a, "mpirun", *root, "--hostfile", str(hostfile), "-np", "2",
                          "--mca", "plm_rsh_agent", str(agent), "--mca", "pml", "ucx", "--mca",
                          "osc", "ucx", "--mca", "btl", "self", "-x", "UCX_TLS", str(rank)), e)
    context = f"stdout:\n{res.stdout}\nstderr:\n{res.stderr[-4000:]}"
    assert res.returncode == 0, context
    assert "mpi_check: OK" in res.stdout, context
    print(res.stdout.strip())
    # The ranks' traffic crossed the wire between the hosts' snicds.
    assert xdp_counts(s.b)["xdp_roce"] - before > 1000, xdp_counts(s.b)


# ---------------------------------------------------------------- the interface's owner

XDP_PASS_PROGRAM = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int other(struct xdp_md *ctx) { return XDP_PASS; }
char _license[] SEC("license") = "GPL";
"""


def xdp_program_on(ns: str, iface: str) -> str:
    """The name of the XDP program on the interface, or ""."""
    out = st.run(on_host(ns, "ip", "-d", "link", "show", "dev", iface), check=True).stdout
    m = re.search(r"prog/xdp id \d+ name (\S+)", out)
    return m[1] if m else ""


def test_one_snicd_per_interface_and_a_dead_ones_program_is_taken_back(
        namespaces, daemons, mem_args, tmp_path):
    """A second snicd on a shared interface is refused while the first runs. A snicd killed
    with SIGKILL leaves its XDP program attached; the next snicd on the interface detaches it
    and starts. A program that is not snicd's is left alone, and snicd says so."""
    h = namespaces
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()

    def start(tag: str, lcore: str) -> st.Daemon:
        name = st.unique(tag, maxlen=24)
        return daemons(name, ["-l", lcore, "--no-pci", *mem_args],
                       ["--port", f"iface={h.end_a},shared"],
                       ctrl=str(sock_dir / f"{name}.sock"), netns=h.ns_a)

    first = start("sh1", "0")
    first.wait_ready()
    second = start("sh2", "1")
    assert second.wait(timeout=60) != 0, second.describe()
    assert f"{h.end_a} is shared by another snicd already" in second.stderr(), second.describe()
    assert first.running(), first.describe()

    first.signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert xdp_program_on(h.ns_a, h.end_a) == "snic_xdp", "SIGKILL took the program with it"
    third = start("sh3", "0")
    third.wait_ready()
    assert "detached the XDP program" in third.stdout() + third.stderr(), third.describe()
    third.stop()
    assert xdp_program_on(h.ns_a, h.end_a) == "", "a clean stop leaves no program behind"

    src, obj = tmp_path / "other.c", tmp_path / "other.o"
    src.write_text(XDP_PASS_PROGRAM)
    st.run(["clang", "-O2", "-target", "bpf", "-I/usr/include/x86_64-linux-gnu", "-c", str(src),
            "-o", str(obj)], check=True)
    st.run(on_host(h.ns_a, "ip", "link", "set", "dev", h.end_a, "xdpgeneric", "obj", str(obj),
                   "sec", "xdp"), check=True)
    fourth = start("sh4", "0")
    assert fourth.wait(timeout=60) != 0, fourth.describe()
    assert "runs an XDP program that is not snicd's" in fourth.stderr(), fourth.describe()
    assert xdp_program_on(h.ns_a, h.end_a) == "other", "snicd detached another's program"


def test_the_port_follows_its_interface(shared, tmp_path):
    """As an RNIC's GID table follows its netdev: when the interfaces' MTU and host B's
    address change, the ports take them (snicctl status and ibv_devinfo say so), and host A
    reaches B's RoCEv2 and iWARP devices at B's new address. While B's interface has no
    address at all, B's port keeps its old one and says so."""
    s = shared
    h = s.hosts
    new_b = f"{SUBNET}.12"
    for ns, end in ((h.ns_a, h.end_a), (h.ns_b, h.end_b)):
        st.run(on_host(ns, "ip", "link", "set", "dev", end, "mtu", "1280"), check=True)
    for d in (s.a, s.b):
        st.poll(lambda d=d: st.ctl_status_ok(d.ctrl).ports[0].mtu == 1280,
                f"{d.name}'s port to take MTU 1280")
    st.run(on_host(h.ns_b, "ip", "addr", "del", f"{B_IP}/24", "dev", h.end_b), check=True)
    st.poll(lambda: f"the port keeps {B_IP}/24 until the interface has an address again"
            in s.b.stdout(), "snicd to say its interface has no address")
    assert st.ctl_status_ok(s.b.ctrl).ports[0].ip == f"{B_IP}/24"
    st.run(on_host(h.ns_b, "ip", "addr", "add", f"{new_b}/24", "dev", h.end_b), check=True)
    st.poll(lambda: st.ctl_status_ok(s.b.ctrl).ports[0].ip == f"{new_b}/24",
            f"B's port to take {new_b}")

    res = st.run(on_host(h.ns_b, str(SNIC_RUN), "ibv_devinfo", "-v", "-d", f"{s.b.name}_0"),
                 env=env(s, h.ns_b))
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"active_mtu:\s+1024", res.stdout), res.stdout
    assert f"::ffff:{new_b}" in res.stdout, f"B's GID is not its new address:\n{res.stdout}"

    for kind in ("roce", "iwarp"):
        (tmp_path / kind).mkdir()
    rping_to_b(s, tmp_path / "roce", new_b)
    rping_to_b(s, tmp_path / "iwarp", new_b, iwarp=True, port=7391)
    assert s.a.running() and s.b.running()


def test_without_xdp_sockets_a_shared_port_runs_on_its_fallback(daemons, mem_args, veth_ns):
    """--no-xdp stands for a kernel without XDP sockets: snicd says the interface is not
    shared and runs the port on it with the fallback address, an address of its own as
    before shared ports; the other end reaches both snicd there and the kernel at its own."""
    v = veth_ns(f"{SUBNET}.2/24")
    kernels, fallback = f"{SUBNET}.1", f"{SUBNET}.3"
    st.run(["ip", "addr", "add", f"{kernels}/24", "dev", v.host], check=True)
    name = st.unique("shf", maxlen=24)
    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--no-xdp", "--port", f"iface={v.host},shared,fallback={fallback}/24",
                 "--idle-backoff", "20"])
    status = d.wait_ready()
    assert status.ports[0].ip == f"{fallback}/24", status
    assert f"{v.host} is not shared" in d.stdout(), d.describe()
    for ip in (fallback, kernels):
        res = st.run(on_host(v.ns, "ping", "-c", "3", "-i", "0.2", "-W", "5", ip))
        assert res.returncode == 0, f"ping {ip}:\n{res.stdout}{res.stderr}\n{d.describe()}"

