#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""chapter.bench_smoke: tools/bench runs end to end and writes what it says.

usage: check_bench.py TOOLS_BENCH BUILD_DIR TORCH_PYTHON

Runs `tools/bench --quick --only ch05 --device cpu` on the chapters of
BUILD_DIR (ch05 and its twin under TORCH_PYTHON) and checks only that the
Markdown report and the JSON are written and that the ch05 steps/s row
carries numeric figures, a numeric ratio and its id, that the JSON holds the
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
    if r.get("met") not in ("yes", "no"):
        fail(f"ch05 row: met is {r.get('met')!r}")
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
