#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/bench: the speed targets, measured against PyTorch in the same run.

usage: tools/bench [--build DIR] [--device auto|cpu|cuda] [--quick]
                   [--only ch02,...,ch14] [--out FILE.md | --out-dir DIR]
                   [--json FILE]
                   [--python PATH] [--also-python PATH] [--threads N]
                   [--runs N] [--timeout S]
                   [--deadline S] [--work DIR] [--note TEXT] [--list-rows]

The project's rule: speed targets live here, measured as ratios against
PyTorch in the same run, never as timed assertions in tests. For each target
this runs the C chapter (./chNN in the build folder; nothing is built here)
and its PyTorch twin (chapters/chNN_*/chNN_pytorch.py) on the same device,
with the same sizes and the same thread count, reads both --metrics JSON
files and forms the ratios that the issues name:

  ch02  pinned host->device GB/s at the largest size, C / PyTorch (>= 0.90),
        and pinned faster than pageable (GPU); on the CPU, host memcpy and
        copy_ figures only (the pinned targets are n/a)
  ch04  register-tiled SGEMM / cuBLAS SGEMM at 4096 (>= 0.50, GPU); each
        cuBLAS path (f32, tf32, bf16, f16) / torch.mm at each size
        (>= 0.97: within 3%); the runtime's OpenBLAS path (ct_mm) /
        cblas_sgemm called directly at the largest CPU size (>= 0.95)
  ch05  training steps/s, C / PyTorch (>= 3.0, same device)
  ch06  training images/s, C / PyTorch eager (>= 1.5 on a GPU (the goal is
        set for an H100), >= 1.0 on the CPU at the same thread count)
  ch07  DataParallel training steps/s on the same device list, C / PyTorch
        (>= 1.0; nn.DataParallel on distinct GPUs, the twin's threaded
        mechanics elsewhere), and C DataParallel / C one device
        (informational: below 1 on a repeated device)
  ch08  DDP training steps/s on 2 ranks, C / PyTorch (>= 1.0, gloo for the
        twin); DDP scaling, 2 ranks of one thread each / one process alone on
        the same global batch (informational); DataParallel / DDP step time
        (informational: the seeds' "DDP has no main-device bottleneck")
  ch09  AMP training steps/s under autocast in the device's lower precision
        (bfloat16 on the CPU, against torch.autocast("cpu",
        dtype=torch.bfloat16); float16 with GradScaler on a GPU), C / PyTorch,
        for the GEMM-heavy MLP and the seed's conv+BN model (>= 1.0); and
        each side's autocast / float32 speed-up (informational)
  ch10  graph replay / eager steps/s of one training step at the smallest
        (launch-bound) width, C (>= 2.0 on a GPU, the goal set for an H100;
        informational on the CPU, where a replay saves only the dispatcher's
        work) and at the largest width (informational); C replay / PyTorch's
        torch.cuda.graphs replay (a GPU only: PyTorch has no CPU graphs, and
        the row says so); C eager / PyTorch eager (informational); C replay /
        torch.compile(mode="reduce-overhead") where the twin's PyTorch has it
  ch11  the profiler's overhead: training steps/s under the profiler / without
        it (CPU activity, shapes and memory; + CUDA on a GPU), C's
        ct_profiler / torch.profiler on the same step (>= 1.0: C's profiler
        slows its step no more than torch.profiler slows PyTorch's), and each
        side's own ratio (informational)
  ch12  copy/compute overlap: the two-stream pipeline's speed-up over one
        stream (serial / two-stream time, C and PyTorch, informational:
        about 2 at best, when copy and compute take as long), and
        pipelines/s C / PyTorch for each schedule (>= 0.90, GPU); on the
        CPU streams run work as it is issued, so only the serial pipeline
        is compared (both by the host clock) and the rows say so
  ch13  runtime-compiled kernels: the fused gate kernel's GB/s over the
        device's copy bandwidth (ct_copy_, measured in the same run; >= 0.80),
        and for context the unfused chain's and the fused gelu's; gate's
        measured speed-up over the bytes' ratio (1 where time follows bytes);
        C fused / PyTorch fused (jiterator on a GPU, torch.compile where it
        exists; >= 0.90 on a GPU, n/a where the twin has no fused path) and
        C ops / PyTorch eager (informational)
  ch14  the GPT: training tokens/s (after the first 10 steps), C / PyTorch
        eager on the same model, windows and thread count (>= 1.0); the
        validation loss after the same steps from the same initial weights
        (./ch14 --save-init, the twin's --load-init), PyTorch / C
        (informational: 1 when both trained the same model); C / torch.compile
        tokens/s (>= 1.0) where the twin's PyTorch has torch.compile (n/a
        with torch 1.13). The CPU model is the default preset cut to 200
        steps; a GPU runs --preset gpu cut to 200 steps

The twins' PyTorch: the 2.x venv .venv-torch2/ (tools/bootstrap --group
torch2; CT_TORCH2_VENV names another) where it exists, else Debian's
/usr/bin/python3 with python3-torch 1.13. Every PyTorch figure records its
version (the JSON's a_torch / b_torch per row, the report beside each
figure). Where that PyTorch has torch.compile, the rows with a training or
elementwise step also compare C with it: ch06 runs its twin a second time
with --compile (model.compile(): torch.compile in place), ch09's and ch14's
twins time a compiled step in the same run (--compile), ch13's fused path
is torch.compile of the same expression; with torch 1.13 those rows are n/a.

Each program runs --runs times (default 3), C and twin interleaved, all
targets once before any runs again; each figure is the median of the runs,
with their min and max, and the 1-minute load average is read before and
after each run (the JSON's run_log). A row whose C or PyTorch runs spread
over more than 10% of their median ((max - min) / median) is flagged
unstable; it is judged all the same when every paired run (run i of C
against run i of the twin, adjacent in time) gives the same verdict, and
marked "unstable" and not judged when the paired runs fall on both sides of
its goal. Where a chapter reports
per-repeat figures the figure is already their median (the chapters time
medians of repeats; for ch06 the bench takes the median of the epochs
after the first).

It prints a table (target, C figure, PyTorch or reference figure, ratio,
goal, met) and writes a Markdown report, by default
book/recorded/bench-<device-slug>-<UTC date>.md (with --quick:
...-quick.md), with the device, date, thread count, commit, the exact
commands and the table, and beside it the same as JSON (.json: the header
facts: device, driver, CUDA, PyTorch, date, commit, load, mode; and every
row: its stable id, target, C and reference figures with their unit, ratio,
goal, met, note, and where the device has a ceiling for the C figure (the
GEMM peak ch04 estimates, the copy bandwidth measured in the same run) that
ceiling and the fraction of it); --json FILE writes the JSON there too. The
book's performance appendix reads the JSON; each row id has its explanation
in book/performance.json.

Options:
  --build DIR      the build folder with ch02..ch14 built (default:
                   $CT_BUILD_DIR, else build/)
  --device D       auto (cuda when nvidia-smi lists a GPU, else cpu), cpu or
                   cuda (default: auto)
  --quick          every program with --quick: seconds, for smoke tests;
                   the sizes are then smaller than the ones the goals name
  --only LIST      comma-separated targets (default: ch02,ch04,ch05,ch06,ch07,ch08,ch09,ch10,ch11,ch12,ch13,ch14)
  --out FILE       the Markdown report (default: see above)
  --out-dir DIR    the report under its default name in DIR instead of
                   book/recorded (tools/gpu-check uses this)
  --json FILE      also write the results as JSON
  --python PATH    the Python that runs the twins (default: .venv-torch2's
                   where it exists, else /usr/bin/python3, Debian's, with
                   python3-torch; where that cannot import torch, as on
                   the lent GPU machine, `python3` on PATH)
  --also-python PATH
                   also run every twin, eager, under this Python (e.g.
                   /usr/bin/python3, Debian's torch 1.13) for an
                   informational column: the report's "Against PyTorch V"
                   table, the JSON's b_also, b_also_torch and ratio_also
                   per row; the goals are judged against --python's
  --threads N      OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS
                   for every program and torch.set_num_threads for the twins
                   (default: the CPUs this process may use)
  --runs N         runs of each program (default 3; the median is the figure)
  --timeout S      per program run (default 900)
  --deadline S     start no run after S seconds, and stop runs at S; second
                   runs are skipped first (every target runs once before
                   any runs twice); a target with no run is reported as not
                   run and the exit status is 3
  --work DIR       logs and metrics of every run (default: BUILD/bench)
  --note TEXT      a line for the report's notes (repeatable)
  --list-rows      print every row this bench can report, per device (cpu,
                   cuda), as JSON, and exit: id, chapter, target, unit, goal,
                   whether a ceiling applies (runs nothing)

Environment: CT_BUILD_DIR (default build folder), CT_BENCH_OUT (a folder
that also receives a copy of the report and bench.json), CT_COMMIT (the
commit to record where there is no .git).

Exit status: 0 when every run succeeded, whether or not the targets were met
(this measures, it does not assert); 1 when a program failed (non-zero exit,
timeout, missing or unreadable metrics) or nothing could be compared; 2 for
bad arguments; 3 when the deadline left a target without any run.
"""
import argparse
import datetime
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

from .text import cell, finite, slug  # shared with other tools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository
TARGETS = ("ch02", "ch04", "ch05", "ch06", "ch07", "ch08", "ch09", "ch10", "ch11", "ch12", "ch13", "ch14")
DEFAULT_PYTHON = "/usr/bin/python3"
TORCH2_PYTHON = os.path.join(os.environ.get("CT_TORCH2_VENV") or os.path.join(ROOT, ".venv-torch2"), "bin", "python")
# A row whose C or PyTorch figure varies across the runs by more than this fraction of its median
# ((max - min) / median) is marked unstable instead of judged against its goal.
UNSTABLE_SPREAD = 0.10
# Targets whose twin runs a second time with --compile (model.compile(): torch.compile in place): the
# "pyc" side. ch09 and ch14 time their compiled step inside the same run (--compile on "py").
COMPILE_SIDE = ("ch06",)


# ---- small helpers --------------------------------------------------------------------------------

def log(msg):
    print(f"bench: {msg}", flush=True)



def fmt(x, unit=""):
    if not finite(x):
        return "-"
    if abs(x) >= 1000:
        s = f"{x:,.0f}"
    elif abs(x) >= 100:
        s = f"{x:.1f}"
    else:
        s = f"{x:.3g}"
    return f"{s} {unit}".strip()



def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def cpu_slug(model):
    m = re.sub(r"\((R|TM|tm|r)\)", " ", model)
    m = re.sub(r"@.*$", " ", m)                       # the clock: not part of the name
    m = re.sub(r"\b(CPU|Processor)\b", " ", m)
    m = re.sub(r"\b\d+-Core\b", " ", m, flags=re.I)
    return "cpu-" + (slug(m) or "unknown")


def gpu_names():
    """The GPUs nvidia-smi lists (empty where there is none or no nvidia-smi)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def commit_id():
    if os.environ.get("CT_COMMIT"):
        return os.environ["CT_COMMIT"]
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=30)
        if head.returncode != 0:
            return "unknown"
        c = head.stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30)
        if dirty.returncode == 0 and dirty.stdout.strip():
            c += " (with uncommitted changes)"
        return c
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def probe_torch(python, env):
    """(torch version, cuda available) for the twins' Python, or (None, reason); the CUDA version
    torch was built with goes to TORCH_CUDA[python]."""
    code = ("import torch; print(torch.__version__); print(int(torch.cuda.is_available())); "
            "print(torch.version.cuda or 'none')")
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"cannot run {python}: {e}"
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["import torch failed"])[-1]
        return None, f"{python}: {tail}"
    lines = out.stdout.split()
    if len(lines) >= 3:
        TORCH_CUDA[python] = lines[2]
    return (lines[0], lines[1] == "1") if len(lines) >= 2 else (None, "unexpected output from torch probe")


