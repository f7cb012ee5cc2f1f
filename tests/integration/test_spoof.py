"""A forged RDMA WRITE from a third address must not reach a connected QP.

Two daemons on the two ends of a veth pair: the peer in the root namespace, the victim in
a namespace of its own. tests/verbs/snic-spoof-victim connects an RC QP pair between them
and registers a region open to RDMA WRITE on the victim's end, filled with a known
pattern; it says the victim QP's number, the PSN its responder expects, the region's
address and rkey. The test then writes one RoCEv2 RDMA WRITE ONLY frame (scapy, with its
ICRC) straight onto the peer's end of the veth, addressed to the victim daemon's MAC, IP
and QP with the expected PSN:

- from the QP's real peer (its IP and MAC): the write is accepted. This proves that the
  frame is well formed, so that the next test cannot pass for the wrong reason;
- from a third IP and MAC on the same segment: the region stays untouched, and the
  victim's port counts the frame as dropped for its source (BAD_SOURCE_COUNTER). The very
  same frame from the peer's address is accepted afterwards.

Each frame is followed by an ICMP echo request to the victim daemon; the daemon handles
the frames of its port in order, so once its icmp_echo_answered counter has moved, the
forged frame before it has been dealt with.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

import snictest as st

# The victim port's counter of RoCEv2 packets dropped because their source address is not
# the QP's peer: RoceCounters::rx_bad_source, in the port's /snic/roce_stats.
BAD_SOURCE_COUNTER = "rx_bad_source"

VICTIM = st.BUILD / "tests" / "verbs" / "snic-spoof-victim"

SUBNET = "198.18.61"
PEER_IP = f"{SUBNET}.1"  # the peer daemon, root namespace
VICTIM_IP = f"{SUBNET}.2"  # the victim daemon, its own namespace
THIRD_IP = f"{SUBNET}.66"  # nobody's: the forger
THIRD_MAC = "02:00:5e:10:00:66"
KERNEL_IP = "198.18.62.99/24"  # the kernel's own address on the victim's veth end, out of the way

ROCE_PORT = 4791
RC_RDMA_WRITE_ONLY = 0x0A
RTS = 3  # IBV_QPS_RTS
PAYLOAD = bytes(range(0xA0, 0xB0))  # 16 bytes: no pad
OFFSET = 256  # where in the victim's region the forged write lands

LINE_TIMEOUT = 60  # s for the victim program to answer one line


def source_port(qpn: int, dest_qpn: int) -> int:
    """The UDP source port snicd puts on a QP's packets (daemon/verbs/transport.cc), so that the
    forged frames look like the peer's own."""
    h = ((qpn * 0x9E3779B1) ^ (dest_qpn * 0x85EBCA6B)) & 0xFFFFFFFF
    return 0xC000 | ((h >> 16) & 0x3FFF)



def rdma_write_only(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, sport: int,
                    dest_qpn: int, psn: int, va: int, rkey: int, payload: bytes) -> bytes:
    """Ether/IPv4/UDP/BTH/RETH/payload/ICRC, UDP checksum 0 as RoCEv2 over IPv4 allows."""
    st.quiet_scapy()
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    reth = struct.pack("!QII", va, rkey, len(payload))
    frame = (Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip, ttl=64, flags="DF")
             / UDP(sport=sport, dport=ROCE_PORT, chksum=0)
             / BTH(opcode=RC_RDMA_WRITE_ONLY, dqpn=dest_qpn, psn=psn, ackreq=1)
             / Raw(reth + payload))
    return bytes(frame)


def echo_request(src_mac: str, dst_mac: str, src_ip: str, dst_ip: str, seq: int) -> bytes:
    st.quiet_scapy()
    from scapy.layers.inet import ICMP, IP
    from scapy.layers.l2 import Ether

    return bytes(Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip)
                 / ICMP(type=8, id=0x5350, seq=seq) / b"snic spoof barrier")


@dataclass
class Topology:
    peer: st.Daemon
    victim: st.Daemon
    sock_dir: Path
    iface: str  # the peer's end of the veth, in the root namespace: frames put here reach the victim
    peer_mac: str
    victim_mac: str
    victim_port: int


@pytest.fixture
def topology(binaries, daemons, veth_ns, mem_args, tmp_path) -> Topology:
    if not os.access(VICTIM, os.X_OK):
        pytest.fail(f"{VICTIM} is not built (ninja -C {st.BUILD})")
    v = veth_ns(KERNEL_IP)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    p_name, v_name = st.unique("spp", maxlen=24), st.unique("spv", maxlen=24)
    peer = daemons(p_name, ["-l", "0", "--no-pci", f"--vdev=net_af_packet0,iface={v.host}", *mem_args],
                   ["--port", f"0,ip={PEER_IP}/24", "--idle-backoff", "20"],
                   ctrl=str(sock_dir / f"{p_name}.sock"))
    victim = daemons(v_name, ["-l", "1", "--no-pci", f"--vdev=net_af_packet0,iface={v.peer}", *mem_args],
                     ["--port", f"0,ip={VICTIM_IP}/24", "--idle-backoff", "20"],
                     ctrl=str(sock_dir / f"{v_name}.sock"), netns=v.ns)
    p_status = peer.wait_ready()
    v_status = victim.wait_ready()
    return Topology(peer, victim, sock_dir, v.host, p_status.ports[0].mac, v_status.ports[0].mac,
                    v_status.ports[0].id)


