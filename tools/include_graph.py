#!/usr/bin/env python3
"""The house's floors, checked from the #include lines (docs/architecture.md).

A room is a source file with its header (harness/core/matrix.{h,cpp}). Each folder is a floor;
a room may include rooms on its own floor or below, never above, and never a sibling wing on
the same floor. meshtest (harness/) and meshtrain (trainer/) share only contract/.

Every folder under contract/, harness/ and trainer/ is read, those not in FLOORS too: a folder
without a floor is a problem of its own, and its rooms still count for circles.

Prints the rooms per floor, then every folder without a floor, every circle (rooms that include
each other, directly or around a loop) and every include that breaks the floors. Exit status 1
when there is any.

  tools/include_graph.py [source root]     (default: the checkout this file is in)
"""
import os
import re
import sys
from collections import defaultdict

# folder -> (floor, program). Same floor, different folder: siblings that must not see each other.
FLOORS = {
    "contract": (0, "shared"),
    "harness/readers": (1, "meshtest"),
    "harness/core": (2, "meshtest"),
    "harness/history": (3, "meshtest"),
    "harness/judge": (4, "meshtest"),
    "harness/run": (5, "meshtest"),
    "harness/report": (5, "meshtest"),
    "harness/meshtrain": (5, "meshtest"),
    "harness/torchtitan": (5, "meshtest"),
    "harness/hf_trainer": (5, "meshtest"),
    "harness/megatron": (5, "meshtest"),
    "harness": (6, "meshtest"),
    "trainer/cuda": (0, "meshtrain"),
    "trainer/base": (1, "meshtrain"),
    "trainer/model": (2, "meshtrain"),
    "trainer/distributed": (3, "meshtrain"),
    "trainer/components": (4, "meshtrain"),
    "trainer": (5, "meshtrain"),
}
# The programs' source roots: every folder under them is checked.
ROOTS = ("contract", "harness", "trainer")
SOURCE = (".h", ".cpp", ".cu")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rooms_of(root):
    """{room: [files]}, a room being 'folder/stem', for every folder under ROOTS."""
    rooms = defaultdict(list)
    for top in ROOTS:
        for path, dirs, names in os.walk(os.path.join(root, top)):
            dirs.sort()
            folder = os.path.relpath(path, root)
            for name in sorted(names):
                if name.endswith(SOURCE):
                    rooms[f"{folder}/{os.path.splitext(name)[0]}"].append(os.path.join(path, name))
    return rooms


def resolve(root, including_file, target, known):
    """The room an include names: relative to the including file, then to each include root."""
    here = os.path.relpath(os.path.dirname(including_file), root)
    for base in (here, "harness", "trainer", "."):
        room = os.path.normpath(os.path.join(base, os.path.splitext(target)[0]))
        if room in known:
            return room
    return None  # a system, third-party or generated header


def edges_of(root, rooms):
    edges = defaultdict(set)  # room -> rooms it includes
    where = {}  # (from, to) -> "file:line"
    for room, files in rooms.items():
        for f in files:
            text = open(f, encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                to = resolve(root, f, m.group(1), rooms)
                if to and to != room:
                    edges[room].add(to)
                    line = text.count("\n", 0, m.start()) + 1
                    where.setdefault((room, to), f"{os.path.relpath(f, root)}:{line}")
    return edges, where


def circles(rooms, edges):
    """Strongly connected components of more than one room (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(rooms):
        if v not in index:
            visit(v)
    return found


def folder_of(room):
    return room.rsplit("/", 1)[0]


def broken_floor(a, b):
    """Why room a may not include room b, or None (a folder without a floor is reported apart)."""
    if folder_of(a) not in FLOORS or folder_of(b) not in FLOORS:
        return None
    (fa, pa), (fb, pb) = FLOORS[folder_of(a)], FLOORS[folder_of(b)]
    if pb != "shared" and pa != pb:
        return f"{pa} includes {pb}"
    if folder_of(a) == folder_of(b):
        return None
    if fb > fa:
        return f"floor {fa} includes floor {fb}"
    if fb == fa:
        return "sibling wings on one floor"
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    rooms = rooms_of(root)
    edges, where = edges_of(root, rooms)
    per_folder = defaultdict(list)
    for room, files in rooms.items():
        per_folder[folder_of(room)].append(sum(sum(1 for _ in open(f, encoding="utf-8")) for f in files))
    print("rooms per floor (floor, folder, rooms, lines):")
    for folder, (floor, program) in sorted(FLOORS.items(), key=lambda kv: (kv[1][1], kv[1][0], kv[0])):
        sizes = per_folder.get(folder, [])
        print(f"  {program:9} {floor}  {folder + '/':20} {len(sizes):3} rooms {sum(sizes):6} lines")
    bad = 0
    for folder in sorted({folder_of(room) for room in rooms} - set(FLOORS)):
        bad += 1
        print(f"no floor: {folder}/ (give it one in FLOORS, tools/include_graph.py, and in docs/architecture.md)")
    for component in circles(rooms, edges):
        bad += 1
        print("circle: " + " -> ".join(component + [component[0]]))
    for a in sorted(edges):
        for b in sorted(edges[a]):
            why = broken_floor(a, b)
            if why:
                bad += 1
                print(f"upward: {where[(a, b)]}: {a} includes {b} ({why})")
    arrows = sum(len(v) for v in edges.values())
    print(f"{len(rooms)} rooms, {arrows} arrows, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
