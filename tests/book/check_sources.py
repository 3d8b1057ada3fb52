#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""book.sources: the chapters' literate sources are complete in both languages.

    check_sources.py [REPO_ROOT]

For every chapters/chNN_name/chNN_name.c (and the chapter's .cu files, which
may carry prose too):
  - tools/weave parses it: every prose block has its '::: zh' and its '::: en'
    div (as many of one as of the other), divs and code fences close inside
    the block, hide/show pair up, directives are well formed, every
    '/*md twin NAME*/' has its region in the twin, every figure has a caption
    in both languages and a readable spec;
  - the chapter has a title ('# ...') in both languages;
  - the last prose block is the exercises (练习 / Exercises) with at least
    three numbered or bulleted items in each language;
  - the counts the repository's hook checks: #'::: zh' == #'::: en' >= #'/*md'.
book/preface.*.md and book/instructors.*.md come in pairs (zh and en).
Python's standard library only; needs no pandoc. Exit 0 when all is well,
1 with every problem listed otherwise.
"""
import glob
import os
import re
import sys


def load_weave(root):
    """tools/ctools/weave.py of the repository at root (the book checks share this)."""
    sys.path.insert(0, os.path.join(root, "tools"))
    from ctools import weave
    return weave


EXERCISES = {"zh": re.compile(r"^#{1,6}\s+练习"), "en": re.compile(r"^#{1,6}\s+Exercises\b", re.I)}
ITEM = re.compile(r"^\s{0,3}(\d+[.)]|[-*+])\s+\S")


def check_exercises(weave, ch):
    """The last prose block: an exercises heading and >= 3 items per language."""
    problems = []
    prose = [it for it in ch.items if it["kind"] == "prose"]
    if not prose:
        return [f"{ch.source}: no prose blocks"]
    last = prose[-1]
    for lang in weave.LANGS:
        lines = [t for seg_lang, seg in last["segments"] if seg_lang in (None, lang) for t in seg]
        if not any(EXERCISES[lang].match(t) for t in lines):
            problems.append(f"{ch.source}:{last['line']}: the last prose block should be the exercises: "
                            f"no '{'练习' if lang == 'zh' else 'Exercises'}' heading in its '::: {lang}' div")
            continue
        items = sum(1 for t in lines if ITEM.match(t))
        if items < 3:
            problems.append(f"{ch.source}:{last['line']}: {items} exercises in '::: {lang}' (at least 3)")
    return problems


def hook_counts(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    zh = len(re.findall(r"^::: *zh", text, re.M))
    en = len(re.findall(r"^::: *en", text, re.M))
    md = len(re.findall(r"^/\*md *$", text, re.M))
    if zh != en or (md > 0 and zh < md):
        return [f"{path}: {md} prose blocks, {zh} '::: zh' divs, {en} '::: en' divs: every prose block "
                "needs both languages"]
    return []


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    weave = load_weave(root)
    problems = []
    sources = [s for s in sorted(glob.glob(os.path.join(root, "chapters", "ch*_*", "ch*_*.c")))
               if os.path.basename(s) == os.path.basename(os.path.dirname(s)) + ".c"]
    if not sources:
        problems.append(f"no chapters under {root}/chapters")
    for src in sources:
        try:
            ch = weave.check(src)
        except weave.WeaveError as e:
            problems.append(str(e))
            continue
        problems += check_exercises(weave, ch)
        problems += hook_counts(src)
        for cu in sorted(glob.glob(os.path.join(os.path.dirname(src), "*.cu"))):
            problems += hook_counts(cu)
        print(f"ok {os.path.relpath(src, root)}: {ch.titles['zh']} / {ch.titles['en']}")
    for name in ("preface", "instructors"):
        have = [lang for lang in weave.LANGS if os.path.exists(os.path.join(root, "book", f"{name}.{lang}.md"))]
        if have and len(have) != len(weave.LANGS):
            problems.append(f"book/{name}.{have[0]}.md has no translation book/{name}."
                            f"{'en' if have[0] == 'zh' else 'zh'}.md")
    for p in problems:
        print(f"FAIL {p}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) in the sources", file=sys.stderr)
        return 1
    print(f"{len(sources)} chapter source(s): every prose block in both languages")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
