#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""lab.sim: `tools/lab check --sim only` grades ch04's CUDA exercise on the SIMT emulator.

Usage: check_lab_sim.py ROOT WORKDIR

One student copy of ch04 (tools/lab make), graded twice with
`tools/lab check ch04 COPY --sim only` (its build-sim reused, so only the
kernel file is rebuilt the second time):
  1. a wrong solution, the reference without its second __syncthreads() (the
     mistake ch04's exercise 4 asks for): FAIL 0/1, the race check names it;
  2. the reference pasted back: PASS 1/1.
(The stub as handed out fails too: `tools/lab check ch04 COPY --sim only`
on a fresh copy; not repeated here, to keep the test's time down.)
Each time the exercise is marked as graded on the emulator with its speed
needing a GPU. The independent reference is the region's own code in ROOT.

Exit 0: passed; 1: failed (the reason is printed).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

FILE = "chapters/ch04_matmul/ch04_kernels.cu"


def fail(msg, out=None):
    if out:
        print(out[-6000:])
    print(f"FAIL: {msg}")
    sys.exit(1)


def region(text):
    """(before, body, after) of the one lab region of text."""
    m = re.search(r"(.*?/\*\s*LAB BEGIN:[^\n]*\n)(.*?)(^[ \t]*/\*\s*LAB END\s*\*/.*)", text, re.S | re.M)
    if not m:
        fail(f"no lab region in {FILE}")
    return m.group(1), m.group(2), m.group(3)


def grade(root, copy, jobs, tag):
    js = copy.parent / f"lab_sim_{tag}.json"
    if js.exists():
        js.unlink()
    cmd = [sys.executable, str(root / "tools" / "lab"), "check", "ch04", str(copy), "--sim", "only",
           "-j", str(jobs), "--json", str(js)]
    print("$", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1700)
    print(r.stdout)
    if r.returncode != 0:
        fail(f"{tag}: tools/lab check exited {r.returncode}")
    report = json.loads(js.read_text())
    exs = [e for e in report["exercises"] if e["file"] == FILE]
    if len(exs) != 1:
        fail(f"{tag}: expected one exercise in {FILE}, got {exs}")
    ex = exs[0]
    if ex.get("graded_on") != "emulator" or "needs a GPU" not in ex.get("speed", ""):
        fail(f"{tag}: the exercise is not marked as graded on the emulator with its speed needing a GPU: {ex}")
    if "speed: needs a GPU" not in r.stdout:
        fail(f"{tag}: the output does not say that speed needs a GPU")
    return ex, report, r.stdout


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    root, work = Path(argv[0]).resolve(), Path(argv[1]).resolve()
    work.mkdir(parents=True, exist_ok=True)
    copy = work / "ch04"
    jobs = max(1, min(2, len(os.sched_getaffinity(0))))
    cmd = [sys.executable, str(root / "tools" / "lab"), "make", "ch04", str(copy), "--force"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        fail("tools/lab make ch04 failed", r.stdout)

    ref_before, ref_body, ref_after = region((root / FILE).read_text(encoding="utf-8"))
    syncs = [i for i, l in enumerate(ref_body.splitlines(True)) if "__syncthreads();" in l]
    if len(syncs) < 2:
        fail(f"the reference region has {len(syncs)} __syncthreads(), expected 2 (update this test)")
    lines = ref_body.splitlines(True)
    wrong_body = "".join(l for i, l in enumerate(lines) if i != syncs[-1])

    def paste(body):
        path = copy / FILE
        before, _, after = region(path.read_text(encoding="utf-8"))
        path.write_text(before + body + after, encoding="utf-8")

    paste(wrong_body)
    ex, report, out = grade(root, copy, jobs, "wrong")
    if ex["result"] != "fail" or report["score"] != 0:
        fail(f"without the second __syncthreads(): expected FAIL 0/1, got {ex['result']} {report['score']}/{report['max']}")
    if not re.search(r"FAILED\s+sim\.chapters_racecheck", out) or not re.search(r"racecheck: [\w-]+ hazard", out):
        fail("without the second __syncthreads(): the race check did not report it")
    print("ok: a missing __syncthreads() fails on the emulator, reported by the race check")

    paste(ref_body)
    ex, report, out = grade(root, copy, jobs, "reference")
    if ex["result"] != "pass" or report["score"] != 1 or report["max"] != 1:
        fail(f"the reference: expected PASS 1/1, got {ex['result']} {report['score']}/{report['max']}")
    print("ok: the reference passes on the emulator")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
