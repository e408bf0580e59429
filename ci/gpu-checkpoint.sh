#!/usr/bin/env bash
# meshtrain's checkpoint on one GPU (issue 64), in one device call: builds meshtest and meshtrain
# (CUDA preset); the asynchronous save judged in gpu_sim.yaml (async_checkpoint and its two
# baselines: pinned host copies, bit for bit the synchronous save, an exact resume); the 1B save
# against the disk and DCP (tools/bench/checkpoint_save.sh); then, with the time left, the
# training-loop cost of async saves (tools/bench/async_save.sh, 1B, one rank).
# Carry: .deps/include .deps/pugixml .deps/sqlite. Results in ${OUT:-build/cuda/results}:
# gpu_sim_async.tgz, checkpoint_save.txt, async_save.txt and the bench logs (bench-logs.tgz).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu-env.sh
out=$(mkdir -p "${OUT:-build/cuda/results}" && cd "${OUT:-build/cuda/results}" && pwd)
limit=${CALL_LIMIT_S:-590}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1 | tee "$out/gpu.txt"
gpu_build meshtest meshtrain
echo "gpu-checkpoint: built in $SECONDS s"
MATRIX_LIMIT_S=$(( limit / 3 )) OUT=$out bash ci/gpu-matrix.sh gpu_sim_async test_matrix/gpu_sim.yaml --ngpu 1 \
  --id gpu_sim/async_checkpoint
rc=$?
echo "gpu-checkpoint: gpu_sim async_checkpoint exit $rc at $SECONDS s"
export BENCH_DIR=$PWD/build/cuda/bench-ckpt
timeout --signal=TERM $(( limit - SECONDS - 30 )) bash tools/bench/checkpoint_save.sh 1B build/cuda/meshtrain -- \
  --backend nccl --param-dtype bfloat16 --threads 16 2>&1 | tee "$out/checkpoint_save.txt"
echo "gpu-checkpoint: checkpoint_save at $SECONDS s"
left=$(( limit - SECONDS - 20 ))
if [ "$left" -gt 150 ]; then
  RANKS=1 timeout --signal=TERM "$left" bash tools/bench/async_save.sh 1B 90 30 build/cuda/meshtrain -- \
    --backend nccl --param-dtype bfloat16 --threads 16 --seq-len 2048 --local-batch-size 4 --global-batch-size 4 \
    2>&1 | tee "$out/async_save.txt"
fi
(cd build/cuda && tar czf "$out/bench-logs.tgz" bench-ckpt/*.log bench-ckpt/*/rank0.json bench-ckpt/dcp.json 2>/dev/null)
echo "gpu-checkpoint: done at $SECONDS s"
exit "$rc"
