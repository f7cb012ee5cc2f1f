"""Fixtures for the snic integration tests (run as root, by
/usr/bin/python3 -m pytest tests/integration).

Every fixture removes what it made (daemons, namespaces, veths, DPDK
leftovers) in its finaliser, so also when the test fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

import snictest as st


def pytest_configure(config):
    # A sanitized build (SNIC_BUILD=build-asan): every process the tests start gets the
    # sanitizers' options (snictest.SANITIZER_OPTIONS).
    st.export_sanitizer_options()


def pytest_report_header(config):
    return f"snic build: {st.BUILD} ({'+'.join(st.SANITIZERS) or 'no sanitizer'})"


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0:
        skip = pytest.mark.skip(reason="the integration tests need root (namespaces, veths, DPDK)")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def sweep_dead_runs():
    """Removes what an earlier, killed run of these tests left behind."""
    if os.geteuid() == 0:
        removed = st.sweep_dead_runs()
        if removed:
            print("removed leftovers of an earlier run: " + ", ".join(removed))


@pytest.fixture(scope="session")
def binaries():
    """The built snicd and snicctl."""
    for b in (st.SNICD, st.SNICCTL):
        if not os.access(b, os.X_OK):
            pytest.fail(f"{b} is not built (run scripts/setup.sh or ninja -C {st.BUILD})")
    return st.SNICD, st.SNICCTL


@pytest.fixture(scope="session")
def mem_args():
    """EAL memory arguments for this machine (see snic_eal_mem_args)."""
    return st.eal_mem_args()


@pytest.fixture
def daemons(binaries, tmp_path):
    """Factory: daemons(name, eal_args, args, ctrl=None, netns=None) starts a
    snicd and returns its Daemon. All are stopped and cleaned up at the end."""
    started: list[st.Daemon] = []

    def start(name: str, eal_args: list[str], args: list[str], ctrl: Optional[str] = None,
              netns: Optional[str] = None) -> st.Daemon:
        d = st.Daemon(name, eal_args, args, tmp_path, ctrl=ctrl, netns=netns)
        # DPDK leftovers of an earlier crashed run that used the same name. A
        # stale control socket is snicd's to handle.
        st.remove_daemon_leftovers(name)
        started.append(d)
        return d.start()

    yield start
    errors = []
    for d in reversed(started):
        try:
            d.cleanup()
        except Exception as e:  # keep cleaning the others
            errors.append(f"{d.name}: {type(e).__name__}: {e}")
    assert not errors, "cleanup failed:\n" + "\n".join(errors)


@dataclass
class VethNs:
    """A veth pair: `host` stays in the root namespace (for snicd's
    net_af_packet), `peer` is in namespace `ns` with address `peer_ip`."""
    ns: str
    host: str
    peer: str
    peer_ip: str


@pytest.fixture(scope="module")
def public_sock_dir() -> Iterator[Path]:
    """A socket directory any user may reach (pytest's own are root's alone): for a daemon
    whose control socket other uids are to reach."""
    d = Path(tempfile.mkdtemp(prefix="snic-public-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def netns():
    """A network namespace of the module's own (loopback only) for tools' side-band ports
    (dtest's 15828): they are then free of anything else on the machine. A module whose tools
    need addresses there defines its own (test_libfabric.py)."""
    with st.loopback_netns("snic-t") as ns:
        yield ns


@pytest.fixture
def veth_ns():
    """Factory: veth_ns(peer_ip) makes a fresh namespace with one end of a
    new veth pair (address peer_ip, e.g. 198.18.2.1/24); the other end stays
    in the root namespace without an address. Removed at the end."""
    made: list[VethNs] = []

    def make(peer_ip: str) -> VethNs:
        v = VethNs(ns=st.unique("snic-t", maxlen=40), host=st.unique("sh"), peer=st.unique("sp"),
                   peer_ip=peer_ip)
        # Leftovers of an earlier crashed run with the same names.
        st.delete_link(v.host)
        st.delete_link(v.peer)
        made.append(v)
        st.add_netns(v.ns)
        st.run(["ip", "link", "add", v.host, "type", "veth", "peer", "name", v.peer], check=True)
        st.run(["ip", "link", "set", v.peer, "netns", v.ns], check=True)
        st.disable_ipv6(v.host)
        st.disable_ipv6(v.peer, v.ns)
        st.run(["ip", "-n", v.ns, "addr", "add", peer_ip, "dev", v.peer], check=True)
        st.run(["ip", "link", "set", v.host, "up"], check=True)
        st.run(["ip", "-n", v.ns, "link", "set", v.peer, "up"], check=True)
        return v

    yield make
    for v in reversed(made):
        st.delete_netns(v.ns)  # takes the peer end with it
        st.delete_link(v.host)
        st.delete_link(v.peer)


@pytest.fixture
def devnet(binaries):
    """scripts/devnet.sh, brought down before and (always) after the test."""

    def devnet_cmd(*args: str, timeout: float = 300):
        return st.run(["bash", str(st.DEVNET_SH), *args], timeout=timeout)

    devnet_cmd("down")
    try:
        yield devnet_cmd
    finally:
        res = devnet_cmd("down")
        assert res.returncode == 0, f"devnet.sh down failed:\n{res.stdout}\n{res.stderr}"
