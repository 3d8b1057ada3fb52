# SPDX-License-Identifier: MIT
"""tools/ctools/lab_sim.py: `tools/lab check` grades the CUDA exercises on the SIMT emulator.

Loaded by tools/lab (its run_check hook), not run on its own. Where there is no
GPU, the exercises whose regions lie in a .cu file cannot be graded by the
chapter's `gpu` tests (they skip). This module grades them instead on the SIMT
emulator of tools/sim (tools/sim/README.md): the student copy is configured
with the `sim` preset (DIR/build-sim: a CPU-only runtime, the .cu files
compiled as host C++ against tools/sim/include/ct_sim.h, ASan + UBSan), and
the emulator's tests of the chapter's kernels run on the student's kernels:

    sim.chapters            every kernel of the .cu files the emulator builds,
                            against a float64 reference, at odd sizes (partial
                            blocks) and the sizes the ladder takes; ASan reports
                            an out-of-bounds index with the kernel and thread
    sim.chapters_racecheck  the same with the shared-memory race check: a missing
                            __syncthreads() is a hazard, and fails

An exercise passes when both pass. What the emulator cannot judge is speed:
every CUDA exercise is marked "speed: needs a GPU" (GFLOP/s, the fraction of
cuBLAS, the roofline), and its score is correctness only.

Which .cu files the emulator builds is read from tools/sim/CMakeLists.txt
(CT_SIM_CU_SOURCES); a region in another .cu file stays not graded, with that
reason.

`--sim` chooses (tools/lab check --help):
    auto   (default) on the emulator when no GPU is here and the preset builds no CUDA
    yes    on the emulator even where a GPU is
    no     never (the CUDA exercises stay not graded without a GPU, as before)
    only   the CUDA exercises alone, on the emulator; the chapter's C is not built
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# The emulator's tests that run the kernels of the files in CT_SIM_CU_SOURCES,
# and the targets that build them (tools/sim/CMakeLists.txt).
SIM_TESTS = ["sim.chapters", "sim.chapters_racecheck"]
SIM_TARGETS = ["test_sim_chapters", "test_sim_chapters_rc"]
SPEED = "needs a GPU (the emulator's times are the CPU's, not a GPU's)"


def have_gpu():
    """Whether this machine has an NVIDIA GPU (nvidia-smi lists one, or a /dev/nvidiaN exists)."""
    try:
        r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and "GPU" in r.stdout:
            return True
    except (OSError, subprocess.TimeoutExpired):
        pass
    return any(re.fullmatch(r"nvidia\d+", n) for n in (os.listdir("/dev") if os.path.isdir("/dev") else []))


def emulated_files(root):
    """The .cu files (relative to root) that the emulator's stage-1 build compiles."""
    try:
        text = (root / "tools" / "sim" / "CMakeLists.txt").read_text(encoding="utf-8")
    except OSError:
        return set()
    m = re.search(r"set\(CT_SIM_CU_SOURCES\b(.*?)\)", text, re.S)
    if not m:
        return set()
    return {p for p in re.findall(r"\$\{CT_SIM_ROOT\}/(\S+?\.cu)\b", m.group(1))}


def wanted(args, cuda_regions):
    """Whether to grade on the emulator, and the line saying why (or why not)."""
    mode = getattr(args, "sim", "auto") or "auto"
    if not cuda_regions or mode == "no":
        return False, None
    if mode in ("yes", "only"):
        return True, f"--sim {mode}"
    if args.preset != "cpu":
        return False, None  # a CUDA build grades them with the gpu tests
    if have_gpu():
        return False, "a GPU is here: grade the CUDA exercises on it with --preset default (or on the emulator with --sim yes)"
    return True, "no GPU here"


def decide(lab, args):
    """(go, why, cuda regions, emulated files): whether to grade on the emulator."""
    ch, chdir, regions, problems = lab.chapter_regions(args.chapter)
    cuda = [r for r in regions if r.is_cuda]
    go, why = wanted(args, cuda)
    files = emulated_files(lab.ROOT) if go else set()
    rels = sorted({str(r.path.relative_to(lab.ROOT.resolve())) for r in cuda})
    if go and not any(rel in files for rel in rels):
        go, why = False, f"it builds none of {', '.join(rels)}: tools/sim/CMakeLists.txt, CT_SIM_CU_SOURCES"
    return go, why, cuda, files


