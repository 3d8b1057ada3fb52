# SPDX-License-Identifier: MIT
"""check_badinput: the bad-input catalogue (tests/BADINPUT.md), run on the real chapter programs.

    check_badinput.py MODE WORK chNN=PROGRAM ...

Each MODE is one ctest (`chapter.badinput_MODE`, label chapter; `gpu.badinput`, label gpu):

    data        ch06 --data on folders made here (a small valid Fashion-MNIST, then the same with
                one file broken): missing folder, truncated gzip, truncated payload, wrong IDX
                magic, wrong element type, wrong dimensions, image/label count mismatch, a label
                that is not a class, an empty file, a directory in place of a file
    checkpoint  ch06 --load of a checkpoint ch06 saved, damaged or foreign: truncated, header
                length past the end, malformed JSON, unknown dtype, overlapping and out-of-range
                data offsets, a tensor missing, another size, the "module." prefix, another
                model, a text file, an empty file, a missing file, a directory
    device      every chapter: --device gpu, cuda:-1, cuda:01, "" (exit 2); cuda:99, and cuda
                where there is no GPU (exit 1: an error, never a silent CPU run); ch07
                --devices cuda:99; ch08 --backend nccl with more ranks than GPUs
    sizes       zero and negative sizes (exit 2); a batch larger than the data set (ch05, ch06
                train on one batch, as PyTorch's DataLoader does; ch07 starts a new epoch
                whenever one runs out; ch08 exits 1 with the numbers); a model too large for memory (the out-of-memory error with its numbers)
    numerics    a learning rate that makes the loss diverge: ch05 and ch06 exit 1 naming the
                step, checked against an independent float64 simulation (ch05) and against a
                run stopped one step earlier whose losses are all finite (ch06); ch05
                --load-init with NaN in the data
    files       every chapter: an unknown flag, a missing or non-numeric value, --quick=yes
                (exit 2); --metrics and every FILE flag into a missing folder, a read-only
                folder, /dev/full, a full file system, onto a directory or a socket (exit 1,
                before the work: no "device:" line); a symbolic link, a FIFO with a reader and
                /dev/null written through and left what they were; a FIFO without a reader
    outputs     issue 23: two flags naming one file (every chapter, every FILE flag; links, other
                spellings; an output naming an input), links planted at the old temporary names,
                folders too long, FIFOs/devices/folders as inputs, a --save-init file given to
                ch14 --resume/--generate, ch13 with a C compiler that hangs
    gpu         (label gpu; exit 77 without a GPU) cuda:N past the count; ch08 --backend nccl
                with one rank more than there are GPUs

Every refused run is checked the same way (refused()): its exit code; its stderr names the
problem and the fix (the needles of each case); no traceback, sanitizer report or signal; and the
folders it could write to (the run's working folder and the folder holding its outputs, where
an existing --metrics file waits) are unchanged, file for file and byte for byte, with no
FILE.tmp.* temporary left. Python 3's standard library only.
"""
import gzip
import hashlib
import json
import math
import os
import random
import re
import shutil
import socket
import stat
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaptertest  # noqa: E402
from chaptertest import expect, fail, has_gpu, run, skip  # noqa: E402

FLT_MAX = 3.4028234663852886e38
CRASH_MARKS = ("Traceback", "Sanitizer", "runtime error:", "Segmentation fault", "core dumped", "Aborted")


# ---- what a refused run must leave --------------------------------------------------------------

def snapshot(*dirs):
    """{path: (kind, size, sha256 or link target)} of everything under dirs (links not followed)."""
    out = {}
    for d in dirs:
        for root, subdirs, files in os.walk(d):
            for name in subdirs + files:
                p = os.path.join(root, name)
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode):
                    with open(p, "rb") as f:
                        out[p] = ("file", st.st_size, hashlib.sha256(f.read()).hexdigest())
                elif stat.S_ISLNK(st.st_mode):
                    out[p] = ("link", 0, os.readlink(p))
                else:
                    out[p] = (stat.S_IFMT(st.st_mode), 0, "")
    return out


def expect_no_crash(r, what):
    """No signal, no traceback, no sanitizer report."""
    expect(r.returncode >= 0, f"{what}: killed by signal {-r.returncode}", r)
    for mark in CRASH_MARKS:
        expect(mark not in r.stderr, f"{what}: {mark!r} on stderr", r)


def refused(cmd, code, needles, watch, what, before_work=False, cwd=None, absent=(), env=None):
    """Run cmd, which must be refused: exit `code`, every needle in stderr, no crash, the folders
    in `watch` unchanged and the paths in `absent` not created. before_work: the refusal comes
    before the chapter starts (no "device:" line, no section). Returns the run."""
    before = snapshot(*watch)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=280, cwd=cwd, env=env)
    print(f"$ {' '.join(cmd)}\n  -> exit {r.returncode}: {r.stderr.strip().splitlines()[-1:]}", flush=True)
    expect_no_crash(r, what)
    expect(r.returncode == code, f"{what}: exit code {r.returncode}, expected {code}", r)
    for n in needles:
        expect(n in r.stderr, f"{what}: stderr does not say {n!r}", r)
    if before_work:
        expect("device:" not in r.stdout and "== " not in r.stdout, f"{what}: the chapter ran before failing", r)
    after = snapshot(*watch)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    expect(not changed, f"{what}: files created, changed or removed: {changed}", r)
    for p in absent:
        expect(not os.path.lexists(p), f"{what}: {p} was created", r)
    return r


