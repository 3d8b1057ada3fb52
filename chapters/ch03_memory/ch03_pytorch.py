#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 3's PyTorch twin: the caching allocator seen through torch.cuda.

Same flags and the same sections as ./ch03, the memory code written the way
the seed tutorials write it:

    ./ch03 --device cpu --quick
    /usr/bin/python3 chapters/ch03_memory/ch03_pytorch.py --device cpu --quick

On a GPU every number comes from torch.cuda (memory_allocated, memory_reserved,
max_memory_*, memory_stats, memory_summary, set_per_process_memory_fraction,
OutOfMemoryError). On the CPU PyTorch has no caching allocator and keeps no
statistics (torch.cuda.memory_allocated() answers 0), so the twin shows what
PyTorch can: the bytes of each tensor (element_size() * nelement()), the
tensors autograd saves for backward (torch.autograd.graph.saved_tensors_hooks),
and, where the C chapter caps memory, the same cap checked in Python.
Exit codes as in the C chapters: 2 for a bad flag, 1 for a run-time error.
"""
import ctypes
import gc
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares)

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
LAYERS, WIDTH = 4, 32  # the out-of-memory model, as in ch03


def parse_args(argv):
    p = twin.parser("ch03_pytorch.py",
                    "Chapter 3 (PyTorch twin): the caching allocator: statistics, cost, out of memory, warm-up.",
                    quick="a small workload, seconds on a 2-core CPU")
    twin.explain(p, {})
    return p.parse_args(argv)


def fmt_size(n):
    if n < KIB:
        return f"{n} B"
    if n < MIB:
        return f"{n / KIB:.2f} KiB"
    if n < GIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / GIB:.2f} GiB"


def nbytes(t):
    return t.element_size() * t.nelement()


def storage_bytes(tensors):
    """Bytes of the distinct storages behind `tensors` (views count once)."""
    seen = {}
    for t in tensors:
        if t is not None:
            st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()  # torch >= 2.0 / 1.x
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


class Twin:
    def __init__(self, torch, device, args, m):
        self.torch, self.device, self.args, self.m = torch, device, args, m
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    # ---- statistics ------------------------------------------------------------------
    def stats(self):
        c = self.torch.cuda
        st = c.memory_stats(self.device)
        return [c.memory_allocated(self.device), c.memory_reserved(self.device), c.max_memory_allocated(self.device),
                c.max_memory_reserved(self.device), st.get("segment.all.current", 0)]

    def table(self, prefix, steps):
        """Runs steps [(label, fn)], printing the torch.cuda numbers (GPU) or the tensors' bytes (CPU)."""
        log = {"steps": [], "rows": []}
        if self.cuda:
            print(f"{'step':<27} {'allocated':>13} {'reserved':>13} {'max_allocated':>13} {'max_reserved':>13} {'segs':>5}")
        else:
            print(f"{'step':<27} {'tensor bytes':>13}")
        for label, fn in steps:
            made = fn()
            if self.cuda:
                row = self.stats()
                print(f"{label:<27} {row[0]:>13} {row[1]:>13} {row[2]:>13} {row[3]:>13} {row[4]:>5}")
                log["rows"].append(row)
            else:
                print(f"{label:<27} {nbytes(made) if made is not None else '-':>13}")
            log["steps"].append(label)
        self.m[f"{prefix}_steps"] = ";".join(log["steps"])
        if self.cuda:
            for i, key in enumerate(["allocated", "reserved", "max_allocated", "max_reserved", "segments"]):
                self.m[f"{prefix}_{key}"] = [r[i] for r in log["rows"]]

    def show_statistics(self):
        twin.section("statistics")
        torch, dev = self.torch, self.device
        big_n = 2000 if self.args.quick else 10000
        if not self.cuda:
            print(f"torch.cuda.memory_allocated() = {torch.cuda.memory_allocated()} without CUDA: PyTorch's CPU "
                  "allocator keeps no statistics; what it can show is each tensor's element_size() * nelement()")
        else:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        v = {}

        def make(name, *shape, fn=torch.randn):
            v[name] = fn(*shape, device=dev)
            return v[name]

        def drop(*names):
            for n in names:
                del v[n]

        self.table("statistics", [
            ("start", lambda: None),
            ("x = randn(1000, 1000)", lambda: make("x", 1000, 1000)),
            ("del x", lambda: drop("x")),
            ("x = randn(1000, 1000) again", lambda: make("x", 1000, 1000)),
            ("y = randn(3, 3)", lambda: make("y", 3, 3)),
            ("del x, y", lambda: drop("x", "y")),
            ("empty_cache()", torch.cuda.empty_cache),
            ("reset_peak_memory_stats()", lambda: torch.cuda.reset_peak_memory_stats(dev) if self.cuda else None),
            (f"big = empty({big_n}, {big_n})", lambda: make("big", big_n, big_n, fn=torch.empty)),
            ("del big", lambda: drop("big")),
            ("empty_cache()", torch.cuda.empty_cache),
        ])
        x = torch.randn(1000, 1000, device=dev)
        print(f"x: 1000 x 1000 x {x.element_size()} B = {nbytes(x)} B = {nbytes(x) / MIB:.2f} MiB"
              + (f"; memory_allocated() counts {torch.cuda.memory_allocated(dev)} B" if self.cuda else ""))
        self.m["x_request_bytes"] = nbytes(x)
        self.m["big_n"] = big_n
        del x

    def show_splitting(self):
        twin.section("splitting")
        torch, dev = self.torch, self.device
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        t = {}

        def make(name, rows):
            t[name] = torch.empty(rows, 1000, device=dev)
            return t[name]

        steps = [("start", lambda: None)]
        for i in range(5):
            steps.append((f"t{i + 1} = empty(1000, 1000)", lambda n=f"t{i + 1}": make(n, 1000)))
        offsets = []

        def drop():
            offsets.extend(t[f"t{i + 1}"].data_ptr() - t["t1"].data_ptr() for i in range(5))
            for n in ("t1", "t3", "t5"):
                del t[n]

        steps += [("del t1, t3, t5", drop), ("z = empty(2000, 1000)", lambda: make("z", 2000))]
        self.table("splitting", steps)
        print("addresses after t1: " + ", ".join(f"t{i + 1} {o:+d}" for i, o in enumerate(offsets) if i)
              + ("" if self.cuda else " (CPU tensors come straight from malloc: no segments)"))
        self.m["splitting_offsets"] = offsets
        twin.section("summary")
        if self.cuda:
            print(torch.cuda.memory_summary(dev))
        else:
            print("torch.cuda.memory_summary() needs CUDA (without it there are no statistics to summarize)")
        t.clear()
        torch.cuda.empty_cache()

    # ---- raw vs cached -----------------------------------------------------------------
    def show_raw_vs_cached(self):
        twin.section("raw_vs_cached")
        torch, dev = self.torch, self.device
        sizes = [4 * KIB, MIB, 16 * MIB] if self.args.quick else [4 * KIB, 64 * KIB, MIB, 16 * MIB, 64 * MIB, 256 * MIB]
        page = os.sysconf("SC_PAGE_SIZE")

        def median(f, reps):
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                f()
                ts.append((time.perf_counter() - t0) * 1e6)
            ts.sort()
            return ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])

        if self.cuda:
            print("raw = torch.empty + del + torch.cuda.empty_cache() (each call cudaMalloc + cudaFree); cached = torch.empty + del")
        else:
            print("raw = torch.empty + del (PyTorch's CPU allocator: malloc/free); touch = x[::page].fill_(1);\n"
                  "cached = touch of a buffer allocated once (what a caching allocator would hand back)")
        print(f"{'size':>10} {'raw us':>14} {'-' if self.cuda else 'raw+touch us':>14} {'cached us':>14} {'speedup':>10}")
        raw, raw_touch, cached = [], [], []
        for n in sizes:
            reps = 200 if n <= 64 * KIB else 50 if n <= MIB else 10 if n <= 16 * MIB else 5
            if self.args.quick:
                reps = max(reps // 4, 3)
            if self.cuda:
                def raw_call():
                    x = torch.empty(n, dtype=torch.uint8, device=dev)
                    del x
                    torch.cuda.empty_cache()

                def cached_call():
                    x = torch.empty(n, dtype=torch.uint8, device=dev)
                    del x
                torch.cuda.synchronize(dev)
                cached_call()
                r, rt, c = median(raw_call, reps), None, median(cached_call, reps)
            else:
                def raw_call(touch):
                    x = torch.empty(n, dtype=torch.uint8)
                    if touch:
                        x[::page].fill_(1)
                    del x
                buf = torch.empty(n, dtype=torch.uint8)
                buf[::page].fill_(1)
                r, rt = median(lambda: raw_call(False), reps), median(lambda: raw_call(True), reps)
                c = median(lambda: buf[::page].fill_(1), reps)
            base = r if self.cuda else rt
            raw.append(r)
            raw_touch.append(rt)
            cached.append(c)
            label = f"{n // GIB} GiB" if n >= GIB else f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"
            print(f"{label:>10} {r:>14.2f} {'-' if rt is None else f'{rt:.2f}':>14} {c:>14.2f} {base / c:>9.1f}x")
        self.m.update(raw_kind="cudaMalloc+cudaFree" if self.cuda else "malloc+free", raw_sizes_bytes=sizes,
                      raw_us=raw, cached_us=cached,
                      cached_speedup=[(r if self.cuda else rt) / c for r, rt, c in zip(raw, raw_touch, cached)])
        if not self.cuda:
            self.m["raw_touch_us"] = raw_touch

    # ---- out of memory -------------------------------------------------------------------
    def setup_oom(self):
        torch, dev = self.torch, self.device
        self.batch = 163840 if self.args.quick else 1048576
        self.act = self.batch * WIDTH * 4
        g = torch.Generator(device=dev).manual_seed(self.args.seed)
        self.weights = [(torch.randn(WIDTH, WIDTH, device=dev, generator=g) / WIDTH ** 0.5).requires_grad_()
                        for _ in range(LAYERS)]
        if self.cuda:
            # The first matmul makes cuBLAS's workspace, which PyTorch takes from the caching
            # allocator: make it now, so that the cap below counts it.
            with torch.no_grad():
                self.weights[0] @ self.weights[0]
            torch.cuda.synchronize(dev)
            torch.cuda.empty_cache()
            total = torch.cuda.mem_get_info(dev)[1]
            weights_seg = torch.cuda.memory_reserved(dev)
        else:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            weights_seg = 2 * MIB  # what the C chapter's weights segment takes
        self.cap = weights_seg + 3 * self.act + self.act // 2 + MIB
        self.fraction = self.cap / total
        self.total = total
        self.X = torch.rand(self.batch, WIDTH, device=dev, generator=g)
        self.kept = None
        self.oom_errors = (torch.cuda.OutOfMemoryError, CapExceeded)

    def charge(self, held, new):
        """CPU only: the C chapter's cap, checked in Python (PyTorch has no cap on the CPU)."""
        if not self.cuda:
            live = storage_bytes(held + [self.X, self.kept]) + sum(nbytes(w) for w in self.weights)
            if live + new > self.cap:
                raise CapExceeded(
                    f"CPU out of memory (the chapter's cap, checked in Python). Tried to allocate {fmt_size(new)}. "
                    f"{fmt_size(self.cap)} allowed; Of the allocated memory {fmt_size(live)} is held by live tensors.")

    def forward(self, x, keep):
        """relu_(h @ W) per layer. keep=True: autograd saves the activations (training);
        keep=False: torch.no_grad(), each activation dropped once the next exists.
        Returns (output, peak bytes of the tensors held), the peak measured on the tensors themselves."""
        torch, held, saved = self.torch, [x], []
        peak = storage_bytes(held)

        def pack(t):
            saved.append(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.set_grad_enabled(keep):
            h = x
            for w in self.weights:
                self.charge(saved + [h], h.shape[0] * WIDTH * 4)
                z = h @ w  # h and z both alive here
                acts = [t for t in saved if not any(t is p for p in self.weights)]
                peak = max(peak, storage_bytes([x, h, z] + acts))
                h = torch.relu_(z)  # in place, like nn.ReLU(inplace=True)
                del z
        return h, peak, saved

    def show_oom(self):
        twin.section("oom")
        torch, dev = self.torch, self.device
        self.setup_oom()
        print(f"model: {LAYERS} layers relu(h @ W), W ({WIDTH}, {WIDTH}); batch {self.batch}: each activation "
              f"({self.batch}, {WIDTH}) float32 = {self.act / MIB:.2f} MiB")
        print(f"training keeps X and {LAYERS} activations: {(LAYERS + 1) * self.act / MIB:.2f} MiB "
              f"({LAYERS * self.act / MIB:.2f} MiB of activations)")
        if self.cuda:
            torch.cuda.set_per_process_memory_fraction(self.fraction, dev)
            print(f"cap: {self.cap / MIB:.2f} MiB = fraction {self.fraction:.6f} of {self.total / GIB:.2f} GiB "
                  "(torch.cuda.set_per_process_memory_fraction)")
        else:
            print("torch.cuda.set_per_process_memory_fraction needs CUDA: PyTorch cannot cap CPU memory, so the "
                  f"C chapter's cap of {self.cap / MIB:.2f} MiB is checked in Python here")
        raised, msg = 0, ""
        # twin: oom
        try:
            out, _, saved = self.forward(self.X, keep=True)
            del out, saved
        except self.oom_errors as e:  # torch.cuda.OutOfMemoryError on a GPU
            raised, msg = 1, str(e).strip()
            print(f"training forward at batch {self.batch}: out of memory, caught:\n  {msg.splitlines()[0]}")
        # twin: end
        self.m.update(oom_layers=LAYERS, oom_width=WIDTH, oom_batch=self.batch, oom_act_bytes=self.act,
                      oom_cap_bytes=self.cap, oom_fraction=self.fraction, oom_raised=raised, oom_message=msg)

    def try_batch(self, batch):
        torch = self.torch
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        try:
            out, peak, saved = self.forward(self.X[:batch], keep=True)
            if self.cuda:
                peak = torch.cuda.max_memory_allocated(self.device)
            del out, saved
            print(f"batch {batch:7d}: ok, peak {'allocated' if self.cuda else 'held'} {peak / MIB:.2f} MiB")
            return True, peak
        except self.oom_errors as e:
            print(f"batch {batch:7d}: out of memory ({type(e).__name__})")
            return False, 0

    def show_halve_batch(self):
        twin.section("halve_batch")
        batch, tried = self.batch, []
        # twin: halve_batch
        while batch >= 1:  # a smaller batch, as the seeds advise, halved until it fits
            tried.append(batch)
            ok, peak = self.try_batch(batch)
            if ok:
                break
            gc.collect()
            self.torch.cuda.empty_cache()
            batch //= 2
        # twin: end
        self.fitted = batch
        print(f"fitted batch {batch} (of {self.batch})")
        self.m.update(halve_tried=tried, halve_fitted=batch, halve_peak_allocated=peak)

    def show_chunks(self):
        twin.section("chunks")
        total, n = 0.0, (self.batch + self.fitted - 1) // self.fitted
        for i in range(0, self.batch, self.fitted):  # for i in range(0, len(data), batch_size)
            out, _, saved = self.forward(self.X[i:i + self.fitted], keep=True)
            s = out.sum().item()
            del out, saved
            total += s
            print(f"chunk {i // self.fitted}: rows [{i}, {min(i + self.fitted, self.batch)}), output sum {s:.6g}")
        print(f"{self.batch} rows in {n} chunks of {self.fitted}: output sum {total:.6g}")
        self.chunk_sum = total
        self.m.update(chunks_n=n, chunks_rows=self.fitted, chunks_output_sum=total)

    def show_no_activations(self):
        twin.section("no_activations")
        torch, b = self.torch, self.fitted
        peaks = {}
        for keep in (True, False):
            if self.cuda:
                torch.cuda.reset_peak_memory_stats(self.device)
            out, peak, saved = self.forward(self.X[:b], keep=keep)
            if self.cuda:
                peak = torch.cuda.max_memory_allocated(self.device)
            peaks[keep] = peak
            del out, saved
        what = "peak allocated" if self.cuda else "peak bytes held (X, activations, saved tensors)"
        print(f"batch {b}, keeping every activation (training): {what} {peaks[True] / MIB:.2f} MiB")
        print(f"batch {b}, with torch.no_grad():               {what} {peaks[False] / MIB:.2f} MiB")
        # twin: no_grad
        with torch.no_grad():
            out, _, _ = self.forward(self.X, keep=False)
        # twin: end
        s = out.sum().item()
        print(f"batch {self.batch}, with torch.no_grad(): ok, output sum {s:.6g} (chunks: {self.chunk_sum:.6g})")
        self.kept = out  # kept alive on purpose, as in ch03
        self.m.update(noact_batch=b, noact_peak_keep=peaks[True], noact_peak_nokeep=peaks[False],
                      noact_full_output_sum=s)

    def show_free_and_empty_cache(self):
        twin.section("free_and_empty_cache")
        torch = self.torch
        print(f"kept: the whole-batch output, still referenced: {nbytes(self.kept) / MIB:.2f} MiB")
        ok1, _ = self.try_batch(self.fitted)
        torch.cuda.empty_cache()  # a no-op without CUDA
        print("empty_cache() alone:")
        ok2, _ = self.try_batch(self.fitted)
        self.kept = None  # del kept
        gc.collect()
        torch.cuda.empty_cache()
        print("del kept; gc.collect(); empty_cache():")
        ok3, peak = self.try_batch(self.fitted)
        self.m.update(fec_first_oom=int(not ok1), fec_empty_cache_only_oom=int(not ok2), fec_after_free_ok=int(ok3))

    def show_zero_grad(self):
        twin.section("zero_grad")
        torch, dev = self.torch, self.device
        if self.cuda:
            torch.cuda.set_per_process_memory_fraction(1.0, dev)
        params = [torch.randn(512, 512, device=dev).requires_grad_() for _ in range(LAYERS)]
        x = torch.rand(64, 512, device=dev)
        opt = torch.optim.SGD(params, lr=0.0)
        grads = sum(nbytes(p) for p in params)
        print(f"model: {LAYERS} layers of (512, 512), batch 64; the gradients hold {grads / MIB:.2f} MiB")

        def step():
            h = x
            for p in params:
                h = torch.relu(h @ p)
            h.sum().backward()

        after = {}
        for set_to_none in (False, True):
            # twin: zero_grad
            step()
            opt.zero_grad(set_to_none=set_to_none)
            # twin: end
            held = storage_bytes(params + [x] + [p.grad for p in params])
            after[set_to_none] = torch.cuda.memory_allocated(dev) if self.cuda else held
            g = [p.grad for p in params]
            state = "None" if g[0] is None else f"zeros, {sum(nbytes(t) for t in g) / MIB:.2f} MiB"
            print(f"zero_grad(set_to_none={str(set_to_none):<5}): p.grad is {state}; "
                  f"{'allocated' if self.cuda else 'bytes held by params, grads, x'} {after[set_to_none] / MIB:.2f} MiB")
            opt.zero_grad(set_to_none=True)
        print(f"set_to_none=True frees {after[False] - after[True]} B ({(after[False] - after[True]) / MIB:.2f} MiB)")
        self.m.update(zg_grads_bytes=grads, zg_allocated_zeros=after[False], zg_allocated_none=after[True])

    def show_warmup(self):
        twin.section("warmup")
        torch, dev, b = self.torch, self.device, self.fitted
        steps = 3 if self.args.quick else 5
        xb = self.X[:b]

        def timed():
            t0 = time.perf_counter()
            out, _, saved = self.forward(xb, keep=True)
            del out, saved
            self.sync()
            return (time.perf_counter() - t0) * 1e3

        torch.cuda.empty_cache()
        cold = [timed() for _ in range(steps)]
        torch.cuda.empty_cache()
        t0 = time.perf_counter()
        # twin: warmup
        pre = torch.empty(LAYERS * b * WIDTH, device=dev).zero_()  # warm-up: one block for a whole step
        del pre
        # twin: end
        self.sync()
        warm_up = (time.perf_counter() - t0) * 1e3
        warm = [timed() for _ in range(steps)]
        if not self.cuda:
            print("PyTorch's CPU allocator has no cache: the warm-up block goes back to malloc, so it cannot help")
        print(f"{'step':>6} {'no warm-up ms':>18} {'warm-up ms':>18}")
        for i in range(steps):
            print(f"{i + 1:>6} {cold[i]:>18.2f} {warm[i]:>18.2f}")
        print(f"warm-up itself: {warm_up:.2f} ms; first step {cold[0]:.2f} ms without, {warm[0]:.2f} ms with")
        self.m.update(warmup_batch=b, warmup_cold_ms=cold, warmup_warm_ms=warm, warmup_ms=warm_up)


class CapExceeded(RuntimeError):
    """The C chapter's memory cap, checked in Python where PyTorch has none (the CPU)."""


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:  # as ch03 does: blocks >= 128 KiB always come from mmap (no dynamic threshold)
        ctypes.CDLL("libc.so.6").mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    except OSError:
        pass
    import torch  # after argparse, so that --help works without torch

    device, m = twin.begin(torch, args)  # the device, torch.manual_seed, "device: ...", the metrics

    t = Twin(torch, device, args, m)
    t.show_statistics()
    t.show_splitting()
    t.show_raw_vs_cached()
    t.show_oom()
    t.show_halve_batch()
    t.show_chunks()
    t.show_no_activations()
    t.show_free_and_empty_cache()
    t.show_zero_grad()
    t.show_warmup()

    twin.write_metrics(args.metrics, t.m)  # atomically, as ct_metrics_close does
    return 0


if __name__ == "__main__":
    sys.exit(main())
