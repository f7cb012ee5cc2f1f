"""Hostile peers of snic's iWARP listener: the Linux kernel's TCP, in a namespace across a
veth, connects to an rdma_cm server (rping under snic-run on the port's iWARP device) and
sends what no iWARP initiator should: garbage instead of an MPA request, a request that asks
for markers, or nothing at all. snic must refuse each (an MPA reject where RFC 5044 has one,
then the connection closed), give up on the silent one after its MPA timeout, and keep
serving: a real connection (rping, looped back inside the port) works afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import snictest as st
import test_rdmacm as rcm

HOST_IP = "198.18.8.1"  # the kernel, in the namespace
SNIC_IP = "198.18.8.2"
PEER = Path(__file__).resolve().parent / "tcp_peer.py"
MPA_REQ_KEY = b"MPA ID Req Frame"
MPA_REP_KEY = b"MPA ID Rep Frame"
REJECT = 0x20
MPA_TIMEOUT_S = 10  # daemon/iwarp/iwarp_transport.h kMpaRequestWaitSeconds


@pytest.fixture
def server(daemons, veth_ns, mem_args, tmp_path):
    """snicd on the veth's host end (its iWARP device <name>_iw0 at SNIC_IP) and an rping
    server listening there; yields (daemon, socket dir, namespace, TCP port)."""
    st.require_tool("rping", "rdmacm-utils")
    v = veth_ns(f"{HOST_IP}/24")
    st.run(["ip", "netns", "exec", v.ns, "ethtool", "-K", v.peer, "tx", "off"], check=True)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    name = st.unique("iwh", maxlen=24)
    d = daemons(name, ["-l", "0", "--no-pci", f"--vdev=net_af_packet0,iface={v.host}", *mem_args],
                ["--port", f"0,ip={SNIC_IP}/24", "--idle-backoff", "20"],
                ctrl=str(sock_dir / f"{name}.sock"))
    d.wait_ready()
    port = 7471
    env = rcm.env_for(sock_dir, SNIC_DEVICES=f"{name}_iw0")
    srv = rcm.start_server(d, sock_dir, tmp_path / "rping-server.out", "rping", "-s", "-a",
                           SNIC_IP, "-p", str(port), "-C", "100", "-V", env=env)
    try:
        yield d, sock_dir, v, port, env
    finally:
        srv.kill()


def raw(v, port: int, send: bytes = b"", wait: float = 30) -> dict:
    res = st.run(["ip", "netns", "exec", v.ns, "/usr/bin/python3", str(PEER), "raw", SNIC_IP,
                  str(port), "--send", send.hex(), "--wait", str(wait)], timeout=wait + 30)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def iwarp_stats(d: st.Daemon) -> dict[str, int]:
    ids = [p.id for p in st.ctl_status_ok(d.ctrl).ports]
    reply = st.telemetry_query(d.prefix, f"/snic/iwarp_stats,{ids[0]}")[0]
    return {k: int(v) for k, v in reply["/snic/iwarp_stats"].items()}


def mpa_request(flags: int, rev: int = 2, pd: bytes = b"\x00\x01\x00\x01") -> bytes:
    return MPA_REQ_KEY + bytes([flags, rev]) + len(pd).to_bytes(2, "big") + pd


def test_garbage_markers_and_silence_are_refused_and_the_listener_keeps_serving(server):
    d, sock_dir, v, port, env = server
    before = iwarp_stats(d)

    # Not MPA at all: refused and closed at once.
    r = raw(v, port, b"GET / HTTP/1.1\r\nHost: snic\r\n\r\n" * 2)
    assert r["end"] in ("eof", "reset") and r["seconds"] < MPA_TIMEOUT_S, r

    # A revision 2 request asking for markers (M, C, enhanced): an MPA reply with R set, then
    # the connection closes (RFC 5044: snic cannot send markers; siw refuses them too).
    r = raw(v, port, mpa_request(0x80 | 0x40 | 0x10))
    assert r["end"] in ("eof", "reset"), r
    got = bytes.fromhex(r["received"])
    assert got[:16] == MPA_REP_KEY and got[16] & REJECT and not got[16] & 0x80, got.hex()

    # Nothing: the MPA request never comes; snic gives up after its MPA timeout.
    r = raw(v, port, b"", wait=MPA_TIMEOUT_S + 20)
    assert r["end"] in ("eof", "reset"), r
    assert MPA_TIMEOUT_S - 1 <= r["seconds"] < MPA_TIMEOUT_S + 20, r

    after = iwarp_stats(d)
    assert after["iw_mpa_errors"] - before["iw_mpa_errors"] >= 2, (before, after)
    assert after["iw_mpa_timeouts"] - before["iw_mpa_timeouts"] == 1, (before, after)
    assert after["iw_requests"] == before["iw_requests"], "no hostile request reached rdma_cm"

    # The listener still serves a real initiator (looped back inside the port).
    res = rcm.run_client(sock_dir, "rping", "-c", "-a", SNIC_IP, "-I", SNIC_IP, "-p", str(port),
                         "-C", "100", "-V", env=env, timeout=120)
    assert res.returncode == 0, rcm.shown(res)
    assert d.running(), d.describe()
