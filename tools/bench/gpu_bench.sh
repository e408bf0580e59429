#!/usr/bin/env bash
# Issue 9's benchmarks in one go on one GPU, every figure from this run, then a table of
# ratios (tools/bench/gpu_report.py). Needs the PyTorch 2.x wheel, transformers, a GPU.
#   1. step throughput and MFU of meshtrain's 1B flavor, bf16 compute, seq 2048, against
#      transformers' LlamaForCausalLM in the same configuration, eager and torch.compile;
#      the bf16 matmul peak the MFU is taken against is measured here too
#   2. per-case start-up: meshtest + meshtrain vs torchrun + Python (startup.sh)
#   3. checkpoint save / load of the 1B model with AdamW state vs torch.distributed.checkpoint
#   5. peak GPU memory of (1)
# A Chrome trace of one step of each trainer is kept, and the report splits it into
# matmul / attention / other kernels and the gaps between them.
# Usage: tools/bench/gpu_bench.sh [BATCH] [STEPS]   (results archived to $OUT/gpu-bench.tgz, or build/cuda/gpu-bench.tgz)
set -uo pipefail
cd "$(dirname "$0")/../.."
source ci/gpu-env.sh
batch=${1:-4}
steps=${2:-15}
out=${OUT:-build/cuda}/gpu-bench
work=build/cuda/bench-work
rm -rf "$work" && mkdir -p "$work" "$out"
gpu_build meshtest meshtrain
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | head -n 1 | tee "$out/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee "$out/versions.txt"

step() { echo "gpu-bench: $1 ($(date +%T))"; }

step "bf16 matmul peak"
python3 - > "$out/peak.json" <<'PY'
import json, torch
n = 8192
a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for _ in range(5): a @ b
rates = []
for _ in range(5):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(20): a @ b
    e.record(); torch.cuda.synchronize()
    rates.append(2 * n**3 * 20 / (s.elapsed_time(e) / 1e3))
print(json.dumps({"matmul": f"{n}x{n}x{n} bf16", "flops_per_s": sorted(rates)[len(rates) // 2]}))
PY

mt=(build/cuda/meshtrain train --model 1B --seq-len 2048 --local-batch-size "$batch" --steps "$steps"
    --param-dtype bfloat16 --reduce-dtype float32 --threads 16 --backend nccl --quiet
    --checkpoint.enable --checkpoint.folder "$work/mt-ckpt")
step "meshtrain 1B: $steps steps, a trace of the last, a checkpoint after it"
timeout 150 "${mt[@]}" --dump-folder "$work/mt" --profile-step "$steps" > "$out/meshtrain.log" 2>&1 || echo "meshtrain failed: see meshtrain.log"
step "meshtrain 1B: resume (checkpoint load)"
timeout 100 "${mt[@]}" --dump-folder "$work/mt-load" > "$out/meshtrain-load.log" 2>&1 || echo "meshtrain load failed"
du -sb "$work/mt-ckpt" > "$out/mt-ckpt-bytes.txt"
rm -rf "$work/mt-ckpt"
step "DCP save / load of the same state"
timeout 100 python3 tools/bench/dcp_io.py "$work/mt/state_dict_keys.json" "$work/dcp" > "$out/dcp.json" 2> "$out/dcp.log" || echo "dcp failed"
step "transformers eager"
timeout 100 python3 tools/bench/hf_train.py --mode eager --steps "$steps" --batch "$batch" --trace "$work/hf-eager-trace.json" \
  > "$out/hf-eager.json" 2> "$out/hf-eager.log" || echo "hf eager failed"
step "start-up"
timeout 100 tools/bench/startup.sh 1 5 > "$out/startup.txt" 2>&1 || echo "startup failed"

step "transformers torch.compile"
timeout 180 python3 tools/bench/hf_train.py --mode compile --steps "$((steps + 5))" --warmup 6 --batch "$batch" \
  --trace "$work/hf-compile-trace.json" > "$out/hf-compile.json" 2> "$out/hf-compile.log" || echo "hf compile failed"
# Everything but checkpoints travels with the results, so the report can be re-run from them.
gzip -f "$work"/mt/trace_step*.json "$work"/hf-*-trace.json 2>/dev/null
rm -rf "$work/dcp" "$work/mt-ckpt" "$out/work"
cp -r "$work" "$out/work"
python3 tools/bench/gpu_report.py --work "$out/work" --out "$out" --batch "$batch" --seq 2048 | tee "$out/table.md"
for log in "$out"/*.log; do echo "== $log"; tail -n 4 "$log"; done
# The device tool returns at most 8 files: one archive.
(cd "$(dirname "$out")" && tar czf gpu-bench.tgz "$(basename "$out")" && rm -rf "$(basename "$out")")
