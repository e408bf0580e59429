#!/usr/bin/env bash
# A checkpoint save against the disk it lands on, and against PyTorch DCP (issue 64), in one run:
#   1. the folder's write rate: 4 GiB of sequential writes with fsync (dd, O_DIRECT where the file
#      system takes it, else through the page cache), the physical limit of a save
#   2. meshtrain MODEL, one rank: one step, then a synchronous save of model + AdamW state
#      (checkpoint_save_s, checkpoint_bytes_written) and a resume that loads it
#   3. the same with --checkpoint.async-mode async: the training thread's pause
#   4. with a GPU and PyTorch 2.x: DCP's save and load of the same keys and shapes (dcp_io.py)
#   Both loads read the disk: each checkpoint's files leave the page cache first (page_cache.py).
# Prints save GB/s and its fraction of the disk's rate, async pause / synchronous save, and the
# ratios to DCP (speed: > 1 is meshtrain faster).
# Usage: tools/bench/checkpoint_save.sh [MODEL] [MESHTRAIN] [-- extra meshtrain args]
#   defaults: 1B build/cuda/meshtrain; BENCH_DIR (default build/bench-ckpt) holds the checkpoints.
#   On one GPU:  tools/bench/checkpoint_save.sh 1B build/cuda/meshtrain -- --backend nccl
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-1B} bin=${2:-build/cuda/meshtrain}
shift $(( $# < 2 ? $# : 2 )); [ "${1:-}" = -- ] && shift
[ -x "$bin" ] || { echo "no meshtrain at $bin" >&2; exit 1; }
work=${BENCH_DIR:-build/bench-ckpt}
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"/ckpt* "$work"/probe' EXIT
say() { echo "checkpoint-bench: $1 ($(date +%T))" >&2; }

say "disk write rate of $work"
rate() {  # dd's GB/s over 4 GiB, with fsync
  dd if=/dev/zero of="$work/probe" bs=64M count=64 conv=fsync "$@" 2>&1 | awk '/copied/ {print $(NF-1), $NF}'
  rm -f "$work/probe"
}
disk=$(rate oflag=direct || true); [ -n "$disk" ] || disk=$(rate)
mt=("$bin" train --model "$model" --seq-len 256 --local-batch-size 1 --global-batch-size 1 --steps 1
    --mesh dp_shard=1 --checkpoint.enable --quiet "$@")
say "meshtrain $model: a step and a synchronous save"
"${mt[@]}" --dump-folder "$work/sync" --checkpoint.folder "$work/ckpt-sync" > "$work/sync.log" 2>&1
say "meshtrain $model: the resume (load), its files dropped from the page cache first"
python3 tools/bench/page_cache.py "$work/ckpt-sync"
"${mt[@]}" --dump-folder "$work/load" --checkpoint.folder "$work/ckpt-sync" --steps 2 --stop-at 1 \
  > "$work/load.log" 2>&1
rm -rf "$work/ckpt-sync"
say "meshtrain $model: a step and an asynchronous save"
"${mt[@]}" --dump-folder "$work/async" --checkpoint.folder "$work/ckpt-async" --checkpoint.async-mode async \
  > "$work/async.log" 2>&1
rm -rf "$work/ckpt-async"
if python3 -c 'import sys, torch, torch.distributed.checkpoint as d; sys.exit(0 if torch.cuda.is_available() and hasattr(d, "save") else 1)' 2>/dev/null; then
  say "DCP save and load of the same state"
  python3 tools/bench/dcp_io.py "$work/sync/state_dict_keys.json" "$work/ckpt-dcp" > "$work/dcp.json" 2> "$work/dcp.log" ||
    echo "dcp failed: $work/dcp.log" >&2
  rm -rf "$work/ckpt-dcp"
fi
python3 - "$work" "$disk" <<'PY'
import json, os, sys
work, disk = sys.argv[1], sys.argv[2].split()
to_gb = {"GB/s": 1, "MB/s": 1e-3, "kB/s": 1e-6, "GiB/s": 1.074, "MiB/s": 1.049e-3}
disk_gbs = float(disk[0]) * to_gb.get(disk[1], 1) if len(disk) == 2 else float("nan")
sync, load, asyn = (json.load(open(f"{work}/{n}/rank0.json")) for n in ("sync", "load", "async"))
gb = sync["checkpoint_bytes_written"] / 1e9
save_gbs, load_gbs = gb / sync["checkpoint_save_s"], gb / max(load["checkpoint_load_s"], 1e-9)
print(f"{'':34s} {'meshtrain':>12s} {'peer':>12s} {'ratio':>7s}")
print(f"{'save, GB/s (vs the disk, dd)':34s} {save_gbs:12.3f} {disk_gbs:12.3f} {save_gbs / disk_gbs:7.3f}")
print(f"{'async pause, s (vs the sync save)':34s} {asyn['checkpoint_save_s']:12.3f} {sync['checkpoint_save_s']:12.3f} "
      f"{asyn['checkpoint_save_s'] / sync['checkpoint_save_s']:7.3f}")
if os.path.exists(f"{work}/dcp.json") and os.path.getsize(f"{work}/dcp.json"):
    dcp = json.load(open(f"{work}/dcp.json"))
    print(f"{'save, s (vs DCP; ratio = speed)':34s} {sync['checkpoint_save_s']:12.2f} {dcp['save_s']:12.2f} "
          f"{dcp['save_s'] / sync['checkpoint_save_s']:7.3f}")
    print(f"{'load, s (vs DCP; ratio = speed)':34s} {load['checkpoint_load_s']:12.2f} {dcp['load_s']:12.2f} "
          f"{dcp['load_s'] / load['checkpoint_load_s']:7.3f}")
print(f"{gb:.2f} GB written: model + AdamW, one rank")
PY