def grade(lab, args, report, why, cuda, files):
    """Grades the .cu regions cuda on the emulator and rewrites their entries, the
    score and the total in report; returns report. lab: the tools/lab module."""
    ch = report["chapter"]
    dest = Path(args.dir).resolve()
    # DIR/build-sim; with --sim only, --build-dir names it (otherwise --build-dir is the cpu build's)
    only = getattr(args, "sim", "auto") == "only"
    build = Path(args.build_dir).resolve() if args.build_dir and only else dest / "build-sim"
    jobs = str(args.jobs or os.cpu_count() or 2)
    print(f"emulator: grading the CUDA exercises of {ch} on the SIMT emulator ({why}; tools/sim, "
          f"the `sim` preset in {build})")
    results, status = run_sim(lab, dest, build, jobs, args, cuda, files)
    sim = report.setdefault("emulator", {"build_dir": str(build)})
    sim.update(status)

    by_number = {e["number"]: e for e in report.get("exercises", [])}
    for r in cuda:
        ex = by_number.get(r.number)
        if ex is None:
            ex = dict(r.as_dict(), label=r.label())
            report.setdefault("exercises", []).append(ex)
        ex.update(graded_on="emulator", speed=SPEED)
        rel = str(r.path.relative_to(lab.ROOT.resolve()))
        if rel not in files:
            ex.update(result="not graded", points=0, max=0, graded_by=[])
            print(f"exercise {r.number} ({r.label()}): NOT GRADED (the emulator does not build {rel} yet: "
                  "tools/sim/CMakeLists.txt, CT_SIM_CU_SOURCES)")
            continue
        ex["graded_by"] = list(SIM_TESTS)
        if status.get("broke"):
            ex.update(result="not graded", points=0, max=0)
            print(f"exercise {r.number} ({r.label()}): NOT GRADED (the emulator's build broke: {status['broke']})")
        elif status.get("build") == "failed":
            ex.update(result="build failed", points=0, max=1)
            print(f"exercise {r.number} ({r.label()}): FAIL 0/1 on the emulated device (build failed)")
        else:
            failed = [t for t in SIM_TESTS if results.get(t, {}).get("result") != "passed"]
            if failed:
                ex.update(result="fail", points=0, max=1)
                print(f"exercise {r.number} ({r.label()}): FAIL 0/1 on the emulated device "
                      f"(failed: {', '.join(failed)})")
            else:
                ex.update(result="pass", points=1, max=1)
                print(f"exercise {r.number} ({r.label()}): PASS 1/1 on the emulated device")
        print(f"  speed: {SPEED}")
    exs = report.get("exercises", [])
    report["score"] = sum(e.get("points", 0) for e in exs)
    report["max"] = sum(e.get("max", 0) for e in exs)
    on = [str(e["number"]) for e in exs if e.get("graded_on") == "emulator" and e.get("max")]
    note = f" (exercise {', '.join(on)} on the emulated device: correctness only, speed needs a GPU)" if on else ""
    print(f"score: {report['score']}/{report['max']}{note}")
    return report


