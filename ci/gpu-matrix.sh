#!/usr/bin/env bash
# On a GPU machine: builds meshtest and meshtrain (CUDA preset) and runs one matrix over
# NCCL; the reports and rank logs (not checkpoints) are archived to $OUT/<name>.tgz.
# Usage: ci/gpu-matrix.sh NAME MATRIX.yaml [meshtest run options...]
#   e.g. ci/gpu-matrix.sh resharding-4gpu test_matrix/resharding.yaml --ngpu 4
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu-env.sh
name=$1 matrix=$2
shift 2
gpu_build meshtest meshtrain
out=${OUT:-build/cuda/results}/$name
run_dir=build/cuda/matrix-$name
rm -rf "$run_dir"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1 > "$out/gpu.txt"
# MATRIX_LIMIT_S: a deadline for the run; meshtest stops on SIGTERM and still writes its reports.
timeout --signal=TERM --kill-after=30 "${MATRIX_LIMIT_S:-86400}" \
  build/cuda/meshtest run "$matrix" --backend nccl --out "$run_dir" --grace 10 "$@" 2>&1 | tee "$out/meshtest.log" | tail -n 60
rc=${PIPESTATUS[0]}
dest=$(cd "$out" && pwd)
(cd "$run_dir" && find . \( -name 'rank*.log' -o -name 'rank*.json' -o -name metrics.jsonl -o -name generate.json \
   -o -name summary.json -o -name report.html -o -name junit.xml -o -name 'TEST-*.xml' -o -name state_dict_keys.json \) \
   -not -path '*/checkpoint/*' -exec cp --parents {} "$dest/" \;)
# The device tool returns at most 8 files: one archive per matrix.
(cd "$(dirname "$dest")" && tar czf "$name.tgz" "$name" && rm -rf "$name")
echo "gpu-matrix: $name exit $rc (reports in $(dirname "$dest")/$name.tgz)"
exit "$rc"
