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
