#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Tests of tools/lab, run by ctest (tests/lab/lab.cmake), label `book`.

    check_lab.py stubs     ROOT chNN DIR   make a student copy of chNN in DIR and check it
                                           with the stubs left in: it must build, and every
                                           graded exercise must fail (score 0)
    check_lab.py reference ROOT chNN DIR   paste the reference solution (the chapter's files
                                           from ROOT) over the student copy in DIR (made
                                           first if missing) and check it: full marks
    check_lab.py tool      ROOT WORKDIR    tools/lab on a small synthetic project (seconds):
                                           stubs, LAB.md, per-exercise attribution through
                                           `| test:`, a stub declared with `| stub:`, skipped
                                           tests, a student copy that does not compile, exit
                                           codes, lint's complaints about bad regions, and a
                                           region in runtime code a chapter shows (/*md source
                                           FILE REGION*/): counted for that chapter only, a
                                           runtime that no longer builds graded as a failed build

Exit 0: passed; 1: failed (the reason is printed); 77: skipped.
The reference for "full marks" is the chapter's own code in ROOT (the
solution), and for "zero" the stubs that tools/lab make wrote; the scores are
read from `tools/lab check --json`, and the printed lines are checked too.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

# the verdicts every checker shares (tests/chapter/chaptertest.py)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "chapter"))
from chaptertest import expect, fail, skip  # noqa: E402


def run(cmd, cwd=None, timeout=1500):
    print("$", " ".join(str(c) for c in cmd), flush=True)
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                       errors="replace", timeout=timeout)
    return r


def lab(root, *args, **kw):
    return run([sys.executable, Path(root) / "tools" / "lab", *args], **kw)


def check_json(root, ch, d, jpath):
    if jpath.exists():
        jpath.unlink()
    r = lab(root, "check", ch, d, "--json", jpath)
    print(r.stdout, end="")
    expect(r.returncode == 0, f"tools/lab check exited {r.returncode}, expected 0", r)
    expect(jpath.is_file(), "tools/lab check --json wrote no file", r)
    return r, json.loads(jpath.read_text())


def score_line(out):
    m = re.search(r"^score: (\d+)/(\d+)", out, re.M)
    return (int(m.group(1)), int(m.group(2))) if m else None


def chapter_folder(root, ch):
    found = sorted(Path(root, "chapters").glob(f"{ch}_*"))
    found = [p for p in found if p.is_dir()]
    if len(found) != 1:
        fail(f"expected one folder chapters/{ch}_*, found {[str(p) for p in found]}")
    return found[0]


def make_copy(root, ch, d):
    if d.exists():
        shutil.rmtree(d)
    d.parent.mkdir(parents=True, exist_ok=True)
    r = lab(root, "make", ch, d)
    print(r.stdout, end="")
    expect(r.returncode == 0, "tools/lab make failed", r)
    return r


def regions_of(text):
    """[(hint line, body lines)] of the LAB regions in text."""
    out, cur = [], None
    for line in text.split("\n"):
        if re.match(r"^\s*/\*\s*LAB BEGIN\s*:", line):
            cur = (line, [])
        elif re.match(r"^\s*/\*\s*LAB END\s*\*/", line) and cur:
            out.append(cur)
            cur = None
        elif cur:
            cur[1].append(line)
    return out


# --------------------------------------------------------------------------

