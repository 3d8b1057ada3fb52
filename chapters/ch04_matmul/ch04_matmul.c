// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 4 章　矩阵乘法：GPU 为什么快 10–100 倍

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)；这里是《PyTorch GPU 加速》）里有一句话：深度学习里大部分计算是矩阵乘法，可以高度并行，所以“GPU 加速 10-100 倍”。本章把这句话拆开来量一量。

全章只算一件事：C = A·B，A 是 (M, K)，B 是 (K, N)，C 是 (M, N)，都是按行存放（row-major）的 float32。C 的每个元素是 A 的一行和 B 的一列的点积，要做 K 次乘法和 K 次加法，所以整个乘积是

$$\mathrm{FLOP} = 2\,M N K$$

次浮点运算。n = 4096 的方阵是 1374 亿次。把它除以用时就得到 GFLOP/s（每秒十亿次浮点运算），这是本章比较一切的单位。

同一个乘积，在 CPU 和 GPU 上各写一组版本，排成一架梯子，每一级只修正上一级的一个毛病：

| | CPU | GPU |
|---|---|---|
| 1 | 三重循环 (i, j, k) | 每个线程算一个 C 元素 |
| 2 | 调换成 (i, k, j)，分块，OpenMP 多线程 | 让一个 warp 的线程沿 N 排开（合并访存） |
| 3 | OpenBLAS：经 `ct_mm`，以及直接调用 `cblas_sgemm` | 共享内存分块（32×32） |
| 4 | | 寄存器分块（128×128 的块，每线程 8×8 个输出） |
| 5 | | cuBLAS SGEMM（经 `ct_mm`，不用 TF32） |
| 6 | | TF32 Tensor Core |
| 7 | | BF16 和 FP16 Tensor Core（f32 累加） |

每个版本先和 float64 的参考结果比对，通过了才计时。快而错的代码没有意义。

构建并运行：

```sh
cmake --preset default && cd build
ninja ch04_matmul && ./ch04            # 有 GPU 就跑两架梯子，没有就只跑 CPU
./ch04 --device cpu --quick            # 小尺寸，几秒钟
./ch04 --metrics ch04.json             # 每个版本在每个尺寸上的 GFLOP/s
```
:::
::: en
# Chapter 4. Matrix multiplication: why the GPU is 10–100× faster

One of the seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here “PyTorch GPU acceleration”) puts it in one line: most of deep learning is matrix multiplication, matrix multiplication parallelizes well, hence "GPU speed-up 10–100×". This chapter takes that sentence apart and measures it.

The whole chapter computes one thing: C = A·B with A of shape (M, K), B of shape (K, N) and C of shape (M, N), all float32 and stored row by row (row-major). Each element of C is the dot product of a row of A and a column of B, K multiplications and K additions, so the product costs

$$\mathrm{FLOP} = 2\,M N K$$

floating-point operations: 137 billion for square matrices of n = 4096. Divided by the time taken this gives GFLOP/s (billions of floating-point operations per second), the unit in which this chapter compares everything.

The same product is written as a series of versions on the CPU and on the GPU, a ladder in which each rung fixes one thing the rung below did badly:

| | CPU | GPU |
|---|---|---|
| 1 | triple loop (i, j, k) | one thread per element of C |
| 2 | reordered to (i, k, j), cache-blocked, OpenMP threads | a warp's threads along N (coalesced loads) |
| 3 | OpenBLAS: through `ct_mm`, and `cblas_sgemm` called directly | shared-memory tiles (32×32) |
| 4 | | register tiles (128×128 block tile, 8×8 outputs per thread) |
| 5 | | cuBLAS SGEMM (through `ct_mm`, TF32 off) |
| 6 | | TF32 tensor cores |
| 7 | | BF16 and FP16 tensor cores (f32 accumulation) |

Every version is first compared with a float64 reference, and only timed if it passes. Fast and wrong is worth nothing.

Build and run:

```sh
cmake --preset default && cd build
ninja ch04_matmul && ./ch04            # both ladders where there is a GPU, else the CPU's
./ch04 --device cpu --quick            # small sizes, a few seconds
./ch04 --metrics ch04.json             # GFLOP/s of every version at every size
```
:::
*/

/*md hide*/
#define _GNU_SOURCE // sched_getaffinity, CPU_COUNT

#include <cblas.h>
#include <limits.h> // PATH_MAX
#include <math.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> // clock_gettime: the emulated device's one run
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ct.h"

int openblas_get_num_threads(void); // OpenBLAS's own query (also in its cblas.h)

