#!/usr/bin/env bash
# Where the datapath's instructions go: runs one snicd on the virtual wire under
# callgrind, counting only the RoCEv2 transport's work on its lcore (received
# packets to the engines, and the engines' polls: requester, responder,
# completer, ICRC, framing, copies), drives it with rdma-core's perftest under
# snic-run, and prints instructions per operation, in total and for the
# functions that cost most (inclusive), and the busy part alone: received
# packets and the polls of QPs with work, without the empty polls, whose number
# follows the run's timing. Needs valgrind (scripts/setup.sh).
# With --iwarp, the same for iWARP over snic's TCP instead: counting the TCP
# service's work (segments received, the stack's polls: TCP sender and receiver)
# and the iWARP transport's (its QPs: RDMAP, DDP, MPA's framing and CRC), driven
# by snic-perf -R --loopback between the ports' iWARP devices, as scripts/bench.py
# measures them.
#
#   scripts/profile.sh [--no-deps] [--no-build] [-n ITERS] [--iwarp]
#
# Output: build/profile/<workload>.callgrind (open with callgrind_annotate or
# kcachegrind) and the table on stdout. Run as root; takes a few minutes.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,19s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

setup_args=()
iters=1000
iwarp=0
while (($#)); do
    case $1 in
        --no-deps | --no-build) setup_args+=("$1") ;;
        --iwarp) iwarp=1 ;;
        -n) iters=${2:?-n needs a number}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $iters =~ ^[1-9][0-9]*$ ]] || snic_die "-n takes a positive number, not '$iters'"

snic_require_root
"$SNIC_ROOT/scripts/setup.sh" "${setup_args[@]}"
command -v valgrind >/dev/null || snic_die "valgrind is missing (scripts/setup.sh installs it)"

NAME=snic-prof
out_dir=$SNIC_BUILD/profile
mkdir -p "$out_dir"
mkdir -p /run/snic
sock_dir=$(mktemp -d /run/snic/prof.XXXXXX)
raw=$out_dir/callgrind.out
rm -f "$raw" "$raw".*
if ((iwarp)); then
    counted=(--toggle-collect='snic::daemon::TcpService::on_tcp*'
        --toggle-collect='snic::daemon::TcpService::poll*'
        --toggle-collect='snic::daemon::IwarpTransport::poll*')
else
    counted=(--toggle-collect='snic::daemon::RoceTransport::receive*'
        --toggle-collect='snic::daemon::RoceTransport::poll*')
fi
valgrind --tool=callgrind --callgrind-out-file="$raw" --collect-atstart=no "${counted[@]}" \
    "$SNICD" -l 0 --no-pci --no-huge -m 512 --no-shconf -- --name "$NAME" \
    --ctrl "$sock_dir/$NAME.sock" --wire --port wire0,ip=198.18.45.1/24,mtu=9000 \
    --port wire1,ip=198.18.45.2/24,mtu=9000 --idle-backoff 200 </dev/null >"$out_dir/snicd.log" 2>&1 &
pid=$!
cleanup() {
    snic_stop_pid "$pid" >/dev/null || true
    rm -rf "$sock_dir"
}
trap cleanup EXIT
snic_wait_ready "$sock_dir/$NAME.sock" 1200 "$pid" ||
    snic_die "snicd did not start under valgrind: $(tail -3 "$out_dir/snicd.log")"

# workload name, operations it makes, perftest tool (or snic-perf test, --iwarp) and arguments
if ((iwarp)); then
    workloads=(
        "iwarp-send-8B-roundtrip|$iters|send_lat -s 8 -n $iters"
        "iwarp-write-64KiB|$iters|write_bw -s 65536 -n $iters"
        "iwarp-read-4KiB|$iters|read_lat -s 4096 -n $iters"
    )
