// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 1 章　设备查询：这台机器能做什么

几乎每个 PyTorch 训练脚本都以这样一行开头：

```python
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
```

这一行只问了一件事：有没有能用的 GPU？本章用 C 问同一个问题，并且问得更细：有几块 GPU，各是什么型号，有多少个 SM，显存理论上每秒能搬多少字节；如果没有 GPU，原因是什么，CPU 这边又能提供什么（核心、线程、负责矩阵运算的 BLAS 库）。

本章也是其余各章的样板。每一章都接受同样的参数（`--device`、`--seed`、`--quick`、`--metrics`、`--help`），输出的第一行都写明用的是哪个设备，输出都分成以 `== 名称 ==` 开头的小节。这些约定只在这里讲一次。

构建并运行：

```sh
cmake --preset default && cd build
ninja ch01_device_query && ./ch01
./ch01 --device cpu     # 有 GPU 也只用 CPU
./ch01 --help
```
:::
::: en
# Chapter 1. Device query: what can this machine do?

Nearly every PyTorch training script opens with this line:

```python
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
```

It asks a single question: is there a GPU we can use? This chapter asks the same question in C and then asks more: how many GPUs, which models, how many SMs, how many bytes per second their memory can move in theory; and when there is no GPU, why not, and what the CPU offers instead (cores, threads, the BLAS library that does the matrix work).

The chapter is also the template for all the others. Every chapter takes the same flags (`--device`, `--seed`, `--quick`, `--metrics`, `--help`), names its device on the first line of output, and splits its output into sections headed `== name ==`. These conventions are explained once, here.

Build and run:

```sh
cmake --preset default && cd build
ninja ch01_device_query && ./ch01
./ch01 --device cpu     # the CPU only, even where there is a GPU
./ch01 --help
```
:::
*/

/*md hide*/
#define _GNU_SOURCE // sched_getaffinity, CPU_COUNT

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ct.h"

// OpenBLAS's own queries (OpenBLAS's cblas.h has them too; declared here so
// the chapter does not depend on which cblas.h is first on the include path).
char *openblas_get_config(void);
char *openblas_get_corename(void);
int openblas_get_num_threads(void);
int openblas_get_parallel(void);

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

// One "key: value" line of the report, the value column aligned.
static void row(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void row(const char *key, const char *fmt, ...) {
  char label[64];
  snprintf(label, sizeof label, "%s:", key);
  printf("%-28s", label);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
}

// Metrics for GPU i are flat keys "cuda<i>_<name>".
static void metric_gpu_num(ct_metrics *m, int i, const char *name, double v) {
  char key[64];
  snprintf(key, sizeof key, "cuda%d_%s", i, name);
  ct_metrics_num(m, key, v);
}
static void metric_gpu_str(ct_metrics *m, int i, const char *name, const char *v) {
  char key[64];
  snprintf(key, sizeof key, "cuda%d_%s", i, name);
  ct_metrics_str(m, key, v);
}

// The "model name" line of /proc/cpuinfo (x86; other CPUs may lack it).
static void read_cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown (no \"model name\" in /proc/cpuinfo)");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    char *v = strchr(line, ':');
    if (!v) continue;
    v += 1 + strspn(v + 1, " \t");
    v[strcspn(v, "\n")] = '\0';
    if (*v) snprintf(buf, len, "%s", v);
    break;
  }
  fclose(f);
}

static void show_availability(const ct_cli *cli, ct_metrics *m);
static void show_devices(const ct_cli *cli, ct_metrics *m);
static void show_versions(ct_metrics *m);
static void show_cpu(ct_metrics *m);
static void show_tensor(const ct_cli *cli, ct_metrics *m);
/*md show*/

