// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 13 章　运行时编译的核函数：把一串逐元素运算融合成一个

一个模型里，除了矩阵乘法，还有大量**逐元素**的运算：激活函数、加偏置、残差相加、门控、缩放。PyTorch 的即时执行（eager）模式里，每个算子都是一次独立的核函数调用：`x * torch.sigmoid(y) + alpha * z` 是四个核函数，每个都把输入从内存读一遍、把结果写回内存一遍，中间结果在内存里来回搬。这些运算几乎不做算术，时间都花在搬运字节上。

种子教程（本书据以重写的五篇中文教程，见[术语表](glossary:seed-tutorials)）里，王哲峰《PyTorch GPU训练 和 CUDA》在 `torch.cuda` 的目录中列了 Jiterator，那一节却只有标题；《PyTorch GPU 加速》列出了 `torch.compile` 的三种调用方式，没有说它做了什么。本章补上这两处该讲的内容：融合是什么、省下了什么。

PyTorch 有两种办法把这样一串运算**融合**成一个核函数。`torch.cuda.jiterator._create_jit_fn` 接受一段 CUDA 代码字符串，第一次调用时用 NVRTC 在运行时编译，按数据类型缓存。`torch.compile` 的 Inductor 后端在整个程序里找出能融合的运算，在 GPU 上生成 Triton 代码，在 CPU 上生成 C++ 循环，交给系统的编译器编译成共享库再加载。本章用 C 做同一件事：

- 一个表达式字符串（几个输入张量、几个标量、可以广播）经递归下降解析成一棵语法树；
- 同一棵树生成两种源码：CPU 上是带 OpenMP 的 C 循环，由系统 C 编译器（`cc`）编译成共享库，用 `dlopen` 加载；GPU 上是 CUDA C++，由 NVRTC 编译成 PTX，用驱动 API（`cuModuleLoadData`、`cuLaunchKernel`）加载、运行；
- 编译结果缓存在内存里和磁盘上，键由表达式、数据类型、编译器和设备决定；磁盘上的每个条目都带 SHA-256，加载之前先校验；
- 对照：同一个表达式用运行时自己的运算逐个执行（不融合），比较结果、搬运的字节数和速度，再用屋顶线模型（roofline）解释为什么能快、能快多少。

```sh
cd build && ninja ch13_jit
./ch13                      # 有 GPU 用 GPU（NVRTC），否则用 CPU（cc + dlopen）
./ch13 --device cpu --quick # 几秒钟
./ch13 --expr "relu(x - alpha) * y + z" --dtype f16   # 自己的表达式和数据类型
```
:::
::: en
# Chapter 13. Runtime-compiled kernels: fusing a chain of elementwise ops into one

Besides its matrix products, a model is full of **elementwise** ops: activations, bias adds, residual sums, gates, scalings. In PyTorch's eager mode every operator is a kernel launch of its own: `x * torch.sigmoid(y) + alpha * z` is four kernels, each reading its inputs from memory and writing its result back, so every intermediate travels to memory and back. These ops do almost no arithmetic; their time goes into moving bytes.

Among the seed tutorials (the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials)), Wang Zhefeng's “PyTorch GPU training and CUDA” lists Jiterator among the `torch.cuda` topics and leaves its section empty; “PyTorch GPU acceleration” lists three ways to call `torch.compile` without saying what it does. This chapter writes what both leave out: what fusion is and what it saves.

PyTorch has two ways to **fuse** such a chain into one kernel. `torch.cuda.jiterator._create_jit_fn` takes a string of CUDA code and compiles it with NVRTC at run time, on the first call, caching a kernel per dtype. `torch.compile`'s Inductor backend finds what can be fused in a whole program and generates Triton code for a GPU or, for a CPU, C++ loops that the system's compiler builds into a shared library, which it then loads. This chapter does the same in C:

- an expression string (several input tensors, scalars, broadcasting) is parsed by recursive descent into one syntax tree;
- the same tree becomes two sources: for the CPU, a C loop with OpenMP that the system C compiler (`cc`) builds into a shared object, loaded with `dlopen`; for a GPU, CUDA C++ that NVRTC compiles to PTX and the driver API loads and runs (`cuModuleLoadData`, `cuLaunchKernel`);
- compiled kernels are cached in memory and on disk, keyed by the expression, the dtypes, the compiler and the device; every disk entry carries a SHA-256 that is checked before it is loaded;
- side by side, the same expression run as the runtime's own ops one at a time (unfused): the results, the bytes moved and the speed, with the roofline model to explain why fusion is faster, and by how much.

```sh
cd build && ninja ch13_jit
./ch13                      # the GPU (NVRTC) when there is one, else the CPU (cc + dlopen)
./ch13 --device cpu --quick # seconds
./ch13 --expr "relu(x - alpha) * y + z" --dtype f16   # your own expression and dtype
```
:::
*/

/*md hide*/
#define _POSIX_C_SOURCE 200809L // clock_gettime

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct.h"

#define MAX_SIZES 12
#define MAX_REPS 64
#define BIAS 1024 // the bias of bias_relu, broadcast over rows of this length
#define CACHED_CALLS 9 // calls of a kernel already in memory, the median timed

#define MUST(p) CT_CLI_MUST(cli, p)
#define MUST_OK(rc) CT_CLI_MUST_OK(cli, rc)

typedef struct settings {
  const char *expr;  // --expr: a fourth, "custom" workload
  const char *dtype; // --dtype of the inputs in the timed sections
  long size;         // --size: the largest number of elements (0: by device and --quick)
  const char *save;  // --save: inputs and fused outputs as safetensors, for the twin's check
} settings;

// Whether the fused path runs here, and why not (no C compiler, no NVRTC).
typedef struct jit_state {
  bool ok;
  char why[1024];
} jit_state;
/*md show*/

/*md
::: zh
## 三个工作负载

本章跑三个表达式；`--expr` 可以再加一个（输入叫 `x`、`y`、`z`，标量叫 `alpha`、`beta`）：

- `gate`：`x * sigmoid(y) + alpha * z`，三个输入、一个标量，门控单元里常见的样子；
- `gelu`：GELU 的 tanh 近似，一个输入、九个算子，`torch.nn.functional.gelu(x, approximate="tanh")` 算的就是它；
- `bias_relu`：`relu(x + b)`，`x` 的形状是 `(N/1024, 1024)`，偏置 `b` 是 `(1024)`，沿第 0 维广播。

表达式是一门很小的语言：`+ - * /`、一元负号、括号、数字、声明过的输入和标量，以及函数 `exp log sqrt tanh sigmoid relu abs`（一个参数）和 `min max pow`（两个参数）。`ct_jit_create(expr, "x,y,z", "alpha")` 把它解析成语法树；之后每次调用按输入的数据类型和设备取出（或编译出）一个核函数。数据类型的规则就是运行时 `ops.c` 的规则：两个张量按 `torch.promote_types` 提升（float16 和 bfloat16 得到 float32），标量像 Python 的数，不会把张量的类型变宽。

先数一数两种做法各搬多少字节。融合的核函数把每个输入读一次、输出写一次；不融合时，每个算子都要读它的操作数、写它的结果，中间结果写出去又读回来。`ct_jit_traffic_of` 沿着语法树逐个算子数出来（包括 `ops.c` 在混合类型的运算前做的类型转换）。最后一列是“如果时间只花在搬字节上”应有的加速比，即字节数之比。
:::
::: en
## Three workloads

The chapter runs three expressions; `--expr` adds a fourth (its inputs named `x`, `y`, `z`, its scalars `alpha`, `beta`):

- `gate`: `x * sigmoid(y) + alpha * z`, three inputs and a scalar, the shape of a gating unit;
- `gelu`: GELU's tanh approximation, one input and nine operators: what `torch.nn.functional.gelu(x, approximate="tanh")` computes;
- `bias_relu`: `relu(x + b)`, `x` of shape `(N/1024, 1024)` and the bias `b` of shape `(1024)`, broadcast along dim 0.

An expression is written in a very small language: `+ - * /`, unary minus, parentheses, numbers, the declared inputs and scalars, and the functions `exp log sqrt tanh sigmoid relu abs` (one argument) and `min max pow` (two). `ct_jit_create(expr, "x,y,z", "alpha")` parses it into a syntax tree; every call then takes (or compiles) a kernel for its inputs' dtypes and device. The dtype rules are the runtime's own, from `ops.c`: two tensors promote as `torch.promote_types` does (float16 with bfloat16 gives float32), and a scalar behaves like a Python number, which never widens a tensor's dtype.

First, the bytes each way moves. The fused kernel reads each input once and writes the output once; unfused, every operator reads its operands and writes its result, so each intermediate is written out and read back. `ct_jit_traffic_of` counts them operator by operator along the tree (including the casts `ops.c` makes before an op on mixed dtypes). The last column is the speed-up that moving bytes alone would predict: the ratio of the bytes.
:::
*/
/*md
::: zh
{{fig traffic}} 数的就是下面“字节”那两列的来源。左边不融合：四个核函数，每个把结果写回内存（t1、t2、t3），下一个再读回来，每个元素共读 6 次、写 4 次。右边融合：一个核函数只读 x、y、z 各一次、写 out 一次，中间值留在寄存器里。逐元素运算的时间由搬运的字节决定，所以读写次数之比就是融合能带来的加速比的预测值。
:::
::: en
{{fig traffic}} counts where the two bytes columns below come from. On the left, unfused: four kernels, each writing its result to memory (t1, t2, t3) for the next to read back, 6 reads and 4 writes per element in all. On the right, fused: one kernel reads x, y and z once each and writes out once, with the intermediates in registers. An elementwise op's time is set by the bytes it moves, so the ratio of the reads and writes is the speed-up fusion is predicted to bring.
:::
*/
/*md figure traffic: gate = x * sigmoid(y) + alpha * z 的内存流量：不融合与融合 | The memory traffic of gate = x * sigmoid(y) + alpha * z: unfused and fused*/
typedef struct workload {
  const char *name, *expr, *inputs, *scalars;
  double sc[2];
  int ns;
  bool bias; // input 1 is a (BIAS) bias over (n / BIAS, BIAS) rows
} workload;

