#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 4 (matrix multiplication) against what it claims.

Usage:
    check_ch04.py report CH04 METRICS.json DUMPDIR      --device cpu --quick: every CPU version checked
                                                        and OK, metrics sane, products re-checked with numpy
    check_ch04.py corrupt CH04 METRICS.json             --corrupt cpu_blocked: the check fails, exit 1
    check_ch04.py gpu CH04 METRICS.json HAVE_CUDA       --device cuda (full sizes): every GPU version OK
    check_ch04.py emulated CH04 METRICS.json            the sim-runtime build: --device cuda --quick on the
                                                        emulated device (tools/sim): every GPU version checked
                                                        OK at the emulator's sizes, no speed reported
    check_ch04.py twin CH04 PYTHON TWIN.py WORKDIR      ch04_pytorch.py on the CPU: same sections, sizes, keys
    check_ch04.py gpu_twin CH04 PYTHON TWIN.py WORKDIR HAVE_CUDA
                                                        both on CUDA: ct_mm against torch.mm, dtype by dtype

Exit 0: passed; 1: failed (the reason is printed); 77: skipped (ctest's
SKIP_RETURN_CODE), only where the thing under test cannot exist here.

Independent references: numpy's float64 product of the matrices the chapter
dumps (--dump), the tolerance formula the chapter documents, and PyTorch.
Performance is printed for the record, never asserted.
"""
import math
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaptertest  # noqa: E402
from chaptertest import (expect, fresh, load_metrics, positive, run, run_cuda, run_with_twin,  # noqa: E402
                         sections_of, skip, skip_unless_cuda_build, skip_unless_imports, torch_cuda_available)

SECTIONS = ["cpu", "cpu ladder", "gpu", "gpu ladder", "speedup"]
CPU_VERSIONS = ["cpu_naive", "cpu_blocked", "cpu_mm", "cpu_cblas"]
GPU_VERSIONS = ["gpu_naive", "gpu_coalesced", "gpu_smem_tiled", "gpu_reg_tiled",
                "gpu_mm_f32", "gpu_mm_tf32", "gpu_mm_bf16", "gpu_mm_f16"]
TWIN_GPU_VERSIONS = GPU_VERSIONS[4:]
PREC = {"gpu_mm_tf32": "tf32", "gpu_mm_bf16": "bf16", "gpu_mm_f16": "f16"}
NAIVE_CPU_MAX = 512
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK_RE = re.compile(r"^check (\S+) (\d+): (?:max rel err (\S+) \(tol (\S+), (all|sampled) (\d+) entries\) (OK|FAIL)"
                      r"|error: .* FAIL)$", re.M)


def tolerance(prec, k):
    """The tolerances the chapter documents (f32 scales with sqrt(K))."""
    return {"f32": 2e-6 * math.sqrt(k), "tf32": 1e-2, "f16": 1e-2, "bf16": 3e-2}[prec]


def checks_of(stdout):
    """{(version, size): (err, tol, scope, count, status)}; err None for an error line."""
    out = {}
    for mt in CHECK_RE.finditer(stdout):
        key = (mt.group(1), int(mt.group(2)))
        expect(key not in out, f"two check lines for {key}")
        if mt.group(3) is None:
            out[key] = (None, None, None, 0, "FAIL")
        else:
            out[key] = (float(mt.group(3)), float(mt.group(4)), mt.group(5), int(mt.group(6)), mt.group(7))
    return out


def expect_ladder(r, m, device, versions, expect_sizes):
    """Every version checked OK at every size (the CPU's naive loop only up to 512),
    its check honest (tolerance as documented, error within it, matching the metrics),
    and a positive GFLOP/s recorded."""
    sizes = m.get(f"{device}_sizes")
    expect(sizes == expect_sizes, f"{device}_sizes={sizes!r}, expected {expect_sizes}")
    checks = checks_of(r.stdout)
    for v in versions:
        gflops, errs = m.get(f"{v}_gflops"), m.get(f"{v}_max_rel_err")
        expect(isinstance(gflops, list) and len(gflops) == len(sizes), f"metrics {v}_gflops={gflops!r}")
        for s, n in enumerate(sizes):
            if v == "cpu_naive" and n > NAIVE_CPU_MAX:
                expect((v, n) not in checks and gflops[s] is None, f"{v} ran at n={n} but the chapter skips it")
                expect(re.search(rf"^skip {v} {n}: ", r.stdout, re.M), f"no skip note for {v} at n={n}", r)
                continue
            expect((v, n) in checks, f"no check line for {v} at n={n}", r)
            err, tol, scope, count, status = checks[(v, n)]
            expect(status == "OK", f"check {v} {n} failed: err {err} tol {tol}", r)
            want_tol = tolerance(PREC.get(v, "f32"), n)
            expect(abs(tol - want_tol) <= 0.01 * want_tol, f"{v} {n}: tolerance {tol}, documented {want_tol:.3e}")
            expect(err <= tol, f"{v} {n}: printed OK with err {err} > tol {tol}", r)
            want_scope = "all" if n * n <= 256 * 256 else "sampled"
            expect(scope == want_scope and count >= min(n * n, 1024),
                   f"{v} {n}: checked {scope} {count} entries (want {want_scope}, >= 1024 or all)")
            expect(errs[s] is not None and abs(errs[s] - err) <= 0.01 * err + 1e-300,
                   f"{v} {n}: metrics error {errs[s]} but printed {err}")
            expect(positive(gflops[s]), f"{v} at n={n}: GFLOP/s {gflops[s]!r}")
            ms = m[f"{v}_ms"][s]
            expect(positive(ms) and abs(2 * n**3 / (ms * 1e-3) / 1e9 - gflops[s]) <= 1e-6 * gflops[s],
                   f"{v} at n={n}: GFLOP/s {gflops[s]} is not 2n^3 / {ms} ms")
    return checks


def check_report_common(r, m, device):
    lines = r.stdout.splitlines()
    expect(lines and lines[0].startswith("device: "), "the first line does not start with 'device: '", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}, expected {SECTIONS}", r)
    expect(m.get("device") == device, f"metrics device={m.get('device')!r}, expected {device}")
    cores = len(os.sched_getaffinity(0))
    expect(m.get("cpu_cores") == cores, f"cpu_cores={m.get('cpu_cores')!r}, sched_getaffinity gives {cores}")
    if m.get("cpu_peak_gflops") is not None:  # cores x GHz x FLOPs/cycle, as printed
        want = m["cpu_cores"] * m["cpu_mhz"] / 1e3 * m["cpu_flops_per_cycle"]
        expect(abs(m["cpu_peak_gflops"] - want) <= 1e-9 * want, "cpu_peak_gflops != cores x GHz x FLOPs/cycle")
    expect(positive(m.get("cpu_copy_bandwidth_gbs")), "no measured copy bandwidth")


def numpy_recheck(dump, m, r):
    """Multiplies the dumped A and B again with numpy in float64 and compares every
    version's dumped C: an error as the chapter defines it, computed here."""
    try:
        import numpy as np
    except ImportError:
        print("note: numpy missing, the independent re-check is skipped")
        return
    n = m.get("dump_size")
    expect(n == m["cpu_sizes"][0], f"dump_size={n!r}, expected the smallest size {m['cpu_sizes'][0]}")
    a = np.fromfile(os.path.join(dump, "a.f32"), dtype=np.float32)
    b = np.fromfile(os.path.join(dump, "b.f32"), dtype=np.float32)
    expect(a.size == n * n and b.size == n * n, f"dumped A/B have {a.size}/{b.size} floats, expected {n * n}")
    a, b = a.reshape(n, n).astype(np.float64), b.reshape(n, n).astype(np.float64)
    expect(abs(a.mean()) < 0.1 and abs(a.std() - 1) < 0.1, "A does not look like randn (mean 0, std 1)")
    ref = a @ b
    scale = np.outer(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=0))
    checks = checks_of(r.stdout)
    for v in CPU_VERSIONS:
        c = np.fromfile(os.path.join(dump, f"c_{v}.f32"), dtype=np.float32)
        expect(c.size == n * n, f"c_{v}.f32 has {c.size} floats")
        err = float(np.max(np.abs(c.reshape(n, n) - ref) / scale))
        printed = checks[(v, n)][0]
        print(f"numpy: {v} {n}: max rel err {err:.3e} (the chapter printed {printed:.3e})")
        expect(err <= 1e-5, f"{v} {n}: numpy finds error {err:.3e}, more than f32 rounding explains")
        expect(abs(err - printed) <= 0.02 * err + 1e-12, f"{v} {n}: numpy's error {err:.3e}, chapter's {printed:.3e}")