/*md
::: zh
## 命令行与第一行输出

`main` 只做三件事：解析参数，选定设备，再依次打印各节。

`ct_cli_parse` 相当于 Python 的 `argparse`：它认识公共参数，也能接受一章自己的参数（本章没有，所以传 `NULL, 0`）。参数写错时，它在 stderr 上指出是哪个参数、哪个值不对，打印用法，以退出码 2 结束；运行时出错（比如在没有 GPU 的机器上要求 `--device cuda`）则以退出码 1 结束。测试和脚本靠这两个退出码分辨“调用错了”和“运行失败了”。

`ct_cli_begin` 做的正是开头那行 PyTorch 代码做的事：`--device auto`（默认值）时有 GPU 就用 GPU，没有就退回 CPU，并把退回的原因写进第一行。它还调用 `ct_manual_seed(seed)`，对应 `torch.manual_seed(seed)`。

`--metrics FILE` 把这次运行得到的数字写成一个 JSON 对象，给画图和基准测试的脚本读。`ct_cli_begin` 打开它（`cli.metrics`），先记下设备、种子和 `--quick`。文件先写到一个临时名字，写完再改名，所以读的一方不会读到写了一半的文件。本章本来就很快，`--quick` 在这里什么也不改变；但它仍然被接受，因为测试对每一章都带着它运行。
:::
::: en
## The command line and the first line of output

`main` does three things: it parses the flags, picks the device, and prints the sections one after another.

`ct_cli_parse` plays the part of Python's `argparse`: it knows the shared flags and accepts a chapter's own (this chapter has none, hence `NULL, 0`). On a bad flag it names the flag and the value at fault on stderr, prints the usage and exits with code 2; a failure at run time (such as `--device cuda` on a machine without a GPU) exits with code 1. Tests and scripts rely on the two codes to tell "called wrongly" from "failed while running".

`ct_cli_begin` does what the PyTorch line above does: with `--device auto` (the default) it takes the GPU when there is one and otherwise falls back to the CPU, writing the reason for the fallback into the first line. It also calls `ct_manual_seed(seed)`, the counterpart of `torch.manual_seed(seed)`.

`--metrics FILE` writes the run's figures as one JSON object for plotting and benchmark scripts. `ct_cli_begin` opens it (`cli.metrics`) and records the device, the seed and `--quick` first. The file is written under a temporary name and renamed when complete, so a reader never sees half of it. This chapter is fast anyway, so `--quick` changes nothing here; it is still accepted because the tests run every chapter with it.
:::
*/
int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch01",
                .summary = "Chapter 1: what the GPUs (or the CPU) of this machine can do."};
  ct_cli_parse(&cli, argc, argv, NULL, 0);
  ct_cli_begin(&cli); // prints "device: ...", records device, seed and quick

  ct_metrics *m = cli.metrics; // a no-op sink without --metrics

  show_availability(&cli, m);
  show_devices(&cli, m);
  show_versions(m);
  show_cpu(m);
  show_tensor(&cli, m);

  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## GPU 能不能用

最基本的三个问题，各对应一个 PyTorch 函数：

| PyTorch | ct |
|---|---|
| `torch.cuda.is_available()` | `ct_cuda_is_available()` |
| `torch.cuda.device_count()` | `ct_cuda_device_count()` |
| `torch.cuda.current_device()` | `ct_cuda_current_device()` |

“当前设备”是没有写明编号时工作默认去的那块 GPU；`ct_cli_begin` 已经把选中的 GPU 设成了当前设备。没有 GPU 时，PyTorch 的 `current_device()` 会抛出异常，ct 的则返回 -1。

### 没有 GPU 时，原因是什么

`torch.cuda.is_available()` 只回答 `False`，不说为什么。ct 保留了 CUDA 自己给出的原因，用 `ct_cuda_unavailable_reason()` 取得。常见的情况有三种：

- 程序编译时就没有 CUDA（用了 `cpu` 预设，或者机器上没有 nvcc）。这相当于 CPU 版的 PyTorch，那里 `torch.version.cuda` 是 `None`。
- 有 CUDA 运行时库，没有驱动：`cudaGetDeviceCount` 返回 `cudaErrorInsufficientDriver`，即 “CUDA driver version is insufficient for CUDA runtime version”。运行时库（libcudart，链接在程序里）只能通过驱动（libcuda 和内核模块）接触硬件，而且要求驱动不比自己旧。没装驱动时，驱动版本按 0 算，于是报“驱动版本不够”。驱动真的太旧时，报的也是这一条。
- 有驱动，没有 GPU，或者 `CUDA_VISIBLE_DEVICES` 把 GPU 全都藏起来了：`cudaErrorNoDevice`。

本书的开发机属于第二种：装了 CUDA 工具包，但既没有 GPU 也没有驱动。在那里运行，第一行是 `device: cpu (CUDA unavailable: …)`，本节的最后一行给出完整的原因。
:::
::: en
## Is there a GPU?

Three basic questions, each with its PyTorch function:

| PyTorch | ct |
|---|---|
| `torch.cuda.is_available()` | `ct_cuda_is_available()` |
| `torch.cuda.device_count()` | `ct_cuda_device_count()` |
| `torch.cuda.current_device()` | `ct_cuda_current_device()` |

The current device is the GPU that work goes to when no index is named; `ct_cli_begin` has already made the chosen GPU current. Where there is no GPU, PyTorch's `current_device()` raises an exception and ct's returns -1.

### When there is no GPU, why not?

`torch.cuda.is_available()` answers `False` and keeps the reason to itself. ct keeps CUDA's own reason, which `ct_cuda_unavailable_reason()` returns. Three cases are common:

- The program was built without CUDA (the `cpu` preset, or no nvcc on the machine). This is PyTorch's CPU-only build, where `torch.version.cuda` is `None`.
- The CUDA runtime is there but the driver is not: `cudaGetDeviceCount` returns `cudaErrorInsufficientDriver`, "CUDA driver version is insufficient for CUDA runtime version". The runtime (libcudart, linked into the program) reaches the hardware only through the driver (libcuda and the kernel module), and it needs a driver at least as new as itself. With no driver installed the driver's version counts as 0, hence "insufficient". A driver that really is too old gives the same error.
- A driver but no GPU, or `CUDA_VISIBLE_DEVICES` hiding all of them: `cudaErrorNoDevice`.

