#!/usr/bin/env python3
"""How long a client's teardown holds snicd's control thread (figures, no assertion).

One snicd with the virtual wire (scripts/bench.py's WireDaemon). A client, snic-perf
send_lat --loopback --idle-qps N, connects N idle RC QPs (each to itself) beside its two
measured ones and keeps measuring (it busy-polls: the machine is loaded, as it is when
users' clients die). Once snicd holds all its QPs the client is killed (SIGKILL: the daemon
tears its two sessions down, every QP running), and meanwhile a prober asks the control
socket `snicctl status` back to back:

  teardown    from the kill until `snicctl resources` shows no QP left
  status      the latency of each `snicctl status` in that window (a new process each
              time: about 2-5 ms of it is exec and connect): median, p99, max
  stalled     the longest time the control socket answered nothing

    scripts/teardown-stall.py [--qps N] [--rounds R]

SNIC_BUILD picks the build (default build/), so that two builds can be compared.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the wire daemon and paths, shared with the benchmark)


def qps(d: bench.WireDaemon) -> int:
    out = bench.run([str(bench.SNICCTL), "-s", str(d.sock), "resources"], timeout=120)
    for line in out.splitlines():
        f = line.split()
        if f[:1] == ["qp"]:
            return int(f[2])
    raise RuntimeError(f"no qp line in snicctl resources:\n{out}")


class Prober(threading.Thread):
    """`snicctl status` back to back; (start, seconds) of each answer."""

    def __init__(self, d: bench.WireDaemon):
        super().__init__(daemon=True)
        self.d = d
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            subprocess.run([str(bench.SNICCTL), "-s", str(self.d.sock), "status"],
                           capture_output=True, timeout=600)
            self.samples.append((t0, time.monotonic() - t0))


def one_round(d: bench.WireDaemon, n: int) -> dict:
    _, client = bench.cores()
    base = qps(d)
    cmd = [*client, str(bench.PERF), "send_lat", "--loopback", "-d", f"{d.name}_0",
           "--peer-device", f"{d.name}_1", "-s", "8", "-n", "100000000", "--idle-qps", str(n)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=d.env(), stdin=subprocess.DEVNULL)
    want = base + n + 2
    t_setup = time.monotonic()
    while qps(d) < want:
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.read()}")
        time.sleep(0.1)
    setup_s = time.monotonic() - t_setup
    time.sleep(1.0)  # the measured pair running, the idle QPs established
    prober = Prober(d)
    prober.start()
    time.sleep(0.5)
    t_kill = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    while qps(d) > base:
        time.sleep(0.01)
    teardown_s = time.monotonic() - t_kill
    time.sleep(0.2)
    prober.stop.set()
    prober.join()
    window = [(t, s) for t, s in prober.samples if t + s >= t_kill and t <= t_kill + teardown_s]
    lat = sorted(s for _, s in window)
    # The control socket's longest silence: between the end of one answer and the end of the
    # next (the prober asks again at once).
    ends = sorted(t + s for t, s in prober.samples)
    gaps = [b - a for a, b in zip(ends, ends[1:]) if b >= t_kill]
    return {"qps": n + 2, "setup_s": setup_s, "teardown_s": teardown_s,
            "status_n": len(lat),
            "status_median_ms": 1e3 * statistics.median(lat) if lat else None,
            "status_p99_ms": 1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else None,
            "status_max_ms": 1e3 * lat[-1] if lat else None,
            "stalled_ms": 1e3 * max(gaps) if gaps else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", type=int, default=4000, help="idle QPs (default 4000)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    d = bench.WireDaemon(f"tdstall{int(time.time()) % 100000}")
    try:
        rows = [one_round(d, args.qps) for _ in range(args.rounds)]
    finally:
        d.stop()
    print(f"build {bench.BUILD}")
    print(f"{'qps':>6} {'setup s':>8} {'teardown s':>10} {'status n':>8} {'median ms':>9} "
          f"{'p99 ms':>8} {'max ms':>8} {'stalled ms':>10}")
    for r in rows:
        print(f"{r['qps']:>6} {r['setup_s']:>8.2f} {r['teardown_s']:>10.3f} {r['status_n']:>8} "
              f"{r['status_median_ms']:>9.1f} {r['status_p99_ms']:>8.1f} {r['status_max_ms']:>8.1f} "
              f"{r['stalled_ms']:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
