#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 12 (streams and events) against independent references.

    check_ch12.py report     CH12 WORK              --device cpu --quick: the ordering (5, not 8),
                             the CPU's priority range (0, 0), elapsed_time's errors in PyTorch's
                             words, the pipeline's chunk sums against a float64 recomputation
                             here, both schedules bit-identical, the event timeline obeying stream
                             order (each stream's work in issue order, each chunk computed after
                             its copy), the race caught and silenced, one free report per chunk
                             without record_stream, the sync points of the list, error mode and
                             the runtime usable after it
    check_ch12.py race       CH12 WORK              the whole chapter with CT_STREAM_SANITIZER=2
                             (every op checked from the start): it runs, and the only reports are
                             the deliberate frees without record_stream
    check_ch12.py badflag    CH12 WORK              bad flags exit 2 with the usage
    check_ch12.py twin       CH12 PYTHON TWIN WORK  ch12_pytorch.py prints the same sections; the
                             ordering result and the checksum agree
    check_ch12.py twin_agree CH12 PYTHON TWIN WORK  odd sizes: C's chunk sums equal the twin's
                             float64 reference_sums (rtol 1e-5)
    check_ch12.py gpu        CH12 WORK HAVE_CUDA    --device cuda --quick: the same claims on a GPU,
                             PyTorch's priority range, blocking device->host copies reported as
                             sync points; skipped where there is no GPU
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chaptertest  # noqa: E402
from chaptertest import (close, expect, expect_cuda_ok, expect_usage_error, fresh, load_metrics, run,  # noqa: E402
                         run_cuda, run_with_twin, section_lines, sections_of, skip_unless_cuda_build,
                         skip_unless_imports)

SECTIONS = ["streams", "ordering", "overlap", "race", "record_stream", "sync points"]
# sync_debug.h's list, for the chapter's calls (the CPU: ct_to(x, cpu) copies nothing).
SYNC_CPU = "ct_item,ct_print,ct_copy_to_host,ct_from_host,ct_any_nonfinite,ct_stream_synchronize"
SYNC_GPU = "ct_item,ct_print,ct_copy_to_host,ct_to,ct_from_host,ct_any_nonfinite,ct_stream_synchronize"


def reference_sums(chunks, rows, width, layers):
    """sum(relu(...relu(x_i @ W_1)... @ W_L)) per chunk in float64, from the chapter's formulas."""
    def x(i, r, c):
        return (((i * rows + r) * 7 + 3 * c) % 17) / 16.0 - 0.5

    def w(l, c, j):
        return ((5 * c + 11 * j + l) % 13 - 6) / float(4 * width)
    try:
        import numpy as np
        r, c = np.arange(rows)[:, None], np.arange(width)[None, :]
        cc, jj = np.arange(width)[:, None], np.arange(width)[None, :]
        ws = [(((5 * cc + 11 * jj + l) % 13) - 6) / float(4 * width) for l in range(layers)]
        out = []
        for i in range(chunks):
            y = (((i * rows + r) * 7 + 3 * c) % 17) / 16.0 - 0.5
            for wl in ws:
                y = np.maximum(y @ wl, 0.0)
            out.append(float(y.sum()))
        return out
    except ImportError:
        ws = [[[w(l, c, j) for j in range(width)] for c in range(width)] for l in range(layers)]
        out = []
        for i in range(chunks):
            y = [[x(i, r, c) for c in range(width)] for r in range(rows)]
            for wl in ws:
                y = [[max(0.0, sum(row[k] * wl[k][j] for k in range(width))) for j in range(width)] for row in y]
            out.append(sum(map(sum, y)))
        return out


