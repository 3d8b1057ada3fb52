#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 2's tests, run by ctest (tests/chapter/ch02.cmake).

    check_ch02.py report  CH02 METRICS.json          --device cpu --quick, its output and JSON
    check_ch02.py badflag CH02                       usage errors exit 2, --help 0
    check_ch02.py gpu CH02 METRICS.json HAVE_CUDA    --device cuda on a GPU machine
    check_ch02.py twin CH02 PYTHON TWIN.py WORKDIR   ch02_pytorch.py agrees with ch02

Exit 0: passed; 1: failed (the reason is printed); 77: skipped, only where the
thing under test cannot exist here.

What is checked against what (never against numbers pasted from a run):
- the round trip: the float32 values the chapter made and the float64 values
  that came back (both in --metrics) are compared here with numpy (or the
  struct module): every one must be a float32, and come back unchanged; the
  printed tensors must show the same values; 0.1 narrowed to float32 and
  back must be numpy's float32(0.1);
- the mixed-device error: on the GPU ct's own message (shorter than
  PyTorch's, which the chapter quotes beside it) for the device it ran on; on the CPU, the absent device's
  error with CUDA's reason;
- the bandwidth table: the sizes are 4 KiB x 4^k up to the limit (computed
  here), every value positive and finite, the printed table equal to the
  metrics, and the "fits in" column recomputed from /sys's cache sizes;
- the hazard: after synchronizing, every element holds its value; on the CPU
  none was ever pending; on the GPU a copy queued behind a kernel is seen
  unfinished.
"""
import functools
import glob
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaptertest  # noqa: E402
from chaptertest import (close, expect, expect_usage_error, fresh, load_metrics, positive,  # noqa: E402
                         run_cuda, run_with_twin, section_text, sections_of, skip_unless_cuda_build,
                         skip_unless_imports)

SECTIONS = ["create", "to_device", "round_trip", "cuda_cpu", "mixed_devices", "bandwidth", "overlap", "hazard"]
KIB, MIB = 1024, 1024 * 1024
run = functools.partial(chaptertest.run, timeout=240)

try:
    import numpy as np
except ImportError:  # the struct module rounds to float32 just as well
    np = None


def f32(v):
    """v rounded to the nearest float32, as a Python float."""
    if np is not None:
        return float(np.float64(np.float32(v)))
    return struct.unpack("f", struct.pack("f", v))[0]


def tensor_after(text, label):
    """(values, text) of the tensor printed on the lines after the line `label`."""
    lines = text.splitlines()
    if label not in lines:
        return None, ""
    i = lines.index(label) + 1
    block = []
    while i < len(lines):
        block.append(lines[i])
        if lines[i].endswith(")"):
            break
        i += 1
    t = "\n".join(block)
    body = t[t.find("[") : t.rfind("]") + 1]
    nums = re.findall(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?", body)
    return [float(v) for v in nums], t


def positive_series(m, key, n):
    v = m.get(key)
    expect(isinstance(v, list) and len(v) == n, f"metrics {key}={v!r}: expected a list of {n} numbers")
    for x in v:
        expect(positive(x), f"metrics {key} has {x!r}")
    return v


def positive_num(m, key):
    v = m.get(key)
    expect(positive(v), f"metrics {key}={v!r}, expected > 0")
    return v


def expected_sizes(max_mib):
    sizes, b = [], 4096
    while b <= max_mib * MIB:
        sizes.append(b)
        b *= 4
    return sizes


def size_label(b):
    return f"{b // MIB} MiB" if b >= MIB else f"{b // KIB} KiB"


def cache_sizes():
    """(L1d, L2, L3) of cpu0 from /sys, 0 where unknown: read here, not by the chapter."""
    found = {1: 0.0, 2: 0.0, 3: 0.0}
    for d in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            level = int(open(os.path.join(d, "level")).read())
            kind = open(os.path.join(d, "type")).read().strip()
            size = open(os.path.join(d, "size")).read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or level not in found:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)", size)
        if m:
            found[level] = int(m.group(1)) * {"": 1, "K": KIB, "M": MIB, "G": 1024 * MIB}[m.group(2)]
    return found[1], found[2], found[3]


def table_rows(text, ncols):
    """{size label: [numbers or strings]} of the bandwidth table."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\d+ (?:KiB|MiB))\s+(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).split()
    return out


def near(a, b):
    """A printed table cell (two decimals) against the metrics' value."""
    return close(a, b, 0.01, 0.006)


