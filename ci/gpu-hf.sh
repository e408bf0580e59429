#!/usr/bin/env bash
# The Hugging Face Trainer on one GPU (issue 62; docs/foreign-trainers.md): examples/hf.yaml
# through the hf-trainer adapter, its multi-rank cases simulated through meshtest_sim, with the
# transformers and accelerate the GPU image has. meshtest comes from the harness preset (no
# LibTorch, about a minute). Then the fixtures CPU CI reads are copied out as the real Trainer
# wrote them: a trainer_state.json, a checkpoint-<N> with model.safetensors, and an FSDP DCP shard
# set (tests/fixtures/hf-made/ once captured). Results in $OUT/hf (or build/cuda/results/hf).
# Usage: bash ci/gpu-hf.sh [meshtest run options, e.g. --id hf/one_rank]
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu-env.sh
mkdir -p "${OUT:-build/cuda/results}/hf"
out=$(cd "${OUT:-build/cuda/results}/hf" && pwd)
python3 -c 'import torch, transformers, accelerate; print("torch", torch.__version__, "transformers",
transformers.__version__, "accelerate", accelerate.__version__, torch.cuda.get_device_name(0))' | tee "$out/versions.txt"
[ -f build/harness/build.ninja ] || cmake --preset harness > /dev/null
cmake --build --preset harness -j "$(nproc)" --target meshtest | grep -E "error|FAILED" || true
export MESHTEST_SIM_CACHE=${MESHTEST_SIM_CACHE:-/tmp/meshtest-sim-cache}
# A device call ends at 600 s: meshtest gets what is left of ${CALL_LIMIT_S:-590} s less a minute
# for the fixtures; on SIGTERM it stops the running case and still writes its reports.
left=$(( ${CALL_LIMIT_S:-590} - SECONDS - 60 ))
# Four cases at once on the one GPU (shared_gpu, ci/gpu-env.sh): a 2-layer model of width 64.
CUDA_VISIBLE_DEVICES=$(shared_gpu 4) timeout -s TERM "$left" build/harness/meshtest run examples/hf.yaml \
  --backend nccl --ngpu 4 --jobs 4 --out "$out/run" "$@" > "$out/meshtest.log" 2>&1
status=$?
tail -n 30 "$out/meshtest.log"
archive_run "$out/run" "$out/hf-run.tgz"
# The fixtures, as the real Trainer wrote them (small: a 2-layer model of width 64).
fixtures=$out/fixtures
mkdir -p "$fixtures"
cp "$out/run/hf/one_rank/train/trainer_state.json" "$fixtures/" 2>/dev/null
cp -r "$out/run/hf/one_rank/train/checkpoint-4" "$fixtures/one_rank-checkpoint-4" 2>/dev/null
cp -r "$out/run/hf/resume_4_to_2/save/checkpoint-4" "$fixtures/fsdp4-checkpoint-4" 2>/dev/null
# What a test reads: the model (safetensors, DCP) and trainer_state.json; not the optimizer or RNG state.
find "$fixtures" \( -name "optimizer*" -o -name "*.pth" -o -name "*.bin" -o -name "scheduler.pt" \) -prune -exec rm -rf {} +
tar czf "$out/fixtures.tgz" -C "$fixtures" .
du -sh "$fixtures" "$out/fixtures.tgz"; find "$fixtures" | head -40
exit $status
