// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 3 章　显存管理：缓存分配器

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)；这里是 Byolio《用GPU加速PyTorch模型训练》和《PyTorch GPU 加速》）里关于显存的代码都很短：

```python
x = torch.randn(1000, 1000, device="cuda")
print(f"已分配内存: {torch.cuda.memory_allocated() / 1024**2:.2f} MB")
print(f"缓存内存: {torch.cuda.memory_reserved() / 1024**2:.2f} MB")
del x
torch.cuda.empty_cache()
```

可是要读懂打印出来的数字，就得知道 PyTorch 背后那个**缓存分配器**（caching allocator）是怎么工作的：为什么“已分配”是 3.81 MiB 而“缓存”是 20 MiB；为什么 `del x` 之后缓存一点没少；显存不够（OOM，out of memory）时该怎么办；为什么有人建议训练开始前先“预热”显存。

本章用 ct 的缓存分配器（`common/include/alloc.h`，实现在 `common/core/alloc.c`）把这些问题逐个跑一遍。它照搬了 PyTorch `CUDACachingAllocator` 的规则和统计量。ct 在 CPU 上也用同一个分配器，所以没有 GPU 的读者也能看到同样的数字、触发同样的 OOM。本章各节依次是：

1. 四个统计量随种子例子每一步的变化；
2. 分配器的规则：512 字节取整、小池与大池、段的切分、碎片；
3. 为什么要缓存：直接向系统要内存一次要花多少时间；
4. 显存不够：用“每进程显存上限”在任何机器上复现 OOM，捕获它，再用种子列出的五个办法逐一化解；
5. 显存预热。

```sh
ninja ch03_memory && ./ch03            # 有 GPU 用 GPU，否则用 CPU
./ch03 --device cpu --quick            # 小规模，几秒钟
```
:::
::: en
# Chapter 3. Memory management: the caching allocator

The seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here Byolio's “Accelerating PyTorch training with a GPU” and “PyTorch GPU acceleration”) have short memory code:

```python
x = torch.randn(1000, 1000, device="cuda")
print(f"allocated: {torch.cuda.memory_allocated() / 1024**2:.2f} MB")
print(f"cached: {torch.cuda.memory_reserved() / 1024**2:.2f} MB")
del x
torch.cuda.empty_cache()
```

Reading the numbers it prints takes knowing how PyTorch's **caching allocator** works: why "allocated" is 3.81 MiB while "cached" is 20 MiB; why `del x` leaves the cache as big as before; what to do when memory runs out (OOM, out of memory); and why some advise "warming up" memory before training.

This chapter runs each of these questions through ct's caching allocator (`common/include/alloc.h`, implemented in `common/core/alloc.c`), which follows the rules and keeps the statistics of PyTorch's `CUDACachingAllocator`. ct uses the same allocator on the CPU, so a reader without a GPU sees the same numbers and hits the same OOM. The sections, in order:

1. the four statistics after each step of the seeds' example;
2. the allocator's rules: 512-byte rounding, the small and large pools, splitting segments, fragmentation;
3. why cache at all: what asking the system for memory costs per call;
4. out of memory: a per-process memory cap that reproduces the OOM on any machine, the error caught, and the seeds' five remedies shown working;
5. memory warm-up.

```sh
ninja ch03_memory && ./ch03            # the GPU if there is one, else the CPU
./ch03 --device cpu --quick            # a small run, seconds
```
:::
*/

/*md hide*/
#define _GNU_SOURCE // clock_gettime, sysconf, mallopt under -std=c11

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#ifdef CT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#endif

#include "ct.h"

#define KIB ((size_t)1024)
#define MIB ((size_t)1024 * 1024)
#define GIB ((size_t)1024 * 1024 * 1024)
#define MAX_REPS 256
#define LOG_MAX 24
#define MLP_MAX 8

static double mib(size_t n) { return (double)n / (double)MIB; }

// "4 KiB", "16 MiB", "1 GiB" for the power-of-two sizes of the timing table.
static const char *size_label(size_t n, char *buf, size_t len) {
  if (n >= GIB && n % GIB == 0)
    snprintf(buf, len, "%zu GiB", n / GIB);
  else if (n >= MIB && n % MIB == 0)
    snprintf(buf, len, "%zu MiB", n / MIB);
  else if (n >= KIB && n % KIB == 0)
    snprintf(buf, len, "%zu KiB", n / KIB);
  else
    snprintf(buf, len, "%zu B", n);
  return buf;
}

// ---- the statistics table --------------------------------------------------------
// One row per step: the four torch.cuda-style numbers and the segment count,
// logged for --metrics as "<prefix>_steps" (labels joined by ';') and one
// series per column.
typedef struct stats_log {
  int n;
  char steps[LOG_MAX * 40];
  double allocated[LOG_MAX], reserved[LOG_MAX], max_allocated[LOG_MAX], max_reserved[LOG_MAX],
      segments[LOG_MAX];
} stats_log;

static void stats_header(void) {
  printf("%-27s %13s %13s %13s %13s %5s\n", "step", "allocated", "reserved", "max_allocated",
         "max_reserved", "segs");
}

static void stats_log_write(ct_metrics *m, const char *prefix, const stats_log *sl) {
  char key[64];
#define CH03_SERIES(name)                                   \
  snprintf(key, sizeof key, "%s_%s", prefix, #name);        \
  ct_metrics_series(m, key, sl->name, sl->n);
  snprintf(key, sizeof key, "%s_steps", prefix);
  ct_metrics_str(m, key, sl->steps);
  CH03_SERIES(allocated)
  CH03_SERIES(reserved)
  CH03_SERIES(max_allocated)
  CH03_SERIES(max_reserved)
  CH03_SERIES(segments)
#undef CH03_SERIES
}

// Everything the out-of-memory sections share.
typedef struct mlp {
  int layers;
  int64_t width;
  ct_tensor *w[MLP_MAX];    // (width, width) each
  ct_tensor *grad[MLP_MAX]; // PyTorch's p.grad: NULL until a backward made it
} mlp;

typedef struct oom_ctx {
  const ct_cli *cli;
  ct_metrics *m;
  ct_device d;
  mlp net;
  ct_tensor *X;     // (batch, width): the full batch of inputs, on the device
  int64_t batch;    // rows of X
  size_t act_bytes; // one activation of the full batch
  size_t cap;       // the bytes the memory fraction allows
  int64_t fitted;   // the batch that fit (halve_batch)
  double chunk_sum; // sum of the outputs over all rows, by chunks
  ct_tensor *kept;  // an output still referenced by mistake (free_and_empty_cache)
} oom_ctx;

static void show_statistics(const ct_cli *cli, ct_metrics *m);
static void show_splitting(const ct_cli *cli, ct_metrics *m);
static void show_summary(const ct_cli *cli);
static void show_raw_vs_cached(const ct_cli *cli, ct_metrics *m);
static void show_oom(oom_ctx *c);
static void show_halve_batch(oom_ctx *c);
static void show_chunks(oom_ctx *c);
static void show_no_activations(oom_ctx *c);
static void show_free_and_empty_cache(oom_ctx *c);
static void show_zero_grad(oom_ctx *c);
static void show_warmup(oom_ctx *c);
static void mlp_free(mlp *net);
/*md show*/

/*md
::: zh
## 程序的骨架

`main` 先解析参数、选定设备，然后依次运行各节。前三节各自独立；从 `oom` 开始，后面几节共用一个小网络和一批输入，放在 `oom_ctx` 里传递。

有一处和 C 库有关的设置：`mallopt(M_MMAP_THRESHOLD, 128 KiB)`。glibc 的 `malloc` 对 128 KiB 以上的请求直接向操作系统内核要一段新的映射（`mmap`），`free` 时还给操作系统（`munmap`）；但它默认会根据程序的行为把这个门槛动态调高（最高 32 MiB），让之后的大块改从自己的堆里分配、释放后也不还给操作系统——这其实就是 glibc 自带的一个小缓存。把门槛固定下来，“CPU 上直接向系统要内存”就总是真正找操作系统要，`raw_vs_cached` 和 `warmup` 两节量到的才是操作系统的开销，而不是 glibc 缓存的开销。ct 在 CPU 上的段（2 MiB 起）也因此总是来自 `mmap`。
:::
::: en
## The program's skeleton

`main` parses the flags, picks the device, and runs the sections in order. The first three stand alone; from `oom` on, the sections share a small network and a batch of inputs, passed along in `oom_ctx`.

One setting concerns the C library: `mallopt(M_MMAP_THRESHOLD, 128 KiB)`. glibc's `malloc` serves requests of 128 KiB and more with a fresh mapping from the kernel (`mmap`) and gives it back on `free` (`munmap`); but by default it raises that threshold as the program runs (up to 32 MiB), so that later big blocks come from its own heap and stay there after `free` — a small cache of glibc's own. Pinning the threshold makes "asking the system" on the CPU really ask the kernel, so the `raw_vs_cached` and `warmup` sections measure the operating system, not glibc's cache. ct's CPU segments (2 MiB and up) then always come from `mmap` as well.
:::
*/
int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch03",
                .summary = "Chapter 3: the caching allocator: statistics, cost, out of memory, warm-up."};
  ct_cli_parse(&cli, argc, argv, NULL, 0);
#ifdef __GLIBC__
  mallopt(M_MMAP_THRESHOLD, 128 * 1024); // fixed: no dynamic raising (see above)
#endif
  ct_cli_begin(&cli); // prints "device: ..."

  ct_metrics *m = cli.metrics; // device, seed and quick already recorded

  show_statistics(&cli, m);
  show_splitting(&cli, m);
  show_raw_vs_cached(&cli, m);

  oom_ctx c = {.cli = &cli, .m = m, .d = cli.device};
  show_oom(&c);
  show_halve_batch(&c);
  show_chunks(&c);
  show_no_activations(&c);
  show_free_and_empty_cache(&c);
  show_zero_grad(&c);
  show_warmup(&c);
  ct_free(c.X);
  ct_free(c.kept);
  mlp_free(&c.net);

  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  return 0;
}

