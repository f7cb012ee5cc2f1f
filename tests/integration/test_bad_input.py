"""snicd refuses bad input with one line on stderr and the contract's exit
code, and never hangs doing so."""

import socket
from pathlib import Path

import pytest

import snictest as st


def assert_one_error_line(rc: int, stderr: str, stdout: str, exit_code: int, phrase: str) -> str:
    """Exit code as expected, stderr exactly one line "snicd: ...phrase..."."""
    lines = stderr.splitlines()
    detail = f"exit code {rc}\nstderr:\n{stderr}\nstdout (tail):\n{stdout[-2000:]}"
    assert rc == exit_code, detail
    assert len(lines) == 1, f"stderr must be exactly one line\n{detail}"
    assert lines[0].startswith("snicd: "), detail
    assert phrase in lines[0], f"{phrase!r} not in stderr\n{detail}"
    return lines[0]


def run_snicd(eal_args, args, name):
    """Runs a snicd that is expected to stop by itself, within the bound."""
    ctrl = str(st.CTRL_DIR / f"{name}.sock")
    try:
        res = st.run([st.SNICD, *eal_args, "--", "--name", name, "--ctrl", ctrl, *args],
                     timeout=st.CMD_TIMEOUT)
        return res.returncode, res.stderr, res.stdout
    finally:
        st.remove_daemon_leftovers(name, ctrl)


BAD_USAGE = [
    pytest.param(["--port", "0,ip=198.18.4.1/24", "--bogus"], 2, "unknown option '--bogus'", id="unknown-flag"),
    pytest.param(["--port", "0,ip=300.1.2.3/24"], 2, "invalid IPv4 address/prefix '300.1.2.3/24'", id="bad-ip"),
    pytest.param(["--wire", "--port", "7,ip=198.18.4.1/24"], 1, "--port 7: no such DPDK port",
                 id="no-such-port"),
    pytest.param(["--port", "iface=snicnosuch0,shared"], 1,
                 "--port iface=snicnosuch0,shared: no interface snicnosuch0", id="no-such-iface"),
    pytest.param(["--port", "iface=lo,shared,ip=127.0.0.1/8"], 2,
                 "ip is the interface's on a shared port", id="shared-with-ip"),
    pytest.param(["--port", "0,ip=198.18.4.1/24,fallback=198.18.4.2/24"], 2,
                 "fallback is a shared port's", id="fallback-unshared"),
    pytest.param(["--port", "iface=lo,shared,fallback=10.1.2.300/24"], 2,
                 "invalid IPv4 address/prefix '10.1.2.300/24'", id="bad-fallback"),
]


def test_a_shared_port_needs_an_ipv4_address(binaries, mem_args, veth_ns):
    """An interface without an IPv4 address cannot be shared: snicd says so and stops."""
    v = veth_ns("198.18.4.9/24")  # the host end, in this namespace, has no address
    name = st.unique("bad", maxlen=24)
    rc, err, out = run_snicd(["-l", "0", "--no-pci", *mem_args],
                             ["--port", f"iface={v.host},shared"], name)
    assert_one_error_line(rc, err, out, 1, f"interface {v.host} has no IPv4 address")


def test_a_shared_port_without_xdp_sockets_needs_a_fallback(binaries, mem_args, veth_ns):
    """--no-xdp stands for a kernel without XDP sockets: a shared port without a fallback
    address cannot run, and snicd says what to give."""
    v = veth_ns("198.18.4.9/24")
    st.run(["ip", "addr", "add", "198.18.4.1/24", "dev", v.host], check=True)
    name = st.unique("bad", maxlen=24)
    rc, err, out = run_snicd(["-l", "0", "--no-pci", *mem_args],
                             ["--no-xdp", "--port", f"iface={v.host},shared"], name)
    line = assert_one_error_line(rc, err, out, 1, "--no-xdp was given")
    assert f"--port iface={v.host},shared,fallback=A.B.C.D/LEN" in line, line


@pytest.mark.parametrize("args,exit_code,phrase", BAD_USAGE)
def test_bad_input(binaries, mem_args, args, exit_code, phrase):
    name = st.unique("bad", maxlen=24)
    rc, err, out = run_snicd(["-l", "0", "--no-pci", *mem_args], args, name)
    assert_one_error_line(rc, err, out, exit_code, phrase)


def test_memory_unavailable(binaries):
    ok, why = st.have_hugepages()
    if not ok:
        pytest.skip(f"{why}: cannot ask for more hugepage memory than exists")
    name = st.unique("mem", maxlen=24)
    rc, err, out = run_snicd(["-l", "0", "--no-pci", "-m", "1000000"],
                             ["--wire", "--port", "wire0,ip=198.18.4.1/24"], name)
    assert_one_error_line(rc, err, out, 1, "DPDK initialisation failed")


def test_control_socket_in_use(daemons, mem_args):
    ctrl = str(st.CTRL_DIR / f"{st.unique('inuse', maxlen=24)}.sock")
    first = daemons(st.unique("use", maxlen=24), ["-l", "0", "--no-pci", *mem_args],
                    ["--wire", "--port", "wire0,ip=198.18.4.1/24", "--idle-backoff", "100"], ctrl=ctrl)
    first.wait_ready()

    second = daemons(st.unique("use", maxlen=24), ["-l", "1", "--no-pci", *mem_args],
                     ["--wire", "--port", "wire0,ip=198.18.4.2/24", "--idle-backoff", "100"], ctrl=ctrl)
    rc = second.wait(timeout=st.CMD_TIMEOUT)
    line = assert_one_error_line(rc, second.stderr(), second.stdout(), 1,
                                 f"control socket {ctrl} is in use by another snicd")
    assert f"(pid {first.pid})" in line, line

    # The first daemon still owns and answers on its socket.
    assert first.running(), first.describe()
    status = st.ctl_status_ok(ctrl)
    assert status.pid == first.pid, status


def test_stale_socket_is_reused(daemons, mem_args):
    name = st.unique("stale", maxlen=24)
    ctrl = st.CTRL_DIR / f"{name}.sock"
    # A socket file nobody listens on, as a crashed daemon leaves it.
    ctrl.parent.mkdir(parents=True, exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.bind(str(ctrl))
    assert Path(ctrl).is_socket()
    assert st.ctl_status(str(ctrl)).returncode != 0

    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--wire", "--port", "wire0,ip=198.18.4.3/24", "--idle-backoff", "100"], ctrl=str(ctrl))
    status = d.wait_ready()
    assert status.pid == d.pid, status
    assert d.stop() == 0, d.describe()
    assert d.stderr() == "", d.describe()


def test_a_link_at_the_lock_path_is_not_followed(daemons, mem_args, tmp_path):
    name = st.unique("stale", maxlen=24)
    ctrl = st.CTRL_DIR / f"{name}.sock"
    ctrl.parent.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "precious"
    victim.write_text("not snicd's\n")
    lock = Path(f"{ctrl}.lock")
    lock.unlink(missing_ok=True)
    lock.symlink_to(victim)
    try:
        d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                    ["--wire", "--port", "wire0,ip=198.18.4.4/24", "--idle-backoff", "100"],
                    ctrl=str(ctrl))
        rc = d.wait(timeout=st.CMD_TIMEOUT)
        assert_one_error_line(rc, d.stderr(), d.stdout(), 1, f"cannot open {lock}")
        assert victim.read_text() == "not snicd's\n", "the link's target was written"
    finally:
        lock.unlink(missing_ok=True)
