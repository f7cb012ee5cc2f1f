"""snicd on net_tap ports, whose kernel ends a Linux bridge joins: a driver with checksum
offloads and a link the kernel sets (the tap driver reports the kernel interface's state as
its link; the kernel ends get MACs of their own).

Link events: `ip link set TAP down` gives every client of the port's devices
IBV_EVENT_PORT_ERR, and up again IBV_EVENT_PORT_ACTIVE (rdma-core's ibv_asyncwatch,
unmodified, under snic-run); ibv_devinfo reports PORT_DOWN meanwhile; the other port's clients
hear nothing. An RC QP whose path goes down for a moment rides through it by
retransmission: ibv_rc_pingpong across the bridge goes on.

Offloads: the port uses the tap driver's IPv4 and TCP checksums on transmit and its verdict
on receive (snicctl status says so); snic's TCP moves bytes both ways, exact, with the
kernel's TCP in a namespace behind the bridge, and iWARP between the two ports carries
rping -V's data; the same with offloads=off."""

from __future__ import annotations

import contextlib
import hashlib
import json
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
def tap_pair(daemons, mem_args, tmp_path: Path, port_extra: str = "", others: tuple = (),
             args: tuple = ()) -> Iterator[tuple[st.Daemon, list[str], dict]]:
    """One snicd on net_tap0 and net_tap1 (SUBNET.1 and .2, each port spec followed by
    PORT_EXTRA, then ARGS), their kernel interfaces in a bridge with the interfaces OTHERS;
    yields (daemon, the two interface names, the tools' environment) once the bridge is up
    and takes it down after."""
    if not Path("/dev/net/tun").exists():
        pytest.skip("no /dev/net/tun: the tap driver needs it")
    # Short (interface names take 15 characters) and unique to this call.
    tag = hashlib.sha256(st.unique("t", maxlen=40).encode()).hexdigest()[:8]
    taps = [f"snlk{tag}a", f"snlk{tag}b"]
    bridge = f"snbr{tag}"
    name = st.unique("tap", maxlen=24)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir(parents=True)
    try:
        d = daemons(name, ["-l", "0", "--no-pci", f"--vdev=net_tap0,iface={taps[0]}",
                           f"--vdev=net_tap1,iface={taps[1]}", *mem_args],
                    ["--port", f"net_tap0,ip={SUBNET}.1/24{port_extra}",
                     "--port", f"net_tap1,ip={SUBNET}.2/24{port_extra}",
                     "--idle-backoff", "20", *args], ctrl=str(sock_dir / f"{name}.sock"))
        d.wait_ready()
        ip("link", "add", bridge, "type", "bridge")
        for i, t in enumerate(taps):
            st.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{t}.disable_ipv6=1"])
            # The tap driver gives the kernel's end the port's own MAC; a bridge takes frames
            # to a MAC of one of its ports as its own and would never pass them on.
            ip("link", "set", t, "address", f"02:00:5e:10:00:0{i + 1}")
            ip("link", "set", t, "master", bridge)
        for o in others:
            ip("link", "set", o, "master", bridge)
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


KERNEL_IP = f"{SUBNET}.9"
TAP_OFFLOADS = "tx-ipv4-cksum,tx-tcp-cksum,rx-cksum"


def stop_counters(d: st.Daemon, port: int, what: str) -> dict[str, int]:
    """The counters snicd printed for port PORT's WHAT ("tcp") when it stopped."""
    m = re.search(rf"^snicd: port {port} {what}:(.*)$", d.stdout(), re.M)
    assert m, d.stdout()[-3000:]
    return {k: int(n) for k, n in re.findall(r"(\w+)=(\d+)", m[1])}


def checks_offloads(d: st.Daemon, offloads: str) -> None:
    want = TAP_OFFLOADS if offloads == "on" else "none"
    assert re.search(rf"port 0 \(net_tap0\): offloads {re.escape(want)}", d.stdout()), d.stdout()