def check_round_trip(r, m):
    src, back = m.get("round_trip_src_f32"), m.get("round_trip_back_f64")
    expect(isinstance(src, list) and isinstance(back, list) and len(src) == len(back) == 6,
           f"round_trip_src_f32={src!r}, round_trip_back_f64={back!r}: expected 6 values each")
    for i, (s, b) in enumerate(zip(src, back)):
        expect(f32(s) == s, f"round_trip_src_f32[{i}]={s!r} is not a float32 value")
        expect(b == s, f"element {i}: {s!r} (float32) came back as {b!r} (float64)")
    created, _ = tensor_after(section_text(r.stdout, "create"), "x = randn(2, 3):")
    expect(created and len(created) == 6, "no (2, 3) tensor printed under 'x = randn(2, 3):'", r)
    for p, s in zip(created, src):
        expect(abs(p - s) <= 5e-5 + 1e-4 * abs(s), f"printed x shows {p}, metrics {s}", r)
    rt = section_text(r.stdout, "round_trip")
    vals, text = tensor_after(rt, 'x.to("cpu", torch.double):')
    expect(vals and len(vals) == 6 and "dtype=torch.float64" in text,
           "the round-tripped tensor is not printed as a (2, 3) float64 tensor", r)
    for p, b in zip(vals, back):
        expect(abs(p - b) <= 5e-5 + 1e-4 * abs(b), f"printed round trip shows {p}, metrics {b}", r)
    expect(re.search(r"^round trip: OK \(6 of 6 elements equal\)$", rt, re.M), "no 'round trip: OK' line", r)
    expect(m.get("round_trip_big_numel") == 65536 and m.get("round_trip_big_equal") == 65536,
           f"round trip of randn(65536): {m.get('round_trip_big_equal')!r} of {m.get('round_trip_big_numel')!r} equal")
    want = f32(0.1)
    expect(m.get("narrowing_round_trip_of_0_1") == want,
           f"0.1 -> float32 -> float64 gave {m.get('narrowing_round_trip_of_0_1')!r}, float32(0.1) is {want!r}")


def check_caught_line(r, section, m, key):
    st, msg = m.get(f"{key}_status"), m.get(f"{key}_message")
    expect(st and msg, f"metrics {key}_status/{key}_message missing")
    line = f"caught {st}: {msg}"
    expect(line in section_text(r.stdout, section).splitlines(), f"section {section} does not print {line!r}", r)
    return st, msg


def check_common(r, m, device, max_mib):
    expect(r.returncode == 0, f"exit code {r.returncode}, expected 0", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}, expected {SECTIONS}", r)
    check_round_trip(r, m)
    expect(m.get("create_get_device") == -1, "a tensor made on the CPU must report get_device() -1")
    expect(m.get("cpu_same_handle") == 1, "x.cpu() of a CPU tensor must be x itself")
    sizes = expected_sizes(max_mib)
    expect(m.get("sizes_bytes") == sizes, f"sizes_bytes={m.get('sizes_bytes')!r}, expected {sizes}")
    positive_series(m, "host_memcpy_gbs", len(sizes))
    for k in ("overlap_copy_ms", "overlap_kernel_ms", "overlap_serial_ms", "overlap_overlapped_ms",
              "overlap_kernel_iters", "hazard_kernel_iters"):
        positive_num(m, k)
    n = m.get("hazard_numel")
    expect(n == (1 << 20), f"hazard_numel={n!r}, expected 2^20 with --quick")
    for k in ("hazard_after_sync_copy_only", "hazard_after_sync_behind_kernel"):
        expect(m.get(k) == 0, f"{k}={m.get(k)!r}: after synchronizing every element must hold its value")
    for k in ("hazard_early_copy_only", "hazard_early_behind_kernel"):
        expect(isinstance(m.get(k), int) and 0 <= m[k] <= n, f"{k}={m.get(k)!r}")


