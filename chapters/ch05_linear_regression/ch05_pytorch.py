#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 5's PyTorch twin: linear regression trained with SGD on the device.

The same work as ch05, written the way the seed tutorials write it: the data
made with torch.randn, an nn.Linear model, nn.MSELoss, torch.optim.SGD, and
the three moves model.to(device), X.to(device), loss_fn.to(device); autograd
does the backward pass. Same flags, defaults, sections and metric keys as the
C program, so the two can be compared line by line:

    ./ch05 --device cpu --quick --save-init init.safetensors --metrics c.json
    /usr/bin/python3 chapters/ch05_linear_regression/ch05_pytorch.py --device cpu --quick \\
        --load-init init.safetensors --metrics py.json

With --load-init both start from the same data and initial weights, and their
step_losses agree to float32 rounding. --threads sets torch.set_num_threads
(default: the CPUs this process may use, as OpenMP's default in ch05).
Safetensors files are read and written with tools/fixtures/st.py (Debian has
no safetensors package). Exit codes as in the C chapters: 2 for a bad flag, 1
for a run-time error.
"""
import argparse
import copy
import math
import os
import signal
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)
from batches import device_batches  # noqa: E402  (side-stream copies, as ct's DataLoader makes them)

F = 4
TRUE_W = [2.0, -3.4, 1.7, 0.5]
TRUE_B = 4.2
NOISE_STD = 0.01
TWIN_STEPS = 20
MAX_STEP_LOG = 4096
GRAD_TOL = 1e-5


def int_in(lo, hi):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f'expects an integer, got "{text}"') from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {v}")
        return v
    return parse


def learning_rate(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expects a finite number, got "{text}"') from None
    if not (math.isfinite(v) and 0 < v <= 10):
        raise argparse.ArgumentTypeError(f"must be in (0, 10], got {text}")
    return v


def parse_args(argv):
    p = twin.parser("ch05_pytorch.py",
                    "Chapter 5 (PyTorch twin): linear regression trained with SGD "
                    "on the device, checked against the closed-form solution.",
                    seed=int_in(0, 2**63 - 1))
    p.add_argument("--samples", type=int_in(10, 1 << 26), help="number of samples N (default 8192; --quick 1024)")
    p.add_argument("--batch-size", type=int_in(1, 1 << 62), default=32, help="samples per SGD step (default 32)")
    p.add_argument("--epochs", type=int_in(1, 1000), help="passes over the data (default 10; --quick 3)")
    p.add_argument("--lr", type=learning_rate, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--save-init", metavar="FILE", help="write the data and the initial weights (safetensors) to FILE")
    p.add_argument("--load-init", metavar="FILE", help="read the data and the initial weights from FILE")
    p.add_argument("--save", metavar="FILE", help="save the trained model's state_dict (safetensors) to FILE")
    p.add_argument("--threads", type=int_in(1, 1024), help="torch.set_num_threads (default: the usable CPUs)")
    twin.explain(p, {})
    a = p.parse_args(argv)
    if a.samples is None:
        a.samples = 1024 if a.quick else 8192
    if a.epochs is None:
        a.epochs = 3 if a.quick else 10
    return a


def max_rel_diff(a, b):
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / (scale if scale > 0 else 1.0)


# ---- data -------------------------------------------------------------------------------

def show_data(torch, nn, args, m):
    import st
    if args.load_init:
        try:
            t = st.load_torch(args.load_init)
        except (OSError, ValueError) as e:
            twin.die(f"--load-init {args.load_init}: {e}")
        for name in ("x", "y", "weight", "bias"):
            if name not in t:
                twin.die(f'--load-init {args.load_init}: no tensor named "{name}" in the file')
        x, y = t["x"].float(), t["y"].float()
        n = x.shape[0] if x.dim() == 2 else -1
        if tuple(x.shape) != (n, F) or tuple(y.shape) != (n, 1) or not 10 <= n <= 1 << 26:
            twin.die(f"--load-init {args.load_init}: x {tuple(x.shape)} and y {tuple(y.shape)}: "
                f"expected (N, {F}) and (N, 1) with N in [10, 67108864]")
        init = {"weight": t["weight"].float(), "bias": t["bias"].float()}
        if tuple(init["weight"].shape) != (1, F) or tuple(init["bias"].shape) != (1,):
            twin.die(f"--load-init {args.load_init}: weight {tuple(init['weight'].shape)}, "
                f"bias {tuple(init['bias'].shape)}: expected (1, {F}) and (1,)")
        args.samples = n
    else:
        # twin: data
        x = torch.randn(args.samples, F)          # X ~ N(0, 1)
        noise = torch.randn(args.samples, 1)
        w = torch.tensor([TRUE_W])                # (1, F)
        y = x @ w.T + TRUE_B + NOISE_STD * noise  # (N, 1)
        # twin: end
        init = {k: v.detach().clone() for k, v in nn.Linear(F, 1).state_dict().items()}
    args.batch_size = min(args.batch_size, args.samples)
    if args.save_init:
        st.save(args.save_init, {"x": x, "y": y, "weight": init["weight"], "bias": init["bias"],
                                 "true_weight": torch.tensor([TRUE_W]), "true_bias": torch.tensor([TRUE_B])},
                metadata={"written_by": "ch05_pytorch.py --save-init"})

    twin.section("data")
    print(f"y = X w^T + b + noise: {args.samples} samples, {F} features, noise std {NOISE_STD:g}"
          + (" (read from --load-init)" if args.load_init else ""))
    print(f"true w = [{', '.join(f'{v:g}' for v in TRUE_W)}], b = {TRUE_B:g}")
    print(f"X[:3] = {x[:3]}")
    print(f"y[:3] = {y[:3]}")
    print(f"initial weight = {init['weight']}")
    print(f"initial bias = {init['bias']}")
    if args.save_init:
        print(f"wrote X, y and the initial weights to {args.save_init}")
    m.update(samples=args.samples, features=F, batch_size=args.batch_size, epochs=args.epochs, lr=args.lr,
             true_w=TRUE_W, true_b=TRUE_B)
    return x, y, init


def show_closed_form(torch, x, y, m):
    twin.section("closed form")
    a = torch.cat([x.double(), torch.ones(len(x), 1, dtype=torch.float64)], dim=1)  # A = [X 1]
    theta = torch.linalg.lstsq(a, y.double()).solution.flatten()                 # float64
    mse = ((a @ theta - y.double().flatten()) ** 2).mean().item()
    t = theta.tolist()
    print(f"least squares min |A theta - y|, A = [X 1] ({len(x)} x {F + 1}), float64, torch.linalg.lstsq")
    print(f"closed form: w = [{', '.join(f'{v:.6f}' for v in t[:F])}], b = {t[F]:.6f}")
    print(f"MSE of the closed form: {mse:.4e} (the noise variance is {NOISE_STD ** 2:.4e})")
    m.update(closed_w=t[:F], closed_b=t[F], closed_mse=mse)
    return t, mse


def new_model(nn, init, device):
    model = nn.Linear(F, 1)
    model.load_state_dict(init)
    return model.to(device)


def show_to_device(torch, nn, x, y, init, device):
    twin.section("to device")
    model = nn.Linear(F, 1)
    model.load_state_dict(init)
    print(f"model: {model}")
    # twin: to_device
    model = model.to(device)             # the parameters move
    xd, yd = x.to(device), y.to(device)  # the data moves
    loss_fn = nn.MSELoss().to(device)    # no parameters or buffers: nothing moves
    # twin: end
    for name, p in model.named_parameters():
        print(f"{name:<7} on {p.device}, shape {tuple(p.shape)}")
    print(f"X       {x.device} -> {xd.device}, {xd.numel() * xd.element_size() / 1024:.1f} KiB")
    print(f"y       {y.device} -> {yd.device}, {yd.numel() * yd.element_size() / 1024:.1f} KiB")
    print(f"loss    {loss_fn}: {len(list(loss_fn.parameters())) + len(list(loss_fn.buffers()))} "
          f"parameters or buffers, nothing to move")
    return model, xd, yd, loss_fn


def show_gradient_check(torch, nn, init, xd, yd, loss_fn, args, device, m):
    twin.section("gradient check")
    bs = args.batch_size
    probe = new_model(nn, init, device)
    xb, yb = xd[:bs], yd[:bs]
    pred = probe(xb)
    pred.retain_grad()            # keep dL/dpred, which autograd would otherwise free
    loss = loss_fn(pred, yb)
    loss.backward()               # autograd: fills pred.grad, weight.grad, bias.grad
    with torch.no_grad():         # the same by hand
        g = 2 * (pred - yb) / pred.numel()
        gw = g.T @ xb
        gb = g.sum(0)
        w_hand = probe.weight - args.lr * gw
        b_hand = probe.bias - args.lr * gb
    torch.optim.SGD(probe.parameters(), lr=args.lr).step()
    e_pred, e_w, e_b = max_rel_diff(g, pred.grad), max_rel_diff(gw, probe.weight.grad), max_rel_diff(gb, probe.bias.grad)
    e_step = max(max_rel_diff(w_hand, probe.weight), max_rel_diff(b_hand, probe.bias))
    ok = lambda e: "OK" if e < GRAD_TOL else "FAIL"  # noqa: E731
    print(f"first batch: {bs} samples, loss {loss.item():.6f}")
    print(f"dL/dpred = 2 (pred - y) / B   vs autograd's pred.grad:  max rel diff {e_pred:.1e} {ok(e_pred)}")
    print(f"dL/dW    = G^T X              vs weight.grad:          max rel diff {e_w:.1e} {ok(e_w)}")
    print(f"dL/db    = sum of G           vs bias.grad:            max rel diff {e_b:.1e} {ok(e_b)}")
    print(f"W - lr dW, b - lr db          vs optimizer.step():     max rel diff {e_step:.1e} {ok(e_step)}")
    e_max = max(e_pred, e_w, e_b, e_step)
    m.update(grad_check_max_rel_diff=e_max, grad_check_first_loss=loss.item())
    if not e_max < GRAD_TOL:
        twin.die(f"the gradient by hand disagrees with autograd (max rel diff {e_max:.1e})")


# ---- training ------------------------------------------------------------------------------

def train(torch, model, loss_fn, batches, epochs, lr, device, print_epochs):
    """SGD over `batches()` (an iterable of (xb, yb) per epoch, already on the device)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)  # after model.to(device)
    log = {"epoch_loss": [], "epoch_ms": [], "step_loss": []}
    loss_sum = torch.zeros((), device=device)
    for e in range(epochs):
        loss_sum.zero_()
        t0 = time.perf_counter()
        steps = 0
        for xb, yb in batches():
            # twin: step
            optimizer.zero_grad(set_to_none=True)
            pred = model(xb)
            loss = loss_fn(pred, yb)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()  # stays on the device: no wait
            # twin: end
            if len(log["step_loss"]) < MAX_STEP_LOG and (e == 0 or len(log["step_loss"]) < TWIN_STEPS):
                log["step_loss"].append(loss.item())  # waits for the device
            steps += 1
        total = loss_sum.item()  # waits for the epoch's work
        ms = (time.perf_counter() - t0) * 1e3
        log["epoch_loss"].append(total / steps)
        log["epoch_ms"].append(ms)
        if print_epochs:
            print(f"epoch {e + 1}/{epochs}: loss {total / steps:.6e}, {ms:.2f} ms, {steps / (ms * 1e-3):.0f} steps/s")
    first = 1 if epochs > 1 else 0
    log["steps_per_epoch"] = steps
    log["ms_per_epoch"] = statistics.median(log["epoch_ms"][first:])  # robust to a disturbed epoch
    log["steps_per_s"] = steps / (log["ms_per_epoch"] * 1e-3)
    return log


