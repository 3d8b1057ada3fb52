#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/record: run one chapter and keep its output as a transcript for the book.

    tools/record [--build DIR] [--device cpu|cuda] [--out-dir DIR] [--tag NAME] [--repeats N]
                 [--max-load X] [--allow-busy] [--max-spread F] [--keep-noisy] chNN [-- FLAGS...]

Runs ./chNN from the build directory with --device and FLAGS, and writes
book/recorded/chNN-<machine-slug>-<UTC date>.txt in the transcript format of
book/FORMAT.md ("Recorded GPU transcripts"): header lines `# key: value`, a
blank line, then the output exactly as printed; and beside it the run's
--metrics as .json. tools/gpu-check calls it for every chapter on a lent GPU;
on a CPU it records runs too long for a book build (ch06's default
training), which the book then shows beside its own shorter run.
--tag NAME keeps a second run of the same chapter on the same machine apart
(chNN-<machine-slug>-NAME-<date>.txt; ch06 records `--tag mlp -- --model
mlp` beside its default CNN run); the book shows each, labelled with its
command.

A chapter that exits non-zero is still recorded (with its exit status), and
tools/record exits with that status. A run whose own timing check flagged
timings as implausible (metrics LADDER_timings_suspect > 0: chapter 4's
ladders, on a busy machine) is not kept: tools/record writes nothing, says
how many timings were flagged and exits 3; record again on a quiet machine
(or pass --keep-flagged, and the book says so beside numbers taken from it).

Timing claims need a quiet machine and more than one run (book/FORMAT.md,
"Recorded GPU transcripts"):
- load: the 1-minute load average is read before and after the run and
  written in the header (`# load: ...`). A run that would start above
  --max-load per core (default 0.5) is refused (exit 4, nothing run);
  --allow-busy runs it anyway and the header says so.
- repeats: the chapter runs --repeats times (default 3). The kept metrics
  are each key's median over the runs (lists element by element), with
  `record_repeats`, `record_spread` ({key: (max - min) / median} for every
  timed key: times, rates, speed-ups, ratios) and `record_spread_max`; the
  transcript is the run nearest the medians (the header says which). A run
  whose spread on a checked key exceeds --max-spread (default 0.10) is not
  kept (exit 5, naming the key and its values); --keep-noisy keeps it and the
  header says so. The checked keys are the timed keys the chapter's prose
  interprets from its recording: every `recorded KEY` in the condition of a
  {{claim}}, {{if}} or {{elif}} of the chapter's sources, the numbers the
  book's sentences stand on. Other timed keys (a saving that is the
  difference of two near-equal times, a microsecond warm-up, a number only
  quoted) keep their spread in record_spread and are not checked;
  --check-all checks every timed key. A checked spread above the limit is
  still kept when every such claim and branch prints the same sentence in
  each run and in the medians (a claim holds or fails in all, an {{if}}
  takes the same branch in all): the runs disagree in their numbers, not in
  what the prose says of them (the header says so); when one differs the
  recording is refused, naming its conditions. --repeats 1 (a long training run
  whose point is not its timings) records one run and says so.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

from .text import slug  # shared with other tools

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures"))
from atomic import write_atomic  # noqa: E402  (a file whole or not at all, as ct_write_file)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tools/ctools/ -> the repository


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""



