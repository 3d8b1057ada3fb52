#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks of the reader's tools in a built book (tools/book --out OUT), label book.

    check_reader.py meta     REPO       book/chapters.json: every chapter has its summary, what
                                        you will learn, APIs, prerequisites (earlier chapters, each
                                        named in both texts), GPU note and terms, in zh and en;
                                        GPU recordings from recordings.json or, without it, from
                                        book/recorded/'s file names
    check_reader.py reader   REPO OUT   the landing page lists every chapter (both titles, both
                                        summaries, its GPU badge = recordings.json, links to both
                                        editions) and links both editions and both PDFs; every
                                        chapter page has the header box, its terms with their
                                        anchors, the page's contents, the search box and book.js;
                                        the glossary lists every term; every "chapter N"/"第 N 章"
                                        in a chapter's prose is a link to chapter N
    check_reader.py fonts    REPO OUT   pdffonts: the zh PDF embeds Noto CJK; its Chinese glyphs
                                        are the SC face's, not the collection's JP face
    check_reader.py search   REPO OUT   headless Chromium runs each edition's own search page
                                        (search.html?q=...): a term of each chapter's glossary and
                                        the chapter's first section heading find that chapter;
                                        a word in no page finds nothing
    check_reader.py overflow REPO OUT   every page of both editions and the landing page, laid
                                        out 390 px wide in Chromium: no horizontal overflow (the
                                        elements at fault are named); chapter pages: prose 16 px,
                                        code blocks ~14 px, formulas as MathML, no raw TeX;
                                        screenshots of a chapter in each language at 1280 and
                                        390 px in OUT/screenshots/

