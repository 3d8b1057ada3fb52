# SPDX-License-Identifier: MIT
"""tools/book_appendix.py: the book's performance appendix, for tools/book.

What it makes: one page per edition, performance.LANG.md (the HTML page
performance.html and a chapter of the PDF, after the last chapter), with for
every device that has a bench recording in book/recorded/ (the JSON that
tools/bench writes beside its report, bench-DEVICE-DATE.json; the latest full
run of each device) its header facts (device, driver, CUDA, PyTorch, date,
commit, load, mode), a table of its rows (C figure, PyTorch or reference
figure, ratio, goal, met, the fraction of the device's ceiling) and a bar
chart drawn by gnuplot (C over the reference per row, a line at 1, the
fraction of the ceiling where a row has one); then, where no GPU recording
exists, every GPU row of tools/bench marked "not yet measured on a GPU"; last,
a paragraph per row id saying why the row is where it is.

Invariant: every number on the page is read from a recording; the words
around them come from book/performance.json, keyed by tools/bench's row ids
(tools/bench --list-rows). A row id without its title, label and paragraph in
both languages is shown with the bench's own words and no paragraph, and
problems() names it with the fix: tools/book prints that, and the test
book.appendix_text fails on it. A row that compares two measurements of one
C program (CHAPTER_RATIOS) must not point the opposite way from the same
comparison in that chapter's own recording, which its prose interprets:
disagreements() names such a row the same way.
Standard library only; gnuplot draws the figures.
"""
import glob
import json
import math
import os
import re
import shutil
import subprocess

from . import bench  # its row catalog and its number format
from .text import cell, finite  # shared with other tools

LANGS = ("zh", "en")
PAGE = "performance"           # performance.LANG.md -> performance.html
TEXT_FILE = "performance.json"  # in book/

