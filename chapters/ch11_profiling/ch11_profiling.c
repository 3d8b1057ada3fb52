// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 11 章　性能分析：时间和内存花在了哪里

种子教程（本书据以重写的五篇中文教程之一，见[术语表](glossary:seed-tutorials)；这里是《PyTorch GPU 加速》）的“性能分析”一节只有几行：

```python
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
             record_shapes=True, profile_memory=True) as prof:
    with record_function("model_inference"):
        model(inputs)
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
prof.export_chrome_trace("trace.json")
```

这几行背后是一整套机器：每个算子进出时记下时间戳（CPU 上的区间），GPU 上的核函数真正执行的时间（设备时间，和 CPU 上“发出”它的时间是两回事），每次分配和释放的字节数，每个区间的嵌套关系，最后汇总成一张表，再写成 Chrome/Perfetto 能打开的时间线文件。本章把这套机器放进运行时（`common/prof/`，公开头文件 `profiler.h`），然后用它分析第 6 章的 Fashion-MNIST 卷积网络（带 BatchNorm）的一个训练步：哪个算子最热、内存在哪里分配、时间线长什么样、开着分析器要多花多少时间。

种子的写法有三处需要补充。第一，它分析的是**第一次**调用：第一次前向要初始化 cuBLAS、让缓存分配器向驱动要内存，测到的大多是预热；`torch.profiler.schedule` 的 `skip_first` 和 `wait` 就是为了跳过这些（那几步根本不分析），本章照做；之后的 `warmup` 是另一回事：分析器已经开始跟踪，但结果丢掉，去掉的是分析器自己刚启动时的额外开销造成的偏差。第二，在只有 CPU 的机器上，`sort_by="cuda_time_total"` 排的是一列全零。第三，GPU 上 CPU 区间的长度只是**启动**核函数的时间，核函数什么时候跑完要看设备时间那一列。

```sh
cd build && ninja ch11_profiling
./ch11                       # 有 GPU 就在 GPU 上分析
./ch11 --device cpu --quick  # 几秒钟
./ch11 --trace step.json     # 时间线写到 step.json，用 Perfetto（ui.perfetto.dev）或 chrome://tracing 打开
```
:::
::: en
# Chapter 11. Profiling: where the time and the memory go

The "profiling" section of a seed tutorial (one of the five Chinese tutorials this book rebuilds, listed in the [glossary](glossary:seed-tutorials); here “PyTorch GPU acceleration”) is a few lines:

```python
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
             record_shapes=True, profile_memory=True) as prof:
    with record_function("model_inference"):
        model(inputs)
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=10))
prof.export_chrome_trace("trace.json")
```

Behind them is a whole machine: a timestamp as each op enters and leaves (its range on the CPU), the time a GPU kernel really ran (device time, not the same thing as the time the CPU took to issue it), the bytes of every allocation and free, how the ranges nest, and at the end a table of sums and a timeline file that Chrome and Perfetto open. This chapter builds that machine into the runtime (`common/prof/`, public header `profiler.h`) and turns it on one training step of chapter 6's Fashion-MNIST convolutional network (with BatchNorm): which op is hottest, where memory is allocated, what the timeline looks like, and what the profiler itself costs.

The seed's code needs three additions. First, it profiles the **first** call: the first forward initializes cuBLAS and makes the caching allocator ask the driver for memory, so most of what it measures is warm-up; `torch.profiler.schedule`'s `skip_first` and `wait` exist to skip that (those steps are not profiled at all), and this chapter uses them; the `warmup` steps after them are another matter: the profiler is already tracing but throws the result away, to drop the skew its own start-up overhead puts into the first traced steps. Second, on a CPU-only machine `sort_by="cuda_time_total"` sorts by a column of zeros. Third, on a GPU a CPU range only lasts as long as issuing the kernel; when the kernel finished is in the device-time columns.

```sh
cd build && ninja ch11_profiling
./ch11                       # on the GPU when there is one
./ch11 --device cpu --quick  # seconds
./ch11 --trace step.json     # the timeline in step.json: open it in Perfetto (ui.perfetto.dev) or chrome://tracing
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

#define FMNIST_MEAN 0.2860
#define FMNIST_STD 0.3530
#define NUM_CLASSES 10
#define MAX_TIMELINE 512 // boxes in the timeline figure

typedef struct settings {
  long batch_size, channels, overhead_steps, rounds;
  const char *data, *trace;
} settings;

// Batches without end: a new epoch when the loader runs dry.
typedef struct batches {
  ct_dataloader *dl;
} batches;

static int next_batch(batches *b, ct_tensor **x, ct_tensor **y) {
  int rc = ct_dataloader_next(b->dl, x, y);
  if (rc == 0) rc = ct_dataloader_start_epoch(b->dl) == CT_OK ? ct_dataloader_next(b->dl, x, y) : -1;
  return rc == 1 ? CT_OK : -1;
}
/*md show*/

/*md
::: zh
## 被分析的模型和训练步

模型就是第 6 章带 `--batchnorm` 的 CNN：两层 3×3 卷积（16 和 32 个通道），各接 BatchNorm、ReLU 和 2×2 最大池化，再接两层全连接，中间有 Dropout；优化器是 Adam。数据也一样，用运行时的 `ct_fashion_mnist` 和 DataLoader 读 Fashion-MNIST 的训练集（两个工作线程，所以时间线上会多出它们的线程）。

一个训练步和第 6 章的 `train_step` 一样，只是用 `ct_record_function_begin/end`（`torch.profiler.record_function`）把前向、损失、反向三段各包成一个命名区间。优化器的 `zero_grad` 和 `step` 不用包：运行时自己会以 PyTorch 的名字 `Optimizer.zero_grad#Adam.zero_grad`、`Optimizer.step#Adam.step` 记下它们；每个模块的前向和反向也会自动成为 `Conv2d.forward`、`BatchNorm2d.backward` 这样的区间。
:::
::: en
## The model and the step under the profiler

The model is chapter 6's CNN with `--batchnorm`: two 3×3 convolutions (16 and 32 channels), each followed by BatchNorm, ReLU and 2×2 max pooling, then two fully connected layers with Dropout between them; the optimizer is Adam. The data is the same too: Fashion-MNIST's training set through the runtime's `ct_fashion_mnist` and a DataLoader (two worker threads, which will show up as threads of their own in the timeline).

