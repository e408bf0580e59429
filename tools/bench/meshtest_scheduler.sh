#!/usr/bin/env bash
# meshtest's scheduler and launcher: runs meshtest_bench (simulated packing, launch overhead,
# 10,000-case expansion), then a REAL `meshtest run` of 16 fake cases with known sleeps and
# widths 1/2/4/8 on 8 CPU slots over Gloo, and prints its makespan over the lower bound
# max(slot-seconds / 8, longest case) computed from the cases' measured durations. Peer, measured
# in the same run: the same matrix with `--jobs 1` (one case at a time).
# Usage: tools/bench/meshtest_scheduler.sh [BUILD_DIR]   (default build/cpu; needs python3 or jq)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/cpu}
[ -f "$build/build.ninja" ] || cmake --preset cpu
build_log=${TMPDIR:-/tmp}/meshtest_scheduler_build.log
if ! cmake --build "$build" --target meshtest fake_trainer meshtest_bench -j2 > "$build_log" 2>&1; then
  tail -40 "$build_log" >&2
  echo "build failed (full log: $build_log)" >&2
  exit 1
fi
meshtest=$(realpath "$build/meshtest")
fake=$(realpath "$build/tests/fake_trainer")
"$build/tools/bench/meshtest_bench" "$fake"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
slots=8

# Writes the matrix: one case per "width sleep" pair, `duration:` set to the sleep.
write_matrix() {
  echo "suite: sched"
  echo "cases:"
  local width sleep
  while read -r width sleep; do
    echo "  - name: w${width}_s${sleep}"
    echo "    command: [$fake, --sleep, '$sleep']"
    echo "    ngpu: $width"
    echo "    duration: $sleep"
  done <<'CASES'
8 3.0
8 1.5
4 2.5
4 2.0
4 1.0
4 0.5
2 3.0
2 2.0
2 1.5
2 1.0
2 0.5
1 3.0
1 2.5
1 2.0
1 1.0
1 0.5
CASES
}
write_matrix > "$work/sched.yaml"

# Runs the matrix for real; extra arguments go to `meshtest run`. Fails loudly if a case failed.
run_matrix() {  # out-dir extra-args...
  local out=$1; shift
  if ! CI=1 "$meshtest" run "$work/sched.yaml" --out "$out" --ngpu "$slots" --backend gloo --grace 5 "$@" \
       > "$out.log" 2>&1; then
    cat "$out.log" >&2
    echo "meshtest run failed" >&2
    exit 1
  fi
}

# Prints "wall_s" then one "ngpu duration_s status" line per case of a summary.json.
read_summary() {  # summary.json
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["wall_s"]); [print(c["ngpu"], c["duration_s"], c["status"]) for c in s["cases"]]' "$1"
  else
    jq -r '.wall_s, (.cases[] | "\(.ngpu) \(.duration_s) \(.status)")' "$1"
  fi
}

run_matrix "$work/packed"
run_matrix "$work/serial" --jobs 1
read_summary "$work/packed/summary.json" > "$work/packed.txt"
read_summary "$work/serial/summary.json" > "$work/serial.txt"

echo
echo "d) Real run: 16 fake cases (sleep 0.5-3 s, widths 1/2/4/8) on $slots CPU slots, gloo, $(nproc) cores"
echo
awk -v slots="$slots" -v target=1.10 '
  FNR == 1 { wall[run] = $1; next }
  $3 != "passed" { print "case not passed in the " run " run: " $0 > "/dev/stderr"; bad = 1 }
  run == "packed" { area += $1 * $2; sum += $2; if ($2 > longest) longest = $2; n++ }
  END {
    if (bad) exit 1
    packed = wall["packed"]; serial = wall["serial"]
    bound = area / slots > longest ? area / slots : longest
    printf "| cases | slot-s | lower bound s | meshtest run wall s | meshtest / LB | peer: --jobs 1 wall s | peer / LB | sum of durations / LB | target <= %.2f |\n", target
    print "|---|---|---|---|---|---|---|---|---|"
    printf "| %d | %.2f | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f | %s |\n", n, area, bound, packed, packed / bound, \
      serial, serial / bound, sum / bound, packed / bound <= target ? "met" : "MISSED"
  }' run=packed "$work/packed.txt" run=serial "$work/serial.txt"
