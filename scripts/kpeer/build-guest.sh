#!/usr/bin/env bash
# Builds the kernel-peer guest: Debian 12's own kernel with its soft RoCE (rdma_rxe) and a
# soft iWARP (siw) module built from the same kernel's source, rdma-core's tools, perftest and
# rdmacm-utils, packed as an initramfs that boots straight into scripts/kpeer/guest/init.sh.
# Everything comes from Debian's package registry. Idempotent: a finished image is kept.
#
#   scripts/kpeer/build-guest.sh DIR
#
# Leaves DIR/vmlinuz, DIR/initrd.zst and DIR/stamp (the kernel version and the guest
# scripts' checksum; a change to either rebuilds the initramfs). About 3 minutes the first
# time, seconds after that.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

dir=${1:?usage: build-guest.sh DIR}
guest_src=$SNIC_ROOT/scripts/kpeer/guest
# The kernel the guest runs: Debian 12's, from the registry (override with SNIC_KPEER_KERNEL).
kver=${SNIC_KPEER_KERNEL:-}
if [[ -z $kver ]]; then
    kver=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{sub("linux-image-", "", $2); print $2; exit}')
    [[ -n $kver ]] || snic_die "cannot tell Debian's current kernel (apt-cache depends linux-image-amd64); set SNIC_KPEER_KERNEL"
fi
stamp="$kver $(cat "$guest_src"/*.sh "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16)"
if [[ -f $dir/stamp && $(<"$dir/stamp") == "$stamp" && -f $dir/vmlinuz && -f $dir/initrd.zst ]]; then
    snic_log "guest image up to date in $dir ($kver)"
    exit 0
fi
mkdir -p "$dir"
cd "$dir"

need=(qemu-system-x86 debootstrap zstd cpio kmod "linux-headers-$kver" linux-source-6.1)
missing=()
for p in "${need[@]}"; do
    [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true) == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
    snic_log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
fi

if [[ ! -f vmlinuz || ! -d kernel/lib/modules/$kver ]]; then
    snic_log "kernel $kver from the registry"
    rm -rf debs kernel && mkdir -p debs
    (cd debs && apt-get download -q "linux-image-$kver")
    dpkg-deb -x debs/linux-image-"${kver}"_*.deb kernel
    cp "kernel/boot/vmlinuz-$kver" vmlinuz
fi

if [[ ! -f rootfs/usr/bin/ib_send_bw ]]; then
    snic_log "root file system (debootstrap, minbase)"
    rm -rf rootfs
    mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
    debootstrap --variant=minbase \
        --include=rdma-core,ibverbs-providers,ibverbs-utils,perftest,rdmacm-utils,iproute2,kmod,procps,iputils-ping \
        bookworm rootfs "$mirror" >debootstrap.log 2>&1 || { tail -20 debootstrap.log >&2; snic_die "debootstrap failed"; }
    rm -rf rootfs/usr/share/{doc,man,locale,info} rootfs/var/lib/apt/lists/* rootfs/var/cache/apt/*.bin
fi

# siw: Debian 12's kernels are built without CONFIG_RDMA_SIW, so it is built here, out of
# tree, from the same kernel's source, with two of its constants turned into module
# parameters (MPA CRC required, MPA revision) so that one image serves every variant.
if [[ ! -f siw.ko ]]; then
    snic_log "siw.ko for $kver"
    rm -rf siwsrc && mkdir siwsrc
    tar -C siwsrc -xJf /usr/src/linux-source-6.1.tar.xz --wildcards '*/drivers/infiniband/sw/siw/*'
    s=$(echo siwsrc/*/drivers/infiniband/sw/siw)
    sed -i 's/^const bool mpa_crc_required;/bool mpa_crc_required;\nmodule_param(mpa_crc_required, bool, 0644);/' "$s/siw_main.c"
    sed -i 's/^u_char mpa_version = MPA_REVISION_2;/u_char mpa_version = MPA_REVISION_2;\nmodule_param(mpa_version, byte, 0644);/' "$s/siw_main.c"
    sed -i 's/^extern const bool mpa_crc_required;/extern bool mpa_crc_required;/' "$s/siw.h"
    grep -q 'module_param(mpa_crc_required' "$s/siw_main.c" || snic_die "siw source differs from what the build expects"
    make -s -C "/usr/src/linux-headers-$kver" M="$PWD/$s" CONFIG_RDMA_SIW=m modules >siw-build.log 2>&1 ||
        { tail -20 siw-build.log >&2; snic_die "siw build failed"; }
    strip --strip-debug -o siw.ko "$s/siw.ko"
fi

snic_log "initramfs"
src=kernel/lib/modules/$kver
dst=rootfs/lib/modules/$kver
rm -rf "$dst" && mkdir -p "$dst/kernel" "$dst/updates"
cp "$src"/modules.order "$src"/modules.builtin "$src"/modules.builtin.modinfo "$dst/"
for d in drivers/infiniband drivers/virtio drivers/net/virtio_net.ko drivers/net/net_failover.ko \
    net/core/failover.ko net/ipv4/udp_tunnel.ko net/ipv6/ip6_udp_tunnel.ko crypto lib fs/configfs; do
    mkdir -p "$dst/kernel/$(dirname "$d")"
    cp -a "$src/kernel/$d" "$dst/kernel/$(dirname "$d")/"
done
cp siw.ko "$dst/updates/"
chroot rootfs /sbin/depmod "$kver"
install -m 755 "$guest_src/init.sh" rootfs/init
rm -rf rootfs/kp && mkdir -p rootfs/kp && install -m 755 "$guest_src"/*.sh rootfs/kp/
(cd rootfs && find . -xdev | cpio -o -H newc --quiet | zstd -3 -T2 -q -f -o ../initrd.zst)
echo "$stamp" >stamp
snic_log "guest image ready in $dir ($kver, $(du -h initrd.zst | cut -f1) initramfs)"
