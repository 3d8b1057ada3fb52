#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""book.weave: tools/weave on small chapters written here, good and malformed.

    test_weave.py [REPO_ROOT]

The good chapter checks what the book promises: the code blocks are the
file's lines (verbatim, lab markers cut), hidden code is folded, prose is
split by language with shared text in both, outputs come from the capture's
sections (and a recorded GPU transcript is shown beside them with its
label), twin regions are placed, figures are numbered and captioned in both
languages and drawn by gnuplot (that part is skipped without gnuplot). Each
malformed chapter must fail with FILE:LINE: and a message that names the
problem. Standard library only.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from ctools import weave  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


GOOD = r"""// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 9 章　演示

中文的开场白。
:::
::: en
# Chapter 9. A demo

The English opening.
:::
*/

/*md hide*/
#include <stdio.h>
static int helper(void) { return 1; }
/*md show*/

/*md
::: zh
## 主函数
主函数打印一节。
:::
Shared formula: $a^2$
::: en
## Main
Main prints a section.
:::
*/
int main(void) {
  /* LAB BEGIN: print the greeting */
  printf("== greet ==\n");
  printf("hello %d\n", helper()); /* LAB END */
  return 0;
}
/*md output greet*/
/*md twin greet*/
/*md figure speed: 速度随大小变化 | Speed by size*/
/*md figure preds: 预测 | Predictions*/

/*md
::: zh
## 练习

1. 一
2. 二
3. 三
:::
::: en
## Exercises

1. one
2. two
3. three
:::
*/
"""

TWIN = """import sys
def main():
    # twin: greet
    print("== greet ==")
    print("hello 1")
    # twin: end
main()
"""

SPEC = """# x: sizes
# series: fast slow missing
# xlabel-zh: 大小
# xlabel-en: size
# ylabel-en: speed
# legend-zh-fast: 快的版本
# legend-en-fast: the fast version
# legend-zh-slow: 慢的版本
# legend-en-slow: the slow version
plot for [i=2:nseries+1] datafile using 1:i title columnhead(i)
"""

RECORDED = """# chapter: ch09
# device: NVIDIA H100 80GB HBM3
# driver: 580.95.05
# date: 2025-11-22
# command: ./ch09 --device cuda

device: cuda:0 (NVIDIA H100 80GB HBM3)
== greet ==
hello from the GPU
"""


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def make_chapter(tmp, text, twin=None):
    d = os.path.join(tmp, "chapters", "ch09_demo")
    shutil.rmtree(d, ignore_errors=True)
    write(os.path.join(d, "ch09_demo.c"), text)
    if twin is not None:
        write(os.path.join(d, "ch09_pytorch.py"), twin)
    return os.path.join(d, "ch09_demo.c")


def code_blocks(md, cls):
    return [m.group(1) for m in re.finditer(r"^```" + cls + r"\n(.*?)\n```$", md, re.S | re.M)]