static workload loads[4] = {
    {"gate", "x * sigmoid(y) + alpha * z", "x,y,z", "alpha", {0.5, 0}, 1, false},
    {"gelu", "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))", "x", "", {0, 0}, 0, false},
    {"bias_relu", "relu(x + b)", "x,b", "", {0, 0}, 0, true},
    {"custom", NULL, "x,y,z", "alpha,beta", {0.5, 2.0}, 2, false},
};
static int n_loads = 3; // 4 with --expr
static ct_jit_fn *fns[4];

static int n_inputs(const workload *w) { return (int)(strlen(w->inputs) + 1) / 2; } // "x,y,z" -> 3

// The inputs of workload w at n elements: (n) each, or (n / BIAS, BIAS) and (BIAS).
static int make_inputs(const workload *w, int64_t n, ct_dtype dt, ct_device dev, ct_tensor **in) {
  for (int i = 0; i < n_inputs(w); ++i) {
    ct_shape s = !w->bias ? CT_SHAPE(n) : i == 0 ? CT_SHAPE(n / BIAS, BIAS) : CT_SHAPE(BIAS);
    if (!(in[i] = ct_randn(s, dt, dev))) return -1;
  }
  return CT_OK;
}
static void free_inputs(ct_tensor **in, int k) {
  for (int i = 0; i < k; ++i) ct_free(in[i]), in[i] = NULL;
}

static double predicted_speedup(ct_jit_traffic fused, ct_jit_traffic unfused) {
  /* LAB BEGIN: a memory-bound kernel takes bytes / bandwidth: predict unfused time / fused time from the bytes each moves | stub: return 0.0; */
  return (double)unfused.bytes / (double)fused.bytes;
  /* LAB END */
}

static void show_workloads(const ct_cli *cli, ct_dtype dt, ct_metrics *m) {
  ct_cli_section("workloads");
  const int64_t n = 1 << 20; // bytes per element are the same at any size
  printf("inputs %s; bytes per output element, fused and unfused:\n", ct_dtype_name(dt));
  printf("%-10s %-8s %8s %8s %8s %10s  %s\n", "workload", "inputs", "kernels", "fused", "unfused", "predicted",
         "expression");
  for (int w = 0; w < n_loads; ++w) {
    ct_tensor *in[3] = {0};
    MUST_OK(make_inputs(&loads[w], n, dt, cli->device, in));
    ct_jit_traffic f, u;
    MUST_OK(ct_jit_traffic_of(fns[w], (const ct_tensor *const *)in, n_inputs(&loads[w]), true, &f));
    MUST_OK(ct_jit_traffic_of(fns[w], (const ct_tensor *const *)in, n_inputs(&loads[w]), false, &u));
    const double p = predicted_speedup(f, u);
    printf("%-10s %-8s %3d -> 1 %8.2f %8.2f %9.2fx  %s\n", loads[w].name, loads[w].inputs, u.kernels,
           (double)f.bytes / (double)n, (double)u.bytes / (double)n, p, loads[w].expr);
    char key[64];
    snprintf(key, sizeof key, "%s_kernels_unfused", loads[w].name);
    ct_metrics_num(m, key, u.kernels);
    snprintf(key, sizeof key, "%s_bytes_per_elem_fused", loads[w].name);
    ct_metrics_num(m, key, (double)f.bytes / (double)n);
    snprintf(key, sizeof key, "%s_bytes_per_elem_unfused", loads[w].name);
    ct_metrics_num(m, key, (double)u.bytes / (double)n);
    snprintf(key, sizeof key, "%s_predicted_speedup", loads[w].name);
    ct_metrics_num(m, key, p);
    free_inputs(in, 3);
  }
}
/*md output workloads*/
/*md twin workloads*/

/*md
::: zh
## 生成的源码

下面是 `gate` 在本次运行的设备上的源码：在 CPU 上是 C，在 GPU 上是 CUDA C++。两种源码出自同一个生成器（`common/jit/codegen.c`）：表达式那一行完全相同。float 运算里的 `exp`、`log`、`tanh` 是运行时自己的 `cti_expf`、`cti_logf`、`cti_tanhf`：它们写在 `common/core/vecmath.h` 里，只用乘加和位运算、不调用数学库，生成器把用到的那几段原文贴进源码（构建时嵌入），所以融合的核函数和运行时逐个算子的 CPU 实现算出同样的位；double 运算用数学库的 `exp` 这一族，C 和 CUDA 同名。运行时自己定义的几个函数（`sigmoid`、NaN 会传下去的 `relu`、`min`、`max`，以及 float16/bfloat16 与 float 之间按“就近舍入到偶数”的转换）也只写一遍，用 `JIT_FN` 表示 `static inline` 或 `static __device__ inline`。不同的只是外面的循环：CPU 上 OpenMP 的每个线程对自己连续的一段跑一个 `omp simd` 循环（所有操作数都连续时是一重循环；否则按最内维一行一行地走，一行里每个操作数都步长为 1 时也是连续的循环），这些循环用 GCC 的 `target_clones` 编译两份，一份用 AVX2（一步 8 个 float），一份用所有 x86-64 都有的指令，加载时按处理器挑一份；GPU 上是网格跨步循环（grid-stride loop），任何大小的网格都能覆盖任意多的元素。

每个值都在它的“运算类型”里算：float16、bfloat16、float32 的值用 float，float64 用 double。中间结果不舍入，只在最后写出时舍入一次到输出的数据类型。这和 jiterator、Inductor 的做法一样，也正是融合比逐个算子更精确的原因（下面“结果一致吗”一节会量出来）。表达式里的名字都是调用者声明过的标识符，数字是 `double`，所以用户写的文本不会原样进入编译器；一个名字如果是 C/C++ 的关键字，或者以生成代码用的前缀开头，`ct_jit_create` 就拒绝它。
:::
::: en
## The generated source

Below is `gate`'s source for this run's device: C on the CPU, CUDA C++ on a GPU. Both come from one generator (`common/jit/codegen.c`), and the expression's line is identical in the two. In float math, `exp`, `log` and `tanh` are the runtime's own `cti_expf`, `cti_logf` and `cti_tanhf`: written in `common/core/vecmath.h` with multiplies, adds and bit operations and no call to the math library, their text pasted into the source by the generator (embedded at build time), so a fused kernel computes the same bits as the runtime's own ops on the CPU; double math uses the math library's `exp` family, named alike in C and CUDA. The few functions the runtime defines its own way (`sigmoid`; `relu` that passes NaN through; `min` and `max`; the float16/bfloat16 conversions with round-to-nearest-even) are written once, `JIT_FN` standing for `static inline` or `static __device__ inline`. Only the loop around differs. On the CPU each OpenMP thread runs an `omp simd` loop over its own contiguous share (one loop when every operand is contiguous; else row by row along the innermost dim, a row whose operands all step by one element being a contiguous loop too), and those loops are compiled twice with GCC's `target_clones`, once for AVX2 (8 floats a step) and once for the instructions every x86-64 has, the loader picking one for the processor. On a GPU it is a grid-stride loop, with which a grid of any size covers any number of elements.

Every value is computed in its "op math" type: float for float16, bfloat16 and float32 values, double for float64. Intermediates are not rounded; the result is rounded once, to the output's dtype, when it is stored. That is what jiterator and Inductor do, and it is why fused is more accurate than op by op (the section "Do the results agree?" measures it). The names in an expression are identifiers the caller declared and the numbers are `double`s, so no text the user wrote reaches the compiler as it was written; `ct_jit_create` refuses a name that is a C/C++ keyword or starts with a prefix the generated code uses.
:::
*/
static void show_source(const ct_cli *cli, ct_dtype dt, ct_metrics *m) {
  ct_cli_section("source");
  ct_dtype dts[3] = {dt, dt, dt};
  char *src = ct_jit_source(fns[0], dts, 3, cli->device.type);
  MUST(src);
  fputs(src, stdout);
  int lines = 0;
  for (const char *p = src; *p; ++p) lines += *p == '\n';
  ct_metrics_num(m, "source_lines", lines);
  ct_metrics_str(m, "source_dialect", cli->device.type == CT_CUDA ? "cuda" : "c");
  free(src);
}
/*md output source*/

