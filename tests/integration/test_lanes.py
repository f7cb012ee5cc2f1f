"""One port across several lcores: `snicd -l 0-1` with queues=2 on both ports of the virtual
wire. Each port has two lanes (port.h), a receive and transmit queue each, polled by lcores of
their own: wire0's lane 0 on the main lcore and lane 1 on the worker, wire1's the other way
round. A device's clients are spread over its lanes (a RoCEv2 device's sessions to the lane
with fewest sessions open, an iWARP device's processes to the lane with fewest processes),
each session's QPs run on its lane's lcore (an iWARP QP's TCP connection too), and a frame
that reaches the queue of another lane is handed to that lane (by QP, or by TCP port): the
wire delivers a frame to the queue of the same index it was sent on, so a client on lane 1
talking to one on lane 0 makes every packet cross lanes, both ways.

rdma-core's and perftest's tools, unmodified, run across; `ibv_asyncwatch` holds a device
open on lane 0 where a test needs the next client on lane 1."""

from __future__ import annotations

import subprocess

import pytest

import snictest as st
import test_perftest as pt
import test_rc as rc
import test_rdmacm as rcm
import test_ud as ud
import test_iwarp as iw
from test_lcores import lcore_threads
from test_tap import Watch

SUBNET = "198.18.62"
_iw_ports = iter(range(19960, 19990))
TOOLS = {"ibverbs-utils": ("ibv_rc_pingpong", "ibv_ud_pingpong", "ibv_asyncwatch"),
         "perftest": ("ib_write_bw",), "rdmacm-utils": ("rping",)}


@pytest.fixture(scope="module")
def lanes(tmp_path_factory, mem_args):
    for package, tools in TOOLS.items():
        for tool in tools:
            st.require_tool(tool, package)
    with st.wire_daemon(tmp_path_factory, mem_args, "ln", SUBNET, port_extra=",queues=2",
                        cores=("-l", "0-1")) as wire:
        yield wire


def wait_no_clients(d: st.Daemon) -> None:
    """Until the daemon has closed the sessions of every client gone (a client's exit reaches
    it asynchronously): a lane's count of sessions decides where the next client goes."""
    st.poll(lambda: f"device {d.name}_" not in st.snicctl(d, "clients") or None,
            "the clients' sessions closed")


class Hold(Watch):
    """ibv_asyncwatch holding DEVICE open (on its lane with fewest sessions: lane 0 when none
    is open); stop() waits until the daemon has closed its session."""

    def __init__(self, d: st.Daemon, sock_dir, device: str, log):
        super().__init__(rcm.env_for(sock_dir), device, log)
        self.d = d

    def stop(self) -> None:
        pid = self.proc.pid
        super().stop()
        st.poll(lambda: f"pid {pid} " not in st.snicctl(self.d, "clients") + " " or None,
                f"ibv_asyncwatch {pid}'s session closed")


def port_stats(d: st.Daemon) -> list[dict]:
    replies = st.telemetry_query(d.prefix, "/snic/port_stats,0", "/snic/port_stats,1")
    return [r["/snic/port_stats"] for r in replies]


def roce_stats(d: st.Daemon) -> list[dict]:
    replies = st.telemetry_query(d.prefix, "/snic/roce_stats,0", "/snic/roce_stats,1")
    return [r["/snic/roce_stats"] for r in replies]


def lane_figures(d: st.Daemon, field: str) -> list[list[int]]:
    """`field` of each lane, per port: [[port 0 lane 0, lane 1], [port 1 lane 0, lane 1]]."""
    return [[p[f"lane{q}"][field] for q in range(2)] for p in port_stats(d)]


def moved(before: list[list[int]], after: list[list[int]]) -> list[list[int]]:
    return [[a - b for a, b in zip(pa, pb)] for pa, pb in zip(after, before)]


def assert_in_order(d: st.Daemon) -> None:
    """No responder of the QPs gone saw a PSN ahead of the one it expected, nor one behind,
    nor asked for one again: the wire loses nothing, so any of these would be a packet a lane
    handed on out of its order. (Retransmissions are not counted here: a ping-pong's RNR NAK,
    its receive not posted yet, is one.)"""
    for stats in roce_stats(d):
        for name in ("qps_out_of_sequence", "qps_duplicate_requests", "qps_seq_naks_sent"):
            assert stats[name] == 0, (name, stats)


def test_each_port_has_a_lane_on_each_lcore(lanes):
    d, _ = lanes
    stats = port_stats(d)
    assert [p["queues"] for p in stats] == [2, 2]
    assert [[p["lane0"]["lcore"], p["lane1"]["lcore"]] for p in stats] == [[0, 1], [1, 0]]
    assert [p["lcore"] for p in stats] == [0, 1]  # lane 0 is the port as the rest knows it
    assert [p.queues for p in st.ctl_status_ok(d.ctrl).ports] == [2, 2]


