"""RC under stress: tests/stress/snic-rc-stress between the two ports of one snicd's
virtual wire, every byte and every completion checked by the program itself (SEND, WRITE,
WRITE with immediate, READ, fetch-and-add, compare-and-swap; several in flight, both
directions). Over a wire that drops, duplicates, reorders and corrupts frames (and the
daemon's counters show it did), over a clean wire, towards a peer that never answers
(RETRY_EXC_ERR within the bound of the timeout and retry count, the rest flushed, the QP in
ERR), and with RDMA operations the target must refuse (REM_ACCESS_ERR, memory untouched).

The same workload runs over iWARP (the ports' NAME_iw0 and NAME_iw1 devices: RDMAP, DDP and
MPA over snic's TCP), connected through rdma_cm, on both wires: on the faulty one TCP
recovers the lost frames and its checksum (and MPA's CRC behind it) catches the corrupted
ones. SNIC_DEVICES shows the program the iWARP devices alone, since they share their
ports' addresses with the RoCE devices.

Sizes stay modest so that the whole file takes well under a minute on a loaded 2-core
machine; scripts/stress.sh runs the full-size version."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import snictest as st

STRESS = st.BUILD / "tests" / "stress" / "snic-rc-stress"
FAULTS = "loss=0.05,dup=0.01,reorder=0.01,corrupt=0.005,seed=7"
FAULT_COUNTERS = [f"{d}_fault_{k}" for d in ("rx", "tx")
                  for k in ("dropped", "duplicated", "reordered", "corrupted")]
SUMMARY = re.compile(r"^snic-rc-stress: ok: ops (\d+) bytes (\d+) seconds ([\d.]+) MB/s ([\d.]+)", re.M)
RUN_TIMEOUT = 120  # s; only cuts a hang short (the program has its own stall bound)


def start_wire_daemon(tmp_path_factory, mem_args, prefix: str, subnet: str, wire1_extra: str = ""):
    if not os.access(STRESS, os.X_OK):
        pytest.fail(f"{STRESS} is not built (ninja -C {st.BUILD})")
    name = st.unique(prefix, maxlen=24)
    st.remove_daemon_leftovers(name)
    sock_dir = tmp_path_factory.mktemp("snic-sockets")
    # ARP entries expire every second, so that runs cross expiries (with lost ARP frames on
    # the faulty wire): a peer's last MAC must stay in use while it is resolved again, or
    # its connections stall past their retry budget.
    d = st.Daemon(name, ["-l", "0", "--no-pci", *mem_args],
                  ["--wire", "--port", f"wire0,ip={subnet}.1/24", "--port", f"wire1,ip={subnet}.2/24{wire1_extra}",
                   "--idle-backoff", "20", "--arp-timeout", "1"],
                  tmp_path_factory.mktemp("snicd"), ctrl=str(sock_dir / f"{name}.sock"))
    d.start()
    return d, sock_dir


@pytest.fixture(scope="module")
def faulty(tmp_path_factory, mem_args):
    d, sock_dir = start_wire_daemon(tmp_path_factory, mem_args, "rcfault", "198.18.16", "," + FAULTS)
    try:
        status = d.wait_ready()
        yield d, sock_dir, status
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def clean(tmp_path_factory, mem_args):
    d, sock_dir = start_wire_daemon(tmp_path_factory, mem_args, "rcclean", "198.18.17")
    try:
        status = d.wait_ready()
        yield d, sock_dir, status
    finally:
        d.cleanup()


IWARP = ("iw0", "iw1")


def stress_env(d: st.Daemon, sock_dir, devices) -> dict:
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    env.pop("LD_PRELOAD", None)
    if devices == IWARP:  # the iWARP devices alone: rdma_cm takes the addresses to them
        env["SNIC_DEVICES"] = ",".join(f"{d.name}_{i}" for i in devices)
    else:
        env.pop("SNIC_DEVICES", None)
    return env


def run_stress(d: st.Daemon, sock_dir, *args: str, devices=(0, 1)) -> subprocess.CompletedProcess:
    if devices == IWARP:
        # An iWARP device's GID is its MAC: the program learns the ports' addresses here.
        ports = st.ctl_status_ok(d.ctrl).ports
        addrs = [next(p.ip.split("/")[0] for p in ports if f"{d.name}_{i}" in p.devices.split(","))
                 for i in devices]
        args = ("--addrs", ",".join(addrs), *args)
    cmd = [str(STRESS), *args, *(f"{d.name}_{i}" for i in devices)]
    return subprocess.run(cmd, env=stress_env(d, sock_dir, devices), capture_output=True,
                          text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)


def stress(d: st.Daemon, sock_dir, *args: str, devices=(0, 1)) -> subprocess.CompletedProcess:
    res = run_stress(d, sock_dir, *args, devices=devices)
    assert res.returncode == 0, (f"{' '.join(res.args)} exited with {res.returncode}\n"
                                 f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}\n"
                                 f"snicd:\n{d.describe()}")
    return res


def wire1_stats(d: st.Daemon, status: st.Status) -> dict:
    port = next(p for p in status.ports if p.device.endswith("wire1"))
    (reply,) = st.telemetry_query(d.prefix, f"/snic/port_stats,{port.id}")
    return reply["/snic/port_stats"]


def summary(res: subprocess.CompletedProcess, ops: int) -> re.Match:
    m = SUMMARY.search(res.stdout)
    assert m, f"no summary line:\n{res.stdout}"
    assert int(m[1]) == ops, m[0]
    return m


def test_stress_over_a_faulty_wire(faulty):
    """2000 operations of up to 256 KiB while wire1 drops 5% of the frames each way,
    duplicates, reorders and corrupts some: everything arrives once, intact, in order."""
    d, sock_dir, status = faulty
    before = wire1_stats(d, status)
    # Timeout code 10 (4.2 ms, 8 tries): losses at the tail of a burst are recovered quickly.
    res = stress(d, sock_dir, "-n", "2000", "-m", "262144", "-d", "16", "-t", "10", "-r", "7",
                 "--seed", "7", "--stall", "30")
    m = summary(res, 2000)
    after = wire1_stats(d, status)
    injected = {k: after[k] - before[k] for k in FAULT_COUNTERS}
    for k, n in injected.items():
        assert n > 0, f"{k} did not grow during the run: {injected}\n{m[0]}"
    # Several thousand frames were lost: the run was not clean by luck.
    assert injected["rx_fault_dropped"] + injected["tx_fault_dropped"] > 1000, injected
    print(f"{m[0]}\ninjected on wire1: {injected}")


def test_stress_over_a_clean_wire(clean):
    """3000 operations of up to 1 MiB, 32 in flight, over a wire without faults."""
    d, sock_dir, status = clean
    res = stress(d, sock_dir, "-n", "3000", "-m", "1048576", "-d", "32", "--seed", "3")
    m = summary(res, 3000)
    stats = wire1_stats(d, status)
    assert all(stats[k] == 0 for k in FAULT_COUNTERS), stats
    print(m[0])


def test_dead_peer_exhausts_retries(clean):
    """A QP connected to an address of the subnet where nothing answers: the first of 8
    sends completes with RETRY_EXC_ERR after timeout x (retry + 1), the others with
    RETRY_EXC_ERR or WR_FLUSH_ERR, in order; then the QP is in ERR."""
    d, sock_dir, _ = clean
    res = stress(d, sock_dir, "--dead-peer", "198.18.17.99", "--dead-count", "8", "-t", "10", "-r", "3",
                 devices=(0,))
    assert "ok: dead peer 198.18.17.99: 8 sends" in res.stdout, res.stdout
    print(res.stdout.strip())


def test_access_errors_are_refused(clean):
    """WRITEs with an invalid rkey, out of the MR's bounds, to an MR without remote write or
    of another PD, a READ and an atomic without the right: REM_ACCESS_ERR at the requester,
    the WR behind it flushed, the target's memory unchanged."""
    d, sock_dir, _ = clean
    res = stress(d, sock_dir, "--access-errors", "-v")
    assert "ok: access errors: 9 cases" in res.stdout, res.stdout
    print(res.stdout.strip())


