"""Helpers for the uDAPL tests (test_dapl.py, test_dat_rules.py): the dat.conf of a wire
daemon's two devices, the two providers (Debian's libdaplofa under snic-run, the project's
libdaplsnic linked with libsnic), and processes that are always killed, also when a test
fails.

dat.conf lines (DAT_OVERRIDE names a private file; libdat2 reads nothing else then):
    ofa-<dev>   u2.0 nonthreadsafe default libdaplofa.so.2 dapl.2.0 "<ip> 0" ""
    snic-<dev>  u2.0 nonthreadsafe default <abs>/libdaplsnic.so.2 dapl.2.0 "<dev> 1" ""
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
# The project's provider; SNIC_DAPLSNIC names another build of it.
LIBDAPLSNIC = Path(os.environ.get("SNIC_DAPLSNIC", st.BUILD / "dapl" / "libdaplsnic.so.2"))
LIBDAPLOFA = "libdaplofa.so.2"
RUN_TIMEOUT = 300  # s; only ever cuts a hang short on a loaded 2-core machine


@dataclass
class Provider:
    """One uDAPL provider over the two devices of a wire daemon: `server` and `client` are
    the dat.conf names of the provider on port 0 and port 1; `launcher` goes before every
    command (snic-run for a provider that reaches snic through the preloaded libibverbs),
    `netns` before that (ip netns exec NS, or nothing)."""
    kind: str
    server: str
    client: str
    launcher: list[str]
    env: dict
    netns: list[str]
    client_env: Optional[dict] = None  # the client's view: see client_dat_conf

    def env_of_client(self) -> dict:
        return self.client_env if self.client_env is not None else self.env

    def cmd(self, *args) -> list[str]:
        """A command line for this provider; stdout line-buffered, so that a server's
        "ready" line reaches its log file at once."""
        return [*self.netns, "stdbuf", "-oL", *self.launcher, *[str(a) for a in args]]


def dat_conf_lines(devices: list[str], ips: list[str]) -> list[str]:
    lines = []
    for dev, ip in zip(devices, ips):
        lines.append(f'ofa-{dev} u2.0 nonthreadsafe default {LIBDAPLOFA} dapl.2.0 "{ip} 0" ""')
        lines.append(f'snic-{dev} u2.0 nonthreadsafe default {LIBDAPLSNIC} dapl.2.0 "{dev} 1" ""')
    return lines


def write_dat_conf(path: Path, devices: list[str], ips: list[str]) -> Path:
    path.write_text("\n".join(dat_conf_lines(devices, ips)) + "\n")
    return path


def write_client_dat_conf(path: Path, devices: list[str], ips: list[str]) -> Path:
    """The dat.conf of a client on another host: dtest, dtestx and dtestcm clients open the
    provider *name* the server announces over their side-band socket, as on two hosts where
    that name means each host's own device. Here both of the server's names mean the
    client's device (devices[1]), so the client opens port 1 and its connections cross the
    wire to port 0."""
    lines = []
    for dev in devices:
        lines += [l.replace(f'"{ips[0]} 0"', f'"{ips[1]} 0"').replace(f'"{devices[0]} 1"',
                                                                    f'"{devices[1]} 1"')
                  for l in dat_conf_lines([dev], [ips[devices.index(dev)]])]
    path.write_text("\n".join(lines) + "\n")
    return path


def base_env(sock_dir, dat_conf: Path) -> dict:
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir), DAT_OVERRIDE=str(dat_conf))
    for k in ("LD_PRELOAD", "SNIC_CM_RESPONSE_TIMEOUT", "SNIC_CM_RETRIES", "DAT_DBG_TYPE",
              "DAPL_DBG_TYPE"):
        env.pop(k, None)
    # A sanitized build's libdaplsnic in libdat2's unsanitized programs.
    return st.preload_sanitizer(env)


def provider(kind: str, devices: list[str], sock_dir, dat_conf: Path,
             netns: Optional[str] = None, client_conf: Optional[Path] = None) -> Provider:
    """The provider `kind` ("libdaplofa" or "libdaplsnic") over devices[0] (server) and
    devices[1] (client), its commands run in network namespace `netns` if given (snicd is
    reached over a Unix socket, so only kernel sockets are private to it). libdaplsnic's
    tests are skipped when, and only when, the provider is not built."""
    env = base_env(sock_dir, dat_conf)
    client_env = base_env(sock_dir, client_conf) if client_conf is not None else None
    ns = ["ip", "netns", "exec", netns] if netns else []
    if kind == "libdaplofa":
        return Provider(kind, f"ofa-{devices[0]}", f"ofa-{devices[1]}", [str(SNIC_RUN)], env, ns,
                        client_env)
    assert kind == "libdaplsnic", kind
    if not LIBDAPLSNIC.exists():
        pytest.skip(f"{LIBDAPLSNIC} is not built (the libdaplsnic provider, dapl/ in the tree)")
    return Provider(kind, f"snic-{devices[0]}", f"snic-{devices[1]}", [], env, ns, client_env)


class Proc:
    """A tool left running (a server): its output goes to a file, so a chatty tool never
    blocks on a full pipe. kill() is idempotent. `netns` names the namespace it runs in (for
    readiness checks on its kernel sockets), if any."""

    def __init__(self, log: Path, cmd: list[str], env: dict, netns: Optional[str] = None):
        self.log = log
        self.netns = netns
        self.cmd = [str(c) for c in cmd]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(self.cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def describe(self) -> str:
        return f"{' '.join(self.cmd)}\nexit code: {self.proc.poll()}\noutput:\n{self.output()}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = RUN_TIMEOUT) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def run(cmd: list[str], env: dict, timeout: float = RUN_TIMEOUT) -> subprocess.CompletedProcess:
    """Runs a tool to its end; a hang is killed after `timeout` and fails the test."""
    cmd = [str(c) for c in cmd]
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{' '.join(cmd)} did not end within {timeout} s\n"
                             f"stdout:\n{e.stdout}\nstderr:\n{e.stderr}") from None


def shown(res: subprocess.CompletedProcess) -> str:
    cmd = " ".join(str(c) for c in res.args)
    return f"{cmd}\nexit code: {res.returncode}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"


@contextlib.contextmanager
def serving(log: Path, cmd: list, env: dict, ready, what: str, netns: Optional[str] = None):
    """Starts a server (`what`, for messages), returns once ready(server) holds (polled),
    kills it on the way out; fails at once if it exits before it is ready."""
    srv = Proc(log, cmd, env, netns)
    try:
        st.poll(lambda: not srv.alive() or ready(srv), f"{what} server ready")
        assert srv.alive(), f"the server exited before it was ready:\n{srv.describe()}"
        yield srv
    finally:
        srv.kill()


def tcp_listening(port: int, netns: Optional[str] = None) -> bool:
    """Whether a kernel TCP socket listens on `port` (dtest's side-band exchange)."""
    ns = ["ip", "netns", "exec", netns] if netns else []
    res = st.run([*ns, "ss", "-ltnH", f"sport = :{port}"], timeout=10)
    return bool(res.stdout.strip())


def cm_listening(d: st.Daemon) -> int:
    """How many rdma_cm ids listen in the daemon (`snicctl cm`, line "state listening N")."""
    res = st.run([st.SNICCTL, "-s", d.ctrl, "cm"], timeout=10)
    assert res.returncode == 0, f"snicctl cm exited {res.returncode}: {res.stderr}"
    for line in res.stdout.splitlines():
        f = line.split()
        if f[:2] == ["state", "listening"]:
            return int(f[2])
    raise AssertionError(f"no listening count in snicctl cm output:\n{res.stdout}")


def cm_ids(d: st.Daemon) -> int:
    res = st.run([st.SNICCTL, "-s", d.ctrl, "cm"], timeout=10)
    assert res.returncode == 0, f"snicctl cm exited {res.returncode}: {res.stderr}"
    for line in res.stdout.splitlines():
        f = line.split()
        if f[:1] == ["ids"]:
            return int(f[1])
    raise AssertionError(f"no ids count in snicctl cm output:\n{res.stdout}")
