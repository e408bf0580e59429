#!/usr/bin/env bash
# What an asynchronous checkpoint save costs training (issue 64): the same job three times, without
# saves, with a synchronous save every INTERVAL steps, and with --checkpoint.async-mode async.
# Peers in the same run: the synchronous save (the pause) and the run without saves (the loop).
#   pause per save: the training thread's time in saves (rank<R>.json checkpoint_save_s, slowest
#                   rank) over the saves; goal: async at most 0.10 of sync
#   loop time:      the steps' time plus that pause (metrics.jsonl step_time_s); goal: async at
#                   most 1.05 of no saves (the background write slows the steps it overlaps)
#   wall:           the whole process, start-up and the wait for the last write included
# Usage: tools/bench/async_save.sh [MODEL] [STEPS] [INTERVAL] [MESHTRAIN] [-- extra meshtrain args]
#   defaults: debugmodel 40 10 build/cpu/meshtrain; RANKS (default 4, Gloo on this host) ranks of
#   FSDP; the checkpoint folder under $BENCH_DIR (default /dev/shm). On one GPU, e.g.:
#   RANKS=1 BENCH_DIR=/tmp tools/bench/async_save.sh 1B 120 40 build/cuda/meshtrain -- --backend nccl ...
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-debugmodel} steps=${2:-40} interval=${3:-10} bin=${4:-build/cpu/meshtrain}
shift $(( $# < 4 ? $# : 4 )); [ "${1:-}" = -- ] && shift
ranks=${RANKS:-4}
[ -x "$bin" ] || { echo "no meshtrain at $bin: run ci/build.sh meshtrain" >&2; exit 1; }
work=$(mktemp -d "${BENCH_DIR:-/dev/shm}/meshtrain-async-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
run() {  # name extra-args...
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  for ((r = 0; r < ranks; r++)); do
    RANK=$r WORLD_SIZE=$ranks MASTER_ADDR=127.0.0.1 MASTER_PORT=29830 "$bin" train --model "$model" \
      --steps "$steps" --mesh "dp_shard=$ranks" --dump-folder "$work/$name" --quiet "$@" &
  done
  wait
  python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)" > "$work/$name.wall"
  rm -rf "$work/$name-ckpt"
}
run none "$@"
run sync --checkpoint.enable --checkpoint.interval "$interval" --checkpoint.folder "$work/sync-ckpt" "$@"
run async --checkpoint.enable --checkpoint.interval "$interval" --checkpoint.folder "$work/async-ckpt" \
  --checkpoint.async-mode async "$@"
python3 - "$work" "$ranks" "$model" "$steps" "$interval" <<'PY'
import json, sys
work, ranks, model, steps, interval = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
def facts(name):
    reports = [json.load(open(f"{work}/{name}/rank{r}.json")) for r in range(ranks)]
    step_s = sum(json.loads(line)["step_time_s"] for line in open(f"{work}/{name}/metrics.jsonl"))
    pause = max(r.get("checkpoint_save_s", 0.0) for r in reports)
    saves = len(reports[0].get("checkpoint_steps_saved", []))
    return {"saves": saves, "pause_s": pause, "loop_s": step_s + pause, "wall_s": float(open(f"{work}/{name}.wall").read()),
            "bytes": sum(r.get("checkpoint_bytes_written", 0) for r in reports)}
none, sync, asyn = facts("none"), facts("sync"), facts("async")
print(f"{model}, {ranks} rank(s), {steps} steps, a save every {interval} ({sync['saves']} saves of "
      f"{sync['bytes'] / max(sync['saves'], 1) / 1e9:.3f} GB)")
print(f"{'':22s} {'no saves':>10s} {'sync':>10s} {'async':>10s}  {'ratio':>18s}")
per = lambda f: f["pause_s"] / max(f["saves"], 1)
print(f"{'pause per save (s)':22s} {'':>10s} {per(sync):10.4f} {per(asyn):10.4f}  "
      f"{per(asyn) / per(sync):8.3f} of sync")
print(f"{'loop time (s)':22s} {none['loop_s']:10.3f} {sync['loop_s']:10.3f} {asyn['loop_s']:10.3f}  "
      f"{asyn['loop_s'] / none['loop_s']:8.3f} of none (sync {sync['loop_s'] / none['loop_s']:.3f})")
print(f"{'wall (s)':22s} {none['wall_s']:10.3f} {sync['wall_s']:10.3f} {asyn['wall_s']:10.3f}  "
      f"{asyn['wall_s'] / none['wall_s']:8.3f} of none (sync {sync['wall_s'] / none['wall_s']:.3f})")
PY
