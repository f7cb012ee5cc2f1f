#!/usr/bin/env bash
# Builds the vm-nic guest: the kernel-peer guest's Debian 12 (scripts/kpeer/build-guest.sh,
# built first if need be) with the DPDK libraries snicd needs and the poll-mode drivers of the
# guest's PCI NICs (virtio, e1000), the kernel's uio_pci_generic, and this build's snicd,
# snicctl and libsnic in /snic, packed as an initramfs that boots into
# scripts/vmnic/init.sh. Everything comes from Debian's package registry and the build.
#
#   scripts/vmnic/build-image.sh DIR
#
# Leaves DIR/vmlinuz and DIR/initrd.zst (rebuilt on every run: the binaries change).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

dir=${1:?usage: build-image.sh DIR}
kp=${SNIC_KPEER_IMAGE:-/var/cache/snic/kpeer}
"$SNIC_ROOT/scripts/kpeer/build-guest.sh" "$kp"
kver=$(ls "$kp/kernel/lib/modules")
build=${SNIC_BUILD:-$SNIC_ROOT/build}
for f in daemon/snicd tools/snicctl/snicctl libclient/libsnic.so; do
    [[ -e $build/$f ]] || snic_die "$build/$f is not built (ninja -C $build)"
done
mkdir -p "$dir/debs"
cd "$dir"

# The packages of snicd's libraries (as the host resolves them: the guest runs the same
# Debian), and the drivers EAL loads as plugins: the guest's NICs' and the mempool's.
pkgs=(librte-net-virtio23 librte-net-e1000-23 librte-mempool-ring23 librte-bus-pci23)
# (dpkg knows a file by the path its package gave: /lib or /usr/lib, so both are asked.)
owner() { dpkg -S "$1" 2>/dev/null | cut -d: -f1 || true; }
while read -r lib; do
    real=$(readlink -f "$lib")
    p=$(owner "$real")
    [[ -n $p ]] || p=$(owner "$lib")
    [[ -n $p ]] || p=$(owner "${real#/usr}")
    [[ -n $p ]] || snic_die "no package owns $lib"
    [[ $p == libc6 ]] || pkgs+=("$p")  # the guest's own C library stays
done < <(ldd "$build/daemon/snicd" "$build/libclient/libsnic.so" | awk '$3 ~ /^\// {print $3}' | sort -u)
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
for p in "${pkgs[@]}"; do
    compgen -G "debs/${p}_*.deb" >/dev/null || (cd debs && apt-get download -q "$p" >/dev/null 2>&1) ||
        snic_die "cannot download $p"
done

snic_log "root file system: the kernel-peer guest's, with DPDK and snic"
rm -rf rootfs && cp -a "$kp/rootfs" rootfs
# Into the merged /usr as it is (/lib is a link to usr/lib): not dpkg-deb -x, which would
# put directories in the links' place.
for deb in debs/*.deb; do
    dpkg-deb --fsys-tarfile "$deb" | tar -C rootfs --keep-directory-symlink -xf -
done
mods=rootfs/lib/modules/$kver/kernel/drivers/uio
mkdir -p "$mods"
cp "$kp/kernel/lib/modules/$kver/kernel/drivers/uio/"{uio.ko,uio_pci_generic.ko} "$mods/"
chroot rootfs /sbin/depmod "$kver"
mkdir -p rootfs/snic
install -m 755 "$build/daemon/snicd" "$build/tools/snicctl/snicctl" rootfs/snic/
cp -a "$build"/libclient/libsnic.so* rootfs/snic/
cat >rootfs/snic/snic-run <<'RUN'
#!/bin/sh
# snic-run in the guest: libsnic preloaded (docs/LIBSNIC.md).
LD_PRELOAD=/snic/libsnic.so${LD_PRELOAD:+ $LD_PRELOAD}
export LD_PRELOAD
exec "$@"
RUN
chmod 755 rootfs/snic/snic-run
install -m 755 "$SNIC_ROOT/scripts/vmnic/init.sh" rootfs/init
(cd rootfs && find . -xdev | cpio -o -H newc --quiet | zstd -3 -T2 -q -f -o ../initrd.zst)
cp "$kp/vmlinuz" vmlinuz
snic_log "vm-nic guest ready in $dir ($kver, $(du -h initrd.zst | cut -f1) initramfs)"