/*md
::: zh
表达式里的每个函数调用变成哪个 C/CUDA 函数，由生成器里的一张表决定：float 运算用运行时的 `cti_expf`、`cti_logf`、`cti_tanhf` 和数学库的 `sqrtf`、`powf`、`fabsf`，double 用数学库的 `exp` 这一族，运行时自己定义的几个以 `jit_` 开头。练习 5 要在这里加一行。
:::
::: en
Which C/CUDA function each call in an expression becomes is one table in the generator: for float math the runtime's `cti_expf`, `cti_logf` and `cti_tanhf` and the math library's `sqrtf`, `powf` and `fabsf`; for double the math library's `exp` family; and the runtime's own functions under `jit_` names. Exercise 5 adds a line here.
:::
*/
/*md source common/jit/codegen.c func_text*/

/*md
::: zh
## 缓存：内存、磁盘、被改坏的条目

{{if metric compile_ms * 1000 > metric second_call_us * 10}}编译很慢（本次运行中，编译 `gate` 用了 {{metric compile_ms %.0f}} 毫秒，而从内存里取出已加载的核函数再调用一次只要 {{metric second_call_us %.0f}} 微秒），所以编译结果要缓存。{{else}}编译要运行一个编译器，比调用一次已加载的核函数慢得多（这次运行没有量出这一点，见上面的输出），所以编译结果要缓存。{{end}}jiterator 在内存里按数据类型缓存，还把编译好的核函数存进磁盘缓存（默认在 `~/.cache/torch/kernels`，`PYTORCH_KERNEL_CACHE_PATH` 改位置，`USE_PYTORCH_KERNEL_CACHE=0` 关掉），下一个进程不必再编译；Inductor 也把编译好的代码存进磁盘缓存。`ct_jit` 有两层缓存：

- **内存**：本进程已经加载的核函数，按键和设备查表。一个 `ct_jit_fn` 还记着上一次用的核函数，同样的数据类型和设备再来时连表都不用查。
- **磁盘**：缓存目录里一个键一个文件。键是一段文本的 SHA-256，这段文本写明了后端、编译器的版本、编译选项、目标（CPU 架构，或 GPU 的 `compute_XY`）和生成的源码——源码里又写明了表达式（规范写法：空格和多余的括号不算数）、每个输入的数据类型。所以换一种数据类型、换一个编译器、换一块不同架构的 GPU，都是另一个键。

磁盘缓存里放的是要被加载执行的机器码，必须当心。缓存目录（`$CT_JIT_CACHE`，否则 `$XDG_CACHE_HOME/ct-jit`，否则 `~/.cache/ct-jit`）以 0700 创建；如果它是符号链接、属于别的用户、或者组和其他人可写，`ct_jit` 拒绝使用它并说明原因和改法。它上面的每一级目录也要检查（从 `/` 起用 `openat` 逐级打开，不跟随符号链接）：只能属于你或 root，别人不能写；像 `/tmp` 这样带粘滞位的公共目录是接受的（别人不能改名或删除不属于自己的条目），但紧挨着它的下一级必须属于你（或 root）、别人不能写。否则能写上级目录的人可以把整个缓存目录改名换掉。每个条目由一个头和内容组成，头里有完整的键、内容的字节数、键和内容合起来的 SHA-256；加载前先读入整个文件、逐项核对，任何一项不符就把它算作“被拒绝”、重新编译、原子地替换掉（写临时文件再改名，用的是运行时统一的原子写文件函数），绝不执行它。通过校验的字节写进一个只有本进程拿得到的匿名内存文件（`memfd_create`），按文件描述符 `dlopen`（`/proc/self/fd/N`），不经过任何别人能改的路径，所以执行的正是校验过的那些字节。放在条目位置上的 FIFO 或目录不会让程序卡住：打开时不等待，不是普通文件就拒绝。编译器在缓存目录里新建的私有目录（`mkdtemp`）里工作，在自己的进程组里运行，有时间上限（`$CT_JIT_CC_TIMEOUT` 秒，默认 60）：超时就连同它启动的进程一起杀掉，本章接着只跑不融合的版本。

下面四步：第一次调用（编译，或者从之前的运行留下的磁盘缓存加载）、第二次调用（内存命中；计时取 9 次这样的调用的中位数）、清空内存缓存后调用（相当于新进程：从磁盘加载，不运行编译器）、把磁盘上的条目改掉一个字节后调用（被拒绝，重新编译）。
:::
::: en
## The cache: memory, disk, and a damaged entry

{{if metric compile_ms * 1000 > metric second_call_us * 10}}Compiling is slow (in this run compiling `gate` took {{metric compile_ms %.0f}} ms, where a call to the kernel already loaded in memory took {{metric second_call_us %.0f}} µs), so compiled kernels are cached.{{else}}Compiling runs a compiler, which takes far longer than a call to a kernel already loaded (this run did not measure it; see the output above), so compiled kernels are cached.{{end}} jiterator keeps one per dtype in memory and also stores compiled kernels in a disk cache (by default `~/.cache/torch/kernels`; `PYTORCH_KERNEL_CACHE_PATH` moves it, `USE_PYTORCH_KERNEL_CACHE=0` turns it off), so the next process need not compile again; Inductor keeps compiled code in a disk cache too. `ct_jit` has two levels:

- **memory**: the kernels this process has loaded, in a table by key and device. A `ct_jit_fn` also remembers its last kernel, so a call with the same dtypes on the same device does not even look in the table.
- **disk**: one file per key in the cache directory. The key is the SHA-256 of a text naming the backend, the compiler's version, its flags, the target (the CPU's architecture, or the GPU's `compute_XY`) and the generated source, which itself spells the expression (in canonical form: spacing and redundant parentheses do not count) and every input's dtype. So another dtype, another compiler or a GPU of another architecture is another key.

A disk cache holds machine code that will be loaded and run, so it calls for care. The cache directory (`$CT_JIT_CACHE`, else `$XDG_CACHE_HOME/ct-jit`, else `~/.cache/ct-jit`) is created with mode 0700; when it is a symbolic link, belongs to another user, or its group or others may write it, `ct_jit` refuses it and says why and what to do. Every directory above it is checked too (opened one by one from `/` with `openat`, never following a symbolic link): each must belong to you or root and be writable by no one else; a shared sticky directory such as `/tmp` is accepted (no one can rename or remove an entry there that is not theirs), as long as the directory right below it is yours (or root's) and writable by no one else. Otherwise whoever can write a parent could rename the whole cache away and put another in its place. An entry is a header and a payload; the header holds the whole key, the payload's size, and a SHA-256 over key and payload. Before anything is loaded the whole file is read and every item checked; an entry that fails any check is counted as rejected, recompiled and replaced atomically (a temporary file and a rename, through the runtime's one atomic file writer), never executed. The verified bytes go into an anonymous memory file that only this process can reach (`memfd_create`), `dlopen`ed by its descriptor (`/proc/self/fd/N`), never through a path someone else could change, so what runs is exactly what was verified. A FIFO or a directory planted where an entry should be cannot hang the program: it is opened without waiting and refused for not being a regular file. The compiler works in a fresh private directory inside the cache (`mkdtemp`), in a process group of its own, with a time limit (`$CT_JIT_CC_TIMEOUT` seconds, default 60): past it, it is killed with everything it started, and the chapter goes on with the unfused chain only.

Four steps below: a first call (compiled, or loaded from a disk entry an earlier run left), a second call (a memory hit; timed as the median of 9 such calls), a call after clearing the memory cache (as a new process would start: loaded from disk, no compiler run), and a call after one byte of the disk entry was changed (rejected, recompiled).
:::
*/
/*md hide*/
static const char *home_relative(const char *path, char *buf, size_t len) {
  const char *home = getenv("HOME");
  size_t h = home ? strlen(home) : 0;
  if (h > 1 && strncmp(path, home, h) == 0 && path[h] == '/') snprintf(buf, len, "~%s", path + h);
  else snprintf(buf, len, "%s", path);
  return buf;
}

