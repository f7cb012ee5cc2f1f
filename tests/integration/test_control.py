"""snicd's control socket as libsnic speaks it, over the raw socket: ABI versions,
malformed messages, memfd checks, descriptors never leaked, sessions isolated from
each other, and everything a session owned released when its connection closes
(also by SIGKILL), down to the daemon's descriptors and mappings.

The messages are packed here with struct from the layouts of shm/control_abi.h and
shm/wqe.h, so that a change of the ABI shows up as a failing test.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import re
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

import snictest as st

# ---------------------------------------------------------------- the ABI

MAGIC = 0x43494E53
ABI = 11  # shm/control_abi.h kAbiVersion (11: PortInfo::queues)
HDR = struct.Struct("<IHHIiII")  # magic, abi_version, op, seq, status, length, reserved
OPS = {name: i + 1 for i, name in enumerate([
    "status", "open_device", "query_port", "alloc_pd", "dealloc_pd", "reg_mr", "dereg_mr",
    "create_channel", "destroy_channel", "create_cq", "destroy_cq", "create_srq", "modify_srq",
    "query_srq", "destroy_srq", "create_qp", "modify_qp", "query_qp", "destroy_qp", "alloc_mw",
    "dealloc_mw", "clients", "resources", "qps", "qp"])}
KINDS = st.KINDS  # snicctl resources' order is ResourcesReply's
NO_HANDLE = 0xFFFFFFFF
PAGE = 4096
MAX_SEGS = 16

RING_MAGIC = 0x47524E53
RING_HDR = 256
CQE_SIZE = 64
SEND_WQE_SIZE = 64 + 16 * 16
RECV_WQE_SIZE = 16 + 16 * 16
ASYNC_EVENT_SIZE = 8
RING_VERSION = 2
# Where a sequenced entry keeps its publication tag (shm/wqe.h: Cqe, SendWqe, RecvWqe).
SEQ_OFFSET = {CQE_SIZE: 60, SEND_WQE_SIZE: 20, RECV_WQE_SIZE: 12}
ASYNC_CAPACITY = 1024
CHANNEL_CAPACITY = 4096

# ibv values
QPT_RC = 2
QPS_RESET, QPS_INIT, QPS_RTR, QPS_RTS = 0, 1, 2, 3
ACCESS_LOCAL_WRITE, ACCESS_REMOTE_WRITE, ACCESS_REMOTE_READ = 1, 2, 4
QP_STATE, QP_ACCESS_FLAGS, QP_PKEY_INDEX, QP_PORT = 1 << 0, 1 << 3, 1 << 4, 1 << 5
QP_AV, QP_PATH_MTU, QP_TIMEOUT, QP_RETRY_CNT, QP_RNR_RETRY = 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11
QP_RQ_PSN, QP_MAX_QP_RD_ATOMIC, QP_MIN_RNR_TIMER, QP_SQ_PSN = 1 << 12, 1 << 13, 1 << 15, 1 << 16
QP_MAX_DEST_RD_ATOMIC, QP_DEST_QPN = 1 << 17, 1 << 20
MTU_1024 = 3

# Reply bodies.
DEVICE_LIMITS = struct.Struct("<QQQ25I4x")
OPEN_DEVICE_REPLY = struct.Struct(f"<{DEVICE_LIMITS.size}s64s")
QUERY_PORT_REPLY = struct.Struct("<10I6s2x")
HANDLE = struct.Struct("<II")
REG_MR_REPLY = struct.Struct("<IIII")
CREATE_CQ_REPLY = struct.Struct("<II")
CREATE_QP_REPLY = struct.Struct("<II5III")  # handle, qpn, cap, doorbell, reserved
MODIFY_QP_REPLY = struct.Struct("<II")
RESOURCES_REPLY = struct.Struct("<I7I7I7IQIIIII4x")
CLIENT_INFO = struct.Struct("<IiII64s7IIQ")  # session pid uid gid device counts fds mapped
CLIENTS_REPLY_HEAD = struct.Struct("<II")  # nclients listed
# QpAttr (144 bytes): ten u32, QpCap, reserved, two AhAttr, two u16, twelve u8.
AH_ATTR = struct.Struct("<16sIBBBBHBBBB2x")
QP_ATTR_HEAD = struct.Struct("<10I5II")
# snicctl qp: QpsReply is four u32 and 48 QpSummary; QpReply a QpSummary, a QpAttr, two u32,
# a QpEngineInfo and 64 named counters.
MAX_QPS_LISTED = 48
QP_SUMMARY = struct.Struct("<IIiIIIII16s64s")  # qpn session pid uid port type state dest dgid dev
QPS_REPLY_HEAD = struct.Struct("<4I")  # nqps listed more next_qpn
QP_ENGINE_INFO = struct.Struct("<II16s32s8I")
NAMED_VALUE = struct.Struct("<32sQ")
MAX_QP_COUNTERS = 64


def round_up(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def ring_bytes(capacity: int, entry: int) -> int:
    return RING_HDR + capacity * entry


DOORBELLS_SIZE = 64 + 16384 // 8  # shm::Doorbells: the summary line, then a bit per QP


def async_layout_bytes() -> int:
    """A context memfd: the async events ring, then the doorbells (shm::context_layout)."""
    doorbells = round_up(ring_bytes(ASYNC_CAPACITY, ASYNC_EVENT_SIZE), 64)
    return round_up(doorbells + DOORBELLS_SIZE, PAGE)


def channel_layout_bytes() -> int:
    return round_up(ring_bytes(CHANNEL_CAPACITY, 4), PAGE)


def cq_layout(capacity: int) -> tuple[int, int]:
    ring0 = 256
    return ring0, round_up(ring0 + ring_bytes(capacity, CQE_SIZE), PAGE)


def qp_layout(sq: int, rq: int) -> tuple[int, int, int]:
    ring0 = 256
    ring1 = round_up(ring0 + ring_bytes(sq, SEND_WQE_SIZE), 64)
    return ring0, ring1, round_up(ring1 + ring_bytes(rq, RECV_WQE_SIZE), PAGE)


def memfd(size: int, seal: bool = True, name: str = "snic-test") -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def format_ring(fd: int, size: int, offset: int, capacity: int, entry: int,
                version: int = RING_VERSION) -> None:
    """Formats an empty ring as shm/ring.h's init does (slots' tags of the lap before, magic
    written last)."""
    with mmap.mmap(fd, size) as m:
        struct.pack_into("<IIIIIIQ", m, offset, 0, version, capacity, capacity - 1, entry,
                         0, ring_bytes(capacity, entry))
        struct.pack_into("<I", m, offset + 64, 0)
        struct.pack_into("<I", m, offset + 128, 0)
        if entry in SEQ_OFFSET:
            for i in range(capacity):
                struct.pack_into("<I", m, offset + RING_HDR + i * entry + SEQ_OFFSET[entry],
                                 (i + 1 - capacity) % 2**32)
        struct.pack_into("<I", m, offset, RING_MAGIC)


class Refused(Exception):
    def __init__(self, op: str, status: int):
        super().__init__(f"{op}: {errno.errorcode.get(status, status)}")
        self.status = status


class Conn:
    """One control connection (one client session)."""

    def __init__(self, path: str):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(10)
        self.s.connect(path)
        self.seq = 0

    def close(self) -> None:
        self.s.close()

    def __enter__(self) -> "Conn":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, op: str, body: bytes = b"", fds: tuple[int, ...] = (), abi: int = ABI
                ) -> tuple[int, int, bytes]:
        """Sends one request; returns (status, abi_version, reply body)."""
        self.seq += 1
        msg = HDR.pack(MAGIC, abi, OPS[op], self.seq, 0, HDR.size + len(body), 0) + body
        if fds:
            socket.send_fds(self.s, [msg], list(fds))
        else:
            self.s.send(msg)
        data = self.s.recv(65536)
        assert len(data) >= HDR.size, f"{op}: reply of {len(data)} bytes"
        magic, abi_r, op_r, seq, status, length, _ = HDR.unpack_from(data)
        assert (magic, op_r, seq, length) == (MAGIC, OPS[op], self.seq, len(data)), (op, data[:24])
        return status, abi_r, data[HDR.size:]

    def call(self, op: str, body: bytes = b"", fds: tuple[int, ...] = ()) -> bytes:
        """A request that must succeed; its reply body."""
        status, _, reply = self.request(op, body, fds)
        if status != 0:
            raise Refused(op, status)
        return reply

    def status_of(self, op: str, body: bytes = b"", fds: tuple[int, ...] = ()) -> int:
        return self.request(op, body, fds)[0]

    # -- ops with their bodies

    def open_device(self, port: int = 0) -> tuple[bytes, str]:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        size = async_layout_bytes()
        mfd = memfd(size)
        try:
            format_ring(mfd, size, 0, ASYNC_CAPACITY, ASYNC_EVENT_SIZE)
            reply = self.call("open_device", struct.pack("<II", port, 0), (theirs.fileno(), mfd))
        finally:
            ours.close()
            theirs.close()
            os.close(mfd)
        limits, name = OPEN_DEVICE_REPLY.unpack(reply)
        return limits, name.rstrip(b"\0").decode()

    def alloc_pd(self) -> int:
        return HANDLE.unpack(self.call("alloc_pd"))[0]

    def reg_mr(self, pd: int, fd: int, length: int, access: int = ACCESS_LOCAL_WRITE,
               addr: int = 0x7F0000000000, offset: int = 0) -> tuple[int, int, int]:
        body = mr_body(pd, access, addr, length, [(addr, round_up(length, PAGE), offset)])
        return REG_MR_REPLY.unpack(self.call("reg_mr", body, (fd,)))[:3]

    def create_cq(self, cqe: int = 15, capacity: int = 16, channel: int = NO_HANDLE) -> int:
        ring0, size = cq_layout(capacity)
        fd = memfd(size)
        try:
            format_ring(fd, size, ring0, capacity, CQE_SIZE)
            reply = self.call("create_cq", struct.pack("<IIII", cqe, capacity, channel, 0), (fd,))
        finally:
            os.close(fd)
        return CREATE_CQ_REPLY.unpack(reply)[0]

    def create_channel(self) -> int:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        size = channel_layout_bytes()
        fd = memfd(size)
        try:
            format_ring(fd, size, 0, CHANNEL_CAPACITY, 4)
            reply = self.call("create_channel", b"", (theirs.fileno(), fd))
        finally:
            ours.close()
            theirs.close()
            os.close(fd)
        return HANDLE.unpack(reply)[0]

    def create_srq(self, pd: int, max_wr: int = 16, capacity: int = 16, limit: int = 0) -> int:
        size = round_up(ring_bytes(capacity, RECV_WQE_SIZE), PAGE)
        fd = memfd(size)
        try:
            format_ring(fd, size, 0, capacity, RECV_WQE_SIZE)
            reply = self.call("create_srq", struct.pack("<6I", pd, max_wr, 1, limit, capacity, 0),
                              (fd,))
        finally:
            os.close(fd)
        return struct.unpack("<4I", reply)[0]

    def create_qp(self, pd: int, cq: int, wr: int = 16, srq: int = NO_HANDLE) -> tuple[int, int]:
        rq = 0 if srq != NO_HANDLE else wr
        ring0, ring1, size = qp_layout(wr, rq)
        if rq == 0:
            size = round_up(ring0 + ring_bytes(wr, SEND_WQE_SIZE), PAGE)
        fd = memfd(size)
        try:
            format_ring(fd, size, ring0, wr, SEND_WQE_SIZE)
            if rq:
                format_ring(fd, size, ring1, rq, RECV_WQE_SIZE)
            body = struct.pack("<13I", pd, cq, cq, srq, QPT_RC, 0, wr, rq, 1, 1, 0, wr, rq)
            reply = self.call("create_qp", body, (fd,))
        finally:
            os.close(fd)
        handle, qpn, *_ = CREATE_QP_REPLY.unpack(reply)
        return handle, qpn

    def modify_qp(self, qp: int, mask: int, **attr) -> int:
        return self.status_of("modify_qp", modify_body(qp, mask, **attr))

    def destroy_channel(self, channel: int) -> None:
        self.call("destroy_channel", HANDLE.pack(channel, 0))

    def resources(self) -> dict:
        return parse_resources_reply(self.call("resources"))

    def clients(self) -> list[dict]:
        """The sessions this connection may see (the clients op, as snicctl clients asks)."""
        body = self.call("clients")
        nclients, listed = CLIENTS_REPLY_HEAD.unpack_from(body)
        out = []
        for i in range(listed):
            v = CLIENT_INFO.unpack_from(body, CLIENTS_REPLY_HEAD.size + i * CLIENT_INFO.size)
            out.append({"session": v[0], "pid": v[1], "uid": v[2], "gid": v[3],
                        "device": v[4].rstrip(b"\0").decode(), "counts": dict(zip(KINDS, v[5:12])),
                        "fds": v[12], "mapped_bytes": v[13]})
        assert nclients >= listed
        return out


def mr_body(pd: int, access: int, addr: int, length: int, segs: list[tuple[int, int, int]],
            iova: Optional[int] = None) -> bytes:
    body = struct.pack("<IIQQQII", pd, access, addr, length, addr if iova is None else iova,
                       len(segs), 0)
    for i in range(MAX_SEGS):
        # shm::MrSegment: addr, length, offset, backing (0: memfd), shmid, page size
        body += struct.pack("<QQQIiQ", *(segs[i] if i < len(segs) else (0, 0, 0)), 0, -1, PAGE)
    return body


def modify_body(qp: int, mask: int, state: int = 0, path_mtu: int = 0, qkey: int = 0,
                rq_psn: int = 0, sq_psn: int = 0, dest_qp_num: int = 0, access: int = 0,
                dgid: bytes = b"", is_global: int = 1, ah_port: int = 1, pkey_index: int = 0,
                max_rd_atomic: int = 0, max_dest_rd_atomic: int = 0, min_rnr_timer: int = 0,
                port_num: int = 0, timeout: int = 0, retry_cnt: int = 0, rnr_retry: int = 0) -> bytes:
    head = QP_ATTR_HEAD.pack(state, 0, path_mtu, 0, qkey, rq_psn, sq_psn, dest_qp_num, access, 0,
                             0, 0, 0, 0, 0, 0)
    ah = AH_ATTR.pack(dgid.ljust(16, b"\0"), 0, 0, 64, 0, is_global, 0, 0, 0, 0, ah_port)
    alt = bytes(AH_ATTR.size)
    tail = struct.pack("<HH12B", pkey_index, 0, 0, 0, max_rd_atomic, max_dest_rd_atomic,
                       min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry, 0, 0, 0)
    attr = head + ah + alt + tail
    assert len(attr) == 144
    return struct.pack("<II", qp, mask) + attr


def parse_resources_reply(body: bytes) -> dict:
    v = RESOURCES_REPLY.unpack(body)
    return {"sessions": v[0], "counts": dict(zip(KINDS, v[1:8])),
            "per_client": dict(zip(KINDS, v[8:15])), "per_daemon": dict(zip(KINDS, v[15:22])),
            "mapped_bytes": v[22], "mappings": v[23], "fds": v[24], "faults_recovered": v[25],
            "fds_per_client": v[26], "fds_per_uid": v[27]}


def v4mapped(ip: str) -> bytes:
    return bytes(10) + b"\xff\xff" + socket.inet_aton(ip)


# ------------------------------------------------------------ the daemon

PORT0_IP = "198.18.9.1"
PORT1_IP = "198.18.9.2"


@pytest.fixture(scope="module")
def snicd(tmp_path_factory, mem_args):
    """One snicd with the virtual wire's two ports for the whole module."""
    for b in (st.SNICD, st.SNICCTL):
        if not os.access(b, os.X_OK):
            pytest.fail(f"{b} is not built (run scripts/setup.sh or ninja -C {st.BUILD})")
    name = st.unique("use", maxlen=24)
    st.remove_daemon_leftovers(name)
    d = st.Daemon(name, ["-l", "0", "--no-pci", *mem_args],
                  ["--wire", "--port", f"wire0,ip={PORT0_IP}/24", "--port", f"wire1,ip={PORT1_IP}/24",
                   "--idle-backoff", "100"],
                  tmp_path_factory.mktemp("snicd"))
    d.start()
    try:
        d.wait_ready()
        yield d
    finally:
        d.cleanup()


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.fixture
def baseline(snicd):
    """Takes the daemon's holdings as a test's baseline, through a connection the test keeps
    open until it ends: snicd drops a closed connection (a previous test's, snicctl's) in the
    turn of its loop that sees it closed, so two round trips on a connection made after it
    make sure that none closed before is still counted in the baseline."""
    with Conn(snicd.ctrl) as c:
        def take() -> tuple:
            c.call("resources")
            c.call("resources")
            return st.holdings(snicd.pid)
        yield take


