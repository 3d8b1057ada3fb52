#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 4's PyTorch twin: C = A @ B with torch.mm, checked, then timed.

The C chapter climbs a ladder of hand-written versions; in PyTorch a matrix
product is one call, so the twin runs the rungs PyTorch offers, the way the
seed tutorials write it (tensors made on the device, torch.mm, the TF32 switch,
bf16/fp16 tensors), with the same sizes, the same check against float64, the
same timing rules and the same metric keys as ch04:

    cpu_mm        torch.mm on CPU float32 tensors (MKL or OpenBLAS)
    gpu_mm_f32    torch.mm on CUDA float32, torch.backends.cuda.matmul.allow_tf32 = False
    gpu_mm_tf32   the same with allow_tf32 = True (tensor cores)
    gpu_mm_bf16   torch.mm on bfloat16 tensors (tensor cores, f32 accumulation)
    gpu_mm_f16    torch.mm on float16 tensors

so `ct_mm` and `torch.mm` can be compared key by key:

    ./ch04 --device cpu --quick --metrics c.json
    /usr/bin/python3 chapters/ch04_matmul/ch04_pytorch.py --device cpu --quick --metrics py.json

Exit codes as in the C chapters: 2 for a bad flag, 1 for a run-time error or
a failed check.
"""
import math
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares)

CPU_SIZES, CPU_SIZES_QUICK = [128, 256, 512, 1024, 2048], [64, 128, 256]
GPU_SIZES, GPU_SIZES_QUICK = [256, 512, 1024, 2048, 4096], [256, 1024]
N_SAMPLES = 4096
FULL_CHECK_MAX_MN = 256 * 256


def parse_args(argv):
    p = twin.parser("ch04_pytorch.py", "Chapter 4 (PyTorch twin): C = A @ B with torch.mm, checked and timed.")
    twin.explain(p, {})
    return p.parse_args(argv)


# ---- the check: float64 reference, error relative to ||A[i,:]|| * ||B[:,j]|| ----------

def tolerance(prec, k):
    return {"f32": 2e-6 * math.sqrt(k), "tf32": 1e-2, "f16": 1e-2, "bf16": 3e-2}[prec]


class Reference:
    """float64 values of C at all entries (small products) or 4096 random ones plus the corners."""

    def __init__(self, torch, a, b, seed):
        m, k = a.shape
        n = b.shape[1]
        self.m, self.k = m, k
        a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
        self.all = m * n <= FULL_CHECK_MAX_MN
        if self.all:
            self.i = torch.arange(m).repeat_interleave(n)
            self.j = torch.arange(n).repeat(m)
        else:
            g = torch.Generator().manual_seed(seed)
            self.i = torch.cat([torch.tensor([0, 0, m - 1, m - 1]), torch.randint(0, m, (N_SAMPLES,), generator=g)])
            self.j = torch.cat([torch.tensor([0, n - 1, 0, n - 1]), torch.randint(0, n, (N_SAMPLES,), generator=g)])
        if self.all:  # the whole float64 product, and ||A[i,:]|| * ||B[:,j]|| for every (i, j)
            self.ref = (a64 @ b64).flatten()
            self.scale = torch.outer(a64.norm(dim=1), b64.norm(dim=0)).flatten()
        else:
            rows, cols = a64[self.i], b64[:, self.j].t()  # (n_checked, K) each
            self.ref = (rows * cols).sum(1)
            self.scale = rows.norm(dim=1) * cols.norm(dim=1)
        self.scale = self.scale.clamp_min(1e-300)
        self.n = len(self.ref)

    def error(self, torch, c):
        got = c.detach().to("cpu", torch.float64)[self.i, self.j]
        err = ((got - self.ref).abs() / self.scale)
        if not bool(torch.isfinite(err).all()):
            return math.inf
        return float(err.max())


def report_check(name, ref, torch, c, prec, failures):
    tol = tolerance(prec, ref.k)
    err = ref.error(torch, c)
    ok = err <= tol
    print(f"check {name} {ref.m}: max rel err {err:.2e} (tol {tol:.2e}, {'all' if ref.all else 'sampled'} "
          f"{ref.n} entries) {'OK' if ok else 'FAIL'}")
    if not ok:
        failures.append(name)
    return err, ok


# ---- timing: warm-up, batches of at least 1 ms, median -------------------------------

# twin: timing
def time_median(torch, device, fn, budget_ms):
    cuda = device.type == "cuda"

    def sample(calls):
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            for _ in range(calls):
                fn()
            e1.record()
            e1.synchronize()
            return e0.elapsed_time(e1) / calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) * 1e3 / calls

    one = max(sample(1), 1e-4)  # warm-up
    inner = 1 if one >= 1.0 else min(64, math.ceil(1.0 / one))
    reps = max(3, min(15, int(budget_ms / (one * inner))))
    ts = sorted(sample(inner) for _ in range(reps))
    return ts[reps // 2] if reps % 2 else 0.5 * (ts[reps // 2 - 1] + ts[reps // 2])
# twin: end


def table(rows, base_label, base, peak):
    print(f"  {'version':<15} {'':<38} {'ms':>10} {'GFLOP/s':>10} {base_label:>9} {'of peak':>9}")
    for name, label, ms, gf in rows:
        b = f"{100 * gf / base:8.1f}%" if base else f"{'-':>9}"
        p = f"{100 * gf / peak:8.1f}%" if peak else f"{'n/a':>9}"
        print(f"  {name:<15} {label:<38} {ms:10.3f} {gf:10.1f} {b} {p}")


# ---- sections -----------------------------------------------------------------------

def cpu_facts():
    """cores, mean 'cpu MHz', FLOPs per cycle from the ISA flags (as ch04 assumes them)."""
    cores = len(os.sched_getaffinity(0))
    mhz, n, fpc, isa = 0.0, 0, 0, "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
        for v in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M):
            mhz += float(v)
            n += 1
        flags = re.search(r"^flags\s*:(.*)$", text, re.M)
        flags = set(flags.group(1).split()) if flags else set()
        if {"avx512f", "fma"} <= flags:
            fpc, isa = 64, "AVX-512+FMA"
        elif {"avx2", "fma"} <= flags:
            fpc, isa = 32, "AVX2+FMA"
        elif "sse2" in flags:
            fpc, isa = 8, "SSE2"
    except OSError:
        pass
    mhz = mhz / n if n else 0.0
    return cores, mhz, fpc, isa, cores * mhz / 1e3 * fpc


def show_cpu(torch, args, m):
    twin.section("cpu")
    cores, mhz, fpc, isa, peak = cpu_facts()
    print(f"usable cores:             {cores} (torch threads {torch.get_num_threads()})")
    print(f"clock (/proc/cpuinfo):    {mhz:.0f} MHz" if mhz else
          'clock (/proc/cpuinfo):    unknown (no "cpu MHz" line on this CPU)')
    if peak:
        print(f"FLOPs per cycle per core: {fpc} (assumed from {isa})")
        print(f"peak f32 (estimate):      {peak:.1f} GFLOP/s = {cores} cores x {mhz / 1e3:.3f} GHz x {fpc}")
    else:
        print("peak f32:                 not estimated (clock or vector ISA unknown)")
    mib = 16 if args.quick else 64
    x = torch.arange(mib * 2**20 // 4, dtype=torch.float32)
    y = torch.empty_like(x)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        y.copy_(x)
        ts.append(time.perf_counter() - t0)
    gbs = 2 * mib * 2**20 / sorted(ts)[2] / 1e9
    print(f"copy bandwidth:           {gbs:.1f} GB/s (measured: read + write, {mib} MiB)")
    if peak:
        print(f"ridge point:              {peak / gbs:.1f} FLOP/byte (peak / bandwidth)")
    m.update(cpu_cores=cores, cpu_mhz=mhz, cpu_flops_per_cycle=fpc, cpu_peak_gflops=peak or None,
             cpu_copy_bandwidth_gbs=gbs)
    return peak


def run_cpu_ladder(torch, args, peak, m, failures):
    twin.section("cpu ladder")
    sizes = CPU_SIZES_QUICK if args.quick else CPU_SIZES
    budget = 150 if args.quick else 1000
    gflops, mss, errs = [], [], []
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)  # on the CPU, float32
        ref = Reference(torch, a, b, args.seed * 1000003 + n)
        print(f"n = {n}: {2 * n**3 / 1e9:.3f} GFLOP per product")
        c = torch.mm(a, b)
        err, ok = report_check("cpu_mm", ref, torch, c, "f32", failures)
        ms = time_median(torch, torch.device("cpu"), lambda: torch.mm(a, b), budget) if ok else math.nan
        gf = 2 * n**3 / (ms * 1e-3) / 1e9
        gflops.append(gf)
        mss.append(ms)
        errs.append(err)
        if ok:
            table([("cpu_mm", "3 torch.mm (CPU BLAS)", ms, gf)], "of cblas", None, peak)
    m.update(cpu_sizes=sizes, cpu_mm_gflops=gflops, cpu_mm_ms=mss, cpu_mm_max_rel_err=errs)
    return dict(zip(sizes, gflops))


def show_gpu(torch, device, m):
    twin.section("gpu")
    if device.type != "cuda":
        print("no GPU in use; the GPU ladder needs --device cuda on a machine with one")
        return
    p = torch.cuda.get_device_properties(device)
    print(f"device:                   {p.name}, {p.multi_processor_count} SMs, "
          f"compute capability {p.major}.{p.minor}")
    print("peak FP32:                not in PyTorch's device properties (ch04 computes it from the SM clock)")
    m["gpu_name"] = p.name


GPU_RUNGS = [  # name, label, dtype, allow_tf32, precision
    ("gpu_mm_f32", "5 torch.mm f32, allow_tf32=False", "float32", False, "f32"),
    ("gpu_mm_tf32", "6 torch.mm f32, allow_tf32=True", "float32", True, "tf32"),
    ("gpu_mm_bf16", "7 torch.mm bfloat16", "bfloat16", False, "bf16"),
    ("gpu_mm_f16", "7 torch.mm float16", "float16", False, "f16"),
]


def run_gpu_ladder(torch, args, device, m, failures):
    twin.section("gpu ladder")
    if device.type != "cuda":
        print("skipped: no GPU in use; run with --device cuda on a machine that has one")
        return {}
    sizes = GPU_SIZES_QUICK if args.quick else GPU_SIZES
    budget = 100 if args.quick else 500
    results = {name: {} for name, *_ in GPU_RUNGS}
    errs = {name: {} for name, *_ in GPU_RUNGS}
    for n in sizes:
        a = torch.randn(n, n, device=device)  # created on the GPU, as the seeds recommend
        b = torch.randn(n, n, device=device)
        ref = Reference(torch, a, b, args.seed * 1000003 + n + 7)
        print(f"n = {n}: {2 * n**3 / 1e9:.1f} GFLOP per product")
        rows, base = [], None
        for name, label, dtype, tf32, prec in GPU_RUNGS:
            # twin: gpu_mm
            torch.backends.cuda.matmul.allow_tf32 = tf32  # rung 6 only
            x, y = a.to(getattr(torch, dtype)), b.to(getattr(torch, dtype))  # rung 7: bf16/fp16 tensors
            c = torch.mm(x, y)
            torch.cuda.synchronize()
            # twin: end
            err, ok = report_check(name, ref, torch, c.float(), prec, failures)
            errs[name][n] = err
            if ok:
                ms = time_median(torch, device, lambda: torch.mm(x, y), budget)
                gf = 2 * n**3 / (ms * 1e-3) / 1e9
                results[name][n] = (ms, gf)
                rows.append((name, label, ms, gf))
                if name == "gpu_mm_f32":
                    base = gf
        torch.backends.cuda.matmul.allow_tf32 = False
        table(rows, "of cuBLAS", base, None)
    m["gpu_sizes"] = sizes
    for name, *_ in GPU_RUNGS:
        m[f"{name}_gflops"] = [results[name].get(n, (None, None))[1] for n in sizes]
        m[f"{name}_ms"] = [results[name].get(n, (None, None))[0] for n in sizes]
        m[f"{name}_max_rel_err"] = [errs[name].get(n) for n in sizes]
    return {name: {n: v[1] for n, v in r.items()} for name, r in results.items()}


def show_speedup(cpu, gpu, m):
    twin.section("speedup")
    common = sorted(set(cpu) & set(gpu.get("gpu_mm_f32", {})))
    if not gpu:
        n = max(cpu)
        print('needs a GPU: run with --device cuda on a machine with one to measure the seeds\' "10-100x"')
        print(f"this CPU reached {cpu[n]:.1f} GFLOP/s at n = {n} (cpu_mm)")
        m.update(speedup_n=n, speedup_best_cpu_gflops=cpu[n])
        return
    if not common:
        print("no speed-up to report: no size both ladders ran")
        return
    n = common[-1]
    c, g = cpu[n], gpu["gpu_mm_f32"][n]
    best = max((r[n], name) for name, r in gpu.items() if n in r)
    print(f"at n = {n}:")
    print(f"  best CPU f32:          {c:10.1f} GFLOP/s (cpu_mm)")
    print(f"  best GPU f32:          {g:10.1f} GFLOP/s (gpu_mm_f32)  -> {g / c:.0f}x the CPU")
    print(f"  best GPU, any dtype:   {best[0]:10.1f} GFLOP/s ({best[1]})  -> {best[0] / c:.0f}x the CPU")
    print(f'the seeds say "10-100x"; measured here: {g / c:.0f}x in f32, {best[0] / c:.0f}x with tensor cores')
    m.update(speedup_n=n, speedup_best_cpu_gflops=c, speedup_best_gpu_f32_gflops=g, speedup_f32=g / c,
             speedup_any_dtype=best[0] / c)


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch  # after argparse, so that --help works without torch

    device, m = twin.begin(torch, args)  # the device, torch.manual_seed, "device: ...", the metrics
    failures = []
    peak = show_cpu(torch, args, m)
    cpu = run_cpu_ladder(torch, args, peak, m, failures)
    show_gpu(torch, device, m)
    gpu = run_gpu_ladder(torch, args, device, m, failures)
    show_speedup(cpu, gpu, m)
    m["checks_failed"] = len(failures)

    twin.write_metrics(args.metrics, m)  # atomically, as ct_metrics_close does
    if failures:
        twin.die(f"{len(failures)} check(s) failed: {', '.join(failures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
