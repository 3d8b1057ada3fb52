#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""flagfuzz: drive the chapters' real programs with extreme flag values.

    tools/flagfuzz [--build DIR] [--seconds N] [--seed S] [--timeout T]
                   [--chapters ch05,ch14] [--replay 'ARGS...' --chapter chNN]

Each chapter's flags are read from its own --help (the metavar says the
kind: N integer, X number, S string, FILE output). Every case runs the
program once, with --quick --device cpu and one to three flags set to
extreme values (negative, zero, huge, empty, non-numeric, very long,
path-like, two output flags on one file), in a fresh temporary directory
where a file of known content is planted at every output path. A case fails
when the program
  - ends by a signal it was not sent (a crash),
  - prints an AddressSanitizer/UBSan/LeakSanitizer report,
  - exits with a code other than 0, 1, 2 or 130,
  - does not stop within the time limit after a Ctrl-C (SIGINT at T seconds,
    then SIGKILL 15 s later: a hang),
  - leaves a planted output file neither intact nor replaced by a complete
    file (a safetensors file that parses, a JSON file that parses).
The time is shared evenly among the chapters; the seed is printed first,
and each failure prints the command that replays it (--replay). Exit 0 when
no case failed, 1 otherwise. Python's standard library only.
"""
import argparse
import json
import os
import random
import re
import shlex
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository
CHAPTERS = ["ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08", "ch09",
            "ch10", "ch11", "ch12", "ch13", "ch14"]
PLANT = b"planted by flagfuzz: must stay intact or be replaced by a complete file\n"
SAN_RE = re.compile(r"(ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
                    r"SUMMARY: (Address|Undefined|Leak)Sanitizer|ERROR: UndefinedBehaviorSanitizer)")

INTS = ["-1", "0", "-0", "1", "2", "3", "7", "1023", "65536", "2147483647", "2147483648", "4294967296",
        "9223372036854775807", "-9223372036854775808", "99999999999999999999", "", "abc", "1e3",
        " 1", "0x10", "+5", "1,2"]
DOUBLES = ["nan", "inf", "-inf", "1e308", "-1e308", "1e-320", "-0", "0", "1e30", "-1", "", "abc", "0x1p3",
           "1e400"]
LONG = "x" * 5000


def strings(rng):
    return ["", LONG, "/", ".", "..", "/nonexistent/dir/file", "/dev/null", "-", "a b", "\u2603" * 50,
            "../" * 200 + "etc", "%s%n%x", "auto", "cpu", "off", "zh", "en", "x+y*z", "f16", "bf16",
            "sin(x)" * 300, "cuda", "cnn", "mlp", str(rng.randint(-5, 5))]


def outputs():
    return ["out.bin", "out.bin", "sub/out.bin", ".", "", "/", "o" * 300, "d/" * 2100 + "f",
            "/proc/self/mem", "out.json"]


def parse_help(binary):
    """[(name, kind)] from `binary --help` (kind: N, X, S, FILE or '')."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = []
    for m in re.finditer(r"^  --([a-z0-9-]+)(?: (N|X|S|FILE|D))?\s", out, re.M):
        name, kind = m.group(1), m.group(2) or ""
        if name in ("help", "device", "quick"):
            continue
        flags.append((name, kind))
    return flags


def pick_value(rng, kind):
    if kind == "N":
        return rng.choice(INTS)
    if kind == "X":
        return rng.choice(DOUBLES)
    if kind == "FILE":
        return rng.choice(outputs())
    if kind == "D":
        return rng.choice(["cpu", "auto", "cuda:9999", "cuda:", ""])
    return rng.choice(strings(rng))


def make_case(rng, flags):
    """A list of argv words after --quick --device cpu."""
    n = rng.choice([1, 1, 2, 3])
    args = []
    chosen = rng.sample(flags, min(n, len(flags)))
    files = [f for f in flags if f[1] == "FILE"]
    if len(files) >= 2 and rng.random() < 0.15:  # two output flags on one file
        a, b = rng.sample(files, 2)
        return ["--" + a[0], "out.bin", "--" + b[0], "out.bin"]
    for name, kind in chosen:
        if kind == "":
            args.append("--" + name)
            continue
        v = pick_value(rng, kind)
        if rng.random() < 0.5 or v.startswith("-"):
            args.append("--%s=%s" % (name, v))
        else:
            args += ["--" + name, v]
    return args


def output_paths(args, flags):
    kinds = dict(flags)
    paths = []
    i = 0
    while i < len(args):
        a = args[i]
        name, val = (a[2:].split("=", 1) + [None])[:2] if a.startswith("--") else (None, None)
        if name and kind_of(kinds, name) == "FILE":
            if val is None and i + 1 < len(args):
                val = args[i + 1]
                i += 1
            if val:
                paths.append(val)
        i += 1
    return paths


def kind_of(kinds, name):
    return "FILE" if name == "metrics" else kinds.get(name)


def complete(path):
    """Whether path holds a complete file of a kind the chapters write."""
    with open(path, "rb") as f:
        data = f.read()
    if data == PLANT:
        return True
    if len(data) >= 8:  # safetensors: u64 header length, JSON header, payload
        (n,) = struct.unpack("<Q", data[:8])
        if 8 + n <= len(data):
            try:
                head = json.loads(data[8:8 + n])
                end = max([v["data_offsets"][1] for k, v in head.items() if k != "__metadata__"] + [0])
                if 8 + n + end == len(data):
                    return True
            except (ValueError, KeyError, TypeError, IndexError):
                pass
    try:
        json.loads(data)
        return True
    except ValueError:
        pass
    # a Chrome trace or text output: complete when it ends with a newline or a closing bracket
    return data.rstrip().endswith((b"]", b"}"))