A check whose tool (pdffonts, fc-match, chromium) or book is missing exits 77
(skipped) and says why. Standard library only.
"""
import glob
import html.parser
import importlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import urllib.parse
import zlib

SKIP = 77
LANGS = ("zh", "en")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def skip(why):
    print(f"skipped: {why}")
    sys.exit(SKIP)


def load_module(root, name):
    """ctools.NAME of the repository at root (tools/ctools/NAME.py)."""
    sys.path.insert(0, os.path.join(root, "tools"))
    return importlib.import_module(f"ctools.{name}")


def chapters(root):
    """[(id, slug, number, {lang: title}, Chapter)] of the sources, in order."""
    weave = load_module(root, "weave")
    out = []
    for src in glob.glob(os.path.join(root, "chapters", "ch*_*", "ch*_*.c")):
        slug = os.path.basename(os.path.dirname(src))
        if os.path.basename(src) != slug + ".c":
            continue
        ch = weave.Chapter(src)
        out.append((ch.id, slug, ch.number, ch.titles, ch))
    out.sort(key=lambda c: c[2])
    return out


def load_meta(root):
    with open(os.path.join(root, "book", "chapters.json"), encoding="utf-8") as f:
        return json.load(f)["chapters"]


def need_book(out):
    if not os.path.exists(os.path.join(out, "book.json")):
        skip(f"no book in {out} (book.build did not build it)")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---------------------------------------------------------------------------
# meta: book/chapters.json

def cmd_meta(root):
    reader = load_module(root, "book_reader")
    meta = reader.load_meta(os.path.join(root, "book"))   # chapters.json and book/remember.json
    chs = chapters(root)
    problems = reader.validate(meta, [c[0] for c in chs])
    check(not problems, f"book/chapters.json is complete for {len(chs)} chapters" +
          "".join("\n     " + p for p in problems))
    extra = sorted(set(meta) - {c[0] for c in chs})
    check(not extra, f"book/chapters.json has no entry without a chapter ({extra})")
    for cid, _, number, _, _ in chs:
        m = meta.get(cid) or {}
        pre = m.get("prerequisites") or {}
        for p in pre.get("chapters", []):
            n = int(p[2:])
            for lang, pat in (("zh", rf"第\s*{n}\s*章"), ("en", rf"\b[Cc]hapters?\s+{n}\b")):
                check(re.search(pat, pre.get(lang, "")) is not None,
                      f"{cid}: prerequisite {p} is named in the {lang} text (so it becomes a link)")
        terms = m.get("terms", [])
        check(len(terms) >= 3, f"{cid}: {len(terms)} glossary terms (at least 3)")
        rem = m.get("remember") or {}
        check(all(len(rem.get(l) or []) >= 3 for l in ("zh", "en")) and len(rem.get("zh") or []) == len(rem.get("en") or []),
              f"{cid}: 'what to remember' has at least 3 points, as many in zh as in en (book/remember.json)")
    check_gpu_fallback(reader)


def check_gpu_fallback(reader):
    """Without OUT/recordings.json, which chapters have GPU recordings comes from book/recorded/'s
    file names: chNN-DEVICE-DATE.txt, a CPU run when DEVICE says cpu."""
    with tempfile.TemporaryDirectory() as d:
        rec = os.path.join(d, "recorded")
        os.makedirs(rec)
        for name in ("ch01-cpu-amd-epyc-2026-11-22.txt", "ch02-nvidia-h100-80gb-hbm3-2026-11-23.txt",
                     "ch03-cpu-amd-epyc-mlp-2026-11-22.txt", "ch03-nvidia-h200-2026-11-24.txt",
                     "ch04-nvidia-h100-2026-11-24.json"):
            open(os.path.join(rec, name), "w").close()
        got = reader.gpu_recordings(os.path.join(d, "out"), rec, ["ch01", "ch02", "ch03", "ch04"])
        want = {"ch01": False, "ch02": True, "ch03": True, "ch04": False}
        check(got == want, f"GPU recordings from file names without recordings.json: {got}")
        os.makedirs(os.path.join(d, "out"))
        with open(os.path.join(d, "out", "recordings.json"), "w") as f:
            json.dump({"ch01": {"gpu": True}, "ch02": {"gpu": False}}, f)
        got = reader.gpu_recordings(os.path.join(d, "out"), rec, ["ch01", "ch02", "ch03"])
        check(got == {"ch01": True, "ch02": False, "ch03": False}, f"GPU recordings from recordings.json: {got}")


# ---------------------------------------------------------------------------
# reader: the built pages carry the reader's tools

class Page(html.parser.HTMLParser):
    """Ids, classes, links (with the text each link holds) and the text of prose outside
    links, headings and code."""
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.classes, self.links, self.scripts = set(), set(), [], []
        self.stack, self.unlinked, self.link_text = [], [], None
        self.inputs = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        self.classes.update((a.get("class") or "").split())
        if tag == "script" and a.get("src"):
            self.scripts.append(a["src"])
        if tag == "input":
            self.inputs.append(a)
        if tag in self.VOID:
            return
        self.stack.append(tag)
        if tag == "a":
            self.links.append([a.get("href") or "", ""])

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self.stack:
            if self.stack.pop() == tag:
                break

    def handle_data(self, data):
        if "a" in self.stack and self.links:
            self.links[-1][1] += data
            return
        if any(t in self.stack for t in ("code", "pre", "h1", "h2", "h3", "h4", "script", "style", "nav",
                                         "header", "footer", "title", "figcaption")):
            return
        self.unlinked.append(data)


def parse(path):
    p = Page()
    p.feed(read(path))
    return p


def xref_patterns(n):
    return {"zh": re.compile(rf"第\s*{n}\s*章"), "en": re.compile(rf"\b[Cc]hapter\s+{n}(?!\d|\.\d)")}


def cmd_reader(root, out):
    need_book(out)
    meta = load_meta(root)
    chs = chapters(root)
    with open(os.path.join(out, "recordings.json"), encoding="utf-8") as f:
        recs = json.load(f)
    # the landing page
    landing = os.path.join(out, "index.html")
    check(os.path.exists(landing), "index.html (the landing page) exists")
    if os.path.exists(landing):
        text = read(landing)
        lp = parse(landing)
        hrefs = [h for h, _ in lp.links]
        for target in ("zh/index.html", "en/index.html", "workbook-zh.pdf", "workbook-en.pdf"):
            check(target in hrefs, f"landing page links {target}")
        for cid, slug, _, titles, _ in chs:
            entry = re.search(rf'<li class="chapter-entry" id="{cid}">(.*?)</li>', text, re.S)
            check(entry is not None, f"landing page has an entry for {cid}")
            if not entry:
                continue
            e = entry.group(1)
            for lang in LANGS:
                check(f'href="{lang}/{slug}.html"' in e, f"landing page: {cid} links its {lang} page")
                summary = meta[cid]["summary"][lang]
                plain = re.sub(r"`", "", summary)
                shown = re.sub(r"<[^>]+>", "", e).replace("&#x27;", "'").replace("&quot;", '"').replace("&amp;", "&")
                check(plain in shown, f"landing page: {cid} shows its {lang} summary")
            gpu = bool((recs.get(cid) or {}).get("gpu"))
            badge = re.search(r'class="badge (gpu|cpu)"', e)
            check(badge is not None and (badge.group(1) == "gpu") == gpu,
                  f"landing page: {cid} badge {badge.group(1) if badge else None}, recordings.json gpu={gpu}")
    # the chapter pages
    numbers = {n: slug for _, slug, n, _, _ in chs}
    for cid, slug, number, titles, _ in chs:
        terms = meta[cid].get("terms", [])
        for lang in LANGS:
            path = os.path.join(out, lang, slug + ".html")
            if not os.path.exists(path):
                check(False, f"{lang}/{slug}.html exists")
                continue
            p = parse(path)
            where = f"{lang}/{slug}.html"
            check("chapter-card" in p.classes, f"{where}: header box")
            check("page-toc" in p.classes, f"{where}: the page's contents")
            check(any(i.get("type") == "search" for i in p.inputs), f"{where}: search box")
            check("book.js" in p.scripts, f"{where}: loads book.js")
            missing = [t["id"] for t in terms if f"term-{t['id']}" not in p.ids]
            check(not missing, f"{where}: {len(terms)} terms with their anchors" + (f"; missing {missing}" if missing else ""))
            src = next((h for h, t in p.links if h.endswith(f"chapters/{slug}/{slug}.c")), None)
            check(src is not None, f"{where}: links its source file")
            twin = next((h for h, t in p.links if h.endswith(f"chapters/{slug}/{cid}_pytorch.py")), None)
            check(twin is not None, f"{where}: links its PyTorch twin")
            # cross-references: linked to the right page, none left as plain text
            bad = []
            linked = 0
            for n, target in numbers.items():
                pat = xref_patterns(n)[lang]
                for href, text in p.links:
                    if pat.fullmatch(text.strip()):
                        linked += 1
                        if urllib.parse.urlsplit(href).path != f"{target}.html":
                            bad.append(f"{text.strip()!r} -> {href}")
                plain = "".join(p.unlinked)
                for m in pat.finditer(plain):
                    bad.append(f"unlinked {m.group(0)!r} in ...{plain[max(0, m.start() - 30):m.end() + 10]}...")
            check(not bad, f"{where}: {linked} cross-references, each a link to its chapter" +
                  "".join("\n     " + b for b in bad[:8]))
    # the glossary
    for lang in LANGS:
        path = os.path.join(out, lang, "glossary.html")
        check(os.path.exists(path), f"{lang}/glossary.html exists")
        if not os.path.exists(path):
            continue
        g = parse(path)
        want = [t["id"] for cid, *_ in chs for t in meta[cid].get("terms", [])]
        missing = [t for t in want if f"glossary-{t}" not in g.ids]
        check(not missing, f"{lang}/glossary.html has all {len(want)} terms" + (f"; missing {missing}" if missing else ""))
        idx = os.path.join(out, lang, "search-index.js")
        check(os.path.exists(idx), f"{lang}/search-index.js exists")
        if os.path.exists(idx):
            data = json.loads(read(idx).split("window.BOOK_SEARCH = ", 1)[1].rstrip().rstrip(";"))
            files = {p["f"] for p in data["pages"]}
            missing = [slug for _, slug, *_ in chs if f"{slug}.html" not in files]
            check(not missing, f"{lang}/search-index.js indexes every chapter ({len(data['s'])} sections, "
                               f"{os.path.getsize(idx) // 1024} KiB)" + (f"; missing {missing}" if missing else ""))


# ---------------------------------------------------------------------------
# fonts: the zh PDF's Chinese is set in Noto CJK's SC face

def font_file(family):
    """(path, face index) of a font family, from fontconfig."""
    r = subprocess.run(["fc-match", "-f", "%{file}\t%{index}", family], capture_output=True, text=True)
    if r.returncode != 0 or "\t" not in r.stdout:
        return None, None
    path, index = r.stdout.split("\t")
    return path, int(index or 0)


def sfnt_cmap(path, index):
    """{code point: glyph id} of face `index` of a TrueType/OpenType font or collection
    (the Unicode cmap, format 12 or 4)."""
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    if data[:4] == b"ttcf":
        off = struct.unpack(">I", data[12 + 4 * index:16 + 4 * index])[0]
    ntables = struct.unpack(">H", data[off + 4:off + 6])[0]
    tables = {}
    for i in range(ntables):
        tag, _, toff, _ = struct.unpack(">4sIII", data[off + 12 + 16 * i:off + 28 + 16 * i])
        tables[tag] = toff
    c = tables[b"cmap"]
    subs = {}
    for i in range(struct.unpack(">H", data[c + 2:c + 4])[0]):
        pid, eid, so = struct.unpack(">HHI", data[c + 4 + 8 * i:c + 12 + 8 * i])
        subs[(pid, eid)] = c + so
    s = subs.get((3, 10)) or subs.get((0, 4)) or subs.get((3, 1)) or subs.get((0, 3))
    fmt = struct.unpack(">H", data[s:s + 2])[0]
    out = {}
    if fmt == 12:
        for g in range(struct.unpack(">I", data[s + 12:s + 16])[0]):
            a, b, gid = struct.unpack(">III", data[s + 16 + 12 * g:s + 28 + 12 * g])
            for cp in range(a, b + 1):
                out[cp] = gid + cp - a
    elif fmt == 4:
        segx2 = struct.unpack(">H", data[s + 6:s + 8])[0]
        ends = s + 14
        starts = ends + segx2 + 2
        deltas = starts + segx2
        ranges = deltas + segx2
        for k in range(segx2 // 2):
            end = struct.unpack(">H", data[ends + 2 * k:ends + 2 * k + 2])[0]
            start = struct.unpack(">H", data[starts + 2 * k:starts + 2 * k + 2])[0]
            delta = struct.unpack(">h", data[deltas + 2 * k:deltas + 2 * k + 2])[0]
            ro = struct.unpack(">H", data[ranges + 2 * k:ranges + 2 * k + 2])[0]
            for cp in range(start, min(end, 0xFFFE) + 1):
                if ro == 0:
                    out[cp] = (cp + delta) & 0xFFFF
                else:
                    at = ranges + 2 * k + ro + 2 * (cp - start)
                    gid = struct.unpack(">H", data[at:at + 2])[0]
                    if gid:
                        out[cp] = (gid + delta) & 0xFFFF
    return out


def pdf_to_unicode_maps(pdf):
    """[(CMap name, {cid: code point})] of every ToUnicode CMap in a PDF (Flate streams)."""
    with open(pdf, "rb") as f:
        data = f.read()
    maps = []
    for m in re.finditer(rb"(?<!end)stream\r?\n", data):
        end = data.find(b"endstream", m.end())
        try:
            s = zlib.decompress(data[m.end():end]).decode("latin-1")
        except zlib.error:
            continue
        if "begincmap" not in s:
            continue
        name = re.search(r"/CMapName\s*/(\S+)", s)
        cmap = {}
        for block in re.findall(r"beginbfchar(.*?)endbfchar", s, re.S):
            for cid, u in re.findall(r"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]{4})>", block):
                cmap[int(cid, 16)] = int(u, 16)
        for block in re.findall(r"beginbfrange(.*?)endbfrange", s, re.S):
            for a, b, u in re.findall(r"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]{4})>", block):
                if not 0 <= int(b, 16) - int(a, 16) < 0x10000:
                    continue    # not a range of one font's CIDs
                for k in range(int(b, 16) - int(a, 16) + 1):
                    cmap[int(a, 16) + k] = int(u, 16) + k
        maps.append((name.group(1) if name else "?", cmap))
    return maps


def cmd_fonts(root, out):
    need_book(out)
    for tool in ("pdffonts", "fc-match"):
        if not shutil.which(tool):
            skip(f"no {tool} (poppler-utils, fontconfig)")
    pdf = os.path.join(out, "workbook-zh.pdf")
    if not os.path.exists(pdf):
        skip(f"no {pdf} (a book built with --no-pdf)")
    r = subprocess.run(["pdffonts", pdf], capture_output=True, text=True)
    rows = [t.split() for t in r.stdout.split("\n")[2:] if t.strip()]
    cjk = [row[0] for row in rows if "CJK" in row[0] and "yes" in row[-5:-2]]
    check(bool(cjk), f"pdffonts: workbook-zh.pdf embeds a Noto CJK font ({', '.join(cjk) or 'none'})")
    # A Noto CJK collection's faces share one CFF table, so pdffonts names every face
    # 'NotoSerifCJKjp'; what tells SC from JP is the glyph each face's cmap maps a
    # character to. Compare the glyphs the PDF uses with both faces' cmaps.
    sc_path, sc_index = font_file("Noto Serif CJK SC")
    jp_path, jp_index = font_file("Noto Serif CJK JP")
    if not sc_path or sc_path != jp_path or not sc_path.endswith(".ttc"):
        check(bool(cjk) and any("sc" in c.lower() for c in cjk), "the CJK font is the SC one (by name)")
        return
    sc, jp = sfnt_cmap(sc_path, sc_index), sfnt_cmap(jp_path, jp_index)
    total_sc = total_jp = 0
    for name, cmap in pdf_to_unicode_maps(pdf):
        if "CJK" not in name or "Mono" in name:
            continue
        for cid, cp in cmap.items():
            if cp in sc and sc[cp] != jp.get(cp):      # a character whose SC and JP glyphs differ
                total_sc += cid == sc[cp]
                total_jp += cid == jp.get(cp)
    check(total_sc >= 20 and total_jp == 0,
          f"workbook-zh.pdf draws its Chinese with the SC face: {total_sc} region-specific characters in SC "
          f"glyphs, {total_jp} in JP glyphs")


# ---------------------------------------------------------------------------
# Chromium

def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def chromium(chrome, args, timeout=90):
    """Runs headless Chromium with a throw-away profile; returns (exit code, stdout, stderr)."""
    profile = tempfile.mkdtemp(prefix="book-chromium.")
    try:
        cmd = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
               "--disable-extensions", "--hide-scrollbars", f"--user-data-dir={profile}"] + args
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            return r.returncode, r.stdout, r.stderr
        except subprocess.TimeoutExpired:
            return "timeout", "", ""
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def run_search(chrome, page, query):
    """Opens the edition's search page with ?q=query; returns (count, [hrefs]) or (None, [])."""
    url = "file://" + urllib.parse.quote(os.path.abspath(page)) + "?q=" + urllib.parse.quote(query)
    code, dom, _ = chromium(chrome, ["--virtual-time-budget=5000", "--dump-dom", url])
    m = re.search(r'id="search-page"[^>]*data-count="(\d+)"|data-count="(\d+)"[^>]*id="search-page"', dom)
    if code != 0 or not m:
        return None, []
    box = dom[dom.find('id="search-page"'):]
    return int(m.group(1) or m.group(2)), re.findall(r'<li><a href="([^"]+)"', box)


