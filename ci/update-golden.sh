#!/usr/bin/env bash
# Rewrites the CPU matrix's golden curves (test_matrix/golden/) from this checkout's meshtrain.
# The golden files pin meshtrain's numbers to a commit a person vouched for: a change that
# moves every layout alike (attention scale, mask, RoPE, init) passes every layout comparison
# but not these. Run this only when such a change is intended, and say why in the commit.
# Usage: ci/update-golden.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/build.sh meshtest meshtrain
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The run may fail against the old golden files; what matters is that cpu/1d trained.
build/cpu/meshtest run --id cpu/1d --out "$out" > "$out/run.log" 2>&1 || true
for metric in loss grad_norm; do
  file=test_matrix/golden/tiny_1d.$metric.txt
  {
    echo "# cpu/1d's $metric per step (tiny, dp_shard=4, seed 42, global batch 8), from $(git rev-parse --short HEAD)."
    echo "# Written by ci/update-golden.sh; compared by loss_matches in test_matrix/cpu.yaml."
    build/cpu/meshtest golden export cpu/1d --metric "$metric" --out "$out"
  } > "$file.new"
  mv "$file.new" "$file"
  echo "wrote $file"
done
cp "$out/cpu/1d/train/param_digest.json" test_matrix/golden/tiny_1d.param_digest.json
echo "wrote test_matrix/golden/tiny_1d.param_digest.json"
