#!/usr/bin/env bash
# The run history's acceptance run (docs/history.md): 32 "commits" of a real matrix (meshtrain on
# CPU), each run recorded into one history with --commit, then asked what it saw.
#   history/steady    one rank, never changed: the baseline
#   history/drifting  the same layout, judged against steady (loss_matches rtol 1e-3). From commit 12 on
#                     a planted fault scales its learning rate by 1 + 1e-4 x (k - 11): every run
#                     stays within the check's tolerance, so every run is green
#   history/flaky     fails its first attempt on every fourth commit and passes the retry
#                     (--retries 1): green every time, flaky one run in four
# Then `meshtest history --drift` must name commit 12, `--flaky` history/flaky at 25%; and the same
# 32 commits without the fault and the flake (a clean history) must report neither.
# Usage: tools/history/scripted_history.sh MESHTEST WORK_DIR
set -uo pipefail
meshtest=$(realpath "$1") work=$2
rm -rf "$work" && mkdir -p "$work" && work=$(cd "$work" && pwd)
fail() { echo "scripted_history: FAIL: $*"; exit 1; }

write_matrix() {  # commit, learning rate of the drifting case, flake (1/0)
  cat > "$work/history.yaml" <<YAML
suite: history
defaults: {model: tiny, options: {steps: 10}}
cases:
  - {name: steady, mesh: {dp_shard: 1}}
  - name: drifting
    mesh: {dp_shard: 1}
    options: {lr: "$2"}
    checks: [{loss_matches: {baseline: steady, rtol: 1.0e-3}}]
  - name: flaky
    command: [sh, -c, 'if [ "$3" = 1 ] && [ ! -e "\$0" ]; then touch "\$0"; exit 1; fi', "{case_dir}.attempted"]
    default_checks: false
    checks: [exit]
YAML
}

record_history() {  # db, with faults (1/0)
  local db=$1 faults=$2 start=$SECONDS
  for k in $(seq 1 32); do
    local lr=0.0008 flake=0
    if [ "$faults" = 1 ] && [ "$k" -ge 12 ]; then lr=$(python3 -c "print(0.0008 * (1 + 1e-4 * ($k - 11)))"); fi
    if [ "$faults" = 1 ] && [ $((k % 4)) = 0 ]; then flake=1; fi
    write_matrix "$k" "$lr" "$flake"
    rm -rf "$work/out"
    "$meshtest" run "$work/history.yaml" --out "$work/out" --retries 1 --history "$db" --commit "commit-$k" \
      > "$work/run-$k.log" 2>&1 || { tail -n 20 "$work/run-$k.log"; fail "run $k was not green"; }
  done
  echo "scripted_history: 32 runs recorded into $(basename "$db") in $((SECONDS - start)) s"
}

record_history "$work/faulty.db" 1
"$meshtest" history --history "$work/faulty.db" --drift | tee "$work/drift.txt"
"$meshtest" history --history "$work/faulty.db" --flaky | tee "$work/flaky.txt"
"$meshtest" history history/drifting --history "$work/faulty.db" --last 6
grep -q "history/drifting: first at commit commit-12 " "$work/drift.txt" || fail "--drift does not name commit-12"
grep -q "^1 case left" "$work/drift.txt" || fail "--drift names more than history/drifting"
grep -q "history/flaky .* 25.0%" "$work/flaky.txt" || fail "--flaky does not give history/flaky at 25%"
grep -q "^1 flaky case" "$work/flaky.txt" || fail "--flaky names more than history/flaky"
grep -q "drift: history/drifting passed but left the band" "$work/run-12.log" || fail "run 12 did not note the drift"

record_history "$work/clean.db" 0
"$meshtest" history --history "$work/clean.db" --drift --flaky | tee "$work/clean.txt"
grep -q "^0 cases left" "$work/clean.txt" && grep -q "^0 flaky cases" "$work/clean.txt" || fail "the clean history reports something"
echo "scripted_history: drift found at commit-12, flaky at 25%, the clean history clean"
