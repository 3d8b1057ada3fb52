#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks of a built book (the output of tools/book --out OUT).

    check_book.py build  REPO OUT [BUILD_DIR]  runs tools/book --quick --strict --no-bootstrap --no-build
                                               --build-dir BUILD_DIR --out OUT, then checks that both
                                               editions were built with every chapter
    check_book.py html     REPO OUT            every chapter in both editions; no broken internal link;
                                               no Pandoc fence text (:::); every chapter's .cu
                                               file shown in its chapter; every function an
                                               exercise names (other than the public API) shown
                                               in the chapter's code; figure numbers unique
                                               per chapter; recordings.json and the CPU-only notes
                                               agree with book/recorded/
    check_book.py pdf      REPO OUT            pdftotext: Chinese and English text, every chapter title,
                                               numbered pages, no glyph missing from the fonts,
                                               figure text (ticks, labels, legends) >= 8 pt
    check_book.py chromium REPO OUT            headless Chromium opens every chapter page of each
                                               edition: no console message; screenshots in OUT/screenshots/

A check that needs a tool that is missing (pandoc, xelatex, gnuplot,
pdftotext, chromium) or a book that was not built exits 77 (skipped) and
says why. Standard library only.
"""
import glob
import html
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# this folder: the book checks' one set of check/skip/failures and shared helpers
from check_reader import check, chromium_binary, failures, load_module, need_book, skip  # noqa: E402


def chapters(root):
    """[(slug, {lang: title})] of every chapter in the sources."""
    weave = load_module(root, "weave")
    out = []
    for src in sorted(glob.glob(os.path.join(root, "chapters", "ch*_*", "ch*_*.c"))):
        slug = os.path.basename(os.path.dirname(src))
        if os.path.basename(src) != slug + ".c":
            continue
        out.append((slug, weave.Chapter(src).titles))
    out.sort(key=lambda c: int(c[0][2:].split("_")[0]))
    return out


# ---------------------------------------------------------------------------

def cmd_build(root, out, build_dir):
    missing = [t for t in ("pandoc", "xelatex", "gnuplot") if not shutil.which(t)]
    if missing:
        skip(f"missing {', '.join(missing)} (tools/bootstrap --group book installs them)")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(root, "tools", "book"), "--quick", "--strict", "--no-bootstrap", "--no-build",
           "--build-dir", build_dir, "--out", out]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd)
    check(r.returncode == 0, f"tools/book exits 0 (got {r.returncode})")
    if r.returncode != 0:
        return
    for lang in ("zh", "en"):
        check(os.path.exists(os.path.join(out, lang, "index.html")), f"{lang}/index.html")
        pdf = os.path.join(out, f"workbook-{lang}.pdf")
        check(os.path.exists(pdf) and os.path.getsize(pdf) > 10000, f"workbook-{lang}.pdf")
    with open(os.path.join(out, "book.json"), encoding="utf-8") as f:
        book = json.load(f)
    built = [c["slug"] for c in book["chapters"]]
    want = [slug for slug, _ in chapters(root)]
    check(built == want, f"every chapter woven, in order: {built}")


class Page(html.parser.HTMLParser):
    """The ids, links, headings and text of one HTML page; prose: the text outside <pre>
    (program output and code may hold the other language's text, chapter 14's Chinese corpus)."""

    def __init__(self):
        super().__init__()
        self.ids, self.links, self.h1, self.text, self.prose = set(), [], [], [], []
        self._in_h1 = False
        self._pre = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        for key in ("href", "src"):
            if a.get(key) is not None and tag in ("a", "link", "img", "script", "source", "iframe"):
                self.links.append((tag, a[key]))
        if tag == "h1":
            self._in_h1 = True
            self.h1.append("")
        self._pre += tag == "pre"

    def handle_endtag(self, tag):
        if tag == "h1":
            self._in_h1 = False
        if tag == "pre" and self._pre:
            self._pre -= 1

    def handle_data(self, data):
        self.text.append(data)
        if not self._pre:
            self.prose.append(data)
        if self._in_h1:
            self.h1[-1] += data


def norm_title(s):
    """A title as Markdown writes it and as HTML shows it, compared loosely."""
    s = re.sub(r"[`*_\\]", "", s)
    s = s.translate(str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'}))
    return re.sub(r"\s+", " ", s).strip()


def parse(path):
    p = Page()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    return p


def cmd_html(root, out):
    need_book(out)
    pages = {}
    for path in sorted(glob.glob(os.path.join(out, "*.html")) + glob.glob(os.path.join(out, "*", "*.html"))):
        pages[os.path.abspath(path)] = parse(path)
    check(len(pages) > 0, f"{len(pages)} HTML pages")
    for slug, titles in chapters(root):
        for lang in ("zh", "en"):
            path = os.path.abspath(os.path.join(out, lang, slug + ".html"))
            p = pages.get(path)
            check(p is not None, f"{lang}/{slug}.html exists")
            if not p:
                continue
            want = norm_title(titles[lang])
            check(any(norm_title(h) == want for h in p.h1), f"{lang}/{slug}.html has the title {titles[lang]!r}")
            other = "en" if lang == "zh" else "zh"
            check(("a", f"../{other}/{slug}.html") in p.links, f"{lang}/{slug}.html links to the same chapter in {other}")
            text = "".join(p.prose)
            cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
            if lang == "zh":
                check(cjk > 200, f"zh/{slug}.html is Chinese ({cjk} CJK characters)")
            else:
                check(cjk < 40, f"en/{slug}.html has no Chinese prose ({cjk} CJK characters)")
            index = pages.get(os.path.abspath(os.path.join(out, lang, "index.html")))
            check(index is not None and ("a", f"{slug}.html") in index.links, f"{lang}/index.html lists {slug}")
    broken = 0
    checked = 0
    for path, p in pages.items():
        for tag, link in p.links:
            u = urllib.parse.urlsplit(link)
            if u.scheme or u.netloc or link.startswith("//"):
                continue  # external
            checked += 1
            target = os.path.abspath(os.path.join(os.path.dirname(path), urllib.parse.unquote(u.path))) \
                if u.path else path
            where = f"{os.path.relpath(path, out)}: <{tag}> {link}"
            if not os.path.exists(target):
                broken += 1
                check(False, f"{where}: no file {os.path.relpath(target, out)}")
                continue
            if u.fragment and target.endswith(".html"):
                tp = pages.get(target) or parse(target)
                frag = urllib.parse.unquote(u.fragment)
                if frag not in tp.ids:
                    broken += 1
                    check(False, f"{where}: no id {frag!r} in {os.path.relpath(target, out)}")
    check(broken == 0, f"{checked} internal links and images, {broken} broken")
    check_no_fence_html(out, pages)
    check_cu_shown(root, out, pages)
    check_exercise_code(root, out)
    check_figure_numbers(root, out)
    check_recordings(root, out)


def cmd_pdf(root, out):
    need_book(out)
    if not shutil.which("pdftotext"):
        skip("no pdftotext (poppler-utils)")
    chs = chapters(root)
    for lang in ("zh", "en"):
        pdf = os.path.join(out, f"workbook-{lang}.pdf")
        check(os.path.exists(pdf), f"workbook-{lang}.pdf exists")
        if not os.path.exists(pdf):
            continue
        r = subprocess.run(["pdftotext", "-enc", "UTF-8", pdf, "-"], capture_output=True, text=True)
        check(r.returncode == 0, f"pdftotext workbook-{lang}.pdf")
        text = r.stdout
        cjk = len(re.findall(r"[\u4e00-\u9fff]", text))
        words = len(re.findall(r"\b[A-Za-z]{3,}\b", text))
        if lang == "zh":
            check(cjk > 1000, f"workbook-zh.pdf has Chinese text ({cjk} CJK characters)")
            check(words > 200, f"workbook-zh.pdf has English text too: code, outputs ({words} words)")
        else:
            check(words > 2000, f"workbook-en.pdf has English text ({words} words)")
        check_no_fence_pdf(lang, text)
        flat = re.sub(r"\s+", "", text)
        for slug, titles in chs:
            t = re.sub(r"\s+", "", titles[lang])
            check(t in flat, f"workbook-{lang}.pdf has the chapter title {titles[lang]!r}")
        logp = os.path.join(out, "pdf", f"pandoc-{lang}.log")
        if os.path.exists(logp):
            with open(logp, encoding="utf-8", errors="replace") as f:
                missing = sorted(set(re.findall(r"Missing character: There is no (\S+ \(U\+[0-9A-F]+\))", f.read())))
            check(not missing, f"workbook-{lang}.pdf: every character has a glyph" +
                  (f"; missing: {', '.join(missing)} (add a fallback to book/pdf-header.tex)" if missing else ""))
        check_figure_text(out, lang)
        r = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True)
        m = re.search(r"^Pages:\s+(\d+)", r.stdout, re.M)
        pages = int(m.group(1)) if m else 0
        check(pages >= 2 * len(chs), f"workbook-{lang}.pdf has {pages} pages")
        # page numbers: the last page's number appears at its foot
        r = subprocess.run(["pdftotext", "-f", str(pages), "-l", str(pages), "-layout", pdf, "-"],
                           capture_output=True, text=True)
        check(re.search(r"\b\d+\s*$", r.stdout.strip()) is not None, f"workbook-{lang}.pdf pages are numbered")


FIGURE_TEXT_MIN_PT = 8  # the smallest text a figure may have, in points, at its own size


def pdf_text_sizes(pdf):
    """The sizes, in points, at which a PDF's page streams draw text: the length of each text
    matrix's vertical axis times the Tf size after it (gnuplot's pdfcairo writes 'a 0 0 -d x y Tm
    /font s Tf'). Streams are read with zlib (FlateDecode)."""
    import zlib
    with open(pdf, "rb") as f:
        data = f.read()
    sizes = []
    for m in re.finditer(rb"stream\r?\n(.*?)endstream", data, re.S):
        try:  # a decompressor object stops at the stream's end, before the line break after it
            text = zlib.decompressobj().decompress(m.group(1)).decode("latin-1")
        except zlib.error:
            continue
        for t in re.finditer(r"[-\d.]+ [-\d.]+ (-?[\d.]+) (-?[\d.]+) [-\d.]+ [-\d.]+ Tm\s+/\S+ ([\d.]+) Tf", text):
            c, d = float(t.group(1)), float(t.group(2))  # the text's vertical axis, rotated or not
            sizes.append((c * c + d * d) ** 0.5 * float(t.group(3)))
    return sizes


