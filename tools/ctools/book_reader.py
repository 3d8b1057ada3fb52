# SPDX-License-Identifier: MIT
"""tools/ctools/book_reader.py: the reader's tools around the chapters' text, for tools/book.

What it adds: the landing page (the bilingual table of contents: each
chapter's one-line summary, whether it has GPU recordings, links to both
editions and both PDFs), a header box at the top of each chapter (what you
will learn, the PyTorch APIs it rebuilds, prerequisites, whether a GPU is
needed, links to its source and its twin, its terms), the chapter's terms
before its exercises, the glossary page, the search page and the prebuilt
search index each edition searches offline (search-index.js, read by
book/book.js).

Invariant: everything a reader sees here comes from book/chapters.json and
from the built pages themselves; a chapter missing from chapters.json, or a
text missing in one language, stops the build (validate() names it), so the
two editions always show the same things. Links between pages are written as
chapter:/repo:/glossary: targets that book/reader.lua resolves per output
format. Standard library only.
"""
import glob
import html
import html.parser
import json
import os
import re

from .text import strip_md  # shared with other tools

LANGS = ("zh", "en")

WORDS = {
    "zh": {
        "learn": "你将学到", "apis": "本章重写的 PyTorch API", "prereq": "预备知识", "gpu": "需要 GPU 吗？", "colon": "：", "sep": "、",
        "source": "源代码", "twin": "PyTorch 孪生程序", "terms": "本章术语",
        "terms_title": "本章术语", "glossary": "术语表", "search": "搜索",
        "glossary_intro": "全书各章引入的术语，按章排列；每条链接到引入它的那一章。",
        "introduced": "（见{chapter}）", "none": "无",
        "gpu_yes": "有 GPU 录制", "gpu_no": "只有 CPU 输出",
        "gpu_yes_long": "本章有在 GPU 上录制的输出。",
        "gpu_no_long": "本章的输出都来自 CPU（还没有 GPU 录制）。",
        "recordings_sum": "有 GPU 录制的章节：{n} / {total}。",
        "editions": "版本", "html": "网页版", "pdf": "PDF",
        "search_placeholder": "搜索本书", "search_intro": "在本版中搜索（离线，不联网）：",
        "chapter_word": "第 {n} 章", "toc": "本页内容", "remember": "要点回顾",
    },
    "en": {
        "learn": "What you will learn", "apis": "PyTorch APIs it rebuilds", "prereq": "Prerequisites",
        "gpu": "Is a GPU needed?", "colon": ": ", "sep": " · ", "source": "Source", "twin": "PyTorch twin", "terms": "Terms",
        "terms_title": "Terms in this chapter", "glossary": "Glossary", "search": "Search",
        "glossary_intro": "The terms the chapters introduce, chapter by chapter; each links to the chapter that introduces it.",
        "introduced": " (see {chapter})", "none": "none",
        "gpu_yes": "GPU recordings", "gpu_no": "CPU outputs only",
        "gpu_yes_long": "This chapter has outputs recorded on a GPU.",
        "gpu_no_long": "This chapter's outputs all come from a CPU (no GPU recording yet).",
        "recordings_sum": "Chapters with GPU recordings: {n} of {total}.",
        "editions": "Editions", "html": "HTML", "pdf": "PDF",
        "search_placeholder": "Search the book", "search_intro": "Search this edition (offline, no network):",
        "chapter_word": "Chapter {n}", "toc": "On this page", "remember": "What to remember",
    },
}

META_FILE = "chapters.json"


# ---------------------------------------------------------------------------
# book/chapters.json