#ifdef CT_HAVE_CUDA
// The GPU rungs 1-4, in ch04_kernels.cu: C (M, N) = A (M, K) · B (K, N), row-major
// float32 device pointers, launched on `stream` (a cudaStream_t; NULL = the
// legacy default stream). Each returns a ct_status.
int ch04_gpu_naive(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_coalesced(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_smem_tiled(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
int ch04_gpu_reg_tiled(const float *a, const float *b, float *c, int M, int N, int K, void *stream);
#endif

#define MAX_SIZES 8
#define NAIVE_CPU_MAX 512 // the CPU's triple loop stops here (see its prose)
#define N_SAMPLES 4096    // entries checked when the product is too big to check all
#define FULL_CHECK_MAX_MN (256 * 256)

static const int CPU_SIZES[] = {128, 256, 512, 1024, 2048};
static const int CPU_SIZES_QUICK[] = {64, 128, 256};
static const int GPU_SIZES[] = {256, 512, 1024, 2048, 4096};
static const int GPU_SIZES_QUICK[] = {256, 1024};
// On the emulated device (tools/sim: the kernels run on the CPU, one fiber per
// CUDA thread) the GPU sizes would take hours; rung 4 needs multiples of 128.
static const int GPU_SIZES_EMULATED[] = {128, 256};
static const int GPU_SIZES_EMULATED_QUICK[] = {128};
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

// What a version's arithmetic is, which decides its tolerance.
typedef enum prec { PREC_F32, PREC_TF32, PREC_F16, PREC_BF16 } prec;

typedef struct version {
  const char *name;  // "cpu_naive": in check lines, tables and metric keys
  const char *label; // what it is, for the table
  prec prec;
} version;

enum { CPU_NAIVE, CPU_BLOCKED, CPU_MM, CPU_CBLAS, CPU_NV };
static const version CPU_VERSIONS[CPU_NV] = {
    {"cpu_naive", "1 naive (i,j,k), one thread", PREC_F32},
    {"cpu_blocked", "2 (i,k,j) blocked + OpenMP", PREC_F32},
    {"cpu_mm", "3 OpenBLAS via ct_mm", PREC_F32},
    {"cpu_cblas", "3b OpenBLAS cblas_sgemm", PREC_F32},
};

enum { GPU_NAIVE, GPU_COALESCED, GPU_SMEM, GPU_REG, GPU_MM_F32, GPU_MM_TF32, GPU_MM_BF16, GPU_MM_F16, GPU_NV };
static const version GPU_VERSIONS[GPU_NV] = {
    {"gpu_naive", "1 naive", PREC_F32},
    {"gpu_coalesced", "2 coalesced", PREC_F32},
    {"gpu_smem_tiled", "3 shared-memory tiles 32x32", PREC_F32},
    {"gpu_reg_tiled", "4 register tiles 128x128, 8x8/thread", PREC_F32},
    {"gpu_mm_f32", "5 cuBLAS SGEMM via ct_mm", PREC_F32},
    {"gpu_mm_tf32", "6 cuBLAS TF32 tensor cores", PREC_TF32},
    {"gpu_mm_bf16", "7 cuBLAS BF16 tensor cores", PREC_BF16},
    {"gpu_mm_f16", "7 cuBLAS FP16 tensor cores", PREC_F16},
};

// One ladder's measurements: [version][size], NaN where not measured.
typedef struct ladder {
  int nsizes;
  int sizes[MAX_SIZES];
  double ms[GPU_NV][MAX_SIZES];
  double gflops[GPU_NV][MAX_SIZES];
  double err[GPU_NV][MAX_SIZES];
} ladder;

static void ladder_init(ladder *l, const int *sizes, int n) {
  l->nsizes = n;
  for (int s = 0; s < n; s++) l->sizes[s] = sizes[s];
  for (int v = 0; v < GPU_NV; v++)
    for (int s = 0; s < MAX_SIZES; s++) l->ms[v][s] = l->gflops[v][s] = l->err[v][s] = NAN;
}

// What the chapter was asked to do, and what went wrong so far.
typedef struct run {
  ct_cli *cli;
  ct_metrics *m;
  const char *corrupt; // --corrupt NAME: spoil that version's result (a testing aid)
  const char *dump;    // --dump DIR: write the smallest CPU problem's matrices there
  int failures;        // checks that failed; the exit status is 1 when > 0
} run;

static double flops_of(int M, int N, int K) { return 2.0 * M * N * K; }

// A small, seedable generator for picking which entries to check.
static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void die_oom(const run *r, const char *what) {
  fprintf(stderr, "%s: out of host memory for %s\n", r->cli->program, what);
  exit(1);
}

// Writes n floats to DIR/name; returns false (and says why) on failure.
static bool dump_floats(const char *dir, const char *name, const float *x, size_t n) {
  char path[PATH_MAX];
  if (ct_path_join(path, sizeof path, "--dump", dir, name) != CT_OK) {
    fprintf(stderr, "ch04: %s\n", ct_last_error());
    return false;
  }
  if (n > SIZE_MAX / sizeof(float) || ct_write_file("--dump", path, x, n * sizeof(float)) != CT_OK) {
    fprintf(stderr, "ch04: %s\n", ct_last_error()); // written as checkpoints are: whole or not at all
    return false;
  }
  return true;
}
/*md show*/

/*md
::: zh
## 先验证，再计时

参考结果用 float64 在 CPU 上算。小尺寸（M·N 不超过 256²）时 C 的每个元素都查；大尺寸时逐个算全部元素太慢（n = 4096 的 float64 三重循环要几分钟），就随机抽 4096 个位置（外加四个角），每个位置用 float64 算一次长度为 K 的点积。下面的 `reference` 预先算好这些位置的参考值，每个版本都拿同一份来比。

误差怎么量？直接除以参考值不行：点积可能恰好抵消成接近 0 的数，相对误差会无意义地变大。这里除以 ‖aᵢ‖·‖bⱼ‖，即 A 第 i 行和 B 第 j 列的长度之积。由 Cauchy–Schwarz 不等式，它是这个点积可能的最大绝对值，也正是舍入误差随之增长的尺度：

$$\mathrm{err}(i, j) = \frac{|c_{ij} - \mathrm{ref}_{ij}|}{\lVert A_{i,:} \rVert \, \lVert B_{:,j} \rVert}$$

容差按数据类型定，依据是每种格式的单位舍入误差 u（尾数 p 位时 u = 2⁻ᵖ）：

| 算法 | 尾数位数 | u | 容差 |
|---|---|---|---|
| f32 | 24 | 6.0e-8 | 2e-6·√K（K = 4096 时约 1.3e-4） |
| TF32（Tensor Core 读入时截到 10 位） | 11 | 4.9e-4 | 1e-2 |
| FP16 输入，f32 累加 | 11 | 4.9e-4 | 1e-2 |
| BF16 输入，f32 累加 | 8 | 3.9e-3 | 3e-2 |

f32 累加 K 项时，不论求和次序如何，err 都有一个严格的上界 K·u（经典的舍入误差分析给出 |误差| ≤ K·u·Σ|aₖbₖ|，而 Σ|aₖbₖ| ≤ ‖a‖·‖b‖）；实际的误差有正有负，互相抵消，增长得更像 √K·u。f32 的容差 2e-6·√K 约等于 33·√K·u：比典型误差大两到三个数量级，K 很大时又比严格上界紧。TF32、FP16、BF16 的误差主要来自把输入舍入到更短的尾数：每个乘积最多偏差 2u，再加上输出舍入的 u，所以 err 不超过约 3u（TF32 约 1.5e-3，FP16 约 1.5e-3，BF16 约 1.2e-2），和 K 关系不大；表中的容差在这个上界之上留了余量。参考值始终是原始 f32 输入的精确乘积，所以低精度版本的误差里包含了它丢掉的输入精度，这正是换来速度的代价。

反过来，容差也要小到能抓住错误。假如处处漏掉了一个 k（比如分块的边界差一），每个元素就少了一项 aᵢₖ·bₖⱼ；在几千个被检查的元素里，总有这一项大到 10 左右的，误差约为 10/K，K = 4096 时是 2.4e-3，是 f32 容差的二十倍。NaN 一律算失败。每个版本的输出在运行前先填满 NaN，没写到的元素也逃不掉。
:::
::: en
## Check first, then time

The reference is computed on the CPU in float64. For small products (M·N up to 256²) every element of C is checked; for larger ones computing them all is too slow (a float64 triple loop at n = 4096 takes minutes), so 4096 random positions (plus the four corners) are drawn and each gets a float64 dot product of length K. `reference` below computes these values once per size, and every version is compared against the same set.

How to measure the error? Dividing by the reference value does not work: a dot product can cancel to almost zero and make the relative error meaninglessly large. Instead we divide by ‖aᵢ‖·‖bⱼ‖, the length of row i of A times the length of column j of B. By the Cauchy–Schwarz inequality that is the largest magnitude this dot product could have, and it is the scale rounding errors grow with:

$$\mathrm{err}(i, j) = \frac{|c_{ij} - \mathrm{ref}_{ij}|}{\lVert A_{i,:} \rVert \, \lVert B_{:,j} \rVert}$$

The tolerance follows the data type, from each format's unit roundoff u (u = 2⁻ᵖ with p bits of significand):

| arithmetic | significand bits | u | tolerance |
|---|---|---|---|
| f32 | 24 | 6.0e-8 | 2e-6·√K (about 1.3e-4 at K = 4096) |
| TF32 (tensor cores cut inputs to 10 stored bits) | 11 | 4.9e-4 | 1e-2 |
| FP16 inputs, f32 accumulation | 11 | 4.9e-4 | 1e-2 |
| BF16 inputs, f32 accumulation | 8 | 3.9e-3 | 3e-2 |

Summing K terms in f32, err has a strict bound of K·u whatever the order of summation (the classic rounding-error analysis gives |error| ≤ K·u·Σ|aₖbₖ|, and Σ|aₖbₖ| ≤ ‖a‖·‖b‖); real errors have both signs, partly cancel and grow more like √K·u. The f32 tolerance 2e-6·√K is about 33·√K·u: two to three orders of magnitude above the typical error, and tighter than the strict bound for large K. TF32, FP16 and BF16 lose most of their accuracy when the inputs are rounded to a shorter significand: each product is off by at most 2u, the rounding of the output adds u, so err stays below about 3u (TF32 about 1.5e-3, FP16 about 1.5e-3, BF16 about 1.2e-2), hardly depending on K; the tolerances in the table leave a margin above that bound. The reference is always the exact product of the original f32 inputs, so the lower-precision versions are charged for the input precision they throw away: the price they pay for their speed.

The tolerance must also be small enough to catch mistakes. If one k is dropped everywhere (an off-by-one at a tile boundary, say), every element loses a term aᵢₖ·bₖⱼ; among thousands of checked elements some of those terms are as large as 10, an error of about 10/K, 2.4e-3 at K = 4096, twenty times the f32 tolerance. NaN always fails. Every version's output is filled with NaN before it runs, so an element it forgets to write cannot hide.
:::
*/
typedef struct reference {
  int M, N, K;
  int n;            // entries checked
  int *i, *j;       // their positions
  double *ref;      // float64 dot products
  double *scale;    // ||A[i,:]|| * ||B[:,j]||
  bool all;         // every entry (n == M * N)
} reference;

// a (M, K) and b (K, N) row-major, on the host. Leaves `r` ready for check().
static void reference_build(const run *rn, reference *r, const float *a, const float *b, int M,
                            int N, int K, uint64_t seed) {
  *r = (reference){.M = M, .N = N, .K = K};
  r->all = (int64_t)M * N <= FULL_CHECK_MAX_MN;
  r->n = r->all ? M * N : N_SAMPLES + 4;
  r->i = malloc(sizeof(int) * r->n);
  r->j = malloc(sizeof(int) * r->n);
  r->ref = malloc(sizeof(double) * r->n);
  r->scale = malloc(sizeof(double) * r->n);
  if (!r->i || !r->j || !r->ref || !r->scale) die_oom(rn, "the reference");
  if (r->all) {
    for (int t = 0; t < r->n; t++) r->i[t] = t / N, r->j[t] = t % N;
  } else {
    const int ci[4] = {0, 0, M - 1, M - 1}, cj[4] = {0, N - 1, 0, N - 1}; // the corners
    for (int t = 0; t < 4; t++) r->i[t] = ci[t], r->j[t] = cj[t];
    for (int t = 4; t < r->n; t++) {
      r->i[t] = (int)(splitmix64(&seed) % (uint64_t)M);
      r->j[t] = (int)(splitmix64(&seed) % (uint64_t)N);
    }
  }
#pragma omp parallel for schedule(static)
  for (int t = 0; t < r->n; t++) {
    const float *ai = a + (size_t)r->i[t] * K;
    double dot = 0, na = 0, nb = 0;
    for (int k = 0; k < K; k++) {
      const double x = ai[k], y = b[(size_t)k * N + r->j[t]];
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    r->ref[t] = dot;
    r->scale[t] = sqrt(na * nb) > 0 ? sqrt(na * nb) : 1.0;
  }
}

static void reference_free(reference *r) {
  free(r->i);
  free(r->j);
  free(r->ref);
  free(r->scale);
}

static double tolerance(prec p, int K) {
  switch (p) {
  case PREC_F32: return 2e-6 * sqrt((double)K);
  case PREC_TF32: return 1e-2;
  case PREC_F16: return 1e-2;
  case PREC_BF16: return 3e-2;
  }
  return 0;
}

// c (M, N) row-major on the host. Returns the largest err(i, j) over the
// checked entries; +inf if any is NaN or infinite.
static double check(const reference *r, const float *c) {
  double worst = 0;
  for (int t = 0; t < r->n; t++) {
    const double got = c[(size_t)r->i[t] * r->N + r->j[t]];
    const double e = fabs(got - r->ref[t]) / r->scale[t];
    if (!(e <= worst)) worst = isfinite(e) ? e : INFINITY; // also catches NaN
  }
  return worst;
}

// Checks one version's result, prints its line and counts a failure.
// Returns true when the version may be timed.
static bool report_check(run *rn, const version *v, const reference *r, float *c, double *err_out) {
  if (rn->corrupt && !strcmp(rn->corrupt, v->name)) c[0] += 1.0f + fabsf(c[0]); // --corrupt
  const double tol = tolerance(v->prec, r->K), err = check(r, c);
  const bool ok = err <= tol;
  printf("check %s %d: max rel err %.2e (tol %.2e, %s %d entries) %s\n", v->name, r->M, err, tol,
         r->all ? "all" : "sampled", r->n, ok ? "OK" : "FAIL");
  if (!ok) rn->failures++;
  *err_out = err;
  return ok;
}

// A version that could not even run (an error from the runtime or CUDA).
static void report_error(run *rn, const version *v, int size) {
  printf("check %s %d: error: %s FAIL\n", v->name, size, ct_last_error());
  rn->failures++;
}

/*md
::: zh
## 计时

计时用事件（event），和 `torch.cuda.Event(enable_timing=True)` 一样：在流上记下开始和结束两个事件，等结束事件完成，读两者之差。GPU 上事件由 GPU 自己打时间戳，量到的是核函数真正执行的时间，不含主机排队；CPU 上 ct 的事件读主机的单调时钟，同一段代码两边都能用。

- **预热**：第一次调用要付一次性的代价（cuBLAS 选算法、OpenBLAS 起线程、缓存分配器第一次要内存），不计入。
- **中位数**：重复多次取中位数，不受偶尔被打断的那一次影响。开发机只有两个核，还和别的进程共用，中位数比平均值可靠得多。
- **小乘积成批计时**：一次只要几微秒的调用，事件的分辨率和启动开销都不可忽略，于是每个样本连续调用多次（让一个样本至少 1 ms），再除以次数。
- 每个版本在每个尺寸上大约花 `budget` 毫秒，至少 3 个样本、至多 15 个。

GFLOP/s = 2·M·N·K / 用时。
:::
::: en
## Timing

Time is taken with events, as `torch.cuda.Event(enable_timing=True)` does: record a start and an end event on the stream, wait for the end, read the difference. On a GPU the events are stamped by the GPU itself, so they measure the kernels' execution and not the host's queueing; on the CPU ct's events read the host's monotonic clock, so the same code serves both.

- **Warm-up**: the first call pays one-time costs (cuBLAS choosing an algorithm, OpenBLAS starting its threads, the caching allocator's first request); it is not counted.
- **Median**: many repeats, and the median, which an occasional interruption does not move. The development machine has two cores shared with other processes; the median is far more trustworthy there than the mean.
- **Batches for small products**: for a call of a few microseconds, event resolution and launch overhead matter, so each sample makes several calls in a row (at least 1 ms worth) and divides by their number.
- Each version spends about `budget` milliseconds per size: at least 3 samples, at most 15.

GFLOP/s = 2·M·N·K / time.
:::
*/
typedef int (*product_fn)(void *ctx); // one product C = A·B; returns a ct_status

// A median is trusted only when its samples look like a measurement. All
// repeats identical means the clock ticked at its resolution rather than
// timing the work; a spread (slowest - fastest) above TIMING_SPREAD of the
// median means something else ran meanwhile. Of five or more samples the
// single slowest is left out of that spread: one late sample (the scheduler
// gave the core away once) does not move the median, and a busy machine
// slows more than one. time_interleaved re-measures a
// suspect timing once; what is still suspect is counted in timing_log, and
// each ladder ends its section with a note saying so (print_timing_note).
#define TIMING_SPREAD 0.5
static struct {
  int timed, remeasured, suspect;
} timing_log;

// sorted holds reps >= 1 samples in increasing order; NULL when plausible.
static const char *timing_suspect(const double *sorted, int reps) {
  const double lo = sorted[0], hi = sorted[reps >= 5 ? reps - 2 : reps - 1], med = sorted[reps / 2];
  if (reps >= 3 && hi == lo) return "all repeats identical";
  if (med > 0 && (hi - lo) / med > TIMING_SPREAD) return "spread above the limit";
  return NULL;
}

// Prints the ladder's note and writes its counts as LADDER_timings_timed,
// _remeasured and _suspect (tools/record keeps no run with suspect timings;
// the book says so beside numbers taken from such a run).
static void print_timing_note(ct_metrics *m, const char *ladder_name) {
  if (timing_log.suspect)
    printf("timing note: %d of %d timings still implausible after re-measuring (all repeats identical, or "
           "slowest - fastest above %.0f%% of the median, the one slowest of five or more left out): this machine was busy or its clock too coarse; "
           "compare speeds only in a full run on a quiet machine\n",
           timing_log.suspect, timing_log.timed, 100 * TIMING_SPREAD);
  else if (timing_log.remeasured)
    printf("timing note: %d of %d timings were implausible at first and were re-measured\n",
           timing_log.remeasured, timing_log.timed);
  char key[64];
  snprintf(key, sizeof key, "%s_timings_timed", ladder_name);
  ct_metrics_num(m, key, timing_log.timed);
  snprintf(key, sizeof key, "%s_timings_remeasured", ladder_name);
  ct_metrics_num(m, key, timing_log.remeasured);
  snprintf(key, sizeof key, "%s_timings_suspect", ladder_name);
  ct_metrics_num(m, key, timing_log.suspect);
  timing_log.timed = timing_log.remeasured = timing_log.suspect = 0;
}

// reps rounds; each takes one sample of every fn in turn. samples[f][r] is
// the time of one call of fns[f] (inner[f] calls per sample), in ms.
static int sample_rounds(int n, product_fn *fns, void **ctxs, const int *inner, int reps, ct_event *e0,
                         ct_event *e1, double samples[][15]) {
  int rc = CT_OK;
  float t = 0;
  for (int r = 0; r < reps && !rc; r++)
    for (int f = 0; f < n && !rc; f++) {
      rc = ct_event_record(e0, NULL);
      for (int i = 0; i < inner[f] && !rc; i++) rc = fns[f](ctxs[f]);
      if (!rc) rc = ct_event_record(e1, NULL);
      if (!rc) rc = ct_event_synchronize(e1);
      if (!rc) rc = ct_event_elapsed_time(e0, e1, &t);
      samples[f][r] = (double)t / inner[f];
    }
  for (int f = 0; f < n && !rc; f++) qsort(samples[f], (size_t)reps, sizeof(double), ct_cli_cmp_double);
  return rc;
}

// Times n products side by side: each round takes one sample of every fn in
// turn, so that a machine busy with other work slows them all alike (this is
// how ct_mm and cblas_sgemm are compared). Enters with every fn already
// checked once on `dev`; leaves ms[f] with the median time of one call of
// fns[f], in milliseconds, re-measured once if it looked implausible.
static int time_interleaved(ct_device dev, int n, product_fn *fns, void **ctxs, double budget_ms, double *ms) {
  ct_event *e0 = ct_event_create(dev, true), *e1 = ct_event_create(dev, true);
  int rc = (e0 && e1) ? CT_OK : CT_ERR_OOM;
  int inner[4] = {1, 1, 1, 1};
  double samples[4][15], total = 0;
  float t = 0;
  for (int f = 0; f < n && !rc; f++) { // warm-up, which also tells how long one call takes
    rc = ct_event_record(e0, NULL);
    if (!rc) rc = fns[f](ctxs[f]);
    if (!rc) rc = ct_event_record(e1, NULL);
    if (!rc) rc = ct_event_synchronize(e1);
    if (!rc) rc = ct_event_elapsed_time(e0, e1, &t);
    const double one = t > 1e-4 ? t : 1e-4;
    inner[f] = one >= 1.0 ? 1 : (int)fmin(64.0, ceil(1.0 / one)); // samples of >= 1 ms
    total += one * inner[f];
  }
  int reps = (int)(budget_ms / (total > 0 ? total : 1e-3));
  reps = reps < 3 ? 3 : reps > 15 ? 15 : reps;
  if (!rc) rc = sample_rounds(n, fns, ctxs, inner, reps, e0, e1, samples);
  bool suspect = false;
  for (int f = 0; f < n && !rc; f++) suspect = suspect || timing_suspect(samples[f], reps);
  if (suspect && !rc) { // once more, all of them side by side again
    for (int f = 0; f < n; f++) timing_log.remeasured += timing_suspect(samples[f], reps) != NULL;
    rc = sample_rounds(n, fns, ctxs, inner, reps, e0, e1, samples);
  }
  for (int f = 0; f < n && !rc; f++) {
    timing_log.timed++;
    timing_log.suspect += timing_suspect(samples[f], reps) != NULL;
    ms[f] = reps % 2 ? samples[f][reps / 2] : 0.5 * (samples[f][reps / 2 - 1] + samples[f][reps / 2]);
  }
  ct_event_free(e0);
  ct_event_free(e1);
  return rc;
}

static int time_median(ct_device dev, product_fn fn, void *ctx, double budget_ms, double *ms) {
  return time_interleaved(dev, 1, &fn, &ctx, budget_ms, ms);
}
/*md twin timing*/

/*md
::: zh
## CPU 第 1 级：三重循环

照定义写：对每个 (i, j)，沿 k 累加 A 的第 i 行和 B 的第 j 列。A 的一行在内存里是连续的，但 B 的一列不是：B[k][j] 和 B[k+1][j] 相隔 N 个 float。N = 512 时是 2 KiB，每走一步 k 就落到一条新的 64 字节缓存行上，而这一行里只用了 4 个字节。B 整个放得进 L2（512² × 4 = 1 MiB，和常见 CPU 一两个核的 L2 相当）时还能忍受；n = 1024 时 B 有 4 MiB，几乎每次读 B 都要去更远的缓存或内存。

运算次数按 n³ 增长：n 翻倍，工作量是 8 倍，再加上缓存失效，用时还要更多。所以这一级只跑到 n = 512，更大的尺寸跳过，并按 512 时的速度估算它要花多久（这是下限）。它也只用一个线程：这是“什么都没做”的起点。
:::
::: en
## CPU rung 1: the triple loop

Straight from the definition: for each (i, j), run along k over row i of A and column j of B. A row of A is contiguous in memory, a column of B is not: B[k][j] and B[k+1][j] are N floats apart. At N = 512 that is 2 KiB, so every step in k lands on a new 64-byte cache line of which 4 bytes are used. While all of B fits in L2 (512² × 4 = 1 MiB, about the L2 cache of one or two cores of a common CPU) this is tolerable; at n = 1024 B is 4 MiB and nearly every read of B goes to a farther cache or to memory.

The work grows as n³: doubling n multiplies it by 8, and the cache misses make the time grow faster still. So this rung runs only up to n = 512; larger sizes are skipped, with an estimate of how long they would take at the 512 rate (a lower bound). It also uses one thread: it is the do-nothing baseline.
:::
*/
// c (M, N) = a (M, K) · b (K, N), all row-major.
static void cpu_naive(const float *a, const float *b, float *c, int M, int N, int K) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int k = 0; k < K; ++k) acc += a[(size_t)i * K + k] * b[(size_t)k * N + j];
      c[(size_t)i * N + j] = acc;
    }
}

/*md
::: zh
## CPU 第 2 级：调换循环次序，分块，多线程

三处改动，每处修一个问题：

1. **(i, k, j) 次序**。把 j 放到最内层：`c[i][j] += a[i][k] * b[k][j]`，a[i][k] 在内层循环里是常数，b 和 c 都沿一行连续地走。连续访问一次用满整条缓存行，编译器也能把内层循环向量化（`#pragma omp simd`）：一条 SIMD 指令同时算 4 个（SSE）或 8 个（AVX2）float。
2. **分块**（cache blocking）。C 被切成 BM × BN 的块，k 也按 BK 一段一段走。在一个块里，B 的 BK × BN 子块（128 × 256 × 4 = 128 KiB）反复被 BM 行用到，一直留在 L2 里；C 的一段行（BN 个 float，1 KiB）在 k 循环里一直留在 L1 里。
3. **OpenMP**。不同的 (行块, 列块) 写 C 的不同部分，彼此独立，用 `#pragma omp parallel for collapse(2)` 分给各个核，无需加锁。唤醒线程本身要花时间（在繁忙的机器上可能要几毫秒），所以很小的乘积（少于约 200 万次乘加）用 `if` 子句留在一个线程上，OpenBLAS 也是这样做的。

这段循环是本章的一个练习区。它仍然远不如 OpenBLAS：内层循环每做一次乘加，都要从 L1 读一个 c、读一个 b、写回一个 c，访存而不是运算成了瓶颈。要再快，就得把 C 的一小块一直放在寄存器里，这正是下一级 OpenBLAS 和 GPU 第 4 级做的事。
:::
::: en
## CPU rung 2: reorder, block, thread

Three changes, each fixing one problem:

1. **(i, k, j) order**. With j innermost the update is `c[i][j] += a[i][k] * b[k][j]`: a[i][k] is a constant of the inner loop, and b and c are both walked along a row. Contiguous access uses every byte of a cache line, and the compiler can vectorize the inner loop (`#pragma omp simd`): one SIMD instruction computes 4 (SSE) or 8 (AVX2) floats.
2. **Cache blocking**. C is cut into BM × BN blocks and k is walked in slices of BK. Within a block, B's BK × BN sub-block (128 × 256 × 4 = 128 KiB) is reused by BM rows and stays in L2; a segment of a row of C (BN floats, 1 KiB) stays in L1 for the whole k loop.
3. **OpenMP**. Different (row block, column block) pairs write different parts of C and are independent, so `#pragma omp parallel for collapse(2)` hands them to the cores with no locking. Waking threads takes time itself (milliseconds on a busy machine), so a tiny product (under about two million multiply-adds) stays on one thread through the `if` clause, as OpenBLAS does too.

This loop is one of the chapter's lab regions. It is still far from OpenBLAS: for every multiply-add the inner loop reads a c, reads a b and writes a c back to L1, so memory traffic, not arithmetic, is the bottleneck. Going faster requires keeping a small tile of C in registers throughout, which is what OpenBLAS (the next rung) and the GPU's rung 4 do.
:::
*/
#define CPU_BM 64
#define CPU_BN 256
#define CPU_BK 128

static inline int imin(int x, int y) { return x < y ? x : y; }

// c (M, N) = a (M, K) · b (K, N), all row-major.
static void cpu_blocked(const float *a, const float *b, float *c, int M, int N, int K) {
  /* LAB BEGIN: for each (BM x BN) block of C in parallel: zero it, then for each BK slice, for i, for k, c[i][j] += a[i][k] * b[k][j] over the block's j | test: chapter.ch04 */
#pragma omp parallel for collapse(2) schedule(static) if ((double)M * N * K >= 2e6) // tiny: one thread
  for (int i0 = 0; i0 < M; i0 += CPU_BM)
    for (int j0 = 0; j0 < N; j0 += CPU_BN) {
      const int i1 = imin(i0 + CPU_BM, M), j1 = imin(j0 + CPU_BN, N);
      for (int i = i0; i < i1; ++i)
        for (int j = j0; j < j1; ++j) c[(size_t)i * N + j] = 0.0f;
      for (int k0 = 0; k0 < K; k0 += CPU_BK) {
        const int k1 = imin(k0 + CPU_BK, K);
        for (int i = i0; i < i1; ++i) {
          float *ci = c + (size_t)i * N;       // row i of C
          const float *ai = a + (size_t)i * K; // row i of A
          for (int k = k0; k < k1; ++k) {
            const float aik = ai[k];
            const float *bk = b + (size_t)k * N; // row k of B
#pragma omp simd
            for (int j = j0; j < j1; ++j) ci[j] += aik * bk[j];
          }
        }
      }
    }
  /* LAB END */
}

/*md
::: zh
## CPU 第 3 级：OpenBLAS

`ct_mm` 在 CPU 张量上就是调用 OpenBLAS 的 `cblas_sgemm`，和 `torch.mm` 在 CPU 上调用 MKL 或 OpenBLAS 一样。本章把它量两次：一次经过运行时（`ct_mm`：检查形状、dtype、设备，从缓存分配器拿一块输出内存，再调用 BLAS），一次直接调用 `cblas_sgemm`，写进预先准备好的缓冲区。两者之比就是运行时的开销，目标是不低于 95%。

OpenBLAS 为什么快这么多？它做了前两级没做的两件事。一是**打包**（packing）：把 A 和 B 的一段复制成连续的小条，按微内核读取的顺序排好，读的时候不再跨行。二是**寄存器分块**：手写的汇编微内核把 C 的一小块（例如 16×4 个 float，放在十几个向量寄存器里）在整个 k 循环中一直留在寄存器里，每次从内存读一个 a 和一个 b 向量，就能做许多次乘加（FMA）。前一级每次乘加要三次访存，这里每次访存对应好几次乘加。GPU 第 4 级用的是同一个思路。
:::
::: en
## CPU rung 3: OpenBLAS

`ct_mm` on CPU tensors calls OpenBLAS's `cblas_sgemm`, as `torch.mm` on the CPU calls MKL or OpenBLAS. The chapter times it twice: through the runtime (`ct_mm`: check shapes, dtypes and devices, take the output from the caching allocator, call BLAS) and calling `cblas_sgemm` directly into a buffer prepared in advance. The ratio of the two is the runtime's overhead; the target is at least 95%.

Why is OpenBLAS so much faster? It does two things the previous rungs do not. First, **packing**: it copies slices of A and B into small contiguous strips, laid out in the order its micro-kernel reads them, so no read crosses rows any more. Second, **register tiling**: a hand-written assembly micro-kernel keeps a small tile of C (for example 16×4 floats in a dozen vector registers) in registers for the whole k loop, and every vector of A and B it loads feeds many fused multiply-adds (FMA). Where the previous rung made three memory accesses per multiply-add, this one makes a fraction of one. The GPU's rung 4 is the same idea.
:::
*/
typedef struct cpu_ctx {
  int which;             // CPU_NAIVE ...
  const ct_tensor *a, *b; // (M, K), (K, N) on the CPU
  const float *pa, *pb;   // their data
  float *c;               // (M, N): the output of naive, blocked and cblas
  ct_tensor *out;         // the last ct_mm result
  int M, N, K;
} cpu_ctx;

static int cpu_product(void *p) {
  cpu_ctx *x = p;
  switch (x->which) {
  case CPU_NAIVE: cpu_naive(x->pa, x->pb, x->c, x->M, x->N, x->K); return CT_OK;
  case CPU_BLOCKED: cpu_blocked(x->pa, x->pb, x->c, x->M, x->N, x->K); return CT_OK;
  case CPU_MM: // torch.mm(a, b): a new tensor each call, from the caching allocator
    ct_free(x->out);
    x->out = ct_mm(x->a, x->b);
    return x->out ? CT_OK : (int)ct_last_status();
  case CPU_CBLAS:
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, x->M, x->N, x->K, 1.0f, x->pa, x->K,
                x->pb, x->N, 0.0f, x->c, x->N);
    return CT_OK;
  }
  return CT_ERR_VALUE;
}

