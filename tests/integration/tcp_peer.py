#!/usr/bin/python3
"""The kernel's side of snic's TCP tests (run inside the test's namespace).

  tcp_peer.py server PORT [--count N]
      listens on PORT (prints "listening" once it does), takes N connections one after the
      other, reads each to EOF with a running CRC-32, answers "<bytes> <crc32 hex>\\n" and
      closes. Prints one JSON object per connection.
  tcp_peer.py client IP PORT BYTES [--close half|full|abort] [--hold]
      connects, sends BYTES bytes (a pseudo-random pattern), then
        half:  shutdown(SHUT_WR), reads snic's answer to EOF and checks it (the default)
        full:  close() at once (snic's answer then meets a RST)
        abort: SO_LINGER 0 and close(): a RST instead of a FIN
      --hold: after the first 64 KiB, prints "holding" and waits for a line on stdin.
      Prints one JSON object: bytes, crc32, answer, throughput, the socket's retransmissions.
  tcp_peer.py connect IP PORT
      one connect(); prints {"errno": N} (0: connected).
  tcp_peer.py raw IP PORT [--send HEX] [--wait S]
      connects, sends the bytes HEX names (none: stays silent), then reads until the peer
      closes (FIN: "eof", RST: "reset") or S seconds pass ("open"); prints one JSON object:
      end, seconds, the bytes received (hex, the first 256).
The checksum is zlib's CRC-32, the one snic's self-tests compute (proto/crc).
"""

import argparse
import json
import os
import socket
import struct
import sys
import time
import zlib

CHUNK = 1 << 20


def pattern() -> bytes:
    # 1 MiB + 7 bytes: a period no segment, record or buffer size divides.
    rnd = bytes((i * 2654435761 >> 13) & 0xff for i in range(4093))
    block = (rnd * (CHUNK // len(rnd) + 2))[:CHUNK + 7]
    return block


def tcp_info(s: socket.socket) -> dict:
    # struct tcp_info (linux/tcp.h): the fields up to tcpi_total_retrans.
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    f = struct.unpack("8B24I", raw[:104])
    return {"retransmits_now": f[2], "rtt_us": f[8 + 15], "snd_cwnd": f[8 + 18],
            "total_retrans": f[8 + 23]}


def serve(args) -> int:
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("0.0.0.0", args.port))
    ls.listen(16)
    print("listening", flush=True)
    for _ in range(args.count):
        s, peer = ls.accept()
        t0 = time.monotonic()
        crc = 0
        n = 0
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while True:
            got = s.recv_into(buf)
            if got == 0:
                break
            crc = zlib.crc32(view[:got], crc)
            n += got
        dt = time.monotonic() - t0
        info = tcp_info(s)
        s.sendall(f"{n} {crc:08x}\n".encode())
        s.close()
        print(json.dumps({"peer": f"{peer[0]}:{peer[1]}", "bytes": n, "crc32": f"{crc:08x}",
                          "seconds": dt, "MBps": n / dt / 1e6 if dt > 0 else 0, **info}),
              flush=True)
    return 0


def client(args) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect((args.ip, args.port))
    data = pattern()
    view = memoryview(data)
    crc = 0
    sent = 0
    t0 = time.monotonic()
    held = not args.hold
    while sent < args.bytes:
        off = sent % (len(data) - 7)
        n = min(args.bytes - sent, len(data) - off, CHUNK)
        chunk = view[off:off + n]
        s.sendall(chunk)
        crc = zlib.crc32(chunk, crc)
        sent += n
        if not held and sent >= 65536:
            print("holding", flush=True)
            sys.stdin.readline()
            held = True
    out = {"bytes": sent, "crc32": f"{crc:08x}"}
    if args.close == "abort":
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    elif args.close == "full":
        s.close()
    else:
        s.shutdown(socket.SHUT_WR)
        answer = b""
        while True:
            got = s.recv(4096)
            if not got:
                break
            answer += got
        dt = time.monotonic() - t0
        out.update({"answer": answer.decode(errors="replace").strip(), "seconds": dt,
                    "MBps": sent / dt / 1e6 if dt > 0 else 0, **tcp_info(s)})
        s.close()
    print(json.dumps(out), flush=True)
    return 0


def connect(args) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(10)
    err = s.connect_ex((args.ip, args.port))
    print(json.dumps({"errno": err, "error": os.strerror(err) if err else ""}), flush=True)
    s.close()
    return 0


def raw(args) -> int:
    s = socket.create_connection((args.ip, args.port), timeout=10)
    if args.send:
        s.sendall(bytes.fromhex(args.send))
    t0 = time.monotonic()
    got = b""
    end = "open"
    s.settimeout(args.wait)
    try:
        while True:
            b = s.recv(65536)
            if not b:
                end = "eof"
                break
            got += b
    except ConnectionResetError:
        end = "reset"
    except socket.timeout:
        end = "open"
    s.close()
    print(json.dumps({"end": end, "seconds": round(time.monotonic() - t0, 3),
                      "received": got[:256].hex()}))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    sv = sub.add_parser("server")
    sv.add_argument("port", type=int)
    sv.add_argument("--count", type=int, default=1)
    cl = sub.add_parser("client")
    cl.add_argument("ip")
    cl.add_argument("port", type=int)
    cl.add_argument("bytes", type=int)
    cl.add_argument("--close", choices=("half", "full", "abort"), default="half")
    cl.add_argument("--hold", action="store_true")
    co = sub.add_parser("connect")
    co.add_argument("ip")
    co.add_argument("port", type=int)
    rw = sub.add_parser("raw")
    rw.add_argument("ip")
    rw.add_argument("port", type=int)
    rw.add_argument("--send", default="")
    rw.add_argument("--wait", type=float, default=30.0)
    args = p.parse_args()
    return {"server": serve, "client": client, "connect": connect, "raw": raw}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
