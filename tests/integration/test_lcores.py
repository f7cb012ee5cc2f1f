"""Two data lcores: `snicd -l 0-1` on the virtual wire gives wire0 (and its RoCEv2 and iWARP
devices, its QPs, CQs and SRQs) to the main lcore and wire1 to a worker lcore, each object
owned by the one lcore that serves its port. rdma-core's, perftest's and rdmacm-utils' own
tools then run between the two ports, so every message crosses from one lcore to the other
and back: RC and SRQ ping-pongs with their data checked, UD, perftest with four QPs, rping
over iWARP. The worker lcore's own CPU time shows that it did the work of its port.

Both lcores back off when idle (--idle-backoff), so that on a 2-CPU machine the tools get
their turns."""

from __future__ import annotations

from pathlib import Path

import pytest

import snictest as st
import test_perftest as pt
import test_rc as rc
import test_rdmacm as rcm
import test_ud as ud

SUBNET = "198.18.61"
TOOLS = {"ibverbs-utils": ("ibv_rc_pingpong", "ibv_srq_pingpong", "ibv_ud_pingpong"),
         "perftest": ("ib_write_bw",), "rdmacm-utils": ("rping",)}


@pytest.fixture(scope="module")
def two_lcores(tmp_path_factory, mem_args):
    for package, tools in TOOLS.items():
        for tool in tools:
            st.require_tool(tool, package)
    with st.wire_daemon(tmp_path_factory, mem_args, "lc", SUBNET, cores=("-l", "0-1")) as wire:
        yield wire


def lcore_threads(pid: int) -> dict[str, int]:
    """The daemon's DPDK worker threads (rte-worker-N) and the CPU time each has used,
    in clock ticks (user + system, /proc/PID/task/TID/stat)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        if comm.startswith("rte-worker"):
            out[comm] = int(fields[11]) + int(fields[12])  # utime, stime
    return out


def port_stats(d: st.Daemon) -> list[dict]:
    replies = st.telemetry_query(d.prefix, "/snic/port_stats,0", "/snic/port_stats,1")
    return [r["/snic/port_stats"] for r in replies]


def test_each_port_has_its_own_lcore_which_does_its_work(two_lcores):
    d, sock_dir = two_lcores
    assert [p["lcore"] for p in port_stats(d)] == [0, 1]
    before = lcore_threads(d.pid)
    assert list(before) == ["rte-worker-1"], f"one worker lcore expected, threads: {before}"
    rx_before = [p["roce_dispatched"] for p in port_stats(d)]
    rc.pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                ["-s", "4096", "-n", "5000"])
    rx_after = [p["roce_dispatched"] for p in port_stats(d)]
    # Each port received its half of the 10,000 messages (and the ACKs of the other's).
    assert all(a - b >= 5000 for a, b in zip(rx_after, rx_before)), (rx_before, rx_after)
    after = lcore_threads(d.pid)
    assert after["rte-worker-1"] > before["rte-worker-1"], (before, after)


@pytest.mark.parametrize("size", [1, 65536, 1 << 20])
def test_rc_pingpong_across_the_lcores(two_lcores, size):
    d, sock_dir = two_lcores
    rc.pingpong("ibv_rc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                ["-s", str(size), "-n", "200"])


def test_srq_pingpong_across_the_lcores(two_lcores):
    d, sock_dir = two_lcores
    rc.pingpong("ibv_srq_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                ["-s", "4096", "-n", "200", "-q", "4"])


def test_ud_pingpong_across_the_lcores(two_lcores):
    d, sock_dir = two_lcores
    ud.ud_pingpong(f"{d.name}_0", f"{d.name}_1", sock_dir, ["-s", "1024", "-n", "200"])


def test_perftest_with_four_qps_on_each_lcore(two_lcores):
    d, sock_dir = two_lcores
    out = pt.perftest(d, sock_dir, "ib_write_bw", "-s", "64", "-n", "2000", "-q", "4",
                      "--report-both")
    rows = pt.ROW.findall(out.split("#bytes", 1)[-1])
    assert rows and all(float(v) > 0 for v in rows[0][2:]), out


def test_rping_over_iwarp_across_the_lcores(two_lcores, tmp_path, monkeypatch):
    d, sock_dir = two_lcores
    monkeypatch.setenv("SNIC_DEVICES", f"{d.name}_iw0,{d.name}_iw1")
    rcm.client_server(d, sock_dir, tmp_path,
                      ["rping", "-s", "-a", f"{SUBNET}.1", "-p", "19901", "-C", "500", "-V"],
                      ["rping", "-c", "-a", f"{SUBNET}.1", "-I", f"{SUBNET}.2", "-p", "19901",
                       "-C", "500", "-V"])
