#!/usr/bin/env bash
# The GitHub Action's run step (ci/action-run.sh, what action.yml runs) without GitHub: a fake
# $GITHUB_STEP_SUMMARY, $GITHUB_OUTPUT and $RUNNER_TEMP, and a throwaway matrix of `sh -c` cases.
# For a passing selection, a failing one (with a retry), one with quoted extra arguments and
# `logs: all`, an invalid matrix written over an earlier run's folder, and a missing meshtest:
# the script exits with meshtest's status (the same as meshtest run alone), appends to the step
# summary, writes the outputs, and puts the reports and the right logs (never a checkpoint) in the
# artifact folder. Also: every INPUT_* the script reads is passed by action.yml. CTest: action_run.
# Usage: tests/action/action_test.sh MESHTEST
# shellcheck disable=SC2016,SC2034 # check's conditions are eval'ed: single quotes on purpose
set -uo pipefail
meshtest=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
repo=$(cd "$(dirname "$0")/../.." && pwd)
script=$repo/ci/action-run.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
fail() { echo "action_test: FAIL: $*"; failures=$((failures + 1)); }
check() { if eval "$1"; then echo "action_test: ok   $2"; else fail "$2"; fi; }

cat > tiny.yaml << 'YAML'
suite: tiny
cases:
  - name: ok
    command: [sh, -c, "echo fine"]
  - name: bad
    ngpu: 2
    # writes a checkpoint-like file, which must stay out of the artifact
    command: [sh, -c, "mkdir -p \"$0/checkpoint\" && echo weights > \"$0/checkpoint/shard.log\"; echo boom >&2; exit 3", "{phase_dir}"]
  - name: slow
    tags: [slow]
    command: [sh, -c, "echo slow"]
YAML
printf 'suite: broken\ncases:\n  - name: x\n    bogus: 1\n' > broken.yaml

export GITHUB_STEP_SUMMARY=$work/summary.md RUNNER_TEMP=$work/runner-temp
mkdir -p "$RUNNER_TEMP"
: > "$GITHUB_STEP_SUMMARY"

# run NAME ENV...: ci/action-run.sh with these INPUT_* (and INPUT_MESHTEST unless given), outputs
# to outputs-NAME, its exit status to $rc, its log to log-NAME.
run() {
  local name=$1
  shift
  env GITHUB_OUTPUT="$work/outputs-$name" INPUT_MESHTEST="$meshtest" "$@" bash "$script" > "log-$name" 2>&1
  rc=$?
  sed "s/^/  [$name] /" "log-$name"
}
out_of() { sed -n "s/^$2=//p" "$work/outputs-$1" | tail -n 1; }
direct() { "$meshtest" run "$@" > /dev/null 2>&1; echo $?; }
headings() { grep -c '^### meshtest' "$GITHUB_STEP_SUMMARY"; }

# 1. passing: exit 0, a summary, the reports in the artifact folder and no case's log.
run pass INPUT_MATRIX=tiny.yaml INPUT_SELECT=ok
want=$(direct tiny.yaml -k ok --out direct-pass)
check '[ "$rc" = 0 ] && [ "$rc" = "$want" ]' "passing selection: exit $rc, meshtest alone $want"
check '[ "$(out_of pass status)" = 0 ]' "passing: output status=0"
check '[ "$(out_of pass out)" = "$work/meshtest-out" ]' "passing: output out is the absolute folder"
check '[ "$(out_of pass report)" = "$work/meshtest-out/report.html" ] && [ -f "$(out_of pass report)" ]' "passing: output report is report.html"
check 'grep -q "^### meshtest: 1 passed" summary.md && [ "$(headings)" = 1 ]' "passing: the Markdown summary appended"
art=$(out_of pass artifact-dir)
check '[ -d "$art" ] && [ -f "$art/report.html" ] && [ -f "$art/junit.xml" ] && [ -f "$art/summary.json" ] && [ -d "$art/surefire" ]' \
  "passing: report.html, junit.xml, summary.json, surefire/ in the artifact folder"
check '[ -z "$(find "$art" -name "*.log")" ]' "passing: no case's log in the artifact folder (logs: failed)"

