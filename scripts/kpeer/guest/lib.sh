#!/bin/bash
# Helpers for the host's commands in the kernel-peer guest (sourced by /kp/agent.sh).

# kp_bg NAME CMD...: starts CMD in the background; its output goes to /tmp/NAME.log and its
# exit code to /tmp/NAME.rc when it ends.
kp_bg() {
    local name=$1
    shift
    rm -f "/tmp/$name.rc" "/tmp/$name.log"
    ( "$@"; echo $? >"/tmp/$name.rc" ) >"/tmp/$name.log" 2>&1 </dev/null &
}

# kp_wait NAME SECONDS: waits for kp_bg's NAME to end, prints its output, returns its exit
# code (124 when it did not end in time; then it is killed).
kp_wait() {
    local name=$1 end=$((SECONDS + $2))
    while [[ ! -f /tmp/$name.rc ]] && ((SECONDS < end)); do sleep 0.2; done
    cat "/tmp/$name.log"
    if [[ ! -f /tmp/$name.rc ]]; then
        pkill -f "$name" 2>/dev/null
        echo "kp_wait: $name did not end in $2 s"
        return 124
    fi
    return "$(<"/tmp/$name.rc")"
}

# kp_listening PORT SECONDS: waits until something listens on TCP port PORT (a perftest or
# ibv_rc_pingpong server's side channel, or an iWARP listener of siw's, which is a kernel
# TCP socket) or an rdma_cm id listens on PORT (RoCE); 1 if nothing did in time.
kp_listening() {
    local port=$1 end=$((SECONDS + $2))
    while ((SECONDS < end)); do
        ss -Hltn "sport = :$port" | grep -q . && return 0
        rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN.*src-addr [0-9.]*:$port\b" && return 0
        sleep 0.2
    done
    echo "kp_listening: nothing listens on port $port after $2 s"
    return 1
}

# kp_gid: the GID index of the RDMA device's RoCEv2 GID of eth0's IPv4 address (rxe).
kp_gid() {
    local i g t
    for i in $(seq 0 15); do
        g=$(cat "/sys/class/infiniband/rxe0/ports/1/gids/$i" 2>/dev/null) || continue
        t=$(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i" 2>/dev/null)
        if [[ $g == 0000:0000:0000:0000:0000:ffff:* && $t == "RoCE v2" ]]; then
            echo "$i"
            return 0
        fi
    done
    echo 1
}