def search_terms(ch, cm, lang):
    """Two queries for a chapter: its first glossary term (without a parenthesis) and its
    first section heading, from the chapter's own source."""
    qs = []
    if cm.get("terms"):
        qs.append(re.sub(r"[（(].*?[)）]", "", cm["terms"][0][lang]["term"]).strip())
    for item in ch.items:
        if item["kind"] != "prose":
            continue
        for seg_lang, seg in item["segments"]:
            if seg_lang != lang:
                continue
            for line in seg:
                m = re.match(r"^##\s+(.+?)\s*(\{.*\})?$", line)
                if m:
                    qs.append(re.sub(r"[`*_]", "", m.group(1)))
                    return qs
    return qs


def cmd_search(root, out):
    need_book(out)
    chrome = chromium_binary()
    if not chrome:
        skip("no chromium (Debian: chromium)")
    meta = load_meta(root)
    for lang in LANGS:
        page = os.path.join(out, lang, "search.html")
        check(os.path.exists(page), f"{lang}/search.html exists")
        if not os.path.exists(page):
            continue
        n, hits = run_search(chrome, page, "qzxjv-nowhere")
        check(n == 0, f"{lang}: search for a word in no page finds nothing (count {n})")
        for cid, slug, _, _, ch in chapters(root):
            for q in search_terms(ch, meta.get(cid) or {}, lang):
                n, hits = run_search(chrome, page, q)
                pages = [urllib.parse.urlsplit(h).path for h in hits]
                check(n is not None and f"{slug}.html" in pages,
                      f"{lang}: search {q!r} finds {slug}.html ({n} results; first: {pages[:3]})")
        # book/termbase.json: a synonym the zh prose does not use, or the English name, finds the
        # glossary's entry and the chapters that use the book's word (a few queries: each is a
        # Chromium run)
        for q, term in ({"zh": [("内核", "核函数"), ("kernel", "核函数"), ("副流", "旁路流")],
                         "en": [("核函数", "kernel")]}[lang]):
            n, hits = run_search(chrome, page, q)
            pages = sorted({urllib.parse.urlsplit(h).path for h in hits})
            check(n is not None and "glossary.html" in pages and any(p.startswith("ch") for p in pages),
                  f"{lang}: search {q!r} finds the glossary and the chapters that write {term!r} "
                  f"({n} results; pages: {pages[:4]})")


