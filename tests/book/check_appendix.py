#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks of the book's performance appendix (tools/ctools/book_appendix.py), label book.

    check_appendix.py text   REPO       (no build) every row id tools/bench can report, on the CPU
                                        and on a GPU (tools/bench --list-rows), has its title and
                                        paragraph in book/performance.json in both languages (Chinese
                                        text in zh, none in en), and nothing there is stale; a row
                                        without an id or a paragraph is named with the fix; the page
                                        made from a CPU-only recorded/ lists every GPU row as "not yet
                                        measured on a GPU" in both languages, and from a partial GPU
                                        recording lists the GPU rows it lacks
    check_appendix.py html   REPO OUT   the built book: performance.html in both editions, made from
                                        the latest full bench JSON of each device in book/recorded/;
                                        every number in its tables (C, reference, ratio, fraction of
                                        the ceiling) equals the recording's, row by row; each row links
                                        its paragraph; the figure of each recording exists and the page
                                        shows it; without a GPU recording every GPU row is there, "not
                                        yet measured on a GPU"; the landing page, each edition's
                                        contents, the navigation bar and the last chapter's "next" link
                                        to it
    check_appendix.py pdf    REPO OUT   the PDFs hold the appendix: its title, the recordings' ratios,
                                        the "not yet measured" rows
    check_appendix.py search REPO OUT   each edition's own search page (headless Chromium) finds the
                                        appendix by a heading of it

The book's other checks cover this page too: book.html (links resolve, no ':::'), book.pdf (figure
text at least 8 pt), book.overflow (390 px). A check whose tool or book is missing exits 77.
Standard library only.
"""
import glob
import html
import html.parser
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import check_reader  # noqa: E402  (this folder: the book checks' shared check/skip/load_module)
from check_reader import LANGS, check, failures, skip  # noqa: E402
from check_reader import load_module as load  # noqa: E402

NOT_GPU = {"zh": "尚未在 GPU 上测量", "en": "not yet measured on a GPU"}
TITLE = {"zh": "附录　性能", "en": "Appendix: Performance"}


def catalog(root):
    """tools/bench --list-rows, run as a program (what the appendix must cover)."""
    r = subprocess.run([sys.executable, os.path.join(root, "tools", "bench"), "--list-rows"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        check(False, f"tools/bench --list-rows exits 0 ({r.returncode}: {r.stderr.strip()[-300:]})")
        return []
    return json.loads(r.stdout)


def anchor(rid):
    return "why-" + re.sub(r"[^a-z0-9]+", "-", rid.lower()).strip("-")


def cjk(s):
    return len(re.findall(r"[\u4e00-\u9fff]", s))


def latest_recordings(recorded):
    """{device_slug: (file, doc)}: the latest full-size bench JSON of each device, read here
    independently of the appendix's code."""
    out = {}
    for path in glob.glob(os.path.join(recorded, "bench-*.json")):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("mode") != "full":
            continue
        key = (doc.get("date", ""), os.path.basename(path))
        slug = doc["device_slug"]
        if slug not in out or key > (out[slug][1].get("date", ""), out[slug][0]):
            out[slug] = (os.path.basename(path), doc)
    return out


# ---------------------------------------------------------------------------
# text: book/performance.json against the bench's rows; the page from fixtures

