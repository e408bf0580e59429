#!/usr/bin/env bash
# CI under load (docs/ci.md#ci-under-load): `.ci/run` on a clean clone of this checkout's HEAD,
# with HOGS busy processes (default 2, one per core of CI's machine) at normal priority beside it
# for the whole run. A wall-clock limit that a correct run can hit shows up here as a red run.
# Prints .ci/run's own closing table (minutes and CPU-minutes per stage); the clone stays in
# WORKDIR (default /tmp/meshtest-load-test) for its reports.
# Usage: ci/load-test.sh [HOGS] [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
hogs=${1:-2}
work=${2:-/tmp/meshtest-load-test}
rm -rf "$work"
mkdir -p "$work"
git clone -q . "$work/main"
# CI finds ../shared beside the checkout (the fixtures of outside data).
[ ! -d ../shared ] || cp -r ../shared "$work/"
pids=()
stop_hogs() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq "$hogs"); do
  bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "load-test: $hogs busy processes (${pids[*]}) beside .ci/run in $work/main"
start=$(date +%s)
status=0
(cd "$work/main" && CI=true bash .ci/run) || status=$?
stop_hogs
echo "load-test: .ci/run exited $status after $(( ($(date +%s) - start) / 60 )) minutes beside $hogs busy processes"
exit $status
