#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 11's PyTorch twin: torch.profiler on one training step of chapter 6's CNN.

The same model (the CNN with BatchNorm), data, schedule (wait 1, warmup 1,
active 3), options (record_shapes, profile_memory) and output sections as
ch11, written the way the seed tutorial writes a profile: record_function
ranges, prof.key_averages().table(sort_by=...), prof.export_chrome_trace.
Side by side:

    ./ch11 --device cpu
    /usr/bin/python3 chapters/ch11_profiling/ch11_pytorch.py --device cpu

Runs with torch 1.13 (Debian's python3-torch) and 2.x: where 2.x renamed the
CUDA columns to "device" ones, the twin asks for whichever exists. Batches
come from a DataLoader without worker processes (the C DataLoader's workers
are threads that appear in its trace; PyTorch's would be processes the
profiler does not see). Exit codes as in the C chapters: 2 for a bad flag,
1 for a run-time error.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)
import fmnist  # noqa: E402  (Fashion-MNIST's IDX files as tensors)

MEAN, STD = 0.2860, 0.3530


def positive(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def parse_args(argv):
    p = twin.parser("ch11_pytorch.py", "Chapter 11 (PyTorch twin): profiling.", quick="batch 32, rounds of 2 steps")
    p.add_argument("--batch-size", type=positive, default=128)
    p.add_argument("--channels", type=positive, default=16)
    p.add_argument("--overhead-steps", type=positive, default=10)
    p.add_argument("--rounds", type=positive, default=3)
    p.add_argument("--data", default=os.environ.get("CT_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    p.add_argument("--trace", default="ch11_pytorch_trace.json")
    twin.explain(p, {
        "--batch-size": "training images per step (--quick: 32)",
        "--channels": "channels of the first convolution (the second has twice)",
        "--overhead-steps": "steps per round of the overhead measurement (--quick: 2)",
        "--rounds": "rounds of the overhead measurement (--quick: 2)",
        "--data": "Fashion-MNIST folder",
        "--trace": "where the Chrome trace goes"})
    a = p.parse_args(argv)
    if a.quick:
        a.batch_size = 32 if a.batch_size == 128 else a.batch_size
        a.overhead_steps = 2 if a.overhead_steps == 10 else a.overhead_steps
        a.rounds = 2 if a.rounds == 3 else a.rounds
    return a


def build_cnn(nn, c1):
    c2 = 2 * c1
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, 1, 1), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, 1, 1), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(c2 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


class Batches:
    """Batches without end, on the device."""

    def __init__(self, torch, x, y, batch, device, seed):
        g = torch.Generator().manual_seed(seed)
        ds = torch.utils.data.TensorDataset(x, y)
        self.loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, generator=g, drop_last=True)
        self.it, self.device = iter(self.loader), device

    def next(self):
        try:
            x, y = next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            x, y = next(self.it)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)


def device_column(torch):
    """"device" where this torch names the CUDA columns self_device_time_total (2.4 on; the
    old self_cuda_time_total is then a deprecated alias), else "cuda" (1.13). The attributes are
    set per instance in __init__, so ask an instance, not the class."""
    return "device" if hasattr(torch.autograd.profiler_util.FunctionEventAvg(), "self_device_time_total") else "cuda"