TORCH_CUDA = {}


def driver_version():
    """The NVIDIA driver's version (nvidia-smi), or None."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [t.strip() for t in out.stdout.splitlines() if t.strip()]
    return lines[0] if out.returncode == 0 and lines else None


def build_cuda_version(build):
    """The CUDA compiler version the C build used (CMake's CMakeCUDACompiler.cmake in the build
    folder), or None (a CPU-only build)."""
    import glob
    for path in glob.glob(os.path.join(build, "CMakeFiles", "*", "CMakeCUDACompiler.cmake")):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                m = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "([^"]+)"\)', f.read())
        except OSError:
            continue
        if m:
            return m.group(1)
    return None


def read_metrics(path):
    with open(path, encoding="utf-8") as f:
        m = json.load(f)
    if not isinstance(m, dict):
        raise ValueError("not a JSON object")
    return m


# ---- getters: one figure out of a metrics dict (None where absent) ----------------------------

def val(key):
    def get(m):
        v = m.get(key)
        return float(v) if finite(v) else None
    return get


def last(key):
    def get(m):
        v = m.get(key)
        if isinstance(v, list) and v and finite(v[-1]):
            return float(v[-1])
        return None
    return get


def at(key, sizes_key, n):
    """key's entry at the index where sizes_key == n."""
    def get(m):
        sizes, v = m.get(sizes_key), m.get(key)
        if not isinstance(sizes, list) or not isinstance(v, list):
            return None
        for i, s in enumerate(sizes):
            if finite(s) and int(s) == n and i < len(v) and finite(v[i]):
                return float(v[i])
        return None
    return get


def epochs_median(key, whole_key):
    """The median of the per-epoch figures after the first (the first pays the warm-up); the
    whole-run figure where there is a single epoch."""
    def get(m):
        v = m.get(key)
        if isinstance(v, list):
            v = [float(x) for x in v if finite(x)]
            if len(v) >= 2:
                return statistics.median(v[1:])
            if len(v) == 1:
                return v[0]
        return val(whole_key)(m)
    return get


def fastest_epoch(key):
    """The best per-epoch figure after the first (the least disturbed epoch)."""
    def get(m):
        v = m.get(key)
        if not isinstance(v, list):
            return None
        v = [float(x) for x in v if finite(x)]
        v = v[1:] if len(v) > 1 else v
        return max(v) if v else None
    return get


def fastest_epoch_steps(m):
    """steps per epoch over the fastest epoch after the first, in steps/s."""
    steps, ms = m.get("steps_per_epoch"), m.get("epoch_ms")
    if not finite(steps) or not isinstance(ms, list):
        return None
    ms = [float(x) for x in ms if finite(x) and x > 0]
    ms = ms[1:] if len(ms) > 1 else ms
    return steps / (min(ms) * 1e-3) if ms else None


# ---- rows -----------------------------------------------------------------------------------------

class Fig:
    """A figure of one program ('c' or 'py'), its label and its getter."""

    def __init__(self, src, get, label):
        self.src, self.get, self.label = src, get, label


class Row:
    """One row of the report. rid: the row's stable id ("ch05.steps"), the same on every device
    and size, which the book's performance appendix keys its explanation by (book/performance.json;
    a new row needs one there); at: what tells apart rows sharing an id, shown after the title (a
    size, a dtype); ceiling: the device's limit for the C figure, where one applies (the estimated
    GEMM peak, the copy bandwidth measured in the same run), reported as a fraction."""

    def __init__(self, target, a, b, unit, goal=None, op=">=", note="", na=None, gated=True, rid=None,
                 at=None, ceiling=None):
        self.target, self.a, self.b, self.unit = target, a, b, unit
        self.goal, self.op, self.note = goal, op, note
        self.na = na          # the reason the goal cannot be judged in this run, if any
        self.gated = gated    # False: the devices/threads mismatch does not matter to this row
        self.rid, self.at, self.ceiling = rid, at, ceiling


def pick_size(sizes, want):
    """want if the run has it, else the largest size the run has."""
    sizes = [int(s) for s in sizes if finite(s)]
    if not sizes:
        return None
    return want if want in sizes else max(sizes)


def size_str(nbytes):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div:
            return f"{nbytes / div:g} {unit}"
    return f"{nbytes:g} B"


def first_metrics(runs):
    for r in runs:
        if r.get("metrics"):
            return r["metrics"]
    return {}


# Each plan_chNN(ctx) gives the extra flags of both programs; rows_chNN(ctx, c, py) the rows,
# where c and py are the first good metrics of each (for sizes and names; the figures
# themselves come from every run).

def plan_ch02(ctx):
    return [], []


def rows_ch02(ctx, c, py):
    rows = []
    sizes = c.get("sizes_bytes") or py.get("sizes_bytes") or []
    big = size_str(sizes[-1]) if sizes and finite(sizes[-1]) else "the largest size"
    if ctx.device == "cuda":
        rows.append(Row(f"ch02 pinned H2D GB/s at {big}: C / PyTorch",
                        Fig("c", last("h2d_pinned_gbs"), "C ct_to(non_blocking)"),
                        Fig("py", last("h2d_pinned_gbs"), "x.to('cuda', non_blocking=True)"),
                        "GB/s", 0.90, rid="ch02.h2d_pinned", at=big))
        rows.append(Row(f"ch02 C pinned / pageable H2D at {big}",
                        Fig("c", last("h2d_pinned_gbs"), "pinned"),
                        Fig("c", last("h2d_pageable_gbs"), "pageable"), "GB/s", 1.0, op=">", gated=False,
                        rid="ch02.pinned_vs_pageable", at=big))
        rows.append(Row(f"ch02 pinned D2H GB/s at {big}: C / PyTorch",
                        Fig("c", last("d2h_pinned_gbs"), "C"), Fig("py", last("d2h_pinned_gbs"), "PyTorch"),
                        "GB/s", rid="ch02.d2h_pinned", at=big))
    else:
        na = "needs a GPU: no host-to-device copy on the CPU"
        rows.append(Row("ch02 pinned H2D GB/s: C / PyTorch", None, None, "GB/s", 0.90, na=na, rid="ch02.h2d_pinned"))
        rows.append(Row("ch02 C pinned / pageable H2D", None, None, "GB/s", 1.0, op=">", na=na,
                        rid="ch02.pinned_vs_pageable"))
    rows.append(Row(f"ch02 host memcpy GB/s at {big}: C memcpy / numpy copyto",
                    Fig("c", last("host_memcpy_gbs"), "C memcpy"), Fig("py", last("host_memcpy_gbs"), "numpy"),
                    "GB/s", rid="ch02.host_memcpy", at=big))
    if ctx.device == "cpu":
        rows.append(Row(f"ch02 tensor copy GB/s at {big}: ct_copy_ / torch copy_",
                        Fig("c", last("host_copy_gbs"), "ct_copy_"), Fig("py", last("host_copy_gbs"), "copy_"),
                        "GB/s", rid="ch02.tensor_copy", at=big))
    return rows


def plan_ch04(ctx):
    return [], []


# The GEMM rows' ceilings: the peaks ch04 estimates (the CPU's from cores x clock x FLOPs per
# cycle, the GPU's FP32 peak from its SMs and clock); no ceiling for the tensor-core dtypes.
CPU_PEAK = Fig("c", val("cpu_peak_gflops"), "estimated f32 peak")
GPU_PEAK = Fig("c", val("gpu_peak_fp32_gflops"), "FP32 peak")


