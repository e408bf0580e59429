"""Matrix efficiency of a real `meshtest run` (issue 10's measure), from its summary.json:
wall time against the lower bound max(GPU-seconds / N, longest case) and against running
the cases one at a time (the sum of their durations). Skipped cases hold no GPUs and
count for nothing.

    python3 tools/bench/matrix_efficiency.py OUT/summary.json [more summary.json ...]

With several files (one per matrix run on the same machine) it prints one row each and,
for their union, the bound had they been one run.
"""
import json
import sys


def row(name, cases, wall, devices):
    ran = [c for c in cases if c.get("duration_s", 0) > 0]
    gpu_s = sum(c["duration_s"] * c["ngpu"] for c in ran)
    longest = max((c["duration_s"] for c in ran), default=0.0)
    bound = max(gpu_s / devices, longest)
    serial = sum(c["duration_s"] for c in ran)
    wall_txt = f"{wall:.1f}" if wall is not None else "n/a"
    ratio = f"{wall / bound:.3f}" if wall and bound else "n/a"
    print(f"| {name} | {len(ran)} | {devices} | {gpu_s:.1f} | {bound:.1f} | {wall_txt} | {ratio} | "
          f"{serial:.1f} | {serial / bound if bound else float('nan'):.2f} |")


def main(paths):
    print("| run | cases run | GPUs | GPU-s | lower bound s | wall s | wall / bound | one at a time s | one at a time / bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    everything, devices = [], None
    for p in paths:
        s = json.load(open(p))
        devices = s["devices"]
        everything += s["cases"]
        row(p, s["cases"], s["wall_s"], s["devices"])
    if len(paths) > 1:
        row("all, as one run", everything, None, devices)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