def cmd_report(ch04, metrics, dump):
    shutil.rmtree(dump, ignore_errors=True)
    os.makedirs(dump)
    r = run([ch04, "--device", "cpu", "--quick", "--metrics", fresh(metrics), "--dump", dump])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    m = load_metrics(metrics)
    expect(r.stdout.splitlines()[0] == "device: cpu", "asked for the CPU, the first line must be 'device: cpu'", r)
    check_report_common(r, m, "cpu")
    expect_ladder(r, m, "cpu", CPU_VERSIONS, [64, 128, 256])
    expect(m.get("checks_failed") == 0, f"checks_failed={m.get('checks_failed')!r}")
    # The OpenBLAS rungs and the runtime's overhead line.
    for s, n in enumerate(m["cpu_sizes"]):
        ratio = m["cpu_mm_of_cblas"][s]
        want = m["cpu_mm_gflops"][s] / m["cpu_cblas_gflops"][s]
        expect(abs(ratio - want) <= 1e-9, f"cpu_mm_of_cblas at {n} is not cpu_mm / cpu_cblas")
        print(f"n={n}: ct_mm at {100 * ratio:.1f}% of cblas_sgemm, cpu_blocked at "
              f"{100 * m['cpu_blocked_of_cblas'][s]:.1f}%")
    expect(len(re.findall(r"^  runtime overhead: ct_mm reaches [\d.]+% of cblas_sgemm$", r.stdout, re.M)) == 3,
           "no 'runtime overhead' line per size", r)
    expect("needs a GPU" in r.stdout, "the CPU run does not say the speed-up needs a GPU", r)
    numpy_recheck(dump, m, r)
    check_timing_log(r, m, "cpu")
    check_prose_sizes(m)
    print("PASS")


