#!/usr/bin/env bash
# MoE on one GPU, every figure from this run: meshtrain's 1B (dense) and 1B_moe flavors (bf16
# compute, fp32 reduce, seq 2048, batch 4, STEPS steps, a Kineto trace of the last) against
# transformers' Qwen2MoeForCausalLM in 1B_moe's dimensions (tools/bench/hf_moe_train.py),
# eager and torch.compile. Reports tokens/s; MFU of the active FLOPs (torchtitan's count)
# against the bf16 matmul peak measured here; MFU of 1B_moe over 1B (target >= 0.7);
# meshtrain's 1B_moe tokens/s over transformers' (target >= 1.0 against eager, compile for
# reference); peak memory; and, side by side for the dense and the MoE step, the
# host-synchronising CUDA runtime calls in each trace (the MoE step should add none).
# Usage: tools/bench/moe_bench.sh [STEPS] [BATCH]   (STEPS default 20, BATCH 4; needs build/cuda/meshtrain,
#   torch and transformers)
#   HF_MODES="eager compile" (which transformers runs), HF_EXPERTS=IMPL (hf_moe_train.py --experts;
#   default the library's), MT_THREADS (default nproc);
#   RESULTS=DIR: the runs in DIR/moe, the summary in DIR/moe.json (default: the runs in
#   build/cuda/moe-bench, the summary in ${OUT:-build/cuda}/moe.json);
#   BENCH_DEADLINE=EPOCH_SECONDS: no run goes past it (ci/gpu-advanced.sh sets it).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
tag=moe-bench
steps=${1:-20}
batch=${2:-4}
res=${RESULTS:-${OUT:-build/cuda}}
work=${RESULTS:+$RESULTS/moe}
work=${work:-build/cuda/moe-bench}
rm -rf "$work" && mkdir -p "$work" "$res"
bin=build/cuda/meshtrain
[ -x "$bin" ] || { echo "$tag: no $bin (build it: ci/gpu-build.sh)"; exit 2; }

source tools/bench/bench_run.sh  # run NAME SECONDS CMD...

# The bf16 matmul peak the MFU figures are taken against, on this GPU now.
run peak 60 python3 tools/bench/advanced_report.py peak
grep -h '^{' "$work/peak.log" > "$work/peak.json" 2>/dev/null

mt=("$bin" train --steps "$steps" --warmup-steps 5 --seq-len 2048 --local-batch-size "$batch" --param-dtype bfloat16
    --reduce-dtype float32 --backend nccl --quiet --threads "${MT_THREADS:-$(nproc)}" --profile-step "$steps")
run mt-dense 150 "${mt[@]}" --model 1B --dump-folder "$work/mt-dense"
run mt-moe 180 "${mt[@]}" --model 1B_moe --dump-folder "$work/mt-moe"

experts=()
[ -n "${HF_EXPERTS:-}" ] && experts=(--experts "$HF_EXPERTS")
for mode in ${HF_MODES:-eager compile}; do
  if [ "$mode" = compile ]; then hf_steps=(--steps 14 --warmup 6) secs=360  # the first steps compile (and may recompile)
  else hf_steps=(--steps 12 --warmup 3) secs=180; fi
  run "hf-$mode" "$secs" python3 tools/bench/hf_moe_train.py --mode "$mode" "${hf_steps[@]}" --batch "$batch" --seq 2048 \
    ${experts[@]+"${experts[@]}"} --trace "$work/hf-$mode-trace.json"
done

gzip -f "$work"/mt-*/trace_step*.json "$work"/hf-*-trace.json 2>/dev/null
python3 tools/bench/advanced_report.py moe --work "$work" --batch "$batch" --seq 2048 --min-step 3 \
  --json "$res/moe.json" | tee "$work/table.md"
