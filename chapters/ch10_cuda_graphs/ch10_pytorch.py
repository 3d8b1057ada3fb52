#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 10's PyTorch twin: CUDA graphs, a whole training step captured and replayed.

The same sections, flags and model as ch10. On a GPU it does what the chapter
does with torch's own tools: warm-up on a side stream, torch.cuda.graph
capture of zero_grad + forward + loss + backward + optimizer step with static
input and target, copy_ and replay; the seed's bug; the errors capture
raises; the private pool's memory; and eager vs torch.cuda.graphs replay vs
torch.compile(mode="reduce-overhead") (where the installed PyTorch has
torch.compile) over the same widths.

PyTorch has no graphs on the CPU (torch.cuda.graphs needs a CUDA device), so
on a machine without a GPU the twin runs its steps eagerly and says, section
by section, what it would capture and replay on one.

    ./ch10 --quick
    /usr/bin/python3 chapters/ch10_cuda_graphs/ch10_pytorch.py --quick

Starting from the C program's weights and data (./ch10 --save-init
init.safetensors, then --load-init here), the eager run here reaches the
parameters the C program's replays reached (./ch10 --save);
tests/chapter/check_ch10.py compares them, with --float64 here as the
reference.
"""
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)
import st  # noqa: E402  (the repository's safetensors reader/writer)

IN, OUT, NBATCH, LOG_EVERY = 10, 10, 8, 10
CPU_WIDTHS, CPU_QUICK = [16, 64, 256, 1024], [16, 128]
GPU_WIDTHS, GPU_QUICK = [16, 64, 256, 1024, 4096, 8192], [16, 256, 2048]


def parse_args(argv):
    p = twin.parser("ch10_pytorch.py", "Chapter 10's twin: CUDA graphs.", quick="20 steps, fewer widths")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--save", metavar="FILE", help="write the trained state_dict")
    p.add_argument("--load-init", metavar="FILE", help="start from ./ch10 --save-init's weights and data")
    p.add_argument("--float64", action="store_true", help="train in float64 (the tests' reference)")
    twin.explain(p, {
        "--width": "hidden width of the MLP that is trained and captured",
        "--depth": "hidden layers (1..16)",
        "--batch": "rows per batch (the seed's 32)",
        "--steps": "replayed training steps (--quick: 20)",
        "--warmup": "eager warm-up steps on the side stream before capture (1..16)",
        "--lr": "SGD learning rate",
        "--momentum": "SGD momentum"})
    a = p.parse_args(argv)
    if (a.width < 1 or a.steps < 1 or not 1 <= a.depth <= 16 or not 1 <= a.warmup <= 16 or a.batch < 2
            or a.lr <= 0 or a.momentum < 0):
        p.error("--width and --steps must be >= 1, --depth and --warmup in 1..16, --batch >= 2, --lr > 0, "
                "--momentum >= 0")
    if a.quick and a.steps == 100:
        a.steps = 20
    return a


class Ctx:
    """What every section needs: torch, the device, the options, the data, the metrics."""


def build_mlp(nn, width, depth):
    layers = []
    for i in range(depth):
        layers += [nn.Linear(IN if i == 0 else width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, OUT))


def make_data(c):
    """NBATCH batches x ~ N(0, 1) (B, 10), y = tanh(x T): from ./ch10 --save-init, or drawn here."""
    torch = c.torch
    if c.init is not None:
        x, y = c.init["data.x"], c.init["data.y"]
        b = x.shape[0] // NBATCH
        return [x[i * b:(i + 1) * b].to(c.dev) for i in range(NBATCH)], [y[i * b:(i + 1) * b].to(c.dev)
                                                                         for i in range(NBATCH)]
    teacher = torch.randn(IN, OUT, device=c.dev, dtype=c.dtype) / math.sqrt(IN)
    xs = [torch.randn(c.a.batch, IN, device=c.dev, dtype=c.dtype) for _ in range(NBATCH)]
    return xs, [torch.tanh(x @ teacher) for x in xs]


def model_on(c, width, init=None):
    m = build_mlp(c.nn, width, c.a.depth).to(c.dev, c.dtype)
    if init is not None:
        m.load_state_dict({k: v for k, v in init.items() if not k.startswith("data.")})
    return m


def make_sgd(c, m):
    return c.torch.optim.SGD(m.parameters(), lr=c.a.lr, momentum=c.a.momentum)


def sync(c):
    if c.cuda:
        c.torch.cuda.synchronize()


# twin: step
def train_step(model, opt, loss_fn, x, y):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss
# twin: end


class Graphed:
    """The model, its optimizer, the static input and target, the side stream and the graph."""

    def __init__(self, c, model):
        torch = c.torch
        self.model, self.opt = model, make_sgd(c, model)
        self.static_x = torch.empty(c.a.batch, IN, device=c.dev, dtype=c.dtype)
        self.static_y = torch.empty(c.a.batch, OUT, device=c.dev, dtype=c.dtype)
        self.static_loss = None
        self.side = torch.cuda.Stream() if c.cuda else None
        self.g = torch.cuda.CUDAGraph() if c.cuda else None


def warm_up(c, gr, n):
    torch, losses = c.torch, []
    # twin: warm_up
    if c.cuda:
        gr.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(gr.side):
            for i in range(n):
                gr.static_x.copy_(c.xs[i % NBATCH])
                gr.static_y.copy_(c.ys[i % NBATCH])
                losses.append(train_step(gr.model, gr.opt, c.loss_fn, gr.static_x, gr.static_y))
        torch.cuda.current_stream().wait_stream(gr.side)
    # twin: end
    else:  # no streams on the CPU: the same steps, in order
        for i in range(n):
            gr.static_x.copy_(c.xs[i % NBATCH])
            gr.static_y.copy_(c.ys[i % NBATCH])
            losses.append(train_step(gr.model, gr.opt, c.loss_fn, gr.static_x, gr.static_y))
    return [v.item() for v in losses]


def capture(c, gr):
    torch = c.torch
    # twin: capture
    with torch.cuda.graph(gr.g, stream=gr.side):
        gr.static_loss = train_step(gr.model, gr.opt, c.loss_fn, gr.static_x, gr.static_y)
    # twin: end


def replay_step(c, gr, i):
    # twin: replay
    gr.static_x.copy_(c.xs[i % NBATCH])
    gr.static_y.copy_(c.ys[i % NBATCH])
    gr.g.replay()
    # twin: end


NO_GRAPHS = "PyTorch has no CPU graphs (torch.cuda.graphs needs a CUDA device)"


def show_model(c, model):
    twin.section("model")
    a = c.a
    n = sum(p.numel() for p in model.parameters())
    print(f"MLP 10 -> {a.width} x {a.depth} -> 10 (ReLU), {n} parameters; batch {a.batch}; "
          f"SGD lr {a.lr:g} momentum {a.momentum:g}")
    c.metrics.update(width=a.width, depth=a.depth, batch=a.batch, parameters=n)


def show_warm_up(c, gr):
    twin.section("warm-up")
    losses = warm_up(c, gr, c.a.warmup)
    where = "on the side stream" if c.cuda else "(the CPU has no side streams in PyTorch)"
    for i, v in enumerate(losses):
        print(f"warm-up step {i + 1} {where}: loss {v:.6f}")
    c.metrics["warmup_loss"] = losses


def show_capture(c, gr):
    twin.section("capture")
    if not c.cuda:
        print(f"not captured: {NO_GRAPHS}; on a GPU, torch.cuda.graph(g, stream=side) records the step here")
        c.metrics["kernels_per_step"] = None
        return
    before = next(gr.model.parameters()).detach().clone()
    sync(c)
    r0 = c.torch.cuda.memory_reserved()
    capture(c, gr)
    sync(c)
    r1 = c.torch.cuda.memory_reserved()
    moved = float((before - next(gr.model.parameters())).abs().max())
    print("captured one training step in one graph")
    print(f"parameters after capture: {'unchanged (capture runs nothing)' if moved == 0 else 'CHANGED'}")
    print(f"memory: reserved {r0 / 1024:.0f} KiB -> {r1 / 1024:.0f} KiB (the graph's private pool)")
    c.metrics.update(capture_param_change=moved, capture_reserved_kib=(r1 - r0) / 1024)


def show_replay(c, gr, eager):
    twin.section("replay")
    a, torch = c.a, c.torch
    opt = make_sgd(c, eager)
    for i in range(a.warmup):  # the warm-up the graphed model had
        train_step(eager, opt, c.loss_fn, c.xs[i % NBATCH], c.ys[i % NBATCH])
    le, lr = [], []
    print(f"{'step':>6}  {'eager':>12}  {'replay':>12}")
    for i in range(a.steps):
        k = a.warmup + i
        le.append(train_step(eager, opt, c.loss_fn, c.xs[k % NBATCH], c.ys[k % NBATCH]).item())
        if c.cuda:
            replay_step(c, gr, k)
            lr.append(gr.static_loss.item())
        if i == 0 or (i + 1) % LOG_EVERY == 0 or i == a.steps - 1:
            print(f"{i + 1:6d}  {le[i]:12.6f}  " + (f"{lr[i]:12.6f}" if lr else f"{'–':>12}"))
    if c.cuda:
        diff = max(float((p - q).abs().max()) for p, q in zip(eager.parameters(), gr.model.parameters()))
        print(f"max |parameter difference|, eager vs replay, after {a.warmup + a.steps} steps: {diff:g}"
              f"{' (bit for bit)' if diff == 0 else ''}")
    else:
        diff = None
        print(f"replay column: – (not run), {NO_GRAPHS}; the eager column is the twin's training")
    c.metrics.update(eager_loss=le, replay_loss=lr or None, max_param_diff=diff, steps=a.steps, warmup=a.warmup)


def show_seed_bug(c, gr):
    twin.section("seed bug")
    if not c.cuda:
        print(f"not run: {NO_GRAPHS}. The seed's capture re-creates static_input with torch.randn inside "
              "`with torch.cuda.graph(g):`, so each replay overwrites what copy_ put there")
        c.metrics.update(seed_bug_input_diff=None, fixed_input_diff=None)
        return
    torch = c.torch
    bad = Graphed(c, model_on(c, c.a.width))
    warm_up(c, bad, c.a.warmup)
    with torch.cuda.graph(bad.g, stream=bad.side):
        bad.static_x = torch.randn(c.a.batch, IN, device=c.dev, dtype=c.dtype)  # the seed's line
        bad.static_loss = train_step(bad.model, bad.opt, c.loss_fn, bad.static_x, bad.static_y)
    replay_step(c, bad, 0)
    d_bad = float((bad.static_x - c.xs[0]).abs().max())
    replay_step(c, gr, 0)
    d_good = float((gr.static_x - c.xs[0]).abs().max())
    print("seed's capture, after static_input.copy_(real_input); g.replay():")
    print(f"  max |static_input - real_input| = {d_bad:.4f} (the captured randn overwrote the copy)")
    print("corrected capture (static_input made once, before the capture):")
    print(f"  max |static_input - real_input| = {d_good:g}")
    c.metrics.update(seed_bug_input_diff=d_bad, fixed_input_diff=d_good)


def show_forbidden(c, gr):
    twin.section("forbidden")
    if not c.cuda:
        print(f"not run: {NO_GRAPHS}. On a GPU: capture on the default stream, loss.item() and "
              "torch.cuda.synchronize() inside the capture raise RuntimeError")
        c.metrics.update(forbidden_caught=None)
        return
    torch, caught = c.torch, 0

    def attempt(what, body, on_default=False):
        nonlocal caught
        g = torch.cuda.CUDAGraph()
        try:
            if on_default:
                g.capture_begin()  # the current stream is the default one
                g.capture_end()
            else:
                with torch.cuda.graph(g, stream=gr.side):
                    body()
            print(f"{what}\n  NOT caught")
        except RuntimeError as e:
            caught += 1
            print(f"{what}\n  caught: {str(e).splitlines()[0]}")
        torch.cuda.synchronize()

    attempt("capture on the default stream", None, on_default=True)
    attempt("loss.item() inside the capture", lambda: (gr.static_x * 2).sum().item())
    attempt("synchronize inside the capture", torch.cuda.synchronize)
    try:
        gr.static_x.copy_(c.xs[1][: c.a.batch // 2])
        print("a batch of another size into static_input\n  NOT caught")
    except RuntimeError as e:
        print(f"a batch of another size into static_input\n  caught: {str(e).splitlines()[0]}")
    replay_step(c, gr, 1)
    print(f"after all of them: eager ops run, and the captured step replays (loss {gr.static_loss.item():.6f})")
    c.metrics["forbidden_caught"] = caught


def show_pool(c):
    twin.section("pool")
    if not c.cuda:
        print(f"not run: {NO_GRAPHS}. On a GPU the graph's private pool shows in torch.cuda.memory_reserved()")
        c.metrics["pool_kib"] = None
        return
    torch = c.torch
    gr = Graphed(c, model_on(c, c.a.width))
    warm_up(c, gr, c.a.warmup)
    sync(c)
    r0 = torch.cuda.memory_reserved()
    capture(c, gr)
    sync(c)
    r1 = torch.cuda.memory_reserved()
    print(f"reserved before capture:                  {r0 / 1024:8.0f} KiB")
    print(f"after capture (the graph's private pool): {r1 / 1024:8.0f} KiB")
    c.metrics["pool_kib"] = (r1 - r0) / 1024


def time_per_step(c, fn, n, reps):
    t = []
    for _ in range(reps):
        sync(c)
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        sync(c)
        t.append((time.perf_counter() - t0) / n)
    t.sort()
    return t[len(t) // 2] * 1e3


def compiled_ms(c, width, n, reps):
    """torch.compile(mode="reduce-overhead") of the model (its cudagraphs replay forward and backward)."""
    torch = c.torch
    gr = Graphed(c, model_on(c, width))
    cm = torch.compile(gr.model, mode="reduce-overhead")

    def step(i):
        gr.opt.zero_grad(set_to_none=True)
        loss = c.loss_fn(cm(c.xs[i % NBATCH]), c.ys[i % NBATCH])
        loss.backward()
        gr.opt.step()
    for i in range(3):  # compile and record
        step(i)
    return time_per_step(c, step, n, reps)


def show_timing(c):
    twin.section("timing")
    torch, quick = c.torch, c.a.quick
    widths = (GPU_QUICK if quick else GPU_WIDTHS) if c.cuda else (CPU_QUICK if quick else CPU_WIDTHS)
    n, reps = (4, 3) if quick else ((20, 7) if c.cuda else (10, 5))
    has_compile = c.cuda and hasattr(torch, "compile")
    compile_widths = {widths[0]} if has_compile else set()  # the launch-bound end; compiling costs minutes
    print(f"{'width':>6} {'params':>10} {'eager ms':>11} {'replay ms':>11} {'compile ms':>11}")
    e_ms, r_ms, c_ms = [], [], []
    for w in widths:
        gr = Graphed(c, model_on(c, w))
        warm_up(c, gr, c.a.warmup)

        def eager(i):
            gr.static_x.copy_(c.xs[i % NBATCH])
            gr.static_y.copy_(c.ys[i % NBATCH])
            train_step(gr.model, gr.opt, c.loss_fn, gr.static_x, gr.static_y)
        e_ms.append(time_per_step(c, eager, n, reps))
        if c.cuda:
            capture(c, gr)
            r_ms.append(time_per_step(c, lambda i: replay_step(c, gr, i), n, reps))
        else:
            r_ms.append(None)
        c_ms.append(None)
        if w in compile_widths:
            try:
                c_ms[-1] = compiled_ms(c, w, n, reps)
            except Exception as e:  # a backend the compiler cannot serve: say so, keep the rest
                print(f"torch.compile(mode=\"reduce-overhead\") failed at width {w}: {str(e).splitlines()[0]}")
        params = sum(p.numel() for p in gr.model.parameters())
        fmt = lambda v: f"{v:11.4f}" if v is not None else f"{'-':>11}"  # noqa: E731
        print(f"{w:6d} {params:10d} {e_ms[-1]:11.4f} {fmt(r_ms[-1])} {fmt(c_ms[-1])}")
    if not c.cuda:
        print(f"replay: {NO_GRAPHS}")
    if not has_compile:
        why = "this PyTorch has no torch.compile" if not hasattr(torch, "compile") else "needs a CUDA device"
        print(f"torch.compile(mode=\"reduce-overhead\"): not run ({why}); on a GPU with PyTorch 2 it captures "
              "the compiled forward and backward in CUDA graphs")
    c.metrics.update(timing_widths=widths, eager_ms=e_ms, replay_ms=r_ms if c.cuda else None, compile_ms=c_ms,
                     timing_steps=n, timing_reps=reps,
                     graph_replay="torch.cuda.graphs" if c.cuda else "unavailable: " + NO_GRAPHS,
                     speedup=[e / r for e, r in zip(e_ms, r_ms)] if c.cuda else None)


def main(argv):
    a = parse_args(argv)
    torch = twin.import_torch()
    nn = torch.nn
    torch.manual_seed(a.seed)
    dev = twin.device_of(torch, a.device)
    print(f"device: {dev}", flush=True)
    c = Ctx()
    c.torch, c.nn, c.a, c.dev, c.cuda = torch, nn, a, dev, dev.type == "cuda"
    c.dtype = torch.float64 if a.float64 else torch.float32
    c.loss_fn = nn.MSELoss()
    c.metrics = {"quick": int(a.quick), "float64": int(a.float64), "model": "MLP"}
    c.init = {k: v.to(c.dtype) for k, v in st.load_torch(a.load_init).items()} if a.load_init else None
    c.xs, c.ys = make_data(c)
    model = model_on(c, a.width, c.init)
    eager = model_on(c, a.width)
    eager.load_state_dict(model.state_dict())
    gr = Graphed(c, model)
    show_model(c, model)
    show_warm_up(c, gr)
    show_capture(c, gr)
    show_replay(c, gr, eager)
    if a.save:  # the replay-trained model on a GPU; the eager one elsewhere
        st.save(a.save, st.from_torch((gr.model if c.cuda else eager).state_dict()))
    show_seed_bug(c, gr)
    show_forbidden(c, gr)
    show_pool(c)
    show_timing(c)
    twin.write_metrics(a.metrics, c.metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
