# Sourced by the tools/bench/*_bench.sh scripts that ci/gpu-advanced.sh runs; they set $tag
# (the name their lines start with) and $work (where results go).
# run NAME SECONDS CMD...: one measurement. A Python peer's (hf-*, fsdp2-*) stdout, its one
# JSON line, goes to NAME.json, everything else to NAME.log. A failed run is reported
# (NAME.failed holds its exit status) and the rest go on; with BENCH_DEADLINE (epoch
# seconds) a run gets no more than the time left, and is skipped (NAME.skipped) when under
# 20 s are left.
run() {
  local name=$1 secs=$2 rc; shift 2
  if [ "${BENCH_DEADLINE:-0}" -gt 0 ]; then
    local left=$((BENCH_DEADLINE - $(date +%s) - 10))
    if [ "$left" -lt 20 ]; then echo "$tag: $name skipped: the time budget is spent" | tee "$work/$name.skipped"; return 0; fi
    [ "$left" -lt "$secs" ] && secs=$left
  fi
  echo "$tag: $name ($(date +%T), at most ${secs} s)"
  if [[ $name == hf-* || $name == fsdp2-* ]]; then timeout -k 10 "$secs" "$@" > "$work/$name.json" 2> "$work/$name.log"
  else timeout -k 10 "$secs" "$@" > "$work/$name.log" 2>&1; fi
  rc=$?
  if [ "$rc" != 0 ]; then
    echo "$rc" > "$work/$name.failed"
    echo "$tag: $name failed (exit $rc$([ "$rc" = 124 ] && echo ', timed out')): $(tail -n 2 "$work/$name.log" | tr '\n' ' ')"
  fi
  return 0
}
