"""RoCEv2 RC between snic devices with rdma-core's own, unmodified ibv_rc_pingpong and
ibv_srq_pingpong under snic-run: server and client each on its own device, the GID
index of the RoCEv2 GID (0), sizes from 1 byte to 1 MiB, with and without completion
events (-e). Across the virtual wire of one daemon (two ports), and across two daemons
joined by a veth pair."""

from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(sock_dir) -> dict:
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    env.pop("LD_PRELOAD", None)
    return env


def pingpong(tool: str, server_dev: str, client_dev: str, sock_dir, args: list[str],
             timeout: float = 120) -> None:
    """Runs `tool` as server on server_dev and client on client_dev; both must exit 0."""
    port = str(free_tcp_port())
    common = ["-g", "0", "-p", port, "-c", *args]  # -c: the tool checks every byte received
    env = env_for(sock_dir)
    server = subprocess.Popen([str(SNIC_RUN), tool, "-d", server_dev, *common], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The client retries its TCP connection until the server listens.
        client = None
        for _ in range(200):
            client = subprocess.run([str(SNIC_RUN), tool, "-d", client_dev, *common, "127.0.0.1"],
                                    env=env, capture_output=True, text=True, timeout=timeout)
            if "Couldn't connect" not in client.stderr + client.stdout:
                break
            if server.poll() is not None:
                break
        out, _ = server.communicate(timeout=timeout)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert client is not None
    assert client.returncode == 0, f"client: {client.stdout}\n{client.stderr}\nserver: {out}"
    assert server.returncode == 0, f"server: {out}\nclient: {client.stdout}\n{client.stderr}"
    for text in (out, client.stdout):
        assert "bytes in" in text, text  # the tool's own summary after verifying the data


@pytest.fixture(scope="module")
def wire_daemon(tmp_path_factory, mem_args):
    with st.wire_daemon(tmp_path_factory, mem_args, "rc", "198.18.13") as wire:
        yield wire


@pytest.mark.parametrize("size", [1, 4096, 65536, 1 << 20])
def test_rc_pingpong_over_the_wire(wire_daemon, size):
    d, sock_dir = wire_daemon
    iters = "200" if size <= 65536 else "20"
    pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
             ["-s", str(size), "-n", iters])


def test_rc_pingpong_with_completion_events(wire_daemon):
    d, sock_dir = wire_daemon
    pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
             ["-s", "4096", "-n", "200", "-e"])


@pytest.mark.parametrize("size", [1, 65536])
def test_srq_pingpong_over_the_wire(wire_daemon, size):
    d, sock_dir = wire_daemon
    pingpong("ibv_srq_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
             ["-s", str(size), "-n", "100", "-q", "4"])


def test_rc_pingpong_loopback_on_one_port(wire_daemon):
    """Both QPs on one port: the same engines, without the wire."""
    d, sock_dir = wire_daemon
    pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_0", sock_dir, ["-s", "4096", "-n", "100"])


def test_rc_and_srq_pingpong_between_two_daemons_on_a_veth(daemons, veth_ns, mem_args, tmp_path):
    """snicd A on one end of a veth pair (root namespace), snicd B on the other end (its
    own namespace), each net_af_packet on its end: two hosts, one wire."""
    v = veth_ns("198.18.15.99/24")  # the kernel's own address there stays out of the way
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    a_name, b_name = st.unique("rca", maxlen=24), st.unique("rcb", maxlen=24)
    a = daemons(a_name, ["-l", "0", "--no-pci", f"--vdev=net_af_packet0,iface={v.host}", *mem_args],
                ["--port", "0,ip=198.18.14.1/24", "--idle-backoff", "20"],
                ctrl=str(sock_dir / f"{a_name}.sock"))
    b = daemons(b_name, ["-l", "1", "--no-pci", f"--vdev=net_af_packet0,iface={v.peer}", *mem_args],
                ["--port", "0,ip=198.18.14.2/24", "--idle-backoff", "20"],
                ctrl=str(sock_dir / f"{b_name}.sock"), netns=v.ns)
    a.wait_ready()
    b.wait_ready()
    for size in (1, 4096, 1 << 20):
        pingpong("ibv_rc_pingpong", f"{a_name}_0", f"{b_name}_0", sock_dir,
                 ["-s", str(size), "-n", "100" if size < (1 << 20) else "10"])
    pingpong("ibv_rc_pingpong", f"{a_name}_0", f"{b_name}_0", sock_dir, ["-s", "65536", "-n", "50", "-e"])
    pingpong("ibv_srq_pingpong", f"{a_name}_0", f"{b_name}_0", sock_dir, ["-s", "4096", "-n", "50", "-q", "4"])

    # What snic puts on the wire, judged by outside authorities: a capture of the veth
    # during a pingpong (SEND FIRST/MIDDLE/LAST/ONLY and ACKs), dissected by tshark's
    # infiniband dissector with no malformed packet or expert warning, every ICRC as
    # scapy's RoCE layer computes it.
    pcap = tmp_path / "rc.pcap"
    cap = subprocess.Popen(["dumpcap", "-q", "-P", "-i", v.host, "-f", "udp port 4791",
                            "-w", str(pcap)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:
        # dumpcap says when its capture runs; its file exists before that.
        line = cap.stderr.readline()
        assert "Capturing on" in line, line + (cap.stderr.read() if cap.poll() is not None else "")
        pingpong("ibv_rc_pingpong", f"{a_name}_0", f"{b_name}_0", sock_dir,
                 ["-s", "3000", "-n", "200"])
    finally:
        cap.terminate()
        cap.wait(timeout=30)
    check = st.run(["/usr/bin/python3", str(st.REPO / "tests" / "interop" / "check_roce_pcap.py"),
                    str(pcap)], timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    print(check.stdout.strip())
    m = re.search(r"(\d+) RoCEv2", check.stdout)
    assert m and int(m[1]) >= 400, check.stdout  # 200 round trips: 3 packets each way, and ACKs