/*md
::: zh
## 四个统计量

| PyTorch | ct | 含义 |
|---|---|---|
| `torch.cuda.memory_allocated()` | `ct_memory_allocated(d)` | 活着的张量占用的字节数（按 512 字节取整） |
| `torch.cuda.memory_reserved()` | `ct_memory_reserved(d)` | 分配器从驱动（CPU 上是 C 库）要来、还没还回去的字节数 |
| `torch.cuda.max_memory_allocated()` | `ct_max_memory_allocated(d)` | allocated 的峰值 |
| `torch.cuda.max_memory_reserved()` | `ct_max_memory_reserved(d)` | reserved 的峰值 |
| `torch.cuda.reset_peak_memory_stats()` | `ct_reset_peak_memory_stats(d)` | 把两个峰值重置为当前值 |
| `torch.cuda.empty_cache()` | `ct_empty_cache(d)` | 把没有活块的段还给驱动 |

下面的表格按种子的例子一步一步打印这四个数，最后一列是分配器手里的段（segment）数。要点：

- **x 是 3.81 MiB。** 1000×1000 个 float32 是 4,000,000 字节，除以 2^20 得 3.81。种子打印时写的是 “MB”，算的其实是 MiB（2^20 字节）。
- **allocated 是 4,000,256，不是 4,000,000。** 每个请求都向上取整到 512 字节的倍数：4,000,000 / 512 = 7812.5，取整为 7813 × 512 = 4,000,256。
- **reserved 是 20 MiB。** 分配器不会为每个张量单独向驱动要内存，而是一次要一整段：1 MiB 以下的请求从 2 MiB 的段里切（小池），1 MiB 到 10 MiB 的从 20 MiB 的段里切（大池），10 MiB 以上的按请求大小向上取整到 2 MiB 的倍数单独成段。
- **`del x` 之后 allocated 回到 0，reserved 不变。** 块回到了缓存里；紧接着再建一个同样大小的 x，段数不变——这次没有找驱动。
- **3×3 的 y 只有 36 字节**，计为 512 字节，它来自另一个 2 MiB 的小池段，所以 reserved 变成 22 MiB。小张量和大张量不共用段，免得小块把大段切得七零八落。
- **`empty_cache()` 之后 reserved 回到 0**，但两个峰值还记着刚才的最高点，直到 `reset_peak_memory_stats()`。
- **种子教程里的 `torch.cuda.reset_max_memory_reserved(0)` 并不存在**，调用会得到 `AttributeError`。它上面一行的 `reset_max_memory_allocated(0)` 存在，但已被弃用：现在它只是调用 `reset_peak_memory_stats()`，一次重置全部峰值（reserved 峰值的旧名字是 `reset_max_memory_cached`，同样已被弃用）。直接写 `reset_peak_memory_stats()` 即可。
- **种子的第二个例子**是 `randn(10000, 10000)`（`--quick` 时改用 2000×2000；本书这次运行是 {{metric big_n}}×{{metric big_n}}）：{{metric big_bytes}} 字节 = {{metric big_mib %.2f}} MiB，恰好是 512 的倍数；它超过 10 MiB，单独成段，段的大小向上取整到 2 MiB 的倍数：{{metric big_segment_mib %.0f}} MiB。这里用 `ct_empty`（只分配不填数）代替 `randn`，对分配器来说是同一个请求。

在任何时刻都有 reserved ≥ allocated：每个活着的块都在某个段里面，而 reserved 数的是所有段。两者之差就是缓存里空闲、可以立即交给下一个请求的字节。

这一节和下一节里写出的字节数都不是测量值，而是分配器规则（512 字节取整、段的大小）推算出的结果，在任何机器上、任何一次运行都一样（随运行规模变化的只有上面 big 的几个数，它们取自本次运行）。本章的测试（`chapter.ch03`）逐一核对正文里的这些数与程序的输出相等，所以它们不会和下面的表格对不上。
:::
::: en
## The four statistics

| PyTorch | ct | Meaning |
|---|---|---|
| `torch.cuda.memory_allocated()` | `ct_memory_allocated(d)` | bytes of live tensors (each rounded to 512) |
| `torch.cuda.memory_reserved()` | `ct_memory_reserved(d)` | bytes the allocator took from the driver (the C library on the CPU) and still holds |
| `torch.cuda.max_memory_allocated()` | `ct_max_memory_allocated(d)` | the peak of allocated |
| `torch.cuda.max_memory_reserved()` | `ct_max_memory_reserved(d)` | the peak of reserved |
| `torch.cuda.reset_peak_memory_stats()` | `ct_reset_peak_memory_stats(d)` | sets both peaks to the current values |
| `torch.cuda.empty_cache()` | `ct_empty_cache(d)` | gives back every segment with no live block |

The table below prints the four numbers after each step of the seeds' example; the last column counts the segments the allocator holds. What to look for:

- **x is 3.81 MiB.** 1000×1000 float32 numbers are 4,000,000 bytes; divided by 2^20 that is 3.81. The seed labels it "MB", but what it computes is MiB (2^20 bytes).
- **allocated is 4,000,256, not 4,000,000.** Every request is rounded up to a multiple of 512 bytes: 4,000,000 / 512 = 7812.5, rounded up to 7813 × 512 = 4,000,256.
- **reserved is 20 MiB.** The allocator does not ask the driver for each tensor; it asks for whole segments: requests up to 1 MiB are cut from 2 MiB segments (the small pool), requests from 1 MiB to 10 MiB from 20 MiB segments (the large pool), and anything larger gets a segment of its own, its size rounded up to a multiple of 2 MiB.
- **After `del x`, allocated drops to 0 and reserved stays.** The block went back to the cache; the next x of the same size leaves the segment count unchanged: the driver was not asked this time.
- **The 3×3 tensor y is 36 bytes**, counted as 512, and it comes from a separate 2 MiB small-pool segment, so reserved becomes 22 MiB. Small and large tensors do not share segments, so that small blocks do not chop the big segments into pieces.
- **After `empty_cache()`, reserved is back to 0**, but both peaks remember the high point until `reset_peak_memory_stats()`.
- **The seed tutorial's `torch.cuda.reset_max_memory_reserved(0)` does not exist**: calling it raises `AttributeError`. The line above it, `reset_max_memory_allocated(0)`, exists but is deprecated: it now only calls `reset_peak_memory_stats()`, which resets all the peaks at once (the reserved peak's old name was `reset_max_memory_cached`, deprecated the same way). Write `reset_peak_memory_stats()`.
- **The seed's second example** is `randn(10000, 10000)` (`--quick` uses 2000×2000; this book's run used {{metric big_n}}×{{metric big_n}}): {{metric big_bytes}} bytes = {{metric big_mib %.2f}} MiB, already a multiple of 512; being over 10 MiB it gets its own segment, rounded up to a multiple of 2 MiB: {{metric big_segment_mib %.0f}} MiB. It is made with `ct_empty` (allocate, no fill) instead of `randn`, which is the same request to the allocator.

At every moment reserved ≥ allocated: every live block lies inside some segment, and reserved counts all segments. The difference is cached memory that is free and can go to the next request at once.

The byte counts written in this section and the next are not measurements: they follow from the allocator's rules (512-byte rounding, the segment sizes) and are the same on every machine and in every run (only the few numbers of `big` above change with the run's size, and they come from this run). The chapter's test (`chapter.ch03`) checks each of them against the program's output, so the prose cannot drift from the tables below.
:::
*/
static void stats_row(stats_log *sl, ct_device d, const char *label) {
  ct_memory_stats s;
  ct_memory_stats_get(d, &s);
  size_t a = ct_memory_allocated(d), r = ct_memory_reserved(d);         // torch.cuda.memory_*
  size_t ma = ct_max_memory_allocated(d), mr = ct_max_memory_reserved(d); // torch.cuda.max_memory_*
  printf("%-27s %13zu %13zu %13zu %13zu %5zu\n", label, a, r, ma, mr, s.segments);
  if (sl->n >= LOG_MAX) return;
  size_t used = strlen(sl->steps);
  snprintf(sl->steps + used, sizeof sl->steps - used, "%s%s", sl->n ? ";" : "", label);
  sl->allocated[sl->n] = (double)a;
  sl->reserved[sl->n] = (double)r;
  sl->max_allocated[sl->n] = (double)ma;
  sl->max_reserved[sl->n] = (double)mr;
  sl->segments[sl->n] = (double)s.segments;
  sl->n++;
}

static void show_statistics(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("statistics");
  ct_device d = cli->device;
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
  ct_reset_peak_memory_stats(d);
  int64_t n_big = cli->quick ? 2000 : 10000;
  stats_log sl = {0};
  char label[64];

  stats_header();
  stats_row(&sl, d, "start");
  ct_tensor *x = ct_randn(CT_SHAPE(1000, 1000), CT_F32, d); // x = torch.randn(1000, 1000, device=device)
  if (!x) ct_cli_die(cli);
  size_t x_bytes = ct_nbytes(x); // x.element_size() * x.nelement()
  stats_row(&sl, d, "x = randn(1000, 1000)");
  size_t x_alloc = ct_memory_allocated(d), x_reserved = ct_memory_reserved(d);
  ct_free(x); // del x
  stats_row(&sl, d, "del x");
  x = ct_randn(CT_SHAPE(1000, 1000), CT_F32, d);
  if (!x) ct_cli_die(cli);
  stats_row(&sl, d, "x = randn(1000, 1000) again");
  ct_tensor *y = ct_randn(CT_SHAPE(3, 3), CT_F32, d);
  if (!y) ct_cli_die(cli);
  stats_row(&sl, d, "y = randn(3, 3)");
  ct_free(x);
  ct_free(y);
  stats_row(&sl, d, "del x, y");
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli); // torch.cuda.empty_cache()
  stats_row(&sl, d, "empty_cache()");
  ct_reset_peak_memory_stats(d); // torch.cuda.reset_peak_memory_stats()
  stats_row(&sl, d, "reset_peak_memory_stats()");
  ct_tensor *big = ct_empty(CT_SHAPE(n_big, n_big), CT_F32, d);
  if (!big) ct_cli_die(cli);
  size_t big_bytes = ct_nbytes(big);
  snprintf(label, sizeof label, "big = empty(%" PRId64 ", %" PRId64 ")", n_big, n_big);
  stats_row(&sl, d, label);
  size_t big_reserved = ct_memory_reserved(d);
  ct_free(big);
  stats_row(&sl, d, "del big");
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
  stats_row(&sl, d, "empty_cache()");

  printf("x: 1000 x 1000 x 4 B = %zu B = %.2f MiB; allocated counts %zu B (%zu x 512)\n", x_bytes,
         mib(x_bytes), x_alloc, x_alloc / 512);
  printf("x's segment: %.2f MiB reserved, %.2f MiB of it free for the next requests\n",
         mib(x_reserved), mib(x_reserved - x_alloc));
  printf("big: %" PRId64 " x %" PRId64 " x 4 B = %zu B = %.2f MiB; its own segment, rounded up to 2 MiB: %.2f MiB\n",
         n_big, n_big, big_bytes, mib(big_bytes), mib(big_reserved));

  stats_log_write(m, "statistics", &sl);
  ct_metrics_num(m, "x_request_bytes", (double)x_bytes);
  ct_metrics_num(m, "big_n", (double)n_big);
  ct_metrics_num(m, "big_bytes", (double)big_bytes);
  ct_metrics_num(m, "big_mib", mib(big_bytes));
  ct_metrics_num(m, "big_segment_mib", mib(big_reserved));
}
/*md output statistics*/