def test_packets_to_a_qp_of_another_lane_are_handed_to_it_in_order(lanes, tmp_path):
    d, sock_dir = lanes
    wait_no_clients(d)
    # wire1's lane 0 held: the client below runs on wire1's lane 1 (the main lcore's), the
    # server on wire0's lane 0 (the main lcore's too); their packets cross on the worker's.
    hold = Hold(d, sock_dir, f"{d.name}_1", tmp_path / "hold.log")
    try:
        dispatched, handed = lane_figures(d, "roce_dispatched"), lane_figures(d, "rx_to_lanes")
        threads = lcore_threads(d.pid)
        rc.pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                    ["-s", "4096", "-n", "5000"])
        got = moved(dispatched, lane_figures(d, "roce_dispatched"))
        out = moved(handed, lane_figures(d, "rx_to_lanes"))
    finally:
        hold.stop()
    # Each side's 5,000 messages went out of its own lane's queue and reached the other
    # side's queue of that index: lane 1 of wire0 handed them to lane 0, lane 0 of wire1 to
    # lane 1, where the QPs are.
    assert out[0][1] >= 5000 and out[1][0] >= 5000, out
    assert got[0][0] >= 5000 and got[1][1] >= 5000, got
    assert got[0][1] == 0 and got[1][0] == 0, got
    assert lcore_threads(d.pid)["rte-worker-1"] > threads["rte-worker-1"]
    assert_in_order(d)


def test_clients_are_spread_over_the_lanes(lanes, tmp_path):
    d, sock_dir = lanes
    wait_no_clients(d)
    qps = lane_figures(d, "qps")
    assert qps == [[0, 0], [0, 0]], qps
    holds = [Hold(d, sock_dir, f"{d.name}_{p}", tmp_path / f"hold{p}.log") for p in (0, 1)]
    try:
        before = lane_figures(d, "roce_dispatched")
        # Both devices held on lane 0: both ends run on lane 1 (wire0's on the worker lcore).
        rc.pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                    ["-s", "64", "-n", "2000"])
        got = moved(before, lane_figures(d, "roce_dispatched"))
    finally:
        for h in holds:
            h.stop()
    assert got[0][1] >= 2000 and got[1][1] >= 2000, got
    assert got[0][0] == 0 and got[1][0] == 0, got
    assert_in_order(d)


@pytest.mark.parametrize("size", [1, 65536, 1 << 20])
def test_rc_pingpong(lanes, size):
    d, sock_dir = lanes
    wait_no_clients(d)
    rc.pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                ["-s", str(size), "-n", "200"])


def test_ud_pingpong_across_lanes(lanes, tmp_path):
    d, sock_dir = lanes
    wait_no_clients(d)
    hold = Hold(d, sock_dir, f"{d.name}_1", tmp_path / "hold.log")
    try:
        ud.ud_pingpong(f"{d.name}_0", f"{d.name}_1", sock_dir, ["-s", "1024", "-n", "500"])
    finally:
        hold.stop()


def test_perftest_with_four_qps_across_lanes(lanes, tmp_path):
    d, sock_dir = lanes
    wait_no_clients(d)
    hold = Hold(d, sock_dir, f"{d.name}_1", tmp_path / "hold.log")
    try:
        out = pt.perftest(d, sock_dir, "ib_write_bw", "-s", "65536", "-n", "1000", "-q", "4",
                          *pt.NO_CLOCK_CHECK)
    finally:
        hold.stop()
    assert "65536" in out, out
    assert_in_order(d)


def test_rdma_cm_across_lanes(lanes, tmp_path):
    """rping over RoCEv2: its CM's MADs go through QP1 on lane 0, its QPs run where their
    sessions are."""
    d, sock_dir = lanes
    wait_no_clients(d)
    hold = Hold(d, sock_dir, f"{d.name}_1", tmp_path / "hold.log")
    try:
        rcm.client_server(d, sock_dir, tmp_path,
                          ["rping", "-s", "-a", f"{SUBNET}.1", "-p", "19951", "-C", "500", "-V"],
                          ["rping", "-c", "-a", f"{SUBNET}.1", "-I", f"{SUBNET}.2", "-p", "19951",
                           "-C", "500", "-V"])
    finally:
        hold.stop()


