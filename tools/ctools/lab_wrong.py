# SPDX-License-Identifier: MIT
"""tools/ctools/lab_wrong.py: `tools/lab wrong` shows that the grader fails plausible wrong solutions.

Loaded by tools/lab, not run on its own. Beside each chapter, in
chapters/chNN_name/lab_wrong/, lie wrong solutions a student could plausibly
write, one file each:

    chapters/chNN_name/lab_wrong/FUNCTION.N.c

FUNCTION is the region's function (the exercise's label in `tools/lab list`;
FUNCTION-K for the K-th region when one function holds several), N numbers its
wrong solutions (1, 2, ...). The first line says what is wrong,
the rest replaces the code between the region's two marker lines:

    // wrong: forgets DDR's two transfers per clock
    return memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;

`tools/lab wrong chNN --dir DIR` makes a student copy in DIR (or reuses one,
bringing its tests and runtime up to this tree's), builds its runtime once, and
for each wrong solution writes the chapter's reference file with that one
region replaced, rebuilds the chapter and runs the tests that grade the region
one at a time until one fails ("caught"). chapter.chNN_default is left out: it
checks how the plain run ends, not its answers, and takes a minute. A .cu
region is graded on the emulator, as `tools/lab check --sim` grades it. Last,
the tests that caught something run on the reference, which must pass them.

Defects (exit 1): a wrong solution no test fails (the tests are too weak), one
that does not compile (it tests nothing), a region with fewer than two wrong
solutions, a chapter with fewer than two regions, a file naming no region, a
catching test that fails on the reference. The copy's files are put back at
the end (DIR/.lab-wrong-restore.json holds them meanwhile, so that the next
run puts them back after a killed one).
"""
import filecmp
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

WRONG_DIR = "lab_wrong"
WRONG_RE = re.compile(r"^(?P<function>\w+(-\d+)?)\.(?P<n>\d+)\.(c|cu)$")
DESC_RE = re.compile(r"^\s*//\s*wrong\s*:\s*(?P<desc>\S.*?)\s*$")
MIN_WRONG = 2
RESTORE = ".lab-wrong-restore.json"  # in DIR while wrong solutions are pasted in
MIN_REGIONS = 2  # every chapter: at least two exercises


class Wrong:
    def __init__(self, path, region, key, n, description, code):
        self.path = path
        self.region = region
        self.key = key
        self.n = n
        self.description = description
        self.code = code

    def name(self):
        return f"{self.key}.{self.n}"


def key(region, regions):
    """The name of a region's wrong solutions: its function, or FUNCTION-K for the K-th of
    several regions in one function."""
    same = [r for r in regions if r.label() == region.label()]
    return region.label() if len(same) == 1 else f"{region.label()}-{same.index(region) + 1}"


def wrong_solutions(lab, chdir, regions):
    """([Wrong], [problems]): the chapter's wrong solutions, by region and number."""
    by_label = {key(r, regions): [r] for r in regions}
    found, problems = [], []
    folder = chdir / WRONG_DIR
    files = sorted(folder.iterdir()) if folder.is_dir() else []
    for f in files:
        rel = f.relative_to(lab.ROOT)
        m = WRONG_RE.match(f.name)
        if not m:
            problems.append(f"{rel}: not FUNCTION.N.c")
            continue
        rs = by_label.get(m.group("function"), [])
        if len(rs) != 1:
            problems.append(f"{rel}: the chapter has no region {m.group('function')} (FUNCTION, "
                            "or FUNCTION-K for the K-th of several regions in one function)")
            continue
        lines = f.read_text(encoding="utf-8").split("\n")
        d = DESC_RE.match(lines[0])
        if not d:
            problems.append(f"{rel}:1: the first line must be `// wrong: what is wrong`")
            continue
        code = "\n".join(lines[1:]).rstrip("\n")
        found.append(Wrong(f, rs[0], m.group("function"), int(m.group("n")), d.group("desc"), code))
    found.sort(key=lambda w: (w.region.number, w.n))
    if len(regions) < MIN_REGIONS:
        problems.append(f"{chdir.name}: {len(regions)} lab region(s), at least {MIN_REGIONS} needed")
    for r in regions:
        n = sum(1 for w in found if w.region is r)
        if n < MIN_WRONG:
            problems.append(f"exercise {r.number} ({r.label()}): {n} wrong solution(s) in "
                            f"{chdir.relative_to(lab.ROOT)}/{WRONG_DIR}/, at least {MIN_WRONG} needed")
    return found, problems


