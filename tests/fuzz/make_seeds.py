#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the real rxe
and siw captures in tests/vectors: the frames and RoCEv2 packets as they are, and, for the
targets that read a stream of choices (rc_*, ud_qp, cm_agent, tcp_connection, mpa_frames),
the same packets wrapped in the commands those targets understand; and control_socket's
message sequences, built from the control protocol's layouts (shm/control_abi.h), and
cm_private_data's rdma_cm op sequences (shm/cm.h).
Deterministic; run it again after changing a target's input format:

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


def tcp_segment(frame):
    """(TCP header through payload, header length) of an IPv4 or IPv6 TCP frame, or None."""
    etype = struct.unpack(">H", frame[12:14])[0]
    if etype == 0x0800 and frame[23] == 6:
        ihl = (frame[14] & 0x0F) * 4
        end = 14 + struct.unpack(">H", frame[16:18])[0]
        seg = frame[14 + ihl:end]
    elif etype == 0x86DD and frame[20] == 6:
        seg = frame[54:54 + struct.unpack(">H", frame[18:20])[0]]
    else:
        return None
    return seg, (seg[12] >> 4) * 4


def siw_segments(vectors, cap):
    """The TCP segments of a siw capture, in order: (segment, header length)."""
    out = []
    for fr in frames(os.path.join(vectors, cap)):
        t = tcp_segment(fr)
        if t is not None:
            out.append(t)
    return out


def u8(v):
    return bytes([v & 0xFF])


def u16(v):
    return struct.pack("<H", v & 0xFFFF)


def u32(v):
    return struct.pack("<I", v & 0xFFFFFFFF)


def rc_config(uc=False):
    # fuzz_config(): mtu 1024, PSNs 100/5000, retry 7, rnr 7, rd_atomic 4/4, all remote
    # access (the top bit: a UC QP), ACK every 16.
    return u8(2) + u8(0) + u8(7) + u8(7) + u8(3) + u8(3) + u8(0x8E if uc else 0x0E) + u8(15)


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
    # A UC QP fed rxe's SEND and WRITE packets moved to UC's opcodes (RC's + 0x20).
    uc = [bytes([p[0] | 0x20]) + p[1:] for p in requests if p[0] <= 0x0B]
    write(args.out, "rc_responder", "rxe-uc-all",
          rc_config(uc=True) + rc_recv() + rc_recv() + b"".join(rc_raw(p, 0) for p in uc))
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
    # cm_agent: the same connection established, then spoofed DREQs and REJs (our comm ID
    # right; the peer's off by one, another, 0, or from another address), each of which must
    # change nothing, then the peer's own DREQ, which ends it; TimeWait runs out.
    established = (u8(7) + u8(1) +
                   u8(3) + u16(7471) + u32(0x123) + u32(0x456) + u8(20) + u8(3) + u8(0) +
                   u8(1) + u8(0) + u32(0x789) + u8(3) + u64(1) + u8(0) +
                   u8(5) + u8(0))
    spoofed = (u8(12) + u8(0) + u8(1 | 2 << 1) + u8(0) + u64(2) +  # DREQ, peer ID + 1
               u8(12) + u8(0) + u8(1 | 3 << 1) + u8(4) + u64(3) +  # DREQ, peer ID - 1
               # DREQ, both IDs right (the REP's 0x789 read big-endian), from elsewhere
               u8(12) + u8(0) + u8(1 | 8) + u32(0x89070000) + u8(3) + u8(0) + u64(4) +
               u8(12) + u8(0) + u8(0) + u32(0x55) + u8(8) + u8(2) + u8(28) + u64(5) +  # REJ
               u8(12) + u8(0) + u8(1 << 1) + u8(0) + u8(1) + u8(28) + u64(6))  # REJ, peer ID 0
    write(args.out, "cm_agent", "established-spoofed-then-dreq",
          established + spoofed + u8(13) + u8(0) + u8(8) + u64(7) + u8(11) + u8(1))
    if 0x0010 in mads:
        # The captured REQ received and accepted (REP sent), a spoofed DREQ, the peer's DREQ.
        write(args.out, "cm_agent", "req-accept-spoofed-then-dreq",
              u8(7) + u8(1) + u8(0) + u8(1) + mads[0x0010] +
              u8(4) + u32(0x42) + u8(0) + u8(0) +
              u8(12) + u8(0) + u8(1) + u32(0x1234) + u8(0) + u64(8) +
              u8(13) + u8(0) + u8(0) + u64(9))

    tcp_seeds(args)
    mpa_seeds(args)
    control_socket_seeds(args.out)
    cm_private_data_seeds(args.out)


