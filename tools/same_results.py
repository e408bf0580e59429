#!/usr/bin/env python3
"""Whether two runs of one matrix gave the same results, byte for byte: for a refactor that must
change nothing (issue 48: "same bytes for checkpoints and reports").

Compares two `meshtest run --out` folders (e.g. build/cpu/main-job before and after a change):
  - every case's verdict in summary.json;
  - every metrics.jsonl's step, loss and grad_norm, exactly (timings are left out);
  - the contract files a rank writes, byte for byte (param_digest.json, state_dict_keys.json,
    generate.json);
  - every file of every checkpoint folder, byte for byte.
A run's own absolute folder, which generate.json and an HF export's metadata name, is read as
`{run}` in both, so two runs in different folders compare.
Exits 1 and names each difference, 0 when there is none.

Usage: tools/same_results.py RUN_A RUN_B
"""
import json
import os
import struct
import sys

CONTRACT_FILES = ("param_digest.json", "state_dict_keys.json", "generate.json")


def verdicts(run):
    with open(os.path.join(run, "summary.json")) as f:
        return {c["id"]: c.get("status") for c in json.load(f)["cases"]}


def curve(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [(r.get("step"), r.get("loss"), r.get("grad_norm")) for r in rows]


def contents(path, run):
    """The file's bytes, its run's absolute folder written `{run}`; a safetensors file's header
    (a JSON length-prefixed) as parsed JSON, so that the replacement keeps it comparable."""
    with open(path, "rb") as f:
        data = f.read()
    here = os.path.abspath(run).encode()
    if not path.endswith(".safetensors"):
        return data.replace(here, b"{run}")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].replace(here, b"{run}"))
    return header, data[8 + n :]


def files_under(run):
    out = []
    for folder, _, names in os.walk(run):
        out += [os.path.relpath(os.path.join(folder, n), run) for n in names]
    return sorted(out)


def compared(rel):
    parts = rel.split(os.sep)
    name = parts[-1]
    if name == "metrics.jsonl":
        return "curve"
    if name in CONTRACT_FILES:
        return "bytes"
    if any(p.startswith("step-") for p in parts[:-1]):
        return "bytes"
    return None


def main(a, b):
    problems = []
    va, vb = verdicts(a), verdicts(b)
    for case in sorted(set(va) | set(vb)):
        if va.get(case) != vb.get(case):
            problems.append(f"verdict of {case}: {va.get(case)} vs {vb.get(case)}")
    fa, fb = files_under(a), files_under(b)
    counts = {"curve": 0, "bytes": 0}
    for rel in sorted(set(fa) | set(fb)):
        kind = compared(rel)
        if kind is None:
            continue
        pa, pb = os.path.join(a, rel), os.path.join(b, rel)
        if not (os.path.exists(pa) and os.path.exists(pb)):
            problems.append(f"{rel}: only in {a if os.path.exists(pa) else b}")
            continue
        counts[kind] += 1
        if kind == "curve":
            ca, cb = curve(pa), curve(pb)
            if ca != cb:
                first = next((x, y) for x, y in zip(ca + [None] * len(cb), cb + [None] * len(ca)) if x != y)
                problems.append(f"{rel}: step, loss, grad_norm {first[0]} vs {first[1]}")
        elif contents(pa, a) != contents(pb, b):
            problems.append(f"{rel}: bytes differ")
    for p in problems:
        print("same_results: " + p)
    print(f"same_results: {len(va)} verdicts, {counts['curve']} loss curves, {counts['bytes']} contract and "
          f"checkpoint files: {len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