def rows_ch04(ctx, c, py):
    rows = []
    if ctx.device == "cuda":
        gsizes = c.get("gpu_sizes") or py.get("gpu_sizes") or []
        n = pick_size(gsizes, 4096)
        if n is not None:
            rows.append(Row(f"ch04 register-tiled SGEMM / cuBLAS SGEMM at {n} (both C)",
                            Fig("c", at("gpu_reg_tiled_gflops", "gpu_sizes", n), "reg_tiled"),
                            Fig("c", at("gpu_mm_f32_gflops", "gpu_sizes", n), "cuBLAS"), "GFLOP/s", 0.50,
                            gated=False, note="" if n == 4096 else "the goal names 4096; this run's largest size",
                            rid="ch04.reg_tiled_vs_cublas", at=str(n), ceiling=GPU_PEAK))
        for dt in ("f32", "tf32", "bf16", "f16"):
            for s in [int(x) for x in gsizes if finite(x)]:
                key = f"gpu_mm_{dt}_gflops"
                rows.append(Row(f"ch04 cuBLAS {dt} / torch.mm at {s}",
                                Fig("c", at(key, "gpu_sizes", s), "ct_mm"),
                                Fig("py", at(key, "gpu_sizes", s), "torch.mm"), "GFLOP/s", 0.97,
                                rid="ch04.cublas_vs_torch_mm", at=f"{dt}, {s}",
                                ceiling=GPU_PEAK if dt == "f32" else None))
    else:
        rows.append(Row("ch04 register-tiled SGEMM / cuBLAS SGEMM at 4096", None, None, "GFLOP/s", 0.50,
                        na="needs a GPU", rid="ch04.reg_tiled_vs_cublas"))
        rows.append(Row("ch04 cuBLAS paths / torch.mm", None, None, "GFLOP/s", 0.97, na="needs a GPU",
                        rid="ch04.cublas_vs_torch_mm"))
    csizes = c.get("cpu_sizes") or py.get("cpu_sizes") or []
    n = pick_size(csizes, 2048)
    if n is not None:
        rows.append(Row(f"ch04 CPU: ct_mm (OpenBLAS path) / cblas_sgemm at {n} (both C)",
                        Fig("c", at("cpu_mm_gflops", "cpu_sizes", n), "ct_mm"),
                        Fig("c", at("cpu_cblas_gflops", "cpu_sizes", n), "cblas_sgemm"), "GFLOP/s", 0.95,
                        gated=False, note="" if n == 2048 else "the goal names 2048; this run's largest size",
                        rid="ch04.cpu_mm_vs_cblas", at=str(n), ceiling=CPU_PEAK))
        rows.append(Row(f"ch04 CPU: ct_mm / torch.mm at {n}",
                        Fig("c", at("cpu_mm_gflops", "cpu_sizes", n), "ct_mm"),
                        Fig("py", at("cpu_mm_gflops", "cpu_sizes", n), "torch.mm"), "GFLOP/s",
                        rid="ch04.cpu_mm_vs_torch_mm", at=str(n), ceiling=CPU_PEAK))
    return rows


def plan_ch05(ctx):
    return [], ["--threads", str(ctx.threads)]


def rows_ch05(ctx, c, py):
    return [
        Row("ch05 training steps/s: C / PyTorch",
            Fig("c", val("steps_per_s"), "C"), Fig("py", val("steps_per_s"), "PyTorch"), "steps/s", 3.0,
            note="each program's median epoch after the first", rid="ch05.steps"),
        Row("ch05 fastest epoch, steps/s: C / PyTorch (informational)",
            Fig("c", fastest_epoch_steps, "C"), Fig("py", fastest_epoch_steps, "PyTorch"), "steps/s",
            note="the least disturbed epoch of each; shows the noise of a shared machine", rid="ch05.fastest_epoch"),
    ]


def ch06_settings(ctx):
    """The ch06 flags both programs get, spelled out so that the two cannot drift apart."""
    common = ["--model", "cnn", "--batch-size", "128", "--optimizer", "adam", "--workers", "2",
              "--out-dir", ctx.work]
    if ctx.quick:
        return common  # --quick: 2560 training images, 1000 test images, 1 epoch
    # Four epochs: the first pays the warm-up, the median of the other three is the figure (a
    # median of three shrugs off one disturbed epoch; of two it would not).
    if ctx.device == "cuda":
        return common + ["--epochs", "4", "--train-size", "30720", "--test-size", "1000"]
    return common + ["--epochs", "4", "--train-size", "2560", "--test-size", "1000"]


def plan_ch06(ctx):
    s = ch06_settings(ctx)
    return s, s


def rows_ch06(ctx, c, py):
    goal = 1.5 if ctx.device == "cuda" else 1.0
    note = "median of the epochs after the first" if not ctx.quick else "one epoch (--quick)"
    if ctx.device == "cuda" and "H100" not in (ctx.gpu or ""):
        note += "; the 1.5 goal is set for an H100"
    return [Row("ch06 training images/s: C / PyTorch eager",
                Fig("c", epochs_median("epoch_images_per_s", "images_per_s"), "C"),
                Fig("py", epochs_median("epoch_images_per_s", "images_per_s"), "PyTorch eager"),
                "images/s", goal, note=note, rid="ch06.images"),
            Row("ch06 fastest epoch, images/s: C / PyTorch eager (informational)",
                Fig("c", fastest_epoch("epoch_images_per_s"), "C"),
                Fig("py", fastest_epoch("epoch_images_per_s"), "PyTorch eager"), "images/s",
                note="the fastest epoch after the first of each; far from the median where epochs were disturbed",
                rid="ch06.fastest_epoch"),
            Row("ch06 model GFLOP/s / ct_mm GFLOP/s, the same run (C, informational)",
                Fig("c", val("model_gflops_per_s"), "model FLOPs at the median epoch"),
                Fig("c", val("matmul_ceiling_gflops"), "ct_mm ceiling"), "GFLOP/s", 0.5, gated=False,
                note="the matrix products' FLOPs a training image needs; the ceiling measured in the same run",
                rid="ch06.ceiling_fraction"),
            compile_row(ctx, Row("ch06 training images/s: C / PyTorch torch.compile",
                                 Fig("c", epochs_median("epoch_images_per_s", "images_per_s"), "C"),
                                 Fig("pyc", epochs_median("epoch_images_per_s", "images_per_s"), "torch.compile"),
                                 "images/s", goal, rid="ch06.images_compile",
                                 note=note + ("; the compiling is in the one epoch" if ctx.quick else "")))]


def compile_row(ctx, row):
    """row as it is where the twins' PyTorch has torch.compile, else with the reason it cannot run."""
    if not ctx.compile_ok:
        row.na = f"the twins' PyTorch ({ctx.torch or 'not importable'}) has no torch.compile"
    return row


def ch07_devices(ctx):
    """Distinct GPUs where there are two or more (the chapter's auto), else two of the one device."""
    return "auto" if ctx.device == "cuda" and len(gpu_names()) >= 2 else ",".join([ctx.device] * 2)


def plan_ch07(ctx):
    s = ["--devices", ch07_devices(ctx), "--out-dir", ctx.work] + ([] if ctx.quick else ["--steps", "200"])
    return s, s


def per_second(ms_key):
    def get(m):
        v = m.get(ms_key)
        return 1e3 / float(v) if finite(v) and v > 0 else None
    return get


def rows_ch07(ctx, c, py):
    note = f"--devices {ch07_devices(ctx)}; the same batches and model on both sides"
    return [Row("ch07 DataParallel training steps/s: C / PyTorch",
                Fig("c", per_second("dp_ms_per_step"), "C ct_data_parallel"),
                Fig("py", per_second("dp_ms_per_step"), "PyTorch"), "steps/s", 1.0, note=note, rid="ch07.dp"),
            Row("ch07 C DataParallel / C one device, steps/s (informational)",
                Fig("c", per_second("dp_ms_per_step"), "DataParallel"),
                Fig("c", per_second("single_ms_per_step"), "one device"), "steps/s", gated=False,
                note="below 1 where one device is repeated: the wrapper's cost without the speed-up",
                rid="ch07.dp_vs_one_device")]


def plan_ch08(ctx):
    s = ["--nproc", "2"] + ([] if ctx.quick else ["--epochs", "1", "--train-size", "12000"])
    return s, s


def rows_ch08(ctx, c, py):
    note = "2 ranks under tools/launch, one OpenMP share of the cores each"
    return [Row("ch08 DDP training steps/s (2 ranks): C / PyTorch",
                Fig("c", per_second("ddp_ms_per_step"), "C ct_ddp over MPI"),
                Fig("py", per_second("ddp_ms_per_step"), "PyTorch DDP over gloo"), "steps/s", 1.0, note=note,
                rid="ch08.ddp"),
            Row("ch08 DDP scaling: 2 ranks / one process on the same global batch (C, informational)",
                Fig("c", per_second("ddp_ms_per_step"), "2 ranks"),
                Fig("c", per_second("single_ms_per_step"), "one process"), "steps/s", gated=False,
                note="on 2 cores; the ideal is 2", rid="ch08.ddp_scaling"),
            Row("ch08 DDP / DataParallel steps/s, same devices and global batch (C, informational)",
                Fig("c", per_second("ddp_ms_per_step"), "DDP"),
                Fig("c", per_second("dp_ms_per_step"), "DataParallel"), "steps/s", gated=False,
                note="above 1: DDP is faster (the seeds' claim)", rid="ch08.ddp_vs_dp")]


def plan_ch09(ctx):
    s = ["--out-dir", ctx.work] + ([] if ctx.quick else ["--steps", "40"])
    return s, s + (["--compile"] if ctx.compile_ok else [])


