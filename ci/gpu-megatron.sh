#!/usr/bin/env bash
# Megatron-LM on one GPU (issue 61; docs/foreign-trainers.md): examples/megatron.yaml through the
# megatron adapter, Megatron's own pretrain_gpt.py carried as source (ci/gpu-megatron-env.sh),
# its multi-rank cases simulated through meshtest_sim. meshtest comes from the harness preset
# (no LibTorch, about a minute). Then what CPU CI reads is copied out as Megatron wrote it: a
# phase's TensorBoard events and rank log, a small torch_dist checkpoint (metadata.json, .metadata,
# the shards), and golden values exported from the one-GPU case (tests/fixtures/megatron-made/
# once captured). Results in $OUT/megatron (or build/cuda/results/megatron).
# Carry: .deps/include .deps/pugixml .deps/sqlite .deps/megatron-lm
# Usage: bash ci/gpu-megatron.sh [meshtest run options, e.g. --id megatron/one_gpu]
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p "${OUT:-build/cuda/results}/megatron"
out=$(cd "${OUT:-build/cuda/results}/megatron" && pwd)
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))' | tee "$out/versions.txt"
cat .deps/megatron-lm/MANIFEST.txt | tee -a "$out/versions.txt"
source ci/gpu-env.sh
source ci/gpu-megatron-env.sh
(megatron_helpers > "$out/helpers.log" 2>&1; echo "dataset helpers: exit $?" >> "$out/helpers.log") &
helpers=$!
[ -f build/harness/build.ninja ] || cmake --preset harness > /dev/null 2>&1
cmake --build --preset harness -j "$(nproc)" --target meshtest | grep -E "error|FAILED" || true
wait "$helpers"; tail -n 3 "$out/helpers.log"
export PATH=${TMPDIR:-/tmp}/meshtest-megatron-bin:$PATH
export MESHTEST_SIM_CACHE=${MESHTEST_SIM_CACHE:-/tmp/meshtest-sim-cache}
# A device call ends at 600 s: meshtest gets what is left of ${CALL_LIMIT_S:-590} s less a minute
# for the fixtures; on SIGTERM it stops the running case and still writes its reports.
left=$(( ${CALL_LIMIT_S:-590} - SECONDS - 60 ))
# Four cases at once on the one GPU (shared_gpu, ci/gpu-env.sh): a Megatron start-up takes half a
# minute of Python imports and set-up whatever the model.
CUDA_VISIBLE_DEVICES=$(shared_gpu 4) timeout -s TERM "$left" build/harness/meshtest run examples/megatron.yaml \
  --backend nccl --ngpu 4 --jobs 4 --out "$out/run" "$@" > "$out/meshtest.log" 2>&1
status=$?
tail -n 40 "$out/meshtest.log"
archive_run "$out/run" "$out/megatron-run.tgz"
# The fixtures, as the real Megatron wrote them (small: 4 layers of width 64).
fixtures=$out/fixtures
mkdir -p "$fixtures"
build/harness/meshtest golden export megatron/one_gpu --out "$out/run" --format megatron \
  > "$fixtures/golden_values_one_gpu.json" 2> "$out/golden-export.log"
cp -r "$out/run/megatron/one_gpu/train/tensorboard" "$fixtures/one_gpu-tensorboard" 2>/dev/null
last=$(ls "$out/run/megatron/tp2_pp2/train/" 2>/dev/null | grep -E '^rank[0-9]+\.log$' | sort -V | tail -n 1)
[ -n "$last" ] && cp "$out/run/megatron/tp2_pp2/train/$last" "$fixtures/tp2_pp2-$last"
cp "$out/run/megatron/one_gpu/train/rank0.log" "$fixtures/one_gpu-rank0.log" 2>/dev/null
cp -r "$out/run/megatron/resume_tp2pp2_to_dp4/checkpoint" "$fixtures/tp2pp2-checkpoint" 2>/dev/null
# What a test reads: metadata and the model's shards; the checkpoint's common.pt is a pickle of
# Megatron's args (kept: small) and the optimizer rides in the same DCP files.
tar czf "$out/fixtures.tgz" -C "$fixtures" .
du -sh "$fixtures" "$out/fixtures.tgz"; find "$fixtures" | head -40
exit $status
