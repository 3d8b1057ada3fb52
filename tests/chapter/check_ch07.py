#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 7 (DataParallel) against independent references.

    check_ch07.py report     CH07 WORK                 --devices cpu,cpu,cpu --quick: the seed's
                             printed 3-GPU split (30 -> 10+10+10, 10 -> 4+4+2), the split table
                             against torch.chunk's rule, DataParallel's parameters within
                             rounding of one-device training and of a float64 run (and training
                             happened), the module. prefix, both state-dict files read back with st.py
    check_ch07.py badflag    CH07 WORK                 bad flags exit 2; a bad or absent device in
                             --devices exits 1 naming it
    check_ch07.py twin       CH07 PYTHON TWIN WORK     ch07_pytorch.py prints the same sections,
                             the same seed example, split table and state-dict lines
    check_ch07.py twin_agree CH07 PYTHON TWIN WORK     from the C program's initial weights, the
                             twin's float64 one-device SGD reaches the parameters C's DataParallel
                             saved, within 1e-4 of the largest parameter
    check_ch07.py gpu        CH07 WORK HAVE_CUDA       --device cuda: the main-device error in
                             PyTorch's words; skipped where there is no GPU
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

SECTIONS = ["devices", "current device", "seed example", "split rule", "training", "state dict",
            "device_ids[0]"]
# The seed tutorial's output on 3 GPUs (the rows of each "In Model" line, then "Outside").
SEED_3GPU = [10, 10, 10, 30, 10, 10, 10, 30, 10, 10, 10, 30, 4, 4, 2, 10]


def chunk_rule(rows, k):
    """torch.chunk's documented rule: chunks of ceil(rows / k) until the rows run out."""
    each = -(-rows // k)
    return [min(each, rows - s) for s in range(0, rows, each)]


def seed_rows(lines):
    out = []
    for line in lines:
        if "In Model: input size (" in line or line.startswith("Outside: input size ("):
            out.append(int(line.split("input size (")[1].split(",")[0]))
    return out


def check_run(r, work, metrics):
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}", r)
    expect(seed_rows(section_lines(r.stdout, "seed example")) == SEED_3GPU,
           "the seed example's sizes differ from the seed's printed 3-GPU output", r)
    for line in section_lines(r.stdout, "split rule")[1:]:
        rows, k, sizes = line.split(None, 2)
        want = chunk_rule(int(rows), int(k))
        expect([int(x) for x in sizes.split("+")] == want, f"split of {rows} in {k}: {sizes}, expected {want}", r)
    diff, scale = metrics["max_param_diff"], metrics["max_param_abs"]
    expect(0 <= diff <= 1e-5 * scale, f"DataParallel vs one device: max |diff| {diff} (scale {scale})", r)
    d64 = (metrics["single_f64_diff"], metrics["dp_f64_diff"])
    expect(all(0 <= d <= 1e-5 * scale for d in d64) and "float64 run, same start and batches" in r.stdout,
           f"the float64 run from the same start: distances {d64} (scale {scale})", r)
    single, dp = metrics["single_loss"], metrics["dp_loss"]
    expect(len(dp) == metrics["steps"] and dp[-1] < 0.8 * dp[0], f"the DataParallel loss did not fall: {dp}", r)
    expect(all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(single, dp)), "step losses differ", r)
    split = [int(x) for x in metrics.get("dp_last_split", [])]
    expect(split and split == chunk_rule(sum(split), int(metrics["replicas"])),
           f"the DataParallel run's last batch went through the wrapper as {split}, expected torch.chunk's "
           f"split over {metrics['replicas']} replicas (a step that bypasses the wrapper leaves it empty)", r)
    expect(metrics["wrapper_key0"] == "module.1.weight" and metrics["module_key0"] == "1.weight",
           "state_dict keys", r)
    out = "\n".join(section_lines(r.stdout, "state dict"))
    expect(out.count("parameters equal, bit for bit") == 2 and "Missing key(s) in state_dict" in out,
           "state dict section", r)


def cmd_report(ch07, work):
    os.makedirs(work, exist_ok=True)
    m = fresh(os.path.join(work, "ch07.json"))
    r = run([ch07, "--device", "cpu", "--devices", "cpu,cpu,cpu", "--quick", "--out-dir", work, "--metrics", m])
    metrics = load_metrics(m)
    check_run(r, work, metrics)
    wrapper = st.load(os.path.join(work, "ch07_wrapper.safetensors"))
    module = st.load(os.path.join(work, "ch07_module.safetensors"))
    expect(sorted(wrapper) == sorted("module." + k for k in module), f"keys {sorted(wrapper)} vs {sorted(module)}")
    for k, v in module.items():
        expect((wrapper["module." + k] == v).all(), f"{k}: the two files hold different values")
    expect(metrics["replicas"] == 3 and metrics["get_device_sequence"] == "", "devices metrics", r)


