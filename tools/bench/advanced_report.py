"""Tables and JSON summaries for the advanced one-GPU benches (ci/gpu-advanced.sh):
tools/bench/float8_bench.sh, moe_bench.sh and offload_bench.sh call it on what their runs
left in --work (meshtrain dump folders NAME/metrics.jsonl and trace_step*_rank0.json, the
Python peers' one-line NAME.json, NAME.failed / NAME.skipped markers). Each subcommand prints
a markdown table and writes its JSON summary to --json.

    python3 tools/bench/advanced_report.py float8  --work DIR --flavors "1B 8B_short" --batches "1B=4 8B_short=2" --json F
    python3 tools/bench/advanced_report.py moe     --work DIR --batch 4 --seq 2048 --json F
    python3 tools/bench/advanced_report.py offload --work DIR --batch 2 --seq 2048 --json F
    python3 tools/bench/advanced_report.py peak                  # bf16 matmul peak, one JSON line (torch + GPU)
    python3 tools/bench/advanced_report.py syncs TRACE...        # host-synchronising runtime calls of a trace

Only the standard library, except `peak`.
"""
import argparse, glob, gzip, json, os, statistics, sys

# meshtrain's flavors (trainer/model/flavors.cpp). moe: (routed experts, top-k, shared experts,
# expert hidden size, dense layers at the front).
FLAVORS = {
    "1B": dict(dim=2048, layers=16, heads=32, kv=8, vocab=128256, ffn=8192, moe=None),
    "8B_short": dict(dim=4096, layers=8, heads=32, kv=8, vocab=128256, ffn=14336, moe=None),
    "1B_moe": dict(dim=2048, layers=16, heads=32, kv=8, vocab=128256, ffn=8192, moe=(8, 2, 1, 2048, 1)),
}


def flops_per_token(flavor, seq):
    """torchtitan's count: 6 x the active parameters that multiply (all but the token
    embedding) + 12 x layers x heads x head_dim x seq for attention. Per MoE layer the active
    parameters are the router, top-k routed experts and the shared ones. Returns (flops,
    active parameters without the embedding, total parameters with it)."""
    f = FLAVORS[flavor]
    d, hd = f["dim"], f["dim"] // f["heads"]
    attn = 2 * d * d + 2 * d * f["kv"] * hd + 2 * d  # q, o; k, v; the two norms
    dense = 3 * d * f["ffn"]
    active = total = 0
    for i in range(f["layers"]):
        if f["moe"] and i >= f["moe"][4]:
            e, k, shared, h, _ = f["moe"]
            active += attn + e * d + (k + shared) * 3 * d * h
            total += attn + e * d + (e + shared) * 3 * d * h
        else:
            active += attn + dense
            total += attn + dense
    head = d + f["vocab"] * d  # final norm, output projection
    active += head
    total += head + f["vocab"] * d  # and the embedding
    return 6 * active + 12 * f["layers"] * f["heads"] * hd * seq, active, total