def cmd_text(root):
    appendix = load(root, "book_appendix")
    cat = catalog(root)
    with open(os.path.join(root, "book", "performance.json"), encoding="utf-8") as f:
        text = json.load(f)
    rows = text.get("rows") or {}
    ids = list(dict.fromkeys(c["id"] for c in cat))
    check(len(ids) > 20 and None not in ids, f"tools/bench --list-rows: {len(ids)} row ids, every row has one" +
          "".join(f"\n     no id: {c['target']} ({c['chapter']}, {c['device']})" for c in cat if not c["id"]))
    check({"cpu", "cuda"} <= {c["device"] for c in cat}, "the catalog has CPU and GPU rows")
    missing = []
    for rid in ids:
        if not rid:
            continue
        e = rows.get(rid) or {}
        for part in ("title", "short", "why"):
            for lang in LANGS:
                v = (e.get(part) or {}).get(lang) or ""
                good = bool(v.strip()) and ((cjk(v) > 0) if (lang == "zh" and part == "why") else True) and \
                    (cjk(v) == 0 if lang == "en" else True)
                if not good:
                    missing.append(f"{rid}.{part}.{lang}")
    check(not missing, "book/performance.json: every row id has its title, short label and paragraph in zh "
                       "(Chinese) and en (no Chinese)" + (f"; missing or wrong: {missing}" if missing else ""))
    long = [f"{rid}.{lang}" for rid in ids if rid for lang in LANGS
            if len(((rows.get(rid) or {}).get("short") or {}).get(lang) or "") > 32]
    check(not long, f"book/performance.json: every short label (the charts' axis) fits in 32 characters ({long})")
    stale = sorted(set(rows) - set(ids))
    check(not stale, f"book/performance.json: no entry for a row tools/bench does not report ({stale})")
    check(not appendix.problems(text, cat), "book_appendix.problems() finds nothing in the real text")
    # A new row without its text, and a row without an id, are named with the fix.
    fake = cat + [{"id": "ch99.new_row", "device": "cpu", "chapter": "ch99", "target": "ch99 new", "unit": "x",
                   "goal": None, "op": ">=", "ceiling": False},
                  {"id": None, "device": "cuda", "chapter": "ch99", "target": "ch99 nameless", "unit": "x",
                   "goal": None, "op": ">=", "ceiling": False}]
    got = appendix.problems(text, fake)
    check(any("'ch99.new_row'" in p and "book/performance.json" in p for p in got) and
          any("ch99 nameless" in p and "rid=" in p for p in got) and len(got) == 2,
          f"a row without a paragraph and a row without an id are each named with the fix: {got}")
    check_fixtures(root, appendix, cat)
    check_agreement(root, appendix, cat)


def check_agreement(root, appendix, cat):
    """The repository's bench recordings and the chapters' own recordings point the same way on
    every C-against-C row; a planted pair that points opposite ways is named."""
    recorded = os.path.join(root, "book", "recorded")
    recs, _ = appendix.read_recordings(recorded)
    bad = appendix.disagreements(recs, recorded)
    check(not bad, "the appendix's C-against-C rows and the chapters' recordings point the same way"
          + "".join(f"\n     {b}" for b in bad))
    ids = {c["id"] for c in cat}
    unknown = sorted({rid for rid, *_ in appendix.CHAPTER_RATIOS} - ids)
    check(not unknown, f"CHAPTER_RATIOS names only rows tools/bench reports ({unknown})")
    check([appendix.direction(x) for x in (1.2, 0.95, 1.05, 0.8, None, float("nan"))] == [1, 0, 0, -1, None, None],
          "direction: 10% around 1 has none")
    with tempfile.TemporaryDirectory() as d:
        row = {"id": "ch08.ddp_vs_dp", "at": None, "ratio": 0.8}
        lowp = {"id": "ch09.c_lowp_vs_f32", "at": "float16", "ratio": 0.5}
        write_rec(os.path.join(d, "bench-cpu-test-2026-01-02.json"),
                  {"schema": "ct-bench/1", "mode": "full", "device": "cpu", "device_slug": "cpu-test",
                   "date": "2026-01-02", "rows": [row, lowp]})
        write_rec(os.path.join(d, "ch08-cpu-test-2026-01-01.json"), {"dp_ms_per_step": 3.0, "ddp_ms_per_step": 2.0})
        write_rec(os.path.join(d, "ch08-cpu-test-mlp-2026-01-03.json"), {"dp_ms_per_step": 1.0, "ddp_ms_per_step": 2.0})
        write_rec(os.path.join(d, "ch09-cpu-test-2026-01-01.json"), {"gemm_speedup_float16": 0.6,
                                                                      "gemm_speedup_bfloat16": 0.1})
        write_rec(os.path.join(d, "ch08-other-2026-01-05.json"), {"dp_ms_per_step": 1.0, "ddp_ms_per_step": 2.0})
        recs, _ = appendix.read_recordings(d)
        got = appendix.disagreements(recs, d)
        check(len(got) == 1 and "ch08.ddp_vs_dp" in got[0] and "ratio 0.8" in got[0] and "gives 1.5" in got[0]
              and "ch08-cpu-test-2026-01-01.json" in got[0],
              f"a bench row and the chapter's untagged recording on the same device pointing opposite ways are "
              f"named (a tagged or another device's recording is not read; a row's `at` picks its ratio): {got}")


