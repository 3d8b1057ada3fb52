#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 2's PyTorch twin: x.to(device), and what moving a tensor costs.

The same sections as the C program (ch02), done the way the seed tutorials
write them: x.to(device), ones_like(x, device=...), x.to("cpu", torch.double),
.cuda()/.cpu(), the try/except RuntimeError around a mixed-device add and the
ensure_same_device helper; then the bandwidth table (pageable and pinned,
both directions, torch.cuda.Event timing, warm-up, median), a copy overlapped
with compute on two torch.cuda.Streams, and the non_blocking hazard. The
figures go to --metrics under the C program's keys, so the two can be
compared side by side (tools/bench):

    ./ch02 --metrics c.json
    /usr/bin/python3 chapters/ch02_tensor_moves/ch02_pytorch.py --metrics py.json

Runs on a CPU-only machine and with a CPU-only build of PyTorch (then the
bandwidth section times host copies, as the C program does on the CPU).
Exit codes as in the C chapters: 2 for a bad flag, 1 for a run-time error.
"""
import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares)

LABEL_WIDTH = 34  # the C program's value column
SENTINEL = -1.0
KIB, MIB = 1024, 1024 * 1024


def row(key, value):
    label = key + ":"
    print(f"{label:<{LABEL_WIDTH}}{value}" if len(label) < LABEL_WIDTH else f"{label} {value}")


def max_mib(text):
    if not text.isdigit() or int(text) > 16384:
        raise argparse.ArgumentTypeError(f'expects 0..16384, got "{text}"')
    return int(text)


def parse_args(argv):
    p = twin.parser("ch02_pytorch.py", "Chapter 2 (PyTorch twin): x.to(device), and what moving a tensor costs.")
    p.add_argument("--max-mib", type=max_mib, default=0,
                   help="largest copy in the bandwidth table, MiB; 0: 256, or 4 with --quick (default: 0)")
    twin.explain(p, {})
    return p.parse_args(argv)


def caught(e, m, key):
    """The C program's "caught STATUS: message" line, for a Python exception."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(msg) > 160:  # some of torch's dispatcher messages run on for a page
        msg = msg.split(". ")[0] + "."
    print(f"caught {type(e).__name__}: {msg}")
    m[f"{key}_status"] = type(e).__name__
    m[f"{key}_message"] = msg


def size_str(n):
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def absent_device(torch):
    """A CUDA device this machine does not have."""
    return torch.device("cuda", torch.cuda.device_count() if torch.cuda.is_available() else 0)


def show_create(torch, m):
    twin.section("create")
    x = torch.randn(2, 3)
    print("x = randn(2, 3):")
    print(x)
    row("x.get_device()", x.get_device())
    row("x.is_pinned()", str(x.is_pinned()).lower())
    m["create_get_device"] = x.get_device()
    return x


def show_to_device(torch, device, x, m):
    twin.section("to_device")
    # twin: to_device
    y = torch.ones_like(x, device=device)
    print(f"y = ones_like(x, device={device}):")
    print(y)
    xd = x.to(device)
    # twin: end
    print(f"x.to({device}):")
    print(xd)
    row("x.to(device).get_device()", xd.get_device())
    row("same handle as x", "yes (already there: nothing copied)" if xd is x
        else "no (a new tensor: the bytes were copied)")
    m["to_device_get_device"] = xd.get_device()
    m["to_device_same_handle"] = int(xd is x)
    if device.type == "cpu":
        absent = absent_device(torch)
        print(f"x.to({absent}), a device this machine does not have:")
        try:
            x.to(absent)
            twin.die(f"moving to the absent device {absent} succeeded")
        except (RuntimeError, AssertionError) as e:
            caught(e, m, "absent_device")
    return xd