def iwarp_stats(d: st.Daemon, status: st.Status) -> dict[str, int]:
    """The iWARP transports' counters, summed over the ports."""
    out: dict[str, int] = {}
    for reply in st.telemetry_query(d.prefix, *(f"/snic/iwarp_stats,{p.id}" for p in status.ports)):
        for name, value in reply["/snic/iwarp_stats"].items():
            out[name] = out.get(name, 0) + int(value)
    return out


def tcp_stats(d: st.Daemon, status: st.Status) -> dict[str, int]:
    """snic's TCP counters, summed over the ports."""
    out: dict[str, int] = {}
    for reply in st.telemetry_query(d.prefix, *(f"/snic/tcp_stats,{p.id}" for p in status.ports)):
        for name, value in reply["/snic/tcp_stats"].items():
            out[name] = out.get(name, 0) + int(value)
    return out


def test_stress_over_iwarp_on_a_clean_wire(clean):
    """2000 operations of up to 1 MiB, 16 in flight, over iWARP: the QPs connected through
    rdma_cm (one MPA exchange, both bound), every byte and completion checked (a WRITE's at
    the target once a later operation shows the target got past it)."""
    d, sock_dir, status = clean
    before = iwarp_stats(d, status)
    res = stress(d, sock_dir, "-n", "2000", "-m", "1048576", "-d", "16", "--seed", "11",
                 devices=IWARP)
    m = summary(res, 2000)
    assert "iWARP via rdma_cm" in m.string, res.stdout
    after = iwarp_stats(d, status)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    assert delta["iw_bound"] == 2 and delta["iw_mpa_errors"] == 0, delta
    print(res.stdout.strip())


