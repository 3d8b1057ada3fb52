#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Every chapter's --quick run is clean under CT_STREAM_SANITIZER=2.

    check_sanitizer.py WORKDIR ch01=PROGRAM ch02=PROGRAM ...

Each program runs once with --quick --device cpu in WORKDIR/chNN, stdout and
stderr in one stream (so a report is placed in its "== section =="). It
passes when every run exits 0 and prints no "sanitizer:" report, except in
the sections that show the checker on purpose (ALLOWED).
"""
import os
import re
import subprocess
import sys

ALLOWED = {"ch12": {"race", "record_stream"}}  # deliberate races, shown and counted by the chapter


def main():
    work = sys.argv[1]
    progs = dict(a.split("=", 1) for a in sys.argv[2:])
    env = dict(os.environ, CT_STREAM_SANITIZER="2")
    env.setdefault("CT_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    bad = []
    for ch in sorted(progs):
        d = os.path.join(work, ch)
        os.makedirs(d, exist_ok=True)
        p = subprocess.run([progs[ch], "--quick", "--device", "cpu"], cwd=d, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, errors="replace", timeout=600)
        section, reports = "", []
        for line in p.stdout.splitlines():
            m = re.match(r"== (.+) ==$", line)
            if m:
                section = m.group(1)
            elif "sanitizer: " in line or "stream-ordering race" in line:
                if section not in ALLOWED.get(ch, ()):
                    reports.append("[%s] %s" % (section, line))
        print("%s: exit %d, %d report(s) outside the deliberate sections" % (ch, p.returncode, len(reports)))
        if p.returncode != 0 or reports:
            bad.append(ch)
            for r in reports[:5]:
                print("  " + r)
            if p.returncode != 0:
                print("  last lines:\n    " + "\n    ".join(p.stdout.splitlines()[-8:]))
    if bad:
        print("FAIL: " + ", ".join(bad))
        return 1
    print("all clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