OVERFLOW_PROBE = """<script>
window.addEventListener("load", function () {
  var d = document.documentElement, w = d.clientWidth, bad = [];
  function clipped(el) {
    for (var p = el.parentElement; p && p !== d; p = p.parentElement) {
      var o = getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll" || o === "hidden" || o === "clip") return true;
    }
    return false;
  }
  var all = document.body.getElementsByTagName("*");
  for (var i = 0; i < all.length && bad.length < 6; i++) {
    var r = all[i].getBoundingClientRect();
    if (r.width > 0 && r.right > w + 1 && !clipped(all[i]))
      bad.push(all[i].tagName.toLowerCase() + (all[i].className ? "." + String(all[i].className).split(" ").join(".") : "") +
               " right=" + Math.round(r.right));
  }
  function size(sel) {
    var el = document.querySelector(sel);
    return el ? parseFloat(getComputedStyle(el).fontSize) : null;
  }
  var tex = 0, texEls = document.querySelectorAll("main p, main li");
  for (var k = 0; k < texEls.length; k++) {
    var c = texEls[k].cloneNode(true), codes = c.querySelectorAll("code, pre, math");
    for (var q = 0; q < codes.length; q++) codes[q].remove();
    if (/\\$[^$\\s][^$]*\\$|\\\\(frac|sum|times|sqrt|text)\\b/.test(c.textContent)) tex++;
  }
  var covers = 0, buttons = document.querySelectorAll("button.copy");   // a copy button over its code
  for (var b = 0; b < buttons.length; b++) {
    var pre = buttons[b].parentElement.querySelector("pre");
    if (!pre) continue;
    var br = buttons[b].getBoundingClientRect(), pr = pre.getBoundingClientRect();
    if (br.width > 0 && br.bottom > pr.top + 1 && br.top < pr.bottom && br.right > pr.left && br.left < pr.right) covers++;
  }
  parent.postMessage(JSON.stringify({sw: d.scrollWidth, cw: w, bad: bad, body: size("main p"),
                                     code: size("main pre code"), inline: size("main p code"), covers: covers,
                                     copies: buttons.length,
                                     math: document.querySelectorAll("main math").length, tex: tex}), "*");
});
</script>"""

