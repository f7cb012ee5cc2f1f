"""The Linux kernel's own rdma_cm exchange, replayed against a live snicd.

tests/vectors/rxe_snic_rping.pcap holds two rping connections between snic and the kernel's
rxe (a Debian 12 kernel in QEMU, scripts/kernel-peer.sh): snic active, then snic passive.
Here the kernel's side of each is played back, frame by frame, from a raw socket on the far
end of a veth, to a snicd with the address snic had in the capture and rping under snic-run:

- snic passive: the kernel's REQ, as captured, to snic's rping server; its RTU and its first
  SEND rewritten only where the connection's new values go (snic's comm ID, QPN and
  Starting PSN from the REP snic sends back), ICRC recomputed. snic must acknowledge that
  SEND (its receive PSN is the one its REP carried), and its first request to the kernel's
  QP (rping's RDMA READ) must carry the REQ's Starting PSN.
- snic active: snic's rping client sends a REQ; the kernel's captured REP answers it (with
  the REQ's comm ID echoed); snic's first SEND must carry the REP's Starting PSN.

These are the PSN rules of the IBA (12.7.20, 12.7.31) as Linux's CM applies them; snic once
had both swapped, which snic-to-snic tests cannot see and the kernel can.
"""

from __future__ import annotations

import os
import select
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

import snictest as st
import test_rdmacm as rcm

VECTORS = Path(os.environ.get("SNIC_TEST_VECTORS", st.REPO / "tests" / "vectors"))
CAPTURE = VECTORS / "rxe_snic_rping.pcap"
SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SNIC_IP, KERNEL_IP = "198.18.90.11", "198.18.90.2"  # as in the capture
ROCE_PORT = 4791
REQ, REP, RTU = 0x10, 0x13, 0x14  # CM attribute IDs (IBA table 104)
UD_SEND_ONLY, RC_SEND_ONLY, RC_READ_REQUEST, RC_ACK = 0x64, 0x04, 0x0C, 0x11
WAIT = 60  # s: only ever cuts a hang short



class Mad:
    """A CM MAD in a RoCEv2 frame: UD SEND ONLY to QP1, BTH + DETH + 256-byte MAD."""

    def __init__(self, frame: bytes):
        from scapy.contrib.roce import BTH
        from scapy.layers.l2 import Ether
        self.frame = frame
        self.mad = bytes(Ether(frame)[BTH].payload)[8:8 + 256]
        self.attr = int.from_bytes(self.mad[16:18], "big")
        self.tid = self.mad[8:16]

    def msg(self, off: int, n: int) -> int:
        return int.from_bytes(self.mad[24 + off:24 + off + n], "big")


# Field offsets in the message after the 24-byte MAD header (IBA 12.6.5, 12.6.8, 12.6.9).
REQ_LOCAL_COMM_ID, REQ_SERVICE_ID, REQ_LOCAL_QPN, REQ_STARTING_PSN = 0, 8, 32, 44
REP_LOCAL_COMM_ID, REP_REMOTE_COMM_ID, REP_LOCAL_QPN, REP_STARTING_PSN = 0, 4, 12, 20
RTU_LOCAL_COMM_ID, RTU_REMOTE_COMM_ID = 0, 4


def service_port(req: Mad) -> int:
    """The port of a REQ's rdma_cm service ID (port space above, port in the low 16 bits)."""
    return req.msg(REQ_SERVICE_ID, 8) & 0xFFFF


def captured() -> list[bytes]:
    st.quiet_scapy()
    from scapy.utils import rdpcap
    return [bytes(p) for p in rdpcap(str(CAPTURE))]


def roce(frame: bytes):
    """(ip src, BTH opcode, dest QPN, PSN, payload after the BTH) or None."""
    st.quiet_scapy()
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    p = Ether(frame)
    if UDP not in p or p[UDP].dport != ROCE_PORT or BTH not in p:
        return None
    b = p[BTH]
    return p[IP].src, b.opcode, b.dqpn, b.psn, bytes(b.payload)


def rewrite(frame: bytes, dst_mac: str, *, dqpn: Optional[int] = None,
            psn: Optional[int] = None, mad: Optional[bytes] = None) -> bytes:
    """The captured frame to snic's MAC, with the BTH's QPN and PSN or the MAD replaced and
    the ICRC computed again."""
    st.quiet_scapy()
    from scapy.contrib.roce import BTH
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw
    p = Ether(frame)
    p.dst = dst_mac
    b = p[BTH]
    if dqpn is not None:
        b.dqpn = dqpn
    if psn is not None:
        b.psn = psn
    if mad is not None:
        body = bytes(b.payload)
        b.remove_payload()
        b.add_payload(Raw(body[:8] + mad + body[8 + 256:]))
    b.icrc = None
    return bytes(p)