def build_everything(c: Conn) -> dict:
    """A session holding one object of each kind, its QP stepped to RTS."""
    c.open_device()
    pd = c.alloc_pd()
    size = 4 * PAGE
    fd = memfd(size)
    try:
        mr, lkey, rkey = c.reg_mr(pd, fd, size, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE)
    finally:
        os.close(fd)
    mw = struct.unpack("<II", c.call("alloc_mw", struct.pack("<II", pd, 2)))[0]
    ch = c.create_channel()
    cq = c.create_cq(channel=ch)
    srq = c.create_srq(pd)
    qp, qpn = c.create_qp(pd, cq)
    assert c.modify_qp(qp, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS, state=QPS_INIT,
                       port_num=1, access=ACCESS_REMOTE_WRITE) == 0
    assert c.modify_qp(qp, QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN
                       | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER, state=QPS_RTR, path_mtu=MTU_1024,
                       dgid=v4mapped(PORT1_IP), dest_qp_num=qpn, rq_psn=7, max_dest_rd_atomic=4,
                       min_rnr_timer=12) == 0
    assert c.modify_qp(qp, QP_STATE | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_SQ_PSN
                       | QP_MAX_QP_RD_ATOMIC, state=QPS_RTS, timeout=14, retry_cnt=7, rnr_retry=7,
                       sq_psn=9, max_rd_atomic=4) == 0
    return {"pd": pd, "mr": mr, "lkey": lkey, "rkey": rkey, "mw": mw, "channel": ch, "cq": cq,
            "srq": srq, "qp": qp, "qpn": qpn}


