"""libsnic against a running snicd: the verbs test program, rdma-core's own
ibv_devices and ibv_devinfo run unmodified under snic-run, and a C program
built with `pkg-config libsnic` (linked -lsnic, not -libverbs).

One snicd with the virtual wire's two ports serves the module. Its control
socket lives in a directory of its own, given to libsnic as SNIC_SOCKET_DIR,
so that other daemons on the machine are not seen.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

import snictest as st

LIBCLIENT = st.BUILD / "libclient"
SNIC_RUN = LIBCLIENT / "snic-run"
VERBS_TESTS = st.BUILD / "tests" / "verbs" / "snic-verbs-tests"
CONSUMER_TESTS = st.BUILD / "tests" / "verbs" / "snic-consumer-tests"
LIBSNIC_UNIT_TESTS = st.BUILD / "tests" / "verbs" / "snic-libsnic-unit-tests"
PKGCONFIG_DIR = st.BUILD / "meson-uninstalled"

PORT0_IP = "198.18.11.1"
PORT1_IP = "198.18.11.2"


@pytest.fixture(scope="module")
def verbs_daemon(tmp_path_factory, mem_args):
    """(Daemon, socket dir): one snicd, ports wire0 and wire1, socket in its own dir."""
    for b in (st.SNICD, st.SNICCTL, SNIC_RUN, VERBS_TESTS):
        if not os.access(b, os.X_OK):
            pytest.fail(f"{b} is not built (run scripts/setup.sh or ninja -C {st.BUILD})")
    # Short: the consumer tests look for the iWARP device ("<name>_iw0") among the interfaces,
    # and an interface name has at most 15 characters (CI's pids run to seven digits).
    name = st.unique("u", maxlen=11)
    st.remove_daemon_leftovers(name)
    sock_dir = tmp_path_factory.mktemp("snic-sockets")
    d = st.Daemon(name, ["-l", "0", "--no-pci", *mem_args],
                  ["--wire", "--port", f"wire0,ip={PORT0_IP}/24", "--port", f"wire1,ip={PORT1_IP}/24",
                   "--idle-backoff", "100"],
                  tmp_path_factory.mktemp("snicd"), ctrl=str(sock_dir / f"{name}.sock"))
    d.start()
    try:
        status = d.wait_ready()
        yield d, sock_dir, status
    finally:
        d.cleanup()


def env_for(sock_dir: Path) -> dict:
    env = dict(os.environ)
    env["SNIC_SOCKET_DIR"] = str(sock_dir)
    env.pop("LD_PRELOAD", None)
    return env


def run(cmd, sock_dir: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return st.run(cmd, timeout=timeout, env=env_for(sock_dir))


def guid_of(mac: str) -> str:
    """The node GUID ibv_devices prints for a port MAC (EUI-64)."""
    b = [int(x, 16) for x in mac.split(":")]
    eui = [b[0] ^ 2, b[1], b[2], 0xff, 0xfe, b[3], b[4], b[5]]
    return "".join(f"{x:02x}" for x in eui)


def resource_counts(d: st.Daemon) -> dict:
    res = st.run([st.SNICCTL, "-s", d.ctrl, "resources"], timeout=10)
    assert res.returncode == 0, f"snicctl resources exited {res.returncode}: {res.stderr}"
    counts = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+) count (\d+)", res.stdout, re.M)}
    m = re.search(r"^sessions (\d+)", res.stdout, re.M)
    counts["sessions"] = int(m[1]) if m else -1
    return counts


# ------------------------------------------------------------------ tests

def test_libsnic_memory_sharing_unit_tests():
    """libsnic's memory sharing on its own (no daemon)."""
    assert os.access(LIBSNIC_UNIT_TESTS, os.X_OK), f"{LIBSNIC_UNIT_TESTS} is not built"
    res = st.run([LIBSNIC_UNIT_TESTS], timeout=120)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    assert "[  PASSED  ]" in res.stdout