def machine(device):
    """(device label, driver, cuda, slug) of the machine the run is on."""
    if device.startswith("cuda"):
        name = sh(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
        drv = sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()
        name = name[0] if name else "unknown GPU"
        cuda = re.search(r"release ([0-9.]+)", sh(["nvcc", "--version"]))
        return name, (drv[0] if drv else "unknown"), (cuda.group(1) if cuda else ""), slug(name)
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = os.cpu_count() or 1
    label = f"CPU: {model}, {cores} cores"
    return label, "none (CPU run)", "", "cpu-" + slug(model)


def flagged_timings(metrics_path):
    """(suspect, timed): the timings a run's own plausibility check still flagged, summed over
    its LADDER_timings_suspect / _timed metrics; (0, 0) without metrics."""
    try:
        with open(metrics_path, encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return 0, 0
    count = lambda suffix: int(sum(v for k, v in m.items() if k.endswith(suffix) and isinstance(v, (int, float))))
    return count("_timings_suspect"), count("_timings_timed")


# A timed key: a time, a rate, a speed-up or a ratio of times (its spread over repeats is checked).
RE_TIMED_KEY = re.compile(r"(?:^|_)(?:ms|us|ns|s|sec|seconds|gbs|gflops|tflops|speedup|ratio|per_s|"
                          r"tokens_per_s|throughput)(?:$|_)")


def loadavg():
    """The 1-minute load average (None where the system does not say)."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None


def busy(load, cores, max_load):
    """True when load per core exceeds max_load (an unknown load is not busy)."""
    return load is not None and load / max(cores, 1) > max_load


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def combine(runs):
    """(metrics, spread) from the metrics of repeated runs: each numeric key's median (lists
    element by element, when every run has a list of the same length); other values from the
    first run. spread: {key or key[i]: (max - min) / |median|} for timed keys (RE_TIMED_KEY)."""
    out, spread = dict(runs[0]), {}

    def one(name, values):
        med = median(values)
        if RE_TIMED_KEY.search(name.split("[")[0]) and med:
            spread[name] = (max(values) - min(values)) / abs(med)
        return med

    for key, v in runs[0].items():
        vals = [r.get(key) for r in runs]
        if all(is_num(x) for x in vals):
            m = one(key, vals)
            out[key] = int(m) if all(isinstance(x, int) for x in vals) and float(m).is_integer() else m
        elif all(isinstance(x, list) and len(x) == len(v) for x in vals):
            col = []
            for i in range(len(v)):
                xs = [x[i] for x in vals]
                col.append(one(f"{key}[{i}]", xs) if all(is_num(x) for x in xs) else v[i])
            out[key] = col
    return out, spread


def nearest(runs, medians, spread):
    """The index of the run nearest the medians over the timed keys (sum of |log ratio|)."""
    import math

    def dist(r):
        d = 0.0
        for name in spread:
            key, _, idx = name.partition("[")
            v, m = r.get(key), medians.get(key)
            if idx:
                v, m = v[int(idx[:-1])], m[int(idx[:-1])]
            if is_num(v) and is_num(m) and v > 0 and m > 0:
                d += abs(math.log(v / m))
        return d
    return min(range(len(runs)), key=lambda i: dist(runs[i]))


# `recorded KEY` or `recorded KEY[i]` in the condition of a claim or branch (book/FORMAT.md, "Claims").
RE_RECORDED_KEY = re.compile(r"\brecorded\s+([A-Za-z_]\w*)(?:\[(-?\d+)\])?")
SOURCE_EXTS = (".c", ".cu", ".cuh", ".h", ".md")


def prose_forms(chapter, root=ROOT):
    """The claims and branches of the chapter's sources that read its recording (`recorded KEY`
    in a condition), each as (kind, [condition texts]): ("claim", [c]) or ("if", [c1, c2, ...],
    with None for {{else}}); in file order, each once."""
    from . import weave  # the book's own parser
    forms = []
    for text in chapter_texts(chapter, root):
        for m in re.finditer(r"\{\{\s*(claim|if)\s.*?\{\{\s*end\s*\}\}", text, re.S):
            try:
                parts = weave.parse_claims(m.group(0))
            except weave.ClaimError:
                continue  # tools/weave --check names it
            for block in (p for p in parts if isinstance(p, dict)):
                conds = [" ".join(c.split()) if c is not None else None for c, _, _ in block["branches"]]
                form = (block["kind"], conds)
                if any(c and RE_RECORDED_KEY.search(c) for c in conds) and form not in forms:
                    forms.append(form)
    return forms


def prose_conditions(chapter, root=ROOT):
    """The condition texts of those forms (prose_forms), each once."""
    conds = []
    for _, cs in prose_forms(chapter, root):
        conds += [c for c in cs if c is not None and c not in conds]
    return conds


def printed(forms, metrics):
    """What each form prints over one run's metrics (as its recording; `metric KEY` reads the same
    run): a claim's truth, the index of the branch an {{if}} takes; None where a condition reads
    a key the run lacks."""
    from . import weave  # the book's own grammar and evaluator
    out = []
    sources = {"recorded": metrics, "metric": metrics}
    for kind, conds in forms:
        try:
            if kind == "claim":
                out.append(weave.eval_cond(weave.parse_cond(conds[0]), sources, []))
            else:  # as weave does: the first branch whose condition holds, conditions read in order
                out.append(next(i for i, c in enumerate(conds)
                                if c is None or weave.eval_cond(weave.parse_cond(c), sources, [])))
        except weave.ClaimError:
            out.append(None)
        except StopIteration:
            out.append(len(conds))
    return out


def flipped(forms, runs, kept):
    """The conditions of the first form whose sentence differs between the runs or the medians,
    or that a run cannot evaluate (a key it lacks), joined by ' / '; None when every form prints
    the same sentence in every run."""
    table = [printed(forms, r) for r in runs] + [printed(forms, kept)]
    for i, (_, conds) in enumerate(forms):
        if len({row[i] for row in table}) > 1 or table[0][i] is None:
            return " / ".join(c if c is not None else "else" for c in conds)
    return None


def chapter_texts(chapter, root=ROOT):
    """The text of every source of the chapter (chapters/chNN_*/, .c/.cu/.cuh/.h/.md)."""
    cdir = os.path.join(root, "chapters")
    dirs = [d for d in (os.listdir(cdir) if os.path.isdir(cdir) else []) if d.startswith(chapter + "_")]
    for d in sorted(dirs):
        for dirpath, _, files in os.walk(os.path.join(cdir, d)):
            for fn in sorted(files):
                if fn.endswith(SOURCE_EXTS):
                    with open(os.path.join(dirpath, fn), encoding="utf-8", errors="replace") as f:
                        yield f.read()


def prose_keys(chapter, root=ROOT):
    """{key: set of indices, or None for the whole key}: what the conditions of the claims and
    branches in the chapter's sources (chapters/chNN_*/, every .c/.cu/.cuh/.h/.md) read from
    its recording."""
    keys = {}
    for cond in prose_conditions(chapter, root):
        for m in RE_RECORDED_KEY.finditer(cond):
            key, idx = m.group(1), m.group(2)
            if idx is None:
                keys[key] = None
            elif keys.get(key, set()) is not None:
                keys.setdefault(key, set()).add(int(idx))
    return keys


def checked(spread, keys, runs):
    """The part of spread whose keys are in keys (prose_keys; a negative index counts from
    the end of the first run's list)."""
    out = {}
    for name, v in spread.items():
        key, _, idx = name.partition("[")
        if key not in keys:
            continue
        want = keys[key]
        if want is None or not idx:
            out[name] = v
            continue
        n = len(runs[0][key])
        if int(idx[:-1]) in {i % n for i in want if -n <= i < n}:
            out[name] = v
    return out


def worst_spread(spread):
    """(key, spread) of the widest timed key, or (None, 0.0)."""
    return max(spread.items(), key=lambda kv: kv[1]) if spread else (None, 0.0)


def values_of(runs, name):
    key, _, idx = name.partition("[")
    return [(r[key][int(idx[:-1])] if idx else r[key]) for r in runs]


def parse_args(argv):
    p = argparse.ArgumentParser(description="Record a chapter's output for the book.")
    p.add_argument("chapter", help="chNN")
    p.add_argument("flags", nargs="*", help="the chapter's flags (after --)")
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default build/)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--out-dir", default=os.path.join(ROOT, "book", "recorded"),
                   help="where the transcript and its metrics go (default: book/recorded/)")
    p.add_argument("--tag", default="", help="keeps a second run apart: chNN-<machine>-TAG-<date>.txt (default: none)")
    p.add_argument("--keep-flagged", action="store_true",
                   help="keep a run whose own timing check flagged implausible timings")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs of the chapter; the metrics kept are per-key medians (default 3)")
    p.add_argument("--max-load", type=float, default=0.5,
                   help="refuse to start above this 1-minute load average per core (default 0.5)")
    p.add_argument("--allow-busy", action="store_true",
                   help="record on a busy machine anyway (the transcript's header says so)")
    p.add_argument("--max-spread", type=float, default=0.10,
                   help="keep no run whose timed keys vary by more than this fraction of their median "
                        "over the repeats (default 0.10)")
    p.add_argument("--check-all", action="store_true",
                   help="check the spread of every timed key, not only those the chapter's prose reads")
    p.add_argument("--keep-noisy", action="store_true",
                   help="keep a run whose spread exceeds --max-spread (the header says so)")
    p.add_argument("--commit", default=os.environ.get("CT_COMMIT") or sh(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"]),
                   help="the commit the transcript names (default: $CT_COMMIT, else git's HEAD)")
    a = p.parse_args(argv)
    if not re.match(r"^ch\d\d$", a.chapter):
        p.error(f"expected a chapter id like ch06, got {a.chapter!r}")
    if a.repeats < 1:
        p.error(f"--repeats takes a count of at least 1, got {a.repeats}")
    if a.tag and not re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", a.tag):
        p.error(f"--tag takes lower-case letters, digits and '-', got {a.tag!r}")
    return a


def run_repeats(a, exe, shown):
    """(runs, outs, status): the metrics of each good run, (rc, output) of each run, and a
    non-None exit status when a run's own timing check refused the recording."""
    runs, outs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(a.repeats):
            metrics = os.path.join(tmp, f"metrics{k}.json")
            cmd = [exe, "--device", a.device] + a.flags + ["--metrics", metrics]
            print(f"record: {shown}" + (f" (run {k + 1} of {a.repeats})" if a.repeats > 1 else ""),
                  file=sys.stderr)
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp)
            outs.append((proc.returncode, proc.stdout.decode("utf-8", "replace")))
            suspect, timed = flagged_timings(metrics)
            if suspect and not a.keep_flagged:
                print(f"record: {a.chapter}'s own timing check flagged {suspect} of {timed} timings as implausible "
                      "(the machine was busy, or its clock too coarse): nothing kept. Record again on a quiet "
                      "machine, or pass --keep-flagged to keep it anyway.", file=sys.stderr)
                return runs, outs, 3
            if os.path.exists(metrics):
                with open(metrics, encoding="utf-8") as f:
                    runs.append(json.load(f))  # only a valid JSON file is kept
            if proc.returncode != 0 or not os.path.exists(metrics):
                break  # a failed run is recorded as it is, without repeats
    return runs, outs, None