def rows_ch09(ctx, c, py):
    lowp = "float16" if ctx.device == "cuda" else "bfloat16"
    how = ("torch.amp.autocast(\"cuda\", dtype=torch.float16) + GradScaler" if ctx.device == "cuda"
           else "torch.autocast(\"cpu\", dtype=torch.bfloat16) (oneDNN on both sides)")
    rows = []
    for name, what in (("gemm", "GEMM-heavy MLP"), ("conv", "seed's conv+BN model")):
        rows.append(Row(f"ch09 AMP ({lowp}) training steps/s, {what}: C / PyTorch",
                        Fig("c", per_second(f"{name}_ms_{lowp}"), f"C autocast {lowp}"),
                        Fig("py", per_second(f"{name}_ms_{lowp}"), f"PyTorch {how}"), "steps/s", 1.0,
                        note="the same model, batch and steps on both sides", rid=f"ch09.amp_{name}", at=lowp))
        rows.append(compile_row(ctx, Row(f"ch09 AMP ({lowp}) training steps/s, {what}: C / PyTorch torch.compile",
                                         Fig("c", per_second(f"{name}_ms_{lowp}"), f"C autocast {lowp}"),
                                         Fig("py", per_second(f"{name}_ms_{lowp}_compiled"), "torch.compile"),
                                         "steps/s", 1.0, note="the same model, batch and steps; the compiling "
                                         "steps are the untimed warm-up", rid=f"ch09.amp_{name}_compile", at=lowp)))
    rows.append(Row(f"ch09 C {lowp} / float32 steps/s, GEMM-heavy MLP (informational)",
                    Fig("c", per_second(f"gemm_ms_{lowp}"), lowp),
                    Fig("c", per_second("gemm_ms_float32"), "float32"), "steps/s", gated=False,
                    note="what the lower precision buys here (tensor cores on a GPU, AVX-512 BF16 on this CPU)",
                    rid="ch09.c_lowp_vs_f32", at=lowp))
    rows.append(Row(f"ch09 PyTorch {lowp} / float32 steps/s, GEMM-heavy MLP (informational)",
                    Fig("py", per_second(f"gemm_ms_{lowp}"), lowp),
                    Fig("py", per_second("gemm_ms_float32"), "float32"), "steps/s", gated=False,
                    rid="ch09.py_lowp_vs_f32", at=lowp))
    return rows


def plan_ch12(ctx):
    return [], []  # the chapter's defaults on both sides (8 chunks of 8192x2048 on a GPU)


def rows_ch12(ctx, c, py):
    shape = f"{int(c.get('chunks', 0))} chunks of ({int(c.get('rows', 0))}, {int(c.get('width', 0))}) f32, " \
            f"{int(c.get('layers', 0))} layers" if c else "the chapter's workload"
    if ctx.device != "cuda":
        na = "needs a GPU: on the CPU streams run work as it is issued, nothing overlaps"
        return [Row("ch12 two-stream speed-up over one stream (C)", None, None, "x", na=na,
                    rid="ch12.two_stream_speedup_c"),
                Row("ch12 two-stream pipelines/s: C / PyTorch", None, None, "pipelines/s", 0.90, na=na,
                    rid="ch12.two_stream"),
                Row("ch12 serial pipelines/s on the CPU: C / PyTorch (informational)",
                    Fig("c", per_second("serial_ms"), "C (events on the host clock)"),
                    Fig("py", per_second("serial_ms"), "PyTorch (time.perf_counter)"), "pipelines/s",
                    note=f"{shape}; what this row measures on the CPU: the chunks' matrix products "
                         "and a memcpy each, one after the other", rid="ch12.serial")]
    return [Row("ch12 two-stream speed-up over one stream (C, informational)",
                Fig("c", per_second("two_stream_ms"), "two streams"),
                Fig("c", per_second("serial_ms"), "one stream"), "pipelines/s", gated=False,
                note=f"{shape}; up to 2 when copy and compute take as long", rid="ch12.two_stream_speedup_c"),
            Row("ch12 two-stream speed-up over one stream (PyTorch, informational)",
                Fig("py", per_second("two_stream_ms"), "two streams"),
                Fig("py", per_second("serial_ms"), "one stream"), "pipelines/s", gated=False,
                rid="ch12.two_stream_speedup_py"),
            Row("ch12 two-stream pipelines/s: C / PyTorch",
                Fig("c", per_second("two_stream_ms"), "C"), Fig("py", per_second("two_stream_ms"), "PyTorch"),
                "pipelines/s", 0.90, note="the same chunks, cuBLAS and pinned copies on both sides",
                rid="ch12.two_stream"),
            Row("ch12 serial pipelines/s: C / PyTorch",
                Fig("c", per_second("serial_ms"), "C"), Fig("py", per_second("serial_ms"), "PyTorch"),
                "pipelines/s", 0.90, rid="ch12.serial")]


def plan_ch11(ctx):
    return [], []  # the chapter's own sizes: batch 128, 3 rounds of 10 steps each way (--quick: 32, 2 of 3)


def rows_ch11(ctx, c, py):
    note = "the fastest of the rounds of each kind; profiler on: CPU, shapes, memory" + \
        (" and CUDA" if ctx.device == "cuda" else "")
    return [Row("ch11 steps/s profiled / unprofiled: C ct_profiler / torch.profiler",
                Fig("c", val("profiled_speed"), "C under ct_profiler"),
                Fig("py", val("profiled_speed"), "PyTorch under torch.profiler"), "x", 1.0, note=note,
                rid="ch11.profiler_overhead"),
            Row("ch11 C: steps/s profiled / unprofiled (informational)",
                Fig("c", val("profiled_speed"), "profiled"), Fig("c", lambda m: 1.0, "unprofiled"), "x",
                gated=False, note="1 = no overhead", rid="ch11.c_profiled"),
            Row("ch11 PyTorch: steps/s profiled / unprofiled (informational)",
                Fig("py", val("profiled_speed"), "profiled"), Fig("py", lambda m: 1.0, "unprofiled"), "x",
                gated=False, note="1 = no overhead", rid="ch11.py_profiled")]


def plan_ch10(ctx):
    return [], []


def per_second_at(ms_key, n):
    """1000 / key's entry (milliseconds per step) at timing width n: steps/s."""
    get_ms = at(ms_key, "timing_widths", n)

    def get(m):
        v = get_ms(m)
        return 1e3 / v if v and v > 0 else None
    return get


def rows_ch10(ctx, c, py):
    widths = [int(w) for w in (c.get("timing_widths") or py.get("timing_widths") or []) if finite(w)]
    if not widths:
        return [Row("ch10 graph replay / eager steps/s", None, None, "steps/s", 2.0, na="no timing in the run",
                    rid="ch10.replay_vs_eager")]
    w0, w1 = widths[0], widths[-1]
    cuda = ctx.device == "cuda"
    no_graphs = "PyTorch has no CPU graphs (torch.cuda.graphs needs a CUDA device): no number to compare"
    rows = [Row(f"ch10 replay / eager steps/s at width {w0}, the launch-bound end (C)",
                Fig("c", per_second_at("replay_ms", w0), "C replay"),
                Fig("c", per_second_at("eager_ms", w0), "C eager"), "steps/s", 2.0 if cuda else None,
                gated=False, note="the goal is set for an H100" if cuda else
                "informational on the CPU: a replay saves the dispatcher's work, not launches",
                rid="ch10.replay_vs_eager", at=f"width {w0}"),
            Row(f"ch10 replay / eager steps/s at width {w1} (C, informational)",
                Fig("c", per_second_at("replay_ms", w1), "C replay"),
                Fig("c", per_second_at("eager_ms", w1), "C eager"), "steps/s", gated=False,
                note="near 1 where the arithmetic dominates", rid="ch10.replay_vs_eager_wide", at=f"width {w1}")]
    if cuda:
        rows.append(Row(f"ch10 C replay / PyTorch torch.cuda.graphs replay steps/s at width {w0}",
                        Fig("c", per_second_at("replay_ms", w0), "C ct_cuda_graph_replay"),
                        Fig("py", per_second_at("replay_ms", w0), "g.replay()"), "steps/s", 1.0,
                        rid="ch10.replay_vs_torch_graphs", at=f"width {w0}"))
        if any(finite(x) for x in (py.get("compile_ms") or [])):
            rows.append(Row(f"ch10 C replay / torch.compile(mode=\"reduce-overhead\") steps/s at width {w0} "
                            "(informational)",
                            Fig("c", per_second_at("replay_ms", w0), "C replay"),
                            Fig("py", per_second_at("compile_ms", w0), "torch.compile"), "steps/s",
                            rid="ch10.replay_vs_compile", at=f"width {w0}"))
        else:
            rows.append(Row("ch10 C replay / torch.compile(mode=\"reduce-overhead\")", None, None, "steps/s",
                            na="the twin's PyTorch has no torch.compile", rid="ch10.replay_vs_compile"))
    else:
        rows.append(Row("ch10 C replay / PyTorch graph replay steps/s", None, None, "steps/s", 1.0, na=no_graphs,
                        rid="ch10.replay_vs_torch_graphs"))
    rows.append(Row(f"ch10 C eager / PyTorch eager steps/s at width {w0} (informational)",
                    Fig("c", per_second_at("eager_ms", w0), "C eager"),
                    Fig("py", per_second_at("eager_ms", w0), "PyTorch eager"), "steps/s",
                    rid="ch10.eager_vs_eager", at=f"width {w0}"))
    return rows


def plan_ch13(ctx):
    return [], []  # the same default sizes on both sides (2^24 elements on a CPU, 2^26 on a GPU)