def test_verbs_program(verbs_daemon):
    """snic-verbs-tests: every resource verb with valid and invalid input."""
    d, sock_dir, _ = verbs_daemon
    res = run([VERBS_TESTS], sock_dir, timeout=300)
    assert res.returncode == 0, f"snic-verbs-tests failed:\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    assert "[  PASSED  ]" in res.stdout
    assert "SKIPPED" not in res.stdout, f"tests were skipped:\n{res.stdout[-3000:]}"
    # The program is gone: snicd holds nothing of it any more.
    counts = st.poll(lambda: (c := resource_counts(d)) and c.get("sessions") == 0 and c,
                     "the daemon to release the test program's session", tries=50)
    leftover = {k: v for k, v in counts.items() if v != 0}
    assert not leftover, f"snicd still holds {leftover} after the program exited"
    assert d.running()


def test_what_consumers_rely_on(verbs_daemon):
    """snic-consumer-tests: getifaddrs with the ports, rdma_getaddrinfo from hints, loopback
    binds and destinations, id->pd, SNIC_DEVICES (what UCX, Open MPI and libfabric need)."""
    d, sock_dir, _ = verbs_daemon
    env = env_for(sock_dir)
    env.update(SNIC_TEST_PORT0_IP=PORT0_IP, SNIC_TEST_PORT1_IP=PORT1_IP,
               SNIC_TEST_DEVICE_PREFIX=d.name)
    res = st.run([CONSUMER_TESTS], timeout=120, env=env)
    assert res.returncode == 0, f"{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    assert "[  PASSED  ]" in res.stdout and "SKIPPED" not in res.stdout, res.stdout[-3000:]


def test_ibv_devices_lists_snic_devices(verbs_daemon):
    d, sock_dir, status = verbs_daemon
    res = run([SNIC_RUN, "ibv_devices"], sock_dir)
    assert res.returncode == 0, res.stderr
    rows = dict(re.findall(r"^\s+(\S+)\s+([0-9a-f]{16})\s*$", res.stdout, re.M))
    # Each port is a RoCEv2 device and an iWARP device with the same node GUID.
    expected = {f"{d.name}_{kind}{p.id}": guid_of(p.mac) for p in status.ports
                for kind in ("", "iw")}
    assert rows == expected, f"ibv_devices printed:\n{res.stdout}"


def test_ibv_devinfo_describes_snic_devices(verbs_daemon):
    d, sock_dir, status = verbs_daemon
    res = run([SNIC_RUN, "ibv_devinfo", "-v"], sock_dir)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    blocks = re.split(r"^hca_id:\s*", res.stdout, flags=re.M)[1:]
    by_name = {b.split()[0]: b for b in blocks}
    ips = {0: PORT0_IP, 1: PORT1_IP}
    assert set(by_name) == {f"{d.name}_{kind}{p.id}" for p in status.ports
                            for kind in ("", "iw")}, res.stdout
    for p, kind in ((p, kind) for p in status.ports for kind in ("", "iw")):
        text = by_name[f"{d.name}_{kind}{p.id}"]

        def field(name: str) -> str:
            m = re.search(rf"^\s*{name}:\s*(.+?)\s*$", text, re.M)
            assert m, f"no {name} in:\n{text}"
            return m[1]

        if kind == "iw":  # an RNIC on the same port (its GID: snic-consumer-tests)
            assert field("transport") == "iWARP (1)"
            assert field("node_guid").replace(":", "") == guid_of(p.mac)
            assert field("state") == "PORT_ACTIVE (4)"
            assert field("link_layer") == "Ethernet"
            continue
        assert field("transport") == "InfiniBand (0)"
        assert field("node_guid").replace(":", "") == guid_of(p.mac)
        assert field("phys_port_cnt") == "1"
        for f in ("max_qp", "max_qp_wr", "max_cq", "max_cqe", "max_mr", "max_pd", "max_sge",
                  "max_srq", "max_srq_wr", "max_mw", "max_qp_rd_atom"):
            assert int(field(f)) > 0, f"{f} is {field(f)}"
        assert int(field("max_mr_size"), 16) > 0
        assert field("state") == "PORT_ACTIVE (4)"
        assert field("phys_state") == "LINK_UP (5)"
        assert field("link_layer") == "Ethernet"
        assert field("active_mtu") == "1024 (3)"  # Ethernet MTU 1500
        assert field("max_mtu") == "4096 (5)"
        assert field("gid_tbl_len") == "1"
        assert field("pkey_tbl_len") == "1"
        gid = field(r"GID\[\s*0\]")
        assert gid.startswith(f"::ffff:{ips[p.id]}"), gid
        assert "RoCE v2" in gid