def load_rows(path):
    """metrics.jsonl as a list of dicts; [] when absent (a failed or skipped run)."""
    rows = []
    try:
        with open(path) as fh:
            for line in fh:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def peer_json(path):
    """The last JSON object line a Python peer printed, or None."""
    try:
        with open(path) as fh:
            lines = [l for l in fh if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def median_tps(rows, min_step, skip=()):
    xs = [r["tokens_per_s"] for r in rows if r.get("step", 0) >= min_step and r.get("step") not in skip]
    return statistics.median(xs) if xs else None


def peak_bytes(rows):
    return max((r.get("device_peak_bytes", 0) for r in rows), default=None) if rows else None


def status(work, name):
    """Why a run left no result: 'skipped', 'failed (exit N)', or 'missing'."""
    if os.path.exists(f"{work}/{name}.skipped"):
        return "skipped (time)"
    try:
        rc = open(f"{work}/{name}.failed").read().strip()
        return "timed out" if rc in ("124", "137") else f"failed (exit {rc})"
    except OSError:
        return "missing"


def trace_of(work, name):
    paths = sorted(glob.glob(f"{work}/{name}/trace_step*_rank0.json*") + glob.glob(f"{work}/{name}-trace.json*"))
    return paths[-1] if paths else None


def traced_step(path):
    base = os.path.basename(path or "")
    if base.startswith("trace_step"):
        try:
            return int(base[len("trace_step"):].split("_")[0].split(".")[0])
        except ValueError:
            return None
    return None


def sync_counts(path):
    """Host-synchronising CUDA runtime calls in one Kineto trace: every runtime/driver call
    whose name contains "Synchronize", blocking cudaMemcpy (no Async), and device-to-host
    copies (the GPU-side memcpy events say DtoH / Device -> Pageable|Pinned; a DtoH into
    pageable memory blocks the host even when issued with cudaMemcpyAsync)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    events = data["traceEvents"] if isinstance(data, dict) else data
    by_name, sync, memcpy, memcpy_async, dtoh, dtoh_pageable, runtime = {}, 0, 0, 0, 0, 0, 0
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, name = str(e.get("cat", "")), str(e.get("name", ""))
        if cat in ("cuda_runtime", "cuda_driver") or (cat == "" and name.startswith("cuda")):
            runtime += 1
            if "Synchronize" in name:
                sync += 1
                by_name[name] = by_name.get(name, 0) + 1
            elif name in ("cudaMemcpy", "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyDtoH_v2"):
                memcpy += 1
                by_name[name] = by_name.get(name, 0) + 1
            elif name.startswith(("cudaMemcpyAsync", "cuMemcpyAsync", "cuMemcpyDtoHAsync")):
                memcpy_async += 1
        elif cat == "gpu_memcpy":
            n = name.replace(" ", "")
            if "DtoH" in n or "Device->Pageable" in n or "Device->Pinned" in n:
                dtoh += 1
                dtoh_pageable += "Pageable" in n
    return {"synchronize": sync, "blocking_memcpy": memcpy, "memcpy_async": memcpy_async, "dtoh_copies": dtoh,
            "dtoh_pageable": dtoh_pageable,
            "total_blocking": sync + memcpy + dtoh_pageable, "runtime_calls": runtime, "by_name": by_name}


def table(headers, rows):
    print("| " + " | ".join(headers) + " |")
    print("|" + "---|" * len(headers))
    for r in rows:
        print("| " + " | ".join("" if c is None else str(c) for c in r) + " |")


def gib(b):
    return "n/a" if not b else f"{b / 2**30:.1f}"


def num(x, fmt="{:.0f}"):
    return "n/a" if x is None else fmt.format(x)


def ratio(a, b):
    return None if a is None or not b else a / b


def write_json(path, obj):
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as fh:
            json.dump(obj, fh, indent=1)
            fh.write("\n")


def cmd_float8(a):
    batches = dict(kv.split("=") for kv in a.batches.split()) if a.batches else {}
    out, lines = {"torchao": a.torchao, "min_step": a.min_step, "flavors": {}}, []
    for fl in a.flavors.split():
        runs = {m: load_rows(f"{a.work}/mt-{fl}-{m}/metrics.jsonl") for m in ("off", "scaled_mm")}
        bf, f8 = runs["off"], runs["scaled_mm"]
        res = {"batch": int(batches.get(fl, 0)) or None, "steps": max(len(bf), len(f8))}
        for m, rows in runs.items():
            res[m] = {"tokens_per_s": median_tps(rows, a.min_step), "peak_bytes": peak_bytes(rows),
                      "first_loss": rows[0]["loss"] if rows else None, "last_loss": rows[-1]["loss"] if rows else None,
                      "status": "ok" if rows else status(a.work, f"mt-{fl}-{m}")}
        if bf and f8:
            f8_by_step = {r["step"]: r["loss"] for r in f8}
            rel = [(r["step"], abs(r["loss"] - f8_by_step[r["step"]]) / abs(r["loss"])) for r in bf
                   if r["step"] in f8_by_step and r["loss"]]
            worst = max(rel, key=lambda x: x[1]) if rel else (None, None)
            res.update(max_rel_diff=worst[1], max_rel_diff_step=worst[0], last_rel_diff=rel[-1][1] if rel else None,
                       speedup=ratio(res["scaled_mm"]["tokens_per_s"], res["off"]["tokens_per_s"]))
        out["flavors"][fl] = res
        b, f = res["off"], res["scaled_mm"]
        lines.append([fl, res["batch"], res["steps"],
                      f"{num(b['first_loss'], '{:.3f}')} -> {num(b['last_loss'], '{:.3f}')}" if bf else b["status"],
                      num(f["last_loss"], "{:.3f}") if f8 else f["status"],
                      f"{num(res.get('max_rel_diff'), '{:.2e}')} (step {res.get('max_rel_diff_step')})" if bf and f8 else "n/a",
                      num(res.get("last_rel_diff"), "{:.2e}"), num(b["tokens_per_s"]), num(f["tokens_per_s"]),
                      num(res.get("speedup"), "{:.3f}"), gib(b["peak_bytes"]), gib(f["peak_bytes"])])
    write_json(a.json, out)  # first: a broken stdout cannot lose it
    print(f"float8 (--float8 scaled_mm) vs bf16 (--float8 off), meshtrain, seq 2048, same seed and data; "
          f"tokens/s: median over steps >= {a.min_step}. torchao: {a.torchao}\n")
    table(["flavor", "batch", "steps", "loss bf16 first -> last", "loss fp8 last", "max rel. loss diff",
           "last rel. diff", "tok/s bf16", "tok/s fp8", "fp8 / bf16", "peak GiB bf16", "peak GiB fp8"], lines)


def cmd_moe(a):
    peak = peer_json(f"{a.work}/peak.json")
    pf = peak["flops_per_s"] if peak else None
    res = {"peak_flops_per_s": pf, "batch": a.batch, "seq": a.seq, "runs": {}}
    rows_out = []
    for name, flavor, label in (("mt-dense", "1B", "meshtrain 1B (dense)"), ("mt-moe", "1B_moe", "meshtrain 1B_moe"),
                                ("hf-eager", "1B_moe", "transformers MoE eager"),
                                ("hf-compile", "1B_moe", "transformers MoE compile")):
        fpt, active, total = flops_per_token(flavor, a.seq)
        r = {"flavor": flavor, "flops_per_token": fpt, "active_params_no_embedding": active, "total_params": total}
        if name.startswith("mt-"):
            rows = load_rows(f"{a.work}/{name}/metrics.jsonl")
            tr = trace_of(a.work, name)
            r.update(tokens_per_s=median_tps(rows, a.min_step, skip={traced_step(tr)}), peak_bytes=peak_bytes(rows),
                     last_loss=rows[-1]["loss"] if rows else None, trace=os.path.basename(tr) if tr else None,
                     status="ok" if rows else status(a.work, name))
            if tr:
                try:
                    r["syncs"] = sync_counts(tr)
                except (OSError, ValueError, KeyError) as e:
                    r["syncs_error"] = str(e)
        else:
            p = peer_json(f"{a.work}/{name}.json")
            r.update(status="ok" if p else status(a.work, name), peer=p)
            if p:
                r.update(tokens_per_s=p.get("tokens_per_s"), peak_bytes=p.get("peak_allocated_bytes"),
                         last_loss=p.get("last_loss"), experts_implementation=p.get("experts_implementation"))
            tr = trace_of(a.work, name)
            if tr:
                try:
                    r["syncs"] = sync_counts(tr)
                except (OSError, ValueError, KeyError) as e:
                    r["syncs_error"] = str(e)
        r["mfu"] = ratio(r.get("tokens_per_s") and r["tokens_per_s"] * fpt, pf)
        res["runs"][name] = r
        impl = f" [{r['experts_implementation']}]" if r.get("experts_implementation") else ""
        rows_out.append([label + impl, num(r.get("tokens_per_s")) if r["status"] == "ok" else r["status"],
                         num(r.get("mfu"), "{:.3f}"), f"{fpt / 1e9:.2f}", gib(r.get("peak_bytes")),
                         num(r.get("last_loss"), "{:.3f}")])
    R = res["runs"]
    mfu = lambda n: R[n].get("mfu")
    tps = lambda n: R[n].get("tokens_per_s")
    res["moe_over_dense_mfu"] = ratio(mfu("mt-moe"), mfu("mt-dense"))
    res["mt_moe_over_hf_eager"] = ratio(tps("mt-moe"), tps("hf-eager"))
    res["mt_moe_over_hf_compile"] = ratio(tps("mt-moe"), tps("hf-compile"))
    if "syncs" in R["mt-dense"] and "syncs" in R["mt-moe"]:
        res["moe_extra_blocking_syncs"] = R["mt-moe"]["syncs"]["total_blocking"] - R["mt-dense"]["syncs"]["total_blocking"]
    write_json(a.json, res)  # first: a broken stdout cannot lose it
    print(f"MoE vs dense, one GPU, bf16 compute, batch {a.batch} x seq {a.seq}; tokens/s: median over steps >= "
          f"{a.min_step} (the traced step left out); MFU of the active FLOPs against the measured bf16 matmul peak "
          f"({num(pf and pf / 1e12)} TFLOP/s)\n")
    table(["run", "tokens/s", "MFU", "GFLOP/token", "peak GiB", "last loss"], rows_out)
    print()
    table(["ratio", "value", "target"], [
        ["MFU meshtrain 1B_moe / 1B", num(res["moe_over_dense_mfu"], "{:.3f}"), ">= 0.7"],
        ["tokens/s meshtrain 1B_moe / transformers eager", num(res["mt_moe_over_hf_eager"], "{:.3f}"), ">= 1.0"],
        ["tokens/s meshtrain 1B_moe / transformers compile", num(res["mt_moe_over_hf_compile"], "{:.3f}"), "(reference)"],
    ])
    print("\nHost-synchronising CUDA runtime calls in one traced step:\n")
    names = [n for n in ("mt-dense", "mt-moe", "hf-eager", "hf-compile") if "syncs" in R[n]]
    if names:
        keys = sorted({k for n in names for k in R[n]["syncs"]["by_name"]})
        rows = [[k] + [R[n]["syncs"]["by_name"].get(k, 0) for n in names] for k in keys]
        for k, label in (("memcpy_async", "cudaMemcpyAsync (any direction)"),
                         ("dtoh_copies", "device-to-host copies (GPU memcpy events)"),
                         ("dtoh_pageable", "... of them into pageable memory (blocking)"),
                         ("total_blocking", "total blocking (Synchronize + cudaMemcpy + pageable DtoH)"),
                         ("runtime_calls", "all runtime calls")):
            rows.append([label] + [R[n]["syncs"][k] for n in names])
        table(["call"] + names, rows)
        if "moe_extra_blocking_syncs" in res:
            print(f"\nmeshtrain's MoE step adds {res['moe_extra_blocking_syncs']} blocking call(s) over the dense "
                  f"step (target 0).")
    else:
        print("(no traces)")


def cmd_offload(a):
    res = {"batch": a.batch, "seq": a.seq, "min_step": a.min_step, "runs": {}}
    lines = []
    for name, label in (("mt-base", "meshtrain"), ("mt-offload", "meshtrain --fsdp.cpu-offload"),
                        ("fsdp2-base", "FSDP2"), ("fsdp2-offload", "FSDP2 CPUOffloadPolicy")):
        if name.startswith("mt-"):
            rows = load_rows(f"{a.work}/{name}/metrics.jsonl")
            r = {"tokens_per_s": median_tps(rows, a.min_step), "peak_bytes": peak_bytes(rows),
                 "last_loss": rows[-1]["loss"] if rows else None, "steps": len(rows),
                 "host_peak_rss_bytes": max((x.get("host_peak_rss_bytes", 0) for x in rows), default=None),
                 "status": "ok" if rows else status(a.work, name)}
            extra = ""
        else:
            p = peer_json(f"{a.work}/{name}.json")
            if name == "fsdp2-base" and p is None and not glob.glob(f"{a.work}/{name}.*"):
                continue  # the optional FSDP2 run without offload was not asked for
            r = {"status": "ok" if p else status(a.work, name), "peer": p}
            if p:
                r.update(tokens_per_s=p.get("tokens_per_s"), peak_bytes=p.get("peak_allocated_bytes"),
                         last_loss=p.get("last_loss"), steps=len(p.get("step_times_s", [])))
            extra = f"AdamW {p.get('optimizer_impl')}, {p.get('cpu_threads')} CPU threads" if p else ""
        res["runs"][name] = r
        lines.append([label, num(r.get("tokens_per_s")) if r["status"] == "ok" else r["status"], gib(r.get("peak_bytes")),
                      gib(r.get("host_peak_rss_bytes")), num(r.get("last_loss"), "{:.4f}"), extra])
    R = res["runs"]
    tps = lambda n: R.get(n, {}).get("tokens_per_s")
    mem = lambda n: R.get(n, {}).get("peak_bytes")
    res["mt_offload_over_fsdp2_offload"] = ratio(tps("mt-offload"), tps("fsdp2-offload"))
    res["mt_offload_over_base_peak_memory"] = ratio(mem("mt-offload"), mem("mt-base"))
    res["mt_offload_over_base_tokens_per_s"] = ratio(tps("mt-offload"), tps("mt-base"))
    write_json(a.json, res)  # first: a broken stdout cannot lose it
    print(f"CPU offload, 1B, one GPU, bf16 compute, batch {a.batch} x seq {a.seq}; tokens/s: median over steps >= "
          f"{a.min_step}\n")
    table(["run", "tokens/s", "peak GPU GiB", "host peak RSS GiB", "last loss", ""], lines)
    print()
    table(["ratio", "value", "target"], [
        ["tokens/s meshtrain offload / FSDP2 offload", num(res["mt_offload_over_fsdp2_offload"], "{:.3f}"), ">= 1.0"],
        ["peak GPU memory meshtrain offload / no offload", num(res["mt_offload_over_base_peak_memory"], "{:.3f}"), "<= 0.5"],
        ["tokens/s meshtrain offload / no offload", num(res["mt_offload_over_base_tokens_per_s"], "{:.3f}"), "(cost)"],
    ])


def cmd_peak(_a):
    # The bf16 matmul peak the MFU figures are taken against (gpu_bench.sh's measurement).
    import torch
    n = 8192
    x, y = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(5):
        x @ y
    rates = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(20):
            x @ y
        e.record()
        torch.cuda.synchronize()
        rates.append(2 * n**3 * 20 / (s.elapsed_time(e) / 1e3))
    print(json.dumps({"matmul": f"{n}x{n}x{n} bf16", "flops_per_s": sorted(rates)[len(rates) // 2],
                      "gpu": torch.cuda.get_device_name()}))


def cmd_syncs(a):
    for p in a.traces:
        print(p, json.dumps(sync_counts(p)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("float8")
    f.add_argument("--work", required=True)
    f.add_argument("--flavors", default="1B 8B_short")
    f.add_argument("--batches", default="")
    f.add_argument("--min-step", type=int, default=6)
    f.add_argument("--torchao", default="not checked")
    f.add_argument("--json")
    for name in ("moe", "offload"):
        p = sub.add_parser(name)
        p.add_argument("--work", required=True)
        p.add_argument("--batch", type=int, default=4 if name == "moe" else 2)
        p.add_argument("--seq", type=int, default=2048)
        p.add_argument("--min-step", type=int, default=3)
        p.add_argument("--json")
    sub.add_parser("peak")
    s = sub.add_parser("syncs")
    s.add_argument("traces", nargs="+")
    a = ap.parse_args()
    {"float8": cmd_float8, "moe": cmd_moe, "offload": cmd_offload, "peak": cmd_peak, "syncs": cmd_syncs}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
