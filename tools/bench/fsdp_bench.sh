#!/usr/bin/env bash
# Issue 10's measurements on one machine with N GPUs, every figure from this run:
#   - collective efficiency: all-gather and reduce-scatter bus bandwidth inside meshtrain's
#     FSDP step (bytes meshtrain's collectives moved in the profiled step, from metrics.jsonl's
#     comm_bytes, over the NCCL kernel time in rank 0's trace of that step) against the peak a
#     plain NCCL loop reaches (nccl_peer.py)
#   - FSDP memory: peak GPU memory per rank of the 1B flavor under dp_shard=N vs one GPU
# Usage: tools/bench/fsdp_bench.sh [N]   (results archived to $OUT/fsdp-bench-N.tgz)
set -uo pipefail
cd "$(dirname "$0")/../.."
source ci/gpu-env.sh
n=${1:-$(nvidia-smi -L | wc -l)}
out=${OUT:-build/cuda}/fsdp-bench-$n
work=build/cuda/fsdp-work-$n
rm -rf "$work" "$out" && mkdir -p "$work" "$out"
gpu_build meshtest meshtrain
steps=6
common=(--model 1B --seq-len 2048 --local-batch-size 2 --steps "$steps" --param-dtype bfloat16
        --reduce-dtype float32 --threads 4 --backend nccl --quiet --profile-step "$steps")
echo "fsdp-bench: one GPU ($(date +%T))"
CUDA_VISIBLE_DEVICES=0 build/cuda/meshtrain train "${common[@]}" --dump-folder "$work/one" > "$out/one.log" 2>&1 \
  || echo "one-GPU run failed"
echo "fsdp-bench: dp_shard=$n ($(date +%T))"
build/cuda/meshtest launch --nproc "$n" --log-dir "$work/fsdp-logs" -- build/cuda/meshtrain train "${common[@]}" \
  --mesh "dp_shard=$n" --dump-folder "$work/fsdp" > "$out/fsdp.log" 2>&1 || echo "dp_shard=$n run failed"
echo "fsdp-bench: NCCL peer ($(date +%T))"
torchrun --standalone --nproc-per-node "$n" tools/bench/nccl_peer.py > "$out/nccl_peer.json" 2> "$out/nccl_peer.log" \
  || echo "nccl peer failed"
gzip -f "$work"/*/trace_step*.json 2>/dev/null
cp -r "$work" "$out/work"
python3 tools/bench/gpu_report.py --fsdp --work "$out/work" --out "$out" --world "$n" | tee "$out/table.md"
# The device tool returns at most 8 files: one archive.
(cd "$(dirname "$out")" && tar czf "fsdp-bench-$n.tgz" "fsdp-bench-$n" && rm -rf "fsdp-bench-$n")