A training step is chapter 6's `train_step`, with the forward pass, the loss and the backward pass each wrapped in a named range by `ct_record_function_begin/end` (`torch.profiler.record_function`). The optimizer's `zero_grad` and `step` need no wrapping: the runtime records them itself under PyTorch's names, `Optimizer.zero_grad#Adam.zero_grad` and `Optimizer.step#Adam.step`; every module's forward and backward also becomes a range of its own, such as `Conv2d.forward` or `BatchNorm2d.backward`.
:::
*/
// Chapter 6's CNN with BatchNorm (ch06: build_cnn(c1, true, 0.25)).
static ct_module *build_cnn(int64_t c1) {
  int64_t c2 = 2 * c1;
  ct_module *mods[] = {
      ct_nn_conv2d(1, c1, 3, 1, 1, true), ct_nn_batchnorm2d(c1, 1e-5, 0.1), ct_nn_relu(), ct_nn_maxpool2d(2, 0),
      ct_nn_conv2d(c1, c2, 3, 1, 1, true), ct_nn_batchnorm2d(c2, 1e-5, 0.1), ct_nn_relu(), ct_nn_maxpool2d(2, 0),
      ct_nn_flatten(), ct_nn_linear(c2 * 7 * 7, 128, true), ct_nn_relu(), ct_nn_dropout(0.25),
      ct_nn_linear(128, NUM_CLASSES, true),
  };
  return ct_nn_sequential((int)(sizeof mods / sizeof mods[0]), mods);
}

// One optimization step on (x, y), with the seed's record_function ranges.
static int train_step(ct_module *model, ct_optimizer *opt, const ct_tensor *x, const ct_tensor *y) {
  if (ct_optimizer_zero_grad(opt, true) != CT_OK) return -1; // "Optimizer.zero_grad#Adam.zero_grad"
  ct_record_function_begin("forward");
  ct_tensor *logits = ct_module_forward(model, x);
  ct_record_function_end();
  ct_record_function_begin("loss");
  ct_tensor *dlogits = NULL;
  ct_tensor *loss = logits ? ct_cross_entropy_loss(logits, y, &dlogits) : NULL;
  ct_record_function_end();
  ct_free(logits);
  ct_record_function_begin("backward");
  int rc = loss ? ct_module_backward_params(model, dlogits) : -1;
  ct_record_function_end();
  ct_free(dlogits);
  ct_free(loss);
  if (rc == CT_OK) rc = ct_optimizer_step(opt); // "Optimizer.step#Adam.step"
  return rc;
}
/*md twin step*/

/*md
::: zh
## 运行时里的分析器

`profiler.h` 的接口照着 `torch.profiler` 写：`ct_profiler_start` 和 `ct_profiler_stop` 是 `with profile(...)` 的进和出，`ct_profiler_step` 是 `prof.step()`，选项里有 `activities`（CPU、CUDA）、`record_shapes`、`profile_memory` 和 `schedule`。它记下四种东西：

- **区间**：用户的 `record_function`、模块的前向/反向、优化器，以及每个**算子**。算子区间从一个地方来：所有的算子都要经过调度器（`common/core/ops.c`）取设备的后端表，分析器开着的时候，它交出的是后端表的一个副本，副本的每个入口先开一个名为 `ct::gemm`、`ct::im2col`、`ct::add` 这样的区间，再调真正的入口，最后关掉区间（`common/prof/prof_backend.c`）。这相当于 PyTorch 的 `aten::` 算子。分析器关着的时候，调度器只多一次对一个标志的判断。
- **设备时间**：在 GPU 上，算子的区间前后各在它的流上记一个 CUDA event，结束时用 `cudaEventElapsedTime` 算出核函数在设备上花的时间，并以会话开始时在空闲设备上记下的一个 event 为原点，放到主机的时间线上。PyTorch 用 CUPTI 拿到每个核函数的真实时间戳；用 event 的代价是每个算子多两次 `cudaEventRecord`，好处是只用 CUDA 运行时本身。
- **内存**：`profile_memory` 打开时，缓存分配器每次分配和释放都记一个事件：字节数、设备、地址，以及分配器此刻的 `memory_allocated` 和 `memory_reserved`（和 PyTorch 的 `[memory]` 事件同样的字段）。事件算在当时最内层的区间上，于是表里有“自身分配了多少内存”这一列。
- **形状**：`record_shapes` 打开时，每个算子记下核函数实际处理的形状（GEMM 是 `[[m, k], [k, n]]`），每个模块记下输入的形状。

每个线程往自己的缓冲区里写（DataParallel 的副本线程、DataLoader 的工作线程各有自己的一条轨道），嵌套关系靠一个线程局部的栈。区间同时也是 NVTX 区间：在 CUDA 构建里用 CUDA 工具包自带的 nvtx3 头文件（只有头文件，不用链接），用 Nsight Systems（`nsys profile -t cuda,nvtx ./ch11`）就能在它的时间线上看到同样的名字；没有 CUDA 时它什么也不做。
:::
::: en
## The profiler in the runtime

`profiler.h` follows `torch.profiler`: `ct_profiler_start` and `ct_profiler_stop` are entering and leaving `with profile(...)`, `ct_profiler_step` is `prof.step()`, and the options are `activities` (CPU, CUDA), `record_shapes`, `profile_memory` and `schedule`. It records four things:

- **Ranges**: the user's `record_function`, each module's forward and backward, the optimizer, and every **op**. Op ranges come from one place: every op goes through the dispatcher (`common/core/ops.c`) to get its device's backend table, and while the profiler runs, what it hands out is a copy of that table whose every entry opens a range named `ct::gemm`, `ct::im2col`, `ct::add` and so on, calls the real entry, and closes the range (`common/prof/prof_backend.c`). These are the counterparts of PyTorch's `aten::` ops. With the profiler off, the dispatcher pays one test of a flag.
- **Device time**: on a GPU, an op's range records a CUDA event on its stream before and after the work; at the end `cudaEventElapsedTime` gives the time the kernel took on the device, placed on the host's timeline from an event recorded on the idle device when the session started. PyTorch gets every kernel's own timestamps from CUPTI; events cost two `cudaEventRecord` calls per op, and need nothing beyond the CUDA runtime.
- **Memory**: with `profile_memory`, the caching allocator records an event at every allocation and free: the bytes, the device, the address, and the allocator's `memory_allocated` and `memory_reserved` right after (the fields of PyTorch's `[memory]` events). Each is counted in the innermost range open at the time, which gives the table its "self memory" columns.
- **Shapes**: with `record_shapes`, every op records the shapes its kernel ran on (`[[m, k], [k, n]]` for a GEMM), and every module its input's shape.

Each thread writes to its own buffer (DataParallel's replica threads and the DataLoader's workers each get a track of their own), and a thread-local stack keeps the nesting. Ranges are NVTX ranges too: CUDA builds use the toolkit's header-only nvtx3, so Nsight Systems (`nsys profile -t cuda,nvtx ./ch11`) shows the same names on its timeline; without CUDA it does nothing.
:::
*/
/*md source common/prof/prof_backend.c wrapper*/