class Twin:
    def __init__(self, torch, args, device):
        self.torch, self.args, self.device = torch, args, device
        self.cuda = device.type == "cuda"
        nn = torch.nn
        self.model = build_cnn(nn, args.channels).to(device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self.loss_fn = nn.CrossEntropyLoss()
        x, y = fmnist.load(torch, args.data, True, MEAN, STD)
        self.data = Batches(torch, x, y, args.batch_size, device, args.seed)
        self.dev = device_column(torch)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self.activities = acts

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    # twin: step
    def train_step(self, x, y):
        record_function = self.torch.profiler.record_function
        self.opt.zero_grad(set_to_none=True)        # "Optimizer.zero_grad#Adam.zero_grad"
        with record_function("forward"):
            logits = self.model(x)
        with record_function("loss"):
            loss = self.loss_fn(logits, y)
        with record_function("backward"):
            loss.backward()
        self.opt.step()                             # "Optimizer.step#Adam.step"
    # twin: end

    def step(self):
        self.train_step(*self.data.next())

    def sort_key(self):
        return f"self_{self.dev}_time_total" if self.cuda else "self_cpu_time_total"

    # twin: profile
    def profile_steps(self):
        tp = self.torch.profiler
        with tp.profile(activities=self.activities, record_shapes=True, profile_memory=True,
                        schedule=tp.schedule(wait=1, warmup=1, active=3, repeat=1)) as prof:
            for _ in range(5):
                self.step()
                prof.step()
        return prof
    # twin: end

    def show_table(self, prof, m):
        twin.section("key averages")
        key = self.sort_key()
        print(f"sorted by {key}, top 15 rows:")
        print(prof.key_averages().table(sort_by=key, row_limit=15))
        m["rows"] = len(prof.key_averages())

    def self_time(self, row):
        if self.cuda:
            return getattr(row, f"self_{self.dev}_time_total")
        return row.self_cpu_time_total

    # twin: hottest
    def show_hottest(self, prof, m):
        twin.section("hottest op")
        rows = [r for r in prof.key_averages() if r.key.startswith("aten::")]
        hot = max(rows, key=self.self_time)
        total = sum(self.self_time(r) for r in prof.key_averages())
        kind = "CUDA" if self.cuda else "CPU"
        print(f"hottest op: {hot.key}, self {kind} time {self.self_time(hot) / 1e3:.3f} ms over {hot.count} "
              f"calls ({100.0 * self.self_time(hot) / total:.1f}% of all self {kind} time)")
        m["hottest_op"], m["hottest_share"] = hot.key, self.self_time(hot) / total
        calls = {}
        for e in prof.events():                       # who calls it: the nearest named range above
            if e.name != hot.key:
                continue
            up = e.cpu_parent
            while up is not None and up.name.startswith("aten::"):
                up = up.cpu_parent
            who = up.name if up is not None else "(no range)"
            n, t = calls.get(who, (0, 0.0))
            own = e.self_cpu_time_total if not self.cuda else getattr(e, f"self_{self.dev}_time_total", 0)
            calls[who] = (n + 1, t + own)
        print("called from:")
        for who, (n, t) in calls.items():
            print(f"  {who:22s} {n:3d} calls  {t / 1e3:8.3f} ms")
        print(f"{hot.key} by input shape:")
        by_shape = sorted((r for r in prof.key_averages(group_by_input_shape=True) if r.key == hot.key),
                          key=self.self_time, reverse=True)
        for r in by_shape:
            print(f"  {str(r.input_shapes):34s} {r.count:3d} calls  {self.self_time(r) / 1e3:8.3f} ms")
    # twin: end

    def show_memory(self, m):
        twin.section("memory")
        tp = self.torch.profiler
        x, y = self.data.next()
        self.train_step(x, y)
        before = self.torch.cuda.memory_allocated(self.device) if self.cuda else None
        with tp.profile(activities=self.activities, profile_memory=True) as prof:
            self.train_step(x, y)
        key = f"self_{self.dev}_memory_usage" if self.cuda else "self_cpu_memory_usage"
        print(f"sorted by {key}, top 8 rows:")
        print(prof.key_averages().table(sort_by=key, row_limit=8))
        if self.cuda:
            moved = self.torch.cuda.memory_allocated(self.device) - before
            print(f"torch.cuda.memory_allocated moved {moved} bytes over the step")
        else:
            print("PyTorch keeps no CPU allocator statistics to balance the memory events against")

    def show_trace(self, prof, m):
        twin.section("trace")
        prof.export_chrome_trace(self.args.trace)
        with open(self.args.trace, encoding="utf-8") as f:
            doc = json.load(f)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        n = sum(1 for e in events if e.get("ph") != "M")
        tids = {e.get("tid") for e in events if e.get("ph") == "X" and e.get("cat") != "kernel"}
        print(f"wrote {self.args.trace}: {n} events on {len(tids)} threads")
        print("open it in Perfetto (ui.perfetto.dev) or chrome://tracing")
        m["trace_events"] = n

    def time_steps(self, steps):
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.sync()
        return (time.perf_counter() - t0) / steps

    # twin: overhead
    def show_overhead(self, m):
        twin.section("overhead")
        a, tp = self.args, self.torch.profiler
        best_off = best_on = float("inf")
        events = 0
        for _ in range(a.rounds):
            best_off = min(best_off, self.time_steps(a.overhead_steps))
            with tp.profile(activities=self.activities, record_shapes=True, profile_memory=True) as prof:
                on = self.time_steps(a.overhead_steps)
            best_on = min(best_on, on)
            events = len(prof.events()) / a.overhead_steps
        ratio = best_on / best_off
        print(f"{a.rounds} rounds of {a.overhead_steps} steps each way, the fastest round of each")
        print(f"unprofiled: {1e3 * best_off:.3f} ms/step")
        print(f"profiled:   {1e3 * best_on:.3f} ms/step (CPU{' + CUDA' if self.cuda else ''}, shapes, memory)")
        print(f"overhead: x{ratio:.3f}; {events:.0f} events per step, about "
              f"{1e6 * (best_on - best_off) / events:.2f} us per event")
        m.update(unprofiled_ms=1e3 * best_off, profiled_ms=1e3 * best_on, overhead_ratio=ratio,
                 profiled_speed=best_off / best_on, events_per_step=events)
    # twin: end


def main(argv):
    args = parse_args(argv)
    torch = twin.import_torch()
    if args.metrics and not os.path.isdir(os.path.dirname(os.path.abspath(args.metrics))):
        twin.die(f"--metrics {args.metrics}: its folder does not exist")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.trace))):
        twin.die(f"--trace {args.trace}: its folder does not exist")
    want = args.device
    if want == "auto":
        want = "cuda" if torch.cuda.is_available() else "cpu"
    if want.startswith("cuda") and not torch.cuda.is_available():
        twin.die("CUDA unavailable: torch.cuda.is_available() is False")
    device = torch.device(want)
    print(f"device: {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    torch.manual_seed(args.seed)
    try:
        t = Twin(torch, args, device)
    except (OSError, ValueError) as e:
        twin.die(str(e))
    n = sum(p.numel() for p in t.model.parameters())
    print(f"model: chapter 6's CNN with BatchNorm ({n} parameters), Adam, batch {args.batch_size}")
    m = {"device": str(device), "quick": int(args.quick), "batch_size": args.batch_size,
         "torch": torch.__version__}
    t.time_steps(2)  # warm-up, unprofiled
    prof = t.profile_steps()
    t.show_table(prof, m)
    t.show_hottest(prof, m)
    t.show_memory(m)
    t.show_trace(prof, m)
    t.show_overhead(m)
    twin.write_metrics(args.metrics, m)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
