"""snicd on a veth (net_af_packet) answers ARP and ping from a Linux
network namespace, counts what it did in DPDK telemetry, and stops cleanly
on SIGTERM."""

import re
import signal
import time

import snictest as st

HOST_IP = "198.18.2.1"
SNIC_IP = "198.18.2.2"
COUNT = 20


def port_stats_ok(prefix: str):
    """Port 0 stats from the telemetry socket once ping and ARP are counted."""
    (reply,) = st.telemetry_query(prefix, "/snic/port_stats,0")
    stats = reply["/snic/port_stats"]
    if stats["icmp_echo_answered"] >= COUNT and stats["arp_requests_answered"] >= 1:
        return stats
    return None


def test_ping_arp_telemetry_sigterm(daemons, veth_ns, mem_args):
    v = veth_ns(f"{HOST_IP}/24")
    name = st.unique("ping", maxlen=24)
    d = daemons(name, ["-l", "0", "--no-pci", f"--vdev=net_af_packet0,iface={v.host}", *mem_args],
                ["--port", f"0,ip={SNIC_IP}/24", "--idle-backoff", "100"])
    status = d.wait_ready()
    assert status.name == name
    assert status.pid == d.pid
    assert len(status.ports) == 1, status
    port = status.ports[0]
    assert port.id == 0 and port.ip == f"{SNIC_IP}/24", status
    assert re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", port.mac), status

    # ping from the namespace: every echo answered.
    res = st.run(["ip", "netns", "exec", v.ns, "ping", "-n", "-c", str(COUNT), "-i", "0.05", "-W", "2",
                  SNIC_IP], timeout=120)
    assert res.returncode == 0, f"ping failed:\n{res.stdout}\n{res.stderr}\n{d.describe()}"
    assert f"{COUNT} packets transmitted, {COUNT} received, 0% packet loss" in res.stdout, res.stdout

    # The namespace learnt snicd's MAC by ARP.
    neigh = st.run(["ip", "-n", v.ns, "neigh", "show", SNIC_IP, "dev", v.peer], check=True).stdout
    assert f"lladdr {port.mac}" in neigh.lower(), neigh

    # Telemetry: the v2 socket directly, polled until the counters are there.
    stats = st.poll(lambda: port_stats_ok(d.prefix), "icmp_echo_answered >= 20 in telemetry", tries=100)
    for key in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "tx_dropped",
                "arp_requests_answered", "arp_replies_received", "arp_requests_sent",
                "icmp_echo_answered", "icmp_echo_replies_received", "roce_dispatched",
                "tcp_dispatched", "drop_eth_not_for_us", "drop_ip_bad_checksum",
                "drop_udp_no_listener", "drop_rx_scattered"):
        assert key in stats, f"/snic/port_stats,0 lacks {key}: {stats}"
    assert stats["tx_packets"] >= COUNT + 1, stats

    info, ports = st.telemetry_query(d.prefix, "/snic/info", "/snic/ports")
    assert info["/snic/info"]["name"] == name, info
    assert info["/snic/info"]["pid"] == d.pid, info
    assert info["/snic/info"]["ports"] == 1, info
    assert ports["/snic/ports"] == [0], ports

    # The same through dpdk-telemetry.py, commands on stdin.
    (script_stats,) = st.telemetry_script(d.prefix, "/snic/port_stats,0")
    assert script_stats["/snic/port_stats"]["icmp_echo_answered"] >= COUNT, script_stats
    assert script_stats["/snic/port_stats"]["arp_requests_answered"] >= 1, script_stats

    # SIGTERM: clean exit, code 0, within 1 s, counters on stdout.
    t0 = time.monotonic()
    d.signal(signal.SIGTERM)
    rc = d.wait(timeout=st.CMD_TIMEOUT)
    elapsed = time.monotonic() - t0
    assert rc == 0, d.describe()
    assert elapsed <= 1.0, f"snicd took {elapsed:.2f} s to exit on SIGTERM"
    assert d.stderr() == "", d.describe()
    out = d.stdout()
    m = re.search(r"icmp_echo_answered\W*(\d+)", out)
    assert m, f"no icmp_echo_answered counter on stdout after SIGTERM:\n{out[-3000:]}"
    assert int(m[1]) >= COUNT, out[-3000:]
