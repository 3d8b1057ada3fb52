#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 3's tests, run by ctest (tests/chapter/ch03.cmake).

    check_ch03.py report CH03 METRICS.json               --device cpu --quick, output + JSON
    check_ch03.py gpu    CH03 METRICS.json HAVE_CUDA     the same with --device cuda on a GPU
    check_ch03.py twin   CH03 PYTHON TWIN.py WORKDIR     ch03_pytorch.py agrees with ch03

Exit 0: passed; 1: failed (the reason is printed); 77: skipped (ctest's
SKIP_RETURN_CODE), only where the thing under test cannot exist here.

`report` also checks the chapter's prose (check_prose): every byte count it
writes follows from the allocator's rules, so each is compared with the
number the run printed, and a byte count the checker cannot account for
fails the test (a number typed into the prose must be added here, with what
it stands for, or come from a {{metric}} placeholder).

The reference is independent of the C code: `Alloc` below is a model of the
caching allocator written from the rules that common/include/alloc.h documents (and
PyTorch's CUDACachingAllocator follows): 512-byte rounding, the small pool
(requests <= 1 MiB, 2 MiB segments) and the large pool (20 MiB segments for
requests under 10 MiB, else the request rounded up to 2 MiB), best fit,
splitting (remainder >= 512 B small, > 1 MiB large), coalescing, empty_cache,
and the per-process fraction with its flush-and-retry-once on failure. The
checker replays the chapter's documented steps on the model and compares
every statistic the chapter printed and wrote to --metrics.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaptertest  # noqa: E402
from chaptertest import (expect, expect_cuda_ok, fail, fresh, run, run_cuda,  # noqa: E402
                         section_lines, sections_of, skip_unless_cuda_build, skip_unless_imports)

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SECTIONS = ["statistics", "splitting", "summary", "raw_vs_cached", "oom", "halve_batch", "chunks",
            "no_activations", "free_and_empty_cache", "zero_grad", "warmup"]


def load_metrics(path):
    """The --metrics JSON, read plainly (chaptertest.load_metrics would also check that the
    write was atomic and holds an object: ch03's tests have never asserted that)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read metrics {path}: {e}")


def fmt_size(n):
    """PyTorch's format_size: bytes below 1 KiB, else two decimals of KiB/MiB/GiB."""
    if n < KIB:
        return f"{n} B"
    if n < MIB:
        return f"{n / KIB:.2f} KiB"
    if n < GIB:
        return f"{n / MIB:.2f} MiB"
    return f"{n / GIB:.2f} GiB"


# ---- the allocator model -------------------------------------------------------------
class OOM(Exception):
    def __init__(self, asked, allocated, reserved):
        super().__init__(asked)
        self.asked, self.allocated, self.reserved = asked, allocated, reserved


class Alloc:
    """One device's caching allocator (default pool, one stream), from the documented rules."""

    def __init__(self):
        self.segs = []  # each: {"size", "small", "blocks": [[offset, size, live, rounded], ...]}
        self.allocated = self.reserved = self.peak_allocated = self.peak_reserved = 0
        self.limit = None
        self.ooms = self.flushes = self.device_allocs = 0

    @staticmethod
    def rounded(n):
        n = max(n, 1)
        return (n + 511) // 512 * 512

    @staticmethod
    def segment_size(r):
        if r <= MIB:
            return 2 * MIB
        if r < 10 * MIB:
            return 20 * MIB
        return (r + 2 * MIB - 1) // (2 * MIB) * (2 * MIB)

    def _best_fit(self, r, small):
        best = None
        for s in self.segs:
            if s["small"] != small:
                continue
            for b in s["blocks"]:
                if not b[2] and b[1] >= r and (best is None or b[1] < best[1][1]):
                    best = (s, b)
        return best

    def _new_segment(self, size, small):
        if self.limit is not None and self.reserved + size > self.limit:
            return False
        self.segs.append({"size": size, "small": small, "blocks": [[0, size, False, 0]]})
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.device_allocs += 1
        return True

    def alloc(self, n):
        r = self.rounded(n)
        small = r <= MIB
        best = self._best_fit(r, small)
        if best is None:
            size = self.segment_size(r)
            if not self._new_segment(size, small):
                self.flushes += 1
                self.empty_cache()
                if not self._new_segment(size, small):
                    self.ooms += 1
                    raise OOM(size, self.allocated, self.reserved)
            best = self._best_fit(r, small)
        s, b = best
        rem = b[1] - r
        if (rem >= 512) if small else (rem > MIB):
            i = s["blocks"].index(b)
            s["blocks"].insert(i + 1, [b[0] + r, rem, False, 0])
            b[1] = r
        b[2], b[3] = True, r
        self.allocated += r
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        return (s, b)

    def free(self, h):
        s, b = h
        assert b[2], "double free in the model"
        self.allocated -= b[3]
        b[2], b[3] = False, 0
        blocks = s["blocks"]
        i = blocks.index(b)
        if i + 1 < len(blocks) and not blocks[i + 1][2]:
            b[1] += blocks[i + 1][1]
            del blocks[i + 1]
        if i > 0 and not blocks[i - 1][2]:
            blocks[i - 1][1] += b[1]
            del blocks[i]

    def empty_cache(self):
        keep = []
        for s in self.segs:
            if any(b[2] for b in s["blocks"]):
                keep.append(s)
            else:
                self.reserved -= s["size"]
        self.segs = keep

    def reset_peak(self):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    def row(self):
        return [self.allocated, self.reserved, self.peak_allocated, self.peak_reserved, len(self.segs)]


# ---- the chapter's steps, replayed on the model ------------------------------------------
def expected_statistics(big_n):
    a, rows, labels = Alloc(), [], []

    def log(label):
        labels.append(label)
        rows.append(a.row())

    log("start")
    x = a.alloc(1000 * 1000 * 4)
    log("x = randn(1000, 1000)")
    a.free(x)
    log("del x")
    x = a.alloc(1000 * 1000 * 4)
    log("x = randn(1000, 1000) again")
    y = a.alloc(3 * 3 * 4)
    log("y = randn(3, 3)")
    a.free(x)
    a.free(y)
    log("del x, y")
    a.empty_cache()
    log("empty_cache()")
    a.reset_peak()
    log("reset_peak_memory_stats()")
    big = a.alloc(big_n * big_n * 4)
    log(f"big = empty({big_n}, {big_n})")
    a.free(big)
    log("del big")
    a.empty_cache()
    log("empty_cache()")
    return labels, rows


def expected_splitting():
    a, rows, labels = Alloc(), [], []

    def log(label):
        labels.append(label)
        rows.append(a.row())

    log("start")
    t = []
    for i in range(5):
        t.append(a.alloc(1000 * 1000 * 4))
        log(f"t{i + 1} = empty(1000, 1000)")
    offsets = [h[1][0] for h in t]
    first_seg = t[0][0]
    for i in (0, 2, 4):
        a.free(t[i])
    log("del t1, t3, t5")
    z = a.alloc(2000 * 1000 * 4)
    log("z = empty(2000, 1000)")
    live = sum(1 for s in a.segs for b in s["blocks"] if b[2])
    return labels, rows, offsets, z[0] is first_seg, a, live


def expected_oom(m):
    """Replays show_oom .. show_free_and_empty_cache and the warm-up's segment counts."""
    L, D, B = m["oom_layers"], m["oom_width"], m["oom_batch"]
    a = Alloc()
    weights = [a.alloc(D * D * 4) for _ in range(L)]
    weights_seg = a.reserved
    act = B * D * 4
    cap = weights_seg + 3 * act + act // 2 + MIB
    e = {"cap": cap}
    a.limit = int(m["oom_fraction"] * m["oom_total_bytes"])  # (size_t)(fraction * total), as alloc.c
    e["limit"] = a.limit
    X = a.alloc(act)

    def forward_keep(rows):
        """-> (ok, layers made, OOM or None); frees the activations afterwards."""
        acts, err = [], None
        try:
            for _ in range(L):
                acts.append(a.alloc(rows * D * 4))
        except OOM as ex:
            err = ex
        for h in acts:
            a.free(h)
        return err is None, len(acts), err

    def forward_nokeep(rows):
        prev = None
        for _ in range(L):
            z = a.alloc(rows * D * 4)
            if prev is not None:
                a.free(prev)
            prev = z
        return prev

    ok, made, err = forward_keep(B)
    e["oom_raised"] = not ok
    e["oom_failed_layer"] = made + 1 if not ok else 0
    e["oom_err"] = err

    # halve_batch
    a.empty_cache()
    tried, b = [], B
    while b >= 1:
        tried.append(b)
        a.reset_peak()
        ok, _, _ = forward_keep(b)
        if ok:
            break
        a.empty_cache()
        b //= 2
    e["halve_tried"], e["halve_fitted"], e["halve_peak"] = tried, b, a.peak_allocated

    # chunks
    a.empty_cache()
    a.reset_peak()
    n = (B + b - 1) // b
    for i in range(n):
        rows = min(b, B - i * b)
        acts = [a.alloc(rows * D * 4) for _ in range(L)]
        for h in acts[:-1]:
            a.free(h)
        s = a.alloc(4)  # ct_sum's 0-d result
        a.free(acts[-1])
        a.free(s)
    e["chunks_n"], e["chunks_peak"] = n, a.peak_allocated

    # no_activations
    a.empty_cache()
    a.reset_peak()
    ok, _, _ = forward_keep(b)
    e["peak_keep"] = a.peak_allocated
    a.reset_peak()
    a.free(forward_nokeep(b))
    e["peak_nokeep"] = a.peak_allocated
    a.reset_peak()
    kept = forward_nokeep(B)
    e["full_peak"] = a.peak_allocated
    a.free(a.alloc(4))

    # free_and_empty_cache
    a.reset_peak()
    e["fec_first_oom"] = not forward_keep(b)[0]
    a.empty_cache()
    a.reset_peak()
    e["fec_empty_cache_only_oom"] = not forward_keep(b)[0]
    a.free(kept)
    a.empty_cache()
    a.reset_peak()
    e["fec_after_free_ok"] = forward_keep(b)[0]
    e["fec_peak"] = a.peak_allocated
    e["num_ooms"], e["num_cache_flushes"] = a.ooms, a.flushes

    # warm-up (after zero_grad, which leaves nothing live of its own): new segments per step
    a.limit = None
    steps = len(m.get("warmup_cold_new_segments", []))

    def step_segments():
        before = a.device_allocs
        forward_keep(b)
        return a.device_allocs - before

    a.empty_cache()
    e["warmup_cold"] = [step_segments() for _ in range(steps)]
    a.empty_cache()
    before = a.device_allocs
    a.free(a.alloc(L * b * D * 4))
    e["warmup_block_segments"] = a.device_allocs - before
    e["warmup_warm"] = [step_segments() for _ in range(steps)]
    del weights, X
    return e


# ---- the prose's numbers ------------------------------------------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "chapters", "ch03_memory", "ch03_memory.c")

# A byte count in prose: a number with a unit of memory, or one grouped by commas.
RE_BYTES = re.compile(r"(?<![\w.^])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?:\s*(MiB|GiB|KiB|bytes|字节))?")
# The allocator's documented constants and the C library's (alloc.h, mallopt(3)): prose may
# name them anywhere. (value, unit)
RULES = {(512, "bytes"): "every request is rounded up to a multiple of 512 bytes",
         (1, "MiB"): "the small pool's limit; the large pool keeps remainders above 1 MiB",
         (2, "MiB"): "a small-pool segment; large segments are rounded up to 2 MiB",
         (10, "MiB"): "requests from 10 MiB get a segment of their own",
         (20, "MiB"): "a large-pool segment",
         (128, "KiB"): "the mmap threshold the chapter sets with mallopt",
         (32, "MiB"): "glibc's ceiling for its dynamic mmap threshold (mallopt(3))",
         (4, "KiB"): "a page"}


def prose_texts():
    """{lang: the chapter's prose in that language}, code spans and placeholders removed."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    from ctools import weave
    out = {"zh": [], "en": []}
    for item in weave.Chapter(SOURCE).items:
        for lang, lines in item.get("segments", []) if item["kind"] == "prose" else []:
            if lang in out:
                out[lang].append("\n".join(lines))
    return {lang: re.sub(r"`[^`\n]*`|\{\{metric [^}]*\}\}", "", "\n".join(t)) for lang, t in out.items()}


def unitless(text):
    return re.sub(r"\s*(MiB|bytes|字节)$", "", text or "")


def grouped(n):
    return f"{int(n):,}"


def prose_claims(r, m):
    """[(value the run gives, en pattern, zh pattern)]: each pattern's group 1 is where the
    prose writes that value."""
    sa, sr = m["statistics_allocated"], m["statistics_reserved"]
    pa, pr, off = m["splitting_allocated"], m["splitting_reserved"], m["splitting_offsets"]
    x = m["x_request_bytes"]
    block, seg = off[1] - off[0], pr[1]
    tail = seg - off[4]
    holes = [off[1] - off[0], off[3] - off[2], tail]
    summ = {}
    for line in section_lines(r.stdout, "summary"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5:
            summ[cells[0]] = cells[1]
    act = m["oom_act_bytes"]
    full_batch = int(re.search(r"batch = cli->quick \? \d+ : (\d+);", open(SOURCE, encoding="utf-8").read()).group(1))
    full_act = full_batch * m["oom_width"] * 4
    weights_seg = m["oom_cap_bytes"] - 3 * act - act // 2 - MIB
    y = re.fullmatch(r"y = randn\((\d+), (\d+)\)", m["statistics_steps"].split(";")[4])
    return [
        (f"{x / MIB:.2f} MiB", r"(\d+\.\d+ MiB) while", r"为什么“已分配”是 (\d+\.\d+ MiB)"),
        (f"{x / MIB:.2f}", r"x is (\d+\.\d+) MiB", r"x 是 (\d+\.\d+) MiB"),
        (f"{x / MIB:.2f}", r"that is (\d+\.\d+)\.", r"得 (\d+\.\d+)。"),
        (grouped(x), r"float32 numbers are ([\d,]+) bytes", r"float32 是 ([\d,]+) 字节"),
        (grouped(sa[1]), r"allocated is ([\d,]+), not", r"allocated 是 ([\d,]+)，不是"),
        (grouped(x), r"allocated is [\d,]+, not ([\d,]+)", r"allocated 是 [\d,]+，不是 ([\d,]+)"),
        (grouped(x), r"([\d,]+) / 512 = [\d.]+", r"([\d,]+) / 512 = [\d.]+"),
        (f"{x / 512:g}", r"/ 512 = ([\d.]+)", r"/ 512 = ([\d.]+)"),
        (str(sa[1] // 512), r"rounded up to (\d+) × 512", r"取整为 (\d+) × 512"),
        (grouped(sa[1]), r"× 512 = ([\d,]+)", r"× 512 = ([\d,]+)"),
        (f"{sr[1] // MIB} MiB", r"reserved is (\d+ MiB)", r"reserved 是 (\d+ MiB)"),
        (f"{sr[1] // MIB} MiB", r"\"allocated\" is [\d.]+ MiB while \"cached\" is (\d+ MiB)",
         r"而“缓存”是 (\d+ MiB)"),
        (f"{int(y.group(1)) * int(y.group(2)) * 4} bytes", r"y is (\d+ bytes)", r"y 只有 (\d+ 字节)"),
        (f"{sa[4] - sa[3]}", r"counted as (\d+)", r"计为 (\d+) 字节"),
        (f"{sr[4] // MIB} MiB", r"reserved becomes (\d+ MiB)", r"reserved 变成 (\d+ MiB)"),
        (f"{seg // MIB} MiB", r"in one (\d+ MiB) segment", r"同一个 (\d+ MiB) 的段"),
        (grouped(block), r"([\d,]+) bytes apart", r"每个相差 ([\d,]+) 字节"),
        (grouped(tail), r"only ([\d,]+) bytes remain", r"只剩 ([\d,]+) 字节"),
        (grouped(tail - block), r"would leave ([\d,]+) bytes", r"只余 ([\d,]+) 字节"),
        (grouped(sa[1]), r"counts only the ([\d,]+) bytes t5", r"只计 t5 请求的 ([\d,]+) 字节"),
        (f"{sum(holes) / MIB:.2f} MiB", r"about ([\d.]+ MiB) of free", r"约 ([\d.]+ MiB) 的空闲"),
        (f"{max(holes) / MIB:.2f} MiB", r"largest hole is ([\d.]+ MiB)", r"最大的洞只有 ([\d.]+ MiB)"),
        (grouped(pa[-1] - pa[-2]), r"request for ([\d,]+) bytes", r"请求 ([\d,]+) 字节"),
        (f"{(pr[-1] - pr[-2]) // MIB} MiB", r"another (\d+ MiB) segment", r"再向驱动要一个 (\d+ MiB) 的段"),
        (summ.get("Active blocks (live)"), r"(\d+) live blocks", r"(\d+) 个活块"),
        (summ.get("Segments"), r"(\d+) segments\.", r"(\d+) 个段。"),
        (grouped(m["oom_batch"]), r"\(([\d,]+) rows with", r"（[^）]*?([\d,]+) 行，否则"),
        (grouped(full_batch), r"([\d,]+) otherwise\)", r"否则 ([\d,]+) 行）"),
        (f"{act // MIB} MiB", r"(\d+ MiB) with , \d+ MiB otherwise", r"时 (\d+ MiB)，否则"),
        (f"{full_act // MIB} MiB", r"with , (\d+ MiB) otherwise", r"否则 (\d+ MiB)。"),
        (f"{m['oom_layers'] * full_act // MIB} MiB", r"activations are exactly (\d+ MiB)", r"激活正好 (\d+ MiB)"),
        (f"{weights_seg // MIB} MiB", r"the weights' (\d+ MiB) segment", r"权重所在的 (\d+ MiB) 段"),
        (f"{m['zg_grads_bytes'] // 4 // MIB} MiB", r"\((\d+ MiB) per gradient\)", r"（每个梯度 (\d+ MiB)）"),
    ]


def check_figure(m):
    """The byte counts drawn in fig/pools.dot (its labels, both languages) equal the run's."""
    path = os.path.join(os.path.dirname(SOURCE), "fig", "pools.dot")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    pa, pr, off = m["splitting_allocated"], m["splitting_reserved"], m["splitting_offsets"]
    seg = pr[1]
    tail = seg - off[4]
    holes = [off[1] - off[0], off[3] - off[2], tail]
    want = [(r"空闲 ([\d.]+ MiB)<br/>（原 t1）", f"{holes[0] / MIB:.2f} MiB"),
            (r"free ([\d.]+ MiB)<br/>\(was t3\)", f"{holes[1] / MIB:.2f} MiB"),
            (r"free ([\d.]+ MiB)<br/>\(was t5", f"{tail / MIB:.2f} MiB"),
            (r"空闲共 ([\d.]+ MiB)", f"{sum(holes) / MIB:.2f} MiB"),
            (r"只有 ([\d.]+ MiB)|largest piece is ([\d.]+ MiB)", f"{max(holes) / MIB:.2f} MiB"),
            (r"z: ([\d,]+) bytes", grouped(pa[-1] - pa[-2])),
            (r"segment 1 \((\d+ MiB)\)", f"{seg // MIB} MiB"),
            (r"segment 2 \((\d+ MiB)\)", f"{(pr[-1] - pr[-2]) // MIB} MiB")]
    for pat, value in want:
        found = [g for mm in re.finditer(pat, text) for g in mm.groups() if g]
        expect(found, f"{path} no longer says /{pat}/: update check_figure")
        for g in found:
            expect(g == value, f"{path} draws {g!r} where the run gives {value!r} (/{pat}/)")
    print(f"ok: fig/pools.dot: {len(want)} byte counts equal the run's")


def check_prose(r, m):
    """Every byte count in ch03's prose (both languages) equals the run's: the claims above name
    each one; a byte count in no claim must be one of the allocator's constants (RULES)."""
    texts = prose_texts()
    claims = prose_claims(r, m)
    for lang, text in texts.items():
        covered = []
        for want, en, zh in claims:
            pat = en if lang == "en" else zh
            found = list(re.finditer(pat, text))
            expect(found, f"ch03's {lang} prose no longer says /{pat}/: update prose_claims with what it now "
                   "says, or take the number from a {{metric}} placeholder")
            for mm in found:
                expect(unitless(mm.group(1)) == unitless(want), f"ch03's {lang} prose says {mm.group(1)!r} where the run gives "
                       f"{want!r}: {mm.group(0)!r}")
                covered.append(mm.span(1))
        for mm in RE_BYTES.finditer(text):
            if not (mm.group(2) or "," in mm.group(1)):
                continue  # a plain number: a count, a size in elements
            if any(a <= mm.start(1) and mm.end(1) <= b for a, b in covered):
                continue
            unit = {"字节": "bytes", None: "bytes"}.get(mm.group(2), mm.group(2))
            value = float(mm.group(1).replace(",", ""))
            expect((value, unit) in RULES, f"ch03's {lang} prose writes {mm.group(0)!r} "
                   f"(…{text[max(0, mm.start() - 40):mm.end() + 20]!r}…), which is neither an allocator "
                   "constant nor a number this checker compares with the run: add a claim to prose_claims "
                   "or use a {{metric}} placeholder")
    print(f"ok: ch03's prose: {len(claims)} byte counts equal the run's, in zh and en")


# ---- checks ----------------------------------------------------------------------------
def stats_rows(stdout, section):
    rows = []
    for line in section_lines(stdout, section):
        mm = re.fullmatch(r"(.+?)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", line)
        if mm:
            rows.append((mm.group(1), [int(mm.group(i)) for i in range(2, 7)]))
    return rows


def check_table(r, m, section, labels, rows):
    printed = stats_rows(r.stdout, section)
    expect([p[0] for p in printed] == labels, f"{section}: printed steps {[p[0] for p in printed]}, expected {labels}", r)
    for (label, got), want in zip(printed, rows):
        expect(got == want, f"{section}: after '{label}' printed (allocated, reserved, max_allocated, "
               f"max_reserved, segments) = {got}, the allocator's rules give {want}", r)
    expect(m.get(f"{section}_steps") == ";".join(labels), f"metrics {section}_steps = {m.get(f'{section}_steps')!r}")
    for i, key in enumerate(["allocated", "reserved", "max_allocated", "max_reserved", "segments"]):
        series = m.get(f"{section}_{key}")
        expect(series == [row[i] for row in rows], f"metrics {section}_{key} = {series}, expected {[row[i] for row in rows]}")


def check_run(r, m, device):
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}, expected {SECTIONS}", r)
    expect(m.get("device") == device, f"metrics device {m.get('device')!r}, expected {device!r}")

    # == statistics ==: the seeds' example, step by step, against the model.
    expect(m.get("x_request_bytes") == 4_000_000, f"x_request_bytes {m.get('x_request_bytes')}: 1000*1000*4 = 4000000")
    big_n = m.get("big_n")
    expect(big_n in (2000, 10000), f"big_n {big_n!r}")
    labels, rows = expected_statistics(big_n)
    check_table(r, m, "statistics", labels, rows)
    expect(rows[1][:2] == [4_000_256, 20 * MIB], "the model itself disagrees with the documented example")
    stats = "\n".join(section_lines(r.stdout, "statistics"))
    expect("4000000 B = 3.81 MiB" in stats and "4000256" in stats, "statistics does not explain 3.81 MiB / 4000256 B", r)

    # == splitting ==: splitting, the whole-tail rule and fragmentation.
    labels, rows, offsets, z_in_first, model, live = expected_splitting()
    check_table(r, m, "splitting", labels, rows)
    expect(m.get("splitting_offsets") == offsets, f"block offsets {m.get('splitting_offsets')}, the rules give {offsets}")
    expect(m.get("splitting_z_in_first_segment") == int(z_in_first), "z should need a new segment (fragmentation)")

    # == summary ==: ct_memory_summary at the fragmented moment.
    summ = {}
    for line in section_lines(r.stdout, "summary"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5:
            summ[cells[0]] = cells[1:]
    want = {"Allocated memory": fmt_size(model.allocated), "Reserved memory (segments)": fmt_size(model.reserved),
            "Segments": str(len(model.segs)), "Active blocks (live)": str(live)}
    for k, v in want.items():
        expect(k in summ and summ[k][0] == v, f"summary '{k}' current {summ.get(k, ['missing'])[0]!r}, expected {v!r}", r)

    # == raw_vs_cached ==: the table is complete and the cache beats the system for big blocks.
    sizes = m.get("raw_sizes_bytes", [])
    n = len(sizes)
    expect(n >= 3 and all(len(m.get(k, [])) == n for k in ("raw_us", "cached_us", "cached_speedup")),
           "raw_vs_cached metrics incomplete")
    expect(all(v > 0 for v in m["raw_us"]) and all(v > 0 for v in m["cached_us"]), "non-positive timings")
    if device == "cpu":
        expect(m.get("raw_kind") == "malloc+free" and len(m.get("raw_touch_us", [])) == n, "CPU raw timings missing")
        raw_big = m["raw_touch_us"][-1]
    else:
        expect(m.get("raw_kind") == "cudaMalloc+cudaFree", f"raw_kind {m.get('raw_kind')!r} on {device}")
        raw_big = m["raw_us"][-1]
    expect(raw_big > 2 * m["cached_us"][-1],
           f"at {sizes[-1]} B the raw allocation ({raw_big:.1f} us) is not clearly slower than the cached one "
           f"({m['cached_us'][-1]:.2f} us)")
    for i in range(n):
        base = m["raw_touch_us"][i] if device == "cpu" else m["raw_us"][i]
        expect(abs(m["cached_speedup"][i] - base / m["cached_us"][i]) <= 1e-6 * m["cached_speedup"][i] + 1e-9,
               f"cached_speedup[{i}] is not raw / cached")

    # == oom .. free_and_empty_cache ==: replayed on the model with the chapter's cap.
    e = expected_oom(m)
    expect(m.get("oom_cap_bytes") == e["cap"], f"cap {m.get('oom_cap_bytes')}, expected {e['cap']}")
    expect(abs(e["limit"] - e["cap"]) <= 4096, f"fraction * total = {e['limit']} is not the cap {e['cap']}")
    expect(m.get("oom_raised") == 1 and e["oom_raised"], "the training forward at the full batch must raise OOM", r)
    expect(m.get("oom_failed_layer") == e["oom_failed_layer"],
           f"OOM at layer {m.get('oom_failed_layer')}, the rules say layer {e['oom_failed_layer']}")
    msg = m.get("oom_message", "")
    err = e["oom_err"]
    # The facts of PyTorch 2.x's message, in its words and order.
    for needle in (f"out of memory. Tried to allocate {fmt_size(err.asked)}. ", " has a total capacity of ",
                   " is free. ", f"{fmt_size(e['limit'])} allowed; ",
                   f"Of the allocated memory {fmt_size(err.allocated)} is allocated by ct, ",
                   f"and {fmt_size(err.reserved - err.allocated)} is reserved by ct but unallocated.",
                   "expandable segments"):
        expect(needle in msg, f"OOM message lacks {needle!r}: {msg!r}")
    oom_out = "\n".join(section_lines(r.stdout, "oom"))
    expect(msg and msg in oom_out, "the caught OOM message is not printed in == oom ==", r)

    expect(m.get("halve_tried") == e["halve_tried"], f"halve_tried {m.get('halve_tried')}, expected {e['halve_tried']}")
    expect(m.get("halve_fitted") == e["halve_fitted"] == m["oom_batch"] // 2,
           f"fitted batch {m.get('halve_fitted')}, expected {e['halve_fitted']} (half of {m['oom_batch']})")
    expect(m.get("halve_peak_allocated") == e["halve_peak"], f"halve peak {m.get('halve_peak_allocated')}, expected {e['halve_peak']}")
    expect(e["halve_peak"] <= e["limit"], "the model's peak exceeds the cap")
    hb = "\n".join(section_lines(r.stdout, "halve_batch"))
    expect(re.search(rf"batch\s+{m['oom_batch']}: out of memory", hb) and re.search(rf"batch\s+{e['halve_fitted']}: ok", hb),
           "halve_batch does not show the failed and the successful attempt", r)

    expect(m.get("chunks_n") == e["chunks_n"] and m.get("chunks_rows") == e["halve_fitted"], "chunk count/size")
    expect(m.get("chunks_peak_allocated") == e["chunks_peak"], f"chunks peak {m.get('chunks_peak_allocated')}, expected {e['chunks_peak']}")
    cs, fs = m.get("chunks_output_sum"), m.get("noact_full_output_sum")
    expect(isinstance(cs, (int, float)) and isinstance(fs, (int, float)) and fs > 0 and abs(cs - fs) <= 1e-4 * abs(fs),
           f"chunks' output sum {cs} differs from the whole batch's {fs}")

    expect(m.get("noact_peak_keep") == e["peak_keep"], f"keep peak {m.get('noact_peak_keep')}, expected {e['peak_keep']}")
    expect(m.get("noact_peak_nokeep") == e["peak_nokeep"], f"no-keep peak {m.get('noact_peak_nokeep')}, expected {e['peak_nokeep']}")
    expect(m["noact_peak_nokeep"] < m["noact_peak_keep"], "inference without activations must peak lower")
    expect(m.get("noact_full_peak") == e["full_peak"], f"full inference peak {m.get('noact_full_peak')}, expected {e['full_peak']}")

    for k in ("fec_first_oom", "fec_empty_cache_only_oom", "fec_after_free_ok"):
        expect(m.get(k) == int(e[k]), f"{k} = {m.get(k)}, the rules give {int(e[k])}")
    expect(m.get("fec_freed_bytes") == m["oom_act_bytes"], "del kept must free one whole-batch activation")
    expect(m.get("fec_peak_allocated") == e["fec_peak"], f"fec peak {m.get('fec_peak_allocated')}, expected {e['fec_peak']}")
    expect(m.get("num_ooms") == e["num_ooms"] and m.get("num_cache_flushes") == e["num_cache_flushes"],
           f"OOMs/flushes {m.get('num_ooms')}/{m.get('num_cache_flushes')}, expected {e['num_ooms']}/{e['num_cache_flushes']}")

    # == zero_grad ==: set_to_none frees exactly the gradients.
    g = m.get("zg_grads_bytes")
    expect(g == 4 * Alloc.rounded(512 * 512 * 4), f"zg_grads_bytes {g}")
    expect(m["zg_allocated_zeros"] - m["zg_allocated_none"] == g,
           f"allocated after zero_grad differs by {m['zg_allocated_zeros'] - m['zg_allocated_none']}, expected {g}")
    expect(m["zg_forward_peak_zeros"] - m["zg_forward_peak_none"] == g, "the next forward's peaks differ by other than the gradients")
    expect(m["zg_step_peak_none"] <= m["zg_step_peak_zeros"], "set_to_none made the step's peak higher")

    # == warmup ==: new segments per step, from the rules; times only reported.
    expect(m.get("warmup_cold_new_segments") == e["warmup_cold"],
           f"cold new segments {m.get('warmup_cold_new_segments')}, expected {e['warmup_cold']}")
    expect(m.get("warmup_warm_new_segments") == e["warmup_warm"] and sum(e["warmup_warm"]) == 0,
           f"warm new segments {m.get('warmup_warm_new_segments')}, expected {e['warmup_warm']}")
    expect(m.get("warmup_new_segments") == e["warmup_block_segments"] == 1, "the warm-up block is one segment")
    for k in ("warmup_cold_ms", "warmup_warm_ms"):
        expect(len(m.get(k, [])) == len(e["warmup_cold"]) and all(v > 0 for v in m[k]), f"{k} missing")


def cmd_report(ch03, metrics):
    r = run([ch03, "--device", "cpu", "--quick", "--metrics", fresh(metrics)])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(r.stdout.splitlines()[0] == "device: cpu", "first line must be 'device: cpu'", r)
    m = load_metrics(metrics)
    check_run(r, m, "cpu")
    check_prose(r, m)
    check_figure(m)
    print("PASS")


def cmd_gpu(ch03, metrics, have_cuda):
    skip_unless_cuda_build(have_cuda)
    r = run_cuda([ch03, "--device", "cuda", "--quick", "--metrics", fresh(metrics)])
    expect_cuda_ok(r)
    first = r.stdout.splitlines()[0]
    match = re.fullmatch(r"device: (cuda:\d+) \((.+)\)", first)
    expect(match, f"first line {first!r}, expected 'device: cuda:N (name)'", r)
    check_run(r, load_metrics(metrics), match.group(1))
    print("PASS")


def cmd_twin(ch03, python, twin, workdir):
    skip_unless_imports(python, "torch")
    c_json, py_json = (fresh(os.path.join(workdir, f)) for f in ("ch03_twin_c.json", "ch03_twin_py.json"))
    rc = run([ch03, "--device", "cpu", "--quick", "--metrics", c_json])
    rp = run([python, twin, "--device", "cpu", "--quick", "--metrics", py_json])
    expect(rc.returncode == 0, f"ch03 exit code {rc.returncode}", rc)
    expect(rp.returncode == 0, f"ch03_pytorch.py exit code {rp.returncode}", rp)
    mc, mp = load_metrics(c_json), load_metrics(py_json)
    expect(sections_of(rp.stdout) == sections_of(rc.stdout),
           f"sections differ: twin {sections_of(rp.stdout)}, C {sections_of(rc.stdout)}", rp)
    expect(rp.stdout.splitlines()[0] == "device: cpu", "twin's first line must be 'device: cpu'", rp)
    # torch's own numbers for the same tensors.
    expect(mp.get("x_request_bytes") == mc.get("x_request_bytes") == 4_000_000,
           f"x.element_size() * x.nelement(): twin {mp.get('x_request_bytes')}, C {mc.get('x_request_bytes')}")
    expect("memory_allocated" in "\n".join(section_lines(rp.stdout, "statistics")),
           "the twin must say what torch.cuda.memory_allocated gives without CUDA", rp)
    for k in ("oom_layers", "oom_width", "oom_batch", "oom_act_bytes", "halve_fitted"):
        expect(mp.get(k) == mc.get(k), f"{k}: twin {mp.get(k)!r}, C {mc.get(k)!r}")
    # The remedies' conclusions hold under PyTorch too.
    expect(mp["noact_peak_nokeep"] < mp["noact_peak_keep"], "twin: no_grad must hold fewer bytes than keeping activations")
    expect(mp["noact_peak_keep"] - mp["noact_peak_nokeep"] == mc["noact_peak_keep"] - mc["noact_peak_nokeep"],
           "twin and C disagree on the bytes the kept activations take")
    cs, fs = mp.get("chunks_output_sum"), mp.get("noact_full_output_sum")
    expect(fs and abs(cs - fs) <= 1e-4 * abs(fs), f"twin: chunks' sum {cs} != whole batch's {fs}")
    expect(mp["zg_allocated_zeros"] - mp["zg_allocated_none"] == mc["zg_allocated_zeros"] - mc["zg_allocated_none"]
           == mc["zg_grads_bytes"], "twin and C disagree on the gradients' bytes that set_to_none frees")
    print("PASS")


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "gpu": (cmd_gpu, 3), "twin": (cmd_twin, 4)},
                                __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
