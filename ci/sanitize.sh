#!/usr/bin/env bash
# Builds the harness, the contract, the fake trainer, the trainer's collectives and their tests
# under AddressSanitizer + UBSan (preset `asan`, build/asan) and runs them. Every process a test
# starts (meshtest above all) writes any sanitizer report to build/asan/reports/; the script
# fails if one exists, even when the report came from a process whose failure a test expected.
# The tests run the CPU tree's meshtrain (ci/build.sh builds it; this script builds it when
# missing): docs/reliability.md says why the rest of the trainer is not compiled a second time.
# Usage: ci/sanitize.sh [CTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/cpu/meshtrain ] || { [ -f build/cpu/build.ninja ] || cmake --preset cpu >/dev/null; cmake --build --preset cpu --target meshtrain; }
[ -f build/asan/build.ninja ] || cmake --preset asan >/dev/null
if ! cmake --build --preset asan > build/asan/build.log 2>&1; then
  grep -E -A5 "error|FAILED" build/asan/build.log | head -n 40
  echo "sanitize: the asan build failed (build/asan/build.log)"
  exit 1
fi
reports=$PWD/build/asan/reports
rm -rf "$reports" && mkdir -p "$reports"
# LibTorch and Gloo are not instrumented; their one-time allocations at exit are not ours.
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
# Every test of the tree, except: the paths test's real meshtrain runs (ci/test.sh runs them
# unsanitized), a rank out of memory (ASan reserves terabytes of address space for its shadow,
# so no `ulimit -v` run can start under it) and the gigabyte of log (it bounds meshtest's RSS,
# which ASan's 256 MB quarantine outgrows).
# Three at a time on two cores: these tests wait more than they compute (167 test-seconds took
# 85 s at two at a time, with the cores a third idle).
status=0
ctest --preset asan -j 3 --timeout 900 --output-junit "$PWD/build/asan/ctest-junit.xml" \
  -E '^(Forms/Paths|Run\.ARankOutOfMemory|Run\.AGigabyte)' "$@" || status=1
if compgen -G "$reports/*" > /dev/null; then
  echo "sanitize: sanitizer reports (build/asan/reports/):"
  for f in "$reports"/*; do echo "== $f"; head -n 40 "$f"; done
  status=1
else
  echo "sanitize: no sanitizer report"
fi
exit $status
