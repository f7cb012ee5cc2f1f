#!/usr/bin/env bash
# A development network on one machine: two snicd daemons joined by a veth pair.
#
#   scripts/devnet.sh up [--hosts]  build if needed, start snicA and snicB, wait until both answer
#   scripts/devnet.sh status        one line per daemon (exit 0 when both are up, 3 otherwise)
#   scripts/devnet.sh exec A|B -- CMD...   (--hosts) run CMD on host A or B
#   scripts/devnet.sh down          stop both daemons, remove the namespaces and the state
#
#   snicA  198.18.0.1/24  on snicA-v  lcore 0
#   snicB  198.18.0.2/24  on snicB-v  lcore 1
#
# Without --hosts both daemons run in the namespace snic-devnet and own their addresses
# alone (the kernel has none there); their control sockets are /run/snic/NAME.sock. Each
# drives its veth end with net_af_xdp where the kernel has XDP sockets, else net_af_packet
# (SNIC_VETH_PMD=af_packet|af_xdp chooses).
#
# With --hosts each daemon runs in a namespace of its own, snic-hostA and snic-hostB, a host
# with its own kernel stack: the veth end there has the kernel's address, and snicd shares
# it (--port iface=IF,shared: AF_XDP with snicd's XDP program, which sends snicd RoCEv2 and
# its iWARP ports and leaves the rest to the kernel). Programs on one host use the other
# host's address for everything, TCP included. A host's control socket is
# /run/snic/hostA/snicA.sock (B alike); `exec` runs a program on a host with
# SNIC_SOCKET_DIR set to that directory, so that it finds its own host's daemon only.
#
# Logs and pid files: /run/snic/devnet/. `up` recovers from an unclean stop; `down` is
# idempotent. Run as root.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NETNS=snic-devnet
STATE=/run/snic/devnet
NAMES=(snicA snicB)
declare -A IFACE=([snicA]=snicA-v [snicB]=snicB-v)
declare -A IP=([snicA]=198.18.0.1/24 [snicB]=198.18.0.2/24)
declare -A LCORE=([snicA]=0 [snicB]=1)
declare -A HOST_NETNS=([snicA]=snic-hostA [snicB]=snic-hostB)
declare -A HOST_DIR=([snicA]=/run/snic/hostA [snicB]=/run/snic/hostB)
READY_TRIES=300 # x 0.1 s