/*md
::: zh
## 切分与碎片

一个段被切成首尾相接的块。分配一个请求时，分配器在同一个池的空闲块里找**最合适**的一个（能装下请求的最小块），如果切掉请求之后剩下的部分还值得留着（小池里 ≥ 512 字节，大池里 > 1 MiB），就把剩余部分切成一个新的空闲块；否则整块交出去。释放一个块时，它立刻和左右相邻的空闲块合并。

下面连续建五个 1000×1000 的张量 t1…t5（用 `ct_empty`，这里只关心内存）。打印的地址差说明它们一个挨一个排在同一个 20 MiB 的段里：每个相差 4,000,256 字节。前四个各切掉一块，剩下的部分继续留在缓存里；到 t5 时段里只剩 4,970,496 字节，切掉 t5 后只余 970,240 字节，不到 1 MiB，不值得单独留着，于是 t5 拿走了整个尾巴。（ct 的 allocated 仍只计 t5 请求的 4,000,256 字节；PyTorch 在这里会把整个块都算进 allocated。）

然后释放 t1、t3、t5。缓存里有了约 12.37 MiB 的空闲内存，但它们是三个互不相邻的洞，中间隔着还活着的 t2 和 t4，最大的洞只有 4.74 MiB。这时请求 8,000,000 字节（2000×1000 的 z），哪个洞都装不下，分配器只好再向驱动要一个 20 MiB 的段。这就是**碎片**：空闲的总量够，连续的不够。`empty_cache` 帮不上忙，因为这个段里还有活块，不能还。PyTorch 用 `PYTORCH_CUDA_ALLOC_CONF` 里的 `max_split_size_mb`（不切分超过这个大小的块）和 `expandable_segments`（可扩展的段）来减轻碎片；在自己的代码里，让大小相同的张量先后复用同一块内存，是最直接的办法。
:::
::: en
## Splitting and fragmentation

A segment is cut into blocks that lie end to end. For a request, the allocator looks among the free blocks of the same pool for the **best fit** (the smallest block that holds the request). If what remains after cutting the request off is worth keeping (≥ 512 bytes in the small pool, > 1 MiB in the large pool), the remainder becomes a new free block; otherwise the whole block is handed out. A freed block merges at once with free neighbours on either side.

Below, five 1000×1000 tensors t1…t5 are made one after another (with `ct_empty`: only memory matters here). The printed address differences show that they lie back to back in one 20 MiB segment, 4,000,256 bytes apart. Each of the first four cuts a block off and leaves the rest in the cache; for t5 only 4,970,496 bytes remain, and cutting t5 off would leave 970,240 bytes, under 1 MiB and not worth keeping, so t5 takes the whole tail. (ct's allocated still counts only the 4,000,256 bytes t5 asked for; PyTorch counts the whole block here.)

Then t1, t3 and t5 are freed. The cache now holds about 12.37 MiB of free memory, but in three holes that do not touch, separated by the live t2 and t4, and the largest hole is 4.74 MiB. A request for 8,000,000 bytes (z, 2000×1000) fits in none of them, so the allocator asks the driver for another 20 MiB segment. This is **fragmentation**: enough free memory in total, not enough in one piece. `empty_cache` cannot help, because the segment still has live blocks and cannot be given back. PyTorch mitigates fragmentation with `max_split_size_mb` (never split blocks above that size) and `expandable_segments` in `PYTORCH_CUDA_ALLOC_CONF`; in your own code, letting tensors of the same size reuse the same memory in turn is the most direct cure.
:::
*/
/*md
::: zh
{{fig pools}} 画的是这一节结束时缓存的样子。请求先向上取整，按大小进小池（2 MiB 的段）或大池（20 MiB 的段），在池里找最合适的空闲块。大池的段 1 里，t2 和 t4 还活着，把空闲内存隔成三块不相连的洞；z 哪个洞都放不下，于是分配器向驱动要了段 2。图中的字节数都由确定的规则（512 字节取整、段的大小）算出，本章的测试把它们和运行打印的逐一核对。
:::
::: en
{{fig pools}} shows the cache as this section leaves it. A request is rounded up, goes to the small pool (2 MiB segments) or the large pool (20 MiB segments) by size, and takes the best-fitting free block of its pool. In the large pool's segment 1, the live t2 and t4 cut the free memory into three holes that do not touch; z fits in none, so the allocator asks the driver for segment 2. The figure's byte counts follow from the deterministic rules (512-byte rounding, the segment sizes), and the chapter's test compares each with what the run prints.
:::
*/
/*md figure pools: 缓存分配器的两个池、段和块：释放 t1、t3、t5 之后，z 只能要一个新段 | The caching allocator's two pools, segments and blocks: after t1, t3 and t5 are freed, z needs a new segment*/
/*md
::: zh
### 分配器的代码

这些规则在 `common/core/alloc.c` 里只占几十行。先是最合适的查找：在池的空闲链表里找属于同一个流、装得下请求的最小块，一样大时取地址低的（PyTorch 的空闲集合按流、大小、地址排序）。
:::
::: en
### The allocator's code

These rules take a few dozen lines of `common/core/alloc.c`. First the best-fit search: among the pool's free list, the smallest block of the same stream that holds the request, the lower address on a tie (PyTorch orders its free set by stream, size and address).
:::
*/
/*md source common/core/alloc.c best_fit*/
/*md
::: zh
`ct_block_alloc` 的核心：把请求向上取整（512 字节的倍数），按大小选小池或大池，先在缓存里找；缓存里没有，才向驱动要一个新段（`cudaMalloc`）。要不到时，先把缓存里整段空闲的段还给驱动再试一次，这就是 PyTorch 的 `release_cached_blocks`；还不行才报 OOM。
:::
::: en
The core of `ct_block_alloc`: round the request up (to a multiple of 512 bytes), pick the small or the large pool by size, and look in the cache first; only when the cache has nothing does it ask the driver for a new segment (`cudaMalloc`). If that fails it gives the cache's wholly free segments back to the driver and tries once more, PyTorch's `release_cached_blocks`; only then does it report an OOM.
:::
*/
/*md source common/core/alloc.c cache*/
/*md
::: zh
找到的块从空闲链表上摘下。如果剩余部分值得留着，就切出一个新的空闲块，接在这个块后面（同一个段里的块按地址连成双向链表，释放时靠它和邻居合并）。
:::
::: en
The block found comes off the free list. If the remainder is worth keeping, it is cut off as a new free block right after this one (a segment's blocks form a doubly linked list in address order, which is how a freed block finds its neighbours to merge with).
:::
*/
/*md source common/core/alloc.c split*/
static void show_splitting(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("splitting");
  ct_device d = cli->device;
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
  ct_reset_peak_memory_stats(d);
  stats_log sl = {0};
  char label[64];
  ct_tensor *t[5];

  stats_header();
  stats_row(&sl, d, "start");
  for (int i = 0; i < 5; ++i) {
    t[i] = ct_empty(CT_SHAPE(1000, 1000), CT_F32, d);
    if (!t[i]) ct_cli_die(cli);
    snprintf(label, sizeof label, "t%d = empty(1000, 1000)", i + 1);
    stats_row(&sl, d, label);
  }
  size_t seg = ct_memory_reserved(d); // one segment so far
  const char *base = ct_data_ptr(t[0]);
  size_t off[5];
  for (int i = 0; i < 5; ++i) off[i] = (size_t)((const char *)ct_data_ptr(t[i]) - base);
  ct_free(t[0]);
  ct_free(t[2]);
  ct_free(t[4]);
  t[0] = t[2] = t[4] = NULL;
  stats_row(&sl, d, "del t1, t3, t5");
  ct_tensor *z = ct_empty(CT_SHAPE(2000, 1000), CT_F32, d);
  if (!z) ct_cli_die(cli);
  stats_row(&sl, d, "z = empty(2000, 1000)");

  printf("addresses after t1: t2 +%zu, t3 +%zu, t4 +%zu, t5 +%zu (one segment, cut back to back)\n",
         off[1], off[2], off[3], off[4]);
  size_t block = off[1] - off[0], tail = seg - off[4];
  printf("t5: the tail was %zu - %zu = %zu B; cutting %zu B off would leave %zu B (< 1 MiB): t5 got it whole\n",
         seg, off[4], tail, block, tail - block);
  size_t holes[3] = {off[1] - off[0], off[3] - off[2], seg - off[4]};
  size_t largest = holes[0] > holes[1] ? holes[0] : holes[1];
  if (holes[2] > largest) largest = holes[2];
  printf("after del t1, t3, t5: holes of %zu, %zu and %zu B (%.2f MiB free), the largest %.2f MiB\n",
         holes[0], holes[1], holes[2], mib(holes[0] + holes[1] + holes[2]), mib(largest));
  const char *zp = ct_data_ptr(z);
  bool z_in_first = zp >= base && zp < base + seg;
  printf("z needs %zu B: no hole holds it, so a new segment: z is %s the first segment\n",
         ct_nbytes(z), z_in_first ? "inside" : "outside");
  double offsets[5];
  for (int i = 0; i < 5; ++i) offsets[i] = (double)off[i];
  ct_metrics_series(m, "splitting_offsets", offsets, 5);
  ct_metrics_num(m, "splitting_z_in_first_segment", z_in_first);
  stats_log_write(m, "splitting", &sl);

  show_summary(cli); // at the fragmented moment: t2, t4 and z alive

  ct_free(t[1]);
  ct_free(t[3]);
  ct_free(z);
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
}
/*md output splitting*/

/*md
::: zh
### 内存摘要

`ct_memory_summary(d)` 对应 `torch.cuda.memory_summary()`：一张表，列出 allocated、活块数、reserved 和段数的当前值、峰值，以及进程启动以来累计分配和释放的总量。下面是碎片出现时（t2、t4、z 还活着）打印的摘要：3 个活块，2 个段。
:::
::: en
### The memory summary

`ct_memory_summary(d)` mirrors `torch.cuda.memory_summary()`: a table of allocated bytes, live blocks, reserved bytes and segments, each with its current value, its peak, and the totals allocated and freed over the process's life. Below is the summary at the fragmented moment (t2, t4 and z alive): 3 live blocks, 2 segments.
:::
*/
static void show_summary(const ct_cli *cli) {
  ct_cli_section("summary");
  char *summary = ct_memory_summary(cli->device); // print(torch.cuda.memory_summary())
  if (!summary) ct_cli_die(cli);
  fputs(summary, stdout);
  free(summary);
}
/*md output summary*/

