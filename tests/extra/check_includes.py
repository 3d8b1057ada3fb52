#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The runtime's include rules (README, "Folders by job"; common/README.md).

Each folder of common/ builds with its own include directories: include/,
itself, and the private folders its line `set(CT_SEES_<folder> ...)` in
common/CMakeLists.txt names. This check reads those lines and the sources:

1. A source of a folder includes another folder's private header only when
   its line names that folder.
2. core/ names no observer: no line lets core see graph/, prof/ or
   sanitizer/, and no core source includes one of their headers (they
   observe core through core/observe.h).
3. Every folder has its line.
4. The folders' includes form no circle (a folder that reaches itself).

Usage: check_includes.py SOURCE_DIR            the check (exit 1 on a problem)
       check_includes.py SOURCE_DIR --graph    also print the folders' graph
       check_includes.py SOURCE_DIR --selftest plants a core include of
           prof_impl.h and a data/ include of nn_impl.h (in memory) and
           passes only if both are reported: the check can fail.
"""
import pathlib
import re
import sys

OBSERVERS = ("graph", "prof", "sanitizer")
SUFFIXES = (".c", ".h", ".cu", ".cuh")


def read_sees(src):
    text = (src / "common/CMakeLists.txt").read_text()
    dirs = re.search(r"set\(CT_PRIVATE_DIRS ([^)]*)\)", text).group(1).split()
    sees = {m.group(1): m.group(2).split() for m in re.finditer(r"set\(CT_SEES_(\w+)\s*([^)]*)\)", text)}
    return dirs + ["app"], sees


def headers_by_name(src, folders):
    owner = {}
    for d in folders:
        for h in (src / "common" / d).glob("*"):
            if h.suffix in (".h", ".cuh"):
                owner.setdefault(h.name, []).append(d)
    return owner


def check(src, planted=()):
    folders, sees = read_sees(src)
    owner = headers_by_name(src, folders)
    problems, edges = [], {}
    for d in folders:
        if d not in sees:
            problems.append(f"common/{d}/ has no set(CT_SEES_{d} ...) line in common/CMakeLists.txt")
    for bad in OBSERVERS:
        if bad in sees.get("core", []):
            problems.append(f"common/CMakeLists.txt lets core see {bad}/: core names no observer "
                            "(core/observe.h); the observer attaches to core instead")
    files = [(f, f.read_text()) for d in folders for f in sorted((src / "common" / d).glob("*"))
             if f.suffix in SUFFIXES]
    files += [(src / rel, text) for rel, text in planted]
    for f, text in files:
        d = f.parent.name
        for n, line in enumerate(text.splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
            if not m:
                continue
            name = m.group(1).split("/")[-1]
            others = [o for o in owner.get(name, []) if o != d]
            if not others or d in owner.get(name, []):
                continue  # its own, a public one (include/) or not the runtime's
            for o in others:
                edges.setdefault(d, set()).add(o)
                where = f"{f.relative_to(src)}:{n}"
                if d == "core" and o in OBSERVERS:
                    problems.append(f"{where} includes {name} of {o}/: core names no observer; "
                                    "reach it through core/observe.h")
                elif o not in sees.get(d, []):
                    problems.append(f"{where} includes {name}, private to {o}/, which {d}/ may not "
                                    f"use (set(CT_SEES_{d} ...) in common/CMakeLists.txt)")
    problems += circles(edges)
    return problems, edges


def circles(edges):
    """One problem per folder that reaches itself through others' headers."""
    found = []
    for start in sorted(edges):
        stack, seen = [(start, [start])], set()
        while stack:
            d, path = stack.pop()
            for o in sorted(edges.get(d, ())):
                if o == start:
                    found.append("the folders' includes go round: " + " -> ".join(path + [o]))
                    stack = []
                    break
                if o not in seen:
                    seen.add(o)
                    stack.append((o, path + [o]))
    return found


def main():
    src = pathlib.Path(sys.argv[1])
    if "--selftest" in sys.argv[2:]:
        planted = [("common/core/ops.c", '#include "prof_impl.h"\n'),
                   ("common/data/data.c", '#include "nn_impl.h"\n')]
        problems, _ = check(src, planted)
        caught = [p for p in problems if p.startswith(("common/core/ops.c", "common/data/data.c"))]
        for p in caught:
            print("includes (planted):", p)
        ok = len(caught) == 2 and any("core names no observer" in p for p in caught)
        print("includes: selftest", "caught both planted includes" if ok else "MISSED a planted include")
        return 0 if ok else 1
    problems, edges = check(src)
    if "--graph" in sys.argv[2:]:
        for d in sorted(edges):
            print(f"includes: {d} -> {' '.join(sorted(edges[d]))}")
    for p in problems:
        print("includes:", p)
    print(f"includes: {len(problems)} problems")
    return 1 if problems else 0


sys.exit(main())
