#!/usr/bin/env bash
# Issue 17: meshtrain's data-parallel step against PyTorch FSDP2 on one machine with N GPUs,
# every figure from this run. For each per-rank batch (2 and 4): meshtrain --mesh dp_shard=N,
# FSDP2 eager and FSDP2 with torch.compile per decoder layer (tools/bench/fsdp2_train.py),
# the same 1B model, bf16 compute, fp32 reduction, seq 2048. N=1 is the issue's one-GPU row
# instead: meshtrain at batch 4 against transformers eager and torch.compile (hf_train.py).
# meshtrain runs 13 steps and traces the 13th, which the median leaves out (steps 5..12);
# the peers time 12 steps (compile: 14, 6 of them warm-up) and trace one more, untimed.
# Usage: tools/bench/fsdp_speed.sh [N]   (N = 1..8, default all GPUs; results in $OUT/fsdp-speed-N.tgz)
#   BATCHES="2" ... runs only those batches; earlier batches' results in the work folder are
#   kept, so two calls on one warm machine can split a run that would not fit one call.
set -uo pipefail
cd "$(dirname "$0")/../.."
source ci/gpu-env.sh
n=${1:-$(nvidia-smi -L | wc -l)}
[[ $n =~ ^[1-8]$ ]] || { echo "N must be 1..8, not $n"; exit 2; }
if [ "$n" = 1 ]; then batches=${BATCHES:-4}; else batches=${BATCHES:-2 4}; fi
out=${OUT:-build/cuda}/fsdp-speed-$n
work=build/cuda/fsdp-speed-work-$n
rm -rf "$out" && mkdir -p "$work" "$out"
gpu_build meshtest meshtrain
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((n - 1)))}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1 | sed "s/^/GPU: $n x /" > "$work/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "CUDA", torch.version.cuda, "NCCL",
  ".".join(map(str, torch.cuda.nccl.version())), "transformers", transformers.__version__)' > "$work/versions.txt"
cat "$work/gpu.txt" "$work/versions.txt"

# run NAME SECONDS CMD...: one measurement; stdout to NAME.json for the Python peers (their
# one JSON line), everything else to NAME.log. A failed run is reported and the rest go on.
run() {
  local name=$1 secs=$2; shift 2
  echo "fsdp-speed: $name ($(date +%T))"
  if [[ $name == mt-* ]]; then timeout "$secs" "$@" > "$work/$name.log" 2>&1
  else timeout "$secs" "$@" > "$work/$name.json" 2> "$work/$name.log"; fi || echo "$name failed: see $name.log"
}

mt=(build/cuda/meshtrain train --model 1B --seq-len 2048 --steps 13 --profile-step 13 --param-dtype bfloat16
    --reduce-dtype float32 --backend nccl --quiet)
for b in $batches; do
  rm -rf "$work"/*-b"$b" "$work"/*-b"$b"[.-]*  # this batch's earlier results
  if [ "$n" = 1 ]; then
    run "mt-b$b" 200 "${mt[@]}" --threads 16 --local-batch-size "$b" --dump-folder "$work/mt-b$b"
    run "hf-eager-b$b" 200 python3 tools/bench/hf_train.py --mode eager --steps 13 --warmup 4 --batch "$b" \
      --trace "$work/hf-eager-b$b-trace.json"
    run "hf-compile-b$b" 400 python3 tools/bench/hf_train.py --mode compile --steps 15 --warmup 6 --batch "$b" \
      --trace "$work/hf-compile-b$b-trace.json"
  else
    run "mt-b$b" 200 build/cuda/meshtest launch --nproc "$n" --log-dir "$work/mt-b$b-logs" -- "${mt[@]}" \
      --threads 4 --local-batch-size "$b" --mesh "dp_shard=$n" --dump-folder "$work/mt-b$b"
    rm -f "$work/mt-b$b"/trace_step*_rank[1-9]*.json  # rank 0's trace is the one reported; keep the archive small
    for mode in eager compile; do
      steps=(--steps 12 --warmup 4)
      [ "$mode" = compile ] && steps=(--steps 14 --warmup 6)  # the first steps compile and may recompile
      run "fsdp2-$mode-b$b" $([ "$mode" = compile ] && echo 400 || echo 200) \
        torchrun --standalone --nproc-per-node "$n" tools/bench/fsdp2_train.py --mode "$mode" --batch "$b" \
        --seq 2048 "${steps[@]}" --trace "$work/fsdp2-$mode-b$b-trace.json"
    done
  fi
  gzip -f "$work"/mt-b"$b"/trace_step*.json "$work"/*-b"$b"-trace.json 2>/dev/null
done

python3 tools/bench/fsdp_speed_report.py --work "$work" --world "$n" | tee "$work/table.md"
for log in "$work"/*.log; do echo "== $(basename "$log")"; tail -n 3 "$log"; done
cp -r "$work" "$out/work"
# The device tool returns at most 8 files of 16 MiB: one archive, without the traces if they
# would make it too large (the table above already has their breakdown).
(cd "$(dirname "$out")" && tar czf "fsdp-speed-$n.tgz" "fsdp-speed-$n" &&
  if [ "$(stat -c %s "fsdp-speed-$n.tgz")" -gt $((15 * 2**20)) ]; then
    echo "archive over 15 MiB: leaving the traces out"
    tar czf "fsdp-speed-$n.tgz" --exclude='*trace*' "fsdp-speed-$n"
  fi && rm -rf "fsdp-speed-$n")
