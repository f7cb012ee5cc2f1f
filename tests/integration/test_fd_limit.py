"""snicd out of file descriptors: a client that connects then is refused at once (its
connection closed) rather than left waiting while the control loop spins on a listening
socket it cannot accept from; once descriptors are free again, clients are served."""

from __future__ import annotations

import os
import socket

import snictest as st


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_out_of_descriptors_the_newest_client_is_refused_and_service_resumes(daemons, mem_args):
    name = st.unique("fds", maxlen=24)
    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--wire", "--port", "wire0,ip=198.18.17.1/24", "--port", "wire1,ip=198.18.17.2/24",
                 "--idle-backoff", "100"])
    d.wait_ready()
    # A few descriptors of room left, then clients that hold one each until none is left.
    limit = open_fds(d.pid) + 4
    res = st.run(["prlimit", f"--pid={d.pid}", f"--nofile={limit}:{limit}"], check=True)
    hogs: list[socket.socket] = []
    try:
        def exhausted():
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(d.ctrl)
            hogs.append(s)
            return open_fds(d.pid) >= limit - 1 or None

        st.poll(exhausted, "the daemon to run out of descriptors", tries=100)

        # The next clients are closed by the daemon, not left waiting for an answer.
        for _ in range(3):
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.connect(d.ctrl)
                s.settimeout(30)
                assert s.recv(1) == b"", "a client the daemon cannot serve must be refused"
        assert d.running(), d.describe()
        assert "out of file descriptors" in (d.stdout() + d.stderr()), d.describe()
    finally:
        for s in hogs:
            s.close()
    # Descriptors free again: served as before.
    st.poll(lambda: st.ctl_status(d.ctrl).returncode == 0 or None, "snicctl status to answer")
    assert res.returncode == 0