WORDS = {
    "zh": {
        "title": "附录　性能", "nav": "性能附录",
        "facts": ["设备", "驱动", "CUDA", "PyTorch", "日期", "提交", "负载（1 分钟平均）", "模式", "录制文件"],
        "head": ["行", "C", "PyTorch / 参照", "比值", "目标", "达到", "占上限"],
        "met": {"yes": "是", "no": "否", "n/a": "无法判断", "-": "—", "unstable": "不稳定，未判断"},
        "torch": "（PyTorch {v}）",
        "load": "开始时 {a:.2f}，结束时 {b:.2f}（{n} 个 CPU）", "no_gpu_fact": "无（在 CPU 上运行）",
        "mode": {"full": "完整尺寸", "quick": "`--quick`（冒烟运行）"},
        "not_gpu": "尚未在 GPU 上测量", "gpu_only": "只在 GPU 上测量，见 GPU 的表",
        "not_here": "本次运行无法测量（原因见下文）",
        "gpu_section": "GPU：尚未测量", "gpu_intro": (
            "还没有 GPU 上的录制。下表列出 `tools/bench` 在 GPU 上报告的每一行；借到 GPU 的机器运行 "
            "`tools/gpu-check`（其中包括 `tools/bench`）后，这里换成那次录制的数字。"),
        "gpu_missing": "这次 GPU 录制缺少下面这些行（它们尚未在 GPU 上测量）：",
        "table_note": ("比值 = C 的数字 ÷ PyTorch（或该行的参照）的数字，大于 1 表示 C 更快；“占上限”是 C 的数字占设备上限的比例："
                       "矩阵乘法的行相对第 4 章估计的算力峰值，带宽的行相对同一次运行中测得的拷贝带宽。"
                       "“—”表示该行没有目标，只作参考。"),
        "figure": "图 A.{n}", "fig_sep": "　",
        "caption": ("{device}上每一行的比值（C ÷ PyTorch 或该行的参照，对数坐标；虚线是 1，右边表示 C 更快），"
                    "以及有设备上限的行里 C 的数字占上限的比例；{date} 的录制，提交 {commit}。"),
        "legend_ratio": "C ÷ PyTorch（或参照）", "legend_fraction": "C 占设备上限的比例",
        "legend_one": "1：与参照一样快",
        "xlabel": "比值（对数坐标）",
        "why": "每一行为什么在那里", "why_intro": "下面按章排列，每段对应上面表里的一行（所有设备共用）。",
        "chapter": "第 {n} 章", "recorded": "在 {device} 上录制",
        "ignored": "未收入本附录的录制：{files}（{why}）。",
    },
    "en": {
        "title": "Appendix: Performance", "nav": "Performance appendix",
        "facts": ["Device", "Driver", "CUDA", "PyTorch", "Date", "Commit", "Load (1-minute average)", "Mode",
                  "Recording"],
        "head": ["row", "C", "PyTorch / reference", "ratio", "goal", "met", "of ceiling"],
        "met": {"yes": "yes", "no": "no", "n/a": "n/a", "-": "-", "unstable": "unstable, not judged"},
        "torch": " (PyTorch {v})",
        "load": "{a:.2f} at the start, {b:.2f} at the end ({n} CPUs)", "no_gpu_fact": "none (a CPU run)",
        "mode": {"full": "full sizes", "quick": "`--quick` (a smoke run)"},
        "not_gpu": "not yet measured on a GPU", "gpu_only": "measured on a GPU only: see the GPU table",
        "not_here": "not measurable in this run (why below)",
        "gpu_section": "GPU: not yet measured", "gpu_intro": (
            "There is no GPU recording yet. The table lists every row `tools/bench` reports on a GPU; once a "
            "lent GPU machine runs `tools/gpu-check` (which runs `tools/bench`), this section shows that "
            "recording's numbers instead."),
        "gpu_missing": "This GPU recording lacks the rows below (not yet measured on a GPU):",
        "table_note": ("ratio = the C figure ÷ the PyTorch (or the row's reference) figure; above 1, C is faster. "
                       "\"of ceiling\" is the C figure's fraction of the device's limit: the matrix-product rows "
                       "against the peak chapter 4 estimates, the bandwidth rows against the copy bandwidth "
                       "measured in the same run. \"-\" as a goal: the row is shown for context."),
        "figure": "Figure A.{n}", "fig_sep": ". ",
        "caption": ("Each row's ratio on {device} (C ÷ PyTorch or the row's reference, log scale; the dashed "
                    "line is 1, right of it C is faster), and where a row has a device ceiling the C figure's "
                    "fraction of it; the recording of {date}, commit {commit}."),
        "legend_ratio": "C ÷ PyTorch (or reference)", "legend_fraction": "C's fraction of the device ceiling",
        "legend_one": "1: as fast as the reference",
        "xlabel": "ratio (log scale)",
        "why": "Why each row is where it is", "why_intro": ("Chapter by chapter, a paragraph for each row of "
                                                             "the tables above (the same for every device)."),
        "chapter": "Chapter {n}", "recorded": "recorded on {device}",
        "ignored": "Recordings left out of this appendix: {files} ({why}).",
    },
}
UNITS_ZH = {"steps/s": "步/秒", "images/s": "张/秒", "pipelines/s": "条/秒", "x": "倍"}


class AppendixError(Exception):
    """A problem that stops the book: the message names it and the fix."""


def load_text(book_dir):
    with open(os.path.join(book_dir, TEXT_FILE), encoding="utf-8") as f:
        return json.load(f)


def anchor(rid):
    """The id of a row's paragraph: why-ch05-steps."""
    return "why-" + re.sub(r"[^a-z0-9]+", "-", rid.lower()).strip("-")


# ---------------------------------------------------------------------------
# the text: every row id of the bench has its title and paragraph

def problems(text, catalog):
    """Sentences naming what book/performance.json lacks for the catalog's rows ([] if nothing)."""
    out = []
    where = f"book/{TEXT_FILE}"
    for lang in LANGS:
        if not (text.get("intro") or {}).get(lang):
            out.append(f"{where}: the intro has no {lang} text")
    rows = text.get("rows") or {}
    ids = []
    for c in catalog:
        if not c["id"]:
            out.append(f"tools/bench: the row '{c['target']}' (rows_{c['chapter']}, {c['device']}) has no id: "
                       f"give its Row(...) rid=\"{c['chapter']}.NAME\" and write its title and paragraph in {where}")
            continue
        ids.append(c["id"])
    for rid in dict.fromkeys(ids):
        e = rows.get(rid)
        if e is None:
            out.append(f"{where}: no entry for the bench row '{rid}': add \"{rid}\": {{\"title\": {{\"zh\", \"en\"}}, "
                       f"\"short\": {{\"zh\", \"en\"}}, \"why\": {{\"zh\", \"en\"}}}} (the table's title, the chart's "
                       f"label and a paragraph saying why the row is where it is)")
            continue
        for part in ("title", "short", "why"):
            for lang in LANGS:
                v = (e.get(part) or {}).get(lang)
                if not isinstance(v, str) or not v.strip():
                    out.append(f"{where}: the row '{rid}' has no {lang} {part}")
    for rid in rows:
        if rid not in ids:
            out.append(f"{where}: '{rid}' is not a row of tools/bench (tools/bench --list-rows): remove it or fix its id")
    return out


