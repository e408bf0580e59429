#!/usr/bin/env bash
# meshtrain's loss against Hugging Face transformers on the same weights and tokens
# (tests/hf/compare_hf.py). Runs wherever python3 has torch, transformers and safetensors;
# elsewhere it exits 77, which CTest reports as skipped.
# Usage: tests/hf/hf_numerics.sh MESHTRAIN [MODEL] [BACKEND]
set -euo pipefail
bin=$1
model=${2:-tiny}
backend=${3:-gloo}
if ! python3 -c 'import torch, transformers, safetensors' 2>/dev/null; then
  echo "NOTICE: python3 lacks torch, transformers or safetensors; the Hugging Face comparison is skipped"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model "$model" --mesh dp_shard=1 --backend "$backend" --seq-len 64 --quiet)
"$bin" train "${common[@]}" --steps 5 --checkpoint.enable --dump-folder "$work/train"
"$bin" generate "${common[@]}" --checkpoint.folder "$work/train/checkpoint" --prompt "And God said, Let there be light" \
  --max-new-tokens 16 --dump-folder "$work/generate"
mkdir -p "$work/hf"
"$bin" ckpt consolidate "$work/train/checkpoint/step-5" "$work/hf/model.safetensors" --hf "$model"
python3 "$here/compare_hf.py" "$work/hf" "$work/generate/generate.json"
