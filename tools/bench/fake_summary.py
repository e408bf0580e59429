#!/usr/bin/env python3
"""Writes a summary.json (format_version 2) of N made-up cases, with rank logs, for
benchmarking and browser-checking report.html without running a matrix.

    fake_summary.py N OUT_DIR [--hostile]

Cases cycle through the verdicts meshtest produces (passes, caught canaries with a
loss_matches series, band and step, crashes, timeouts, xfails, skips, reshard chains with
a resumed phase). --hostile adds a case whose every string tries to break the page, and a
20 MB binary log. Standard library only.
"""
import json
import os
import random
import sys

MESHES = ["dp_shard=4", "dp_replicate=2,dp_shard=2", "tp=4", "dp_shard=2,tp=2", "tp=2", "dp_replicate=4"]
HOSTILE = "</script><script>alert(1)</script> \"'><img src=x onerror=alert(1)> \x1b[31mred\x1b[0m"


def curve(first, last, start, rng, grad=True):
    return [[s, round(start - 0.05 * (s - first) + rng.uniform(-0.01, 0.01), 5),
             round(1.0 + 0.01 * s, 4) if grad else None] for s in range(first, last + 1)]


def phase(name, out, case_dir, nproc, points, ok=True, signal=0, rank=0):
    d = os.path.join(out, case_dir, name)
    os.makedirs(d, exist_ok=True)
    for r in range(nproc):
        with open(os.path.join(d, f"rank{r}.log"), "w") as f:
            f.write(f"[rank{r}] step 1 loss 5.0\n" * 3)
    exits = [{"rank": r, "exit_code": 0, "signal": signal if (r == rank and not ok) else 0} for r in range(nproc)]
    return {"name": name, "argv": ["meshtrain", "train"], "nproc": nproc, "dir": d, "ran": True, "attempts": 1,
            "ok": ok, "outputs": {}, "duration_s": 3.2, "timed_out": False, "killed": False,
            "stopped_because": "" if ok else f"rank {rank} killed by signal {signal}", "exits": exits,
            "curve": points}


def make_case(i, out, rng):
    kind = ["passed", "canary_caught", "crashed", "reshard", "xfailed", "skipped", "timed_out", "check_failed"][i % 8]
    mesh = MESHES[i % len(MESHES)]
    suite = ["cpu", "resharding", "parallel", "canary"][i % 4]
    name = f"{kind}_{i}[{mesh}]"
    case_dir = f"{suite}/{kind}_{i}"
    status, met, verdict = "passed", True, {"kind": "passed", "message": "every check passed"}
    phases = [phase("train", out, case_dir, 2, curve(1, 20, 5.0, rng))]
    checks = [{"kind": "exit", "passed": True, "judged": True, "message": "every rank exited 0", "details": ""}]
    meshes, expect, failing_log = mesh, "pass", ""
    if kind in ("canary_caught", "check_failed"):
        ref = [[s, round(5.0 - 0.05 * s, 5)] for s in range(1, 21)]
        sub = [[s, round(v + (0.4 if s >= 12 else 0.001), 5)] for s, v in ref]
        checks.append({"kind": "loss_matches", "passed": False, "judged": True, "phase": "train", "step": 12,
                       "value": sub[11][1], "reference": ref[11][1], "tolerance": 0.01,
                       "message": "loss differs from the baseline at step 12", "details": "",
                       "series": [{"role": "subject", "label": "phase train", "metric": "loss", "points": sub},
                                  {"role": "reference", "label": "baseline cpu/ddp", "metric": "loss", "points": ref}],
                       "band": {"rtol": 0.01, "atol": 0.001}})
        if kind == "canary_caught":
            expect = "fail: loss_matches"
            verdict = {"kind": "canary_caught", "message": "loss_matches failed at step 12, as planted",
                       "check": "loss_matches", "step": 12}
        else:
            status, met = "failed", False
            verdict = {"kind": "check_failed", "message": "loss differs from the baseline at step 12",
                       "check": "loss_matches", "step": 12}
    elif kind in ("crashed", "timed_out"):
        status, met = "failed", False
        phases = [phase("train", out, case_dir, 2, curve(1, 7, 5.0, rng), ok=False, signal=11, rank=1)]
        failing_log = os.path.join(phases[0]["dir"], "rank1.log")
        verdict = ({"kind": "crashed", "message": "rank 1 killed by signal 11 (SIGSEGV)", "check": "exit",
                    "phase": "train", "rank": 1, "signal": 11} if kind == "crashed" else
                   {"kind": "timed_out", "message": "rank 1 hung past 60 s", "check": "exit", "phase": "train", "rank": 1})
    elif kind == "reshard":
        to = MESHES[(i + 2) % len(MESHES)]
        meshes = f"{mesh} -> {to}"
        phases = [phase("save", out, case_dir, 4, curve(1, 10, 5.0, rng)),
                  phase("load", out, case_dir, 4, curve(11, 20, 4.5, rng, grad=False))]
        checks.append({"kind": "keys_match", "passed": True, "judged": True, "message": "keys match",
                       "details": "missing: (none)\nunexpected: (none)\nreshaped: (none)"})
    elif kind == "xfailed":
        status, expect = "xfailed", "xfail: parametrize keys do not load under tp"
        verdict = {"kind": "xfailed", "message": "keys_match failed, as the xfail says", "check": "keys_match"}
    elif kind == "skipped":
        status, expect, phases, checks = "skipped", "skip: needs 8 GPUs", [], []
        verdict = {"kind": "skipped", "message": "needs 8 GPUs"}
    reason = "" if met and status == "passed" else verdict["message"]
    return {"id": f"{suite}/{name}", "suite": suite, "name": name, "file": f"m.yaml:{10 + i}:5", "status": status,
            "met_expectation": met, "expect": expect, "reason": reason, "details": "", "ngpu": 0, "devices": "cpu",
            "model": "tiny", "seed": "1", "tags": [suite, kind], "expected_s": 4.0, "start_s": float(i),
            "duration_s": 3.9, "timestamp": "2024-01-01T00:00:00", "dir": os.path.join(out, case_dir),
            "repro": f"meshtest run test_matrix/cpu.yaml -k '{suite}/{name}'", "failing_log": failing_log,
            "mesh": mesh, "meshes": meshes, "phase_meshes": meshes.split(" -> "), "earlier_attempts": [], "verdict": verdict, "phases": phases,
            "checks": checks}


