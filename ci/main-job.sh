#!/usr/bin/env bash
# Runs the main job on a built tree: `build/cpu/meshtest run --out build/cpu/main-job`, the
# built-in CPU matrix; arguments go to `meshtest run`. A run of the whole matrix (no
# arguments) leaves build/cpu/main-job/.complete with its exit status.
#
# --if-stale (CTest's `main_job` fixture, which MainJob.* judge): run only when there is no
# complete run newer than meshtest, meshtrain, test_matrix/ and the reference program, and
# otherwise exit with that run's status. So ci/test.sh after ci/main.sh (as .ci/run does)
# judges the reports README's first command wrote instead of running the matrix twice, and
# ci/test.sh alone still runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/cpu/main-job
stamp=$out/.complete
if [ "${1:-}" = --if-stale ]; then
  shift
  if [ -f "$stamp" ] &&
     [ -z "$(find build/cpu/meshtest build/cpu/meshtrain test_matrix tests/reference -newer "$stamp" -print -quit)" ]; then
    rc=$(cat "$stamp")
    echo "main-job: judging the main job's run in $out (exit $rc; newer than meshtest, meshtrain and test_matrix/)"
    exit "$rc"
  fi
fi
rm -f "$stamp"
rc=0
build/cpu/meshtest run --out "$out" "$@" || rc=$?
if [ $# -eq 0 ] && [ "$rc" -le 1 ]; then echo "$rc" > "$stamp"; fi
exit "$rc"
