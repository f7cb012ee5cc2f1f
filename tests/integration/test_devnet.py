"""scripts/devnet.sh: up, status, down, and recovery after the daemons are
killed."""

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

import snictest as st
import test_rc as rc

STATE = Path("/run/snic/devnet")
EXPECT = {"snicA": "198.18.0.1/24", "snicB": "198.18.0.2/24"}
LINE = re.compile(r"^(snicA|snicB) up pid (\d+) ip (\S+) mac ([0-9a-f]{2}(?::[0-9a-f]{2}){5}) "
                  r"ctrl (\S+) devices (\S+)$", re.M)


def check(res, what):
    assert res.returncode == 0, f"devnet.sh {what} exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def check_up(devnet) -> dict:
    """Both daemons up per `devnet.sh status`, consistent with snicctl."""
    out = check(devnet("status"), "status")
    found = {m[1]: m for m in LINE.finditer(out)}
    assert set(found) == set(EXPECT), out
    pids = {}
    for name, ip in EXPECT.items():
        m = found[name]
        assert m[3] == ip, out
        assert m[5] == f"/run/snic/{name}.sock", out
        status = st.ctl_status_ok(m[5])
        assert status.name == name and status.pid == int(m[2]), (out, status)
        assert status.ports[0].mac == m[4], (out, status)
        pids[name] = int(m[2])
    assert pids["snicA"] != pids["snicB"]
    return pids


def test_devnet_up_status_down(devnet):
    check(devnet("up"), "up")
    check_up(devnet)
    out = check(devnet("up"), "up (again)")
    assert "already up" in out, out

    check(devnet("down"), "down")
    res = devnet("status")
    assert res.returncode != 0, res.stdout
    assert re.search(r"^snicA down$", res.stdout, re.M) and re.search(r"^snicB down$", res.stdout, re.M), res.stdout
    assert not STATE.exists()
    assert not st.netns_exists("snic-devnet")
    check(devnet("down"), "down (again)")


def test_devnet_recovers_after_kill(devnet):
    check(devnet("up"), "up")
    pids = check_up(devnet)
    for name, pid in pids.items():
        assert int((STATE / f"{name}.pid").read_text()) == pid
        os.kill(pid, signal.SIGKILL)
    for name, pid in pids.items():
        st.poll(lambda p=pid: not Path(f"/proc/{p}").exists(), f"killed {name} to disappear", tries=100)

    check(devnet("up"), "up after SIGKILL")
    new = check_up(devnet)
    assert set(new.values()).isdisjoint(pids.values()), (pids, new)
    check(devnet("down"), "down")
    assert not st.netns_exists("snic-devnet")


@pytest.mark.parametrize("pmd", ["default", "af_xdp", "af_packet"])
def test_devnet_carries_rc_traffic_with_each_veth_driver(devnet, monkeypatch, pmd):
    """The daemons drive their veth ends with net_af_xdp where this machine allows it (the
    default), or with the driver SNIC_VETH_PMD names; rdma-core's ibv_rc_pingpong checks its
    data between them either way."""
    want = pmd if pmd != "default" else "af_xdp" if st.af_xdp_supported() else "af_packet"
    if want == "af_xdp" and not st.af_xdp_supported():
        pytest.skip("no XDP sockets or no net_af_xdp driver on this machine")
    if pmd == "default":
        monkeypatch.delenv("SNIC_VETH_PMD", raising=False)
    else:
        monkeypatch.setenv("SNIC_VETH_PMD", pmd)
    check(devnet("up"), "up")
    check_up(devnet)
    for name in EXPECT:
        assert st.ctl_status_ok(f"/run/snic/{name}.sock").ports[0].device == f"net_{want}0"
    rc.pingpong("ibv_rc_pingpong", "snicA_0", "snicB_0", Path("/run/snic"),
                ["-s", "4096", "-n", "200"])


HOSTS = {"snicA": ("snic-hostA", "/run/snic/hostA"), "snicB": ("snic-hostB", "/run/snic/hostB")}


def test_devnet_hosts_talk_by_their_addresses(devnet, tmp_path):
    """`up --hosts`: each daemon in a namespace of its own with the kernel's address on its
    veth end, shared (--port iface=IF,shared). ibv_rc_pingpong's exchange goes over the
    kernels' TCP to the server host's address and its RDMA to the same address; `exec`
    runs each side on its host. `status` says the same as without --hosts, with each host's
    socket; `down` removes both namespaces."""
    if not st.af_xdp_supported():
        pytest.skip("no XDP sockets or no net_af_xdp driver on this machine")
    check(devnet("up", "--hosts"), "up --hosts")
    out = check(devnet("status"), "status")
    found = {m[1]: m for m in LINE.finditer(out)}
    assert set(found) == set(EXPECT), out
    for name, ip in EXPECT.items():
        ns, sock_dir = HOSTS[name]
        assert found[name][3] == ip, out
        assert found[name][5] == f"{sock_dir}/{name}.sock", out
        assert st.netns_exists(ns), ns
    ping = devnet("exec", "A", "--", "ping", "-c", "2", "-i", "0.2", "-W", "2", "198.18.0.2")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    snic_run = str(st.BUILD / "libclient" / "snic-run")
    args = ["ibv_rc_pingpong", "-g", "0", "-s", "4096", "-n", "200", "-c"]
    log = tmp_path / "server.log"
    with open(log, "wb") as out_file:
        server = subprocess.Popen(["bash", str(st.DEVNET_SH), "exec", "B", "--", snic_run, *args,
                                   "-d", "snicB_0"], stdout=out_file, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
    try:
        st.poll(lambda: server.poll() is not None or ":18515" in st.run(
            ["ip", "netns", "exec", "snic-hostB", "ss", "-Hltn"], check=True).stdout,
                "ibv_rc_pingpong's server listening")
        client = devnet("exec", "A", "--", snic_run, *args, "-d", "snicA_0", "198.18.0.2",
                        timeout=120)
        assert client.returncode == 0, client.stdout + client.stderr
        assert "bytes in" in client.stdout + client.stderr, client.stdout + client.stderr
        server.wait(timeout=60)
        assert server.returncode == 0, log.read_text()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
    check(devnet("down"), "down")
    for ns, _ in HOSTS.values():
        assert not st.netns_exists(ns), ns