def check_figure_text(out, lang):
    """The figures gnuplot drew for the PDF (OUT/md/figures/*.LANG.pdf, 15 cm wide and set at
    about that width) have text readable at 100 %: every tick label, axis label and legend at
    least FIGURE_TEXT_MIN_PT points."""
    figs = sorted(glob.glob(os.path.join(out, "md", "figures", f"*.{lang}.pdf")))
    small, unread = [], []
    for fig in figs:
        sizes = pdf_text_sizes(fig)
        if not sizes:
            unread.append(os.path.basename(fig))
        elif min(sizes) < FIGURE_TEXT_MIN_PT:
            small.append(f"{os.path.basename(fig)} ({min(sizes):.1f} pt)")
    check(figs and not small and not unread,
          f"workbook-{lang}.pdf: the text of its {len(figs)} gnuplot figures is at least {FIGURE_TEXT_MIN_PT} pt" +
          (f"; smaller in {', '.join(small)}" if small else "") +
          (f"; no text found in {', '.join(unread)}" if unread else ""))

# ---------------------------------------------------------------------------
# Rendering leaks: a Pandoc fence (::: / ::::) that reaches the reader means a
# div's attributes did not parse (a class written without its dot, an
# unbalanced fence). Its text must never show in a page or a PDF.

def fence_leaks(text):
    """The lines of text that show a Pandoc fence (':::')."""
    return [t.strip() for t in text.split("\n") if ":::" in t]


