#!/usr/bin/env python3
"""Mutation testing of meshtest's judgment code: do its tests fail when the judge goes wrong?

    python3 tools/mutate.py [--build-dir build/cpu] [--sample 40] [--seed 1] [--json OUT.json]
                            [--replay EARLIER.json] [--test 'CMD'] [FILE ...]

Each mutant is one small edit to one line of the judge, its readers, the reports or the verdict
types (default FILEs: DEFAULT_FILES below), the kind of slip a reviewer misses: a
comparison loosened (`>` to `>=`), a condition negated or dropped (`!x` to `x`, `&&` to
`||`, `std::isfinite(x)` to `true || std::isfinite(x)`), an early `return false` turned
`true`, `continue` for `break`, an off-by-one (`+ 1` dropped), a sign (`-` to `+`), an
absolute value dropped. For each mutant the tool edits the file in place, rebuilds
`harness_unit_tests` in BUILD_DIR (one object and a link: build/mutate compiles each file alone
at -O0, where the unity batches of build/cpu recompile five files at -O2; it archives thin, lists
the tests only when CTest runs, and links with lld where installed), and runs it
(and each --test command). The mutant is

    killed      the build's tests failed (or timed out): the tests caught the mistake
    survived    every test passed: a mistake of this kind would land unnoticed
    stillborn   it did not compile (not counted in the kill rate)

The file is restored after each mutant, whatever happens (Ctrl-C included); a last build
puts the clean objects back. Sites are sampled with a seeded random.Random, so the same
arguments and sources give the same mutants. The kill rate and the survivors are printed
(the survivors as file:line, the line before and after); docs/reliability.md keeps the
latest figures. --replay runs only the survivors of an earlier --json again (found by their
line's text, wherever it moved): the check that new tests kill them. Run it on a clean tree: it refuses to edit a file with uncommitted changes.

The full list (--sample 0, 2,372 sites) takes hours on two cores, so --json is written after every
mutant, and --resume EARLIER.json skips the mutants it already judged (found by file, operator and
their line's text before and after, as --replay finds them) and keeps their results: a long run
can stop and go on in another session. The tests stop at their first failure (--gtest_fail_fast):
one failing test kills a mutant.
"""
import argparse
import collections
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every file whose code decides or carries a verdict: the judge, the readers it reads through, the
# reports (merge included) and the verdict and outcome types.
DEFAULT_FILES = ["harness/judge/*.cpp", "harness/readers/*.cpp", "harness/report/*.cpp", "harness/core/verdict.cpp",
                 "harness/core/outcome.cpp", "harness/core/check_kinds.cpp"]

# (name, pattern, replacement). Binary operators are matched with a space on both sides:
# the code is clang-formatted, so `a < b` is a comparison and `std::vector<int>` is not.
OPERATORS = [
    ("loosen <", r" < ", " <= "),
    ("tighten <=", r" <= ", " < "),
    ("loosen >", r" > ", " >= "),
    ("tighten >=", r" >= ", " > "),
    ("== to !=", r" == ", " != "),
    ("!= to ==", r" != ", " == "),
    ("&& to ||", r" && ", " || "),
    ("|| to &&", r" \|\| ", " && "),
    ("drop !", r"(?<=[(\s])!(?=[\w(])", ""),
    ("return false to true", r"\breturn false;", "return true;"),
    ("return true to false", r"\breturn true;", "return false;"),
    ("continue to break", r"\bcontinue;", "break;"),
    ("drop + 1", r" \+ 1\b", ""),
    ("drop - 1", r" - 1\b", ""),
    ("- to +", r" - (?=[\w(])", " + "),
    ("drop abs", r"\bstd::f?abs\(", "("),
    ("ignore isfinite", r"\bstd::isfinite\(", "true || std::isfinite("),
    ("ignore isnan", r"\bstd::isnan\(", "false && std::isnan("),
    ("empty() ignored", r"\.empty\(\)", ".empty() && false"),
]