class Victim:
    """snic-spoof-victim between the victim's and the peer's device."""

    def __init__(self, topo: Topology):
        env = dict(os.environ, SNIC_SOCKET_DIR=str(topo.sock_dir))
        env.pop("LD_PRELOAD", None)
        self.cmd = [str(VICTIM), f"{topo.victim.name}_0", f"{topo.peer.name}_0"]
        self.proc = subprocess.Popen(self.cmd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.info = self._read_json()

    def _read_json(self) -> dict:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            if not sel.select(timeout=LINE_TIMEOUT):
                raise AssertionError(f"{' '.join(self.cmd)} said nothing within {LINE_TIMEOUT} s")
        finally:
            sel.close()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            raise AssertionError(f"{' '.join(self.cmd)} exited with {self.proc.returncode}: "
                                 f"{self.proc.stderr.read()}")
        return json.loads(line)

    def check(self, off: int, length: int) -> dict:
        """{"untouched": whether the whole region still holds its pattern, "bytes": region[off,
        off + length) in hex, "qp_state": the victim QP's state}."""
        self.proc.stdin.write(f"check {off} {length}\n")
        self.proc.stdin.flush()
        return self._read_json()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f and not f.closed:
                f.close()


@pytest.fixture
def victim(topology):
    vic = Victim(topology)
    try:
        yield vic
    finally:
        vic.close()


def port_stats(d: st.Daemon, port: int, command: str = "/snic/port_stats") -> dict:
    """The port's counters (COMMAND /snic/roce_stats: its RoCEv2 transport's)."""
    if not d.running():
        raise AssertionError(f"snicd {d.name} exited\n{d.describe()}")
    (reply,) = st.telemetry_query(d.prefix, f"{command},{port}")
    return reply[command]


class Wire:
    """Puts frames onto the peer's end of the veth, as a host on that segment would."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        self.sock.bind((topo.iface, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def deliver(self, frame: bytes, src_mac: str, src_ip: str) -> dict:
        """Sends `frame` and an echo request behind it from the same source; returns the
        victim port's counters once the echo was answered, i.e. once the frame is dealt with."""
        t = self.topo
        before = port_stats(t.victim, t.victim_port)["icmp_echo_answered"]
        self.seq += 1
        self.sock.send(frame)
        self.sock.send(echo_request(src_mac, t.victim_mac, src_ip, VICTIM_IP, self.seq))

        def answered() -> Optional[dict]:
            stats = port_stats(t.victim, t.victim_port)
            return stats if stats["icmp_echo_answered"] > before else None

        return st.poll(answered, "the victim daemon to answer the echo behind the frame")


@pytest.fixture
def wire(topology):
    w = Wire(topology)
    try:
        yield w
    finally:
        w.close()


def forged_write(topo: Topology, info: dict, src_mac: str, src_ip: str) -> bytes:
    assert info["victim_ip"] == VICTIM_IP and info["peer_ip"] == PEER_IP, info
    return rdma_write_only(src_mac, topo.victim_mac, src_ip, VICTIM_IP,
                           source_port(info["peer_qpn"], info["qpn"]), info["qpn"], info["psn"],
                           info["addr"] + OFFSET, info["rkey"], PAYLOAD)


def test_write_from_the_peer_is_accepted(topology, victim, wire):
    """The test's own frame, sent from the QP's peer's address, writes the region: it is a
    well-formed RDMA WRITE with the right QPN, PSN, rkey and ICRC."""
    info = victim.info
    assert victim.check(OFFSET, len(PAYLOAD))["untouched"], info
    wire.deliver(forged_write(topology, info, topology.peer_mac, PEER_IP), topology.peer_mac, PEER_IP)
    got = victim.check(OFFSET, len(PAYLOAD))
    assert got["bytes"] == PAYLOAD.hex(), (
        f"the write from the peer's own address was not accepted: {got}\n{info}\n"
        f"{topology.victim.describe()}")
    assert got["qp_state"] == RTS, got


def test_write_from_a_third_address_is_dropped(topology, victim, wire):
    """The same frame from an address that is not the QP's peer leaves the region untouched
    and is counted; from the peer's address it is then accepted (same PSN: the forged frame
    moved nothing)."""
    info = victim.info
    assert victim.check(OFFSET, len(PAYLOAD))["untouched"], info
    before = port_stats(topology.victim, topology.victim_port, "/snic/roce_stats")
    wire.deliver(forged_write(topology, info, THIRD_MAC, THIRD_IP), THIRD_MAC, THIRD_IP)
    after = port_stats(topology.victim, topology.victim_port, "/snic/roce_stats")
    got = victim.check(OFFSET, len(PAYLOAD))
    assert got["untouched"], (
        f"a forged RDMA WRITE from {THIRD_IP} ({THIRD_MAC}), not the QP's peer {PEER_IP}, was "
        f"accepted: the victim's region at +{OFFSET} now holds {got['bytes']} (QP {info['qpn']:#x}, "
        f"PSN {info['psn']:#x})")
    assert got["qp_state"] == RTS, got
    assert BAD_SOURCE_COUNTER in after, (
        f"the victim port has no counter {BAD_SOURCE_COUNTER}; its counters: {sorted(after)}")
    dropped = after[BAD_SOURCE_COUNTER] - before.get(BAD_SOURCE_COUNTER, 0)
    assert dropped == 1, f"{BAD_SOURCE_COUNTER} moved by {dropped}, not 1: {after}"

    wire.deliver(forged_write(topology, info, topology.peer_mac, PEER_IP), topology.peer_mac, PEER_IP)
    got = victim.check(OFFSET, len(PAYLOAD))
    assert got["bytes"] == PAYLOAD.hex(), (
        f"the same write from the peer's own address was not accepted afterwards: {got}")