def cmd_report(ch02, metrics):
    r = run([ch02, "--device", "cpu", "--quick", "--metrics", fresh(metrics)])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    m = load_metrics(metrics)
    expect(r.stdout.splitlines()[0] == "device: cpu", "the first line must be 'device: cpu'", r)
    check_common(r, m, "cpu", 4)
    expect(m.get("device") == "cpu", f"metrics device={m.get('device')!r}")
    expect(m.get("to_device_same_handle") == 1, "x.to(cpu) of a CPU tensor must return x itself")

    # The error path with a device this machine does not have.
    st, msg = check_caught_line(r, "to_device", m, "absent_device")
    expect(st in ("CT_ERR_UNAVAILABLE", "CT_ERR_DEVICE") and msg.startswith("ct_to: "),
           f"moving to an absent device: {st}: {msg}")
    st2, msg2 = check_caught_line(r, "mixed_devices", m, "mixed_error")
    expect(st2 == st, f"creating on the absent device gave {st2}, moving there {st}")
    if st == "CT_ERR_UNAVAILABLE":
        expect("CUDA unavailable: " in msg and "CUDA unavailable: " in msg2, "no CUDA reason in the messages")
        cst, _ = check_caught_line(r, "cuda_cpu", m, "cuda_call")
        expect(cst == "CT_ERR_UNAVAILABLE", f"x.cuda() without CUDA gave {cst}")
        pst, pmsg = check_caught_line(r, "bandwidth", m, "pin_memory")
        expect(pst == "CT_ERR_UNAVAILABLE" and pmsg.startswith("ct_pin_memory: "), f"pin_memory: {pst}: {pmsg}")
    else:
        expect("out of range" in msg, f"an index past the last GPU: {msg!r}")
    expect(m.get("ensure_moved") == 0 and m.get("ensure_add_device") == "cpu",
           f"ensure_same_device on two CPU tensors: moved {m.get('ensure_moved')!r}, sum on {m.get('ensure_add_device')!r}")

    # The CPU's bandwidth table: two columns of numbers, n/a, and the cache level.
    sizes = m["sizes_bytes"]
    copy = positive_series(m, "host_copy_gbs", len(sizes))
    memcpy = m["host_memcpy_gbs"]
    rows = table_rows(section_text(r.stdout, "bandwidth"), 4)
    expect(list(rows) == [size_label(b) for b in sizes], f"table rows {list(rows)}, expected the sizes {sizes}", r)
    l1, l2, l3 = cache_sizes()
    for b, mc, cp in zip(sizes, memcpy, copy):
        cells = rows[size_label(b)]
        expect(len(cells) == 4 and cells[2] == "n/a", f"row {size_label(b)}: {cells}", r)
        expect(near(float(cells[0]), mc) and near(float(cells[1]), cp),
               f"row {size_label(b)} prints {cells[:2]}, metrics {mc}, {cp}", r)
        ws = 2 * b
        want = next((name for name, size in (("L1", l1), ("L2", l2), ("L3", l3)) if size > 0 and ws <= size), "DRAM")
        expect(cells[3] == want, f"row {size_label(b)}: fits in {cells[3]}, but 2 x {b} bytes fits in {want} "
               f"(L1d {l1:.0f}, L2 {l2:.0f}, L3 {l3:.0f} bytes from /sys)", r)
    # One thread cannot overlap with itself: no saving anywhere near half.
    expect(m.get("overlap_saving_pct", 100) < 50,
           f"on the CPU the two-stream schedule claims a saving of {m.get('overlap_saving_pct')}%")
    for k in ("hazard_early_copy_only", "hazard_early_behind_kernel"):
        expect(m.get(k) == 0, f"{k}={m.get(k)!r}: a CPU copy is done before the call returns")

    # --max-mib moves the end of the table.
    r = run([ch02, "--device", "cpu", "--quick", "--max-mib", "1", "--metrics", metrics])
    expect(r.returncode == 0, f"--max-mib 1: exit code {r.returncode}", r)
    m = load_metrics(metrics)
    expect(m.get("sizes_bytes") == expected_sizes(1), f"--max-mib 1: sizes {m.get('sizes_bytes')}")
    print("PASS")


def cmd_badflag(ch02):
    for args, needles in [
        (["--bogus"], ["--bogus", "usage:"]),
        (["--max-mib", "abc"], ["--max-mib", '"abc"', "usage:"]),
        (["--max-mib", "-1"], ["--max-mib", "-1"]),
        (["--max-mib", "99999"], ["--max-mib", "99999"]),
        (["--device", "gpu"], ["--device", '"gpu"', "usage:"]),
    ]:
        r = run([ch02] + args)
        expect_usage_error(r, args, needles)
        expect("device:" not in r.stdout, f"{args}: ran anyway", r)
    r = run([ch02, "--help"])
    expect(r.returncode == 0 and r.stdout.startswith("usage: ch02") and "--max-mib" in r.stdout,
           "--help must print the usage with --max-mib and exit 0", r)
    print("PASS")


