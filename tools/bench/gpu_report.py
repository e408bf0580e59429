"""Reads what tools/bench/gpu_bench.sh (one GPU) or tools/bench/fsdp_bench.sh (several)
left in --work / --out and prints the tables recorded in docs/performance.md.

Also a library: trace_breakdown() splits a Chrome trace of one step (Kineto's format,
written by meshtrain --profile-step and by torch.profiler) into kernel time by kind and
the idle gaps between kernels.
"""
import argparse, gzip, json, os, statistics

# meshtrain's 1B flavor (trainer/model/flavors.cpp): Llama-3.2-1B dimensions, untied output.
V, D, L, H, KV, FFN = 128256, 2048, 16, 32, 8, 8192


def flops_per_token(seq):
    """PaLM / torchtitan: 6 FLOPs per parameter per token for forward + backward, over every
    parameter that multiplies (all but the token embedding, a lookup), plus attention's
    two matmuls, 12 * layers * heads * head_dim * seq (not halved for the causal mask)."""
    per_layer = D * D * 2 + D * (KV * D // H) * 2 + 3 * D * FFN + 2 * D
    n_dense = L * per_layer + D + V * D  # layers, final norm, output projection
    return 6 * n_dense + 12 * L * H * (D // H) * seq, n_dense


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def kind_of(name):
    n = name.lower()
    if "nccl" in n:
        return "nccl"
    if any(k in n for k in ("flash", "fmha", "attention", "attn")):
        return "attention"
    if any(k in n for k in ("gemm", "cutlass", "xmma", "nvjet", "cublas", "wgmma", "sm90_", "matmul")):
        return "matmul"
    return "other"


def trace_breakdown(path):
    """Kernel milliseconds by kind, GPU-busy ms (union of kernel and copy intervals), the
    span from the first GPU activity to the last, and the idle time inside it. NCCL kernels
    run on their own stream and can overlap compute; busy counts overlapped time once."""
    events = [e for e in load_trace(path) if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    by_kind = {"matmul": 0.0, "attention": 0.0, "nccl": 0.0, "other": 0.0, "copies": 0.0}
    nccl_names = {}
    intervals = []
    for e in events:
        ms = e["dur"] / 1e3
        kind = "copies" if e["cat"] != "kernel" else kind_of(e["name"])
        by_kind[kind] += ms
        if kind == "nccl":
            op = "all_gather" if "allgather" in e["name"].lower() else "reduce_scatter" if "reducescatter" in e["name"].lower() \
                else "all_reduce" if "allreduce" in e["name"].lower() else "other"
            nccl_names[op] = nccl_names.get(op, 0.0) + ms
        intervals.append((e["ts"], e["ts"] + e["dur"]))
    intervals.sort()
    busy, end = 0.0, None
    for s, t in intervals:
        if end is None or s > end:
            busy += t - s
            end = t
        elif t > end:
            busy += t - end
            end = t
    span = (intervals[-1][1] - intervals[0][0]) / 1e3 if intervals else 0.0
    # Idle counts gaps on the compute streams: span minus busy (union over all streams).
    return {"kernels": len(events), "span_ms": span, "busy_ms": busy / 1e3, "idle_ms": span - busy / 1e3,
            "by_kind_ms": by_kind, "nccl_ms": nccl_names}


def median_tokens_per_s(metrics_path, skip_first=2, skip_steps=()):
    rows = [json.loads(l) for l in open(metrics_path)]
    steady = [r["tokens_per_s"] for r in rows[skip_first:] if r["step"] not in skip_steps] or [rows[-1]["tokens_per_s"]]
    return statistics.median(steady), max(r.get("device_peak_bytes", 0) for r in rows), rows


def fmt_ratio(x):
    return "n/a" if x is None else f"{x:.2f}"


def single_gpu_report(a):
    work, out = a.work, a.out
    peak = load_json(f"{out}/peak.json")
    fpt, n_dense = flops_per_token(a.seq)
    peak_fps = peak["flops_per_s"] if peak else None
    mfu = lambda tps: None if not peak_fps or tps is None else tps * fpt / peak_fps
    mt_tps, mt_mem, mt_rows = median_tokens_per_s(f"{work}/mt/metrics.jsonl", skip_steps={mt_last(work)})
    hf = {m: load_json(f"{out}/hf-{m}.json") for m in ("eager", "compile")}
    gpu = open(f"{out}/gpu.txt").read().strip() if os.path.exists(f"{out}/gpu.txt") else "?"
    print(f"GPU: {gpu}")
    if peak_fps:
        print(f"Measured bf16 matmul peak ({peak['matmul']}): {peak_fps / 1e12:.0f} TFLOP/s")
    print(f"FLOPs per token: 6 x {n_dense / 1e9:.4f}e9 dense parameters + 12 x {L} x {H} x {D // H} x {a.seq} "
          f"= {fpt / 1e9:.3f} GFLOP; batch {a.batch} x seq {a.seq} = {a.batch * a.seq} tokens per step\n")
    print("| measure | meshtrain | peer | meshtrain / peer | target |")
    print("|---|---|---|---|---|")
    for mode in ("eager", "compile"):
        p = hf[mode]
        if p is None:
            print(f"| tokens/s vs HF {mode} | {mt_tps:.0f} | failed | n/a | |")
            continue
        target = ">= 1.0" if mode == "eager" else "(reference)"
        print(f"| tokens/s vs HF {mode} | {mt_tps:.0f} | {p['tokens_per_s']:.0f} | {mt_tps / p['tokens_per_s']:.3f} | {target} |")
    for name, tps in [("meshtrain", mt_tps)] + [(f"HF {m}", hf[m]["tokens_per_s"] if hf[m] else None) for m in hf]:
        if mfu(tps) is not None:
            target = ">= 0.50" if name == "meshtrain" else ""
            print(f"| MFU of {name} (of the measured peak) | {mfu(tps):.3f} | | | {target} |")
    for mode in ("eager", "compile"):
        p = hf[mode]
        if p:
            print(f"| peak GPU memory vs HF {mode}, GiB | {mt_mem / 2**30:.1f} | {p['peak_allocated_bytes'] / 2**30:.1f} | "
                  f"{mt_mem / p['peak_allocated_bytes']:.3f} | (lower is better) |")
    st = open(f"{out}/startup.txt").read() if os.path.exists(f"{out}/startup.txt") else ""
    for line in st.splitlines():
        if line.startswith("start-up"):
            parts = line.split()
            m, t = float(parts[parts.index("meshtest+meshtrain") + 1]), float(parts[parts.index("torchrun+python") + 1])
            print(f"| start-up, 1 rank, s | {m:.2f} | {t:.2f} (torchrun + Python) | {m / t:.3f} | <= 0.25 |")
    save = load_json(f"{work}/mt/rank0.json")
    load = load_json(f"{work}/mt-load/rank0.json")
    dcp = load_json(f"{out}/dcp.json")
    if save and load and dcp:
        state = dcp["state_bytes"]
        for what, mt_s, peer_s in (("save", save["checkpoint_save_s"], dcp["save_s"]),
                                   ("load", load["checkpoint_load_s"], dcp["load_s"])):
            print(f"| checkpoint {what}, s (GB/s of state) | {mt_s:.2f} ({state / mt_s / 1e9:.2f}) | "
                  f"{peer_s:.2f} ({state / peer_s / 1e9:.2f}) DCP | {peer_s / mt_s:.2f} (speed) | >= 1.0 |")
        print(f"\nCheckpoint state: {state / 1e9:.2f} GB (model + exp_avg + exp_avg_sq, float32); meshtrain wrote "
              f"{save['checkpoint_bytes_written'] / 1e9:.2f} GB (1/8 more: leaf checksums), DCP {dcp['bytes_on_disk'] / 1e9:.2f} GB.")
    print("\nOne step, from its Chrome trace (ms):\n")
    print("| trainer | GPU span | busy | idle | matmul | attention | other kernels | copies | kernels |")
    print("|---|---|---|---|---|---|---|---|---|")
    traces = [("meshtrain", f"{work}/mt/trace_step{mt_last(work)}_rank0.json"),
              ("HF eager", f"{work}/hf-eager-trace.json"), ("HF compile", f"{work}/hf-compile-trace.json")]
    for name, path in traces:
        path = path if os.path.exists(path) else path + ".gz"
        if not os.path.exists(path):
            continue
        b = trace_breakdown(path)
        k = b["by_kind_ms"]
        print(f"| {name} | {b['span_ms']:.1f} | {b['busy_ms']:.1f} | {b['idle_ms']:.1f} | {k['matmul']:.1f} | "
              f"{k['attention']:.1f} | {k['other']:.1f} | {k['copies']:.1f} | {b['kernels']} |")
    if peak_fps:
        ideal = a.batch * a.seq * 6 * n_dense / peak_fps * 1e3
        print(f"\nThe dense matmuls at the measured peak would take {ideal:.1f} ms per step.")


def fsdp_report(a):
    work, out, n = a.work, a.out, a.world
    gpu = os.popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1").read().strip()
    print(f"{n} GPUs ({gpu or '?'}); meshtrain 1B, bf16 compute, fp32 reduce, seq 2048, local batch 2\n")
    rows = [json.loads(l) for l in open(f"{work}/fsdp/metrics.jsonl")]
    last = rows[-1]
    trace = f"{work}/fsdp/trace_step{last['step']}_rank0.json.gz"
    b = trace_breakdown(trace)
    peer = load_json(f"{out}/nccl_peer.json")
    print("| collective | bytes in the step (rank 0) | NCCL kernel ms | bus GB/s in the FSDP step | "
          "plain NCCL loop peak bus GB/s | ratio |")
    print("|---|---|---|---|---|---|")
    for op in ("all_gather", "reduce_scatter"):
        nbytes = last["comm_bytes"][op]
        ms = b["nccl_ms"].get(op, 0.0)
        bus = nbytes * (n - 1) / n / (ms / 1e3) if ms > 0 else None
        pk = peer["peak_busbw"][op] if peer else None
        print(f"| {op} | {nbytes / 1e9:.3f} GB | {ms:.1f} | {bus / 1e9 if bus else float('nan'):.0f} | "
              f"{pk / 1e9 if pk else float('nan'):.0f} | {fmt_ratio(bus / pk if bus and pk else None)} |")
    k = b["by_kind_ms"]
    print(f"\nStep {last['step']} on rank 0: GPU span {b['span_ms']:.1f} ms, busy {b['busy_ms']:.1f} ms, NCCL kernels "
          f"{k['nccl']:.1f} ms, matmul {k['matmul']:.1f} ms, attention {k['attention']:.1f} ms, other {k['other']:.1f} ms; "
          f"step time {last['step_time_s'] * 1e3:.0f} ms.")
    if peer:
        print("\nPlain NCCL loop (bf16 rows), bus GB/s by output size:")
        print("| MiB | all_gather | reduce_scatter |")
        print("|---|---|---|")
        for mib in sorted({r["bytes"] for r in peer["results"] if r["dtype"] == "bfloat16"}):
            got = {r["op"]: r["busbw"] for r in peer["results"] if r["dtype"] == "bfloat16" and r["bytes"] == mib}
            print(f"| {mib / 2**20:.0f} | {got.get('all_gather', 0) / 1e9:.0f} | {got.get('reduce_scatter', 0) / 1e9:.0f} |")
    one = load_json(f"{work}/one/rank0.json")
    ranks = [load_json(f"{work}/fsdp/rank{r}.json") for r in range(n)]
    if one and all(ranks):
        worst = max(r["device_peak_bytes"] for r in ranks)
        print(f"\n| FSDP memory | one GPU | dp_shard={n}, worst rank | ratio | 1/{n} |")
        print("|---|---|---|---|---|")
        print(f"| peak GPU memory, GiB | {one['device_peak_bytes'] / 2**30:.2f} | {worst / 2**30:.2f} | "
              f"{worst / one['device_peak_bytes']:.3f} | {1 / n:.3f} |")
        for key in ("param_bytes", "grad_bytes", "optimizer_bytes"):
            w = max(r[key] for r in ranks)
            print(f"| {key.replace('_', ' ')}, GiB | {one[key] / 2**30:.2f} | {w / 2**30:.2f} | {w / one[key]:.3f} | {1 / n:.3f} |")


def mt_last(work):
    rows = [json.loads(l) for l in open(f"{work}/mt/metrics.jsonl")]
    return rows[-1]["step"]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--fsdp", action="store_true", help="fsdp_bench.sh's results")
    ap.add_argument("--world", type=int, default=1)
    args = ap.parse_args()
    fsdp_report(args) if args.fsdp else single_gpu_report(args)
