"""libfabric over snic: Debian's libfabric-bin (fi_info, fi_pingpong), unmodified, through its
verbs provider under snic-run, on one daemon's virtual wire.

The verbs provider finds MSG devices by walking the host's interfaces (getifaddrs) and asking
rdma_cm which device owns each address; libsnic lists every snic port as an interface for
that. fi_pingpong also opens a kernel TCP control connection to the server's address, the
same address its fabric endpoint uses; a real RNIC's address lives on a kernel netdev, a snic
port's does not, so the tools run in a network namespace of this module whose loopback holds
the two port addresses (kernel sockets there reach each other; RDMA traffic goes through
snicd). Each side sees only its own device (SNIC_DEVICES), as on two hosts.

fi_pingpong -c checks every byte; its figures are printed, never judged. The daemon's RoCE
counters show the traffic crossed snic. scripts/setup.sh installs libfabric-bin; without it
the tests fail and say so."""

from __future__ import annotations

import itertools
import os
import re

import pytest

import dapltools as dt
import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
SUBNET = "198.18.69"
SERVER_IP, CLIENT_IP = f"{SUBNET}.1", f"{SUBNET}.2"
_ports = itertools.count(47600)  # fi_pingpong control ports in this module


def tool(name: str) -> str:
    return st.require_tool(name, "libfabric-bin")


@pytest.fixture(scope="module")
def netns():
    """As conftest's netns, its loopback holding both port addresses too, for fi_pingpong's
    control connection."""
    with st.loopback_netns("snic-f", (SERVER_IP, CLIENT_IP)) as ns:
        yield ns


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args, netns):
    with st.wire_daemon(tmp_path_factory, mem_args, "fab", SUBNET) as (d, sock_dir):
        yield d, sock_dir, netns


def env_for(sock_dir, device: str = "") -> dict:
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    if device:
        env["SNIC_DEVICES"] = device
    for k in ("LD_PRELOAD", "FI_PROVIDER", "FI_LOG_LEVEL"):
        env.pop(k, None)
    return env


def fi_info(sock_dir, *args) -> str:
    res = dt.run([SNIC_RUN, tool("fi_info"), "-p", "verbs", *args], env_for(sock_dir))
    assert res.returncode == 0, dt.shown(res)
    return res.stdout


def domains(out: str) -> set[tuple[str, str]]:
    """(domain, type) of every entry fi_info printed."""
    return set(re.findall(r"domain: (\S+)\n\s+version: \S+\n\s+type: (\S+)", out))


def test_fi_info_lists_msg_rdm_and_dgram_endpoints_on_snic_devices(wire):
    d, sock_dir, _ = wire
    devs = [f"{d.name}_0", f"{d.name}_1"]
    for dev in devs:
        assert (dev, "FI_EP_MSG") in domains(fi_info(sock_dir, "-t", "FI_EP_MSG")), dev
        assert (f"{dev}-dgram", "FI_EP_DGRAM") in domains(fi_info(sock_dir, "-t", "FI_EP_DGRAM"))
    rdm = fi_info(sock_dir, "-p", "verbs;ofi_rxm", "-t", "FI_EP_RDM")
    assert all((dev, "FI_EP_RDM") in domains(rdm) for dev in devs), rdm


CASES = [("msg", "64"), ("msg", "1048576"), ("rdm", "64"), ("rdm", "65536"), ("dgram", "all")]


def teardown_crash(srv: dt.Proc, rows: list[str]) -> bool:
    """The server finished every transfer (it printed a result row of 100 sent and 100
    acknowledged for each size the client did) and then died by SIGSEGV inside libfabric: a
    crash in its RxM teardown, seen twice in CI (libfabric 1.17, never reproduced by hand),
    after the bytes were checked."""
    out = srv.output()
    done = [re.search(rf"^{re.escape(r.split()[0])}\s+100\s+=100\s", out, re.M) for r in rows]
    return (bool(rows) and all(done) and "terminated with signal 11" in out
            and "libfabric.so" in out)


@pytest.mark.parametrize("ep,size", CASES, ids=[f"{e}-{s}" for e, s in CASES])
def test_fi_pingpong_checks_every_byte(wire, tmp_path, ep, size):
    d, sock_dir, ns = wire
    pingpong = tool("fi_pingpong")
    ns_exec = ["ip", "netns", "exec", ns]
    common = ["-p", "verbs", "-e", ep, "-c", "-I", "100", "-S", size]
    before = st.roce_packets(d)
    # A second run only when the first one's server crashed in libfabric's teardown after
    # every transfer (teardown_crash); any other failure, or that crash twice, fails.
    for attempt in (1, 2):
        port = next(_ports)
        with dt.serving(tmp_path / f"server{attempt}.out",
                        [*ns_exec, SNIC_RUN, pingpong, *common, "-B", port],
                        env_for(sock_dir, f"{d.name}_0"), lambda srv: dt.tcp_listening(port, ns),
                        "fi_pingpong", ns) as srv:
            res = dt.run([*ns_exec, SNIC_RUN, pingpong, *common, "-P", port, SERVER_IP],
                         env_for(sock_dir, f"{d.name}_1"))
            context = f"client:\n{dt.shown(res)}\nserver:\n{srv.describe()}\ndaemon:\n{d.describe()}"
            assert res.returncode == 0, context
            srv.wait(timeout=60)
            rows = [r for r in res.stdout.splitlines() if re.match(r"^\S+\s+100\s+=100\s", r)]
            if srv.proc.returncode != 0 and attempt == 1 and teardown_crash(srv, rows):
                print(f"libfabric teardown crash after every transfer, run again:\n{srv.output()}")
                continue
            assert srv.proc.returncode == 0, context
        break
    rows = re.findall(r"^(\S+)\s+100\s+=100\s+.*$", res.stdout, re.M)
    assert rows, context
    print(f"{ep}:\n" + "\n".join(l for l in res.stdout.splitlines() if "=100" in l))
    assert st.roce_packets(d) - before >= 200 * len(rows), context
