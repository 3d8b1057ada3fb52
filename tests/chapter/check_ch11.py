#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 11's checks (profiling). usage: check_ch11.py MODE ARGS...

  report CH11 WORK           --device cpu --quick: the sections; the exported trace read by an
                             independent reader of the Trace Event Format (trace_format.py, written
                             from the specification): it parses, its fields are there, every thread's
                             slices nest; the printed key_averages table against that reader's own
                             sums (calls and self CPU time of every row shown, the self CPU total =
                             the outermost slices' time); the hottest op is the op with the largest
                             self time in the trace; the [memory] events chain (each "Total
                             Allocated" = the previous + its "Bytes"); the memory section's books
                             balance; the timeline figure's boxes are the trace's slices
  badflag CH11 WORK          bad flags exit 2; an unwritable --trace exits 1 before any work
  twin CH11 PYTHON TWIN WORK the twin prints the same sections with torch.profiler's table, and its
                             own exported trace passes the same reader (the reader accepts what
                             PyTorch writes)
  gpu CH11 WORK HAVE_CUDA    --device cuda --quick: CUDA columns, a kernel per op on the GPU's
                             tracks inside the trace, device time summed into the table
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaptertest  # noqa: E402
import trace_format  # noqa: E402
from chaptertest import (expect, expect_cuda_ok, expect_usage_error, fail, fresh, load_metrics, run,  # noqa: E402
                         run_cuda, run_with_twin, section_lines, sections_of, skip_unless_cuda_build,
                         skip_unless_imports)

SECTIONS = ["key averages", "hottest op", "memory", "trace", "overhead"]
UNITS = {"us": 1.0, "ms": 1e3, "s": 1e6}


def parse_time(text):
    """'1.234ms' -> (1234.0 us, the half-unit of its last printed digit in us)."""
    m = re.fullmatch(r"(-?\d+\.(\d+))(us|ms|s)", text)
    if not m:
        fail(f"not a time: {text!r}")
    scale = UNITS[m.group(3)]
    return float(m.group(1)) * scale, 0.5 * 10 ** -len(m.group(2)) * scale


def table_rows(lines):
    """{name: (self CPU us, its rounding, calls)} of a key_averages table, and its self CPU total."""
    head = next((ln for ln in lines if ln.strip().startswith("Name") and "Self CPU" in ln), None)
    expect(head is not None, f"no table header in {lines[:5]}")
    cols = re.split(r"\s{2,}", head.strip())
    i_self, i_calls = cols.index("Self CPU"), cols.index("# of Calls")
    rows, total, inside = {}, None, 0
    for ln in lines:
        if ln.startswith("---"):
            inside += 1
            continue
        m = re.match(r"Self CPU time total: (\S+)", ln)
        if m:
            total = parse_time(m.group(1))
        if inside == 2 and ln.strip():
            cells = re.split(r"\s{2,}", ln.strip())
            expect(len(cells) >= len(cols), f"table row {ln!r} has {len(cells)} cells for {len(cols)} columns")
            us, half = parse_time(cells[i_self])
            rows[cells[0]] = (us, half, int(cells[i_calls]))
    expect(total is not None and rows, "the table has no rows or no 'Self CPU time total'")
    return rows, total


def cpu_pid(trace):
    pids = {e["pid"] for e in trace.events if e.get("ph") == "X" and e.get("cat") != "kernel"}
    expect(len(pids) == 1, f"the CPU slices are in {len(pids)} processes: {pids}")
    return pids.pop()


def check_table_against_trace(stdout, trace):
    pid = cpu_pid(trace)
    sums = trace_format.self_times_by_name(trace, {pid})
    rows, (total, half) = table_rows(section_lines(stdout, "key averages"))
    for name, (us, rnd, calls) in rows.items():
        expect(name in sums, f"table row {name!r} has no slice in the trace")
        n, self_us, _ = sums[name]
        expect(n == calls, f"{name}: the table counts {calls} calls, the trace has {n} slices")
        # the table rounds to its last digit; the trace's times are written to a nanosecond
        expect(abs(self_us - us) <= rnd + 0.002 * n + 1e-6,
               f"{name}: self CPU {us} us in the table, {self_us:.3f} us from the trace")
    roots = sum(s.dur for (p, _), threads in trace.threads.items() if p == pid for s in threads)
    n_slices = sum(v[0] for v in sums.values())
    expect(abs(roots - total) <= half + 0.002 * n_slices,
           f"Self CPU time total {total} us, the outermost slices add up to {roots:.3f} us")
    print(f"table: {len(rows)} rows agree with the trace; self CPU total {total:.1f} us = outermost slices")


def check_memory_chain(trace):
    mem = [e for e in trace.instants if e["name"] == "[memory]"]
    expect(mem, "the trace has no [memory] events")
    by_dev = {}
    for e in mem:
        a = e.get("args", {})
        for k in ("Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved"):
            expect(k in a, f"a [memory] event lacks args.{k}: {e}")
        expect(a["Bytes"] != 0 and a["Bytes"] % 512 == 0, f"Bytes {a['Bytes']}: not the allocator's 512-byte rounding")
        expect(a["Total Allocated"] <= a["Total Reserved"], f"allocated above reserved: {e}")
        by_dev.setdefault((a["Device Type"], a["Device Id"]), []).append(e)
    for dev, evs in by_dev.items():
        evs.sort(key=lambda e: e["ts"])
        for prev, cur in zip(evs, evs[1:]):
            want = prev["args"]["Total Allocated"] + cur["args"]["Bytes"]
            expect(cur["args"]["Total Allocated"] == want,
                   f"device {dev}: at ts {cur['ts']} Total Allocated {cur['args']['Total Allocated']}, "
                   f"the previous total plus Bytes is {want}")
    print(f"memory: {len(mem)} events, every running total consistent")


def check_timeline(metrics, trace):
    """The figure's boxes are the last ProfilerStep's slices (CPU main thread, kernels too)."""
    keys = ("timeline_start_ms", "timeline_end_ms", "timeline_level", "timeline_kind")
    lists = [metrics.get(k) for k in keys]
    expect(all(isinstance(v, list) for v in lists) and len({len(v) for v in lists}) == 1,
           f"timeline metrics missing or of different lengths: {[len(v or []) for v in lists]}")
    steps = [s for s in trace.slices if s.name.startswith("ProfilerStep#")]
    expect(steps, "no ProfilerStep slice in the trace")
    step = max(steps, key=lambda s: s.ts)
    inside = []
    stack = [step]
    while stack:
        s = stack.pop()
        inside.append(s)
        stack += s.children
    kernels = [s for s in trace.slices if s.event.get("cat") == "kernel" and step.ts <= s.ts <= step.end]
    want = sorted([((s.ts - step.ts) / 1e3, (s.end - step.ts) / 1e3) for s in inside + kernels])
    got = sorted(zip(lists[0], lists[1]))
    expect(len(got) == len(want), f"the figure has {len(got)} boxes, the trace's last step {len(want)} slices")
    for (a0, a1), (b0, b1) in zip(got, want):
        expect(abs(a0 - b0) < 1e-5 and abs(a1 - b1) < 1e-5, f"box [{a0}, {a1}] ms vs slice [{b0}, {b1}] ms")
    levels = [lv for lv, k in zip(lists[2], lists[3]) if k != 4]
    depth = {((s.ts - step.ts) / 1e3): s.depth - step.depth for s in inside}
    for (t0, _), lv, k in zip(zip(lists[0], lists[1]), lists[2], lists[3]):
        if k != 4:
            expect(abs(depth.get(t0, -99) - lv) < 1e-9 or any(abs(t - t0) < 1e-6 and d == lv for t, d in depth.items()),
                   f"box at {t0} ms has level {lv}, its slice is at depth {depth.get(t0)}")
    # the figure's labels: forward, loss, backward once each on their ranges; the hottest ops by
    # self CPU time (summed per name over the step's op slices) named on their longest box
    labels = metrics.get("timeline_label")
    expect(isinstance(labels, list) and len(labels) == len(lists[0]), "timeline_label missing or of another length")
    by_start = {round((s.ts - step.ts) / 1e3, 6): s for s in inside}
    for code, name in ((1, "forward"), (2, "loss"), (3, "backward")):
        hits = [t0 for t0, c in zip(lists[0], labels) if c == code]
        expect(len(hits) == 1 and by_start.get(round(hits[0], 6)) is not None and
               by_start[round(hits[0], 6)].name == name, f"the label {name} is on its range once: {hits}")
    self_ms = {}
    for s in inside:
        if s.event.get("cat") in ("cpu_op", "operator") or s.name.startswith("aten::"):
            self_ms[s.name] = self_ms.get(s.name, 0) + s.dur - sum(c.dur for c in s.children)
    hot = sorted(self_ms, key=lambda n: -self_ms[n])[:3]
    named = [metrics.get(f"timeline_hot{h}") for h in (1, 2, 3)]
    expect(set(n for n in named if n) <= set(self_ms) and (not hot or named[0] in sorted(self_ms, key=lambda n: -self_ms[n])[:2]),
           f"the hottest ops named {named}, the trace's {hot}")
    print(f"timeline: {len(got)} boxes = the last step's slices ({len(levels)} on the host); labels on "
          f"forward, loss, backward; hottest ops {named}")


def check_hottest(stdout, metrics, trace):
    pid = cpu_pid(trace)
    ops = {}
    for s in trace.slices:
        if s.event["pid"] == pid and s.event.get("cat") == "cpu_op":
            ops[s.name] = ops.get(s.name, 0.0) + s.self_time
    best = max(ops, key=ops.get)
    expect(metrics["hottest_op"] == best, f"hottest op {metrics['hottest_op']}, the trace's is {best} "
           f"({ops[best]:.1f} us against {ops.get(metrics['hottest_op'], 0):.1f} us)")
    lines = section_lines(stdout, "hottest op")
    expect(any(ln.startswith(f"hottest op: {best},") for ln in lines), f"no 'hottest op: {best},' line", None)
    expect("called from:" in lines, "no 'called from:' list")
    ex = metrics.get("hottest_op_example")
    expect(ex == "ct::gemm", f"on the table forward 900 us, ct::gemm 500 us, ct::add 100 us the hottest op is "
           f"{ex!r}; the largest self time among the ct:: rows is ct::gemm's")
    check_callers(lines, best, trace, pid)


def check_callers(lines, best, trace, pid):
    """The 'called from:' rows: per nearest enclosing module slice of the hottest op's slices
    in the trace, its calls and self time (ms, as printed to 3 decimals)."""
    want = {}
    for s in trace.slices:
        if s.event["pid"] != pid or s.event.get("cat") != "cpu_op" or s.name != best:
            continue
        up = s.parent
        while up is not None and up.event.get("cat") != "module":
            up = up.parent
        who = up.name if up is not None else "(no module)"
        calls, us = want.get(who, (0, 0.0))
        want[who] = (calls + 1, us + s.self_time)
    start = lines.index("called from:") + 1
    got = {}
    for ln in lines[start:]:
        m = re.match(r"^  (\S.*?)\s+(\d+) calls\s+([0-9.]+) ms$", ln)
        if not m:
            break
        got[m.group(1)] = (int(m.group(2)), float(m.group(3)))
    expect(set(got) == set(want), f"called from {sorted(got)}, the trace's modules around {best}: {sorted(want)}")
    for who, (calls, us) in want.items():
        gc, gms = got[who]
        expect(gc == calls and abs(gms - us / 1e3) <= 0.002 + 1e-3 * us / 1e3,
               f"called from {who}: {gc} calls, {gms} ms; the trace: {calls} calls, {us / 1e3:.3f} ms")


def check_report(r, metrics, trace_path):
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(r.stdout.startswith("device: cpu"), "the first line is not 'device: cpu'", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}", r)
    try:
        trace = trace_format.read(trace_path)
    except trace_format.FormatError as e:
        fail(f"{trace_path}: {e}")
    n_events = sum(1 for e in trace.events if e["ph"] != "M")
    expect(n_events == metrics["trace_events"], f"the trace holds {n_events} events, the chapter says "
           f"{metrics['trace_events']}")
    names = {s.name for s in trace.slices}
    for want in ("ProfilerStep#2", "ProfilerStep#4", "forward", "backward", "Conv2d.forward",
                 "BatchNorm2d.backward", "Optimizer.step#Adam.step", "ct::gemm", "ct::im2col"):
        expect(want in names, f"no {want!r} slice in the trace (slices: {sorted(names)[:40]})")
    expect("ProfilerStep#0" not in names and "ProfilerStep#1" not in names,
           "the wait and warmup steps were recorded")
    gemm = next(s for s in trace.slices if s.name == "ct::gemm")
    expect("Input Dims" in gemm.event.get("args", {}), "record_shapes: ct::gemm has no Input Dims")
    check_table_against_trace(r.stdout, trace)
    check_hottest(r.stdout, metrics, trace)
    check_memory_chain(trace)
    check_timeline(metrics, trace)
    mem = " ".join(section_lines(r.stdout, "memory"))
    expect("balanced" in mem and "NOT balanced" not in mem and "all match" in mem,
           "the memory section's books do not balance", r)
    expect(metrics["memory_balanced"] == 1, "metrics memory_balanced")
    for k in ("unprofiled_ms", "profiled_ms", "overhead_ratio", "events_per_step"):
        expect(chaptertest.positive(metrics.get(k)), f"metric {k} = {metrics.get(k)}")
    return trace


def cmd_report(ch11, work):
    os.makedirs(work, exist_ok=True)
    m, t = fresh(os.path.join(work, "ch11.json")), fresh(os.path.join(work, "ch11_trace.json"))
    r = run([ch11, "--device", "cpu", "--quick", "--trace", t, "--metrics", m])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    check_report(r, load_metrics(m), t)


def cmd_badflag(ch11, work):
    os.makedirs(work, exist_ok=True)
    for args, needles in ((["--batch-size", "0"], ["--batch-size"]), (["--rounds", "x"], ["--rounds", "x"]),
                          (["--trace"], ["--trace"])):
        expect_usage_error(run([ch11, "--device", "cpu", "--quick", *args]), args, needles)
    bad = "/nonexistent-ch11-dir/trace.json"
    r = run([ch11, "--device", "cpu", "--quick", "--trace", bad])
    expect(r.returncode == 1 and bad in r.stderr, f"--trace {bad}: exit {r.returncode}", r)
    expect("== key averages ==" not in r.stdout, "profiled before failing on the trace path", r)


def cmd_twin(ch11, python, twin, work):
    skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    tc, tp = fresh(os.path.join(work, "c_trace.json")), fresh(os.path.join(work, "py_trace.json"))
    rc, rp, mc, mp = run_with_twin("ch11", [ch11, "--device", "cpu", "--quick", "--trace", tc],
                                   [python, twin, "--device", "cpu", "--quick", "--trace", tp], work)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}", rp)
    table = section_lines(rp.stdout, "key averages")
    expect(any("Self CPU %" in ln and "# of Calls" in ln for ln in table), "the twin prints no table", rp)
    expect(any(ln.startswith("Self CPU time total:") for ln in table), "the twin's table has no total", rp)
    try:
        torch_trace = trace_format.read(tp)
    except trace_format.FormatError as e:
        fail(f"PyTorch's own trace fails the reader: {e}")
    names = {s.name for s in torch_trace.slices}
    for want in ("forward", "backward", "ProfilerStep#2"):
        expect(want in names, f"PyTorch's trace has no {want!r} slice")
    print(f"PyTorch's trace: {len(torch_trace.slices)} slices nest on {len(torch_trace.threads)} threads")
    for k in ("overhead_ratio", "profiled_speed"):
        expect(chaptertest.positive(mp.get(k)), f"twin metric {k} = {mp.get(k)}")
    expect(mc["hottest_op"].startswith("ct::") and mp["hottest_op"].startswith("aten::"),
           f"hottest ops {mc['hottest_op']} / {mp['hottest_op']}")


def cmd_gpu(ch11, work, have_cuda):
    skip_unless_cuda_build(have_cuda)
    os.makedirs(work, exist_ok=True)
    m, t = fresh(os.path.join(work, "ch11_gpu.json")), fresh(os.path.join(work, "ch11_gpu_trace.json"))
    r = run_cuda([ch11, "--device", "cuda", "--quick", "--trace", t, "--metrics", m])
    expect_cuda_ok(r)
    metrics = load_metrics(m)
    trace = trace_format.read(t)
    kernels = [s for s in trace.slices if s.event.get("cat") == "kernel"]
    ops = [s for s in trace.slices if s.event.get("cat") == "cpu_op" and
           str(s.event.get("args", {}).get("Device", "")).startswith("cuda")]  # not the loader's CPU copies
    expect(kernels and len(kernels) == len(ops), f"{len(kernels)} kernels for {len(ops)} ops on the GPU")
    by_id = {s.event["args"]["External id"]: s for s in ops}
    for k in kernels:
        op = by_id.get(k.event["args"].get("correlation"))
        expect(op is not None, f"kernel {k.name} correlates with no GPU op")
        expect(op.name == k.name, f"kernel {k.name} correlated with op {op.name}")
    expect(all(s.dur > 0 for s in kernels), "a kernel of zero duration")
    table = " ".join(section_lines(r.stdout, "key averages"))
    expect("Self CUDA" in table and "Self CUDA time total:" in table, "no CUDA columns on the GPU", r)
    expect(chaptertest.positive(metrics.get("self_cuda_total_ms")), "no device time summed")
    check_memory_chain(trace)


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 2),
                                       "twin": (cmd_twin, 4), "gpu": (cmd_gpu, 3)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
