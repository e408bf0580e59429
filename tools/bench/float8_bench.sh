#!/usr/bin/env bash
# float8 against bf16 on one GPU, both measured in this run: for each flavor (default 1B and
# 8B_short, Llama-3-8B's width with 8 of its layers), meshtrain --float8 off and --float8
# scaled_mm with the same seed and data, seq 2048, STEPS steps each. Prints per flavor the
# loss curves' largest and last relative difference, the median tokens/s of each over steps
# >= 6 and their ratio, and the peak device memory of each; writes float8.json.
# The peer is meshtrain's own bf16 step. torchtitan's float8 needs torchao: the script says
# whether it is importable, and runs no torchao peer either way.
# Usage: tools/bench/float8_bench.sh [STEPS] [FLAVOR...]   (STEPS default 60; needs build/cuda/meshtrain)
#   (the earlier form, float8_bench.sh STEPS BATCH, still runs 1B alone at that batch)
#   BATCH_1B=4 BATCH_8B_short=4 (BATCH_<flavor>: sequences per step, default 4); MT_THREADS (default nproc);
#   RESULTS=DIR: the runs in DIR/float8, the summary in DIR/float8.json (default: the runs in
#   build/cuda/float8-bench, the summary in ${OUT:-build/cuda}/float8.json);
#   BENCH_DEADLINE=EPOCH_SECONDS: no run goes past it (ci/gpu-advanced.sh sets it).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
tag=float8-bench
steps=${1:-60}
[ $# -gt 0 ] && shift
if [[ ${1:-} =~ ^[0-9]+$ ]]; then  # the earlier form, [STEPS] [BATCH]: 1B at that batch
  # shellcheck disable=SC2034 # read through ${!var} below
  BATCH_1B=$1
  set -- 1B
fi
flavors=${*:-${FLAVORS:-1B 8B_short}}
res=${RESULTS:-${OUT:-build/cuda}}
work=${RESULTS:+$RESULTS/float8}
work=${work:-build/cuda/float8-bench}
rm -rf "$work" && mkdir -p "$work" "$res"
bin=build/cuda/meshtrain
[ -x "$bin" ] || { echo "$tag: no $bin (build it: ci/gpu-build.sh)"; exit 2; }

source tools/bench/bench_run.sh  # run NAME SECONDS CMD...

if python3 -c 'import torchao' 2>/dev/null; then
  torchao="importable (torchao $(python3 -c 'import torchao; print(getattr(torchao, "__version__", "?"))' 2>/dev/null)); no torchao peer is run: the comparison is meshtrain bf16 vs meshtrain float8"
else
  torchao="not importable, so the peer is meshtrain's bf16 step only"
fi
echo "$tag: torchao $torchao"

threads=${MT_THREADS:-$(nproc)}
batches=""
for f in $flavors; do
  var="BATCH_$f"
  def=4  # 8B_short at 4 x 2048 tokens: 57.7 GiB on an H200
  b=${!var:-$def}
  batches="$batches $f=$b"
  case $f in 1B) secs=$((60 + steps)) ;; *) secs=$((90 + 2 * steps)) ;; esac  # start-up, then ~0.2 / ~0.6 s a step
  for mode in off scaled_mm; do
    run "mt-$f-$mode" "$secs" "$bin" train --model "$f" --steps "$steps" --warmup-steps "$((steps < 40 ? steps / 4 : 10))" \
      --seq-len 2048 --local-batch-size "$b" --param-dtype bfloat16 --reduce-dtype float32 --backend nccl --quiet \
      --threads "$threads" --seed 42 --float8 "$mode" --dump-folder "$work/mt-$f-$mode"
  done
done

python3 tools/bench/advanced_report.py float8 --work "$work" --flavors "$flavors" --batches "$batches" --min-step 6 \
  --torchao "$torchao" --json "$res/float8.json" | tee "$work/table.md"
