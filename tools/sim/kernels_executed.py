#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""kernels_executed.py: "kernels executed: N of M" on the SIMT emulator.

M: every __global__ function defined in the tree's CUDA sources (common/ and
chapters/, *.cu and *.cuh; tests/ and tools/ hold the emulator's own planted
kernels and are not counted). N: those the sim tests launched, from the
launch log the emulator appends to at exit (CT_SIM_LAUNCH_LOG; a template's
instantiations count for its name). A kernel never launched is listed with
the reason tools/sim/not_yet.txt gives for its file (or for file:kernel);
one with no reason there fails the run (exit 1).
"""
import argparse
import fnmatch
import os
import re
import sys

KERNEL = re.compile(r"__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:void\s+)?"
                    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def kernels(root):
    found = {}  # name -> relative path
    for top in ("common", "chapters"):
        for d, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".cu", ".cuh")):
                    continue
                path = os.path.join(d, f)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as fh:
                    for m in KERNEL.finditer(strip_comments(fh.read())):
                        found.setdefault(m.group(1), rel)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--log", action="append", required=True,
                    help="a launch log (repeatable; one that does not exist counts nothing)")
    ap.add_argument("--not-yet", default=os.path.join(os.path.dirname(__file__), "not_yet.txt"))
    a = ap.parse_args()
    all_k = kernels(a.root)
    launched = {}
    for log in a.log:
        if not os.path.exists(log):
            continue
        with open(log, encoding="utf-8") as fh:
            for line in fh:
                name, _, count = line.rstrip("\n").partition("\t")
                base = re.sub(r"<.*", "", name).strip().split("::")[-1]
                launched[base] = launched.get(base, 0) + int(count or 0)
    reasons = []
    with open(a.not_yet, encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and not line.startswith("#"):
                glob, _, why = line.rstrip("\n").partition("\t")
                reasons.append((glob, why))
    ran = sorted(k for k in all_k if launched.get(k))
    print(f"kernels executed: {len(ran)} of {len(all_k)}")
    for k in ran:
        print(f"  launched  {k:32s} {all_k[k]}  ({launched[k]} launches)")
    unexplained = 0
    for k in sorted(set(all_k) - set(ran), key=lambda k: (all_k[k], k)):
        why = next((w for g, w in reasons
                    if fnmatch.fnmatch(all_k[k], g) or fnmatch.fnmatch(f"{all_k[k]}:{k}", g)), None)
        if why is None:
            unexplained += 1
            why = "NO REASON GIVEN (tools/sim/not_yet.txt): it must be launched by a sim test"
        print(f"  not yet   {k:32s} {all_k[k]}: {why}")
    if not all_k:
        print("no __global__ kernel found under", a.root)
        return 1
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
