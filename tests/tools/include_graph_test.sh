#!/usr/bin/env bash
# tools/include_graph.py on made-up trees: a new folder under harness/ that closes a circle
# core -> new -> run -> core is red twice over (no floor, and the circle), and the same folder
# given no include back is still red for having no floor. CTest: include_graph_catches_a_new_folder.
set -uo pipefail
tool=$(cd "$(dirname "$0")/../.." && pwd)/tools/include_graph.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "include_graph_test: FAIL: $*"; failures=$((failures + 1)); }
mkdir -p "$work/harness/core" "$work/harness/run" "$work/harness/new"
printf '#include "new/b.h"\n' > "$work/harness/core/a.h"
printf '#include "run/c.h"\n' > "$work/harness/new/b.h"
printf '#include "core/a.h"\n' > "$work/harness/run/c.h"
out=$(python3 "$tool" "$work"); rc=$?
echo "$out" | tail -n 4
[ "$rc" = 1 ] || fail "a circle through a new folder: exit $rc, expected 1"
grep -q "^no floor: harness/new/" <<< "$out" || fail "the new folder is not named as having no floor"
grep -q "^circle: harness/core/a -> harness/new/b -> harness/run/c -> harness/core/a" <<< "$out" || fail "the circle is not named"
printf '\n' > "$work/harness/run/c.h"
out=$(python3 "$tool" "$work"); rc=$?
[ "$rc" = 1 ] && grep -q "^no floor: harness/new/" <<< "$out" && ! grep -q "^circle" <<< "$out" ||
  fail "without the circle, the floorless folder alone should fail (exit $rc): $out"
rm -rf "$work/harness/new" && printf '\n' > "$work/harness/core/a.h"
python3 "$tool" "$work" > /dev/null || fail "a tree with known folders and no circle should pass"
echo "include_graph_test: $failures failure(s)"
[ "$failures" = 0 ]
