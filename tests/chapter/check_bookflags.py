# SPDX-License-Identifier: MIT
"""check_bookflags: the flags the book passes, and the flags --help explains.

    check_bookflags.py flags ROOT WORK PYTHON chNN=PROGRAM ...
    check_bookflags.py help  ROOT WORK PYTHON chNN=PROGRAM ...
    check_bookflags.py twin-cuda ROOT WORK PYTHON chNN

flags (chapter.book_flags, label chapter): for every chapter whose source has a
    '/*md bookrun FLAGS*/' line (or a '/*md bookrun-zh FLAGS*/' line: its flags are run too,
    added to the bookrun ones), the C program and its PyTorch twin each run with those flags
    (read by tools/book's own discover_chapters, not a copy of it), then --quick, then the
    workload bounds below, then --metrics FILE, each in a fresh folder under WORK; the test
    fails when either exits non-zero (a flag one of them does not take exits 2 at once) or
    writes no --metrics file; a FILE the book asks for (ch14's --profile) must be written.
    Explicit sizes override --quick in every chapter (./ch14 --quick --max-iters 300 runs 300
    steps), so the bounds restate --quick's own sizes last (the last value of a flag wins in
    the C programs and in argparse): the runs are --quick's workload, seconds each.
help (book.help, label book): every chapter's --help, and every twin's, lists each flag the
    chapter's source declares (its ct_cli_opt names; the twin's own argparse flags) and every
    flag of its bookrun line, and every flag that takes a value shows its default
    ("(default: ...)").
twin-cuda (gpu.chNN_twin_cuda, label gpu; tools/gpu-check's test stage runs them): chapter
    chNN's twin on the GPU, --device cuda with the book's flags, --quick and the bounds above
    (ch08's twin with --nproc set to the GPUs there are, at most 2: NCCL takes one GPU per
    rank); exit 77 where there is no GPU or PYTHON's torch sees none.
Where PYTHON cannot import torch the twins' parts are left out and the test exits 77 after
the C programs' parts passed. Python 3's standard library only.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaptertest import expect, fail, run, skip  # noqa: E402,F401

# --quick's own sizes, appended after --quick so the bookrun flags' larger ones do not win
# (the chapters document --quick as these: ch06/ch08 "1 epoch of 2560 images", ch07 20 steps,
# ch14's quick preset 40 steps evaluated every 20).
QUICK_BOUNDS = {
    "ch06": ["--epochs", "1", "--train-size", "2560"],
    "ch07": ["--steps", "20"],
    "ch08": ["--epochs", "1", "--train-size", "2560"],
    "ch14": ["--max-iters", "40", "--eval-interval", "20"],
}
# flags whose value names a file the program writes (the book's --profile FILE)
OUTPUT_FLAGS = {"--profile"}


def load_book(root):
    sys.path.insert(0, os.path.join(root, "tools"))
    from ctools import book
    return book


def torch_ok(python):
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def outputs_of(flags):
    return [flags[i + 1] for i, f in enumerate(flags[:-1]) if f in OUTPUT_FLAGS]


def check_run(tag, cmd, cwd, metrics, outputs, timeout=280):
    print("$ (in %s)" % cwd, " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    expect(r.returncode == 0, f"{tag}: exit status {r.returncode} with the book's flags", r)
    expect(os.path.getsize(os.path.join(cwd, metrics)) > 0 if os.path.exists(os.path.join(cwd, metrics)) else False,
           f"{tag}: no --metrics file {metrics} written", r)
    for out in outputs:
        path = os.path.join(cwd, out)
        expect(os.path.exists(path) and os.path.getsize(path) > 0, f"{tag}: {out} (a file the book asks for) not written", r)
        if out.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                trace = json.load(f)
            events = trace.get("traceEvents") if isinstance(trace, dict) else trace
            expect(isinstance(events, list) and events, f"{tag}: {out} holds no trace events", r)
    print(f"ok {tag}")


def mode_flags(root, work, python, progs):
    book = load_book(root)
    have_torch = torch_ok(python)
    env_note = [] if have_torch else [f"{python} cannot import torch: the twins were not run"]
    chapters = [c for c in book.discover_chapters() if c["bookrun"] or c["editions"]]
    expect(chapters, "no chapter has a bookrun line (tools/book's discover_chapters found none)")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for ch in chapters:
        cid = ch["id"]
        expect(cid in progs, f"{cid} has a bookrun line but no program was passed to the test")
        for book_flags in [ch["bookrun"]] + [ch["bookrun"] + extra for extra in ch["editions"].values()]:
            flags = book_flags + ["--quick"] + QUICK_BOUNDS.get(cid, [])
            outputs = outputs_of(book_flags)
            d = tempfile.mkdtemp(prefix=cid + "_", dir=work)
            check_run(f"./{cid} {' '.join(book_flags)}", [progs[cid]] + flags + ["--metrics", f"{cid}.json"], d,
                      f"{cid}.json", outputs)
            if not os.path.exists(ch["twin"]) or not have_torch:
                continue
            d = tempfile.mkdtemp(prefix=cid + "_twin_", dir=work)
            check_run(f"{os.path.basename(ch['twin'])} {' '.join(book_flags)}",
                      [python, ch["twin"]] + flags + ["--metrics", f"{cid}_pytorch.json"], d, f"{cid}_pytorch.json",
                      outputs)
    if env_note:
        skip("; ".join(env_note) + " (the C programs passed)")


# ---------------------------------------------------------------------------
# help

def declared_c_flags(src):
    """The ct_cli_opt names of a chapter's source: {"name", CT_OPT_..."""
    with open(src, encoding="utf-8") as f:
        text = f.read()
    return {"--" + m.group(1) for m in re.finditer(r'\{\s*"([a-z0-9][a-z0-9-]*)"\s*,\s*CT_OPT_\w+', text)}


