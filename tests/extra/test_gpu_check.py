#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/gpu-check's logic, checked without a GPU.

Most checks run the real script; what a GPU machine would provide
(compute-sanitizer, nvcc, a call's results) is replaced by stand-ins whose
behaviour is the one observed on the lent machines: gVisor's
compute-sanitizer answers "Device not supported", a working one reports the
planted write as "Invalid __global__ write" and exits with --error-exitcode.
The plan's arithmetic and the cutting of stages at their deadlines are
checked on the script loaded as a module, with plans and stages made up here.

usage: test_gpu_check.py REPO_ROOT
"""
import copy
import json
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.getcwd()
TOOL = os.path.join(ROOT, "tools", "gpu-check")
sys.path.insert(0, os.path.join(ROOT, "tools"))
import ctools  # noqa: E402
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
    return subprocess.run([sys.executable, TOOL] + args, capture_output=True, text=True, env=e, cwd=cwd, timeout=120)


def load_tool():
    """tools/ctools/gpu_check.py anew (the checks below set its limits)."""
    return ctools.fresh("gpu_check")


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


def plan_checks():
    """The plan fits the lease, and the checker refuses plans that do not."""
    g = load_tool()
    real = g.plan_checks({"total": 50 << 20})
    bad = [w for w, ok, _ in real if not ok]
    check(not bad, "the plan in tools/gpu-check fits (15 min, call 1 <= 540 s, each <= 600 s, carry)", repr(bad))
    total = g.ASSUME["start_s"][1] + sum(c["timeout_s"] + g.ASSUME["transfer_s"] for c in g.CALLS) + g.LEASE["warm_s"]
    check(g.lease_total_s() == total <= 900, f"device time counted independently: {total} s <= 900", str(g.lease_total_s()))
    for c in g.CALLS:
        check(c["stages"][-1]["deadline_s"] + g.REPORT_S <= c["timeout_s"] <= 600,
              f"call {c['call']}: its report fits inside timeout_s")

    def refused(what, why, mutate, carry=None):
        saved = copy.deepcopy(g.CALLS)
        mutate(g.CALLS)
        res = g.plan_checks(carry)
        g.CALLS[:] = saved
        failing = [w for w, ok, _ in res if not ok]
        check(any(why in w for w in failing), f"plan refused: {what} ({why})", repr(failing))
    # A first call of 560 s with a shorter second call: only the first call's limit is broken.
    refused("a first call of 560 s", "call 1: timeout_s 560 <= 540",
            lambda C: (C[0].update(timeout_s=560), C[1].update(timeout_s=90), C[1]["stages"][-1].update(deadline_s=70)))
    refused("a second call of 300 s", "device time", lambda C: C[1].update(timeout_s=300))
    refused("a call over 600 s", "<= 600 (one command)", lambda C: C[1].update(timeout_s=610))
    refused("a stage's deadline past its call's timeout", "call 2: last deadline",
            lambda C: C[1]["stages"][-1].update(deadline_s=108))
    refused("deadlines out of order", "call 1: stage deadlines in order", lambda C: C[0]["stages"][2].update(deadline_s=100))
    refused("three calls", "at most two calls",
            lambda C: C.append({"call": 3, "timeout_s": 10, "stages": [{"stage": "setup", "deadline_s": 1}]}))
    refused("the sanitizer left out", "every stage planned once", lambda C: C[1]["stages"].pop())
    refused("a carry of 65 MiB", "carry", lambda C: None, {"total": 65 << 20})
    r = run(["--plan"])
    check(r.returncode == 0 and "call 1: timeout_s 540" in r.stdout and "--call 2" in r.stdout
          and '[".carry/debs", ".carry/data"]' in r.stdout and "DOES NOT FIT" not in r.stdout,
          "--plan prints both calls with carry and timeout_s, and fits", r.stdout[-1500:] + r.stderr[-500:])


def cutting_checks(tmp):
    """Stages are cut at their deadlines, their results still written; what
    did not fit is reported as not run; a stage that raises fails alone."""
    g = load_tool()
    g.MIN_STAGE_S = 0.5
    ctx = g.Ctx(os.path.join(tmp, "build-cut"))
    ctx.logdir = ctx.work
    ctx.outdir = ""
    ctx.reset()
    pidfile = os.path.join(tmp, "sleeper.pid")
    seen = {}

    def slow(ctx, s, deadline):
        # A command whose child outlives the shell: the whole group must go.
        t = ctx.now()
        rc, _ = ctx.run(["sh", "-c", f"sleep 30 & echo $! >{pidfile}; wait"], deadline, "slow.log")
        seen["slow"] = (rc, ctx.now() - t)
        ctx.phase("slow", "partial" if rc == 124 else "ok", ctx.now() - t, f"exit {rc}", s["deadline_s"])

    def quick(ctx, s, deadline):
        seen["quick"] = True
        ctx.phase("quick", "ok", 0, "", s["deadline_s"])

    def broken(ctx, s, deadline):
        raise RuntimeError("a bug in a stage")
    funcs = {"slow": slow, "late": quick, "quick": quick, "broken": broken}
    stages = [{"stage": "slow", "deadline_s": 1.5}, {"stage": "late", "deadline_s": 1.7},
              {"stage": "broken", "deadline_s": 5}, {"stage": "quick", "deadline_s": 6}]
    g.run_stages(ctx, stages, funcs)
    rc, secs = seen.get("slow", (None, 99))
    check(rc == 124 and 1.2 < secs < 3.5, "a stage's command is cut at the stage's deadline", repr(seen))
    pid = int(open(pidfile).read()) if os.path.exists(pidfile) else 0
    time.sleep(0.2)
    alive = False
    if pid:
        try:
            with open(f"/proc/{pid}/stat") as f:
                alive = f.read().split()[2] != "Z"
        except OSError:
            alive = False
    check(pid and not alive, "the cut command's whole process group is gone", f"pid {pid} alive {alive}")
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(ctx.work, "phases.tsv"))]
    byname = {r[0]: r for r in rows}
    check(byname.get("slow", [""] * 2)[1] == "partial", "the cut stage still wrote its result", repr(rows))
    check(byname.get("late", [""] * 2)[1] == "not run", "a stage whose deadline passed is reported as not run", repr(rows))
    check(byname.get("broken", [""] * 4)[1] == "FAILED" and "a bug in a stage" in byname["broken"][3],
          "a stage that raises is FAILED with its error", repr(rows))
    check(seen.get("quick") is True and byname.get("quick", [""] * 2)[1] == "ok",
          "the stages after a failed one still run", repr(rows))
    ctx.fact("gpu_count", "1")
    ctx.fact("gpu_name", "NVIDIA H100 80GB HBM3")
    text, ok = g.make_report([ctx.work])
    check(not ok and "| late | not run |" in text and "incomplete: slow partial, late not run" in text,
          "the report fails the broken stage and names the cut and unrun ones", text[:1500])
    # Without the broken stage: what was cut or not run fails nothing.
    with open(os.path.join(ctx.work, "phases.tsv"), "w") as f:
        f.writelines("\t".join(r) + "\n" for r in rows if r[0] != "broken")
    text, ok = g.make_report([ctx.work])
    check(ok and "**PASS**; incomplete: slow partial, late not run" in text,
          "a stage cut or not run fails nothing; the result line names it", text[:1500])


def stage_checks(tmp):
    """The record and sanitizer stages as on the device, with stand-in
    chapters and a stand-in compute-sanitizer: runs in the plan's order, a run
    cut at its cap, the rest not run at the stage's deadline; only runs that
    exited 0 go to the book."""
    g = load_tool()
    g.MIN_STAGE_S = 0.5
    g.RECORD_RUN_CAP_S = 60
    g.RECORD_MIN_S = 0.5
    build = os.path.join(tmp, "build-stand-in")
    os.makedirs(build)
    # ch01 exits 0, ch02 exits 1, ch03 hangs (cut at the stage's deadline, 4 s
    # in: it cannot start later than that); the runs after it are not run.
    script(os.path.join(build, "ch01"), 'echo "device: cuda:0 (stand-in)"; exit 0\n')
    script(os.path.join(build, "ch02"), 'echo "error: stand-in failure"; exit 1\n')
    script(os.path.join(build, "ch03"), "sleep 30\n")
    g.RECORD_RUNS = [("ch01", "ch01", "", []), ("ch02", "ch02", "", []), ("ch03", "ch03", "", []),
                     ("ch01-again", "ch01", "again", []), ("ch04", "ch04", "", [])]
    ctx = g.Ctx(build)
    ctx.logdir, ctx.outdir = ctx.work, ""
    ctx.reset()
    ctx.built, ctx.ngpu = True, 1
    bin_dir = os.path.join(tmp, "bin-stage")
    os.makedirs(bin_dir)
    script(os.path.join(bin_dir, "nvidia-smi"), "echo 'Stand-in GPU, 580.0'\n")
    ctx.env["PATH"] = bin_dir + os.pathsep + ctx.env["PATH"]
    t = ctx.now()
    g.stage_record(ctx, {"stage": "record", "deadline_s": t + 4}, t + 4)
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(ctx.work, "transcripts.tsv"))]
    res = [(r[0], r[4]) for r in rows]
    check(res[:3] == [("ch01", "ok"), ("ch02", "FAILED"), ("ch03", "cut at its deadline")],
          "record: in the plan's order, a failed run FAILED, a hung run cut at the deadline", repr(res))
    check(res[3:] == [("ch01-again", "not run (deadline)"), ("ch04", "FAILED (not built)")],
          "record: what the deadline left is not run; a chapter not built is named", repr(res))
    check(3.5 < ctx.now() - t < 7, "record: the stage ends at its deadline", f"{ctx.now() - t:.1f} s")
    phases = [l.split("\t") for l in open(os.path.join(ctx.work, "phases.tsv"))]
    check(phases and phases[-1][0] == "transcripts" and phases[-1][1] == "FAILED",
          "record: a failed run fails the stage", repr(phases))
    book = [os.path.basename(f) for f in g.book_files(ctx.recdir)]
    check(len([b for b in book if b.startswith("ch01-") and b.endswith(".txt")]) >= 1 and
          not any(b.startswith("ch02-") for b in book), "record: only runs that exited 0 go to the book", repr(book))
    # sanitizer: a working stand-in (planted write reported), a clean memcheck
    # and a racecheck that finds a hazard.
    script(os.path.join(bin_dir, "nvcc"),
           'while [ $# -gt 0 ]; do [ "$1" = -o ] && { : >"$2"; exit 0; }; shift; done; exit 1\n')
    csan = os.path.join(tmp, "csan-stage")
    script(csan, 'case "$*" in\n'
                 '  *probe*) echo "========= Invalid __global__ write of size 4 bytes"; exit 86 ;;\n'
                 '  *racecheck*) echo "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)"; exit 86 ;;\n'
                 '  *) echo "========= ERROR SUMMARY: 0 errors"; exit 0 ;;\nesac\n')
    os.environ["CT_COMPUTE_SANITIZER"] = csan
    old_path = os.environ["PATH"]
    os.environ["PATH"] = ctx.env["PATH"]
    try:
        script(os.path.join(build, "ch04"), "exit 0\n")
        t = ctx.now()
        g.stage_sanitizer(ctx, {"stage": "sanitizer", "deadline_s": t + 20}, t + 20)
    finally:
        os.environ.pop("CT_COMPUTE_SANITIZER", None)
        os.environ["PATH"] = old_path
    san = [l.rstrip("\n").split("\t") for l in open(os.path.join(ctx.work, "sanitizer.tsv"))]
    got = [(r[0], r[2], r[4]) for r in san]
    check(got == [("ch04.memcheck", "pass", "0"), ("ch04.racecheck", "FAILED", "1")],
          "sanitizer: ch04 under memcheck (clean) and racecheck (a hazard found: FAILED)", repr(got))


def test_stage_checks(tmp):
    """The test stage on a made-up ctest project: the timing tests one at a
    time after the others, a failure kept, the test that --stop-time killed at
    the deadline reported as cut (not failed), the one after it as not run."""
    g = load_tool()
    g.MIN_STAGE_S = 0.5
    # Windows wide enough for a loaded CI machine: ctest is told to stop 3 s
    # before a batch's end, so a 3 s batch left it 1 s to start (CI at load 4
    # ran no test of the parallel batch). The serial batch still ends with the
    # sleeping gpu.ch04 cut at the stage's deadline.
    g.SERIAL_RESERVE_S = 10
    src = os.path.join(tmp, "ctest-project")
    write(os.path.join(src, "CMakeLists.txt"), """cmake_minimum_required(VERSION 3.16)
project(standin NONE)
enable_testing()
add_test(NAME gpu.ops COMMAND sh -c "exit 0")
add_test(NAME gpu.bad COMMAND sh -c "echo boom; exit 1")
add_test(NAME gpu.ch02 COMMAND sh -c "exit 0")
add_test(NAME gpu.ch04 COMMAND sh -c "sleep 60")
add_test(NAME gpu.ch10 COMMAND sh -c "exit 0")
add_test(NAME unit.other COMMAND sh -c "exit 1")
set_tests_properties(gpu.ops gpu.bad gpu.ch02 gpu.ch04 gpu.ch10 PROPERTIES LABELS gpu)
""")
    build = os.path.join(tmp, "ctest-project-build")
    r = subprocess.run(["cmake", "-S", src, "-B", build], capture_output=True, text=True)
    if r.returncode != 0:
        check(False, "test stage: the made-up ctest project configures", r.stdout + r.stderr)
        return
    ctx = g.Ctx(build, jobs=4)
    ctx.logdir, ctx.outdir = ctx.work, ""
    ctx.reset()
    ctx.built, ctx.ngpu = True, 1
    names = g.list_gpu_tests(ctx, ctx.now() + 30)
    check(sorted(names) == ["gpu.bad", "gpu.ch02", "gpu.ch04", "gpu.ch10", "gpu.ops"],
          "test stage: ctest's gpu tests listed", repr(names))
    t = ctx.now()
    g.stage_test(ctx, {"stage": "test", "deadline_s": t + 20}, t + 20)
    took = ctx.now() - t
    got = {n: r for n, r, _, _ in g.apply_cut(g.junit_results(
        sorted(os.path.join(ctx.work, f) for f in os.listdir(ctx.work) if f.startswith("ctest-junit"))),
        g.read_lines(os.path.join(ctx.work, "ctest-cut.txt")))}
    check(got == {"gpu.ops": "pass", "gpu.bad": "FAIL", "gpu.ch02": "pass", "gpu.ch04": g.CUT},
          "test stage: results, the killed timing test cut (not failed), gpu.ch10 never started", repr(got))
    check(took < 21.5, "test stage: ends at its deadline", f"{took:.1f} s")
    phases = [l.rstrip("\n").split("\t") for l in open(os.path.join(ctx.work, "phases.tsv"))]
    check(phases[-1][:2] == ["gpu-tests", "FAILED"] and "1 cut at the deadline, 1 not run of 5" in phases[-1][3],
          "test stage: a failed test fails it; the cut and unrun are counted", repr(phases))
    ctx.fact("gpu_count", "1")
    text, ok = g.make_report([ctx.work])
    check("| gpu.ch04 | cut (deadline) |" in text and "| gpu.ch10 | not run |" in text and "### gpu.bad" in text,
          "test stage: the report shows the cut, the unrun and the failure's output", text[-2500:])


def commit_checks():
    """CT_COMMIT: a hash, and where .git exists, this checkout's HEAD."""
    g = load_tool()
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    saved = os.environ.get("CT_COMMIT")
    try:
        os.environ["CT_COMMIT"] = "not-a-hash"
        check(g.commit_of()[1] != "", "CT_COMMIT that is no hash is refused")
        if head:
            os.environ["CT_COMMIT"] = head[:12]
            check(g.commit_of() == (head[:12], ""), "CT_COMMIT naming HEAD is taken", repr(g.commit_of()))
            other = ("0" if head[0] != "0" else "1") * 12
            os.environ["CT_COMMIT"] = other
            check("not this checkout's HEAD" in g.commit_of()[1], "CT_COMMIT naming another commit is refused")
    finally:
        if saved is None:
            os.environ.pop("CT_COMMIT", None)
        else:
            os.environ["CT_COMMIT"] = saved


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
    check("| 1 | build | ok | 95 |  |  |" in text, "merge: an empty detail stays empty, the time in its column")
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


def merge_two_calls(tmp):
    """--merge of the plan's two calls, in the formats this version writes:
    two JUnit files (parallel and serial tests), transcripts with a result
    column, runs the deadline left out; the book's files come back."""
    ok_phase = ["device", "ok", "3", "NVIDIA H100", "30"]
    par = ('<testsuite><testcase name="gpu.ops" time="1.5" status="run"/>'
           '<testcase name="gpu.ch05_twin_cuda" time="4.0" status="run"/></testsuite>')
    ser = '<testsuite><testcase name="gpu.ch04" time="30.0" status="run"/></testsuite>'
    bench_json = json.dumps({"status": 3, "rows": [{"ratio": 0.8}], "skipped": ["ch13 c run 1"]})
    c1 = state(tmp, 11, {"stages": "setup,build,test,record,bench", "call": "1", "cuda_compiled": "16"},
               [ok_phase, ["configure", "ok", "9", "", ""], ["build", "ok", "120", "every target, -j 16", "210"],
                ["gpu-tests", "partial", "120", "2 passed, 0 failed, 0 skipped, 1 not run of 4", "330"],
                ["transcripts", "partial", "100", "2 recorded, 0 failed, 1 cut, 1 not run", "430"],
                ["bench", "partial", "85", "the deadline cut it short: 1 rows with a ratio; not run: ch13 c run 1", "520"]],
               {"ctest-junit-parallel.xml": par, "ctest-junit-serial.xml": ser,
                "gpu-tests.txt": "gpu.ops\ngpu.ch05_twin_cuda\ngpu.ch04\ngpu.ch12\n",
                "transcripts.tsv": ("ch01\t0\t9\tch01-nvidia-h100-2026-11-27.txt\tok\n"
                                    "ch02\t0\t20\tch02-nvidia-h100-2026-11-27.txt\tok\n"
                                    "ch03\t124\t90\t\tcut at its deadline\n"
                                    "ch08\t-\t0\t\tnot run (deadline)\n"),
                "recorded/ch01-nvidia-h100-2026-11-27.txt": "# chapter: ch01\n# exit: 0\n\nok\n",
                "recorded/ch01-nvidia-h100-2026-11-27.json": "{}",
                "recorded/ch02-nvidia-h100-2026-11-27.txt": "# chapter: ch02\n# exit: 0\n\nok\n",
                "recorded/bench.json": bench_json,
                "recorded/bench-cuda-nvidia-h100-2026-11-27.md": "# bench\n",
                "recorded/bench-cuda-nvidia-h100-2026-11-27.json": bench_json})
    c2 = state(tmp, 12, {"stages": "setup,build,sanitizer", "call": "2", "sanitizer_probe": "supported"},
               [ok_phase, ["configure", "ok", "2", "", ""], ["build", "ok", "3", "targets ch04", "30"],
                ["sanitizer", "ok", "50", "2 of 2 runs clean", "90"]],
               {"sanitizer.tsv": "ch04.memcheck\tmemcheck\tpass\t0\t0\t\t40\t\n"
                                 "ch04.racecheck\tracecheck\tpass\t0\t0\t\t48\t\n"})
    dest = os.path.join(tmp, "merged-two")
    r = run(["--report-dir", dest, "--merge", c1, c2])
    reports = [f for f in os.listdir(dest) if f.startswith("gpu-check-")] if os.path.isdir(dest) else []
    text = open(os.path.join(dest, reports[0])).read() if reports else ""
    check(r.returncode == 0 and "**PASS**" in text and reports == ["gpu-check-nvidia-h100-80gb-hbm3-2026-11-24.md"],
          "merge of two calls: a pass, one report named after the GPU and the date", r.stdout + r.stderr + repr(reports))
    check("| gpu.ch04 | pass |" in text and "| gpu.ch05_twin_cuda | pass |" in text and "| gpu.ch12 | not run |" in text,
          "merge: both test batches read, the test the deadline left out is not run", text[:3000])
    check("| ch08 | not run (deadline) |" in text and "| ch03 | cut at its deadline | 124 |" in text
          and "## Failures" not in text, "merge: cut and unrun recordings are reported, fail nothing", text[-3000:])
    check("incomplete: gpu-tests partial (call 1), transcripts partial (call 1), bench partial (call 1)" in text,
          "merge: the result line names what did not fit", text[:2000])
    check("| ch04.racecheck | racecheck | pass | 0 | 0 |" in text, "merge: ch04's sanitizer rows from call 2")
    want = ["bench-cuda-nvidia-h100-2026-11-27.json", "bench-cuda-nvidia-h100-2026-11-27.md",
            "ch01-nvidia-h100-2026-11-27.json", "ch01-nvidia-h100-2026-11-27.txt", "ch02-nvidia-h100-2026-11-27.txt"]
    got = sorted(f for f in os.listdir(dest) if not f.startswith("gpu-check-")) if os.path.isdir(dest) else []
    check(got == want, "merge: the book's files (transcripts that exited 0, the bench's .md and .json) copied",
          repr(got))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        probe_checks(tmp)
        bench_checks(tmp)
        plan_checks()
        cutting_checks(tmp)
        stage_checks(tmp)
        test_stage_checks(tmp)
        commit_checks()
        merge_checks(tmp)
        merge_two_calls(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