# ------------------------------------------------------------ the tests

def test_status_names_the_devices(snicd):
    status = st.ctl_status_ok(snicd.ctrl)
    # Each port: its RoCEv2 device, then its iWARP device.
    assert [p.devices for p in status.ports] == [f"{snicd.name}_0,{snicd.name}_iw0",
                                                 f"{snicd.name}_1,{snicd.name}_iw1"], status


@pytest.mark.parametrize("other", [pytest.param(ABI - 1, id="older-client"),
                                   pytest.param(ABI + 1, id="newer-client")])
def test_abi_mismatch_gets_eproto(snicd, other):
    """A client of the ABI before the sequenced rings (or of a later one) is told EPROTO and
    the version snicd speaks, as libsnic reports it; nothing else happens."""
    with Conn(snicd.ctrl) as c:
        status, abi, body = c.request("status", abi=other)
        assert (status, abi, body) == (errno.EPROTO, ABI, b"")
        # The connection stays usable with the right version.
        assert c.status_of("resources") == 0


def test_a_ring_of_the_old_layout_is_refused(snicd):
    """A CQ ring formatted with the layout before sequenced entries (version 1) is refused
    with EINVAL, and the session goes on."""
    with Conn(snicd.ctrl) as c:
        c.open_device()
        ring0, size = cq_layout(16)
        fd = memfd(size)
        try:
            format_ring(fd, size, ring0, 16, CQE_SIZE, version=1)
            status = c.status_of("create_cq", struct.pack("<IIII", 15, 16, NO_HANDLE, 0), (fd,))
        finally:
            os.close(fd)
        assert status == errno.EINVAL
        assert c.create_cq() >= 0


