#!/bin/bash
# PID 1 of the vm-nic guest (scripts/vmnic/build-image.sh packs it as /init). Its NICs, by
# PCI address (scripts/vmnic/run.py places them): 00:03.0 virtio-net for the kernel (eth0,
# the tools' side channel and the host's agent), 00:04.0 virtio-net and 00:05.0 e1000 for
# snicd, bound to uio_pci_generic before any kernel driver can take them, as
# dpdk-devbind.py --bind=uio_pci_generic does. Kernel command line: vm_ip=A.B.C.D/N (eth0).
# Then the agent (/kp/agent.sh) runs the host's commands on the second serial port.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp /dev/hugepages
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
say() { echo "VM[$(cut -d' ' -f1 /proc/uptime)] $*"; }
say "kernel $(uname -r)"
for bdf in 0000:00:04.0 0000:00:05.0; do
    echo uio_pci_generic >"/sys/bus/pci/devices/$bdf/driver_override"
done
modprobe uio_pci_generic
for bdf in 0000:00:04.0 0000:00:05.0; do
    echo "$bdf" >/sys/bus/pci/drivers_probe
    say "$bdf $(cat /sys/bus/pci/devices/$bdf/vendor):$(cat /sys/bus/pci/devices/$bdf/device) -> $(basename "$(readlink /sys/bus/pci/devices/$bdf/driver)")"
done
modprobe virtio_pci
modprobe virtio_net
for _ in $(seq 50); do [[ -e /sys/class/net/eth0 ]] && break; sleep 0.1; done
ip link set lo up
ip addr add "${vm_ip:-198.18.91.2/24}" dev eth0
ip link set eth0 up
echo 512 >/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
mount -t hugetlbfs nodev /dev/hugepages
say "hugepages $(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)"
mkdir -p /run/snic
exec /kp/agent.sh
