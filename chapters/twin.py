# SPDX-License-Identifier: MIT
"""twin: what every chapter's PyTorch twin shares, as the C chapters share common/app.

A twin starts with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import twin  # noqa: E402  (chapters/twin.py: flags, sections, errors)

which also puts tools/fixtures (st, fmnist, batches, ...) on the path, so a twin runs
the same from any folder: a build folder, tools/book, tools/record, the tests.

- parser(prog, description) -> an argparse parser with the four flags every chapter
  takes (--device, --seed, --quick, --metrics, as common/include/cli.h); the twin adds its own.
- parse(p, argv, helps) -> the parsed flags, each flag's --help saying what it does and its
  default (twin_help.explain).
- section(name) prints "== name ==", the line the book places output by.
- die(message) prints "<prog>: message" on stderr and exits 1 (a run-time error).
- import_torch() -> torch, or a clear exit 1 naming the Python to use (after the flags: --help
  works without torch).
- pick_device(torch, spec) -> (device, why the CPU was chosen or None), as ct_cli_begin.
- begin(torch, args) -> (device, metrics): what ct_cli_begin does: picks the device, seeds
  torch, prints the "device: ..." line, and starts the metrics with device, seed and quick.
- device_of(torch, spec) -> the torch.device of --device: auto is cuda:0 where CUDA is available.
- write_metrics(path, m) writes the figures as ct_metrics_close does: one JSON object,
  NaN and infinities as null, atomically (a temporary, then a rename); nothing without a path.

Standard library only: it imports no torch, so --help works without it.
"""
import argparse
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "fixtures"))
from twin_help import explain  # noqa: E402  (each flag's help and default, as the C program's --help)
from atomic import write_atomic  # noqa: E402  (a file whole or not at all, as ct_write_file)

PROG = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "twin"

DEVICE_HELP = "auto (the GPU when CUDA is available), cpu, cuda, cuda:N"
QUICK_HELP = "a small workload, seconds on a 2-core CPU (used by the tests)"


def section(name):
    print(f"== {name} ==", flush=True)


def die(message):
    sys.stdout.flush()
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(1)


def device_spec(text):
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d{1,4}", text):
        return text
    raise argparse.ArgumentTypeError(f'expects auto, cpu, cuda or cuda:N, got "{text}"')


def non_negative_int(text):
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f'expects a non-negative integer, got "{text}"')
    return int(text)


def parser(prog, description, quick=QUICK_HELP, seed=non_negative_int, device=device_spec):
    """argparse.ArgumentParser with --device, --seed, --quick and --metrics; die() names prog."""
    global PROG
    PROG = prog
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--device", type=device, default="auto", help=DEVICE_HELP)
    p.add_argument("--seed", type=seed, default=0, help="seed for torch.manual_seed")
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--metrics", metavar="FILE", help="write the figures as JSON to FILE")
    return p


def parse(p, argv, helps=None):
    """The flags of argv; helps ({"--flag": text}) gives the flags added without a help text theirs."""
    explain(p, helps or {})
    return p.parse_args(argv)


def import_torch():
    try:
        import torch
    except ImportError as e:
        die(f"cannot import torch ({e}); run this with a Python that has PyTorch (Debian: /usr/bin/python3)")
    return torch


def device_of(torch, spec):
    """torch.device("cuda:0" if torch.cuda.is_available() else "cpu") for auto; a CUDA device where
    this PyTorch has no CUDA stops the run (exit 1), as the C program does."""
    dev = torch.device(("cuda:0" if torch.cuda.is_available() else "cpu") if spec == "auto" else spec)
    if dev.type == "cuda" and not torch.cuda.is_available():
        die(f"--device {spec}: CUDA is not available to this PyTorch")
    return dev


def begin(torch, args):
    device, why = pick_device(torch, args.device)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        print(f"device: {device} ({torch.cuda.get_device_name(device)})")
    else:
        print(f"device: cpu ({why})" if why else "device: cpu")
    return device, {"device": str(device), "seed": args.seed, "quick": int(args.quick)}


def why_unavailable(torch):
    """PyTorch's is_available() says only False; ask it for the reason."""
    if torch.version.cuda is None:
        return "this PyTorch was built without CUDA"
    try:
        torch.cuda.init()  # raises with the reason, e.g. "Found no NVIDIA driver"
    except Exception as e:  # noqa: BLE001 - any failure is the reason
        return str(e).strip().splitlines()[0]
    return "no CUDA device found"


def pick_device(torch, spec):
    """torch.device("cuda" if torch.cuda.is_available() else "cpu"), with the reason."""
    if spec == "cpu":
        return torch.device("cpu"), None
    if not torch.cuda.is_available():
        if spec == "auto":
            return torch.device("cpu"), f"CUDA unavailable: {why_unavailable(torch)}"
        die(f"--device {spec}: CUDA unavailable: {why_unavailable(torch)}")
    index = torch.cuda.current_device() if spec in ("auto", "cuda") else int(spec.split(":")[1])
    if index >= torch.cuda.device_count():
        die(f"--device {spec}: CUDA device index {index} out of range "
            f"(there are {torch.cuda.device_count()} devices)")
    torch.cuda.set_device(index)
    return torch.device("cuda", index), None


def _plain(v):
    """v with NaN and infinities as None (JSON null, as the C programs write them)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _scalar(o):
    """numpy and torch scalars as numbers; anything else (a dtype) as its text."""
    try:
        return _plain(float(o))
    except (TypeError, ValueError):
        return str(o)


def write_metrics(path, m):
    if not path:
        return
    text = json.dumps(_plain(m), indent=2, allow_nan=False, default=_scalar, ensure_ascii=False) + "\n"
    try:
        write_atomic(path, lambda f: f.write(text.encode("utf-8")))
    except OSError as e:
        die(f'cannot write "{path}": {e.strerror}')
