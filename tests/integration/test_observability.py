"""Operators see the transport, as `rdma resource show qp` and `rdma statistic` show a kernel
RNIC's: while rdma-core's ibv_rc_pingpong runs unmodified under snic-run across the virtual
wire, `snicctl qp` lists its QPs in RTS and `snicctl qp QPN` shows their PSNs and counters
moving; DPDK telemetry shows each port's RoCE counters and the QPs; a client that is not root
sees only its own QPs; bad input gets a clear error and a non-zero exit."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from pathlib import Path
from typing import Iterator, Optional

import pytest

import snictest as st

SNIC_RUN = st.BUILD / "libclient" / "snic-run"
LIBSNIC = st.BUILD / "libclient" / "libsnic.so"
SUBNET = "198.18.21"
NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
AS_OTHER = ["setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", "--"]

# Every RoceCounters field and roce::Drop reason (daemon/roce/roce_transport.h, proto/roce/packet.h).
ROCE_COUNTERS = {"rx_packets", "tx_packets", "rx_unknown_qpn", "rx_bad_source", "rx_not_ipv4",
                 "tx_no_mbuf", "tx_unresolved", "tx_uc_held", "loopback_packets", "loopback_full",
                 "rx_gsi", "rx_gsi_no_hook", "rx_gsi_bad_opcode", "tx_gsi", "tx_placed",
                 "rx_split",
                 "roce_truncated", "roce_unknown_opcode", "roce_bad_version",
                 "roce_unexpected_payload", "roce_bad_pad", "roce_misaligned_length",
                 "roce_bad_icrc", "roce_bad_split"}


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args, public_sock_dir):
    """One daemon on the virtual wire, its control socket open to every user (0666)."""
    with st.wire_daemon(tmp_path_factory, mem_args, "obs", SUBNET, sock_dir=public_sock_dir,
                        args=("--ctrl-mode", "0666")) as w:
        yield w


@contextlib.contextmanager
def live_pingpong(d: st.Daemon, sock_dir: Path, logdir: Path, server_as: list[str] = ()
                  ) -> Iterator[tuple[subprocess.Popen, subprocess.Popen]]:
    """ibv_rc_pingpong under snic-run, server on the daemon's first device (run through
    SERVER_AS), client on its second, for far more iterations than a test lasts; yields
    (server, client) once the client runs, and kills both on exit."""
    port = st.free_tcp_port()
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir))
    env.pop("LD_PRELOAD", None)
    common = ["-g", "0", "-p", str(port), "-s", "64", "-n", "10000000"]
    procs: list[subprocess.Popen] = []
    try:
        with open(logdir / "server.log", "wb") as out:
            procs.append(subprocess.Popen(
                [*server_as, str(SNIC_RUN), "ibv_rc_pingpong", "-d", f"{d.name}_0", *common],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        server = procs[0]
        st.poll(lambda: server.poll() is not None or st.listening(port), "the pingpong server to listen")
        assert server.poll() is None, (logdir / "server.log").read_text()
        with open(logdir / "client.log", "wb") as out:
            procs.append(subprocess.Popen(
                [str(SNIC_RUN), "ibv_rc_pingpong", "-d", f"{d.name}_1", *common, "127.0.0.1"],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        yield server, procs[1]
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)


def ctl(d: st.Daemon, *args: str, user: list[str] = ()) -> subprocess.CompletedProcess:
    return st.run([*user, st.SNICCTL, "-s", d.ctrl, *args], timeout=10)


def pingpong_qps(d: st.Daemon, server: subprocess.Popen, client: subprocess.Popen
                 ) -> Optional[tuple[dict, dict]]:
    """The server's and the client's QP once both are in RTS (the client's pid is the one
    that opened the device: snic-run and setpriv exec)."""
    for p in (server, client):
        assert p.poll() is None, f"ibv_rc_pingpong (pid {p.pid}) exited with {p.returncode}"
    rows = {int(r["pid"]): r for r in st.ctl_qps(d)}
    s, c = rows.get(server.pid), rows.get(client.pid)
    if s and c and s["state"] == "RTS" and c["state"] == "RTS":
        return s, c
    return None


def test_snicctl_qp_shows_the_live_qps_of_a_pingpong(wire, tmp_path):
    d, sock_dir = wire
    with live_pingpong(d, sock_dir, tmp_path) as (server, client):
        s, c = st.poll(lambda: pingpong_qps(d, server, client), "both pingpong QPs in RTS")
        assert (s["device"], c["device"]) == (f"{d.name}_0", f"{d.name}_1")
        assert (s["dest_qpn"], c["dest_qpn"]) == (c["qpn"], s["qpn"])
        assert (s["peer"], c["peer"]) == (f"{SUBNET}.2", f"{SUBNET}.1")
        assert s["type"] == c["type"] == "RC" and s["uid"] == c["uid"] == "0"
        assert s["session"] != c["session"]

        first = st.ctl_qp(d, s["qpn"])
        assert first["state"] == "RTS" and first["dest_qpn"] == c["qpn"], first
        assert first["path_mtu"] == "1024" and first["engine"] == "roce", first
        assert (first["failed"], first["error"]) == ("no", "none"), first
        # The QP number as the verbs tools print it works as well.
        assert st.ctl_qp(d, hex(int(s["qpn"])))["qpn"] == s["qpn"]

        def moved() -> Optional[dict]:
            now = st.ctl_qp(d, s["qpn"])
            return now if (now["next_psn"] != first["next_psn"]
                           and now["expected_psn"] != first["expected_psn"]
                           and int(now["tx_send_packets"]) > int(first.get("tx_send_packets", 0))
                           and int(now["rx_acks"]) > int(first.get("rx_acks", 0))) else None
        later = st.poll(moved, "the server QP's PSNs and counters to move")
        assert int(later["msn"]) > int(first["msn"]), (first, later)

        every = st.ctl_qp(d, s["qpn"], "-a")
        assert every["timeouts"] == "0" and "tx_atomic_requests" in every, every
        assert "timeouts" not in later or later["timeouts"] != "0", "zero counters need -a"


def test_telemetry_shows_the_roce_counters_and_the_qps(wire, tmp_path):
    d, sock_dir = wire
    ids = [p.id for p in st.ctl_status_ok(d.ctrl).ports]
    with live_pingpong(d, sock_dir, tmp_path) as (server, client):
        s, c = st.poll(lambda: pingpong_qps(d, server, client), "both pingpong QPs in RTS")

        def roce_stats() -> Optional[list[dict]]:
            replies = st.telemetry_query(d.prefix, *(f"/snic/roce_stats,{i}" for i in ids))
            stats = [r["/snic/roce_stats"] for r in replies]
            return stats if all(x["rx_packets"] > 0 and x["tx_packets"] > 0 for x in stats) else None
        for stats in st.poll(roce_stats, "RoCE packets counted on both ports"):
            assert ROCE_COUNTERS <= set(stats), sorted(ROCE_COUNTERS - set(stats))
            # (rx_unknown_qpn may not be 0: a killed pingpong's last packets find no QP.)
            assert stats["rx_bad_source"] == stats["roce_bad_icrc"] == 0, stats

        qpn = int(s["qpn"])
        replies = st.telemetry_script(d.prefix, "/snic/qps", f"/snic/qp,{qpn}",
                                      f"/snic/qp,{hex(qpn)}", "/snic/qp,12345",
                                      "/snic/qp,notanumber", "/snic/roce_stats,99")
        qps = replies[0]["/snic/qps"]
        assert qps[str(ids[0])] == [qpn] and qps[str(ids[1])] == [int(c["qpn"])], qps
        assert qps["unlisted"] == 0, qps
        qp = replies[1]["/snic/qp"]
        assert (qp["qpn"], qp["port"], qp["device"], qp["state"]) == (qpn, ids[0], f"{d.name}_0",
                                                                     "RTS"), qp
        assert (qp["dest_qpn"], qp["peer"], qp["pid"]) == (int(c["qpn"]), f"{SUBNET}.2",
                                                           server.pid), qp
        assert (qp["path_mtu"], qp["engine"], qp["error"], qp["failed"]) == (1024, "roce", "none",
                                                                             0), qp
        assert qp["tx_send_packets"] > 0 and qp["rx_acks"] > 0 and qp["msn"] > 0, qp
        assert {"next_psn", "unacked_psn", "expected_psn", "send_wrs_held"} <= set(qp), qp
        assert replies[2]["/snic/qp"]["qpn"] == qpn
        # No QP has generation 0, so 12345 is never a QP number.
        assert replies[3]["/snic/qp"] is None
        assert replies[4]["/snic/qp"] is None
        assert replies[5]["/snic/roce_stats"] is None


def nobody_can_run_the_tools() -> bool:
    return st.run([*AS_NOBODY, "test", "-x", str(st.SNICCTL), "-a", "-r", str(LIBSNIC),
                   "-a", "-x", str(SNIC_RUN)]).returncode == 0


def test_a_client_that_is_not_root_sees_only_its_own_qps(wire, tmp_path):
    if not nobody_can_run_the_tools():
        pytest.skip(f"uid {NOBODY} cannot reach snicctl or libsnic in {st.BUILD}")
    d, sock_dir = wire
    with live_pingpong(d, sock_dir, tmp_path, server_as=AS_NOBODY) as (server, client):
        theirs, ours = st.poll(lambda: pingpong_qps(d, server, client), "both pingpong QPs in RTS")
        assert (theirs["uid"], ours["uid"]) == (str(NOBODY), "0")

        assert st.ctl_qps(d, user=AS_NOBODY) == [theirs], "nobody sees its own QP alone"
        assert st.ctl_qps(d, user=AS_OTHER) == [], "a third user sees none"
        assert st.ctl_qp(d, theirs["qpn"], user=AS_NOBODY)["state"] == "RTS"
        res = ctl(d, "qp", ours["qpn"], user=AS_NOBODY)
        assert res.returncode == 1 and res.stdout == "", res
        assert f"no QP {ours['qpn']} (or it is not one of yours)" in res.stderr, res.stderr
        # Root sees both.
        assert st.ctl_qp(d, theirs["qpn"])["uid"] == str(NOBODY)

        # The same for the sessions themselves (snicctl clients): pids are nobody else's.
        def session_uids(user):
            res = ctl(d, "clients", user=user)
            assert res.returncode == 0, res
            return {line.split()[5] for line in res.stdout.splitlines() if line.startswith("session ")}
        assert session_uids(AS_NOBODY) == {str(NOBODY)}
        assert session_uids(AS_OTHER) == set()
        assert session_uids([]) >= {str(NOBODY), "0"}


def tcp_rows(d: st.Daemon, tcp_port: int, user: list[str] = ()) -> set[tuple[str, ...]]:
    """snicctl tcp's rows (asked as `user`) with `tcp_port` at either end: (port, state,
    local, remote) for a connection, (port, LISTEN, local) for a listener."""
    res = ctl(d, "tcp", user=user)
    assert res.returncode == 0, res
    rows = set()
    for line in res.stdout.splitlines():
        f = line.split()
        if f[2] == "LISTEN":
            row = (f[1], f[2], f[4])
        else:
            row = (f[1], f[2], f[4], f[6])
        if any(end.endswith(f":{tcp_port}") for end in row[2:]):
            rows.add(row)
    return rows


def test_snicctl_tcp_shows_a_user_its_own_listeners_and_connections(wire, tmp_path):
    """snicctl tcp, asked by a client that is not root, lists the listeners and connections of
    its own rdma_cm ids only: nobody's iWARP rping server sees its listener and its end of the
    connection, not root's client end; a third user sees none; root sees all three."""
    if not nobody_can_run_the_tools():
        pytest.skip(f"uid {NOBODY} cannot reach snicctl or libsnic in {st.BUILD}")
    d, sock_dir = wire
    port = st.free_tcp_port()
    server_ip, client_ip = f"{SUBNET}.1", f"{SUBNET}.2"
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir),
               SNIC_DEVICES=f"{d.name}_iw0,{d.name}_iw1")
    env.pop("LD_PRELOAD", None)
    rping = ["rping", "-p", str(port), "-C", "100000000"]
    procs: list[subprocess.Popen] = []
    try:
        with open(tmp_path / "server.log", "wb") as out:
            procs.append(subprocess.Popen(
                [*AS_NOBODY, str(SNIC_RUN), *rping, "-s", "-a", server_ip], env=env,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        listener = ("0", "LISTEN", f"{server_ip}:{port}")
        st.poll(lambda: procs[0].poll() is not None or listener in tcp_rows(d, port),
                "the rping server to listen")
        assert procs[0].poll() is None, (tmp_path / "server.log").read_text()
        with open(tmp_path / "client.log", "wb") as out:
            procs.append(subprocess.Popen(
                [str(SNIC_RUN), *rping, "-c", "-a", server_ip, "-I", client_ip], env=env,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))

        def connected():
            for p in procs:
                assert p.poll() is None, (tmp_path / "server.log").read_text() + \
                    (tmp_path / "client.log").read_text()
            rows = tcp_rows(d, port)
            return rows if sum(r[1] == "ESTABLISHED" for r in rows) == 2 else None
        every = st.poll(connected, "both ends of the rping connection ESTABLISHED")
        (client_end,) = [r for r in every if r[0] == "1"]
        (server_end,) = [r for r in every if r[0] == "0" and r[1] == "ESTABLISHED"]
        assert every == {listener, server_end, client_end}, every
        assert tcp_rows(d, port, user=AS_NOBODY) == {listener, server_end}
        assert tcp_rows(d, port, user=AS_OTHER) == set()
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)


@pytest.mark.parametrize("args,code,message", [
    (["notanumber"], 2, "'notanumber' is not a QP number"),
    (["0x1000000"], 2, "'0x1000000' is not a QP number"),
    (["-5"], 2, "unexpected argument '-5'"),
    (["16384", "7"], 2, "unexpected argument '7'"),
    (["1"], 1, "no QP 1"),            # QP numbers 0 and 1 are the IBA's special QPs
    (["12345"], 1, "no QP 12345"),    # generation 0: never a QP number
])
def test_snicctl_qp_refuses_bad_input(wire, args, code, message):
    d, _ = wire
    res = ctl(d, "qp", *args)
    assert res.returncode == code, res
    assert message in res.stderr and res.stdout == "", res
