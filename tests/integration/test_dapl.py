"""uDAPL over snic with Debian's dapl2-utils, unmodified: dtest (-w, -c, -p), dtestx (write
with immediate, compare-and-swap, fetch-and-add), dtestsrq, dtestcm (a thousand connections)
and dapltest (-T T transactions with SR, RR and RW, -T P performance, -T F functional), each
over both providers: Debian's stock OFED provider (libdaplofa) under snic-run, which shows that
libsnic's verbs and rdma_cm are complete enough for a provider nobody here wrote, and the
project's libdaplsnic, linked with libsnic. The server side uses device <name>_0 (SUBNET.1),
the client <name>_1 (SUBNET.2) of one daemon's virtual wire.

The tools exit 0 even when they fail: every test reads their PASSED/FAILED output.

dtest, dtestx and dtestcm exchange the server's address over a kernel TCP socket on port
15828 (a fixed port: these tests never run two such servers at once); the client is told
127.0.0.1 for it. Readiness is polled (that socket listening, or the server's "ready" line),
never slept for; every process is killed at the end of its test, also when it fails."""

from __future__ import annotations

import contextlib
import itertools
import re
from pathlib import Path

import pytest

import dapltools as dt
import snictest as st
import test_iwarp as iw

SUBNET = "198.18.52"
SERVER_IP, CLIENT_IP = f"{SUBNET}.1", f"{SUBNET}.2"
SIDEBAND_PORT = 15828  # dtest's, dtestx's and dtestcm's address exchange (kernel TCP)
TOOLS = ("dtest", "dtestx", "dtestsrq", "dtestcm", "dapltest")
PROVIDERS = ("libdaplofa", "libdaplsnic")

_ports = itertools.count(19600)  # connection qualifiers (rdma_cm ports) of this module


def next_port() -> int:
    port = next(_ports)
    assert port < 19900, "test_dapl ran out of its port range"
    return port


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args, binaries, netns):
    for tool in TOOLS:
        st.require_tool(tool, "dapl2-utils")
    with st.wire_daemon(tmp_path_factory, mem_args, "dapl", SUBNET) as (d, sock_dir):
        devices = [p.devices.split(",")[0] for p in st.ctl_status_ok(d.ctrl).ports]
        confs = tmp_path_factory.mktemp("dat")
        conf = dt.write_dat_conf(confs / "dat.conf", devices, [SERVER_IP, CLIENT_IP])
        client_conf = dt.write_client_dat_conf(confs / "client-dat.conf", devices,
                                               [SERVER_IP, CLIENT_IP])
        yield d, sock_dir, devices, (conf, client_conf), netns


@pytest.fixture(params=PROVIDERS)
def prov(request, wire) -> dt.Provider:
    d, sock_dir, devices, (conf, client_conf), ns = wire
    return dt.provider(request.param, devices, sock_dir, conf, ns, client_conf)


@pytest.fixture(autouse=True)
def quiet_daemon(wire):
    """Each test starts with no rdma_cm id in the daemon and the side-band port free: what
    an earlier test's processes held is gone (snicd notices their exit on its own time)."""
    d, ns = wire[0], wire[4]
    st.poll(lambda: dt.cm_ids(d) == 0, "no rdma_cm ids left from earlier tests")
    st.poll(lambda: not dt.tcp_listening(SIDEBAND_PORT, ns),
            f"kernel TCP port {SIDEBAND_PORT} free")
    yield
    assert d.running(), d.describe()


# ------------------------------------------------------------------ helpers

def cmd(p: dt.Provider, *args) -> list[str]:
    return p.cmd(*args)


@contextlib.contextmanager
def server(p: dt.Provider, log: Path, args: list, ready):
    """dapltools.serving for this provider's command line, in its namespace."""
    with dt.serving(log, cmd(p, *args), p.env, ready, args[0],
                    p.netns[-1] if p.netns else None) as srv:
        yield srv


def sideband_ready(srv) -> bool:
    return dt.tcp_listening(SIDEBAND_PORT, srv.netns)


def says(text: str):
    return lambda srv: text in srv.output()


