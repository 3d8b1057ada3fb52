#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/book: builds the bilingual book, HTML and PDF, with real outputs.

    tools/book [--quick] [--no-bootstrap] [--no-build] [--build-dir DIR]
               [--out DIR] [--only ch01,ch02] [--device auto|cpu|cuda]
               [--reuse-runs] [--no-pdf] [--no-html] [--strict] [--timeout S] [-j N]

On a fresh machine it does everything:
  1. tools/bootstrap installs the missing Debian packages (build, test, book);
  2. cmake --preset default configures build/ and builds every chapter;
  3. each chapter runs once (on the GPU if there is one, else the CPU) with
     --metrics, its stdout+stderr captured to OUT/run/chNN/, and its PyTorch
     twin runs with /usr/bin/python3 (when torch imports);
  4. tools/weave turns each chapter into Markdown per language, with the
     captured outputs, the GPU transcripts under book/recorded/ and the
     figures gnuplot draws from the metrics and the schematic figures
     Graphviz dot draws from chapters/chNN_*/fig/*.dot;
  5. Pandoc renders OUT/zh/ and OUT/en/ (one HTML page per chapter, an
     index, a glossary, a search page and its prebuilt index) and
     OUT/workbook-zh.pdf, OUT/workbook-en.pdf through XeLaTeX; OUT/index.html
     is the landing page, the table of contents of both editions. Each
     chapter gets a header box and its terms from book/chapters.json
     (tools/ctools/book_reader.py). After the last chapter comes the performance
     appendix (performance.html, a chapter of the PDF): the latest
     tools/bench recording of each device under book/recorded/, as tables
     and bar charts, each row explained by book/performance.json
     (tools/book_appendix.py).
OUT is build/book/ unless --out says otherwise. A chapter that fails to run
fails the book, with its output's last lines. The format of the sources is in
book/FORMAT.md. Python 3 standard library only.
"""
import argparse
import datetime
import glob
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time

from . import book_appendix as appendix  # the performance appendix from the bench recordings
from . import book_reader as reader  # the landing page, chapter header boxes, glossary, search index
from . import termbase  # book/termbase.json's glossary sections and search aliases
from . import weave
from .text import strip_md  # shared with other tools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository
BOOK = os.path.join(ROOT, "book")
LANGS = ("zh", "en")
TORCH_PYTHON = "/usr/bin/python3"

TEXT = {
    "zh": {
        "book": "用纯 C 重写 PyTorch 的 GPU 训练",
        "subtitle": "练习册",
        "contents": "目录",
        "prev": "上一章",
        "next": "下一章",
        "other": "English",
        "edition": "中文版",
        "pdf": "PDF 版",
        "built": "本书由 `tools/book` 于 {date} 构建（提交 {commit}）；各章的输出来自构建时在 {device} 上的运行{quick}。",
        "quick": "（`--quick`，缩小的工作量）",
    },
    "en": {
        "book": "GPU training the PyTorch way, in plain C",
        "subtitle": "A workbook",
        "contents": "Contents",
        "prev": "Previous",
        "next": "Next",
        "other": "中文",
        "edition": "English edition",
        "pdf": "PDF",
        "built": "Built by `tools/book` on {date} from commit {commit}; the chapters' outputs come from runs on {device} made during the build{quick}.",
        "quick": " (`--quick`, a reduced workload)",
    },
}


def log(msg):
    print(f"book: {msg}", flush=True)


def die(msg, code=1):
    print(f"book: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


# what book/reader.lua reads (chapter pages, repository links): set once the chapters are woven
READER_ENV = {}


def bookrun_flags(src, word="bookrun"):
    """The flags of a chapter's '/*md bookrun FLAGS*/' line: what the book adds to
    a full (not --quick) run, for chapters whose defaults take too long for a
    book build (their default run is recorded once under book/recorded/).
    word "bookrun-zh": the flags one edition's own run adds (quick or full)."""
    with open(src, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\s*/\*md\s+" + re.escape(word) + r"\s+(.*?)\*/\s*$", line)
            if m:
                return m.group(1).split()
    return []


def edition_runs(src):
    """{lang: flags} for each edition with a run of its own ('/*md bookrun-zh --corpus zh*/': the
    Chinese edition shows a run on the Chinese corpus)."""
    runs = {lang: bookrun_flags(src, f"bookrun-{lang}") for lang in weave.LANGS}
    return {lang: flags for lang, flags in runs.items() if flags}


def discover_chapters(only=None):
    """chapters/chNN_name/chNN_name.c, in chapter order."""
    found = []
    for src in sorted(glob.glob(os.path.join(ROOT, "chapters", "ch*_*", "ch*_*.c"))):
        d = os.path.basename(os.path.dirname(src))
        if os.path.basename(src) != d + ".c" or not re.match(r"^ch\d+_\w+$", d):
            continue
        cid = d.split("_")[0]
        if only and cid not in only and d not in only:
            continue
        found.append({"id": cid, "slug": d, "source": src, "dir": os.path.dirname(src),
                      "twin": os.path.join(os.path.dirname(src), f"{cid}_pytorch.py"),
                      "bookrun": bookrun_flags(src), "editions": edition_runs(src)})
    found.sort(key=lambda c: int(c["id"][2:]))
    return found


def run(cmd, **kw):
    """Runs a command, echoing it; dies with its exit status on failure."""
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        die(f"{' '.join(cmd)} failed with exit status {r.returncode}")
    return r


def tail(path, n=25):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().rstrip("\n").split("\n")
        return "\n".join("  | " + t for t in lines[-n:])
    except OSError:
        return "  | (no output)"


# ---------------------------------------------------------------------------
# 1-2. bootstrap, configure, build

def cuda_path_env():
    env = dict(os.environ)
    if not shutil.which("nvcc") and os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
        env["PATH"] = env.get("PATH", "") + ":/usr/local/cuda/bin"
    return env


def build(build_dir, chapters, jobs):
    env = cuda_path_env()
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        cmd = ["cmake", "--preset", "default"]
        if os.path.abspath(build_dir) != os.path.join(ROOT, "build"):
            cmd += ["-B", build_dir]
        run(cmd, cwd=ROOT, env=env)
    targets = [c["slug"] for c in chapters]
    r = subprocess.run(["cmake", "--build", build_dir, "--target", "help"], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    known = set(re.findall(r"^(\S+?):", r.stdout, re.M)) | set(re.findall(r"^\.\.\. (\S+)", r.stdout, re.M))
    missing = [t for t in targets if known and t not in known]
    if missing:
        die("no CMake target for " + ", ".join(missing) + ": each chapter needs its line "
            "add_chapter(NN name) in CMakeLists.txt")
    run(["cmake", "--build", build_dir, "-j", str(jobs), "--target"] + targets, cwd=ROOT, env=env)


# ---------------------------------------------------------------------------
# 3. run every chapter and its twin

def torch_version():
    if not os.access(TORCH_PYTHON, os.X_OK):
        return None, f"{TORCH_PYTHON} not found"
    r = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().split("\n") or [""])[-1]
        return None, f"torch is not importable by {TORCH_PYTHON} ({last})"
    return r.stdout.strip(), None


def capture(cmd, cwd, out_path, timeout):
    """Runs cmd in cwd with stdout and stderr (line-buffered) into out_path."""
    full = (["stdbuf", "-oL", "-eL"] if shutil.which("stdbuf") else []) + cmd
    t0 = time.time()
    with open(out_path, "w", encoding="utf-8") as out:
        try:
            r = subprocess.run(full, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, timeout=timeout)
            code = r.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    return code, time.time() - t0


def run_dirs(ch, run_root):
    """Where a chapter's runs go: {None: run/chNN, lang: run/chNN.lang for an edition's own run}."""
    return {None: os.path.join(run_root, ch["id"]),
            **{lang: os.path.join(run_root, f"{ch['id']}.{lang}") for lang in ch.get("editions", {})}}


def run_chapters(chapters, build_dir, run_root, quick, device, timeout):
    torch_ver, torch_why = torch_version()
    if torch_why:
        log(f"twins will not run: {torch_why}")
    summary = []
    for ch in chapters:
        exe = os.path.join(build_dir, ch["id"])
        if not os.access(exe, os.X_OK):
            die(f"{ch['id']}: no binary {exe} (build the target {ch['slug']})")
        flags = (["--quick"] if quick else ch["bookrun"]) + (["--device", device] if device != "auto" else [])
        for lang, d in run_dirs(ch, run_root).items():
            extra = ch["editions"][lang] if lang else []
            summary.append(run_one(ch, exe, d, flags + extra, quick, device, timeout, (torch_ver, torch_why)))
    return summary


def run_one(ch, exe, d, flags, quick, device, timeout, torch_info):
    """Runs a chapter and its twin with flags in the fresh folder d; returns the summary line."""
    cid = ch["id"]
    torch_ver, torch_why = torch_info
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    cmd = [exe] + flags + ["--metrics", f"{cid}.json"]
    shown = " ".join([f"./{cid}"] + flags)
    log(f"{cid}: {shown}")
    code, secs = capture(cmd, d, os.path.join(d, f"{cid}.out"), timeout)
    info = {"command": shown, "exit": code, "seconds": round(secs, 2), "quick": quick, "device": device}
    write_json(os.path.join(d, "run.json"), info)
    if code != 0:
        die(f"{cid} failed ({'timed out after %d s' % timeout if code == 'timeout' else 'exit status %s' % code}):"
            f" {' '.join(cmd)} in {d}\nlast lines of {os.path.join(d, cid + '.out')}:\n"
            + tail(os.path.join(d, f"{cid}.out")))
    if not os.path.exists(os.path.join(d, f"{cid}.json")):
        die(f"{cid} ran but wrote no --metrics file {os.path.join(d, cid + '.json')}")
    summary = f"{os.path.basename(d)} {secs:.1f} s"

    twin = {"ran": False}
    if not os.path.exists(ch["twin"]):
        twin["why"] = "no twin"
    elif torch_why:
        twin["why"] = torch_why
    else:
        tname = os.path.basename(ch["twin"])
        tcmd = [TORCH_PYTHON, ch["twin"]] + flags + ["--metrics", f"{cid}_pytorch.json"]
        tshown = " ".join(["python3", tname] + flags)
        log(f"{cid}: {tshown}")
        code, secs = capture(tcmd, d, os.path.join(d, f"{cid}_pytorch.out"), timeout)
        twin = {"ran": True, "command": tshown, "exit": code, "seconds": round(secs, 2), "torch": torch_ver}
        if code != 0:
            write_json(os.path.join(d, "twin.json"), twin)
            die(f"{cid}'s twin failed (exit status {code}): {' '.join(tcmd)} in {d}\nlast lines:\n"
                + tail(os.path.join(d, f"{cid}_pytorch.out")))
        summary += f", twin {secs:.1f} s"
    write_json(os.path.join(d, "twin.json"), twin)
    return summary


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


# ---------------------------------------------------------------------------
# 5. Pandoc

def from_format(lang):
    # Pandoc's smart quotes guess wrong next to CJK characters; book.lua pairs
    # the Chinese edition's quotes itself (BOOK_LANG=zh).
    return "markdown-smart" if lang == "zh" else "markdown"


def lang_env(lang):
    return {**os.environ, **READER_ENV, "BOOK_LANG": lang}


def pandoc(args, lang, cwd=None):
    cmd = ["pandoc"] + args
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=lang_env(lang))
    if r.returncode != 0:
        die(f"pandoc failed (exit {r.returncode}): {' '.join(cmd)}\n{r.stderr.strip()}")
    warnings = [t for t in r.stderr.split("\n") if t.strip()]
    return warnings


