#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""unit.tools_package: the Python tools stay one package of short functions.

    check_tools_package.py REPO

  - every function (methods and nested ones included) in tools/ctools/*.py and
    tools/fixtures/*.py is at most MAX_LINES lines long, from its `def` to its
    last line (ast's lineno .. end_lineno);
  - each Python entry script in tools/ (a file whose first line names python3)
    is thin: at most ENTRY_LINES lines, importing a module of tools/ctools that
    exists (`from ctools import NAME`) and calling its main;
  - no two modules of tools/ctools define the same function (a top-level def
    whose statements, docstring aside, are the same): a helper is written
    once and imported;
  - no file under tools/ or tests/ loads a tool by its path
    (importlib.machinery.SourceFileLoader, or spec_from_file_location in the
    package): they import ctools instead.
Standard library only; exit 1 naming each offender.
"""
import ast
import glob
import os
import re
import sys

MAX_LINES = 80
ENTRY_LINES = 14


def function_lengths(path):
    """[(lines, name, first line)] of every def in the file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return [(n.end_lineno - n.lineno + 1, n.name, n.lineno) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def long_functions(root):
    bad = []
    for path in sorted(glob.glob(os.path.join(root, "tools", "ctools", "*.py")) +
                       glob.glob(os.path.join(root, "tools", "fixtures", "*.py"))):
        for n, name, line in function_lengths(path):
            if n > MAX_LINES:
                bad.append(f"{os.path.relpath(path, root)}:{line}: {name} is {n} lines (at most {MAX_LINES}): "
                           "split it into named steps")
    return bad


def body_key(fn):
    """The statements of a def without its docstring, as text (names and values included)."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


def copied_helpers(root):
    seen, bad = {}, []
    for path in sorted(glob.glob(os.path.join(root, "tools", "ctools", "*.py"))):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for n in tree.body:
            if isinstance(n, ast.FunctionDef):
                key = body_key(n)
                if key in seen and seen[key][0] != rel:
                    bad.append(f"{rel}:{n.lineno}: {n.name} repeats {seen[key][0]}:{seen[key][1]} "
                               f"({seen[key][2]}): write it once and import it")
                seen.setdefault(key, (rel, n.lineno, n.name))
    return bad


def fat_entries(root):
    bad, seen = [], 0
    for path in sorted(glob.glob(os.path.join(root, "tools", "*"))):
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        if not text.startswith("#!") or "python3" not in text.split("\n", 1)[0]:
            continue
        seen += 1
        rel = os.path.relpath(path, root)
        m = re.search(r"^from ctools import (\w+)\b", text, re.M)
        if text.count("\n") > ENTRY_LINES:
            bad.append(f"{rel}: {text.count(chr(10))} lines: an entry script imports its module from tools/ctools/ "
                       f"and calls its main, nothing else (at most {ENTRY_LINES} lines)")
        if not m:
            bad.append(f"{rel}: imports no ctools module (`from ctools import NAME`, then NAME.main)")
        elif not os.path.isfile(os.path.join(root, "tools", "ctools", m.group(1) + ".py")):
            bad.append(f"{rel}: imports ctools.{m.group(1)}, but tools/ctools/{m.group(1)}.py does not exist")
        elif f"{m.group(1)}.main(" not in text:
            bad.append(f"{rel}: does not call {m.group(1)}.main")
    if seen == 0:
        bad.append("tools/: no Python entry script found (tools/book, tools/bench, ...)")
    return bad


def path_loaders(root):
    bad = []
    files = glob.glob(os.path.join(root, "tools", "**", "*.py"), recursive=True) + \
        glob.glob(os.path.join(root, "tests", "**", "*.py"), recursive=True)
    for path in sorted(files):
        rel = os.path.relpath(path, root)
        if rel == os.path.join("tests", "extra", "check_tools_package.py"):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                if "SourceFileLoader" in line or \
                        (rel.startswith(os.path.join("tools", "ctools")) and "spec_from_file_location" in line):
                    bad.append(f"{rel}:{i}: loads a file by path; import it from the ctools package "
                               "(sys.path gets tools/, then `from ctools import NAME`)")
    return bad


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    bad = long_functions(root) + copied_helpers(root) + fat_entries(root) + path_loaders(root)
    for b in bad:
        print("FAIL " + b)
    if bad:
        return 1
    print(f"ok: tools/ctools and tools/fixtures have no function over {MAX_LINES} lines; "
          "no helper is written twice; "
          "the entry scripts are thin; nothing loads a tool by path")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
