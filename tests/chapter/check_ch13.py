#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 13 (runtime-compiled kernels) against independent references.

    check_ch13.py report     CH13 WORK               --device cpu --quick in a fresh cache
    check_ch13.py restart    CH13 WORK               two runs, one cache: the second compiles nothing
    check_ch13.py nocc       CH13 WORK               CT_JIT_CC missing: a clear message, exit 0, unfused only
    check_ch13.py badcache   CH13 WORK               a group-writable cache directory is refused, said so
    check_ch13.py badflag    CH13 WORK               bad flags exit 2; a bad --expr exits 1 with its caret
    check_ch13.py twin       CH13 PYTHON TWIN WORK   the twin prints the same sections; its own count of
                                                     eager kernels and bytes (a TorchDispatchMode) equals
                                                     ct_jit_traffic_of's; the broadcast error's words agree
    check_ch13.py twin_agree CH13 PYTHON TWIN WORK   torch, in float64, on the inputs C saved, gives C's
                                                     fused outputs (float32 tolerance)
    check_ch13.py gpu        CH13 WORK HAVE_CUDA     --device cuda: NVRTC compiled, CUDA source, the cache

What is checked against what (never against numbers pasted from a run):
- bytes per element: worked out here from the expressions' operators and the dtype's size;
- the predicted speed-up is the bytes' ratio, each GB/s is bytes over time (the lab's two regions);
- the cache: a fresh directory compiles at the first call, hits memory at the second, hits disk
  after the memory is cleared and across a real restart, rejects the flipped entry and rebuilds it;
- carets: each error's caret stands under the column its message names, and that column holds
  the token the message talks about;