def write_rec(path, doc):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)


def check_fixtures(root, appendix, cat):
    """The page made from recorded/ folders this check writes: CPU only; CPU and a partial GPU run."""
    weave = load(root, "weave")
    gpu_ids = list(dict.fromkeys(c["id"] for c in cat if c["device"] == "cuda"))
    cpu_row = {"id": "ch05.steps", "at": None, "target": "ch05 training steps/s: C / PyTorch", "unit": "steps/s",
               "goal": 3.0, "op": ">=", "met": "yes", "note": "", "a": 1234.5, "b": 100.0, "ratio": 12.345,
               "fraction": None, "a_torch": None, "b_torch": "2.15.0+cu132"}
    na_row = {"id": "ch04.reg_tiled_vs_cublas", "at": None, "target": "ch04 reg", "unit": "GFLOP/s", "goal": 0.5,
              "op": ">=", "met": "n/a", "note": "needs a GPU", "a": None, "b": None, "ratio": None, "fraction": None}
    base = {"schema": "ct-bench/1", "mode": "full", "date": "2026-01-02 03:04:05 UTC", "commit": "abc",
            "torch": "9.9", "driver": "none", "cuda": "none", "load_start": 0.5, "load_end": 0.6, "ncpu": 2}
    with tempfile.TemporaryDirectory() as d:
        rec = os.path.join(d, "recorded")
        md = os.path.join(d, "md")
        os.makedirs(rec)
        write_rec(os.path.join(rec, "bench-cpu-test-2026-01-02.json"),
                  dict(base, device="cpu", device_slug="cpu-test", device_desc="cpu: Test CPU",
                       rows=[cpu_row, na_row]))
        write_rec(os.path.join(rec, "bench-cpu-test-2026-01-01.json"),
                  dict(base, device="cpu", device_slug="cpu-test", device_desc="cpu: old", date="2026-01-01 00:00:00 UTC",
                       rows=[dict(cpu_row, ratio=99.0)]))
        write_rec(os.path.join(rec, "bench-cpu-test-2026-01-03-quick.json"),
                  dict(base, device="cpu", device_slug="cpu-test", device_desc="cpu: quick", mode="quick",
                       date="2026-01-03 00:00:00 UTC", rows=[dict(cpu_row, ratio=77.0)]))
        info = appendix.build(root, md, {}, weave.gnuplot_terminals, recorded_dir=rec, draw_figures=False)
        check(info["recordings"] == ["bench-cpu-test-2026-01-02.json"],
              f"fixture: the latest full run of a device is used, not an older or a --quick one ({info})")
        for lang in LANGS:
            with open(os.path.join(md, f"performance.{lang}.md"), encoding="utf-8") as f:
                page = f.read()
            gpu = page[page.find("{#perf-gpu}"):page.find("{#perf-why}")] if "{#perf-gpu}" in page else ""
            lacking = [i for i in gpu_ids if not re.search(rf"\(#{anchor(i)}\) \| \[{NOT_GPU[lang]}\]", gpu)]
            check(gpu and not lacking, f"fixture, CPU only, {lang}: the GPU section lists all {len(gpu_ids)} GPU "
                                       f"rows as '{NOT_GPU[lang]}'" + (f"; lacking {lacking}" if lacking else ""))
            cpu_part = page[:page.find("{#perf-gpu}")]
            check("12.345" in cpu_part and "99.000" not in page and "77.000" not in page,
                  f"fixture, {lang}: the recording's ratio shown, the older and the quick run's not")
            ver = "（PyTorch 2.15.0）" if lang == "zh" else " (PyTorch 2.15.0)"
            unit = "步/秒" if lang == "zh" else "steps/s"
            check(f"100.0 {unit}{ver}" in cpu_part and "+cu132" not in page,
                  f"fixture, {lang}: the PyTorch figure names its version ('{ver.strip()}', no build tag)")
            check(re.search(rf"\(#{anchor('ch04.reg_tiled_vs_cublas')}\) \| \[{NOT_GPU[lang]}\]", cpu_part),
                  f"fixture, {lang}: a CPU row that needs a GPU says '{NOT_GPU[lang]}'")
        # a GPU recording that measured one row: the rest of the GPU rows are listed as not measured
        write_rec(os.path.join(rec, "bench-test-gpu-2026-01-02.json"),
                  dict(base, device="cuda", device_slug="test-gpu", device_desc="cuda: Test GPU",
                       rows=[dict(cpu_row, ratio=4.5, a=450.0)]))
        appendix.build(root, md, {}, weave.gnuplot_terminals, recorded_dir=rec, draw_figures=False)
        for lang in LANGS:
            with open(os.path.join(md, f"performance.{lang}.md"), encoding="utf-8") as f:
                page = f.read()
            gsec = page[page.find("{#perf-test-gpu}"):page.find("{#perf-why}")]
            lacking = [i for i in gpu_ids if i != "ch05.steps" and
                       not re.search(rf"\(#{anchor(i)}\) \| \[{NOT_GPU[lang]}\]", gsec)]
            check("{#perf-gpu}" not in page and "4.500" in gsec and not lacking,
                  f"fixture, partial GPU run, {lang}: its ratio shown, the other {len(gpu_ids) - 1} GPU rows "
                  f"'{NOT_GPU[lang]}'" + (f"; lacking {lacking}" if lacking else ""))
            cpu_part = page[:page.find("{#perf-test-gpu}")]
            check(re.search(rf"\(#{anchor('ch04.reg_tiled_vs_cublas')}\) \| \[{NOT_GPU[lang]}\]", cpu_part),
                  f"fixture, {lang}: a CPU row that needs a GPU the GPU run lacks still says '{NOT_GPU[lang]}'")