/*md
::: zh
## 按计划分析几步：key_averages 表

`schedule` 和种子教程之外常见的用法一样：等 1 步（wait：不分析，让模型自己的预热过去），预热 1 步（warmup：分析器跟踪但丢掉结果，去掉它自己启动时的偏差），记录 3 步（active）。每调用一次 `ct_profiler_step` 就进入下一步，分析器给每一步开一个 `ProfilerStep#N` 区间。PyTorch 的孪生程序用同一个计划。

`ct_profiler_key_averages` 把同名的区间加在一起，就是 `prof.key_averages()`；`ct_profiler_table` 按 PyTorch 的列打印：自身 CPU 时间（不含子区间）和它占总数的百分比、CPU 总时间（含子区间）、平均时间，GPU 上还有对应的 CUDA 列，`profile_memory` 时有内存列，最后是调用次数。排序用 PyTorch 的 `sort_by` 名字，任何一列都可以。“Self CPU time total” 是所有行自身时间的和，也就是最外层区间时间的和：每一微秒只算在一行上。
:::
::: en
## A few steps on a schedule: the key_averages table

The `schedule` is the usual one: wait 1 step (not profiled: the model's own warm-up goes by), warm up 1 (the profiler traces and throws the result away, dropping its own start-up skew), record 3 (active). Each call of `ct_profiler_step` starts the next step, and the profiler opens a `ProfilerStep#N` range for each step. The PyTorch twin uses the same schedule.

`ct_profiler_key_averages` adds up the ranges of each name, as `prof.key_averages()` does, and `ct_profiler_table` prints PyTorch's columns: self CPU time (without the children) and its share of the total, total CPU time (with the children), the average, on a GPU the matching CUDA columns, with `profile_memory` the memory columns, and the number of calls. Sorting takes PyTorch's `sort_by` names, for any column. "Self CPU time total" is the sum of the rows' self times, which is the time of the outermost ranges: each microsecond is counted in one row only.
:::
*/
// Profiles wait + warmup + active steps; leaves the session stopped in *out.
static int profile_steps(ct_module *model, ct_optimizer *opt, batches *data, ct_profiler **out) {
  ct_profiler_options o = ct_profiler_defaults(); // activities: CPU and CUDA
  o.record_shapes = true;
  o.profile_memory = true;
  o.schedule = (ct_profiler_schedule){.wait = 1, .warmup = 1, .active = 3, .repeat = 1};
  ct_profiler *p = ct_profiler_start(&o);
  if (!p) return -1;
  int rc = CT_OK;
  for (int step = 0; step < 5 && rc == CT_OK; ++step) {
    ct_tensor *x = NULL, *y = NULL;
    rc = next_batch(data, &x, &y);
    if (rc == CT_OK) rc = train_step(model, opt, x, y);
    ct_free(x);
    ct_free(y);
    if (rc == CT_OK) rc = ct_profiler_step(p); // prof.step()
  }
  if (ct_profiler_stop(p) != CT_OK) rc = -1;
  *out = p;
  return rc;
}
/*md twin profile*/

static const char *sort_key(ct_device d) { return d.type == CT_CUDA ? "self_cuda_time_total" : "self_cpu_time_total"; }

static int show_table(ct_profiler *p, ct_device dev, ct_metrics *m) {
  ct_cli_section("key averages");
  ct_profiler_averages *a = ct_profiler_key_averages(p, false);
  char *table = a ? ct_profiler_table(a, sort_key(dev), 15) : NULL;
  if (!table) return -1;
  printf("sorted by %s, top 15 rows:\n%s", sort_key(dev), table);
  ct_metrics_num(m, "rows", a->n);
  ct_metrics_num(m, "self_cpu_total_ms", a->self_cpu_total_us / 1e3);
  ct_metrics_num(m, "self_cuda_total_ms", a->has_device ? a->self_device_total_us / 1e3 : NAN);
  free(table);
  ct_profiler_averages_free(a);
  return CT_OK;
}
/*md output key averages*/

/*md
::: zh
## 最热的算子

表的第一行常常是一个用户区间或模块，不是算子：它们的自身时间里有 Python（这里是 C）自己的开销、分配和参数检查。要找最该优化的算子，只看算子的行（`ct::` 开头的），取自身时间最大的那一个：CPU 上看自身 CPU 时间，GPU 上看自身 CUDA 时间，因为 GPU 上 CPU 时间只是启动核函数的时间。光知道名字还不够，还要知道**谁**调用了它：把这个算子的每个事件往上找到它所在的模块区间，按模块加总。再按输入形状分组（`group_by_input_shape`），看同一个算子在哪种形状上最慢。这个函数是一个练习区。
:::
::: en
## The hottest op

The table's first row is often a user range or a module rather than an op: their self time holds the program's own overhead, allocation and argument checking. To find the op most worth optimizing, look only at the op rows (those starting with `ct::`) and take the one with the largest self time: self CPU time on the CPU, self CUDA time on a GPU, where the CPU time is only the time to issue the kernel. The name alone is not enough; the question is also **who** calls it: follow each of its events up to the module range it ran in and add up per module. Grouping by input shape (`group_by_input_shape`) then shows which shapes of the same op are slowest. This function is a lab region.
:::
*/
static double self_time(const ct_profiler_row *r, bool device) { return device ? r->self_device_us : r->self_cpu_us; }

// The op row (name "ct::...") with the largest self time (device time when
// `device`), or NULL.
static const ct_profiler_row *hottest_op(const ct_profiler_averages *a, bool device) {
  /* LAB BEGIN: among the rows whose name starts with "ct::", return the one with the largest self_time (NULL if none) */
  const ct_profiler_row *best = NULL;
  for (int i = 0; i < a->n; ++i) {
    const ct_profiler_row *r = &a->rows[i];
    if (strncmp(r->name, "ct::", 4) != 0) continue;
    if (!best || self_time(r, device) > self_time(best, device)) best = r;
  }
  return best;
  /* LAB END */
}