def test_good(tmp):
    src = make_chapter(tmp, GOOD, TWIN)
    weave.SPEC_DIR = os.path.join(tmp, "figures")
    write(os.path.join(weave.SPEC_DIR, "ch09_speed.gp"), SPEC)
    run = os.path.join(tmp, "run", "ch09")
    write(os.path.join(run, "ch09.out"), "device: cpu (CUDA unavailable: no driver)\n== greet ==\nhello 1\n")
    write(os.path.join(run, "ch09.json"), json.dumps({"sizes": [1, 2, 4], "fast": [3, 4, None], "slow": [1, 1, 1]}))
    write(os.path.join(run, "run.json"), json.dumps({"quick": True}))
    write(os.path.join(run, "ch09_pytorch.out"), "== greet ==\nhello 1\n")
    write(os.path.join(run, "twin.json"), json.dumps({"ran": True, "command": "python3 ch09_pytorch.py --quick"}))
    write(os.path.join(run, "preds.png"), "a chapter's own image")
    rec = os.path.join(tmp, "recorded")
    write(os.path.join(rec, "ch09-nvidia-h100-80gb-hbm3-2025-11-22.txt"), RECORDED)
    write(os.path.join(rec, "ch09-nvidia-h100-80gb-hbm3-2025-11-22.json"),
          json.dumps({"sizes": [1, 2, 4, 8], "fast": [30, 40, 50, 60], "slow": [10, 11, 12, 13]}))
    write(os.path.join(rec, "ch09-nvidia-h100-80gb-hbm3-2025-10-01.txt"), RECORDED.replace("GPU", "OLD"))
    out = os.path.join(tmp, "md")
    have_gnuplot = shutil.which("gnuplot") is not None
    if not have_gnuplot:
        print("skip figure drawing: no gnuplot")
        os.unlink(os.path.join(weave.SPEC_DIR, "ch09_speed.gp"))
        write(os.path.join(run, "speed.png"), "not really a png")
    meta, docs = weave.weave(src, run, out, recorded_dir=rec)
    zh, en = docs["zh"], docs["en"]
    lines = GOOD.split("\n")

    check(en.startswith("# Chapter 9. A demo {#ch09}"), "the English title comes first, with the chapter's id")
    check("# 第 9 章　演示 {#ch09}" in zh and "A demo" not in zh, "the Chinese edition has only Chinese prose")
    check("中文" not in en, "the English edition has no Chinese prose")
    check("Shared formula: $a^2$" in zh and "Shared formula: $a^2$" in en, "text outside the divs is in both")
    check(meta["titles"] == {"zh": "第 9 章　演示", "en": "Chapter 9. A demo"}, "titles in meta.json")

    cblocks = code_blocks(en, "c")
    main_src = "\n".join(lines[lines.index("int main(void) {"):lines.index("int main(void) {") + 6])
    main_book = main_src.replace("  /* LAB BEGIN: print the greeting */\n", "").replace(" /* LAB END */", "")
    check(main_book in cblocks, "main() is the file's lines, lab markers cut")
    check("LAB" not in en, "no lab marker in the book")
    check("SPDX" not in en, "the SPDX line is left out")
    check(re.search(r'::: \{\.folded summary="Folded code: lines 16–17, 2 lines', en) is not None,
          "hidden code is folded with its line numbers")
    check("#include <stdio.h>\nstatic int helper(void) { return 1; }" in cblocks, "folded code is verbatim")

    check("== greet ==\nhello 1" in en, "output section from the capture")
    check("[Smoke run: the `--quick` run made when this book was built" in en and
          "[冒烟运行：本书构建时的 `--quick` 运行" in zh and "`device: cpu (CUDA unavailable: no driver)`" in en,
          "a --quick output box says it is a smoke run (both languages), with its device line")
    check("Smoke run: the `--quick` run made when this book was built (its timings mean nothing): "
          "`python3 ch09_pytorch.py --quick`" in en, "so does the twin's --quick box")
    check("Recorded on NVIDIA H100 80GB HBM3 (driver 580.95.05, 2025-11-22)" in en and
          "hello from the GPU" in en and "hello from the OLD" not in en,
          "the newest recorded transcript is shown beside, with device, driver and date")
    check("在 NVIDIA H100 80GB HBM3 上录制（驱动 580.95.05，2025-11-22）" in zh, "recorded label in Chinese")

    py = code_blocks(en, "python")
    check('print("== greet ==")\nprint("hello 1")' in py, "the twin region is placed, dedented")
    check("ch09_pytorch.py:4" in en, "the twin region is labelled with its line")
    check(any("# twin:" not in b and "def main():" in b for b in py), "the whole twin, without marker lines")
    check("{#ch09-twin .twin-section}" in en and "python3 ch09_pytorch.py --quick" in en,
          "the twin section with the twin's output")
    check_div_attributes(en)

    if have_gnuplot:
        check("![Figure 9.1. Speed by size — the smoke run (`--quick`) made when this book was built, on cpu]"
              "(figures/ch09_speed.en.svg){#fig:ch09-speed" in en,
              "figure numbered and captioned with its run and device (en)")
        check("![图 9.1　速度随大小变化 — 本书构建时的冒烟运行（`--quick`），在 cpu 上](figures/ch09_speed.zh.svg)" in zh,
              "figure numbered and captioned with its run and device (zh)")
        for ext in ("zh.svg", "en.svg", "zh.pdf", "en.pdf"):
            f = os.path.join(out, "figures", f"ch09_speed.{ext}")
            check(os.path.exists(f) and os.path.getsize(f) > 500, f"gnuplot drew ch09_speed.{ext}")
        with open(os.path.join(out, "figures", "ch09_speed.en.dat")) as f:
            dat = f.read().split("\n")
        check(dat[0] == '"sizes" "the fast version" "the slow version"' and dat[3] == "4.0 ? 1.0",
              "the .dat has the present series only, titled by their legends, '?' for null")
        with open(os.path.join(out, "figures", "ch09_speed.zh.dat"), encoding="utf-8") as f:
            check(f.readline().strip() == '"sizes" "快的版本" "慢的版本"', "the zh legends are Chinese")
        with open(os.path.join(out, "figures", "ch09_speed.en.svg"), encoding="utf-8") as f:
            svg = f.read()
        check(">size<" in svg and ">speed<" in svg, "axis labels from the spec")
        check("![Figure 9.2. Speed by size — Recorded on NVIDIA H100 80GB HBM3 (driver 580.95.05, 2025-11-22) · "
              "`./ch09 --device cuda`](figures/ch09_speed-nvidia-h100-80gb-hbm3-2025-11-22.en.svg)" in en,
              "the recorded run's metrics give a second figure with its own number, labelled with its run")
    n = "3" if have_gnuplot else "2"
    check(f"![Figure 9.{n}. Predictions — the smoke run" in en and "](figures/ch09_preds.png){#fig:ch09-preds" in en
          and f"![图 9.{n}　预测 — 本书构建时的冒烟运行" in zh, "a chapter's own image, numbered and captioned")
    nums = re.findall(r"!\[Figure (9\.\d+)\.", en)
    check(len(nums) == len(set(nums)) and len(nums) >= 2, f"figure numbers unique in the chapter: {nums}")
    with open(os.path.join(out, "figures", "ch09_preds.png"), encoding="utf-8") as f:
        check(f.read() == "a chapter's own image", "the image is copied as the chapter wrote it")
    for lang in ("zh", "en"):
        check(os.path.exists(os.path.join(out, f"ch09.{lang}.md")), f"ch09.{lang}.md written")

    # Without a run: placeholders, no error.
    _, docs = weave.weave(src, None, None, recorded_dir=rec)
    check("(Preview: the output section `== greet ==`" in docs["en"], "preview without a run")

    # The capture lacks the section: FILE:LINE.
    write(os.path.join(run, "ch09.out"), "device: cpu\n== other ==\n")
    expect_error(lambda: weave.weave(src, run, out, recorded_dir=rec),
                 src, lines.index("/*md output greet*/") + 1, "has no section '== greet ==' (it has: other)")


