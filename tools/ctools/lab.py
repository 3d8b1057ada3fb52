#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/lab: hand a chapter out as a lab, and grade it.

usage:
  tools/lab list [chNN ...]              chapters and their lab regions
  tools/lab make chNN DIR                write a student copy of the project to DIR
  tools/lab check chNN DIR [options]     build DIR's chapter, run its tests, score it
  tools/lab wrong [chNN ...] --dir DIR    every region's wrong solutions must fail its tests
  tools/lab lint [chNN ...] [--cc CC] [--nvcc NVCC] [-- CFLAGS...]
                                         check the regions (and that the stubs compile)

Lab regions
-----------
A lab region is code of a chapter that a student writes. In a chapter's .c or
.cu file (chapters/chNN_name/*), it is marked by two lines, each alone on its
line and outside any /*md prose block. A region may also lie in runtime code
the chapter shows with `/*md source FILE REGION*/` (FILE outside the chapter's
folder, e.g. common/nn/nn_attention.c): a LAB region inside the shown
`// region: REGION` ... `// endregion` belongs to that chapter; its exercises
follow the chapter's own, and `check` grades a copy whose runtime no longer
builds as a failed build (the student's), not as a broken check.

    /* LAB BEGIN: hint [| stub: C statements] [| test: NAME[,NAME...]] */
    ... the reference solution ...
    /* LAB END */

- hint: one short sentence telling the student what to write. It becomes the
  TODO comment of the stub and the exercise's line in LAB.md.
- stub: the code that replaces the solution in the student copy, one line of
  C, e.g. `| stub: return 0.0;`. Default: empty; except that when the region
  itself returns a value (a `return expr;` not nested in braces inside the
  region) from a non-void function, the default stub is `return 0;` (valid
  for every arithmetic, enum and pointer return type; name a stub for
  anything else, such as a struct).
- test: the ctest name(s) that grade the exercise (exact names, separated by
  commas or spaces), e.g. `| test: chapter.ch04_tiled, unit.matmul`.
  Default: all of the chapter's tests: those labelled `chapter` whose names
  contain chNN (`ctest -L chapter -R chNN`), and its `gpu` tests too when
  `check --preset default` builds CUDA; for a region in a .cu file, only the
  chapter's `gpu`-labelled tests, since the CPU build does not compile .cu
  files.

Rules a region must keep, so that its stub compiles (tools/lab lint checks):
- it lies inside one function body and does not cross its braces;
- whatever it declares is not used after it (declare such variables before
  the region, or give a stub that declares them);
- regions do not nest; every chapter has at least one region.

make
----
`tools/lab make chNN DIR` copies the project (the files git knows, tracked or
untracked but not ignored: no build directories, no .git; nor the chapters'
lab_wrong/ folders, which hold near-solutions) to DIR, with every
region of chNN replaced by its stub between the same two marker lines:

    /* LAB BEGIN: hint */
    // TODO (exercise 1): hint
    return 0;
    /* LAB END */

Other chapters keep their code, so the root CMakeLists.txt still configures.
DIR/LAB.md lists the exercises (number, file, line, function, hint, tests).

check
-----
`tools/lab check chNN DIR` configures DIR with the `cpu` preset (DIR/build-cpu),
builds the runtime, the chapter's target and the executables its tests run,
runs the chapter's tests (and those named by the regions), and prints one
line per exercise and the total:

    exercise 1 (peak_bandwidth_gbs): PASS 1/1
    score: 1/1

An exercise passes when every test that grades it passes (a test skipped with
exit 77 does not count; an exercise whose tests were all skipped is reported
as not graded and left out of the total). A student copy that does not
compile scores 0, with the compiler's first errors. The exercises come from
the regions of the tree this tool lives in (the instructor's reference), the
code from DIR.

Without a GPU (and with the cpu preset), the exercises whose regions lie in a
.cu file are graded on the SIMT emulator instead (tools/ctools/lab_sim.py, `--sim`):
the copy is built with the `sim` preset (DIR/build-sim) and the emulator's
tests of the chapter's kernels run on the student's code, under ASan and the
shared-memory race check. Such an exercise scores correctness only; its speed
is marked as needing a GPU. `--sim only` grades the CUDA exercises alone.

Exit status: 0 when the check ran, whatever the score; 2 for a usage error
(unknown chapter, DIR missing); 3 when the check itself broke (configure
failed, the runtime did not build, ctest did not run).

wrong
-----
Every region has at least two plausible wrong solutions beside its chapter,
chapters/chNN_name/lab_wrong/FUNCTION.N.c (FUNCTION-K.N.c for the K-th of
several regions in one function; .cu for a .cu region): a first line
`// wrong: what is wrong`, then the code that replaces the region's.
`tools/lab wrong [chNN ...] --dir DIR` builds a student copy in DIR (made when
DIR is not one; its build-cpu reused), and for each wrong solution pastes it
into the chapter's reference code, rebuilds, and runs the region's tests one
at a time until one fails ("caught"). A .cu region is graded on the emulator
as `check --sim` grades it (DIR/build-sim). The tests that caught something
then run on the reference, which must pass them. Exit 1 when a wrong solution
passes its region's tests (the tests are too weak), does not compile, or a
region has fewer than two; `--list` lists them without building
(tools/ctools/lab_wrong.py).
"""
import argparse
import datetime
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tools/ctools/ -> the repository
SOURCE_EXTS = (".c", ".cu", ".h", ".cuh")
EXIT_USAGE = 2
EXIT_BROKE = 3

BEGIN_RE = re.compile(r"^(?P<indent>[ \t]*)/\*\s*LAB BEGIN\s*:\s*(?P<spec>.*?)\s*\*/\s*$")
END_RE = re.compile(r"^[ \t]*/\*\s*LAB END\s*\*/\s*$")
MARKER_RE = re.compile(r"LAB (BEGIN|END)\b")
KEY_SPLIT_RE = re.compile(r"\s*\|\s*(?=(?:stub|tests?)\s*:)")
KEYWORDS = {"if", "for", "while", "switch", "do", "else", "return", "sizeof", "case",
            "__attribute__", "defined", "alignof", "_Alignof", "_Static_assert", "static_assert"}
QUALIFIERS = {"static", "inline", "extern", "__inline__", "__global__", "__device__", "__host__",
              "__forceinline__", "__noinline__", "constexpr", "_Noreturn", "noreturn", '"C"'}


class LabError(Exception):
    """A problem with a chapter's regions or the command line (exit 2)."""


# --------------------------------------------------------------------------
# Chapters and regions
# --------------------------------------------------------------------------

class Region:
    def __init__(self, path, rel, begin, end, indent, spec):
        self.path = path          # absolute path of the file
        self.rel = rel            # path relative to the project root
        self.begin = begin        # 1-based line of LAB BEGIN
        self.end = end            # 1-based line of LAB END
        self.indent = indent
        self.spec = spec          # the marker's text after "LAB BEGIN:"
        self.hint, self.stub, self.tests = parse_spec(spec)
        self.function = None      # enclosing function's name
        self.returns_value = None  # True when that function is not void
        self.region_returns = False  # the region's code returns at its top level
        self.number = 0

    @property
    def is_cuda(self):
        return self.path.suffix in (".cu", ".cuh")

    def stub_code(self):
        if self.stub is not None:
            return self.stub
        if self.returns_value and self.region_returns:
            return "return 0;"
        return ""

    def label(self):
        return self.function or f"{Path(self.rel).name}:{self.begin}"

    def as_dict(self):
        return {"number": self.number, "file": self.rel, "line": self.begin,
                "function": self.function, "hint": self.hint, "stub": self.stub_code(),
                "tests": self.tests}


def parse_spec(spec):
    parts = KEY_SPLIT_RE.split(spec)
    hint, stub, tests = parts[0].strip(), None, []
    for part in parts[1:]:
        key, _, value = part.partition(":")
        key, value = key.strip(), value.strip()
        if key == "stub":
            stub = value
        else:
            tests += [t for t in re.split(r"[,\s]+", value) if t]
    return hint, stub, tests


def chapters(root=ROOT):
    """{"ch01": Path(chapters/ch01_device_query), ...} in order."""
    out = {}
    base = root / "chapters"
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        m = re.fullmatch(r"(ch\d\d)_\w+", d.name)
        if m and d.is_dir():
            out[m.group(1)] = d
    return out


def chapter_dir(ch, root=ROOT):
    ch = normalize_chapter(ch)
    found = chapters(root)
    if ch not in found:
        have = ", ".join(found) or "none"
        raise LabError(f"no chapter {ch} under {root / 'chapters'} (chapters: {have})")
    return ch, found[ch]


def normalize_chapter(ch):
    m = re.fullmatch(r"(?:ch)?(\d{1,2})(?:_\w+)?", ch)
    if not m:
        raise LabError(f"a chapter is named chNN (e.g. ch04), got {ch!r}")
    return f"ch{int(m.group(1)):02d}"


def chapter_sources(chdir):
    """The chapter's source files: its main chNN_name.c first, then the rest."""
    files = [p for p in sorted(chdir.iterdir()) if p.is_file() and p.suffix in SOURCE_EXTS]
    main = chdir / (chdir.name + ".c")
    return sorted(files, key=lambda p: (p != main, p.name))


def find_regions(path, root):
    """Parses one file's regions. Returns (regions, problems)."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    regions, problems = [], []
    rel = str(path.relative_to(root))
    in_prose = False
    open_region = None
    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if in_prose:
            if stripped == "*/":
                in_prose = False
            continue
        if re.fullmatch(r"/\*md\s*", stripped):
            in_prose = True
            continue
        m = BEGIN_RE.match(line)
        if m:
            if open_region:
                problems.append(f"{rel}:{i}: LAB BEGIN inside the region opened at line {open_region[0]}"
                                " (regions do not nest)")
                continue
            open_region = (i, m.group("indent"), m.group("spec"))
            continue
        if END_RE.match(line):
            if not open_region:
                problems.append(f"{rel}:{i}: LAB END without a LAB BEGIN")
                continue
            b, indent, spec = open_region
            regions.append(Region(path, rel, b, i, indent, spec))
            open_region = None
            continue
        if MARKER_RE.search(line) and "/*" in line:
            problems.append(f"{rel}:{i}: a LAB marker must be alone on its line, "
                            "as `/* LAB BEGIN: hint */` or `/* LAB END */`")
    if open_region:
        problems.append(f"{rel}:{open_region[0]}: LAB BEGIN without a LAB END")
    if regions:
        annotate(text, regions, problems)
    for r in regions:
        if not r.hint:
            problems.append(f"{r.rel}:{r.begin}: the region has no hint (`/* LAB BEGIN: what to write */`)")
    return regions, problems


def line_offsets(text):
    offs = [0]
    for i, c in enumerate(text):
        if c == "\n":
            offs.append(i + 1)
    return offs


def lex(text):
    """Yields (kind, pos, value) for braces, semicolons, identifiers and '(' ')',
    skipping comments, string and character literals and preprocessor lines.
    kind is one of '{', '}', ';', 'pp', 'id', '(', ')', 'other'."""
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if at_line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":  # a directive, with its continuation lines
                if text[j] == "\\" and j + 1 < n and text[j + 1] == "\n":
                    j += 2
                    continue
                if text.startswith("/*", j):
                    k = text.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                j += 1
            yield ("pp", i, text[i:j])
            i = j
            continue
        at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            yield ("other", i, text[i:j + 1])
            i = j + 1
            continue
        if c.isalpha() or c == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            yield ("id", i, text[i:j])
            i = j
            continue
        if c in "{};()":
            yield (c, i, c)
        else:
            yield ("other", i, c)
        i += 1


def strip_code(s):
    """Removes comments and collapses whitespace in a declaration's text."""
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    s = re.sub(r"//[^\n]*", " ", s)
    return " ".join(s.split())


def drop_attributes(h):
    """Removes __attribute__((...)) (with nested parentheses) from h."""
    while True:
        m = re.search(r"__attribute__\s*\(", h)
        if not m:
            return h
        depth, j = 0, m.end() - 1
        while j < len(h):
            depth += {"(": 1, ")": -1}.get(h[j], 0)
            j += 1
            if depth == 0:
                break
        h = h[:m.start()] + " " + h[j:]


def classify_header(header):
    """For the text before a '{': (function name, returns_value) or None."""
    h = strip_code(header)
    h = drop_attributes(h)
    m = re.search(r"([A-Za-z_]\w*)\s*\((.*)\)\s*(?:const\s*)?(?:noexcept\s*)?(?:->\s*[\w:<>* ]+)?$", h, re.S)
    if not m or m.group(1) in KEYWORDS:
        return None
    before = h[:m.start()].strip()
    if before.endswith(("=", ",", "(", "return", "]")):
        return None
    before = re.sub(r"template\s*<.*?>", " ", before)
    words = [w for w in re.findall(r'"C"|[A-Za-z_]\w*|\*|&', before) if w not in QUALIFIERS]
    if not words:
        return None  # a macro call such as FOREACH(x) {, not a definition
    return m.group(1), words != ["void"]


def annotate(text, regions, problems):
    """Finds each region's enclosing function, and whether the region returns."""
    offs = line_offsets(text)
    starts = [offs[r.begin - 1] for r in regions]
    ends = [offs[r.end - 1] for r in regions]
    stack = []            # (kind, name, returns_value): kind 'fn' or 'block'
    header_start = 0
    tokens = list(lex(text))
    ri = 0
    # Walk the tokens; when reaching a region's start, the stack says where we are.
    region_state = [None] * len(regions)
    for kind, pos, value in tokens + [("eof", len(text), "")]:
        while ri < len(regions) and pos >= starts[ri]:
            fn = next((s for s in stack if s[0] == "fn"), None)
            region_state[ri] = (fn, len(stack))
            ri += 1
        if kind == "eof":
            break
        if kind == "{":
            header = text[header_start:pos]
            fn = classify_header(header) if not any(s[0] == "fn" for s in stack) else None
            stack.append(("fn", fn[0], fn[1]) if fn else ("block", None, None))
            header_start = pos + 1
        elif kind == "}":
            if stack:
                stack.pop()
            header_start = pos + 1
        elif kind in (";", "pp"):
            header_start = pos + len(value)
    for r, state, s, e in zip(regions, region_state, starts, ends):
        fn, depth = state if state else (None, 0)
        if not fn:
            problems.append(f"{r.rel}:{r.begin}: the region is not inside a function body")
            continue
        r.function, r.returns_value = fn[1], fn[2]
        # The region's own tokens: balanced braces, and a return at its top level?
        d, balanced = 0, True
        for kind, pos, value in tokens:
            if pos < s or pos >= e:
                continue
            if kind == "{":
                d += 1
            elif kind == "}":
                d -= 1
                if d < 0:
                    balanced = False
            elif kind == "id" and value == "return" and d == 0:
                r.region_returns = True
        if d != 0 or not balanced:
            problems.append(f"{r.rel}:{r.begin}: the region's braces do not balance "
                            "(a region must not cross a block's braces)")
        if r.stub is not None and not r.stub:
            problems.append(f"{r.rel}:{r.begin}: `| stub:` is empty; leave it out for an empty stub")


SOURCE_REGION_RE = re.compile(r"^\s*/\*md source (\S+) (\S+)\*/\s*$")
SHOWN_BEGIN_RE = re.compile(r"^\s*//\s*region:\s*(\S+)\s*$")
SHOWN_END_RE = re.compile(r"^\s*//\s*endregion\s*$")


def runtime_sources(chdir, root=ROOT):
    """{path: {region names}}: the files outside the chapter's folder whose regions the
    chapter shows with /*md source FILE REGION*/ (FILE relative to the folder, then the root)."""
    out = {}
    for f in chapter_sources(chdir):
        for line in f.read_text(encoding="utf-8").split("\n"):
            m = SOURCE_REGION_RE.match(line)
            if not m:
                continue
            p = chdir / m.group(1) if (chdir / m.group(1)).is_file() else root / m.group(1)
            if p.is_file() and not p.resolve().is_relative_to(chdir.resolve()):
                out.setdefault(p.resolve(), set()).add(m.group(2))
    return out


def shown_spans(path, names):
    """(first, last) lines of the named '// region: NAME' ... '// endregion' spans of path."""
    spans, start = [], None
    for i, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        m = SHOWN_BEGIN_RE.match(line)
        if m:
            start = (i, m.group(1))
        elif SHOWN_END_RE.match(line) and start:
            if start[1] in names:
                spans.append((start[0], i))
            start = None
    return spans


def chapter_regions(ch, root=ROOT):
    """(chapter, folder, regions numbered 1.., problems): the chapter's own files' regions,
    then those inside the runtime regions it shows."""
    ch, chdir = chapter_dir(ch, root)
    regions, problems = [], []
    for f in chapter_sources(chdir):
        rs, ps = find_regions(f, root)
        regions += rs
        problems += ps
    for path, names in sorted(runtime_sources(chdir, root).items()):
        spans = shown_spans(path, names)
        rs, ps = find_regions(path, root.resolve())
        inside = [r for r in rs if any(a < r.begin and r.end < b for a, b in spans)]
        regions += inside
        if inside:
            problems += ps
    for n, r in enumerate(regions, 1):
        r.number = n
    return ch, chdir, regions, problems


def stub_text(path, regions):
    """The file's text with its regions replaced by their stubs."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out, prev = [], 0
    for r in sorted(regions, key=lambda r: r.begin):
        out += lines[prev:r.begin - 1]
        ind = r.indent
        out.append(lines[r.begin - 1])
        out.append(f"{ind}// TODO (exercise {r.number}): {r.hint}")
        code = r.stub_code()
        if code:
            out.append(f"{ind}{code}")
        out.append(lines[r.end - 1])
        prev = r.end
    out += lines[prev:]
    return "\n".join(out)


# --------------------------------------------------------------------------
# make
# --------------------------------------------------------------------------

IGNORED_DIRS = {".git", ".carry", ".whl", ".gl", "__pycache__"}


def project_files(root=ROOT):
    """Relative paths of the files a student copy needs: git's tracked and
    untracked-but-not-ignored files, or, outside a git checkout, every file
    but build directories and caches."""
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if Path(top).resolve() != root.resolve():
            raise OSError("not the top of a git checkout")
        r = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard"], capture_output=True, check=True)
        names = [n for n in r.stdout.decode("utf-8", "surrogateescape").split("\0") if n]
        if names:
            return sorted({n for n in names if (root / n).is_file() or (root / n).is_symlink()})
    except (OSError, subprocess.CalledProcessError):
        pass
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in IGNORED_DIRS and not d.startswith("build"))
        for f in filenames:
            if f.endswith(".pyc"):
                continue
            out.append(str((Path(dirpath) / f).relative_to(root)))
    return sorted(out)


def ignored_dir(root, dest):
    """Whether dest, inside the project, is a place git ignores (a build directory)."""
    if dest.relative_to(root).parts[0].startswith("build"):
        return True
    try:
        return subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(dest)],
                              capture_output=True).returncode == 0
    except OSError:
        return False


def git_describe(root=ROOT):
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                           capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain"],
                               capture_output=True, text=True).stdout.strip()
        return r.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def tests_label(r, ch):
    if r.tests:
        return ", ".join(r.tests)
    if r.is_cuda:
        return f"the gpu tests of {ch} (ctest -L gpu -R {ch})"
    return f"the chapter tests of {ch} (ctest -L chapter -R {ch})"


def write_lab_md(dest, ch, chdir, regions):
    target = chdir.name
    rows = []
    for r in regions:
        hint = r.hint.replace("|", "\\|")
        rows.append(f"| {r.number} | `{r.rel}`:{r.begin} | `{r.label()}` | {hint} | "
                    f"{tests_label(r, ch)} |")
    table = "\n".join(rows)
    text = f"""<!-- SPDX-License-Identifier: MIT -->
# Lab {ch}: {target}

Made by `tools/lab make {ch}` from {git_describe()} on {datetime.date.today().isoformat()}.

## Exercises / 练习

Each exercise is a region of the chapter's code between `/* LAB BEGIN: ... */`
and `/* LAB END */`; the solution was cut out and a `// TODO (exercise N)`
stub left in its place. Write your code between the two markers, and keep the
markers. The chapter's prose (the `/*md` blocks in the same file) explains
what the code must do.

每个练习是本章代码中 `/* LAB BEGIN: ... */` 与 `/* LAB END */` 之间的一段；
答案已被删去，原处留下 `// TODO (exercise N)`。请把代码写在这两行标记之间，
并保留标记。同一文件里的 `/*md` 说明文字讲了这段代码要做什么。

| # | file:line | function | what to write | graded by |
|---|---|---|---|---|
{table}

## Build, run, test / 构建、运行、测试

```sh
cmake --preset cpu                                   # configure, CPU only (build-cpu/)
cmake --build build-cpu --target {target}
./build-cpu/{ch} --device cpu --quick
ctest --test-dir build-cpu -L chapter -R {ch} --output-on-failure
tools/lab check {ch} .                               # the score your instructor will see
```

`tools/lab check` prints one line per exercise (PASS or FAIL) and the total.
`tools/lab check` 为每个练习打印一行（PASS 或 FAIL）和总分。
"""
    (dest / "LAB.md").write_text(text, encoding="utf-8")
    meta = {"chapter": ch, "target": target, "source": git_describe(),
            "exercises": [r.as_dict() for r in regions]}
    (dest / ".lab.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def cmd_make(args):
    ch, chdir, regions, problems = chapter_regions(args.chapter)
    if problems:
        raise LabError("the chapter's lab regions have problems:\n  " + "\n  ".join(problems))
    if not regions:
        raise LabError(f"{ch} has no lab region (/* LAB BEGIN: hint */ ... /* LAB END */)")
    dest = Path(args.dir).resolve()
    root = ROOT.resolve()
    if dest == root or root.is_relative_to(dest):
        raise LabError(f"{dest} holds the project itself; give a new directory")
    if dest.is_relative_to(root) and not ignored_dir(root, dest):
        raise LabError(f"{dest} is inside the project; put the student copy outside it "
                       f"(or under a build directory)")
    if dest.exists() and any(dest.iterdir()):
        if not (args.force and (dest / ".lab.json").exists()):
            raise LabError(f"{dest} exists and is not empty (--force replaces a previous "
                           "student copy, one with a .lab.json)")
        shutil.rmtree(dest)
    # the wrong solutions (chapters/chNN_name/lab_wrong/) are near-solutions: not for students
    files = [f for f in project_files(root) if not re.match(r"chapters/[^/]+/lab_wrong/", f)]
    by_file = {}
    for r in regions:
        by_file.setdefault(r.path, []).append(r)
    dest.mkdir(parents=True, exist_ok=True)
    for rel in files:
        src, dst = root / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src in by_file:
            dst.write_text(stub_text(src, by_file[src]), encoding="utf-8")
            shutil.copymode(src, dst)
        elif src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    missing = [str(p.relative_to(root)) for p in by_file if str(p.relative_to(root)) not in files]
    if missing:  # a chapter file git ignores: still the lab's, write it
        for rel in missing:
            p = root / rel
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_text(stub_text(p, by_file[p]), encoding="utf-8")
    write_lab_md(dest, ch, chdir, regions)
    print(f"lab make {ch}: {len(files)} files copied to {dest}")
    for r in regions:
        print(f"  exercise {r.number} ({r.label()}): {r.rel}:{r.begin}: {r.hint}")
    print(f"  {dest / 'LAB.md'} lists them; grade with: tools/lab check {ch} {dest}")
    return 0


# --------------------------------------------------------------------------
# check
# --------------------------------------------------------------------------

def run_logged(cmd, cwd=None, timeout=None, env=None):
    """Runs cmd, returns (returncode, combined output); never raises for the
    command's own failure (returncode 127 when it cannot start)."""
    try:
        r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, errors="replace", timeout=timeout, env=env)
        return r.returncode, r.stdout
    except FileNotFoundError as e:
        return 127, f"{e}\n"
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode("utf-8", "replace")
        return 124, out + f"\n(timed out after {timeout} s)\n"


def first_errors(log, limit=20):
    """The compiler's first error lines (with the line after each), else the log's tail."""
    lines = log.splitlines()
    out = []
    for i, line in enumerate(lines):
        if re.search(r"\berror\b|\bError\b|undefined reference|FAILED:", line):
            out.append(line)
            for extra in lines[i + 1:i + 3]:
                if re.match(r"^\s+\S", extra) and not re.search(r"\berror\b", extra):
                    out.append(extra)
        if len(out) >= limit:
            break
    return out[:limit] if out else lines[-limit:]


def indent(lines, pre="    "):
    return "\n".join(pre + l for l in lines)


def tail(text, n):
    lines = [l for l in text.rstrip().splitlines()]
    return lines[-n:]


def ctest_tests(build):
    rc, out = run_logged(["ctest", "--test-dir", str(build), "--show-only=json-v1"])
    if rc != 0:
        raise RuntimeError("ctest --show-only failed:\n" + indent(tail(out, 20)))
    data = json.loads(out[out.index("{"):])
    tests = {}
    for t in data.get("tests", []):
        labels = []
        for p in t.get("properties", []):
            if p.get("name") == "LABELS":
                labels = p.get("value") or []
        tests[t["name"]] = {"labels": labels, "command": t.get("command") or []}
    # ctest leaves out the command of a test whose executable does not exist
    # yet; CTestTestfile.cmake still has it.
    for f in build.rglob("CTestTestfile.cmake"):
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for m in re.finditer(r'^add_test\(\[=\[(.*?)\]=\]((?:\s+"(?:[^"\\]|\\.)*")*)\)', text, re.M):
            name = m.group(1)
            if name in tests and not tests[name]["command"]:
                tests[name]["command"] = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
    return tests


def build_targets(build):
    """Names that `cmake --build --target` accepts (executables included)."""
    rc, out = run_logged(["cmake", "--build", str(build), "--target", "help"])
    if (build / "build.ninja").is_file():  # ninja's help lists only the phony targets
        rc2, out2 = run_logged(["ninja", "-C", str(build), "-t", "targets", "all"])
        if rc2 == 0:
            out += "\n" + "\n".join(l for l in out2.splitlines()
                                     if re.match(r"^[\w.+-]+: \w*EXECUTABLE_LINKER", l))
    names = set()
    for line in out.splitlines():
        m = re.match(r"^([\w.+-]+): (phony|CUSTOM_COMMAND|\w*EXECUTABLE_LINKER)", line)  # ninja
        if m:
            names.add(m.group(1))
        m = re.match(r"^\.\.\. ([\w.+-]+)", line)  # make
        if m:
            names.add(m.group(1))
    return names


def chapter_test_names(tests, ch, labels):
    pat = re.compile(rf"(^|[^0-9A-Za-z]){ch}(?![0-9])")
    return sorted(n for n, t in tests.items()
                  if pat.search(n) and any(l in t["labels"] for l in labels))


def junit_results(path):
    results = {}
    root = ET.parse(path).getroot()
    for tc in root.iter("testcase"):
        name = tc.get("name")
        status = tc.get("status")
        out = tc.findtext("system-out") or ""
        sk = tc.find("skipped")
        if status == "run":
            res = "passed"
        elif status == "fail":
            res = "failed"
        elif sk is not None and "SKIP_RETURN_CODE" in (sk.get("message") or ""):
            res = "skipped"
        elif status == "disabled":
            res = "skipped"
        else:
            res = "not run"  # e.g. its executable was not built
            if sk is not None and sk.get("message"):
                out = (out + "\n" + sk.get("message")).strip()
        results[name] = {"result": res, "output": out, "time": float(tc.get("time") or 0)}
    return results


def check_outside_chapter(dest, chdir, root=ROOT, lab_files=()):
    """Files outside the chapter's folder that differ from the reference (the runtime
    files holding the chapter's regions, lab_files, excepted)."""
    changed = []
    chrel = str(chdir.relative_to(root))
    skip = {str(Path(p).relative_to(root.resolve())) for p in lab_files}
    try:
        files = project_files(root)
    except OSError:
        return changed
    for rel in files:
        if rel.startswith(chrel + "/") or rel in skip:
            continue
        if not rel.startswith(("tests/", "common/", "tools/", "CMakeLists.txt", "CMakePresets.json")):
            continue
        a, b = root / rel, dest / rel
        if b.exists() and a.is_file() and b.is_file() and not filecmp.cmp(a, b, shallow=False):
            changed.append(rel)
    return changed


def check_dest(args, ch, chdir):
    """The student's copy named on the command line, checked to be a copy of the project with
    the chapter in it; notes when it was made for another chapter."""
    dest = Path(args.dir).resolve()
    if not dest.is_dir():
        raise LabError(f"{dest}: no such directory (make it with: tools/lab make {ch} {args.dir})")
    for need in ("CMakeLists.txt", "CMakePresets.json"):
        if not (dest / need).is_file():
            raise LabError(f"{dest} is not a copy of the project (no {need})")
    target = chdir.name
    if not (dest / "chapters" / target).is_dir():
        raise LabError(f"{dest} has no chapters/{target}")
    meta = dest / ".lab.json"
    if meta.is_file():
        try:
            made_for = json.loads(meta.read_text()).get("chapter")
        except (ValueError, OSError):
            made_for = None
        if made_for and made_for != ch:
            print(f"lab check: note: {dest} was made for {made_for}, checking {ch}")
    return dest


def not_graded(report, regions, status):
    """The report of a check that broke before grading: every exercise `status`, 0 points."""
    for r in regions:
        report["exercises"].append(dict(r.as_dict(), label=r.label(), result=status,
                                        points=0, max=1, graded_by=[]))
    report["max"] = len(regions)
    return report


def forget_foreign_build(build, dest):
    """A build directory that came with the copy (made on the student's machine,
    under another path) would fail to configure here: start it afresh."""
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(errors="replace"), re.M)
        if m and Path(m.group(1)).resolve() != dest:
            print(f"note: {build} was configured for {m.group(1)}; configuring it afresh")
            shutil.rmtree(build)


def touch(files):
    """Files pasted with their old times (cp -p, an unpacked archive) would look
    older than the last build's objects: mark them as new."""
    for f in files:
        try:
            os.utime(f)
        except OSError:
            pass


def graders(tests, ch, regions, cuda_build):
    """Which tests grade which exercise: ({exercise number: [test]}, [named tests this build
    lacks], [the tests to run])."""
    c_labels = ["chapter", "gpu"] if cuda_build else ["chapter"]
    default_c = chapter_test_names(tests, ch, c_labels)
    default_cu = chapter_test_names(tests, ch, ["gpu"])
    graded_by = {}
    unknown = []
    for r in regions:
        if r.tests:
            graded_by[r.number] = list(r.tests)
            unknown += [t for t in r.tests if t not in tests]
        else:
            graded_by[r.number] = default_cu if r.is_cuda else default_c
    selected = sorted({t for ts in graded_by.values() for t in ts if t in tests})
    return graded_by, unknown, selected


def build_chapter(build, target, jobs, tests, selected, runtime_files, runtime_out):
    """The chapter (the student's code), then what its tests run that is not built yet.
    Returns (rc, output, [targets built])."""
    want = [target]
    rc, out = run_logged(["cmake", "--build", str(build), "--target", target, "-j", jobs])
    if runtime_out is not None:  # the runtime with the student's regions did not build
        rc, out, want = 1, runtime_out, ["ct", target]
    if rc == 0:
        targets = build_targets(build)
        extra = []
        for name in selected:
            for arg in tests[name]["command"]:
                p = Path(arg)
                # not built yet; or built, but on a runtime the student's regions change
                if p.is_absolute() and p.is_relative_to(build) and (not p.exists() or runtime_files) \
                        and p.name in targets and p.name not in extra:
                    extra.append(p.name)
        if extra:  # not the student's code: a failure here shows as a test not run
            rc2, out2 = run_logged(["cmake", "--build", str(build), "--target", *extra, "-j", jobs])
            want += extra
            if rc2 != 0:
                print(f"note: building {', '.join(extra)} failed; their tests will not run:")
                print(indent(first_errors(out2, 10)))
    return rc, out, want


def grade_failed_build(report, regions, graded_by, cuda_build, out, want):
    """The report when the student's code does not build: each gradable exercise 0/1."""
    report["build"] = "failed"
    report["build_errors"] = first_errors(out)
    print(f"build: FAILED ({', '.join(want)}); the compiler's first errors:")
    print(indent(report["build_errors"]))
    total = 0
    for r in regions:
        ex = dict(r.as_dict(), label=r.label(), graded_by=graded_by[r.number])
        if not graded_by[r.number] or (r.is_cuda and not cuda_build and not r.tests):
            ex.update(result="not graded", points=0, max=0)
            why = "CUDA: grade it with --preset default on a GPU machine" \
                if r.is_cuda and not cuda_build else "no test grades it here"
            print(f"exercise {r.number} ({r.label()}): NOT GRADED ({why})")
        else:
            ex.update(result="build failed", points=0, max=1)
            total += 1
            print(f"exercise {r.number} ({r.label()}): FAIL 0/1 (build failed)")
        report["exercises"].append(ex)
    report["max"] = total
    print(f"score: 0/{total} (build failed)")
    return report


def run_tests(args, build, jobs, selected, unknown):
    """Runs the selected tests: {name: {"result", "output", "time"}}, or None when ctest did not run."""
    results = {}
    if selected:
        with tempfile.TemporaryDirectory(prefix="lab-check-") as tmp:
            junit = Path(tmp) / "junit.xml"
            regex = "^(" + "|".join(re.escape(t).replace("\\_", "_") for t in selected) + ")$"
            cmd = ["ctest", "--test-dir", str(build), "-R", regex, "-j", jobs,
                   "--output-junit", str(junit)]
            if args.timeout:
                cmd += ["--timeout", str(args.timeout)]
            rc, out = run_logged(cmd)
            if not junit.is_file():
                print("lab check: ctest did not run:", file=sys.stderr)
                print(indent(tail(out, 20)), file=sys.stderr)
                return None
            results = junit_results(junit)
    for t in unknown:
        results.setdefault(t, {"result": "not run", "output": "no such test in this build", "time": 0})
    print("tests:")
    for name in sorted(results):
        res = results[name]
        print(f"  {res['result'].upper():8s} {name} ({res['time']:.1f} s)")
        if res["result"] in ("failed", "not run"):
            lines = tail(res["output"], args.lines)
            print(indent(lines if any(l.strip() for l in lines) else ["(no output)"], "           | "))
    return results


def score_exercises(report, regions, graded_by, results, cuda_build):
    """Each exercise passes when every test that grades it ran and passed."""
    score = total = 0
    for r in regions:
        names = graded_by[r.number]
        ran = [n for n in names if results.get(n, {}).get("result") != "skipped" and n in results]
        failed = [n for n in ran if results[n]["result"] != "passed"]
        missing = [n for n in names if n not in results]
        ex = dict(r.as_dict(), label=r.label(), graded_by=names, max=1)
        if not names or (not ran and not missing):
            why = "no test grades it here" if not names else "all its tests were skipped"
            if r.is_cuda and not cuda_build:
                why = "CUDA: grade it with --preset default on a GPU machine"
            ex.update(result="not graded", points=0, max=0)
            print(f"exercise {r.number} ({r.label()}): NOT GRADED ({why})")
        elif failed or missing:
            ex.update(result="fail", points=0)
            total += 1
            bad = ", ".join(failed + missing)
            print(f"exercise {r.number} ({r.label()}): FAIL 0/1 (failed: {bad})")
        else:
            ex.update(result="pass", points=1)
            score += 1
            total += 1
            print(f"exercise {r.number} ({r.label()}): PASS 1/1")
        report["exercises"].append(ex)
    report["score"], report["max"] = score, total
    print(f"score: {score}/{total}")
    return report


def cmd_check(args):
    ch, chdir, regions, problems = chapter_regions(args.chapter)
    if problems:
        raise LabError("the chapter's lab regions (in the reference tree) have problems:\n  "
                       + "\n  ".join(problems))
    if not regions:
        raise LabError(f"{ch} has no lab region: nothing to grade")
    dest = check_dest(args, ch, chdir)
    target = chdir.name

    build = Path(args.build_dir).resolve() if args.build_dir else dest / f"build-{args.preset}"
    jobs = str(args.jobs or os.cpu_count() or 2)
    report = {"chapter": ch, "dir": str(dest), "build_dir": str(build), "preset": args.preset,
              "configure": None, "build": None, "build_errors": [], "tests": {},
              "exercises": [], "score": 0, "max": 0, "modified_outside_chapter": []}

    print(f"lab check {ch}: {dest}")
    runtime_files = sorted({r.path for r in regions if not r.path.is_relative_to(chdir.resolve())})
    changed = [] if dest == ROOT.resolve() else check_outside_chapter(dest, chdir, lab_files=runtime_files)
    report["modified_outside_chapter"] = changed
    if changed:
        print(f"note: {len(changed)} file(s) outside chapters/{target} differ from the reference:")
        print(indent(changed[:10], "  "))
    forget_foreign_build(build, dest)

    # configure
    cmd = ["cmake", "--preset", args.preset, "-B", str(build)]
    rc, out = run_logged(cmd, cwd=dest)
    if rc != 0:
        report["configure"] = "failed"
        print(f"configure: FAILED ({' '.join(cmd)})")
        print(indent(first_errors(out)))
        return not_graded(report, regions, "not graded"), EXIT_BROKE
    report["configure"] = "ok"
    print(f"configure: ok ({args.preset} preset, {build})")

    # the runtime first: if it fails, the check broke, not the student's work
    # (unless the student's regions are in it: then it is graded as a failed build below)
    touch(dest / f.relative_to(ROOT.resolve()) for f in runtime_files)  # pasted files may look older
    rc, out = run_logged(["cmake", "--build", str(build), "--target", "ct", "-j", jobs])
    runtime_out = None
    if rc != 0 and runtime_files:
        runtime_out, rc = out, 0
    if rc != 0:
        report["build"] = "runtime failed"
        print("build: FAILED building the runtime (ct), which the student does not edit:")
        print(indent(first_errors(out)))
        return not_graded(report, regions, "not graded"), EXIT_BROKE

    try:
        tests = ctest_tests(build)
    except (RuntimeError, ValueError) as e:
        report["build"] = "ok"
        print(f"lab check: cannot list the tests: {e}", file=sys.stderr)
        return not_graded(report, regions, "not graded"), EXIT_BROKE

    cuda_build = args.preset != "cpu"
    graded_by, unknown, selected = graders(tests, ch, regions, cuda_build)
    touch(f for f in (dest / "chapters" / target).rglob("*") if f.is_file())
    rc, out, want = build_chapter(build, target, jobs, tests, selected, runtime_files, runtime_out)
    if rc != 0:
        return grade_failed_build(report, regions, graded_by, cuda_build, out, want), 0
    report["build"] = "ok"
    print(f"build: ok ({', '.join(want)})")

    results = run_tests(args, build, jobs, selected, unknown)
    if results is None:
        return not_graded(report, regions, "not graded"), EXIT_BROKE
    report["tests"] = {n: {"result": r["result"], "time": r["time"]} for n, r in results.items()}
    return score_exercises(report, regions, graded_by, results, cuda_build), 0


def run_check(args):
    # tools/ctools/lab_sim.py: the CUDA exercises on the SIMT emulator where there is no GPU
    from . import lab_sim
    report, status = lab_sim.check(sys.modules[__name__], args)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return status


# --------------------------------------------------------------------------
# list and lint
# --------------------------------------------------------------------------

def selected_chapters(names):
    if names:
        return [normalize_chapter(n) for n in names]
    return list(chapters())


def cmd_list(args):
    found = chapters()
    if not found:
        print("no chapters")
        return 0
    bad = 0
    for ch in selected_chapters(args.chapters):
        ch, chdir, regions, problems = chapter_regions(ch)
        print(f"{ch}  {chdir.name}: {len(regions)} region{'s' if len(regions) != 1 else ''}")
        for r in regions:
            stub = r.stub_code()
            print(f"  {r.number}. {r.label()}  ({r.rel}:{r.begin}-{r.end})")
            print(f"     hint:  {r.hint}")
            print(f"     stub:  {stub if stub else '(empty)'}")
            print(f"     tests: {tests_label(r, ch)}")
        for p in problems:
            print(f"  problem: {p}")
            bad = 1
    return bad


def compile_check(path, text, cc, cflags, nvcc=False):
    """Compiles text as path's file would be (C: compiled, not linked; a function that
    can end without returning its value is an error; CUDA: nvcc's front end).
    Returns (ok, output)."""
    with tempfile.TemporaryDirectory(prefix="lab-lint-") as tmp:
        src = Path(tmp) / path.name
        src.write_text(text, encoding="utf-8")
        if nvcc:
            flags = [f for f in cflags if f.startswith(("-I", "-D"))]
            cmd = [cc, "-std=c++17", "-arch=sm_80", "--cuda", "-o", os.devnull,
                   "-I", str(path.parent), *flags, str(src)]
        else:  # #include "x.h" of the chapter's folder (a runtime file: of every runtime folder): -iquote
            private = [] if not path.resolve().is_relative_to(ROOT / "common") else \
                [f for d in sorted((ROOT / "common").iterdir()) if d.is_dir() for f in ("-iquote", str(d))]
            cmd = [cc, "-c", "-o", os.devnull, "-std=c11", "-Werror=return-type", "-iquote", str(path.parent),
                   *private, *cflags, str(src)]
        rc, out = run_logged(cmd, timeout=300)
        return rc == 0, out


def cmd_lint(args):
    bad = 0
    chs = selected_chapters(args.chapters)
    if not chs:
        print("lint: no chapters")
        return 1
    for ch in chs:
        ch, chdir, regions, problems = chapter_regions(ch)
        for p in problems:
            print(f"{ch}: problem: {p}")
            bad = 1
        if not regions:
            print(f"{ch}: problem: no lab region (every chapter has at least one)")
            bad = 1
            continue
        print(f"{ch}: {len(regions)} region(s): " + ", ".join(r.label() for r in regions))
        if not args.cc and not args.nvcc:
            continue
        files = {}
        for r in regions:
            files.setdefault(r.path, []).append(r)
        for path, rs in files.items():
            cuda = path.suffix not in (".c", ".h")
            if not cuda and not args.cc:
                continue
            if cuda and not args.nvcc:
                print(f"{ch}: {path.name}: a CUDA file, not compiled (no --nvcc)")
                continue
            for variant in ([["-DCT_HAVE_CUDA=1"]] if cuda else [[], ["-DCT_HAVE_CUDA=1"]]):
                name = "nvcc" if cuda else " ".join(variant) or "CPU"
                comp = args.nvcc if cuda else args.cc
                ok, ref_out = compile_check(path, path.read_text(encoding="utf-8"), comp,
                                            args.cflags + variant, cuda)
                if not ok and name == "CPU":  # every build compiles this one: the flags are wrong
                    bad = 1
                    print(f"{ch}: {path.name} [{name}]: problem: the reference itself does not compile "
                          "with these flags:")
                    print(indent(first_errors(ref_out, 8)))
                    continue
                if not ok:
                    print(f"{ch}: {path.name} [{name}]: the reference does not compile here; skipped")
                    continue
                ok, out = compile_check(path, stub_text(path, rs), comp, args.cflags + variant, cuda)
                if ok:
                    print(f"{ch}: {path.name} [{name}]: the stubs compile")
                else:
                    bad = 1
                    print(f"{ch}: {path.name} [{name}]: problem: the stubs do not compile:")
                    print(indent(first_errors(out, 12)))
    print("lint: " + ("problems found" if bad else "ok"))
    return bad


# --------------------------------------------------------------------------

def main(argv):
    p = argparse.ArgumentParser(
        prog="tools/lab", description="Hand a chapter out as a lab (a student copy with the "
        "solution regions cut out) and grade it.", epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="{list,make,check,wrong,lint}")
    sp = sub.add_parser("list", help="chapters and their lab regions")
    sp.add_argument("chapters", nargs="*", metavar="chNN")
    sp = sub.add_parser("make", help="write a student copy of the project for chNN to DIR")
    sp.add_argument("chapter", metavar="chNN")
    sp.add_argument("dir", metavar="DIR")
    sp.add_argument("--force", action="store_true", help="replace DIR if it is a previous student copy")
    sp = sub.add_parser("check", help="build DIR, run chNN's tests, print the score per exercise")
    sp.add_argument("chapter", metavar="chNN")
    sp.add_argument("dir", metavar="DIR")
    sp.add_argument("--preset", default="cpu",
                    help="configure preset (default: cpu; `default` builds CUDA and grades gpu tests too)")
    sp.add_argument("--build-dir", help="build directory (default: DIR/build-PRESET)")
    sp.add_argument("-j", "--jobs", type=int, help="parallel build jobs and tests (default: nproc)")
    sp.add_argument("--timeout", type=int, help="ctest's default timeout for tests that set none (default: ctest's, 1500 s)")
    sp.add_argument("--lines", type=int, default=15, help="output lines shown per failing test (default 15)")
    sp.add_argument("--json", metavar="FILE", help="also write the results as JSON (default: none)")
    sp.add_argument("--sim", choices=["auto", "yes", "no", "only"], default="auto",
                    help="grade the CUDA exercises on the SIMT emulator: auto (default) where there is no GPU, "
                    "yes, no, or only them (tools/ctools/lab_sim.py)")
    sp = sub.add_parser("wrong", help="grade each region's wrong solutions (chapters/chNN_name/lab_wrong/): "
                        "every one must fail")
    sp.add_argument("chapters", nargs="*", metavar="chNN", help="chapters (default: all)")
    sp.add_argument("--dir", help="a student copy to build in (made when it is not one; reused, with its "
                    "build-cpu, when it is)")
    sp.add_argument("--only", nargs="+", metavar="NAME", help="only these regions (FUNCTION) or wrong solutions "
                    "(FUNCTION.N)")
    sp.add_argument("--list", action="store_true", help="list the wrong solutions and their problems; build nothing")
    sp.add_argument("--rotate", type=int, metavar="K", help="only K of the chapters, a different K each day "
                    "(CT_LAB_WRONG_DAY=N repeats day N's choice); ctest's lab.wrong uses it")
    sp.add_argument("-j", "--jobs", type=int, help="parallel build jobs (default 2)")
    sp.add_argument("--timeout", type=int, default=300, help="seconds per test (default 300)")
    sp.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    sp.add_argument("--sim", choices=["yes", "no"], default="yes",
                    help="grade the wrong solutions of .cu regions on the SIMT emulator (DIR/build-sim, minutes "
                    "to build the first time; default yes), or leave them not graded")
    sp = sub.add_parser("lint", help="check regions; with --cc, that the stubs compile")
    sp.add_argument("chapters", nargs="*", metavar="chNN")
    sp.add_argument("--cc", help="C compiler for the compile check (e.g. cc); compiler flags "
                    "(include directories, -fopenmp) follow a `--` at the end (default: none, no compile check)")
    sp.add_argument("--nvcc", help="nvcc, to check the stubs of .cu files too (its front end, sm_80; default: none)")
    cflags = []
    if argv[:1] == ["lint"] and "--" in argv:
        cut = argv.index("--")
        argv, cflags = argv[:cut], argv[cut + 1:]
    args = p.parse_args(argv)
    args.cflags = cflags
    if not args.command:
        p.print_help()
        return EXIT_USAGE
    try:
        if args.command == "list":
            return cmd_list(args)
        if args.command == "make":
            return cmd_make(args)
        if args.command == "check":
            return run_check(args)
        if args.command == "lint":
            return cmd_lint(args)
        if args.command == "wrong":
            from . import lab_wrong
            return lab_wrong.cmd_wrong(sys.modules[__name__], args)
    except LabError as e:
        print(f"lab {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