def with_fields(mad: bytes, tid: Optional[bytes] = None, **fields: tuple[int, int, int]) -> bytes:
    """`mad` with the message fields given as name=(offset, size, value) replaced."""
    m = bytearray(mad)
    if tid is not None:
        m[8:16] = tid
    for off, n, value in fields.values():
        m[24 + off:24 + off + n] = value.to_bytes(n, "big")
    return bytes(m)


def kernel_side(frames: list[bytes], snic_active: bool) -> dict[str, bytes]:
    """The captured connection in which snic was active (first) or passive (second): its
    REQ, REP, RTU and the first SEND of each side, by name."""
    conns, cur = [], None
    for f in frames:
        r = roce(f)
        if r is None:
            continue
        src, op, _, _, _ = r
        if op == UD_SEND_ONLY:
            attr = Mad(f).attr
            if attr == REQ:
                cur = {"REQ": f, "active": src}
                conns.append(cur)
            elif cur is not None and attr in (REP, RTU):
                cur.setdefault({REP: "REP", RTU: "RTU"}[attr], f)
        elif cur is not None and op == RC_SEND_ONLY:
            cur.setdefault("SEND active" if src == cur["active"] else "SEND passive", f)
    want = SNIC_IP if snic_active else KERNEL_IP
    conn = next((c for c in conns if c["active"] == want), None)
    assert conn is not None, f"no connection with {want} active in {CAPTURE}"
    return conn


class Wire:
    """The kernel's end of the veth: a raw socket that sends frames and reads snic's, and
    answers snic's ARP requests for the kernel's address with the captured kernel's MAC."""

    def __init__(self, iface: str, kernel_mac: str):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.bind((iface, 0))
        self.mac = bytes.fromhex(kernel_mac.replace(":", ""))
        self.seen: list[bytes] = []  # snic's frames not yet asked for, in order

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def _arp(self, f: bytes) -> bool:
        if len(f) < 42 or f[12:14] != b"\x08\x06" or f[20:22] != b"\x00\x01":
            return False
        if f[38:42] == socket.inet_aton(KERNEL_IP):
            reply = (f[6:12] + self.mac + b"\x08\x06" + f[14:20] + b"\x00\x02" + self.mac
                     + f[38:42] + f[22:28] + f[28:32])
            self.send(reply)
        return True

    def expect(self, what: str, match: Callable[[bytes], bool]) -> bytes:
        """The first frame from snic that `match` accepts, in the order snic sent them (ARP
        answered meanwhile): frames passed over for an earlier question stay for a later one."""
        for i, f in enumerate(self.seen):
            if match(f):
                return self.seen.pop(i)
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                break
            f = self.sock.recv(65536)
            if self._arp(f) or f[6:12] == self.mac:  # ours, seen again
                continue
            if match(f):
                return f
            self.seen.append(f)
        raise AssertionError(f"snic sent no {what} within {WAIT} s")

    def close(self) -> None:
        self.sock.close()


def is_mad(attr: int) -> Callable[[bytes], bool]:
    def m(f: bytes) -> bool:
        r = roce(f)
        return r is not None and r[1] == UD_SEND_ONLY and Mad(f).attr == attr
    return m


def is_rc(dqpn: int, *ops: int) -> Callable[[bytes], bool]:
    def m(f: bytes) -> bool:
        r = roce(f)
        return r is not None and r[2] == dqpn and r[1] in ops
    return m


@dataclass
class Setup:
    daemon: st.Daemon
    wire: Wire
    snic_mac: str
    sock_dir: Path


@pytest.fixture
def setup(binaries, daemons, mem_args, tmp_path):
    st.quiet_scapy()
    pytest.importorskip("scapy.contrib.roce")
    if not CAPTURE.is_file():
        pytest.fail(f"{CAPTURE} is missing")
    snic_end, kernel_end = st.unique("sh"), st.unique("sp")
    for l in (snic_end, kernel_end):
        st.delete_link(l)
    st.run(["ip", "link", "add", snic_end, "type", "veth", "peer", "name", kernel_end], check=True)
    wire = None
    try:
        for l in (snic_end, kernel_end):
            st.disable_ipv6(l)
            st.run(["ip", "link", "set", l, "up"], check=True)
        sock_dir = tmp_path / "sockets"
        sock_dir.mkdir()
        name = st.unique("cmr", maxlen=24)
        d = daemons(name, ["-l", "0", "--no-pci", f"--vdev=net_af_packet0,iface={snic_end}", *mem_args],
                    ["--port", f"0,ip={SNIC_IP}/24", "--idle-backoff", "20"],
                    ctrl=str(sock_dir / f"{name}.sock"))
        status = d.wait_ready()
        from scapy.layers.l2 import Ether
        kernel_mac = Ether(kernel_side(captured(), snic_active=False)["REQ"]).src
        wire = Wire(kernel_end, kernel_mac)
        yield Setup(d, wire, status.ports[0].mac, sock_dir)
    finally:
        if wire is not None:
            wire.close()
        st.delete_link(snic_end)


