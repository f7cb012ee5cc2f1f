#!/usr/bin/python3
"""Checks RoCEv2 frames in a pcap against two outside authorities:

  (a) Wireshark's InfiniBand dissector (tshark -V): no malformed packet, no expert
      error or warning, every RoCEv2 frame dissected as InfiniBand; with a manifest
      (the lines snic-roce-pcap prints), each frame must also carry the opcode the
      manifest names (Wireshark's name for that number and scapy's must both match
      ours), exactly the extension headers it lists, the payload and pad it says, a
      good IPv4 header checksum and, over IPv6, a good UDP checksum;
  (b) the ICRC: recomputed by scapy's RoCE layer (scapy.contrib.roce) for IPv4, and
      for IPv6 (which scapy does not support) by icrc_ipv6() below, written from the
      RoCEv2 annex and itself checked against real IPv6 captures by the tests.

    check_roce_pcap.py PCAP [MANIFEST]

Prints one line per problem and exits 1, or prints a summary and exits 0. Needs
tshark (installed with apt-get when missing and run as root) and Debian's
python3-scapy; run it with /usr/bin/python3.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

ROCE_PORT = 4791

# RDMA upper-layer protocols whose heuristics claim arbitrary SEND payloads (RPC over
# RDMA in particular) and then report them malformed; our payloads are test patterns.
TSHARK_ARGS = [
    "-o", "ip.check_checksum:TRUE",
    "-o", "udp.check_checksum:TRUE",
    *[a for p in ("rpcordma", "smb_direct", "smc", "nvme-rdma", "lnet", "iser",
                  "infiniband_sdp", "fcoib") for a in ("--disable-protocol", p)],
]

# The tshark field that is present exactly when the frame has each extension header.
HEADER_FIELDS = {
    "DETH": "infiniband.deth.q_key",
    "RETH": "infiniband.reth.dmalen",  # not .va: Wireshark shows AtomicETH's VA with it
    "AtomicETH": "infiniband.atomiceth.swapdt",
    "AETH": "infiniband.aeth.syndrome",
    "AtomicAckETH": "infiniband.atomicacketh.origremdt",
    "ImmDt": "infiniband.immdt",
    "IETH": "infiniband.ieth",
}

FIELDS = [
    "frame.number", "eth.type", "udp.dstport", "ip.checksum.status", "udp.checksum.status",
    "infiniband.bth.opcode", "infiniband.bth.padcnt", "infiniband.invariant.crc", "data.len",
    *HEADER_FIELDS.values(),
]


@dataclass
class ManifestLine:
    frame: int
    ip_version: int
    opcode: int
    name: str
    headers: list[str]
    payload: int


@dataclass
class Report:
    frames: int = 0
    roce: int = 0
    icrc_checked: int = 0
    opcodes: dict[int, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def ensure_tshark() -> str:
    """The path of tshark, installing Debian's package when it is missing (as root)."""
    path = shutil.which("tshark")
    if path:
        return path
    if os.geteuid() != 0:
        raise RuntimeError("tshark is missing; install it (apt-get install tshark) or run as root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["debconf-set-selections"], input=b"wireshark-common wireshark-common/"
                   b"install-setuid boolean false\n", check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "tshark"],
                   check=True, env=env, stdin=subprocess.DEVNULL)
    path = shutil.which("tshark")
    if not path:
        raise RuntimeError("apt-get installed tshark but it is not on PATH")
    return path


def read_manifest(path: Path) -> list[ManifestLine]:
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        frame, ipv, opcode, name, headers, payload = line.split()
        out.append(ManifestLine(int(frame), int(ipv), int(opcode, 16), name,
                                [] if headers == "-" else headers.split(","), int(payload)))
    return out


def read_pcap(path: Path) -> list[bytes]:
    """The frames of a classic little- or big-endian pcap file."""
    data = path.read_bytes()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        order = "little"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        order = "big"
    else:
        raise ValueError(f"{path}: not a classic pcap file")
    frames, at = [], 24
    while at + 16 <= len(data):
        incl = int.from_bytes(data[at + 8:at + 12], order)
        frames.append(data[at + 16:at + 16 + incl])
        at += 16 + incl
    return frames


