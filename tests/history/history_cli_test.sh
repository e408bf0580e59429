#!/usr/bin/env bash
# `meshtest run --history` and `meshtest history` as processes (docs/history.md): two runs writing
# one database at once are both recorded; a truncated database is one warning and the run still
# completes and reports; `history merge` counts a run once; `history CASE --json` and the flags.
# Usage: tests/history/history_cli_test.sh MESHTEST WORK_DIR
set -uo pipefail
meshtest=$1 work=$2
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "history_cli: FAIL: $*"; exit 1; }
cat > m.yaml <<'YAML'
suite: h
cases:
  - {name: a, command: [sh, -c, "sleep 0.2"], default_checks: false, checks: [exit]}
  - {name: b, command: [sh, -c, "sleep 0.2"], default_checks: false, checks: [exit]}
YAML
"$meshtest" run m.yaml --out one --history h.db --commit c1 > one.log 2>&1 &
"$meshtest" run m.yaml --out two --history h.db --commit c1 > two.log 2>&1 &
wait %1 || fail "run one failed: $(cat one.log)"
wait %2 || fail "run two failed: $(cat two.log)"
"$meshtest" history --history h.db > count.txt || fail "history"
grep -q "h.db: 2 runs of 2 cases" count.txt || fail "two concurrent runs not both recorded: $(cat count.txt)"
MESHTEST_HISTORY=h.db "$meshtest" history h/a --json > a.json || fail "history h/a --json"
python3 -c "import json,sys; d=json.load(open('a.json')); assert len(d['runs'])==2 and d['runs'][0]['status']=='passed', d" ||
  fail "history h/a --json: $(cat a.json)"
"$meshtest" history merge merged.db h.db > merge1.txt && "$meshtest" history merge merged.db h.db > merge2.txt || fail "history merge"
grep -q "2 runs from h.db" merge1.txt && grep -q "0 runs from h.db" merge2.txt && grep -q "merged.db holds 2 runs" merge2.txt ||
  fail "history merge twice: $(cat merge1.txt merge2.txt)"
head -c 3000 h.db > broken.db
"$meshtest" run m.yaml --out three --history broken.db > three.log 2>&1 || fail "a run with a truncated history failed: $(cat three.log)"
grep -q "meshtest: warning: run not recorded in the history: history $PWD/broken.db" three.log || fail "no warning: $(cat three.log)"
[ -s three/summary.json ] && [ -s three/report.html ] || fail "the run with a truncated history wrote no reports"
"$meshtest" history --history broken.db > broken.txt 2>&1 && fail "history of a truncated database succeeded"
grep -q "broken.db" broken.txt || fail "the error does not name the file: $(cat broken.txt)"
echo "history_cli: concurrent runs recorded, truncated database a warning, merge idempotent"
