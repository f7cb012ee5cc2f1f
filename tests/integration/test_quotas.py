"""Control connections per user: one user cannot lock everyone else out of snicd. A uid
holds 64 connections at most; beyond that, its oldest connection that holds nothing gives
way, and when every one of them holds objects the newest is refused at once (its
ibv_open_device fails, it does not hang). And the descriptors snicd keeps for a client:
past its quota a verbs program's ibv_create_comp_channel fails with EMFILE."""

from __future__ import annotations

import errno
import os
import re
import socket
import subprocess
import sys
import textwrap
from typing import Optional

import snictest as st

LIBSNIC = st.BUILD / "libclient" / "libsnic.so"
PER_UID = 64

# Opens contexts on a device through libsnic until N are open or one fails; prints how many
# and the errno of the failure, then holds them until its stdin closes.
OPENER = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1], use_errno=True)
    lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    lib.ibv_open_device.restype = ctypes.c_void_p
    lib.ibv_open_device.argtypes = [ctypes.c_void_p]
    n = ctypes.c_int(0)
    devs = lib.ibv_get_device_list(ctypes.byref(n))
    opened, err = [], 0
    if n.value == 0:  # the device list's own connection was refused
        print("opened 0 nodevice", flush=True)
        sys.stdin.read()
        sys.exit(0)
    for _ in range(int(sys.argv[2])):
        c = lib.ibv_open_device(devs[0])
        if not c:
            err = ctypes.get_errno()
            break
        opened.append(c)
    print(f"opened {len(opened)} errno {err}", flush=True)
    sys.stdin.read()
""")


# Opens a context, then makes completion channels through libsnic until one fails; prints
# how many and the errno, then holds them until its stdin closes.
CHANNELS = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1], use_errno=True)
    lib.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
    lib.ibv_open_device.restype = ctypes.c_void_p
    lib.ibv_open_device.argtypes = [ctypes.c_void_p]
    lib.ibv_create_comp_channel.restype = ctypes.c_void_p
    lib.ibv_create_comp_channel.argtypes = [ctypes.c_void_p]
    n = ctypes.c_int(0)
    devs = lib.ibv_get_device_list(ctypes.byref(n))
    ctx = lib.ibv_open_device(devs[0])
    assert ctx, ctypes.get_errno()
    made, err = [], 0
    for _ in range(int(sys.argv[2])):
        ch = lib.ibv_create_comp_channel(ctx)
        if not ch:
            err = ctypes.get_errno()
            break
        made.append(ch)
    print(f"channels {len(made)} errno {err}", flush=True)
    sys.stdin.read()
""")


def opener(sock_dir, n: int, program: str = OPENER) -> subprocess.Popen:
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    env.pop("LD_PRELOAD", None)
    return subprocess.Popen([sys.executable, "-c", program, str(LIBSNIC), str(n)],
                            env=st.preload_sanitizer(env),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_one_user_holds_at_most_64_connections(daemons, mem_args, tmp_path):
    name = st.unique("quota", maxlen=24)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--wire", "--port", "wire0,ip=198.18.19.1/24", "--port", "wire1,ip=198.18.19.2/24",
                 "--idle-backoff", "100"], ctrl=str(sock_dir / f"{name}.sock"))
    d.wait_ready()

    # 64 contexts (each a connection with a session) take this uid's quota...
    full = opener(sock_dir, PER_UID)
    try:
        line = full.stdout.readline()
        assert line.split()[:2] == ["opened", str(PER_UID)], line + full.stderr.read()
        # ...and one more is refused at once: its connection is closed, nothing hangs (the
        # device list's own connection already is: the program finds no device).
        more = opener(sock_dir, 1)
        try:
            more_line = more.stdout.readline()
        finally:
            more.stdin.close()
            more.wait(timeout=60)
        assert more_line.startswith("opened 0 "), more_line + more.stderr.read()
        assert "refusing a client of uid" in d.stdout(), d.describe()
    finally:
        full.stdin.close()
        full.wait(timeout=60)

    # Connections holding nothing give way: the 65th idle one closes the oldest. The count to
    # start from is read twice around a snicctl call that finds no session: equal reads hold
    # no snicctl connection on its way out (with one, 64 idle connections never reached it).
    def steady() -> Optional[int]:
        first = open_fds(d.pid)
        gone = "sessions 0" in st.run([str(st.SNICCTL), "-s", d.ctrl, "resources"]).stdout
        return first if gone and open_fds(d.pid) == first else None
    base = st.poll(steady, "the contexts' sessions to go")
    hogs = []
    try:
        for _ in range(PER_UID):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(d.ctrl)
            hogs.append(s)
        st.poll(lambda: open_fds(d.pid) >= base + PER_UID or None, "the idle connections")
        newest = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        newest.connect(d.ctrl)
        hogs.append(newest)
        hogs[0].settimeout(30)
        assert hogs[0].recv(1) == b"", "the oldest idle connection must give way"
        # And the user is still served (by closing the next idle one).
        assert st.ctl_status(d.ctrl).returncode == 0
    finally:
        for s in hogs:
            s.close()


def test_a_verbs_program_past_its_descriptor_quota_gets_emfile(daemons, mem_args, tmp_path):
    name = st.unique("fdq", maxlen=24)
    sock_dir = tmp_path / "sockets"
    sock_dir.mkdir()
    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--wire", "--port", "wire0,ip=198.18.21.1/24", "--port", "wire1,ip=198.18.21.2/24",
                 "--idle-backoff", "100"], ctrl=str(sock_dir / f"{name}.sock"))
    d.wait_ready()
    res = st.run([str(st.SNICCTL), "-s", d.ctrl, "resources"], check=True)
    quota = int(re.search(r"^fds \d+ per-client (\d+) per-uid \d+$", res.stdout, re.M)[1])
    base = open_fds(d.pid)

    # The device keeps one of the client's descriptors, each channel one more.
    p = opener(sock_dir, quota + 5, CHANNELS)
    try:
        line = p.stdout.readline()
        assert line.split() == ["channels", str(quota - 1), "errno", str(errno.EMFILE)], \
            line + p.stderr.read()
        clients = st.run([str(st.SNICCTL), "-s", d.ctrl, "clients"], check=True).stdout
        assert re.search(rf"^session \d+ pid {p.pid} .* fds {quota}$", clients, re.M), clients
        assert f"this client keeps {quota} descriptors, its quota is {quota}" in d.stdout(), \
            d.describe()
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    st.poll(lambda: "fds 0 " in st.run([str(st.SNICCTL), "-s", d.ctrl, "resources"]).stdout
            or None, "the program's descriptors to go")
    st.poll(lambda: open_fds(d.pid) == base or None, "snicd's descriptors back to where they were")
