"""Reads what tools/bench/fsdp_speed.sh left in --work and prints issue 17's table:
meshtrain's data-parallel step against PyTorch FSDP2 (eager and per-layer compile) at each
per-rank batch, or, with --world 1, meshtrain on one GPU against transformers; then, from
each Chrome trace of one step, how much of the step's communication compute did not hide.

Also a library: exposed_comm(path).
"""
import argparse, glob, json, os, re

from gpu_report import kind_of, load_json, load_trace, median_tokens_per_s, trace_breakdown

WARMUP = 4  # meshtrain's steps 1..4 are left out of the median, as the peers' warm-up steps are


def union(intervals):
    """Sorted, disjoint [start, end] intervals covering the same time as `intervals`."""
    out = []
    for s, t in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], t)
        else:
            out.append([s, t])
    return out


def length(merged):
    return sum(t - s for s, t in merged)


def overlap(a, b):
    """Time covered by both of two union()s."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        total += max(0.0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def exposed_comm(path):
    """Milliseconds of one step's GPU time: span (first GPU activity to last), compute busy
    (union of every kernel, copy and memset that is not NCCL), NCCL busy (union of NCCL
    kernels), exposed communication (NCCL running while nothing else runs: what overlap
    failed to hide, waiting for a slower peer included, since an NCCL kernel spins until its
    peers arrive) and idle (nothing running at all)."""
    nccl, compute = [], []
    for e in load_trace(path):
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        iv = (e["ts"], e["ts"] + e["dur"])  # microseconds
        (nccl if e["cat"] == "kernel" and kind_of(e["name"]) == "nccl" else compute).append(iv)
    n, c = union(nccl), union(compute)
    both = overlap(n, c)
    ends = [t for u in (n, c) if u for t in (u[0][0], u[-1][1])]
    span = max(ends) - min(ends) if ends else 0.0
    exposed = length(n) - both
    ms = 1e3
    return {"span_ms": span / ms, "compute_ms": length(c) / ms, "nccl_ms": length(n) / ms,
            "exposed_ms": exposed / ms, "idle_ms": (span - (length(n) + length(c) - both)) / ms,
            "exposed_pct": 100 * exposed / span if span else 0.0}


def peer_json(path):
    """The last JSON line of a peer's stdout (libraries may print above it)."""
    try:
        lines = [l for l in open(path) if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def meshtrain_result(work, batch, world):
    """Global tokens/s (metrics.jsonl's tokens_per_s is global_batch x seq / step time) over
    steps 5..12, and the worst rank's peak allocated bytes since start-up (rank<R>.json)."""
    folder = f"{work}/mt-b{batch}"
    try:
        rows = [json.loads(l) for l in open(f"{folder}/metrics.jsonl")]
        traced = {int(m) for m in re.findall(r"trace_step(\d+)_rank0", " ".join(os.listdir(folder)))}
        tps, peak0, _ = median_tokens_per_s(f"{folder}/metrics.jsonl", skip_first=WARMUP, skip_steps=traced)
    except (OSError, ValueError, IndexError):
        return None
    ranks = [load_json(f"{folder}/rank{r}.json") for r in range(world)]
    peak = max(r["device_peak_bytes"] for r in ranks) if all(ranks) else peak0
    return {"tokens_per_s": tps, "peak_allocated_bytes": peak, "first_loss": rows[0]["loss"],
            "last_loss": rows[-1]["loss"], "worst_rank": all(ranks)}


def cell(r):
    if not r:
        return "failed"
    return f"{r['tokens_per_s'] / 1e3:.1f}k tok/s, {r['peak_allocated_bytes'] / 2**30:.1f} GiB"


def ratio(a, b, key):
    return f"{a[key] / b[key]:.3f}" if a and b else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--world", type=int, required=True)
    a = ap.parse_args()
    work, n = a.work, a.world
    for f in ("gpu.txt", "versions.txt"):
        if os.path.exists(f"{work}/{f}"):
            print(open(f"{work}/{f}").read().strip())
    batches = sorted({int(m) for m in re.findall(r"mt-b(\d+)\.log", " ".join(os.listdir(work)))})
    # (file prefix, column, short name for the ratio columns) of the two peers
    if n == 1:
        mt_name = "meshtrain, one GPU"
        peers = [("hf-eager", "transformers eager", "HF eager"), ("hf-compile", "transformers torch.compile", "HF compile")]
    else:
        mt_name = f"meshtrain dp_shard={n}"
        peers = [("fsdp2-eager", "FSDP2 eager", "FSDP2 eager"),
                 ("fsdp2-compile", "FSDP2 + per-layer compile", "FSDP2 compile")]
    print(f"\n{n} GPU(s); 1B, seq 2048, bf16 compute, fp32 reduction; global tokens/s of the median step over "
          f"steps {WARMUP + 1}..12 (the compiled peers: the 8 steps after 6 warm-up steps); "
          f"peak allocated GPU memory since start-up, worst rank\n")
    print(f"| per-rank batch | {mt_name} | {peers[0][1]} | {peers[1][1]} | meshtrain / {peers[0][2]} | "
          f"meshtrain / {peers[1][2]} | memory meshtrain / {peers[0][2]} |")
    print("|---|---|---|---|---|---|---|")
    for b in batches:
        mt = meshtrain_result(work, b, n)
        p = [peer_json(f"{work}/{key}-b{b}.json") for key, _, _ in peers]
        print(f"| {b} | {cell(mt)} | {cell(p[0])} | {cell(p[1])} | {ratio(mt, p[0], 'tokens_per_s')} | "
              f"{ratio(mt, p[1], 'tokens_per_s')} | {ratio(mt, p[0], 'peak_allocated_bytes')} |")
    print("\nLosses (first -> last step; the peers train on random bytes, meshtrain on its corpus):")
    for b in batches:
        runs = [(mt_name, meshtrain_result(work, b, n))] + [(name, peer_json(f"{work}/{key}-b{b}.json")) for key, name, _ in peers]
        print(f"- batch {b}: " + "; ".join(f"{name} {r['first_loss']:.3f} -> {r['last_loss']:.3f}"
                                          for name, r in runs if r))

    print("\nOne step from its Chrome trace, rank 0 (ms; compute = every non-NCCL kernel and copy, "
          "exposed = NCCL running while no compute runs):\n")
    print("| trace | span | compute busy | NCCL busy | exposed comm | exposed % of span | idle | kernels | matmul | attention | other |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    traces = []
    for b in batches:
        traces += [(f"{mt_name}, batch {b}", p) for p in sorted(glob.glob(f"{work}/mt-b{b}/trace_step*_rank0.json*"))]
        traces += [(f"{name}, batch {b}", p) for key, name, _ in peers for p in sorted(glob.glob(f"{work}/{key}-b{b}-trace.json*"))]
    for name, path in traces:
        try:
            x, k = exposed_comm(path), trace_breakdown(path)
        except (OSError, ValueError, KeyError) as err:
            print(f"| {name} | unreadable: {err} |")
            continue
        kk = k["by_kind_ms"]
        print(f"| {name} | {x['span_ms']:.1f} | {x['compute_ms']:.1f} | {x['nccl_ms']:.1f} | {x['exposed_ms']:.1f} | "
              f"{x['exposed_pct']:.1f} % | {x['idle_ms']:.1f} | {k['kernels']} | {kk['matmul']:.1f} | "
              f"{kk['attention']:.1f} | {kk['other']:.1f} |")


if __name__ == "__main__":
    main()
