#!/usr/bin/env bash
# Fuzzes every parser of outside data (libFuzzer + ASan + UBSan, preset `fuzz`): the pickle /
# DCP .metadata reader, the TFRecord/TensorBoard reader and the log-line parsers, SECONDS each.
# Each target starts from its seed corpus in tests/fuzz/corpus/<target>/ (inputs that once
# crashed are kept there, so every run replays them first) plus, for the pickle reader, the real
# DCP .metadata files of ../shared/fixtures when present. A crash fails the script and leaves the
# input in build/fuzz/artifacts/<target>/.
# Usage: ci/fuzz.sh [SECONDS]   (default 60; CI runs 60)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
[ -f build/fuzz/build.ninja ] || cmake --preset fuzz >/dev/null
if ! cmake --build --preset fuzz > build/fuzz/build.log 2>&1; then
  grep -E -A5 "error|FAILED" build/fuzz/build.log | head -n 40
  echo "fuzz: the fuzz targets did not build (build/fuzz/build.log)"
  exit 1
fi
status=0
for target in pickle_fuzz tfrecord_fuzz log_fuzz; do
  corpus=$(mktemp -d)
  cp tests/fuzz/corpus/$target/* "$corpus/" 2>/dev/null || true
  if [ "$target" = pickle_fuzz ] && [ -d ../shared/fixtures ]; then
    find ../shared/fixtures tests/fixtures -name .metadata 2>/dev/null |
      while read -r f; do cp "$f" "$corpus/metadata-$(echo "$f" | md5sum | cut -c1-8)"; done
  fi
  mkdir -p build/fuzz/artifacts/$target
  log=build/fuzz/$target.log
  if build/fuzz/$target "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
       -artifact_prefix=build/fuzz/artifacts/$target/ -print_final_stats=1 >"$log" 2>&1; then
    echo "fuzz: $target: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$') inputs in ${seconds} s, no crash"
  else
    echo "fuzz: $target FAILED (input in build/fuzz/artifacts/$target/, log $log):"
    grep -A 30 -m1 -E "ERROR|runtime error|deadly signal" "$log" || tail -n 30 "$log"
    status=1
  fi
  rm -rf "$corpus"
done
exit $status