# dtest and dtestx send the server's address to the client (send_server_params) before the
# server creates its PSP (dat_psp_create): on a loaded machine the client's connect can reach
# the daemon first and is refused as a kernel RNIC's would be: REJ 8 (no listener) on RoCEv2,
# a RST on iWARP. The client says so (libdaplofa logs the REJ; libdaplsnic's connection event
# is NON_PEER_REJECTED, 0x4003, which dtest and dtestx print) and the daemon counts a request
# nobody listened for. The tools' own race, not the provider's: the pair runs again, at most
# twice, on both signs together.
LISTEN_RACE = re.compile(r"non-consumer REJ, reason=8|!conn established: 0x4003")
LISTEN_RACE_TRIES = 3


def lost_listen_race(client_out: str, refused_before: int, d: st.Daemon) -> bool:
    return LISTEN_RACE.search(client_out) is not None and iw.refusals(d) > refused_before


def client_and_server(wire, p: dt.Provider, tmp_path: Path, server_args: list, client_args: list,
                      ready) -> tuple[str, str]:
    """Runs a server to readiness, the client to its end, then waits for the server to end
    by itself. Returns (client output, server output)."""
    d = wire[0]
    for attempt in range(1, LISTEN_RACE_TRIES + 1):
        out = tmp_path / f"{server_args[0]}-server-{attempt}.out"
        with server(p, out, server_args, ready) as srv:
            refused = iw.refusals(d)
            res = dt.run(cmd(p, *client_args), p.env_of_client())
            client_out = res.stdout + res.stderr
            context = (f"client:\n{dt.shown(res)}\nserver:\n{srv.describe()}\n"
                       f"daemon:\n{d.describe()}")
            if (res.returncode != 0 and attempt < LISTEN_RACE_TRIES
                    and lost_listen_race(client_out, refused, d)):
                print(f"note: {client_args[0]}: the tool's listen race (try {attempt}), again")
                continue  # `server` kills the one still waiting for its first connect request
            with contextlib.suppress(Exception):
                srv.wait(timeout=60)
            assert res.returncode == 0, context
            assert not srv.alive(), f"the server did not end after its client\n{context}"
            return client_out, srv.output()
    raise AssertionError("unreachable")


def assert_no_errors(out: str, who: str, context: str) -> None:
    bad = [l for l in out.splitlines() if re.search(r"\bERR\b|Error|FAILED|Test Error", l)]
    assert not bad, f"{who} reports errors: {bad}\n{context}"


# -------------------------------------------------------------------- dtest

@pytest.mark.parametrize("mode", [[], ["-w"], ["-c"], ["-p"]],
                         ids=["send-rdma", "rdma-write-only", "cno", "polling"])
def test_dtest(wire, prov, tmp_path, mode):
    """dtest: messages, RDMA write and read (or -w write only), with a CNO for the DTO EVDs
    (-c) or polling (-p); each side prints PASSED or FAILED."""
    client, srv = client_and_server(wire, prov, tmp_path, ["dtest", "-P", prov.server, *mode],
                                    ["dtest", "-P", prov.client, "-h", "127.0.0.1", *mode],
                                    sideband_ready)
    context = f"client:\n{client}\nserver:\n{srv}"
    for who, out in (("client", client), ("server", srv)):
        assert "DAPL Test Complete. PASSED" in out, f"{who} did not pass\n{context}"
        assert "FAILED" not in out, context
    # The connection crossed the wire: the client's end is port 1's address.
    assert re.search(rf"Query EP: LOCAL addr {re.escape(CLIENT_IP)}\b", client), context
    assert re.search(rf"Query EP: REMOTE addr {re.escape(SERVER_IP)}\b", client), context


def test_dtestx_write_immediate_and_atomics(wire, prov, tmp_path):
    client, srv = client_and_server(wire, prov, tmp_path, ["dtestx", "-P", prov.server],
                                    ["dtestx", "-P", prov.client, "-h", "127.0.0.1"],
                                    sideband_ready)
    context = f"client:\n{client}\nserver:\n{srv}"
    for who, out in (("client", client), ("server", srv)):
        for line in ("CMP_SWAP test - PASSED", "FETCH_ADD test - PASSED",
                     "IB extension test - immed/atomic test PASSED"):
            assert line in out, f"{who}: no {line!r}\n{context}"
        assert "Skipping" not in out and "not supported" not in out, f"{who}\n{context}"
    assert "RDMA_WRITE_WITH_IMMEDIATE_DATA test - PASSED" in client, context


