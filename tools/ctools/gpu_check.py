#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/gpu-check: the check of a lent GPU machine (H100/H200), planned to fit one lease.

usage: tools/gpu-check --plan                                 (here: the calls to make)
       CT_COMMIT=<hash> tools/gpu-check --call 1|2 [options]  (on the device machine)
       tools/gpu-check [--report-dir D] --merge DIR|STATE.tar ...   (here, after the calls)
       tools/gpu-check --no-gpu-ok [--build-dir DIR]          (dry run here: walks the plan)
       tools/gpu-check --stage LIST [--deadline S] [options]  (stages by hand)
       tools/gpu-check --digest | --print-env | --probe-sanitizer | --bench-verdict RC JSON

A session is lent 15 minutes of device time in all (the machine's start,
every call, every idle wait and the give-back counted), one command runs at
most 10 minutes, no machine starts with under 4 minutes left, a machine stays
warm 30 s after a call, and the working tree with the carried folders travels
only up to 64 MiB (/work/.library/device/README.md). So the check is planned,
as data (CALLS below), for ONE machine start and at most TWO calls:

  call 1 (timeout_s 540): setup, build (the `sm90` preset, -j of the
         machine's cores), every `gpu`-labelled ctest test (in parallel,
         except the tests that time something, which run one at a time
         after them; among them gpu.chNN_twin_cuda, each PyTorch twin's GPU
         path with the book's flags), the chapters' recordings for the book (tools/record
         --device cuda, in the order the book needs them), the bench rows
         that need a GPU (tools/bench --device cuda, partial allowed);
  call 2 (timeout_s 110, fired as soon as call 1 returns, on the warm
         machine and its build): compute-sanitizer (memcheck and racecheck)
         on ch04's kernels, after a probe that it can attach here.

Each stage has a deadline (seconds from its call's start); it is cut there
(every command in it runs in its own process group, killed at the deadline)
and still writes its results; a stage or a run that did not fit is reported
as "not run". `tools/gpu-check --plan` prints the calls (command, carry,
timeout_s), each stage's deadline and the sum against the lease; --no-gpu-ok
walks the same plan on a machine without a GPU with every stage stubbed out
by its dry-run behaviour (the build configures only, the tests are listed,
the runs are named) and checks the plan's arithmetic and the carry's size
(tools/carry-pack --size).

What each call leaves in $OUT (at most 8 files, as the device tool returns):
build.log, ctest.log, record.log, bench.log, sanitizer.log (those its stages
wrote), gpu-check-<gpu>-<date>-call<N>.md (the call's report),
gpu-check-state.tar (everything the call found, for --merge) and recorded.tar
(the book's files: recorded/chNN-*.txt/.json of the runs that exited 0, the
bench's bench-*.md and .json). Back here, `tools/gpu-check --merge DIR1 DIR2`
(each call's files_at folder or its gpu-check-state.tar, in call order)
writes book/recorded/gpu-check-<gpu>-<date>.md and copies the transcripts and
the bench report into book/recorded/.

The GPU machine has nvcc, CMake, ninja and PyTorch but no cmocka/OpenBLAS/stb
headers and no network: run tools/carry-pack here first and carry
[".carry/debs", ".carry/data"]; setup unpacks the .debs to .carry/root and
points CMake, the compiler and the loader at them; Fashion-MNIST is exported
as CT_FASHION_MNIST_DIR, chapter 14's fortune files as CT_FORTUNES_DIR. The
Python for the twins and the checks is the first of --python, $CT_PYTHON,
`python3` on PATH, /opt/torch/.venv/bin/python3 and /usr/bin/python3 that
imports torch and numpy; CMake gets it as CT_TORCH_PYTHON.

The device tool copies the working tree without .git: pass CT_COMMIT=<hash>
(checked: 7 to 40 hex digits; where .git exists it must name HEAD). The
report also records a digest of the sources (`--digest` prints it here);
--merge refuses to call calls on different sources a pass.

Options:
  --plan            print the plan and check its arithmetic (exit 1 if it does not fit)
  --call N          run call N of the plan (1 or 2)
  --stage LIST      run these stages (setup is always first): build, test,
                    record, bench, sanitizer; with no deadline unless --deadline
  --no-gpu-ok       dry run without a GPU: the plan's arithmetic, then every
                    call's stages by their dry-run behaviour
  --build-dir DIR   the build folder (default build-sm90)
  --python PATH     the Python with torch (default: see above)
  --report-dir D    where the report goes (default: the call's state folder;
                    --merge: book/recorded)
  -j N              build jobs (default: the machine's cores)
  --test-timeout S  each gpu test's limit (default 120; CMake's CT_GPU_TEST_TIMEOUT)
  --deadline S      cut the whole run at S seconds (a repeat with less device time left)
  --merge ...       combine the calls' results here (the rest of the arguments)
  --digest          print the source digest recorded in reports
  --print-env       set up the carried packages and print the environment as `export` lines
  --probe-sanitizer only probe compute-sanitizer: "supported" (exit 0) or
                    "not supported here: REASON" (exit 1)
  --bench-verdict RC JSON   (for tests) the bench phase's verdict, tab-separated

Environment: CT_COMMIT, OUT (a folder that receives the report and logs),
CT_PYTHON, CT_COMPUTE_SANITIZER (default: on PATH or beside nvcc).
Exit status: 0 when no stage failed (a stage cut short, "not run" or
"unsupported" fails nothing: the report's result line names it), 1 when one
did (or, for --plan and --no-gpu-ok, when the plan does not fit), 2 for bad
arguments.
"""
import glob
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import xml.etree.ElementTree as ET

from .text import cell  # shared with other tools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository
MIB = 1048576

# ---------------------------------------------------------------------------
# The plan, as data.
#
# The device tool's limits (/work/.library/device/README.md), and what this
# plan assumes where the tool states no number.
LEASE = {
    "device_time_s": 900,        # 15 minutes a session, all tries together
    "call_max_s": 600,           # one command's timeout_s at most
    "first_call_max_s": 540,     # issue 22: the first call at most 9 minutes
    "min_start_left_s": 240,     # no machine starts with under 4 minutes left
    "warm_s": 30,                # warm after a call, then given back (counted)
    "carry_max_bytes": 64 * MIB, # the working tree with the carried folders
}
ASSUME = {
    "start_s": (120, 180),       # a machine's start; the arithmetic counts the upper end
    "transfer_s": 15,            # per call: the tree and carry up, $OUT back, the next call fired
}
CARRY = [".carry/debs", ".carry/data"]
REPORT_S = 15                    # each call keeps this after its last deadline: report, tars
MIN_STAGE_S = 5                  # a stage with less left than this is not started

# Stages of each call; deadline_s counts from the call's start. A stage
# needs the build (and on the device a GPU) unless it is setup or build.
CALLS = [
    {"call": 1, "timeout_s": 540, "stages": [
        {"stage": "setup", "deadline_s": 30},
        {"stage": "build", "deadline_s": 210, "targets": []},      # [] = every target
        {"stage": "test", "deadline_s": 330},
        {"stage": "record", "deadline_s": 430},
        {"stage": "bench", "deadline_s": 520},
    ]},
    {"call": 2, "timeout_s": 110, "stages": [
        {"stage": "setup", "deadline_s": 15, "python": False},
        {"stage": "build", "deadline_s": 30, "targets": ["ch04"]},  # a no-op on the warm machine
        {"stage": "sanitizer", "deadline_s": 90},
    ]},
]
STAGES = ("setup", "build", "test", "record", "bench", "sanitizer")

# test: each gpu test's cap, and the tests that time something (they run one
# at a time, after the others, on a quiet machine): ch02's transfer columns and
# two-stream overlap, ch03's raw against cached allocation, ch04's ladder and its
# timing check, ch10's eager/replay table, ch11's device times, ch12's overlap,
# ch13's cache and GB/s. Every other gpu test (the unit and crossdev binaries,
# the twins' numerics, gpu.chNN_twin_cuda where present) runs in parallel.
GPU_TEST_CAP_S = 120
SERIAL_TESTS = ["gpu.ch02", "gpu.ch03", "gpu.ch04", "gpu.ch10", "gpu.ch11", "gpu.ch12", "gpu.ch13"]
SERIAL_RESERVE_S = 45            # of the test stage, kept for the serial tests

# record: the chapters' recordings for the book, in the order the book needs
# them (the GPU-only output first: the device, transfers, memory, the matmul
# ladder, graphs, the profiler, streams, NVRTC; then the training chapters),
# each cut at RECORD_RUN_CAP_S. (name, chapter, tag, the chapter's flags)
RECORD_RUN_CAP_S = 90
RECORD_MIN_S = 15                # a run with less left than this is not started
RECORD_RUNS = [
    ("ch01", "ch01", "", []), ("ch02", "ch02", "", []), ("ch03", "ch03", "", []),
    ("ch04", "ch04", "", []), ("ch10", "ch10", "", []), ("ch11", "ch11", "", []),
    ("ch12", "ch12", "", []), ("ch13", "ch13", "", []), ("ch05", "ch05", "", []),
    ("ch09", "ch09", "", []), ("ch07", "ch07", "", []),
    ("ch14-gpu", "ch14", "gpu-preset", ["--preset", "gpu", "--max-iters", "2000", "--profile", "trace.json"]),
    ("ch06", "ch06", "", []), ("ch14", "ch14", "", []), ("ch14-zh", "ch14", "zh", ["--corpus", "zh"]),
    ("ch06-mlp", "ch06", "mlp", ["--model", "mlp"]), ("ch08", "ch08", "", []),
]

# bench: the targets whose rows need a GPU (pinned transfers, the SGEMM ladder
# against cuBLAS, graph replay against torch.cuda.graphs, two streams,
# jiterator); the CPU recordings cover the rest.
BENCH_TARGETS = ["ch02", "ch04", "ch10", "ch12", "ch13"]

# sanitizer: ch04's own kernels, `ch04 --device cuda --quick`, under these
# tools, side by side.
SANITIZER_RUNS = [("ch04.memcheck", "memcheck"), ("ch04.racecheck", "racecheck")]
SANITIZER_PROBE_S = 40           # the probe's nvcc and its run, at most

# Phase names in the reports, per stage (phases.tsv, read by --merge).
PHASE = {"build": "build", "test": "gpu-tests", "record": "transcripts", "bench": "bench",
         "sanitizer": "sanitizer", "setup": "device"}


# ---------------------------------------------------------------------------
# The plan's arithmetic

def call_length_s(c):
    return c["timeout_s"]


def plan_checks(carry=None):
    """[(what, ok, detail)] for the plan in CALLS against LEASE and ASSUME."""
    out = []
    start = ASSUME["start_s"][1]
    for c in CALLS:
        last = c["stages"][-1]["deadline_s"]
        ds = [s["deadline_s"] for s in c["stages"]]
        out.append((f"call {c['call']}: stage deadlines in order", ds == sorted(ds) and ds[0] > 0,
                    " < ".join(map(str, ds))))
        out.append((f"call {c['call']}: last deadline {last} + report {REPORT_S} <= timeout_s {c['timeout_s']}",
                    last + REPORT_S <= c["timeout_s"], ""))
        out.append((f"call {c['call']}: timeout_s {c['timeout_s']} <= {LEASE['call_max_s']} (one command)",
                    c["timeout_s"] <= LEASE["call_max_s"], ""))
        unknown = [s["stage"] for s in c["stages"] if s["stage"] not in STAGES]
        out.append((f"call {c['call']}: known stages", not unknown, ", ".join(unknown)))
    out.append((f"at most two calls ({len(CALLS)})", 1 <= len(CALLS) <= 2, ""))
    out.append((f"call 1: timeout_s {CALLS[0]['timeout_s']} <= {LEASE['first_call_max_s']}",
                CALLS[0]["timeout_s"] <= LEASE["first_call_max_s"], ""))
    total = lease_total_s()
    out.append((f"device time: {total} s <= {LEASE['device_time_s']} s", total <= LEASE["device_time_s"],
                lease_sum_text()))
    order = [s["stage"] for c in CALLS for s in c["stages"] if s["stage"] not in ("setup", "build")]
    out.append(("every stage planned once", sorted(order) == sorted(set(order)) and
                set(order) == set(STAGES) - {"setup", "build"}, ", ".join(order)))
    if carry is not None:
        tot = carry.get("total")
        out.append((f"carry: {fmt_mib(tot)} MiB <= {LEASE['carry_max_bytes'] // MIB} MiB",
                    tot is not None and tot <= LEASE["carry_max_bytes"], carry_text(carry)))
    return out


def lease_total_s():
    return (ASSUME["start_s"][1] + sum(call_length_s(c) + ASSUME["transfer_s"] for c in CALLS)
            + LEASE["warm_s"])


def lease_sum_text():
    parts = [f"start {ASSUME['start_s'][1]}"]
    parts += [f"call {c['call']} ({c['timeout_s']} + {ASSUME['transfer_s']})" for c in CALLS]
    parts.append(f"warm after the last call {LEASE['warm_s']}")
    return " + ".join(parts) + f" = {lease_total_s()} s"


def fmt_mib(b):
    return "?" if b is None else f"{b / MIB:.1f}"


def carry_text(c):
    return (f"debs {fmt_mib(c.get('debs'))} + data {fmt_mib(c.get('data'))} + working tree "
            f"{fmt_mib(c.get('tree'))} = {fmt_mib(c.get('total'))} MiB")


def carry_sizes():
    """tools/carry-pack --size: what a call carries, in bytes ({} when it cannot tell)."""
    try:
        r = subprocess.run(["bash", os.path.join(ROOT, "tools", "carry-pack"), "--size"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return {}
    out = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition("=")
        if v.strip().isdigit():
            out[k.strip()] = int(v)
    return out


def commit_hint():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "<hash>"
    except (OSError, subprocess.SubprocessError):
        return "<hash>"


def stage_text(c, s):
    """What a stage of call c does, in one line."""
    st = s["stage"]
    if st == "setup":
        return ("unpack .carry/debs, device facts" + (", the torch Python" if s.get("python", True) else ""))
    if st == "build":
        tg = s.get("targets") or []
        return ("cmake --preset sm90; cmake --build -j<cores> "
                + ("(every target)" if not tg else f"--target {' '.join(tg)} (a no-op on the warm machine)"))
    if st == "test":
        return (f"ctest -L gpu, each <= {GPU_TEST_CAP_S} s: in parallel, then one at a time the "
                f"timing tests ({', '.join(SERIAL_TESTS)}; the last {SERIAL_RESERVE_S} s)")
    if st == "record":
        return (f"tools/record --device cuda, each run <= {RECORD_RUN_CAP_S} s, in order: "
                + ", ".join(r[0] for r in RECORD_RUNS))
    if st == "bench":
        return f"tools/bench --device cuda --only {','.join(BENCH_TARGETS)} --deadline (partial allowed)"
    if st == "sanitizer":
        return (f"probe (<= {SANITIZER_PROBE_S} s), then `ch04 --device cuda --quick` under "
                + " and ".join(t for _, t in SANITIZER_RUNS) + " side by side")
    return st


def print_plan(carry):
    p = print
    p("tools/gpu-check --plan: one machine start, "
      f"{len(CALLS)} call(s), {LEASE['device_time_s'] // 60} minutes of device time")
    p()
    p("Limits (/work/.library/device/README.md): device time "
      f"{LEASE['device_time_s']} s a session (start, calls, idle and give-back counted); one command "
      f"<= {LEASE['call_max_s']} s; no machine starts with under {LEASE['min_start_left_s']} s left; "
      f"warm {LEASE['warm_s']} s after a call; carry <= {LEASE['carry_max_bytes'] // MIB} MiB with the tree.")
    p(f"Assumed: a machine's start takes {ASSUME['start_s'][0]}-{ASSUME['start_s'][1]} s "
      f"({ASSUME['start_s'][1]} counted); each call {ASSUME['transfer_s']} s more for the transfers and "
      "firing the next; the last call is followed by give_back (else 30 s warm, counted below).")
    commit = commit_hint()
    for c in CALLS:
        p()
        p(f"call {c['call']}: timeout_s {c['timeout_s']}, carry {json.dumps(CARRY)}")
        p(f"  command: CT_COMMIT={commit} tools/gpu-check --call {c['call']}")
        p(f"  {'stage':<10} {'deadline':>8}  what")
        for s in c["stages"]:
            p(f"  {s['stage']:<10} {s['deadline_s']:>7}s  {stage_text(c, s)}")
        last = c["stages"][-1]["deadline_s"]
        p(f"  {'report':<10} {last + REPORT_S:>7}s  the call's report, gpu-check-state.tar, recorded.tar into $OUT")
    p()
    p("then here: tools/gpu-check --merge DIR1 DIR2   (the calls' files_at folders, in order)")
    p()
    ok = True
    for what, good, detail in plan_checks(carry):
        ok &= good
        p(f"{'fits' if good else 'DOES NOT FIT'}: {what}" + (f"  ({detail})" if detail else ""))
    return ok


# ---------------------------------------------------------------------------
# Commands, cut at a deadline

def log(msg):
    print(f"gpu-check: {msg}", flush=True)


def rel(path):
    """path relative to the repository where it lies inside it."""
    r = os.path.relpath(path, ROOT)
    return path if r.startswith("..") else r


def run_cmd(cmd, timeout, logf=None, env=None, cwd=None, capture=False):
    """Runs cmd in its own process group; at `timeout` seconds the whole group
    is killed and 124 returned. Output goes to logf (appended) or is returned
    (capture). Returns (rc, output or '')."""
    timeout = max(1.0, float(timeout))
    out_f = open(logf, "a", encoding="utf-8", errors="replace") if logf and not capture else None
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, start_new_session=True,
                                stdout=subprocess.PIPE if capture else (out_f or subprocess.DEVNULL),
                                stderr=subprocess.STDOUT, text=capture or None)
    except OSError as e:
        if out_f:
            out_f.write(f"gpu-check: could not run {cmd[0]}: {e}\n")
            out_f.close()
        return 127, str(e)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, _ = proc.communicate()
        rc = 124
        if out_f:
            out_f.write(f"\ngpu-check: cut at its deadline ({timeout:.0f} s): {' '.join(cmd)}\n")
    finally:
        if out_f:
            out_f.close()
    return rc, (out or "") if capture else ""


def sh(cmd, timeout=30):
    rc, out = run_cmd(cmd, timeout, capture=True)
    return out.strip() if rc == 0 else ""


class Ctx:
    """One run of this script: where things go, what was found, the clock."""

    def __init__(self, build, dry=False, jobs=None, python=None, test_cap=GPU_TEST_CAP_S, call=0):
        self.build = os.path.abspath(build)
        self.work = os.path.join(self.build, "gpu-check")
        self.dry, self.call, self.python_opt = dry, call, python
        self.jobs = jobs or os.cpu_count() or 4
        self.test_cap = test_cap
        self.t0 = time.monotonic()
        self.outdir = os.environ.get("OUT") or ""
        self.logdir = self.outdir or self.work
        self.recdir = os.path.join(self.work, "recorded")
        self.facts, self.built, self.configured = {}, False, False
        self.ngpu, self.cc, self.gpu_name = 0, "", ""
        self.torch_py, self.torch_ver, self.torch_ok = "", "", False
        self.env = dict(os.environ)
        self.plan_stages = []

    def reset(self):
        shutil.rmtree(self.work, ignore_errors=True)
        for d in (self.work, self.recdir, os.path.join(self.work, "sanitizer"), self.logdir):
            os.makedirs(d, exist_ok=True)
        open(os.path.join(self.work, "phases.tsv"), "w").close()
        open(os.path.join(self.work, "facts.txt"), "w").close()

    def now(self):
        return time.monotonic() - self.t0

    def left(self, deadline):
        return deadline - self.now()

    def fact(self, k, v):
        self.facts[k] = str(v)
        with open(os.path.join(self.work, "facts.txt"), "a") as f:
            f.write(f"{k}={str(v).replace(chr(10), ' ')}\n")

    def phase(self, name, result, secs, detail="", deadline=""):
        row = [name, result, str(int(round(secs))), str(detail).replace("\t", " ").replace("\n", " "), str(deadline)]
        with open(os.path.join(self.work, "phases.tsv"), "a") as f:
            f.write("\t".join(row) + "\n")
        log(f"{name}: {result}" + (f" ({detail})" if detail else "") + f" in {int(round(secs))} s")

    def logfile(self, name):
        return os.path.join(self.logdir, name)

    def run(self, cmd, deadline, logname=None, cap=None, env=None, cwd=None, capture=False):
        t = self.left(deadline)
        if cap is not None:
            t = min(t, cap)
        return run_cmd(cmd, t, self.logfile(logname) if logname else None, env or self.env, cwd or ROOT, capture)


# ---------------------------------------------------------------------------
# setup: carried packages, the torch Python, device facts

def soname_of(path):
    return re.sub(r"(\.so\.[0-9]*).*", r"\1", os.path.basename(path))


def system_libs():
    out = sh(["ldconfig", "-p"]) or sh(["/sbin/ldconfig", "-p"])
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) \((.*)\) => (\S+)", line)
        if m and "x86-64" in m.group(2) and m.group(1) not in libs:
            libs[m.group(1)] = m.group(3)
    return libs


def deb_extract(deb, dest):
    """dpkg-deb -x, or without dpkg: a .deb is an ar archive with data.tar.*."""
    if shutil.which("dpkg-deb"):
        return subprocess.run(["dpkg-deb", "-x", deb, dest]).returncode == 0
    members = subprocess.run(["ar", "t", deb], capture_output=True, text=True).stdout.split()
    data = next((m for m in members if m.startswith("data.tar")), None)
    if not data:
        return False
    blob = subprocess.run(["ar", "p", deb, data], capture_output=True).stdout
    with tempfile.NamedTemporaryFile(suffix=data) as f:
        f.write(blob)
        f.flush()
        flag = {"xz": "-J", "zst": "--zstd", "gz": "-z"}.get(data.rsplit(".", 1)[-1], "")
        return subprocess.run(["tar", "-x"] + ([flag] if flag else []) + ["-f", f.name, "-C", dest]).returncode == 0


def carry_setup(env):
    """Unpacks .carry/debs into .carry/root (where missing) and points the
    build and the loader at it. Returns a line for the log."""
    c = os.path.join(ROOT, ".carry")
    debs = sorted(glob.glob(os.path.join(c, "debs", "*.deb")))
    root = os.path.join(c, "root")
    if not os.path.isdir(os.path.join(root, "usr")) and debs:
        # Into root.tmp first: a call cut off while unpacking leaves no half
        # root that the next call on the same machine would take as complete.
        tmp = root + ".tmp"
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for d in debs:
            deb_extract(d, tmp)
        for a in glob.glob(os.path.join(tmp, "**", "*.a"), recursive=True):
            os.remove(a)
        os.rename(tmp, root)
    if not os.path.isdir(os.path.join(root, "usr")):
        return "no .carry/root: the system's libraries only"
    usr = os.path.join(root, "usr")
    lib = os.path.join(usr, "lib", "x86_64-linux-gnu")
    blas = os.path.join(lib, "openblas-openmp")
    sys_libs = system_libs()
    # Runtime libraries the system already has (libgfortran, libquadmath...):
    # the system's copy wins; drop the carried one so the loader cannot mix.
    for f in glob.glob(os.path.join(lib, "lib*.so.*")):
        if os.path.isfile(f) and not os.path.islink(f) and soname_of(f) in sys_libs:
            for g in (f, os.path.join(lib, soname_of(f))):
                if os.path.lexists(g):
                    os.remove(g)
    # Development links left dangling: point them at the system's runtime library.
    for f in glob.glob(os.path.join(lib, "*.so")) + glob.glob(os.path.join(lib, "*.so.*")):
        if os.path.islink(f) and not os.path.exists(f):
            target = sys_libs.get(soname_of(os.readlink(f)))
            os.remove(f)
            if target:
                os.symlink(target, f)

    def prepend(var, *paths):
        env[var] = ":".join(list(paths) + ([env[var]] if env.get(var) else []))
    prepend("CMAKE_PREFIX_PATH", usr)
    prepend("CMAKE_LIBRARY_PATH", blas, lib)
    prepend("CMAKE_INCLUDE_PATH", os.path.join(usr, "include", "x86_64-linux-gnu", "openblas-openmp"),
            os.path.join(usr, "include"))
    prepend("CPATH", os.path.join(usr, "include"), os.path.join(usr, "include", "x86_64-linux-gnu", "openblas-openmp"))
    prepend("LIBRARY_PATH", blas, lib)
    prepend("LD_LIBRARY_PATH", blas, lib)
    return "using carried packages in .carry/root"


def find_python(ctx, timeout):
    probe = 'import torch, numpy; print(torch.__version__, "(CUDA available)" if torch.cuda.is_available() else "(no CUDA)")'
    cands = [ctx.python_opt, os.environ.get("CT_PYTHON"), shutil.which("python3"),
             "/opt/torch/.venv/bin/python3", "/usr/bin/python3"]
    end = time.monotonic() + timeout
    for c in cands:
        if not c:
            continue
        left = end - time.monotonic()
        if left <= 1:
            break
        rc, out = run_cmd([c, "-c", probe], left, env=ctx.env, capture=True)
        v = out.strip().splitlines()[-1] if rc == 0 and out.strip() else ""
        if v:
            return c, v, True
        if c == ctx.python_opt:     # --python is taken as given, even without torch
            return c, "", False
    return shutil.which("python3") or "python3", "", False


def source_digest():
    """The digest of what the build and tests are made of (as `sha256sum` of
    each file, then of that list), so a report made without .git matches a commit."""
    paths = []
    for top in ("CMakeLists.txt", "CMakePresets.json", "common", "chapters", "tests", "tools"):
        full = os.path.join(ROOT, top)
        if os.path.isfile(full):
            paths.append(top)
        for d, dirs, files in os.walk(full):
            for fn in files:
                rel = os.path.relpath(os.path.join(d, fn), ROOT)
                if fn.endswith(".pyc") or "/__pycache__/" in "/" + rel + "/":
                    continue
                paths.append(rel)
    lines = []
    for rel in sorted(paths, key=lambda s: s.encode()):
        with open(os.path.join(ROOT, rel), "rb") as f:
            lines.append(f"{hashlib.sha256(f.read()).hexdigest()}  {rel}\n")
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]


def commit_of():
    """(commit, problem): CT_COMMIT checked, else git's HEAD."""
    head = sh(["git", "-C", ROOT, "rev-parse", "HEAD"])
    c = os.environ.get("CT_COMMIT", "").strip()
    if c:
        if not re.fullmatch(r"[0-9a-fA-F]{7,40}", c):
            return c, f"CT_COMMIT={c!r} is not a commit hash (7 to 40 hex digits)"
        if head and not head.lower().startswith(c.lower()):
            return c, f"CT_COMMIT={c} is not this checkout's HEAD ({head[:12]})"
        return c, ""
    if head:
        dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
        return head + (" (with uncommitted changes)" if dirty else ""), ""
    return "unknown", ("no .git and no CT_COMMIT: the report cannot name its commit "
                       "(pass CT_COMMIT=<hash>)" if os.environ.get("OUT") else "")


def gpu_kind(name):
    return re.sub(r"[^a-z0-9]+", "-", (name or "no-gpu").lower()).strip("-")


def stage_setup(ctx, s, deadline):
    t0 = ctx.now()
    if not shutil.which("nvcc") and os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
        ctx.env["PATH"] = ctx.env.get("PATH", "") + ":/usr/local/cuda/bin"
        os.environ["PATH"] = ctx.env["PATH"]
    log(carry_setup(ctx.env))
    for sub, var in (("fashion-mnist", "CT_FASHION_MNIST_DIR"), ("fortunes", "CT_FORTUNES_DIR")):
        d = os.path.join(ROOT, ".carry", "data", sub)
        if os.path.isdir(d):
            ctx.env[var] = d
    if s.get("python", True):
        ctx.torch_py, ctx.torch_ver, ctx.torch_ok = find_python(ctx, max(1, min(60, ctx.left(deadline) - 5)))
    else:
        ctx.torch_py = ctx.python_opt or shutil.which("python3") or "python3"
    q = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"])
    rows = [l for l in q.splitlines() if l.strip()]
    name = driver = mem = cc = smi_cuda = ""
    if rows:
        f = [x.strip() for x in rows[0].split(",")] + ["", "", "", ""]
        name, driver, mem, cc = f[:4]
        m = re.search(r"CUDA Version: *([0-9.]+)", sh(["nvidia-smi"]))
        smi_cuda = m.group(1) if m else ""
    ctx.ngpu, ctx.gpu_name, ctx.cc = len(rows), name, cc
    m = re.search(r"release ([0-9.]+), (V[0-9.]+)", sh(["nvcc", "--version"]))
    nvcc = f"{m.group(1)} ({m.group(2)})" if m else ""
    commit, commit_problem = commit_of()
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    stages = ",".join(x["stage"] for x in ctx.plan_stages)
    for k, v in [("gpu_name", name or "none"), ("gpu_count", ctx.ngpu), ("driver", driver or "none"),
                 ("memory", mem), ("compute_capability", cc), ("driver_cuda", smi_cuda),
                 ("nvcc", nvcc or "not found"),
                 ("cmake", (sh(["cmake", "--version"]).splitlines() or [""])[0].replace("cmake version ", "")),
                 ("cc", (sh([os.environ.get("CC", "cc"), "--version"]).splitlines() or [""])[0]),
                 ("cpu", f"{cpu} x {os.cpu_count()}"), ("kernel", os.uname().release),
                 ("date", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())),
                 ("commit", commit), ("source_digest", source_digest()),
                 ("carried", "yes" if os.path.isdir(os.path.join(ROOT, ".carry", "root")) else "no"),
                 ("kind", gpu_kind(name)), ("python", ctx.torch_py), ("torch", ctx.torch_ver),
                 ("stages", stages), ("call", ctx.call or "-"), ("no_gpu_ok", "1" if ctx.dry else "0"),
                 ("jobs", ctx.jobs)]:
        ctx.fact(k, v)
    log(f"device: {name or 'no GPU found'} | driver {driver or '?'} | {mem or '?'} | cc {cc or '?'} | "
        f"nvcc {nvcc or 'not found'}")
    log(f"commit: {commit} | stages: {stages} | python: {ctx.torch_py} | torch {ctx.torch_ver or 'not importable'}")
    secs = ctx.now() - t0
    if ctx.ngpu:
        ctx.phase("device", "ok", secs, f"{name}, driver {driver}, compute capability {cc}", s["deadline_s"])
    elif ctx.dry:
        ctx.phase("device", "skipped", secs, "no GPU (nvidia-smi): dry run (--no-gpu-ok)", s["deadline_s"])
    else:
        ctx.phase("device", "FAILED", secs, "nvidia-smi finds no GPU (use --no-gpu-ok for a dry run)", s["deadline_s"])
    if commit_problem:
        ctx.phase("commit", "FAILED" if os.environ.get("CT_COMMIT") else "warning", 0, commit_problem)
    if not nvcc and not ctx.dry:
        ctx.phase("toolchain", "FAILED", 0, "nvcc not found: the sm90 preset cannot build CUDA")
    if s.get("python", True) and ctx.ngpu:
        if not ctx.torch_ok:
            ctx.phase("python", "FAILED", 0, f"no python3 imports torch and numpy ({ctx.torch_py} used): the twin tests skip")
        elif "(no CUDA)" in ctx.torch_ver:
            ctx.phase("python", "FAILED", 0, f"torch at {ctx.torch_py} sees no GPU: the GPU twin tests skip")


# ---------------------------------------------------------------------------
# build

def stage_build(ctx, s, deadline):
    cache = os.path.join(ctx.build, "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache, errors="replace") as f:
            if f"CMAKE_HOME_DIRECTORY:INTERNAL={ROOT}\n" not in f.read():
                log(f"{ctx.build} was configured from another folder: removing it")
                keep = ctx.work
                for e in os.listdir(ctx.build):
                    if os.path.join(ctx.build, e) != keep:
                        p = os.path.join(ctx.build, e)
                        shutil.rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.remove(p)
    blog = "build.log"
    t0 = ctx.now()
    if os.path.exists(cache) and s.get("targets"):
        # Call 2 on the warm machine: call 1 configured it (and the build
        # re-runs CMake itself if a CMakeLists changed).
        ctx.configured = True
        ctx.phase("configure", "dry" if ctx.dry else "ok", ctx.now() - t0,
                  "configured by call 1 (the warm machine keeps build-sm90)", "")
    else:
        rc, _ = ctx.run(["cmake", "--preset", "sm90", "-B", ctx.build, f"-DCT_TORCH_PYTHON={ctx.torch_py}",
                         f"-DCT_GPU_TEST_TIMEOUT={ctx.test_cap}"], deadline, blog)
        if rc != 0:
            ctx.phase("configure", "FAILED", ctx.now() - t0,
                      "cut at the deadline" if rc == 124 else f"exit {rc}; see build.log", s["deadline_s"])
            ctx.phase("build", "not run", 0, "configure failed")
            return
        ctx.configured = True
        ctx.phase("configure", "ok", ctx.now() - t0, "", "")
    deps = []
    if os.path.exists(cache):
        pat = re.compile(r"^(BLAS_[A-Za-z_]*LIBRAR[A-Z]*|CMOCKA_[A-Z]*|CT_CBLAS_INCLUDE|CT_OPENBLAS_OPENMP_[A-Z]*|"
                         r"CT_TORCH_PYTHON|ZLIB_LIBRARY[A-Z_]*|ZLIB_INCLUDE_DIR|OpenMP_C_FLAGS|"
                         r"CMAKE_CUDA_ARCHITECTURES|CMAKE_CUDA_COMPILER|CMAKE_BUILD_TYPE):")
        with open(cache, errors="replace") as f:
            deps = [l for l in f if pat.match(l)]
    with open(os.path.join(ctx.work, "deps.txt"), "w") as f:
        f.writelines(deps)
    list_gpu_tests(ctx, deadline)
    if ctx.dry:
        ctx.phase("build", "dry", 0, "configure only (dry run); would run: cmake --build "
                  f"{rel(ctx.build)} -j<cores>"
                  + (f" --target {' '.join(s['targets'])}" if s.get("targets") else ""), s["deadline_s"])
        return
    t0 = ctx.now()
    cmd = ["cmake", "--build", ctx.build, "-j", str(ctx.jobs)]
    if s.get("targets"):
        cmd += ["--target"] + s["targets"]
    log(" ".join(cmd))
    rc, _ = ctx.run(cmd, deadline, blog)
    with open(ctx.logfile(blog), errors="replace") as f:
        text = f.read()
    # Spills to local memory that ptxas reported (-Xptxas=-warn-spills): a
    # kernel that spills is slower than its registers allow. Only what this
    # call compiled is seen (an up-to-date build prints nothing).
    spills = sorted({l.strip() for l in text.splitlines() if re.search(r"ptxas.*spill", l)})
    with open(os.path.join(ctx.work, "spills.txt"), "w") as f:
        f.write("".join(l + "\n" for l in spills))
    ctx.fact("cuda_compiled", text.count("Building CUDA object"))
    what = f"targets {' '.join(s['targets'])}" if s.get("targets") else "every target"
    if rc == 0:
        ctx.built = True
        ctx.phase("build", "ok", ctx.now() - t0, f"{what}, -j {ctx.jobs}" + (f"; {len(spills)} spill warning(s)" if spills else ""), s["deadline_s"])
    elif rc == 124:
        ctx.phase("build", "FAILED", ctx.now() - t0, f"cut at its deadline ({what}); see build.log", s["deadline_s"])
    else:
        ctx.phase("build", "FAILED", ctx.now() - t0, f"exit {rc}; see build.log", s["deadline_s"])
    list_gpu_tests(ctx, deadline)


def list_gpu_tests(ctx, deadline):
    """The gpu tests as ctest lists them, into gpu-tests.txt (for 'not run')."""
    rc, out = ctx.run(["ctest", "--test-dir", ctx.build, "-L", "gpu", "-N", "--show-only=json-v1"],
                      deadline, cap=60, capture=True)
    names = []
    try:
        names = [t["name"] for t in json.loads(out).get("tests", [])] if rc == 0 else []
    except ValueError:
        pass
    with open(os.path.join(ctx.work, "gpu-tests.txt"), "w") as f:
        f.write("".join(n + "\n" for n in names))
    return names


# ---------------------------------------------------------------------------
# test

def serial_regex():
    return "^(" + "|".join(re.escape(t) for t in SERIAL_TESTS) + ")$"


def junit_results(paths):
    """[(name, pass|FAIL|skip, seconds, output)] from ctest's JUnit files."""
    res = []
    for p in paths:
        try:
            root = ET.parse(p).getroot()
        except (OSError, ET.ParseError):
            continue
        for tc in root.iter("testcase"):
            status = tc.get("status", "")
            if tc.find("failure") is not None or tc.find("error") is not None or status == "fail":
                r = "FAIL"
            elif tc.find("skipped") is not None or status in ("notrun", "disabled"):
                r = "skip"
            else:
                r = "pass"
            res.append((tc.get("name"), r, float(tc.get("time") or 0), tc.findtext("system-out") or ""))
    return res


CUT = "cut (deadline)"


def cut_tests(out, cap):
    """The tests ctest's --stop-time killed (it reports them as timed out,
    shorter than their own limit, then says the stop time has passed): cut by
    the stage's deadline, not failed."""
    if "stop time has been passed" not in out:
        return []
    return [m.group(1) for m in re.finditer(r"Test +#\d+: (\S+) \.*\s*\*\*\*Timeout +([0-9.]+) sec", out)
            if float(m.group(2)) < cap - 1]


def apply_cut(results, cut):
    return [(n, CUT if n in cut and r == "FAIL" else r, t, o) for n, r, t, o in results]


def stage_test(ctx, s, deadline):
    t0 = ctx.now()
    names = read_lines(os.path.join(ctx.work, "gpu-tests.txt"))
    if ctx.dry and not ctx.configured:
        ctx.phase("gpu-tests", "not run", 0, "not configured", s["deadline_s"])
        return
    serial = [n for n in names if n in SERIAL_TESTS]
    par = [n for n in names if n not in SERIAL_TESTS]
    jpar = max(1, min(8, ctx.jobs // 2))
    if ctx.dry:
        ctx.phase("gpu-tests", "dry", ctx.now() - t0,
                  f"{len(names)} gpu tests listed: {len(par)} in parallel (-j <cores/2>, {jpar} here), {len(serial)} one at a time "
                  f"({', '.join(serial) or 'none'}), each <= {ctx.test_cap} s", s["deadline_s"])
        return
    if not ctx.built:
        ctx.phase("gpu-tests", "not run", 0, "no build", s["deadline_s"])
        return
    if not names:
        ctx.phase("gpu-tests", "FAILED", 0, "ctest lists no gpu test", s["deadline_s"])
        return
    clog = "ctest.log"
    env = dict(ctx.env)
    # OpenMP/OpenBLAS threads per test, so that the parallel tests share the
    # cores (a test's own setting wins).
    env.setdefault("OMP_NUM_THREADS", str(max(1, ctx.jobs // jpar)))
    env.setdefault("OPENBLAS_NUM_THREADS", env["OMP_NUM_THREADS"])
    junits, cut = [], []
    for batch, sel, j, end in (("parallel", ["-E", serial_regex()], jpar, deadline - (SERIAL_RESERVE_S if serial else 0)),
                               ("serial", ["-R", serial_regex()], 1, deadline)):
        group = par if batch == "parallel" else serial
        if not group:
            continue
        if ctx.left(end) < MIN_STAGE_S:
            log(f"tests: the {batch} batch not run (deadline)")
            continue
        junit = os.path.join(ctx.work, f"ctest-junit-{batch}.xml")
        # --stop-time (local HH:MM:SS) makes ctest itself stop at the deadline
        # and still write its JUnit file; the process-group kill is the backstop.
        stop = time.strftime("%H:%M:%S", time.localtime(time.time() + max(1, ctx.left(end) - 3)))
        cmd = ["ctest", "--test-dir", ctx.build, "-L", "gpu"] + sel + [
            "-j", str(j), "--no-tests=ignore", "--output-on-failure", "--timeout", str(ctx.test_cap),
            "--stop-time", stop, "--output-junit", junit]
        log(f"tests ({batch}, {len(group)}): {' '.join(cmd)}")
        _, out = ctx.run(cmd, end, env=env, capture=True)
        with open(ctx.logfile(clog), "a") as f:
            f.write(out)
        cut += cut_tests(out, ctx.test_cap)
        junits.append(junit)
    with open(os.path.join(ctx.work, "ctest-cut.txt"), "w") as f:
        f.write("".join(c + "\n" for c in cut))
    res = apply_cut(junit_results(junits), cut)
    seen = {r[0] for r in res}
    notrun = [n for n in names if n not in seen]
    n = {k: sum(1 for r in res if r[1] == k) for k in ("pass", "FAIL", "skip", CUT)}
    detail = (f"{n['pass']} passed, {n['FAIL']} failed, {n['skip']} skipped, {n[CUT]} cut at the deadline, "
              f"{len(notrun)} not run of {len(names)} ({len(par)} parallel, {len(serial)} serial)")
    if n["FAIL"]:
        result = "FAILED"
    elif res and n["skip"] == len(res):
        result, detail = "FAILED", "every gpu test skipped: CUDA is not usable here; " + detail
    elif notrun or n[CUT]:
        result = "partial"
    else:
        result = "ok"
    ctx.phase("gpu-tests", result, ctx.now() - t0, detail, s["deadline_s"])


# ---------------------------------------------------------------------------
# record

def record_cmd(ctx, run):
    name, chapter, tag, flags = run
    # One run per chapter, started whatever the load: the stage's budget (RECORD_RUN_CAP_S a run) holds
    # no repeats, and the tests just ran on this machine; each header records the load and '1 run'.
    cmd = [os.path.join(ROOT, "tools", "record"), "--build", ctx.build, "--device", "cuda", "--out-dir", ctx.recdir,
           "--repeats", "1", "--allow-busy"]
    if tag:
        cmd += ["--tag", tag]
    cmd.append(chapter)
    if flags:
        cmd += ["--"] + flags
    return cmd


def stage_record(ctx, s, deadline):
    t0 = ctx.now()
    tsv = os.path.join(ctx.work, "transcripts.tsv")
    if ctx.dry:
        missing = sorted({r[1] for r in RECORD_RUNS if not glob.glob(os.path.join(ROOT, "chapters", r[1] + "_*"))})
        if missing:
            ctx.phase("transcripts", "FAILED", 0, "the plan records chapters the tree lacks: " + ", ".join(missing),
                      s["deadline_s"])
            return
        ctx.phase("transcripts", "dry", 0, f"{len(RECORD_RUNS)} runs planned, each <= {RECORD_RUN_CAP_S} s: "
                  + ", ".join(r[0] for r in RECORD_RUNS), s["deadline_s"])
        return
    if not ctx.built or not ctx.ngpu:
        ctx.phase("transcripts", "not run", 0, "no build" if not ctx.built else "no GPU", s["deadline_s"])
        return
    counts = {"ok": 0, "FAILED": 0, "cut": 0, "not run": 0}
    for run in RECORD_RUNS:
        name, chapter = run[0], run[1]
        exe = os.path.join(ctx.build, chapter)
        if not os.access(exe, os.X_OK):
            row, counts["FAILED"] = (name, "-", "0", "", "FAILED (not built)"), counts["FAILED"] + 1
        elif ctx.left(deadline) < RECORD_MIN_S:
            row, counts["not run"] = (name, "-", "0", "", "not run (deadline)"), counts["not run"] + 1
        else:
            log(f"record: {name} --device cuda")
            st = ctx.now()
            rc, out = ctx.run(record_cmd(ctx, run), deadline, cap=RECORD_RUN_CAP_S, capture=True)
            with open(ctx.logfile("record.log"), "a") as f:
                f.write(out)
            m = re.findall(r"^record: wrote " + re.escape(ctx.recdir) + r"/(.*) \(exit .*", out, re.M)
            fn = os.path.basename(m[-1]) if m else ""
            if rc == 124:
                res = "cut at its deadline"
                counts["cut"] += 1
            elif rc == 0:
                res = "ok"
                counts["ok"] += 1
            else:
                res = "FAILED"
                counts["FAILED"] += 1
            row = (name, str(rc), str(int(ctx.now() - st)), fn, res)
        with open(tsv, "a") as f:
            f.write("\t".join(row) + "\n")
    detail = (f"{counts['ok']} recorded, {counts['FAILED']} failed, {counts['cut']} cut at their deadline, "
              f"{counts['not run']} not run, of {len(RECORD_RUNS)}")
    result = "FAILED" if counts["FAILED"] else ("partial" if counts["cut"] or counts["not run"] else "ok")
    ctx.phase("transcripts", result, ctx.now() - t0, detail, s["deadline_s"])


# ---------------------------------------------------------------------------
# bench

def bench_verdict(rc, path):
    """(result, detail) for tools/bench's exit status rc and its bench.json: a
    run the deadline cut short (exit 3, or 0 with runs skipped) is "partial"
    with the rows it measured, not a failure."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = None
    if rc not in (0, 3) or doc is None:
        why = f"exit {rc}" + ("" if doc is not None else "; no bench.json")
        if rc == 124:
            why = "killed at the deadline before it wrote its report"
        return "FAILED", why
    rows = doc.get("rows") or []
    done = sum(1 for r in rows if isinstance(r.get("ratio"), (int, float)) and math.isfinite(r["ratio"]))
    skipped = doc.get("skipped") or []
    measured = f"{done} rows with a ratio" + (f", {len(rows) - done} without (n/a here, or not run)" if done < len(rows) else "")
    not_run = ", ".join(skipped) or "?"
    if (rc == 3 or skipped) and done == 0:
        return "FAILED", f"the deadline left no row measured; not run: {not_run}"
    if rc == 3 or skipped:
        return "partial", f"the deadline cut it short: {measured}; not run: {not_run}"
    return "ok", measured


def stage_bench(ctx, s, deadline):
    t0 = ctx.now()
    bench = os.path.join(ROOT, "tools", "bench")
    if ctx.dry:
        rc, out = run_cmd([sys.executable, bench, "--list-rows"], 60, capture=True)
        try:
            rows = [r for r in json.loads(out) if r["device"] == "cuda" and r["chapter"] in BENCH_TARGETS]
        except (ValueError, KeyError, TypeError):
            rows = None
        if rows is None:
            ctx.phase("bench", "FAILED", ctx.now() - t0, f"tools/bench --list-rows failed (exit {rc})", s["deadline_s"])
        else:
            ctx.phase("bench", "dry", ctx.now() - t0, f"{len(rows)} cuda rows of {','.join(BENCH_TARGETS)} "
                      "(tools/bench --list-rows)", s["deadline_s"])
        return
    if not ctx.built or not ctx.ngpu:
        ctx.phase("bench", "not run", 0, "no build" if not ctx.built else "no GPU", s["deadline_s"])
        return
    left = int(ctx.left(deadline)) - 5
    if left < 30:
        ctx.phase("bench", "not run", 0, "deadline", s["deadline_s"])
        return
    bj = os.path.join(ctx.recdir, "bench.json")
    if os.path.exists(bj):
        os.remove(bj)
    env = dict(ctx.env, CT_BENCH_OUT=ctx.recdir)
    cmd = [bench, "--python", ctx.torch_py, "--build", ctx.build, "--device", "cuda", "--only",
           ",".join(BENCH_TARGETS), "--deadline", str(left), "--out-dir", ctx.recdir]
    log(" ".join(cmd))
    rc, _ = ctx.run(cmd, deadline, "bench.log", env=env)
    res, detail = bench_verdict(rc, bj)
    ctx.phase("bench", res, ctx.now() - t0, detail, s["deadline_s"])


# ---------------------------------------------------------------------------
# sanitizer

def find_csan():
    if os.environ.get("CT_COMPUTE_SANITIZER"):
        return os.environ["CT_COMPUTE_SANITIZER"]
    c = shutil.which("compute-sanitizer")
    if c:
        return c
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    for c in (os.path.join(os.path.dirname(nvcc), "compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
              "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if os.access(c, os.X_OK):
            return c
    return ""


PROBE_CU = r"""// One int written past the end of a 32-int buffer: memcheck must report it.
#include <cstdio>
__global__ void write_past_end(int *p) { p[threadIdx.x] = 1; } // 33 threads
int main() {
  int *p = nullptr;
  cudaError_t e = cudaMalloc(&p, 32 * sizeof(int));
  if (e != cudaSuccess) { printf("probe: cudaMalloc: %s\n", cudaGetErrorString(e)); return 3; }
  write_past_end<<<1, 33>>>(p);
  e = cudaDeviceSynchronize();
  printf("probe: %s\n", cudaGetErrorString(e));
  cudaFree(p);
  return 0;
}
"""


def sanitizer_probe(csan, d, arch="90", timeout=120):
    """(supported, line): can csan check programs on this device? It builds a
    program that writes one int past a cudaMalloc'd buffer and runs it under
    memcheck; supported only when memcheck reports that write (gVisor machines
    answer "Device not supported"; a tool that misses a planted error cannot be
    relied on either)."""
    end = time.monotonic() + timeout
    nv = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else "")
    if not csan:
        return False, "not supported here: compute-sanitizer not found"
    if not nv:
        return False, "not supported here: no nvcc to build the probe"
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "probe.cu"), "w") as f:
        f.write(PROBE_CU)
    rc, out = run_cmd([nv, f"-arch=sm_{arch}", "-o", os.path.join(d, "probe"), os.path.join(d, "probe.cu")],
                      end - time.monotonic(), capture=True)
    if rc != 0:
        last = (out.strip().splitlines() or [""])[-1]
        return False, f"not supported here: nvcc could not build the probe ({last})"
    rc, out = run_cmd([csan, "--tool", "memcheck", "--error-exitcode", "86", os.path.join(d, "probe")],
                      end - time.monotonic(), capture=True)
    with open(os.path.join(d, "probe.log"), "w") as f:
        f.write(out)
    if rc == 86 and "Invalid __global__ write" in out:
        return True, "supported"
    tool_lines = [re.sub(r"^=+ *", "", l) for l in out.splitlines() if l.startswith("=")]
    why = next((l for l in tool_lines if "not supported" in l.lower()), "")
    if why:
        return False, f"not supported here: {why}"
    why = next((l for l in tool_lines if "error" in l.lower()), "")
    if not why:
        why = re.sub(r"^=+ *", "", (out.strip().splitlines() or [""])[-1])
    return False, f"not supported here: a planted out-of-bounds write was not reported (exit {rc}: {why or 'no output'})"


def stage_sanitizer(ctx, s, deadline):
    t0 = ctx.now()
    tsv = os.path.join(ctx.work, "sanitizer.tsv")
    csan = find_csan()
    exe = os.path.join(ctx.build, "ch04")
    if ctx.dry:
        ctx.phase("sanitizer", "dry", 0, f"compute-sanitizer: {csan or 'not found here'}; runs: "
                  + ", ".join(n for n, _ in SANITIZER_RUNS) + " (ch04 --device cuda --quick)", s["deadline_s"])
        return
    if not ctx.built:
        ctx.phase("sanitizer", "not run", 0, "no build", s["deadline_s"])
        return
    if not csan:
        ctx.phase("sanitizer", "FAILED", 0, "compute-sanitizer not found", s["deadline_s"])
        return
    ok, probe = sanitizer_probe(csan, os.path.join(ctx.work, "sanitizer", "probe"), (ctx.cc or "9.0").replace(".", ""),
                                max(1, min(SANITIZER_PROBE_S, ctx.left(deadline))))
    ctx.fact("sanitizer_probe", probe)
    log(f"sanitizer: probe: {probe}")
    slog = ctx.logfile("sanitizer.log")
    if not ok:
        with open(tsv, "a") as f:
            for name, tool in SANITIZER_RUNS:
                f.write(f"{name}\t{tool}\tnot supported here\t-\t-\t-\t\t\n")
        try:
            shutil.copyfile(os.path.join(ctx.work, "sanitizer", "probe", "probe.log"), slog)
        except OSError:
            pass
        ctx.phase("sanitizer", "unsupported" if ctx.ngpu else "FAILED", ctx.now() - t0,
                  f"{probe} ({len(SANITIZER_RUNS)} runs not checked)", s["deadline_s"])
        return
    env = dict(ctx.env)
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(max(1, ctx.jobs // len(SANITIZER_RUNS)))
    results = {}

    def one(name, tool):
        out = os.path.join(ctx.work, "sanitizer", name + ".log")
        st = time.monotonic()
        if ctx.left(deadline) < MIN_STAGE_S:
            results[name] = (125, 0)
            return
        rc, _ = run_cmd([csan, "--tool", tool, "--error-exitcode", "86", "--print-limit", "50", exe,
                         "--device", "cuda", "--quick"], ctx.left(deadline), out, env, ctx.build)
        results[name] = (rc, int(time.monotonic() - st))
    threads = [threading.Thread(target=one, args=r) for r in SANITIZER_RUNS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = cut = 0
    with open(tsv, "a") as f, open(slog, "a") as lg:
        for name, tool in SANITIZER_RUNS:
            rc, secs = results.get(name, (125, 0))
            try:
                with open(os.path.join(ctx.work, "sanitizer", name + ".log"), errors="replace") as g:
                    text = g.read()
            except OSError:
                text = ""
            pat = r"RACECHECK SUMMARY: .*\((\d+) error" if tool == "racecheck" else r"ERROR SUMMARY: (\d+) error"
            m = re.findall(pat, text)
            errs = m[-1] if m else "?"
            if rc == 0:
                res = "pass"
            elif rc == 124:
                res, cut = "cut at the deadline", cut + 1
            elif rc == 125:
                res, cut = "not run (deadline)", cut + 1
            else:
                res, bad = "FAILED", bad + 1
            f.write(f"{name}\t{tool}\t{res}\t{rc}\t{errs}\t\t{secs}\t\n")
            lg.write(f"\n######## {name} ({tool}): {res} (exit {rc}, {secs} s)\n{text}")
    n = len(SANITIZER_RUNS)
    result = "FAILED" if bad else ("partial" if cut else "ok")
    ctx.phase("sanitizer", result, ctx.now() - t0,
              f"{n - bad - cut} of {n} runs clean" + (f", {bad} with errors" if bad else "")
              + (f", {cut} cut at the deadline or not run" if cut else ""), s["deadline_s"])


STAGE_FUNCS = {"setup": stage_setup, "build": stage_build, "test": stage_test, "record": stage_record,
               "bench": stage_bench, "sanitizer": stage_sanitizer}


# ---------------------------------------------------------------------------
# Running a call's stages, each cut at its deadline

def run_stages(ctx, stages, funcs=None, cut_at=None):
    """Runs stages in order; each gets until its deadline_s (from ctx's start,
    never past cut_at). A stage with under MIN_STAGE_S left is reported as
    not run; one that raises is FAILED with the error; one that runs past its
    deadline (a bug: every command in it is cut there) is flagged."""
    funcs = funcs or STAGE_FUNCS
    ctx.plan_stages = stages
    for s in stages:
        deadline = s["deadline_s"] if s.get("deadline_s") is not None else 10 ** 9
        if cut_at is not None:
            deadline = min(deadline, cut_at)
        phase = PHASE.get(s["stage"], s["stage"])
        if ctx.left(deadline) < MIN_STAGE_S and s["stage"] != "setup":
            ctx.phase(phase, "not run", 0, f"deadline ({s['deadline_s']} s) reached before it could start",
                      s.get("deadline_s", ""))
            continue
        t0 = ctx.now()
        try:
            funcs[s["stage"]](ctx, s, deadline)
        except Exception as e:   # a stage's bug must not lose the report
            ctx.phase(phase, "FAILED", ctx.now() - t0, f"{type(e).__name__}: {e}", s.get("deadline_s", ""))
        over = ctx.now() - deadline
        if over > MIN_STAGE_S:
            ctx.phase(phase + "-deadline", "FAILED", 0, f"ran {int(over)} s past its deadline")


# ---------------------------------------------------------------------------
# The report (also --merge's)

def read_lines(path):
    try:
        with open(path, errors="replace") as f:
            return [l.rstrip("\n") for l in f if l.strip()]
    except OSError:
        return []


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:]).rstrip()
    except OSError:
        return ""



NONFAILING = ("ok", "skipped", "partial", "unsupported", "not run", "dry", "warning")


def read_calls(states):
    """[{"n", "dir", "facts", "phases", "ran"}] of the calls' folders, in call order."""
    calls = []
    for i, d in enumerate(states, 1):
        facts = dict(l.split("=", 1) for l in read_lines(os.path.join(d, "facts.txt")) if "=" in l)
        phases = [(l.split("\t") + [""] * 5)[:5] for l in read_lines(os.path.join(d, "phases.tsv"))]
        calls.append({"n": i, "dir": d, "facts": facts, "phases": phases,
                      "ran": {p[0] for p in phases if p[1] not in ("skipped", "not run")}})
    return calls


def gather(states):
    """What the report says, read from the calls' folders: a dict of the sections' inputs."""
    calls = read_calls(states)
    F = next((c["facts"] for c in calls if c["facts"].get("gpu_count", "0") != "0"), calls[0]["facts"])

    def last_with(phase):
        return next((c for c in reversed(calls) if phase in c["ran"]), None)

    tests, test_call = [], last_with("gpu-tests")
    if test_call:
        junits = sorted(glob.glob(os.path.join(test_call["dir"], "ctest-junit*.xml")))
        tests = apply_cut(junit_results(junits), read_lines(os.path.join(test_call["dir"], "ctest-cut.txt")))
        seen = {t[0] for t in tests}
        tests += [(n, "not run", 0.0, "") for n in read_lines(os.path.join(test_call["dir"], "gpu-tests.txt"))
                  if n not in seen]
    san_call = last_with("sanitizer")
    sans = ([(l.split("\t") + [""] * 8)[:8] for l in read_lines(os.path.join(san_call["dir"], "sanitizer.tsv"))]
            if san_call else [])
    trans = {}
    for c in calls:
        for l in read_lines(os.path.join(c["dir"], "transcripts.tsv")):
            name, rc, secs, fn, res = (l.split("\t") + [""] * 5)[:5]
            trans[name] = (c, rc, secs, fn, res or ("ok" if rc == "0" else "FAILED"))
    bench_call = last_with("bench")
    return {"calls": calls, "F": F, "dry": F.get("no_gpu_ok") == "1", "multi": len(calls) > 1,
            "tests": tests, "test_call": test_call,
            "all_skipped": bool(tests) and all(r == "skip" for _, r, _, _ in tests),
            "san_call": san_call, "sans": sans,
            "san_probe": san_call["facts"].get("sanitizer_probe", "") if san_call else "",
            "trans": trans, "bench_log": os.path.join(bench_call["dir"], "bench.log") if bench_call else "",
            "digests": sorted({c["facts"].get("source_digest", "?") for c in calls}),
            "failed": [(c, p) for c in calls for p in c["phases"] if p[1] not in NONFAILING],
            "spills": sorted({l for c in calls for l in read_lines(os.path.join(c["dir"], "spills.txt"))})}


def report_head(p, R, ok, problems):
    """The title and the table of facts."""
    calls, F, multi, digests, spills = R["calls"], R["F"], R["multi"], R["digests"], R["spills"]
    incomplete = [f"{p[0]} {p[1]}" + (f" (call {c['facts'].get('call', c['n'])})" if multi else "")
                  for c in calls for p in c["phases"] if p[1] in ("partial", "unsupported", "not run")]
    n_cu = sum(int(c["facts"].get("cuda_compiled") or 0) for c in calls)
    p(f"# GPU check: {F.get('gpu_name')} ({F.get('date')})")
    p("")
    p("Written by `tools/gpu-check`" + (f" (`--merge` of {len(calls)} calls)" if multi else "")
      + "; nothing here is typed by hand.")
    p("")
    p("| | |")
    p("|---|---|")
    total = sum(int(c["facts"].get("total_s") or 0) for c in calls)
    rows = [("Device", f"{F.get('gpu_name')} (x{F.get('gpu_count')})"),
            ("Memory", F.get("memory")),
            ("Compute capability", F.get("compute_capability")),
            ("Driver", f"{F.get('driver')} (supports CUDA {F.get('driver_cuda') or '?'})"),
            ("CUDA toolkit / runtime", f"nvcc {F.get('nvcc')}"),
            ("Date", F.get("date")),
            ("Commit", F.get("commit")),
            ("Source digest", ", ".join(f"`{d}`" for d in digests) + " (`tools/gpu-check --digest`)"),
            ("Host", f"{F.get('cpu')}, kernel {F.get('kernel')}"),
            ("Tools", f"CMake {F.get('cmake')}, {F.get('cc')}"),
            ("Python (twins, checks)", f"{F.get('python') or '?'}, torch {F.get('torch') or 'not importable'}"),
            ("Build", "preset `sm90` (build-sm90, CUDA arch 90, RelWithDebInfo)"
                      + ("; cmocka/OpenBLAS from the carried .debs" if F.get("carried") == "yes" else "")),
            ("Stages", "; ".join(f"call {c['facts'].get('call', c['n'])}: {c['facts'].get('stages', '?')}" for c in calls)),
            ("Result", ("**PASS**" if ok else "**FAIL**" + (f" ({'; '.join(problems)})" if problems else ""))
             + (" (dry run: no GPU)" if R["dry"] else "")
             + (f"; incomplete: {', '.join(incomplete)}" if incomplete else "")),
            ("Register spills (ptxas)", f"{len(spills)} warning(s), listed below" if spills else
             f"none in {n_cu} CUDA source(s) compiled" if n_cu else "not seen: no CUDA source was compiled in these calls"),
            ("Total time", f"{total} s" + (" (the calls' own times, without the machine starts)" if multi else ""))]
    for k, v in rows:
        p(f"| {k} | {cell(v)} |")


def report_phases(p, R):
    """The calls (when merged), each call's phases and what CMake found."""
    calls, multi = R["calls"], R["multi"]
    if multi:
        p("")
        p("## Calls")
        p("")
        p("| call | stages | device | date | time (s) | result |")
        p("|---:|---|---|---|---:|---|")
        for c in calls:
            f = c["facts"]
            bad = any(ph[1] not in NONFAILING for ph in c["phases"])
            p(f"| {f.get('call', c['n'])} | {cell(f.get('stages'))} | {cell(f.get('gpu_name'))} | {cell(f.get('date'))} | "
              f"{f.get('total_s')} | {'FAIL' if bad else 'pass'} |")
    p("")
    p("## Phases")
    p("")
    p("Each stage is cut at its deadline (seconds from its call's start, `tools/gpu-check --plan`).")
    p("")
    p(("| call " if multi else "") + "| phase | result | time (s) | deadline (s) | detail |")
    p(("|---:" if multi else "") + "|---|---|---:|---:|---|")
    for c in calls:
        for ph in c["phases"]:
            p((f"| {c['facts'].get('call', c['n'])} " if multi else "")
              + f"| {ph[0]} | {ph[1]} | {ph[2]} | {ph[4]} | {cell(ph[3])} |")
    deps = tail(os.path.join(calls[0]["dir"], "deps.txt"), 50)
    if deps:
        p("")
        p("<details><summary>What CMake found</summary>")
        p("")
        p("```")
        p(deps)
        p("```")
        p("</details>")


def report_tests(p, R):
    """The GPU tests, the register spills, the sanitizer runs and the transcripts."""
    tests, spills, sans, san_probe, trans = R["tests"], R["spills"], R["sans"], R["san_probe"], R["trans"]
    if R["test_call"]:
        p("")
        p("## GPU tests (`ctest -L gpu`)")
        p("")
        if tests:
            n = {r: sum(1 for _, x, _, _ in tests if x == r) for r in ("pass", "FAIL", "skip", CUT, "not run")}
            p(f"{len(tests)} tests: {n['pass']} passed, {n['FAIL']} failed, {n['skip']} skipped, "
              f"{n[CUT]} cut at the stage's deadline, {n['not run']} not run.")
            if R["all_skipped"]:
                p("Every test skipped: CUDA was not usable here.")
            p("")
            p("| test | result | time (s) |")
            p("|---|---|---:|")
            for name, res, t, _ in tests:
                p(f"| {cell(name)} | {res} | {t:.2f} |")
        else:
            p("No test results (see the phases above).")
    if spills:
        p("")
        p("## Register spills (`-Xptxas=-warn-spills`)")
        p("")
        p("```")
        p("\n".join(spills))
        p("```")
    if R["san_call"]:
        p("")
        p("## compute-sanitizer: ch04's own kernels")
        p("")
        p("`ch04 --device cuda --quick` under " + " and ".join(t for _, t in SANITIZER_RUNS) + ".")
        if san_probe:
            p("")
            p(f"Probe (a planted out-of-bounds write under memcheck): {cell(san_probe)}.")
        p("")
        if sans:
            p("| run | tool | result | exit | errors (besides leaks) | leaks at exit | time (s) |")
            p("|---|---|---|---:|---:|---|---:|")
            for name, tool, res, rc, errs, leak, t, _ in sans:
                p(f"| {cell(name)} | {tool} | {res} | {rc} | {errs} | {cell(leak) or '-'} | {t} |")
        else:
            p("No runs (see the phases above).")
    if trans:
        p("")
        p("## Chapter transcripts on the GPU (`tools/record --device cuda`)")
        p("")
        p("Only runs that exited 0 go into book/recorded/.")
        p("")
        p("| run | result | exit | time (s) | transcript |")
        p("|---|---|---:|---:|---|")
        for name, (c, rc, secs, fn, res) in sorted(trans.items()):
            p(f"| {cell(name)} | {res} | {rc} | {secs} | {cell(fn) or '-'} |")


def report_failures(p, R):
    """The logs of what failed, then the bench's output when it did not."""
    failed, bench_log, multi = R["failed"], R["bench_log"], R["multi"]
    fails = [(n, o) for n, r, _, o in R["tests"] if r == "FAIL"]
    bad_sans = [s for s in R["sans"] if s[2] not in ("pass", "skipped", "not supported here", "cut at the deadline",
                                                     "not run (deadline)")]
    bad_trans = [(k, v) for k, v in sorted(R["trans"].items()) if v[4].startswith("FAILED")]
    build_fail = [(c, ph) for c, ph in failed if ph[0] in ("configure", "build")]
    bench_failed = any(ph[0] == "bench" for _, ph in failed)
    if fails or bad_sans or build_fail or bench_failed or bad_trans:
        p("")
        p("## Failures")
        for c, ph in build_fail:
            p("")
            p(f"### {ph[0]}" + (f" (call {c['facts'].get('call', c['n'])})" if multi else ""))
            p("")
            p("```")
            p(tail(os.path.join(c["dir"], "build.log"), 60))
            p("```")
        for name, out in fails:
            p("")
            p(f"### {name}")
            p("")
            p("```")
            p("\n".join(out.rstrip().splitlines()[-40:]))
            p("```")
        for s in bad_sans:
            p("")
            p(f"### sanitizer: {s[0]} ({s[1]}: {s[2]}, exit {s[3]})")
            p("")
            p("```")
            p(tail(os.path.join(R["san_call"]["dir"], "sanitizer", s[0] + ".log"), 40))
            p("```")
        for name, (c, rc, secs, fn, res) in bad_trans:
            p("")
            p(f"### transcript: {name} (exit {rc})")
            p("")
            p("```")
            p(tail(os.path.join(c["dir"], "recorded", fn), 30) if fn else tail(os.path.join(c["dir"], "record.log"), 30))
            p("```")
        if bench_failed:
            p("")
            p("### bench")
            p("")
            p("```")
            p(tail(bench_log, 40))
            p("```")
    if bench_log and os.path.exists(bench_log) and not bench_failed and tail(bench_log):
        p("")
        p("## Bench output (tail)")
        p("")
        p("```")
        p(tail(bench_log, 60))
        p("```")


def make_report(states):
    """(markdown, ok) for states: folders as calls leave them, in call order.
    Device facts come from the first call that saw a GPU; tests, sanitizer and
    bench from the last call that ran them; transcripts from all."""
    R = gather(states)
    problems = []
    if len(R["digests"]) > 1:
        problems.append("the calls ran different sources (source digests " + ", ".join(R["digests"]) + ")")
    ok = not R["failed"] and not problems and not (R["all_skipped"] and not R["dry"])
    L = []
    report_head(L.append, R, ok, problems)
    report_phases(L.append, R)
    report_tests(L.append, R)
    report_failures(L.append, R)
    return "\n".join(L) + "\n", ok


def book_files(d):
    """The files in d that belong in book/recorded/: transcripts of runs that
    exited 0 (with their metrics; tools/book would refuse a failed run) and the
    bench report when the bench measured (status 0, or 3 where the deadline cut
    it short)."""
    out = []
    for f in sorted(glob.glob(os.path.join(d, "ch[0-9][0-9]-*.txt"))):
        if "# exit: 0" not in read_lines(f):
            continue
        out.append(f)
        if os.path.exists(f[:-4] + ".json"):
            out.append(f[:-4] + ".json")
    try:
        with open(os.path.join(d, "bench.json")) as f:
            status = json.load(f).get("status")
    except (OSError, ValueError, AttributeError):
        status = None
    if status in (0, 3):
        out += sorted(glob.glob(os.path.join(d, "bench-*.md")) + glob.glob(os.path.join(d, "bench-*.json")))
    return out


def merge(inputs, report_dir):
    if not inputs:
        print("gpu-check: --merge needs folders or gpu-check-state.tar files", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu-check-merge.") as tmp:
        states = []
        for i, x in enumerate(inputs, 1):
            t = ""
            if os.path.isdir(x):
                found = sorted(glob.glob(os.path.join(x, "gpu-check-state.tar")) +
                               glob.glob(os.path.join(x, "*", "gpu-check-state.tar")))
                t = found[0] if found else ""
            elif os.path.isfile(x):
                t = x
            if not t:
                print(f"gpu-check: no gpu-check-state.tar in {x}", file=sys.stderr)
                return 2
            d = os.path.join(tmp, str(i))
            os.makedirs(d)
            with tarfile.open(t) as tf:
                for m in tf.getmembers():
                    if m.name.startswith("/") or ".." in m.name.split("/") or not (m.isfile() or m.isdir()):
                        continue
                    if hasattr(tarfile, "data_filter"):
                        tf.extract(m, d, filter="data")
                    else:
                        tf.extract(m, d)
            states.append(d)
        first = next((s for s in states if "gpu_count=0" not in read_lines(os.path.join(s, "facts.txt"))), states[0])
        facts = dict(l.split("=", 1) for l in read_lines(os.path.join(first, "facts.txt")) if "=" in l)
        kind = facts.get("kind") or "unknown"
        day = (facts.get("date") or "unknown").split(" ")[0]
        dest = report_dir or os.path.join(ROOT, "book", "recorded")
        os.makedirs(dest, exist_ok=True)
        n = 0
        for s in states:
            for f in book_files(os.path.join(s, "recorded")):
                shutil.copy(f, dest)
                n += 1
        text, ok = make_report(states)
        report = os.path.join(dest, f"gpu-check-{kind}-{day}.md")
        with open(report + ".tmp", "w") as f:
            f.write(text)
        os.replace(report + ".tmp", report)
    log(f"merged {len(states)} call(s): {report}; {n} book file(s) copied into {dest}")
    log("PASS" if ok else "FAIL (see the report)")
    return 0 if ok else 1


# ---------------------------------------------------------------------------
# A call (or stages by hand, or the dry run's walk)

def finish(ctx, report_dir, suffix):
    ctx.fact("total_s", int(ctx.now()))
    if ctx.logdir != ctx.work:
        for f in ("build.log", "ctest.log", "sanitizer.log", "record.log", "bench.log"):
            if os.path.exists(os.path.join(ctx.logdir, f)):
                shutil.copy(os.path.join(ctx.logdir, f), ctx.work)
    text, ok = make_report([ctx.work])
    kind = ctx.facts.get("kind", "unknown")
    day = time.strftime("%Y-%m-%d", time.gmtime())
    rdir = report_dir or ctx.work
    os.makedirs(rdir, exist_ok=True)
    report = os.path.join(rdir, f"gpu-check-{kind}-{day}{suffix}.md")
    with open(report + ".tmp", "w") as f:
        f.write(text)
    os.replace(report + ".tmp", report)
    if ctx.outdir:
        shutil.copy(report, ctx.outdir)
        try:
            with tarfile.open(os.path.join(ctx.outdir, "gpu-check-state.tar"), "w") as t:
                t.add(ctx.work, arcname=".")
        except OSError as e:
            log(f"could not write gpu-check-state.tar: {e}")
        files = book_files(ctx.recdir)
        if files:
            with tarfile.open(os.path.join(ctx.outdir, "recorded.tar"), "w") as t:
                for f in files:
                    t.add(f, arcname=os.path.relpath(f, ctx.work))
    print()
    for l in read_lines(os.path.join(ctx.work, "phases.tsv")):
        f = (l.split("\t") + [""] * 5)[:5]
        print(f"gpu-check: {f[0]:<11} {f[1]:<11} {f[2]:>5}s  {f[3]}")
    log(f"report: {rel(report)}" + (" (and in $OUT, with gpu-check-state.tar for --merge)" if ctx.outdir else ""))
    log(("PASSED" if ok else "FAILED") + f" in {int(ctx.now())} s")
    return ok


def parse_args(argv):
    a = {"plan": False, "call": 0, "stages": None, "dry": False, "build": os.path.join(ROOT, "build-sm90"),
         "python": None, "report_dir": None, "jobs": None, "test_timeout": GPU_TEST_CAP_S, "deadline": None,
         "merge": None, "digest": False, "print_env": False, "probe": False, "verdict": None}
    i = 0

    def val():
        nonlocal i
        if i + 1 >= len(argv):
            raise SystemExit(usage_error(f"{argv[i]} needs a value"))
        i += 1
        return argv[i]
    while i < len(argv):
        x = argv[i]
        if x == "--plan":
            a["plan"] = True
        elif x == "--call":
            v = val()
            if v not in [str(c["call"]) for c in CALLS]:
                raise SystemExit(usage_error(f"--call takes {' or '.join(str(c['call']) for c in CALLS)}"))
            a["call"] = int(v)
        elif x == "--stage" or x.startswith("--stage="):
            v = x.split("=", 1)[1] if "=" in x else val()
            st = [t.strip() for t in v.split(",") if t.strip()]
            bad = [t for t in st if t not in STAGES]
            if bad:
                raise SystemExit(usage_error(f"unknown stage: {', '.join(bad)}"))
            a["stages"] = (a["stages"] or []) + st
        elif x == "--no-gpu-ok":
            a["dry"] = True
        elif x == "--build-dir":
            a["build"] = os.path.abspath(val())
        elif x == "--python":
            a["python"] = val()
        elif x == "--report-dir":
            a["report_dir"] = os.path.abspath(val())
        elif x == "-j":
            a["jobs"] = positive(val(), "-j")
        elif x == "--test-timeout":
            a["test_timeout"] = positive(val(), "--test-timeout")
        elif x == "--deadline":
            a["deadline"] = positive(val(), "--deadline")
        elif x == "--merge":
            a["merge"] = argv[i + 1:]
            break
        elif x == "--digest":
            a["digest"] = True
        elif x == "--print-env":
            a["print_env"] = True
        elif x == "--probe-sanitizer":
            a["probe"] = True
        elif x == "--bench-verdict":
            if i + 2 >= len(argv):
                raise SystemExit(usage_error("--bench-verdict takes RC and JSON"))
            a["verdict"] = (argv[i + 1], argv[i + 2])
            i += 2
        elif x in ("-h", "--help"):
            print(__doc__)
            raise SystemExit(0)
        else:
            raise SystemExit(usage_error(f"unknown argument: {x}"))
        i += 1
    return a


def usage_error(msg):
    print(f"gpu-check: {msg}", file=sys.stderr)
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


def positive(v, what):
    if not v.isdigit() or int(v) <= 0:
        raise SystemExit(usage_error(f"{what} takes a positive whole number, got {v!r}"))
    return int(v)


def main(argv):
    a = parse_args(argv)
    if a["verdict"]:
        rc = int(a["verdict"][0]) if a["verdict"][0].lstrip("-").isdigit() else 1
        print("\t".join(bench_verdict(rc, a["verdict"][1])))
        return 0
    if a["digest"]:
        print(source_digest())
        return 0
    if a["merge"] is not None:
        return merge(a["merge"], a["report_dir"])
    if a["probe"]:
        with tempfile.TemporaryDirectory(prefix="gpu-check-probe.") as d:
            cc = sh(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]).split("\n")[0]
            ok, line = sanitizer_probe(find_csan(), d, cc.replace(".", "").strip() or "90")
        print(line)
        return 0 if ok else 1
    if a["print_env"]:
        ctx = Ctx(a["build"], python=a["python"])
        print(f"# {carry_setup(ctx.env)}", file=sys.stderr)
        py, _, ok = find_python(ctx, 120)
        for sub, var in (("fashion-mnist", "CT_FASHION_MNIST_DIR"), ("fortunes", "CT_FORTUNES_DIR")):
            if os.path.isdir(os.path.join(ROOT, ".carry", "data", sub)):
                ctx.env[var] = os.path.join(ROOT, ".carry", "data", sub)
        for v in ("PATH", "CMAKE_PREFIX_PATH", "CMAKE_LIBRARY_PATH", "CMAKE_INCLUDE_PATH", "CPATH", "LIBRARY_PATH",
                  "LD_LIBRARY_PATH", "CT_FASHION_MNIST_DIR", "CT_FORTUNES_DIR"):
            if ctx.env.get(v):
                print(f"export {v}={shlex_quote(ctx.env[v])}")
        print(f"# configure: cmake --preset sm90 -DCT_TORCH_PYTHON={shlex_quote(py)}")
        if not ok:
            print("# (no python3 here imports torch and numpy: the twin tests will skip)")
        return 0
    if a["plan"]:
        return 0 if print_plan(carry_sizes()) else 1
    if a["dry"]:
        return dry_run(a)
    if a["call"]:
        c = CALLS[a["call"] - 1]
        stages = c["stages"]
        cut = c["timeout_s"] - REPORT_S
        suffix = f"-call{a['call']}"
    elif a["stages"]:
        stages = [{"stage": "setup", "deadline_s": None}] + [
            dict(next((s for c in CALLS for s in c["stages"] if s["stage"] == st), {"stage": st}), deadline_s=None)
            for st in STAGES if st in a["stages"] and st != "setup"]
        if "build" not in a["stages"]:
            stages.insert(1, {"stage": "build", "deadline_s": None, "targets": []})
        cut = None
        suffix = "-" + "-".join(s["stage"] for s in stages[1:])
    else:
        print(__doc__.split("\n\n")[1])
        return 2
    if a["deadline"]:
        cut = a["deadline"] - REPORT_S if cut is None else min(cut, a["deadline"] - REPORT_S)
    ctx = Ctx(a["build"], jobs=a["jobs"], python=a["python"], test_cap=a["test_timeout"], call=a["call"])
    ctx.reset()
    log(f"call {a['call'] or '-'}: stages " + ", ".join(f"{s['stage']} (until {s['deadline_s']} s)"
                                                     if s.get("deadline_s") else s["stage"] for s in stages)
        + (f"; all cut at {cut} s" if cut else ""))
    run_stages(ctx, stages, cut_at=cut)
    return 0 if finish(ctx, a["report_dir"], suffix) else 1


def shlex_quote(s):
    import shlex
    return shlex.quote(s)


def dry_run(a):
    """--no-gpu-ok: the plan's arithmetic and the carry, then each call's
    stages by their dry-run behaviour, on the plan's deadlines."""
    ok = print_plan(carry_sizes())
    print()
    for c in CALLS:
        log(f"dry run of call {c['call']} (timeout_s {c['timeout_s']})")
        ctx = Ctx(a["build"], dry=True, jobs=a["jobs"], python=a["python"], test_cap=a["test_timeout"], call=c["call"])
        ctx.work = os.path.join(ctx.build, "gpu-check-dry", f"call{c['call']}")
        ctx.recdir = os.path.join(ctx.work, "recorded")
        ctx.logdir = ctx.work
        ctx.outdir = ""
        ctx.reset()
        run_stages(ctx, c["stages"], cut_at=c["timeout_s"] - REPORT_S)
        ok &= finish(ctx, a["report_dir"], f"-dry-call{c['call']}")
    log("dry run: " + ("the plan fits and every stage walked" if ok else "FAILED (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
