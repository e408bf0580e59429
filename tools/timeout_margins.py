#!/usr/bin/env python3
"""How close each CTest test came to its own time limit: a correct test killed by its TIMEOUT on a
machine twice as slow and twice as busy is a red run that no change caused (docs/ci.md#ci-under-load).

    python3 tools/timeout_margins.py BUILD_DIR [--margin 4]

Reads the tests' limits from `ctest --show-only=json-v1` in BUILD_DIR (the TIMEOUT property, or
CTest's default of 1500 s) and their durations from BUILD_DIR/ctest-junit.xml (ci/test.sh writes
it), and lists every test whose limit is less than MARGIN times its duration, worst first. Exit
status 1 when there is one. A test meant to hit a limit (a hang that a timeout must end) is not
such a test: its limit is the case's `timeout:`, not CTest's.
"""
import argparse
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

CTEST_DEFAULT_TIMEOUT_S = 1500.0


def limits(build_dir):
    shown = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build_dir, capture_output=True, text=True, check=True)
    out = {}
    for test in json.loads(shown.stdout).get("tests", []):
        timeout = CTEST_DEFAULT_TIMEOUT_S
        for prop in test.get("properties", []):
            if prop.get("name") == "TIMEOUT":
                timeout = float(prop["value"])
        out[test["name"]] = timeout
    return out


def durations(junit):
    return {case.get("name"): float(case.get("time", 0)) for case in ET.parse(junit).getroot().iter("testcase")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir")
    ap.add_argument("--margin", type=float, default=4.0)
    args = ap.parse_args()
    junit = os.path.join(args.build_dir, "ctest-junit.xml")
    if not os.path.exists(junit):
        sys.exit(f"timeout_margins: no {junit} (run ci/test.sh, or ctest --output-junit, first)")
    limit_of, took = limits(args.build_dir), durations(junit)
    rows = sorted(((limit_of[name] / seconds, name, seconds, limit_of[name]) for name, seconds in took.items()
                   if name in limit_of and seconds > 0), key=lambda r: r[0])
    tight = [r for r in rows if r[0] < args.margin]
    print(f"timeout_margins: {len(rows)} tests; the five closest to their limit:")
    for ratio, name, seconds, limit in rows[:5]:
        print(f"  {ratio:7.1f}x  {seconds:7.1f} s of {limit:6.0f}  {name}")
    for ratio, name, seconds, limit in tight:
        print(f"timeout_margins: {name} took {seconds:.1f} s of its {limit:.0f} s limit ({ratio:.1f}x, under {args.margin}x)")
    return 1 if tight else 0


if __name__ == "__main__":
    sys.exit(main())
