"""Open MPI over snic: Debian's openmpi-bin, unmodified, with `--mca pml ucx` and `--mca osc
ucx`, its two ranks each on its own port of one daemon's virtual wire (SNIC_DEVICES and
UCX_NET_DEVICES per rank, libsnic preloaded by snic-run).

tests/mpi/mpi_check.c (compiled here with mpicc) sends every size class both ways and checks
each byte, runs an allreduce, puts and gets through a window, and prints an 8-byte ping-pong
time, which is printed, never judged. The daemon's RoCE counters show the traffic crossed
snic. Open MPI's own launch and wire-up run over local sockets, as on any single host.
scripts/setup.sh installs openmpi-bin and libopenmpi-dev; without them the test fails and says
so."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SOURCE = Path(__file__).resolve().parents[1] / "mpi" / "mpi_check.c"
SUBNET = "198.18.68"
TIMEOUT = 300  # s; only ever cuts a hang short on a loaded 2-core machine


@pytest.fixture(scope="module")
def mpi_check(tmp_path_factory) -> Path:
    st.require_tool("mpicc", "libopenmpi-dev")
    st.require_tool("mpirun", "openmpi-bin")
    out = tmp_path_factory.mktemp("mpi") / "mpi_check"
    res = st.run(["mpicc", "-O2", "-Wall", "-o", str(out), str(SOURCE)], timeout=120)
    assert res.returncode == 0, f"mpicc failed:\n{res.stdout}\n{res.stderr}"
    return out


def run_job(cmd: list[str], env: dict) -> subprocess.CompletedProcess:
    """mpirun to its end; on a hang the whole job (mpirun and its ranks) is killed."""
    cmd = [str(c) for c in cmd]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{' '.join(cmd)} did not end within {TIMEOUT} s\n"
                             f"stdout:\n{out}\nstderr:\n{err}") from None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


@pytest.mark.parametrize("tls", ["rc_verbs,ud_verbs", "ud_verbs"])
def test_open_mpi_over_ucx_between_two_ports(tmp_path_factory, mem_args, mpi_check, tls):
    with st.wire_daemon(tmp_path_factory, mem_args, "mpi", SUBNET) as (d, sock_dir):
        env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir), UCX_TLS=tls)
        env.pop("LD_PRELOAD", None)
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        ranks = []
        for port in (0, 1):
            dev = f"{d.name}_{port}"
            if ranks:
                ranks.append(":")
            ranks += ["-np", "1", "env", f"SNIC_DEVICES={dev}", f"UCX_NET_DEVICES={dev}:1",
                      SNIC_RUN, mpi_check]
        before = st.roce_packets(d)
        res = run_job(["mpirun", *root, "--oversubscribe", "--mca", "pml", "ucx", "--mca", "osc",
                       "ucx", "--mca", "btl", "self", "-x", "SNIC_SOCKET_DIR", "-x", "UCX_TLS",
                       *ranks], env)
        context = f"stdout:\n{res.stdout}\nstderr:\n{res.stderr[-4000:]}\ndaemon:\n{d.describe()}"
        assert res.returncode == 0, context
        assert "mpi_check: OK" in res.stdout, context
        print(res.stdout.strip())
        # 13 sizes both ways (4 MiB alone is thousands of packets), 1,000 ping-pongs.
        assert st.roce_packets(d) - before > 4000, context