OVERFLOW_FRAME = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
<iframe src="{src}" style="width:{w}px;height:844px;border:0"></iframe><pre id="probe"></pre>
<script>window.addEventListener("message", function (e) {{
  document.getElementById("probe").textContent = e.data; }});</script></body></html>"""


def measure_overflow(chrome, page, width=390):
    """Lays the page out in a width-px frame (a copy with a probe script, beside the original so
    that its relative links hold); returns the probe's {sw, cw, bad} or None."""
    d = os.path.dirname(page)
    copy = os.path.join(d, f".overflow-{os.path.basename(page)}")
    frame = os.path.join(d, ".overflow-frame.html")
    try:
        text = read(page)
        with open(copy, "w", encoding="utf-8") as f:
            f.write(text.replace("</body>", OVERFLOW_PROBE + "</body>"))
        with open(frame, "w", encoding="utf-8") as f:
            f.write(OVERFLOW_FRAME.format(src=urllib.parse.quote(os.path.basename(copy)), w=width))
        code, dom, _ = chromium(chrome, ["--window-size=800,900", "--virtual-time-budget=5000", "--dump-dom",
                                         "file://" + urllib.parse.quote(os.path.abspath(frame))])
        m = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
        if code != 0 or not m or not m.group(1).strip():
            return None
        return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                          .replace("&gt;", ">"))
    finally:
        for p in (copy, frame):
            if os.path.exists(p):
                os.unlink(p)