def summarize(a, runs, outs):
    """(pick, kept, repeat_words, status): the transcript's run, the metrics kept, the header's
    repeats line, and a non-None exit status when the spread refuses the recording."""
    pick, kept = len(outs) - 1, runs[-1] if runs else None
    if len(runs) == len(outs) and len(runs) > 1:
        kept, spread = combine(runs)
        pick = nearest(runs, kept, spread)
        keys = None if a.check_all else prose_keys(a.chapter)
        watched = spread if keys is None else checked(spread, keys, runs)
        key, worst = worst_spread(watched)
        same = ""
        if worst > a.max_spread and not a.keep_noisy:
            forms = [] if keys is None else prose_forms(a.chapter)
            flip = flipped(forms, runs, kept) if forms else "(no condition read)"
            vals = ", ".join(f"{v:.4g}" for v in values_of(runs, key))
            if flip is not None:
                why = (f"; the prose's sentence for '{flip}' differs between them (or reads a key they lack)"
                       if forms else "")
                print(f"record: {a.chapter}'s timings vary too much over {len(runs)} runs: {key} spread "
                      f"{worst:.0%} (values {vals}; limit {a.max_spread:.0%}){why}: nothing kept. Record on a "
                      "quieter machine, or pass --keep-noisy to keep it anyway.", file=sys.stderr)
                return pick, kept, None, 5
            what = "its one claim or branch prints" if len(forms) == 1 else \
                f"each of its {len(forms)} claims and branches prints"
            same = (f", above {a.max_spread:.0%}, but {what} the same sentence in every run and in the "
                    "medians: kept")
        all_key, all_worst = worst_spread(spread)
        kept.update(record_repeats=len(runs), record_spread=spread, record_spread_max=all_worst,
                    record_spread_checked=sorted(watched), record_spread_checked_max=worst)
        scope = ("every timed key" if keys is None else
                 f"the {len(watched)} timed value{'' if len(watched) == 1 else 's'} the prose interprets" if watched else
                 "the prose interprets no timed value of this run")
        words = (f"{len(runs)} (metrics: each key's median; output: run {pick + 1}, the one nearest "
                 f"the medians); checked ({scope}): widest spread {worst:.1%}" + (f" ({key})" if key else "") +
                 (same or (f", above {a.max_spread:.0%}: kept with --keep-noisy" if worst > a.max_spread else "")) +
                 (f"; widest of all timed values {all_worst:.1%} ({all_key})" if all_key and all_key != key else ""))
        return pick, kept, words, None
    if kept is not None:
        kept.update(record_repeats=1)
        return pick, kept, "1 (one run: no median, no spread)", None
    return pick, kept, None, None


