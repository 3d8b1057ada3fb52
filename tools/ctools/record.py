#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/record: run one chapter and keep its output as a transcript for the book.

    tools/record [--build DIR] [--device cpu|cuda] [--out-dir DIR] [--tag NAME] chNN [-- FLAGS...]

Runs ./chNN from the build directory with --device and FLAGS, and writes
book/recorded/chNN-<machine-slug>-<UTC date>.txt in the transcript format of
book/FORMAT.md ("Recorded GPU transcripts"): header lines `# key: value`, a
blank line, then the output exactly as printed; and beside it the run's
--metrics as .json. tools/gpu-check calls it for every chapter on a lent GPU;
on a CPU it records runs too long for a book build (ch06's default
training), which the book then shows beside its own shorter run.
--tag NAME keeps a second run of the same chapter on the same machine apart
(chNN-<machine-slug>-NAME-<date>.txt; ch06 records `--tag mlp -- --model
mlp` beside its default CNN run); the book shows each, labelled with its
command.

A chapter that exits non-zero is still recorded (with its exit status), and
tools/record exits with that status. A run whose own timing check flagged
timings as implausible (metrics LADDER_timings_suspect > 0: chapter 4's
ladders, on a busy machine) is not kept: tools/record writes nothing, says
how many timings were flagged and exits 3; record again on a quiet machine
(or pass --keep-flagged, and the book says so beside numbers taken from it).
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from .text import slug  # shared with other tools

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""



def machine(device):
    """(device label, driver, cuda, slug) of the machine the run is on."""
    if device.startswith("cuda"):
        name = sh(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
        drv = sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
        name = name[0] if name else "unknown GPU"
        cuda = re.search(r"release ([0-9.]+)", sh(["nvcc", "--version"]))
        return name, (drv[0] if drv else "unknown"), (cuda.group(1) if cuda else ""), slug(name)
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = os.cpu_count() or 1
    label = f"CPU: {model}, {cores} cores"
    return label, "none (CPU run)", "", "cpu-" + slug(model)


def flagged_timings(metrics_path):
    """(suspect, timed): the timings a run's own plausibility check still flagged, summed over
    its LADDER_timings_suspect / _timed metrics; (0, 0) without metrics."""
    try:
        with open(metrics_path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return 0, 0
    count = lambda suffix: int(sum(v for k, v in m.items() if k.endswith(suffix) and isinstance(v, (int, float))))
    return count("_timings_suspect"), count("_timings_timed")


def main(argv):
    p = argparse.ArgumentParser(description="Record a chapter's output for the book.")
    p.add_argument("chapter", help="chNN")
    p.add_argument("flags", nargs="*", help="the chapter's flags (after --)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default build/)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--out-dir", default=os.path.join(ROOT, "book", "recorded"),
                   help="where the transcript and its metrics go (default: book/recorded/)")
    p.add_argument("--tag", default="", help="keeps a second run apart: chNN-<machine>-TAG-<date>.txt (default: none)")
    p.add_argument("--keep-flagged", action="store_true",
                   help="keep a run whose own timing check flagged implausible timings")
    p.add_argument("--commit", default=os.environ.get("CT_COMMIT") or sh(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"]),
                   help="the commit the transcript names (default: $CT_COMMIT, else git's HEAD)")
    a = p.parse_args(argv)
    if not re.match(r"^ch\d\d$", a.chapter):
        p.error(f"expected a chapter id like ch06, got {a.chapter!r}")
    exe = os.path.abspath(os.path.join(a.build, a.chapter))
    if not os.access(exe, os.X_OK):
        sys.exit(f"record: no binary {exe}: build it first (cmake --build {a.build} --target {a.chapter}_...)")
    label, driver, cuda, mslug = machine(a.device)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    os.makedirs(a.out_dir, exist_ok=True)
    if a.tag and not re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", a.tag):
        p.error(f"--tag takes lower-case letters, digits and '-', got {a.tag!r}")
    tag = f"-{a.tag}" if a.tag else ""
    base = os.path.join(a.out_dir, f"{a.chapter}-{mslug}{tag}-{date}")
    with tempfile.TemporaryDirectory() as tmp:
        metrics = os.path.join(tmp, "metrics.json")
        cmd = [exe, "--device", a.device] + a.flags + ["--metrics", metrics]
        shown = " ".join([f"./{a.chapter}", "--device", a.device] + a.flags)
        print(f"record: {shown}", file=sys.stderr)
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp)
        out = proc.stdout.decode("utf-8", "replace")
        header = [("chapter", a.chapter), ("device", label), ("driver", driver)]
        if cuda:
            header.append(("cuda", cuda))
        header += [("date", date), ("command", shown), ("commit", a.commit or "unknown"), ("exit", str(proc.returncode))]
        text = "".join(f"# {k}: {v}\n" for k, v in header) + "\n" + out
        suspect, timed = flagged_timings(metrics)
        if suspect and not a.keep_flagged:
            print(f"record: {a.chapter}'s own timing check flagged {suspect} of {timed} timings as implausible "
                  "(the machine was busy, or its clock too coarse): nothing kept. Record again on a quiet "
                  "machine, or pass --keep-flagged to keep it anyway.", file=sys.stderr)
            return 3
        tmp_txt = base + ".txt.tmp"
        with open(tmp_txt, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp_txt, base + ".txt")
        if os.path.exists(metrics):
            with open(metrics, encoding="utf-8") as f:
                json.load(f)  # only a valid JSON file is kept
            shutil.copyfile(metrics, base + ".json.tmp")
            os.replace(base + ".json.tmp", base + ".json")
    print(f"record: wrote {base}.txt (exit {proc.returncode})")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
