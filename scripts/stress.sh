#!/usr/bin/env bash
# RC stress at full size (RoCEv2, or iWARP with --iwarp): one snicd on the in-process
# virtual wire, with faults injected on wire1, and snic-rc-stress (tests/stress/rc_stress.cc)
# between its two ports: SEND, WRITE, WRITE with immediate, READ and atomics in both
# directions, several in flight, every byte and every completion checked. Prints the program's summary and the
# daemon's counters for each port, stops the daemon (also when the run fails or is
# interrupted) and exits with the program's exit code. Run as root.
#
#   scripts/stress.sh [--no-deps] [--no-build] [--clean] [--faults SPEC] [--iwarp]
#                     [--arp-timeout SEC] [--snicd-args ARGS] [-- SNIC-RC-STRESS-OPTIONS...]
#
#   --clean            no faults on the wire
#   --iwarp            over the ports' iWARP devices (NAME_iw0, NAME_iw1, connected through
#                      rdma_cm; SNIC_DEVICES names them) instead of RoCEv2
#   --faults SPEC      wire1's faults (default loss=0.05,dup=0.01,reorder=0.01,corrupt=0.005,seed=7)
#   --arp-timeout SEC  snicd's ARP entry lifetime (default: snicd's own, 60 s)
#   --snicd-args ARGS  more of snicd's options, one word list ("--tx-in-place 256")
#   after --           options for snic-rc-stress; they come after the defaults
#                      -n 100000 -m 1048576 -t 10 --stall 60, so that -- -n 5000 -s 3 wins.
#                      SNIC_STRESS_OPS and SNIC_STRESS_MAX_SIZE also set -n and -m.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,21s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

setup_args=()
stress_args=()
faults="loss=0.05,dup=0.01,reorder=0.01,corrupt=0.005,seed=7"
arp_timeout=
snicd_extra=()
NAME=snic-stress
devices=("${NAME}_0" "${NAME}_1")
iwarp_args=()
while (($#)); do
    case $1 in
        --no-deps | --no-build) setup_args+=("$1") ;;
        --clean) faults= ;;
        --iwarp)  # an iWARP device's GID is its MAC: the program is told the addresses
            devices=("${NAME}_iw0" "${NAME}_iw1")
            iwarp_args=(--addrs 198.18.18.1,198.18.18.2)
            ;;
        --faults)
            (($# > 1)) || { printf '%s: --faults needs a value\n' "$SNIC_PROG" >&2; exit 2; }
            faults=$2
            shift
            ;;
        --arp-timeout)
            (($# > 1)) || { printf '%s: --arp-timeout needs a value\n' "$SNIC_PROG" >&2; exit 2; }
            arp_timeout=$2
            shift
            ;;
        --snicd-args)
            (($# > 1)) || { printf '%s: --snicd-args needs a value\n' "$SNIC_PROG" >&2; exit 2; }
            read -r -a snicd_extra <<<"$2"
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        --) shift; stress_args=("$@"); break ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

snic_require_root
"$SNIC_ROOT/scripts/setup.sh" "${setup_args[@]}"
STRESS=$SNIC_BUILD/tests/stress/snic-rc-stress
for b in "$SNICD" "$STRESS"; do
    [[ -x $b ]] || snic_die "$b is missing; the build did not produce it (ninja -C $SNIC_BUILD)"
done

mkdir -p /run/snic
SOCK_DIR=$(mktemp -d /run/snic/stress.XXXXXX)
CTRL=$SOCK_DIR/$NAME.sock
log=$SNIC_BUILD/$NAME.log
read -r -a mem <<<"$(snic_eal_mem_args)"
wire1="wire1,ip=198.18.18.2/24${faults:+,$faults}"
daemon_args=(--name "$NAME" --ctrl "$CTRL" --wire
    --port "wire0,ip=198.18.18.1/24" --port "$wire1" --idle-backoff 20)
[[ -n $arp_timeout ]] && daemon_args+=(--arp-timeout "$arp_timeout")
daemon_args+=("${snicd_extra[@]}")

daemon_pid=
stress_pid=
cleanup() {
    if [[ -n $stress_pid ]]; then
        kill -TERM "$stress_pid" 2>/dev/null || true
        wait "$stress_pid" 2>/dev/null || true
    fi
    if [[ -n $daemon_pid ]]; then
        snic_stop_pid "$daemon_pid" >/dev/null || snic_warn "snicd (pid $daemon_pid) did not stop"
        daemon_pid=
    fi
    rm -rf "$SOCK_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

snic_log "starting: $SNICD -l 0 --no-pci ${mem[*]} -- ${daemon_args[*]}"
"$SNICD" -l 0 --no-pci "${mem[@]}" -- "${daemon_args[@]}" </dev/null >"$log" 2>&1 &
daemon_pid=$!
snic_wait_ready "$CTRL" 300 "$daemon_pid" || snic_die "snicd did not start: $(tail -5 "$log")"

cpus=()
(($(nproc) > 1)) && cpus=(taskset -c 1)  # the program off the daemon's core
cmd=("${cpus[@]}" "$STRESS" -n "${SNIC_STRESS_OPS:-100000}" -m "${SNIC_STRESS_MAX_SIZE:-1048576}"
    -t 10 --stall 60 "${iwarp_args[@]}" "${stress_args[@]}" "${devices[@]}")
# The run's devices alone: a port's RoCE and iWARP devices share its address (rdma_cm).
snic_log "running: SNIC_SOCKET_DIR=$SOCK_DIR SNIC_DEVICES=${devices[0]},${devices[1]} ${cmd[*]}"
# In the background, so that a signal to this script is handled at once (the trap stops
# the program and the daemon) rather than after the program ends.
SNIC_SOCKET_DIR=$SOCK_DIR SNIC_DEVICES="${devices[0]},${devices[1]}" "${cmd[@]}" </dev/null &
stress_pid=$!
rc=0
wait "$stress_pid" || rc=$?
stress_pid=

# The daemon reports every port's counters when it stops: the faults it injected, the
# frames it dropped and why.
snic_stop_pid "$daemon_pid" >/dev/null || snic_warn "snicd (pid $daemon_pid) did not stop"
daemon_pid=
echo
snic_log "snicd counters${faults:+ (wire1 faults: $faults)}:"
while read -r line; do
    printf '  %s\n' "${line#snicd: }" | fold -s -w 100 | sed '2,$s/^/      /'
done < <(grep '^snicd: port ' "$log")
snic_log "snic-rc-stress exited with code $rc (snicd log: $log)"
exit "$rc"
