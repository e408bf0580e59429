#!/usr/bin/env bash
# The cost of a simulated world (docs/simulation.md#cost): a step of N ranks sharing one
# device through --backend shm, against the same model and global batch on one rank of the
# named peer backend (nccl on a GPU, gloo on CPU), for N = 2, 4, 8 under FSDP (dp_shard=N);
# and the world's peak device memory (every rank's allocator peak, summed) against the sum of
# the ranks' persistent shards (parameters, gradients, optimizer state).
# Usage: tools/bench/sim_cost.sh OUT_DIR MESHTRAIN MESHTEST PEER_BACKEND
#   MODELS="tiny debugmodel" WORLDS="2 4 8" STEPS=12 SEQ=256 BATCH=16
# Prints one table (also OUT_DIR/table.md); the ratio is simulated step time / one-rank step time.
set -uo pipefail
out=$1 meshtrain=$(realpath "$2") meshtest=$(realpath "$3") peer=$4
models=${MODELS:-tiny debugmodel} worlds=${WORLDS:-2 4 8}
steps=${STEPS:-12} seq=${SEQ:-256} batch=${BATCH:-16}
mkdir -p "$out"
common=(--steps "$steps" --seq-len "$seq" --global-batch-size "$batch" --seed 42 --quiet)
for m in $models; do
  echo "sim_cost: $m, one rank over $peer"
  "$meshtrain" train --model "$m" --mesh dp_shard=1 --backend "$peer" --local-batch-size "$batch" "${common[@]}" \
    --dump-folder "$out/$m-1" > "$out/$m-1.log" 2>&1 || echo "sim_cost: $m-1 failed (see $m-1.log)"
  for n in $worlds; do
    echo "sim_cost: $m, $n ranks simulated"
    "$meshtest" launch --nproc "$n" -- "$meshtrain" train --model "$m" --mesh "dp_shard=$n" --backend shm \
      --local-batch-size $((batch / n)) "${common[@]}" --dump-folder "$out/$m-$n" > "$out/$m-$n.log" 2>&1 ||
      echo "sim_cost: $m-$n failed (see $m-$n.log)"
  done
done
python3 - "$out" "$models" "$worlds" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out, models, worlds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
def run(d):
    try:
        rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    except OSError:
        return None
    step = statistics.median(r["step_time_s"] for r in rows[2:] or rows)
    ranks = [json.load(open(os.path.join(d, f))) for f in sorted(os.listdir(d)) if f.startswith("rank") and f.endswith(".json")]
    peak = sum(r.get("device_peak_bytes", 0) for r in ranks)
    shards = sum(r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"] for r in ranks)
    return step, peak, shards, rows[-1]["loss"]
mib = lambda b: f"{b / 2**20:.1f}"
print("| model | ranks | step (ms) | vs one rank | peak device MiB (sum over ranks) | shards MiB (sum) | peak / shards | final loss |")
print("|---|---|---|---|---|---|---|---|")
for m in models:
    one = run(os.path.join(out, f"{m}-1"))
    for n in ["1"] + worlds:
        r = run(os.path.join(out, f"{m}-{n}"))
        if r is None:
            print(f"| {m} | {n} | failed | | | | | |"); continue
        ratio = f"{r[0] / one[0]:.2f}x" if one else "?"
        per = f"{r[1] / r[2]:.2f}" if r[2] else "?"
        print(f"| {m} | {n}{'' if n == '1' else ' (shm)'} | {r[0]*1e3:.1f} | {ratio} | {mib(r[1])} | {mib(r[2])} | {per} | {r[3]:.6f} |")
PY
