#!/usr/bin/env bash
# The benchmark: snic beside its floor and its alternatives on this machine.
# Sets the machine up (packages, hugepages, build; idempotent), then runs
# scripts/bench.py: snic-perf --loopback over one snicd's virtual wire, the raw
# frame floor over the same wire (snicd self-tests), kernel TCP and UDP
# ping-pong over a veth pair between two namespaces, perftest under snic-run,
# the 8 B round trip beside 1, 1,000 and 10,000 idle RC QPs, the snic rows again
# over the ports' iWARP devices (snic-perf -R --loopback), and one snicd across a veth
# pair with net_af_packet and (where the kernel allows) net_af_xdp, RoCE and iWARP in
# each round. Prints one
# table, writes build/bench/results.json and two plots (latency CDF at 8 B,
# bandwidth by size). Run as root.
#
#   scripts/bench.sh [--quick] [--no-deps] [--no-build] [--out DIR] [--no-perftest] [--no-scale]
#                    [--no-iwarp] [--no-veth] [--target-rounds N]
#   scripts/bench.sh --burst-sweep ROUNDS   (only: snicd's rx/tx burst sizes against
#                    the 64 B message rate, 64 KiB bandwidth and 8 B round trip)
#   scripts/bench.sh --lanes ROUNDS   (only: the 64 B message rate of two clients at once
#                    on the wire, its ports with 1 or 2 queues on 1 or 2 lcores)
#   scripts/bench.sh --targets-only [--target-rounds N]   (only: the targets, each the
#                    median of N rounds (default 7, 3 with --quick) that measure snic and
#                    its floor one after the other, with the spread over the rounds)
#
# --quick takes about 1 minute, the full run about 2 minutes on this project's 2-core machines
# (connecting and destroying the 10,000 idle QPs of the scale rows is part of it).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,24s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

setup_args=()
bench_args=()
while (($#)); do
    case $1 in
        --no-deps | --no-build) setup_args+=("$1") ;;
        --quick | --no-perftest | --no-scale | --no-iwarp | --no-veth | --targets-only) bench_args+=("$1") ;;
        --out) bench_args+=("$1" "${2:?--out needs a directory}"); shift ;;
        --burst-sweep) bench_args+=("$1" "${2:?--burst-sweep needs a number of rounds}"); shift ;;
        --lanes) bench_args+=("$1" "${2:?--lanes needs a number of rounds}"); shift ;;
        --target-rounds) bench_args+=("$1" "${2:?--target-rounds needs a number of rounds}"); shift ;;
        -h | --help) usage; exit 0 ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

snic_require_root
"$SNIC_ROOT/scripts/setup.sh" "${setup_args[@]}"
exec /usr/bin/python3 "$SNIC_ROOT/scripts/bench.py" "${bench_args[@]}"