def rows_ch13(ctx, c, py):
    cpu_note = "" if ctx.device == "cuda" else "2 cores share the memory bus with the machine's other work"
    copy = Fig("c", val("copy_gbs"), "ct_copy_ GB/s")   # the ceiling of every GB/s row here
    rows = [Row("ch13 fused gate GB/s / copy GB/s (both C)", Fig("c", val("gate_fused_gbs"), "fused"),
                Fig("c", val("copy_gbs"), "ct_copy_"), "GB/s", 0.80, gated=False, note=cpu_note,
                rid="ch13.gate_fused_vs_copy", ceiling=copy),
            Row("ch13 unfused gate GB/s / copy GB/s (both C, informational)", Fig("c", val("gate_unfused_gbs"), "unfused"),
                Fig("c", val("copy_gbs"), "ct_copy_"), "GB/s", gated=False, rid="ch13.gate_unfused_vs_copy",
                ceiling=copy),
            Row("ch13 fused gelu GB/s / copy GB/s (both C, informational)", Fig("c", val("gelu_fused_gbs"), "fused"),
                Fig("c", val("copy_gbs"), "ct_copy_"), "GB/s", gated=False, rid="ch13.gelu_fused_vs_copy",
                ceiling=copy),
            Row("ch13 fused gate / the unfused chain, elements/s (both C)", Fig("c", val("gate_unfused_ms"), "unfused ms"),
                Fig("c", val("gate_fused_ms"), "fused ms"), "ms", 1.0, gated=False,
                note="the unfused time over the fused: never below 1", rid="ch13.gate_fused_vs_unfused"),
            Row("ch13 fused gelu / the unfused chain, elements/s (both C)", Fig("c", val("gelu_unfused_ms"), "unfused ms"),
                Fig("c", val("gelu_fused_ms"), "fused ms"), "ms", 1.0, gated=False,
                note="the unfused time over the fused: at least 1", rid="ch13.gelu_fused_vs_unfused"),
            Row("ch13 gate speed-up, measured / the bytes' ratio (C, informational)",
                Fig("c", val("gate_speedup"), "measured"), Fig("c", val("gate_predicted_speedup"), "predicted"), "x",
                gated=False, note="1 where the time follows the bytes", rid="ch13.gate_speedup")]
    kind = str(py.get("fused_kind") or "")
    na = None if kind and not kind.startswith("none") else f"the twin has no fused path here: {kind or 'not run'}"
    rows.append(Row("ch13 fused gate GB/s: C / PyTorch fused", Fig("c", val("gate_fused_gbs"), "ct_jit"),
                    Fig("py", val("gate_fused_gbs"), kind.split(" ")[0] or "PyTorch"), "GB/s",
                    0.90 if ctx.device == "cuda" else None, na=na, rid="ch13.fused_vs_torch", ceiling=copy))
    rows.append(Row("ch13 unfused gate GB/s: C ops / PyTorch eager (informational)",
                    Fig("c", val("gate_unfused_gbs"), "C ops"), Fig("py", val("gate_unfused_gbs"), "eager"), "GB/s",
                    rid="ch13.unfused_vs_eager", ceiling=copy))
    return rows


def plan_ch14(ctx):
    """Both sides from the same initial weights and windows: C writes them (--save-init) in each
    run before the twin reads them (--load-init); on a GPU the larger preset."""
    init = os.path.join(ctx.work, "ch14_init.safetensors")
    size = ["--preset", "gpu"] if ctx.device == "cuda" else []
    steps = [] if ctx.quick else ["--max-iters", "200", "--eval-interval", "100"]
    return size + steps + ["--save-init", init], size + steps + ["--load-init", init, "--compile"]


def rows_ch14(ctx, c, py):
    size = "--preset gpu" if ctx.device == "cuda" else "the default CPU model"
    note = f"{size}, {'--quick' if ctx.quick else '200 steps'}, the same initial weights and windows"
    rows = [Row("ch14 GPT training tokens/s: C / PyTorch eager",
                Fig("c", val("tokens_per_s_steady"), "C"), Fig("py", val("tokens_per_s_steady"), "PyTorch eager"),
                "tokens/s", 1.0, note=note + "; after the first 10 steps", rid="ch14.tokens"),
            Row("ch14 GPT validation loss after the same steps: PyTorch eager / C (informational)",
                Fig("py", last("val_loss"), "PyTorch eager"), Fig("c", val("final_val_loss"), "C"), "nats",
                note=note + "; 1 when both trained the same model, below 1 where C's loss is higher",
                rid="ch14.val_loss"),
            Row("ch14 GPT model GFLOP/s / ct_mm GFLOP/s, the same run (C, informational)",
                Fig("c", val("model_gflops_per_s"), "model FLOPs after the first 10 steps"),
                Fig("c", val("matmul_ceiling_gflops"), "ct_mm ceiling"), "GFLOP/s", 0.5, gated=False,
                note=note + "; the exact matrix-product count; the ceiling measured in the same run",
                rid="ch14.ceiling_fraction")]
    if py.get("compiled"):
        rows.append(Row("ch14 GPT training tokens/s: C / torch.compile",
                        Fig("c", val("tokens_per_s_steady"), "C"), Fig("py", val("compile_tokens_per_s"), "torch.compile"),
                        "tokens/s", 1.0, note=note + "; the compiling steps left out", rid="ch14.tokens_vs_compile"))
        rows.append(Row("ch14 GPT validation loss: torch.compile / C (informational)",
                        Fig("py", val("compile_val_loss"), "torch.compile"), Fig("c", val("final_val_loss"), "C"),
                        "nats", note=note, rid="ch14.val_loss_compile"))
    else:
        why = f"the twin's PyTorch ({py.get('torch', 'not run')}) has no torch.compile"
        rows.append(Row("ch14 GPT training tokens/s: C / torch.compile", None, None, "tokens/s", 1.0, na=why,
                        rid="ch14.tokens_vs_compile"))
    return rows


PLANS = {"ch02": (plan_ch02, rows_ch02), "ch04": (plan_ch04, rows_ch04), "ch05": (plan_ch05, rows_ch05),
         "ch06": (plan_ch06, rows_ch06), "ch07": (plan_ch07, rows_ch07), "ch08": (plan_ch08, rows_ch08),
         "ch09": (plan_ch09, rows_ch09), "ch10": (plan_ch10, rows_ch10), "ch11": (plan_ch11, rows_ch11),
         "ch12": (plan_ch12, rows_ch12),
         "ch13": (plan_ch13, rows_ch13), "ch14": (plan_ch14, rows_ch14)}


# ---- running --------------------------------------------------------------------------------------

class Ctx:
    pass


# ---- the row catalog ------------------------------------------------------------------------------
# Every row this bench can report, per device, known without running anything: each target's
# rows function called on stand-in metrics that hold every key a row's presence depends on (the
# sizes, the timing widths, the twin's torch.compile and fused path). The book's performance
# appendix lists the GPU rows from it where no GPU recording exists yet, and its test checks that
# every row id has its explanation in book/performance.json.

PROBE_METRICS = {"sizes_bytes": [1 << 28], "gpu_sizes": [4096], "cpu_sizes": [2048], "timing_widths": [64, 4096],
                 "compile_ms": [1.0, 1.0], "fused_kind": "stand-in", "compiled": True}


def row_catalog():
    """[{id, device, chapter, target, unit, goal, op, ceiling}], one per row id and device
    ("cpu", "cuda"), in the report's order; id is None for a row written without one."""
    out, seen = [], set()
    for device in ("cpu", "cuda"):
        ctx = Ctx()
        ctx.device, ctx.quick, ctx.threads, ctx.work, ctx.gpu = device, False, 2, ".", None
        ctx.compile_ok, ctx.torch = True, "2"
        for tag in TARGETS:
            for row in PLANS[tag][1](ctx, dict(PROBE_METRICS), dict(PROBE_METRICS)):
                key = (row.rid or row.target, device)
                if key in seen:
                    continue
                seen.add(key)
                out.append({"id": row.rid, "device": device, "chapter": tag, "target": row.target,
                            "unit": row.unit, "goal": row.goal, "op": row.op, "ceiling": row.ceiling is not None})
    return out


def chapter_twin(tag):
    import glob
    hits = sorted(glob.glob(os.path.join(ROOT, "chapters", f"{tag}_*", f"{tag}_pytorch.py")))
    return hits[0] if hits else None


