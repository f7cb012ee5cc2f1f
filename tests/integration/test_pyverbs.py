"""rdma-core's own test suite of the verbs API, run against snic.

python3-pyverbs ships rdma-core's Python tests (the `tests` directory of the same release,
44.0 in Debian 12); scripts/setup.sh copies them, decompressed and otherwise unmodified, to
/var/cache/snic/pyverbs/<version>/tests (snic_pyverbs_tests_dir). Here they run under
snic-run against one snicd on the virtual wire, all of them, once on a port's RoCEv2 device
and once on its iWARP device (`--dev DEVICE --gid 0`, as rdma-core's run_tests.py takes
them; each test's two sides share the device and reach each other through it).

The suite's rdma_cm tests learn the device's IP address from its kernel network interface
(/sys/class/infiniband/DEV/device/net/IFACE, then `ip addr show IFACE`), which a snic device,
having no kernel device, does not have. So the suite runs in a network namespace of its own,
with an interface that holds the port's address (one end of a veth that carries nothing),
and in a mount namespace whose /sys/class has that link (a tmpfs with
infiniband/DEV/device/net/IFACE, and the namespace's own /sys/class/net). SNIC_DEVICES shows
the process the device under test alone, so that rdma_cm resolves the address to it.

Every test must pass, or be one that pyverbs_not_offered.txt names for that device with the
outcome it has there and the reason (a feature snic does not offer); a test listed there that
passes, or an entry that names no test, fails too, so the list stays true. The counts are in
docs/LIBSNIC.md, "rdma-core's test suite".
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import snictest as st

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "pyverbs_run.py"
NOT_OFFERED = HERE / "pyverbs_not_offered.txt"
SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SUBNET = "198.18.57"
# The port's device of each transport (docs/LIBSNIC.md, "Devices").
DEVICE_SUFFIX = {"roce": "_0", "iwarp": "_iw0"}
# Bounds a hung run: the suite takes about 35 s (RoCEv2) and 55 s (iWARP) on a loaded 2-core
# machine.
RUN_TIMEOUT = 900
# Run in the test's network namespace: gives the device DEV the interface IFACE in a /sys/class
# of the process's own (a tmpfs mounted on STAGE, then moved there), then runs the command.
WITH_SYSFS_LINK = r"""
set -e
dev=$1 iface=$2 stage=$3
shift 3
mount -t tmpfs snic-pyverbs "$stage"
mkdir -p "$stage/net" "$stage/infiniband/$dev/device/net/$iface"
mount --bind /sys/class/net "$stage/net"
mount --move "$stage" /sys/class
exec "$@"
"""


def suite_dir() -> Path:
    """rdma-core's tests, where scripts/setup.sh put them; fails (never skips) without."""
    res = st.run(["bash", "-c", f". {st.LIB_SH} && snic_pyverbs_tests_dir"])
    path = Path(res.stdout.strip()) if res.returncode == 0 else None
    if path is None or not (path / "run_tests.py").is_file():
        pytest.fail("rdma-core's pyverbs tests are missing: scripts/setup.sh installs "
                    "python3-pyverbs and copies its tests to "
                    f"{path or 'SNIC_PYVERBS_CACHE/<version>/tests'}")
    return path


@dataclass
class Entry:
    """One line of pyverbs_not_offered.txt."""
    line: int
    devices: frozenset[str]
    patterns: tuple[str, ...]
    outcome: str  # "skipped" or "error"
    text: str  # for an error: what its traceback holds
    why: str

    def names(self, test_id: str) -> bool:
        return any(fnmatch.fnmatchcase(test_id, p) for p in self.patterns)

    def explains(self, row: dict) -> bool:
        if not self.names(row["id"]) or row["outcome"] != self.outcome:
            return False
        return self.outcome == "skipped" or self.text in row["detail"]


def not_offered(device: str) -> list[Entry]:
    entries = []
    for n, raw in enumerate(NOT_OFFERED.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(" | ")]
        assert len(fields) == 4, f"{NOT_OFFERED.name}:{n}: four fields separated by ' | '"
        devices, patterns, outcome, why = fields
        kind, _, text = outcome.partition(":")
        assert kind in ("skipped", "error") and (kind == "skipped") == (not text), \
            f"{NOT_OFFERED.name}:{n}: outcome is 'skipped' or 'error: TEXT'"
        assert set(devices.split()) <= set(DEVICE_SUFFIX) and why, f"{NOT_OFFERED.name}:{n}"
        if device in devices.split():
            entries.append(Entry(n, frozenset(devices.split()), tuple(patterns.split()), kind,
                                 text.strip(), why))
    return entries


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args):
    for b in (SNIC_RUN, st.SNICD):
        if not os.access(b, os.X_OK):
            pytest.fail(f"{b} is not built (run scripts/setup.sh or ninja -C {st.BUILD})")
    with st.wire_daemon(tmp_path_factory, mem_args, "pv", SUBNET) as (d, sock_dir):
        yield d, sock_dir