// Flips one bit of the file's byte at offset (from the end when negative).
static int flip_byte(const char *path, long offset) {
  FILE *f = fopen(path, "r+b");
  if (!f) return ct_fail(CT_ERR_IO, "ch13: cannot open %s", path);
  int rc = fseek(f, offset, offset < 0 ? SEEK_END : SEEK_SET);
  int c = rc == 0 ? fgetc(f) : EOF;
  if (c != EOF && fseek(f, -1, SEEK_CUR) == 0 && fputc(c ^ 0x10, f) != EOF) rc = 0;
  else rc = -1;
  if (fclose(f) != 0) rc = -1;
  return rc ? ct_fail(CT_ERR_IO, "ch13: cannot change a byte of %s", path) : CT_OK;
}
/*md show*/

// One timed fused call of gate; what the cache did is in the stats' change.
static int timed_call(const ct_jit_fn *f, const ct_tensor *const *in, ct_tensor *out, double *ms) {
  const double alpha = loads[0].sc[0], t0 = ct_cli_seconds();
  int rc = ct_jit_call_out((ct_jit_fn *)f, out, in, 3, &alpha, 1);
  if (rc == CT_OK) rc = ct_stream_synchronize(ct_current_stream(ct_device_of(out)));
  *ms = 1e3 * (ct_cli_seconds() - t0);
  return rc;
}

static void show_cache(const ct_cli *cli, ct_dtype dt, jit_state *js, ct_metrics *m) {
  ct_cli_section("cache");
  const char *compiler = cli->device.type == CT_CUDA ? "NVRTC" : "the C compiler";
  ct_tensor *in[3] = {0}, *out;
  MUST_OK(make_inputs(&loads[0], 4096, dt, cli->device, in));
  ct_dtype dts[3] = {dt, dt, dt}, odt;
  MUST_OK(ct_jit_result_dtype(fns[0], dts, 3, &odt));
  MUST(out = ct_empty(CT_SHAPE(4096), odt, cli->device));
  const ct_tensor *const *cin = (const ct_tensor *const *)in;
  ct_jit_reset_stats();
  double ms;
  if (timed_call(fns[0], cin, out, &ms) != CT_OK) { // no compiler, no NVRTC: say so, go on without
    js->ok = false;
    snprintf(js->why, sizeof js->why, "%s", ct_last_error());
    printf("fused kernels are unavailable here:\n  %s\n", js->why);
    printf("the sections below measure the unfused chain only\n");
    ct_metrics_num(m, "fused_available", 0);
    ct_metrics_str(m, "fused_unavailable_reason", js->why);
    ct_metrics_num(m, "compile_ms", NAN);
    ct_metrics_num(m, "second_call_us", NAN);
    free_inputs(in, 3);
    ct_free(out);
    return;
  }
  ct_metrics_num(m, "fused_available", 1);
  ct_jit_stats s = ct_jit_get_stats();
  if (s.compiles) printf("first call:  compiled by %s in %.1f ms (the whole call: %.1f ms)\n", compiler,
                         1e3 * s.compile_seconds, ms);
  else printf("first call:  loaded from the disk cache in %.2f ms (an earlier run compiled it)\n", ms);
  ct_metrics_num(m, "first_call_compiled", s.compiles > 0);
  ct_metrics_num(m, "first_call_ms", ms);
  double again[CACHED_CALLS]; // one call takes microseconds: the median of several
  for (int i = 0; i < CACHED_CALLS; ++i) MUST_OK(timed_call(fns[0], cin, out, &again[i]));
  ms = ct_cli_median(again, CACHED_CALLS);
  s = ct_jit_get_stats();
  printf("second call: found in memory, %.1f us, the median of %d calls (memory hits so far: %" PRId64 ")\n",
         1e3 * ms, CACHED_CALLS, s.memory_hits);
  ct_metrics_num(m, "second_call_us", 1e3 * ms);
  ct_metrics_num(m, "second_call_memory_hit", s.memory_hits == CACHED_CALLS);

  ct_jit_clear_memory_cache(); // as a new process starts
  ct_jit_reset_stats();
  MUST_OK(timed_call(fns[0], cin, out, &ms));
  s = ct_jit_get_stats();
  printf("new process: %s in %.2f ms, %s\n", s.disk_hits ? "loaded from the disk cache" : "not on disk, compiled",
         ms, s.compiles ? "the compiler ran" : "no compiler run");
  ct_metrics_num(m, "restart_ms", ms);
  ct_metrics_num(m, "restart_disk_hit", s.disk_hits == 1 && s.compiles == 0);

  char path[4300], dir[4096], shown[4096];
  MUST_OK(ct_jit_cache_entry_path(fns[0], dts, 3, cli->device, path, sizeof path));
  MUST_OK(flip_byte(path, -64)); // one bit of the compiled code
  ct_jit_clear_memory_cache();
  ct_jit_reset_stats();
  MUST_OK(timed_call(fns[0], cin, out, &ms));
  s = ct_jit_get_stats();
  const char *why = strstr(s.last_rejection, "rejected: ");
  printf("one bit of the entry flipped: %s\n  %s\n", s.rejected ? "rejected, never run" : "NOT DETECTED",
         why ? why : s.last_rejection);
  ct_metrics_print(m, "compile_ms", "  rebuilt: compiled again in %.1f ms and written back atomically\n",
                   1e3 * s.compile_seconds);
  ct_metrics_num(m, "rejected", (double)s.rejected);
  ct_metrics_num(m, "rebuild_compiles", (double)s.compiles);
  MUST_OK(ct_jit_cache_dir(dir, sizeof dir));
  printf("cache directory: %s (mode 0700, checked at every disk access)\n", home_relative(dir, shown, sizeof shown));
  printf("this kernel's entry: %s\n", strrchr(path, '/') + 1);
  free_inputs(in, 3);
  ct_free(out);
}
/*md output cache*/
/*md twin cache*/