def show_round_trip(torch, device, x, xd, m):
    twin.section("round_trip")
    # twin: round_trip
    back = xd.to("cpu", torch.double)
    print('x.to("cpu", torch.double):')
    print(back)
    # twin: end
    row("dtype", str(back.dtype))
    row("get_device()", back.get_device())
    equal = int((back == x.double()).sum())
    print(f"round trip: {'OK' if equal == 6 else 'MISMATCH'} ({equal} of 6 elements equal)")
    m["round_trip_src_f32"] = x.double().flatten().tolist()
    m["round_trip_back_f64"] = back.flatten().tolist()

    n = 1 << 16
    big = torch.randn(n)
    big_back = big.to(device).to("cpu", torch.double)
    big_equal = int((big_back == big.double()).sum())
    row("round trip of randn(65536)", f"{big_equal} of {n} elements equal")
    m["round_trip_big_numel"] = n
    m["round_trip_big_equal"] = big_equal

    v = torch.full((1,), 0.1, dtype=torch.float64).to(device, torch.float32).to("cpu", torch.double).item()
    row("0.1 -> float32 -> float64", repr(v))
    m["narrowing_round_trip_of_0_1"] = v


def show_cuda_cpu(torch, device, x, m):
    twin.section("cuda_cpu")
    if device.type == "cuda":
        xc = x.cuda()
        print("x.cuda():")
        print(xc)
        row("x.cuda().get_device()", xc.get_device())
        xb = xc.cpu()
        print("x.cuda().cpu():")
        print(xb)
        row("x.cuda().cpu().get_device()", xb.get_device())
        m["cuda_get_device"] = xc.get_device()
    elif torch.cuda.is_available():
        print("x.cuda(): not called, --device cpu keeps this run on the CPU")
    else:
        print("x.cuda():")
        try:
            x.cuda()
            twin.die("x.cuda() succeeded without CUDA")
        except (RuntimeError, AssertionError) as e:
            caught(e, m, "cuda_call")
    row("x.cpu() is x", "yes" if x.cpu() is x else "no")
    m["cpu_same_handle"] = int(x.cpu() is x)


def ensure_same_device(*tensors):
    """The seed's helper: every tensor on the device of the first one."""
    device = tensors[0].device
    return [t.to(device) if t.device != device else t for t in tensors]


def show_mixed_devices(torch, device, m):
    twin.section("mixed_devices")
    a = torch.randn(3, 3, device=device)
    other = torch.device("cpu") if device.type == "cuda" else absent_device(torch)
    try:
        b = torch.randn(3, 3, device=other)
    except (RuntimeError, AssertionError) as e:
        print(f"b = randn(3, 3, device={other}), a device this machine does not have:")
        caught(e, m, "mixed_error")
        b = torch.randn(3, 3)
        print("so b = randn(3, 3) on the CPU, like a")
    else:
        print(f"a = randn(3, 3, device={device}); b = randn(3, 3, device={other})")
        print("a + b:")
        # twin: mixed_devices
        try:
            a + b
            twin.die("adding tensors on two devices succeeded")
        except RuntimeError as e:
            caught(e, m, "mixed_error")
        c1 = a + b.to(a.device)
        # twin: end
        row("a + b.to(a.device)", f"ok, on {c1.device}")
        s = a + torch.tensor(2.0)  # a 0-dim CPU tensor is the exception: it mixes, as a scalar
        row("a + torch.tensor(2.0) (0-dim, cpu)", f"ok, on {s.device}")
        same = int((c1.cpu() == a.cpu() + b).sum())
        row("equals a.cpu() + b", f"{'yes' if same == 9 else 'NO'} ({same} of 9 elements)")
        m["mixed_fix_equal"] = same
    a2, b2 = ensure_same_device(a, b)
    moved = int(b2 is not b)
    c2 = a2 + b2
    row("ensure_same_device(a, b)", f"moved {moved} tensor{'' if moved == 1 else 's'}")
    row("a + b after ensure_same_device", f"ok, on {c2.device}")
    m["ensure_moved"] = moved
    m["ensure_add_device"] = str(c2.device)


