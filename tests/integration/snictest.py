"""Helpers for the snic integration tests: unique names, polling, daemons, what a
daemon holds and its QPs (snicctl), network namespaces and DPDK telemetry.

Everything a helper creates is removed again by the fixtures in conftest.py,
also when a test fails. Waiting is always done by polling with a bounded
number of tries, never by sleeping for a fixed time.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, TypeVar

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SNIC_BUILD", REPO / "build"))
SNICD = BUILD / "daemon" / "snicd"
SNICCTL = BUILD / "tools" / "snicctl" / "snicctl"
LIB_SH = REPO / "scripts" / "lib.sh"
DEVNET_SH = REPO / "scripts" / "devnet.sh"
TELEMETRY_PY = shutil.which("dpdk-telemetry.py") or "/usr/bin/dpdk-telemetry.py"
DPDK_RUN_DIR = Path("/var/run/dpdk")
HUGEPAGE_DIR = Path("/dev/hugepages")
CTRL_DIR = Path("/run/snic")
DEV_NODE_DIR = Path("/dev/infiniband")  # snicd's snic-<device> nodes (docs/LIBSNIC.md)

# Bounds. Polls are 0.1 s apart; the bounds are generous for a loaded
# 2-core machine and only ever cut a hang short.
READY_TRIES = 300  # ~30 s for a daemon to answer on its control socket
CMD_TIMEOUT = 20  # s for a snicd run that must fail or finish quickly
POLL_INTERVAL = 0.1

_counter = itertools.count()


# ------------------------------------------------------------- sanitizers

def build_sanitizers(build: Path = BUILD) -> tuple[str, ...]:
    """The sanitizers the build in `build` was configured with (meson's b_sanitize), e.g.
    ("address", "undefined"); () for a plain build."""
    try:
        opts = json.loads((build / "meson-info" / "intro-buildoptions.json").read_text())
    except (OSError, ValueError):
        return ()
    value = next((o["value"] for o in opts if o.get("name") == "b_sanitize"), "none")
    names = value if isinstance(value, list) else str(value).split(",")
    return tuple(n for n in names if n and n != "none")


SANITIZERS = build_sanitizers()
# Tests that cannot run under a sanitizer are skipped with
# pytest.mark.skipif(st.SANITIZED, reason=...), the reason saying why.
SANITIZED = bool(SANITIZERS)
# What a sanitizer found, in a process's stderr.
SANITIZER_REPORT = re.compile(r"^(?:==\d+==ERROR: \w+Sanitizer|==\d+==\w+Sanitizer has encountered"
                              r"|WARNING: ThreadSanitizer|SUMMARY: \w+Sanitizer|.*: runtime error: )",
                              re.M)


def _sanitizer_runtime() -> Optional[str]:
    """The sanitizer runtime the build's libsnic links (libasan, libtsan), which a program
    built without it must preload before libsnic; None for a plain build."""
    if not SANITIZED:
        return None
    res = subprocess.run(["ldd", str(BUILD / "libclient" / "libsnic.so")], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, timeout=CMD_TIMEOUT)
    m = re.search(r"=> (\S*/lib(?:asan|tsan|ubsan)\.so[.\d]*) ", res.stdout)
    return m[1] if m else None


SANITIZER_RUNTIME = _sanitizer_runtime()


def preload_sanitizer(env: dict) -> dict:
    """`env` with the build's sanitizer runtime first in LD_PRELOAD, for an unsanitized
    program that loads a library of this build itself (python's ctypes, libdat2 loading
    libdaplsnic); snic-run does it for the programs it runs. `env` as it is for a plain build."""
    if SANITIZER_RUNTIME:
        env["LD_PRELOAD"] = " ".join(filter(None, [SANITIZER_RUNTIME, env.get("LD_PRELOAD")]))
    return env


# The sanitizers' options for every process of a sanitized run: the first finding ends the
# process (abort: a signal, never a quiet exit code), with its stack. Leaks are looked for
# in snicd only (Daemon): the clients are mostly programs that are not ours (python,
# rdma-core's and perftest's tools) run with the runtime preloaded.
SANITIZER_OPTIONS = {
    "ASAN_OPTIONS": "halt_on_error=1:abort_on_error=1:detect_leaks=0",
    "UBSAN_OPTIONS": "halt_on_error=1:abort_on_error=1:print_stacktrace=1",
    "TSAN_OPTIONS": "halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:"
                    f"suppressions={REPO / 'tests' / 'sanitizers' / 'tsan.supp'}",
    # What DPDK's af_xdp PMD leaks through libbpf and libxdp (the file says why).
    "LSAN_OPTIONS": f"suppressions={REPO / 'tests' / 'sanitizers' / 'lsan.supp'}",
}
# snicd stops on SIGTERM by returning from main: what it still holds then is a leak.
SNICD_SANITIZER_OPTIONS = {"ASAN_OPTIONS": "detect_leaks=1"}


def sanitizer_env(extra: Optional[dict] = None) -> dict[str, str]:
    """The sanitizer variables for a process: SANITIZER_OPTIONS, then `extra`'s, then those
    already in the environment (which win: later options override earlier ones). Empty for a
    plain build."""
    if not SANITIZED:
        return {}
    env = {}
    for var, opts in SANITIZER_OPTIONS.items():
        parts = [opts, (extra or {}).get(var), _OUTER_OPTIONS.get(var)]
        env[var] = ":".join(p for p in parts if p)
    return env


# The sanitizer options this process was started with, before export_sanitizer_options.
_OUTER_OPTIONS = {var: os.environ.get(var) for var in SANITIZER_OPTIONS}


def export_sanitizer_options() -> None:
    """Puts sanitizer_env() into this process's environment, for everything it starts."""
    os.environ.update(sanitizer_env())


def sanitizer_findings(text: str, limit: int = 20000) -> str:
    """The sanitizer reports in a process's stderr `text` (from the first one on, at most
    `limit` characters), or ""."""
    m = SANITIZER_REPORT.search(text)
    if not m:
        return ""
    found = text[m.start():]
    return found if len(found) <= limit else found[:limit] + "\n[... cut; the whole log is kept]"

T = TypeVar("T")


def quiet_scapy() -> None:
    """scapy's import-time warnings (no route, no IPv6) off: the tests build frames only."""
    import logging
    logging.getLogger("scapy.runtime").setLevel(logging.ERROR)


def unique(prefix: str, maxlen: int = 15) -> str:
    """A name unique to this test process and call: prefix + pid + counter.
    Kept <= maxlen characters (15 is the Linux interface name limit)."""
    name = f"{prefix}{os.getpid()}x{next(_counter)}"
    assert len(name) <= maxlen, f"name {name!r} longer than {maxlen}"
    return name


def run(cmd, timeout: float = CMD_TIMEOUT, check: bool = False, input: Optional[str] = None,
        **kw) -> subprocess.CompletedProcess:
    """subprocess.run with text output captured and a timeout."""
    cmd = [str(c) for c in cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                         input=input, stdin=None if input is not None else subprocess.DEVNULL, **kw)
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited with {res.returncode}\n"
            f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}")
    return res


