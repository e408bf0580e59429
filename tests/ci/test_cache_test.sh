#!/usr/bin/env bash
# ci/test-cache.py's rules, each shown to run a test again when what it read changed: a small
# CTest project whose tests read a file, look for one that is absent, list a folder, run a
# script, change what they read, hand a file to another test and fail. ci/test.sh runs this
# before it trusts the cache with CTest (it cannot run inside the traced CTest: strace in strace).
# Usage: tests/ci/test_cache_test.sh
set -euo pipefail
tool="$(cd "$(dirname "$0")/../.." && pwd)/ci/test-cache.py"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MESHTEST_TEST_CACHE_DIR=$work/cache
unset MESHTEST_TEST_CACHE
failures=0

make_project() {
  mkdir -p "$1/dir"
  echo ok > "$1/input.txt"
  touch "$1/dir/a" "$1/counter"
  printf '#!/bin/sh\nexit 0\n' > "$1/prog.sh" && chmod +x "$1/prog.sh"
  cat > "$1/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(t NONE)
enable_testing()
add_test(NAME reads COMMAND sh -c "grep -q ok ${CMAKE_SOURCE_DIR}/input.txt")
add_test(NAME looks COMMAND sh -c "test ! -e ${CMAKE_SOURCE_DIR}/flag")
add_test(NAME lists COMMAND sh -c "ls ${CMAKE_SOURCE_DIR}/dir | wc -l | grep -qx 1")
add_test(NAME runs COMMAND ${CMAKE_SOURCE_DIR}/prog.sh)
add_test(NAME changes COMMAND sh -c "cat ${CMAKE_SOURCE_DIR}/counter >/dev/null; echo x >> ${CMAKE_SOURCE_DIR}/counter")
add_test(NAME writer COMMAND sh -c "echo a > ${CMAKE_BINARY_DIR}/shared.txt")
add_test(NAME reader COMMAND sh -c "cat ${CMAKE_BINARY_DIR}/shared.txt")
set_tests_properties(reader PROPERTIES DEPENDS writer)
add_test(NAME fails COMMAND sh -c "exit 1")
add_test(NAME temp COMMAND sh -c "d=$(mktemp -d) && echo hi > $d/f && cat $d/f && rm -r $d")
CMAKE
  cmake -S "$1" -B "$1/build" > /dev/null
}

# Runs the project's CTest through the cache; prints the names of the tests that ran, sorted.
ran() {
  (cd "$1" && python3 "$tool" t -- ctest --test-dir build --output-junit "$1/build/junit.xml" > "$1/build/out.txt" 2>&1) || true
  grep -o '<testcase name="[^"]*"' "$1/build/junit.xml" | sed 's/.*name="//; s/"$//' | sort | tr '\n' ' '
}

expect() {  # expect WHAT EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAIL: $1: ran [$3], expected [$2]"; failures=$((failures + 1)); fi
}

p=$work/checkout
make_project "$p"
all="changes fails lists looks reader reads runs temp writer "
again="changes fails reader writer "  # changes its input, shares a file, failed
expect "a first run runs every test" "$all" "$(ran "$p")"
expect "a second run runs only what can't be carried" "$again" "$(ran "$p")"
echo "ok, and more" > "$p/input.txt"
expect "a file a test read changed" "changes fails reader reads writer " "$(ran "$p")"
touch "$p/flag"
expect "a file a test found absent appeared" "changes fails looks reader writer " "$(ran "$p")"
rm "$p/flag"
expect "it went again (the failed run left no record)" "changes fails looks reader writer " "$(ran "$p")"
touch "$p/dir/b"
expect "a folder a test listed gained a file" "changes fails lists reader writer " "$(ran "$p")"
rm "$p/dir/b"
ran "$p" > /dev/null
printf '#!/bin/sh\nexit 0 # edited\n' > "$p/prog.sh"
expect "a program a test ran changed" "changes fails reader runs writer " "$(ran "$p")"
expect "the environment changed" "$all" "$(MESHTEST_SOME_SETTING=1 ran "$p")"
expect "MESHTEST_TEST_CACHE=off" "$all" "$(MESHTEST_TEST_CACHE=off ran "$p")"
ran "$p" > /dev/null
cp -r "$p" "$work/elsewhere"
rm -rf "$work/elsewhere/build" && cmake -S "$work/elsewhere" -B "$work/elsewhere/build" > /dev/null
expect "a copy of the checkout at another path uses the same records" "$again" "$(ran "$work/elsewhere")"
grep -q "^changes	changes \$SRC/counter, which it read" "$p/build/test-cache.uncarried.txt" &&
  grep -q "^reader	it reads \$SRC/build/shared.txt, which writer writes" "$p/build/test-cache.uncarried.txt" &&
  echo "ok: the reasons name the file" || { echo "FAIL: reasons:"; cat "$p/build/test-cache.uncarried.txt"; failures=$((failures + 1)); }
[ $failures -eq 0 ] && echo "test-cache: all rules hold" || { echo "test-cache: $failures rules broken"; exit 1; }
