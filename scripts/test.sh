#!/usr/bin/env bash
# Runs all snic tests: setup (packages, hugepages, build), the unit tests and
# the integration tests, then prints one summary line
#
#   snic: N passed, N failed[, N skipped]
#
# and exits non-zero if a test failed or none ran. Run as root.
#
#   scripts/test.sh [--no-deps] [--no-build] [-- PYTEST-ARGS...]
#
# Results: build/test-results/unit.xml and build/test-results/integration.xml.
#
# In CI (CI=true), or with SNIC_SANITIZE=1, three sanitizer jobs run too (meson's
# b_sanitize; docs/SECURITY.md, "Sanitizers"), the first finding of each fatal:
#   - everything built with AddressSanitizer and UndefinedBehaviorSanitizer in build-asan/,
#     and the unit tests run there, leaks detected: build/test-results/unit-asan.xml;
#   - the tests of the daemon's threads (snic-thread-tests) built with ThreadSanitizer in
#     build-tsan/ (suppressions: tests/sanitizers/tsan.supp): build/test-results/threads-tsan.xml;
#   - the integration and interop suite again, on build-asan/ (SNIC_BUILD): snicd, snicctl,
#     the test programs and libsnic (preloaded with the ASan runtime by snic-run) sanitized,
#     snicd's leaks detected when it stops; a report in snicd's stderr fails the test that
#     ran it; dtest's modes are left out for time (SNIC_ASAN_DESELECT, below):
#     build/test-results/integration-asan.xml.
# Build logs: build/test-results/build-asan.log, build-tsan.log.
#
# In CI, or with SNIC_FUZZ=1, every libFuzzer target of tests/fuzz is built (clang, in
# build-fuzz/) and run for SNIC_FUZZ_SECONDS (default 10) from its committed seeds, in a
# corpus that is thrown away (scripts/fuzz.sh): build/test-results/fuzz.xml. A crash, a
# broken invariant or a hang fails the run.
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
    sed -n '2,11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

setup_args=()
pytest_args=()
while (($#)); do
    case $1 in
        --no-deps | --no-build) setup_args+=("$1") ;;
        -h | --help) usage; exit 0 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

snic_require_root

cd "$SNIC_ROOT"
"$SNIC_ROOT/scripts/setup.sh" "${setup_args[@]}"

results=$SNIC_BUILD/test-results
unit_xml=$results/unit.xml
integ_xml=$results/integration.xml
mkdir -p "$results"
rm -f "$unit_xml" "$integ_xml"

unit_bin=$SNIC_BUILD/tests/unit/snic-unit-tests
unit_rc=0
snic_log "unit tests: $unit_bin"
if [[ -x $unit_bin ]]; then
    "$unit_bin" --gtest_output="xml:$unit_xml" </dev/null || unit_rc=$?
else
    snic_warn "unit test binary $unit_bin is missing"
    unit_rc=127
fi

# sanitizer_build DIR SANITIZE [TARGET...]: configures DIR with b_sanitize=SANITIZE (the first
# time) and builds TARGETs (everything when none), its output in $results/DIR.log, whose end
# is shown when it fails. At -O1 with line tables only (-g1), as sanitizers are usually built
# (and the fuzzers here): a file compiles in under half the time of -O2 -g, and a report
# still names file and line.
sanitizer_build() {
    local dir=$SNIC_ROOT/$1 sanitize=$2 log=$results/$1.log
    shift 2
    snic_log "building $dir (b_sanitize=$sanitize)${*:+: $*}; log $log"
    {
        if [[ ! -f $dir/build.ninja ]]; then
            meson setup "$dir" -Db_sanitize="$sanitize" -Db_lundef=false -Doptimization=1 \
                -Dcpp_args=-g1
        fi
        ninja -C "$dir" "$@"
    } >"$log" 2>&1 || {
        tail -n 30 "$log" >&2
        snic_warn "the $sanitize build in $dir failed"
        return 1
    }
}

san_xml=$results/unit-asan.xml
tsan_xml=$results/threads-tsan.xml
san_integ_xml=$results/integration-asan.xml
rm -f "$san_xml" "$tsan_xml" "$san_integ_xml"
san_rc=skip tsan_rc=skip san_integ_rc=skip
if [[ ${CI:-} == true || ${SNIC_SANITIZE:-0} == 1 ]]; then
    san_rc=0 tsan_rc=0
    # Everything, ASan+UBSan: the unit tests here, the integration suite below.
    if sanitizer_build build-asan address,undefined; then
        san_integ_rc=0
        snic_log "unit tests under ASan+UBSan: build-asan"
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
            UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            "$SNIC_ROOT/build-asan/tests/unit/snic-unit-tests" --gtest_output="xml:$san_xml" \
            --gtest_brief=1 </dev/null || san_rc=$?
    else
        san_rc=127 san_integ_rc=127
    fi
    # Under TSan: the tests that run the daemon's threads against each other (the control
    # thread, an lcore, telemetry's askers) and the shared rings between two threads
    # (snic-thread-tests, listed in tests/unit/meson.build).
    if sanitizer_build build-tsan thread tests/unit/snic-thread-tests; then
        snic_log "thread tests under TSan: build-tsan"
        TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:suppressions=$SNIC_ROOT/tests/sanitizers/tsan.supp" \
            "$SNIC_ROOT/build-tsan/tests/unit/snic-thread-tests" --gtest_output="xml:$tsan_xml" \
            --gtest_brief=1 </dev/null || tsan_rc=$?
    else
        tsan_rc=127
    fi
