#!/usr/bin/env bash
# The main job: sets the machine up (packages, hugepages, build; idempotent),
# then runs one snicd on the in-process virtual wire. The daemon resolves the
# far port's address by ARP and measures ICMP echo round trips across the
# wire, prints the result and exits. Then a second snicd carries RDMA across
# the wire: rdma-core's ibv_rc_pingpong under snic-run, and snic-perf's SEND
# round trips. Exits non-zero when any step fails. Run as root.
#
#   scripts/run.sh [--no-deps] [--no-build]
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,7s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

setup_args=()
while (($#)); do
    case $1 in
        --no-deps | --no-build) setup_args+=("$1") ;;
        -h | --help) usage; exit 0 ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

snic_require_root
"$SNIC_ROOT/scripts/setup.sh" "${setup_args[@]}"
[[ -x $SNICD ]] || snic_die "$SNICD is missing; the build did not produce it"

NAME=snic-run
CTRL=/run/snic/$NAME.sock
read -r -a mem <<<"$(snic_eal_mem_args)"
log=$SNIC_BUILD/$NAME.log
cmd=("$SNICD" -l 0 --no-pci "${mem[@]}" --
    --name "$NAME" --ctrl "$CTRL" --wire
    --port "wire0,ip=198.18.1.1/24" --port "wire1,ip=198.18.1.2/24"
    --selftest "arp-ping,count=1000")

snic_log "running: ${cmd[*]}"
rc=0
"${cmd[@]}" </dev/null | tee "$log" || rc=${PIPESTATUS[0]}

echo
if result=$(grep -m1 '^selftest ' "$log"); then
    snic_log "result: $result"
fi
snic_log "snicd exited with code $rc (full output: $log)"
((rc == 0)) || exit "$rc"

# RDMA over the same wire: rdma-core's own ibv_rc_pingpong, unmodified, under
# snic-run, one device per port of the wire. Completion events (-e) let both
# ends sleep while they wait, so the daemon keeps a core of its own.
echo
RDMA_NAME=snic-run-rdma
SOCK_DIR=$(mktemp -d /run/snic/run.XXXXXX)
rdma_log=$SNIC_BUILD/$RDMA_NAME.log
"$SNICD" -l 0 --no-pci "${mem[@]}" -- --name "$RDMA_NAME" --ctrl "$SOCK_DIR/$RDMA_NAME.sock" \
    --wire --port "wire0,ip=198.18.1.1/24" --port "wire1,ip=198.18.1.2/24" \
    </dev/null >"$rdma_log" 2>&1 &
rdma_pid=$!
cleanup() {
    snic_stop_pid "$rdma_pid" >/dev/null || true
    rm -rf "$SOCK_DIR"
}
trap cleanup EXIT
snic_wait_ready "$SOCK_DIR/$RDMA_NAME.sock" 300 "$rdma_pid" || snic_die "snicd did not start: $(tail -5 "$rdma_log")"

cpus=()
(($(nproc) > 1)) && cpus=(taskset -c 1)  # the clients off the daemon's core
pingpong() {  # size iterations
    local port=$((18000 + RANDOM % 1000)) out
    SNIC_SOCKET_DIR=$SOCK_DIR "${cpus[@]}" "$SNIC_BUILD/libclient/snic-run" ibv_rc_pingpong \
        -d "${RDMA_NAME}_0" -g 0 -p "$port" -e -c -s "$1" -n "$2" >/dev/null 2>&1 &
    local server=$!
    for _ in $(seq 100); do
        if out=$(SNIC_SOCKET_DIR=$SOCK_DIR "${cpus[@]}" "$SNIC_BUILD/libclient/snic-run" \
                 ibv_rc_pingpong -d "${RDMA_NAME}_1" -g 0 -p "$port" -e -c -s "$1" -n "$2" \
                 127.0.0.1 2>&1); then
            break
        fi
        grep -q "Couldn't connect" <<<"$out" || break
        sleep 0.05  # the server is not listening yet: try again
    done
    wait "$server" || return 1
    grep -E "bytes in|iters in" <<<"$out"
}
snic_log "RDMA SEND/RECV round trips over the wire (ibv_rc_pingpong -e, data checked):"
for size in 8 4096 65536; do
    printf '  %6s B: ' "$size"
    pingpong "$size" 10000 | tr '\n' ' ' || snic_die "ibv_rc_pingpong failed at $size bytes"
    echo
done

# The bundled perf tool, one client thread alternating between the wire's two
# ports (the daemon busy-polls its core, the client the other): scripts/bench.sh
# puts these beside the raw floor and kernel TCP.
echo
snic_log "RDMA SEND round trips, snic-perf send_lat --loopback (us; data checked):"
for size in 8 4096 65536; do
    SNIC_SOCKET_DIR=$SOCK_DIR "${cpus[@]}" "$SNIC_BUILD/tools/perf/snic-perf" send_lat --loopback \
        -d "${RDMA_NAME}_0" -s "$size" -n 10000 | grep -E '^ (#bytes|[0-9])' |
        { [[ $size == 8 ]] && cat || tail -n 1; } || snic_die "snic-perf failed at $size bytes"
done
