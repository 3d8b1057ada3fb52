# SPDX-License-Identifier: MIT
"""What every chapter checker (tests/chapter/check_chNN.py) does the same way.

A checker runs a chapter's program (and its PyTorch twin), reads what it
printed and the --metrics JSON it wrote, and asserts the chapter's claims
against independent references. The claims are the checker's own; this module
holds only the plumbing they share:

- the verdicts: fail() exits 1, skip() exits 77 (ctest's SKIP_RETURN_CODE),
  expect() fails with the run's output shown;
- running: run() a command and capture its output and exit code, fresh() a
  path whose stale file is removed first, run_with_twin() a chapter and its
  PyTorch twin side by side;
- reading the output: sections_of(), section_text(), section_lines(),
  key_values(), load_metrics() for the JSON, and expect_usage_error() for
  a run given bad flags;
- what may exist here: skip_unless_cuda_build(), has_gpu(), run_cuda() and
  expect_cuda_ok() (a --device cuda run that skips only where there is no
  GPU), skip_unless_imports() and torch_cuda_available() for the twin's Python;
- numbers: close() and positive();
- dispatch(): the `check_chNN.py MODE ARGS...` command line.

A checker imports it from its own folder:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from chaptertest import expect, run, ...

Python 3's standard library only.
"""
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys

# CMake's false constants, as CT_HAVE_CUDA reaches a checker's command line.
CMAKE_FALSE = ("OFF", "0", "FALSE", "NO", "")


# ---- verdicts ------------------------------------------------------------------------------

def fail(msg):
    """The test failed: print why and exit 1."""
    print(f"FAIL: {msg}")
    sys.exit(1)


def skip(msg):
    """What is under test cannot exist here: print why and exit 77 (ctest's SKIP_RETURN_CODE)."""
    print(f"SKIP: {msg}")
    sys.exit(77)


def show(r):
    """Print a finished run's exit code, stdout and stderr."""
    print(f"--- exit {r.returncode}; stdout:\n{r.stdout}--- stderr:\n{r.stderr}---")


def expect(cond, msg, r=None):
    """Fail with msg unless cond holds; show the run r first, when given."""
    if not cond:
        if r is not None:
            show(r)
        fail(msg)


# ---- running ---------------------------------------------------------------------------------

def run(cmd, timeout=280):
    """Run cmd (a list), echoing it; returns the CompletedProcess with text stdout and stderr."""
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def fresh(path):
    """path, with any file a previous run left there removed (so a run that writes none is caught)."""
    if os.path.exists(path):
        os.unlink(path)
    return path


def run_with_twin(tag, chapter_cmd, twin_cmd, workdir, timeout=280, twin_timeout=280):
    """Run a chapter (chapter_cmd), then its PyTorch twin (twin_cmd), each with --metrics to a
    fresh workdir/TAG_twin_c.json and TAG_twin_py.json; fail unless both exit 0. tag: the
    chapter's id ("ch03"). Returns (rc, rp, mc, mp): the two runs and their two metrics."""
    c_json = fresh(os.path.join(workdir, f"{tag}_twin_c.json"))
    py_json = fresh(os.path.join(workdir, f"{tag}_twin_py.json"))
    rc = run(chapter_cmd + ["--metrics", c_json], timeout)
    rp = run(twin_cmd + ["--metrics", py_json], twin_timeout)
    expect(rc.returncode == 0, f"{tag} exit code {rc.returncode}", rc)
    expect(rp.returncode == 0, f"{tag}_pytorch.py exit code {rp.returncode}", rp)
    return rc, rp, load_metrics(c_json), load_metrics(py_json)


# ---- reading the output -------------------------------------------------------------------

def sections_of(stdout):
    """The names of the `== name ==` section headers, in order."""
    return re.findall(r"^== (.+) ==$", stdout, re.M)


def section_text(stdout, name):
    """The text of the first section `== name ==`, up to the next line starting '== '; '' if none."""
    m = re.search(rf"^== {re.escape(name)} ==\n(.*?)(?=^== |\Z)", stdout, re.M | re.S)
    return m.group(1) if m else ""


def section_lines(stdout, name):
    """The lines printed under every `== name ==` header, each up to the next header."""
    out, inside = [], False
    for line in stdout.splitlines():
        h = re.fullmatch(r"== (.+) ==", line)
        if h:
            inside = h.group(1) == name
            continue
        if inside:
            out.append(line)
    return out


