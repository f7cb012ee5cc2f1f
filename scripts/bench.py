#!/usr/bin/env python3
"""snic beside its floor and its alternatives, on one machine (scripts/bench.sh runs it).

  snic      snic-perf --loopback: one client thread alternating between two QPs, one on
            each port of one snicd's virtual wire (the daemon busy-polls core 0, the
            client core 1). RC SEND round trips, and RDMA WRITE bandwidth.
  floor     snicd's raw self-tests over the same ports and wire, no RDMA: ICMP echo
            round trips (raw-ping) and a frame stream (raw-bw). They never leave core 0.
  arch      the architectural floor: the raw round trip plus two round trips of one cache
            line between the client's core and the daemon's (snic-cacheline-pingpong
            --cpus 1,0, measured just before the snic rows), the least that the four
            crossings between the two cores of a snic round trip cost. The target; the raw
            floor is context.
  kernel    snic-kping over a veth pair between two namespaces: TCP (TCP_NODELAY) and
            UDP ping-pong, what a user would use instead of RDMA.
  perftest  rdma-core's perftest, unmodified, under snic-run, a server and a client
            process on the two ports (both posting APIs).
  scale     the 8 B snic SEND round trip beside 1, 1,000 and 10,000 established idle RC
            QPs (snic-perf --idle-qps, one run), and snicd's memory per idle QP.
  iWARP     the snic rows again over the same ports' iWARP devices (NAME_iw0, NAME_iw1:
            RDMAP/DDP/MPA over snic's TCP), snic-perf -R --loopback (connected through
            rdma_cm, SNIC_DEVICES naming the two): SEND round trips at 8 B, 4 KiB and
            64 KiB, RDMA WRITE bandwidth, each beside the floor and the RoCE figure.
  veth      one snicd on both ends of a veth pair (net_af_packet, and net_af_xdp with
            addresses of its own and as shared-address ports where the kernel allows it),
            MTU 1500: the 8 B SEND round trip and 64 KiB WRITE bandwidth over RoCE and then
            (unless --no-iwarp) over iWARP in each round, and iWARP / RoCE per round.
  targets   last (or alone, --targets-only), --target-rounds rounds (7; 3 with --quick) of
            the floor (8 B raw-ping, 64 KiB raw-bw, the cache line) and snic (one snicd:
            8 B SEND, 64 B and 64 KiB WRITE) one right after the other, which first
            alternating: each target is the median of the rounds' ratios (both sides of one
            from one round, so that a slow phase of the machine moves both), with its
            spread; results.json's targets are these medians, targets_rounds the rounds.

Prints one table (median and p99 round trip per size, the architectural floor, the ratios,
bandwidth and message rate), writes results.json, the samples, and two PNG plots (latency
CDF at 8 B, bandwidth by size) into the output directory. Figures only: it asserts nothing on time."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("SNIC_BUILD", ROOT / "build"))
SNICD = BUILD / "daemon" / "snicd"
SNICCTL = BUILD / "tools" / "snicctl" / "snicctl"
PERF = BUILD / "tools" / "perf" / "snic-perf"
PINGPONG = BUILD / "tools" / "perf" / "snic-cacheline-pingpong"
KPING = BUILD / "tools" / "kping" / "snic-kping"
SNIC_RUN = BUILD / "libclient" / "snic-run"
KPING_NET = ROOT / "scripts" / "kping-net.sh"

SIZES = [8, 64, 4096, 65536]
IW_SIZES = [8, 4096, 65536]
IDLE_QPS = [1, 1000, 10000]
IDLE_ROUNDS = 3  # each count measured this many times, interleaved with the others
BW_SIZES_FULL = [64, 256, 1024, 4096, 16384, 65536, 262144, 1048576]
BW_SIZES_QUICK = [64, 1024, 65536]
WIRE_MTU = 9000  # jumbo frames on the virtual wire, as RoCE deployments use: IB MTU 4096
WIRE_SUBNET = "198.18.46"  # the snic rows' wire: port 0 at .1, port 1 at .2
KP_NS = ("snic-kping-a", "snic-kping-b")
KP_SERVER = "198.18.7.2"
UDP_MAX = 65507
VETH_NS = "snic-bench-veth"  # the veth rows: both ends of one pair, one snicd on both
VETH_IFACES = ("sbv-a", "sbv-b")
VETH_SUBNET = "198.18.47"
VETH_ROUNDS = 3  # each driver measured this many times, interleaved with the other
DAEMON_CPU, CLIENT_CPU = 0, 1  # snicd's lcore (-l) and the client's core, with two CPUs or more
PINGPONG_ITERS = 200000


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def cores() -> tuple[list[str], list[str]]:
    """taskset prefixes: the daemon's (or server's) core and the client's."""
    if (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(DAEMON_CPU)], ["taskset", "-c", str(CLIENT_CPU)]
    return [], []


def mem_args() -> list[str]:
    out = subprocess.run(["bash", "-c", f". {ROOT}/scripts/lib.sh && snic_eal_mem_args"],
                         capture_output=True, text=True, check=True).stdout.split()
    return out


def run(cmd: list[str], timeout: float = 600, env: dict | None = None) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                         stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {res.returncode}:\n"
                           f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return res.stdout


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