@pytest.mark.parametrize("payload", [
    pytest.param(b"\x01\x02\x03", id="short"),
    pytest.param(b"x" * 64, id="garbage"),
    pytest.param(HDR.pack(MAGIC, ABI, OPS["status"], 1, 0, 999, 0), id="length-mismatch"),
    pytest.param(HDR.pack(MAGIC, ABI, OPS["alloc_pd"], 1, 0, HDR.size + 8, 0) + bytes(8),
                 id="wrong-body-size"),
    pytest.param(b"\0" * 100000, id="oversized"),
    pytest.param(HDR.pack(MAGIC, ABI, OPS["qp"], 1, 0, HDR.size, 0), id="qp-without-body"),
])
def test_malformed_message_closes_only_that_connection(snicd, payload):
    with Conn(snicd.ctrl) as bystander, Conn(snicd.ctrl) as c:
        bystander.open_device()
        pd = bystander.alloc_pd()
        c.s.send(payload)
        assert c.s.recv(65536) == b"", "the connection must be closed"
        # The daemon serves the other session and new clients as before.
        assert bystander.status_of("dealloc_pd", HANDLE.pack(pd, 0)) == 0
        assert st.ctl_status(snicd.ctrl).returncode == 0


def test_client_that_does_not_read_its_replies_is_disconnected(snicd):
    with Conn(snicd.ctrl) as c:
        msg = HDR.pack(MAGIC, ABI, OPS["resources"], 1, 0, HDR.size, 0)
        disconnected = False
        for _ in range(100000):
            try:
                c.s.send(msg)
            except (BrokenPipeError, ConnectionResetError):
                disconnected = True
                break
        assert disconnected, "snicd kept answering a client that reads nothing"
        assert st.ctl_status(snicd.ctrl).returncode == 0


def test_ops_before_open_device_are_refused(snicd):
    with Conn(snicd.ctrl) as c:
        assert c.status_of("alloc_pd") == errno.EINVAL
        assert c.status_of("query_port") == errno.EINVAL
        assert c.status_of("status") == 0
        with pytest.raises(Refused) as e:
            c.open_device(port=2)  # two ports: 0 and 1
        assert e.value.status == errno.EINVAL
        _, device = c.open_device(port=1)
        assert device == f"{snicd.name}_1"
        with pytest.raises(Refused) as e:
            c.open_device(port=0)  # once per session
        assert e.value.status == errno.EINVAL


def test_notification_fds_must_be_stream_sockets(snicd):
    """snicd signals events with send(MSG_DONTWAIT) on an AF_UNIX stream socket, which
    a client cannot make block; an eventfd or a pipe (whose write a client could make
    block) is refused."""
    size = async_layout_bytes()
    for make in (lambda: os.eventfd(0, os.EFD_CLOEXEC), lambda: os.pipe()[1],
                 lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).detach()):
        bad = make()
        mfd = memfd(size)
        try:
            format_ring(mfd, size, 0, ASYNC_CAPACITY, ASYNC_EVENT_SIZE)
            with Conn(snicd.ctrl) as c:
                status = c.request("open_device", struct.pack("<II", 0, 0), (bad, mfd))[0]
                assert status == errno.EINVAL
        finally:
            os.close(bad)
            os.close(mfd)