def poll(pred: Callable[[], Optional[T]], what: str, tries: int = READY_TRIES,
         interval: float = POLL_INTERVAL) -> T:
    """Calls pred until it returns something truthy (and returns that), at
    most `tries` times, `interval` s apart."""
    last_exc: Optional[BaseException] = None
    for _ in range(tries):
        try:
            value = pred()
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            last_exc = e
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"gave up waiting for {what} after {tries} tries"
                         + (f" (last error: {last_exc!r})" if last_exc else ""))


def eal_mem_args() -> list[str]:
    """The EAL memory arguments scripts/lib.sh picks for this machine."""
    res = run(["bash", "-c", f". {LIB_SH} && snic_eal_mem_args"], check=True)
    return res.stdout.split()


def have_hugepages() -> tuple[bool, str]:
    """Whether any 2 MiB hugepages are reserved and hugetlbfs is mounted."""
    res = run(["bash", "-c", f". {LIB_SH} && snic_hugepages_mounted"])
    total = 0
    try:
        total = int(Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text())
    except (OSError, ValueError):
        pass
    if total == 0:
        return False, "no 2 MiB hugepages are reserved on this machine"
    if res.returncode != 0:
        return False, "hugetlbfs is not mounted at /dev/hugepages"
    return True, ""


# ---------------------------------------------------------------- snicctl