def test_kernel_active_snic_passive(setup, tmp_path):
    """The kernel's REQ, RTU and first SEND to snic's rping server."""
    k = kernel_side(captured(), snic_active=False)
    req = Mad(k["REQ"])
    port = service_port(req)
    # -S: the size of the capture's buffer, which the kernel's first SEND names.
    server = rcm.start_server(setup.daemon, setup.sock_dir, tmp_path / "rping.log", "rping", "-s",
                              "-a", SNIC_IP, "-p", str(port), "-C", "1", "-S", "4096")
    try:
        setup.wire.send(rewrite(k["REQ"], setup.snic_mac))
        rep = Mad(setup.wire.expect("REP", is_mad(REP)))
        assert rep.msg(REP_REMOTE_COMM_ID, 4) == req.msg(REQ_LOCAL_COMM_ID, 4)
        assert rep.tid == req.tid
        snic_qpn = rep.msg(REP_LOCAL_QPN, 3)
        snic_psn = rep.msg(REP_STARTING_PSN, 3)
        rtu = Mad(k["RTU"])
        setup.wire.send(rewrite(k["RTU"], setup.snic_mac, mad=with_fields(
            rtu.mad, tid=req.tid, remote=(RTU_REMOTE_COMM_ID, 4, rep.msg(REP_LOCAL_COMM_ID, 4)))))
        # The kernel starts sending at the PSN of snic's REP: snic must take it in order.
        setup.wire.send(rewrite(k["SEND active"], setup.snic_mac, dqpn=snic_qpn, psn=snic_psn))
        kernel_qpn = req.msg(REQ_LOCAL_QPN, 3)
        ack = roce(setup.wire.expect("ACK of the kernel's SEND", is_rc(kernel_qpn, RC_ACK)))
        syndrome = ack[4][0]
        assert ack[3] == snic_psn and syndrome >> 5 == 0, \
            f"snic answered PSN {ack[3]:#x} syndrome {syndrome:#x} to a SEND at its REP's " \
            f"Starting PSN {snic_psn:#x} (0x6x: a NAK)"
        # rping's server then reads the client's buffer: its first request starts at the
        # PSN the kernel's REQ gave.
        read = roce(setup.wire.expect("RDMA READ request", is_rc(kernel_qpn, RC_READ_REQUEST)))
        assert read[3] == req.msg(REQ_STARTING_PSN, 3), \
            f"snic's first request has PSN {read[3]:#x}, the REQ's Starting PSN is " \
            f"{req.msg(REQ_STARTING_PSN, 3):#x}"
    finally:
        server.kill()


def test_snic_active_kernel_passive(setup, tmp_path):
    """snic's rping client against the kernel's captured REP."""
    k = kernel_side(captured(), snic_active=True)
    kernel_rep = Mad(k["REP"])
    port = service_port(Mad(k["REQ"]))
    client = rcm.Background(setup.sock_dir, tmp_path / "rping.log", "rping", "-c", "-a", KERNEL_IP,
                            "-p", str(port), "-C", "1", "-S", "4096")
    try:
        req = Mad(setup.wire.expect("REQ", is_mad(REQ)))
        assert service_port(req) == port
        setup.wire.send(rewrite(k["REP"], setup.snic_mac, mad=with_fields(
            kernel_rep.mad, tid=req.tid,
            remote=(REP_REMOTE_COMM_ID, 4, req.msg(REQ_LOCAL_COMM_ID, 4)))))
        rtu = Mad(setup.wire.expect("RTU", is_mad(RTU)))
        assert rtu.msg(RTU_REMOTE_COMM_ID, 4) == kernel_rep.msg(REP_LOCAL_COMM_ID, 4)
        kernel_qpn = kernel_rep.msg(REP_LOCAL_QPN, 3)
        send = roce(setup.wire.expect("first SEND", is_rc(kernel_qpn, RC_SEND_ONLY)))
        assert send[3] == kernel_rep.msg(REP_STARTING_PSN, 3), \
            f"snic's first SEND has PSN {send[3]:#x}, the REP's Starting PSN is " \
            f"{kernel_rep.msg(REP_STARTING_PSN, 3):#x}"
    finally:
        client.kill()