def check_div_attributes(md):
    """Every div's attribute list parses: classes carry their dot (.live .twin, not .live twin)."""
    check(":::: {.output .live .twin}" in md, "the twin's output box has the classes .live .twin")
    bad = []
    for m in re.finditer(r"^:{3,} \{([^}]*)\}", md, re.M):
        words = re.findall(r'(?:[^\s"]+="(?:[^"\\]|\\.)*"|\S+)', m.group(1))
        bad += [w for w in words if not (w.startswith((".", "#")) or "=" in w)]
    check(not bad, f"every div attribute is .class, #id or key=value (bad: {bad})")


CU_CHAPTER = """/*md
::: zh
# 第 9 章　演示
:::
::: en
# Chapter 9. A demo
:::
*/
int main(void) { return 0; }
/*md source ch09_kernels.cu*/
/*md source lib/pool.c split*/
/*md
::: zh
## 练习
:::
::: en
## Exercises
:::
*/
"""

CU_FILE = """// SPDX-License-Identifier: MIT
//
// ch09_kernels: the demo's kernel.
/*md hide*/
#include <cuda_runtime.h>
/*md show*/
/*md
::: zh
每个线程加一。
:::
::: en
Each thread adds one.
:::
*/
static __global__ void add_one(float *x, int n) {
  /* LAB BEGIN: add one | test: gpu.ch09 */
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
  /* LAB END */
}
"""

POOL = """int f(void) {
  int a = 1;
  // region: split
  a += 2;
  // endregion
  return a;
}
"""


def test_sources(tmp):
    """/*md source FILE*/ weaves a .cu file (prose, hide/show, lab markers cut);
    /*md source FILE REGION*/ places a named region of another file."""
    src = make_chapter(tmp, CU_CHAPTER)
    write(os.path.join(os.path.dirname(src), "ch09_kernels.cu"), CU_FILE)
    old_root = weave.ROOT
    weave.ROOT = tmp
    try:
        write(os.path.join(tmp, "lib", "pool.c"), POOL)
        _, docs = weave.weave(src, None, None)
        en, zh = docs["en"], docs["zh"]
        check("Each thread adds one." in en and "每个线程加一。" in zh and "每个线程加一" not in en,
              ".cu prose blocks go to their language's edition")
        cpp = code_blocks(en, "cpp")
        check(any(b.startswith("static __global__ void add_one(float *x, int n) {\n"
                               "  int i = blockIdx.x") for b in cpp),
              "the .cu kernel is shown verbatim as cpp, its lab markers cut")
        check("LAB" not in en and "SPDX" not in en, "no lab marker or SPDX line")
        check(re.search(r'::: \{\.folded summary="Folded code: lines 5–5', en) is not None,
              "/*md hide*/ in a .cu file folds its code")
        check('[Source file `chapters/ch09_demo/ch09_kernels.cu`]{.label}' in en, "the .cu file is named")
        check("[`lib/pool.c:4–4` (region `split`)]{.label}" in en and "```c\n  a += 2;\n```" in en and
              "int a = 1" not in en, "a named region: its lines only, labelled with file and lines")
        # A missing region, a missing file and an output directive inside a .cu: FILE:LINE
        lines = CU_CHAPTER.split("\n")
        bad = make_chapter(tmp, CU_CHAPTER.replace("pool.c split", "pool.c nosuch"))
        write(os.path.join(os.path.dirname(bad), "ch09_kernels.cu"), CU_FILE)
        expect_error(lambda: weave.weave(bad, None, None), bad, lines.index("/*md source lib/pool.c split*/") + 1,
                     "has no region '// region: nosuch'")
        bad = make_chapter(tmp, CU_CHAPTER.replace("lib/pool.c", "lib/none.c"))
        write(os.path.join(os.path.dirname(bad), "ch09_kernels.cu"), CU_FILE)
        expect_error(lambda: weave.weave(bad, None, None), bad, lines.index("/*md source lib/pool.c split*/") + 1,
                     "no such file")
        bad = make_chapter(tmp, CU_CHAPTER)
        cu = os.path.join(os.path.dirname(bad), "ch09_kernels.cu")
        write(cu, CU_FILE + "/*md output greet*/\n")
        expect_error(lambda: weave.weave(bad, None, None), cu, len(CU_FILE.split("\n")), "in a woven source file")
    finally:
        weave.ROOT = old_root