// The module range an event ran in (the nearest ancestor of kind MODULE).
static int module_of(const ct_profiler_event *ev, int i) {
  for (int k = ev[i].parent; k >= 0; k = ev[k].parent)
    if (ev[k].kind == CT_EVENT_MODULE) return k;
  return -1;
}

static int show_hottest(ct_profiler *p, ct_device dev, ct_metrics *m) {
  ct_cli_section("hottest op");
  bool device = dev.type == CT_CUDA;
  ct_profiler_averages *a = ct_profiler_key_averages(p, false);
  const ct_profiler_row *h = a ? hottest_op(a, device) : NULL;
  if (!h) {
    ct_profiler_averages_free(a);
    return ct_fail(CT_ERR_VALUE, "ch11: no op was recorded");
  }
  double total = device ? a->self_device_total_us : a->self_cpu_total_us;
  printf("hottest op: %s, self %s time %.3f ms over %" PRId64 " calls (%.1f%% of all self %s time)\n",
         h->name, device ? "CUDA" : "CPU", self_time(h, device) / 1e3, h->count,
         100.0 * self_time(h, device) / total, device ? "CUDA" : "CPU");
  char hot[64];
  snprintf(hot, sizeof hot, "%s", h->name); // h lives in `a`, freed below
  ct_metrics_str(m, "hottest_op", hot);
  ct_metrics_num(m, "hottest_share", self_time(h, device) / total);
  // The rule on a table whose largest self time is a user range's, the case the "ct::" filter is for.
  ct_profiler_row ex[3] = {{.name = "forward", .self_cpu_us = 900, .self_device_us = 900},
                           {.name = "ct::gemm", .self_cpu_us = 500, .self_device_us = 500},
                           {.name = "ct::add", .self_cpu_us = 100, .self_device_us = 100}};
  const ct_profiler_row *eh = hottest_op(&(ct_profiler_averages){.n = 3, .rows = ex}, device);
  ct_metrics_str(m, "hottest_op_example", eh ? eh->name : "(none)");
  // who calls it: its self time per enclosing module range
  int n = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  char names[16][64];
  double us[16] = {0};
  int calls[16] = {0}, k = 0;
  /* LAB BEGIN: for each op event named hot: its module range (module_of, else "(no module)") gets a row in names[] (at most 16), one more call and its time (device_us on a GPU, else self_cpu_us) */
  for (int i = 0; i < n; ++i) {
    if (ev[i].kind != CT_EVENT_OP || strcmp(ev[i].name, hot)) continue;
    int mod = module_of(ev, i);
    const char *who = mod >= 0 ? ev[mod].name : "(no module)";
    int j = 0;
    while (j < k && strcmp(names[j], who)) ++j;
    if (j == k && k < 16) snprintf(names[k++], 64, "%s", who);
    if (j < k) us[j] += device ? ev[i].device_us : ev[i].self_cpu_us, calls[j]++;
  }
  /* LAB END */
  printf("called from:\n");
  for (int j = 0; j < k; ++j)
    printf("  %-22s %3d calls  %8.3f ms\n", names[j], calls[j], us[j] / 1e3);
  ct_profiler_averages_free(a);
  // the same op by input shape
  a = ct_profiler_key_averages(p, true);
  if (!a || ct_profiler_averages_sort(a, sort_key(dev)) != CT_OK) return -1;
  printf("%s by input shape:\n", hot);
  for (int i = 0; i < a->n; ++i)
    if (!strcmp(a->rows[i].name, hot))
      printf("  %-34s %3" PRId64 " calls  %8.3f ms\n", a->rows[i].shapes, a->rows[i].count,
             self_time(&a->rows[i], device) / 1e3);
  ct_profiler_averages_free(a);
  return CT_OK;
}
/*md output hottest op*/
/*md twin hottest*/

/*md
::: zh
## 内存：谁分配了多少

种子的第二段代码按 `self_cpu_memory_usage` 排序。“自身内存”是一个区间里分配的字节减去释放的字节，不含子区间。一个模块的前向分配它的输出和反向要用的中间结果；反向分配对输入的梯度。中间结果什么时候释放，PyTorch 和 ct 不一样：PyTorch 的 autograd 在反向途中就释放保存的张量，所以它的反向行常常是负的；ct 的模块把保存的东西留到下一次前向再换掉，所以释放出现在下一步的前向里，前向那一行是这一步新分配的和上一步留下的相抵之后的净值。GPU 上要看的是 CUDA 内存的列。

分析器的内存事件和分配器的统计是同一件事的两个账本，所以必须对得上：所有事件字节数的和，等于会话开始和结束时 `ct_memory_allocated` 的差；每个事件记下的“分配后总量”，等于开始时的量加上到它为止的字节数之和。下面把这两笔账核对一遍（这需要一个从头记到尾的会话：这里用一个不按计划的短会话，只跑一步，用的是已经从 DataLoader 取出来的一批数据，这样它的工作线程在这期间不会分配内存）。
:::
::: en
## Memory: who allocates how much

The seed's second snippet sorts by `self_cpu_memory_usage`. A range's "self memory" is the bytes it allocated minus the bytes it freed, without its children. A module's forward allocates its output and what backward will need; backward allocates the gradient with respect to its input. When the saved tensors are freed differs: PyTorch's autograd frees them during backward, so its backward rows are often negative; ct's modules keep what they saved until the next forward replaces it, so the frees land in the next step's forward, whose row is the net of this step's allocations and the last step's leftovers. On a GPU the CUDA memory columns are the ones to read.

The profiler's memory events and the allocator's statistics are two books of the same account, so they must agree: the bytes of all events add up to the change of `ct_memory_allocated` between the session's start and stop, and the "total allocated" each event carries is the start's amount plus the bytes up to and including it. Below the two books are checked against each other (which needs a session recording from start to stop: a short one without a schedule, over one step on a batch already taken from the DataLoader, so that its workers allocate nothing meanwhile).
:::
*/
static int show_memory(ct_module *model, ct_optimizer *opt, batches *data, ct_device dev, ct_metrics *m) {
  ct_cli_section("memory");
  ct_tensor *x = NULL, *y = NULL;
  if (next_batch(data, &x, &y) != CT_OK) return -1;
  // One unprofiled step on the same batch first: meanwhile the DataLoader's
  // workers refill the slot just taken, so no other thread allocates while
  // the books are kept.
  if (train_step(model, opt, x, y) != CT_OK) return -1;
  ct_profiler_options o = ct_profiler_defaults();
  o.profile_memory = true;
  size_t before = ct_memory_allocated(dev);
  ct_profiler *p = ct_profiler_start(&o);
  int rc = p ? train_step(model, opt, x, y) : -1;
  if (p && ct_profiler_stop(p) != CT_OK) rc = -1;
  size_t after = ct_memory_allocated(dev);
  ct_free(x);
  ct_free(y);
  ct_profiler_averages *a = rc == CT_OK ? ct_profiler_key_averages(p, false) : NULL;
  const char *key = dev.type == CT_CUDA ? "self_cuda_memory_usage" : "self_cpu_memory_usage";
  char *table = a ? ct_profiler_table(a, key, 8) : NULL;
  if (!table) rc = -1;
  if (rc == CT_OK) {
    printf("sorted by %s, top 8 rows:\n%s", key, table);
    int n = 0, allocs = 0, frees = 0;
    const ct_profiler_event *ev = ct_profiler_events(p, &n);
    int64_t net = 0, running = (int64_t)before, bad = 0;
    for (int i = 0; i < n; ++i) {
      if (ev[i].kind != CT_EVENT_MEMORY || !ct_device_eq(ev[i].device, dev)) continue;
      ev[i].bytes > 0 ? allocs++ : frees++;
      net += ev[i].bytes;
      running += ev[i].bytes;
      bad += (int64_t)ev[i].total_allocated != running;
    }
    int64_t moved = (int64_t)after - (int64_t)before;
    printf("memory events: %d allocations, %d frees, net %" PRId64 " bytes; memory_allocated moved %" PRId64
           " bytes: %s; running totals: %s\n", allocs, frees, net, moved, net == moved ? "balanced" : "NOT balanced",
           bad ? "MISMATCH" : "all match");
    ct_metrics_num(m, "memory_events", allocs + frees);
    ct_metrics_num(m, "memory_balanced", net == moved && !bad);
  }
  free(table);
  ct_profiler_averages_free(a);
  ct_profiler_free(p);
  return rc;
}
/*md output memory*/