/*md
::: zh
## 为什么要缓存：直接找系统要内存有多贵

缓存分配器存在的理由只有一个：向系统要内存很慢。

- **GPU 上**，`cudaMalloc` 要进驱动、找一段连续的显存、把它映射进 GPU 的地址空间，一次要几十微秒到几毫秒，而且越大越慢；`cudaFree` 更糟，它会隐式地同步整个设备——等 GPU 上排队的所有核函数都跑完才返回。一个训练步里有几十上百个临时张量，如果每个都 `cudaMalloc`/`cudaFree` 一次，GPU 就会不停地停下来等 CPU。本节在有 GPU 时直接调用这两个函数计时（`CT_CUDA_CHECK` 检查每次调用）。
- **CPU 上**，大块的 `malloc` 来自 `mmap`：操作系统只是划出一段地址，并不马上给物理内存。第一次写某一页（4 KiB）时触发缺页中断，操作系统这时才分配一页物理内存并清零。`free` 用 `munmap` 把页还给操作系统，下一次 `malloc` 同样大小又要从头缺页一遍。所以表里分两列：只有 `malloc`+`free`（很便宜，操作系统只是记账），和加上“第一次写每一页”（真正的代价）。小于 128 KiB 的块来自 glibc 自己的堆，本身就被缓存着，所以两种做法差不多快。

缓存分配器交出的块，在 GPU 上不用再找驱动，在 CPU 上页面早已被写过、就在物理内存里。表中每格是多次调用的中位数（微秒/次），最后一列是加速比（CPU 上拿“加上首次写入”那一列来比）。为了量的是分配器本身，这两节计时时会暂时关掉测试用的“毒化”模式（`CT_POISON_ALLOC`，它会把每个新块填满 0xFF）。
:::
::: en
## Why cache: what asking the system for memory costs

A caching allocator exists for one reason: asking the system for memory is slow.

- **On the GPU**, `cudaMalloc` enters the driver, finds a contiguous range of device memory and maps it into the GPU's address space: tens of microseconds to milliseconds per call, more for bigger blocks. `cudaFree` is worse: it implicitly synchronizes the whole device, returning only after every kernel queued on the GPU has finished. A training step makes dozens or hundreds of temporary tensors; with a `cudaMalloc`/`cudaFree` for each, the GPU would keep stopping to wait for the CPU. With a GPU, this section calls the two functions directly and times them (every call checked by `CT_CUDA_CHECK`).
- **On the CPU**, a big `malloc` comes from `mmap`: the kernel only sets aside a range of addresses and gives no physical memory yet. The first write to each page (4 KiB) raises a page fault, and only then does the kernel allocate a physical page and zero it. `free` hands the pages back with `munmap`, and the next `malloc` of the same size faults them all in again. Hence two columns: `malloc`+`free` alone (cheap: the kernel only does bookkeeping), and with the first write to every page (the real cost). Blocks under 128 KiB come from glibc's own heap, which is already a cache, so there the two ways are about equally fast.

A block from the caching allocator needs no driver call on the GPU, and on the CPU its pages were written before and are already in physical memory. Each cell is the median over many calls, in microseconds per call; the last column is the speedup (on the CPU, against the column with the first touch). So that the allocator itself is measured, this section and `warmup` turn off the tests' poison mode (`CT_POISON_ALLOC`, which fills every new block with 0xFF bytes) while they time.
:::
*/
static void *volatile sink; // keeps the compiler from dropping a malloc/free pair

static void touch_pages(void *p, size_t n) {
  volatile char *c = p;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (size_t i = 0; i < n; i += page) c[i] = 1; // one write per page: each faults it in
}

// malloc(n) [+ a write to every page] + free, median microseconds per call.
static double time_malloc_us(size_t n, int reps, bool touch) {
  double t[MAX_REPS];
  for (int i = 0; i < reps; ++i) {
    double t0 = ct_cli_seconds();
    void *p = malloc(n);
    if (!p) return -1.0;
    if (touch) touch_pages(p, n);
    sink = p;
    free(p);
    t[i] = (ct_cli_seconds() - t0) * 1e6;
  }
  return ct_cli_median(t, reps);
}

#ifdef CT_HAVE_CUDA
// cudaMalloc(n) + cudaFree, median microseconds per call, into *us.
static int time_cuda_malloc_us(int device, size_t n, int reps, double *us) {
  double t[MAX_REPS];
  CT_CUDA_CHECK(cudaSetDevice(device));
  for (int i = 0; i < reps; ++i) {
    void *p = NULL;
    double t0 = ct_cli_seconds();
    CT_CUDA_CHECK(cudaMalloc(&p, n));
    CT_CUDA_CHECK(cudaFree(p)); // synchronizes the device
    t[i] = (ct_cli_seconds() - t0) * 1e6;
  }
  *us = ct_cli_median(t, reps);
  return CT_OK;
}
#endif

// ct_block_alloc(n) [+ a write to every page, CPU] + ct_block_free, median
// microseconds per call, into *us. The first, untimed call fills the cache.
static int time_cached_us(ct_device d, size_t n, int reps, bool touch, double *us) {
  double t[MAX_REPS];
  for (int i = -1; i < reps; ++i) {
    double t0 = ct_cli_seconds();
    ct_block *b = ct_block_alloc(d, n, NULL, NULL);
    if (!b) return ct_last_status();
    if (touch) touch_pages(ct_block_ptr(b), n);
    ct_block_free(b);
    if (i >= 0) t[i] = (ct_cli_seconds() - t0) * 1e6;
  }
  *us = ct_cli_median(t, reps);
  return CT_OK;
}

static void show_raw_vs_cached(const ct_cli *cli, ct_metrics *m) {
  ct_cli_section("raw_vs_cached");
  ct_device d = cli->device;
  bool gpu = d.type == CT_CUDA;
  bool poison = ct_alloc_poison();
  ct_alloc_set_poison(false); // time the allocator, not the poison fill
  static const size_t quick_sizes[] = {4 * KIB, 1 * MIB, 16 * MIB};
  static const size_t cpu_sizes[] = {4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 64 * MIB, 256 * MIB};
  static const size_t gpu_sizes[] = {4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1 * GIB};
  const size_t *sizes = cli->quick ? quick_sizes : gpu ? gpu_sizes : cpu_sizes;
  int n = cli->quick ? 3 : gpu ? 7 : 6;
  double bytes[8], raw[8], raw_touch[8], cached[8], speedup[8];

  if (gpu)
    printf("raw = cudaMalloc + cudaFree; cached = ct_block_alloc + ct_block_free\n");
  else
    printf("raw = malloc + free (blocks >= 128 KiB from mmap); touch = one write per %ld-byte page;\n"
           "cached = ct_block_alloc + touch + ct_block_free\n", sysconf(_SC_PAGESIZE));
  printf("%10s %14s %14s %14s %10s\n", "size", "raw us", gpu ? "-" : "raw+touch us", "cached us",
         "speedup");
  for (int i = 0; i < n; ++i) {
    size_t sz = sizes[i];
    int reps = sz <= 64 * KIB ? 200 : sz <= MIB ? 50 : sz <= 16 * MIB ? 10 : 5;
    if (cli->quick) reps = reps / 4 > 3 ? reps / 4 : 3;
    bytes[i] = (double)sz;
    raw_touch[i] = 0;
    if (gpu) {
#ifdef CT_HAVE_CUDA
      if (time_cuda_malloc_us(d.index, sz, reps, &raw[i]) != CT_OK) ct_cli_die(cli);
#endif
    } else {
      raw[i] = time_malloc_us(sz, reps, false);
      raw_touch[i] = time_malloc_us(sz, reps, true);
      if (raw[i] < 0 || raw_touch[i] < 0) {
        ct_fail(CT_ERR_OOM, "malloc(%zu) failed", sz);
        ct_cli_die(cli);
      }
    }
    if (time_cached_us(d, sz, reps, !gpu, &cached[i]) != CT_OK) ct_cli_die(cli);
    if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli); // next size starts from an empty cache
    speedup[i] = (gpu ? raw[i] : raw_touch[i]) / (cached[i] > 0 ? cached[i] : 1e-3);
    char label[32], rt[32];
    if (gpu)
      snprintf(rt, sizeof rt, "-");
    else
      snprintf(rt, sizeof rt, "%.2f", raw_touch[i]);
    printf("%10s %14.2f %14s %14.2f %9.1fx\n", size_label(sz, label, sizeof label), raw[i], rt,
           cached[i], speedup[i]);
  }
  ct_alloc_set_poison(poison);
  ct_metrics_str(m, "raw_kind", gpu ? "cudaMalloc+cudaFree" : "malloc+free");
  ct_metrics_series(m, "raw_sizes_bytes", bytes, n);
  ct_metrics_series(m, "raw_us", raw, n);
  if (!gpu) ct_metrics_series(m, "raw_touch_us", raw_touch, n);
  ct_metrics_series(m, "cached_us", cached, n);
  ct_metrics_series(m, "cached_speedup", speedup, n);
}
/*md output raw_vs_cached*/