def key_values(lines):
    """{key: value} of the unindented 'key: value' rows among lines, both stripped."""
    out = {}
    for line in lines:
        m = re.match(r"^(\S[^:]*):\s+(.*)$", line)
        if m:
            out[m.group(1).strip()] = m.group(2).strip()
    return out


def load_metrics(path):
    """The JSON object a --metrics run wrote to path, written atomically (no .tmp.* left behind)."""
    expect(os.path.isfile(path), f"--metrics {path} wrote no file")
    leftovers = glob.glob(glob.escape(path) + ".tmp.*")
    expect(not leftovers, f"temporary metrics files left behind: {leftovers}")
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except ValueError as e:
        fail(f"{path} is not valid JSON: {e}")
    expect(isinstance(m, dict), f"{path} holds {type(m).__name__}, not a JSON object")
    return m


def expect_usage_error(r, args, needles):
    """Fail unless the run r, given the bad command-line args, exited 2 (a usage error) with
    every one of needles (the flag, the value it got, ...) in its stderr."""
    expect(r.returncode == 2, f"{args}: exit code {r.returncode}, expected 2", r)
    for n in needles:
        expect(n in r.stderr, f"{args}: stderr does not mention {n!r}", r)


# ---- what may exist here ------------------------------------------------------------------

def skip_unless_cuda_build(have_cuda):
    """Skip unless the build has the CUDA backend (have_cuda: CT_HAVE_CUDA as CMake spells it)."""
    if have_cuda.upper() in CMAKE_FALSE:
        skip("this build has no CUDA backend (CPU-only configuration)")


def nvidia_smi(*args):
    """nvidia-smi's stdout for args; None where there is no nvidia-smi or it fails."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        r = subprocess.run([smi, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def has_gpu():
    """Whether this machine shows an NVIDIA GPU: nvidia-smi lists one, or /dev/nvidiaN exists.
    Independent of the program under test, so that a GPU run may skip only where this is false."""
    listed = nvidia_smi("-L")
    return bool(listed and "GPU" in listed) or bool(glob.glob("/dev/nvidia[0-9]*"))


def run_cuda(cmd, timeout=280):
    """Run a --device cuda command; skip (77) where it failed only because there is no GPU here
    (exit 1 saying 'CUDA unavailable', and has_gpu() false). Returns the run, whatever its exit."""
    r = run(cmd, timeout)
    if r.returncode == 1 and "CUDA unavailable" in r.stderr and not has_gpu():
        skip("no GPU here (nvidia-smi lists none, no /dev/nvidia*)")
    return r


def expect_cuda_ok(r):
    """Fail unless the --device cuda run r (from run_cuda) exited 0."""
    if r.returncode != 0:
        expect(False, "--device cuda failed on a machine with a GPU" if has_gpu()
               else f"--device cuda: exit code {r.returncode} without the 'CUDA unavailable' message", r)


def skip_unless_imports(python, *modules):
    """Skip unless the interpreter python can import every one of modules (e.g. "torch")."""
    probe = subprocess.run([python, "-c", "import " + ", ".join(modules)], capture_output=True, text=True)
    if probe.returncode != 0:
        skip(f"{python} cannot import {' and '.join(modules)}: {probe.stderr.strip().splitlines()[-1:]}")


def torch_cuda_available(python):
    """Whether torch.cuda.is_available() under the interpreter python (torch importable)."""
    code = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"
    return subprocess.run([python, "-c", code], capture_output=True, text=True).returncode == 0


# ---- numbers -----------------------------------------------------------------------------------

def close(a, b, rtol, atol=0.0):
    """|a - b| <= atol + rtol * |b|: a measured a against the reference b."""
    return abs(a - b) <= atol + rtol * abs(b)


def positive(x):
    """Whether x is a finite number above 0 (a time, a rate, a size)."""
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


# ---- the command line ------------------------------------------------------------------------

def dispatch(argv, cmds, usage, prepare=None):
    """Run `check_chNN.py MODE ARGS...`: cmds maps MODE to (function, the numbers of ARGS it
    takes: an int or a list of ints). A wrong MODE or count prints usage (the checker's
    docstring) and returns 2; otherwise prepare() (if given) runs, then the mode; returns 0."""
    counts = {k: ([n] if isinstance(n, int) else list(n)) for k, (_, n) in cmds.items()}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 not in counts[argv[1]]:
        print(usage, file=sys.stderr)
        return 2
    if prepare is not None:
        prepare()
    cmds[argv[1]][0](*argv[2:])
    return 0
