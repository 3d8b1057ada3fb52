#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""book.termbase: the zh edition keeps one vocabulary (book/termbase.json).

    check_termbase.py [REPO_ROOT]

1. tools/termbase.py check on the repository: no avoided synonym in the zh prose of
   the chapters, book/chapters.json, the preface or the instructors' page.
2. The check can fail: in a copy of one chapter, a synonym of each core term is
   planted in a '::: zh' div (and in an '::: en' div and in code, where it is fine);
   the check must name the file, the planted line and the book's term, and only
   that line.
3. The termbase itself: one entry per id and per English term, no avoided word
   equal to or inside the term it replaces, every core term defined in both
   languages.
Standard library only; exit 0 when all is well, 1 with the problems listed.
"""
import os
import shutil
import subprocess
import sys
import tempfile


def load_termbase(root):
    sys.path.insert(0, os.path.join(root, "tools"))
    from ctools import termbase as mod
    return mod


PLANT = """
/*md
::: zh
这一段是测试种下的：{bad}。
:::
::: en
This paragraph was planted by the test: {bad}.
:::
*/
static const char *planted = "{bad}";
"""


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    tb = load_termbase(root)
    problems = []

    # 1. the repository
    r = subprocess.run([sys.executable, os.path.join(root, "tools", "termbase.py"), "check", root],
                       capture_output=True, text=True)
    if r.returncode != 0:
        problems.append("tools/termbase.py check fails on the repository:\n" + r.stdout + r.stderr)

    # 3. the termbase's own consistency
    terms = tb.load(root)
    ids, ens = set(), set()
    for t in terms:
        if t["id"] in ids or t["en"] in ens:
            problems.append(f"book/termbase.json: {t['id']} / {t['en']} appears twice")
        ids.add(t["id"])
        ens.add(t["en"])
        for a in t.get("avoid", []):
            if a in t["zh"] or a == t["zh"]:
                problems.append(f"book/termbase.json: {t['id']} avoids {a!r}, which its own term contains")
        if tb.findings(terms, t["zh"]):
            problems.append(f"book/termbase.json: the term {t['zh']!r} ({t['id']}) is itself an avoided word")
        if t.get("core") and not all((t.get("def") or {}).get(l) for l in ("zh", "en")):
            problems.append(f"book/termbase.json: core term {t['id']} lacks its zh or en definition")
    for need in ("kernel", "launch", "host", "device", "eager", "dispatcher", "op"):
        if need not in ids:
            problems.append(f"book/termbase.json: no entry for {need}")

    # 2. a planted synonym fails, with file, line and the term to write
    chapter = "chapters/ch01_device_query/ch01_device_query.c"
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "book"))
        os.makedirs(os.path.join(tmp, "tools"))
        os.makedirs(os.path.join(tmp, os.path.dirname(chapter)))
        shutil.copy(os.path.join(root, "book", "termbase.json"), os.path.join(tmp, "book"))
        shutil.copy(os.path.join(root, "tools", "termbase.py"), os.path.join(tmp, "tools"))
        shutil.copytree(os.path.join(root, "tools", "ctools"), os.path.join(tmp, "tools", "ctools"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        src = os.path.join(root, chapter)
        with open(src, encoding="utf-8") as f:
            base = f.read()
        base_lines = base.count("\n")
        core = [t for t in terms if t.get("core") and (t.get("avoid") or [])]
        for t in core + [t for t in terms if t["id"] == "side-stream"]:
            bad = t["avoid"][0]
            with open(os.path.join(tmp, chapter), "w", encoding="utf-8") as f:
                f.write(base + PLANT.format(bad=bad))
            r = subprocess.run([sys.executable, os.path.join(tmp, "tools", "termbase.py"), "check", tmp],
                               capture_output=True, text=True)
            want_line = base_lines + 4     # the planted '::: zh' line's text
            lines = [l for l in r.stdout.splitlines() if l.strip()]
            want = f"{chapter}:{want_line}: '{bad}'"
            if r.returncode != 1:
                problems.append(f"planted '{bad}' ({t['id']}): the check exited {r.returncode}, not 1")
            elif len(lines) != 1 or not lines[0].startswith(want) or f"'{t['zh']}'" not in lines[0]:
                problems.append(f"planted '{bad}' ({t['id']}) at {chapter}:{want_line}: expected one line "
                                f"starting {want!r} naming '{t['zh']}', got:\n" + r.stdout)
        # the same chapter unplanted passes in the copy (the failures above are the plant's)
        with open(os.path.join(tmp, chapter), "w", encoding="utf-8") as f:
            f.write(base)
        r = subprocess.run([sys.executable, os.path.join(tmp, "tools", "termbase.py"), "check", tmp],
                           capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"{chapter} alone fails the check in a copy:\n{r.stdout}")
    for p in problems:
        print(p)
    print(f"book.termbase: {len(terms)} terms; " + ("FAILED" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
