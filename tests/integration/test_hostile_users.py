"""What a hostile local user tries against snicd's connection paths (rdma_cm, iWARP's TCP) and
its tables, and what stops it: each test runs the real daemon, its control socket open to every
user (0666), with clients run as uids 65534 (nobody) and 65533 through setpriv, and fails if
the daemon's protection is taken away (docs/SECURITY.md, issue 29):

- a port below 1024 is root's (EACCES), as with Linux's rdma_cm;
- REUSEADDR does not let one user listen on another's address (EADDRINUSE);
- a user holds 32 listening ids at most (ENOBUFS), 1,024 connects unanswered (EAGAIN) and
  half of the daemon's PDs (ENOMEM), while another user still listens, connects and
  allocates;
- `snicctl cm` counts a user's own rdma_cm ids only.

The users' calls are made by hostile_client.py (ctypes on libsnic's rdma_cm and verbs entry
points); the live connections by rdmacm-utils' rping under snic-run. Readiness is polled on
the daemon's own account or read from the client's output, never slept for."""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
LIBSNIC = st.BUILD / "libclient" / "libsnic.so"
CLIENT = Path(__file__).with_name("hostile_client.py")
SUBNET = "198.18.73"
SERVER_IP, CLIENT_IP = f"{SUBNET}.1", f"{SUBNET}.2"
NOBODY_IP = f"{SUBNET}.99"  # on the wire's subnet, held by no port: no connect is answered
NOBODY, OTHER = 65534, 65533
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
AS_OTHER = ["setpriv", f"--reuid={OTHER}", f"--regid={OTHER}", "--clear-groups", "--"]
AS_ROOT: list[str] = []
STEP_TIMEOUT = 120  # s for a client's step; only ever cuts a hang short on a loaded machine

# The daemon's shares (daemon/cm/service.h, daemon/verbs/limits.h).
LISTENERS_PER_UID = 32
CONNECTING_PER_UID = 1024
PDS_PER_CLIENT, PDS_PER_UID = 1024, 8192


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args, public_sock_dir):
    """One daemon on the virtual wire (RoCE <name>_0/_1 and iWARP <name>_iw0/_iw1), its
    control socket open to every user."""
    ok = st.run([*AS_NOBODY, "test", "-x", str(st.SNICCTL), "-a", "-r", str(LIBSNIC),
                 "-a", "-x", str(SNIC_RUN), "-a", "-r", str(CLIENT)]).returncode == 0
    if not ok:
        pytest.skip(f"uid {NOBODY} cannot reach snicctl, libsnic or {CLIENT.name} in {st.BUILD}")
    st.require_tool("rping", "rdmacm-utils")
    with st.wire_daemon(tmp_path_factory, mem_args, "hostile", SUBNET, sock_dir=public_sock_dir,
                        args=("--ctrl-mode", "0666")) as w:
        yield w


@pytest.fixture(autouse=True)
def no_ids_left(wire):
    """Each test starts with no rdma_cm id in the daemon: an earlier test's clients are gone
    (snicd notices their exit on its own time)."""
    st.poll(lambda: cm_ids(wire[0])["ids"] == 0, "no rdma_cm ids left from earlier tests")


# ------------------------------------------------------------------ helpers

def cm_ids(d: st.Daemon, user: list[str] = AS_ROOT) -> dict[str, int]:
    """`snicctl cm` asked by USER: "ids" and each id state's count by name."""
    res = st.run([*user, st.SNICCTL, "-s", d.ctrl, "cm"], timeout=10)
    assert res.returncode == 0, f"snicctl cm exited {res.returncode}: {res.stderr}"
    out = {}
    for line in res.stdout.splitlines():
        f = line.split()
        if f[:1] == ["ids"]:
            out["ids"] = int(f[1])
        elif f[:1] == ["state"]:
            out[f[1]] = int(f[2])
    assert "ids" in out and "listening" in out and "connecting" in out, res.stdout
    return out


