#!/usr/bin/env bash
# Foreign trainers in simulated worlds on one GPU (docs/simulation.md#foreign-trainers): builds
# meshtest_sim against the machine's torch (on first use, as a user's run does) and checks every
# collective of it on CUDA tensors in 2, 4 and 8 processes sharing the GPU, then each planted
# collective bug failing those checks. Results in $OUT/sim-foreign (or ./sim-foreign-out).
# Usage: bash ci/gpu-sim-foreign.sh
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu-env.sh
out=${OUT:-$PWD/sim-foreign-out}/sim-foreign
mkdir -p "$out"
export MESHTEST_SIM_CACHE=${MESHTEST_SIM_CACHE:-/tmp/meshtest-sim-cache}
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))' | tee "$out/versions.txt"
status=0
start=$SECONDS
PYTHONPATH=$PWD/sim/python MESHTEST_SIM=1 MESHTEST_SIM_VERBOSE=1 python3 tests/sim/collectives_check.py 2 cuda "$out/world2" \
  > "$out/world2.log" 2>&1 || status=1
echo "build and 2 ranks: $((SECONDS - start)) s"; tail -n 5 "$out/world2.log"
for world in 4 8; do
  PYTHONPATH=$PWD/sim/python MESHTEST_SIM=1 python3 tests/sim/collectives_check.py $world cuda "$out/world$world" \
    > "$out/world$world.log" 2>&1 || status=1
  tail -n 3 "$out/world$world.log"
done
for fault in reduce-scatter-wrong-shard sum-for-avg drop-last-rank; do
  if MESHTEST_SIM_FAULT=$fault PYTHONPATH=$PWD/sim/python MESHTEST_SIM=1 python3 tests/sim/collectives_check.py 4 cuda \
       "$out/fault-$fault" > "$out/fault-$fault.log" 2>&1; then
    echo "canary $fault: NOT caught"; status=1
  else
    echo "canary $fault: caught: $(grep -c FAILED "$out/fault-$fault.log") failed checks"
  fi
done
exit $status
