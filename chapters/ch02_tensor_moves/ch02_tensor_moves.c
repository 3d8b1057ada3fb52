// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 2 章　x.to(device)：搬运张量，以及搬运的代价

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)；这里是《GPU 使用》和《PyTorch使用教程(11)-cuda的使用方法》）讲张量搬运，用的是这样几行（这里换成了我们自己的写法）：

```python
x = torch.randn(2, 3)                  # 在 CPU 上创建
y = torch.ones_like(x, device=device)  # 直接在 GPU 上创建
x = x.to(device)                       # CPU -> GPU
x = x.to("cpu", torch.double)          # GPU -> CPU，同时换成 float64
```

本章先把这几行逐一用 C 写出来，每一步都按 PyTorch 的格式打印结果；再看两个设备上的张量进了同一个[算子](glossary:op)（op）会怎样：报错、捕获、修好。然后回答教程留下的问题：搬一个很大的张量，代价大吗？我们不猜，直接量：从 4 KiB 到 256 MiB，分别测主机到设备、设备到主机的带宽，源或目的地分可分页内存和锁页内存两种。最后看 `non_blocking=True`：它让拷贝和计算同时进行，也可能让你读到还没写完的数据。

```sh
ninja ch02_tensor_moves && ./ch02
./ch02 --device cpu --quick     # 测试用的小规模运行
./ch02 --max-mib 1024           # 带宽表一直测到 1 GiB
```
:::
::: en
# Chapter 2. x.to(device): moving tensors, and what it costs

The seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here “Using the GPU” and “PyTorch tutorial (11): using CUDA”) teach moving tensors with a few lines like these (rewritten here in our own words):

```python
x = torch.randn(2, 3)                  # made on the CPU
y = torch.ones_like(x, device=device)  # made on the GPU directly
x = x.to(device)                       # CPU -> GPU
x = x.to("cpu", torch.double)          # GPU -> CPU, and to float64 on the way
```

This chapter first writes each of those lines in C, printing every result in PyTorch's format; then it shows what happens when tensors on two devices meet in one operation: the error, caught, then fixed. Then it answers the question the tutorial leaves open, whether moving a big tensor is costly, not by guessing but by measuring: host-to-device and device-to-host bandwidth from 4 KiB to 256 MiB, with the host side in pageable and in page-locked memory. Last comes `non_blocking=True`: it lets a copy and a computation run at the same time, and it lets you read data that has not arrived yet.

```sh
ninja ch02_tensor_moves && ./ch02
./ch02 --device cpu --quick     # the small run the tests use
./ch02 --max-mib 1024           # take the bandwidth table up to 1 GiB
```
:::
*/

/*md hide*/
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct.h"

#ifdef CT_HAVE_CUDA
// chapters/ch02_tensor_moves/ch02_kernels.cu
int ch02_fma_burn(float *x, int64_t n, int iters, void *stream);
int ch02_pci_bus_id(int index, char *buf, int len);
#endif

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)
#define MAX_SIZES 16
#define MAX_REPS 32
#define SENTINEL (-1.0f) // never one of the values 0, 1, 2, ... that the copies carry

// A failure the chapter does not expect: print the runtime's message, exit 1.
#define MUST(p) CT_CLI_MUST(cli, p)
#define MUST_OK(rc) CT_CLI_MUST_OK(cli, rc)