def test_open_device_and_query_port(snicd):
    with Conn(snicd.ctrl) as c:
        limits, device = c.open_device()
        assert device == f"{snicd.name}_0"
        v = DEVICE_LIMITS.unpack(limits)
        max_mr_size, page_size_cap, _guid = v[:3]
        (vendor_id, _part, _hw, max_qp, max_qp_wr, max_sge, max_sge_rd, max_cq, max_cqe, max_mr,
         max_pd, *_rest) = v[3:]
        assert (max_mr_size, page_size_cap) == (1 << 40, 4096)
        assert (max_qp, max_qp_wr, max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd) == \
            (8192, 16384, 16, 16, 1024, 4194303, 4096, 1024)
        port = QUERY_PORT_REPLY.unpack(c.call("query_port"))
        state, max_mtu, active_mtu, eth_mtu, gid_len, pkey_len = port[:6]
        assert (state, active_mtu, eth_mtu, gid_len, pkey_len) == (4, MTU_1024, 1500, 1, 1), port
        assert max_mtu == 5
        assert socket.inet_ntoa(struct.pack(">I", port[9])) == PORT0_IP


def test_reg_mr_checks_the_memfd(snicd):
    with Conn(snicd.ctrl) as c:
        c.open_device()
        pd = c.alloc_pd()
        size = 16 * PAGE

        fd = memfd(size)
        try:
            mr, lkey, rkey = c.reg_mr(pd, fd, size, ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ)
            assert lkey == rkey and lkey != 0
            # A second registration of the same memory is another MR with another key.
            mr2, lkey2, _ = c.reg_mr(pd, fd, PAGE + 1, offset=PAGE)
            assert mr2 != mr and lkey2 != lkey
            r = c.resources()
            assert r["counts"]["mr"] >= 2 and r["counts"]["pd"] >= 1
            assert c.status_of("dealloc_pd", HANDLE.pack(pd, 0)) == errno.EBUSY
            assert c.status_of("dereg_mr", HANDLE.pack(mr2, 0)) == 0
            assert c.status_of("dereg_mr", HANDLE.pack(mr2, 0)) == errno.EINVAL  # stale now
        finally:
            os.close(fd)

        unsealed = memfd(size, seal=False)
        try:
            with pytest.raises(Refused) as e:
                c.reg_mr(pd, unsealed, size)
            assert e.value.status == errno.EINVAL
        finally:
            os.close(unsealed)

        small = memfd(size - PAGE)
        try:
            with pytest.raises(Refused) as e:
                c.reg_mr(pd, small, size)
            assert e.value.status == errno.EINVAL
            with pytest.raises(Refused) as e:  # in range, but not from that offset
                c.reg_mr(pd, small, 2 * PAGE, offset=size - 2 * PAGE)
            assert e.value.status == errno.EINVAL
        finally:
            os.close(small)

        fd = memfd(size)
        try:
            # Remote write without local write, as verbs: EINVAL.
            with pytest.raises(Refused) as e:
                c.reg_mr(pd, fd, size, ACCESS_REMOTE_WRITE)
            assert e.value.status == errno.EINVAL
            # Segments that do not cover the range.
            body = mr_body(pd, ACCESS_LOCAL_WRITE, 0x7F0000000000, 2 * PAGE,
                           [(0x7F0000000000, PAGE, 0)])
            assert c.status_of("reg_mr", body, (fd,)) == errno.EINVAL
            # A regular file is not a memfd.
            with open("/proc/self/status", "rb") as f:
                body = mr_body(pd, ACCESS_LOCAL_WRITE, 0x7F0000000000, PAGE,
                               [(0x7F0000000000, PAGE, 0)])
                assert c.status_of("reg_mr", body, (f.fileno(),)) == errno.EINVAL
        finally:
            os.close(fd)


def test_fds_with_an_op_that_takes_none_are_closed(snicd):
    with Conn(snicd.ctrl) as c:
        c.open_device()
        pd = c.alloc_pd()
        base = fd_count(snicd.pid)
        fds = [memfd(PAGE) for _ in range(3)]
        try:
            assert c.status_of("alloc_pd", b"", tuple(fds)) == errno.EINVAL
            assert c.status_of("dealloc_pd", HANDLE.pack(pd, 0), tuple(fds)) == errno.EINVAL
            assert c.status_of("resources", b"", tuple(fds)) == errno.EINVAL
            # Too many descriptors for any op (the kernel truncates what exceeds the room).
            many = [os.dup(fds[0]) for _ in range(20)]
            try:
                assert c.status_of("create_cq", struct.pack("<IIII", 15, 16, NO_HANDLE, 0),
                                   tuple(many)) == errno.EINVAL
            finally:
                for f in many:
                    os.close(f)
        finally:
            for f in fds:
                os.close(f)
        # The replies come after the daemon closed what it received.
        assert fd_count(snicd.pid) == base
        assert c.status_of("dealloc_pd", HANDLE.pack(pd, 0)) == 0


def test_second_session_cannot_use_the_first_ones_handles(snicd):
    with Conn(snicd.ctrl) as first, Conn(snicd.ctrl) as second:
        objs = build_everything(first)
        second.open_device()
        size = 2 * PAGE
        fd = memfd(size)
        try:
            body = mr_body(objs["pd"], ACCESS_LOCAL_WRITE, 0x7F0000000000, size,
                           [(0x7F0000000000, size, 0)])
            assert second.status_of("reg_mr", body, (fd,)) == errno.EINVAL
        finally:
            os.close(fd)
        for op, h in [("dealloc_pd", objs["pd"]), ("dereg_mr", objs["mr"]),
                      ("dealloc_mw", objs["mw"]), ("destroy_channel", objs["channel"]),
                      ("destroy_cq", objs["cq"]), ("query_qp", objs["qp"]),
                      ("destroy_qp", objs["qp"])]:
            assert second.status_of(op, HANDLE.pack(h, 0)) == errno.EINVAL, op
        assert second.modify_qp(objs["qp"], QP_STATE, state=QPS_RESET) == errno.EINVAL

        # The first session is untouched.
        reply = first.call("query_qp", HANDLE.pack(objs["qp"], 0))
        assert struct.unpack_from("<I", reply)[0] == QPS_RTS
        assert first.status_of("destroy_cq", HANDLE.pack(objs["cq"], 0)) == errno.EBUSY
        assert first.status_of("destroy_qp", HANDLE.pack(objs["qp"], 0)) == 0
        assert first.status_of("destroy_cq", HANDLE.pack(objs["cq"], 0)) == 0
        assert first.status_of("dereg_mr", HANDLE.pack(objs["mr"], 0)) == 0