def resident_batches(x, y, bs):
    """X[i:i+B], y[i:i+B]: views of data already on the device."""
    return lambda: ((x[i:i + bs], y[i:i + bs]) for i in range(0, len(x), bs))


def show_train(torch, model, loss_fn, xd, yd, args, device, closed_mse, m):
    twin.section("train")
    steps = (args.samples + args.batch_size - 1) // args.batch_size
    print(f"SGD, lr {args.lr:g}, batch {args.batch_size}, {args.epochs} epochs of {steps} steps, on {device}")
    log = train(torch, model, loss_fn, resident_batches(xd, yd, args.batch_size), args.epochs, args.lr, device, True)
    sl = log["step_loss"][:TWIN_STEPS]
    print(f"loss of the first {len(sl)} steps:", end="")
    for i, v in enumerate(sl):
        print(("\n  " if i % 10 == 0 else " ") + f"{v:.4g}", end="")
    print()
    m.update(epoch=list(range(1, args.epochs + 1)), loss_curve=log["epoch_loss"], epoch_ms=log["epoch_ms"],
             step_losses=sl, steps_per_epoch=log["steps_per_epoch"], ms_per_epoch=log["ms_per_epoch"],
             steps_per_s=log["steps_per_s"], closed_form_mse=[closed_mse] * args.epochs)
    n_first = min(log["steps_per_epoch"], len(log["step_loss"]))
    m.update(first_epoch_step=list(range(1, n_first + 1)), first_epoch_loss=log["step_loss"][:n_first],
             first_epoch_closed_form_mse=[closed_mse] * n_first)
    return log