def code_spans(line):
    """The parts of a line that are code: not a // comment, not inside a string or char literal."""
    spans, start, i, quote = [], 0, 0, None
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote, start = None, i + 1
        elif c in "\"'":
            spans.append((start, i))
            quote = c
        elif line.startswith("//", i):
            break
        i += 1
    if not quote:
        spans.append((start, i))
    return spans


def sites(path):
    """Every (line number, column, operator) where an operator applies to code."""
    out = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, start=1):
        stripped = line.lstrip()
        if stripped.startswith(("#", "//", "*", "/*")) or "static_assert" in line:
            continue
        spans = code_spans(line)
        for name, pattern, _ in OPERATORS:
            for m in re.finditer(pattern, line):
                if any(a <= m.start() and m.end() <= b for a, b in spans):
                    out.append((n, m.start(), name))
    return lines, out


def apply(lines, line_no, col, op_name):
    pattern, repl = next((p, r) for name, p, r in OPERATORS if name == op_name)
    line = lines[line_no - 1]
    m = re.compile(pattern).match(line, col)
    mutated = line[:m.start()] + repl + line[m.end():]
    return lines[:line_no - 1] + [mutated] + lines[line_no:], line, mutated


def run(cmd, timeout, cwd=ROOT):
    try:
        p = subprocess.run(cmd, shell=isinstance(cmd, str), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, text=True, errors="replace")
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        return "timeout", (e.stdout or "") if isinstance(e.stdout, str) else ""


def failing_tests(output):
    return sorted(set(re.findall(r"^\[  FAILED  \] (\S+\.\S+)", output, re.M)))


