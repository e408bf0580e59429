#!/usr/bin/env bash
# README's second command: installs what is missing, builds everything, and runs every test:
# CTest (with the main job's reports judged by MainJob.*; ci/main-job.sh), then the harness
# and multi-rank tests under ASan + UBSan; beside both, libFuzzer on each parser of outside data.
# Works from any directory. Every stage runs even when an earlier one failed; the exit status
# is 1 if any did. Arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/stage.sh
stage setup bash ci/setup-deps.sh
stage build bash ci/build.sh
source ci/openblas.sh
# On any exit: the Slurm tests stop their cluster after each test, this stops it even if a test
# process died; and the background builds and fuzzers stop with the script (Ctrl-C included).
stop_tree() { local child; for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do stop_tree "$child"; done; kill "$1" 2>/dev/null || true; }
background=
trap 'bash ci/slurm-local.sh stop "/tmp/meshtest-slurm-test-${MESHTEST_SLURM_PORT:-6817}" >/dev/null 2>&1 || true
      [ -z "$background" ] || stop_tree "$background"' EXIT
# While CTest runs, the sanitizer and fuzz trees compile at the lowest priority: the compilers get
# the cycles CTest's tests leave idle while they wait (on peers, timeouts, a Slurm cluster), not
# the tests' (docs/ci.md). The sanitizer stage then builds only what is left, and says any error.
# Then libFuzzer runs every parser of outside data for a minute of CPU each (ci/fuzz.sh), at a low
# priority too, through the CTest and sanitizer stages: its budget is CPU time, so it does the same
# work as on an idle machine, in the cycles the tests leave (a quarter of CTest's, measured). Its
# one wall-clock limit, libFuzzer's per-input timeout, is re-checked alone at the end.
# The priority is the background shell's own, which its commands inherit (not a `nice` per
# command), so that putting that shell back to normal priority when CTest ends holds for the
# commands it starts afterwards too.
background_builds() {
  for preset in asan fuzz; do
    [ -f build/$preset/build.ninja ] || cmake --preset $preset >/dev/null || return
    cmake --build --preset $preset || return
  done
}
nice_of() { local stat; stat=$(cat /proc/"$1"/stat) && set -- ${stat##*) } && echo "${17}"; }
mkdir -p build/fuzz
rm -f build/background-builds.done
{
  renice -n 19 -p $BASHPID >/dev/null
  background_builds > build/background-builds.log 2>&1 || true
  touch build/background-builds.done
  # nice 10 for the fuzzers, unless CTest has ended and put this shell back at 0 meanwhile.
  [ "$(nice_of $BASHPID)" -le 10 ] || renice -n 10 -p $BASHPID >/dev/null 2>&1 || true
  MESHTEST_FUZZ_RECHECK=later bash ci/fuzz.sh 60 > build/fuzz/fuzz.out 2>&1
} &
background=$!
status=0
# Three tests at a time on two cores: CTest starts its longest tests first (COST), and the longest
# mostly wait (Slurm's own time limit, the soak's sleeping trainers, a hung rank's timeout). At two
# at a time, two of them waiting together left both cores idle for most of CTest's first minutes.
stage ctest ctest --preset cpu -j 3 --output-junit "$PWD/build/cpu/ctest-junit.xml" "$@" || status=1
# From here on CI waits for the builds and fuzzers behind CTest: back to normal priority. At nice 19
# beside other work at normal priority (a busy CI host; ci/load-test.sh's two busy processes) they
# got about 1 % of a core, and the stage waiting for them would have outlasted CI's limit. Root may
# lower a nice value; elsewhere they keep theirs and only take longer. Each parent is reniced before
# its children are listed, so a child it starts meanwhile inherits the new value.
renice_tree() { local child; renice -n 0 -p "$1" >/dev/null 2>&1 || return 0; for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do renice_tree "$child"; done; }
renice_tree "$background"
# The part of the builds CTest did not outlast.
stage background_builds bash -c 'until [ -f build/background-builds.done ]; do sleep 1; done'
# The harness and meshtrain under ASan + UBSan: no sanitizer report allowed (ci/sanitize.sh).
stage sanitizers bash ci/sanitize.sh || status=1
# The part of the fuzzing the two test stages did not outlast.
fuzz_status=0
stage fuzzing wait $background || fuzz_status=1
background=
cat build/fuzz/fuzz.out
# A timeout, out-of-memory or leak found under the tests' load is run again now, alone and at
# normal priority, with the same limits: only one that reproduces fails (ci/fuzz.sh).
stage fuzz_recheck bash ci/fuzz.sh --recheck || fuzz_status=1
[ $fuzz_status -eq 0 ] || status=1
exit $status
