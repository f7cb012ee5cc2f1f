"""dpdk-dumpcap captures the ports of a running snicd (DPDK pdump), and tshark
reads what it wrote: the kernel's ARP request and echo requests, and snicd's
replies."""

import subprocess

import pytest

import snictest as st

HOST_IP = "198.18.4.1"
SNIC_IP = "198.18.4.2"


def test_dumpcap_captures_a_running_daemon(daemons, veth_ns, mem_args, tmp_path):
    if "--no-huge" in mem_args:
        pytest.skip("dpdk-dumpcap attaches as a secondary process, which needs hugepages")
    v = veth_ns(f"{HOST_IP}/24")
    name = st.unique("cap", maxlen=24)
    d = daemons(name, ["-l", "0", "--no-pci", f"--vdev=net_af_packet0,iface={v.host}", *mem_args],
                ["--port", f"0,ip={SNIC_IP}/24", "--idle-backoff", "100"])
    d.wait_ready()

    pcap = tmp_path / "capture.pcapng"
    log = tmp_path / "dumpcap.log"
    with open(log, "w") as out:
        cap = subprocess.Popen(["dpdk-dumpcap", f"--file-prefix={d.prefix}", "-i", "net_af_packet0",
                                "-w", str(pcap), "-c", "8", "-q"],
                               stdout=out, stderr=subprocess.STDOUT)
    try:
        # Capturing has begun once dumpcap has created its output file.
        st.poll(lambda: pcap.exists() and pcap.stat().st_size > 0 or None, "dumpcap to start",
                tries=200)
        # 4 echo requests + 4 replies (and ARP) fill the 8 frames dumpcap waits for.
        res = st.run(["ip", "netns", "exec", v.ns, "ping", "-n", "-c", "4", "-i", "0.05", "-W", "2",
                      SNIC_IP], timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert cap.wait(timeout=30) == 0, log.read_text()
    finally:
        if cap.poll() is None:
            cap.kill()
            cap.wait()

    dissect = st.run(["tshark", "-r", str(pcap), "-T", "fields", "-e", "ip.src", "-e", "ip.dst",
                      "-e", "icmp.type", "-e", "arp.opcode"], timeout=60, check=True).stdout
    rows = [line.split("\t") for line in dissect.strip().splitlines()]
    replies = [r for r in rows if r[:3] == [SNIC_IP, HOST_IP, "0"]]
    requests = [r for r in rows if r[:3] == [HOST_IP, SNIC_IP, "8"]]
    assert replies and requests, f"no echo exchange in the capture:\n{dissect}"