/*md
::: zh
## 时间线：Chrome 跟踪格式

`ct_profiler_export_chrome_trace` 写出 Trace Event Format 的 JSON（Chrome 的 `chrome://tracing` 和 Perfetto 都能打开）：每个区间是一个“完整事件”（`"ph": "X"`，开始时间 `ts` 和长度 `dur`，单位微秒），带进程号 `pid` 和线程号 `tid`；内存是名为 `[memory]` 的“瞬时事件”（`"ph": "i"`），参数和 PyTorch 的一样；GPU 上的核函数在设备自己的“进程”里，每条流一条轨道；另有元数据事件给进程和线程起名。测试 `chapter.ch11_trace` 用一个照着格式规范写的独立检查器读这个文件：能解析、字段齐全、每个线程的区间正确嵌套、表里的总数和文件里的时间对得上、内存事件和分配器的统计对得上。

下面的图就是从这份跟踪里画出来的：记录的最后一步（`ProfilerStep`）里主线程上每个区间一个方块，嵌套越深越靠下，颜色是种类。可以看到前向、损失、反向、优化器的先后，每一段里各个模块，以及模块里的算子。
:::
::: en
## The timeline: Chrome's trace format

`ct_profiler_export_chrome_trace` writes the Trace Event Format's JSON (which Chrome's `chrome://tracing` and Perfetto open): each range is a "complete event" (`"ph": "X"`, a start `ts` and a duration `dur`, in microseconds) with a process id `pid` and a thread id `tid`; memory is an "instant event" (`"ph": "i"`) named `[memory]` with PyTorch's args; a GPU's kernels sit in the device's own "process", one track per stream; metadata events name the processes and threads. The test `chapter.ch11_trace` reads the file with an independent checker written from the format's specification: it parses, its fields are all there, every thread's ranges nest, the table's totals match the times in the file, and the memory events match the allocator's statistics.

The figure below is drawn from that trace: one box per range of the main thread in the last recorded step (`ProfilerStep`), deeper nesting further down, the kind as the colour. The forward pass, the loss, backward and the optimizer follow each other; inside each are the modules, and inside those the ops.
:::
*/
// Which box of the figure gets which label (timeline_label): 1 forward, 2 loss, 3 backward,
// 4 zero_grad, 5 the optimizer's step (the ranges by name), 6 to 8 the longest box of each
// of the step's three hottest ops by self CPU time (their names: timeline_hot1..3), 0 none.
static double timeline_label_of(const ct_profiler_event *e) {
  static const char *const ranges[] = {"forward", "loss", "backward"};
  if (e->kind == CT_EVENT_USER)
    for (int r = 0; r < 3; ++r)
      if (strcmp(e->name, ranges[r]) == 0) return r + 1;
  if (strncmp(e->name, "Optimizer.zero_grad", 19) == 0) return 4;
  if (strncmp(e->name, "Optimizer.step", 14) == 0) return 5;
  return 0;
}

static void timeline_hot_ops(const ct_profiler_event *ev, const int *idx, int k, double *label, ct_metrics *m) {
  char names[MAX_TIMELINE][64];
  double self[MAX_TIMELINE];
  int nn = 0;
  for (int j = 0; j < k; ++j) { // self CPU time per op name inside the step
    const ct_profiler_event *e = &ev[idx[j]];
    if (e->kind != CT_EVENT_OP) continue;
    int f = 0;
    while (f < nn && strcmp(names[f], e->name) != 0) f++;
    if (f == nn) {
      snprintf(names[nn], sizeof names[nn], "%s", e->name);
      self[nn++] = 0;
    }
    self[f] += e->self_cpu_us;
  }
  for (int h = 0; h < 3; ++h) {
    int best = -1;
    for (int f = 0; f < nn; ++f)
      if (self[f] >= 0 && (best < 0 || self[f] > self[best])) best = f;
    if (best < 0) break;
    int longest = -1;
    for (int j = 0; j < k; ++j)
      if (ev[idx[j]].kind == CT_EVENT_OP && strcmp(ev[idx[j]].name, names[best]) == 0 &&
          (longest < 0 || ev[idx[j]].dur_us > ev[idx[longest]].dur_us))
        longest = j;
    label[longest] = 6 + h;
    char key[32];
    snprintf(key, sizeof key, "timeline_hot%d", h + 1);
    ct_metrics_str(m, key, names[best]);
    self[best] = -1;
  }
}

