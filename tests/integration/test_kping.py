"""snic-kping, the kernel TCP/UDP ping-pong the benchmark compares snic with, over the veth
pair of scripts/kping-net.sh: it completes at 8 B and 64 KiB (UDP: one 60000-byte
datagram), reports ordered statistics, and refuses bad flags. The namespaces are removed
also when a test fails. Nothing asserts on time."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

import snictest as st

KPING = st.BUILD / "tools" / "kping" / "snic-kping"
NET = st.REPO / "scripts" / "kping-net.sh"


@pytest.fixture(scope="module")
def net():
    if not os.access(KPING, os.X_OK):
        pytest.fail(f"{KPING} is not built (ninja -C {st.BUILD})")
    try:
        subprocess.run([str(NET), "up"], check=True, capture_output=True, text=True, timeout=60)
        yield
    finally:
        subprocess.run([str(NET), "down"], capture_output=True, timeout=60)


def bound(proto: str, port: int) -> bool:
    flag = "-Hltn" if proto == "tcp" else "-Hlun"
    out = subprocess.run(["ip", "netns", "exec", "snic-kping-b", "ss", flag, f"sport = :{port}"],
                         capture_output=True, text=True).stdout
    return bool(out.strip())


@pytest.mark.parametrize("proto,size", [("tcp", 8), ("tcp", 65536), ("udp", 8), ("udp", 60000)])
def test_pingpong_over_veth(net, proto, size):
    port = 19200 + size % 97 + (proto == "udp")
    server = subprocess.Popen(["ip", "netns", "exec", "snic-kping-b", str(KPING), "server", f"--{proto}",
                               "-p", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        st.poll(lambda: bound(proto, port) or server.poll() is not None, "snic-kping server")
        res = subprocess.run(["ip", "netns", "exec", "snic-kping-a", str(KPING), "client", f"--{proto}",
                              "-p", str(port), "-s", str(size), "-n", "300", "-w", "10", "--json",
                              "198.18.7.2"], capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, server.stderr.read()
    r = json.loads(res.stdout)
    assert (r["test"], r["size"], r["iterations"]) == (f"kernel-{proto}", size, 300)
    t = r["rtt_us"]
    assert 0 < t["min"] <= t["median"] <= t["p99"] <= t["p999"] <= t["max"], r


@pytest.mark.parametrize("args,why", [
    (["client", "--udp", "-s", "70000", "198.18.7.2"], "at most 65507 bytes"),
    (["client", "-s", "8"], "needs a HOST"),
    (["client", "198.18.7.2"], "needs -s SIZE"),
    (["client", "-s", "0", "h"], "invalid size"),
    (["sideways"], "unknown mode"),
    (["server", "-p", "99999"], "invalid port"),
])
def test_bad_flags_are_usage_errors(args, why):
    res = subprocess.run([str(KPING), *args], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and why in res.stderr, res
