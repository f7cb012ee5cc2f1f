#!/usr/bin/env bash
# snic's TCP beside the kernel's over one veth pair into a namespace: N bytes (1 GiB by
# default) each way, byte-exact (the receiver's CRC-32 and count checked by the sender):
#
#   kernel -> kernel   tcp_peer.py client in the namespace, server on the root side's veth end
#   kernel <- kernel   the other way round
#   snic -> kernel     snicd --selftest tcp-send against tcp_peer.py server in the namespace
#   kernel -> snic     tcp_peer.py client against snicd --selftest tcp-sink
#
# Prints one row per run: MB/s, seconds, and each side's retransmitted segments (snic's from
# its self-test, the kernel's from TCP_INFO's tcpi_total_retrans and, in parentheses, nstat's
# TcpRetransSegs of the namespace: the root namespace's counters are the whole host's), then
# snic's rows as ratios of the kernel's two (the root side sending, and the namespace's).
# With --faults, snicd's port also drops, reorders and duplicates (1%, 1%, 0.1%) both ways.
# snicd drives its veth end with net_af_xdp where the kernel has XDP sockets, else
# net_af_packet (SNIC_VETH_PMD=af_packet|af_xdp chooses, as for the devnet).
# --rtt US makes each round trip US microseconds longer: snicd's port holds what it receives
# that long (delay=US), and the kernel-to-kernel rows, for which no snicd runs, have their
# namespace's end hold its frames as long with netem where the kernel has it (else they
# run without, and say so). A path whose bandwidth-delay product is past snic's default
# windows: --snicd-args "--tcp-window-rtt US" sizes them for it.
# --snicd-args gives snicd more options (one word list, e.g. "--tcp-rto-min 5").
# Uses the build in $SNIC_BUILD (default build/). Run as root.
#
#   scripts/tcp-bench.sh [--bytes N] [--faults] [--rtt US] [--snicd-args ARGS]
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,25s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

bytes=${SNIC_TCP_BYTES:-1073741824}
faults=""
rtt=""
extra=()
while (($#)); do
    case $1 in
        --bytes) bytes=${2:?--bytes needs a number}; shift ;;
        --faults) faults=",loss=0.01,reorder=0.01,dup=0.001,seed=7" ;;
        --rtt)
            rtt=${2:?--rtt needs microseconds}; shift
            [[ $rtt =~ ^[1-9][0-9]*$ ]] || snic_die "--rtt: not microseconds: $rtt" ;;
        --snicd-args) read -r -a extra <<<"${2:?--snicd-args needs a value}"; shift ;;
        -h | --help) usage; exit 0 ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

snic_require_root
[[ -x $SNICD ]] || snic_die "$SNICD is not built (ninja -C $SNIC_BUILD)"

peer=$SNIC_ROOT/tests/integration/tcp_peer.py
py=/usr/bin/python3
ns=snic-tcpb$$
host=tcpbh$$
nsif=tcpbp$$
kip=198.18.9.1     # the kernel in the namespace
hip=198.18.9.2     # the root side: the kernel for kernel-to-kernel, snic otherwise
name=tcpbench$$
sock=/run/snic/$name.sock
snicd_pid=""
srv_pid=""

cleanup() {
    [[ -n $srv_pid ]] && kill "$srv_pid" 2>/dev/null && wait "$srv_pid" 2>/dev/null
    [[ -n $snicd_pid ]] && snic_stop_pid "$snicd_pid"
    ip netns delete "$ns" 2>/dev/null || true
    ip link delete "$host" 2>/dev/null || true
    rm -f "$sock" "$sock.lock"
}
trap cleanup EXIT

ip netns add "$ns"
ip -n "$ns" link set lo up
ip link add "$host" type veth peer name "$nsif"
ip link set "$nsif" netns "$ns"
sysctl -q -w "net.ipv6.conf.$host.disable_ipv6=1"
ip netns exec "$ns" sysctl -q -w "net.ipv6.conf.$nsif.disable_ipv6=1"
ip -n "$ns" addr add "$kip/24" dev "$nsif"
ip link set "$host" up
ip -n "$ns" link set "$nsif" up
# af_packet hands snicd the kernel's segments as it left them: no checksum offload there.
ip netns exec "$ns" ethtool -K "$nsif" tx off >/dev/null
port_extra=$faults
if [[ -n $rtt ]]; then
    port_extra+=",delay=$rtt"
    # A queue deep enough for a second's frames at the veth's speed: netem's 1,000 would drop.
    if ! ip netns exec "$ns" tc qdisc add dev "$nsif" root netem delay "${rtt}us" limit 1000000 \
        2>/dev/null; then
        printf 'no netem in this kernel: the kernel -> kernel rows run without the delay\n'
    fi
fi

retrans() { # nstat's TcpRetransSegs in namespace $1 since the last call
    local n
    n=$(ip netns exec "$1" nstat -z TcpRetransSegs)
    awk '$1 == "TcpRetransSegs" { print $2; found = 1 } END { if (!found) print 0 }' <<<"$n"
}
json() { # json FIELD: from the last JSON line on stdin
    "$py" -c 'import json,sys; print(json.loads([l for l in sys.stdin if l.startswith("{")][-1])[sys.argv[1]])' "$1"
}
row() {
    printf '%-18s %10s %9s %18s %18s\n' "$@"
}