def cpu_caches():
    """L1d, L2, L3 sizes of cpu0 in bytes (0 when unknown), from sysfs."""
    sizes = {1: 0, 2: 0, 3: 0}
    base = "/sys/devices/system/cpu/cpu0/cache"
    for i in range(10):
        d = f"{base}/index{i}"
        try:
            level = int(open(f"{d}/level").read())
            kind = open(f"{d}/type").read().strip()
            text = open(f"{d}/size").read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        mult = {"K": KIB, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
        value = float(text.rstrip("KMG")) * mult
        if level in sizes:
            sizes[level] = value
    return sizes[1], sizes[2], sizes[3]


def fits_in(nbytes, l1, l2, l3):
    ws = 2 * nbytes
    for name, size in (("L1", l1), ("L2", l2), ("L3", l3)):
        if size > 0 and ws <= size:
            return name
    return "DRAM"


def aligned_bytes(np, n):
    """n bytes of page-aligned numpy memory (see host_memcpy_gbs in the C)."""
    buf = np.empty(n + 4096, dtype=np.uint8)
    off = (-buf.ctypes.data) % 4096
    return buf[off:off + n]


def host_gbs(copy, nbytes, warmup, reps):
    """Median GB/s of copy(); a sample repeats it until 4 MiB have moved."""
    inner = 1 if nbytes >= 4 * MIB else (4 * MIB) // nbytes
    out = []
    for r in range(-warmup, reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            copy()
        dt = time.perf_counter() - t0
        if r >= 0:
            out.append(nbytes * inner / max(dt, 1e-9) / 1e9)
    return statistics.median(out)


def pcie_link(torch, index):
    """(GT/s, width) of the GPU's PCIe link from sysfs, or None."""
    p = torch.cuda.get_device_properties(index)
    try:
        dom, bus, dev = p.pci_domain_id, p.pci_bus_id, p.pci_device_id
    except AttributeError:
        return None
    path = f"/sys/bus/pci/devices/{dom:04x}:{bus:02x}:{dev:02x}.0"
    try:
        gts = float(open(f"{path}/current_link_speed").read().split()[0])
        width = int(open(f"{path}/current_link_width").read())
    except (OSError, ValueError, IndexError):
        return None
    return (gts, width) if gts > 0 and width > 0 else None


def show_bandwidth(torch, np, device, args, m):
    twin.section("bandwidth")
    gpu = device.type == "cuda"
    limit = (args.max_mib or (4 if args.quick else 256)) * MIB
    sizes = []
    b = 4096
    while b <= limit and len(sizes) < 16:
        sizes.append(b)
        b *= 4
    l1, l2, l3 = cpu_caches()
    if gpu:
        print(f"{'size':<10} {'H2D pageable':>13} {'H2D pinned':>13} {'D2H pageable':>13} {'D2H pinned':>13} "
              f"{'host memcpy':>13}")
        print(f"{'':<10} " + " ".join(f"{'GB/s':>13}" for _ in range(5)))
    else:
        print(f"{'size':<10} {'memcpy':>13} {'copy_':>13} {'pinned':>13} {'fits in':>8}")
        print(f"{'':<10} {'GB/s':>13} {'GB/s':>13}")
    cols = {k: [] for k in ("h2d_pageable_gbs", "h2d_pinned_gbs", "d2h_pageable_gbs", "d2h_pinned_gbs",
                            "host_memcpy_gbs", "host_copy_gbs")}
    first_ms = 0.0
    for i, nbytes in enumerate(sizes):
        n = nbytes // 4
        small = nbytes <= 16 * MIB
        reps = (10 if args.quick else 20) if small else (5 if args.quick else 7)
        warmup = 3 if small else 2
        src_np, dst_np = aligned_bytes(np, nbytes), aligned_bytes(np, nbytes)
        src_np.fill(1)
        dst_np.fill(2)
        cols["host_memcpy_gbs"].append(host_gbs(lambda: np.copyto(dst_np, src_np), nbytes, 2, min(reps, 7)))
        if not gpu:
            src, dst = torch.full((n,), 1.0), torch.zeros(n)
            cols["host_copy_gbs"].append(host_gbs(lambda: dst.copy_(src), nbytes, 2, min(reps, 7)))
            print(f"{size_str(nbytes):<10} {cols['host_memcpy_gbs'][-1]:13.2f} {cols['host_copy_gbs'][-1]:13.2f} "
                  f"{'n/a':>13} {fits_in(nbytes, l1, l2, l3):>8}")
            continue
        pageable = torch.full((n,), 1.0)
        pinned = pageable.pin_memory()
        on_dev = torch.full((n,), 2.0, device=device)
        # twin: moves
        moves = {
            "h2d_pageable_gbs": lambda: pageable.to(device),
            "h2d_pinned_gbs": lambda: pinned.to(device, non_blocking=True),
            "d2h_pageable_gbs": lambda: pageable.copy_(on_dev),
            "d2h_pinned_gbs": lambda: pinned.copy_(on_dev, non_blocking=True),
        }
        # twin: end
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for key, move in moves.items():
            times = []
            for r in range(-warmup, reps):
                start.record()
                move()
                stop.record()
                stop.synchronize()
                if r >= 0:
                    times.append(start.elapsed_time(stop))
            ms = statistics.median(times)
            cols[key].append(nbytes / (ms * 1e-3) / 1e9)
            if i == 0 and key == "h2d_pinned_gbs":
                first_ms = ms
        print(f"{size_str(nbytes):<10} " + " ".join(
            f"{cols[k][-1]:13.2f}" for k in ("h2d_pageable_gbs", "h2d_pinned_gbs", "d2h_pageable_gbs",
                                              "d2h_pinned_gbs", "host_memcpy_gbs")))
        moves = pageable = pinned = on_dev = None  # free them before the next size
        torch.cuda.empty_cache()

    m["sizes_bytes"] = sizes
    m["host_memcpy_gbs"] = cols["host_memcpy_gbs"]
    last = size_str(sizes[-1])
    if gpu:
        for k in ("h2d_pageable_gbs", "h2d_pinned_gbs", "d2h_pageable_gbs", "d2h_pinned_gbs"):
            m[k] = cols[k]
        h2d = cols["h2d_pinned_gbs"][-1] / cols["h2d_pageable_gbs"][-1]
        d2h = cols["d2h_pinned_gbs"][-1] / cols["d2h_pageable_gbs"][-1]
        row("fixed cost of one copy", f"{first_ms * 1e3:.1f} us (4 KiB, pinned host to device)")
        row(f"pinned / pageable at {last}", f"{h2d:.2f}x host to device, {d2h:.2f}x device to host")
        m.update(copy_overhead_us=first_ms * 1e3, h2d_pinned_over_pageable=h2d, d2h_pinned_over_pageable=d2h)
        link = pcie_link(torch, device.index)
        if link:
            gts, width = link
            eff = 0.8 if gts <= 5.0 else 128 / 130
            gbs = gts * width * eff / 8
            row("PCIe link (from /sys)", f"{gts:.1f} GT/s x{width} = {gbs:.1f} GB/s per direction")
            row("pinned H2D / link", f"{100 * cols['h2d_pinned_gbs'][-1] / gbs:.0f}% at {last}")
            m.update(pcie_gts=gts, pcie_width=width, pcie_link_gbs=gbs)
        else:
            row("PCIe link (from /sys)", "unknown here (no /sys/bus/pci entry for this GPU)")
    else:
        m["host_copy_gbs"] = cols["host_copy_gbs"]
        row("caches (cpu0, from /sys)", f"L1d {l1 / KIB:.0f} KiB, L2 {l2 / KIB:.0f} KiB, L3 {l3 / MIB:.1f} MiB")
        row(f"memcpy 4 KiB / {last}", f"{cols['host_memcpy_gbs'][0] / cols['host_memcpy_gbs'][-1]:.1f}x")
        m.update(cache_l1d_bytes=l1, cache_l2_bytes=l2, cache_l3_bytes=l3)
        print("pinned memory, x.pin_memory():")
        if torch.cuda.is_available():
            print("not measured: --device cpu keeps this run on the CPU")
        else:
            try:
                torch.zeros(4).pin_memory()
                twin.die("pin_memory() succeeded without CUDA")
            except (RuntimeError, NotImplementedError, AssertionError) as e:
                caught(e, m, "pin_memory")


class Overlap:
    """A copy (host -> device from pinned memory; host -> host on the CPU) and a
    compute-bound kernel (a chain of matrix products), on one or two streams."""

    def __init__(self, torch, device, nbytes):
        self.torch, self.device, self.gpu = torch, device, device.type == "cuda"
        n = nbytes // 4
        self.src_pageable = torch.full((n,), 1.0)
        self.src = self.src_pageable.pin_memory() if self.gpu else self.src_pageable
        self.dst = torch.empty(n, device=device)
        k = 2048 if self.gpu else 128
        self.a = torch.randn(k, k, device=device)
        self.c = torch.empty(k, k, device=device)
        self.iters = 1
        if self.gpu:
            self.compute, self.copy = torch.cuda.Stream(), torch.cuda.Stream()
            self.start, self.stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.copied = torch.cuda.Event()
            torch.cuda.synchronize()  # the side streams do not wait for the default one

    def burn(self):
        for _ in range(self.iters):
            self.torch.mm(self.a, self.a, out=self.c)

    def run(self, schedule):
        torch = self.torch
        if not self.gpu:  # no streams on the CPU: everything runs when it is called
            t0 = time.perf_counter()
            if schedule in ("copy", "serial", "overlapped"):
                self.dst.copy_(self.src, non_blocking=True)
            if schedule in ("kernel", "serial", "overlapped"):
                self.burn()
            return (time.perf_counter() - t0) * 1e3
        self.start.record(self.compute)
        if schedule == "copy":
            with torch.cuda.stream(self.compute):
                self.dst.copy_(self.src, non_blocking=True)
        elif schedule == "kernel":
            with torch.cuda.stream(self.compute):
                self.burn()
        elif schedule == "serial":
            with torch.cuda.stream(self.compute):
                self.dst.copy_(self.src, non_blocking=True)
                self.burn()
        else:  # "overlapped", "pageable"
            src = self.src if schedule == "overlapped" else self.src_pageable
            # twin: overlap
            self.copy.wait_event(self.start)
            with torch.cuda.stream(self.copy):
                self.dst.copy_(src, non_blocking=True)
                self.copied.record(self.copy)
            with torch.cuda.stream(self.compute):
                self.burn()
            self.compute.wait_event(self.copied)
            # twin: end
        self.stop.record(self.compute)
        self.stop.synchronize()
        return self.start.elapsed_time(self.stop)

    def median_ms(self, schedule, reps):
        times = [self.run(schedule) for _ in range(reps + 1)][1:]  # one warm-up
        return statistics.median(times)


def show_overlap(torch, device, args, m):
    twin.section("overlap")
    nbytes = (16 if args.quick else 64) * MIB
    o = Overlap(torch, device, nbytes)
    reps = 3 if args.quick else 7
    copy_ms = o.median_ms("copy", reps)
    o.iters = 1
    kernel_ms = o.median_ms("kernel", 1)
    while kernel_ms < 0.25 * copy_ms and o.iters < (1 << 20):
        o.iters *= 4
        kernel_ms = o.median_ms("kernel", 1)
    o.iters = max(1, round(o.iters * copy_ms / max(kernel_ms, 1e-6)))
    kernel_ms = o.median_ms("kernel", reps)
    serial_ms = o.median_ms("serial", reps)
    overlapped_ms = o.median_ms("overlapped", reps)
    pageable_ms = o.median_ms("pageable", reps) if o.gpu else 0.0
    src = "pinned" if o.gpu else "cpu"
    row(f"copy alone ({size_str(nbytes)}, {src} to {device})", f"{copy_ms:.3f} ms")
    row(f"kernel alone (mm, {o.iters} iters)", f"{kernel_ms:.3f} ms")
    row("serial (one stream)", f"{serial_ms:.3f} ms")
    row("overlapped (two streams)", f"{overlapped_ms:.3f} ms")
    row("ideal overlap (the longer one)", f"{max(copy_ms, kernel_ms):.3f} ms")
    saving = serial_ms - overlapped_ms
    row("saving", f"{saving:.3f} ms ({100 * saving / serial_ms:.0f}% of serial)")
    if o.gpu:
        row("two streams, pageable source", f"{pageable_ms:.3f} ms")
        m["overlap_pageable_ms"] = pageable_ms
    m.update(overlap_bytes=nbytes, overlap_kernel_iters=o.iters, overlap_copy_ms=copy_ms,
             overlap_kernel_ms=kernel_ms, overlap_serial_ms=serial_ms, overlap_overlapped_ms=overlapped_ms,
             overlap_saving_ms=saving, overlap_saving_pct=100 * saving / serial_ms)
    return o, kernel_ms / o.iters


def show_hazard(torch, device, args, overlap, ms_per_iter, m):
    twin.section("hazard")
    gpu = device.type == "cuda"
    n = (1 << 20) if args.quick else (1 << 24)
    src = torch.arange(n, dtype=torch.float32, device=device)
    want = torch.arange(n, dtype=torch.float32)
    dst = torch.full((n,), SENTINEL)
    if gpu:
        dst = dst.pin_memory()
    want_ms = 5.0 if args.quick else 20.0
    overlap.iters = max(1, round(want_ms / ms_per_iter)) if ms_per_iter > 0 else 1
    print(f"src = arange({n}) on {'the GPU' if gpu else 'the CPU'}; dst = full({n}, -1){', pinned' if gpu else ''}")
    early, after = [], []
    for p in range(2):
        dst.fill_(SENTINEL)
        if p == 1:
            overlap.burn()  # on the current stream, ahead of the copy
        # twin: hazard
        dst.copy_(src, non_blocking=True)
        early.append(int((dst != want).sum()))  # read before synchronizing: the bug
        if gpu:
            torch.cuda.current_stream().synchronize()
        after.append(int((dst != want).sum()))
        # twin: end
        print("the copy alone:" if p == 0 else "the copy queued behind mm:")
        row("  read at once: not yet written", f"{early[-1]} of {n}")
        row("  after synchronize: not written", f"{after[-1]} of {n}")
    if not gpu:
        print("on the CPU the copy ran when it was issued: nothing was ever on its way")
    m.update(hazard_numel=n, hazard_early_copy_only=early[0], hazard_early_behind_kernel=early[1],
             hazard_after_sync_copy_only=after[0], hazard_after_sync_behind_kernel=after[1],
             hazard_kernel_iters=overlap.iters)


def main(argv):
    args = parse_args(argv)
    try:
        import numpy as np
        import torch
    except ImportError as e:
        twin.die(f"needs torch and numpy: {e}")
    device, m = twin.begin(torch, args)  # the device, torch.manual_seed, "device: ...", the metrics
    m["torch_version"] = torch.__version__

    x = show_create(torch, m)
    xd = show_to_device(torch, device, x, m)
    show_round_trip(torch, device, x, xd, m)
    show_cuda_cpu(torch, device, x, m)
    show_mixed_devices(torch, device, m)
    show_bandwidth(torch, np, device, args, m)
    overlap, ms_per_iter = show_overlap(torch, device, args, m)
    show_hazard(torch, device, args, overlap, ms_per_iter, m)

    for k, v in m.items():
        vals = v if isinstance(v, list) else [v]
        if any(isinstance(z, float) and not math.isfinite(z) for z in vals):
            m[k] = None
    if args.metrics:
        twin.write_metrics(args.metrics, m)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