def check_typography(name, r):
    """A chapter page's type: 16 px prose, code blocks at about 14 px (0.875 of it, not shrunk
    twice), inline code a little smaller than its line, formulas as MathML, never raw TeX; on a
    phone no copy button lies over its code."""
    body, code, inline = r.get("body"), r.get("code"), r.get("inline")
    check(body == 16 and code is not None and 13.5 <= code <= 14.5,
          f"{name}: prose {body} px, code blocks {code} px (want 16 and about 14)")
    check(inline is None or 0.8 * body <= inline < body, f"{name}: inline code {inline} px against {body} px")
    check(r.get("tex") == 0, f"{name}: {r.get('tex')} paragraphs show TeX source instead of math"
          f" ({r.get('math')} MathML formulas)")
    check(r.get("copies", 0) > 0 and r.get("covers") == 0,
          f"{name} at 390 px: {r.get('covers')} of {r.get('copies')} copy buttons lie over their code")


def cmd_overflow(root, out):
    need_book(out)
    chrome = chromium_binary()
    if not chrome:
        skip("no chromium (Debian: chromium)")
    pages = [os.path.join(out, "index.html")]
    for lang in LANGS:
        pages += sorted(glob.glob(os.path.join(out, lang, "*.html")))
    for page in pages:
        name = os.path.relpath(page, out)
        if os.path.basename(page).startswith("."):
            continue
        r = measure_overflow(chrome, page)
        check(r is not None and r["sw"] <= r["cw"],
              f"{name} at 390 px: " + ("not measured" if r is None else
                                       f"page width {r['sw']} px in a {r['cw']} px viewport" +
                                       ("".join("\n     " + b for b in r["bad"]) if r["sw"] > r["cw"] else "")))
        if r is not None and re.fullmatch(r"ch\d\d_\w+\.html", os.path.basename(page)):
            check_typography(name, r)
    screenshots(chrome, root, out)


