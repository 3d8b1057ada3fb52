#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A chapter's --quick CPU run under Valgrind memcheck: no invalid access, no definite leak.

    check_valgrind.py SUPP_DIR [--small-data DIR] [--launch LAUNCHER N] PROGRAM [ARGS...]

With --launch, N ranks of PROGRAM run under LAUNCHER (tools/launch), each
rank under its own memcheck.

Runs PROGRAM ARGS under memcheck with the project's suppressions
(SUPP_DIR/ct.supp, and Open MPI's own file where it exists) and fails when
memcheck reports any error (invalid reads or writes, uses of uninitialised
values, bad frees) or any definitely lost block, or when the program itself
fails. Exits 77 where valgrind is not installed.

With --small-data DIR, the program gets `--data DIR`: Fashion-MNIST cut to
its first 2560 training and 1000 test images (what --quick uses), written
there once from the installed dataset. Under memcheck, inflating and
converting all 70,000 images took most of a chapter's run; the cut files
keep the same IDX format, so the same reader code runs.
"""
import gzip
import os
import shutil
import struct
import subprocess
import sys
import time


SMALL = {"train": 2560, "t10k": 1000}


def small_fashion_mnist(out):
    """Writes the first SMALL[prefix] images and labels of each split to out (gzip'd IDX)."""
    src = os.environ.get("CT_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    os.makedirs(out, exist_ok=True)
    for prefix, n in SMALL.items():
        for kind, dims in (("images-idx3", 3), ("labels-idx1", 1)):
            name = f"{prefix}-{kind}-ubyte.gz"
            dst = os.path.join(out, name)
            if os.path.exists(dst):
                continue
            with gzip.open(os.path.join(src, name), "rb") as f:
                raw = f.read()
            head = list(struct.unpack(f">I{dims}I", raw[:4 + 4 * dims]))
            per_item = 1
            for d in head[2:]:
                per_item *= d
            head[1] = n
            body = raw[4 + 4 * dims:4 + 4 * dims + n * per_item]
            tmp = f"{dst}.{os.getpid()}.tmp"  # tests run in parallel write the same files
            with gzip.open(tmp, "wb") as f:
                f.write(struct.pack(f">I{dims}I", *head) + body)
            os.replace(tmp, dst)


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    vg = shutil.which("valgrind")
    if not vg:
        print("SKIP: valgrind is not installed")
        return 77
    supp = [os.path.join(argv[1], "ct.supp")]
    if os.path.exists("/usr/share/openmpi/openmpi-valgrind.supp"):
        supp.append("/usr/share/openmpi/openmpi-valgrind.supp")
    cmd = [vg, "--error-exitcode=99", "--leak-check=full", "--show-leak-kinds=definite",
           "--errors-for-leak-kinds=definite", "--track-origins=no", "-q", "--child-silent-after-fork=yes"]
    rest, launch, extra = argv[2:], [], []
    if rest[0] == "--small-data":
        small_fashion_mnist(rest[1])
        extra, rest = ["--data", rest[1]], rest[2:]
    if rest[0] == "--launch":
        launch, rest = [rest[1], "--nproc-per-node", rest[2]], rest[3:]
    cmd = launch + cmd + [f"--suppressions={s}" for s in supp] + rest + extra
    env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
    print("$", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    took = time.monotonic() - t0
    reports = [ln for ln in r.stderr.splitlines() if ln.startswith("==")]
    print(f"exit {r.returncode} after {took:.0f} s; {len(reports)} memcheck lines")
    if r.returncode != 0 or reports:
        print(r.stdout[-3000:])
        print(r.stderr[-12000:])
        print("FAIL: memcheck reported errors or the program failed" if r.returncode == 99 or reports
              else f"FAIL: the program exited {r.returncode}")
        return 1
    print("PASSED: no memcheck errors, no definite leaks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
