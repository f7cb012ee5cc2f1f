#!/usr/bin/env bash
# Prepares a Debian 12 machine for snic and builds it. Idempotent; run as root.
#
#   scripts/setup.sh [--no-deps] [--no-build]
#
#   1. installs the Debian packages snic needs (only the missing ones),
#   2. reserves 2 MiB hugepages (raises to 512, never lowers) and mounts
#      hugetlbfs at /dev/hugepages; when that is impossible, says once that
#      snicd will run with --no-huge and goes on,
#   3. configures build/ (meson setup, only the first time) and runs ninja.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SNIC_PACKAGES=(
    build-essential g++ meson ninja-build pkg-config
    dpdk dpdk-dev libdpdk-dev libnuma-dev libpcap-dev
    libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
    libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils rdma-core
    iproute2 iputils-ping tshark ethtool perftest gnuplot-nox valgrind clang-format
    clang libclang-rt-14-dev
    # gcc's sanitizer runtimes, for scripts/test.sh's sanitizer builds (g++ depends on them too)
    libasan8 libubsan1 libtsan2
    dapl2-utils libdapl2 libdapl-dev qperf
    ucx-utils openmpi-bin libopenmpi-dev libfabric-bin
    python3 python3-pytest python3-scapy
)
HUGEPAGES_TARGET=512

usage() {
    sed -n '2,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

do_deps=1
do_build=1
while (($#)); do
    case $1 in
        --no-deps) do_deps=0 ;;
        --no-build) do_build=0 ;;
        -h | --help) usage; exit 0 ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

snic_require_root

install_deps() {
    local pkg missing=()
    for pkg in "${SNIC_PACKAGES[@]}"; do
        if [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true) != "install ok installed" ]]; then
            missing+=("$pkg")
        fi
    done
    if ((${#missing[@]} == 0)); then
        snic_log "packages: all ${#SNIC_PACKAGES[@]} present"
        return 0
    fi
    snic_log "packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer no, without a prompt.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
}

# Reserves and mounts hugepages. On failure sets HUGEPAGES_WHY and returns 1.
HUGEPAGES_WHY=
try_hugepages() {
    local nr_file=$SNIC_HUGEPAGES_2M/nr_hugepages cur now free
    if [[ ! -e $nr_file ]]; then
        HUGEPAGES_WHY="this kernel offers no 2 MiB hugepages"
        return 1
    fi
    cur=$(<"$nr_file")
    if ((cur < HUGEPAGES_TARGET)); then
        if ! { echo "$HUGEPAGES_TARGET" >"$nr_file"; } 2>/dev/null; then
            HUGEPAGES_WHY="cannot write $nr_file"
            return 1
        fi
        now=$(<"$nr_file")
        snic_log "hugepages: 2 MiB pages raised from $cur to $now (asked for $HUGEPAGES_TARGET)"
    else
        snic_log "hugepages: $cur x 2 MiB reserved"
    fi
    if ! snic_hugepages_mounted; then
        mkdir -p "$SNIC_HUGEPAGE_DIR" 2>/dev/null || true
        if ! mount -t hugetlbfs -o pagesize=2M nodev "$SNIC_HUGEPAGE_DIR" 2>/dev/null; then
            HUGEPAGES_WHY="cannot mount hugetlbfs at $SNIC_HUGEPAGE_DIR"
            return 1
        fi
        snic_log "hugepages: mounted hugetlbfs at $SNIC_HUGEPAGE_DIR"
    fi
    free=$(snic_free_hugepages)
    if ((free < SNIC_MIN_FREE_HUGEPAGES)); then
        HUGEPAGES_WHY="only $free 2 MiB hugepages are free (snicd wants $SNIC_MIN_FREE_HUGEPAGES)"
        return 1
    fi
    return 0
}

setup_hugepages() {
    if ! try_hugepages; then
        snic_log "hugepages: $HUGEPAGES_WHY; snicd will run with --no-huge"
    fi
}

if ((do_deps)); then
    install_deps
else
    snic_log "packages: skipped (--no-deps)"
fi

setup_hugepages

if ((do_build)); then
    snic_build
    snic_log "build: $SNIC_BUILD is up to date"
else
    snic_log "build: skipped (--no-build)"
fi
