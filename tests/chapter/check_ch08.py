#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks chapter 8 (DistributedDataParallel) against independent references.

    check_ch08.py report  CH08 WORK              ./ch08 --quick starts itself under tools/launch
                          (2 ranks): the collectives' values against their definitions, the
                          sampler table against torch's DistributedSampler (when torch imports),
                          busbw = algbw * 2(n-1)/n (and said to be equal at 2 ranks), the sum
                          written out (no "1 + 2 + ... + 2", no "1 buckets"), training above chance, every rank's
                          parameters equal to rank 0's checkpoint, only rank 0's output
    check_ch08.py badflag CH08 WORK              bad flags exit 2; --backend nccl on a machine
                          without a GPU exits non-zero saying one GPU per rank; an unknown
                          backend names the two that exist
    check_ch08.py twin    CH08 PYTHON TWIN WORK  ch08_pytorch.py (gloo, under tools/launch) prints
                          the same sections and the same collectives and sampler lines
    check_ch08.py kill    CH08 WORK              rank 1 SIGKILLed once training has begun: the job
                          exits non-zero within 60 s, and the checkpoint a complete run saved
                          before is untouched (same bytes, a valid safetensors file), no temporary
"""
import glob
import json
import os
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chaptertest  # noqa: E402
from chaptertest import (expect, expect_usage_error, fresh, load_metrics, run, run_with_twin,  # noqa: E402
                         section_lines, sections_of, skip_unless_imports)

SECTIONS = ["process group", "collectives", "sampler", "all-reduce bandwidth", "training", "overlap",
            "DP vs DDP", "checkpoint"]


def torch_sampler_table(w):
    try:
        from torch.utils.data import DistributedSampler
    except ImportError:
        return None
    flat = []
    for shuffle in (False, True):
        for epoch in range(2 if shuffle else 1):
            for r in range(w):
                s = DistributedSampler(range(10), num_replicas=w, rank=r, shuffle=shuffle, seed=0)
                s.set_epoch(epoch)
                flat += list(s)
    return flat


def cmd_report(ch08, work):
    os.makedirs(work, exist_ok=True)
    m = fresh(os.path.join(work, "ch08.json"))
    ckpt = fresh(os.path.join(work, "ch08.safetensors"))
    r = run([ch08, "--quick", "--device", "cpu", "--save", ckpt, "--metrics", m])
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(sections_of(r.stdout) == SECTIONS, f"sections {sections_of(r.stdout)}", r)
    expect(r.stdout.count("device: ") == 1, "more than one rank printed (only rank 0 logs)", r)
    mt = load_metrics(m)
    w = mt["world_size"]
    expect(w == 2 and mt["backend"] == "mpi", f"world {w}, backend {mt['backend']}", r)
    ranks = [ln.split()[0] for ln in section_lines(r.stdout, "process group")[2:]]
    expect(ranks == [str(i) for i in range(w)], f"process group table ranks {ranks}", r)
    expect(mt["all_reduce_sum"] == w * (w + 1) / 2 and mt["broadcast_value"] == 100 + w - 1 and
           mt["all_gather"] == [10.0 * k for k in range(w)] and mt["reduce_scatter_rank0"] == w * (w - 1) / 2,
           "collectives differ from their definitions", r)
    terms = " + ".join(str(k) for k in range(1, w + 1))
    expect(f"({terms} = {w * (w + 1) // 2})" in r.stdout and "... + 2 =" not in r.stdout and
           " 1 buckets" not in r.stdout, "collectives or training line reads oddly at 2 ranks", r)
    expect("busbw equals algbw" in r.stdout, "2 ranks: the note that busbw = algbw is missing", r)
    want = torch_sampler_table(w)
    if want is not None:
        expect(mt["sampler_table"] == want, f"sampler table {mt['sampler_table']} vs torch {want}", r)
    for alg, bus in zip(mt["allreduce_algbw_gbs"], mt["allreduce_busbw_gbs"]):
        expect(alg > 0 and chaptertest.close(bus, alg * 2 * (w - 1) / w, 1e-9), "busbw != algbw * 2(n-1)/n", r)
    expect(mt["test_acc"][-1] > 0.3 and mt["train_loss"][-1] < 2.3, f"training: {mt['test_acc']}", r)
    expect(mt["checkpoint_max_diff"] == 0 and os.path.isfile(ckpt), "checkpoint", r)
    for k in ("step_ms_overlap_on", "step_ms_overlap_off", "ddp_ms_per_step", "dp_ms_per_step"):
        expect(chaptertest.positive(mt[k]), f"{k} = {mt[k]}", r)
    check_accumulation(ch08, work, mt)


def check_accumulation(ch08, work, mt):
    """--accumulate 2 at half the batch takes the same steps as the full batch: the mean loss of
    the micro-batches, each scaled by 1/2, sums the full batch's gradient, so training ends at
    the same loss (to rounding)."""
    m = fresh(os.path.join(work, "ch08_accumulate.json"))
    half = 32  # ch08's default --batch-size 64, halved
    r = run([ch08, "--quick", "--device", "cpu", "--accumulate", "2", "--batch-size", str(half), "--metrics", m])
    expect(r.returncode == 0, f"--accumulate 2: exit code {r.returncode}", r)
    ma = load_metrics(m)
    expect(ma["steps_per_epoch"] == mt["steps_per_epoch"], f"--accumulate 2: {ma['steps_per_epoch']} steps per "
           f"epoch, the full batch {mt['steps_per_epoch']}", r)
    for a, b in zip(ma["train_loss"], mt["train_loss"]):
        expect(chaptertest.close(a, b, 1e-6), f"--accumulate 2 --batch-size {half} ends at loss {a}, one batch of "
               f"{2 * half} at {b}: accumulating must give the same update", r)


def cmd_badflag(ch08, work):
    os.makedirs(work, exist_ok=True)
    for args, needles in ((["--nproc", "0"], ["--nproc"]), (["--accumulate", "0"], ["--accumulate"]),
                          (["--bucket-mb", "-1"], ["--bucket-mb"])):
        r = run([ch08, "--quick", *args])
        expect(r.returncode == 2 and any(n in r.stderr for n in needles), f"{args}: exit {r.returncode}", r)
    r = run([ch08, "--quick", "--backend", "gloo"])
    expect(r.returncode != 0 and 'backend must be "mpi" or "nccl"' in r.stderr, "--backend gloo", r)
    r = run([ch08, "--quick", "--device", "cpu", "--backend", "nccl"])
    expect(r.returncode != 0 and ("one GPU per rank" in r.stderr or "no NCCL" in r.stderr) and
           "launch: the job failed" in r.stderr, "--backend nccl without a GPU", r)


def cmd_twin(ch08, python, twin, work):
    skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    rc, rp, mc, mp = run_with_twin("ch08", [ch08, "--quick", "--device", "cpu"], [python, twin, "--quick"], work)
    expect(sections_of(rp.stdout) == SECTIONS, f"twin sections {sections_of(rp.stdout)}", rp)
    for name in ("collectives", "sampler"):
        c, p = section_lines(rc.stdout, name), section_lines(rp.stdout, name)
        expect(c == p, f"section {name} differs:\nC:  {c}\nPy: {p}", rp)
    for key in ("world_size", "sampler_table", "all_gather", "steps_per_epoch"):
        expect(mc[key] == mp[key], f"metric {key}: C {mc[key]} vs twin {mp[key]}")


def rank_pid(program, rank, arg):
    """The pid of a running `program` process whose environment has RANK=rank and whose command
    line has `arg` (this job's own: other tests may run the same program at the same time), or None."""
    want = os.path.realpath(program)
    for d in glob.glob("/proc/[0-9]*"):
        try:
            if os.path.realpath(os.path.join(d, "exe")) != want:
                continue
            with open(os.path.join(d, "cmdline"), "rb") as f:
                if arg.encode() not in f.read().split(b"\0"):
                    continue
            with open(os.path.join(d, "environ"), "rb") as f:
                if f"RANK={rank}".encode() in f.read().split(b"\0"):
                    return int(os.path.basename(d))
        except OSError:
            continue
    return None


def check_safetensors(path):
    """The tensor names of a complete safetensors file (header parsed here, data length checked)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    end = max(e["data_offsets"][1] for e in header.values())
    expect(8 + n + end == len(raw), f"{path}: data ends at {8 + n + end}, the file has {len(raw)} bytes")
    return sorted(header)


def cmd_kill(ch08, work):
    os.makedirs(work, exist_ok=True)
    ckpt = os.path.join(work, "last.safetensors")
    r = run([ch08, "--quick", "--save", fresh(ckpt)])
    expect(r.returncode == 0, f"the complete run: exit code {r.returncode}", r)
    with open(ckpt, "rb") as f:
        before = f.read()
    names = check_safetensors(ckpt)
    # The same job again, rank 1 killed once rank 0 prints the training section.
    t0 = time.monotonic()
    p = subprocess.Popen([ch08, "--quick", "--save", ckpt], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    seen = []
    for line in p.stdout:
        seen.append(line)
        if line.startswith("== training"):
            break
    pid = None
    while pid is None and time.monotonic() - t0 < 60 and p.poll() is None:
        pid = rank_pid(ch08, 1, ckpt)
    expect(pid is not None, f"no rank-1 process of {ch08} found; output so far:\n{''.join(seen)}")
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    try:
        out, err = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        expect(False, f"the job still ran 90 s after rank 1 was killed:\n{err[-3000:]}")
    took = time.monotonic() - killed
    print(f"rank 1 (pid {pid}) killed in training; the job exited {p.returncode} {took:.1f} s later")
    expect(p.returncode != 0 and took < 60, f"exit {p.returncode} {took:.1f} s after the kill:\n{err[-3000:]}")
    with open(ckpt, "rb") as f:
        expect(f.read() == before, "the previous checkpoint changed")
    expect(check_safetensors(ckpt) == names, "the previous checkpoint no longer parses the same")
    left = glob.glob(os.path.join(work, "*.tmp.*"))
    expect(not left, f"temporary files left: {left}")
    print(f"the previous checkpoint ({len(names)} tensors) is intact and loadable")
    print("PASS")


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 2),
                                       "twin": (cmd_twin, 4), "kill": (cmd_kill, 2)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