// One "key: value" line, the value column aligned (as in chapter 1).
static void row(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void row(const char *key, const char *fmt, ...) {
  char label[64];
  int w = snprintf(label, sizeof label, "%s:", key);
  printf("%s%*s", label, w < 34 ? 34 - w : 1, ""); // at least one space
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
}

// Prints the error the last call left as "caught <STATUS>: <message>", writes
// both to metrics as <key>_status and <key>_message, clears it, returns it.
static ct_status caught(ct_metrics *m, const char *key) {
  ct_status st = ct_last_status();
  char k[96];
  printf("caught %s: %s\n", ct_status_name(st), ct_last_error());
  snprintf(k, sizeof k, "%s_status", key);
  ct_metrics_str(m, k, ct_status_name(st));
  snprintf(k, sizeof k, "%s_message", key);
  ct_metrics_str(m, k, ct_last_error());
  ct_clear_error();
  return st;
}

static void print_tensor(const ct_cli *cli, const char *label, const ct_tensor *t) {
  printf("%s\n", label);
  MUST_OK(ct_print(stdout, t));
}

// "4 KiB", "1 MiB", "256 MiB".
static const char *size_str(double bytes, char *buf, size_t len) {
  if (bytes >= MIB) snprintf(buf, len, "%.0f MiB", bytes / MIB);
  else snprintf(buf, len, "%.0f KiB", bytes / KIB);
  return buf;
}

// A CUDA device this machine does not have: cuda:0 where there is no GPU,
// else the index one past the last GPU.
static ct_device absent_device(void) { return ct_device_cuda(ct_cuda_device_count()); }

static ct_tensor *show_create(const ct_cli *cli, ct_metrics *m);
static ct_tensor *show_to_device(const ct_cli *cli, ct_metrics *m, const ct_tensor *x);
static void show_round_trip(const ct_cli *cli, ct_metrics *m, const ct_tensor *x, const ct_tensor *xd);
static void show_cuda_cpu(const ct_cli *cli, ct_metrics *m, ct_tensor *x);
static void show_mixed_devices(const ct_cli *cli, ct_metrics *m);
static void show_bandwidth(const ct_cli *cli, ct_metrics *m, size_t max_bytes);
static double show_overlap(const ct_cli *cli, ct_metrics *m);
static void show_hazard(const ct_cli *cli, ct_metrics *m, double ms_per_iter);
/*md show*/

/*md
::: zh
## 程序的骨架

参数与第 1 章相同，另加一个 `--max-mib N`：带宽表测到多大（默认 256 MiB，`--quick` 时 4 MiB）。各节按顺序运行；前几节只用几个小张量，后几节做测量。
:::
::: en
## The program's outline

The flags are chapter 1's plus `--max-mib N`: how far the bandwidth table goes (256 MiB by default, 4 MiB with `--quick`). The sections run in order; the first ones use a few small tensors, the last ones measure.
:::
*/
int main(int argc, char **argv) {
  long max_mib = 0;
  ct_cli_opt opts[] = {
      {"max-mib", CT_OPT_INT, &max_mib, "largest copy in the bandwidth table, MiB; 0: 256, or 4 with --quick"},
  };
  ct_cli cli = {.program = "ch02", .summary = "Chapter 2: x.to(device), and what moving a tensor costs."};
  ct_cli_parse(&cli, argc, argv, opts, 1);
  if (max_mib < 0 || max_mib > 16384) {
    fprintf(stderr, "ch02: --max-mib expects 0..16384, got %ld (see --help)\n", max_mib);
    return 2;
  }
  if (max_mib == 0) max_mib = cli.quick ? 4 : 256;
  ct_cli_begin(&cli); // prints "device: ..."

  ct_metrics *m = cli.metrics; // device, seed and quick already recorded

  ct_tensor *x = show_create(&cli, m);
  ct_tensor *xd = show_to_device(&cli, m, x);
  show_round_trip(&cli, m, x, xd);
  show_cuda_cpu(&cli, m, x);
  ct_free(xd);
  ct_free(x);
  show_mixed_devices(&cli, m);
  show_bandwidth(&cli, m, (size_t)max_mib << 20);
  double ms_per_iter = show_overlap(&cli, m);
  show_hazard(&cli, m, ms_per_iter);

  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 在 CPU 上创建

种子教程用 `torch.Tensor(2, 3)` 创建张量，它只分配内存、不初始化，所以教程打印出来的是内存里原有的一堆怪数（`4.0046e-11`、`7.2661e+31`……）。本章改用 `ct_randn`，对应 `torch.randn(2, 3)`：值由种子决定，每次运行都一样，后面的往返检查才有意义。

另一篇种子教程用 `torch.cuda.FloatTensor(1)` 直接在 GPU 上建张量，还建议模型和数据都用 `torch.cuda.FloatTensor` 类型。这些按类型命名的构造函数是旧写法，PyTorch 已不推荐使用；现在的写法是把 dtype 和设备作为参数传给工厂函数，例如 `torch.empty(1, dtype=torch.float32, device="cuda")`。ct 也是这样：每个工厂函数都带 `ct_dtype` 和 `ct_device` 两个参数，比如 `ct_randn(CT_SHAPE(2, 3), CT_F32, dev)`。

`ct_get_device` 对应 `x.get_device()`：CPU 上的张量返回 -1。`ct_is_pinned` 对应 `x.is_pinned()`：普通的 CPU 张量在可分页内存里，不是锁页内存（两者的区别在带宽一节讲）。
:::
::: en
## Made on the CPU

The seed tutorial creates its tensor with `torch.Tensor(2, 3)`, which allocates memory without initializing it, so what it prints is whatever was in that memory (`4.0046e-11`, `7.2661e+31`, ...). This chapter uses `ct_randn`, the counterpart of `torch.randn(2, 3)`: the values follow from the seed, are the same on every run, and so make the round-trip check below meaningful.

Another seed tutorial makes a GPU tensor with `torch.cuda.FloatTensor(1)` and advises using the `torch.cuda.FloatTensor` type for model and data. These type-named constructors are legacy, no longer recommended by PyTorch; today one passes the dtype and the device to a factory function, e.g. `torch.empty(1, dtype=torch.float32, device="cuda")`. ct does the same: every factory takes a `ct_dtype` and a `ct_device`, as in `ct_randn(CT_SHAPE(2, 3), CT_F32, dev)`.

`ct_get_device` mirrors `x.get_device()`: -1 for a tensor on the CPU. `ct_is_pinned` mirrors `x.is_pinned()`: an ordinary CPU tensor lives in pageable memory, not page-locked memory (the bandwidth section explains the difference).
:::
*/
static ct_tensor *show_create(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("create");
  ct_tensor *x = ct_randn(CT_SHAPE(2, 3), CT_F32, ct_device_cpu()); // torch.randn(2, 3)
  MUST(x);
  print_tensor(cli, "x = randn(2, 3):", x);
  row("x.get_device()", "%d", ct_get_device(x));
  row("x.is_pinned()", "%s", ct_is_pinned(x) ? "true" : "false");
  ct_metrics_num(m, "create_get_device", ct_get_device(x));
  return x;
}
/*md output create*/

/*md
::: zh
## 搬到设备上，或直接在设备上创建

两种办法让张量出现在 GPU 上：

- `ct_ones_like(x, CT_F32, device)` 对应 `torch.ones_like(x, device=device)`：形状照抄 `x`，值直接在设备上写出，不经过主机内存，也就没有拷贝。能这样做时就这样做。
- `ct_to_device(x, device)` 对应 `x.to(device)`：在设备上分配一块内存，再把 `x` 的字节拷过去。打印出来的张量末尾带 `device='cuda:0'`，`get_device()` 变成 0。

`x.to(device)` 在张量已经在那个设备上时什么也不做，返回 `x` 本身；`ct_to_device` 同样返回同一个句柄（多一个引用）。所以在 CPU 上运行时，“same handle as x” 一行是 yes。

没有 GPU 时，这一节换一个演示：把 `x` 搬到一个不存在的设备上。错误不会让程序崩溃：`ct_to_device` 返回 `NULL`，并留下一条消息，说明是哪个函数、为什么失败。没有 CUDA 时状态是 `CT_ERR_UNAVAILABLE`，消息里带着 CUDA 自己给出的原因；有 GPU 但编号超出范围时是 `CT_ERR_DEVICE`。PyTorch 在同样的情况下抛出异常（`RuntimeError` 或 `AssertionError: Torch not compiled with CUDA enabled`）。
:::
::: en
## Moved to the device, or made there

Two ways to get a tensor onto a GPU:

- `ct_ones_like(x, CT_F32, device)` mirrors `torch.ones_like(x, device=device)`: the shape is copied from `x`, the values are written on the device itself, never through host memory, so nothing is copied. Do this whenever you can.
- `ct_to_device(x, device)` mirrors `x.to(device)`: memory is allocated on the device and the bytes of `x` are copied into it. The printed tensor ends in `device='cuda:0'` and `get_device()` becomes 0.

When the tensor is already on that device, `x.to(device)` does nothing and returns `x` itself; `ct_to_device` likewise returns the same handle (with one more reference). So on a CPU run the "same handle as x" line says yes.

Where there is no GPU, the section shows something else: `x` moved to a device that does not exist. The error does not crash the program: `ct_to_device` returns `NULL` and leaves a message naming the function and the reason. Without CUDA the status is `CT_ERR_UNAVAILABLE` and the message carries CUDA's own reason; with GPUs but an index past the last one it is `CT_ERR_DEVICE`. PyTorch raises an exception in the same situations (a `RuntimeError`, or `AssertionError: Torch not compiled with CUDA enabled`).
:::
*/
static ct_tensor *show_to_device(const ct_cli *cli, ct_metrics *m, const ct_tensor *x) {
  ct_cli_section("to_device");
  char dev[CT_DEVICE_STR_MAX], label[96];
  ct_device_str(cli->device, dev);

  ct_tensor *y = ct_ones_like(x, CT_F32, cli->device); // torch.ones_like(x, device=device)
  MUST(y);
  snprintf(label, sizeof label, "y = ones_like(x, device=%s):", dev);
  print_tensor(cli, label, y);
  ct_free(y);

  ct_tensor *xd = ct_to_device(x, cli->device); // x.to(device)
  MUST(xd);
  snprintf(label, sizeof label, "x.to(%s):", dev);
  print_tensor(cli, label, xd);
  row("x.to(device).get_device()", "%d", ct_get_device(xd));
  row("same handle as x", "%s", xd == x ? "yes (already there: nothing copied)" : "no (a new tensor: the bytes were copied)");
  ct_metrics_num(m, "to_device_get_device", ct_get_device(xd));
  ct_metrics_num(m, "to_device_same_handle", xd == x);

  if (cli->device.type == CT_CPU) {
    char a[CT_DEVICE_STR_MAX];
    ct_device absent = absent_device();
    printf("x.to(%s), a device this machine does not have:\n", ct_device_str(absent, a));
    ct_tensor *z = ct_to_device(x, absent);
    if (z) { // cannot happen: the device is absent by construction
      ct_free(z);
      ct_fail(CT_ERR_VALUE, "ch02: moving to the absent device %s succeeded", a);
      ct_cli_die(cli);
    }
    caught(m, "absent_device");
  }
  return xd;
}
/*md twin to_device*/
/*md output to_device*/

/*md
::: zh
## 搬回来，顺便换类型

`ct_to(x, ct_device_cpu(), CT_F64, false)` 对应 `x.to("cpu", torch.double)`：一次调用同时换设备、换类型。ct 先按原类型（float32）把字节搬过来，再在目的设备上转成 float64，所以总线上走的是 4 字节一个的元素，不是 8 字节。打印结果带 `dtype=torch.float64`，这和 PyTorch 一样：float32 是默认类型，不写；float64 不是，要写出来。

往返之后值变了没有？float32 到 float64 是加宽：每个 float32 都能被 float64 精确表示，所以往返后应当逐位相等。本节把原来的 float32 值和搬回来的 float64 值都写进 `--metrics`，测试脚本用 numpy 独立地比较一遍。反方向就不是无损的了：0.1 先变成 float32 再变回 float64，得到的是 float32 里离 0.1 最近的那个数，而不是 0.1。
:::
::: en
## Moved back, with a dtype change

`ct_to(x, ct_device_cpu(), CT_F64, false)` mirrors `x.to("cpu", torch.double)`: one call changes both device and dtype. ct moves the bytes in the original dtype (float32) first and converts to float64 on the destination, so 4-byte elements cross the bus, not 8-byte ones. The result prints with `dtype=torch.float64`, as in PyTorch: float32 is the default dtype and goes unmentioned, float64 is not.

Did the values survive? float32 to float64 widens: every float32 is exactly a float64, so after the round trip the values must be equal bit for bit. The section writes the original float32 values and the float64 values that came back to `--metrics`, and the test script compares them again, independently, with numpy. The other direction is not lossless: 0.1 taken to float32 and back to float64 comes back as the float32 nearest to 0.1, not as 0.1.
:::
*/
static void show_round_trip(const ct_cli *cli, ct_metrics *m, const ct_tensor *x, const ct_tensor *xd) {
  ct_cli_section("round_trip");
  ct_tensor *back = ct_to(xd, ct_device_cpu(), CT_F64, false); // x.to("cpu", torch.double)
  MUST(back);
  print_tensor(cli, "x.to(\"cpu\", torch.double):", back);
  row("dtype", "%s", ct_dtype_torch_name(ct_dtype_of(back)));
  row("get_device()", "%d", ct_get_device(back));

  float src[6];  // x, as made: (2, 3) f32
  double dst[6]; // after the round trip: (2, 3) f64
  double src64[6];
  MUST_OK(ct_copy_to_host(x, src, sizeof src));
  MUST_OK(ct_copy_to_host(back, dst, sizeof dst));
  int equal = 0;
  for (int i = 0; i < 6; ++i) {
    src64[i] = (double)src[i];
    equal += src64[i] == dst[i];
  }
  printf("round trip: %s (%d of 6 elements equal)\n", equal == 6 ? "OK" : "MISMATCH", equal);
  ct_metrics_series(m, "round_trip_src_f32", src64, 6);
  ct_metrics_series(m, "round_trip_back_f64", dst, 6);
  ct_free(back);

  // The same for a bigger tensor: 65536 elements, every one compared.
  const int64_t n = 1 << 16;
  ct_tensor *big = ct_randn(CT_SHAPE(n), CT_F32, ct_device_cpu());
  MUST(big);
  ct_tensor *big_dev = ct_to_device(big, cli->device);
  MUST(big_dev);
  ct_tensor *big_back = ct_to(big_dev, ct_device_cpu(), CT_F64, false);
  MUST(big_back);
  float *bs = malloc((size_t)n * sizeof *bs);
  double *bd = malloc((size_t)n * sizeof *bd);
  if (!bs || !bd) {
    ct_fail(CT_ERR_OOM, "ch02: out of host memory");
    ct_cli_die(cli);
  }
  MUST_OK(ct_copy_to_host(big, bs, (size_t)n * sizeof *bs));
  MUST_OK(ct_copy_to_host(big_back, bd, (size_t)n * sizeof *bd));
  int64_t big_equal = 0;
  for (int64_t i = 0; i < n; ++i) big_equal += (double)bs[i] == bd[i];
  row("round trip of randn(65536)", "%lld of %lld elements equal", (long long)big_equal, (long long)n);
  ct_metrics_num(m, "round_trip_big_numel", (double)n);
  ct_metrics_num(m, "round_trip_big_equal", (double)big_equal);
  free(bs);
  free(bd);
  ct_free(big_back);
  ct_free(big_dev);
  ct_free(big);

  // Narrowing is another matter: 0.1 (f64) -> f32 on the device -> f64 on the CPU.
  ct_tensor *tenth = ct_full(CT_SHAPE(1), 0.1, CT_F64, ct_device_cpu());
  MUST(tenth);
  ct_tensor *t32 = ct_to(tenth, cli->device, CT_F32, false);
  MUST(t32);
  ct_tensor *t64 = ct_to(t32, ct_device_cpu(), CT_F64, false);
  MUST(t64);
  double v;
  MUST_OK(ct_item(t64, &v));
  row("0.1 -> float32 -> float64", "%.17g", v);
  ct_metrics_num(m, "narrowing_round_trip_of_0_1", v);
  ct_free(t64);
  ct_free(t32);
  ct_free(tenth);
}
/*md twin round_trip*/
/*md output round_trip*/

/*md
::: zh
## `.cuda()` 和 `.cpu()`

PyTorch 还有两个简写：`x.cuda()` 等于 `x.to("cuda")`，搬到当前 GPU；`x.cpu()` 等于 `x.to("cpu")`。ct 里是 `ct_cuda(x, -1)`（-1 表示当前设备，也可以写编号，对应 `x.cuda(1)`）和 `ct_cpu(x)`。和 `to` 一样，`x.cpu()` 作用在 CPU 张量上时返回它自己。

没有 GPU 时，`ct_cuda` 返回 `NULL`，错误是 `CT_ERR_UNAVAILABLE`。用 `--device cpu` 在有 GPU 的机器上运行时，本节不调用 `ct_cuda`：这个参数的意思就是“只用 CPU”。
:::
::: en
## `.cuda()` and `.cpu()`

PyTorch has two shorthands: `x.cuda()` is `x.to("cuda")`, to the current GPU, and `x.cpu()` is `x.to("cpu")`. In ct they are `ct_cuda(x, -1)` (-1 for the current device; an index works too, like `x.cuda(1)`) and `ct_cpu(x)`. As with `to`, `x.cpu()` of a CPU tensor returns the tensor itself.

Without a GPU `ct_cuda` returns `NULL` with `CT_ERR_UNAVAILABLE`. Run with `--device cpu` on a machine that has a GPU, this section does not call `ct_cuda`: that flag means "the CPU only".
:::
*/
static void show_cuda_cpu(const ct_cli *cli, ct_metrics *m, ct_tensor *x) {
  ct_cli_section("cuda_cpu");
  if (cli->device.type == CT_CUDA) {
    ct_tensor *xc = ct_cuda(x, -1); // x.cuda()
    MUST(xc);
    print_tensor(cli, "x.cuda():", xc);
    row("x.cuda().get_device()", "%d", ct_get_device(xc));
    ct_tensor *xb = ct_cpu(xc); // x.cuda().cpu()
    MUST(xb);
    print_tensor(cli, "x.cuda().cpu():", xb);
    row("x.cuda().cpu().get_device()", "%d", ct_get_device(xb));
    ct_metrics_num(m, "cuda_get_device", ct_get_device(xc));
    ct_free(xb);
    ct_free(xc);
  } else if (ct_cuda_is_available()) {
    printf("x.cuda(): not called, --device cpu keeps this run on the CPU\n");
  } else {
    printf("x.cuda():\n");
    ct_tensor *xc = ct_cuda(x, -1);
    if (xc) { // cannot happen without CUDA
      ct_free(xc);
      ct_fail(CT_ERR_VALUE, "ch02: ct_cuda succeeded without CUDA");
      ct_cli_die(cli);
    }
    caught(m, "cuda_call");
  }
  ct_tensor *xcpu = ct_cpu(x); // x.cpu() of a CPU tensor
  MUST(xcpu);
  row("x.cpu() is x", "%s", xcpu == x ? "yes" : "no");
  ct_metrics_num(m, "cpu_same_handle", xcpu == x);
  ct_free(xcpu);
}
/*md output cuda_cpu*/

/*md
::: zh
## 两个设备上的张量进了同一个算子

一个算子的所有输入必须在同一个设备上：GPU 上的核函数读不了主机内存里的普通数组，CPU 上的循环也读不了显存。PyTorch 不会替你偷偷搬运，而是抛出 `RuntimeError`。种子教程演示的正是这个：`try` 里把 GPU 张量和 CPU 张量相加，`except RuntimeError as e` 打印消息，再把一个操作数 `.to("cuda")` 之后重算。像 `x + y` 这样的逐元素运算，PyTorch 的消息原文是：

```
Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
```

（矩阵乘一类的运算措辞不同，会指出是哪个参数，例如 `... but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)`。）有一个例外：0 维的 CPU 张量（比如 `torch.tensor(2.0)`）可以和 CUDA 张量一起运算，PyTorch 把它当成一个标量参数传给核函数。ct 没有这个例外：标量请用 `ct_binary_scalar` 一类带 `double` 参数的函数。

ct 不抛异常：`ct_add(a, b)` 返回 `NULL`，`ct_last_status()` 是 `CT_ERR_DEVICE`，`ct_last_error()` 是一条说同一件事的消息，前面加上算子名：

```
ct_add: expected all tensors to be on the same device, but found cuda:0 and cpu
```

检查写在[调度器](glossary:dispatcher)（dispatcher）里，在任何后端之前（见 README 的架构一节），所以每个算子的消息都一样，而且出错时什么也没有计算、什么也没有分配。

修法有两种。一是把一个操作数搬过去：`ct_to_device(b, ct_device_of(a))`。二是像种子教程那样写一个小工具 `ensure_same_device`，把一组张量都搬到第一个张量所在的设备。下面的函数是一个练习区；只有一个设备时它无事可做，所以评分它的是在 GPU 上运行的测试 `gpu.ch02`。

没有 GPU 时造不出两个设备上的张量：想在不存在的设备上创建 `b` 这一步就会失败，本节打印的是这个错误。在有 GPU 的机器上，同样的代码打印的就是上面那条 `ct_add` 的消息，`tests/chapter/check_ch02.py` 的 `gpu` 测试会逐字检查它。
:::
::: en
## Tensors on two devices in one operation

All inputs of an operation must be on one device: a GPU kernel cannot read an ordinary array in host memory, and a CPU loop cannot read device memory. PyTorch does not move anything behind your back; it raises a `RuntimeError`. That is the seed tutorial's example: add a GPU tensor and a CPU tensor inside `try`, print the message in `except RuntimeError as e`, then `.to("cuda")` one operand and add again. For an elementwise operation such as `x + y`, PyTorch's message reads, verbatim:

```
Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
```

(Matrix products word it differently and name the argument, e.g. `... but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)`.) There is one exception: a 0-dim CPU tensor (such as `torch.tensor(2.0)`) does mix with CUDA tensors; PyTorch passes it to the kernel as a scalar argument. ct has no such exception: for a scalar, use the functions that take a `double`, such as `ct_binary_scalar`.

ct raises nothing: `ct_add(a, b)` returns `NULL`, `ct_last_status()` is `CT_ERR_DEVICE`, and `ct_last_error()` is a message that says the same thing, prefixed with the operation's name:

```
ct_add: expected all tensors to be on the same device, but found cuda:0 and cpu
```

The check lives in the dispatcher, before any backend (see the architecture section of the README), so every operation words it the same way, and when it fails nothing has been computed or allocated.

There are two fixes. Move one operand: `ct_to_device(b, ct_device_of(a))`. Or, as the seed tutorial does, write a small helper, `ensure_same_device`, that moves a list of tensors to the device of the first one. The function below is a lab region; with a single device it has nothing to do, so the test that grades it is `gpu.ch02`, which runs on a GPU.

Without a GPU there is no way to have tensors on two devices: creating `b` on a device that does not exist already fails, and that is the error this section prints. On a machine with a GPU the same code prints the `ct_add` message above, and the `gpu` test in `tests/chapter/check_ch02.py` checks it word for word.
:::
*/
// ensure_same_device(ts, n): afterwards every tensor of ts[0..n) is on the
// device of ts[0]. A tensor already there is kept (no copy); any other is
// replaced by its copy on that device, and the array's reference to the old
// one is dropped. Returns how many tensors were moved, or -1 (with
// ct_last_error() saying why) when a move failed.
static int ensure_same_device(ct_tensor **ts, int n) {
  /* LAB BEGIN: move every ts[i] that is not on ts[0]'s device there with ct_to_device, replace it in the array and ct_free the old reference; return the number moved, -1 on failure | test: gpu.ch02 */
  if (n <= 0) return 0;
  ct_device target = ct_device_of(ts[0]);
  int moved = 0;
  for (int i = 1; i < n; ++i) {
    if (ct_device_eq(ct_device_of(ts[i]), target)) continue;
    ct_tensor *t = ct_to_device(ts[i], target); // t.to(device)
    if (!t) return -1;
    ct_free(ts[i]);
    ts[i] = t;
    moved++;
  }
  return moved;
  /* LAB END */
}

static void show_mixed_devices(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("mixed_devices");
  char dev[CT_DEVICE_STR_MAX], label[96];
  ct_device cpu = ct_device_cpu();
  // a is (3, 3) on the chosen device; b is (3, 3) on another one.
  ct_tensor *a = ct_randn(CT_SHAPE(3, 3), CT_F32, cli->device);
  MUST(a);
  ct_device other = cli->device.type == CT_CUDA ? cpu : absent_device();
  ct_device_str(other, dev);
  snprintf(label, sizeof label, "b = randn(3, 3, device=%s)", dev);
  ct_tensor *b = ct_randn(CT_SHAPE(3, 3), CT_F32, other);

  if (!b) { // only on the CPU: the other device does not exist
    printf("%s, a device this machine does not have:\n", label);
    caught(m, "mixed_error");
    b = ct_randn(CT_SHAPE(3, 3), CT_F32, cpu);
    MUST(b);
    printf("so b = randn(3, 3) on the CPU, like a\n");
  } else {
    printf("a = randn(3, 3, device=%s); %s\n", ct_device_str(cli->device, dev), label);
    printf("a + b:\n");
    ct_tensor *c = ct_add(a, b); // try: z = a + b
    if (c) {                     // cannot happen: the devices differ
      ct_free(c);
      ct_fail(CT_ERR_VALUE, "ch02: ct_add of tensors on two devices succeeded");
      ct_cli_die(cli);
    }
    caught(m, "mixed_error"); // except RuntimeError as e: print(e)

    // Fix 1: move one operand.
    ct_tensor *b_moved = ct_to_device(b, ct_device_of(a)); // b.to(a.device)
    MUST(b_moved);
    ct_tensor *c1 = ct_add(a, b_moved);
    MUST(c1);
    row("a + b.to(a.device)", "ok, on %s", ct_device_str(ct_device_of(c1), dev));
    // The same sum on the CPU, as a reference.
    ct_tensor *a_cpu = ct_cpu(a), *c1_cpu = ct_cpu(c1);
    MUST(a_cpu && c1_cpu);
    ct_tensor *ref = ct_add(a_cpu, b);
    MUST(ref);
    float got[9], want[9];
    MUST_OK(ct_copy_to_host(c1_cpu, got, sizeof got));
    MUST_OK(ct_copy_to_host(ref, want, sizeof want));
    int same = 0;
    for (int i = 0; i < 9; ++i) same += got[i] == want[i];
    row("equals a.cpu() + b", "%s (%d of 9 elements)", same == 9 ? "yes" : "NO", same);
    ct_metrics_num(m, "mixed_fix_equal", same);
    ct_free(ref), ct_free(c1_cpu), ct_free(a_cpu), ct_free(c1), ct_free(b_moved);
  }

  // Fix 2: the helper.
  ct_tensor *ts[2] = {ct_retain(a), ct_retain(b)};
  int moved = ensure_same_device(ts, 2);
  MUST(moved >= 0);
  ct_tensor *c2 = ct_add(ts[0], ts[1]);
  MUST(c2);
  row("ensure_same_device(a, b)", "moved %d tensor%s", moved, moved == 1 ? "" : "s");
  row("a + b after ensure_same_device", "ok, on %s", ct_device_str(ct_device_of(c2), dev));
  ct_metrics_num(m, "ensure_moved", moved);
  ct_metrics_str(m, "ensure_add_device", dev);
  ct_free(c2);
  ct_free(ts[0]);
  ct_free(ts[1]);
  ct_free(b);
  ct_free(a);
}
/*md twin mixed_devices*/
/*md output mixed_devices*/

/*md
::: zh
## 搬一个大张量代价大吗？量一量

种子教程问：频繁地搬一个很大的张量，会不会很费时间？答案取决于三件事：张量多大，主机这一侧的内存是什么样的，以及两个设备之间隔着什么。

**隔着什么。**独立 GPU 通过 PCIe 总线和 CPU 相连（在 Grace Hopper 这样的系统上是 NVLink-C2C）。PCIe 链路的理论带宽是 `每通道速率 (GT/s) × 通道数 × 编码效率 / 8` 字节每秒，第 3 代起编码效率是 128/130。在 GPU 上运行时，本节会从 Linux 的 `/sys` 读出这块 GPU 所在链路的速率和宽度，算出它的上限，再和实测比较。显存自己的带宽（第 1 章算过）要高出一个数量级还多，所以 PCIe 才是瓶颈。

**可分页内存和锁页内存。**GPU 用拷贝引擎（DMA 引擎）搬数据：它按物理地址直接读写主机内存，不需要 CPU 参与。可是普通的 `malloc` 内存是“可分页”的：操作系统随时可以把某一页换出到磁盘，或者挪到别的物理位置，DMA 引擎没法对它放心地读写。所以驱动对可分页内存是这么做的：由 CPU 把数据一块一块地先拷进驱动自己的一块锁页“中转缓冲区”（bounce buffer），再让 DMA 从那里搬。这多了一次 CPU 的 `memcpy`，而且拷贝期间调用方一直等着。锁页内存（pinned / page-locked，`cudaHostAlloc`，PyTorch 的 `pin_memory()`）是向操作系统锁定、保证不会被换出或挪走的内存，DMA 直接从它读，不需要中转。

**测法。**每种大小、每个方向、每种主机内存各测若干次：先预热两三次（第一次会碰上缓存分配器要新内存、驱动初始化之类的一次性开销），然后每次拷贝前后在流上各记录一个事件，用 `ct_event_elapsed_time` 取两个事件之间 GPU 上经过的时间，最后取中位数，不受偶尔一次慢的影响。主机到设备用的是 `ct_to`，正是种子教程里的 `x.to(device)`（锁页时加 `non_blocking=True`）；设备到主机则拷进一块事先分配好的主机内存（`ct_copy_`，即 `host.copy_(x)`），因为每次新分配的主机内存在第一次写入时才由操作系统真正给出物理页，那样测到的就是缺页处理，而不是拷贝。最后一列是同样大小的主机内 `memcpy`，即可分页拷贝途中那次中转的成本。
:::
::: en
## Is moving a big tensor costly? Measure it

The seed tutorial asks whether moving a big tensor often costs much time. The answer depends on three things: how big the tensor is, what kind of memory the host side is, and what lies between the two devices.

**What lies between.** A discrete GPU is connected to the CPU over the PCIe bus (over NVLink-C2C on systems like Grace Hopper). A PCIe link's theoretical bandwidth is `rate per lane (GT/s) × lanes × encoding efficiency / 8` bytes per second, with an efficiency of 128/130 from generation 3 on. On a GPU run this section reads the rate and width of the GPU's own link from Linux's `/sys`, works out that ceiling and compares the measurement with it. The device memory's own bandwidth (chapter 1 computed it) is more than ten times higher, which is why PCIe is the bottleneck.

**Pageable and pinned memory.** A GPU moves data with its copy engines (DMA engines), which read and write host memory by physical address, without the CPU. But ordinary `malloc` memory is pageable: the operating system may swap any page out to disk or move it to another physical place at any time, so a DMA engine cannot safely work on it. For pageable memory the driver therefore has the CPU copy the data, chunk by chunk, into a page-locked staging buffer of its own (a bounce buffer), and DMAs from there. That is an extra CPU `memcpy` on the way, and the caller waits throughout. Pinned (page-locked) memory (`cudaHostAlloc`, PyTorch's `pin_memory()`) is memory the operating system has promised not to swap or move; DMA reads it directly, with no staging.

**How it is measured.** For each size, direction and kind of host memory, a few warm-up copies first (the first one meets one-time costs: the caching allocator asking for fresh memory, driver setup), then repeated copies, each bracketed by two events recorded on the stream; `ct_event_elapsed_time` gives the GPU time between them, and the median of the repeats is kept, so one slow outlier does not count. Host to device uses `ct_to`, the seed's `x.to(device)` itself (with `non_blocking=True` when pinned). Device to host copies into host memory allocated beforehand (`ct_copy_`, that is `host.copy_(x)`), because freshly allocated host memory gets its physical pages from the operating system only when first written, and then one would be timing page faults, not the copy. The last column is a host `memcpy` of the same size: the staging step that a pageable copy pays for.
:::
*/
/*md
::: zh
{{fig pinned}} 把上面两段话画了出来。左边是可分页内存：数据先由 CPU 拷进驱动的锁页暂存缓冲区（图中第 1 步，这时主机在等），再由 DMA 搬到设备（第 2 步）。右边是锁页内存：DMA 直接从它读，一步到位，所以 `non_blocking=True` 的拷贝才能真正不等主机。下表里可分页一列比锁页一列多付的，正是第 1 步那一次 `memcpy`（最后一列量的就是它）。
:::
::: en
{{fig pinned}} draws the two paragraphs above. On the left is pageable memory: the CPU first copies the data into the driver's pinned staging buffer (the figure's step 1; the host waits meanwhile), then DMA moves it to the device (step 2). On the right is pinned memory: DMA reads it directly, in one step, which is why only a `non_blocking=True` copy from pinned memory can leave the host free. What the pageable columns of the table below pay over the pinned ones is step 1's `memcpy` (the last column measures it).
:::
*/
/*md figure pinned: 可分页内存与锁页内存：一次主机到设备的拷贝走的两条路 | Pageable and pinned memory: the two paths of a host-to-device copy*/
/*md hide*/
// The data caches of CPU 0 from sysfs: L1d, L2 and L3 sizes in bytes (0 when
// unknown). Instruction caches are skipped.
static void cpu_caches(double *l1, double *l2, double *l3) {
  *l1 = *l2 = *l3 = 0;
  for (int i = 0; i < 10; ++i) {
    char path[96], type[32] = "", size[32] = "";
    int level = 0;
    FILE *f;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
    if (!(f = fopen(path, "r"))) continue;
    if (fscanf(f, "%d", &level) != 1) level = 0;
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
    if (!(f = fopen(path, "r"))) continue;
    if (fscanf(f, "%31s", type) != 1) type[0] = '\0';
    fclose(f);
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
    if (!(f = fopen(path, "r"))) continue;
    if (fscanf(f, "%31s", size) != 1) size[0] = '\0';
    fclose(f);
    if (!strcmp(type, "Instruction")) continue;
    char *end;
    double v = strtod(size, &end);
    if (*end == 'K') v *= KIB;
    else if (*end == 'M') v *= MIB;
    else if (*end == 'G') v *= 1024 * MIB;
    if (level == 1) *l1 = v;
    else if (level == 2) *l2 = v;
    else if (level == 3) *l3 = v;
  }
}

// The PCIe link of CUDA device `index` as Linux reports it: rate per lane in
// GT/s and width in lanes. False where it cannot be read (no CUDA, no /sys in
// a container, a GPU that is not on PCIe).
static bool pcie_link(int index, double *gts, int *width) {
#ifdef CT_HAVE_CUDA
  char bus[32];
  unsigned dom, b, d, fn;
  if (ch02_pci_bus_id(index, bus, sizeof bus) != CT_OK) {
    ct_clear_error();
    return false;
  }
  if (sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &fn) != 4) return false;
  char path[128];
  FILE *f;
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.%x/current_link_speed", dom, b, d, fn);
  if (!(f = fopen(path, "r"))) return false;
  int ok = fscanf(f, "%lf", gts) == 1;
  fclose(f);
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.%x/current_link_width", dom, b, d, fn);
  if (!ok || !(f = fopen(path, "r"))) return false;
  ok = fscanf(f, "%d", width) == 1;
  fclose(f);
  return ok && *gts > 0 && *width > 0;
#else
  (void)index, (void)gts, (void)width;
  return false;
#endif
}

/*md show*/

/*md
::: zh
### 主机内的拷贝

`memcpy` 不经过任何总线，只是 CPU 通过各级缓存读、写内存。每个样本都把同一段内存拷很多遍（至少凑够 4 MiB），因为一次 4 KiB 的 `memcpy` 只要几十到几百纳秒，比计时本身的误差还小。同一段小数据反复拷，它一直待在缓存里，所以小尺寸测到的是缓存的带宽；源加目的超过末级缓存（L3）之后，测到的才是内存条（DRAM）的带宽。CPU 上的表多一列“fits in”，按本机从 `/sys` 读出的缓存大小，标出每一行的源加目的放得进哪一级缓存。算这一列的 `fits_in` 是一个练习区，测试脚本会自己读 `/sys` 再算一遍来核对。

`ct_copy_` 一列是 ct 自己在两个 CPU 张量之间的拷贝，也就是 CPU 上的 `dst.copy_(src)`：它走通用的逐元素循环，可能由 OpenMP 多线程执行。
:::
::: en
### Copies within the host

`memcpy` crosses no bus: the CPU reads and writes memory through its caches. Each sample copies the same buffer many times over (at least 4 MiB in all), because a single 4 KiB `memcpy` takes tens to hundreds of nanoseconds, less than the timer's own error. A small buffer copied again and again stays in cache, so the small sizes measure cache bandwidth; only once source and destination together outgrow the last-level cache (L3) does the copy measure main memory (DRAM). On the CPU the table has a "fits in" column: the cache level that holds each row's source and destination, from the cache sizes this machine reports in `/sys`. `fits_in`, which works out that column, is a lab region; the test script reads `/sys` itself and checks the column.

The `ct_copy_` column is ct's own copy between two CPU tensors, `dst.copy_(src)` on the CPU: it runs the generic elementwise loop, possibly on several OpenMP threads.
:::
*/
// The cache level a copy of `bytes` bytes works in: the smallest one that
// holds its working set, source and destination together. l1, l2 and l3 are
// the cache sizes in bytes (0: unknown, skip that level).
static const char *fits_in(double bytes, double l1, double l2, double l3) {
  /* LAB BEGIN: the working set is 2 x bytes; return "L1", "L2" or "L3" for the first level (size > 0) that holds it, else "DRAM" */
  double ws = 2 * bytes;
  if (l1 > 0 && ws <= l1) return "L1";
  if (l2 > 0 && ws <= l2) return "L2";
  if (l3 > 0 && ws <= l3) return "L3";
  return "DRAM";
  /* LAB END */
}

// Median GB/s (1e9 bytes per second) of memcpy between two malloc'd buffers
// of `bytes` bytes, timed with CPU events; a sample repeats the copy until it
// has moved at least 4 MiB.
static double host_memcpy_gbs(const ct_cli *cli, size_t bytes, int warmup, int reps) {
  // Page-aligned, as tensor storage is. (With src and dst at unrelated page
  // offsets, glibc's memcpy can run 20x slower on some CPUs: AMD Zen's
  // `rep movsb` trips over 4 KiB aliasing when dst sits just above src.)
  size_t alloc = (bytes + 4095) / 4096 * 4096;
  unsigned char *src = aligned_alloc(4096, alloc), *dst = aligned_alloc(4096, alloc);
  if (!src || !dst) {
    free(src), free(dst);
    ct_fail(CT_ERR_OOM, "ch02: cannot allocate 2 x %zu bytes of host memory", bytes);
    ct_cli_die(cli);
  }
  memset(src, 1, bytes); // touch every page now: first-touch page faults are not bandwidth
  memset(dst, 2, bytes);
  int inner = bytes >= (4u << 20) ? 1 : (int)((4u << 20) / bytes);
  ct_event *e0 = ct_event_create(ct_device_cpu(), true), *e1 = ct_event_create(ct_device_cpu(), true);
  MUST(e0 && e1);
  double gbs[MAX_REPS];
  for (int r = -warmup; r < reps; ++r) {
    MUST_OK(ct_event_record(e0, NULL));
    for (int k = 0; k < inner; ++k) {
      memcpy(dst, src, bytes);
      __asm__ volatile("" : : "r"(dst) : "memory"); // keep every copy: the compiler may not merge them
    }
    MUST_OK(ct_event_record(e1, NULL));
    float ms;
    MUST_OK(ct_event_elapsed_time(e0, e1, &ms));
    if (r >= 0) gbs[r] = (double)bytes * inner / (ms > 0 ? ms * 1e-3 : 1e-9) / 1e9;
  }
  ct_event_free(e0);
  ct_event_free(e1);
  free(src);
  free(dst);
  return ct_cli_median(gbs, reps);
}

// The same with ct_copy_ between two CPU tensors: dst.copy_(src).
static double host_ct_copy_gbs(const ct_cli *cli, size_t bytes, int warmup, int reps) {
  int64_t n = (int64_t)(bytes / sizeof(float));
  ct_tensor *src = ct_full(CT_SHAPE(n), 1.0, CT_F32, ct_device_cpu()); // (n,) f32
  ct_tensor *dst = ct_zeros(CT_SHAPE(n), CT_F32, ct_device_cpu());     // (n,) f32
  MUST(src && dst);
  int inner = bytes >= (4u << 20) ? 1 : (int)((4u << 20) / bytes);
  ct_event *e0 = ct_event_create(ct_device_cpu(), true), *e1 = ct_event_create(ct_device_cpu(), true);
  MUST(e0 && e1);
  double gbs[MAX_REPS];
  for (int r = -warmup; r < reps; ++r) {
    MUST_OK(ct_event_record(e0, NULL));
    for (int k = 0; k < inner; ++k) MUST_OK(ct_copy_(dst, src, false));
    MUST_OK(ct_event_record(e1, NULL));
    float ms;
    MUST_OK(ct_event_elapsed_time(e0, e1, &ms));
    if (r >= 0) gbs[r] = (double)bytes * inner / (ms > 0 ? ms * 1e-3 : 1e-9) / 1e9;
  }
  ct_event_free(e0);
  ct_event_free(e1);
  ct_free(src);
  ct_free(dst);
  return ct_cli_median(gbs, reps);
}

/*md
::: zh
### 主机与设备之间的拷贝

四种拷贝对应四行 PyTorch：

| 列 | PyTorch | ct |
|---|---|---|
| H2D pageable | `x.to(device)` | `ct_to(x, dev, CT_F32, false)` |
| H2D pinned | `x_pinned.to(device, non_blocking=True)` | `ct_to(x_pinned, dev, CT_F32, true)` |
| D2H pageable | `host.copy_(d)` | `ct_copy_(host, d, false)` |
| D2H pinned | `host_pinned.copy_(d, non_blocking=True)` | `ct_copy_(host_pinned, d, true)` |

锁页的主机张量由 `ct_pin_memory(x)` 得到，对应 `x.pin_memory()`：分配一块锁页内存，把 `x` 拷进去。锁页内存本身也有代价：分配它很慢（驱动要锁定并映射每一页），而且它从操作系统手里拿走了不能换出的物理内存，锁得太多整台机器都会变慢。所以 PyTorch 和 ct 都把它缓存在一个池里重复使用（`ct_pinned_memory_reserved`），DataLoader 的 `pin_memory=True` 也只锁一个批次用的那几块。
:::
::: en
### Copies between host and device

The four copies are four lines of PyTorch:

| column | PyTorch | ct |
|---|---|---|
| H2D pageable | `x.to(device)` | `ct_to(x, dev, CT_F32, false)` |
| H2D pinned | `x_pinned.to(device, non_blocking=True)` | `ct_to(x_pinned, dev, CT_F32, true)` |
| D2H pageable | `host.copy_(d)` | `ct_copy_(host, d, false)` |
| D2H pinned | `host_pinned.copy_(d, non_blocking=True)` | `ct_copy_(host_pinned, d, true)` |

A pinned host tensor comes from `ct_pin_memory(x)`, PyTorch's `x.pin_memory()`: it allocates page-locked memory and copies `x` into it. Pinned memory has its own costs: allocating it is slow (the driver locks and maps every page), and it takes physical memory away from the operating system that can no longer be swapped out; lock too much and the whole machine slows down. So PyTorch and ct keep it in a pool for reuse (`ct_pinned_memory_reserved`), and the DataLoader's `pin_memory=True` pins only the few buffers a batch needs.
:::
*/
typedef enum move_kind { H2D_PAGEABLE, H2D_PINNED, D2H_PAGEABLE, D2H_PINNED, NUM_MOVES } move_kind;

typedef struct move_bufs {
  ct_device dev;
  ct_tensor *pageable; // (n,) f32 in ordinary (pageable) host memory
  ct_tensor *pinned;   // (n,) f32 in page-locked host memory
  ct_tensor *on_dev;   // (n,) f32 on the GPU
} move_bufs;

// One copy of kind k, issued on the device's current stream.
static int move_once(move_kind k, const move_bufs *b) {
  ct_tensor *t;
  switch (k) {
  case H2D_PAGEABLE: t = ct_to(b->pageable, b->dev, CT_F32, false); break; // x.to(device)
  case H2D_PINNED: t = ct_to(b->pinned, b->dev, CT_F32, true); break;      // non_blocking=True
  case D2H_PAGEABLE: return ct_copy_(b->pageable, b->on_dev, false);       // host.copy_(d)
  case D2H_PINNED: return ct_copy_(b->pinned, b->on_dev, true);            // non_blocking=True
  default: return ct_fail(CT_ERR_VALUE, "ch02: bad move kind %d", (int)k);
  }
  if (!t) return ct_last_status();
  ct_free(t); // back to the caching allocator; the stream keeps the order
  return CT_OK;
}
/*md twin moves*/

// Median milliseconds of one copy of kind k, each bracketed by two events on
// the current stream.
static double time_move_ms(const ct_cli *cli, move_kind k, const move_bufs *b, int warmup, int reps) {
  ct_event *e0 = ct_event_create(b->dev, true), *e1 = ct_event_create(b->dev, true);
  MUST(e0 && e1);
  double ms[MAX_REPS];
  for (int r = -warmup; r < reps; ++r) {
    MUST_OK(ct_event_record(e0, NULL));
    MUST_OK(move_once(k, b));
    MUST_OK(ct_event_record(e1, NULL));
    MUST_OK(ct_event_synchronize(e1));
    float t;
    MUST_OK(ct_event_elapsed_time(e0, e1, &t));
    if (r >= 0) ms[r] = t;
  }
  ct_event_free(e0);
  ct_event_free(e1);
  return ct_cli_median(ms, reps);
}

/*md
::: zh
### 带宽表

下面的函数对每种大小跑一遍上面的测量，打印表格，并把各列写进 `--metrics`（`sizes_bytes`、`h2d_pageable_gbs`、`h2d_pinned_gbs`、`d2h_pageable_gbs`、`d2h_pinned_gbs`、`host_memcpy_gbs`），书里的曲线图就是用它们画的。GB/s 按 10^9 字节每秒计。每测完一种大小就把缓存的内存还给系统（`ct_empty_cache`、`ct_pinned_empty_cache`），免得 256 MiB 的几块缓冲一直占着。

读表时看这几处：

- **小尺寸由固定开销主导。**一次拷贝无论多小，都要经过发起调用、驱动排队、DMA 启动，这段时间就是 4 KiB 那一行的耗时，表下单独打印出来。几 KiB 的张量，搬一次的代价几乎全是这个开销，和大小无关；所以频繁地搬许多小张量，不如攒成一个大张量搬一次。
- **大尺寸逼近链路上限。**到几 MiB 以上，固定开销摊薄了，锁页拷贝接近 PCIe 的理论带宽（表下打印了两者之比）。
- **锁页比可分页快。**可分页拷贝多了一次经过 CPU 的中转，表下打印了 256 MiB 时两者之比；最后一列 `host memcpy` 就是那次中转本身的速度。
- 所以，“代价大不大”可以直接算：用表里的带宽除张量的字节数。比如每一步训练都把一批数据搬上 GPU，就拿这批数据的大小除以 H2D pinned 一列，看它和一步的计算时间相比有多少。

在 CPU 上运行时没有主机到设备的拷贝：表里是 `memcpy` 和 `ct_copy_`，锁页一列是 n/a。锁页是向 GPU 驱动申请的（`cudaHostAlloc`），目的是让 GPU 的 DMA 引擎能直接读写；没有 GPU 就没有 DMA 引擎要伺候，`ct_pin_memory` 也就和 PyTorch 的 `pin_memory()` 一样报错（下面打印了错误）。
:::
::: en
### The bandwidth table

The function below runs those measurements for every size, prints the table and writes the columns to `--metrics` (`sizes_bytes`, `h2d_pageable_gbs`, `h2d_pinned_gbs`, `d2h_pageable_gbs`, `d2h_pinned_gbs`, `host_memcpy_gbs`), from which the book draws its figure. GB/s means 10^9 bytes per second. After each size the cached memory goes back to the system (`ct_empty_cache`, `ct_pinned_empty_cache`), so that the 256 MiB buffers do not linger.

What to read in the table:

- **Small sizes are dominated by a fixed cost.** However small, a copy goes through the call, the driver's queue and the DMA start-up; that time is the 4 KiB row's, printed on its own below the table. For a tensor of a few KiB the cost of a move is almost all overhead, independent of size; so rather than moving many small tensors often, pack them into one and move that once.
- **Big sizes approach the link's limit.** From a few MiB up the fixed cost is spread thin and pinned copies come close to the PCIe theoretical bandwidth (the ratio is printed below the table).
- **Pinned beats pageable.** A pageable copy pays for an extra trip through the CPU; the ratio at the largest size is printed below the table, and the last column, `host memcpy`, is the speed of that trip on its own.
- So "is it costly?" is a division: the tensor's bytes over the table's bandwidth. If every training step moves a batch to the GPU, divide the batch's size by the H2D pinned column and compare the result with the step's compute time.

On the CPU there is no host-to-device copy: the table has `memcpy` and `ct_copy_`, and the pinned column is n/a. Pinning is something asked of the GPU driver (`cudaHostAlloc`) so that the GPU's DMA engines can read and write the memory directly; with no GPU there is no DMA engine to serve, and `ct_pin_memory` fails just as PyTorch's `pin_memory()` does (the error is printed below).
:::
*/
static void show_bandwidth(const ct_cli *cli, ct_metrics *m, size_t max_bytes) {
  ct_cli_section("bandwidth");
  ct_device dev = cli->device, cpu = ct_device_cpu();
  bool gpu = dev.type == CT_CUDA;
  double sizes[MAX_SIZES], gbs[NUM_MOVES][MAX_SIZES], memcpy_gbs[MAX_SIZES], copy_gbs[MAX_SIZES];
  double first_ms = 0;
  int n_sizes = 0;
  for (size_t bytes = 4096; bytes <= max_bytes && n_sizes < MAX_SIZES; bytes *= 4) sizes[n_sizes++] = (double)bytes;

  char sz[32];
  double l1, l2, l3;
  cpu_caches(&l1, &l2, &l3);
  if (gpu)
    printf("%-10s %13s %13s %13s %13s %13s\n", "size", "H2D pageable", "H2D pinned", "D2H pageable", "D2H pinned",
           "host memcpy");
  else
    printf("%-10s %13s %13s %13s %8s\n", "size", "memcpy", "ct_copy_", "pinned", "fits in");
  if (gpu) printf("%-10s %13s %13s %13s %13s %13s\n", "", "GB/s", "GB/s", "GB/s", "GB/s", "GB/s");
  else printf("%-10s %13s %13s\n", "", "GB/s", "GB/s");

  for (int i = 0; i < n_sizes; ++i) {
    size_t bytes = (size_t)sizes[i];
    int64_t n = (int64_t)(bytes / sizeof(float));
    int reps = bytes <= (16u << 20) ? (cli->quick ? 10 : 20) : (cli->quick ? 5 : 7);
    int warmup = bytes <= (16u << 20) ? 3 : 2;
    memcpy_gbs[i] = host_memcpy_gbs(cli, bytes, 2, reps < 7 ? reps : 7);
    size_str(sizes[i], sz, sizeof sz);
    if (!gpu) {
      copy_gbs[i] = host_ct_copy_gbs(cli, bytes, 2, reps < 7 ? reps : 7);
      const char *level = fits_in(sizes[i], l1, l2, l3);
      printf("%-10s %13.2f %13.2f %13s %8s\n", sz, memcpy_gbs[i], copy_gbs[i], "n/a", level ? level : "?");
      continue;
    }
    move_bufs b = {.dev = dev};
    b.pageable = ct_full(CT_SHAPE(n), 1.0, CT_F32, cpu); // every page touched
    MUST(b.pageable);
    b.pinned = ct_pin_memory(b.pageable); // x.pin_memory()
    MUST(b.pinned);
    b.on_dev = ct_full(CT_SHAPE(n), 2.0, CT_F32, dev);
    MUST(b.on_dev);
    for (int k = 0; k < NUM_MOVES; ++k) {
      double ms = time_move_ms(cli, (move_kind)k, &b, warmup, reps);
      gbs[k][i] = (double)bytes / (ms * 1e-3) / 1e9;
      if (i == 0 && k == H2D_PINNED) first_ms = ms;
    }
    printf("%-10s %13.2f %13.2f %13.2f %13.2f %13.2f\n", sz, gbs[H2D_PAGEABLE][i], gbs[H2D_PINNED][i],
           gbs[D2H_PAGEABLE][i], gbs[D2H_PINNED][i], memcpy_gbs[i]);
    ct_free(b.pageable), ct_free(b.pinned), ct_free(b.on_dev);
    MUST_OK(ct_empty_cache(cpu));
    MUST_OK(ct_empty_cache(dev));
    MUST_OK(ct_pinned_empty_cache());
  }

  ct_metrics_series(m, "sizes_bytes", sizes, n_sizes);
  ct_metrics_series(m, "host_memcpy_gbs", memcpy_gbs, n_sizes);
  int last = n_sizes - 1;
  size_str(sizes[last], sz, sizeof sz);
  char key[64];
  if (gpu) {
    static const char *const keys[NUM_MOVES] = {"h2d_pageable_gbs", "h2d_pinned_gbs", "d2h_pageable_gbs",
                                                "d2h_pinned_gbs"};
    for (int k = 0; k < NUM_MOVES; ++k) ct_metrics_series(m, keys[k], gbs[k], n_sizes);
    row("fixed cost of one copy", "%.1f us (4 KiB, pinned host to device)", first_ms * 1e3);
    snprintf(key, sizeof key, "pinned / pageable at %s", sz);
    row(key, "%.2fx host to device, %.2fx device to host", gbs[H2D_PINNED][last] / gbs[H2D_PAGEABLE][last],
        gbs[D2H_PINNED][last] / gbs[D2H_PAGEABLE][last]);
    ct_metrics_num(m, "copy_overhead_us", first_ms * 1e3);
    ct_metrics_num(m, "h2d_pinned_over_pageable", gbs[H2D_PINNED][last] / gbs[H2D_PAGEABLE][last]);
    ct_metrics_num(m, "d2h_pinned_over_pageable", gbs[D2H_PINNED][last] / gbs[D2H_PAGEABLE][last]);
    double gts;
    int width;
    if (pcie_link(dev.index, &gts, &width)) {
      double eff = gts <= 5.0 ? 8.0 / 10.0 : 128.0 / 130.0; // gen 1-2: 8b/10b; gen 3+: 128b/130b
      double link = gts * width * eff / 8.0;
      row("PCIe link (from /sys)", "%.1f GT/s x%d = %.1f GB/s per direction", gts, width, link);
      row("pinned H2D / link", "%.0f%% at %s", 100.0 * gbs[H2D_PINNED][last] / link, sz);
      ct_metrics_num(m, "pcie_gts", gts);
      ct_metrics_num(m, "pcie_width", width);
      ct_metrics_num(m, "pcie_link_gbs", link);
    } else {
      row("PCIe link (from /sys)", "unknown here (no /sys/bus/pci entry for this GPU)");
    }
  } else {
    ct_metrics_series(m, "host_copy_gbs", copy_gbs, n_sizes);
    row("caches (cpu0, from /sys)", "L1d %.0f KiB, L2 %.0f KiB, L3 %.1f MiB", l1 / KIB, l2 / KIB, l3 / MIB);
    snprintf(key, sizeof key, "memcpy 4 KiB / %s", sz);
    row(key, "%.1fx", memcpy_gbs[0] / memcpy_gbs[last]);
    ct_metrics_num(m, "cache_l1d_bytes", l1);
    ct_metrics_num(m, "cache_l2_bytes", l2);
    ct_metrics_num(m, "cache_l3_bytes", l3);
    printf("pinned memory, x.pin_memory():\n");
    ct_tensor *x = ct_zeros(CT_SHAPE(4), CT_F32, cpu);
    MUST(x);
    ct_tensor *p = ct_cuda_is_available() ? NULL : ct_pin_memory(x);
    if (p) { // cannot happen without CUDA
      ct_free(p);
      ct_fail(CT_ERR_VALUE, "ch02: ct_pin_memory succeeded without CUDA");
      ct_cli_die(cli);
    }
    if (ct_cuda_is_available())
      printf("not measured: --device cpu keeps this run on the CPU\n");
    else
      caught(m, "pin_memory");
    ct_free(x);
  }
}
/*md output bandwidth*/
/*md
::: zh
{{fig bandwidth}} 把下表画成曲线：横轴是每次拷贝的字节数，纵轴是达到的带宽，两轴都取对数。看两件事：小拷贝时各条曲线都被固定开销压低，大拷贝时锁页与可分页两条曲线之间的距离，就是 {{fig pinned}} 里那次中转拷贝的代价。
:::
::: en
{{fig bandwidth}} draws the table as curves: bytes per copy across, bandwidth up, both on log scales. Look for two things: at small sizes every curve is held down by fixed costs, and at large sizes the gap between the pinned and the pageable curve is the cost of {{fig pinned}}'s staging copy.
:::
*/
/*md figure bandwidth*/

/*md
::: zh
## non_blocking=True：拷贝和计算同时进行

GPU 的拷贝引擎和执行核函数的 SM 是两套独立的硬件，所以一次拷贝和一个核函数原则上可以同时进行。要让它们真的同时进行，需要三个条件：

1. **两个流。**同一个流里的工作严格按顺序执行；拷贝放在一个流上，核函数放在另一个流上，它们之间就没有先后约束了。`ct_stream_create` 对应 `torch.cuda.Stream()`，`ct_set_stream` 对应 `with torch.cuda.stream(s):`（让之后的拷贝走这个流）。
2. **发起拷贝的调用立刻返回。**这就是 `non_blocking=True`：调用只是把拷贝排进流里就回来，主机接着去启动核函数。
3. **锁页内存。**只有源在锁页内存里，拷贝才能完全交给 DMA 引擎、调用才能立刻返回。源是可分页内存时，CUDA 的规定（运行时 API 文档 “API synchronization behavior” 一节）是：主机到设备的拷贝**先同步这个流**，等流上之前的工作全部做完才开始；然后主机守在调用里，把数据一块块中转进驱动的锁页缓冲区，中转完调用才返回，这时最后一段 DMA 可能还在路上。所以不能重叠，并不是因为“调用返回时拷贝已经结束”，而是因为拷贝前的那次流同步，加上主机在中转期间被占住、发不出下一个核函数（`non_blocking=True` 对此无能为力）。这就是 `non_blocking` 离不开锁页内存的原因，也是 DataLoader 要配 `pin_memory=True` 的原因。

种子教程说，要让传输和计算重叠，只需在调用 `cuda()` 时多传一个 `async=True` 参数。这是很早以前的写法：这个参数后来改名为 `non_blocking`，而 Python 3.7 起 `async` 是保留关键字，`x.cuda(async=True)` 连语法检查都过不了。今天写作 `x.cuda(non_blocking=True)` 或 `x.to(device, non_blocking=True)`，而且照上面三条，只写这一个参数还不够。

实验：把一块锁页内存拷到 GPU，同时运行本章自己的核函数 `fma_burn`（在 `ch02_kernels.cu` 里：每个线程对一个数连做 `iters` 次乘加，几乎只用寄存器，是纯计算型的）。先单独测拷贝的时间，再把核函数的迭代次数校准到和拷贝差不多一样长，然后比较两种安排：

- 串行：拷贝和核函数在同一个流上，一个接一个；
- 重叠：拷贝在 copy 流上，核函数在 compute 流上；copy 流先等 `start` 事件，compute 流最后等拷贝完成的事件，所以 `stop` 事件标记两者都结束的时刻。

理想情况下，重叠的时间是两者中较长的那个，串行是两者之和，省下的是较短的那个。GPU 上还多测一行：同样的两个流，源换成可分页内存，看它还能不能重叠。

在 CPU 上，同样的代码照样运行：CPU 也有流和事件，但工作在发起时就做完了，“两个流”只是先后调用两个函数，省下的时间应当接近 0（只剩测量的噪声）。CPU 上的“核函数”是同一个乘加循环的 C 版本。
:::
::: en
## non_blocking=True: copying while computing

The GPU's copy engines and the SMs that run kernels are separate hardware, so a copy and a kernel can in principle run at the same time. For them to actually do so, three things are needed:

1. **Two streams.** Work on one stream runs strictly in order; with the copy on one stream and the kernel on another, nothing orders them. `ct_stream_create` mirrors `torch.cuda.Stream()`, and `ct_set_stream` mirrors `with torch.cuda.stream(s):` (the copies that follow go to that stream).
2. **A copy call that returns at once.** That is `non_blocking=True`: the call only queues the copy on the stream and comes back, and the host goes on to launch the kernel.
3. **Pinned memory.** Only when the source is pinned can the whole copy be handed to a DMA engine and the call return at once. With a pageable source, CUDA's rule (the runtime API's "API synchronization behavior" notes) is that a host-to-device copy first **synchronizes the stream**: it starts only when the stream's earlier work is done. Then the host stays in the call, staging the data chunk by chunk into the driver's pinned buffer, and the call returns once staging is done, possibly with the last DMA still in flight. So what prevents overlap is not "the copy is over when the call returns"; it is the stream synchronization before the copy, and the host being held in the call while it stages, unable to launch the next kernel (`non_blocking=True` changes neither). This is why `non_blocking` needs pinned memory, and why the DataLoader's `pin_memory=True` goes with it.

A seed tutorial says that to overlap transfer with compute one only needs to pass an extra `async=True` argument to `cuda()`. That is very old usage: the argument was renamed `non_blocking`, and since Python 3.7 `async` is a reserved keyword, so `x.cuda(async=True)` does not even parse. Today it is `x.cuda(non_blocking=True)` or `x.to(device, non_blocking=True)`, and by the three points above that one argument alone is not enough.

The experiment: copy a block of pinned memory to the GPU while running the chapter's own kernel, `fma_burn` (in `ch02_kernels.cu`: each thread runs `iters` multiply-adds on one number, almost entirely in registers, so it is compute-bound). First the copy is timed alone; then the kernel's iteration count is calibrated so that it takes about as long as the copy; then two schedules are compared:

- serial: copy and kernel on one stream, one after the other;
- overlapped: the copy on the copy stream, the kernel on the compute stream; the copy stream first waits for the `start` event, the compute stream finally waits for the event that marks the end of the copy, so the `stop` event marks the moment both are done.

Ideally the overlapped time is the longer of the two, the serial time their sum, and the saving the shorter one. On the GPU one more line is measured: the same two streams with a pageable source, to see whether that still overlaps.

On the CPU the same code runs too: the CPU has streams and events, but work is done when it is issued, so "two streams" is just two function calls one after the other, and the saving should be close to 0 (measurement noise only). The CPU's "kernel" is a C version of the same multiply-add loop.
:::
*/
/*md source ch02_kernels.cu*/
/*md hide*/
// The CPU version of fma_burn: the same chain of multiply-adds per element.
static void cpu_fma_burn(float *x, int64_t n, int iters) {
  const float a = 0.999f, b = 0.001f;
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    for (int k = 0; k < iters; ++k) v = fmaf(v, a, b);
    x[i] = v;
  }
}

