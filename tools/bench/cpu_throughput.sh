#!/usr/bin/env bash
# Single-rank CPU training throughput of meshtrain's tiny and debugmodel flavors.
# Prints median tokens/s (steps 2..N) with one thread and with every core, and the ratio.
# Usage: tools/bench/cpu_throughput.sh [path/to/meshtrain]   (default build/cpu/meshtrain)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/cpu/meshtrain}
[ -x "$bin" ] || { echo "no meshtrain at $bin: run ci/build.sh meshtrain" >&2; exit 1; }
cores=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

median_tokens_per_s() {  # flavor seq_len batch steps threads
  "$bin" train --model "$1" --seq-len "$2" --local-batch-size "$3" --steps "$4" --threads "$5" \
    --dump-folder "$work/$1-$5" | sed -n 's/^meshtrain: median tokens\/s over steps [0-9.]*: //p'
}

printf '%-11s %7s %6s %6s %16s %16s %8s\n' flavor seq_len batch steps "tok/s 1 thread" "tok/s $cores threads" ratio
for cfg in "tiny 64 8 30" "debugmodel 256 8 10"; do
  set -- $cfg
  one=$(median_tokens_per_s "$1" "$2" "$3" "$4" 1)
  all=$(median_tokens_per_s "$1" "$2" "$3" "$4" "$cores")
  ratio=$(awk -v a="$all" -v b="$one" 'BEGIN { printf "%.2f", a / b }')
  printf '%-11s %7s %6s %6s %16s %16s %8s\n' "$1" "$2" "$3" "$4" "$one" "$all" "$ratio"
done
