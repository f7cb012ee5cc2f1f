"""Forged CM messages on the wire against a live RoCE connection.

test_cm_replay's set-up: one snicd on a veth, the far end a raw socket that plays the
kernel's side of a captured rping connection (tests/vectors/rxe_snic_rping.pcap). Here the
kernel's REQ and RTU connect to snic's rping server, and the connection is Established on
snic's side; then messages are forged as a host on the segment would, which knows (here:
sees) both communication IDs and snic's QPN:

- a DREQ naming snic's comm ID with the peer's comm ID 0 (the value that once skipped the
  check), or one off, from the peer's own address;
- a DREQ with both IDs right, from a third address;
- a REJ naming snic's comm ID with the peer's comm ID 0, from the peer's own address;
- a REQ to a port nobody listens on: its REJ must not carry a comm ID of snic's.

None of them may end the connection. Each forged message is followed by nothing else: the
CM port's mads_rx counter moving past it says snic has dealt with it. At the end the real
DREQ (both IDs right, from the peer) does end it, with a DREP naming both IDs: the forged
frames differ from it only in the fields under test.
"""

from __future__ import annotations


import pytest

import snictest as st
import test_rdmacm as rcm
from test_cm_replay import (KERNEL_IP, REP, REP_LOCAL_COMM_ID, REP_LOCAL_QPN,
                            REP_REMOTE_COMM_ID, REQ_LOCAL_COMM_ID, REQ_SERVICE_ID,
                            RTU_REMOTE_COMM_ID, SNIC_IP, UD_SEND_ONLY, Mad, captured, is_mad,
                            kernel_side, rewrite, roce, service_port, setup, with_fields)

__all__ = ["setup"]  # the fixture, shared with test_cm_replay

DREQ, DREP, REJ = 0x15, 0x16, 0x12  # CM attribute IDs (IBA table 104)
# Field offsets in the message after the MAD header (IBA 12.6.7, 12.6.10, 12.6.11).
DREQ_LOCAL_COMM_ID, DREQ_REMOTE_COMM_ID, DREQ_REMOTE_QPN = 0, 4, 8
DREP_LOCAL_COMM_ID, DREP_REMOTE_COMM_ID = 0, 4
REJ_LOCAL_COMM_ID, REJ_REMOTE_COMM_ID, REJ_MSG_REJECTED, REJ_REASON = 0, 4, 8, 10
REJ_CONSUMER = 28  # reason: consumer reject
UNUSED_PORT = 7399  # nobody listens there

THIRD_IP = "198.18.90.66"
THIRD_MAC = "02:00:5e:10:00:66"


def from_address(frame: bytes, mac: str, ip: str) -> bytes:
    """`frame` as a host with `mac` and `ip` would send it: Ethernet and IP source, IP checksum
    and ICRC computed again."""
    st.quiet_scapy()
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether
    p = Ether(frame)
    p.src = mac
    p[IP].src = ip
    p[IP].chksum = None
    p[BTH].icrc = None
    return bytes(p)


def port0(d: st.Daemon) -> dict:
    return rcm.cm_status(d)["ports"][0]


class Conn:
    """The kernel's side of one Established connection with snic's rping server."""

    def __init__(self, setup, tmp_path):
        self.setup = setup
        frames = captured()
        k = kernel_side(frames, snic_active=False)
        req = Mad(k["REQ"])
        self.server = rcm.start_server(setup.daemon, setup.sock_dir, tmp_path / "rping.log",
                                       "rping", "-s", "-a", SNIC_IP, "-p",
                                       str(service_port(req)), "-C", "1", "-S", "4096")
        setup.wire.send(rewrite(k["REQ"], setup.snic_mac))
        rep = Mad(setup.wire.expect("REP", self.from_snic(REP)))
        self.kernel_id = req.msg(REQ_LOCAL_COMM_ID, 4)
        self.snic_id = rep.msg(REP_LOCAL_COMM_ID, 4)
        self.snic_qpn = rep.msg(REP_LOCAL_QPN, 3)
        assert rep.msg(REP_REMOTE_COMM_ID, 4) == self.kernel_id
        rtu = Mad(k["RTU"])
        setup.wire.send(rewrite(k["RTU"], setup.snic_mac, mad=with_fields(
            rtu.mad, tid=req.tid, remote=(RTU_REMOTE_COMM_ID, 4, self.snic_id))))
        st.poll(lambda: rcm.cm_status(setup.daemon)["established"] == 1,
                "snic's side Established after the RTU")
        # The kernel's own DREQ of the capture's other connection: the frame every DREQ
        # below is made from.
        self.dreq_frame = next(f for f in frames if (r := roce(f)) is not None
                               and r[0] == KERNEL_IP and r[1] == UD_SEND_ONLY
                               and Mad(f).attr == DREQ)
        self.tid = 0x5350_0000_0000_0000

    def from_snic(self, attr: int):
        mac = bytes.fromhex(self.setup.snic_mac.replace(":", ""))
        m = is_mad(attr)
        return lambda f: f[6:12] == mac and m(f)

    def mad(self, attr: int, **fields: tuple[int, int, int]) -> bytes:
        """A DREQ frame from the kernel's address carrying `attr`'s message with `fields`, under
        a TID of its own."""
        self.tid += 1
        base = Mad(self.dreq_frame).mad
        m = bytearray(with_fields(bytes(256) if attr != DREQ else base,
                                  tid=self.tid.to_bytes(8, "big"), **fields))
        m[:8] = base[:8]  # base version, class, method: a CM Send
        m[16:18] = attr.to_bytes(2, "big")
        return rewrite(self.dreq_frame, self.setup.snic_mac, mad=bytes(m))

    def dreq(self, local: int, remote: int) -> bytes:
        return self.mad(DREQ, local=(DREQ_LOCAL_COMM_ID, 4, local),
                        remote=(DREQ_REMOTE_COMM_ID, 4, remote),
                        qpn=(DREQ_REMOTE_QPN, 3, self.snic_qpn))

    def deliver(self, frame: bytes) -> dict:
        """Sends `frame` and returns port 0's CM counters once snic has taken it in."""
        d = self.setup.daemon
        before = port0(d)["mads_rx"]
        self.setup.wire.send(frame)
        return st.poll(lambda: (p := port0(d))["mads_rx"] > before and p,
                       "snic to take in the forged MAD")

    def assert_established(self, what: str) -> None:
        cm = rcm.cm_status(self.setup.daemon)
        assert cm["established"] == 1, (
            f"{what} ended the connection (snic comm ID {self.snic_id:#x}, peer's "
            f"{self.kernel_id:#x}):\n{cm['text']}\n{self.setup.daemon.describe()}")
        assert self.server.proc.poll() is None, self.server.output()