# ---------------------------------------------------------------------------
# html: the built page against the recordings

class Tables(html.parser.HTMLParser):
    """div.perf-table blocks: [(data-device, data-recording, [[(text, [hrefs])...]...])], and the
    page's ids and img sources."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables, self.ids, self.imgs = [], set(), []
        self.depth = 0      # div nesting inside the current perf-table
        self.row = self.cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "img":
            self.imgs.append(a.get("src", ""))
        if tag == "div":
            if self.depth:
                self.depth += 1
            elif "perf-table" in (a.get("class") or "").split():
                self.tables.append((a.get("data-device"), a.get("data-recording"), []))
                self.depth = 1
        if not self.depth:
            return
        if tag == "tr":
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = ["", []]
        elif tag == "a" and self.cell is not None:
            self.cell[1].append(a.get("href", ""))

    def handle_endtag(self, tag):
        if not self.depth:
            return
        if tag in ("td", "th") and self.cell is not None:
            self.row.append((re.sub(r"\s+", " ", self.cell[0]).strip(), self.cell[1]))
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.tables[-1][2].append(self.row)
            self.row = None
        elif tag == "div":
            self.depth -= 1

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[0] += data


def number(text):
    m = re.search(r"-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?", text)
    return float(m.group(0).replace(",", "")) if m else None


def same(shown, want, abs_=None):
    """shown (a number read off the page) is want printed the way the bench prints figures: three
    significant digits below 1000, whole numbers from 1000 on; abs_: a fixed tolerance instead."""
    if shown is None or want is None:
        return False
    if abs_ is None:
        abs_ = 0.5 if abs(want) >= 1000 else 0.5 * 10 ** (math.floor(math.log10(abs(want))) - 2) if want else 0
    return abs(shown - want) <= abs_ * 1.0001 + 1e-12


def cmd_html(root, out):
    if not os.path.exists(os.path.join(out, "book.json")):
        skip(f"no book in {out} (book.build did not build it)")
    cat = catalog(root)
    gpu_ids = list(dict.fromkeys(c["id"] for c in cat if c["device"] == "cuda"))
    recs = latest_recordings(os.path.join(root, "book", "recorded"))
    has_gpu = any(doc.get("device") == "cuda" for _, doc in recs.values())
    for lang in LANGS:
        path = os.path.join(out, lang, "performance.html")
        check(os.path.exists(path), f"{lang}/performance.html exists")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            page = f.read()
        p = Tables()
        p.feed(page)
        check(f"<h1>{TITLE[lang]}</h1>" in page or re.search(rf"<h1[^>]*>{re.escape(TITLE[lang])}</h1>", page),
              f"{lang}/performance.html has the title {TITLE[lang]!r}")
        shown = {dev: (rec, rows) for dev, rec, rows in p.tables}
        check(set(shown) - {"gpu"} == set(recs),
              f"{lang}: a table per device with a recording ({sorted(set(shown) - {'gpu'})} against "
              f"book/recorded's {sorted(recs)})")
        for slug, (file, doc) in recs.items():
            if slug not in shown:
                continue
            rec_file, rows = shown[slug]
            check(rec_file == file, f"{lang}/{slug}: the table is made from the latest recording {file} ({rec_file})")
            body = [r for r in rows if r and not any(c[0] == "" for c in r[:1]) and r[0][1]]
            check_rows(lang, slug, doc, body, gpu_ids)
            fig = f"figures/perf-{slug}.{lang}.svg"
            if any(r.get("ratio") is not None for r in doc["rows"]):
                check(fig in p.imgs and os.path.exists(os.path.join(out, lang, fig)) and
                      os.path.getsize(os.path.join(out, lang, fig)) > 2000,
                      f"{lang}/{slug}: the figure {fig} exists and the page shows it")
        if not has_gpu:
            _, rows = shown.get("gpu", (None, []))
            listed = {}
            for r in rows:
                for href in r[0][1]:
                    listed[href.lstrip("#")] = r[1][0] if len(r) > 1 else ""
            lacking = [i for i in gpu_ids if listed.get(anchor(i)) != NOT_GPU[lang]]
            check("gpu" in shown and not lacking,
                  f"{lang}: no GPU recording, and all {len(gpu_ids)} GPU rows of tools/bench are shown "
                  f"'{NOT_GPU[lang]}'" + (f"; lacking {lacking}" if lacking else ""))
        missing = [i for i in dict.fromkeys(c["id"] for c in cat) if anchor(i) not in p.ids]
        check(not missing, f"{lang}: a paragraph (#why-...) for every row id" + (f"; missing {missing}" if missing else ""))
        check_links(out, lang)


def check_rows(lang, slug, doc, body, gpu_ids):
    """The table's rows, in order, against the recording's rows (then, for a GPU run, the GPU rows
    it lacks): link to the paragraph, C figure, reference figure, ratio, fraction."""
    rows = doc["rows"]
    check(len(body) >= len(rows), f"{lang}/{slug}: {len(body)} table rows for the recording's {len(rows)}")
    bad = []
    for i, r in enumerate(rows):
        if i >= len(body):
            break
        cells = body[i]
        texts = [c[0] for c in cells]
        where = f"row {i + 1} ({r.get('id')})"
        if r.get("id") and f"#{anchor(r['id'])}" not in cells[0][1]:
            bad.append(f"{where}: links {cells[0][1]}, not #{anchor(r['id'])}")
        at = r.get("at")
        if at and f"({at if lang == 'en' else at.replace('width', '宽度')})" not in texts[0]:
            bad.append(f"{where}: the title {texts[0]!r} lacks its qualifier ({at})")
        if r.get("a") is None and r.get("b") is None:
            if re.search(r"\d", "".join(texts[1:4])):
                bad.append(f"{where}: a row without figures shows numbers {texts[1:4]}")
            continue
        for k, col, ab in (("a", 1, None), ("b", 2, None), ("ratio", 3, 0.0005)):
            if r.get(k) is None:
                if texts[col] not in ("-", ""):
                    bad.append(f"{where}: {k} is absent from the recording, the page shows {texts[col]!r}")
            elif not same(number(texts[col]), r[k], ab):
                bad.append(f"{where}: {k} {texts[col]!r}, the recording {r[k]!r}")
        frac = r.get("fraction")
        if frac is not None and not same(number(texts[6]), 100 * frac, 0.05):
            bad.append(f"{where}: of ceiling {texts[6]!r}, the recording {100 * frac!r} %")
        if frac is None and texts[6]:
            bad.append(f"{where}: no ceiling in the recording, the page shows {texts[6]!r}")
    if doc.get("device") == "cuda":
        have = {r.get("id") for r in rows}
        extra = {h.lstrip("#"): c[1][0] for c in body[len(rows):] for h in c[0][1]}
        lacking = [i for i in gpu_ids if i not in have and extra.get(anchor(i)) != NOT_GPU[lang]]
        if lacking:
            bad.append(f"GPU rows the recording lacks, not shown '{NOT_GPU[lang]}': {lacking}")
    numbers = sum(1 for r in rows if r.get("ratio") is not None)
    check(not bad, f"{lang}/{slug}: the table's numbers equal the recording's ({numbers} ratios, "
                   f"{len(rows)} rows)" + "".join("\n     " + b for b in bad[:12]))


def check_links(out, lang):
    """The landing page, the edition's contents, a chapter's navigation bar and the last
    chapter's 'next' link lead to the appendix."""
    with open(os.path.join(out, "index.html"), encoding="utf-8") as f:
        landing = f.read()
    check(f'href="{lang}/performance.html"' in landing, f"the landing page links {lang}/performance.html")
    with open(os.path.join(out, lang, "index.html"), encoding="utf-8") as f:
        check('href="performance.html"' in f.read(), f"{lang}/index.html (contents) links performance.html")
    pages = sorted(glob.glob(os.path.join(out, lang, "ch[0-9][0-9]_*.html")),
                   key=lambda p: int(re.match(r"ch(\d+)", os.path.basename(p)).group(1)))
    if pages:
        with open(pages[0], encoding="utf-8") as f:
            first = f.read()
        nav = first[first.find("<nav>"):first.find("</nav>")]
        check('href="performance.html"' in nav, f"{lang}/{os.path.basename(pages[0])}: the navigation bar links it")
        with open(pages[-1], encoding="utf-8") as f:
            last = f.read()
        check('rel="next" href="performance.html"' in last,
              f"{lang}/{os.path.basename(pages[-1])}: 'next' after the last chapter is the appendix")