// fma_burn on stream s of device d: the chapter's kernel on CUDA, the loop
// above on the CPU (where it runs now, whatever s is).
static int burn(ct_device d, float *x, int64_t n, int iters, ct_stream *s) {
#ifdef CT_HAVE_CUDA
  if (d.type == CT_CUDA) return ch02_fma_burn(x, n, iters, ct_stream_handle(s));
#endif
  (void)d, (void)s;
  cpu_fma_burn(x, n, iters);
  return CT_OK;
}
/*md show*/

typedef enum schedule { COPY_ONLY, KERNEL_ONLY, SERIAL, OVERLAPPED, OVERLAPPED_PAGEABLE } schedule;

typedef struct overlap_ctx {
  ct_device dev;
  ct_tensor *dst;          // (n,) f32 on the device
  ct_tensor *src;          // (n,) f32 on the host: pinned where there is a GPU
  ct_tensor *src_pageable; // (n,) f32 on the host, pageable
  float *work;             // (nw,) f32 on the device: the kernel's own buffer
  int64_t nw;
  int iters;
  ct_stream *compute, *copy;
  ct_event *start, *stop, *copied;
} overlap_ctx;

// Issues one schedule and returns, in *ms, the time from `start` to `stop`.
static int run_schedule(overlap_ctx *c, schedule sc, float *ms) {
  int rc = ct_event_record(c->start, c->compute);
  if (rc) return rc;
  switch (sc) {
  case COPY_ONLY:
    if (!(rc = ct_set_stream(c->compute))) rc = ct_copy_(c->dst, c->src, true);
    break;
  case KERNEL_ONLY:
    rc = burn(c->dev, c->work, c->nw, c->iters, c->compute);
    break;
  case SERIAL: // one stream: the kernel starts when the copy is done
    if (!(rc = ct_set_stream(c->compute))) rc = ct_copy_(c->dst, c->src, true);
    if (!rc) rc = burn(c->dev, c->work, c->nw, c->iters, c->compute);
    break;
  case OVERLAPPED:
  case OVERLAPPED_PAGEABLE: {
    ct_tensor *src = sc == OVERLAPPED ? c->src : c->src_pageable;
    rc = ct_stream_wait_event(c->copy, c->start); // the copy starts no earlier than `start`
    if (!rc) rc = ct_set_stream(c->copy);         // with torch.cuda.stream(copy):
    if (!rc) rc = ct_copy_(c->dst, src, true);    //   dst.copy_(src, non_blocking=True)
    if (!rc) rc = ct_event_record(c->copied, c->copy);
    if (!rc) rc = burn(c->dev, c->work, c->nw, c->iters, c->compute); // runs during the copy
    if (!rc) rc = ct_stream_wait_event(c->compute, c->copied);        // `stop` waits for both
    break;
  }
  }
  if (!rc) rc = ct_event_record(c->stop, c->compute);
  if (!rc) rc = ct_event_synchronize(c->stop);
  if (!rc) rc = ct_event_elapsed_time(c->start, c->stop, ms);
  return rc;
}

