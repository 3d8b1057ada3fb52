#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 9 (automatic mixed precision) against independent references.

    check_ch09.py report  CH09 WORK             --device cpu --quick: the formats table against
                          numpy's float16 and the bfloat16 definition (float32's top 16 bits),
                          the f16-input error in PyTorch's words, autocast's dtypes (the
                          lower precision for the layers, float32 for the loss and the
                          weights), float16 underflow rescued by the scaler, the scale
                          sequence and the lab's by-hand column against PyTorch's documented
                          update rule replayed here over the steps that found an inf (which
                          include every planted bad batch), unscale_'s ratio = the scale,
                          model.half()'s lost updates, the speed rows (finite; autocast within
                          2% of float32's loss), the resumed scaler (bit-identical run; the
                          checkpoint's metadata read with tools/fixtures/st.py), bad batches
    check_ch09.py badflag CH09 WORK             bad flags exit 2; an --out-dir that does not exist
                          exits 1 naming it
    check_ch09.py twin    CH09 PYTHON TWIN WORK ch09_pytorch.py prints the same sections, formats
                          and autocast table, and the same scale sequence and skipped steps
    check_ch09.py gpu     CH09 WORK HAVE_CUDA   --device cuda --quick: the report's claims with
                          float16 as autocast's dtype; skipped where there is no GPU
"""
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "fixtures"))
import chaptertest  # noqa: E402
from chaptertest import (expect, expect_cuda_ok, expect_usage_error, fresh, load_metrics, run, run_cuda,  # noqa: E402
                         run_with_twin, section_lines, sections_of, skip_unless_cuda_build, skip_unless_imports)

SECTIONS = ["formats", "mismatch", "autocast", "underflow", "gradscaler", "best practice", "half", "speed",
            "checkpoint", "bad batch"]
PLANTED = {5, 6, 17}  # the steps whose batches carry a NaN or an inf (ch09.c's k_plant_steps)
GROWTH_INTERVAL = 10


def bf16(x):
    """bfloat16 by definition: float32's top 16 bits, rounded to nearest even."""
    import numpy as np
    b = np.array([x], dtype=np.float32).view(np.uint32)[0]
    if math.isnan(x):
        return x
    b = (int(b) + 0x7FFF + ((int(b) >> 16) & 1)) >> 16 << 16
    return float(np.array([b], dtype=np.uint32).view(np.float32)[0])


def pytorch_rule(found, init=65536.0, growth=2.0, backoff=0.5, interval=GROWTH_INTERVAL):
    """torch._amp_update_scale_'s documented rule over a found_inf sequence (float32 scale)."""
    import numpy as np
    scale, tracker, out = np.float32(init), 0, []
    for f in found:
        if f:
            scale, tracker = np.float32(np.float64(scale) * backoff), 0
        elif tracker + 1 == interval:
            grown = np.float32(np.float64(scale) * growth)
            scale, tracker = (grown if np.isfinite(grown) else scale), 0
        else:
            tracker += 1
        out.append(float(scale))
    return out


def check_formats(r, m):
    import numpy as np
    lines = section_lines(r.stdout, "formats")
    expect(m["f16_max"] == 65504.0 and m["f16_min_subnormal"] == 2.0 ** -24 and m["bf16_eps"] == 2.0 ** -7,
           f"format constants {m['f16_max']}, {m['f16_min_subnormal']}, {m['bf16_eps']}", r)
    probes = {"1 + 2^-11": 1.0 + 2.0 ** -11, "70000": 70000.0, "1e-8": 1e-8}
    for line in lines:
        label = line.split(" stored:")[0].strip()
        if label not in probes:
            continue
        v = probes[label]
        with np.errstate(over="ignore"):  # 70000 overflows float16: inf, as the chapter prints
            f16 = float(np.float16(np.float32(v)))
        want = f"float16 {f16:.6g}, bfloat16 {bf16(float(np.float32(v))):.6g}"
        expect(want in line, f"{label}: expected '{want}' in '{line}'", r)


