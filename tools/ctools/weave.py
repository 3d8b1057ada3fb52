#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/weave: a chapter's literate C source -> Pandoc Markdown, one per language.

    tools/weave [--run-dir DIR] [--out DIR] [--lang zh|en] [--recorded DIR] [--strict] CHAPTER.c
    tools/weave --check CHAPTER.c ...
    tools/weave --lint-claims CHAPTER.c ...

The rules are in book/FORMAT.md. In short: prose blocks (`/*md` ... `*/`)
give each edition its language's `::: zh` / `::: en` div (text outside the
divs is shared); the code between prose blocks is copied from the same file
into ```c blocks; `/*md hide*/` ... `/*md show*/` folds code; `/*md output
NAME*/` places the section `== NAME ==` of the captured output (and of any GPU
transcript under book/recorded/); `/*md figure NAME: zh | en*/` places a
numbered figure drawn by gnuplot from the chapter's --metrics JSON
(book/figures/chNN_NAME.gp) or an image the chapter wrote; `/*md twin NAME*/`
places the region `# twin: NAME` ... `# twin: end` of the PyTorch twin;
`/*md source FILE*/` weaves a chapter's .cu file (its prose, hide/show, lab
regions) and `/*md source FILE REGION*/` shows the region `// region: NAME`
... `// endregion` of any source; `{{metric KEY}}` in prose is filled from
the run's --metrics. `{{claim COND}}sentence{{end}}` checks a sentence that
interprets a measurement against the run (a contradicted claim is a warning,
an error with --strict), and `{{if COND}}...{{elif COND}}...{{else}}...{{end}}`
picks the sentence the run supports. Every chapter ends with its twin's whole source and
output.

