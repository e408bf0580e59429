#!/usr/bin/env bash
# The house style (.clang-format) on every C++ file of a checkout that git tracks or would track
# (untracked files not ignored included), with Debian 12's clang-format 14: another version lays
# out a few constructs differently, so CI and the fix use the same one.
#   tools/format.sh [ROOT]           formats them in place
#   tools/format.sh --check [ROOT]   changes nothing: names each file that differs, shows how,
#                                    and exits 1 with the command that fixes them (CTest `format`)
# ROOT defaults to the checkout this script is in. Exit 77: no clang-format 14 (CTest: skipped).
# MESHTEST_CLANG_FORMAT names another binary.
set -euo pipefail
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
root=$(cd "${1:-$(dirname "$0")/..}" && pwd)
cf=${MESHTEST_CLANG_FORMAT:-clang-format-14}
if ! command -v "$cf" > /dev/null; then
  echo "format: $cf not found (Debian 12: apt-get install clang-format-14; ci/setup-deps.sh installs it)" >&2
  exit 77
fi
cd "$root"
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cpp' '*.cu' '*.cuh' | sort -u)
if [ "$check" = 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -r "$cf" -i
  exit 0
fi
present=()
for f in "${files[@]}"; do [ -f "$f" ] && present+=("$f"); done  # a file deleted, not yet in git: skipped
# One clang-format for all files (--dry-run -Werror names each violation as FILE:LINE:COL: error:
# ...): a process per file cost 40 CPU-seconds of CI, this one about one.
report=$(printf '%s\0' "${present[@]}" | xargs -0 -r "$cf" --style=file --dry-run -Werror 2>&1) && status=0 || status=$?
mapfile -t differ < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<< "$report" | sort -u)
if [ "$status" != 0 ] && [ "${#differ[@]}" = 0 ]; then  # clang-format failed for another reason
  printf '%s\n' "$report" | head -n 20 >&2
  echo "format: $cf failed (exit $status)" >&2
  exit 2
fi
for f in "${differ[@]:0:3}"; do  # how the first few differ
  "$cf" --style=file "$f" | diff -u --label "$f" --label "$f (formatted)" "$f" - | head -n 20 || true
done
if [ "${#differ[@]}" -gt 0 ]; then
  printf 'format: %s is not in the house style (.clang-format)\n' "${differ[@]}"
  echo "format: ${#differ[@]} of ${#files[@]} files differ; to fix them: tools/format.sh (or $cf -i FILE)"
  exit 1
fi
echo "format: ${#files[@]} files in the house style"
