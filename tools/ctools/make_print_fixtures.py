#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Writes tests/fixtures/print/cases.txt: tensors and what PyTorch prints for them.

Each case is a tensor (dtype, shape, its exact values) together with str(t)
from PyTorch with the default print options, once as a CPU tensor and once as
it would read on cuda:0. tests/unit/test_print.c builds every tensor on the
device under test and compares ct_tensor_str() with these strings byte for
byte.

The invariant: every string in the file is PyTorch's own. The CPU string is
str(t). The CUDA string is assembled from PyTorch's own pieces
(torch._tensor_str._tensor_str for the body, _add_suffixes for the suffixes and
their line wrapping) with the suffix list _str_intern builds for a CUDA tensor:
device first, then size= (empty tensors), then dtype=. Before a case is
written, the same assembly is checked against str(t) for the CPU, and the
device-first order is checked against _str_intern itself by making it believe
the default device is CUDA, so that it prints device='cpu' for a CPU tensor.
This machine needs no GPU for any of it.

Values come from Python's own `random` with fixed seeds (not torch's
generator), so the file does not depend on the torch version except through
the strings, which is what --check tests.

File format (text, ASCII; '#' lines at the top are comments):

    case NAME
    dtype float32|float64|float16|bfloat16|int64|int32|uint8|bool
    shape D0 D1 ...          (just "shape" for a 0-d tensor)
    view none|t              (t: the printed tensor is the 2-d base transposed)
    values N                 (N = numel of the base tensor, then N tokens in
                              row-major order, up to 16 per line: floats as a
                              decimal integer when integral ("-0" for negative
                              zero), else a C99 hex float, or nan/inf/-inf;
                              ints as decimals; bools as 0/1)
    cpu K                    (then the K lines of str(t), without a final newline)
    cuda K                   (then the K lines it reads as on cuda:0)
    ==

Usage:
    /usr/bin/python3 tools/make_print_fixtures.py            # rewrite the file
    /usr/bin/python3 tools/make_print_fixtures.py --check F  # regenerate, compare with F
