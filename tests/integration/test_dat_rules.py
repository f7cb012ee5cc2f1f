"""The DAT 1.2 rules snic's uDAPL provider must honour exactly (docs/DAT.md), and
NetworkDirect's SendAndInvalidate through DAT's send with invalidate (DESIGN.md): the C
programs of tests/dat, written against <dat2/udat.h> and run through libdat2 over libdaplsnic,
each rule in a process of its own (so that a crash costs one rule, not its group), on each
transport. Each program opens two IAs in one process, on the two ports of one wire daemon
(snic-<name>_0 and snic-<name>_1 for RoCEv2, snic-<name>_iw0 and snic-<name>_iw1 for iWARP),
and connects them to each other; it prints one line per rule, "PASS <rule>" or
"FAIL <rule>: <why>".

The rules' verdicts are for libdaplsnic; they are skipped when, and only when, the provider is
not built. SNIC_DAT_RULES_PROVIDER=libdaplofa runs them over Debian's stock provider under
snic-run instead, to debug a program's mechanics (that provider implements neither
dat_ep_recv_query nor SRQ resize and low watermarks, and crashes on some of these rules)."""

from __future__ import annotations

import os

import pytest

import dapltools as dt
import snictest as st

SUBNET = "198.18.53"
DAT_TESTS = st.BUILD / "tests" / "dat"
PROVIDER = os.environ.get("SNIC_DAT_RULES_PROVIDER", "libdaplsnic")
RULE_TIMEOUT = 300  # s; only ever cuts a hang short

# Program -> its rules, in the order it runs them (checked against the program's -l).
RULES = {
    "snic-dat-srq-post-recv": [
        "srq_post_recv_fills_segments_in_order",
        "srq_post_recv_zero_segments_and_null_iov",
        "srq_post_recv_completes_in_send_order_per_connection",
        "srq_post_recv_valid_in_every_state",
        "srq_post_recv_segment_outside_lmr_invalid_parameter",
        "srq_post_recv_lmr_of_other_pz_protection_violation",
        "srq_post_recv_lmr_without_local_write_privileges_violation",
        "srq_post_recv_bad_handle_invalid_handle",
        "srq_post_recv_invalid_lmr_privileges_violation",
        "srq_only_connected_eps_dequeue",
        "srq_disconnect_completed_to_recv_evd_untaken_stay_on_srq",
    ],
    "snic-dat-srq-resize": [
        "srq_resize_under_traffic_loses_no_buffer",
        "srq_resize_invalid_state_when_outstanding_exceed_new_size",
        "srq_resize_invalid_state_below_low_watermark",
        "srq_set_lw_event_once_per_arming",
        "srq_query_outstanding_counts_unreaped_buffers",
        "srq_resize_counts_completions_not_yet_received",
        "srq_resize_below_outstanding_refused_under_traffic",
    ],
    "snic-dat-ep-recv-query": [
        "ep_recv_query_provider_attr_announces_support",
        "ep_recv_query_non_srq_allocated_when_posted",
        "ep_recv_query_srq_allocated_when_taken",
        "ep_recv_query_sampled_while_messages_arrive",
        "ep_recv_query_srq_sampled_while_messages_arrive",
        "ep_recv_query_exact_after_reset_and_recreate",
        "ep_recv_query_exact_after_reconnect_without_reset",
    ],
    "snic-dat-cr-accept": [
        "cr_accept_private_data_delivered_established_on_connect_evd",
        "cr_accept_private_data_over_max_invalid_parameter",
        "cr_accept_ep_from_cr_psp_provider_flag",
        "cr_accept_ep_from_cr_rsp",
        "cr_accept_unsatisfying_ep_fails_without_effect_then_other_ep",
        "cr_accept_unsatisfying_ep_fails_without_effect_then_reject",
        "cr_accept_destroys_cr",
        "cr_accept_completion_error_flushes_receives",
        "cr_accept_connected_ep_invalid_parameter",
    ],
    "snic-dat-evd-solicited": [
        "evd_wait_solicited_wait_ep_attr_wakes_only_for_solicited_or_error",
        "evd_wait_solicited_wait_post_flag_wakes_only_for_solicited_or_error",
        "evd_wait_solicited_wait_srq_ep_wakes_only_for_solicited",
        "cno_wait_solicited_wait_fires_only_for_solicited_or_error",
    ],
    "snic-dat-send-invalidate": [
        "send_invalidate_peer_sees_invalidate_then_receive",
        "send_invalidate_use_of_invalidated_window_is_fatal",
        "send_invalidate_silent_success_no_completion",
        "send_invalidate_read_fence_after_read_through_window",
        "send_invalidate_solicit_event_delivers_and_invalidates",
        "send_invalidate_not_connected_invalid_state",
        "send_invalidate_too_large_length_error",
        "send_invalidate_too_many_outstanding_insufficient_resources",
        "send_invalidate_too_many_segments_invalid_parameter",
    ],
}
# Each rule runs on both of a port's devices: RoCEv2 (<name>_N) and iWARP (<name>_iwN). The
# process sees the pair's devices only (SNIC_DEVICES), so that rdma_cm resolves the ports'
# addresses, which both devices share, to the pair's.
TRANSPORTS = {"roce": ("_0", "_1"), "iwarp": ("_iw0", "_iw1")}
CASES = [(prog, rule) for prog, rules in RULES.items() for rule in rules]
_ports = iter(range(19900, 22000, 20))  # each rule's process takes up to 20 qualifiers


