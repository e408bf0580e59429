#!/usr/bin/env bash
# tools/format.sh on a made-up checkout: a misformatted file is named, with how it differs and the
# command that fixes it, and the check exits 1; after tools/format.sh formats the tree, the check
# passes. CTest: format_catches_a_misformatted_file (skipped without clang-format 14).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tool=$here/tools/format.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "format_test: FAIL: $*"; failures=$((failures + 1)); }
git -C "$work" init -q
cp "$here/.clang-format" "$work/"
printf 'int good() { return 1; }\n' > "$work/good.cpp"
printf 'int  bad( int x ){\nreturn x+1 ;}\n' > "$work/bad.h"
out=$(bash "$tool" --check "$work" 2>&1); rc=$?
[ "$rc" = 77 ] && { echo "format_test: skipped: $out"; exit 77; }
echo "$out"
[ "$rc" = 1 ] || fail "a misformatted file: exit $rc, expected 1"
grep -q "^format: bad.h is not in the house style" <<< "$out" || fail "bad.h is not named"
grep -q "good.cpp is not" <<< "$out" && fail "good.cpp is named though it is formatted"
grep -q "^+int bad(int x) { return x + 1; }" <<< "$out" || fail "the diff does not show the formatted line"
grep -q "to fix them: tools/format.sh" <<< "$out" || fail "the fix command is not given"
bash "$tool" "$work" || fail "formatting in place failed"
[ "$(cat "$work/bad.h")" = "int bad(int x) { return x + 1; }" ] || fail "bad.h was not formatted: $(cat "$work/bad.h")"
bash "$tool" --check "$work" > /dev/null || fail "the check fails after formatting"
echo "format_test: $failures failure(s)"
[ "$failures" = 0 ]
