#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A rank that fails its setup is reported by every rank, in the program's words.

    check_agree.py LAUNCH DIST_AGREE [CH14]

dist_agree on 3 ranks under tools/launch. ok: every rank agrees, exit 0.
missing: rank 1 cannot open its corpus; rank 1 prints its own message,
ranks 0 and 2 print "dist_agree: rank 1 failed: <that message>", the job
exits non-zero within 60 s, and nothing in it is MPI's abort or kill noise
(without the agreement ranks 0 and 2 would wait in a collective until mpirun
killed them). two: ranks 1 and 2 fail, rank 0 names rank 1. long: a
3000-byte message reaches the others cut to 1023 bytes ending in "...".
With CH14, the chapter on 2 ranks where rank 1 gets another --corpus: a
missing file (rank 1 says why, rank 0 "ch14: rank 1 failed: ..."), and a
text of the same length with another vocabulary (both ranks: "the ranks read
different texts ... a different vocabulary; give every rank the same
--corpus").
"""
import os
import tempfile
import subprocess
import sys
import time

NOISE = ("MPI_ABORT", "mpirun has exited due to", "exited on signal", "killed", "Killed", "without calling")
OWN = "dist_agree: cannot open --corpus /nonexistent/corpus.txt (rank {})"


def run(launch, prog, mode, n=3, args=None):
    t0 = time.monotonic()
    try:
        r = subprocess.run([launch, "--nproc-per-node", str(n), prog] + (args or [mode]), capture_output=True,
                           text=True, timeout=90)
    except subprocess.TimeoutExpired:
        return None, f"{mode}: still running after 90 s (a rank waits for one that gave up)"
    took = time.monotonic() - t0
    print(f"{mode}: exit {r.returncode} after {took:.1f} s")
    return r, f"{mode}: exit {r.returncode} after {took:.1f} s\n--- stdout:\n{r.stdout}--- stderr:\n{r.stderr}" \
        if took <= 60 else f"{mode}: took {took:.1f} s"


def check_ch14(launch, ch14):
    """1 when the chapter's ranks do not all stop in its own words."""
    with tempfile.TemporaryDirectory() as d:
        a, b, wrap = os.path.join(d, "a.txt"), os.path.join(d, "b.txt"), os.path.join(d, "rank1")
        with open(a, "w") as f:
            f.write("the cat sat on the mat.\n" * 400)
        with open(b, "w") as f:
            f.write("the dog sat on the rug.\n" * 400) # as long, another vocabulary
        with open(wrap, "w") as f: # rank 1 reads RANK1_CORPUS instead of the --corpus the others read
            f.write('#!/bin/sh\nif [ "$RANK" = 1 ]; then exec "%s" --quick --corpus "$RANK1_CORPUS"; fi\n'
                    'exec "%s" --quick --corpus "%s"\n' % (ch14, ch14, a))
        os.chmod(wrap, 0o755)
        own = "ch14: --corpus: /nonexistent/corpus.txt: cannot open"
        cases = {"/nonexistent/corpus.txt": [own, "ch14: rank 1 failed: " + own[len("ch14: "):]],
                 b: ["ch14: the ranks read different texts: --corpus %s gives rank %d 9600 characters" % (c, k)
                     for k, c in ((0, a), (1, b))]}
        for corpus, want in cases.items():
            os.environ["RANK1_CORPUS"] = corpus
            r, why = run(launch, wrap, "ch14 " + corpus, n=2, args=[])
            if r is None or "took" in why.splitlines()[0]:
                print(f"FAIL: {why}")
                return 1
            lines = [line for line in r.stderr.splitlines() if line.startswith("ch14: ")]
            noise = [n for n in NOISE if n in r.stderr or n in r.stdout]
            ok = len(lines) == 2 and all(any(line.startswith(w) for line in lines) for w in want)
            if corpus == b:
                ok = ok and all("a different vocabulary; give every rank the same --corpus" in line for line in lines)
            if r.returncode == 0 or not ok or noise:
                print(f"FAIL: {why}\n--- wanted lines starting:\n" + "\n".join(want) +
                      (f"\n--- noise found: {noise}" if noise else ""))
                return 1
    return 0


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    launch, prog = argv[1:3]
    r, why = run(launch, prog, "ok")
    if r is None or r.returncode != 0 or sorted(r.stdout.splitlines()) != [f"dist_agree: rank {k} agreed"
                                                                           for k in range(3)]:
        print(f"FAIL: {why}")
        return 1
    cases = {
        "missing": [OWN.format(1)] + ["dist_agree: rank 1 failed: " + OWN.format(1)[len("dist_agree: "):]] * 2,
        "two": [OWN.format(1), OWN.format(2), "dist_agree: rank 1 failed: " + OWN.format(1)[len("dist_agree: "):]],
        "long": ["dist_agree: " + "x" * 3000] + ["dist_agree: rank 1 failed: " + "x" * 1020 + "..."] * 2,
    }
    for mode, want in cases.items():
        r, why = run(launch, prog, mode)
        if r is None or "took" in why.splitlines()[0]:
            print(f"FAIL: {why}")
            return 1
        ours = sorted(line for line in r.stderr.splitlines() if line.startswith("dist_agree: "))
        noise = [n for n in NOISE if n in r.stderr or n in r.stdout]
        if r.returncode == 0 or ours != sorted(want) or noise or "agreed" in r.stdout:
            print(f"FAIL: {why}\n--- wanted these program lines:\n" + "\n".join(want) +
                  (f"\n--- noise found: {noise}" if noise else ""))
            return 1
    if len(argv) == 4 and check_ch14(launch, argv[3]):
        return 1
    print("ok: every rank names the failing rank in the program's words, and exits 1 with the others")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