def run_one(ctx, tag, side, argv, env_extra, run_no, time_left):
    """Runs one program; returns a dict with its command, status and metrics."""
    base = os.path.join(ctx.work, f"{tag}-{side}-{run_no}")
    mpath = base + ".json"
    try:
        os.unlink(mpath)
    except OSError:
        pass
    argv = argv + ["--metrics", mpath]
    env = dict(os.environ)
    env.update(env_extra)
    if tag == "ch08":  # two ranks share the threads, as tools/launch would share them
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[k] = str(max(1, ctx.threads // 2))
    timeout = min(ctx.timeout, time_left) if time_left is not None else ctx.timeout
    shown = " ".join(f"{k}={v}" for k, v in env_extra.items()) + " " + " ".join(shlex.quote(a) for a in argv)
    rec = {"target": tag, "side": side, "run": run_no, "command": shown.strip(), "log": base + ".log",
           "load_before": loadavg()}
    t0 = time.monotonic()
    with open(base + ".log", "w", encoding="utf-8") as out:
        try:
            # Its own process group, so that a timeout also ends the program's children (the
            # twins' DataLoader workers).
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ctx.work,
                                 start_new_session=True)
            try:
                rec["rc"] = p.wait(timeout=max(1, timeout))
            except BaseException:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
                raise
        except subprocess.TimeoutExpired:
            rec["rc"] = 124
            if time_left is not None and time_left < ctx.timeout:
                rec["deadline_hit"] = True
                rec["error"] = f"stopped at the deadline after {timeout:.0f} s"
            else:
                rec["error"] = f"timed out after {timeout:.0f} s"
        except OSError as e:
            rec["rc"] = 127
            rec["error"] = f"cannot run: {e}"
    rec["seconds"] = round(time.monotonic() - t0, 2)
    rec["load_after"] = loadavg()
    if rec["rc"] == 0:
        try:
            rec["metrics"] = read_metrics(mpath)
        except (OSError, ValueError) as e:
            rec["rc"] = -1
            rec["error"] = f"no readable metrics ({e})"
    elif "error" not in rec:
        rec["error"] = f"exit status {rec['rc']}"
    if rec["rc"] != 0:
        try:
            with open(base + ".log", encoding="utf-8", errors="replace") as f:
                rec["tail"] = "".join(f.readlines()[-15:]).rstrip()
        except OSError:
            rec["tail"] = ""
    return rec


def side_torch(ctx, fig):
    """The PyTorch version behind a figure: the twins' for their sides, None for C's."""
    return getattr(ctx, "torch", None) if fig is not None and fig.src != "c" else None


def loadavg():
    """/proc/loadavg's 1, 5 and 15 minute load averages (None where unreadable)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def summarize(vals):
    """The figure of a row's column from its runs' values: (median, min, max, spread), spread being
    (max - min) / median, over the finite values; (None, None, None, None) where there is none, and
    spread None with a single value (nothing to compare)."""
    good = [float(v) for v in vals if finite(v)]
    if not good:
        return None, None, None, None
    med, lo, hi = statistics.median(good), min(good), max(good)
    spread = (hi - lo) / med if len(good) >= 2 and med > 0 else None
    return med, lo, hi, spread


SIDE_NAMES = {"c": "C", "py": "twin", "pyc": "twin --compile", "pyo": "twin (--also-python)"}


def torch_has_compile(version):
    """Whether a PyTorch version string names a release with torch.compile (2.0 and later)."""
    m = re.match(r"(\d+)\.", str(version or ""))
    return bool(m) and int(m.group(1)) >= 2


def judge(ctx, row, runs):
    """Fills in a row's figures, ratio and verdict from the runs of its target."""
    out = {"id": row.rid, "at": row.at, "target": row.target, "unit": row.unit, "goal": row.goal, "op": row.op,
           "note": row.note, "a_label": row.a.label if row.a else "", "b_label": row.b.label if row.b else "",
           "a": None, "b": None, "a_runs": [], "b_runs": [], "ratio": None, "ratio_runs": [],
           "ceiling": None, "ceiling_label": row.ceiling.label if row.ceiling else "", "fraction": None,
           # which PyTorch made each column (None for C's own figures)
           "a_torch": side_torch(ctx, row.a), "b_torch": side_torch(ctx, row.b),
           "a_min": None, "a_max": None, "a_spread": None, "b_min": None, "b_max": None, "b_spread": None,
           "unstable": False}
    if row.na:
        out["met"] = "n/a"
        out["note"] = row.na + (f"; {row.note}" if row.note else "")
        return out
    for fig, k in ((row.a, "a"), (row.b, "b")):
        vals = []
        for r in runs.get(fig.src, []):
            m = r.get("metrics")
            vals.append(fig.get(m) if m else None)
        out[f"{k}_runs"] = vals
        out[k], out[f"{k}_min"], out[f"{k}_max"], out[f"{k}_spread"] = summarize(vals)
    if finite(out["a"]) and finite(out["b"]) and out["b"] > 0:
        out["ratio"] = out["a"] / out["b"]
    if row.ceiling:  # the device's limit for the C figure: the median of the runs, as the figures are
        good = [v for v in (row.ceiling.get(r["metrics"]) for r in runs[row.ceiling.src] if r.get("metrics"))
                if finite(v) and v > 0]
        out["ceiling"] = statistics.median(good) if good else None
        if finite(out["a"]) and out["ceiling"]:
            out["fraction"] = out["a"] / out["ceiling"]
    # Run i of one program against run i of the other (adjacent in time), for the record.
    # The informational column of --also-python: the same getter over that Python's twin runs.
    out["b_also"] = out["b_also_torch"] = out["ratio_also"] = None
    if row.b is not None and row.b.src == "py" and runs.get("pyo"):
        vals = [row.b.get(r["metrics"]) if r.get("metrics") else None for r in runs["pyo"]]
        out["b_also"] = summarize(vals)[0]
        out["b_also_torch"] = getattr(ctx, "torch_also", None)
        if finite(out["a"]) and finite(out["b_also"]) and out["b_also"] > 0:
            out["ratio_also"] = out["a"] / out["b_also"]
    out["ratio_runs"] = [x / y if finite(x) and finite(y) and y > 0 else None
                         for x, y in zip(out["a_runs"], out["b_runs"])]
    mismatch = runs.get("mismatch") if row.gated and row.a.src != row.b.src else None
    wide = [f"{fig.label} {out[k + '_min']:.4g}..{out[k + '_max']:.4g} ({100 * out[k + '_spread']:.0f}%)"
            for fig, k in ((row.a, "a"), (row.b, "b"))
            if out[f"{k}_spread"] is not None and out[f"{k}_spread"] > UNSTABLE_SPREAD]
    out["unstable"] = bool(wide)
    if row.goal is None:
        out["met"] = "-"
    elif mismatch:
        out["met"] = "n/a"
        out["note"] = mismatch + (f"; {row.note}" if row.note else "")
    elif out["ratio"] is None:
        out["met"] = "n/a"
        out["note"] = "not measured" + (f"; {row.note}" if row.note else "")
    elif wide:
        judge_wide(row, out, wide)
    else:
        out["met"] = "yes" if meets(row, out["ratio"]) else "no"
    return out


def meets(row, ratio):
    return ratio >= row.goal if row.op == ">=" else ratio > row.goal


def judge_wide(row, out, wide):
    """A row whose runs spread too far: judged all the same when every paired run (run i of one
    program against run i of the other, adjacent in time, so a slow phase of the machine slows
    both) gives the same verdict; unstable, not judged, when the paired runs fall on both sides."""
    paired = out["ratio_runs"]
    spread = f"the runs spread over more than {100 * UNSTABLE_SPREAD:.0f}% of the median ({'; '.join(wide)})"
    verdicts = {meets(row, x) for x in paired} if paired and all(finite(x) for x in paired) else set()
    if len(verdicts) == 1:
        ok = verdicts.pop()
        out["met"] = "yes" if ok else "no"
        out["note"] = (f"{'met' if ok else 'missed'} in every one of the {len(paired)} paired runs "
                       f"({', '.join(f'{x:.3g}' for x in paired)}), though {spread}") + (
                           f"; {row.note}" if row.note else "")
        return
    out["met"] = "unstable"
    out["note"] = f"unstable, not judged: {spread}" + (f"; {row.note}" if row.note else "")


def mismatch_of(ctx, c, py):
    """Why C and twin did not run under the same conditions, or None."""
    dc, dp = str(c.get("device", "")), str(py.get("device", ""))
    if dc and dp and dc.split(":")[0] != dp.split(":")[0]:
        return f"devices differ (C {dc}, PyTorch {dp})"
    tc, tp = c.get("threads"), py.get("threads")
    if ctx.device == "cpu" and finite(tc) and finite(tp) and int(tc) != int(tp):
        return f"thread counts differ (C {int(tc)}, PyTorch {int(tp)})"
    return None


# ---- output ---------------------------------------------------------------------------------------

def goal_str(r):
    return f"{r['op']} {r['goal']:.2f}" if r["goal"] is not None else "-"


def fig_str(r, k):
    v = r[k]
    if not finite(v):
        return "-"
    label = r[f"{k}_label"]
    ver = r.get(f"{k}_torch")
    if ver:
        label = f"{label}; torch {ver}" if label else f"torch {ver}"
    return f"{fmt(v, r['unit'])} ({label})" if label else fmt(v, r["unit"])


def print_table(rows):
    head = ("target", "C", "PyTorch / reference", "ratio", "goal", "met")
    data = [(r["target"], fig_str(r, "a"), fig_str(r, "b"), f"{r['ratio']:.3f}" if finite(r["ratio"]) else "-",
             goal_str(r), r["met"]) for r in rows]
    w = [max(len(x[i]) for x in [head] + data) for i in range(len(head))]
    line = "  ".join(f"{{:<{w[i]}}}" if i < 3 else f"{{:>{w[i]}}}" for i in range(len(head)))
    print(line.format(*head))
    print("  ".join("-" * x for x in w))
    for d in data:
        print(line.format(*d))



def md_facts(p, info):
    """The report's title and its table of facts."""
    p.append(f"# Bench: {info['device_desc']} ({info['date']})")
    p.append("")
    p.append("Written by `tools/bench`; nothing here is typed by hand. Speed targets are measured here as "
             "ratios against PyTorch run on the same machine in the same session, never as timed "
             "assertions in tests.")
    p.append("")
    p.append("| | |")
    p.append("|---|---|")
    facts = [("Device", info["device_desc"]),
             ("Host CPU", f"{info['cpu']} x {info['ncpu']}"),
             ("Date", info["date"]),
             ("Commit", info["commit"]),
             ("Threads", f"{info['threads']}: OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = MKL_NUM_THREADS = "
                         f"{info['threads']} for every program; the twins' torch threads as each reports "
                         f"(ch05 `--threads {info['threads']}`; ch06 sets `os.cpu_count()` itself)"),
             ("PyTorch", f"{info['torch'] or 'not importable'} ({info['python']})"),
             ("Build", info["build"]),
             ("Mode", "--quick (sizes smaller than the goals name: a smoke run, not a record)"
              if info["quick"] else "full sizes"),
             ("Runs", f"each program {info['runs']} times, C and twin interleaved, every target once before "
                      "any runs again; each figure is the median of the runs, and a row whose C or PyTorch "
                      f"runs spread over more than {100 * UNSTABLE_SPREAD:.0f}% of their median "
                      "((max - min) / median) is marked unstable, not judged"
                      + ("" if info["runs"] >= 3 else "; fewer than 3 runs: a smoke run, not a record")),
             ("Load average (1 min)", f"{info['load_start']:.2f} at the start, {info['load_end']:.2f} at the end "
                                      f"({info['ncpu']} CPUs)"),
             ("Bench time", f"{info['seconds']:.0f} s"),
             ("Result", info["result"])]
    for k, v in facts:
        p.append(f"| {k} | {cell(v)} |")


def md_targets(p, info, rows):
    """The targets' table, and the informational one against --also-python."""
    p.append("")
    p.append("## Targets")
    p.append("")
    p.append("| target | C | PyTorch / reference | ratio | goal | met |")
    p.append("|---|---:|---:|---:|---:|:---:|")
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if finite(r["ratio"]) else "-"
        p.append(f"| {cell(r['target'])} | {cell(fig_str(r, 'a'))} | {cell(fig_str(r, 'b'))} | {ratio} | "
                 f"{cell(goal_str(r))} | {r['met']} |")
    p.append("")
    p.append("met: yes / no against the goal; n/a where this run cannot judge it (why in the notes); "
             "unstable where the runs spread too far to judge; - where the row has no goal (shown for context). "
             "Each PyTorch figure names the PyTorch that made it.")
    p.append("")
    also = [r for r in rows if r.get("b_also") is not None]
    if also:
        p.append(f"## Against PyTorch {also[0]['b_also_torch']} (informational, `--also-python`)")
        p.append("")
        p.append(f"The same twins, eager, under `{info.get('also_python')}`; the goals are judged against the "
                 "table above.")
        p.append("")
        p.append(f"| target | C | PyTorch {also[0]['b_also_torch']} | ratio |")
        p.append("|---|---:|---:|---:|")
        for r in also:
            q = f"{r['ratio_also']:.3f}" if finite(r["ratio_also"]) else "-"
            p.append(f"| {cell(r['target'])} | {fmt(r['a'], r['unit'])} | {fmt(r['b_also'], r['unit'])} | {q} |")
        p.append("")


def md_notes(p, info, rows, runs_all, notes):
    """The notes, and the commands that made every figure."""
    row_notes = [(r["target"], r["note"]) for r in rows if r["note"]]
    p.append("## Notes")
    p.append("")
    for n in notes:
        p.append(f"- {n}")
    for t, n in row_notes:
        p.append(f"- {t}: {n}.")
    p.append("- How each figure is made: ch02 GB/s are the chapter's medians of timed copies (events) at each "
             "size; ch04 GFLOP/s are the chapter's medians of timed products after a check against float64; "
             "ch05 steps/s is the chapter's median epoch after the first; ch06 images/s is the median of the "
             "epochs after the first (training only, evaluation excluded). Then the better of the runs.")
    p.append("")
    p.append("## Commands")
    p.append("")
    p.append(f"Run from `{info['work']}` (each run writes its own `--metrics` file there, "
             "`<target>-<c|py>-<run>.json`, and its output to the matching `.log`).")
    p.append("")
    p.append("```sh")
    p.append(info["argv"])
    for r in runs_all:
        status = "ok" if r["rc"] == 0 else r.get("error", "failed")
        lb, la = r.get("load_before"), r.get("load_after")
        load = f", load {lb[0]:.2f} -> {la[0]:.2f}" if lb and la else ""
        p.append(f"# {r['target']} {r['side']} run {r['run']}: {status}, {r['seconds']:.1f} s{load}")
        p.append(r["command"])
    p.append("```")


def md_runs(p, info, rows, runs_all):
    """What the deadline left out, the failed runs' output, and every run's figures."""
    skipped = info.get("skipped") or []
    if skipped:
        p.append("")
        p.append("Not run (deadline): " + ", ".join(skipped) + ".")
    failed = [r for r in runs_all if r["rc"] != 0]
    if failed:
        p.append("")
        p.append("## Failures")
        for r in failed:
            p.append("")
            p.append(f"### {r['target']} {r['side']} run {r['run']}: {r.get('error', 'failed')}")
            p.append("")
            p.append("```")
            p.append(r.get("tail", ""))
            p.append("```")
    p.append("")
    p.append("<details><summary>Every run's figures</summary>")
    p.append("")
    p.append("| target | C, per run (min..max) | PyTorch / reference, per run (min..max) | ratio, per run |")
    p.append("|---|---|---|---|")
    for r in rows:
        if r["met"] == "n/a" and not r["a_runs"]:
            continue
        a = ", ".join(fmt(v) for v in r["a_runs"]) or "-"
        b = ", ".join(fmt(v) for v in r["b_runs"]) or "-"
        if r.get("a_spread") is not None:
            a += f" ({fmt(r['a_min'])}..{fmt(r['a_max'])}, {100 * r['a_spread']:.0f}%)"
        if r.get("b_spread") is not None:
            b += f" ({fmt(r['b_min'])}..{fmt(r['b_max'])}, {100 * r['b_spread']:.0f}%)"
        q = ", ".join(f"{v:.3f}" if finite(v) else "-" for v in r.get("ratio_runs", [])) or "-"
        p.append(f"| {cell(r['target'])} | {a} | {b} | {q} |")
    p.append("")
    p.append("</details>")


def write_report(path, info, rows, runs_all, notes):
    p = []
    md_facts(p, info)
    md_targets(p, info, rows)
    md_notes(p, info, rows, runs_all, notes)
    md_runs(p, info, rows, runs_all)
    text = "\n".join(p) + "\n"
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"

    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        return x
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(clean(obj), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


# ---- main -----------------------------------------------------------------------------------------

def positive_int(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f'expects a positive integer, got "{text}"')
    return int(text)


def positive_float(text):
    try:
        v = float(text)
    except ValueError:
        v = -1
    if not v > 0:
        raise argparse.ArgumentTypeError(f'expects a positive number of seconds, got "{text}"')
    return v


def target_list(text):
    got = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in got if t not in TARGETS]
    if bad or not got:
        raise argparse.ArgumentTypeError(f"expects a comma-separated list of {','.join(TARGETS)}, got \"{text}\"")
    return [t for t in TARGETS if t in got]


def parse_args(argv):
    usage = __doc__.split("\n\n")[1].replace("usage: ", "", 1)
    p = argparse.ArgumentParser(prog="tools/bench", usage=usage, add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("--build", metavar="DIR", default=os.environ.get("CT_BUILD_DIR") or os.path.join(ROOT, "build"),
                   help="build folder with ch02..ch13 built (default: $CT_BUILD_DIR, else build/)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="auto: cuda when nvidia-smi lists a GPU, else cpu (default: auto)")
    p.add_argument("--quick", action="store_true", help="every program with --quick (a smoke run)")
    p.add_argument("--only", type=target_list, default=list(TARGETS), metavar="LIST",
                   help="comma-separated targets (default: ch02,ch04,ch05,ch06,ch07,ch08,ch09,ch10,ch11,ch12,ch13)")
    p.add_argument("--out", metavar="FILE.md", help="the Markdown report "
                   "(default: book/recorded/bench-<device-slug>-<UTC date>.md)")
    p.add_argument("--out-dir", metavar="DIR", help="the report under its default name in DIR")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON (default: none)")
    p.add_argument("--also-python", metavar="PATH",
                   help="also run every twin under this Python (e.g. /usr/bin/python3: Debian's torch 1.13) "
                        "for an informational column (default: none)")
    p.add_argument("--python", metavar="PATH",
                   help=f"the Python with torch that runs the twins (default: {DEFAULT_PYTHON}, "
                        "else python3 on PATH)")
    p.add_argument("--threads", type=positive_int, help="thread count for every program "
                   "(default: the CPUs this process may use)")
    p.add_argument("--runs", type=positive_int, default=3, help="runs of each program (default 3)")
    p.add_argument("--timeout", type=positive_float, default=900.0, help="seconds per program run (default 900)")
    p.add_argument("--deadline", type=positive_float, help="start no run after this many seconds (default: none, run everything)")
    p.add_argument("--work", metavar="DIR", help="logs and metrics of every run (default: BUILD/bench)")
    p.add_argument("--note", action="append", default=[], metavar="TEXT", help="a line for the report's notes")
    p.add_argument("--list-rows", action="store_true", help="print the row catalog as JSON and exit")
    a = p.parse_args(argv)
    if a.out and a.out_dir:
        p.error("--out and --out-dir exclude each other")
    if a.help:
        print(__doc__.strip())
        sys.exit(0)
    if a.list_rows:
        json.dump(row_catalog(), sys.stdout, indent=1)
        print()
        sys.exit(0)
    return a


def pick_device(ctx, a):
    """Sets ctx.device and ctx.gpu from --device and nvidia-smi: (cpu model, CPUs, slug, words)."""
    gpus = gpu_names()
    if a.device == "auto":
        ctx.device = "cuda" if gpus else "cpu"
    else:
        ctx.device = a.device
    if ctx.device == "cuda" and not gpus:
        log("--device cuda: nvidia-smi lists no GPU; the runs will say what is wrong")
    ctx.gpu = gpus[0] if gpus else None
    model, ncpu = cpu_model(), os.cpu_count() or 1
    if ctx.device == "cuda":
        dev_slug = slug(ctx.gpu or "cuda")
        device_desc = f"cuda: {ctx.gpu or 'unknown GPU'}"
    else:
        dev_slug = cpu_slug(model)
        device_desc = f"cpu: {model} ({ncpu} CPUs)"
    return model, ncpu, dev_slug, device_desc


def pick_python(ctx, a, penv):
    """The PyTorch the twins run on (sets a.python when not given) and the informational one:
    (torch version or None, whether it has CUDA or why it cannot run)."""
    if a.python:
        torch_ver, torch_cuda = probe_torch(a.python, penv)
    else:
        # The PyTorch 2.x venv (tools/bootstrap --group torch2) where it exists; else Debian's
        # /usr/bin/python3 (python3-torch 1.13) here; on the lent GPU machine that one has no
        # torch and `python3` on PATH (/opt/torch/.venv) has it.
        on_path = shutil.which("python3")
        tried = ([TORCH2_PYTHON] if os.access(TORCH2_PYTHON, os.X_OK) else []) + [DEFAULT_PYTHON] + \
            ([on_path] if on_path and on_path != DEFAULT_PYTHON else [])
        probes = []
        for py in tried:
            probes.append((py,) + probe_torch(py, penv))
            if probes[-1][1] is not None:
                break
        a.python, torch_ver, torch_cuda = next((x for x in probes if x[1] is not None), probes[0])
    if torch_ver is None:
        log(f"the twins cannot run: {torch_cuda}")
    else:
        log(f"PyTorch {torch_ver} ({a.python}), cuda {'available' if torch_cuda else 'unavailable'}")
    ctx.torch = torch_ver
    ctx.compile_ok = torch_has_compile(torch_ver)
    ctx.torch_also = None
    if a.also_python:
        ctx.torch_also, why = probe_torch(a.also_python, penv)
        if ctx.torch_also is None:
            log(f"--also-python: {why}; no informational column")
        else:
            log(f"also PyTorch {ctx.torch_also} ({a.also_python}), eager only, informational")
    return torch_ver, torch_cuda


def plan_programs(ctx, a, build):
    """What to run: per target, the C program and its twin ({tag: {side: argv}}, [problems])."""
    progs, problems = {}, []
    for tag in a.only:
        c_bin = os.path.join(build, tag)
        twin = chapter_twin(tag)
        c_extra, py_extra = PLANS[tag][0](ctx)
        common = ["--device", ctx.device] + (["--quick"] if a.quick else [])
        if not (os.path.isfile(c_bin) and os.access(c_bin, os.X_OK)):
            problems.append(f"{tag}: {c_bin} is not built (build the chapter first; tools/bench builds nothing)")
            continue
        if twin is None:
            problems.append(f"{tag}: no chapters/{tag}_*/{tag}_pytorch.py")
            continue
        progs[tag] = {"c": [c_bin] + common + c_extra,
                      "py": [a.python, twin] + common + py_extra}
        if tag in COMPILE_SIDE and ctx.compile_ok:
            progs[tag]["pyc"] = [a.python, twin] + common + py_extra + ["--compile"]
        if ctx.torch_also:
            # eager only: the plan as for a PyTorch without torch.compile
            keep = ctx.compile_ok
            ctx.compile_ok = False
            also_extra = PLANS[tag][0](ctx)[1]
            ctx.compile_ok = keep
            progs[tag]["pyo"] = [a.also_python, twin] + common + [x for x in also_extra if x != "--compile"]
    return progs, problems


def run_programs(ctx, a, progs, env_threads, t_start):
    """Each program a.runs times, in turns, until the deadline: ({tag: {side: [run]}}, [run], [skipped])."""
    runs = {tag: {side: [] for side in progs[tag]} for tag in progs}
    runs_all, skipped = [], []
    for run_no in range(1, a.runs + 1):
        for tag in progs:
            for side in progs[tag]:
                left = None
                if a.deadline:
                    left = a.deadline - (time.monotonic() - t_start)
                    if left < 5:
                        skipped.append(f"{tag} {side} run {run_no}")
                        continue
                log(f"{tag} {SIDE_NAMES[side]} run {run_no}/{a.runs}")
                rec = run_one(ctx, tag, side, progs[tag][side], env_threads, run_no, left)
                if rec["rc"] != 0:
                    log(f"{tag} {side} run {run_no}: {rec.get('error')}; log: {rec['log']}")
                runs[tag][side].append(rec)
                runs_all.append(rec)
    return runs, runs_all, skipped


def judge_rows(ctx, a, progs, runs):
    """The report's rows: each target's plan applied to its first good runs, judged."""
    rows = []
    for tag in a.only:
        if tag not in progs:
            continue
        c = first_metrics(runs[tag]["c"])
        py = first_metrics(runs[tag]["py"])
        rr = dict(runs[tag])
        rr["mismatch"] = mismatch_of(ctx, c, py) if c and py else None
        for row in PLANS[tag][1](ctx, c, py):
            rows.append(judge(ctx, row, rr))
    return rows


def outcome(rows, progs, runs, runs_all, problems, skipped):
    """(exit status, the result line); adds the runs the deadline stopped to skipped."""
    failed = [r for r in runs_all if r["rc"] != 0 and not r.get("deadline_hit")]
    skipped += [f"{r['target']} {r['side']} run {r['run']} (stopped)" for r in runs_all if r.get("deadline_hit")]
    no_run = [tag for tag in progs
              if not all(any(r["rc"] == 0 for r in runs[tag][side]) for side in progs[tag])]
    compared = [r for r in rows if finite(r["ratio"])]
    if failed or problems:
        status = 1
    elif no_run:
        status = 3
    elif not compared:
        status = 1
    else:
        status = 0
    result = {0: "all runs completed", 1: "FAILED: a run failed or nothing could be compared",
              3: "INCOMPLETE: the deadline left targets without a run"}[status]
    met = [r for r in rows if r["met"] in ("yes", "no")]
    result += f"; goals met: {sum(r['met'] == 'yes' for r in met)} of {len(met)} judged"
    unstable = sum(r["met"] == "unstable" for r in rows)
    if unstable:
        result += f"; {unstable} unstable (the runs spread over {100 * UNSTABLE_SPREAD:.0f}%: not judged)"
    return status, result


def report_notes(ctx, a, progs, runs, rows, problems, torch_ver, torch_cuda):
    """The notes under the report's table: --note, problems, mismatches, settings."""
    notes = list(a.note) + problems
    for tag in progs:
        c = first_metrics(runs[tag]["c"])
        py = first_metrics(runs[tag]["py"])
        mm = mismatch_of(ctx, c, py) if c and py else None
        if mm:
            notes.append(f"{tag}: {mm}")
    if any(r["met"] == "n/a" and "needs a GPU" in r["note"] for r in rows):
        notes.append("Rows marked \"needs a GPU\" are measured by the same command on a lent GPU machine "
                     "(tools/gpu-check runs this bench there).")
    if ctx.device == "cuda" and torch_ver is not None and not torch_cuda:
        notes.append(f"PyTorch {torch_ver} at {a.python} reports no CUDA: the twins cannot run on the GPU")
    if "ch06" in progs:
        st = ch06_settings(ctx)
        i = st.index("--out-dir")
        notes.append("ch06 settings (both programs): `" + " ".join(st[:i] + st[i + 2:]) +
                     (" --quick" if a.quick else "") + "`")
    return notes


def write_outputs(a, out, doc):
    """The JSON beside the Markdown report, --json's copy and CT_BENCH_OUT's copies."""
    # The machine-readable twin of the report, beside it (the book's performance appendix reads it).
    beside = os.path.splitext(out)[0] + ".json"
    write_json(beside, doc)
    log(f"json: {beside}")
    if a.json and os.path.abspath(a.json) != os.path.abspath(beside):
        write_json(a.json, doc)
        log(f"json: {a.json}")
    extra = os.environ.get("CT_BENCH_OUT")
    if extra:
        os.makedirs(extra, exist_ok=True)
        for src in (out, beside):
            copy = os.path.join(extra, os.path.basename(src))
            if not (os.path.exists(copy) and os.path.samefile(src, copy)):
                shutil.copy(src, copy)
        write_json(os.path.join(extra, "bench.json"), doc)


def main(argv):
    a = parse_args(argv)
    t_start = time.monotonic()
    load_start = os.getloadavg()[0]
    ctx = Ctx()
    ctx.quick = a.quick
    ctx.threads = a.threads or len(os.sched_getaffinity(0))
    ctx.timeout = a.timeout
    build = os.path.abspath(a.build)
    ctx.work = os.path.abspath(a.work or os.path.join(build, "bench"))
    os.makedirs(ctx.work, exist_ok=True)

    model, ncpu, dev_slug, device_desc = pick_device(ctx, a)
    now = datetime.datetime.now(datetime.timezone.utc)
    out = a.out or os.path.join(a.out_dir or os.path.join(ROOT, "book", "recorded"),
                                f"bench-{dev_slug}-{now:%Y-%m-%d}{'-quick' if a.quick else ''}.md")

    env_threads = {k: str(ctx.threads) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    penv = dict(os.environ)
    penv.update(env_threads)
    torch_ver, torch_cuda = pick_python(ctx, a, penv)
    log(f"device {device_desc}; {ctx.threads} threads; build {build}; "
        f"{'--quick, ' if a.quick else ''}{a.runs} run(s) of each program")

    progs, problems = plan_programs(ctx, a, build)
    if torch_ver is None:
        problems.append(f"PyTorch is not importable by {a.python}: {torch_cuda}")
        progs = {}
    runs, runs_all, skipped = run_programs(ctx, a, progs, env_threads, t_start)
    rows = judge_rows(ctx, a, progs, runs)
    status, result = outcome(rows, progs, runs, runs_all, problems, skipped)
    notes = report_notes(ctx, a, progs, runs, rows, problems, torch_ver, torch_cuda)
    if ctx.device == "cuda":
        driver = driver_version() or "unknown"
        cuda = f"{build_cuda_version(build) or 'unknown'} (C build), {TORCH_CUDA.get(a.python, 'unknown')} (PyTorch)"
    else:
        driver = cuda = "none (a CPU run)"
    info = {"device": ctx.device, "device_desc": device_desc, "device_slug": dev_slug, "gpu": ctx.gpu,
            "driver": driver, "cuda": cuda, "mode": "quick" if a.quick else "full",
            "cpu": model, "ncpu": ncpu, "date": now.strftime("%Y-%m-%d %H:%M:%S UTC"), "commit": commit_id(),
            "threads": ctx.threads, "torch": torch_ver, "torch_cuda": torch_cuda if torch_ver else None,
            "python": a.python, "also_python": a.also_python if ctx.torch_also else None,
            "torch_also": ctx.torch_also, "build": build, "work": ctx.work, "quick": a.quick, "runs": a.runs,
            "load_start": load_start, "load_end": os.getloadavg()[0],
            "seconds": time.monotonic() - t_start, "result": result, "skipped": skipped,
            "argv": "tools/bench " + " ".join(shlex.quote(x) for x in argv)}

    print()
    print_table(rows)
    print()
    write_report(out, info, rows, runs_all, notes)
    log(f"report: {out}")
    doc = {"schema": "ct-bench/1"}
    doc.update(info)
    doc.update(rows=rows, notes=notes, status=status,
               run_log=[{k: v for k, v in r.items() if k != "metrics"} for r in runs_all])
    write_outputs(a, out, doc)
    for pr in problems:
        log(pr)
    log(result)
    return status


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