def ok_run(cmd, what, cwd=None):
    """Run cmd, which must succeed."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=280, cwd=cwd)
    print(f"$ {' '.join(cmd)}\n  -> exit {r.returncode}", flush=True)
    expect_no_crash(r, what)
    expect(r.returncode == 0, f"{what}: exit code {r.returncode}, expected 0", r)
    return r


class Work:
    """WORK/MODE, with out/ (an existing --metrics file, keep.json) and cwd/ (where programs run)."""

    def __init__(self, work, mode):
        self.root = os.path.join(work, mode)
        if os.path.isdir(os.path.join(self.root, "readonly")) and os.geteuid() == 0:  # a run cut short
            subprocess.run(["chattr", "-i", os.path.join(self.root, "readonly")], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
        self.out = os.path.join(self.root, "out")
        self.cwd = os.path.join(self.root, "cwd")
        os.makedirs(self.out)
        os.makedirs(self.cwd)
        self.keep = os.path.join(self.out, "keep.json")
        with open(self.keep, "w") as f:
            f.write('{"written": "before the run"}\n')

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def refused(self, cmd, code, needles, what, **kw):
        """refused() watching out/ and cwd/, run in cwd/."""
        watch = [self.out, self.cwd] + kw.pop("watch", [])
        return refused(cmd, code, needles, watch, what, cwd=self.cwd, **kw)

    def ok(self, cmd, what):
        return ok_run(cmd, what, cwd=self.cwd)


# ---- a small Fashion-MNIST of our own -----------------------------------------------------------

FILES = {"ti": "train-images-idx3-ubyte.gz", "tl": "train-labels-idx1-ubyte.gz",
         "vi": "t10k-images-idx3-ubyte.gz", "vl": "t10k-labels-idx1-ubyte.gz"}


def idx(code, dims, payload):
    """An IDX file: 00 00, the element type, the number of dims, each dim big-endian, the bytes."""
    return bytes([0, 0, code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + payload


def fake_set(n_train=256, n_test=64, seed=6):
    """{file key: IDX bytes} of a valid Fashion-MNIST in miniature (random pixels, label i % 10)."""
    rng = random.Random(seed)
    out = {}
    for k, n in (("t", n_train), ("v", n_test)):
        out[k + "i"] = idx(0x08, [n, 28, 28], bytes(rng.randrange(256) for _ in range(n * 784)))
        out[k + "l"] = idx(0x08, [n], bytes(i % 10 for i in range(n)))
    return out


def write_set(d, files, raw=()):
    """The four files of `files` into folder d, gzip'd (those named in raw written as they are);
    a value None makes a directory of that name."""
    os.makedirs(d, exist_ok=True)
    for k, data in files.items():
        p = os.path.join(d, FILES[k])
        if data is None:
            os.makedirs(p)
        elif k in raw:
            with open(p, "wb") as f:
                f.write(data)
        else:
            with gzip.open(p, "wb", compresslevel=1) as f:
                f.write(data)
    return d


# ---- safetensors, by hand (struct and json) ----------------------------------------------------

def st_read(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def st_write(path, header, data, hlen=None):
    """header (a dict) and data as a safetensors file; hlen overrides the length field."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text) if hlen is None else hlen) + text + data)


def st_tensors(path):
    """[(name, dtype, shape, bytes)] in data order."""
    header, data = st_read(path)
    ts = [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
          for k, v in header.items() if k != "__metadata__"]
    return sorted(ts, key=lambda t: header[t[0]]["data_offsets"][0])


def st_pack(path, tensors):
    """[(name, dtype, shape, bytes)] as a safetensors file, back to back."""
    header, at = {}, 0
    for name, dt, shape, b in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + len(b)]}
        at += len(b)
    st_write(path, header, b"".join(t[3] for t in tensors))


def f32_values(b):
    return list(struct.unpack(f"<{len(b) // 4}f", b))


# ---- the chapters -------------------------------------------------------------------------------

def chapters_of(args):
    """{"ch06": path, ...} from the chNN=PROGRAM arguments."""
    out = {}
    for a in args:
        m = re.fullmatch(r"(ch\d\d)[^=]*=(.+)", a)
        if not m:
            fail(f"argument {a!r} is not chNN=PROGRAM")
        out[m.group(1)] = m.group(2)
    return out


def need(chs, *names):
    for n in names:
        if n not in chs:
            fail(f"this mode needs {n}=PROGRAM among the arguments")
    return [chs[n] for n in names]


def file_flags(prog):
    """The flags that name a file the program writes: --metrics and those its --help shows as FILE."""
    r = run([prog, "--help"])
    expect(r.returncode == 0, f"{prog} --help: exit code {r.returncode}", r)
    return ["--metrics"] + [f for f in re.findall(r"^\s+(--[\w-]+) FILE\b", r.stdout, re.M) if f != "--metrics"]


# ---- modes --------------------------------------------------------------------------------------

