#!/usr/bin/env bash
# Per-case overhead of `meshtest run --launcher slurm` against the local launcher on the
# same fake-trainer matrix: N cases of R ranks that each sleep S seconds, run one case at
# a time (--jobs 1) so the wall time is N x (S + overhead). Brings up the local 2-node
# cluster (ci/slurm-local.sh) for the Slurm run and stops it at the end. Needs root.
# Usage: tools/bench/slurm_overhead.sh [N] [RANKS] [SLEEP_S]   (after ci/build.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-20}
ranks=${2:-4}
sleep_s=${3:-1}
build=build/cpu
tmp=$(mktemp -d)
cluster=$tmp/cluster
trap 'bash ci/slurm-local.sh stop "$cluster" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
{
  echo "suite: overhead"
  echo "cases:"
  for i in $(seq "$n"); do
    echo "  - {name: c$i, command: [$PWD/$build/tests/fake_trainer, --sleep, '$sleep_s'], ngpu: $ranks}"
  done
} >"$tmp/m.yaml"
bash ci/slurm-local.sh start "$cluster" >/dev/null
export SLURM_CONF=$cluster/etc/slurm.conf
wall() {  # seconds of one meshtest run
  local t0 t1
  t0=$(date +%s.%N)
  CI=1 "$build/meshtest" run "$tmp/m.yaml" --jobs 1 --grace 5 "$@" >"$tmp/run.log" 2>&1 || { cat "$tmp/run.log"; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
local_s=$(wall --out "$tmp/local" --ngpu 8)
slurm_s=$(wall --out "$tmp/slurm" --launcher slurm --gpus-per-node 8)
two_node_s=$(wall --out "$tmp/slurm2" --launcher slurm --gpus-per-node $((ranks / 2)))
awk -v n="$n" -v r="$ranks" -v s="$sleep_s" -v l="$local_s" -v u="$slurm_s" -v t="$two_node_s" 'BEGIN {
  lo = (l - n * s) / n; so = (u - n * s) / n; to = (t - n * s) / n
  printf "%d cases of %d ranks sleeping %s s, one at a time (--jobs 1)\n", n, r, s
  printf "peer: local launcher   wall %7.2f s  overhead per case %6.3f s\n", l, lo
  printf "slurm, one node        wall %7.2f s  overhead per case %6.3f s  (%.1fx the local overhead, +%.3f s)\n", u, so, so / lo, so - lo
  printf "slurm, two nodes       wall %7.2f s  overhead per case %6.3f s  (%.1fx the local overhead, +%.3f s)\n", t, to, to / lo, to - lo
}'