/*md
::: zh
## 写错了怎么办

表达式写错时，`ct_jit_create` 返回 NULL，错误信息指出第几列、出了什么问题，下面一行重复表达式，再下面一行用 `^` 指着出错的地方（`~` 标出整个记号）——和编译器报错的样子一样。调用时的错误用运行时各个算子的原话：数据类型不被接受（指着那个输入第一次出现的位置）、形状不能广播（PyTorch 的原话）、输出的数据类型不对。编译器本身失败时（找不到 `cc`，或者它报了错），错误信息里是它自己的诊断输出。这些都不会让程序崩溃。
:::
::: en
## When an expression is wrong

For a bad expression `ct_jit_create` returns NULL with a message naming the column and the problem, a line repeating the expression, and under it a `^` at the spot (and `~` under the rest of the token), as a compiler reports an error. Errors at a call use the words of the runtime's ops: a dtype the JIT does not take (pointing at the input's first use), shapes that do not broadcast (PyTorch's words), an output of the wrong dtype. When the compiler itself fails (no `cc` on the machine, or it reports an error), the message holds its own diagnostics. None of this crashes the program.
:::
*/
static void show_error(const char *what) {
  printf("%s\n", what);
  for (const char *p = ct_last_error(); *p;) { // indent every line of the message
    const char *nl = strchr(p, '\n');
    int len = nl ? (int)(nl - p) : (int)strlen(p);
    printf("  %.*s\n", len, p);
    p += len + (nl ? 1 : 0);
  }
}

static void show_errors(const ct_cli *cli, jit_state *js, ct_metrics *m) {
  ct_cli_section("errors");
  static const char *const bad[][3] = {
      {"x * (y + 2", "x,y", "a parenthesis left open"},
      {"x * sigmoid(w)", "x,y", "a name nobody declared"},
      {"x * sigmod(y)", "x,y", "a misspelled function"},
      {"exp(x, y)", "x,y", "a wrong number of arguments"},
  };
  int shown = 0;
  for (int i = 0; i < 4; ++i) {
    char what[160];
    snprintf(what, sizeof what, "ct_jit_create(\"%s\", \"%s\", NULL): %s", bad[i][0], bad[i][1], bad[i][2]);
    ct_jit_fn *f = ct_jit_create(bad[i][0], bad[i][1], NULL);
    if (f) ct_jit_free(f);
    else show_error(what), ++shown;
  }
  ct_tensor *x = ct_zeros(CT_SHAPE(4, 3), CT_F32, cli->device), *y = ct_zeros(CT_SHAPE(4), CT_F32, cli->device);
  ct_tensor *k = ct_zeros(CT_SHAPE(3), CT_I64, cli->device), *z = ct_zeros(CT_SHAPE(3), CT_F32, cli->device);
  MUST(x && y && k && z);
  const double alpha = 0.5;
  const ct_tensor *int_z[3] = {x, z, k}, *no_bcast[3] = {x, y, z};
  if (!ct_jit_call(fns[0], int_z, 3, &alpha, 1))
    show_error("gate with z an int64 tensor: a dtype the JIT does not take"), ++shown;
  if (!ct_jit_call(fns[0], no_bcast, 3, &alpha, 1))
    show_error("gate with x (4, 3) and y (4): shapes that do not broadcast"), ++shown;
  ct_free(x), ct_free(y), ct_free(k), ct_free(z);
  if (!js->ok) printf("(the fused path is unavailable here: %s)\n", js->why);
  ct_metrics_num(m, "errors_shown", shown);
}
/*md output errors*/

/*md
::: zh
## 结果一致吗

同样的随机输入，三种算法：融合的核函数、不融合的算子链、以及这里在 CPU 上用 double 逐元素算出的参考值。float32 时两种做法都很接近参考值。float16 时差别就显出来了：不融合的算子链每一步都把结果舍入到 float16（每步相对误差约 2^-11），融合的核函数在 float 里算完才舍入一次，所以误差更小。这不是融合的副作用，而是它的好处：PyTorch 的 jiterator 和 Inductor 对 16 位类型也都用 float 作中间类型。测试（`tests/unit/test_jit.c`）在各种数据类型、混合类型和广播形状上做同样的三方比较，并且逐位检查单个算子融合后和运行时的运算完全相同。
:::
::: en
## Do the results agree?

The same random inputs, three ways: the fused kernel, the unfused chain, and a reference computed here on the CPU in double, element by element. In float32 both ways are close to the reference. In float16 a difference shows: the unfused chain rounds every step's result to float16 (a relative error of about 2^-11 a step), while the fused kernel computes in float and rounds once, so its error is smaller. This is not a side effect of fusion but one of its benefits; PyTorch's jiterator and Inductor also compute 16-bit types in float. The tests (`tests/unit/test_jit.c`) make the same three-way comparison over every dtype, mixed dtypes and broadcast shapes, and check bit for bit that a single operator, fused, equals the runtime's op.
:::
*/
/*md hide*/
static double sigmoid_ref(double v) { return 1.0 / (1.0 + exp(-v)); }

// max |t - ref| over the elements
static double max_err(const ct_cli *cli, const ct_tensor *t, const double *ref, int64_t n) {
  ct_tensor *d = ct_to(t, ct_device_cpu(), CT_F64, false);
  MUST(d);
  const double *v = ct_data_ptr(d);
  double e = 0;
  for (int64_t i = 0; i < n; ++i) e = fmax(e, fabs(v[i] - ref[i]));
  ct_free(d);
  return e;
}

// The inputs as float64 host values (what the dtype holds).
static double *host_values(const ct_cli *cli, const ct_tensor *t) {
  ct_tensor *d = ct_to(t, ct_device_cpu(), CT_F64, false);
  MUST(d);
  const int64_t n = ct_numel(d);
  double *v = malloc((size_t)n * sizeof *v);
  MUST(v);
  memcpy(v, ct_data_ptr(d), (size_t)n * sizeof *v);
  ct_free(d);
  return v;
}

// Saves gate's and gelu's inputs and fused outputs (float32) for the twin's check.
static void save_io(const ct_cli *cli, const char *path) {
  ct_named_tensor e[6];
  int n = 0;
  for (int w = 0; w < 2; ++w) {
    ct_tensor *in[3] = {0};
    MUST_OK(make_inputs(&loads[w], 1000, CT_F32, cli->device, in));
    ct_tensor *out = ct_jit_call(fns[w], (const ct_tensor *const *)in, n_inputs(&loads[w]), loads[w].sc, loads[w].ns);
    MUST(out);
    for (int i = 0; i < n_inputs(&loads[w]); ++i) {
      snprintf(e[n].name, sizeof e[n].name, "%s.%c", loads[w].name, loads[w].inputs[2 * i]);
      e[n++].tensor = in[i];
    }
    snprintf(e[n].name, sizeof e[n].name, "%s.out", loads[w].name);
    e[n++].tensor = out;
  }
  const char *meta[] = {"gate_alpha", "0.5", NULL};
  MUST_OK(ct_save_safetensors(path, e, n, meta));
  for (int i = 0; i < n; ++i) ct_free(e[i].tensor);
}
/*md show*/

static void show_agreement(const ct_cli *cli, const settings *s, const jit_state *js, ct_metrics *m) {
  ct_cli_section("agreement");
  const int64_t n = 4096;
  printf("gate on %" PRId64 " random elements: max |error| against float64\n", n);
  printf("%-9s %12s %12s\n", "dtype", "fused", "unfused");
  const ct_dtype dts[2] = {CT_F32, CT_F16};
  for (int d = 0; d < 2; ++d) {
    ct_tensor *in[3] = {0};
    MUST_OK(make_inputs(&loads[0], n, dts[d], cli->device, in));
    double *h[3];
    for (int i = 0; i < 3; ++i) h[i] = host_values(cli, in[i]);
    double *ref = malloc((size_t)n * sizeof *ref);
    MUST(ref);
    for (int64_t i = 0; i < n; ++i) ref[i] = h[0][i] * sigmoid_ref(h[1][i]) + loads[0].sc[0] * h[2][i];
    const ct_tensor *const *cin = (const ct_tensor *const *)in;
    ct_tensor *u = ct_jit_call_unfused(fns[0], cin, 3, loads[0].sc, 1);
    MUST(u);
    const double eu = max_err(cli, u, ref, n);
    double ef = NAN;
    if (js->ok) {
      ct_tensor *f = ct_jit_call(fns[0], cin, 3, loads[0].sc, 1);
      MUST(f);
      ef = max_err(cli, f, ref, n);
      ct_free(f);
    }
    printf("%-9s %12.3g %12.3g\n", ct_dtype_name(dts[d]), ef, eu);
    char key[64];
    snprintf(key, sizeof key, "%s_fused_err", d ? "f16" : "f32");
    ct_metrics_num(m, key, ef);
    snprintf(key, sizeof key, "%s_unfused_err", d ? "f16" : "f32");
    ct_metrics_num(m, key, eu);
    ct_free(u);
    free(ref);
    for (int i = 0; i < 3; ++i) free(h[i]);
    free_inputs(in, 3);
  }
  if (s->save && js->ok) {
    save_io(cli, s->save);
    printf("saved gate's and gelu's inputs and fused outputs for the twin's check\n");
  }
}
/*md output agreement*/

