#!/usr/bin/env bash
# snicd on real PCI devices: a small Debian 12 guest in QEMU (TCG: no KVM here) with a
# virtio-net-pci NIC and an emulated e1000 bound to uio_pci_generic, its snicd on DPDK's
# virtio and e1000 poll-mode drivers with hugepages, and rdma-core's ibv_rc_pingpong,
# rdmacm-utils' rping -V and perftest's ib_send_bw -R from the guest against a snicd on the
# host side of a bridge (scripts/vmnic/run.py). The guest is the kernel-peer guest
# (scripts/kpeer) with DPDK and this build's snic added (scripts/vmnic/build-image.sh).
# Takes a few minutes; the guest runs 10-50x slower than the host. Run as root.
#
#   scripts/vm-nic.sh [--out DIR]
#
# DIR (default /tmp/vm-nic) keeps the guest's console, each tool's output on both sides and
# the host snicd's log.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

out=/tmp/vm-nic
while (($#)); do
    case $1 in
        --out) out=${2:?--out needs a directory}; shift ;;
        -h | --help) sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) snic_die "unknown option $1" ;;
    esac
    shift
done
snic_require_root
[[ -x $SNICD ]] || snic_die "$SNICD is not built (ninja -C $SNIC_BUILD)"
image=${SNIC_VMNIC_IMAGE:-/var/cache/snic/vmnic}
"$SNIC_ROOT/scripts/vmnic/build-image.sh" "$image"
SNIC_EAL_MEM="$(snic_eal_mem_args)" exec /usr/bin/python3 "$SNIC_ROOT/scripts/vmnic/run.py" \
    --image "$image" --out "$out"
