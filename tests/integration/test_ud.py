"""RoCEv2 UD between snic devices with rdma-core's own, unmodified ibv_ud_pingpong under
snic-run: server and client each on its own device (the two ports of one daemon's virtual
wire), the RoCEv2 GID (index 0), every byte received checked by the tool (-c), with and
without completion events. Each receive buffer starts with the 40-byte GRH area, which the
tool skips; its address handle comes from the peer's GID."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
    return f":{port}" in out


def ud_pingpong(server_dev: str, client_dev: str, sock_dir, args: list[str],
                timeout: float = 120) -> None:
    """ibv_ud_pingpong as server on server_dev and client on client_dev; both must exit 0."""
    port = free_tcp_port()
    common = ["ibv_ud_pingpong", "-g", "0", "-p", str(port), "-c", *args]
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    env.pop("LD_PRELOAD", None)
    server = subprocess.Popen([str(SNIC_RUN), *common, "-d", server_dev], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              stdin=subprocess.DEVNULL)
    try:
        st.poll(lambda: listening(port) or server.poll() is not None, "ibv_ud_pingpong listening")
        assert server.poll() is None, f"server exited: {server.communicate()[0]}"
        client = subprocess.run([str(SNIC_RUN), *common, "-d", client_dev, "127.0.0.1"], env=env,
                                capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL)
        out, _ = server.communicate(timeout=timeout)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert client.returncode == 0, f"client: {client.stdout}\n{client.stderr}\nserver: {out}"
    assert server.returncode == 0, f"server: {out}\nclient: {client.stdout}\n{client.stderr}"
    for text in (out, client.stdout):
        assert "bytes in" in text, text  # the tool's own summary after verifying the data


@pytest.fixture(scope="module")
def wire_daemon(tmp_path_factory, mem_args):
    if subprocess.run(["which", "ibv_ud_pingpong"], capture_output=True).returncode != 0:
        pytest.fail("ibv_ud_pingpong is missing: scripts/setup.sh installs ibverbs-utils")
    with st.wire_daemon(tmp_path_factory, mem_args, "ud", "198.18.47") as wire:
        yield wire


@pytest.mark.parametrize("size", [1, 512, 1024])
def test_ud_pingpong_over_the_wire(wire_daemon, size):
    d, sock_dir = wire_daemon
    ud_pingpong(f"{d.name}_0", f"{d.name}_1", sock_dir, ["-s", str(size), "-n", "200"])


def test_ud_pingpong_with_completion_events(wire_daemon):
    d, sock_dir = wire_daemon
    ud_pingpong(f"{d.name}_0", f"{d.name}_1", sock_dir, ["-s", "1024", "-n", "200", "-e"])


def test_ud_pingpong_loopback_on_one_port(wire_daemon):
    """Both QPs on one port: the same engine, the frames looped back without the wire."""
    d, sock_dir = wire_daemon
    ud_pingpong(f"{d.name}_0", f"{d.name}_0", sock_dir, ["-s", "256", "-n", "100"])


def test_ud_packets_are_counted_and_none_is_bad(wire_daemon):
    """After the runs above, both ports sent and received RoCEv2 packets, none with a bad
    ICRC, and none reached QP1 (the runs use ordinary QPs only)."""
    d, _ = wire_daemon
    replies = st.telemetry_query(d.prefix, "/snic/roce_stats,0", "/snic/roce_stats,1")
    for stats in (r["/snic/roce_stats"] for r in replies):
        assert stats["rx_packets"] > 0 and stats["tx_packets"] > 0, stats
        assert stats["roce_bad_icrc"] == 0 and stats["rx_gsi_no_hook"] == 0, stats