def test_stress_over_iwarp_on_a_faulty_wire(faulty):
    """300 operations of up to 64 KiB over iWARP while wire1 drops 5% of the frames each
    way, duplicates 1%, reorders 1% and corrupts 0.5%: snic's TCP resends what was lost and
    drops what fails its checksum, so every byte arrives once, intact, in order, and no
    FPDU reaches MPA's CRC broken (the QPs would have ended with a Terminate)."""
    d, sock_dir, status = faulty
    before, tcp_before = wire1_stats(d, status), tcp_stats(d, status)
    res = stress(d, sock_dir, "-n", "300", "-m", "65536", "-d", "8", "--seed", "13",
                 "--stall", "60", devices=IWARP)
    m = summary(res, 300)
    after, tcp_after = wire1_stats(d, status), tcp_stats(d, status)
    injected = {k: after[k] - before[k] for k in FAULT_COUNTERS}
    tcp = {k: tcp_after[k] - tcp_before.get(k, 0) for k in tcp_after
           if tcp_after[k] != tcp_before.get(k, 0)}
    for fault in ("dropped", "duplicated", "reordered", "corrupted"):
        assert injected[f"rx_fault_{fault}"] + injected[f"tx_fault_{fault}"] > 0, injected
    print(f"{m[0]}\ninjected on wire1: {injected}\nsnic's TCP (both ports): {tcp}")


def test_stress_over_roce_through_rdma_cm(clean):
    """--rdma-cm on RoCE: the CM's REQ, REP and RTU connect the QPs instead of Modify QP."""
    d, sock_dir, _ = clean
    res = stress(d, sock_dir, "--rdma-cm", "-n", "500", "-m", "262144", "--seed", "17")
    m = summary(res, 500)
    assert "via rdma_cm" in m.string and "iWARP" not in m.string, res.stdout
    print(m[0])


@pytest.mark.parametrize("args,devices,why", [
    (["--access-errors"], IWARP, "--access-errors runs on RoCE devices only"),
    (["--dead-peer", "198.18.17.99"], ("iw0",), "--dead-peer runs on RoCE devices only"),
    (["--mtu", "1024"], IWARP, "not --mtu"),
])
def test_what_iwarp_cannot_run_is_a_usage_error(clean, args, devices, why):
    d, sock_dir, _ = clean
    res = run_stress(d, sock_dir, *args, devices=devices)
    assert res.returncode == 2 and why in res.stderr, (res.returncode, res.stdout, res.stderr)


def test_mixed_kinds_are_a_usage_error(clean):
    d, sock_dir, _ = clean
    res = run_stress(d, sock_dir, "-n", "1", devices=(0, "iw1"))
    assert res.returncode == 2 and "one device is iWARP, the other RoCE" in res.stderr, res.stderr