/*md
::: zh
## 显存不够：在任何机器上复现 OOM

OOM 很难演示：80 GB 的 H100 要塞满很久，CPU 上的内存又是另一个数。PyTorch 提供了 `torch.cuda.set_per_process_memory_fraction(f)`：本进程最多只能占用设备总内存的 `f` 倍。ct 的 `ct_set_per_process_memory_fraction(f, d)` 做同样的事，而且在 CPU 上也有效（总量按物理内存计）。本章先用 `ct_device_memory_info` 读出总量，再反算出一个比例，让上限恰好落在我们想要的位置——所以在任何机器上，OOM 都发生在同一个地方。

模型是一个 4 层的小网络，每层是 `relu(h @ W)`，`W` 是 32×32。输入是一整批 `X`（`--quick` 时 163,840 行，否则 1,048,576 行），每个激活值（activation，一层的输出）和 `X` 一样大：`--quick` 时 20 MiB，否则 128 MiB。训练时前向传播要把每一层的激活都留着，给反向传播用，所以一整批要同时放下 `X` 和 4 个激活，共 5 份（不带 `--quick` 时 4 个激活正好 512 MiB）。上限定为 3.5 份再加上权重所在的 2 MiB 段和 1 MiB 余量：放得下 `X` 和两个激活，放不下第三个。

分配失败时，分配器照 PyTorch 的做法先把缓存里整段空闲的内存还掉，再试一次；还不行，才报错。报错信息写明想要多少、设备总量多少、还空着多少、上限允许多少、活着的张量占了多少、缓存里预留着却没分配出去的有多少，让人一眼看出是“活着的张量太多”还是“缓存太多”。PyTorch 2.x 的报错是这样的（数字只是示意）：`CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 12.00 MiB is free. ... Of the allocated memory 78.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. ...`。旧版 PyTorch 的 `(GPU 0; 79.11 GiB total capacity; ...)` 括号写法已经不用了。ct 的报错按同样的顺序给出这些事实，只是把 “PyTorch” 换成 “ct”；最后那句提示不一样，因为 ct 没有可扩展段（expandable segments）：报错前它已经把整段空闲的内存还掉了，剩下“预留却未分配”的部分都在被活着的张量切开的段里，办法是释放那些张量，或者先分配最大的张量。C 里没有异常：`ct_mm` 返回 `NULL`，`ct_last_status()` 是 `CT_ERR_OOM`，`ct_last_error()` 是那条信息——这相当于 `except torch.cuda.OutOfMemoryError as e: print(e)`。
:::
::: en
## Out of memory, reproducible anywhere

An OOM is hard to demonstrate: filling an 80 GB H100 takes a while, and the CPU's memory is another number again. PyTorch offers `torch.cuda.set_per_process_memory_fraction(f)`: this process may take at most `f` times the device's total memory. ct's `ct_set_per_process_memory_fraction(f, d)` does the same, on the CPU too (where the total is the physical RAM). The chapter reads the total with `ct_device_memory_info` and works out the fraction that puts the cap exactly where we want it, so on every machine the OOM happens at the same place.

The model is a small 4-layer network; each layer is `relu(h @ W)` with `W` of 32×32. The input is one batch `X` (163,840 rows with `--quick`, 1,048,576 otherwise), and every activation (a layer's output) is as big as `X`: 20 MiB with `--quick`, 128 MiB otherwise. Training keeps every layer's activation for the backward pass, so a whole batch needs `X` and 4 activations at once, 5 copies (without `--quick`, the 4 activations are exactly 512 MiB). The cap is 3.5 copies plus the weights' 2 MiB segment and 1 MiB of slack: room for `X` and two activations, not for a third.

When an allocation fails, the allocator does what PyTorch does: it gives back the cache's wholly free segments and tries once more; only then does it fail. The message says how much was asked for, the device's total, how much of it is free, what the cap allows, how much live tensors hold and how much the cache reserves without handing out, so one can tell at a glance "too many live tensors" from "too much cache". PyTorch 2.x words it like this (the numbers are only an illustration): `CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 12.00 MiB is free. ... Of the allocated memory 78.50 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. ...`. Older PyTorch's bracketed `(GPU 0; 79.11 GiB total capacity; ...)` is gone. ct's message gives these facts in the same order, with "ct" for "PyTorch"; only the closing hint differs, because ct has no expandable segments: before failing it has already released its wholly free segments, so what is reserved but unallocated sits in segments that live tensors split, and the remedy is to free those tensors or allocate the largest tensors first. C has no exceptions: `ct_mm` returns `NULL`, `ct_last_status()` is `CT_ERR_OOM`, and `ct_last_error()` is the message — the counterpart of `except torch.cuda.OutOfMemoryError as e: print(e)`.
:::
*/
static int mlp_init(mlp *net, int layers, int64_t width, ct_device d) {
  memset(net, 0, sizeof *net);
  net->layers = layers;
  net->width = width;
  for (int l = 0; l < layers; ++l) {
    net->w[l] = ct_randn(CT_SHAPE(width, width), CT_F32, d);
    if (!net->w[l]) return ct_last_status();
    // Scaled by 1/sqrt(width), so the activations stay of order 1.
    int rc = ct_binary_scalar_out(CT_OP_MUL, net->w[l], net->w[l], 1.0 / sqrt((double)width));
    if (rc) return rc;
  }
  return CT_OK;
}

static void mlp_free(mlp *net) {
  for (int l = 0; l < net->layers; ++l) {
    ct_free(net->w[l]);
    ct_free(net->grad[l]);
    net->w[l] = net->grad[l] = NULL;
  }
}

static void free_acts(ct_tensor **acts, int n) {
  for (int i = 0; i < n; ++i) {
    ct_free(acts[i]);
    acts[i] = NULL;
  }
}

// The training forward: every activation is kept for the backward pass.
// Enters with x (rows, width). Leaves CT_OK with acts[0] = x (a new
// reference) and acts[l+1] = relu(acts[l] @ w[l]), or an error with the
// activations made so far in acts and NULL after them; either way the caller
// frees acts[0..layers] with free_acts.
static int forward_keep(const mlp *net, ct_tensor *x, ct_tensor **acts) {
  for (int l = 0; l <= net->layers; ++l) acts[l] = NULL;
  acts[0] = ct_retain(x);
  for (int l = 0; l < net->layers; ++l) {
    ct_tensor *z = ct_mm(acts[l], net->w[l]); // (rows, width)
    if (!z) return ct_last_status();
    acts[l + 1] = z;
    int rc = ct_unary_out(CT_OP_RELU, z, z); // in place, like nn.ReLU(inplace=True)
    if (rc) return rc;
  }
  return CT_OK;
}

// Number of activations forward_keep made (acts[1..] not NULL).
static int acts_made(const mlp *net, ct_tensor **acts) {
  int n = 0;
  while (n < net->layers && acts[n + 1]) n++;
  return n;
}

static void print_oom_state(ct_device d) {
  ct_memory_stats s;
  ct_memory_stats_get(d, &s);
  printf("  allocated %.2f MiB, reserved %.2f MiB, OOMs so far %" PRIu64
         ", cache flushes so far %" PRIu64 "\n",
         mib(s.allocated_bytes), mib(s.reserved_bytes), s.num_ooms, s.num_cache_flushes);
}

static void show_oom(oom_ctx *c) {
  ct_cli_section("oom");
  const ct_cli *cli = c->cli;
  ct_device d = c->d;
  const int layers = 4;
  const int64_t width = 32;
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
  c->batch = cli->quick ? 163840 : 1048576;
  c->act_bytes = (size_t)c->batch * (size_t)width * sizeof(float);
  if (mlp_init(&c->net, layers, width, d) != CT_OK) ct_cli_die(cli);

  size_t free_b = 0, total_b = 0;
  if (ct_device_memory_info(d, &free_b, &total_b) != CT_OK) ct_cli_die(cli);
  size_t weights_seg = ct_memory_reserved(d); // the small-pool segment holding the weights
  c->cap = weights_seg + 3 * c->act_bytes + c->act_bytes / 2 + MIB;
  double fraction = (double)c->cap / (double)total_b;
  if (!(fraction <= 1.0)) {
    ct_fail(CT_ERR_OOM, "ch03: this device has %zu bytes, less than the %zu the demonstration needs",
            total_b, c->cap);
    ct_cli_die(cli);
  }
  // torch.cuda.set_per_process_memory_fraction(fraction, device)
  if (ct_set_per_process_memory_fraction(fraction, d) != CT_OK) ct_cli_die(cli);

  printf("model: %d layers relu(h @ W), W (%" PRId64 ", %" PRId64 "); batch %" PRId64
         ": each activation (%" PRId64 ", %" PRId64 ") float32 = %.2f MiB\n",
         layers, width, width, c->batch, c->batch, width, mib(c->act_bytes));
  printf("training keeps X and %d activations: %.2f MiB (%.2f MiB of activations)\n", layers,
         mib((size_t)(layers + 1) * c->act_bytes), mib((size_t)layers * c->act_bytes));
  printf("cap: %.2f MiB = fraction %.6f of %.2f GiB (%s memory)\n", mib(c->cap), fraction,
         (double)total_b / (double)GIB, d.type == CT_CPU ? "physical" : "device");

  c->X = ct_rand(CT_SHAPE(c->batch, width), CT_F32, d); // the batch, already on the device
  if (!c->X) ct_cli_die(cli);
  ct_tensor *acts[MLP_MAX + 1];
  int rc = forward_keep(&c->net, c->X, acts);
  int made = acts_made(&c->net, acts);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", rc ? ct_last_error() : "");
  if (rc != CT_OK && rc != CT_ERR_OOM) ct_cli_die(cli);
  if (rc == CT_OK) {
    printf("training forward at batch %" PRId64 ": no out-of-memory error (unexpected)\n", c->batch);
  } else {
    printf("training forward at batch %" PRId64 ": CT_ERR_OOM at layer %d, caught:\n  %s\n",
           c->batch, made + 1, msg);
    print_oom_state(d);
  }
  free_acts(acts, layers + 1);

  ct_metrics_num(c->m, "oom_layers", layers);
  ct_metrics_num(c->m, "oom_width", (double)width);
  ct_metrics_num(c->m, "oom_batch", (double)c->batch);
  ct_metrics_num(c->m, "oom_act_bytes", (double)c->act_bytes);
  ct_metrics_num(c->m, "oom_total_bytes", (double)total_b);
  ct_metrics_num(c->m, "oom_cap_bytes", (double)c->cap);
  ct_metrics_num(c->m, "oom_fraction", fraction);
  ct_metrics_num(c->m, "oom_raised", rc == CT_ERR_OOM);
  ct_metrics_num(c->m, "oom_failed_layer", rc == CT_ERR_OOM ? made + 1 : 0);
  ct_metrics_str(c->m, "oom_message", msg);
}
/*md twin oom*/
/*md output oom*/

/*md
::: zh
## 办法一：把 batch 减半

最常见的办法：捕获 OOM，释放这次失败留下的张量，`empty_cache()`，把 batch 减半再试，直到放得下。PyTorch 里这样写：

```python
while True:
    try:
        train_step(x[:batch]); break
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache(); batch //= 2
```

下面的 `fit_batch` 是本章的练习区。每次尝试由 `try_batch` 完成：它先重置峰值，在 `X` 的前 `batch` 行上跑训练前向，释放激活，打印结果和峰值。减半一次之后，`X` 加上 4 个半份激活共 3 份，放得下。
:::
::: en
## Remedy 1: halve the batch

The most common remedy: catch the OOM, free what the failed attempt left, `empty_cache()`, halve the batch and try again, until it fits. In PyTorch:

```python
while True:
    try:
        train_step(x[:batch]); break
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache(); batch //= 2
```

`fit_batch` below is this chapter's lab region. Each attempt is made by `try_batch`: it resets the peak, runs the training forward on the first `batch` rows of `X`, frees the activations, and prints the outcome and the peak. After one halving, `X` plus 4 half-size activations make 3 copies, which fit.
:::
*/
// One training forward on the first `batch` rows of X, activations freed
// afterwards. Returns CT_OK, CT_ERR_OOM (message in ct_last_error()), or
// another error; prints the outcome and the peak.
static int try_batch(oom_ctx *c, int64_t batch) {
  ct_reset_peak_memory_stats(c->d);
  ct_tensor *xb = ct_narrow(c->X, 0, 0, batch); // a view: no new memory
  if (!xb) return ct_last_status();
  ct_tensor *acts[MLP_MAX + 1];
  int rc = forward_keep(&c->net, xb, acts);
  int made = acts_made(&c->net, acts);
  ct_free(xb);
  free_acts(acts, c->net.layers + 1);
  if (rc == CT_OK)
    printf("batch %7" PRId64 ": ok, peak allocated %.2f MiB\n", batch,
           mib(ct_max_memory_allocated(c->d)));
  else if (rc == CT_ERR_OOM)
    printf("batch %7" PRId64 ": out of memory at layer %d\n", batch, made + 1);
  return rc;
}

