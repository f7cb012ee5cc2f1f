"""RoCEv2 frames built by proto/roce, judged by Wireshark's dissector and scapy's ICRC.

    /usr/bin/python3 -m pytest tests/interop -v

Uses the built snic-roce-pcap ($SNIC_ROCE_PCAP, else $SNIC_BUILD/tests/interop/
snic-roce-pcap, $SNIC_BUILD defaulting to build/) and the real captures in
$SNIC_TEST_VECTORS (default tests/vectors). Builds nothing; a missing program,
capture or tshark fails the test rather than skipping it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import check_roce_pcap as crp  # noqa: E402

BUILD = Path(os.environ.get("SNIC_BUILD", REPO / "build"))
WRITER = Path(os.environ.get("SNIC_ROCE_PCAP", BUILD / "tests" / "interop" / "snic-roce-pcap"))
VECTORS = Path(os.environ.get("SNIC_TEST_VECTORS", REPO / "tests" / "vectors"))

# What snic-roce-pcap writes: one IPv4 frame per opcode of the table (37), three IPv4
# frames with masked fields changed after the ICRC, five IPv6 frames.
OPCODES = {0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
           0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17,
           0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2a, 0x2b,
           0x64, 0x65}


@pytest.fixture(scope="session")
def tshark() -> str:
    try:
        return crp.ensure_tshark()
    except (RuntimeError, subprocess.CalledProcessError) as e:
        pytest.fail(f"tshark: {e} (scripts/setup.sh installs it)")


@pytest.fixture(scope="session")
def ours(tmp_path_factory, tshark) -> tuple[Path, list[crp.ManifestLine]]:
    """The pcap snic-roce-pcap writes, and its manifest."""
    if not os.access(WRITER, os.X_OK):
        pytest.fail(f"{WRITER} is not built (ninja -C {BUILD}, or set SNIC_ROCE_PCAP)")
    pcap = tmp_path_factory.mktemp("roce") / "snic_roce.pcap"
    out = subprocess.run([str(WRITER), str(pcap)], check=True, capture_output=True, text=True)
    manifest_path = pcap.with_suffix(".manifest")
    manifest_path.write_text(out.stdout)
    return pcap, crp.read_manifest(manifest_path)


def vector(name: str) -> Path:
    path = VECTORS / name
    if not path.is_file():
        pytest.fail(f"{path} is missing (set SNIC_TEST_VECTORS)")
    return path


def write_pcap_like(src: Path, dst: Path, frames: list[bytes]) -> None:
    """Writes `frames` into a copy of `src`'s pcap (same global header)."""
    header = src.read_bytes()[:24]
    body = b""
    for i, f in enumerate(frames):
        body += (1700000000 + i).to_bytes(4, "little") + bytes(4)
        body += len(f).to_bytes(4, "little") * 2 + f
    dst.write_bytes(header + body)


def test_our_frames_dissect_cleanly_and_their_icrcs_match_scapy(ours):
    pcap, manifest = ours
    report = crp.check(pcap, manifest)
    assert report.problems == []
    assert report.frames == len(manifest) == 45
    assert report.roce == 45
    assert report.icrc_checked == 45
    assert set(report.opcodes) == OPCODES
    assert sum(1 for m in manifest if m.ip_version == 6) == 5


def test_our_opcode_names_match_scapy_and_wireshark(ours):
    # check() compares names; this pins that the comparison ran over every opcode.
    pcap, manifest = ours
    from scapy.contrib.roce import _bth_opcodes
    named = {m.opcode: m.name for m in manifest}
    assert set(named) == OPCODES
    for op, name in named.items():
        if op in _bth_opcodes:  # scapy lacks SEND with Invalidate (0x16, 0x17)
            assert _bth_opcodes[op] == name
    assert crp.normalise("Reliable Connection (RC) - CmpSwap") == crp.normalise("RC_COMPARE_SWAP")


def test_checker_accepts_real_rxe_traffic():
    # The checker itself, against the authority: rxe's own ICRCs must all pass.
    report = crp.check(vector("rxe_real.pcap"))
    assert report.problems == []
    assert (report.frames, report.roce, report.icrc_checked) == (391, 311, 311)
    assert set(report.opcodes) == {0x00, 0x01, 0x02, 0x04, 0x0a, 0x0c, 0x10, 0x11, 0x64}


def test_checker_ipv6_icrc_agrees_with_real_rxe_ipv6_traffic():
    # rxe sends UDP checksum 0 over IPv6, which Wireshark flags; the ICRCs must hold.
    report = crp.check(vector("rxe_real_ipv6.pcap"),
                       expert_ok=(r"Illegal checksum value \(0\)",))
    assert report.problems == []
    assert (report.roce, report.icrc_checked) == (20, 20)


def test_checker_catches_a_corrupted_byte(ours, tmp_path):
    pcap, manifest = ours
    frames = crp.read_pcap(pcap)
    v4 = next(m.frame for m in manifest if m.ip_version == 4 and m.payload > 0)
    v6 = next(m.frame for m in manifest if m.ip_version == 6 and m.payload > 0)
    for n in (v4, v6):
        f = bytearray(frames[n - 1])
        f[-6] ^= 0x01  # a payload (or pad) byte
        frames[n - 1] = bytes(f)
    bad = tmp_path / "corrupted.pcap"
    write_pcap_like(pcap, bad, frames)
    report = crp.check(bad, manifest)
    icrc = [p for p in report.problems if "ICRC" in p]
    assert len(icrc) == 2, report.problems
    assert icrc[0].startswith(f"frame {v4}:") and icrc[1].startswith(f"frame {v6}:")


def test_checker_catches_a_wrong_name_or_header_list(ours):
    pcap, manifest = ours
    wrong = [crp.ManifestLine(**vars(m)) for m in manifest]
    wrong[0].name = "RC_SEND_MIDDLE"      # frame 1 is RC_SEND_FIRST
    wrong[6].headers = []                  # frame 7 is RC_RDMA_WRITE_FIRST: has a RETH
    report = crp.check(pcap, wrong)
    assert any(p.startswith("frame 1 ") and "Wireshark calls" in p for p in report.problems)
    assert any(p.startswith("frame 7 ") and "RETH present" in p for p in report.problems)