def tcp_lanes(d: st.Daemon, field: str) -> list[list[int]]:
    """`field` of each lane's TCP, per port (telemetry's /snic/tcp_stats "lane<N>")."""
    replies = st.telemetry_query(d.prefix, "/snic/tcp_stats,0", "/snic/tcp_stats,1")
    return [[int(r["/snic/tcp_stats"][f"lane{q}"][field]) for q in range(2)] for r in replies]


def test_iwarp_connections_run_on_their_process_lane(lanes, tmp_path, monkeypatch):
    """rping over iWARP, its client's device held on wire1's lane 0 by another process: the
    client's connection and QP run on wire1's lane 1, the server's on wire0's lane 0 (the
    first process there). The wire hands each frame to the queue it was sent on, so every
    segment crosses lanes at the far end, by its TCP port, both ways."""
    d, sock_dir = lanes
    wait_no_clients(d)
    monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_iw0,{d.name}_iw1")
    hold = Hold(d, sock_dir, f"{d.name}_iw1", tmp_path / "hold.log")
    try:
        segments, dispatched = tcp_lanes(d, "rx_segments"), lane_figures(d, "tcp_dispatched")
        rcm.client_server(d, sock_dir, tmp_path,
                          ["rping", "-s", "-a", f"{SUBNET}.1", "-p", "19952", "-C", "500", "-V"],
                          ["rping", "-c", "-a", f"{SUBNET}.1", "-I", f"{SUBNET}.2", "-p", "19952",
                           "-C", "500", "-V"])
        got = moved(segments, tcp_lanes(d, "rx_segments"))
        handed = moved(dispatched, lane_figures(d, "tcp_dispatched"))
    finally:
        hold.stop()
    print(f"TCP segments by lane: {got}; dispatched to TCP by lane: {handed}")
    # 500 verified round trips: each a SEND, an RDMA READ and its response, and a WRITE.
    assert got[0][0] >= 1000 and got[1][1] >= 1000, got
    assert got[0][1] == 0 and got[1][0] == 0, got
    assert handed[0][1] == 0 and handed[1][0] == 0, handed


def test_iwarp_perftest_across_lanes(lanes, tmp_path):
    """ib_write_bw -R over iWARP with its client on wire1's lane 1: its data segments reach
    wire1's lane 0 and are handed on, and wire0's lane 0 (the server's) takes what reaches
    its lane 1."""
    d, sock_dir = lanes
    wait_no_clients(d)
    hold = Hold(d, sock_dir, f"{d.name}_iw1", tmp_path / "hold.log")
    try:
        before = tcp_lanes(d, "rx_segments")
        client, server = iw.run_perftest(d, sock_dir, tmp_path, "ib_write_bw", "-s", "65536",
                                         "-n", "500", *pt.NO_CLOCK_CHECK, ports=_iw_ports,
                                         server_ip=f"{SUBNET}.1")
        got = moved(before, tcp_lanes(d, "rx_segments"))
    finally:
        hold.stop()
    assert client.returncode == 0, f"{rcm.shown(client)}\nserver:\n{server.describe()}"
    assert server.proc.returncode == 0, server.describe()
    print(f"TCP segments by lane: {got}")
    assert got[0][0] > 0 and got[1][1] > 0, got
    assert got[0][1] == 0 and got[1][0] == 0, got


def test_iwarp_between_two_processes_of_one_port_crosses_lanes(lanes, tmp_path, monkeypatch):
    """rping's server and client both on wire0, at its own address: the server's process has
    lane 0, the client's (the second process) lane 1, and the port's connection to itself
    goes between the two lanes' TCPs."""
    d, sock_dir = lanes
    wait_no_clients(d)
    monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_iw0")
    looped, segments = tcp_lanes(d, "loopback"), tcp_lanes(d, "rx_segments")
    rcm.client_server(d, sock_dir, tmp_path,
                      ["rping", "-s", "-a", f"{SUBNET}.1", "-p", "19954", "-C", "200", "-V"],
                      ["rping", "-c", "-a", f"{SUBNET}.1", "-p", "19954", "-C", "200", "-V"])
    sent = moved(looped, tcp_lanes(d, "loopback"))
    got = moved(segments, tcp_lanes(d, "rx_segments"))
    print(f"looped by lane: {sent}; received by lane: {got}")
    assert sent[0][0] >= 400 and sent[0][1] >= 400, sent
    assert got[0][0] >= 400 and got[0][1] >= 400, got


# rdma_cm listeners on IP, TCP ports FIRST..FIRST+N-1 (pyverbs, rdma-core's own bindings);
# "listening" once all listen, then held until stdin closes.
LISTENERS = """
import sys
from pyverbs.cmid import CMID, AddrInfo
from pyverbs.cm_enums import RAI_PASSIVE, RDMA_PS_TCP
ip, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ids = []
for port in range(first, first + n):
    ids.append(CMID(creator=AddrInfo(src=ip, src_service=str(port), port_space=RDMA_PS_TCP,
                                     flags=RAI_PASSIVE)))
    ids[-1].listen()
print("listening", flush=True)
sys.stdin.read()
"""


