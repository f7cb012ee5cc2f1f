#!/usr/bin/python3
"""snicd on PCI NICs: a QEMU guest (TCG) whose snicd drives a virtio-net-pci NIC and an
emulated e1000 with DPDK's PCI poll-mode drivers (bound to uio_pci_generic), and a snicd on
the host on a veth, all on one bridge. rdma-core's, rdmacm-utils' and perftest's tools run
between them, unmodified, the guest's side as the client under its snic-run.

    scripts/vmnic/run.py --image DIR [--out DIR]

Prints one line per case and a summary; exit status 0 when every case passed. Run as root
(scripts/vm-nic.sh builds the image and calls this)."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kpeer"))
import run as kp  # noqa: E402  (the kernel-peer guest's agent protocol)

NET = "198.18.91"
HOST_KERNEL_IP = f"{NET}.254"  # the bridge's: the tools' side channels end here
HOST_SNIC_IP = f"{NET}.1"
GUEST_IP = f"{NET}.2"  # the guest kernel's eth0
GUEST_SNIC = {0: f"{NET}.11", 1: f"{NET}.12"}  # the guest snicd's ports: virtio, e1000
NAME = "vmnic"  # the host's snicd
GUEST_NAME = "vmg"
TIMEOUT = 300
BR, TAPS, VETH = "snvmbr", ("snvm0", "snvm1", "snvm2"), ("snvmh", "snvmp")


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def net_up() -> None:
    net_down()
    sh("ip", "link", "add", BR, "type", "bridge")
    for t in TAPS:
        sh("ip", "tuntap", "add", "dev", t, "mode", "tap")
    sh("ip", "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
    for i in (BR, *TAPS, *VETH):
        sh("sysctl", "-q", "-w", f"net.ipv6.conf.{i}.disable_ipv6=1")
    for i in (*TAPS, VETH[1]):
        sh("ip", "link", "set", i, "master", BR)
    for i in (BR, *TAPS, *VETH):
        sh("ip", "link", "set", i, "up")
    sh("ip", "addr", "add", f"{HOST_KERNEL_IP}/24", "dev", BR)
    # af_packet hands snicd the kernel's frames as they are: no partial checksums.
    sh("ethtool", "-K", VETH[1], "tx", "off")


def net_down() -> None:
    for i in (BR, *TAPS, VETH[0]):
        sh("ip", "link", "delete", i, check=False)


class NicGuest(kp.Guest):
    """The kernel-peer guest's agent, in a guest with three NICs: 00:03.0 virtio-net for its
    kernel, 00:04.0 virtio-net and 00:05.0 e1000 for its snicd."""

    def __init__(self, image: Path, work: Path):  # noqa: super().__init__ boots another guest
        self.dev, self.work = "vmnic", work
        self.console = work / "guest.log"
        self.sock_path = work / "agent.sock"
        self.sock_path.unlink(missing_ok=True)
        nic = "csum=off,guest_csum=off"  # the kernel and snicd's software checksums, not QEMU's
        self.proc = subprocess.Popen([
            "qemu-system-x86_64", "-accel", "tcg,thread=multi", "-cpu", "max", "-m", "2048",
            "-smp", "2", "-display", "none", "-monitor", "none", "-no-reboot",
            "-serial", f"file:{self.console}",
            "-chardev", f"socket,id=agent,path={self.sock_path},server=on,wait=off",
            "-serial", "chardev:agent",
            "-kernel", str(image / "vmlinuz"), "-initrd", str(image / "initrd.zst"),
            "-append", f"console=ttyS0 panic=-1 quiet no_timer_check vm_ip={GUEST_IP}/24",
            "-netdev", f"tap,id=n0,ifname={TAPS[0]},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n0,addr=03,{nic},mac=52:54:00:12:91:03",
            "-netdev", f"tap,id=n1,ifname={TAPS[1]},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=n1,addr=04,{nic},mac=52:54:00:12:91:04",
            "-netdev", f"tap,id=n2,ifname={TAPS[2]},script=no,downscript=no",
            "-device", "e1000,netdev=n2,addr=05,mac=52:54:00:12:91:05",
        ], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.sock = None
        self.buf = b""
        self.seq = 0


class HostSnic:
    def __init__(self, work: Path):
        self.ctrl = f"/run/snic/{NAME}.sock"
        self.log = work / "snicd-host.log"
        mem = shlex.split(os.environ.get("SNIC_EAL_MEM", ""))
        self.proc = subprocess.Popen(
            [str(kp.SNICD), "-l", "0", "--no-pci", f"--vdev=net_af_packet0,iface={VETH[0]}",
             *mem, "--", "--name", NAME, "--ctrl", self.ctrl, "--no-dev-nodes",
             "--port", f"0,ip={HOST_SNIC_IP}/24", "--idle-backoff", "50"],
            stdout=open(self.log, "wb"), stderr=subprocess.STDOUT)
        for _ in range(600):
            if sh(str(kp.SNICCTL), "-s", self.ctrl, "status", check=False).returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"the host's snicd did not start: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def host_tool(work: Path, tag: str, devices: str, *cmd: str) -> subprocess.Popen:
    env = dict(os.environ, SNIC_DEVICES=devices)
    env.pop("LD_PRELOAD", None)
    return subprocess.Popen([str(kp.SNIC_RUN), *cmd], env=env, stdin=subprocess.DEVNULL,
                            stdout=open(work / f"{tag}-host.log", "wb"), stderr=subprocess.STDOUT)


def listening(port: int) -> bool:
    out = sh("ss", "-Hltn", f"sport = :{port}", check=False).stdout
    return bool(out.strip())


def wait_for(pred, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise TimeoutError(what)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", type=Path, required=True)
    ap.add_argument("--out", type=Path, default=Path("/tmp/vm-nic"))
    args = ap.parse_args()
    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    results: list[tuple[str, bool, str]] = []
    net_up()
    snic = guest = None
    try:
        snic = HostSnic(work)
        guest = NicGuest(args.image, work)
        print(f"vm-nic: booting the guest (TCG; console {guest.console})", flush=True)
        guest.wait_ready(600)
        rc, out = guest.run("dmesg | grep -i -E 'uio|e1000|virtio' | tail -5; "
                            "for d in 0000:00:04.0 0000:00:05.0; do echo \"$d $(cat "
                            "/sys/bus/pci/devices/$d/vendor):$(cat /sys/bus/pci/devices/$d/device) "
                            "$(basename $(readlink /sys/bus/pci/devices/$d/driver))\"; done")
        print(out, flush=True)
        rc, out = guest.run(
            f"kp_bg snicd /snic/snicd -l 0 -a 0000:00:04.0 -a 0000:00:05.0 --file-prefix {GUEST_NAME}"
            f" -- --name {GUEST_NAME} --no-dev-nodes --idle-backoff 200"
            f" --port 0,ip={GUEST_SNIC[0]}/24 --port 1,ip={GUEST_SNIC[1]}/24; "
            f"for i in $(seq 600); do /snic/snicctl -n {GUEST_NAME} status 2>/dev/null && exit 0; "
            "[ -f /tmp/snicd.rc ] && break; sleep 0.5; done; cat /tmp/snicd.log; exit 1",
            timeout=TIMEOUT)
        print(out, flush=True)
        if rc != 0:
            raise RuntimeError("the guest's snicd did not start")
        results.append(("guest snicd on virtio-net-pci and e1000 (uio_pci_generic)", True,
                        "; ".join(l for l in out.splitlines() if l.startswith("port "))))
        port = 18600
        for p, nic in ((0, "virtio"), (1, "e1000")):
            gdev = f"{GUEST_NAME}_{p}"
            cases = [
                ("ibv_rc_pingpong", f"{NAME}_0",
                 ["ibv_rc_pingpong", "-d", f"{NAME}_0", "-g", "0", "-n", "200", "-s", "1024"],
                 f"ibv_rc_pingpong -d {gdev} -g 0 -n 200 -s 1024", HOST_KERNEL_IP, True),
                ("rping -V (iWARP)", f"{NAME}_iw0",
                 ["rping", "-s", "-a", HOST_SNIC_IP, "-C", "100", "-V"],
                 f"rping -c -a {HOST_SNIC_IP} -I {GUEST_SNIC[p]} -C 100 -V", None, False),
                ("ib_send_bw -R", f"{NAME}_0",
                 ["ib_send_bw", "-R", "-d", f"{NAME}_0", "-n", "200"],
                 f"ib_send_bw -R -d {gdev} -n 200 {HOST_SNIC_IP}", None, True),
            ]
            for name, hdev, server, client, oob, roce in cases:
                tag = f"{nic}-{name.split()[0]}"
                t0 = time.monotonic()
                # perftest calibrates its clock first and gives up where the emulated guest's
                # does not keep time well enough (kp.BAD_CLOCK): that try is run again, at
                # most three times, and the note says so.
                for tries in range(1, 4):
                    port += 1
                    ok, out = run_case(snic, guest, work, tag, hdev, server, client, oob, roce,
                                       port, p)
                    if ok or kp.BAD_CLOCK not in out:
                        break
                (work / f"{tag}-guest.log").write_text(out)
                last = [l for l in out.splitlines() if l.strip()][-2:]
                note = f"{time.monotonic() - t0:.0f} s" + (f", {tries} tries" if tries > 1 else "")
                results.append((f"{name} over the guest's {nic} port", ok,
                                f"{note}; {' | '.join(last)}"))
                print(f"vm-nic: {name:16} {nic:6} {'ok' if ok else 'FAILED'} ({note})", flush=True)
        rc, out = guest.run(f"/snic/snicctl -n {GUEST_NAME} status; kill %1 2>/dev/null; "
                            "pkill -INT snicd; kp_wait snicd 60 | grep -E '^snicd: port' | cut -c1-300")
        print(out, flush=True)
    finally:
        if guest is not None:
            guest.stop()
        if snic is not None:
            snic.stop()
        net_down()
    print("\n| case | result | notes |\n|---|---|---|")
    for name, ok, note in results:
        print(f"| {name} | {'pass' if ok else 'FAIL'} | {note} |")
    passed = sum(ok for _, ok, _ in results)
    print(f"\nvm-nic: {passed} of {len(results)} passed")
    return 0 if passed == len(results) else 1


def run_case(snic: HostSnic, guest: NicGuest, work: Path, tag: str, hdev: str, server: list,
             client: str, oob, roce: bool, port: int, p: int) -> tuple[bool, str]:
    """One tool: its server on the host's snicd, its client in the guest on port P's device."""
    gdev = f"{GUEST_NAME}_{p}" if roce else f"{GUEST_NAME}_iw{p}"
    srv = host_tool(work, tag, hdev, *server, "-p", str(port))
    try:
        if oob or roce:
            wait_for(lambda: listening(port) or srv.poll() is not None or
                     "listen" in sh(str(kp.SNICCTL), "-s", snic.ctrl, "cm", check=False).stdout,
                     f"{tag}'s server")
        else:
            wait_for(lambda: f":{port} " in sh(str(kp.SNICCTL), "-s", snic.ctrl, "tcp",
                                               check=False).stdout, f"{tag}'s listener")
        target = f" {oob}" if oob else ""
        rc, out = guest.run(f"SNIC_SOCKET_DIR=/run/snic SNIC_DEVICES={gdev} "
                            f"timeout {TIMEOUT - 20} /snic/snic-run {client} -p {port}{target}",
                            timeout=TIMEOUT)
        srv_rc = srv.wait(timeout=60) if rc == 0 else None
    except (TimeoutError, subprocess.TimeoutExpired) as e:
        rc, out, srv_rc = -1, str(e), None
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return rc == 0 and srv_rc == 0, out


if __name__ == "__main__":
    sys.exit(main())