usage() {
    sed -n '2,27s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

# The mode the devnet runs in (STATE/mode: "hosts" or "single"); "single" when none is up.
mode() {
    if [[ -r $STATE/mode ]]; then cat "$STATE/mode"; else printf 'single\n'; fi
}

ctrl_sock() {
    if [[ $(mode) == hosts ]]; then
        printf '%s/%s.sock\n' "${HOST_DIR[$1]}" "$1"
    else
        printf '/run/snic/%s.sock\n' "$1"
    fi
}

# The namespace daemon $1 runs in.
netns_of() {
    if [[ $(mode) == hosts ]]; then printf '%s\n' "${HOST_NETNS[$1]}"; else printf '%s\n' "$NETNS"; fi
}
pid_file() { printf '%s/%s.pid\n' "$STATE" "$1"; }
log_file() { printf '%s/%s.log\n' "$STATE" "$1"; }

netns_exists() {
    ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "${1:-$NETNS}"
}

# Pid from the pid file of daemon $1 when it is a live snicd; else nothing.
daemon_pid() {
    local f pid
    f=$(pid_file "$1")
    [[ -r $f ]] || return 1
    pid=$(<"$f")
    snic_pid_is_snicd "$pid" || return 1
    printf '%s\n' "$pid"
}

daemon_up() {
    local pid
    pid=$(daemon_pid "$1") && [[ $(snic_ctl_pid "$(ctrl_sock "$1")") == "$pid" ]]
}

leftovers_exist() {
    local n
    netns_exists && return 0
    [[ -e $STATE ]] && return 0
    for n in "${NAMES[@]}"; do
        netns_exists "${HOST_NETNS[$n]}" && return 0
        [[ -e /run/snic/$n.sock || -e ${HOST_DIR[$n]}/$n.sock ]] && return 0
        ip link show "${IFACE[$n]}" >/dev/null 2>&1 && return 0
    done
    return 1
}

do_down() {
    local n pid sock quiet=${1:-}
    for n in "${NAMES[@]}"; do
        if pid=$(daemon_pid "$n"); then
            [[ -n $quiet ]] || snic_log "stopping $n (pid $pid)"
            snic_stop_pid "$pid" || snic_warn "$n (pid $pid) would not stop"
        fi
    done
    # Anything else still running inside the namespaces is ours too.
    local ns
    for ns in "$NETNS" "${HOST_NETNS[@]}"; do
        netns_exists "$ns" || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            [[ -n $quiet ]] || snic_log "stopping pid $pid left in $ns"
            snic_stop_pid "$pid" || snic_warn "pid $pid in $ns would not stop"
        done
        ip netns delete "$ns"
    done
    for n in "${NAMES[@]}"; do
        # Deleting the namespace removes both veth ends; these are only
        # found after an interrupted setup in the root namespace.
        if ip link show "${IFACE[$n]}" >/dev/null 2>&1; then
            ip link delete "${IFACE[$n]}" 2>/dev/null || true
        fi
        for sock in "/run/snic/$n.sock" "${HOST_DIR[$n]}/$n.sock"; do
            if [[ -e $sock ]] && snic_ctl_ready "$sock"; then
                snic_warn "$sock is answered by a daemon that is not part of the devnet; left in place"
            else
                rm -f "$sock" "$sock.lock"
            fi
        done
        rmdir "${HOST_DIR[$n]}" 2>/dev/null || true
        # What DPDK leaves behind after a SIGKILL: runtime dir and hugepage files.
        rm -rf "/var/run/dpdk/snic-$n"
        rm -f "/dev/hugepages/snic-${n}map_"*
    done
    rm -rf "$STATE"
}

start_daemon() {
    local n=$1 log pid pmd
    local -a mem
    read -r -a mem <<<"$(snic_eal_mem_args)"
    log=$(log_file "$n")
    pmd=$(snic_veth_pmd)
    # nohup and `ip netns exec` exec in place, so $! is snicd's pid (which
    # wait_daemon checks against the pid snicd reports).
    if [[ $(mode) == hosts ]]; then
        # The kernel's address on the interface is the port's (shared).
        nohup ip netns exec "$(netns_of "$n")" "$SNICD" -l "${LCORE[$n]}" --no-pci "${mem[@]}" -- \
            --name "$n" --ctrl "$(ctrl_sock "$n")" \
            --port "iface=${IFACE[$n]},shared" --idle-backoff 100 \
            </dev/null >"$log" 2>&1 &
        pmd="af_xdp, shared with the kernel,"
    else
        nohup ip netns exec "$NETNS" "$SNICD" -l "${LCORE[$n]}" --no-pci \
            "--vdev=$(snic_veth_vdev "$pmd" 0 "${IFACE[$n]}")" "${mem[@]}" -- \
            --name "$n" --ctrl "$(ctrl_sock "$n")" \
            --port "0,ip=${IP[$n]}" --idle-backoff 100 \
            </dev/null >"$log" 2>&1 &
    fi
    pid=$!
    printf '%s\n' "$pid" >"$(pid_file "$n")"
    snic_log "started $n (pid $pid, $pmd on ${IFACE[$n]}, log $log)"
}

# Fails with the log tail when daemon $1 does not answer within the bound.
wait_daemon() {
    local n=$1 pid log
    pid=$(<"$(pid_file "$n")")
    log=$(log_file "$n")
    if snic_wait_ready "$(ctrl_sock "$n")" "$READY_TRIES" "$pid"; then
        return 0
    fi
    if snic_pid_alive "$pid"; then
        printf '%s: error: %s (pid %s) did not answer on %s within %s s; last lines of %s:\n' \
            "$SNIC_PROG" "$n" "$pid" "$(ctrl_sock "$n")" "$((READY_TRIES / 10))" "$log" >&2
    else
        printf '%s: error: %s exited before it became ready; last lines of %s:\n' \
            "$SNIC_PROG" "$n" "$log" >&2
    fi
    tail -n 20 "$log" | sed 's/^/    /' >&2
    return 1
}

do_up() {
    local want=$1 n all_up=1
    for n in "${NAMES[@]}"; do
        daemon_up "$n" || all_up=0
    done
    if ((all_up)) && [[ $(mode) == "$want" ]] && netns_exists "$(netns_of snicA)"; then
        snic_log "devnet is already up"
        do_status
        return 0
    fi
    if leftovers_exist; then
        snic_log "cleaning up leftovers of an earlier devnet"
        do_down quiet
    fi

    local out
    if ! out=$(snic_build 2>&1); then
        printf '%s\n' "$out" >&2
        snic_die "build failed"
    fi
    [[ -x $SNICD ]] || snic_die "$SNICD was not built"
    [[ -x $SNICCTL ]] || snic_die "$SNICCTL was not built"

    mkdir -p "$STATE"
    printf '%s\n' "$want" >"$STATE/mode"
    if [[ $want == hosts ]]; then
        if [[ $(snic_veth_pmd) != af_xdp ]]; then
            rm -rf "$STATE"
            snic_die "--hosts needs AF_XDP (XDP sockets in the kernel, DPDK's net_af_xdp): not here"
        fi
        ip link add "${IFACE[snicA]}" type veth peer name "${IFACE[snicB]}"
        for n in "${NAMES[@]}"; do
            local ns=${HOST_NETNS[$n]}
            ip netns add "$ns"
            ip -n "$ns" link set lo up
            ip link set "${IFACE[$n]}" netns "$ns"
            ip netns exec "$ns" sysctl -q -w "net.ipv6.conf.${IFACE[$n]}.disable_ipv6=1"
            ip -n "$ns" addr add "${IP[$n]}" dev "${IFACE[$n]}"
            ip -n "$ns" link set "${IFACE[$n]}" up
            mkdir -p "${HOST_DIR[$n]}"
        done
    else
        ip netns add "$NETNS"
        ip -n "$NETNS" link set lo up
        ip -n "$NETNS" link add "${IFACE[snicA]}" type veth peer name "${IFACE[snicB]}"
        for n in "${NAMES[@]}"; do
            ip netns exec "$NETNS" sysctl -q -w "net.ipv6.conf.${IFACE[$n]}.disable_ipv6=1"
            ip -n "$NETNS" link set "${IFACE[$n]}" up
        done
    fi
    for n in "${NAMES[@]}"; do
        start_daemon "$n"
    done
    for n in "${NAMES[@]}"; do
        if ! wait_daemon "$n"; then
            do_down quiet
            exit 1
        fi
    done
    snic_log "devnet is up"
    do_status
}

# One line per daemon, parsed from `snicctl status`:
#   NAME up pid PID ip IP mac MAC ctrl SOCK devices DEVICES
#   NAME down
do_status() {
    local n out line rc=0
    for n in "${NAMES[@]}"; do
        if out=$("$SNICCTL" -s "$(ctrl_sock "$n")" status 2>/dev/null); then
            line=$(awk -v name="$n" '
                $1 == "snicd" { pid = $4; for (i = 1; i < NF; i++) if ($i == "ctrl") ctrl = $(i + 1) }
                $1 == "port" && ip == "" {
                    for (i = 1; i < NF; i++) {
                        if ($i == "ip") ip = $(i + 1)
                        if ($i == "mac") mac = $(i + 1)
                        if ($i == "devices") dev = $(i + 1)
                    }
                }
                END { printf "%s up pid %s ip %s mac %s ctrl %s devices %s\n", name, pid, ip, mac, ctrl, dev }
            ' <<<"$out")
            printf '%s\n' "$line"
        else
            printf '%s down\n' "$n"
            rc=3
        fi
    done
    return "$rc"
}

# Runs CMD on host $1 (A or B) of a --hosts devnet, with its socket directory.
do_exec() {
    local host=${1:-} n
    case $host in
        A | a | snicA) n=snicA ;;
        B | b | snicB) n=snicB ;;
        *) snic_die "exec: which host? A or B, not '$host'" ;;
    esac
    shift
    [[ ${1:-} == -- ]] && shift
    (($#)) || snic_die "exec $host: no command (scripts/devnet.sh exec $host -- CMD...)"
    [[ $(mode) == hosts ]] || snic_die "exec needs a devnet with hosts (scripts/devnet.sh up --hosts)"
    netns_exists "${HOST_NETNS[$n]}" || snic_die "host $host is not up"
    exec ip netns exec "${HOST_NETNS[$n]}" env SNIC_SOCKET_DIR="${HOST_DIR[$n]}" "$@"
}

cmd=${1:-}
case $cmd in
    up)
        snic_require_root
        case ${2:-} in
            --hosts) do_up hosts ;;
            '') do_up single ;;
            *) usage >&2; exit 2 ;;
        esac
        ;;
    exec) shift; snic_require_root; do_exec "$@" ;;
    down)
        snic_require_root
        do_down
        snic_log "devnet is down"
        ;;
    status) do_status ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