// Leaves with the largest batch (start, start/2, start/4, ...) whose training
// forward fits, or 0 when none does or another error happened.
static int64_t fit_batch(oom_ctx *c, int64_t start, double *tried, int *n_tried) {
  int64_t batch = start;
  *n_tried = 0;
  /* LAB BEGIN: call try_batch, halving batch after each CT_ERR_OOM (ct_empty_cache first); log tries in tried[]; return the batch that fits */
  while (batch >= 1 && *n_tried < 64) {
    tried[(*n_tried)++] = (double)batch;
    int rc = try_batch(c, batch);
    if (rc == CT_OK) return batch;
    if (rc != CT_ERR_OOM) return 0;
    // The failed attempt's activations are freed (try_batch); give the cache back too.
    if (ct_empty_cache(c->d) != CT_OK) return 0;
    batch /= 2;
  }
  /* LAB END */
  return 0;
}
/*md twin halve_batch*/

static void show_halve_batch(oom_ctx *c) {
  ct_cli_section("halve_batch");
  double tried[64];
  int n_tried = 0;
  if (ct_empty_cache(c->d) != CT_OK) ct_cli_die(c->cli);
  c->fitted = fit_batch(c, c->batch, tried, &n_tried);
  if (c->fitted == 0) {
    char last[512];
    snprintf(last, sizeof last, "%s", ct_last_error()); // ct_fail reuses the message buffer
    ct_fail(CT_ERR_OOM, "fit_batch: no batch size fits under the cap (last error: %s)", last);
    ct_cli_die(c->cli);
  }
  size_t peak = ct_max_memory_allocated(c->d);
  printf("fitted batch %" PRId64 " (of %" PRId64 "), peak allocated %.2f MiB under the %.2f MiB cap\n",
         c->fitted, c->batch, mib(peak), mib(c->cap));
  ct_metrics_series(c->m, "halve_tried", tried, n_tried);
  ct_metrics_num(c->m, "halve_fitted", (double)c->fitted);
  ct_metrics_num(c->m, "halve_peak_allocated", (double)peak);
}
/*md output halve_batch*/

/*md
::: zh
## 办法二：分块处理

减半 batch 改变了训练本身（每步看到的样本少了）。另一个办法是 batch 不变，把它切成几块依次处理，每块的激活用完就释放，再处理下一块；训练时把各块的梯度累加起来，效果和一次处理整批相同（梯度累积）。种子里的写法是一个循环：`for i in range(0, len(data), batch_size):` 里取 `batch = data[i:i+batch_size]`，再算 `output = model(batch)`。这里每块取上一节找到的大小，用 `ct_narrow` 取 `X` 的一段行（视图，不占新内存）。各块最后一层输出之和加起来，应当等于一次处理整批的结果——下面“不留激活的推理”一节会一次算出整批，两者对照。
:::
::: en
## Remedy 2: process in chunks

Halving the batch changes the training itself (each step sees fewer samples). Another remedy keeps the batch and cuts it into chunks processed one after another, each chunk's activations freed before the next; in training the chunks' gradients are summed, which gives the same update as the whole batch at once (gradient accumulation). The seed writes it as a loop: `for i in range(0, len(data), batch_size):` takes `batch = data[i:i+batch_size]`, then computes `output = model(batch)`. Here each chunk has the size the previous section found, taken as rows of `X` with `ct_narrow` (a view, no new memory). The sums of the chunks' last outputs must add up to the whole batch's; the section on inference without activations below computes the whole batch at once, and the two are compared.
:::
*/
static void show_chunks(oom_ctx *c) {
  ct_cli_section("chunks");
  const ct_cli *cli = c->cli;
  if (ct_empty_cache(c->d) != CT_OK) ct_cli_die(cli);
  ct_reset_peak_memory_stats(c->d);
  int64_t chunk = c->fitted, n = (c->batch + chunk - 1) / chunk;
  int L = c->net.layers;
  c->chunk_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t start = i * chunk, rows = c->batch - start < chunk ? c->batch - start : chunk;
    ct_tensor *xb = ct_narrow(c->X, 0, start, rows);
    if (!xb) ct_cli_die(cli);
    ct_tensor *acts[MLP_MAX + 1];
    int rc = forward_keep(&c->net, xb, acts); // (a backward of this chunk would run here)
    ct_free(xb);
    if (rc) ct_cli_die(cli);
    free_acts(acts, L); // all but the last output
    ct_tensor *s = ct_sum(acts[L]);
    double v = 0;
    if (!s || ct_item(s, &v) != CT_OK) ct_cli_die(cli);
    ct_free(s);
    free_acts(acts + L, 1);
    c->chunk_sum += v;
    printf("chunk %" PRId64 ": rows [%" PRId64 ", %" PRId64 "), output sum %.6g\n", i, start,
           start + rows, v);
  }
  size_t peak = ct_max_memory_allocated(c->d);
  printf("%" PRId64 " rows in %" PRId64 " chunks of %" PRId64 ": output sum %.6g, peak allocated %.2f MiB\n",
         c->batch, n, chunk, c->chunk_sum, mib(peak));
  ct_metrics_num(c->m, "chunks_n", (double)n);
  ct_metrics_num(c->m, "chunks_rows", (double)chunk);
  ct_metrics_num(c->m, "chunks_peak_allocated", (double)peak);
  ct_metrics_num(c->m, "chunks_output_sum", c->chunk_sum);
}
/*md output chunks*/

/*md
::: zh
## 办法三：推理时不留激活

只做推理时不需要反向传播，激活用完就可以扔：算出下一层，上一层的激活立刻释放。PyTorch 用 `with torch.no_grad():` 做到这一点——autograd 不再为反向保存张量，Python 一丢掉引用，块就回到缓存。于是任何时刻只有输入和两层激活活着（正在读的和正在写的），和层数无关；训练时则要同时留着所有层。

下面在同一个 batch 上分别跑两种前向，用 `max_memory_allocated` 量峰值：保留全部激活时，峰值是 `X` 加 4 个激活；不保留时，是 `X` 加 2 个。最后用不保留的方式一次跑完整批：训练跑不下的整批，推理跑得下，输出之和与分块的结果一致。这个整批输出我们故意留着不释放，下一节要用它。
:::
::: en
## Remedy 3: inference without keeping activations

Inference needs no backward pass, so an activation can go as soon as it has been used: once the next layer's output exists, the previous one is freed. PyTorch does this under `with torch.no_grad():` — autograd saves nothing for a backward, and the block returns to the cache as soon as Python drops the reference. At any moment only the input and two activations are alive (the one being read and the one being written), however many layers there are; training keeps all of them.

Below, both forwards run on the same batch and `max_memory_allocated` measures their peaks: keeping every activation, the peak is `X` plus 4 activations; keeping none, `X` plus 2. Then the whole batch runs at once without keeping activations: the batch that training could not fit fits for inference, and its output sum matches the chunks'. That whole-batch output is deliberately kept alive: the next section needs it.
:::
*/
// The inference forward: each activation is freed once the next exists.
// Leaves CT_OK and *out = the last activation (the caller frees it), or an error.
static int forward_nokeep(const mlp *net, ct_tensor *x, ct_tensor **out) {
  *out = NULL;
  ct_tensor *h = ct_retain(x);
  /* LAB BEGIN: for each layer: z = h @ w[l], free h as soon as z exists, ReLU z in place, h = z (return the status on a failure) */
  for (int l = 0; l < net->layers; ++l) {
    ct_tensor *z = ct_mm(h, net->w[l]);
    ct_free(h); // h is no longer needed once z exists
    if (!z) return ct_last_status();
    int rc = ct_unary_out(CT_OP_RELU, z, z);
    if (rc) {
      ct_free(z);
      return rc;
    }
    h = z;
  }
  /* LAB END */
  *out = h;
  return CT_OK;
}
/*md twin no_grad*/

static void show_no_activations(oom_ctx *c) {
  ct_cli_section("no_activations");
  const ct_cli *cli = c->cli;
  ct_device d = c->d;
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
  int64_t b = c->fitted;
  ct_tensor *xb = ct_narrow(c->X, 0, 0, b);
  if (!xb) ct_cli_die(cli);

  ct_reset_peak_memory_stats(d);
  ct_tensor *acts[MLP_MAX + 1];
  if (forward_keep(&c->net, xb, acts) != CT_OK) ct_cli_die(cli);
  size_t peak_keep = ct_max_memory_allocated(d);
  free_acts(acts, c->net.layers + 1);

  ct_reset_peak_memory_stats(d);
  ct_tensor *out = NULL;
  if (forward_nokeep(&c->net, xb, &out) != CT_OK) ct_cli_die(cli);
  size_t peak_nokeep = ct_max_memory_allocated(d);
  ct_free(out);
  ct_free(xb);
  printf("batch %" PRId64 ", keeping every activation (training): peak allocated %.2f MiB\n", b,
         mib(peak_keep));
  printf("batch %" PRId64 ", freeing each once used (no_grad):    peak allocated %.2f MiB\n", b,
         mib(peak_nokeep));

  ct_reset_peak_memory_stats(d);
  if (forward_nokeep(&c->net, c->X, &out) != CT_OK) ct_cli_die(cli);
  size_t peak_full = ct_max_memory_allocated(d);
  ct_tensor *s = ct_sum(out);
  double full_sum = 0;
  if (!s || ct_item(s, &full_sum) != CT_OK) ct_cli_die(cli);
  ct_free(s);
  printf("batch %" PRId64 ", freeing each once used: ok, peak allocated %.2f MiB, output sum %.6g "
         "(chunks: %.6g)\n",
         c->batch, mib(peak_full), full_sum, c->chunk_sum);
  c->kept = out; // kept alive on purpose: see free_and_empty_cache

  ct_metrics_num(c->m, "noact_batch", (double)b);
  ct_metrics_num(c->m, "noact_peak_keep", (double)peak_keep);
  ct_metrics_num(c->m, "noact_peak_nokeep", (double)peak_nokeep);
  ct_metrics_num(c->m, "noact_full_peak", (double)peak_full);
  ct_metrics_num(c->m, "noact_full_output_sum", full_sum);
}
/*md output no_activations*/