def mode_stubs(root, ch, d):
    root, d = Path(root), Path(d)
    make_copy(root, ch, d)
    ref_dir = chapter_folder(root, ch)
    stu_dir = d / "chapters" / ref_dir.name
    # The copy: every reference region replaced, the markers kept, a TODO in each.
    n_regions = 0
    for f in sorted(ref_dir.iterdir()):
        if not f.is_file():
            continue
        ref_regions = regions_of(f.read_text(encoding="utf-8"))
        stu_text = (stu_dir / f.name).read_text(encoding="utf-8")
        if not ref_regions:
            expect(stu_text == f.read_text(encoding="utf-8"), f"{f.name} has no region but was changed")
            continue
        stu_regions = regions_of(stu_text)
        expect(len(stu_regions) == len(ref_regions),
               f"{f.name}: {len(ref_regions)} regions in the reference, {len(stu_regions)} in the copy")
        for (h1, body_ref), (h2, body_stu) in zip(ref_regions, stu_regions):
            expect(h1 == h2, f"{f.name}: marker changed: {h1!r} -> {h2!r}")
            expect(any("TODO (exercise" in l for l in body_stu), f"{f.name}: no TODO in the stub: {body_stu}")
            solution = [l.strip() for l in body_ref if l.strip() and not l.strip().startswith("//")]
            expect(not any(l in [s.strip() for s in body_stu] for l in solution if len(l) > 12),
                   f"{f.name}: the stub still holds solution lines: {body_stu}")
            n_regions += 1
    expect(n_regions >= 1, f"{ch} has no lab region")
    lab_md = (d / "LAB.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \|", lab_md, re.M)
    expect(rows == [str(i) for i in range(1, n_regions + 1)],
           f"LAB.md lists exercises {rows}, expected 1..{n_regions}")

    r, rep = check_json(root, ch, d, d.parent / f"{d.name}-stubs.json")
    expect(rep["build"] == "ok", f"the stubs must compile; build: {rep['build']}: {rep['build_errors']}", r)
    graded = [e for e in rep["exercises"] if e["max"] > 0]
    if not graded:
        skip(f"no exercise of {ch} can be graded on the cpu preset (CUDA regions only)")
    passed = [e for e in graded if e["result"] != "fail"]
    expect(not passed, f"with the stubs in, these exercises did not fail: "
           f"{[(e['number'], e['label'], e['result']) for e in passed]}", r)
    expect(rep["score"] == 0, f"score {rep['score']}, expected 0", r)
    expect(score_line(r.stdout) == (0, len(graded)), f"printed score {score_line(r.stdout)}, "
           f"expected 0/{len(graded)}", r)
    for e in graded:
        expect(re.search(rf"^exercise {e['number']} \(.*\): FAIL 0/1", r.stdout, re.M),
               f"no 'exercise {e['number']} (...): FAIL 0/1' line", r)
    print(f"ok: {ch} with the stubs: score 0/{len(graded)}, the copy builds")


def mode_reference(root, ch, d):
    root, d = Path(root), Path(d)
    if not (d / ".lab.json").is_file():
        make_copy(root, ch, d)
    ref_dir = chapter_folder(root, ch)
    stu_dir = d / "chapters" / ref_dir.name
    for f in ref_dir.iterdir():  # paste the solution back
        if f.is_file():
            shutil.copy2(f, stu_dir / f.name)
    r, rep = check_json(root, ch, d, d.parent / f"{d.name}-reference.json")
    expect(rep["build"] == "ok", f"the reference must build: {rep['build']}: {rep['build_errors']}", r)
    expect(rep["max"] >= 1, f"no exercise of {ch} was graded", r)
    failed = [e for e in rep["exercises"] if e["max"] > 0 and e["result"] != "pass"]
    expect(not failed, f"with the solution pasted back, these exercises did not pass: "
           f"{[(e['number'], e['label'], e['result']) for e in failed]}", r)
    expect(rep["score"] == rep["max"], f"score {rep['score']}/{rep['max']}", r)
    expect(score_line(r.stdout) == (rep["max"], rep["max"]), f"printed {score_line(r.stdout)}", r)
    print(f"ok: {ch} with the reference pasted back: full marks {rep['score']}/{rep['max']}")


# --------------------------------------------------------------------------
# A synthetic project, small enough to configure and build in seconds.

DEMO_C = r'''// SPDX-License-Identifier: MIT
/*md
::: en
Prose may name the markers, LAB BEGIN: and LAB END, without making a region.
:::
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "demo.h"

typedef struct {
  int lo, hi;
} pair;

static int add(int a, int b) {
  /* LAB BEGIN: return the sum of a and b | test: chapter.ch07_add */
  return a + b;
  /* LAB END */
}

int mul(int a, int b) {
  int p = 0;
  /* LAB BEGIN: multiply by repeated addition into p | test: chapter.ch07_mul, chapter.ch07_skip */
  for (int i = 0; i < b; i++) {
    p += a;
  }
  /* LAB END */
  return p;
}

static pair
order(int x, int y) {
  if (x > y) {
    int t = x;
    x = y;
    y = t;
  }
  /* LAB BEGIN: return the pair {x, y} | stub: return (pair){-1, -1}; */
  return (pair){x, y};
  /* LAB END */
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "add")) return add(2, 3) == 5 ? 0 : 1;
  if (!strcmp(argv[1], "mul")) return mul(4, 6) == 24 && ct_one() == 1 ? 0 : 1;
  if (!strcmp(argv[1], "order")) {
    pair p = order(9, 4);
    return p.lo == 4 && p.hi == 9 ? 0 : 1;
  }
  return 2;
}
'''

