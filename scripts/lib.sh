# shellcheck shell=bash
# Shared helpers for the snic scripts. Source it; do not run it.
#
#   . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# Defines:
#   SNIC_ROOT      repository root
#   SNIC_BUILD     build directory (default $SNIC_ROOT/build, override with SNIC_BUILD=...)
#   SNICD SNICCTL  paths of the built binaries
# and the snic_* functions below.

if [[ -n "${SNIC_LIB_SOURCED:-}" ]]; then
    return 0
fi
SNIC_LIB_SOURCED=1

SNIC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SNIC_BUILD=${SNIC_BUILD:-$SNIC_ROOT/build}
SNICD=$SNIC_BUILD/daemon/snicd
SNICCTL=$SNIC_BUILD/tools/snicctl/snicctl
# snicd needs at least this many free 2 MiB hugepages to run on hugepages;
# with fewer it runs with --no-huge.
SNIC_MIN_FREE_HUGEPAGES=${SNIC_MIN_FREE_HUGEPAGES:-128}
SNIC_HUGEPAGE_DIR=/dev/hugepages
SNIC_HUGEPAGES_2M=/sys/kernel/mm/hugepages/hugepages-2048kB
export SNIC_ROOT SNIC_BUILD SNICD SNICCTL

# Name of the calling script, for messages.
SNIC_PROG=$(basename "${0:-snic}")

snic_log() {
    printf '%s: %s\n' "$SNIC_PROG" "$*"
}

snic_warn() {
    printf '%s: warning: %s\n' "$SNIC_PROG" "$*" >&2
}

snic_die() {
    printf '%s: error: %s\n' "$SNIC_PROG" "$*" >&2
    exit 1
}

snic_require_root() {
    if [[ $(id -u) -ne 0 ]]; then
        snic_die "must run as root (it manages packages, hugepages, network namespaces and DPDK); try: sudo $0"
    fi
}

# True when a hugetlbfs for 2 MiB pages is mounted at /dev/hugepages.
snic_hugepages_mounted() {
    local dev mnt fstype opts _rest
    [[ -r /proc/mounts ]] || return 1
    while read -r dev mnt fstype opts _rest; do
        : "$dev"
        [[ $fstype == hugetlbfs && $mnt == "$SNIC_HUGEPAGE_DIR" ]] || continue
        # No pagesize option means the default size, which is 2M on x86/arm64.
        if [[ $opts != *pagesize=* || $opts == *pagesize=2M* || $opts == *pagesize=2048k* ]]; then
            return 0
        fi
    done </proc/mounts
    return 1
}

# Number of free 2 MiB hugepages (0 when the kernel has none).
snic_free_hugepages() {
    local n=0
    if [[ -r $SNIC_HUGEPAGES_2M/free_hugepages ]]; then
        n=$(<"$SNIC_HUGEPAGES_2M/free_hugepages")
    fi
    printf '%s\n' "$n"
}

# Prints the EAL memory arguments snicd should use on this machine: nothing
# when hugetlbfs is mounted and enough 2 MiB pages are free, else
# "--no-huge -m 512".
snic_eal_mem_args() {
    if snic_hugepages_mounted && (($(snic_free_hugepages) >= SNIC_MIN_FREE_HUGEPAGES)); then
        printf '\n'
    else
        printf '%s\n' "--no-huge -m 512"
    fi
}

# snic_veth_pmd: the DPDK driver snicd should drive a veth end with, af_xdp or
# af_packet. AF_XDP (net_af_xdp) where the kernel has XDP sockets and DPDK has the
# driver: it takes frames from the veth's XDP hook into a ring snicd shares with the
# kernel, which is faster than af_packet's copies through a packet socket; else
# af_packet, which every kernel has. SNIC_VETH_PMD=af_packet|af_xdp chooses.
# snic_veth_vdev PMD N IFACE: the EAL device for snicd's end of a veth. net_af_xdp with
# busy_budget=0: the driver's preferred busy polling (its default) makes a system call on
# every receive burst to run the device's NAPI on snicd's core; without it the kernel fills
# the ring from its softirq and snicd only reads it (docs/PERFORMANCE.md: lower round trips,
# faster receiving). net_af_packet with 4096 frames a ring.
snic_veth_vdev() {
    case $1 in
        af_xdp) printf 'net_af_xdp%s,iface=%s,busy_budget=0\n' "$2" "$3" ;;
        *) printf 'net_af_packet%s,iface=%s,framecnt=4096\n' "$2" "$3" ;;
    esac
}

snic_veth_pmd() {
    case ${SNIC_VETH_PMD:-} in
        af_xdp | af_packet) printf '%s\n' "$SNIC_VETH_PMD"; return 0 ;;
        '') ;;
        *) snic_die "SNIC_VETH_PMD is af_xdp or af_packet, not '$SNIC_VETH_PMD'" ;;
    esac
    local libdir
    libdir=$(pkg-config --variable=libdir libdpdk 2>/dev/null || echo /usr/lib/x86_64-linux-gnu)
    if compgen -G "$libdir/dpdk/pmds-*/librte_net_af_xdp.so*" >/dev/null &&
        python3 -c 'import socket; socket.socket(44, socket.SOCK_RAW).close()' 2>/dev/null; then
        printf 'af_xdp\n'  # 44: AF_XDP
    else
        printf 'af_packet\n'
    fi
}