This book's development machines are the second case: they have the CUDA toolkit but neither a GPU nor a driver. Run there, the first line reads `device: cpu (CUDA unavailable: …)` and the last line of this section gives the full reason.
:::
*/
static void show_availability(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("availability");
  bool available = ct_cuda_is_available(); // torch.cuda.is_available()
  int count = ct_cuda_device_count();      // torch.cuda.device_count()
  int current = ct_cuda_current_device();  // torch.cuda.current_device()
  row("is_available", "%s", available ? "true" : "false");
  row("device_count", "%d", count);
  row("current_device", "%d", current);
  if (!available) row("unavailable_reason", "%s", ct_cuda_unavailable_reason());

  ct_metrics_num(m, "cuda_available", available);
  ct_metrics_num(m, "cuda_device_count", count);
  ct_metrics_num(m, "cuda_current_device", current);
  ct_metrics_str(m, "cuda_unavailable_reason", available ? "" : ct_cuda_unavailable_reason());
}
/*md output availability*/

/*md
::: zh
## 每块 GPU 的参数

`ct_cuda_get_device_properties(i, &p)` 对应 `torch.cuda.get_device_properties(i)`，`ct_device_memory_info` 对应 `torch.cuda.mem_get_info(i)`。打印出来的数字含义如下：

- **计算能力**（compute capability）`major.minor`：GPU 架构的版本号。主版本号就是架构的代：8 是 Ampere（A100 是 8.0），9 是 Hopper（H100 是 9.0）。它决定 GPU 认得哪些指令，也就决定编译器要为它生成哪种代码；本书默认为 `sm_80` 和 `sm_90` 编译。
- **SM 数**（streaming multiprocessor，流式多处理器）：GPU 上各自独立工作的单元，地位相当于 CPU 的核心。每个 SM 有自己的寄存器、共享内存和一组 FP32 运算单元，同时容纳许多个 warp。[核函数](glossary:kernel)（kernel）的线程块（block）被分配到各个 SM 上，所以块数远少于 SM 数的核函数会让大半个 GPU 闲着。
- **SM 时钟、显存时钟**：最高频率，单位 MHz；负载下受功耗和温度限制，实际频率会低一些。CUDA 13 把这两项从 `cudaDeviceProp` 里删掉了，运行时改用 `cudaDeviceGetAttribute` 读取。
- **显存位宽**：显存和 GPU 之间一次并行传输多少位。
- **L2 缓存**：所有 SM 共享的最后一级缓存，比显存快得多；工作集放得进 L2 的核函数几乎感觉不到显存带宽的限制。
- **每块最大线程数、每块和每个 SM 的共享内存、warp 大小**：写核函数时的硬性上限。一个 block 最多 1024 个线程；线程按 32 个一组（一个 warp）同时执行同一条指令；共享内存是 block 内线程交换数据用的片上高速存储，默认每个 block 最多 48 KiB。

PyTorch 的 `get_device_properties` 只给出其中一部分（名称、计算能力、总显存、SM 数，较新的版本还有 L2）；时钟和位宽在多数版本里没有，Python 用户要去 `nvidia-smi` 里查。C 程序直接调用 CUDA 运行时，全都拿得到。
:::
::: en
## What each GPU is made of

`ct_cuda_get_device_properties(i, &p)` mirrors `torch.cuda.get_device_properties(i)`, and `ct_device_memory_info` mirrors `torch.cuda.mem_get_info(i)`. What the printed numbers mean:

- **Compute capability** `major.minor`: the version of the GPU's architecture. The major number is the generation: 8 is Ampere (the A100 is 8.0), 9 is Hopper (the H100 is 9.0). It decides which instructions the GPU understands, and so which code the compiler must generate for it; this book builds for `sm_80` and `sm_90` by default.
- **SMs** (streaming multiprocessors): the units that work independently, the GPU's counterpart of CPU cores. Each SM has its own registers, shared memory and set of FP32 units, and holds many warps at once. A kernel's thread blocks are spread over the SMs, so a kernel with far fewer blocks than SMs leaves most of the GPU idle.
- **SM clock, memory clock**: the maximum frequencies, in MHz; under load, power and temperature limits bring them down. CUDA 13 removed both from `cudaDeviceProp`; the runtime reads them with `cudaDeviceGetAttribute`.
- **Memory bus width**: how many bits move between the memory and the GPU in parallel.
- **L2 cache**: the last level of cache, shared by all SMs and much faster than device memory; a kernel whose working set fits in L2 hardly feels the memory's bandwidth.
- **Max threads per block, shared memory per block and per SM, warp size**: the hard limits a kernel is written against. A block has at most 1024 threads; threads execute in groups of 32 (a warp) that issue the same instruction together; shared memory is fast on-chip storage through which the threads of a block exchange data, at most 48 KiB per block by default.

PyTorch's `get_device_properties` reports only some of these (name, capability, total memory, SMs, and L2 in recent versions); the clocks and bus width are missing from most versions, and Python users look them up with `nvidia-smi`. A C program calls the CUDA runtime directly and gets them all.
:::
*/