/*md
::: zh
## 办法四：释放引用，再 `empty_cache`

种子的清理代码是 `del x; gc.collect(); torch.cuda.empty_cache()`。这三步各管一件事：`del` 丢掉引用，块回到缓存（allocated 减少）；`gc.collect()` 回收循环引用里的张量（C 里没有这一步，引用计数归零时块立刻回到缓存）；`empty_cache()` 把缓存里整段空闲的内存还给驱动（reserved 减少）。

常见的漏洞是无意中留着引用：比如 `losses.append(loss)` 而不是 `loss.item()`，整个计算图就跟着留下了。这里把上一节整批推理的输出 `kept` 一直留着，然后按减半找到的 batch 再训练一次：

1. OOM——`kept` 占着一个整批激活的空间。
2. 只调用 `empty_cache()` 再试：仍然 OOM，而且失败在同一层。`empty_cache()` 还掉的只是上一次失败留在缓存里的段，而分配器在报错之前本来就做过同样的事——先清空缓存再重试一次（本节最后一行数的就是这种重试）。占着内存的是活着的张量。
3. 释放 `kept`，再 `empty_cache()`：成功。

所以 `empty_cache()` 本身救不了同一个分配器里的 OOM；它的用处是把显存还给别人——别的进程、cuBLAS 和 NCCL 等直接调用 `cudaMalloc` 的库——也让 `nvidia-smi` 显示的占用降下来。真正腾出空间的是释放引用。
:::
::: en
## Remedy 4: drop the references, then `empty_cache`

The seed's clean-up is `del x; gc.collect(); torch.cuda.empty_cache()`. Each step does one thing: `del` drops a reference and the block returns to the cache (allocated falls); `gc.collect()` reclaims tensors caught in reference cycles (C has no such step: a block returns to the cache the moment its count reaches zero); `empty_cache()` gives the cache's wholly free segments back to the driver (reserved falls).

A common leak is a reference kept by accident: `losses.append(loss)` instead of `loss.item()` keeps the whole graph alive. Here the previous section's whole-batch output `kept` stays referenced, and training runs once more at the batch that halving found:

1. OOM: `kept` takes the room of a whole-batch activation.
2. `empty_cache()` alone, and try again: still OOM, at the same layer. `empty_cache()` gives back only the segments the failed attempt left in the cache, and the allocator had done exactly that before raising the error: emptied its cache and retried once (the retries counted on this section's last line). Live tensors hold the memory.
3. Free `kept`, then `empty_cache()`: it fits.

So `empty_cache()` by itself does not cure an OOM inside the same allocator; what it does is give memory back to others — other processes, libraries such as cuBLAS and NCCL that call `cudaMalloc` themselves — and bring down what `nvidia-smi` shows. Dropping references is what makes room.
:::
*/
static void show_free_and_empty_cache(oom_ctx *c) {
  ct_cli_section("free_and_empty_cache");
  const ct_cli *cli = c->cli;
  ct_device d = c->d;
  printf("kept: the whole-batch output, still referenced: %.2f MiB\n", mib(ct_nbytes(c->kept)));

  int rc1 = try_batch(c, c->fitted);
  if (rc1 != CT_OK && rc1 != CT_ERR_OOM) ct_cli_die(cli);
  if (rc1 == CT_ERR_OOM) printf("  %s\n", ct_last_error());

  size_t r0 = ct_memory_reserved(d);
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli); // torch.cuda.empty_cache()
  size_t r1 = ct_memory_reserved(d);
  printf("empty_cache() alone: reserved %.2f -> %.2f MiB, allocated %.2f MiB\n", mib(r0), mib(r1),
         mib(ct_memory_allocated(d)));
  int rc2 = try_batch(c, c->fitted);
  if (rc2 != CT_OK && rc2 != CT_ERR_OOM) ct_cli_die(cli);

  size_t a0 = ct_memory_allocated(d);
  ct_free(c->kept); // del kept
  c->kept = NULL;
  size_t a1 = ct_memory_allocated(d), r2 = ct_memory_reserved(d);
  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
  size_t r3 = ct_memory_reserved(d);
  printf("del kept: allocated %.2f -> %.2f MiB; empty_cache(): reserved %.2f -> %.2f MiB\n", mib(a0),
         mib(a1), mib(r2), mib(r3));
  int rc3 = try_batch(c, c->fitted);
  if (rc3 != CT_OK && rc3 != CT_ERR_OOM) ct_cli_die(cli);
  size_t peak = ct_max_memory_allocated(d);

  ct_memory_stats s;
  ct_memory_stats_get(d, &s);
  printf("allocator so far: emptied its cache and retried %" PRIu64 " times; %" PRIu64
         " of those still failed (OOMs)\n",
         s.num_cache_flushes, s.num_ooms);
  ct_metrics_num(c->m, "fec_first_oom", rc1 == CT_ERR_OOM);
  ct_metrics_num(c->m, "fec_empty_cache_only_oom", rc2 == CT_ERR_OOM);
  ct_metrics_num(c->m, "fec_after_free_ok", rc3 == CT_OK);
  ct_metrics_num(c->m, "fec_freed_bytes", (double)(a0 - a1));
  ct_metrics_num(c->m, "fec_peak_allocated", (double)peak);
  ct_metrics_num(c->m, "num_ooms", (double)s.num_ooms);
  ct_metrics_num(c->m, "num_cache_flushes", (double)s.num_cache_flushes);
}
/*md output free_and_empty_cache*/

/*md
::: zh
## 办法五：`zero_grad(set_to_none=True)`

每个参数都有一个同样大小的梯度。`optimizer.zero_grad(set_to_none=False)` 把梯度清零，但张量留着；`set_to_none=True`（PyTorch 2.0 起的默认值）直接把 `p.grad` 设为 `None`，梯度的内存回到缓存。两者的差别落在下一步的前向传播里：梯度还在的话，它们和激活一起占着内存；设为 `None` 的话，前向可以用这块内存，反向传播时再重新分配梯度（第一个梯度直接赋给 `p.grad`，不用先读旧值再相加，还省一次读写）。

这里用另一个 4 层、每层 512×512 的网络（每个梯度 1 MiB），写一个真正的反向传播：损失取输出之和，`dz = dh * (h > 0)`，`dW = h_prev^T @ dz`，`dh_prev = dz @ W^T`，梯度已存在时累加进去（`p.grad += g`），否则直接赋值。两种 `zero_grad` 之后，allocated 相差恰好 4 个梯度，下一次前向的峰值也相差这么多。
:::
::: en
## Remedy 5: `zero_grad(set_to_none=True)`

Every parameter has a gradient of the same size. `optimizer.zero_grad(set_to_none=False)` fills the gradients with zeros and keeps the tensors; `set_to_none=True` (the default since PyTorch 2.0) sets `p.grad` to `None`, and the gradient's memory returns to the cache. The difference shows in the next step's forward pass: gradients still there take memory alongside the activations; gradients set to `None` leave it to the forward, and the backward allocates them anew (the first gradient is simply assigned to `p.grad`, saving the read-and-add as well).

This uses another network, 4 layers of 512×512 (1 MiB per gradient), with a real backward pass: the loss is the sum of the outputs, `dz = dh * (h > 0)`, `dW = h_prev^T @ dz`, `dh_prev = dz @ W^T`, and a gradient is accumulated into `p.grad` when one exists (`p.grad += g`) and assigned otherwise. After the two kinds of `zero_grad`, allocated differs by exactly the 4 gradients, and so does the peak of the next forward.
:::
*/
// One training step: the forward keeping activations, then the backward of
// loss = sum(output), accumulating into net->grad[l] when it exists (PyTorch's
// `p.grad += g`) and assigning it otherwise. Saved activations are freed as
// the backward passes them, as autograd does.
static int train_step(mlp *net, ct_tensor *x) {
  ct_tensor *acts[MLP_MAX + 1];
  int rc = forward_keep(net, x, acts);
  ct_tensor *dh = NULL; // d loss / d acts[l + 1]
  if (!rc) {
    dh = ct_ones_like(acts[net->layers], CT_F32, ct_device_of(x));
    if (!dh) rc = ct_last_status();
  }
  for (int l = net->layers - 1; !rc && l >= 0; --l) {
    ct_tensor *mask = ct_binary_scalar(CT_OP_GT, acts[l + 1], 0.0); // relu'(z), as h > 0
    ct_tensor *dz = mask ? ct_mul(dh, mask) : NULL;
    ct_free(mask);
    ct_free(dh);
    dh = NULL;
    free_acts(acts + l + 1, 1);
    if (!dz) {
      rc = ct_last_status();
      break;
    }
    ct_tensor *hT = ct_t(acts[l]);
    ct_tensor *g = hT ? ct_mm(hT, dz) : NULL; // (width, width)
    ct_free(hT);
    if (g && l > 0) {
      ct_tensor *wT = ct_t(net->w[l]);
      dh = wT ? ct_mm(dz, wT) : NULL; // (rows, width)
      ct_free(wT);
      if (!dh) rc = ct_last_status();
    }
    ct_free(dz);
    if (!g) {
      rc = ct_last_status();
      break;
    }
    if (net->grad[l]) { // p.grad += g
      int arc = ct_binary_out(CT_OP_ADD, net->grad[l], net->grad[l], g);
      ct_free(g);
      if (arc) rc = arc;
    } else { // p.grad = g
      net->grad[l] = g;
    }
  }
  ct_free(dh);
  free_acts(acts, net->layers + 1);
  return rc;
}

// optimizer.zero_grad(set_to_none)
static int zero_grad(mlp *net, bool set_to_none) {
  for (int l = 0; l < net->layers; ++l) {
    if (!net->grad[l]) continue;
    if (set_to_none) {
      ct_free(net->grad[l]);
      net->grad[l] = NULL;
    } else {
      int rc = ct_zero_(net->grad[l]);
      if (rc) return rc;
    }
  }
  return CT_OK;
}
/*md twin zero_grad*/

static void show_zero_grad(oom_ctx *c) {
  ct_cli_section("zero_grad");
  const ct_cli *cli = c->cli;
  ct_device d = c->d;
  const int layers = 4;
  const int64_t width = 512, rows = 64;
  mlp net;
  if (mlp_init(&net, layers, width, d) != CT_OK) ct_cli_die(cli);
  ct_tensor *x = ct_rand(CT_SHAPE(rows, width), CT_F32, d);
  if (!x) ct_cli_die(cli);
  size_t grads_bytes = (size_t)layers * (size_t)width * (size_t)width * sizeof(float);
  printf("model: %d layers of (%" PRId64 ", %" PRId64 "), batch %" PRId64 "; the gradients hold %.2f MiB\n",
         layers, width, width, rows, mib(grads_bytes));
  double after[2], fwd_peak[2], step_peak[2];
  for (int mode = 0; mode < 2; ++mode) {
    bool set_to_none = mode == 1;
    if (train_step(&net, x) != CT_OK) ct_cli_die(cli); // makes (or adds to) the gradients
    if (zero_grad(&net, set_to_none) != CT_OK) ct_cli_die(cli);
    after[mode] = (double)ct_memory_allocated(d);
    ct_reset_peak_memory_stats(d);
    ct_tensor *acts[MLP_MAX + 1];
    if (forward_keep(&net, x, acts) != CT_OK) ct_cli_die(cli);
    free_acts(acts, layers + 1);
    fwd_peak[mode] = (double)ct_max_memory_allocated(d);
    ct_reset_peak_memory_stats(d);
    if (train_step(&net, x) != CT_OK) ct_cli_die(cli); // the next step
    step_peak[mode] = (double)ct_max_memory_allocated(d);
    printf("zero_grad(set_to_none=%-5s): allocated %.2f MiB; next forward peak %.2f MiB, "
           "next step peak %.2f MiB\n",
           set_to_none ? "True" : "False", after[mode] / MIB, fwd_peak[mode] / MIB,
           step_peak[mode] / MIB);
    if (zero_grad(&net, true) != CT_OK) ct_cli_die(cli); // start the next mode with no gradients
  }
  printf("set_to_none=True frees %.0f B (%.2f MiB) between zero_grad and backward\n",
         after[0] - after[1], (after[0] - after[1]) / MIB);
  ct_free(x);
  mlp_free(&net);
  ct_metrics_num(c->m, "zg_grads_bytes", (double)grads_bytes);
  ct_metrics_num(c->m, "zg_allocated_zeros", after[0]);
  ct_metrics_num(c->m, "zg_allocated_none", after[1]);
  ct_metrics_num(c->m, "zg_forward_peak_zeros", fwd_peak[0]);
  ct_metrics_num(c->m, "zg_forward_peak_none", fwd_peak[1]);
  ct_metrics_num(c->m, "zg_step_peak_zeros", step_peak[0]);
  ct_metrics_num(c->m, "zg_step_peak_none", step_peak[1]);
}
/*md output zero_grad*/