class WireDaemon:
    """One snicd with the virtual wire, busy-polling core DAEMON_CPU; stopped on exit."""

    def __init__(self, name: str, extra: list[str] | None = None,
                 ports: list[str] | None = None, wrap: list[str] | None = None,
                 subnet: str = WIRE_SUBNET, lcores: str = str(DAEMON_CPU), port_extra: str = ""):
        """The virtual wire's two ports (each spec followed by PORT_EXTRA), or PORTS (EAL
        --vdev arguments, then snicd's --port arguments) run under WRAP (e.g. ip netns exec
        NS) on the EAL lcores LCORES; the ports' addresses are SUBNET's .1 and .2."""
        self.name = name
        self.subnet = subnet
        self.dir = Path(tempfile.mkdtemp(prefix="bench.", dir="/run/snic"))
        self.sock = self.dir / f"{name}.sock"
        ports = ports or ["--", "--wire",
                          "--port", f"wire0,ip={WIRE_SUBNET}.1/24,mtu={WIRE_MTU}{port_extra}",
                          "--port", f"wire1,ip={WIRE_SUBNET}.2/24,mtu={WIRE_MTU}{port_extra}"]
        split = ports.index("--")
        cmd = [*(wrap or []), str(SNICD), "-l", lcores, "--no-pci", *mem_args(),
               *ports[:split], "--", "--name", name, "--ctrl", str(self.sock),
               *ports[split + 1:], *(extra or [])]
        self.log = open(self.dir / "snicd.log", "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        for _ in range(600):
            if self.proc.poll() is not None:
                raise RuntimeError(f"snicd exited: {(self.dir / 'snicd.log').read_text()[-2000:]}")
            if subprocess.run([str(SNICCTL), "-s", str(self.sock), "status"],
                              capture_output=True).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError("snicd did not become ready")

    def env(self) -> dict:
        env = dict(os.environ, SNIC_SOCKET_DIR=str(self.dir))
        env.pop("LD_PRELOAD", None)
        return env

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---- the measurements ------------------------------------------------------------------

def snic_perf(d: WireDaemon, test: str, size: int, iters: int, samples: Path | None = None,
              iwarp: bool = False) -> dict:
    """One snic-perf --loopback run across the daemon's two ports (their RoCE devices, or
    with `iwarp` their iWARP devices through rdma_cm); its JSON result."""
    _, client = cores()
    devs = (f"{d.name}_iw0", f"{d.name}_iw1") if iwarp else (f"{d.name}_0", f"{d.name}_1")
    cmd = [*client, str(PERF), test, "--loopback", "-d", devs[0], "--peer-device", devs[1],
           "-s", str(size), "-n", str(iters), "--json"]
    env = d.env()
    if iwarp:
        # -R: an iWARP QP connects through rdma_cm only (an iWARP device's GID is its MAC:
        # the addresses are given); the ports' addresses are also their RoCE devices', so
        # this process sees the iWARP devices alone.
        cmd += ["-R", "--source_ip", f"{d.subnet}.1", "--listen_ip", f"{d.subnet}.2"]
        env["SNIC_DEVICES"] = ",".join(devs)
    if samples is not None:
        cmd += ["--samples", str(samples)]
    return json_lines(run(cmd, env=env))[-1]


BURSTS = (4, 8, 16, 32, 64, 128)


def burst_sweep(rounds: int) -> dict:
    """snicd's rx and tx burst (--rx-burst, --tx-burst, set alike) against the rows they
    move: the 64 B WRITE message rate, 64 KiB WRITE bandwidth and 8 B SEND round trip. One
    snicd per burst per round, the bursts in a rotated order each round so that the
    machine's slow phases fall on all of them; medians over the rounds."""
    res = {str(b): {"msg_mpps": [], "bw_gbps": [], "lat_us": []} for b in BURSTS}
    for rnd in range(rounds):
        order = BURSTS[rnd % len(BURSTS):] + BURSTS[:rnd % len(BURSTS)]
        log(f"burst sweep: round {rnd + 1} of {rounds}")
        for b in order:
            d = WireDaemon(f"burst{b}", extra=["--rx-burst", str(b), "--tx-burst", str(b)])
            try:
                row = res[str(b)]
                row["msg_mpps"].append(snic_perf(d, "write_bw", 64, 500000)["msg_rate_mpps"])
                row["bw_gbps"].append(snic_perf(d, "write_bw", 65536, 2000)["bw_gbps"])
                row["lat_us"].append(snic_perf(d, "send_lat", 8, 10000)["rtt_us"]["median"])
            finally:
                d.stop()
    return res


def print_burst_sweep(res: dict) -> None:
    med = statistics.median
    base = res[str(32)]
    print(f"{'burst':>6} {'64 B msg/s':>12} {'x32':>6} {'64 KiB Gb/s':>12} {'x32':>6} "
          f"{'8 B RTT us':>11} {'x32':>6}")
    for b in BURSTS:
        row = res[str(b)]
        cols = []
        for key in ("msg_mpps", "bw_gbps", "lat_us"):
            cols.append(med(row[key]))
            cols.append(med(row[key]) / med(base[key]))
        print(f"{b:>6} {cols[0]:>10.2f} M {cols[1]:>6.2f} {cols[2]:>12.2f} {cols[3]:>6.2f} "
              f"{cols[4]:>11.2f} {cols[5]:>6.2f}")


# The lanes rows: (label, EAL lcores, each wire port's extra spec).
LANE_SETUPS = (("1 lcore, 1 queue a port", "0", ""),
               ("1 lcore, 2 queues a port", "0", ",queues=2"),
               ("2 lcores, 1 queue a port", "0-1", ""),
               ("2 lcores, 2 queues a port", "0-1", ",queues=2"))
LANE_CLIENTS = 2  # snic-perf processes at once, each a QP pair across the wire


def lanes_rows(rounds: int, iters: int = 300000) -> dict:
    """The 64 B WRITE message rate of LANE_CLIENTS snic-perf --loopback processes at once,
    each a QP pair across the wire, with the ports on one lcore, one lcore each, and each over
    two lcores (queues=2: the clients' sessions spread over the lanes, test_lanes.py); and
    queues=2 on one lcore (both lanes polled by it: what the lanes cost). The sum of their
    rates per round, the setups rotated each round; medians over the rounds."""
    res = {label: [] for label, _, _ in LANE_SETUPS}
    for rnd in range(rounds):
        order = LANE_SETUPS[rnd % len(LANE_SETUPS):] + LANE_SETUPS[:rnd % len(LANE_SETUPS)]
        log(f"lanes: round {rnd + 1} of {rounds}")
        for label, lcores, extra in order:
            d = WireDaemon("lanes", lcores=lcores, port_extra=extra,
                           extra=["--idle-backoff", "20"])
            try:
                cmd = [str(PERF), "write_bw", "--loopback", "-d", f"{d.name}_0", "--peer-device",
                       f"{d.name}_1", "-s", "64", "-n", str(iters), "--json"]
                procs = [subprocess.Popen(cmd, env=d.env(), stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          stdin=subprocess.DEVNULL)
                         for _ in range(LANE_CLIENTS)]
                total = 0.0
                for p in procs:
                    out, err = p.communicate(timeout=600)
                    if p.returncode != 0:
                        raise RuntimeError(f"snic-perf exited {p.returncode}: {err[-2000:]}")
                    total += json_lines(out)[-1]["msg_rate_mpps"]
                res[label].append(total)
            finally:
                d.stop()
    return res


def print_lanes_rows(res: dict) -> None:
    med = statistics.median
    base = med(res[LANE_SETUPS[0][0]])
    print(f"64 B RDMA WRITE, {LANE_CLIENTS} clients at once, each a QP pair across the wire "
          f"(medians of {len(res[LANE_SETUPS[0][0]])} rounds):")
    for label, _, _ in LANE_SETUPS:
        rates = res[label]
        print(f"  {label:<28} {med(rates):>6.2f} M msg/s  x{med(rates) / base:.2f}  "
              f"(rounds {min(rates):.2f}..{max(rates):.2f})")


def proc_kib(pid: int, field: str) -> int:
    """A size from /proc/PID/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def snic_idle(d: WireDaemon, iters: int) -> dict:
    """8 B SEND round trips beside each count of IDLE_QPS established idle RC QPs: one snic-perf
    --loopback run that grows and shrinks its idle set between measurements, IDLE_ROUNDS rounds
    interleaved (1, 1,000, 10,000, 1, ...); each count's figure is the median of its rounds'.
    Meanwhile the daemon's anonymous memory is sampled: its peak over what it held before, per
    idle QP at the largest count (the QPs' shared rings, one page each for these, are apart)."""
    _, client = cores()
    order = IDLE_QPS * IDLE_ROUNDS
    cmd = [*client, str(PERF), "send_lat", "--loopback", "-d", f"{d.name}_0", "--peer-device",
           f"{d.name}_1", "-s", "8", "-n", str(iters), "--json",
           "--idle-qps", ",".join(map(str, order))]
    before = proc_kib(d.proc.pid, "RssAnon")
    peak = [before, 0]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=d.env(), stdin=subprocess.DEVNULL)
    while proc.poll() is None:
        peak[0] = max(peak[0], proc_kib(d.proc.pid, "RssAnon"))
        peak[1] = max(peak[1], proc_kib(d.proc.pid, "RssShmem"))
        time.sleep(0.05)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-2000:]}\n{err[-2000:]}")
    runs = json_lines(out)
    rows = {}
    for n in IDLE_QPS:
        mine = [r for r in runs if r["idle_qps"] == n]
        meds = sorted(r["rtt_us"]["median"] for r in mine)
        p99s = sorted(r["rtt_us"]["p99"] for r in mine)
        rows[str(n)] = {"median_us": meds[len(meds) // 2], "p99_us": p99s[len(p99s) // 2],
                        "rounds": [r["rtt_us"] for r in mine]}
    most = max(IDLE_QPS)
    return {"iters": iters, "order": order, "rows": rows,
            "daemon_anon_bytes_per_idle_qp": (peak[0] - before) * 1024 // most,
            "shared_ring_bytes_per_idle_qp": peak[1] * 1024 // most}


def floor_selftest(spec: str) -> dict:
    """snicd --selftest SPEC,json on a wire of its own (the self-test exits)."""
    daemon_core, _ = cores()
    name = "snic-bench-floor"
    tmp = Path(tempfile.mkdtemp(prefix="bench.", dir="/run/snic"))
    try:
        out = run([*daemon_core, str(SNICD), "-l", str(DAEMON_CPU), "--no-pci", *mem_args(),
                   "--", "--name", name, "--ctrl", str(tmp / f"{name}.sock"), "--wire",
                   "--port", f"wire0,ip=198.18.47.1/24,mtu={WIRE_MTU}",
                   "--port", f"wire1,ip=198.18.47.2/24,mtu={WIRE_MTU}",
                   "--selftest", f"{spec},json"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return json_lines(out)[-1]


def cacheline_pingpong(iters: int) -> dict | None:
    """One cache line handed between the client's core and the daemon's and back
    (snic-cacheline-pingpong, its JSON result): the least one of the two pairs of crossings of
    a snic round trip costs. Run while no snicd busy-polls the daemon's core. None with one
    CPU, where the client and the daemon share it and there is no second core to cross to."""
    if (os.cpu_count() or 1) < 2:
        log("arch floor: one CPU, the client and the daemon share it: not measured")
        return None
    log(f"arch floor: one cache line between cpu {CLIENT_CPU} (the client's) and cpu "
        f"{DAEMON_CPU} (the daemon's), snic-cacheline-pingpong")
    return json_lines(run([str(PINGPONG), "--cpus", f"{CLIENT_CPU},{DAEMON_CPU}",
                           "-n", str(iters), "--json"]))[-1]


def arch_floor(r: dict) -> dict:
    """The architectural floor at each size: the raw floor's median round trip plus two
    cache-line round trips' median, in microseconds; empty without a cache-line figure."""
    cl = r.get("cacheline")
    if cl is None:
        return {}
    crossings_us = 2 * cl["rtt_ns"]["median"] / 1000
    return {k: {"median_us": round(v["rtt_us"]["median"] + crossings_us, 3)}
            for k, v in r["floor_lat"].items()}


# ---- the targets: interleaved rounds -------------------------------------------------------

# The targets: the 8 B SEND median round trip within this many times the architectural floor,
# 64 KiB WRITE bandwidth at least this share of the raw floor's, and at least this many million
# 64 B WRITEs a second on one QP (one data lcore).
TARGET_SEND8_OVER_ARCH = 1.5
TARGET_WRITE64K_OVER_FLOOR = 0.60
TARGET_WRITE64_MMSGS = 10.0
TARGET_ROUNDS, TARGET_ROUNDS_QUICK = 7, 3
# (key, label, unit, the target: "<=" or ">=" and the figure it is held against; None: context)
TARGET_ROWS = (
    ("send8_over_arch_floor", "8 B SEND RTT / arch floor", "x", ("<=", TARGET_SEND8_OVER_ARCH)),
    ("send8_over_floor", "8 B SEND RTT / raw floor", "x", None),
    ("write64k_over_floor", "64 KiB WRITE / raw floor", "x", (">=", TARGET_WRITE64K_OVER_FLOOR)),
    ("write64_mmsgs", "64 B WRITE, one QP", " M/s", (">=", TARGET_WRITE64_MMSGS)),
)


def target_iters(quick: bool) -> dict:
    """The rounds' counts (a round takes one or two seconds, a third of it starting snicd
    three times). 2,000 64 KiB messages with --quick too: the raw floor's stream is still
    ramping up over fewer (raw-bw at 500 gives about 0.75x its figure at 2,000 and more),
    which would raise the ratio, and 2,000 take some tens of milliseconds."""
    div = 10 if quick else 1
    return {"rtt": 20000 // div, "msg64": 200000 // div, "bw64k": 2000,
            "cacheline": PINGPONG_ITERS // div}


def target_round(rnd: int, it: dict) -> dict:
    """One round: the floor (raw-ping 8 B and raw-bw 64 KiB self-tests, then the cache line
    between the two cores, while no snicd runs) and snic (one snicd: SEND 8 B round trips,
    WRITE 64 B message rate, WRITE 64 KiB bandwidth), even rounds the floor first, odd rounds
    snic first; the figures and the round's ratios."""
    row: dict = {"round": rnd, "first": "floor" if rnd % 2 == 0 else "snic"}
    parts: dict = {}

    def floor_part() -> None:
        parts["ping"] = floor_selftest(f"raw-ping,size=8,count={it['rtt']}")
        parts["bw"] = floor_selftest(f"raw-bw,size=65536,count={it['bw64k']}")
        parts["cacheline"] = cacheline_pingpong(it["cacheline"])

    def snic_part() -> None:
        d = WireDaemon("snic-bench-targets")
        try:
            parts["lat"] = snic_perf(d, "send_lat", 8, it["rtt"])
            parts["msg"] = snic_perf(d, "write_bw", 64, it["msg64"])
            parts["snic_bw"] = snic_perf(d, "write_bw", 65536, it["bw64k"])
        finally:
            d.stop()

    for part in (floor_part, snic_part) if rnd % 2 == 0 else (snic_part, floor_part):
        part()
    cl = parts["cacheline"]
    arch = arch_floor({"cacheline": cl, "floor_lat": {"8": parts["ping"]}}).get("8", {})
    row.update({
        "snic_rtt_us": parts["lat"]["rtt_us"]["median"],
        "floor_rtt_us": parts["ping"]["rtt_us"]["median"],
        "cacheline_rtt_ns": None if cl is None else cl["rtt_ns"]["median"],
        "arch_floor_us": arch.get("median_us"),
        "snic_bw64k_gbps": parts["snic_bw"]["bw_gbps"],
        "floor_bw64k_gbps": parts["bw"]["bw_gbps"],
    })
    over = lambda a, b: None if a is None or b in (None, 0) else round(a / b, 4)
    row["send8_over_arch_floor"] = over(row["snic_rtt_us"], row["arch_floor_us"])
    row["send8_over_floor"] = over(row["snic_rtt_us"], row["floor_rtt_us"])
    row["write64k_over_floor"] = over(row["snic_bw64k_gbps"], row["floor_bw64k_gbps"])
    row["write64_mmsgs"] = parts["msg"]["msg_rate_mpps"]
    return row


def target_rounds(rounds: int, quick: bool) -> dict:
    """ROUNDS rounds of target_round(); each target's median, min and max over the rounds'
    values (a ratio's two sides always from one round)."""
    it = target_iters(quick)
    rows = []
    for rnd in range(rounds):
        log(f"targets: round {rnd + 1} of {rounds}, "
            f"{'floor then snic' if rnd % 2 == 0 else 'snic then floor'}")
        rows.append(target_round(rnd, it))
    summary = {}
    for key, *_ in TARGET_ROWS:
        vals = [row[key] for row in rows if row[key] is not None]
        summary[key] = None if not vals else {
            "median": round(statistics.median(vals), 4), "min": min(vals), "max": max(vals),
            "rounds": len(vals), "values": vals}
    return {"rounds": rounds, "iters": it, "targets": summary, "per_round": rows}


def targets_of(tr: dict) -> dict:
    """results.json's targets from the rounds' medians, in the single runs' format: a ratio
    as "2.13x", the message rate in millions a second as "5.61"."""
    t = {}
    for key, _, unit, _ in TARGET_ROWS:
        s = tr["targets"][key]
        t[key] = "-" if s is None else f"{s['median']:.2f}{'x' if unit == 'x' else ''}"
    return t


def print_targets(tr: dict) -> None:
    print()
    n = tr["rounds"]
    print(f"targets (median of {n} interleaved round{'s' if n != 1 else ''}, spread min-max):")
    for key, label, unit, target in TARGET_ROWS:
        s = tr["targets"][key]
        if s is None:
            print(f"  {label:<26}  {'-':>8}  (not measured: one CPU, no second core to cross to)")
            continue
        figure = f"{s['median']:.2f}{unit}"
        spread = f"({s['min']:.2f}{unit}-{s['max']:.2f}{unit})"
        if target is None:
            verdict = "context"
        else:
            op, want = target
            met = s["median"] <= want if op == "<=" else s["median"] >= want
            goal = f"target {op} {want:g}{unit}"
            verdict = f"{goal:<17} {'met' if met else 'missed'}"
        print(f"  {label:<26}  {figure:>8}  {spread:<19}  {verdict}")


class KernelNet:
    """The veth pair between two namespaces (scripts/kping-net.sh); removed on exit."""

    def __enter__(self):
        run([str(KPING_NET), "up"])
        return self

    def __exit__(self, *exc):
        subprocess.run([str(KPING_NET), "down"], capture_output=True)

    def pingpong(self, proto: str, size: int, iters: int, samples: Path | None) -> dict:
        server_core, client_core = cores()
        port = 19000 + (size % 997) + (0 if proto == "tcp" else 1)
        server = subprocess.Popen(["ip", "netns", "exec", KP_NS[1], *server_core, str(KPING),
                                   "server", f"--{proto}", "-p", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            self._wait_bound(proto, port)
            cmd = ["ip", "netns", "exec", KP_NS[0], *client_core, str(KPING), "client",
                   f"--{proto}", "-p", str(port), "-s", str(size), "-n", str(iters), "--json"]
            if samples is not None:
                cmd += ["--samples", str(samples)]
            cmd.append(KP_SERVER)
            return json_lines(run(cmd))[-1]
        finally:
            if server.poll() is None:
                server.kill()
            server.wait()

    @staticmethod
    def _wait_bound(proto: str, port: int) -> None:
        flag = "-Hltn" if proto == "tcp" else "-Huln"
        for _ in range(400):
            out = subprocess.run(["ip", "netns", "exec", KP_NS[1], "ss", flag, f"sport = :{port}"],
                                 capture_output=True, text=True).stdout
            if out.strip():
                return
            time.sleep(0.025)
        raise RuntimeError(f"the kping {proto} server is not bound to port {port}")


class VethPair:
    """Both ends of one veth pair in namespace VETH_NS, for one snicd on both (as the
    virtual wire, but through the kernel's veth); removed on exit."""

    def __enter__(self):
        self.__exit__()
        run(["ip", "netns", "add", VETH_NS])
        run(["ip", "link", "add", VETH_IFACES[0], "netns", VETH_NS, "type", "veth", "peer",
             "name", VETH_IFACES[1], "netns", VETH_NS])
        for ifc in (*VETH_IFACES, "lo"):
            run(["ip", "-n", VETH_NS, "link", "set", ifc, "up"])
        return self

    def __exit__(self, *exc):
        subprocess.run(["ip", "netns", "delete", VETH_NS], capture_output=True)

    @staticmethod
    def daemon(pmd: str) -> WireDaemon:
        """One snicd driving both ends with net_PMD (af_packet or af_xdp), an address of its
        own on each; or, for "af_xdp shared", both ends as shared-address ports whose
        addresses are the kernel's (each end's neighbour a permanent entry of the kernel's
        table, which snicd reads)."""
        if pmd == "af_xdp shared":
            VethPair.kernel_addresses(True)
            ports = ["--", "--port", f"iface={VETH_IFACES[0]},shared",
                     "--port", f"iface={VETH_IFACES[1]},shared"]
        else:
            # busy_budget=0 as scripts/lib.sh's snic_veth_vdev says why.
            opts = ",busy_budget=0" if pmd == "af_xdp" else ""
            ports = [f"--vdev=net_{pmd}0,iface={VETH_IFACES[0]}{opts}",
                     f"--vdev=net_{pmd}1,iface={VETH_IFACES[1]}{opts}", "--",
                     "--port", f"0,ip={VETH_SUBNET}.1/24", "--port", f"1,ip={VETH_SUBNET}.2/24"]
        return WireDaemon(f"snic-veth-{pmd}".replace("_", "-").replace(" ", "-"), ports=ports,
                          wrap=["ip", "netns", "exec", VETH_NS], subnet=VETH_SUBNET)

    @staticmethod
    def kernel_addresses(on: bool) -> None:
        """The kernel's addresses on the two ends (.1 and .2) and each one's neighbour, or
        none of them."""
        macs = [Path(f"/sys/class/net/{i}/address") for i in VETH_IFACES]
        for k, ifc in enumerate(VETH_IFACES):
            ip, peer = f"{VETH_SUBNET}.{k + 1}", f"{VETH_SUBNET}.{2 - k}"
            if on:
                mac = run(["ip", "netns", "exec", VETH_NS, "cat", str(macs[1 - k])]).strip()
                run(["ip", "-n", VETH_NS, "addr", "replace", f"{ip}/24", "dev", ifc])
                run(["ip", "-n", VETH_NS, "neigh", "replace", peer, "lladdr", mac, "dev", ifc,
                     "nud", "permanent"])
            else:
                subprocess.run(["ip", "-n", VETH_NS, "addr", "flush", "dev", ifc],
                               capture_output=True)
                subprocess.run(["ip", "-n", VETH_NS, "neigh", "flush", "dev", ifc],
                               capture_output=True)


def veth_pmds() -> list[str]:
    """af_packet, and af_xdp where this machine has it (scripts/lib.sh's snic_veth_pmd): with
    addresses of snicd's own, and as shared-address ports."""
    pick = run(["bash", "-c", f". {ROOT}/scripts/lib.sh && SNIC_VETH_PMD= snic_veth_pmd"])
    return ["af_packet", "af_xdp", "af_xdp shared"] if pick.strip() == "af_xdp" else ["af_packet"]


def perftest_row(d: WireDaemon, tool: str, args: list[str], port: int) -> dict:
    out = run(["bash", "-c", f'. {ROOT}/scripts/lib.sh && snic_perftest "$@"', "perftest",
               str(d.dir), f"{d.name}_0", f"{d.name}_1", str(port), tool, *args])
    lines = out.split("#bytes", 1)[-1].splitlines()[1:]
    nums = next((ln.split() for ln in lines if ln.strip() and ln.split()[0].isdigit()), None)
    if nums is None:
        raise RuntimeError(f"no result row from {tool}:\n{out[-2000:]}")
    if tool.endswith("_bw"):
        return {"tool": tool, "args": " ".join(args), "size": int(nums[0]),
                "bw_avg_MBps": float(nums[3]), "msg_rate_mpps": float(nums[4])}
    return {"tool": tool, "args": " ".join(args), "size": int(nums[0]),
            "t_typical_us": float(nums[4]), "t_min_us": float(nums[2]), "p99_us": float(nums[7])}


# ---- report ---------------------------------------------------------------------------------

def fmt(v, unit="") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def ratio(a, b) -> str:
    return "-" if a is None or b in (None, 0) else f"{a / b:.2f}x"


def print_table(r: dict) -> None:
    print()
    print("Round trips, median / p99 in microseconds (8 B ... 64 KiB; arch floor: median):")
    print(f"{'size':>7}  {'snic SEND':>15}  {'floor (raw)':>15}  {'arch floor':>10}  "
          f"{'kernel TCP':>15}  {'kernel UDP':>15}  {'snic/arch':>9}  {'snic/floor':>10}  "
          f"{'snic/TCP':>9}")
    for s in SIZES:
        k = str(s)
        sn, fl = r["snic_lat"].get(k), r["floor_lat"].get(k)
        tcp, udp = r["tcp_lat"].get(k), r["udp_lat"].get(k)
        arch = r["arch_floor_lat"].get(k, {}).get("median_us")
        cell = lambda x: "-" if x is None else f"{x['rtt_us']['median']:.2f} / {x['rtt_us']['p99']:.2f}"
        med = lambda x: None if x is None else x["rtt_us"]["median"]
        print(f"{s:>7}  {cell(sn):>15}  {cell(fl):>15}  {fmt(arch):>10}  {cell(tcp):>15}  "
              f"{cell(udp):>15}  {ratio(med(sn), arch):>9}  {ratio(med(sn), med(fl)):>10}  "
              f"{ratio(med(sn), med(tcp)):>9}")
    cl = r.get("cacheline")
    if cl is None:
        print("arch floor: not measured, one CPU (the client and the daemon share it)")
    else:
        a, b = cl["cpus"]
        print(f"arch floor = floor (raw) + 2 x one cache line's round trip between cpu {a} (the "
              f"client's) and cpu {b} (the daemon's): median {cl['rtt_ns']['median']:.0f} ns, "
              f"p99 {cl['rtt_ns']['p99']:.0f} ns ({cl['iterations']} round trips)")
    print()
    print("Bandwidth (payload) and message rate:")
    print(f"{'size':>8}  {'snic WRITE Gb/s':>15}  {'Mmsg/s':>7}  {'floor Gb/s':>10}  {'Mmsg/s':>7}  {'snic/floor':>10}")
    for s in r["bw_sizes"]:
        k = str(s)
        sn, fl = r["snic_bw"].get(k), r["floor_bw"].get(k)
        g = lambda x: None if x is None else x["bw_gbps"]
        m = lambda x: None if x is None else x["msg_rate_mpps"]
        print(f"{s:>8}  {fmt(g(sn)):>15}  {fmt(m(sn)):>7}  {fmt(g(fl)):>10}  {fmt(m(fl)):>7}  "
              f"{ratio(g(sn), g(fl)):>10}")
    if r.get("iw_lat"):
        med = lambda x: None if x is None else x["rtt_us"]["median"]
        cell = lambda x: "-" if x is None else f"{x['rtt_us']['median']:.2f} / {x['rtt_us']['p99']:.2f}"
        print()
        print("iWARP (the same ports' NAME_iw0/NAME_iw1, snic-perf -R --loopback), round trips,")
        print("median / p99 in microseconds:")
        print(f"{'size':>7}  {'iWARP SEND':>15}  {'RoCE SEND':>15}  {'floor (raw)':>15}  "
              f"{'iWARP/floor':>11}  {'iWARP/RoCE':>10}")
        for s in IW_SIZES:
            k = str(s)
            iw, sn, fl = r["iw_lat"].get(k), r["snic_lat"].get(k), r["floor_lat"].get(k)
            print(f"{s:>7}  {cell(iw):>15}  {cell(sn):>15}  {cell(fl):>15}  "
                  f"{ratio(med(iw), med(fl)):>11}  {ratio(med(iw), med(sn)):>10}")
        print()
        print("iWARP bandwidth (payload, RDMA WRITE) and message rate:")
        print(f"{'size':>8}  {'iWARP Gb/s':>10}  {'Mmsg/s':>7}  {'RoCE Gb/s':>9}  {'floor Gb/s':>10}  "
              f"{'iWARP/floor':>11}  {'iWARP/RoCE':>10}")
        for s in r["bw_sizes"]:
            k = str(s)
            iw, sn, fl = r["iw_bw"].get(k), r["snic_bw"].get(k), r["floor_bw"].get(k)
            g = lambda x: None if x is None else x["bw_gbps"]
            m = lambda x: None if x is None else x["msg_rate_mpps"]
            print(f"{s:>8}  {fmt(g(iw)):>10}  {fmt(m(iw)):>7}  {fmt(g(sn)):>9}  {fmt(g(fl)):>10}  "
                  f"{ratio(g(iw), g(fl)):>11}  {ratio(g(iw), g(sn)):>10}")
    if r.get("idle"):
        i = r["idle"]
        one = i["rows"][str(IDLE_QPS[0])]["median_us"]
        print()
        print(f"8 B SEND round trip beside established idle RC QPs (one run, median of "
              f"{IDLE_ROUNDS} interleaved rounds of {i['iters']}):")
        print(f"{'idle QPs':>9}  {'median / p99 (us)':>18}  {'vs ' + str(IDLE_QPS[0]):>7}")
        for n in IDLE_QPS:
            row = i["rows"][str(n)]
            print(f"{n:>9}  {row['median_us']:>8.2f} / {row['p99_us']:<7.2f}  "
                  f"{ratio(row['median_us'], one):>7}")
        print(f"snicd memory per idle QP: {i['daemon_anon_bytes_per_idle_qp']} B of its own, "
              f"plus {i['shared_ring_bytes_per_idle_qp']} B of rings shared with the client")
    if r["veth"]:
        print()
        print(f"Across a veth pair (one snicd on both ends, MTU 1500; median of {VETH_ROUNDS} "
              "interleaved runs):")
        for pmd, v in r["veth"].items():
            for kind, lat8, bw64k in (("RoCE ", "lat8", "bw64k"), ("iWARP", "iw_lat8", "iw_bw64k")):
                if not v.get(lat8):
                    continue
                lat = statistics.median(x["rtt_us"]["median"] for x in v[lat8])
                p99 = statistics.median(x["rtt_us"]["p99"] for x in v[lat8])
                bw = statistics.median(x["bw_gbps"] for x in v[bw64k])
                print(f"  net_{pmd:<16} {kind}  8 B SEND {lat:.2f} / {p99:.2f} us (median / p99), "
                      f"64 KiB WRITE {bw:.2f} Gb/s")
            if v.get("iw_lat8"):
                # Each round measures RoCE and then iWARP on one daemon: the ratio of each
                # round's pair, then their median.
                lat_r = statistics.median(i["rtt_us"]["median"] / r_["rtt_us"]["median"]
                                          for r_, i in zip(v["lat8"], v["iw_lat8"]))
                bw_r = statistics.median(i["bw_gbps"] / r_["bw_gbps"]
                                         for r_, i in zip(v["bw64k"], v["iw_bw64k"]))
                print(f"  net_{pmd:<16} iWARP / RoCE: 8 B round trip {lat_r:.2f}x, "
                      f"64 KiB WRITE {bw_r:.2f}x (median of the rounds' ratios)")
    if r["perftest"]:
        print()
        print("perftest under snic-run (two processes, one per port; see docs/PERFORMANCE.md):")
        for p in r["perftest"]:
            if "bw_avg_MBps" in p:
                print(f"  {p['tool']} {p['args']}: {p['bw_avg_MBps']:.0f} MB/s, {p['msg_rate_mpps']:.3f} Mpps")
            else:
                print(f"  {p['tool']} {p['args']}: t_typical {p['t_typical_us']:.2f} us, "
                      f"p99 {p['p99_us']:.2f} us")
    print()
    t = r["targets"]
    rate64 = t.get("write64_mmsgs") or fmt(r["snic_bw"].get("64", {}).get("msg_rate_mpps"))
    print("Targets{}: 8 B SEND median / architectural floor = {} (target <= {:g}x; / raw floor = "
          "{}, context); / kernel TCP = {} (target < 0.5x); 64 KiB WRITE bandwidth / floor = {} "
          "(target >= {:.2f}); 64 B WRITE messages/s on one data lcore = {} M (target >= {:g} M); "
          "beside 10,000 idle QPs / beside 1 = {} (target <= 1.1x); perftest ib_write_bw -s 64 "
          "-q 4: the perftest rows (target >= 8 M); busy instructions per 8 B round trip and per "
          "64 B WRITE: scripts/profile.sh (targets <= 4,000 and <= 1,200)".format(
              " (the first four and the message rate: median of the interleaved rounds below)"
              if r.get("targets_rounds") else "",
              t["send8_over_arch_floor"], TARGET_SEND8_OVER_ARCH, t["send8_over_floor"],
              t["send8_over_tcp"], t["write64k_over_floor"], TARGET_WRITE64K_OVER_FLOOR, rate64,
              TARGET_WRITE64_MMSGS, t.get("send8_idle10k_over_idle1", "-")))


def plot(out: Path, r: dict) -> None:
    if shutil.which("gnuplot") is None:
        log("gnuplot is missing: no plots (scripts/setup.sh installs gnuplot-nox)")
        return
    series = []
    for label, f in (("snic SEND", "snic-8.samples"), ("floor (raw ICMP)", "floor-8.samples"),
                     ("kernel TCP", "tcp-8.samples"), ("kernel UDP", "udp-8.samples")):
        p = out / f
        if not p.exists():
            continue
        xs = sorted(float(x) for x in p.read_text().split())
        if not xs:
            continue
        cdf = out / (f + ".cdf")
        step = max(1, len(xs) // 2000)
        with open(cdf, "w") as fh:
            for i in range(0, len(xs), step):
                fh.write(f"{xs[i]} {(i + 1) / len(xs)}\n")
            fh.write(f"{xs[-1]} 1\n")
        series.append(f"'{cdf}' using 1:2 with lines lw 2 title '{label}'")
    if series:
        script = (f"set terminal pngcairo size 900,560\nset output '{out / 'latency-cdf-8B.png'}'\n"
                  "set title 'Round trip at 8 B: CDF'\nset xlabel 'round trip (us, log scale)'\n"
                  "set ylabel 'fraction of round trips'\nset logscale x\nset key bottom right\n"
                  "set grid\nplot " + ", ".join(series) + "\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
    rows = out / "bandwidth.dat"
    with open(rows, "w") as fh:
        for s in r["bw_sizes"]:
            sn, fl = r["snic_bw"].get(str(s)), r["floor_bw"].get(str(s))
            fh.write(f"{s} {sn['bw_gbps'] if sn else 'NaN'} {fl['bw_gbps'] if fl else 'NaN'}\n")
    script = (f"set terminal pngcairo size 900,560\nset output '{out / 'bandwidth-by-size.png'}'\n"
              "set title 'Bandwidth by message size'\nset xlabel 'message size (bytes, log scale)'\n"
              "set ylabel 'Gb/s of payload'\nset logscale x 2\nset format x '%.0f'\n"
              "set offsets graph 0.02, graph 0.06, 0, 0\nset key top left\nset grid\n"
              f"plot '{rows}' using 1:2 with linespoints lw 2 title 'snic RDMA WRITE', "
              f"'{rows}' using 1:3 with linespoints lw 2 title 'floor (raw frames)'\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations and sizes (under two minutes)")
    ap.add_argument("--out", default=str(BUILD / "bench"), help="output directory")
    ap.add_argument("--no-perftest", action="store_true", help="skip the perftest rows")
    ap.add_argument("--no-scale", action="store_true", help="skip the idle QP rows")
    ap.add_argument("--no-iwarp", action="store_true", help="skip the iWARP rows")
    ap.add_argument("--no-veth", action="store_true", help="skip the veth rows (af_packet, af_xdp)")
    ap.add_argument("--burst-sweep", type=int, metavar="ROUNDS", default=0,
                    help="only sweep snicd's rx/tx burst sizes, ROUNDS rounds, and print that table")
    ap.add_argument("--lanes", type=int, metavar="ROUNDS", default=0,
                    help="only the message rate with the wire's ports on 1 lcore, 2 lcores, and "
                         "2 lcores with 2 queues each, ROUNDS rounds, and print that table")
    ap.add_argument("--target-rounds", type=int, metavar="N", default=None,
                    help=f"rounds of the targets phase, each the floor and snic interleaved "
                         f"(default {TARGET_ROUNDS}, {TARGET_ROUNDS_QUICK} with --quick; 0 skips it)")
    ap.add_argument("--targets-only", action="store_true",
                    help="run only the targets phase and print only the targets (for A/B runs)")
    a = ap.parse_args()
    if a.target_rounds is None:
        a.target_rounds = TARGET_ROUNDS_QUICK if a.quick else TARGET_ROUNDS
    if a.target_rounds < 0 or (a.targets_only and a.target_rounds == 0):
        ap.error("--target-rounds must be at least 1 with --targets-only, and not negative")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    Path("/run/snic").mkdir(parents=True, exist_ok=True)
    for b in (SNICD, SNICCTL, PERF, PINGPONG, KPING, SNIC_RUN):
        if not os.access(b, os.X_OK):
            log(f"{b} is not built (scripts/setup.sh)")
            return 1
    if a.burst_sweep > 0:
        res = burst_sweep(a.burst_sweep)
        (out / "burst-sweep.json").write_text(json.dumps(res, indent=2) + "\n")
        print_burst_sweep(res)
        return 0
    if a.lanes > 0:
        res = lanes_rows(a.lanes)
        (out / "lanes.json").write_text(json.dumps(res, indent=2) + "\n")
        print_lanes_rows(res)
        return 0
    if a.targets_only:
        tr = target_rounds(a.target_rounds, a.quick)
        r = {"quick": a.quick, "targets_only": True, "targets": targets_of(tr),
             "targets_rounds": tr}
        (out / "results.json").write_text(json.dumps(r, indent=2) + "\n")
        print_targets(tr)
        print(f"\nresults: {out / 'results.json'}")
        return 0
    lat_iters = 2000 if a.quick else 20000
    bw_iters = 2000 if a.quick else 20000
    bw_sizes = BW_SIZES_QUICK if a.quick else BW_SIZES_FULL
    r = {"quick": a.quick, "wire_mtu": WIRE_MTU, "lat_iters": lat_iters, "bw_iters": bw_iters,
         "bw_sizes": bw_sizes, "snic_lat": {}, "floor_lat": {}, "tcp_lat": {}, "udp_lat": {},
         "snic_bw": {}, "floor_bw": {}, "perftest": [], "iw_lat": {}, "iw_bw": {},
         "cacheline": None, "arch_floor_lat": {}, "veth": {}}

    log("floor: snicd raw-ping / raw-bw self-tests over the virtual wire")
    for s in SIZES:
        spec = f"raw-ping,size={s},count={lat_iters}"
        if s == 8:
            spec += f",samples={out / 'floor-8.samples'}"
        r["floor_lat"][str(s)] = floor_selftest(spec)
    for s in bw_sizes:
        r["floor_bw"][str(s)] = floor_selftest(f"raw-bw,size={s},count={max(bw_iters, 2000)}")

    # Right before the snic rows, and while no snicd busy-polls the daemon's core.
    r["cacheline"] = cacheline_pingpong(PINGPONG_ITERS)
    r["arch_floor_lat"] = arch_floor(r)

    log("snic: snic-perf --loopback across the virtual wire"
        + ("" if a.no_iwarp else ", RoCE and iWARP (-R) in turn at each size"))
    d = WireDaemon("snic-bench")
    try:
        # Each iWARP figure right after the RoCE one of its size: the machine's other load
        # moves both alike.
        for s in SIZES:
            samples = out / "snic-8.samples" if s == 8 else None
            r["snic_lat"][str(s)] = snic_perf(d, "send_lat", s, lat_iters, samples)
            if not a.no_iwarp and s in IW_SIZES:
                r["iw_lat"][str(s)] = snic_perf(d, "send_lat", s, lat_iters, iwarp=True)
        for s in bw_sizes:
            r["snic_bw"][str(s)] = snic_perf(d, "write_bw", s, bw_iters)
            if not a.no_iwarp:
                r["iw_bw"][str(s)] = snic_perf(d, "write_bw", s, bw_iters, iwarp=True)
        if not a.no_scale:
            log(f"scale: 8 B SEND beside {', '.join(map(str, IDLE_QPS))} idle RC QPs")
            r["idle"] = snic_idle(d, lat_iters)
        if not a.no_perftest:
            log("perftest under snic-run")
            n_lat = "200" if a.quick else "1000"
            n_bw = "2000" if a.quick else "10000"
            # 64 B messages go by the million a second: 10,000 of them take less than perftest's
            # own start and end cost, which then is most of what it reports (2.0 M/s at 10,000
            # against 6.1 M/s at 200,000, the same build).
            n_msg = "20000" if a.quick else "200000"
            port = 18900
            # Two busy-polling perftest processes and the busy-polling daemon do not fit two
            # cores (a ping-pong then waits for the scheduler, ~4 ms): send_lat runs with
            # completion events (-e), read_lat and write_bw have a passive server.
            for tool, args in (("ib_send_lat", ["-s", "8", "-n", n_lat, "-e"]),
                               ("ib_send_lat", ["-s", "8", "-n", n_lat, "-e", "--use_old_post_send"]),
                               ("ib_read_lat", ["-s", "8", "-n", n_lat]),
                               ("ib_read_lat", ["-s", "8", "-n", n_lat, "--use_old_post_send"]),
                               ("ib_write_bw", ["-s", "65536", "-n", n_bw]),
                               ("ib_write_bw", ["-s", "65536", "-n", n_bw, "--use_old_post_send"]),
                               ("ib_write_bw", ["-s", "64", "-n", n_msg, "-q", "4", "--report-both"])):
                r["perftest"].append(perftest_row(d, tool, args, port))
                port += 1
    finally:
        d.stop()

    if not a.no_veth:
        pmds = veth_pmds()
        veth_iwarp = not a.no_iwarp
        log(f"veth: snic-perf across a veth pair, one snicd on both ends, with {' and '.join(pmds)}")
        with VethPair():
            for _ in range(VETH_ROUNDS):
                for pmd in pmds:
                    d = VethPair.daemon(pmd)
                    try:
                        v = r["veth"].setdefault(pmd, {"lat8": [], "bw64k": [], "iw_lat8": [],
                                                       "iw_bw64k": []})
                        bw_n = max(bw_iters // 10, 500)
                        v["lat8"].append(snic_perf(d, "send_lat", 8, lat_iters))
                        v["bw64k"].append(snic_perf(d, "write_bw", 65536, bw_n))
                        if veth_iwarp:
                            v["iw_lat8"].append(snic_perf(d, "send_lat", 8, lat_iters, iwarp=True))
                            v["iw_bw64k"].append(
                                snic_perf(d, "write_bw", 65536, bw_n, iwarp=True))
                    finally:
                        d.stop()
                        VethPair.kernel_addresses(False)

    log("kernel: TCP and UDP ping-pong over a veth pair between two namespaces")
    with KernelNet() as net:
        for s in SIZES:
            r["tcp_lat"][str(s)] = net.pingpong("tcp", s, lat_iters,
                                                 out / "tcp-8.samples" if s == 8 else None)
            if s <= UDP_MAX:
                r["udp_lat"][str(s)] = net.pingpong("udp", s, lat_iters,
                                                     out / "udp-8.samples" if s == 8 else None)

    if a.target_rounds > 0:
        log(f"targets: {a.target_rounds} rounds, the floor and snic interleaved in each")
        r["targets_rounds"] = target_rounds(a.target_rounds, a.quick)

    med = lambda x: x["rtt_us"]["median"]
    g = lambda x: x["bw_gbps"]
    r["targets"] = {
        "send8_over_arch_floor": ratio(med(r["snic_lat"]["8"]),
                                       r["arch_floor_lat"].get("8", {}).get("median_us")),
        "send8_over_floor": ratio(med(r["snic_lat"]["8"]), med(r["floor_lat"]["8"])),
        "send8_over_tcp": ratio(med(r["snic_lat"]["8"]), med(r["tcp_lat"]["8"])),
        "write64k_over_floor": ratio(g(r["snic_bw"]["65536"]), g(r["floor_bw"]["65536"])),
    }
    if r.get("idle"):
        rows = r["idle"]["rows"]
        r["targets"]["send8_idle10k_over_idle1"] = ratio(rows[str(IDLE_QPS[-1])]["median_us"],
                                                         rows[str(IDLE_QPS[0])]["median_us"])
    if r.get("targets_rounds"):
        # Each ratio's two sides from one round, not from phases minutes apart.
        r["targets"].update(targets_of(r["targets_rounds"]))
    (out / "results.json").write_text(json.dumps(r, indent=2) + "\n")
    print_table(r)
    if r.get("targets_rounds"):
        print_targets(r["targets_rounds"])
    plot(out, r)
    print(f"\nresults: {out / 'results.json'}; plots: {out / 'latency-cdf-8B.png'}, "
          f"{out / 'bandwidth-by-size.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
