#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""unit.bench_logic: tools/bench's bookkeeping on stand-in runs, no program run and no timing.

usage: test_bench_logic.py REPO_ROOT

Loads tools/bench as a module and checks, against figures worked out here by
hand: each figure is the median of its runs with min, max and spread; a row
whose runs spread over more than UNSTABLE_SPREAD, and whose paired runs do not all give the same
verdict, is marked unstable and not
judged; a stable row is judged yes / no; each column names the PyTorch that
made it (none for C's); --also-python's informational column; the torch.compile rows are n/a with a PyTorch that
has no torch.compile and read the --compile side where it has; which
versions have torch.compile; the load is read as three numbers.
"""
import os
import sys

FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILS.append(what)


def ctx_of(b, torch="2.15.0+cu132", quick=False):
    ctx = b.Ctx()
    ctx.device, ctx.quick, ctx.threads, ctx.work, ctx.gpu = "cpu", quick, 2, ".", None
    ctx.torch, ctx.compile_ok = torch, b.torch_has_compile(torch)
    return ctx


def runs_of(key, values):
    return [{"rc": 0, "metrics": {key: v}} for v in values]


def main():
    sys.path.insert(0, os.path.join(sys.argv[1], "tools"))
    from ctools import bench as b
    near = lambda x, y: x is not None and abs(x - y) <= 1e-12 * max(1.0, abs(y))  # noqa: E731

    # summarize: median, min, max, (max - min) / median over the finite values
    med, lo, hi, spread = b.summarize([10.0, 12.0, None, 11.0, float("nan")])
    check(near(med, 11.0) and lo == 10.0 and hi == 12.0 and near(spread, 2.0 / 11.0),
          f"summarize of 10, 12, 11 (and two missing): median 11, 10..12, spread 2/11 (got {med}, {lo}, {hi}, {spread})")
    check(b.summarize([5.0]) == (5.0, 5.0, 5.0, None), "one run: its value, no spread")
    check(b.summarize([None]) == (None, None, None, None), "no run: nothing")
    check(near(b.summarize([1.0, 2.0, 3.0, 4.0])[0], 2.5), "an even count: the mean of the middle two")

    # versions with torch.compile
    for v, want in (("1.13.0a0+gitunknown", False), ("2.0.0", True), ("2.15.0+cu132", True), (None, False),
                    ("10.1", True)):
        check(b.torch_has_compile(v) == want, f"torch_has_compile({v!r}) is {want}")

    ctx = ctx_of(b)
    row = b.Row("t", b.Fig("c", b.val("x"), "C"), b.Fig("py", b.val("x"), "PyTorch"), "u", 1.0, rid="t.x")
    # stable: C 100, 104, 98 (spread 6%), PyTorch 50, 51, 52 (spread 4%): ratio 100/51, met yes
    out = b.judge(ctx, row, {"c": runs_of("x", [100.0, 104.0, 98.0]), "py": runs_of("x", [50.0, 51.0, 52.0])})
    check(out["a"] == 100.0 and out["b"] == 51.0, f"figures are the medians (got {out['a']}, {out['b']})")
    check(near(out["ratio"], 100.0 / 51.0), "ratio: median C / median PyTorch")
    check(out["a_min"] == 98.0 and out["a_max"] == 104.0 and near(out["a_spread"], 0.06), "C's min, max, spread")
    check(out["met"] == "yes" and out["unstable"] is False, f"a stable row above its goal is met (got {out['met']})")
    check(out["a_torch"] is None and out["b_torch"] == "2.15.0+cu132", "C's column has no PyTorch; the twin's names it")
    # the same medians, but C's runs spread 100 -> 40..120 (80%) and the paired runs fall on both
    # sides of the goal (0.8, 1.96, 2.31): unstable, not judged
    out = b.judge(ctx, row, {"c": runs_of("x", [40.0, 100.0, 120.0]), "py": runs_of("x", [50.0, 51.0, 52.0])})
    check(out["met"] == "unstable" and out["unstable"] is True, f"paired runs on both sides: unstable (got {out['met']})")
    check("unstable" in out["note"] and "40..120" in out["note"], f"the note says why: {out['note']!r}")
    # a 40% spread whose every paired run meets the goal (1.6, 1.96, 2.31): judged, met yes, flagged
    out = b.judge(ctx, row, {"c": runs_of("x", [80.0, 100.0, 120.0]), "py": runs_of("x", [50.0, 51.0, 52.0])})
    check(out["met"] == "yes" and out["unstable"] is True, f"every paired run above the goal: met (got {out['met']})")
    check("every one of the 3 paired runs" in out["note"] and "80..120" in out["note"], f"the note: {out['note']!r}")
    # and one whose every paired run misses it (0.4, 0.5, 0.6): met no
    out = b.judge(ctx, row, {"c": runs_of("x", [40.0, 50.0, 60.0]), "py": runs_of("x", [100.0] * 3)})
    check(out["met"] == "no" and "missed in every one" in out["note"], f"every paired run below: no (got {out['met']})")
    # just inside the threshold: 10% spread is still judged (below the goal here: met no)
    out = b.judge(ctx, row, {"c": runs_of("x", [47.5, 50.0, 52.5]), "py": runs_of("x", [100.0, 100.0, 100.0])})
    check(near(out["a_spread"], 0.10) and out["met"] == "no", f"a 10% spread is judged: met no (got {out['met']})")
    # the PyTorch side spreads, paired runs on both sides of the goal (1.25, 1.0, 0.83): unstable as well
    out = b.judge(ctx, row, {"c": runs_of("x", [100.0] * 3), "py": runs_of("x", [80.0, 100.0, 120.0])})
    check(out["met"] == "unstable", "a spread on the PyTorch side marks the row unstable")
    # a row without a goal is never unstable-judged, only flagged
    info = b.Row("t", b.Fig("c", b.val("x"), "C"), b.Fig("py", b.val("x"), "PyTorch"), "u", rid="t.i")
    out = b.judge(ctx, info, {"c": runs_of("x", [80.0, 100.0, 120.0]), "py": runs_of("x", [50.0] * 3)})
    check(out["met"] == "-" and out["unstable"] is True, "an informational row: met '-', flagged unstable")

    # ch06's compiled row reads the --compile side, with its PyTorch named
    c = {"epoch_images_per_s": [1.0, 300.0, 310.0, 290.0], "threads": 2, "device": "cpu"}
    pe = {"epoch_images_per_s": [1.0, 200.0, 200.0, 200.0], "threads": 2, "device": "cpu"}
    pc = {"epoch_images_per_s": [0.1, 400.0, 400.0, 400.0], "threads": 2, "device": "cpu"}
    rows = {r.rid: r for r in b.rows_ch06(ctx, c, pe)}
    check("ch06.images_compile" in rows and rows["ch06.images_compile"].b.src == "pyc",
          "ch06: a C / torch.compile row over the --compile side")
    out = b.judge(ctx, rows["ch06.images_compile"], {"c": [{"rc": 0, "metrics": c}] * 3,
                                                     "py": [{"rc": 0, "metrics": pe}] * 3,
                                                     "pyc": [{"rc": 0, "metrics": pc}] * 3})
    check(out["a"] == 300.0 and out["b"] == 400.0 and near(out["ratio"], 0.75) and out["met"] == "no",
          f"ch06 compiled: 300 / 400 images/s, met no (got {out['a']}, {out['b']}, {out['met']})")
    check(out["b_torch"] == "2.15.0+cu132", "ch06 compiled: the column names its PyTorch")
    # with torch 1.13 the compiled rows are n/a and say why; the bench adds no --compile
    old = ctx_of(b, "1.13.0a0+gitunknown")
    rows = {r.rid: r for r in b.rows_ch06(old, c, pe) + b.rows_ch09(old, {}, {})}
    for rid in ("ch06.images_compile", "ch09.amp_gemm_compile", "ch09.amp_conv_compile"):
        out = b.judge(old, rows[rid], {"c": [], "py": []})
        check(out["met"] == "n/a" and "no torch.compile" in out["note"], f"{rid} with torch 1.13: n/a ({out['note']!r})")
    check("--compile" not in b.plan_ch09(old)[1] and "--compile" in b.plan_ch09(ctx)[1],
          "ch09's twin gets --compile only where its PyTorch has torch.compile")
    # ch09's compiled row reads the same run's *_compiled figure
    r9 = {r.rid: r for r in b.rows_ch09(ctx, {}, {})}["ch09.amp_gemm_compile"]
    out = b.judge(ctx, r9, {"c": runs_of("gemm_ms_bfloat16", [10.0] * 3),
                            "py": runs_of("gemm_ms_bfloat16_compiled", [8.0] * 3)})
    check(near(out["ratio"], 0.8) and out["met"] == "no", f"ch09 compiled: 100 / 125 steps/s (got {out['ratio']})")

    # --also-python: an informational column from the "pyo" runs, with that PyTorch's version
    ctx.torch_also = "1.13.0a0"
    out = b.judge(ctx, row, {"c": runs_of("x", [100.0] * 3), "py": runs_of("x", [50.0] * 3),
                             "pyo": runs_of("x", [20.0, 25.0, 30.0])})
    check(out["b_also"] == 25.0 and near(out["ratio_also"], 4.0) and out["b_also_torch"] == "1.13.0a0"
          and out["met"] == "yes", f"--also-python: 25 steps/s on 1.13, ratio 4, not judged (got {out['b_also']}, "
          f"{out['ratio_also']}, {out['met']})")
    out = b.judge(ctx, row, {"c": runs_of("x", [100.0] * 3), "py": runs_of("x", [50.0] * 3)})
    check(out["b_also"] is None and out["ratio_also"] is None, "without --also-python: no such column")

    la = b.loadavg()
    check(isinstance(la, list) and len(la) == 3 and all(x >= 0 for x in la), f"loadavg: three numbers ({la})")
    check(b.UNSTABLE_SPREAD == 0.10, "the unstable threshold is 10%")
    if FAILS:
        print(f"{len(FAILS)} failed")
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
