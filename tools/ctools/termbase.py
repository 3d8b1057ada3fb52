#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/termbase.py (code: tools/ctools/termbase.py): the zh edition's one vocabulary (book/termbase.json).

    tools/termbase.py check [ROOT]     every zh text against the termbase; exit 1 with
                                       FILE:LINE: the synonym found and the term to write
    tools/termbase.py list [ROOT]      the termbase as a table (English, Chinese, avoided)

What is checked (the zh text a reader sees): the '::: zh' divs of every chapter's
prose blocks (chapters/chNN_*/chNN_*.c and the chapters' .cu files), the zh texts of
book/chapters.json, book/preface.zh.md and book/instructors.zh.md. Code is not prose:
fenced blocks, `inline code`, {{metric ...}} and link targets are blanked first.

For tools/book (the glossary): glossary_md(lang, terms, chapter_entries) writes the
core terms' definitions, the vocabulary table (with the avoided synonyms, so the
search page, which indexes the glossary, finds a term by its English name and by a
synonym) and the A-Z index (pinyin order in zh, from glibc's pinyin collation table).
Standard library only.
"""
import glob
import json
import os
import re
import sys

from .weave import lang_of_div  # which language a '::: ' div is

RE_OPEN = re.compile(r"^/\*md\s*$")
RE_CLOSE = re.compile(r"^\s*\*/\s*$")
RE_DIV_OPEN = re.compile(r"^(:{3,})\s*([^:\s].*?)\s*:*\s*$")
RE_DIV_CLOSE = re.compile(r"^:{3,}\s*$")
RE_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def load(root):
    with open(os.path.join(root, "book", "termbase.json"), encoding="utf-8") as f:
        terms = json.load(f)["terms"]
    for t in terms:
        t["_avoid"] = [re.compile(re.escape(a)) for a in t.get("avoid", [])] + \
                      [re.compile(a) for a in t.get("avoid_re", [])]
        t["_allow"] = sorted(set(t.get("allow", []) + [f"{t['zh']}（{t['en']}）", f"{t['zh']}({t['en']})"]),
                             key=len, reverse=True)
    return terms


# ---------------------------------------------------------------------------
# the zh text of the book's sources: (path, line, text)

def chapter_zh(path):
    """The lines of the '::: zh' divs of a literate source's prose blocks, fences left out."""
    inblock, depth, cur, fence = False, 0, None, None
    with open(path, encoding="utf-8") as f:
        for n, t in enumerate(f, 1):
            t = t.rstrip("\n")
            if not inblock:
                if RE_OPEN.match(t):
                    inblock, depth, cur, fence = True, 0, None, None
                continue
            if fence is None and depth == 0 and RE_CLOSE.match(t):
                inblock = False
                continue
            m = RE_FENCE.match(t)
            if fence:
                if m and m.group(1)[0] == fence and t.strip() == m.group(1):
                    fence = None
                continue
            if m:
                fence = m.group(1)[0]
                continue
            if RE_DIV_CLOSE.match(t):
                depth = max(0, depth - 1)
                if depth == 0:
                    cur = None
                continue
            m = RE_DIV_OPEN.match(t)
            if m:
                depth += 1
                lang = lang_of_div(m.group(2))
                if lang and depth == 1:
                    cur = lang
                continue
            if cur == "zh":
                yield n, t


def markdown_zh(path):
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, t in enumerate(f, 1):
            t = t.rstrip("\n")
            m = RE_FENCE.match(t)
            if fence:
                if m and m.group(1)[0] == fence and t.strip() == m.group(1):
                    fence = None
                continue
            if m:
                fence = m.group(1)[0]
                continue
            yield n, t


def json_zh(path):
    """Every string under a "zh" key, with the line of the file it is on."""
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    lines = raw.split("\n")

    def walk(obj, out):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k == "zh":
                    strings(v, out)
                else:
                    walk(v, out)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, out)
    def strings(obj, out):
        if isinstance(obj, str):
            out.append(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                strings(v, out)
        elif isinstance(obj, list):
            for v in obj:
                strings(v, out)
    texts = []
    walk(json.loads(raw), texts)
    for s in texts:
        enc = json.dumps(s, ensure_ascii=False)[1:-1]
        n = next((i for i, l in enumerate(lines, 1) if enc in l), 0)
        yield n, s


def sources(root):
    out = []
    for p in sorted(glob.glob(os.path.join(root, "chapters", "ch*_*", "*.c")) +
                    glob.glob(os.path.join(root, "chapters", "ch*_*", "*.cu"))):
        out.append((p, chapter_zh))
    for name in ("preface.zh.md", "instructors.zh.md"):
        p = os.path.join(root, "book", name)
        if os.path.exists(p):
            out.append((p, markdown_zh))
    for name in ("chapters.json", "performance.json", "remember.json", "termbase.json"):
        p = os.path.join(root, "book", name)
        if os.path.exists(p):
            out.append((p, json_zh))
    return out


def blank_code(t):
    """Inline code and {{metric ...}} replaced by spaces; a link by its text."""
    t = re.sub(r"(`+).*?\1", lambda m: " " * len(m.group(0)), t)
    t = re.sub(r"\{\{.*?\}\}", lambda m: " " * len(m.group(0)), t)
    t = re.sub(r"\[([^\]]*)\]\([^)\s]*\)", r"\1", t)          # a link: its text
    t = re.sub(r"\{#[^}]*\}", lambda m: " " * len(m.group(0)), t)
    return t


def findings(terms, text):
    """[(column, found, term)] for one line of zh prose."""
    text = blank_code(text)
    out = []
    for t in terms:
        masked = text
        for a in t["_allow"]:
            masked = masked.replace(a, "\0" * len(a))
        seen = set()
        for rx in t["_avoid"]:
            for m in rx.finditer(masked):
                if m.start() not in seen:
                    seen.add(m.start())
                    out.append((m.start(), m.group(0), t))
    return sorted(out, key=lambda x: x[0])


def check(root, terms=None):
    """Problems as 'FILE:LINE: ...' sentences ([] when the zh text keeps the termbase)."""
    terms = terms if terms is not None else load(root)
    problems = []
    for path, reader in sources(root):
        rel = os.path.relpath(path, root)
        for n, text in reader(path):
            for col, found, t in findings(terms, text):
                problems.append(f"{rel}:{n}: '{found}' for {t['en']}: the book writes '{t['zh']}' "
                                f"(book/termbase.json, id {t['id']})")
    return problems


# ---------------------------------------------------------------------------
# the glossary's termbase sections and A-Z index (tools/book)

WORDS = {
    "zh": {"core": "全书通用术语", "core_intro": "每一章都用到、却没有哪一章专门引入的词。",
           "table": "中英术语对照", "table_intro": "中文版对每个英文术语只用一个中文词；右栏是别处常见的叫法，本书不用于此义（搜索它们也能找到本书的用词）。",
           "en": "英文", "zh": "本书用词", "avoid": "别处的叫法（本书不用于此义）", "index": "索引（按拼音）",
           "index_intro": "术语表里的全部术语，按拼音（英文词按字母）排列。", "other": "其他"},
    "en": {"core": "Terms used everywhere", "core_intro": "Words every chapter uses and none introduces.",
           "table": "The Chinese vocabulary", "table_intro": "The Chinese edition uses one Chinese word for each English term; the last column lists the words other texts use, which the book does not use in this sense (searching for one finds the book's word).",
           "en": "English", "zh": "Chinese", "avoid": "other texts' words (not used for this)", "index": "Index (A-Z)",
           "index_intro": "Every term of the glossary, in alphabetical order.", "other": "Other"},
}

PINYIN_TABLE = "/usr/share/i18n/locales/iso14651_t1_pinyin"
# The first character of each initial's first syllable in glibc's pinyin order (a, ba, ca, ...).
PINYIN_ANCHORS = "阿八擦搭额发嘎哈鸡卡拉妈拿哦趴七然撒他挖西压杂"
PINYIN_LETTERS = "ABCDEFGHJKLMNOPQRSTWXYZ"
_order = None


def _pinyin_order():
    global _order
    if _order is None:
        _order = {}
        if os.path.exists(PINYIN_TABLE):
            rx = re.compile(r"^<U([0-9A-F]{4,5})>\s")
            with open(PINYIN_TABLE, encoding="utf-8", errors="replace") as f:
                for line in f:
                    m = rx.match(line)
                    if m:
                        _order.setdefault(chr(int(m.group(1), 16)), len(_order))
    return _order


def sort_key(lang, s):
    """(letter, key): the index heading a term goes under and its order within it."""
    s = re.sub(r"[`*_\[\]]", "", s).strip()
    first = s[:1]
    if first.isascii():
        return (first.upper() if first.isalpha() else "#", (0, s.casefold()))
    order = _pinyin_order()
    if lang != "zh" or first not in order:
        return ("#", (1, s))
    pos = order[first]
    letter = "#"
    for a, l in zip(PINYIN_ANCHORS, PINYIN_LETTERS):
        if a in order and order[a] <= pos:
            letter = l
    return (letter, (1, [order.get(c, 1 << 20) for c in s if not c.isspace()], s))


def glossary_md(lang, terms, entries):
    """The Markdown the glossary page gains. entries: [(term text, anchor)] of the glossary's
    chapter terms; the core terms are added to the index here."""
    w = WORDS[lang]
    out = [f"## {w['core']} {{#glossary-core}}", "", w["core_intro"], ""]
    index = list(entries)
    for t in terms:
        if t.get("core"):
            name = f"{t['zh']}（{t['en']}）" if lang == "zh" else t["en"]
            out += [f"[{name}]{{#glossary-{t['id']}}}", f":   {t['def'][lang]}", ""]
            index.append((t["zh"] if lang == "zh" else t["en"], f"glossary-{t['id']}"))
    out += [f"## {w['table']} {{#glossary-vocabulary}}", "", w["table_intro"], "",
            f"| {w['en']} | {w['zh']} | {w['avoid']} |", "|---|---|---|"]
    for t in sorted(terms, key=lambda t: t["en"].casefold()):
        shown = list(t.get("avoid", [])) + list(t.get("search", []))
        out.append(f"| {t['en']} | {t['zh']} | {'、'.join(shown) if lang == 'zh' else ', '.join(shown)} |")
    out += ["", f"## {w['index']} {{#glossary-index}}", "", w["index_intro"], ""]
    groups = {}
    for name, anchor in index:
        letter, key = sort_key(lang, name)
        groups.setdefault(letter, []).append((key, name, anchor))
    for letter in sorted(groups, key=lambda l: (l == "#", l)):
        items = sorted(groups[letter], key=lambda x: x[0])
        heading = w["other"] if letter == "#" else letter
        out += [f"**{heading}**{'：' if lang == 'zh' else ': '}" +
                ("、" if lang == "zh" else " · ").join(f"[{n}](#{a})" for _, n, a in items), ""]
    return "\n".join(out)


def aliases(lang, terms):
    """{word: [the book's words]} for the search (book/book.js folds queries to lower case):
    in zh, a term's English name and its synonyms find the book's Chinese term; in en, the
    Chinese term and its synonyms find the English one."""
    out = {}
    for t in terms:
        en = re.sub(r"\s*\(.*\)$", "", t["en"]).strip()
        target = t["zh"] if lang == "zh" else en
        words = set(t.get("avoid", []) + t.get("search", []) + ([en, t["en"]] if lang == "zh" else [t["zh"]]))
        for w in words:
            k = w.casefold()
            if k and k != target.casefold() and not re.search(r"\s", k):   # queries split at spaces
                out.setdefault(k, [])
                if target.casefold() not in out[k]:
                    out[k].append(target.casefold())
    return out


def main(argv):
    if len(argv) < 2 or argv[1] not in ("check", "list"):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    root = os.path.abspath(argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(__file__), "..", ".."))
    terms = load(root)
    if argv[1] == "list":
        for t in terms:
            print(f"{t['en']}\t{t['zh']}\t{'、'.join(t.get('avoid', []) + t.get('avoid_re', []))}")
        return 0
    problems = check(root, terms)
    for p in problems:
        print(p)
    if problems:
        print(f"termbase: {len(problems)} synonym(s) in zh text; write the book's term "
              f"(or, for another sense of the word, add the phrase to the term's 'allow')", file=sys.stderr)
        return 1
    print(f"termbase: the zh text keeps the book's {len(terms)} terms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