def test_metrics(tmp):
    """{{metric ...}} placeholders are filled from the run's --metrics JSON."""
    m = {"peak": 332.300544, "cores": 2, "sizes": [64, 128, 256], "gflops": [5.7, None, 1.5], "name": "cpu"}
    f = lambda t: weave.fill_metrics(t, m, ("x.c", 7))
    check(f("{{metric peak %.0f}} GFLOP/s on {{metric cores}} cores") == "332 GFLOP/s on 2 cores",
          "a formatted number and an integer")
    check(f("{{metric peak}}") == "332", "default: 3 significant digits")
    check(f("n = {{metric sizes[-1]}}, {{metric sizes list}}") == "n = 256, 64, 128, 256", "index and list")
    check(f("{{metric gflops[1]}} {{metric name}}") == "— cpu", "null is a dash, strings as they are")
    check(weave.fill_metrics("{{metric peak}}", None, ("x.c", 7)) == "⟨peak⟩", "a preview shows the key")
    for text, words in (("{{metric nope}}", "no key 'nope'"), ("{{metric sizes}}", "is a list"),
                        ("{{metric sizes[3]}}", "not a list with an element 3"),
                        ("{{metric peak %q}}", "malformed placeholder"), ("{{ metric peak }}", "malformed")):
        expect_error(lambda: f(text), "x.c", 7, words)
    # Through a chapter: the prose shows the run's number.
    src = make_chapter(tmp, GOOD.replace("Shared formula: $a^2$", "Largest size {{metric sizes[-1]}}."), TWIN)
    run = os.path.join(tmp, "run-metrics", "ch09")
    write(os.path.join(run, "ch09.out"), "device: cpu\n== greet ==\nhello 1\n")
    write(os.path.join(run, "ch09.json"), json.dumps({"sizes": [1, 2, 4]}))
    weave.SPEC_DIR = os.path.join(tmp, "no-figures")
    write(os.path.join(run, "speed.png"), "x")
    write(os.path.join(run, "preds.png"), "x")
    _, docs = weave.weave(src, run, os.path.join(tmp, "md-metrics"))
    check("Largest size 4." in docs["en"] and "Largest size 4." in docs["zh"], "the placeholder is filled in both")


CPU_RECORDED = """# chapter: ch09
# device: CPU: AMD EPYC, 2 cores
# driver: none (CPU run)
# date: 2026-11-22
# command: ./ch09 --device cpu
# commit: 444dc41fd3fa0123

device: cpu
== greet ==
hello from the full run
"""