def check_timing_log(r, m, ladder):
    """The ladder's timing note and its metrics agree: LADDER_timings_timed counts one timing
    per version and size that ran, _suspect what is still implausible, and the note is printed
    exactly when something was re-measured or is still suspect."""
    timed, rem, sus = (m.get(f"{ladder}_timings_{k}") for k in ("timed", "remeasured", "suspect"))
    ran = sum(1 for v in m if v.startswith(f"{ladder}_") and v.endswith("_gflops") and isinstance(m[v], list)
              for g in m[v] if isinstance(g, (int, float)) and not math.isnan(g))
    expect(isinstance(timed, (int, float)) and timed == ran,
           f"{ladder}_timings_timed = {timed!r}, but {ran} timings have a GFLOP/s value")
    expect(isinstance(sus, (int, float)) and isinstance(rem, (int, float)) and 0 <= sus <= timed and 0 <= rem <= timed,
           f"{ladder}_timings_suspect/remeasured = {sus!r}/{rem!r} out of {timed!r}")
    note = re.search(r"^timing note: (\d+) of (\d+) timings (still implausible|were implausible at first)",
                     chaptertest.section_text(r.stdout, f"{ladder} ladder"), re.M)
    if sus:
        expect(note and int(note.group(1)) == sus and int(note.group(2)) == timed,
               f"{sus} suspect timings but the note says {note.group(0) if note else 'nothing'}", r)
    elif rem:
        expect(note and int(note.group(1)) == rem, f"{rem} re-measured timings but no note", r)
    else:
        expect(note is None, "a timing note without any re-measured or suspect timing", r)


