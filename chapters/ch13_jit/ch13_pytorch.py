#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 13's PyTorch twin: fused elementwise kernels.

The same sections and flags as ch13. The unfused side is each expression
written plainly as torch ops (eager mode: one kernel per operator). The fused
side is torch.cuda.jiterator._create_jit_fn on a GPU (a CUDA code string that
NVRTC compiles at the first call), else torch.compile where it exists
(PyTorch 2.x; on a CPU its Inductor backend writes C++ and builds it with the
system compiler), else none: Debian's torch 1.13 has neither a GPU path nor
torch.compile, and the twin says so.

The bytes each eager expression moves are counted here independently of the
C program: a TorchDispatchMode sees every aten op that runs and adds up the
bytes of its tensor arguments and results (tests/chapter/check_ch13.py
compares the two tables).

    ./ch13 --device cpu --quick
    /usr/bin/python3 chapters/ch13_jit/ch13_pytorch.py --device cpu --quick
"""
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares)

CACHED_CALLS = 9  # calls of a kernel already in memory, the median timed (ch13.c's)
GELU_C = 0.7978845608028654


def parse_args(argv):
    p = twin.parser("ch13_pytorch.py",
                    "Chapter 13's twin: fused elementwise kernels.",
                    quick="small sizes, short timings")
    p.add_argument("--dtype", default="f32", choices=["f32", "f16", "bf16", "f64"])
    p.add_argument("--size", type=int, default=0, help="the largest number of elements timed")
    twin.explain(p, {
        "--dtype": "the inputs' dtype in the timed sections: f32, f16, bf16, f64"})
    return p.parse_args(argv)


# twin: workloads
# The chapter's expressions written plainly as torch ops: eager mode runs one
# kernel per operator.
def gate(x, y, z, alpha=0.5):
    return x * torch.sigmoid(y) + alpha * z


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(GELU_C * (x + 0.044715 * x * x * x)))


def bias_relu(x, b):
    return torch.relu(x + b)


class Traffic:
    """Counts the kernels eager mode runs and the bytes their tensors hold (inputs read, results written)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                outer.kernels += 1
                for a in list(args) + [out]:
                    if isinstance(a, torch.Tensor) and a.dim() > 0:  # a 0-d wrapped scalar is not memory traffic
                        outer.bytes += a.numel() * a.element_size()
                return out

        self.mode, self.kernels, self.bytes = Mode(), 0, 0


def eager_traffic(fn, inputs):
    t = Traffic()
    with t.mode:
        fn(*inputs)
    return t.kernels, t.bytes
# twin: end


WORKLOADS = [
    ("gate", gate, "x,y,z", "x * sigmoid(y) + alpha * z"),
    ("gelu", gelu, "x", "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))"),
    ("bias_relu", bias_relu, "x,b", "relu(x + b)"),
]

# The fused kernels as jiterator code strings (CUDA C++ templates over the dtype).
JITERATOR = {
    "gate": "template <typename T> T gate(T x, T y, T z, T alpha) { return x / (T(1) + exp(-y)) + alpha * z; }",
    "gelu": ("template <typename T> T gelu(T x) { "
             "return T(0.5) * x * (T(1) + tanh(T(0.7978845608028654) * (x + T(0.044715) * x * x * x))); }"),
    "bias_relu": "template <typename T> T bias_relu(T x, T b) { T v = x + b; return v > T(0) ? v : T(0); }",
}


