#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""book.figures: every figure source renders, and every figure is referenced in both editions.

    check_figures.py [REPO_ROOT]

- Every schematic figure source chapters/chNN_name/fig/NAME.dot is placed by a
  '/*md figure NAME: zh | en*/' marker in its chapter, and tools/weave's dot
  step draws it in both languages: an SVG (HTML) and a PDF (LaTeX) that is no
  wider than the PDF's text width, whose text is at least 8 pt at that size
  (so LaTeX never shrinks it), with the zh drawing in Chinese and the en
  drawing free of Chinese.
- Every figure of every chapter (schematic or drawn from a run) is referenced
  in the prose of both editions with '{{fig NAME}}', which weave turns into a
  link "图 N.k" / "Figure N.k" to the figure: the woven Markdown of each
  language holds the link and the figure with that id.
- The failures are clear: a source whose dot fails, a malformed [[zh|en]]
  label, and a machine without dot each stop weave with a FILE:LINE message.
Needs Graphviz (dot); exits 77 (skipped) without it. Standard library otherwise.
"""
import glob
import os
import re
import shutil
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_sources import load_weave  # noqa: E402

TEXT_WIDTH_PT = 595.28 - 2 * 2.2 / 2.54 * 72  # A4 with tools/book's 2.2 cm margins
MIN_TEXT_PT = 8
CJK = re.compile(r"[\u4e00-\u9fff\u3000-\u303f\uff00-\uffef]")

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def pdf_width_pt(path):
    with open(path, "rb") as f:
        m = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", f.read())
    return float(m.group(3)) - float(m.group(1)) if m else None


def pdf_text_sizes(path):
    """Text sizes in points: each text matrix's vertical axis times the Tf size after it."""
    with open(path, "rb") as f:
        data = f.read()
    sizes = []
    for m in re.finditer(rb"stream\r?\n(.*?)endstream", data, re.S):
        try:
            text = zlib.decompressobj().decompress(m.group(1)).decode("latin-1")
        except zlib.error:
            continue
        for t in re.finditer(r"[-\d.]+ [-\d.]+ (-?[\d.]+) (-?[\d.]+) [-\d.]+ [-\d.]+ Tm\s+/\S+ ([\d.]+) Tf", text):
            c, d = float(t.group(1)), float(t.group(2))
            sizes.append((c * c + d * d) ** 0.5 * float(t.group(3)))
    return sizes


def svg_text(path):
    with open(path, encoding="utf-8") as f:
        return " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", f.read()))


def check_sources(weave, root, tmp):
    dots = sorted(glob.glob(os.path.join(root, "chapters", "ch*_*", "fig", "*.dot")))
    check(len(dots) >= 10, f"{len(dots)} schematic figure sources (chapters/*/fig/*.dot), at least 10")
    for path in dots:
        rel = os.path.relpath(path, root)
        chdir = os.path.dirname(os.path.dirname(path))
        name = os.path.basename(path)[:-4]
        ch = weave.Chapter(os.path.join(chdir, os.path.basename(chdir) + ".c"))
        check(any(it["name"] == name for it in ch.figures()),
              f"{rel}: its chapter places it (/*md figure {name}: zh | en*/)")
        for lang in weave.LANGS:
            base = os.path.join(tmp, f"{ch.id}_{name}.{lang}")
            try:
                weave.render_dot(path, base, lang)
            except weave.WeaveError as e:
                check(False, f"{rel} ({lang}) renders: {e}")
                continue
            w = pdf_width_pt(base + ".pdf")
            check(w is not None and w <= TEXT_WIDTH_PT + 0.5,
                  f"{rel} ({lang}): the PDF is {w or 0:.0f} pt wide, within the text width {TEXT_WIDTH_PT:.0f} pt")
            sizes = pdf_text_sizes(base + ".pdf")
            check(sizes and min(sizes) >= MIN_TEXT_PT,
                  f"{rel} ({lang}): PDF text at least {MIN_TEXT_PT} pt (smallest "
                  f"{min(sizes) if sizes else 0:.1f} pt; shorten its widest line or stack it)")
            text = svg_text(base + ".svg")
            has_cjk = bool(CJK.search(text))
            check(has_cjk if lang == "zh" else not has_cjk,
                  f"{rel} ({lang}): the SVG's text is in {'Chinese' if lang == 'zh' else 'English only'}")


def check_references(weave, root, tmp):
    for src in sorted(glob.glob(os.path.join(root, "chapters", "ch*_*", "ch*_*.c"))):
        if os.path.basename(src) != os.path.basename(os.path.dirname(src)) + ".c":
            continue
        ch = weave.Chapter(src)
        if not ch.figures():
            continue
        wv = weave.Weaver(ch, None, [], os.path.join(tmp, "md-" + ch.id))
        wv.render_figures()
        for lang in weave.LANGS:
            md = wv.markdown(lang)
            for it in ch.figures():
                fid = f"fig:{ch.id}-{it['name']}"
                prose = [p for p in md.split("\n\n") if not p.lstrip().startswith(("![", "::: {.figure"))]
                check(any(f"](#{fid})" in p for p in prose),
                      f"{os.path.relpath(src, root)}: figure {it['name']} is referenced in the {lang} prose "
                      f"({{{{fig {it['name']}}}}})")
                check(f"{{#{fid}" in md or f"{weave.WORDS[lang]['figure']} {ch.number}." in md,
                      f"{os.path.relpath(src, root)}: figure {it['name']} is in the {lang} edition")


def check_errors(weave, tmp):
    chdir = os.path.join(tmp, "chapters", "ch99_demo")
    os.makedirs(os.path.join(chdir, "fig"))
    good = os.path.join(chdir, "fig", "ok.dot")
    with open(good, "w", encoding="utf-8") as f:
        f.write('digraph g {\n  a [label="[[甲|A]]"];\n  a -> b;\n}\n')
    for body, line, expect, what in [
            ('digraph g {\n  a [label="[[only one]]"];\n}\n', 2, "must read [[中文|English]]", "a label without both halves"),
            ('digraph g {\n\n  a [label="[[甲|A"];\n}\n', 3, "unclosed", "an unclosed label"),
            ('digraph g {\n  a -> ;\n}\n', 0, "dot failed", "a source dot cannot parse")]:
        bad = os.path.join(chdir, "fig", "bad.dot")
        with open(bad, "w", encoding="utf-8") as f:
            f.write(body)
        try:
            weave.render_dot(bad, os.path.join(tmp, "bad.en"), "en")
            check(False, f"{what} stops weave")
        except weave.WeaveError as e:
            check(expect in str(e) and str(e).startswith(f"{bad}:{line}:") if line else expect in str(e),
                  f"{what} stops weave with FILE:LINE and a message: {e}".split("\n")[0])
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = tmp  # no dot here
    try:
        weave.render_dot(good, os.path.join(tmp, "ok.en"), "en")
        check(False, "a machine without dot stops weave")
    except weave.WeaveError as e:
        check("graphviz" in str(e) and "tools/bootstrap" in str(e),
              f"a machine without dot stops weave and says what to install: {e}")
    finally:
        os.environ["PATH"] = path


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    if not shutil.which("dot"):
        print("skip: Graphviz dot not found (tools/bootstrap --group book installs graphviz)")
        return 77
    weave = load_weave(root)
    with tempfile.TemporaryDirectory() as tmp:
        check_sources(weave, root, tmp)
        check_references(weave, root, tmp)
        check_errors(weave, tmp)
    if failures:
        print(f"\n{len(failures)} check(s) failed")
        return 1
    print("\nall figure checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