/*md
::: zh
### 显存带宽的理论峰值

带宽就是每秒搬动的字节数。显存每个时钟周期在总线上传输两次，每次传 `位宽 / 8` 个字节，所以

$$\text{峰值带宽 (GB/s)} = \frac{2 \times \text{显存时钟 (Hz)} \times \text{位宽 (bit)}}{8 \times 10^9}$$

这个 2 来自 DDR（double data rate，双倍数据速率）：显存在时钟的上升沿和下降沿各传一次数据。除以 8 是把位换成字节；GB/s 按 10^9 字节每秒计（不是 GiB/s），和厂商规格表用的单位一致。NVIDIA 的《CUDA C++ Best Practices Guide》以 V100 为例：877 MHz 的 HBM2，4096 位总线，算得 898 GB/s。本章在 `devices` 一节末尾用这组数字检验公式，所以没有 GPU 也能看出它算得对不对。

这是上限，不是实测：只做拷贝的核函数能达到它的大部分，但达不到全部。讲内存的章节会实际测量。下面这个函数就是一个练习区：`tools/lab` 会把它的函数体换成待填的 TODO。
:::
::: en
### Peak memory bandwidth

Bandwidth is bytes moved per second. Each clock cycle the memory makes two transfers over its bus, each carrying `bus width / 8` bytes, so

$$\text{peak bandwidth (GB/s)} = \frac{2 \times \text{memory clock (Hz)} \times \text{bus width (bits)}}{8 \times 10^9}$$

The 2 is DDR, double data rate: the memory transfers data on both the rising and the falling edge of its clock. Dividing by 8 turns bits into bytes; GB/s counts 10^9 bytes per second (not GiB/s), the unit of vendors' data sheets. NVIDIA's CUDA C++ Best Practices Guide works the V100 as its example: HBM2 at 877 MHz on a 4096-bit bus gives 898 GB/s. This chapter checks the formula against those numbers at the end of the `devices` section, so you can see it is right even without a GPU.

This is a ceiling, not a measurement: a kernel that only copies reaches most of it, never all. The chapter on memory measures it. The function below is a lab region: `tools/lab` replaces its body with a TODO for the student.
:::
*/
static double peak_bandwidth_gbs(int memory_clock_khz, int bus_width_bits) {
  /* LAB BEGIN: two transfers per clock (DDR), bus_width_bits / 8 bytes each; return GB/s (1e9 bytes/s) */
  double transfers_per_second = 2.0 * memory_clock_khz * 1e3;
  double bytes_per_transfer = bus_width_bits / 8.0;
  return transfers_per_second * bytes_per_transfer / 1e9;
  /* LAB END */
}

// The FP32 ceiling of the section below: SMs x FP32 lanes per SM x 2 (an FMA is two
// operations) x the SM clock, in GFLOP/s. Also a lab region.
static double peak_fp32_gflops(int sms, int lanes_per_sm, int sm_clock_khz) {
  /* LAB BEGIN: every lane of every SM completes one FMA (2 flops) per clock; return GFLOP/s (1e9 flop/s) */
  double lanes = (double)sms * lanes_per_sm;
  double clock_hz = sm_clock_khz * 1e3;
  return lanes * 2.0 * clock_hz / 1e9;
  /* LAB END */
}

