#!/usr/bin/env bash
# Simulated worlds on one GPU, in one device call: builds meshtest and meshtrain (CUDA
# preset), runs test_matrix/gpu_sim.yaml (every multi-rank layout's ranks sharing one GPU,
# docs/simulation.md), then the cost of simulation (tools/bench/sim_cost.sh). Reports, rank
# logs and the bench table go to ${OUT:-build/cuda/results} as gpu_sim.tgz and sim_cost.tgz.
# Usage: ci/gpu-sim.sh [meshtest run options...]   (SIM_BENCH=0 skips the bench)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu-env.sh
t0=$(date +%s)
out=${OUT:-build/cuda/results}
mkdir -p "$out"
gpu_build meshtest meshtrain
echo "gpu-sim: built in $(($(date +%s) - t0)) s"
OUT=$out bash ci/gpu-matrix.sh gpu_sim test_matrix/gpu_sim.yaml --ngpu 1 "$@"
rc=$?
echo "gpu-sim: matrix exit $rc at $(($(date +%s) - t0)) s"
if [ "${SIM_BENCH:-1}" = 1 ]; then
  bash tools/bench/sim_cost.sh "$out/sim_cost" build/cuda/meshtrain build/cuda/meshtest nccl
  (cd "$out" && tar czf sim_cost.tgz sim_cost && rm -rf sim_cost)
fi
echo "gpu-sim: done at $(($(date +%s) - t0)) s"
exit "$rc"