static double schedule_ms(const ct_cli *cli, overlap_ctx *c, schedule sc, int reps) {
  double v[MAX_REPS];
  for (int r = -1; r < reps; ++r) { // one warm-up
    float ms;
    MUST_OK(run_schedule(c, sc, &ms));
    if (r >= 0) v[r] = ms;
  }
  return ct_cli_median(v, reps);
}

// Returns the kernel's milliseconds per iteration (for the next section).
static double show_overlap(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("overlap");
  ct_device dev = cli->device, cpu = ct_device_cpu();
  bool gpu = dev.type == CT_CUDA;
  size_t bytes = (size_t)(cli->quick ? 16 : 64) << 20;
  int64_t n = (int64_t)(bytes / sizeof(float));
  overlap_ctx c = {.dev = dev, .nw = gpu ? 1 << 20 : 1 << 12};
  c.src_pageable = ct_full(CT_SHAPE(n), 1.0, CT_F32, cpu);
  MUST(c.src_pageable);
  c.src = gpu ? ct_pin_memory(c.src_pageable) : ct_retain(c.src_pageable);
  MUST(c.src);
  c.dst = ct_empty(CT_SHAPE(n), CT_F32, dev);
  MUST(c.dst);
  ct_tensor *work = ct_zeros(CT_SHAPE(c.nw), CT_F32, dev);
  MUST(work);
  c.work = ct_data_ptr(work);
  c.compute = ct_stream_create(dev, 0); // torch.cuda.Stream()
  c.copy = ct_stream_create(dev, 0);
  MUST(c.compute && c.copy);
  c.start = ct_event_create(dev, true);
  c.stop = ct_event_create(dev, true);
  c.copied = ct_event_create(dev, false);
  MUST(c.start && c.stop && c.copied);
  // The buffers were made on the default stream; the new streams do not wait
  // for it (they are non-blocking, like torch.cuda.Stream()), so wait here.
  MUST_OK(ct_stream_synchronize(ct_current_stream(dev)));
  int reps = cli->quick ? 3 : 7;

  // The copy alone, then the kernel calibrated to take about as long.
  double copy_ms = schedule_ms(cli, &c, COPY_ONLY, reps);
  double kernel_ms = 0;
  for (c.iters = 16;; c.iters *= 4) {
    kernel_ms = schedule_ms(cli, &c, KERNEL_ONLY, 1);
    if (kernel_ms >= 0.25 * copy_ms || c.iters >= (1 << 26)) break;
  }
  double scaled = c.iters * copy_ms / (kernel_ms > 0 ? kernel_ms : copy_ms);
  c.iters = scaled < 1 ? 1 : scaled > (1 << 28) ? (1 << 28) : (int)scaled;
  kernel_ms = schedule_ms(cli, &c, KERNEL_ONLY, reps);
  double serial_ms = schedule_ms(cli, &c, SERIAL, reps);
  double overlapped_ms = schedule_ms(cli, &c, OVERLAPPED, reps);
  double pageable_ms = gpu ? schedule_ms(cli, &c, OVERLAPPED_PAGEABLE, reps) : 0;
  MUST_OK(ct_set_stream(ct_default_stream(dev))); // back to the default stream

  char sz[32], dv[CT_DEVICE_STR_MAX], key[96];
  size_str((double)bytes, sz, sizeof sz);
  snprintf(key, sizeof key, "copy alone (%s, %s to %s)", sz, gpu ? "pinned" : "cpu", ct_device_str(dev, dv));
  row(key, "%.3f ms", copy_ms);
  snprintf(key, sizeof key, "kernel alone (fma_burn, %d iters)", c.iters);
  row(key, "%.3f ms", kernel_ms);
  row("serial (one stream)", "%.3f ms", serial_ms);
  row("overlapped (two streams)", "%.3f ms", overlapped_ms);
  row("ideal overlap (the longer one)", "%.3f ms", copy_ms > kernel_ms ? copy_ms : kernel_ms);
  double saving = serial_ms - overlapped_ms;
  row("saving", "%.3f ms (%.0f%% of serial)", saving, 100.0 * saving / serial_ms);
  if (gpu) row("two streams, pageable source", "%.3f ms", pageable_ms);

  ct_metrics_num(m, "overlap_bytes", (double)bytes);
  ct_metrics_num(m, "overlap_kernel_iters", c.iters);
  ct_metrics_num(m, "overlap_copy_ms", copy_ms);
  ct_metrics_num(m, "overlap_kernel_ms", kernel_ms);
  ct_metrics_num(m, "overlap_serial_ms", serial_ms);
  ct_metrics_num(m, "overlap_overlapped_ms", overlapped_ms);
  ct_metrics_num(m, "overlap_saving_ms", saving);
  ct_metrics_num(m, "overlap_saving_pct", 100.0 * saving / serial_ms);
  if (gpu) ct_metrics_num(m, "overlap_pageable_ms", pageable_ms);

  double ms_per_iter = kernel_ms / c.iters;
  ct_event_free(c.start), ct_event_free(c.stop), ct_event_free(c.copied);
  ct_stream_free(c.compute), ct_stream_free(c.copy);
  ct_free(work), ct_free(c.dst), ct_free(c.src), ct_free(c.src_pageable);
  MUST_OK(ct_pinned_empty_cache());
  return ms_per_iter;
}
/*md twin overlap*/
/*md output overlap*/