def test_provenance(tmp):
    """Recorded boxes name device, date and commit; a chapter with only CPU outputs gets a
    banner; recordings.json says per chapter whether GPU recordings exist."""
    src = make_chapter(tmp, GOOD, TWIN)
    weave.SPEC_DIR = os.path.join(tmp, "no-figures")
    run = os.path.join(tmp, "run-prov", "ch09")
    write(os.path.join(run, "ch09.out"), "device: cpu\n== greet ==\nhello 1\n")
    write(os.path.join(run, "ch09.json"), "{}")
    write(os.path.join(run, "speed.png"), "x")
    write(os.path.join(run, "preds.png"), "x")
    rec = os.path.join(tmp, "recorded-prov")
    write(os.path.join(rec, "ch09-cpu-amd-epyc-2026-11-22.txt"), CPU_RECORDED)
    out = os.path.join(tmp, "md-prov")
    meta, docs = weave.weave(src, run, out, recorded_dir=rec)
    en, zh = docs["en"], docs["zh"]
    check("Full run recorded on CPU: AMD EPYC, 2 cores (2026-11-22, commit 444dc41fd3fa)" in en and
          "在 CPU: AMD EPYC, 2 cores 上录制的完整运行（2026-11-22，提交 444dc41fd3fa）" in zh,
          "a CPU recording is labelled as one, with its date and commit, in both languages")
    check("H100" not in en and "driver none" not in en, "no GPU or driver claimed for a CPU recording")
    title_at = en.index("# Chapter 9. A demo")
    banner_at = en.find("::: {.note .cpu-only}")
    check(0 < banner_at and banner_at - title_at < 80 and "outputs all come from a CPU" in en and
          "本章的输出都来自 CPU" in zh, "the chapter opens with the CPU-only banner, in both languages")
    with open(os.path.join(out, "recordings.json"), encoding="utf-8") as f:
        recs = json.load(f)
    check(recs.get("ch09", {}).get("gpu") is False and recs["ch09"]["live_device"] == "cpu" and
          recs["ch09"]["recorded"][0]["commit"] == "444dc41fd3fa0123", f"recordings.json: {recs}")
    # With a GPU transcript: no banner, gpu true, and the GPU label names the commit.
    write(os.path.join(rec, "ch09-nvidia-h100-80gb-hbm3-2025-11-22.txt"),
          RECORDED.replace("# command:", "# commit: abcdef123456789\n# command:"))
    meta, docs = weave.weave(src, run, out, recorded_dir=rec)
    check(".cpu-only" not in docs["en"] and meta["recordings"]["gpu"] is True,
          "a chapter with a GPU recording has no CPU-only banner")
    check("Recorded on NVIDIA H100 80GB HBM3 (driver 580.95.05, 2025-11-22, commit abcdef123456)" in docs["en"],
          "a GPU recording names its GPU, driver, date and commit")
    with open(os.path.join(out, "recordings.json"), encoding="utf-8") as f:
        check(json.load(f)["ch09"]["gpu"] is True, "recordings.json is updated")


def test_figure_rules(tmp):
    """A series without a legend in words is an error; a run with one point draws no figure."""
    src = make_chapter(tmp, GOOD, TWIN)
    weave.SPEC_DIR = os.path.join(tmp, "figures-rules")
    spec_path = os.path.join(weave.SPEC_DIR, "ch09_speed.gp")
    run = os.path.join(tmp, "run-rules", "ch09")
    write(os.path.join(run, "ch09.out"), "device: cpu\n== greet ==\nhello 1\n")
    write(os.path.join(run, "preds.png"), "x")
    if not shutil.which("gnuplot"):
        print("skip figure rules: no gnuplot")
        return
    write(spec_path, SPEC.replace("# legend-zh-slow: 慢的版本\n", ""))
    write(os.path.join(run, "ch09.json"), json.dumps({"sizes": [1, 2], "fast": [3, 4], "slow": [1, 1]}))
    expect_error(lambda: weave.weave(src, run, os.path.join(tmp, "md-rules"), recorded_dir=tmp), spec_path, 1,
                 "no zh legend for the series slow")
    write(spec_path, SPEC)
    write(os.path.join(run, "ch09.json"), json.dumps({"sizes": [1], "fast": [3], "slow": [1]}))
    _, docs = weave.weave(src, run, os.path.join(tmp, "md-rules"), recorded_dir=tmp)
    check("ch09_speed.en.svg" not in docs["en"] and "single data point" in docs["en"] and
          "只有一个数据点" in docs["zh"], "a one-point run draws no figure and says why")
    check("![Figure 9.1. Predictions" in docs["en"], "the next figure takes the number")


