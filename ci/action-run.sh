#!/usr/bin/env bash
# The GitHub Action's run step (action.yml at the repository root), a script of its own so that it
# can be tested without GitHub (tests/action/action_test.sh, CTest action_run):
#   1. runs `meshtest run` with the action's inputs;
#   2. writes the outputs `status` (meshtest's exit status), `out`, `report` and `artifact-dir` to
#      $GITHUB_OUTPUT, the status first, whatever happens next;
#   3. appends `meshtest report OUT --markdown` to $GITHUB_STEP_SUMMARY (or, when this run wrote no
#      summary.json, how meshtest ended and the errors it printed);
#   4. gathers what the action uploads into a fresh folder under $RUNNER_TEMP (output
#      `artifact-dir`): meshtest's own output (meshtest-output.txt), report.html, junit.xml,
#      summary.json, surefire/, and the logs of the cases that missed their expectation
#      (`logs: failed`), of every case (`all`) or none (`none`), never checkpoints. A run that
#      wrote no summary.json still uploads its output and every case log it left;
#   5. exits with meshtest's status (action.yml carries on to the upload and fails the job in
#      its last step).
#
# Inputs come as environment variables, every one optional:
#   INPUT_MESHTEST       the meshtest binary (default: `meshtest` on PATH)
#   INPUT_MATRIX         matrix YAML files, separated by spaces or newlines, globs expanded
#                        (default: none, i.e. the CPU matrix built into meshtest)
#   INPUT_BACKEND        --backend (gloo|nccl; default: meshtest's, gloo)
#   INPUT_NGPU           --ngpu
#   INPUT_SELECT         one -k per word (a case is run if its id contains any of them)
#   INPUT_TAG            one --tag per word
#   INPUT_SHARD          --shard I/N
#   INPUT_OUT            --out (default meshtest-out, relative to the working directory)
#   INPUT_ARGS           more `meshtest run` arguments; quotes are honoured ('a b' is one
#                        argument), nothing is expanded or run
#   INPUT_LOGS           failed (default) | all | none: whose logs go into the artifact folder
#   INPUT_ARTIFACT_NAME  only named in the step summary
#   GITHUB_STEP_SUMMARY, GITHUB_OUTPUT, RUNNER_TEMP (default: $TMPDIR or /tmp)
# Usage: ci/action-run.sh   (exit: meshtest's status; 2 for an input error; 127 if there is no meshtest)
set -uo pipefail

meshtest=${INPUT_MESHTEST:-meshtest}
out=${INPUT_OUT:-meshtest-out}
logs=${INPUT_LOGS:-failed}
summary_md=${GITHUB_STEP_SUMMARY:-/dev/null}
outputs=${GITHUB_OUTPUT:-/dev/null}
tmp_root=${RUNNER_TEMP:-${TMPDIR:-/tmp}}

say() { echo "meshtest-action: $*"; }
warn() { echo "::warning::meshtest-action: $*"; }
output() { printf '%s=%s\n' "$1" "$2" >> "$outputs"; }

# The step summary when meshtest wrote no summary.json: how it ended, the last lines meshtest
# printed (its errors: `FILE:LINE:COL: ...`, `meshtest: ...`) and where to look.
summary_without_report() {
  # shellcheck disable=SC2016 # the backquotes are Markdown
  {
    printf '### meshtest: exited %s without a report\n\n' "$1"
    printf '%s\n\n' "$2"
    if [ -s "${4:-}" ]; then
      printf '```\n'
      tail -n 10 "$4"
      printf '```\n\n'
    fi
    [ -z "${3:-}" ] || printf 'The command: `%s`. Its output is in this step'"'"'s log and the artifact.\n\n' "$3"
  } >> "$summary_md"
}

# The end of the run when meshtest did not run at all: status, summary, exit.
give_up() {
  local status=$1 why=$2
  echo "::error::meshtest-action: $why"
  output status "$status"
  output out ""
  output report ""
  output artifact-dir ""
  summary_without_report "$status" "$why"
  exit "$status"
}

case $logs in
  failed | all | none) ;;
  *) give_up 2 "input logs is '$logs'; it takes failed, all or none" ;;
esac

# ---- 1. the command ----
argv=(run)
if [ -n "${INPUT_MATRIX:-}" ]; then
  # Split on whitespace, globs expanded (test_matrix/*.yaml); an unmatched glob stays as written,
  # and meshtest says the file does not exist.
  # shellcheck disable=SC2206
  argv+=($INPUT_MATRIX)
