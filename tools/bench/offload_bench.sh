#!/usr/bin/env bash
# FSDP CPU offload on one GPU, every figure from this run: meshtrain's 1B flavor (bf16
# compute, fp32 reduce, seq 2048, batch 2, STEPS steps) without and with --fsdp.cpu-offload,
# against PyTorch FSDP2 with CPUOffloadPolicy (tools/bench/fsdp2_train.py --cpu-offload:
# transformers' Llama in the same configuration, the host's cores for its host-side AdamW).
# Reports tokens/s of each (median over steps >= 3), meshtrain-offload / FSDP2-offload tokens/s
# (target >= 1.0), meshtrain's peak GPU memory with offload / without (target <= 0.5), the
# loss at the last step of each, and meshtrain's host peak RSS.
# Usage: tools/bench/offload_bench.sh [STEPS] [BATCH]   (STEPS default 8, BATCH 2; needs build/cuda/meshtrain,
#   torch and transformers)
#   FSDP2_BASE=1 also runs FSDP2 without offload (reference); FSDP2_OPT=fused|foreach|forloop
#   (fsdp2_train.py --optimizer-impl, default fused, falling back to foreach if refused);
#   MT_OFFLOAD_THREADS=N passes --threads N to meshtrain (N=nproc: the machine's count); unset,
#   meshtrain picks its own (under offload, the machine's cores);
#   RESULTS=DIR: the runs in DIR/offload, the summary in DIR/offload.json (default: the runs in
#   build/cuda/offload-bench, the summary in ${OUT:-build/cuda}/offload.json);
#   BENCH_DEADLINE=EPOCH_SECONDS: no run goes past it (ci/gpu-advanced.sh sets it).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
tag=offload-bench
steps=${1:-8}
batch=${2:-2}
res=${RESULTS:-${OUT:-build/cuda}}
work=${RESULTS:+$RESULTS/offload}
work=${work:-build/cuda/offload-bench}
rm -rf "$work" && mkdir -p "$work" "$res"
bin=build/cuda/meshtrain
[ -x "$bin" ] || { echo "$tag: no $bin (build it: ci/gpu-build.sh)"; exit 2; }

source tools/bench/bench_run.sh  # run NAME SECONDS CMD...

threads=()
if [ -n "${MT_OFFLOAD_THREADS:-}" ]; then
  [[ $MT_OFFLOAD_THREADS =~ ^[0-9]+$ ]] && threads=(--threads "$MT_OFFLOAD_THREADS") || threads=(--threads "$(nproc)")
fi
echo "$tag: $(nproc) host cores; meshtrain ${threads[*]:-with its default threads}"
mt=("$bin" train --model 1B --steps "$steps" --warmup-steps 2 --seq-len 2048 --local-batch-size "$batch"
    --param-dtype bfloat16 --reduce-dtype float32 --backend nccl --quiet)
# Without offload meshtrain's default is one thread: give it the count asked for with offload,
# else the machine's, as the other benches do (little runs on the host without offload).
run mt-base 120 "${mt[@]}" --threads "${threads[1]:-$(nproc)}" --dump-folder "$work/mt-base"
run mt-offload $((90 + 15 * steps)) "${mt[@]}" --fsdp.cpu-offload ${threads[@]+"${threads[@]}"} --dump-folder "$work/mt-offload"

# FSDP2: one rank; the peers time steps 3.. (--warmup 2), as meshtrain's median above.
peer=(torchrun --standalone --nproc-per-node 1 tools/bench/fsdp2_train.py --batch "$batch" --seq 2048
      --steps "$steps" --warmup 2 --init-device cuda --optimizer-impl "${FSDP2_OPT:-fused}")
run fsdp2-offload $((120 + 20 * steps)) "${peer[@]}" --cpu-offload
[ "${FSDP2_BASE:-0}" = 1 ] && run fsdp2-base 150 "${peer[@]}"

python3 tools/bench/advanced_report.py offload --work "$work" --batch "$batch" --seq 2048 --min-step 3 \
  --json "$res/offload.json" | tee "$work/table.md"