def page_name(ch):
    return f"{ch['slug']}.html"


def nav_html(lang, pages, i, search=True, target=None):
    """The bar on a page: book title (index), contents, previous/next, the search box (the top
    bar only), the other language. target: the page's file when it is not one of pages."""
    t = TEXT[lang]
    other = "en" if lang == "zh" else "zh"
    cur = pages[i] if i is not None else None
    parts = [f'<a class="title" href="index.html">{html.escape(t["book"])}</a>',
             f'<a href="index.html">{t["contents"]}</a>']
    perf = next((p for p in pages if p.get("appendix")), None)
    if perf and perf is not cur:
        parts.append(f'<a class="appendix" href="{perf["file"]}">{appendix.WORDS[lang]["nav"]}</a>')
    if i is not None:
        if i > 0:
            p = pages[i - 1]
            parts.append(f'<a rel="prev" href="{p["file"]}" title="{html.escape(strip_md(p["titles"][lang]))}">'
                         f'← {t["prev"]}</a>')
        else:
            parts.append(f'<span class="disabled">← {t["prev"]}</span>')
        if i + 1 < len(pages):
            p = pages[i + 1]
            parts.append(f'<a rel="next" href="{p["file"]}" title="{html.escape(strip_md(p["titles"][lang]))}">'
                         f'{t["next"]} →</a>')
        else:
            parts.append(f'<span class="disabled">{t["next"]} →</span>')
    parts.append('<span class="spacer"></span>')
    if search:
        w = reader.WORDS[lang]
        parts.append(f'<form class="search" action="search.html" role="search">'
                     f'<input type="search" name="q" placeholder="{w["search_placeholder"]}" '
                     f'aria-label="{w["search"]}" autocomplete="off"></form>')
    target = target or (cur["file"] if cur else "index.html")
    parts.append(f'<a class="lang" hreflang="{other}" lang="{other}" href="../{other}/{target}">'
                 f'{TEXT[lang]["other"]}</a>')
    return "<nav>" + " ".join(parts) + "</nav>"


