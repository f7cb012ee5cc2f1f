"""UCX over snic, with Debian's ucx-utils unmodified under snic-run.

Devices UCX can see. UCX lists a verbs device only if /dev/infiniband/<dev_name> is a
character device the user can read and write (it never opens it); libsnic's dev_name is
snic-<device>, and snicd makes that node (with /dev/null's numbers and the control socket's
mode) for each of its devices while it runs, and removes it when it stops. --dev-dir puts the
nodes elsewhere, --no-dev-nodes makes none, and a file of another kind already at a node's
path is left alone. `snic-run ucx_info -d` lists rc_verbs and ud_verbs on every snic device.

Traffic: ucx_perftest (tag matching with eager and rendezvous sizes, put, get) over ud_verbs
alone and over rc_verbs with ud_verbs, each process on its own port of one daemon's wire
(UCX_NET_DEVICES), and io_demo, which connects through UCX's rdmacm transport and checks every
byte (-q). ucx_perftest exchanges its setup over kernel TCP on 127.0.0.1; its figures are
printed, never judged. The ucx-utils package comes with scripts/setup.sh; without it the
tests fail and say so."""

from __future__ import annotations

import itertools
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

import dapltools as dt
import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
DEV_DIR = Path("/dev/infiniband")


def is_snic_node(path: Path) -> bool:
    try:
        s = path.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISCHR(s.st_mode) and s.st_rdev == os.stat("/dev/null").st_rdev


def nodes(dev_dir: Path, name: str) -> list[Path]:
    return [dev_dir / f"snic-{name}_{i}" for i in (0, 1)]


def test_nodes_exist_while_the_daemon_runs_and_go_when_it_stops(tmp_path_factory, mem_args):
    with st.wire_daemon(tmp_path_factory, mem_args, "ucxn", "198.18.62") as (d, _):
        paths = nodes(DEV_DIR, d.name)
        for p in paths:
            assert is_snic_node(p), f"{p} is not a snic device node:\n{d.describe()}"
            assert stat.S_IMODE(p.stat().st_mode) == 0o660, oct(p.stat().st_mode)
    for p in paths:
        assert not p.exists(), f"{p} is left after snicd stopped"


def test_dev_dir_and_no_dev_nodes(tmp_path_factory, mem_args, tmp_path):
    other = tmp_path / "ib"
    with st.wire_daemon(tmp_path_factory, mem_args, "ucxd", "198.18.63",
                        args=("--dev-dir", str(other))) as (d, _):
        assert all(is_snic_node(p) for p in nodes(other, d.name)), d.describe()
        assert not any(p.exists() for p in nodes(DEV_DIR, d.name))
    assert not any(p.exists() for p in nodes(other, d.name))
    with st.wire_daemon(tmp_path_factory, mem_args, "ucxo", "198.18.64",
                        args=("--no-dev-nodes",)) as (d, _):
        assert not any(p.exists() for p in nodes(DEV_DIR, d.name)), d.describe()


def test_a_file_of_another_kind_is_left_alone(tmp_path_factory, mem_args, tmp_path):
    dev_dir = tmp_path / "ib"
    dev_dir.mkdir()
    name = st.unique("ucxk", maxlen=24)
    st.remove_daemon_leftovers(name)
    planted = dev_dir / f"snic-{name}_0"
    planted.write_text("not snic's")
    sock_dir = tmp_path_factory.mktemp("snic-sockets")
    d = st.Daemon(name, ["-l", "0", "--no-pci", *mem_args],
                  ["--wire", "--port", "wire0,ip=198.18.65.1/24", "--port", "wire1,ip=198.18.65.2/24",
                   "--idle-backoff", "20", "--dev-dir", str(dev_dir)],
                  tmp_path_factory.mktemp("snicd"), ctrl=str(sock_dir / f"{name}.sock"))
    d.start()
    try:
        d.wait_ready()
        assert planted.read_text() == "not snic's"
        assert is_snic_node(dev_dir / f"snic-{name}_1"), d.describe()
    finally:
        d.cleanup()
    assert planted.read_text() == "not snic's", "snicd removed a file it did not make"
    assert "is not snic's: left alone" in d.describe(), d.describe()
    assert not (dev_dir / f"snic-{name}_1").exists()


def ucx_tool(name: str) -> str:
    return st.require_tool(name, "ucx-utils")