def check_timeline(m, tag, two_streams, r):
    n = m["chunks"]
    cs, ce = m[f"{tag}_copy_start_ms"], m[f"{tag}_copy_end_ms"]
    ks, ke = m[f"{tag}_compute_start_ms"], m[f"{tag}_compute_end_ms"]
    expect(len(cs) == len(ce) == len(ks) == len(ke) == n == len(m[f"{tag}_chunk"]), f"{tag}: timeline length", r)
    for i in range(n):
        expect(0 <= cs[i] <= ce[i] <= ks[i] <= ke[i], f"{tag} chunk {i}: copy then compute out of order", r)
        if i:
            expect(cs[i] >= ce[i - 1] and ks[i] >= ke[i - 1], f"{tag} chunk {i}: a stream ran out of issue order", r)
            if not two_streams:  # one stream: chunk i's copy comes after chunk i-1's compute
                expect(cs[i] >= ke[i - 1], f"serial chunk {i}: copy before the previous compute ended", r)


def check_run(r, m, gpu):
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(r.stdout.startswith("device: "), "first line", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}", r)
    # Ordering and events.
    expect(m["order_result"] == 5 and m["event_times_increase"] == 1, "x = 1; x *= 2; x += 3 is not 5", r)
    order = "\n".join(section_lines(r.stdout, "ordering"))
    for needle in ("Both events must be created with argument 'enable_timing=True'.",
                   "Both events must be recorded before calculating elapsed time.", "a negative (or zero) time"):
        expect(needle in order, f"ordering: missing {needle!r}", r)
    if gpu:
        expect(m["priority_least"] == 0 and -3 <= m["priority_greatest"] <= -1, "GPU priority range", r)
    else:
        expect(m["priority_least"] == 0 == m["priority_greatest"] == m["priority_clamped"], "CPU priority range", r)
    # The pipeline: sums against float64, both schedules, the timeline.
    ref = reference_sums(m["chunks"], int(m["rows"]), int(m["width"]), m["layers"])
    scale = max(abs(v) for v in ref) or 1.0
    for i, (c, p) in enumerate(zip(m["chunk_sums"], ref)):
        expect(abs(c - p) <= 1e-5 * scale, f"chunk {i}: C sum {c} vs float64 {p}", r)
    expect(len(m["chunk_sums"]) == m["chunks"], "chunk_sums length", r)
    expect(m["sums_identical"] == 1, "the two schedules' sums differ", r)
    check_timeline(m, "serial", False, r)
    check_timeline(m, "two_stream", True, r)
    expect(chaptertest.positive(m["serial_ms"]) and chaptertest.positive(m["two_stream_ms"]), "times", r)
    overlap = "\n".join(section_lines(r.stdout, "overlap"))
    expect("checker on the first run of each: no race reported" in overlap, "the pipeline's check", r)
    # The race and its checker.
    race = "\n".join(section_lines(r.stdout, "race"))
    expect(m["race_caught"] == 1 and "without wait_event: refused" in race, "missing wait not caught", r)
    expect("stream-ordering race on tensor 'chunk'" in race and "read on stream 'compute'" in race and
           "on stream 'copy'" in race, "the race report must name the tensor and both streams", r)
    expect(m["race_silent_with_wait"] == 1, "a report despite the wait", r)
    expect(m["free_reports_without_record"] == 2, "one free report per chunk without record_stream", r)
    expect(r.stderr.count("sanitizer: ct_free: stream-ordering race on tensor 'chunk'") == 2,
           "the two free reports on stderr", r)
    # record_stream.
    expect(m["reuse_without_record"] == 1, "without record_stream the block must come back at once", r)
    if not gpu:
        expect(m["reuse_with_record"] == 1 == m["compute_done_with_record"], "a finished compute frees the block", r)
    else:  # with record_stream the block comes back only once the compute is done
        expect(not m["reuse_with_record"] or m["compute_done_with_record"],
               "record_stream: the block was reused while the compute still read it", r)
    # Sync points.
    expect(m["sync_as_expected"] == m["sync_probes"] == 11, f"sync probes {m['sync_as_expected']}/{m['sync_probes']}", r)
    expect(m["sync_reported"] == (SYNC_GPU if gpu else SYNC_CPU), f"reported {m['sync_reported']}", r)
    expect(m["sync_error_status"] == "CT_ERR_SYNC" and m["sync_item_after_error"] == 16, "error mode", r)
    sync = "\n".join(section_lines(r.stdout, "sync points"))
    expect("ct_item: called a synchronizing" in sync and "refused by the sync debug mode \"error\"" in sync,
           "error-mode message", r)
    expect(r.stderr.count("warning: ct_item: called a synchronizing") == 1, "one default warning on stderr", r)


