#!/usr/bin/env bash
# meshtest_sim on the CPU with this machine's torch (Debian 12: python3-torch 1.13, whose c10d
# hosts it as a ProcessGroup): every collective against its exact answer in 2 and 4 processes,
# then each planted collective bug ($MESHTEST_SIM_FAULT) failing the checks it must fail. The
# backend is built on first use into $MESHTEST_SIM_CACHE (default ~/.cache/meshtest/sim), as a
# user's run builds it. Exit 77 (CTest: skipped) when no Python here imports torch.
# Usage: tests/sim/sim_test.sh OUT_DIR
set -uo pipefail
out=$1
cd "$(dirname "$0")/../.."
py=examples/pytorch/python.sh
bash $py -c 'import torch.distributed' 2>/dev/null || { echo "sim_test: no Python here imports torch; skipped"; exit 77; }
rm -rf "$out" && mkdir -p "$out"
run() { PYTHONPATH=$PWD/sim/python${PYTHONPATH:+:$PYTHONPATH} MESHTEST_SIM=1 bash $py tests/sim/collectives_check.py "$@"; }
status=0
for world in 2 4; do
  run $world cpu "$out/world$world" > "$out/world$world.log" 2>&1 || { echo "sim_test: $world ranks:"; tail -n 30 "$out/world$world.log"; status=1; }
  tail -n 1 "$out/world$world.log"
done
# Each fault must fail the checks of the collectives it breaks, and only in the way planted.
declare -A must_fail=(
  [reduce-scatter-wrong-shard]="reduce_scatter_tensor sum"
  [drop-last-rank]="all_reduce sum"
  [sum-for-avg]="all_reduce avg"
)
for fault in "${!must_fail[@]}"; do
  MESHTEST_SIM_FAULT=$fault run 4 cpu "$out/$fault" > "$out/$fault.log" 2>&1
  expected=${must_fail[$fault]}
  if [ "$fault" = sum-for-avg ] && grep -q "ok all_reduce avg (refused" "$out/$fault/rank0.txt" 2>/dev/null; then
    expected="reduce_scatter_tensor avg"
  fi
  if grep -q "^FAILED $expected:" "$out/$fault/rank0.txt" 2>/dev/null; then
    echo "sim_test: $fault caught: $(grep -c '^FAILED' "$out/$fault/rank0.txt") checks of rank 0 failed, '$expected' among them"
  elif grep -q "FAILED $expected" "$out/$fault.log"; then
    echo "sim_test: $fault caught ('$expected' failed)"
  else
    echo "sim_test: $fault NOT caught: '$expected' did not fail"; tail -n 20 "$out/$fault.log"; status=1
  fi
done
# sum-for-avg breaks the averages FSDP2 makes from PREMUL_SUM's 1/N factor (torchtitan's) too.
if grep -q "premul_sum" "$out/sum-for-avg/rank0.txt" 2>/dev/null; then
  if grep -q "^FAILED all_reduce premul_sum:" "$out/sum-for-avg/rank0.txt"; then
    echo "sim_test: sum-for-avg caught in premul_sum too"
  else
    echo "sim_test: sum-for-avg NOT caught in all_reduce premul_sum"; status=1
  fi
fi
exit $status