def test_recorded_placeholders(tmp):
    """{{recorded ...}} takes the chapter's full run: a recorded transcript's metrics (a CPU
    recording first), named by {{recorded @run}} with its device, date and commit; without a
    recording, the book's own run, called a smoke run when it is one; a run whose timing check
    flagged timings says so."""
    prose = "Measured in {{recorded @run}}: {{recorded gflops[-1] %.1f}} GFLOP/s (live {{metric gflops[-1]}})."
    src = make_chapter(tmp, GOOD.replace("Shared formula: $a^2$", prose), TWIN)
    weave.SPEC_DIR = os.path.join(tmp, "no-figures")
    run = os.path.join(tmp, "run-full", "ch09")
    write(os.path.join(run, "ch09.out"), "device: cpu\n== greet ==\nhello 1\n")
    write(os.path.join(run, "ch09.json"), json.dumps({"gflops": [1, 2.25]}))
    write(os.path.join(run, "run.json"), json.dumps({"quick": True, "command": "./ch09 --quick"}))
    write(os.path.join(run, "speed.png"), "x")
    write(os.path.join(run, "preds.png"), "x")
    empty = os.path.join(tmp, "recorded-none")
    os.makedirs(empty, exist_ok=True)
    _, docs = weave.weave(src, run, os.path.join(tmp, "md-full0"), recorded_dir=empty)
    check("Measured in the smoke run (`--quick`, on cpu) made when this book was built (this chapter has no "
          "recorded full run yet, and a smoke run's timings mean nothing): 2.2 GFLOP/s (live 2.25)." in docs["en"] and
          "本书构建时的冒烟运行（`--quick`，cpu；计时不作数" in docs["zh"],
          "without a recording, {{recorded}} is the book's run and says it is a smoke run")
    rec = os.path.join(tmp, "recorded-full")
    write(os.path.join(rec, "ch09-cpu-amd-epyc-2026-11-22.txt"), CPU_RECORDED)
    write(os.path.join(rec, "ch09-cpu-amd-epyc-2026-11-22.json"), json.dumps({"gflops": [10, 40.04]}))
    write(os.path.join(rec, "ch09-nvidia-h100-80gb-hbm3-2026-12-01.txt"), RECORDED)
    write(os.path.join(rec, "ch09-nvidia-h100-80gb-hbm3-2026-12-01.json"), json.dumps({"gflops": [5, 9000]}))
    _, docs = weave.weave(src, run, os.path.join(tmp, "md-full1"), recorded_dir=rec)
    check("Measured in the full run recorded on CPU: AMD EPYC, 2 cores (2026-11-22, commit 444dc41fd3fa): "
          "40.0 GFLOP/s (live 2.25)." in docs["en"] and
          "在 CPU: AMD EPYC, 2 cores 上录制的完整运行（2026-11-22，提交 444dc41fd3fa）" in docs["zh"],
          "{{recorded}} takes the CPU recording's metrics and @run names it, in both languages")
    write(os.path.join(rec, "ch09-cpu-amd-epyc-2026-11-22.json"),
          json.dumps({"gflops": [10, 40.04], "cpu_timings_timed": 12, "cpu_timings_suspect": 3}))
    _, docs = weave.weave(src, run, os.path.join(tmp, "md-full2"), recorded_dir=rec)
    check("(2026-11-22, commit 444dc41fd3fa), whose own timing check flagged 3 of 12 timings as "
          "implausible (the machine was busy): 40.0" in docs["en"] and
          "其中 3 个（共 12 个）计时被它自己的计时检查判为不可信（机器当时在忙）: 40.0" in docs["zh"],
          "a flagged run is said to be flagged")
    bad = make_chapter(tmp, GOOD.replace("Shared formula: $a^2$", "{{recorded nope}}"), TWIN)
    try:
        weave.weave(bad, run, os.path.join(tmp, "md-full3"), recorded_dir=rec)
        check(False, "{{recorded nope}}: an error")
    except weave.WeaveError as e:
        check("the full run's metrics have no key 'nope'" in e.message, f"a missing key is an error ({e})")
    check(weave.fill_metrics("{{recorded x}} {{recorded @run}}", None, ("x.c", 1)) == "⟨x⟩ ⟨@run⟩",
          "a preview shows the keys")


def test_record_flagged(tmp):
    """tools/record keeps no run whose own timing check flagged timings (exit 3, no file),
    unless --keep-flagged; a clean run is kept with its metrics."""
    build = os.path.join(tmp, "record-build")
    exe = os.path.join(build, "ch09")
    write(exe, "#!/bin/sh\n# writes the metrics named by --metrics, with $SUSPECT suspect timings\n"
               "while [ $# -gt 0 ]; do [ \"$1\" = --metrics ] && m=$2; shift; done\n"
               "echo 'device: cpu'; echo '== greet =='; echo hello\n"
               "printf '{\"cpu_timings_timed\": 12, \"cpu_timings_suspect\": %s}' \"$SUSPECT\" > \"$m\"\n")
    os.chmod(exe, 0o755)
    out = os.path.join(tmp, "record-out")
    record = [sys.executable, os.path.join(ROOT, "tools", "record"), "--build", build, "--out-dir", out,
              "--commit", "abc", "--max-load", "1e9", "ch09"]
    env = dict(os.environ, SUSPECT="4")
    r = subprocess.run(record, capture_output=True, text=True, env=env)
    check(r.returncode == 3 and "flagged 4 of 12 timings" in r.stderr and not os.listdir(out),
          f"a flagged run is not kept, exit 3 (got {r.returncode}: {r.stderr.strip()[-200:]})")
    r = subprocess.run(record + ["--keep-flagged"], capture_output=True, text=True, env=env)
    check(r.returncode == 0 and len(os.listdir(out)) == 2, "--keep-flagged keeps it")
    shutil.rmtree(out)
    r = subprocess.run(record, capture_output=True, text=True, env=dict(os.environ, SUSPECT="0"))
    files = sorted(os.listdir(out)) if os.path.isdir(out) else []
    check(r.returncode == 0 and len(files) == 2 and files[0].endswith(".json") and files[1].endswith(".txt"),
          f"a clean run is kept with its metrics ({files})")


