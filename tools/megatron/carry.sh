#!/usr/bin/env bash
# Makes .deps/megatron-lm, the Megatron-LM source ci/gpu-megatron.sh runs on the offline GPU
# machine: megatron/ and the GPT entry points, exported from a Megatron-LM git repository.
# Usage: tools/megatron/carry.sh MEGATRON_LM_GIT_DIR [COMMIT]   (default commit: d98e8a6, 2026-08-22)
set -euo pipefail
src=$1 commit=${2:-d98e8a64ddf34856e74b24714e3bedb2f5a39553}
dest=$(cd "$(dirname "$0")/../.." && pwd)/.deps/megatron-lm
rm -rf "$dest" && mkdir -p "$dest"
git -C "$src" archive "$commit" megatron pretrain_gpt.py gpt_builders.py model_provider.py hybrid_builders.py \
  mamba_builders.py LICENSE | tar x -C "$dest"
echo "NVIDIA/Megatron-LM $commit ($(git -C "$src" log -1 --format=%ci "$commit")): megatron/, pretrain_gpt.py," \
  "gpt_builders.py, model_provider.py, hybrid_builders.py, mamba_builders.py, LICENSE (git archive)" > "$dest/MANIFEST.txt"
du -sh "$dest"
