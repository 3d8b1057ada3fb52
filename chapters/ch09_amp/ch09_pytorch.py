#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 9's PyTorch twin: automatic mixed precision, autocast and GradScaler.

The same sections, flags and printed lines as ch09, with PyTorch's current
names: torch.amp.autocast(device_type, dtype=...) and
torch.amp.GradScaler(device_type). The seeds' torch.cuda.amp.autocast and
torch.cuda.amp.GradScaler are the deprecated spelling (a FutureWarning since
PyTorch 2.4).

What this PyTorch can do decides a few lines:
  - PyTorch 2.3+ has torch.amp.GradScaler for any device; on older ones
    (Debian's 1.13) the twin uses torch.cuda.amp.GradScaler, and on a CPU
    runs that class's own logic with its two CUDA kernels replayed in
    Python (tools/fixtures/amp_replay.py; Python is restarted with -O to
    drop the class's is_cuda asserts);
  - CPU autocast in 1.13 is bfloat16 only and its CPU matmul has no
    float16, so float16 on the CPU (the underflow demo, model.half(), the
    float16 speed rows) is reported as unavailable there; the GradScaler
    demos then run under bfloat16 autocast, where only the planted inf/NaN
    cause skips, as in ct's run.

    ./ch09 --quick
    /usr/bin/python3 chapters/ch09_amp/ch09_pytorch.py --quick
"""
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)

CLASSES = 10
PLANTS = {5: math.nan, 6: math.inf, 17: math.nan}  # 1-based steps whose batch carries a bad value


def parse_args(argv):
    p = twin.parser("ch09_pytorch.py", "Chapter 9's twin: automatic mixed precision.")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--scale-steps", type=int, default=40)
    p.add_argument("--half-steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--out-dir", default=".")
    p.add_argument("--compile", action="store_true",
                   help="speed: also time the lower precision's training step through torch.compile(model) "
                        "(PyTorch 2 or later): the compiled figure tools/bench compares C with")
    twin.explain(p, {
        "--steps": "training steps of each timed run (--quick: 8)",
        "--batch-size": "the MLP's batch; the conv model takes a quarter (--quick: 32)",
        "--hidden": "the MLP's width, also its input width (--quick: 128)",
        "--scale-steps": "steps of the GradScaler demonstration (--quick: 20)",
        "--half-steps": "steps of the model.half() comparison (--quick: 40)",
        "--lr": "SGD learning rate",
        "--out-dir": "where the checkpoint file goes"})
    a = p.parse_args(argv)
    if a.quick:
        a.steps = 8 if a.steps == 40 else a.steps
        a.batch_size = 32 if a.batch_size == 256 else a.batch_size
        a.hidden = 128 if a.hidden == 1024 else a.hidden
        a.scale_steps = 20 if a.scale_steps == 40 else a.scale_steps
        a.half_steps = 40 if a.half_steps == 1000 else a.half_steps
    if (a.steps < 6 or a.batch_size < 8 or a.hidden < 8 or a.scale_steps < 18 or not 10 <= a.half_steps <= 4096
            or a.lr <= 0):
        p.error("--steps must be >= 6, --batch-size >= 8, --hidden >= 8, --scale-steps >= 18, --half-steps 10..4096, "
                "--lr > 0")
    return a


class Amp:
    """torch.amp's names on this PyTorch, and what it can run on this device."""

    def __init__(self, torch, dev):
        self.torch, self.dev = torch, dev
        self.type = dev.type
        self.lowp = torch.float16 if dev.type == "cuda" else torch.bfloat16
        self.new_scaler = hasattr(torch.amp, "GradScaler")
        self.replayed = False
        if dev.type == "cpu" and not self.new_scaler:
            import amp_replay
            self.replayed = amp_replay.use_replayed_kernels()
            self._make_cpu = amp_replay.make_scaler
        # float16 on this device: CUDA always; the CPU from PyTorch 2 on
        self.f16 = dev.type == "cuda" or int(torch.__version__.split(".")[0]) >= 2

    def autocast(self, dtype, enabled=True):
        return self.torch.amp.autocast(self.type, dtype=dtype, enabled=enabled)

    def scaler(self, **kw):
        if self.new_scaler:
            return self.torch.amp.GradScaler(self.type, **kw)
        if self.type == "cuda":
            return self.torch.cuda.amp.GradScaler(**kw)  # the seeds' (deprecated) spelling
        enabled = kw.pop("enabled", True)
        return self._make_cpu(kw) if enabled else self.torch.cuda.amp.GradScaler(enabled=False)


def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def formats(torch, metrics):
    twin.section("formats")
    rows = [("float32", torch.float32, 32, 8, 23), ("float16", torch.float16, 16, 5, 10),
            ("bfloat16", torch.bfloat16, 16, 8, 7)]
    print(f"{'format':<9} {'bits':>4} {'exponent':>8} {'mantissa':>8} {'largest':>11} {'min normal':>11} "
          f"{'min subnorm':>11} {'eps':>11}")
    for name, dt, bits, e, mnt in rows:
        fi = torch.finfo(dt)
        sub = fi.tiny * 2.0 ** -mnt
        print(f"{name:<9} {bits:>4d} {e:>8d} {mnt:>8d} {fi.max:>11.4g} {fi.tiny:>11.4g} {sub:>11.4g} {fi.eps:>11.4g}")
    for label, v in (("1 + 2^-11", 1.0 + 2.0 ** -11), ("70000", 70000.0), ("1e-8", 1e-8)):
        x = torch.tensor([v], dtype=torch.float32)
        print(f"{label:<9} stored: float32 {x.item():.12g}, float16 {x.half().float().item():.6g}, "
              f"bfloat16 {x.bfloat16().float().item():.6g}")
    metrics["f16_max"] = torch.finfo(torch.float16).max


def mismatch(torch, nn, amp, metrics):
    twin.section("mismatch")
    # twin: mismatch
    model = nn.Linear(16, 4).to(amp.dev)
    x = torch.randn(8, 16, device=amp.dev).half()                 # x = x.half()
    print(f"x.dtype = {x.dtype}, model weight dtype = {model.weight.dtype}")
    try:
        model(x)
        print("model(x) fails: (no error: unexpected)")
    except RuntimeError as e:                                    # "match the data types"
        print(f"model(x) fails: {e}")
        metrics["mismatch_error"] = str(e)
    print(f"fix 1, the seed's: model(x.float()) -> {model(x.float()).dtype}")
    with amp.autocast(amp.lowp):                                 # torch.amp.autocast(device_type, dtype=...)
        y = model(x)
    print(f"fix 2: under autocast({amp.lowp}) model(x) -> {y.dtype}")
    # twin: end


def seed_model(nn):
    class Model(nn.Module):  # the seed's best-practice model
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 3)
            self.bn1 = nn.BatchNorm2d(64)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.conv1(x)
            x = self.bn1(x)
            x = x.mean(dim=[2, 3])
            return self.fc(x)
    return Model()


def autocast_rules(torch, nn, amp, metrics):
    twin.section("autocast")
    # twin: autocast
    model = seed_model(nn).to(amp.dev)
    seen = []
    for layer in (model.conv1, model.bn1, model.fc):
        layer.register_forward_hook(lambda m, i, o: seen.append((type(m).__name__, o.dtype)))
    x = torch.randn(8, 3, 16, 16, device=amp.dev)
    y = torch.arange(8, device=amp.dev)
    with amp.autocast(amp.lowp):
        h = model.bn1(model.conv1(x))
        pooled = h.mean(dim=[2, 3])                          # the seed's x.mean(dim=[2, 3])
        out = model.fc(pooled)
        loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    # twin: end
    rows = [seen[0], seen[1], ("AdaptiveAvgPool2d", pooled.dtype), ("Flatten", pooled.dtype), seen[2]]
    print(f"{'layer':<24} output dtype")
    for i, (kind, dt) in enumerate(rows):
        print(f"{i} {kind:<22} {dt}")
    print(f"{'loss (cross_entropy)':<24} {loss.dtype}")
    master = all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    print(f"parameters and their grads: {'torch.float32 (master weights)' if master else 'NOT float32'}")
    metrics["master_weights_f32"] = int(master)


# ---- the workloads ---------------------------------------------------------------------------
def teacher(torch, f):
    t = torch.randn(f.shape[1], CLASSES, device=f.device)
    return (f @ t).argmax(dim=1)


def mlp_task(torch, dev, n, feat):
    x = torch.randn(n, feat, device=dev)
    return x, teacher(torch, x)


def image_task(torch, dev, n, hw):
    x = torch.randn(n, 3, hw, hw, device=dev)
    return x, teacher(torch, x.mean(dim=[2, 3]))


def batch_of(task, k, batch):
    x, y = task
    per = x.shape[0] // batch
    b0 = (k % per) * batch
    return x[b0:b0 + batch], y[b0:b0 + batch]


def mlp(nn, h):
    return nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, CLASSES))