/*md
::: zh
### FP32 算力的理论峰值

另一个上限是每秒的浮点运算次数。每个 SM 有固定数量的 FP32 单元（lane：计算能力 8.0 每 SM 64 个，9.0 每 SM 128 个），每个单元每周期能做一次乘加（FMA，`a * b + c`），算作两次浮点运算：

$$\text{峰值 FP32 (GFLOP/s)} = \text{SM 数} \times \text{每 SM 的 FP32 单元数} \times 2 \times \text{SM 时钟 (GHz)}$$

每 SM 的单元数不在 CUDA 的属性里：ct 按计算能力查 NVIDIA 编程指南中的吞吐量表，把结果放在 `p.fp32_lanes_per_sm` 和 `p.peak_fp32_gflops` 里。矩阵乘法用的 Tensor Core 比这快得多，讲矩阵乘法的章节再谈。

两个峰值放在一起看很有用：用 FP32 峰值除以带宽峰值，得到每读一个字节要做多少次运算才能让 FP32 单元忙起来，在 H100 上大约是二十次。逐元素运算（每个元素一两次运算）因此总是受带宽限制，这是后面许多章节的出发点。
:::
::: en
### Peak FP32 throughput

The other ceiling is floating-point operations per second. Each SM has a fixed number of FP32 units (lanes: 64 per SM on capability 8.0, 128 on 9.0), and each unit completes one fused multiply-add (FMA, `a * b + c`) per cycle, which counts as two floating-point operations:

$$\text{peak FP32 (GFLOP/s)} = \text{SMs} \times \text{FP32 lanes per SM} \times 2 \times \text{SM clock (GHz)}$$

The lanes per SM are not among CUDA's properties: ct looks them up by capability in the throughput table of NVIDIA's programming guide and stores them in `p.fp32_lanes_per_sm`, with the product in `p.peak_fp32_gflops`. The Tensor Cores that matrix multiplication uses are much faster; the chapter on matmul comes back to them.

The two ceilings are worth reading together: the FP32 peak divided by the bandwidth peak is how many operations a kernel must do per byte it reads to keep the FP32 units busy, about twenty on an H100. Elementwise ops (one or two operations per element) are therefore always bound by bandwidth, a fact many later chapters start from.
:::
*/
static void show_devices(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("devices");
  int count = ct_cuda_device_count();
  if (count == 0) printf("(no CUDA devices)\n");
  for (int i = 0; i < count; i++) {
    ct_cuda_device_properties p; // torch.cuda.get_device_properties(i)
    if (ct_cuda_get_device_properties(i, &p) != CT_OK) ct_cli_die(cli);
    size_t free_bytes = 0, total_bytes = 0; // torch.cuda.mem_get_info(i)
    if (ct_device_memory_info(ct_device_cuda(i), &free_bytes, &total_bytes) != CT_OK) ct_cli_die(cli);
    double bandwidth = peak_bandwidth_gbs(p.memory_clock_rate_khz, p.memory_bus_width_bits);

    printf("cuda:%d %s\n", i, p.name);
    row("  compute capability", "%d.%d", p.major, p.minor);
    row("  total memory", "%.2f GiB (%zu bytes)", p.total_memory / GIB, p.total_memory);
    row("  free memory", "%.2f GiB", free_bytes / GIB);
    row("  SMs", "%d", p.multi_processor_count);
    row("  SM clock", "%.0f MHz", p.clock_rate_khz / 1e3);
    row("  memory clock", "%.0f MHz", p.memory_clock_rate_khz / 1e3);
    row("  memory bus width", "%d bits", p.memory_bus_width_bits);
    row("  L2 cache", "%.1f MiB", p.l2_cache_size / MIB);
    row("  peak memory bandwidth", "%.1f GB/s = 2 x %.0f MHz x %d bits / 8", bandwidth,
        p.memory_clock_rate_khz / 1e3, p.memory_bus_width_bits);
    if (p.fp32_lanes_per_sm > 0)
      row("  peak FP32", "%.0f GFLOP/s = %d SMs x %d lanes x 2 x %.3f GHz", p.peak_fp32_gflops,
          p.multi_processor_count, p.fp32_lanes_per_sm, p.clock_rate_khz / 1e6);
    else
      row("  peak FP32", "unknown (no FP32 lane count for capability %d.%d)", p.major, p.minor);
    row("  max threads per block", "%d", p.max_threads_per_block);
    row("  max threads per SM", "%d", p.max_threads_per_multiprocessor);
    row("  shared memory per block", "%zu KiB", p.shared_memory_per_block / 1024);
    row("  shared memory per SM", "%zu KiB", p.shared_memory_per_multiprocessor / 1024);
    row("  registers per SM", "%d", p.regs_per_multiprocessor);
    row("  warp size", "%d", p.warp_size);

    char capability[16];
    snprintf(capability, sizeof capability, "%d.%d", p.major, p.minor);
    metric_gpu_str(m, i, "name", p.name);
    metric_gpu_str(m, i, "capability", capability);
    metric_gpu_num(m, i, "total_memory_bytes", (double)p.total_memory);
    metric_gpu_num(m, i, "free_memory_bytes", (double)free_bytes);
    metric_gpu_num(m, i, "sm_count", p.multi_processor_count);
    metric_gpu_num(m, i, "sm_clock_mhz", p.clock_rate_khz / 1e3);
    metric_gpu_num(m, i, "memory_clock_mhz", p.memory_clock_rate_khz / 1e3);
    metric_gpu_num(m, i, "memory_bus_width_bits", p.memory_bus_width_bits);
    metric_gpu_num(m, i, "l2_cache_bytes", p.l2_cache_size);
    metric_gpu_num(m, i, "peak_memory_bandwidth_gbs", bandwidth);
    metric_gpu_num(m, i, "peak_fp32_gflops", p.peak_fp32_gflops);
    metric_gpu_num(m, i, "max_threads_per_block", p.max_threads_per_block);
    metric_gpu_num(m, i, "shared_memory_per_block_bytes", (double)p.shared_memory_per_block);
    metric_gpu_num(m, i, "shared_memory_per_sm_bytes", (double)p.shared_memory_per_multiprocessor);
    metric_gpu_num(m, i, "warp_size", p.warp_size);
  }
  // The worked example of NVIDIA's CUDA C++ Best Practices Guide: 898 GB/s.
  double v100 = peak_bandwidth_gbs(877000, 4096);
  row("formula check (V100)", "2 x 877 MHz x 4096 bits / 8 = %.1f GB/s (NVIDIA's guide: 898 GB/s)", v100);
  ct_metrics_num(m, "bandwidth_formula_v100_gbs", v100);
  // Its FP32 peak: 80 SMs x 64 lanes x 2 x 1.530 GHz, NVIDIA's 15.7 TFLOPS.
  ct_metrics_num(m, "fp32_formula_v100_gflops", peak_fp32_gflops(80, 64, 1530000));
}
/*md output devices*/

