#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A chapter's plain default, run as a reader runs it: `./chNN`, no flags.

    check_default.py PROGRAM WORKDIR [--budget S] [--grace S]

The program runs in a fresh WORKDIR (never the source tree) on a pseudo
terminal, as it does in a reader's shell, with the environment a shell gives
(the test harness's own variables removed: no allocator poisoning, no OpenMP
wait policy), so it chooses its device, sizes and output files by itself.

- When it ends within the budget (default 75 s: "about a minute" on a 2-core
  CPU), it must exit 0 and its first line must name the device.
- When it is still running at the budget, it must be visibly at work: it
  printed something in the last 30 s (a progress bar redraws on a terminal).
  Then it gets Ctrl-C, as a terminal sends it (SIGINT to its whole process
  group), and must stop within the grace period (default 120 s) with the
  documented message ("interrupted: stopping after this step") and exit
  status 130 (the shell's code for a program Ctrl-C ended), leaving no
  temporary file (*.tmp*) in WORKDIR and no process of its group behind.

Python 3's standard library only.
"""
import argparse
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time

INTERRUPTED = "interrupted: stopping after this step"
# What a reader's shell would not have: the test harness's settings.
HARNESS_VARS = ("CT_POISON_ALLOC", "CT_FIXTURE_DIR", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "ASAN_OPTIONS",
                "LSAN_OPTIONS", "UBSAN_OPTIONS", "CT_TEST_SIGINT_AFTER")


def fail(msg, out=""):
    if out:
        print("--- output (last 4000 characters) ---\n" + out[-4000:] + "\n---")
    print(f"FAIL: {msg}")
    sys.exit(1)


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("program")
    ap.add_argument("workdir")
    ap.add_argument("--budget", type=float, default=75.0, help="seconds a default run may take (default 75)")
    ap.add_argument("--grace", type=float, default=120.0,
                    help="seconds to stop after Ctrl-C (default 120)")
    a = ap.parse_args()

    prog = os.path.abspath(a.program)
    name = os.path.basename(prog)
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    env = {k: v for k, v in os.environ.items() if k not in HARNESS_VARS}
    env.setdefault("TERM", "xterm")

    master, slave = pty.openpty()
    t0 = time.monotonic()
    print(f"$ cd {a.workdir} && ./{name}", flush=True)
    p = subprocess.Popen([prog], cwd=a.workdir, env=env, stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True, close_fds=True)
    os.close(slave)
    out = bytearray()
    last_output = t0

    def pump(timeout):
        nonlocal last_output
        r, _, _ = select.select([master], [], [], timeout)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return False
            if data:
                out.extend(data)
                last_output = time.monotonic()
            return bool(data)
        return True

    interrupted_at = None
    while True:
        pump(0.5)
        if p.poll() is not None:
            break
        now = time.monotonic()
        if interrupted_at is None and now - t0 > a.budget:
            text = out.decode("utf-8", "replace")
            if now - last_output > 30:
                os.killpg(p.pid, signal.SIGKILL)
                fail(f"{name} printed nothing for {now - last_output:.0f} s after {now - t0:.0f} s: "
                     "a long default must show its progress", text)
            print(f"{name}: still running after {now - t0:.0f} s, output growing "
                  f"({len(out)} bytes); sending Ctrl-C", flush=True)
            os.killpg(p.pid, signal.SIGINT)
            interrupted_at = now
        if interrupted_at is not None and now - interrupted_at > a.grace:
            os.killpg(p.pid, signal.SIGKILL)
            fail(f"{name} did not stop within {a.grace:.0f} s of Ctrl-C", out.decode("utf-8", "replace"))
    while pump(0.2):  # what is left in the terminal
        pass
    os.close(master)
    took = time.monotonic() - t0
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    rc = p.returncode
    first = next((t for t in re.split(r"[\r\n]", text) if t.strip()), "")
    if not first.startswith("device: "):
        fail(f"{name}'s first line should name the device, got {first!r}", text)
    for _ in range(50):  # ranks or helpers of the run must not outlive it
        if not group_alive(p.pid):
            break
        time.sleep(0.1)
    else:
        os.killpg(p.pid, signal.SIGKILL)
        fail(f"processes of {name}'s group were still running after it ended", text)
    left = [f for f in os.listdir(a.workdir) if ".tmp" in f]
    if left:
        fail(f"{name} left temporary files in {a.workdir}: {left}", text)
    if interrupted_at is None:
        if rc != 0:
            fail(f"{name} with no flags exited {rc} after {took:.1f} s", text)
        print(f"{name}: the plain default finished in {took:.1f} s, exit 0")
        print("PASS")
        return
    if INTERRUPTED not in text:
        fail(f"{name} on Ctrl-C should say {INTERRUPTED!r}", text)
    if rc not in (130, -signal.SIGINT):
        fail(f"{name} on Ctrl-C should exit 130, got {rc}", text)
    print(f"{name}: trained for {interrupted_at - t0:.0f} s with its progress showing, stopped "
          f"{time.monotonic() - interrupted_at:.1f} s after Ctrl-C with exit {rc}")
    print("PASS")


if __name__ == "__main__":
    main()