# ---------------------------------------------------------------------------
# the recordings

def read_recordings(recorded_dir):
    """(recordings, ignored): the latest full-size bench JSON of each device, CPUs first, then
    GPUs by name; and [(file, why)] for bench files left out (a --quick smoke run, an unreadable
    file, a report without its JSON, an older recording of the same device)."""
    latest, ignored = {}, []
    for path in sorted(glob.glob(os.path.join(recorded_dir, "bench-*.json"))):
        name = os.path.basename(path)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            ignored.append((name, f"unreadable: {e}"))
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list) or not doc.get("device_slug"):
            ignored.append((name, "not a tools/bench JSON"))
            continue
        if doc.get("mode") != "full":
            ignored.append((name, "a --quick smoke run"))
            continue
        doc["file"] = name
        slug = doc["device_slug"]
        if slug in latest:
            older, newer = sorted([latest[slug], doc], key=lambda d: (d.get("date", ""), d["file"]))
            ignored.append((older["file"], "an older recording of the same device"))
            doc = newer
        latest[slug] = doc
    for md in sorted(glob.glob(os.path.join(recorded_dir, "bench-*.md"))):
        if not os.path.exists(md[:-3] + ".json"):
            ignored.append((os.path.basename(md), "a report without its JSON (written before tools/bench wrote one)"))
    recs = sorted(latest.values(), key=lambda d: (d.get("device") != "cpu", d["device_slug"]))
    return recs, ignored



# ---------------------------------------------------------------------------
# the chapters and the appendix agree in direction

def _ratio(a, b):
    return lambda m: (m[a] / m[b]) if finite(m.get(a)) and finite(m.get(b)) and m[b] else None


# A row of tools/bench that compares two measurements of one C program (both figures from the
# chapter), and the same comparison in that chapter's own recording (book/recorded/chNN-*.json),
# which the chapter's prose interprets: (row id, the row's `at` or None, chapter, ratio of its metrics).
CHAPTER_RATIOS = (
    ("ch07.dp_vs_one_device", None, "ch07", _ratio("single_ms_per_step", "dp_ms_per_step")),
    ("ch08.ddp_vs_dp", None, "ch08", _ratio("dp_ms_per_step", "ddp_ms_per_step")),
    ("ch09.c_lowp_vs_f32", "bfloat16", "ch09", lambda m: m.get("gemm_speedup_bfloat16")),
    ("ch09.c_lowp_vs_f32", "float16", "ch09", lambda m: m.get("gemm_speedup_float16")),
    ("ch10.replay_vs_eager", None, "ch10", lambda m: m.get("speedup_smallest")),
    ("ch10.replay_vs_eager_wide", None, "ch10", lambda m: m.get("speedup_largest")),
    ("ch11.c_profiled", None, "ch11", lambda m: m.get("profiled_speed")),
    ("ch12.two_stream_speedup_c", None, "ch12", lambda m: m.get("overlap_speedup")),
    ("ch13.gate_fused_vs_unfused", None, "ch13", lambda m: m.get("gate_speedup")),
    ("ch13.gelu_fused_vs_unfused", None, "ch13", lambda m: m.get("gelu_speedup")),
)
SAME_WITHIN = 0.10  # a ratio within 10% of 1 has no direction: it agrees with either


def direction(r):
    """+1 (the first figure clearly larger), -1 (clearly smaller), 0 (within SAME_WITHIN of 1), None."""
    if not finite(r) or r <= 0:
        return None
    return 1 if r > 1 + SAME_WITHIN else -1 if r < 1 - SAME_WITHIN else 0