# snic_pid_alive PID: true while PID exists and is not a zombie.
snic_pid_alive() {
    local pid=$1 state
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ -n $state && $state != Z && $state != X ]]
}

# snic_pid_is_snicd PID: true when PID is alive and runs a binary named snicd
# (guards against killing an unrelated process that reused a stale pid).
snic_pid_is_snicd() {
    local pid=$1 exe
    snic_pid_alive "$pid" || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    exe=${exe% (deleted)}
    [[ $(basename "$exe") == snicd ]]
}

# snic_ctl_ready SOCK: true when a daemon answers `snicctl status` on SOCK.
snic_ctl_ready() {
    "$SNICCTL" -s "$1" status >/dev/null 2>&1
}

# snic_ctl_pid SOCK: prints the pid the daemon answering on SOCK reports.
snic_ctl_pid() {
    local out
    out=$("$SNICCTL" -s "$1" status 2>/dev/null) || return 1
    awk '$1 == "snicd" && $3 == "pid" { print $4; found = 1; exit } END { exit !found }' <<<"$out"
}

# snic_wait_ready SOCK [TRIES] [PID]
# Polls `snicctl -s SOCK status` up to TRIES times (default 300), 0.1 s apart
# (about 30 s). Returns 0 once the daemon answers (if PID is given: once it
# answers with that pid); 1 when the tries run out or, if PID is given, as
# soon as that process has exited.
snic_wait_ready() {
    local sock=$1 tries=${2:-300} pid=${3:-} i
    for ((i = 0; i < tries; i++)); do
        if [[ -z $pid ]]; then
            snic_ctl_ready "$sock" && return 0
        elif [[ $(snic_ctl_pid "$sock") == "$pid" ]]; then
            return 0
        fi
        if [[ -n $pid ]] && ! snic_pid_alive "$pid"; then
            return 1
        fi
        sleep 0.1
    done
    return 1
}

# snic_stop_pid PID [TRIES]
# Sends SIGTERM, polls up to TRIES times (default 100), 0.1 s apart, for the
# process to go away, then sends SIGKILL and waits for it (up to 5 s more).
# Returns 0 when the process is gone, 1 if it is still there.
snic_stop_pid() {
    local pid=$1 tries=${2:-100} i
    snic_pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < tries; i++)); do
        snic_pid_alive "$pid" || return 0
        sleep 0.1
    done
    snic_warn "pid $pid did not stop on SIGTERM; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        snic_pid_alive "$pid" || return 0
        sleep 0.1
    done
    return 1
}

# snic_perftest SOCK_DIR SERVER_DEV CLIENT_DEV TCP_PORT TOOL [ARGS...]
# Runs rdma-core's perftest TOOL, unmodified, under snic-run: a server on
# SERVER_DEV pinned to core 0 (with the daemon) and a client on CLIENT_DEV
# pinned to core 1 (when the machine has one), started once the server listens.
# Prints the client's output; returns non-zero when either side fails.
snic_perftest() {
    local sock_dir=$1 sdev=$2 cdev=$3 port=$4 tool=$5 i rc=0 out server
    shift 5
    local run=("$SNIC_BUILD/libclient/snic-run") score=() ccore=()
    if (($(nproc) > 1)); then score=(taskset -c 0); ccore=(taskset -c 1); fi
    SNIC_SOCKET_DIR=$sock_dir "${score[@]}" "${run[@]}" "$tool" -d "$sdev" -x 0 -p "$port" "$@" \
        </dev/null >/dev/null 2>&1 &
    server=$!
    for ((i = 0; i < 300; i++)); do
        ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
        snic_pid_alive "$server" || break
        sleep 0.05
    done
    out=$(SNIC_SOCKET_DIR=$sock_dir timeout 600 "${ccore[@]}" "${run[@]}" "$tool" -d "$cdev" -x 0 \
        -p "$port" "$@" 127.0.0.1 </dev/null 2>&1) || rc=$?
    wait "$server" || rc=${rc:-1}
    printf '%s\n' "$out"
    return "$rc"
}

# snic_build: configures build/ if needed and brings it up to date.
snic_build() {
    if [[ ! -f $SNIC_BUILD/build.ninja ]]; then
        snic_log "configuring $SNIC_BUILD (meson setup)"
        meson setup "$SNIC_BUILD" "$SNIC_ROOT"
    fi
    ninja -C "$SNIC_BUILD"
}

# rdma-core's own Python tests of the verbs API (tests/integration/test_pyverbs.py runs them
# against snic), made ready by scripts/setup.sh from the installed python3-pyverbs: their
# directory, SNIC_PYVERBS_CACHE/<python3-pyverbs version>/tests. Fails when python3-pyverbs is
# not installed.
SNIC_PYVERBS_CACHE=${SNIC_PYVERBS_CACHE:-/var/cache/snic/pyverbs}
snic_pyverbs_tests_dir() {
    local version
    version=$(dpkg-query -W -f='${Version}' python3-pyverbs 2>/dev/null) || return 1
    [[ -n $version ]] || return 1
    printf '%s/%s/tests\n' "$SNIC_PYVERBS_CACHE" "$version"
}