// The last ProfilerStep's ranges on its thread, as lists for the figure:
// start and end (ms from the step's start), depth below the step, kind, label.
static void timeline_metrics(const ct_profiler_event *ev, int n, ct_metrics *m) {
  int step = -1;
  for (int i = 0; i < n; ++i)
    if (ev[i].kind == CT_EVENT_STEP) step = i;
  if (step < 0) return;
  static double t0[MAX_TIMELINE], t1[MAX_TIMELINE], level[MAX_TIMELINE], kind[MAX_TIMELINE], label[MAX_TIMELINE];
  static int idx[MAX_TIMELINE];
  int k = 0;
  double origin = ev[step].ts_us;
  for (int i = step; i < n && k < MAX_TIMELINE; ++i) {
    const ct_profiler_event *e = &ev[i];
    int up = e->parent;
    while (up >= 0 && up != step) up = ev[up].parent;
    bool inside = i == step || up == step;
    bool kernel = e->kind == CT_EVENT_KERNEL && e->ts_us >= origin && e->ts_us <= origin + ev[step].dur_us;
    if (!(inside && e->kind != CT_EVENT_MEMORY) && !kernel) continue;
    t0[k] = (e->ts_us - origin) / 1e3;
    t1[k] = (e->ts_us + e->dur_us - origin) / 1e3;
    level[k] = kernel ? -1 : e->depth - ev[step].depth; // kernels: a row below the host's
    kind[k] = e->kind == CT_EVENT_STEP ? 0 : e->kind == CT_EVENT_USER ? 1 : e->kind == CT_EVENT_MODULE ? 2
              : e->kind == CT_EVENT_OP ? 3 : 4;
    label[k] = timeline_label_of(e);
    idx[k] = i;
    k++;
  }
  timeline_hot_ops(ev, idx, k, label, m);
  ct_metrics_series(m, "timeline_start_ms", t0, k);
  ct_metrics_series(m, "timeline_end_ms", t1, k);
  ct_metrics_series(m, "timeline_level", level, k);
  ct_metrics_series(m, "timeline_kind", kind, k);
  ct_metrics_series(m, "timeline_label", label, k);
}

static int show_trace(const settings *s, ct_profiler *p, ct_metrics *m) {
  ct_cli_section("trace");
  if (ct_profiler_export_chrome_trace(p, s->trace) != CT_OK) return -1;
  int n = 0, counts[6] = {0}, tids[64], nt = 0;
  const ct_profiler_event *ev = ct_profiler_events(p, &n);
  for (int i = 0; i < n; ++i) {
    counts[ev[i].kind]++;
    bool seen = ev[i].kind == CT_EVENT_KERNEL;
    for (int k = 0; k < nt && !seen; ++k) seen = tids[k] == ev[i].tid;
    if (!seen && nt < 64) tids[nt++] = ev[i].tid;
  }
  printf("wrote %s: %d events (%d steps, %d user ranges, %d module ranges, %d ops, %d kernels, %d memory) "
         "on %d threads\n", s->trace, n, counts[CT_EVENT_STEP], counts[CT_EVENT_USER], counts[CT_EVENT_MODULE],
         counts[CT_EVENT_OP], counts[CT_EVENT_KERNEL], counts[CT_EVENT_MEMORY], nt);
  printf("open it in Perfetto (ui.perfetto.dev) or chrome://tracing\n");
  printf("NVTX ranges: %s\n", ct_profiler_has_nvtx() ? "on (nsys profile -t cuda,nvtx ./ch11 shows them)"
                                                     : "off (a CPU-only build: no CUDA toolkit)");
  ct_metrics_str(m, "trace", s->trace);
  ct_metrics_num(m, "trace_events", n);
  ct_metrics_num(m, "trace_threads", nt);
  timeline_metrics(ev, n, m);
  return CT_OK;
}
/*md output trace*/
/*md
::: zh
{{fig timeline}} 是从导出的 trace 画出的时间线：横轴是距这一步开始的时间，嵌套越深越靠下，每个区间一个方块；在 GPU 上运行时，核函数在最上面的“GPU”一行，CPU 上没有这一行。前向、损失、反向和优化器的方块上写着名字，这一步里自身 CPU 时间最多的三个算子，各在它最长的那个方块上标出带圈的 1、2、3，名字写在图下方：先看这几个方块，就知道时间花在哪里。
:::
::: en
{{fig timeline}} is the timeline drawn from the exported trace: time from the step's start across, deeper nesting further down, one box per range; on a GPU run the kernels have the top row, "GPU", which a CPU run does not have. The boxes of the forward pass, the loss, backward and the optimizer carry their names, and the three ops with the most self CPU time in the step are marked with a circled 1, 2 and 3 on the longest box of each and named under the plot: look at those boxes first to see where the time goes.
:::
*/
/*md figure timeline: 最后一个记录步里主线程上的区间（嵌套越深越靠下；GPU 上的 kernel 在最上一行），从导出的跟踪画出 | The ranges of the main thread in the last recorded step (deeper nesting further down; on a GPU the kernels in the top row), drawn from the exported trace*/

