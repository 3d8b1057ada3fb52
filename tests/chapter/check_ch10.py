#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 10 (CUDA graphs) against independent references.

    check_ch10.py report     CH10 WORK                 --device cpu --quick: the replayed losses and
                             parameters equal the eager run's bit for bit (and training moved
                             them), capture changes nothing, the seed's capture loses the copied
                             input and the corrected one keeps it, every forbidden operation is
                             caught in CUDA's or PyTorch's words and capture_end names it, a batch
                             of another size is refused, the private pool is given back, the
                             timing table covers launch-bound to larger widths
    check_ch10.py badflag    CH10 WORK                 bad flags exit 2; an unwritable --save exits 1
                             before any section runs
    check_ch10.py twin       CH10 PYTHON TWIN WORK     ch10_pytorch.py prints the same sections and
                             the same model line (structure and parameter count)
    check_ch10.py twin_agree CH10 PYTHON TWIN WORK     from the C program's weights and data, the
                             twin's float64 eager SGD reaches the parameters C's replays reached,
                             and its per-step losses match C's replayed losses
    check_ch10.py gpu        CH10 WORK HAVE_CUDA       --device cuda: the same claims on real CUDA
                             stream capture; skipped where there is no GPU
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "fixtures"))
import chaptertest  # noqa: E402
from chaptertest import (expect, expect_cuda_ok, expect_usage_error, fresh, load_metrics, run,  # noqa: E402
                         run_cuda, run_with_twin, section_lines, sections_of, skip_unless_cuda_build,
                         skip_unless_imports)
import st  # noqa: E402

SECTIONS = ["model", "warm-up", "capture", "replay", "seed bug", "forbidden", "pool", "timing"]
# What each refusal must say: CUDA's words (cudaErrorStreamCaptureUnsupported,
# cudaErrorStreamCaptureImplicit) and PyTorch's (capture_begin on the default
# stream, a non-capturable optimizer).
FORBIDDEN = {
    "capture on the default stream": "CUDA graphs must be captured on a non-default stream. "
                                     "(However, after capture, it's ok to replay on any stream.)",
    "loss.item() inside the capture": "ct_item: operation not permitted when stream is capturing",
    "synchronize inside the capture": "ct_stream_synchronize: operation not permitted when stream is capturing",
    "an op on the legacy default stream": "operation would make the legacy stream depend on a capturing "
                                          "blocking stream",
    "a block from another pool": "must come from the graph's private pool",
    "Adam's step inside the capture": "Attempting CUDA graph capture of step() for an instance of Adam but "
                                      "param_groups' capturable is False.",
    "a batch of another size into static_input": "cannot be broadcast to",
}
IN_CAPTURE = [k for k in FORBIDDEN if k not in ("capture on the default stream",
                                                "a batch of another size into static_input")]


def forbidden_report(lines):
    """{probe: (caught message, capture_end message)} from the forbidden section."""
    out, cur = {}, None
    for line in lines:
        if not line.startswith("  "):
            cur = line
            out[cur] = ["", ""]
        elif cur and line.startswith("  caught: "):
            out[cur][0] = line[len("  caught: "):]
        elif cur and line.startswith("  capture_end: "):
            out[cur][1] = line[len("  capture_end: "):]
    return out


def check_run(r, metrics, cpu=True):
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}", r)
    # Replay = eager, bit for bit: every loss and every parameter.
    le, lr = metrics["eager_loss"], metrics["replay_loss"]
    expect(len(le) == len(lr) == metrics["steps"] and le == lr, f"losses differ: {le} vs {lr}", r)
    expect(metrics["max_param_diff"] == 0, f"parameters differ by {metrics['max_param_diff']}", r)
    expect(len(set(le)) > 1, "the losses never changed: nothing was trained", r)
    expect(metrics["capture_param_change"] == 0, "capture changed the parameters", r)
    k = metrics["kernels_per_step"]
    expect(k > 10, f"kernels per step {k}", r)
    if cpu:  # cuBLAS may pick kernels of several parts at some sizes: a GPU's count varies with width
        expect(all(x == k for x in metrics["timing_kernels"]),
               f"kernels per step {k}, per width {metrics['timing_kernels']} (one structure: one count)", r)
    # The seed's bug and the fix: randn (|x| of order 1) replaced the copy, or the copy stayed.
    expect(metrics["seed_bug_input_diff"] > 0.5 and metrics["fixed_input_diff"] == 0,
           f"seed bug {metrics['seed_bug_input_diff']}, fixed {metrics['fixed_input_diff']}", r)
    # Every forbidden operation caught, with its words; capture_end names it.
    rep = forbidden_report(section_lines(r.stdout, "forbidden"))
    for what, needle in FORBIDDEN.items():
        expect(what in rep and needle in rep[what][0], f"{what}: caught {rep.get(what)}, expected {needle!r}", r)
        if what in IN_CAPTURE:
            end = rep[what][1]
            expect("the capture was invalidated" in end and needle in end, f"{what}: capture_end said {end!r}", r)
    expect(metrics["forbidden_caught"] == metrics["forbidden_probes"] == 6 and metrics["shape_caught"] == 1,
           "forbidden counts", r)
    expect("the captured step replays (loss " in r.stdout and "(loss nan)" not in r.stdout,
           "no replay after the refusals", r)
    # The pool: memory while the graph's tensors live, none after.
    expect(metrics["pool_kib"] > 0 and metrics["pool_kib_after_free"] == 0,
           f"pool {metrics['pool_kib']} KiB, after freeing {metrics['pool_kib_after_free']} KiB", r)
    expect("lies outside the pool: yes" in r.stdout, "an eager tensor landed in the pool", r)
    w, e, p = metrics["timing_widths"], metrics["eager_ms"], metrics["replay_ms"]
    expect(len(w) >= 2 and len(e) == len(p) == len(w) and all(x > 0 for x in e + p) and w == sorted(w),
           f"timing table {w} {e} {p}", r)