DEMO_CU = r'''// SPDX-License-Identifier: MIT
extern "C" {
__global__ void scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  /* LAB BEGIN: double x[i] when i < n */
  if (i < n) x[i] *= 2.0f;
  /* LAB END */
}
}
'''

DEMO_CMAKE = r'''cmake_minimum_required(VERSION 3.24)
project(demo C)
add_library(ct STATIC common/ct.c)
target_include_directories(ct PUBLIC common)
add_executable(ch07_demo chapters/ch07_demo/ch07_demo.c)
target_link_libraries(ch07_demo PRIVATE ct)
set_target_properties(ch07_demo PROPERTIES OUTPUT_NAME ch07 RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
add_executable(ch12_rt chapters/ch12_rt/ch12_rt.c)
target_link_libraries(ch12_rt PRIVATE ct)
set_target_properties(ch12_rt PROPERTIES OUTPUT_NAME ch12 RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
add_executable(test_helper tests/helper.c)
add_executable(test_ct tests/test_ct.c)
target_link_libraries(test_ct PRIVATE ct)
enable_testing()
add_test(NAME chapter.ch07_add COMMAND $<TARGET_FILE:ch07_demo> add)
add_test(NAME chapter.ch07_mul COMMAND $<TARGET_FILE:ch07_demo> mul)
add_test(NAME chapter.ch07_order COMMAND $<TARGET_FILE:ch07_demo> order)
add_test(NAME chapter.ch07_skip COMMAND sh -c "exit 77")
add_test(NAME chapter.ch07_helper COMMAND ${CMAKE_BINARY_DIR}/test_helper)
add_test(NAME chapter.ch070_other COMMAND sh -c "exit 1")
add_test(NAME gpu.ch07 COMMAND sh -c "exit 77")
add_test(NAME chapter.ch12_main COMMAND $<TARGET_FILE:ch12_rt> main)
add_test(NAME chapter.ch12_one COMMAND $<TARGET_FILE:ch12_rt> one)
add_test(NAME chapter.ch12_ct COMMAND ${CMAKE_BINARY_DIR}/test_ct)
set_tests_properties(chapter.ch12_main chapter.ch12_one chapter.ch12_ct PROPERTIES LABELS chapter)
set_tests_properties(chapter.ch07_add chapter.ch07_mul chapter.ch07_order chapter.ch07_skip
                     chapter.ch07_helper chapter.ch070_other PROPERTIES LABELS chapter SKIP_RETURN_CODE 77)
set_tests_properties(gpu.ch07 PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
'''

# The runtime's own code, with a region that ch12 shows (and ch07, which does not show it, ignores)
# and a LAB region no chapter shows.
DEMO_CT = r'''#include "demo.h"
int ct_one(void) {
  int r = 0;
  // region: one
  /* LAB BEGIN: set r to one | test: chapter.ch12_one, chapter.ch12_ct */
  r = 1;
  /* LAB END */
  // endregion
  return r;
}
int ct_two(void) {
  int r = 0;
  /* LAB BEGIN: not a shown region */
  r = 2;
  /* LAB END */
  return r;
}
'''

DEMO_RT_C = r'''// SPDX-License-Identifier: MIT
#include <string.h>
#include "demo.h"
/*md source common/ct.c one*/
int main(int argc, char **argv) {
  int v = 0;
  /* LAB BEGIN: set v to 3 | test: chapter.ch12_main */
  v = 3;
  /* LAB END */
  if (argc > 1 && !strcmp(argv[1], "one")) return ct_one() == 1 ? 0 : 1;
  return v == 3 ? 0 : 1;
}
'''