def check_prose_sizes(m):
    """The chapter's prose says which sizes --quick and the full run measure: the same as the
    program's constants and this --quick run."""
    with open(os.path.join(ROOT, "chapters", "ch04_matmul", "ch04_matmul.c"), encoding="utf-8") as f:
        src = f.read()
    consts = {k: [int(x) for x in v.split(",")] for k, v in
              re.findall(r"static const int (\w+_SIZES(?:_QUICK)?)\[\] = \{([\d, ]+)\};", src)}
    expect(consts.get("CPU_SIZES_QUICK") == m["cpu_sizes"], f"CPU_SIZES_QUICK {consts.get('CPU_SIZES_QUICK')} "
           f"is not what --quick ran: {m['cpu_sizes']}")
    en = re.search(r"Under `--quick` the CPU runs ([\d, and]+) and the GPU ([\d, and]+); the full run goes up "
                   r"to (\d+) on the CPU and (\d+) on the GPU", src)
    zh = re.search(r"`--quick` 时 CPU 只跑 ([\d、]+)，GPU 只跑 ([\d和 ]+)；完整运行时 CPU 跑到 (\d+)，GPU 跑到 (\d+)", src)
    expect(en and zh, "the prose no longer says which sizes --quick runs (update check_prose_sizes)")
    nums = lambda t: [int(x) for x in re.findall(r"\d+", t)]
    for lang, mm in (("en", en), ("zh", zh)):
        said = (nums(mm.group(1)), nums(mm.group(2)), int(mm.group(3)), int(mm.group(4)))
        want = (consts["CPU_SIZES_QUICK"], consts["GPU_SIZES_QUICK"], consts["CPU_SIZES"][-1], consts["GPU_SIZES"][-1])
        expect(said == want, f"the {lang} prose says --quick sizes / full maxima {said}, the program has {want}")
    print("ok: the prose's --quick sizes and full-run maxima are the program's")


def cmd_corrupt(ch04, metrics):
    r = run([ch04, "--device", "cpu", "--quick", "--metrics", fresh(metrics), "--corrupt", "cpu_blocked"])
    expect(r.returncode == 1, f"a spoiled result must make the chapter exit 1, got {r.returncode}", r)
    expect("check(s) failed" in r.stderr, "stderr does not say that checks failed", r)
    m = load_metrics(metrics)
    checks = checks_of(r.stdout)
    for n in m["cpu_sizes"]:
        expect(checks.get(("cpu_blocked", n), (0,) * 5)[4] == "FAIL", f"cpu_blocked {n} not reported FAIL", r)
        for v in ("cpu_naive", "cpu_mm", "cpu_cblas"):
            expect(checks.get((v, n), (0,) * 5)[4] == "OK", f"{v} {n} should still pass", r)
    expect(m.get("checks_failed") == len(m["cpu_sizes"]), f"checks_failed={m.get('checks_failed')!r}")
    expect(all(g is None for g in m["cpu_blocked_gflops"]), "a version that failed its check was timed anyway")
    print("PASS")


def cmd_gpu(ch04, metrics, have_cuda):
    skip_unless_cuda_build(have_cuda)
    r = run_cuda([ch04, "--device", "cuda", "--metrics", fresh(metrics)])
    expect(r.returncode == 0, f"--device cuda: exit code {r.returncode}", r)
    print(r.stdout)
    m = load_metrics(metrics)
    first = r.stdout.splitlines()[0]
    match = re.fullmatch(r"device: (cuda:\d+) \((.+)\)", first)
    expect(match, f"first line {first!r}, expected 'device: cuda:N (name)'", r)
    check_report_common(r, m, match.group(1))
    expect_ladder(r, m, "cpu", CPU_VERSIONS, [128, 256, 512, 1024, 2048])
    expect_ladder(r, m, "gpu", GPU_VERSIONS, [256, 512, 1024, 2048, 4096])
    expect(m.get("checks_failed") == 0, f"checks_failed={m.get('checks_failed')!r}")
    expect(positive(m.get("gpu_peak_fp32_gflops")), "no FP32 peak from the device properties")
    expect(positive(m.get("gpu_peak_bandwidth_gbs")), "no memory bandwidth from the device properties")
    expect(m.get("speedup_n") == 2048 and positive(m.get("speedup_f32")), "no GPU-vs-CPU speed-up at n = 2048")
    # For the record (the targets; measured, not asserted).
    i = m["gpu_sizes"].index(4096)
    print(f"record: gpu_reg_tiled at 4096 = {100 * m['gpu_reg_tiled_of_cublas'][i]:.1f}% of cuBLAS SGEMM "
          "(target >= 50%)")
    print(f"record: ct_mm at 2048 on the CPU = {100 * m['cpu_mm_of_cblas'][-1]:.1f}% of cblas_sgemm (target >= 95%)")
    print(f"record: speed-up at 2048 = {m['speedup_f32']:.0f}x (f32), {m['speedup_any_dtype']:.0f}x (any dtype)")
    print("PASS")