/*md
::: zh
## 快了多少：屋顶线

怎么判断一个核函数能多快？屋顶线模型把它的**运算强度**（每搬一个字节做多少次浮点运算）和机器的**平衡点**（峰值算力除以内存带宽）相比。强度低于平衡点的核函数受内存带宽限制，时间约等于“搬运的字节数 ÷ 带宽”；高于平衡点的受算力限制。逐元素运算每个元素只做几次运算、却要搬 8 到 16 个字节，强度远低于现代 CPU 和 GPU 的平衡点（GPU 上是每字节几十次运算）。所以它们的时间由字节数决定，融合的加速比应当接近字节数之比，也就是“三个工作负载”一节最后那一列。

带宽的上限用一次大的拷贝（`ct_copy_`，读一遍写一遍）来量：这是受内存限制的核函数能达到的最好水平。下表列出每个工作负载融合与不融合各用的时间、各自达到的有效带宽（搬运的字节数 ÷ 时间），以及融合的核函数达到了拷贝带宽的几成。{{recorded @run}}中，拷贝带宽是 {{recorded copy_gbs %.1f}} GB/s；不融合与融合的时间之比，`gate` 是 {{recorded gate_speedup %.2f}}（字节数之比预测 {{recorded gate_predicted_speedup %.2f}}），`gelu` 是 {{recorded gelu_speedup %.2f}}（预测 {{recorded gelu_predicted_speedup %.2f}}）。{{if recorded gate_speedup > recorded gate_predicted_speedup * 1.2}}`gate` 省下的比字节数预测的还多：融合的核函数受内存限制，时间跟着字节数走；而预测假定未融合的每个算子都跑到拷贝带宽，实际上它们各自还要分配输出、唤醒线程，达不到。{{elif recorded gate_speedup >= recorded gate_predicted_speedup * 0.8}}`gate` 达到了预测的八成以上：它受内存限制，时间跟着字节数走。{{elif recorded gate_speedup > 1.1}}`gate` 融合后更快，但不到预测的八成（原因见下一段）。{{else}}`gate` 融合后没有明显更快（原因见下一段）。{{end}}{{if recorded gelu_speedup >= recorded gelu_predicted_speedup * 0.8}}`gelu` 也达到了预测的八成以上。{{elif recorded gelu_speedup > 1.1}}`gelu` 融合后更快，但离预测还远：它不只受内存限制。{{elif recorded gelu_speedup >= 0.9}}`gelu` 融合前后用时相差不到一成：融合省下的内存读写，被它自己的计算抵消了。{{elif recorded device is cpu}}`gelu` 融合后反而更慢：两边算的是同样的多项式，这多半是机器忙，融合的那次计时碰上了别的程序（请在安静的机器上重新运行）。在 GPU 上算力宽裕得多，融合的 `gelu` 受内存限制，会比不融合的快。{{else}}`gelu` 融合后反而更慢，这在 GPU 上不是预期的结果：请在安静的机器上重新运行，并用第 11 章的分析器看看两个核函数各花了多少时间。{{end}}

实测的加速比不到预测值时，说明那个核函数已经不只是受内存限制了。在 CPU 上最常见的原因是超越函数。每个元素调用一次数学库的 `tanhf` 或 `expf`，不但一次调用就要几十个时钟周期，还让编译器没法向量化整个循环（不加 `-ffast-math` 时它没有可调用的向量版本），于是算术比搬运那几个字节还慢。所以运行时和 `ct_jit` 的 float `exp`、`tanh`、`log` 都写成不调用函数的多项式（`common/core/vecmath.h`）：一条 AVX2 指令同时算 8 个元素，`gelu` 每个元素二十来次运算，在一个核上也只要大约 1 纳秒，比主存送来它的 8 个字节还快。只有两个核、机器又忙时，`gelu` 仍可能先碰到算力的天花板；此时融合省下的仍然是那八次多余的读写，只是时间不再与字节数成比例。在 GPU 上，算力比带宽宽裕得多，这几个表达式都深深落在受内存限制的一侧，加速比更接近字节数之比。
:::
::: en
## How much faster: the roofline

How fast can a kernel be? The roofline model sets its **arithmetic intensity** (floating-point operations per byte moved) against the machine's **balance point** (peak FLOP/s over memory bandwidth). A kernel below the balance point is limited by memory bandwidth, and takes about bytes moved ÷ bandwidth; one above it is limited by arithmetic. An elementwise op does a few operations per element but moves 8 to 16 bytes, far below the balance point of any modern CPU or GPU (tens of operations per byte on a GPU). So its time is set by its bytes, and fusion's speed-up should come close to the ratio of the bytes: the last column of "Three workloads".

The ceiling for bandwidth is measured with one large copy (`ct_copy_`, one read and one write): the best a memory-bound kernel can do. The table below gives each workload's time fused and unfused, the effective bandwidth each reaches (bytes moved ÷ time), and the share of the copy bandwidth the fused kernel reaches. In {{recorded @run}}, the copy bandwidth was {{recorded copy_gbs %.1f}} GB/s; the unfused time over the fused time was {{recorded gate_speedup %.2f}} for `gate` (the bytes predict {{recorded gate_predicted_speedup %.2f}}) and {{recorded gelu_speedup %.2f}} for `gelu` (predicted {{recorded gelu_predicted_speedup %.2f}}). {{if recorded gate_speedup > recorded gate_predicted_speedup * 1.2}}`gate` saves even more than its bytes predict: the fused kernel is memory-bound and its time follows its bytes, while the prediction assumes each unfused op runs at the copy bandwidth, which they do not reach (each also allocates its output and wakes its threads).{{elif recorded gate_speedup >= recorded gate_predicted_speedup * 0.8}}`gate` reaches more than 80% of the prediction: it is memory-bound, and its time follows its bytes.{{elif recorded gate_speedup > 1.1}}Fused, `gate` is faster, but short of 80% of the prediction (the next paragraph says why).{{else}}Fused, `gate` is not clearly faster (the next paragraph says why).{{end}} {{if recorded gelu_speedup >= recorded gelu_predicted_speedup * 0.8}}`gelu` too reaches more than 80% of the prediction.{{elif recorded gelu_speedup > 1.1}}Fused, `gelu` is faster, but far from the prediction: it is not limited by memory alone.{{elif recorded gelu_speedup >= 0.9}}Fused and unfused, `gelu` takes within 10% of the same time: the memory traffic fusion saves is eaten by its own arithmetic.{{elif recorded device is cpu}}Fused, `gelu` is slower: both sides compute the same polynomials, so this is most likely a busy machine whose other programs took the fused timing's turn (run it again on a quiet machine). On a GPU, with far more arithmetic to spare, the fused `gelu` is memory-bound and beats the unfused chain.{{else}}Fused, `gelu` is slower, which is not what a GPU should show: run it again on a quiet machine and look at the two kernels' times with chapter 11's profiler.{{end}}

Where the measured speed-up falls short of the prediction, the kernel is no longer limited by memory alone. On a CPU the usual reason is transcendental functions. A call to the math library's `tanhf` or `expf` per element costs tens of cycles, and it also stops the compiler from vectorizing the loop (without `-ffast-math` there is no vector version for it to call), so the arithmetic takes longer than moving the element's few bytes. That is why the runtime's and `ct_jit`'s float `exp`, `tanh` and `log` are polynomials written without a call (`common/core/vecmath.h`): one AVX2 instruction computes 8 elements, and `gelu`'s twenty-odd operations per element take about a nanosecond on one core, less than main memory needs to deliver its 8 bytes. On two busy cores the fused `gelu` may still hit the arithmetic ceiling first; fusion still saves the eight needless round trips to memory, but the time no longer follows the bytes. On a GPU arithmetic is far more plentiful than bandwidth, these expressions sit deep on the memory-bound side, and the speed-up comes closer to the ratio of the bytes.
:::
*/
static double gbs(int64_t bytes, double ms) {
  /* LAB BEGIN: the bandwidth a call reached: the bytes it moved over its time, in GB/s (1e9 bytes per second) | stub: return 0.0; */
  return (double)bytes / (ms * 1e-3) / 1e9;
  /* LAB END */
}

