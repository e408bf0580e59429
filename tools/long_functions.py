#!/usr/bin/env python3
"""Functions and files longer than their limits in harness/, trainer/ and contract/ (docs/architecture.md).

A function is a definition line ending in `{` whose head has a parameter list, up to the `}`
at the same indentation; lambdas and classes are counted with the function around them.
Prints the longest ones and every one over the limit, then every source file over
--file-limit lines (a file that long holds more than one thing); exit status 1 when there is any.

  tools/long_functions.py [--limit N] [--file-limit N] [--top K] [source root]
"""
import argparse
import os
import re
import sys

TAIL = re.compile(r"\)[\w\s:&>-]*\{\s*(//.*)?$")  # ") const {", ") override {"
NOT_A_FUNCTION = re.compile(r"^\s*(\}\s*)?(if|for|while|switch|catch|else|do|return)\b|\[[^\]]*\]\s*\(|=\s*\[")
FOLDERS = ("contract", "harness", "trainer")
# Allowed to be longer, with why (none today: train() became setup, train_step and a loop that
# asks the components, issue 48).
EXCEPTIONS = {}


def functions_in(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        if not TAIL.search(lines[i]):
            i += 1
            continue
        # Walk back to the line that opens the parameter list (a head may wrap).
        start, depth = i, lines[i].count(")") - lines[i].count("(")
        while depth > 0 and start > 0:
            start -= 1
            depth += lines[start].count(")") - lines[start].count("(")
        if lines[start].lstrip().startswith(":") and start > 0:  # a constructor's initializer list
            start -= 1
            depth = lines[start].count(")") - lines[start].count("(")
            while depth > 0 and start > 0:
                start -= 1
                depth += lines[start].count(")") - lines[start].count("(")
        head = " ".join(l.strip() for l in lines[start:i + 1])
        continuation = start > 0 and lines[start - 1].rstrip().endswith((",", "("))  # an initializer list, a call
        if NOT_A_FUNCTION.search(head) or continuation or lines[start].startswith(" " * 8):
            i += 1
            continue
        indent = re.match(r"\s*", lines[start]).group(0)
        end = i + 1
        while end < len(lines) and not re.match(re.escape(indent) + r"\}", lines[end]):
            end += 1
        name = head.split("(")[0].split()[-1] if head.split("(")[0].split() else "?"
        yield name, start + 1, end - start + 1
        i = end + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--file-limit", type=int, default=700)
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = ap.parse_args()
    found, long_files = [], []
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(args.root, folder)):
            for n in sorted(names):
                if n.endswith((".cpp", ".h")):
                    path = os.path.join(dirpath, n)
                    rel = os.path.relpath(path, args.root)
                    lines = open(path, encoding="utf-8").read().count("\n")
                    if lines > args.file_limit:
                        long_files.append((lines, rel))
                    found += [(length, f"{rel}:{line}", name) for name, line, length in functions_in(path)]
    found.sort(reverse=True)
    print(f"longest functions (limit {args.limit} lines; " +
          ", ".join(f"{f}:{n} {limit}" for (f, n), limit in EXCEPTIONS.items()) + "):")
    for length, where, name in found[:args.top]:
        print(f"  {length:4}  {name}  {where}")
    over = [f for f in found if f[0] > EXCEPTIONS.get((f[1].rsplit(":", 1)[0], f[2]), args.limit)]
    for length, where, name in over:
        print(f"over the limit: {where}: {name} is {length} lines")
    for lines, rel in sorted(long_files, reverse=True):
        print(f"over the file limit: {rel} is {lines} lines (limit {args.file_limit}): cut it by what it does")
    return 1 if over or long_files else 0


if __name__ == "__main__":
    sys.exit(main())
