#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang -O1, ASan+UBSan, in build-fuzz/; only what
# changed is rebuilt) and runs each for a while, starting from its kept corpus and the seeds
# committed in tests/fuzz/corpus/<target>/. Prints libFuzzer's figures per target (runs,
# exec/s, cov:, ft:, corpus size) and exits non-zero if any target crashed; a crashing
# input is kept in <corpus dir>/artifacts/<target>/.
#
#   scripts/fuzz.sh [--seconds N] [--target NAME]... [--corpus DIR] [--no-merge]
#                   [--xml FILE] [--list]
#
#   --seconds N   time per target (default 600); 0 replays the corpus and seeds only
#   --target NAME run only this target (repeatable; names as --list prints them)
#   --corpus DIR  where the growing corpus is kept, one directory per target (default
#                 ${XDG_CACHE_HOME:-~/.cache}/snic-fuzz, outside the repository); after each
#                 run it is minimised (libFuzzer -merge=1) unless --no-merge
#   --xml FILE    also write the results as JUnit XML (one test case per target)
#
# Environment: SNIC_FUZZ_BUILD (build directory, default build-fuzz), CXX (default clang++).
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,18s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

seconds=600
targets=()
corpus_root=${XDG_CACHE_HOME:-$HOME/.cache}/snic-fuzz
merge=1
xml=
list=0
while (($#)); do
    case $1 in
        --seconds) seconds=${2:?}; shift ;;
        --target) targets+=("${2:?}"); shift ;;
        --corpus) corpus_root=${2:?}; shift ;;
        --no-merge) merge=0 ;;
        --xml) xml=${2:?}; shift ;;
        --list) list=1 ;;
        -h | --help) usage; exit 0 ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ $seconds =~ ^[0-9]+$ ]] || snic_die "--seconds wants a whole number, not $seconds"

build=${SNIC_FUZZ_BUILD:-$SNIC_ROOT/build-fuzz}
seeds=$SNIC_ROOT/tests/fuzz/corpus

# Every target: tests/fuzz/<name>.cc with a LLVMFuzzerTestOneInput.
all=()
for f in "$SNIC_ROOT"/tests/fuzz/*.cc; do
    grep -q LLVMFuzzerTestOneInput "$f" && all+=("$(basename "$f" .cc)")
done
if ((list)); then
    printf '%s\n' "${all[@]}"
    exit 0
fi
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
    [[ " ${all[*]} " == *" $t "* ]] || snic_die "no fuzz target $t (have: ${all[*]})"
done

# Build (configure once; ninja rebuilds only what changed).
if [[ ! -f $build/build.ninja ]]; then
    # -O1, as OSS-Fuzz builds: half the build time of -O2 here, and no fewer exec/s.
    snic_log "configuring $build (clang, -Dfuzz=true, ASan+UBSan, -O1)"
    CXX=${CXX:-clang++} meson setup "$build" -Dfuzz=true -Db_sanitize=address,undefined \
        -Db_lundef=false -Doptimization=1 >/dev/null
fi
ninja_targets=()
for t in "${targets[@]}"; do ninja_targets+=("tests/fuzz/fuzz_$t"); done
snic_log "building ${#targets[@]} fuzz target(s) in $build"
# Quiet unless it fails: then what the compiler said, and a clear end (set -e would end the
# script with no word of why).
if ! out=$(ninja -C "$build" "${ninja_targets[@]}" 2>&1); then
    grep -E -A8 'error|FAILED' <<<"$out" | head -60 >&2
    snic_die "the fuzz targets did not build (above)"
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

snic_log "corpus kept in $corpus_root/<target>, crashes in $corpus_root/artifacts/<target>"
results=()
failed=0
for t in "${targets[@]}"; do
    bin=$build/tests/fuzz/fuzz_$t
    corpus=$corpus_root/$t
    artifacts=$corpus_root/artifacts/$t
    log=$corpus_root/logs/$t.log
    mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
    seed_dirs=()
    [[ -d $seeds/$t ]] && seed_dirs=("$seeds/$t")
    snic_log "$t: ${seconds}s"
    rc=0
    # -timeout: one input that runs for 25 s is a hang, reported as a crash. -runs=0 runs
    # the inputs given and no more (libFuzzer's -max_total_time=0 would mean no limit).
    limit=(-max_total_time="$seconds")
    ((seconds > 0)) || limit=(-runs=0)
    "$bin" "${limit[@]}" -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" "$corpus" "${seed_dirs[@]}" >"$log" 2>&1 </dev/null || rc=$?
    # The last status line (DONE, or the last pulse before a crash) has cov/ft/corp/exec/s.
    status=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' <<<"$status" | awk '{print $2}')
    ft=$(grep -o 'ft: [0-9]*' <<<"$status" | awk '{print $2}')
    corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' <<<"$status" | awk '{print $2}')
    if ((rc != 0)); then
        failed=$((failed + 1))
        snic_warn "$t crashed (exit $rc); log $log; input in $artifacts/"
        grep -E 'ERROR:|fuzz invariant|runtime error|SUMMARY' "$log" | head -n 5 >&2 || true
        outcome=crash
    else
        outcome=ok
        if ((merge)); then
            # Minimise: keep the inputs that give all the features seen, drop the rest.
            tmp=$(mktemp -d "$corpus_root/.merge-$t.XXXXXX")
            if "$bin" -merge=1 -timeout=25 "$tmp" "$corpus" >"$log.merge" 2>&1 </dev/null; then
                rm -rf "$corpus"
                mv "$tmp" "$corpus"
            else
                rm -rf "$tmp"
                snic_warn "$t: minimising the corpus failed (log $log.merge); kept as it was"
            fi
        fi
    fi
    kept=$(find "$corpus" -type f | wc -l)
    results+=("$t|$seconds|${runs:-?}|${eps:-?}|${cov:-?}|${ft:-?}|${corp:-?}|$kept|$outcome")
    printf '%s: %s: runs %s, exec/s %s, cov %s, ft %s, corpus %s (%s kept)%s\n' "$SNIC_PROG" "$t" \
        "${runs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$kept" \
        "$([[ $outcome == ok ]] || printf ', CRASHED')"
done

printf '\n%-14s %6s %10s %8s %6s %7s %12s %6s  %s\n' target secs runs exec/s cov ft corp kept result
for r in "${results[@]}"; do
    IFS='|' read -r t s n e c f p k o <<<"$r"
    printf '%-14s %6s %10s %8s %6s %7s %12s %6s  %s\n' "$t" "$s" "$n" "$e" "$c" "$f" "$p" "$k" "$o"
done

if [[ -n $xml ]]; then
    mkdir -p "$(dirname "$xml")"
    {
        printf '<?xml version="1.0" encoding="UTF-8"?>\n'
        printf '<testsuites><testsuite name="fuzz" tests="%s" failures="%s">\n' \
            "${#results[@]}" "$failed"
        for r in "${results[@]}"; do
            IFS='|' read -r t s n e c f p k o <<<"$r"
            printf '  <testcase classname="fuzz" name="%s" time="%s">' "$t" "$s"
            if [[ $o != ok ]]; then
                printf '<failure message="crashed; see %s">' "$corpus_root/logs/$t.log"
                printf '</failure>'
            fi
            printf '<system-out>runs %s exec/s %s cov %s ft %s</system-out></testcase>\n' \
                "$n" "$e" "$c" "$f"
        done
        printf '</testsuite></testsuites>\n'
    } >"$xml"
fi

((failed == 0))