# ---------------------------------------------------------------------------
# pdf

def cmd_pdf(root, out):
    if not os.path.exists(os.path.join(out, "book.json")):
        skip(f"no book in {out} (book.build did not build it)")
    if not shutil.which("pdftotext"):
        skip("no pdftotext (poppler-utils)")
    recs = latest_recordings(os.path.join(root, "book", "recorded"))
    has_gpu = any(doc.get("device") == "cuda" for _, doc in recs.values())
    for lang in LANGS:
        pdf = os.path.join(out, f"workbook-{lang}.pdf")
        if not os.path.exists(pdf):
            check(False, f"workbook-{lang}.pdf exists")
            continue
        text = subprocess.run(["pdftotext", "-enc", "UTF-8", pdf, "-"], capture_output=True, text=True).stdout
        flat = re.sub(r"\s+", "", text)
        check(re.sub(r"\s+", "", TITLE[lang]) in flat, f"workbook-{lang}.pdf has the appendix {TITLE[lang]!r}")
        ratios = [f"{r['ratio']:.3f}" for _, doc in recs.values() for r in doc["rows"] if r.get("ratio") is not None]
        missing = [x for x in ratios if x not in flat]
        check(ratios and not missing, f"workbook-{lang}.pdf shows the recordings' {len(ratios)} ratios" +
              (f"; missing {missing[:8]}" if missing else ""))
        if not has_gpu:
            check(re.sub(r"\s+", "", NOT_GPU[lang]) in flat, f"workbook-{lang}.pdf: rows '{NOT_GPU[lang]}'")


# ---------------------------------------------------------------------------
# search

def cmd_search(root, out):
    if not os.path.exists(os.path.join(out, "book.json")):
        skip(f"no book in {out} (book.build did not build it)")
    reader_checks = check_reader
    chrome = reader_checks.chromium_binary()
    if not chrome:
        skip("no chromium (Debian: chromium)")
    appendix = load(root, "book_appendix")
    for lang in LANGS:
        page = os.path.join(out, lang, "search.html")
        q = appendix.WORDS[lang]["why"]
        n, hits = reader_checks.run_search(chrome, page, q)
        files = [h.split("#")[0] for h in hits]
        check(n is not None and "performance.html" in files,
              f"{lang}: search {q!r} finds performance.html ({n} results; first: {files[:3]})")


def main(argv):
    modes = {"text": cmd_text, "html": cmd_html, "pdf": cmd_pdf, "search": cmd_search}
    if len(argv) < 3 or argv[1] not in modes or (argv[1] != "text" and len(argv) < 4):
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(argv[2])
    if argv[1] == "text":
        cmd_text(root)
    else:
        modes[argv[1]](root, os.path.abspath(argv[3]))
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
