#!/usr/bin/env bash
# Fuzzes every parser of outside data (libFuzzer + ASan + UBSan, preset `fuzz`): the pickle /
# DCP .metadata reader, meshtrain's own checkpoint format (its JSON .metadata and data file
# through CheckpointView), the TFRecord/TensorBoard reader, the log-line parsers and the matrix
# loader, and the JUnit/Surefire writers with hostile bytes in every field, SECONDS of CPU time
# each. Each target starts from its seed corpus in tests/fuzz/corpus/<target>/ (inputs that once
# crashed are kept there, so every run replays them first; checkpoint_fuzz's seeds are cut from
# a real meshtrain checkpoint by tests/fuzz/make_checkpoint_seeds.py) plus real files made by
# PyTorch: the DCP .metadata files of tests/fixtures and ../shared/fixtures for the pickle reader, the
# TensorBoard event files of tests/fixtures for the TFRecord reader; the shipped matrices seed
# the matrix loader. Every target runs at once. A crash fails the script and leaves the input in
# build/fuzz/artifacts/<target>/. A timeout (one input running 30 s of wall-clock time), an
# out-of-memory or a leak can come of load alone: ci/test.sh runs the fuzzers at a low priority
# beside busy tests, where a niced process gets a few percent of a core. Such an input is set
# aside in build/fuzz/suspects/<target>/ (and out of the target's corpus), the target fuzzes on
# for the rest of its budget (at most 3 such inputs), and the input is run again alone, at normal
# priority, with the same limits, once everything else is done (`ci/fuzz.sh --recheck`; this
# script does it itself at its end unless MESHTEST_FUZZ_RECHECK=later, which ci/test.sh sets and
# then runs the recheck after its test stages). Only a finding that reproduces alone fails: its
# input goes to build/fuzz/artifacts/<target>/ and into tests/fuzz/corpus/<target>/, so every
# later run replays it until it is fixed (commit it with the fix). A target whose program
# and seeds are byte for byte those of a run that found no crash is not fuzzed again (its line
# says so; MESHTEST_FUZZ_ALL=1 fuzzes it anyway): more time on the same program is a longer
# search, and CI's budget goes to what changed.
# The budget is CPU time, not wall time, so that ci/test.sh can run this at a low priority beside
# its test stages and every target still gets its SECONDS of work: libFuzzer stops on SIGINT when
# the target's user + system time reaches SECONDS (or after 20 x SECONDS of wall time, whatever
# it got by then, so a starved run still ends). On an idle machine the two are the same.
# Usage: ci/fuzz.sh [SECONDS] [TARGET...]   (default 60 s, every target; CI runs 60)
#        ci/fuzz.sh --recheck                 (the set-aside inputs, alone; fails on one that reproduces)
set -euo pipefail
cd "$(dirname "$0")/.."
# libFuzzer's limits, the same for the fuzzing and for the recheck alone.
limits=(-rss_limit_mb=2048 -timeout=30)
suspects=build/fuzz/suspects
# Runs each set-aside input once, alone, with the same limits. Reproduced: the input is kept in
# the corpus and the artifacts, and the script fails naming it. Not reproduced: said, and removed.
recheck() {
  local status=0 input target name log rc
  for input in "$suspects"/*/*; do
    [ -f "$input" ] || continue
    target=$(basename "$(dirname "$input")") name=$(basename "$input") log=$suspects/$target.$name.log
    rc=0
    "build/fuzz/$target" "${limits[@]}" -runs=1 "$input" >"$log" 2>&1 || rc=$?
    if [ $rc -eq 0 ]; then
      echo "fuzz: $target: ${name%%-*} under load did not reproduce alone ($(grep -o 'Executed .* in [0-9]* ms' "$log" | tail -n 1 || echo ran clean)): not a failure"
      rm -f "$input" "$log"
      continue
    fi
    mkdir -p build/fuzz/artifacts/$target tests/fuzz/corpus/$target
    cp "$input" build/fuzz/artifacts/$target/ && cp "$input" tests/fuzz/corpus/$target/
    echo "fuzz: $target FAILED: ${name%%-*} reproduced alone at normal priority (exit $rc) on the input" \
      "tests/fuzz/corpus/$target/$name (kept there: every run replays it; log $log):"
    grep -A 30 -m1 -E "ERROR|runtime error|deadly signal" "$log" || tail -n 30 "$log"
    status=1
  done
  return $status
}
if [ "${1:-}" = --recheck ]; then
  recheck
  exit
fi
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(pickle_fuzz checkpoint_fuzz tfrecord_fuzz log_fuzz matrix_fuzz report_fuzz hf_fuzz golden_fuzz)
# Targets that fuzzed clean, by program and seeds, outside the checkout (cpu.yml keeps the file).
clean=$HOME/.cache/meshtest/fuzz-clean.txt
mkdir -p "$(dirname "$clean")" && touch "$clean"
[ -f build/fuzz/build.ninja ] || cmake --preset fuzz >/dev/null
if ! cmake --build --preset fuzz > build/fuzz/build.log 2>&1; then
  grep -E -A5 "error|FAILED" build/fuzz/build.log | head -n 40
  echo "fuzz: the fuzz targets did not build (build/fuzz/build.log)"
  exit 1
fi
# User + system seconds a running process has used (fields 14 and 15 of /proc/PID/stat, in
# clock ticks); fails once the process has exited.
ticks=$(getconf CLK_TCK)
cpu_seconds() {
  local stat
  stat=$(cat /proc/$1/stat 2>/dev/null) || return 1
  set -- ${stat##*) }  # the fields after the command name (which may hold spaces): state first
  [ "${1:-Z}" != Z ] || return 1
  echo $(( (${12} + ${13}) / ticks ))
}
# One target: its corpus in a temporary folder, then libFuzzer for SECONDS of CPU; one line.
fuzz_one() {
  local target=$1 corpus seeds f log
  corpus=$(mktemp -d)
  cp tests/fuzz/corpus/$target/* "$corpus/" 2>/dev/null || true
  # Real files made by PyTorch seed the two binary parsers.
  seeds=
  case $target in
    pickle_fuzz) seeds=$(find ../shared/fixtures tests/fixtures -name .metadata 2>/dev/null || true) ;;
    tfrecord_fuzz) seeds=$(find tests/fixtures -name 'events.out.tfevents.*' 2>/dev/null || true) ;;
    matrix_fuzz) seeds=$(ls test_matrix/*.yaml examples/*.yaml) ;;
    hf_fuzz) seeds=$(find tests/fixtures/hf-made -name '*.json' -o -name '*.safetensors' 2>/dev/null || true) ;;
    golden_fuzz) seeds=$(find tests/fixtures/megatron-golden test_matrix/golden -name '*.json' -o -name '*.txt' 2>/dev/null || true) ;;
  esac
  for f in $seeds; do cp "$f" "$corpus/seed-$(echo "$f" | md5sum | cut -c1-8)"; done
  # The same program from the same seeds with the same script fuzzed clean before: not again.
  local key earlier=
  key=$(cat ci/fuzz.sh build/fuzz/$target "$corpus"/* | md5sum | cut -c1-16)-$seconds
  [ -n "${MESHTEST_FUZZ_ALL:-}" ] || earlier=$(grep "^$target $key " "$clean" | tail -n 1 | cut -d' ' -f3-) || true
  if [ -n "$earlier" ]; then
    echo "fuzz: $target: carried over: this build of it, from these seeds, ran $seconds CPU-s without a crash at $earlier"
    rm -rf "$corpus"
    return 0
  fi
  mkdir -p build/fuzz/artifacts/$target
  log=build/fuzz/$target.log
  local spent=0 set_aside=0 unit kind rc pid now used stopped inputs
  rm -f "$log"
  while :; do
    # One libFuzzer run for the rest of the budget: its CPU seconds, or 20 times that of wall time.
    build/fuzz/$target "$corpus" -max_total_time=$(( (seconds - spent) * 20 )) "${limits[@]}" \
      -artifact_prefix=build/fuzz/artifacts/$target/ >>"$log" 2>&1 &
    pid=$! rc=0 used=0 stopped=
    while now=$(cpu_seconds $pid); do
      used=$now
      [ $((spent + used)) -lt "$seconds" ] || { kill -INT $pid 2>/dev/null || true; stopped=yes; break; }
      sleep 1
    done
    spent=$((spent + used))
    wait $pid || rc=$?
    # (none yet when it stopped while reading its corpus: `|| true`, or errexit would end the target silently)
    inputs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#') || true
    # 72 is libFuzzer's exit after our SIGINT; 0 its exit at the wall-time cap.
    if [ $rc -eq 0 ] || { [ $rc -eq 72 ] && [ -n "$stopped" ]; }; then
      echo "fuzz: $target: ${inputs:-0} inputs in $spent CPU-s, no crash$([ $set_aside -eq 0 ] || echo ", $set_aside input(s) set aside for the recheck alone")"
      [ $set_aside -gt 0 ] || echo "$target $key $(git rev-parse --short HEAD 2>/dev/null || echo unknown) ($(date -u '+%F %H:%M UTC'))" >> "$clean"
      rm -rf "$corpus"
      return 0
    fi
    # A timeout, out-of-memory or leak may be load's: set the input aside, out of the corpus, and go on.
    unit=$(grep -o 'Test unit written to .*' "$log" | tail -n 1 | sed 's/^Test unit written to //') || true
    kind=$(basename "${unit:-none}") kind=${kind%%-*}
    if [ -f "$unit" ] && [[ $kind =~ ^(timeout|oom|leak)$ ]] && [ $set_aside -lt 3 ]; then
      mkdir -p "$suspects/$target"
      for f in "$corpus"/*; do cmp -s "$f" "$unit" && rm -f "$f"; done
      mv "$unit" "$suspects/$target/"
      set_aside=$((set_aside + 1))
      echo "fuzz: $target: $kind after $spent CPU-s, maybe from load; $suspects/$target/$(basename "$unit") is run again alone at the end"
      [ "$spent" -lt "$seconds" ] && continue
      echo "fuzz: $target: $spent CPU-s, no crash, $set_aside input(s) set aside for the recheck alone"
      rm -rf "$corpus"
      return 0
    fi
    echo "fuzz: $target FAILED (exit $rc; input in build/fuzz/artifacts/$target/, log $log):"
    grep -A 30 -m1 -E "ERROR|runtime error|deadly signal" "$log" || tail -n 30 "$log"
    rm -rf "$corpus"
    return 1
  done
}
# Every target at once: each stops at its own SECONDS of CPU, so the cores stay busy to the end
# (with two at a time, the last target ran alone).
status=0
pids=()
rm -rf "$suspects"
for target in "${targets[@]}"; do fuzz_one "$target" & pids+=($!); done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
[ "${MESHTEST_FUZZ_RECHECK:-}" = later ] || recheck || status=1
exit $status
