#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the real rxe
captures in tests/vectors: the frames and RoCEv2 packets as they are, and, for the targets
that read a stream of choices (rc_*, ud_qp, cm_agent), the same packets wrapped in the
commands those targets understand. Deterministic; run it again after changing a target's
input format:

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


if __name__ == "__main__":
    main()
