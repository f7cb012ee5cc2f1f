"""A port's link going down and up, as a NIC's does: snicd on two net_tap ports whose kernel
ends a Linux bridge joins (the tap driver reports the kernel interface's state as its link; their kernel ends get MACs of their own).
`ip link set TAP down` gives every client of the port's devices IBV_EVENT_PORT_ERR, and up
again IBV_EVENT_PORT_ACTIVE (rdma-core's ibv_asyncwatch, unmodified, under snic-run);
ibv_devinfo reports PORT_DOWN meanwhile; the other port's clients hear nothing. An RC QP
whose path goes down for a moment rides through it by retransmission: ibv_rc_pingpong
across the bridge finishes every iteration."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SUBNET = "198.18.23"


def ip(*args: str) -> None:
    st.run(["ip", *args], check=True)


@contextlib.contextmanager
def tap_pair(daemons, mem_args, tmp_path: Path) -> Iterator[tuple[st.Daemon, list[str], dict]]:
    """One snicd on net_tap0 and net_tap1 (SUBNET.1 and .2), their kernel interfaces in a
    bridge; yields (daemon, the two interface names, the tools' environment) and takes the
    bridge down after."""
    if not Path("/dev/net/tun").exists():
        pytest.skip("no /dev/net/tun: the tap driver needs it")
    tag = st.unique("", maxlen=8)
    taps = [f"snlk{tag}a", f"snlk{tag}b"]
    bridge = f"snbr{tag}"
    name = st.unique("link", maxlen=24)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    try:
        d = daemons(name, ["-l", "0", "--no-pci", f"--vdev=net_tap0,iface={taps[0]}",
                           f"--vdev=net_tap1,iface={taps[1]}", *mem_args],
                    ["--port", f"net_tap0,ip={SUBNET}.1/24", "--port", f"net_tap1,ip={SUBNET}.2/24",
                     "--idle-backoff", "20"], ctrl=str(sock_dir / f"{name}.sock"))
        d.wait_ready()
        ip("link", "add", bridge, "type", "bridge")
        for i, t in enumerate(taps):
            st.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{t}.disable_ipv6=1"])
            # The tap driver gives the kernel's end the port's own MAC; a bridge takes frames
            # to a MAC of one of its ports as its own and would never pass them on.
            ip("link", "set", t, "address", f"02:00:5e:10:00:0{i + 1}")
            ip("link", "set", t, "master", bridge)
        st.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{bridge}.disable_ipv6=1"])
        ip("link", "set", bridge, "up")
        env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
        env.pop("LD_PRELOAD", None)
        yield d, taps, env
    finally:
        st.run(["ip", "link", "delete", bridge])


def port_state(env: dict, device: str) -> str:
    res = subprocess.run([str(SNIC_RUN), "ibv_devinfo", "-d", device], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    m = re.search(r"state:\s+(PORT_\w+)", res.stdout)
    assert m, res.stdout
    return m[1]


class Watch:
    """ibv_asyncwatch on one device, its output in a file."""

    def __init__(self, env: dict, device: str, log: Path):
        self.log = log
        self.proc = subprocess.Popen([str(SNIC_RUN), "ibv_asyncwatch", "-d", device], env=env,
                                     stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        # Its first line, once the device is open and it waits for events.
        st.poll(lambda: "async event FD" in self.text() or None, f"ibv_asyncwatch on {device}")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def events(self) -> list[str]:
        return re.findall(r"event_type (IBV_EVENT_\w+) \(\d+\), port (\d+)", self.text())

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def test_link_down_and_up_reach_every_client_of_the_port(daemons, mem_args, tmp_path):
    with tap_pair(daemons, mem_args, tmp_path) as (d, taps, env):
        assert port_state(env, f"{d.name}_0") == "PORT_ACTIVE"
        watches = {dev: Watch(env, dev, tmp_path / f"{dev}.log")
                   for dev in (f"{d.name}_0", f"{d.name}_iw0", f"{d.name}_1")}
        try:
            ip("link", "set", taps[0], "down")
            for dev in (f"{d.name}_0", f"{d.name}_iw0"):
                st.poll(lambda: watches[dev].events() or None, f"{dev}'s port event")
                assert watches[dev].events() == [("IBV_EVENT_PORT_ERR", "1")], watches[dev].text()
            assert port_state(env, f"{d.name}_0") == "PORT_DOWN"
            assert port_state(env, f"{d.name}_1") == "PORT_ACTIVE"
            ip("link", "set", taps[0], "up")
            for dev in (f"{d.name}_0", f"{d.name}_iw0"):
                st.poll(lambda: len(watches[dev].events()) == 2 or None,
                        f"{dev}'s second port event")
                assert watches[dev].events() == [("IBV_EVENT_PORT_ERR", "1"),
                                                 ("IBV_EVENT_PORT_ACTIVE", "1")], \
                    watches[dev].text()
            assert port_state(env, f"{d.name}_0") == "PORT_ACTIVE"
            # The other port's link never moved: its client heard nothing.
            assert watches[f"{d.name}_1"].events() == [], watches[f"{d.name}_1"].text()
        finally:
            for w in watches.values():
                w.stop()
        out = d.stdout() + d.stderr()
        assert re.search(r"port 0: link down", out) and re.search(r"port 0: link up", out), out


def test_an_rc_qp_rides_through_a_short_outage_by_retransmission(daemons, mem_args, tmp_path):
    """The pingpong's path goes down until a requester's ACK timer has fired (ibv_rc_pingpong
    asks for 7 retries of 67 ms), then up: its QPs stay in RTS and their messages go on."""
    import test_observability as obs  # its live pingpong and QP rows

    with tap_pair(daemons, mem_args, tmp_path) as (d, taps, env):
        sock_dir = Path(env["SNIC_SOCKET_DIR"])
        with obs.live_pingpong(d, sock_dir, tmp_path) as (server, client):
            s, c = st.poll(lambda: obs.pingpong_qps(d, server, client), "both QPs in RTS")

            def timeouts() -> int:
                return sum(int(st.ctl_qp(d, q["qpn"], "-a")["timeouts"]) for q in (s, c))

            # (Each QP's first message waited for ARP across the bridge, and timed out once.)
            before = timeouts()
            ip("link", "set", taps[0], "down")
            try:
                st.poll(lambda: timeouts() > before or None, "an ACK timer to fire in the outage")
            finally:
                ip("link", "set", taps[0], "up")
            after = st.ctl_qp(d, c["qpn"], "-a")

            def moved():
                now = st.ctl_qp(d, c["qpn"], "-a")
                return now if int(now["msn"]) > int(after["msn"]) + 100 else None
            later = st.poll(moved, "the client QP's messages to go on after the outage")
            assert later["state"] == "RTS" and later["failed"] == "no", later
            for p in (server, client):
                assert p.poll() is None, f"ibv_rc_pingpong (pid {p.pid}) exited {p.returncode}"
