#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""chapter.twins_torch2: every PyTorch twin runs on PyTorch 2.x without a warning.

usage: check_twins_torch2.py REPO_ROOT WORK_DIR [TWIN_TAG...]

The bench compares the C chapters with their twins on a current PyTorch
(tools/bootstrap --group torch2 makes the venv .venv-torch2/ at the
repository root; CT_TORCH2_VENV names another). This runs each twin
(chapters/chNN_*/chNN_pytorch.py, or only the tags given) with --quick
--device cpu under that venv's Python, with Python's warnings turned into
errors: DeprecationWarning, FutureWarning and UserWarning (PYTHONWARNINGS,
so the twins' DataLoader workers and DDP ranks inherit it). The twins with a
--compile flag (ch06, ch09, ch14) run once more with it: torch.compile on
the CPU. A twin passes when it exits 0; one that warns fails with the
warning's traceback, since an error it now is.

Allowed: none of Python's warnings. Log lines that torch's own loggers write
(not Python warnings, so not errors here) are shown, not failed: where the
venv has no triton (tools/bootstrap leaves it out: GPU kernels only) or no
CUDA runtime is in use, torch logs that at the first torch.compile.

Exit 77 (skipped) where the venv does not exist or cannot import torch.
Python 3's standard library only.
"""
import glob
import os
import re
import subprocess
import sys
import time

WARNINGS = "error::DeprecationWarning,error::FutureWarning,error::UserWarning"
COMPILE = ("ch06", "ch09", "ch14")
# torch's own log lines (glog style, e.g. "W1127 16:56:58.569000 21328 torch/...] text") that are
# expected on this venv, with the reason; any other such line is shown as a note.
EXPECTED_LOG = [
    (re.compile(r"triton not found"), "tools/bootstrap leaves triton out: it builds GPU kernels only"),
    (re.compile(r"No CUDA runtime is found"), "a CPU run: torch.utils.cpp_extension looks for CUDA and says so"),
]
LOG_LINE = re.compile(r"^\[?(?:rank\d+\]:\s*)?[WE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ (.*)$")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    root, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    only = sys.argv[3:]
    venv = os.path.abspath(os.environ.get("CT_TORCH2_VENV") or os.path.join(root, ".venv-torch2"))
    py = os.path.join(venv, "bin", "python")
    if not os.access(py, os.X_OK):
        print(f"SKIP: no PyTorch 2.x venv at {venv} (make it with tools/bootstrap --group torch2)")
        return 77
    probe = subprocess.run([py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"SKIP: {py} cannot import torch: {probe.stderr.strip().splitlines()[-1:]}")
        return 77
    version = probe.stdout.strip()
    if not re.match(r"([2-9]|\d\d+)\.", version):
        print(f"SKIP: {py} has torch {version}, not 2.x")
        return 77
    print(f"PyTorch {version} ({py}); warnings as errors: {WARNINGS}", flush=True)
    twins = sorted(glob.glob(os.path.join(root, "chapters", "ch*_*", "ch*_pytorch.py")))
    runs = []
    for t in twins:
        tag = os.path.basename(t).split("_")[0]
        if only and tag not in only:
            continue
        runs.append((tag, t, []))
        if tag in COMPILE:
            runs.append((tag, t, ["--compile"]))
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = WARNINGS
    env.pop("PYTHONPATH", None)
    failed, notes = [], []
    for tag, twin, extra in runs:
        name = tag + (" " + " ".join(extra) if extra else "")
        d = os.path.join(work, tag + ("-compile" if extra else ""))
        os.makedirs(d, exist_ok=True)
        cmd = [py, twin, "--quick", "--device", "cpu", "--metrics", os.path.join(d, "metrics.json")] + extra
        t0 = time.monotonic()
        try:
            p = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=900)
            rc, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = 124, f"timed out after 900 s\n{e.stdout or ''}{e.stderr or ''}"
        secs = time.monotonic() - t0
        with open(os.path.join(d, "output.log"), "w", encoding="utf-8") as f:
            f.write(out)
        logged = []
        for line in out.splitlines():
            m = LOG_LINE.match(line.strip())
            if m:
                why = next((w for rx, w in EXPECTED_LOG if rx.search(m.group(1))), None)
                logged.append(f"{m.group(1)}" + (f"  [expected: {why}]" if why else ""))
        warned = [ln for ln in out.splitlines() if re.search(r"\b(Deprecation|Future|User)Warning\b", ln)]
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
        print(f"{name:<16} {status:<18} {secs:6.1f} s", flush=True)
        for ln in sorted(set(logged)):
            print(f"    torch log: {ln}")
            if "[expected" not in ln:
                notes.append(f"{name}: torch log: {ln}")
        if rc != 0:
            failed.append(name)
            print("    " + "\n    ".join((sorted(set(warned)) or out.strip().splitlines()[-15:])))
            print(f"    (whole output: {os.path.join(d, 'output.log')})")
    print()
    for n in notes:
        print(f"note: {n}")
    if failed:
        print(f"FAIL: {len(failed)} of {len(runs)} twin runs warned or failed under PyTorch {version}: "
              + ", ".join(failed))
        return 1
    print(f"all {len(runs)} twin runs clean under PyTorch {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