/*md
::: zh
## CPU 的峰值

要说一个版本“达到了峰值的百分之几”，得先知道峰值。CPU 的理论峰值是

$$\text{峰值 (GFLOP/s)} = \text{核数} \times \text{频率 (GHz)} \times \text{每核每周期的 FLOP 数}$$

频率读自 `/proc/cpuinfo` 的 “cpu MHz”。每周期 FLOP 数是一个假设，按 CPU 支持的指令集定：有 AVX2 和 FMA 时，每个核有两个 256 位的 FMA 单元，每周期 2 × 8 个 float × 2（乘和加）= 32 次；有 AVX-512 时按 64 次算（有些 CPU 只有一个 512 位单元，实际减半）；只有 SSE 时按 8 次算。

这个估计不太可靠：睿频时实际频率更高，虚拟机里 “cpu MHz” 常常只是标称值，两个“核”也可能是同一个物理核上的两个超线程，共用同一组运算单元。所以表格里同时给出相对 OpenBLAS 的比例，它不依赖任何假设。

本节还实测一次拷贝带宽（多线程复制一大块内存，读加写的字节数除以时间），峰值除以带宽就是 CPU 的“脊点”：每读一个字节至少要做这么多次运算，运算单元才不会因为等数据而闲着。后面讲 GPU 时会再用到它。
:::
::: en
## The CPU's peak

To say a version reaches some fraction of the peak we need the peak. The CPU's theoretical peak is

$$\text{peak (GFLOP/s)} = \text{cores} \times \text{clock (GHz)} \times \text{FLOPs per core per cycle}$$

The clock is read from "cpu MHz" in `/proc/cpuinfo`. FLOPs per cycle is an assumption made from the instruction sets the CPU reports: with AVX2 and FMA each core has two 256-bit FMA units, 2 × 8 floats × 2 (multiply and add) = 32 per cycle; with AVX-512 we count 64 (some CPUs have a single 512-bit unit and get half); with only SSE, 8.

The estimate is shaky: under turbo the clock runs higher, in a virtual machine "cpu MHz" is often just the nominal value, and two "cores" may be two hyperthreads of one physical core sharing its execution units. So the table also gives every version as a fraction of OpenBLAS, which assumes nothing.

This section also measures a copy bandwidth (several threads copying a large buffer; bytes read plus written over the time). The peak divided by the bandwidth is the CPU's ridge point: how many operations a kernel must do per byte it moves before the arithmetic units, rather than memory, limit it. The GPU sections come back to it.
:::
*/
typedef struct cpu_info {
  int cores;
  double mhz;            // mean "cpu MHz" over the listed CPUs; 0 if absent
  int flops_per_cycle;   // the assumption, from the ISA flags; 0 if unknown
  const char *isa;       // "AVX2+FMA", ...
  double peak_gflops;    // 0 when it cannot be estimated
  double copy_gbs;       // measured
} cpu_info;