def with_wrong(path, region, code):
    """The reference file's text with the region's code replaced by `code`."""
    lines = path.read_text(encoding="utf-8").split("\n")
    return "\n".join(lines[:region.begin] + code.split("\n") + lines[region.end - 1:])


def ordered(names, ch):
    """The tests to try: the chapter's main test first, its twins last (they are slower)."""
    def key(n):
        return (n != f"chapter.{ch}", "twin" in n, n)
    return sorted(names, key=key)


def first_failure(lab, build, names, timeout):
    """Runs the tests one at a time: (the first that failed or None, [those that passed], [skipped])."""
    passed, skipped = [], []
    for name in names:
        regex = "^" + re.escape(name).replace("\\_", "_") + "$"
        cmd = ["ctest", "--test-dir", str(build), "-R", regex, "--output-junit", str(build / "lab-wrong.xml")]
        if timeout:
            cmd += ["--timeout", str(timeout)]
        lab.run_logged(cmd)
        junit = build / "lab-wrong.xml"
        res = lab.junit_results(junit).get(name, {}).get("result", "not run") if junit.is_file() else "not run"
        junit.unlink(missing_ok=True)
        if res == "passed":
            passed.append(name)
        elif res == "skipped":
            skipped.append(name)
        else:
            return name, passed, skipped
    return None, passed, skipped


def sync(lab, dest):
    """Brings the copy's tests, runtime and chapters up to the reference tree's (a copy made
    before a test was strengthened would grade with the old one); the files that hold lab
    regions are left alone (each wrong solution writes its own)."""
    root = lab.ROOT.resolve()
    n = 0
    for rel in lab.project_files(root):
        src, dst = root / rel, dest / rel
        if re.match(r"chapters/[^/]+/lab_wrong/", rel) or not src.is_file() or src.is_symlink():
            continue
        if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
            continue
        if src.suffix in (".c", ".cu", ".h", ".cuh") and "LAB BEGIN" in src.read_text(errors="replace"):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        lab.touch([dst])
        n += 1
    if n:
        print(f"lab wrong: {n} file(s) of {dest} brought up to the reference tree's")


def prepare(lab, args, ch):
    """The student copy in args.dir (made when missing), configured, its runtime built: (dest, build, tests)."""
    dest = Path(args.dir).resolve()
    if not (dest / ".lab.json").is_file():
        margs = type("A", (), {"chapter": ch, "dir": str(dest), "force": False})
        lab.cmd_make(margs)
    restore(lab, dest)
    sync(lab, dest)
    build = dest / "build-cpu"
    lab.forget_foreign_build(build, dest)
    rc, out = lab.run_logged(["cmake", "--preset", "cpu", "-B", str(build)], cwd=dest)
    if rc != 0:
        raise RuntimeError("configure failed:\n" + lab.indent(lab.first_errors(out)))
    rc, out = lab.run_logged(["cmake", "--build", str(build), "--target", "ct", "-j", args.jobs])
    if rc != 0:
        raise RuntimeError("the runtime (ct) did not build:\n" + lab.indent(lab.first_errors(out)))
    return dest, build, lab.ctest_tests(build)


def try_on_emulator(lab, args, dest, r):
    """A wrong solution in a .cu region, graded as `tools/lab check --sim` grades it: the
    emulator's tests of the chapter's kernels (DIR/build-sim; tools/ctools/lab_sim.py)."""
    from . import lab_sim
    files = lab_sim.emulated_files(lab.ROOT)
    if args.sim == "no" or str(r.path.relative_to(lab.ROOT.resolve())) not in files:
        why = "--sim no" if args.sim == "no" else "the emulator does not build its file"
        return {"result": "not graded", "why": f"CUDA ({why}); grade it on a GPU"}
    args.lines = 6
    results, status = lab_sim.run_sim(lab, dest, dest / "build-sim", args.jobs, args, [r], files)
    if status.get("broke"):
        raise RuntimeError(f"the emulator's build broke: {status['broke']}")
    if status.get("build") == "failed":
        return {"result": "does not compile", "errors": status.get("build_errors", [])[:6]}
    failed = [t for t in lab_sim.SIM_TESTS if results.get(t, {}).get("result") != "passed"]
    if failed:
        return {"result": "caught", "by": failed[0], "on": "emulator"}
    return {"result": "NOT CAUGHT", "passed": list(lab_sim.SIM_TESTS)}


