#!/usr/bin/env bash
# Simulated worlds on one GPU, in one device call (under 10 minutes): builds meshtest and
# meshtrain (CUDA preset), runs test_matrix/gpu_sim.yaml (every multi-rank layout's ranks
# sharing one GPU, docs/simulation.md), then the cost of simulation (tools/bench/sim_cost.sh).
# Reports and rank logs go to ${OUT:-build/cuda/results}/gpu_sim.tgz (gpu_sim-IofN.tgz for a
# part), the bench to sim_cost.tgz.
# Carry: .deps/include .deps/pugixml .deps/sqlite (docs/building.md: CLI11, pugixml, SQLite for the GPU image).
# Usage: ci/gpu-sim.sh [--part I/N] [meshtest run options...]
#   --part I/N: the I-th of N shards of the matrix (meshtest run --shard, balanced by expected
#   duration, baselines added back), archived as gpu_sim-IofN.tgz, the bench in the last part only:
#   on an H100 from cold the whole matrix does not fit one 10-minute call, two parts do
#   (ci/gpu-sim.sh --part 1/2, then --part 2/2; `meshtest merge` joins their summaries).
#   SIM_BENCH=0 skips the bench; CALL_LIMIT_S (590) is the call's end, BENCH_S (110) the bench's share.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu-env.sh
name=gpu_sim part=()
if [ "${1:-}" = --part ]; then
  [[ "${2:-}" =~ ^([0-9]+)/([0-9]+)$ ]] || { echo "gpu-sim: --part takes I/N, e.g. 1/2" >&2; exit 2; }
  name=gpu_sim-${BASH_REMATCH[1]}of${BASH_REMATCH[2]} part=(--shard "$2")
  [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] || SIM_BENCH=${SIM_BENCH:-0}
  shift 2
fi
out=${OUT:-build/cuda/results}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
gpu_build meshtest meshtrain
echo "gpu-sim: built in ${SECONDS} s"
bench_s=$([ "${SIM_BENCH:-1}" = 1 ] && echo "${BENCH_S:-110}" || echo 0)
MATRIX_LIMIT_S=$(( ${CALL_LIMIT_S:-590} - SECONDS - bench_s - 20 )) OUT=$out \
  bash ci/gpu-matrix.sh "$name" test_matrix/gpu_sim.yaml --ngpu 1 "${part[@]}" "$@"
rc=$?
echo "gpu-sim: matrix exit $rc at ${SECONDS} s"
if [ "$bench_s" -gt 0 ]; then
  timeout --signal=TERM "$(( ${CALL_LIMIT_S:-590} - SECONDS - 10 ))" \
    bash tools/bench/sim_cost.sh "$out/sim_cost" build/cuda/meshtrain build/cuda/meshtest nccl
  (cd "$out" && tar czf sim_cost.tgz sim_cost && rm -rf sim_cost)
fi
echo "gpu-sim: done at ${SECONDS} s"
exit "$rc"