def checks_verdicts(tcp: dict[str, int], offloads: str) -> None:
    """Every segment snic's TCP took came with the device's good verdict, or none did."""
    assert tcp.get("bad_segment", 0) == 0, tcp
    if offloads == "on":
        assert tcp["checksum_offloaded"] == tcp["segments_in"] > 0, tcp
    else:
        assert "checksum_offloaded" not in tcp and tcp["segments_in"] > 0, tcp


@pytest.mark.parametrize("offloads", ["on", "off"])
def test_snics_tcp_on_the_tap_moves_exact_bytes_with_the_kernel_both_ways(
        daemons, mem_args, tmp_path, veth_ns, offloads):
    """snic's TCP on port 0 against the kernel's in a namespace behind the bridge, 16 MiB
    each way, byte-exact (each side checks the other's CRC-32): the kernel checks every
    checksum the tap driver completed for snic, and snic takes the driver's verdict on the
    kernel's (counted: checksum_offloaded). With offloads=off, snic does both itself."""
    import test_tcp as tt  # the kernel's side

    nbytes = 16 << 20
    v = veth_ns(f"{KERNEL_IP}/24")
    st.run(["ip", "netns", "exec", v.ns, "ethtool", "-K", v.peer, "tx", "off"], check=True)
    extra = f",offloads={offloads}"
    # The kernel sends to snic's tcp-sink.
    with tap_pair(daemons, mem_args, tmp_path / "sink", extra, (v.host,),
                  ("--selftest", "tcp-sink,port=5002")) as (d, _, _):
        assert [p.offloads for p in st.ctl_status_ok(d.ctrl).ports] == \
            [TAP_OFFLOADS if offloads == "on" else "none"] * 2
        res = tt.in_ns(v, "client", f"{SUBNET}.1", "5002", str(nbytes), timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr + d.describe()
        kernel = json.loads(res.stdout.strip().splitlines()[-1])
        assert kernel["answer"] == f"{nbytes} {kernel['crc32']}", kernel
        assert d.wait(timeout=60) == 0, d.describe()
        checks_offloads(d, offloads)
        checks_verdicts(stop_counters(d, 0, "tcp"), offloads)
    # snic's tcp-send sends to the kernel.
    srv = tt.kernel_server(v)
    try:
        with tap_pair(daemons, mem_args, tmp_path / "send", extra, (v.host,),
                      ("--selftest", f"tcp-send,dst={KERNEL_IP}:5001,bytes={nbytes}")) as \
                (d, _, _):
            assert d.wait(timeout=180) == 0, d.describe()
            out, err = tt.finish(srv, timeout=30)
            m = tt.SEND.search(d.stdout())
            assert m, d.describe()
            kernel = json.loads(out.strip().splitlines()[-1])
            assert kernel["bytes"] == nbytes and kernel["crc32"] == m[3], (kernel, m[0])
            checks_offloads(d, offloads)
            checks_verdicts(stop_counters(d, 0, "tcp"), offloads)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


@pytest.mark.parametrize("offloads", ["on", "off"])
def test_iwarp_between_the_tap_ports_carries_rping_data(daemons, mem_args, tmp_path, offloads,
                                                        monkeypatch):
    """rping -V between the ports' iWARP devices through the bridge: each side's TCP
    checksums completed by the driver and judged by it on the other side."""
    import test_rdmacm as rcm

    with tap_pair(daemons, mem_args, tmp_path, f",offloads={offloads}") as (d, _, env):
        port = str(st.free_tcp_port())
        sock_dir = Path(env["SNIC_SOCKET_DIR"])
        monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_iw0,{d.name}_iw1")
        rcm.client_server(d, sock_dir, tmp_path,
                          ["rping", "-s", "-a", f"{SUBNET}.1", "-p", port, "-C", "300", "-S",
                           "65000", "-V"],
                          ["rping", "-c", "-a", f"{SUBNET}.1", "-I", f"{SUBNET}.2", "-p", port,
                           "-C", "300", "-S", "65000", "-V"])
        for i in (0, 1):
            stats = st.telemetry_query(d.prefix, f"/snic/tcp_stats,{i}")[0]["/snic/tcp_stats"]
            checks_verdicts({k: n for k, n in stats.items() if n != 0}, offloads)