/*md
::: zh
## 版本

- **CUDA 运行时**：程序链接的 libcudart 的版本，也就是编译时用的 CUDA。对应 `torch.version.cuda`，PyTorch 报告的同样是它编译时用的 CUDA。
- **CUDA 驱动**：已安装的驱动最高支持的 CUDA 版本，即 `nvidia-smi` 右上角的 “CUDA Version”。运行时的版本不能高于它，否则就是上一节的 `cudaErrorInsufficientDriver`。没有驱动时它是 0。
- **cuBLAS**：矩阵乘法库的版本。

CUDA 把版本编成一个整数：`1000 × 主版本 + 10 × 次版本`，所以 13000 是 13.0，12040 是 12.4；cuBLAS 则用 `10000 × 主版本 + 100 × 次版本 + 补丁号`。下面的 `version_str` 负责解码。PyTorch 还会报告 cuDNN 的版本（`torch.backends.cudnn.version()`）；ct 不用 cuDNN，卷积之类的运算都是自己写的核函数，所以没有这一项。
:::
::: en
## Versions

- **CUDA runtime**: the version of the libcudart the program links, that is, the CUDA it was built with. It mirrors `torch.version.cuda`, which is likewise the CUDA PyTorch was built with.
- **CUDA driver**: the newest CUDA version the installed driver supports, the "CUDA Version" in the corner of `nvidia-smi`. The runtime's version must not exceed it, or you get the previous section's `cudaErrorInsufficientDriver`. Without a driver it is 0.
- **cuBLAS**: the version of the matrix-multiplication library.

CUDA encodes a version as one integer, `1000 × major + 10 × minor`, so 13000 is 13.0 and 12040 is 12.4; cuBLAS uses `10000 × major + 100 × minor + patch`. `version_str` below decodes both. PyTorch also reports cuDNN's version (`torch.backends.cudnn.version()`); ct does not use cuDNN, its convolutions and the rest are its own kernels, so there is no such line here.
:::
*/
static const char *version_str(int v, char *buf, size_t len) {
  if (v <= 0)
    snprintf(buf, len, "none");
  else if (v >= 100000) // cuBLAS: 10000 * major + 100 * minor + patch
    snprintf(buf, len, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  else // CUDA: 1000 * major + 10 * minor
    snprintf(buf, len, "%d.%d", v / 1000, v % 1000 / 10);
  return buf;
}

static void show_versions(ct_metrics *m) {
  ct_cli_section("versions");
  int runtime = ct_cuda_runtime_version(); // torch.version.cuda
  int driver = ct_cuda_driver_version();   // nvidia-smi's "CUDA Version"
  int cublas = ct_cublas_version();
#ifdef CT_HAVE_CUDA
  row("ct cuda backend", "compiled in");
  const char *note = driver == 0 ? ", no driver found" : "";
#else
  row("ct cuda backend", "not compiled (a CPU-only build, like torch.version.cuda == None)");
  const char *note = "";
#endif
  char rt[32], drv[32], blas[32];
  version_str(runtime, rt, sizeof rt);
  version_str(driver, drv, sizeof drv);
  version_str(cublas, blas, sizeof blas);
  row("cuda runtime", "%s (%d)", rt, runtime);
  row("cuda driver", "%s (%d)%s", drv, driver, note);
  row("cublas", "%s (%d)", blas, cublas);

  ct_metrics_str(m, "cuda_runtime_version", rt);
  ct_metrics_str(m, "cuda_driver_version", drv);
  ct_metrics_str(m, "cublas_version", blas);
}
/*md output versions*/

/*md
::: zh
## CPU

没有 GPU 时，本书每一章都在 CPU 上运行，而且 CPU 这条路是真正的实现，不是摆设：矩阵乘法交给 OpenBLAS，逐元素运算用 OpenMP 多线程。所以 CPU 的情况同样值得查清楚：

| 项目 | C | Python |
|---|---|---|
| 型号 | `/proc/cpuinfo` 的 `model name` | 同样读 `/proc/cpuinfo` |
| 逻辑核数 | `sysconf(_SC_NPROCESSORS_ONLN)` | `os.cpu_count()` |
| 本进程可用的核数 | `sched_getaffinity` | `len(os.sched_getaffinity(0))` |
| OpenMP 线程数 | `omp_get_max_threads()` | `torch.get_num_threads()` |
| 内存 | `ct_device_memory_info(cpu)` | `os.sysconf("SC_PHYS_PAGES")` |
| BLAS | `openblas_get_config()` | `torch.__config__.show()` |

逻辑核数和可用核数可能不一样：容器和 `taskset` 会限制进程能用哪些核。OpenMP 默认开的线程数等于可用核数，可以用环境变量 `OMP_NUM_THREADS` 修改；OpenBLAS 有自己的线程池，用 `OPENBLAS_NUM_THREADS` 修改。两边的线程加起来多于核数时，它们互相抢 CPU，反而更慢。

最后两行是 CPU 上缓存分配器的状态。和 PyTorch 不同，ct 在 CPU 上也用缓存分配器，统计方式和 `torch.cuda.memory_allocated` 完全一样。此时还没有创建任何张量，所以两个数都是 0。
:::
::: en
## The CPU

Where there is no GPU, every chapter of this book runs on the CPU, and the CPU path is a real implementation, not a placeholder: matrix multiplication goes to OpenBLAS and elementwise ops run on OpenMP threads. So the CPU deserves the same inventory:

| What | C | Python |
|---|---|---|
| Model | `model name` in `/proc/cpuinfo` | read `/proc/cpuinfo` too |
| Logical cores | `sysconf(_SC_NPROCESSORS_ONLN)` | `os.cpu_count()` |
| Cores this process may use | `sched_getaffinity` | `len(os.sched_getaffinity(0))` |
| OpenMP threads | `omp_get_max_threads()` | `torch.get_num_threads()` |
| Memory | `ct_device_memory_info(cpu)` | `os.sysconf("SC_PHYS_PAGES")` |
| BLAS | `openblas_get_config()` | `torch.__config__.show()` |

Logical cores and usable cores can differ: containers and `taskset` restrict which cores a process may run on. OpenMP starts as many threads as there are usable cores unless the environment variable `OMP_NUM_THREADS` says otherwise; OpenBLAS keeps its own thread pool, set by `OPENBLAS_NUM_THREADS`. When the two together run more threads than there are cores, they fight over the CPU and everything gets slower.

The last two lines are the state of the CPU's caching allocator. Unlike PyTorch, ct uses a caching allocator on the CPU too, with exactly the statistics of `torch.cuda.memory_allocated`. No tensor exists yet, so both numbers are 0.
:::
*/
static void show_cpu(ct_metrics *m) {
  ct_cli_section("cpu");
  char model[256];
  read_cpu_model(model, sizeof model);
  long logical = sysconf(_SC_NPROCESSORS_ONLN); // os.cpu_count()
  cpu_set_t set;                                // os.sched_getaffinity(0)
  int usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)logical;
#ifdef _OPENMP
  int omp_threads = omp_get_max_threads(); // torch.get_num_threads()
#else
  int omp_threads = 1;
#endif
  size_t ram_free = 0, ram_total = 0;
  ct_device_memory_info(ct_device_cpu(), &ram_free, &ram_total);

  static const char *const blas_threading[] = {"sequential", "pthreads", "OpenMP"};
  int parallel = openblas_get_parallel();
  const char *threading = (parallel >= 0 && parallel <= 2) ? blas_threading[parallel] : "unknown";

  row("model", "%s", model);
  row("logical cores", "%ld", logical);
  row("usable cores", "%d", usable);
  row("openmp max threads", "%d", omp_threads);
  row("memory", "%.1f GiB total, %.1f GiB available", ram_total / GIB, ram_free / GIB);
  row("blas", "%s", openblas_get_config());
  row("blas core", "%s", openblas_get_corename());
  row("blas threads", "%d (%s)", openblas_get_num_threads(), threading);
  row("memory_allocated(cpu)", "%zu bytes", ct_memory_allocated(ct_device_cpu()));
  row("memory_reserved(cpu)", "%zu bytes", ct_memory_reserved(ct_device_cpu()));

  ct_metrics_str(m, "cpu_model", model);
  ct_metrics_num(m, "cpu_logical_cores", (double)logical);
  ct_metrics_num(m, "cpu_usable_cores", usable);
  ct_metrics_num(m, "omp_max_threads", omp_threads);
  ct_metrics_num(m, "ram_total_bytes", (double)ram_total);
  ct_metrics_num(m, "ram_available_bytes", (double)ram_free);
  ct_metrics_str(m, "blas", openblas_get_config());
  ct_metrics_num(m, "blas_threads", openblas_get_num_threads());
  ct_metrics_num(m, "cpu_memory_allocated_bytes", (double)ct_memory_allocated(ct_device_cpu()));
  ct_metrics_num(m, "cpu_memory_reserved_bytes", (double)ct_memory_reserved(ct_device_cpu()));
}
/*md output cpu*/

