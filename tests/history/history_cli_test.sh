#!/usr/bin/env bash
# `meshtest run --history` and `meshtest history` as processes (docs/history.md): two runs writing
# one database at once are both recorded; a truncated database is one warning and the run still
# completes and reports; `history merge` counts a run once; `history CASE --json` and the flags;
# two shards sharing the history, one after the other and at once, run every case once.
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
# INTO among its inputs and a bad input: one warning each, the others merged (issue 47).
cp merged.db again.db
"$meshtest" history merge again.db again.db broken.db h.db > merge3.txt 2> merge3.err || fail "merge with INTO and a bad input: $(cat merge3.err)"
[ "$(grep -c "skipping again.db: it is INTO itself" merge3.err)" = 1 ] && [ "$(grep -c "skipping broken.db" merge3.err)" = 1 ] &&
  grep -q "0 runs from h.db" merge3.txt || fail "merge did not skip INTO and the bad input once each: $(cat merge3.txt merge3.err)"
"$meshtest" run m.yaml --out three --history broken.db > three.log 2>&1 || fail "a run with a truncated history failed: $(cat three.log)"
[ "$(grep -c "meshtest: warning: .*history $PWD/broken.db" three.log)" = 1 ] || fail "not one warning: $(cat three.log)"
[ -s three/summary.json ] && [ -s three/report.html ] || fail "the run with a truncated history wrote no reports"
"$meshtest" history --history broken.db > broken.txt 2>&1 && fail "history of a truncated database succeeded"
grep -q "broken.db" broken.txt || fail "the error does not name the file: $(cat broken.txt)"
# Outside git and without --commit, the run is recorded at 'unknown' with one warning saying so.
nogit=$(mktemp -d /tmp/meshtest-nogit-XXXXXX) && cp m.yaml "$nogit/"  # /tmp: outside any checkout
"$meshtest" run "$nogit/m.yaml" --out four --history h2.db > four.log 2>&1 || fail "run outside git: $(cat four.log)"
rm -rf "$nogit"
[ "$(grep -c "recording this run at commit 'unknown'" four.log)" = 1 ] && grep -q -- "--commit SHA" four.log ||
  fail "no single warning for an unknown commit: $(cat four.log)"
# Shards that share a history split alike whether they run one after the other or at once
# (issue 47): the split reads no run of the commit being tested, so a shard that records first
# cannot move a case into the other shard. Earlier runs at c1 make c's the slowest case.
cat > s.yaml <<'YAML'
suite: s
cases:
  - {name: a, command: [sh, -c, "sleep 0.1"], default_checks: false, checks: [exit]}
  - {name: b, command: [sh, -c, "sleep 0.1"], default_checks: false, checks: [exit]}
  - {name: c, command: [sh, -c, "sleep 0.1"], default_checks: false, checks: [exit]}
  - {name: d, command: [sh, -c, "sleep 0.1"], default_checks: false, checks: [exit]}
YAML
for mode in sequential concurrent; do
  rm -f s.db
  "$meshtest" run s.yaml --out "s0-$mode" --history s.db --commit c1 > /dev/null 2>&1 || fail "seed run"
  if [ "$mode" = sequential ]; then
    "$meshtest" run s.yaml --shard 1/2 --out "s1-$mode" --history s.db --commit c2 > "s1-$mode.log" 2>&1 || fail "shard 1: $(cat "s1-$mode.log")"
    "$meshtest" run s.yaml --shard 2/2 --out "s2-$mode" --history s.db --commit c2 > "s2-$mode.log" 2>&1 || fail "shard 2: $(cat "s2-$mode.log")"
  else
    "$meshtest" run s.yaml --shard 1/2 --out "s1-$mode" --history s.db --commit c2 > "s1-$mode.log" 2>&1 &
    "$meshtest" run s.yaml --shard 2/2 --out "s2-$mode" --history s.db --commit c2 > "s2-$mode.log" 2>&1 &
    wait %1 || fail "shard 1: $(cat "s1-$mode.log")"
    wait %2 || fail "shard 2: $(cat "s2-$mode.log")"
  fi
  python3 - "s1-$mode/summary.json" "s2-$mode/summary.json" <<'PY' || fail "$mode shards: a case ran twice or never"
import json, sys
ran = [c["id"] for f in sys.argv[1:] for c in json.load(open(f))["cases"]]
assert sorted(ran) == ["s/a", "s/b", "s/c", "s/d"], ran
PY
  before=$("$meshtest" history --history s.db)
  MESHTEST_HISTORY=s.db "$meshtest" merge "merged-$mode" "s1-$mode" "s2-$mode" > "merge-$mode.log" 2>&1 ||
    fail "$mode: merge: $(cat "merge-$mode.log")"
  [ "$("$meshtest" history --history s.db)" = "$before" ] || fail "$mode: merge recorded the shards' runs again"
done
echo "history_cli: concurrent runs recorded, truncated database a warning, merge idempotent, shards split alike"