def program(name: str):
    path = DAT_TESTS / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built (tests/dat needs libdapl-dev: scripts/setup.sh)")
    return path


@pytest.fixture(scope="module")
def wire(tmp_path_factory, mem_args, binaries):
    with st.wire_daemon(tmp_path_factory, mem_args, "datr", SUBNET) as (d, sock_dir):
        devices = [d.name + suffix for pair in TRANSPORTS.values() for suffix in pair]
        conf = dt.write_dat_conf(tmp_path_factory.mktemp("dat") / "dat.conf", devices,
                                 [f"{SUBNET}.1", f"{SUBNET}.2"] * len(TRANSPORTS))
        yield d, sock_dir, conf


# Each program hears the transport (-t): an iWARP request completes once TCP took it, not on
# the peer's acknowledgement, and the rules that need the peer's side wait for it there.
TRANSPORT_CASES = [pytest.param(t, prog, rule, id=f"{t}-{rule}")
                   for t in TRANSPORTS for prog, rule in CASES]


def provider_for(wire, transport: str) -> dt.Provider:
    d, sock_dir, conf = wire
    st.poll(lambda: dt.cm_ids(d) == 0, "no rdma_cm ids left from earlier tests")
    devices = [d.name + suffix for suffix in TRANSPORTS[transport]]
    p = dt.provider(PROVIDER, devices, sock_dir, conf)
    p.env["SNIC_DEVICES"] = ",".join(devices)
    return p


@pytest.mark.parametrize("prog", RULES)
def test_programs_list_the_rules_this_test_runs(prog):
    res = st.run([program(prog), "-l"], check=True)
    assert res.stdout.split() == RULES[prog]


@pytest.mark.parametrize("transport,prog,rule", TRANSPORT_CASES)
def test_rule(wire, transport, prog, rule):
    d = wire[0]
    prov = provider_for(wire, transport)
    cmd = [*prov.launcher, program(prog), "-a", prov.server, "-b", prov.client,
           "-p", next(_ports), "-t", transport, "-r", rule]
    res = dt.run(cmd, prov.env, timeout=RULE_TIMEOUT)
    context = f"{dt.shown(res)}\ndaemon:\n{d.describe()}"
    verdicts = [l for l in res.stdout.splitlines() if l.split(" ", 1)[0] in ("PASS", "FAIL")]
    for note in (l for l in res.stdout.splitlines() if l.startswith("note:")):
        print(note)
    assert verdicts, f"{prog} gave no verdict for {rule} (crashed?)\n{context}"
    assert verdicts == [f"PASS {rule}"], f"{verdicts[0]}\n{context}"
    assert res.returncode == 0, context
    assert d.running(), d.describe()