def cmd_report(ch10, work):
    os.makedirs(work, exist_ok=True)
    m = fresh(os.path.join(work, "ch10.json"))
    r = run([ch10, "--device", "cpu", "--quick", "--metrics", m])
    check_run(r, load_metrics(m))
    expect(r.stdout.startswith("device: cpu"), "first line", r)


def cmd_badflag(ch10, work):
    os.makedirs(work, exist_ok=True)
    for args, needles in ((["--width", "0"], ["--width"]), (["--depth", "17"], ["--depth"]),
                          (["--warmup", "0"], ["--warmup"]), (["--lr", "x"], ["--lr", "x"]),
                          (["--steps"], ["--steps"])):
        expect_usage_error(run([ch10, "--device", "cpu", "--quick", *args]), args, needles)
    bad = os.path.join(work, "no-such-dir", "out.safetensors")
    r = run([ch10, "--device", "cpu", "--quick", "--save", bad])
    expect(r.returncode == 1 and "no-such-dir" in r.stderr and "== model ==" not in r.stdout,
           "an unwritable --save must stop the run before any work", r)


def cmd_twin(ch10, python, twin, work):
    skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    args = ["--device", "cpu", "--quick"]
    rc, rp, mc, mp = run_with_twin("ch10", [ch10, *args], [python, twin, *args], work)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}", rp)
    expect(section_lines(rc.stdout, "model") == section_lines(rp.stdout, "model"),
           "the model lines differ", rp)
    for key in ("parameters", "width", "depth", "batch", "steps", "warmup", "timing_widths"):
        expect(mc[key] == mp[key], f"metric {key}: C {mc[key]} vs twin {mp[key]}")
    expect(len(mp["eager_loss"]) == mc["steps"], "the twin's training length", rp)
    expect(not any("nan" in ln for ln in section_lines(rp.stdout, "replay")),
           "the twin's replay table prints nan for a row it did not run (want –)", rp)


def cmd_twin_agree(ch10, python, twin, work):
    skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    init, c_out, py_out, mc_path, mp_path = (fresh(os.path.join(work, f)) for f in (
        "init.safetensors", "replay_c.safetensors", "eager_py.safetensors", "c.json", "py.json"))
    common = ["--device", "cpu", "--quick", "--steps", "30"]
    r = run([ch10, *common, "--save-init", init, "--save", c_out, "--metrics", mc_path])
    expect(r.returncode == 0, "ch10 failed", r)
    rp = run([python, twin, *common, "--load-init", init, "--float64", "--save", py_out, "--metrics", mp_path])
    expect(rp.returncode == 0, "the twin failed", rp)
    a, b, start = st.load(c_out), st.load(py_out), st.load(init)
    expect(sorted(a) == sorted(b), f"keys {sorted(a)} vs {sorted(b)}")
    scale = max(float(abs(v).max()) for v in b.values())
    diff = max(float(abs(a[k].astype("float64") - b[k]).max()) for k in a)
    moved = max(float(abs(start[k].astype("float64") - b[k]).max()) for k in a)
    print(f"max |C replayed - PyTorch float64 eager| = {diff:.3g}; largest parameter {scale:.3g}; "
          f"largest move from the start {moved:.3g}")
    expect(moved > 100 * diff, "the parameters barely moved: the comparison would prove nothing")
    expect(diff <= 1e-4 * scale, f"C's replayed parameters differ from PyTorch's by {diff}")
    lc, lp = load_metrics(mc_path)["replay_loss"], load_metrics(mp_path)["eager_loss"]
    worst = max(abs(x - y) / abs(y) for x, y in zip(lc, lp))
    expect(len(lc) == len(lp) == 30 and worst <= 1e-4, f"replayed losses vs PyTorch's: worst relative {worst}")


def cmd_gpu(ch10, work, have_cuda):
    skip_unless_cuda_build(have_cuda)
    os.makedirs(work, exist_ok=True)
    m = fresh(os.path.join(work, "ch10_gpu.json"))
    r = run_cuda([ch10, "--device", "cuda", "--quick", "--metrics", m])
    expect_cuda_ok(r)
    check_run(r, load_metrics(m), cpu=False)


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 2),
                                       "twin": (cmd_twin, 4), "twin_agree": (cmd_twin_agree, 4),
                                       "gpu": (cmd_gpu, 3)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