/*md
::: zh
## 陷阱：结果还没到，就去读它

`non_blocking=True` 的设备到主机拷贝，调用返回时数据多半还在路上。PyTorch 里 `y = x.to("cpu", non_blocking=True)` 之后立刻读 `y`，读到的可能是旧数据、是一半新一半旧，也可能碰巧已经完整，取决于时机。这是最难查的一类错误，因为它时有时无。

实验：目的地是一块锁页内存，先全部填上哨兵值 -1；源是设备上的 `0, 1, 2, …`。发起非阻塞拷贝后立刻数一数有多少个元素还不等于它应有的值（“not yet written”），然后 `ct_stream_synchronize` 等流上的工作做完，再数一次。做两遍：一遍只有拷贝；一遍在同一个流上先排一个约 20 ms（`--quick` 时 5 ms）的 `fma_burn`，拷贝排在它后面，这时立刻去读，几乎一定全是哨兵。同步之后两遍都应当是 0 个没写、全部正确。

规则很简单：非阻塞的设备到主机拷贝之后，先同步（`ct_stream_synchronize` 或在拷贝后记录的事件上 `ct_event_synchronize`，对应 `torch.cuda.synchronize()` 或 `event.synchronize()`），再读。主机到设备方向上也有一条对应的规则：拷贝完成之前，不要改写锁页的源缓冲区。

在 CPU 上，拷贝在调用返回前就完成了：没有拷贝引擎，也就没有“还在路上”，两次数出来都是 0。`non_blocking` 在 CPU 上不起作用。
:::
::: en
## The hazard: reading a result before it has arrived

When a device-to-host copy with `non_blocking=True` returns, the data is most likely still on its way. In PyTorch, reading `y` right after `y = x.to("cpu", non_blocking=True)` may show old data, half old and half new, or by luck all of it, depending on timing. It is the hardest kind of bug to find, because it comes and goes.

The experiment: the destination is pinned memory filled with the sentinel -1; the source is `0, 1, 2, ...` on the device. Right after the non-blocking copy is issued, the program counts the elements that do not yet hold their value ("not yet written"); then `ct_stream_synchronize` waits for the stream's work, and it counts again. Twice: once with the copy alone, and once with an `fma_burn` of about 20 ms (5 ms with `--quick`) queued on the same stream ahead of the copy, so that an immediate read is all but certain to see only sentinels. After synchronizing, both must show 0 unwritten and every value right.

The rule is simple: after a non-blocking device-to-host copy, synchronize (`ct_stream_synchronize`, or `ct_event_synchronize` on an event recorded after the copy; `torch.cuda.synchronize()` or `event.synchronize()` in PyTorch) before reading. The host-to-device direction has its own rule: do not overwrite the pinned source buffer until the copy has completed.

On the CPU the copy is done before the call returns: there is no copy engine, so nothing is ever on its way, and both counts are 0. `non_blocking` has no effect on the CPU.
:::
*/
// Elements of t ((n,) f32 on the host) that do not yet hold their index.
// Reads through a volatile pointer: a DMA engine may be writing meanwhile.
static int64_t count_unwritten(const ct_tensor *t) {
  const volatile float *p = ct_data_ptr(t);
  int64_t n = ct_numel(t), k = 0;
  for (int64_t i = 0; i < n; ++i) k += p[i] != (float)i;
  return k;
}