def expect_error(fn, path, line, words):
    try:
        fn()
    except weave.WeaveError as e:
        ok = os.path.abspath(e.path) == os.path.abspath(path) and e.line == line and words in e.message
        check(ok, f"error {os.path.basename(path)}:{line}: ...{words}... (got {e})")
        return
    check(False, f"error {os.path.basename(path)}:{line}: {words} (no error)")


BAD = [
    # (what, source, line, words in the message)
    ("unclosed prose block", "/*md\n::: zh\n# 题\n:::\n::: en\n# T\n:::\n", 1, "not closed"),
    ("prose block missing en", "/*md\n::: zh\n# 题\n:::\n*/\n", 1, "no '::: en' div"),
    ("prose block missing zh", "/*md\n::: en\n# T\n:::\n*/\n", 1, "no '::: zh' div"),
    ("unequal language divs", "/*md\n::: zh\n# 题\n:::\n::: zh\nx\n:::\n::: en\n# T\n:::\n*/\n", 1,
     "2 '::: zh' divs and 1 '::: en'"),
    ("unclosed div", "/*md\n::: zh\n# 题\n::: en\n# T\n:::\n*/\n", 4, "must not be nested"),
    ("unclosed div at the end", "/*md\n::: zh\n# 题\n:::\n::: en\n# T\n*/\n", 5, "div not closed"),
    ("nested language div", "/*md\n::: {.note}\n::: zh\nx\n:::\n:::\n::: en\nx\n:::\n*/\n", 3, "nested"),
    ("stray div close", "/*md\n:::\n::: zh\n# 题\n:::\n::: en\n# T\n:::\n*/\n", 2, "never opened"),
    ("unclosed fence", "/*md\n::: zh\n# 题\n```c\n:::\n::: en\n# T\n:::\n*/\n", 4, "code fence"),
    ("*/ inside prose", "/*md\n::: zh\n# 题 a*/b\n:::\n::: en\n# T\n:::\n*/\n", 3, "'*/' inside a prose block"),
    ("hide without show", "{OK}/*md hide*/\nint x;\n", 10, "without a /*md show*/"),
    ("show without hide", "{OK}int x;\n/*md show*/\n", 11, "without a /*md hide*/"),
    ("nested hide", "{OK}/*md hide*/\n/*md hide*/\n/*md show*/\n", 11, "inside a hidden region"),
    ("unknown directive", "{OK}/*md outptu x*/\n", 10, "unknown directive /*md outptu*/"),
    ("malformed marker", "{OK}int x; /*md output x*/\n", 10, "malformed '/*md' marker"),
    ("output without a name", "{OK}/*md output */\n", 10, "needs the NAME"),
    ("figure without captions", "{OK}/*md figure nospec*/\n", 10, "has no zh caption"),
    ("bad figure caption", "{OK}/*md figure f: only one*/\n", 10, "zh caption | en caption"),
    ("reference to a missing figure", "{OK}/*md\n::: zh\n见 {{fig nope}}。\n:::\n::: en\nSee {{fig nope}}.\n:::\n*/\n",
     10, "has no /*md figure nope*/"),
    ("twin without a twin file", "{OK}/*md twin greet*/\n", 10, "there is no twin"),
    ("no title", "/*md\n::: zh\n题\n:::\n::: en\nT\n:::\n*/\n", 0, "no chapter title"),
]
OK_HEAD = "/*md\n::: zh\n# 题\n:::\n::: en\n# T\n:::\n*/\n\n"  # 9 lines: a directive after it is line 10


def test_bad(tmp):
    weave.SPEC_DIR = os.path.join(tmp, "no-figures")
    for what, text, line, words in BAD:
        src = make_chapter(tmp, text.replace("{OK}", OK_HEAD))
        print(f"--   {what}")
        expect_error(lambda: weave.check(src), src, line, words or "")
    # twin problems
    src = make_chapter(tmp, OK_HEAD + "/*md twin nope*/\n", "# twin: a\nx = 1\n# twin: end\n")
    expect_error(lambda: weave.check(src), src, 10, "has no region '# twin: nope'")
    src = make_chapter(tmp, OK_HEAD, "# twin: a\nx = 1\n")
    expect_error(lambda: weave.check(src), src.replace("ch09_demo.c", "ch09_pytorch.py"), 1, "not closed")
    # The command line: exit 1 and FILE:LINE on stderr.
    src = make_chapter(tmp, "/*md\n::: zh\n# 题\n:::\n*/\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "weave"), "--check", src],
                       capture_output=True, text=True)
    check(r.returncode == 1 and f"{src}:1: prose block has a '::: zh' div but no '::: en' div" in r.stderr,
          f"tools/weave --check exits 1 with FILE:LINE (got {r.returncode}: {r.stderr.strip()})")