def test_snicctl_tcp_pages_through_every_lane(lanes):
    """Two processes with 20 iWARP listeners each on wire0: the first process's on lane 0's
    TCP, the second's on lane 1's. snicctl tcp's pages (32 rows each) run through both lanes'
    rows, one after the other: every listener once."""
    d, sock_dir = lanes
    wait_no_clients(d)
    env = rcm.env_for(sock_dir, SNIC_DEVICES=f"{d.name}_iw0")
    procs = []
    try:
        for first in (19700, 19720):
            p = subprocess.Popen([str(rcm.SNIC_RUN), "/usr/bin/python3", "-c", LISTENERS,
                                  f"{SUBNET}.1", str(first), "20"], env=env, text=True,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT)
            procs.append(p)
            line = p.stdout.readline()
            assert line.strip() == "listening", line + p.stdout.read()
        listeners = tcp_lanes(d, "listeners")
        out = st.snicctl(d, "tcp")
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=30)
    listening = [f[4] for f in (ln.split() for ln in out.splitlines())
                 if f[1] == "0" and f[2] == "LISTEN"]
    want = [f"{SUBNET}.1:{port}" for port in range(19700, 19740)]
    assert listeners[0] == [20, 20], listeners
    assert sorted(listening) == sorted(want), out


def test_flows_spread_by_the_kernel_reach_their_lanes(daemons, mem_args, tmp_path, monkeypatch):
    """net_af_packet with two queue pairs on each end of a veth pair: the kernel spreads the
    frames it hands a packet socket over the two queues by a hash of each flow (its
    PACKET_FANOUT_HASH), as a NIC's RSS would, with no regard for the lanes. Whatever queue a
    QP's packets or a TCP connection's segments reach, they get to their lane: perftest's 16
    QPs and rping over iWARP complete, and no QP saw a packet out of its order.

    DPDK's af_packet also sets PACKET_FANOUT_FLAG_ROLLOVER: a frame whose socket's ring (512
    frames) is full goes to the other socket, out of its flow's order (snicd warns of it).
    perftest's 16 QPs keep 8 WRs of 3 frames each in flight (-t 8): 384 frames, which one
    ring holds even if every flow hashes to it."""
    ends = (st.unique("sla", maxlen=15), st.unique("slb", maxlen=15))
    for e in ends:
        st.delete_link(e)
    st.run(["ip", "link", "add", ends[0], "type", "veth", "peer", "name", ends[1]], check=True)
    try:
        for e in ends:
            st.disable_ipv6(e)
            st.run(["ip", "link", "set", e, "up"], check=True)
        sock_dir = tmp_path / "sockets"
        sock_dir.mkdir()
        name = st.unique("lnv", maxlen=24)
        d = daemons(name, ["-l", "0-1", "--no-pci", *mem_args,
                           *(f"--vdev=net_af_packet{i},iface={e},qpairs=2"
                             for i, e in enumerate(ends))],
                    ["--port", f"net_af_packet0,ip={SUBNET}.11/24,queues=2",
                     "--port", f"net_af_packet1,ip={SUBNET}.12/24,queues=2", "--idle-backoff", "20"],
                    ctrl=str(sock_dir / f"{name}.sock"))
        d.wait_ready()
        before = lane_figures(d, "rx_packets")
        monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_0,{d.name}_1")
        out = pt.perftest(d, sock_dir, "ib_write_bw", "-s", "4096", "-n", "2000", "-q", "16", "-t", "8",
                          *pt.NO_CLOCK_CHECK)
        assert "4096" in out, out
        rc.pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                    ["-s", "4096", "-n", "500"])
        assert_in_order(d)
        monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_iw0,{d.name}_iw1")
        rcm.client_server(d, sock_dir, tmp_path,
                          ["rping", "-s", "-a", f"{SUBNET}.11", "-p", "19953", "-C", "300", "-V"],
                          ["rping", "-c", "-a", f"{SUBNET}.11", "-I", f"{SUBNET}.12", "-p",
                           "19953", "-C", "300", "-V"])
        got = moved(before, lane_figures(d, "rx_packets"))
        handed = lane_figures(d, "rx_to_lanes")
        print(f"frames received by lane: {got}; handed to another lane: {handed}")
        assert all(sum(port) > 0 for port in got), got
    finally:
        st.delete_link(ends[0])