@pytest.fixture
def conn(setup, tmp_path):
    c = Conn(setup, tmp_path)
    try:
        yield c
    finally:
        c.server.kill()


def test_forged_disconnects_leave_the_connection_up(conn):
    bad_before = port0(conn.setup.daemon)["mads_bad"]
    cases = [
        ("a DREQ with the peer's comm ID 0", conn.dreq(0, conn.snic_id)),
        ("a DREQ with the peer's comm ID one off", conn.dreq(conn.kernel_id ^ 1, conn.snic_id)),
        (f"a DREQ with both comm IDs right from {THIRD_IP}",
         from_address(conn.dreq(conn.kernel_id, conn.snic_id), THIRD_MAC, THIRD_IP)),
        ("a REJ with the peer's comm ID 0",
         conn.mad(REJ, local=(REJ_LOCAL_COMM_ID, 4, 0), remote=(REJ_REMOTE_COMM_ID, 4, conn.snic_id),
                  why=(REJ_REASON, 2, REJ_CONSUMER))),
        ("a REJ with the peer's comm ID one off",
         conn.mad(REJ, local=(REJ_LOCAL_COMM_ID, 4, conn.kernel_id ^ 1),
                  remote=(REJ_REMOTE_COMM_ID, 4, conn.snic_id), why=(REJ_REASON, 2, REJ_CONSUMER))),
    ]
    for what, frame in cases:
        conn.deliver(frame)
        conn.assert_established(what)
    # A DREQ that names no connection is answered (as Linux does, so that a peer which forgot
    # stops resending) but counts as a duplicate, not as bad; the REJs are dropped as bad.
    assert port0(conn.setup.daemon)["mads_bad"] - bad_before >= 2

    # The real one, which the forged ones differ from only in the fields above.
    conn.setup.wire.send(conn.dreq(conn.kernel_id, conn.snic_id))
    # (The DREQs above that named no connection were answered with DREPs naming what they
    # named, as Linux's cm_issue_drep does; this is the one that answers the peer's.)
    is_drep = conn.from_snic(DREP)
    drep = Mad(conn.setup.wire.expect("DREP to the peer's DREQ", lambda f: is_drep(f) and Mad(
        f).msg(DREP_REMOTE_COMM_ID, 4) == conn.kernel_id))
    assert drep.msg(DREP_LOCAL_COMM_ID, 4) == conn.snic_id
    st.poll(lambda: rcm.cm_status(conn.setup.daemon)["established"] == 0,
            "the peer's own DREQ to end the connection")


def test_reject_of_an_unknown_service_reveals_no_comm_id(conn):
    """A REQ to a port nobody listens on is rejected (invalid service ID) without a
    communication ID of snic's: an unused ID would tell a forger where snic's IDs are."""
    req = Mad(kernel_side(captured(), snic_active=False)["REQ"])
    sid = (req.msg(REQ_SERVICE_ID, 8) & ~0xFFFF) | UNUSED_PORT
    for i in range(4):
        frame = rewrite(req.frame, conn.setup.snic_mac, mad=with_fields(
            req.mad, tid=(0x5351_0000_0000_0000 + i).to_bytes(8, "big"),
            local=(REQ_LOCAL_COMM_ID, 4, 0x1000 + i), sid=(REQ_SERVICE_ID, 8, sid)))
        conn.setup.wire.send(frame)
        rej = Mad(conn.setup.wire.expect("REJ", conn.from_snic(REJ)))
        assert rej.msg(REJ_REMOTE_COMM_ID, 4) == 0x1000 + i
        assert rej.msg(REJ_LOCAL_COMM_ID, 4) == 0, (
            f"snic's REJ of a REQ for an unknown service carries comm ID "
            f"{rej.msg(REJ_LOCAL_COMM_ID, 4):#x}")
    conn.assert_established("REQs to an unknown service")