def run_sim(lab, dest, build, jobs, args, cuda, files):
    """Configures and builds DEST's emulator tests, runs them. Returns ({test: result}, status)."""
    status = {"configure": None, "build": None, "tests": {}}
    cache = build / "CMakeCache.txt"
    if cache.is_file():  # made for another copy (moved, or the student's own machine)
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(errors="replace"), re.M)
        if m and Path(m.group(1)).resolve() != dest:
            shutil.rmtree(build)
    cmd = ["cmake", "--preset", "sim", "-B", str(build)]
    rc, out = lab.run_logged(cmd, cwd=dest)
    if rc != 0:
        status.update(configure="failed", broke="configure failed")
        print(f"emulator: configure FAILED ({' '.join(cmd)})")
        print(lab.indent(lab.first_errors(out)))
        return {}, status
    status["configure"] = "ok"
    rc, out = lab.run_logged(["cmake", "--build", str(build), "--target", "ct_sim", "-j", jobs])
    if rc != 0:
        status.update(build="runtime failed", broke="the runtime or the emulator did not build")
        print("emulator: FAILED building the runtime and the emulator (ct, ct_sim), which the student does not edit:")
        print(lab.indent(lab.first_errors(out)))
        return {}, status
    for r in cuda:  # pasted files may look older than the objects
        try:
            os.utime(dest / r.path.relative_to(lab.ROOT.resolve()))
        except OSError:
            pass
    rc, out = lab.run_logged(["cmake", "--build", str(build), "--target", *SIM_TARGETS, "-j", jobs])
    if rc != 0:
        status.update(build="failed", build_errors=lab.first_errors(out))
        print(f"emulator: build FAILED ({', '.join(SIM_TARGETS)}); the compiler's first errors:")
        print(lab.indent(status["build_errors"]))
        return {}, status
    status["build"] = "ok"
    print(f"emulator: build ok ({', '.join(SIM_TARGETS)})")
    with tempfile.TemporaryDirectory(prefix="lab-sim-") as tmp:
        junit = Path(tmp) / "junit.xml"
        regex = "^(" + "|".join(re.escape(t) for t in SIM_TESTS) + ")$"
        cmd = ["ctest", "--test-dir", str(build), "-R", regex, "-j", jobs, "--output-junit", str(junit)]
        if args.timeout:
            cmd += ["--timeout", str(args.timeout)]
        rc, out = lab.run_logged(cmd)
        if not junit.is_file():
            status["broke"] = "ctest did not run"
            print("emulator: ctest did not run:")
            print(lab.indent(lab.tail(out, 20)))
            return {}, status
        results = lab.junit_results(junit)
    print("emulator tests:")
    for name in SIM_TESTS:
        res = results.get(name, {"result": "not run", "output": "", "time": 0})
        print(f"  {res['result'].upper():8s} {name} ({res['time']:.1f} s)")
        if res["result"] != "passed":
            out = res["output"].splitlines()
            # the first reports that name a kernel's thread (race check, ASan), then the test's last lines
            first = [l for l in out if re.search(r"racecheck: [\w-]+ hazard|ERROR: AddressSanitizer|"
                                                 r"report below is from kernel", l)][:3]
            lines = first + [l for l in out[-200:] if not l.startswith("==") and l not in first][-args.lines:]
            print(lab.indent(lines if any(l.strip() for l in lines) else ["(no output)"], "           | "))
        status["tests"][name] = {"result": res["result"], "time": res["time"]}
    return results, status


def only_report(lab, args):
    """The report `--sim only` starts from: the chapter's regions, none graded yet (the C
    exercises are left out: --sim only builds none of the chapter's C)."""
    ch, chdir, regions, problems = lab.chapter_regions(args.chapter)
    if problems:
        raise lab.LabError("the chapter's lab regions (in the reference tree) have problems:\n  "
                           + "\n  ".join(problems))
    dest = Path(args.dir).resolve()
    if not dest.is_dir() or not (dest / "CMakePresets.json").is_file():
        raise lab.LabError(f"{dest} is not a copy of the project (make it with: tools/lab make {ch} {args.dir})")
    if not any(r.is_cuda for r in regions):
        raise lab.LabError(f"{ch} has no lab region in a .cu file: nothing for --sim only to grade")
    print(f"lab check {ch}: {dest} (--sim only: the CUDA exercises, on the emulator)")
    return {"chapter": ch, "dir": str(dest), "preset": "sim", "exercises": [], "score": 0, "max": 0}


class _ScoreRenamed:
    """stdout whose lines "score: ..." read "score without the emulator: ..." (the CPU build's
    score, printed by cmd_check before the emulator grades the rest): one "score:" line in all."""

    def __init__(self, out):
        self.out, self.bol = out, True  # bol: at the beginning of a line

    def write(self, text):
        lines = []
        for line in text.splitlines(True):
            if self.bol and line.startswith("score: "):
                line = "score without the emulator: " + line[len("score: "):]
            lines.append(line)
            self.bol = line.endswith("\n")
        self.out.write("".join(lines))
        return len(text)

    def flush(self):
        self.out.flush()


def check(lab, args):
    """tools/lab's run_check hook: (report, status) with the CUDA exercises graded on the
    emulator where wanted."""
    if getattr(args, "sim", "auto") == "only":
        report = only_report(lab, args)
        go, why, cuda, files = decide(lab, args)
        if not go:
            raise lab.LabError(f"--sim only: the emulator cannot grade {args.chapter}'s CUDA exercises ({why})")
        return grade(lab, args, report, why, cuda, files), 0
    go, why, cuda, files = decide(lab, args)
    if not go:
        report, status = lab.cmd_check(args)
        if why and status == 0:
            print(f"emulator: not used ({why})")
        return report, status
    out = sys.stdout
    sys.stdout = _ScoreRenamed(out)
    try:
        report, status = lab.cmd_check(args)
    finally:
        sys.stdout = out
    if status == 0:
        report = grade(lab, args, report, why, cuda, files)
    return report, status


if __name__ == "__main__":
    sys.exit("tools/ctools/lab_sim.py is part of tools/lab: run tools/lab check chNN DIR")