static void show_hazard(const ct_cli *cli, ct_metrics *m, double ms_per_iter) {
  ct_cli_section("hazard");
  ct_device dev = cli->device, cpu = ct_device_cpu();
  bool gpu = dev.type == CT_CUDA;
  int64_t n = cli->quick ? 1 << 20 : 1 << 24; // f32 holds every integer up to 2^24 exactly
  ct_tensor *src = ct_arange(0, (double)n, 1, CT_F32, dev); // 0, 1, ..., n-1 on the device
  MUST(src);
  ct_tensor *host = ct_full(CT_SHAPE(n), SENTINEL, CT_F32, cpu);
  MUST(host);
  ct_tensor *dst = gpu ? ct_pin_memory(host) : ct_retain(host); // pinned where there is a GPU
  MUST(dst);
  ct_tensor *work = ct_zeros(CT_SHAPE(gpu ? 1 << 20 : 1 << 12), CT_F32, dev);
  MUST(work);
  ct_stream *s = ct_current_stream(dev);
  MUST(s);
  double want_ms = cli->quick ? 5.0 : 20.0;
  double it = ms_per_iter > 0 ? want_ms / ms_per_iter : 1 << 16;
  int iters = it < 1 ? 1 : it > (1 << 28) ? (1 << 28) : (int)it;

  printf("src = arange(%lld) on %s; dst = full(%lld, -1)%s\n", (long long)n, gpu ? "the GPU" : "the CPU",
         (long long)n, gpu ? ", pinned" : "");
  int64_t early[2], after[2];
  for (int pass = 0; pass < 2; ++pass) {
    MUST_OK(ct_fill_(dst, SENTINEL));
    if (pass == 1) MUST_OK(burn(dev, (float *)ct_data_ptr(work), ct_numel(work), iters, s));
    MUST_OK(ct_copy_(dst, src, true)); // dst.copy_(src, non_blocking=True)
    early[pass] = count_unwritten(dst); // read before synchronizing: the bug
    MUST_OK(ct_stream_synchronize(s));
    after[pass] = count_unwritten(dst); // read after synchronizing: right
    printf("%s\n", pass == 0 ? "the copy alone:" : "the copy queued behind fma_burn:");
    row("  read at once: not yet written", "%lld of %lld", (long long)early[pass], (long long)n);
    row("  after synchronize: not written", "%lld of %lld", (long long)after[pass], (long long)n);
  }
  if (!gpu) printf("on the CPU the copy ran when it was issued: nothing was ever on its way\n");
  ct_metrics_num(m, "hazard_numel", (double)n);
  ct_metrics_num(m, "hazard_early_copy_only", (double)early[0]);
  ct_metrics_num(m, "hazard_early_behind_kernel", (double)early[1]);
  ct_metrics_num(m, "hazard_after_sync_copy_only", (double)after[0]);
  ct_metrics_num(m, "hazard_after_sync_behind_kernel", (double)after[1]);
  ct_metrics_num(m, "hazard_kernel_iters", iters);
  ct_free(work), ct_free(dst), ct_free(host), ct_free(src);
}
/*md twin hazard*/
/*md output hazard*/