With --run-dir (the chapter's captures, as tools/book writes them) it writes
OUT/chNN.zh.md, OUT/chNN.en.md, OUT/chNN.meta.json, its entry of
OUT/recordings.json (whether GPU recordings exist) and the figures under
OUT/figures/. Without --run-dir, outputs and figures become placeholders (a
preview). --check only parses and checks the sources and prints nothing on
success. A malformed source fails with FILE:LINE: message and exit status 1.

Python 3 standard library only; gnuplot only when figures are rendered.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository
LANGS = ("zh", "en")
SPEC_DIR = os.path.join(ROOT, "book", "figures")  # figure specs chNN_NAME.gp


class WeaveError(Exception):
    """A problem in a source, reported as FILE:LINE: message."""

    def __init__(self, path, line, message):
        self.path, self.line, self.message = path, line, message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


def rel(path):
    """A path as the reader knows it: relative to the repository when inside it."""
    path = os.path.abspath(path)
    r = os.path.relpath(path, ROOT)
    return path if r.startswith("..") else r


# ---------------------------------------------------------------------------
# Parsing the C source

RE_PROSE_OPEN = re.compile(r"^/\*md\s*$")
RE_PROSE_CLOSE = re.compile(r"^\s*\*/\s*$")
RE_DIRECTIVE = re.compile(r"^\s*/\*md\s+(\w+)(.*?)\*/\s*$")
RE_DIV_OPEN = re.compile(r"^(:{3,})\s*([^:\s].*?)\s*:*\s*$")
RE_DIV_CLOSE = re.compile(r"^:{3,}\s*$")
RE_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
RE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
RE_LAB = re.compile(r"/\*\s*LAB (?:BEGIN\b[^*]*(?:\*(?!/)[^*]*)*|END\s*)\*/")
RE_CHAPTER_DIR = re.compile(r"^ch(\d+)_\w+$")


def lang_of_div(attrs):
    """'zh' for `::: zh`, `::: {.zh}`, `::: {lang=zh}`; None for any other div."""
    a = attrs.strip()
    m = re.fullmatch(r"(zh|en)", a) or re.fullmatch(r"\{\s*\.(zh|en)\s*\}", a) or \
        re.fullmatch(r"\{\s*lang=\"?(zh|en)\"?\s*\}", a)
    return m.group(1) if m else None


def check_languages(path, start, counts):
    """A prose block (at line start) has as many '::: zh' divs as '::: en' divs, at least one."""
    if counts["zh"] == 0 or counts["en"] == 0:
        have = "zh" if counts["zh"] else "en" if counts["en"] else None
        lack = "en" if have == "zh" else "zh"
        if have:
            raise WeaveError(path, start, f"prose block has a '::: {have}' div but no '::: {lack}' div: "
                             "every prose block needs both languages")
        raise WeaveError(path, start, "prose block has neither a '::: zh' nor a '::: en' div: "
                         "every prose block needs both languages")
    if counts["zh"] != counts["en"]:
        raise WeaveError(path, start, f"prose block has {counts['zh']} '::: zh' divs and "
                         f"{counts['en']} '::: en' divs: each needs its translation")


def parse_prose(path, start, lines):
    """Splits one prose block into segments [(lang or None, [lines])].

    lines are (lineno, text) without the /*md and */ lines. A language div
    must be at the top level of the block; other divs may nest anywhere.
    """
    segments = []
    shared = []
    depth = 0            # open divs (language div included)
    current = None       # language of the open top-level language div
    current_line = 0
    body = []
    opened = []          # line numbers of open divs, for error messages
    fence = None         # (char, length, line) of an open code fence
    counts = {"zh": 0, "en": 0}
    for lineno, text in lines:
        if fence:
            m = RE_FENCE.match(text)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and \
                    text.strip() == m.group(1):
                fence = None
            (body if current else shared).append(text)
            continue
        m = RE_FENCE.match(text)
        if m:
            fence = (m.group(1)[0], len(m.group(1)), lineno)
            (body if current else shared).append(text)
            continue
        if RE_DIV_CLOSE.match(text):
            if depth == 0:
                raise WeaveError(path, lineno, "':::' closes a div that was never opened")
            depth -= 1
            opened.pop()
            if depth == 0 and current:
                if not any(t.strip() for t in body):
                    raise WeaveError(path, current_line, f"the '::: {current}' div is empty")
                segments.append((current, body))
                current, body = None, []
            else:
                (body if current else shared).append(text)
            continue
        m = RE_DIV_OPEN.match(text)
        if m:
            lang = lang_of_div(m.group(2))
            if lang and depth > 0:
                raise WeaveError(path, lineno, f"'::: {lang}' must not be nested inside another div "
                                 f"(opened at line {opened[-1]})")
            depth += 1
            opened.append(lineno)
            if lang:
                if shared:
                    segments.append((None, shared))
                    shared = []
                current, current_line, body = lang, lineno, []
                counts[lang] += 1
            else:
                (body if current else shared).append(text)
            continue
        if current:
            body.append(text)
        else:
            shared.append(text)
    end = lines[-1][0] + 1 if lines else start + 1
    if fence:
        raise WeaveError(path, fence[2], f"code fence '{fence[0] * 3}' not closed before the end of "
                         f"the prose block (line {end})")
    if depth:
        raise WeaveError(path, opened[-1], f"div not closed ('::: ' without a closing ':::') before "
                         f"the end of the prose block (line {end})")
    if shared:
        segments.append((None, shared))
    check_languages(path, start, counts)
    return segments


def parse_figure_args(path, lineno, rest):
    """'NAME' or 'NAME: zh caption | en caption' -> (name, {lang: caption})."""
    name, _, caption = rest.partition(":")
    name = name.strip()
    captions = {}
    if caption.strip():
        parts = caption.split("|")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            raise WeaveError(path, lineno, "figure caption must read 'NAME: zh caption | en caption'")
        captions = {"zh": parts[0].strip(), "en": parts[1].strip()}
    return name, captions


def parse_directive(path, i, word, rest, hidden_since, flush_code, items):
    """One directive line '/*md WORD REST*/' at line i: checks it, ends the code before it
    (flush_code) and appends its item to items. Returns the hidden region's start after it
    (0: not in one)."""
    if word == "hide":
        if hidden_since:
            raise WeaveError(path, i, f"/*md hide*/ inside a hidden region (opened at line {hidden_since})")
        if rest:
            raise WeaveError(path, i, "/*md hide*/ takes no argument")
        flush_code()
        hidden_since = i
    elif word == "show":
        if not hidden_since:
            raise WeaveError(path, i, "/*md show*/ without a /*md hide*/ before it")
        if rest:
            raise WeaveError(path, i, "/*md show*/ takes no argument")
        flush_code()
        hidden_since = 0
    elif word in ("output", "figure", "twin"):
        if hidden_since:
            raise WeaveError(path, i, f"/*md {word}*/ inside a hidden region (opened at line "
                             f"{hidden_since})")
        captions = {}
        if word == "figure":
            name, captions = parse_figure_args(path, i, rest)
        else:
            name = rest
        if word == "output":
            # the section's name as ct_cli_section printed it: "cpu ladder" is fine
            if not name or "==" in name:
                raise WeaveError(path, i, "/*md output NAME*/ needs the NAME of a section "
                                 "'== NAME ==' of the output")
        elif not RE_NAME.match(name):
            raise WeaveError(path, i, f"/*md {word} NAME*/ needs a NAME (letters, digits, _ . -), "
                             f"got '{name}'")
        flush_code()
        item = {"kind": word, "line": i, "name": name}
        if word == "figure":
            item["captions"] = captions
        items.append(item)
    elif word == "source":
        # Another file's code, woven in place: a chapter's .cu file (its
        # own prose blocks, hide/show and lab regions) or a named region
        # of any C/CUDA source (`// region: NAME` ... `// endregion`).
        if hidden_since:
            raise WeaveError(path, i, f"/*md source*/ inside a hidden region (opened at line "
                             f"{hidden_since})")
        words = rest.split()
        if len(words) not in (1, 2):
            raise WeaveError(path, i, "/*md source FILE [REGION]*/ needs a FILE (relative to the "
                             "chapter's folder or to the repository) and optionally a REGION")
        flush_code()
        items.append({"kind": "source", "line": i, "file": words[0],
                      "region": words[1] if len(words) == 2 else None})
    elif word == "bookrun" or word in (f"bookrun-{lang}" for lang in LANGS):
        # Flags tools/book adds when it runs the chapter for the book
        # (a long default run is recorded once under book/recorded/);
        # bookrun-zh: the flags of the Chinese edition's own run.
        if not rest.strip():
            raise WeaveError(path, i, f"/*md {word} FLAGS*/ needs the flags the book runs with")
        flush_code()
    else:
        raise WeaveError(path, i, f"unknown directive /*md {word}*/ (known: hide, show, output "
                         "NAME, figure NAME, twin NAME, source FILE [REGION], bookrun FLAGS, bookrun-zh FLAGS; a "
                         "prose block starts with "
                         "a line that is only '/*md')")
    return hidden_since


def parse_source(path):
    """Parses a chapter source into a list of items, each a dict with 'kind'.

    kinds: prose (segments), code (lines: [(lineno, text)], hidden: bool),
    output (name), figure (name, captions), twin (name). Every item has 'line'.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise WeaveError(path, 0, f"cannot read: {e}")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    items = []
    code = []
    hidden_since = 0
    prose_start = 0
    prose = []

    def flush_code():
        if code:
            items.append({"kind": "code", "line": code[0][0], "lines": list(code),
                          "hidden": bool(hidden_since)})
            code.clear()

    for i, t in enumerate(lines, 1):
        if prose_start:
            if RE_PROSE_CLOSE.match(t):
                items.append({"kind": "prose", "line": prose_start,
                              "segments": parse_prose(path, prose_start, prose)})
                prose_start, prose = 0, []
            elif "*/" in t:
                raise WeaveError(path, i, "'*/' inside a prose block ends the C comment here: "
                                 "a prose block ends with a line that is only '*/'")
            else:
                prose.append((i, t))
            continue
        if RE_PROSE_OPEN.match(t):
            if hidden_since:
                raise WeaveError(path, i, f"prose block inside a hidden region (/*md hide*/ at line "
                                 f"{hidden_since}): close it with /*md show*/ first")
            flush_code()
            prose_start = i
            continue
        m = RE_DIRECTIVE.match(t)
        if m:
            hidden_since = parse_directive(path, i, m.group(1), m.group(2).strip(), hidden_since, flush_code, items)
            continue
        if "/*md" in t:
            raise WeaveError(path, i, "malformed '/*md' marker: a prose block starts with a line that is "
                             "only '/*md'; a directive is a whole line '/*md WORD ...*/'")
        code.append((i, t))
    if prose_start:
        raise WeaveError(path, prose_start, "prose block '/*md' not closed (no line '*/' before the "
                         "end of the file)")
    if hidden_since:
        raise WeaveError(path, hidden_since, "/*md hide*/ without a /*md show*/ after it")
    flush_code()
    return items


# ---------------------------------------------------------------------------
# The chapter: source, twin, figure specs

class Chapter:
    def __init__(self, source):
        self.source = os.path.abspath(source)
        self.dir = os.path.dirname(self.source)
        self.slug = os.path.basename(self.dir)  # ch01_device_query
        m = RE_CHAPTER_DIR.match(self.slug)
        if not m or os.path.basename(self.source) != self.slug + ".c":
            raise WeaveError(source, 0, "a chapter source is chapters/chNN_name/chNN_name.c")
        self.number = int(m.group(1))
        self.id = f"ch{m.group(1)}"  # ch01
        self.items = parse_source(self.source)
        self.twin_path = os.path.join(self.dir, f"{self.id}_pytorch.py")
        self.twin_regions = {}
        if os.path.exists(self.twin_path):
            self.twin_regions = parse_twin(self.twin_path)
        self.titles = self._titles()
        self._check_twins()
        for item in self.items:
            if item["kind"] == "source":
                self._load_source(item)

    def _load_source(self, item):
        """Resolves /*md source FILE [REGION]*/: item gets 'path' and 'lines' (a region)
        or 'items' (a whole file, parsed like a chapter: prose, code, hide/show)."""
        cands = [os.path.join(self.dir, item["file"]), os.path.join(ROOT, item["file"])]
        path = next((c for c in cands if os.path.isfile(c)), None)
        if not path:
            raise WeaveError(self.source, item["line"], f"/*md source {item['file']}*/: no such file in "
                             f"{rel(self.dir)} or the repository")
        item["path"] = os.path.abspath(path)
        if item["region"]:
            regions = parse_regions(path)
            if item["region"] not in regions:
                raise WeaveError(self.source, item["line"], f"/*md source {item['file']} {item['region']}*/: "
                                 f"{rel(path)} has no region '// region: {item['region']}' ... "
                                 f"'// endregion' (it has: {', '.join(regions) or 'none'})")
            item["lines"] = regions[item["region"]]
            return
        sub = parse_source(path)
        for it in sub:
            if it["kind"] not in ("prose", "code"):
                raise WeaveError(path, it["line"], f"/*md {it['kind']}*/ in a woven source file: only "
                                 "prose blocks and /*md hide*/ ... /*md show*/ (the chapter's own file "
                                 "places outputs, figures and twins)")
        item["items"] = sub

    def _titles(self):
        titles = {}
        for lang in LANGS:
            for item in self.items:
                if item["kind"] == "prose":
                    lines = [t for seg_lang, seg in item["segments"] if seg_lang in (None, lang) for t in seg]
                    i = first_heading(lines)
                    if i is not None:
                        titles[lang] = heading_text(lines[i])
                        break
            if lang not in titles:
                raise WeaveError(self.source, 0, f"no chapter title: a prose block needs a "
                                 f"'# Title' line in its '::: {lang}' div")
        return titles

    def _check_twins(self):
        for item in self.items:
            if item["kind"] != "twin":
                continue
            if not os.path.exists(self.twin_path):
                raise WeaveError(self.source, item["line"], f"/*md twin {item['name']}*/ but there is no "
                                 f"twin {rel(self.twin_path)}")
            if item["name"] not in self.twin_regions:
                raise WeaveError(self.source, item["line"], f"/*md twin {item['name']}*/: "
                                 f"{rel(self.twin_path)} has no region '# twin: {item['name']}' ... "
                                 f"'# twin: end' (it has: {', '.join(self.twin_regions) or 'none'})")

    def figures(self):
        return [it for it in self.items if it["kind"] == "figure"]

    def figure_spec_path(self, name):
        return os.path.join(SPEC_DIR, f"{self.id}_{name}.gp")

    def figure_dot_path(self, name):
        return dot_source_path(self.dir, name)


def first_heading(lines):
    """Index of the first level-1 ATX heading outside code fences, or None."""
    fence = None
    for i, t in enumerate(lines):
        m = RE_FENCE.match(t)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and t.strip() == m.group(1):
                fence = None
        elif m:
            fence = m.group(1)
        elif re.match(r"^#\s+\S", t):
            return i
    return None


def heading_text(line):
    return re.sub(r"\s*\{[^}]*\}\s*$", "", line.lstrip("#").strip())


RE_TWIN = re.compile(r"^\s*#\s*twin:\s*(\S+)\s*$")


def parse_twin(path):
    """The regions '# twin: NAME' ... '# twin: end' of a twin -> {name: (line, [text])}."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    regions = {}
    name, start, body = None, 0, []
    for i, t in enumerate(lines, 1):
        m = RE_TWIN.match(t)
        if not m:
            if name:
                body.append(t)
            continue
        word = m.group(1)
        if word == "end":
            if not name:
                raise WeaveError(path, i, "'# twin: end' without a '# twin: NAME' before it")
            regions[name] = (start, dedent(body))
            name, body = None, []
        else:
            if name:
                raise WeaveError(path, i, f"'# twin: {word}' inside region '{name}' (opened at line {start})")
            if word in regions:
                raise WeaveError(path, i, f"twin region '{word}' defined twice")
            name, start, body = word, i, []
    if name:
        raise WeaveError(path, start, f"twin region '{name}' not closed by '# twin: end'")
    return regions


def dedent(lines):
    lines = trim_blank(lines)
    indents = [len(t) - len(t.lstrip(" ")) for t in lines if t.strip()]
    cut = min(indents) if indents else 0
    return [t[cut:] for t in lines]


def trim_blank(lines):
    lines = list(lines)
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def strip_lab_markers(lines):
    """Drops the LAB BEGIN/END comments: whole lines go, inline ones are cut out."""
    out = []
    for lineno, t in lines:
        if RE_LAB.search(t):
            t2 = RE_LAB.sub("", t)
            if not t2.strip():
                continue
            t = t2.rstrip()
        out.append((lineno, t))
    return out


RE_REGION = re.compile(r"^\s*//\s*region:\s*(\S+)\s*$")
RE_ENDREGION = re.compile(r"^\s*//\s*endregion\s*$")


def parse_regions(path):
    """Named regions of a C/CUDA file: '// region: NAME' ... '// endregion' (no nesting).
    Returns {name: [(lineno, text)]} without the marker lines."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    regions, current, start = {}, None, 0
    for i, t in enumerate(lines, 1):
        m = RE_REGION.match(t)
        if m:
            if current:
                raise WeaveError(path, i, f"region {m.group(1)} inside region {current} (line {start})")
            if m.group(1) in regions:
                raise WeaveError(path, i, f"region {m.group(1)} defined twice")
            current, start = m.group(1), i
            regions[current] = []
        elif RE_ENDREGION.match(t):
            if not current:
                raise WeaveError(path, i, "'// endregion' without a '// region: NAME' before it")
            current = None
        elif current:
            regions[current].append((i, t))
    if current:
        raise WeaveError(path, start, f"region {current} has no '// endregion'")
    return regions


def code_lang(path):
    """The Pandoc highlighting class for a source file (CUDA is highlighted as C++)."""
    return "cpp" if path.endswith((".cu", ".cuh", ".cpp", ".cc")) else "c"


# {{metric KEY}}, {{metric KEY[i]}}, {{metric KEY %.1f}}, {{metric KEY list}}:
# a number from the run's --metrics JSON, typed into the prose by the weaver.
# {{recorded KEY ...}} (same forms): from the chapter's full run instead, the
# recorded transcript's metrics (Weaver.full_run); {{recorded @run}} names
# that run in words.
RE_METRIC = re.compile(r"\{\{(metric|recorded)\s+([A-Za-z_]\w*)(?:\[(-?\d+)\])?"
                       r"(?:\s+(%[-+ #0-9.]*[dfgeE%]|list))?\s*\}\}")
RE_METRIC_LOOSE = re.compile(r"\{\{\s*(?:metric|recorded)\b[^}]*\}\}")
RE_RECORDED_RUN = re.compile(r"\{\{recorded\s+@run\s*\}\}")


def format_metric(value, fmt):
    """One metric value as prose shows it: fmt is a printf format, or None (integers
    as integers, other numbers to 3 significant digits); null is a dash."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if fmt:
        return fmt % value
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.3g}"


