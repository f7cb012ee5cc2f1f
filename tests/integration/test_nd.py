"""libndsnic, the NetworkDirect-shaped SPI (docs/ND.md): its rules, its example programs and
its pkg-config file.

The rules are the C++ programs of tests/nd, written against <ndsnic/ndspi.h>: each opens two
adapters in one process, by the addresses of the two ports of one wire daemon, connects them
to each other and prints one line per rule, "PASS <rule>" or "FAIL <rule>: <why>". Each rule
runs in a process of its own (a crash costs one rule, not its group) on each transport: the
process sees the pair's devices only (SNIC_DEVICES), RoCEv2's (<name>_0, <name>_1) or
iWARP's (<name>_iw0, <name>_iw1), which share the ports' addresses.

The examples (ndpingpong, ndrpingpong) run between the two ports too, server and client in
processes of their own, over each transport; the server says when it listens."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

import dapltools as dt
import snictest as st

SUBNET = "198.18.57"
SERVER, CLIENT = f"{SUBNET}.1", f"{SUBNET}.2"
ND_TESTS = st.BUILD / "tests" / "nd"
ND_EXAMPLES = st.BUILD / "nd" / "examples"
RULE_TIMEOUT = 300  # s; only ever cuts a hang short

# Program -> its rules, in the order it runs them (checked against the program's -l).
RULES = {
    "snic-nd-send-invalidate": [
        "nd_send_invalidate_peer_gets_invalidate_then_receive",
        "nd_send_invalidate_one_result_at_a_time_invalidate_first",
        "nd_send_invalidate_zero_byte_null_sgl",
        "nd_send_invalidate_window_can_be_bound_again",
        "nd_invalidate_local_window_then_bind_again",
        "nd_send_invalidate_write_through_invalidated_window_is_fatal",
        "nd_send_invalidate_read_through_invalidated_window_is_fatal",
        "nd_send_invalidate_silent_success_no_result",
        "nd_send_invalidate_silent_failure_gives_result",
        "nd_send_invalidate_read_fence_after_read_through_window",
        "nd_send_invalidate_solicit_event_satisfies_solicited_notify",
        "nd_send_invalidate_error_satisfies_solicited_notify",
        "nd_send_invalidate_not_connected_connection_invalid",
        "nd_send_invalidate_over_max_message_buffer_overflow",
        "nd_send_invalidate_send_queue_full_no_more_entries",
        "nd_send_invalidate_too_many_sges_data_overrun",
    ],
    "snic-nd-connection": [
        "nd_address_list_overflow_then_list",
        "nd_adapter_query_limits",
        "nd_connect_private_data_both_ways_and_addresses",
        "nd_reject_refuses_with_private_data",
        "nd_disconnect_notifies_peer_and_cancels_receives",
        "nd_notify_any_fires_on_result",
        "nd_cancel_completes_pending_requests",
        "nd_send_receive_sge_lists",
    ],
}
TRANSPORTS = {"roce": ("_0", "_1"), "iwarp": ("_iw0", "_iw1")}
CASES = [pytest.param(t, prog, rule, id=f"{t}-{rule}")
         for t in TRANSPORTS for prog, rules in RULES.items() for rule in rules]
_ports = iter(range(23000, 26000, 20))  # each process takes up to 20 ports


def program(path):
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built")
    return path


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args, binaries):
    with st.wire_daemon(tmp_path_factory, mem_args, "nd", SUBNET) as (d, sock_dir):
        yield d, sock_dir


def env_for(wire, transport: str) -> dict:
    d, sock_dir = wire
    st.poll(lambda: dt.cm_ids(d) == 0, "no rdma_cm ids left from earlier tests")
    env = dict(os.environ, SNIC_SOCKET_DIR=str(sock_dir),
               SNIC_DEVICES=",".join(d.name + s for s in TRANSPORTS[transport]))
    env.pop("LD_PRELOAD", None)
    env.update(st.sanitizer_env())
    return env


@pytest.mark.parametrize("prog", RULES)
def test_programs_list_the_rules_this_test_runs(prog):
    res = st.run([program(ND_TESTS / prog), "-l"], check=True)
    assert res.stdout.split() == RULES[prog]


@pytest.mark.parametrize("transport,prog,rule", CASES)
def test_rule(wire, transport, prog, rule):
    d = wire[0]
    cmd = [program(ND_TESTS / prog), "-a", SERVER, "-b", CLIENT, "-p", next(_ports),
           "-t", transport, "-r", rule]
    res = dt.run(cmd, env_for(wire, transport), timeout=RULE_TIMEOUT)
    context = f"{dt.shown(res)}\ndaemon:\n{d.describe()}"
    verdicts = [l for l in res.stdout.splitlines() if l.split(" ", 1)[0] in ("PASS", "FAIL")]
    assert verdicts, f"{prog} gave no verdict for {rule} (crashed?)\n{context}"
    assert verdicts == [f"PASS {rule}"], f"{verdicts[0]}\n{context}"
    assert res.returncode == 0, context
    assert d.running(), d.describe()


LATENCY = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)
BANDWIDTH = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s*$", re.M)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("example", ["ndpingpong", "ndrpingpong"])
def test_example(wire, tmp_path, transport, example):
    """The example between the two ports: the client's figures are perftest's (bytes,
    iterations, t_min, t_max, t_typical, t_avg in usec; ndrpingpong adds a Read bandwidth in
    MB/s), and both sides end with status 0."""
    d = wire[0]
    env = env_for(wire, transport)
    port = str(next(_ports))
    exe = program(ND_EXAMPLES / example)
    server = [exe, "-s", "-a", SERVER, "-p", port, "-n", "200", "-b", "256"]
    with dt.serving(tmp_path / "server.log", server, env,
                    lambda s: "listening on port" in s.output(), example) as srv:
        res = dt.run([exe, "-c", SERVER, "-a", CLIENT, "-p", port, "-n", "200", "-b", "256"], env,
                     timeout=RULE_TIMEOUT)
        context = f"{dt.shown(res)}\nserver:\n{srv.describe()}\ndaemon:\n{d.describe()}"
        assert res.returncode == 0, context
        assert srv.wait() == 0, context
    lat = LATENCY.search(res.stdout)
    assert lat, f"no latency line\n{context}"
    assert (int(lat[1]), int(lat[2])) == (256, 200), context
    t_min, t_max, t_typ, t_avg = (float(lat[i]) for i in range(3, 7))
    assert 0 < t_min <= t_typ <= t_max and t_min <= t_avg <= t_max, context
    if example == "ndrpingpong":
        bw = BANDWIDTH.search(res.stdout[res.stdout.index("RDMA Read"):])
        assert bw and float(bw[3]) > 0, f"no read bandwidth line\n{context}"
    print(res.stdout)


OUTSIDE = r"""
#include <ndsnic/ndspi.h>
#include <cstdio>
#include <vector>
int main() {
    INDProvider* p = nullptr;
    if (NdSnicOpenProvider(&p) != ND_SUCCESS) return 1;
    SIZE_T size = 0;
    if (p->QueryAddressList(nullptr, &size) != ND_BUFFER_OVERFLOW) return 2;
    std::vector<char> buf(size);
    auto* list = reinterpret_cast<SOCKET_ADDRESS_LIST*>(buf.data());
    if (p->QueryAddressList(list, &size) != ND_SUCCESS) return 3;
    std::printf("addresses %d\n", list->iAddressCount);
    p->Release();
    return 0;
}
"""


def test_pkg_config_builds_an_outside_program(wire, tmp_path):
    """`pkg-config --cflags --libs libndsnic` (the build's uninstalled .pc) builds a program
    outside the tree, which lists the daemon's two port addresses."""
    pc_dir = st.BUILD / "meson-uninstalled"
    assert (pc_dir / "libndsnic-uninstalled.pc").exists(), "no uninstalled libndsnic.pc"
    src = tmp_path / "outside.cc"
    src.write_text(OUTSIDE)
    penv = dict(os.environ, PKG_CONFIG_PATH=str(pc_dir))
    flags = st.run(["pkg-config", "--cflags", "--libs", "libndsnic"], env=penv, check=True)
    exe = tmp_path / "outside"
    st.run(["c++", "-std=c++20", str(src), "-o", str(exe), *flags.stdout.split()],
           check=True, timeout=120)
    libdirs = [f[2:] for f in flags.stdout.split() if f.startswith("-L")]
    env = env_for(wire, "roce")
    env["LD_LIBRARY_PATH"] = ":".join(libdirs + [str(st.BUILD / "libclient")])
    # Built without the sanitizers: a sanitized build's library needs its runtime first.
    res = st.run([exe], env=st.preload_sanitizer(env), check=True)
    assert res.stdout.strip() == "addresses 2", res.stdout