/*md hide*/
typedef struct call {
  int kind; // 0 fused, 1 unfused, 2 copy
  ct_jit_fn *fn;
  const workload *w;
  const ct_tensor *const *in;
  ct_tensor *out;
  const ct_tensor *src;
} call;

static int run_call(const call *c) {
  if (c->kind == 0) return ct_jit_call_out(c->fn, c->out, c->in, n_inputs(c->w), c->w->sc, c->w->ns);
  if (c->kind == 2) return ct_copy_(c->out, c->src, false);
  ct_tensor *t = ct_jit_call_unfused(c->fn, c->in, n_inputs(c->w), c->w->sc, c->w->ns);
  ct_free(t);
  return t ? CT_OK : -1;
}

// Median milliseconds of a call on dev, timed with events on its stream:
// one warm-up, then repeats until about `budget` seconds (3 to MAX_REPS).
static double time_ms(const ct_cli *cli, const call *c, double budget) {
  ct_event *e0 = ct_event_create(cli->device, true), *e1 = ct_event_create(cli->device, true);
  MUST(e0 && e1);
  MUST_OK(run_call(c));
  double v[MAX_REPS], spent = 0;
  int reps = 0;
  while (reps < MAX_REPS && (reps < 3 || spent < budget)) {
    ct_cli_exit_if_interrupted(cli); // Ctrl-C: stop between timed runs
    float ms;
    MUST_OK(ct_event_record(e0, NULL));
    MUST_OK(run_call(c));
    MUST_OK(ct_event_record(e1, NULL));
    MUST_OK(ct_event_synchronize(e1));
    MUST_OK(ct_event_elapsed_time(e0, e1, &ms));
    v[reps++] = ms;
    spent += 1e-3 * ms;
  }
  ct_event_free(e0);
  ct_event_free(e1);
  return ct_cli_median(v, reps);
}

// The copy bandwidth at n elements of dt: ct_copy_ reads n and writes n.
static double copy_gbs(const ct_cli *cli, int64_t n, ct_dtype dt, double budget) {
  ct_tensor *a = ct_randn(CT_SHAPE(n), dt, cli->device), *b = ct_empty(CT_SHAPE(n), dt, cli->device);
  MUST(a && b);
  call c = {.kind = 2, .out = b, .src = a};
  const double ms = time_ms(cli, &c, budget);
  ct_free(a), ct_free(b);
  return gbs(2 * n * (int64_t)ct_dtype_size(dt), ms);
}

typedef struct measured {
  double fused_ms, unfused_ms, fused_gbs, unfused_gbs;
  ct_jit_traffic f, u;
} measured;

// Workload w at n elements: both ways timed, the traffic counted.
static measured measure(const ct_cli *cli, int w, int64_t n, ct_dtype dt, const jit_state *js, double budget) {
  measured r = {NAN, NAN, NAN, NAN, {0, 0}, {0, 0}};
  ct_tensor *in[3] = {0};
  MUST_OK(make_inputs(&loads[w], n, dt, cli->device, in));
  const ct_tensor *const *cin = (const ct_tensor *const *)in;
  MUST_OK(ct_jit_traffic_of(fns[w], cin, n_inputs(&loads[w]), true, &r.f));
  MUST_OK(ct_jit_traffic_of(fns[w], cin, n_inputs(&loads[w]), false, &r.u));
  call c = {.kind = 1, .fn = fns[w], .w = &loads[w], .in = cin};
  r.unfused_ms = time_ms(cli, &c, budget);
  r.unfused_gbs = gbs(r.u.bytes, r.unfused_ms);
  if (js->ok) {
    ct_dtype dts[3] = {dt, dt, dt}, odt;
    MUST_OK(ct_jit_result_dtype(fns[w], dts, n_inputs(&loads[w]), &odt));
    ct_tensor *e = ct_jit_call(fns[w], cin, n_inputs(&loads[w]), loads[w].sc, loads[w].ns); // its shape
    MUST(e);
    c.kind = 0;
    c.out = e;
    r.fused_ms = time_ms(cli, &c, budget);
    r.fused_gbs = gbs(r.f.bytes, r.fused_ms);
    ct_free(e);
  }
  free_inputs(in, 3);
  return r;
}
/*md show*/

static void show_speed(const ct_cli *cli, ct_dtype dt, int64_t n, const jit_state *js, double budget,
                       ct_metrics *m) {
  ct_cli_section("speed");
  const double copy = copy_gbs(cli, n, dt, budget);
  printf("%" PRId64 " elements of %s; copy bandwidth (ct_copy_, read + write): %.1f GB/s\n", n, ct_dtype_name(dt),
         copy);
  printf("%-10s %10s %11s %9s %10s %11s %12s %10s\n", "workload", "fused ms", "unfused ms", "speed-up", "predicted",
         "fused GB/s", "unfused GB/s", "fused/copy");
  ct_metrics_num(m, "copy_gbs", copy);
  ct_metrics_num(m, "speed_elements", (double)n);
  for (int w = 0; w < n_loads; ++w) {
    measured r = measure(cli, w, n, dt, js, budget);
    const double speedup = r.unfused_ms / r.fused_ms, pred = predicted_speedup(r.f, r.u);
    printf("%-10s %10.3f %11.3f %8.2fx %9.2fx %11.1f %12.1f %9.0f%%\n", loads[w].name, r.fused_ms, r.unfused_ms,
           speedup, pred, r.fused_gbs, r.unfused_gbs, 100 * r.fused_gbs / copy);
    const struct {
      const char *k;
      double v;
    } kv[] = {{"fused_ms", r.fused_ms},       {"unfused_ms", r.unfused_ms},
              {"fused_gbs", r.fused_gbs},     {"unfused_gbs", r.unfused_gbs},
              {"speedup", speedup},           {"fused_bytes", (double)r.f.bytes},
              {"unfused_bytes", (double)r.u.bytes}, {"fused_of_copy", r.fused_gbs / copy}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; ++i) {
      char key[64];
      snprintf(key, sizeof key, "%s_%s", loads[w].name, kv[i].k);
      ct_metrics_num(m, key, kv[i].v);
    }
  }
  if (!js->ok) printf("(fused: not measured; %s)\n", js->why);
}
/*md output speed*/
/*md twin speed*/

/*md
::: zh
## 随大小变化

最后把 `gate` 从几千个元素测到最大，同时测同样大小的拷贝带宽。小的时候，每次调用的固定开销（OpenMP 唤醒线程，或者 GPU 上启动核函数）占了大头，不融合的算子链要付四次，融合的只付一次；数据能放进缓存时，带宽也高于主存。大到放不下缓存以后，两条曲线都贴近各自受内存限制时的水平，之间的差距就是字节数之比。
:::
::: en
## By size

Last, `gate` from a few thousand elements up to the largest size, with the copy bandwidth at each size. When small, the fixed cost of every call (OpenMP waking its threads, or a kernel launch on a GPU) dominates, and the unfused chain pays it four times where the fused kernel pays it once; while the data fits in a cache the bandwidth is also above main memory's. Once the data outgrows the caches, both curves settle at their memory-bound level, and the gap between them is the ratio of the bytes.
:::
*/
static void show_sizes(const ct_cli *cli, ct_dtype dt, const int64_t *sizes, int ns, const jit_state *js,
                       double budget, ct_metrics *m) {
  ct_cli_section("sizes");
  double x[MAX_SIZES], f[MAX_SIZES], u[MAX_SIZES], c[MAX_SIZES];
  printf("gate, %s: effective GB/s\n%12s %10s %10s %10s\n", ct_dtype_name(dt), "elements", "fused", "unfused",
         "copy");
  for (int i = 0; i < ns; ++i) {
    measured r = measure(cli, 0, sizes[i], dt, js, budget);
    x[i] = (double)sizes[i];
    f[i] = r.fused_gbs;
    u[i] = r.unfused_gbs;
    c[i] = copy_gbs(cli, sizes[i], dt, budget);
    printf("%12" PRId64 " %10.2f %10.2f %10.2f\n", sizes[i], f[i], u[i], c[i]);
  }
  ct_metrics_series(m, "sizes", x, ns);
  ct_metrics_series(m, "size_fused_gbs", f, ns);
  ct_metrics_series(m, "size_unfused_gbs", u, ns);
  ct_metrics_series(m, "size_copy_gbs", c, ns);
}
/*md output sizes*/
/*md
::: zh
{{fig bandwidth}} 画出 `gate` 在各个大小下融合、不融合的有效带宽，以及拷贝的带宽作为上限：融合的线离拷贝的线越近，它就越接近内存能给的极限。
:::
::: en
{{fig bandwidth}} plots the effective bandwidth of `gate`, fused and unfused, at each size, with the copy's bandwidth as the ceiling: the closer the fused line comes to the copy line, the closer it is to what memory can give.
:::
*/
/*md figure bandwidth*/

