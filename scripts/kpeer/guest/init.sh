#!/bin/bash
# PID 1 of the kernel-peer guest (scripts/kpeer/build-guest.sh packs it as /init).
# Kernel command line: kp_ip=A.B.C.D/N (eth0's address), kp_dev=rxe|siw (the RDMA link added
# on eth0), and for siw siw.mpa_crc_required=1 / siw.mpa_version=N as module parameters.
# Then the agent (/kp/agent.sh) serves the host's commands on the second serial port.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm /run /tmp
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
say() { echo "KP[$(cut -d' ' -f1 /proc/uptime)] $*"; }
say "kernel $(uname -r)"
modprobe virtio_pci
modprobe virtio_net
for _ in $(seq 50); do [[ -e /sys/class/net/eth0 ]] && break; sleep 0.1; done
ip link set lo up
ip addr add "${kp_ip:-198.18.90.2/24}" dev eth0
ip link set eth0 up
dev=${kp_dev:-rxe}
for m in ib_uverbs rdma_ucm "$([[ $dev == siw ]] && echo siw || echo rdma_rxe)"; do
    modprobe "$m" || say "modprobe $m failed"
done
rdma link add "${dev}0" type "$dev" netdev eth0 || say "rdma link add ${dev}0 failed"
[[ -d /sys/module/siw/parameters ]] && say "siw: $(grep -H . /sys/module/siw/parameters/* | tr '\n' ' ')"
ibv_devinfo -d "${dev}0" | grep -E 'hca_id|transport|state|active_mtu'
exec /kp/agent.sh