def test_dead_sockets_are_skipped(verbs_daemon, tmp_path):
    """A socket file nobody listens on, and a directory that does not exist,
    are passed over quickly."""
    d, sock_dir, status = verbs_daemon
    dead_dir = tmp_path / "dead"
    dead_dir.mkdir()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(dead_dir / "gone.sock"))
    s.close()  # the file stays, nobody answers
    env = env_for(sock_dir)
    env["SNIC_SOCKET_DIR"] = f"{dead_dir}:{tmp_path / 'missing'}:{sock_dir}"
    res = st.run([SNIC_RUN, "ibv_devices"], timeout=20, env=env)
    assert res.returncode == 0, res.stderr
    names = re.findall(r"^\s+(\S+)\s+[0-9a-f]{16}\s*$", res.stdout, re.M)
    assert sorted(names) == sorted(f"{d.name}_{kind}{p.id}" for p in status.ports
                                   for kind in ("", "iw")), res.stdout


def test_snic_run_usage():
    res = st.run([SNIC_RUN])
    assert res.returncode == 2
    assert "usage: snic-run" in res.stderr


def test_linking_with_pkg_config(verbs_daemon, tmp_path):
    """A verbs program built with `pkg-config --cflags --libs libsnic` links
    libsnic, not libibverbs, and finds the devices."""
    d, sock_dir, status = verbs_daemon
    src = tmp_path / "list.c"
    src.write_text(r"""
#include <infiniband/verbs.h>
#include <stdio.h>
int main(void) {
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) return 1;
    for (int i = 0; i < n; ++i) {
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_port_attr pa;
        if (!ctx || ibv_query_port(ctx, 1, &pa)) return 2;
        printf("%s %d\n", ibv_get_device_name(list[i]), pa.state);
        ibv_close_device(ctx);
    }
    ibv_free_device_list(list);
    return 0;
}
""")
    env = dict(os.environ, PKG_CONFIG_PATH=str(PKGCONFIG_DIR))
    flags = st.run(["pkg-config", "--cflags", "--libs", "libsnic-uninstalled"], env=env, check=True)
    assert "-lsnic" in flags.stdout and "ibverbs" not in flags.stdout, flags.stdout
    exe = tmp_path / "list"
    st.run(["cc", "-o", exe, src, *flags.stdout.split(), f"-Wl,-rpath,{LIBCLIENT}"], check=True)
    ldd = st.run(["ldd", exe], check=True).stdout
    assert "libsnic.so" in ldd and "libibverbs" not in ldd, ldd
    # Built here without the sanitizer: a sanitized build's libsnic needs its runtime preloaded.
    res = st.run([exe], timeout=60, env=st.preload_sanitizer(env_for(sock_dir)))
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.split("\n")[:-1])
    assert lines == sorted(f"{d.name}_{kind}{p.id} 4" for p in status.ports
                           for kind in ("", "iw")), res.stdout


def test_abi_mismatch_is_reported(tmp_path):
    """A daemon of another ABI version: its devices are not listed, and libsnic
    says why in one line."""
    import struct
    import threading

    path = tmp_path / "other.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(str(path))
    srv.listen(4)
    srv.settimeout(10)
    magic = 0x43494E53
    served = []

    def serve():
        try:
            while True:
                c, _ = srv.accept()
                with c:
                    req = c.recv(65536)
                    _, _, op, seq, _, _, _ = struct.unpack("<IHHIiII", req[:24])
                    served.append(op)
                    c.send(struct.pack("<IHHIiII", magic, 99, op, seq, 71, 24, 0))  # EPROTO
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        res = run([SNIC_RUN, "ibv_devices"], tmp_path, timeout=20)
    finally:
        try:
            srv.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        srv.close()
        t.join(timeout=5)
    assert res.returncode == 0, res.stderr
    assert served, "libsnic did not ask the socket"
    ours = re.search(r"kAbiVersion = (\d+);", (st.REPO / "shm" / "control_abi.h").read_text())[1]
    assert f"libsnic: snicd at {path} speaks ABI 99, libsnic {ours}" in res.stderr, res.stderr
    assert not re.findall(r"^\s+(\S+)\s+[0-9a-f]{16}\s*$", res.stdout, re.M), res.stdout
