#!/usr/bin/env bash
# dat.conf lines for snic's uDAPL provider (libdaplsnic): one per snic device of the
# daemons whose control sockets are in SNIC_SOCKET_DIR (default /run/snic).
#
#   scripts/dat-conf.sh              print the lines (for a private file: DAT_OVERRIDE=FILE)
#   scripts/dat-conf.sh --install    put them in /etc/dat.conf, between "# snic begin" and
#                                    "# snic end", replacing the ones a previous run put there
#   scripts/dat-conf.sh --lib PATH   the provider library to name (default: this build's,
#                                    else the installed one)
#
# A line reads:  snic-<device> u2.0 nonthreadsafe default <lib> dapl.2.0 "<device> 1" ""
# so a DAT program opens device cmt_0 as IA "snic-cmt_0". libdaplsnic links libsnic:
# DAT programs need no snic-run.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

install=0
lib=""
while (($#)); do
    case $1 in
        --install) install=1 ;;
        --lib)
            (($# >= 2)) || snic_die "--lib needs a path"
            lib=$2
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

if [[ -z $lib ]]; then
    lib=$SNIC_BUILD/dapl/libdaplsnic.so.2
    [[ -e $lib ]] || lib=/usr/local/lib/x86_64-linux-gnu/libdaplsnic.so.2
fi
[[ -e $lib ]] || snic_die "$lib is missing: build first (scripts/setup.sh) or give --lib"

snic_run=$SNIC_BUILD/libclient/snic-run
[[ -x $snic_run ]] || snic_run=$(command -v snic-run) || snic_die "snic-run is missing"
# ibv_devices under snic-run lists the devices of every daemon in SNIC_SOCKET_DIR.
mapfile -t devices < <("$snic_run" ibv_devices 2>/dev/null | awk 'NR > 2 && NF { print $1 }')
((${#devices[@]})) || snic_die "no snic device: is a snicd running (sockets in ${SNIC_SOCKET_DIR:-/run/snic})?"

lines=()
for d in "${devices[@]}"; do
    lines+=("snic-$d u2.0 nonthreadsafe default $lib dapl.2.0 \"$d 1\" \"\"")
done

if ((!install)); then
    printf '%s\n' "${lines[@]}"
    exit 0
fi

snic_require_root
conf=/etc/dat.conf
tmp=$(mktemp "$conf.XXXXXX")
trap 'rm -f "$tmp"' EXIT
if [[ -e $conf ]]; then
    awk '/^# snic begin$/ { skip = 1 } !skip { print } /^# snic end$/ { skip = 0 }' "$conf" >"$tmp"
fi
{
    echo "# snic begin"
    printf '%s\n' "${lines[@]}"
    echo "# snic end"
} >>"$tmp"
chmod 644 "$tmp"
mv "$tmp" "$conf"
trap - EXIT
snic_log "$conf: ${#lines[@]} snic provider line(s)"
