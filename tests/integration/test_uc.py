"""UC QPs under snic-run, between the two ports of one snicd's virtual wire: rdma-core's
ibv_uc_pingpong, unmodified, with every byte received checked (-c), in one packet and in many
(multi-packet messages at a 1024-byte path MTU), polling and with completion events, and on one
port (loopback); perftest's UC runs (ib_write_bw, ib_send_lat,
ib_write_lat with -c UC) to completion with their result rows; and the packets on the wire
captured and judged: UC opcodes only, no acknowledgement, every ICRC right (the same checker
as the interop tests, tests/interop/check_roce_pcap.py).

The wire loses nothing here, so UC, which never sends a packet twice, must deliver everything;
the engines' handling of loss is checked in tests/unit/roce/test_uc.cc."""

from __future__ import annotations

import re

import pytest

import snictest as st
import test_perftest as pt
import test_rc as rc

CHECKER = st.REPO / "tests" / "interop" / "check_roce_pcap.py"
CAPTURED_PORT = "net_ring_wire0"  # dpdk-dumpcap's name for port wire0 of the virtual wire


@pytest.fixture(scope="module")
def wire_daemon(tmp_path_factory, mem_args):
    st.require_tool("ibv_uc_pingpong", "ibverbs-utils")
    for tool in ("ib_write_bw", "ib_send_lat", "ib_write_lat"):
        st.require_tool(tool, "perftest")
    # Not EAL lcore 0: dpdk-dumpcap (the capture test) is lcore 0 of its own (st.dpdk_dumpcap).
    with st.wire_daemon(tmp_path_factory, mem_args, "uc", "198.18.47",
                        cores=("--lcores", "1@0")) as wire:
        yield wire


@pytest.mark.parametrize("size", [1, 65536])
def test_uc_pingpong_over_the_wire(wire_daemon, size):
    d, sock_dir = wire_daemon
    rc.pingpong("ibv_uc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                ["-s", str(size), "-n", "200" if size == 1 else "50"])
    assert d.running(), d.describe()


def test_uc_pingpong_with_completion_events(wire_daemon):
    d, sock_dir = wire_daemon
    rc.pingpong("ibv_uc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                ["-s", "4096", "-n", "100", "-e"])


def test_uc_pingpong_loopback_on_one_port(wire_daemon):
    """Both QPs on one port: the same engines, without the wire."""
    d, sock_dir = wire_daemon
    rc.pingpong("ibv_uc_pingpong", f"{d.name}_0", f"{d.name}_0", sock_dir,
                ["-s", "4096", "-n", "100"])


# Each tool once, multi-packet messages, both ways of posting (perftest's ibv_wr_* default and
# --use_old_post_send); a few seconds each, most of it perftest's own set-up.
@pytest.mark.parametrize("tool,args", [
    ("ib_write_bw", ["-s", "65536", "-n", "300"]),
    ("ib_send_lat", ["-s", "4096", "-n", "100", "--use_old_post_send"]),
    ("ib_write_lat", ["-s", "4096", "-n", "100"]),
])
def test_perftest_uc_completes_under_snic_run(wire_daemon, tool, args):
    d, sock_dir = wire_daemon
    out = pt.perftest(d, sock_dir, tool, "-c", "UC", *args)
    assert re.search(r"Connection type\s*:\s*UC", out), out
    rows = pt.ROW.findall(out.split("#bytes", 1)[-1])
    assert rows, f"no result row in {tool}'s output:\n{out}"
    size, iters = int(rows[0][0]), int(rows[0][1])
    assert size == int(args[args.index("-s") + 1])
    assert iters == int(args[args.index("-n") + 1])
    assert all(float(v) > 0 for v in rows[0][2:]), out


def test_uc_traffic_on_the_wire_is_uc_and_decodes(wire_daemon, mem_args, tmp_path):
    """Pingpongs of multi-packet and one-packet messages while dpdk-dumpcap captures port
    wire0 (every frame of the wire crosses it): every RoCEv2 frame carries a UC opcode (no RC
    ACK ever comes back), FIRST, MIDDLE, LAST and ONLY all show, Wireshark dissects every
    frame without complaint and every ICRC recomputes (check_roce_pcap.py)."""
    st.require_tool("tshark", "tshark")
    st.require_tool("dpdk-dumpcap", "dpdk")
    if "--no-huge" in mem_args:
        pytest.skip("dpdk-dumpcap attaches as a secondary process, which needs hugepages")
    d, sock_dir = wire_daemon
    with st.dpdk_dumpcap(d, CAPTURED_PORT, tmp_path / "uc.pcap", tmp_path / "dumpcap.log",
                         "-P", "-f", "udp port 4791") as cap:
        for size in ("2500", "100"):
            rc.pingpong("ibv_uc_pingpong", f"{d.name}_0", f"{d.name}_1", sock_dir,
                        ["-s", size, "-n", "10"])
    assert cap.received > 0 and cap.dropped == 0, cap
    # The checker needs Debian's scapy: /usr/bin/python3, as tests/interop runs it.
    res = st.run(["/usr/bin/python3", str(CHECKER), str(cap.pcap)], timeout=300)
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
    m = re.search(r"ok: (\d+) frames, (\d+) RoCEv2, (\d+) ICRCs recomputed and equal; "
                  r"opcodes (.*)", res.stdout)
    assert m, res.stdout
    assert int(m[1]) == int(m[2]) == int(m[3]) == cap.received, (res.stdout, cap)
    opcodes = {int(op, 16) for op in m[4].split(", ")}
    # UC SEND First, Middle, Last and Only (0x20, 0x21, 0x22, 0x24), and nothing else.
    assert opcodes == {0x20, 0x21, 0x22, 0x24}, res.stdout