def show_parameters(torch, model, loss_fn, xd, yd, theta, closed_mse, args, m):
    twin.section("parameters")
    w = model.weight.detach().cpu().double().flatten().tolist()
    b = model.bias.detach().cpu().double().item()
    print("          true        closed form   learned (SGD)   learned - closed")
    for j in range(F):
        print(f"w[{j}]  {TRUE_W[j]:10.6f}   {theta[j]:12.6f}   {w[j]:12.6f}      {w[j] - theta[j]:+.2e}")
    print(f"b     {TRUE_B:10.6f}   {theta[F]:12.6f}   {b:12.6f}      {b - theta[F]:+.2e}")
    model.eval()
    with torch.no_grad():
        mse = loss_fn(model(xd), yd).item()
    print(f"MSE on all {args.samples} samples: learned {mse:.4e}, closed form {closed_mse:.4e} "
          f"(the least possible on this data)")
    m.update(learned_w=w, learned_b=b, final_mse=mse)
    if args.save:
        import st
        st.save(args.save, model.state_dict())
        print(f"saved the state_dict (weight, bias) to {args.save}")


def speed_row(how, device, log):
    print(f"{how:<44} {str(device):<7} {log['ms_per_epoch']:10.3f} {log['steps_per_s']:10.0f} "
          f"{1e6 / log['steps_per_s']:9.2f}")