def cmd_emulated(ch04, metrics):
    """The sim-runtime build (tools/sim): the device is the SIMT emulator. Every GPU rung runs and
    is checked as on a GPU at the emulator's sizes (the chapter's GPU_SIZES_EMULATED_QUICK); its
    times are labelled emulated, and no GFLOP/s, fraction or speed-up is reported."""
    r = run([ch04, "--device", "cuda", "--quick", "--metrics", fresh(metrics)], timeout=1500)
    expect(r.returncode == 0, f"--device cuda --quick on the emulated device: exit code {r.returncode}", r)
    print(r.stdout)
    m = load_metrics(metrics)
    expect(r.stdout.splitlines()[:1] == ["device: cuda:0 (emulated)"], "the first line is not "
           "'device: cuda:0 (emulated)': is this the sim-runtime build?", r)
    check_report_common(r, m, "cuda:0")
    expect_ladder(r, m, "cpu", CPU_VERSIONS, [64, 128, 256])
    with open(os.path.join(ROOT, "chapters", "ch04_matmul", "ch04_matmul.c"), encoding="utf-8") as f:
        src = f.read()
    want = [int(x) for x in re.search(r"GPU_SIZES_EMULATED_QUICK\[\] = \{([\d, ]+)\}", src).group(1).split(",")]
    expect(m.get("emulated_sizes") == want, f"emulated_sizes={m.get('emulated_sizes')!r}, the chapter says {want}")
    expect(m.get("gpu_emulated") == 1 and m.get("gpu_name") == "emulated", "gpu_emulated/gpu_name not set")
    ladder = chaptertest.section_text(r.stdout, "gpu ladder")
    expect(re.search(r"^emulated device: sizes for the emulator, n = " + " ".join(map(str, want)), ladder, re.M),
           "the gpu ladder does not say it chose the emulator's sizes", r)
    expect(re.search(r"^\s+version\s+emulated ms$", ladder, re.M) and "GFLOP/s" not in ladder,
           "the emulated ladder's table is not labelled 'emulated ms' (or shows GFLOP/s)", r)
    checks = checks_of(r.stdout)
    for v in GPU_VERSIONS:
        errs = m.get(f"{v}_emulated_max_rel_err")
        for s, n in enumerate(want):
            expect((v, n) in checks, f"no check line for {v} at n={n}", r)
            err, tol, scope, count, status = checks[(v, n)]
            expect(status == "OK", f"check {v} {n} failed on the emulated device: err {err} tol {tol}", r)
            want_tol = tolerance(PREC.get(v, "f32"), n)
            expect(abs(tol - want_tol) <= 0.01 * want_tol and err <= tol, f"{v} {n}: err {err}, tol {tol}")
            expect(scope == "all" and count == n * n, f"{v} {n}: checked {scope} {count} entries, want all {n * n}")
            expect(isinstance(errs, list) and errs[s] is not None and abs(errs[s] - err) <= 0.01 * err + 1e-300,
                   f"{v} {n}: metrics error {errs!r} but printed {err}")
    for k in m:  # nothing a reader of gpu_* metrics or the book could take for a GPU's speed
        expect(not (k.startswith("gpu_") and k.endswith(("_gflops", "_ms", "_of_cublas", "_of_peak"))),
               f"metric {k} written on the emulated device")
    expect("speedup_f32" not in m and "needs a GPU" in chaptertest.section_text(r.stdout, "speedup"),
           "a speed-up reported on the emulated device", r)
    expect(m.get("checks_failed") == 0, f"checks_failed={m.get('checks_failed')!r}")
    print("PASS")


def probe_torch(python, need_cuda=False):
    skip_unless_imports(python, "torch")
    if need_cuda and not torch_cuda_available(python):
        skip("this PyTorch cannot use a GPU here (no GPU, or a CPU-only torch)")


