"""uDAPL over iWARP: Debian's dtest, dtestx and dtestsrq (dapl2-utils, unmodified) over the
project's libdaplsnic, both IAs on the iWARP devices of one daemon's virtual wire: the server
on <name>_iw0 (SUBNET.1), the client on <name>_iw1 (SUBNET.2). SNIC_DEVICES shows each
process the iWARP devices only, so that rdma_cm resolves the ports' addresses (which the RoCE
devices share) to them. The daemon's iWARP counters say the connections were iWARP's.

As in test_dapl.py: the tools exit 0 even when they fail, so their PASSED/FAILED output is
read; dtest and dtestx exchange the server's address over a kernel TCP socket (port 15828, in
a namespace of this module's own); readiness is polled, never slept for."""

from __future__ import annotations

import re

import pytest

import dapltools as dt
import snictest as st
import test_dapl as td
import test_iwarp as iw

SUBNET = "198.18.54"
SERVER_IP, CLIENT_IP = f"{SUBNET}.1", f"{SUBNET}.2"
TOOLS = ("dtest", "dtestx", "dtestsrq")

_ports = iter(range(20800, 21000))


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args, binaries, netns):
    for tool in TOOLS:
        st.require_tool(tool, "dapl2-utils")
    with st.wire_daemon(tmp_path_factory, mem_args, "iwdapl", SUBNET) as (d, sock_dir):
        devices = [f"{d.name}_iw0", f"{d.name}_iw1"]
        confs = tmp_path_factory.mktemp("dat")
        conf = dt.write_dat_conf(confs / "dat.conf", devices, [SERVER_IP, CLIENT_IP])
        client_conf = dt.write_client_dat_conf(confs / "client-dat.conf", devices,
                                               [SERVER_IP, CLIENT_IP])
        yield d, sock_dir, devices, (conf, client_conf), netns


@pytest.fixture
def prov(wire) -> dt.Provider:
    d, sock_dir, devices, (conf, client_conf), ns = wire
    p = dt.provider("libdaplsnic", devices, sock_dir, conf, ns, client_conf)
    for env in (p.env, p.client_env):
        env["SNIC_DEVICES"] = ",".join(devices)
    return p


@pytest.fixture(autouse=True)
def quiet_daemon(wire):
    d, ns = wire[0], wire[4]
    st.poll(lambda: dt.cm_ids(d) == 0, "no rdma_cm ids left from earlier tests")
    st.poll(lambda: not dt.tcp_listening(td.SIDEBAND_PORT, ns),
            f"kernel TCP port {td.SIDEBAND_PORT} free")
    yield
    assert d.running(), d.describe()


@pytest.fixture
def iwarp_connections(wire):
    """Checks, after the test, that its connections were iWARP's: as many MPA replies as
    requests, at least `want[0]` of them, and no MPA error. The test sets want[0]."""
    d = wire[0]
    before = iw.iwarp_counters(d)
    want = [1]
    yield want
    after = iw.iwarp_counters(d)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    # iw_replies counts the MPA replies each side saw or sent: two per connection.
    assert delta.get("iw_replies", 0) >= 2 * want[0], (before, after)
    assert delta.get("iw_mpa_errors", 0) == 0, delta


@pytest.mark.parametrize("mode", [[], ["-w"], ["-p"]], ids=["send-rdma", "rdma-write-only",
                                                             "polling"])
def test_dtest_over_iwarp(wire, prov, tmp_path, mode, iwarp_connections):
    client, srv = td.client_and_server(wire, prov, tmp_path, ["dtest", "-P", prov.server, *mode],
                                       ["dtest", "-P", prov.client, "-h", "127.0.0.1", *mode],
                                       td.sideband_ready)
    context = f"client:\n{client}\nserver:\n{srv}"
    for who, out in (("client", client), ("server", srv)):
        assert "DAPL Test Complete. PASSED" in out, f"{who} did not pass\n{context}"
        assert "FAILED" not in out, context
    assert re.search(rf"Query EP: LOCAL addr {re.escape(CLIENT_IP)}\b", client), context
    assert re.search(rf"Query EP: REMOTE addr {re.escape(SERVER_IP)}\b", client), context


def test_dtestx_write_immediate_and_atomics_over_iwarp(wire, prov, tmp_path, iwarp_connections):
    """Write with Immediate (RFC 7306's Immediate Data) and the atomics (RFC 7306's Atomic
    Operations) through libdaplsnic's IB extensions."""
    client, srv = td.client_and_server(wire, prov, tmp_path, ["dtestx", "-P", prov.server],
                                       ["dtestx", "-P", prov.client, "-h", "127.0.0.1"],
                                       td.sideband_ready)
    context = f"client:\n{client}\nserver:\n{srv}"
    for who, out in (("client", client), ("server", srv)):
        for line in ("CMP_SWAP test - PASSED", "FETCH_ADD test - PASSED",
                     "IB extension test - immed/atomic test PASSED"):
            assert line in out, f"{who}: no {line!r}\n{context}"
        assert "Skipping" not in out and "not supported" not in out, f"{who}\n{context}"
    assert "RDMA_WRITE_WITH_IMMEDIATE_DATA test - PASSED" in client, context


def test_dtestsrq_four_connections_share_one_srq_over_iwarp(wire, prov, tmp_path,
                                                            iwarp_connections):
    iwarp_connections[0] = 4
    port = next(_ports)
    client, srv = td.client_and_server(
        wire, prov, tmp_path, ["dtestsrq", "-P", prov.server, "-p", port, "-c", 4, "-t", 10],
        ["dtestsrq", "-P", prov.client, "-h", SERVER_IP, "-p", port, "-c", 4, "-t", 10],
        td.says("ready on port"))
    context = f"client:\n{client}\nserver:\n{srv}"
    assert "ALL 4 CONNECTED on client!" in client, context
    assert "ALL 4 CONNECTED on server!" in srv, context
    for who, out in (("client", client), ("server", srv)):
        assert "DAPL RC SRQ Test Complete." in out, f"{who}\n{context}"
        td.assert_no_errors(out, who, context)