def check_no_fence_html(out, pages):
    for path, p in sorted(pages.items()):
        leaks = fence_leaks("".join(p.text))
        check(not leaks, f"{os.path.relpath(path, out)}: no Pandoc fence text ':::'" +
              "".join("\n     " + t[:100] for t in leaks[:5]))


def check_cu_shown(root, out, pages):
    """Every .cu file of a chapter's folder is shown in its chapter, both editions: the page
    names the file and holds every line of it that declares a __global__ kernel."""
    for slug, _ in chapters(root):
        for cu in sorted(glob.glob(os.path.join(root, "chapters", slug, "*.cu"))):
            name = os.path.relpath(cu, root)
            with open(cu, encoding="utf-8") as f:
                kernels = [re.sub(r"\s+", " ", t.strip()) for t in f
                           if re.match(r"^\s*(static\s+)?__global__\b", t)]
            for lang in ("zh", "en"):
                p = pages.get(os.path.abspath(os.path.join(out, lang, slug + ".html")))
                if p is None:
                    continue  # reported above
                text = re.sub(r"\s+", " ", "".join(p.text))
                missing = [k for k in kernels if k not in text]
                check(name in text and kernels and not missing,
                      f"{lang}/{slug}.html shows {name} ({len(kernels)} kernels" +
                      (f"; missing: {missing}" if missing else "") + ")")


