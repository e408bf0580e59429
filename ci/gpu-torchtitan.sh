#!/usr/bin/env bash
# On the (offline) GPU machine: the real torchtitan (pytorch/torchtitan e51e914, carried as source
# in .deps/python with the pure-Python packages the image lacks) under meshtest's torchtitan
# adapter: examples/torchtitan.yaml, every case that fits the machine's GPUs.
# --simulate: the cases tagged sim instead (the seed too: SimpleFSDP saved under [dp:4], loaded
# under [dp:2,tp:2] and [tp:4], and its #1273 canary), four at once (`simulate: true`: 2 and 4 ranks on one GPU through
# meshtest_sim, docs/simulation.md#foreign-trainers), after a check of every collective of
# meshtest_sim on CUDA tensors in 4 processes (which builds it, as a user's first run does);
# meshtest comes from the harness preset (no LibTorch), which builds in a minute.
# Carry: .deps/include .deps/pugixml .deps/sqlite .deps/python .deps/python-fallback .deps/torchtitan-assets
# Results in $OUT: env-check.log, run.log, torchtitan-run.tgz (summary.json, junit.xml,
# report.html, summary.md, every rank log and TensorBoard event file), losses_h200.txt (the
# single case's losses, as `meshtest golden export` prints them).
set -uo pipefail
cd "$(dirname "$0")/.."
simulate=
[ "${1:-}" = --simulate ] && simulate=yes && shift
source ci/gpu-env.sh
mkdir -p "${OUT:-build/cuda/results}" build/cuda/torchtitan
out=$(cd "${OUT:-build/cuda/results}" && pwd)
work=$(cd build/cuda/torchtitan && pwd)
rm -rf "${work:?}"/*

# torchtitan's imports, tokenizer and data set (CPU only) while meshtest builds.
(source ci/gpu-torchtitan-env.sh) > "$out/env-check.log" 2>&1 &
check=$!
selection=()
if [ -n "$simulate" ]; then
  [ -f build/harness/build.ninja ] || cmake --preset harness >/dev/null
  cmake --build --preset harness -j "$(nproc)" --target meshtest | grep -E "error|FAILED" || true
  meshtest=build/harness/meshtest
  read -ra selection <<< "${TORCHTITAN_SELECTION:---tag sim}"  # e.g. "--tag seed" for the seed alone
  export MESHTEST_SIM_CACHE=${MESHTEST_SIM_CACHE:-/tmp/meshtest-sim-cache}
  start=$SECONDS
  PYTHONPATH=$PWD/sim/python MESHTEST_SIM=1 python3 tests/sim/collectives_check.py 4 cuda "$out/collectives" \
    > "$out/collectives.log" 2>&1
  echo "meshtest_sim built and checked on 4 ranks in $((SECONDS - start)) s: exit $?"; tail -n 4 "$out/collectives.log"
else
  gpu_build meshtest
  meshtest=build/cuda/meshtest
fi
wait "$check"; echo "torchtitan env check exit $?"; tail -n 3 "$out/env-check.log"
TORCHTITAN_ENV_NOCHECK=1 source ci/gpu-torchtitan-env.sh

# A device call ends at 600 s: meshtest gets what is left of ${CALL_LIMIT_S:-590} s less a minute
# for the reports; on SIGTERM it stops the running case and still writes them.
ngpu=$(nvidia-smi -L | wc -l)
if [ -n "$simulate" ]; then
  # Four simulated cases at once on the one GPU (shared_gpu, ci/gpu-env.sh): debugmodel takes
  # megabytes, and a case's time goes to Python start-up and SimpleFSDP's compile.
  CUDA_VISIBLE_DEVICES=$(shared_gpu 4) ngpu=4 && export CUDA_VISIBLE_DEVICES && selection+=(--jobs 4)
fi
left=$(( ${CALL_LIMIT_S:-590} - SECONDS - 60 ))
timeout --signal=TERM --kill-after=30 "$left" "$meshtest" run examples/torchtitan.yaml --backend nccl --ngpu "$ngpu" --out "$work/run" --grace 10 \
  "${selection[@]}" "$@" > "$out/run.log" 2>&1
rc=$?
echo "examples/torchtitan.yaml on $ngpu GPU(s): meshtest exit $rc"
tail -n 40 "$out/run.log"
[ -n "$simulate" ] || "$meshtest" golden export torchtitan/single --out "$work/run" > "$out/losses_h200.txt" 2>&1

dest=$work/torchtitan-run && mkdir -p "$dest"
(cd "$work/run" && find . \( -name 'rank*.log' -o -name summary.json -o -name summary.md -o -name junit.xml \
   -o -name report.html -o -name 'events.out.tfevents.*' -o -name '.metadata' \) -exec cp --parents {} "$dest/" \;)
cp "$out/run.log" "$dest/"
tar czf "$out/torchtitan-run.tgz" -C "$work" torchtitan-run
# With --simulate, the cost of simulation (tools/bench/sim_cost_torchtitan.sh) in the time left,
# when there are 3 minutes of it: the GPU is then the bench's alone.
left=$(( ${CALL_LIMIT_S:-590} - SECONDS - 20 ))
if [ -n "$simulate" ] && [ "$left" -gt 180 ]; then
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES%%,*} timeout --signal=TERM "$left" \
    bash tools/bench/sim_cost_torchtitan.sh "$work/sim_cost" "$meshtest"
  cp "$work/sim_cost/table.md" "$out/sim_cost_torchtitan.md" 2>/dev/null
  (cd "$work/sim_cost" && find . \( -name 'rank0.log' -o -name summary.json -o -name run.log \) -print0 |
    tar czf "$out/sim_cost_torchtitan.tgz" --null -T -) 2>/dev/null
fi
exit "$rc"