def run_case(binary, args, flags, timeout, env):
    """(failure or None, seconds)."""
    with tempfile.TemporaryDirectory(prefix="flagfuzz.") as tmp:
        os.makedirs(os.path.join(tmp, "sub"))
        planted = []
        for p in output_paths(args, flags):
            full = os.path.join(tmp, p)
            if p.startswith("/") or ".." in p or len(p) > 200 or not os.path.isdir(os.path.dirname(full) or tmp):
                continue
            if os.path.isdir(full):
                continue
            with open(full, "wb") as f:
                f.write(PLANT)
            planted.append(full)
        argv = [binary, "--quick", "--device", "cpu"] + args
        t0 = time.time()
        p = subprocess.Popen(argv, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             env=env, start_new_session=True)
        sent = None
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            sent = signal.SIGINT
            os.killpg(p.pid, signal.SIGINT)
            try:
                _, err = p.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.communicate()
                return "a hang: still running 15 s after SIGINT (sent at %d s)" % timeout, time.time() - t0
        dt = time.time() - t0
        err = err.decode("utf-8", "replace")
        rc = p.returncode
        m = SAN_RE.search(err)
        if m:
            i = m.start()
            return "a sanitizer report:\n" + err[max(0, i - 200):i + 1500], dt
        if rc < 0 and -rc != sent:
            return "killed by signal %d; stderr:\n%s" % (-rc, err[-1500:]), dt
        if rc >= 0 and rc not in (0, 1, 2, 130):
            return "exit code %d; stderr:\n%s" % (rc, err[-1500:]), dt
        for full in planted:
            if os.path.exists(full) and os.path.isfile(full) and not complete(full):
                return "the planted file %s is damaged (neither intact nor complete); exit %d" % (
                    os.path.relpath(full, tmp), rc), dt
        return None, dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build-asan"))
    ap.add_argument("--seconds", type=float, default=200.0, help="total time budget (default 200)")
    ap.add_argument("--seed", type=int, default=None, help="default: $CT_FLAGFUZZ_SEED, else the day's number; printed")
    ap.add_argument("--timeout", type=float, default=45.0, help="seconds before a run gets SIGINT")
    ap.add_argument("--chapters", default=",".join(CHAPTERS))
    ap.add_argument("--chapter", help="with --replay: the chapter")
    ap.add_argument("--replay", help="run these flags once (as printed by a failure)")
    a = ap.parse_args()

    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    env.setdefault("CT_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=1:abort_on_error=0:allocator_may_return_null=1:fast_unwind_on_malloc=0"
    env["UBSAN_OPTIONS"] = env.get("UBSAN_OPTIONS", "") + ":print_stacktrace=1"
    supp = os.path.join(ROOT, "tests", "asan", "lsan.supp")
    if os.path.exists(supp) and "suppressions" not in env.get("LSAN_OPTIONS", ""):
        env["LSAN_OPTIONS"] = env.get("LSAN_OPTIONS", "") + ":suppressions=" + supp

    def binary(ch):
        path = os.path.abspath(os.path.join(a.build, ch))
        return path if os.access(path, os.X_OK) else None

    if a.replay is not None:
        b = binary(a.chapter)
        fail, dt = run_case(b, shlex.split(a.replay), parse_help(b), a.timeout, env)
        print("%s %s: %s (%.1f s)" % (a.chapter, a.replay, fail or "ok", dt))
        return 1 if fail else 0

    if a.seed is None and os.environ.get("CT_FLAGFUZZ_SEED"):
        a.seed = int(os.environ["CT_FLAGFUZZ_SEED"])
    seed = a.seed if a.seed is not None else int(time.time()) // 86400  # the day: one seed a day
    print("flagfuzz: seed %d, %g s over %s (replay the whole run with --seed %d)" % (seed, a.seconds, a.chapters, seed),
          flush=True)
    chs = [c for c in a.chapters.split(",") if c]
    failures = 0
    total = 0
    for idx, ch in enumerate(chs):
        b = binary(ch)
        if not b:
            print("%s: not built in %s, skipped" % (ch, a.build))
            continue
        rng = random.Random("%d/%s" % (seed, ch))
        flags = parse_help(b)
        budget = a.seconds / len(chs)
        start = time.time()
        n = 0
        while time.time() - start < budget:
            args = make_case(rng, flags) if flags else []
            left = budget - (time.time() - start)
            fail, dt = run_case(b, args, flags, max(5.0, min(a.timeout, left)), env)
            n += 1
            if fail:
                failures += 1
                print("FAIL %s %s\n  %s\n  replay: tools/flagfuzz --build %s --chapter %s --replay %s\n" % (
                    ch, " ".join(shlex.quote(x) for x in args), fail.replace("\n", "\n  "), a.build, ch,
                    shlex.quote(" ".join(shlex.quote(x) for x in args))), flush=True)
            if not flags:
                break
        total += n
        print("%s: %d runs in %.0f s" % (ch, n, time.time() - start), flush=True)
    print("flagfuzz: %d runs, %d failures (seed %d)" % (total, failures, seed))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