# 2. failing, with a retry: exit 1, the summary appended after the first, the failing case's logs
#    and its earlier attempt's, not the passing case's, and no checkpoint.
run fail INPUT_MATRIX=tiny.yaml "INPUT_SELECT=ok bad" INPUT_ARGS="--retries 1" INPUT_ARTIFACT_NAME=t-art
want=$(direct tiny.yaml -k ok -k bad --retries 1 --out direct-fail)
check '[ "$rc" = 1 ] && [ "$rc" = "$want" ]' "failing selection: exit $rc, meshtest alone $want"
check '[ "$(out_of fail status)" = 1 ]' "failing: output status=1"
check '[ "$(headings)" = 2 ] && grep -q "^### meshtest: 1 passed, 1 failed" summary.md && grep -q "tiny/bad" summary.md' \
  "failing: its summary appended after the first one, naming tiny/bad"
check 'grep -q "artifact \`t-art\`" summary.md' "failing: the summary names the artifact"
art=$(out_of fail artifact-dir)
check '[ -f "$art/tiny/bad/train/rank0.log" ] && [ -f "$art/tiny/bad/train/rank1.log" ]' "failing: tiny/bad's rank logs in the artifact folder"
check '[ -f "$art/tiny/bad.attempt1/train/rank0.log" ]' "failing: the earlier attempt's logs too"
check '[ ! -e "$art/tiny/ok" ]' "failing: not the passing case's logs"
check '[ -f meshtest-out/tiny/bad/train/checkpoint/shard.log ] && [ -z "$(find "$art" -path "*checkpoint*")" ]' "failing: no checkpoint in the artifact folder"

# 3. quoted extra arguments (one argument with spaces) and logs: all.
run all INPUT_MATRIX='tin*.yaml' "INPUT_SELECT=ok slow" "INPUT_ARGS=--skip-tag 'slow=no time here'" INPUT_LOGS=all INPUT_OUT=out-all
check '[ "$rc" = 0 ]' "quoted args: exit $rc"
check 'grep -q "no time here" out-all/summary.json' "quoted args: 'slow=no time here' reached meshtest as one argument"
art=$(out_of all artifact-dir)
check '[ -f "$art/tiny/ok/train/rank0.log" ]' "logs: all: the passing case's log in the artifact folder"

# 4. an invalid matrix into the folder of run 2: exit 2, a summary saying so with meshtest's error,
#    meshtest's output uploaded, and run 2's stale summary.json and logs neither reported nor uploaded.
run broken INPUT_MATRIX=broken.yaml
want=$(direct broken.yaml --out direct-broken)
check '[ "$rc" = 2 ] && [ "$rc" = "$want" ]' "invalid matrix: exit $rc, meshtest alone $want"
art=$(out_of broken artifact-dir)
check '[ "$(out_of broken status)" = 2 ] && [ -z "$(out_of broken report)" ]' "invalid matrix: status=2, no report"
check '[ -d "$art" ] && grep -q "^broken.yaml:4:5: unknown key" "$art/meshtest-output.txt"' \
  "invalid matrix: meshtest's output with its error is uploaded"
check '[ ! -e "$art/summary.json" ] && [ ! -e "$art/report.html" ] && [ ! -e "$art/tiny" ]' \
  "invalid matrix: the earlier run's summary.json, report and logs are not uploaded as this run's"
check 'grep -q "^### meshtest: exited 2 without a report" summary.md' "invalid matrix: the summary says so"
check 'grep -q "^broken.yaml:4:5: unknown key" summary.md' "invalid matrix: the summary shows meshtest's error"

# 5. no meshtest: exit 127, status=127.
run missing INPUT_MESHTEST="$work/no-such-meshtest"
check '[ "$rc" = 127 ] && [ "$(out_of missing status)" = 127 ]' "missing meshtest: exit $rc, status=127"
check 'grep -q "^### meshtest: exited 127 without a report" summary.md' "missing meshtest: the summary says so"

# 6. action.yml passes every input the script reads, and runs the script.
while read -r var; do
  grep -q "^ *$var: \${{ inputs\." "$repo/action.yml" || fail "action.yml does not pass $var"
done < <(grep -o 'INPUT_[A-Z_]*' "$script" | sort -u)
check 'grep -q "ci/action-run.sh" "$repo/action.yml"' "action.yml runs ci/action-run.sh"

echo "action_test: $failures failure(s)"
[ "$failures" = 0 ]