--check exits 0 when they agree (comment lines aside), 1 when not (showing the
first difference), 77 when torch cannot be imported.
"""

import argparse
import math
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "print", "cases.txt")

try:
    import torch
    import torch._tensor_str as ts
except Exception as e:  # torch missing: ctest reads 77 as "skipped"
    print("make_print_fixtures: torch is not importable (%s): skipping" % e)
    sys.exit(77)

DTYPES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int64: "int64",
    torch.int32: "int32",
    torch.uint8: "uint8",
    torch.bool: "bool",
}
PREFIX = "tensor("
INDENT = len(PREFIX)


def fmt_float(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 2.0**53:
        if v == 0 and math.copysign(1.0, v) < 0:
            return "-0"
        return str(int(v))
    h = float(v).hex()  # e.g. -0x1.8000000000000p+3
    mant, exp = h.split("p")
    if "." in mant:
        mant = mant.rstrip("0").rstrip(".")
    return mant + "p" + exp


def value_tokens(t):
    flat = t.reshape(-1)
    if t.dtype.is_floating_point:
        return [fmt_float(v) for v in flat.to(torch.float64).tolist()]
    if t.dtype == torch.bool:
        return ["1" if v else "0" for v in flat.tolist()]
    return [str(int(v)) for v in flat.tolist()]


def suffixes_for(t, device):
    """The suffix list _str_intern builds for a plain strided tensor."""
    s = []
    if device is not None:
        s.append("device='" + device + "'")
    if t.numel() == 0:
        if t.dim() != 1:
            s.append("size=" + str(tuple(t.shape)))
        if t.dtype != torch.get_default_dtype():
            s.append("dtype=" + str(t.dtype))
    elif t.dtype not in (torch.get_default_dtype(), torch.int64, torch.bool):
        s.append("dtype=" + str(t.dtype))
    return s


def assemble(t, device):
    body = "[]" if t.numel() == 0 else ts._tensor_str(t, INDENT)
    return ts._add_suffixes(PREFIX + body, suffixes_for(t, device), INDENT, False)


def str_as_if_default_cuda(t):
    """str(t) from _str_intern while it believes the default device is CUDA."""
    real = torch._C._get_default_device
    torch._C._get_default_device = lambda: "cuda"
    try:
        return str(t)
    finally:
        torch._C._get_default_device = real


def make_record(name, base, view):
    shown = base.t() if view == "t" else base
    cpu = str(shown)
    mine = assemble(shown, None)
    if mine != cpu:
        raise SystemExit("case %s: assembled %r but str() gives %r" % (name, mine, cpu))
    patched = str_as_if_default_cuda(shown)
    if patched != assemble(shown, "cpu"):
        raise SystemExit("case %s: suffix order differs from _str_intern: %r" % (name, patched))
    cuda = assemble(shown, "cuda:0")
    toks = value_tokens(base)
    out = ["case " + name, "dtype " + DTYPES[base.dtype],
           ("shape " + " ".join(str(d) for d in base.shape)).rstrip(),
           "view " + view, "values %d" % len(toks)]
    for i in range(0, len(toks), 16):
        out.append(" ".join(toks[i:i + 16]))
    for label, s in (("cpu", cpu), ("cuda", cuda)):
        lines = s.split("\n")
        out.append("%s %d" % (label, len(lines)))
        out.extend(lines)
    out.append("==")
    return "\n".join(out) + "\n", cpu, cuda


def float_cases(add, T, gauss):
    """Fixed point, 0-d, integral floats, scientific, nan/inf, wrapping."""
    nan, inf = float("nan"), float("inf")
    # ---- fixed point, precision 4 ----
    add("f32_randn_1d", T(gauss(5)))
    add("f32_randn_2d", T(gauss(12), (3, 4)))
    add("f32_randn_3d", T(gauss(24), (2, 3, 4)))
    add("f32_randn_4d", T(gauss(24), (2, 2, 2, 3)))
    add("f32_ones_dims_113", T(gauss(3), (1, 1, 3)))
    add("f32_one_element_1d", T([7.25]))
    add("f32_ties_half_even", T([1.03125, 2.09375, -0.15625, 0.40625]))
    add("f32_negative_fixed", T([-1.5, -0.25, -3.125, -100.0625]))
    add("f32_ratio_sci", T([99999.5, 100.25, -12.0625]))
    add("f32_neg_zero_fixed", T([-0.0, 0.5, 0.0]))
    # ---- 0-d ----
    add("f32_scalar", T(3.5))
    add("f32_scalar_zero", T(0.0))
    add("f32_scalar_neg_zero", T(-0.0))
    add("f32_scalar_nan", T(nan))
    add("f32_scalar_neg_inf", T(-inf))
    add("f32_scalar_small_sci", T(1e-5))
    add("f32_scalar_integral", T(-42.0))
    add("f64_scalar", T(3.5, dtype=torch.float64))
    add("i64_scalar", T(-7, dtype=torch.int64))
    add("bool_scalar", T(True, dtype=torch.bool))
    # ---- int_mode for floats ----
    add("f32_integral", T([1.0, 2.0, 3.0]))
    add("f32_integral_neg", T([-1.0, 0.0, 25.0, 100.0]))
    add("f32_integral_ratio_1000", T([1.0, 1000.0]))
    add("f32_integral_ratio_sci", T([1.0, 2000.0]))
    add("f32_integral_1e8", T([1e8, 1e6, -3.0e5]))
    add("f32_integral_over_1e8", T([1e9, 2e9]))
    add("f32_zeros_2d", T([0.0] * 6, (2, 3)))
    add("f32_neg_zero_integral", T([-0.0, 0.0, 1.0]))
    add("f32_arange_100_wrap", torch.arange(100, dtype=torch.float32))
    # ---- scientific ----
    add("f32_large_fixed", T(gauss(6, 1e5)))
    add("f32_large_sci", T(gauss(6, 1e9)))
    add("f32_small_sci", T(gauss(6, 1e-5)))
    add("f32_min_1e-4_f32_rounding", T([1e-4, 1.0]))
    add("f64_min_1e-4_exact", T([1e-4, 0.1], dtype=torch.float64))
    add("f32_ratio_under_1000_fixed", T([0.5, 499.75]))
    add("f32_ratio_over_1000_sci", T([0.5, 600.25]))
    add("f64_extreme_exponents", T([1e-300, 1e300, -2.5e-150], dtype=torch.float64))
    add("f32_sci_2d", T([1.5e10, -2.25, 3e-3, 4.0, 5.5e-7, 6.0], (2, 3)))
    # ---- nan / inf ----
    add("f32_nan_inf_fraction", T([nan, inf, -inf, 1.5, -2.25]))
    add("f32_nan_inf_integral", T([nan, 1.0, -inf, 0.0]))
    add("f32_only_nonfinite_zero", T([nan, inf, 0.0, -inf]))
    add("f32_nan_inf_sci", T([nan, 1e-7, inf, 3.0]))
    add("f32_neg_nan", T([-nan, 2.5]))
    # ---- wrapping ----
    add("f32_randn_30_wrap", T(gauss(30)))
    add("f32_wide_rows_wrap", T(gauss(90), (3, 30)))
    add("f64_wrap_suffix", T(gauss(13), dtype=torch.float64))
    add("f32_integral_2d_wrap", T([float(i * 37 % 1000) for i in range(60)], (3, 20)))
    add("f32_one_line_near_80", T([float(v) for v in [1111, 2222, 3333, 4444, 5555, 6666, 7777, 8888, 9999, 1234, 4321]]))
    add("f64_one_line_near_80", T([1.25, 2.5, 3.75, 4.5, 5.25, 6.5, 7.75, 8.5], dtype=torch.float64))


def more_cases(add, T, gauss, rng):
    """Summarized tensors, the other dtypes, empty tensors and views."""
    inf = float("inf")
    # ---- summarized (numel > 1000) ----
    add("f32_summary_2000", T(gauss(2000, quant=10)))
    add("f32_summary_40x40", T(gauss(1600, quant=10), (40, 40)))
    add("f32_summary_3d", T(gauss(1200, quant=8), (8, 3, 50)))
    add("f32_summary_2x600", T(gauss(1200, quant=8), (2, 600)))
    hidden = [float((i * 7) % 13 - 6) for i in range(1100)]
    hidden[500] = 1.0e10   # not shown: must not switch to scientific
    hidden[501] = 0.5      # not shown: must not leave int mode
    add("f32_summary_hidden_values", T(hidden))
    add("f32_summary_1100x1", T([float(i % 9) for i in range(1100)], (1100, 1)))
    add("i64_summary_arange", torch.arange(2000, dtype=torch.int64))
    add("f16_summary_40x40", T(gauss(1600, quant=6), (40, 40), torch.float16))
    # ---- other dtypes ----
    add("f64_randn", T(gauss(4), dtype=torch.float64))
    add("f64_2d", T(gauss(6), (2, 3), torch.float64))
    add("f16_randn", T(gauss(6), dtype=torch.float16))
    add("f16_limits", T([65504.0, -1.0, 6.1e-5, 0.0], dtype=torch.float16))
    add("f16_integral", T([1.0, 2.0, -8.0], dtype=torch.float16))
    add("f16_inf", T([inf, 1.5], dtype=torch.float16))
    add("bf16_randn", T(gauss(6), dtype=torch.bfloat16))
    add("bf16_large_sci", T([1e20, -3.0e15, 7.0], dtype=torch.bfloat16))
    add("i64_small", T([1, -20, 300], dtype=torch.int64))
    add("i64_extremes", T([2**62, -(2**63), 2**63 - 1, 0], dtype=torch.int64))
    add("i64_wrap", T([rng.randrange(-99999, 99999) for _ in range(40)], dtype=torch.int64))
    add("i32_2d", T([1, 2, 3, -4, 5, 60000], (2, 3), torch.int32))
    add("u8_values", T([0, 255, 7], dtype=torch.uint8))
    add("bool_1d", T([True, False, True], dtype=torch.bool))
    add("bool_2d", T([True, True, False, True], (2, 2), torch.bool))
    add("bool_wrap", T([rng.random() < 0.5 for _ in range(100)], dtype=torch.bool))
    # ---- empty ----
    add("f32_empty", T([]))
    add("f32_empty_0x3", torch.empty(0, 3))
    add("i64_empty", torch.empty(0, dtype=torch.int64))
    add("f64_empty_2x0x3", torch.empty(2, 0, 3, dtype=torch.float64))
    add("bool_empty", torch.empty(0, dtype=torch.bool))
    # ---- views ----
    add("f32_transposed", T(gauss(12), (3, 4)), "t")
    add("i32_transposed", T(list(range(-5, 7)), (4, 3), torch.int32), "t")
    add("f32_summary_transposed", T(gauss(1200, quant=6), (30, 40)), "t")
    add("i64_summary_transposed", torch.arange(-600, 600, dtype=torch.int64).reshape(40, 30), "t")


def build_cases():
    rng = random.Random(20240601)

    def gauss(n, scale=1.0, quant=None):
        vals = [rng.gauss(0.0, 1.0) * scale for _ in range(n)]
        if quant:  # multiples of 2**-quant: shorter hex, same printing rules
            vals = [round(v * 2**quant) / 2**quant for v in vals]
        return vals

    def T(vals, shape=None, dtype=torch.float32):
        x = torch.tensor(vals, dtype=dtype)
        return x.reshape(shape) if shape is not None else x

    c = []  # (name, base tensor, view)
    add = lambda name, t, view="none": c.append((name, t, view))

    float_cases(add, T, gauss)
    more_cases(add, T, gauss, rng)
    return c


def generate():
    parts = ["# PyTorch print fixtures: written by tools/make_print_fixtures.py, do not edit.\n",
             "# torch %s; format: see the docstring of tools/make_print_fixtures.py.\n"
             % torch.__version__]
    stats = {"cpu_suffix_newline": 0, "cuda_suffix_newline": 0}
    cases = build_cases()
    names = set()
    for name, base, view in cases:
        if name in names:
            raise SystemExit("duplicate case name " + name)
        names.add(name)
        rec, cpu, cuda = make_record(name, base, view)
        if ",\n" + " " * INDENT + "d" in cpu:
            stats["cpu_suffix_newline"] += 1
        if ",\n" + " " * INDENT + "d" in cuda:
            stats["cuda_suffix_newline"] += 1
        parts.append(rec)
    return "".join(parts), len(cases), stats


def strip_comments(text):
    return [l for l in text.split("\n") if not l.startswith("#")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", metavar="FILE", help="compare with FILE instead of writing")
    ap.add_argument("--out", default=DEFAULT_OUT, help="where to write (default: %(default)s)")
    args = ap.parse_args()
    text, n, stats = generate()
    if args.check:
        with open(args.check, encoding="ascii") as f:
            old = strip_comments(f.read())
        new = strip_comments(text)
        if old == new:
            print("print fixtures: %d cases agree with torch %s" % (n, torch.__version__))
            return 0
        for i in range(max(len(old), len(new))):
            a = old[i] if i < len(old) else "<end of file>"
            b = new[i] if i < len(new) else "<end of output>"
            if a != b:
                print("print fixtures differ from torch %s at line %d (comments aside):"
                      % (torch.__version__, i + 1))
                print("  committed:   %r" % a)
                print("  regenerated: %r" % b)
                break
        return 1
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="ascii") as f:
        f.write(text)
    print("wrote %s: %d cases, %d bytes, suffix on a new line: %d cpu, %d cuda"
          % (args.out, n, len(text), stats["cpu_suffix_newline"], stats["cuda_suffix_newline"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