def try_wrong(lab, args, ch, chdir, dest, build, tests, graded_by, w):
    """Grades one wrong solution: a result dict."""
    r = w.region
    target = dest / r.rel
    target.write_text(with_wrong(r.path, r, w.code), encoding="utf-8")
    lab.touch([target])
    if r.is_cuda:
        return try_on_emulator(lab, args, dest, r)
    # chapter.chNN_default (the plain run, no flags, up to 75 s) checks how the program ends,
    # not its answers, and is slow: a wrong solution must be caught by the others
    names = [n for n in graded_by[r.number] if n in tests and not n.endswith("_default")]
    # every executable the tests run is brought up to date (a runtime region's wrong solution
    # may have been linked into one before)
    rc, out, _ = lab.build_chapter(build, chdir.name, args.jobs, tests, names, [r.path], None)
    if rc != 0:
        return {"result": "does not compile", "errors": lab.first_errors(out, 6)}
    if not names:
        return {"result": "not graded", "why": "no test grades this region in the cpu build"}
    failed, passed, skipped = first_failure(lab, build, ordered(names, ch), args.timeout)
    if failed:
        return {"result": "caught", "by": failed}
    if not passed:
        return {"result": "not graded", "why": "all its tests were skipped: " + ", ".join(skipped)}
    return {"result": "NOT CAUGHT", "passed": passed}


def paste_reference(lab, dest, files):
    """Writes the reference tree's text of files ({path: rel}) into the copy."""
    for path, rel in files.items():
        (dest / rel).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
        lab.touch([dest / rel])


def confirm(lab, args, ch, chdir, dest, build, tests, wrongs, report):
    """The tests that caught a wrong solution must pass on the reference, or their catches
    prove nothing: [defects]."""
    catchers = sorted({r["by"] for r in report if r["result"] == "caught" and r.get("on") != "emulator"})
    if not catchers:
        return []
    files = {w.region.path: w.region.rel for w in wrongs if not w.region.is_cuda}
    paste_reference(lab, dest, files)
    rc, out, _ = lab.build_chapter(build, chdir.name, args.jobs, tests, catchers, list(files), None)
    if rc != 0:
        return [f"the reference does not build:\n" + lab.indent(lab.first_errors(out, 6))]
    defects = []
    for name in catchers:
        failed, _, _ = first_failure(lab, build, [name], args.timeout)
        print(f"  {ch} reference: {name} {'FAILS' if failed else 'passes'}")
        if failed:
            defects.append(f"{name} fails on the reference too: what it caught proves nothing")
    return defects


