#!/usr/bin/env bash
# README's second command: installs what is missing, builds everything, and runs every test:
# CTest (with the main job's reports judged by MainJob.*; ci/main-job.sh), then the harness
# and multi-rank tests under ASan + UBSan, then libFuzzer on each parser of outside data.
# Works from any directory. Every stage runs even when an earlier one failed; the exit status
# is 1 if any did. Arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/stage.sh
stage setup bash ci/setup-deps.sh
stage build bash ci/build.sh
# The Slurm tests stop their cluster after each test; this stops it even if a test process died.
trap 'bash ci/slurm-local.sh stop "/tmp/meshtest-slurm-test-${MESHTEST_SLURM_PORT:-6817}" >/dev/null 2>&1 || true' EXIT
status=0
# While CTest runs, the sanitizer and fuzz trees compile at the lowest priority: the compilers get
# the cycles CTest's tests leave idle while they wait (on peers, timeouts, a Slurm cluster), not
# the tests' (docs/ci.md). Their stages then build only what is left, and say any error.
background_builds() {
  for preset in asan fuzz; do
    [ -f build/$preset/build.ninja ] || cmake --preset $preset >/dev/null || return
    nice -n 19 cmake --build --preset $preset || return
  done
}
background_builds > build/background-builds.log 2>&1 &
builds=$!
stage ctest ctest --preset cpu -j 2 --output-junit "$PWD/build/cpu/ctest-junit.xml" "$@" || status=1
stage background_builds wait $builds || true  # the part CTest did not outlast
# The harness and meshtrain under ASan + UBSan: no sanitizer report allowed (ci/sanitize.sh).
stage sanitizers bash ci/sanitize.sh || status=1
# Every parser of outside data under libFuzzer for a minute each (ci/fuzz.sh).
stage fuzzing bash ci/fuzz.sh 60 || status=1
exit $status
