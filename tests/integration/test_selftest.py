"""snicd --selftest arp-ping on the in-process virtual wire."""

import re

import snictest as st

RESULT = re.compile(
    r"^selftest arp-ping: 198\.18\.3\.2 is at ([0-9a-f]{2}(?::[0-9a-f]{2}){5}) ; "
    r"(\d+)/(\d+) echo replies, rtt min/avg/max/p99 = "
    r"([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) us$", re.M)


def test_wire_selftest(daemons, mem_args):
    name = st.unique("self", maxlen=24)
    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--wire", "--port", "wire0,ip=198.18.3.1/24", "--port", "wire1,ip=198.18.3.2/24",
                 "--selftest", "arp-ping,count=20"])
    rc = d.wait(timeout=60)
    assert rc == 0, d.describe()
    assert d.stderr() == "", d.describe()
    m = RESULT.search(d.stdout())
    assert m, f"no selftest result line:\n{d.describe()}"
    assert (m[2], m[3]) == ("20", "20"), m[0]
    rmin, ravg, rmax, p99 = map(float, m.groups()[3:])
    assert 0 <= rmin <= ravg <= rmax, m[0]
    assert rmin <= p99 <= rmax, m[0]


def counter(out: str, port: int, name: str) -> int:
    line = re.search(rf"^snicd: port {port} .*$", out, re.M)
    assert line, out
    m = re.search(rf"\b{name}=(\d+)", line[0])
    return int(m[1]) if m else 0


def test_wire_fault_injection_duplicates_and_reorders(daemons, mem_args):
    """Duplicated and reordered frames still deliver every echo once; the injected
    faults are counted per direction, and a seeded run repeats exactly."""
    outs = []
    for _ in range(2):
        name = st.unique("fault", maxlen=24)
        d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                    ["--wire", "--port", "wire0,ip=198.18.3.1/24",
                     "--port", "wire1,ip=198.18.3.2/24,dup=0.2,reorder=0.2,seed=11",
                     "--selftest", "arp-ping,count=200"])
        rc = d.wait(timeout=120)
        assert rc == 0, d.describe()
        m = RESULT.search(d.stdout())
        assert m and (m[2], m[3]) == ("200", "200"), d.describe()
        outs.append(d.stdout())
    for kind in ("rx_fault_duplicated", "rx_fault_reordered", "tx_fault_duplicated",
                 "tx_fault_reordered"):
        n = counter(outs[0], 1, kind)
        assert n > 0, f"{kind} not counted:\n{outs[0]}"
        assert n == counter(outs[1], 1, kind), f"{kind} differs between two runs with one seed"
    assert counter(outs[0], 0, "rx_fault_duplicated") == 0, "faults leak to the other port"


def test_wire_fault_injection_corruption_is_caught(daemons, mem_args):
    """Every corrupted frame is dropped by a checksum (IPv4 or ICMP) and counted, never answered."""
    name = st.unique("corrupt", maxlen=24)
    d = daemons(name, ["-l", "0", "--no-pci", *mem_args],
                ["--wire", "--port", "wire0,ip=198.18.3.1/24",
                 "--port", "wire1,ip=198.18.3.2/24,rx-corrupt=0.1,seed=5",
                 "--selftest", "arp-ping,count=30"])
    d.wait(timeout=120)
    out = d.stdout()
    corrupted = counter(out, 1, "rx_fault_corrupted")
    assert corrupted > 0, d.describe()
    caught = sum(counter(out, 1, f"drop_{r}") for r in
                 ("ip_bad_checksum", "icmp_bad_checksum", "ip_bad_version", "ip_bad_header_length",
                  "ip_bad_total_length", "ip_not_for_us", "ip_fragment", "ip_proto_unsupported",
                  "icmp_unsupported_type", "arp_malformed", "arp_unsupported", "arp_not_for_us",
                  "eth_not_for_us", "ethertype_unsupported"))
    answered = counter(out, 1, "icmp_echo_answered") + counter(out, 1, "arp_requests_answered")
    received = counter(out, 1, "rx_packets")  # counted after the injected faults
    # every frame received is either answered or dropped for a reason; corrupted ones are dropped
    assert caught >= 1, d.describe()
    assert answered + caught == received, d.describe()
