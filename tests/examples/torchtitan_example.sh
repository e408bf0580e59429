#!/usr/bin/env bash
# examples/torchtitan.yaml where torchtitan cannot run (the CPU CI): the matrix loads from another
# working directory, the torchtitan adapter writes each layout's --parallelism degrees, and every
# case is reported skipped by its `requires:` probes with their reasons, exit 0. Where torchtitan
# is importable this test steps aside (exit 77): ci/gpu-torchtitan.sh runs the matrix for real.
# Usage: tests/examples/torchtitan_example.sh MESHTEST OUT_DIR
set -uo pipefail
meshtest=$1 out=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
if "$repo/examples/torchtitan/python.sh" -c 'import torchtitan.train' 2>/dev/null; then
  echo "torchtitan_example: torchtitan is importable here; ci/gpu-torchtitan.sh is its test"
  exit 77
fi
fail() { echo "torchtitan_example: FAIL: $*"; exit 1; }
cd "$(mktemp -d)"  # not the repository: paths in the matrix are {matrix_dir}-relative
rm -rf "$out"
"$meshtest" run "$repo/examples/torchtitan.yaml" --out "$out" > run.log 2>&1
rc=$?
cat run.log
[ "$rc" = 0 ] || fail "meshtest exited $rc with every case skipped"
grep -q "needs torchtitan (ci/gpu-torchtitan.sh brings it)" run.log || fail "the probe's reason is not shown"
cases=$("$meshtest" list "$repo/examples/torchtitan.yaml" 2>/dev/null | grep -c '^torchtitan/')
grep -q "^$cases skipped in" run.log || fail "expected all $cases cases skipped"
# The adapter's argv: the mesh as torchtitan's degrees, the model as --module/--config.
argv=$("$meshtest" show 'torchtitan/fsdp+tp' "$repo/examples/torchtitan.yaml" 2>/dev/null | tr -d ' \n')
for want in '"--module","llama3","--config","llama3_debugmodel"' '"--parallelism.data_parallel_shard_degree","2"' \
            '"--parallelism.tensor_parallel_degree","2"' "\"--hf_assets_path\",\"$repo/examples/../.deps/"; do
  [[ $argv == *"$want"* ]] || fail "show torchtitan/fsdp+tp lacks $want"
done
echo "torchtitan_example: $cases cases skipped with their reasons; the adapter's argv as expected"