def test_layout(tmp):
    """Output boxes sit side by side only when their lines fit there (weave: .stacked); in the PDF an
    output takes the size its widest line fits at, so a table's rows never wrap, and a line of
    generated text is cut short (book/book.lua, when pandoc is here)."""
    narrow, wide = ["loss 0.1"], ["x" * 43]
    check(weave.outputs_open([narrow, narrow]) == "::::: {.outputs}" and
          weave.outputs_open([narrow, wide]) == "::::: {.outputs .stacked}" and
          weave.outputs_open([wide]) == "::::: {.outputs}" and weave.columns("中a") == 3,
          "two boxes with a line over 42 columns are stacked; one box never is")
    pandoc = shutil.which("pandoc")
    if not pandoc:
        return
    md = os.path.join(tmp, "layout.md")
    rows = ["`" * 3 + "output", "r" * 100, "`" * 3, "", "`" * 3 + "output", "s" * 60, "中" * 400, "`" * 3, "",
            "`" * 3 + "output", "step 1 | loss 2"] + [f"    | sample {k}" for k in range(1, 21)] + ["`" * 3]
    write(md, "\n".join(rows) + "\n")
    for lang, note in (("en", "(cut in the PDF; the HTML edition has it all)"), ("zh", "PDF 版截断")):
        r = subprocess.run([pandoc, md, "-t", "latex", "--lua-filter", os.path.join(ROOT, "book", "book.lua")],
                           capture_output=True, text=True, env={**os.environ, "BOOK_LANG": lang})
        blocks = r.stdout.split("\\end{Verbatim}")
        check(len(blocks) == 4 and "sample 12\n" in blocks[2] and "sample 13" not in blocks[2] and
              ("8 more lines" if lang == "en" else "略去 8 行") in blocks[2] and "step 1 | loss 2" in blocks[2],
              f"{lang} PDF: 20 lines of generated text (\"    | ...\") keep their first 12 and a note")
        check(r.returncode == 0 and "fontsize=\\scriptsize" in blocks[0] and
              "r" * 100 in blocks[0] and "fontsize=\\footnotesize" in blocks[1] and note in blocks[1] and
              "中" * 150 in blocks[1] and "中" * 151 not in blocks[1],
              f"{lang} PDF: a 100-column table at \\scriptsize, unbroken; a 400-character line cut at 300 "
              f"columns with a note (got {r.returncode}: {r.stdout[:300]!r} {r.stderr[:300]})")


def test_edition_run(tmp):
    """An edition with a run of its own (/*md bookrun-zh FLAGS*/): weaving the Chinese edition
    from its run writes only that edition's page, with that run's output, and the English
    page keeps the shared run's; tools/book reads the directive's flags."""
    src = make_chapter(tmp, GOOD + "\n/*md bookrun-zh --corpus zh*/\n", TWIN)
    weave.SPEC_DIR = os.path.join(tmp, "no-figures")
    runs = {}
    for name, text in (("ch09", "shared run 1"), ("ch09.zh", "中文版自己的运行 1")):
        runs[name] = os.path.join(tmp, "run-ed", name)
        write(os.path.join(runs[name], "ch09.out"), f"device: cpu\n== greet ==\n{text}\n")
        write(os.path.join(runs[name], "ch09.json"), json.dumps({"sizes": [1]}))
        write(os.path.join(runs[name], "run.json"), json.dumps({"quick": True}))
        write(os.path.join(runs[name], "speed.png"), "x")
        write(os.path.join(runs[name], "preds.png"), "x")
    out = os.path.join(tmp, "md-ed")
    _, zh = weave.weave(src, runs["ch09.zh"], out, langs=("zh",))
    _, en = weave.weave(src, runs["ch09"], out, langs=("en",))
    with open(os.path.join(out, "ch09.zh.md"), encoding="utf-8") as f:
        zh_page = f.read()
    check(list(zh) == ["zh"] and list(en) == ["en"] and "中文版自己的运行 1" in zh_page and
          "shared run 1" not in zh_page and "shared run 1" in en["en"] and "中文版自己的运行" not in en["en"],
          "each edition's page shows its own run's output")
    from ctools import book
    check(book.edition_runs(src) == {"zh": ["--corpus", "zh"]} and book.bookrun_flags(src) == [],
          "tools/book reads bookrun-zh's flags as the Chinese edition's run")


def main():
    tmp = tempfile.mkdtemp(prefix="test_weave.")
    try:
        test_good(tmp)
        test_bad(tmp)
        test_sources(tmp)
        test_metrics(tmp)
        test_provenance(tmp)
        test_recorded_placeholders(tmp)
        test_record_flagged(tmp)
        test_figure_rules(tmp)
        test_layout(tmp)
        test_edition_run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all weave checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