def icrc_ipv6(l3: bytes) -> int:
    """The ICRC of an IPv6 RoCEv2 packet (l3: the IPv6 packet, ICRC included), per the
    RoCEv2 annex: CRC-32 over 8 bytes of ones, the IPv6 header with traffic class, flow
    label and hop limit as ones, the UDP header with its checksum as ones, the BTH with
    its byte 4 as ones, and the rest up to the ICRC."""
    end = 40 + int.from_bytes(l3[4:6], "big")
    p = bytearray(l3[:end - 4])
    p[0] |= 0x0F
    p[1:4] = b"\xff\xff\xff"
    p[7] = 0xFF
    p[46:48] = b"\xff\xff"
    p[48 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(p)) & 0xFFFFFFFF


def wire_icrc(l3: bytes, end: int) -> int:
    """The ICRC on the wire: the last 4 bytes of the IP packet, least significant first."""
    return int.from_bytes(l3[end - 4:end], "little")


def check_icrcs(frames: list[bytes], report: Report) -> None:
    """(b): every RoCEv2 frame's ICRC against scapy (IPv4) or icrc_ipv6 (IPv6)."""
    import logging
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)
    from scapy.contrib.roce import BTH  # noqa: F401  (binds UDP 4791 to BTH)
    from scapy.layers.l2 import Ether

    for number, raw in enumerate(frames, 1):
        eth_type = int.from_bytes(raw[12:14], "big")
        if eth_type == 0x0800:
            ihl = (raw[14] & 0x0F) * 4
            if raw[14 + 9] != 17 or int.from_bytes(raw[14 + ihl + 2:14 + ihl + 4], "big") != ROCE_PORT:
                continue
            pkt = Ether(raw)
            if BTH not in pkt:
                report.problems.append(f"frame {number}: scapy does not see a BTH")
                continue
            # Rebuild with scapy computing the ICRC; every other field is kept as parsed.
            pkt[BTH].icrc = None
            rebuilt = bytes(pkt)
            end = 14 + int.from_bytes(raw[16:18], "big")
            ours, theirs = wire_icrc(raw[14:], end - 14), wire_icrc(rebuilt[14:], end - 14)
            if ours != theirs or rebuilt[:end - 4] != raw[:end - 4]:
                report.problems.append(
                    f"frame {number}: ICRC {ours:08x} on the wire, scapy computes {theirs:08x}")
            report.icrc_checked += 1
        elif eth_type == 0x86DD:
            l3 = raw[14:]
            if l3[6] != 17 or int.from_bytes(l3[42:44], "big") != ROCE_PORT:
                continue
            end = 40 + int.from_bytes(l3[4:6], "big")
            ours, theirs = wire_icrc(l3, end), icrc_ipv6(l3)
            if ours != theirs:
                report.problems.append(
                    f"frame {number}: ICRC {ours:08x} on the wire, the annex gives {theirs:08x}")
            report.icrc_checked += 1


def tshark_fields(tshark: str, pcap: Path) -> list[dict[str, str]]:
    cmd = [tshark, "-r", str(pcap), *TSHARK_ARGS, "-T", "fields", "-E", "separator=\t",
           "-E", "occurrence=f", *[a for f in FIELDS for a in ("-e", f)]]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [dict(zip(FIELDS, line.split("\t"))) for line in out.splitlines()]