def cmd_gpu(ch02, metrics, have_cuda):
    skip_unless_cuda_build(have_cuda)
    r = run_cuda([ch02, "--device", "cuda", "--quick", "--metrics", fresh(metrics)], timeout=280)
    expect(r.returncode == 0, f"--device cuda: exit code {r.returncode}", r)
    m = load_metrics(metrics)
    first = r.stdout.splitlines()[0]
    match = re.fullmatch(r"device: (cuda:(\d+)) \((.+)\)", first)
    expect(match, f"first line {first!r}, expected 'device: cuda:N (name)'", r)
    dev, index = match.group(1), int(match.group(2))
    check_common(r, m, dev, 4)
    expect(m.get("device") == dev, f"metrics device={m.get('device')!r}")
    expect(m.get("to_device_same_handle") == 0 and m.get("to_device_get_device") == index,
           "x.to(cuda) must be a new tensor on the GPU")
    expect(m.get("cuda_get_device") == index, f"x.cuda().get_device()={m.get('cuda_get_device')!r}")

    # The mixed-device error, ct's wording, for this device.
    st, msg = check_caught_line(r, "mixed_devices", m, "mixed_error")
    want = f"ct_add: expected all tensors to be on the same device, but found {dev} and cpu"
    expect(st == "CT_ERR_DEVICE" and msg == want, f"a + b across devices: {st}: {msg!r}, expected CT_ERR_DEVICE: {want!r}")
    expect(m.get("mixed_fix_equal") == 9, "a + b.to(a.device) differs from the CPU's a + b")
    expect(m.get("ensure_moved") == 1 and m.get("ensure_add_device") == dev,
           f"ensure_same_device(a, b): moved {m.get('ensure_moved')!r}, sum on {m.get('ensure_add_device')!r}")

    sizes = m["sizes_bytes"]
    for k in ("h2d_pageable_gbs", "h2d_pinned_gbs", "d2h_pageable_gbs", "d2h_pinned_gbs"):
        positive_series(m, k, len(sizes))
    rows = table_rows(section_text(r.stdout, "bandwidth"), 5)
    expect(list(rows) == [size_label(b) for b in sizes], f"table rows {list(rows)}", r)
    for i, b in enumerate(sizes):
        cells = [float(c) for c in rows[size_label(b)]]
        for c, k in zip(cells, ("h2d_pageable_gbs", "h2d_pinned_gbs", "d2h_pageable_gbs", "d2h_pinned_gbs",
                                "host_memcpy_gbs")):
            expect(near(c, m[k][i]), f"row {size_label(b)}: {k} printed {c}, metrics {m[k][i]}", r)
    positive_num(m, "overlap_pageable_ms")
    expect(m["overlap_overlapped_ms"] < m["overlap_serial_ms"],
           f"two streams ({m['overlap_overlapped_ms']} ms) were not faster than one ({m['overlap_serial_ms']} ms)")
    expect(m["hazard_early_behind_kernel"] > 0,
           "a copy queued behind a ~5 ms kernel was already complete when read at once")
    print("PASS")


def cmd_twin(ch02, python, twin, workdir):
    skip_unless_imports(python, "torch", "numpy")
    rc, rp, mc, mp = run_with_twin("ch02", [ch02, "--device", "cpu", "--quick"],
                                   [python, twin, "--device", "cpu", "--quick"], workdir, timeout=240)
    expect(rp.stdout.splitlines()[0] == "device: cpu", "the twin's first line must be 'device: cpu'", rp)
    check_common(rp, mp, "cpu", 4)
    expect(sections_of(rp.stdout) == sections_of(rc.stdout), "the twin prints other sections than ch02", rp)
    # Same keys for the same figures, so that tools/bench can set them side by side.
    shared = ["sizes_bytes", "host_memcpy_gbs", "host_copy_gbs", "round_trip_src_f32", "round_trip_back_f64",
              "narrowing_round_trip_of_0_1", "overlap_copy_ms", "overlap_kernel_ms", "overlap_serial_ms",
              "overlap_overlapped_ms", "overlap_saving_pct", "hazard_numel", "hazard_early_copy_only",
              "hazard_after_sync_copy_only", "hazard_early_behind_kernel", "hazard_after_sync_behind_kernel",
              "ensure_moved", "ensure_add_device"]
    for k in shared:
        expect(k in mc and k in mp, f"metrics key {k!r}: in ch02 {k in mc}, in the twin {k in mp}")
    for k in ("sizes_bytes", "narrowing_round_trip_of_0_1", "hazard_numel", "ensure_moved", "ensure_add_device",
              "hazard_after_sync_copy_only", "hazard_after_sync_behind_kernel"):
        expect(mc[k] == mp[k], f"metrics {k}: C {mc[k]!r}, PyTorch {mp[k]!r}")
    positive_series(mp, "host_copy_gbs", len(mp["sizes_bytes"]))
    # Both name the same cache level for every row: the C lab region against the twin.
    tc = table_rows(section_text(rc.stdout, "bandwidth"), 4)
    tp = table_rows(section_text(rp.stdout, "bandwidth"), 4)
    expect([v[3] for v in tc.values()] == [v[3] for v in tp.values()], "the 'fits in' columns differ", rp)
    print("PASS")


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 1), "gpu": (cmd_gpu, 3),
                                       "twin": (cmd_twin, 4)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
