"""Memory windows on the wire: tests/verbs/snic-window-tests between the two ports of one
snicd's virtual wire. Type 1 windows bound through ibv_bind_mw and type 2 windows bound by
work requests give a peer RDMA access to exactly their range under their current rkey;
rebinding retires the old rkey; Local Invalidate and Send with Invalidate end a type 2
window (the receiver sees IBV_WC_WITH_INV and the key); using an ended window, or
invalidating what cannot be invalidated, fails the connection with the target's memory
untouched; a region with a bound window cannot be deregistered (EBUSY)."""

from __future__ import annotations

import os
import subprocess

import pytest

import snictest as st

WINDOW_TESTS = st.BUILD / "tests" / "verbs" / "snic-window-tests"


@pytest.fixture(scope="module")
def wire_daemon(tmp_path_factory, mem_args):
    if not os.access(WINDOW_TESTS, os.X_OK):
        pytest.fail(f"{WINDOW_TESTS} is not built (ninja -C {st.BUILD})")
    with st.wire_daemon(tmp_path_factory, mem_args, "mw", "198.18.41") as wire:
        yield wire


def test_memory_windows_on_the_wire(wire_daemon):
    d, sock_dir = wire_daemon
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir),
               SNIC_WINDOW_DEVICES=f"{d.name}_0 {d.name}_1")
    env.pop("LD_PRELOAD", None)
    res = subprocess.run([str(WINDOW_TESTS)], env=env, capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"snic-window-tests failed:\n{res.stdout[-6000:]}\n{res.stderr[-2000:]}\n{d.describe()}"
    assert "[  PASSED  ] 7 tests." in res.stdout, res.stdout[-3000:]
    assert d.running(), d.describe()