def tcp_config(open_mode):
    # tcp_connection's TcpDriver: IPv4, SACK, timestamps and window scaling offered, no
    # keepalive; mtu 1500, send buffer 8256, 16 records, window 16384, 4 receive buffers,
    # 5 retries, 2 SYN retries, burst 16; the peer's ISS; three buffers posted.
    return (u8(open_mode << 5) + u16(1372) + u16(8192) + u8(15) + u16(16383) + u8(3) + u8(5) +
            u8(2) + u8(15) + u32(0x12345678) + u8(3))


def tcp_built(flags, ack_flag=True, seq=b"", syn_seq=False, ts=True, syn_opts=False, length=0):
    # A built segment: sel (ACK forced or not; sequence and acknowledgment at the peer's
    # RCV.NXT and our SND.MAX), flags, options, payload length.
    sel = 0x01 if ack_flag else 0x00
    ob = (0x0F if syn_opts else 0x08) if ts else (0x07 if syn_opts else 0x00)
    out = u8(0) + u8(sel) + u8(flags) + (b"" if syn_seq else u8(0))
    out += u8(ob)
    if syn_opts:
        out += u8(7)  # window scale
    if ts:
        out += u8(5) + u32(0)  # TSval steps by 5, TSecr 0
    if length == 0:
        out += u8(0)
    else:
        out += u8(100) + u8(length)
    return out