def chapter_recording(recorded_dir, chapter, device_slug):
    """(file name, metrics) of the chapter's newest untagged recording on the bench's device, or None."""
    pat = re.compile(rf"^{chapter}-{re.escape(device_slug)}-(\d{{4}}-\d\d-\d\d)\.json$")
    found = sorted((m.group(1), fn) for fn in os.listdir(recorded_dir) if (m := pat.match(fn)))
    if not found:
        return None
    fn = found[-1][1]
    try:
        with open(os.path.join(recorded_dir, fn), encoding="utf-8") as f:
            return fn, json.load(f)
    except (OSError, ValueError):
        return None


def disagreements(recs, recorded_dir):
    """The rows where a bench recording and the chapter's own recording on the same device point
    opposite ways (one clearly above 1, the other clearly below): ["file row: ... ", ...]."""
    out = []
    for rec in recs:
        rows = {(r.get("id"), r.get("at")): r for r in rec.get("rows", [])}
        for rid, at, chapter, get in CHAPTER_RATIOS:
            row = next((r for (i, a), r in rows.items() if i == rid and (at is None or a == at)), None)
            found = chapter_recording(recorded_dir, chapter, rec["device_slug"])
            if row is None or found is None:
                continue
            fn, metrics = found
            b, c = row.get("ratio"), get(metrics)
            db, dc = direction(b), direction(c)
            if db is not None and dc is not None and db * dc < 0:
                out.append(f"{rec['file']} row {rid}{' (' + at + ')' if at else ''}: ratio {b:.3g}, but "
                           f"{fn} gives {c:.3g}: the appendix and {chapter}'s prose point opposite ways; "
                           f"record both again on a quiet machine (tools/bench, tools/record {chapter})")
    return out


# ---------------------------------------------------------------------------
# rows as the page shows them

def shown_rows(rec, catalog, text, gpu_measured, lang, bench):
    """The rows of one recording's table, in the report's order, then (a GPU recording) the GPU rows
    of the catalog it lacks: [{id, at, title, cells: [7 strings], ratio, fraction}]."""
    w = WORDS[lang]
    rows = []
    for r in rec["rows"]:
        rows.append(row_cells(r, text, lang, bench, gpu_measured, rec.get("device") == "cpu"))
    if rec.get("device") == "cuda":
        have = {r.get("id") for r in rec["rows"]}
        for c in catalog_rows(catalog, "cuda"):
            if c["id"] not in have:
                rows.append(unmeasured(c, text, lang, w["not_gpu"]))
    return rows


def catalog_rows(catalog, device):
    seen, out = set(), []
    for c in catalog:
        if c["device"] == device and c["id"] and c["id"] not in seen:
            seen.add(c["id"])
            out.append(c)
    return out


def title_of(rid, at, text, lang, fallback, chapter=True):
    """A row's title in the edition's language ("ch05 · training steps/s: C / PyTorch"), with its
    qualifier (a size, a dtype) in parentheses; the bench's own words where the text has no entry."""
    e = (text.get("rows") or {}).get(rid or "")
    t = e["title"][lang] if e else fallback
    if e and chapter:
        t = f"{rid.split('.')[0]} · {t}"
    return f"{t} ({at_str(at, lang)})" if at else t


def unit_str(unit, lang):
    return UNITS_ZH.get(unit, unit) if lang == "zh" else unit


def goal_str(goal, op):
    if not finite(goal):
        return None
    return f"{'≥' if op == '>=' else '>'}\u00a0{goal:.2f}"   # no break inside a goal


def row_cells(r, text, lang, bench, gpu_measured, on_cpu):
    w = WORDS[lang]
    rid = r.get("id")
    title = title_of(rid, r.get("at"), text, lang, r.get("target", "?"))
    if rid and rid in (text.get("rows") or {}):
        title = f"[{title}](#{anchor(rid)})"
    unit = unit_str(r.get("unit", ""), lang)
    a, b, ratio, frac = r.get("a"), r.get("b"), r.get("ratio"), r.get("fraction")
    goal = goal_str(r.get("goal"), r.get("op")) or w["met"]["-"]
    met = w["met"].get(r.get("met"), r.get("met") or "")
    if not finite(a) and not finite(b):
        if on_cpu and "needs a GPU" in (r.get("note") or ""):
            why = w["gpu_only"] if rid in gpu_measured else w["not_gpu"]
        else:
            why = w["not_here"]
        cells = [title, f"[{why}]{{.unmeasured}}", "", "", goal, met, ""]
    else:
        cells = [title, figure_cell(bench, a, unit, r.get("a_torch"), lang),
                 figure_cell(bench, b, unit, r.get("b_torch"), lang),
                 f"{ratio:.3f}" if finite(ratio) else "-", goal, met,
                 f"{100 * frac:.1f} %" if finite(frac) else ""]
    return {"id": rid, "at": r.get("at"), "cells": cells, "ratio": ratio if finite(ratio) else None,
            "fraction": frac if finite(frac) else None, "label": chart_label(rid, r.get("at"), text, lang, r)}