def metric_at(source, key, index, whose):
    """source[key], or its element index (an int, negative from the end) where one is given;
    raises LookupError naming what is missing (fill_metrics and the claims' conditions)."""
    if key not in source:
        raise LookupError(f"{whose} have no key '{key}'")
    v = source[key]
    if index is None:
        return v
    if not isinstance(v, list) or not -len(v) <= index < len(v):
        raise LookupError(f"'{key}' is not a list with an element {index}")
    return v[index]


def fill_metrics(text, metrics, where, full=None):
    """Replaces every placeholder of text. metrics: the live run's (None: a preview, the
    placeholder shows its key). full: (metrics, words) of the chapter's full run for
    {{recorded ...}} (None: a preview, or no run). where = (path, line) for errors."""
    def one(m):
        kind, key, index, fmt = m.group(1), m.group(2), m.group(3), m.group(4)
        source = metrics if kind == "metric" else (full[0] if full else None)
        if source is None:
            return f"⟨{key}{'[' + index + ']' if index else ''}⟩"
        whose = "the run's metrics" if kind == "metric" else "the full run's metrics"
        try:
            v = metric_at(source, key, None if index is None else int(index), whose)
        except LookupError as e:
            seen = f" (it is {json.dumps(source[key])[:60]})" if key in source else ""
            raise WeaveError(where[0], where[1], f"{m.group(0)}: {e.args[0]}{seen}")
        if fmt == "list":
            if not isinstance(v, list):
                raise WeaveError(where[0], where[1], f"{m.group(0)}: 'list' needs a list, '{key}' is {v!r}")
            return ", ".join(format_metric(x, None) for x in v)
        if isinstance(v, list):
            raise WeaveError(where[0], where[1], f"{m.group(0)}: '{key}' is a list: pick an element "
                             f"({key}[-1]) or write 'list'")
        try:
            return format_metric(v, fmt if fmt != "list" else None)
        except (TypeError, ValueError) as e:
            raise WeaveError(where[0], where[1], f"{m.group(0)}: cannot format {v!r}: {e}")
    text = RE_RECORDED_RUN.sub(lambda m: full[1] if full else "⟨@run⟩", text)
    out = RE_METRIC.sub(one, text)
    bad = RE_METRIC_LOOSE.search(out)
    if bad:
        raise WeaveError(where[0], where[1], f"malformed placeholder {bad.group(0)}: write {{{{metric KEY}}}}, "
                         "{{metric KEY[i]}}, {{metric KEY %.1f}}, {{metric KEY list}}, the same with "
                         "'recorded' for the full run, or {{recorded @run}}")
    return out


# ---------------------------------------------------------------------------
# Checked claims: sentences that interpret a measurement (book/FORMAT.md, "Claims")
#
#   {{claim COND}}sentence{{end}}                 the sentence, checked against the run
#   {{if COND}}A{{elif COND}}B{{else}}C{{end}}    the first branch whose COND holds
#
# COND is a tiny grammar, never Python's eval:
#   cond    := conj ("or" conj)*          conj := cmp ("and" cmp)*
#   cmp     := expr ("<" | "<=" | ">" | ">=") expr  |  expr "about" expr ["within" NUMBER "%"]
#            | operand "is" WORD          (a string metric: equal, or WORD before a ':', so
#                                           'metric device is cuda' holds for "cuda:0")
#   expr    := operand [("/" | "*") operand]
#   operand := ("metric" | "recorded") KEY ["[" INT "]"]  |  NUMBER

RE_CLAIM_TAG = re.compile(r"\{\{(claim|if|elif)\s+([^{}]*?)\s*\}\}|\{\{(else|end)\s*\}\}")
RE_CLAIM_TOKEN = re.compile(r"\s*(?:(<=|>=|<|>|/|\*|\[|\]|%)|(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*))")
ABOUT_TOLERANCE = 0.15  # 'a about b' without 'within': |a - b| <= 15% of the larger


class ClaimError(Exception):
    """A malformed condition (the caller adds FILE:LINE)."""


def cond_tokens(text):
    """The condition's tokens: operators, numbers and words."""
    toks, pos = [], 0
    while pos < len(text):
        m = RE_CLAIM_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if not text[pos:].strip():
                break
            raise ClaimError(f"cannot read {text[pos:].strip()!r} in the condition {text!r}")
        toks.append(m.group(1) or m.group(2) or m.group(3))
        pos = m.end()
    return toks


def parse_cond(text):
    """The condition as a tree of tuples; raises ClaimError naming what is wrong."""
    toks, i = cond_tokens(text), 0

    def peek():
        return toks[i] if i < len(toks) else None

    def take(want=None):
        nonlocal i
        t = peek()
        if t is None or (want and t != want):
            raise ClaimError(f"expected {want or 'more'} at the end of {text!r}" if t is None else
                             f"expected {want!r}, found {t!r} in {text!r}")
        i += 1
        return t

    def operand():
        t = take()
        if t in ("metric", "recorded"):
            key = take()
            if not re.match(r"^[A-Za-z_]\w*$", key):
                raise ClaimError(f"'{t}' needs a metric key, found {key!r} in {text!r}")
            index = None
            if peek() == "[":
                take("[")
                index = take()
                if not re.match(r"^-?\d+$", index):
                    raise ClaimError(f"an index is an integer, found {index!r} in {text!r}")
                take("]")
                index = int(index)
            return ("key", t, key, index)
        try:
            return ("num", float(t))
        except ValueError:
            raise ClaimError(f"expected 'metric KEY', 'recorded KEY' or a number, found {t!r} in {text!r}")

    def expr():
        a = operand()
        if peek() in ("/", "*"):
            op = take()
            return (op, a, operand())
        return a

    def cmp():
        a = expr()
        op = take()
        if op in ("<", "<=", ">", ">="):
            return (op, a, expr())
        if op == "is":
            word = take()
            if a[0] != "key" or not re.match(r"^[\w.-]+$", word):
                raise ClaimError(f"'is' compares a metric with a word (metric device is cpu), in {text!r}")
            return ("is", a, word)
        if op == "about":
            b, tol = expr(), ABOUT_TOLERANCE
            if peek() == "within":
                take("within")
                n = take()
                take("%")
                try:
                    tol = float(n) / 100
                except ValueError:
                    raise ClaimError(f"'within' takes a percentage (within 10%), found {n!r} in {text!r}")
            return ("about", a, b, tol)
        raise ClaimError(f"expected <, <=, >, >=, about or is, found {op!r} in {text!r}")

    def chain(word, sub):
        parts = [sub()]
        while peek() == word:
            take(word)
            parts.append(sub())
        return parts[0] if len(parts) == 1 else (word,) + tuple(parts)

    tree = chain("or", lambda: chain("and", cmp))
    if peek() is not None:
        raise ClaimError(f"unexpected {peek()!r} in {text!r}")
    return tree


def eval_cond(tree, sources, seen):
    """True/False for the tree over sources {'metric': dict, 'recorded': dict}; a null or
    non-number operand makes its comparison false. seen collects 'kind KEY = value' texts.
    Raises ClaimError for a key the run lacks."""
    def value(node, raw=False):
        if node[0] == "num":
            return node[1]
        if node[0] in ("/", "*"):
            a, b = value(node[1]), value(node[2])
            if a is None or b is None or (node[0] == "/" and b == 0):
                return None
            return a / b if node[0] == "/" else a * b
        _, kind, key, index = node
        try:
            v = metric_at(sources.get(kind) or {}, key, index,
                          f"the {'run' if kind == 'metric' else 'full run'}'s metrics")
        except LookupError as e:
            raise ClaimError(e.args[0])
        name = f"{kind} {key}" + (f"[{index}]" if index is not None else "")
        seen.append(f"{name} = {format_metric(v, None) if not isinstance(v, list) else 'a list'}")
        if raw:
            return v
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    op = tree[0]
    if op in ("and", "or"):
        results = [eval_cond(t, sources, seen) for t in tree[1:]]
        return all(results) if op == "and" else any(results)
    if op == "is":
        v = value(tree[1], raw=True)
        return isinstance(v, str) and (v == tree[2] or v.startswith(tree[2] + ":"))
    a, b = value(tree[1]), value(tree[2])
    if a is None or b is None:
        return False
    if op == "about":
        return abs(a - b) <= tree[3] * max(abs(a), abs(b))
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def parse_claims(text):
    """Splits text into [str | {'kind': 'claim'|'if', 'branches': [(cond text, tree, body)], 'open': tag}];
    a branch's cond is None for {{else}}. Raises ClaimError on a malformed or unbalanced form."""
    out, pos, block = [], 0, None
    for m in RE_CLAIM_TAG.finditer(text):
        word = m.group(1) or m.group(3)
        before = text[pos:m.start()]
        pos = m.end()
        if block is None:
            out.append(before)
            if word not in ("claim", "if"):
                raise ClaimError(f"{m.group(0)} without an open {{{{if ...}}}} or {{{{claim ...}}}}")
            block = {"kind": word, "open": m.group(0), "branches": [], "cond": m.group(2)}
            continue
        block["branches"].append((block["cond"], parse_cond(block["cond"]) if block["cond"] is not None else None,
                                  before))
        if word in ("claim", "if"):
            raise ClaimError(f"{m.group(0)} inside {block['open']}: claims and branches do not nest")
        if word == "end":
            out.append(block)
            block = None
        elif block["kind"] == "claim":
            raise ClaimError(f"{m.group(0)} in {block['open']}: a claim has one sentence and no branches "
                             "(use {{if ...}} for a sentence per outcome)")
        elif block["cond"] is None:
            raise ClaimError(f"{m.group(0)} after {{{{else}}}} in {block['open']}: else is the last branch")
        else:
            block["cond"] = m.group(2) if word == "elif" else None
    if block is not None:
        raise ClaimError(f"{block['open']} is not closed by {{{{end}}}} in the same language's text")
    out.append(text[pos:])
    bad = re.search(r"\{\{\s*(?:claim|if|elif|else|end)\b[^}]*\}\}", "".join(p for p in out if isinstance(p, str)))
    if bad:
        raise ClaimError(f"malformed {bad.group(0)}: write {{{{claim COND}}}}, {{{{if COND}}}}, {{{{elif COND}}}}, "
                         "{{else}} or {{end}}")
    return out