def cmd_badflag(ch07, work):
    os.makedirs(work, exist_ok=True)
    for args, needles in ((["--steps", "0"], ["--steps"]), (["--devices"], ["--devices"]),
                          (["--lr", "x"], ["--lr", "x"])):
        expect_usage_error(run([ch07, "--device", "cpu", "--quick", *args]), args, needles)
    for devices, needle in (("cpu,gpu", "gpu"), ("cpu,,cpu", "cpu,,cpu"), ("cuda:99", "cuda")):
        r = run([ch07, "--device", "cpu", "--quick", "--devices", devices, "--out-dir", work])
        expect(r.returncode == 1 and needle in r.stderr and "Traceback" not in r.stderr,
               f"--devices {devices}: exit {r.returncode}, stderr must name {needle!r}", r)
        expect("== training ==" not in r.stdout, f"--devices {devices}: trained before failing", r)


def cmd_twin(ch07, python, twin, work):
    skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    args = ["--device", "cpu", "--devices", "cpu,cpu,cpu", "--quick", "--out-dir", work]
    rc, rp, mc, mp = run_with_twin("ch07", [ch07, *args], [python, twin, *args], work)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}", rp)
    for name in ("devices", "seed example", "split rule", "state dict", "device_ids[0]"):
        c, p = section_lines(rc.stdout, name), section_lines(rp.stdout, name)
        if name == "state dict":  # the error texts differ in their first words
            c = [x for x in c if not x.startswith(("  ", "\t"))]
            p = [x for x in p if not x.startswith(("  ", "\t"))]
        expect(c == p, f"section {name} differs:\nC:  {c}\nPy: {p}", rp)
    for key in ("replicas", "seed_chunks", "split_table", "wrapper_key0", "module_key0", "steps"):
        expect(mc[key] == mp[key], f"metric {key}: C {mc[key]} vs twin {mp[key]}")


def cmd_twin_agree(ch07, python, twin, work):
    skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    init, c_out, py_out = (fresh(os.path.join(work, f)) for f in ("init.safetensors", "dp_c.safetensors",
                                                                  "single_py.safetensors"))
    common = ["--device", "cpu", "--devices", "cpu,cpu,cpu", "--steps", "20", "--out-dir", work]
    r = run([ch07, *common, "--save-init", init, "--save", c_out])
    expect(r.returncode == 0, "ch07 failed", r)
    rp = run([python, twin, *common, "--load-init", init, "--float64", "--save", py_out])
    expect(rp.returncode == 0, "the twin failed", rp)
    a, b, start = st.load(c_out), st.load(py_out), st.load(init)
    expect(sorted(a) == sorted(b), f"keys {sorted(a)} vs {sorted(b)}")
    scale = max(float(abs(v).max()) for v in b.values())
    diff = max(float(abs(a[k].astype("float64") - b[k]).max()) for k in a)
    moved = max(float(abs(start[k].astype("float64") - b[k]).max()) for k in a)
    print(f"max |C DataParallel - PyTorch float64| = {diff:.3g}; largest parameter {scale:.3g}; "
          f"largest move from the start {moved:.3g}")
    expect(moved > 100 * diff, "the parameters barely moved: the comparison would prove nothing")
    expect(diff <= 1e-4 * scale, f"C's DataParallel parameters differ from PyTorch's by {diff}")


def cmd_gpu(ch07, work, have_cuda):
    skip_unless_cuda_build(have_cuda)
    os.makedirs(work, exist_ok=True)
    m = fresh(os.path.join(work, "ch07_gpu.json"))
    r = run_cuda([ch07, "--device", "cuda", "--quick", "--out-dir", work, "--metrics", m])
    expect_cuda_ok(r)
    metrics = load_metrics(m)
    if metrics["replicas"] == 3:  # one GPU named three times, as in the CPU runs
        check_run(r, work, metrics)
    err = metrics["main_device_error"]
    expect("module must have its parameters and buffers on device cuda:" in err and
           "(device_ids[0]) but found one of them on device: cpu" in err, f"main-device error: {err!r}", r)


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 2),
                                       "twin": (cmd_twin, 4), "twin_agree": (cmd_twin_agree, 4),
                                       "gpu": (cmd_gpu, 3)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
