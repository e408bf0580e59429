#!/usr/bin/env bash
# Weights that Hugging Face transformers wrote load into meshtrain (--checkpoint.initial-load-in-hf)
# and give the same prompt loss (relative 1e-5, fp32) and greedy tokens as transformers' own
# LlamaForCausalLM: the inverse of hf_numerics.sh, nobody here having written the file.
# Runs wherever python3 has torch, transformers and safetensors; elsewhere it exits 77 (skipped).
# Usage: tests/hf/hf_load.sh MESHTRAIN [MODEL] [BACKEND]
set -euo pipefail
bin=$1
model=${2:-tiny}
backend=${3:-gloo}
if ! python3 -c 'import torch, transformers, safetensors' 2>/dev/null; then
  echo "NOTICE: python3 lacks torch, transformers or safetensors; the Hugging Face load test is skipped"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --mesh dp_shard=1 --backend "$backend" --seq-len 64 --quiet)
# meshtrain's config.json for the flavor (a 0-step export), then transformers' own weights for it.
"$bin" train "${common[@]}" --steps 0 --checkpoint.enable --checkpoint.last-save-model-only \
  --checkpoint.last-save-in-hf --dump-folder "$work/flavor"
python3 "$here/make_hf_weights.py" "$work/flavor/checkpoint/step-0/config.json" "$work/hf"
"$bin" generate "${common[@]}" --checkpoint.folder "$work/none" --checkpoint.initial-load-path "$work/hf" \
  --checkpoint.initial-load-in-hf --prompt "And God said, Let there be light" --max-new-tokens 16 \
  --dump-folder "$work/generate"
python3 "$here/compare_hf.py" "$work/hf" "$work/generate/generate.json"