- the saved fused outputs against float64 formulas evaluated here (numpy) and by torch.
"""
import math
import os
import re
import shutil
import stat
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "fixtures"))
import chaptertest  # noqa: E402
from chaptertest import (close, expect, expect_cuda_ok, expect_usage_error, fresh, load_metrics, positive,  # noqa: E402
                         run, run_cuda, run_with_twin, section_lines, section_text, sections_of,
                         skip_unless_cuda_build, skip_unless_imports)
import st  # noqa: E402

SECTIONS = ["workloads", "source", "cache", "errors", "agreement", "speed", "sizes"]
WORKLOADS = ["gate", "gelu", "bias_relu"]
GELU_C = 0.7978845608028654


def fresh_cache(work, name="cache"):
    d = os.path.join(work, name)
    if os.path.exists(d):
        shutil.rmtree(d)
    os.environ["CT_JIT_CACHE"] = d
    return d


def expected_bytes_per_elem(name, size, n=1 << 20):
    """(kernels, fused, unfused) bytes per output element, from the operators of each expression."""
    if name == "gate":      # sigmoid(y) 2, x*s 3, alpha*z 2, + 3 tensors touched; fused reads 3 writes 1
        return 4, 4 * size, (2 + 3 + 2 + 3) * size
    if name == "gelu":      # 0.5*x 2, x*x 3, *x 3, 0.044715* 2, x+ 3, c* 2, tanh 2, 1+ 2, * 3
        return 9, 2 * size, (2 + 3 + 3 + 2 + 3 + 2 + 2 + 2 + 3) * size
    bias = 1024 * size / n  # relu(x + b): x + b reads x, b, writes; relu reads, writes
    return 2, 2 * size + bias, (2 * size + bias) + 2 * size


def check_workloads(m, r, dtype_size=4):
    for w in WORKLOADS:
        k, fb, ub = expected_bytes_per_elem(w, dtype_size)
        expect(m[f"{w}_kernels_unfused"] == k, f"{w}: {m[f'{w}_kernels_unfused']} unfused kernels, expected {k}", r)
        expect(close(m[f"{w}_bytes_per_elem_fused"], fb, 1e-9), f"{w}: fused bytes/elem {m[f'{w}_bytes_per_elem_fused']}, "
               f"expected {fb}", r)
        expect(close(m[f"{w}_bytes_per_elem_unfused"], ub, 1e-9), f"{w}: unfused bytes/elem "
               f"{m[f'{w}_bytes_per_elem_unfused']}, expected {ub}", r)
        expect(close(m[f"{w}_predicted_speedup"], ub / fb, 1e-9),
               f"{w}: predicted speed-up {m[f'{w}_predicted_speedup']}, the bytes' ratio is {ub / fb}", r)


def check_speed(m, r, fused=True):
    expect(positive(m["copy_gbs"]), "copy bandwidth", r)
    for w in WORKLOADS:
        ums = m[f"{w}_unfused_ms"]
        expect(positive(ums), f"{w}: unfused time {ums}", r)
        expect(close(m[f"{w}_unfused_gbs"], m[f"{w}_unfused_bytes"] / (ums * 1e-3) / 1e9, 1e-9),
               f"{w}: unfused GB/s is not bytes / time", r)
        if fused:
            fms = m[f"{w}_fused_ms"]
            expect(positive(fms), f"{w}: fused time {fms}", r)
            expect(close(m[f"{w}_fused_gbs"], m[f"{w}_fused_bytes"] / (fms * 1e-3) / 1e9, 1e-9),
                   f"{w}: fused GB/s is not bytes / time", r)
            expect(close(m[f"{w}_speedup"], ums / fms, 1e-9), f"{w}: speed-up is not the times' ratio", r)
            expect(close(m[f"{w}_unfused_bytes"] / m[f"{w}_fused_bytes"], m[f"{w}_predicted_speedup"], 1e-3),
                   f"{w}: traffic at the timed size disagrees with the per-element table", r)
        else:
            expect(m[f"{w}_fused_ms"] is None, f"{w}: a fused time without a fused path", r)
    sizes = m["sizes"]
    expect(sizes == sorted(sizes) and len(sizes) >= 2, f"sizes {sizes}", r)
    for key in ("size_unfused_gbs", "size_copy_gbs") + (("size_fused_gbs",) if fused else ()):
        expect(len(m[key]) == len(sizes) and all(positive(v) for v in m[key]), f"{key}: {m[key]}", r)


def check_carets(text, r):
    """Every 'column C:' message is followed by the expression and a caret under column C."""
    lines = text.splitlines()
    found = 0
    for i, line in enumerate(lines):
        mm = re.search(r"column (\d+): (.*)$", line)
        if not mm or i + 2 >= len(lines):
            continue
        col = int(mm.group(1))
        expr, mark = lines[i + 1], lines[i + 2]
        indent = len(mark) - len(mark.lstrip(" "))
        expect(mark.strip().startswith("^"), f"no caret under: {line}", r)
        expect(indent - 4 == col - 1, f"caret at column {indent - 3}, message says {col}: {line}", r)
        token = expr[indent:indent + len(mark.strip())]
        quoted = re.findall(r"'([^']+)'", mm.group(2))
        if quoted and "found" not in mm.group(2):
            expect(token == quoted[0], f"the caret underlines {token!r}, the message names {quoted[0]!r}", r)
        found += 1
    return found


def cmd_report(ch13, work):
    os.makedirs(work, exist_ok=True)
    cache = fresh_cache(work)
    mpath = fresh(os.path.join(work, "ch13.json"))
    io = fresh(os.path.join(work, "io.safetensors"))
    r = run([ch13, "--device", "cpu", "--quick", "--metrics", mpath, "--save", io])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(r.stdout.startswith("device: cpu"), "first line", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}", r)
    m = load_metrics(mpath)
    check_workloads(m, r)
    # the cache's four steps, in a fresh directory
    expect(m["fused_available"] == 1, "the fused path did not run", r)
    expect(m["first_call_compiled"] == 1 and m["second_call_memory_hit"] == 1 and m["restart_disk_hit"] == 1,
           "compile, memory hit, disk hit", r)
    expect(m["rejected"] == 1 and m["rebuild_compiles"] == 1, "the flipped entry was not rejected and rebuilt", r)
    mode = stat.S_IMODE(os.stat(cache).st_mode)
    expect(mode == 0o700, f"the cache directory has mode {oct(mode)}", r)
    entries = [f for f in os.listdir(cache) if f.endswith(".so.ctjit")]
    expect(len(entries) == 4 and len(os.listdir(cache)) == 4, f"the cache holds {os.listdir(cache)}", r)  # gate f32 and f16, gelu, bias_relu
    for e in entries:
        with open(os.path.join(cache, e), "rb") as f:
            head = f.read(256)
        expect(head.startswith(b"ct-jit-entry 1\nkey ") and e[:32].encode() in head, f"entry {e}'s header", r)
    text = section_text(r.stdout, "cache")
    expect("rejected, never run" in text and "does not match its SHA-256" in text, "the rejection line", r)
    # the source: C with OpenMP, naming the expression
    src = section_text(r.stdout, "source")
    for needle in ("// expression: x * sigmoid(y) + alpha * z", "#pragma omp parallel if", "#pragma omp simd",
                   "void ct_jit_kernel(", "jit_sigmoidf(y)", "CTI_VM_FN float cti_expf(float y)",
                   'target_clones("avx2", "default")'):
        expect(needle in src, f"the source lacks {needle!r}", r)
    # errors: six, each positioned (the broadcast one in PyTorch's words)
    err = section_text(r.stdout, "errors")
    expect(m["errors_shown"] == 6 and check_carets(err, r) == 5, "five carets under their columns", r)
    expect("The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 1" in err,
           "the broadcast error", r)
    # agreement: float32 close; float16 fused no worse than the chain
    expect(m["f32_fused_err"] < 1e-5 and m["f32_unfused_err"] < 1e-5, "float32 errors", r)
    expect(m["f16_fused_err"] < 4e-3 and m["f16_fused_err"] <= m["f16_unfused_err"],
           f"float16: fused {m['f16_fused_err']}, unfused {m['f16_unfused_err']}", r)
    check_speed(m, r)
    # the saved outputs against float64 formulas evaluated here
    t = st.load(io)
    x, y, z, out = (t[f"gate.{k}"] for k in ("x", "y", "z", "out"))
    for i in range(len(out)):
        ref = x[i] / (1 + math.exp(-y[i])) + 0.5 * z[i]
        expect(close(out[i], ref, 1e-6, 1e-6), f"gate element {i}: {out[i]} vs {ref}", r)
    x, out = t["gelu.x"], t["gelu.out"]
    for i in range(len(out)):
        ref = 0.5 * x[i] * (1 + math.tanh(GELU_C * (x[i] + 0.044715 * x[i] ** 3)))
        expect(close(out[i], ref, 1e-6, 1e-6), f"gelu element {i}: {out[i]} vs {ref}", r)


def cmd_restart(ch13, work):
    os.makedirs(work, exist_ok=True)
    fresh_cache(work)
    first, second = fresh(os.path.join(work, "a.json")), fresh(os.path.join(work, "b.json"))
    r1 = run([ch13, "--device", "cpu", "--quick", "--size", "16384", "--metrics", first])
    r2 = run([ch13, "--device", "cpu", "--quick", "--size", "16384", "--metrics", second])
    expect(r1.returncode == 0 and r2.returncode == 0, "exit codes", r2)
    a, b = load_metrics(first), load_metrics(second)
    expect(a["first_call_compiled"] == 1, "the first process compiled", r1)
    expect(b["first_call_compiled"] == 0 and "loaded from the disk cache" in section_text(r2.stdout, "cache"),
           "the second process compiled again instead of loading the first one's kernel", r2)


def cmd_nocc(ch13, work):
    os.makedirs(work, exist_ok=True)
    fresh_cache(work)
    os.environ["CT_JIT_CC"] = os.path.join(work, "no-such-cc")
    mpath = fresh(os.path.join(work, "nocc.json"))
    r = run([ch13, "--device", "cpu", "--quick", "--size", "16384", "--metrics", mpath])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(sections_of(r.stdout) == SECTIONS, "sections", r)
    expect("fused kernels are unavailable here" in r.stdout and "no C compiler" in r.stdout
           and "set CT_JIT_CC" in r.stdout, "the message about the missing compiler", r)
    m = load_metrics(mpath)
    expect(m["fused_available"] == 0 and "no C compiler" in m["fused_unavailable_reason"], "metrics", r)
    check_speed(m, r, fused=False)


def cmd_badcache(ch13, work):
    os.makedirs(work, exist_ok=True)
    d = fresh_cache(work, "shared")
    os.makedirs(d)
    os.chmod(d, 0o777)
    r = run([ch13, "--device", "cpu", "--quick", "--size", "16384"])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect("writable by group and others (mode 0777)" in r.stdout and d in r.stdout and "chmod 700" in r.stdout,
           "the refusal names the directory, its mode and the fix", r)
    expect(not os.listdir(d), f"something was written into the refused directory: {os.listdir(d)}", r)
    os.chmod(d, 0o700)


def cmd_badflag(ch13, work):
    os.makedirs(work, exist_ok=True)
    fresh_cache(work)
    for args, needles in ((["--dtype", "i64"], ["--dtype", "i64"]), (["--size", "1000"], ["--size", "1000"]),
                          (["--bogus"], ["--bogus"])):
        expect_usage_error(run([ch13, "--quick"] + args), args, needles)
    r = run([ch13, "--device", "cpu", "--quick", "--expr", "x * (y + "])
    expect(r.returncode == 1 and "column 10:" in r.stderr and "^" in r.stderr, "a bad --expr: exit 1 with its caret", r)
    r = run([ch13, "--device", "cpu", "--quick", "--expr", "x * w"])
    expect(r.returncode == 1 and "unknown name 'w'; the inputs are x, y and z and the scalars alpha and beta"
           in r.stderr, "an unknown name in --expr", r)
    r = run([ch13, "--device", "cpu", "--quick", "--size", "16384", "--expr", "relu(x - alpha) * y + beta * z"])
    expect(r.returncode == 0 and "custom" in section_text(r.stdout, "speed"), "a good --expr is timed", r)


def cmd_twin(ch13, python, twin, work):
    skip_unless_imports(python, "torch")
    os.makedirs(work, exist_ok=True)
    fresh_cache(work)
    rc, rp, mc, mp = run_with_twin("ch13", [ch13, "--device", "cpu", "--quick"],
                                   [python, twin, "--device", "cpu", "--quick"], work)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}", rp)
    for w in WORKLOADS:
        for key in ("kernels_unfused", "bytes_per_elem_fused", "bytes_per_elem_unfused"):
            expect(close(mc[f"{w}_{key}"], mp[f"{w}_{key}"], 1e-9),
                   f"{w} {key}: C {mc[f'{w}_{key}']}, PyTorch's own count {mp[f'{w}_{key}']}", rp)
    expect(mp["broadcast_error"] in section_text(rc.stdout, "errors"), "the broadcast error's words differ", rc)
    expect(close(mp["f32_unfused_err"], 0, 0, 1e-5), "the twin's float32 chain against float64", rp)


def cmd_twin_agree(ch13, python, twin, work):
    skip_unless_imports(python, "torch")
    os.makedirs(work, exist_ok=True)
    fresh_cache(work)
    io = fresh(os.path.join(work, "io.safetensors"))
    r = run([ch13, "--device", "cpu", "--quick", "--size", "16384", "--save", io])
    expect(r.returncode == 0, "exit code", r)
    code = f"""
