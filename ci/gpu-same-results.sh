#!/usr/bin/env bash
# Same results on one GPU before and after a refactor (issue 63's acceptance), in one device call:
# meshtrain built from an older source tree (OLD_SRC, e.g. `git archive 5aa14a6`) and from this
# one, each run through today's meshtest over the same matrix (gpu1.yaml by default), then
# tools/same_results.py over the two runs: every verdict, every loss and grad_norm, the contract
# files and every checkpoint file, byte for byte.
# Usage: OLD_SRC=build/old-src bash ci/gpu-same-results.sh [MATRIX.yaml [meshtest run options...]]
# Carry: .deps/include .deps/pugixml .deps/sqlite and OLD_SRC. Results in ${OUT:-build/cuda/results}.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
source ci/gpu-env.sh
matrix=${1:-test_matrix/gpu1.yaml}
shift $(( $# > 0 ? 1 : 0 ))
old_src=$(cd "${OLD_SRC:?name the older source tree}" && pwd)
[ -e "$old_src/.deps" ] || ln -s "$PWD/.deps" "$old_src/.deps"  # the carried headers, for both trees
out=$(mkdir -p "${OUT:-build/cuda/results}" && cd "${OUT:-build/cuda/results}" && pwd)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1 | tee "$out/gpu.txt"
# Both trees compile at once, each on half the cores: the two builds are the call's longest part.
half=$(( ($(nproc) + 1) / 2 ))
(cd "$old_src" && cmake --preset cuda >/dev/null && cmake --build --preset cuda -j "$half" --target meshtrain \
   | grep -E "error|FAILED") > "$out/old-build.log" 2>&1 &
old_build=$!
[ -f build/cuda/build.ninja ] || cmake --preset cuda >/dev/null
cmake --build --preset cuda -j "$half" --target meshtest --target meshtrain | grep -E "error|FAILED"
wait "$old_build"
echo "gpu-same-results: built in $SECONDS s"
for side in old new; do
  binary=build/cuda/meshtrain
  [ "$side" = old ] && binary=$old_src/build/cuda/meshtrain
  [ -x "$binary" ] || { echo "gpu-same-results: no $binary"; cat "$out/old-build.log"; exit 2; }
  rm -rf "build/cuda/same-$side"
  build/cuda/meshtest run "$matrix" --backend nccl --ngpu 1 --meshtrain "$binary" --out "build/cuda/same-$side" \
    --grace 10 "$@" > "$out/meshtest-$side.log" 2>&1
  echo "gpu-same-results: $side exit $? at $SECONDS s; $(tail -n 1 "$out/meshtest-$side.log")"
done
python3 tools/same_results.py build/cuda/same-old build/cuda/same-new 2>&1 | tee "$out/same_results.txt" | tail -n 40
rc=${PIPESTATUS[0]}
echo "gpu-same-results: same_results exit $rc at $SECONDS s"
exit "$rc"
