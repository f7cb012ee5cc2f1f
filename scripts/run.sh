#!/usr/bin/env bash
# The main job: sets the machine up (packages, hugepages, build; idempotent),
# then runs one snicd on the in-process virtual wire. The daemon resolves the
# far port's address by ARP and measures ICMP echo round trips across the
# wire, prints the result and exits. Exits with snicd's exit code. Run as root.
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
exit "$rc"
