#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 12's PyTorch twin: streams and events, overlap, races and sync points.

The same sections and flags as ch12. With a GPU it does everything with
torch.cuda's own pieces: Stream (priorities, wait_event, wait_stream),
Event (timing), the two-stream pipeline from pinned memory with
record_stream, the CUDA sanitizer (TORCH_CUDA_SANITIZER=1, in a child
process: it cannot be turned off once on) on the pipeline without its wait,
the caching allocator's block reuse, and torch.cuda.set_sync_debug_mode with
Python's warnings caught per call. Without a GPU torch.cuda has no streams,
events, sanitizer or sync debug mode: each section says what it would do,
and runs what PyTorch runs on the CPU (the ordering, the pipeline's
arithmetic timed on the host, its float64 reference).

    ./ch12 --device cpu --quick --metrics c.json
    /usr/bin/python3 chapters/ch12_streams_events/ch12_pytorch.py --device cpu --quick --metrics py.json

The chunks and weights are the C program's, value for value (small exact
numbers), so the sums agree: tests/chapter/check_ch12.py compares C's
chunk_sums with reference_sums here (float64).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares)

MAX_CHUNKS, MAX_LAYERS = 64, 4
SYNC_ROUNDS = 7  # timed rounds of the two item() loops, the median kept (ch12.c's)


def parse_args(argv):
    p = twin.parser("ch12_pytorch.py", "Chapter 12's twin: streams and events.")
    for name in ("chunks", "rows", "width", "layers", "reps"):
        p.add_argument(f"--{name}", type=int, default=0)
    p.add_argument("--csan-demo", action="store_true", help=argparse.SUPPRESS)  # the child of the race section
    twin.explain(p, {
        "--chunks": "pipeline chunks (0: 8; --quick: 4)",
        "--rows": "rows of each chunk (0: 8192 on a GPU, 1024 on the CPU; --quick: 128)",
        "--width": "columns of each chunk and size of the square layers (0: 2048 GPU, 256 CPU; --quick: 64)",
        "--layers": "matrix products per chunk (0: 2)",
        "--reps": "timed runs of each schedule, interleaved, the median kept (0: 7; --quick: 1)"})
    a = p.parse_args(argv)
    if not (0 <= a.chunks <= MAX_CHUNKS) or a.chunks == 1 or min(a.rows, a.width, a.layers, a.reps) < 0 \
            or a.layers > MAX_LAYERS:
        p.error(f"--chunks must be 2..{MAX_CHUNKS}, --layers 1..{MAX_LAYERS}, --rows, --width and --reps >= 1 "
                "(0: the default)")
    return a


def defaults(a, gpu):
    a.chunks = a.chunks or (4 if a.quick else 8)
    a.rows = a.rows or (128 if a.quick else 8192 if gpu else 1024)
    a.width = a.width or (64 if a.quick else 2048 if gpu else 256)
    a.layers = a.layers or 2
    a.reps = a.reps or (1 if a.quick else 7)


# ---- the workload: the C program's values, exactly ------------------------------------------------

def chunk_values(torch, i, rows, width, dtype):
    r = torch.arange(rows, dtype=torch.int64).unsqueeze(1)
    c = torch.arange(width, dtype=torch.int64).unsqueeze(0)
    k = ((i * rows + r) * 7 + 3 * c) % 17
    return (k.to(torch.float32) / 16.0 - 0.5).to(dtype)


def weight_values(torch, l, width, dtype):
    c = torch.arange(width, dtype=torch.int64).unsqueeze(1)
    j = torch.arange(width, dtype=torch.int64).unsqueeze(0)
    k = (5 * c + 11 * j + l) % 13 - 6
    return (k.to(torch.float32) / float(4 * width)).to(dtype)


def forward(torch, x, ws):
    y = x
    for w in ws:
        y = torch.relu(y @ w)
    return y.sum()


def reference_sums(torch, a):
    """The chunk sums in float64 on the CPU: the reference both programs are checked against."""
    ws = [weight_values(torch, l, a.width, torch.float64) for l in range(a.layers)]
    return [forward(torch, chunk_values(torch, i, a.rows, a.width, torch.float64), ws).item() for i in range(a.chunks)]


# ---- sections ---------------------------------------------------------------------------------------

