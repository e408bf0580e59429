#!/usr/bin/env bash
# On a GPU machine with the PyTorch 2.x wheel installed: builds everything against the
# wheel's LibTorch and NCCL (CMake preset `cuda`), runs the tests, then the CUDA smoke
# test: 20 steps of debugmodel on one GPU with the NCCL backend, world size 1.
# Logs go to $OUT when it is set (the device tool), else build/cuda/results.
#
# The GPU image may lack CLI11 (header-only): copy Debian's /usr/include/CLI to
# .deps/include/CLI before sending the tree (see docs/building.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/gpu-env.sh
out=${OUT:-build/cuda/results}
mkdir -p "$out"
echo "gpu-build: torch $(python3 -c 'import torch; print(torch.__version__)'), NCCL headers in ${NCCL_ROOT:-?}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

cmake --preset cuda 2>&1 | tee "$out/configure.log" | tail -n 5
cmake --build --preset cuda -j "$(nproc)" 2>&1 | tee "$out/build.log" | grep -E "error|warning: unused|FAILED" || true
test -x build/cuda/meshtrain

set +e
ctest --preset cuda -j 4 2>&1 | tee "$out/ctest.log" | tail -n 25
tests_rc=${PIPESTATUS[0]}
build/cuda/meshtrain train --model debugmodel --steps 20 --seq-len 2048 --local-batch-size 8 \
  --backend nccl --dump-folder build/cuda/smoke 2>&1 | tee "$out/smoke.log"
smoke_rc=${PIPESTATUS[0]}
cp build/cuda/smoke/metrics.jsonl "$out/smoke-metrics.jsonl" 2>/dev/null

# The small matrices over NCCL: the one-GPU matrix, and the 2-GPU one where two GPUs
# exist. Reports and rank logs (no checkpoints) go to $out as one archive each.
matrix_rc=0
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
for m in gpu1 gpu2; do
  [ "$m" = gpu2 ] && [ "$ngpu" -lt 2 ] && continue
  OUT=$out bash ci/gpu-matrix.sh "$m" "test_matrix/$m.yaml" --ngpu "${m#gpu}" > "$out/meshtest-$m.log" 2>&1
  rc=$?
  tail -n 30 "$out/meshtest-$m.log"
  [ "$rc" -eq 0 ] || matrix_rc=$rc
done
echo "gpu-build: tests exit $tests_rc, smoke exit $smoke_rc, matrices exit $matrix_rc"
[ "$tests_rc" -eq 0 ] && [ "$smoke_rc" -eq 0 ] && [ "$matrix_rc" -eq 0 ]