def replayed(path, candidates, originals):
    """The survivors of an earlier run, each at the site whose mutation gives the same line now."""
    out = []
    for r in json.load(open(path, encoding="utf-8"))["mutants"]:
        if r["status"] != "survived":
            continue
        lines = originals.get(r["file"], "").split("\n")
        found = [(f, n, col, op) for f, n, col, op in candidates if f == r["file"] and op == r["operator"]
                 and lines[n - 1].strip() == r["before"] and apply(lines, n, col, op)[2].strip() == r["after"]]
        if found:
            out.append(found[0])
        else:
            print(f"mutate: {r['file']}:{r['line']} ({r['operator']}) is no longer in the source", flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--build-dir", default="build/mutate",
                    help="a configured build; build/mutate (preset mutate: no unity batches, -O0) is configured when missing")
    ap.add_argument("--sample", type=int, default=40, help="mutants to try (0: every site)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--test", action="append", default=[], help="another command that must pass (run from the repo root)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds for one mutant's tests")
    ap.add_argument("--json", help="write every mutant's result here")
    ap.add_argument("--replay", help="run again the survivors of an earlier --json, found by their line's text")
    ap.add_argument("--resume", help="keep the results of an earlier --json and run only the mutants it lacks")
    args = ap.parse_args()

    os.chdir(ROOT)
    files = args.files or sorted(sum((glob.glob(pattern) for pattern in DEFAULT_FILES), []))
    build = os.path.abspath(args.build_dir)
    binary = os.path.join(build, "tests", "harness_unit_tests")
    if not os.path.exists(os.path.join(build, "build.ninja")) and not os.path.exists(os.path.join(build, "Makefile")):
        if os.path.normpath(args.build_dir) != os.path.normpath("build/mutate"):
            sys.exit(f"mutate: {args.build_dir} is not a configured build (cmake --preset cpu first)")
        # lld links harness_unit_tests in 0.6 s where GNU ld takes 3.4: a quarter of a mutant's time.
        lld = ["-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld"] if shutil.which("ld.lld") else []
        rc, out = run(["cmake", "--preset", "mutate", *lld], 600)
        if rc != 0:
            sys.exit(f"mutate: cmake --preset mutate failed:\n{out[-3000:]}")
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *files], capture_output=True, text=True).stdout.strip()
    if dirty:
        sys.exit(f"mutate: commit or stash these first, the tool edits them in place:\n{dirty}")

    candidates = []
    originals = {}
    for path in files:
        lines, found = sites(path)
        originals[path] = "\n".join(lines)
        candidates += [(path, n, col, op) for n, col, op in found]
    rng = random.Random(args.seed)
    chosen = candidates if args.sample <= 0 or args.sample >= len(candidates) else rng.sample(candidates, args.sample)
    if args.replay:
        chosen = replayed(args.replay, candidates, originals)
    chosen.sort()
    results = []
    if args.resume:
        results = json.load(open(args.resume, encoding="utf-8"))["mutants"]
        # A multiset: two identical lines of a file (two `return false;`) are two mutants.
        judged = collections.Counter((r["file"], r["operator"], r["before"], r["after"]) for r in results)

        def key(site):
            path, n, col, op = site
            lines = originals[path].split("\n")
            _, before, after = apply(lines, n, col, op)
            return (path, op, before.strip(), after.strip())

        left = []
        for c in chosen:
            if judged[key(c)] > 0:
                judged[key(c)] -= 1
            else:
                left.append(c)
        chosen = left
        print(f"mutate: {len(results)} mutants judged in {args.resume}, kept", flush=True)
    print(f"mutate: {len(chosen)} mutants of {len(candidates)} sites in {len(files)} files (seed {args.seed})", flush=True)

    build_cmd = ["cmake", "--build", build, "--target", "harness_unit_tests", "-j", str(os.cpu_count() or 2)]

    def restore_all():
        for path, text in originals.items():
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    continue
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    rc, out = run(build_cmd, 1800)
    if rc != 0:
        sys.exit(f"mutate: the clean tree does not build:\n{out[-3000:]}")
    rc, out = run([binary, "--gtest_brief=1"], args.timeout)
    if rc != 0:
        sys.exit(f"mutate: harness_unit_tests fails on the clean tree; fix that first:\n{out[-3000:]}")

    started = time.time()
    try:
        for i, (path, n, col, op) in enumerate(chosen, start=1):
            lines = originals[path].split("\n")
            mutated_lines, before, after = apply(lines, n, col, op)
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(mutated_lines))
            try:
                rc, out = run(build_cmd, 900)
                if rc != 0:
                    status, by = "stillborn", []
                else:
                    rc, out = run([binary, "--gtest_brief=1", "--gtest_fail_fast"], args.timeout)
                    by = failing_tests(out) if rc != 0 else []
                    if rc == 0:
                        for cmd in args.test:
                            rc, out = run(cmd, args.timeout)
                            if rc != 0:
                                by = [cmd]
                                break
                    status = "survived" if rc == 0 else "killed"
                    if rc == "timeout":
                        by = ["(timed out)"]
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(originals[path])
            results.append({"file": path, "line": n, "operator": op, "before": before.strip(), "after": after.strip(),
                            "status": status, "killed_by": by[:5]})
            if args.json:
                write_json(args.json, args.seed, len(candidates), results)
            note = f" by {', '.join(by[:2])}" if status == "killed" and by else ""
            print(f"[{i}/{len(chosen)}] {status:9} {path}:{n} {op}{note}", flush=True)
    except KeyboardInterrupt:
        print("mutate: interrupted; the sources are restored", file=sys.stderr)
    finally:
        restore_all()
        run(build_cmd, 1800)

    killed = sum(r["status"] == "killed" for r in results)
    survived = [r for r in results if r["status"] == "survived"]
    stillborn = sum(r["status"] == "stillborn" for r in results)
    judged = killed + len(survived)
    rate = f"{100.0 * killed / judged:.1f} %" if judged else "n/a"
    print(f"\nmutate: {killed} killed, {len(survived)} survived, {stillborn} stillborn; kill rate {rate} "
          f"({time.time() - started:.0f} s)")
    for r in survived:
        print(f"survived: {r['file']}:{r['line']} ({r['operator']})\n  - {r['before']}\n  + {r['after']}")
    if args.json:
        write_json(args.json, args.seed, len(candidates), results)
    return 0


def write_json(path, seed, sites, results):
    """Every mutant judged so far and the totals, replaced whole (a stop mid-write keeps the last)."""
    count = lambda status: sum(r["status"] == status for r in results)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"seed": seed, "sites": sites, "killed": count("killed"), "survived": count("survived"),
                   "stillborn": count("stillborn"), "mutants": results}, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