def hostile_case(out):
    d = os.path.join(out, "cpu", "hostile")
    os.makedirs(d, exist_ok=True)
    log = os.path.join(d, "rank0.log")
    with open(log, "wb") as f:
        f.write(os.urandom(20 << 20))
        f.write(b"\n</script><script>alert(1)</script>\n")
    return {"id": "cpu/hostile" + HOSTILE, "suite": "cpu", "name": "hostile" + HOSTILE, "file": "m.yaml:1:1",
            "status": "failed", "met_expectation": False, "expect": "pass", "reason": HOSTILE, "details": HOSTILE,
            "ngpu": 0, "devices": "cpu", "model": "tiny", "seed": "1", "tags": [HOSTILE], "expected_s": 1.0,
            "start_s": 0.0, "duration_s": 1.0, "timestamp": "2024-01-01T00:00:00", "dir": d,
            "repro": "echo '" + HOSTILE + "'", "failing_log": log, "mesh": "tp=2", "meshes": "tp=2", "phase_meshes": ["tp=2"],
            "earlier_attempts": [{"reason": HOSTILE, "details": HOSTILE, "failing_log": log, "duration_s": 1.0,
                                  "verdict": {"kind": "exit_code", "message": HOSTILE}}],
            "verdict": {"kind": "exit_code", "message": HOSTILE, "check": "exit", "rank": 0, "exit_code": 1},
            "phases": [], "checks": [{"kind": "log_contains", "passed": False, "judged": True, "message": HOSTILE,
                                      "details": HOSTILE}]}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    n, out = int(sys.argv[1]), os.path.abspath(sys.argv[2])
    rng = random.Random(1)
    cases = [make_case(i, out, rng) for i in range(n)]
    if "--hostile" in sys.argv[3:]:
        cases.append(hostile_case(out))
    counts = {}
    for c in cases:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    summary = {"format_version": 2, "matrices": ["test_matrix/cpu.yaml"], "retries": 0, "backend": "gloo",
               "devices": 0, "wall_s": 123.4, "interrupted_by_signal": 0,
               "all_met": all(c["met_expectation"] for c in cases), "hostname": "bench", "counts": counts,
               "cases": cases}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