import sys, torch
sys.path.insert(0, {os.path.join(HERE, '..', '..', 'tools', 'fixtures')!r})
sys.path.insert(0, {os.path.dirname(twin)!r})
import st, importlib.util
spec = importlib.util.spec_from_file_location("twin", {twin!r}); t = importlib.util.module_from_spec(spec)
spec.loader.exec_module(t); t.torch = torch
d = st.load({io!r})
T = lambda k: torch.tensor(d[k], dtype=torch.float64)
worst = 0.0
for name, args, out in (("gate", ["gate.x", "gate.y", "gate.z"], "gate.out"), ("gelu", ["gelu.x"], "gelu.out")):
    ref = getattr(t, name)(*[T(a) for a in args])
    err = ((T(out) - ref).abs() / (2e-6 + 2e-6 * ref.abs())).max().item()  # float32's rounding, a few ulps
    worst = max(worst, err)
    print(name, "worst error over its tolerance:", err)
sys.exit(0 if worst <= 1 else 1)
"""
    rp = run([python, "-c", code])
    expect(rp.returncode == 0, "torch's float64 evaluation of the twin's expressions differs from C's fused outputs", rp)


def cmd_gpu(ch13, work, have_cuda):
    skip_unless_cuda_build(have_cuda)
    os.makedirs(work, exist_ok=True)
    fresh_cache(work)
    mpath = fresh(os.path.join(work, "gpu.json"))
    r = run_cuda([ch13, "--device", "cuda", "--quick", "--metrics", mpath])
    expect_cuda_ok(r)
    m = load_metrics(mpath)
    expect(r.stdout.startswith("device: cuda"), "first line", r)
    expect(m["source_dialect"] == "cuda" and "extern \"C\" __global__ void ct_jit_kernel" in r.stdout, "CUDA source", r)
    expect(m["fused_available"] == 1 and m["first_call_compiled"] == 1 and m["restart_disk_hit"] == 1
           and m["rejected"] == 1, "NVRTC compile, the disk hit, the rejection", r)
    expect(any(f.endswith(".ptx.ctjit") for f in os.listdir(os.environ["CT_JIT_CACHE"])), "a PTX entry", r)
    check_workloads(m, r)
    check_speed(m, r)
    expect(m["f32_fused_err"] < 1e-5 and m["f16_fused_err"] <= m["f16_unfused_err"], "agreement on the GPU", r)


if __name__ == "__main__":
    os.environ.pop("CT_JIT_CC", None)
    sys.exit(chaptertest.dispatch(sys.argv, {
        "report": (cmd_report, 2), "restart": (cmd_restart, 2), "nocc": (cmd_nocc, 2),
        "badcache": (cmd_badcache, 2), "badflag": (cmd_badflag, 2), "twin": (cmd_twin, 4),
        "twin_agree": (cmd_twin_agree, 4), "gpu": (cmd_gpu, 3)}, __doc__))