static void cpu_info_read(cpu_info *ci) {
  cpu_set_t set;
  ci->cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  ci->mhz = 0;
  ci->flops_per_cycle = 0;
  ci->isa = "unknown";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[4096];
    double sum = 0;
    int n = 0;
    bool flags_seen = false, avx2 = false, fma = false, avx512 = false, sse = false;
    while (fgets(line, sizeof line, f)) {
      const char *v = strchr(line, ':');
      if (!v) continue;
      if (!strncmp(line, "cpu MHz", 7)) {
        sum += atof(v + 1);
        n++;
      } else if (!flags_seen && !strncmp(line, "flags", 5)) {
        flags_seen = true;
        avx2 = strstr(v, " avx2") != NULL;
        fma = strstr(v, " fma") != NULL;
        avx512 = strstr(v, " avx512f") != NULL;
        sse = strstr(v, " sse2") != NULL;
      }
    }
    fclose(f);
    if (n) ci->mhz = sum / n;
    if (avx512 && fma) ci->flops_per_cycle = 64, ci->isa = "AVX-512+FMA";
    else if (avx2 && fma) ci->flops_per_cycle = 32, ci->isa = "AVX2+FMA";
    else if (sse) ci->flops_per_cycle = 8, ci->isa = "SSE2";
  }
  ci->peak_gflops = ci->cores * ci->mhz / 1e3 * ci->flops_per_cycle;
}

