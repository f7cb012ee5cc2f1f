"""Memory the application shares itself, registered through libsnic and used on the wire:
tests/verbs/snic-shared-memory-tests between the two ports of one snicd's virtual wire moves
data by RDMA WRITE and SEND through SysV segments (normal and SHM_HUGETLB, removed with
IPC_RMID at once, as UCX's receive pool is), hugetlb memfds, shared and private MAP_HUGETLB
memory and a file on a hugetlbfs mount, and checks every byte; a hugetlbfs file truncated under its
registration costs snicd nothing (the fault it then takes is counted). A huge-page case is
skipped (and says so) only when no huge pages are free. snicd keeps no mapping and no
attachment after the program exits."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import snictest as st

TESTS = st.BUILD / "tests" / "verbs" / "snic-shared-memory-tests"


@pytest.fixture(scope="module")
def wire_daemon(tmp_path_factory, mem_args):
    if not os.access(TESTS, os.X_OK):
        pytest.fail(f"{TESTS} is not built (ninja -C {st.BUILD})")
    with st.wire_daemon(tmp_path_factory, mem_args, "shm", "198.18.61") as wire:
        yield wire


def sysv_attachments_of(pid: int) -> int:
    """How many SysV segments process PID has attached (its /SYSV mappings)."""
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for line in f if "/SYSV" in line)


def test_sysv_and_hugetlb_memory_on_the_wire(wire_daemon):
    d, sock_dir = wire_daemon
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir), SNIC_TEST_DEVICES=f"{d.name}_0 {d.name}_1")
    env.pop("LD_PRELOAD", None)
    res = subprocess.run([str(TESTS)], env=env, capture_output=True, text=True, timeout=120,
                         stdin=subprocess.DEVNULL)
    out = f"{res.stdout[-6000:]}\n{res.stderr[-2000:]}"
    assert res.returncode == 0, f"snic-shared-memory-tests failed:\n{out}\n{d.describe()}"
    assert "[  PASSED  ] 7 tests." in res.stdout or "SKIPPED" in res.stdout, out
    for skipped in re.findall(r"^\[  SKIPPED \] (\S+)", res.stdout, re.M):
        print(f"skipped: {skipped} (no free huge pages)")
    assert d.running(), d.describe()
    # The truncated file's pages faulted under snicd, which survived and counted them.
    if "TruncationUnderARegistrationCostsOnlyItsOwner" not in " ".join(
            re.findall(r"^\[  SKIPPED \] (\S+)", res.stdout, re.M)):
        resources = st.run([st.SNICCTL, "-s", d.ctrl, "resources"], timeout=10).stdout
        m = re.search(r"^faults_recovered (\d+)$", resources, re.M)
        assert m and int(m[1]) >= 1, resources
    # Everything was deregistered: snicd holds none of the program's segments.
    st.poll(lambda: sysv_attachments_of(d.pid) == 0, "snicd to detach the SysV segments", tries=50)
