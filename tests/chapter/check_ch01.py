#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 1's tests, run by ctest (tests/chapter/ch01.cmake).

    check_ch01.py report  CH01 METRICS.json         the CPU report and its JSON
    check_ch01.py badflag CH01                      usage errors exit 2, --help 0
    check_ch01.py cuda_unavailable CH01             --device cuda without a GPU exits 1
    check_ch01.py gpu CH01 METRICS.json HAVE_CUDA   --device cuda on a GPU machine
    check_ch01.py twin CH01 PYTHON TWIN.py WORKDIR  ch01_pytorch.py agrees with ch01

Exit 0: passed; 1: failed (the reason is printed); 77: skipped (ctest's
SKIP_RETURN_CODE), only where the thing under test cannot exist here.
The references are independent of the program: os.cpu_count() and the
affinity mask from Python, the 898 GB/s that NVIDIA's CUDA C++ Best Practices
Guide derives for the V100, nvidia-smi's view of the GPUs, and PyTorch.
"""
import functools
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaptertest  # noqa: E402
from chaptertest import (expect, expect_cuda_ok, expect_usage_error, fresh, key_values,  # noqa: E402
                         load_metrics, nvidia_smi, run_cuda, run_with_twin, section_lines, sections_of,
                         skip, skip_unless_cuda_build, skip_unless_imports)

SECTIONS = ["availability", "devices", "versions", "cpu", "tensor"]
run = functools.partial(chaptertest.run, timeout=120)  # ch01 answers in well under a second


def rows_of(stdout, section):
    """The 'key: value' rows printed under `== section ==`."""
    return key_values(section_lines(stdout, section))


def check_common(r, m, device):
    """What every ch01 run must show, whatever the device."""
    expect(r.returncode == 0, f"exit code {r.returncode}, expected 0", r)
    lines = r.stdout.splitlines()
    expect(lines and lines[0].startswith("device: "), "the first line does not start with 'device: '", r)
    expect(sections_of(r.stdout) == SECTIONS,
           f"sections {sections_of(r.stdout)}, expected {SECTIONS} in this order", r)

    avail = rows_of(r.stdout, "availability")
    expect(avail.get("is_available") in ("true", "false"), f"is_available row missing or odd: {avail}", r)
    printed_available = avail["is_available"] == "true"
    expect(m.get("cuda_available") == int(printed_available),
           f"metrics cuda_available={m.get('cuda_available')!r} but the report printed {avail['is_available']}")
    expect(str(m.get("cuda_device_count")) == avail.get("device_count"),
           f"metrics cuda_device_count={m.get('cuda_device_count')!r}, printed {avail.get('device_count')!r}")
    if not printed_available:
        expect(m.get("cuda_device_count") == 0, "CUDA unavailable but device_count is not 0")
        expect(avail.get("unavailable_reason"), "CUDA unavailable but no unavailable_reason row", r)
        expect(m.get("cuda_unavailable_reason"), "CUDA unavailable but metrics give no reason")

    # The CPU facts against Python's own view of this machine.
    expect(m.get("cpu_logical_cores") == os.cpu_count(),
           f"cpu_logical_cores={m.get('cpu_logical_cores')!r}, os.cpu_count()={os.cpu_count()}")
    usable = len(os.sched_getaffinity(0))
    expect(m.get("cpu_usable_cores") == usable,
           f"cpu_usable_cores={m.get('cpu_usable_cores')!r}, len(os.sched_getaffinity(0))={usable}")
    cpu = rows_of(r.stdout, "cpu")
    expect(cpu.get("logical cores") == str(os.cpu_count()), f"printed logical cores {cpu.get('logical cores')!r}", r)
    expect(isinstance(m.get("omp_max_threads"), int) and m["omp_max_threads"] >= 1, "omp_max_threads missing")
    expect(isinstance(m.get("ram_total_bytes"), int) and m["ram_total_bytes"] > 0, "ram_total_bytes missing")
    expect("OpenBLAS" in str(m.get("blas")), f"blas={m.get('blas')!r}: expected OpenBLAS's config string")
    expect(m.get("cpu_memory_allocated_bytes") == 0,
           f"cpu_memory_allocated_bytes={m.get('cpu_memory_allocated_bytes')!r} before any tensor exists")

    # The bandwidth formula against NVIDIA's worked example (V100: 898 GB/s).
    v100 = m.get("bandwidth_formula_v100_gbs")
    expect(isinstance(v100, (int, float)) and abs(v100 - 898.0) < 0.5,
           f"bandwidth_formula_v100_gbs={v100!r}, NVIDIA's guide gives 898 GB/s")
    # The FP32 formula on the V100's numbers (80 SMs, 64 lanes, 1530 MHz): NVIDIA's 15.7 TFLOPS.
    v100_fp32 = m.get("fp32_formula_v100_gflops")
    expect(isinstance(v100_fp32, (int, float)) and abs(v100_fp32 - 80 * 64 * 2 * 1.530) < 0.05,
           f"fp32_formula_v100_gflops={v100_fp32!r}, 80 SMs x 64 lanes x 2 x 1.530 GHz = 15667.2 GFLOP/s")

    # The live tensor: printed as PyTorch prints a 3x3 tensor, on the device.
    expect(re.search(r"^tensor\(\[\[.*\],\n {8}\[.*\],\n {8}\[.*\]\]", r.stdout, re.M),
           "no 3x3 tensor printed in PyTorch's format", r)
    index = -1 if device == "cpu" else int(device.split(":")[1])
    expect(m.get("tensor_get_device") == index, f"tensor_get_device={m.get('tensor_get_device')!r}, expected {index}")
    expect(rows_of(r.stdout, "tensor").get("x.get_device()") == str(index), "x.get_device() row wrong", r)
    if device.startswith("cuda"):
        expect("device='%s'" % device in r.stdout, f"the tensor does not print device='{device}'", r)
    else:
        expect("device=" not in r.stdout, "a CPU tensor printed a device= suffix", r)
    expect(m.get("tensor_memory_allocated_bytes", 0) >= 36, "the 3x3 tensor is not counted as allocated")


def cmd_report(ch01, metrics):
    r = run([ch01, "--device", "cpu", "--quick", "--metrics", fresh(metrics)])
    m = load_metrics(metrics) if r.returncode == 0 else {}
    expect(r.returncode == 0, f"exit code {r.returncode}", r)
    expect(r.stdout.splitlines()[0] == "device: cpu", "asked for the CPU, the first line must be 'device: cpu'", r)
    check_common(r, m, "cpu")
    expect(m.get("device") == "cpu", f"metrics device={m.get('device')!r}")

    # Under "auto" the first line names the device and, on the CPU, why.
    r = run([ch01, "--quick"])
    expect(r.returncode == 0, f"--device auto: exit code {r.returncode}", r)
    first = r.stdout.splitlines()[0]
    avail = rows_of(r.stdout, "availability").get("is_available")
    if avail == "true":
        expect(re.fullmatch(r"device: cuda:\d+ \(.+\)", first), f"auto with CUDA printed {first!r}", r)
    else:
        expect(re.fullmatch(r"device: cpu \(CUDA unavailable: .+\)", first),
               f"auto without CUDA must say why: {first!r}", r)
    print("PASS")


def cmd_badflag(ch01):
    for args, needles in [
        (["--bogus"], ["--bogus"]),
        (["--seed", "abc"], ["--seed", '"abc"', "non-negative integer"]),
        (["--seed=abc"], ["--seed", '"abc"']),
        (["--seed", "-1"], ["--seed", '"-1"']),
        (["--seed"], ["--seed", "expects a value"]),
        (["--device", "gpu"], ["--device", '"gpu"']),
        (["--device", "cuda:x"], ["--device", '"cuda:x"']),
        (["--metrics"], ["--metrics"]),
        (["--quick=yes"], ["--quick"]),
        (["extra"], ['"extra"']),
    ]:
        r = run([ch01] + args)
        expect_usage_error(r, args, needles)
        expect("usage:" in r.stderr, f"{args}: no usage on stderr", r)
        expect("device:" not in r.stdout, f"{args}: ran anyway", r)
    r = run([ch01, "--help"])
    expect(r.returncode == 0, f"--help: exit code {r.returncode}, expected 0", r)
    expect(r.stdout.startswith("usage: ch01") and "--metrics" in r.stdout and r.stderr == "",
           "--help must print the usage to stdout only", r)
    print("PASS")


def cmd_cuda_unavailable(ch01):
    r = run([ch01, "--quick"])
    expect(r.returncode == 0, f"--device auto: exit code {r.returncode}", r)
    if r.stdout.startswith("device: cuda"):
        skip("CUDA is available here; the no-GPU error path cannot be exercised")
    for spec in ("cuda", "cuda:0"):
        r = run([ch01, "--device", spec, "--quick"])
        expect(r.returncode == 1, f"--device {spec} without CUDA: exit code {r.returncode}, expected 1", r)
        expect(re.search(r"CUDA unavailable: \S", r.stderr), f"--device {spec}: stderr does not give CUDA's reason", r)
        expect("== " not in r.stdout and "device:" not in r.stdout, f"--device {spec}: printed a report anyway", r)
    print("PASS")


def nvidia_smi_gpus():
    """[(name, memory MiB, max SM MHz, max memory MHz)] from nvidia-smi, [] if none or no nvidia-smi."""
    out = nvidia_smi("--query-gpu=name,memory.total,clocks.max.sm,clocks.max.memory",
                     "--format=csv,noheader,nounits")
    if out is None:
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4:
            gpus.append(parts)
    return gpus


def cmd_gpu(ch01, metrics, have_cuda):
    skip_unless_cuda_build(have_cuda)
    gpus = nvidia_smi_gpus()
    r = run_cuda([ch01, "--device", "cuda", "--quick", "--metrics", fresh(metrics)], timeout=120)
    expect_cuda_ok(r)
    m = load_metrics(metrics)
    first = r.stdout.splitlines()[0]
    match = re.fullmatch(r"device: (cuda:\d+) \((.+)\)", first)
    expect(match, f"first line {first!r}, expected 'device: cuda:N (name)'", r)
    check_common(r, m, match.group(1))
    expect(m.get("cuda_available") == 1 and m.get("cuda_device_count", 0) >= 1, "CUDA device used but not counted")
    expect(m.get("cuda0_name") == match.group(2) or match.group(1) != "cuda:0", "device name differs from cuda0_name")

    # The bandwidth the chapter reports follows from the clock and width it reports.
    mhz, bits = m["cuda0_memory_clock_mhz"], m["cuda0_memory_bus_width_bits"]
    expect(mhz > 0 and bits > 0, f"memory clock {mhz} MHz, bus {bits} bits")
    want = 2 * mhz * 1e6 * bits / 8 / 1e9
    expect(abs(m["cuda0_peak_memory_bandwidth_gbs"] - want) <= 1e-6 * want, "peak bandwidth != 2 x clock x width / 8")
    expect(m.get("cuda0_warp_size") == 32, f"warp size {m.get('cuda0_warp_size')}")
    expect(m.get("cuda0_peak_fp32_gflops", 0) > 0, "no FP32 peak for this GPU")

    # Against nvidia-smi, an independent reader of the same hardware.
    if gpus and not os.environ.get("CUDA_VISIBLE_DEVICES"):
        expect(m["cuda_device_count"] == len(gpus), f"ct counts {m['cuda_device_count']} GPUs, nvidia-smi {len(gpus)}")
        name, mem_mib, sm_mhz, mem_mhz = gpus[0]
        expect(m["cuda0_name"] == name, f"ct names GPU 0 {m['cuda0_name']!r}, nvidia-smi {name!r}")

        def near(ours, theirs, what):
            try:
                theirs = float(theirs)
            except ValueError:
                print(f"note: nvidia-smi gives no {what} ({theirs!r})")
                return
            expect(abs(ours - theirs) <= 0.05 * theirs, f"{what}: ct {ours}, nvidia-smi {theirs}")

        near(m["cuda0_total_memory_bytes"] / 2**20, mem_mib, "total memory (MiB)")
        near(m["cuda0_sm_clock_mhz"], sm_mhz, "max SM clock (MHz)")
        near(mhz, mem_mhz, "max memory clock (MHz)")
    print("PASS")


def cmd_twin(ch01, python, twin, workdir):
    skip_unless_imports(python, "torch")
    rc, rp, mc, mp = run_with_twin("ch01", [ch01, "--quick"], [python, twin, "--quick"], workdir,
                                   timeout=120, twin_timeout=300)
    if mc.get("cuda_available") == 1 and mp.get("cuda_available") == 0:
        skip("ct sees a GPU but this PyTorch cannot use it (a CPU-only torch); nothing to compare")

    expect(sections_of(rp.stdout) == sections_of(rc.stdout),
           f"sections differ: twin {sections_of(rp.stdout)}, C {sections_of(rc.stdout)}", rp)
    fc, fp = rc.stdout.splitlines()[0], rp.stdout.splitlines()[0]
    expect(fc.split(" ")[:2] == fp.split(" ")[:2], f"first lines pick different devices: {fc!r} vs {fp!r}")
    ac, ap = rows_of(rc.stdout, "availability"), rows_of(rp.stdout, "availability")
    for key in ("is_available", "device_count"):
        expect(ac.get(key) == ap.get(key), f"{key}: C prints {ac.get(key)!r}, PyTorch {ap.get(key)!r}")
    for key in ("cuda_available", "cuda_device_count", "cpu_logical_cores", "cpu_usable_cores"):
        expect(mc.get(key) == mp.get(key), f"metrics {key}: C {mc.get(key)!r}, PyTorch {mp.get(key)!r}")
    bc, bp = mc.get("bandwidth_formula_v100_gbs"), mp.get("bandwidth_formula_v100_gbs")
    expect(abs(bc - bp) <= 1e-9 * abs(bp), f"V100 bandwidth: C {bc!r}, PyTorch {bp!r}")
    for i in range(mc.get("cuda_device_count", 0)):
        for key in ("name", "capability", "total_memory_bytes", "sm_count"):
            k = f"cuda{i}_{key}"
            expect(mc.get(k) == mp.get(k), f"metrics {k}: C {mc.get(k)!r}, PyTorch {mp.get(k)!r}")
    print("PASS")


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 1),
                                       "cuda_unavailable": (cmd_cuda_unavailable, 1), "gpu": (cmd_gpu, 3),
                                       "twin": (cmd_twin, 4)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