def run_suite(sock_dir: Path, device: str, netns: str, iface: str,
              tmp_path: Path) -> tuple[list[dict], str]:
    """Runs the whole suite on `device`, in `netns`, whose interface `iface` has the device's
    address; (one result per test, the run's output)."""
    results = tmp_path / "results.jsonl"
    stage = tmp_path / "sysfs"
    stage.mkdir()
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir), SNIC_DEVICES=device,
               # The suite lists the devices for every context it opens: on a loaded machine
               # snicd may answer a listing later than the 500 ms libsnic waits by default.
               SNIC_DISCOVERY_TIMEOUT_MS="10000")
    env.pop("LD_PRELOAD", None)
    cmd = ["ip", "netns", "exec", netns, "bash", "-c", WITH_SYSFS_LINK, "with-sysfs-link",
           device, iface, str(stage),
           str(SNIC_RUN), "/usr/bin/python3", str(RUNNER), str(suite_dir()), str(results),
           "--dev", device, "--gid", "0"]
    # A session of its own: the suite's rdma_cm tests fork, and a run that hangs is stopped
    # whole.
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = [json.loads(l) for l in results.read_text().splitlines()] if results.exists() else []
    rows = [l for l in lines if "outcome" in l]
    done = {r["id"] for r in rows}
    unfinished = [l["start"] for l in lines if "start" in l and l["start"] not in done]
    output = f"{' '.join(cmd)}\nexit code {proc.returncode}\n{err[-20000:]}"
    assert proc.returncode == 0 and not unfinished, \
        f"the run died or hung (limit {RUN_TIMEOUT} s) in {unfinished or '(no test)'}\n{output}"
    found = st.sanitizer_findings(err)
    assert not found, f"a sanitizer reported:\n{found}"
    ran = re.search(r"^Ran (\d+) tests? in", err, re.M)
    assert ran and int(ran[1]) == len(rows) > 0, f"unittest's count and ours differ\n{output}"
    return rows, output


def last_line_of(detail: str) -> str:
    lines = [l for l in detail.strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


def judge(rows: list[dict], transport: str) -> tuple[dict[str, int], list[str]]:
    """Each result against the list: (outcome counts, what is wrong)."""
    entries = not_offered(transport)
    counts = {"passed": 0, "skipped": 0, "error": 0, "failed": 0}
    problems = []
    used: set[int] = set()
    for r in rows:
        outcome = r["outcome"]
        counts[outcome if outcome in counts else "failed"] += 1
        if outcome == "passed":
            listed = [e.line for e in entries if e.names(r["id"])]
            if listed:
                problems.append(f"{r['id']} passes, but {NOT_OFFERED.name} lines {listed} say "
                                "it is not offered: take it out of the list")
            continue
        why = next((e for e in entries if e.explains(r)), None)
        if why is None:
            problems.append(f"{r['id']}: {outcome}: {last_line_of(r['detail'])}\n{r['detail']}")
        else:
            used.add(why.line)
    for e in entries:
        if e.line not in used:
            problems.append(f"{NOT_OFFERED.name} line {e.line} ({' '.join(e.patterns)}, "
                            f"{e.outcome}) names no test that has that outcome on {transport}")
    return counts, problems


@pytest.mark.parametrize("transport", ["roce", "iwarp"])
def test_rdma_core_suite(wire, veth_ns, transport, tmp_path, record_property):
    d, sock_dir = wire
    device = d.name + DEVICE_SUFFIX[transport]
    # The interface of port 0's address, for the suite's rdma_cm tests.
    ns = veth_ns(f"{SUBNET}.1/24")
    rows, output = run_suite(sock_dir, device, ns.ns, ns.peer, tmp_path)
    counts, problems = judge(rows, transport)
    seconds = sum(r["seconds"] for r in rows)
    slowest = sorted(rows, key=lambda r: -r["seconds"])[:5]
    summary = (f"{transport} ({device}): {len(rows)} tests, {counts['passed']} passed, "
               f"{counts['skipped']} skipped, {counts['error'] + counts['failed']} not offered "
               f"with an error, in {seconds:.0f} s; slowest: "
               + ", ".join(f"{r['id'].split('.')[-1]} {r['seconds']:.1f} s" for r in slowest))
    print(summary)
    for k, v in counts.items():
        record_property(k, v)
    assert not problems, summary + "\n\n" + "\n\n".join(problems) + f"\n\n{output[-8000:]}"
    assert d.running(), d.describe()