/*md
::: zh
## 试一试：在选中的设备上放一个张量

查询只是读属性；要确认设备真能用，得在上面放一个张量。种子教程（本书据以重写的五篇中文教程之一，见[术语表](glossary:seed-tutorials)；这里是《PyTorch使用教程(11)-cuda的使用方法》）是这样写的：

```python
x = torch.randn(3, 3).to(device)
print(x)
print(x.get_device())
```

C 版本直接在目标设备上生成随机数（相当于 `torch.randn(3, 3, device=device)`），省掉一次从 CPU 出发的拷贝。`ct_print` 的格式和 PyTorch 一样，张量在 GPU 上时末尾带有 `device='cuda:0'`。`ct_get_device` 和 `x.get_device()` 一样：CPU 上的张量返回 -1，GPU 上的返回 GPU 的编号。

数字和 PyTorch 打印的不同：ct 的随机数来自 Philox 生成器，同一个种子在 CPU 和 GPU 上给出同样的数；PyTorch 在 CPU 上用的是另一种生成器（Mersenne Twister），在 CPU 和 GPU 上给出的数也彼此不同。

再看分配器：3×3 的 float32 只有 36 字节，但 `memory_allocated` 按 512 字节的整数倍计；`memory_reserved` 是分配器向系统（在 GPU 上是 `cudaMalloc`）整段要来的内存，小的请求共用 2 MiB 的段。`ct_free(x)` 之后 allocated 回到 0，reserved 不变：内存留在缓存里，下一次分配直接复用，不再向系统要。这就是 PyTorch 的缓存分配器的做法，讲显存管理的章节会细说。
:::
::: en
## Try it: a tensor on the chosen device

Queries only read properties; to see that the device really works, put a tensor on it. The seed tutorial (one of the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here “PyTorch tutorial (11): using CUDA”) writes:

```python
x = torch.randn(3, 3).to(device)
print(x)
print(x.get_device())
```

The C version draws the numbers on the target device directly (like `torch.randn(3, 3, device=device)`), saving a copy from the CPU. `ct_print` prints in PyTorch's format, ending in `device='cuda:0'` when the tensor is on a GPU. `ct_get_device` answers like `x.get_device()`: -1 for a tensor on the CPU, the GPU's index otherwise.

The numbers differ from the ones PyTorch prints: ct's random numbers come from a Philox generator, which gives the same numbers for the same seed on the CPU and the GPU; PyTorch uses another generator on the CPU (Mersenne Twister), and its CPU and GPU numbers differ from each other as well.

Then the allocator: a 3×3 float32 tensor is only 36 bytes, but `memory_allocated` counts in multiples of 512 bytes; `memory_reserved` is the memory the allocator took from the system (from `cudaMalloc` on a GPU) in whole segments, and small requests share segments of 2 MiB. After `ct_free(x)` the allocated bytes drop back to 0 while the reserved bytes stay: the memory waits in the cache for the next allocation, which will not have to ask the system. This is how PyTorch's caching allocator works; the chapter on memory management goes into it.
:::
*/
// Enters with no tensor on cli->device; leaves with none, the freed memory
// kept in the device's cache (reserved).
static void show_tensor(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("tensor");
  char dev[CT_DEVICE_STR_MAX], label[64];
  ct_device_str(cli->device, dev);

  ct_tensor *x = ct_randn(CT_SHAPE(3, 3), CT_F32, cli->device); // torch.randn(3, 3, device=device)
  if (!x) ct_cli_die(cli);
  printf("x = randn(3, 3) on %s:\n", dev);
  if (ct_print(stdout, x) != CT_OK) ct_cli_die(cli); // print(x)
  row("x.get_device()", "%d", ct_get_device(x));
  snprintf(label, sizeof label, "memory_allocated(%s)", dev);
  row(label, "%zu bytes", ct_memory_allocated(cli->device));
  snprintf(label, sizeof label, "memory_reserved(%s)", dev);
  row(label, "%zu bytes", ct_memory_reserved(cli->device));
  ct_metrics_num(m, "tensor_get_device", ct_get_device(x));
  ct_metrics_num(m, "tensor_memory_allocated_bytes", (double)ct_memory_allocated(cli->device));
  ct_metrics_num(m, "tensor_memory_reserved_bytes", (double)ct_memory_reserved(cli->device));

  ct_free(x);
  row("after ct_free(x)", "%zu bytes allocated, %zu bytes reserved", ct_memory_allocated(cli->device),
      ct_memory_reserved(cli->device));
}
/*md output tensor*/