DEMO_PRESETS = r'''{
  "version": 6,
  "configurePresets": [{"name": "cpu", "generator": "Ninja", "binaryDir": "${sourceDir}/build-cpu"}]
}
'''


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def exercise_lines(out):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^exercise (\d+) \(.*?\): (\S+)", out, re.M)}


def mode_tool(root, work):
    root, work = Path(root), Path(work)
    if not shutil.which("cmake") or not shutil.which("ninja"):
        skip("cmake and ninja are needed")
    if work.exists():
        shutil.rmtree(work)
    proj = work / "demo"
    (proj / "tools").mkdir(parents=True)
    shutil.copy2(root / "tools" / "lab", proj / "tools" / "lab")
    shutil.copytree(root / "tools" / "ctools", proj / "tools" / "ctools",  # the entry runs ctools.lab
                    ignore=shutil.ignore_patterns("__pycache__"))
    write(proj / "CMakeLists.txt", DEMO_CMAKE)
    write(proj / "CMakePresets.json", DEMO_PRESETS)
    write(proj / "common" / "demo.h", "int ct_one(void);\n")
    write(proj / "common" / "ct.c", DEMO_CT)
    write(proj / "chapters" / "ch12_rt" / "ch12_rt.c", DEMO_RT_C)
    # a unit test of the runtime: built once on the stubbed runtime, it must be rebuilt on the fixed one
    write(proj / "tests" / "test_ct.c", '#include "demo.h"\nint main(void) { return ct_one() == 1 ? 0 : 1; }\n')
    write(proj / "tests" / "helper.c", "int main(void) { return 0; }\n")
    chdir = proj / "chapters" / "ch07_demo"
    write(chdir / "ch07_demo.c", DEMO_C)
    write(chdir / "ch07_kernels.cu", DEMO_CU)
    write(proj / "chapters" / "ch08_other" / "ch08_other.c",
          "int main(void) {\n  /* LAB BEGIN: nothing */\n  return 0;\n  /* LAB END */\n}\n")
    ref_c = (chdir / "ch07_demo.c").read_text()

    # list: regions, functions, stubs (a default `return 0;` only where the region returns)
    r = lab(proj, "list", "ch07")
    print(r.stdout, end="")
    expect(r.returncode == 0, "tools/lab list failed", r)
    for want in ("1. add", "2. mul", "3. order", "4. scale", "stub:  return (pair){-1, -1};",
                 "tests: chapter.ch07_mul, chapter.ch07_skip", "the gpu tests of ch07"):
        expect(want in r.stdout, f"tools/lab list lacks {want!r}", r)
    stubs = re.findall(r"stub:  (.*)", r.stdout)
    expect(stubs == ["return 0;", "(empty)", "return (pair){-1, -1};", "(empty)"], f"stubs {stubs}", r)

    # make: refuses a non-empty DIR, writes the copy and LAB.md
    d = work / "student"
    d.mkdir()
    (d / "keep").write_text("x")
    r = lab(proj, "make", "ch07", d)
    expect(r.returncode == 2 and (d / "keep").exists(), "make must refuse a non-empty DIR", r)
    shutil.rmtree(d)
    r = lab(proj, "make", "ch07", d)
    print(r.stdout, end="")
    expect(r.returncode == 0, "tools/lab make failed", r)
    stu = (d / "chapters/ch07_demo/ch07_demo.c").read_text()
    expect("return a + b;" not in stu and "p += a;" not in stu and "return (pair){x, y};" not in stu,
           "the solution is still in the student copy")
    expect("// TODO (exercise 3): return the pair {x, y}" in stu and "return (pair){-1, -1};" in stu,
           "exercise 3's stub is missing")
    expect(stu.count("/* LAB BEGIN:") == ref_c.count("/* LAB BEGIN:") and "int t = x;" in stu,
           "markers or code outside the regions changed")
    expect("x[i] *= 2.0f" not in (d / "chapters/ch07_demo/ch07_kernels.cu").read_text(), ".cu region not cut")
    expect((d / "chapters/ch08_other/ch08_other.c").read_text() ==
           (proj / "chapters/ch08_other/ch08_other.c").read_text(), "another chapter was changed")
    md = (d / "LAB.md").read_text()
    for want in ("| 1 |", "`add`", "| 4 |", "`scale`", "multiply by repeated addition into p"):
        expect(want in md, f"LAB.md lacks {want!r}")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        r = run([cc, "-fsyntax-only", "-std=c11", "-Wall", "-Werror=return-type", "-I", d / "common",
                 d / "chapters/ch07_demo/ch07_demo.c"])
        expect(r.returncode == 0, "the stubbed file does not compile", r)

    # check with the stubs: builds, everything graded fails, the CUDA region is not graded
    r, rep = check_json(proj, "ch07", d, work / "stubs.json")
    ex = exercise_lines(r.stdout)
    expect(ex == {1: "FAIL", 2: "FAIL", 3: "FAIL", 4: "NOT"}, f"exercise lines {ex}", r)
    expect(score_line(r.stdout) == (0, 3), f"score {score_line(r.stdout)}, expected 0/3", r)
    expect(rep["tests"].get("chapter.ch07_skip", {}).get("result") == "skipped", "skip not reported", r)
    expect("chapter.ch070_other" not in rep["tests"], "ch070's test was taken for ch07's", r)
    expect(rep["tests"].get("chapter.ch07_helper", {}).get("result") == "passed",
           "test_helper, which a chapter test runs, was not built", r)

    # exercise 1 solved: 1/3, and only exercise 1 passes
    stu = stu.replace("// TODO (exercise 1): return the sum of a and b\n  return 0;", "return b + a;")
    (d / "chapters/ch07_demo/ch07_demo.c").write_text(stu)
    r, rep = check_json(proj, "ch07", d, work / "one.json")
    expect(exercise_lines(r.stdout) == {1: "PASS", 2: "FAIL", 3: "FAIL", 4: "NOT"},
           f"exercise lines {exercise_lines(r.stdout)}", r)
    expect(score_line(r.stdout) == (1, 3), f"score {score_line(r.stdout)}, expected 1/3", r)

    # a copy that does not compile: score 0, the compiler's error shown, exit 0
    (d / "chapters/ch07_demo/ch07_demo.c").write_text(stu.replace("return b + a;", "return b + ;"))
    r, rep = check_json(proj, "ch07", d, work / "broken.json")
    expect(rep["build"] == "failed" and "build failed" in r.stdout, "build failure not reported", r)
    expect(any("error" in l for l in rep["build_errors"]) and "ch07_demo.c" in r.stdout,
           "the compiler's error is not shown", r)
    expect(score_line(r.stdout) == (0, 3), f"score {score_line(r.stdout)}, expected 0/3", r)

    # the solution pasted back: full marks on what the CPU build grades
    shutil.copy2(chdir / "ch07_demo.c", d / "chapters/ch07_demo/ch07_demo.c")
    shutil.copy2(chdir / "ch07_kernels.cu", d / "chapters/ch07_demo/ch07_kernels.cu")
    r, rep = check_json(proj, "ch07", d, work / "ref.json")
    expect(score_line(r.stdout) == (3, 3), f"score {score_line(r.stdout)}, expected 3/3", r)

    # a region in runtime code ch12 shows: ch12's exercise 2, stubbed in common/, graded
    r = lab(proj, "list", "ch12")
    print(r.stdout, end="")
    expect(r.returncode == 0 and "1. main" in r.stdout and "2. ct_one" in r.stdout and "common/ct.c" in r.stdout
           and "ct_two" not in r.stdout, "tools/lab list ch12: the shown runtime region is not exercise 2", r)
    r = lab(proj, "list", "ch07")
    expect("ct_one" not in r.stdout, "ch07, which does not show common/ct.c, lists its region", r)
    d12 = work / "student12"
    r = lab(proj, "make", "ch12", d12)
    expect(r.returncode == 0, "tools/lab make ch12 failed", r)
    rt = (d12 / "common/ct.c").read_text()
    expect("r = 1;" not in rt and "// TODO (exercise 2): set r to one" in rt and "r = 2;" in rt,
           "the shown runtime region was not stubbed (or the unshown one was)")
    r, rep = check_json(proj, "ch12", d12, work / "rt-stubs.json")
    expect(exercise_lines(r.stdout) == {1: "FAIL", 2: "FAIL"} and score_line(r.stdout) == (0, 2),
           f"ch12 stubs: {exercise_lines(r.stdout)}", r)
    (d12 / "common/ct.c").write_text(rt.replace("// TODO (exercise 2): set r to one", "r = ;"))
    r, rep = check_json(proj, "ch12", d12, work / "rt-broken.json")
    expect(rep["build"] == "failed" and score_line(r.stdout) == (0, 2) and "ct.c" in r.stdout,
           "a runtime region that does not compile must be the student's failed build (exit 0)", r)
    shutil.copy2(proj / "common/ct.c", d12 / "common/ct.c")
    shutil.copy2(proj / "chapters/ch12_rt/ch12_rt.c", d12 / "chapters/ch12_rt/ch12_rt.c")
    r, rep = check_json(proj, "ch12", d12, work / "rt-ref.json")
    expect(score_line(r.stdout) == (2, 2) and "common/ct.c" not in rep["modified_outside_chapter"],
           f"ch12 reference: score {score_line(r.stdout)}, outside {rep['modified_outside_chapter']}", r)

    # the check itself broken: exit non-zero
    r = lab(proj, "check", "ch07", work / "missing")
    expect(r.returncode == 2, f"a missing DIR must exit 2, got {r.returncode}", r)
    r = lab(proj, "check", "ch99", d)
    expect(r.returncode == 2, f"an unknown chapter must exit 2, got {r.returncode}", r)
    (d / "CMakeLists.txt").write_text("this is not cmake(\n")
    r = lab(proj, "check", "ch07", d)
    expect(r.returncode == 3 and "configure: FAILED" in r.stdout, "a failed configure must exit 3", r)

    # lint: good chapters pass (and their stubs compile), bad regions are named
    args = ["--cc", cc, "--", "-I", proj / "common"] if cc else []
    r = lab(proj, "lint", *args)
    print(r.stdout, end="")
    expect(r.returncode == 0, "lint fails on good regions", r)
    if cc:
        expect("ch07_demo.c [CPU]: the stubs compile" in r.stdout, "lint did not compile the stubs", r)
    bad = proj / "chapters" / "ch09_bad"
    write(bad / "ch09_bad.c",
          "int f(int x) {\n  /* LAB BEGIN: crosses | test: chapter.ch09 */\n  if (x) {\n"
          "  /* LAB END */\n    return 1;\n  }\n  return 0;\n}\n"
          "/* LAB BEGIN: outside */\nint g;\n/* LAB END */\n"
          "int h(void) {\n  /* LAB BEGIN: never closed */\n  return 0;\n}\n")
    write(proj / "chapters" / "ch10_none" / "ch10_none.c", "int main(void) { return 0; }\n")
    # returns only inside nested braces: the empty default stub falls off the end
    write(proj / "chapters" / "ch11_falls" / "ch11_falls.c",
          "int sign(int x) {\n  /* LAB BEGIN: return -1, 0 or 1 */\n  if (x < 0) {\n    return -1;\n"
          "  } else {\n    return x > 0;\n  }\n  /* LAB END */\n}\n")
    r = lab(proj, "lint", *(["--cc", cc] if cc else []))
    print(r.stdout, end="")
    expect(r.returncode == 1, "lint must fail on bad regions", r)
    wants = ["braces do not balance", "not inside a function body", "LAB BEGIN without a LAB END",
             "ch10: problem: no lab region"]
    if cc:
        wants.append("ch11: ch11_falls.c [CPU]: problem: the stubs do not compile")
    for want in wants:
        expect(want in r.stdout, f"lint does not report {want!r}", r)
    r = lab(proj, "make", "ch09", work / "bad-copy")
    expect(r.returncode == 2 and not (work / "bad-copy").exists(), "make must refuse bad regions", r)
    print("ok: tools/lab on the synthetic project")


def main(argv):
    if len(argv) == 4 and argv[0] == "stubs":
        mode_stubs(argv[1], argv[2], argv[3])
    elif len(argv) == 4 and argv[0] == "reference":
        mode_reference(argv[1], argv[2], argv[3])
    elif len(argv) == 3 and argv[0] == "tool":
        mode_tool(argv[1], argv[2])
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
