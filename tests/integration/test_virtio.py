"""snicd on DPDK's virtio driver, the one a virtio-net PCI NIC in a VM uses, through
virtio-user: two ports, each a virtio device whose other end is a vhost-user port of a
dpdk-testpmd that forwards between them (a two-port switch; io forwarding on its own lcore).

This machine's kernel has no vhost-net (CONFIG_VHOST_NET is not set), so the kernel cannot
be the devices' back end here; DPDK's vhost library is. The driver code snicd runs is the
same: virtqueues, the virtio-net header and its checksum offloads (TCP on transmit, the
verdict on receive; no IPv4 header checksum, which virtio does not offer).

rdma-core's ibv_rc_pingpong over RoCEv2, rping -V over iWARP and perftest's ib_write_bw -R
run across, unmodified, under snic-run; snicctl status lists the offloads the ports use, and
no segment's checksum was bad. (The switch completes the checksums snic's TCP leaves to the
device and hands the other port whole segments: its verdict path is test_tap.py's.)"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import snictest as st
import test_lanes as tl
import test_perftest as pt
import test_rc as rc
import test_rdmacm as rcm
from test_tap import Watch

SUBNET = "198.18.25"
VIRTIO_OFFLOADS = "tx-tcp-cksum,rx-cksum"


@contextlib.contextmanager
def switch(tmp_path: Path, tag: str, queues: int = 1) -> Iterator[list[Path]]:
    """dpdk-testpmd with two vhost-user ports (their sockets in tmp_path) of `queues` queue
    pairs, forwarding each one's frames to the other, queue i to queue i; yields the two
    socket paths once they exist, and stops it."""
    socks = [tmp_path / f"vh{i}.sock" for i in (0, 1)]
    log = tmp_path / "switch.log"
    # Main lcore 0 waits on stdin; lcore 1 forwards. Its own file prefix and memory.
    proc = subprocess.Popen(
        ["dpdk-testpmd", "-l", "0,1", "--no-pci", "--file-prefix", f"snic-snvsw{tag}", "-m", "256",
         "--single-file-segments", *(f"--vdev=net_vhost{i},iface={s},queues={queues}"
                                     for i, s in enumerate(socks)),
         "--", "--forward-mode=io", "--auto-start", "--total-num-mbufs=8192",
         f"--rxq={queues}", f"--txq={queues}", "--nb-cores=1", "--no-lsc-interrupt"],
        stdin=subprocess.PIPE, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        st.poll(lambda: proc.poll() is not None or all(s.exists() for s in socks) or None,
                "the switch's vhost-user sockets")
        assert proc.poll() is None, log.read_text()
        yield socks
    finally:
        # Enter stops it (and it removes its files); a switch that does not stop is killed.
        with contextlib.suppress(OSError):
            proc.stdin.write(b"\n")
            proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        st.remove_daemon_leftovers(f"snvsw{tag}")


@contextlib.contextmanager
def virtio_daemon(daemons, mem_args, tmp_path: Path, queues: int = 1,
                  cores: str = "0") -> Iterator[tuple[st.Daemon, dict]]:
    if shutil.which("dpdk-testpmd") is None:
        pytest.skip("dpdk-testpmd (Debian's dpdk) is not installed")
    if "--no-huge" in mem_args:
        pytest.skip("vhost-user shares the driver's memory: hugepages are needed")
    # Short (interface names take 15 characters) and unique to this call.
    tag = hashlib.sha256(st.unique("t", maxlen=40).encode()).hexdigest()[:8]
    with switch(tmp_path, tag, queues) as socks:
        name = st.unique("virtio", maxlen=24)
        sock_dir = tmp_path / "sockets"
        sock_dir.mkdir()
        # vhost-user maps the driver's memory region by region (at most 8): one file.
        d = daemons(name, ["-l", cores, "--no-pci", "--single-file-segments", *mem_args,
                           *(f"--vdev=net_virtio_user{i},path={s},queues={queues},speed=10000"
                             for i, s in enumerate(socks))],
                    ["--port", f"net_virtio_user0,ip={SUBNET}.1/24,queues={queues}",
                     "--port", f"net_virtio_user1,ip={SUBNET}.2/24,queues={queues}",
                     "--idle-backoff", "20"],
                    ctrl=str(sock_dir / f"{name}.sock"))
        d.wait_ready()
        env = rcm.env_for(sock_dir)
        yield d, env


def tcp_counters(d: st.Daemon) -> list[dict]:
    return [st.telemetry_query(d.prefix, f"/snic/tcp_stats,{i}")[0]["/snic/tcp_stats"]
            for i in (0, 1)]


def test_rdma_tools_run_across_two_virtio_ports(daemons, mem_args, tmp_path, monkeypatch):
    with virtio_daemon(daemons, mem_args, tmp_path) as (d, env):
        status = st.ctl_status_ok(d.ctrl)
        assert [p.offloads for p in status.ports] == [VIRTIO_OFFLOADS] * 2, status
        assert [p.link for p in status.ports] == ["up", "up"], status
        out = d.stdout()
        assert re.search(r"port 0 \(net_virtio_user0\): offloads tx-tcp-cksum,rx-cksum", out), out
        assert "TCP buffers 256 KiB: 10000 Mb/s x 100 us" in out, out
        # Payloads are copied: the back end reads only the memory DPDK told it of.
        assert "payloads copied (the device's back end reads only the driver's own memory)" \
            in out, out

        # RoCEv2: rdma-core's RC ping-pong, 500 exchanges of 4 KiB.
        port = str(st.free_tcp_port())
        server = subprocess.Popen([str(rcm.SNIC_RUN), "ibv_rc_pingpong", "-d", f"{d.name}_0", "-g",
                                   "0", "-p", port, "-s", "4096", "-n", "500"], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            st.poll(lambda: server.poll() is not None or st.listening(int(port)) or None,
                    "ibv_rc_pingpong's server")
            client = subprocess.run([str(rcm.SNIC_RUN), "ibv_rc_pingpong", "-d", f"{d.name}_1",
                                     "-g", "0", "-p", port, "-s", "4096", "-n", "500",
                                     "127.0.0.1"], env=env, capture_output=True, text=True,
                                    timeout=120)
            assert client.returncode == 0, client.stdout + client.stderr
            assert server.wait(timeout=60) == 0, server.stdout.read()
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        assert "500 iters" in client.stdout, client.stdout

        # iWARP: rping checks every byte of 100 exchanges of 65,000.
        monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_iw0,{d.name}_iw1")
        sock_dir = Path(env["SNIC_SOCKET_DIR"])
        port = str(st.free_tcp_port())
        rcm.client_server(d, sock_dir, tmp_path,
                          ["rping", "-s", "-a", f"{SUBNET}.1", "-p", port, "-C", "100", "-S",
                           "65000", "-V"],
                          ["rping", "-c", "-a", f"{SUBNET}.1", "-I", f"{SUBNET}.2", "-p", port,
                           "-C", "100", "-S", "65000", "-V"])
        for s in tcp_counters(d):
            # Each side sent its segments with the pseudo-header's sum alone (the driver asks
            # the back end to complete it: virtio's NEEDS_CSUM); the switch's vhost ports,
            # which do not take checksum offloads, completed them, and each side found every
            # checksum good.
            assert s["segments_in"] > 0 and s["bad_segment"] == s["bad_checksum"] == 0, s


def test_perftest_write_bandwidth_over_virtio(daemons, mem_args, tmp_path, monkeypatch):
    with virtio_daemon(daemons, mem_args, tmp_path) as (d, env):
        sock_dir = Path(env["SNIC_SOCKET_DIR"])
        monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_0,{d.name}_1")
        common = ["ib_write_bw", "-R", "-n", "500", "-s", "65536"]
        port = str(st.free_tcp_port())
        server = rcm.start_server(d, sock_dir, tmp_path / "server.out", *common, "-p", port, "-d",
                                  f"{d.name}_0",
                                  env=rcm.env_for(sock_dir, SNIC_DEVICES=f"{d.name}_0"))
        try:
            client = rcm.run_client(sock_dir, *common, "-p", port, "-d", f"{d.name}_1",
                                    f"{SUBNET}.1",
                                    env=rcm.env_for(sock_dir, SNIC_DEVICES=f"{d.name}_1"))
            if client.returncode == 0:
                server.wait()
        finally:
            server.kill()
        assert client.returncode == 0, f"{rcm.shown(client)}\nserver:\n{server.describe()}"
        rows = rcm.PERFTEST_ROW.findall(client.stdout.split("#bytes", 1)[-1])
        assert rows, rcm.shown(client)
        print(f"ib_write_bw -R over virtio-user, 64 KiB: {rows[0]}")


def test_one_virtio_port_across_two_lcores(daemons, mem_args, tmp_path, monkeypatch):
    """queues=2 on both virtio ports and `-l 0-1`: each port's lanes on both lcores. The
    switch forwards queue i to queue i, so a client on lane 1 of one port talking to one on
    lane 0 of the other makes every packet cross lanes at both ends (test_lanes.py's wire
    does the same in-process)."""
    with virtio_daemon(daemons, mem_args, tmp_path, queues=2, cores="0-1") as (d, env):
        stats = tl.port_stats(d)
        assert [[p["lane0"]["lcore"], p["lane1"]["lcore"]] for p in stats] == [[0, 1], [1, 0]]
        sock_dir = Path(env["SNIC_SOCKET_DIR"])
        dispatched = tl.lane_figures(d, "roce_dispatched")
        handed = tl.lane_figures(d, "rx_to_lanes")
        hold = Watch(env, f"{d.name}_1", tmp_path / "hold.log")  # the client goes to lane 1
        try:
            rc.pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                        ["-s", "4096", "-n", "2000"])
            monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_0,{d.name}_1")
            # 2 QPs x 16 WRs of 3 frames: 96 frames in flight, well within the 256 descriptors
            # of a virtio queue, so that the switch loses none (a loss would look like a
            # packet out of order to the check below).
            out = pt.perftest(d, sock_dir, "ib_write_bw", "-s", "4096", "-n", "2000", "-q", "2",
                              "-t", "16", *pt.NO_CLOCK_CHECK)
            assert "4096" in out, out
        finally:
            hold.stop()
        got = tl.moved(dispatched, tl.lane_figures(d, "roce_dispatched"))
        out = tl.moved(handed, tl.lane_figures(d, "rx_to_lanes"))
        assert got[0][0] >= 2000 and got[1][1] >= 2000, got
        assert out[0][1] >= 2000 and out[1][0] >= 2000, out
        tl.assert_in_order(d)
        # iWARP over the same ports: the client's process on port 1's lane 1 (another holds
        # its device on lane 0), its connection's segments handed there by their TCP port.
        monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_iw0,{d.name}_iw1")
        port = str(st.free_tcp_port())
        hold = Watch(env, f"{d.name}_iw1", tmp_path / "hold_iw.log")
        try:
            segments = tl.tcp_lanes(d, "rx_segments")
            rcm.client_server(d, sock_dir, tmp_path,
                              ["rping", "-s", "-a", f"{SUBNET}.1", "-p", port, "-C", "200", "-V"],
                              ["rping", "-c", "-a", f"{SUBNET}.1", "-I", f"{SUBNET}.2", "-p",
                               port, "-C", "200", "-V"])
            got = tl.moved(segments, tl.tcp_lanes(d, "rx_segments"))
        finally:
            hold.stop()
        assert got[0][0] >= 400 and got[1][1] >= 400, got
        assert got[0][1] == 0 and got[1][0] == 0, got