/*md
::: zh
## 练习

1. 在有 GPU 的机器上运行 `./ch02 --max-mib 1024`，用 4 KiB 一行的耗时和 256 MiB 一行的带宽估算：搬 100 个 40 KiB 的张量和搬一个 4 MiB 的张量，各要多久？再写一个小程序实测，和估算比较。
2. 把 `move_once` 里 H2D pinned 一行的 `true` 改成 `false`（阻塞拷贝），重新运行。带宽变了吗？为什么对一次单独的拷贝来说 `non_blocking` 不影响带宽，却影响重叠？
3. `ensure_same_device` 总是搬到第一个张量所在的设备。改成一个版本：有任何张量在 GPU 上，就全部搬到那块 GPU 上。为什么这样通常更好？
4. 在 `show_overlap` 里把核函数的迭代次数改成校准值的一半和两倍，分别运行。重叠后的时间和“ideal overlap”一行各是多少？省下的时间什么时候最多？
5. 在 `show_hazard` 里去掉 `ct_stream_synchronize`，改用一个在拷贝之后记录的事件和 `ct_event_synchronize`。结果一样吗？只等这一个事件比等整个流好在哪里？
6. 在 CPU 上用 `--max-mib 1024` 运行，找到 `memcpy` 一列下降的几处，和 “caches” 一行的 L1、L2、L3 大小对照。
:::
::: en
## Exercises

1. On a machine with a GPU, run `./ch02 --max-mib 1024`. From the 4 KiB row's time and the 256 MiB row's bandwidth, estimate how long it takes to move 100 tensors of 40 KiB, and one tensor of 4 MiB. Then measure both with a small program and compare.
2. In `move_once`, change the `true` of the H2D pinned line to `false` (a blocking copy) and run again. Does the bandwidth change? Why does `non_blocking` not matter for the bandwidth of a lone copy, yet matter for overlap?
3. `ensure_same_device` always moves to the first tensor's device. Write a version that moves everything to the GPU when any tensor is on one. Why is that usually the better choice?
4. In `show_overlap`, set the kernel's iteration count to half and to twice the calibrated one and run each. What are the overlapped time and the "ideal overlap" line? When is the saving largest?
5. In `show_hazard`, replace `ct_stream_synchronize` with an event recorded after the copy and `ct_event_synchronize`. Is the result the same? What is gained by waiting for that one event rather than for the whole stream?
6. On the CPU, run with `--max-mib 1024`, find where the `memcpy` column drops, and compare those sizes with the L1, L2 and L3 sizes on the "caches" line.
:::
*/
