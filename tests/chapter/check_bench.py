#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""chapter.bench_smoke: tools/bench runs end to end and writes what it says.

usage: check_bench.py TOOLS_BENCH BUILD_DIR TORCH_PYTHON

Runs `tools/bench --quick --only ch05 --device cpu` on the chapters of
BUILD_DIR (ch05 and its twin under TORCH_PYTHON) and checks only that the
Markdown report and the JSON are written and that the ch05 steps/s row
carries numeric figures (each within its runs' min and max), a numeric
ratio, its id and the PyTorch version of its twin's column, that every run
records the load before and after it, that the JSON holds the
header facts (device, driver, CUDA, PyTorch, date, commit, load, mode), and
that the same JSON is written beside the report. It asserts no speed: the
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
    md, js = os.path.join(work, "report.md"), os.path.join(work, "report-copy.json")
    for f in (md, js, os.path.splitext(md)[0] + ".json"):
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
    # unstable: the runs spread over 10% of their median (a loaded machine); judged or not, never asserted
    if r.get("met") not in ("yes", "no", "unstable"):
        fail(f"ch05 row: met is {r.get('met')!r}")
    if r.get("a_torch") is not None or not r.get("b_torch") or r["b_torch"] != doc.get("torch"):
        fail(f"ch05 row: the columns' PyTorch is C {r.get('a_torch')!r}, twin {r.get('b_torch')!r}; expected "
             f"none and {doc.get('torch')!r}")
    for k in ("a", "b"):
        lo, hi, med = r.get(f"{k}_min"), r.get(f"{k}_max"), r.get(k)
        if not (isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo <= med <= hi):
            fail(f"ch05 row: {k} {med!r} is not within its runs' min {lo!r} and max {hi!r}")
    for rec in doc.get("run_log", []):
        for k in ("load_before", "load_after"):
            if not (isinstance(rec.get(k), list) and len(rec[k]) == 3):
                fail(f"run_log {rec.get('target')} {rec.get('side')} run {rec.get('run')}: {k} is {rec.get(k)!r}, "
                     "expected the three load averages")
    if r.get("id") != "ch05.steps":
        fail(f"ch05 row: id is {r.get('id')!r}, expected 'ch05.steps' (the appendix keys its text by it)")
    facts = ("device", "device_slug", "driver", "cuda", "torch", "date", "commit", "load_start", "load_end", "mode")
    missing = [k for k in facts if doc.get(k) in (None, "")]
    if missing:
        fail(f"the JSON lacks the header facts {missing}")
    if doc["mode"] != "quick":
        fail(f"mode is {doc['mode']!r} for a --quick run")
    ids = [x.get("id") for x in doc.get("rows", [])]
    if None in ids:
        fail("a row of the JSON has no id")
    # the JSON beside the report: the same document
    beside = os.path.splitext(md)[0] + ".json"
    with open(beside, encoding="utf-8") as f:
        if json.load(f).get("rows") != doc["rows"]:
            fail(f"{beside} does not hold the report's rows")
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