def show_streams(torch, dev, m):
    twin.section("streams")
    if dev.type != "cuda":
        print(f"default stream of {dev}: torch.cuda has no CPU streams; the CPU runs each op when it is called")
        print("priority_range() = needs CUDA (ct's CPU streams have the one level (0, 0))")
        return
    # twin: streams
    default = torch.cuda.default_stream(dev)
    print(f"default stream of {dev}: current = {'yes' if torch.cuda.current_stream(dev) == default else 'no'}")
    least, greatest = torch.cuda.Stream.priority_range()
    print(f"priority_range() = ({least}, {greatest})")
    hi, lo = torch.cuda.Stream(dev, priority=-100), torch.cuda.Stream(dev)
    print(f"Stream(priority=-100).priority = {hi.priority}, Stream().priority = {lo.priority}")
    # twin: end
    m.update(priority_least=least, priority_greatest=greatest, priority_clamped=hi.priority)


def show_ordering(torch, dev, m):
    twin.section("ordering")
    if dev.type != "cuda":
        x = torch.empty(1 << 20)
        x.fill_(1.0)
        x.mul_(2.0)
        x.add_(3.0)
        v = x.max().item()
        print(f"one stream: x = 1; x *= 2; x += 3 -> max(x) on the CPU, in call order: {v:g}")
        print("event times along the stream: torch.cuda.Event needs CUDA")
        print("elapsed_time's errors (current PyTorch, on a GPU): \"Both events must be created with argument "
              "'enable_timing=True'.\", \"Both events must be recorded before calculating elapsed time.\"")
        m["order_result"] = v
        return
    # twin: ordering
    a, b = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    done = torch.cuda.Event()
    x = torch.empty(1 << 20, device=dev)
    a.wait_stream(torch.cuda.current_stream(dev))  # x was allocated on the default stream
    with torch.cuda.stream(a):
        ev[0].record()
        x.fill_(1.0)
        ev[1].record()
        x.mul_(2.0)
        ev[2].record()
        x.add_(3.0)
        ev[3].record()
        done.record()
    b.wait_event(done)
    with torch.cuda.stream(b):
        y = x.max()
    torch.cuda.current_stream(dev).wait_stream(b)
    v = y.item()
    # twin: end
    print(f"one stream: x = 1; x *= 2; x += 3 -> max(x) read on stream b after wait_event: {v:g}")
    ev[3].synchronize()
    t = [ev[0].elapsed_time(e) for e in ev[1:]]
    increasing = all(t[i] >= (t[i - 1] if i else 0.0) for i in range(3))
    print(f"event times along the stream never decrease: {'yes' if increasing else 'NO'}")
    plain, unrec = torch.cuda.Event(), torch.cuda.Event(enable_timing=True)
    plain.record()
    for what, other in (("a timing-less event", plain), ("an unrecorded event", unrec)):
        try:
            ev[0].elapsed_time(other)
            print(f"elapsed_time with {what}: no error (unexpected)")
        except (RuntimeError, ValueError) as e:
            print(f"elapsed_time with {what}: {str(e).splitlines()[0]}")
    back = ev[3].elapsed_time(ev[0])
    print(f"elapsed_time, end before start: {'a negative (or zero) time' if back <= 0 else '?'}")
    m.update(order_result=v, event_times_increase=int(increasing))
    x.record_stream(a), x.record_stream(b), y.record_stream(b)


def pipeline(torch, dev, hosts, ws, copy, compute, two_streams, wait=True, record=True):
    """Runs every chunk through upload and compute; returns (timeline, sums)."""
    # twin: pipeline
    n = len(hosts)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    t0, end = ev(), ev()
    marks = [[ev() for _ in range(4)] for _ in range(n)]  # copy start, copied, compute start, compute end
    copy = copy if two_streams else compute
    compute.wait_stream(torch.cuda.current_stream(dev))  # the weights were made there
    t0.record(compute)
    copy.wait_event(t0)
    sums = []
    for i in range(n):
        with torch.cuda.stream(copy):
            marks[i][0].record()
            d = hosts[i].to(dev, non_blocking=True)  # allocated for `copy`
            marks[i][1].record()
        with torch.cuda.stream(compute):
            if wait:
                compute.wait_event(marks[i][1])
            if record:
                d.record_stream(compute)
            marks[i][2].record()
            sums.append(forward(torch, d, ws))
            marks[i][3].record()
        del d
    compute.wait_stream(copy)
    end.record(compute)
    torch.cuda.current_stream(dev).wait_stream(compute)
    end.synchronize()
    # twin: end
    tl = {k: [t0.elapsed_time(mk[j]) for mk in marks]
          for j, k in enumerate(("copy_start", "copy_end", "compute_start", "compute_end"))}
    tl["total_ms"] = t0.elapsed_time(end)
    return tl, [s.item() for s in sums]