def make_inputs(name, n, dtype, device):
    if name == "bias_relu":
        return [torch.randn(n // 1024, 1024, dtype=dtype, device=device), torch.randn(1024, dtype=dtype, device=device)]
    k = 3 if name == "gate" else 1
    return [torch.randn(n, dtype=dtype, device=device) for _ in range(k)]


def fused_builders(device):
    """name -> a function running the fused kernel, and which fused path it is."""
    if device.type == "cuda" and hasattr(torch.cuda, "jiterator"):
        # twin: cache
        jit = {name: torch.cuda.jiterator._create_jit_fn(code, **({"alpha": 0.5} if name == "gate" else {}))
               for name, code in JITERATOR.items()}
        # twin: end
        return {"gate": lambda x, y, z: jit["gate"](x, y, z, alpha=0.5), "gelu": jit["gelu"],
                "bias_relu": jit["bias_relu"]}, "torch.cuda.jiterator"
    if hasattr(torch, "compile"):
        return {name: torch.compile(fn) for name, fn, _, _ in WORKLOADS}, "torch.compile"
    return None, f"none (torch {torch.__version__} has no torch.compile, and jiterator needs a CUDA device)"


def timer(device):
    if device.type == "cuda":
        def run(fn, budget):
            fn()
            torch.cuda.synchronize()
            times, spent = [], 0.0
            while len(times) < 3 or (spent < budget and len(times) < 64):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
                spent += times[-1] * 1e-3
            return statistics.median(times)
        return run

    def run_cpu(fn, budget):
        fn()
        times, spent = [], 0.0
        while len(times) < 3 or (spent < budget and len(times) < 64):
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
            spent += times[-1] * 1e-3
        return statistics.median(times)
    return run_cpu


def gbs(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def main(argv):
    global torch
    a = parse_args(argv)
    torch = twin.import_torch()
    want = a.device
    if want == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(want)
        if device.type == "cuda" and not torch.cuda.is_available():
            twin.die("--device cuda: CUDA is not available")
    torch.manual_seed(a.seed)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}[a.dtype]
    print(f"device: {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    m = {"device": str(device), "threads": torch.get_num_threads(), "quick": int(a.quick),
         "dtype": str(dtype).replace("torch.", ""), "torch": torch.__version__}
    gpu = device.type == "cuda"
    top = a.size or (1 << (20 if a.quick else 26) if gpu else 1 << (18 if a.quick else 24))
    budget = 0.02 if a.quick else 0.2
    run = timer(device)

    twin.section("workloads")
    n = 1 << 20
    print(f"inputs {m['dtype']}; bytes per output element, fused and unfused:")
    print(f"{'workload':<10} {'inputs':<8} {'kernels':>8} {'fused':>8} {'unfused':>8} {'predicted':>10}  expression")
    for name, fn, inputs, expr in WORKLOADS:
        xs = make_inputs(name, n, dtype, device)
        k, b = eager_traffic(fn, xs)
        fused_b = sum(x.numel() * x.element_size() for x in xs) + n * xs[0].element_size()
        print(f"{name:<10} {inputs:<8} {k:>3} -> 1 {fused_b / n:8.2f} {b / n:8.2f} {b / fused_b:9.2f}x  {expr}")
        m[f"{name}_kernels_unfused"] = k
        m[f"{name}_bytes_per_elem_unfused"] = b / n
        m[f"{name}_bytes_per_elem_fused"] = fused_b / n

    twin.section("source")
    fused, kind = fused_builders(device)
    print(f"fused path here: {kind}")
    for name, code in JITERATOR.items():
        print(f"jiterator code for {name}:\n  {code}")
    m["fused_kind"] = kind

    twin.section("cache")
    if fused is None:
        print("no fused kernels to cache here")
    else:
        xs = make_inputs("gate", 4096, dtype, device)
        t0 = time.perf_counter()
        fused["gate"](*xs)
        if gpu:
            torch.cuda.synchronize()
        first = 1e3 * (time.perf_counter() - t0)
        again = []
        for _ in range(CACHED_CALLS):  # one call takes microseconds: the median of several
            t0 = time.perf_counter()
            fused["gate"](*xs)
            if gpu:
                torch.cuda.synchronize()
            again.append(1e3 * (time.perf_counter() - t0))
        second = statistics.median(again)
        print(f"first call:  {first:.1f} ms (compiled by {kind})")
        print(f"second call: {1e3 * second:.1f} us, the median of {CACHED_CALLS} calls (cached in memory)")
        m["first_call_ms"], m["second_call_us"] = first, 1e3 * second

    twin.section("errors")
    try:
        gate(torch.zeros(4, 3, device=device), torch.zeros(4, device=device), torch.zeros(3, device=device))
        print("no error (unexpected)")
    except RuntimeError as e:
        print(f"gate with x (4, 3) and y (4): shapes that do not broadcast\n  {e}")
        m["broadcast_error"] = str(e)

    twin.section("agreement")
    print("gate on 4096 random elements: max |error| against float64")
    print(f"{'dtype':<9} {'fused':>12} {'unfused':>12}")
    for dt in (torch.float32, torch.float16):
        xs = make_inputs("gate", 4096, dt, device)
        ref = gate(*[x.double() for x in xs])
        name = str(dt).replace("torch.", "")
        try:
            eu = (gate(*xs).double() - ref).abs().max().item()
            ef = (fused["gate"](*xs).double() - ref).abs().max().item() if fused else math.nan
        except RuntimeError as e:  # torch 1.13 has no float16 sigmoid on the CPU
            print(f"{name:<9} not run: {e}")
            continue
        print(f"{name:<9} {ef:12.3g} {eu:12.3g}")
        key = "f32" if dt == torch.float32 else "f16"
        m[f"{key}_unfused_err"], m[f"{key}_fused_err"] = eu, (ef if fused else None)

    try:
        gate(*make_inputs("gate", 16, dtype, device))
    except RuntimeError as e:
        twin.die(f"--dtype {a.dtype} on {device}: {e}")

    twin.section("speed")
    # twin: speed
    src = torch.randn(top, dtype=dtype, device=device)
    dst = torch.empty_like(src)
    copy = gbs(2 * top * src.element_size(), run(lambda: dst.copy_(src), budget))
    # twin: end
    print(f"{top} elements of {m['dtype']}; copy bandwidth (copy_, read + write): {copy:.1f} GB/s")
    print(f"{'workload':<10} {'fused ms':>10} {'unfused ms':>11} {'speed-up':>9} {'fused GB/s':>11} {'unfused GB/s':>12}")
    m["copy_gbs"], m["speed_elements"] = copy, top
    for name, fn, _, _ in WORKLOADS:
        xs = make_inputs(name, top, dtype, device)
        k, ub = eager_traffic(fn, xs)
        fb = sum(x.numel() * x.element_size() for x in xs) + top * xs[0].element_size()
        ums = run(lambda: fn(*xs), budget)
        fms = run(lambda: fused[name](*xs), budget) if fused else math.nan
        print(f"{name:<10} {fms:10.3f} {ums:11.3f} {ums / fms:8.2f}x {gbs(fb, fms):11.1f} {gbs(ub, ums):12.1f}")
        m.update({f"{name}_unfused_ms": ums, f"{name}_fused_ms": fms if fused else None,
                  f"{name}_unfused_gbs": gbs(ub, ums), f"{name}_fused_gbs": gbs(fb, fms) if fused else None,
                  f"{name}_speedup": ums / fms if fused else None})

    twin.section("sizes")
    print(f"gate, {m['dtype']}: effective GB/s")
    print(f"{'elements':>12} {'fused':>10} {'unfused':>10} {'copy':>10}")
    sizes, s = [], 1 << (14 if gpu else 12)
    while s < top:
        sizes.append(s)
        s *= 4
    sizes.append(top)
    fs, us, cs = [], [], []
    for s in sizes:
        xs = make_inputs("gate", s, dtype, device)
        k, ub = eager_traffic(gate, xs)
        fb = 4 * s * xs[0].element_size()
        us.append(gbs(ub, run(lambda: gate(*xs), budget)))
        fs.append(gbs(fb, run(lambda: fused["gate"](*xs), budget)) if fused else None)
        a_, b_ = torch.randn(s, dtype=dtype, device=device), torch.empty(s, dtype=dtype, device=device)
        cs.append(gbs(2 * s * a_.element_size(), run(lambda: b_.copy_(a_), budget)))
        f_txt = f"{fs[-1]:10.2f}" if fused else f"{'-':>10}"
        print(f"{s:12d} {f_txt} {us[-1]:10.2f} {cs[-1]:10.2f}")
    m.update({"sizes": sizes, "size_fused_gbs": fs, "size_unfused_gbs": us, "size_copy_gbs": cs})

    twin.write_metrics(a.metrics, m)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