/*md
::: zh
## 练习

1. 分别用 `--device cpu`、`--device cuda`、`--device cuda:7`、`--device gpu` 运行，看第一行和退出码（`echo $?`）。哪些是用法错误（2），哪些是运行错误（1）？为什么 `cuda:7` 不在解析参数时报错，`gpu` 却会？
2. 在有 GPU 的机器上用 `CUDA_VISIBLE_DEVICES="" ./ch01` 运行。`unavailable_reason` 变成了什么？和没有驱动时的原因比较。
3. 把 `peak_bandwidth_gbs` 里的 2 去掉，重新构建并运行，哪一行暴露了错误？然后手算 A100 40GB 的峰值带宽（HBM2，1215 MHz，5120 位），和它的规格 1555 GB/s 比较。
4. 用 `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./ch01 --device cpu` 运行，`cpu` 一节里哪些数变了，哪些没变？为什么？
5. 在 `build/` 里运行 `./ch01 --metrics c.json` 和 `/usr/bin/python3 ../chapters/ch01_device_query/ch01_pytorch.py --metrics py.json`（要用装了 torch 的 Python），比较两个文件。PyTorch 报告了哪些 ct 没有的项？反过来呢？
:::
::: en
## Exercises

1. Run with `--device cpu`, `--device cuda`, `--device cuda:7` and `--device gpu`, and look at the first line and the exit code (`echo $?`). Which are usage errors (2), which run-time errors (1)? Why is `cuda:7` not rejected while the flags are parsed, when `gpu` is?
2. On a machine with a GPU, run `CUDA_VISIBLE_DEVICES="" ./ch01`. What does `unavailable_reason` say now? Compare it with the reason when there is no driver.
3. Remove the 2 from `peak_bandwidth_gbs`, rebuild and run: which line gives the mistake away? Then work out the peak bandwidth of an A100 40GB by hand (HBM2, 1215 MHz, 5120 bits) and compare it with its data sheet's 1555 GB/s.
4. Run `OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ./ch01 --device cpu`. Which numbers in the `cpu` section change, which do not, and why?
5. In `build/`, run `./ch01 --metrics c.json` and `/usr/bin/python3 ../chapters/ch01_device_query/ch01_pytorch.py --metrics py.json` (a Python that has torch), and compare the two files. What does PyTorch report that ct does not, and the other way round?
:::
*/