class ClaimFinding:
    """A claim the run contradicts: where, the sentence, the condition and the values."""

    def __init__(self, path, line, sentence, cond, values):
        self.path, self.line, self.sentence, self.cond, self.values = path, line, sentence, cond, values

    def __str__(self):
        where = f"{rel(self.path)}:{self.line}" if self.line else rel(self.path)
        return (f"{where}: this run contradicts the claim {self.sentence.strip()[:160]!r}: "
                f"'{self.cond}' is false ({'; '.join(self.values) or 'no values'})")


def tag_line(path, start, tag, lang=None):
    """The line of the first occurrence of tag in path at or after line start (and, given lang,
    after that language's first div there), else start."""
    div = re.compile(r"^:{3,}\s*(?:\{\s*\.?|\{\s*lang=)?" + lang + r"\b") if lang else None
    try:
        with open(path, encoding="utf-8") as f:
            for n, t in enumerate(f, 1):
                if n >= start and div and div.match(t):
                    div = None
                elif n >= start and not div and tag in t:
                    return n
    except OSError:
        pass
    return start


def fill_claims(text, sources, where, lang, findings):
    """Resolves the claims and branches of text. sources: {'metric': ..., 'recorded': ...} or
    None (a preview: every branch shown, marked). A contradicted claim keeps its sentence,
    gets a visible note, and is appended to findings (the caller decides whether that fails)."""
    try:
        parts = parse_claims(text)
    except ClaimError as e:
        raise WeaveError(where[0], where[1], str(e))
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
            continue
        line = tag_line(where[0], where[1], p["open"], lang)
        if sources is None:
            out.append(" ".join(f"⟨{'else' if c is None else c}⟩ {body.strip()}" for c, _, body in p["branches"]))
            continue
        try:
            if p["kind"] == "claim":
                cond, tree, body = p["branches"][0]
                seen = []
                out.append(body)
                if not eval_cond(tree, sources, seen):
                    findings.append(ClaimFinding(where[0], line, body, cond, seen))
                    out.append(WORDS[lang]["claim_contradicted"].format(values="; ".join(seen)))
                continue
            for cond, tree, body in p["branches"]:
                if tree is None or eval_cond(tree, sources, []):
                    out.append(body)
                    break
        except ClaimError as e:
            raise WeaveError(where[0], line, f"{p['open']}: {e}")
    return "".join(out)


def check_claims_syntax(text, where):
    """Parses every claim and branch of text (no run needed); raises WeaveError."""
    try:
        parse_claims(text)
    except ClaimError as e:
        raise WeaveError(where[0], where[1], str(e))


# Speed words: a sentence that interprets a timing (faster, slower, about the same, a ratio)
# beside a measured number must sit in a {{claim}} or a branch (book.claims; book/claims-allow.json
# lists the exceptions, each with its reason).
RE_SPEED_WORDS = {
    "en": re.compile(r"\b(?:fast|slow|quick|faster|slower|quicker|speed-?ups?|times as (?:fast|long)|as fast|as slow|"
                     r"(?:about|nearly|roughly|almost) the same|much (?:more|less) time)\b", re.I),
    "zh": re.compile(r"更快|更慢|快了|慢了|快得多|慢得多|加速比|差不多|几乎一样|一样快|倍(?!数)|[快慢]"),
}
RE_SENTENCE_END = {"en": re.compile(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\s*[-*] |\s*\d+\. )"),
                   "zh": re.compile(r"(?<=[。！？；])|\n\s*\n|\n(?=\s*[-*] |\s*\d+\. )")}


def speed_findings(source):
    """[(path, line, lang, sentence)]: sentences of a chapter's prose (and of the files it weaves
    with /*md source*/) that hold a {{metric}}/{{recorded}} number and a speed word outside
    any {{claim}} or {{if}} form."""
    ch = Chapter(source)
    found = []

    def scan(item):
        path = item.get("path", ch.source)
        for lang, seg in item["segments"]:
            if lang is None:
                continue
            try:
                parts = parse_claims("\n".join(seg))
            except ClaimError:
                continue  # weave reports it
            free = "".join(p if isinstance(p, str) else " ⟨checked⟩ " for p in parts)
            free = re.sub(r"`[^`]*`", "", free)
            for sentence in RE_SENTENCE_END[lang].split(free):
                if RE_METRIC_LOOSE.search(sentence) and RE_SPEED_WORDS[lang].search(
                        RE_METRIC_LOOSE.sub("", sentence)):
                    probe = RE_METRIC_LOOSE.search(sentence).group(0)
                    found.append((path, tag_line(path, item["line"], probe, lang), lang, " ".join(sentence.split())))
    for item in ch.items:
        if item["kind"] == "prose":
            scan(item)
        elif item["kind"] == "source" and not item.get("region"):
            for it in item["items"]:
                if it["kind"] == "prose":
                    scan(dict(it, path=item["path"]))
    return found


def suspect_timings(metrics):
    """(suspect, timed) summed over a run's LADDER_timings_suspect / _timed metrics: the
    timings its own plausibility check still flagged (chapter 4 writes them)."""
    suspect = sum(v for k, v in metrics.items() if k.endswith("_timings_suspect") and isinstance(v, (int, float)))
    timed = sum(v for k, v in metrics.items() if k.endswith("_timings_timed") and isinstance(v, (int, float)))
    return int(suspect), int(timed)


def twin_full_source(path):
    """The whole twin as the book shows it: verbatim, without the '# twin:' marker lines."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    return trim_blank([t for t in lines if not RE_TWIN.match(t)])


# ---------------------------------------------------------------------------
# Captured output and recorded GPU transcripts

RE_SECTION = re.compile(r"^== (.+?) ==\s*$")


def split_sections(text):
    """Output text -> (lines before the first section, {name: [lines incl. header]})."""
    pre, sections, current = [], {}, None
    for t in text.split("\n"):
        if t.startswith("== "):
            m = RE_SECTION.match(t)
            current = m.group(1) if m else None
            if current is not None:
                sections[current] = [t]
                continue
        if current is None:
            pre.append(t)
        else:
            sections[current].append(t)
    for k in sections:
        sections[k] = trim_blank(sections[k])
    return pre, sections


def read_recorded(recorded_dir, chapter_id):
    """GPU transcripts book/recorded/chNN-<gpu-slug>-<date>.txt: the newest per device.

    Returns [{path, header: {key: value}, pre, sections, metrics (path or None)}].
    """
    if not recorded_dir or not os.path.isdir(recorded_dir):
        return []
    found = {}
    for fn in sorted(os.listdir(recorded_dir)):
        m = re.match(rf"^{chapter_id}-(.+)-(\d{{4}}-\d\d-\d\d)\.txt$", fn)
        if not m:
            continue
        path = os.path.join(recorded_dir, fn)
        header, body = read_transcript(path)
        for key in ("chapter", "device", "driver", "date"):
            if not header.get(key):
                raise WeaveError(path, 1, f"recorded transcript lacks the header line '# {key}: ...' "
                                 "(format: book/FORMAT.md)")
        if header["chapter"] != chapter_id:
            raise WeaveError(path, 1, f"header says chapter {header['chapter']}, file name says {chapter_id}")
        pre, sections = split_sections(body)
        metrics = os.path.join(recorded_dir, fn[:-4] + ".json")
        rec = {"path": path, "header": header, "pre": pre, "sections": sections,
               "metrics": metrics if os.path.exists(metrics) else None,
               "slug": m.group(1), "date": m.group(2)}
        key = m.group(1)
        if key not in found or (rec["date"], fn) > (found[key]["date"], os.path.basename(found[key]["path"])):
            found[key] = rec
    return [found[k] for k in sorted(found)]


def is_gpu_recording(header):
    """A transcript recorded on a GPU (tools/record writes 'CPU: ...' and driver 'none' for a CPU run)."""
    return not (header.get("device", "").lower().startswith("cpu") or
                header.get("driver", "").lower().startswith("none"))


def recorded_label(w, header):
    """'Recorded on GPU (driver, date, commit)' or 'Full run recorded on CPU (date, commit)'."""
    commit = w["commit"].format(commit=header["commit"][:12]) if header.get("commit") else ""
    key = "recorded" if is_gpu_recording(header) else "recorded_cpu"
    return w[key].format(device=header["device"], driver=header["driver"], date=header["date"], commit=commit)


def read_transcript(path):
    """A transcript: '# key: value' header lines, a blank line, then the output verbatim."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.split("\n")
    header = {}
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        m = re.match(r"^#\s*([\w-]+)\s*:\s*(.*?)\s*$", lines[i])
        if m:
            header[m.group(1).lower()] = m.group(2)
        i += 1
    if i < len(lines) and not lines[i].strip():
        i += 1
    return header, "\n".join(lines[i:])


# ---------------------------------------------------------------------------
# Figures: book/figures/chNN_NAME.gp, drawn from --metrics JSON by gnuplot

def read_spec(path):
    """The header of a figure spec: the leading '# key: value' comment lines."""
    spec = {"series": [], "path": path}
    with open(path, encoding="utf-8") as f:
        for lineno, t in enumerate(f, 1):
            if not t.startswith("#"):
                break
            m = re.match(r"^#\s*([\w-]+)\s*:\s*(.*?)\s*$", t)
            if not m:
                continue
            key, value = m.group(1).lower(), m.group(2)
            if key == "series":
                spec["series"] += value.split()
            elif key == "groups":
                spec["groups"] = value.split()
            else:
                spec[key] = value
    if "x" not in spec:
        raise WeaveError(path, 1, "figure spec lacks '# x: JSON_KEY' in its header")
    if not spec["series"] and "series-match" not in spec:
        raise WeaveError(path, 1, "figure spec lacks '# series: KEY ...' or '# series-match: REGEX'")
    if "series-match" in spec:
        try:
            re.compile(spec["series-match"])
        except re.error as e:
            raise WeaveError(path, 1, f"series-match is not a regular expression: {e}")
    return spec