def test_dtestsrq_four_connections_share_one_srq(wire, prov, tmp_path):
    port = next_port()
    client, srv = client_and_server(
        wire, prov, tmp_path, ["dtestsrq", "-P", prov.server, "-p", port, "-c", 4, "-t", 10],
        ["dtestsrq", "-P", prov.client, "-h", SERVER_IP, "-p", port, "-c", 4, "-t", 10],
        says("ready on port"))
    context = f"client:\n{client}\nserver:\n{srv}"
    assert "ALL 4 CONNECTED on client!" in client, context
    assert "ALL 4 CONNECTED on server!" in srv, context
    for who, out in (("client", client), ("server", srv)):
        assert "DAPL RC SRQ Test Complete." in out, f"{who}\n{context}"
        assert_no_errors(out, who, context)


# A thousand connections through one server: libdaplofa holds one rdma_cm id per EP plus one
# per connect request not yet accepted (~1,100 with a burst of 100), within snicd's 4096 ids
# per control connection (CmService::kMaxIdsPerSession).
@pytest.mark.parametrize("conns,burst", [(1000, 10), (1000, 100)], ids=["burst10", "burst100"])
def test_dtestcm_a_thousand_connections(wire, prov, tmp_path, conns, burst):
    port = next_port()
    client, srv = client_and_server(
        wire, prov, tmp_path,
        ["dtestcm", "-P", prov.server, "-p", port, "-c", conns, "-b", burst, "-w"],
        ["dtestcm", "-P", prov.client, "-h", "127.0.0.1", "-p", port, "-c", conns, "-b", burst],
        sideband_ready)
    context = f"client:\n{client}\nserver:\n{srv}"
    assert f"ALL {conns} CONNECTED on Client!" in client, context
    for who, out in (("client", client), ("server", srv)):
        assert "DAPL Connection Test Complete." in out, f"{who}\n{context}"
        assert_no_errors(out, who, context)
    timing = re.search(r"Connections:.*", client)
    print(timing[0] if timing else "(no timing line)")


# ----------------------------------------------------------------- dapltest

@contextlib.contextmanager
def dapltest_server(wire, p: dt.Provider, tmp_path: Path):
    """`dapltest -T S`, ready once it says so; asked to quit (-T Q) at the end and killed if
    it has not ended. Yields (port, server)."""
    port = next_port()
    with server(p, tmp_path / "dapltest-server.out", ["dapltest", "-T", "S", "-D", p.server,
                                                     "-n", port],
                says("Service Point Ready")) as srv:
        yield port, srv
        q = dt.run(cmd(p, "dapltest", "-T", "Q", "-s", SERVER_IP, "-D", p.client, "-n", port),
                   p.env, timeout=120)
        assert q.returncode == 0, dt.shown(q)
        srv.wait(timeout=60)
        assert "Exiting" in srv.output(), srv.describe()
        assert_no_errors(srv.output(), "dapltest server", srv.describe())


def run_dapltest_client(wire, p: dt.Provider, srv: dt.Proc, args: list) -> str:
    res = dt.run(cmd(p, "dapltest", *args), p.env)
    out = res.stdout + res.stderr
    context = f"client:\n{dt.shown(res)}\nserver:\n{srv.describe()}\ndaemon:\n{wire[0].describe()}"
    assert res.returncode == 0, context
    assert "End of Work -- Client Exiting" in out, context
    assert_no_errors(out, "dapltest client", context)
    return out


TRANSACTIONS = {
    "SR": ["client", "SR", 4096, 2, "server", "SR", 4096, 2],
    "RR": ["client", "RR", 8192, 2, "server", "RR", 4096, 1],
    "RW": ["client", "RW", 4096, 2, "server", "RW", 8192, 1],
    # the man page's mixed example: two threads of two EPs, sends paired with -f
    "mixed": ["client", "RW", 4096, 1, "server", "RW", 2048, 4, "client", "SR", 1024, 4,
              "server", "SR", 4096, 2, "client", "SR", 1024, 3, "-f", "server", "SR", 2048, 1,
              "-f"],
}