def write_outputs(base, text, kept):
    """The transcript and its metrics, each whole or not at all (tools/fixtures/atomic.py:
    a random O_EXCL temporary, so a link planted beside them is never followed)."""
    write_atomic(base + ".txt", lambda f: f.write(text.encode("utf-8")))
    if kept is not None:
        write_atomic(base + ".json", lambda f: f.write((json.dumps(kept, indent=1) + "\n").encode("utf-8")))


def main(argv):
    a = parse_args(argv)
    exe = os.path.abspath(os.path.join(a.build, a.chapter))
    if not os.access(exe, os.X_OK):
        sys.exit(f"record: no binary {exe}: build it first (cmake --build {a.build} --target {a.chapter}_...)")
    label, driver, cuda, mslug = machine(a.device)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    os.makedirs(a.out_dir, exist_ok=True)
    base = os.path.join(a.out_dir, f"{a.chapter}-{mslug}{'-' + a.tag if a.tag else ''}-{date}")
    cores = os.cpu_count() or 1
    load0 = loadavg()
    if busy(load0, cores, a.max_load) and not a.allow_busy:
        print(f"record: the machine is busy: 1-minute load average {load0:.2f} on {cores} cores "
              f"({load0 / cores:.2f} per core, limit {a.max_load:.2f}): nothing run. Record on a quiet "
              "machine, or pass --allow-busy (the transcript's header then says so).", file=sys.stderr)
        return 4
    shown = " ".join([f"./{a.chapter}", "--device", a.device] + a.flags)
    runs, outs, status = run_repeats(a, exe, shown)
    if status is not None:
        return status
    load1 = loadavg()
    fmt = lambda x: "unknown" if x is None else f"{x:.2f}"
    load_words = f"{fmt(load0)} before, {fmt(load1)} after (1-minute load average, {cores} cores)"
    if busy(load0, cores, a.max_load):
        load_words += f"; busy (above {a.max_load:.2f} per core): kept with --allow-busy"
    pick, kept, repeat_words, status = summarize(a, runs, outs)
    if status is not None:
        return status
    rc, out = outs[pick]
    header = [("chapter", a.chapter), ("device", label), ("driver", driver)] + ([("cuda", cuda)] if cuda else [])
    header += [("date", date), ("command", shown), ("commit", a.commit or "unknown"), ("exit", str(rc)),
               ("load", load_words)] + ([("repeats", repeat_words)] if repeat_words else [])
    write_outputs(base, "".join(f"# {k}: {v}\n" for k, v in header) + "\n" + out, kept)
    print(f"record: wrote {base}.txt (exit {rc})")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