@dataclass
class Port:
    id: int
    device: str
    ip: str
    mac: str
    mtu: int
    link: str
    devices: str
    offloads: str
    queues: int


@dataclass
class Status:
    name: str
    pid: int
    version: str
    ctrl: str
    ports: list[Port] = field(default_factory=list)


def parse_status(text: str) -> Status:
    """Parses `snicctl status` output:
        snicd NAME pid PID version V ctrl PATH
        port ID DEV ip IP mac MAC mtu N link STATE devices LIST offloads LIST queues N
    """
    lines = [l for l in text.splitlines() if l.strip()]
    head = re.fullmatch(r"snicd (\S+) pid (\d+) version (\S+) ctrl (\S+)", lines[0].strip()) if lines else None
    if not head:
        raise AssertionError(f"unexpected snicctl status output:\n{text}")
    st = Status(head[1], int(head[2]), head[3], head[4])
    for l in lines[1:]:
        m = re.fullmatch(r"port (\d+) (\S+) ip (\S+) mac (\S+) mtu (\d+) link (\S+) devices (\S+) "
                         r"offloads (\S+) queues (\d+)", l.strip())
        if not m:
            raise AssertionError(f"unexpected port line in snicctl status output: {l!r}\n{text}")
        st.ports.append(Port(int(m[1]), m[2], m[3], m[4].lower(), int(m[5]), m[6], m[7], m[8], int(m[9])))
    return st


def ctl_status(ctrl: str) -> subprocess.CompletedProcess:
    return run([SNICCTL, "-s", ctrl, "status"], timeout=10)


def ctl_status_ok(ctrl: str) -> Status:
    """Parsed `snicctl status`; fails with snicctl's stderr if it does not answer."""
    res = ctl_status(ctrl)
    assert res.returncode == 0, f"snicctl -s {ctrl} status exited {res.returncode}: {res.stderr}"
    return parse_status(res.stdout)


# -------------------------------------------------------------- telemetry

def telemetry_path(prefix: str) -> Path:
    return DPDK_RUN_DIR / prefix / "dpdk_telemetry.v2"