def figure_data(spec, metrics_path):
    """The figure's data: [(group or None, [(label, [values])])], x first in each.

    A spec with '# groups: a b' draws one panel per group whose x key is in
    the metrics; '{g}' in its x, series-match and label-strip stands for the
    group's name.
    """
    try:
        with open(metrics_path, encoding="utf-8") as f:
            metrics = json.load(f)
    except (OSError, ValueError) as e:
        raise WeaveError(metrics_path, 0, f"cannot read the metrics for figure {rel(spec['path'])}: {e}")
    where = f"figure {rel(spec['path'])}"
    keys_known = ", ".join(sorted(metrics))
    groups = spec.get("groups")
    out = []
    for g in groups or [None]:
        sub = (lambda v: v.replace("{g}", g)) if g else (lambda v: v)
        xkey = sub(spec["x"])
        x = metrics.get(xkey)
        if groups and x is None:
            continue  # this run has no such group (no GPU, say)
        if not isinstance(x, list) or not x:
            raise WeaveError(metrics_path, 0, f"{where}: x key '{xkey}' is not a non-empty list in the "
                             f"metrics (keys: {keys_known})")
        if spec["series"]:
            keys = [sub(k) for k in spec["series"] if sub(k) in metrics]
        else:
            rx = re.compile(sub(spec["series-match"]))
            keys = [k for k in metrics if k != xkey and rx.search(k) and isinstance(metrics[k], list)]
        if not keys:
            want = " ".join(spec["series"]) or f"/{sub(spec['series-match'])}/"
            raise WeaveError(metrics_path, 0, f"{where}: none of its series ({want}) is in the metrics "
                             f"(keys: {keys_known})")
        cols = [(xkey, x)]
        strip = sub(spec["label-strip"]) if spec.get("label-strip") else None
        for k in keys:
            v = metrics[k]
            if not isinstance(v, list):
                raise WeaveError(metrics_path, 0, f"{where}: series '{k}' is not a list")
            cols.append((re.sub(strip, "", k) if strip else k, v))
        out.append((g, cols))
    if not out:
        raise WeaveError(metrics_path, 0, f"{where}: none of its groups ({' '.join(groups)}) has its x key "
                         f"'{spec['x']}' in the metrics (keys: {keys_known})")
    return out


def legends(spec, cols, lang, group=None):
    """cols with each series' label replaced by its legend in words: the spec's
    '# legend-LANG-LABEL: words' (LABEL is the metric key after label-strip;
    '# legend-LANG-GROUP-LABEL' first in a spec with groups)."""
    out, missing = [cols[0]], []
    for label, values in cols[1:]:
        words = (group and spec.get(f"legend-{lang}-{group}-{label.lower()}")) or \
            spec.get(f"legend-{lang}-{label.lower()}")
        if not words:
            missing.append(label)
        out.append((words or label, values))
    if missing:
        raise WeaveError(spec["path"], 1, f"no {lang} legend for the series {', '.join(missing)}: add "
                         + " and ".join(f"'# legend-{lang}-{m}: WORDS'" for m in missing) +
                         " (a legend is words in the edition's language, never a metric key)")
    return out


def points(spec, metrics_path):
    """How many x values the figure's data has (its largest group)."""
    return max(len(cols[0][1]) for _, cols in figure_data(spec, metrics_path))


def write_dat(path, cols):
    n = len(cols[0][1])
    with open(path, "w", encoding="utf-8") as f:
        f.write(" ".join(gp_str(label) for label, _ in cols) + "\n")
        for i in range(n):
            row = []
            for _, values in cols:
                v = values[i] if i < len(values) else None
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
                row.append(repr(float(v)) if ok else "?")
            f.write(" ".join(row) + "\n")


def gp_str(s):
    """A gnuplot double-quoted string."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gnuplot_terminals(w, h):
    """{"svg": ..., "pdf": ...}: gnuplot's terminal line for each output of a w x h figure.
    The PDF is 15 cm wide, whatever the SVG's size, and LaTeX sets it at about that size.
    pdfcairo draws a font of size S at S * fontscale * 4/3 points (its default fontscale, 0.5,
    made 9 into 6 pt tick labels); 0.75 makes "9" 9 pt, a footnote's size. tests/book's
    book.pdf reads the sizes back from the figures' PDFs."""
    font = "Noto Sans CJK SC"
    return {
        "svg": f'set terminal svg size {w},{h} dynamic font "{font},13" background rgb "white"',
        "pdf": f'set terminal pdfcairo size 15cm,{15.0 * h / w:.2f}cm font "{font},9" fontscale 0.75',
    }


def spec_strings(spec, metrics_path):
    """'# strings: KEY ...': gnuplot string variables KEY holding the metrics' string values
    ("" when the run has none), e.g. names to label boxes with."""
    keys = spec.get("strings", "").split()
    metrics = load_json(metrics_path) if keys else {}
    out = []
    for key in keys:
        if not re.fullmatch(r"[A-Za-z_]\w*", key):
            raise WeaveError(spec["path"], 1, f"strings: '{key}' is not a name gnuplot can use")
        v = metrics.get(key)
        out.append(f"{key} = {gp_str(v if isinstance(v, str) else '')}")
    return out


def render_figure(spec, metrics_path, out_base, lang):
    """Writes the data (out_base.dat, or out_base.GROUP.dat per group) and
    out_base.svg and out_base.pdf (gnuplot's svg and pdfcairo terminals)."""
    groups = [(g, legends(spec, cols, lang, g)) for g, cols in figure_data(spec, metrics_path)]
    files = []
    for g, cols in groups:
        files.append(f"{out_base}.{g}.dat" if g else f"{out_base}.dat")
        write_dat(files[-1], cols)
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        raise WeaveError(spec["path"], 0, "gnuplot not found (Debian: gnuplot-nox; tools/bootstrap installs it)")
    w, h = 760, 470
    if spec.get("size"):
        m = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*", spec["size"])
        if not m:
            raise WeaveError(spec["path"], 1, "size must read 'WIDTH,HEIGHT' (SVG pixels)")
        w, h = int(m.group(1)), int(m.group(2))
    terms = gnuplot_terminals(w, h)
    n = len(groups)
    arrays = [f"array datafiles[{n}]", f"array groupnames[{n}]", f"array nseriesof[{n}]"]
    for k, ((g, cols), path) in enumerate(zip(groups, files), 1):
        arrays += [f"datafiles[{k}] = {gp_str(path)}", f"groupnames[{k}] = {gp_str(g or '')}",
                   f"nseriesof[{k}] = {len(cols) - 1}"]
    with open(spec["path"], encoding="utf-8") as f:
        body = f.read()
    arrays += spec_strings(spec, metrics_path)
    for fmt, term in terms.items():
        out = f"{out_base}.{fmt}"
        prelude = "\n".join([
            term,
            "set termoption noenhanced",
            f"set output {gp_str(out)}",
            'set datafile missing "?"',
            "set key autotitle columnhead",
            f"ngroups = {n}",
        ] + arrays + [
            "datafile = datafiles[1]",
            "nseries = nseriesof[1]",
            f"lang = {gp_str(lang)}",
            f"set xlabel {gp_str(spec.get('xlabel-' + lang, spec['x']))}",
            f"set ylabel {gp_str(spec.get('ylabel-' + lang, ''))}",
            'set grid lc rgb "#c8c8c8" lw 0.6 dt 3',
            'set border lc rgb "#404040"',
            'set format y "%g"',
            "",
        ])
        script = prelude + body + "\nunset multiplot\nunset output\n"
        r = subprocess.run([gnuplot], input=script, capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out) or os.path.getsize(out) == 0:
            raise WeaveError(spec["path"], 0, f"gnuplot failed drawing {rel(out)}:\n{r.stderr.strip()}")


IMAGE_EXTS = (".svg", ".png", ".jpg", ".jpeg")


# ---------------------------------------------------------------------------
# Schematic figures: chapters/chNN_name/fig/NAME.dot, drawn by Graphviz dot.
# One source serves both editions: every label text is written [[中文|English]]
# and each edition's copy keeps its half. Drawn at every weave that has an
# output folder (no run needed); a missing dot or a failed drawing is an error.

RE_DOT_LABEL = re.compile(r"\[\[(.*?)\]\]", re.S)
RE_FIG_REF = re.compile(r"\{\{fig\s+([^\s}]*)\s*\}\}")
DOT_FONTS = {"zh": "Noto Sans CJK SC", "en": "DejaVu Sans"}
DOT_PDF_MAX_IN = (5.4, 7.6)  # inches: dot shrinks a larger drawing to fit (the SVG keeps its size)


def dot_source_path(chapter_dir, name):
    return os.path.join(chapter_dir, "fig", f"{name}.dot")


def dot_text(path, lang):
    """The dot source of one edition: each [[zh|en]] replaced by its lang half."""
    with open(path, encoding="utf-8") as f:
        text = f.read()

    def one(m):
        parts = m.group(1).split("|")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            line = text.count("\n", 0, m.start()) + 1
            raise WeaveError(path, line, f"label {m.group(0)!r} must read [[中文|English]] "
                             "(one '|', both halves non-empty)")
        return parts[LANGS.index(lang)]
    out = RE_DOT_LABEL.sub(one, text)
    if "[[" in out or "]]" in out:
        bad = out.find("[[") if "[[" in out else out.find("]]")
        raise WeaveError(path, out.count("\n", 0, bad) + 1, "unclosed [[中文|English]] label")
    return out


def render_dot(path, out_base, lang):
    """Draws out_base.svg (HTML) and out_base.pdf (LaTeX) from a .dot source in lang."""
    dot = shutil.which("dot")
    if not dot:
        raise WeaveError(path, 0, "Graphviz 'dot' not found, needed for this figure (Debian: graphviz; "
                         "tools/bootstrap installs it)")
    text = dot_text(path, lang)
    font = DOT_FONTS[lang]
    for fmt in ("svg", "pdf"):
        out = f"{out_base}.{fmt}"
        cmd = [dot, f"-T{fmt}", f"-Gfontname={font}", f"-Nfontname={font}", f"-Efontname={font}",
               "-Gfontsize=11", "-Nfontsize=11", "-Efontsize=11", "-o", out]
        if fmt == "pdf":  # at most the PDF's text width (A4, 2.2 cm margins): LaTeX never rescales it,
            cmd.insert(1, f"-Gsize={DOT_PDF_MAX_IN[0]},{DOT_PDF_MAX_IN[1]}")  # tests/book checks its text size
        r = subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True)
        if r.returncode != 0 or not os.path.exists(out) or os.path.getsize(out) == 0:
            raise WeaveError(path, 0, f"dot failed drawing {rel(out)} ({lang}):\n"
                             f"{r.stderr.decode('utf-8', 'replace').strip()}")


