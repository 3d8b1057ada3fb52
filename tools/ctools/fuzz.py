#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/fuzz: runs the libFuzzer targets of tests/fuzz for a bounded time each.

    tools/fuzz [--seconds S] [--build DIR] [--only idx,cli,...]

Needs the `fuzz` preset built (cmake --preset fuzz && cmake --build --preset
fuzz; tools/test does both). Each target starts from its seed corpus
(tests/fuzz/corpus/NAME, copied, never modified) under AddressSanitizer and
UBSan, runs S seconds (default 60), and reports the executions it reached
and the coverage. A crash, a sanitizer report or a leak fails the run: the
input that did it is kept as build-fuzz/artifacts/NAME/crash-*, to be added
to the seed corpus as a regression test once fixed. Exit 0 when every target
ran clean, 1 otherwise, 2 on bad arguments.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository
TARGETS = ("idx", "safetensors", "device", "cli", "jit")


def main(argv):
    p = argparse.ArgumentParser(prog="tools/fuzz", description="Run the libFuzzer targets for a bounded time.")
    p.add_argument("--seconds", type=int, default=60, help="seconds each target runs (default: 60)")
    p.add_argument("--build", default=os.path.join(ROOT, "build-fuzz"),
                   help="the fuzz preset's build folder (default: build-fuzz/)")
    p.add_argument("--only", default=",".join(TARGETS),
                   help="comma-separated targets (default: " + ",".join(TARGETS) + ")")
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n]
    bad = [n for n in names if n not in TARGETS]
    if bad or a.seconds < 1:
        p.error(f"--only takes {','.join(TARGETS)}; --seconds >= 1")
    failed = []
    for name in names:
        exe = os.path.join(a.build, f"fuzz_{name}")
        if not os.access(exe, os.X_OK):
            print(f"fuzz: {exe} is not built (cmake --preset fuzz && cmake --build --preset fuzz)", file=sys.stderr)
            return 1
        work = os.path.join(a.build, "corpus", name)
        arts = os.path.join(a.build, "artifacts", name)
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "tests", "fuzz", "corpus", name), work)
        os.makedirs(arts, exist_ok=True)
        env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive",
                   ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        if name == "cli":  # its exits jump back out of the parser: the parser's strings stay behind
            env["ASAN_OPTIONS"] = "detect_leaks=0"
        cmd = [exe, f"-max_total_time={a.seconds}", "-timeout=10", "-rss_limit_mb=2048", "-max_len=4096",
               f"-artifact_prefix={arts}/", work]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=a.build)
        done = re.findall(r"Done (\d+) runs in (\d+) second", r.stderr)
        cov = re.findall(r"cov: (\d+) ft: (\d+)", r.stderr)
        runs = int(done[-1][0]) if done else 0
        line = f"fuzz_{name}: {runs} executions in {a.seconds} s" + (f", cov {cov[-1][0]}, features {cov[-1][1]}"
                                                                       if cov else "")
        if r.returncode != 0 or not done:
            failed.append(name)
            print(f"{line}: FAILED (exit {r.returncode}); the input is under {arts}\n{r.stderr[-4000:]}")
        else:
            print(line + ": clean")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