def telemetry_query(prefix: str, *cmds: str) -> list[dict]:
    """Sends cmds over the DPDK telemetry v2 SOCK_SEQPACKET socket of the
    process with file-prefix `prefix`; returns the decoded replies."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(10)
        s.connect(str(telemetry_path(prefix)))
        hello = json.loads(s.recv(65536).decode())
        buflen = int(hello.get("max_output_len", 16384))
        out = []
        for c in cmds:
            s.send(c.encode())
            out.append(json.loads(s.recv(buflen).decode()))
        return out


def require_tool(name: str, package: str) -> str:
    """The path of a tool the tests need; fails the test (never skips it) when it is missing,
    naming the Debian package scripts/setup.sh installs it from."""
    import pytest  # only the tests call this; scripts import the module without pytest

    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: scripts/setup.sh installs the {package} package")
    return path


def roce_packets(d: "Daemon", ports: tuple[int, ...] = (0, 1)) -> int:
    """RoCEv2 packets the daemon's ports have received (telemetry's roce_dispatched): what
    a test compares before and after a tool ran, to show its traffic crossed snic."""
    replies = telemetry_query(d.prefix, *(f"/snic/port_stats,{p}" for p in ports))
    return sum(r["/snic/port_stats"]["roce_dispatched"] for r in replies)


@dataclass
class Capture:
    pcap: Path
    received: int = 0  # dpdk-dumpcap's own count of the frames it took
    dropped: int = 0


@contextlib.contextmanager
def dpdk_dumpcap(d: "Daemon", port: str, pcap: Path, log: Path, *args: str):
    """dpdk-dumpcap captures PORT (a DPDK port name, "net_ring_wire0") of the running daemon D
    into PCAP (ARGS: more of dpdk-dumpcap's options) while the block runs; yields a Capture
    whose counts are dumpcap's own once the block is done. dumpcap is a secondary process: it
    needs hugepages, and the daemon must not run as EAL lcore 0 (wire_daemon's
    cores=("--lcores", "1@0")): the two share the capture's mbuf pool, whose per-lcore caches
    live in shared memory, and two lcore 0s would hand one mbuf out twice."""
    cap = Capture(pcap)
    with open(log, "w") as out:
        proc = subprocess.Popen(["dpdk-dumpcap", f"--file-prefix={d.prefix}", "-i", port,
                                 "-w", str(pcap), *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        # dumpcap says "Packets captured" once the daemon has its capture turned on.
        poll(lambda: proc.poll() is not None or "Packets captured" in log.read_text(),
             "dpdk-dumpcap to start capturing")
        assert proc.poll() is None, f"dpdk-dumpcap exited:\n{log.read_text()}"
        yield cap
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, f"dpdk-dumpcap exited {proc.returncode}:\n{text}"
    # Its closing line: "Packets received/dropped on interface 'X': R/D (...)".
    m = re.search(rf"Packets received/dropped on interface '{port}': (\d+)/(\d+)", text)
    assert m, f"no packet counts in dpdk-dumpcap's output:\n{text}"
    cap.received, cap.dropped = int(m[1]), int(m[2])


def telemetry_script(prefix: str, *cmds: str) -> list[dict]:
    """Same through dpdk-telemetry.py -f PREFIX, commands fed on stdin."""
    res = run([TELEMETRY_PY, "-f", prefix], input="".join(c + "\n" for c in cmds), timeout=30)
    replies = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
    if res.returncode != 0 or len(replies) != len(cmds):
        raise AssertionError(f"dpdk-telemetry.py -f {prefix} exited {res.returncode} with "
                             f"{len(replies)} replies for {len(cmds)} commands\n"
                             f"stdout:\n{res.stdout}\nstderr:\n{res.stderr}")
    return replies


# ------------------------------------------------------- what a daemon holds

KINDS = ["pd", "mr", "mw", "channel", "cq", "srq", "qp"]  # snicctl resources' object kinds


def snicctl(d: "Daemon", *args: str) -> str:
    """`snicctl ARGS` on the daemon's control socket; its output, or a failure naming why."""
    res = run([SNICCTL, "-s", d.ctrl, *args], timeout=10)
    assert res.returncode == 0, (f"snicctl {' '.join(args)} exited {res.returncode}: {res.stderr}\n"
                                 f"{d.describe()}")
    return res.stdout


def ctl_resources(d: "Daemon") -> dict:
    """Parsed `snicctl resources`."""
    out = snicctl(d, "resources")
    r: dict = {"counts": {}, "per_client": {}, "per_daemon": {}}
    for line in out.splitlines():
        m = re.fullmatch(r"(\w+) count (\d+) per-client (\d+) per-daemon (\d+)", line)
        if m:
            r["counts"][m[1]] = int(m[2])
            r["per_client"][m[1]] = int(m[3])
            r["per_daemon"][m[1]] = int(m[4])
            continue
        m = re.fullmatch(r"fds (\d+) per-client (\d+) per-uid (\d+)", line)
        if m:
            r["fds"], r["fds_per_client"], r["fds_per_uid"] = int(m[1]), int(m[2]), int(m[3])
            continue
        m = re.fullmatch(r"(sessions|mappings|mapped_bytes|faults_recovered) (\d+)", line)
        assert m, f"unexpected snicctl resources line {line!r}:\n{out}"
        r[m[1]] = int(m[2])
    assert set(r["counts"]) == set(KINDS), out
    return r


def all_released(d: "Daemon") -> bool:
    """No session and no object left, nothing of a client mapped or held open."""
    r = ctl_resources(d)
    return (all(v == 0 for v in r["counts"].values()) and r["sessions"] == 0
            and r["mappings"] == 0 and r["mapped_bytes"] == 0 and r["fds"] == 0)


def holdings(pid: int) -> tuple:
    """What a client's objects leave in the daemon: its descriptors (by target) and its
    file-backed mappings (by path). Anonymous mappings are left out: the allocator's own
    mappings merge and split with placement, which says nothing about a leak."""
    fds = sorted(os.readlink(f"/proc/{pid}/fd/{n}") for n in os.listdir(f"/proc/{pid}/fd"))
    maps = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            maps.append(fields[5])
    return fds, sorted(maps)


def wait_holdings_back_to(pid: int, base: tuple, tries: int = 50) -> None:
    now = base
    def back() -> bool:
        nonlocal now
        now = holdings(pid)
        return now == base
    try:
        poll(back, "the daemon's fds and mappings back to their baseline", tries=tries)
    except AssertionError as e:
        # As multisets: a leaked mapping may have the name of one in the baseline.
        gone = [sorted((Counter(b) - Counter(n)).elements()) for b, n in zip(base, now)]
        extra = [sorted((Counter(n) - Counter(b)).elements()) for b, n in zip(base, now)]
        raise AssertionError(f"{e}: fds/maps missing {gone}, left over {extra}") from None


def hugetlb_kb(pid: int) -> int:
    """The huge pages a process has mapped (its own DPDK memory and any client hugetlb
    memory it maps), in kB: what it takes from HugePages_Free, whoever else takes some."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    return sum(int(m[1]) for m in re.finditer(r"^(?:Shared|Private)_Hugetlb:\s+(\d+) kB", text, re.M))


# -------------------------------------------------------------------- QPs

QP_LINE = re.compile(r"qpn (\d+) device (\S+) session (\d+) pid (-?\d+) uid (\d+) type (\w+) "
                     r"state (\w+) dest_qpn (\d+) peer (\S+)")


def ctl_qps(d: "Daemon", user: list[str] = ()) -> list[dict]:
    """`snicctl qp` (run through USER): one dict per line, every line in the documented format."""
    res = run([*user, SNICCTL, "-s", d.ctrl, "qp"], timeout=10)
    assert res.returncode == 0, f"snicctl qp exited {res.returncode}: {res.stderr}"
    rows = []
    for line in res.stdout.splitlines():
        assert QP_LINE.fullmatch(line), f"unexpected snicctl qp line {line!r}"
        toks = line.split()
        rows.append(dict(zip(toks[::2], toks[1::2])))
    return rows


def ctl_qp(d: "Daemon", qpn: str, *flags: str, user: list[str] = ()) -> dict:
    """`snicctl qp QPN`: its "key value" pairs (the lines made of them)."""
    res = run([*user, SNICCTL, "-s", d.ctrl, "qp", qpn, *flags], timeout=10)
    assert res.returncode == 0, f"snicctl qp {qpn} exited {res.returncode}: {res.stderr}"
    kv = {}
    for line in res.stdout.splitlines():
        if "(" in line:  # a heading
            continue
        toks = line.split()
        assert len(toks) % 2 == 0, f"unexpected snicctl qp {qpn} line {line!r}"
        kv.update(zip(toks[::2], toks[1::2]))
    return kv


# ------------------------------------------------------ the tools' rendezvous

def free_tcp_port() -> int:
    """A TCP port nothing listens on now, for a verbs tool's own connection setup."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    return bool(run(["ss", "-Hltn", f"sport = :{port}"], check=True).stdout.strip())


# ----------------------------------------------------------------- daemon

class Daemon:
    """One snicd process. Its stdout and stderr go to files in logdir."""

    def __init__(self, name: str, eal_args: list[str], args: list[str], logdir: Path,
                 ctrl: Optional[str] = None, netns: Optional[str] = None):
        self.name = name
        self.ctrl = ctrl or str(CTRL_DIR / f"{name}.sock")
        self.netns = netns
        self.prefix = f"snic-{name}"
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.cmd = [*prefix, str(SNICD), *eal_args, "--", "--name", name, "--ctrl", self.ctrl, *args]
        self.out_path = logdir / f"{name}.stdout"
        self.err_path = logdir / f"{name}.stderr"
        self.proc: Optional[subprocess.Popen] = None
        self.returncode: Optional[int] = None

    def start(self) -> "Daemon":
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            # Own session: a ^C to pytest does not reach the daemon; the
            # fixture stops it.
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         start_new_session=True,
                                         env=dict(os.environ,
                                                  **sanitizer_env(SNICD_SANITIZER_OPTIONS)))
        return self

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace") if self.out_path.exists() else ""

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def describe(self) -> str:
        tail = "\n".join(self.stdout().splitlines()[-30:])
        return (f"{' '.join(self.cmd)}\nexit code: {self.proc.poll() if self.proc else None}\n"
                f"stderr:\n{self.stderr()}\nstdout (tail):\n{tail}")

    def wait_ready(self, tries: int = READY_TRIES) -> Status:
        """Polls `snicctl status` until the daemon answers; fails at once if
        the daemon exits first."""
        for _ in range(tries):
            if not self.running():
                raise AssertionError(f"snicd {self.name} exited before it became ready\n{self.describe()}")
            res = ctl_status(self.ctrl)
            if res.returncode == 0:
                return parse_status(res.stdout)
            time.sleep(POLL_INTERVAL)
        raise AssertionError(f"snicd {self.name} did not answer on {self.ctrl} after {tries} tries\n"
                             f"{self.describe()}")

    def wait(self, timeout: float = CMD_TIMEOUT) -> int:
        assert self.proc
        self.returncode = self.proc.wait(timeout=timeout)
        return self.returncode

    def signal(self, sig: int) -> None:
        assert self.proc
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10) -> Optional[int]:
        """SIGTERM, then SIGKILL when it has not exited within timeout."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.returncode = self.proc.returncode
        return self.returncode

    def cleanup(self) -> None:
        """Stops the daemon and removes what a crash may leave behind; then fails with what a
        sanitizer reported in its stderr, if anything (a sanitized build)."""
        self.stop()
        remove_daemon_leftovers(self.name, self.ctrl)
        found = sanitizer_findings(self.stderr())
        if found:
            raise AssertionError(f"snicd {self.name} (exit code {self.returncode}): a sanitizer "
                                 f"reported, in {self.err_path}:\n{found}")


def remove_daemon_leftovers(name: str, ctrl: Optional[str] = None) -> None:
    """Removes the DPDK runtime dir, hugepage files and /dev/infiniband nodes of a
    daemon named `name` that is not running (a daemon killed by SIGKILL cannot remove
    them), and its control socket `ctrl` (and the lock file beside it) if given and
    nothing answers on it (another daemon may own that path)."""
    shutil.rmtree(DPDK_RUN_DIR / f"snic-{name}", ignore_errors=True)
    if DEV_NODE_DIR.is_dir():
        for f in DEV_NODE_DIR.glob(f"snic-{name}_*"):
            if f.is_char_device():
                f.unlink(missing_ok=True)
    if HUGEPAGE_DIR.is_dir():
        for f in HUGEPAGE_DIR.glob(f"snic-{name}map_*"):
            f.unlink(missing_ok=True)
    if ctrl and ctl_status(ctrl).returncode != 0:
        Path(ctrl).unlink(missing_ok=True)
        Path(ctrl + ".lock").unlink(missing_ok=True)


# ----------------------------------------------------------------- netns

def af_xdp_supported() -> bool:
    """Whether snicd can drive a veth end with net_af_xdp here, as scripts/lib.sh's
    snic_veth_pmd decides when SNIC_VETH_PMD does not choose: the kernel makes XDP sockets
    and DPDK has the driver."""
    res = run(["bash", "-c", f"SNIC_VETH_PMD= && . {LIB_SH} && snic_veth_pmd"], check=True)
    return res.stdout.strip() == "af_xdp"


def netns_exists(ns: str) -> bool:
    return ns in run(["ip", "netns", "list"], check=True).stdout.split()


def link_exists(iface: str, netns: Optional[str] = None) -> bool:
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["link", "show", "dev", iface]
    return run(cmd).returncode == 0


def _gone_or_fail(cmd: list[str], still_there: Callable[[], bool], what: str) -> None:
    """Runs a delete command; it is done when the object is gone afterwards, whoever took
    it away (deleting a namespace takes its veth ends with it, asynchronously, so a
    check-then-delete races with the kernel). Idempotent: a second call is a no-op."""
    r = run(cmd)
    if r.returncode != 0 and still_there():
        raise RuntimeError(f"cannot delete {what}: {r.stderr.strip() or r.stdout.strip()}")


def delete_netns(ns: str) -> None:
    if not netns_exists(ns):
        return
    for pid in run(["ip", "netns", "pids", ns]).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _gone_or_fail(["ip", "netns", "delete", ns], lambda: netns_exists(ns), f"netns {ns}")


def add_netns(ns: str) -> None:
    """Makes network namespace NS with its loopback up, after deleting a leftover of that
    name (an earlier crashed run's)."""
    delete_netns(ns)
    run(["ip", "netns", "add", ns], check=True)
    run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)


