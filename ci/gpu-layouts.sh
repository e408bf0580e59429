#!/usr/bin/env bash
# On a machine with 2+ GPUs: builds meshtrain (CUDA preset) and checks that FSDP, DDP and TP over
# NCCL, one GPU per rank, reproduce the single-GPU run (debugmodel, fp32, deterministic kernels).
# Prints the worst relative loss / grad_norm difference and digest difference per layout.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/gpu-env.sh
gpu_build meshtrain
ngpu=$(nvidia-smi -L | wc -l)
bin=build/cuda/meshtrain
common=(--model debugmodel --steps 20 --seed 7 --seq-len 256 --global-batch-size 8 --deterministic --quiet)
work=$(mktemp -d)
"$bin" train "${common[@]}" --local-batch-size 8 --dump-folder "$work/single"
run() {  # name ranks args...
  local name=$1 n=$2; shift 2
  for ((r = 0; r < n; r++)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=29700 \
      "$bin" train "${common[@]}" --dump-folder "$work/$name" "$@" &
  done
  wait
  python3 - "$work/single" "$work/$name" "$name" <<'PY'
import json, sys
rows = lambda d: [json.loads(l) for l in open(d + "/metrics.jsonl")]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
w = max(max(abs(x[k] - y[k]) / abs(x[k]) for k in ("loss", "grad_norm")) for x, y in zip(a, b))
da = json.load(open(sys.argv[1] + "/param_digest.json"))["params"]
db = json.load(open(sys.argv[2] + "/param_digest.json"))["params"]
wd = max(max(abs(da[k]["l2"] - db[k]["l2"]), abs(da[k]["sum"] - db[k]["sum"])) / da[k]["l2"] for k in da)
print(f"{sys.argv[3]:28s} steps {len(b):2d}  loss/grad_norm rel {w:.2e}  digest (x l2) {wd:.2e}")
PY
}
run fsdp_dp_shard2 2 --mesh dp_shard=2 --local-batch-size 4
run ddp_dp_replicate2 2 --mesh dp_replicate=2 --local-batch-size 4
run tp2_lp_sp 2 --mesh tp=2 --local-batch-size 8 --loss-parallel --sequence-parallel
if [ "$ngpu" -ge 4 ]; then
  run fsdp2_tp2 4 --mesh dp_shard=2,tp=2 --local-batch-size 4
  run hsdp2x2 4 --mesh dp_replicate=2,dp_shard=2 --local-batch-size 2
fi
