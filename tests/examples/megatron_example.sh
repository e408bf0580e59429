#!/usr/bin/env bash
# examples/megatron.yaml where Megatron-LM cannot run (the CPU CI): the matrix loads from another
# working directory, the megatron adapter writes each layout's sizes and the flags that make a run
# judgeable, and a run stops with the adapter's reason (exit 2), naming the variable to set. Where
# $MESHTEST_MEGATRON_LM is set this test steps aside (exit 77): ci/gpu-megatron.sh runs it for real.
# Usage: tests/examples/megatron_example.sh MESHTEST OUT_DIR
set -uo pipefail
meshtest=$1 out=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ -n "${MESHTEST_MEGATRON_LM:-}" ]; then
  echo "megatron_example: MESHTEST_MEGATRON_LM is set; ci/gpu-megatron.sh is its test"
  exit 77
fi
fail() { echo "megatron_example: FAIL: $*"; exit 1; }
cd "$(mktemp -d)"  # not the repository
rm -rf "$out"
cases=$("$meshtest" list "$repo/examples/megatron.yaml" 2>/dev/null | grep -c '^megatron/')
[ "$cases" -ge 14 ] || fail "expected 14 cases or more, listed $cases"
"$meshtest" run "$repo/examples/megatron.yaml" --out "$out" > run.log 2>&1
rc=$?
cat run.log
[ "$rc" = 2 ] || fail "meshtest exited $rc, expected 2: no case can run without Megatron-LM"
grep -q "every selected case needs Megatron-LM: set MESHTEST_MEGATRON_LM" run.log || fail "the adapter's reason is not shown"
# The adapter's argv for a save under TP 2 x PP 2: the sizes, TensorBoard, torch_dist, the exit.
argv=$("$meshtest" show megatron/resume_tp2pp2_to_tp4 "$repo/examples/megatron.yaml" 2>/dev/null | tr -d ' \n')
for want in '"--tensor-model-parallel-size","2","--pipeline-model-parallel-size","2"' \
            '"--tensorboard-dir","{phase_dir}/tensorboard"' '"--ckpt-format","torch_dist"' '"--exit-interval","5"' \
            '"--tensor-model-parallel-size","4","--pipeline-model-parallel-size","1"' '"CUBLAS_WORKSPACE_CONFIG":":4096:8"'; do
  [[ $argv == *"$want"* ]] || fail "show megatron/resume_tp2pp2_to_tp4 lacks $want"
done
# A Megatron whose help text cannot be formatted (as d98e8a6's: "unsupported format character")
# still has its flags checked: the adapter lists its parser's option strings. A checkout whose
# pretrain_gpt.py would train if --help were not intercepted exits 3 instead.
fake=$PWD/fake-megatron
mkdir -p "$fake"
cat > "$fake/pretrain_gpt.py" <<'PY'
import argparse
parser = argparse.ArgumentParser(allow_abbrev=False)
for flag in ["tensor-model-parallel-size", "pipeline-model-parallel-size", "context-parallel-size",
             "expert-model-parallel-size", "log-interval", "tensorboard-dir", "tensorboard-log-interval",
             "ckpt-format", "save", "load", "train-iters", "exit-interval", "hidden-size"]:
    parser.add_argument("--" + flag, help="100% broken %m help text")
for flag in ["use-distributed-optimizer", "log-num-zeros-in-grad", "deterministic-mode"]:
    parser.add_argument("--" + flag, action="store_true")
parser.parse_args()
raise SystemExit(3)
PY
for key in hidden-size hiden-size; do
  printf 'suite: fake\ndefaults: {adapter: megatron, options: {train-iters: 10}}\ncases:\n  - {name: c, ngpu: 1, options: {%s: 64}}\n' \
    "$key" > "$key.yaml"
done
MESHTEST_MEGATRON_LM=$fake "$meshtest" show fake/c hidden-size.yaml > known.txt 2>&1 || { cat known.txt; fail "a case of known flags was refused"; }
grep -q "flag names are not checked" known.txt && { cat known.txt; fail "the flags went unchecked"; }
MESHTEST_MEGATRON_LM=$fake "$meshtest" show fake/c hiden-size.yaml > misspelt.txt 2>&1 && fail "--hiden-size was accepted"
grep -q "hiden-size.yaml:4:.*has no flag --hiden-size; did you mean --hidden-size?" misspelt.txt ||
  { cat misspelt.txt; fail "the misspelt flag is not named with the nearest one"; }
echo "megatron_example: $cases cases load; a run without Megatron-LM stops with the adapter's reason; argv as expected;" \
  "a Megatron whose help text breaks has its flags checked"
