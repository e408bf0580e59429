#!/usr/bin/env bash
# float8 against bf16 on one GPU, both measured in this run: the 1B flavor, seq 2048, the
# same seed and data, STEPS steps each. Prints the loss curves' largest and final relative
# difference and the median tokens/s of each, with their ratio.
# Usage: tools/bench/float8_bench.sh [STEPS] [BATCH]   (needs the CUDA build: ci/gpu-build.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-200}
batch=${2:-4}
bin=build/cuda/meshtrain
work=build/cuda/float8-bench
rm -rf "$work" && mkdir -p "$work"
common=(train --model 1B --steps "$steps" --warmup-steps 20 --seq-len 2048 --local-batch-size "$batch"
        --param-dtype bfloat16 --reduce-dtype float32 --backend nccl --quiet)
for mode in off scaled_mm; do
  echo "float8-bench: --float8 $mode ($(date +%T))"
  "$bin" "${common[@]}" --float8 "$mode" --dump-folder "$work/$mode"
done
python3 - "$work" "$steps" <<'PY'
import json, statistics, sys
work, steps = sys.argv[1], int(sys.argv[2])
def rows(mode): return [json.loads(line) for line in open(f"{work}/{mode}/metrics.jsonl")]
bf16, f8 = rows("off"), rows("scaled_mm")
rel = [abs(a["loss"] - b["loss"]) / abs(a["loss"]) for a, b in zip(bf16, f8)]
tps = lambda r: statistics.median(x["tokens_per_s"] for x in r[1:])
print(f"float8-bench: {steps} steps of 1B; loss bf16 {bf16[0]['loss']:.4f} -> {bf16[-1]['loss']:.4f}, "
      f"float8 {f8[0]['loss']:.4f} -> {f8[-1]['loss']:.4f}")
print(f"float8-bench: loss relative difference: max {max(rel):.2e} (step {rel.index(max(rel)) + 1}), "
      f"last {rel[-1]:.2e}, mean over the last 50 steps {statistics.mean(rel[-50:]):.2e}")
print(f"float8-bench: tokens/s median bf16 {tps(bf16):.0f}, float8 {tps(f8):.0f}, ratio {tps(f8) / tps(bf16):.3f}")
print(f"float8-bench: peak device memory bf16 {bf16[-1].get('device_peak_bytes', 0) / 2**30:.1f} GiB, "
      f"float8 {f8[-1].get('device_peak_bytes', 0) / 2**30:.1f} GiB")
PY