def cmd_report(ch12, work):
    os.makedirs(work, exist_ok=True)
    m = fresh(os.path.join(work, "ch12.json"))
    r = run([ch12, "--device", "cpu", "--quick", "--metrics", m])
    check_run(r, load_metrics(m), False)


def cmd_race(ch12, work):
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, CT_STREAM_SANITIZER="2")
    print("$ CT_STREAM_SANITIZER=2", ch12, "--device cpu --quick", flush=True)
    import subprocess
    r = subprocess.run([ch12, "--device", "cpu", "--quick"], capture_output=True, text=True, env=env, timeout=280)
    expect(r.returncode == 0, "the chapter failed with every op checked: a race in its own code", r)
    # The race section's two frees, and record_stream's free without it (the host had not waited
    # for compute): nothing else.
    expect(r.stderr.count("sanitizer:") == 3, "reports other than the three deliberate frees", r)
    expect(r.stderr.count("stream-ordering race on tensor 'chunk'") == 2 and
           "ct_free: stream-ordering race on tensor 'd': freed while stream 'compute'" in r.stderr,
           "the deliberate frees' reports", r)


def cmd_badflag(ch12, work):
    os.makedirs(work, exist_ok=True)
    for args, needles in ((["--chunks", "1"], ["--chunks"]), (["--chunks", "65"], ["--chunks"]),
                          (["--layers", "5"], ["--layers"]), (["--rows", "-3"], ["--rows"]),
                          (["--width", "x"], ["--width", "x"]), (["--bogus"], ["--bogus"])):
        expect_usage_error(run([ch12, "--device", "cpu", "--quick", *args]), args, needles)


def cmd_twin(ch12, python, twin, work):
    skip_unless_imports(python, "torch")
    os.makedirs(work, exist_ok=True)
    args = ["--device", "cpu", "--quick"]
    rc, rp, mc, mp = run_with_twin("ch12", [ch12, *args], [python, twin, *args], work)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}", rp)
    expect(mp["order_result"] == mc["order_result"] == 5, "ordering", rp)
    for key in ("chunks", "rows", "width", "layers"):
        expect(mc[key] == mp[key], f"metric {key}: C {mc[key]} vs twin {mp[key]}", rp)
    expect(close(mc["checksum"], mp["checksum"], 1e-5), f"checksum C {mc['checksum']} vs twin {mp['checksum']}", rp)


def cmd_twin_agree(ch12, python, twin, work):
    skip_unless_imports(python, "torch")
    os.makedirs(work, exist_ok=True)
    args = ["--device", "cpu", "--chunks", "3", "--rows", "200", "--width", "96", "--layers", "3", "--reps", "1"]
    _, rp, mc, mp = run_with_twin("ch12", [ch12, *args], [python, twin, *args], work)
    ref = mp["reference_sums"]
    scale = max(abs(v) for v in ref)
    diff = max(abs(a - b) for a, b in zip(mc["chunk_sums"], ref))
    print(f"max |C - PyTorch float64| over {len(ref)} chunk sums: {diff:.3g} (largest sum {scale:.3g})")
    expect(len(mc["chunk_sums"]) == len(ref) == 3 and scale > 0, "chunk sums", rp)
    expect(diff <= 1e-5 * scale, f"C's chunk sums differ from PyTorch's float64 by {diff}", rp)


def cmd_gpu(ch12, work, have_cuda):
    skip_unless_cuda_build(have_cuda)
    os.makedirs(work, exist_ok=True)
    m = fresh(os.path.join(work, "ch12_gpu.json"))
    r = run_cuda([ch12, "--device", "cuda", "--quick", "--metrics", m])
    expect_cuda_ok(r)
    check_run(r, load_metrics(m), True)


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "race": (cmd_race, 2), "badflag": (cmd_badflag, 2),
                                       "twin": (cmd_twin, 4), "twin_agree": (cmd_twin_agree, 4),
                                       "gpu": (cmd_gpu, 3)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