def tshark_verbose(tshark: str, pcap: Path) -> dict[int, str]:
    """tshark -V's text, by frame number."""
    cmd = [tshark, "-r", str(pcap), *TSHARK_ARGS, "-V"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    frames: dict[int, str] = {}
    for chunk in re.split(r"(?m)^(?=Frame \d+: )", out):
        m = re.match(r"Frame (\d+): ", chunk)
        if m:
            frames[int(m.group(1))] = chunk
    return frames


def normalise(name: str) -> str:
    """A comparable form of an opcode name: ours (RC_RDMA_READ_RESPONSE_FIRST),
    scapy's (the same) or Wireshark's ("Reliable Connection (RC) - RDMA READ response
    First", "... - CmpSwap")."""
    m = re.match(r".*\((RC|UC|RD|UD|XRC)\) - (.*)$", name)
    if m:
        name = m.group(1) + m.group(2)
    name = re.sub(r"[^a-z]", "", name.lower())
    return name.replace("cmpswap", "compareswap")


def check(pcap: Path, manifest: list[ManifestLine] | None = None,
          expert_ok: tuple[str, ...] = ()) -> Report:
    """Runs (a) and (b) on `pcap`. `expert_ok`: regular expressions of tshark expert
    messages to tolerate (for real captures: rxe's zero UDP checksum over IPv6)."""
    tshark = ensure_tshark()
    report = Report()
    frames = read_pcap(pcap)
    report.frames = len(frames)
    rows = tshark_fields(tshark, pcap)
    verbose = tshark_verbose(tshark, pcap)
    if len(rows) != len(frames):
        report.problems.append(f"tshark reads {len(rows)} frames, the file holds {len(frames)}")

    for row in rows:
        n = int(row["frame.number"])
        text = verbose.get(n, "")
        if row["udp.dstport"] != str(ROCE_PORT):
            continue
        report.roce += 1
        for line in text.splitlines():
            if "Malformed" in line or re.search(r"Expert Info \((Error|Warning)/", line):
                if not any(re.search(ok, line) for ok in expert_ok):
                    report.problems.append(f"frame {n}: tshark: {line.strip()}")
        if not row["infiniband.bth.opcode"] or "\nInfiniBand\n" not in text:
            report.problems.append(f"frame {n}: not dissected as InfiniBand")
            continue
        op = int(row["infiniband.bth.opcode"])
        report.opcodes[op] = report.opcodes.get(op, 0) + 1
        if not row["infiniband.invariant.crc"]:
            report.problems.append(f"frame {n}: tshark shows no ICRC")

    if manifest is not None:
        check_manifest(rows, verbose, frames, manifest, report)
    check_icrcs(frames, report)
    return report


def check_manifest(rows: list[dict[str, str]], verbose: dict[int, str], frames: list[bytes],
                   manifest: list[ManifestLine], report: Report) -> None:
    try:
        from scapy.contrib.roce import _bth_opcodes as scapy_names
    except ImportError:
        scapy_names = {}
    if len(manifest) != len(rows):
        report.problems.append(f"manifest lists {len(manifest)} frames, tshark reads {len(rows)}")
    for m, row in zip(manifest, rows):
        where = f"frame {m.frame} ({m.name})"
        if int(row["frame.number"]) != m.frame:
            report.problems.append(f"{where}: out of order")
            continue
        if not row["infiniband.bth.opcode"]:
            continue  # already reported
        op = int(row["infiniband.bth.opcode"])
        if op != m.opcode:
            report.problems.append(f"{where}: tshark reads opcode {op}, manifest {m.opcode}")
        label = re.search(r"Opcode: (.*) \(\d+\)", verbose[m.frame])
        if not label or normalise(label.group(1)) != normalise(m.name):
            report.problems.append(f"{where}: Wireshark calls opcode {op} "
                                   f"{label.group(1) if label else '?'!r}")
        if op in scapy_names and scapy_names[op] != m.name:
            report.problems.append(f"{where}: scapy calls opcode {op} {scapy_names[op]!r}")
        for header, fld in HEADER_FIELDS.items():
            if bool(row[fld]) != (header in m.headers):
                report.problems.append(f"{where}: {header} {'present' if row[fld] else 'absent'} "
                                       "in tshark's dissection")
        pad = -m.payload % 4
        if row["infiniband.bth.padcnt"] != str(pad):
            report.problems.append(f"{where}: pad count {row['infiniband.bth.padcnt']}, want {pad}")
        data_len = int(row["data.len"] or 0)
        if data_len != m.payload + pad:
            report.problems.append(f"{where}: tshark sees {data_len} bytes of payload and pad, "
                                   f"want {m.payload + pad}")
        raw = frames[m.frame - 1]
        if row["infiniband.invariant.crc"] and int(row["infiniband.invariant.crc"], 16) != \
                int.from_bytes(raw[-4:], "big"):
            report.problems.append(f"{where}: tshark finds the ICRC elsewhere than the last 4 bytes")
        if m.ip_version == 4 and row["ip.checksum.status"] != "1":
            report.problems.append(f"{where}: IPv4 header checksum status {row['ip.checksum.status']}")
        if m.ip_version == 6 and row["udp.checksum.status"] != "1":
            report.problems.append(f"{where}: UDP checksum status {row['udp.checksum.status']}")
        want_type = "0x0800" if m.ip_version == 4 else "0x86dd"
        if row["eth.type"] != want_type:
            report.problems.append(f"{where}: Ethernet type {row['eth.type']}")


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    manifest = read_manifest(Path(argv[2])) if len(argv) == 3 else None
    report = check(Path(argv[1]), manifest)
    for p in report.problems:
        print(p)
    if report.problems:
        return 1
    ops = ", ".join(f"0x{k:02x}" for k in sorted(report.opcodes))
    print(f"ok: {report.frames} frames, {report.roce} RoCEv2, {report.icrc_checked} ICRCs "
          f"recomputed and equal; opcodes {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