/*md
::: zh
## 显存预热

一篇种子教程建议“可以适当的进行显存预热”。意思是：训练开始前先分配一大块、再释放，分配器把它留在缓存里；之后每一步的张量都从这块里切，不用再找驱动。

下面的实验把同样的几步训练前向跑两遍，每遍之前都 `empty_cache()`，让分配器回到刚启动的状态：

- **不预热**：第 1 步的每个激活都要一个新段（GPU 上是 `cudaMalloc`，CPU 上是 `mmap` 加上缺页），从第 2 步起才全部来自缓存；
- **预热**：先分配一块等于一步所需激活总量的内存，写一遍（CPU 上这会让所有页真正进入物理内存；GPU 上 `cudaMalloc` 本身就备好了显存），然后释放。之后每一步的 4 个激活都从这一个段里切出来，步后又合并回去。

表里每一步的“新段”列是这一步向系统要的段数。预热并没有让成本消失，只是把它挪到了训练开始之前：预热本身花的时间和不预热时第一步多花的时间差不多。它的好处在别处：每一步的时间从一开始就稳定（计时和调优不会被第一步干扰）；显存在训练开始前就已占下，不会被同一块 GPU 上的别的进程抢走；一整段大内存由同一批张量反复复用，碎片也更少。
:::
::: en
## Memory warm-up

A seed tutorial advises warming up memory where appropriate. That is: before training starts, allocate one big block and free it; the allocator keeps it in its cache, and every later step's tensors are cut from it without asking the driver.

The experiment below runs the same few training forwards twice, each time after `empty_cache()`, which puts the allocator back in its just-started state:

- **no warm-up**: in step 1 every activation needs a new segment (`cudaMalloc` on a GPU; `mmap` plus page faults on the CPU), and only from step 2 on does everything come from the cache;
- **warm-up**: first one block as big as a step's activations together is allocated, written once (on the CPU this brings every page into physical memory; on a GPU, `cudaMalloc` already backs the memory) and freed. Then each step's 4 activations are cut from that single segment and merge back into it after the step.

The table's "new segs" columns count the segments each step asked the system for. Warm-up does not make the cost disappear; it moves it to before training starts: the warm-up itself takes about as long as the first step's extra time without it. Its gains lie elsewhere: step times are steady from the start (timing and tuning are not thrown off by step 1); the memory is taken before training begins, so another process on the same GPU cannot grab it; and one big segment reused by the same tensors over and over fragments less.
:::
*/
// One training forward on xb, synchronized; *ms its time, *segs the segments it asked the system for.
static void timed_step(oom_ctx *c, ct_tensor *xb, double *ms, double *segs) {
  ct_memory_stats s0, s1;
  ct_memory_stats_get(c->d, &s0);
  double t0 = ct_cli_seconds();
  ct_tensor *acts[MLP_MAX + 1];
  if (forward_keep(&c->net, xb, acts) != CT_OK) ct_cli_die(c->cli);
  free_acts(acts, c->net.layers + 1);
  if (ct_cli_synchronize(c->cli->device) != CT_OK) ct_cli_die(c->cli);
  *ms = (ct_cli_seconds() - t0) * 1e3;
  ct_memory_stats_get(c->d, &s1);
  *segs = (double)(s1.num_device_allocs - s0.num_device_allocs);
}

static void show_warmup(oom_ctx *c) {
  ct_cli_section("warmup");
  const ct_cli *cli = c->cli;
  ct_device d = c->d;
  // The cap has done its work; give this process the whole device again.
  if (ct_set_per_process_memory_fraction(1.0, d) != CT_OK) ct_cli_die(cli);
  bool poison = ct_alloc_poison();
  ct_alloc_set_poison(false); // time the allocator, not the poison fill
  enum { STEPS_MAX = 8 };
  int steps = cli->quick ? 3 : 5;
  int64_t b = c->fitted;
  size_t act = (size_t)b * (size_t)c->net.width * sizeof(float);
  size_t step_bytes = (size_t)c->net.layers * act; // the activations of one step
  ct_tensor *xb = ct_narrow(c->X, 0, 0, b);
  if (!xb) ct_cli_die(cli);
  double cold_ms[STEPS_MAX], cold_segs[STEPS_MAX], warm_ms[STEPS_MAX], warm_segs[STEPS_MAX];

  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli); // as if the process had just started
  for (int i = 0; i < steps; ++i) timed_step(c, xb, &cold_ms[i], &cold_segs[i]);

  if (ct_empty_cache(d) != CT_OK) ct_cli_die(cli);
  ct_memory_stats s0, s1;
  ct_memory_stats_get(d, &s0);
  double t0 = ct_cli_seconds();
  // torch.empty(n, device=device) then del: one segment for a whole step.
  ct_tensor *pre = ct_empty(CT_SHAPE((int64_t)(step_bytes / sizeof(float))), CT_F32, d);
  if (!pre || ct_zero_(pre) != CT_OK) ct_cli_die(cli); // written once: every page faulted in
  ct_free(pre);
  if (ct_cli_synchronize(cli->device) != CT_OK) ct_cli_die(cli);
  double warm_up_ms = (ct_cli_seconds() - t0) * 1e3;
  ct_memory_stats_get(d, &s1);
  double warm_up_segs = (double)(s1.num_device_allocs - s0.num_device_allocs);
  for (int i = 0; i < steps; ++i) timed_step(c, xb, &warm_ms[i], &warm_segs[i]);
  ct_alloc_set_poison(poison);
  ct_free(xb);

  printf("batch %" PRId64 ": %d activations of %.2f MiB per step; warm-up block %.2f MiB\n", b,
         c->net.layers, mib(act), mib(step_bytes));
  printf("%6s %18s %9s %18s %9s\n", "step", "no warm-up ms", "new segs", "warm-up ms", "new segs");
  for (int i = 0; i < steps; ++i)
    printf("%6d %18.2f %9.0f %18.2f %9.0f\n", i + 1, cold_ms[i], cold_segs[i], warm_ms[i],
           warm_segs[i]);
  double cold_total = 0, warm_total = warm_up_ms;
  for (int i = 0; i < steps; ++i) cold_total += cold_ms[i], warm_total += warm_ms[i];
  printf("warm-up itself: %.2f ms, %.0f new segment\n", warm_up_ms, warm_up_segs);
  printf("first step: %.2f ms without warm-up, %.2f ms with it (%.2fx)\n", cold_ms[0], warm_ms[0],
         cold_ms[0] / (warm_ms[0] > 0 ? warm_ms[0] : 1e-6));
  printf("all %d steps: %.2f ms without warm-up, %.2f ms with it, warm-up included\n", steps,
         cold_total, warm_total);

  ct_metrics_num(c->m, "warmup_batch", (double)b);
  ct_metrics_num(c->m, "warmup_block_bytes", (double)step_bytes);
  ct_metrics_series(c->m, "warmup_cold_ms", cold_ms, steps);
  ct_metrics_series(c->m, "warmup_cold_new_segments", cold_segs, steps);
  ct_metrics_series(c->m, "warmup_warm_ms", warm_ms, steps);
  ct_metrics_series(c->m, "warmup_warm_new_segments", warm_segs, steps);
  ct_metrics_num(c->m, "warmup_ms", warm_up_ms);
  ct_metrics_num(c->m, "warmup_new_segments", warm_up_segs);
  ct_metrics_num(c->m, "warmup_first_step_speedup", cold_ms[0] / (warm_ms[0] > 0 ? warm_ms[0] : 1e-6));
}
/*md twin warmup*/
/*md output warmup*/

/*md
::: zh
## 练习

1. 把 `show_statistics` 里的 1000×1000 换成 512×512、1024×1024 和 1600×1600，先按本章的规则手算 allocated 和 reserved，再运行核对。哪一个落进了小池？
2. 在 `show_splitting` 里把 z 改成 1000×1000。还需要新段吗？为什么？再改成 1200×1000 呢？
3. 在 `fit_batch` 里去掉 `ct_empty_cache`，重新运行。结果变了吗？看 `free_and_empty_cache` 一节最后一行的 cache flushes，解释为什么变或不变。
4. 把 `show_oom` 里的上限从 3.5 份改成 2.5 份。减半一次还够吗？`chunks` 和 `no_activations` 两节的峰值各是多少？
5. 在有 GPU 的机器上运行 `raw_vs_cached`，再在 `time_cuda_malloc_us` 的循环里于 `cudaFree` 之前启动一个运行 1 毫秒的核函数。`cudaFree` 的时间变成多少？这说明了什么？
6. 在 CPU 上用 `perf stat -e page-faults ./ch03 --device cpu --quick` 运行，再把 `main` 里的 `mallopt` 删掉重新运行。缺页次数和 `warmup` 一节的时间怎样变化？
:::
::: en
## Exercises

1. In `show_statistics`, replace 1000×1000 with 512×512, 1024×1024 and 1600×1600. Work out allocated and reserved by hand with this chapter's rules first, then run and check. Which one lands in the small pool?
2. In `show_splitting`, make z 1000×1000. Is a new segment still needed? Why? And with 1200×1000?
3. Remove the `ct_empty_cache` from `fit_batch` and run again. Does the outcome change? Look at the cache flushes on the last line of `free_and_empty_cache` and explain why it does or does not.
4. Lower the cap in `show_oom` from 3.5 copies to 2.5. Is one halving still enough? What are the peaks in `chunks` and `no_activations` now?
5. On a machine with a GPU, run `raw_vs_cached`, then launch a kernel that runs for 1 ms before the `cudaFree` in `time_cuda_malloc_us`'s loop. How long does `cudaFree` take now, and what does that tell you?
6. On the CPU, run `perf stat -e page-faults ./ch03 --device cpu --quick`, then delete the `mallopt` in `main` and run again. How do the page faults and the `warmup` section's times change?
:::
*/