def screenshots(chrome, root, out):
    """A chapter page in each language at desktop and phone width (kept with the test output,
    for a person to look at)."""
    shots = os.path.join(out, "screenshots")
    os.makedirs(shots, exist_ok=True)
    chs = chapters(root)
    slug = next((s for _, s, n, _, _ in chs if n == 2), chs[0][1])   # chapter 2: tables, code, outputs
    for lang in LANGS:
        page = os.path.join(out, lang, slug + ".html")
        for width, height in ((1280, 2400), (390, 2400)):
            png = os.path.join(shots, f"{slug}.{lang}.{width}.png")
            if os.path.exists(png):
                os.unlink(png)
            code, _, _ = chromium(chrome, [f"--window-size={width},{height}", f"--screenshot={png}",
                                           "file://" + urllib.parse.quote(os.path.abspath(page))])
            check(code == 0 and os.path.exists(png) and os.path.getsize(png) > 20000,
                  f"screenshot {os.path.relpath(png, out)}")


def main(argv):
    modes = {"meta": cmd_meta, "reader": cmd_reader, "fonts": cmd_fonts, "search": cmd_search,
             "overflow": cmd_overflow}
    if len(argv) < 3 or argv[1] not in modes or (argv[1] != "meta" and len(argv) < 4):
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.abspath(argv[2])
    if argv[1] == "meta":
        cmd_meta(root)
    else:
        modes[argv[1]](root, os.path.abspath(argv[3]))
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