def tcp_seeds(args):
    write(args.out, "tcp_connection", "active-open-data-close",
          tcp_config(0) + u8(8) + u16(1023) +
          tcp_built(0x12, syn_seq=True, syn_opts=True) +  # SYN-ACK
          u8(6) + u8(200) + u16(999) +  # a 1000-byte record
          u8(9) + u8(0) +  # to the next deadline
          tcp_built(0x18, length=200) +  # data, acknowledging ours
          u8(11) + u8(0) +  # close
          tcp_built(0x11) +  # the peer's FIN
          u8(9) + u8(0))
    write(args.out, "tcp_connection", "passive-open-data",
          tcp_config(1) +
          tcp_built(0x02, ack_flag=False, syn_seq=True, syn_opts=True) +  # SYN
          tcp_built(0x10) +  # ACK of the SYN-ACK
          tcp_built(0x18, length=150) + tcp_built(0x18, length=150) +
          u8(6) + u8(100) + u8(99) +  # a 100-byte record
          u8(9) + u8(0))
    segs = siw_segments(args.vectors, "siw_real_crc.pcap")
    syn = next(sg for sg, hl in segs if sg[13] == 0x02)
    hlen = (syn[12] >> 4) * 4
    # The captured SYN's header (Linux's options) opens a passive connection; then an ACK.
    write(args.out, "tcp_connection", "siw-syn-passive",
          tcp_config(1) + u8(4) + u8(0x80 | (hlen - 20) // 4) + syn[:hlen] + u8(0) +
          tcp_built(0x10) + tcp_built(0x18, length=64))
    # Captured segments to the parser alone (their checksums are partial: not verified).
    for i, (sg, hl) in enumerate([x for x in segs if len(x[0]) <= 255][:6]):
        write(args.out, "tcp_connection", f"siw-parse-{i}",
              tcp_config(3) + u8(5) + u8(0) + u32(0) + u8(len(sg)) + sg)


def mpa_seeds(args):
    for cap, tag in (("siw_real_crc.pcap", "rev2"), ("siw_real_crc_mpav1.pcap", "rev1")):
        segs = siw_segments(args.vectors, cap)
        payloads = [sg[hl:] for sg, hl in segs if len(sg) > hl]
        req = next(p for p in payloads if p.startswith(b"MPA ID Req Frame"))
        rep = next(p for p in payloads if p.startswith(b"MPA ID Rep Frame"))
        # frames: no cut, no cuts, no key prefix, then the frame.
        write(args.out, "mpa_frames", f"siw-{tag}-request", u8(0) + u16(7) + u8(0) + u8(0) + req)
        write(args.out, "mpa_frames", f"siw-{tag}-reply", u8(0) + u16(7) + u8(0) + u8(0) + rep)
        # deframe_raw: the FPDUs that follow the first request's connection (CRCs on).
        start = segs.index(next(x for x in segs if x[0][x[1]:] == req))
        port = segs[start][0][:4]
        stream = b""
        for sg, hl in segs[start + 1:]:
            if sg[:4] == port and len(sg) > hl:
                stream += sg[hl:]
            if len(stream) > 1024:
                break
        write(args.out, "mpa_frames", f"siw-{tag}-fpdus", u8(2) + u8(0) + u8(1) + u8(0) + stream)
    # negotiation: revision 2, CRC required, IRD/ORD 4/4 (max IRD 8) both sides, 8 bytes of
    # private data, cut in two, 4 bytes of stream after each frame; accepted or rejected.
    side = u8(0x01) + u8(0) + u8(4) + u8(4) + u8(8)
    p2p = u8(0x09) + u8(0x06) + u8(4) + u8(4) + u8(8)  # peer-to-peer, Write or Read RTR
    tail = u8(2) + b"\x05\x09" + u8(4) + b"\x00\x02\x00\x00"
    pd = u8(0) + u8(8) + b"snic-pd!"
    write(args.out, "mpa_frames", "negotiate-accept",
          u8(1) + side + side + pd + tail + u8(0) + u8(1) + u8(4) + u8(4) + u8(0) + u8(4) + b"rep!")
    write(args.out, "mpa_frames", "negotiate-p2p",
          u8(1) + p2p + p2p + pd + tail + u8(0) + u8(1) + u8(0) + u8(4) + u8(0) + u8(0))
    write(args.out, "mpa_frames", "negotiate-reject",
          u8(1) + side + side + pd + tail + u8(0) + u8(0) + u8(0) + u8(0) + u8(0) + u8(3) + b"no!")
    # deframe_built: three ULPDUs (CRCs on), cut at three points.
    write(args.out, "mpa_frames", "built-fpdus",
          u8(3) + u8(0) + u8(1) + u8(3) + b"\x02\x07\x01" +
          u8(20) + bytes(range(20)) + u8(0) + u8(33) + bytes(range(33)))


# control_socket: CtrlOp values (shm/control_abi.h) and the target's input format.
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


# cm_private_data: ops and wire events (tests/fuzz/cm_private_data.cc's step numbers).
CM_CREATE, CM_BIND, CM_LISTEN, CM_CONNECT, CM_ACCEPT, CM_REJECT, CM_DISCONNECT, CM_DESTROY, \
    CM_EVENT = range(9)
WIRE_ROCE, WIRE_IWARP = 0, 1
EV_REQUEST, EV_REPLY, EV_ESTABLISHED, EV_REJECTED = 0, 1, 2, 3


def cm_priv(n):
    """A private data length and its bytes (as many as the request's array holds)."""
    return u8(n) + bytes((i * 7 + 1) & 0xFF for i in range(n))


def cm_param(n, cap=224):
    # qpn, psn, responder_resources, initiator_depth, qp_type, qkey, private data
    return u32(0x11) + u32(0x22) + u8(1) + u8(1) + u8(2) + u32(0) + u8(n) + \
        bytes((i * 7 + 1) & 0xFF for i in range(min(n, cap)))


def cm_event(wire, kind, conn=0, pd=8, qp=0, ps=0):
    """A wire event: a request of connection 0x1000 + `conn` (to port 7000 of the port's
    address; QP type RC, UC, UD by `qp`; port space TCP, UDP by `ps`), or an event of the
    wire's `conn`-th connection."""
    head = u8(CM_EVENT) + u8(wire | kind << 1)
    head += u16(conn) if kind == EV_REQUEST else u8(conn)
    return (head + u8(0) + u8(1) + u8(0) + u16(40000) + u8(ps) + u8(1) + u32(0x1234) + u8(qp) +
            u8(pd) + bytes(range(pd)))


def cm_listener(pick=0):
    # create_id (TCP, RC), bind 0.0.0.0:7000, listen with backlog 4
    return (u8(CM_CREATE) + u8(0) + u64(7) + u8(CM_BIND) + u8(0) + u8(pick) +
            u8(CM_LISTEN) + u8(pick) + u8(4))


def cm_private_data_seeds(out):
    t = "cm_private_data"
    for wire, name in ((WIRE_ROCE, "roce"), (WIRE_IWARP, "iwarp")):
        # A request to a listener, rejected with 255 bytes (more than CmRejectReq holds:
        # EINVAL on both wires), then with 148; a second request accepted with 255 bytes
        # (more than CmConnParam holds), then with 196.
        write(out, t, f"{name}-passive",
              u8(0) + cm_listener() +
              cm_event(wire, EV_REQUEST, conn=1) +
              u8(CM_REJECT) + u8(1) + cm_priv(255)[:1 + 148] +
              u8(CM_REJECT) + u8(1) + cm_priv(148) +
              cm_event(wire, EV_REQUEST, conn=2) +
              u8(CM_ACCEPT) + u8(2) + cm_param(255) +
              u8(CM_ACCEPT) + u8(2) + cm_param(196) +
              cm_event(wire, EV_ESTABLISHED, conn=1) + u8(CM_DISCONNECT) + u8(2) +
              u8(CM_DESTROY) + u8(0))
        # An active id: connect with 255 bytes, then 92; the reply, confirmed with 224 bytes;
        # a rejected one.
        transport = 8 if wire == WIRE_IWARP else 0
        connect = u8(CM_CONNECT) + u8(transport) + u8(0) + u8(20) + u8(3)
        write(out, t, f"{name}-active",
              u8(1) + u8(CM_CREATE) + u8(0) + u64(9) +
              connect + cm_param(255) + connect + cm_param(92) +
              cm_event(wire, EV_REPLY, pd=196) +
              u8(CM_ACCEPT) + u8(0) + cm_param(224) +
              u8(CM_DISCONNECT) + u8(0) +
              u8(CM_CREATE) + u8(0) + u64(10) +
              u8(CM_CONNECT) + u8(transport) + u8(1) + u8(20) + u8(3) + cm_param(56) +
              cm_event(wire, EV_REJECTED, conn=1, pd=148))
    # A datagram (SIDR) exchange on RoCE: a UDP id connects with 216 bytes; a UD listener's
    # request rejected with 148 bytes (a SIDR_REP holds 136).
    write(out, t, "roce-sidr",
          u8(0) + u8(CM_CREATE) + u8(1 | 2 << 2) + u64(11) +
          u8(CM_CONNECT) + u8(0) + u8(0) + u8(20) + u8(3) + cm_param(216) +
          u8(CM_CREATE) + u8(1 | 2 << 2) + u64(12) +
          u8(CM_BIND) + u8(0) + u8(1) + u8(CM_LISTEN) + u8(1) + u8(4) +
          cm_event(WIRE_ROCE, EV_REQUEST, conn=3, qp=2, ps=1) +
          u8(CM_REJECT) + u8(2) + cm_priv(148))


if __name__ == "__main__":
    main()