def fresh(torch, build, dev):
    torch.manual_seed(7)
    return build().to(dev)


def amp_step(torch, nn, amp, model, optimizer, scaler, x, y, dtype, max_norm=0.0):
    # twin: amp_step
    optimizer.zero_grad(set_to_none=True)
    with amp.autocast(dtype if dtype != torch.float32 else amp.lowp, enabled=dtype != torch.float32):
        output = model(x)
        loss = nn.functional.cross_entropy(output, y)
    scaler.scale(loss).backward()
    if max_norm > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    # twin: end
    return loss.detach()


def skipped_of(scaler, history):
    """Counts a skip when the scale went down (PyTorch has no skipped-steps counter)."""
    s = scaler.get_scale()
    down = history and s < history[-1]
    history.append(s)
    return int(bool(down))


def underflow(torch, nn, amp, a, metrics):
    twin.section("underflow")
    if not amp.f16:
        print(f"float16 autocast on the CPU needs PyTorch 2 or later (this is {torch.__version__}); not run")
        return
    task = mlp_task(torch, amp.dev, 8 * a.batch_size, a.hidden)
    model = fresh(torch, lambda: mlp(nn, a.hidden), amp.dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    none = amp.scaler(enabled=False)
    x, y = batch_of(task, 0, a.batch_size)
    for _ in range(40):
        loss = amp_step(torch, nn, amp, model, opt, none, x, y, torch.float32)
    print(f"float32, 40 steps on one batch: its loss is now {loss.item():.3g}")

    def grads(dtype, scale):
        s = amp.scaler(enabled=scale)
        opt.zero_grad(set_to_none=True)
        with amp.autocast(torch.float16, enabled=dtype != torch.float32):
            l = nn.functional.cross_entropy(model(x), y)
        s.scale(l).backward()
        if scale:
            s.unscale_(opt)
        return [p.grad.detach().clone() for p in model.parameters()]
    ref = grads(torch.float32, False)
    nonzero = sum(int((g != 0).sum()) for g in ref)
    total = sum(g.numel() for g in ref)
    flushed = []
    for scale in (False, True):
        got = grads(torch.float16, scale)
        flushed.append(sum(int(((r != 0) & (g == 0)).sum()) for r, g in zip(ref, got)))
    print(f"gradient elements: {total}, nonzero in float32: {nonzero}")
    print(f"flushed to zero by float16 without a scaler: {flushed[0]} ({100 * flushed[0] / max(nonzero, 1):.2f}%)")
    print(f"flushed to zero by float16 with GradScaler (2^16): {flushed[1]} ({100 * flushed[1] / max(nonzero, 1):.2f}%)")
    metrics["underflow_flushed_noscale"] = flushed[0]
    metrics["underflow_flushed_scaled"] = flushed[1]


def planted(x, at, value):
    x = x.clone()
    x.view(-1)[at] = value
    return x


def update_scale_by_hand(scale, tracker, found_inf, growth_factor=2.0, backoff_factor=0.5, growth_interval=10):
    """PyTorch's update rule (torch._amp_update_scale_), by hand, in float32 as the kernel rounds."""
    import numpy as np
    if found_inf:
        return float(np.float32(scale * backoff_factor)), 0
    if tracker + 1 == growth_interval:
        grown = np.float32(scale * growth_factor)
        return (float(grown) if math.isfinite(grown) else scale), 0
    return scale, tracker + 1


def gradscaler(torch, nn, amp, a, metrics):
    twin.section("gradscaler")
    dtype = torch.float16 if amp.f16 else amp.lowp
    task = mlp_task(torch, amp.dev, 8 * a.batch_size, a.hidden)
    model = fresh(torch, lambda: mlp(nn, a.hidden), amp.dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    scaler = amp.scaler(growth_interval=10)
    print(f"{'step':>5} {'found_inf':>9} {'scale':>12} {'by hand':>12} {'tracker':>8}")
    scales, found, history, skipped = [], [], [65536.0], 0
    hand, tracker, agree = 65536.0, 0, True
    for k in range(a.scale_steps):
        x, y = batch_of(task, k, a.batch_size)
        if k + 1 in PLANTS:
            x = planted(x, 3, PLANTS[k + 1])
        amp_step(torch, nn, amp, model, opt, scaler, x, y, dtype)
        inf = skipped_of(scaler, history)
        skipped += inf
        s = scaler.get_scale()
        tr = scaler._get_growth_tracker()
        hand, tracker = update_scale_by_hand(hand, tracker, inf)
        agree = agree and hand == s and tracker == tr
        if k == 0 or inf or s != scales[-1] or k == a.scale_steps - 1:
            print(f"{k + 1:>5d} {inf:>9d} {s:>12.6g} {hand:>12.6g} {tr:>8d}")
        scales.append(s)
        found.append(inf)
    print(f"skipped steps: {skipped}; the rule by hand agrees with GradScaler.update: {'yes' if agree else 'NO'}")
    metrics["scale_values"] = scales
    metrics["scale_found_inf"] = found
    metrics["scale_skipped"] = skipped
    metrics["scale_autocast_dtype"] = str(dtype)


def best_practice(torch, nn, amp, a, metrics):
    twin.section("best practice")
    dtype = torch.float16 if amp.f16 else amp.lowp
    task = mlp_task(torch, amp.dev, 8 * a.batch_size, a.hidden)
    model = fresh(torch, lambda: mlp(nn, a.hidden), amp.dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    scaler = amp.scaler()
    x, y = batch_of(task, 0, a.batch_size)
    with amp.autocast(dtype):
        loss = nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()

    def norm():
        return float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1e300))
    scaled, scale = norm(), scaler.get_scale()
    print(f"grad norm after scaler.scale(loss).backward(): {scaled:.6g}  (scale {scale:.6g})")
    scaler.unscale_(opt)
    true = norm()
    print(f"after scaler.unscale_(optimizer): {true:.6g}  (ratio {scaled / true:.6g})")
    seen = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
    print(f"clip_grad_norm_(max_norm=1.0) sees {seen:.6g} and leaves {norm():.6g}")
    print(f"clipping before unscale_ would leave a gradient of norm {1.0 / scale:.6g} after step divides by the scale")
    scaler.step(opt)
    scaler.update()
    metrics["clip_scale"] = scale


def half(torch, nn, amp, a, metrics):
    twin.section("half")
    hidden, batch = min(a.hidden, 128), min(a.batch_size, 32)  # small, as ch09's: many steps in seconds
    # twin: half
    task = mlp_task(torch, amp.dev, 8 * batch, hidden)
    model = fresh(torch, lambda: mlp(nn, hidden), amp.dev).half()   # the seed's model.half()
    x, y = batch_of(task, 0, batch)
    try:
        out = model(x.half())
        print(f"model.half()(x.half()) -> {out.dtype}")
    except RuntimeError as e:
        print(f"model.half() on this device: {e}")
        return
    # twin: end
    final, lost, updates, curves = [], 0, 0, []
    for run in range(3):  # float32, autocast float16 + GradScaler, model.half()
        model = fresh(torch, lambda: mlp(nn, hidden), amp.dev)
        if run == 2:
            model = model.half()
        opt = torch.optim.SGD(model.parameters(), lr=a.lr)
        scaler = amp.scaler(enabled=run == 1)
        losses = []
        for k in range(a.half_steps):
            x, y = batch_of(task, k, batch)
            count = run == 2 and k < 10  # the first 10 steps, as ch09
            before = [p.detach().clone() for p in model.parameters()] if count else None
            loss = amp_step(torch, nn, amp, model, opt, scaler, x.half() if run == 2 else x, y,
                            torch.float16 if run == 1 else torch.float32)
            if count:
                for p, b in zip(model.parameters(), before):
                    moved = p.grad != 0
                    updates += int(moved.sum())
                    lost += int((moved & (p.detach() == b)).sum())
            losses.append(float(loss))
        final.append(sum(losses[-5:]) / 5)
        curves.append(losses)
    print(f"MLP {hidden} wide, batch {batch}: mean loss of the last 5 of {a.half_steps} steps: float32 "
          f"{final[0]:.5f}, autocast float16 + GradScaler {final[1]:.5f}, model.half() {final[2]:.5f}")
    print(f"model.half(), first 10 steps: updates lost to rounding: {lost} of {updates} "
          f"({100 * lost / max(updates, 1):.2f}%)")
    metrics["half_lost_pct"] = 100 * lost / max(updates, 1)
    per = len(task[0]) // batch  # the figure: each run's mean loss over each pass through the batches
    means = [[sum(c[j * per:(j + 1) * per]) / per for j in range(a.half_steps // per)] for c in curves]
    metrics.update(half_steps=[(j + 1) * per for j in range(a.half_steps // per)], half_curve_float32=means[0],
                   half_curve_autocast=means[1], half_curve_half=means[2])


def timed_run(torch, nn, amp, a, build, task, batch, dtype, compiled=False):
    model = fresh(torch, build, amp.dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    if compiled:
        model = torch.compile(model)  # the same parameters; the untimed first steps compile
    scaler = amp.scaler(enabled=dtype == torch.float16)      # GradScaler(device, enabled=use_fp16)
    losses, warm, t0, base = [], 2, 0.0, 0
    for k in range(a.steps):
        if k == warm:
            sync(torch, amp.dev)
            if amp.dev.type == "cuda":
                base = torch.cuda.memory_allocated(amp.dev)
                torch.cuda.reset_peak_memory_stats(amp.dev)
            t0 = time.perf_counter()
        x, y = batch_of(task, k, batch)
        losses.append(amp_step(torch, nn, amp, model, opt, scaler, x, y, dtype))
    sync(torch, amp.dev)
    ms = 1e3 * (time.perf_counter() - t0) / (a.steps - warm)
    mem = (torch.cuda.max_memory_allocated(amp.dev) - base) / 2 ** 20 if amp.dev.type == "cuda" else float("nan")
    vals = [float(v) for v in losses]
    return ms, mem, sum(vals[-5:]) / 5, vals


def speed(torch, nn, amp, a, metrics):
    twin.section("speed")
    if amp.dev.type == "cpu":
        print(f"bfloat16 matmul on this CPU: PyTorch {torch.__version__}, oneDNN (mkldnn) "
              f"{'available' if torch.backends.mkldnn.is_available() else 'absent'}")
    workloads = [("gemm", lambda: mlp(nn, a.hidden), mlp_task(torch, amp.dev, 8 * a.batch_size, a.hidden),
                  a.batch_size)]
    cbatch = max(a.batch_size // 4, 8)
    workloads.append(("conv", lambda: seed_model(nn), image_task(torch, amp.dev, 8 * cbatch, 16 if a.quick else 32),
                      cbatch))
    for name, build, task, batch in workloads:
        print(f"{name}, batch {batch}, {a.steps} steps")
        print(f"  {'precision':<22} {'ms/step':>10} {'speedup':>9} {'step memory MB':>14} {'final loss':>11}")
        # twin: speed
        f32_ms = None
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            label = str(dtype).replace("torch.", "") + (" + GradScaler" if dtype == torch.float16 else "")
            if dtype == torch.float16 and not amp.f16:
                print(f"  {label:<22} float16 autocast needs PyTorch 2 on the CPU; not run")
                continue
            ms, mem, loss, curve = timed_run(torch, nn, amp, a, build, task, batch, dtype)
            f32_ms = f32_ms or ms
            print(f"  {label:<22} {ms:>10.2f} {f32_ms / ms:>8.2f}x {mem:>14.1f} {loss:>11.5f}")
            tag = str(dtype).replace("torch.", "")
            metrics[f"{name}_ms_{tag}"] = ms
            metrics[f"{name}_loss_{tag}"] = loss
        # twin: end
        if a.compile:
            tag = str(amp.lowp).replace("torch.", "")
            ms, mem, loss, curve = timed_run(torch, nn, amp, a, build, task, batch, amp.lowp, compiled=True)
            print(f"  {tag + ' torch.compile':<22} {ms:>10.2f} {f32_ms / ms:>8.2f}x {mem:>14.1f} {loss:>11.5f}")
            metrics[f"{name}_ms_{tag}_compiled"] = ms
            metrics[f"{name}_loss_{tag}_compiled"] = loss


def checkpoint(torch, nn, amp, a, metrics):
    twin.section("checkpoint")
    dtype = torch.float16 if amp.f16 else amp.lowp
    task = mlp_task(torch, amp.dev, 8 * a.batch_size, a.hidden)

    def trainer():
        model = fresh(torch, lambda: mlp(nn, a.hidden), amp.dev)
        return model, torch.optim.SGD(model.parameters(), lr=a.lr), amp.scaler(growth_interval=4)

    def steps(t, k0, k1):
        out = []
        for k in range(k0, k1):
            x, y = batch_of(task, k, a.batch_size)
            if k + 1 in PLANTS:
                x = planted(x, 0, PLANTS[k + 1])
            amp_step(torch, nn, amp, *t, x, y, dtype)
            out.append(t[2].get_scale())
        return out
    K, MORE = 8, 12
    first = trainer()
    steps(first, 0, K)
    path = os.path.join(a.out_dir, "ch09_checkpoint_twin.pt")
    state = first[2].state_dict()
    torch.save({"model": first[0].state_dict(), "scaler": state}, path)
    keys = " ".join(f"scaler.{k}={v:g}" for k, v in state.items())
    print(f"saved after {K} steps: {len(first[0].state_dict())} tensors and {keys}")
    cont = steps(first, K, K + MORE)
    second = trainer()
    ck = torch.load(path)
    second[0].load_state_dict(ck["model"])
    second[2].load_state_dict(ck["scaler"])
    resumed = steps(second, K, K + MORE)
    same_w = all(torch.equal(p, q) for p, q in zip(first[0].parameters(), second[0].parameters()))
    print(f"resumed from the file, {MORE} more steps: scale {ck['scaler']['scale']:g} -> {resumed[-1]:g}, "
          f"{'the same sequence as' if cont == resumed else 'NOT the sequence of'} the run that never stopped; "
          f"weights {'bit for bit equal' if same_w else 'DIFFERENT'}")
    metrics["resume_same_scales"] = int(cont == resumed)


def bad_batch(torch, nn, amp, a, metrics):
    twin.section("bad batch")
    dtype = torch.float16 if amp.f16 else amp.lowp
    task = mlp_task(torch, amp.dev, 8 * a.batch_size, a.hidden)
    model = fresh(torch, lambda: mlp(nn, a.hidden), amp.dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    scaler = amp.scaler(growth_interval=4)
    history, skipped = [scaler.get_scale()], 0
    for b, bad in enumerate((math.nan, 1e6)):
        w0 = [p.detach().clone() for p in model.parameters()]
        x, y = batch_of(task, b, a.batch_size)
        loss = amp_step(torch, nn, amp, model, opt, scaler, planted(x, 7, bad), y, dtype)
        before = skipped
        skipped += skipped_of(scaler, history)
        same = all(torch.equal(p, q) for p, q in zip(model.parameters(), w0))
        print(f"a batch holding {bad:g}: loss {float(loss):g}, skipped steps {before} -> {skipped}, scale now "
              f"{scaler.get_scale():g}, weights {'bit for bit unchanged' if same else 'CHANGED'}")


def main(argv):
    a = parse_args(argv)
    torch = twin.import_torch()
    nn = torch.nn
    dev = twin.device_of(torch, a.device)
    if a.compile and not hasattr(torch, "compile"):
        twin.die(f"--compile: torch {torch.__version__} has no torch.compile (PyTorch 2 or later)")
    amp = Amp(torch, dev)
    if amp.replayed and __debug__:  # torch.cuda.amp.GradScaler's is_cuda asserts must go (see above)
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, "-O"] + sys.argv)
    torch.manual_seed(a.seed)
    print(f"device: {dev}", flush=True)
    metrics = {"quick": int(a.quick), "lowp": str(amp.lowp).replace("torch.", ""),
               "torch": torch.__version__, "scaler_kernels": "replayed" if amp.replayed else "native", "compiled": int(a.compile)}
    formats(torch, metrics)
    mismatch(torch, nn, amp, metrics)
    autocast_rules(torch, nn, amp, metrics)
    underflow(torch, nn, amp, a, metrics)
    gradscaler(torch, nn, amp, a, metrics)
    best_practice(torch, nn, amp, a, metrics)
    half(torch, nn, amp, a, metrics)
    speed(torch, nn, amp, a, metrics)
    checkpoint(torch, nn, amp, a, metrics)
    bad_batch(torch, nn, amp, a, metrics)
    twin.write_metrics(a.metrics, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
