#!/usr/bin/env bash
# The cost of simulation for the real torchtitan (issue 60; docs/simulation.md#cost): a step of
# llama3 debugmodel under FSDP over N = 2, 4, 8 ranks sharing one GPU through meshtest_sim,
# against one rank on NCCL, the same global batch (tools/bench/sim_cost_torchtitan.yaml). The
# cases run one at a time. A step's time is the median gap between torchtitan's consecutive
# step lines on rank 0 (its log has one per step), from step 6 on (compile-free, warm).
# Needs torchtitan importable (source ci/gpu-torchtitan-env.sh) and one GPU.
# Usage: tools/bench/sim_cost_torchtitan.sh OUT_DIR MESHTEST
# Prints one table (also OUT_DIR/table.md); ratio = simulated step time / one-rank step time.
set -uo pipefail
out=$1 meshtest=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
"$meshtest" run "$here/sim_cost_torchtitan.yaml" --backend nccl --ngpu 1 --jobs 1 --out "$out/run" \
  > "$out/run.log" 2>&1 || echo "sim_cost_torchtitan: meshtest exit $? (see $out/run.log)"
python3 - "$out/run/sim_cost_torchtitan" <<'PY' | tee "$out/table.md"
import datetime, re, statistics, sys
from pathlib import Path
root = Path(sys.argv[1])
line = re.compile(r"^\[titan\] (\S+ \S+) .*?step:\s*(\d+)\s")
def step_seconds(case):
    log = root / case / "train" / "rank0.log"
    if not log.exists():
        return None
    stamps = {}
    for text in log.read_text(errors="replace").splitlines():
        text = re.sub(r"\x1b\[[0-9;]*m", "", text)
        if m := line.match(text):
            stamps[int(m[2])] = datetime.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f")
    gaps = [(stamps[s] - stamps[s - 1]).total_seconds() for s in sorted(stamps) if s >= 6 and s - 1 in stamps]
    return statistics.median(gaps) if gaps else None
one = step_seconds("one_rank")
print("| world | ranks | local batch | step (ms, median) | ratio to one rank |")
print("|---|---|---|---|---|")
for case, n, batch in (("one_rank", 1, 8), ("sim2", 2, 4), ("sim4", 4, 2), ("sim8", 8, 1)):
    t = step_seconds(case)
    world = "one rank, NCCL" if n == 1 else f"{n} ranks simulated"
    cell = "n/a (see run.log)" if t is None else f"{t * 1e3:.1f}"
    ratio = "" if t is None or not one else f"{t / one:.2f}x"
    print(f"| {world} | {n} | {batch} | {cell} | {ratio} |")
PY