def env_for(sock_dir: Path, devices: str) -> dict:
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir), SNIC_DEVICES=devices)
    for k in ("LD_PRELOAD", "SNIC_CM_RESPONSE_TIMEOUT", "SNIC_CM_RETRIES"):
        env.pop(k, None)
    return env


def roce(d: st.Daemon) -> str:
    return f"{d.name}_0,{d.name}_1"


def iwarp(d: st.Daemon) -> str:
    return f"{d.name}_iw0,{d.name}_iw1"


class User:
    """hostile_client.py run as USER with STEPS; `results` are its steps' (name, made,
    errno) once it holds what it made. It holds them until close()."""

    def __init__(self, user: list[str], sock_dir: Path, devices: str, *steps: str):
        self.cmd = [*user, sys.executable, str(CLIENT), str(LIBSNIC), *steps]
        self.proc = subprocess.Popen(self.cmd, env=st.preload_sanitizer(env_for(sock_dir, devices)),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        # Read by a thread of its own: a line is waited for with a bound, and a buffered pipe
        # cannot hide a line from select().
        self.queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            while not self.lines or self.lines[-1] != "holding":
                self.lines.append(self._line())
        except BaseException:
            self.close()
            raise
        self.results = [(f[0], int(f[1]), int(f[2])) for f in map(str.split, self.lines[:-1])]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.queue.put(line)
        self.queue.put("")  # its end

    def _line(self) -> str:
        try:
            line = self.queue.get(timeout=STEP_TIMEOUT)
        except queue.Empty:
            line = ""
        if not line:
            self.proc.kill()
            raise AssertionError(f"{' '.join(self.cmd)}: no answer (exit code "
                                 f"{self.proc.wait(timeout=30)}) after {self.lines}\n"
                                 f"stderr:\n{self.proc.stderr.read()}")
        return line.strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@contextlib.contextmanager
def user(who: list[str], sock_dir: Path, devices: str, *steps: str) -> Iterator[User]:
    u = User(who, sock_dir, devices, *steps)
    try:
        yield u
    finally:
        u.close()


def results(who: list[str], sock_dir: Path, devices: str, *steps: str) -> list[tuple]:
    """The steps' results of a client that lets go of what it made at once."""
    with user(who, sock_dir, devices, *steps) as u:
        return u.results


def rping_pair(d: st.Daemon, sock_dir: Path, logdir: Path, devices: str, port: int,
               server_as: list[str], client_as: list[str]) -> None:
    """rping's server on SERVER_IP:PORT (run as SERVER_AS) and its client from CLIENT_IP (as
    CLIENT_AS), three verified pings over DEVICES; both must exit 0."""
    env = env_for(sock_dir, devices)
    common = ["rping", "-p", str(port), "-C", "3", "-V", "-S", "64"]
    before = cm_ids(d)["listening"]
    with open(logdir / f"rping-server-{port}.log", "wb") as out:
        server = subprocess.Popen([*server_as, str(SNIC_RUN), *common, "-s", "-a", SERVER_IP],
                                  env=env, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
    try:
        st.poll(lambda: server.poll() is not None or cm_ids(d)["listening"] > before,
                "the rping server to listen")
        assert server.poll() is None, (logdir / f"rping-server-{port}.log").read_text()
        client = st.run([*client_as, SNIC_RUN, *common, "-c", "-a", SERVER_IP, "-I", CLIENT_IP],
                        env=env, timeout=STEP_TIMEOUT)
        assert client.returncode == 0, f"rping client exited {client.returncode}:\n" \
                                       f"{client.stdout}\n{client.stderr}\n{d.describe()}"
        assert server.wait(timeout=STEP_TIMEOUT) == 0, \
            (logdir / f"rping-server-{port}.log").read_text()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=30)


# -------------------------------------------------------------------- tests

def test_a_port_below_1024_is_roots_alone(wire):
    """As Linux's rdma_cm (cma_get_port): a uid other than root binds no port below 1024, on
    one address or on all (a wire carries it as a real TCP port of the host's address, which
    a peer trusts as the host's); 1024 is anyone's; root binds port 80."""
    d, sock_dir = wire
    assert results(AS_NOBODY, sock_dir, iwarp(d), f"bind={SERVER_IP}:80", f"bind={SERVER_IP}:1023",
                   "bind=0.0.0.0:111", f"bind={SERVER_IP}:80:reuse", f"bind={SERVER_IP}:1024") == [
        ("bind", 0, errno.EACCES), ("bind", 0, errno.EACCES), ("bind", 0, errno.EACCES),
        ("bind", 0, errno.EACCES), ("bind", 1, 0)]
    assert results(AS_ROOT, sock_dir, iwarp(d), f"bind={SERVER_IP}:80", "listen") == [
        ("bind", 1, 0), ("listen", 1, 0)]


def test_reuseaddr_does_not_let_another_user_listen_on_an_address(wire):
    """REUSEADDR shares an address among ids that do not listen: a listen wants it alone.
    Another user's REUSEADDR bind to a listening address fails, and where two users share an
    address by REUSEADDR, neither may listen on it (EADDRINUSE): nobody can listen in front of
    another's server and take its connect requests."""
    d, sock_dir = wire
    with user(AS_NOBODY, sock_dir, iwarp(d), f"bind={SERVER_IP}:20100:reuse", "listen",
              f"bind={SERVER_IP}:20101:reuse") as victim:
        assert victim.results == [("bind", 1, 0), ("listen", 1, 0), ("bind", 1, 0)]
        assert results(AS_OTHER, sock_dir, iwarp(d), f"bind={SERVER_IP}:20100:reuse",
                       "bind=0.0.0.0:20100:reuse", f"bind={SERVER_IP}:20101:reuse", "listen",
                       f"bind={SERVER_IP}:20102:reuse", "listen") == [
            ("bind", 0, errno.EADDRINUSE), ("bind", 0, errno.EADDRINUSE),
            ("bind", 1, 0), ("listen", 0, errno.EADDRINUSE),
            ("bind", 1, 0), ("listen", 1, 0)]  # an address of its own: it listens
        # The victim still holds its one listener, and nobody else holds one.
        assert cm_ids(d)["listening"] == 1


def test_one_user_holds_at_most_32_listeners(wire, tmp_path):
    """Each listening id holds an iWARP port's TCP listener (256 per port): a uid other than
    root holds 32 at most, the 33rd rdma_listen fails with ENOBUFS; another user still
    listens, and a client's connects to it work."""
    d, sock_dir = wire
    first = 20200
    with user(AS_NOBODY, sock_dir, iwarp(d),
              f"listeners={SERVER_IP}:{first}:{LISTENERS_PER_UID + 1}") as hog:
        assert hog.results == [("listeners", LISTENERS_PER_UID, errno.ENOBUFS)]
        assert cm_ids(d, AS_NOBODY)["listening"] == LISTENERS_PER_UID
        # Each holds a TCP listener of port 0 (SERVER_IP's); the refused one holds none.
        tcp = st.run([*AS_NOBODY, st.SNICCTL, "-s", d.ctrl, "tcp"], check=True).stdout
        listens = {int(line.split()[4].rpartition(":")[2]) for line in tcp.splitlines()
                   if line.split()[2] == "LISTEN"}
        assert listens == set(range(first, first + LISTENERS_PER_UID)), tcp

        rping_pair(d, sock_dir, tmp_path, iwarp(d), first + 100, server_as=AS_OTHER,
                   client_as=AS_ROOT)


def test_one_user_has_at_most_1024_connects_unanswered(wire):
    """Connects to an address nobody answers (over RoCE: each a REQ the CM agent retries for
    about a minute) take a place in the port's half-open table: a uid other than root has
    1,024 unanswered at most, the next rdma_connect fails with EAGAIN."""
    d, sock_dir = wire
    start = time.monotonic()
    with user(AS_NOBODY, sock_dir, roce(d),
              f"connects={CLIENT_IP}:{NOBODY_IP}:20300:{CONNECTING_PER_UID + 1}") as hog:
        print(f"\n{CONNECTING_PER_UID + 1} connects took {time.monotonic() - start:.2f} s")
        assert hog.results == [("connects", CONNECTING_PER_UID, errno.EAGAIN)]
        assert cm_ids(d, AS_NOBODY)["connecting"] == CONNECTING_PER_UID
        assert cm_ids(d, AS_OTHER)["connecting"] == 0


def test_another_user_connects_while_one_has_its_share_unanswered(wire, tmp_path):
    """The share is there so that another user still connects: while nobody's 1,024 connects
    wait, uid 65533's rping to a live listener (root's) works, over the same port. (It did
    not while QP1's outbound queue held every MAD behind one whose peer was unresolved.)"""
    d, sock_dir = wire
    with user(AS_NOBODY, sock_dir, roce(d),
              f"connects={CLIENT_IP}:{NOBODY_IP}:20310:{CONNECTING_PER_UID}") as hog:
        assert hog.results == [("connects", CONNECTING_PER_UID, 0)]
        rping_pair(d, sock_dir, tmp_path, roce(d), 20311, server_as=AS_ROOT, client_as=AS_OTHER)
        # The hog's connects are all still waiting: the other user's did not take their place.
        assert cm_ids(d, AS_NOBODY)["connecting"] == CONNECTING_PER_UID


def test_snicctl_cm_counts_a_users_own_ids(wire):
    """snicctl cm, asked by a uid other than root, counts that uid's rdma_cm ids alone (by
    state); a user with none sees none; root counts every user's."""
    d, sock_dir = wire
    with user(AS_NOBODY, sock_dir, iwarp(d), f"ids={SERVER_IP}:3", f"listeners={SERVER_IP}:20400:2"), \
            user(AS_OTHER, sock_dir, iwarp(d), f"ids={CLIENT_IP}:1"):
        theirs, other = cm_ids(d, AS_NOBODY), cm_ids(d, AS_OTHER)
        assert (theirs["ids"], theirs["idle"], theirs["listening"]) == (5, 3, 2), theirs
        assert (other["ids"], other["idle"], other["listening"]) == (1, 1, 0), other
        third = cm_ids(d, ["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "--"])
        assert third["ids"] == 0 and sum(v for k, v in third.items() if k != "ids") == 0, third
        every = cm_ids(d)
        assert (every["ids"], every["idle"], every["listening"]) == (6, 4, 2), every


def test_one_user_holds_at_most_half_the_pds(wire):
    """A uid other than root holds at most half of a table (PDs: 1,024 per client, 16,384
    per daemon, 8,192 per uid): its ninth session's first ibv_alloc_pd fails with ENOMEM
    though the session holds none and the daemon has room; another user still allocates."""
    d, sock_dir = wire
    sessions = PDS_PER_UID // PDS_PER_CLIENT + 1
    start = time.monotonic()
    with user(AS_NOBODY, sock_dir, roce(d), f"pds={sessions}:{PDS_PER_CLIENT}") as hog:
        print(f"\n{PDS_PER_UID + 1} PDs took {time.monotonic() - start:.2f} s")
        assert hog.results == [("pds", PDS_PER_UID, errno.ENOMEM)]
        assert results(AS_OTHER, sock_dir, roce(d), f"pds=1:{PDS_PER_CLIENT}") == [
            ("pds", PDS_PER_CLIENT, 0)]
        assert st.ctl_resources(d)["counts"]["pd"] == PDS_PER_UID
    st.poll(lambda: st.ctl_resources(d)["counts"]["pd"] == 0, "the PDs to go")