/*md
::: zh
## main：把各部分连起来

`main` 解析参数，创建几个表达式（`--expr` 写错时，程序在这里报告错误的位置并退出），然后依次演示：工作负载、源码、缓存、错误、结果的一致性、速度、随大小变化。计时的几节用 `--dtype` 指定的数据类型（默认 float32）；最大的大小在 CPU 上是 2^24 个元素，在 GPU 上是 2^26 个（`--quick` 时小得多，`--size` 可以改）。
:::
::: en
## main: putting the parts together

`main` parses the flags, creates the expressions (a bad `--expr` is reported here, with its position, and the program exits), then shows the parts in order: the workloads, the source, the cache, the errors, agreement, speed, and speed by size. The timed sections use the dtype `--dtype` names (float32 by default); the largest size is 2^24 elements on the CPU and 2^26 on a GPU (much smaller with `--quick`; `--size` changes it).
:::
*/
int main(int argc, char **argv) {
  ct_cli cli_ = {.program = "ch13", .summary = "Chapter 13: runtime-compiled (fused) elementwise kernels."};
  ct_cli *cli = &cli_;
  settings s = {.expr = NULL, .dtype = "f32", .size = 0, .save = NULL};
  ct_cli_opt opts[] = {
      {"expr", CT_OPT_STRING, &s.expr, "a fourth workload: an expression over x, y, z and the scalars alpha (0.5), beta (2)"},
      {"dtype", CT_OPT_STRING, &s.dtype, "the inputs' dtype in the timed sections: f32, f16, bf16, f64"},
      {"size", CT_OPT_INT, &s.size, "the largest number of elements timed (a multiple of 1024; 0: 2^24 on a CPU, 2^26 on a GPU)"},
      {"save", CT_OPT_OUTPUT, &s.save, "write gate's and gelu's inputs and fused outputs (safetensors) for the twin's check"},
  };
  ct_cli_parse(cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  /*md hide*/
  ct_dtype dt;
  if (ct_dtype_parse(s.dtype, &dt) != CT_OK || !ct_dtype_is_floating(dt)) {
    fprintf(stderr, "ch13: --dtype takes f32, f16, bf16 or f64, got \"%s\"\nusage: ch13 [--help] ...\n", s.dtype);
    return 2;
  }
  if (s.size < 0 || s.size % 1024 != 0 || (s.size > 0 && s.size < 4096)) {
    fprintf(stderr, "ch13: --size must be a multiple of 1024, at least 4096 (or 0), got %ld\nusage: ch13 [--help] ...\n",
            s.size);
    return 2;
  }
  /*md show*/
  ct_cli_begin(cli); // "device: ...", ct_manual_seed(seed)
  ct_metrics *m = cli->metrics; // device, seed and quick already recorded
  if (s.expr) loads[3].expr = s.expr, n_loads = 4;
  for (int w = 0; w < n_loads; ++w) MUST(fns[w] = ct_jit_create(loads[w].expr, loads[w].inputs, loads[w].scalars));
  /*md hide*/
  // sizes: x4 steps up to the largest (GPU 2^26, CPU 2^24; --quick 2^20 / 2^18)
  const bool gpu = cli->device.type == CT_CUDA;
  int64_t top = s.size ? s.size : (int64_t)1 << (gpu ? (cli->quick ? 20 : 26) : (cli->quick ? 18 : 24));
  int64_t sizes[MAX_SIZES];
  int ns = 0;
  for (int64_t k = (int64_t)1 << (gpu ? 14 : 12); k < top && ns < MAX_SIZES - 1; k *= 4) sizes[ns++] = k;
  sizes[ns++] = top;
  const double budget = cli->quick ? 0.02 : 0.2; // seconds of repeats per measurement
  ct_metrics_str(m, "dtype", ct_dtype_name(dt));
  ct_metrics_str(m, "model", "gate, gelu, bias_relu");
  /*md show*/
  jit_state js = {.ok = true};
  show_workloads(cli, dt, m);
  show_source(cli, dt, m);
  show_cache(cli, dt, &js, m);
  show_errors(cli, &js, m);
  show_agreement(cli, &s, &js, m);
  show_speed(cli, dt, top, &js, budget, m);
  show_sizes(cli, dt, sizes, ns, &js, budget, m);
  for (int w = 0; w < n_loads; ++w) ct_jit_free(fns[w]);
  MUST_OK(ct_metrics_close(m));
  return 0;
}

/*md
::: zh
## 练习

1. 用 `--expr` 写一个自己的表达式，比如 `(x - alpha) * y * beta + z`。运行之前，先数一数不融合时有几个核函数、每个元素搬多少字节，预测加速比；再运行，和“三个工作负载”与“速度”两节对照。
2. 设置 `CT_JIT_CFLAGS="-DCT_JIT_BASELINE"` 再运行（编译选项是键的一部分，所以会重新编译）：核函数不再带 AVX2 的那一份，一步只算 4 个 float。`gate` 和 `gelu` 哪一个慢得更多？用屋顶线解释。
3. 用 `--dtype f16` 运行。字节数减半了，加速比变了吗？“结果一致吗”一节里，为什么融合的 float16 结果比不融合的更接近 float64？
4. 在缓存目录里找到一个条目，用十六进制编辑器改掉它最后的一个字节，再运行本章。哪一行说明它被拒绝了？如果只检查哈希、不检查目录的属主和权限，会留下什么漏洞？反过来只检查目录呢？
5. 给表达式语言加一个函数 `sin`：`common/jit/parse.c` 的函数表、`codegen.c` 的 `func_text`、`jit.c` 里不融合时对应的运算各要改什么？运行时还没有 `ct_sin`，不融合的一侧怎么办？
6. 在有 GPU 的机器上运行本章和它的 PyTorch 孪生程序，比较 `ct_jit` 和 `torch.cuda.jiterator` 融合后的带宽。两者离拷贝带宽各差多少？
:::
::: en
## Exercises

1. Write your own expression with `--expr`, say `(x - alpha) * y * beta + z`. Before running it, count the unfused kernels and the bytes per element and predict the speed-up; then run it and compare with "Three workloads" and "How much faster".
2. Run with `CT_JIT_CFLAGS="-DCT_JIT_BASELINE"` (the flags are part of the key, so the kernels are compiled again): the kernels lose their AVX2 clone and compute 4 floats a step. Which slows down more, `gate` or `gelu`? Explain with the roofline.
3. Run with `--dtype f16`. The bytes halve; does the speed-up change? In "Do the results agree?", why is the fused float16 result closer to float64 than the unfused one?
4. Find an entry in the cache directory, change its last byte with a hex editor, and run the chapter again. Which line says it was rejected? What hole would checking only the hash, and not the directory's owner and mode, leave open? And checking only the directory?
5. Add a function `sin` to the expression language: what changes in `common/jit/parse.c`'s function table, in `codegen.c`'s `func_text`, and in `jit.c` for the unfused chain? The runtime has no `ct_sin` yet; what would the unfused side do?
6. On a machine with a GPU, run the chapter and its PyTorch twin and compare the bandwidth of `ct_jit`'s fused kernels with `torch.cuda.jiterator`'s. How far is each from the copy bandwidth?
:::
*/
