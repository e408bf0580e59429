#!/usr/bin/env bash
# Checkpoint save and load throughput of meshtrain on tmpfs (/dev/shm), 4 ranks of FSDP over Gloo,
# against the file system's own copy rate for the same bytes (cp of the saved folder, then cat).
# Usage: tools/bench/checkpoint_io.sh [MODEL] [path/to/meshtrain]   (default debugmodel, build/cpu/meshtrain)
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:-debugmodel}
bin=${2:-build/cpu/meshtrain}
[ -x "$bin" ] || { echo "no meshtrain at $bin: run ci/build.sh meshtrain" >&2; exit 1; }
work=$(mktemp -d /dev/shm/meshtrain-ckpt-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
launch() {  # dump-folder extra-args...
  local dump=$1; shift
  for r in 0 1 2 3; do
    RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=29810 "$bin" train --model "$model" --seq-len 64 \
      --local-batch-size 1 --steps 2 --mesh dp_shard=4 --checkpoint.enable --checkpoint.folder "$work/ckpt" \
      --dump-folder "$dump" --quiet "$@" &
  done
  wait
}
launch "$work/save" --stop-at 1
launch "$work/load" --stop-at 1 --checkpoint.load-step 1
stat() { python3 -c "import json,sys; r=[json.load(open(f'$1/rank{i}.json')) for i in range(4)]; print(max(x['$2'] for x in r), sum(x['$3'] for x in r))"; }
read -r save_s save_bytes < <(stat "$work/save" checkpoint_save_s checkpoint_bytes_written)
read -r load_s load_bytes < <(stat "$work/load" checkpoint_load_s checkpoint_bytes_read)
t0=$(date +%s.%N); cp -r "$work/ckpt/step-1" "$work/copy"; sync; t1=$(date +%s.%N)
cat "$work"/copy/* > /dev/null; t2=$(date +%s.%N)
python3 - "$save_s" "$save_bytes" "$load_s" "$load_bytes" "$t0" "$t1" "$t2" <<'PY'
import sys
save_s, save_b, load_s, load_b, t0, t1, t2 = map(float, sys.argv[1:])
cp_rate = save_b / (t1 - t0) / 1e9
cat_rate = load_b / (t2 - t1) / 1e9
print(f"{'':24s} {'bytes':>12s} {'GB/s':>8s} {'peer GB/s':>10s} {'ratio':>6s}")
print(f"{'save (vs cp -r)':24s} {save_b:12.0f} {save_b / save_s / 1e9:8.2f} {cp_rate:10.2f} {save_b / save_s / 1e9 / cp_rate:6.2f}")
print(f"{'load (vs cat)':24s} {load_b:12.0f} {load_b / load_s / 1e9:8.2f} {cat_rate:10.2f} {load_b / load_s / 1e9 / cat_rate:6.2f}")
PY