# A function definition in C or CUDA: the name, then its parameters, at the start of a line
# (return type before it), not a declaration ending in ';'.
RE_DEFINITION = re.compile(r"^(?:static\s+|__global__\s+|__device__\s+|inline\s+)*[A-Za-z_][\w\s\*]*?\b"
                           r"([A-Za-z_]\w*)\s*\([^;{]*\)?\s*\{?\s*$", re.M)


def defined_functions(root, slug):
    """{name: file} of the functions defined in the chapter's folder and in common/."""
    found = {}
    files = glob.glob(os.path.join(root, "chapters", slug, "*.c")) + \
        glob.glob(os.path.join(root, "chapters", slug, "*.cu")) + \
        glob.glob(os.path.join(root, "common", "**", "*.c"), recursive=True) + \
        glob.glob(os.path.join(root, "common", "**", "*.cu"), recursive=True)
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for m in RE_DEFINITION.finditer(f.read()):
                found.setdefault(m.group(1), os.path.relpath(path, root))
    return found


def public_api(root):
    """The names the public headers (common/include/*.h) declare: the runtime's API, which an
    exercise may ask the reader to call without the book showing its body."""
    names = set()
    for h in glob.glob(os.path.join(root, "common", "include", "*.h")):
        with open(h, encoding="utf-8", errors="replace") as f:
            names.update(re.findall(r"\b(ct_\w+)\s*\(", f.read()))
    return names


def check_exercise_code(root, out):
    """An exercise that names a function of the C or CUDA sources other than the public API
    (a kernel to write, a chapter's function or the runtime's internals to change or read)
    names one the chapter's page shows in its code, both editions: no exercise asks for
    code the reader never saw."""
    api = public_api(root)
    for slug, _ in chapters(root):
        functions = {n: f for n, f in defined_functions(root, slug).items() if n not in api}
        for lang in ("zh", "en"):
            path = os.path.join(out, lang, slug + ".html")
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as f:
                page = f.read()
            code = " ".join(html.unescape(re.sub(r"<[^>]+>", "", c))
                            for c in re.findall(r"<pre[^>]*>(.*?)</pre>", page, re.S))
            start = page.find("<h2>练习</h2>" if lang == "zh" else "<h2>Exercises</h2>")
            end = page.find("</ol>", start)
            names = set(re.findall(r"<code>([A-Za-z_]\w*)</code>", page[start:end])) if start >= 0 else set()
            asked = sorted(n for n in names if n in functions)
            unseen = [f"{n} ({functions[n]})" for n in asked if not re.search(rf"\b{n}\b", code)]
            check(start >= 0 and not unseen,
                  f"{lang}/{slug}.html: the exercises' functions {asked} are shown in the chapter's code" +
                  (f"; never shown: {', '.join(unseen)} (weave it in with /*md source FILE REGION*/)"
                   if unseen else "") + ("" if start >= 0 else "; no exercises heading found"))


def check_figure_numbers(root, out):
    """Within a chapter every figure has its own number (图 N.k / Figure N.k.)."""
    for slug, _ in chapters(root):
        number = int(slug[2:].split("_")[0])
        for lang in ("zh", "en"):
            path = os.path.join(out, lang, slug + ".html")
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8") as f:
                caps = re.findall(r"<figcaption[^>]*>(.*?)</figcaption>", f.read(), re.S)
            nums = [m.group(1) for c in caps for m in [re.match(r"\s*(?:图|Figure)\s*(\d+\.\d+)", c)] if m]
            dup = sorted({n for n in nums if nums.count(n) > 1})
            wrong = [n for n in nums if not n.startswith(f"{number}.")]
            check(len(nums) == len(caps) and not dup and not wrong,
                  f"{lang}/{slug}.html: {len(caps)} figures, numbers {nums} unique and of chapter {number}" +
                  (f"; repeated: {dup}" if dup else "") + (f"; numbered {len(nums)} of {len(caps)}"
                                                             if len(nums) != len(caps) else ""))


