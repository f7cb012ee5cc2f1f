"""The floor under snic's figures: snicd's raw-ping and raw-bw self-tests over the virtual
wire (scripts/bench.sh compares snic with them). They complete, report ordered statistics
and plausible rates, and refuse bad specs as usage errors. Nothing asserts on time."""

from __future__ import annotations

import json

import pytest

import snictest as st

WIRE = ["--wire", "--port", "wire0,ip=198.18.48.1/24,mtu=9000", "--port", "wire1,ip=198.18.48.2/24,mtu=9000"]


def selftest(daemons, mem_args, spec: str):
    d = daemons(st.unique("floor", maxlen=24), ["-l", "0", "--no-pci", *mem_args],
                [*WIRE, "--selftest", spec])
    rc = d.wait(timeout=120)
    return d, rc


@pytest.mark.parametrize("size,frames", [(8, 1), (4096, 1), (65536, 8), (100000, 12)])
def test_raw_ping_reports_ordered_round_trips(daemons, mem_args, tmp_path, size, frames):
    samples = tmp_path / "samples.txt"
    d, rc = selftest(daemons, mem_args, f"raw-ping,size={size},count=300,warmup=10,json,samples={samples}")
    assert rc == 0, d.describe()
    r = json.loads(d.stdout().strip().splitlines()[-1])
    assert (r["test"], r["size"], r["count"], r["lost"], r["frames"]) == ("raw-ping", size, 300, 0, frames)
    t = r["rtt_us"]
    assert 0 < t["min"] <= t["median"] <= t["p99"] <= t["p999"] <= t["max"], r
    assert t["min"] <= t["mean"] <= t["max"], r
    values = [float(x) for x in samples.read_text().split()]
    assert len(values) == 300 and min(values) == pytest.approx(t["min"], abs=0.001)


def test_raw_ping_text_line(daemons, mem_args):
    d, rc = selftest(daemons, mem_args, "raw-ping,count=50")
    assert rc == 0, d.describe()
    assert "selftest raw-ping: 198.18.48.2 size 8 B (1 frame) ; 50/50 round trips" in d.stdout(), d.describe()


@pytest.mark.parametrize("size", [64, 65536])
def test_raw_bw_delivers_every_frame(daemons, mem_args, size):
    d, rc = selftest(daemons, mem_args, f"raw-bw,size={size},count=2000,json")
    assert rc == 0, d.describe()
    r = json.loads(d.stdout().strip().splitlines()[-1])
    assert (r["test"], r["size"], r["messages"]) == ("raw-bw", size, 2000)
    assert r["frames"] == 2000 * -(-size // (9000 - 28))
    assert r["seconds"] > 0 and r["msg_rate_mpps"] > 0 and r["bw_gbps"] > 0
    assert r["bw_gbps"] == pytest.approx(r["msg_rate_mpps"] * 1e6 * size * 8 / 1e9, rel=0.01)


@pytest.mark.parametrize("spec", ["raw-ping,size=0", "raw-bw,count=0", "raw-ping,bogus=1", "raw-pong"])
def test_bad_selftest_specs_are_usage_errors(daemons, mem_args, spec):
    d, rc = selftest(daemons, mem_args, spec)
    assert rc == 2, d.describe()
    assert "--selftest" in d.stderr(), d.describe()
