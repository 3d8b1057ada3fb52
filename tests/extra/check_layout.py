#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The runtime's layout rules (README, "Folders by job"), checked on the built
libraries and the sources.

1. Every external symbol libct and libct_app define is either a public name
   (ct_..., declared in common/include/) or an internal one (cti_...). A ct_
   name missing from include/ is an internal entry point under a public prefix.
2. No cti_ name appears in common/include/ (a public header would leak it).
3. Chapters include only public headers: no "core/", "cpu/", "kernels/", ...
4. Only common/app/ calls exit() or abort().
5. Names tell the truth (common/README.md, "Names"): in common/ outside
   include/, every ct_ name the code (not its comments or strings) uses is a
   public one, so no static, file-local helper, device function or private
   type borrows the public prefix; nowhere (common, chapters, tests, tools)
   does a static function or variable carry it; and no type the project
   defines is CamelCase (snake_case, as the C runtime's ct_tensor; short
   all-caps template aliases such as T are fine).
Usage: check_layout.py SOURCE_DIR LIBCT LIBCT_APP NM
"""
import pathlib
import re
import subprocess
import sys

src, libs, nm = pathlib.Path(sys.argv[1]), sys.argv[2:4], sys.argv[4]
problems = []

public = set()
for h in (src / "common/include").glob("*.h"):
    text = h.read_text()
    public |= set(re.findall(r"\bct_[A-Za-z0-9_]+\b", text))
    for name in sorted(set(re.findall(r"\bcti_[A-Za-z0-9_]+\b", text))):
        problems.append(f"{h.relative_to(src)} names the internal {name}: "
                        "public headers may not mention cti_ names")

for lib in libs:
    out = subprocess.run([nm, "-g", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        # U: undefined; w/W, v/V: weak definitions, which a header-only
        # library emits in every object that includes it (NVTX 3's
        # nvtx*_impl_init_v3 in the CUDA build's profiler); the runtime
        # defines no weak symbols of its own.
        if len(parts) != 3 or parts[1] in "UwWVv":
            continue
        sym = parts[2]
        if sym.startswith(("_Z", "__", "DW.ref.")) or sym.startswith("cti_"):
            continue  # C++ mangled (templates, the CUDA runtime's stubs) or internal
        if sym.startswith("ct_") and sym in public:
            continue
        problems.append(f"{pathlib.Path(lib).name} exports {sym}: declare it in "
                        "common/include/ (public ct_) or rename it cti_ (internal)")

private_dirs = ("core/", "cpu/", "kernels/", "nn/", "optim/", "data/", "io/", "app/", "graph/", "jit/",
                "amp/", "prof/", "sanitizer/", "parallel/", "dist/")
def runtime_region(wrong):
    """True when a lab_wrong file's region (chapters/chNN/lab_wrong/FUNCTION.N.c) lives in the
    runtime (a LAB region in common/, as ch07's reduce_grads): tools/lab pastes it there, where
    the runtime's internals are in scope."""
    func = re.sub(r"(-\d+)?\.\d+$", "", wrong.stem)
    define = re.compile(r"^\w[\w \*]*\b" + re.escape(func) + r"\s*\(", re.M)
    for g in (src / "common").rglob("*.c"):
        text = g.read_text()
        if "LAB BEGIN" in text and define.search(text):
            return True
    return False


for f in sorted((src / "chapters").rglob("*")):
    if f.suffix not in (".c", ".cu", ".h", ".cuh"):
        continue
    if f.parent.name == "lab_wrong" and runtime_region(f):
        continue
    prose = False  # inside a /*md ... */ prose block, which may name the runtime's internals it explains
    for n, line in enumerate(f.read_text().splitlines(), 1):
        if line.strip() == "/*md":
            prose = True
        elif prose and line.strip() == "*/":
            prose = False
        if prose:
            continue
        m = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', line)
        if m and m.group(1).startswith(private_dirs):
            problems.append(f"{f.relative_to(src)}:{n} includes the private "
                            f"{m.group(1)}: chapters see only common/include/")
        if re.search(r"\bcti_[A-Za-z0-9_]+", line):
            problems.append(f"{f.relative_to(src)}:{n} calls an internal cti_ "
                            "name: chapters use the public API")

for f in sorted((src / "common").rglob("*")):
    if f.suffix not in (".c", ".cu", ".h", ".cuh") or "app" in f.parts:
        continue
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", f.read_text(), flags=re.S)
    if re.search(r"\b(exit|abort)\s*\(", code):
        problems.append(f"{f.relative_to(src)} calls exit/abort: only common/app/ "
                        "may end the process")

# Rule 5: names. Comments and string literals are stripped first (a message
# may quote a public call, "ct_view: ...").
TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
def code_of(text):  # comments and literals blanked, line numbers kept
    return TOKEN.sub(lambda m: "\n" * m.group(0).count("\n") + ('""' if m.group(0)[0] in "\"'" else " "), text)

STATIC_CT = re.compile(r"\bstatic\b[^;{}()=]*?\b(ct_[A-Za-z0-9_]+)\s*[(\[=;,]")
TYPE_DEF = re.compile(r"\b(?:struct|class|union|enum(?:\s+class)?)\s+([A-Za-z_]\w*)\s*(?:final\s*)?[{:;]"
                      r"|\busing\s+([A-Za-z_]\w*)\s*=|\btypedef\b[^;]*?\b([A-Za-z_]\w*)\s*;")
def camel(name):
    return bool(re.match(r"[A-Z][a-z]", name) or re.search(r"[a-z][A-Z]", name))

def check_names(root, files):
    out = []
    for f in files:
        code = code_of(f.read_text())
        rel = f.relative_to(root)
        # A public header's static inline functions are public API (checked.h).
        for m in STATIC_CT.finditer("" if rel.parts[:2] == ("common", "include") else code):
            n = code.count("\n", 0, m.start()) + 1
            out.append(f"{rel}:{n} defines the static {m.group(1)}: file-local names "
                       "do not carry the public ct_ prefix (plain name, or cti_ if shared)")
        for m in TYPE_DEF.finditer(code):
            name = next(g for g in m.groups() if g)
            if camel(name):
                n = code.count("\n", 0, m.start()) + 1
                out.append(f"{rel}:{n} defines the CamelCase type {name}: types are snake_case")
        if rel.parts[0] == "common" and "include" not in rel.parts:
            for name in sorted(set(re.findall(r"\bct_[A-Za-z0-9_]+\b", code)) - public):
                out.append(f"{rel} names {name}, which no public header declares: "
                           "an internal name takes cti_ (shared) or no prefix (file-local)")
    return out

# tools/sim is left out: the SIMT emulator spells CUDA's own API
# (cudaStream_t, cudaMemcpyKind) and its namespace ct_sim.
sources = [f for d in ("common", "chapters", "tests", "tools") for f in sorted((src / d).rglob("*"))
           if f.suffix in (".c", ".h", ".cu", ".cuh", ".cc") and f.is_file()
           and f.relative_to(src).parts[:2] != ("tools", "sim")]
problems += check_names(src, sources)

for p in problems:
    print("layout:", p)
print(f"layout: {len(public)} public names, {len(problems)} problems")
sys.exit(1 if problems else 0)
