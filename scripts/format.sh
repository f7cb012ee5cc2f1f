#!/usr/bin/env bash
# clang-format over every C++ file git tracks, with the repository's .clang-format.
#
#   scripts/format.sh           reformat in place
#   scripts/format.sh --check   change nothing; list the files that differ and exit 1
set -euo pipefail

# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

check=0
case ${1-} in
    --check) check=1 ;;
    "") ;;
    -h | --help) sed -n '2,5s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) printf '%s: unknown option %s\n' "$SNIC_PROG" "$1" >&2; exit 2 ;;
esac

command -v clang-format >/dev/null || { snic_warn "clang-format is not installed (scripts/setup.sh installs it)"; exit 1; }
cd "$SNIC_ROOT"
mapfile -t files < <(git ls-files '*.cc' '*.h')
if ((check == 0)); then
    clang-format -i "${files[@]}"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
    printf '%s: %d file(s) differ from clang-format (run scripts/format.sh):\n' "$SNIC_PROG" "${#bad[@]}" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
printf '%s: %d files formatted as .clang-format says\n' "$SNIC_PROG" "${#files[@]}"