def print_timeline(title, tl, n):
    print(f"{title}: {tl['total_ms']:.3f} ms\n  chunk   copy start..end (ms)   compute start..end (ms)")
    for i in range(n):
        print(f"  {i:5d}   {tl['copy_start'][i]:8.3f}..{tl['copy_end'][i]:<8.3f}      "
              f"{tl['compute_start'][i]:8.3f}..{tl['compute_end'][i]:<8.3f}")


def overlapped_ms(tl, n):
    both = 0.0
    for i in range(n):
        for j in range(n):
            lo = max(tl["copy_start"][i], tl["compute_start"][j])
            hi = min(tl["copy_end"][i], tl["compute_end"][j])
            both += max(0.0, hi - lo)
    return both


def show_overlap(torch, dev, a, m):
    twin.section("overlap")
    gpu = dev.type == "cuda"
    print(f"{a.chunks} chunks of ({a.rows}, {a.width}) f32 ({a.rows * a.width * 4 / 2**20:.1f} MiB each), "
          f"{a.layers} layers of ({a.width}, {a.width}); "
          + ("pinned host memory" if gpu else "pageable (the CPU: no pinned memory, the 'copy' is a memcpy) host memory"))
    ref = reference_sums(torch, a)
    m.update(chunks=a.chunks, rows=a.rows, width=a.width, layers=a.layers, reference_sums=ref,
             reference_checksum=sum(ref))
    if not gpu:
        # The arithmetic runs on the CPU; streams and events need CUDA.
        ws = [weight_values(torch, l, a.width, torch.float32) for l in range(a.layers)]
        hosts = [chunk_values(torch, i, a.rows, a.width, torch.float32) for i in range(a.chunks)]
        times = []
        for _ in range(a.reps + 1):  # a warm-up run, then the timed ones
            t = time.perf_counter()
            sums = [forward(torch, h.clone(), ws).item() for h in hosts]
            times.append((time.perf_counter() - t) * 1e3)
        best = statistics.median(times[1:])
        print(f"serial (one stream): {best:.3f} ms by the host clock, the median of {a.reps} runs "
              "(torch.cuda.Event needs CUDA)")
        print("two streams: torch.cuda.Stream needs CUDA; on the CPU every op runs when it is called, so it "
              "would take as long")
        print(f"checksum {sum(sums):.6e} (float64 reference {sum(ref):.6e})")
        m.update(serial_ms=best, chunk_sums=sums, checksum=sum(sums))
        return
    ws = [weight_values(torch, l, a.width, torch.float32).to(dev) for l in range(a.layers)]
    hosts = [chunk_values(torch, i, a.rows, a.width, torch.float32).pin_memory() for i in range(a.chunks)]
    copy, compute = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    schedules = (("serial", False), ("two_stream", True))
    for _, two in schedules:
        pipeline(torch, dev, hosts, ws, copy, compute, two)  # warm-up
    runs, totals = {}, {name: [] for name, _ in schedules}
    for _ in range(a.reps):  # interleaved: a burst of other load hits both alike
        for name, two in schedules:
            runs[name] = pipeline(torch, dev, hosts, ws, copy, compute, two)  # the last run's timeline is kept
            totals[name].append(runs[name][0]["total_ms"])
    serial_ms, two_ms = statistics.median(totals["serial"]), statistics.median(totals["two_stream"])
    (serial, s_sums), (two, t_sums) = runs["serial"], runs["two_stream"]
    print_timeline("serial (one stream), the last run", serial, a.chunks)
    print_timeline("two streams, the last run", two, a.chunks)
    print(f"sums of the two schedules bit-identical: {'yes' if s_sums == t_sums else 'NO'}; "
          f"checksum {sum(s_sums):.6e}")
    copy_ms = sum(e - s for s, e in zip(serial["copy_start"], serial["copy_end"]))
    comp_ms = sum(e - s for s, e in zip(serial["compute_start"], serial["compute_end"]))
    both = overlapped_ms(two, a.chunks)
    print(f"serial (last run): copies {copy_ms:.3f} ms + compute {comp_ms:.3f} ms; two streams (last run): "
          f"copy and compute overlapped {both:.3f} ms")
    print(f"median of {a.reps} interleaved rounds: serial {serial_ms:.3f} ms, two streams {two_ms:.3f} ms")
    print(f"speed-up of two streams over one: {serial_ms / two_ms:.2f}x")
    m.update(serial_ms=serial_ms, two_stream_ms=two_ms, overlap_speedup=serial_ms / two_ms, serial_copy_ms=copy_ms,
             serial_compute_ms=comp_ms, overlapped_ms=both, sums_identical=int(s_sums == t_sums),
             chunk_sums=s_sums, checksum=sum(s_sums))
    for tag, tl in (("serial", serial), ("two_stream", two)):
        m[f"{tag}_chunk"] = list(range(a.chunks))
        for k in ("copy_start", "copy_end", "compute_start", "compute_end"):
            m[f"{tag}_{k}_ms"] = tl[k]