// Copy bandwidth: OpenMP threads copy `bytes` between two buffers; read +
// written bytes over the median time. 0 if the buffers cannot be had.
static double cpu_copy_bandwidth(size_t bytes) {
  const size_t n = bytes / sizeof(float);
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  double best[5] = {0};
  if (!x || !y) {
    free(x);
    free(y);
    return 0;
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = (float)i, y[i] = 0; // touch every page first
  ct_event *e0 = ct_event_create(ct_device_cpu(), true), *e1 = ct_event_create(ct_device_cpu(), true);
  for (int r = 0; r < 5 && e0 && e1; r++) {
    float ms = 0;
    ct_event_record(e0, NULL);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    ct_event_record(e1, NULL);
    ct_event_elapsed_time(e0, e1, &ms);
    best[r] = ms > 0 ? 2.0 * (double)bytes / (ms * 1e-3) / 1e9 : 0;
  }
  ct_event_free(e0);
  ct_event_free(e1);
  volatile float sink = y[n / 2]; // keep the copy
  (void)sink;
  free(x);
  free(y);
  return ct_cli_median(best, 5);
}

static void show_cpu(run *rn, cpu_info *ci) {
  ct_cli_section("cpu");
  cpu_info_read(ci);
  ci->copy_gbs = cpu_copy_bandwidth(rn->cli->quick ? (16u << 20) : (64u << 20));
#ifdef _OPENMP
  const int omp = omp_get_max_threads();
#else
  const int omp = 1;
#endif
  printf("usable cores:             %d (OpenMP threads %d, OpenBLAS threads %d)\n", ci->cores, omp,
         openblas_get_num_threads());
  if (ci->mhz > 0) printf("clock (/proc/cpuinfo):    %.0f MHz\n", ci->mhz);
  else printf("clock (/proc/cpuinfo):    unknown (no \"cpu MHz\" line on this CPU)\n");
  if (ci->peak_gflops > 0) {
    printf("FLOPs per cycle per core: %d (assumed from %s: %s)\n", ci->flops_per_cycle, ci->isa,
           ci->flops_per_cycle == 32   ? "2 FMA units x 8 f32 lanes x 2"
           : ci->flops_per_cycle == 64 ? "2 FMA units x 16 f32 lanes x 2, an upper bound"
                                       : "4-wide multiply + 4-wide add");
    printf("peak f32 (estimate):      %.1f GFLOP/s = %d cores x %.3f GHz x %d\n", ci->peak_gflops,
           ci->cores, ci->mhz / 1e3, ci->flops_per_cycle);
  } else {
    printf("peak f32:                 not estimated (clock or vector ISA unknown); the table "
           "reports the fraction of OpenBLAS only\n");
  }
  printf("copy bandwidth:           %.1f GB/s (measured: read + write, %d MiB)\n", ci->copy_gbs,
         rn->cli->quick ? 16 : 64);
  if (ci->peak_gflops > 0 && ci->copy_gbs > 0)
    printf("ridge point:              %.1f FLOP/byte (peak / bandwidth)\n", ci->peak_gflops / ci->copy_gbs);
  ct_metrics_num(rn->m, "cpu_cores", ci->cores);
  ct_metrics_num(rn->m, "cpu_mhz", ci->mhz);
  ct_metrics_num(rn->m, "cpu_flops_per_cycle", ci->flops_per_cycle);
  ct_metrics_num(rn->m, "cpu_peak_gflops", ci->peak_gflops > 0 ? ci->peak_gflops : NAN);
  ct_metrics_num(rn->m, "cpu_copy_bandwidth_gbs", ci->copy_gbs);
}
/*md output cpu*/

/*md
::: zh
## CPU 的梯子

每个尺寸先生成 A 和 B（`ct_randn`，标准正态分布），算好参考值，然后依次跑四个版本：把输出填满 NaN，算一次，比对，通过了再计时。表中 “of cblas” 是相对直接调用 OpenBLAS 的比例，“of peak” 是相对上面估计的峰值的比例。
:::
::: en
## The CPU's ladder

For each size the chapter draws A and B (`ct_randn`, standard normal), builds the reference, then runs the four versions in turn: fill the output with NaN, compute once, check, and time only what passed. In the table "of cblas" is the fraction of OpenBLAS called directly and "of peak" the fraction of the peak estimated above.
:::
*/
static void print_table_row(const version *v, double ms, double gflops, double base, double peak) {
  printf("  %-15s %-38s %10.3f %10.1f", v->name, v->label, ms, gflops);
  if (base > 0) printf(" %8.1f%%", 100.0 * gflops / base);
  else printf(" %9s", "-");
  if (peak > 0) printf(" %8.1f%%\n", 100.0 * gflops / peak);
  else printf(" %9s\n", "n/a");
}

static void run_cpu_ladder(run *rn, const cpu_info *ci, ladder *L) {
  ct_cli_section("cpu ladder");
  const ct_device cpu = ct_device_cpu();
  const double budget = rn->cli->quick ? 150 : 1000; // ms per version and size
  for (int s = 0; s < L->nsizes; s++) {
    const int n = L->sizes[s], M = n, N = n, K = n;
    ct_cli_exit_if_interrupted(rn->cli); // Ctrl-C: stop between sizes
    ct_tensor *a = ct_randn(CT_SHAPE(M, K), CT_F32, cpu); // a is (M, K)
    ct_tensor *b = ct_randn(CT_SHAPE(K, N), CT_F32, cpu); // b is (K, N)
    float *c = malloc(sizeof(float) * (size_t)M * N);     // c is (M, N)
    if (!a || !b) ct_cli_die(rn->cli);
    if (!c) die_oom(rn, "C");
    reference ref;
    reference_build(rn, &ref, ct_data_ptr(a), ct_data_ptr(b), M, N, K, rn->cli->seed * 1000003u + (uint64_t)n);
    printf("n = %d: %.3f GFLOP per product\n", n, flops_of(M, N, K) / 1e9);
    const bool dump = rn->dump && s == 0;
    if (dump && !(dump_floats(rn->dump, "a.f32", ct_data_ptr(a), (size_t)M * K) &&
                  dump_floats(rn->dump, "b.f32", ct_data_ptr(b), (size_t)K * N)))
      exit(1);

    cpu_ctx x[CPU_NV];
    bool passed[CPU_NV] = {false};
    for (int v = 0; v < CPU_NV; v++) {
      const version *ver = &CPU_VERSIONS[v];
      x[v] = (cpu_ctx){.which = v, .a = a, .b = b, .pa = ct_data_ptr(a), .pb = ct_data_ptr(b), .c = c,
                       .M = M, .N = N, .K = K};
      if (v == CPU_NAIVE && n > NAIVE_CPU_MAX) {
        // The estimate: the time at 512 scaled by the work, n^3.
        double t512 = NAN;
        for (int q = 0; q < s; q++)
          if (L->sizes[q] == NAIVE_CPU_MAX) t512 = L->ms[CPU_NAIVE][q];
        printf("skip %s %d: O(n^3) work with a cache miss per step down B's column", ver->name, n);
        if (isfinite(t512))
          printf("; at the n = %d rate one product would take at least %.1f s", NAIVE_CPU_MAX,
                 t512 * pow((double)n / NAIVE_CPU_MAX, 3) / 1e3);
        printf("\n");
        continue;
      }
      for (size_t t = 0; t < (size_t)M * N; t++) c[t] = NAN; // what is not written fails
      if (cpu_product(&x[v]) != CT_OK) {
        report_error(rn, ver, n);
        continue;
      }
      float *res = v == CPU_MM ? ct_data_ptr(x[v].out) : c; // CPU tensors live in host memory
      if (dump) {
        char name[64];
        snprintf(name, sizeof name, "c_%s.f32", ver->name);
        if (!dump_floats(rn->dump, name, res, (size_t)M * N)) exit(1);
      }
      passed[v] = report_check(rn, ver, &ref, res, &L->err[v][s]); // only what passed is timed
      if (passed[v] && v < CPU_MM && time_median(cpu, cpu_product, &x[v], budget, &L->ms[v][s]) != CT_OK) {
        report_error(rn, ver, n);
        passed[v] = false;
      }
    }
    // OpenBLAS through ct_mm and called directly, timed in alternation.
    int ids[2], nt = 0;
    product_fn fns[2] = {cpu_product, cpu_product};
    void *ctxs[2];
    double ms[2];
    for (int v = CPU_MM; v <= CPU_CBLAS; v++)
      if (passed[v]) ids[nt] = v, ctxs[nt++] = &x[v];
    if (nt && time_interleaved(cpu, nt, fns, ctxs, nt * budget, ms) != CT_OK) {
      for (int t = 0; t < nt; t++) report_error(rn, &CPU_VERSIONS[ids[t]], n), passed[ids[t]] = false;
      nt = 0;
    }
    for (int t = 0; t < nt; t++) L->ms[ids[t]][s] = ms[t];
    for (int v = 0; v < CPU_NV; v++)
      if (passed[v]) L->gflops[v][s] = flops_of(M, N, K) / (L->ms[v][s] * 1e-3) / 1e9;
    ct_free(x[CPU_MM].out);

    const double base = L->gflops[CPU_CBLAS][s];
    printf("  %-15s %-38s %10s %10s %9s %9s\n", "version", "", "ms", "GFLOP/s", "of cblas", "of peak");
    for (int v = 0; v < CPU_NV; v++)
      if (isfinite(L->gflops[v][s]))
        print_table_row(&CPU_VERSIONS[v], L->ms[v][s], L->gflops[v][s], base, ci->peak_gflops);
    if (isfinite(L->gflops[CPU_MM][s]) && base > 0)
      printf("  runtime overhead: ct_mm reaches %.1f%% of cblas_sgemm\n", 100.0 * L->gflops[CPU_MM][s] / base);
    reference_free(&ref);
    free(c);
    ct_free(a);
    ct_free(b);
  }
  print_timing_note(rn->m, "cpu");
}
/*md output cpu ladder*/

/*md
::: zh
### 读这张表

{{claim recorded cpu_naive_of_peak[2] < 0.1 and recorded cpu_blocked_gflops[0] / recorded cpu_naive_gflops[0] > 3 and recorded cpu_blocked_gflops[-1] < recorded cpu_blocked_gflops[1] and recorded cpu_cblas_gflops[2] / recorded cpu_naive_gflops[2] > 50}}在一台安静的机器上完整运行时，三重循环只能达到峰值估计的很小一部分；分块循环在小尺寸上快得多，但尺寸变大后又慢下来，因为它每次乘加都要读写 C；OpenBLAS 远远领先，比第 1 级快两个数量级。{{end}}本章正文里的数字取自{{recorded @run}}：在 n = {{recorded cpu_sizes[2]}} 上，三重循环 {{recorded cpu_naive_gflops[2] %.1f}} GFLOP/s，分块循环 {{recorded cpu_blocked_gflops[2] %.1f}} GFLOP/s，OpenBLAS {{recorded cpu_cblas_gflops[2] %.1f}} GFLOP/s。上面的输出框是本书构建时的运行；它是冒烟运行时，框上写明了，其中的计时不能用来比较快慢。同一段 C 代码，仅仅因为访存方式不同，就差出两个数量级，这是本章最重要的一课，在 GPU 上会再看到一次。

`ct_mm` 和直接调用 `cblas_sgemm` 轮流计时，{{claim recorded cpu_mm_of_cblas[-1] about 1 within 5%}}两者之比在安静的机器上接近 100%，说明运行时的检查和缓存分配器几乎不花时间{{end}}；在忙碌的共享机器上，这个比例会上下跳动几个百分点，小尺寸时更明显（一次调用只有几十微秒）。
:::
::: en
### Reading the table

{{claim recorded cpu_naive_of_peak[2] < 0.1 and recorded cpu_blocked_gflops[0] / recorded cpu_naive_gflops[0] > 3 and recorded cpu_blocked_gflops[-1] < recorded cpu_blocked_gflops[1] and recorded cpu_cblas_gflops[2] / recorded cpu_naive_gflops[2] > 50}}In a full run on a quiet machine the triple loop reaches only a small fraction of the estimated peak; the blocked loop is much faster at small sizes but slows down again as the size grows, because it reads and writes C for every multiply-add; OpenBLAS is far ahead, two orders of magnitude above rung 1.{{end}} The numbers in this chapter's text come from {{recorded @run}}: at n = {{recorded cpu_sizes[2]}}, the triple loop {{recorded cpu_naive_gflops[2] %.1f}} GFLOP/s, the blocked loop {{recorded cpu_blocked_gflops[2] %.1f}} GFLOP/s, OpenBLAS {{recorded cpu_cblas_gflops[2] %.1f}} GFLOP/s. The box above is the run made when this book was built; when it is a smoke run its label says so, and its timings do not compare speeds. The same arithmetic in C, differing only in how it touches memory, spans two orders of magnitude: the chapter's most important lesson, and the GPU will teach it again.

`ct_mm` and `cblas_sgemm` called directly are timed in alternation. {{claim recorded cpu_mm_of_cblas[-1] about 1 within 5%}}On a quiet machine their ratio is close to 100%: the runtime's checks and its caching allocator cost next to nothing.{{end}} On a busy shared machine the ratio jumps around by several percent, more so at small sizes, where one call lasts tens of microseconds.
:::
*/

/*md
::: zh
## GPU 为什么能赢：屋顶线模型

GPU 和 CPU 的差别可以归结为两个数，本节从 `ct_cuda_get_device_properties` 算出它们（第 1 章讲过公式）：

- **算力峰值**：SM 数 × 每 SM 的 FP32 单元数 × 2 × 时钟。H100 有 132 个 SM，每个 128 个 FP32 单元，将近 2 GHz，约 67 TFLOP/s。上一节估计的 CPU 峰值，在构建本书的机器上是 {{metric cpu_peak_gflops %.0f}} GFLOP/s（{{metric cpu_cores}} 个核），只是它的很小一部分；即使是 64 核的服务器 CPU，也只有它的十分之一左右。差距来自并行度：GPU 每个周期同时做一万六千多次 FMA（132 × 128），按上一节的估计，构建本书的 CPU 每个核每周期做 {{metric cpu_flops_per_cycle}} 次 FLOP，也就是它的一半次数的 FMA。
- **显存带宽**：H100 的 HBM3 约 3.35 TB/s。大型服务器 CPU 的内存带宽是它的几分之一，台式机和小虚拟机只有它的几十分之一到几百分之一（本机实测的拷贝带宽见上一节）。

屋顶线（roofline）模型把两者合在一起：一个核函数每从显存读一个字节做 I 次运算（I 叫算术强度，FLOP/byte），它最多能达到

$$\min(\text{算力峰值},\ I \times \text{带宽})$$

两者相等处的 I = 峰值 / 带宽 叫脊点，H100 上约 20 FLOP/byte。强度低于脊点，核函数受带宽限制；高于脊点，才可能受算力限制。

矩阵乘法本身的强度很高：n³ 次乘加只需要读 2n² 个数、写 n² 个数，I = 2n³ / (12n²) = n/6，n = 4096 时是 683，远高于脊点。但这是数据被完美复用时的强度；实际能达到多少，取决于核函数让每个从显存读来的数被用了几次：

- 朴素核函数每做一次乘加（2 FLOP）读两个 float（8 字节）：I = 0.25，最多只能用到带宽允许的那一点点算力（缓存会帮一些忙，所以实测可能高一点）；
- 32×32 共享内存分块：每个读进来的数用 32 次，I = 2·32/8 = 8；
- 128×128 的寄存器分块，每步读 (128 + 128) × 8 个 float，做 2 × 128 × 128 × 8 次运算：I = 32，越过了脊点。

所以梯子的每一级，本质上都是在提高数据复用，把核函数从屋顶线的斜坡上推到平顶上。
:::
::: en
## Why a GPU can win: the roofline

The difference between a GPU and a CPU comes down to two numbers, which this section computes from `ct_cuda_get_device_properties` (chapter 1 derived the formulas):

- **Peak arithmetic**: SMs × FP32 lanes per SM × 2 × clock. An H100 has 132 SMs of 128 FP32 lanes at nearly 2 GHz, about 67 TFLOP/s. The CPU peak estimated above is {{metric cpu_peak_gflops %.0f}} GFLOP/s on the machine that built this book ({{metric cpu_cores}} cores), a small fraction of that; even a 64-core server CPU reaches only about a tenth of it. The gap is parallelism: the GPU completes nearly seventeen thousand FMAs per cycle (132 × 128), while a core of the CPU that built this book does {{metric cpu_flops_per_cycle}} FLOPs per cycle by the estimate above, half as many FMAs.
- **Memory bandwidth**: an H100's HBM3 moves about 3.35 TB/s. A large server CPU's memory manages a fraction of that, a desktop or a small virtual machine a few percent or less (the copy bandwidth measured on this machine is in the section above).

The roofline model puts the two together: a kernel that does I operations per byte it reads from memory (I is its arithmetic intensity, in FLOP/byte) reaches at most

$$\min(\text{peak},\ I \times \text{bandwidth})$$

The I where the two are equal, peak / bandwidth, is the ridge point, about 20 FLOP/byte on an H100. Below the ridge a kernel is bound by bandwidth; only above it can it be bound by arithmetic.

Matrix multiplication itself has a high intensity: n³ multiply-adds need only 2n² numbers read and n² written, I = 2n³ / (12n²) = n/6, 683 at n = 4096, far above the ridge. But that is the intensity with perfect reuse; what a kernel achieves depends on how many times it uses each number it fetches from memory:

- the naive kernel reads two floats (8 bytes) per multiply-add (2 FLOP): I = 0.25, so it can use only the sliver of arithmetic the bandwidth allows (caches help somewhat, so it may measure a little higher);
- 32×32 shared-memory tiles use each fetched number 32 times: I = 2·32/8 = 8;
- 128×128 register tiles fetch (128 + 128) × 8 floats per step and do 2 × 128 × 128 × 8 operations with them: I = 32, past the ridge.

Each rung of the ladder, at heart, raises the reuse of data and pushes the kernel from the roofline's slope onto its flat top.
:::
*/
typedef struct gpu_info {
  bool present;
  bool emulated; // the SIMT emulator (tools/sim), not a GPU: checks only, no speeds
  double peak_gflops, bandwidth_gbs;
} gpu_info;

static void show_gpu(run *rn, const cpu_info *ci, gpu_info *gi) {
  ct_cli_section("gpu");
  *gi = (gpu_info){0};
  // Intensities from the kernels' tile sizes: FLOP per byte fetched from global memory.
  static const struct { const char *what; double flop_per_byte; } rungs[] = {
      {"naive, coalesced: 2 FLOP per 2 floats", 2.0 / 8.0},
      {"smem_tiled 32x32: 2*32 FLOP per 2 floats", 2.0 * 32 / 8.0},
      {"reg_tiled 128x128, BK=8: 2*128*128*8 per 256*8 floats", 2.0 * 128 * 128 * 8 / (256.0 * 8 * 4)},
  };
  if (rn->cli->device.type != CT_CUDA) {
    printf("no GPU in use (%s); the GPU ladder needs --device cuda on a machine with one\n",
           rn->cli->fallback_reason[0] ? rn->cli->fallback_reason : "--device cpu");
    printf("arithmetic intensity of each GPU rung (device-independent):\n");
    for (int r = 0; r < COUNT(rungs); r++) printf("  %-56s %6.2f FLOP/byte\n", rungs[r].what, rungs[r].flop_per_byte);
    if (ci->peak_gflops > 0 && ci->copy_gbs > 0)
      printf("this CPU: peak %.1f GFLOP/s, %.1f GB/s, ridge %.1f FLOP/byte\n", ci->peak_gflops, ci->copy_gbs,
             ci->peak_gflops / ci->copy_gbs);
    return;
  }
  ct_cuda_device_properties p;
  if (ct_cuda_get_device_properties(rn->cli->device.index, &p) != CT_OK) ct_cli_die(rn->cli);
  gi->present = true;
  if (!strcmp(p.name, "emulated")) { // the sim build's device (tools/sim): no clocks, no memory system
    gi->emulated = true;
    printf("device:                   %s (the SIMT emulator of tools/sim, on this CPU), compute capability %d.%d\n",
           p.name, p.major, p.minor);
    printf("no peak and no bandwidth: the emulator runs every CUDA thread as a fiber on the CPU and has no\n"
           "memory system (coalescing, shared-memory banks, caches); the roofline needs a GPU\n");
    printf("arithmetic intensity of each GPU rung (device-independent):\n");
    for (int r = 0; r < COUNT(rungs); r++) printf("  %-56s %6.2f FLOP/byte\n", rungs[r].what, rungs[r].flop_per_byte);
    ct_metrics_str(rn->m, "gpu_name", p.name);
    ct_metrics_num(rn->m, "gpu_emulated", 1);
    return;
  }
  gi->peak_gflops = p.peak_fp32_gflops;
  gi->bandwidth_gbs = p.peak_memory_bandwidth_gbs;
  printf("device:                   %s, %d SMs, compute capability %d.%d\n", p.name, p.multi_processor_count,
         p.major, p.minor);
  if (p.fp32_lanes_per_sm > 0)
    printf("peak FP32:                %.0f GFLOP/s = %d SMs x %d lanes x 2 x %.3f GHz\n", p.peak_fp32_gflops,
           p.multi_processor_count, p.fp32_lanes_per_sm, p.clock_rate_khz / 1e6);
  else
    printf("peak FP32:                unknown for compute capability %d.%d\n", p.major, p.minor);
  printf("peak memory bandwidth:    %.0f GB/s = 2 x %.0f MHz x %d bits / 8\n", p.peak_memory_bandwidth_gbs,
         p.memory_clock_rate_khz / 1e3, p.memory_bus_width_bits);
  const double ridge = gi->bandwidth_gbs > 0 ? gi->peak_gflops / gi->bandwidth_gbs : NAN;
  printf("ridge point:              %.1f FLOP/byte (peak FP32 / bandwidth)\n", ridge);
  printf("roof for each rung: min(peak, intensity x bandwidth)\n");
  for (int r = 0; r < COUNT(rungs); r++) {
    const double roof = fmin(gi->peak_gflops, rungs[r].flop_per_byte * gi->bandwidth_gbs);
    printf("  %-56s %6.2f FLOP/byte -> at most %8.0f GFLOP/s (%s-bound)\n", rungs[r].what,
           rungs[r].flop_per_byte, roof, rungs[r].flop_per_byte < ridge ? "bandwidth" : "compute");
  }
  printf("  %-56s %6.0f FLOP/byte\n", "the whole product at n = 4096: n/6", 4096.0 / 6);
  if (ci->peak_gflops > 0 && ci->copy_gbs > 0)
    printf("against this CPU:         %.0fx the peak, %.0fx the bandwidth\n", gi->peak_gflops / ci->peak_gflops,
           gi->bandwidth_gbs / ci->copy_gbs);
  ct_metrics_str(rn->m, "gpu_name", p.name);
  ct_metrics_num(rn->m, "gpu_peak_fp32_gflops", gi->peak_gflops);
  ct_metrics_num(rn->m, "gpu_peak_bandwidth_gbs", gi->bandwidth_gbs);
  ct_metrics_num(rn->m, "gpu_ridge_flop_per_byte", ridge);
}
/*md output gpu*/

/*md
::: zh
## GPU 的梯子

前四级是本章自己的核函数，在 `ch04_kernels.cu` 里，每个都是一个 `static __global__` 函数加一个 `extern "C"` 的启动函数；启动函数检查参数，在当前流上启动，再用 `cudaGetLastError()` 检查启动是否成功。

1. **朴素**：每个线程算 C 的一个元素，`threadIdx.x` 对应行 i。一个 warp 的 32 个线程于是处在同一列、相邻的 32 行上：每走一步 k，它们读 A 的 32 个相距 K 个 float 的元素，分成 32 次内存事务，每次取 32 字节只用 4 字节。
2. **合并访存**（coalescing）：只把 `threadIdx.x` 改成对应列 j。现在一个 warp 读 B 的一行上连续的 32 个 float（一次 128 字节的事务），A 的元素对整个 warp 是同一个（广播）。算术完全没变，只是线程和数据的对应关系变了，速度可以差出好几倍。
3. **共享内存分块**：一个 32×32 的线程块负责 C 的一个 32×32 的块。沿 k 每次把 A 和 B 的 32×32 小块搬进共享内存（片上存储，延迟和寄存器相近），`__syncthreads()` 之后每个线程做 32 次乘加。每个从显存读来的数被用了 32 次。这个核函数的函数体是本章的第二个练习区。
4. **寄存器分块**：一个 256 线程的块负责 128×128 的 C 块，每个线程负责 8×8 = 64 个输出，一直放在寄存器里。每步 k 每个线程从共享内存读 8 个 A 值和 8 个 B 值（用 float4 一次读 4 个），做 64 次 FMA。这就是 OpenBLAS 微内核的想法搬到 GPU 上：共享内存的读取也是有代价的，寄存器里的数据才是免费的。再加上双缓冲：算这一块时，下一块已经在从显存读进寄存器。这一级在 H100 的 4096 上的目标是达到 cuBLAS SGEMM 的一半以上。
5. **cuBLAS SGEMM**：`ct_mm` 在 GPU 上调用 cuBLAS，TF32 关闭，和 `torch.backends.cuda.matmul.allow_tf32 = False`（PyTorch 的默认值）时的 `torch.mm` 一样。cuBLAS 在此之上还有 warp 级分块、异步拷贝、为每种 GPU 单独调过的参数。
6. **TF32**：`ct_set_allow_tf32(true)` 对应 `torch.backends.cuda.matmul.allow_tf32 = True`。同样是 f32 张量，cuBLAS 改用 Tensor Core：读入时把尾数截到 10 位，乘积在 f32 中累加。Tensor Core 是专做小矩阵乘加的单元，不走上面算峰值用的 FP32 单元，所以它的“占峰值比例”可以超过 100%。
7. **BF16 和 FP16**：先把 A、B 转成 bf16 或 fp16（不计时），再 `ct_mm`。输入和输出都是 16 位，内部用 f32 累加。每个数只占 2 字节，Tensor Core 的吞吐量又比 TF32 高一倍，是训练时用混合精度（AMP）的原因。

表中 “of cuBLAS” 是相对第 5 级的比例，“of peak” 是相对 FP32 峰值的比例。
:::
::: en
## The GPU's ladder

The first four rungs are the chapter's own kernels, in `ch04_kernels.cu`: each a `static __global__` function and an `extern "C"` launcher that checks its arguments, launches on the current stream and checks the launch with `cudaGetLastError()`.

1. **Naive**: one thread per element of C, `threadIdx.x` mapped to the row i. The 32 threads of a warp thus sit in one column, on 32 adjacent rows: at each step in k they read 32 elements of A that are K floats apart, 32 separate memory transactions that each fetch 32 bytes to use 4.
2. **Coalesced**: only `threadIdx.x` is remapped, to the column j. A warp now reads 32 consecutive floats of a row of B (one 128-byte transaction), and the element of A is the same for the whole warp (a broadcast). The arithmetic is unchanged; only the mapping of threads to data differs, and the speed can differ several-fold.
3. **Shared-memory tiles**: a 32×32 block of threads owns a 32×32 tile of C. Stepping along k it copies 32×32 tiles of A and B into shared memory (on-chip storage, nearly as fast as registers), and after `__syncthreads()` each thread does 32 multiply-adds. Every number fetched from device memory is used 32 times. This kernel's body is the chapter's second lab region.
4. **Register tiles**: a block of 256 threads owns a 128×128 tile of C; each thread owns 8×8 = 64 outputs and keeps them in registers. At each k every thread reads 8 values of A and 8 of B from shared memory (4 at a time, as float4) and does 64 FMAs with them. This is OpenBLAS's micro-kernel brought to the GPU: reads from shared memory cost something too, only data in registers is free. Add double buffering: while one slice is being computed on, the next is already on its way from device memory into registers. The target for this rung is more than half of cuBLAS SGEMM at 4096 on an H100.
5. **cuBLAS SGEMM**: `ct_mm` on the GPU calls cuBLAS with TF32 off, like `torch.mm` with `torch.backends.cuda.matmul.allow_tf32 = False` (PyTorch's default). On top of rung 4 cuBLAS adds warp-level tiling, asynchronous copies and parameters tuned for each GPU.
6. **TF32**: `ct_set_allow_tf32(true)` mirrors `torch.backends.cuda.matmul.allow_tf32 = True`. The tensors are still f32, but cuBLAS uses the tensor cores: the inputs are cut to 10 stored significand bits as they are read, and the products are summed in f32. Tensor cores are units made for small matrix multiply-adds, separate from the FP32 lanes the peak above counts, so their "fraction of peak" can exceed 100%.
7. **BF16 and FP16**: A and B are first converted to bf16 or fp16 (not timed), then `ct_mm`. Inputs and outputs are 16-bit, accumulation inside is f32. Each number takes 2 bytes and the tensor cores' throughput doubles again over TF32: the reason training uses mixed precision (AMP).

In the table "of cuBLAS" is the fraction of rung 5, "of peak" the fraction of the FP32 peak.
:::
*/
/*md
::: zh
{{fig tiling}} 是第 3 级（`mm_smem_tiled`）的思路。朴素核函数的每次乘加都去全局内存读 A 和 B 各一个元素；分块核函数让线程块每一轮先把 A、B 的一对 32×32 小块搬进共享内存，`__syncthreads()` 之后，小块里的每个元素被块内的线程用 32 次，累加和一直留在寄存器里，K/32 轮之后才写回 C 一次。全局内存的读因此减少到原来的 1/32；这能换来多少速度，看下面在 GPU 上量到的阶梯。
:::
::: en
{{fig tiling}} is the idea of rung 3 (`mm_smem_tiled`). The naive kernel reads one element of A and one of B from global memory for every multiply-add; the tiled kernel has the thread block first copy a pair of 32×32 tiles of A and B into shared memory each round, and after `__syncthreads()` each element of a tile is used 32 times by the block's threads, while the running sum stays in a register and is written to C once, after K/32 rounds. Global reads fall to 1/32; what that buys in speed is what the GPU ladder below measures.
:::
*/
/*md figure tiling: 分块矩阵乘法爬的内存层次：全局内存 → 共享内存的小块 → 寄存器 | The memory hierarchy a tiled matmul climbs: global memory → shared-memory tiles → registers*/
/*md
::: zh
### 没有 GPU：模拟设备

没有 GPU 也能运行这架梯子。`sim-runtime` 构建（`tools/sim`）把 `ch04_kernels.cu` 当作普通 C++ 编译，链接一个小小的 SIMT 模拟器，`--device cuda` 就落在一个模拟设备上：`./ch04 --device cuda` 的第一行是 `device: cuda:0 (emulated)`，整架 GPU 梯子在 n = 128 和 256 上运行（`--quick` 只跑 128），和同一个 float64 参考结果比对。cuBLAS 的几级在 cuBLAS 的接口后面由 OpenBLAS 计算（TF32 在那里就是完整的 f32）。

它能展示的是 CUDA 的执行模型，和核函数写的一模一样：网格由线程块组成，块里每个线程有自己的 `threadIdx`，每个块有自己的一份 `__shared__` 小块，`__syncthreads()` 是真正的栅栏：每个线程是一个纤程，运行到栅栏停下，所有线程都到了才有人能通过。把第 3 级的第二个 `__syncthreads()` 去掉，模拟器的竞争检查会报告这个冒险、涉及的两个线程和共享内存里的那个字节；越过 A 末尾的下标由 AddressSanitizer 报告，并指出核函数、线程块和线程。在调试器里，`mm_smem_tiled` 里的断点对每个线程停一次（见 README 的“模拟设备”一节）。

它不能展示的，恰恰是本章要量的东西：没有内存系统（没有合并访存，所以第 1 级和第 2 级做的事完全一样；没有共享内存的 bank，没有缓存，也不会用完寄存器），也没有速度。它的时间是一台 CPU 为每个 CUDA 线程跑一个纤程的时间：本章把它标为 “emulated ms”，不由它算 GFLOP/s、比例或加速比，它也从不进入本书。第 2 级比第 1 级快多少、第 4 级离 cuBLAS 多远，只有 GPU 能回答。
:::
::: en
### Without a GPU: the emulated device

The ladder runs without a GPU too. The `sim-runtime` build (`tools/sim`) compiles `ch04_kernels.cu` as ordinary C++ against a small SIMT emulator, and `--device cuda` lands on an emulated device: `./ch04 --device cuda` prints `device: cuda:0 (emulated)` first and runs the whole GPU ladder at n = 128 and 256 (`--quick`: 128), checked against the same float64 reference. The cuBLAS rungs are computed by OpenBLAS behind cuBLAS's interface (TF32 there is full f32).

What it shows is CUDA's execution model, exactly as the kernels state it: a grid of blocks, each thread of a block with its own `threadIdx`, one `__shared__` tile per block, and `__syncthreads()` as a real barrier: every thread is a fiber that runs until it reaches the barrier, and none goes past it until all have arrived. Leave out rung 3's second `__syncthreads()` and the emulator's race check reports the hazard, the two threads and the byte of shared memory; an index past the end of A is reported by AddressSanitizer with the kernel, the block and the thread. In a debugger a breakpoint in `mm_smem_tiled` stops once for each thread (the README's section on the emulated device).

What it cannot show is precisely what this chapter measures: there is no memory system (no coalescing, so rungs 1 and 2 do exactly the same work; no shared-memory banks, no caches, no registers to run out of), and no speed. Its times are those of a CPU running one fiber per CUDA thread: the chapter labels them "emulated ms", derives no GFLOP/s, fraction or speed-up from them, and they never enter this book. How much faster rung 2 is than rung 1, or how close rung 4 comes to cuBLAS, only a GPU can say.
:::
*/
/*md source ch04_kernels.cu*/
#ifdef CT_HAVE_CUDA
typedef struct gpu_ctx {
  int which;                   // GPU_NAIVE ...
  const ct_tensor *a, *b;      // the operands of ct_mm: f32, or their bf16/f16 copies
  const float *pa, *pb;        // f32 device data for the own kernels
  float *pc;                   // (M, N) device output of the own kernels
  ct_tensor *out;              // the last ct_mm result
  void *stream;                // cudaStream_t of the current stream
  int M, N, K;
} gpu_ctx;

static int gpu_product(void *p) {
  gpu_ctx *x = p;
  switch (x->which) {
  case GPU_NAIVE: return ch04_gpu_naive(x->pa, x->pb, x->pc, x->M, x->N, x->K, x->stream);
  case GPU_COALESCED: return ch04_gpu_coalesced(x->pa, x->pb, x->pc, x->M, x->N, x->K, x->stream);
  case GPU_SMEM: return ch04_gpu_smem_tiled(x->pa, x->pb, x->pc, x->M, x->N, x->K, x->stream);
  case GPU_REG: return ch04_gpu_reg_tiled(x->pa, x->pb, x->pc, x->M, x->N, x->K, x->stream);
  default: // the cuBLAS rungs: torch.backends.cuda.matmul.allow_tf32, then torch.mm
    ct_set_allow_tf32(x->which == GPU_MM_TF32);
    ct_free(x->out);
    x->out = ct_mm(x->a, x->b);
    return x->out ? CT_OK : (int)ct_last_status();
  }
}
/*md twin gpu_mm*/

// Copies a version's (M, N) result to host memory `c` as float32.
static int gpu_result_to_host(const gpu_ctx *x, const ct_tensor *c_dev, float *c) {
  const size_t bytes = sizeof(float) * (size_t)x->M * x->N;
  if (x->which < GPU_MM_F32) return ct_copy_to_host(c_dev, c, bytes);
  ct_tensor *f = ct_to_dtype(x->out, CT_F32); // bf16/f16 -> f32 is exact
  if (!f) return ct_last_status();
  int rc = ct_copy_to_host(f, c, bytes);
  ct_free(f);
  return rc;
}
#endif

static void run_gpu_ladder(run *rn, const gpu_info *gi, ladder *L) {
  ct_cli_section("gpu ladder");
  if (!gi->present) {
    printf("skipped: no GPU in use; run with --device cuda on a machine that has one\n");
    return;
  }
#ifdef CT_HAVE_CUDA
  const ct_device dev = rn->cli->device;
  const double budget = rn->cli->quick ? 100 : 500;
  if (gi->emulated) {
    printf("emulated device: sizes for the emulator, n =");
    for (int s = 0; s < L->nsizes; s++) printf(" %d", L->sizes[s]);
    printf(" (on a GPU: up to %d); each rung is checked as on a GPU and run once; its time is the emulator's\n"
           "on this CPU, labelled \"emulated ms\", and says nothing about a GPU's speed\n",
           rn->cli->quick ? GPU_SIZES_QUICK[COUNT(GPU_SIZES_QUICK) - 1] : GPU_SIZES[COUNT(GPU_SIZES) - 1]);
  }
  void *stream = ct_stream_handle(ct_current_stream(dev));
  for (int s = 0; s < L->nsizes; s++) {
    const int n = L->sizes[s], M = n, N = n, K = n;
    ct_cli_exit_if_interrupted(rn->cli); // Ctrl-C: stop between sizes
    const size_t mn = (size_t)M * N;
    ct_tensor *a = ct_randn(CT_SHAPE(M, K), CT_F32, dev); // a is (M, K), on the GPU
    ct_tensor *b = ct_randn(CT_SHAPE(K, N), CT_F32, dev); // b is (K, N)
    ct_tensor *c = ct_empty(CT_SHAPE(M, N), CT_F32, dev); // c is (M, N): rungs 1-4 write it
    ct_tensor *a16[2] = {ct_to_dtype(a, CT_BF16), ct_to_dtype(a, CT_F16)};
    ct_tensor *b16[2] = {ct_to_dtype(b, CT_BF16), ct_to_dtype(b, CT_F16)};
    if (!a || !b || !c || !a16[0] || !a16[1] || !b16[0] || !b16[1]) ct_cli_die(rn->cli);
    float *ha = malloc(sizeof(float) * (size_t)M * K), *hb = malloc(sizeof(float) * (size_t)K * N);
    float *hc = malloc(sizeof(float) * mn);
    if (!ha || !hb || !hc) die_oom(rn, "host copies");
    if (ct_copy_to_host(a, ha, sizeof(float) * (size_t)M * K) || ct_copy_to_host(b, hb, sizeof(float) * (size_t)K * N))
      ct_cli_die(rn->cli);
    reference ref;
    reference_build(rn, &ref, ha, hb, M, N, K, rn->cli->seed * 1000003u + (uint64_t)n + 7);
    printf("n = %d: %.1f GFLOP per product\n", n, flops_of(M, N, K) / 1e9);

    for (int v = 0; v < GPU_NV; v++) {
      const version *ver = &GPU_VERSIONS[v];
      gpu_ctx x = {.which = v, .a = a, .b = b, .pa = ct_data_ptr(a), .pb = ct_data_ptr(b),
                   .pc = ct_data_ptr(c), .stream = stream, .M = M, .N = N, .K = K};
      if (v == GPU_MM_BF16) x.a = a16[0], x.b = b16[0];
      if (v == GPU_MM_F16) x.a = a16[1], x.b = b16[1];
      int rc = ct_fill_(c, NAN); // what a kernel forgets to write fails the check
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      if (!rc) rc = gpu_product(&x);
      if (!rc) rc = ct_stream_synchronize(ct_current_stream(dev));
      clock_gettime(CLOCK_MONOTONIC, &t1);
      if (!rc) rc = gpu_result_to_host(&x, c, hc);
      if (rc) {
        report_error(rn, ver, n);
      } else if (report_check(rn, ver, &ref, hc, &L->err[v][s])) {
        if (gi->emulated) // one run's host time: shown as "emulated ms", never a speed
          L->ms[v][s] = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
        else if (time_median(dev, gpu_product, &x, budget, &L->ms[v][s]) == CT_OK)
          L->gflops[v][s] = flops_of(M, N, K) / (L->ms[v][s] * 1e-3) / 1e9;
        else
          report_error(rn, ver, n);
      }
      ct_free(x.out);
      ct_set_allow_tf32(false);
    }
    const double base = L->gflops[GPU_MM_F32][s];
    if (gi->emulated) { // no GFLOP/s and no fractions: the emulator's time is no GPU's
      printf("  %-15s %-38s %12s\n", "version", "", "emulated ms");
      for (int v = 0; v < GPU_NV; v++)
        if (isfinite(L->ms[v][s])) printf("  %-15s %-38s %12.1f\n", GPU_VERSIONS[v].name, GPU_VERSIONS[v].label, L->ms[v][s]);
    } else {
      printf("  %-15s %-38s %10s %10s %9s %9s\n", "version", "", "ms", "GFLOP/s", "of cuBLAS", "of peak");
      for (int v = 0; v < GPU_NV; v++)
        if (isfinite(L->gflops[v][s]))
          print_table_row(&GPU_VERSIONS[v], L->ms[v][s], L->gflops[v][s], base, gi->peak_gflops);
    }
    reference_free(&ref);
    free(ha);
    free(hb);
    free(hc);
    for (int i = 0; i < 2; i++) ct_free(a16[i]), ct_free(b16[i]);
    ct_free(a);
    ct_free(b);
    ct_free(c);
  }
#else
  (void)rn, (void)L;
#endif
  if (!gi->emulated) print_timing_note(rn->m, "gpu");
}
/*md output gpu ladder*/

/*md
::: zh
{{fig ladder}} 把阶梯画成曲线：横轴是矩阵大小 n，纵轴是 GFLOP/s（对数），每一级一条线，CPU 和 GPU 各一栏。同一栏里线与线之间的竖直距离，就是上一级的改动换来的倍数。
:::
::: en
{{fig ladder}} draws the ladder as curves: matrix size n across, GFLOP/s up (log scale), one line per rung, a panel for the CPU and one for the GPU. Within a panel, the vertical distance between two lines is the factor the later rung's change bought.
:::
*/
/*md figure ladder*/

/*md
::: zh
## 加速比：量出来的 “10–100 倍”

最后把两架梯子放在一起：在两边都跑过的最大尺寸上（本书这次运行是 n = {{metric speedup_n}}），GPU 上最好的 f32 版本与 CPU 上最好的 f32 版本的速度之比；再加上 Tensor Core 的版本。两边都是同一次运行、同一台机器上量的。

这个倍数取决于两边各是什么。种子教程说的 10–100 倍，大致是一台多核工作站的 CPU 对一块游戏卡或上一代数据中心 GPU、用 f32 算时的情况。CPU 只有两个虚拟核时，倍数会大得多；CPU 有几十个核、GPU 较弱时，会小一些；GPU 改用 Tensor Core 后，再乘上几倍到十几倍。算力峰值之比（上面 `gpu` 一节最后一行）给出了这个倍数的上限量级，实测值说明两边的软件各自离峰值有多远。
:::
::: en
## The speed-up: "10–100×", measured

Finally the two ladders side by side: at the largest size both ladders ran (n = {{metric speedup_n}} in this book's run) the ratio of the GPU's best f32 speed to the CPU's best f32 speed, and the same with the tensor-core versions included. Both sides are measured in the same run on the same machine.

The ratio depends on what stands on each side. The seeds' 10–100× is roughly a many-core workstation CPU against a gaming card or an older datacenter GPU, in f32. With a CPU of two virtual cores the ratio is far larger; with dozens of cores and a weaker GPU it is smaller; with tensor cores multiply it again by several times to more than ten. The ratio of the peaks (the last line of the `gpu` section) sets the order of magnitude to expect; the measured ratio shows how close each side's software gets to its peak.
:::
*/
// The best f32 GFLOP/s of ladder L at size n (versions [from, to)), and which version.
static double best_at(const ladder *L, int n, int from, int to, int *which) {
  double best = NAN;
  *which = -1;
  for (int s = 0; s < L->nsizes; s++)
    if (L->sizes[s] == n)
      for (int v = from; v < to; v++)
        if (isfinite(L->gflops[v][s]) && !(L->gflops[v][s] <= best)) best = L->gflops[v][s], *which = v;
  return best;
}

static void show_speedup(run *rn, const ladder *cpu, const ladder *gpu, bool have_gpu, bool emulated) {
  ct_cli_section("speedup");
  if (emulated) { // the emulator's times are the CPU's, one fiber per CUDA thread: no ratio means anything
    printf("needs a GPU: the device in use is emulated (tools/sim); its times say nothing about a GPU's speed\n");
    return;
  }
  // The largest size both ladders ran; 2048 in the full run.
  int n = 0;
  for (int s = 0; s < cpu->nsizes; s++)
    for (int t = 0; t < gpu->nsizes && have_gpu; t++)
      if (cpu->sizes[s] == gpu->sizes[t] && cpu->sizes[s] > n) n = cpu->sizes[s];
  int wc = -1, wg = -1, wt = -1;
  const int n_cpu = n ? n : cpu->sizes[cpu->nsizes - 1];
  const double c = best_at(cpu, n_cpu, 0, CPU_NV, &wc);
  if (!have_gpu) {
    printf("needs a GPU: run with --device cuda on a machine with one to measure the seeds' \"10-100x\"\n");
    if (wc >= 0)
      printf("this CPU reached %.1f GFLOP/s at n = %d (%s)\n", c, n_cpu, CPU_VERSIONS[wc].name);
    ct_metrics_num(rn->m, "speedup_n", n_cpu);
    ct_metrics_num(rn->m, "speedup_best_cpu_gflops", c);
    return;
  }
  const double g = best_at(gpu, n, 0, GPU_MM_TF32, &wg); // f32 arithmetic only
  const double t = best_at(gpu, n, 0, GPU_NV, &wt);      // tensor cores allowed
  if (wc < 0 || wg < 0) {
    printf("no speed-up to report: a version failed at n = %d\n", n);
    return;
  }
  printf("at n = %d:\n", n);
  printf("  best CPU f32:          %10.1f GFLOP/s (%s)\n", c, CPU_VERSIONS[wc].name);
  printf("  best GPU f32:          %10.1f GFLOP/s (%s)  -> %.0fx the CPU\n", g, GPU_VERSIONS[wg].name, g / c);
  printf("  best GPU, any dtype:   %10.1f GFLOP/s (%s)  -> %.0fx the CPU\n", t, GPU_VERSIONS[wt].name, t / c);
  printf("the seeds say \"10-100x\"; measured here: %.0fx in f32, %.0fx with tensor cores\n", g / c, t / c);
  ct_metrics_num(rn->m, "speedup_n", n);
  ct_metrics_num(rn->m, "speedup_best_cpu_gflops", c);
  ct_metrics_num(rn->m, "speedup_best_gpu_f32_gflops", g);
  ct_metrics_num(rn->m, "speedup_f32", g / c);
  ct_metrics_num(rn->m, "speedup_any_dtype", t / c);
}
/*md output speedup*/

/*md hide*/
// Metrics: <device>_sizes, then per version <name>_gflops, _ms, _max_rel_err
// and the fractions, one array entry per size (null where not measured).
static void write_ladder_metrics(ct_metrics *m, const char *dev, const ladder *L, const version *vs, int nv,
                                 int base, const char *base_name, double peak) {
  char key[96];
  double sizes[MAX_SIZES], frac[MAX_SIZES];
  for (int s = 0; s < L->nsizes; s++) sizes[s] = L->sizes[s];
  snprintf(key, sizeof key, "%s_sizes", dev);
  ct_metrics_series(m, key, sizes, L->nsizes);
  for (int v = 0; v < nv; v++) {
    snprintf(key, sizeof key, "%s_gflops", vs[v].name);
    ct_metrics_series(m, key, L->gflops[v], L->nsizes);
    snprintf(key, sizeof key, "%s_ms", vs[v].name);
    ct_metrics_series(m, key, L->ms[v], L->nsizes);
    snprintf(key, sizeof key, "%s_max_rel_err", vs[v].name);
    ct_metrics_series(m, key, L->err[v], L->nsizes);
    for (int s = 0; s < L->nsizes; s++) frac[s] = L->gflops[v][s] / L->gflops[base][s];
    snprintf(key, sizeof key, "%s_of_%s", vs[v].name, base_name);
    ct_metrics_series(m, key, frac, L->nsizes);
    for (int s = 0; s < L->nsizes; s++) frac[s] = peak > 0 ? L->gflops[v][s] / peak : NAN;
    snprintf(key, sizeof key, "%s_of_peak", vs[v].name);
    ct_metrics_series(m, key, frac, L->nsizes);
  }
}

// The emulated device's ladder: emulated_sizes and <version>_emulated_max_rel_err,
// under their own keys, so that nothing reading gpu_* takes them for a GPU's.
static void write_emulated_metrics(ct_metrics *m, const ladder *L) {
  char key[96];
  double sizes[MAX_SIZES];
  for (int s = 0; s < L->nsizes; s++) sizes[s] = L->sizes[s];
  ct_metrics_series(m, "emulated_sizes", sizes, L->nsizes);
  for (int v = 0; v < GPU_NV; v++) {
    snprintf(key, sizeof key, "%s_emulated_max_rel_err", GPU_VERSIONS[v].name);
    ct_metrics_series(m, key, L->err[v], L->nsizes);
  }
}
/*md show*/

/*md
::: zh
## main

`--quick` 时 CPU 只跑 64、128、256，GPU 只跑 256 和 1024；完整运行时 CPU 跑到 2048，GPU 跑到 4096。在模拟设备上（`sim-runtime` 构建）GPU 跑 128 和 256，`--quick` 时只跑 128。任何一个版本验证失败，程序最后都以退出码 1 结束，测试靠它发现错误。两个只给测试用的参数：`--corrupt NAME` 在比对前故意改坏某个版本结果中的一个元素，用来证明验证确实会失败；`--dump DIR` 把最小的 CPU 问题的 A、B 和每个版本的 C 写成原始 float32 文件，测试用 numpy 独立地再算一遍。
:::
::: en
## main

Under `--quick` the CPU runs 64, 128 and 256 and the GPU 256 and 1024; the full run goes up to 2048 on the CPU and 4096 on the GPU. On the emulated device (the `sim-runtime` build) the GPU runs 128 and 256, and 128 under `--quick`. If any version fails its check the program ends with exit status 1, which is how the tests notice. Two flags exist for the tests: `--corrupt NAME` spoils one element of a version's result before it is checked, to show that the check really fails, and `--dump DIR` writes A, B and every version's C of the smallest CPU problem as raw float32 files, which the test multiplies again, independently, with numpy.
:::
*/
int main(int argc, char **argv) {
  run rn = {0};
  ct_cli_opt opts[] = {
      {"corrupt", CT_OPT_STRING, &rn.corrupt, "testing aid: spoil one element of this version's result (e.g. cpu_blocked)"},
      {"dump", CT_OPT_STRING, &rn.dump, "write A, B and each CPU version's C at the smallest size into this folder"},
  };
  ct_cli cli = {.program = "ch04", .summary = "Chapter 4: C = A*B as a ladder of versions on the CPU and the GPU."};
  ct_cli_parse(&cli, argc, argv, opts, COUNT(opts));
  if (rn.dump) { // a folder too long for the longest name (63 bytes), or one that cannot be written: refused now
    char room[PATH_MAX];
    if (ct_path_join(room, sizeof room, "--dump", rn.dump,
                     "c_0123456789012345678901234567890123456789012345678901234567.f32") != CT_OK)
      ct_cli_die(&cli);
    ct_cli_check_path(&cli, "--dump", rn.dump, "a.f32");
  }
  if (rn.corrupt) { // a name that matches no version would make --corrupt silently do nothing
    bool known = false;
    for (int v = 0; v < GPU_NV; v++) known |= !strcmp(rn.corrupt, GPU_VERSIONS[v].name);
    for (int v = 0; v < CPU_NV; v++) known |= !strcmp(rn.corrupt, CPU_VERSIONS[v].name);
    if (!known) {
      fprintf(stderr, "ch04: --corrupt: no version is called \"%s\" (see the names in the check lines)\n",
              rn.corrupt);
      return 2;
    }
  }
  ct_cli_begin(&cli);
  rn.cli = &cli;
  rn.m = cli.metrics; // device, seed and quick already recorded
  if (rn.dump) ct_metrics_num(rn.m, "dump_size", cli.quick ? CPU_SIZES_QUICK[0] : CPU_SIZES[0]);

  static ladder cpu, gpu; // static: a few KiB each
  ladder_init(&cpu, cli.quick ? CPU_SIZES_QUICK : CPU_SIZES, cli.quick ? COUNT(CPU_SIZES_QUICK) : COUNT(CPU_SIZES));
  ladder_init(&gpu, cli.quick ? GPU_SIZES_QUICK : GPU_SIZES, cli.quick ? COUNT(GPU_SIZES_QUICK) : COUNT(GPU_SIZES));
  cpu_info ci;
  gpu_info gi;

  show_cpu(&rn, &ci);
  run_cpu_ladder(&rn, &ci, &cpu);
  show_gpu(&rn, &ci, &gi);
  if (gi.emulated)
    ladder_init(&gpu, cli.quick ? GPU_SIZES_EMULATED_QUICK : GPU_SIZES_EMULATED,
                cli.quick ? COUNT(GPU_SIZES_EMULATED_QUICK) : COUNT(GPU_SIZES_EMULATED));
  run_gpu_ladder(&rn, &gi, &gpu);
  show_speedup(&rn, &cpu, &gpu, gi.present, gi.emulated);

  write_ladder_metrics(rn.m, "cpu", &cpu, CPU_VERSIONS, CPU_NV, CPU_CBLAS, "cblas", ci.peak_gflops);
  if (gi.present && !gi.emulated)
    write_ladder_metrics(rn.m, "gpu", &gpu, GPU_VERSIONS, GPU_NV, GPU_MM_F32, "cublas", gi.peak_gflops);
  if (gi.emulated) write_emulated_metrics(rn.m, &gpu); // sizes and errors: no times, no speeds
  ct_metrics_num(rn.m, "checks_failed", rn.failures);
  if (ct_metrics_close(rn.m) != CT_OK) ct_cli_die(&cli);
  if (rn.failures) {
    fprintf(stderr, "ch04: %d check(s) failed (see the FAIL lines above)\n", rn.failures);
    return 1;
  }
  return 0;
}

/*md
::: zh
## 练习

1. 实现练习区里的分块循环（`cpu_blocked`），用 `--device cpu --quick` 检查它通过验证。然后改变 `CPU_BM`、`CPU_BN`、`CPU_BK`，看 n = 1024 时 GFLOP/s 怎么变。B 的子块超过 L2 的大小时发生了什么？
2. 用 `OMP_NUM_THREADS=1` 和 `OPENBLAS_NUM_THREADS=1` 运行 CPU 的梯子，和默认线程数比较。两个线程快了多少？如果几乎没有变快，想想这两个“核”是不是同一个物理核的超线程。
3. 给 CPU 加一级寄存器分块：每次算 C 的 4 行 × 16 列，16 × 4 个累加器放在局部数组里，沿整个 k 循环累加完再写回。它离 OpenBLAS 近了多少？
4. 实现练习区里的共享内存 核函数（`mm_smem_tiled`）。先故意漏掉第二个 `__syncthreads()`，在 GPU 上运行，看验证能否抓住它；用 `compute-sanitizer --tool racecheck ./ch04 --device cuda --quick` 找出竞争。没有 GPU 时，`tools/lab check ch04 DIR` 在模拟器上评分，它的竞争检查同样会抓住它。
5. 寄存器分块核函数 要求 M、N 是 128 的倍数、K 是 8 的倍数。给它加上边界处理，使 n = 1000 也能通过验证，并比较 n = 1000 和 n = 1024 的速度。
6. 在 `ch04_pytorch.py` 里打开和关闭 `torch.backends.cuda.matmul.allow_tf32`，对比 `gpu_mm_f32` 和 `gpu_mm_tf32` 的误差和速度，和本章的表格对照。为什么 PyTorch 默认关闭它？
:::
::: en
## Exercises

1. Write the blocked loop of the lab region (`cpu_blocked`) and check that it passes with `--device cpu --quick`. Then vary `CPU_BM`, `CPU_BN` and `CPU_BK` and watch GFLOP/s at n = 1024. What happens when B's sub-block outgrows the L2 cache?
2. Run the CPU ladder with `OMP_NUM_THREADS=1` and `OPENBLAS_NUM_THREADS=1` and compare with the default thread counts. How much faster are two threads? If hardly at all, consider whether the two "cores" are hyperthreads of one physical core.
3. Add a register-tiled rung on the CPU: compute 4 rows × 16 columns of C at a time, with the 4 × 16 accumulators in a local array, summed over the whole k loop before they are written back. How much closer does it get to OpenBLAS?
4. Write the shared-memory kernel of the lab region (`mm_smem_tiled`). Leave out the second `__syncthreads()` on purpose, run on a GPU and see whether the check catches it; find the race with `compute-sanitizer --tool racecheck ./ch04 --device cuda --quick`. Without a GPU, `tools/lab check ch04 DIR` grades it on the emulator, whose race check catches it too.
5. The register-tiled kernel needs M and N multiples of 128 and K a multiple of 8. Add edge handling so that n = 1000 passes the check too, and compare the speed at n = 1000 and n = 1024.
6. In `ch04_pytorch.py`, switch `torch.backends.cuda.matmul.allow_tf32` on and off, compare the error and speed of `gpu_mm_f32` and `gpu_mm_tf32`, and set them beside this chapter's table. Why is it off by default in PyTorch?
:::
*/
