#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the real rxe
captures in tests/vectors: the frames and RoCEv2 packets as they are, and, for the targets
that read a stream of choices (rc_*, ud_qp, cm_agent), the same packets wrapped in the
commands those targets understand; and control_socket's message sequences, built from the
control protocol's layouts (shm/control.h). Deterministic; run it again after changing a
target's input format:

    tests/fuzz/make_seeds.py [--vectors DIR] [--out DIR]
"""
import argparse
import hashlib
import os
import struct

ROCE_PORT = 4791


def frames(path):
    """The link-layer frames of a classic pcap (Ethernet)."""
    data = open(path, "rb").read()
    endian = "<" if struct.unpack("<I", data[:4])[0] in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        yield data[off:off + incl]
        off += incl


def roce_payload(frame):
    """The UDP payload to port 4791 of an IPv4 or IPv6 frame (BTH .. ICRC), or None."""
    etype = struct.unpack(">H", frame[12:14])[0]
    if etype == 0x0800:
        ihl = (frame[14] & 0x0F) * 4
        if frame[23] != 17:
            return None
        udp = 14 + ihl
    elif etype == 0x86DD:
        if frame[20] != 17:
            return None
        udp = 14 + 40
    else:
        return None
    dport = struct.unpack(">H", frame[udp + 2:udp + 4])[0]
    ulen = struct.unpack(">H", frame[udp + 4:udp + 6])[0]
    if dport != ROCE_PORT:
        return None
    return frame[udp + 8:udp + ulen]


def u8(v):
    return bytes([v & 0xFF])


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def rc_config():
    # fuzz_config(): mtu 1024, PSNs 100/5000, retry 7, rnr 7, rd_atomic 4/4, all remote
    # access, ACK every 16.
    return u8(2) + u8(0) + u8(7) + u8(7) + u8(3) + u8(3) + u8(0x0E) + u8(15)


def rc_recv(length=4096):
    # post_recv: one SGE over the all-rights region (key 0x1000 at its start).
    return u8(3) + u8(1) + u8(0) + u8(0) + u16(0) + u8(200) + u16(length)


def rc_raw(pkt, psn_base):
    # deliver_raw with this QP's number and a PSN at psn_base (0 ePSN, 1 oldest unacked).
    return u8(2) + u8(1) + u16(len(pkt)) + pkt + u8(psn_base) + u8(0)


def rc_send(op, length=64):
    # post_send: op, signaled, rkey/addr in the all-rights region, one SGE of `length`.
    return (u8(4) + u8(op) + u8(1) + u32(0) + u8(0) + u8(0) + u16(0) + u64(0) + u64(0) +
            u8(1) + u8(0) + u8(0) + u16(0x100) + u8(200) + u16(length))


def u64(v):
    return struct.pack("<Q", v)


def write(out, target, name, blob):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(blob)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--vectors", default=os.path.join(here, "..", "vectors"))
    ap.add_argument("--out", default=os.path.join(here, "corpus"))
    args = ap.parse_args()

    by_kind = {}  # one frame of each (ethertype, protocol, RoCE opcode)
    roce = {}     # one RoCEv2 packet of each opcode (IPv4 and IPv6 captures)
    mads = {}     # one CM MAD of each attribute
    for cap in ("rxe_real.pcap", "rxe_real_ipv6.pcap"):
        for fr in frames(os.path.join(args.vectors, cap)):
            p = roce_payload(fr)
            key = (fr[12:14], fr[23] if fr[12:14] == b"\x08\x00" else 0, p[0] if p else -1)
            by_kind.setdefault(key, fr)
            if p is None:
                continue
            roce.setdefault(p[0], p)
            if p[0] == 0x64 and len(p) == 12 + 8 + 256 + 4:  # UD SEND ONLY to QP1: a MAD
                mad = p[20:20 + 256]
                mads.setdefault(struct.unpack(">H", mad[16:18])[0], mad)

    for i, (key, fr) in enumerate(sorted(by_kind.items())):
        write(args.out, "net_classify", f"rxe-{i:02d}", u8(1) + fr)
    for op, p in sorted(roce.items()):
        write(args.out, "roce_packet", f"rxe-op{op:02x}", p)

    requests = [p for op, p in sorted(roce.items()) if op <= 0x0C or op in (0x13, 0x14)]
    responses = [p for op, p in sorted(roce.items()) if 0x0D <= op <= 0x12]
    for i, p in enumerate(requests):
        write(args.out, "rc_responder", f"rxe-op{p[0]:02x}",
              rc_config() + rc_recv() + rc_recv() + rc_raw(p, 0) + u8(5) + u16(10))
    write(args.out, "rc_responder", "rxe-all",
          rc_config() + rc_recv() + rc_recv() + b"".join(rc_raw(p, 0) for p in requests))
    for i, p in enumerate(responses):
        # prime(): 3 send WRs (a SEND, a WRITE, a READ), then the captured response.
        prime = u8(2) + rc_send(2)[1:] + rc_send(0)[1:] + rc_send(4)[1:]
        write(args.out, "rc_completer", f"rxe-op{p[0]:02x}",
              rc_config() + prime + rc_raw(p, 1) + u8(5) + u16(10))

    for op in (0x64, 0x65):
        if op in roce:
            # mtu 1024, start PSN, a receive WR, the datagram, a poll.
            write(args.out, "ud_qp", f"rxe-op{op:02x}",
                  u8(2) + u32(0) + rc_recv() + u8(2) + u16(len(roce[op])) + roce[op] + bytes(5) +
                  u8(5) + u8(0) + u16(1))

    for attr, mad in sorted(mads.items()):
        write(args.out, "cm_messages", f"rxe-attr{attr:04x}", mad)
        # cm_agent: max_half_open, seed, then the MAD as received (header kept).
        write(args.out, "cm_agent", f"rxe-attr{attr:04x}", u8(7) + u8(1) + u8(0) + u8(1) + mad)
        if attr == 0x0010:  # REQ: rdma_cm's header starts its private data (data byte 104)
            write(args.out, "cm_cma", "rxe-req-private", mad[24 + 104:24 + 104 + 92])
            write(args.out, "cm_cma", "rxe-req-service-id", mad[24 + 8:24 + 16][::-1] + bytes(8))
    # cm_agent: our own REQ (connect) answered by the peer from what we sent.
    write(args.out, "cm_agent", "connect-then-answer",
          u8(7) + u8(1) +
          u8(3) + u16(7471) + u32(0x123) + u32(0x456) + u8(20) + u8(3) + u8(0) +  # connect
          u8(1) + u8(0) + u32(0x789) + u8(3) + u64(1) + u8(0) +  # REP to our REQ
          u8(5) + u8(0) +  # confirm: RTU
          u8(11) + u8(0) + u32(1000))  # time

    control_socket_seeds(args.out)


# control_socket: CtrlOp values (shm/control.h) and the target's input format.
OP = {"status": 1, "open_device": 2, "query_port": 3, "alloc_pd": 4, "dealloc_pd": 5,
      "create_cq": 10, "destroy_cq": 11, "create_qp": 16, "clients": 22, "resources": 23,
      "qps": 24, "qp": 25, "cm_open": 26, "cm_status": 36, "tcp_conns": 37}
CTRL_MAGIC = 0x43494E53
CTRL_ABI = 7
NO_HANDLE = 0xFFFFFFFF
FD_CONTEXT, FD_CQ_RING, FD_QP_RING, FD_SOCKET, FD_DEVNULL = 1, 2, 3, 5, 6


def ctl_msg(client, op, body=b"", flags=0, extra=b"", fds=b"\x00"):
    """One step: a framed message (the header the target builds from op and flags, `extra`
    the bytes its flags read), its body, then its descriptors."""
    return u8(client) + u8(0) + u8(op) + u8(flags) + extra + body + fds


def ctl_fds(*kinds):
    return u8(len(kinds)) + b"".join(kinds)


def control_socket_seeds(out):
    t = "control_socket"
    ctx = ctl_fds(u8(FD_SOCKET), u8(FD_CONTEXT))
    open_dev = ctl_msg(0, OP["open_device"], u32(0) + u32(0), fds=ctx)
    write(out, t, "status", ctl_msg(0, OP["status"]))
    write(out, t, "snicctl",
          ctl_msg(0, OP["status"]) + ctl_msg(0, OP["clients"]) + ctl_msg(0, OP["resources"]) +
          ctl_msg(0, OP["qps"], u32(0) + u32(0)) + ctl_msg(0, OP["qp"], u32(17) + u32(0)) +
          ctl_msg(0, OP["tcp_conns"], u32(0) + u32(0)) + ctl_msg(0, OP["cm_status"]) +
          ctl_msg(0, OP["cm_open"], fds=ctx) + ctl_msg(0, 39))
    write(out, t, "open-device",
          open_dev + ctl_msg(0, OP["query_port"]) + ctl_msg(0, OP["alloc_pd"]) +
          ctl_msg(1, OP["clients"]) + ctl_msg(1, OP["resources"]))
    # open_device, a PD, a CQ on a formatted ring, then destroy_cq aimed at the CQ's handle
    # (the second handle replies gave: flag 0x40, index 1).
    write(out, t, "cq",
          open_dev + ctl_msg(0, OP["alloc_pd"]) +
          ctl_msg(0, OP["create_cq"], u32(15) + u32(16) + u32(NO_HANDLE) + u32(0),
                  fds=ctl_fds(u8(FD_CQ_RING) + u8(4))) +
          ctl_msg(0, OP["destroy_cq"], u32(0) + u32(0) + u8(1), flags=0x40) +
          ctl_msg(1, OP["resources"]))
    # open_device, a PD, a CQ, an RC QP on them (flag 0x40 with 0x80: its first three words
    # the handles replies gave, PD then CQ twice), then the connection closes with them all.
    cq_req = u32(15) + u32(16) + u32(NO_HANDLE) + u32(0)
    qp_req = (u32(0) * 3 + u32(NO_HANDLE) + u32(2) + u32(0) + u32(16) + u32(16) + u32(1) +
              u32(1) + u32(0) + u32(16) + u32(16))
    write(out, t, "qp",
          open_dev + ctl_msg(0, OP["alloc_pd"]) +
          ctl_msg(0, OP["create_cq"], cq_req, fds=ctl_fds(u8(FD_CQ_RING) + u8(4))) +
          ctl_msg(0, OP["create_qp"], qp_req + u8(0x80) + u8(1) + u8(1), flags=0x40,
                  fds=ctl_fds(u8(FD_QP_RING) + u8(4))) +
          ctl_msg(0, OP["resources"]))
    # Malformed: a length 4 past the datagram (flags 0x04, delta), then a well-formed status
    # on another connection; another magic (0x01); another ABI (0x02: EPROTO).
    write(out, t, "bad-length",
          ctl_msg(0, OP["status"], flags=0x04, extra=u8(4)) + ctl_msg(1, OP["status"]))
    write(out, t, "bad-magic", ctl_msg(0, OP["status"], flags=0x01, extra=u32(0x100)))
    write(out, t, "old-abi", ctl_msg(0, OP["status"], flags=0x02, extra=u16(CTRL_ABI - 1)))
    # open_device with a body a byte short (flags 0x10, delta 7 % 17 - 8): the connection
    # closes.
    write(out, t, "short-body",
          ctl_msg(0, OP["open_device"], u32(0) + u8(0) * 3, flags=0x10, extra=u8(7),
                  fds=ctx) + ctl_msg(1, OP["status"]))
    # 17 descriptors (one more than any message takes) to alloc_pd after open_device.
    write(out, t, "too-many-fds",
          open_dev + u8(0) + u8(0) + u8(OP["alloc_pd"]) + u8(0) + u8(197) +
          u8(FD_DEVNULL) * 17 + ctl_msg(0, OP["resources"]))
    # Raw bytes: a header's worth of the magic and nothing right after it.
    write(out, t, "raw", u8(0) + u8(0x0F) + u16(24) + u32(CTRL_MAGIC) + bytes(20) + u8(0))
    # Three clients' messages waiting at once (client byte 0x80: the answer read later).
    write(out, t, "three-at-once",
          ctl_msg(0x80, OP["status"]) +
          ctl_msg(0x81, OP["open_device"], u32(0) + u32(0), fds=ctx) +
          ctl_msg(0x82, OP["status"], flags=0x01, extra=u32(0x100)) + ctl_msg(0, OP["clients"]) +
          ctl_msg(1, OP["alloc_pd"]))
    # A session closed with its open_device's reply unread (flags 0x80).
    write(out, t, "close-unread",
          ctl_msg(0, OP["open_device"], u32(0) + u32(0), flags=0x80, fds=ctx) +
          ctl_msg(0, OP["status"]))


if __name__ == "__main__":
    main()