# ---------------------------------------------------------------------------
# Markdown

WORDS = {
    "zh": {
        "figure": "图",
        "fig_sep": "　",
        "live": "本书构建时的运行输出",
        "live_quick": "冒烟运行：本书构建时的 `--quick` 运行（小尺寸、短训练，计时和精度不作数，完整运行见录制的输出）",
        "recorded": "在 {device} 上录制（驱动 {driver}，{date}{commit}）",
        "recorded_cpu": "在 {device} 上录制的完整运行（{date}{commit}）",
        "commit": "，提交 {commit}",
        "cpu_banner": ("**本章的输出都来自 CPU。** 构建本书的机器没有 GPU，本章也还没有在 GPU 上录制过；"
                       "正文讲到的 GPU 行为要在有 GPU 的机器上运行本章才能看到（`tools/record` 会把那次运行录制下来）。"),
        "folded_summary": "折叠的代码：第 {a}–{b} 行，共 {n} 行（点击展开）",
        "folded_note": "（此处折叠了源文件第 {a}–{b} 行，共 {n} 行样板代码。）",
        "twin_label": "PyTorch 写法（{file}）",
        "twin_title": "PyTorch 孪生程序",
        "twin_intro": ("本章的 PyTorch 孪生程序 `{path}` 按种子教程的写法做同样的事：参数相同，"
                       "输出的小节也相同，两份输出可以逐行对照。下面是它的完整源码和本书构建时的运行输出。"),
        "twin_output": "本书构建时的运行输出：`{command}`",
        "twin_output_quick": "冒烟运行：本书构建时的 `--quick` 运行（计时不作数）：`{command}`",
        "twin_not_run": "本书构建时没有运行它：{why}",
        "no_twin": "本章没有 PyTorch 孪生程序。",
        "placeholder": "（预览：这里是运行输出 `== {name} ==`，由 tools/book 填入）",
        "fig_placeholder": "（预览：这里是图 {name}，由 tools/book 绘制）",
        "this_run": "本次运行",
        "fig_live": "本书构建时的运行",
        "fig_live_quick": "本书构建时的冒烟运行（`--quick`）",
        "fig_on": "，在 {device} 上",
        "fig_model": "，模型 {model}",
        "fig_one_point": "（这次运行只有一个数据点，画不成曲线，这里不画图：{caption}）",
        "source_label": "源文件 {file}",
        "region_label": "{where}（区域 {region}）",
        "full_recorded": "在 {device} 上录制的完整运行（{date}{commit}）",
        "full_live": "本书构建时的运行（{device}）",
        "full_live_quick": "本书构建时的冒烟运行（`--quick`，{device}；计时不作数，本章还没有录制的完整运行）",
        "full_suspect": "，其中 {suspect} 个（共 {timed} 个）计时被它自己的计时检查判为不可信（机器当时在忙）",
        "claim_contradicted": " [（这次运行与上面这句话不符：{values}）]{{.claim-contradicted}}",
    },
    "en": {
        "figure": "Figure",
        "fig_sep": ". ",
        "live": "Output of the run made when this book was built",
        "live_quick": "Smoke run: the `--quick` run made when this book was built (small sizes, short training; its timings and accuracies mean nothing, full runs are in the recorded outputs)",
        "recorded": "Recorded on {device} (driver {driver}, {date}{commit})",
        "recorded_cpu": "Full run recorded on {device} ({date}{commit})",
        "commit": ", commit {commit}",
        "cpu_banner": ("**This chapter's outputs all come from a CPU.** The machine that built this book has no "
                       "GPU, and the chapter has not been recorded on one yet; to see the GPU behaviour the text "
                       "describes, run the chapter on a machine with a GPU (`tools/record` keeps that run)."),
        "folded_summary": "Folded code: lines {a}–{b}, {n} lines (click to open)",
        "folded_note": "(Lines {a}–{b} of the source file, {n} lines of boilerplate, are folded here.)",
        "twin_label": "The PyTorch way ({file})",
        "twin_title": "The PyTorch twin",
        "twin_intro": ("This chapter's PyTorch twin, `{path}`, does the same work the way the seed tutorials "
                       "write it: the same flags and the same output sections, so the two outputs can be "
                       "read side by side. Below are its whole source and its output from the run made "
                       "when this book was built."),
        "twin_output": "Output of the run made when this book was built: `{command}`",
        "twin_output_quick": "Smoke run: the `--quick` run made when this book was built (its timings mean nothing): `{command}`",
        "twin_not_run": "It was not run when this book was built: {why}",
        "no_twin": "This chapter has no PyTorch twin.",
        "placeholder": "(Preview: the output section `== {name} ==` goes here, filled in by tools/book.)",
        "fig_placeholder": "(Preview: figure {name} goes here, drawn by tools/book.)",
        "this_run": "this run",
        "fig_live": "the run made when this book was built",
        "fig_live_quick": "the smoke run (`--quick`) made when this book was built",
        "fig_on": ", on {device}",
        "fig_model": ", model {model}",
        "fig_one_point": "(This run has a single data point, which makes no curve, so the figure is left out: {caption})",
        "source_label": "Source file {file}",
        "region_label": "{where} (region {region})",
        "full_recorded": "the full run recorded on {device} ({date}{commit})",
        "full_live": "the run made when this book was built (on {device})",
        "full_live_quick": ("the smoke run (`--quick`, on {device}) made when this book was built (this "
                            "chapter has no recorded full run yet, and a smoke run's timings mean nothing)"),
        "full_suspect": (", whose own timing check flagged {suspect} of {timed} timings as implausible "
                         "(the machine was busy)"),
        "claim_contradicted": " [(this run contradicts the sentence above: {values})]{{.claim-contradicted}}",
    },
}


def fence_for(lines, char="`"):
    longest = 0
    for t in lines:
        for m in re.finditer(re.escape(char) + "+", t):
            longest = max(longest, len(m.group(0)))
    return char * max(3, longest + 1)


# Two outputs side by side share a 52rem page: each box shows about this many
# columns of code before it would scroll. Wider ones are stacked (book.css).
SIDE_BY_SIDE_COLUMNS = 42