def cmd_twin(ch04, python, twin, workdir):
    probe_torch(python)
    rc, rp, mc, mp = run_with_twin("ch04", [ch04, "--device", "cpu", "--quick"],
                                   [python, twin, "--device", "cpu", "--quick"], workdir)
    expect(sections_of(rp.stdout) == sections_of(rc.stdout),
           f"sections differ: twin {sections_of(rp.stdout)}, C {sections_of(rc.stdout)}", rp)
    expect(rp.stdout.splitlines()[0] == "device: cpu", "the twin's first line must be 'device: cpu'", rp)
    expect(mp.get("cpu_sizes") == mc.get("cpu_sizes"), f"sizes: twin {mp.get('cpu_sizes')}, C {mc.get('cpu_sizes')}")
    checks = checks_of(rp.stdout)
    for s, n in enumerate(mp["cpu_sizes"]):
        err, tol, _, _, status = checks.get(("cpu_mm", n), (None, None, None, 0, "missing"))
        expect(status == "OK", f"twin: check cpu_mm {n} is {status}", rp)
        expect(abs(tol - tolerance("f32", n)) <= 0.01 * tol, f"twin: tolerance {tol} at {n}")
        gc, gp = mc["cpu_mm_gflops"][s], mp["cpu_mm_gflops"][s]
        expect(positive(gc) and positive(gp), f"cpu_mm_gflops at {n}: C {gc!r}, twin {gp!r}")
        print(f"n={n}: ct_mm {gc:.1f} GFLOP/s, torch.mm {gp:.1f} GFLOP/s ({100 * gc / gp:.0f}%)")
    for key in ("cpu_cores", "cpu_mhz", "cpu_flops_per_cycle"):
        expect(mc.get(key) == mp.get(key), f"metrics {key}: C {mc.get(key)!r}, twin {mp.get(key)!r}")
    print("PASS")


def cmd_gpu_twin(ch04, python, twin, workdir, have_cuda):
    skip_unless_cuda_build(have_cuda)
    probe_torch(python, need_cuda=True)
    c_json, py_json = (fresh(os.path.join(workdir, f)) for f in ("ch04_gpu_twin_c.json", "ch04_gpu_twin_py.json"))
    rc = run_cuda([ch04, "--device", "cuda", "--metrics", c_json])
    rp = run([python, twin, "--device", "cuda", "--metrics", py_json])
    expect(rc.returncode == 0, f"ch04 exit code {rc.returncode}", rc)
    expect(rp.returncode == 0, f"ch04_pytorch.py exit code {rp.returncode}", rp)
    print(rp.stdout)
    mc, mp = load_metrics(c_json), load_metrics(py_json)
    expect(sections_of(rp.stdout) == sections_of(rc.stdout), "sections differ", rp)
    expect(mp.get("gpu_sizes") == mc.get("gpu_sizes"), f"gpu sizes: twin {mp.get('gpu_sizes')}, C {mc.get('gpu_sizes')}")
    checks = checks_of(rp.stdout)
    for v in TWIN_GPU_VERSIONS:
        for s, n in enumerate(mp["gpu_sizes"]):
            expect(checks.get((v, n), (0,) * 5)[4] == "OK", f"twin: check {v} {n} not OK", rp)
            gc, gp = mc[f"{v}_gflops"][s], mp[f"{v}_gflops"][s]
            expect(positive(gc) and positive(gp), f"{v}_gflops at {n}: C {gc!r}, twin {gp!r}")
            note = "" if n < 1024 or gc >= 0.97 * gp else "  (below the 97% target)"
            print(f"record: {v} n={n}: ct_mm {gc:.0f} GFLOP/s, torch.mm {gp:.0f} GFLOP/s "
                  f"= {100 * gc / gp:.1f}%{note}")
    print("PASS")


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 3), "corrupt": (cmd_corrupt, 2), "gpu": (cmd_gpu, 3),
                                       "emulated": (cmd_emulated, 2),
                                       "twin": (cmd_twin, 4), "gpu_twin": (cmd_gpu_twin, 5)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
