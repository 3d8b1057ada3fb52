#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A rank that dies or fails ends the whole job, non-zero, within 60 s.

    check_fault.py LAUNCH DIST_FAULT DIST_TEST

For each way rank 1 can go (exit 3, SIGKILL, a ct error then exit 1) while
rank 0 waits in an all-reduce: tools/launch exits non-zero in under 60 s and
says a rank failed. And a program started without the launcher exits 1
naming the missing variable and tools/launch, instead of hanging.
"""
import subprocess
import sys
import time


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    launch, fault, plain = argv[1:]
    for mode in ("exit", "kill", "error"):
        t0 = time.monotonic()
        try:
            r = subprocess.run([launch, "--nproc-per-node", "3", fault, mode], capture_output=True, text=True,
                               timeout=90)
        except subprocess.TimeoutExpired:
            print(f"FAIL: {mode}: the job still ran after 90 s (a hang)")
            return 1
        took = time.monotonic() - t0
        print(f"{mode}: exit {r.returncode} after {took:.1f} s")
        if r.returncode == 0 or took > 60 or "launch: the job failed" not in r.stderr:
            print(f"FAIL: {mode}: exit {r.returncode} after {took:.1f} s\n--- stderr:\n{r.stderr}")
            return 1
    r = subprocess.run([plain], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in __import__("os").environ.items()
                            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")})
    if r.returncode != 1 or "RANK expected, but not set" not in r.stderr or "tools/launch" not in r.stderr:
        print(f"FAIL: without the launcher: exit {r.returncode}\n{r.stderr}")
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
