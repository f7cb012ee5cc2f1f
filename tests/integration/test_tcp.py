"""snic's own TCP against the Linux kernel's, over a veth into a namespace: snicd's
tcp-send and tcp-sink self-tests (daemon/tcp_selftest.h) against tcp_peer.py, byte-exact
(CRC-32 and length both ways); with loss, reordering and duplication injected (snic's own
fault injection; netem on the kernel side where the kernel has it); a capture judged by
tshark; RST and half-close behaviour; a SYN flood while a connection moves data; path MTU
discovery through a kernel router whose next hop has a smaller MTU.

SNIC_TCP_BYTES sets the bytes of the clean transfers (64 MiB by default;
scripts/tcp-bench.sh runs 1 GiB and compares with kernel-to-kernel)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import snictest as st

HOST_IP = "198.18.7.1"  # the kernel, in the namespace
SNIC_IP = "198.18.7.2"
PEER = Path(__file__).resolve().parent / "tcp_peer.py"
BYTES = int(os.environ.get("SNIC_TCP_BYTES", str(64 << 20)))
FAULT_BYTES = 8 << 20
PY = "/usr/bin/python3"


def setup_ns(veth_ns):
    """The namespace's end without transmit checksum offload: af_packet hands snicd the
    kernel's segments as the kernel left them, and a CHECKSUM_PARTIAL segment's checksum is
    not filled in (snic would count it as bad_checksum, as a NIC's wire never shows)."""
    v = veth_ns(f"{HOST_IP}/24")
    st.run(["ip", "netns", "exec", v.ns, "ethtool", "-K", v.peer, "tx", "off"], check=True)
    return v


def snicd(daemons, mem_args, v, selftest: str, port_extra: str = "", args: tuple = ()):
    name = st.unique("tcp", maxlen=24)
    return daemons(name, ["-l", "0", "--no-pci",
                          f"--vdev=net_af_packet0,iface={v.host},framecnt=4096", *mem_args],
                   ["--port", f"0,ip={SNIC_IP}/24{port_extra}", "--idle-backoff", "20", *args,
                    "--selftest", selftest])


def in_ns(v, *args, **kw):
    return st.run(["ip", "netns", "exec", v.ns, PY, str(PEER), *args], **kw)


def start_in_ns(v, *args, stdin=subprocess.DEVNULL, ns: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", ns or v.ns, PY, str(PEER), *args], stdin=stdin,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kernel_server(v, count: int = 1, ns: str | None = None) -> subprocess.Popen:
    srv = start_in_ns(v, "server", "5001", "--count", str(count), ns=ns)
    line = srv.stdout.readline()  # listening: a readiness line, not a sleep
    assert line.strip() == "listening", f"the kernel server did not start: {line}{srv.stderr.read()}"
    return srv


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{proc.args} did not finish\n{out}\n{err}")
    return out, err


def counters(out: str, port: int, what: str) -> dict[str, int]:
    m = re.search(rf"^snicd: port {port} {what}:(.*)$", out, re.M)
    assert m, out[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[1])}


def wait_ready(d):
    d.wait_ready()
    return d


SEND = re.compile(r"^selftest tcp-send: (\S+) bytes (\d+) crc32 ([0-9a-f]{8}) \(peer agrees\) "
                  r"in ([\d.]+) s = ([\d.]+) MB/s ; segments out (\d+) in (\d+) ; retransmits (\d+) "
                  r"\(fast (\d+), timeouts (\d+), probes (\d+)\)", re.M)


def run_send(daemons, mem_args, v, nbytes: int, port_extra: str = "", dst: str = HOST_IP,
             ns: str | None = None):
    """snic connects to the kernel server (at `dst`, in namespace `ns`: v's by default) and
    sends nbytes; returns (snicd stdout, its result match, the kernel server's JSON line)."""
    srv = kernel_server(v, ns=ns)
    try:
        d = snicd(daemons, mem_args, v, f"tcp-send,dst={dst}:5001,bytes={nbytes}", port_extra)
        rc = d.wait(timeout=180)
        out, err = finish(srv, timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    assert rc == 0, d.describe() + "\nkernel server: " + out + err
    m = SEND.search(d.stdout())
    assert m, d.describe()
    kernel = json.loads(out.strip().splitlines()[-1])
    assert kernel["bytes"] == nbytes and kernel["crc32"] == m[3], (kernel, m[0])
    return d.stdout(), m, kernel


SINK = re.compile(r" ; from (\S+) bytes (\d+) crc32 ([0-9a-f]{8}) fin (\w+) answered (\w+) "
                  r"ended (\w+) in ([\d.]+) s = ([\d.]+) MB/s")


def run_sink(daemons, mem_args, v, nbytes: int, port_extra: str = ""):
    """The kernel client sends nbytes to snic's listener and checks snic's answer; returns
    (snicd stdout, snic's per-connection match, the kernel client's JSON)."""
    d = wait_ready(snicd(daemons, mem_args, v, "tcp-sink,port=5002", port_extra))
    res = in_ns(v, "client", SNIC_IP, "5002", str(nbytes), timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr + d.describe()
    kernel = json.loads(res.stdout.strip().splitlines()[-1])
    assert kernel["answer"] == f"{nbytes} {kernel['crc32']}", kernel
    assert d.wait(timeout=60) == 0, d.describe()
    m = SINK.search(d.stdout())
    assert m, d.describe()
    assert (int(m[2]), m[3], m[4], m[5], m[6]) == (nbytes, kernel["crc32"], "yes", "yes", "closed")
    return d.stdout(), m, kernel


def test_snic_client_to_kernel_server(daemons, veth_ns, mem_args):
    v = setup_ns(veth_ns)
    out, m, kernel = run_send(daemons, mem_args, v, BYTES)
    print(f"snic -> kernel: {m[5]} MB/s, snic retransmits {m[8]}, "
          f"kernel retransmits {kernel['total_retrans']}")
    # Nothing was lost on the way to the kernel: no fast retransmit, no timeout. A tail-loss
    # probe may go when the kernel's ACK is late (more than 2 * SRTT, at least 1 ms, on a
    # loaded machine): its copy of the last segment is the only retransmission allowed.
    assert int(m[9]) == 0 and int(m[10]) == 0 and int(m[8]) == int(m[11]), m[0]
    tcp = counters(out, 0, "tcp")
    assert tcp.get("active_opens") == 1 and tcp.get("established") == 1, tcp
    assert tcp.get("bad_segment", 0) == 0, tcp


def test_kernel_client_to_snic_listener(daemons, veth_ns, mem_args):
    v = setup_ns(veth_ns)
    out, m, kernel = run_sink(daemons, mem_args, v, BYTES)
    print(f"kernel -> snic: {m[8]} MB/s, kernel retransmits {kernel['total_retrans']}")
    tcp = counters(out, 0, "tcp")
    assert tcp.get("passive_opens") == 1 and tcp.get("accepted") == 1, tcp
    assert tcp.get("ended_closed") == 1 and tcp.get("bad_segment", 0) == 0, tcp


# snic's fault injection on its port, both directions: 1% loss, 1% reordering, 0.1% duplication.
FAULTS = ",loss=0.01,reorder=0.01,dup=0.001,seed=7"


def test_transfers_survive_loss_reordering_and_duplication(daemons, veth_ns, mem_args):
    v = setup_ns(veth_ns)
    out, m, kernel = run_send(daemons, mem_args, v, FAULT_BYTES, FAULTS)
    port = counters(out, 0, r"\(net_af_packet0\)")
    assert port.get("tx_fault_dropped", 0) > 0 and port.get("rx_fault_dropped", 0) > 0, port
    assert int(m[8]) > 0, "loss was injected on snic's transmit side: it must have retransmitted"
    print(f"snic -> kernel with faults: {m[5]} MB/s, snic retransmits {m[8]} "
          f"(fast {m[9]}, timeouts {m[10]}), kernel retransmits {kernel['total_retrans']}")
    out, m, kernel = run_sink(daemons, mem_args, v, FAULT_BYTES, FAULTS)
    port = counters(out, 0, r"\(net_af_packet0\)")
    assert port.get("rx_fault_dropped", 0) > 0, port
    assert kernel["total_retrans"] > 0, kernel
    print(f"kernel -> snic with faults: {m[8]} MB/s, kernel retransmits {kernel['total_retrans']}")


def netem_available(v) -> bool:
    res = st.run(["ip", "netns", "exec", v.ns, "tc", "qdisc", "add", "dev", v.peer, "root",
                  "netem", "loss", "1%", "reorder", "1%", "duplicate", "0.1%", "delay", "1ms"])
    return res.returncode == 0


def test_transfers_through_kernel_netem(daemons, veth_ns, mem_args):
    v = setup_ns(veth_ns)
    if not netem_available(v):
        pytest.skip("this kernel has no netem (CONFIG_NET_SCH_NETEM): snic's own faults cover it")
    out, m, kernel = run_send(daemons, mem_args, v, FAULT_BYTES)
    print(f"snic -> kernel through netem: {m[5]} MB/s, snic retransmits {m[8]}")
    out, m, kernel = run_sink(daemons, mem_args, v, FAULT_BYTES)
    assert kernel["total_retrans"] > 0, kernel


def tshark_analysis(pcap: Path) -> dict:
    """Counts of tshark's TCP analysis flags and of checksum and malformed errors, with
    checksum validation on."""
    res = st.run(["tshark", "-r", str(pcap), "-o", "tcp.check_checksum:TRUE",
                  "-o", "ip.check_checksum:TRUE", "-T", "fields", "-e", "ip.src",
                  "-e", "tcp.analysis.retransmission", "-e", "tcp.analysis.fast_retransmission",
                  "-e", "_ws.malformed", "-e", "tcp.checksum.status", "-e", "ip.checksum.status",
                  "-e", "tcp.checksum", "-e", "tcp.analysis.out_of_order"], timeout=120)
    assert res.returncode == 0, res.stderr
    c = {"frames": 0, "malformed": 0, "bad_checksum": 0, "kernel_checksum_ffff": 0,
         "retrans_from_snic": 0, "retrans_from_kernel": 0}
    for line in res.stdout.splitlines():
        f = (line.split("\t") + [""] * 8)[:8]
        if not f[0]:
            continue
        c["frames"] += 1
        if f[3]:
            c["malformed"] += 1
        if f[4] == "0" or f[5] == "0":  # 0: bad, 1: good, 2: unverified
            # Linux folds a zero sum to 0xffff now and then (the same number in one's
            # complement); tshark flags it. Only the kernel does; snic's must be clean.
            if f[0] != SNIC_IP and f[6].lower() == "0xffff":
                c["kernel_checksum_ffff"] += 1
            else:
                c["bad_checksum"] += 1
        # A resent segment whose first copy never reached the wire (snic's own fault
        # injection drops it before transmit) fills a gap: tshark calls it out-of-order when
        # it comes within an RTT, a retransmission after. Both count as resent here.
        if f[1] or f[2] or f[7]:
            c["retrans_from_snic" if f[0] == SNIC_IP else "retrans_from_kernel"] += 1
    return c


def capture(v, tmp_path: Path, name: str):
    """dumpcap on the namespace's veth end; returns (process, pcap path) once it captures."""
    pcap = tmp_path / f"{name}.pcapng"
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen(["ip", "netns", "exec", v.ns, "dumpcap", "-q", "-i", v.peer, "-s",
                             "96", "-w", str(pcap)], stdout=subprocess.DEVNULL,
                            stderr=open(log, "w"))
    st.poll(lambda: pcap.exists() and pcap.stat().st_size > 0 or None, "dumpcap to start",
            tries=100)
    return proc, pcap


def stop_capture(proc):
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_tshark_finds_no_malformed_segment_and_no_bad_checksum(daemons, veth_ns, mem_args,
                                                               tmp_path):
    if not st.run(["which", "dumpcap"]).returncode == 0:
        pytest.skip("dumpcap (tshark's capture tool) is not installed")
    v = setup_ns(veth_ns)
    proc, pcap = capture(v, tmp_path, "clean")
    try:
        _, sent, _ = run_send(daemons, mem_args, v, 4 << 20)
        run_sink(daemons, mem_args, v, 4 << 20)
    finally:
        stop_capture(proc)
    clean = tshark_analysis(pcap)
    print("clean capture:", clean)
    assert clean["frames"] > 5000, clean
    assert clean["malformed"] == 0 and clean["bad_checksum"] == 0, clean
    # No loss injected: snic's only retransmissions are tail-loss probes after a late ACK.
    assert clean["retrans_from_snic"] <= int(sent[11]), (clean, sent[0])

    proc, pcap = capture(v, tmp_path, "faults")
    try:
        out, m, _ = run_send(daemons, mem_args, v, 4 << 20, ",tx-loss=0.01,seed=3")
    finally:
        stop_capture(proc)
    lossy = tshark_analysis(pcap)
    print("capture with 1% of snic's frames dropped:", lossy)
    assert lossy["malformed"] == 0 and lossy["bad_checksum"] == 0, lossy
    # Retransmissions only where loss was injected: snic's are what it dropped itself.
    dropped = counters(out, 0, r"\(net_af_packet0\)")["tx_fault_dropped"]
    assert 0 < lossy["retrans_from_snic"] <= int(m[8]), (lossy, m[0])
    assert dropped > 0


def test_rst_half_close_and_abort_behave_as_the_kernel_expects(daemons, veth_ns, mem_args):
    v = setup_ns(veth_ns)
    d = wait_ready(snicd(daemons, mem_args, v, "tcp-sink,port=5002,count=3"))
    # A closed port: the kernel's connect() is refused by snic's RST.
    res = in_ns(v, "connect", SNIC_IP, "5003", check=True)
    assert json.loads(res.stdout)["errno"] == 111, res.stdout  # ECONNREFUSED

    # The kernel closes first (shutdown(SHUT_WR)): snic answers after the FIN and closes;
    # the kernel, which closed first, holds TIME-WAIT.
    res = in_ns(v, "client", SNIC_IP, "5002", "100000", "--close", "half", check=True)
    k = json.loads(res.stdout)
    assert k["answer"] == f"100000 {k['crc32']}", k
    tw = st.run(["ip", "netns", "exec", v.ns, "ss", "-tan", "state", "time-wait"], check=True)
    assert f"{SNIC_IP}:5002" in tw.stdout, tw.stdout

    # SO_LINGER 0: an RST instead of a FIN. snic's connection ends as reset.
    res = in_ns(v, "client", SNIC_IP, "5002", "50000", "--close", "abort", check=True)

    # A full close(): snic's answer meets the kernel's RST, which in LAST-ACK ends the
    # connection as closed (RFC 9293 §3.10.7.4: CLOSING, LAST-ACK, TIME-WAIT).
    res = in_ns(v, "client", SNIC_IP, "5002", "30000", "--close", "full", check=True)

    assert d.wait(timeout=60) == 0, d.describe()
    out = d.stdout()
    ended = [m.groups() for m in SINK.finditer(out)]
    assert len(ended) == 3, out[-2000:]
    assert ended[0][1:6] == ("100000", k["crc32"], "yes", "yes", "closed"), ended[0]
    assert ended[1][5] == "reset" and ended[1][3] == "no", ended[1]
    assert ended[2][1:6] == ("30000", ended[2][2], "yes", "yes", "closed"), ended[2]
    tcp = counters(out, 0, "tcp")
    assert tcp["no_listener"] >= 1 and tcp["rst_sent"] >= 1, tcp
    assert tcp["ended_reset"] == 1 and tcp["ended_closed"] == 2, tcp


def test_snicctl_tcp_and_telemetry_show_a_live_connection(daemons, veth_ns, mem_args):
    v = setup_ns(veth_ns)
    d = wait_ready(snicd(daemons, mem_args, v, "tcp-sink,port=5002"))
    cl = start_in_ns(v, "client", SNIC_IP, "5002", "200000", "--hold", stdin=subprocess.PIPE)
    try:
        assert cl.stdout.readline().strip() == "holding"

        def established():
            res = st.run([st.SNICCTL, "-s", d.ctrl, "tcp"])
            return res.stdout if res.returncode == 0 and "ESTABLISHED" in res.stdout else None

        text = st.poll(established, "snicctl tcp to show the connection", tries=100)
        assert re.search(rf"^port 0 LISTEN local {SNIC_IP}:5002 backlog \d+ queued 0$", text,
                         re.M), text
        row = re.search(rf"^port 0 ESTABLISHED local {SNIC_IP}:5002 remote {HOST_IP}:\d+ mss 1448 "
                        r"cwnd (\d+) ssthresh \d+ srtt [\d.]+ rttvar [\d.]+ rto [\d.]+ "
                        r"retransmits \d+ fast \d+ timeouts \d+ bytes_sent 0 bytes_acked 0 "
                        r"bytes_received (\d+) .* sack ts$", text, re.M)
        assert row and int(row[2]) >= 65536, text
        stats, conns = st.telemetry_query(d.prefix, "/snic/tcp_stats,0", "/snic/tcp_conns,0")
        s = stats["/snic/tcp_stats"]
        assert s["connections"] == 1 and s["listeners"] == 1 and s["accepted"] == 1, s
        assert s["memory_bound"] > 0 and s["memory_bytes"] > 0, s
        rows = conns["/snic/tcp_conns"]
        live = [r for k, r in rows.items() if r["state"] == "ESTABLISHED"]
        assert len(live) == 1 and "srtt_us" in live[0] and "retransmits" in live[0], rows
        cl.stdin.write("go\n")
        cl.stdin.flush()
        out, err = finish(cl, timeout=60)
        assert json.loads(out.strip().splitlines()[-1])["answer"].startswith("200000 "), out + err
    finally:
        if cl.poll() is None:
            cl.kill()
            cl.wait()
    assert d.wait(timeout=60) == 0, d.describe()


def test_windows_are_sized_from_the_link_and_tcp_window_rtt(daemons, veth_ns, mem_args):
    """--tcp-window-rtt 2000 on the veth's 10 Gb/s (as af_packet reports it): 2.5 MB, twice,
    so 8 MiB buffers; the kernel sees the whole window offered (the scale in snic's SYN-ACK),
    and a transfer through it is byte-exact."""
    v = setup_ns(veth_ns)
    d = wait_ready(snicd(daemons, mem_args, v, "tcp-sink,port=5002",
                         args=("--tcp-window-rtt", "2000")))
    window = 8 << 20
    assert re.search(r"port 0: TCP buffers 8192 KiB: 10000 Mb/s x 2000 us, twice",
                     d.stdout() + d.stderr()), d.describe()
    stats = st.telemetry_query(d.prefix, "/snic/tcp_stats,0")[0]["/snic/tcp_stats"]
    assert (stats["send_buffer"], stats["recv_window"]) == (window, window), stats
    cl = start_in_ns(v, "client", SNIC_IP, "5002", str(16 << 20), "--hold", stdin=subprocess.PIPE)
    try:
        assert cl.stdout.readline().strip() == "holding"

        def row():
            res = st.run([st.SNICCTL, "-s", d.ctrl, "tcp"])
            return re.search(r"^port 0 ESTABLISHED .* snd_wnd (\d+) rcv_wnd (\d+)", res.stdout,
                             re.M) if res.returncode == 0 else None

        m = st.poll(row, "snicctl tcp to show the connection", tries=100)
        assert int(m[2]) == window, m[0]
        # The kernel's view of snic's window: ss reports what the peer offered as snd_wnd
        # where the kernel has it (6.2 on); else the scale it agreed to.
        ss = st.run(["ip", "netns", "exec", v.ns, "ss", "-tinH", "dst", SNIC_IP]).stdout
        ws = re.search(r"wscale:(\d+),(\d+)", ss)
        assert ws and int(ws[1]) == 8, ss  # snic's scale: 8 MiB >> 8 fits 16 bits
        cl.stdin.write("go\n")
        cl.stdin.flush()
        out, err = finish(cl, timeout=60)
        assert json.loads(out.strip().splitlines()[-1])["answer"].startswith(f"{16 << 20} "), \
            out + err
    finally:
        if cl.poll() is None:
            cl.kill()
            cl.wait()
    assert d.wait(timeout=60) == 0, d.describe()


FLOOD = r"""
import random, sys
from scapy.all import Ether, IP, TCP, sendp, conf
conf.verb = 0
iface, mac, dst, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rnd = random.Random(1)
frames = []
for i in range(n):
    # Spoofed sources on the subnet (.10 ... .250) and the kernel's own address.
    src = "198.18.7.%d" % (1 if i % 4 == 0 else rnd.randint(10, 250))
    frames.append(Ether(dst=mac) / IP(src=src, dst=dst) /
                  TCP(sport=rnd.randint(1024, 65535), dport=5002, flags="S",
                      seq=rnd.getrandbits(32)))
sendp(frames, iface=iface)
print("flooded", n, flush=True)
"""


def test_a_syn_flood_leaves_established_connections_serving(daemons, veth_ns, mem_args):
    v = setup_ns(veth_ns)
    d = wait_ready(snicd(daemons, mem_args, v, "tcp-sink,port=5002,count=13"))
    mac = d.wait_ready().ports[0].mac
    # An established connection, mid-transfer when the flood starts.
    cl = start_in_ns(v, "client", SNIC_IP, "5002", str(32 << 20), "--hold", stdin=subprocess.PIPE)
    try:
        assert cl.stdout.readline().strip() == "holding"
        flood = st.run(["ip", "netns", "exec", v.ns, PY, "-c", FLOOD, v.peer, mac, SNIC_IP, "3000"],
                       timeout=120)
        assert flood.returncode == 0 and "flooded 3000" in flood.stdout, flood.stderr
        (stats,) = st.telemetry_query(d.prefix, "/snic/tcp_stats,0")
        s = stats["/snic/tcp_stats"]
        print("after the flood:", {k: s[k] for k in ("syn_accepted", "syn_backlog_full",
                                                    "syn_cookies_sent", "syn_peer_limit",
                                                    "syn_received", "memory_bytes",
                                                    "memory_bound")})
        assert s["syn_backlog_full"] + s["syn_peer_limit"] > 0, s
        # Past the backlog the SYNs were answered with cookies, not dropped.
        assert s["syn_cookies_sent"] > 0, s
        assert s["syn_received"] <= 64, s
        assert s["memory_bytes"] <= s["memory_bound"], s
        # The flood's half-open connections hold the backlog for 15 s: new clients meanwhile
        # get through by cookie, each at its first SYN.
        for i in range(12):
            new = start_in_ns(v, "client", SNIC_IP, "5002", "4096")
            # Without cookies its SYNs (at 0, 1, 3, 7 s) would all be dropped.
            out, err = finish(new, timeout=5)
            k = json.loads(out.strip().splitlines()[-1])
            assert k["answer"] == f"4096 {k['crc32']}", (i, k, err)
        (stats,) = st.telemetry_query(d.prefix, "/snic/tcp_stats,0")
        s = stats["/snic/tcp_stats"]
        assert s["syn_cookies_accepted"] >= 12, s
        cl.stdin.write("go\n")
        cl.stdin.flush()
        out, err = finish(cl, timeout=120)
        k = json.loads(out.strip().splitlines()[-1])
        assert k["answer"] == f"{32 << 20} {k['crc32']}", k
    finally:
        if cl.poll() is None:
            cl.kill()
            cl.wait()
    assert d.wait(timeout=60) == 0, d.describe()


FAR_IP = "198.18.7.3"  # the kernel behind the router


def test_frag_needed_from_a_kernel_router_lowers_snics_mss(daemons, veth_ns, mem_args):
    """RFC 1191 against a real router: the namespace of the veth forwards (ip_forward, proxy
    ARP both ways, so the far host looks on-link to snicd, which has no gateway) to a second
    namespace over a veth whose router end has MTU 1280; the far kernel's end keeps 1500,
    so its SYN offers MSS 1460 and snic's first full-size segments (1500 bytes, DF) meet the
    smaller hop: the router drops them and answers with fragmentation needed, MTU 1280.
    snic must lower its MSS once, resend, and finish byte-exact. Deterministic: the hop is
    small before the connection opens, so the ICMP comes with the first full segment."""
    v = setup_ns(veth_ns)
    r_end, far_end = st.unique("sr"), st.unique("sf")
    # Deleting the far namespace takes far_end and with it r_end.
    with st.loopback_netns("snic-f") as far:
        st.run(["ip", "link", "add", r_end, "netns", v.ns, "type", "veth", "peer", "name",
                far_end, "netns", far], check=True)
        st.disable_ipv6(r_end, v.ns)
        st.disable_ipv6(far_end, far)
        st.run(["ip", "-n", far, "addr", "add", f"{FAR_IP}/32", "dev", far_end], check=True)
        st.run(["ip", "-n", far, "link", "set", far_end, "up"], check=True)
        st.run(["ip", "-n", far, "route", "add", "default", "dev", far_end], check=True)
        # Full checksums from the far kernel (see setup_ns): forwarding keeps them partial.
        st.run(["ip", "netns", "exec", far, "ethtool", "-K", far_end, "tx", "off"], check=True)
        st.run(["ip", "-n", v.ns, "link", "set", r_end, "mtu", "1280", "up"], check=True)
        st.run(["ip", "-n", v.ns, "route", "add", f"{FAR_IP}/32", "dev", r_end], check=True)
        # Proxy ARP answers at once (proxy_delay 0; by default up to 0.8 s, close to how
        # long snic holds the first SYN for ARP).
        st.run(["ip", "netns", "exec", v.ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1",
                *(f"net.ipv4.conf.{i}.proxy_arp=1" for i in (v.peer, r_end)),
                *(f"net.ipv4.neigh.{i}.proxy_delay=0" for i in (v.peer, r_end))], check=True)
        out, m, kernel = run_send(daemons, mem_args, v, FAULT_BYTES, dst=FAR_IP, ns=far)
    tcp = counters(out, 0, "tcp")
    print(f"snic -> kernel through a 1280-byte hop: {m[5]} MB/s, snic retransmits {m[8]} "
          f"(timeouts {m[10]}), frag needed {tcp.get('icmp_frag_needed')}, "
          f"ignored {tcp.get('pmtu_ignored', 0)}")
    assert tcp.get("icmp_frag_needed", 0) >= 1 and tcp.get("pmtu_lowered") == 1, tcp
    assert int(m[8]) > 0, "the segments the hop dropped must have been sent again"
    assert int(m[10]) == 0, "no retransmission timeout: the ICMP said what to resend"