@contextlib.contextmanager
def loopback_netns(prefix: str, addrs: tuple[str, ...] = ()):
    """A network namespace of the caller's own with its loopback up and holding ADDRS (each
    a /32), for the tools' side-band ports: they are then free of anything else on the
    machine. Deleted on exit, processes left in it included."""
    ns = unique(prefix, maxlen=40)
    try:
        add_netns(ns)
        for ip in addrs:
            run(["ip", "-n", ns, "addr", "add", f"{ip}/32", "dev", "lo"], check=True)
        yield ns
    finally:
        delete_netns(ns)


def delete_link(iface: str) -> None:
    if link_exists(iface):
        _gone_or_fail(["ip", "link", "delete", "dev", iface], lambda: link_exists(iface),
                      f"link {iface}")


def disable_ipv6(iface: str, netns: Optional[str] = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    run([*prefix, "sysctl", "-q", "-w", f"net.ipv6.conf.{iface}.disable_ipv6=1"], check=True)


# ------------------------------------------------ leftovers of crashed runs

# Names made by unique() for namespaces, veths and daemons in these tests.
_UNIQUE_NAME = re.compile(r"^(?:snic-t|sh|sp|ping|self|bad|mem|use|inuse|stale|tcp)(\d+)x\d+$")


def _from_dead_run(name: str) -> bool:
    m = _UNIQUE_NAME.match(name)
    return bool(m) and int(m[1]) != os.getpid() and not Path(f"/proc/{m[1]}").exists()


def sweep_dead_runs() -> list[str]:
    """Removes namespaces, veths, control sockets and DPDK leftovers that an
    earlier test run, whose process no longer exists, left behind (e.g. when
    it was killed). Returns what it removed."""
    removed = []
    for ns in run(["ip", "netns", "list"]).stdout.split():
        if _from_dead_run(ns):
            delete_netns(ns)
            removed.append(f"netns {ns}")
    for line in run(["ip", "-o", "link", "show", "type", "veth"]).stdout.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            iface = parts[1].strip().split("@")[0]
            if _from_dead_run(iface):
                delete_link(iface)
                removed.append(f"veth {iface}")
    if DPDK_RUN_DIR.is_dir():
        for d in DPDK_RUN_DIR.glob("snic-*"):
            name = d.name[len("snic-"):]
            if _from_dead_run(name):
                remove_daemon_leftovers(name)
                removed.append(f"dpdk runtime {d}")
    if CTRL_DIR.is_dir():
        for f in CTRL_DIR.iterdir():
            base = f.name.removesuffix(".lock").removesuffix(".sock")
            if _from_dead_run(base) and ctl_status(str(f)).returncode != 0:
                f.unlink(missing_ok=True)
                removed.append(f"control file {f}")
    return removed


@contextlib.contextmanager
def wire_daemon(tmp_path_factory, mem_args: list[str], prefix: str, subnet: str,
                port_extra: str = "", idle_backoff: int = 20, sock_dir: Optional[Path] = None,
                args: tuple[str, ...] = (), cores: tuple[str, ...] = ("-l", "0")):
    """One snicd with the virtual wire (wire0 at SUBNET.1, wire1 at SUBNET.2, /24, each
    port spec followed by PORT_EXTRA, then ARGS) on the EAL cores CORES, its control socket
    alone in a fresh directory (for SNIC_SOCKET_DIR) unless SOCK_DIR names one; yields
    (daemon, socket dir) once it answers, and stops it on exit, also when the test fails."""
    name = unique(prefix, maxlen=24)
    remove_daemon_leftovers(name)
    sock_dir = sock_dir or tmp_path_factory.mktemp("snic-sockets")
    d = Daemon(name, [*cores, "--no-pci", *mem_args],
               ["--wire", "--port", f"wire0,ip={subnet}.1/24{port_extra}",
                "--port", f"wire1,ip={subnet}.2/24{port_extra}", "--idle-backoff", str(idle_backoff),
                *args],
               tmp_path_factory.mktemp("snicd"), ctrl=str(sock_dir / f"{name}.sock"))
    d.start()
    try:
        d.wait_ready()
        yield d, sock_dir
    finally:
        d.cleanup()
