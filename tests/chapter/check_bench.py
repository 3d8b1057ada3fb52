#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""chapter.bench_smoke: tools/bench runs end to end and writes what it says.

usage: check_bench.py TOOLS_BENCH BUILD_DIR TORCH_PYTHON

Runs `tools/bench --quick --only ch05 --device cpu` on the chapters of
BUILD_DIR (ch05 and its twin under TORCH_PYTHON) and checks only that the
Markdown report and the JSON are written and that the ch05 steps/s row
carries numeric figures and a numeric ratio. It asserts no speed: the
targets are measured, not asserted (see tools/bench). Exit 77 where
TORCH_PYTHON cannot import torch, or ch05 is not built.
"""
import json
import math
import os
import subprocess
import sys


def fail(msg):
    print(f"check_bench: FAIL: {msg}")
    sys.exit(1)


def main():
    bench, build, python = sys.argv[1:4]
    if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"check_bench: {python} cannot import torch: skipped")
        return 77
    if not os.access(os.path.join(build, "ch05"), os.X_OK):
        print(f"check_bench: {build}/ch05 is not built: skipped")
        return 77
    work = os.path.join(build, "bench-smoke")
    os.makedirs(work, exist_ok=True)
    md, js = os.path.join(work, "report.md"), os.path.join(work, "report.json")
    for f in (md, js):
        if os.path.exists(f):
            os.unlink(f)
    env = dict(os.environ)
    env.pop("CT_BENCH_OUT", None)  # no copies elsewhere
    cmd = [sys.executable, bench, "--quick", "--only", "ch05", "--device", "cpu", "--build", build,
           "--python", python, "--work", work, "--out", md, "--json", js]
    print("check_bench: " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)
    print(p.stdout + p.stderr)
    if p.returncode != 0:
        fail(f"tools/bench exited {p.returncode}")
    if not os.path.isfile(md) or not os.path.isfile(js):
        fail("the report or the JSON was not written")
    with open(js, encoding="utf-8") as f:
        doc = json.load(f)
    rows = [r for r in doc.get("rows", []) if r.get("target", "").startswith("ch05 training steps/s")]
    if len(rows) != 1:
        fail(f"expected one ch05 steps/s row in the JSON, got {len(rows)}")
    r = rows[0]
    for k in ("a", "b", "ratio"):
        if not isinstance(r.get(k), (int, float)) or not math.isfinite(r[k]) or r[k] <= 0:
            fail(f"ch05 row: {k} is {r.get(k)!r}, expected a positive number")
    if abs(r["ratio"] - r["a"] / r["b"]) > 1e-9 * r["ratio"]:
        fail("ch05 row: ratio is not C / PyTorch")
    if r.get("met") not in ("yes", "no"):
        fail(f"ch05 row: met is {r.get('met')!r}")
    with open(md, encoding="utf-8") as f:
        text = f.read()
    for needle in ("# Bench:", "| Commit |", "| Threads |", "ch05 training steps/s", "## Commands",
                   f"{r['ratio']:.3f}"):
        if needle not in text:
            fail(f"the report lacks {needle!r}")
    print(f"check_bench: ok: ch05 C/PyTorch steps/s ratio {r['ratio']:.3f} (not asserted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