def test_invalid_qp_transitions_and_attributes(snicd):
    with Conn(snicd.ctrl) as c:
        c.open_device()
        pd = c.alloc_pd()
        cq = c.create_cq()
        qp, _ = c.create_qp(pd, cq)
        # RESET -> RTS skips states; RESET -> INIT without the port is incomplete.
        assert c.modify_qp(qp, QP_STATE, state=QPS_RTS) == errno.EINVAL
        assert c.modify_qp(qp, QP_STATE | QP_PKEY_INDEX | QP_ACCESS_FLAGS,
                           state=QPS_INIT) == errno.EINVAL
        assert c.modify_qp(qp, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                           state=QPS_INIT, port_num=2) == errno.EINVAL
        assert c.modify_qp(qp, QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS,
                           state=QPS_INIT, port_num=1) == 0
        rtr = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC \
            | QP_MIN_RNR_TIMER
        good = dict(state=QPS_RTR, path_mtu=MTU_1024, dgid=v4mapped(PORT1_IP), dest_qp_num=5)
        assert c.modify_qp(qp, rtr, **{**good, "dgid": bytes(15) + b"\1"}) == errno.EINVAL
        assert c.modify_qp(qp, rtr, **{**good, "path_mtu": 6}) == errno.EINVAL  # no ibv_mtu
        assert c.modify_qp(qp, rtr, **{**good, "rq_psn": 1 << 24}) == errno.EINVAL
        assert c.modify_qp(qp, rtr, **{**good, "is_global": 0}) == errno.EINVAL
        assert c.modify_qp(qp, rtr, **good) == 0


def test_srq_limit_resize_and_busy(snicd):
    with Conn(snicd.ctrl) as c:
        c.open_device()
        pd = c.alloc_pd()
        cq = c.create_cq()
        srq = c.create_srq(pd, max_wr=100, capacity=128, limit=10)
        # An SRQ offers what its ring holds: max_wr is the capacity.
        assert struct.unpack("<4I", c.call("query_srq", HANDLE.pack(srq, 0)))[:3] == (128, 1, 10)
        IBV_SRQ_MAX_WR, IBV_SRQ_LIMIT = 1, 2
        modify = struct.Struct("<6I")  # srq, mask, max_wr, srq_limit, capacity, reserved
        assert c.status_of("modify_srq", modify.pack(srq, IBV_SRQ_LIMIT, 0, 50, 0, 0)) == 0
        assert c.status_of("modify_srq", modify.pack(srq, IBV_SRQ_LIMIT, 0, 129, 0, 0)) == errno.EINVAL
        # A resize takes the new area's memfd: none, a short one, an unsealed one are refused.
        assert c.status_of("modify_srq", modify.pack(srq, IBV_SRQ_MAX_WR, 200, 0, 256, 0)) == errno.EINVAL
        new_size = round_up(ring_bytes(256, RECV_WQE_SIZE), PAGE)
        for fd in (memfd(PAGE), memfd(new_size, seal=False)):
            try:
                assert c.status_of("modify_srq", modify.pack(srq, IBV_SRQ_MAX_WR, 200, 0, 256, 0),
                                   (fd,)) == errno.EINVAL
            finally:
                os.close(fd)
        assert struct.unpack("<4I", c.call("query_srq", HANDLE.pack(srq, 0)))[:3] == (128, 1, 50)
        fd = memfd(new_size)
        try:  # the area's contents do not matter: snicd formats the new ring itself
            reply = c.call("modify_srq", modify.pack(srq, IBV_SRQ_MAX_WR, 200, 0, 256, 0), (fd,))
        finally:
            os.close(fd)
        assert struct.unpack("<4I", reply)[:3] == (256, 256, 0)  # max_wr, capacity, WQEs moved
        assert struct.unpack("<4I", c.call("query_srq", HANDLE.pack(srq, 0)))[:3] == (256, 1, 50)
        with pytest.raises(Refused) as e:  # capacity below max_wr
            c.create_srq(pd, max_wr=100, capacity=64)
        assert e.value.status == errno.EINVAL

        qp, _ = c.create_qp(pd, cq, srq=srq)
        reply = c.call("query_qp", HANDLE.pack(qp, 0))
        send_cq, recv_cq, srq_h, pd_h = struct.unpack_from("<4I", reply, 144 + 8)
        assert (send_cq, recv_cq, srq_h, pd_h) == (cq, cq, srq, pd)
        assert c.status_of("destroy_srq", HANDLE.pack(srq, 0)) == errno.EBUSY
        assert c.status_of("destroy_qp", HANDLE.pack(qp, 0)) == 0
        assert c.status_of("destroy_srq", HANDLE.pack(srq, 0)) == 0
        assert c.status_of("query_srq", HANDLE.pack(srq, 0)) == errno.EINVAL


def test_close_releases_everything(snicd, baseline):
    # A first round warms the daemon's allocator up; the baseline is taken after it.
    with Conn(snicd.ctrl) as c:
        build_everything(c)
    st.poll(lambda: st.all_released(snicd), "resources back to zero", tries=50)
    base = baseline()

    with Conn(snicd.ctrl) as c:
        build_everything(c)
        r = st.ctl_resources(snicd)
        assert r["sessions"] == 1 and r["fds"] == 2 and r["mappings"] == 6, r
        assert all(r["counts"][k] == 1 for k in KINDS), r
        clients = st.snicctl(snicd, "clients")
        line = next(l for l in clients.splitlines() if f" pid {os.getpid()} " in l)
        assert re.fullmatch(rf"session \d+ pid {os.getpid()} uid 0 gid 0 device {snicd.name}_0 "
                            r"pd 1 mr 1 mw 1 channel 1 cq 1 srq 1 qp 1 mapped \d+ fds 2", line), clients
        now = st.holdings(snicd.pid)
        assert len(now[0]) > len(base[0]) and len(now[1]) > len(base[1]), (base, now)

    st.poll(lambda: st.all_released(snicd), "resources back to zero after close", tries=50)
    st.wait_holdings_back_to(snicd.pid, base)
    assert st.snicctl(snicd, "clients") == ""


