#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 5 (linear regression) against what it claims.

Usage:
    check_ch05.py report  CH05 WORKDIR                   --device cpu --quick: data, closed form,
                                                         gradients and training re-done with numpy
    check_ch05.py badflag CH05 WORKDIR                   usage errors exit 2, run-time errors exit 1
    check_ch05.py gpu     CH05 WORKDIR HAVE_CUDA         the same as report, with --device cuda
    check_ch05.py twin    CH05 PYTHON TWIN.py WORKDIR    ch05_pytorch.py alone, on the CPU
    check_ch05.py twin_agree CH05 PYTHON TWIN.py WORKDIR DEVICE [HAVE_CUDA]
                                                         both from the same init file: the losses of
                                                         the first 20 steps agree within 1e-4 relative

Exit 0: passed; 1: failed (the reason is printed); 77: skipped (ctest's
SKIP_RETURN_CODE), only where the thing under test cannot exist here.

Independent references: the data and initial weights the chapter writes with
--save-init, read with tools/fixtures/st.py; numpy's float64 least squares
(numpy.linalg.lstsq, not the chapter's Cholesky); SGD re-run step by step in
numpy float64 from the same start; and PyTorch (the twin). Speed is printed
for the record (the project's target is ch05 >= 3x the twin's steps/s on the
same device), never asserted.
"""
import math
import os
import stat
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "fixtures"))
sys.path.insert(0, HERE)
import chaptertest  # noqa: E402
from chaptertest import (close, expect, expect_cuda_ok, expect_usage_error, fresh, load_metrics,  # noqa: E402
                         run, run_cuda, run_with_twin, sections_of, skip, skip_unless_cuda_build,
                         skip_unless_imports, torch_cuda_available)

SECTIONS = ["data", "closed form", "to device", "gradient check", "train", "parameters", "speed"]
TRUE_W = [2.0, -3.4, 1.7, 0.5]
TRUE_B = 4.2
NOISE_STD = 0.01
QUICK = {"samples": 1024, "batch_size": 32, "epochs": 3, "lr": 0.05}
TWIN_STEPS = 20
TWIN_RTOL = 1e-4


def simulate_sgd(np, x, y, w, b, lr, bs, epochs):
    """SGD in float64, batch by batch in order: per-step losses and the final (w, b)."""
    x, y = x.astype(np.float64), y.astype(np.float64)
    w, b = w.astype(np.float64).copy(), b.astype(np.float64).copy()  # (1, F), (1,)
    losses = []
    for _ in range(epochs):
        for i in range(0, len(x), bs):
            xb, yb = x[i:i + bs], y[i:i + bs]
            diff = xb @ w.T + b - yb          # (B, 1)
            losses.append(float(np.mean(diff ** 2)))
            g = 2 * diff / diff.size          # dL/dpred
            w -= lr * (g.T @ xb)
            b -= lr * g.sum(0)
    return losses, w, b


def check_run(r, m, init_path, device, hp, save_path=None):
    """Everything a successful run of ch05 (C) claims, against independent references."""
    import numpy as np
    import st
    expect(r.returncode == 0, f"exit code {r.returncode}, expected 0", r)
    first = r.stdout.splitlines()[0]
    if device == "cpu":
        expect(first == "device: cpu", f"first line {first!r}, expected 'device: cpu'", r)
    else:
        expect(re.fullmatch(r"device: cuda:\d+ \(.+\)", first), f"first line {first!r}, expected 'device: cuda:N (name)'", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}, expected {SECTIONS}", r)
    expect(m.get("device") == first.split()[1], f"metrics device {m.get('device')!r}, first line {first!r}")
    for k, v in hp.items():
        expect(m.get(k) == v, f"metrics {k}={m.get(k)!r}, expected {v!r}")

    # The data file: shapes, and y really is X w^T + b + noise of std 0.01.
    t = st.load(init_path)
    x, y, w0, b0 = t["x"], t["y"], t["weight"], t["bias"]
    n, bs = hp["samples"], hp["batch_size"]
    expect(x.shape == (n, 4) and y.shape == (n, 1) and w0.shape == (1, 4) and b0.shape == (1,),
           f"--save-init shapes x {x.shape}, y {y.shape}, weight {w0.shape}, bias {b0.shape}")
    expect(x.dtype == np.float32 and y.dtype == np.float32, f"--save-init dtypes {x.dtype}, {y.dtype}")
    resid = y[:, 0].astype(np.float64) - x.astype(np.float64) @ np.array(TRUE_W) - TRUE_B
    expect(abs(resid.std() - NOISE_STD) < 0.15 * NOISE_STD and abs(resid.mean()) < 5 * NOISE_STD / math.sqrt(n),
           f"y - X w_true - b_true has mean {resid.mean():.3g} and std {resid.std():.3g}, expected ~0 and {NOISE_STD}")
    expect(abs(x.mean()) < 0.1 and abs(x.std() - 1) < 0.05, f"X has mean {x.mean():.3g}, std {x.std():.3g}: not N(0, 1)")
    bound = 1 / math.sqrt(4)  # torch.nn.Linear's init U(-1/sqrt(in), 1/sqrt(in))
    expect(np.all(np.abs(w0) <= bound) and np.all(np.abs(b0) <= bound), f"initial weights outside +-{bound}: {w0} {b0}")

    # The closed form, recomputed with numpy's least squares (QR/SVD, not Cholesky).
    a = np.hstack([x.astype(np.float64), np.ones((n, 1))])
    theta = np.linalg.lstsq(a, y[:, 0].astype(np.float64), rcond=None)[0]
    closed_mse = float(np.mean((a @ theta - y[:, 0]) ** 2))
    cw, cb = m.get("closed_w"), m.get("closed_b")
    expect(cw is not None and len(cw) == 4, f"metrics closed_w {cw!r}")
    for j in range(4):
        expect(close(cw[j], theta[j], 1e-9, 1e-9), f"closed_w[{j}] = {cw[j]!r}, numpy lstsq {theta[j]!r}")
    expect(close(cb, theta[4], 1e-9, 1e-9), f"closed_b = {cb!r}, numpy lstsq {theta[4]!r}")
    expect(close(m["closed_mse"], closed_mse, 1e-6), f"closed_mse {m['closed_mse']!r}, numpy {closed_mse!r}")

    # The gradient check: every comparison OK, and the first batch's loss right.
    checks = re.findall(r"max rel diff (\S+) (OK|FAIL)$", r.stdout, re.M)
    expect(len(checks) == 4 and all(v == "OK" for _, v in checks), f"gradient check lines {checks}", r)
    expect(m.get("grad_check_max_rel_diff", 1) < 1e-5, f"grad_check_max_rel_diff {m.get('grad_check_max_rel_diff')!r}")
    sim, sw, sb = simulate_sgd(np, x, y, w0, b0, hp["lr"], bs, hp["epochs"])
    expect(close(m["grad_check_first_loss"], sim[0], 1e-5), f"first batch loss {m['grad_check_first_loss']!r}, numpy {sim[0]!r}")

    # Training: the first steps' losses and the final parameters against SGD re-run in float64.
    sl = m.get("step_losses", [])
    steps_per_epoch = (n + bs - 1) // bs
    expect(len(sl) == min(TWIN_STEPS, steps_per_epoch * hp["epochs"]), f"{len(sl)} step_losses")
    for i, v in enumerate(sl):
        expect(close(v, sim[i], 1e-4), f"step {i} loss {v!r}, numpy float64 SGD {sim[i]!r}")
    expect(m.get("steps_per_epoch") == steps_per_epoch, f"steps_per_epoch {m.get('steps_per_epoch')!r}, expected {steps_per_epoch}")
    lw, lb = m["learned_w"], m["learned_b"]
    for j in range(4):
        expect(abs(lw[j] - sw[0, j]) < 1e-4, f"learned_w[{j}] {lw[j]!r}, numpy float64 SGD {sw[0, j]!r}")
    expect(abs(lb - sb[0]) < 1e-4, f"learned_b {lb!r}, numpy float64 SGD {sb[0]!r}")
    # ... and against the truth and the closed form.
    for j in range(4):
        expect(abs(lw[j] - theta[j]) < 3e-3, f"learned_w[{j}] {lw[j]} is not within 3e-3 of the closed form {theta[j]}")
        expect(abs(lw[j] - TRUE_W[j]) < 5e-3, f"learned_w[{j}] {lw[j]} is not within 5e-3 of the true {TRUE_W[j]}")
    expect(abs(lb - theta[4]) < 3e-3, f"learned_b {lb} is not within 3e-3 of the closed form {theta[4]}")
    expect(abs(lb - TRUE_B) < 5e-3, f"learned_b {lb} is not within 5e-3 of the true {TRUE_B}")
    # The loss falls, and ends at the closed form's MSE (never below it).
    lc = m.get("loss_curve", [])
    expect(len(lc) == hp["epochs"] and len(m.get("epoch", [])) == hp["epochs"], f"loss_curve {lc!r}")
    expect(all(lc[i + 1] < lc[i] for i in range(len(lc) - 1)), f"the loss does not fall epoch by epoch: {lc}")
    expect(lc[-1] < 1e-3 * lc[0], f"the loss fell only from {lc[0]} to {lc[-1]}")
    learned_mse = float(np.mean((x.astype(np.float64) @ np.array(lw) + lb - y[:, 0]) ** 2))
    expect(close(m["final_mse"], learned_mse, 1e-3), f"final_mse {m['final_mse']!r}, numpy {learned_mse!r}")
    expect(closed_mse <= learned_mse <= 1.2 * closed_mse,
           f"learned MSE {learned_mse} should be at or just above the closed form's {closed_mse}")
    expect(len(m.get("closed_form_mse", [])) == hp["epochs"], "closed_form_mse series missing")

    # Speed: measured and printed, not asserted.
    for k in ("steps_per_s", "loader_steps_per_s"):
        expect(isinstance(m.get(k), (int, float)) and m[k] > 0, f"metrics {k} = {m.get(k)!r}")
    expect(len(m.get("epoch_ms", [])) == hp["epochs"] and m.get("threads", 0) >= 1, "epoch_ms or threads missing")
    if device != "cpu":
        expect(m.get("cpu_steps_per_s", 0) > 0, "a GPU run must time the CPU too (cpu_steps_per_s)")
    print(f"steps/s: {m['steps_per_s']:.0f} resident, {m['loader_steps_per_s']:.0f} with the DataLoader"
          + (f", {m['cpu_steps_per_s']:.0f} on the CPU" if "cpu_steps_per_s" in m else ""))

    if save_path:  # the trained state_dict, read back independently
        s = st.load(save_path)
        expect(set(s) == {"weight", "bias"}, f"--save wrote {sorted(s)}, expected weight and bias")
        expect(np.allclose(s["weight"][0], lw, rtol=0, atol=1e-6) and abs(s["bias"][0] - lb) < 1e-6,
               f"--save holds {s['weight']} {s['bias']}, the run printed {lw} {lb}")


def cmd_report(ch05, workdir):
    m_path, init, save = (fresh(os.path.join(workdir, f)) for f in ("ch05.json", "ch05_init.safetensors",
                                                                     "ch05_model.safetensors"))
    r = run([ch05, "--device", "cpu", "--quick", "--metrics", m_path, "--save-init", init, "--save", save])
    m = load_metrics(m_path) if r.returncode == 0 else {}
    check_run(r, m, init, "cpu", QUICK, save)

    # --load-init of the file just written reproduces the run exactly.
    m2_path = fresh(os.path.join(workdir, "ch05_reload.json"))
    r2 = run([ch05, "--device", "cpu", "--quick", "--metrics", m2_path, "--load-init", init, "--seed", "7"])
    expect(r2.returncode == 0, f"--load-init: exit code {r2.returncode}", r2)
    m2 = load_metrics(m2_path)
    expect(m2["step_losses"] == m["step_losses"] and m2["learned_w"] == m["learned_w"],
           "--load-init of the run's own file (another --seed) did not reproduce the run", r2)

    # Under "auto" the first line names the device and, on the CPU, why.
    r3 = run([ch05, "--quick", "--epochs", "1"])
    expect(r3.returncode == 0, f"--device auto: exit code {r3.returncode}", r3)
    first = r3.stdout.splitlines()[0]
    expect(re.fullmatch(r"device: (cuda:\d+ \(.+\)|cpu \(.+\))", first), f"auto printed {first!r}", r3)
    print("PASS")


def cmd_badflag(ch05, workdir):
    import numpy as np
    import st
    for args, needles in [
        (["--bogus"], ["--bogus"]),
        (["--lr", "abc"], ["--lr", '"abc"']),
        (["--lr", "0"], ["--lr"]),
        (["--lr", "-0.1"], ["--lr"]),
        (["--epochs", "0"], ["--epochs"]),
        (["--epochs", "x"], ["--epochs", '"x"']),
        (["--batch-size", "0"], ["--batch-size"]),
        (["--samples", "5"], ["--samples"]),
        (["--load-init"], ["--load-init", "expects a value"]),
        (["--device", "gpu"], ["--device", '"gpu"']),
    ]:
        r = run([ch05, "--quick"] + args)
        expect_usage_error(r, args, needles)
        expect("usage" in r.stderr, f"{args}: no usage hint on stderr", r)
        expect("device:" not in r.stdout, f"{args}: ran anyway", r)
    r = run([ch05, "--help"])
    expect(r.returncode == 0 and r.stdout.startswith("usage: ch05") and "--lr" in r.stdout and "--load-init" in r.stdout,
           "--help must print the usage, with the chapter's flags, and exit 0", r)

    # Run-time errors: exit 1 with a message naming the file and the problem.
    missing = os.path.join(workdir, "ch05_no_such_file.safetensors")
    r = run([ch05, "--device", "cpu", "--quick", "--load-init", missing])
    expect(r.returncode == 1 and missing in r.stderr, "--load-init of a missing file must exit 1 naming it", r)
    bad = fresh(os.path.join(workdir, "ch05_bad_init.safetensors"))
    st.save(bad, {"x": np.zeros((16, 3), np.float32), "y": np.zeros((16, 1), np.float32),
                  "weight": np.zeros((1, 3), np.float32), "bias": np.zeros(1, np.float32)})
    r = run([ch05, "--device", "cpu", "--quick", "--load-init", bad])
    expect(r.returncode == 1 and '"x"' in r.stderr and "(16, 3)" in r.stderr,
           "--load-init with x of the wrong shape must exit 1 naming x and its shape", r)
    nox = fresh(os.path.join(workdir, "ch05_nox_init.safetensors"))
    st.save(nox, {"y": np.zeros((16, 1), np.float32)})
    r = run([ch05, "--device", "cpu", "--quick", "--load-init", nox])
    expect(r.returncode == 1 and '"x"' in r.stderr, "--load-init without x must exit 1 naming x", r)

    # Output files that cannot be written fail before the training (no
    # "device:" line, no "== train ==" section) and leave what was there.
    nodir = os.path.join(workdir, "ch05_no_such_dir", "m.safetensors")
    for flag in ("--save", "--save-init", "--metrics"):
        r = run([ch05, "--device", "cpu", "--quick", flag, nodir])
        expect(r.returncode == 1 and flag in r.stderr and nodir in r.stderr and "directory exists" in r.stderr,
               f"{flag} into a missing folder must exit 1 naming the flag, the path and the fix", r)
        expect("device:" not in r.stdout, f"{flag} into a missing folder: the chapter ran before failing", r)
    r = run([ch05, "--device", "cpu", "--quick", "--save", workdir])
    expect(r.returncode == 1 and "is a directory" in r.stderr and os.path.isdir(workdir),
           "--save onto a folder must exit 1 and leave the folder", r)
    target = fresh(os.path.join(workdir, "ch05_link_target.safetensors"))
    link = fresh(os.path.join(workdir, "ch05_link.safetensors"))
    os.symlink(os.path.basename(target), link)
    r = run([ch05, "--device", "cpu", "--quick", "--save", link])
    expect(r.returncode == 0 and os.path.islink(link) and os.path.getsize(target) > 0,
           "--save through a symbolic link must write the file it points to and keep the link", r)
    os.unlink(link)
    if os.path.exists("/dev/full"):
        r = run([ch05, "--device", "cpu", "--quick", "--metrics", "/dev/full"])
        expect(r.returncode == 1 and "/dev/full" in r.stderr and "No space left" in r.stderr
               and stat.S_ISCHR(os.stat("/dev/full").st_mode),
               "--metrics /dev/full must exit 1 with the device's error and leave the device node", r)
    print("PASS")


def gpu_or_skip(ch05, have_cuda, args):
    """Runs ch05 with --device cuda; skips (77) only where there is no GPU at all."""
    skip_unless_cuda_build(have_cuda)
    r = run_cuda([ch05, "--device", "cuda"] + args)
    expect_cuda_ok(r)
    return r


def cmd_gpu(ch05, workdir, have_cuda):
    m_path, init = (fresh(os.path.join(workdir, f)) for f in ("ch05_gpu.json", "ch05_gpu_init.safetensors"))
    r = gpu_or_skip(ch05, have_cuda, ["--quick", "--metrics", m_path, "--save-init", init])
    check_run(r, load_metrics(m_path), init, "cuda", QUICK)
    print("PASS")


def cmd_twin(ch05, python, twin, workdir):
    skip_unless_imports(python, "torch")
    rc, rp, mc, mp = run_with_twin("ch05", [ch05, "--device", "cpu", "--quick"],
                                   [python, twin, "--device", "cpu", "--quick"], workdir)
    expect(rp.stdout.splitlines()[0] == "device: cpu", f"twin's first line {rp.stdout.splitlines()[0]!r}", rp)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}, expected {SECTIONS}", rp)
    missing = sorted(set(mc) - set(mp))
    expect(not missing, f"the twin's metrics lack the C program's keys {missing}")
    for k, v in QUICK.items():
        expect(mp.get(k) == v, f"twin metrics {k}={mp.get(k)!r}, expected {v!r}")
    # Its own data (torch's generator): learned close to its closed form and the truth.
    for j in range(4):
        expect(abs(mp["learned_w"][j] - mp["closed_w"][j]) < 3e-3 and abs(mp["learned_w"][j] - TRUE_W[j]) < 5e-3,
               f"twin learned_w[{j}] {mp['learned_w'][j]}, closed {mp['closed_w'][j]}, true {TRUE_W[j]}")
    expect(abs(mp["learned_b"] - TRUE_B) < 5e-3, f"twin learned_b {mp['learned_b']}")
    expect(mp["grad_check_max_rel_diff"] < 1e-5, "the twin's gradient check failed")
    print(f"steps/s on the CPU: ch05 {mc['steps_per_s']:.0f}, PyTorch twin {mp['steps_per_s']:.0f} "
          f"({mc['steps_per_s'] / mp['steps_per_s']:.1f}x; threads {mc['threads']} and {mp['threads']})")
    print("PASS")


def compare_losses(a, b, who):
    expect(len(a) == TWIN_STEPS and len(b) == TWIN_STEPS, f"{who}: step_losses of length {len(a)} and {len(b)}")
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
    for i, (x, y) in enumerate(zip(a, b)):
        expect(abs(x - y) <= TWIN_RTOL * abs(y), f"{who}: step {i}: loss {x!r} vs {y!r} (relative {abs(x - y) / abs(y):.2e})")
    print(f"{who}: the first {TWIN_STEPS} step losses agree, worst relative difference {worst:.2e}")


def cmd_twin_agree(ch05, python, twin, workdir, device, have_cuda="ON"):
    if device == "cpu":
        skip_unless_imports(python, "torch")
    tag = "gpu" if device != "cpu" else "cpu"
    p = lambda f: fresh(os.path.join(workdir, f"ch05_agree_{tag}_{f}"))  # noqa: E731
    c_init, py_init, c1, p1, c2, p2 = (p(f) for f in ("c_init.safetensors", "py_init.safetensors",
                                                       "c1.json", "p1.json", "c2.json", "p2.json"))
    # The C program writes the start, PyTorch reads it ...
    if device == "cpu":
        rc = run([ch05, "--device", device, "--quick", "--save-init", c_init, "--metrics", c1])
        expect(rc.returncode == 0, f"ch05 exit code {rc.returncode}", rc)
    else:
        rc = gpu_or_skip(ch05, have_cuda, ["--quick", "--save-init", c_init, "--metrics", c1])
        skip_unless_imports(python, "torch")
        if not torch_cuda_available(python):
            skip("ct runs on the GPU but this PyTorch cannot use it; nothing to compare")
    rp = run([python, twin, "--device", device, "--quick", "--load-init", c_init, "--metrics", p1])
    expect(rp.returncode == 0, f"ch05_pytorch.py --load-init exit code {rp.returncode}", rp)
    m_c, m_p = load_metrics(c1), load_metrics(p1)
    compare_losses(m_c["step_losses"], m_p["step_losses"], "C start, C vs PyTorch")
    # ... and the other way round.
    rp = run([python, twin, "--device", device, "--quick", "--save-init", py_init, "--metrics", p2])
    expect(rp.returncode == 0, f"ch05_pytorch.py --save-init exit code {rp.returncode}", rp)
    rc = run([ch05, "--device", device, "--quick", "--load-init", py_init, "--metrics", c2])
    expect(rc.returncode == 0, f"ch05 --load-init exit code {rc.returncode}", rc)
    compare_losses(load_metrics(c2)["step_losses"], load_metrics(p2)["step_losses"], "PyTorch start, C vs PyTorch")
    dw = max(abs(a - b) for a, b in zip(m_c["learned_w"] + [m_c["learned_b"]], m_p["learned_w"] + [m_p["learned_b"]]))
    print(f"after all {m_c['steps_per_epoch'] * m_c['epochs']} steps the parameters differ by at most {dw:.1e}")
    ratio = m_c["steps_per_s"] / m_p["steps_per_s"]
    print(f"steps/s on {m_c['device']}: ch05 {m_c['steps_per_s']:.0f}, PyTorch twin {m_p['steps_per_s']:.0f}: "
          f"{ratio:.1f}x (target >= 3x; threads {m_c['threads']} and {m_p['threads']})")
    print("PASS")


def numpy_or_skip():
    try:
        import numpy  # noqa: F401
    except ImportError:
        skip(f"{sys.executable} cannot import numpy (Debian's python3-numpy), which the references need")


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 2), "gpu": (cmd_gpu, 3),
                                       "twin": (cmd_twin, 4), "twin_agree": (cmd_twin_agree, [5, 6])}, __doc__,
                                prepare=numpy_or_skip)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