def test_ucx_info_lists_rc_and_ud_verbs_on_snic_devices(tmp_path_factory, mem_args):
    ucx_info = ucx_tool("ucx_info")
    with st.wire_daemon(tmp_path_factory, mem_args, "ucxi", "198.18.66") as (d, sock_dir):
        env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
        env.pop("LD_PRELOAD", None)
        res = subprocess.run([str(SNIC_RUN), ucx_info, "-d"], env=env, capture_output=True,
                             text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert res.returncode == 0, f"ucx_info -d exited {res.returncode}:\n{res.stderr[-3000:]}"
        found = set(re.findall(r"Transport: (\w+)\s*\n#\s+Device: (\S+)", res.stdout))
        for i in (0, 1):
            for tl in ("rc_verbs", "ud_verbs"):
                assert (tl, f"{d.name}_{i}:1") in found, \
                    f"no {tl} on {d.name}_{i}:1 in ucx_info -d:\n{res.stdout[-4000:]}"


# ------------------------------------------------------------------ traffic

SUBNET = "198.18.67"
_ports = itertools.count(17300)  # ucx_perftest's and io_demo's TCP ports in this module


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args):
    with st.wire_daemon(tmp_path_factory, mem_args, "ucxw", SUBNET) as (d, sock_dir):
        yield d, sock_dir


def ucx_env(sock_dir: Path, tls: str, port: int, d: st.Daemon) -> dict:
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir), UCX_TLS=tls,
               UCX_NET_DEVICES=f"{d.name}_{port}:1")
    env.pop("LD_PRELOAD", None)
    return env


def ucx_server(tmp_path: Path, cmd: list, env: dict, ready):
    return dt.serving(tmp_path / "server.out", [SNIC_RUN, *cmd], env, ready, Path(cmd[0]).name)


PERFTESTS = [("tag_lat", 8), ("tag_lat", 6000), ("tag_bw", 65536), ("ucp_put_lat", 8), ("ucp_put_bw", 65536),
             ("ucp_get", 65536)]


@pytest.mark.parametrize("tls", ["ud_verbs", "rc_verbs,ud_verbs"])
@pytest.mark.parametrize("test,size", PERFTESTS, ids=[f"{t}-{s}" for t, s in PERFTESTS])
def test_ucx_perftest_between_two_ports(wire, tmp_path, tls, test, size):
    d, sock_dir = wire
    perftest = ucx_tool("ucx_perftest")
    port = next(_ports)
    before = st.roce_packets(d)
    iters = 200 if size > 8 else 1000
    with ucx_server(tmp_path, [perftest, "-p", port], ucx_env(sock_dir, tls, 0, d),
                    lambda srv: dt.tcp_listening(port)) as srv:
        res = dt.run([SNIC_RUN, perftest, "127.0.0.1", "-p", port, "-t", test, "-s", size,
                      "-n", iters], ucx_env(sock_dir, tls, 1, d))
        context = f"client:\n{dt.shown(res)}\nserver:\n{srv.describe()}\n{d.describe()}"
        assert res.returncode == 0, context
        srv.wait(timeout=60)
    final = re.search(r"^Final:.*$", res.stdout, re.M)
    assert final, context
    print(f"{tls} {test} {size} B: {final[0]}")
    # Every message crossed the wire: at least one RoCE packet per iteration each way.
    assert st.roce_packets(d) - before >= 2 * iters, context


@pytest.mark.parametrize("tls", ["ud_verbs", "rc_verbs,ud_verbs"])
def test_io_demo_connects_through_rdmacm_and_checks_every_byte(wire, tmp_path, tls):
    d, sock_dir = wire
    io_demo = ucx_tool("io_demo")
    port = next(_ports)
    sizes = ["-d", "1:262144"]  # both sides: the server sizes its buffers by it
    with ucx_server(tmp_path, [io_demo, "-q", "-p", port, *sizes], ucx_env(sock_dir, tls, 0, d),
                    lambda srv: "started listener" in srv.output()) as srv:
        res = dt.run([SNIC_RUN, io_demo, "-q", "-p", port, *sizes, "-i", 2000, "-o",
                      "read,write", "-I", f"{SUBNET}.2", f"{SUBNET}.1"],
                     ucx_env(sock_dir, tls, 1, d))
        context = f"client:\n{dt.shown(res)}\nserver:\n{srv.describe()}\n{d.describe()}"
    out = res.stdout + res.stderr
    assert res.returncode == 0, context
    assert "Client exit with status 'OK'" in out, context
    assert "Connected to server [0]" in out and "after 1 attempts" in out, context
    assert not re.search(r"data corruption|validation failed|ERROR", out), context
