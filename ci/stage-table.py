#!/usr/bin/env python3
"""Prints .ci/run's closing report: each stage's seconds, how busy the CPUs were and the CPU time
of the stage's own processes (from ci/stage.sh's TSV; CPU-minutes compare across machines of one
kind, which differ by 2x in minutes), the ten slowest tests of the CTest runs (their --output-junit files), and a
last line with the tests' counts. Also writes the same as Markdown to build/ci-report.md, for docs/ci.md.

Usage: ci/stage-table.py STAGES.tsv [CTEST-JUNIT.xml...]   (missing files are skipped)
"""
import os
import sys
import xml.etree.ElementTree as ET


def stages(path):
    rows = []
    if os.path.exists(path):
        for line in open(path, encoding="utf-8"):
            name, seconds, rc, busy, cpu = (line.rstrip("\n").split("\t") + ["?", "nan"])[:5]
            rows.append((name, float(seconds), int(rc), busy, float(cpu)))
    return rows


def tests(paths):
    out = []
    for path in paths:
        if not os.path.exists(path):
            continue
        tree = os.path.basename(os.path.dirname(path))  # cpu or asan
        for case in ET.parse(path).getroot().iter("testcase"):
            status = case.get("status", "run")
            if case.find("failure") is not None or case.find("error") is not None:
                status = "failed"
            elif case.find("skipped") is not None or status in ("notrun", "disabled"):
                status = "skipped"
            else:
                status = "passed"
            out.append((tree, case.get("name"), float(case.get("time", 0)), status))
    return out


def main():
    rows, runs = stages(sys.argv[1]), tests(sys.argv[2:])
    md = ["| stage | seconds | minutes | exit | CPU busy % | CPU-minutes |", "|---|---:|---:|---:|---:|---:|"]
    for name, seconds, rc, busy, cpu in rows:
        md.append(f"| {name} | {seconds:.0f} | {seconds / 60:.1f} | {rc} | {busy} | {cpu / 60:.1f} |")
    total = sum(row[1] for row in rows)
    cpu_total = sum(row[4] for row in rows)
    md.append(f"| **total** | **{total:.0f}** | **{total / 60:.1f}** | | | **{cpu_total / 60:.1f}** |")
    md += ["", "| slowest tests | tree | seconds |", "|---|---|---:|"]
    for tree, name, seconds, _ in sorted(runs, key=lambda r: -r[2])[:10]:
        md.append(f"| `{name}` | {tree} | {seconds:.1f} |")
    report = "\n".join(md) + "\n"
    os.makedirs("build", exist_ok=True)
    with open("build/ci-report.md", "w", encoding="utf-8") as f:
        f.write(report)
    print("\n" + report)
    counts = {k: sum(1 for r in runs if r[3] == k) for k in ("passed", "failed", "skipped")}
    print(f"ctest: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")


if __name__ == "__main__":
    main()