fi
set -f # no globbing from here: the words below are case-id texts, tags and arguments
for k in ${INPUT_SELECT:-}; do argv+=(-k "$k"); done
for t in ${INPUT_TAG:-}; do argv+=(--tag "$t"); done
set +f
[ -z "${INPUT_BACKEND:-}" ] || argv+=(--backend "$INPUT_BACKEND")
[ -z "${INPUT_NGPU:-}" ] || argv+=(--ngpu "$INPUT_NGPU")
[ -z "${INPUT_SHARD:-}" ] || argv+=(--shard "$INPUT_SHARD")
argv+=(--out "$out")
if [[ -n ${INPUT_ARGS:-} && -n ${INPUT_ARGS//[[:space:]]/} ]]; then
  # xargs splits the way a shell would for quotes and backslashes, and runs nothing but printf.
  split=$(mktemp "$tmp_root/meshtest-args.XXXXXX") || give_up 2 "cannot create a file in $tmp_root"
  if ! printf '%s' "$INPUT_ARGS" | xargs printf '%s\0' > "$split"; then
    rm -f "$split"
    give_up 2 "input args could not be split (an unmatched quote?): $INPUT_ARGS"
  fi
  mapfile -d '' -t extra < "$split"
  rm -f "$split"
  argv+=("${extra[@]}")
fi

if ! command -v "$meshtest" > /dev/null 2>&1 || [ -d "$meshtest" ]; then
  give_up 127 "no meshtest at '$meshtest' (install the .deb, build it in an earlier step, or set the input meshtest; docs/install.md)"
fi

# summary.json as it was before the run: a stale one (an earlier run into the same folder) must
# not be reported as this run's.
stamp() { stat -c '%i %y %s' "$out/summary.json" 2> /dev/null || echo none; }
before=$(stamp)

printf -v shown ' %q' "$meshtest" "${argv[@]}"
shown=${shown# }
say "$shown"
# meshtest's output goes to the step's log and, for the artifact and the summary, to a file.
output_file=$(mktemp "$tmp_root/meshtest-output.XXXXXX") || output_file=/dev/null
"$meshtest" "${argv[@]}" 2>&1 | tee "$output_file"
status=${PIPESTATUS[0]}
say "meshtest exited $status"

# ---- 2. outputs, the status first ----
output status "$status"
if [ -d "$out" ]; then out_abs=$(cd "$out" && pwd -P); else out_abs=$(pwd -P)/$out; fi
output out "$out_abs"
fresh=false
if [ -f "$out/summary.json" ] && [ "$(stamp)" != "$before" ]; then fresh=true; fi
if $fresh && [ -f "$out/report.html" ]; then output report "$out_abs/report.html"; else output report ""; fi

# ---- 3. the step summary ----
if $fresh; then
  if ! "$meshtest" report "$out" --markdown >> "$summary_md"; then
    warn "meshtest report $out --markdown failed; the step summary lacks the table"
  fi
  echo >> "$summary_md"
else
  case $status in
    0 | 1) why="meshtest ended without writing $out/summary.json." ;;
    2) why="meshtest reported an error (exit 2: an invalid matrix, --id or --shard, or another error it names in the log as \`meshtest: ...\`)." ;;
    12[89] | 1[3-9][0-9] | 2[0-5][0-9]) why="meshtest was stopped by signal $((status - 128)) before writing $out/summary.json." ;;
    1[0-2][0-9]) why="meshtest did not accept its command line (CLI11 exit $status; 105: a MATRIX file does not exist)." ;;
    *) why="meshtest ended with status $status before writing $out/summary.json." ;;
  esac
  summary_without_report "$status" "$why" "$shown" "$output_file"
fi

