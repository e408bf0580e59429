#!/usr/bin/env bash
# Simulated worlds on one GPU, in one device call (under 10 minutes): builds meshtest and
# meshtrain (CUDA preset), runs test_matrix/gpu_sim.yaml (every multi-rank layout's ranks
# sharing one GPU, docs/simulation.md), then the cost of simulation (tools/bench/sim_cost.sh).
# Reports and rank logs go to ${OUT:-build/cuda/results}/gpu_sim.tgz, the bench to sim_cost.tgz.
# Carry: .deps/include .deps/pugixml .deps/sqlite (docs/building.md: CLI11, pugixml, SQLite for the GPU image).
# Usage: ci/gpu-sim.sh [meshtest run options...]
#   SIM_BENCH=0 skips the bench; CALL_LIMIT_S (590) is the call's end, BENCH_S (110) the bench's share.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu-env.sh
out=${OUT:-build/cuda/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
gpu_build meshtest meshtrain
echo "gpu-sim: built in ${SECONDS} s"
bench_s=$([ "${SIM_BENCH:-1}" = 1 ] && echo "${BENCH_S:-110}" || echo 0)
MATRIX_LIMIT_S=$(( ${CALL_LIMIT_S:-590} - SECONDS - bench_s - 20 )) OUT=$out \
  bash ci/gpu-matrix.sh gpu_sim test_matrix/gpu_sim.yaml --ngpu 1 "$@"
rc=$?
echo "gpu-sim: matrix exit $rc at ${SECONDS} s"
if [ "$bench_s" -gt 0 ]; then
  timeout --signal=TERM "$(( ${CALL_LIMIT_S:-590} - SECONDS - 10 ))" \
    bash tools/bench/sim_cost.sh "$out/sim_cost" build/cuda/meshtrain build/cuda/meshtest nccl
  (cd "$out" && tar czf sim_cost.tgz sim_cost && rm -rf sim_cost)
fi
echo "gpu-sim: done at ${SECONDS} s"
exit "$rc"