row "run" "MB/s" "seconds" "retrans (sender)" "retrans (receiver)"

# --- kernel to kernel over the same veth -------------------------------------------------
ip addr add "$hip/24" dev "$host"
retrans "$ns" >/dev/null
"$py" "$peer" server 5001 >/tmp/$name.srv &
srv_pid=$!
for _ in $(seq 100); do grep -q listening /tmp/$name.srv 2>/dev/null && break; sleep 0.1; done
out=$(ip netns exec "$ns" "$py" "$peer" client "$hip" 5001 "$bytes")
wait "$srv_pid"; srv_pid=""
[[ $(json answer <<<"$out") == "$bytes $(json crc32 <<<"$out")" ]] || snic_die "kernel -> kernel: wrong answer"
k_in=$(json MBps </tmp/$name.srv)
row "kernel -> kernel" "$(printf '%.1f' "$(json MBps </tmp/$name.srv)")" "$(printf '%.2f' "$(json seconds </tmp/$name.srv)")" \
    "$(json total_retrans <<<"$out") ($(retrans "$ns"))" "-"

ip netns exec "$ns" "$py" "$peer" server 5001 >/tmp/$name.srv &
srv_pid=$!
for _ in $(seq 100); do grep -q listening /tmp/$name.srv 2>/dev/null && break; sleep 0.1; done
out=$("$py" "$peer" client "$kip" 5001 "$bytes")
wait "$srv_pid"; srv_pid=""
k_out=$(json MBps </tmp/$name.srv)
row "kernel <- kernel" "$(printf '%.1f' "$(json MBps </tmp/$name.srv)")" "$(printf '%.2f' "$(json seconds </tmp/$name.srv)")" \
    "$(json total_retrans <<<"$out")" "- ($(retrans "$ns"))"
ip addr del "$hip/24" dev "$host"

# --- snic -------------------------------------------------------------------------------
read -r -a mem <<<"$(snic_eal_mem_args)"
pmd=$(snic_veth_pmd)
vdev=$(snic_veth_vdev "$pmd" 0 "$host")
eal=(-l 0 --no-pci "--vdev=$vdev" "${mem[@]}")

ip netns exec "$ns" "$py" "$peer" server 5001 >/tmp/$name.srv &
srv_pid=$!
for _ in $(seq 100); do grep -q listening /tmp/$name.srv 2>/dev/null && break; sleep 0.1; done
retrans "$ns" >/dev/null
"$SNICD" "${eal[@]}" -- --name "$name" --ctrl "$sock" --no-dev-nodes --port "0,ip=$hip/24$port_extra" "${extra[@]}" \
    --selftest "tcp-send,dst=$kip:5001,bytes=$bytes,json" >/tmp/$name.snicd 2>&1 ||
    snic_die "snicd tcp-send failed: $(tail -3 /tmp/$name.snicd)"
wait "$srv_pid"; srv_pid=""
s=$(grep '^{"test":"tcp-send"' /tmp/$name.snicd)
s_out=$(json MBps <<<"$s")
row "snic -> kernel" "$(printf '%.1f' "$(json MBps <<<"$s")")" "$(printf '%.2f' "$(json seconds <<<"$s")")" \
    "$(json retransmits <<<"$s") (rto $(json timeouts <<<"$s"), tlp $(json probes <<<"$s"))" "- ($(retrans "$ns"))"

"$SNICD" "${eal[@]}" -- --name "$name" --ctrl "$sock" --no-dev-nodes --port "0,ip=$hip/24$port_extra" "${extra[@]}" \
    --idle-backoff 20 --selftest "tcp-sink,port=5002,json" >/tmp/$name.snicd 2>&1 &
snicd_pid=$!
snic_wait_ready "$sock" 300 "$snicd_pid" || snic_die "snicd did not start: $(tail -3 /tmp/$name.snicd)"
retrans "$ns" >/dev/null
out=$(ip netns exec "$ns" "$py" "$peer" client "$hip" 5002 "$bytes")
wait "$snicd_pid" || snic_die "snicd tcp-sink failed: $(tail -3 /tmp/$name.snicd)"
snicd_pid=""
[[ $(json answer <<<"$out") == "$bytes $(json crc32 <<<"$out")" ]] || snic_die "kernel -> snic: wrong answer"
s=$(grep '^{"test":"tcp-sink"' /tmp/$name.snicd)
secs=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["connections"][0]["seconds"])' "$s")
mbps=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["connections"][0]["MBps"])' "$s")
row "kernel -> snic" "$(printf '%.1f' "$mbps")" "$(printf '%.2f' "$secs")" \
    "$(json total_retrans <<<"$out") ($(retrans "$ns"))" "-"
rm -f /tmp/$name.srv /tmp/$name.snicd
ratio() { "$py" -c 'import sys; print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}x")' "$1" "$2"; }
printf '\nsnic on %s; ratios to the kernel sending from the same side, and from the other:\n' "$pmd"
printf '  snic -> kernel: %s of kernel <- kernel, %s of kernel -> kernel\n' \
    "$(ratio "$s_out" "$k_out")" "$(ratio "$s_out" "$k_in")"
printf '  kernel -> snic: %s of kernel -> kernel, %s of kernel <- kernel\n' \
    "$(ratio "$mbps" "$k_in")" "$(ratio "$mbps" "$k_out")"