def load_meta(book_dir):
    """book/chapters.json's "chapters" ({chNN: {...}}); {} when the file is absent."""
    path = os.path.join(book_dir, META_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        meta = json.load(f).get("chapters", {})
    remember = os.path.join(book_dir, "remember.json")     # each chapter's "what to remember"
    if os.path.exists(remember):
        with open(remember, encoding="utf-8") as f:
            for cid, r in json.load(f).get("chapters", {}).items():
                if cid in meta:
                    meta[cid]["remember"] = r
    return meta


def validate(meta, chapter_ids):
    """Problems with chapters.json for these chapters, as sentences naming the fix ([] if none)."""
    problems = []

    def both(obj, where, kind=str):
        for lang in LANGS:
            v = obj.get(lang) if isinstance(obj, dict) else None
            if not v or not isinstance(v, kind):
                problems.append(f"book/chapters.json: {where} has no {lang} text")

    seen = {}
    for cid in chapter_ids:
        m = meta.get(cid)
        if m is None:
            problems.append(f"book/chapters.json: no entry for {cid} (add its summary, learn, apis, "
                            f"prerequisites, gpu and terms)")
            continue
        both(m.get("summary"), f"{cid}.summary")
        both(m.get("learn"), f"{cid}.learn", list)
        both(m.get("remember"), f"{cid} in book/remember.json", list)
        if not m.get("apis"):
            problems.append(f"book/chapters.json: {cid}.apis is empty")
        pre = m.get("prerequisites") or {}
        both(pre, f"{cid}.prerequisites")
        for p in pre.get("chapters", []):
            if not re.match(r"^ch\d+$", p) or int(p[2:]) >= int(cid[2:]):
                problems.append(f"book/chapters.json: {cid}.prerequisites names {p}, not an earlier chapter")
        gpu = m.get("gpu") or {}
        both(gpu, f"{cid}.gpu")
        if not isinstance(gpu.get("needed"), bool):
            problems.append(f"book/chapters.json: {cid}.gpu.needed must be true or false")
        for t in m.get("terms", []):
            tid = t.get("id", "")
            if not re.match(r"^[a-z0-9][a-z0-9-]*$", tid):
                problems.append(f"book/chapters.json: {cid} has a term id {tid!r} (lower case, digits, '-')")
            elif tid in seen:
                problems.append(f"book/chapters.json: term {tid!r} is defined in {seen[tid]} and {cid}")
            seen[tid] = cid
            for lang in LANGS:
                e = t.get(lang) or {}
                if not e.get("term") or not e.get("def"):
                    problems.append(f"book/chapters.json: {cid} term {tid!r} lacks its {lang} term or def")
    return problems


# ---------------------------------------------------------------------------
# which chapters have GPU recordings

def gpu_recordings(out, recorded_dir, chapter_ids):
    """{chNN: bool}: whether GPU transcripts of the chapter are kept. From OUT/recordings.json
    (tools/weave writes it from the transcripts' headers) when the build has one; otherwise
    from book/recorded/'s file names, chNN-DEVICE-DATE.txt, where a DEVICE that says cpu is a
    CPU run."""
    path = os.path.join(out, "recordings.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            recs = json.load(f)
        return {cid: bool((recs.get(cid) or {}).get("gpu")) for cid in chapter_ids}
    found = {cid: False for cid in chapter_ids}
    for p in glob.glob(os.path.join(recorded_dir, "ch*-*.txt")):
        m = re.match(r"^(ch\d+)-(.+)-\d{4}-\d{2}-\d{2}\.txt$", os.path.basename(p))
        if m and m.group(1) in found and "cpu" not in m.group(2).lower().split("-"):
            found[m.group(1)] = True
    return found


# ---------------------------------------------------------------------------
# the environment book/reader.lua reads

def lua_env(metas, repo_base, repo_url):
    """BOOK_CHAPTERS, BOOK_REPO_BASE, BOOK_REPO_URL for book/reader.lua."""
    pages = ";".join(f"{m['number']}={m['slug']}.html" for m in metas)
    return {"BOOK_CHAPTERS": pages, "BOOK_REPO_BASE": repo_base, "BOOK_REPO_URL": repo_url or ""}


def repo_base(root, page_dir, repo_url):
    """Where an HTML page finds the repository's files: the configured URL (ending in '/'), or
    the relative path from the page's folder to the checkout."""
    if repo_url:
        return repo_url.rstrip("/") + "/"
    return os.path.relpath(root, page_dir).replace(os.sep, "/") + "/"


# ---------------------------------------------------------------------------
# the chapter's header box and terms (Markdown, both outputs)

def header_card(lang, m, cm):
    """The box under a chapter's title. m: weave's meta of the chapter; cm: its chapters.json entry."""
    w = WORDS[lang]
    c, sep = w["colon"], w["sep"]
    out = ["::: {.chapter-card}", f"**{w['learn']}**", ""]
    out += [f"- {t}" for t in cm["learn"][lang]]
    out += ["", f"**{w['apis']}**{c}" + sep.join(inline_code(a) for a in cm["apis"]), ""]
    out += [f"**{w['prereq']}**{c}{cm['prerequisites'][lang]}", ""]
    out += [f"**{w['gpu']}** {cm['gpu'][lang]}", ""]
    links = [f"**{w['source']}**{c}[{inline_code(m['source'])}](repo:{m['source']})"]
    if m.get("twin"):
        links.append(f"**{w['twin']}**{c}[{inline_code(os.path.basename(m['twin']))}](repo:{m['twin']})")
    out += ["\n\n".join(links), ""]
    if cm.get("terms"):
        out += [f"**{w['terms']}**{c}" + sep.join(f"[{t[lang]['term']}](#term-{t['id']})" for t in cm["terms"]), ""]
    out += [":::"]
    return "\n".join(out)


def terms_section(lang, m, cm):
    """'Terms in this chapter': a definition list, each term with its anchor term-ID."""
    w = WORDS[lang]
    out = [f"## {w['terms_title']} {{#{m['id']}-terms .terms}}", ""]
    for t in cm.get("terms", []):
        e = t[lang]
        out += [f"[{e['term']}]{{#term-{t['id']}}}", f":   {e['def']}", ""]
    return "\n".join(out)


def remember_section(lang, m, cm):
    """'What to remember': the chapter's takeaways (book/remember.json), before its terms."""
    out = [f"## {WORDS[lang]['remember']} {{#{m['id']}-remember .remember}}", ""]
    return "\n".join(out + [f"- {t}" for t in cm["remember"][lang]])


def inline_code(s):
    n = max([len(r) for r in re.findall(r"`+", s)] + [0]) + 1
    tick = "`" * n
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{tick}{pad}{s}{pad}{tick}"


def augment_chapter(md_path, lang, m, cm, first_heading):
    """Writes the header box after the title (and after the CPU-only note that may follow it)
    and the terms before the exercises ('## 练习' / '## Exercises'), or at the end."""
    with open(md_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = first_heading(lines)
    if i is None:
        raise ValueError(f"{md_path}: no title")
    j = i + 1
    while j < len(lines) and not lines[j].strip():
        j += 1
    if j < len(lines) and lines[j].startswith("::: {.note .cpu-only}"):
        while j < len(lines) and lines[j].strip() != ":::":
            j += 1
        j += 1
    lines[j:j] = ["", header_card(lang, m, cm), ""]
    if cm.get("terms") or cm.get("remember"):
        ex = next((k for k, t in enumerate(lines) if re.match(r"^## (练习|Exercises)\b", t)), None)
        section = ["", remember_section(lang, m, cm), ""] if cm.get("remember") else []
        section += ["", terms_section(lang, m, cm), ""] if cm.get("terms") else []
        if ex is None:
            lines += section
        else:
            lines[ex:ex] = section
    with open(md_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


# ---------------------------------------------------------------------------
# glossary and search pages (Markdown)

def glossary_md(lang, metas, meta):
    """Every chapter's terms, chapter by chapter, each linking to its chapter's definition."""
    w = WORDS[lang]
    out = [f"# {w['glossary']} {{#glossary}}", "", w["glossary_intro"], ""]
    for m in metas:
        cm = meta.get(m["id"]) or {}
        if not cm.get("terms"):
            continue
        out += [f"## {m['titles'][lang]} {{#glossary-{m['id']}}}", ""]
        for t in cm["terms"]:
            e = t[lang]
            where = f"[{w['chapter_word'].format(n=m['number'])}](chapter:{m['id']}#term-{t['id']})"
            out += [f"[{e['term']}]{{#glossary-{t['id']}}}",
                    f":   {e['def']}{w['introduced'].format(chapter=where)}", ""]
    return "\n".join(out)


def search_md(lang):
    w = WORDS[lang]
    return "\n".join([f"# {w['search']} {{#search}}", "", w["search_intro"], "",
                      "::: {#search-page}", ":::", ""])


# ---------------------------------------------------------------------------
# the search index: one entry per section of every page, prose only

class _Sections(html.parser.HTMLParser):
    """The sections of a built page: [(anchor, heading, text)], in order. Code blocks, output
    boxes, folded code, math, navigation and scripts are left out."""
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
            "track", "wbr", "param"}
    SKIP_TAGS = {"pre", "script", "style", "header", "footer", "nav", "math", "svg", "details", "button"}
    SKIP_CLASSES = {"outputs", "sourceCode", "chapter-card"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []          # (tag, skip, section index or None)
        self.sections = []       # [anchor, heading, [text]]
        self.in_heading = False

    def _skipping(self):
        return any(s for _, s, _ in self.stack)

    def _current(self):
        for _, _, sec in reversed(self.stack):
            if sec is not None:
                return sec
        return None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag in self.VOID:
            return
        skip = tag in self.SKIP_TAGS or bool(classes & self.SKIP_CLASSES)
        sec = None
        if tag == "section" and a.get("id"):
            self.sections.append([a["id"], "", []])
            sec = len(self.sections) - 1
        self.stack.append((tag, skip, sec))
        if tag in ("h1", "h2", "h3") and not self._skipping():
            self.in_heading = True

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self.stack:
            t, _, _ = self.stack.pop()
            if t == tag:
                break
        if tag in ("h1", "h2", "h3"):
            self.in_heading = False

    def handle_data(self, data):
        if self._skipping():
            return
        sec = self._current()
        if sec is None:
            return
        if self.in_heading:
            self.sections[sec][1] += data
        else:
            self.sections[sec][2].append(data)


def page_sections(path):
    p = _Sections()
    with open(path, encoding="utf-8") as f:
        p.feed(f.read())
    out = []
    for anchor, heading, text in p.sections:
        text = re.sub(r"\s+", " ", "".join(text)).strip()
        heading = re.sub(r"\s+", " ", heading).strip()
        if heading or text:
            out.append((anchor, heading, text))
    return out


def write_search_index(lang_dir, pages, aliases=None):
    """lang_dir/search-index.js: window.BOOK_SEARCH = {pages: [{f, t}], s: [[page, anchor,
    heading, text]]} for pages [(file, title)]. A script, not JSON, so that a page opened
    from the disk (file://) can load it without fetch()."""
    index = {"pages": [], "s": [], "a": aliases or {}}   # a: {synonym: [the book's words]} (termbase)
    for n, (file, title) in enumerate(pages):
        index["pages"].append({"f": file, "t": title})
        for anchor, heading, text in page_sections(os.path.join(lang_dir, file)):
            index["s"].append([n, anchor, heading, text])
    path = os.path.join(lang_dir, "search-index.js")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("// built by tools/book: the offline search index of this edition (book/book.js reads it)\n")
        f.write("window.BOOK_SEARCH = ")
        json.dump(index, f, ensure_ascii=False, separators=(",", ":"))
        f.write(";\n")
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------------------
# the landing page (OUT/index.html): the bilingual table of contents

def landing_page(metas, meta, gpu, info, book_titles, pdfs, appendix=None):
    """The HTML of OUT/index.html. metas: weave's metas in order; gpu: {chNN: bool};
    book_titles: {lang: title}; pdfs: {lang: bool} (whether each PDF was built); appendix:
    {lang: (href, title)} of the performance appendix, listed after the chapters, or None."""
    e = html.escape
    n_gpu = sum(1 for m in metas if gpu.get(m["id"]))
    rows = []
    for m in metas:
        cm = meta.get(m["id"]) or {}
        has = gpu.get(m["id"], False)
        badge = "gpu" if has else "cpu"
        summary = cm.get("summary", {})
        rows.append(
            f'<li class="chapter-entry" id="{e(m["id"])}">\n'
            f'<h2><a href="zh/{e(m["slug"])}.html" lang="zh-CN">{e(strip_md(m["titles"]["zh"]))}</a>'
            f'<br><a href="en/{e(m["slug"])}.html" lang="en">{e(strip_md(m["titles"]["en"]))}</a></h2>\n'
            f'<p class="summary" lang="zh-CN">{md_inline_html(summary.get("zh", ""))}</p>\n'
            f'<p class="summary" lang="en">{md_inline_html(summary.get("en", ""))}</p>\n'
            f'<p class="meta"><span class="badge {badge}" title="{e(WORDS["en"]["gpu_" + ("yes" if has else "no") + "_long"])}">'
            f'<span lang="zh-CN">{WORDS["zh"]["gpu_yes" if has else "gpu_no"]}</span> · '
            f'<span lang="en">{WORDS["en"]["gpu_yes" if has else "gpu_no"]}</span></span> '
            f'<a href="zh/{e(m["slug"])}.html" hreflang="zh" lang="zh-CN">中文</a> · '
            f'<a href="en/{e(m["slug"])}.html" hreflang="en">English</a></p>\n</li>')
    editions = []
    for lang, name in (("zh", "中文版"), ("en", "English edition")):
        parts = [f'<a href="{lang}/index.html" hreflang="{lang}" lang="{"zh-CN" if lang == "zh" else "en"}">{name}</a>']
        if pdfs.get(lang):
            parts.append(f'<a href="workbook-{lang}.pdf">PDF</a>')
        parts.append(f'<a href="{lang}/glossary.html">{WORDS[lang]["glossary"]}</a>')
        parts.append(f'<a href="{lang}/search.html">{WORDS[lang]["search"]}</a>')
        editions.append('<li>' + " · ".join(parts) + '</li>')
    after = ""
    if appendix:
        after = ('<p class="appendix-entry">' + " · ".join(
            f'<a href="{e(href)}" lang="{"zh-CN" if lang == "zh" else "en"}">{e(t)}</a>'
            for lang, (href, t) in appendix.items()) + "</p>")
    built = (f'{e(info["date"])} · <code>{e(info["commit"])}</code> · {e(info["device"])}'
             + (" · --quick" if info.get("quick") else ""))
    return LANDING.format(
        zh=e(book_titles["zh"]), en=e(book_titles["en"]), editions="\n".join(editions),
        rows="\n".join(rows), after=after, built=built,
        seeds_zh=e(SEEDS["zh"]), seeds_en=e(SEEDS["en"]),
        rec_zh=e(WORDS["zh"]["recordings_sum"].format(n=n_gpu, total=len(metas))),
        rec_en=e(WORDS["en"]["recordings_sum"].format(n=n_gpu, total=len(metas))))


# The seed tutorials, said once on the landing page (the preface and the glossary say it too).
SEEDS = {
    "zh": "各章说的“种子教程”是本书据以重写的五篇中文 PyTorch GPU 教程：王哲峰《PyTorch GPU训练 和 CUDA》（2022）、《PyTorch使用教程(11)-cuda的使用方法》、Byolio《用GPU加速PyTorch模型训练》（2024）、《PyTorch GPU 加速》和《GPU 使用》。"
          "各章纠正其中的说法时，先用自己的话转述原句。",
    "en": "\"The seed tutorials\" the chapters speak of are the five Chinese PyTorch GPU tutorials this book "
          "rebuilds: Wang Zhefeng's \"PyTorch GPU training and CUDA\" (2022), \"PyTorch tutorial (11): using CUDA\", Byolio's \"Accelerating PyTorch training with a GPU\" (2024), \"PyTorch GPU acceleration\" and \"Using the GPU\" (titles translated). Where a chapter corrects one of "
          "their lines, it paraphrases the line first.",
}


LANDING = """<!DOCTYPE html>
<!-- built by tools/book (tools/book_reader.py): the book's landing page -->
<html lang="en">
<head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{en} · {zh}</title><link rel="stylesheet" href="en/book.css"></head>
<body class="landing">
<main>
<h1><span lang="zh-CN">{zh}</span><br><span lang="en">{en}</span></h1>
<ul class="editions-list">
{editions}
</ul>
<p class="recordings"><span lang="zh-CN">{rec_zh}</span> <span lang="en">{rec_en}</span></p>
<p class="seeds"><span lang="zh-CN">{seeds_zh}</span> <span lang="en">{seeds_en}</span></p>
<ol class="chapter-list">
{rows}
</ol>
{after}
<p class="editions">tools/book · {built}</p>
</main>
</body></html>
"""



def md_inline_html(s):
    """A one-line summary's Markdown (`code` only) as HTML."""
    parts = re.split(r"(`[^`]+`)", s)
    return "".join(f"<code>{html.escape(p[1:-1])}</code>" if p.startswith("`") and p.endswith("`") and len(p) > 1
                   else html.escape(p) for p in parts)


def index_entry(lang, m, cm, has_gpu):
    """The Markdown lines of a chapter's entry in an edition's contents: title, GPU badge,
    summary (the sections' links follow, indented, from tools/book)."""
    w = WORDS[lang]
    badge = f"[{w['gpu_yes']}]{{.badge .gpu}}" if has_gpu else f"[{w['gpu_no']}]{{.badge .cpu}}"
    lines = [f"- [{m['titles'][lang]}]({m['slug']}.html) {badge}", ""]
    if cm.get("summary"):
        lines += [f"    {cm['summary'][lang]}", ""]
    return lines
