"""Chaos (issue 15): clients, and then one of two daemons, SIGKILLed in the middle of traffic.

Two snicd, A and B, each with one port on its end of a veth pair (net_af_packet; B in a
namespace of its own): two hosts and one wire, all on this machine. Rounds drawn from a seeded
random.Random start pairs of unmodified tools under snic-run across the wire (perftest's
ib_write_bw: RDMA WRITEs over RC; rdma-core's ibv_ud_pingpong, with or without completion
events), wait until every pair's QP counters move, and SIGKILL one end of each pair in turn
while the others keep moving. Then B itself is SIGKILLed during traffic, started again under
the same name, and carries fresh traffic with A. The runs that must complete (before the
chaos, and after B's restart) are rdma-core's ibv_rc_pingpong and ibv_ud_pingpong, which check
every byte they receive: perftest, under load, may refuse to print its report (its clock
calibration fails) and exit 1.

What must hold:
- a survivor that can learn of its peer's death ends by itself, with an error (an exit status
  above 0: no signal, no hang; every wait is bounded): an ib_write_bw requester when its
  retries run out, an ib_write_bw server when its TCP rendezvous closes, and a client of the
  killed daemon that polls a CQ or waits for its events by libsnic's EIO (ibv_poll_cq,
  ibv_get_cq_event);
- A serves its other clients through all of it, and B, restarted, serves A's again;
- nothing leaks: after each round A and B are back at their baselines: no session and no
  object (snicctl resources), the same descriptors and file-backed mappings (hugepage files
  and client memfds among them) and as many huge pages mapped. The restarted B is held to a
  baseline of its own.

A UD end learns nothing when its peer dies (there is no connection, as on an RNIC) and waits
for ever: the test kills it itself, and no UD pair spans the wire when B is killed.

HugePages_Free is not compared: whatever else runs on the machine (other test runs, their
daemons) takes and returns huge pages at any time. Each daemon's own are compared instead
(smaps' Hugetlb), and its hugepage files are among its mappings.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SEED = 15
ROUNDS = 3
SUBNET = "198.18.22"  # A is .1, B is .2
KERNEL_IP = "198.18.23.99/24"  # the kernel's own address in B's namespace stays out of the way
FOREVER = 100_000_000  # iterations: more than the test lasts, so only a kill ends the run
# ib_write_bw's WRs in flight, at most 4 KiB each: at most 64 frames on the wire for a pair, so
# that a round's pairs together stay below what a net_af_packet ring holds (512 by default)
# and none is lost to a full ring (RC would retransmit it; a UD pingpong would wait for ever).
WRITE_DEPTH = 16
WRITE_SIZES = (64, 1024, 4096)
UD_SIZES = (64, 512, 1024)
ENDS_WITHIN = 30  # s for a process that must end by itself (an error, or its last iteration)
TRAFFIC_TRIES = 300  # polls for a pair's counters to move
RELEASE_TRIES = 150  # polls for a daemon to be back at its baseline
# Each kind of pair: its tool and options, and the counter that shows it in traffic on each QP
# that sends requests: ib_write_bw's client (its WRITEs acknowledged), both ends of
# ibv_rc_pingpong (their SENDs acknowledged) and of ibv_ud_pingpong (datagrams received).
TOOLS = {"write": ["ib_write_bw", "-x", "0", "-t", str(WRITE_DEPTH)],
         "rc": ["ibv_rc_pingpong", "-g", "0"],
         "ud": ["ibv_ud_pingpong", "-g", "0"]}
WATCHED = {"write": "rx_acks", "rc": "rx_acks", "ud": "rx_packets"}


# ------------------------------------------------------------ the tools

@dataclass
class End:
    """One end of a pair: a tool under snic-run on its daemon's device."""
    name: str
    daemon: st.Daemon
    proc: subprocess.Popen
    log: Path

    def __str__(self) -> str:
        return f"{self.name} (pid {self.proc.pid}, {self.daemon.name}_0)"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Pair:
    kind: str  # a key of TOOLS
    server: End
    client: End
    seen: tuple = ()  # the watched counters when last seen moving

    def __str__(self) -> str:
        return f"{self.kind} pair {self.server} <- {self.client}"

    def ends(self) -> tuple[End, End]:
        return self.server, self.client

    def requesters(self) -> tuple[End, ...]:
        return (self.client,) if self.kind == "write" else (self.server, self.client)


