#!/usr/bin/env bash
# Prepares a Debian 12 machine for snic and builds it. Idempotent; run as root.
#
#   scripts/setup.sh [--no-deps] [--no-build]
#
#   1. installs the Debian packages snic needs (only the missing ones),
#   2. reserves 2 MiB hugepages (raises to 512, never lowers) and mounts
#      hugetlbfs at /dev/hugepages; when that is impossible, says once that
#      snicd will run with --no-huge and goes on,
#   3. makes rdma-core's own tests (python3-pyverbs's) ready for test_pyverbs.py,
#   4. configures build/ (meson setup, only the first time) and runs ninja.
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
    # a shared-address port's XDP program: clang builds it for BPF, libbpf finds its maps,
    # DPDK's af_xdp PMD loads it (through libxdp)
    libbpf-dev libxdp-dev
    # gcc's sanitizer runtimes, for scripts/test.sh's sanitizer builds (g++ depends on them too)
    libasan8 libubsan1 libtsan2
    dapl2-utils libdapl2 libdapl-dev qperf
    ucx-utils openmpi-bin libopenmpi-dev libfabric-bin
    python3 python3-pytest python3-scapy
    # rdma-core's own tests of the verbs API, which tests/integration/test_pyverbs.py runs
    python3-pyverbs
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

# rdma-core's Python tests of the verbs API, of the installed python3-pyverbs's release:
# the package ships them in /usr/share/doc/rdma-core/tests, compressed there as Debian does
# with documentation. They are copied, decompressed and otherwise untouched, to a directory of
# their version (snic_pyverbs_tests_dir), once. Where dpkg leaves /usr/share/doc out
# (path-exclude, as in slim container images), they come from the package file itself.
prepare_pyverbs_tests() {
    local dest version tmp src
    if ! dest=$(snic_pyverbs_tests_dir); then
        snic_warn "pyverbs tests: python3-pyverbs is not installed"
        return 0
    fi
    if [[ -f $dest/run_tests.py && -f $dest/base.py ]]; then
        snic_log "pyverbs tests: $dest"
        return 0
    fi
    version=$(dpkg-query -W -f='${Version}' python3-pyverbs)
    mkdir -p "$SNIC_PYVERBS_CACHE"
    tmp=$(mktemp -d "$SNIC_PYVERBS_CACHE/.new.XXXXXX")
    src=/usr/share/doc/rdma-core/tests
    if [[ ! -f $src/run_tests.py ]]; then
        snic_log "pyverbs tests: $src is missing; taking them from python3-pyverbs $version's package"
        if ! (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root \
            "python3-pyverbs=$version" >/dev/null) ||
            ! dpkg-deb -x "$tmp"/python3-pyverbs_*.deb "$tmp/pkg"; then
            rm -rf "$tmp"
            snic_warn "pyverbs tests: cannot download python3-pyverbs $version"
            return 0
        fi
        src=$tmp/pkg/usr/share/doc/rdma-core/tests
    fi
    cp -r "$src" "$tmp/tests"
    find "$tmp/tests" -name '*.gz' -exec gunzip -f {} +
    rm -rf "$dest"
    mkdir -p "$(dirname "$dest")"
    mv "$tmp/tests" "$dest"
    rm -rf "$tmp"
    snic_log "pyverbs tests: rdma-core's tests of python3-pyverbs $version in $dest"
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
prepare_pyverbs_tests

setup_hugepages

if ((do_build)); then
    snic_build
    snic_log "build: $SNIC_BUILD is up to date"
else
    snic_log "build: skipped (--no-build)"
fi
