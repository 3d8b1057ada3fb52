#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""dist.launch_signal: SIGTERM or SIGINT sent to tools/launch reaches every rank, and no rank or
mpirun outlives the launcher (issue 23). Usage: check_launch_signal.py LAUNCH. For each signal two
ranks of `sleep MARKER` start, the launcher gets the signal, and within 40 s the launcher has
exited and no process with the marker is alive (any found is killed, by its pid, and fails the
test). Python 3 standard library only."""
import os
import signal
import subprocess
import sys
import time


def alive(marker):
    """The pids of live (not zombie) `sleep MARKER` processes."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if args and args[0].endswith(b"sleep") and marker.encode() in args and st[st.rfind(")") + 2] != "Z":
            out.append(int(d))
    return out


def one(launch, sig):
    marker = f"317.{os.getpid()}{int(sig)}"
    p = subprocess.Popen([sys.executable, launch, "--nproc-per-node", "2", "sleep", marker],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    while len(alive(marker)) < 2 and time.monotonic() - t0 < 60 and p.poll() is None:
        time.sleep(0.2)
    started = len(alive(marker))
    p.send_signal(sig)
    try:
        rc = p.wait(timeout=40)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = None
    time.sleep(1)
    left = alive(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    name = signal.Signals(sig).name
    print(f"{name}: {started} ranks were running; launcher exit {rc}; left running: {left}", flush=True)
    ok = started == 2 and rc is not None and not left
    if not ok:
        print(f"FAIL: {name} to tools/launch: " + ("the ranks did not start" if started != 2 else
              "the launcher did not exit" if rc is None else f"ranks outlived it: {left}"), flush=True)
    return ok


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ok = all([one(argv[1], signal.SIGTERM), one(argv[1], signal.SIGINT)])
    if ok:
        print("PASS: SIGTERM and SIGINT to the launcher end every rank")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