# ---- 4. the artifact folder ----
# A file of OUT (path relative to it) into the artifact folder, same relative path: a hard link
# where it can be, else a copy.
stage_file() {
  mkdir -p "$stage/$(dirname "$1")" &&
    { ln -f "$out/$1" "$stage/$1" 2> /dev/null || cp -f "$out/$1" "$stage/$1"; }
}
# A case's diagnostics (its dir relative to OUT): logs, error files, collective counts, metrics and
# the contract's JSON dumps, never a checkpoint folder or a weights file; with a second argument,
# only those written after that file was.
case_files() {
  (cd "$out" && find "$1" -type d -name checkpoint -prune -o -type f \
    \( -name '*.log' -o -name '*.txt' -o -name '*.json' -o -name '*.jsonl' \) ${2:+-newer "$2"} -print0)
}
# The folders (relative to OUT, NUL-separated) of this run's cases from summary.json: with
# `failed`, those that missed their expectation; with `all`, every one; and in both the folders of
# the earlier attempts of a retried case (<dir>.attempt<k>).
case_dirs() {
  python3 - "$out" "$1" << 'PY'
import json, os, sys
out, which = os.path.realpath(sys.argv[1]), sys.argv[2]
try:
    with open(os.path.join(out, "summary.json")) as f:
        cases = json.load(f).get("cases") or []
except (OSError, ValueError, AttributeError) as e:
    print("::warning::meshtest-action: cannot read the failing cases from summary.json: %s" % e, file=sys.stderr)
    sys.exit(0)
for case in cases:
    d = case.get("dir") or ""
    if not d:
        continue
    dirs = [d] if which == "all" or not case.get("met_expectation", True) else []
    dirs += ["%s.attempt%d" % (d, k) for k in range(1, len(case.get("earlier_attempts") or []) + 1)]
    for x in dirs:
        rel = os.path.relpath(os.path.realpath(x), out)
        if rel in (os.curdir, os.pardir) or rel.startswith(os.pardir + os.sep):
            print("meshtest-action: %s is not inside %s; its logs are left out" % (x, out), file=sys.stderr)
        elif os.path.isdir(os.path.join(out, rel)):
            sys.stdout.write(rel + "\0")
PY
}
# The folders whose files go into the artifact folder (relative to OUT, NUL-separated).
staged_dirs() {
  if [ "$logs" = none ]; then
    return
  elif command -v python3 > /dev/null 2>&1; then
    case_dirs "$logs"
  else
    # Without python3 to read summary.json: every folder of OUT but surefire/ (the suites, and
    # in them the cases).
    [ "$logs" = all ] || warn "no python3 to read which cases failed from summary.json; every case's logs go in" >&2
    (cd "$out" && find . -mindepth 1 -maxdepth 1 -type d ! -name surefire -printf '%P\0')
  fi
}

# Without this run's summary.json: every case folder (of which case_files keeps the files written
# since meshtest started: the output file is created just before), none of an earlier run's reports.
every_case_dir() {
  [ -d "$out" ] && (cd "$out" && find . -mindepth 1 -maxdepth 1 -type d ! -name surefire -printf '%P\0')
}

stage=""
if ! stage=$(mktemp -d "$tmp_root/meshtest-artifact.XXXXXX"); then
  warn "cannot create a folder in $tmp_root: nothing to upload"
  stage=""
elif ! $fresh; then
  cp "$output_file" "$stage/meshtest-output.txt" 2> /dev/null || warn "could not stage meshtest's output"
  n=0
  while IFS= read -r -d '' dir; do
    while IFS= read -r -d '' rel; do
      stage_file "$rel" && n=$((n + 1))
    done < <(case_files "$dir" "$output_file")
  done < <(every_case_dir)
  say "artifact folder $stage: meshtest's output and $n files of case logs (this run wrote no summary.json)"
else
  cp "$output_file" "$stage/meshtest-output.txt" 2> /dev/null || warn "could not stage meshtest's output"
  for f in report.html junit.xml summary.json; do
    [ ! -f "$out/$f" ] || stage_file "$f" || warn "could not stage $out/$f"
  done
  if [ -d "$out/surefire" ]; then
    cp -R "$out/surefire" "$stage/" || warn "could not stage $out/surefire"
  fi
  n=0
  while IFS= read -r -d '' dir; do
    while IFS= read -r -d '' rel; do
      stage_file "$rel" && n=$((n + 1))
    done < <(case_files "$dir")
  done < <(staged_dirs)
  say "artifact folder $stage: the reports and $n files of the cases' logs (logs: $logs)"
fi
output artifact-dir "$stage"
if [ -n "$stage" ] && [ -n "${INPUT_ARTIFACT_NAME:-}" ]; then
  # shellcheck disable=SC2016
  printf 'Reports and logs: artifact `%s`.\n\n' "$INPUT_ARTIFACT_NAME" >> "$summary_md"
fi

[ "$output_file" = /dev/null ] || rm -f "$output_file"

# ---- 5. meshtest's status ----
exit "$status"