def html_args(lang, title, navbar, footbar=None, toc=False, searchpage=False):
    extra = ["-V", f"footbar={footbar if footbar is not None else navbar}"]
    if toc:
        extra += ["--toc", "--toc-depth", "2", "-V", f"toc-title={reader.WORDS[lang]['toc']}"]
    if searchpage:
        extra += ["-V", "searchpage=true"]
    return ["--from", from_format(lang), "--to", "html5", "--standalone",
            "--template", os.path.join(BOOK, "template.html"),
            "--lua-filter", os.path.join(BOOK, "book.lua"),
            "--lua-filter", os.path.join(BOOK, "reader.lua")] + extra + [
            "--mathml", "--highlight-style", "tango", "--section-divs", "--wrap", "none",
            "--css", "book.css",
            "-V", f"lang={'zh-CN' if lang == 'zh' else 'en'}",
            "-V", f"pagetitle={html.escape(strip_md(title))}",
            "-V", f"booktitle={html.escape(TEXT[lang]['book'])}",
            "-V", f"navbar={navbar}"]



def extra_page(lang, name):
    """book/NAME.LANG.md (preface, instructors) when it exists."""
    p = os.path.join(BOOK, f"{name}.{lang}.md")
    return p if os.path.exists(p) else None


def md_title(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = weave.first_heading(lines)
    return weave.heading_text(lines[i]) if i is not None else os.path.basename(path)


def h2s(html_path):
    """[(id, text)] of a page's level-2 headings, for the contents page."""
    with open(html_path, encoding="utf-8") as f:
        s = f.read()
    out = []
    for m in re.finditer(r'<section id="([^"]+)"\s+class="level2[^"]*">\s*<h2>(.*?)</h2>', s, re.S):
        out.append((m.group(1), re.sub(r"<[^>]+>", "", m.group(2)).strip()))
    return out


def render_html(out, md_dir, metas, info, gpu, pdfs):
    """pdfs: whether this build makes the PDFs (they are written while the HTML is)."""
    pages = [{"file": page_name({"slug": m["slug"]}), "md": m["id"], "titles": m["titles"]} for m in metas]
    for lang in LANGS:
        ins = extra_page(lang, "instructors")
        lang_pages = list(pages)
        perf = os.path.join(md_dir, f"{appendix.PAGE}.{lang}.md")
        if os.path.exists(perf):
            lang_pages.append({"file": f"{appendix.PAGE}.html", "md": None, "src": perf, "appendix": True,
                               "titles": {l: appendix.title(l) for l in LANGS}})
        if ins:
            lang_pages.append({"file": "instructors.html", "md": None, "src": ins,
                               "titles": {l: md_title(extra_page(l, "instructors") or ins) for l in LANGS}})
        d = os.path.join(out, lang)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for asset in ("book.css", "book.js"):
            shutil.copyfile(os.path.join(BOOK, asset), os.path.join(d, asset))
        fig_src = os.path.join(md_dir, "figures")
        if os.path.isdir(fig_src):
            os.makedirs(os.path.join(d, "figures"))
            for fn in sorted(os.listdir(fig_src)):
                if fn.endswith(f".{lang}.svg") or (fn.endswith((".png", ".jpg", ".jpeg", ".svg"))
                                                   and not re.search(r"\.(zh|en)\.svg$", fn)):
                    shutil.copyfile(os.path.join(fig_src, fn), os.path.join(d, "figures", fn))
        for i, p in enumerate(lang_pages):
            src = os.path.join(md_dir, f"{p['md']}.{lang}.md") if p["md"] else p["src"]
            warnings = pandoc([src, "-o", os.path.join(d, p["file"])] +
                              html_args(lang, p["titles"][lang], nav_html(lang, lang_pages, i),
                                        nav_html(lang, lang_pages, i, search=False), toc=True), lang)
            for w in warnings:
                log(f"pandoc ({lang}/{p['file']}): {w}")
        write_reader_pages(lang, d, md_dir, lang_pages)
        write_index(lang, d, lang_pages, info, gpu)
        reader.write_search_index(d, [(p["file"], strip_md(p["titles"][lang])) for p in lang_pages] +
                                  [("glossary.html", reader.WORDS[lang]["glossary"]),
                                   ("index.html", TEXT[lang]["book"])],
                                  aliases=termbase.aliases(lang, termbase.load(ROOT)))
    shutil.copyfile(os.path.join(BOOK, "book.css"), os.path.join(out, "book.css"))
    has_appendix = os.path.exists(os.path.join(md_dir, f"{appendix.PAGE}.en.md"))
    with open(os.path.join(out, "index.html"), "w", encoding="utf-8") as f:
        f.write(reader.landing_page(metas, reader.load_meta(BOOK), gpu, info,
                                    {l: TEXT[l]["book"] for l in LANGS},
                                    {l: pdfs or os.path.exists(os.path.join(out, f"workbook-{l}.pdf")) for l in LANGS},
                                    appendix={l: (f"{l}/{appendix.PAGE}.html", appendix.WORDS[l]["nav"])
                                              for l in LANGS} if has_appendix else None))


def write_reader_pages(lang, d, md_dir, pages):
    """glossary.html (from md_dir/glossary.LANG.md) and search.html of one edition."""
    w = reader.WORDS[lang]
    src = os.path.join(md_dir, f"glossary.{lang}.md")
    pandoc([src, "-o", os.path.join(d, "glossary.html")] +
           html_args(lang, w["glossary"], nav_html(lang, pages, None, target="glossary.html"),
                     nav_html(lang, pages, None, search=False, target="glossary.html"), toc=True), lang)
    src = os.path.join(md_dir, f"search.{lang}.md")
    with open(src, "w", encoding="utf-8") as f:
        f.write(reader.search_md(lang))
    pandoc([src, "-o", os.path.join(d, "search.html")] +
           html_args(lang, w["search"], nav_html(lang, pages, None, target="search.html"),
                     nav_html(lang, pages, None, search=False, target="search.html"), searchpage=True), lang)


def write_index(lang, d, pages, info, gpu):
    t = TEXT[lang]
    w = reader.WORDS[lang]
    meta = reader.load_meta(BOOK)
    md = [f"# {t['book']} {{#top}}", ""]
    md.append(f"*{t['subtitle']}* · {t['edition']} · [{t['pdf']}](../workbook-{lang}.pdf) · "
              f"[{w['glossary']}](glossary.html) · [{w['search']}](search.html)")
    md.append("")
    pre = extra_page(lang, "preface")
    if pre:
        with open(pre, encoding="utf-8") as f:
            body = f.read().split("\n")
        i = weave.first_heading(body)
        if i is not None:  # the preface's own title becomes a section of the index page
            body[i] = "#" + body[i]
        md += body + [""]
    md += [f"## {t['contents']} {{#contents}}", "", "::: {.toc}"]
    chapters = [p for p in pages if p["md"]]
    # a bullet list: the titles carry their own numbers ("Chapter 1.", "第 1 章")
    for p in chapters:
        md += reader.index_entry(lang, {"id": p["md"], "slug": p["file"][:-len(".html")], "titles": p["titles"]},
                                 meta.get(p["md"]) or {}, gpu.get(p["md"], False))
        for hid, text in h2s(os.path.join(d, p["file"])):
            md.append(f"    - [{text}]({p['file']}#{hid})")
        md.append("")
    extras = [p for p in pages if not p["md"]]  # the performance appendix, the instructors' page
    md += [f"- [{p['titles'][lang]}]({p['file']})" for p in extras]
    md += [f"- [{w['glossary']}](glossary.html)", ":::", "", "::: {.editions}",
           t["built"].format(date=info["date"], commit=info["commit"], device=info["device"],
                             quick=t["quick"] if info["quick"] else ""),
           ":::", ""]
    src = os.path.join(d, "index.md")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n".join(md))
    pandoc([src, "-o", os.path.join(d, "index.html")] +
           html_args(lang, t["book"], nav_html(lang, pages, None), nav_html(lang, pages, None, search=False)),
           lang)
    os.unlink(src)


def pdf_job(lang, out, md_dir, metas, info):
    """Starts Pandoc for one PDF edition; returns (Popen, log path)."""
    t = TEXT[lang]
    meta = {
        "title": t["book"],
        "subtitle": t["subtitle"],
        "date": f"{info['date']} · {info['commit']}",
        "documentclass": "report",
        "classoption": ["a4paper", "oneside", "openany"],
        "geometry": ["margin=2.2cm"],
        "fontsize": "10pt",
        "toc": True,
        "toc-depth": 2,
        "colorlinks": True,
        # DejaVu covers the symbols the chapters use (≥, →, ×, subscripts)
        # that Latin Modern lacks; Noto CJK sets the Chinese.
        "mainfont": "DejaVu Serif",
        "sansfont": "DejaVu Sans",
        "monofont": "DejaVu Sans Mono",
        "monofontoptions": ["Scale=0.9"],
        "CJKmainfont": "Noto Serif CJK SC",
        "CJKsansfont": "Noto Sans CJK SC",
        "CJKmonofont": "Noto Sans Mono CJK SC",
        "lang": "zh-CN" if lang == "zh" else "en-US",
        # pandoc 2.17 maps zh-CN to a babel name that babel lacks: say it ourselves.
        "babel-lang": "chinese-simplified" if lang == "zh" else "english",
        "toc-title": t["contents"],
    }
    tmp = os.path.join(out, "pdf")
    os.makedirs(tmp, exist_ok=True)
    meta_path = os.path.join(tmp, f"meta-{lang}.json")
    with open(meta_path, "w", encoding="utf-8") as f:
        json.dump(meta, f, ensure_ascii=False)
    inputs = []
    pre = extra_page(lang, "preface")
    if pre:
        inputs.append(pre)
    inputs += [os.path.join(md_dir, f"{m['id']}.{lang}.md") for m in metas]
    perf = os.path.join(md_dir, f"{appendix.PAGE}.{lang}.md")
    if os.path.exists(perf):
        inputs.append(perf)
    glossary = os.path.join(md_dir, f"glossary.{lang}.md")
    if os.path.exists(glossary):
        inputs.append(glossary)
    ins = extra_page(lang, "instructors")
    if ins:
        inputs.append(ins)
    header = os.path.join(tmp, f"header-{lang}.tex")
    with open(os.path.join(BOOK, "pdf-header.tex"), encoding="utf-8") as f:
        text = f.read()
    if lang == "en":
        # xeCJK sets curly quotes, dashes and the ellipsis full-width in the
        # CJK font ("Python’ s"); English text wants them from the Latin font.
        text += '\\xeCJKDeclareCharClass{Default}{"2018,"2019,"201C,"201D,"2013,"2014,"2026}\n'
    with open(header, "w", encoding="utf-8") as f:
        f.write(text)
    pdf = os.path.join(out, f"workbook-{lang}.pdf")
    args = ["pandoc", "--from", from_format(lang), "--metadata-file", meta_path,
            "--pdf-engine", "xelatex", "--top-level-division", "chapter",
            "--lua-filter", os.path.join(BOOK, "book.lua"),
            "--lua-filter", os.path.join(BOOK, "reader.lua"),
            "--include-in-header", header,
            "--highlight-style", "tango", "--resource-path", md_dir,
            "-o", pdf] + inputs
    logp = os.path.join(tmp, f"pandoc-{lang}.log")
    log("$ " + " ".join(args))
    with open(logp, "w") as logf:
        proc = subprocess.Popen(args, cwd=md_dir, stdout=logf, stderr=subprocess.STDOUT, env=lang_env(lang))
    return proc, logp, pdf


def add_reader_tools(out, md_dir, metas, repo_url):
    """Checks book/chapters.json, writes each chapter's header box and terms into its woven
    Markdown (both outputs), the glossary's Markdown, and what book/reader.lua reads; returns
    {chNN: bool} (GPU recordings)."""
    meta = reader.load_meta(BOOK)
    problems = reader.validate(meta, [m["id"] for m in metas])
    if problems:
        die("\n".join(problems))
    for m in metas:
        for lang in LANGS:
            reader.augment_chapter(os.path.join(md_dir, f"{m['id']}.{lang}.md"), lang, m, meta[m["id"]],
                                   weave.first_heading)
    for lang in LANGS:
        with open(os.path.join(md_dir, f"glossary.{lang}.md"), "w", encoding="utf-8") as f:
            f.write(reader.glossary_md(lang, metas, meta))
            f.write("\n" + termbase.glossary_md(lang, termbase.load(ROOT), [
                (t[lang]["term"], f"glossary-{t['id']}") for m in metas for t in meta[m["id"]].get("terms", [])]))
    READER_ENV.update(reader.lua_env(metas, reader.repo_base(ROOT, os.path.join(out, "zh"), repo_url), repo_url))
    return reader.gpu_recordings(out, os.path.join(BOOK, "recorded"), [m["id"] for m in metas])


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True)
    if r.returncode != 0:
        return os.environ.get("CT_COMMIT", "unknown")[:10]
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("+" if dirty else "")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tools/book", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[2:]))
    p.add_argument("--quick", action="store_true", help="run the chapters with --quick (the tests do)")
    p.add_argument("--no-bootstrap", action="store_true", help="do not run tools/bootstrap")
    p.add_argument("--no-build", action="store_true", help="use the binaries already in the build dir")
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"),
                   help="CMake build dir (default: build/, the default preset's)")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "book"), help="output dir (default: build/book)")
    p.add_argument("--only", help="comma-separated chapters (ch01,ch02): build a partial book (default: every chapter)")
    p.add_argument("--reuse-runs", action="store_true",
                   help="do not run the chapters: weave and render from the captures already in OUT/run")
    p.add_argument("--device", default="auto", help="--device for every chapter and twin (default: auto; the book then runs the chapters' bookrun flags, or --quick)")
    p.add_argument("--no-pdf", action="store_true", help="HTML only")
    p.add_argument("--no-html", action="store_true", help="PDF only")
    p.add_argument("--repo-url", default=os.environ.get("BOOK_REPO_URL", ""),
                   help="base URL of the repository's files (e.g. https://HOST/OWNER/REPO/blob/main/): the "
                        "chapters' source and twin links point there (default: relative paths from the "
                        "HTML pages to this checkout; the PDF then names the files without a link)")
    p.add_argument("--timeout", type=int, default=900, help="seconds a chapter (and its twin) may run (default: 900)")
    p.add_argument("--strict", action="store_true", default=os.environ.get("CT_BOOK_STRICT") == "1",
                   help="fail when a chapter's run contradicts a {{claim}} in its prose (default: a warning "
                        "and a note beside the sentence; on with CT_BOOK_STRICT=1; the tests pass it)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2, help="build jobs (default: the CPU count)")
    return p.parse_args(argv)


def weave_chapters(chapters, run_root, md_dir, strict=False):
    """Each chapter woven from its source and its captured run into md_dir: [its meta]. A claim the
    run contradicts is logged (strict: it fails the book)."""
    shutil.rmtree(md_dir, ignore_errors=True)
    metas = []
    for c in chapters:
        dirs = run_dirs(c, run_root)
        warn = lambda msg: log(f"weave: warning: {msg}")  # noqa: E731
        try:  # an edition with a run of its own first: the shared run's meta is the one kept
            for lang in (lang for lang in dirs if lang):
                weave.weave(c["source"], dirs[lang], md_dir, langs=(lang,), strict=strict, warn=warn)
            meta, _ = weave.weave(c["source"], dirs[None], md_dir, langs=tuple(l for l in weave.LANGS if l not in dirs),
                                  strict=strict, warn=warn)
        except weave.WeaveError as e:
            die(str(e))
        metas.append(meta)
    return metas


def book_info(chapters, run_root, quick):
    """The book's facts: date, commit, the device of the first chapter's run, --quick."""
    first = os.path.join(run_root, chapters[0]["id"], f"{chapters[0]['id']}.out")
    device = "?"
    with open(first, encoding="utf-8", errors="replace") as f:
        for t in f:
            if t.startswith("device:"):
                device = t[len("device:"):].strip().split(" (")[0]
                break
    info = {"date": datetime.date.today().isoformat(), "commit": git_commit(), "device": device,
            "quick": weave.load_json(os.path.join(run_root, chapters[0]["id"], "run.json")).get("quick", quick)}
    return info


def performance_appendix(md_dir, metas):
    """The performance appendix (tools/ctools/book_appendix.py), its warnings logged."""
    try:
        perf = appendix.build(ROOT, md_dir, {m["id"]: {"number": m["number"], "title": m["titles"]} for m in metas},
                              weave.gnuplot_terminals)
    except appendix.AppendixError as e:
        die(str(e))
    for p in perf["problems"]:  # the page shows such a row in the bench's words; book.appendix_text fails
        log(f"performance appendix: warning: {p}")
    log("performance appendix: " + (", ".join(perf["recordings"]) or "no bench recording (GPU rows shown as "
                                    "not yet measured)"))
    for f, why in perf["ignored"]:
        log(f"performance appendix: left out book/recorded/{f}: {why}")


def render(a, out, md_dir, metas, info, gpu, step):
    """The PDFs (pandoc in the background) and the HTML; returns the PDF jobs."""
    jobs = []
    if not a.no_pdf:
        t_pdf = time.time()
        jobs = [pdf_job(lang, out, md_dir, metas, info) for lang in LANGS]
    if not a.no_html:
        t0 = time.time()
        render_html(out, md_dir, metas, info, gpu, not a.no_pdf)
        step("html", t0)
    failed = []
    for proc, logp, pdf in jobs:
        if proc.wait() != 0 or not os.path.exists(pdf):
            failed.append(f"{pdf}: pandoc/xelatex failed; its log {logp}:\n{tail(logp, 40)}")
        else:
            with open(logp, encoding="utf-8", errors="replace") as f:
                for t in f:
                    if t.strip():
                        log(f"pandoc ({os.path.basename(pdf)}): {t.rstrip()}")
    if jobs:
        step("pdf", t_pdf)
    if failed:
        die("\n".join(failed))
    return jobs


def main(argv=None):
    a = parse_args(argv)
    t_start = time.time()
    out = os.path.abspath(a.out)
    build_dir = os.path.abspath(a.build_dir)
    steps = []

    def step(name, t0):
        steps.append(f"{name} {time.time() - t0:.0f} s")

    only = set(a.only.split(",")) if a.only else None
    chapters = discover_chapters(only)
    if not chapters:
        die("no chapters found" + (f" matching --only {a.only}" if only else " (chapters/chNN_name/chNN_name.c)"))
    log("chapters: " + " ".join(c["id"] for c in chapters))

    # Sources first: a malformed chapter fails before anything slow runs.
    for c in chapters:
        try:
            weave.check(c["source"])
        except weave.WeaveError as e:
            die(str(e))

    if not a.no_bootstrap:
        t0 = time.time()
        run([os.path.join(ROOT, "tools", "bootstrap"), "--group", "build,test,book"], cwd=ROOT)
        step("bootstrap", t0)
    need = ["pandoc", "gnuplot", "dot"] + ([] if a.no_pdf else ["xelatex"])  # dot: schematic figures
    missing = [x for x in need if not shutil.which(x)]
    if missing:
        die(f"missing {', '.join(missing)}: run tools/bootstrap --group book")

    if not a.no_build and not a.reuse_runs:
        t0 = time.time()
        build(build_dir, chapters, a.jobs)
        step("build", t0)

    t0 = time.time()
    run_root = os.path.join(out, "run")
    os.makedirs(run_root, exist_ok=True)
    if a.reuse_runs:
        ran = ["reused"]
        for c in chapters:
            for d in run_dirs(c, run_root).values():
                if not os.path.exists(os.path.join(d, f"{c['id']}.out")):
                    die(f"--reuse-runs: no capture of {c['id']} in {d}")
    else:
        ran = run_chapters(chapters, build_dir, run_root, a.quick, a.device, a.timeout)
        step("run", t0)

    t0 = time.time()
    md_dir = os.path.join(out, "md")
    metas = weave_chapters(chapters, run_root, md_dir, a.strict)
    step("weave+figures", t0)

    info = book_info(chapters, run_root, a.quick)
    write_json(os.path.join(out, "book.json"), {**info, "chapters": metas})
    # which chapters have GPU recordings (tools/weave writes it; the landing page reads it)
    shutil.copyfile(os.path.join(md_dir, "recordings.json"), os.path.join(out, "recordings.json"))
    gpu = add_reader_tools(out, md_dir, metas, a.repo_url)
    t0 = time.time()
    performance_appendix(md_dir, metas)
    step("appendix", t0)

    jobs = render(a, out, md_dir, metas, info, gpu, step)

    log("steps: " + ", ".join(steps) + f"; total {time.time() - t_start:.0f} s")
    log("runs: " + "; ".join(ran))
    log("the book:")
    if not a.no_html:
        for lang in LANGS:
            print(f"  {os.path.join(out, lang, 'index.html')}")
    for _, _, pdf in jobs:
        print(f"  {pdf}")
    print(f"  chapters' captured output and metrics: {run_root}/chNN/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