def csan_demo(torch, a):
    """The child process of show_race, run with TORCH_CUDA_SANITIZER=1."""
    dev = torch.device("cuda")
    ws = [weight_values(torch, l, a.width, torch.float32).to(dev) for l in range(a.layers)]
    hosts = [chunk_values(torch, i, a.rows, a.width, torch.float32).pin_memory() for i in range(2)]
    copy, compute = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    try:
        pipeline(torch, dev, hosts, ws, copy, compute, True, wait=False)
        print("without wait_event: ran (no race seen)")
    except Exception as e:  # torch.cuda._sanitizer.CUDASanitizerErrors
        print(f"without wait_event: {type(e).__name__}: {str(e).splitlines()[0]}")
    return 0


def show_race(torch, dev, a, m):
    twin.section("race")
    if dev.type != "cuda":
        print("PyTorch's CUDA sanitizer (TORCH_CUDA_SANITIZER=1) needs a GPU; ct's checker runs the same "
              "model on the CPU")
        return
    # twin: race
    env = dict(os.environ, TORCH_CUDA_SANITIZER="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--csan-demo", "--rows", str(a.rows), "--width",
           str(a.width), "--layers", str(a.layers)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    # twin: end
    out = (r.stdout.strip().splitlines() or [f"the child exited {r.returncode}: {r.stderr.strip()[-300:]}"])[-1]
    print(out)
    m["csan_caught"] = int("without wait_event: " in out and "ran (no race" not in out)


def show_record_stream(torch, dev, a, m):
    twin.section("record_stream")
    if dev.type != "cuda":
        print("Tensor.record_stream needs a CUDA tensor; on the CPU each op is done when it returns, so a block "
              "is always free to reuse")
        return
    n = a.width * 4
    copy, compute = torch.cuda.Stream(dev), torch.cuda.Stream(dev)
    wt = torch.ones(n, n, device=dev)
    busy = torch.cuda.Event()
    for with_record in (False, True):
        copy.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(copy):
            d = torch.ones(n, n, device=dev)
        first = d.data_ptr()
        compute.wait_stream(copy)
        with torch.cuda.stream(compute):
            y = d
            for _ in range(4):
                y = y @ wt
            busy.record()
        if with_record:
            d.record_stream(compute)
        done = busy.query()
        del d
        with torch.cuda.stream(copy):
            nxt = torch.empty(n, n, device=dev)
        same = nxt.data_ptr() == first
        label = "with record_stream:" if with_record else "without record_stream:"
        print(f"{label:<24} next block on copy is the same: {'yes' if same else 'no':<3} "
              f"(compute done at the free: {'yes' if done else 'no'})")
        m["reuse_with_record" if with_record else "reuse_without_record"] = int(same)
        torch.cuda.current_stream(dev).wait_stream(compute)
        torch.cuda.current_stream(dev).wait_stream(copy)
        del y, nxt
    torch.cuda.synchronize(dev)


def sync_probes(torch, dev, x, loss, side, e):
    def to_cpu():
        x.to("cpu")

    def any_nonfinite():
        (~torch.isfinite(x)).any().item()

    def event():
        e.record(side)
        torch.cuda.current_stream(dev).wait_event(e)

    def event_sync():
        e.record(side)
        e.synchronize()

    buf = torch.empty(16)
    return [
        ("loss.item()", lambda: loss.item(), 1),
        ("print(loss)", lambda: str(loss), 1),
        ("buf.copy_(x)  (pageable)", lambda: buf.copy_(x), 1),
        ("x.to('cpu')", to_cpu, 1),
        ("torch.tensor(list, device)", lambda: torch.tensor([0.0] * 16, device=dev), 1),
        ("(~isfinite(x)).any().item()", any_nonfinite, 1),
        ("x + x", lambda: x + x, 0),
        ("x.sum()", lambda: x.sum(), 0),
        ("event.record + wait_event", event, 0),
        ("stream.synchronize()", lambda: side.synchronize(), 1),
        ("event.synchronize()", event_sync, 0),
    ]


def item_loop_ms(torch, dev, steps, every):
    """One timed loop of steps steps of y = 0.5 y + 1 (two small ops), with an item() after every step
    (every) or only after the last; milliseconds."""
    y = torch.ones(1024, device=dev)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t = time.perf_counter()
    for i in range(steps):
        y.mul_(0.5).add_(1.0)
        if every or i == steps - 1:
            y[0].item()
    return (time.perf_counter() - t) * 1e3


def item_loops_ms(torch, dev, steps):
    """[once at the end, every step]: the medians of SYNC_ROUNDS interleaved rounds after a warm-up one."""
    rounds = [[item_loop_ms(torch, dev, steps, every) for every in (False, True)] for _ in range(SYNC_ROUNDS + 1)]
    return [statistics.median(r[every] for r in rounds[1:]) for every in (0, 1)]


def show_sync_points(torch, dev, a, m):
    twin.section("sync points")
    steps = a.chunks * 125
    if dev.type != "cuda":
        print("torch.cuda.set_sync_debug_mode needs CUDA, and PyTorch reports only CUDA operations; on a GPU it "
              "would warn at loss.item(), print(loss), copies to pageable memory (x.to('cpu'), buf.copy_(x)), "
              "torch.tensor(list, device), stream.synchronize()")
        times = item_loops_ms(torch, dev, steps)
        print(f"{steps} steps of two small ops, median of {SYNC_ROUNDS} rounds: item() once at the end "
              f"{times[0]:.3f} ms, item() every step {times[1]:.3f} ms")
        m.update(sync_steps=steps, nosync_loop_ms=times[0], sync_loop_ms=times[1],
                 sync_cost_us=1e3 * (times[1] - times[0]) / steps)
        return
    # twin: sync_points
    x = torch.ones(16, device=dev)
    loss = x.sum()
    side, e = torch.cuda.Stream(dev), torch.cuda.Event()
    torch.cuda.set_sync_debug_mode("warn")
    print(f"{'call':<30} {'sync point?':<12} warned in \"warn\" mode")
    reported, as_expected, probes = [], 0, sync_probes(torch, dev, x, loss, side, e)
    for call, fn, want in probes:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
        got = any("synchronizing" in str(w.message) for w in caught)
        as_expected += got == bool(want)
        if got:
            reported.append(call)
        print(f"{call:<30} {'yes' if want else 'no':<12} {'warned' if got else '-'}")
    print(f"{as_expected} of {len(probes)} calls as expected")
    torch.cuda.set_sync_debug_mode("error")
    try:
        loss.item()
        print("\"error\" mode: loss.item() -> no error (unexpected)")
    except RuntimeError as err:
        print(f"\"error\" mode: loss.item() -> RuntimeError: {str(err).splitlines()[0]}")
    torch.cuda.set_sync_debug_mode(0)
    print(f"\"default\" mode again: loss.item() = {loss.item():g}")
    # twin: end
    m.update(sync_probes=len(probes), sync_as_expected=as_expected, sync_reported=",".join(reported))
    times = item_loops_ms(torch, dev, steps)
    print(f"{steps} steps of two small ops, median of {SYNC_ROUNDS} rounds: item() once at the end "
          f"{times[0]:.3f} ms, item() every step {times[1]:.3f} ms ({1e3 * (times[1] - times[0]) / steps:.1f} us "
          "per sync)")
    m.update(sync_steps=steps, nosync_loop_ms=times[0], sync_loop_ms=times[1],
             sync_cost_us=1e3 * (times[1] - times[0]) / steps)


def main(argv):
    a = parse_args(argv)
    torch = twin.import_torch()
    torch.manual_seed(a.seed)
    dev = twin.device_of(torch, a.device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    defaults(a, dev.type == "cuda")
    if a.csan_demo:
        return csan_demo(torch, a)
    print(f"device: {dev}", flush=True)
    m = {"quick": int(a.quick), "torch": torch.__version__}
    show_streams(torch, dev, m)
    show_ordering(torch, dev, m)
    show_overlap(torch, dev, a, m)
    show_race(torch, dev, a, m)
    show_record_stream(torch, dev, a, m)
    show_sync_points(torch, dev, a, m)
    twin.write_metrics(a.metrics, m)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