/*md
::: zh
## 分析器本身的代价

分析器不是免费的：每个区间要读两次时钟、写一条记录，每次分配要多写一条内存事件，GPU 上每个算子还要多记两个 event。下面交替地跑若干个不开分析器的训练步和同样多个开着分析器（CPU 和 CUDA、形状、内存都开）的训练步，每轮取每步的平均时间，取各轮里最快的一次，相除就是开销。再除以每步记下的事件数，得到每个事件的大致代价。PyTorch 的孪生程序用 `torch.profiler` 做同样的测量，`tools/bench` 把两边的比值放在一起。

{{recorded @run}}中：不开分析器每步 {{recorded unprofiled_ms %.2f}} ms，开着 {{recorded profiled_ms %.2f}} ms，两者之比 {{recorded overhead_ratio %.3f}}；每步 {{recorded events_per_step %.0f}} 个事件。{{if recorded overhead_ratio about 1 within 10%}}两者相差不到一成：记录事件的代价比一步的时间小得多。{{elif recorded overhead_ratio > 1}}开着分析器的步更慢，多出的时间就是记录这些事件的代价。{{else}}这次开着分析器的步反而更快：开销比这台机器上计时的噪声（别的程序在抢 CPU）还小，这次运行只能说明它不大。{{end}}

{{fig timeline}} 画的那一步用了 {{metric timeline_end_ms[0] %.2f}} ms。{{if metric timeline_end_ms[0] about metric profiled_ms within 25%}}这和上面开着分析器时的每步时间相近。{{else}}这和上面开着分析器时的每步时间相差超过四分之一，两者量的不是同一件事：图里只有一步，是导出跟踪时记下的那一步，机器上别的程序、分配器第一次要内存，都会让单独的一步变慢；上面的数是多轮里最快一轮的平均，正是为了避开这种噪声。{{end}}

分析器关着时，调度器、模块、优化器和分配器里的每个钩子只是读一个标志、跳一次：每个算子多一次读和一次分支，而一个算子要花微秒。
:::
::: en
## What the profiler itself costs

The profiler is not free: each range reads the clock twice and writes a record, each allocation writes a memory event, and on a GPU each op records two more events. Below, rounds of training steps without the profiler alternate with as many steps under it (CPU and CUDA, shapes and memory all on); each round gives the mean time per step, the fastest round of each kind is kept, and their ratio is the overhead. Divided by the events recorded per step, it gives a rough cost per event. The PyTorch twin measures the same with `torch.profiler`, and `tools/bench` sets the two ratios side by side.

In {{recorded @run}}: {{recorded unprofiled_ms %.2f}} ms per step without the profiler, {{recorded profiled_ms %.2f}} ms with it, a ratio of {{recorded overhead_ratio %.3f}}; {{recorded events_per_step %.0f}} events per step. {{if recorded overhead_ratio about 1 within 10%}}The two are within 10% of each other: recording the events costs far less than a step.{{elif recorded overhead_ratio > 1}}The steps under the profiler are slower; the extra time is the cost of recording those events.{{else}}This time the steps under the profiler were faster: the overhead is smaller than the timing noise on this machine (other programs competing for the CPU), and this run shows only that it is small.{{end}}

The step drawn in {{fig timeline}} took {{metric timeline_end_ms[0] %.2f}} ms. {{if metric timeline_end_ms[0] about metric profiled_ms within 25%}}That is close to the time per step under the profiler above.{{else}}That differs from the time per step under the profiler above by more than a quarter, and the two measure different things: the figure is one step, the one recorded when the trace was exported, and other programs on the machine or the allocator's first requests for memory can make a single step slower; the number above is the mean of the fastest of several rounds, taken that way to avoid such noise.{{end}}

With the profiler off, each hook in the dispatcher, the modules, the optimizer and the allocator reads a flag and branches: one load and one branch per op, against the microseconds an op takes.
:::
*/
// Mean seconds per step over `steps` steps, the device drained at the end.
static int time_steps(ct_module *model, ct_optimizer *opt, batches *data, ct_device dev, long steps,
                      double *seconds) {
  double t0 = ct_cli_seconds();
  for (long i = 0; i < steps; ++i) {
    ct_tensor *x = NULL, *y = NULL;
    ct_cli_exit_if_interrupted(NULL); // Ctrl-C: stop after a whole step
    int rc = next_batch(data, &x, &y);
    if (rc == CT_OK) rc = train_step(model, opt, x, y);
    ct_free(x);
    ct_free(y);
    if (rc != CT_OK) return rc;
  }
  int rc = ct_cli_synchronize(dev);
  if (rc != CT_OK) return rc;
  *seconds = (ct_cli_seconds() - t0) / (double)steps;
  return CT_OK;
}

static int show_overhead(const settings *s, ct_module *model, ct_optimizer *opt, batches *data, ct_device dev,
                         ct_metrics *m) {
  ct_cli_section("overhead");
  ct_profiler_options o = ct_profiler_defaults();
  o.record_shapes = true;
  o.profile_memory = true;
  double best_off = INFINITY, best_on = INFINITY, events = 0;
  for (long r = 0; r < s->rounds; ++r) {
    double off, on;
    if (time_steps(model, opt, data, dev, s->overhead_steps, &off) != CT_OK) return -1;
    ct_profiler *p = ct_profiler_start(&o);
    int rc = p ? time_steps(model, opt, data, dev, s->overhead_steps, &on) : -1;
    if (p && ct_profiler_stop(p) != CT_OK) rc = -1;
    int n = 0;
    ct_profiler_events(p, &n);
    ct_profiler_free(p);
    if (rc != CT_OK) return rc;
    events = (double)n / (double)s->overhead_steps;
    if (off < best_off) best_off = off;
    if (on < best_on) best_on = on;
  }
  double ratio = best_on / best_off;
  printf("%ld rounds of %ld steps each way, the fastest round of each\n", s->rounds, s->overhead_steps);
  printf("unprofiled: %.3f ms/step\nprofiled:   %.3f ms/step (CPU%s, shapes, memory)\n", 1e3 * best_off,
         1e3 * best_on, dev.type == CT_CUDA ? " + CUDA" : "");
  printf("overhead: x%.3f; %.0f events per step, about %.2f us per event\n", ratio, events,
         1e6 * (best_on - best_off) / events);
  ct_metrics_num(m, "unprofiled_ms", 1e3 * best_off);
  ct_metrics_num(m, "profiled_ms", 1e3 * best_on);
  ct_metrics_num(m, "overhead_ratio", ratio);
  ct_metrics_num(m, "profiled_speed", best_off / best_on); // tools/bench: higher is better
  ct_metrics_num(m, "events_per_step", events);
  return CT_OK;
}
/*md output overhead*/
/*md twin overhead*/

