#!/usr/bin/env bash
# snic against the Linux kernel's own RDMA stacks: Debian 12's kernel in a QEMU guest with its
# soft RoCE (rxe) or soft iWARP (siw) as the peer, on a bridge with one snicd, all inside a
# network namespace of its own (nothing leaves the machine). rdma-core's ibv_rc_pingpong and
# ibv_uc_pingpong, perftest with and without -R (send, write, read, atomics where the transport
# has them, UC) and rping run with snic as the active and as the passive side; each case is
# judged by the tools' exit codes, each peer's capture by Wireshark and the checksums (ICRC,
# CRC32C). Too slow for CI (the guest runs under TCG): run it by hand for every change to the
# wire, the CM or MPA, and put its summary in docs/INTEROP.md.
#
#   scripts/kernel-peer.sh [--dev rxe|siw|both] [--only REGEX] [--side active|passive|both]
#                          [--shared] [--snicd-args ARGS] [--faults SPEC] [--queues N]
#                          [--out DIR]
#
# --snicd-args gives snicd more options (one word list, e.g. "--tx-in-place 256": payloads
# of the guest's 1024-byte path MTU then go from where they lie).
#
# --faults makes snicd's port drop, reorder, duplicate or corrupt frames both ways (a port
# spec's fault keys, e.g. "loss=0.01,reorder=0.01,dup=0.001,seed=7"): the kernel's TCP and
# siw, and rxe's retransmission, against snic's recovery.
#
# --queues N gives snicd's port N queue pairs (queues=N; net_af_packet's qpairs=N, whose
# frames the kernel spreads by a hash of each flow): the guest's packets then reach a lane
# other than their QP's and are handed on. The lanes share snicd's one lcore (the guest needs
# the other CPU).
#
# --shared runs snicd on a shared-address port (--port iface=IF,shared): the kernel has snic's
# address on snicd's veth end and snicd shares it, so the tools' TCP side channel goes to the
# same address as their RDMA (without it, snicd owns its address alone and the side channel
# goes to the host's address on the bridge).
#
# The guest image is built once into $SNIC_KPEER_DIR (default /var/cache/snic/kpeer) from
# Debian's registry (scripts/kpeer/build-guest.sh). Results: DIR (default
# build/kernel-peer): summary.md, one log per case, a pcap per peer, the guest's console.
# Exit 0 when every case and every capture passed.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '2,34s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }

out=$SNIC_BUILD/kernel-peer
run_args=()
shared=0
while (($#)); do
    case $1 in
        --shared) shared=1; run_args+=(--shared) ;;
        --dev | --only | --side) (($# >= 2)) || snic_die "$1 needs a value"; run_args+=("$1" "$2"); shift ;;
        --out) (($# >= 2)) || snic_die "--out needs a directory"; out=$2; shift ;;
        --snicd-args) (($# >= 2)) || snic_die "--snicd-args needs a value"
            export SNIC_KPEER_SNICD_ARGS=$2; shift ;;
        --faults) (($# >= 2)) || snic_die "--faults needs a spec (loss=P,reorder=P,dup=P,seed=N)"
            export SNIC_KPEER_FAULTS=$2; shift ;;
        --queues) [[ ${2:-} =~ ^[1-8]$ ]] || snic_die "--queues needs a count (1..8)"
            export SNIC_KPEER_QUEUES=$2; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; snic_die "unknown option $1" ;;
    esac
    shift
done
snic_require_root

"$SNIC_ROOT/scripts/setup.sh"
image=${SNIC_KPEER_DIR:-/var/cache/snic/kpeer}
"$SNIC_ROOT/scripts/kpeer/build-guest.sh" "$image"
command -v dumpcap >/dev/null || snic_die "dumpcap is missing (tshark's package)"

ns=snic-kpeer
br=kpbr0 tap=kptap0 veth=kpv0
cleanup() {
    if ip netns list | grep -qw "$ns"; then
        local pids
        pids=$(ip netns pids "$ns" || true)
        [[ -z $pids ]] || kill $pids 2>/dev/null || true
        sleep 0.5
        pids=$(ip netns pids "$ns" || true)
        [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
        ip netns del "$ns"
    fi
}
trap cleanup EXIT
cleanup
ip netns add "$ns"
nx() { ip netns exec "$ns" "$@"; }
nx ip link set lo up
nx ip link add "$br" type bridge
# The host's kernel on the wire: on the bridge, or (--shared) on snicd's veth end with
# snic's own address.
((shared)) || nx ip addr add 198.18.90.1/24 dev "$br"
nx ip tuntap add dev "$tap" mode tap
nx ip link add "$veth" type veth peer name "${veth}b"
for l in "$tap" "${veth}b"; do nx ip link set "$l" master "$br"; nx ip link set "$l" up; done
nx ip link set "$br" up
nx ip link set "$veth" up
((shared)) && nx ip addr add 198.18.90.11/24 dev "$veth"
# The bridge forwards at once (no STP delay) and the host's kernel stays quiet on it.
nx sysctl -q -w net.ipv6.conf.all.disable_ipv6=1
mkdir -p "$out"
rm -f "$out"/*.log "$out"/*.txt "$out"/*.pcap "$out"/summary.md
SNIC_EAL_MEM=$(snic_eal_mem_args) nx /usr/bin/python3 "$SNIC_ROOT/scripts/kpeer/run.py" \
    --image "$image" --work "$out" --iface "$veth" --tap "$tap" --bridge "$br" "${run_args[@]}"