def ctl_session_fds(d: st.Daemon) -> dict[int, int]:
    """Each session's kept descriptors, from `snicctl clients` (session number -> fds N)."""
    out = {}
    for line in st.snicctl(d, "clients").splitlines():
        m = re.fullmatch(r"session (\d+) pid \d+ .* mapped \d+ fds (\d+)", line)
        assert m, f"unexpected snicctl clients line {line!r}"
        out[int(m[1])] = int(m[2])
    return out


def fill_with_channels(c: Conn, at_most: int) -> tuple[list[int], int]:
    """Creates channels until one is refused (or `at_most` are made): their handles and the
    errno of the refusal (0: none)."""
    made = []
    while len(made) < at_most:
        try:
            made.append(c.create_channel())
        except Refused as e:
            return made, e.status
    return made, 0


def test_kept_descriptors_are_counted_per_client(snicd):
    """The device's notification socket and each channel's are the client's descriptors snicd
    keeps: counted in its session (snicctl clients: fds N, and the clients op) and in the
    daemon's, up as channels are made and down as they go."""
    st.poll(lambda: st.all_released(snicd), "resources at zero before the test", tries=50)
    with Conn(snicd.ctrl) as c, Conn(snicd.ctrl) as other:
        c.open_device()
        other.open_device()
        assert sorted(ctl_session_fds(snicd).values()) == [1, 1]
        chans = [c.create_channel() for _ in range(3)]
        ours = next(x for x in c.clients() if x["fds"] != 1)
        assert (ours["fds"], ours["counts"]["channel"], ours["pid"]) == (4, 3, os.getpid()), ours
        fds = ctl_session_fds(snicd)
        assert fds[ours["session"]] == 4 and sorted(fds.values()) == [1, 4], fds
        assert st.ctl_resources(snicd)["fds"] == 5
        for h in chans[:2]:
            c.destroy_channel(h)
        assert ctl_session_fds(snicd)[ours["session"]] == 2
        assert st.ctl_resources(snicd)["fds"] == 3
        # A refused channel (its socket is no notification socket) is not counted.
        mfd = memfd(channel_layout_bytes())
        r, w = os.pipe()
        try:
            assert c.status_of("create_channel", b"", (w, mfd)) == errno.EINVAL
        finally:
            for fd in (mfd, r, w):
                os.close(fd)
        assert ctl_session_fds(snicd)[ours["session"]] == 2
    st.poll(lambda: st.all_released(snicd), "resources back to zero after close", tries=50)


def test_a_client_keeps_at_most_its_quota_of_descriptors(snicd, baseline):
    """Past its quota (its device's socket and one per channel it may make) a client's
    channel is refused with EMFILE, as a kernel provider's is out of descriptors; the daemon
    says why, and keeps nothing more of it."""
    st.poll(lambda: st.all_released(snicd), "resources at zero before the test", tries=50)
    base = baseline()
    quota = st.ctl_resources(snicd)["fds_per_client"]
    with Conn(snicd.ctrl) as c:
        c.open_device()
        chans, err = fill_with_channels(c, quota)
        assert (len(chans), err) == (quota - 1, errno.EMFILE), (len(chans), err)
        session = c.clients()[0]
        assert (session["fds"], session["counts"]["channel"]) == (quota, quota - 1), session
        r = st.ctl_resources(snicd)
        assert (r["fds"], r["counts"]["channel"]) == (quota, quota - 1), r
        assert (f"create_channel refused (Too many open files): this client keeps {quota} "
                f"descriptors, its quota is {quota}") in snicd.stdout(), snicd.describe()
        held = baseline()  # a refusal keeps nothing: the reply comes after snicd closed it all
        assert fill_with_channels(c, 1) == ([], errno.EMFILE)
        assert st.holdings(snicd.pid) == held
        # One given back makes room for one.
        c.destroy_channel(chans.pop())
        chans.append(c.create_channel())
        assert fill_with_channels(c, 1) == ([], errno.EMFILE)
    st.poll(lambda: st.all_released(snicd), "resources back to zero after close", tries=50)
    st.wait_holdings_back_to(snicd.pid, base)


def test_a_users_clients_share_its_quota_of_descriptors(snicd, baseline):
    """A user's sessions together keep at most the user's quota: a client of a user whose
    other clients keep nearly all of it gets what is left, then EMFILE, and a new one cannot
    even open its device; a client that goes gives its share back."""
    st.poll(lambda: st.all_released(snicd), "resources at zero before the test", tries=50)
    base = baseline()
    r = st.ctl_resources(snicd)
    per_client, per_uid = r["fds_per_client"], r["fds_per_uid"]
    assert per_uid > per_client, r
    conns: list[Conn] = []
    try:
        kept = 0
        while per_uid - kept >= per_client:  # clients full to their own quota
            c = Conn(snicd.ctrl)
            conns.append(c)
            c.open_device()
            chans, err = fill_with_channels(c, per_client - 1)
            assert (len(chans), err) == (per_client - 1, 0)
            kept += per_client
        last = Conn(snicd.ctrl)
        conns.append(last)
        last.open_device()
        chans, err = fill_with_channels(last, per_client)
        assert err == errno.EMFILE and kept + 1 + len(chans) == per_uid, (kept, len(chans), err)
        assert len(chans) < per_client - 1  # the user's quota, below the client's
        assert st.ctl_resources(snicd)["fds"] == per_uid
        assert sum(ctl_session_fds(snicd).values()) == per_uid
        assert (f"uid 0 keeps {per_uid} descriptors over its clients, its quota is {per_uid} "
                f"(this client keeps {1 + len(chans)})") in snicd.stdout(), snicd.describe()
        with Conn(snicd.ctrl) as more:
            size = async_layout_bytes()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            mfd = memfd(size)
            try:
                format_ring(mfd, size, 0, ASYNC_CAPACITY, ASYNC_EVENT_SIZE)
                assert more.status_of("open_device", struct.pack("<II", 0, 0),
                                      (theirs.fileno(), mfd)) == errno.EMFILE
            finally:
                ours.close()
                theirs.close()
                os.close(mfd)
        # The first client goes: the others may keep what it kept.
        conns.pop(0).close()
        st.poll(lambda: st.ctl_resources(snicd)["fds"] == per_uid - per_client or None,
                "the closed client's descriptors given back")
        last.create_channel()
        assert st.ctl_resources(snicd)["fds"] == per_uid - per_client + 1
    finally:
        for c in conns:
            c.close()
    st.poll(lambda: st.all_released(snicd), "resources back to zero after close", tries=50)
    st.wait_holdings_back_to(snicd.pid, base)


