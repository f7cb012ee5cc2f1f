#!/usr/bin/env bash
# A development network on one machine: two snicd daemons joined by a veth
# pair inside the network namespace snic-devnet.
#
#   scripts/devnet.sh up       build if needed, start snicA and snicB, wait until both answer
#   scripts/devnet.sh status   one line per daemon (exit 0 when both are up, 3 otherwise)
#   scripts/devnet.sh down     stop both daemons, remove the namespace and the state
#
#   snicA  198.18.0.1/24  on snicA-v  lcore 0  control socket /run/snic/snicA.sock
#   snicB  198.18.0.2/24  on snicB-v  lcore 1  control socket /run/snic/snicB.sock
#
# Each daemon drives its veth end with net_af_xdp where the kernel has XDP sockets,
# else net_af_packet (SNIC_VETH_PMD=af_packet|af_xdp chooses). Logs and pid files:
# /run/snic/devnet/. `up` recovers from an unclean stop; `down` is idempotent. Run
# as root.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NETNS=snic-devnet
STATE=/run/snic/devnet
NAMES=(snicA snicB)
declare -A IFACE=([snicA]=snicA-v [snicB]=snicB-v)
declare -A IP=([snicA]=198.18.0.1/24 [snicB]=198.18.0.2/24)
declare -A LCORE=([snicA]=0 [snicB]=1)
READY_TRIES=300 # x 0.1 s

usage() {
    sed -n '2,15s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

ctrl_sock() { printf '/run/snic/%s.sock\n' "$1"; }
pid_file() { printf '%s/%s.pid\n' "$STATE" "$1"; }
log_file() { printf '%s/%s.log\n' "$STATE" "$1"; }

netns_exists() {
    ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$NETNS"
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
        [[ -e $(ctrl_sock "$n") ]] && return 0
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
    # Anything else still running inside the namespace is ours too.
    if netns_exists; then
        for pid in $(ip netns pids "$NETNS" 2>/dev/null); do
            [[ -n $quiet ]] || snic_log "stopping pid $pid left in $NETNS"
            snic_stop_pid "$pid" || snic_warn "pid $pid in $NETNS would not stop"
        done
        ip netns delete "$NETNS"
    fi
    for n in "${NAMES[@]}"; do
        # Deleting the namespace removes both veth ends; these are only
        # found after an interrupted setup in the root namespace.
        if ip link show "${IFACE[$n]}" >/dev/null 2>&1; then
            ip link delete "${IFACE[$n]}" 2>/dev/null || true
        fi
        sock=$(ctrl_sock "$n")
        if [[ -e $sock ]] && snic_ctl_ready "$sock"; then
            snic_warn "$sock is answered by a daemon that is not part of the devnet; left in place"
        else
            rm -f "$sock" "$sock.lock"
        fi
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
    nohup ip netns exec "$NETNS" "$SNICD" -l "${LCORE[$n]}" --no-pci \
        "--vdev=net_${pmd}0,iface=${IFACE[$n]}" "${mem[@]}" -- \
        --name "$n" --ctrl "$(ctrl_sock "$n")" \
        --port "0,ip=${IP[$n]}" --idle-backoff 100 \
        </dev/null >"$log" 2>&1 &
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
    local n all_up=1
    for n in "${NAMES[@]}"; do
        daemon_up "$n" || all_up=0
    done
    if ((all_up)) && netns_exists; then
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
    ip netns add "$NETNS"
    ip -n "$NETNS" link set lo up
    ip -n "$NETNS" link add "${IFACE[snicA]}" type veth peer name "${IFACE[snicB]}"
    for n in "${NAMES[@]}"; do
        ip netns exec "$NETNS" sysctl -q -w "net.ipv6.conf.${IFACE[$n]}.disable_ipv6=1"
        ip -n "$NETNS" link set "${IFACE[$n]}" up
    done
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

cmd=${1:-}
case $cmd in
    up) snic_require_root; do_up ;;
    down)
        snic_require_root
        do_down
        snic_log "devnet is down"
        ;;
    status) do_status ;;
    -h | --help | help) usage ;;
    *) usage >&2; exit 2 ;;
esac