def show_speed(torch, nn, x, y, init, loss_fn, main_log, args, device, m):
    twin.section("speed")
    print(f"CPU threads: {torch.get_num_threads()} (torch.set_num_threads)")
    m["threads"] = torch.get_num_threads()
    epochs = min(args.epochs, 3)
    bs = args.batch_size
    print(f"{'how the batches arrive':<44} {'device':<7} {'ms/epoch':>10} {'steps/s':>10} {'us/step':>9}")
    speed_row("resident: X moved once, batches are views", device, main_log)
    if device.type == "cuda":
        cpu = torch.device("cpu")
        log = train(torch, new_model(nn, init, cpu), loss_fn, resident_batches(x, y, bs), epochs, args.lr, cpu, False)
        speed_row("resident: X moved once, batches are views", cpu, log)
        print(f"GPU over CPU: {main_log['steps_per_s'] / log['steps_per_s']:.2f}x")
        m["cpu_steps_per_s"] = log["steps_per_s"]
    else:
        print("(the CPU is the device of this run: no GPU to compare with)")

    from torch.utils.data import DataLoader, TensorDataset
    # twin: loader
    loader = DataLoader(TensorDataset(x, y), batch_size=bs, shuffle=False,
                        pin_memory=device.type == "cuda")

    def loader_batches():  # on CUDA the next batch is copied on a side stream, as in C
        return device_batches(torch, loader, device)
    # twin: end
    log = train(torch, new_model(nn, init, device), loss_fn, loader_batches, epochs, args.lr, device, False)
    speed_row("DataLoader: each batch gathered and copied", device, log)
    print(f"resident over DataLoader: {main_log['steps_per_s'] / log['steps_per_s']:.2f}x")
    m["loader_steps_per_s"] = log["steps_per_s"]


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch  # after argparse, so that --help works without torch
    from torch import nn

    torch.set_num_threads(args.threads or len(os.sched_getaffinity(0)))
    device, m = twin.begin(torch, args)  # the device, torch.manual_seed, "device: ...", the metrics

    x, y, init = show_data(torch, nn, args, m)
    theta, closed_mse = show_closed_form(torch, x, y, m)
    model, xd, yd, loss_fn = show_to_device(torch, nn, x, y, init, device)
    show_gradient_check(torch, nn, init, xd, yd, loss_fn, args, device, m)
    log = show_train(torch, model, loss_fn, xd, yd, args, device, closed_mse, m)
    show_parameters(torch, model, loss_fn, xd, yd, theta, closed_mse, args, m)
    show_speed(torch, nn, x, y, init, loss_fn, log, args, device, m)

    if args.metrics:
        twin.write_metrics(args.metrics, m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