@dataclass
class Tools:
    """Starts the tools, niced below the daemons; every process is killed by kill_all()."""
    sock_dir: Path
    logdir: Path
    started: list[subprocess.Popen] = field(default_factory=list)
    numbers: itertools.count = field(default_factory=itertools.count)

    def spawn(self, what: str, d: st.Daemon, argv: list[str]) -> End:
        env = dict(os.environ, SNIC_SOCKET_DIR=str(self.sock_dir))
        env.pop("LD_PRELOAD", None)
        name = f"{next(self.numbers)}-{what}"
        log = self.logdir / f"{name}.log"
        with open(log, "wb") as out:
            # nice and snic-run exec: the pid is the tool's, as snicctl qp shows it.
            proc = subprocess.Popen(["nice", "-n", "10", str(SNIC_RUN), *argv, "-d", f"{d.name}_0"],
                                    env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        self.started.append(proc)
        return End(name, d, proc, log)

    def pair(self, kind: str, server: st.Daemon, client: st.Daemon, size: int, iters: int = FOREVER,
             events: bool = False, check: bool = False) -> Pair:
        """KIND's server on SERVER's device, its client on CLIENT's once the server listens;
        with completion events (EVENTS) and every byte received checked (CHECK) if asked."""
        assert kind != "write" or not (events or check), "ib_write_bw has neither"
        port = st.free_tcp_port()
        argv = [*TOOLS[kind], "-p", str(port), "-s", str(size), "-n", str(iters),
                *(["-e"] if events else []), *(["-c"] if check else [])]
        s = self.spawn(f"{kind}-server", server, argv)
        st.poll(lambda: s.proc.poll() is not None or st.listening(port), f"{s} listening")
        assert s.proc.poll() is None, f"{s} exited with {s.proc.returncode}:\n{s.output()}"
        return Pair(kind, s, self.spawn(f"{kind}-client", client, [*argv, "127.0.0.1"]))

    def kill_all(self) -> None:
        for p in self.started:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def counters(pair: Pair) -> Optional[tuple[int, ...]]:
    """The watched counter of each requesting QP of the pair; None until all are in RTS."""
    for end in pair.ends():
        assert end.proc.poll() is None, \
            f"{end} exited with {end.proc.returncode} before it was killed:\n{end.output()}"
    values = []
    for end in pair.requesters():
        row = next((r for r in st.ctl_qps(end.daemon) if int(r["pid"]) == end.proc.pid), None)
        if row is None or row["state"] != "RTS":
            return None
        values.append(int(st.ctl_qp(end.daemon, row["qpn"]).get(WATCHED[pair.kind], "0")))
    return tuple(values)


def wait_moving(pair: Pair) -> None:
    """Polls until every watched counter of the pair has moved past the one last seen."""
    def moved() -> Optional[tuple[int, ...]]:
        now = counters(pair)
        before = pair.seen or (0,) * len(now or ())
        return now if now and all(n > b for n, b in zip(now, before)) else None
    pair.seen = st.poll(moved, f"{pair} in traffic", tries=TRAFFIC_TRIES)


def kill(end: End) -> None:
    end.proc.kill()
    end.proc.wait(timeout=30)


def end_with_an_error(ends: list[End], after: str) -> None:
    """Each of ENDS exits by itself with an error within ENDS_WITHIN s; a failure names every
    one that did not."""
    deadline = time.monotonic() + ENDS_WITHIN
    wrong = []
    for end in ends:
        try:
            code = end.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            wrong.append(f"{end} still runs {ENDS_WITHIN} s after {after}:\n{end.output()}")
            continue
        if code <= 0:
            wrong.append(f"{end} ended with {code} after {after}, not with an error:\n{end.output()}")
    assert not wrong, "\n".join(wrong)


def run_to_the_end(pairs: list[Pair]) -> None:
    for end in (e for p in pairs for e in p.ends()):
        try:
            code = end.proc.wait(timeout=ENDS_WITHIN)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{end} has not finished in {ENDS_WITHIN} s:\n{end.output()}") from None
        assert code == 0, f"{end} exited with {code}:\n{end.output()}"


# ---------------------------------------------------- what a daemon holds

@dataclass
class Baseline:
    holdings: tuple  # st.holdings: descriptors and file-backed mappings
    hugetlb_kb: int


def baseline(d: st.Daemon) -> Baseline:
    """D's holdings once it holds nothing for clients, read twice around a snicctl call: two
    equal reads hold no connection of a snicctl on its way out (each would be another socket)."""
    def steady() -> Optional[tuple]:
        first = st.holdings(d.pid)
        return first if st.all_released(d) and st.holdings(d.pid) == first else None
    return Baseline(st.poll(steady, f"{d.name} holding nothing for clients", tries=RELEASE_TRIES),
                    st.hugetlb_kb(d.pid))


def back_to(d: st.Daemon, base: Baseline, after: str) -> None:
    assert d.running(), f"snicd {d.name} died in the chaos:\n{d.describe()}"
    try:
        st.poll(lambda: st.all_released(d), f"{d.name} to release everything", tries=RELEASE_TRIES)
    except AssertionError as e:
        raise AssertionError(f"after {after}: {e}\n{st.snicctl(d, 'resources')}"
                             f"{st.snicctl(d, 'clients')}") from None
    try:
        st.wait_holdings_back_to(d.pid, base.holdings, tries=RELEASE_TRIES)
    except AssertionError as e:
        raise AssertionError(f"{d.name} after {after}: {e}") from None
    assert st.hugetlb_kb(d.pid) == base.hugetlb_kb, \
        f"{d.name} maps {st.hugetlb_kb(d.pid)} kB of huge pages after {after}, {base.hugetlb_kb} before"


# ------------------------------------------------------------- the chaos

def round_of_client_kills(tools: Tools, rng: random.Random, a: st.Daemon, b: st.Daemon,
                          r: int) -> None:
    """A write pair, a UD pair and one of either, each across the wire in a random direction;
    one end of each SIGKILLed in turn, every pair not yet hit in traffic at each kill."""
    pairs = []
    for kind in rng.sample(["write", "ud", rng.choice(["write", "ud"])], 3):
        server, client = rng.sample([a, b], 2)
        if kind == "write":
            pairs.append(tools.pair(kind, server, client, rng.choice(WRITE_SIZES)))
        else:
            pairs.append(tools.pair(kind, server, client, rng.choice(UD_SIZES),
                                    events=rng.random() < 0.5))
    survivors = []
    for victim in rng.sample(pairs, len(pairs)):
        for p in pairs:
            if all(e.proc.poll() is None for e in p.ends()):
                wait_moving(p)
        end = rng.choice(victim.ends())
        kill(end)
        print(f"round {r}: SIGKILLed {end} of the {victim.kind} pair")
        survivor = victim.client if end is victim.server else victim.server
        if victim.kind == "write":
            survivors.append(survivor)
        else:
            kill(survivor)  # UD: nothing tells it
    end_with_an_error(survivors, f"round {r}: their peers were SIGKILLed")


def death_of_b(tools: Tools, rng: random.Random, a: st.Daemon, b: st.Daemon) -> None:
    """B SIGKILLed with traffic over the wire both ways, between two clients of B (waiting on
    completion events) and between two clients of A: all but A's own end with an error, and
    A's own keep moving."""
    doomed = [tools.pair("write", b, a, rng.choice(WRITE_SIZES)),
              tools.pair("write", a, b, rng.choice(WRITE_SIZES)),
              tools.pair("ud", b, b, rng.choice(UD_SIZES), events=True)]
    bystander = tools.pair("ud", a, a, rng.choice(UD_SIZES), events=rng.random() < 0.5)
    for p in (*doomed, bystander):
        wait_moving(p)
    b.signal(signal.SIGKILL)
    b.wait()
    print(f"SIGKILLed snicd {b.name} with {', '.join(map(str, doomed))} in traffic")
    end_with_an_error([e for p in doomed for e in p.ends()], f"snicd {b.name} was SIGKILLed")
    wait_moving(bystander)
    for end in bystander.ends():
        kill(end)


# -------------------------------------------------------------- the test

# veth_ns before daemons: the daemons are stopped (SIGTERM) before the namespace goes, which
# would SIGKILL B with everything else in it.
def test_clients_and_a_daemon_killed_in_traffic_leave_nothing_behind(veth_ns, daemons, mem_args,
                                                                    tmp_path):
    st.require_tool("ib_write_bw", "perftest")
    for tool in ("ibv_rc_pingpong", "ibv_ud_pingpong"):
        st.require_tool(tool, "ibverbs-utils")
    v = veth_ns(KERNEL_IP)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    a_name, b_name = st.unique("chaosa", maxlen=24), st.unique("chaosb", maxlen=24)

    def start(name: str, iface: str, ip: str, core: str, netns: Optional[str] = None) -> st.Daemon:
        d = daemons(name, ["-l", core, "--no-pci", f"--vdev=net_af_packet0,iface={iface}", *mem_args],
                    ["--port", f"0,ip={ip}/24", "--idle-backoff", "20"],
                    ctrl=str(sock_dir / f"{name}.sock"), netns=netns)
        d.wait_ready()
        return d

    def start_b() -> st.Daemon:
        return start(b_name, v.peer, f"{SUBNET}.2", "1", netns=v.ns)

    a = start(a_name, v.host, f"{SUBNET}.1", "0")
    b = start_b()
    tools = Tools(sock_dir, tmp_path)
    rng = random.Random(SEED)
    try:
        # A first run both ways warms the daemons up (allocators, ARP) and shows the wire
        # works; the baselines are taken after it.
        run_to_the_end([tools.pair("rc", a, b, 4096, iters=100, check=True),
                        tools.pair("rc", b, a, 4096, iters=100, events=True, check=True),
                        tools.pair("ud", a, b, 512, iters=20, events=True, check=True)])
        base_a, base_b = baseline(a), baseline(b)

        for r in range(ROUNDS):
            round_of_client_kills(tools, rng, a, b, r)
            back_to(a, base_a, f"round {r}")
            back_to(b, base_b, f"round {r}")

        death_of_b(tools, rng, a, b)
        back_to(a, base_a, f"the death of {b.name} and of its clients")

        # B again, under the same name on the same end of the wire (its first logs kept
        # aside), held to a baseline of its own: fresh traffic both ways.
        for path in (b.out_path, b.err_path):
            path.rename(path.with_name(f"{path.name}.killed"))
        b = start_b()
        base_b = baseline(b)
        run_to_the_end([tools.pair("rc", a, b, 4096, iters=200, check=True),
                        tools.pair("rc", b, a, 4096, iters=200, events=True, check=True),
                        tools.pair("ud", b, a, 1024, iters=50, check=True)])
        back_to(a, base_a, "the traffic with the restarted B")
        back_to(b, base_b, "its own traffic with A")
        for d in (b, a):  # and both stop as they should after all that
            assert d.stop() == 0, f"snicd {d.name} did not stop cleanly:\n{d.describe()}"
    finally:
        tools.kill_all()
