#!/usr/bin/env bash
# The kernel's side of the benchmark: a veth pair between two namespaces,
# snic-kping-a (198.18.7.1/24) and snic-kping-b (198.18.7.2/24), for snic-kping's
# TCP and UDP ping-pong. Idempotent; traffic stays on this machine. Run as root.
#
#   scripts/kping-net.sh up|down|status
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

NS_A=snic-kping-a
NS_B=snic-kping-b
IP_A=198.18.7.1
IP_B=198.18.7.2

usage() {
    sed -n '2,6s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

ns_exists() { ip netns list 2>/dev/null | awk '{ print $1 }' | grep -qx "$1"; }

up() {
    for ns in "$NS_A" "$NS_B"; do ns_exists "$ns" || ip netns add "$ns"; done
    if ! ip -n "$NS_A" link show kp-a >/dev/null 2>&1; then
        ip link add kp-a netns "$NS_A" type veth peer name kp-b netns "$NS_B"
    fi
    ip -n "$NS_A" addr replace "$IP_A/24" dev kp-a
    ip -n "$NS_B" addr replace "$IP_B/24" dev kp-b
    for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
    ip -n "$NS_A" link set kp-a up
    ip -n "$NS_B" link set kp-b up
    # Returns once the path answers (the veths come up asynchronously).
    local i
    for ((i = 0; i < 100; i++)); do
        ip netns exec "$NS_A" ping -c 1 -W 1 -q "$IP_B" >/dev/null 2>&1 && return 0
    done
    snic_die "$IP_B does not answer from $NS_A"
}

# Stops what still runs in the namespaces (a server left by a failed run would keep its
# namespace, and the veth, alive after the name is gone), then removes them.
down() {
    local ns pid
    for ns in "$NS_A" "$NS_B"; do
        ns_exists "$ns" || continue
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
        ip netns delete "$ns"
    done
    return 0
}

snic_require_root
case ${1:-} in
    up) up ;;
    down) down ;;
    status)
        for ns in "$NS_A" "$NS_B"; do
            ns_exists "$ns" && ip -n "$ns" -br addr show || echo "$ns: absent"
        done ;;
    -h | --help) usage ;;
    *) usage >&2; exit 2 ;;
esac