def check_chapter(lab, args, ch, dest, build, tests):
    """Every wrong solution of one chapter: (report, number of defects)."""
    ch, chdir, regions, problems = lab.chapter_regions(ch)
    wrongs, wproblems = wrong_solutions(lab, chdir, regions)
    graded_by, _, _ = lab.graders(tests, ch, regions, False)
    defects = list(problems) + wproblems
    for p in defects:
        print(f"  PROBLEM  {p}")
    if args.only:
        wrongs = [w for w in wrongs if w.key in args.only or w.name() in args.only]
    # every file holding one of the chapter's regions gets the reference code (the copy may hold
    # stubs, or an older version): each wrong solution then differs from the reference in one region
    files = {r.path: r.rel for r in regions}
    originals = {rel: (dest / rel).read_text(encoding="utf-8") for rel in files.values()}
    (dest / RESTORE).write_text(json.dumps(originals), encoding="utf-8")  # in case this run is killed
    paste_reference(lab, dest, files)
    report = []
    try:
        for w in wrongs:
            t0 = time.monotonic()
            res = try_wrong(lab, args, ch, chdir, dest, build, tests, graded_by, w)
            paste_reference(lab, dest, {w.region.path: w.region.rel})  # the next one starts from the reference
            res.update(wrong=w.name(), file=str(w.path.relative_to(lab.ROOT)),
                       description=w.description, seconds=round(time.monotonic() - t0, 1))
            report.append(res)
            how = {"caught": f"caught by {res.get('by')}",
                   "not graded": f"not graded: {res.get('why')}",
                   "does not compile": "does not compile (a wrong solution must build)",
                   "NOT CAUGHT": "NOT CAUGHT: passes " + ", ".join(res.get("passed", []))}[res["result"]]
            print(f"  {ch} exercise {w.region.number} {w.name()} ({w.description}): {how} "
                  f"({res['seconds']:.0f} s)")
            for e in res.get("errors", []):
                print(f"      | {e}")
            if res["result"] in ("NOT CAUGHT", "does not compile"):
                defects.append(f"{w.name()}: {res['result']}")
        defects += confirm(lab, args, ch, chdir, dest, build, tests, wrongs, report)
    finally:
        restore(lab, dest)
    return report, defects


def restore(lab, dest):
    """Puts back the copy's files that a wrong solution replaced (also those a killed run left)."""
    saved = dest / RESTORE
    if not saved.is_file():
        return
    for rel, text in json.loads(saved.read_text(encoding="utf-8")).items():
        (dest / rel).write_text(text, encoding="utf-8")
        lab.touch([dest / rel])
    saved.unlink()


def rotation(chs, k, day=None):
    """k of the chapters, a different k each day (every chapter within len(chs)/k days):
    the day is CT_LAB_WRONG_DAY when set (to repeat a run), else days since 1970 (UTC)."""
    if day is None:
        env = os.environ.get("CT_LAB_WRONG_DAY", "")
        day = int(env) if env.strip().isdigit() else int(time.time() // 86400)
    k = max(1, min(k, len(chs)))
    picked = [chs[(day * k + i) % len(chs)] for i in range(k)]
    print(f"lab wrong: day {day}, {k} of {len(chs)} chapters in rotation: {', '.join(picked)} "
          f"(CT_LAB_WRONG_DAY={day} repeats this choice)")
    return sorted(set(picked))


def cmd_wrong(lab, args):
    chs = [lab.normalize_chapter(c) for c in args.chapters] or list(lab.chapters())
    if args.rotate:
        chs = rotation(chs, args.rotate)
    args.jobs = str(args.jobs or 2)
    if args.list:
        bad = 0
        for ch in chs:
            ch, chdir, regions, _ = lab.chapter_regions(ch)
            wrongs, problems = wrong_solutions(lab, chdir, regions)
            for w in wrongs:
                print(f"{ch} exercise {w.region.number} {w.name()}: {w.description}")
            for p in problems:
                print(f"{ch} PROBLEM {p}")
            bad += len(problems)
        return 1 if bad else 0
    if not args.dir:
        raise lab.LabError("give the directory of a student copy to build in (--dir DIR)")
    try:
        dest, build, tests = prepare(lab, args, chs[0])
    except RuntimeError as e:
        print(f"lab wrong: {e}", file=sys.stderr)
        return lab.EXIT_BROKE
    all_reports, all_defects = {}, []
    for ch in chs:
        print(f"lab wrong {ch}:")
        report, defects = check_chapter(lab, args, ch, dest, build, tests)
        all_reports[ch] = report
        all_defects += [f"{ch} {d}" for d in defects]
    caught = sum(1 for rs in all_reports.values() for r in rs if r["result"] == "caught")
    total = sum(len(rs) for rs in all_reports.values())
    print(f"wrong solutions caught: {caught}/{total}; defects: {len(all_defects)}")
    for d in all_defects:
        print(f"  DEFECT {d}")
    if args.json:
        Path(args.json).write_text(json.dumps({"chapters": all_reports, "defects": all_defects}, indent=1) + "\n",
                                   encoding="utf-8")
    return 1 if all_defects else 0