def figure_cell(bench, v, unit, torch_version, lang):
    """A figure as the table shows it, with the PyTorch version that made it where the recording
    names one (recordings before the PyTorch 2.x venv name it only in the header)."""
    if not finite(v):
        return "-"
    s = bench.fmt(v, unit)
    if torch_version:
        s += WORDS[lang]["torch"].format(v=str(torch_version).split("+")[0])
    return s


def unmeasured(c, text, lang, words):
    w = WORDS[lang]
    title = title_of(c["id"], None, text, lang, c["target"])
    if c["id"] in (text.get("rows") or {}):
        title = f"[{title}](#{anchor(c['id'])})"
    return {"id": c["id"], "at": None, "ratio": None, "fraction": None, "label": "",
            "cells": [title, f"[{words}]{{.unmeasured}}", "", "", goal_str(c["goal"], c["op"]) or w["met"]["-"], w["met"]["n/a"]
                      if c["goal"] is not None else w["met"]["-"], ""]}


def chart_label(rid, at, text, lang, r):
    """A row's label on the chart's axis: its chapter and short label, with its qualifier
    (the bench's target, cut short, where the text has no entry)."""
    e = (text.get("rows") or {}).get(rid or "")
    if e:
        label = f"{rid.split('.')[0]} {e['short'][lang]}"
    else:
        t = r.get("target", "?")
        label = t if len(t) <= 40 else t[:39].rstrip() + "…"
    return label + (f" [{at_str(at, lang)}]" if at else "")


def at_str(at, lang):
    """A row's qualifier in the edition's language ("width 16" -> "宽度 16")."""
    return re.sub(r"\bwidth\b", "宽度", at) if lang == "zh" else at


# ---------------------------------------------------------------------------
# Markdown


def table(head, rows, widths):
    """A pipe table; widths: the dashes of each column (Pandoc sets relative widths from them)."""
    aligns = [":" + "-" * (widths[0] - 1)] + ["-" * (n - 1) + ":" for n in widths[1:]]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(aligns) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return out


def facts_table(rec, lang):
    w = WORDS[lang]
    commit = str(rec.get("commit") or "unknown")
    load = w["load"].format(a=rec.get("load_start", float("nan")), b=rec.get("load_end", float("nan")),
                            n=rec.get("ncpu", "?"))
    values = [rec.get("device_desc") or rec.get("device"), fact(rec.get("driver"), lang), fact(rec.get("cuda"), lang),
              f"{rec.get('torch') or '-'}", rec.get("date") or "-", f"`{commit}`", load,
              w["mode"].get(rec.get("mode"), rec.get("mode") or "-"), f"`book/recorded/{rec['file']}`"]
    out = ["::: {.perf-facts}", "| | |", "|:--|:--------|"]
    out += [f"| {k} | {cell(v)} |" for k, v in zip(w["facts"], values)]
    return out + [":::"]


def fact(value, lang):
    """A header fact as the edition says it (the bench writes "none (a CPU run)" on a CPU)."""
    if not value:
        return "-"
    return WORDS[lang]["no_gpu_fact"] if value.startswith("none") else value


def section_id(slug):
    return "perf-" + re.sub(r"[^a-z0-9]+", "-", slug.lower()).strip("-")


