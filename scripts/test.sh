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
# In CI (CI=true), or with SNIC_SANITIZE=1, the unit tests also run built with
# AddressSanitizer and UndefinedBehaviorSanitizer (meson's b_sanitize, in
# build-asan/, leaks detected, the first error fatal): build/test-results/unit-asan.xml.
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

san_xml=$results/unit-asan.xml
san_rc=0
rm -f "$san_xml"
if [[ ${CI:-} == true || ${SNIC_SANITIZE:-0} == 1 ]]; then
    san_dir=$SNIC_ROOT/build-asan
    snic_log "unit tests under ASan+UBSan: $san_dir"
    if [[ ! -d $san_dir ]]; then
        meson setup "$san_dir" -Db_sanitize=address,undefined -Db_lundef=false >/dev/null ||
            san_rc=$?
    fi
    if ((san_rc == 0)) && ninja -C "$san_dir" tests/unit/snic-unit-tests >/dev/null; then
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
            UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
            "$san_dir/tests/unit/snic-unit-tests" --gtest_output="xml:$san_xml" \
            --gtest_brief=1 </dev/null || san_rc=$?
    else
        snic_warn "the sanitizer build failed"
        san_rc=127
    fi
else
    san_rc=skip
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

# Counts from both XML files. A runner that exited non-zero without
# recording a failure (crash, missing binary, collection error) counts as
# one failure, so that it cannot pass silently.
/usr/bin/python3 - "$unit_xml" "$unit_rc" "$integ_xml" "$integ_rc" "$san_xml" "$san_rc" \
    "$fuzz_xml" "$fuzz_rc" <<'PY'
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
for (path, rc), name in zip(zip(args[0::2], args[1::2]),
                           ("unit", "integration", "unit (asan+ubsan)", "fuzz")):
    if rc == "skip":
        continue
    rc = int(rc)
    c = count(path) or (0, 0, 0)
    p, f, s = c
    # pytest exit code 5 means "no tests collected": not a failure by itself.
    ok_codes = {0, 5} if name == "integration" else {0}
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
