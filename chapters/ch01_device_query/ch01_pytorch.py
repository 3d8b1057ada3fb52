#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 1's PyTorch twin: the device report of ch01, asked through torch.cuda.

It takes the same flags as the C program and prints the same sections with the
same labels, so the two outputs can be read side by side (or diffed):

    ./ch01 --device cpu
    /usr/bin/python3 chapters/ch01_device_query/ch01_pytorch.py --device cpu

Run it with a Python that has torch (on Debian, /usr/bin/python3 with the
python3-torch package). It works on a CPU-only machine and with a CPU-only
build of PyTorch. Exit codes as in the C chapters: 2 for a bad flag (argparse),
1 for a run-time error such as --device cuda without a GPU.
"""
import os
import re
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares)

LABEL_WIDTH = 28  # the C program's value column


def row(key, value):
    """One 'key: value' line of the report, the value column aligned."""
    print(f"{key + ':':<{LABEL_WIDTH}}{value}")


def parse_args(argv):
    p = twin.parser("ch01_pytorch.py", "Chapter 1 (PyTorch twin): what the GPUs (or the CPU) of this machine can do.")
    twin.explain(p, {})
    return p.parse_args(argv)


def show_availability(torch, m):
    twin.section("availability")
    available = torch.cuda.is_available()
    count = torch.cuda.device_count()
    # current_device() raises where there is no GPU; ct answers -1.
    current = torch.cuda.current_device() if available else -1
    row("is_available", str(available).lower())
    row("device_count", count)
    row("current_device", current)
    if not available:
        row("unavailable_reason", twin.why_unavailable(torch))
    m.update(cuda_available=int(available), cuda_device_count=count, cuda_current_device=current,
             cuda_unavailable_reason="" if available else twin.why_unavailable(torch))


def show_devices(torch, m):
    twin.section("devices")
    count = torch.cuda.device_count()
    if count == 0:
        print("(no CUDA devices)")
    gib = 1024 ** 3
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        free, total = torch.cuda.mem_get_info(i)
        print(f"cuda:{i} {p.name}")
        row("  compute capability", f"{p.major}.{p.minor}")
        row("  total memory", f"{p.total_memory / gib:.2f} GiB ({p.total_memory} bytes)")
        row("  free memory", f"{free / gib:.2f} GiB")
        row("  SMs", p.multi_processor_count)
        # Fields that only some PyTorch versions expose.
        optional = {
            "  SM clock": ("clock_rate", lambda v: f"{v / 1e3:.0f} MHz"),
            "  memory clock": ("memory_clock_rate", lambda v: f"{v / 1e3:.0f} MHz"),
            "  memory bus width": ("memory_bus_width", lambda v: f"{v} bits"),
            "  L2 cache": ("L2_cache_size", lambda v: f"{v / 2**20:.1f} MiB"),
            "  max threads per SM": ("max_threads_per_multi_processor", str),
            "  shared memory per block": ("shared_memory_per_block", lambda v: f"{v // 1024} KiB"),
            "  shared memory per SM": ("shared_memory_per_multiprocessor", lambda v: f"{v // 1024} KiB"),
            "  registers per SM": ("regs_per_multiprocessor", str),
            "  warp size": ("warp_size", str),
        }
        for label, (attr, fmt) in optional.items():
            v = getattr(p, attr, None)
            row(label, fmt(v) if v is not None else "n/a (not in this PyTorch's device properties)")
        clock = getattr(p, "memory_clock_rate", None)
        width = getattr(p, "memory_bus_width", None)
        if clock and width:
            bandwidth = 2 * clock * 1e3 * width / 8 / 1e9  # DDR: two transfers per clock
            row("  peak memory bandwidth", f"{bandwidth:.1f} GB/s = 2 x {clock / 1e3:.0f} MHz x {width} bits / 8")
            m[f"cuda{i}_peak_memory_bandwidth_gbs"] = bandwidth
        m.update({f"cuda{i}_name": p.name, f"cuda{i}_capability": f"{p.major}.{p.minor}",
                  f"cuda{i}_total_memory_bytes": p.total_memory, f"cuda{i}_free_memory_bytes": free,
                  f"cuda{i}_sm_count": p.multi_processor_count})
    v100 = 2 * 877e6 * 4096 / 8 / 1e9  # NVIDIA's CUDA C++ Best Practices Guide: 898 GB/s
    row("formula check (V100)", f"2 x 877 MHz x 4096 bits / 8 = {v100:.1f} GB/s (NVIDIA's guide: 898 GB/s)")
    m["bandwidth_formula_v100_gbs"] = v100


def show_versions(torch, m):
    twin.section("versions")
    row("torch", torch.__version__)
    row("torch cuda build", "yes" if torch.version.cuda else "no (torch.version.cuda is None)")
    row("cuda runtime", torch.version.cuda or "none")  # the CUDA torch was built with
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    row("cudnn", cudnn if cudnn is not None else "none")
    m.update(torch_version=torch.__version__, cuda_runtime_version=torch.version.cuda or "none",
             cudnn_version=cudnn if cudnn is not None else "none")


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return 'unknown (no "model name" in /proc/cpuinfo)'


def mem_available_bytes():
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def show_cpu(torch, m):
    twin.section("cpu")
    gib = 1024 ** 3
    model = cpu_model()
    logical = os.cpu_count()
    usable = len(os.sched_getaffinity(0))
    threads = torch.get_num_threads()
    ram_total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    ram_free = mem_available_bytes()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    blas = blas.group(1) if blas else "unknown"
    row("model", model)
    row("logical cores", logical)
    row("usable cores", usable)
    row("openmp max threads", threads)  # torch.get_num_threads()
    row("memory", f"{ram_total / gib:.1f} GiB total, {ram_free / gib:.1f} GiB available")
    row("blas", blas)
    row("memory_allocated(cpu)", "n/a (PyTorch keeps no CPU allocator statistics)")
    m.update(cpu_model=model, cpu_logical_cores=logical, cpu_usable_cores=usable,
             omp_max_threads=threads, ram_total_bytes=ram_total, ram_available_bytes=ram_free, blas=blas)


def show_tensor(torch, device, m):
    twin.section("tensor")
    x = torch.randn(3, 3).to(device)  # as the seed tutorials write it
    print(f"x = randn(3, 3) on {device}:")
    print(x)
    row("x.get_device()", x.get_device())
    if device.type == "cuda":
        row(f"memory_allocated({device})", f"{torch.cuda.memory_allocated(device)} bytes")
        row(f"memory_reserved({device})", f"{torch.cuda.memory_reserved(device)} bytes")
    m["tensor_get_device"] = x.get_device()


def main(argv=None):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends us quietly, as it ends ./ch01
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch  # after argparse, so that --help works without torch

    device, m = twin.begin(torch, args)  # the device, torch.manual_seed, "device: ...", the metrics
    show_availability(torch, m)
    show_devices(torch, m)
    show_versions(torch, m)
    show_cpu(torch, m)
    show_tensor(torch, device, m)

    twin.write_metrics(args.metrics, m)  # atomically, as ct_metrics_close does
    return 0


if __name__ == "__main__":
    sys.exit(main())