def markdown(lang, recs, catalog, text, figures, chapters, bench, ignored=()):
    """The appendix page in one language. figures: {device_slug: figure base name} (those drawn);
    chapters: {chNN: {"number": n, "title": {lang: ...}}}."""
    w = WORDS[lang]
    out = [f"# {w['title']} {{#{PAGE}}}", "", text["intro"][lang], ""]
    gpu_measured = {r.get("id") for rec in recs if rec.get("device") == "cuda" for r in rec["rows"]
                    if finite(r.get("a")) or finite(r.get("b"))}
    widths = [34, 14, 14, 8, 8, 6, 8]
    fig_no = 0
    for rec in recs:
        sid = section_id(rec["device_slug"])
        out += [f"## {rec.get('device_desc') or rec['device_slug']} {{#{sid}}}", ""]
        out += facts_table(rec, lang) + [""]
        rows = shown_rows(rec, catalog, text, gpu_measured, lang, bench)
        out += [f"::: {{.perf-table data-device=\"{rec['device_slug']}\" data-recording=\"{rec['file']}\"}}"]
        out += table(w["head"], [r["cells"] for r in rows], widths) + [":::", ""]
        out += [w["table_note"], ""]
        base = figures.get(rec["device_slug"])
        if base:
            fig_no += 1
            cap = w["figure"].format(n=fig_no) + w["fig_sep"] + w["caption"].format(
                device=rec.get("device_desc") or rec["device_slug"], date=rec.get("date", "?"),
                commit=str(rec.get("commit") or "?")[:12])
            out += [f"![{cap}](figures/{base}.{lang}.svg){{#fig:{sid} .perf-figure width=100%}}", ""]
    if not any(rec.get("device") == "cuda" for rec in recs):
        out += [f"## {w['gpu_section']} {{#perf-gpu}}", "", w["gpu_intro"], ""]
        rows = [unmeasured(c, text, lang, w["not_gpu"]) for c in catalog_rows(catalog, "cuda")]
        out += ["::: {.perf-table data-device=\"gpu\" data-recording=\"\"}"]
        out += table(w["head"], [r["cells"] for r in rows], widths) + [":::", ""]
    if ignored:
        out += ["::: {.perf-ignored}", w["ignored"].format(files=", ".join(f"`{f}`" for f, _ in ignored),
                                                          why="; ".join(sorted({y for _, y in ignored}))), ":::", ""]
    out += [f"## {w['why']} {{#perf-why}}", "", w["why_intro"], ""]
    rows_text = text.get("rows") or {}
    ids = list(dict.fromkeys(c["id"] for c in catalog if c["id"] in rows_text))
    for chap in sorted({i.split(".")[0] for i in ids}, key=lambda c: int(re.sub(r"\D", "", c) or 0)):
        ch = chapters.get(chap)
        head = ch["title"][lang] if ch else chap
        out += [f"### {head} {{#perf-why-{chap}}}", ""]
        for rid in [i for i in ids if i.split(".")[0] == chap]:
            e = rows_text[rid]
            out += [f"[{e['title'][lang]}]{{#{anchor(rid)}}}", f":   {e['why'][lang]}", ""]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------
# the figure: one horizontal bar chart per recording

def chart_rows(rec, catalog, text, lang, bench):
    return [r for r in shown_rows(rec, catalog, text, set(), lang, bench) if r["ratio"]]


