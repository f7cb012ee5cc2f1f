"""libsnic after its daemon dies: a busy-polling program learns it (as from an RNIC's fatal
error) instead of spinning on an empty CQ forever. rdma-core's ibv_rc_pingpong, unmodified,
between the two ports of one snicd; the daemon is SIGKILLed in the middle of the run; both
ends must end, with ibv_poll_cq's failure (without the check they spin until killed). And
the work requests the daemon left outstanding complete with WR_FLUSH_ERR, exactly those and
in order, before the CQ fails (tests/verbs/death_flush.cc)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SNICCTL = st.BUILD / "tools" / "snicctl" / "snicctl"
DEATH_FLUSH = st.BUILD / "tests" / "verbs" / "snic-death-flush"


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rts_qps(ctrl: str) -> int:
    out = st.run([str(SNICCTL), "-s", ctrl, "qp"]).stdout
    return sum(1 for line in out.splitlines() if " state RTS " in f" {line} ")


def wire_daemon(daemons, mem_args, tmp_path) -> tuple[st.Daemon, dict]:
    """A snicd with two ports on a virtual wire, and the environment of its clients."""
    name = st.unique("death", maxlen=24)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--wire", "--port", "wire0,ip=198.18.18.1/24", "--port", "wire1,ip=198.18.18.2/24",
                 "--idle-backoff", "20"], ctrl=str(sock_dir / f"{name}.sock"))
    d.wait_ready()
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    env.pop("LD_PRELOAD", None)
    return d, env


def test_busy_polling_pingpong_ends_when_the_daemon_is_killed(daemons, mem_args, tmp_path):
    d, env = wire_daemon(daemons, mem_args, tmp_path)
    name = d.name
    port = str(free_tcp_port())
    # A run far longer than the test: only the daemon's death can end it.
    common = ["ibv_rc_pingpong", "-g", "0", "-p", port, "-s", "64", "-n", "1000000000"]
    logs = [tmp_path / "server.out", tmp_path / "client.out"]
    procs: list[subprocess.Popen] = []
    try:
        with open(logs[0], "wb") as out:
            procs.append(subprocess.Popen([str(SNIC_RUN), *common, "-d", f"{name}_0"], env=env,
                                          stdout=out, stderr=subprocess.STDOUT))

        def client_connected():
            if not procs[1:]:
                with open(logs[1], "wb") as out:
                    procs.append(subprocess.Popen([str(SNIC_RUN), *common, "-d", f"{name}_1",
                                                   "127.0.0.1"], env=env, stdout=out,
                                                  stderr=subprocess.STDOUT))
            if procs[1].poll() is not None:  # the server was not listening yet: again
                procs.pop()
                return None
            return rts_qps(d.ctrl) >= 2 or None

        st.poll(client_connected, "the pingpong's two QPs in RTS")
        d.signal(signal.SIGKILL)
        for p, log in zip(procs, logs):
            try:
                code = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"still running 60 s after snicd died:\n{log.read_text()}")
            assert code != 0, log.read_text()
            assert "poll CQ failed" in log.read_text() or "Failed status" in log.read_text(), \
                log.read_text()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_outstanding_work_requests_are_flushed_when_the_daemon_is_killed(daemons, mem_args,
                                                                       tmp_path):
    d, env = wire_daemon(daemons, mem_args, tmp_path)
    proc = subprocess.Popen([str(DEATH_FLUSH), f"{d.name}_0", f"{d.name}_1"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        ready = proc.stdout.readline().strip()
        if ready != "ready":
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"snic-death-flush never got ready ({ready!r}): {err}\n"
                                 f"{d.describe()}")
        d.signal(signal.SIGKILL)
        d.wait()
        out, err = proc.communicate("killed\n", timeout=60)
        assert proc.returncode == 0, f"{out}\n{err}"
        assert "flushed as expected" in out, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
