"""Shared receive queues on the wire: tests/verbs/snic-srq-tests between the two ports of one
snicd's virtual wire. An SRQ resized up and down (ibv_modify_srq with IBV_SRQ_MAX_WR) while a
peer keeps sending into it loses, repeats and reorders no WQE, and every message lands in its
own buffer; a shrink below the WQEs posted is refused. snic_query_qp_recv (libsnic's
<snic/snic_ext.h>) is sampled while multi-packet messages arrive: never taken < completed,
never more in progress than posted, never backwards, exact when quiescent, flushes counted. A
QP of an SRQ that enters the error state raises LAST_WQE_REACHED and leaves the SRQ's WQEs to
its other QPs."""

from __future__ import annotations

import os
import subprocess

import pytest

import snictest as st

SRQ_TESTS = st.BUILD / "tests" / "verbs" / "snic-srq-tests"


@pytest.fixture(scope="module")
def wire_daemon(tmp_path_factory, mem_args):
    if not os.access(SRQ_TESTS, os.X_OK):
        pytest.fail(f"{SRQ_TESTS} is not built (ninja -C {st.BUILD})")
    with st.wire_daemon(tmp_path_factory, mem_args, "srq", "198.18.55") as wire:
        yield wire


def test_shared_receive_queues_on_the_wire(wire_daemon):
    d, sock_dir = wire_daemon
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir),
               SNIC_SRQ_DEVICES=f"{d.name}_0 {d.name}_1")
    env.pop("LD_PRELOAD", None)
    res = subprocess.run([str(SRQ_TESTS)], env=env, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 0, f"snic-srq-tests failed:\n{res.stdout[-6000:]}\n{res.stderr[-2000:]}\n{d.describe()}"
    assert "[  PASSED  ] 3 tests." in res.stdout and "SKIPPED" not in res.stdout, res.stdout[-3000:]
    assert d.running(), d.describe()