def draw(rows, lang, out_base, gnuplot_terminals):
    """out_base.dat, out_base.svg and out_base.pdf: a bar per row (C over the reference, log scale),
    a second, thinner bar for the fraction of the ceiling where the row has one, a dashed line at 1.
    rows: [{label, ratio, fraction}], top to bottom."""
    w = WORDS[lang]
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        raise AppendixError("gnuplot not found (Debian: gnuplot-nox; tools/bootstrap installs it)")
    vals = [r["ratio"] for r in rows] + [r["fraction"] for r in rows if r["fraction"]]
    lo = 10 ** math.floor(math.log10(min(vals + [1.0]) * 0.9))
    hi = 10 ** math.ceil(math.log10(max(vals + [1.0]) * 1.15))
    dat = out_base + ".dat"
    with open(dat, "w", encoding="utf-8") as f:
        f.write("# index ratio fraction label\n")
        for i, r in enumerate(rows, 1):
            frac = repr(float(r["fraction"])) if r["fraction"] else "?"
            f.write(f"{i} {float(r['ratio'])!r} {frac} \"{r['label'].replace(chr(34), chr(39))}\"\n")
    n = len(rows)
    width, height = 900, 130 + 30 * n
    def q(s):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    body = "\n".join([
        "set termoption noenhanced",
        'set datafile missing "?"',
        "set logscale x 10",
        f"set xrange [{lo!r}:{hi!r}]",
        f"set yrange [{n + 0.7}:0.3]",
        'set format x "%g"',
        f"set xlabel {q(w['xlabel'])}",
        "set ytics scale 0 (" + ", ".join(f"{q(r['label'])} {i}" for i, r in enumerate(rows, 1)) + ")",
        "set grid xtics lc rgb '#c8c8c8' lw 0.6 dt 3",
        "set border 3 lc rgb '#404040'",
        "set xtics nomirror",
        "set key outside below left Left reverse vertical maxcols 1 samplen 1.5",
        "set style fill solid 0.85 noborder",
        "set arrow from 1, graph 0 to 1, graph 1 nohead front dt 2 lw 1.5 lc rgb '#303030'",
        f"plot {q(dat)} using (sqrt({lo!r} * $2)):($1 - 0.14):({lo!r}):2:($1 - 0.34):($1 + 0.06) "
        f"with boxxyerror lc rgb '#3a6ea5' title {q(w['legend_ratio'])}, \\",
        f"     '' using (sqrt({lo!r} * $3)):($1 + 0.2):({lo!r}):3:($1 + 0.08):($1 + 0.32) "
        f"with boxxyerror lc rgb '#e08a2c' title {q(w['legend_fraction'])}, \\",
        "     '' using 2:($1 - 0.14):(sprintf('%.3g', $2)) with labels left offset 0.4,0 notitle, \\",
        f"     NaN with lines dt 2 lw 1.5 lc rgb '#303030' title {q(w['legend_one'])}",
    ])
    for fmt, term in gnuplot_terminals(width, height).items():
        out = f"{out_base}.{fmt}"
        script = "\n".join([term, f"set output {q(out)}", body, "unset output", ""])
        r = subprocess.run([gnuplot], input=script, capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out) or os.path.getsize(out) == 0:
            raise AppendixError(f"gnuplot failed drawing {out}:\n{r.stderr.strip()}")


# ---------------------------------------------------------------------------
# the whole appendix

def build(root, md_dir, chapters, gnuplot_terminals, recorded_dir=None, book_dir=None, draw_figures=True):
    """Writes md_dir/performance.LANG.md and its figures (md_dir/figures/perf-DEVICE.LANG.svg/.pdf).
    chapters: {chNN: {"number": n, "title": {lang: ...}}}. Returns {"recordings": [file names],
    "ignored": [(file, why)], "figures": [base names], "problems": [what the text lacks]}. Raises
    AppendixError when gnuplot cannot draw."""
    book_dir = book_dir or os.path.join(root, "book")
    recorded_dir = recorded_dir or os.path.join(book_dir, "recorded")
    catalog = bench.row_catalog()
    text = load_text(book_dir)
    bad = problems(text, catalog)
    text = complete_entries(text)
    recs, ignored = read_recordings(recorded_dir)
    figures = {}
    fig_dir = os.path.join(md_dir, "figures")
    os.makedirs(fig_dir, exist_ok=True)
    for rec in recs:
        base = "perf-" + re.sub(r"[^a-z0-9]+", "-", rec["device_slug"].lower()).strip("-")
        drawn = False
        for lang in LANGS:
            rows = chart_rows(rec, catalog, text, lang, bench)
            if rows and draw_figures:
                draw(rows, lang, os.path.join(fig_dir, f"{base}.{lang}"), gnuplot_terminals)
                drawn = True
        if drawn:
            figures[rec["device_slug"]] = base
    for lang in LANGS:
        with open(os.path.join(md_dir, f"{PAGE}.{lang}.md"), "w", encoding="utf-8") as f:
            f.write(markdown(lang, recs, catalog, text, figures, chapters, bench, ignored))
    return {"recordings": [r["file"] for r in recs], "ignored": ignored, "figures": sorted(figures.values()),
            "problems": bad + disagreements(recs, recorded_dir)}


def complete_entries(text):
    """text with only the row entries that have every part in both languages (the others fall
    back to the bench's words, without a paragraph)."""
    def whole(e):
        return isinstance(e, dict) and all(isinstance((e.get(p) or {}).get(l), str) and e[p][l].strip()
                                           for p in ("title", "short", "why") for l in LANGS)
    rows = {k: v for k, v in (text.get("rows") or {}).items() if whole(v)}
    intro = text.get("intro") or {}
    return dict(text, rows=rows, intro={l: intro.get(l) or "" for l in LANGS})


def title(lang):
    return WORDS[lang]["title"]