def columns(line):
    """The width of a line in a monospaced face: East Asian wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def outputs_open(sections):
    """The opening of a group of output boxes, one per section shown: .stacked when a line would not
    fit beside another box."""
    wide = len(sections) > 1 and any(columns(ln) > SIDE_BY_SIDE_COLUMNS for sec in sections for ln in sec)
    return "::::: {.outputs .stacked}" if wide else "::::: {.outputs}"


def code_block(lines, cls, attrs=""):
    f = fence_for(lines)
    head = f"{f}{cls}" if not attrs else f"{f}{{.{cls}{attrs}}}"
    return "\n".join([head] + list(lines) + [f])


def inline_code(s):
    longest = max((len(m.group(0)) for m in re.finditer("`+", s)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{ticks}{pad}{s}{pad}{ticks}"


def attr_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Run:
    """What tools/book captured for one chapter (files in the chapter's run dir)."""

    def __init__(self, run_dir, chapter):
        self.dir = run_dir
        self.chapter = chapter
        self.out_path = os.path.join(run_dir, f"{chapter.id}.out")
        self.metrics_path = os.path.join(run_dir, f"{chapter.id}.json")
        self.info = load_json(os.path.join(run_dir, "run.json"))
        self.twin_info = load_json(os.path.join(run_dir, "twin.json"))
        if not os.path.exists(self.out_path):
            raise WeaveError(self.out_path, 0, "no captured output for the chapter (tools/book writes it)")
        with open(self.out_path, encoding="utf-8", errors="replace") as f:
            self.pre, self.sections = split_sections(f.read())
        self.twin_out = os.path.join(run_dir, f"{chapter.id}_pytorch.out")

    def device_line(self):
        for t in self.pre:
            if t.startswith("device:"):
                return t
        return None


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


class Weaver:
    def __init__(self, chapter, run=None, recorded=None, figures_dir=None, figures_href="figures", langs=LANGS):
        self.ch = chapter
        self.langs = langs  # the editions this run is woven into: their figures are drawn
        self.run = run
        self.recorded = recorded or []
        self.figures_dir = figures_dir
        self.figures_href = figures_href
        self.rendered = {}  # figure name -> [(kind, basename)]
        self._metrics = None
        self.findings = []  # ClaimFinding: claims this run contradicts

    # Figures are drawn once for both languages' files (the labels differ).
    def render_figures(self):
        if not self.figures_dir:
            return
        os.makedirs(self.figures_dir, exist_ok=True)
        for item in self.ch.figures():
            name = item["name"]
            if self.render_schematic(name):
                continue
            if not self.run:
                continue
            spec_path = self.ch.figure_spec_path(name)
            variants = []
            if os.path.exists(spec_path):
                spec = read_spec(spec_path)
                sources = [("live", self.run.metrics_path, None)]
                sources += [("recorded", r["metrics"], r) for r in self.recorded if r["metrics"]]
                for k, (kind, metrics, rec) in enumerate(sources):
                    if kind == "live" and not os.path.exists(metrics):
                        raise WeaveError(self.ch.source, item["line"], f"figure {name}: the run wrote no "
                                         f"metrics file {rel(metrics)}")
                    if points(spec, metrics) < 2:
                        continue  # one point is no curve: that run's figure is left out
                    suffix = "" if kind == "live" else f"-{rec['slug']}-{rec['date']}"
                    for lang in self.langs:
                        base = f"{self.ch.id}_{name}{suffix}.{lang}"
                        render_figure(spec, metrics, os.path.join(self.figures_dir, base), lang)
                    variants.append((kind, f"{self.ch.id}_{name}{suffix}", rec, True))
            else:
                img = None
                for ext in IMAGE_EXTS:
                    cand = os.path.join(self.run.dir, name + ext)
                    if os.path.exists(cand):
                        img = cand
                        break
                if not img:
                    raise WeaveError(self.ch.source, item["line"], f"figure {name}: no spec "
                                     f"{rel(spec_path)} and the run wrote no image {name}.png/.svg/.jpg "
                                     f"in {rel(self.run.dir)}")
                dest = f"{self.ch.id}_{os.path.basename(img)}"
                shutil.copyfile(img, os.path.join(self.figures_dir, dest))
                variants.append(("live", dest, None, False))
            self.rendered[name] = variants

    def render_schematic(self, name):
        """A figure with a .dot source beside the chapter: drawn per language, no run needed."""
        path = self.ch.figure_dot_path(name)
        if not os.path.exists(path):
            return False
        base = f"{self.ch.id}_{name}"
        for lang in self.langs:
            render_dot(path, os.path.join(self.figures_dir, f"{base}.{lang}"), lang)
        self.rendered[name] = [("schematic", base, None, True)]
        return True

    def figure_numbers(self):
        """{figure name: (its first number or None when it has no variant, caption texts)}."""
        nums, n = {}, 0
        for item in self.ch.figures():
            variants = self.rendered.get(item["name"], [])
            used = len(variants) if (self.run or variants) else 1
            nums[item["name"]] = (n + 1 if used else None, self.captions(item))
            n += used
        return nums

    def fill_figure_refs(self, text, lang, where):
        """{{fig NAME}} in prose: a link "图 N.k" / "Figure N.k" to the chapter's figure NAME."""
        nums = None

        def one(m):
            nonlocal nums
            nums = nums if nums is not None else self.figure_numbers()
            name = m.group(1)
            if name not in nums:
                raise WeaveError(where[0], where[1], f"{m.group(0)}: the chapter has no /*md figure "
                                 f"{name}*/ (it has: {', '.join(nums) or 'none'})")
            no, caps = nums[name]
            if no is None:
                return f"“{caps[lang]}”"
            return f"[{WORDS[lang]['figure']} {self.ch.number}.{no}](#fig:{self.ch.id}-{name})"
        return RE_FIG_REF.sub(one, text)

    def captions(self, item):
        caps = dict(item["captions"])
        if not caps:
            spec_path = self.ch.figure_spec_path(item["name"])
            if os.path.exists(spec_path):
                spec = read_spec(spec_path)
                caps = {lang: spec.get("caption-" + lang) for lang in LANGS if spec.get("caption-" + lang)}
        for lang in LANGS:
            if not caps.get(lang):
                raise WeaveError(self.ch.source, item["line"], f"figure {item['name']} has no {lang} caption: "
                                 "write '/*md figure NAME: zh caption | en caption*/' or put "
                                 f"'# caption-{lang}: ...' in {rel(self.ch.figure_spec_path(item['name']))}")
        return caps

    def check(self):
        """The checks that need no run: captions, figure specs, output names."""
        for item in self.ch.figures():
            self.captions(item)
            spec_path = self.ch.figure_spec_path(item["name"])
            if os.path.exists(spec_path):
                read_spec(spec_path)
            dot_path = self.ch.figure_dot_path(item["name"])
            if os.path.exists(dot_path):
                for lang in LANGS:
                    dot_text(dot_path, lang)
        names = {it["name"] for it in self.ch.figures()}
        for item in self.ch.items:  # claims and branches parse
            subs = item.get("items") or [] if item["kind"] == "source" else [item]
            for it in subs:
                if it["kind"] == "prose":
                    for _, seg in it["segments"]:
                        check_claims_syntax("\n".join(seg), (item.get("path", self.ch.source), it["line"]))
        for item in self.ch.items:  # {{fig NAME}} names a figure the chapter places
            if item["kind"] == "prose":
                for _, seg in item["segments"]:
                    for m in RE_FIG_REF.finditer("\n".join(seg)):
                        if m.group(1) not in names:
                            raise WeaveError(item.get("path", self.ch.source), item["line"],
                                             f"{m.group(0)}: the chapter has no /*md figure {m.group(1)}*/ "
                                             f"(it has: {', '.join(sorted(names)) or 'none'})")

    def markdown(self, lang):
        w = WORDS[lang]
        out = []
        fig_no = 0
        titled = False
        for item in self.ch.items:
            kind = item["kind"]
            if kind == "prose":
                text, titled = self.prose(item, lang, titled)
                out.append(text)
            elif kind == "code":
                text = self.code(item, lang, "c")
                if text:
                    out.append(text)
            elif kind == "source":
                out.append(self.source(item, lang))
            elif kind == "output":
                out.append(self.output(item, lang))
            elif kind == "figure":
                text, used = self.figure(item, lang, fig_no + 1)
                fig_no += used
                out.append(text)
            elif kind == "twin":
                start, body = self.ch.twin_regions[item["name"]]
                label = w["twin_label"].format(file=inline_code(f"{self.ch.id}_pytorch.py:{start + 1}"))
                out.append("\n".join([":::: {.twin}", f"[{label}]{{.label}}", "",
                                      code_block(body, "python"), "::::"]))
        out.append(self.twin_section(lang))
        return "\n\n".join(out) + "\n"

    def gpu_recordings(self):
        return [r for r in self.recorded if is_gpu_recording(r["header"])]

    def live_on_gpu(self):
        dev = self.run.device_line() if self.run else None
        return bool(dev) and dev.split(":", 1)[1].strip().startswith("cuda")

    def cpu_only(self):
        """True when every output of the chapter comes from a CPU: the build ran it on
        no GPU and no GPU transcript of it is kept (only known with a run)."""
        return bool(self.run) and not self.live_on_gpu() and not self.gpu_recordings()

    def recordings(self):
        """The chapter's entry of recordings.json."""
        return {"gpu": bool(self.gpu_recordings()),
                "live_device": (self.run.device_line() or "").partition(":")[2].strip() if self.run else None,
                "recorded": [{"file": os.path.basename(r["path"]), "device": r["header"]["device"],
                              "date": r["header"]["date"], "commit": r["header"].get("commit"),
                              "gpu": is_gpu_recording(r["header"])} for r in self.recorded]}

    def full_run(self, lang):
        """(metrics, words naming the run) for {{recorded ...}}: the chapter's full run, that is
        the newest recorded transcript with metrics (a CPU recording before a GPU one, the
        timings of a CPU ladder being the host's either way), else the book's own run."""
        w = WORDS[lang]
        recs = [r for r in self.recorded if r["metrics"]]
        recs.sort(key=lambda r: (not is_gpu_recording(r["header"]), r["date"]), reverse=True)
        if recs:
            rec = recs[0]
            h = rec["header"]
            metrics = load_json(rec["metrics"])
            commit = w["commit"].format(commit=h["commit"][:12]) if h.get("commit") else ""
            words = w["full_recorded"].format(device=h["device"], date=h["date"], commit=commit)
        else:
            metrics = self.metrics()
            dev = (self.run.device_line() or "").partition(":")[2].strip().split(" (")[0] or "?"
            words = w["full_live_quick" if self.run.info.get("quick") else "full_live"].format(device=dev)
        suspect, timed = suspect_timings(metrics)
        if suspect:
            words += w["full_suspect"].format(suspect=suspect, timed=timed)
        return metrics, words

    def metrics(self):
        """The live run's --metrics (placeholders in prose are filled from it)."""
        if self._metrics is None:
            self._metrics = load_json(self.run.metrics_path)
        return self._metrics

    def code(self, item, lang, cls):
        """One stretch of code (a folded one in a .folded div), or '' if it is blank."""
        w = WORDS[lang]
        lines = strip_lab_markers(item["lines"])
        lines = [(n, t) for n, t in lines if not (RE_REGION.match(t) or RE_ENDREGION.match(t))]
        if item["line"] == 1 and lines and lines[0][1].startswith("// SPDX-License-Identifier"):
            lines = lines[1:]
        while lines and lines[0][1].strip() in ("", "//"):
            lines.pop(0)
        while lines and not lines[-1][1].strip():
            lines.pop()
        if not lines:
            return ""
        text = [t for _, t in lines]
        if not item.get("hidden"):
            return code_block(text, cls)
        a, b = lines[0][0], lines[-1][0]
        n = b - a + 1
        return "\n".join([
            f"::: {{.folded summary={attr_str(w['folded_summary'].format(a=a, b=b, n=n))} "
            f"note={attr_str(w['folded_note'].format(a=a, b=b, n=n))}}}",
            code_block(text, cls), ":::"])

    def source(self, item, lang):
        """/*md source FILE [REGION]*/: a .source div labelled with the file (and lines)."""
        w = WORDS[lang]
        path, cls = item["path"], code_lang(item["path"])
        if item["region"]:
            lines = item["lines"]
            where = f"{rel(path)}:{lines[0][0]}–{lines[-1][0]}" if lines else rel(path)
            body = [self.code({"line": lines[0][0] if lines else 0, "lines": lines}, lang, cls)]
            label = w["region_label"].format(where=inline_code(where), region=inline_code(item["region"]))
        else:
            body = []
            for it in item["items"]:
                text = self.prose(it, lang, True)[0] if it["kind"] == "prose" else self.code(it, lang, cls)
                if text:
                    body.append(text)
            label = w["source_label"].format(file=inline_code(rel(path)))
        return "\n\n".join([f":::: {{.source file={attr_str(rel(path))}}}", f"[{label}]{{.label}}"] +
                             body + ["::::"])

    def prose(self, item, lang, titled):
        """The prose of one language; the chapter's title gets the chapter's id."""
        parts = []
        for seg_lang, seg in item["segments"]:
            if seg_lang in (None, lang):
                text = "\n".join(trim_blank(seg))
                if text:
                    parts.append(text)
        metrics = self.metrics() if self.run else None
        full = self.full_run(lang) if self.run else None
        where = (item.get("path", self.ch.source), item["line"])
        sources = {"metric": metrics, "recorded": full[0]} if self.run else None
        text = fill_claims("\n\n".join(parts), sources, where, lang, self.findings)
        lines = fill_metrics(self.fill_figure_refs(text, lang, where), metrics, where, full).split("\n")
        if not titled:
            i = first_heading(lines)
            if i is not None:
                if "{" not in lines[i]:
                    lines[i] += f" {{#{self.ch.id}}}"
                titled = True
                if self.cpu_only():
                    lines[i + 1:i + 1] = ["", f"::: {{.note .cpu-only}}\n{WORDS[lang]['cpu_banner']}\n:::", ""]
        return "\n".join(lines), titled

    def output(self, item, lang):
        w = WORDS[lang]
        name = item["name"]
        if not self.run:
            return f"::: {{.output .placeholder}}\n{w['placeholder'].format(name=name)}\n:::"
        if name not in self.run.sections:
            raise WeaveError(self.ch.source, item["line"], f"/*md output {name}*/: the captured output "
                             f"{rel(self.run.out_path)} has no section '== {name} ==' (it has: "
                             f"{', '.join(self.run.sections) or 'none'})")
        blocks = []
        label = w["live_quick"] if self.run.info.get("quick") else w["live"]
        dev = self.run.device_line()
        if dev:
            label += " · " + inline_code(dev)
        blocks.append(self.output_box("live", label, self.run.sections[name]))
        for rec in self.recorded:
            if name not in rec["sections"]:
                continue
            h = rec["header"]
            label = recorded_label(w, h)
            cmd = h.get("command")
            if cmd:
                label += " · " + inline_code(cmd)
            blocks.append(self.output_box("recorded", label, rec["sections"][name]))
        shown = [self.run.sections[name]] + [r["sections"][name] for r in self.recorded if name in r["sections"]]
        return "\n".join([outputs_open(shown)] + blocks + [":::::"])

    @staticmethod
    def output_box(kind, label, lines):
        """kind is one or more words ("live twin"): each becomes a class (.live .twin)."""
        classes = " ".join("." + k for k in kind.split())
        return "\n".join([f":::: {{.output {classes}}}", f"[{label}]{{.label}}", "",
                          code_block(lines, "output"), "::::"])

    def figure(self, item, lang, no):
        """The figure's variants (this run's, each recorded run's), numbered no, no+1, ...
        Returns (markdown, how many numbers it used)."""
        w = WORDS[lang]
        caps = self.captions(item)
        fig_id = f"fig:{self.ch.id}-{item['name']}"

        def caption(k):
            return f"{w['figure']} {self.ch.number}.{no + k}{w['fig_sep']}{caps[lang]}"
        if not self.run and not self.rendered.get(item["name"]):
            return (f"::: {{.figure .placeholder}}\n{w['fig_placeholder'].format(name=item['name'])}\n\n"
                    f"{caption(0)}\n:::"), 1
        variants = self.rendered.get(item["name"], [])
        if not variants:
            return f"::: {{.note}}\n{w['fig_one_point'].format(caption=caps[lang])}\n:::", 0
        out = []
        for k, (kind, base, rec, per_lang) in enumerate(variants):
            src = f"{self.figures_href}/{base}.{lang}.svg" if per_lang else f"{self.figures_href}/{base}"
            if kind == "schematic":  # a drawing, not a run's data: no run to name; its natural size
                out.append(f"![{caption(k)}]({src}){{#{fig_id if k == 0 else f'{fig_id}-{k}'} .schematic}}")
                continue
            if kind == "recorded":
                which = recorded_label(w, rec["header"])
                if rec["header"].get("command"):
                    which += " · " + inline_code(rec["header"]["command"])
            else:
                which = self.live_label(lang)
            model = load_json(rec["metrics"] if kind == "recorded" else self.run.metrics_path).get("model") \
                if (rec or {}).get("metrics") or kind == "live" else None
            if isinstance(model, str) and model:
                which += w["fig_model"].format(model=model)
            ident = fig_id if k == 0 else f"{fig_id}-{k}"
            out.append(f"![{caption(k)} — {which}]({src}){{#{ident} width=92%}}")
        return "\n\n".join(out), len(variants)

    def live_label(self, lang):
        """Which run a live figure comes from: the book's (smoke) run, its device and command."""
        w = WORDS[lang]
        label = w["fig_live_quick" if self.run.info.get("quick") else "fig_live"]
        dev = (self.run.device_line() or "").partition(":")[2].strip().split(" (")[0]
        if dev:
            label += w["fig_on"].format(device=dev)
        cmd = self.run.info.get("command")
        if cmd:
            label += " · " + inline_code(cmd)
        return label

    def twin_section(self, lang):
        w = WORDS[lang]
        head = f"## {w['twin_title']} {{#{self.ch.id}-twin .twin-section}}"
        if not os.path.exists(self.ch.twin_path):
            return f"{head}\n\n{w['no_twin']}"
        parts = [head, w["twin_intro"].format(path=rel(self.ch.twin_path)),
                 code_block(twin_full_source(self.ch.twin_path), "python")]
        if self.run:
            info = self.run.twin_info
            if os.path.exists(self.run.twin_out) and info.get("ran"):
                with open(self.run.twin_out, encoding="utf-8", errors="replace") as f:
                    lines = trim_blank(f.read().split("\n"))
                key = "twin_output_quick" if self.run.info.get("quick") else "twin_output"
                label = w[key].format(command=info.get("command", ""))
                parts.append("\n".join(["::::: {.outputs}", self.output_box("live twin", label, lines),
                                        ":::::"]))
            else:
                why = info.get("why", "tools/book left no record of it")
                parts.append(f"::: {{.note}}\n{w['twin_not_run'].format(why=why)}\n:::")
        return "\n\n".join(parts)

    def meta(self):
        return {"id": self.ch.id, "number": self.ch.number, "slug": self.ch.slug,
                "source": rel(self.ch.source), "titles": self.ch.titles,
                "twin": rel(self.ch.twin_path) if os.path.exists(self.ch.twin_path) else None,
                "figures": {name: [v[1] for v in vs] for name, vs in self.rendered.items()},
                "outputs": [it["name"] for it in self.ch.items if it["kind"] == "output"],
                "recordings": self.recordings(),
                "sources": [rel(it["path"]) + (f" {it['region']}" if it["region"] else "")
                            for it in self.ch.items if it["kind"] == "source"]}


def weave(source, run_dir=None, out_dir=None, langs=LANGS, recorded_dir=None, strict=False, warn=None):
    """Weaves one chapter; returns (meta, {lang: markdown}). Raises WeaveError. A claim the run
    contradicts is reported through warn (default: stderr) and, when strict, raises WeaveError."""
    ch = Chapter(source)
    run = Run(run_dir, ch) if run_dir else None
    recorded = read_recorded(recorded_dir if recorded_dir is not None else
                             os.path.join(ROOT, "book", "recorded"), ch.id)
    figures_dir = os.path.join(out_dir, "figures") if out_dir else None
    wv = Weaver(ch, run, recorded, figures_dir, langs=langs)
    wv.check()
    wv.render_figures()
    docs = {lang: wv.markdown(lang) for lang in langs}
    report_claims(wv.findings, strict, warn)
    meta = wv.meta()
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        for lang, text in docs.items():
            with open(os.path.join(out_dir, f"{ch.id}.{lang}.md"), "w", encoding="utf-8") as f:
                f.write(text)
        with open(os.path.join(out_dir, f"{ch.id}.meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, ensure_ascii=False, indent=2)
            f.write("\n")
        update_recordings(os.path.join(out_dir, "recordings.json"), ch.id, meta["recordings"])
    return meta, docs


def report_claims(findings, strict, warn=None):
    """Each contradicted claim as a warning; with strict, a WeaveError naming them all."""
    warn = warn or (lambda msg: print(f"weave: warning: {msg}", file=sys.stderr))
    for f in findings:
        warn(str(f))
    if strict and findings:
        first = findings[0]
        more = "".join(f"\n  {f}" for f in findings[1:])
        raise WeaveError(first.path, first.line, f"{len(findings)} claim(s) contradicted by this run "
                         f"(strict: the book fails): {str(first).split(': ', 1)[1]}{more}")


def update_recordings(path, chapter_id, entry):
    """OUT/recordings.json: {"chNN": {"gpu": bool, "live_device": str, "recorded": [...]}}, one
    entry per woven chapter (the landing page shows which chapters have GPU recordings)."""
    data = load_json(path)
    data[chapter_id] = entry
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(dict(sorted(data.items())), f, ensure_ascii=False, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def check(source):
    """Parses and checks a source without a run: raises WeaveError on the first problem."""
    ch = Chapter(source)
    Weaver(ch).check()
    return ch


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/weave", description=__doc__.split("\n\n")[0])
    p.add_argument("sources", nargs="+", metavar="CHAPTER.c")
    p.add_argument("--check", action="store_true", help="only parse and check the sources")
    p.add_argument("--run-dir", help="the chapter's captures (tools/book's build/book/run/chNN; default: none, a preview without the run's outputs)")
    p.add_argument("--out", help="write chNN.LANG.md, chNN.meta.json and figures/ here "
                                 "(default: the Markdown to stdout)")
    p.add_argument("--lang", choices=LANGS, help="one language only (default: both)")
    p.add_argument("--recorded", help="recorded GPU transcripts (default: book/recorded)")
    p.add_argument("--strict", action="store_true", default=os.environ.get("CT_BOOK_STRICT") == "1",
                   help="fail (exit 1) when the run contradicts a {{claim}} (default: warn; on with "
                        "CT_BOOK_STRICT=1, as CI sets it)")
    p.add_argument("--lint-claims", action="store_true",
                   help="list the sentences with a measured number and a speed word outside any "
                        "{{claim}}/{{if}} (FILE:LINE: lang: sentence); exit 1 when there are any")
    a = p.parse_args(argv)
    try:
        if a.check:
            for s in a.sources:
                check(s)
            return 0
        if a.lint_claims:
            found = [f for s in a.sources for f in speed_findings(s)]
            for path, line, lang, sentence in found:
                print(f"{rel(path)}:{line}: {lang}: {sentence}")
            return 1 if found else 0
        if len(a.sources) != 1:
            p.error("weave one chapter at a time (or use --check)")
        langs = (a.lang,) if a.lang else LANGS
        meta, docs = weave(a.sources[0], a.run_dir, a.out, langs, a.recorded, a.strict)
        if not a.out:
            for lang in langs:
                sys.stdout.write(docs[lang])
    except WeaveError as e:
        print(f"weave: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