def cmd_data(work, *args):
    (ch06,) = need(chapters_of(args), "ch06")
    w = Work(work, "data")
    good = fake_set()
    base = [ch06, "--device", "cpu", "--quick", "--max-steps", "2", "--metrics", w.keep]
    ok_dir = write_set(w.path("data", "valid"), good)
    # The control: the valid folder trains (so each failure below is its broken file's).
    fresh = w.path("out-ok.json")
    w.ok([ch06, "--device", "cpu", "--quick", "--max-steps", "2", "--data", ok_dir, "--metrics", fresh], "valid set")
    chaptertest.load_metrics(fresh)
    fix = "or pass --data DIR"
    missing = w.path("data", "no-such-folder")
    w.refused(base + ["--data", missing], 1, [missing, "No such file or directory", "dataset-fashion-mnist", fix],
              "missing folder")
    ti = good["ti"]
    gz_ti = gzip.compress(ti, compresslevel=1)
    cases = [
        ("truncated-gzip", {"ti": gz_ti[:len(gz_ti) // 2]}, ["ti"],
         ["corrupt gzip data", "unexpected end of file", "--reinstall dataset-fashion-mnist"]),
        ("truncated-payload", {"ti": ti[:len(ti) - 100]}, [], ["truncated", "--reinstall dataset-fashion-mnist"]),
        ("magic", {"ti": b"\x12\x34" + ti[2:]}, [], ["not an IDX file (magic starts 12 34"]),
        ("element-type", {"ti": ti[:2] + b"\x0c" + ti[3:16] + bytes(len(ti) - 16) * 4}, [],
         ["expected u8 images (N, 28, 28), got int32 of shape (256, 28, 28)"]),
        ("dims", {"ti": idx(0x08, [256, 28, 27], ti[16:16 + 256 * 28 * 27])}, [],
         ["expected u8 images (N, 28, 28), got uint8 of shape (256, 28, 27)"]),
        ("flat", {"ti": idx(0x08, [256, 784], ti[16:])}, [],
         ["expected u8 images (N, 28, 28), got uint8 of shape (256, 784)"]),
        ("label-dims", {"tl": idx(0x08, [256, 1], good["tl"][8:])}, [],
         ["expected u8 labels (N), got uint8 of shape (256, 1)"]),
        ("count", {"tl": idx(0x08, [255], good["tl"][8:-1])}, [], ["has 256 images but", "has 255 labels"]),
        ("label-value", {"tl": good["tl"][:-1] + b"\x0a"}, [], ["label 10 at index 255 is not a class (0..9)"]),
        ("empty", {"ti": b""}, ["ti"], ["truncated IDX file: 0 of the 4 magic bytes"]),
        ("empty-gzip", {"ti": b""}, [], ["truncated gzip'd IDX file: 0 of the 4 magic bytes"]),
        ("directory", {"ti": None}, [], ["is a directory, not a file", "dataset-fashion-mnist"]),
        ("test-set", {"vi": b"\x00\x00\x08\x03" + b"\x00\x00\x00\x05"}, [], ["t10k-images-idx3-ubyte.gz", "truncated"]),
    ]
    for name, broken, raw, needles in cases:
        d = write_set(w.path("data", name), {**good, **broken}, raw)
        w.refused(base + ["--data", d], 1, needles + [fix], f"--data {name}", watch=[d])
    print(f"PASS: {len(cases) + 1} broken data sets refused, each naming its file and the fix")


def cmd_checkpoint(work, *args):
    (ch06,) = need(chapters_of(args), "ch06")
    w = Work(work, "checkpoint")
    data = write_set(w.path("data"), fake_set())
    run06 = [ch06, "--device", "cpu", "--quick", "--data", data]
    ck = lambda name: w.path(name)  # noqa: E731
    w.ok(run06 + ["--max-steps", "1", "--save", ck("cnn.safetensors")], "save the CNN")
    w.ok(run06 + ["--max-steps", "1", "--model", "mlp", "--save", ck("mlp.safetensors")], "save the MLP")
    w.ok(run06 + ["--max-steps", "1", "--channels", "8", "--save", ck("cnn8.safetensors")], "save a narrower CNN")
    w.ok(run06 + ["--load", ck("cnn.safetensors")], "load the CNN's own checkpoint")
    with open(ck("cnn.safetensors"), "rb") as f:
        blob = f.read()
    header, payload = st_read(ck("cnn.safetensors"))
    tensors = st_tensors(ck("cnn.safetensors"))
    names = [t[0] for t in tensors]
    expect(names[:2] == ["0.weight", "0.bias"] and names[-1] == "10.bias", f"the CNN's keys {names}")

    def write(name, data):
        with open(ck(name), "wb") as f:
            f.write(data)
        return ck(name)

    def edited(name, key, **changes):
        h = json.loads(json.dumps(header))
        h[key].update(changes)
        st_write(ck(name), h, payload)
        return ck(name)

    w0, b0 = header["0.weight"]["data_offsets"], header["0.bias"]["data_offsets"]
    end = len(payload)
    last = header["10.bias"]["data_offsets"]
    js = blob[8:].replace(b":", b";", 1)
    missing = ck("no-such.safetensors")
    os.makedirs(ck("a-folder.safetensors"), exist_ok=True)
    cases = [
        ("truncated", write("truncated.safetensors", blob[:len(blob) // 2]), ["truncated", "save it again"]),
        ("header length", write("hlen.safetensors", struct.pack("<Q", len(blob)) + blob[8:]),
         ["runs past the end of the file", "not safetensors"]),
        ("malformed JSON", write("json.safetensors", blob[:8] + js), ["bad JSON header", "re-save it"]),
        ("unknown dtype", edited("dtype.safetensors", "0.weight", dtype="F8_E4M3"),
         ['"F8_E4M3", which ct does not support', "convert it in PyTorch"]),
        ("overlapping offsets", edited("overlap.safetensors", "0.bias", data_offsets=[w0[0], w0[0] + b0[1] - b0[0]]),
         ["overlap", "0.bias"]),
        ("offsets past the end", edited("range.safetensors", "10.bias", data_offsets=[end, end + last[1] - last[0]]),
         ["past the end", "10.bias"]),
        ("a tensor missing", st_pack(ck("missing.safetensors"), tensors[:-1]) or ck("missing.safetensors"),
         ['Missing key(s) in state_dict: "10.bias".', "it is incomplete or from another model"]),
        ("another size", ck("cnn8.safetensors"),
         ["size mismatch for 0.weight: copying a param with shape (8, 1, 3, 3) from checkpoint, the shape in "
          "current model is (16, 1, 3, 3)", "another size"]),
        ('"module." prefix', st_pack(ck("module.safetensors"), [("module." + n, *rest) for n, *rest in tensors])
         or ck("module.safetensors"),
         ['Unexpected key(s) in state_dict: "module.0.weight"', 'the prefix "module."',
          'ct_consume_prefix_in_state_dict_if_present(entries, n, "module.")']),
        ("another model", ck("mlp.safetensors"),
         ['Missing key(s) in state_dict: "0.weight"', 'Unexpected key(s) in state_dict: "1.weight"',
          "another model's state_dict"]),
        ("a text file", write("text.safetensors", b"these are words, not tensors\n"),
         ["above the format's limit", "not a safetensors file"]),
        ("an empty file", write("empty.safetensors", b""), ["0 bytes, too short for a safetensors file"]),
        ("a missing file", missing, ["cannot open: No such file or directory", "give the path of a safetensors file"]),
        ("a directory", ck("a-folder.safetensors"), ["a directory, not a file", "give the path of a safetensors file"]),
    ]
    for what, path, needles in cases:
        r = w.refused(run06 + ["--load", path, "--metrics", w.keep], 1, [path] + needles, f"--load {what}",
                      absent=[] if what != "a missing file" else [missing])
        expect("== accuracy ==" not in r.stdout, f"--load {what}: evaluated anyway", r)
    print(f"PASS: {len(cases)} damaged or foreign checkpoints refused with their problem and fix")


def cmd_device(work, *args):
    chs = chapters_of(args)
    w = Work(work, "device")
    gpu = has_gpu()
    for name, prog in sorted(chs.items()):
        for spec in ("gpu", "cuda:-1", "cuda:01", "CUDA", ""):
            w.refused([prog, "--quick", "--device", spec, "--metrics", w.keep], 2,
                      ["--device expects auto, cpu, cuda or cuda:N", f'"{spec}"', "usage:"],
                      f"{name} --device {spec!r}", before_work=True)
        asks = ["cuda:99"] + ([] if gpu else ["cuda", "cuda:0"])
        for spec in asks:
            why = "out of range" if gpu else "CUDA unavailable: "
            r = w.refused([prog, "--quick", "--device", spec, "--metrics", w.keep], 1, [f"--device {spec}", why],
                          f"{name} --device {spec}")
            expect("device:" not in r.stdout, f"{name} --device {spec}: ran on another device instead", r)
    if "ch07" in chs:
        w.refused([chs["ch07"], "--quick", "--device", "cpu", "--devices", "cpu,cuda:99", "--out-dir", w.out,
                   "--metrics", w.keep], 1, ["cuda:99"], "ch07 --devices cpu,cuda:99")
    if "ch08" in chs and not gpu:
        # Two ranks and no GPU: NCCL refuses (a CPU-only build has no NCCL at all).
        r = w.refused([chs["ch08"], "--quick", "--device", "cpu", "--backend", "nccl", "--metrics", w.keep], 1,
                      ["launch: the job failed"], "ch08 --backend nccl without a GPU")
        expect("NCCL takes one GPU per rank" in r.stderr or "this build has no NCCL" in r.stderr,
               "ch08 --backend nccl: the message must say NCCL needs a GPU per rank", r)
    print(f"PASS: malformed and absent devices refused by {len(chs)} chapters" + (" (GPU machine)" if gpu else ""))


def cmd_sizes(work, *args):
    chs = chapters_of(args)
    ch05, ch06, ch07, ch08 = need(chs, "ch05", "ch06", "ch07", "ch08")
    w = Work(work, "sizes")
    data = write_set(w.path("data"), fake_set())
    for prog, flags in ((ch05, [["--batch-size", "0"], ["--batch-size", "-1"], ["--samples", "-5"], ["--epochs", "0"]]),
                        (ch06, [["--batch-size", "0"], ["--batch-size", "-3"], ["--epochs", "-1"], ["--channels", "0"],
                                ["--train-size", "-1"]]),
                        (ch07, [["--batch-size", "0"], ["--steps", "-1"]]),
                        (ch08, [["--batch-size", "0"], ["--accumulate", "-1"], ["--nproc", "0"]])):
        for f in flags:
            w.refused([prog, "--device", "cpu", "--quick", *f, "--metrics", w.keep], 2, [f[0], "usage"],
                      f"{os.path.basename(prog)} {' '.join(f)}", before_work=True)
    if "ch02" in chs:
        w.refused([chs["ch02"], "--quick", "--max-mib", "-1", "--metrics", w.keep], 2, ["--max-mib", "-1"],
                  "ch02 --max-mib -1", before_work=True)
    # A batch larger than the data set: ch05 and ch06 train on one batch of everything, as
    # PyTorch's DataLoader (drop_last=False) does; ch08 needs more, and says so.
    m = w.path("ch05.json")
    r = w.ok([ch05, "--device", "cpu", "--quick", "--batch-size", "5000", "--metrics", m], "ch05 --batch-size 5000")
    expect("3 epochs of 1 steps" in r.stdout, "ch05 with a batch larger than the 1024 samples: one step per epoch", r)
    m = w.path("ch06.json")
    r = w.ok([ch06, "--device", "cpu", "--quick", "--data", data, "--batch-size", "5000", "--metrics", m],
             "ch06 --batch-size 5000")
    expect("-> 1 batches per epoch" in r.stdout and chaptertest.load_metrics(m)["steps"] == 1,
           "ch06 with a batch larger than the 256 images: one step", r)
    # ch07 trains a fixed number of steps: past an epoch it starts the next, so a batch larger than
    # the data set is one batch of everything per epoch, each of the 20 steps one epoch.
    m = w.path("ch07.json")
    r = w.ok([ch07, "--device", "cpu", "--quick", "--data", data, "--batch-size", "300", "--out-dir", w.out,
              "--metrics", m], "ch07 --batch-size 300 on 256 images")
    expect("20 steps of batch 300" in r.stdout and chaptertest.load_metrics(m)["steps"] == 20,
           "ch07 with a batch larger than the 256 images: 20 steps, each a whole epoch", r)
    w.refused([ch08, "--quick", "--data", data, "--batch-size", "200", "--metrics", w.keep,
               "--save", w.path("out", "ch08.safetensors")], 1,
              ["a step takes --batch-size 200 x --accumulate 1 images on each rank, more than its shard of 128 "
               "(256 training images over 2 ranks)", "lower --batch-size or --accumulate"],
              "ch08 --batch-size 200 on 128 images per rank")
    # A model too large for memory: refused before anything is allocated, naming the flag (exit 2;
    # the allocator's own out-of-memory error is unit.alloc's and ch03's).
    w.refused([ch06, "--device", "cpu", "--quick", "--data", data, "--channels", "3000000", "--metrics", w.keep], 2,
              ["--channels x --channels x 18 and --channels x 12544 floats", "more than this machine's memory"],
              "ch06 --channels 3000000", before_work=True)
    print("PASS: zero and negative sizes, batches larger than the data, a model larger than memory")


def ch05_reference(init, lr, epochs, batch):
    """The steps (from 1) where ch05's SGD, run here in float64 on the --save-init file's data and
    weights, first overflows float32: (the first step whose batch sum of squared errors exceeds
    FLT_MAX, the first whose mean does or whose prediction does); None if neither happens."""
    t = {n: f32_values(b) for n, _, _, b in st_tensors(init)}
    x, y, w, b = t["x"], t["y"], t["weight"], t["bias"][0]
    n, feats = len(y), len(w)
    lo = hi = None
    step = 0
    for _ in range(epochs):
        for i in range(0, n, batch):
            step += 1
            rows = range(i, min(i + batch, n))
            pred = [sum(w[j] * x[r * feats + j] for j in range(feats)) + b for r in rows]
            diff = [p - y[r] for p, r in zip(pred, rows)]
            sq = sum(d * d for d in diff)
            if lo is None and not sq <= FLT_MAX:
                lo = step
            if hi is None and (not sq / len(diff) <= FLT_MAX or not max(abs(p) for p in pred) <= FLT_MAX):
                hi = step
            if hi is not None:
                return lo, hi
            g = [2 * d / len(diff) for d in diff]
            w = [w[j] - lr * sum(gk * x[r * feats + j] for gk, r in zip(g, rows)) for j in range(feats)]
            b -= lr * sum(g)
    return None


def cmd_numerics(work, *args):
    ch05, ch06 = need(chapters_of(args), "ch05", "ch06")
    w = Work(work, "numerics")
    init = w.path("init.safetensors")
    w.ok([ch05, "--device", "cpu", "--quick", "--save-init", init], "ch05 --save-init")
    # ch05: lr 10 diverges in the first epoch (its steps' losses are read one by one: the exact
    # step); lr 1 in a later one (only the epoch's sum is read: the epoch's steps).
    for lr, epochs in (("10", 3), ("1", 30)):
        ref = ch05_reference(init, float(lr), epochs, 32)
        expect(ref is not None, f"lr {lr}: the reference does not diverge in {epochs} epochs")
        save = w.path("out", "ch05.safetensors")
        r = w.refused([ch05, "--device", "cpu", "--quick", "--load-init", init, "--lr", lr, "--epochs", str(epochs),
                       "--metrics", w.keep, "--save", save], 1,
                      ["ch05: the loss is ", "training diverged; lower --lr (this run: " + lr + ")"],
                      f"ch05 --lr {lr}", absent=[save])
        m = re.search(r"the loss is (nan|inf|-inf) (at step (\d+)|between steps (\d+) and (\d+))", r.stderr)
        expect(m, f"ch05 --lr {lr}: the message names no step", r)
        first, last = (int(m.group(3)), int(m.group(3))) if m.group(3) else (int(m.group(4)), int(m.group(5)))
        expect(first <= ref[1] and ref[0] <= last,
               f"ch05 --lr {lr}: steps {first}..{last} reported; float64 overflows float32 at steps {ref}", r)
        if lr == "1":
            expect(first < last and (first - 1) % 32 == 0 and last - first == 31,
                   "ch05 --lr 1 diverges after the first epoch: the message names the epoch's 32 steps", r)
        expect("== parameters ==" not in r.stdout, f"ch05 --lr {lr}: went on after the loss diverged", r)
        print(f"ch05 --lr {lr}: steps {first}..{last} reported, the float64 reference overflows at {ref}")
    # NaN in the data from --load-init: refused before any training.
    header, payload = st_read(init)
    off = header["x"]["data_offsets"][0] + 4 * 22
    st_write(w.path("nan.safetensors"), header, payload[:off] + struct.pack("<f", math.nan) + payload[off + 4:])
    r = w.refused([ch05, "--device", "cpu", "--quick", "--load-init", w.path("nan.safetensors"), "--metrics", w.keep],
                  1, ['"x" holds nan at element 22', "must be finite numbers"], "ch05 --load-init with NaN")
    expect("== train ==" not in r.stdout, "ch05 --load-init with NaN: trained anyway", r)

    # ch06: SGD with lr 1e6 on the CPU (the loss read at every step).
    data = write_set(w.path("data"), fake_set())
    save = w.path("out", "ch06.safetensors")
    with open(save, "wb") as f:
        f.write(b"an older checkpoint")
    run06 = [ch06, "--device", "cpu", "--quick", "--data", data, "--batch-size", "16", "--optimizer", "sgd",
             "--lr", "1e6"]
    r = w.refused(run06 + ["--save", save, "--metrics", w.keep], 1,
                  ["ch06: the loss is ", "training diverged; lower --lr (this run: 1e+06)"], "ch06 --lr 1e6")
    m = re.search(r"the loss is (nan|inf|-inf) at step (\d+):", r.stderr)
    expect(m, "ch06 on the CPU names the exact step", r)
    step = int(m.group(2))
    expect("== accuracy ==" not in r.stdout, "ch06 --lr 1e6: evaluated after the loss diverged", r)
    if step > 1:  # one step less runs through, and every step's loss it logged is finite
        met = w.path("ch06-before.json")
        w.ok(run06 + ["--max-steps", str(step - 1), "--metrics", met], f"ch06 --lr 1e6 --max-steps {step - 1}")
        losses = chaptertest.load_metrics(met)["step_losses"]
        expect(len(losses) == step - 1 and all(isinstance(v, (int, float)) and math.isfinite(v) for v in losses),
               f"ch06 stopped at step {step}, but the steps before it logged {losses}")
    print(f"PASS: ch05 and ch06 stop when the loss diverges (ch06 at step {step}), naming the step and the fix")


def cmd_divergence(work, *args):
    """BADINPUT 120: every training chapter (ch07, ch08, ch09, ch10, ch14) stops when its loss becomes
    NaN/inf: exit 1, the step named, and no output written (a planted --save file stays as it was,
    ch09 writes no checkpoint into --out-dir)."""
    chs = chapters_of(args)
    w = Work(work, "divergence")
    data = write_set(w.path("data"), fake_set())
    planted = w.path("out", "model.safetensors")
    with open(planted, "wb") as f:
        f.write(b"an older checkpoint")
    runs = {"ch07": ["--data", data, "--save", planted], "ch08": ["--data", data, "--save", planted],
            "ch09": ["--out-dir", w.out], "ch10": ["--save", planted], "ch14": ["--save", planted]}
    tried = 0
    for ch, extra in runs.items():
        if ch not in chs:
            continue
        tried += 1
        cmd = [chs[ch], "--device", "cpu", "--quick", "--lr", "1e30", "--metrics", w.keep] + extra
        lr = "" if ch == "ch14" else " (this run: 1e+30)"  # ch14 names the scheduled lr of the step
        r = w.refused(cmd, 1, [ch + ": the loss is ", "training diverged; lower --lr" + lr],
                      f"{ch} --lr 1e30")
        m = re.search(r"the loss is (nan|inf|-inf) (at step (\d+)|between steps (\d+) and (\d+))", r.stderr)
        expect(m, f"{ch} --lr 1e30: the message names no step", r)
        if ch == "ch07":  # one step less runs through: its losses are all finite
            step = int(m.group(3))
            if step > 1:
                met = w.path("ch07-before.json")
                w.ok([chs[ch], "--device", "cpu", "--quick", "--lr", "1e30", "--data", data, "--steps",
                      str(step - 1), "--metrics", met], f"ch07 --lr 1e30 --steps {step - 1}")
        print(f"{ch}: stopped {m.group(2)}")
    expect(tried > 0, "no training chapter among the arguments")
    print(f"PASS: {tried} training chapters stop when the loss diverges, naming the step, saving nothing")


def cmd_limits(work, *args):
    """BADINPUT 121-123: thread variables the OpenMP runtime would crash on or ignore (exit 1, before
    any work); integer flags past int's range (exit 2, naming the flag and the range); sizes whose
    product overflows or passes the machine's memory (exit 2, before anything is allocated)."""
    chs = chapters_of(args)
    w = Work(work, "limits")
    prog = chs.get("ch04") or chs[sorted(chs)[0]]
    name = os.path.basename(prog).split("_")[0]
    for var, value in (("OMP_NUM_THREADS", "100000"), ("OMP_NUM_THREADS", "0"), ("OMP_NUM_THREADS", "-1"),
                       ("OMP_NUM_THREADS", "abc"), ("OMP_THREAD_LIMIT", "0"), ("OPENBLAS_NUM_THREADS", "1e9")):
        env = dict(os.environ, **{var: value})
        r = w.refused([prog, "--device", "cpu", "--quick", "--metrics", w.keep], 1,
                      [f'{var}="{value}": expected a number of threads', "unset it to use them all"],
                      f"{var}={value}", before_work=True, env=env)
    for value in ("1,2,3", "2", ""):  # a list (one per nesting level) and an empty value are fine
        r = subprocess.run([prog, "--device", "cpu", "--help"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, OMP_NUM_THREADS=value))
        expect(r.returncode == 0, f"OMP_NUM_THREADS={value!r} refused", r)
    # every chapter's integer flags: 2^31 and 2^63 - 1 refused by the parser
    tried = 0
    for ch, prog in sorted(chs.items()):
        help_text = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=60).stdout
        ints = [f for f in re.findall(r"^  --([a-z0-9-]+) N\s", help_text, re.M) if f != "seed"]
        for flag in ints[:2]:
            for value in ("2147483648", "9223372036854775807"):
                w.refused([prog, "--device", "cpu", "--quick", f"--{flag}", value, "--metrics", w.keep], 2,
                          [f"--{flag} expects an integer from -2147483647 to 2147483647, got \"{value}\""],
                          f"{ch} --{flag} {value}", before_work=True)
                tried += 1
    # products of in-range sizes: refused before anything is allocated
    cases = [("ch12", ["--width", "2000000000"], "--chunks x --rows x --width floats (three copies) take "),
             ("ch12", ["--width", "2147483647", "--rows", "2147483647", "--chunks", "64"],
              "Storage size calculation overflowed"),
             ("ch09", ["--hidden", "2000000"], "--hidden x --hidden floats (about 8 copies) take "),
             ("ch14", ["--batch-size", "2147483647"],
              "--batch-size x --block-size x --n-embd x --n-layer floats (activations: about 16) take "),
             ("ch14", ["--block-size", "100000"], "floats (attention: about 3) take "),
             ("ch06", ["--channels", "100000"], "--channels x --channels x 18 and --channels x 12544 floats"),
             ("ch11", ["--channels", "2147483647"], "Storage size calculation overflowed")]
    for ch, flags, needle in cases:
        if ch in chs:
            w.refused([chs[ch], "--device", "cpu", "--quick"] + flags + ["--metrics", w.keep], 2,
                      [needle], f"{ch} {' '.join(flags)}")
    if "ch09" in chs:  # a number too small for a normal double is still a number (argparse's float takes it)
        r = subprocess.run([chs["ch09"], "--device", "cpu", "--lr", "1e-320", "--help"], capture_output=True,
                           text=True, timeout=60)
        expect(r.returncode == 0, "ch09 --lr 1e-320 refused", r)
        w.refused([chs["ch09"], "--device", "cpu", "--quick", "--lr", "1e400", "--metrics", w.keep], 2,
                  ['--lr expects a finite number, got "1e400"'], "ch09 --lr 1e400", before_work=True)
    if "ch14" in chs:  # a run of minutes asked for by one flag: refused with the limit
        w.refused([chs["ch14"], "--device", "cpu", "--quick", "--sample-len", "2147483647", "--metrics", w.keep], 2,
                  ["--sample-len must be at most 100000"], "ch14 --sample-len 2147483647", before_work=True)
    print(f"PASS: thread variables, {tried} integer flags past int's range and {len(cases)} oversized products refused")


def readonly_dir(path):
    """Makes `path` a folder this process cannot create files in, holding one file, existing.out;
    returns how (a word) or None, and the function that undoes it. Root ignores permissions:
    there the folder is made immutable (chattr +i) where the file system allows."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "existing.out"), "w") as f:
        f.write("written before the run\n")
    if os.geteuid() != 0:
        os.chmod(path, 0o555)
        return "chmod 555", lambda: os.chmod(path, 0o755)
    r = subprocess.run(["chattr", "+i", path], capture_output=True, text=True)
    if r.returncode != 0:
        return None, lambda: None
    return "chattr +i", lambda: subprocess.run(["chattr", "-i", path], capture_output=True)


def full_fs_run(mount, cmd):
    """Runs cmd with a 64 KiB tmpfs mounted on `mount` in a private mount namespace (unshare; the
    mount ends with the command), holding x.out ("old") and then filled up. Returns (run, the
    names the tmpfs held afterwards and x.out's text), or (None, why) where this machine cannot
    mount one."""
    script = ('mount -t tmpfs -o size=64k tmpfs "$0" || exit 99; echo old > "$0/x.out"; '
              'head -c 1000000 /dev/zero > "$0/fill" 2>/dev/null; "$@"; rc=$?; '
              'echo "@@TMPFS $(cat "$0/x.out") $(ls -A "$0" | tr "\\n" " ")" >&2; exit $rc')
    if not shutil.which("unshare"):
        return None, "no unshare"
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, mount, *cmd],
                       capture_output=True, text=True, timeout=280)
    if r.returncode == 99 or "@@TMPFS" not in r.stderr:
        return None, (r.stderr.strip().splitlines() or ["unshare failed"])[-1]
    held = re.search(r"@@TMPFS (.*)", r.stderr).group(1).split()
    return r, held


def cmd_files(work, *args):
    chs = chapters_of(args)
    w = Work(work, "files")
    ro_how, ro_undo = readonly_dir(w.path("readonly"))
    fifo = w.path("fifo")
    os.mkfifo(fifo)
    sock_path = w.path("sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(sock_path)
    notes = []
    try:
        for name, prog in sorted(chs.items()):
            for flags, needles in ((["--bogus"], ['unknown flag "--bogus"']), (["--seed"], ["--seed expects a value"]),
                                   (["--seed", "abc"], ['--seed expects a non-negative integer, got "abc"']),
                                   (["--seed", "-1"], ['got "-1"']), (["--quick=yes"], ["--quick takes no value"]),
                                   (["--metrics"], ["--metrics expects a value"]), (["stray"], ['"stray"'])):
                w.refused([prog, "--device", "cpu", "--quick", *flags], 2, needles + ["usage:"], f"{name} {flags}",
                          before_work=True)
            for flag in file_flags(prog):
                keep = [] if flag == "--metrics" else ["--metrics", w.keep]  # an existing file stays as it was
                base = [prog, "--device", "cpu", "--quick", *keep, flag]
                nodir = w.path("no-such-folder", "x.out")
                w.refused(base + [nodir], 1, [flag, nodir, "check that the directory exists"],
                          f"{name} {flag} into a missing folder", before_work=True)
                if ro_how:  # the file there stays as it was (the watch)
                    ro = w.path("readonly", "existing.out")
                    w.refused(base + [ro], 1, [flag, ro, "cannot create the temporary file"],
                              f"{name} {flag} into a read-only folder ({ro_how})", before_work=True,
                              watch=[w.path("readonly")])
                if os.path.exists("/dev/full"):
                    w.refused(base + ["/dev/full"], 1, [flag, "/dev/full", "No space left on device"],
                              f"{name} {flag} /dev/full", before_work=True)
                    expect(stat.S_ISCHR(os.stat("/dev/full").st_mode), "/dev/full is no longer a device")
                w.refused(base + [w.out], 1, [flag, w.out, "is a directory, not a file"],
                          f"{name} {flag} onto a folder", before_work=True)
                w.refused(base + [sock_path], 1, [flag, "is a socket, not a file"], f"{name} {flag} onto a socket",
                          before_work=True)
                w.refused(base + [w.out + "/"], 1, [flag, "the path names a directory; give a file name inside it"],
                          f"{name} {flag} ending in /", before_work=True)
                w.refused(base + [""], 2, [f'{flag} expects a file path, got ""', "usage:"], f"{name} {flag} \"\"",
                          before_work=True)
                expect(stat.S_ISSOCK(os.lstat(sock_path).st_mode), "the socket was replaced")
                mnt = w.path("tmpfs")
                os.makedirs(mnt, exist_ok=True)
                r, held = full_fs_run(mnt, base + [os.path.join(mnt, "x.out")])
                if r is None:
                    notes.append(f"full file system not checked ({held})")
                else:
                    expect_no_crash(r, f"{name} {flag} onto a full file system")
                    expect(r.returncode == 1 and "No space left on device" in r.stderr and flag in r.stderr
                           and "device:" not in r.stdout,
                           f"{name} {flag} onto a full file system: exit 1 naming ENOSPC before the work", r)
                    expect(held == ["old", "fill", "x.out"], f"{name} {flag} onto a full file system: the "
                           f"folder holds {held[1:]}, x.out {held[:1]} (expected fill and x.out, still 'old')", r)
        if not ro_how:
            notes.append("read-only folder not checked (root, and chattr +i refused)")
    finally:
        ro_undo()
        sock.close()
    # Destinations written through and left what they were (ch01: its run takes milliseconds).
    ch01 = chs.get("ch01") or sorted(chs.values())[0]
    target = w.path("out", "target.json")
    link = w.path("out", "link.json")
    os.symlink("target.json", link)
    w.ok([ch01, "--device", "cpu", "--quick", "--metrics", link], "--metrics through a symbolic link")
    expect(os.path.islink(link) and chaptertest.load_metrics(target), "the link must stay a link to the new file")
    w.ok([ch01, "--device", "cpu", "--quick", "--metrics", "/dev/null"], "--metrics /dev/null")
    expect(stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is no longer a device")
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader (the JSON fits in the pipe's buffer)
    try:
        w.ok([ch01, "--device", "cpu", "--quick", "--metrics", fifo], "--metrics into a FIFO with a reader")
        got = os.read(rd, 1 << 20)
    finally:
        os.close(rd)
    expect(isinstance(json.loads(got), dict), "the FIFO's reader got no JSON object")
    expect(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced")
    # Without a reader the write fails (at the end: a reader may start while the program runs).
    r = w.refused([ch01, "--device", "cpu", "--quick", "--metrics", fifo], 1,
                  [fifo, "no process is reading this FIFO; start the reader first"], "--metrics into a FIFO, no reader")
    expect(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced")
    for n in notes:
        print("NOTE:", n)
    print(f"PASS: bad flags and bad destinations refused by {len(chs)} chapters; links, devices, FIFOs written through")


def cmd_outputs(work, *args):
    """Issue 23's file cases: two flags on one file, planted temporaries, long paths, special files
    as inputs, one prefix per message."""
    chs = chapters_of(args)
    w = Work(work, "outputs")
    # Two outputs naming one file (the same spelling, a link to it, another spelling of a file
    # not yet there), and an output naming an input: refused before any work, exit 2, both flags named.
    for name, prog in sorted(chs.items()):
        flags = file_flags(prog)
        for other in flags[1:]:
            same = w.path("out", "same.out")
            w.refused([prog, "--device", "cpu", "--quick", "--metrics", same, other, same], 2,
                      ["--metrics", other, "name the same file", "give each its own file"],
                      f"{name} --metrics and {other} on one file", before_work=True, absent=[same])
            spelled = os.path.join(w.out, "..", "out", "same.out")
            w.refused([prog, "--device", "cpu", "--quick", "--metrics", same, other, spelled], 2,
                      ["--metrics", other, "name the same file"], f"{name} {other} spelled another way",
                      before_work=True, absent=[same])
    link = w.path("out", "alias.json")
    os.symlink("keep.json", link)
    if "ch05" in chs:  # a character device may take two outputs: nothing is lost
        w.ok([chs["ch05"], "--device", "cpu", "--quick", "--metrics", "/dev/null", "--save", "/dev/null"],
             "ch05 --metrics and --save both /dev/null")
        w.refused([chs["ch05"], "--device", "cpu", "--quick", "--save-init", w.keep, "--save", link], 2,
                  ["--save-init", "--save", "name the same file"], "ch05 --save through a link to --save-init's file",
                  before_work=True)
        w.refused([chs["ch05"], "--device", "cpu", "--quick", "--load-init", w.keep, "--save-init", link], 2,
                  ["--load-init", "--save-init", "would overwrite the file it reads"], "ch05 --save-init onto --load-init",
                  before_work=True)
    if "ch14" in chs:
        ck = w.path("cwd", "ck.safetensors")
        w.refused([chs["ch14"], "--device", "cpu", "--quick", "--resume", "ck.safetensors", "--save-init", ck], 2,
                  ["--resume", "--save-init", "name the same file"], "ch14 --resume naming --save-init's file",
                  before_work=True, absent=[ck])
        # --resume FILE --save FILE continues in place: not refused as a clash (the missing file is the error).
        r = w.refused([chs["ch14"], "--device", "cpu", "--quick", "--resume", ck, "--save", ck], 1, [ck, "cannot open"],
                      "ch14 --resume and --save on one file (allowed; the file is missing)", absent=[ck])
        expect("name the same file" not in r.stderr, "ch14 --resume FILE --save FILE was refused", r)
    # A symbolic link planted at every temporary name the writer once used (PATH.tmp.PID for the
    # next pids), pointing at a victim: the run writes its file and never the victim.
    ch01 = chs.get("ch01") or sorted(chs.values())[0]
    victim = w.path("victim.txt")
    with open(victim, "w") as f:
        f.write("victim")
    os.chmod(victim, 0o604)
    target = w.path("out", "planted.json")
    probe = subprocess.Popen(["true"])  # the pids the next processes get start about here
    probe.wait()
    start = probe.pid + 1
    planted = [f"{target}.tmp.{p}" for p in range(start, start + 2000)]
    for p in planted:
        os.symlink(victim, p)
    r = w.ok([ch01, "--device", "cpu", "--quick", "--metrics", target], "--metrics beside planted temporaries")
    with open(victim) as f:
        expect(f.read() == "victim", "a planted temporary link was followed: the victim file was written", r)
    expect(stat.S_IMODE(os.stat(victim).st_mode) == 0o604, "the victim's mode changed", r)
    expect(all(os.path.islink(p) for p in planted), "a planted link was replaced or removed", r)
    left = [p for p in os.listdir(w.out) if ".tmp." in p and not os.path.islink(os.path.join(w.out, p))]
    expect(not left, f"temporaries left: {left}", r)
    for p in planted:
        os.unlink(p)
    expect(chaptertest.load_metrics(target), "the metrics file was not written", r)
    # A path too long for a program's buffers is refused before the work, naming the flag.
    deep = w.path(*(["d" * 200] * 22))
    for name, flag, prog_args in (("ch09", "--out-dir", []), ("ch07", "--out-dir", []), ("ch06", "--out-dir", []),
                                  ("ch04", "--dump", [])):
        if name in chs:
            w.refused([chs[name], "--device", "cpu", "--quick", "--metrics", w.keep, flag, deep], 1,
                      [flag, "more than the", "use a shorter folder"], f"{name} {flag} too long", before_work=True)
            missing = w.path("no-such-folder")
            w.refused([chs[name], "--device", "cpu", "--quick", "--metrics", w.keep, flag, missing], 1,
                      [flag, missing, "check that the directory exists"], f"{name} {flag} missing", before_work=True,
                      absent=[missing])
    w.refused([ch01, "--device", "cpu", "--quick", "--metrics", os.path.join(deep, "x.json")], 1,
              ["--metrics", "File name too long"], "--metrics too long", before_work=True)
    # Special files as inputs: refused at once, naming what they are, never a hang.
    fifo = w.path("fifo")
    os.mkfifo(fifo)
    inputs = []
    if "ch05" in chs:
        inputs += [([chs["ch05"], "--load-init", fifo], "a FIFO"), ([chs["ch05"], "--load-init", "/dev/zero"],
                                                                   "a character device")]
    if "ch06" in chs:
        inputs += [([chs["ch06"], "--load", fifo], "a FIFO"), ([chs["ch06"], "--resume", w.out], "a directory")]
    if "ch14" in chs:
        inputs += [([chs["ch14"], "--corpus", fifo], "a FIFO"), ([chs["ch14"], "--corpus", w.out], "a directory"),
                   ([chs["ch14"], "--generate", fifo], "a FIFO")]
    for cmd, what in inputs:
        r = w.refused(cmd[:1] + ["--device", "cpu", "--quick", "--metrics", w.keep] + cmd[1:], 1,
                      [cmd[-1], f"is {what}", "not a file" if what == "a directory" else "not a regular file"], f"{os.path.basename(cmd[0])} {cmd[1]} {what}")
        expect(not re.search(r"^(ch\d\d): \1: ", r.stderr, re.M), "a message with its prefix twice", r)
    if "ch14" in chs:
        r = w.refused([chs["ch14"], "--device", "cpu", "--quick", "--metrics", w.keep, "--corpus", w.path("missing.txt")],
                      1, ["missing.txt", "No such file or directory"], "ch14 --corpus missing")
        expect("ch14: ch14:" not in r.stderr and "give zh, en or the path" in r.stderr, "ch14 --corpus: one prefix, a fix", r)
    # A file of the wrong kind named as such: ch14's --save-init file given to --resume or --generate.
    if "ch14" in chs:
        init = w.path("init.safetensors")
        w.ok([chs["ch14"], "--device", "cpu", "--quick", "--save-init", init], "ch14 --save-init")
        for flag in ("--resume", "--generate"):
            r = w.refused([chs["ch14"], "--device", "cpu", "--quick", "--metrics", w.keep, flag, init], 1,
                          [flag, "a ch14 --save-init file", "--save"], f"ch14 {flag} of a --save-init file")
            expect("another model" not in r.stderr and "--load" not in r.stderr,
                   f"ch14 {flag}: the message names another model or a flag ch14 lacks", r)
    # A C compiler that hangs and leaves a background child: ch13 goes on unfused after the limit.
    if "ch13" in chs:
        hang = w.path("hangcc")
        with open(hang, "w") as f:
            f.write("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'hangcc 1.0'; exit 0; fi\n"
                    "sleep 300 & exec sleep 300\n")
        os.chmod(hang, 0o700)
        cache = w.path("jit-cache")
        os.makedirs(cache, mode=0o700)
        env = dict(os.environ, CT_JIT_CC=hang, CT_JIT_CC_TIMEOUT="2", CT_JIT_CACHE=cache)
        r = subprocess.run([chs["ch13"], "--device", "cpu", "--quick", "--metrics", w.keep], capture_output=True,
                           text=True, timeout=250, env=env, cwd=w.cwd)
        print(f"$ CT_JIT_CC=hangcc CT_JIT_CC_TIMEOUT=2 ch13 --quick\n  -> exit {r.returncode}", flush=True)
        expect_no_crash(r, "ch13 with a hanging compiler")
        expect(r.returncode == 0 and "did not finish within 2 s" in r.stdout
               and "the sections below measure the unfused chain only" in r.stdout,
               "ch13 with a hanging compiler: goes on unfused, saying why", r)
    print("PASS: two flags on one file refused; planted temporaries never followed; long paths refused; "
          "special files refused as inputs; a hanging JIT compiler killed")


def cmd_gpu(work, have_cuda, *args):
    chaptertest.skip_unless_cuda_build(have_cuda)
    if not has_gpu():
        skip("no GPU here")
    chs = chapters_of(args)
    w = Work(work, "gpu")
    out = chaptertest.nvidia_smi("-L") or ""
    count = len(re.findall(r"^GPU \d+", out, re.M))
    expect(count > 0, f"nvidia-smi -L lists no GPU: {out!r}")
    ch01, ch08 = need(chs, "ch01", "ch08")
    w.refused([ch01, "--quick", "--device", f"cuda:{count}", "--metrics", w.keep], 1,
              [f"cuda:{count}", "out of range", f"({count} device"], f"cuda:{count} with {count} GPUs")
    r = w.refused([ch08, "--quick", "--device", "cuda", "--backend", "nccl", "--nproc", str(count + 1),
                   "--metrics", w.keep, "--save", w.path("out", "ch08.safetensors")], 1,
                  ["NCCL takes one GPU per rank", f"start at most {count} ranks per node"],
                  f"ch08 --backend nccl with {count + 1} ranks on {count} GPUs")
    # A diverging loss on the GPU: ch06 reads its loss sum at step 1, every 50 steps and at the end
    # of the epoch (16 steps here), so it names the steps between two reads.
    if "ch06" in chs:
        data = write_set(w.path("data"), fake_set())
        r = w.refused([chs["ch06"], "--device", "cuda", "--quick", "--data", data, "--batch-size", "16",
                       "--optimizer", "sgd", "--lr", "1e6", "--metrics", w.keep], 1,
                      ["the loss is ", "lower --lr (this run: 1e+06)"], "ch06 --device cuda --lr 1e6")
        expect(re.search(r"the loss is \S+ (at step \d+|between steps \d+ and \d+):", r.stderr),
               "ch06 on the GPU names no step", r)
    print(f"PASS: a device past the {count} GPUs, NCCL with more ranks than GPUs, a diverging loss on the GPU")


MODES = {"data": cmd_data, "checkpoint": cmd_checkpoint, "device": cmd_device, "sizes": cmd_sizes,
         "numerics": cmd_numerics, "divergence": cmd_divergence, "limits": cmd_limits, "files": cmd_files,
         "outputs": cmd_outputs, "gpu": cmd_gpu}


def main(argv):
    if len(argv) < 3 or argv[1] not in MODES:
        print(__doc__, file=sys.stderr)
        return 2
    os.makedirs(argv[2], exist_ok=True)
    MODES[argv[1]](*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
