#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/gpu-check's logic, checked without a GPU.

Each check runs the real script; what a GPU machine would provide
(compute-sanitizer, nvcc, a call's results) is replaced by stand-ins whose
behaviour is the one observed on the lent machines: gVisor's
compute-sanitizer answers "Device not supported", a working one reports the
planted write as "Invalid __global__ write" and exits with --error-exitcode.

usage: test_gpu_check.py REPO_ROOT
"""
import json
import os
import stat
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.getcwd()
TOOL = os.path.join(ROOT, "tools", "gpu-check")
failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        if detail:
            print("     " + detail.replace("\n", "\n     "))


def script(path, body):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def run(args, env=None, cwd=None):
    e = dict(os.environ)
    e.pop("OUT", None)
    e.update(env or {})
    return subprocess.run(["bash", TOOL] + args, capture_output=True, text=True, env=e, cwd=cwd, timeout=60)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def probe_checks(tmp):
    """--probe-sanitizer: supported only when the planted write is reported."""
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir)
    # nvcc stand-in: writes the -o file (the probe program is never run by the
    # stand-in sanitizers below, which only check they were handed it).
    script(os.path.join(bin_dir, "nvcc"),
           'while [ $# -gt 0 ]; do [ "$1" = -o ] && { : >"$2"; exit 0; }; shift; done; exit 1\n')
    cases = {
        "gvisor": ('echo "========= Error: Device not supported"\n'
                   'echo "========= Error: Target application terminated before first instrumented API call"\n'
                   "exit 1\n", 1, "not supported here: Error: Device not supported"),
        "works": ('[ "$1 $2" = "--tool memcheck" ] || exit 9\n'
                  'for a; do last=$a; done; [ -f "$last" ] || exit 9\n'
                  'echo "========= Invalid __global__ write of size 4 bytes"\n'
                  'echo "========= ERROR SUMMARY: 1 error"\nexit 86\n', 0, "supported"),
        "blind": ('echo "probe: no error"\necho "========= ERROR SUMMARY: 0 errors"\nexit 0\n', 1,
                  "not supported here: a planted out-of-bounds write was not reported (exit 0: ERROR SUMMARY: 0 errors)"),
    }
    for name, (body, want_rc, want_out) in cases.items():
        csan = os.path.join(tmp, "csan-" + name)
        script(csan, body)
        r = run(["--probe-sanitizer"], env={"CT_COMPUTE_SANITIZER": csan,
                                             "PATH": bin_dir + os.pathsep + os.environ["PATH"]})
        check(r.returncode == want_rc and r.stdout.strip() == want_out,
              f"probe, {name}: exit {want_rc}, '{want_out}'",
              f"exit {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr[-400:]!r}")
    r = run(["--probe-sanitizer"], env={"CT_COMPUTE_SANITIZER": os.path.join(tmp, "csan-works"),
                                         "PATH": "/usr/bin:/bin"})
    nvcc_here = os.path.exists("/usr/local/cuda/bin/nvcc")
    check(nvcc_here or (r.returncode == 1 and "no nvcc" in r.stdout),
          "probe without nvcc: not supported here", r.stdout)


def verdict(tmp, rc, doc):
    path = os.path.join(tmp, f"bench-{rc}.json")
    if doc is not None:
        write(path, json.dumps(doc))
    r = run(["--bench-verdict", str(rc), path])
    return r.stdout.rstrip("\n").split("\t")


def bench_checks(tmp):
    """The bench phase: partial when the deadline cut it short, not failed."""
    rows = [{"label": "ch02 x", "ratio": 1.25}, {"label": "ch06 y", "ratio": float("nan")},
            {"label": "ch04 z", "ratio": None}]
    got = verdict(tmp, 3, {"status": 3, "rows": rows, "skipped": ["ch06 c run 1", "ch06 py run 1"]})
    check(got == ["partial", "the deadline cut it short: 1 rows with a ratio, 2 without (n/a here, or not run); "
                             "not run: ch06 c run 1, ch06 py run 1"],
          "bench exit 3: partial, with the rows it measured", repr(got))
    got = verdict(tmp, 3, {"status": 3, "rows": rows[1:], "skipped": ["ch02 c run 1"]})
    check(got[0] == "FAILED" and "no row measured" in got[1], "bench exit 3 with no row measured: FAILED", repr(got))
    got = verdict(tmp, 0, {"status": 0, "rows": rows[:1], "skipped": ["ch02 c run 2 (stopped)"]})
    check(got == ["partial", "the deadline cut it short: 1 rows with a ratio; not run: ch02 c run 2 (stopped)"],
          "bench exit 0 with skipped runs: partial", repr(got))
    got = verdict(tmp, 0, {"status": 0, "rows": rows[:1], "skipped": []})
    check(got == ["ok", "1 rows with a ratio"], "bench exit 0: ok", repr(got))
    got = verdict(tmp, 1, {"status": 1, "rows": rows, "skipped": []})
    check(got == ["FAILED", "exit 1"], "bench exit 1: FAILED", repr(got))
    got = verdict(tmp, 124, None)
    check(got[0] == "FAILED" and "killed at the deadline" in got[1], "bench killed by the timeout: FAILED", repr(got))


def tsv_checks():
    """tsv_split keeps empty fields (IFS=$'\\t' read would shift them)."""
    prog = ('eval "$(sed -n \'/^tsv_split() {/,/^}/p\' "$1")"; '
            "tsv_split $'a\\t\\t\\tb\\t'; printf '%s|' \"${#F[@]}\" \"${F[@]}\"")
    r = subprocess.run(["bash", "-c", prog, "x", TOOL], capture_output=True, text=True)
    check(r.stdout == "5|a|||b||", "tsv_split: a, '', '', b, '' stay five fields", repr(r.stdout))


def state(tmp, n, facts, phases, files):
    d = os.path.join(tmp, f"state{n}")
    base = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": "1", "kind": "nvidia-h100-80gb-hbm3",
            "date": "2026-11-24 20:00:00 UTC", "source_digest": "0123456789abcdef", "total_s": "300",
            "driver": "580.159.04", "compute_capability": "9.0", "no_gpu_ok": "0"}
    base.update(facts)
    write(os.path.join(d, "facts.txt"), "".join(f"{k}={v}\n" for k, v in base.items()))
    write(os.path.join(d, "phases.tsv"), "".join("\t".join(p) + "\n" for p in phases))
    for name, text in files.items():
        write(os.path.join(d, name), text)
    out = os.path.join(tmp, f"call{n}")
    os.makedirs(out)
    with tarfile.open(os.path.join(out, "gpu-check-state.tar"), "w") as t:
        t.add(d, arcname=".")
    return out


def merge_checks(tmp):
    """--merge of three calls: partial and unsupported phases fail nothing."""
    junit = ('<testsuite><testcase name="gpu.ops" time="1.5"/>'
             '<testcase name="gpu.conv" time="2.0"/></testsuite>')
    ok_phase = ["device", "ok", "0", "NVIDIA H100"]
    c1 = state(tmp, 1, {"stages": "build,test", "cuda_compiled": "12"},
               [ok_phase, ["configure", "ok", "4", ""], ["build", "ok", "95", ""], ["gpu-tests", "ok", "210", "2 passed"]],
               {"ctest-junit.xml": junit, "gpu-tests.txt": "gpu.ops\ngpu.conv\n",
                "spills.txt": "ptxas warning : Registers are spilled to local memory in function 'k', 8 bytes spill stores\n"})
    san = "".join(f"{n}\t{tool}\tnot supported here\t-\t-\t-\t\t\n" for n, tool in
                  (("gpu.ops", "memcheck-leaks"), ("ch04.memcheck", "memcheck"), ("ch04.racecheck", "racecheck")))
    c2 = state(tmp, 2, {"stages": "build,sanitizer,record",
                        "sanitizer_probe": "not supported here: Error: Device not supported"},
               [ok_phase, ["build", "ok", "1", ""],
                ["sanitizer", "unsupported", "9", "compute-sanitizer Error: Device not supported (3 runs not checked)"],
                ["transcripts", "ok", "120", "1 runs"]],
               {"sanitizer.tsv": san, "transcripts.tsv": "ch01\t0\t12\tch01-cuda.txt\n",
                "recorded/ch01-cuda.txt": "$ ./ch01 --device cuda\n# exit: 0\n"})
    c3 = state(tmp, 3, {"stages": "build,bench"},
               [ok_phase, ["build", "ok", "1", ""],
                ["bench", "partial", "400", "the deadline cut it short: 5 of 9 rows measured; not run: ch06 c run 1"]],
               {"bench.log": "| row | ratio |\n| ch02 x | 1.25 |\nINCOMPLETE: the deadline left targets without a run\n",
                "recorded/bench.json": '{"status": 3, "rows": []}',
                "recorded/bench-cuda-h100.md": "# bench\n",
                "recorded/bench-cuda-h100.json": '{"schema": "ct-bench/1", "rows": []}'})
    dest = os.path.join(tmp, "merged")
    r = run(["--report-dir", dest, "--merge", c1, c2, c3])
    reports = [f for f in os.listdir(dest) if f.startswith("gpu-check-")] if os.path.isdir(dest) else []
    text = open(os.path.join(dest, reports[0])).read() if reports else ""
    check(r.returncode == 0 and "**PASS**" in text, "merge: a pass with a partial bench and no sanitizer",
          r.stdout + r.stderr + text[:2000])
    check("incomplete: sanitizer unsupported (call 2), bench partial (call 3)" in text,
          "merge: the result line names the incomplete phases", text[:1500])
    check("| ch04.racecheck | racecheck | not supported here |" in text and
          "| ch04.memcheck | memcheck | not supported here |" in text,
          "merge: ch04's memcheck and racecheck rows, not supported here")
    check("| 1 | build | ok | 95 |  |" in text, "merge: an empty detail stays empty, the time in its column")
    check("Registers are spilled" in text and "| Register spills (ptxas) | 1 warning(s)" in text,
          "merge: ptxas spill warnings reported")
    check(os.path.exists(os.path.join(dest, "ch01-cuda.txt")) and os.path.exists(os.path.join(dest, "bench-cuda-h100.md"))
          and os.path.exists(os.path.join(dest, "bench-cuda-h100.json")),
          "merge: the transcript and the partial bench's report (.md and the .json the appendix reads) copied for the book")
    # The same calls with a failed gpu test phase: the merge fails.
    c1b = state(tmp, 4, {"stages": "build,test"},
                [ok_phase, ["build", "ok", "95", ""], ["gpu-tests", "FAILED", "210", "exit 8"]],
                {"ctest-junit.xml": junit.replace('time="2.0"/>', 'time="2.0"><failure/></testcase>'),
                 "gpu-tests.txt": "gpu.ops\ngpu.conv\n"})
    dest2 = os.path.join(tmp, "merged2")
    r = run(["--report-dir", dest2, "--merge", c1b, c2, c3])
    text = "".join(open(os.path.join(dest2, f)).read() for f in os.listdir(dest2) if f.startswith("gpu-check-"))
    check("| Register spills (ptxas) | not seen: no CUDA source was compiled" in text,
          "merge: no CUDA compiled, no claim that nothing spills", text[:1500])
    check(r.returncode == 1 and "**FAIL**" in text and "| gpu.conv | FAIL |" in text,
          "merge: a failed gpu test fails the merged report", r.stdout + r.stderr)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        probe_checks(tmp)
        bench_checks(tmp)
        tsv_checks()
        merge_checks(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