def value_flags_of_c(src):
    with open(src, encoding="utf-8") as f:
        text = f.read()
    return {"--" + m.group(1) for m in re.finditer(r'\{\s*"([a-z0-9][a-z0-9-]*)"\s*,\s*CT_OPT_(?!FLAG)\w+', text)}


def help_entries(text):
    """{"--flag": its help text (the flag's line and its continuation lines)} of a --help output."""
    entries, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^\s{1,8}((?:-\w, )?(--[a-z0-9][a-z0-9-]*))(.*)$", line)
        if m:
            cur = m.group(2)
            entries[cur] = m.group(3)
        elif cur and line.startswith(" " * 4) and line.strip():
            entries[cur] += " " + line.strip()
        elif not line.strip() or not line.startswith(" "):
            cur = None
    return entries


def check_help(tag, cmd, must_list, value_flags, errors):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        errors.append(f"{tag}: --help exited {r.returncode}: {r.stderr.strip()[-300:]}")
        return
    entries = help_entries(r.stdout)
    for flag in sorted(must_list):
        if flag not in entries:
            errors.append(f"{tag}: --help does not list {flag}")
    for flag in sorted(value_flags):
        text = entries.get(flag)
        if text is not None and "default" not in text:
            errors.append(f"{tag}: --help's {flag} line gives no default: {text.strip()!r}")
    print(f"checked {tag}: {len(entries)} flags listed")


def mode_help(root, work, python, progs):
    book = load_book(root)
    have_torch = torch_ok(python)
    errors = []
    for ch in book.discover_chapters():
        cid = ch["id"]
        expect(cid in progs, f"{cid}: no program passed to the test")
        declared = declared_c_flags(ch["source"])
        bookrun = {f for f in ch["bookrun"] if f.startswith("--")}
        values = value_flags_of_c(ch["source"]) | {"--device", "--seed"}
        check_help(f"./{cid} --help", [progs[cid], "--help"], declared | bookrun | {"--device", "--seed", "--quick",
                   "--metrics"}, values, errors)
        if have_torch and os.path.exists(ch["twin"]):
            r = subprocess.run([python, ch["twin"], "--help"], capture_output=True, text=True, timeout=120)
            # the twin's own flags: every "--name VALUE" / "--name" its usage line shows
            usage = r.stdout.split("\n\n")[0]
            own = set(re.findall(r"\[(--[a-z0-9][a-z0-9-]*)", usage))
            own_values = set(re.findall(r"\[(--[a-z0-9][a-z0-9-]*) [A-Z_{]", usage))
            check_help(f"{os.path.basename(ch['twin'])} --help", [python, ch["twin"], "--help"],
                       own | bookrun | {"--device", "--seed", "--quick", "--metrics"}, own_values - {"--metrics"}, errors)
    if errors:
        fail("\n".join(errors))
    if not have_torch:
        skip(f"{python} cannot import torch: the twins' --help was not checked (the chapters' passed)")


def mode_twin_cuda(root, work, python, cid):
    from chaptertest import has_gpu, skip_unless_imports, torch_cuda_available
    skip_unless_imports(python, "torch")
    if not has_gpu():
        skip("no GPU here (nvidia-smi lists none, no /dev/nvidia*)")
    if not torch_cuda_available(python):
        fail(f"this machine has a GPU but {python}'s torch sees none (torch.cuda.is_available() is false)")
    book = load_book(root)
    ch = next((c for c in book.discover_chapters([cid]) if os.path.exists(c["twin"])), None)
    expect(ch is not None, f"{cid}: no chapter with a twin")
    flags = ch["bookrun"] + ["--quick"] + QUICK_BOUNDS.get(cid, []) + ["--device", "cuda"]
    if cid == "ch08":
        gpus = subprocess.run([python, "-c", "import torch; print(torch.cuda.device_count())"],
                              capture_output=True, text=True).stdout.strip()
        flags += ["--nproc", str(min(2, int(gpus or 1)))]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check_run(f"{os.path.basename(ch['twin'])} --device cuda", [python, ch["twin"]] + flags +
              ["--metrics", f"{cid}_pytorch.json"], work, f"{cid}_pytorch.json", outputs_of(ch["bookrun"]))


def main(argv):
    if len(argv) == 6 and argv[1] == "twin-cuda":
        mode_twin_cuda(argv[2], os.path.abspath(argv[3]), argv[4], argv[5])
        return 0
    if len(argv) < 5 or argv[1] not in ("flags", "help"):
        fail(__doc__)
    mode, root, work, python = argv[1:5]
    progs = dict(a.split("=", 1) for a in argv[5:])
    if mode == "flags":
        mode_flags(root, os.path.abspath(work), python, progs)
    else:
        mode_help(root, os.path.abspath(work), python, progs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