/*md
::: zh
## main：把各部分连起来

`main` 读数据、建模型，先不开分析器跑两步（第一步里有 cuBLAS 的初始化和分配器向驱动要内存），然后依次：按计划分析五步并打印表、找最热的算子、核对内存、导出跟踪、测分析器的开销。`--quick` 把批大小减到 32、每轮 2 步。
:::
::: en
## main: putting the parts together

`main` loads the data and builds the model, runs two steps without the profiler (the first holds cuBLAS's initialization and the allocator's requests to the driver), then in turn: profiles five steps on the schedule and prints the table, finds the hottest op, checks the memory, exports the trace and measures the profiler's cost. `--quick` makes the batch 32 and each round 2 steps.
:::
*/
int main(int argc, char **argv) {
  ct_cli cli = {.program = "ch11", .summary = "Chapter 11: profiling a training step (torch.profiler's ways)."};
  settings s = {.batch_size = 128, .channels = 16, .overhead_steps = 10, .rounds = 3, .trace = "ch11_trace.json"};
  ct_cli_opt opts[] = {
      {"batch-size", CT_OPT_INT, &s.batch_size, "training images per step (--quick: 32)"},
      {"channels", CT_OPT_INT, &s.channels, "channels of the first convolution (the second has twice)"},
      {"overhead-steps", CT_OPT_INT, &s.overhead_steps, "steps per round of the overhead measurement (--quick: 2)"},
      {"rounds", CT_OPT_INT, &s.rounds, "rounds of the overhead measurement (--quick: 2)"},
      {"data", CT_OPT_STRING, &s.data, "Fashion-MNIST folder (default: $CT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)"},
      {"trace", CT_OPT_OUTPUT, &s.trace, "where the Chrome trace goes"},
  };
  ct_cli_parse(&cli, argc, argv, opts, (int)(sizeof opts / sizeof opts[0]));
  /*md hide*/
  if (s.batch_size < 1 || s.channels < 1 || s.overhead_steps < 1 || s.rounds < 1) {
    fprintf(stderr, "ch11: --batch-size, --channels, --overhead-steps and --rounds must be >= 1\n"
                    "usage: ch11 [--help] ...\n");
    return 2;
  }
  if (cli.quick) {
    if (s.batch_size == 128) s.batch_size = 32;
    if (s.overhead_steps == 10) s.overhead_steps = 2;
    if (s.rounds == 3) s.rounds = 2;
  }
  // before anything is allocated: the CNN's weights (with grads and the optimizer's state: about 4
  // copies) and a batch's activations, as in chapter 6
  ct_cli_need_memory(&cli, "--channels x --channels x 18 and --channels x 12544 floats (about 4 copies)", 3,
                     (const int64_t[]){s.channels, s.channels * 18 + 12544, 4}, sizeof(float));
  ct_cli_need_memory(&cli, "--batch-size x --channels x 28 x 28 floats (activations: about 6)", 4,
                     (const int64_t[]){s.batch_size < 60000 ? s.batch_size : 60000, s.channels, 784, 6},
                     sizeof(float));
  /*md show*/
  ct_cli_begin(&cli); // "device: ...", ct_manual_seed(seed)
  ct_device dev = cli.device;
  ct_metrics *m = cli.metrics; // device, seed and quick already recorded
  ct_metrics_num(m, "batch_size", (double)s.batch_size);

  ct_dataloader_options lo = ct_dataloader_defaults();
  lo.batch_size = s.batch_size;
  lo.shuffle = true;
  lo.num_workers = 2;
  lo.pin_memory = dev.type == CT_CUDA;
  lo.seed = cli.seed;
  lo.device = dev;
  ct_dataset *ds = ct_fashion_mnist(s.data, true, FMNIST_MEAN, FMNIST_STD);
  batches data = {ds ? ct_dataloader_create(ds, lo) : NULL};
  ct_module *model = build_cnn(s.channels);
  if (!data.dl || !model || ct_module_to(model, dev) != CT_OK || ct_dataloader_start_epoch(data.dl) != CT_OK)
    ct_cli_die(&cli);
  int np = 0;
  ct_param **params = ct_module_parameters(model, &np);
  ct_optimizer *opt = ct_optim_adam(params, np, ct_adam_defaults());
  if (!opt) ct_cli_die(&cli);
  printf("model: chapter 6's CNN with BatchNorm (%" PRId64 " parameters), Adam, batch %ld\n",
         ct_module_num_elements(model), s.batch_size);

  double warm;
  if (time_steps(model, opt, &data, dev, 2, &warm) != CT_OK) ct_cli_die(&cli); // warm-up, unprofiled
  ct_profiler *p = NULL;
  if (profile_steps(model, opt, &data, &p) != CT_OK) ct_cli_die(&cli);
  if (show_table(p, dev, m) != CT_OK || show_hottest(p, dev, m) != CT_OK) ct_cli_die(&cli);
  if (show_memory(model, opt, &data, dev, m) != CT_OK) ct_cli_die(&cli);
  if (show_trace(&s, p, m) != CT_OK) ct_cli_die(&cli);
  ct_profiler_free(p);
  if (show_overhead(&s, model, opt, &data, dev, m) != CT_OK) ct_cli_die(&cli);
  if (ct_metrics_close(m) != CT_OK) ct_cli_die(&cli);
  ct_optimizer_free(opt);
  ct_module_free(model);
  ct_dataloader_free(data.dl);
  ct_dataset_free(ds);
  return 0;
}

/*md
::: zh
## 练习

1. 把表改成按 `cpu_time_total` 排序（`ct_profiler_table` 的第二个参数），再按 `count`。排在最前面的变成了什么？为什么 `Sequential.forward` 的 CPU 总时间比它所有子模块的 CPU 总时间之和还多一点？
2. 用 `--batch-size 256` 和 `--batch-size 16` 各跑一次。最热的算子变了吗？每个事件的代价（“overhead” 一节）变了吗，开销的倍数呢？为什么批越小，分析器的相对开销越大？
3. 在 `train_step` 里把 `ct_record_function_begin("loss")` 后面的 `ct_record_function_end()` 挪到 `backward` 的区间之后（让区间交错）。导出的跟踪还能通过 `chapter.ch11_trace` 的嵌套检查吗？运行时怎样处理不配对的区间？
4. 打开导出的 `ch11_trace.json`（Perfetto 或 chrome://tracing），找到 DataLoader 工作线程的轨道。它们在主线程的哪一段时间里工作？
5. 在有 GPU 的机器上，比较一个 `ct::gemm` 行的自身 CPU 时间和自身 CUDA 时间。哪个大？把训练步里读一次损失值（`ct_item`）加进去，时间线上会出现什么？
:::
::: en
## Exercises

1. Sort the table by `cpu_time_total` (the second argument of `ct_profiler_table`), then by `count`. What comes first now? Why is `Sequential.forward`'s total CPU time a little more than the sum of its children's?
2. Run with `--batch-size 256` and with `--batch-size 16`. Does the hottest op change? Does the cost per event (the "overhead" section) change, and the overhead ratio? Why does the profiler cost relatively more the smaller the batch?
3. In `train_step`, move the `ct_record_function_end()` that follows `ct_record_function_begin("loss")` to after the `backward` range (so the ranges overlap). Does the exported trace still pass `chapter.ch11_trace`'s nesting check? How does the runtime handle ranges that do not pair up?
4. Open the exported `ch11_trace.json` (Perfetto or chrome://tracing) and find the DataLoader workers' tracks. During which part of the main thread's step do they work?
5. On a machine with a GPU, compare a `ct::gemm` row's self CPU time with its self CUDA time. Which is larger? Add a read of the loss (`ct_item`) to the training step: what appears on the timeline?
:::
*/