fi

fuzz_xml=$results/fuzz.xml
fuzz_rc=0
rm -f "$fuzz_xml"
if [[ ${CI:-} == true || ${SNIC_FUZZ:-0} == 1 ]]; then
    fuzz_secs=${SNIC_FUZZ_SECONDS:-10}
    snic_log "fuzz targets, ${fuzz_secs}s each: build-fuzz"
    fuzz_corpus=$(mktemp -d /tmp/snic-fuzz.XXXXXX)
    "$SNIC_ROOT/scripts/fuzz.sh" --seconds "$fuzz_secs" --corpus "$fuzz_corpus" --no-merge \
        --xml "$fuzz_xml" </dev/null || fuzz_rc=$?
    rm -rf "$fuzz_corpus"
else
    fuzz_rc=skip
fi

integ_rc=0
snic_log "integration and interop tests: tests/integration tests/interop"
/usr/bin/python3 -m pytest tests/integration tests/interop -v -p no:cacheprovider \
    --junitxml="$integ_xml" "${pytest_args[@]}" </dev/null || integ_rc=$?

if [[ $san_integ_rc == 0 ]]; then
    # The same suite on build-asan: snicd, snicctl, libsnic (preloaded with the ASan runtime
    # by snic-run) and the test programs sanitized. The harness sees the build's b_sanitize
    # and sets the sanitizers' options itself (tests/integration/snictest.py).
    # Left out (SNIC_ASAN_DESELECT, node-id prefixes; set it empty for all): dtest's eight
    # modes on each transport. Sanitized they take 12 of the suite's 22 minutes here, and what
    # they drive (libdaplsnic, libdaplofa over libsnic, snicd) runs sanitized in the DAT rules,
    # dtestx, dtestsrq, dtestcm and dapltest, which stay. Also perftest -R over iWARP and
    # RoCEv2 (test_iwarp's test_perftest_over_iwarp, test_rdmacm's test_perftest_over_rdma_cm):
    # sanitized, perftest's client and server are slow enough that perftest 4.5's own race to
    # the server's second listen is lost more often, and its retry on a freed id says nothing
    # of snic; both run unsanitized above, and rping and rdma_cm's own tools stay. And rdma-core's
    # own test suite (test_pyverbs): sanitized it takes about 2 minutes a device where CI has
    # no 4 to spare; it runs unsanitized above (run by hand against an ASan+UBSan libsnic, both
    # passes had the same outcomes and nothing reported).
    left_out=${SNIC_ASAN_DESELECT-tests/integration/test_dapl.py::test_dtest[ tests/integration/test_iwarp_dapl.py::test_dtest_over_iwarp[ tests/integration/test_iwarp_wire.py tests/integration/test_iwarp.py::test_perftest_over_iwarp tests/integration/test_rdmacm.py::test_perftest_over_rdma_cm tests/integration/test_pyverbs.py}
    deselect=()
    for d in $left_out; do deselect+=(--deselect "$d"); done
    snic_log "integration and interop tests under ASan+UBSan: build-asan; left out: ${left_out:-nothing}"
    SNIC_BUILD=$SNIC_ROOT/build-asan /usr/bin/python3 -m pytest tests/integration tests/interop \
        -v -p no:cacheprovider --junitxml="$san_integ_xml" "${deselect[@]}" "${pytest_args[@]}" \
        </dev/null || san_integ_rc=$?
fi

# Counts from every XML file. A runner that exited non-zero without
# recording a failure (crash, missing binary, collection error) counts as
# one failure, so that it cannot pass silently.
/usr/bin/python3 - \
    unit "$unit_xml" "$unit_rc" \
    integration "$integ_xml" "$integ_rc" \
    "unit (asan+ubsan)" "$san_xml" "$san_rc" \
    "threads (tsan)" "$tsan_xml" "$tsan_rc" \
    "integration (asan+ubsan)" "$san_integ_xml" "$san_integ_rc" \
    fuzz "$fuzz_xml" "$fuzz_rc" <<'PY'
import sys
import xml.etree.ElementTree as ET

def count(path):
    passed = failed = skipped = 0
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"snic: cannot read {path}: {e}", file=sys.stderr)
        return None
    for tc in root.iter("testcase"):
        tags = {child.tag for child in tc}
        if tags & {"failure", "error"}:
            failed += 1
        elif "skipped" in tags or tc.get("result") == "skipped" or tc.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped

totals = [0, 0, 0]
args = sys.argv[1:]
for name, path, rc in zip(args[0::3], args[1::3], args[2::3]):
    if rc == "skip":
        continue
    rc = int(rc)
    c = count(path) or (0, 0, 0)
    p, f, s = c
    # pytest exit code 5 means "no tests collected": not a failure by itself.
    ok_codes = {0, 5} if name.startswith("integration") else {0}
    if rc not in ok_codes and f == 0:
        print(f"snic: {name} tests: runner exited with code {rc} without a recorded failure; counting it as one",
              file=sys.stderr)
        f = 1
    print(f"snic: {name}: {p} passed, {f} failed, {s} skipped", file=sys.stderr)
    totals[0] += p
    totals[1] += f
    totals[2] += s

p, f, s = totals
line = f"snic: {p} passed, {f} failed"
if s:
    line += f", {s} skipped"
sys.stdout.flush()
print(line)
if p + f == 0:
    print("snic: no test ran", file=sys.stderr)
    sys.exit(1)
sys.exit(1 if f else 0)
PY