def check_recordings(root, out):
    """OUT/recordings.json has every chapter, and says 'gpu' exactly when book/recorded/
    holds a transcript of it whose header names a GPU (not 'CPU...', driver not 'none');
    a chapter whose outputs are all CPU ones opens with the CPU-only note."""
    path = os.path.join(out, "recordings.json")
    check(os.path.exists(path), "recordings.json written")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        recs = json.load(f)
    for slug, _ in chapters(root):
        cid = slug.split("_")[0]
        gpu = False
        for t in glob.glob(os.path.join(root, "book", "recorded", f"{cid}-*.txt")):
            with open(t, encoding="utf-8", errors="replace") as f:
                head = dict(re.findall(r"^#\s*(\w+):\s*(.*?)\s*$", f.read(2000), re.M))
            gpu = gpu or not (head.get("device", "").lower().startswith("cpu") or
                              head.get("driver", "").lower().startswith("none"))
        entry = recs.get(cid)
        check(entry is not None and entry.get("gpu") is gpu,
              f"recordings.json: {cid} gpu={entry.get('gpu') if entry else None}, book/recorded says {gpu}")
        if entry is None:
            continue
        live_cpu = not (entry.get("live_device") or "").startswith("cuda")
        for lang in ("zh", "en"):
            page = os.path.join(out, lang, slug + ".html")
            if os.path.exists(page):
                with open(page, encoding="utf-8") as f:
                    has = "cpu-only" in f.read()
                check(has == (live_cpu and not gpu), f"{lang}/{slug}.html: CPU-only note {'shown' if has else 'absent'}")


def check_no_fence_pdf(lang, text):
    leaks = fence_leaks(text)
    check(not leaks, f"workbook-{lang}.pdf: no Pandoc fence text ':::'" +
          "".join("\n     " + t[:100] for t in leaks[:5]))


def cmd_chromium(root, out):
    need_book(out)
    chrome = chromium_binary()
    if not chrome:
        skip("no chromium (Debian: chromium)")
    shots = os.path.join(out, "screenshots")
    os.makedirs(shots, exist_ok=True)
    for slug, _ in chapters(root):
        for lang in ("zh", "en"):
            page = os.path.join(out, lang, slug + ".html")
            png = os.path.join(shots, f"{slug}.{lang}.png")
            profile = tempfile.mkdtemp(prefix="book-chromium.")
            try:
                cmd = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                       "--disable-component-update", "--disable-sync", "--no-first-run",
                       "--disable-default-apps", "--disable-extensions", f"--user-data-dir={profile}",
                       "--enable-logging=stderr", "--v=0", "--window-size=1280,1600",
                       f"--screenshot={png}", "file://" + os.path.abspath(page)]
                if os.path.exists(png):
                    os.unlink(png)
                try:
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                except subprocess.TimeoutExpired:
                    check(False, f"chromium opens {lang}/{slug}.html within 120 s")
                    continue
            finally:
                shutil.rmtree(profile, ignore_errors=True)
            console = [t for t in r.stderr.split("\n") if ":CONSOLE" in t or "Uncaught" in t]
            check(r.returncode == 0, f"chromium opens {lang}/{slug}.html (exit {r.returncode})")
            check(not console, f"{lang}/{slug}.html: no console messages" +
                  ("".join("\n     " + t for t in console)))
            check(os.path.exists(png) and os.path.getsize(png) > 20000,
                  f"screenshot {os.path.relpath(png, out)} ({os.path.getsize(png) if os.path.exists(png) else 0} bytes)")


def main(argv):
    if len(argv) < 4 or argv[1] not in ("build", "html", "pdf", "chromium"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, root, out = argv[1], os.path.abspath(argv[2]), os.path.abspath(argv[3])
    if mode == "build":
        cmd_build(root, out, os.path.abspath(argv[4]) if len(argv) > 4 else os.path.join(root, "build"))
    else:
        {"html": cmd_html, "pdf": cmd_pdf, "chromium": cmd_chromium}[mode](root, out)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