else
    workloads=(
        "send-8B-roundtrip|$iters|ib_send_lat -s 8 -e -n $iters"
        "write-64KiB|$iters|ib_write_bw -s 65536 -n $iters"
        "read-4KiB|$iters|ib_read_lat -s 4096 -n $iters"
        "write-64B|$((iters * 10))|ib_write_bw -s 64 -n $((iters * 10))"
    )
fi
port=18650
summary=()
for w in "${workloads[@]}"; do
    IFS='|' read -r label ops cmd <<<"$w"
    callgrind_control --zero "$pid" >/dev/null 2>&1
    if ((iwarp)); then
        # Both ends in snic-perf's one thread, connected through rdma_cm (the ports'
        # addresses are also their RoCE devices': SNIC_DEVICES shows it the iWARP ones).
        # shellcheck disable=SC2086
        SNIC_SOCKET_DIR=$sock_dir SNIC_DEVICES="${NAME}_iw0,${NAME}_iw1" timeout 600 \
            "$SNIC_BUILD/tools/perf/snic-perf" $cmd --loopback -d "${NAME}_iw0" \
            --peer-device "${NAME}_iw1" -R --source_ip 198.18.45.1 --listen_ip 198.18.45.2 \
            -p $((port++)) </dev/null >"$out_dir/$label.perftest" 2>&1 ||
            snic_die "snic-perf $cmd failed: $(tail -3 "$out_dir/$label.perftest")"
    else
        # shellcheck disable=SC2086
        snic_perftest "$sock_dir" "${NAME}_0" "${NAME}_1" $((port++)) $cmd >"$out_dir/$label.perftest" ||
            snic_die "$cmd failed: $(tail -3 "$out_dir/$label.perftest")"
    fi
    callgrind_control --dump="$label" "$pid" >/dev/null 2>&1
    for ((i = 0; i < 100; i++)); do
        dump=$(grep -l "^desc: Trigger: Client Request: dump $label\|^desc: Trigger: dump $label" "$raw".* 2>/dev/null | head -1 || true)
        [[ -n $dump ]] && break
        sleep 0.1
    done
    [[ -n $dump ]] || snic_die "callgrind wrote no dump for $label"
    mv "$dump" "$out_dir/$label.callgrind"
    summary+=("$label" "$ops" "$out_dir/$label.callgrind")
done

python3 - "$iwarp" "${summary[@]}" <<'PY'
import re, subprocess, sys

def inclusive(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    total, rows = 0, []
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\([\s\d.]+%\)\s+(PROGRAM TOTALS|\S.*)$", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        if m.group(2) == "PROGRAM TOTALS":
            total = n
            continue
        fn = m.group(2).split(":", 1)[-1].split(" [")[0]
        fn = re.sub(r"\((?!anonymous).*$", "", fn).strip()
        if not fn:
            continue
        rows.append((n, fn))
    return total, rows

skip = ("main", "__libc_start", "(below main)", "Lcore::run", "0x0")
iwarp = sys.argv[1] == "1"
where = "iWARP's TCP service and transport" if iwarp else "the transport"
received = "TcpService::on_tcp" if iwarp else "RoceTransport::receive"
args = sys.argv[2:]
for i in range(0, len(args), 3):
    label, ops, path = args[i], int(args[i + 1]), args[i + 2]
    total, rows = inclusive(path)
    print(f"{label}: {total / ops:,.0f} instructions per operation in {where} "
          f"({total:,} over {ops} operations)")
    # The same without the empty polls, whose number follows the run's timing (a client
    # waiting on completion events leaves the lcore polling): received packets plus the
    # turns of the QPs that had work.
    busy = sum(max((n for n, fn in rows if fn.endswith(name)), default=0)
               for name in (received, "QpScheduler::run_ready"))
    print(f"  {busy / ops:>10,.0f}  busy: received packets and the polls of QPs with work")
    seen = set()
    for n, fn in rows:
        if any(s in fn for s in skip) or fn in seen:
            continue
        seen.add(fn)
        print(f"  {n / ops:>10,.0f}  {fn}")
        if len(seen) == 14:
            break
PY