@pytest.mark.parametrize("ops", TRANSACTIONS, ids=list(TRANSACTIONS))
def test_dapltest_transactions_validated(wire, prov, tmp_path, ops):
    """-T T with -V: the client and the server check every byte of every transfer."""
    # libdaplofa runs the mixed ops with one thread of two EPs: with two threads on a loaded
    # 2-core machine its IA sometimes stays in use after the threads' teardown
    # (dat_ia_close graceful: DAT_INVALID_STATE_IA_IN_USE, the async EVD still referenced)
    # and its abrupt close then crashes (SIGSEGV inside libdaplofa, under dat_ia_close; seen
    # in CI and with a busy loop on core 0, never with one thread). libdaplsnic runs two.
    threads = ["-t", "1" if prov.kind == "libdaplofa" else "2", "-w", 2] if ops == "mixed" else []
    with dapltest_server(wire, prov, tmp_path) as (port, srv):
        out = run_dapltest_client(wire, prov, srv,
                                  ["-T", "T", "-s", SERVER_IP, "-D", prov.client, "-n", port,
                                   "-i", 200, "-V", *threads, *TRANSACTIONS[ops]])
        assert "Total WQE" in out, out


@pytest.mark.parametrize("op,mode", [("RW", "b"), ("RR", "p"), ("RW", "p"), ("RR", "b")])
def test_dapltest_performance(wire, prov, tmp_path, op, mode):
    """-T P: the figures are printed, never judged; the run must complete."""
    with dapltest_server(wire, prov, tmp_path) as (port, srv):
        out = run_dapltest_client(wire, prov, srv,
                                  ["-T", "P", "-s", SERVER_IP, "-D", prov.client, "-n", port,
                                   "-i", 2000, "-m", mode, op, 4096, 1])
        raw = re.search(rf"^raw: {op}, .*$", out, re.M)
        assert raw, out
        print(raw[0])


# The cases run. queryinfo 13 and 15 pass an invalid CNO / EVD handle that libdat2's own
# dispatch dereferences (SIGSEGV in dat_cno_query / dat_evd_query before any provider is
# called): no provider can pass them. queryinfo 5 (CR query) ends "Result: UNSUPP" whatever
# the provider does.
FUNCTIONAL = {"hwconn": range(4), "endpoint": range(3), "pz": range(3), "mem": range(5),
              "connmgt": range(2), "queryinfo": [c for c in range(18) if c not in (5, 13, 15)]}
# What the stock provider does not implement: memory windows (queryinfo 9, an RMR query:
# dapls_ib_mw_alloc is "NOT IMPLEMENTED"), and a zero-length registration is refused with
# DAT_INSUFFICIENT_RESOURCES where dapltest wants DAT_LENGTH_ERROR (mem 2: dapl maps every
# ibv_reg_mr failure to ENOMEM).
NOT_IN_LIBDAPLOFA = {("queryinfo", 9), ("mem", 2)}


@pytest.mark.parametrize("feature", FUNCTIONAL)
def test_dapltest_functional(wire, prov, tmp_path, feature):
    cases = [f"case{c}" for c in FUNCTIONAL[feature]
             if not (prov.kind == "libdaplofa" and (feature, c) in NOT_IN_LIBDAPLOFA)]
    extra = ["-s", SERVER_IP] if feature == "connmgt" else []
    res = dt.run(cmd(prov, "dapltest", "-T", "F", "-D", prov.client, "-f", feature, *extra,
                     *cases), prov.env)
    out = res.stdout + res.stderr
    context = f"{dt.shown(res)}\ndaemon:\n{wire[0].describe()}"
    assert res.returncode == 0, context
    passes = out.count("Result: PASS")
    assert passes == len(cases), f"{passes} of {len(cases)} cases passed\n{context}"
    # dapltest's FFT prints "Result: PASS" even after a failed check: read the checks too.
    bad = [l for l in out.splitlines() if "Result: FAIL" in l or "failed in file" in l]
    assert not bad, f"{bad}\n{context}"