def parse_qps_reply(body: bytes) -> tuple[tuple[int, ...], list[tuple]]:
    assert len(body) == QPS_REPLY_HEAD.size + MAX_QPS_LISTED * QP_SUMMARY.size, len(body)
    head = QPS_REPLY_HEAD.unpack_from(body)
    rows = [QP_SUMMARY.unpack_from(body, QPS_REPLY_HEAD.size + i * QP_SUMMARY.size)
            for i in range(head[1])]
    return head, rows


def test_qp_ops_need_no_session_and_report_a_running_qp(snicd):
    """The qps and qp ops (snicctl qp) as laid out in shm/control_abi.h: a QP stepped to RTS
    by one session is listed and dumped, engine included, to a connection without one."""
    with Conn(snicd.ctrl) as owner, Conn(snicd.ctrl) as c:
        objs = build_everything(owner)
        qpn = objs["qpn"]
        (nqps, listed, more, next_qpn), rows = parse_qps_reply(
            c.call("qps", struct.pack("<II", 0, 0)))
        assert (nqps, listed, more) == (1, 1, 0)
        q, session, pid, uid, port, qp_type, state, dest, dgid, dev = rows[0]
        assert (q, pid, uid, port, qp_type, state, dest) == (qpn, os.getpid(), 0, 0, QPT_RC,
                                                             QPS_RTS, qpn)
        assert dgid == v4mapped(PORT1_IP) and dev.rstrip(b"\0") == f"{snicd.name}_0".encode()
        assert next_qpn == qpn + 1
        # From past the last QP: nothing more.
        (nqps, listed, more, _), _ = parse_qps_reply(c.call("qps", struct.pack("<II", qpn + 1, 0)))
        assert (nqps, listed, more) == (1, 0, 0)

        body = c.call("qp", struct.pack("<II", qpn, 0))
        assert len(body) == (QP_SUMMARY.size + 144 + 8 + QP_ENGINE_INFO.size
                             + MAX_QP_COUNTERS * NAMED_VALUE.size), len(body)
        assert QP_SUMMARY.unpack_from(body)[0] == qpn
        attr = QP_ATTR_HEAD.unpack_from(body, QP_SUMMARY.size)
        assert (attr[0], attr[2], attr[5], attr[6], attr[7]) == (QPS_RTS, MTU_1024, 7, 9, qpn)
        sq_sig_all, srqn = struct.unpack_from("<II", body, QP_SUMMARY.size + 144)
        assert srqn == 0
        off = QP_SUMMARY.size + 144 + 8
        (running, failed, transport, error, next_psn, unacked, expected, msn, held, ncounters,
         all_counters, _) = QP_ENGINE_INFO.unpack_from(body, off)
        assert (running, failed) == (1, 0)
        assert transport.rstrip(b"\0") == b"roce" and error.rstrip(b"\0") == b"none"
        assert (next_psn, unacked, expected, msn, held) == (9, 9, 7, 0, 0)
        assert 0 < ncounters <= all_counters and ncounters <= MAX_QP_COUNTERS
        names = [NAMED_VALUE.unpack_from(body, off + QP_ENGINE_INFO.size + i * NAMED_VALUE.size)[0]
                 .rstrip(b"\0").decode() for i in range(ncounters)]
        assert {"tx_send_packets", "rx_acks", "timeouts"} <= set(names), names

        assert c.status_of("qp", struct.pack("<II", 1, 0)) == errno.ENOENT  # never a QP number
        fd = memfd(PAGE)
        try:
            assert c.status_of("qps", struct.pack("<II", 0, 0), (fd,)) == errno.EINVAL
            assert c.status_of("qp", struct.pack("<II", qpn, 0), (fd,)) == errno.EINVAL
        finally:
            os.close(fd)
    # The QP went with its session.
    def nqps() -> int:
        with Conn(snicd.ctrl) as c:
            return parse_qps_reply(c.call("qps", bytes(8)))[0][0]
    st.poll(lambda: nqps() == 0, "the QP gone from the listing", tries=50)


# A client process for the SIGKILL test: builds a session and waits to be killed.
CHILD_READY = "ready"


def child_main(ctrl: str) -> None:
    c = Conn(ctrl)
    build_everything(c)
    # More of everything, so that the kill lands on a session holding a lot.
    pd = c.alloc_pd()
    for _ in range(8):
        c.create_cq()
        fd = memfd(8 * PAGE)
        c.reg_mr(pd, fd, 8 * PAGE)
        os.close(fd)
    print(CHILD_READY, flush=True)
    signal.pause()


def test_sigkill_of_a_client_releases_everything(snicd, baseline):
    st.poll(lambda: st.all_released(snicd), "resources at zero before the test", tries=50)
    base = baseline()
    for _ in range(3):
        child = subprocess.Popen([sys.executable, __file__, snicd.ctrl], stdout=subprocess.PIPE,
                                 text=True, cwd=Path(__file__).parent)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == CHILD_READY
            r = st.ctl_resources(snicd)
            assert r["counts"]["mr"] == 9 and r["counts"]["cq"] == 9, r
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        st.poll(lambda: st.all_released(snicd), "resources back to zero after SIGKILL", tries=50)
    st.wait_holdings_back_to(snicd.pid, base)


if __name__ == "__main__":
    child_main(sys.argv[1])
