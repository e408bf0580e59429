#!/usr/bin/env bash
# The advanced one-GPU benches in one device call (at most ~9.5 minutes), every figure from
# this run: builds meshtrain (CUDA preset), then, in this order and within a time budget,
#   float8   meshtrain --float8 scaled_mm vs bf16, 1B and 8B_short (tools/bench/float8_bench.sh)
#   moe      meshtrain 1B_moe vs 1B, and vs transformers' Qwen2-MoE eager / compile (moe_bench.sh)
#   offload  meshtrain --fsdp.cpu-offload vs PyTorch FSDP2 CPUOffloadPolicy, 1B (offload_bench.sh)
# A bench is skipped (and the skip said) once BENCH_BUDGET_S seconds have passed since the
# start, build included; each gets at most its slot (*_SLOT_S) and no run goes past
# BENCH_HARD_S, so the archive is always written. Everything -- logs, JSON summaries, tables,
# metrics, gzipped traces -- goes to ${OUT:-build/cuda}/advanced and is packed as ONE archive,
# advanced.tgz next to it (the device tool returns at most 8 files); every table is printed
# again at the end, so the output's tail has them.
# Usage: ci/gpu-advanced.sh
#   BENCHES="float8 moe offload" (which; they run in this order), BENCH_BUDGET_S=480, BENCH_HARD_S=555,
#   FLOAT8_SLOT_S=100 MOE_SLOT_S=180 OFFLOAD_SLOT_S=170, F8_STEPS=30, F8_FLAVORS="1B 8B_short",
#   MOE_STEPS=20, OFFLOAD_STEPS=8; the benches' own variables pass through (BATCH_1B, HF_MODES,
#   HF_EXPERTS, FSDP2_BASE, MT_OFFLOAD_THREADS, ...).
# All three with a cold build may not fit one call (transformers' torch.compile run is the
# first to be cut short): two calls on one warm machine can split them, BENCHES="float8 moe"
# then BENCHES=offload (the second build is then a no-op), or give a bench a longer slot.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
t0=$(date +%s)
budget=${BENCH_BUDGET_S:-480}
hard=$((t0 + ${BENCH_HARD_S:-555}))
benches=${BENCHES:-float8 moe offload}
adv=${OUT:-build/cuda}/advanced
rm -rf "$adv" && mkdir -p "$adv"
elapsed() { echo $(($(date +%s) - t0)); }
say() { echo "gpu-advanced: $* (at $(elapsed) s)" | tee -a "$adv/summary.txt"; }

source ci/gpu-env.sh
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | head -n 1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "CUDA", torch.version.cuda,
    "transformers", transformers.__version__)' 2>&1 | tail -n 1
  echo "host cores: $(nproc)"
} | tee "$adv/machine.txt"

say "building meshtrain"
gpu_build meshtrain > "$adv/build.log" 2>&1  # only its error lines
if [ -x build/cuda/meshtrain ] && ! grep -q "FAILED" "$adv/build.log"; then
  say "built"
else
  say "build failed (a stale binary is not benchmarked): see build.log"
  head -n 30 "$adv/build.log"
  benches=""
fi

for b in $benches; do
  [[ " float8 moe offload " == *" $b "* ]] || say "unknown bench $b (float8 | moe | offload): ignored"
done
for b in float8 moe offload; do  # this order, whatever BENCHES' order
  [[ " $benches " == *" $b "* ]] || continue
  # shellcheck disable=SC2206 # F8_FLAVORS is a list: split on purpose
  case $b in
    float8) slot=${FLOAT8_SLOT_S:-100}; cmd=(tools/bench/float8_bench.sh "${F8_STEPS:-30}" ${F8_FLAVORS:-1B 8B_short}) ;;
    moe) slot=${MOE_SLOT_S:-180}; cmd=(tools/bench/moe_bench.sh "${MOE_STEPS:-20}" 4) ;;
    offload) slot=${OFFLOAD_SLOT_S:-170}; cmd=(tools/bench/offload_bench.sh "${OFFLOAD_STEPS:-8}" 2) ;;
  esac
  if [ "$(elapsed)" -ge "$budget" ]; then
    say "$b skipped: the time budget (BENCH_BUDGET_S=$budget s) has passed"
    continue
  fi
  deadline=$(($(date +%s) + slot))
  [ "$deadline" -gt "$hard" ] && deadline=$hard
  say "$b: start, runs end by $((deadline - t0)) s"
  RESULTS=$adv BENCH_DEADLINE=$deadline bash "${cmd[@]}" > "$adv/$b.log" 2>&1
  say "$b: done (exit $?)"
done

# Traces gzipped (the benches do it; this catches a bench cut short), then the tables again.
find "$adv" -name '*trace*.json' -exec gzip -f {} + 2>/dev/null
echo
echo "================ gpu-advanced results ================"
cat "$adv/machine.txt"
for b in float8 moe offload; do
  [ -f "$adv/$b.log" ] || continue
  echo
  echo "---- $b ----"
  grep -E '^[a-z0-9-]+: .*(failed|skipped|torchao|no build)' "$adv/$b.log" | head -n 12
  if [ -f "$adv/$b/table.md" ]; then cat "$adv/$b/table.md"; else echo "(no table)"; tail -n 8 "$adv/$b.log"; fi
done
echo
cat "$adv/summary.txt"

# ONE archive; without the traces should they make it too large (over 15 MiB).
parent=$(dirname "$adv")
(cd "$parent" && tar czf advanced.tgz advanced &&
  if [ "$(stat -c %s advanced.tgz)" -gt $((15 * 2**20)) ]; then
    echo "gpu-advanced: archive over 15 MiB: leaving the traces out"
    tar czf advanced.tgz --exclude='*trace*' advanced
  fi)
echo "gpu-advanced: $parent/advanced.tgz ($(du -h "$parent/advanced.tgz" | cut -f1)), $(elapsed) s in all"
# Under the device tool only the archive should come back.
[ -n "${OUT:-}" ] && rm -rf "$adv"
exit 0