def check_claims(r, m, lowp):
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}", r)
    check_formats(r, m)
    expect("mat1 and mat2 must have the same dtype" in m["mismatch_error"], f"mismatch: {m['mismatch_error']!r}", r)
    auto = section_lines(r.stdout, "autocast")
    layers = [line.split()[-1] for line in auto[1:6]]
    expect(layers == [f"torch.{lowp}"] * 5, f"autocast layer dtypes {layers}, expected torch.{lowp}", r)
    expect(auto[6].split()[-1] == "torch.float32" and m["master_weights_f32"] == 1, "loss or master weights", r)
    # float16 underflow: the scaler keeps (nearly) every gradient the unscaled run flushes
    expect(m["underflow_flushed_noscale"] > 0, "no gradient flushed to zero without a scaler: nothing shown", r)
    expect(m["underflow_flushed_scaled"] * 10 <= m["underflow_flushed_noscale"], "the scaler did not rescue them", r)
    # the scale sequence: PyTorch's rule over the steps that found an inf, which include every plant
    found, scales = m["scale_found_inf"], m["scale_values"]
    steps_found = {i + 1 for i, f in enumerate(found) if f}
    expect(PLANTED <= steps_found, f"planted bad batches at {sorted(PLANTED)}, skips found at {sorted(steps_found)}", r)
    expect(scales == pytorch_rule(found), f"scale sequence {scales} vs PyTorch's rule {pytorch_rule(found)}", r)
    expect(m["scale_by_hand"] == scales and m["scale_rule_agrees"] == 1, "the by-hand rule (the lab) disagrees", r)
    expect(m["scale_skipped"] == len(steps_found), "skipped count", r)
    expect(chaptertest.close(m["clip_scaled_norm"] / m["clip_true_norm"], m["clip_scale"], 1e-5),
           "unscale_ did not divide the norm by the scale", r)
    expect(m["half_lost_updates"] > 0, "model.half() lost no update: nothing shown", r)
    curves = [m[f"half_curve_{k}"] for k in ("float32", "autocast", "half")]
    expect(m["half_steps"] == [8, 16, 24, 32, 40] and all(len(c) == 5 for c in curves) and
           all(chaptertest.close(a, b, 1e-3) for a, b in zip(curves[0], curves[1])) and
           all(abs(c[-1] - m[k]) < 0.05 * m[k] for c, k in zip(curves, ("half_loss_f32", "half_loss_amp",
                                                                          "half_loss_half"))),
           "the model.half() figure: 40 steps with --quick are 5 passes over 8 batches, autocast's pass means "
           "follow float32's, and each last pass mean is near the printed mean of the last 5 steps", r)
    for name in ("gemm", "conv"):
        f32 = m[f"{name}_loss_float32"]
        for tag in ("bfloat16", "float16"):
            v = m[f"{name}_loss_{tag}"]
            expect(math.isfinite(m[f"{name}_ms_{tag}"]) and abs(v - f32) <= 0.02 * f32,
                   f"{name} {tag}: loss {v} vs float32 {f32}", r)
    expect(m["resume_same_scales"] == 1 and m["resume_same_weights"] == 1, "the resumed run diverged", r)
    expect(m["bad_batches_skipped_unchanged"] == 2, "a bad batch was not skipped", r)


def check_checkpoint_file(work, m):
    import st
    _, meta, _ = st.read_header(os.path.join(work, "ch09_checkpoint.safetensors"))
    keys = ["scaler.scale", "scaler.growth_factor", "scaler.backoff_factor", "scaler.growth_interval",
            "scaler._growth_tracker"]
    expect(meta is not None and all(k in meta for k in keys), f"checkpoint metadata {meta}")
    expect(float(meta["scaler.scale"]) == m["resume_saved_scale"] and float(meta["scaler.growth_factor"]) == 2.0 and
           float(meta["scaler.backoff_factor"]) == 0.5 and int(meta["scaler.growth_interval"]) == 4,
           f"checkpoint metadata values {meta}")


def cmd_report(ch09, work):
    os.makedirs(work, exist_ok=True)
    mp = fresh(os.path.join(work, "ch09.json"))
    fresh(os.path.join(work, "ch09_checkpoint.safetensors"))
    r = run([ch09, "--device", "cpu", "--quick", "--out-dir", work, "--metrics", mp])
    m = load_metrics(mp)
    check_claims(r, m, "bfloat16")
    check_checkpoint_file(work, m)


def cmd_badflag(ch09, work):
    os.makedirs(work, exist_ok=True)
    for args, needles in ((["--steps", "0"], ["--steps"]), (["--lr", "x"], ["--lr", "x"]),
                          (["--hidden"], ["--hidden"]), (["--half-steps", "5"], ["--half-steps"])):
        expect_usage_error(run([ch09, "--device", "cpu", "--quick", *args]), args, needles)
    missing = os.path.join(work, "no", "such", "dir")
    r = run([ch09, "--device", "cpu", "--quick", "--out-dir", missing])
    expect(r.returncode == 1 and missing in r.stderr and "Traceback" not in r.stderr,
           f"--out-dir {missing}: exit {r.returncode}, stderr must name it", r)


def cmd_twin(ch09, python, twin, work):
    skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    args = ["--device", "cpu", "--quick", "--out-dir", work]
    rc, rp, mc, mp = run_with_twin("ch09", [ch09, *args], [python, twin, *args], work)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}", rp)
    for name in ("formats", "autocast", "gradscaler"):
        c, p = section_lines(rc.stdout, name), section_lines(rp.stdout, name)
        if name == "gradscaler":  # the last line names the C and the PyTorch function
            c, p = c[:-1], p[:-1]
        expect(c == p, f"section {name} differs:\nC:  {c}\nPy: {p}", rp)
    expect(mc["scale_values"] == mp["scale_values"] and mc["scale_found_inf"] == mp["scale_found_inf"],
           "the scale sequences differ", rp)
    expect(mp["resume_same_scales"] == 1, "the twin's resumed scaler diverged", rp)


def cmd_gpu(ch09, work, have_cuda):
    skip_unless_cuda_build(have_cuda)
    os.makedirs(work, exist_ok=True)
    mp = fresh(os.path.join(work, "ch09_gpu.json"))
    r = run_cuda([ch09, "--device", "cuda", "--quick", "--out-dir", work, "--metrics", mp])
    expect_cuda_ok(r)
    m = load_metrics(mp)
    check_claims(r, m, "float16")
    check_checkpoint_file(work, m)


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 2),
                                       "twin": (cmd_twin, 4), "gpu": (cmd_gpu, 3)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
